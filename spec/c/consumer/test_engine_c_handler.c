/*
 * test_engine_c_handler.c -- the push consumer engine run with a handler written in C
 * (consumer/handler.h) against the development broker in this process, over real sockets, with
 * no Lua at all: this test links the engine's objects only (CMake: rmqengine_static, without
 * luahost/ and without LuaJIT), so no lua_State can be made.
 *
 * The handler: two threads of its own taking batches from a queue, one C function per batch.
 * Checked: every message produced is consumed exactly once; a batch the handler fails
 * (RECONSUME_LATER) is sent back and delivered again from %RETRY%<group>; the committed offsets
 * at the broker reach the end of every queue (the retry queue's too); the control hooks
 * (on_assign, on_stats) are called with the queues and the stats snapshot as C data.
 *
 * Threads: main drives the broker and the checks; rmq__consumer_run runs the engine's loop on
 * a thread of its own; the handler's threads run the batches.
 */
#include "base/codes.h"
#include "base/log.h"
#include "consumer/conf.h"
#include "consumer/consumer.h"
#include "consumer/handler.h"
#include "consumer/stats.h"
#include "devbroker/devbroker.h"
#include "net/remoting.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

#define TOPIC "EngineC"
#define GROUP "engine_c_group"
#define N_QUEUES 4
#define PER_QUEUE 50
#define N_MSGS (N_QUEUES * PER_QUEUE)
#define N_THREADS 2
/* Messages the handler fails on their first delivery: every 20th, from the 7th. */
#define FAILS_FIRST(i) ((i) % 20 == 7)
#define N_FAILING (N_MSGS / 20)

/* ---- what the handler saw (any thread, under mu) ----------------------------------------------- */

static uv_mutex_t mu;
static int deliveries[N_MSGS]; /* handler calls that got message i */
static int acked[N_MSGS];      /* deliveries the handler acknowledged */
static int redelivered_ok[N_MSGS]; /* second deliveries from %RETRY% with reconsume_times 1 */
static int n_acked, n_bad_body, n_assigned, n_stats, max_snap_queues;

/* The C function per batch: messages "m<i>"; fails the batch when one of them fails first. */
static int handle_batch(rmq_batch_t *b)
{
    int fail = 0;
    int *ids = calloc((size_t)b->n + 1, sizeof(int));
    uv_mutex_lock(&mu);
    for (int k = 0; k < b->n; k++) {
        const rmq_msg_t *m = b->msgs[k];
        char body[32];
        int i = -1;
        if (m->body_len > 1 && m->body_len < sizeof(body) && m->body[0] == 'm') {
            memcpy(body, m->body + 1, m->body_len - 1); /* not NUL-terminated in the frame */
            body[m->body_len - 1] = 0;
            i = atoi(body);
        }
        ids[k] = i;
        if (i < 0 || i >= N_MSGS) {
            n_bad_body++;
            continue;
        }
        deliveries[i]++;
        if (FAILS_FIRST(i) && m->reconsume_times == 0) fail = 1;
        if (deliveries[i] == 2 && m->reconsume_times == 1 &&
            m->store_topic_len == strlen("%RETRY%" GROUP) &&
            !memcmp(m->store_topic, "%RETRY%" GROUP, m->store_topic_len) &&
            m->topic_len == strlen(TOPIC) && !memcmp(m->topic, TOPIC, m->topic_len))
            redelivered_ok[i] = 1;
    }
    if (!fail)
        for (int k = 0; k < b->n; k++)
            if (ids[k] >= 0 && ids[k] < N_MSGS) {
                acked[ids[k]]++;
                n_acked++;
            }
    uv_mutex_unlock(&mu);
    free(ids);
    return fail ? RMQ_CONSUME_RECONSUME_LATER : RMQ_CONSUME_SUCCESS;
}

/* ---- the runner: threads of its own ------------------------------------------------------------ */

struct rmq_runner {
    rmq_runner_opts_t o;
    uv_mutex_t mu;
    uv_cond_t cv;
    rmq_batch_t **todo, **back; /* FIFO of batches to run; batches going back to the loop */
    int n_todo, n_back, cap_todo, cap_back;
    uv_async_t async;
    uv_thread_t th[N_THREADS];
    int idx[N_THREADS];
    int exited, stopping, closed;
    void (*close_cb)(void *);
    void *close_ud;
};

static void push(rmq_batch_t ***a, int *n, int *cap, rmq_batch_t *b)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *a = realloc(*a, sizeof(**a) * (size_t)*cap);
        if (!*a) abort();
    }
    (*a)[(*n)++] = b;
}

typedef struct targ {
    rmq_runner_t *r;
    int index;
} targ_t;
static targ_t targs[N_THREADS];

