/*
 * flow.c -- pause / resume / stop requested by the script, and the consume_tps_limit token
 * bucket (flow.h).
 *
 * Ownership: the flow belongs to the consumer; each parked queue holds one reference (taken when
 * parked, released when pulled again, dropped or at close). Requests are small structs on a
 * list under mu.
 * Threads: rmq_flow_request from any thread (mu, then uv_async_send); the rest on the loop
 * thread.
 */
#include "flow.h"

#include "consumer_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct req {
    struct req *next;
    int op;
    double seconds;
    int thread; /* 1-based consume thread, 0 = the control state */
} req_t;

struct rmq_flow {
    rmq_consumer_t *c;
    uv_mutex_t mu;
    req_t *reqs, *reqs_tail; /* under mu */
    int started, closed;     /* under mu */
    uv_async_t async;
    uv_timer_t timer;
    /* loop thread */
    int paused;
    int64_t pause_until; /* monotonic ms; 0 = until resume */
    double rate;         /* tokens (messages) per second; 0 = no limit */
    double cap, level;   /* bucket size and content */
    uint64_t last_ns;    /* last refill, uv_hrtime */
    int pull_batch;
    rmq_qent_t *head, *tail; /* parked queues, FIFO */
    int releasing;
    int closing; /* loop thread's view of closed */
};

rmq_flow_t *rmq__flow_new(rmq_consumer_t *c)
{
    rmq_flow_t *f = rmq__xcalloc(1, sizeof(*f));
    f->c = c;
    uv_mutex_init(&f->mu);
    return f;
}

void rmq__flow_free(rmq_flow_t *f)
{
    if (!f) return;
    req_t *r = f->reqs;
    while (r) {
        req_t *n = r->next;
        free(r);
        r = n;
    }
    uv_mutex_destroy(&f->mu);
    free(f);
}

RMQ_EXPORT int rmq_flow_request(rmq_flow_t *f, int op, double seconds, int thread_index)
{
    if (!f || op < RMQ_FLOW_PAUSE || op > RMQ_FLOW_STOP) return RMQ_ERR_INVALID;
    req_t *r = malloc(sizeof(*r));
    if (!r) return RMQ_ERR_NOMEM;
    r->next = NULL;
    r->op = op;
    r->seconds = seconds;
    r->thread = thread_index;
    uv_mutex_lock(&f->mu);
    if (f->closed) {
        uv_mutex_unlock(&f->mu);
        free(r);
        return RMQ_ERR_SHUTDOWN;
    }
    int wake = f->started && !f->reqs;
    if (f->reqs_tail) f->reqs_tail->next = r;
    else f->reqs = r;
    f->reqs_tail = r;
    if (wake) uv_async_send(&f->async);
    uv_mutex_unlock(&f->mu);
    return 0;
}

int rmq__flow_paused(const rmq_flow_t *f)
{
    return f->paused;
}

/* ---- the bucket -------------------------------------------------------------------------- */

static void refill(rmq_flow_t *f)
{
    uint64_t now = uv_hrtime();
    if (f->rate > 0) {
        f->level += f->rate * (double)(now - f->last_ns) / 1e9;
        /* Full only counts while nobody waits: a timer that fired late leaves the surplus to
         * the next pull, so the rate holds. */
        if (f->level > f->cap && (!f->head || f->paused)) f->level = f->cap;
    }
    f->last_ns = now;
}

/* Tokens a pull waits for: a whole pull_batch_size when the bucket can hold it. */
static double want_tokens(const rmq_flow_t *f)
{
    return f->cap;
}

static void kick(rmq_flow_t *f);

void rmq__flow_set_limit(rmq_flow_t *f, int tps, int pull_batch)
{
    refill(f);
    f->pull_batch = pull_batch > 0 ? pull_batch : 32;
    f->rate = tps > 0 ? (double)tps : 0;
    f->cap = tps > 0 ? (tps < f->pull_batch ? (double)tps : (double)f->pull_batch) : 0;
    if (f->level > f->cap) f->level = f->cap;
    if (f->head) kick(f); /* queues waiting for tokens: the new limit decides now */
}

