/*
 * consume_orderly.c -- orderly consumption (ConsumeMessageOrderlyService, PROTOCOL.md 6.14):
 * broker queue locks (LOCK_BATCH_MQ at assignment and for every owned queue every 20 s,
 * UNLOCK_BATCH_MQ when a queue leaves), one batch per queue in the pool at a time, taken from the
 * front of the process queue, committed in offset order; SUSPEND re-runs the same messages after
 * suspend_current_queue_time_millis, and a message that reached max_reconsume_times goes to
 * %DLQ%<group> through the producer (checkReconsumeTimes). The entry of a queue popped in
 * order (orderly POP, pop.c) is dispatched the same way, without a broker lock (the broker's
 * order is one), and its results are pop.c's (c->hook_pop_result).
 *
 * Ownership: a batch of an orderly queue is a view of the first messages the process queue holds;
 * they stay owned by the process queue until the batch commits them (then they are released),
 * so a suspended batch simply ends and the next dispatch takes the same messages again. Lock
 * requests and DLQ sends hold a queue reference. A failed batch's DLQ step (rmq__orderly_fail,
 * PULL's and POP's) owns its rmq_ord_fail_t and each send its dlq_one_t.
 * Threads: loop thread only.
 */
#include "consumer_int.h"

#include "protocol/fjson.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- locks ------------------------------------------------------------------------------------ */

static void append_mq(rmq_buf_t *b, const rmq_mq_t *mq)
{
    rmq__buf_append(b, "{\"brokerName\":", 14);
    rmq__buf_append_json_str(b, mq->broker_name, strlen(mq->broker_name));
    rmq__buf_appendf(b, ",\"queueId\":%d,\"topic\":", mq->queue_id);
    rmq__buf_append_json_str(b, mq->topic, strlen(mq->topic));
    rmq__buf_append(b, "}", 1);
}

/* LockBatchRequestBody / UnlockBatchRequestBody (fastjson key order). */
static void lock_body(rmq_consumer_t *c, rmq_qent_t **qs, int n, const rmq_mq_t *one,
                      rmq_buf_t *b)
{
    rmq__buf_append(b, "{\"clientId\":", 12);
    rmq__buf_append_json_str(b, c->client_id, strlen(c->client_id));
    rmq__buf_append(b, ",\"consumerGroup\":", 17);
    rmq__buf_append_json_str(b, c->group, strlen(c->group));
    rmq__buf_append(b, ",\"mqSet\":[", 10);
    if (one) append_mq(b, one);
    for (int i = 0; i < n; i++) {
        if (i) rmq__buf_append(b, ",", 1);
        append_mq(b, &qs[i]->mq);
    }
    rmq__buf_append(b, "]}", 2);
}

typedef struct lock_req {
    rmq_consumer_t *c;
    rmq_qent_t **qs; /* one reference each */
    int n;
    rmq_lock_cb cb;  /* single-queue lock: told the outcome */
} lock_req_t;

static int in_lock_ok(const rmq_fj_t *set, const rmq_mq_t *mq)
{
    for (const rmq_fj_t *e = set ? set->child : NULL; e; e = e->next) {
        const char *t = rmq__fj_get_str(e, "topic"), *b = rmq__fj_get_str(e, "brokerName");
        int32_t id = -1;
        rmq__fj_get_i32(e, "queueId", &id);
        if (t && b && !strcmp(t, mq->topic) && !strcmp(b, mq->broker_name) && id == mq->queue_id)
            return 1;
    }
    return 0;
}

