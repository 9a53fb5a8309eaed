/*
 * devbroker_pop.c -- RocketMQ 5.x POP consumption of the development broker (RIP-19):
 * POP_MESSAGE (200050, PopMessageProcessor) with long polling (PopLongPollingService),
 * ACK_MESSAGE (200051) and BATCH_ACK_MESSAGE (200151, AckMessageProcessor),
 * CHANGE_MESSAGE_INVISIBLETIME (200053, ChangeInvisibleTimeProcessor) and the revive of un-acked
 * messages (PopReviveService).
 *
 * A pop reads the group's offset of each queue (set by initMode when the group has none),
 * moves it past what it read and keeps a checkpoint per message handed out: group, topic,
 * queue, offset, popTime and invisibleTime. An ACK_MESSAGE whose extraInfo names the same
 * popTime removes it; a CHANGE_MESSAGE_INVISIBLETIME replaces it with one popped now. A
 * checkpoint still held when its invisible time has passed revives its message: a copy goes to
 * the group's retry topic %RETRY%<group>_<topic> (KeyBuilder.buildPopRetryTopicV1) with its
 * reconsume count raised by one and 1ST_POP_TIME set, and the next pops of the topic deliver it
 * from there (as a broker with popResponseReturnActualRetryTopic does: the message keeps the
 * retry topic, and the answer's offset infos mark it retry "1").
 *
 * An order=true pop (PopMessageProcessor with ConsumerOrderInfoManager) keeps no checkpoint
 * and does not move the group's offset: it records the batch it handed out per queue
 * (OrderInfo) and the queue gives nothing more to the group until every message of that batch
 * was acked or the invisible time of one not acked has passed; then the next pop hands out
 * the same messages again from the group's offset, their consume count raised (orderCountInfo).
 * An ACK_MESSAGE whose extraInfo names the order revive queue (999) marks its message and
 * commits the group's offset to the first one not acked (commitAndNext); a
 * CHANGE_MESSAGE_INVISIBLETIME sets when that message may come back (updateNextVisibleTime).
 *
 * Ownership: b->pop owns the checkpoints, the order batches and the parked pops; a parked pop
 * keeps its connection and its request frame until answered or dropped. A POP answer being
 * written holds one reference per message.
 * Threads: the broker thread only.
 */
#include "devbroker_int.h"
#include "protocol/fjson.h"
#include "protocol/sql92.h"
#include "protocol/subscription.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RETRY_PREFIX "%RETRY%"
#define MAX_POP_NUMS 32                 /* PopMessageProcessor: maxMsgNums over 32 is refused */
#define MAX_TRANSFER_BYTES (256 * 1024) /* maxTransferBytesOnMessageInMemory */
#define INIT_MODE_MIN 0                 /* ConsumeInitMode */
#define INIT_MODE_MAX 1
#define ORDER_REVIVE_QID 999 /* KeyBuilder.POP_ORDER_REVIVE_QUEUE */

/* A message handed out and not acked yet (PopCheckPoint, one per message). */
typedef struct pop_ck {
    struct pop_ck *next;
    char *group, *topic; /* topic: where the message is (a retry topic for a revived one) */
    int qid;
    int64_t qoff, pop_time, invisible;
    int64_t due_mono; /* revive when the monotonic clock passes it */
} pop_ck_t;

/* The batch an order=true pop handed out of one queue (ConsumerOrderInfoManager.OrderInfo). */
typedef struct pop_order {
    struct pop_order *next;
    char *group, *topic;
    int qid, n;
    int64_t pop_time, invisible;
    int64_t offs[MAX_POP_NUMS];
    int64_t next_visible[MAX_POP_NUMS]; /* wall ms; 0: pop_time + invisible */
    int counts[MAX_POP_NUMS];           /* offsetConsumedCount: deliveries before this one */
    uint64_t acked;                     /* commitOffsetBit */
    int woken;                          /* parked pops were woken once it stopped blocking */
} pop_order_t;

/* A POP_MESSAGE parked until a message arrives in its topic or its poll time ends. */
typedef struct pop_wait {
    struct pop_wait *next, *prev;
    db_broker_t *b;
    rmq_conn_t *conn;  /* kept */
    rmq_rbuf_t *frame; /* kept: the request is decoded again when woken */
    char *topic, *retry;
    int64_t deadline_mono;
    unsigned gen; /* the arrival it was parked in (db_pop.gen) */
    uv_timer_t timer;
} pop_wait_t;

typedef struct db_pop {
    pop_ck_t *cks;
    pop_order_t *orders;
    pop_wait_t *waits;
    unsigned gen; /* arrivals served */
    uint32_t rr;  /* the queue the next pop of all queues starts at */
} db_pop_t;

static db_pop_t *pop_of(db_broker_t *b)
{
    if (!b->pop) b->pop = rmq__xcalloc(1, sizeof(db_pop_t));
    return b->pop;
}

/* ExtraInfoUtil.getRetry: "1" for a %RETRY% topic, "0" otherwise. */
static const char *retry_flag(const char *topic)
{
    return strncmp(topic, RETRY_PREFIX, strlen(RETRY_PREFIX)) == 0 ? "1" : "0";
}

