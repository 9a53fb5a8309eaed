/*
 * pull.c -- one pull loop per owned queue (DefaultMQPushConsumerImpl.pullMessage,
 * PullAPIWrapper, PROTOCOL.md 5): flow control, PULL_MESSAGE with long polling, result handling
 * (FOUND / NO_NEW_MSG / NO_MATCHED_MSG / OFFSET_ILLEGAL), client-side tag filter, retries after
 * pull_time_delay_mills_when_exception. Messages that cannot be decoded go to undecodable.c. A
 * queue whose offset is illegal is dropped through the consumer's hook_drop_queue (the
 * rebalance's, which starts the pulls).
 *
 * Each queue has exactly one pull in flight, or one armed timer, or neither (dropped).
 * Ownership: an in-flight pull and an armed timer each hold one reference on the queue.
 * Threads: loop thread only.
 */
#include "consumer_int.h"

#include "protocol/acl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define MiB (1024 * 1024)
#define RMQ_PULL_SUSPEND_DELAY_MS 1000 /* PULL_TIME_DELAY_MILLS_WHEN_SUSPEND */

static void on_timer(uv_timer_t *t)
{
    rmq_qent_t *q = t->data;
    q->timer_armed = 0;
    rmq__pull_now(q);
    rmq__qent_release(q);
}

void rmq__pull_later(rmq_qent_t *q, int64_t delay_ms)
{
    if (q->pq.state == RMQ_PQ_DROPPED || q->timer_armed) return;
    if (delay_ms <= 0) {
        rmq__pull_now(q);
        return;
    }
    q->timer_armed = 1;
    rmq__qent_keep(q);
    uv_timer_start(&q->timer, on_timer, (uint64_t)delay_ms, 0);
}

static void on_pull_resp(void *ud, int err, rmq_cmd_t *resp, const char *errmsg);

static void exception_later(rmq_qent_t *q)
{
    rmq__pull_later(q, q->c->conf->pull_time_delay_mills_when_exception);
}

