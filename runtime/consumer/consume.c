/*
 * consume.c -- concurrent consumption (ConsumeMessageConcurrentlyService, PROTOCOL.md 6.10-6.12):
 * pulled messages are indexed in the process queue and cut into batches of
 * consume_message_batch_max_size for the consume pool; results are applied on the loop thread:
 * acknowledged messages leave the process queue (the offset moves to the smallest unresolved
 * one), the others are sent back with CONSUMER_SEND_MSG_BACK to the broker they came from, re-sent
 * to %RETRY%<group> through the producer when that fails, and retried locally after 5 s when
 * that fails too. A message never leaves the process queue unresolved, so the committed offset
 * never passes it.
 *
 * Ownership: every message is owned by exactly one of: a batch in the pool, a send-back in
 * flight, a batch on the retry-later list, or (after the pool returned it NOT_RUN at shutdown,
 * or a send-back was abandoned) its queue's process queue, which releases what it still holds
 * when the queue is freed. A batch / send-back holds one reference on its queue.
 * Threads: loop thread only; the pool's done callback runs here too. rmq__consume_begin runs on
 * a consume thread: it reads the queue's state and writes the batch's start time, atomically.
 */
#include "consumer_int.h"
#include "trace.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

rmq_cbatch_t *rmq__cbatch_new(rmq_qent_t *q, rmq_msg_t **msgs, int n)
{
    rmq_cbatch_t *cb = rmq__xcalloc(1, sizeof(*cb) + sizeof(rmq_msg_t *) * (size_t)n);
    memcpy(cb->msgs, msgs, sizeof(rmq_msg_t *) * (size_t)n);
    cb->b.msgs = cb->msgs;
    cb->b.n = n;
    cb->b.internal = cb;
    cb->q = rmq__qent_keep(q);
    return cb;
}

void rmq__cbatch_free(rmq_cbatch_t *cb)
{
    rmq__qent_release(cb->q);
    free(cb);
}

void rmq__cbatch_submit(rmq_consumer_t *c, rmq_cbatch_t *cb, int thread_index)
{
    cb->b.status = RMQ_CONSUME_SUCCESS;
    cb->b.ack_count = cb->b.n;
    cb->b.delay_level = 0;
    cb->b.suspend_millis = -1;
    /* The loop's cached clock: CLOCK_MONOTONIC ms like rmq__mono_ms, at most one loop
     * iteration old (consume_timeout is in minutes), without a clock read per batch. */
    cb->submit_ms = (int64_t)uv_now(&c->loop);
    __atomic_store_n(&cb->start_ms, 0, __ATOMIC_RELAXED); /* a retried batch starts again */
    cb->expired = 0;
    cb->iprev = NULL;
    cb->inext = c->inflight;
    if (c->inflight) c->inflight->iprev = cb;
    c->inflight = cb;
    c->inflight_batches++;
    if (thread_index >= 0)
        c->hops->submit_to(c->pool, thread_index, &cb->b);
    else
        c->hops->submit(c->pool, &cb->b);
}

void rmq__consume_submit(rmq_consumer_t *c, rmq_qent_t *q, rmq_msg_t **msgs, int n)
{
    int bs = c->conf->consume_message_batch_max_size;
    if (bs < 1) bs = 1;
    int k = 0;
    for (int i = 0; i < n; i++) {
        rmq_msg_t *m = msgs[i];
        if (rmq__pq_put(&q->pq, m) != 1) { /* that offset is held already */
            rmq__msg_release(m);
            continue;
        }
        rmq__msg_restore_retry_topic_for(m, c->retry_topic, c->retry_topic_len);
        rmq__c_strip_namespace(c, m);
        msgs[k++] = m;
    }
    if (c->orderly) {
        rmq__orderly_dispatch(q);
        return;
    }
    c->hops->hold(c->pool); /* one hand-over for every batch of this response */
    for (int i = 0; i < k; i += bs) {
        int cnt = k - i < bs ? k - i : bs;
        rmq__cbatch_submit(c, rmq__cbatch_new(q, msgs + i, cnt), -1);
    }
    c->hops->flush(c->pool);
}

/* Resolve messages: out of the process queue, offset moved (unless dropped), released. */
static void resolve(rmq_qent_t *q, rmq_msg_t **msgs, int n)
{
    if (n <= 0) return;
    int64_t off = rmq__pq_remove(&q->pq, msgs, n);
    if (off >= 0 && q->pq.state != RMQ_PQ_DROPPED) rmq__offset_update(q, off, 1);
    for (int i = 0; i < n; i++) rmq__msg_release(msgs[i]);
}