static void retry_topic(char *out, size_t size, const char *group, const char *topic)
{
    if (!strncmp(topic, RETRY_PREFIX, strlen(RETRY_PREFIX)))
        snprintf(out, size, "%s", topic);
    else
        snprintf(out, size, "%s%s_%s", RETRY_PREFIX, group, topic);
}

static void ck_add(db_broker_t *b, const char *group, const char *topic, int qid, int64_t qoff,
                   int64_t pop_time, int64_t invisible)
{
    db_pop_t *p = pop_of(b);
    pop_ck_t *ck = rmq__xcalloc(1, sizeof(*ck));
    ck->group = rmq__xstrdup(group);
    ck->topic = rmq__xstrdup(topic);
    ck->qid = qid;
    ck->qoff = qoff;
    ck->pop_time = pop_time;
    ck->invisible = invisible;
    ck->due_mono = rmq__mono_ms() + invisible;
    ck->next = p->cks;
    p->cks = ck;
}

static void ck_free(pop_ck_t *ck)
{
    free(ck->group);
    free(ck->topic);
    free(ck);
}

/* Remove the checkpoint of (group, topic, qid, qoff) popped at pop_time; 1 when one was held. */
static int ck_remove(db_broker_t *b, const char *group, const char *topic, int qid, int64_t qoff,
                     int64_t pop_time)
{
    if (!b->pop) return 0;
    for (pop_ck_t **pp = &b->pop->cks; *pp; pp = &(*pp)->next) {
        pop_ck_t *ck = *pp;
        if (ck->qid == qid && ck->qoff == qoff && ck->pop_time == pop_time &&
            !strcmp(ck->topic, topic) && !strcmp(ck->group, group)) {
            *pp = ck->next;
            ck_free(ck);
            return 1;
        }
    }
    return 0;
}

/* ---- order=true: one batch per queue outstanding ------------------------------------------ */

static pop_order_t *order_find(db_broker_t *b, const char *group, const char *topic, int qid)
{
    for (pop_order_t *o = b->pop ? b->pop->orders : NULL; o; o = o->next)
        if (o->qid == qid && !strcmp(o->topic, topic) && !strcmp(o->group, group)) return o;
    return NULL;
}

/* OrderInfo.needBlock: a message of the batch not acked and not visible again yet. */
static int order_blocks(const pop_order_t *o, int64_t now)
{
    for (int i = 0; i < o->n; i++) {
        if (o->acked & (UINT64_C(1) << i)) continue;
        int64_t nv = o->next_visible[i] ? o->next_visible[i] : o->pop_time + o->invisible;
        if (now < nv) return 1;
    }
    return 0;
}

/* ConsumerOrderInfoManager.update: the batch just handed out replaces the queue's last one; an
 * offset handed out again counts one more delivery. Its orderCountInfo entries go to info
 * ("<retry> qo<queueId>%<offset> <count>" per offset delivered before, then
 * "<retry> <queueId> <least count>"). */
static void order_update(db_broker_t *b, const char *group, const char *topic, int qid,
                         int64_t pop_time, int64_t invisible, const int64_t *offs, int n,
                         rmq_buf_t *info)
{
    db_pop_t *p = pop_of(b);
    pop_order_t *o = order_find(b, group, topic, qid);
    pop_order_t old;
    if (o) {
        old = *o;
    } else {
        memset(&old, 0, sizeof(old));
        o = rmq__xcalloc(1, sizeof(*o));
        o->group = rmq__xstrdup(group);
        o->topic = rmq__xstrdup(topic);
        o->qid = qid;
        o->next = p->orders;
        p->orders = o;
    }
    o->n = n;
    o->pop_time = pop_time;
    o->invisible = invisible;
    o->acked = 0;
    o->woken = 0;
    int least = INT32_MAX;
    for (int i = 0; i < n; i++) {
        o->offs[i] = offs[i];
        o->next_visible[i] = 0;
        o->counts[i] = 0;
        for (int j = 0; j < old.n; j++)
            if (old.offs[j] == offs[i]) o->counts[i] = old.counts[j] + 1;
        if (o->counts[i] > 0) {
            if (info->len) rmq__buf_append(info, ";", 1);
            rmq__buf_appendf(info, "%s qo%d%%%lld %d", retry_flag(topic), qid, (long long)offs[i],
                             o->counts[i]);
        }
        if (o->counts[i] < least) least = o->counts[i];
    }
    if (n == 0) least = 0;
    if (info->len) rmq__buf_append(info, ";", 1);
    rmq__buf_appendf(info, "%s %d %d", retry_flag(topic), qid, least);
}

/* ConsumerOrderInfoManager.commitAndNext: the group's next offset once offset popped at
 * pop_time is acked; -1 for an offset the batch does not hold, -2 for another batch's ack. */