void rmq__pull_now(rmq_qent_t *q)
{
    rmq_consumer_t *c = q->c;
    const rmq_conf_t *cf = c->conf;
    if (q->pop) { /* a POP assignment (flow.c resumes a parked one here) */
        rmq__pop_now(q);
        return;
    }
    if (q->pq.state != RMQ_PQ_ACTIVE || q->pull_inflight) return;
    q->last_pull_ms = rmq__mono_ms();
    q->pq.last_pull_ms = q->last_pull_ms;
    if (c->state != RMQ_CLIENT_RUNNING) {
        if (c->state == RMQ_CLIENT_STARTING) exception_later(q);
        return; /* draining: pulling has stopped */
    }
    if (c->paused) { /* suspend(), e.g. during RESET_CONSUMER_CLIENT_OFFSET */
        rmq__pull_later(q, RMQ_PULL_SUSPEND_DELAY_MS);
        return;
    }
    if (rmq__flow_gate(q)) return; /* rmq.pause(): parked until the pause ends */
    if (q->pq.count > c->thr_queue) {
        rmq_dbg(RMQ_DBG_PULL, "pull", "%s: flow control, %d cached > %d", q->name, q->pq.count,
                c->thr_queue);
        rmq__pull_later(q, RMQ_FLOW_CONTROL_DELAY_MS);
        return;
    }
    /* Java compares msgSize (held bodies); one held message keeps its whole pull response
     * in memory here, so the size threshold counts what the held messages pin. */
    if (q->pq.mem / MiB > c->thr_size_queue) {
        rmq_dbg(RMQ_DBG_PULL, "pull", "%s: flow control, %" PRId64 " MiB held (%" PRId64
                " MiB of bodies)", q->name, q->pq.mem / MiB, q->pq.bytes / MiB);
        rmq__pull_later(q, RMQ_FLOW_CONTROL_DELAY_MS);
        return;
    }
    if (c->orderly) {
        if (cf->message_model == RMQ_MODEL_CLUSTERING && !q->locked) {
            rmq_dbg(RMQ_DBG_PULL, "pull", "%s: not locked yet", q->name);
            exception_later(q);
            return;
        }
    } else if (rmq__pq_max_span(&q->pq) > cf->consume_concurrently_max_span) {
        rmq_dbg(RMQ_DBG_PULL, "pull", "%s: flow control, span %" PRId64, q->name,
                rmq__pq_max_span(&q->pq));
        rmq__pull_later(q, RMQ_FLOW_CONTROL_DELAY_MS);
        return;
    }
    rmq_csub_t *s = rmq__c_sub(c, q->mq.topic);
    if (!s) {
        exception_later(q);
        return;
    }
    int slave = 0;
    const char *addr = rmq__c_sub_addr(c, q->mq.broker_name, q->suggest_broker_id, &slave);
    if (!addr) {
        rmq_log_warn("pull", "%s: the broker[%s] not exist", q->name, q->mq.broker_name);
        rmq__c_refresh_routes(c);
        exception_later(q);
        return;
    }
    int max_msgs = rmq__flow_take(q, cf->pull_batch_size); /* consume_tps_limit */
    if (max_msgs == 0) return; /* parked until the bucket holds enough */
    int sys_flag = 0x2; /* SUSPEND */
    int64_t commit = 0;
    if (q->offset > 0 && !slave && cf->message_model == RMQ_MODEL_CLUSTERING) {
        sys_flag |= 0x1; /* COMMIT_OFFSET */
        commit = q->offset;
    }
    if (cf->post_subscription_when_pull) sys_flag |= 0x4;
    rmq_cmd_t cmd;
    rmq__cmd_init(&cmd, RMQ_REQ_PULL_MESSAGE, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext(&cmd, "consumerGroup", c->group);
    rmq__cmd_set_ext(&cmd, "topic", q->mq.topic);
    rmq__cmd_set_ext_i64(&cmd, "queueId", q->mq.queue_id);
    rmq__cmd_set_ext_i64(&cmd, "queueOffset", q->next_offset);
    rmq__cmd_set_ext_i64(&cmd, "maxMsgNums", max_msgs);
    rmq__cmd_set_ext_i64(&cmd, "sysFlag", sys_flag);
    rmq__cmd_set_ext_i64(&cmd, "commitOffset", commit);
    rmq__cmd_set_ext_i64(&cmd, "suspendTimeoutMillis", RMQ_PULL_SUSPEND_MS);
    if (sys_flag & 0x4) rmq__cmd_set_ext(&cmd, "subscription", s->sd->sub_string);
    rmq__cmd_set_ext_i64(&cmd, "subVersion", s->sd->sub_version);
    rmq__cmd_set_ext(&cmd, "expressionType", s->sd->expression_type);
    rmq__qent_keep(q);
    q->pull_inflight = 1;
    q->pull_sent_ns = (int64_t)uv_hrtime();
    int rc = rmq__remoting_request(c->rt, addr, &cmd, RMQ_PULL_TIMEOUT_MS, on_pull_resp, q);
    rmq__cmd_free(&cmd);
    rmq_dbg(RMQ_DBG_PULL, "pull", "%s: PULL offset=%" PRId64 " sysFlag=%d commit=%" PRId64
            " -> %s", q->name, q->next_offset, sys_flag, commit, addr);
    if (rc) {
        q->pull_inflight = 0;
        rmq__flow_refund(q);
        rmq_log_warn("pull", "%s: cannot send PULL_MESSAGE to %s: %s", q->name, addr,
                     rmq_err_str(rc));
        exception_later(q);
        rmq__qent_release(q);
    }
}

/* correctTagsOffset: with nothing cached, the offset follows the pull position. */
static void correct_tags_offset(rmq_qent_t *q)
{
    if (q->pq.count == 0) rmq__offset_update(q, q->next_offset, 1);
}

static void handle_found(rmq_qent_t *q, rmq_cmd_t *resp, int64_t min_off, int64_t max_off)
{
    rmq_consumer_t *c = q->c;
    char err[256] = "";
    rmq_msgset_t *set = NULL;
    int64_t pulled = q->next_offset;
    /* Decode what can be decoded: a message that cannot be goes to the DLQ (undecodable.c)
     * instead of stopping the queue on it (Java moves on to nextBeginOffset). */
    int rc = rmq__msgset_decode_ex(resp->frame, resp->body, resp->body_len, q->mq.broker_name,
                                   min_off, max_off, RMQ_DECODE_KEEP_BAD, &set, err, sizeof(err));
    if (!set) {
        rmq_log_error("pull", "%s: cannot decode pull body: %s", q->name, rmq_err_str(rc));
        exception_later(q);
        return;
    }
    rmq_csub_t *s = rmq__c_sub(c, q->mq.topic);
    rmq_msg_t *stack[64];
    rmq_msg_t **keep = set->n <= 64 ? stack : rmq__xmalloc(sizeof(*keep) * (size_t)set->n);
    int nk = 0;
    for (int i = 0; i < set->n; i++) {
        rmq_msg_t *m = &set->msgs[i];
        if (s && !rmq__c_tag_match(s, m)) {
            rmq__msg_release(m);
            continue;
        }
        keep[nk++] = m;
    }
    c->n_pulled += nk;
    rmq__flow_charge(q, nk);
    rmq__stats_pulled(q, set, nk);
    if (nk > 0 && keep[0]->queue_offset < q->next_offset)
        rmq_log_warn("pull", "[BUG] %s: first message offset %" PRId64 " < pulled offset %"
                     PRId64, q->name, keep[0]->queue_offset, q->next_offset);
    int64_t next = 0;
    if (rmq__cmd_ext_i64(resp, "nextBeginOffset", &next) != 0) next = q->next_offset;
    if (set->lost) {
        /* Past a TOTALSIZE that cannot be used nothing can be split into messages: pull again
         * right after the last message that could (those bytes come anew). With none at all,
         * only the pulled offset is skipped, where Java skips the whole response. */
        int64_t last = -1, after;
        if (set->n > 0) last = set->msgs[set->n - 1].queue_offset;
        if (set->n_bad > 0 && set->bad[set->n_bad - 1].queue_offset > last)
            last = set->bad[set->n_bad - 1].queue_offset;
        /* A broker's numbers are taken as they come (a queue offset of 2^63 - 1 too), but
         * one past them must not overflow. */
        if (last >= pulled) {
            after = rmq__offset_after(last);
            rmq_log_error("pull", "%s: pull body unreadable from byte %zu (%s); pulling again "
                          "from offset %" PRId64, q->name, set->lost_at, err, after);
        } else {
            after = rmq__offset_after(pulled);
            rmq_log_error("pull", "%s: pull body unreadable from byte %zu (%s): offset %" PRId64
                          " skipped", q->name, set->lost_at, err, pulled);
        }
        if (after < next) next = after;
    }
    q->next_offset = next;
    /* Undecodable messages are held first, so that an orderly dispatch stops before them. */
    for (int i = 0; i < set->n_bad; i++) {
        rmq_msg_t *m = &set->bad[i];
        if (m->queue_offset < pulled || m->queue_offset >= next) {
            rmq_log_error("pull", "%s: undecodable message with queue offset %" PRId64 " outside "
                          "the pulled range [%" PRId64 ", %" PRId64 "): skipped (%s)", q->name,
                          m->queue_offset, pulled, next, rmq__msg_undecodable_why(m));
            rmq__msg_release(m);
            continue;
        }
        rmq__undecodable_submit(c, q, m);
    }
    if (nk > 0) rmq__consume_submit(c, q, keep, nk);
    rmq__msgset_release(set);
    if (keep != stack) free(keep);
    if (nk == 0) {
        rmq__pull_now(q);
        return;
    }
    rmq__pull_later(q, c->conf->pull_interval);
}

/* OFFSET_ILLEGAL: after 10 s the corrected offset is written and persisted, and the queue
 * leaves the table (the next rebalance takes it again from the broker's offset). The delay runs
 * on the queue's dispatch timer (idle for a dropped queue), so dropping the queue cancels it. */
static void on_illegal(uv_timer_t *t)
{
    rmq_qent_t *q = t->data;
    rmq_consumer_t *c = q->c;
    q->dtimer_armed = 0;
    if (c->state == RMQ_CLIENT_RUNNING && q->in_table) {
        q->offset = q->next_offset;
        rmq__offset_persist(c, q);
        rmq_log_warn("pull", "%s: offset illegal, corrected to %" PRId64 ", queue dropped until"
                     " the next rebalance", q->name, q->next_offset);
        c->hook_drop_queue(c, q, 1); /* rmq__rb_drop_queue */
    }
    rmq__qent_release(q);
}

static void handle_illegal(rmq_qent_t *q)
{
    rmq_log_warn("pull", "%s: PULL_OFFSET_MOVED, next offset %" PRId64, q->name, q->next_offset);
    rmq__pq_set_state(&q->pq, RMQ_PQ_DROPPED);
    if (q->dtimer_armed) {
        uv_timer_stop(&q->dtimer);
        rmq__qent_release(q);
    }
    q->dtimer_armed = 1;
    rmq__qent_keep(q);
    uv_timer_start(&q->dtimer, on_illegal, RMQ_OFFSET_ILLEGAL_DELAY_MS, 0);
}

static void on_pull_resp(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    rmq_qent_t *q = ud;
    rmq_consumer_t *c = q->c;
    q->pull_inflight = 0;
    rmq__flow_refund(q); /* handle_found charges what it keeps */
    if (q->pq.state != RMQ_PQ_ACTIVE || c->state != RMQ_CLIENT_RUNNING) {
        rmq__qent_release(q);
        return;
    }
    rmq__stats_pull_done(q, err, err ? 0 : resp->code);
    if (err) {
        rmq_log_warn("pull", "%s: pull failed: %s", q->name, errmsg);
        exception_later(q);
        rmq__qent_release(q);
        return;
    }
    int64_t next = q->next_offset, min_off = 0, max_off = 0, sbid = 0;
    rmq__cmd_ext_i64(resp, "minOffset", &min_off);
    rmq__cmd_ext_i64(resp, "maxOffset", &max_off);
    if (rmq__cmd_ext_i64(resp, "suggestWhichBrokerId", &sbid) == 0) q->suggest_broker_id = sbid;
    switch (resp->code) {
    case RMQ_RESP_SUCCESS:
        q->broker_max = max_off;
        handle_found(q, resp, min_off, max_off);
        break;
    case RMQ_RESP_PULL_NOT_FOUND:
    case RMQ_RESP_PULL_RETRY_IMMEDIATELY:
        q->broker_max = max_off;
        if (rmq__cmd_ext_i64(resp, "nextBeginOffset", &next) == 0) q->next_offset = next;
        rmq_dbg(RMQ_DBG_PULL, "pull", "%s: %s next=%" PRId64, q->name,
                resp->code == RMQ_RESP_PULL_NOT_FOUND ? "NO_NEW_MSG" : "NO_MATCHED_MSG",
                q->next_offset);
        correct_tags_offset(q);
        rmq__pull_now(q);
        break;
    case RMQ_RESP_PULL_OFFSET_MOVED:
        if (rmq__cmd_ext_i64(resp, "nextBeginOffset", &next) == 0) q->next_offset = next;
        handle_illegal(q);
        break;
    case RMQ_RESP_SUBSCRIPTION_NOT_LATEST:
    case RMQ_RESP_SUBSCRIPTION_NOT_EXIST: {
        /* Java (DefaultMQPushConsumerImpl.pullMessage, onException) only retries the pull
         * after pullTimeDelayMillsWhenException; the heartbeat timer registers the
         * subscription again. A heartbeat round per failing pull (one per owned queue per
         * retry) flipped the broker's subscription table in a group whose members disagree:
         * at most one extra round per heartbeat_broker_interval lets a broker that lost the
         * subscription (a restart) learn it sooner. */
        int64_t now = rmq__mono_ms();
        int hb = c->sub_hb_ms == 0 || now - c->sub_hb_ms >= c->conf->heartbeat_broker_interval;
        rmq_log_warn("pull", "%s: %s (%s); retry in %" PRId64 " ms%s", q->name,
                     rmq_err_name(resp->code), resp->remark ? resp->remark : "",
                     c->conf->pull_time_delay_mills_when_exception, hb ? ", heartbeat now" : "");
        if (hb) {
            c->sub_hb_ms = now;
            rmq__c_heartbeat_all(c);
        }
        exception_later(q);
        break;
    }
    default:
        /* An ACL refusal was reported already (client.c on_acl_refused, once a minute). */
        if (!rmq__acl_refused(resp))
            rmq_log_warn("pull", "%s: pull answered %s: %s", q->name, rmq_err_name(resp->code),
                         resp->remark ? resp->remark : "");
        exception_later(q);
        break;
    }
    rmq__qent_release(q);
}