/* ---- local retry (both send-back paths failed) ---------------------------------------------- */

static void retry_arm(rmq_consumer_t *c)
{
    if (!c->retry_list) return;
    int64_t d = c->retry_list->due_ms - rmq__mono_ms();
    uv_timer_start(&c->t_retry, rmq__consume_retry_timer, (uint64_t)(d > 0 ? d : 0), 0);
}

static void retry_later(rmq_consumer_t *c, rmq_qent_t *q, rmq_msg_t *m)
{
    m->reconsume_times = rmq__reconsume_plus(m->reconsume_times, 1);
    rmq_cbatch_t *cb = rmq__cbatch_new(q, &m, 1);
    cb->due_ms = rmq__mono_ms() + RMQ_SENDBACK_RETRY_DELAY_MS;
    rmq_cbatch_t **pp = &c->retry_list;
    while (*pp) pp = &(*pp)->next; /* constant delay: FIFO is due order */
    *pp = cb;
    if (c->retry_list == cb) retry_arm(c);
}

void rmq__consume_retry_timer(uv_timer_t *t)
{
    rmq_consumer_t *c = t->data;
    int64_t now = rmq__mono_ms();
    while (c->retry_list && c->retry_list->due_ms <= now) {
        rmq_cbatch_t *cb = c->retry_list;
        c->retry_list = cb->next;
        cb->next = NULL;
        if (c->state != RMQ_CLIENT_RUNNING) {
            rmq__cbatch_free(cb); /* messages stay in the process queue, released with it */
            continue;
        }
        if (cb->q->pq.state == RMQ_PQ_DROPPED) {
            resolve(cb->q, cb->msgs, cb->b.n);
            rmq__cbatch_free(cb);
            continue;
        }
        rmq__cbatch_submit(c, cb, -1);
    }
    retry_arm(c);
}

void rmq__consume_abandon_retries(rmq_consumer_t *c)
{
    while (c->retry_list) {
        rmq_cbatch_t *cb = c->retry_list;
        c->retry_list = cb->next;
        rmq__cbatch_free(cb);
    }
    uv_timer_stop(&c->t_retry);
}

/* ---- send back ----------------------------------------------------------------------------- */

typedef struct sendback {
    rmq_consumer_t *c;
    rmq_qent_t *q; /* one reference */
    rmq_msg_t *m;
    int delay_level;
} sendback_t;

static void sendback_finish(sendback_t *sb, int ok)
{
    rmq_consumer_t *c = sb->c;
    c->inflight_sendbacks--;
    if (ok) {
        if (sb->delay_level < 0)
            c->n_dlq++;
        else
            c->n_retried++;
        rmq__stats_sent_back(sb->q, sb->delay_level < 0);
        resolve(sb->q, &sb->m, 1);
    } else if (c->state != RMQ_CLIENT_RUNNING) {
        /* Shutting down: leave it unresolved in the process queue (offset stays before it). */
    } else if (sb->q->pq.state == RMQ_PQ_DROPPED) {
        resolve(sb->q, &sb->m, 1);
    } else {
        rmq_log_warn("consume", "%s: send back of offset %" PRId64 " failed twice; consuming it"
                     " again in %d ms", sb->q->name, sb->m->queue_offset,
                     RMQ_SENDBACK_RETRY_DELAY_MS);
        retry_later(c, sb->q, sb->m);
    }
    rmq__qent_release(sb->q);
    free(sb);
}

static void msg_id_of(const rmq_msg_t *m, char *out)
{
    if (m->uniq_key_len > 0 && m->uniq_key_len < 57) {
        memcpy(out, m->uniq_key, m->uniq_key_len);
        out[m->uniq_key_len] = 0;
    } else {
        rmq_msg_offset_msg_id(m, out);
    }
}

/* The CONSUMER_SEND_MSG_BACK of m at delay_level into cmd, under its message id (msg_id_of) and
 * its topic wrapped with the namespace again (rmq__c_send_back_cmd; the caller frees cmd). */
