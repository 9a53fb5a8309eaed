/*
 * test_pool_loop.h -- the loop a consume-pool test drives: count done batches, wait for them or
 * for the pool's close callback. Header-only; each test defines its own done callback, which
 * increments `ndone`.
 */
#ifndef RMQ_TEST_POOL_LOOP_H
#define RMQ_TEST_POOL_LOOP_H

#include <unistd.h>
#include <uv.h>

#include "../../runtime/common.h"

static double scale = 1;
static uv_loop_t loop;
static int ndone;  /* batches returned through the done callback */
static int closed; /* the pool's close callback ran */

static void on_closed(void *ud)
{
    (void)ud;
    closed = 1;
}

/* Run the loop until ndone >= n (or closed when n < 0); 0 on time-out. */
static int run_until(int n, double secs)
{
    int64_t deadline = rmq__mono_ms() + (int64_t)(secs * 1000 * scale);
    while (n >= 0 ? ndone < n : !closed) {
        if (rmq__mono_ms() > deadline) return 0;
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    return 1;
}

#endif