static void on_lock(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    lock_req_t *r = ud;
    rmq_fjdoc_t *d = NULL;
    const rmq_fj_t *set = NULL;
    if (err) {
        rmq_log_warn("orderly", "LOCK_BATCH_MQ failed: %s", errmsg);
    } else if (resp->code != RMQ_RESP_SUCCESS || !resp->body) {
        rmq_log_warn("orderly", "LOCK_BATCH_MQ answered %s: %s", rmq_err_name(resp->code),
                     resp->remark ? resp->remark : "");
    } else {
        char perr[128];
        d = rmq__fj_parse(resp->body, resp->body_len, perr, sizeof(perr));
        if (!d) rmq_log_warn("orderly", "bad LOCK_BATCH_MQ answer: %s", perr);
        set = d ? rmq__fj_get(rmq__fj_root(d), "lockOKMQSet") : NULL;
    }
    int64_t now = rmq__mono_ms();
    for (int i = 0; i < r->n; i++) {
        rmq_qent_t *q = r->qs[i];
        int ok = set && in_lock_ok(set, &q->mq);
        if (!r->cb && q->pq.state == RMQ_PQ_DROPPED) {
            /* The periodic round (RebalanceImpl.lockAll) asked for a queue that left while the
             * request was on its way: Java updates only the ProcessQueue still in the table.
             * Its lock was given back when it left (or not at all, when it had been lost), so
             * a grant now is a new one that nobody relies on: give it back, as
             * RebalancePushImpl.removeUnnecessaryMessageQueue does, once the entry's batch is
             * over (dropped_batch_over) and unless a live entry of the queue holds it. */
            if (ok && q->consuming) q->unlock_pending = 1;
            else if (ok) rmq__orderly_lock_orphaned(q);
            rmq__qent_release(q);
            continue;
        }
        if (ok) {
            if (!q->locked) rmq_dbg(RMQ_DBG_REBALANCE, "orderly", "%s: locked", q->name);
            /* Atomic: a consume thread reads them before it runs a batch (rmq__consume_begin). */
            __atomic_store_n(&q->last_lock_ms, now, __ATOMIC_RELAXED);
            __atomic_store_n(&q->locked, 1, __ATOMIC_RELEASE);
        } else if (!err) {
            if (q->locked) rmq_log_warn("orderly", "%s: lock lost", q->name);
            __atomic_store_n(&q->locked, 0, __ATOMIC_RELEASE);
        }
        if (r->cb) r->cb(q, ok);
        rmq__qent_release(q);
    }
    if (d) rmq__fj_free(d);
    free(r->qs);
    free(r);
}

/* One LOCK_BATCH_MQ for qs (all of one broker). Takes nothing; keeps references itself. */
static void lock_send(rmq_consumer_t *c, rmq_qent_t **qs, int n, rmq_lock_cb cb)
{
    const char *addr = rmq__c_master_addr(c, qs[0]->mq.broker_name);
    if (!addr) {
        for (int i = 0; i < n; i++)
            if (cb) cb(qs[i], 0);
        return;
    }
    rmq_buf_t body;
    rmq__buf_init(&body);
    lock_body(c, qs, n, NULL, &body);
    rmq_cmd_t cmd;
    rmq__cmd_init(&cmd, RMQ_REQ_LOCK_BATCH_MQ, RMQ_SERIALIZE_JSON);
    cmd.body = body.data;
    cmd.body_len = body.len;
    lock_req_t *r = rmq__xcalloc(1, sizeof(*r));
    r->c = c;
    r->n = n;
    r->cb = cb;
    r->qs = rmq__xmalloc(sizeof(*r->qs) * (size_t)n);
    for (int i = 0; i < n; i++) r->qs[i] = rmq__qent_keep(qs[i]);
    int rc = rmq__remoting_request(c->rt, addr, &cmd, RMQ_LOCK_TIMEOUT_MS, on_lock, r);
    cmd.body = NULL;
    rmq__cmd_free(&cmd);
    rmq__buf_free(&body);
    if (rc) {
        for (int i = 0; i < n; i++) {
            if (cb) cb(qs[i], 0);
            rmq__qent_release(r->qs[i]);
        }
        free(r->qs);
        free(r);
    }
}

void rmq__orderly_lock(rmq_qent_t *q, rmq_lock_cb cb) { lock_send(q->c, &q, 1, cb); }

void rmq__orderly_lock_all_timer(uv_timer_t *t)
{
    rmq_consumer_t *c = t->data;
    if (c->state != RMQ_CLIENT_RUNNING || c->n_queues == 0) return;
    rmq_qent_t **qs = rmq__xmalloc(sizeof(*qs) * (size_t)c->n_queues);
    char *done = rmq__xcalloc((size_t)c->n_queues, 1);
    int nq = 0;
    for (rmq_qent_t *q = c->queues; q; q = q->next)
        if (!q->pop) qs[nq++] = q; /* a POP entry's order is the broker's (pop.c) */
    rmq_qent_t **group = rmq__xmalloc(sizeof(*group) * ((size_t)nq + 1));
    for (int i = 0; i < nq; i++) {
        if (done[i] || qs[i]->pq.state == RMQ_PQ_STARTING) continue;
        int n = 0;
        for (int j = i; j < nq; j++)
            if (!done[j] && qs[j]->pq.state != RMQ_PQ_STARTING &&
                !strcmp(qs[j]->mq.broker_name, qs[i]->mq.broker_name)) {
                done[j] = 1;
                group[n++] = qs[j];
            }
        lock_send(c, group, n, NULL);
    }
    free(group);
    free(done);
    free(qs);
}

