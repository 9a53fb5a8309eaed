/*
 * reader.h -- reading one topic without a consumer group, as Java's tools read with a
 * DefaultMQPullConsumer (mqadmin queryMsgByOffset / printMsg): the topic's route from the name
 * server, a start offset per queue (GET_MIN_OFFSET, GET_MAX_OFFSET, a given offset, N before the
 * end, SEARCH_OFFSET_BY_TIMESTAMP, or a group's QUERY_CONSUMER_OFFSET), then PULL_MESSAGE with
 * the SUBSCRIPTION flag and never the COMMIT flag: no group's offset moves by reading. Used by
 * `rmqlua tail` and `rmqlua redrive`.
 *
 * One pull at a time per queue. Messages that came back (filtered by tag on the client as
 * PullAPIWrapper.processPullResult does) go to on_msgs; that queue then waits until the caller
 * calls rmq__reader_next(), which is the caller's flow control. With stop_at_end reading ends at
 * the max offsets the queues had at start (messages stored later are left for another run);
 * otherwise new messages are awaited with long polling (suspend 15 s) for ever.
 *
 * Errors: a timeout, a lost connection or a busy broker is logged and the step retried after
 * 1 s; what retrying cannot cure (TOPIC_NOT_EXIST, NO_PERMISSION, SUBSCRIPTION_PARSE_FAILED, no
 * queue left after --broker/--queue) ends reading through on_error.
 *
 * Ownership: the caller owns the loop and the transport and keeps both until the reader is gone;
 * rmq__reader_destroy() may come before the transport's destroy (whose callbacks the reader then
 * absorbs). Messages handed to on_msgs hold one reference each for the callee
 * (rmq__msg_release). The queues (rmq_rq_t) belong to the reader.
 * Threads: the loop thread only, callbacks included.
 */
#ifndef RMQ_READER_H
#define RMQ_READER_H

#include "base/common.h"
#include "protocol/message.h"
#include "net/remoting.h"

#include <uv.h>

typedef struct rmq_reader rmq_reader_t;

typedef enum {
    RMQ_FROM_FIRST = 0,  /* the queue's min offset */
    RMQ_FROM_LAST,       /* its max offset: only what arrives from now on */
    RMQ_FROM_OFFSET,     /* from_value */
    RMQ_FROM_BEFORE_END, /* max - from_value (the broker corrects a value below min) */
    RMQ_FROM_TIMESTAMP,  /* SEARCH_OFFSET_BY_TIMESTAMP from_value (ms since the epoch) */
    RMQ_FROM_COMMITTED   /* the group's committed offset, else the min offset */
} rmq_from_t;

/* One queue being read. */
typedef struct rmq_rq {
    struct rmq_reader *r;
    int index;
    char broker_name[128];
    char addr[80]; /* the master's */
    int queue_id;
    int64_t start; /* where reading began */
    int64_t next;  /* the offset of the next pull */
    int64_t end;   /* reading stops at this offset (stop_at_end), else -1 */
    int64_t max;   /* maxOffset of the last answer */
    int state;     /* internal */
    int busy;      /* a request in flight */
    uv_timer_t timer;
    void *ud; /* the caller's */
} rmq_rq_t;

typedef struct rmq_reader_opts {
    uv_loop_t *loop;
    rmq_remoting_t *rt;
    const char *topic;
    const char *group; /* consumerGroup of the pulls and of RMQ_FROM_COMMITTED */
    const char *tags;  /* TAG expression; NULL or "*" = every message */
    rmq_from_t from;
    int64_t from_value;
    int stop_at_end;
    const char *broker; /* only this broker's queues; NULL = every broker */
    int queue_id;       /* only this queue id; -1 = every queue */
    int max_msgs;       /* maxMsgNums per pull; 0 = 32 */

    void *ud;
    /* start offsets are known, reading begins (qs[0..n) in Java's queue order) */
    void (*on_ready)(void *ud, rmq_rq_t **qs, int n);
    /* messages of q in queue order, n > 0; q waits for rmq__reader_next() */
    void (*on_msgs)(void *ud, rmq_rq_t *q, rmq_msg_t **msgs, int n);
    /* q reached its end (stop_at_end); then, once every queue has, on_done */
    void (*on_queue_end)(void *ud, rmq_rq_t *q);
    void (*on_done)(void *ud);
    /* reading stopped for good: code is a response code or a local error */
    void (*on_error)(void *ud, int code, const char *msg);
} rmq_reader_opts_t;

/* Start (the route request goes out now). Returns 0, or RMQ_ERR_INVALID / RMQ_ERR_CONFIG with
 * errstr; callbacks never run from inside this call. Strings in o are copied. */
int rmq__reader_start(const rmq_reader_opts_t *o, rmq_reader_t **out, char *errstr,
                      size_t errstr_size);
/* Pull q again (after on_msgs), or end it when it reached its end. */
void rmq__reader_next(rmq_rq_t *q);
/* Stop reading q (no more pulls; it does not count as ended for on_done). */
void rmq__reader_stop_queue(rmq_rq_t *q);
/* Stop everything; answers still in flight are ignored; freed once its handles closed. No
 * callback runs after this call. */
void rmq__reader_destroy(rmq_reader_t *r);

/* A request about one queue: cmd initialised with code and the header fields consumerGroup
 * (when group is not NULL), topic and queueId. The caller adds the rest and frees it. Any
 * thread (it touches only cmd). */
void rmq__reader_queue_cmd(rmq_cmd_t *cmd, int32_t code, const char *group, const char *topic,
                           int queue_id);

#endif