static void wire_send_back_cmd(rmq_consumer_t *c, const rmq_msg_t *m, int delay_level,
                               rmq_cmd_t *cmd)
{
    char id[64];
    msg_id_of(m, id);
    char *topic = rmq__c_wire_topic(c, m);
    rmq__c_send_back_cmd(c, m, delay_level, id, topic, cmd);
    free(topic);
}

static void on_fallback(void *ud, int err, const rmq_send_result_t *res, const char *errmsg)
{
    sendback_t *sb = ud;
    (void)res;
    if (err)
        rmq_log_warn("consume", "%s: re-send of offset %" PRId64 " to %s failed: %s",
                     sb->q->name, sb->m->queue_offset, sb->c->retry_topic, errmsg);
    sendback_finish(sb, err == 0);
}

static void fallback(sendback_t *sb)
{
    rmq_consumer_t *c = sb->c;
    rmq_msg_t *m = sb->m;
    if (!c->producer || (c->state != RMQ_CLIENT_RUNNING && c->state != RMQ_CLIENT_DRAINING)) {
        sendback_finish(sb, 0);
        return;
    }
    char id[64], err[256];
    msg_id_of(m, id);
    char *topic = rmq__c_wire_topic(c, m);
    int rt = m->reconsume_times;
    if (sb->delay_level < 0 && rt < c->max_reconsume - 1) rt = c->max_reconsume - 1; /* DLQ */
    int rc = rmq__producer_send_retry(c->producer, c->group, topic, m->body, m->body_len, m->flag,
                                      m->props, m->props_len, id, rt, c->max_reconsume,
                                      on_fallback, sb, err, sizeof(err));
    free(topic);
    if (rc) {
        rmq_log_warn("consume", "%s: cannot re-send offset %" PRId64 ": %s", sb->q->name,
                     m->queue_offset, err);
        sendback_finish(sb, 0);
    }
}

static void on_sendback(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    sendback_t *sb = ud;
    if (!err && resp->code == RMQ_RESP_SUCCESS) {
        sendback_finish(sb, 1);
        return;
    }
    rmq_log_warn("consume", "%s: CONSUMER_SEND_MSG_BACK of offset %" PRId64 " failed: %s; "
                 "re-sending to %s", sb->q->name, sb->m->queue_offset,
                 err ? errmsg : (resp->remark ? resp->remark : rmq_err_name(resp->code)),
                 sb->c->retry_topic);
    fallback(sb);
}

static void send_back(rmq_consumer_t *c, rmq_qent_t *q, rmq_msg_t *m, int delay_level)
{
    sendback_t *sb = rmq__xcalloc(1, sizeof(*sb));
    sb->c = c;
    sb->q = rmq__qent_keep(q);
    sb->m = m;
    sb->delay_level = delay_level;
    c->inflight_sendbacks++;
    const char *addr = rmq__c_master_addr(c, q->mq.broker_name);
    if (!addr) {
        fallback(sb);
        return;
    }
    rmq_cmd_t cmd;
    wire_send_back_cmd(c, m, delay_level, &cmd);
    int rc = rmq__remoting_request(c->rt, addr, &cmd, RMQ_SENDBACK_TIMEOUT_MS, on_sendback, sb);
    rmq__cmd_free(&cmd);
    if (rc) fallback(sb);
}

/* ---- consume timeout (ProcessQueue.cleanExpiredMsg, PROTOCOL.md 6.13) ------------------------ */

int rmq__consume_begin(void *ud, rmq_batch_t *b, int64_t start_ms)
{
    (void)ud;
    rmq_cbatch_t *cb = b->internal;
    /* ConsumeRequest.run: "if (this.processQueue.isDropped()) return" -- the batch of a queue
     * that was revoked (or dropped for OFFSET_ILLEGAL / pull expiry) while it waited for a
     * thread does not reach the handler; its new owner consumes those messages. */
    if (cb->q && __atomic_load_n(&cb->q->pq.state, __ATOMIC_ACQUIRE) == RMQ_PQ_DROPPED) return 1;
    /* ConsumeMessageOrderlyService.ConsumeRequest.run: an orderly batch runs only while its
     * queue is locked and the lock has not expired; it may have waited for a thread long after
     * its dispatch checked that (behind long handlers, or a reload's previous version). */
    if (cb->need_lock && cb->q &&
        (!__atomic_load_n(&cb->q->locked, __ATOMIC_ACQUIRE) ||
         start_ms - __atomic_load_n(&cb->q->last_lock_ms, __ATOMIC_RELAXED) >
             RMQ_LOCK_MAX_LIVE_MS))
        return 1;
    /* Java stamps CONSUME_START_TIME on the messages here: the consume timeout counts from it. */
    __atomic_store_n(&cb->start_ms, start_ms > 0 ? start_ms : 1, __ATOMIC_RELAXED);
    return 0;
}