static int64_t order_commit(db_broker_t *b, const char *group, const char *topic, int qid,
                            int64_t offset, int64_t pop_time)
{
    pop_order_t *o = order_find(b, group, topic, qid);
    if (!o) return offset + 1;
    if (o->n == 0) return -1;
    if (o->pop_time != pop_time) return -2;
    int i = 0;
    while (i < o->n && o->offs[i] != offset)
        i++;
    if (i == o->n) return -1;
    o->acked |= UINT64_C(1) << i;
    for (i = 0; i < o->n; i++)
        if (!(o->acked & (UINT64_C(1) << i))) return o->offs[i];
    return o->offs[o->n - 1] + 1;
}

static void order_free(pop_order_t *o)
{
    free(o->group);
    free(o->topic);
    free(o);
}

static void wake_topic(db_broker_t *b, const char *name);

/* ---- revive ---------------------------------------------------------------------------------- */

/* PopReviveService.reviveRetry: a copy of the message in the group's retry topic. */
static void revive_one(db_broker_t *b, const pop_ck_t *ck)
{
    db_topic_t *t = rmq__db_topic_get(b, ck->topic);
    db_queue_t *q = t ? rmq__db_queue(t, ck->qid) : NULL;
    db_msg_t *m = q ? rmq__db_qget(q, ck->qoff) : NULL;
    db_stored_t v;
    if (!m || rmq__db_stored_parse(m, &v)) return; /* gone: nothing to revive */
    char rt[512];
    retry_topic(rt, sizeof(rt), ck->group, ck->topic);
    db_topic_t *rtt = rmq__db_topic_get(b, rt);
    if (!rtt) rtt = rmq__db_topic_create(b, rt, 1, 1, 6);
    rmq_buf_t props;
    rmq__buf_init(&props);
    rmq__buf_append(&props, v.props, v.props_len);
    if (!memmem(v.props, v.props_len, "1ST_POP_TIME\001", 13)) {
        if (v.props_len && v.props[v.props_len - 1] != '\002') rmq__buf_append(&props, "\002", 1);
        rmq__buf_appendf(&props, "1ST_POP_TIME\001%lld\002", (long long)ck->pop_time);
    }
    db_msg_in_t in = rmq__db_stored_in(&v);
    in.topic = rt;
    in.queue_id = 0;
    in.reconsume = v.reconsume + 1;
    in.props = props.data;
    in.props_len = props.len;
    char err[256];
    if (!rmq__db_store(b, rtt, &in, err, sizeof(err)))
        rmq_log_warn(DB_LOG, "%s: revive of %s:%d:%lld for %s failed: %s", b->name, ck->topic,
                     ck->qid, (long long)ck->qoff, ck->group, err);
    rmq__buf_free(&props);
}

void rmq__db_pop_revive(db_broker_t *b, int64_t now_mono)
{
    if (!b->pop) return;
    pop_ck_t *due = NULL;
    for (pop_ck_t **pp = &b->pop->cks; *pp;) {
        pop_ck_t *ck = *pp;
        if (ck->due_mono <= now_mono) {
            *pp = ck->next;
            ck->next = due;
            due = ck;
        } else {
            pp = &ck->next;
        }
    }
    /* The queues whose order batch stopped blocking hand it out again: wake their pops. */
    int64_t now = rmq__now_ms();
    for (pop_order_t *o = b->pop->orders; o; o = o->next)
        if (!o->woken && !order_blocks(o, now)) {
            o->woken = 1;
            wake_topic(b, o->topic); /* order batches live until the broker's end: o stays */
        }
    /* Storing wakes parked pops, which may add checkpoints: the due ones are off the list. */
    while (due) {
        pop_ck_t *ck = due;
        due = ck->next;
        revive_one(b, ck);
        ck_free(ck);
    }
}

/* ---- POP_MESSAGE ----------------------------------------------------------------------------- */

typedef struct pop_write {
    int n;
    db_msg_t *msgs[];
} pop_write_t;

static void pop_written(void *ud, int status)
{
    pop_write_t *w = ud;
    for (int i = 0; i < w->n; i++)
        rmq__db_msg_release(w->msgs[i]);
    free(w);
}

typedef struct pop_found {
    db_msg_t *msgs[MAX_POP_NUMS];
    int n;
    size_t bytes;
    int64_t rest;
    rmq_buf_t start_info, msg_info; /* startOffsetInfo, msgOffsetInfo */
    rmq_buf_t order_info;           /* orderCountInfo (order=true) */
} pop_found_t;

/* Pop up to max - f->n messages of queue q of topic t for group: from the group's offset (or
 * initMode's), past every message read, matched or not. order: nothing while the queue's last
 * order batch blocks; the offset moves only past messages not matched (acks move it). */
