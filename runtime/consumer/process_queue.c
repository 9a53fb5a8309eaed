/*
 * process_queue.c -- the offset-sorted index of pulled messages (see process_queue.h).
 *
 * Ownership: borrows message views; owns only its entry array.
 * Threads: loop thread only.
 */
#include "process_queue.h"

#include "protocol/message.h"

#include <stdio.h>
#include <stdlib.h>

#define PQ_MIN_CAP 64u

static const char *pq_state_names[] = {"STARTING", "ACTIVE", "DROPPED"};

const char *rmq__pq_state_name(rmq_pq_state_t s)
{
    return (unsigned)s < RMQ_ARRAY_SIZE(pq_state_names) ? pq_state_names[s] : "?";
}

void rmq__pq_set_state(rmq_pq_t *pq, rmq_pq_state_t s)
{
    if (pq->state == s) return;
    rmq_dbg(RMQ_DBG_REBALANCE, "pq", "%s: %s -> %s", pq->name ? pq->name : "?",
            rmq__pq_state_name(pq->state), rmq__pq_state_name(s));
    __atomic_store_n(&pq->state, s, __ATOMIC_RELEASE); /* consume threads read it (atomically) */
}

void rmq__pq_init(rmq_pq_t *pq, const char *name)
{
    memset(pq, 0, sizeof(*pq));
    pq->name = name;
    pq->state = RMQ_PQ_STARTING;
}

void rmq__pq_free(rmq_pq_t *pq)
{
    free(pq->v);
    pq->v = NULL;
    pq->cap = pq->head = pq->n = 0;
    pq->count = 0;
}

/* Move the entries to the front of an array of ncap entries (>= n), reallocating it. */
static void pq_resize(rmq_pq_t *pq, uint32_t ncap)
{
    if (pq->head) {
        memmove(pq->v, pq->v + pq->head, sizeof(*pq->v) * pq->n);
        pq->head = 0;
    }
    if (ncap == pq->cap) return;
    rmq_pq_ent_t *nv = realloc(pq->v, sizeof(*nv) * ncap);
    if (!nv) {
        if (ncap < pq->cap) return; /* keep the bigger array */
        fprintf(stderr, "rmqlua: out of memory growing a process queue to %u entries\n", ncap);
        abort();
    }
    pq->v = nv;
    pq->cap = ncap;
}

/* Room for one more entry after the last one. Sliding the entries to the front costs n moves,
 * paid for by the head's n or more advances since the last slide. */
static void pq_room_at_end(rmq_pq_t *pq)
{
    if (pq->head + pq->n < pq->cap) return;
    if (pq->head >= pq->n && pq->head > 0)
        pq_resize(pq, pq->cap);
    else
        pq_resize(pq, pq->cap ? pq->cap * 2 : PQ_MIN_CAP);
}

