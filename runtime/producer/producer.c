/*
 * producer.c -- route lookup, publish queue selection, SEND_MESSAGE_V2, retries and the send
 * window. See producer.h for the contract.
 *
 * Ownership: the producer owns its topic table (topic_t: publish queues with their broker names
 * and master addresses), the route fetch contexts and every send request (req_t: one allocation
 * holding the encoded properties and the (compressed) body). A request is in exactly one list at
 * a time: its topic's waiting list (no route yet), the ready FIFO (route known, window full),
 * the in-flight list (a SEND is on the wire; the transport holds the request as its callback
 * argument) or the done FIFO (outcome known, callback due). Route fetches and in-flight sends
 * whose producer was destroyed are "orphaned" (p == NULL) and only freed when their response
 * callback runs.
 * Threads: the loop thread only.
 */
#include "producer.h"

#include "base/codes.h"
#include "protocol/message.h"
#include "protocol/namespace.h"
#include "protocol/route.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define SUB "producer"

/* ---- lists ----------------------------------------------------------------------------------- */

typedef struct req req_t;
typedef struct topic topic_t;

typedef struct req_list {
    req_t *head, *tail;
    size_t n;
} req_list_t;

typedef enum { REQ_WAITING = 0, REQ_READY, REQ_INFLIGHT, REQ_DONE } req_where_t;

struct req {
    req_t *prev, *next;
    int where;         /* req_where_t */
    rmq_producer_t *p; /* NULL once orphaned by rmq__producer_destroy */
    topic_t *topic;
    rmq_send_cb cb;
    void *ud;
    int32_t flag;
    int32_t sys_flag;
    int32_t reconsume_times;
    int32_t max_reconsume_times; /* -1 when absent */
    int attempts;
    int64_t start_ms;      /* monotonic, at the first attempt */
    int err;               /* outcome: 0 or the last error */
    char last_broker[128]; /* broker of the last attempt ("" before the first) */
    int32_t queue_id;      /* result */
    int64_t queue_offset;
    int status;
    char uniq[57];
    char offset_msg_id[57];
    char errmsg[320];
    char *props; /* inside this allocation */
    size_t props_len;
    char *body; /* inside this allocation */
    size_t body_len;
    char data[];
};

static void list_push(req_list_t *l, req_t *r)
{
    r->next = NULL;
    r->prev = l->tail;
    if (l->tail)
        l->tail->next = r;
    else
        l->head = r;
    l->tail = r;
    l->n++;
}

static void list_remove(req_list_t *l, req_t *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        l->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        l->tail = r->prev;
    r->prev = r->next = NULL;
    l->n--;
}

static req_t *list_pop(req_list_t *l)
{
    req_t *r = l->head;
    if (r) list_remove(l, r);
    return r;
}

/* ---- topics ---------------------------------------------------------------------------------- */

typedef struct pub_queue {
    const char *broker_name; /* into topic_t.strs */
    const char *addr;        /* master address, into topic_t.strs */
    int32_t queue_id;
} pub_queue_t;

typedef struct fetch {
    struct fetch *prev, *next;
    rmq_producer_t *p; /* NULL when orphaned */
    topic_t *topic;
    int is_default; /* fetching TBW102 for a topic the name server does not know */
    int tries;      /* attempts so far, this one included */
    char ns[80];    /* the name server asked */
} fetch_t;

struct topic {
    topic_t *next;
    char *name;
    int have_route;   /* queues are valid */
    int fetching;     /* a route request is on the wire */
    int from_default; /* the queues are TBW102's (auto-create) */
    pub_queue_t *queues;
    int n_queues;
    char *strs;          /* broker names and addresses of queues */
    uint32_t send_which; /* sendWhichQueue */
    req_list_t waiting;  /* sends waiting for the first route */
};

struct rmq_producer {
    uv_loop_t *loop;
    rmq_remoting_t *t;
    char *group;
    int64_t send_timeout_ms;
    int retry_times;
    int compress_over;
    int compress_level;
    int max_inflight;
    int64_t route_poll_ms;
    int64_t route_timeout_ms;
    int64_t max_message_size;
    int unit_mode;

    topic_t *topics;
    topic_t *last_topic; /* cache for the common case of one topic */
    fetch_t *fetches;    /* route requests on the wire */
    req_list_t ready;
    req_list_t inflight;
    req_list_t done;
    size_t outstanding;

    uv_timer_t route_timer;
    uv_idle_t flush;
    int flush_active;
    int handles_open;
    int destroyed;

    rmq_buf_t pbuf; /* properties being built */
    rmq_buf_t zbuf; /* compressed body */
    struct kvs {    /* properties being merged: slices into the caller's strings */
        const char *k, *v;
        size_t kl, vl;
    } * kv;
    int n_kv, cap_kv;
    char numbuf[4][24];
};

static void pump(rmq_producer_t *p);

