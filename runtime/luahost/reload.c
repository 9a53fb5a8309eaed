/*
 * reload.c -- hot reload of the consumer script (reload.h): the request (SIGHUP through
 * rmq__consumer_reload, a --watch change), the job on a thread of its own that ends with it
 * (configuration, refused changes, the throwaway check, the new control state, the new pool),
 * and the hand-over on the loop thread (the control state swapped here, the rest adopted by the
 * engine: rmq__consumer_adopt, consumer/reconf.c).
 *
 * Ownership: the Lua handler owns its rmq_reload_t; the job's conf / script / pool belong to it
 * until the hand-over gives them to the handler and the engine (or they are freed); every
 * fs-poll handle is ours (freed in its close callback); each job's rmq_reload_job_t (its thread
 * and the async handle that reports its end) is freed in that handle's close callback, after the
 * thread was joined.
 * Threads: work() on the job's own thread, not on libuv's pool, which a rare job would start for
 * good (four threads held for the life of the process). It reads the engine's running
 * configuration, the handler's path, shared dictionaries and flow, which nothing changes while a
 * job runs: only after_work() has the configuration replaced. Every other function runs on the
 * loop thread, except rmq__reload_new/free (the consumer's own thread, before the loop runs /
 * after it ended) and the setters called before run.
 */
#include "reload.h"

#include "consumer/conf.h"
#include "lua_handler.h"

#include <stdio.h>
#include <stdlib.h>

struct rmq_reload {
    rmq_lua_handler_t *lh;
    rmq_conf_build_cb build;
    void *build_ud;
    int busy;   /* a job runs */
    int again;  /* asked again meanwhile: one more job after it */
    int closed; /* shutting down: no more jobs */
    /* the job's outcome (written by work(), read by after_work()) */
    int failed; /* 1 failed, 2 refused */
    char err[4096];
    rmq_conf_t *conf;
    rmq_script_t *script;
    rmq_pool_t *pool;
    /* --watch */
    int watch_ms;
    uv_fs_poll_t **polls;
    int n_polls;
};

rmq_reload_t *rmq__reload_new(rmq_lua_handler_t *lh)
{
    rmq_reload_t *r = rmq__xcalloc(1, sizeof(*r));
    r->lh = lh;
    return r;
}

void rmq__reload_free(rmq_reload_t *r)
{
    if (!r) return;
    free(r->polls); /* the handles themselves were freed by their close callbacks */
    free(r);
}

void rmq__lua_handler_set_conf_builder(rmq_lua_handler_t *lh, rmq_conf_build_cb cb, void *ud)
{
    lh->reload->build = cb;
    lh->reload->build_ud = ud;
}

void rmq__lua_handler_watch(rmq_lua_handler_t *lh, int interval_ms)
{
    lh->reload->watch_ms = interval_ms > 0 ? interval_ms : 1000;
}

/* ---- the job (worker thread) ----------------------------------------------------------------- */

/* Without the caller's recipe: the script's options over the defaults, the running name server
 * unless the script names one. */
static int default_build(const rmq_conf_t *running, const char *path, rmq_conf_t **out,
                         char *err, size_t errsz)
{
    rmq_conf_t *conf = rmq__conf_new();
    if (running->namesrv_addr &&
        rmq__conf_set(conf, "namesrv_addr", running->namesrv_addr, err, errsz)) {
        rmq__conf_destroy(conf);
        return RMQ_ERR_CONFIG;
    }
    int rc = rmq__script_load(path, conf, NULL, err, errsz);
    if (rc) {
        rmq__conf_destroy(conf);
        return rc;
    }
    *out = conf;
    return 0;
}

