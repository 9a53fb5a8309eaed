/*
 * test_loop.h -- for C tests that drive one libuv loop themselves (transport, producer): the
 * loop, the timeout scale, WAIT_UNTIL and run_for. Header only (see test_util.h); main sets
 * them up with test_loop_open and closes the loop with test_loop_close.
 */
#ifndef RMQ_TEST_LOOP_H
#define RMQ_TEST_LOOP_H

#include <uv.h>

#include "base/common.h"
#include "base/log.h"
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

/* The timeout scale, the log level (errors only; debug with RMQ_TEST_DEBUG set, and then the
 * debug categories debug_cats when not NULL), the loop and its guard timer. */
static inline void test_loop_open(const char *debug_cats)
{
    scale = test_scale();
    rmq_log_set_level(RMQ_LOG_ERROR);
    if (getenv("RMQ_TEST_DEBUG")) {
        rmq_log_set_level(RMQ_LOG_DEBUG);
        if (debug_cats) rmq_log_set_debug(debug_cats, NULL, 0);
    }
    loop = malloc(sizeof(*loop));
    uv_loop_init(loop);
    uv_timer_init(loop, &guard);
}

/* Closes the guard timer, runs the loop until every handle is closed, closes and frees the
 * loop. Returns what uv_loop_close returned (0, or UV_EBUSY when a handle was left open). */
static inline int test_loop_close(void)
{
    uv_close((uv_handle_t *)&guard, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    int rc = uv_loop_close(loop);
    free(loop);
    return rc;
}

#endif
