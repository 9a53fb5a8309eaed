/*
 * rebalance.c -- RebalanceImpl for the push consumer (PROTOCOL.md 6.6, 6.8, 7.0, 7.7): every
 * 20 s and on wake-up (start, NOTIFY_CONSUMER_IDS_CHANGED, route change, offset reset), for each
 * subscribed topic: the consumer list from a broker, Java's sorting, the allocation (rmq__allocate
 * or the script's allocate hook, validated), then the queue table update: a queue that leaves is
 * dropped (its results are ignored from then on) and its offset persisted and removed; a queue
 * that arrives gets its start offset (QUERY_CONSUMER_OFFSET, then consume_from_where) and one pull
 * loop (the entry itself: queue.c). Dropping a queue is here (rmq__rb_drop_queue; pull.c drops
 * one through the consumer's hook_drop_queue).
 *
 * Wake-ups that arrive while a round runs are merged into one extra round.
 * Ownership: see consumer_int.h (queue references). Contexts of async steps hold a queue
 * reference or belong to the round.
 * Threads: loop thread only.
 */
#include "consumer_int.h"

#include "protocol/fjson.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static const char *rb_state_names[] = {"IDLE", "RUNNING"};

const char *rmq__rb_state_name(rmq_rb_state_t s)
{
    return (unsigned)s < RMQ_ARRAY_SIZE(rb_state_names) ? rb_state_names[s] : "?";
}

static void rb_set_state(rmq_consumer_t *c, rmq_rb_state_t s)
{
    if (c->rb_state == s) return;
    rmq_dbg(RMQ_DBG_REBALANCE, "rebalance", "%s -> %s", rmq__rb_state_name(c->rb_state),
            rmq__rb_state_name(s));
    c->rb_state = s;
}

/* ---- dropping a queue ---------------------------------------------------------------------- */

void rmq__rb_drop_queue(rmq_consumer_t *c, rmq_qent_t *q, int persist)
{
    if (!q->in_table) return;
    rmq__pq_set_state(&q->pq, RMQ_PQ_DROPPED);
    if (persist) rmq__offset_persist(c, q);
    for (rmq_qent_t **pp = &c->queues; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            break;
        }
    q->next = NULL;
    q->in_table = 0;
    c->n_queues--;
    if (q->timer_armed) {
        uv_timer_stop(&q->timer);
        q->timer_armed = 0;
        rmq__qent_release(q);
    }
    if (q->dtimer_armed) {
        uv_timer_stop(&q->dtimer);
        q->dtimer_armed = 0;
        rmq__qent_release(q);
    }
    rmq__flow_unpark(q);
    /* Orderly: give the broker lock back, once no batch of this queue is running. */
    if (c->orderly && q->locked && c->conf->message_model == RMQ_MODEL_CLUSTERING) {
        if (q->consuming)
            q->unlock_pending = 1;
        else
            rmq__orderly_unlock(c, &q->mq);
    }
    rmq__qent_release(q);
}

/* ---- start offset (computePullFromWhere, 6.8) ---------------------------------------------- */

static void start_with(rmq_qent_t *q, int64_t off)
{
    rmq_consumer_t *c = q->c;
    if (q->pq.state != RMQ_PQ_STARTING || c->state != RMQ_CLIENT_RUNNING) return;
    if (off < 0) {
        rmq_log_warn("rebalance", "%s: no start offset this round", q->name);
        rmq__rb_drop_queue(c, q, 0);
        return;
    }
    q->next_offset = off;
    rmq_log_info("rebalance", "%s: assigned, pulling from offset %" PRId64, q->name, off);
    rmq__pq_set_state(&q->pq, RMQ_PQ_ACTIVE);
    rmq__pull_now(q);
}

static void on_admin_offset(void *ud, int64_t off)
{
    rmq_qent_t *q = ud;
    start_with(q, off < 0 ? -1 : off);
    rmq__qent_release(q);
}