/* Index (absolute) of the first entry with offset >= off, in [head, head + n]. */
static uint32_t pq_lower_bound(const rmq_pq_t *pq, int64_t off)
{
    uint32_t lo = pq->head, hi = pq->head + pq->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (pq->v[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The entry holding offset off (held or removed), or NULL. */
static rmq_pq_ent_t *pq_find(const rmq_pq_t *pq, int64_t off)
{
    if (pq->n == 0 || off < pq->v[pq->head].off || off > pq->v[pq->head + pq->n - 1].off)
        return NULL;
    uint32_t i = pq_lower_bound(pq, off);
    return i < pq->head + pq->n && pq->v[i].off == off ? &pq->v[i] : NULL;
}

/* A message becomes held / stops being held: account the memory it pins (see pq->mem). */
static void mem_hold(rmq_pq_t *pq, const rmq_msg_t *m)
{
    rmq_msgset_t *set = m->owner;
    if (!set)
        pq->mem += m->body_len;
    else if (set->pq_held++ == 0)
        pq->mem += (int64_t)set->mem;
}

static void mem_unhold(rmq_pq_t *pq, const rmq_msg_t *m)
{
    rmq_msgset_t *set = m->owner;
    if (!set)
        pq->mem -= m->body_len;
    else if (--set->pq_held == 0)
        pq->mem -= (int64_t)set->mem;
}

int rmq__pq_put(rmq_pq_t *pq, rmq_msg_t *m)
{
    int64_t off = m->queue_offset;
    if (pq->n == 0 || off > pq->v[pq->head + pq->n - 1].off) {
        /* The usual case: a pull returns offsets above everything held. */
        pq_room_at_end(pq);
        pq->v[pq->head + pq->n] = (rmq_pq_ent_t){off, m};
        pq->n++;
    } else {
        uint32_t i = pq_lower_bound(pq, off);
        if (pq->v[i].off == off) {
            if (pq->v[i].m) return 0;
            pq->v[i].m = m; /* a removed entry not compacted yet */
        } else if (i == pq->head && pq->head > 0) {
            pq->head--;
            pq->v[pq->head] = (rmq_pq_ent_t){off, m};
            pq->n++;
        } else {
            /* An older offset put back in the middle: O(n), rare. */
            uint32_t rel = i - pq->head;
            pq_room_at_end(pq);
            i = pq->head + rel;
            memmove(pq->v + i + 1, pq->v + i, sizeof(*pq->v) * (pq->head + pq->n - i));
            pq->v[i] = (rmq_pq_ent_t){off, m};
            pq->n++;
        }
    }
    pq->count++;
    pq->bytes += m->body_len;
    mem_hold(pq, m);
    pq->queue_offset_max = off;
    if (m->max_offset > 0) {
        int64_t acc = rmq__lag(m->max_offset, off);
        if (acc > 0) pq->acc_cnt = acc;
    }
    return 1;
}

rmq_msg_t *rmq__pq_get(const rmq_pq_t *pq, int64_t off)
{
    const rmq_pq_ent_t *e = pq_find(pq, off);
    return e ? e->m : NULL;
}

rmq_msg_t *rmq__pq_first(const rmq_pq_t *pq)
{
    return pq->count ? pq->v[pq->head].m : NULL;
}

int64_t rmq__pq_last_offset(const rmq_pq_t *pq)
{
    return pq->count ? pq->v[pq->head + pq->n - 1].off : 0;
}

rmq_msg_t *rmq__pq_next(const rmq_pq_t *pq, int64_t off)
{
    if (pq->count == 0 || off == INT64_MAX) return NULL;
    for (uint32_t i = pq_lower_bound(pq, off + 1); i < pq->head + pq->n; i++)
        if (pq->v[i].m) return pq->v[i].m;
    return NULL;
}

int64_t rmq__pq_max_span(const rmq_pq_t *pq)
{
    return pq->count ? rmq__lag(pq->v[pq->head + pq->n - 1].off, pq->v[pq->head].off) : 0;
}

int rmq__pq_peek(const rmq_pq_t *pq, rmq_msg_t **out, int max)
{
    int k = 0;
    for (uint32_t i = pq->head; i < pq->head + pq->n && k < max; i++)
        if (pq->v[i].m) out[k++] = pq->v[i].m;
    return k;
}

/* After removals: drop removed entries at both ends, compact the middle once removed entries
 * outnumber held ones, shrink the array when it is mostly empty. Amortised O(1) per removal. */
static void pq_tidy(rmq_pq_t *pq)
{
    if (pq->count == 0) {
        pq->head = pq->n = 0;
    } else {
        while (!pq->v[pq->head].m) pq->head++, pq->n--;
        while (!pq->v[pq->head + pq->n - 1].m) pq->n--;
        uint32_t removed = pq->n - (uint32_t)pq->count;
        if (removed > (uint32_t)pq->count && removed >= 32) {
            uint32_t k = 0;
            for (uint32_t i = pq->head; i < pq->head + pq->n; i++)
                if (pq->v[i].m) pq->v[k++] = pq->v[i];
            pq->head = 0;
            pq->n = k;
        }
    }
    if (pq->cap > PQ_MIN_CAP && pq->n < pq->cap / 4) {
        uint32_t ncap = pq->cap / 2;
        while (ncap > PQ_MIN_CAP && pq->n < ncap / 4) ncap /= 2;
        pq_resize(pq, ncap);
    }
}

int64_t rmq__pq_remove(rmq_pq_t *pq, rmq_msg_t *const *msgs, int n)
{
    pq->last_consume_ms = rmq__now_ms();
    if (pq->count == 0) return -1;
    for (int i = 0; i < n; i++) {
        rmq_msg_t *m = msgs[i];
        rmq_pq_ent_t *e = pq_find(pq, m->queue_offset);
        if (!e || e->m != m) continue;
        e->m = NULL;
        pq->count--;
        pq->bytes -= m->body_len;
        mem_unhold(pq, m);
    }
    pq_tidy(pq);
    /* ProcessQueue.removeMessage: the first key, or queueOffsetMax + 1 when empty. */
    if (pq->count == 0) return rmq__offset_after(pq->queue_offset_max);
    return pq->v[pq->head].off;
}

void rmq__pq_clear(rmq_pq_t *pq, void (*fn)(void *ud, rmq_msg_t *m), void *ud)
{
    for (uint32_t i = pq->head; i < pq->head + pq->n; i++) {
        rmq_msg_t *m = pq->v[i].m;
        pq->v[i].m = NULL;
        if (!m) continue;
        mem_unhold(pq, m);
        if (fn) fn(ud, m);
    }
    pq->head = pq->n = 0;
    pq->count = 0;
    pq->bytes = 0;
    pq->mem = 0;
    pq->queue_offset_max = 0;
    pq_tidy(pq);
}
