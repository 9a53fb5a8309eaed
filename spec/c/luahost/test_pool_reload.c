/*
 * test_pool_reload.c -- what a reload asks of the consume pool, with real threads, LuaJIT states,
 * script files and a libuv loop: a prepared pool with deferred init runs no hook and no batch
 * until rmq__pool_go(); rmq__pool_retire() hands every queued batch over at once while the
 * running one finishes in the old pool, whose shutdown hooks then run; every batch runs exactly
 * once; a discarded pool runs no hook; a handler still running when its pool is retired keeps its
 * consume_timeout (counted from its start, as without a reload). The hooks count into a shared
 * dictionary the test reads.
 */
#include "luahost/consume_pool.h"
#include "luahost/shdict.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"
#include "test_pool_loop.h"
#include "test_shdict.h"

static const char *script_text =
    "local rmq = require 'rmq'\n"
    "local ffi = require 'ffi'\n"
    "ffi.cdef 'int poll(void *fds, unsigned long nfds, int timeout);'\n"
    "return {\n"
    "  consumer_group = 'g', subscribe = { TopicT = '*' },\n"
    "  shared = { d = '64k' },\n"
    "  init = function(ctx) rmq.shared.d:incr('inits', 1, 0) end,\n"
    "  shutdown = function(ctx) rmq.shared.d:incr('shutdowns', 1, 0) end,\n"
    "  consume = function(msgs, ctx)\n"
    "    local b = msgs[1].body\n"
    "    if b == 'slow' then ffi.C.poll(nil, 0, 300) end\n"
    "    if b == 'stuck' then\n"
    "      rmq.shared.d:incr('ran:stuck', 1, 0)\n"
    "      jit.off(true, true)\n"
    "      while true do local x = {} end\n"
    "    end\n"
    "    rmq.shared.d:incr('ran:' .. b, 1, 0)\n"
    "    rmq.shared.d:incr('ran_by_' .. ctx.thread_count, 1, 0)\n"
    "  end,\n"
    "}\n";

static rmq_pool_t *requeue_to; /* where requeue() sends what the retired pool hands over */
static int nrequeued;

static void requeue(void *ud, rmq_batch_t *b)
{
    (void)ud;
    nrequeued++;
    rmq__pool_submit(requeue_to, b);
}

static double num(rmq_shdicts_t *s, const char *key)
{
    rmq_shdict_t *d = rmq_shdicts_find(s, "d");
    if (!d) return -1;
    double v = 0;
    if (test_shdict_get(d, key, &v) != T_NUMBER) return 0;
    return v;
}