static void work(rmq_reload_t *r)
{
    rmq_lua_handler_t *lh = r->lh;
    rmq_consumer_t *c = lh->c;
    const char *path = lh->path;
    char err[3072];
    rmq_conf_t *conf = NULL;
    r->failed = 0;
    r->conf = NULL;
    r->script = NULL;
    r->pool = NULL;
    int rc = r->build ? r->build(r->build_ud, path, &conf, err, sizeof(err))
                      : default_build(rmq__consumer_conf(c), path, &conf, err, sizeof(err));
    if (rc) goto fail;
    char cerr[2048];
    if (rmq__conf_check(conf, cerr, sizeof(cerr))) {
        rmq__seterr(err, sizeof(err), "%s: %s", path, cerr);
        goto fail;
    }
    if (rmq__consumer_conf_refused(c, conf, err, sizeof(err))) {
        rmq__conf_destroy(conf);
        r->failed = 2;
        snprintf(r->err, sizeof(r->err), "%s", err);
        return;
    }
    /* As `rmqlua check` does: load, dispatcher, init and shutdown in a throwaway state. */
    if (rmq__script_check_consume(path, conf->consumer_group, conf->lua_ngx_shim, err,
                                  sizeof(err)))
        goto fail;
    rmq_script_t *script = NULL;
    if (rmq__script_load_ex(path, lh->shdicts, lh->flow, NULL, &script, err, sizeof(err)))
        goto fail;
    rmq_runner_opts_t ro;
    rmq__consumer_runner_opts(c, conf, &ro);
    rmq_pool_opts_t pl;
    rmq__lua_handler_pool_opts(lh, &ro, &pl);
    pl.defer_init = 1;
    rmq_pool_t *pool = NULL;
    if (rmq__pool_prepare(&pl, &pool, err, sizeof(err))) {
        rmq__script_destroy(script);
        goto fail;
    }
    r->conf = conf;
    r->script = script;
    r->pool = pool;
    return;
fail:
    if (conf) rmq__conf_destroy(conf);
    r->failed = 1;
    snprintf(r->err, sizeof(r->err), "%s", err);
}

/* ---- the hand-over (loop thread) ------------------------------------------------------------- */

static void discard(rmq_reload_t *r)
{
    if (r->pool) rmq__pool_discard(r->pool); /* threads waiting for init: they quit at once */
    if (r->script) rmq__script_destroy(r->script);
    if (r->conf) rmq__conf_destroy(r->conf);
    r->pool = NULL;
    r->script = NULL;
    r->conf = NULL;
}

static void watch_update(rmq_reload_t *r);

static void commit(rmq_reload_t *r)
{
    rmq_lua_handler_t *lh = r->lh;
    /* The control state: allocate, on_assign, on_revoke, on_stats (the engine reads the hooks
     * again as it adopts the rest). */
    rmq__script_destroy(lh->script);
    lh->script = r->script;
    r->script = NULL;
    rmq_conf_t *conf = r->conf;
    rmq_pool_t *pool = r->pool;
    r->conf = NULL;
    r->pool = NULL;
    rmq__consumer_adopt(lh->c, conf, (rmq_runner_t *)pool);
    watch_update(r);
}

static void start(rmq_reload_t *r);

/* One job: its thread, and the handle that wakes the loop when it ends. */
typedef struct {
    uv_async_t done;
    uv_thread_t tid;
    rmq_reload_t *r;
} rmq_reload_job_t;

static void job_main(void *arg)
{
    rmq_reload_job_t *j = arg;
    work(j->r);
    rmq__thread_finishing();
    uv_async_send(&j->done);
}

static void on_job_closed(uv_handle_t *h)
{
    free(h->data);
}

static void after_work(uv_async_t *a)
{
    rmq_reload_job_t *j = a->data;
    rmq_reload_t *r = j->r;
    uv_thread_join(&j->tid);
    uv_close((uv_handle_t *)a, on_job_closed);
    rmq_lua_handler_t *lh = r->lh;
    r->busy = 0;
    if (r->closed || !rmq__consumer_can_adopt(lh->c)) {
        discard(r);
        return;
    }
    if (r->failed == 2) {
        rmq_log_error("reload", "reload of %s refused: %s. The previous version keeps running.",
                      lh->path, r->err);
        discard(r);
    } else if (r->failed) {
        rmq_log_error("reload", "reload of %s failed: %s. The previous version keeps running.",
                      lh->path, r->err);
        discard(r);
    } else {
        commit(r);
    }
    if (r->again) {
        r->again = 0;
        start(r);
    }
}