static void pop_queue(db_broker_t *b, const char *group, db_topic_t *t, db_queue_t *q, int64_t max,
                      int init_mode, const rmq_sub_t *sub, const rmq_sql92_t *expr,
                      int64_t pop_time, int64_t invisible, int order, pop_found_t *f)
{
    int is_retry = !strncmp(t->name, RETRY_PREFIX, strlen(RETRY_PREFIX));
    int64_t off = rmq__db_offset_get(b, group, t->name, q->id);
    int64_t qmax = rmq__db_qmax(q);
    if (off < 0) off = (init_mode == INIT_MODE_MAX && !is_retry) ? qmax : q->min_off;
    if (off < q->min_off) off = q->min_off;
    int64_t start = off;
    int first = 1;
    if (order) {
        const pop_order_t *o = order_find(b, group, t->name, q->id);
        if (o && order_blocks(o, pop_time)) {
            f->rest += qmax - off;
            return;
        }
    }
    int64_t qoffs[MAX_POP_NUMS];
    int nq = 0;
    while (off < qmax && f->n < max) {
        db_msg_t *m = rmq__db_qget(q, off);
        if (!m) {
            m = rmq__db_qnext(q, off);
            if (!m) {
                off = qmax;
                break;
            }
        }
        if (f->n > 0 && f->bytes + m->size > MAX_TRANSFER_BYTES) break;
        off = m->qoff + 1;
        int match = 1;
        if (!is_retry && sub) {
            if (rmq__db_filter_is_tag(sub->expression_type))
                match = rmq__sub_match_code(sub, 1, m->has_tag ? m->tagcode : 0);
            else
                match = rmq__db_filter_match(expr, m);
        }
        if (!match) continue;
        f->msgs[f->n++] = m;
        f->bytes += m->size;
        qoffs[nq++] = m->qoff;
        if (!order) ck_add(b, group, t->name, q->id, m->qoff, pop_time, invisible);
        /* ExtraInfoUtil.buildMsgOffsetInfo: "<retry> <queueId> <offset>,<offset>...", queues
         * separated by ';'. */
        if (first) {
            if (f->msg_info.len) rmq__buf_append(&f->msg_info, ";", 1);
            rmq__buf_appendf(&f->msg_info, "%s %d %lld", retry_flag(t->name), q->id,
                             (long long)m->qoff);
        } else {
            rmq__buf_appendf(&f->msg_info, ",%lld", (long long)m->qoff);
        }
        first = 0;
    }
    if (!first) {
        /* buildStartOffsetInfo: "<retry> <queueId> <startOffset>". */
        if (f->start_info.len) rmq__buf_append(&f->start_info, ";", 1);
        rmq__buf_appendf(&f->start_info, "%s %d %lld", retry_flag(t->name), q->id,
                         (long long)start);
    }
    if (order && nq > 0) {
        order_update(b, group, t->name, q->id, pop_time, invisible, qoffs, nq, &f->order_info);
        off = start; /* committed by the acks */
    }
    if (off != start || rmq__db_offset_get(b, group, t->name, q->id) < 0)
        rmq__db_offset_set(b, group, t->name, q->id, off);
    f->rest += qmax - off;
}

static void wait_closed(uv_handle_t *h)
{
    pop_wait_t *w = h->data;
    free(w);
}

static void wait_finish(db_broker_t *b, pop_wait_t *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        b->pop->waits = w->next;
    if (w->next) w->next->prev = w->prev;
    rmq__conn_release(w->conn);
    rmq__rbuf_release(w->frame);
    free(w->topic);
    free(w->retry);
    uv_close((uv_handle_t *)&w->timer, wait_closed);
}

static void do_pop(db_broker_t *b, rmq_conn_t *conn, rmq_cmd_t *req, int64_t deadline);

static void wait_wake(db_broker_t *b, pop_wait_t *w)
{
    if (rmq__conn_state(w->conn) == RMQ_CONN_OPEN && b->node.t) {
        rmq_cmd_t c;
        char err[128];
        if (rmq__cmd_decode(w->frame, &c, err, sizeof(err)) == 0) {
            do_pop(b, w->conn, &c, w->deadline_mono);
            rmq__cmd_free(&c);
        }
    }
    wait_finish(b, w);
}

static void wait_timeout(uv_timer_t *t)
{
    pop_wait_t *w = t->data;
    wait_wake(w->b, w);
}

static void park(db_broker_t *b, rmq_conn_t *conn, rmq_cmd_t *req, const char *topic,
                 const char *group, int64_t deadline)
{
    db_pop_t *p = pop_of(b);
    pop_wait_t *w = rmq__xcalloc(1, sizeof(*w));
    char rt[512];
    retry_topic(rt, sizeof(rt), group, topic);
    w->b = b;
    w->conn = rmq__conn_keep(conn);
    w->frame = rmq__rbuf_keep(req->frame);
    w->topic = rmq__xstrdup(topic);
    w->retry = rmq__xstrdup(rt);
    w->deadline_mono = deadline;
    w->gen = p->gen;
    w->next = p->waits;
    if (w->next) w->next->prev = w;
    p->waits = w;
    uv_timer_init(&b->node.db->loop, &w->timer);
    w->timer.data = w;
    int64_t left = deadline - rmq__mono_ms();
    uv_timer_start(&w->timer, wait_timeout, (uint64_t)(left > 0 ? left : 0), 0);
}

/* deadline: 0 for a request as it arrives, else the monotonic end of its poll time (a parked
 * pop run again). */
