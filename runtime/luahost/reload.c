/*
 * reload.c -- hot reload of the consumer script (reload.h): the request (SIGHUP through
 * rmq__consumer_reload, a --watch change), the job on a libuv worker thread (configuration,
 * refused changes, the throwaway check, the new control state, the new pool), and the switch on
 * the loop thread.
 *
 * Ownership: the consumer owns its rmq_reload_t; the job's conf / script / pool belong to it
 * until the switch hands them to the consumer (or they are freed); replaced configurations stay
 * here until rmq__reload_free; every fs-poll handle is ours (freed in its close callback).
 * Threads: work() on a libuv worker thread (it reads c->conf, c->script_path, c->shdicts and
 * c->flow, which nothing changes while a job runs: only after_work() replaces c->conf); every
 * other function on the loop thread, except rmq__reload_new/free (the consumer's own thread,
 * before the loop runs / after it ended) and the setters called before run.
 */
#include "reload.h"

#include "consumer/consumer_int.h"
#include "protocol/route.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct retiring {
    rmq_reload_t *r;
    rmq_pool_t *pool;
} retiring_t;

struct rmq_reload {
    rmq_consumer_t *c;
    rmq_conf_build_cb build;
    void *build_ud;
    int busy;   /* a job runs */
    int again;  /* asked again meanwhile: one more job after it */
    int closed; /* shutting down: no more jobs */
    int count;  /* reloads that took effect */
    uv_work_t work;
    /* the job's outcome (written by work(), read by after_work()) */
    int failed; /* 1 failed, 2 refused */
    char err[4096];
    rmq_conf_t *conf;
    rmq_script_t *script;
    rmq_pool_t *pool;
    /* the consumer's pool waits for the retired ones before running init */
    int pool_waiting;
    retiring_t **retiring;
    int n_retiring;
    /* configurations replaced by a reload */
    rmq_conf_t **old;
    int n_old;
    /* --watch */
    int watch_ms;
    uv_fs_poll_t **polls;
    int n_polls;
};

rmq_reload_t *rmq__reload_new(rmq_consumer_t *c)
{
    rmq_reload_t *r = rmq__xcalloc(1, sizeof(*r));
    r->c = c;
    r->work.data = r;
    return r;
}

void rmq__reload_free(rmq_reload_t *r)
{
    if (!r) return;
    for (int i = 0; i < r->n_old; i++) rmq__conf_destroy(r->old[i]);
    free(r->old);
    free(r->retiring);
    free(r->polls); /* the handles themselves were freed by their close callbacks */
    free(r);
}

void rmq__consumer_set_conf_builder(rmq_consumer_t *c, rmq_conf_build_cb cb, void *ud)
{
    c->reload->build = cb;
    c->reload->build_ud = ud;
}

void rmq__consumer_watch(rmq_consumer_t *c, int interval_ms)
{
    c->reload->watch_ms = interval_ms > 0 ? interval_ms : 1000;
}

int rmq__reload_count(const rmq_consumer_t *c)
{
    return c->reload ? c->reload->count : 0;
}

/* ---- the job (worker thread) ----------------------------------------------------------------- */

/* Without the caller's recipe: the script's options over the defaults, the running name server
 * unless the script names one. */