/* snprintf(dst, size, "%s", src) without printf: cut to size - 1 bytes, NUL-terminated. */
static void copy_str(char *dst, size_t size, const char *src)
{
    size_t n = strnlen(src, size - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}
static void fetch_route(rmq_producer_t *p, topic_t *tp, int is_default);
static void fetch_route_try(rmq_producer_t *p, topic_t *tp, int is_default, int tries);

const char *rmq__send_status_name(int status)
{
    switch (status) {
    case RMQ_SEND_OK:
        return "SEND_OK";
    case RMQ_SEND_FLUSH_DISK_TIMEOUT:
        return "FLUSH_DISK_TIMEOUT";
    case RMQ_SEND_FLUSH_SLAVE_TIMEOUT:
        return "FLUSH_SLAVE_TIMEOUT";
    case RMQ_SEND_SLAVE_NOT_AVAILABLE:
        return "SLAVE_NOT_AVAILABLE";
    default:
        return "UNKNOWN";
    }
}

static topic_t *topic_find(rmq_producer_t *p, const char *name)
{
    if (p->last_topic && !strcmp(p->last_topic->name, name)) return p->last_topic;
    for (topic_t *tp = p->topics; tp; tp = tp->next)
        if (!strcmp(tp->name, name)) return (p->last_topic = tp);
    return NULL;
}

static topic_t *topic_get(rmq_producer_t *p, const char *name)
{
    topic_t *tp = topic_find(p, name);
    if (tp) return tp;
    tp = rmq__xcalloc(1, sizeof(*tp));
    tp->name = rmq__xstrdup(name);
    /* sendWhichQueue starts at a random index (Java: ThreadLocalIndex seeds from Random). */
    tp->send_which =
        (uint32_t)rmq__mono_ms() * 2654435761u ^ (uint32_t)getpid() ^ (uint32_t)(uintptr_t)tp;
    tp->next = p->topics;
    p->topics = tp;
    return (p->last_topic = tp);
}

static void topic_free(topic_t *tp)
{
    free(tp->queues);
    free(tp->strs);
    free(tp->name);
    free(tp);
}

/* ---- completion ------------------------------------------------------------------------------ */

static void flush_cb(uv_idle_t *h)
{
    rmq_producer_t *p = h->data;
    /* Callbacks may send more; those completions wait for the next turn. */
    size_t n = p->done.n;
    while (n-- > 0) {
        req_t *r = list_pop(&p->done);
        if (!r) break;
        p->outstanding--;
        if (r->err == 0) {
            rmq_send_result_t res;
            memset(&res, 0, sizeof(res));
            res.status = r->status;
            memcpy(res.msg_id, r->uniq, sizeof(res.msg_id));
            memcpy(res.offset_msg_id, r->offset_msg_id, sizeof(res.offset_msg_id));
            res.topic = r->topic->name;
            res.broker_name = r->last_broker;
            res.queue_id = r->queue_id;
            res.queue_offset = r->queue_offset;
            res.attempts = r->attempts;
            r->cb(r->ud, 0, &res, "");
        } else {
            r->cb(r->ud, r->err, NULL, r->errmsg);
        }
        free(r);
    }
    if (!p->done.n && p->flush_active) {
        uv_idle_stop(&p->flush);
        p->flush_active = 0;
    }
}

/* Move r to the done FIFO; its callback runs from the loop (never from inside an API call). */
static void complete(rmq_producer_t *p, req_t *r, int err)
{
    r->err = err;
    r->where = REQ_DONE;
    list_push(&p->done, r);
    if (!p->flush_active && !p->destroyed) {
        uv_idle_start(&p->flush, flush_cb);
        p->flush_active = 1;
    }
}

static void fail(rmq_producer_t *p, req_t *r, int err, const char *fmt, ...) RMQ_PRINTF(4, 5);
static void fail(rmq_producer_t *p, req_t *r, int err, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (r->attempts > 1)
        snprintf(r->errmsg, sizeof(r->errmsg), "send to topic %s failed after %d attempts: %s",
                 r->topic->name, r->attempts, why);
    else
        snprintf(r->errmsg, sizeof(r->errmsg), "send to topic %s failed: %s", r->topic->name, why);
    complete(p, r, err);
}

/* ---- routes ---------------------------------------------------------------------------------- */

static int cmp_qd_name(const void *a, const void *b)
{
    const rmq_queue_data_t *x = a, *y = b;
    return rmq__java_strcmp(x->broker_name, y->broker_name);
}

/*
 * TopicPublishInfo from a route (MQClientInstance.topicRouteData2TopicPublishInfo): with
 * orderTopicConf, "brokerName:num;..." in that order; else the writable queue datas sorted by
 * brokerName, skipping brokers without data or without a master. When is_default, the queue
 * counts are min(defaultTopicQueueNums, readQueueNums) as for TBW102 in
 * updateTopicRouteInfoFromNameServer(topic, true, producer). Replaces tp's queues; returns
 * the number of queues.
 */
static int apply_route(topic_t *tp, const rmq_route_t *rt, int is_default)
{
    size_t strsz = 0, nq = 0;
    for (int i = 0; i < rt->n_bds; i++) {
        const char *m = rmq__route_master_addr(rt, rt->bds[i].broker_name);
        strsz += strlen(rt->bds[i].broker_name) + 1 + (m ? strlen(m) + 1 : 0);
    }
    rmq_queue_data_t *qds = NULL;
    int nqd = 0;
    if (rt->order_topic_conf && *rt->order_topic_conf) {
        /* "broker-a:4;broker-b:4": every listed broker's queues, in the listed order. */
        const char *s = rt->order_topic_conf;
        qds = rmq__xcalloc(strlen(s) / 2 + 2, sizeof(*qds));
        char *copy = rmq__xstrdup(s), *save = NULL;
        for (char *item = strtok_r(copy, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
            char *colon = strchr(item, ':');
            if (!colon) continue;
            *colon = 0;
            const rmq_broker_data_t *bd = rmq__route_broker(rt, item);
            if (!bd) continue;
            /* Java's Integer.parseInt: an int, or the route is not applied; a count past any
             * broker's (RMQ_ROUTE_MAX_QUEUE_NUMS) would allocate that many queues: left out. */
            char *end;
            long num = strtol(colon + 1, &end, 10);
            if (end == colon + 1 || *end || num > RMQ_ROUTE_MAX_QUEUE_NUMS ||
                num < -RMQ_ROUTE_MAX_QUEUE_NUMS) {
                rmq_log_error(SUB, "route of %s: orderTopicConf entry %s:%s is not a queue count "
                              "up to %d: broker %s left out", tp->name, item, colon + 1,
                              RMQ_ROUTE_MAX_QUEUE_NUMS, item);
                continue;
            }
            qds[nqd].broker_name = bd->broker_name;
            qds[nqd].write_queue_nums = (int32_t)num;
            qds[nqd].read_queue_nums = qds[nqd].write_queue_nums;
            qds[nqd].perm = RMQ_PERM_READ | RMQ_PERM_WRITE;
            nqd++;
        }
        free(copy);
    } else {
        qds = rmq__xcalloc((size_t)rt->n_qds + 1, sizeof(*qds));
        if (rt->n_qds) memcpy(qds, rt->qds, sizeof(*qds) * (size_t)rt->n_qds);
        nqd = rt->n_qds;
        qsort(qds, (size_t)nqd, sizeof(*qds), cmp_qd_name);
    }
    for (int i = 0; i < nqd; i++) {
        if (is_default) {
            int n = qds[i].read_queue_nums < RMQ_PRODUCER_DEFAULT_TOPIC_QUEUE_NUMS
                        ? qds[i].read_queue_nums
                        : RMQ_PRODUCER_DEFAULT_TOPIC_QUEUE_NUMS;
            qds[i].read_queue_nums = qds[i].write_queue_nums = n;
        }
        if ((qds[i].perm & RMQ_PERM_WRITE) && qds[i].write_queue_nums > 0)
            nq += (size_t)qds[i].write_queue_nums;
    }

    pub_queue_t *qs = rmq__xcalloc(nq + 1, sizeof(*qs));
    char *strs = rmq__xmalloc(strsz + 1), *sp = strs;
    int n = 0;
    for (int i = 0; i < nqd; i++) {
        if (!(qds[i].perm & RMQ_PERM_WRITE)) continue;
        const rmq_broker_data_t *bd = rmq__route_broker(rt, qds[i].broker_name);
        if (!bd) continue;
        const char *master = rmq__route_master_addr(rt, bd->broker_name);
        if (!master) continue;
        /* One copy of the names per broker. */
        const char *bn = NULL, *ad = NULL;
        for (int k = 0; k < n; k++)
            if (!strcmp(qs[k].broker_name, bd->broker_name)) {
                bn = qs[k].broker_name;
                ad = qs[k].addr;
            }
        if (!bn) {
            size_t l = strlen(bd->broker_name) + 1;
            memcpy(sp, bd->broker_name, l);
            bn = sp;
            sp += l;
            l = strlen(master) + 1;
            memcpy(sp, master, l);
            ad = sp;
            sp += l;
        }
        for (int q = 0; q < qds[i].write_queue_nums; q++) {
            qs[n].broker_name = bn;
            qs[n].addr = ad;
            qs[n].queue_id = q;
            n++;
        }
    }
    free(qds);
    free(tp->queues);
    free(tp->strs);
    tp->queues = qs;
    tp->strs = strs;
    tp->n_queues = n;
    tp->have_route = n > 0;
    tp->from_default = is_default;
    return n;
}

static void fail_waiting(rmq_producer_t *p, topic_t *tp, int err, const char *why)
{
    req_t *r;
    while ((r = list_pop(&tp->waiting)))
        fail(p, r, err, "no route info for the topic: %s", why);
}

static void on_route(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    fetch_t *f = ud;
    rmq_producer_t *p = f->p;
    if (!p) {
        free(f);
        return;
    }
    if (f->prev)
        f->prev->next = f->next;
    else
        p->fetches = f->next;
    if (f->next) f->next->prev = f->prev;
    topic_t *tp = f->topic;
    int is_default = f->is_default;
    int tries = f->tries;
    char ns[sizeof(f->ns)];
    memcpy(ns, f->ns, sizeof(ns));
    free(f);
    tp->fetching = 0;

    char why[256];
    if (err == RMQ_ERR_TRANSPORT && !tp->have_route && tries < RMQ_PRODUCER_ROUTE_TRIES) {
        /* The transport has moved on to the next name server of the list (Java tries each
         * name server in turn when it cannot get a channel). */
        rmq_dbg(RMQ_DBG_NAMESRV, SUB, "route of %s from %s failed (%s), asking again", tp->name, ns,
                errmsg);
        fetch_route_try(p, tp, is_default, tries + 1);
        return;
    }
    if (err) {
        snprintf(why, sizeof(why), "name server %s: %s", ns,
                 errmsg && *errmsg ? errmsg : rmq_err_str(err));
    } else if (resp->code != RMQ_RESP_SUCCESS || !resp->body) {
        if (resp->code == RMQ_RESP_TOPIC_NOT_EXIST && !is_default && !tp->have_route) {
            /* Like the Java producer: use the auto-create key topic's route; the broker creates
             * the topic on the first SEND (defaultTopic TBW102 in the header). */
            rmq_dbg(RMQ_DBG_NAMESRV, SUB, "topic %s not in name server, trying %s", tp->name,
                    RMQ_PRODUCER_CREATE_TOPIC_KEY);
            fetch_route(p, tp, 1);
            return;
        }
        err = resp->code != RMQ_RESP_SUCCESS ? resp->code : RMQ_ERR_NO_ROUTE;
        snprintf(why, sizeof(why), "name server answered %s%s%s%s", rmq_err_name(resp->code),
                 resp->remark ? " (" : "", resp->remark ? resp->remark : "",
                 resp->remark ? ")" : "");
    } else {
        rmq_route_t *rt = NULL;
        char perr[200];
        int rc = rmq__route_parse(resp->body, resp->body_len, &rt, perr, sizeof(perr));
        if (rc) {
            err = rc;
            snprintf(why, sizeof(why), "bad route from name server for %s: %s",
                     is_default ? RMQ_PRODUCER_CREATE_TOPIC_KEY : tp->name, perr);
        } else {
            int n = apply_route(tp, rt, is_default);
            rmq__route_free(rt);
            if (n > 0) {
                rmq_dbg(RMQ_DBG_NAMESRV, SUB, "topic %s: %d publish queues%s", tp->name, n,
                        is_default ? " (auto-create route)" : "");
                req_t *r;
                while ((r = list_pop(&tp->waiting))) {
                    r->where = REQ_READY;
                    list_push(&p->ready, r);
                }
                pump(p);
                return;
            }
            err = RMQ_ERR_NO_ROUTE;
            snprintf(why, sizeof(why), "no writable queue on a master in the route of %s",
                     is_default ? RMQ_PRODUCER_CREATE_TOPIC_KEY : tp->name);
        }
    }
    if (tp->have_route) {
        /* A refresh failed: keep the route we have (Java leaves the table unchanged). */
        rmq_dbg(RMQ_DBG_NAMESRV, SUB, "route refresh for %s failed: %s", tp->name, why);
        return;
    }
    rmq_log_warn(SUB, "no route for topic %s: %s", tp->name, why);
    fail_waiting(p, tp, err == RMQ_RESP_TOPIC_NOT_EXIST ? err : err, why);
}

static void fetch_route(rmq_producer_t *p, topic_t *tp, int is_default)
{
    fetch_route_try(p, tp, is_default, 1);
}

static void fetch_route_try(rmq_producer_t *p, topic_t *tp, int is_default, int tries)
{
    rmq_cmd_t c;
    rmq__cmd_init(&c, RMQ_REQ_GET_ROUTEINFO_BY_TOPIC, RMQ_SERIALIZE_JSON);
    if (rmq__cmd_set_ext(&c, "topic", is_default ? RMQ_PRODUCER_CREATE_TOPIC_KEY : tp->name)) {
        rmq__cmd_free(&c);
        fail_waiting(p, tp, RMQ_ERR_NOMEM, "out of memory");
        return;
    }
    fetch_t *f = rmq__xcalloc(1, sizeof(*f));
    f->p = p;
    f->topic = tp;
    f->is_default = is_default;
    f->tries = tries;
    snprintf(f->ns, sizeof(f->ns), "%s", rmq__remoting_namesrv(p->t) ?: "?");
    int rc = rmq__remoting_request(p->t, NULL, &c, p->route_timeout_ms, on_route, f);
    rmq__cmd_free(&c);
    if (rc) {
        free(f);
        if (!tp->have_route) {
            char why[160];
            snprintf(why, sizeof(why), "cannot ask the name server: %s%s", rmq_err_str(rc),
                     rc == RMQ_ERR_NOT_FOUND ? " (no name server address set)" : "");
            fail_waiting(p, tp, rc, why);
        }
        return;
    }
    tp->fetching = 1;
    f->next = p->fetches;
    if (p->fetches) p->fetches->prev = f;
    p->fetches = f;
}

static void route_timer_cb(uv_timer_t *h)
{
    rmq_producer_t *p = h->data;
    for (topic_t *tp = p->topics; tp; tp = tp->next)
        if (!tp->fetching && tp->have_route) fetch_route(p, tp, 0);
}

/* ---- sending --------------------------------------------------------------------------------- */

/* TopicPublishInfo.selectOneMessageQueue(lastBrokerName); the index is ThreadLocalIndex's
 * (incremented, masked to a non-negative int). */
static const pub_queue_t *select_queue(topic_t *tp, const char *last_broker)
{
    if (tp->n_queues <= 0) return NULL;
    uint32_t n = (uint32_t)tp->n_queues;
    if (last_broker && *last_broker) {
        for (uint32_t i = 0; i < n; i++) {
            const pub_queue_t *q = &tp->queues[((++tp->send_which) & 0x7fffffffu) % n];
            if (strcmp(q->broker_name, last_broker)) return q;
        }
    }
    return &tp->queues[((++tp->send_which) & 0x7fffffffu) % n];
}

static void on_send(void *ud, int err, rmq_cmd_t *resp, const char *errmsg);

static int retryable_code(int code)
{
    switch (code) {
    case RMQ_RESP_TOPIC_NOT_EXIST:
    case RMQ_RESP_SERVICE_NOT_AVAILABLE:
    case RMQ_RESP_SYSTEM_ERROR:
    case RMQ_RESP_NO_PERMISSION:
    case RMQ_RESP_NO_BUYER_ID:
    case RMQ_RESP_NOT_IN_CURRENT_UNIT:
        return 1;
    default:
        return 0;
    }
}

/* Decimal text of v into buf (at least 21 bytes); returns buf. Cheaper than snprintf on the
 * per-message path. */
static const char *i64s(int64_t v, char *buf)
{
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    int k = 0;
    if (v < 0) buf[k++] = '-';
    while (n)
        buf[k++] = tmp[--n];
    buf[k] = 0;
    return buf;
}

/* Encode the SEND_MESSAGE_V2 header (SendMessageRequestHeaderV2, keys a..m). */
static int build_send(rmq_producer_t *p, req_t *r, const pub_queue_t *q, rmq_cmd_t *c)
{
    int rc = 0;
    char nb[24];
    rmq__cmd_init(c, RMQ_REQ_SEND_MESSAGE_V2, RMQ_SERIALIZE_JSON);
    rc |= rmq__cmd_set_ext(c, "a", p->group);
    rc |= rmq__cmd_set_ext(c, "b", r->topic->name);
    rc |= rmq__cmd_set_ext(c, "c", RMQ_PRODUCER_CREATE_TOPIC_KEY);
    rc |= rmq__cmd_set_ext(c, "d", i64s(RMQ_PRODUCER_DEFAULT_TOPIC_QUEUE_NUMS, nb));
    rc |= rmq__cmd_set_ext(c, "e", i64s(q->queue_id, nb));
    rc |= rmq__cmd_set_ext(c, "f", i64s(r->sys_flag, nb));
    rc |= rmq__cmd_set_ext(c, "g", i64s(rmq__now_ms(), nb));
    rc |= rmq__cmd_set_ext(c, "h", i64s(r->flag, nb));
    /* The properties may contain any bytes but NUL; they are NUL-terminated in r->data. */
    rc |= rmq__cmd_set_ext(c, "i", r->props);
    rc |= rmq__cmd_set_ext(c, "j", i64s(r->reconsume_times, nb));
    rc |= rmq__cmd_set_ext_bool(c, "k", p->unit_mode); /* unitMode */
    if (r->max_reconsume_times >= 0)
        rc |= rmq__cmd_set_ext(c, "l", i64s(r->max_reconsume_times, nb));
    rc |= rmq__cmd_set_ext_bool(c, "m", 0); /* batch */
    c->body = r->body;
    c->body_len = r->body_len;
    return rc ? RMQ_ERR_NOMEM : 0;
}

/*
 * One attempt of r (its first or a retry). Returns with r in flight, or completed (failed) when
 * no attempt is possible. Java's sendDefaultImpl: 1 + retryTimesWhenSendFailed attempts within
 * sendMsgTimeout counted from the first attempt.
 */
static void attempt(rmq_producer_t *p, req_t *r)
{
    for (;;) {
        int64_t now = rmq__mono_ms();
        if (r->attempts == 0) r->start_ms = now;
        int64_t left = p->send_timeout_ms - (now - r->start_ms);
        if (r->attempts > 0 && left <= 0) {
            fail(p, r, r->err ? r->err : RMQ_ERR_TIMEOUT, "%s (send timeout %lld ms spent)",
                 r->errmsg[0] ? r->errmsg : "timed out", (long long)p->send_timeout_ms);
            return;
        }
        const pub_queue_t *q = select_queue(r->topic, r->last_broker);
        if (!q) {
            fail(p, r, RMQ_ERR_NO_ROUTE, "no writable queue");
            return;
        }
        r->attempts++;
        copy_str(r->last_broker, sizeof(r->last_broker), q->broker_name);
        r->queue_id = q->queue_id;
        rmq_cmd_t c;
        int rc = build_send(p, r, q, &c);
        if (rc == 0) rc = rmq__remoting_request(p->t, q->addr, &c, left, on_send, r);
        rmq__cmd_free(&c);
        if (rc == 0) {
            r->where = REQ_INFLIGHT;
            list_push(&p->inflight, r);
            return;
        }
        r->err = rc;
        snprintf(r->errmsg, sizeof(r->errmsg), "broker %s (%s): %s", q->broker_name, q->addr,
                 rmq_err_str(rc));
        if (rc == RMQ_ERR_SHUTDOWN || r->attempts > p->retry_times) {
            fail(p, r, rc, "%s", r->errmsg);
            return;
        }
    }
}

static void on_send(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    req_t *r = ud;
    rmq_producer_t *p = r->p;
    if (!p) {
        free(r);
        return;
    }
    list_remove(&p->inflight, r);
    int code = err ? err : resp->code;
    switch (err ? -1 : resp->code) {
    case RMQ_RESP_SUCCESS:
        r->status = RMQ_SEND_OK;
        goto stored;
    case RMQ_RESP_FLUSH_DISK_TIMEOUT:
        r->status = RMQ_SEND_FLUSH_DISK_TIMEOUT;
        goto stored;
    case RMQ_RESP_FLUSH_SLAVE_TIMEOUT:
        r->status = RMQ_SEND_FLUSH_SLAVE_TIMEOUT;
        goto stored;
    case RMQ_RESP_SLAVE_NOT_AVAILABLE:
        r->status = RMQ_SEND_SLAVE_NOT_AVAILABLE;
        goto stored;
    default:
        break;
    }
    const pub_queue_t *q = NULL;
    const char *addr = "?";
    for (int i = 0; i < r->topic->n_queues; i++) {
        if (!strcmp(r->topic->queues[i].broker_name, r->last_broker)) {
            q = &r->topic->queues[i];
            break;
        }
    }
    if (q) addr = q->addr;
    r->err = code;
    if (err)
        snprintf(r->errmsg, sizeof(r->errmsg), "broker %s (%s) queue %d: %s", r->last_broker, addr,
                 r->queue_id, errmsg && *errmsg ? errmsg : rmq_err_str(err));
    else
        snprintf(r->errmsg, sizeof(r->errmsg), "broker %s (%s) queue %d answered %s%s%s%s",
                 r->last_broker, addr, r->queue_id, rmq_err_name(resp->code),
                 resp->remark ? ": " : "", resp->remark ? resp->remark : "", "");
    /* Java retries after RemotingException (transport, timeout), MQClientException and the
     * listed broker codes; any other broker code fails at once. */
    if ((err || retryable_code(resp->code)) && r->attempts <= p->retry_times) {
        rmq_dbg(RMQ_DBG_REMOTING, SUB, "retrying: %s", r->errmsg);
        attempt(p, r);
    } else {
        fail(p, r, code, "%s", r->errmsg);
    }
    pump(p);
    return;

stored:;
    const char *mid = rmq__cmd_ext(resp, "msgId");
    int32_t qid = r->queue_id;
    int64_t qoff = -1;
    rmq__cmd_ext_i32(resp, "queueId", &qid);
    rmq__cmd_ext_i64(resp, "queueOffset", &qoff);
    r->queue_id = qid;
    r->queue_offset = qoff;
    copy_str(r->offset_msg_id, sizeof(r->offset_msg_id), mid ? mid : "");
    complete(p, r, 0);
    pump(p);
}

/* Start ready sends while the window has room. */
static void pump(rmq_producer_t *p)
{
    while (p->ready.head && p->inflight.n < (size_t)p->max_inflight) {
        req_t *r = list_pop(&p->ready);
        attempt(p, r);
    }
}

/* ---- building a message ---------------------------------------------------------------------- */

static void kv_set(rmq_producer_t *p, const char *k, size_t kl, const char *v, size_t vl)
{
    for (int i = 0; i < p->n_kv; i++) {
        if (p->kv[i].kl == kl && !memcmp(p->kv[i].k, k, kl)) {
            if (v) {
                p->kv[i].v = v;
                p->kv[i].vl = vl;
            } else {
                memmove(&p->kv[i], &p->kv[i + 1], sizeof(p->kv[0]) * (size_t)(p->n_kv - i - 1));
                p->n_kv--;
            }
            return;
        }
    }
    if (!v) return;
    if (p->n_kv == p->cap_kv) {
        p->cap_kv = p->cap_kv ? p->cap_kv * 2 : 16;
        p->kv = realloc(p->kv, sizeof(p->kv[0]) * (size_t)p->cap_kv);
        if (!p->kv) abort();
    }
    p->kv[p->n_kv].k = k;
    p->kv[p->n_kv].kl = kl;
    p->kv[p->n_kv].v = v;
    p->kv[p->n_kv].vl = vl;
    p->n_kv++;
}

static void kv_sets(rmq_producer_t *p, const char *k, const char *v)
{
    kv_set(p, k, strlen(k), v, v ? strlen(v) : 0);
}

static const struct kvs *kv_get(rmq_producer_t *p, const char *k)
{
    size_t kl = strlen(k);
    for (int i = 0; i < p->n_kv; i++)
        if (p->kv[i].kl == kl && !memcmp(p->kv[i].k, k, kl)) return &p->kv[i];
    return NULL;
}

static int kv_from_raw(void *ud, const char *k, size_t kl, const char *v, size_t vl)
{
    kv_set(ud, k, kl, v, vl);
    return 0;
}

static int parse_int_slice(const char *s, size_t n, int32_t *out)
{
    char tmp[16];
    if (n == 0 || n >= sizeof(tmp)) return -1;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    char *end;
    long v = strtol(tmp, &end, 10);
    if (*end || v < INT32_MIN || v > INT32_MAX) return -1;
    *out = (int32_t)v;
    return 0;
}

/* Validators.checkTopic and isNotAllowedSendTopic. */
static int check_topic(const char *topic, char *errstr, size_t errstr_size)
{
    if (!topic || !*topic) {
        rmq__seterr(errstr, errstr_size, "the specified topic is blank");
        return RMQ_ERR_INVALID;
    }
    if (!rmq__name_ok(topic, SIZE_MAX)) {
        rmq__seterr(errstr, errstr_size,
                    "the specified topic [%s] contains illegal characters, allowing only "
                    "^[%%|a-zA-Z0-9_-]+$",
                    topic);
        return RMQ_ERR_INVALID;
    }
    if (strlen(topic) > RMQ_PRODUCER_TOPIC_MAX_LEN) {
        rmq__seterr(errstr, errstr_size, "the specified topic is longer than %d characters",
                    RMQ_PRODUCER_TOPIC_MAX_LEN);
        return RMQ_ERR_INVALID;
    }
    if (rmq__ns_send_forbidden(topic)) {
        rmq__seterr(errstr, errstr_size, "sending message to topic [%s] is forbidden", topic);
        return RMQ_ERR_INVALID;
    }
    return 0;
}

int rmq__producer_send(rmq_producer_t *p, const rmq_send_msg_t *m, rmq_send_cb cb, void *ud,
                       char *errstr, size_t errstr_size)
{
    if (p->destroyed) {
        rmq__seterr(errstr, errstr_size, "producer destroyed");
        return RMQ_ERR_SHUTDOWN;
    }
    int rc = check_topic(m->topic, errstr, errstr_size);
    if (rc) return rc;
    if (!m->body) {
        rmq__seterr(errstr, errstr_size, "the message body is null");
        return RMQ_ERR_INVALID;
    }
    if (m->body_len == 0) {
        rmq__seterr(errstr, errstr_size, "the message body length is zero");
        return RMQ_ERR_INVALID;
    }
    if ((int64_t)m->body_len > p->max_message_size) {
        rmq__seterr(errstr, errstr_size, "the message body size %zu is over the maximum %lld",
                    m->body_len, (long long)p->max_message_size);
        return RMQ_ERR_INVALID;
    }

    /* Properties: raw ones first, then tags/keys/delay, then the user's. */
    p->n_kv = 0;
    if (m->props_raw && m->props_raw_len)
        rmq__props_foreach(m->props_raw, m->props_raw_len, kv_from_raw, p);
    if (m->tags) kv_sets(p, "TAGS", m->tags);
    if (m->keys) kv_sets(p, "KEYS", m->keys);
    if (m->delay_level > 0) {
        snprintf(p->numbuf[0], sizeof(p->numbuf[0]), "%d", m->delay_level);
        kv_sets(p, "DELAY", p->numbuf[0]);
    }
    for (int i = 0; i < m->n_props; i++) {
        if (!m->props[i].key || !*m->props[i].key) {
            rmq__seterr(errstr, errstr_size, "property %d has an empty name", i + 1);
            return RMQ_ERR_INVALID;
        }
        kv_sets(p, m->props[i].key, m->props[i].val);
    }
    for (int i = 0; i < p->n_kv; i++) {
        if (memchr(p->kv[i].k, 1, p->kv[i].kl) || memchr(p->kv[i].k, 2, p->kv[i].kl) ||
            memchr(p->kv[i].v, 1, p->kv[i].vl) || memchr(p->kv[i].v, 2, p->kv[i].vl) ||
            memchr(p->kv[i].v, 0, p->kv[i].vl)) {
            rmq__seterr(errstr, errstr_size,
                        "property %.*s contains a separator byte (0x01 or 0x02) or NUL",
                        (int)p->kv[i].kl, p->kv[i].k);
            return RMQ_ERR_INVALID;
        }
    }
    char uniq[57];
    const struct kvs *u = kv_get(p, "UNIQ_KEY");
    if (u && u->vl > 0 && u->vl < sizeof(uniq)) {
        memcpy(uniq, u->v, u->vl);
        uniq[u->vl] = 0;
    } else {
        rmq__uniq_id_new(uniq);
        kv_sets(p, "UNIQ_KEY", uniq);
    }
    if (!kv_get(p, "WAIT")) kv_sets(p, "WAIT", "true");
    int32_t reconsume = 0, max_reconsume = -1;
    if (!strncmp(m->topic, "%RETRY%", 7)) {
        const struct kvs *e = kv_get(p, "RECONSUME_TIME");
        if (e) {
            parse_int_slice(e->v, e->vl, &reconsume);
            kv_sets(p, "RECONSUME_TIME", NULL);
        }
        e = kv_get(p, "MAX_RECONSUME_TIMES");
        if (e) {
            parse_int_slice(e->v, e->vl, &max_reconsume);
            kv_sets(p, "MAX_RECONSUME_TIMES", NULL);
        }
    }
    int32_t sys_flag = 0;
    const struct kvs *tx = kv_get(p, "TRAN_MSG");
    if (tx && tx->vl == 4 && !strncasecmp(tx->v, "true", 4)) sys_flag |= 0x4;

    p->pbuf.len = 0;
    for (int i = 0; i < p->n_kv; i++)
        if (rmq__props_append_n(&p->pbuf, p->kv[i].k, p->kv[i].kl, p->kv[i].v, p->kv[i].vl))
            return RMQ_ERR_NOMEM;
    if (p->pbuf.len > 32767) {
        rmq__seterr(errstr, errstr_size, "the properties are %zu bytes, over the limit 32767",
                    p->pbuf.len);
        return RMQ_ERR_INVALID;
    }

    const char *body = m->body;
    size_t body_len = m->body_len;
    if (p->compress_over > 0 && body_len >= (size_t)p->compress_over) {
        p->zbuf.len = 0;
        if (rmq__zlib_deflate(body, body_len, p->compress_level, &p->zbuf) == 0) {
            body = p->zbuf.data;
            body_len = p->zbuf.len;
            sys_flag |= RMQ_SYSFLAG_COMPRESSED | RMQ_SYSFLAG_ZLIB_TYPE;
        }
    }

    req_t *r = malloc(sizeof(*r) + p->pbuf.len + 1 + body_len);
    if (!r) return RMQ_ERR_NOMEM;
    memset(r, 0, sizeof(*r));
    r->p = p;
    r->cb = cb;
    r->ud = ud;
    r->flag = m->flag;
    r->sys_flag = sys_flag;
    r->reconsume_times = reconsume;
    r->max_reconsume_times = max_reconsume;
    memcpy(r->uniq, uniq, sizeof(uniq));
    r->props = r->data;
    r->props_len = p->pbuf.len;
    if (p->pbuf.len) memcpy(r->props, p->pbuf.data, p->pbuf.len);
    r->props[p->pbuf.len] = 0;
    r->body = r->data + p->pbuf.len + 1;
    r->body_len = body_len;
    memcpy(r->body, body, body_len);

    topic_t *tp = topic_get(p, m->topic);
    r->topic = tp;
    p->outstanding++;
    if (tp->have_route) {
        r->where = REQ_READY;
        list_push(&p->ready, r);
        pump(p);
    } else {
        r->where = REQ_WAITING;
        list_push(&tp->waiting, r);
        if (!tp->fetching) fetch_route(p, tp, 0);
    }
    return 0;
}

int rmq__producer_send_retry(rmq_producer_t *p, const char *group, const char *topic,
                             const char *body, size_t body_len, int32_t flag, const char *props_raw,
                             size_t props_raw_len, const char *msg_id, int reconsume_times,
                             int max_reconsume_times, rmq_send_cb cb, void *ud, char *errstr,
                             size_t errstr_size)
{
    char retry_topic[RMQ_PRODUCER_TOPIC_MAX_LEN + 16];
    if (snprintf(retry_topic, sizeof(retry_topic), "%%RETRY%%%s", group) >=
        (int)sizeof(retry_topic)) {
        rmq__seterr(errstr, errstr_size, "retry topic for group %s is too long", group);
        return RMQ_ERR_INVALID;
    }
    /* ORIGIN_MESSAGE_ID: the existing one if not blank, else the message's id. */
    const char *origin = msg_id;
    char obuf[128];
    uint32_t ol = 0;
    const char *ov =
        props_raw ? rmq__props_find(props_raw, props_raw_len, "ORIGIN_MESSAGE_ID", 17, &ol) : NULL;
    if (ov && ol > 0 && ol < sizeof(obuf)) {
        int blank = 1;
        for (uint32_t i = 0; i < ol; i++)
            if (ov[i] != ' ' && ov[i] != '\t' && ov[i] != '\n' && ov[i] != '\r') blank = 0;
        if (!blank) {
            memcpy(obuf, ov, ol);
            obuf[ol] = 0;
            origin = obuf;
        }
    }
    char rt[16], mrt[16], delay[16];
    snprintf(rt, sizeof(rt), "%d", (int)rmq__reconsume_plus(reconsume_times, 1));
    snprintf(mrt, sizeof(mrt), "%d", max_reconsume_times);
    snprintf(delay, sizeof(delay), "%d", (int)rmq__reconsume_plus(reconsume_times, 3));
    rmq_prop_t props[] = {
        {"ORIGIN_MESSAGE_ID", origin}, {"RETRY_TOPIC", topic}, {"RECONSUME_TIME", rt},
        {"MAX_RECONSUME_TIMES", mrt},  {"TRAN_MSG", NULL},     {"DELAY", delay},
    };
    rmq_send_msg_t m = {
        .topic = retry_topic,
        .body = body,
        .body_len = body_len,
        .flag = flag,
        .props_raw = props_raw,
        .props_raw_len = props_raw_len,
        .props = props,
        .n_props = (int)RMQ_ARRAY_SIZE(props),
    };
    return rmq__producer_send(p, &m, cb, ud, errstr, errstr_size);
}

size_t rmq__producer_outstanding(const rmq_producer_t *p)
{
    return p->outstanding;
}

/* ---- life cycle ------------------------------------------------------------------------------ */

int rmq__producer_new(uv_loop_t *loop, rmq_remoting_t *t, const rmq_producer_opts_t *o,
                      rmq_producer_t **out, char *errstr, size_t errstr_size)
{
    rmq_producer_opts_t d;
    memset(&d, 0, sizeof(d));
    d.retry_times = -1;
    if (!o) o = &d;
    if (o->compress_level < 0 || o->compress_level > 9) {
        rmq__seterr(errstr, errstr_size, "compress_level must be 1..9, got %d", o->compress_level);
        return RMQ_ERR_CONFIG;
    }
    if (o->max_inflight < 0 || o->send_timeout_ms < 0 || o->route_poll_ms < 0 ||
        o->route_timeout_ms < 0 || o->max_message_size < 0) {
        rmq__seterr(errstr, errstr_size, "producer options must not be negative");
        return RMQ_ERR_CONFIG;
    }
    if (o->group && !*o->group) {
        rmq__seterr(errstr, errstr_size, "producer group is blank");
        return RMQ_ERR_CONFIG;
    }
    rmq_producer_t *p = rmq__xcalloc(1, sizeof(*p));
    p->loop = loop;
    p->t = t;
    p->group = rmq__xstrdup(o->group ? o->group : RMQ_PRODUCER_GROUP_DEFAULT);
    p->send_timeout_ms = o->send_timeout_ms ? o->send_timeout_ms : RMQ_PRODUCER_SEND_TIMEOUT_MS;
    p->retry_times = o->retry_times >= 0 ? o->retry_times : RMQ_PRODUCER_RETRY_TIMES;
    p->compress_over = o->compress_over ? o->compress_over : RMQ_PRODUCER_COMPRESS_OVER;
    p->compress_level = o->compress_level ? o->compress_level : RMQ_PRODUCER_COMPRESS_LEVEL;
    p->max_inflight = o->max_inflight ? o->max_inflight : RMQ_PRODUCER_MAX_INFLIGHT;
    p->route_poll_ms = o->route_poll_ms ? o->route_poll_ms : RMQ_PRODUCER_ROUTE_POLL_MS;
    p->route_timeout_ms = o->route_timeout_ms ? o->route_timeout_ms : RMQ_PRODUCER_ROUTE_TIMEOUT_MS;
    p->max_message_size = o->max_message_size ? o->max_message_size : RMQ_PRODUCER_MAX_MESSAGE_SIZE;
    p->unit_mode = o->unit_mode != 0;
    rmq__buf_init(&p->pbuf);
    rmq__buf_init(&p->zbuf);
    uv_timer_init(loop, &p->route_timer);
    p->route_timer.data = p;
    uv_idle_init(loop, &p->flush);
    p->flush.data = p;
    p->handles_open = 2;
    uv_timer_start(&p->route_timer, route_timer_cb, (uint64_t)p->route_poll_ms,
                   (uint64_t)p->route_poll_ms);
    /* The timer alone must not keep a loop alive (rmqlua send ends when its sends are done). */
    uv_unref((uv_handle_t *)&p->route_timer);
    *out = p;
    return 0;
}

int rmq__producer_broker_addrs(const rmq_producer_t *p, const char **addrs, int max)
{
    int n = 0;
    for (const topic_t *tp = p->topics; tp; tp = tp->next) {
        if (!tp->have_route) continue;
        for (int i = 0; i < tp->n_queues; i++) {
            const char *a = tp->queues[i].addr;
            int seen = 0;
            for (int k = 0; k < n && !seen; k++)
                seen = !strcmp(addrs[k], a);
            if (!seen && n < max) addrs[n++] = a;
        }
    }
    return n;
}

void rmq__producer_reconf(rmq_producer_t *p, int64_t route_poll_ms, int64_t route_timeout_ms,
                          int unit_mode)
{
    int64_t poll = route_poll_ms > 0 ? route_poll_ms : RMQ_PRODUCER_ROUTE_POLL_MS;
    p->route_timeout_ms = route_timeout_ms > 0 ? route_timeout_ms : RMQ_PRODUCER_ROUTE_TIMEOUT_MS;
    p->unit_mode = unit_mode != 0;
    if (poll != p->route_poll_ms && !p->destroyed) {
        p->route_poll_ms = poll;
        uv_timer_start(&p->route_timer, route_timer_cb, (uint64_t)poll, (uint64_t)poll);
    }
}

static void handle_closed(uv_handle_t *h)
{
    rmq_producer_t *p = h->data;
    if (--p->handles_open > 0) return;
    while (p->topics) {
        topic_t *tp = p->topics;
        p->topics = tp->next;
        topic_free(tp);
    }
    rmq__buf_free(&p->pbuf);
    rmq__buf_free(&p->zbuf);
    free(p->kv);
    free(p->group);
    free(p);
}

void rmq__producer_destroy(rmq_producer_t *p)
{
    if (p->destroyed) return;
    p->destroyed = 1;
    /* Completed sends get their real outcome first. */
    flush_cb(&p->flush);
    req_t *r;
    while ((r = list_pop(&p->inflight))) {
        /* The transport still holds r: orphan it, on_send frees it. */
        p->outstanding--;
        r->p = NULL;
        r->cb(r->ud, RMQ_ERR_DESTROYED, NULL, "producer destroyed before the send completed");
    }
    while ((r = list_pop(&p->ready))) {
        p->outstanding--;
        r->cb(r->ud, RMQ_ERR_DESTROYED, NULL, "producer destroyed before the send started");
        free(r);
    }
    for (topic_t *tp = p->topics; tp; tp = tp->next) {
        while ((r = list_pop(&tp->waiting))) {
            p->outstanding--;
            r->cb(r->ud, RMQ_ERR_DESTROYED, NULL,
                  "producer destroyed while waiting for the topic route");
            free(r);
        }
    }
    while ((r = list_pop(&p->done))) { /* sends completed by the callbacks above */
        p->outstanding--;
        r->cb(r->ud, RMQ_ERR_DESTROYED, NULL, "producer destroyed");
        free(r);
    }
    for (fetch_t *f = p->fetches; f; f = f->next)
        f->p = NULL;
    p->fetches = NULL;
    uv_timer_stop(&p->route_timer);
    uv_idle_stop(&p->flush);
    uv_close((uv_handle_t *)&p->route_timer, handle_closed);
    uv_close((uv_handle_t *)&p->flush, handle_closed);
}