static void do_pop(db_broker_t *b, rmq_conn_t *conn, rmq_cmd_t *req, int64_t deadline)
{
    db_hdr_t h = {conn, req, 0};
    const char *group = rmq__db_hdr_str(&h, "consumerGroup");
    const char *topic = rmq__db_hdr_str(&h, "topic");
    int64_t qid = rmq__db_hdr_i64(&h, "queueId");
    int64_t max_nums = rmq__db_hdr_i64(&h, "maxMsgNums");
    int64_t invisible = rmq__db_hdr_i64(&h, "invisibleTime");
    int64_t poll_ms = rmq__db_hdr_i64(&h, "pollTime");
    rmq__db_hdr_i64(&h, "bornTime");
    int64_t init_mode = rmq__db_hdr_i64(&h, "initMode");
    if (h.failed) return;
    const char *exp_type = rmq__cmd_ext(req, "expType");
    const char *exp = rmq__cmd_ext(req, "exp");
    const char *order_s = rmq__cmd_ext(req, "order");
    int order = order_s && !strcmp(order_s, "true");

    if (max_nums > MAX_POP_NUMS) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_MESSAGE_ILLEGAL,
                            "the broker[%s] pop message's num is greater than 32", b->node.host);
        return;
    }
    db_topic_t *t = rmq__db_topic_get(b, topic);
    if (rmq__db_check_read(conn, req, t, topic, qid, -1, "peeking")) return; /* -1: any queue */
    const db_subgroup_t *sg = rmq__db_subgroup_find(b, group);
    if (!sg->consume_enable) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_NO_PERMISSION,
                            "subscription group no permission, %s", group);
        return;
    }
    /* The expression of the request: TAG by default, SQL92 compiled. */
    rmq_sub_t *sub = NULL;
    rmq_sql92_t *expr = NULL;
    char err[512];
    if (rmq__sub_build(topic, exp ? exp : RMQ_SUB_ALL, exp_type ? exp_type : "TAG", &sub, err,
                       sizeof(err)) ||
        (!rmq__db_filter_is_tag(sub->expression_type) &&
         rmq__db_filter_compile(sub->expression_type, sub->sub_string, &expr, err, sizeof(err)))) {
        if (sub) rmq__sub_destroy(sub);
        rmq__db_reply_code(conn, req, RMQ_RESP_SUBSCRIPTION_PARSE_FAILED,
                           "parse the consumer's subscription failed");
        return;
    }
    if (rmq__db_filter_is_tag(sub->expression_type) && sub->sub_string &&
        strcmp(sub->sub_string, RMQ_SUB_ALL) == 0) {
        rmq__sub_destroy(sub);
        sub = NULL;
    }

    int64_t pop_time = rmq__now_ms();
    pop_found_t f;
    memset(&f, 0, sizeof(f));
    rmq__buf_init(&f.start_info);
    rmq__buf_init(&f.msg_info);
    rmq__buf_init(&f.order_info);
    if (max_nums <= 0) max_nums = 1;
    if (qid >= 0) {
        pop_queue(b, group, t, rmq__db_queue(t, (int)qid), max_nums, (int)init_mode, sub, expr,
                  pop_time, invisible, order, &f);
    } else {
        uint32_t start = pop_of(b)->rr++;
        for (int i = 0; i < t->read_q && f.n < max_nums; i++) {
            int k = (int)((start + (uint32_t)i) % (uint32_t)t->read_q);
            pop_queue(b, group, t, rmq__db_queue(t, k), max_nums, (int)init_mode, sub, expr,
                      pop_time, invisible, order, &f);
        }
    }
    /* Then the group's retry topic (revived messages); an order pop has none. */
    char rt[512];
    retry_topic(rt, sizeof(rt), group, topic);
    db_topic_t *rtt = order ? NULL : rmq__db_topic_get(b, rt);
    for (int i = 0; rtt && i < rtt->read_q && f.n < max_nums; i++)
        pop_queue(b, group, rtt, rmq__db_queue(rtt, i), max_nums, INIT_MODE_MIN, NULL, NULL,
                  pop_time, invisible, 0, &f);
    if (sub) rmq__sub_destroy(sub);
    rmq__sql92_free(expr);

    if (f.n == 0) {
        int64_t now = rmq__mono_ms();
        if (deadline == 0 && poll_ms > 0) deadline = now + poll_ms;
        if (deadline > now && req->frame && !(req->flag & RMQ_FLAG_ONEWAY)) {
            park(b, conn, req, topic, group, deadline);
            rmq__buf_free(&f.start_info);
            rmq__buf_free(&f.msg_info);
            rmq__buf_free(&f.order_info);
            return;
        }
    }
    int64_t got = 0;
    for (int i = 0; i < f.n; i++)
        got += f.msgs[i]->size;
    rmq__db_stats_on_get(b, topic, group, f.n, got);
    if (req->flag & RMQ_FLAG_ONEWAY) {
        rmq__buf_free(&f.start_info);
        rmq__buf_free(&f.msg_info);
        rmq__buf_free(&f.order_info);
        return;
    }

    rmq_cmd_t resp;
    if (f.n == 0)
        rmq__cmd_init_response(&resp, req, RMQ_RESP_POLLING_TIMEOUT, "no new message");
    else
        rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, "FOUND");
    /* PopMessageResponseHeader */
    rmq__cmd_set_ext_i64(&resp, "popTime", pop_time);
    rmq__cmd_set_ext_i64(&resp, "invisibleTime", invisible);
    rmq__cmd_set_ext_i64(&resp, "reviveQid", order ? ORDER_REVIVE_QID : 0);
    rmq__cmd_set_ext_i64(&resp, "restNum", f.rest);
    if (f.n > 0) {
        rmq__buf_append(&f.start_info, "", 1);
        rmq__buf_append(&f.msg_info, "", 1);
        rmq__cmd_set_ext(&resp, "startOffsetInfo", f.start_info.data);
        rmq__cmd_set_ext(&resp, "msgOffsetInfo", f.msg_info.data);
        if (order) {
            rmq__buf_append(&f.order_info, "", 1);
            rmq__cmd_set_ext(&resp, "orderCountInfo", f.order_info.data);
        }
    }
    rmq__buf_free(&f.start_info);
    rmq__buf_free(&f.msg_info);
    rmq__buf_free(&f.order_info);
    if (f.n == 0) {
        rmq__db_reply(conn, &resp);
        rmq__cmd_free(&resp);
        return;
    }
    pop_write_t *w = rmq__xmalloc(sizeof(*w) + sizeof(db_msg_t *) * (size_t)f.n);
    uv_buf_t bufs[MAX_POP_NUMS];
    w->n = f.n;
    for (int i = 0; i < f.n; i++) {
        w->msgs[i] = f.msgs[i];
        f.msgs[i]->refs++;
        bufs[i] = uv_buf_init(f.msgs[i]->data, f.msgs[i]->size);
    }
    if (rmq__conn_reply_ex(conn, &resp, bufs, (unsigned)f.n, pop_written, w) != 0)
        pop_written(w, RMQ_ERR_TRANSPORT);
    rmq__cmd_free(&resp);
}

