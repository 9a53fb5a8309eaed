/*
 * reader.c -- reading a topic without a consumer group (reader.h): route, start offsets, pulls.
 *
 * Each queue goes START -> (END when stop_at_end) -> PULL, and from then on alternates between a
 * pull in flight, waiting for the caller (HELD, after on_msgs), and a retry delay (its timer);
 * it finishes ENDED or STOPPED.
 *
 * Ownership: the reader owns its queues and their timers; every request in flight carries a
 * context (reader, queue index) and the reader is freed only when none is left and every timer
 * handle has closed (rmq__reader_destroy may come first: answers are then absorbed).
 * Threads: the loop thread.
 */
#include "reader.h"

#include "base/codes.h"
#include "protocol/mq.h"
#include "protocol/route.h"
#include "protocol/subscription.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define SUB "reader"
#define TOOLS_PULL_TIMEOUT_MS 10000 /* DefaultMQPullConsumer.consumerPullTimeoutMillis */
#define SUSPEND_MS 15000            /* BROKER_SUSPEND_MAX_TIME_MILLIS */
#define SUSPEND_TIMEOUT_MS 30000    /* CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND */
#define ADMIN_TIMEOUT_MS 6000       /* GET_MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP */
#define RETRY_DELAY_MS 1000         /* pullTimeDelayMillsWhenException */
#define SYSFLAG_SUSPEND 0x2
#define SYSFLAG_SUBSCRIPTION 0x4

enum { RQ_START = 0, RQ_END, RQ_PULL, RQ_HELD, RQ_ENDED, RQ_STOPPED };
static const char *const rq_state_names[] = {"START", "END", "PULL", "HELD", "ENDED", "STOPPED"};

struct rmq_reader {
    rmq_reader_opts_t o;
    char *topic, *group, *broker;
    rmq_sub_t *sub; /* the tag filter */
    rmq_rq_t **qs;
    int n;
    int ready;     /* on_ready called */
    int ended;     /* queues ENDED */
    int destroyed; /* by the caller: no more callbacks */
    int failed;    /* on_error called */
    int inflight;  /* requests whose answer is still due */
    int closing;   /* timer handles still closing */
    uv_timer_t route_timer;
};

typedef struct rctx {
    rmq_reader_t *r;
    int idx; /* queue index, -1 for the route */
    int code;
} rctx_t;

static void maybe_free(rmq_reader_t *r)
{
    if (!r->destroyed || r->inflight || r->closing) return;
    for (int i = 0; i < r->n; i++)
        free(r->qs[i]);
    free(r->qs);
    if (r->sub) rmq__sub_destroy(r->sub);
    free(r->topic);
    free(r->group);
    free(r->broker);
    free(r);
}

static void set_state(rmq_rq_t *q, int s)
{
    if (q->state == s) return;
    rmq_dbg(RMQ_DBG_PULL, SUB, "%s@%s#%d: %s -> %s", q->r->topic, q->broker_name, q->queue_id,
            rq_state_names[q->state], rq_state_names[s]);
    q->state = s;
}

static void fatal(rmq_reader_t *r, int code, const char *fmt, ...) RMQ_PRINTF(3, 4);
static void fatal(rmq_reader_t *r, int code, const char *fmt, ...)
{
    if (r->failed || r->destroyed) return;
    r->failed = 1;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    for (int i = 0; i < r->n; i++)
        if (r->qs[i]->state != RQ_ENDED) set_state(r->qs[i], RQ_STOPPED);
    if (r->o.on_error) r->o.on_error(r->o.ud, code, msg);
}

static int send_req(rmq_reader_t *r, const char *addr, rmq_cmd_t *cmd, int64_t timeout, int idx,
                    rmq_response_cb cb)
{
    rctx_t *c = rmq__xcalloc(1, sizeof(*c));
    c->r = r;
    c->idx = idx;
    c->code = cmd->code;
    int rc = rmq__remoting_request(r->o.rt, addr, cmd, timeout, cb, c);
    if (rc) {
        free(c);
        return rc;
    }
    r->inflight++;
    return 0;
}

/* ---- queues: steps and retries ----------------------------------------------------------------
 */

static void step(rmq_rq_t *q);

static void on_retry_timer(uv_timer_t *t)
{
    rmq_rq_t *q = t->data;
    if (!q->r->destroyed) step(q);
}

static void later(rmq_rq_t *q)
{
    uv_timer_start(&q->timer, on_retry_timer, RETRY_DELAY_MS, 0);
}

