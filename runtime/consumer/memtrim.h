/*
 * memtrim.h -- freed heap pages handed back to the system while the consumer works.
 *
 * glibc's malloc keeps what a process freed: it gives back only the free top of a heap, and one
 * chunk still in use above a free stretch pins that stretch for good. A burst (a backlog caught
 * up after a pause or a partition, a rebalance, a reload) allocates megabytes for a few seconds
 * on the loop thread and on the consume threads (pulled buffers, batches, their results), frees
 * them, and the process would keep that high-water mark: 4-6 MB after each 100,000-message
 * catch-up in the soak (scripts/soak), on a consumer of 15 MB. So every RMQ_TRIM_INTERVAL_MS in
 * which messages were pulled, malloc_trim(0) returns the free pages of every heap (it walks the
 * free chunks and madvises whole free pages away; well under a millisecond for the few MB a
 * consumer's heaps hold). An idle consumer, which frees nothing new, is left alone.
 *
 * Ownership: the trim state is the consumer's (rmq_memtrim_t in rmq_consumer_t).
 * Threads: the loop thread.
 */
#ifndef RMQ_MEMTRIM_H
#define RMQ_MEMTRIM_H

#include "base/common.h"

#define RMQ_TRIM_INTERVAL_MS 10000

typedef struct rmq_memtrim {
    int64_t last_ms;     /* monotonic ms of the last trim (or of the first tick) */
    int64_t last_pulled; /* messages pulled as of then */
    int64_t trims;       /* how many so far */
} rmq_memtrim_t;

/* Once a second, with the messages pulled since start: trims when due. */
void rmq__memtrim_tick(rmq_memtrim_t *m, int64_t pulled);

#endif