static void thread_main(void *arg)
{
    targ_t *t = arg;
    rmq_runner_t *r = t->r;
    uv_mutex_lock(&r->mu);
    for (;;) {
        while (!r->n_todo && !r->stopping) uv_cond_wait(&r->cv, &r->mu);
        if (!r->n_todo) break;
        rmq_batch_t *b = r->todo[0];
        memmove(r->todo, r->todo + 1, sizeof(*r->todo) * (size_t)--r->n_todo);
        uv_mutex_unlock(&r->mu);
        b->thread_index = t->index;
        if (r->o.begin(r->o.ud, b, rmq__mono_ms())) {
            b->status = RMQ_CONSUME_SKIPPED;
        } else {
            rmq_batch_run_t run = {.start_ns = (int64_t)uv_hrtime()};
            b->status = handle_batch(b);
            b->ack_count = b->status == RMQ_CONSUME_SUCCESS ? b->n : 0;
            run.end_ns = (int64_t)uv_hrtime();
            if (r->o.ran) r->o.ran(r->o.ud, b, &run);
        }
        uv_mutex_lock(&r->mu);
        push(&r->back, &r->n_back, &r->cap_back, b);
        uv_async_send(&r->async);
    }
    r->exited++;
    uv_mutex_unlock(&r->mu);
    uv_async_send(&r->async);
}

static void on_async_closed(uv_handle_t *h)
{
    rmq_runner_t *r = h->data;
    void (*cb)(void *) = r->close_cb;
    void *ud = r->close_ud;
    uv_mutex_destroy(&r->mu);
    uv_cond_destroy(&r->cv);
    free(r->todo);
    free(r->back);
    free(r);
    cb(ud);
}

/* Loop thread: the batches that came back go to done(); once stopped and every thread exited,
 * the threads are joined and the runner closes. */
static void on_async(uv_async_t *a)
{
    rmq_runner_t *r = a->data;
    for (;;) {
        uv_mutex_lock(&r->mu);
        int n = r->n_back;
        rmq_batch_t **back = r->back;
        r->back = NULL;
        r->n_back = r->cap_back = 0;
        int all_exited = r->exited == N_THREADS;
        uv_mutex_unlock(&r->mu);
        for (int i = 0; i < n; i++) r->o.done(r->o.ud, back[i]);
        free(back);
        if (n) continue; /* done() may have submitted more */
        if (r->stopping && all_exited && !r->closed) {
            for (int i = 0; i < N_THREADS; i++) uv_thread_join(&r->th[i]);
            r->closed = 1;
            uv_close((uv_handle_t *)&r->async, on_async_closed);
        }
        return;
    }
}

static int c_start(void *impl, const rmq_runner_opts_t *o, rmq_runner_t **out, char *errstr,
                   size_t errstr_size)
{
    rmq_runner_t *r = calloc(1, sizeof(*r));
    r->o = *o;
    uv_mutex_init(&r->mu);
    uv_cond_init(&r->cv);
    uv_async_init(o->loop, &r->async, on_async);
    r->async.data = r;
    for (int i = 0; i < N_THREADS; i++) {
        targs[i] = (targ_t){r, i};
        if (uv_thread_create(&r->th[i], thread_main, &targs[i])) abort();
    }
    *out = r;
    return 0;
}

static void c_submit(rmq_runner_t *r, rmq_batch_t *b)
{
    if (r->closed) { /* threads gone: back at once, not run */
        b->status = RMQ_CONSUME_NOT_RUN;
        r->o.done(r->o.ud, b);
        return;
    }
    uv_mutex_lock(&r->mu);
    if (r->stopping && r->exited == N_THREADS) {
        b->status = RMQ_CONSUME_NOT_RUN;
        push(&r->back, &r->n_back, &r->cap_back, b);
        uv_async_send(&r->async);
    } else {
        push(&r->todo, &r->n_todo, &r->cap_todo, b);
        uv_cond_signal(&r->cv);
    }
    uv_mutex_unlock(&r->mu);
}

static void c_submit_to(rmq_runner_t *r, int thread_index, rmq_batch_t *b)
{
    (void)thread_index; /* concurrent consumption only: any thread */
    c_submit(r, b);
}

static void c_nothing(rmq_runner_t *r) { (void)r; }
static int c_nthreads(const rmq_runner_t *r) { return N_THREADS; }
static void c_batch_release(rmq_batch_t *b) { (void)b; /* nothing attached: no sends */ }

/* Stop: the queued batches still run (they are quick), then the threads end. */
static void c_stop(rmq_runner_t *r, int64_t await_ms, void (*close_cb)(void *), void *ud)
{
    uv_mutex_lock(&r->mu);
    r->stopping = 1;
    r->close_cb = close_cb;
    r->close_ud = ud;
    uv_cond_broadcast(&r->cv);
    uv_mutex_unlock(&r->mu);
    uv_async_send(&r->async);
}