/* on_done once no queue is left reading (ended or stopped). */
static void check_done(rmq_reader_t *r)
{
    if (r->destroyed || r->failed || !r->ready) return;
    for (int i = 0; i < r->n; i++)
        if (r->qs[i]->state != RQ_ENDED && r->qs[i]->state != RQ_STOPPED) return;
    if (r->o.on_done) r->o.on_done(r->o.ud);
}

static void queue_ended(rmq_rq_t *q)
{
    rmq_reader_t *r = q->r;
    set_state(q, RQ_ENDED);
    r->ended++;
    if (r->o.on_queue_end) r->o.on_queue_end(r->o.ud, q);
    check_done(r);
}

static void on_offset(void *ud, int err, rmq_cmd_t *resp, const char *errmsg);
static void on_pull(void *ud, int err, rmq_cmd_t *resp, const char *errmsg);

void rmq__reader_queue_cmd(rmq_cmd_t *cmd, int32_t code, const char *group, const char *topic,
                           int queue_id)
{
    rmq__cmd_init(cmd, code, RMQ_SERIALIZE_JSON);
    if (group) rmq__cmd_set_ext(cmd, "consumerGroup", group);
    rmq__cmd_set_ext(cmd, "topic", topic);
    rmq__cmd_set_ext_i64(cmd, "queueId", queue_id);
}

static void offset_request(rmq_rq_t *q, int code)
{
    rmq_reader_t *r = q->r;
    rmq_cmd_t cmd;
    rmq__reader_queue_cmd(&cmd, code, code == RMQ_REQ_QUERY_CONSUMER_OFFSET ? r->group : NULL,
                          r->topic, q->queue_id);
    if (code == RMQ_REQ_SEARCH_OFFSET_BY_TIMESTAMP)
        rmq__cmd_set_ext_i64(&cmd, "timestamp", r->o.from_value);
    int rc = send_req(r, q->addr, &cmd, ADMIN_TIMEOUT_MS, q->index, on_offset);
    rmq__cmd_free(&cmd);
    if (rc) {
        rmq_log_warn(SUB, "%s@%s#%d: cannot send %s: %s", r->topic, q->broker_name, q->queue_id,
                     rmq_request_code_name(code), rmq_err_str(rc));
        later(q);
        return;
    }
    q->busy = 1;
}

static void pull(rmq_rq_t *q)
{
    rmq_reader_t *r = q->r;
    int follow = !r->o.stop_at_end;
    int sys_flag = SYSFLAG_SUBSCRIPTION | (follow ? SYSFLAG_SUSPEND : 0);
    rmq_cmd_t cmd;
    rmq__reader_queue_cmd(&cmd, RMQ_REQ_PULL_MESSAGE, r->group, r->topic, q->queue_id);
    rmq__cmd_set_ext_i64(&cmd, "queueOffset", q->next);
    rmq__cmd_set_ext_i64(&cmd, "maxMsgNums", r->o.max_msgs > 0 ? r->o.max_msgs : 32);
    rmq__cmd_set_ext_i64(&cmd, "sysFlag", sys_flag);
    rmq__cmd_set_ext_i64(&cmd, "commitOffset", 0);
    rmq__cmd_set_ext_i64(&cmd, "suspendTimeoutMillis", SUSPEND_MS);
    rmq__cmd_set_ext(&cmd, "subscription", r->sub->sub_string);
    rmq__cmd_set_ext_i64(&cmd, "subVersion", 0);
    rmq__cmd_set_ext(&cmd, "expressionType", "TAG");
    int rc = send_req(r, q->addr, &cmd, follow ? SUSPEND_TIMEOUT_MS : TOOLS_PULL_TIMEOUT_MS,
                      q->index, on_pull);
    rmq__cmd_free(&cmd);
    if (rc) {
        rmq_log_warn(SUB, "%s@%s#%d: cannot send PULL_MESSAGE: %s", r->topic, q->broker_name,
                     q->queue_id, rmq_err_str(rc));
        later(q);
        return;
    }
    q->busy = 1;
}

static int at_end(const rmq_rq_t *q)
{
    return q->end >= 0 && q->next >= q->end;
}

static void begin_if_ready(rmq_reader_t *r)
{
    if (r->ready) return;
    for (int i = 0; i < r->n; i++)
        if (r->qs[i]->state < RQ_PULL) return;
    r->ready = 1;
    if (r->o.on_ready) r->o.on_ready(r->o.ud, r->qs, r->n);
    for (int i = 0; i < r->n && !r->destroyed && !r->failed; i++) {
        rmq_rq_t *q = r->qs[i];
        if (q->state != RQ_PULL) continue;
        if (at_end(q))
            queue_ended(q);
        else
            pull(q);
    }
}

