/*
 * script.h -- the consumer script's control state: the script loaded once on the loop thread
 * for configuration, validation and the control hooks (allocate, on_assign, on_revoke,
 * on_stats).
 *
 * The script contract (what `return { ... }` may hold) is documented in lua/rmq/script.lua and
 * the examples. Options are applied to an rmq_conf_t with rmq__conf_set(); `subscribe` with
 * rmq__conf_add_subscription(); hooks stay in the state as registry refs.
 *
 * Ownership: rmq__script_load() returns a script that owns its lua_State. Arrays passed to the
 * hooks are borrowed for the call; values are copied into the Lua state as plain tables.
 * Threads: one thread at a time (the loop thread); a hook never blocks anything but that thread.
 * Every hook runs under lua_pcall with a traceback handler: a script error is returned (or
 * logged), never raised.
 */
#ifndef RMQ_SCRIPT_H
#define RMQ_SCRIPT_H

#include "base/common.h"
#include "consumer/handler.h"
#include "rmqlua_ffi.h"

typedef struct rmq_conf rmq_conf_t;
typedef struct rmq_mq rmq_mq_t; /* route.h: { char *topic; char *broker_name; int queue_id; } */
typedef struct rmq_script rmq_script_t;
typedef struct rmq_stats_snap rmq_stats_snap_t; /* stats.h */

/* Which optional hooks a script defines (rmq__script_hooks()): the RMQ_HOOK_* bits of
 * consumer/handler.h. */

/*
 * Load the script at path into a new control state: run its top-level code, validate the
 * returned table (exactly one of consume / consume_orderly, hooks are functions, subscribe maps
 * topic strings to tag expressions, every other key is an option). When conf is not NULL,
 * apply every option and subscription to it (options first, in the order of the source).
 * Returns 0 and *out, or RMQ_ERR_LUA (syntax or run-time error of the top-level code) /
 * RMQ_ERR_CONFIG (contract or option error) with errstr "file:line: message".
 * out may be NULL to only load, validate and apply (then the state is closed).
 */
int rmq__script_load(const char *path, rmq_conf_t *conf, rmq_script_t **out, char *errstr,
                     size_t errstr_size);
/*
 * The same, with the consumer's shared dictionaries and flow control reachable from the control
 * state (rmq.shared, where the script's `shared` declarations are made; rmq.pause/resume/stop).
 * shdicts NULL: the state uses a set of its own, as rmq__script_load does; flow NULL: the
 * requests are only recorded.
 */
int rmq__script_load_ex(const char *path, rmq_shdicts_t *shdicts, rmq_flow_t *flow,
                        rmq_conf_t *conf, rmq_script_t **out, char *errstr, size_t errstr_size);
void rmq__script_destroy(rmq_script_t *s);

const char *rmq__script_path(const rmq_script_t *s);
/*
 * The files a change of which should reload the script (--watch): the script itself, then the
 * modules its top-level code required from the script's own folder (as the control state found
 * them after loading it). Borrowed from s; *n set.
 */
const char *const *rmq__script_files(const rmq_script_t *s, int *n);

/*
 * What `rmqlua check` and a reload do before trusting a script in the consume role: load it in
 * a throwaway consume-role state (shared dictionaries of its own, pause/stop only recorded),
 * build its dispatcher, run init then shutdown once; ngx_shim is the conf's lua_ngx_shim (0 or
 * 1). Returns 0, or RMQ_ERR_LUA with errstr
 * naming file:line. Any thread (the state is its own).
 */
int rmq__script_check_consume(const char *path, const char *group, int ngx_shim, char *errstr,
                              size_t errstr_size);
/* RMQ_HOOK_* bits. */
unsigned rmq__script_hooks(const rmq_script_t *s);

/*
 * The allocate hook (a custom AllocateMessageQueueStrategy): calls
 * allocate(group, client_id, mq_all, cid_all) with mq_all as a list of
 * { topic =, broker_name =, queue_id = } tables and cid_all as a list of strings, and validates
 * the result: a list of entries of mq_all (the same tables or equal ones), no duplicates.
 * On success returns the number of chosen queues and writes their indexes into mq_all to
 * out_idx (room for n_mq). On failure (no hook, error, bad result) returns a negative error with
 * errstr naming the problem; the rebalance then logs it and uses AllocateMessageQueueAveragely.
 */
int rmq__script_allocate(rmq_script_t *s, const char *group, const char *client_id,
                         const rmq_mq_t *mq_all, int n_mq, const char *const *cid_all, int n_cid,
                         int *out_idx, char *errstr, size_t errstr_size);

/*
 * on_assign(mqs) / on_revoke(mqs) with the queues newly assigned to / taken from this client.
 * Errors are logged (subsystem "lua") and otherwise ignored. No-op without the hook.
 */
void rmq__script_on_assign(rmq_script_t *s, const rmq_mq_t *mqs, int n);
void rmq__script_on_revoke(rmq_script_t *s, const rmq_mq_t *mqs, int n);

/* Why a script or --set may not set message_listener. */
#define RMQ_SCRIPT_LISTENER_MSG                                                                    \
    "option message_listener is set by the runtime from the script's hooks (consume: "             \
    "CONCURRENTLY, consume_orderly: ORDERLY); a script does not set it"

/*
 * on_stats(snapshot) with the stats snapshot as a Lua table (the shape of the /stats JSON
 * document, stats.h). Errors are logged (subsystem "lua") and otherwise ignored. No-op without
 * the hook.
 */
void rmq__script_on_stats(rmq_script_t *s, const rmq_stats_snap_t *snap);

#endif