void rmq__orderly_unlock(rmq_consumer_t *c, const rmq_mq_t *mq)
{
    const char *addr = rmq__c_master_addr(c, mq->broker_name);
    if (!addr) return;
    rmq_buf_t body;
    rmq__buf_init(&body);
    lock_body(c, NULL, 0, mq, &body);
    rmq_cmd_t cmd;
    rmq__cmd_init(&cmd, RMQ_REQ_UNLOCK_BATCH_MQ, RMQ_SERIALIZE_JSON);
    cmd.body = body.data;
    cmd.body_len = body.len;
    rmq__remoting_oneway(c->rt, addr, &cmd);
    cmd.body = NULL;
    rmq__cmd_free(&cmd);
    rmq__buf_free(&body);
    rmq_dbg(RMQ_DBG_REBALANCE, "orderly", "unlock %s@%s#%d", mq->topic, mq->broker_name,
            mq->queue_id);
}

/* ---- one message queue, several entries ------------------------------------------------------ */

/*
 * A queue revoked while its batch runs leaves the table at once, but its entry lives on until
 * that batch returns; a rebalance may meanwhile give the queue back, as a new entry. Java keeps
 * the one ProcessQueue (and its lock) instead, and serialises ConsumeRequests on a per-queue lock
 * (messageQueueLock). So here: the old entry's deferred unlock is skipped while a live entry
 * holds the queue, and the live entry runs no batch while the old one's is still in the pool.
 */

/* The entry of mq in the table that is not dropped, or NULL. */
static rmq_qent_t *live_entry(rmq_consumer_t *c, const rmq_mq_t *mq)
{
    for (rmq_qent_t *o = c->queues; o; o = o->next)
        if (o->pq.state != RMQ_PQ_DROPPED && !rmq__mq_cmp(&o->mq, mq)) return o;
    return NULL;
}

/* A batch of an earlier (dropped) entry of q's message queue is queued or running. */
static int older_batch_in_pool(rmq_consumer_t *c, const rmq_qent_t *q)
{
    for (rmq_cbatch_t *cb = c->inflight; cb; cb = cb->inext)
        if (cb->b.orderly && cb->q != q && cb->q->pq.state == RMQ_PQ_DROPPED &&
            !rmq__mq_cmp(&cb->q->mq, &q->mq))
            return 1;
    return 0;
}

/* A dropped entry's batch is over: give the broker lock back unless a live entry relies on it,
 * and let that entry go on. */
static void dropped_batch_over(rmq_consumer_t *c, rmq_qent_t *q)
{
    rmq_qent_t *live = live_entry(c, &q->mq);
    if (q->unlock_pending && !live) rmq__orderly_unlock(c, &q->mq);
    else if (q->unlock_pending)
        rmq_dbg(RMQ_DBG_REBALANCE, "orderly", "%s: assigned again meanwhile, lock kept", q->name);
    q->unlock_pending = 0;
    if (live) rmq__orderly_dispatch(live);
}

void rmq__orderly_lock_orphaned(rmq_qent_t *q)
{
    rmq_consumer_t *c = q->c;
    if (c->conf->message_model != RMQ_MODEL_CLUSTERING || !c->rt || live_entry(c, &q->mq)) return;
    rmq_dbg(RMQ_DBG_REBALANCE, "orderly", "%s: locked after it left; unlocking", q->name);
    rmq__orderly_unlock(c, &q->mq);
}

/* ---- dispatch -------------------------------------------------------------------------------- */

/* An orderly POP batch carries the extraInfo of each of its messages (copies of pop.c's) and
 * the popped messages' deadline, as a concurrent POP batch does. */