/* Wait (up to secs, scaled) until key reaches v: threads run init on their own time. */
static int wait_num(rmq_shdicts_t *s, const char *key, double v, double secs)
{
    int64_t deadline = rmq__mono_ms() + (int64_t)(secs * 1000 * scale);
    while (num(s, key) != v) {
        if (rmq__mono_ms() > deadline) return 0;
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    return 1;
}

/* n batches t[0..n-1] with the bodies prefix0, prefix1, ... submitted to p. */
static void submit_numbered(rmq_pool_t *p, test_batch1_t *t, int n, const char *prefix)
{
    for (int i = 0; i < n; i++) {
        char body[8];
        snprintf(body, sizeof(body), "%s%d", prefix, i);
        test_batch1(&t[i], body);
        rmq__pool_submit(p, &t[i].b);
    }
}

/* A test's start: the counters reset (nrequeued too when requeued), and a new set of
 * dictionaries. */
static rmq_shdicts_t *fresh(int requeued)
{
    ndone = 0;
    closed = 0;
    if (requeued) nrequeued = 0;
    return rmq_shdicts_new();
}

static rmq_pool_t *prepare_t(const char *path, rmq_shdicts_t *s, int n, int defer,
                             int64_t consume_timeout_ms)
{
    rmq_pool_opts_t o = {.script_path = path,
                         .nthreads = n,
                         .loop = &loop,
                         .done = pool_count_done,
                         .consumer_group = "g",
                         .consume_timeout_ms = consume_timeout_ms,
                         .shdicts = s,
                         .defer_init = defer};
    rmq_pool_t *p = NULL;
    char err[1024];
    int rc = rmq__pool_prepare(&o, &p, err, sizeof(err));
    CHECKF(rc == 0, "%s", err);
    return p;
}

static rmq_pool_t *prepare(const char *path, rmq_shdicts_t *s, int n, int defer)
{
    return prepare_t(path, s, n, defer, 60000);
}

static void test_deferred_init(const char *path)
{
    rmq_shdicts_t *s = fresh(0);
    rmq_pool_t *p = prepare(path, s, 3, 1);
    if (!p) exit(test_report("test_pool_reload"));
    CHECK(num(s, "inits") == 0);
    rmq__pool_attach(p);
    test_batch1_t t[5];
    submit_numbered(p, t, 5, "b");
    CHECK(!run_until(1, 0.3)); /* nothing runs before the go */
    CHECK(ndone == 0 && num(s, "inits") == 0);
    rmq__pool_go(p);
    CHECK(run_until(5, 20));
    CHECK(wait_num(s, "inits", 3, 20));
    for (int i = 0; i < 5; i++) CHECK(t[i].b.status == RMQ_CONSUME_SUCCESS);
    CHECK(pool_stop(p, 0, 20));
    CHECK(num(s, "shutdowns") == 3);
    rmq_shdicts_free(s);
}

static void test_retire(const char *path)
{
    rmq_shdicts_t *s = fresh(1);
    rmq_pool_t *old = prepare(path, s, 1, 0);
    rmq__pool_attach(old);
    CHECK(num(s, "inits") == 1);
    test_batch1_t slow, q[4];
    test_batch1(&slow, "slow");
    rmq__pool_submit(old, &slow.b);
    submit_numbered(old, q, 4, "q");
    usleep(50000); /* the one thread is inside the slow handler, the others wait for it */
    rmq_pool_t *next = prepare(path, s, 2, 1);
    rmq__pool_attach(next);
    requeue_to = next;
    int handed = rmq__pool_retire(old, requeue, on_closed, NULL);
    CHECKF(handed == 4 && nrequeued == 4, "handed %d, requeued %d", handed, nrequeued);
    /* The slow batch finishes in the old pool, then its state's shutdown hook runs. */
    CHECK(run_until(-1, 20));
    CHECK(ndone == 1 && slow.b.status == RMQ_CONSUME_SUCCESS);
    CHECK(num(s, "shutdowns") == 1);
    CHECK(num(s, "inits") == 1); /* the new states wait */
    rmq__pool_go(next);
    CHECK(run_until(5, 20));
    CHECK(wait_num(s, "inits", 3, 20));
    /* Every batch ran once: the slow one on the old pool (1 thread), the rest on the new (2). */
    CHECK(num(s, "ran:slow") == 1);
    for (int i = 0; i < 4; i++) {
        char key[16];
        snprintf(key, sizeof(key), "ran:q%d", i);
        CHECKF(num(s, key) == 1, "%s ran %.0f times", key, num(s, key));
        CHECK(q[i].b.status == RMQ_CONSUME_SUCCESS && q[i].b.thread_index < 2);
    }
    CHECK(num(s, "ran_by_1") == 1 && num(s, "ran_by_2") == 4);
    CHECK(pool_stop(next, 0, 20));
    CHECK(num(s, "shutdowns") == 3);
    rmq_shdicts_free(s);
}

/*
 * A handler that runs past consume_timeout while its pool is retired: it is interrupted by the
 * consume timeout counted from its start, as it would have been without the reload (its batch
 * comes back through done() as a handler error, to be sent back), not allowed another whole
 * consume_timeout from the retirement and then stopped and handed to the new pool to run again.
 * Until the old pool has finished, the new one runs nothing: every queue waits for it.
 */
static void test_retire_timeout(const char *path)
{
    rmq_shdicts_t *s = fresh(1);
    int64_t timeout = (int64_t)(600 * scale);
    rmq_pool_t *old = prepare_t(path, s, 1, 0, timeout);
    rmq__pool_attach(old);
    test_batch1_t stuck;
    test_batch1(&stuck, "stuck");
    rmq__pool_submit(old, &stuck.b);
    CHECK(wait_num(s, "ran:stuck", 1, 20)); /* its handler runs */
    rmq_pool_t *next = prepare_t(path, s, 1, 1, timeout);
    rmq__pool_attach(next);
    requeue_to = next;
    int64_t t0 = rmq__mono_ms();
    CHECK(rmq__pool_retire(old, requeue, on_closed, NULL) == 0);
    /* Interrupted within its consume timeout (plus the watchdog's period), handed nowhere. */
    CHECK(run_until(1, 20));
    int64_t took = rmq__mono_ms() - t0;
    CHECKF(nrequeued == 0, "the stuck batch was handed to the new pool (%d) after %lld ms",
           nrequeued, (long long)took);
    CHECKF(stuck.b.status == RMQ_CONSUME_RECONSUME_LATER && stuck.b.handler_error == 1,
           "status %d, handler_error %d after %lld ms", stuck.b.status, stuck.b.handler_error,
           (long long)took);
    CHECKF(took < timeout + 2000 * scale, "the stuck handler ended %lld ms after the retirement",
           (long long)took);
    CHECK(run_until(-1, 20));
    CHECK(pool_stop(next, 0, 20)); /* its states never ran init */
    rmq_shdicts_free(s);
}

/*
 * A retired pool's batch handed to the pool that replaced it, when that pool has already been
 * stopped and closed its handles in the same loop pass (a reload, then at once a stop; the
 * consumer forgets its pool only in the close callback, at the end of the pass): the batch must
 * still come back through done(), NOT_RUN, instead of being queued in a pool whose wake-up will
 * never fire again, its queue waiting for it for good. The new pool is attached from a work
 * request's completion, as the reload attaches it: libuv then looks at its wake-up before the
 * old pool's in every later pass.
 */
static rmq_pool_t *attach_next, *attached;

static void noop_work(uv_work_t *w) { (void)w; }

static void after_attach(uv_work_t *w, int status)
{
    (void)w;
    (void)status;
    rmq__pool_attach(attach_next);
    attached = attach_next;
    attach_next = NULL;
}

static int next_closed;

static void on_next_closed(void *ud)
{
    (void)ud;
    next_closed = 1;
    requeue_to = NULL; /* the consumer's on_pool_closed: c->pool = NULL */
}

/* reload.c's requeue: to the consumer's pool, or with none left through the usual path. */
static void requeue_or_done(void *ud, rmq_batch_t *b)
{
    nrequeued++;
    if (requeue_to)
        rmq__pool_submit(requeue_to, b);
    else
        pool_count_done(ud, b);
}

static void test_requeue_into_closed(const char *path)
{
    rmq_shdicts_t *s = fresh(1);
    next_closed = 0;
    rmq_pool_t *old = prepare(path, s, 1, 0);
    rmq__pool_attach(old);
    test_batch1_t stuck;
    test_batch1(&stuck, "stuck");
    rmq__pool_submit(old, &stuck.b);
    CHECK(wait_num(s, "ran:stuck", 1, 20));
    attach_next = prepare(path, s, 1, 1);
    uv_work_t w;
    CHECK(uv_queue_work(&loop, &w, noop_work, after_attach) == 0);
    while (attach_next) uv_run(&loop, UV_RUN_ONCE);
    rmq_pool_t *next = attached;
    requeue_to = next;
    CHECK(rmq__pool_retire(old, requeue_or_done, on_closed, NULL) == 0);
    /* The stop: the new pool has nothing to do; the old one's handler is interrupted by the
     * stop 5 s after its (hurried) deadline and its batch comes back NOT_RUN. Both are done
     * before the loop looks again. */
    rmq__pool_stop(next, 0, on_next_closed, NULL);
    rmq__pool_hurry(old, 0);
    int64_t deadline = rmq__mono_ms() + (int64_t)(20000 * scale);
    while (rmq__pool_running(old) > 0 && rmq__mono_ms() < deadline) usleep(10000);
    CHECK(rmq__pool_running(old) == 0);
    usleep(300000); /* the new pool's reaper is long done too */
    CHECK(run_until(-1, 20)); /* the old pool closed */
    CHECK(next_closed);
    CHECKF(ndone == 1 && stuck.b.status == RMQ_CONSUME_NOT_RUN,
           "the stopped batch came back %d time(s) (status %d, handed over %d time(s))", ndone,
           stuck.b.status, nrequeued);
    rmq_shdicts_free(s);
}

static void test_discard(const char *path)
{
    rmq_shdicts_t *s = rmq_shdicts_new();
    rmq_pool_t *p = prepare(path, s, 2, 1);
    rmq__pool_discard(p);
    CHECK(num(s, "inits") == 0 && num(s, "shutdowns") == 0);
    /* Without deferred init, a discarded pool's states ran init and run shutdown. */
    p = prepare(path, s, 2, 0);
    CHECK(num(s, "inits") == 2);
    rmq__pool_discard(p);
    CHECK(num(s, "shutdowns") == 2);
    rmq_shdicts_free(s);
}

int main(void)
{
    pool_loop_open();
    char *path = test_write_script("test_pool_reload", "s", script_text);
    test_deferred_init(path);
    test_retire(path);
    test_retire_timeout(path);
    test_requeue_into_closed(path);
    test_discard(path);
    test_drop_script(path);
    pool_loop_close();
    return test_report("test_pool_reload");
}