typedef struct rmq_expire {
    rmq_consumer_t *c;
    rmq_qent_t *q;  /* one reference */
    rmq_msg_t *m;   /* kept alive by a reference on its set; still owned by its batch */
    struct rmq_expire *next; /* c->expiring */
} expire_sb_t;

static void on_expire_sendback(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    expire_sb_t *x = ud;
    rmq_qent_t *q = x->q;
    for (expire_sb_t **pp = &x->c->expiring; *pp; pp = &(*pp)->next)
        if (*pp == x) {
            *pp = x->next;
            break;
        }
    if (!err && resp->code == RMQ_RESP_SUCCESS) {
        x->c->n_retried++;
        rmq__stats_sent_back(q, 0);
        /* Still held (its batch has not come back): resolve it now, the batch skips it. */
        if (rmq__pq_get(&q->pq, x->m->queue_offset) == x->m) {
            int64_t off = rmq__pq_remove(&q->pq, &x->m, 1);
            if (off >= 0 && q->pq.state != RMQ_PQ_DROPPED) rmq__offset_update(q, off, 1);
        }
    } else {
        /* It stays in the process queue: the next round tries again. */
        rmq_log_warn("consume", "%s: send back of expired offset %" PRId64 " failed: %s",
                     q->name, x->m->queue_offset,
                     err ? errmsg : (resp->remark ? resp->remark : rmq_err_name(resp->code)));
    }
    rmq__msgset_release((rmq_msgset_t *)x->m->owner);
    rmq__qent_release(q);
    free(x);
}

static int expiring(const rmq_consumer_t *c, const rmq_msg_t *m)
{
    for (const expire_sb_t *x = c->expiring; x; x = x->next)
        if (x->m == m) return 1;
    return 0;
}

/* sendMessageBack(msg, 3): CONSUMER_SEND_MSG_BACK with delay level 3. */
static void expire_send_back(rmq_consumer_t *c, rmq_qent_t *q, rmq_msg_t *m, const char *addr)
{
    rmq_cmd_t cmd;
    wire_send_back_cmd(c, m, 3, &cmd);
    expire_sb_t *x = rmq__xcalloc(1, sizeof(*x));
    x->c = c;
    x->q = rmq__qent_keep(q);
    x->m = m;
    rmq__msgset_keep((rmq_msgset_t *)m->owner);
    if (rmq__remoting_request(c->rt, addr, &cmd, RMQ_SENDBACK_TIMEOUT_MS, on_expire_sendback,
                              x) != 0) {
        rmq__msgset_release((rmq_msgset_t *)m->owner);
        rmq__qent_release(q);
        free(x);
    } else {
        x->next = c->expiring;
        c->expiring = x;
    }
    rmq__cmd_free(&cmd);
}

/* The expired batch (among list[0..n)) of q holding m, or NULL. */
static rmq_cbatch_t *expired_owner(rmq_cbatch_t **list, int n, const rmq_qent_t *q,
                                   const rmq_msg_t *m)
{
    for (int i = 0; i < n; i++) {
        if (list[i]->q != q) continue;
        for (int k = 0; k < list[i]->b.n; k++)
            if (list[i]->msgs[k] == m) return list[i];
    }
    return NULL;
}

/*
 * ProcessQueue.cleanExpiredMsg, every consume timeout, for each queue: look at the first cached
 * message, at most min(16, cached) times; stop unless its handler started (CONSUME_START_TIME)
 * more than the consume timeout ago; else send it back with delay level 3, and once the broker
 * took it, drop it from the process queue if it is still there (its batch then skips it). A
 * batch still waiting for a consume thread has not started: it never expires. The send-back is
 * asynchronous here, so one round walks on from a message being sent back to the next cached
 * one instead of waiting for its removal.
 */
