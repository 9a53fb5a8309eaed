/*
 * pool.c -- per-message cost through the consume pool: submit on a libuv loop, hand-off
 * to a consume thread, one lua_pcall of the dispatcher, a no-op handler, done() back on the
 * loop. Built and run by scripts/bench_lua (not a test). Usage: bench_pool SCRIPT
 */
#include "luahost/consume_pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uv_loop_t loop;
static long done_count;
static rmq_batch_t *freed[64];
static int nfreed;

static void on_done(void *ud, rmq_batch_t *b)
{
    (void)ud;
    done_count++;
    freed[nfreed++] = b;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void closed(void *ud)
{
    (void)ud;
}

int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    uv_loop_init(&loop);
    rmq_pool_opts_t o = {.script_path = argv[1], .nthreads = 1, .loop = &loop, .done = on_done};
    rmq_pool_t *p;
    char err[1024];
    if (rmq__pool_start(&o, &p, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    static char body[1024];
    int sizes[] = {1, 32, 256};
    printf("%-8s %-26s %14s %14s\n", "batch", "through the pool", "ns/message", "ns/batch");
    for (int si = 0; si < 3; si++) {
        int n = sizes[si];
        rmq_msg_t *msgs = calloc((size_t)n, sizeof(rmq_msg_t));
        rmq_msg_t **ptrs = calloc((size_t)n, sizeof(rmq_msg_t *));
        for (int i = 0; i < n; i++) {
            msgs[i].topic = "BenchTopic";
            msgs[i].topic_len = 10;
            msgs[i].body = body;
            msgs[i].body_len = sizeof(body);
            ptrs[i] = &msgs[i];
        }
        /* Keep a few batches in flight, like the engine does. */
        enum { INFLIGHT = 16 };
        rmq_batch_t b[INFLIGHT];
        long total = 2000000 / n;
        if (total < 2000) total = 2000;
        for (int pass = 0; pass < 2; pass++) { /* pass 0 warms up */
            long target = pass ? total : 1000;
            long submitted = 0;
            done_count = 0;
            double t0 = now_s();
            for (int i = 0; i < INFLIGHT; i++) {
                memset(&b[i], 0, sizeof(b[i]));
                b[i].msgs = ptrs;
                b[i].n = n;
            }
            nfreed = 0;
            for (int i = 0; i < INFLIGHT && submitted < target; i++, submitted++)
                rmq__pool_submit(p, &b[i]);
            while (done_count < target) {
                uv_run(&loop, UV_RUN_ONCE);
                while (nfreed > 0 && submitted < target) {
                    rmq__pool_submit(p, freed[--nfreed]);
                    submitted++;
                }
                nfreed = 0;
            }
            double dt = now_s() - t0;
            if (pass)
                printf("%-8d %-26s %14.1f %14.1f\n", n, "no-op", dt * 1e9 / ((double)target * n),
                       dt * 1e9 / (double)target);
        }
        free(msgs);
        free(ptrs);
    }
    rmq__pool_stop(p, 0, closed, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    return 0;
}
