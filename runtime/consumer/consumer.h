/*
 * consumer.h -- the push consumer engine: client instance (routes, heartbeats, broker-initiated
 * requests), rebalance, pull loops, process queues, concurrent consumption through the consume
 * pool, and the remote offset store. PROTOCOL.md sections 5 and 6.
 *
 * Ownership: rmq__consumer_new() returns a consumer that owns its libuv loop, every connection,
 * route, process queue and offset, and the handler's runner (its consume threads). The
 * rmq_conf_t is copied; the handler (handler.h) is borrowed: the caller keeps it alive until
 * rmq__consumer_destroy() returned.
 * Threads: rmq__consumer_new/run/destroy are called on one thread (the thread that calls
 * rmq__consumer_run() becomes the loop thread). rmq__consumer_stop() and
 * rmq__consumer_stats() may be called from any thread at any time between new and destroy;
 * rmq__consumer_stop() is async-signal-safe (it only sets a flag and calls uv_async_send).
 */
#ifndef RMQ_CONSUMER_H
#define RMQ_CONSUMER_H

#include "base/common.h"

typedef struct rmq_conf rmq_conf_t;
typedef struct rmq_consumer rmq_consumer_t;
typedef struct rmq_handler rmq_handler_t; /* handler.h */

/* Exit codes returned by rmq__consumer_run() (the same meaning as the CLI's). */
#define RMQ_CONSUMER_EXIT_OK 0      /* stopped on request; offsets persisted */
#define RMQ_CONSUMER_EXIT_FAILURE 1 /* could not start or failed at run time (logged) */
#define RMQ_CONSUMER_EXIT_CONFIG 2  /* configuration or script rejected before any connection */
/* A broker's access control refused the consumer before it was established (wrong keys,
 * unknown access key, missing permission): the message names access key, resource and
 * permission. After the first heartbeat every broker accepted, refusals are logged instead. */
#define RMQ_CONSUMER_EXIT_ACL 3

/*
 * Create a consumer from conf (checked with checkConfig rules) and the handler that runs its
 * batches (handler.h; for a Lua script, luahost/lua_handler.h builds one): the handler is bound
 * here (ops->bind: a script is loaded into its control state), its runner is started by
 * rmq__consumer_run(). Nothing is connected yet. Returns 0 and *out, or RMQ_ERR_CONFIG /
 * RMQ_ERR_NOMEM, or the handler's error (RMQ_ERR_LUA ...) with errstr naming the option or
 * file:line at fault.
 */
int rmq__consumer_new(rmq_conf_t *conf, const rmq_handler_t *handler, rmq_consumer_t **out,
                      char *errstr, size_t errstr_size);

/*
 * Start everything (consume threads, name server lookups, heartbeats, rebalance, pulls) and run
 * the loop on the calling thread until rmq__consumer_stop() is called, then run the shutdown
 * sequence (PROTOCOL.md 6.17: stop pulling, let in-flight batches finish for up to
 * await_termination_millis_when_shutdown, persist offsets, UNREGISTER_CLIENT) and return an
 * RMQ_CONSUMER_EXIT_* code. Call at most once. Sets SIGPIPE to SIG_IGN for the process (a
 * broker closing its end must not kill the consumer on the next write).
 */
int rmq__consumer_run(rmq_consumer_t *c);

/* Ask the consumer to shut down. Any thread, signal handlers included; idempotent. */
void rmq__consumer_stop(rmq_consumer_t *c);

/*
 * Reload (SIGHUP): the handler is asked for its new version (ops->reload; the Lua host checks
 * the script in throwaway states first, as `rmqlua check` does, and hands a good one over with
 * rmq__consumer_adopt). Any thread, signal handlers included; requests that arrive while a
 * reload runs make one more.
 */
void rmq__consumer_reload(rmq_consumer_t *c);

/* Free everything. Only after rmq__consumer_run() returned (or if it was never called). */
void rmq__consumer_destroy(rmq_consumer_t *c);

/*
 * Counters for the status line and stats. Built on the loop thread about once a second and
 * copied out under a mutex, so any thread may read it.
 */
typedef struct rmq_consumer_stats {
    int64_t msgs_consumed;  /* messages acknowledged by the handler since start */
    int64_t msgs_failed;    /* messages the handler did not acknowledge (any outcome) */
    int64_t msgs_retried;   /* messages sent back to %RETRY% (CONSUMER_SEND_MSG_BACK or re-send) */
    int64_t msgs_dlq;       /* messages the handler sent straight to the DLQ */
    int64_t msgs_pulled;    /* messages received in PULL_MESSAGE responses */
    double consume_rate;    /* acknowledged messages per second over the last interval */
    double pull_rate;       /* pulled messages per second over the last interval */
    int64_t lag;            /* sum over owned queues of broker max offset - committed offset;
                             * once stopped, what it was when the queues were released */
    int64_t cached_msgs;    /* messages held in process queues (pulled, not yet resolved) */
    int64_t cached_bytes;   /* their body bytes */
    int32_t owned_queues;   /* process queues currently owned */
    int32_t inflight_batches; /* batches submitted to the consume threads, not yet done */
    int64_t started_ms;     /* wall clock when the consumer started, 0 before */
    int64_t msgs_sent;      /* messages the handlers sent with rmq.send() (send succeeded) */
    int64_t msgs_popped;    /* RocketMQ 5 POP: messages received in POP_MESSAGE answers */
    int64_t pop_acks;       /* ACK_MESSAGEs the broker accepted */
    int64_t pop_changes;    /* CHANGE_MESSAGE_INVISIBLETIMEs the broker accepted */
} rmq_consumer_stats_t;

/* Copy the latest snapshot into *out. Any thread. */
void rmq__consumer_stats(rmq_consumer_t *c, rmq_consumer_stats_t *out);

/* The clientId (ip@pid#nanotime), or "" before rmq__consumer_run() computed it. Loop thread. */
const char *rmq__consumer_client_id(const rmq_consumer_t *c);

#endif