static void pop_attach(rmq_qent_t *q, rmq_cbatch_t *cb)
{
    int n = cb->b.n;
    cb->pop_ck = rmq__xcalloc((size_t)n + 1, sizeof(char *));
    cb->pop_n = n;
    cb->pop_deadline_ms = q->pop_ord_deadline_ms;
    for (int i = 0; i < n; i++) {
        const char *ck = "";
        for (int k = 0; k < q->pop_ord_n; k++)
            if (q->pop_ord[k].off == cb->msgs[i]->queue_offset) ck = q->pop_ord[k].ck;
        cb->pop_ck[i] = rmq__xstrdup(ck);
    }
}

static void on_dtimer(uv_timer_t *t);

static void dispatch_later(rmq_qent_t *q, int64_t ms, int relock)
{
    if (q->dtimer_armed || q->pq.state == RMQ_PQ_DROPPED) return;
    q->dtimer_armed = 1;
    q->dtimer_relock = relock;
    rmq__qent_keep(q);
    uv_timer_start(&q->dtimer, on_dtimer, (uint64_t)(ms > 0 ? ms : 0), 0);
}

static void on_relock(rmq_qent_t *q, int ok)
{
    /* tryLockLaterAndReconsume: on success consume again in 10 ms, else in 3 s. */
    if (q->pq.state == RMQ_PQ_ACTIVE) dispatch_later(q, ok ? 10 : 3000, !ok);
    else if (ok) rmq__orderly_lock_orphaned(q); /* dropped while the request was on its way */
}

static void on_dtimer(uv_timer_t *t)
{
    rmq_qent_t *q = t->data;
    q->dtimer_armed = 0;
    if (q->dtimer_relock && q->pq.state == RMQ_PQ_ACTIVE && q->c->state == RMQ_CLIENT_RUNNING)
        rmq__orderly_lock(q, on_relock);
    else
        rmq__orderly_dispatch(q);
    rmq__qent_release(q);
}

void rmq__orderly_dispatch(rmq_qent_t *q)
{
    rmq_consumer_t *c = q->c;
    if (q->pq.state != RMQ_PQ_ACTIVE || q->consuming || q->dtimer_armed || q->pq.count == 0 ||
        c->state != RMQ_CLIENT_RUNNING || !c->pool)
        return;
    if (q->after_revoke) {
        /* Dispatched again when that batch returns (dropped_batch_over). */
        if (older_batch_in_pool(c, q)) return;
        q->after_revoke = 0;
    }
    /* An orderly POP entry needs no lock: the broker hands a queue's next messages to nobody
     * while the last ones are neither acked nor visible again (pop.c). */
    if (!q->pop && c->conf->message_model == RMQ_MODEL_CLUSTERING &&
        (!q->locked || rmq__mono_ms() - q->last_lock_ms > RMQ_LOCK_MAX_LIVE_MS)) {
        dispatch_later(q, 100, 1);
        return;
    }
    int bs = c->conf->consume_message_batch_max_size;
    if (bs < 1) bs = 1;
    rmq_msg_t *stack[64];
    rmq_msg_t **take = bs <= 64 ? stack : rmq__xmalloc(sizeof(*take) * (size_t)bs);
    int n = rmq__pq_peek(&q->pq, take, bs);
    /* An undecodable message on its way to the DLQ (undecodable.c) ends the batch; at the
     * front, the queue waits for it (order kept, the offset never passes it). */
    for (int i = 0; i < n; i++)
        if (rmq__msg_undecodable(take[i])) n = i;
    if (n == 0) {
        if (take != stack) free(take);
        return;
    }
    rmq_cbatch_t *cb = rmq__cbatch_new(q, take, n);
    if (take != stack) free(take);
    cb->b.orderly = 1;
    cb->need_lock = !q->pop && c->conf->message_model == RMQ_MODEL_CLUSTERING;
    if (q->pop) pop_attach(q, cb);
    q->consuming = 1;
    /* Any idle consume thread takes it, as Java submits each queue's ConsumeRequest to the one
     * shared pool; q->consuming keeps it to one batch per queue (Java's per-queue lock), and the
     * next batch is taken only once this one's result was applied: order holds. */
    rmq__cbatch_submit(c, cb, -1);
}

/* ---- results --------------------------------------------------------------------------------- */

