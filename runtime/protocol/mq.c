/*
 * mq.c -- the Java orderings of strings and MessageQueues (mq.h), which the route, the allocation
 * strategies, ACL signing and the producer all sort by.
 *
 * Ownership: no state. Threads: pure; callable from any thread.
 */
#include "mq.h"

#include <stdint.h>

/* ---- Java orderings ------------------------------------------------------------------------- */

/* Next Unicode scalar of a UTF-8 string (invalid bytes decode as U+FFFD, as Java would). */
static uint32_t next_cp(const unsigned char **pp)
{
    const unsigned char *p = *pp;
    uint32_t c = p[0];
    int n = 0, i;
    if (c < 0x80) {
        *pp = p + 1;
        return c;
    }
    if ((c & 0xE0) == 0xC0)
        n = 1, c &= 0x1F;
    else if ((c & 0xF0) == 0xE0)
        n = 2, c &= 0x0F;
    else if ((c & 0xF8) == 0xF0)
        n = 3, c &= 0x07;
    else {
        *pp = p + 1;
        return 0xFFFD;
    }
    for (i = 1; i <= n; i++) {
        if ((p[i] & 0xC0) != 0x80) {
            *pp = p + i;
            return 0xFFFD;
        }
        c = (c << 6) | (p[i] & 0x3F);
    }
    *pp = p + n + 1;
    return c;
}

int rmq__java_strcmp(const char *a, const char *b)
{
    const unsigned char *pa = (const unsigned char *)a, *pb = (const unsigned char *)b;
    /* Pending low surrogates when a supplementary character was split into two units. */
    uint32_t la = 0, lb = 0;
    for (;;) {
        uint32_t ua, ub;
        if (la)
            ua = la, la = 0;
        else if (!*pa)
            ua = UINT32_MAX;
        else {
            uint32_t c = next_cp(&pa);
            if (c >= 0x10000) {
                c -= 0x10000;
                ua = 0xD800 + (c >> 10);
                la = 0xDC00 + (c & 0x3FF);
            } else
                ua = c;
        }
        if (lb)
            ub = lb, lb = 0;
        else if (!*pb)
            ub = UINT32_MAX;
        else {
            uint32_t c = next_cp(&pb);
            if (c >= 0x10000) {
                c -= 0x10000;
                ub = 0xD800 + (c >> 10);
                lb = 0xDC00 + (c & 0x3FF);
            } else
                ub = c;
        }
        if (ua == UINT32_MAX || ub == UINT32_MAX) {
            if (ua == ub) return 0;
            return ua == UINT32_MAX ? -1 : 1; /* the shorter string sorts first */
        }
        if (ua != ub) return ua < ub ? -1 : 1;
    }
}

int rmq__mq_cmp(const rmq_mq_t *a, const rmq_mq_t *b)
{
    int r = rmq__java_strcmp(a->topic, b->topic);
    if (r) return r;
    r = rmq__java_strcmp(a->broker_name, b->broker_name);
    if (r) return r;
    /* Java: this.queueId - o.queueId (int arithmetic). */
    return (int32_t)((uint32_t)a->queue_id - (uint32_t)b->queue_id);
}