static void on_stored_offset(void *ud, int64_t off)
{
    rmq_qent_t *q = ud;
    rmq_consumer_t *c = q->c;
    if (q->pq.state != RMQ_PQ_STARTING || c->state != RMQ_CLIENT_RUNNING) {
        rmq__qent_release(q);
        return;
    }
    if (off >= 0) {
        q->offset = off; /* READ_FROM_STORE caches the value in memory */
        start_with(q, off);
        rmq__qent_release(q);
        return;
    }
    if (off == -2) {
        start_with(q, -1);
        rmq__qent_release(q);
        return;
    }
    int retry = !strncmp(q->mq.topic, "%RETRY%", 7);
    int cfw = rmq__conf_cfw_effective(c->conf->consume_from_where);
    int64_t ts = -1;
    if (cfw == RMQ_CFW_FIRST_OFFSET || (cfw == RMQ_CFW_LAST_OFFSET && retry)) {
        start_with(q, 0);
        rmq__qent_release(q);
        return;
    }
    if (cfw == RMQ_CFW_TIMESTAMP && !retry) {
        if (rmq__conf_parse_timestamp(c->conf->consume_timestamp, &ts) != 0) {
            rmq_log_error("rebalance", "%s: bad consume_timestamp %s", q->name,
                          c->conf->consume_timestamp ? c->conf->consume_timestamp : "(null)");
            start_with(q, -1);
            rmq__qent_release(q);
            return;
        }
    }
    /* The reference moves to the admin query. */
    if (rmq__offset_admin(c, &q->mq, ts, on_admin_offset, q) != 0) {
        start_with(q, -1);
        rmq__qent_release(q);
    }
}

static void query_start_offset(rmq_consumer_t *c, rmq_qent_t *q)
{
    rmq__qent_keep(q);
    if (rmq__offset_query(c, &q->mq, on_stored_offset, q) != 0) {
        rmq_log_warn("rebalance", "%s: cannot query the consumer offset", q->name);
        rmq__rb_drop_queue(c, q, 0);
        rmq__qent_release(q);
    }
}

static void on_arrival_lock(rmq_qent_t *q, int ok)
{
    rmq_consumer_t *c = q->c;
    if (q->pq.state != RMQ_PQ_STARTING || c->state != RMQ_CLIENT_RUNNING) {
        /* Dropped while the request was on its way: a queue that leaves gives its lock back
         * (RebalancePushImpl.removeUnnecessaryMessageQueue), this one too once granted. */
        if (ok) rmq__orderly_lock_orphaned(q);
        return;
    }
    if (!ok) {
        rmq_log_info("rebalance", "%s: lock not granted, retrying next round", q->name);
        rmq__rb_drop_queue(c, q, 0);
        return;
    }
    query_start_offset(c, q);
}

static void queue_arrives(rmq_consumer_t *c, const rmq_mq_t *mq)
{
    rmq_qent_t *q = rmq__qent_new(c, mq);
    q->after_revoke = c->orderly; /* the queue may come back while its old batch runs */
    /* Orderly: a queue is added only once its broker lock is held (updateProcessQueueTable). */
    if (c->orderly && c->conf->message_model == RMQ_MODEL_CLUSTERING)
        rmq__orderly_lock(q, on_arrival_lock);
    else
        query_start_offset(c, q);
}

/* ---- one topic -------------------------------------------------------------------------------- */

static int owned_by_topic(rmq_consumer_t *c, const char *topic)
{
    int n = 0;
    for (rmq_qent_t *q = c->queues; q; q = q->next) n += !strcmp(q->mq.topic, topic);
    return n;
}

/* A set of one topic's message queues, by broker name and queue id (open addressing): which
 * owned queues the allocation keeps and which allocated ones are new, in O(n) rather than
 * comparing every pair (16 million Java string compares per round at 4,096 queues). Queues
 * are equal when their bytes are (MessageQueue.equals). */