/* commit(): the batch's messages leave the process queue; the offset is the last one + 1. */
static void commit(rmq_qent_t *q, rmq_msg_t **msgs, int n)
{
    if (n <= 0) return;
    int64_t last = msgs[n - 1]->queue_offset;
    rmq__pq_remove(&q->pq, msgs, n);
    if (q->pq.state != RMQ_PQ_DROPPED) rmq__offset_update(q, rmq__offset_after(last), 0);
    for (int i = 0; i < n; i++) rmq__msg_release(msgs[i]);
}

typedef struct dlq_one {
    rmq_ord_fail_t *x;
    int idx;
} dlq_one_t;

/* Every send answered: the mode's settle, then the context goes. */
static void fail_settled(rmq_ord_fail_t *x)
{
    x->settle(x);
    free(x->sent);
    free(x);
}

/* A message not stored in the DLQ stays on the queue; PULL raises its count here (the broker
 * never saw it fail), POP leaves that to the broker. */
static void fail_kept(rmq_ord_fail_t *x, rmq_msg_t *m)
{
    x->kept++;
    if (x->raise) m->reconsume_times = rmq__reconsume_plus(m->reconsume_times, 1);
}

static void on_dlq_sent(void *ud, int err, const rmq_send_result_t *res, const char *errmsg)
{
    dlq_one_t *o = ud;
    rmq_ord_fail_t *x = o->x;
    (void)res;
    rmq_msg_t *m = x->cb->msgs[o->idx];
    x->c->inflight_sendbacks--;
    if (err) {
        rmq_log_warn(x->sub, "%s: offset %" PRId64 " to the DLQ failed: %s; suspending",
                     x->cb->q->name, m->queue_offset, errmsg);
        fail_kept(x, m);
    } else {
        x->sent[o->idx] = 1;
    }
    free(o);
    if (--x->pending == 0) fail_settled(x);
}

static int send_dlq(rmq_consumer_t *c, const rmq_msg_t *m, rmq_send_cb cb, void *ud,
                    char *errstr, size_t errstr_size)
{
    if (!c->producer) {
        snprintf(errstr, errstr_size, "no producer to send it with");
        return RMQ_ERR_STATE;
    }
    char id[64];
    if (m->uniq_key_len > 0 && m->uniq_key_len < 57) {
        memcpy(id, m->uniq_key, m->uniq_key_len);
        id[m->uniq_key_len] = 0;
    } else {
        rmq_msg_offset_msg_id(m, id);
    }
    char *topic = rmq__c_wire_topic(c, m);
    /* RECONSUME_TIME >= max makes the broker store it in %DLQ%<group>. */
    int rt = m->reconsume_times > c->max_reconsume ? m->reconsume_times : c->max_reconsume;
    int rc = rmq__producer_send_retry(c->producer, c->group, topic, m->body, m->body_len, m->flag,
                                      m->props, m->props_len, id, rt - 1, c->max_reconsume, cb, ud,
                                      errstr, errstr_size);
    free(topic);
    return rc;
}

void rmq__orderly_fail(rmq_consumer_t *c, rmq_cbatch_t *cb, int raise, const char *sub,
                       void (*settle)(rmq_ord_fail_t *x))
{
    rmq_batch_t *b = &cb->b;
    rmq_qent_t *q = cb->q;
    int n = b->n;
    c->n_failed += n;
    rmq__stats_consumed(q, 0, n);
    int64_t susp = b->suspend_millis >= 0 ? b->suspend_millis
                                          : c->conf->suspend_current_queue_time_millis;
    if (susp < 10) susp = 10;
    if (susp > 30000) susp = 30000;
    rmq_ord_fail_t *x = rmq__xcalloc(1, sizeof(*x));
    x->c = c;
    x->cb = cb;
    x->suspend_ms = susp;
    x->sent = rmq__xcalloc((size_t)n + 1, 1);
    x->raise = raise;
    x->sub = sub;
    x->settle = settle;
    x->pending = 1;
    for (int i = 0; i < n; i++) {
        rmq_msg_t *m = cb->msgs[i];
        int to_dlq = b->status == RMQ_CONSUME_DLQ || m->reconsume_times >= c->max_reconsume;
        if (!to_dlq || !c->producer) {
            fail_kept(x, m);
            continue;
        }
        char err[256];
        dlq_one_t *o = rmq__xcalloc(1, sizeof(*o));
        o->x = x;
        o->idx = i;
        if (send_dlq(c, m, on_dlq_sent, o, err, sizeof(err))) {
            rmq_log_warn(sub, "%s: cannot send offset %" PRId64 " to the DLQ: %s", q->name,
                         m->queue_offset, err);
            free(o);
            fail_kept(x, m);
            continue;
        }
        x->pending++;
        c->inflight_sendbacks++; /* a graceful stop waits for it, as for send-backs */
    }
    if (--x->pending == 0) fail_settled(x);
}

