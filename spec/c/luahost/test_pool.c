/*
 * test_pool.c -- the consume pool with real threads, real LuaJIT states, real script files and
 * a real libuv loop: every form of the return contract, handler errors, rmq.send, per-thread
 * isolation, init/shutdown per state, views kept after their batch, consume_timeout, start
 * failures naming file:line, and stop semantics (queued batches come back RMQ_CONSUME_NOT_RUN).
 */
#include "luahost/consume_pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"
#include "test_pool_loop.h"


/* ---- fixtures ------------------------------------------------------------------------- */

static char *write_script(const char *name, const char *text)
{
    return test_write_script("test_pool", name, text);
}

#define MAXB 64
typedef struct tb {
    rmq_batch_t b;
    rmq_msg_t m[4];
    rmq_msg_t *pm[4];
} tb_t;

static const char props[] = "UNIQ_KEY\001C0A8000100002A9F0000000000000001\002KEYS\001k1";

static void mkbatch(tb_t *t, const char *body, int n)
{
    memset(t, 0, sizeof(*t));
    for (int i = 0; i < n; i++) {
        rmq_msg_t *m = &t->m[i];
        m->topic = "TopicT";
        m->topic_len = 6;
        m->body = body;
        m->body_len = (uint32_t)strlen(body);
        m->tags = "TagA";
        m->tags_len = 4;
        m->props = props;
        m->props_len = sizeof(props) - 1;
        m->uniq_key = props + 9;
        m->uniq_key_len = 32;
        m->queue_id = 3;
        m->queue_offset = 1000 + i;
        t->pm[i] = m;
    }
    t->b.msgs = t->pm;
    t->b.n = n;
    t->b.status = -99;
}

static rmq_batch_t *done_list[MAXB];

static void on_done(void *ud, rmq_batch_t *b)
{
    (void)ud;
    if (ndone < MAXB) done_list[ndone] = b;
    ndone++;
}

static rmq_pool_t *start(const char *path, int nthreads, int64_t timeout_ms, char *err,
                         size_t errsz)
{
    return pool_start_script(path, nthreads, on_done, timeout_ms, err, errsz);
}

static void stop(rmq_pool_t *p, int64_t await)
{
    CHECK(pool_stop(p, await, 20));
}

static char *script; /* the running test's script (one at a time), from start_script */

/* The script text written as name (its path in `script`) and a pool of nthreads with
 * consume_timeout_ms timeout_ms started on it; NULL after a failed CHECK saying why (the script
 * then removed). */
static rmq_pool_t *start_script(const char *name, const char *text, int nthreads,
                                int64_t timeout_ms)
{
    char err[1024];
    script = write_script(name, text);
    rmq_pool_t *p = start(script, nthreads, timeout_ms, err, sizeof(err));
    CHECK(p != NULL);
    if (!p) {
        fprintf(stderr, "start: %s\n", err);
        test_drop_script(script);
    }
    return p;
}

/* p stopped (no wait for its handlers) and the script removed. */
static void stop_script(rmq_pool_t *p)
{
    stop(p, 0);
    test_drop_script(script);
}

/* ---- tests ---------------------------------------------------------------------------- */

static const char *contract_script =
    "local rmq = require 'rmq'\n"
    "return {\n"
    "  consumer_group = 'g', subscribe = { TopicT = '*' },\n"
    "  consume = function(msgs, ctx)\n"
    "    local b = msgs[1].body\n"
    "    if b == 'ok' then return end\n"
    "    if b == 'true' then return true end\n"
    "    if b == 'false' then return false end\n"
    "    if b == 'later' then return rmq.RECONSUME_LATER end\n"
    "    if b == 'ack2' then ctx.ack_index = 2; return end\n"
    "    if b == 'ackbig' then ctx.ack_index = 99; return rmq.SUCCESS end\n"
    "    if b == 'delay' then ctx.delay_level = 5; return rmq.RECONSUME_LATER end\n"
    "    if b == 'dlq' then return rmq.DLQ end\n"
    "    if b == 'dlq1' then ctx.ack_index = 1; return rmq.DLQ end\n"
    "    if b == 'err' then error('boom') end\n"
    "    if b == 'bad' then return 'nonsense' end\n"
    "    if b == 'send' then rmq.send('OutTopic', 'fwd:' .. b, { tags = 'X', keys = {'a','b'},\n"
    "        properties = { p1 = 'v1' }, delay_level = 2 }); return end\n"
    "    if b == 'sendfail' then rmq.send('OutTopic', 'x'); return rmq.RECONSUME_LATER end\n"
    "    if b == 'fields' then\n"
    "      local m = msgs[2]\n"
    "      assert(m.topic == 'TopicT' and m.tags == 'TagA' and m.queue_id == 3)\n"
    "      assert(m.queue_offset == 1001LL and m.keys == nil and #msgs == 3)\n"
    "      assert(m.msg_id == 'C0A8000100002A9F0000000000000001', m.msg_id)\n"
    "      assert(m.properties.KEYS == 'k1' and m:property('KEYS') == 'k1')\n"
    "      assert(ctx.thread_index == 1 and ctx.thread_count == 1 and ctx.consumer_group == 'test_group')\n"
    "      return\n"
    "    end\n"
    "    error('unexpected body ' .. b)\n"
    "  end,\n"
    "}\n";

