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
 * Unlike Java, a batch whose assignment was revoked (a mode switch, a rebalance) still runs
 * and is acked, and so are the messages of the long poll that was in flight: they were popped
 * for this client and would otherwise wait out their invisible time. A batch a stop never ran,
 * or one whose invisible time passed while it waited for a thread (rmq__consume_begin,
 * isPopTimeout), is not acked: the broker delivers it again.
 *
 * Ownership: a pop in flight and an armed timer each hold one reference on the entry; a POP
 * batch owns its messages and their extraInfo strings (rmq_cbatch_t.pop_ck) until its result
 * was applied; an ack or change in flight holds one reference on the entry.
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
    rmq__cmd_set_ext(&cmd, "order", "false");
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
    int rc = rmq__msgset_decode_ex(resp->frame, resp->body, resp->body_len, q->mq.broker_name, 0,
                                   0, RMQ_DECODE_KEEP_BAD, &set, err, sizeof(err));
    if (!set) {
        rmq_log_error("pop", "%s: cannot decode the POP_MESSAGE body: %s (%s); its messages "
                      "come again after their invisible time", q->name, rmq_err_str(rc), err);
        pop_later(q, c->conf->pull_time_delay_mills_when_exception);
        return;
    }
    for (int i = 0; i < set->n_bad; i++) {
        rmq_log_error("pop", "%s: undecodable popped message at queue offset %" PRId64
                      " skipped (%s)", q->name, set->bad[i].queue_offset,
                      rmq__msg_undecodable_why(&set->bad[i]));
        rmq__msg_release(&set->bad[i]);
    }
    int n = set->n;
    rmq_msg_t **keep = rmq__xcalloc((size_t)n + 1, sizeof(*keep));
    char **cks = rmq__xcalloc((size_t)n + 1, sizeof(*cks));
    int nk = 0;
    rmq_csub_t *s = rmq__c_sub(c, q->mq.topic);
    for (int i = 0; i < n; i++) {
        rmq_msg_t *m = &set->msgs[i];
        char st[512];
        size_t tl = m->store_topic_len ? m->store_topic_len : m->topic_len;
        const char *tp = m->store_topic_len ? m->store_topic : m->topic;
        if (tl >= sizeof(st)) tl = sizeof(st) - 1;
        memcpy(st, tp, tl);
        st[tl] = 0;
        char mark = retry_mark(st, tl);
        /* processPopResponse: the checkpoint's start offset and the message's offset from the
         * answer's offset infos (the index among this answer's messages of the same retry
         * mark and queue); without them, the first offset of each topic and queue. */
        int64_t ck_off = m->queue_offset, msg_off = m->queue_offset;
        int index = 0, first = -1;
        for (int k = 0; k < n; k++) {
            rmq_msg_t *o = &set->msgs[k];
            size_t ol = o->store_topic_len ? o->store_topic_len : o->topic_len;
            const char *op = o->store_topic_len ? o->store_topic : o->topic;
            if (o->queue_id != m->queue_id || retry_mark(op, ol) != mark) continue;
            if (first < 0) first = k;
            if (o->queue_offset < m->queue_offset) index++;
        }
        size_t vl = 0;
        const char *v = info_find(start_info, mark, m->queue_id, &vl);
        if (v) {
            ck_off = strtoll(v, NULL, 10);
            const char *mv = info_find(msg_info, mark, m->queue_id, &vl);
            if (mv) msg_off = list_at(mv, vl, index, m->queue_offset);
            if (msg_off != m->queue_offset)
                rmq_log_warn("pop", "%s: queue offset %" PRId64 " of a message is strange, not "
                             "equal to the stored %" PRId64, q->name, msg_off, m->queue_offset);
        } else if (first >= 0) {
            ck_off = set->msgs[first].queue_offset;
        }
        char ck[CK_MAX];
        rmq__pop_extra_info(ck, sizeof(ck), ck_off, pop_time, invisible, (int)revive, st,
                            q->mq.broker_name, m->queue_id, msg_off);
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
    if (nk > 0) {
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
    }
    rmq__msgset_release(set);
    free(keep);
    free(cks);
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

void rmq__pop_result(rmq_consumer_t *c, rmq_cbatch_t *cb)
{
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