void rmq__consume_expire_timer(uv_timer_t *t)
{
    rmq_consumer_t *c = t->data;
    if (c->state != RMQ_CLIENT_RUNNING) return;
    int64_t limit = rmq__conf_consume_timeout_ms(c->conf);
    int64_t now = rmq__mono_ms();
    /* The batches whose handler started more than limit ago: at most one per consume thread
     * (the others are waiting or have just finished). */
    int n = 0, cap = 0;
    rmq_cbatch_t **list = NULL;
    for (rmq_cbatch_t *cb = c->inflight; cb; cb = cb->inext) {
        int64_t st = __atomic_load_n(&cb->start_ms, __ATOMIC_RELAXED);
        if (cb->b.orderly || !st || now - st <= limit || cb->q->pq.state == RMQ_PQ_DROPPED)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            list = realloc(list, sizeof(*list) * (size_t)cap);
            if (!list) abort();
        }
        list[n++] = cb;
    }
    for (int i = 0; i < n; i++) {
        rmq_qent_t *q = list[i]->q;
        int seen = 0;
        for (int k = 0; k < i && !seen; k++) seen = list[k]->q == q;
        if (seen) continue; /* this queue's round already ran */
        const char *addr = rmq__c_master_addr(c, q->mq.broker_name);
        if (!addr) continue;
        int loop = q->pq.count < 16 ? q->pq.count : 16, sent = 0;
        int64_t first_off = -1;
        rmq_msg_t *m = rmq__pq_first(&q->pq);
        for (int k = 0; k < loop && m; k++) {
            rmq_cbatch_t *cb = expired_owner(list, n, q, m);
            if (!cb) break;
            if (!expiring(c, m)) {
                if (first_off < 0) first_off = m->queue_offset;
                if (!cb->expired) rmq__stats_timeout(q); /* counted once per batch */
                cb->expired = 1;
                expire_send_back(c, q, m, addr);
                sent++;
            }
            m = rmq__pq_next(&q->pq, m->queue_offset);
        }
        if (sent)
            rmq_log_warn("consume", "%s: %d message(s) from offset %" PRId64 " in a handler for "
                         "more than %" PRId64 " ms (consume timeout): sending them back",
                         q->name, sent, first_off, limit);
    }
    free(list);
}

/* ---- results ---------------------------------------------------------------------------------- */

static void apply_result(rmq_consumer_t *c, rmq_cbatch_t *cb)
{
    rmq_batch_t *b = &cb->b;
    rmq_qent_t *q = cb->q;
    c->hops->batch_release(b);
    if (b->orderly) {
        rmq__orderly_result(c, cb);
        return;
    }
    if (q->pq.state == RMQ_PQ_DROPPED) {
        rmq_dbg(RMQ_DBG_CONSUME, "consume", "%s: result of a dropped queue discarded", q->name);
        resolve(q, cb->msgs, b->n);
        rmq__cbatch_free(cb);
        return;
    }
    if (cb->expired) {
        /* The consume timeout sent these back already (those still held failed to go): only
         * the ones still in the process queue get this result. */
        int k = 0, ack0 = b->ack_count, ack1 = 0;
        for (int i = 0; i < b->n; i++) {
            rmq_msg_t *m = cb->msgs[i];
            if (rmq__pq_get(&q->pq, m->queue_offset) == m) {
                cb->msgs[k++] = m;
                ack1 += i < ack0;
            } else {
                rmq__msg_release(m);
            }
        }
        b->n = k;
        b->ack_count = ack1;
    }
    int n = b->n, ack;
    int delay = b->delay_level;
    switch (b->status) {
    case RMQ_CONSUME_SUCCESS:
    case RMQ_CONSUME_COMMIT:
        ack = b->ack_count;
        break;
    case RMQ_CONSUME_DLQ:
        /* The messages after ctx.ack_index go to the DLQ: none when all are acknowledged. */
        ack = b->ack_count;
        delay = -1;
        break;
    default: /* RECONSUME_LATER, SUSPEND or anything unknown */
        ack = 0;
        break;
    }
    if (ack < 0) ack = 0;
    if (ack > n) ack = n;
    c->n_consumed += ack;
    c->n_failed += n - ack;
    rmq__stats_consumed(q, ack, n - ack);
    if (c->conf->message_model == RMQ_MODEL_BROADCASTING) {
        for (int i = ack; i < n; i++)
            rmq_log_warn("consume", "%s: BROADCASTING, consume failed, drop it: offset %" PRId64,
                         q->name, cb->msgs[i]->queue_offset);
        resolve(q, cb->msgs, n);
        rmq__cbatch_free(cb);
        return;
    }
    for (int i = ack; i < n; i++) send_back(c, q, cb->msgs[i], delay);
    resolve(q, cb->msgs, ack);
    rmq__cbatch_free(cb);
}