static rmq_batch_t *run_one(rmq_pool_t *p, tb_t *t, const char *body, int n)
{
    mkbatch(t, body, n);
    int before = ndone;
    rmq__pool_submit(p, &t->b);
    CHECK(run_until(before + 1, 10));
    return &t->b;
}

static void test_return_contract(void)
{
    rmq_pool_t *p = start_script("contract", contract_script, 1, 0);
    if (!p) return;
    tb_t t;
    rmq_batch_t *b;
    b = run_one(p, &t, "ok", 3);
    CHECK(b->status == RMQ_CONSUME_SUCCESS && b->ack_count == 3 && b->handler_error == 0);
    CHECK(b->delay_level == 0 && b->thread_index == 0 && b->nsends == 0);
    b = run_one(p, &t, "true", 2);
    CHECK(b->status == RMQ_CONSUME_SUCCESS && b->ack_count == 2);
    b = run_one(p, &t, "false", 2);
    CHECK(b->status == RMQ_CONSUME_RECONSUME_LATER && b->ack_count == 0 && !b->handler_error);
    b = run_one(p, &t, "later", 2);
    CHECK(b->status == RMQ_CONSUME_RECONSUME_LATER && b->ack_count == 0);
    b = run_one(p, &t, "ack2", 4);
    CHECK(b->status == RMQ_CONSUME_SUCCESS && b->ack_count == 2);
    b = run_one(p, &t, "ackbig", 4);
    CHECK(b->status == RMQ_CONSUME_SUCCESS && b->ack_count == 4);
    b = run_one(p, &t, "delay", 1);
    CHECK(b->status == RMQ_CONSUME_RECONSUME_LATER && b->delay_level == 5);
    b = run_one(p, &t, "dlq", 2);
    CHECK(b->status == RMQ_CONSUME_DLQ && b->ack_count == 0);
    b = run_one(p, &t, "dlq1", 3);
    CHECK(b->status == RMQ_CONSUME_DLQ && b->ack_count == 1);
    int64_t e0 = rmq__pool_errors(p);
    b = run_one(p, &t, "err", 2);
    CHECK(b->status == RMQ_CONSUME_RECONSUME_LATER && b->ack_count == 0 && b->handler_error == 1);
    CHECK(rmq__pool_errors(p) == e0 + 1);
    b = run_one(p, &t, "bad", 1);
    CHECK(b->status == RMQ_CONSUME_RECONSUME_LATER && b->handler_error == 1);
    CHECK(rmq__pool_errors(p) == e0 + 2);
    /* The thread keeps going after errors. */
    b = run_one(p, &t, "ok", 1);
    CHECK(b->status == RMQ_CONSUME_SUCCESS && b->handler_error == 0);
    b = run_one(p, &t, "fields", 3);
    CHECK(b->status == RMQ_CONSUME_SUCCESS && b->handler_error == 0);
    b = run_one(p, &t, "send", 1);
    CHECK(b->status == RMQ_CONSUME_SUCCESS && b->nsends == 1);
    if (b->nsends == 1) {
        rmq_send_t *s = &b->sends[0];
        CHECK(s->topic_len == 8 && !memcmp(s->topic, "OutTopic", 8));
        CHECK(s->body_len == 8 && !memcmp(s->body, "fwd:send", 8));
        CHECK(s->tags_len == 1 && s->tags[0] == 'X');
        CHECK(s->keys_len == 3 && !memcmp(s->keys, "a b", 3));
        CHECK(s->props_len == 5 && !memcmp(s->props, "p1\001v1", 5));
        CHECK(s->delay_level == 2);
    }
    rmq__pool_batch_release(b);
    CHECK(b->sends == NULL && b->nsends == 0);
    /* A failed batch's forwards are dropped (the batch is consumed again). */
    b = run_one(p, &t, "sendfail", 1);
    CHECK(b->status == RMQ_CONSUME_RECONSUME_LATER && b->nsends == 0);
    CHECK(rmq__pool_pending(p) == 0);
    stop(p, 0);
    CHECK(closed);
    test_drop_script(script);
}

