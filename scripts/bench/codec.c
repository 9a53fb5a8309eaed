/*
 * codec.c -- per-message cost of the loop thread's codec work and of the consume pool's
 * hand-over, without sockets. Built and run by scripts/bench_codec (not a test: prints numbers).
 *
 *   decode     a captured 4.9.4 PULL_MESSAGE response (32 messages): rmq__cmd_decode of the frame,
 *              rmq__msgset_decode of its body, every message released (what on_pull_resp does)
 *   encode     a PULL_MESSAGE request header as pull.c builds it (11 extFields, JSON)
 *   pool       the real consume pool (rmq__pool_start) with a no-op Lua handler: bursts of 32
 *              messages cut into batches of B, submitted from a libuv loop that waits for every
 *              done callback before the next burst (like one pull response at a time); reports
 *              wall time and process CPU per message for 1, 2 and 20 threads
 *
 * Run from the repository root: scripts/bench_codec [BUILD_DIR].
 */
#include "protocol/cmd.h"
#include "base/codes.h"
#include "base/common.h"
#include "luahost/consume_pool.h"
#include "protocol/message.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <uv.h>

#define FRAME "spec/fixtures/wire/08_bench_pull_sample/0034-11-PULL_MESSAGE.response.bin"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static rmq_rbuf_t *load_frame(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "bench_codec: cannot open %s (run from the repository root)\n", path);
        exit(2);
    }
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    rmq_rbuf_t *rb = rmq__rbuf_new((size_t)n);
    if (fread(rb->data, 1, (size_t)n, fp) != (size_t)n) exit(2);
    fclose(fp);
    return rb;
}

static void bench_decode(rmq_rbuf_t *frame)
{
    char err[256];
    int per = 0;
    long iters = 0;
    double t0 = now_s(), dt;
    do {
        for (int k = 0; k < 1000; k++) {
            rmq_cmd_t c;
            if (rmq__cmd_decode(frame, &c, err, sizeof(err))) {
                fprintf(stderr, "decode: %s\n", err);
                exit(1);
            }
            rmq_msgset_t *set;
            if (rmq__msgset_decode(c.frame, c.body, c.body_len, "broker-a", 0, 1000, &set, err,
                                   sizeof(err))) {
                fprintf(stderr, "msgset: %s\n", err);
                exit(1);
            }
            per = set->n;
            for (int i = 0; i < set->n; i++)
                rmq__msg_release(&set->msgs[i]);
            rmq__msgset_release(set);
            rmq__cmd_free(&c);
        }
        iters += 1000;
        dt = now_s() - t0;
    } while (dt < 1.0);
    printf("%-34s %9.0f ns/frame %7.1f ns/message (%d messages, %zu bytes)\n",
           "decode pull response + messages", dt * 1e9 / (double)iters,
           dt * 1e9 / (double)iters / per, per, frame->len);
}

static void bench_encode(void)
{
    rmq_buf_t out;
    rmq__buf_init(&out);
    long iters = 0;
    double t0 = now_s(), dt;
    do {
        for (int k = 0; k < 1000; k++) {
            rmq_cmd_t cmd;
            rmq__cmd_init(&cmd, RMQ_REQ_PULL_MESSAGE, RMQ_SERIALIZE_JSON);
            rmq__cmd_set_ext(&cmd, "consumerGroup", "bench_consumer_group");
            rmq__cmd_set_ext(&cmd, "topic", "BenchConsume");
            rmq__cmd_set_ext_i64(&cmd, "queueId", k & 7);
            rmq__cmd_set_ext_i64(&cmd, "queueOffset", 123456 + k);
            rmq__cmd_set_ext_i64(&cmd, "maxMsgNums", 32);
            rmq__cmd_set_ext_i64(&cmd, "sysFlag", 3);
            rmq__cmd_set_ext_i64(&cmd, "commitOffset", 123000 + k);
            rmq__cmd_set_ext_i64(&cmd, "suspendTimeoutMillis", 15000);
            rmq__cmd_set_ext_i64(&cmd, "subVersion", 1733140000000LL);
            rmq__cmd_set_ext(&cmd, "expressionType", "TAG");
            out.len = 0;
            if (rmq__cmd_encode_header(&cmd, &out)) exit(1);
            rmq__cmd_free(&cmd);
        }
        iters += 1000;
        dt = now_s() - t0;
    } while (dt < 1.0);
    printf("%-34s %9.0f ns/request (%zu bytes)\n", "encode pull request header",
           dt * 1e9 / (double)iters, out.len);
    rmq__buf_free(&out);
}