typedef struct mq_set {
    const rmq_mq_t **slot;
    size_t mask;
} mq_set_t;

static size_t mq_hash(const rmq_mq_t *mq)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)mq->broker_name; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    h ^= (uint32_t)mq->queue_id;
    h *= 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17);
}

static int mq_same(const rmq_mq_t *a, const rmq_mq_t *b)
{
    return a->queue_id == b->queue_id && !strcmp(a->broker_name, b->broker_name) &&
           !strcmp(a->topic, b->topic);
}

static void mq_set_init(mq_set_t *s, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    s->slot = rmq__xcalloc(cap, sizeof(*s->slot));
    s->mask = cap - 1;
}

static int mq_set_has(const mq_set_t *s, const rmq_mq_t *mq)
{
    for (size_t i = mq_hash(mq) & s->mask; s->slot[i]; i = (i + 1) & s->mask)
        if (mq_same(s->slot[i], mq)) return 1;
    return 0;
}

/* Callers size the set for everything they add (at most half full). */
static void mq_set_add(mq_set_t *s, const rmq_mq_t *mq)
{
    size_t i = mq_hash(mq) & s->mask;
    while (s->slot[i]) {
        if (mq_same(s->slot[i], mq)) return;
        i = (i + 1) & s->mask;
    }
    s->slot[i] = mq;
}

/* updateProcessQueueTable + messageQueueChanged. Returns 1 when something changed. */
static int apply_allocation(rmq_consumer_t *c, rmq_csub_t *s, const int *idx, int n)
{
    const char *topic = s->sd->topic;
    int changed = 0;
    int n_owned = owned_by_topic(c, topic);
    rmq_mq_t *revoked = rmq__xcalloc((size_t)n_owned + 1, sizeof(rmq_mq_t));
    rmq_qent_t **revoked_q = rmq__xcalloc((size_t)n_owned + 1, sizeof(rmq_qent_t *));
    int n_revoked = 0;
    int64_t now = rmq__mono_ms();
    mq_set_t alloc;
    mq_set_init(&alloc, (size_t)n);
    for (int i = 0; i < n; i++) mq_set_add(&alloc, &s->mqs[idx[i]]);
    rmq_qent_t *q = c->queues;
    while (q) {
        rmq_qent_t *next = q->next;
        if (!strcmp(q->mq.topic, topic) && !q->pop) { /* POP entries: apply_assignment */
            int keep = mq_set_has(&alloc, &q->mq);
            if (!keep) {
                rmq_log_info("rebalance", "%s: revoked", q->name);
                revoked[n_revoked].topic = q->mq.topic; /* borrowed until the hook ran */
                revoked[n_revoked].broker_name = q->mq.broker_name;
                revoked[n_revoked].queue_id = q->mq.queue_id;
                revoked_q[n_revoked++] = rmq__qent_keep(q);
                rmq__rb_drop_queue(c, q, 1);
                changed = 1;
            } else if (q->pq.state == RMQ_PQ_ACTIVE && now - q->last_pull_ms > RMQ_PULL_MAX_IDLE_MS
                       && !q->pull_inflight && !q->timer_armed && !q->flow_parked) {
                rmq_log_warn("rebalance", "%s: pull expired, dropping it for now", q->name);
                rmq__rb_drop_queue(c, q, 1);
                changed = 1;
            }
        }
        q = next;
    }
    free(alloc.slot);
    /* The queues of this topic still held (every entry in c->queues is in the table), and
     * each one that arrives now, so that a queue listed twice arrives once. */
    mq_set_t held;
    mq_set_init(&held, (size_t)owned_by_topic(c, topic) + (size_t)n);
    for (rmq_qent_t *o = c->queues; o; o = o->next)
        if (!strcmp(o->mq.topic, topic)) mq_set_add(&held, &o->mq);
    rmq_mq_t *assigned = rmq__xcalloc((size_t)n + 1, sizeof(rmq_mq_t));
    int n_assigned = 0;
    for (int i = 0; i < n; i++) {
        const rmq_mq_t *mq = &s->mqs[idx[i]];
        if (mq_set_has(&held, mq)) continue;
        mq_set_add(&held, mq);
        assigned[n_assigned++] = *mq;
        queue_arrives(c, mq);
        changed = 1;
    }
    free(held.slot);
    if (n_revoked && (c->hooks & RMQ_HOOK_ON_REVOKE) && c->hops->on_revoke)
        c->hops->on_revoke(c->himpl, revoked, n_revoked);
    if (n_assigned && (c->hooks & RMQ_HOOK_ON_ASSIGN) && c->hops->on_assign)
        c->hops->on_assign(c->himpl, assigned, n_assigned);
    /* Drop the references that kept the revoked names alive for the hook. */
    for (int i = 0; i < n_revoked; i++) rmq__qent_release(revoked_q[i]);
    free(revoked_q);
    free(assigned);
    if (changed) rmq__rb_flow_thresholds(c);
    free(revoked);
    return changed;
}