static void test_orderly(void)
{
    rmq_pool_t *p =
        start_script("orderly",
                     "local rmq = require 'rmq'\n"
                     "return { consumer_group = 'g', subscribe = { T = '*' },\n"
                     "  consume_orderly = function(msgs, ctx)\n"
                     "    local b = msgs[1].body\n"
                     "    assert(ctx.orderly)\n"
                     "    if b == 'ok' then return end\n"
                     "    if b == 'commit' then return rmq.COMMIT end\n"
                     "    if b == 'suspend' then ctx.suspend_millis = 250; return rmq.SUSPEND end\n"
                     "    if b == 'later' then return rmq.RECONSUME_LATER end\n"
                     "    error('orderly boom')\n"
                     "  end }\n",
                     2, 0);
    if (!p) return;
    tb_t t;
    const char *bodies[] = {"ok", "commit", "suspend", "later", "err"};
    int want[] = {RMQ_CONSUME_SUCCESS, RMQ_CONSUME_COMMIT, RMQ_CONSUME_SUSPEND,
                  RMQ_CONSUME_SUSPEND, RMQ_CONSUME_SUSPEND};
    for (int i = 0; i < 5; i++) {
        mkbatch(&t, bodies[i], 2);
        t.b.orderly = 1;
        int before = ndone;
        rmq__pool_submit_to(p, 1, &t.b);
        CHECK(run_until(before + 1, 10));
        CHECK(t.b.status == want[i]);
        CHECK(t.b.thread_index == 1);
        if (i == 2) CHECK(t.b.suspend_millis == 250);
        if (i == 3) CHECK(t.b.suspend_millis == -1 && t.b.handler_error == 0);
        if (i == 4) CHECK(t.b.handler_error == 1);
    }
    stop_script(p);
}

static void test_isolation_and_init(void)
{
    char shut[256];
    snprintf(shut, sizeof(shut), "/tmp/rmq_test_pool_%d_shutdown", (int)getpid());
    unlink(shut);
    char text[4096];
    snprintf(text, sizeof(text),
             "INITS = 0\n"
             "TOP = (TOP or 0) + 1\n"
             "local seen = 0\n"
             "return { consumer_group = 'g', subscribe = { T = '*' },\n"
             "  init = function(ctx) INITS = INITS + 1; MYTHREAD = ctx.thread_index end,\n"
             "  shutdown = function(ctx)\n"
             "    local f = io.open('%s', 'a'); f:write(ctx.thread_index, ' ', INITS, '\\n'); f:close()\n"
             "  end,\n"
             "  consume = function(msgs, ctx)\n"
             "    seen = seen + 1\n"
             "    local b = msgs[1].body\n"
             "    if b == 'set' then SHARED = true end\n"
             "    if b == 'keep' then KEPT = msgs[1] end\n"
             "    if b == 'use' then\n"
             "      local ok, e = pcall(function() return KEPT.body end)\n"
             "      ctx.delay_level = (not ok and e:find('after its handler returned')) and 7 or 8\n"
             "      return\n"
             "    end\n"
             "    assert(MYTHREAD == ctx.thread_index)\n"
             "    ctx.delay_level = INITS * 1000 + TOP * 100 + seen * 10 + (SHARED and 1 or 0)\n"
             "  end }\n",
             shut);
    rmq_pool_t *p = start_script("isolation", text, 2, 0);
    if (!p) return;
    CHECK(rmq__pool_nthreads(p) == 2);
    tb_t t;
    struct {
        int thread;
        const char *body;
        int want;
    } steps[] = {
        {0, "x", 1110},   /* init once, top-level once, first batch, SHARED unset */
        {0, "set", 1121}, /* thread 0 sets a global */
        {0, "x", 1131},   /* visible in its own state */
        {1, "x", 1110},   /* not in thread 1's state */
        {1, "x", 1120},
        {0, "keep", 1141},
        {0, "use", 7},    /* the kept view raises a clean error */
    };
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        mkbatch(&t, steps[i].body, 1);
        int before = ndone;
        rmq__pool_submit_to(p, steps[i].thread, &t.b);
        CHECK(run_until(before + 1, 10));
        if (t.b.delay_level != steps[i].want)
            fprintf(stderr, "step %zu: delay_level %d, want %d\n", i, t.b.delay_level,
                    steps[i].want);
        CHECK(t.b.delay_level == steps[i].want);
        CHECK(t.b.status == RMQ_CONSUME_SUCCESS);
    }
    stop(p, 0);
    /* Each state ran its shutdown hook once, with its own INITS = 1. */
    FILE *f = fopen(shut, "r");
    CHECK(f != NULL);
    if (f) {
        char buf[256] = {0};
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        CHECK(n > 0);
        CHECK(strstr(buf, "1 1\n") != NULL && strstr(buf, "2 1\n") != NULL);
    }
    unlink(shut);
    test_drop_script(script);
}