/* ---- messages the handler queued with rmq.send() ------------------------------------------- */

typedef struct hsend {
    rmq_consumer_t *c;
    rmq_cbatch_t *cb;
    rmq_send_t *s;
} hsend_t;

static void hsend_one_done(rmq_consumer_t *c, rmq_cbatch_t *cb)
{
    if (--cb->n_pending > 0) return;
    rmq_batch_t *b = &cb->b;
    for (int i = 0; i < b->nsends; i++)
        if (b->sends[i].result != 0) {
            rmq_log_warn("consume", "%s: a message sent by the handler failed (%s); the batch"
                         " is consumed again", cb->q->name, rmq_err_name(b->sends[i].result));
            b->status = RMQ_CONSUME_RECONSUME_LATER;
            break;
        }
    apply_result(c, cb);
}

static void on_hsend(void *ud, int err, const rmq_send_result_t *res, const char *errmsg)
{
    hsend_t *h = ud;
    (void)res;
    h->s->result = err;
    if (err) rmq_log_warn("consume", "rmq.send failed: %s", errmsg);
    else h->c->n_sent++;
    rmq_consumer_t *c = h->c;
    rmq_cbatch_t *cb = h->cb;
    free(h);
    hsend_one_done(c, cb);
}

static void start_sends(rmq_consumer_t *c, rmq_cbatch_t *cb)
{
    rmq_batch_t *b = &cb->b;
    cb->n_pending = 1;
    for (int i = 0; i < b->nsends; i++) {
        rmq_send_t *s = &b->sends[i];
        char *topic = rmq__xstrndup(s->topic, s->topic_len);
        char *tags = s->tags_len ? rmq__xstrndup(s->tags, s->tags_len) : NULL;
        char *keys = s->keys_len ? rmq__xstrndup(s->keys, s->keys_len) : NULL;
        rmq_send_msg_t m = {0};
        m.topic = topic;
        m.body = s->body;
        m.body_len = s->body_len;
        m.tags = tags;
        m.keys = keys;
        m.delay_level = s->delay_level;
        m.props_raw = s->props;
        m.props_raw_len = s->props_len;
        hsend_t *h = rmq__xcalloc(1, sizeof(*h));
        h->c = c, h->cb = cb, h->s = s;
        char err[256];
        int rc = c->producer ? rmq__producer_send(c->producer, &m, on_hsend, h, err, sizeof(err))
                             : RMQ_ERR_STATE;
        free(topic), free(tags), free(keys);
        if (rc) {
            rmq_log_warn("consume", "rmq.send to %.*s rejected: %s", (int)s->topic_len, s->topic,
                         c->producer ? err : "no producer");
            s->result = rc;
            free(h);
            continue;
        }
        cb->n_pending++;
    }
    hsend_one_done(c, cb);
}

/*
 * The runner gave up on the thread running b (handler.h, abandoned): that thread may come
 * back any time later and write into b, and its views read b's messages. b and those messages
 * are left to it for good (the batch is never freed, each message's set keeps one reference
 * more); a copy over the same messages takes b's place (its queue reference, its place among
 * the batches in flight) and comes back NOT_RUN: a retired pool's requeue runs it in the new
 * one, a stop leaves its messages in the process queue.
 */
rmq_batch_t *rmq__consume_abandoned(void *ud, rmq_batch_t *b)
{
    rmq_consumer_t *c = ud;
    rmq_cbatch_t *cb = b->internal;
    int n = b->n; /* b->n, b->msgs, b->orderly: the consume thread never writes them */
    rmq_cbatch_t *nb = rmq__xcalloc(1, sizeof(*nb) + sizeof(rmq_msg_t *) * (size_t)n);
    memcpy(nb->msgs, cb->msgs, sizeof(rmq_msg_t *) * (size_t)n);
    for (int i = 0; i < n; i++) rmq__msgset_keep((rmq_msgset_t *)cb->msgs[i]->owner);
    nb->b.msgs = nb->msgs;
    nb->b.n = n;
    nb->b.internal = nb;
    nb->b.orderly = b->orderly;
    nb->b.suspend_millis = -1;
    nb->q = cb->q; /* the reference moves */
    cb->q = NULL;
    nb->direct = cb->direct;
    cb->direct = NULL;
    nb->submit_ms = cb->submit_ms;
    nb->start_ms = __atomic_load_n(&cb->start_ms, __ATOMIC_RELAXED);
    nb->expired = cb->expired;
    nb->need_lock = cb->need_lock;
    nb->iprev = cb->iprev;
    nb->inext = cb->inext;
    if (cb->iprev) cb->iprev->inext = nb;
    else if (c->inflight == cb) c->inflight = nb;
    if (cb->inext) cb->inext->iprev = nb;
    cb->iprev = cb->inext = NULL;
    rmq_log_warn("consume", "%s: %d message(s) of a handler given up on go back to be consumed"
                 " again; its thread keeps its own copy of the batch", nb->q ? nb->q->name
                 : "CONSUME_MESSAGE_DIRECTLY", n);
    return &nb->b;
}

