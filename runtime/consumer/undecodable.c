/*
 * undecodable.c -- messages of a pull response that cannot be decoded (a corrupt field, a
 * damaged compressed body). Java's MessageDecoder skips what it cannot read and the queue moves
 * on to nextBeginOffset, silently; here such a message is logged once with its offset, held in
 * its queue's process queue (so the committed offset cannot pass it) and stored in
 * %DLQ%<group> with CONSUMER_SEND_MSG_BACK: the fixed header still gives its commit-log offset,
 * and delayLevel -1 makes the broker put it in the DLQ (SendMessageProcessor
 * .asyncConsumerSendMsgBack, PROTOCOL.md 2.3.10). Then it leaves the process queue and the
 * offset moves past it.
 *
 * A send-back that fails is tried again after 5 s (submitConsumeRequestLater's delay) while the
 * queue is owned; one the broker refuses 3 times (it cannot find the message: its header is
 * corrupt too) is given up, logged as lost, and the queue moves on: nothing else could ever
 * deliver it, and holding it would stop the queue for good.
 *
 * A popped message (POP mode, pop.c) that cannot be decoded goes the same way; once stored (or
 * given up) pop.c acks it with its extraInfo (rmq__pop_undecodable_done), so that the broker
 * does not bring it back after every invisible time, and an orderly POP queue goes on past it.
 *
 * Ownership: an entry owns its message (one reference on its set) and one reference on the
 * queue. Entries waiting to be tried again are on c->bad_list; at shutdown they are dropped and
 * their messages stay in the process queues (released with them, the offset before them). A
 * popped entry also owns the message's extraInfo (ck); its message reference is its own (an
 * orderly POP entry's process queue holds another), released when the entry goes; dropped at
 * shutdown, the message comes back after its invisible time.
 * Threads: loop thread only.
 */
#include "consumer_int.h"

#include <inttypes.h>
#include <stdlib.h>

#define BAD_MAX_REFUSALS 3

struct rmq_bad {
    rmq_consumer_t *c;
    rmq_qent_t *q;
    rmq_msg_t *m;
    int refusals;
    int64_t due_ms; /* monotonic: when to try again (on c->bad_list) */
    char *ck;       /* popped: its extraInfo (owned); NULL for a pulled message */
    struct rmq_bad *next;
};

static void bad_send(struct rmq_bad *b);

static void bad_free(struct rmq_bad *b)
{
    if (b->ck) { /* popped: the entry's own reference */
        rmq__msg_release(b->m);
        free(b->ck);
    }
    rmq__qent_release(b->q);
    free(b);
}

/* 1 when b is a popped message that no longer needs this client: an orderly POP entry handed
 * it back to the broker (a suspend, a revoke), which delivers it again. */
static int bad_gone(const struct rmq_bad *b)
{
    return b->ck && b->c->orderly && rmq__pq_get(&b->q->pq, b->m->queue_offset) != b->m;
}

/* Out of the process queue (offset moved unless dropped), released; popped: acked. */
static void bad_resolve(struct rmq_bad *b)
{
    rmq_qent_t *q = b->q;
    if (b->ck) {
        rmq__pop_undecodable_done(b->c, q, b->m, b->ck);
        bad_free(b);
        return;
    }
    int64_t off = rmq__pq_remove(&q->pq, &b->m, 1);
    if (off >= 0 && q->pq.state != RMQ_PQ_DROPPED) rmq__offset_update(q, off, 1);
    rmq__msg_release(b->m);
    /* Orderly dispatch stops at an undecodable message: go on from it. */
    if (b->c->orderly) rmq__orderly_dispatch(q);
    bad_free(b);
}

static void bad_arm(rmq_consumer_t *c)
{
    if (!c->bad_list) return;
    int64_t d = c->bad_list->due_ms - rmq__mono_ms();
    uv_timer_start(&c->t_bad, rmq__undecodable_timer, (uint64_t)(d > 0 ? d : 0), 0);
}

static void bad_later(struct rmq_bad *b)
{
    rmq_consumer_t *c = b->c;
    b->due_ms = rmq__mono_ms() + RMQ_SENDBACK_RETRY_DELAY_MS;
    struct rmq_bad **pp = &c->bad_list;
    while (*pp) pp = &(*pp)->next; /* constant delay: FIFO is due order */
    b->next = NULL;
    *pp = b;
    if (c->bad_list == b) bad_arm(c);
}

void rmq__undecodable_timer(uv_timer_t *t)
{
    rmq_consumer_t *c = t->data;
    int64_t now = rmq__mono_ms();
    while (c->bad_list && c->bad_list->due_ms <= now) {
        struct rmq_bad *b = c->bad_list;
        c->bad_list = b->next;
        b->next = NULL;
        bad_send(b);
    }
    bad_arm(c);
}

