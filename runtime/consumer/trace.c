/*
 * trace.c -- message trace of the consumer (trace.h): Java's ConsumeMessageTraceHookImpl
 * (what a SubBefore and a SubAfter record hold), TraceDataEncoder (their text) and
 * AsyncTraceDispatcher (how they travel) of RocketMQ 4.9.4.
 *
 * A consumed batch gives one SubBefore and one SubAfter record per message, sharing a request
 * id (MessageClientIDSetter.createUniqID). Records are appended to a segment; the segment goes
 * out as one message to the trace topic when it reaches the trace producer's size limit
 * (maxMsgSize - 10,000 = 118,000 bytes) or when its first record is 500 ms old (checked every
 * 100 ms), with the message ids and keys of its records as the message's KEYS (so the broker's
 * index answers QueryMsgTraceById). The send is asynchronous; a failure is logged (at most once
 * a minute) and the records dropped: trace never slows or fails consumption. At most
 * RMQ_TRACE_MAX_INFLIGHT segments are on their way; beyond that a full segment is dropped and
 * counted, as AsyncTraceDispatcher drops contexts when its queues are full.
 *
 * Ownership: the dispatcher owns its segment and timer; a send in flight holds a reference on
 * the dispatcher, which is freed when it is closed and the last send completed.
 * Threads: the loop thread only.
 */
#include "trace.h"

#include "base/codes.h"
#include "base/log.h"
#include "protocol/message.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RMQ_TRACE_MAX_MSG_SIZE (128000 - 10 * 1000) /* the trace producer's maxMessageSize */
#define RMQ_TRACE_MAX_KEYS_SIZE 30000 /* properties stay under Java's Short.MAX_VALUE */
#define RMQ_TRACE_POLL_MS 100         /* pollingTimeMil */
#define RMQ_TRACE_WAIT_MS 500         /* waitTimeThresholdMil */
#define RMQ_TRACE_MAX_INFLIGHT 16

struct rmq_trace {
    uv_timer_t timer;
    rmq_producer_t *p;
    char *topic, *group;
    rmq_buf_t data;        /* the segment's records */
    rmq_buf_t keys;        /* its keys, space separated */
    int64_t first_ms;      /* monotonic time of its first record; 0 = empty */
    int inflight;          /* sends not yet completed */
    int closing, timer_closed;
    int64_t discarded, failed; /* in the warning */
    int64_t last_fail_log; /* monotonic ms */
};

/* ---- encoding (TraceDataEncoder) -------------------------------------------------------- */

static int put(rmq_buf_t *b, const char *s, size_t n, char sep)
{
    if (rmq__buf_append(b, s, n)) return RMQ_ERR_NOMEM;
    return rmq__buf_append(b, &sep, 1) ? RMQ_ERR_NOMEM : 0;
}

static int puts_(rmq_buf_t *b, const char *s, char sep)
{
    if (!s) s = "null"; /* StringBuilder.append((String) null) */
    return put(b, s, strlen(s), sep);
}

static int putn(rmq_buf_t *b, int64_t v, char sep)
{
    char num[32];
    int n = snprintf(num, sizeof(num), "%" PRId64, v);
    return put(b, num, (size_t)n, sep);
}

static int put_keys(rmq_buf_t *b, const rmq_trace_bean_t *m, char sep)
{
    if (!m->keys) return puts_(b, NULL, sep);
    return put(b, m->keys, m->keys_len, sep);
}

int rmq__trace_encode_sub_before(rmq_buf_t *out, const rmq_trace_ctx_t *x)
{
    const char C = RMQ_TRACE_CONTENT_SEP;
    for (int i = 0; i < x->n; i++) {
        const rmq_trace_bean_t *m = &x->beans[i];
        if (puts_(out, "SubBefore", C) || putn(out, x->timestamp, C) ||
            puts_(out, x->region, C) || puts_(out, x->group, C) ||
            puts_(out, x->request_id, C) || put(out, m->msg_id, m->msg_id_len, C) ||
            putn(out, m->retry_times, C) || put_keys(out, m, RMQ_TRACE_FIELD_SEP))
            return RMQ_ERR_NOMEM;
    }
    return 0;
}