void rmq__rb_flow_thresholds(rmq_consumer_t *c)
{
    const rmq_conf_t *cf = c->conf;
    if (c->n_queues <= 0) return;
    if (cf->pull_threshold_for_topic != -1) {
        int v = cf->pull_threshold_for_topic / c->n_queues;
        c->thr_queue = v > 1 ? v : 1;
    }
    if (cf->pull_threshold_size_for_topic != -1) {
        int v = cf->pull_threshold_size_for_topic / c->n_queues;
        c->thr_size_queue = v > 1 ? v : 1;
    }
}

typedef struct rb_topic {
    rmq_consumer_t *c;
    int idx;      /* subscription index */
    uint32_t gen; /* c->subs_gen when asked (a reload may replace the subscriptions) */
} rb_topic_t;

static void rb_step_done(rmq_consumer_t *c);

static void allocate_topic(rmq_consumer_t *c, rmq_csub_t *s, const char **cids, int n_cid)
{
    char err[512];
    int *idx = rmq__xcalloc((size_t)s->n_mqs + 1, sizeof(int));
    int n = 0, rc;
    rmq__cid_sort(cids, n_cid);
    if (c->conf->allocate_message_queue_strategy == RMQ_ALLOC_LUA &&
        (c->hooks & RMQ_HOOK_ALLOCATE) && c->hops->allocate) {
        n = c->hops->allocate(c->himpl, c->group, c->client_id, s->mqs, s->n_mqs, cids, n_cid,
                              idx, err, sizeof(err));
        if (n < 0) {
            rmq_log_error("rebalance", "allocate hook failed for %s: %s; using AVG",
                          s->sd->topic, err);
            n = 0;
            rc = rmq__allocate_with(RMQ_ALLOC_AVG, c->conf, c->group, c->client_id, s->mqs,
                                    s->n_mqs, cids, n_cid, idx, &n, err, sizeof(err));
        } else {
            rc = 0;
        }
    } else {
        rc = rmq__allocate(c->conf, c->group, c->client_id, s->mqs, s->n_mqs, cids, n_cid, idx,
                           &n, err, sizeof(err));
    }
    if (rc) {
        rmq_log_warn("rebalance", "allocation of %s failed: %s", s->sd->topic, err);
        free(idx);
        return;
    }
    rmq_dbg(RMQ_DBG_REBALANCE, "rebalance", "%s: %d of %d queue(s) for %s among %d consumer(s)",
            s->sd->topic, n, s->n_mqs, c->client_id, n_cid);
    if (apply_allocation(c, s, idx, n)) c->rb_changed = 1;
    free(idx);
}

/* The subscription the rebalance request t was for, once its answer came (t is freed); NULL,
 * with the step done, when the consumer stopped, paused or reloaded its subscriptions since. */