/* Do what the queue's state needs next (first request, or again after a retry delay). */
static void step(rmq_rq_t *q)
{
    rmq_reader_t *r = q->r;
    if (r->failed || r->destroyed || q->busy) return;
    switch (q->state) {
    case RQ_START: {
        int code = 0;
        switch (r->o.from) {
        case RMQ_FROM_FIRST:
            code = RMQ_REQ_GET_MIN_OFFSET;
            break;
        case RMQ_FROM_LAST:
        case RMQ_FROM_BEFORE_END:
            code = RMQ_REQ_GET_MAX_OFFSET;
            break;
        case RMQ_FROM_TIMESTAMP:
            code = RMQ_REQ_SEARCH_OFFSET_BY_TIMESTAMP;
            break;
        case RMQ_FROM_COMMITTED:
            code = q->start == -2 ? RMQ_REQ_GET_MIN_OFFSET : RMQ_REQ_QUERY_CONSUMER_OFFSET;
            break;
        case RMQ_FROM_OFFSET:
            q->start = q->next = r->o.from_value;
            set_state(q, r->o.stop_at_end ? RQ_END : RQ_PULL);
            step(q);
            return;
        }
        offset_request(q, code);
        return;
    }
    case RQ_END:
        offset_request(q, RMQ_REQ_GET_MAX_OFFSET);
        return;
    case RQ_PULL:
        if (!r->ready) {
            begin_if_ready(r);
            return;
        }
        if (at_end(q))
            queue_ended(q);
        else
            pull(q);
        return;
    default:
        return;
    }
}

/* Answers that retrying cannot cure end the whole read. */
static int hopeless(int code)
{
    return code == RMQ_RESP_TOPIC_NOT_EXIST || code == RMQ_RESP_NO_PERMISSION ||
           code == RMQ_RESP_SUBSCRIPTION_PARSE_FAILED ||
           code == RMQ_RESP_SUBSCRIPTION_GROUP_NOT_EXIST;
}

/* Take the context of an answer: NULL when the reader is gone (and then maybe freed). */
static rmq_rq_t *answer_queue(void *ud, int *code)
{
    rctx_t *c = ud;
    rmq_reader_t *r = c->r;
    int idx = c->idx;
    *code = c->code;
    free(c);
    r->inflight--;
    if (r->destroyed) {
        maybe_free(r);
        return NULL;
    }
    rmq_rq_t *q = r->qs[idx];
    q->busy = 0;
    if (r->failed || q->state == RQ_STOPPED) return NULL;
    return q;
}

static void on_offset(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    int code;
    rmq_rq_t *q = answer_queue(ud, &code);
    if (!q) return;
    rmq_reader_t *r = q->r;
    int64_t off = -1;
    if (err) {
        rmq_log_warn(SUB, "%s@%s#%d: %s failed: %s; again in 1 s", r->topic, q->broker_name,
                     q->queue_id, rmq_request_code_name(code), errmsg);
        later(q);
        return;
    }
    if (code == RMQ_REQ_QUERY_CONSUMER_OFFSET && resp->code == RMQ_RESP_QUERY_NOT_FOUND) {
        /* no committed offset: start at the queue's min offset */
        q->start = -2;
        step(q);
        return;
    }
    if (resp->code != RMQ_RESP_SUCCESS || rmq__cmd_ext_i64(resp, "offset", &off) || off < 0) {
        if (hopeless(resp->code)) {
            fatal(r, resp->code, "%s of %s@%s#%d: %s (%s)", rmq_request_code_name(code), r->topic,
                  q->broker_name, q->queue_id, resp->remark ? resp->remark : "",
                  rmq_err_name(resp->code));
            return;
        }
        rmq_log_warn(SUB, "%s@%s#%d: %s answered %s: %s; again in 1 s", r->topic, q->broker_name,
                     q->queue_id, rmq_request_code_name(code), rmq_err_name(resp->code),
                     resp->remark ? resp->remark : "");
        later(q);
        return;
    }
    if (q->state == RQ_START) {
        int64_t max = off; /* when the answer was GET_MAX_OFFSET */
        if (r->o.from == RMQ_FROM_BEFORE_END)
            off = off > r->o.from_value ? off - r->o.from_value : 0;
        q->start = q->next = off;
        if (!r->o.stop_at_end) {
            set_state(q, RQ_PULL);
        } else if (code == RMQ_REQ_GET_MAX_OFFSET) {
            q->end = max; /* the same answer gives the end */
            set_state(q, RQ_PULL);
        } else {
            set_state(q, RQ_END);
        }
    } else if (q->state == RQ_END) {
        q->end = off;
        set_state(q, RQ_PULL);
    }
    rmq_dbg(RMQ_DBG_PULL, SUB, "%s@%s#%d: start %" PRId64 ", end %" PRId64, r->topic,
            q->broker_name, q->queue_id, q->next, q->end);
    step(q);
}

