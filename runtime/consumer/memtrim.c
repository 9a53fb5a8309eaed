/*
 * memtrim.c -- freed heap pages handed back to the system while the consumer works
 * (memtrim.h).
 *
 * Ownership: the consumer's rmq_memtrim_t.
 * Threads: the loop thread (the stats timer, once a second).
 */
#include "memtrim.h"

#include <uv.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

void rmq__memtrim_tick(rmq_memtrim_t *m, int64_t pulled)
{
    int64_t now = rmq__mono_ms();
    if (!m->last_ms) {
        m->last_ms = now;
        m->last_pulled = pulled;
        return;
    }
    if (now - m->last_ms < RMQ_TRIM_INTERVAL_MS || pulled == m->last_pulled) return;
    int released = 0;
    uint64_t t0 = uv_hrtime();
#if defined(__GLIBC__)
    released = malloc_trim(0);
#endif
    m->last_ms = now;
    m->last_pulled = pulled;
    m->trims++;
    rmq_dbg(RMQ_DBG_CONSUME, "memory", "trim %lld: free heap pages %s the system (%llu us)",
            (long long)m->trims, released ? "handed back to" : "none to hand back to",
            (unsigned long long)((uv_hrtime() - t0) / 1000));
}