static rmq_csub_t *answered_sub(rb_topic_t *t, rmq_consumer_t **cp)
{
    rmq_consumer_t *c = t->c;
    int i = t->idx;
    uint32_t gen = t->gen;
    free(t);
    *cp = c;
    if (c->state != RMQ_CLIENT_RUNNING || c->paused || gen != c->subs_gen) {
        rb_step_done(c);
        return NULL;
    }
    return &c->subs[i];
}

static void on_consumer_list(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    rmq_consumer_t *c;
    rmq_csub_t *s = answered_sub(ud, &c);
    if (!s) return;
    if (err || resp->code != RMQ_RESP_SUCCESS || !resp->body) {
        rmq_log_warn("rebalance", "GET_CONSUMER_LIST_BY_GROUP for %s: %s", s->sd->topic,
                     err ? errmsg : (resp->remark ? resp->remark : rmq_err_name(resp->code)));
        rb_step_done(c);
        return;
    }
    char perr[128];
    rmq_fjdoc_t *d = rmq__fj_parse(resp->body, resp->body_len, perr, sizeof(perr));
    rmq_fj_t *list = d ? rmq__fj_get(rmq__fj_root(d), "consumerIdList") : NULL;
    if (!list || list->type != RMQ_FJ_ARRAY || list->len == 0) {
        rmq_log_warn("rebalance", "bad consumer list for %s: %s", s->sd->topic,
                     d ? "no consumerIdList" : perr);
        if (d) rmq__fj_free(d);
        rb_step_done(c);
        return;
    }
    const char **cids = rmq__xcalloc(list->len + 1, sizeof(char *));
    int n = 0;
    for (rmq_fj_t *e = list->child; e; e = e->next)
        if (e->type == RMQ_FJ_STRING) cids[n++] = e->s;
    if (s->have_route && s->n_mqs > 0) allocate_topic(c, s, cids, n);
    free(cids);
    rmq__fj_free(d);
    rb_step_done(c);
}

/* ---- broker-side assignment (RocketMQ 5) ---------------------------------------------------- */

/* An orderly consumer pops each message queue apart (order=true, one batch per queue at a
 * time): a POP assignment of queue -1 (every queue of the broker) stands for an entry per queue
 * of the broker in the topic's route. 1 when the POP assignment a covers the entry of mq. */
static int pop_covers(const rmq_consumer_t *c, const rmq_assignment_t *a, const rmq_mq_t *mq)
{
    if (!a->pop) return 0;
    if (c->orderly && a->mq.queue_id == -1)
        return !strcmp(a->mq.broker_name, mq->broker_name) && !strcmp(a->mq.topic, mq->topic);
    return mq_same(&a->mq, mq);
}

/* A new POP entry of mq unless one is held; 1 when added. */
static int pop_entry(rmq_consumer_t *c, const rmq_mq_t *mq)
{
    for (rmq_qent_t *o = c->queues; o; o = o->next)
        if (o->pop && mq_same(&o->mq, mq)) return 0;
    rmq_qent_t *p = rmq__qent_new(c, mq);
    p->pop = 1;
    p->after_revoke = c->orderly; /* the queue may come back while its old batch runs */
    rmq_log_info("rebalance", "%s: assigned in POP mode%s", p->name,
                 c->orderly ? " (orderly)" : "");
    rmq__pq_set_state(&p->pq, RMQ_PQ_ACTIVE);
    rmq__pop_now(p);
    return 1;
}

/* RebalanceImpl.updateMessageQueueAssignment: the POP entries of the topic that are no longer
 * assigned in POP mode leave; the PULL assignments (those of the route) go through the table
 * update of the client-side path (a queue now popped leaves it with its offset persisted, so
 * the broker's POP goes on from there); each new POP assignment gets an entry and its pop
 * loop. Returns 1 when something changed. */