static void on_pull(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    int code;
    rmq_rq_t *q = answer_queue(ud, &code);
    if (!q) return;
    rmq_reader_t *r = q->r;
    if (err) {
        rmq_log_warn(SUB, "%s@%s#%d: pull failed: %s; again in 1 s", r->topic, q->broker_name,
                     q->queue_id, errmsg);
        later(q);
        return;
    }
    int64_t next = q->next;
    int has_next = rmq__cmd_ext_i64(resp, "nextBeginOffset", &next) == 0;
    rmq__cmd_ext_i64(resp, "maxOffset", &q->max);
    switch (resp->code) {
    case RMQ_RESP_SUCCESS: {
        char errstr[256] = "";
        int64_t min_off = 0, max_off = 0;
        rmq__cmd_ext_i64(resp, "minOffset", &min_off);
        rmq__cmd_ext_i64(resp, "maxOffset", &max_off);
        rmq_msgset_t *set = NULL;
        int rc =
            rmq__msgset_decode_ex(resp->frame, resp->body, resp->body_len, q->broker_name, min_off,
                                  max_off, RMQ_DECODE_KEEP_BAD, &set, errstr, sizeof(errstr));
        if (!set) {
            rmq_log_error(SUB, "%s@%s#%d: cannot decode the pull body: %s", r->topic,
                          q->broker_name, q->queue_id, rmq_err_str(rc));
            later(q);
            return;
        }
        /* A message that cannot be decoded is passed over, loudly: reading goes on after it. */
        int64_t last = set->n > 0 ? set->msgs[set->n - 1].queue_offset : -1;
        for (int i = 0; i < set->n_bad; i++) {
            rmq_msg_t *m = &set->bad[i];
            rmq_log_error(SUB,
                          "%s@%s#%d: the message at queue offset %" PRId64 " cannot be "
                          "decoded (%s): passed over",
                          r->topic, q->broker_name, q->queue_id, m->queue_offset,
                          set->bad_why[i] ? set->bad_why[i] : "?");
            if (m->queue_offset > last) last = m->queue_offset;
            rmq__msg_release(m);
        }
        if (set->lost) {
            /* The framing is lost at a message: read on after it. Its QUEUEOFFSET field counts
             * when it lies in the pulled range (damaged bytes may read anything); else after
             * the last message read, else one past the pulled offset (pulling those bytes again
             * would read the same). One past 2^63 - 1 stays 2^63 - 1. */
            int64_t pulled = q->next, lost = set->lost_queue_offset, after;
            if (lost >= pulled && (!has_next || lost < next))
                after = rmq__offset_after(lost);
            else if (last >= pulled)
                after = rmq__offset_after(last);
            else
                after = rmq__offset_after(pulled);
            rmq_log_error(SUB,
                          "%s@%s#%d: pull body unreadable after queue offset %" PRId64 " (%s): "
                          "reading on from offset %" PRId64,
                          r->topic, q->broker_name, q->queue_id, last, errstr, after);
            if (after < next || !has_next) next = after;
            has_next = 1;
        }
        rmq_msg_t *stack[64];
        rmq_msg_t **keep = set->n <= 64 ? stack : rmq__xmalloc(sizeof(*keep) * (size_t)set->n);
        int nk = 0;
        for (int i = 0; i < set->n; i++) {
            rmq_msg_t *m = &set->msgs[i];
            /* the client-side tag check, and nothing past a stop_at_end snapshot */
            if ((q->end >= 0 && m->queue_offset >= q->end) ||
                !rmq__sub_match_tags(r->sub, m->tags_len ? m->tags : NULL, m->tags_len)) {
                rmq__msg_release(m);
                continue;
            }
            keep[nk++] = m;
        }
        if (has_next) q->next = next;
        if (q->end >= 0 && q->next > q->end) q->next = q->end;
        if (nk > 0) {
            set_state(q, RQ_HELD);
            if (r->o.on_msgs)
                r->o.on_msgs(r->o.ud, q, keep, nk);
            else
                for (int i = 0; i < nk; i++)
                    rmq__msg_release(keep[i]);
        }
        rmq__msgset_release(set);
        if (keep != stack) free(keep);
        if (nk == 0) step(q);
        return;
    }
    case RMQ_RESP_PULL_NOT_FOUND:
    case RMQ_RESP_PULL_RETRY_IMMEDIATELY:
        if (has_next) q->next = next;
        /* stop_at_end: nothing more below the end either */
        if (r->o.stop_at_end && resp->code == RMQ_RESP_PULL_NOT_FOUND && q->end > q->next)
            q->end = q->next;
        step(q);
        return;
    case RMQ_RESP_PULL_OFFSET_MOVED:
        rmq_log_warn(
            SUB, "%s@%s#%d: offset %" PRId64 " is out of the queue (%s), going on at %" PRId64,
            r->topic, q->broker_name, q->queue_id, q->next, resp->remark ? resp->remark : "", next);
        if (has_next && next != q->next) {
            q->next = next;
            step(q);
        } else {
            later(q);
        }
        return;
    default:
        if (hopeless(resp->code)) {
            fatal(r, resp->code, "PULL_MESSAGE of %s@%s#%d: %s (%s)", r->topic, q->broker_name,
                  q->queue_id, resp->remark ? resp->remark : "", rmq_err_name(resp->code));
            return;
        }
        rmq_log_warn(SUB, "%s@%s#%d: pull answered %s: %s; again in 1 s", r->topic, q->broker_name,
                     q->queue_id, rmq_err_name(resp->code), resp->remark ? resp->remark : "");
        later(q);
        return;
    }
}

