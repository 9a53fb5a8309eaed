/*
 * process_queue.c -- offset-ordered ring of pulled messages (see process_queue.h).
 *
 * Ownership: borrows message views; owns only its ring.
 * Threads: loop thread only.
 */
#include "process_queue.h"

#include <stdlib.h>

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
    free(pq->slots);
    pq->slots = NULL;
    pq->cap = 0;
    pq->count = 0;
}

/* Make the ring hold [lo, hi) with room for offset off. Returns 0 or RMQ_ERR_NOMEM. */
static int pq_fit(rmq_pq_t *pq, int64_t lo, int64_t end)
{
    uint64_t need = (uint64_t)(end - lo);
    if (need <= pq->cap) return 0;
    uint64_t ncap = pq->cap ? pq->cap : 64;
    while (ncap < need) ncap <<= 1;
    if (ncap > (1u << 30)) return RMQ_ERR_NOMEM;
    rmq_msg_t **ns = calloc((size_t)ncap, sizeof(*ns));
    if (!ns) return RMQ_ERR_NOMEM;
    if (pq->count > 0) {
        for (int64_t o = pq->lo; o < pq->hi; o++)
            ns[(uint64_t)o & (ncap - 1)] = pq->slots[(uint64_t)o & (pq->cap - 1)];
    }
    free(pq->slots);
    pq->slots = ns;
    pq->cap = (uint32_t)ncap;
    return 0;
}

int rmq__pq_put(rmq_pq_t *pq, rmq_msg_t *m)
{
    int64_t off = m->queue_offset;
    if (pq->count == 0) {
        if (pq_fit(pq, off, off + 1)) return RMQ_ERR_NOMEM;
        pq->lo = off;
        pq->hi = off + 1;
    } else {
        int64_t lo = off < pq->lo ? off : pq->lo;
        int64_t hi = off >= pq->hi ? off + 1 : pq->hi;
        if (pq_fit(pq, lo, hi)) return RMQ_ERR_NOMEM;
        if (off >= pq->lo && off < pq->hi && pq->slots[(uint64_t)off & (pq->cap - 1)]) return 0;
        /* Slots between the old range and the new offset are empty: clear them. */
        for (int64_t o = hi - 1; o >= pq->hi; o--) pq->slots[(uint64_t)o & (pq->cap - 1)] = NULL;
        for (int64_t o = lo; o < pq->lo; o++) pq->slots[(uint64_t)o & (pq->cap - 1)] = NULL;
        pq->lo = lo;
        pq->hi = hi;
    }
    pq->slots[(uint64_t)off & (pq->cap - 1)] = m;
    pq->count++;
    pq->bytes += m->body_len;
    pq->queue_offset_max = off;
    if (m->max_offset > 0) {
        int64_t acc = m->max_offset - off;
        if (acc > 0) pq->acc_cnt = acc;
    }
    return 1;
}

rmq_msg_t *rmq__pq_get(const rmq_pq_t *pq, int64_t off)
{
    if (pq->count == 0 || off < pq->lo || off >= pq->hi) return NULL;
    return pq->slots[(uint64_t)off & (pq->cap - 1)];
}

rmq_msg_t *rmq__pq_first(const rmq_pq_t *pq)
{
    return pq->count ? pq->slots[(uint64_t)pq->lo & (pq->cap - 1)] : NULL;
}

rmq_msg_t *rmq__pq_next(const rmq_pq_t *pq, int64_t off)
{
    if (pq->count == 0) return NULL;
    for (int64_t o = off < pq->lo ? pq->lo : off + 1; o < pq->hi; o++) {
        rmq_msg_t *m = pq->slots[(uint64_t)o & (pq->cap - 1)];
        if (m) return m;
    }
    return NULL;
}

int64_t rmq__pq_max_span(const rmq_pq_t *pq)
{
    return pq->count ? pq->hi - 1 - pq->lo : 0;
}

int64_t rmq__pq_remove(rmq_pq_t *pq, rmq_msg_t *const *msgs, int n)
{
    pq->last_consume_ms = rmq__now_ms();
    if (pq->count == 0) return -1;
    for (int i = 0; i < n; i++) {
        rmq_msg_t *m = msgs[i];
        int64_t off = m->queue_offset;
        if (off < pq->lo || off >= pq->hi) continue;
        rmq_msg_t **s = &pq->slots[(uint64_t)off & (pq->cap - 1)];
        if (*s != m) continue;
        *s = NULL;
        pq->count--;
        pq->bytes -= m->body_len;
    }
    if (pq->count == 0) return pq->queue_offset_max + 1;
    while (!pq->slots[(uint64_t)pq->lo & (pq->cap - 1)]) pq->lo++;
    while (!pq->slots[(uint64_t)(pq->hi - 1) & (pq->cap - 1)]) pq->hi--;
    return pq->lo;
}

void rmq__pq_clear(rmq_pq_t *pq, void (*fn)(void *ud, rmq_msg_t *m), void *ud)
{
    if (pq->count > 0) {
        for (int64_t o = pq->lo; o < pq->hi; o++) {
            rmq_msg_t **s = &pq->slots[(uint64_t)o & (pq->cap - 1)];
            if (*s) {
                rmq_msg_t *m = *s;
                *s = NULL;
                if (fn) fn(ud, m);
            }
        }
    }
    pq->count = 0;
    pq->bytes = 0;
    pq->queue_offset_max = 0;
}