void rmq__undecodable_abandon(rmq_consumer_t *c)
{
    while (c->bad_list) {
        struct rmq_bad *b = c->bad_list;
        c->bad_list = b->next;
        bad_free(b); /* the message stays in the process queue, released with it */
    }
    uv_timer_stop(&c->t_bad);
}

static void on_bad_sendback(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    struct rmq_bad *b = ud;
    rmq_consumer_t *c = b->c;
    rmq_qent_t *q = b->q;
    c->inflight_sendbacks--;
    if (!err && resp->code == RMQ_RESP_SUCCESS) {
        c->n_dlq++;
        rmq__stats_sent_back(q, 1);
        rmq_log_info(b->ck ? "pop" : "pull",
                     "%s: undecodable message at offset %" PRId64 " stored in %%DLQ%%%s", q->name,
                     b->m->queue_offset, c->group);
        bad_resolve(b);
        return;
    }
    if (!err) b->refusals++;
    if (c->state != RMQ_CLIENT_RUNNING) {
        bad_free(b); /* stays in the process queue: the offset stays before it */
        return;
    }
    if (bad_gone(b)) {
        bad_free(b);
        return;
    }
    if (q->pq.state == RMQ_PQ_DROPPED && !b->ck) {
        bad_resolve(b); /* the queue's next owner pulls it again */
        return;
    }
    if (b->refusals >= BAD_MAX_REFUSALS) {
        rmq_log_error(b->ck ? "pop" : "pull",
                      "%s: undecodable message at offset %" PRId64 " (commit log offset %" PRId64
                      ") refused %d times by the broker (%s): skipped, it is lost",
                      q->name, b->m->queue_offset, b->m->commit_log_offset, b->refusals,
                      resp->remark ? resp->remark : rmq_err_name(resp->code));
        bad_resolve(b);
        return;
    }
    rmq_log_warn(b->ck ? "pop" : "pull",
                 "%s: sending undecodable offset %" PRId64 " to the DLQ failed: %s; "
                 "again in %d ms",
                 q->name, b->m->queue_offset,
                 err ? errmsg : (resp->remark ? resp->remark : rmq_err_name(resp->code)),
                 RMQ_SENDBACK_RETRY_DELAY_MS);
    bad_later(b);
}

static void bad_send(struct rmq_bad *b)
{
    rmq_consumer_t *c = b->c;
    rmq_qent_t *q = b->q;
    rmq_msg_t *m = b->m;
    if (c->state != RMQ_CLIENT_RUNNING) {
        bad_free(b);
        return;
    }
    if (bad_gone(b)) {
        bad_free(b);
        return;
    }
    /* A popped message was popped for this client: it goes on even when its entry was
     * revoked (pop.c acks what a revoked entry popped). */
    if (q->pq.state == RMQ_PQ_DROPPED && !b->ck) {
        bad_resolve(b);
        return;
    }
    const char *addr = rmq__c_master_addr(c, q->mq.broker_name);
    if (!addr) {
        bad_later(b);
        return;
    }
    char id[64];
    rmq_msg_offset_msg_id(m, id);
    rmq_cmd_t cmd;
    rmq__c_send_back_cmd(c, m, -1, id, q->mq.topic, &cmd); /* -1: straight to %DLQ%<group> */
    c->inflight_sendbacks++;
    int rc = rmq__remoting_request(c->rt, addr, &cmd, RMQ_SENDBACK_TIMEOUT_MS, on_bad_sendback, b);
    rmq__cmd_free(&cmd);
    if (rc) {
        c->inflight_sendbacks--;
        rmq_log_warn(b->ck ? "pop" : "pull",
                     "%s: cannot send undecodable offset %" PRId64 " to the DLQ: %s", q->name,
                     m->queue_offset, rmq_err_str(rc));
        bad_later(b);
    }
}

static void bad_start(rmq_consumer_t *c, rmq_qent_t *q, rmq_msg_t *m, char *ck)
{
    rmq_log_error(ck ? "pop" : "pull",
                  "%s: %smessage at offset %" PRId64 " (commit log offset %" PRId64
                  ") cannot be decoded: %s; sending it to %%DLQ%%%s",
                  q->name, ck ? "popped " : "", m->queue_offset, m->commit_log_offset,
                  rmq__msg_undecodable_why(m), c->group);
    struct rmq_bad *b = rmq__xcalloc(1, sizeof(*b));
    b->c = c;
    b->q = rmq__qent_keep(q);
    b->m = m;
    b->ck = ck;
    bad_send(b);
}

void rmq__undecodable_submit(rmq_consumer_t *c, rmq_qent_t *q, rmq_msg_t *m)
{
    if (rmq__pq_put(&q->pq, m) != 1) { /* held already (pulled again): that one is on its way */
        rmq__msg_release(m);
        return;
    }
    bad_start(c, q, m, NULL);
}

void rmq__undecodable_submit_pop(rmq_consumer_t *c, rmq_qent_t *q, rmq_msg_t *m, char *ck)
{
    bad_start(c, q, m, ck);
}