/* ---- the route --------------------------------------------------------------------------------
 */

static void route_request(rmq_reader_t *r);

static void on_route_timer(uv_timer_t *t)
{
    rmq_reader_t *r = t->data;
    if (!r->destroyed) route_request(r);
}

static void on_route(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    rctx_t *c = ud;
    rmq_reader_t *r = c->r;
    free(c);
    r->inflight--;
    if (r->destroyed) {
        maybe_free(r);
        return;
    }
    if (err) {
        rmq_log_warn(SUB, "route of %s: %s; again in 1 s", r->topic, errmsg);
        uv_timer_start(&r->route_timer, on_route_timer, RETRY_DELAY_MS, 0);
        return;
    }
    if (resp->code != RMQ_RESP_SUCCESS || !resp->body) {
        if (resp->code == RMQ_RESP_TOPIC_NOT_EXIST) {
            const char *rm = resp->remark ? resp->remark : "no route on the name server";
            fatal(r, resp->code, "topic %s does not exist (%.*s)", r->topic, (int)strcspn(rm, "\n"),
                  rm);
            return;
        }
        rmq_log_warn(SUB, "route of %s: %s %s; again in 1 s", r->topic, rmq_err_name(resp->code),
                     resp->remark ? resp->remark : "");
        uv_timer_start(&r->route_timer, on_route_timer, RETRY_DELAY_MS, 0);
        return;
    }
    char errstr[256];
    rmq_route_t *rt = NULL;
    if (rmq__route_parse(resp->body, resp->body_len, &rt, errstr, sizeof(errstr))) {
        fatal(r, RMQ_ERR_BAD_JSON, "bad route of %s: %s", r->topic, errstr);
        return;
    }
    rmq_mq_t *mqs = NULL;
    int n = 0;
    rmq__route_subscribe_mqs(rt, r->topic, &mqs, &n);
    r->qs = rmq__xcalloc((size_t)(n ? n : 1), sizeof(*r->qs));
    for (int i = 0; i < n; i++) {
        if (r->broker && strcmp(r->broker, mqs[i].broker_name)) continue;
        if (r->o.queue_id >= 0 && mqs[i].queue_id != r->o.queue_id) continue;
        const char *addr = rmq__route_master_addr(rt, mqs[i].broker_name);
        if (!addr) {
            rmq_log_warn(SUB, "%s: broker %s has no master: its queues are not read", r->topic,
                         mqs[i].broker_name);
            continue;
        }
        rmq_rq_t *q = rmq__xcalloc(1, sizeof(*q));
        q->r = r;
        q->index = r->n;
        snprintf(q->broker_name, sizeof(q->broker_name), "%s", mqs[i].broker_name);
        snprintf(q->addr, sizeof(q->addr), "%s", addr);
        q->queue_id = mqs[i].queue_id;
        q->start = q->next = q->max = -1;
        q->end = -1;
        uv_timer_init(r->o.loop, &q->timer);
        q->timer.data = q;
        r->qs[r->n++] = q;
    }
    rmq__mqs_free(mqs, n);
    if (r->n == 0 && n == 0) {
        /* Queues in the route but none readable: the topic's perm lacks read (a DLQ topic of
         * a 4.9 broker is created write-only). */
        for (int i = 0; i < rt->n_qds; i++) {
            if (rt->qds[i].read_queue_nums > 0 && !(rt->qds[i].perm & 4)) {
                fatal(r, RMQ_RESP_NO_PERMISSION,
                      "topic %s is not readable: its queues on %s "
                      "have perm %d (no read permission)",
                      r->topic, rt->qds[i].broker_name, (int)rt->qds[i].perm);
                rmq__route_free(rt);
                return;
            }
        }
    }
    rmq__route_free(rt);
    if (r->n == 0) {
        fatal(r, RMQ_ERR_NOT_FOUND, "topic %s has no readable queue%s%s%s%s", r->topic,
              r->broker ? " on broker " : "", r->broker ? r->broker : "",
              r->o.queue_id >= 0 ? " with the given queue id" : "",
              n ? "" : " (none in its route)");
        return;
    }
    for (int i = 0; i < r->n && !r->failed && !r->destroyed; i++)
        step(r->qs[i]);
}