static int apply_assignment(rmq_consumer_t *c, rmq_csub_t *s, const rmq_assignment_t *a, int n)
{
    const char *topic = s->sd->topic;
    int changed = 0;
    rmq_qent_t *q = c->queues;
    while (q) {
        rmq_qent_t *next = q->next;
        if (q->pop && !strcmp(q->mq.topic, topic)) {
            int keep = 0;
            for (int i = 0; i < n && !keep; i++)
                keep = pop_covers(c, &a[i], &q->mq);
            if (!keep) {
                rmq_log_info("rebalance", "%s: POP assignment revoked", q->name);
                rmq__rb_drop_queue(c, q, 0);
                changed = 1;
            }
        }
        q = next;
    }
    int *idx = rmq__xcalloc((size_t)n + 1, sizeof(int));
    int ni = 0;
    for (int i = 0; i < n; i++) {
        if (a[i].pop || strcmp(a[i].mq.topic, topic)) continue;
        int k = 0;
        while (k < s->n_mqs && !mq_same(&s->mqs[k], &a[i].mq)) k++;
        if (k < s->n_mqs)
            idx[ni++] = k;
        else
            rmq_log_warn("rebalance", "%s: assigned %s#%d is not in its route yet", topic,
                         a[i].mq.broker_name, a[i].mq.queue_id);
    }
    if (apply_allocation(c, s, idx, ni)) changed = 1;
    free(idx);
    for (int i = 0; i < n; i++) {
        if (!a[i].pop || strcmp(a[i].mq.topic, topic)) continue;
        if (!c->orderly || a[i].mq.queue_id != -1) {
            if (pop_entry(c, &a[i].mq)) changed = 1;
            continue;
        }
        for (int k = 0; k < s->n_mqs; k++)
            if (pop_covers(c, &a[i], &s->mqs[k]) && pop_entry(c, &s->mqs[k])) changed = 1;
    }
    if (changed) rmq__rb_flow_thresholds(c);
    return changed;
}

/* 1 when s is the POP retry topic of a topic this client pops now (RebalanceImpl: "push
 * switch to pop: unsubscribe pop retry topic"). */
static int pop_retry_idle(rmq_consumer_t *c, const rmq_csub_t *s)
{
    size_t pre = 7 + strlen(c->group) + 1; /* "%RETRY%<group>_" */
    if (strlen(s->sd->topic) <= pre) return 1;
    const char *parent = s->sd->topic + pre;
    for (rmq_qent_t *q = c->queues; q; q = q->next)
        if (q->pop && !strcmp(q->mq.topic, parent)) return 1;
    return 0;
}

static void on_assignment(void *ud, int rc, const rmq_assignment_t *a, int n, const char *why)
{
    rmq_consumer_t *c;
    rmq_csub_t *s = answered_sub(ud, &c);
    if (!s) return;
    if (rc == RMQ_RESP_REQUEST_CODE_NOT_SUPPORTED) {
        /* A 4.x broker: the client allocates from now on (one line, once). */
        if (!c->assign_unsupported)
            rmq_log_info("rebalance", "client_rebalance is false but the broker does not know "
                         "QUERY_ASSIGNMENT (%s): allocating queues on the client", why);
        c->assign_unsupported = 1;
        c->rb_again = 1;
        rb_step_done(c);
        return;
    }
    if (rc) {
        /* RebalanceImpl.doRebalance logs no failure of a retry topic. */
        if (strncmp(s->sd->topic, "%RETRY%", 7))
            rmq_log_warn("rebalance", "QUERY_ASSIGNMENT for %s: %s", s->sd->topic, why);
        else
            rmq_dbg(RMQ_DBG_REBALANCE, "rebalance", "QUERY_ASSIGNMENT for %s: %s",
                    s->sd->topic, why);
        rb_step_done(c);
        return;
    }
    rmq_dbg(RMQ_DBG_REBALANCE, "rebalance", "%s: %d assignment(s) from the broker",
            s->sd->topic, n);
    if (apply_assignment(c, s, a, n)) c->rb_changed = 1;
    rb_step_done(c);
}

/* ---- the round --------------------------------------------------------------------------------- */

