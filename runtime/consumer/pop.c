/*
 * pop.c -- RocketMQ 5 POP consumption of a POP assignment (RIP-19): the pop loop of one
 * assignment (DefaultMQPushConsumerImpl.popMessage: flow control on the messages waiting for
 * their ack, pop_threshold_for_queue; POP_MESSAGE with long polling, PullAPIWrapper.popAsync),
 * the answer (MQClientAPIImpl.processPopResponse: popTime, invisibleTime, reviveQid,
 * startOffsetInfo, msgOffsetInfo; each message's extraInfo built as ExtraInfoUtil.buildExtraInfo
 * does, the POP_CK property of the Java client), the batches handed to the same runner as
 * pulled ones (same views: the message's topic is the subscribed one even for a revived
 * message stored in %RETRY%<group>_<topic>), and their results
 * (ConsumeMessagePopConcurrentlyService.processConsumeResult): ACK_MESSAGE for what the
 * handler acknowledged, CHANGE_MESSAGE_INVISIBLETIME with the delay-level back-off for the rest.
 *
 * Orderly POP (an orderly consumer with client_rebalance false; Java 5.3.3 leaves it
 * unimplemented and pulls): each queue of a POP assignment is an entry of its own, popped with
 * order=true once the last messages it popped were settled. Its messages wait in the entry's
 * process queue and consume_orderly.c hands them to the pool one batch at a time, in offset
 * order; the delivery count comes from the answer's orderCountInfo. A batch that succeeded is
 * acked (the broker commits the group's offset); a suspended one, with every message after it,
 * goes back to the broker with CHANGE_MESSAGE_INVISIBLETIME to the suspend time, so that the
 * next pop (of any consumer of the group) gets the same messages again in order; a message
 * that reached max_reconsume_times goes to the DLQ and is acked
 * (ConsumeMessagePopOrderlyService.checkReconsumeTimes).
 *
 * A popped message that cannot be decoded goes to %DLQ%<group> with CONSUMER_SEND_MSG_BACK as
 * a pulled one does (undecodable.c) and is acked once stored there, or once the broker refused
 * it 3 times (logged as lost): it does not come back after every invisible time, and an
 * orderly POP queue, whose dispatch stops before it, goes on with the messages after it.
 *
 * Unlike Java, a batch whose assignment was revoked (a mode switch, a rebalance) still runs
 * and is acked, and so are the messages of the long poll that was in flight: they were popped
 * for this client and would otherwise wait out their invisible time. A batch a stop never ran,
 * or one whose invisible time passed while it waited for a thread (rmq__consume_begin,
 * isPopTimeout), is not acked: the broker delivers it again.
 *
 * Ownership: a pop in flight and an armed timer each hold one reference on the entry; a POP
 * batch owns its messages and their extraInfo strings (rmq_cbatch_t.pop_ck) until its result
 * was applied; an ack or change in flight holds one reference on the entry. An orderly POP
 * entry owns the messages of its process queue and their extraInfo (pop_ord); its batch views
 * them and owns copies of their extraInfo; a failed batch waiting for its DLQ sends is owned
 * by their context (rmq_ord_fail_t, consume_orderly.c) until they all answered.
 * Threads: loop thread only.
 */
#include "consumer_int.h"

#include "protocol/acl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define RMQ_POP_SUSPEND_MS 15000        /* BROKER_SUSPEND_MAX_TIME_MILLIS: pollTime */
#define RMQ_POP_TIMEOUT_EXTRA_MS 10000  /* PullAPIWrapper.popAsync: timeout = pollTime + 10 s */
#define RMQ_POP_FLOW_DELAY_MS 50        /* PULL_TIME_DELAY_MILLS_WHEN_CACHE_FLOW_CONTROL */
#define RMQ_POP_SUSPEND_DELAY_MS 1000   /* PULL_TIME_DELAY_MILLS_WHEN_SUSPEND */
#define RMQ_POP_ACK_TIMEOUT_MS 3000     /* DefaultMQPushConsumerImpl.ASYNC_TIMEOUT */
#define CK_MAX 512

/* DefaultMQPushConsumerImpl.popDelayLevel, seconds. */
static const int pop_delay_level[] = {10,  30,  60,  120, 180, 240,  300,  360,
                                      420, 480, 540, 600, 1200, 1800, 3600, 7200};
#define N_DELAY ((int)RMQ_ARRAY_SIZE(pop_delay_level))

/* ---- the pop loop ------------------------------------------------------------------------ */

static void pop_later(rmq_qent_t *q, int64_t delay_ms);

static void on_timer(uv_timer_t *t)
{
    rmq_qent_t *q = t->data;
    q->timer_armed = 0;
    rmq__pop_now(q);
    rmq__qent_release(q);
}

static void pop_later(rmq_qent_t *q, int64_t delay_ms)
{
    if (q->pq.state == RMQ_PQ_DROPPED || q->timer_armed) return;
    if (delay_ms <= 0) {
        rmq__pop_now(q);
        return;
    }
    q->timer_armed = 1;
    rmq__qent_keep(q);
    uv_timer_start(&q->timer, on_timer, (uint64_t)delay_ms, 0);
}