/* ---- parked queues ------------------------------------------------------------------------ */

static void park(rmq_flow_t *f, rmq_qent_t *q)
{
    if (q->flow_parked) return;
    q->flow_parked = 1;
    q->flow_next = NULL;
    rmq__qent_keep(q);
    if (f->tail) f->tail->flow_next = q;
    else f->head = q;
    f->tail = q;
}

static rmq_qent_t *pop(rmq_flow_t *f)
{
    rmq_qent_t *q = f->head;
    if (!q) return NULL;
    f->head = q->flow_next;
    if (!f->head) f->tail = NULL;
    q->flow_next = NULL;
    q->flow_parked = 0;
    return q;
}

void rmq__flow_unpark(rmq_qent_t *q)
{
    rmq_flow_t *f = q->c->flow;
    if (!f || !q->flow_parked) return;
    rmq_qent_t **pp = &f->head, *prev = NULL;
    while (*pp && *pp != q) {
        prev = *pp;
        pp = &(*pp)->flow_next;
    }
    if (!*pp) return;
    *pp = q->flow_next;
    if (f->tail == q) f->tail = prev;
    q->flow_next = NULL;
    q->flow_parked = 0;
    rmq__qent_release(q);
}

static void on_timer(uv_timer_t *t);

/* Look at the parked queues again on the next loop iteration (never from inside a pull). */
static void kick(rmq_flow_t *f)
{
    if (!f->closing) uv_timer_start(&f->timer, on_timer, 0, 0);
}

/* Pull the parked queues that may go now, in order; then arm the timer for the next moment
 * something can change (the end of a timed pause, or enough tokens for the next queue). */
static void release(rmq_flow_t *f)
{
    if (f->releasing) return;
    if (f->closing) return;
    f->releasing = 1;
    int64_t now = rmq__mono_ms();
    if (f->paused && f->pause_until && now >= f->pause_until) {
        f->paused = 0;
        rmq_log_info("flow", "pause over: pulling again");
    }
    refill(f);
    while (f->head && !f->paused && (f->rate <= 0 || f->level >= want_tokens(f))) {
        rmq_qent_t *q = pop(f);
        q->flow_go = 1; /* its turn: rmq__flow_take does not park it behind the others */
        rmq__pull_now(q);
        q->flow_go = 0;
        rmq__qent_release(q);
        refill(f);
    }
    f->releasing = 0;
    int64_t delay = -1;
    if (f->paused) {
        if (f->pause_until) delay = f->pause_until - now;
    } else if (f->head && f->rate > 0) {
        delay = (int64_t)ceil((want_tokens(f) - f->level) * 1000.0 / f->rate);
    }
    if (delay >= 0) {
        if (delay < 1) delay = 1;
        uv_timer_start(&f->timer, on_timer, (uint64_t)delay, 0);
    } else {
        uv_timer_stop(&f->timer);
    }
}

static void on_timer(uv_timer_t *t)
{
    release(t->data);
}

/* ---- requests ------------------------------------------------------------------------------ */

static void who(char *out, size_t n, int thread)
{
    if (thread > 0) snprintf(out, n, "consume thread %d", thread);
    else snprintf(out, n, "the control state");
}

