/*
 * lua_handler.h -- the Lua host as the consumer engine's handler (consumer/handler.h): a
 * consumer script runs the batches in per-thread LuaJIT states (consume_pool.h), and its
 * control state (script.h) gives the allocate / on_assign / on_revoke / on_stats hooks; a
 * reload (reload.h) builds the next version off the loop and hands it to the engine.
 *
 * Ownership: rmq__lua_handler_new returns a handler that owns its control state, its shared
 * dictionaries (rmq.shared, used by every state of the script) and its reload state; the caller
 * passes lua_handler->h to rmq__consumer_new and frees the handler after rmq__consumer_destroy.
 * Threads: new/free and the setters on the consumer's own thread, before rmq__consumer_run;
 * the ops as consumer/handler.h says.
 */
#ifndef RMQ_LUA_HANDLER_H
#define RMQ_LUA_HANDLER_H

#include "base/common.h"
#include "consumer/handler.h"
#include "consume_pool.h"
#include "script.h"

/* The fields are the Lua host's own (lua_handler.c, reload.c); others use h only. */
typedef struct rmq_lua_handler {
    rmq_handler_t h;        /* what rmq__consumer_new takes: the ops, impl = this */
    char *path;             /* the consumer script */
    rmq_script_t *script;   /* the control state, loaded by bind (NULL before) */
    rmq_shdicts_t *shdicts; /* rmq.shared of every state of the script; any thread */
    rmq_consumer_t *c;      /* bind: the engine */
    rmq_flow_t *flow;       /* bind: the engine's flow control (rmq.pause/resume/stop) */
    struct rmq_reload *reload;
} rmq_lua_handler_t;

/* A handler running the consumer script at script_path (nothing is loaded before bind). */
rmq_lua_handler_t *rmq__lua_handler_new(const char *script_path);
void rmq__lua_handler_free(rmq_lua_handler_t *lh);

/*
 * How a reload builds the configuration of the new version: the caller's own recipe (the CLI:
 * --namesrv, the script's options, --set), run on a worker thread; it returns 0 with *out, or an
 * error with errstr naming file:line. checkConfig is applied after it. Without one, a reload
 * takes the script's options over the defaults and keeps the running name server. Before run.
 */
typedef int (*rmq_conf_build_cb)(void *ud, const char *script_path, rmq_conf_t **out,
                                 char *errstr, size_t errstr_size);
void rmq__lua_handler_set_conf_builder(rmq_lua_handler_t *lh, rmq_conf_build_cb cb, void *ud);

/* --watch: poll the script and the modules it requires beside it every interval_ms (stat on
 * libuv's worker threads); a change reloads. Before run. */
void rmq__lua_handler_watch(rmq_lua_handler_t *lh, int interval_ms);

/* The consume pool's options for the engine's runner options o (the script, its shared
 * dictionaries). Any thread. */
void rmq__lua_handler_pool_opts(const rmq_lua_handler_t *lh, const rmq_runner_opts_t *o,
                                rmq_pool_opts_t *pl);

#endif