static void start(rmq_reload_t *r)
{
    rmq_lua_handler_t *lh = r->lh;
    if (r->closed || !rmq__consumer_can_adopt(lh->c)) return;
    if (r->busy) {
        r->again = 1;
        return;
    }
    rmq_log_info("reload", "reloading %s", lh->path);
    rmq_reload_job_t *j = rmq__xcalloc(1, sizeof(*j));
    j->r = r;
    j->done.data = j;
    int rc = uv_async_init(rmq__consumer_loop(lh->c), &j->done, after_work);
    if (rc) {
        free(j);
        rmq_log_error("reload", "cannot reload %s: %s", lh->path, uv_strerror(rc));
        return;
    }
    r->busy = 1;
    rc = uv_thread_create(&j->tid, job_main, j);
    if (rc) {
        r->busy = 0;
        uv_close((uv_handle_t *)&j->done, on_job_closed);
        rmq_log_error("reload", "cannot reload %s: %s", lh->path, uv_strerror(rc));
    }
}

void rmq__reload_request(rmq_lua_handler_t *lh)
{
    start(lh->reload);
}

/* ---- --watch ----------------------------------------------------------------------------------- */

static void on_poll_closed(uv_handle_t *h)
{
    free(h);
}

static void on_poll(uv_fs_poll_t *h, int status, const uv_stat_t *prev, const uv_stat_t *curr)
{
    (void)prev;
    (void)curr;
    rmq_reload_t *r = h->data;
    if (status < 0) return; /* gone for now (an editor replacing it): the next change counts */
    char path[4096];
    size_t n = sizeof(path);
    if (uv_fs_poll_getpath(h, path, &n)) snprintf(path, sizeof(path), "?");
    rmq_log_info("reload", "%s changed", path);
    start(r);
}

/* Poll every file of the running script; polls of files still in the list keep their last
 * look, so a change made while a reload ran is not missed. */
static void watch_update(rmq_reload_t *r)
{
    rmq_lua_handler_t *lh = r->lh;
    if (!r->watch_ms || r->closed || !lh->script) return;
    int nf = 0;
    const char *const *files = rmq__script_files(lh->script, &nf);
    uv_fs_poll_t **keep = rmq__xcalloc((size_t)nf + 1, sizeof(*keep));
    for (int i = 0; i < r->n_polls; i++) {
        uv_fs_poll_t *h = r->polls[i];
        char path[4096];
        size_t n = sizeof(path);
        int found = -1;
        if (!uv_fs_poll_getpath(h, path, &n))
            for (int k = 0; k < nf && found < 0; k++)
                if (!keep[k] && !strcmp(files[k], path)) found = k;
        if (found >= 0)
            keep[found] = h;
        else
            uv_close((uv_handle_t *)h, on_poll_closed);
    }
    for (int k = 0; k < nf; k++) {
        if (keep[k]) continue;
        uv_fs_poll_t *h = rmq__xcalloc(1, sizeof(*h));
        uv_fs_poll_init(rmq__consumer_loop(lh->c), h);
        h->data = r;
        int rc = uv_fs_poll_start(h, on_poll, files[k], (unsigned)r->watch_ms);
        if (rc) {
            rmq_log_warn("reload", "cannot watch %s: %s", files[k], uv_strerror(rc));
            uv_close((uv_handle_t *)h, on_poll_closed);
            continue;
        }
        rmq_dbg(RMQ_DBG_LUA, "reload", "watching %s every %d ms", files[k], r->watch_ms);
        keep[k] = h;
    }
    free(r->polls);
    r->polls = keep;
    r->n_polls = 0;
    for (int k = 0; k < nf; k++)
        if (keep[k]) keep[r->n_polls++] = keep[k];
}

void rmq__reload_start(rmq_lua_handler_t *lh)
{
    rmq_reload_t *r = lh->reload;
    if (!r->watch_ms) return;
    watch_update(r);
    rmq_log_info("reload", "watching %s and %d module(s) beside it (--watch)", lh->path,
                 r->n_polls > 0 ? r->n_polls - 1 : 0);
}

void rmq__reload_close(rmq_lua_handler_t *lh)
{
    rmq_reload_t *r = lh->reload;
    if (!r || r->closed) return;
    r->closed = 1;
    for (int i = 0; i < r->n_polls; i++) uv_close((uv_handle_t *)r->polls[i], on_poll_closed);
    r->n_polls = 0;
    /* A job running ends on its own; after_work discards what it made. */
}