int rmq__trace_encode_sub_after(rmq_buf_t *out, const rmq_trace_ctx_t *x)
{
    const char C = RMQ_TRACE_CONTENT_SEP;
    for (int i = 0; i < x->n; i++) {
        const rmq_trace_bean_t *m = &x->beans[i];
        if (puts_(out, "SubAfter", C) || puts_(out, x->request_id, C) ||
            put(out, m->msg_id, m->msg_id_len, C) || putn(out, x->cost_ms, C) ||
            puts_(out, x->success ? "true" : "false", C) || put_keys(out, m, C) ||
            putn(out, x->context_code, C) || putn(out, x->timestamp, C) ||
            puts_(out, x->group, RMQ_TRACE_FIELD_SEP))
            return RMQ_ERR_NOMEM;
    }
    return 0;
}

/* ---- the dispatcher (AsyncTraceDispatcher) ----------------------------------------------- */

static void maybe_free(rmq_trace_t *t)
{
    if (!t->closing || !t->timer_closed || t->inflight > 0) return;
    rmq__buf_free(&t->data);
    rmq__buf_free(&t->keys);
    free(t->topic);
    free(t->group);
    free(t);
}

/* A warning at most once a minute: the trace topic's troubles must not flood the log. */
static void warn_lost(rmq_trace_t *t, const char *what)
{
    int64_t now = rmq__mono_ms();
    if (t->last_fail_log && now - t->last_fail_log < 60000) return;
    t->last_fail_log = now;
    rmq_log_warn("trace", "trace data for %s lost (%" PRId64 " failed send(s), %" PRId64
                 " segment(s) dropped so far; consumption goes on): %s", t->topic, t->failed,
                 t->discarded, what);
}

static void on_sent(void *ud, int err, const rmq_send_result_t *res, const char *errmsg)
{
    (void)res;
    rmq_trace_t *t = ud;
    t->inflight--;
    if (err) {
        t->failed++;
        warn_lost(t, errmsg);
    }
    maybe_free(t);
}

static void reset_segment(rmq_trace_t *t)
{
    t->data.len = 0;
    t->keys.len = 0;
    t->first_ms = 0;
}

/* Send the segment (AsyncDataSendTask) and start a new one. */
static void send_segment(rmq_trace_t *t)
{
    if (t->data.len == 0) return;
    if (t->inflight >= RMQ_TRACE_MAX_INFLIGHT) {
        t->discarded++;
        warn_lost(t, "too many trace sends waiting for an answer");
        reset_segment(t);
        return;
    }
    if (rmq__buf_append(&t->keys, "", 1)) { /* NUL for the producer */
        t->discarded++;
        reset_segment(t);
        return;
    }
    rmq_send_msg_t m = {0};
    m.topic = t->topic;
    m.body = t->data.data;
    m.body_len = t->data.len;
    m.keys = t->keys.len > 1 ? t->keys.data : NULL;
    char err[256];
    if (rmq__producer_send(t->p, &m, on_sent, t, err, sizeof(err)) == 0) {
        t->inflight++;
    } else {
        t->failed++;
        warn_lost(t, err);
    }
    reset_segment(t);
}

static void on_timer(uv_timer_t *tm)
{
    rmq_trace_t *t = tm->data;
    if (t->first_ms && rmq__mono_ms() - t->first_ms >= RMQ_TRACE_WAIT_MS) send_segment(t);
    if (!t->first_ms) uv_timer_stop(&t->timer);
}

rmq_trace_t *rmq__trace_new(uv_loop_t *loop, rmq_producer_t *p, const char *topic,
                            const char *group)
{
    rmq_trace_t *t = rmq__xcalloc(1, sizeof(*t));
    uv_timer_init(loop, &t->timer);
    t->timer.data = t;
    t->p = p;
    t->topic = rmq__xstrdup(topic && *topic ? topic : RMQ_TRACE_DEFAULT_TOPIC);
    t->group = rmq__xstrdup(group);
    rmq__buf_init(&t->data);
    rmq__buf_init(&t->keys);
    return t;
}

/* Whether the key k (n bytes) is already among the segment's keys. */
static int has_key(const rmq_buf_t *keys, const char *k, size_t n)
{
    const char *s = keys->data, *end = keys->data + keys->len;
    while (s && s < end) {
        const char *sp = memchr(s, ' ', (size_t)(end - s));
        size_t len = sp ? (size_t)(sp - s) : (size_t)(end - s);
        if (len == n && memcmp(s, k, n) == 0) return 1;
        s = sp ? sp + 1 : end;
    }
    return 0;
}