static int default_build(rmq_consumer_t *c, const char *path, rmq_conf_t **out, char *err,
                         size_t errsz)
{
    rmq_conf_t *conf = rmq__conf_new();
    if (c->conf->namesrv_addr &&
        rmq__conf_set(conf, "namesrv_addr", c->conf->namesrv_addr, err, errsz)) {
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

/* What cannot change while the consumer runs: the engine, its connections or its identity at
 * the brokers were built from them (a restart applies them). */
static const struct {
    const char *name;
    const char *why;
} fixed[] = {
    {"consumer_group", "the group the brokers know this consumer by"},
    {"message_model", "offsets live on the broker or in a local file from the start"},
    {"message_listener", "the script switched between consume and consume_orderly"},
    {"namespace", "it names the group and the topics at the brokers"},
    {"instance_name", "part of the clientId"},
    {"unit_name", "part of the clientId"},
    {"client_ip", "part of the clientId"},
    {"enable_stream_request_type", "part of the clientId"},
    {"namesrv_addr", "the connections to the name servers are made at start"},
    {"frame_max_length", "the connections are made with it"},
    {"vip_channel_enabled", "the connections are made with it"},
    {"access_key", "requests are signed with the keys given at start"},
    {"secret_key", "requests are signed with the keys given at start"},
    {"security_token", "requests are signed with the keys given at start"},
    {"use_tls", "the connections are made with it"},
    {"tls_test_mode_enable", "the connections are made with it"},
    {"tls_client_cert_path", "the TLS context was loaded at start"},
    {"tls_client_key_path", "the TLS context was loaded at start"},
    {"tls_client_key_password", "the TLS context was loaded at start"},
    {"tls_client_trust_cert_path", "the TLS context was loaded at start"},
    {"tls_client_auth_server", "the TLS context was loaded at start"},
    {"tls_verify_server_name", "the TLS context was loaded at start"},
    {"local_offset_store_dir", "the offset file was opened at start"},
    {"log_format", "the log writer was started with it"},
    {"log_file", "the log writer opened it at start (SIGUSR1 reopens it)"},
    {"metrics_listen", "the metrics endpoint was started on it"},
};

static int same_value(const rmq_conf_t *a, const rmq_conf_t *b, const rmq_conf_prop_t *p)
{
    const char *pa = (const char *)a + p->offset, *pb = (const char *)b + p->offset;
    switch (p->type) {
    case RMQ_CONF_STRING: {
        const char *x = *(char *const *)pa, *y = *(char *const *)pb;
        return (!x && !y) || (x && y && !strcmp(x, y));
    }
    case RMQ_CONF_INT64:
        return *(const int64_t *)pa == *(const int64_t *)pb;
    default:
        return *(const int *)pa == *(const int *)pb;
    }
}

/* 0, or 1 with err saying which option changed that cannot. */
static int refused(const rmq_conf_t *cur, const rmq_conf_t *next, char *err, size_t errsz)
{
    for (size_t i = 0; i < RMQ_ARRAY_SIZE(fixed); i++) {
        const rmq_conf_prop_t *p = rmq__conf_prop_find(fixed[i].name);
        if (!p || same_value(cur, next, p)) continue;
        char a[256], b[256];
        rmq__conf_get(cur, p->name, a, sizeof(a));
        rmq__conf_get(next, p->name, b, sizeof(b));
        rmq__seterr(err, errsz,
                    "%s cannot change while the consumer runs (\"%s\" -> \"%s\": %s); restart "
                    "rmqlua to change it",
                    p->name, a, b, fixed[i].why);
        return 1;
    }
    return 0;
}

static void work(uv_work_t *w)
{
    rmq_reload_t *r = w->data;
    rmq_consumer_t *c = r->c;
    const char *path = c->script_path;
    char err[3072];
    rmq_conf_t *conf = NULL;
    r->failed = 0;
    r->conf = NULL;
    r->script = NULL;
    r->pool = NULL;
    int rc = r->build ? r->build(r->build_ud, path, &conf, err, sizeof(err))
                      : default_build(c, path, &conf, err, sizeof(err));
    if (rc) goto fail;
    char cerr[2048];
    if (rmq__conf_check(conf, cerr, sizeof(cerr))) {
        rmq__seterr(err, sizeof(err), "%s: %s", path, cerr);
        goto fail;
    }
    if (refused(c->conf, conf, err, sizeof(err))) {
        rmq__conf_destroy(conf);
        r->failed = 2;
        snprintf(r->err, sizeof(r->err), "%s", err);
        return;
    }
    /* As `rmqlua check` does: load, dispatcher, init and shutdown in a throwaway state. */
    if (rmq__script_check_consume(path, conf->consumer_group, err, sizeof(err))) goto fail;
    rmq_script_t *script = NULL;
    if (rmq__script_load_ex(path, c->shdicts, c->flow, NULL, &script, err, sizeof(err)))
        goto fail;
    rmq_pool_opts_t pl = {0};
    pl.script_path = path;
    pl.nthreads = conf->consume_thread_min;
    pl.loop = &c->loop;
    pl.done = rmq__consume_done;
    pl.ud = c;
    pl.consumer_group = conf->consumer_group;
    pl.consume_timeout_ms = rmq__conf_consume_timeout_ms(conf);
    pl.lua_memory_limit_kb = (int64_t)conf->lua_memory_limit_mb * 1024;
    pl.begin = rmq__consume_begin;
    pl.ran = rmq__stats_ran;
    pl.abandoned = rmq__consume_abandoned;
    pl.shdicts = c->shdicts;
    pl.flow = c->flow;
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

/* ---- the switch (loop thread) ---------------------------------------------------------------- */

static void discard(rmq_reload_t *r)
{
    if (r->pool) rmq__pool_discard(r->pool); /* threads waiting for init: they quit at once */
    if (r->script) rmq__script_destroy(r->script);
    if (r->conf) rmq__conf_destroy(r->conf);
    r->pool = NULL;
    r->script = NULL;
    r->conf = NULL;
}

/* A retired pool's batch that did not run: to the consumer's pool (it runs there once), or,
 * with no pool left (shutting down), through the usual not-run path. */
static void requeue(void *ud, rmq_batch_t *b)
{
    rmq_consumer_t *c = ud;
    rmq_cbatch_t *cb = b->internal;
    if (!c->pool) {
        rmq__consume_done(c, b);
        return;
    }
    (void)cb;
    b->status = RMQ_CONSUME_SUCCESS;
    b->ack_count = b->n;
    rmq__pool_submit(c->pool, b); /* orderly batches too: any thread takes a queue's batch */
}

static void on_retired(void *ud)
{
    retiring_t *rt = ud;
    rmq_reload_t *r = rt->r;
    rmq_consumer_t *c = r->c;
    for (int i = 0; i < r->n_retiring; i++)
        if (r->retiring[i] == rt) {
            r->retiring[i] = r->retiring[--r->n_retiring];
            break;
        }
    free(rt);
    c->n_retiring--;
    /* Stopping too: the batches handed over are consumed within the stop's wait
     * (await_termination_millis_when_shutdown), as a stop without a reload consumes those
     * queued; a pool that never starts would only hold them until the deadline. */
    if (c->n_retiring == 0 && r->pool_waiting && c->pool &&
        (c->state == RMQ_CLIENT_RUNNING || c->state == RMQ_CLIENT_DRAINING)) {
        r->pool_waiting = 0;
        rmq__pool_go(c->pool); /* the old shutdown hooks ran: the new states run init */
        rmq_log_info("reload", "the previous version finished: %d consume thread(s) run %s now",
                     rmq__pool_nthreads(c->pool), c->script_path);
    }
    if (c->state == RMQ_CLIENT_DRAINING) rmq__c_shutdown_resume(c);
}

static int same_subs(const rmq_conf_t *a, const rmq_conf_t *b)
{
    if (a->n_subs != b->n_subs) return 0;
    for (int i = 0; i < a->n_subs; i++) {
        int found = 0;
        for (int j = 0; j < b->n_subs && !found; j++)
            found = !strcmp(a->subs[i].topic, b->subs[j].topic) &&
                    !strcmp(a->subs[i].expression, b->subs[j].expression) &&
                    !strcmp(a->subs[i].type ? a->subs[i].type : "TAG",
                            b->subs[j].type ? b->subs[j].type : "TAG");
        if (!found) return 0;
    }
    return 1;
}

/* New subscriptions: entries of topics still subscribed keep their route, queues and counters
 * (and their SubscriptionData when the expression is the same, so the subVersion stays);
 * queues of a topic no longer subscribed are dropped (their offsets persisted) and reported to
 * on_revoke. Replies asked for with the old entries are ignored (subs_gen). */
static void apply_subs(rmq_consumer_t *c)
{
    char err[512];
    rmq_csub_t *ns = NULL;
    int nn = 0;
    if (rmq__c_build_subs(c, c->conf, &ns, &nn, err, sizeof(err))) {
        rmq_log_error("reload", "subscriptions not changed: %s", err);
        return;
    }
    /* Queues of topics no longer subscribed leave first, while every route is still known
     * (their offsets are persisted to their brokers). */
    int nq = 0;
    for (rmq_qent_t *q = c->queues; q; q = q->next) nq++;
    rmq_qent_t **gone = rmq__xcalloc((size_t)nq + 1, sizeof(*gone));
    rmq_mq_t *gone_mqs = rmq__xcalloc((size_t)nq + 1, sizeof(*gone_mqs));
    int ng = 0;
    for (rmq_qent_t *q = c->queues; q; q = q->next) {
        int kept = 0;
        for (int i = 0; i < nn && !kept; i++) kept = !strcmp(ns[i].sd->topic, q->mq.topic);
        if (!kept) gone[ng++] = rmq__qent_keep(q);
    }
    for (int i = 0; i < ng; i++) {
        rmq_log_info("reload", "%s: revoked (its topic is no longer subscribed)", gone[i]->name);
        gone_mqs[i] = gone[i]->mq; /* borrowed until the hook ran */
        gone[i]->sub = NULL;
        rmq__rb_drop_queue(c, gone[i], 1);
    }
    if (ng && c->script && (c->hooks & RMQ_HOOK_ON_REVOKE))
        rmq__script_on_revoke(c->script, gone_mqs, ng);
    for (int i = 0; i < ng; i++) rmq__qent_release(gone[i]);
    free(gone);
    free(gone_mqs);
    /* The new entries take over the old ones of the same topic. */
    rmq_route_t **nr = rmq__xcalloc((size_t)nn + 1, sizeof(*nr));
    for (int i = 0; i < nn; i++) {
        int carried = 0;
        for (int j = 0; j < c->n_subs && !carried; j++) {
            rmq_csub_t *o = &c->subs[j];
            if (!o->sd || strcmp(o->sd->topic, ns[i].sd->topic)) continue;
            rmq_sub_t *nsd = ns[i].sd;
            ns[i] = *o; /* route, queues, counters */
            ns[i].route_inflight = 0;
            if (!strcmp(o->sd->sub_string, nsd->sub_string) &&
                !strcmp(o->sd->expression_type, nsd->expression_type)) {
                rmq__sub_destroy(nsd); /* the same: its subVersion stays */
            } else {
                rmq_log_info("reload", "subscription of %s: \"%s\" -> \"%s\"", nsd->topic,
                             o->sd->sub_string, nsd->sub_string);
                rmq__sub_destroy(o->sd);
                ns[i].sd = nsd;
            }
            o->sd = NULL;
            o->mqs = NULL;
            o->n_mqs = 0;
            nr[i] = c->routes[j];
            c->routes[j] = NULL;
            carried = 1;
        }
        if (!carried)
            rmq_log_info("reload", "subscribed to %s (\"%s\")", ns[i].sd->topic,
                         ns[i].sd->sub_string);
    }
    /* Every live entry, not only those in the table: a queue revoked (or dropped for
     * OFFSET_ILLEGAL / pull expiry) while its batch runs, or with a send-back in flight, lives
     * on outside the table and still counts its results into its topic's statistics; its
     * pointer into the array freed below would be a use after free when they come back. */
    for (rmq_qent_t *q = c->live; q; q = q->live_next) {
        q->sub = NULL;
        for (int i = 0; i < nn && !q->sub; i++)
            if (!strcmp(ns[i].sd->topic, q->mq.topic)) q->sub = &ns[i];
    }
    for (int j = 0; j < c->n_subs; j++) {
        if (c->subs[j].sd) {
            rmq_log_info("reload", "unsubscribed from %s", c->subs[j].sd->topic);
            rmq__sub_destroy(c->subs[j].sd);
        }
        rmq__mqs_free(c->subs[j].mqs, c->subs[j].n_mqs);
        if (c->routes[j]) rmq__route_free(c->routes[j]);
    }
    free(c->subs);
    free(c->routes);
    c->subs = ns;
    c->n_subs = nn;
    c->routes = nr;
    c->subs_gen++;
}

static void retimer(uv_timer_t *t, int64_t old_ms, int64_t new_ms)
{
    if (old_ms == new_ms || !uv_is_active((uv_handle_t *)t)) return;
    uv_timer_set_repeat(t, (uint64_t)new_ms);
    uv_timer_again(t);
}

static void watch_update(rmq_reload_t *r);

static void commit(rmq_reload_t *r)
{
    rmq_consumer_t *c = r->c;
    rmq_conf_t *old = c->conf;
    const rmq_conf_t *cf = r->conf;
    r->old = realloc(r->old, sizeof(*r->old) * (size_t)(r->n_old + 1));
    if (!r->old) abort();
    r->old[r->n_old++] = old;
    c->conf = r->conf;
    r->conf = NULL;
    /* The control state: allocate, on_assign, on_revoke. */
    rmq__script_destroy(c->script);
    c->script = r->script;
    r->script = NULL;
    c->hooks = rmq__script_hooks(c->script);
    c->max_reconsume = cf->max_reconsume_times >= 0 ? cf->max_reconsume_times
                       : c->orderly                 ? INT_MAX
                                                    : RMQ_MAX_RECONSUME_DEFAULT;
    const rmq_conf_prop_t *ld = rmq__conf_prop_find("log_debug");
    if (ld && !same_value(old, cf, ld)) {
        char err[256];
        if (rmq_log_set_debug(cf->log_debug ? cf->log_debug : "", err, sizeof(err)) < 0)
            rmq_log_warn("reload", "log_debug: %s", err);
    }
    int subs_changed = !same_subs(old, cf);
    if (subs_changed) apply_subs(c);
    /* Flow control thresholds, as the rebalance derives them. */
    c->thr_queue = cf->pull_threshold_for_queue;
    c->thr_size_queue = cf->pull_threshold_size_for_queue;
    rmq__rb_flow_thresholds(c);
    rmq__flow_set_limit(c->flow, cf->consume_tps_limit, cf->pull_batch_size);
    rmq__stats_reconf(c); /* the new script's on_stats hook and stats_interval_ms */
    retimer(&c->t_route, old->poll_name_server_interval, cf->poll_name_server_interval);
    retimer(&c->t_heartbeat, old->heartbeat_broker_interval, cf->heartbeat_broker_interval);
    retimer(&c->t_persist, old->persist_consumer_offset_interval,
            cf->persist_consumer_offset_interval);
    retimer(&c->t_expire, rmq__conf_consume_timeout_ms(old), rmq__conf_consume_timeout_ms(cf));
    /* The inner producer (rmq.send, send-backs when the broker refuses them, orderly DLQ
     * sends) shares the client instance's route refresh period, request timeout and unitMode
     * (MQClientInstance: one ClientConfig for the consumer and its inner producer). */
    if (c->producer)
        rmq__producer_reconf(c->producer, cf->poll_name_server_interval,
                             cf->mq_client_api_timeout, cf->unit_mode);
    /* The consume threads: the new pool takes every batch from now on; the old one hands over
     * what it has not started, finishes what runs, then runs its shutdown hooks; then the new
     * states run init. */
    rmq_pool_t *prev = c->pool;
    rmq__pool_attach(r->pool);
    c->pool = r->pool;
    r->pool = NULL;
    r->pool_waiting = 1;
    r->count++;
    if (prev) {
        retiring_t *rt = rmq__xcalloc(1, sizeof(*rt));
        rt->r = r;
        rt->pool = prev;
        r->retiring = realloc(r->retiring, sizeof(*r->retiring) * (size_t)(r->n_retiring + 1));
        if (!r->retiring) abort();
        r->retiring[r->n_retiring++] = rt;
        c->n_retiring++;
        int handed = rmq__pool_retire(prev, requeue, on_retired, rt);
        rmq_log_info("reload",
                     "reloaded %s (reload %d): %d consume thread(s), %d subscription(s); %d "
                     "queued batch(es) moved to the new threads, the previous version finishes "
                     "its running batches first",
                     c->script_path, r->count, cf->consume_thread_min, c->n_subs, handed);
    } else {
        rmq_log_info("reload", "reloaded %s (reload %d): %d consume thread(s), %d subscription(s)",
                     c->script_path, r->count, cf->consume_thread_min, c->n_subs);
        r->pool_waiting = 0;
        rmq__pool_go(c->pool);
    }
    /* The brokers learn the new subscriptions, then a rebalance (strategy, threads, topics). */
    if (subs_changed) rmq__c_refresh_routes(c);
    rmq__c_heartbeat_rebalance(c);
    watch_update(r);
}

static void start(rmq_reload_t *r);

static void after_work(uv_work_t *w, int status)
{
    rmq_reload_t *r = w->data;
    rmq_consumer_t *c = r->c;
    r->busy = 0;
    if (status || r->closed || c->state != RMQ_CLIENT_RUNNING) {
        discard(r);
        return;
    }
    if (r->failed == 2) {
        rmq_log_error("reload", "reload of %s refused: %s. The previous version keeps running.",
                      c->script_path, r->err);
        discard(r);
    } else if (r->failed) {
        rmq_log_error("reload", "reload of %s failed: %s. The previous version keeps running.",
                      c->script_path, r->err);
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
    rmq_consumer_t *c = r->c;
    if (r->closed || c->state != RMQ_CLIENT_RUNNING || !c->script_path) return;
    if (r->busy) {
        r->again = 1;
        return;
    }
    rmq_log_info("reload", "reloading %s", c->script_path);
    r->busy = 1;
    int rc = uv_queue_work(&c->loop, &r->work, work, after_work);
    if (rc) {
        r->busy = 0;
        rmq_log_error("reload", "cannot reload %s: %s", c->script_path, uv_strerror(rc));
    }
}

void rmq__reload_request(rmq_consumer_t *c)
{
    start(c->reload);
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
    rmq_consumer_t *c = r->c;
    if (!r->watch_ms || r->closed || !c->script) return;
    int nf = 0;
    const char *const *files = rmq__script_files(c->script, &nf);
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
        uv_fs_poll_init(&c->loop, h);
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

void rmq__reload_start(rmq_consumer_t *c)
{
    rmq_reload_t *r = c->reload;
    if (!r->watch_ms) return;
    watch_update(r);
    rmq_log_info("reload", "watching %s and %d module(s) beside it (--watch)", c->script_path,
                 r->n_polls > 0 ? r->n_polls - 1 : 0);
}

void rmq__reload_close(rmq_consumer_t *c)
{
    rmq_reload_t *r = c->reload;
    if (!r || r->closed) return;
    r->closed = 1;
    for (int i = 0; i < r->n_polls; i++) uv_close((uv_handle_t *)r->polls[i], on_poll_closed);
    r->n_polls = 0;
    /* Pools still finishing a reload: their handlers get what a shutdown gives them. */
    for (int i = 0; i < r->n_retiring; i++)
        rmq__pool_hurry(r->retiring[i]->pool, c->conf->await_termination_millis_when_shutdown);
    if (r->busy) uv_cancel((uv_req_t *)&r->work); /* after_work discards what it made */
}