/* ---- control side and lifecycle ---------------------------------------------------------------- */

static int c_bind(void *impl, rmq_consumer_t *c, rmq_flow_t *flow, char *errstr, size_t n)
{
    return 0;
}

static const char *c_name(void *impl) { return "the C handler"; }

static unsigned c_hooks(void *impl) { return RMQ_HOOK_ON_ASSIGN | RMQ_HOOK_ON_STATS; }

static void c_on_assign(void *impl, const rmq_mq_t *mqs, int n)
{
    uv_mutex_lock(&mu);
    for (int i = 0; i < n; i++)
        if (!strcmp(mqs[i].topic, TOPIC)) n_assigned++;
    uv_mutex_unlock(&mu);
}

static void c_on_stats(void *impl, const rmq_stats_snap_t *snap)
{
    uv_mutex_lock(&mu);
    n_stats++;
    if (snap->n_queues > max_snap_queues) max_snap_queues = snap->n_queues;
    uv_mutex_unlock(&mu);
}

static const rmq_handler_ops_t c_ops = {
    .bind = c_bind,
    .name = c_name,
    .start = c_start,
    .submit = c_submit,
    .submit_to = c_submit_to,
    .hold = c_nothing,
    .flush = c_nothing,
    .nthreads = c_nthreads,
    .batch_release = c_batch_release,
    .stop = c_stop,
    .hooks = c_hooks,
    .on_assign = c_on_assign,
    .on_stats = c_on_stats,
};

/* ---- the test ---------------------------------------------------------------------------------- */

typedef struct run_arg {
    rmq_consumer_t *c;
    int rc;
} run_arg_t;

static void run_main(void *arg)
{
    run_arg_t *a = arg;
    a->rc = rmq__consumer_run(a->c);
}

/* Every message acknowledged, and on_stats called after that (every queue owned by then). */
static int finished(void)
{
    uv_mutex_lock(&mu);
    int n = n_acked, s = max_snap_queues;
    uv_mutex_unlock(&mu);
    return n >= N_MSGS && s >= N_QUEUES;
}

/* QUERY_CONSUMER_OFFSET at the broker, on a loop of the test's own. */
typedef struct qres {
    int done, err, code;
    int64_t offset;
} qres_t;

static void on_query(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    qres_t *q = ud;
    q->done = 1;
    q->err = err;
    if (err) return;
    q->code = resp->code;
    const char *v = rmq__cmd_ext(resp, "offset");
    q->offset = v ? strtoll(v, NULL, 10) : -2;
}