static void h_pop(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    do_pop(rmq__db_broker_of(node), conn, req, 0);
}

void rmq__db_pop_arriving(db_broker_t *b, db_queue_t *q, db_msg_t *m)
{
    if (!m || !b->pop) return;
    wake_topic(b, q->topic->name);
}

/* Answer again the pops parked on topic name (or its retry topic). */
static void wake_topic(db_broker_t *b, const char *name)
{
    db_pop_t *p = b->pop;
    unsigned gen = ++p->gen; /* pops parked again while this runs are left for the next one */
    /* From the head again after each wake: answering may close a connection, and its other
     * parked pops go with it. */
    pop_wait_t *w = p->waits;
    while (w) {
        if (w->gen != gen && (!strcmp(w->topic, name) || !strcmp(w->retry, name))) {
            wait_wake(b, w);
            w = p->waits;
            continue;
        }
        w = w->next;
    }
}

void rmq__db_pop_conn_closed(db_broker_t *b, rmq_conn_t *conn)
{
    if (!b->pop) return;
    for (pop_wait_t *w = b->pop->waits, *n; w; w = n) {
        n = w->next;
        if (w->conn == conn) wait_finish(b, w);
    }
}

void rmq__db_pop_drop_parked(db_broker_t *b)
{
    while (b->pop && b->pop->waits)
        wait_finish(b, b->pop->waits);
}

/* ---- ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME -------------------------------------------- */

/* The popTime of an extraInfo (ExtraInfoUtil: "<ckQueueOffset> <popTime> <invisibleTime>
 * <reviveQid> <retry> <brokerName> <queueId> <queueOffset>"); 0 or -1 when malformed. */
static int extra_pop_time(const char *extra, int64_t *pop_time)
{
    const char *sp = strchr(extra, ' ');
    if (!sp) return -1;
    char *end;
    long long v = strtoll(sp + 1, &end, 10);
    if (end == sp + 1 || (*end != ' ' && *end != 0)) return -1;
    *pop_time = v;
    return 0;
}

/* ExtraInfoUtil.isOrder: the extraInfo's reviveQid (its fourth field) is the order revive
 * queue. */
static int extra_is_order(const char *extra)
{
    const char *f = extra;
    for (int i = 0; i < 3; i++) {
        f = strchr(f, ' ');
        if (!f) return 0;
        f++;
    }
    return strtoll(f, NULL, 10) == ORDER_REVIVE_QID && (f[3] == ' ' || f[3] == 0);
}

/* An ACK_MESSAGE or CHANGE_MESSAGE_INVISIBLETIME request: its header fields and the popTime of
 * its extraInfo. */
typedef struct ack_req {
    const char *group, *topic, *extra;
    int64_t qid, offset, invisible, pop_time;
} ack_req_t;

/* Read the header fields of an ACK_MESSAGE (with_invisible 0) or CHANGE_MESSAGE_INVISIBLETIME
 * (1: invisibleTime too) in Java's order into a, then check the topic, the queue, the offset
 * and the extraInfo. Returns 0, or -1 after answering. */
