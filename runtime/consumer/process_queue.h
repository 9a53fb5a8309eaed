/*
 * process_queue.h -- the messages pulled from one message queue and not yet resolved
 * (ProcessQueue.java, PROTOCOL.md 6.9), ordered by queue offset.
 *
 * Storage is an array of (offset, message) entries sorted by offset, used as a deque: messages of
 * one queue arrive in ascending offset order, so a put is an O(1) append; lookup and remove are
 * a binary search, O(log n). A removed entry is cleared in place and compacted away lazily (the
 * front and back at once, the middle once removed entries outnumber held ones), and the array
 * shrinks as the count falls, so memory and time follow the number of held messages, never
 * the distance between their offsets (a sparse tag subscription may hold messages billions of
 * offsets apart). Java keeps them in a TreeMap (ProcessQueue.msgTreeMap).
 *
 * Memory: one unresolved message keeps its whole pull response alive (message.h: the set holds
 * the frame), so besides Java's msgSize (body lengths) the queue counts the memory of the sets
 * its messages pin, for flow control (pull_threshold_size_for_queue).
 *
 * Ownership: the process queue borrows the rmq_msg_t views it holds; whoever inserted a message
 * keeps it alive until it is removed (the engine releases it after rmq__pq_remove()).
 * Threads: loop thread only, except `state`, which the loop thread writes atomically (through
 * rmq__pq_set_state) and a consume thread may read with an atomic load.
 */
#ifndef RMQ_PROCESS_QUEUE_H
#define RMQ_PROCESS_QUEUE_H

#include "base/common.h"
#include "rmqlua_ffi.h"

typedef enum {
    RMQ_PQ_STARTING = 0, /* assigned; start offset being computed */
    RMQ_PQ_ACTIVE,       /* pulling and consuming */
    RMQ_PQ_DROPPED       /* revoked, offset illegal or shut down: results are ignored */
} rmq_pq_state_t;

typedef struct rmq_pq_ent {
    int64_t off;
    rmq_msg_t *m; /* NULL: removed, not compacted yet */
} rmq_pq_ent_t;

typedef struct rmq_pq {
    rmq_pq_ent_t *v;          /* entries v[head .. head + n), ascending offset */
    uint32_t cap;             /* entries allocated */
    uint32_t head, n;         /* n counts removed entries too; v[head] and v[head + n - 1] are
                               * held whenever count > 0, and n is 0 when count is 0 */
    int32_t count;            /* msgCount */
    int64_t bytes;            /* msgSize: sum of body lengths */
    int64_t mem;              /* memory the held messages keep alive: the whole decoded set of
                               * each (pulled frame, inflated bodies, views), counted once
                               * while any of its messages is held; a message without a set
                               * counts its body. Flow control uses this (>= bytes). */
    int64_t queue_offset_max; /* last newly inserted offset (Java queueOffsetMax) */
    int64_t acc_cnt;          /* msgAccCnt: MAX_OFFSET - offset of the last pulled message */
    int64_t last_pull_ms;     /* monotonic */
    int64_t last_consume_ms;  /* wall clock */
    rmq_pq_state_t state;
    const char *name;         /* for logs ("topic@broker#qid"), borrowed */
} rmq_pq_t;

void rmq__pq_init(rmq_pq_t *pq, const char *name);
/* Free the index. Messages still held are not touched (the caller released them). */
void rmq__pq_free(rmq_pq_t *pq);
const char *rmq__pq_state_name(rmq_pq_state_t s);
/* Change state, logging "old -> new" under the rebalance debug category. */
void rmq__pq_set_state(rmq_pq_t *pq, rmq_pq_state_t s);

/*
 * Insert one message at m->queue_offset. Returns 1 when inserted, 0 when that offset is already
 * held (the message is not taken: the caller releases it). Never fails otherwise (the index
 * is small: it aborts like rmq__xmalloc when even that cannot be allocated).
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
/* The largest held offset (lastKey), 0 when empty. */
int64_t rmq__pq_last_offset(const rmq_pq_t *pq);
/* Copy the (up to) max held messages with the smallest offsets into out, in offset order;
 * returns how many. */
int rmq__pq_peek(const rmq_pq_t *pq, rmq_msg_t **out, int max);
/* lastKey - firstKey (saturated at 2^63 - 1), 0 when empty. */
int64_t rmq__pq_max_span(const rmq_pq_t *pq);
/* Take every held message out (for a dropped queue); calls fn for each, in offset order. */
void rmq__pq_clear(rmq_pq_t *pq, void (*fn)(void *ud, rmq_msg_t *m), void *ud);

#endif