/* PULL's settle: the messages stored in the DLQ are done (offset order is kept: the process
 * queue still holds whatever was kept, so the offset cannot pass it); the queue goes on after
 * the suspend time if any message was kept, else at once. */
static void settle(rmq_ord_fail_t *x)
{
    rmq_consumer_t *c = x->c;
    rmq_cbatch_t *cb = x->cb;
    rmq_qent_t *q = cb->q;
    for (int i = 0; i < cb->b.n; i++) {
        rmq_msg_t *m = cb->msgs[i];
        if (!x->sent[i]) continue;
        int64_t off = rmq__pq_remove(&q->pq, &m, 1);
        if (off >= 0 && q->pq.state != RMQ_PQ_DROPPED) rmq__offset_update(q, off, 1);
        rmq__msg_release(m);
        c->n_dlq++;
        rmq__stats_sent_back(q, 1);
    }
    q->consuming = 0;
    if (q->pq.state == RMQ_PQ_DROPPED) {
        dropped_batch_over(c, q);
    } else if (x->kept > 0) {
        dispatch_later(q, x->suspend_ms, 0);
    } else {
        rmq__orderly_dispatch(q);
    }
    rmq__cbatch_free(cb);
}

void rmq__orderly_result(rmq_consumer_t *c, rmq_cbatch_t *cb)
{
    rmq_batch_t *b = &cb->b;
    rmq_qent_t *q = cb->q;
    if (q->pop) {
        /* rmq__pop_result: acks, invisible times, the queue's next batch or its next pop. */
        int dropped = q->pq.state == RMQ_PQ_DROPPED;
        rmq__qent_keep(q);
        c->hook_pop_result(c, cb);
        if (dropped) dropped_batch_over(c, q);
        rmq__qent_release(q);
        return;
    }
    /* While the consumer drains (a graceful stop), results still apply: Java's
     * processConsumeResult commits what finished within awaitTerminationMillisWhenShutdown, and
     * persistAll then stores it. No new batch starts (rmq__orderly_dispatch needs RUNNING). */
    if (b->status == RMQ_CONSUME_NOT_RUN || q->pq.state == RMQ_PQ_DROPPED ||
        (c->state != RMQ_CLIENT_RUNNING && c->state != RMQ_CLIENT_DRAINING)) {
        /* Result discarded: no commit; the messages stay where they are. */
        q->consuming = 0;
        if (q->pq.state == RMQ_PQ_DROPPED) dropped_batch_over(c, q);
        rmq__cbatch_free(cb);
        return;
    }
    if (b->status == RMQ_CONSUME_SKIPPED) {
        /* Not run: the queue's lock was lost (or expired) while the batch waited for a thread
         * (ConsumeRequest.run: "the message queue not locked, so consume later"). Java's
         * tryLockLaterAndReconsume(mq, pq, 100): lock again in 100 ms, then consume. */
        rmq_log_warn("orderly", "%s: not locked when a consume thread took its batch; locking "
                     "again", q->name);
        q->consuming = 0;
        rmq__cbatch_free(cb);
        dispatch_later(q, 100, 1);
        return;
    }
    int n = b->n;
    if (b->status == RMQ_CONSUME_SUCCESS || b->status == RMQ_CONSUME_COMMIT) {
        c->n_consumed += n;
        rmq__stats_consumed(q, n, 0);
        commit(q, cb->msgs, n);
        q->consuming = 0;
        rmq__cbatch_free(cb);
        rmq__orderly_dispatch(q);
        return;
    }
    /* SUSPEND_CURRENT_QUEUE_A_MOMENT (RECONSUME_LATER, DLQ and errors count as suspend). */
    rmq__orderly_fail(c, cb, 1, "orderly", settle);
}
