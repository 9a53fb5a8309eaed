/*
 * test_lua_bccache.c -- Lua states of one process share compiled modules (lua_bccache.c): a
 * module required in a second state runs the code the first state compiled (the file is not
 * read again) while the file keeps its size and modification time, is compiled anew once it
 * changed (a script reload sees edited modules), keeps its file name and lines in errors, and a
 * missing or broken module gives the messages of LuaJIT's own searcher.
 */
#include "luahost/lua_state.h"

#include <lauxlib.h>

#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

static char dir[256];

static void write_file(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) abort();
    fputs(text, f);
    fclose(f);
}

static lua_State *new_state(void)
{
    char script[512], err[1024];
    snprintf(script, sizeof(script), "%s/script.lua", dir);
    rmq_lua_host_t h = {.role = "consume", .script_path = script, .thread_count = 1};
    lua_State *L = rmq__lua_new(&h, err, sizeof(err));
    if (!L) fprintf(stderr, "rmq__lua_new: %s\n", err);
    return L;
}

/* Run code in L; its one result (or the error) as a malloc'd string. */
static char *run(lua_State *L, const char *code)
{
    int rc = luaL_loadstring(L, code);
    if (rc == 0) rc = lua_pcall(L, 0, 1, 0);
    const char *s = lua_tostring(L, -1);
    char *out = strdup(s ? s : "(nil)");
    lua_pop(L, 1);
    return out;
}

#define CHECK_RUN(L, code, want)                                                                   \
    do {                                                                                           \
        char *got_ = run(L, code);                                                                 \
        CHECKF(strstr(got_, want) != NULL, "%s -> '%s', wanted '%s'", code, got_, want);           \
        free(got_);                                                                                \
    } while (0)

static void test_shared_modules(void)
{
    snprintf(dir, sizeof(dir), "/tmp/rmq_test_bccache_%d", (int)getpid());
    mkdir(dir, 0700);
    write_file("bcmod.lua", "local M = { v = 'first' }\n"
                            "function M.fail() error('boom') end\n"
                            "return M\n");
    write_file("bad.lua", "return {\n");
    lua_State *a = new_state();
    CHECK(a != NULL);
    if (!a) return;
    CHECK_RUN(a, "return require('bcmod').v", "first");
    /* Other bytes of the same size and modification time: a new state runs what the first
     * one compiled (the file is not read again). */
    char path[512];
    snprintf(path, sizeof(path), "%s/bcmod.lua", dir);
    struct stat sb;
    CHECK(stat(path, &sb) == 0);
    write_file("bcmod.lua", "local M = { v = 'xxxxx' }\n"
                            "function M.fail() error('boom') end\n"
                            "return M\n");
    struct timespec times[2] = {sb.st_atim, sb.st_mtim};
    CHECK(utimensat(AT_FDCWD, path, times, 0) == 0);
    lua_State *b = new_state();
    CHECK(b != NULL);
    if (!b) return;
    CHECK_RUN(b, "return require('bcmod').v", "first");
    /* Changed (size and time): the next state compiles the new text. */
    write_file("bcmod.lua", "return { v = 'second version' }\n");
    times[1].tv_sec += 2;
    CHECK(utimensat(AT_FDCWD, path, times, 0) == 0);
    lua_State *c2 = new_state();
    CHECK(c2 != NULL);
    if (!c2) return;
    CHECK_RUN(c2, "return require('bcmod').v", "second version");
    lua_close(c2);
    /* Errors still name the file and the line. */
    char where[512];
    snprintf(where, sizeof(where), "%s/bcmod.lua:2: boom", dir);
    CHECK_RUN(b, "local ok, e = pcall(require('bcmod').fail); return e", where);
    CHECK_RUN(b, "return debug.getinfo(require('bcmod').fail, 'S').source", "@");
    CHECK_RUN(b, "return debug.getinfo(require('bcmod').fail, 'S').source", "/bcmod.lua");
    /* LuaJIT's messages for a module that is missing or does not compile, in both states. */
    char nofile[512];
    snprintf(nofile, sizeof(nofile), "no file '%s/nope_mod.lua'", dir);
    lua_State *states[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        CHECK_RUN(states[i], "local ok, e = pcall(require, 'nope_mod'); return e",
                  "module 'nope_mod' not found:");
        CHECK_RUN(states[i], "local ok, e = pcall(require, 'nope_mod'); return e", nofile);
        CHECK_RUN(states[i], "local ok, e = pcall(require, 'bad'); return e",
                  "error loading module 'bad' from file '");
        CHECK_RUN(states[i], "local ok, e = pcall(require, 'bad'); return e",
                  "bad.lua:2: unexpected symbol near '<eof>'");
    }
    /* The runtime's own modules load in every state (rmq.core ran in both already). */
    CHECK_RUN(b, "return type(require('rmq.dispatch').new)", "function");
    lua_close(a);
    lua_close(b);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

int main(void)
{
    test_shared_modules();
    return test_report("test_lua_bccache");
}