static void apply(rmq_flow_t *f, const req_t *r)
{
    rmq_consumer_t *c = f->c;
    char by[64];
    who(by, sizeof(by), r->thread);
    switch (r->op) {
    case RMQ_FLOW_PAUSE: {
        f->paused = 1;
        /* A pause longer than a monotonic ms clock can count (rmq.pause(math.huge)) has no end:
         * it lasts until rmq.resume(), instead of converting out of range (undefined). */
        double ms = r->seconds > 0 ? ceil(r->seconds * 1000) : 0;
        int endless = !(ms > 0 && ms < 0x1p62);
        f->pause_until = endless ? 0 : rmq__mono_ms() + (int64_t)ms;
        if (!endless)
            rmq_log_info("flow", "pulling paused for %.3f s by rmq.pause() in %s", r->seconds, by);
        else if (r->seconds > 0)
            rmq_log_info("flow", "pulling paused for %g s, that is until rmq.resume(), by "
                         "rmq.pause() in %s", r->seconds, by);
        else
            rmq_log_info("flow", "pulling paused until rmq.resume(), by rmq.pause() in %s", by);
        break;
    }
    case RMQ_FLOW_RESUME:
        if (f->paused) rmq_log_info("flow", "pulling resumed by rmq.resume() in %s", by);
        f->paused = 0;
        f->pause_until = 0;
        break;
    case RMQ_FLOW_STOP:
        rmq_log_info("flow", "rmq.stop() in %s: stopping the consumer", by);
        rmq__consumer_stop(c);
        break;
    }
}

static void on_async(uv_async_t *a)
{
    rmq_flow_t *f = a->data;
    uv_mutex_lock(&f->mu);
    req_t *r = f->reqs;
    f->reqs = f->reqs_tail = NULL;
    uv_mutex_unlock(&f->mu);
    while (r) {
        req_t *n = r->next;
        apply(f, r);
        free(r);
        r = n;
    }
    release(f);
}

void rmq__flow_start(rmq_flow_t *f, uv_loop_t *loop, int tps, int pull_batch)
{
    uv_async_init(loop, &f->async, on_async);
    f->async.data = f;
    uv_timer_init(loop, &f->timer);
    f->timer.data = f;
    f->last_ns = uv_hrtime();
    rmq__flow_set_limit(f, tps, pull_batch);
    f->level = f->cap; /* a full bucket to start with */
    uv_mutex_lock(&f->mu);
    f->started = 1;
    if (f->reqs) uv_async_send(&f->async);
    uv_mutex_unlock(&f->mu);
    if (tps > 0)
        rmq_log_info("flow", "consume_tps_limit %d: pulls paced to %d message(s) per second",
                     tps, tps);
}

void rmq__flow_close(rmq_flow_t *f)
{
    uv_mutex_lock(&f->mu);
    int started = f->started;
    f->closed = 1;
    uv_mutex_unlock(&f->mu);
    if (f->closing) return;
    f->closing = 1;
    rmq_qent_t *q;
    while ((q = pop(f))) rmq__qent_release(q);
    if (!started) return;
    uv_close((uv_handle_t *)&f->async, NULL);
    uv_close((uv_handle_t *)&f->timer, NULL);
}

/* ---- the pull path ------------------------------------------------------------------------ */

int rmq__flow_gate(rmq_qent_t *q)
{
    rmq_flow_t *f = q->c->flow;
    if (!f) return 0;
    if (q->flow_parked) return 1;
    if (!f->paused) return 0;
    park(f, q);
    return 1;
}

int rmq__flow_take(rmq_qent_t *q, int want)
{
    rmq_flow_t *f = q->c->flow;
    q->flow_reserved = 0;
    if (!f || f->rate <= 0) return want;
    refill(f);
    double need = want_tokens(f);
    /* Behind the queues already waiting (unless it is this one's turn), or not enough yet. */
    if ((f->head && !q->flow_go) || f->level < need) {
        park(f, q);
        if (!f->releasing) kick(f);
        return 0;
    }
    int n = (int)need;
    if (n > want) n = want;
    if (n < 1) n = 1;
    f->level -= n;
    q->flow_reserved = n;
    return n;
}

/* Not capped here: rmq__flow_charge usually follows at once (the next refill caps the level). */
void rmq__flow_refund(rmq_qent_t *q)
{
    rmq_flow_t *f = q->c->flow;
    int n = q->flow_reserved;
    q->flow_reserved = 0;
    if (!f || n <= 0) return;
    f->level += n;
    if (f->head) kick(f);
}

void rmq__flow_charge(rmq_qent_t *q, int n)
{
    rmq_flow_t *f = q->c->flow;
    if (!f || f->rate <= 0 || n <= 0) return;
    f->level -= n;
}
