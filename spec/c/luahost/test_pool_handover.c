/*
 * test_pool_handover.c -- how the consume pool hands batches to its threads, with real threads,
 * real LuaJIT states and a real libuv loop: batches collected between rmq__pool_hold() and
 * rmq__pool_flush() run only after the flush, every one of them exactly once; one wake-up per
 * flush still spreads slow batches over several threads (each woken thread wakes the next while
 * work is queued); a burst of fast batches completes on any number of threads; a flush after
 * stop returns its batches RMQ_CONSUME_NOT_RUN.
 */
#include "luahost/consume_pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"
#include "test_pool_loop.h"


#define NB 256
static rmq_batch_t batches[NB];
static rmq_msg_t msgs[NB];
static rmq_msg_t *ptrs[NB];
static int done_count[NB], threads_seen[32];

static void on_done(void *ud, rmq_batch_t *b)
{
    (void)ud;
    int i = (int)(b - batches);
    if (i >= 0 && i < NB) done_count[i]++;
    if (b->status != RMQ_CONSUME_NOT_RUN && b->thread_index >= 0 && b->thread_index < 32)
        threads_seen[b->thread_index]++;
    rmq__pool_batch_release(b);
    ndone++;
}

static void reset(int n)
{
    ndone = 0;
    closed = 0;
    memset(done_count, 0, sizeof(done_count));
    memset(threads_seen, 0, sizeof(threads_seen));
    for (int i = 0; i < n; i++) {
        memset(&batches[i], 0, sizeof(batches[i]));
        memset(&msgs[i], 0, sizeof(msgs[i]));
        msgs[i].topic = "TopicT";
        msgs[i].topic_len = 6;
        msgs[i].body = "x";
        msgs[i].body_len = 1;
        msgs[i].queue_offset = i;
        ptrs[i] = &msgs[i];
        batches[i].msgs = &ptrs[i];
        batches[i].n = 1;
        batches[i].status = -99;
    }
}

/* The first n batches, reset, submitted while the pool holds them (not flushed yet). */
static void submit_held(rmq_pool_t *p, int n)
{
    reset(n);
    rmq__pool_hold(p);
    for (int i = 0; i < n; i++)
        rmq__pool_submit(p, &batches[i]);
}

/* A handler that does nothing. */
#define NOOP_SCRIPT                                                                                \
    "return { consumer_group = 'g', subscribe = { T = '*' },\n"                                    \
    "  consume = function(msgs) end }\n"

static rmq_pool_t *start(const char *name, const char *text, int nthreads)
{
    char err[1024];
    char *path = test_write_script("test_pool_handover", name, text);
    rmq_pool_t *p = pool_start_script(path, nthreads, on_done, 0, err, sizeof(err));
    if (!p) fprintf(stderr, "start: %s\n", err);
    test_drop_script(path);
    return p;
}

static void stop(rmq_pool_t *p)
{
    CHECK(pool_stop(p, 0, 20));
}

static int threads_used(void)
{
    int n = 0;
    for (int i = 0; i < 32; i++)
        n += threads_seen[i] > 0;
    return n;
}

/* Held batches do not run before the flush; after it each runs once. */
static void test_hold_flush(void)
{
    rmq_pool_t *p = start("noop", NOOP_SCRIPT, 4);
    CHECK(p != NULL);
    if (!p) return;
    submit_held(p, 64);
    CHECK(rmq__pool_pending(p) == 64);
    /* Nothing was handed over yet: the loop has nothing to deliver and no thread runs. */
    for (int i = 0; i < 20; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    CHECK(ndone == 0);
    CHECK(rmq__pool_running(p) == 0);
    rmq__pool_flush(p);
    CHECK(run_until(64, 20));
    CHECK(ndone == 64);
    int once = 1;
    for (int i = 0; i < 64; i++) {
        once &= done_count[i] == 1;
        CHECKF(batches[i].status == RMQ_CONSUME_SUCCESS, "batch %d status %d", i,
               batches[i].status);
    }
    CHECK(once);
    CHECK(rmq__pool_pending(p) == 0);
    /* A flush with nothing held, and plain submits after a flush, still work. */
    rmq__pool_hold(p);
    rmq__pool_flush(p);
    reset(8);
    for (int i = 0; i < 8; i++)
        rmq__pool_submit(p, &batches[i]);
    CHECK(run_until(8, 20));
    stop(p);
}

/* One flush of slow batches wakes one thread, which wakes the next: they run in parallel. */
static void test_chained_wakeups(void)
{
    rmq_pool_t *p = start("slow",
                          "return { consumer_group = 'g', subscribe = { T = '*' },\n"
                          "  consume = function(msgs)\n"
                          "    local t = os.clock(); while os.clock() - t < 0.2 do end\n"
                          "  end }\n",
                          4);
    CHECK(p != NULL);
    if (!p) return;
    submit_held(p, 8);
    rmq__pool_flush(p);
    int max_running = pool_run_max_running(p, 8, 20000);
    CHECK(ndone == 8);
    CHECKF(max_running >= 2, "at most %d batch(es) ran at once", max_running);
    CHECKF(threads_used() >= 2, "%d thread(s) used", threads_used());
    stop(p);
}

/* Many fast batches submitted one by one (no hold) with many threads: all complete, once. */
static void test_burst_many_threads(void)
{
    rmq_pool_t *p = start("noop20", NOOP_SCRIPT, 20);
    CHECK(p != NULL);
    if (!p) return;
    reset(NB);
    for (int round = 0; round < 20; round++) {
        ndone = 0;
        memset(done_count, 0, sizeof(done_count));
        for (int i = 0; i < NB; i++)
            rmq__pool_submit(p, &batches[i]);
        CHECK(run_until(NB, 20));
        int once = 1;
        for (int i = 0; i < NB; i++)
            once &= done_count[i] == 1;
        CHECK(once);
    }
    CHECK(rmq__pool_pending(p) == 0);
    stop(p);
}

/* Held batches flushed after stop come back NOT_RUN. */
static void test_flush_after_stop(void)
{
    rmq_pool_t *p = start("noop2", NOOP_SCRIPT, 2);
    CHECK(p != NULL);
    if (!p) return;
    submit_held(p, 4);
    rmq__pool_stop(p, 0, on_closed, NULL);
    rmq__pool_flush(p);
    CHECK(run_until(-1, 20));
    CHECK(ndone == 4);
    for (int i = 0; i < 4; i++)
        CHECK(batches[i].status == RMQ_CONSUME_NOT_RUN);
}

int main(void)
{
    pool_loop_open();
    test_hold_flush();
    test_chained_wakeups();
    test_burst_many_threads();
    test_flush_after_stop();
    pool_loop_close();
    return test_report("test_pool_handover");
}