static int64_t query_offset(uv_loop_t *loop, rmq_remoting_t *rt, const char *addr,
                            const char *topic, int qid, double scale)
{
    rmq_cmd_t cmd;
    rmq__cmd_init(&cmd, RMQ_REQ_QUERY_CONSUMER_OFFSET, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext(&cmd, "consumerGroup", GROUP);
    rmq__cmd_set_ext(&cmd, "topic", topic);
    rmq__cmd_set_ext_i64(&cmd, "queueId", qid);
    qres_t q = {0};
    int rc = rmq__remoting_request(rt, addr, &cmd, (int64_t)(3000 * scale), on_query, &q);
    rmq__cmd_free(&cmd);
    CHECK(rc == 0);
    while (rc == 0 && !q.done) uv_run(loop, UV_RUN_ONCE);
    CHECKF(!q.err && q.code == RMQ_RESP_SUCCESS, "%s#%d: err %d code %d", topic, qid, q.err,
           q.code);
    return q.err || q.code != RMQ_RESP_SUCCESS ? -3 : q.offset;
}

int main(void)
{
    double scale = test_scale();
    rmq_log_set_level(RMQ_LOG_ERROR);
    uv_mutex_init(&mu);
    /* Nothing of LuaJIT is in this process (the binary links the engine alone). */
    CHECK(dlsym(RTLD_DEFAULT, "luaL_newstate") == NULL);
    CHECK(dlsym(RTLD_DEFAULT, "rmq__pool_start") == NULL);

    char err[1024];
    rmq_devbroker_t *db =
        rmq_devbroker_start("--topic " TOPIC ":4 --delay-scale 0.001", err, sizeof(err));
    if (!db) {
        fprintf(stderr, "devbroker: %s\n", err);
        return 1;
    }
    for (int i = 0; i < N_MSGS; i++) {
        char body[32];
        int len = snprintf(body, sizeof(body), "m%d", i);
        CHECK(rmq_devbroker_produce(db, 0, TOPIC, i % N_QUEUES, NULL, NULL, body,
                                    (size_t)len) == i / N_QUEUES);
    }

    rmq_conf_t *conf = rmq__conf_new();
    CHECK(rmq__conf_set(conf, "namesrv_addr", rmq_devbroker_addr(db), err, sizeof(err)) == 0);
    CHECK(rmq__conf_set(conf, "consumer_group", GROUP, err, sizeof(err)) == 0);
    CHECK(rmq__conf_set(conf, "message_listener", "CONCURRENTLY", err, sizeof(err)) == 0);
    CHECK(rmq__conf_set(conf, "consume_from_where", "CONSUME_FROM_FIRST_OFFSET", err,
                        sizeof(err)) == 0);
    CHECK(rmq__conf_set(conf, "consume_thread_min", "2", err, sizeof(err)) == 0);
    CHECK(rmq__conf_set(conf, "consume_thread_max", "2", err, sizeof(err)) == 0);
    CHECK(rmq__conf_set(conf, "stats_interval_ms", "100", err, sizeof(err)) == 0);
    CHECK(rmq__conf_add_subscription(conf, TOPIC, "*", err, sizeof(err)) == 0);

    rmq_handler_t h = {.ops = &c_ops, .impl = NULL};
    rmq_consumer_t *c = NULL;
    int rc = rmq__consumer_new(conf, &h, &c, err, sizeof(err));
    CHECKF(rc == 0, "%s", err);
    if (rc) {
        rmq__conf_destroy(conf);
        rmq_devbroker_stop(db);
        return test_report("test_engine_c_handler");
    }
    run_arg_t ra = {.c = c, .rc = -1};
    uv_thread_t th;
    CHECK(uv_thread_create(&th, run_main, &ra) == 0);
    int64_t deadline = rmq__mono_ms() + (int64_t)(30000 * scale);
    while (!finished() && rmq__mono_ms() < deadline) usleep(10000);
    CHECK(finished());
    rmq__consumer_stop(c);
    uv_thread_join(&th);
    CHECK(ra.rc == RMQ_CONSUMER_EXIT_OK);

    /* Exactly once each; the failing ones twice, the second time from the retry topic. */
    int once = 0, twice_ok = 0;
    for (int i = 0; i < N_MSGS; i++) {
        CHECKF(acked[i] == 1, "m%d acknowledged %d time(s)", i, acked[i]);
        if (FAILS_FIRST(i)) {
            CHECKF(deliveries[i] == 2 && redelivered_ok[i], "m%d: %d deliveries%s", i,
                   deliveries[i], redelivered_ok[i] ? "" : ", not redelivered from %RETRY%");
            twice_ok += deliveries[i] == 2 && redelivered_ok[i];
        } else {
            CHECKF(deliveries[i] == 1, "m%d: %d deliveries", i, deliveries[i]);
            once += deliveries[i] == 1;
        }
    }
    CHECK(once == N_MSGS - N_FAILING);
    CHECK(twice_ok == N_FAILING);
    CHECK(n_bad_body == 0);
    CHECK(n_assigned == N_QUEUES);
    CHECK(n_stats > 0);
    CHECK(max_snap_queues >= N_QUEUES);
    rmq_consumer_stats_t st;
    rmq__consumer_stats(c, &st);
    CHECKF(st.msgs_consumed == N_MSGS, "%lld", (long long)st.msgs_consumed);
    CHECKF(st.msgs_retried == N_FAILING, "%lld", (long long)st.msgs_retried);
    rmq__consumer_destroy(c);
    rmq__conf_destroy(conf);

    /* The committed offsets at the broker: the end of every queue, the retry queue's too. */
    uv_loop_t loop;
    uv_loop_init(&loop);
    rmq_remoting_opts_t ro;
    memset(&ro, 0, sizeof(ro));
    ro.loop = &loop;
    rmq_remoting_t *rt = NULL;
    CHECK(rmq__remoting_new(&ro, &rt, err, sizeof(err)) == 0);
    const char *addr = rmq_devbroker_broker_addr(db, 0);
    for (int q = 0; q < N_QUEUES; q++) {
        int64_t off = query_offset(&loop, rt, addr, TOPIC, q, scale);
        CHECKF(off == PER_QUEUE, "%s#%d committed %lld", TOPIC, q, (long long)off);
    }
    int64_t roff = query_offset(&loop, rt, addr, "%RETRY%" GROUP, 0, scale);
    CHECKF(roff == N_FAILING, "retry queue committed %lld", (long long)roff);
    rmq__remoting_destroy(rt, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    rmq_devbroker_stop(db);
    uv_mutex_destroy(&mu);
    return test_report("test_engine_c_handler");
}
