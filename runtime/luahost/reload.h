/*
 * reload.h -- hot reload of the consumer script (SIGHUP, `rmqlua run --watch`).
 *
 * A reload builds the new version's configuration and checks it (checkConfig, then the options
 * that cannot change while the consumer runs: consumer_group, message_model, namespace, the
 * handler kind, the clientId's parts, the name server, ... are refused with a message), checks
 * the script in a throwaway consume-role state as `rmqlua check` does (init and shutdown run
 * once there), loads the new control state and prepares a new consume pool whose states are
 * loaded but have not run init yet -- all on a libuv worker thread, so the loop never waits. If
 * anything fails, the previous version keeps running and the error is logged with file:line.
 *
 * Then, on the loop thread: the new configuration and control state (allocate, on_assign,
 * on_revoke) take over; subscriptions are rebuilt (queues of a topic no longer subscribed are
 * dropped, a changed expression gets a new subVersion), the thresholds, timers and
 * consume_tps_limit follow the new values; the new pool (consume_thread_min threads) takes every
 * new batch, and the old pool is retired: its queued batches move to the new pool at once (they
 * never ran), its running batches finish and are applied as usual, then its states run the old
 * shutdown hook; only then do the new states run init and start on the batches that waited.
 * A heartbeat and a rebalance follow. So no batch is lost or run twice by a reload (a handler
 * still running consume_timeout after the reload is interrupted and its batch runs again, as a
 * consume timeout would do). Shared dictionaries (rmq.shared) and flow control are the
 * consumer's and carry over.
 *
 * --watch polls (uv_fs_poll) the script and the modules its top-level code required from its
 * folder; a change reloads, and the list follows each reload.
 *
 * Ownership: the consumer owns its reload state; a job owns what it built until the loop thread
 * adopts it (or frees it). Configurations replaced by a reload are kept until the consumer is
 * destroyed (nothing else holds them, but they are cheap and it keeps every pointer valid).
 * Threads: rmq__reload_new/free on the consumer's creating thread; the job's work on a libuv
 * worker thread (it reads the running configuration, which only the loop thread replaces, after
 * the job); everything else on the loop thread.
 */
#ifndef RMQ_RELOAD_H
#define RMQ_RELOAD_H

#include "base/common.h"

typedef struct rmq_consumer rmq_consumer_t;
typedef struct rmq_reload rmq_reload_t;

rmq_reload_t *rmq__reload_new(rmq_consumer_t *c);
void rmq__reload_free(rmq_reload_t *r);
/* consumer_run, once the loop runs: start watching when asked to. */
void rmq__reload_start(rmq_consumer_t *c);
/* How many reloads took effect so far (loop thread). */
int rmq__reload_count(const rmq_consumer_t *c);

#endif