static void route_request(rmq_reader_t *r)
{
    rmq_cmd_t cmd;
    rmq__cmd_init(&cmd, RMQ_REQ_GET_ROUTEINFO_BY_TOPIC, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext(&cmd, "topic", r->topic);
    int rc = send_req(r, NULL, &cmd, ADMIN_TIMEOUT_MS, -1, on_route);
    rmq__cmd_free(&cmd);
    if (rc) {
        rmq_log_warn(SUB, "cannot ask the name server for %s: %s", r->topic, rmq_err_str(rc));
        uv_timer_start(&r->route_timer, on_route_timer, RETRY_DELAY_MS, 0);
    }
}

/* ---- API --------------------------------------------------------------------------------------
 */

int rmq__reader_start(const rmq_reader_opts_t *o, rmq_reader_t **out, char *errstr,
                      size_t errstr_size)
{
    *out = NULL;
    if (!o->loop || !o->rt || !o->topic || !*o->topic || !o->group || !*o->group) {
        rmq__seterr(errstr, errstr_size, "reader: loop, transport, topic and group are needed");
        return RMQ_ERR_INVALID;
    }
    rmq_sub_t *sub = NULL;
    if (rmq__sub_build(o->topic, o->tags ? o->tags : "*", "TAG", &sub, errstr, errstr_size))
        return RMQ_ERR_CONFIG;
    rmq_reader_t *r = rmq__xcalloc(1, sizeof(*r));
    r->o = *o;
    r->topic = rmq__xstrdup(o->topic);
    r->group = rmq__xstrdup(o->group);
    r->broker = o->broker ? rmq__xstrdup(o->broker) : NULL;
    r->sub = sub;
    uv_timer_init(o->loop, &r->route_timer);
    r->route_timer.data = r;
    route_request(r);
    *out = r;
    return 0;
}

void rmq__reader_next(rmq_rq_t *q)
{
    if (q->state != RQ_HELD) return;
    set_state(q, RQ_PULL);
    step(q);
}

void rmq__reader_stop_queue(rmq_rq_t *q)
{
    if (q->state == RQ_ENDED || q->state == RQ_STOPPED) return;
    set_state(q, RQ_STOPPED);
    uv_timer_stop(&q->timer);
    check_done(q->r);
}

static void on_closed(uv_handle_t *h)
{
    rmq_reader_t *r = h->data;
    r->closing--;
    maybe_free(r);
}

void rmq__reader_destroy(rmq_reader_t *r)
{
    if (!r || r->destroyed) return;
    r->destroyed = 1;
    r->closing = 1 + r->n;
    r->route_timer.data = r;
    uv_close((uv_handle_t *)&r->route_timer, on_closed);
    for (int i = 0; i < r->n; i++) {
        r->qs[i]->timer.data = r;
        uv_close((uv_handle_t *)&r->qs[i]->timer, on_closed);
    }
    maybe_free(r);
}