static int read_ack(db_broker_t *b, rmq_conn_t *conn, rmq_cmd_t *req, int with_invisible,
                    ack_req_t *a)
{
    db_hdr_t h = {conn, req, 0};
    a->group = rmq__db_hdr_str(&h, "consumerGroup");
    a->topic = rmq__db_hdr_str(&h, "topic");
    a->qid = rmq__db_hdr_i64(&h, "queueId");
    a->extra = rmq__db_hdr_str(&h, "extraInfo");
    a->offset = rmq__db_hdr_i64(&h, "offset");
    a->invisible = with_invisible ? rmq__db_hdr_i64(&h, "invisibleTime") : 0;
    if (h.failed) return -1;
    const char *topic = a->topic;
    int64_t qid = a->qid, offset = a->offset;
    db_topic_t *t = rmq__db_topic_get(b, topic);
    if (!t) {
        rmq__db_reply_no_topic(conn, req, topic);
        return -1;
    }
    if (qid < 0 || qid >= t->read_q) {
        rmq__db_reply_bad_qid(conn, req, RMQ_RESP_MESSAGE_ILLEGAL, topic, qid, t->read_q);
        return -1;
    }
    db_queue_t *q = rmq__db_queue(t, (int)qid);
    if (offset < q->min_off || offset > rmq__db_qmax(q)) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_NO_MESSAGE,
                            "offset is illegal, key:%s@%d, commit:%lld, store:%lld", topic,
                            (int)qid, (long long)offset, (long long)rmq__db_qmax(q));
        return -1;
    }
    if (extra_pop_time(a->extra, &a->pop_time)) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR, "extraInfo is illegal: %s", a->extra);
        return -1;
    }
    return 0;
}

/* AckMessageProcessor.ackOrderly: commit the group's offset to the first message of the order
 * batch not acked (the caller answers parked pops once nothing blocks the queue). Returns
 * order_commit's answer. */
static int64_t ack_orderly(db_broker_t *b, const char *group, const char *topic, int qid,
                           int64_t offset, int64_t pop_time)
{
    int64_t next = order_commit(b, group, topic, qid, offset, pop_time);
    if (next >= 0 && next > rmq__db_offset_get(b, group, topic, qid))
        rmq__db_offset_set(b, group, topic, qid, next);
    return next;
}

static void h_ack(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = rmq__db_broker_of(node);
    ack_req_t a;
    if (read_ack(b, conn, req, 0, &a)) return;
    const char *group = a.group, *topic = a.topic;
    int64_t qid = a.qid, offset = a.offset;
    if (extra_is_order(a.extra)) {
        if (ack_orderly(b, group, topic, (int)qid, offset, a.pop_time) == -1) {
            rmq__db_reply_codef(conn, req, RMQ_RESP_MESSAGE_ILLEGAL,
                                "offset %lld of %s:%d is not in the order batch of %s",
                                (long long)offset, topic, (int)qid, group);
            return;
        }
        rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
        const pop_order_t *o = order_find(b, group, topic, (int)qid);
        if (o && !order_blocks(o, rmq__now_ms())) wake_topic(b, topic);
        return;
    }
    if (!ck_remove(b, group, topic, (int)qid, offset, a.pop_time))
        rmq_dbg(RMQ_DBG_BROKER, DB_LOG, "%s: ack of %s:%d:%lld by %s holds no checkpoint", b->name,
                topic, (int)qid, (long long)offset, group);
    rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
}

static void h_change_invisible(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = rmq__db_broker_of(node);
    ack_req_t a;
    if (read_ack(b, conn, req, 1, &a)) return;
    const char *group = a.group, *topic = a.topic;
    int64_t qid = a.qid, offset = a.offset, invisible = a.invisible, pop_time = a.pop_time;
    /* The old checkpoint acked and a new one popped now (the Java processor writes the new one
     * first: the message comes back after the new invisible time even when the old checkpoint
     * was gone). Removed first, as both may carry the same popTime. */
    int64_t now = rmq__now_ms();
    int order = extra_is_order(a.extra);
    if (order) {
        /* processChangeInvisibleTimeForOrder: the message comes back after the new invisible
         * time, unless the group's offset already passed it (updateNextVisibleTime). */
        pop_order_t *o = order_find(b, group, topic, (int)qid);
        if (o && o->pop_time == pop_time &&
            offset >= rmq__db_offset_get(b, group, topic, (int)qid)) {
            for (int i = 0; i < o->n; i++)
                if (o->offs[i] == offset) o->next_visible[i] = now + invisible;
            o->woken = 0;
        }
    } else {
        ck_remove(b, group, topic, (int)qid, offset, pop_time);
        ck_add(b, group, topic, (int)qid, offset, now, invisible);
    }
    if (req->flag & RMQ_FLAG_ONEWAY) return;
    rmq_cmd_t resp;
    rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, NULL);
    /* ChangeInvisibleTimeResponseHeader */
    rmq__cmd_set_ext_i64(&resp, "popTime", now);
    rmq__cmd_set_ext_i64(&resp, "invisibleTime", invisible);
    rmq__cmd_set_ext_i64(&resp, "reviveQid", order ? ORDER_REVIVE_QID : 0);
    rmq__db_reply(conn, &resp);
    rmq__cmd_free(&resp);
}

/* ---- BATCH_ACK_MESSAGE ----------------------------------------------------------------------- */