/* ---- the consume pool ---------------------------------------------------------------------- */

typedef struct pool_run {
    uv_loop_t loop;
    rmq_pool_t *pool;
    uv_idle_t idle;
    rmq_batch_t *batches;
    rmq_msg_t **ptrs;
    int batch, per_burst, outstanding;
    long bursts_left;
} pool_run_t;

static void submit_burst(pool_run_t *r)
{
    int nb = (r->per_burst + r->batch - 1) / r->batch;
    for (int i = 0; i < nb; i++) {
        rmq_batch_t *b = &r->batches[i];
        int first = i * r->batch;
        b->msgs = r->ptrs + first;
        b->n = r->per_burst - first < r->batch ? r->per_burst - first : r->batch;
        r->outstanding++;
#ifdef RMQ_POOL_HAS_HOLD
        if (i == 0) rmq__pool_hold(r->pool);
#endif
        rmq__pool_submit(r->pool, b);
    }
#ifdef RMQ_POOL_HAS_HOLD
    rmq__pool_flush(r->pool);
#endif
    r->bursts_left--;
}

static void on_closed(void *ud)
{
    (void)ud;
}

static void on_done(void *ud, rmq_batch_t *b)
{
    pool_run_t *r = ud;
    rmq__pool_batch_release(b);
    if (--r->outstanding > 0) return;
    if (r->bursts_left > 0)
        submit_burst(r);
    else
        rmq__pool_stop(r->pool, 1000, on_closed, r);
}

static void bench_pool(const char *script, int nthreads, int batch, long messages)
{
    pool_run_t r;
    memset(&r, 0, sizeof(r));
    uv_loop_init(&r.loop);
    r.batch = batch;
    r.per_burst = 32;
    r.bursts_left = messages / r.per_burst;
    r.batches = calloc((size_t)r.per_burst, sizeof(rmq_batch_t));
    r.ptrs = calloc((size_t)r.per_burst, sizeof(rmq_msg_t *));
    rmq_msg_t *msgs = calloc((size_t)r.per_burst, sizeof(rmq_msg_t));
    static const char body[1024];
    for (int i = 0; i < r.per_burst; i++) {
        msgs[i].topic = "BenchTopic";
        msgs[i].topic_len = 10;
        msgs[i].body = body;
        msgs[i].body_len = sizeof(body);
        msgs[i].queue_offset = i;
        r.ptrs[i] = &msgs[i];
    }
    rmq_pool_opts_t o = {.script_path = script,
                         .nthreads = nthreads,
                         .loop = &r.loop,
                         .done = on_done,
                         .ud = &r,
                         .consumer_group = "bench"};
    char err[1024];
    if (rmq__pool_start(&o, &r.pool, err, sizeof(err))) {
        fprintf(stderr, "pool: %s\n", err);
        exit(1);
    }
    long total = r.bursts_left * r.per_burst;
    double c0 = cpu_s(), t0 = now_s();
    submit_burst(&r);
    uv_run(&r.loop, UV_RUN_DEFAULT);
    double dt = now_s() - t0, dc = cpu_s() - c0;
    printf("pool %2d thread(s), batch %-3d %11.0f msgs/s %7.2f us CPU/msg\n", nthreads, batch,
           (double)total / dt, dc * 1e6 / (double)total);
    uv_loop_close(&r.loop);
    free(r.batches);
    free(r.ptrs);
    free(msgs);
}

int main(int argc, char **argv)
{
    const char *script = argc > 1 ? argv[1] : NULL;
    rmq_rbuf_t *frame = load_frame(FRAME);
    bench_decode(frame);
    rmq__rbuf_release(frame);
    bench_encode();
    if (!script) return 0;
    long n = argc > 2 ? atol(argv[2]) : 200000;
    int threads[] = {1, 2, 20};
    int batches[] = {1, 32};
    for (int t = 0; t < 3; t++)
        for (int b = 0; b < 2; b++)
            bench_pool(script, threads[t], batches[b], n);
    return 0;
}
