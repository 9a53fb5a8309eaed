/*
 * lua_state.c -- creating the LuaJIT states that run consumer scripts, and the host side of the
 * `rmq` module (package.loaded["rmq.host"]: role, thread, group, log).
 *
 * Ownership: rmq__lua_new() returns a state the caller owns. Nothing global is kept.
 * Threads: any thread; a state is used only by the thread that holds it.
 */
#include "lua_state.h"

#include "base/log.h"

#include <lauxlib.h>
#include <lualib.h>

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef RMQLUA_LUA_DIR /* the source tree's lua/ */
#define RMQLUA_LUA_DIR "lua"
#endif
#ifndef RMQLUA_LUA_FROM_BIN /* the installed modules, relative to the binary's folder */
#define RMQLUA_LUA_FROM_BIN "../share/rmqlua/lua"
#endif
#ifndef RMQLUA_LUA_FROM_LIB /* ... relative to the library's folder */
#define RMQLUA_LUA_FROM_LIB "../share/rmqlua/lua"
#endif
#ifndef RMQLUA_LUA_INSTALLED
#define RMQLUA_LUA_INSTALLED "/usr/local/share/rmqlua/lua"
#endif

static char lua_dir[PATH_MAX];
static pthread_once_t lua_dir_once = PTHREAD_ONCE_INIT;

static int has_modules(const char *dir)
{
    char p[PATH_MAX];
    if ((size_t)snprintf(p, sizeof(p), "%s/rmq/init.lua", dir) >= sizeof(p)) return 0;
    return access(p, R_OK) == 0;
}

/* dir/rel into lua_dir when it holds the modules; 1 if so. */
static int try_beside(const char *file, const char *rel)
{
    char real[PATH_MAX], cand[PATH_MAX];
    if (!file || !realpath(file, real)) return 0;
    char *slash = strrchr(real, '/');
    if (!slash) return 0;
    *slash = '\0';
    if ((size_t)snprintf(cand, sizeof(cand), "%s/%s", real, rel) >= sizeof(cand)) return 0;
    if (!has_modules(cand) || !realpath(cand, lua_dir)) return 0;
    return 1;
}

static void find_lua_dir(void)
{
    Dl_info info;
    if (dladdr((void *)rmq__lua_dir, &info) && info.dli_fname) {
        /* In a shared library: beside it. In the executable (dladdr then gives argv[0]): beside
         * /proc/self/exe, or argv[0] when /proc is not mounted. */
        if (strstr(info.dli_fname, ".so")) {
            if (try_beside(info.dli_fname, RMQLUA_LUA_FROM_LIB)) return;
        } else if (try_beside("/proc/self/exe", RMQLUA_LUA_FROM_BIN) ||
                   (strchr(info.dli_fname, '/') &&
                    try_beside(info.dli_fname, RMQLUA_LUA_FROM_BIN))) {
            return;
        }
    }
    snprintf(lua_dir, sizeof(lua_dir), "%s",
             has_modules(RMQLUA_LUA_DIR) ? RMQLUA_LUA_DIR : RMQLUA_LUA_INSTALLED);
}

const char *rmq__lua_dir(void)
{
    const char *d = getenv("RMQLUA_LUA_DIR");
    if (d && *d) return d;
    pthread_once(&lua_dir_once, find_lua_dir);
    return lua_dir;
}

/* rmq.host.log(level, text): level 0 error .. 3 debug (debug needs the "lua" category). A
 * consume state's lines carry its thread (1-based) as a key field; upvalue 1 is its index. */
static int host_log(lua_State *L)
{
    int lv = (int)luaL_checkinteger(L, 1);
    const char *s = luaL_checkstring(L, 2);
    int ti = (int)lua_tointeger(L, lua_upvalueindex(1));
    rmq_log_field_t f = {"thread", NULL, ti + 1};
    if (lv <= RMQ_LOG_ERROR) lv = RMQ_LOG_ERROR;
    else if (lv >= RMQ_LOG_DEBUG) lv = RMQ_LOG_DEBUG;
    if ((lv == RMQ_LOG_DEBUG && !(rmq__log_debug & RMQ_DBG_LUA)) || lv > rmq__log_level) return 0;
    rmq__logf(lv, "lua", &f, ti >= 0, "%s", s);
    return 0;
}

int rmq__lua_traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

int rmq__lua_pcall(lua_State *L, int nargs, int nres, char *errstr, size_t errstr_size)
{
    int base = lua_gettop(L) - nargs; /* the function's index */
    lua_pushcfunction(L, rmq__lua_traceback);
    lua_insert(L, base);
    int rc = lua_pcall(L, nargs, nres, base);
    lua_remove(L, base);
    if (rc != 0) {
        const char *m = lua_tostring(L, -1);
        rmq__seterr(errstr, errstr_size, "%s", m ? m : "(error without a message)");
        lua_pop(L, 1);
        return RMQ_ERR_LUA;
    }
    return 0;
}

int rmq__lua_getfield_mod(lua_State *L, const char *modname, const char *field, char *errstr,
                          size_t errstr_size)
{
    lua_getglobal(L, "require");
    lua_pushstring(L, modname);
    if (rmq__lua_pcall(L, 1, 1, errstr, errstr_size)) return RMQ_ERR_LUA;
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        rmq__seterr(errstr, errstr_size, "module %s is not a table", modname);
        return RMQ_ERR_LUA;
    }
    lua_getfield(L, -1, field);
    lua_remove(L, -2);
    return 0;
}