static void rb_round(uv_timer_t *t);

static void rb_step_done(rmq_consumer_t *c)
{
    if (--c->rb_outstanding > 0) return;
    if (c->rb_changed) rmq__c_heartbeat_all(c);
    c->rb_changed = 0;
    rb_set_state(c, RMQ_RB_IDLE);
    if (c->rb_again && c->state == RMQ_CLIENT_RUNNING) {
        c->rb_again = 0;
        uv_timer_start(&c->t_rebalance, rb_round, 0, RMQ_REBALANCE_INTERVAL_MS);
    }
}

static void rb_round(uv_timer_t *t)
{
    rmq_consumer_t *c = t->data;
    if (c->state != RMQ_CLIENT_RUNNING || c->paused) return;
    if (c->rb_state == RMQ_RB_RUNNING) {
        c->rb_again = 1;
        return;
    }
    rb_set_state(c, RMQ_RB_RUNNING);
    c->stats.rebalances++;
    c->rb_outstanding = 1;
    c->rb_changed = 0;
    int need_route = 0;
    for (int i = 0; i < c->n_subs; i++) {
        rmq_csub_t *s = &c->subs[i];
        if (!s->have_route) {
            need_route = 1;
            continue;
        }
        if (c->conf->message_model == RMQ_MODEL_BROADCASTING) {
            int *idx = rmq__xcalloc((size_t)s->n_mqs + 1, sizeof(int));
            for (int k = 0; k < s->n_mqs; k++) idx[k] = k;
            if (apply_allocation(c, s, idx, s->n_mqs)) c->rb_changed = 1;
            free(idx);
            continue;
        }
        const char *addr = rmq__c_topic_addr(c, s->sd->topic);
        if (!addr) {
            need_route = 1;
            continue;
        }
        if (s->pop_retry && (!rmq__assign_by_broker(c) || pop_retry_idle(c, s))) {
            /* Its topic is popped now (or the client allocates): not consumed. */
            if (apply_allocation(c, s, NULL, 0)) c->rb_changed = 1;
            continue;
        }
        if (rmq__assign_by_broker(c)) {
            rb_topic_t *rt = rmq__xcalloc(1, sizeof(*rt));
            rt->c = c;
            rt->idx = i;
            rt->gen = c->subs_gen;
            if (rmq__assign_query(c, addr, s->sd->topic, on_assignment, rt) == 0)
                c->rb_outstanding++;
            else
                free(rt);
            continue;
        }
        rmq_cmd_t cmd;
        rmq__cmd_init(&cmd, RMQ_REQ_GET_CONSUMER_LIST_BY_GROUP, RMQ_SERIALIZE_JSON);
        rmq__cmd_set_ext(&cmd, "consumerGroup", c->group);
        rb_topic_t *rt = rmq__xcalloc(1, sizeof(*rt));
        rt->c = c;
        rt->idx = i;
        rt->gen = c->subs_gen;
        int rc = rmq__remoting_request(c->rt, addr, &cmd, c->conf->mq_client_api_timeout,
                                       on_consumer_list, rt);
        rmq__cmd_free(&cmd);
        if (rc)
            free(rt);
        else
            c->rb_outstanding++;
    }
    if (need_route) rmq__c_refresh_routes(c);
    rb_step_done(c);
}

void rmq__rb_timer_start(rmq_consumer_t *c)
{
    uv_timer_start(&c->t_rebalance, rb_round, RMQ_REBALANCE_INTERVAL_MS,
                   RMQ_REBALANCE_INTERVAL_MS);
}

void rmq__rb_wakeup(rmq_consumer_t *c)
{
    if (c->state != RMQ_CLIENT_RUNNING) return;
    if (c->rb_state == RMQ_RB_RUNNING) {
        c->rb_again = 1;
        return;
    }
    uv_timer_start(&c->t_rebalance, rb_round, 0, RMQ_REBALANCE_INTERVAL_MS);
}
