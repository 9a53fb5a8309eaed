/*
 * lua_bccache.c -- compiled Lua modules shared by the process's Lua states: the first state
 * that requires a module compiles its file and keeps the bytecode (lua_dump, with debug info,
 * so error messages and tracebacks name the same file and lines); every later state (one per
 * consume thread, all created at start-up) loads that bytecode instead of lexing and parsing
 * the source again. It takes the place of package.loaders[2], the Lua file searcher, and
 * searches package.path as that one does (package.searchpath), with the same messages.
 * An entry is used only while its file keeps the device, inode, size and modification time it
 * had when compiled: a module edited before a script reload (SIGHUP, --watch) is compiled anew.
 *
 * Ownership: the cache is global and kept until exit (one entry per module file and version).
 * Threads: any thread; the cache is guarded by a mutex (states are created in parallel).
 */
#include "lua_state.h"

#include <lauxlib.h>

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <uv.h>

typedef struct bc_stamp {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} bc_stamp_t;

typedef struct bc_entry {
    struct bc_entry *next;
    char *path;
    bc_stamp_t stamp;
    char *code;
    size_t len;
} bc_entry_t;

static uv_once_t bc_once = UV_ONCE_INIT;
static uv_mutex_t bc_mu;
static bc_entry_t *bc_head;

static void bc_init(void)
{
    uv_mutex_init(&bc_mu);
}

static int bc_write(lua_State *L, const void *p, size_t sz, void *ud)
{
    (void)L;
    rmq__buf_append(ud, p, sz);
    return 0;
}

static int bc_stamp(const char *path, bc_stamp_t *st)
{
    struct stat sb;
    if (stat(path, &sb) != 0) return -1;
    memset(st, 0, sizeof(*st));
    st->dev = sb.st_dev;
    st->ino = sb.st_ino;
    st->size = sb.st_size;
    st->mtime = sb.st_mtim;
    return 0;
}

static int bc_same(const bc_stamp_t *a, const bc_stamp_t *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* The cached bytecode of path as stamped in *code / *len (owned by the cache), or 0. */
static int bc_get(const char *path, const bc_stamp_t *st, char **code, size_t *len)
{
    int found = 0;
    uv_mutex_lock(&bc_mu);
    for (bc_entry_t *e = bc_head; e; e = e->next)
        if (!strcmp(e->path, path) && bc_same(&e->stamp, st)) {
            *code = e->code;
            *len = e->len;
            found = 1;
            break;
        }
    uv_mutex_unlock(&bc_mu);
    return found;
}

static void bc_put(const char *path, const bc_stamp_t *st, const char *code, size_t len)
{
    uv_mutex_lock(&bc_mu);
    for (bc_entry_t *e = bc_head; e; e = e->next)
        if (!strcmp(e->path, path) && bc_same(&e->stamp, st)) {
            uv_mutex_unlock(&bc_mu);
            return; /* another state was first */
        }
    bc_entry_t *e = rmq__xcalloc(1, sizeof(*e));
    e->path = rmq__xstrdup(path);
    e->stamp = *st;
    e->code = rmq__xmalloc(len);
    memcpy(e->code, code, len);
    e->len = len;
    e->next = bc_head;
    bc_head = e;
    uv_mutex_unlock(&bc_mu);
}

/* package.loaders[2]: searcher(name) -> loader function, or the "no file" message. */
static int bc_searcher(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "searchpath");
    lua_pushstring(L, name);
    lua_getfield(L, -3, "path");
    if (!lua_isstring(L, -1)) return luaL_error(L, "'package.path' must be a string");
    lua_call(L, 2, 2);
    if (lua_isnil(L, -2)) return 1; /* the message of every file tried */
    lua_pop(L, 1);
    const char *path = lua_tostring(L, -1);
    char *code;
    size_t len;
    /* Stamped before the read: a file changed while it is compiled gets a stale stamp, so the
     * next state compiles it again rather than keep the old text under the new stamp. */
    bc_stamp_t st;
    int stamped = bc_stamp(path, &st) == 0;
    if (stamped && bc_get(path, &st, &code, &len)) {
        /* Entries are never removed, so the bytes stay valid without the lock. */
        if (luaL_loadbuffer(L, code, len, path) == 0) return 1;
    } else if (luaL_loadfile(L, path) == 0) {
        rmq_buf_t b;
        rmq__buf_init(&b);
        if (stamped && lua_dump(L, bc_write, &b) == 0 && b.len) bc_put(path, &st, b.data, b.len);
        rmq__buf_free(&b);
        return 1;
    }
    return luaL_error(L, "error loading module '%s' from file '%s':\n\t%s", name, path,
                      lua_tostring(L, -1));
}

void rmq__lua_bccache_install(lua_State *L)
{
    uv_once(&bc_once, bc_init);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "loaders");
    if (lua_istable(L, -1)) {
        lua_pushcfunction(L, bc_searcher);
        lua_rawseti(L, -2, 2);
    }
    lua_pop(L, 2);
}