static void test_stop_not_run(void)
{
    rmq_pool_t *p = start_script("slow",
                                 "return { consumer_group = 'g', subscribe = { T = '*' },\n"
                                 "  consume = function(msgs)\n"
                                 "    if msgs[1].body == 'slow' then\n"
                                 "      local t = os.clock(); while os.clock() - t < 0.3 do end\n"
                                 "    end\n"
                                 "  end }\n",
                                 1, 0);
    if (!p) return;
    static tb_t t[4];
    mkbatch(&t[0], "slow", 1);
    rmq__pool_submit_to(p, 0, &t[0].b);
    for (int i = 1; i < 4; i++) {
        mkbatch(&t[i], "x", 1);
        rmq__pool_submit(p, &t[i].b);
    }
    CHECK(rmq__pool_pending(p) == 4);
    /* Wait until the thread picked up the slow batch (it has left the queue). */
    int64_t dl = rmq__mono_ms() + (int64_t)(10000 * scale);
    while (rmq__pool_running(p) == 0 && rmq__mono_ms() < dl) usleep(1000);
    CHECK(rmq__pool_running(p) == 1);
    stop(p, 0);
    CHECK(ndone == 4);
    int not_run = 0;
    for (int i = 1; i < 4; i++) not_run += t[i].b.status == RMQ_CONSUME_NOT_RUN;
    CHECK(not_run == 3);
    /* The running batch was allowed to finish. */
    CHECK(t[0].b.status == RMQ_CONSUME_SUCCESS);

    /* With a wait, queued batches run. */
    char err[1024];
    p = start(script, 1, 0, err, sizeof(err));
    CHECK(p != NULL);
    if (!p) return;
    for (int i = 0; i < 4; i++) {
        mkbatch(&t[i], "x", 1);
        rmq__pool_submit(p, &t[i].b);
    }
    stop(p, (int64_t)(10000 * scale));
    CHECK(ndone == 4);
    for (int i = 0; i < 4; i++) CHECK(t[i].b.status == RMQ_CONSUME_SUCCESS);
    test_drop_script(script);
}

/* Batches submitted back to back run on different idle threads at the same time. */
static void test_parallel(void)
{
    rmq_pool_t *p = start_script("parallel",
                                 "return { consumer_group = 'g', subscribe = { T = '*' },\n"
                                 "  consume = function(msgs)\n"
                                 "    local t = os.clock(); while os.clock() - t < 0.5 do end\n"
                                 "  end }\n",
                                 3, 0);
    if (!p) return;
    static tb_t t[3];
    for (int i = 0; i < 3; i++) {
        mkbatch(&t[i], "x", 1);
        rmq__pool_submit(p, &t[i].b);
    }
    int max_running = pool_run_max_running(p, 3, 10000);
    CHECK(ndone == 3);
    CHECK(max_running >= 2);
    int seen[3] = {0};
    for (int i = 0; i < 3; i++) seen[t[i].b.thread_index]++;
    CHECK(seen[0] + seen[1] + seen[2] == 3 && (seen[0] < 3 && seen[1] < 3 && seen[2] < 3));
    stop_script(p);
}