static void exception_later(rmq_qent_t *q)
{
    pop_later(q, q->c->conf->pull_time_delay_mills_when_exception);
}

static void on_pop_resp(void *ud, int err, rmq_cmd_t *resp, const char *errmsg);

void rmq__pop_now(rmq_qent_t *q)
{
    rmq_consumer_t *c = q->c;
    const rmq_conf_t *cf = c->conf;
    if (q->pq.state != RMQ_PQ_ACTIVE || q->pull_inflight) return;
    /* Orderly: the next pop once every message of the last one was acked or handed back (the
     * broker would hand out nothing of the queue before that anyway). */
    if (c->orderly && (q->consuming || q->pq.count > 0)) return;
    q->last_pull_ms = rmq__mono_ms();
    q->pq.last_pull_ms = q->last_pull_ms;
    if (c->state != RMQ_CLIENT_RUNNING) {
        if (c->state == RMQ_CLIENT_STARTING) exception_later(q);
        return;
    }
    if (c->paused) {
        pop_later(q, RMQ_POP_SUSPEND_DELAY_MS);
        return;
    }
    if (rmq__flow_gate(q)) return; /* rmq.pause(): parked until the pause ends */
    if (q->pop_waiting > cf->pop_threshold_for_queue) {
        rmq_dbg(RMQ_DBG_PULL, "pop", "%s: flow control, %d waiting for their ack > %d", q->name,
                q->pop_waiting, cf->pop_threshold_for_queue);
        pop_later(q, RMQ_POP_FLOW_DELAY_MS);
        return;
    }
    rmq_csub_t *s = rmq__c_sub(c, q->mq.topic);
    if (!s) {
        exception_later(q);
        return;
    }
    const char *addr = rmq__c_master_addr(c, q->mq.broker_name);
    if (!addr) {
        rmq_log_warn("pop", "%s: the broker[%s] not exist", q->name, q->mq.broker_name);
        rmq__c_refresh_routes(c);
        exception_later(q);
        return;
    }
    int max_msgs = rmq__flow_take(q, cf->pop_batch_nums); /* consume_tps_limit */
    if (max_msgs == 0) return; /* parked until the bucket holds enough */
    /* RebalancePushImpl.getConsumeInitMode: MIN for CONSUME_FROM_FIRST_OFFSET, else MAX. */
    int init_mode = rmq__conf_cfw_effective(cf->consume_from_where) == RMQ_CFW_FIRST_OFFSET ? 0 : 1;
    rmq_cmd_t cmd;
    rmq__cmd_init(&cmd, RMQ_REQ_POP_MESSAGE, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext(&cmd, "consumerGroup", c->group);
    rmq__cmd_set_ext(&cmd, "topic", q->mq.topic);
    rmq__cmd_set_ext_i64(&cmd, "queueId", q->mq.queue_id);
    rmq__cmd_set_ext_i64(&cmd, "maxMsgNums", max_msgs);
    rmq__cmd_set_ext_i64(&cmd, "invisibleTime", cf->pop_invisible_time);
    rmq__cmd_set_ext_i64(&cmd, "pollTime", RMQ_POP_SUSPEND_MS);
    rmq__cmd_set_ext_i64(&cmd, "bornTime", rmq__now_ms());
    rmq__cmd_set_ext_i64(&cmd, "initMode", init_mode);
    rmq__cmd_set_ext(&cmd, "expType", s->sd->expression_type);
    rmq__cmd_set_ext(&cmd, "exp", s->sd->sub_string);
    rmq__cmd_set_ext(&cmd, "order", c->orderly ? "true" : "false");
    rmq__cmd_set_ext(&cmd, "bname", q->mq.broker_name);
    rmq__qent_keep(q);
    q->pull_inflight = 1;
    q->pull_sent_ns = (int64_t)uv_hrtime();
    int rc = rmq__remoting_request(c->rt, addr, &cmd,
                                   RMQ_POP_SUSPEND_MS + RMQ_POP_TIMEOUT_EXTRA_MS, on_pop_resp, q);
    rmq__cmd_free(&cmd);
    rmq_dbg(RMQ_DBG_PULL, "pop", "%s: POP maxMsgNums=%d invisibleTime=%" PRId64 " -> %s",
            q->name, cf->pop_batch_nums, cf->pop_invisible_time, addr);
    if (rc) {
        q->pull_inflight = 0;
        rmq__flow_refund(q);
        rmq_log_warn("pop", "%s: cannot send POP_MESSAGE to %s: %s", q->name, addr,
                     rmq_err_str(rc));
        exception_later(q);
        rmq__qent_release(q);
    }
}

/* ---- extraInfo ------------------------------------------------------------------------------ */

/* ExtraInfoUtil.getRetry(topic): "2" for a V2 pop retry topic (%RETRY%...+...), "1" for any
 * other retry topic, "0" for a normal one. */
static char retry_mark(const char *topic, size_t len)
{
    if (len < 7 || memcmp(topic, "%RETRY%", 7) != 0) return '0';
    return memchr(topic, '+', len) ? '2' : '1';
}

void rmq__pop_extra_info(char *out, size_t out_size, int64_t ck_offset, int64_t pop_time,
                         int64_t invisible, int revive_qid, const char *topic,
                         const char *broker, int qid, int64_t msg_offset)
{
    /* MessageConst.KEY_SEPARATOR (" ") between the fields. */
    snprintf(out, out_size, "%" PRId64 " %" PRId64 " %" PRId64 " %d %c %s %d %" PRId64,
             ck_offset, pop_time, invisible, revive_qid, retry_mark(topic, strlen(topic)),
             broker, qid, msg_offset);
}

/* One "<retry> <queueId> <value>" entry of startOffsetInfo / msgOffsetInfo ("mark@qid" keys,
 * entries separated by ";"); for msgOffsetInfo the value is a comma list. Returns the value
 * text of key (mark, qid) in info, or NULL; *len its length. */
static const char *info_find(const char *info, char mark, int qid, size_t *len)
{
    if (!info) return NULL;
    const char *p = info;
    while (*p) {
        const char *end = strchr(p, ';');
        if (!end) end = p + strlen(p);
        char m = 0;
        int id = 0, used = 0;
        if (sscanf(p, "%c %d %n", &m, &id, &used) >= 2 && used > 0 && p + used <= end &&
            m == mark && id == qid) {
            *len = (size_t)(end - (p + used));
            return p + used;
        }
        p = *end ? end + 1 : end;
    }
    return NULL;
}

/* The index-th number of a comma list of length len, or fallback. */
static int64_t list_at(const char *v, size_t len, int index, int64_t fallback)
{
    const char *p = v, *end = v + len;
    for (int i = 0; p < end; i++) {
        if (i == index) return strtoll(p, NULL, 10);
        const char *comma = memchr(p, ',', (size_t)(end - p));
        if (!comma) break;
        p = comma + 1;
    }
    return fallback;
}

/* ---- the answer ------------------------------------------------------------------------------ */

static void ack_one(rmq_consumer_t *c, rmq_qent_t *q, const char *ck);

/* (consumer_int.h) */
int rmq__pop_order_count(const char *info, char mark, int qid, int64_t off)
{
    char one[64], all[32];
    snprintf(one, sizeof(one), "qo%d%%%" PRId64, qid, off);
    snprintf(all, sizeof(all), "%d", qid);
    int found_all = -1;
    for (const char *p = info; p && *p;) {
        const char *end = strchr(p, ';');
        if (!end) end = p + strlen(p);
        char m = 0, key[64];
        int cnt = 0;
        char entry[160];
        size_t len = (size_t)(end - p) < sizeof(entry) - 1 ? (size_t)(end - p) : sizeof(entry) - 1;
        memcpy(entry, p, len);
        entry[len] = 0;
        if (sscanf(entry, "%c %63s %d", &m, key, &cnt) == 3 && m == mark) {
            if (!strcmp(key, one)) return cnt;
            if (!strcmp(key, all)) found_all = cnt;
        }
        p = *end ? end + 1 : end;
    }
    return found_all;
}

static void ord_hand_back(rmq_consumer_t *c, rmq_qent_t *q, int64_t invisible);

/* Orderly: the popped messages of q's queue enter its process queue, their extraInfo its
 * pop_ord table, and consume_orderly.c runs them one batch at a time in offset order. Takes
 * the messages' references and the strings. */
static void ord_take(rmq_qent_t *q, rmq_msg_t **msgs, char **cks, int n, int64_t deadline)
{
    rmq_pop_ord_t *grown = rmq__xmalloc(sizeof(*grown) * (size_t)(q->pop_ord_n + n + 1));
    if (q->pop_ord_n > 0) memcpy(grown, q->pop_ord, sizeof(*grown) * (size_t)q->pop_ord_n);
    free(q->pop_ord);
    q->pop_ord = grown;
    for (int i = 0; i < n; i++) {
        if (!rmq__pq_put(&q->pq, msgs[i])) {
            /* Already held: the broker handed it out again while this client still has it. */
            rmq__msg_release(msgs[i]);
            free(cks[i]);
            q->pop_waiting--;
            continue;
        }
        q->pop_ord[q->pop_ord_n].off = msgs[i]->queue_offset;
        q->pop_ord[q->pop_ord_n++].ck = cks[i];
    }
    q->pop_ord_deadline_ms = deadline;
    /* The long poll of a revoked entry: its messages go back at once, for the queue's next
     * owner (no batch of a revoked entry starts). */
    if (q->pq.state != RMQ_PQ_ACTIVE && !q->consuming) ord_hand_back(q->c, q, 0);
    rmq__orderly_dispatch(q);
}

/* The store topic of m (its topic when not given; empty for an undecodable message) into st,
 * and its retry mark. */
static char msg_store_topic(const rmq_msg_t *m, char *st, size_t size)
{
    size_t tl = m->store_topic_len ? m->store_topic_len : m->topic_len;
    const char *tp = m->store_topic_len ? m->store_topic : m->topic;
    if (tl >= size) tl = size - 1;
    if (tl) memcpy(st, tp, tl);
    st[tl] = 0;
    return retry_mark(st, tl);
}

/* One POP answer's fields for the extraInfo of its messages. */
typedef struct pop_answer {
    rmq_msgset_t *set;
    int64_t pop_time, invisible, revive;
    const char *start_info, *msg_info;
} pop_answer_t;

/* processPopResponse: the extraInfo of m (a message of a->set, decoded or not) into ck; its
 * checkpoint's start offset and its own offset from the answer's offset infos (the index among
 * this answer's messages, the undecodable ones included, of the same retry mark and queue);
 * without them, the first offset of each topic and queue. Returns the message's offset. */
static int64_t build_ck(rmq_qent_t *q, const pop_answer_t *a, const rmq_msg_t *m, char *ck,
                        size_t ck_size)
{
    const rmq_msgset_t *set = a->set;
    char st[512], ot[512];
    char mark = msg_store_topic(m, st, sizeof(st));
    int64_t ck_off = m->queue_offset, msg_off = m->queue_offset, first = -1;
    int index = 0;
    for (int k = 0; k < set->n + set->n_bad; k++) {
        const rmq_msg_t *o = k < set->n ? &set->msgs[k] : &set->bad[k - set->n];
        if (o->queue_id != m->queue_id || msg_store_topic(o, ot, sizeof(ot)) != mark) continue;
        if (first < 0 || o->queue_offset < first) first = o->queue_offset;
        if (o->queue_offset < m->queue_offset) index++;
    }
    size_t vl = 0;
    const char *v = info_find(a->start_info, mark, m->queue_id, &vl);
    if (v) {
        ck_off = strtoll(v, NULL, 10);
        const char *mv = info_find(a->msg_info, mark, m->queue_id, &vl);
        if (mv) msg_off = list_at(mv, vl, index, m->queue_offset);
        if (msg_off != m->queue_offset)
            rmq_log_warn("pop",
                         "%s: queue offset %" PRId64 " of a message is strange, not "
                         "equal to the stored %" PRId64,
                         q->name, msg_off, m->queue_offset);
    } else if (first >= 0) {
        ck_off = first;
    }
    rmq__pop_extra_info(ck, ck_size, ck_off, a->pop_time, a->invisible, (int)a->revive, st,
                        q->mq.broker_name, m->queue_id, msg_off);
    return msg_off;
}

static void handle_found(rmq_qent_t *q, rmq_cmd_t *resp)
{
    rmq_consumer_t *c = q->c;
    char err[256] = "";
    rmq_msgset_t *set = NULL;
    int64_t pop_time = 0, invisible = 0, revive = 0;
    rmq__cmd_ext_i64(resp, "popTime", &pop_time);
    rmq__cmd_ext_i64(resp, "invisibleTime", &invisible);
    rmq__cmd_ext_i64(resp, "reviveQid", &revive);
    const char *start_info = rmq__cmd_ext(resp, "startOffsetInfo");
    const char *msg_info = rmq__cmd_ext(resp, "msgOffsetInfo");
    const char *count_info = c->orderly ? rmq__cmd_ext(resp, "orderCountInfo") : NULL;
    int rc = rmq__msgset_decode_ex(resp->frame, resp->body, resp->body_len, q->mq.broker_name, 0,
                                   0, RMQ_DECODE_KEEP_BAD, &set, err, sizeof(err));
    if (!set) {
        rmq_log_error("pop", "%s: cannot decode the POP_MESSAGE body: %s (%s); its messages "
                      "come again after their invisible time", q->name, rmq_err_str(rc), err);
        pop_later(q, c->conf->pull_time_delay_mills_when_exception);
        return;
    }
    pop_answer_t ans = {set, pop_time, invisible, revive, start_info, msg_info};
    int n = set->n, nb = set->n_bad;
    rmq_msg_t **keep = rmq__xcalloc((size_t)(n + nb) + 1, sizeof(*keep));
    char **cks = rmq__xcalloc((size_t)(n + nb) + 1, sizeof(*cks));
    char **bad_cks = rmq__xcalloc((size_t)nb + 1, sizeof(*bad_cks));
    int nk = 0;
    /* Undecodable messages go to the DLQ and are acked then (undecodable.c); built first, while
     * every message of the answer still counts for the offset infos' indexes. */
    for (int i = 0; i < nb; i++) {
        char ck[CK_MAX];
        build_ck(q, &ans, &set->bad[i], ck, sizeof(ck));
        bad_cks[i] = rmq__xstrdup(ck);
    }
    rmq_csub_t *s = rmq__c_sub(c, q->mq.topic);
    for (int i = 0; i < n; i++) {
        rmq_msg_t *m = &set->msgs[i];
        char ck[CK_MAX];
        int64_t msg_off = build_ck(q, &ans, m, ck, sizeof(ck));
        if (count_info) {
            char st[512];
            char mark = msg_store_topic(m, st, sizeof(st));
            int cnt = rmq__pop_order_count(count_info, mark, m->queue_id, msg_off);
            if (cnt > 0) m->reconsume_times = cnt;
        }
        /* The handler sees the subscribed topic, also for a message revived into the retry
         * topic (processPopResponse: setTopic(withoutNamespace(topic))). */
        m->topic = q->mq.topic;
        m->topic_len = (uint32_t)strlen(q->mq.topic);
        rmq__c_strip_namespace(c, m);
        if (s && !rmq__c_tag_match(s, m)) {
            /* Not for this subscription: acked at once, so it does not come back. */
            ack_one(c, q, ck);
            rmq__msg_release(m);
            continue;
        }
        keep[nk] = m;
        cks[nk++] = rmq__xstrdup(ck);
    }
    c->n_popped += nk;
    q->pop_waiting += nk;
    rmq__flow_charge(q, nk);
    rmq_dbg(RMQ_DBG_PULL, "pop", "%s: %d message(s) popped, popTime=%" PRId64, q->name, nk,
            pop_time);
    if (c->orderly && nk + nb > 0) {
        /* An undecodable message holds its place in the process queue (the orderly dispatch
         * stops before it) until it was stored in the DLQ and acked. */
        for (int i = 0; i < nb; i++) {
            keep[nk + i] = &set->bad[i];
            cks[nk + i] = rmq__xstrdup(bad_cks[i]);
        }
        q->pop_waiting += nb;
        ord_take(q, keep, cks, nk + nb, pop_time > 0 && invisible > 0 ? pop_time + invisible : 0);
        nk = 0; /* taken */
        for (int i = 0; i < nb; i++) {
            rmq_msg_t *m = &set->bad[i];
            if (rmq__pq_get(&q->pq, m->queue_offset) != m) { /* held already, or handed back */
                free(bad_cks[i]);
                continue;
            }
            rmq__msgset_keep(set); /* the entry's own reference */
            rmq__undecodable_submit_pop(c, q, m, bad_cks[i]);
        }
    } else if (nk > 0 || nb > 0) {
        int bs = c->conf->consume_message_batch_max_size;
        if (bs < 1) bs = 1;
        c->hops->hold(c->pool);
        for (int i = 0; i < nk; i += bs) {
            int cnt = nk - i < bs ? nk - i : bs;
            rmq_cbatch_t *cb = rmq__cbatch_new(q, keep + i, cnt);
            cb->pop_ck = rmq__xcalloc((size_t)cnt, sizeof(char *));
            memcpy(cb->pop_ck, cks + i, sizeof(char *) * (size_t)cnt);
            cb->pop_n = cnt;
            cb->pop_deadline_ms = pop_time > 0 && invisible > 0 ? pop_time + invisible : 0;
            rmq__cbatch_submit(c, cb, -1);
        }
        c->hops->flush(c->pool);
        for (int i = 0; i < nb; i++)
            rmq__undecodable_submit_pop(c, q, &set->bad[i], bad_cks[i]);
    }
    rmq__msgset_release(set);
    free(keep);
    free(cks);
    free(bad_cks);
    /* (Orderly: the next pop waits for the messages taken; rmq__pop_now knows.) */
    if (nk == 0 || c->conf->pull_interval <= 0)
        rmq__pop_now(q);
    else
        pop_later(q, c->conf->pull_interval);
}

static void on_pop_resp(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    rmq_qent_t *q = ud;
    rmq_consumer_t *c = q->c;
    q->pull_inflight = 0;
    rmq__flow_refund(q); /* handle_found charges what it keeps */
    if (c->state != RMQ_CLIENT_RUNNING ||
        (q->pq.state != RMQ_PQ_ACTIVE && (err || resp->code != RMQ_RESP_SUCCESS))) {
        /* Stopping: anything popped now comes back after its invisible time. */
        rmq__qent_release(q);
        return;
    }
    /* A revoked assignment (a switch to PULL) still consumes what its last long poll brought,
     * rather than leave it to the invisible time; it pops no more (rmq__pop_now). */
    if (err) {
        rmq_log_warn("pop", "%s: pop failed: %s", q->name, errmsg);
        exception_later(q);
        rmq__qent_release(q);
        return;
    }
    switch (resp->code) {
    case RMQ_RESP_SUCCESS:
        handle_found(q, resp);
        break;
    case RMQ_RESP_POLLING_TIMEOUT:
    case RMQ_RESP_PULL_NOT_FOUND:
        rmq_dbg(RMQ_DBG_PULL, "pop", "%s: POLLING_NOT_FOUND", q->name);
        rmq__pop_now(q);
        break;
    default:
        /* POLLING_FULL and any error: pull_time_delay_mills_when_exception. */
        if (!rmq__acl_refused(resp))
            rmq_log_warn("pop", "%s: POP_MESSAGE answered %s: %s", q->name,
                         resp->code == RMQ_RESP_POLLING_FULL ? "POLLING_FULL"
                                                             : rmq_err_name(resp->code),
                         resp->remark ? resp->remark : "");
        exception_later(q);
        break;
    }
    rmq__qent_release(q);
}

/* ---- acks and invisible-time changes ---------------------------------------------------- */

typedef struct pop_ack {
    rmq_consumer_t *c;
    rmq_qent_t *q; /* one reference */
    int change;    /* CHANGE_MESSAGE_INVISIBLETIME, else ACK_MESSAGE */
    char ck[CK_MAX];
} pop_ack_t;

static void on_ack(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    pop_ack_t *a = ud;
    rmq_consumer_t *c = a->c;
    c->inflight_sendbacks--;
    const char *what = a->change ? "CHANGE_MESSAGE_INVISIBLETIME" : "ACK_MESSAGE";
    if (!err && resp->code == RMQ_RESP_SUCCESS) {
        if (a->change)
            c->n_pop_changed++;
        else
            c->n_pop_acked++;
    } else {
        /* AckStatus.NO_EXIST or a failure: the broker delivers it again after the invisible
         * time. */
        rmq_log_warn("pop", "%s: %s of [%s] failed: %s", a->q->name, what, a->ck,
                     err ? errmsg : (resp->remark ? resp->remark : rmq_err_name(resp->code)));
    }
    rmq__qent_release(a->q);
    free(a);
}

/* The fields of an extraInfo: [5] broker, [6] queue id, [7] queue offset, [4] retry mark. */
static int ck_fields(const char *ck, char *retry, char *broker, size_t bsize, int *qid,
                     int64_t *off)
{
    char b[256];
    long long ckoff, pt, inv, o;
    int rq, id;
    char r;
    if (sscanf(ck, "%lld %lld %lld %d %c %255s %d %lld", &ckoff, &pt, &inv, &rq, &r, b, &id,
               &o) != 8)
        return -1;
    *retry = r;
    snprintf(broker, bsize, "%s", b);
    *qid = id;
    *off = o;
    return 0;
}

/* ExtraInfoUtil.getRealTopic: the topic the checkpoint is in (the retry topic of a revived
 * message, KeyBuilder.buildPopRetryTopicV1 / V2). A new string. */
static char *real_topic(rmq_consumer_t *c, const char *topic, char retry)
{
    if (retry != '1' && retry != '2') return rmq__xstrdup(topic);
    size_t n = strlen(c->group) + strlen(topic) + 9;
    char *t = rmq__xmalloc(n);
    snprintf(t, n, "%%RETRY%%%s%c%s", c->group, retry == '2' ? '+' : '_', topic);
    return t;
}

/* ACK_MESSAGE (invisible < 0) or CHANGE_MESSAGE_INVISIBLETIME of one popped message. */
static void send_ack(rmq_consumer_t *c, rmq_qent_t *q, const char *ck, int64_t invisible)
{
    char retry = '0', broker[256];
    int qid = 0;
    int64_t off = 0;
    if (ck_fields(ck, &retry, broker, sizeof(broker), &qid, &off) != 0) {
        rmq_log_error("pop", "%s: bad extraInfo [%s]: not acked", q->name, ck);
        return;
    }
    const char *addr = rmq__c_master_addr(c, broker);
    if (!addr) {
        rmq_log_error("pop", "%s: the broker[%s] not exist: [%s] not acked", q->name, broker, ck);
        rmq__c_refresh_routes(c);
        return;
    }
    char *topic = real_topic(c, q->mq.topic, retry);
    rmq_cmd_t cmd;
    rmq__cmd_init(&cmd, invisible < 0 ? RMQ_REQ_ACK_MESSAGE : RMQ_REQ_CHANGE_MESSAGE_INVISIBLETIME,
                  RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext(&cmd, "consumerGroup", c->group);
    rmq__cmd_set_ext(&cmd, "topic", topic);
    rmq__cmd_set_ext_i64(&cmd, "queueId", qid);
    rmq__cmd_set_ext(&cmd, "extraInfo", ck);
    rmq__cmd_set_ext_i64(&cmd, "offset", off);
    if (invisible >= 0) rmq__cmd_set_ext_i64(&cmd, "invisibleTime", invisible);
    rmq__cmd_set_ext(&cmd, "bname", broker);
    free(topic);
    pop_ack_t *a = rmq__xcalloc(1, sizeof(*a));
    a->c = c;
    a->q = rmq__qent_keep(q);
    a->change = invisible >= 0;
    snprintf(a->ck, sizeof(a->ck), "%s", ck);
    c->inflight_sendbacks++; /* a graceful stop waits for it, as for send-backs */
    int rc = rmq__remoting_request(c->rt, addr, &cmd, RMQ_POP_ACK_TIMEOUT_MS, on_ack, a);
    rmq__cmd_free(&cmd);
    if (rc) {
        c->inflight_sendbacks--;
        rmq_log_warn("pop", "%s: cannot send %s for [%s]: %s", q->name,
                     a->change ? "CHANGE_MESSAGE_INVISIBLETIME" : "ACK_MESSAGE", ck,
                     rmq_err_str(rc));
        rmq__qent_release(q);
        free(a);
    }
}

static void ack_one(rmq_consumer_t *c, rmq_qent_t *q, const char *ck)
{
    send_ack(c, q, ck, -1);
}

/* changePopInvisibleTime and checkNeedAckOrDelay: the invisible time of the delay level
 * (0: the reconsume count), and once the reconsume count is spent, an ack when the message is
 * older than twice the longest level, else the level its age reached. */
static void consume_later(rmq_consumer_t *c, rmq_qent_t *q, const rmq_msg_t *m, const char *ck,
                          int delay_level)
{
    int level = delay_level;
    if (m->reconsume_times >= c->max_reconsume) {
        int64_t age = rmq__now_ms() - m->born_timestamp;
        if (age > (int64_t)pop_delay_level[N_DELAY - 1] * 1000 * 2) {
            rmq_log_warn("pop", "%s: consumed too many times (%d), acking [%s]", q->name,
                         m->reconsume_times, ck);
            ack_one(c, q, ck);
            return;
        }
        for (level = N_DELAY - 1; level >= 0; level--)
            if (age >= (int64_t)pop_delay_level[level] * 1000) {
                level++;
                break;
            }
        if (level < 0) level = 0;
    } else if (level <= 0) {
        level = m->reconsume_times;
    }
    int sec = level >= N_DELAY ? pop_delay_level[N_DELAY - 1] : pop_delay_level[level];
    send_ack(c, q, ck, (int64_t)sec * 1000);
}

/* ---- orderly POP results (ConsumeMessagePopOrderlyService) ----------------------------------- */

/* m leaves the orderly entry q: out of its process queue and pop_ord, released. */
static void ord_forget(rmq_qent_t *q, rmq_msg_t *m)
{
    for (int k = 0; k < q->pop_ord_n; k++)
        if (q->pop_ord[k].off == m->queue_offset) {
            free(q->pop_ord[k].ck);
            q->pop_ord[k] = q->pop_ord[--q->pop_ord_n];
            break;
        }
    rmq__pq_remove(&q->pq, &m, 1);
    rmq__msg_release(m);
    if (--q->pop_waiting < 0) q->pop_waiting = 0;
}

/* Every message q still holds goes back to the broker: CHANGE_MESSAGE_INVISIBLETIME to
 * invisible ms (-1: none, they come back after their own invisible time), in offset order. */
static void ord_hand_back(rmq_consumer_t *c, rmq_qent_t *q, int64_t invisible)
{
    rmq_msg_t *m;
    while ((m = rmq__pq_first(&q->pq)) != NULL) {
        for (int k = 0; invisible >= 0 && k < q->pop_ord_n; k++)
            if (q->pop_ord[k].off == m->queue_offset) send_ack(c, q, q->pop_ord[k].ck, invisible);
        ord_forget(q, m);
    }
}

void rmq__pop_undecodable_done(rmq_consumer_t *c, rmq_qent_t *q, rmq_msg_t *m, const char *ck)
{
    ack_one(c, q, ck);
    if (!c->orderly || rmq__pq_get(&q->pq, m->queue_offset) != m) return;
    ord_forget(q, m);
    if (q->consuming) return; /* the running batch goes on when it returns */
    if (q->pq.state == RMQ_PQ_DROPPED) ord_hand_back(c, q, 0);
    if (q->pq.count > 0)
        rmq__orderly_dispatch(q);
    else
        rmq__pop_now(q);
}

static void free_cks(rmq_cbatch_t *cb)
{
    for (int i = 0; i < cb->pop_n; i++)
        free(cb->pop_ck[i]);
    free(cb->pop_ck);
    cb->pop_ck = NULL;
    cb->pop_n = 0;
}

/* checkReconsumeTimes' outcome (rmq__orderly_fail): the messages stored in the DLQ are acked;
 * when any message stays, it and every message after it go back to the broker for suspend_ms,
 * else the queue goes on. */
static void ord_fail_settle(rmq_ord_fail_t *x)
{
    rmq_consumer_t *c = x->c;
    rmq_cbatch_t *cb = x->cb;
    rmq_qent_t *q = cb->q;
    for (int i = 0; i < cb->b.n; i++) {
        if (!x->sent[i]) continue;
        c->n_dlq++;
        rmq__stats_sent_back(q, 1);
        ack_one(c, q, cb->pop_ck[i]);
        ord_forget(q, cb->msgs[i]);
    }
    q->consuming = 0;
    int running = c->state == RMQ_CLIENT_RUNNING || c->state == RMQ_CLIENT_DRAINING;
    if (running && (x->kept || q->pq.state == RMQ_PQ_DROPPED)) {
        rmq_dbg(RMQ_DBG_CONSUME, "pop", "%s: suspended, %d message(s) back in %" PRId64 " ms",
                q->name, q->pq.count, x->suspend_ms);
        ord_hand_back(c, q, x->kept ? x->suspend_ms : 0);
    }
    if (q->pq.count > 0)
        rmq__orderly_dispatch(q);
    else
        rmq__pop_now(q);
    free_cks(cb);
    rmq__cbatch_free(cb);
}

/* The result of an orderly POP batch, the first messages q holds. */
static void ord_result(rmq_consumer_t *c, rmq_cbatch_t *cb)
{
    rmq_batch_t *b = &cb->b;
    rmq_qent_t *q = cb->q;
    int n = b->n;
    if (b->status == RMQ_CONSUME_NOT_RUN ||
        (c->state != RMQ_CLIENT_RUNNING && c->state != RMQ_CLIENT_DRAINING)) {
        /* Stopping: not acked; the broker hands them out again after their invisible time.
         * (Not run while running: the same batch again.) */
        q->consuming = 0;
        if (c->state == RMQ_CLIENT_RUNNING) rmq__orderly_dispatch(q);
    } else if (b->status == RMQ_CONSUME_SKIPPED) {
        q->consuming = 0;
        rmq_log_info("pop",
                     "%s: %d message(s) not consumed: their invisible time passed before "
                     "a consume thread took them (the broker delivers them again)",
                     q->name, q->pq.count);
        ord_hand_back(c, q, -1);
        rmq__pop_now(q);
    } else if (b->status == RMQ_CONSUME_SUCCESS || b->status == RMQ_CONSUME_COMMIT) {
        q->consuming = 0;
        c->n_consumed += n;
        rmq__stats_consumed(q, n, 0);
        for (int i = 0; i < n; i++) {
            ack_one(c, q, cb->pop_ck[i]);
            ord_forget(q, cb->msgs[i]);
        }
        /* A revoked entry hands the rest back at once, for the queue's next owner. */
        if (q->pq.state == RMQ_PQ_DROPPED) ord_hand_back(c, q, 0);
        if (q->pq.count > 0)
            rmq__orderly_dispatch(q);
        else
            rmq__pop_now(q);
    } else {
        /* SUSPEND_CURRENT_QUEUE_A_MOMENT (RECONSUME_LATER, DLQ and errors count as suspend):
         * the messages come back, in order, after the suspend time, to this consumer or
         * another (their count raised by the broker); one that reached max_reconsume_times
         * (or all, for rmq.DLQ) goes to the DLQ and is acked (checkReconsumeTimes). */
        rmq__orderly_fail(c, cb, 0, "pop", ord_fail_settle);
        return; /* q->consuming until settled */
    }
    free_cks(cb);
    rmq__cbatch_free(cb);
}

void rmq__pop_result(rmq_consumer_t *c, rmq_cbatch_t *cb)
{
    if (cb->b.orderly) {
        ord_result(c, cb);
        return;
    }
    rmq_batch_t *b = &cb->b;
    rmq_qent_t *q = cb->q;
    int n = b->n, ack = 0, ran = b->status != RMQ_CONSUME_NOT_RUN &&
                                 b->status != RMQ_CONSUME_SKIPPED;
    if (ran) {
        if (b->status == RMQ_CONSUME_SUCCESS || b->status == RMQ_CONSUME_COMMIT) {
            ack = b->ack_count;
        } else if (b->status == RMQ_CONSUME_DLQ) {
            /* POP has no send-back to the DLQ: those after ack_index come again later. */
            ack = b->ack_count;
            rmq_log_warn("pop", "%s: rmq.DLQ is not supported for POP consumption; the "
                         "messages not acked are consumed again later", q->name);
        }
        if (ack < 0) ack = 0;
        if (ack > n) ack = n;
        c->n_consumed += ack;
        c->n_failed += n - ack;
        rmq__stats_consumed(q, ack, n - ack);
        for (int i = 0; i < n; i++) {
            if (i < ack)
                ack_one(c, q, cb->pop_ck[i]);
            else
                consume_later(c, q, cb->msgs[i], cb->pop_ck[i], b->delay_level);
        }
    }
    if (b->status == RMQ_CONSUME_SKIPPED)
        rmq_log_info("pop", "%s: %d message(s) not consumed: their invisible time passed before "
                     "a consume thread took them (the broker delivers them again)", q->name, n);
    q->pop_waiting -= n;
    if (q->pop_waiting < 0) q->pop_waiting = 0;
    for (int i = 0; i < n; i++) rmq__msg_release(cb->msgs[i]);
    for (int i = 0; i < cb->pop_n; i++) free(cb->pop_ck[i]);
    free(cb->pop_ck);
    cb->pop_ck = NULL;
    cb->pop_n = 0;
    /* The flow control may have parked the pops of this entry. */
    rmq__cbatch_free(cb);
}
