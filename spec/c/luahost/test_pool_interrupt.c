/*
 * test_pool_interrupt.c -- interrupting a handler never touches a Lua state from another thread.
 * The consume-timeout watchdog (loop thread) and the stopping pool (its reaper thread) interrupt
 * a handler stuck in an interpreted loop; the handler must come back interrupted, and every
 * lua_sethook() call must come from the thread that created that state (LuaJIT's hook and trace
 * state are not thread-safe). The test interposes luaL_newstate and lua_sethook to see which
 * thread calls them.
 */
#include "luahost/consume_pool.h"

#include <dlfcn.h>
#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"
#include "test_pool_loop.h"

/* ---- interposed LuaJIT entry points --------------------------------------------------- */

static _Thread_local lua_State *created_here; /* the state this thread created */
static int sethook_calls, sethook_foreign;    /* atomics: called from several threads */

lua_State *luaL_newstate(void)
{
    static lua_State *(*real)(void);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "luaL_newstate");
    lua_State *L = real();
    created_here = L;
    return L;
}

int lua_sethook(lua_State *L, lua_Hook func, int mask, int count)
{
    static int (*real)(lua_State *, lua_Hook, int, int);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "lua_sethook");
    __atomic_add_fetch(&sethook_calls, 1, __ATOMIC_RELAXED);
    if (L != created_here) __atomic_add_fetch(&sethook_foreign, 1, __ATOMIC_RELAXED);
    return real(L, func, mask, count);
}

/* ---- the pool ------------------------------------------------------------------------- */

static rmq_pool_t *start(const char *path, int64_t timeout_ms)
{
    char err[1024];
    rmq_pool_t *p = pool_start_script(path, 1, pool_count_done, timeout_ms, err, sizeof(err));
    if (!p) fprintf(stderr, "start: %s\n", err);
    return p;
}

/* The watchdog (this thread runs the loop) interrupts a handler past consume_timeout. */
static void test_watchdog(const char *path)
{
    rmq_pool_t *p = start(path, 200);
    CHECK(p != NULL);
    if (!p) return;
    static test_batch1_t t;
    test_batch1(&t, "stuck");
    rmq__pool_submit(p, &t.b);
    CHECK(run_until(1, 30));
    CHECK(t.b.status == RMQ_CONSUME_RECONSUME_LATER && t.b.handler_error == 1);
    /* The thread is usable again. */
    test_batch1(&t, "ok");
    rmq__pool_submit(p, &t.b);
    CHECK(run_until(2, 10));
    CHECK(t.b.status == RMQ_CONSUME_SUCCESS && t.b.handler_error == 0);
    CHECK(pool_stop(p, 0, 20));
    /* The interposer sees the runtime's calls (else the next check would prove nothing). */
    CHECK(sethook_calls > 0);
    CHECKF(sethook_foreign == 0, "%d lua_sethook call(s) on a state from another thread",
           sethook_foreign);
}

/* Stopping the pool interrupts a handler still running after the grace period; the batch comes
 * back NOT_RUN. */
static void test_stop(const char *path)
{
    rmq_pool_t *p = start(path, 15 * 60000);
    CHECK(p != NULL);
    if (!p) return;
    static test_batch1_t t;
    test_batch1(&t, "stuck");
    rmq__pool_submit(p, &t.b);
    int64_t dl = rmq__mono_ms() + (int64_t)(10000 * scale);
    while (rmq__pool_running(p) == 0 && rmq__mono_ms() < dl) usleep(1000);
    CHECK(rmq__pool_running(p) == 1);
    CHECK(pool_stop(p, 0, 40));
    CHECK(ndone == 1 && t.b.status == RMQ_CONSUME_NOT_RUN);
    CHECKF(sethook_foreign == 0, "%d lua_sethook call(s) on a state from another thread",
           sethook_foreign);
}

int main(void)
{
    pool_loop_open();
    char *path = test_write_script("test_pool_interrupt", "stuck", TEST_POOL_STUCK_SCRIPT);
    test_watchdog(path);
    test_stop(path);
    test_drop_script(path);
    pool_loop_close();
    return test_report("test_pool_interrupt");
}
