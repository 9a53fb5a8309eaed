/*
 * process_queue.h -- the messages pulled from one message queue and not yet resolved
 * (ProcessQueue.java, PROTOCOL.md 6.9), ordered by queue offset.
 *
 * Storage is a power-of-two ring indexed by queue offset: offsets are dense within a pull
 * (tag-filtered gaps leave empty slots), so insert, lookup and remove are O(1) and advancing the
 * first key is amortised O(1). The ring grows when a new offset lies beyond its capacity.
 *
 * Ownership: the process queue borrows the rmq_msg_t views it holds; whoever inserted a message
 * keeps it alive until it is removed (the engine releases it after rmq__pq_remove()).
 * Threads: loop thread only, except `state`, which the loop thread writes atomically (through
 * rmq__pq_set_state) and a consume thread may read with an atomic load.
 */
#ifndef RMQ_PROCESS_QUEUE_H
#define RMQ_PROCESS_QUEUE_H

#include "common.h"
#include "rmqlua_ffi.h"

typedef enum {
    RMQ_PQ_STARTING = 0, /* assigned; start offset being computed */
    RMQ_PQ_ACTIVE,       /* pulling and consuming */
    RMQ_PQ_DROPPED       /* revoked, offset illegal or shut down: results are ignored */
} rmq_pq_state_t;

typedef struct rmq_pq {
    rmq_msg_t **slots;        /* ring, slots[off & (cap - 1)] */
    uint32_t cap;             /* 0 or a power of two */
    int64_t lo;               /* smallest held offset (first key), valid when count > 0 */
    int64_t hi;               /* largest held offset + 1, valid when count > 0 */
    int32_t count;            /* msgCount */
    int64_t bytes;            /* msgSize: sum of body lengths */
    int64_t queue_offset_max; /* last newly inserted offset (Java queueOffsetMax) */
    int64_t acc_cnt;          /* msgAccCnt: MAX_OFFSET - offset of the last pulled message */
    int64_t last_pull_ms;     /* monotonic */
    int64_t last_consume_ms;  /* wall clock */
    rmq_pq_state_t state;
    const char *name;         /* for logs ("topic@broker#qid"), borrowed */
} rmq_pq_t;

void rmq__pq_init(rmq_pq_t *pq, const char *name);
/* Free the ring. Messages still held are not touched (the caller released them). */
void rmq__pq_free(rmq_pq_t *pq);
const char *rmq__pq_state_name(rmq_pq_state_t s);
/* Change state, logging "old -> new" under the rebalance debug category. */
void rmq__pq_set_state(rmq_pq_t *pq, rmq_pq_state_t s);

/*
 * Insert one message at m->queue_offset. Returns 1 when inserted, 0 when that offset is already
 * held (the message is not taken: the caller releases it), RMQ_ERR_NOMEM.
 */
int rmq__pq_put(rmq_pq_t *pq, rmq_msg_t *m);

/*
 * Remove the listed messages (those not held, or held as a different view, are skipped).
 * Returns Java removeMessage's value: -1 if the queue was empty before, else the smallest offset
 * still held, or queue_offset_max + 1 when nothing is left.
 */
int64_t rmq__pq_remove(rmq_pq_t *pq, rmq_msg_t *const *msgs, int n);

/* The message held at off, or NULL. */
rmq_msg_t *rmq__pq_get(const rmq_pq_t *pq, int64_t off);
/* The message with the smallest offset, or NULL. */
rmq_msg_t *rmq__pq_first(const rmq_pq_t *pq);
/* The message with the smallest offset above off, or NULL. */
rmq_msg_t *rmq__pq_next(const rmq_pq_t *pq, int64_t off);
/* lastKey - firstKey, 0 when empty. */
int64_t rmq__pq_max_span(const rmq_pq_t *pq);
/* Take every held message out (for a dropped queue); calls fn for each, in offset order. */
void rmq__pq_clear(rmq_pq_t *pq, void (*fn)(void *ud, rmq_msg_t *m), void *ud);

#endif
