/*
 * test_memlimit.c -- the Lua state memory limit (lua_memlimit.c): its count matches LuaJIT's own,
 * an armed limit turns the allocation past it into "not enough memory" (in JIT-compiled loops,
 * in C functions, for FFI cdata), a handler that catches that error gets only the margin more,
 * and a disarmed limit refuses nothing.
 */
#include "luahost/lua_memlimit.h"
#include "test_util.h"

#include <lauxlib.h>
#include <lualib.h>

#define MiB (1024u * 1024u)

/* Run code in L with the limit armed; returns lua_pcall's code (the message is left in msg). */
static int run(lua_State *L, rmq_memlimit_t *ml, const char *code, char *msg, size_t size)
{
    CHECK(luaL_loadstring(L, code) == 0);
    rmq__memlimit_arm(ml, 1);
    int rc = lua_pcall(L, 0, 0, 0);
    rmq__memlimit_arm(ml, 0);
    snprintf(msg, size, "%s", rc ? lua_tostring(L, -1) : "");
    lua_settop(L, 0);
    return rc;
}

static size_t gc_bytes(lua_State *L)
{
    return (size_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024 + (size_t)lua_gc(L, LUA_GCCOUNTB, 0);
}

/* A new state with its libraries open and the limit (disarmed) installed in ml. */
static lua_State *limited_state(rmq_memlimit_t *ml, size_t limit)
{
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    rmq__memlimit_install(L, ml, limit);
    return L;
}

static void test_refuses_past_the_limit(void)
{
    static const char *const runaway[] = {
        /* compiled by the JIT after a few rounds */
        "local t, i = {}, 0 while true do i = i + 1 t[i] = {i, i, i} end",
        "local t, i = {}, 0 while true do i = i + 1 t[i] = string.rep('x', 4096) .. i end",
        "local ffi = require 'ffi' local t = {} for i = 1, 1e9 do t[i] = ffi.new('char[?]', 65536) end",
        "local s = string.rep('x', 64 * 1024 * 1024)", /* one allocation past the limit */
    };
    for (size_t k = 0; k < sizeof(runaway) / sizeof(*runaway); k++) {
        rmq_memlimit_t ml;
        lua_State *L = limited_state(&ml, 8 * MiB);
        CHECK(ml.used == gc_bytes(L));
        char msg[256];
        for (int round = 0; round < 3; round++) {
            int rc = run(L, &ml, runaway[k], msg, sizeof(msg));
            CHECKF(rc == LUA_ERRMEM, "code %zu round %d: rc %d (%s)", k, round, rc, msg);
            CHECKF(strstr(msg, "not enough memory") != NULL, "%s", msg);
            CHECKF(ml.tripped > 0 && ml.tripped <= 8 * MiB, "tripped at %zu", ml.tripped);
            CHECKF(ml.peak <= 8 * MiB, "peak %zu", ml.peak);
            CHECKF(ml.used == gc_bytes(L), "count %zu, LuaJIT %zu", ml.used, gc_bytes(L));
            ml.tripped = 0;
            lua_gc(L, LUA_GCCOLLECT, 0);
            CHECKF(ml.used < MiB, "after a collection %zu", ml.used);
        }
        lua_close(L);
    }
}

static void test_margin_then_refused_again(void)
{
    rmq_memlimit_t ml;
    lua_State *L = limited_state(&ml, 8 * MiB);
    char msg[256];
    /* The handler catches the first refusal and goes on: it gets the margin (2 MiB here), then
     * every allocation is refused again. */
    int rc = run(L, &ml,
                 "local ok = pcall(function() local t = {} for i = 1, 1e9 do t[i] = {i} end end)\n"
                 "assert(not ok)\n"
                 "local t = {} for i = 1, 1e9 do t[i] = {i} end",
                 msg, sizeof(msg));
    CHECKF(rc == LUA_ERRMEM, "rc %d (%s)", rc, msg);
    CHECKF(ml.refused >= 2, "refused %zu", ml.refused);
    CHECKF(ml.peak <= 10 * MiB, "peak %zu past limit + margin", ml.peak);
    lua_close(L);
}

static void test_disarmed_refuses_nothing(void)
{
    rmq_memlimit_t ml;
    lua_State *L = limited_state(&ml, 2 * MiB);
    CHECK(luaL_loadstring(L, "BIG = string.rep('y', 4 * 1024 * 1024)") == 0);
    CHECK(lua_pcall(L, 0, 0, 0) == 0);
    CHECK(ml.refused == 0 && ml.tripped == 0);
    CHECK(ml.used == gc_bytes(L) && ml.used > 4 * MiB);
    /* Armed now, the state is already over: the next allocation is refused. */
    char msg[256];
    CHECK(run(L, &ml, "local t = {} for i = 1, 100 do t[i] = {} end", msg, sizeof(msg)) ==
          LUA_ERRMEM);
    rmq__memlimit_uninstall(L, &ml);
    CHECK(luaL_loadstring(L, "local t = {} for i = 1, 1e5 do t[i] = {i} end") == 0);
    rmq__memlimit_arm(&ml, 1); /* uninstalled: the record is no longer asked */
    CHECK(lua_pcall(L, 0, 0, 0) == 0);
    lua_close(L);
}

int main(void)
{
    test_refuses_past_the_limit();
    test_margin_then_refused_again();
    test_disarmed_refuses_nothing();
    return test_report("test_memlimit");
}