static void test_timeout(void)
{
    rmq_pool_t *p = start_script("stuck", TEST_POOL_STUCK_SCRIPT, 1, 200);
    if (!p) return;
    tb_t t;
    mkbatch(&t, "stuck", 1);
    rmq__pool_submit(p, &t.b);
    CHECK(run_until(1, 30));
    CHECK(t.b.status == RMQ_CONSUME_RECONSUME_LATER && t.b.handler_error == 1);
    /* The thread is usable again. */
    rmq_batch_t *b = run_one(p, &t, "ok", 1);
    CHECK(b->status == RMQ_CONSUME_SUCCESS && b->handler_error == 0);
    stop_script(p);
}

/* opts.begin runs on the consume thread before each handler, with its start time; nonzero skips
 * the handler (the batch comes back RMQ_CONSUME_SKIPPED). */
static int64_t begin_start_ms;
static int begin_calls;

static int begin_cb(void *ud, rmq_batch_t *b, int64_t start_ms)
{
    (void)ud;
    __atomic_add_fetch(&begin_calls, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&begin_start_ms, start_ms, __ATOMIC_RELAXED);
    return b->msgs[0]->body_len == 4 && !memcmp(b->msgs[0]->body, "skip", 4);
}

static void test_begin(void)
{
    char err[1024];
    char *path = write_script("begin",
                              "return { consumer_group = 'g', subscribe = { T = '*' },\n"
                              "  consume = function(msgs)\n"
                              "    if msgs[1].body == 'skip' then error('ran a skipped batch') end\n"
                              "  end }\n");
    rmq_pool_opts_t o = {.script_path = path,
                         .nthreads = 1,
                         .done = on_done,
                         .consumer_group = "test_group",
                         .begin = begin_cb};
    rmq_pool_t *p = pool_start(&o, err, sizeof(err));
    CHECK(p != NULL);
    if (!p) {
        fprintf(stderr, "start: %s\n", err);
        return;
    }
    tb_t t;
    int64_t before = rmq__mono_ms();
    rmq_batch_t *b = run_one(p, &t, "skip", 1);
    CHECK(b->status == RMQ_CONSUME_SKIPPED && b->handler_error == 0 && b->ack_count == 0);
    CHECK(rmq__pool_errors(p) == 0);
    int64_t st = __atomic_load_n(&begin_start_ms, __ATOMIC_RELAXED);
    CHECKF(st > before - 100 && st <= rmq__mono_ms(), "start %lld, before %lld", (long long)st,
           (long long)before);
    b = run_one(p, &t, "ok", 1);
    CHECK(b->status == RMQ_CONSUME_SUCCESS && b->handler_error == 0);
    CHECK(begin_calls == 2);
    stop(p, 0);
    test_drop_script(path);
}

static void test_start_failures(void)
{
    char err[1024];
    struct {
        const char *name, *text, *want;
    } cases[] = {
        {"syntax", "return {\n consume = function(msgs) end end\n}\n", ":2:"},
        {"nohandler", "local x = 1\nreturn { consumer_group = 'g', subscribe = { T = '*' } }\n",
         ":2: the script defines no handler"},
        {"initfail",
         "return { subscribe = { T = '*' }, consume = function() end,\n"
         "  init = function() error('no db') end }\n",
         "no db"},
        {"toplevel", "local x = nil\nx.y = 1\nreturn {}\n", ":2:"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *path = write_script(cases[i].name, cases[i].text);
        rmq_pool_t *p = start(path, 2, 0, err, sizeof(err));
        CHECK(p == NULL);
        if (p) stop(p, 0);
        if (!strstr(err, cases[i].want) || !strstr(err, path))
            fprintf(stderr, "case %s: error was: %s\n", cases[i].name, err);
        CHECK(strstr(err, cases[i].want) != NULL);
        CHECK(strstr(err, path) != NULL);
        test_drop_script(path);
    }
}

int main(void)
{
    pool_loop_open();
    test_return_contract();
    test_orderly();
    test_isolation_and_init();
    test_stop_not_run();
    test_parallel();
    test_timeout();
    test_begin();
    test_start_failures();
    pool_loop_close();
    return test_report("test_pool");
}