/* Standard base64 (java.util.Base64) into out (room for size bytes); the byte count, or -1. */
static int b64_decode(const char *s, uint8_t *out, int size)
{
    int n = 0, bits = 0;
    uint32_t acc = 0;
    for (; *s && *s != '='; s++) {
        int v;
        char ch = *s;
        if (ch >= 'A' && ch <= 'Z')
            v = ch - 'A';
        else if (ch >= 'a' && ch <= 'z')
            v = ch - 'a' + 26;
        else if (ch >= '0' && ch <= '9')
            v = ch - '0' + 52;
        else if (ch == '+')
            v = 62;
        else if (ch == '/')
            v = 63;
        else
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n == size) return -1;
            out[n++] = (uint8_t)(acc >> bits);
        }
    }
    return n;
}

/* BatchAckMessageRequestBody {"brokerName":..,"acks":[BatchAck]}: each BatchAck (fields "c"
 * consumerGroup, "t" topic, "r" retry, "so" startOffset, "q" queueId, "rq" reviveQueueId, "pt"
 * popTime, "it" invisibleTime, "b" bitSet: base64 of BitSet.toByteArray, bit i acking offset
 * startOffset + i) acks its messages as ACK_MESSAGE does; a BatchAck naming no queue of this
 * broker is skipped, as AckMessageProcessor does. */
static void h_batch_ack(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = rmq__db_broker_of(node);
    rmq_fjdoc_t *doc = rmq__db_parse_body(conn, req, "BatchAckMessageRequestBody");
    if (!doc) return;
    rmq_fj_t *acks = rmq__fj_get(rmq__fj_root(doc), "acks");
    if (!acks || acks->type != RMQ_FJ_ARRAY) {
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR,
                           "bad BatchAckMessageRequestBody: no acks");
        rmq__fj_free(doc);
        return;
    }
    for (rmq_fj_t *a = acks->child; a; a = a->next) {
        const char *group = rmq__fj_get_str(a, "c");
        const char *topic = rmq__fj_get_str(a, "t");
        const char *retry = rmq__fj_get_str(a, "r");
        const char *bits = rmq__fj_get_str(a, "b");
        int64_t start = 0, pop_time = 0;
        int32_t qid = 0, rq = 0;
        rmq__fj_get_i32(a, "rq", &rq); /* reviveQueueId: 999 for an order batch */
        if (!group || !topic || !bits || rmq__fj_get_i64(a, "so", &start) ||
            rmq__fj_get_i32(a, "q", &qid) || rmq__fj_get_i64(a, "pt", &pop_time)) {
            rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR,
                               "bad BatchAckMessageRequestBody: a BatchAck without c, t, so, q, pt "
                               "or b");
            rmq__fj_free(doc);
            return;
        }
        /* ExtraInfoUtil.getRealTopic: retry "1" names the group's retry topic. */
        char real[512];
        if (retry && !strcmp(retry, "1"))
            retry_topic(real, sizeof(real), group, topic);
        else
            snprintf(real, sizeof(real), "%s", topic);
        db_topic_t *t = rmq__db_topic_get(b, real);
        if (!t || qid < 0 || qid >= t->read_q) continue;
        uint8_t set[512];
        int n = b64_decode(bits, set, (int)sizeof(set));
        if (n < 0) {
            rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR,
                                "bad BatchAckMessageRequestBody: bitSet is not base64: %s", bits);
            rmq__fj_free(doc);
            return;
        }
        for (int i = 0; i < n * 8; i++) {
            if (!(set[i / 8] & (1u << (i % 8)))) continue;
            if (rq == ORDER_REVIVE_QID)
                ack_orderly(b, group, real, qid, start + i, pop_time);
            else
                ck_remove(b, group, real, qid, start + i, pop_time);
        }
        const pop_order_t *o = rq == ORDER_REVIVE_QID ? order_find(b, group, real, qid) : NULL;
        if (o && !order_blocks(o, rmq__now_ms())) wake_topic(b, real);
    }
    rmq__fj_free(doc);
    rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
}

void rmq__db_pop_install(db_broker_t *b)
{
    rmq__db_set_handler(&b->node, RMQ_REQ_POP_MESSAGE, h_pop);
    rmq__db_set_handler(&b->node, RMQ_REQ_ACK_MESSAGE, h_ack);
    rmq__db_set_handler(&b->node, RMQ_REQ_BATCH_ACK_MESSAGE, h_batch_ack);
    rmq__db_set_handler(&b->node, RMQ_REQ_CHANGE_MESSAGE_INVISIBLETIME, h_change_invisible);
}

void rmq__db_pop_free(db_broker_t *b)
{
    if (!b->pop) return;
    while (b->pop->cks) {
        pop_ck_t *ck = b->pop->cks;
        b->pop->cks = ck->next;
        ck_free(ck);
    }
    while (b->pop->orders) {
        pop_order_t *o = b->pop->orders;
        b->pop->orders = o->next;
        order_free(o);
    }
    free(b->pop); /* parked pops were dropped before (rmq__db_pop_drop_parked) */
    b->pop = NULL;
}
