/*
 * queue.c -- an owned queue's entry (rmq_qent_t, consumer_int.h) from its creation to its
 * free: created when the rebalance assigns its message queue (it enters the queue table and
 * the list of live entries), kept and released by whoever holds it (the table, a pull in flight,
 * a batch, a send-back, a timer, a parked flow, a request), freed with its process queue and
 * what that still holds once the last reference goes and its timers closed. Dropping a queue
 * (it leaves the table) is the rebalance's (rmq__rb_drop_queue).
 *
 * Ownership: an entry's references as consumer_int.h lists them; it owns its strings, its
 * process queue and the messages still indexed there when freed.
 * Threads: loop thread only.
 */
#include "consumer_int.h"

#include <stdio.h>
#include <stdlib.h>

rmq_qent_t *rmq__qent_keep(rmq_qent_t *q)
{
    q->refs++;
    return q;
}

static void release_msg(void *ud, rmq_msg_t *m)
{
    (void)ud;
    rmq__msg_release(m);
}

static void qent_closed(uv_handle_t *h)
{
    rmq_qent_t *q = h->data;
    if (--q->n_closing > 0) return;
    free(q->mq.topic);
    free(q->mq.broker_name);
    free(q->name);
    free(q);
}

void rmq__qent_release(rmq_qent_t *q)
{
    if (--q->refs > 0) return;
    rmq_consumer_t *c = q->c;
    if (q->live_prev) q->live_prev->live_next = q->live_next;
    else c->live = q->live_next;
    if (q->live_next) q->live_next->live_prev = q->live_prev;
    q->live_prev = q->live_next = NULL;
    /* Nobody else holds any of the messages still indexed: they are ours to release. */
    rmq__pq_clear(&q->pq, release_msg, NULL);
    rmq__pq_free(&q->pq);
    for (int i = 0; i < q->pop_ord_n; i++)
        free(q->pop_ord[i].ck);
    free(q->pop_ord);
    q->pop_ord = NULL;
    q->pop_ord_n = 0;
    q->n_closing = 2;
    uv_close((uv_handle_t *)&q->timer, qent_closed);
    uv_close((uv_handle_t *)&q->dtimer, qent_closed);
}

rmq_qent_t *rmq__qent_new(rmq_consumer_t *c, const rmq_mq_t *mq)
{
    rmq_qent_t *q = rmq__xcalloc(1, sizeof(*q));
    q->c = c;
    q->mq.topic = rmq__xstrdup(mq->topic);
    q->mq.broker_name = rmq__xstrdup(mq->broker_name);
    q->mq.queue_id = mq->queue_id;
    q->sub = rmq__c_sub(c, mq->topic);
    int nlen = snprintf(NULL, 0, "%s@%s#%d", mq->topic, mq->broker_name, mq->queue_id);
    q->name = rmq__xmalloc((size_t)nlen + 1);
    snprintf(q->name, (size_t)nlen + 1, "%s@%s#%d", mq->topic, mq->broker_name, mq->queue_id);
    rmq__pq_init(&q->pq, q->name);
    q->refs = 1;
    q->in_table = 1;
    q->gen = ++c->next_gen;
    q->offset = -1;
    q->broker_max = -1;
    q->last_pull_ms = rmq__mono_ms();
    q->pq.last_consume_ms = rmq__now_ms(); /* Java: ProcessQueue created = now */
    uv_timer_init(&c->loop, &q->timer);
    q->timer.data = q;
    uv_timer_init(&c->loop, &q->dtimer);
    q->dtimer.data = q;
    q->next = c->queues;
    c->queues = q;
    c->n_queues++;
    q->live_next = c->live;
    if (c->live) c->live->live_prev = q;
    c->live = q;
    return q;
}
