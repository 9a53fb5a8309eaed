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
 * Then, on the loop thread, the new control state takes over in the handler and the engine
 * adopts the new configuration and pool (consumer/handler.h, rmq__consumer_adopt: subscriptions
 * rebuilt, thresholds and timers, the old pool retired: its queued batches move to the new pool
 * at once, its running batches finish, then its states run the old shutdown hook; only then do
 * the new states run init and start on the batches that waited). So no batch is lost or run
 * twice by a reload. Shared dictionaries (rmq.shared) are the handler's and flow control the
 * consumer's: both carry over.
 *
 * --watch polls (uv_fs_poll) the script and the modules its top-level code required from its
 * folder; a change reloads, and the list follows each reload.
 *
 * Ownership: the Lua handler owns its reload state; a job owns what it built until the loop
 * thread hands it over (or frees it).
 * Threads: rmq__reload_new/free on the consumer's creating thread; the job's work on a libuv
 * worker thread (it reads the running configuration, which only the loop thread replaces, after
 * the job); everything else on the loop thread.
 */
#ifndef RMQ_RELOAD_H
#define RMQ_RELOAD_H

#include "base/common.h"

typedef struct rmq_lua_handler rmq_lua_handler_t;
typedef struct rmq_reload rmq_reload_t;

rmq_reload_t *rmq__reload_new(rmq_lua_handler_t *lh);
void rmq__reload_free(rmq_reload_t *r);
/* The loop runs: start watching when asked to. */
void rmq__reload_start(rmq_lua_handler_t *lh);
/* SIGHUP or a --watch change: a job, or one more after the running one. */
void rmq__reload_request(rmq_lua_handler_t *lh);
/* Shutting down: no reload from now on (the polls closed, a running job cancelled). */
void rmq__reload_close(rmq_lua_handler_t *lh);

#endif