/* package.path = <script dir>/?.lua;<script dir>/?/init.lua;<lua dir>/?.lua;<lua dir>/?/init.lua;
 * then the default. */
static void set_path(lua_State *L, const char *script_path)
{
    const char *ld = rmq__lua_dir();
    rmq_buf_t b;
    rmq__buf_init(&b);
    if (script_path) {
        const char *slash = strrchr(script_path, '/');
        if (slash) {
            int n = (int)(slash - script_path);
            if (n == 0) n = 1; /* "/x.lua" */
            rmq__buf_appendf(&b, "%.*s/?.lua;%.*s/?/init.lua;", n, script_path, n, script_path);
        } else {
            rmq__buf_appendf(&b, "./?.lua;./?/init.lua;");
        }
    }
    rmq__buf_appendf(&b, "%s/?.lua;%s/?/init.lua;", ld, ld);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "path");
    const char *def = lua_tostring(L, -1);
    if (def) rmq__buf_append(&b, def, strlen(def));
    lua_pop(L, 1);
    lua_pushlstring(L, b.data, b.len);
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);
    rmq__buf_free(&b);
}

/*
 * print, as Lua's (arguments through tostring, separated by tabs, then a newline), but the whole
 * line goes to stdout in one fwrite: the consume threads share stdout, and Lua's print writes
 * each argument and the newline apart, so two threads' lines came out interleaved ("got 1got 2"
 * then two newlines).
 */
static int whole_line_print(lua_State *L)
{
    int n = lua_gettop(L);
    luaL_Buffer b;
    lua_getglobal(L, "tostring");
    luaL_buffinit(L, &b);
    for (int i = 1; i <= n; i++) {
        lua_pushvalue(L, n + 1); /* tostring */
        lua_pushvalue(L, i);
        lua_call(L, 1, 1);
        if (!lua_isstring(L, -1)) return luaL_error(L, "'tostring' must return a string to 'print'");
        if (i > 1) luaL_addchar(&b, '\t');
        luaL_addvalue(&b);
    }
    luaL_addchar(&b, '\n');
    luaL_pushresult(&b);
    size_t len;
    const char *line = lua_tolstring(L, -1, &len);
    fwrite(line, 1, len, stdout);
    return 0;
}

lua_State *rmq__lua_new(const rmq_lua_host_t *host, char *errstr, size_t errstr_size)
{
    lua_State *L = luaL_newstate();
    if (!L) {
        rmq__seterr(errstr, errstr_size, "cannot create a Lua state (out of memory)");
        return NULL;
    }
    luaL_openlibs(L);
    lua_register(L, "print", whole_line_print);
    rmq__lua_bccache_install(L);
    set_path(L, host->script_path);

    /* package.loaded["rmq.host"] */
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "loaded");
    lua_createtable(L, 0, 8);
    lua_pushstring(L, host->role ? host->role : "consume");
    lua_setfield(L, -2, "role");
    if (host->script_path) {
        lua_pushstring(L, host->script_path);
        lua_setfield(L, -2, "script_path");
    }
    if (host->consumer_group) {
        lua_pushstring(L, host->consumer_group);
        lua_setfield(L, -2, "consumer_group");
    }
    lua_pushinteger(L, host->thread_index);
    lua_setfield(L, -2, "thread_index");
    lua_pushinteger(L, host->thread_count);
    lua_setfield(L, -2, "thread_count");
    lua_pushstring(L, RMQLUA_VERSION);
    lua_setfield(L, -2, "version");
    lua_pushinteger(L, strcmp(host->role ? host->role : "consume", "consume") ? -1
                                                                              : host->thread_index);
    lua_pushcclosure(L, host_log, 1);
    lua_setfield(L, -2, "log");
    if (host->shdicts) { /* an address: rmq.shared casts it back (48-bit, exact in a double) */
        lua_pushnumber(L, (lua_Number)(uintptr_t)host->shdicts);
        lua_setfield(L, -2, "shdicts");
    }
    if (host->flow) {
        lua_pushnumber(L, (lua_Number)(uintptr_t)host->flow);
        lua_setfield(L, -2, "flow");
    }
    if (host->ngx_shim != RMQ_NGX_UNKNOWN) {
        lua_pushboolean(L, host->ngx_shim == RMQ_NGX_ON);
        lua_setfield(L, -2, "ngx_shim");
    }
    lua_setfield(L, -2, "rmq.host");
    lua_pop(L, 2);

    /* package.preload["rmq.json.c"]: the decoder behind rmq.json (json_decode.c). */
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "preload");
    lua_pushcfunction(L, rmq_luaopen_json);
    lua_setfield(L, -2, "rmq.json.c");
    lua_pop(L, 2);

    /* The core FFI module: cdefs and the ABI check. */
    char err[1024];
    lua_getglobal(L, "require");
    lua_pushstring(L, "rmq.core");
    if (rmq__lua_pcall(L, 1, 0, err, sizeof(err))) {
        rmq__seterr(errstr, errstr_size, "cannot load the rmq Lua runtime from %s: %s", rmq__lua_dir(),
                    err);
        lua_close(L);
        return NULL;
    }
    /* rmq.co before any script: coroutine.resume/wrap pass runtime waits through (co.lua). */
    lua_getglobal(L, "require");
    lua_pushstring(L, "rmq.co");
    if (rmq__lua_pcall(L, 1, 0, err, sizeof(err))) {
        rmq__seterr(errstr, errstr_size, "cannot load rmq.co from %s: %s", rmq__lua_dir(), err);
        lua_close(L);
        return NULL;
    }
    return L;
}
