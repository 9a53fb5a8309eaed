/*
 * test_loop.h -- for C tests that drive one libuv loop themselves (transport, producer): the
 * loop, the timeout scale, WAIT_UNTIL and run_for. Header only (see test_util.h); main sets
 * `loop` up (and `scale = test_scale()`), then uv_timer_init(loop, &guard).
 */
#ifndef RMQ_TEST_LOOP_H
#define RMQ_TEST_LOOP_H

#include <uv.h>

#include "base/common.h"
#include "test_util.h"

static uv_loop_t *loop;
static double scale = 1.0;
static uv_timer_t guard; /* ticks while waiting so that UV_RUN_ONCE returns */

static inline void on_guard(uv_timer_t *t)
{
    (void)t;
}

/* Run the loop until cond holds or ms (scaled) pass; CHECK(cond) at the end. */
#define WAIT_UNTIL(cond, ms)                                                                       \
    do {                                                                                           \
        int64_t dl_ = rmq__mono_ms() + (int64_t)((ms)*scale);                                      \
        uv_timer_start(&guard, on_guard, 5, 5);                                                    \
        while (!(cond) && rmq__mono_ms() < dl_)                                                    \
            uv_run(loop, UV_RUN_ONCE);                                                             \
        uv_timer_stop(&guard);                                                                     \
        CHECK(cond);                                                                               \
    } while (0)

/* Run the loop for ms (only where the point is that something does NOT happen). */
static inline void run_for(int64_t ms)
{
    int64_t dl = rmq__mono_ms() + ms;
    uv_timer_start(&guard, on_guard, 5, 5);
    while (rmq__mono_ms() < dl)
        uv_run(loop, UV_RUN_ONCE);
    uv_timer_stop(&guard);
}

#endif