/* TraceTransferBean.transKey: the message id and each of its keys (KEY_SEPARATOR " "). */
static void add_keys(rmq_trace_t *t, const rmq_trace_bean_t *m)
{
    const char *parts[2] = {m->msg_id, m->keys};
    size_t lens[2] = {m->msg_id_len, m->keys ? m->keys_len : 0};
    for (int w = 0; w < 2; w++) {
        const char *s = parts[w], *end = s ? s + lens[w] : s;
        while (s && s < end) {
            const char *sp = w ? memchr(s, ' ', (size_t)(end - s)) : NULL;
            size_t n = sp ? (size_t)(sp - s) : (size_t)(end - s);
            if (n > 0 && !has_key(&t->keys, s, n)) {
                if (t->keys.len) rmq__buf_append(&t->keys, " ", 1);
                rmq__buf_append(&t->keys, s, n);
            }
            s = sp ? sp + 1 : end;
        }
    }
}

void rmq__trace_batch(rmq_trace_t *t, rmq_msg_t *const *msgs, int n, int64_t start_wall_ms,
                      int64_t run_ms, int success, int context_code)
{
    if (!t || t->closing || n <= 0) return;
    rmq_trace_bean_t small[32], *beans = n <= 32 ? small : malloc(sizeof(*beans) * (size_t)n);
    if (!beans) {
        t->discarded++;
        return;
    }
    char region[128];
    char *offids = NULL; /* offsetMsgIds of messages without UNIQ_KEY, 57 bytes each */
    const char *reg = NULL;
    int k = 0;
    for (int i = 0; i < n; i++) {
        const rmq_msg_t *m = msgs[i];
        uint32_t len;
        const char *on = rmq_msg_prop(m, "TRACE_ON", &len);
        if (on && len == 5 && memcmp(on, "false", 5) == 0) continue;
        const char *r = rmq_msg_prop(m, "MSG_REGION", &len);
        if (r && len < sizeof(region)) { /* the last message's, as Java's loop leaves it */
            memcpy(region, r, len);
            region[len] = '\0';
            reg = region;
        } else {
            reg = NULL;
        }
        rmq_trace_bean_t *b = &beans[k++];
        /* MessageClientExt.getMsgId: UNIQ_KEY, else the offsetMsgId. */
        b->msg_id = m->uniq_key;
        b->msg_id_len = m->uniq_key_len;
        if (b->msg_id_len == 0) {
            if (!offids) offids = malloc((size_t)n * 57);
            if (offids) {
                b->msg_id = offids + (size_t)i * 57;
                b->msg_id_len = (size_t)rmq_msg_offset_msg_id(m, offids + (size_t)i * 57);
            }
        }
        b->keys = m->keys_len ? m->keys : NULL;
        b->keys_len = m->keys_len;
        b->retry_times = m->reconsume_times;
    }
    if (k == 0) {
        if (beans != small) free(beans);
        free(offids);
        return;
    }
    char rid[64];
    rmq__uniq_id_new(rid);
    rmq_trace_ctx_t x = {.timestamp = start_wall_ms, .region = reg, .group = t->group,
                         .request_id = rid, .beans = beans, .n = k};
    size_t mark = t->data.len;
    int rc = rmq__trace_encode_sub_before(&t->data, &x);
    x.timestamp = start_wall_ms + run_ms;
    x.cost_ms = (int)(run_ms / n);
    x.success = success;
    x.context_code = context_code;
    if (!rc) rc = rmq__trace_encode_sub_after(&t->data, &x);
    if (rc) {
        t->data.len = mark;
        t->discarded++;
    } else {
        if (!t->first_ms) {
            t->first_ms = rmq__mono_ms();
            uv_timer_start(&t->timer, on_timer, RMQ_TRACE_POLL_MS, RMQ_TRACE_POLL_MS);
        }
        for (int i = 0; i < k; i++) add_keys(t, &beans[i]);
        if (t->data.len >= RMQ_TRACE_MAX_MSG_SIZE || t->keys.len >= RMQ_TRACE_MAX_KEYS_SIZE)
            send_segment(t);
    }
    if (beans != small) free(beans);
    free(offids);
}

void rmq__trace_flush(rmq_trace_t *t)
{
    if (t) send_segment(t);
}

static void on_timer_closed(uv_handle_t *h)
{
    rmq_trace_t *t = h->data;
    t->timer_closed = 1;
    maybe_free(t);
}

void rmq__trace_close(rmq_trace_t *t)
{
    if (!t) return;
    t->closing = 1;
    uv_close((uv_handle_t *)&t->timer, on_timer_closed);
}