/* ConsumeMessageTraceHookImpl: the batch's SubBefore and SubAfter records, with the
 * ConsumeReturnType a Java consumer would have given it (ConsumeMessageConcurrentlyService:
 * an exception EXCEPTION, past the consume timeout TIME_OUT, RECONSUME_LATER FAILED). */
static void trace_batch(rmq_consumer_t *c, rmq_cbatch_t *cb)
{
    const rmq_batch_t *b = &cb->b;
    int64_t start_ns = cb->run.start_ns, end_ns = cb->run.end_ns;
    if (start_ns <= 0 || end_ns < start_ns) start_ns = end_ns = (int64_t)uv_hrtime();
    int64_t run_ms = (end_ns - start_ns) / 1000000;
    int64_t start_wall = rmq__now_ms() - ((int64_t)uv_hrtime() - start_ns) / 1000000;
    int ok = !b->handler_error &&
             (b->status == RMQ_CONSUME_SUCCESS || b->status == RMQ_CONSUME_COMMIT);
    int code = ok                   ? RMQ_TRACE_RT_SUCCESS
               : cb->run.timed_out  ? RMQ_TRACE_RT_TIME_OUT
               : b->handler_error   ? RMQ_TRACE_RT_EXCEPTION
                                    : RMQ_TRACE_RT_FAILED;
    rmq__trace_batch(c->trace, b->msgs, b->n, start_wall, run_ms, ok, code);
}

void rmq__consume_done(void *ud, rmq_batch_t *b)
{
    rmq_consumer_t *c = ud;
    rmq_cbatch_t *cb = b->internal;
    c->inflight_batches--;
    if (cb->direct) {
        rmq__direct_done(c, cb);
        return;
    }
    if (cb->iprev) cb->iprev->inext = cb->inext;
    else c->inflight = cb->inext;
    if (cb->inext) cb->inext->iprev = cb->iprev;
    cb->iprev = cb->inext = NULL;
    if (b->status == RMQ_CONSUME_NOT_RUN) {
        /* Never ran (shutdown): neither acknowledged nor sent back; the process queue keeps the
         * messages so the offset cannot pass them. */
        c->hops->batch_release(b);
        if (b->orderly)
            rmq__orderly_result(c, cb); /* no commit; a dropped queue's deferred unlock */
        else
            rmq__cbatch_free(cb);
        return;
    }
    if (b->status == RMQ_CONSUME_SKIPPED) {
        /* Its queue was dropped before the handler ran, or an orderly queue's lock was lost
         * (rmq__consume_begin): released without a result -- no offset moves, nothing is sent
         * back. */
        rmq_dbg(RMQ_DBG_CONSUME, "consume", "%s: %d message(s) not consumed (queue dropped or "
                "not locked)", cb->q->name, b->n);
        c->hops->batch_release(b);
        if (b->orderly) {
            rmq__orderly_result(c, cb); /* a dropped queue: no commit, the deferred unlock */
        } else {
            resolve(cb->q, cb->msgs, b->n);
            rmq__cbatch_free(cb);
        }
        return;
    }
    rmq__stats_batch_done(c, cb);
    if (c->trace) trace_batch(c, cb);
    if (b->nsends > 0 && cb->q->pq.state != RMQ_PQ_DROPPED &&
        (b->status == RMQ_CONSUME_SUCCESS || b->status == RMQ_CONSUME_COMMIT)) {
        start_sends(c, cb);
        return;
    }
    apply_result(c, cb);
}
