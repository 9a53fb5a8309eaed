/*
 * lua_handler.c -- the Lua host's implementation of the engine's handler interface
 * (lua_handler.h, consumer/handler.h): the consume side is a consume pool, the control side the
 * script's control state, the lifecycle the reload (reload.c).
 *
 * Ownership: see lua_handler.h; a runner the engine starts is a consume pool, owned by the
 * engine until its close callback ran.
 * Threads: bind and new/free on the consumer's own thread; every other op on the loop thread.
 */
#include "lua_handler.h"

#include "lua_state.h"
#include "reload.h"
#include "shdict.h"

#include <stdlib.h>
#include <string.h>

/* ---- lifecycle --------------------------------------------------------------------------------- */

static int lh_bind(void *impl, rmq_consumer_t *c, rmq_flow_t *flow, char *errstr,
                   size_t errstr_size)
{
    rmq_lua_handler_t *lh = impl;
    lh->c = c;
    lh->flow = flow;
    return rmq__script_load_ex(lh->path, lh->shdicts, flow, NULL, &lh->script, errstr,
                               errstr_size);
}

static void lh_run(void *impl)
{
    rmq__reload_start(impl);
}

static void lh_reload(void *impl)
{
    rmq__reload_request(impl);
}

static void lh_close(void *impl)
{
    rmq__reload_close(impl);
}

static const char *lh_name(void *impl)
{
    return ((rmq_lua_handler_t *)impl)->path;
}

/* ---- consume side: the consume pool ------------------------------------------------------------ */

#define POOL(r) ((rmq_pool_t *)(r))
#define CPOOL(r) ((const rmq_pool_t *)(r))

void rmq__lua_handler_pool_opts(const rmq_lua_handler_t *lh, const rmq_runner_opts_t *o,
                                rmq_pool_opts_t *pl)
{
    memset(pl, 0, sizeof(*pl));
    pl->script_path = lh->path;
    pl->nthreads = o->nthreads;
    pl->loop = o->loop;
    pl->done = o->done;
    pl->ud = o->ud;
    pl->consumer_group = o->consumer_group;
    pl->consume_timeout_ms = o->consume_timeout_ms;
    pl->lua_memory_limit_kb = o->memory_limit_kb;
    pl->socket_max = o->socket_max;
    pl->ssl_ca_file = o->ssl_ca_file;
    pl->ssl_verify_depth = o->ssl_verify_depth;
    pl->ngx_shim = o->ngx_shim ? RMQ_NGX_ON : RMQ_NGX_OFF;
    pl->batches_per_thread = o->batches_per_thread;
    pl->begin = o->begin;
    pl->shdicts = lh->shdicts;
    pl->flow = o->flow;
    pl->ran = o->ran;
    pl->abandoned = o->abandoned;
}

static int lh_start(void *impl, const rmq_runner_opts_t *o, rmq_runner_t **out, char *errstr,
                    size_t errstr_size)
{
    rmq_pool_opts_t pl;
    rmq__lua_handler_pool_opts(impl, o, &pl);
    rmq_pool_t *p = NULL;
    int rc = rmq__pool_start(&pl, &p, errstr, errstr_size);
    *out = (rmq_runner_t *)p;
    return rc;
}

static void lh_attach(rmq_runner_t *r) { rmq__pool_attach(POOL(r)); }
static void lh_go(rmq_runner_t *r) { rmq__pool_go(POOL(r)); }
static void lh_submit(rmq_runner_t *r, rmq_batch_t *b) { rmq__pool_submit(POOL(r), b); }
static void lh_submit_to(rmq_runner_t *r, int i, rmq_batch_t *b)
{
    rmq__pool_submit_to(POOL(r), i, b);
}
static void lh_hold(rmq_runner_t *r) { rmq__pool_hold(POOL(r)); }
static void lh_flush(rmq_runner_t *r) { rmq__pool_flush(POOL(r)); }
static int lh_nthreads(const rmq_runner_t *r) { return rmq__pool_nthreads(CPOOL(r)); }
static int64_t lh_memory(const rmq_runner_t *r, int i) { return rmq__pool_lua_memory(CPOOL(r), i); }
static int lh_retire(rmq_runner_t *r, rmq_handler_done_cb requeue, void (*close_cb)(void *),
                     void *ud)
{
    return rmq__pool_retire(POOL(r), requeue, close_cb, ud);
}
static void lh_hurry(rmq_runner_t *r, int64_t await_ms) { rmq__pool_hurry(POOL(r), await_ms); }
static void lh_stop(rmq_runner_t *r, int64_t await_ms, void (*close_cb)(void *), void *ud)
{
    rmq__pool_stop(POOL(r), await_ms, close_cb, ud);
}

/* ---- control side: the control state ----------------------------------------------------------- */

static unsigned lh_hooks(void *impl)
{
    rmq_lua_handler_t *lh = impl;
    return lh->script ? rmq__script_hooks(lh->script) : 0;
}

static int lh_allocate(void *impl, const char *group, const char *client_id,
                       const rmq_mq_t *mq_all, int n_mq, const char *const *cid_all, int n_cid,
                       int *out_idx, char *errstr, size_t errstr_size)
{
    return rmq__script_allocate(((rmq_lua_handler_t *)impl)->script, group, client_id, mq_all,
                                n_mq, cid_all, n_cid, out_idx, errstr, errstr_size);
}

static void lh_on_assign(void *impl, const rmq_mq_t *mqs, int n)
{
    rmq__script_on_assign(((rmq_lua_handler_t *)impl)->script, mqs, n);
}

static void lh_on_revoke(void *impl, const rmq_mq_t *mqs, int n)
{
    rmq__script_on_revoke(((rmq_lua_handler_t *)impl)->script, mqs, n);
}

static void lh_on_stats(void *impl, const rmq_stats_snap_t *snap)
{
    rmq_lua_handler_t *lh = impl;
    if (lh->script) rmq__script_on_stats(lh->script, snap);
}

static const rmq_handler_ops_t lua_ops = {
    .bind = lh_bind,
    .run = lh_run,
    .reload = lh_reload,
    .close = lh_close,
    .name = lh_name,
    .start = lh_start,
    .attach = lh_attach,
    .go = lh_go,
    .submit = lh_submit,
    .submit_to = lh_submit_to,
    .hold = lh_hold,
    .flush = lh_flush,
    .nthreads = lh_nthreads,
    .memory = lh_memory,
    .batch_release = rmq__pool_batch_release,
    .retire = lh_retire,
    .hurry = lh_hurry,
    .stop = lh_stop,
    .hooks = lh_hooks,
    .allocate = lh_allocate,
    .on_assign = lh_on_assign,
    .on_revoke = lh_on_revoke,
    .on_stats = lh_on_stats,
};

rmq_lua_handler_t *rmq__lua_handler_new(const char *script_path)
{
    rmq_lua_handler_t *lh = rmq__xcalloc(1, sizeof(*lh));
    lh->h.ops = &lua_ops;
    lh->h.impl = lh;
    lh->path = rmq__xstrdup(script_path);
    lh->shdicts = rmq_shdicts_new();
    lh->reload = rmq__reload_new(lh);
    return lh;
}

void rmq__lua_handler_free(rmq_lua_handler_t *lh)
{
    if (!lh) return;
    if (lh->script) rmq__script_destroy(lh->script);
    rmq_shdicts_free(lh->shdicts); /* after every state that used it is closed */
    rmq__reload_free(lh->reload);
    free(lh->path);
    free(lh);
}
