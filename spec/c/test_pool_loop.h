/*
 * test_pool_loop.h -- the loop a consume-pool test drives: count done batches, wait for them or
 * for the pool's close callback; start a pool on it and stop it; a batch of one message.
 * Header-only, included after test_util.h (CHECK); a test's done callback increments `ndone`
 * (pool_count_done does only that).
 */
#ifndef RMQ_TEST_POOL_LOOP_H
#define RMQ_TEST_POOL_LOOP_H

#include <stdio.h>
#include <unistd.h>
#include <uv.h>

#include "base/common.h"
#include "luahost/consume_pool.h"

static double scale = 1;
static uv_loop_t loop;
static int ndone;  /* batches returned through the done callback */
static int closed; /* the pool's close callback ran */

static void on_closed(void *ud)
{
    (void)ud;
    closed = 1;
}

/* A done callback that only counts the batch. */
static inline void pool_count_done(void *ud, rmq_batch_t *b)
{
    (void)ud;
    (void)b;
    ndone++;
}

/* main's first step: the timeout scale and the loop. */
static inline void pool_loop_open(void)
{
    scale = test_scale();
    uv_loop_init(&loop);
}

/* main's last step before its report: what is left on the loop run, the loop closed. */
static inline void pool_loop_close(void)
{
    uv_run(&loop, UV_RUN_NOWAIT);
    uv_loop_close(&loop);
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

/* Start a pool with options o on this loop (o->loop is set here), the counters reset. Returns
 * it, or NULL with the reason in err. */
static inline rmq_pool_t *pool_start(rmq_pool_opts_t *o, char *err, size_t errsz)
{
    rmq_pool_t *p = NULL;
    o->loop = &loop;
    ndone = 0;
    closed = 0;
    if (rmq__pool_start(o, &p, err, errsz)) return NULL;
    return p;
}

/* Start a pool of nthreads on the script at path for the group "test_group", done called for
 * each batch, consume_timeout_ms timeout_ms (0: the default). Returns it, or NULL with the reason
 * in err. */
static inline rmq_pool_t *pool_start_script(const char *path, int nthreads, rmq_pool_done_cb done,
                                            int64_t timeout_ms, char *err, size_t errsz)
{
    rmq_pool_opts_t o = {.script_path = path,
                         .nthreads = nthreads,
                         .done = done,
                         .consumer_group = "test_group",
                         .consume_timeout_ms = timeout_ms};
    return pool_start(&o, err, errsz);
}

/* Run the loop until ndone >= n or ms (scaled) pass; returns the most batches p ran at once
 * meanwhile. */
static inline int pool_run_max_running(rmq_pool_t *p, int n, double ms)
{
    int64_t dl = rmq__mono_ms() + (int64_t)(ms * scale);
    int max_running = 0;
    while (ndone < n && rmq__mono_ms() < dl) {
        int r = rmq__pool_running(p);
        if (r > max_running) max_running = r;
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    return max_running;
}

/* Stop p (handlers get await ms to finish) and run the loop until its close callback ran, within
 * secs (scaled): 1, or 0 on time-out. */
static inline int pool_stop(rmq_pool_t *p, int64_t await, double secs)
{
    closed = 0;
    rmq__pool_stop(p, await, on_closed, NULL);
    return run_until(-1, secs);
}

/* A handler stuck in an interpreted loop (the JIT off) on a message whose body is "stuck"; any
 * other message succeeds. Only an interrupt (consume timeout, stop) ends it. */
#define TEST_POOL_STUCK_SCRIPT                                                                     \
    "return { consumer_group = 'g', subscribe = { T = '*' },\n"                                    \
    "  consume = function(msgs)\n"                                                                 \
    "    if msgs[1].body == 'stuck' then\n"                                                        \
    "      jit.off(true, true)\n"                                                                  \
    "      while true do local x = {} end\n"                                                       \
    "    end\n"                                                                                    \
    "  end }\n"

/* A batch of one message on topic TopicT whose body is a copy of body (up to 15 bytes); its
 * status is -99 until the pool sets it. */
typedef struct test_batch1 {
    rmq_batch_t b;
    rmq_msg_t m;
    rmq_msg_t *pm;
    char body[16];
} test_batch1_t;

static inline void test_batch1(test_batch1_t *t, const char *body)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->body, sizeof(t->body), "%s", body);
    t->m.topic = "TopicT";
    t->m.topic_len = 6;
    t->m.body = t->body;
    t->m.body_len = (uint32_t)strlen(t->body);
    t->pm = &t->m;
    t->b.msgs = &t->pm;
    t->b.n = 1;
    t->b.status = -99;
}

#endif
