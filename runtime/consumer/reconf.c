/*
 * reconf.c -- a reload's new version taking over (handler.h: rmq__consumer_adopt): the new
 * configuration, the subscriptions rebuilt, the thresholds, timers and inner producer that
 * follow it, and the runner switch (the previous runner retired, its queued batches moved to
 * the new one, which goes once every retired runner closed). Also what a handler's reload reads
 * of the engine (the running configuration, the runner options, the options that cannot
 * change while the consumer runs).
 *
 * Ownership: the consumer owns its rmq_reconf_t; configurations a reload replaced stay here until
 * rmq__reconf_free (nothing else holds them, but they are cheap and it keeps every pointer
 * valid); a retired runner is the engine's until its close callback ran.
 * Threads: rmq__consumer_runner_opts and rmq__consumer_conf_refused on any thread (a handler's
 * reload job on a worker thread: they read c->conf, which only rmq__consumer_adopt replaces);
 * rmq__reconf_new/free on the consumer's own thread (before the loop runs / after it ended);
 * everything else on the loop thread.
 */
#include "consumer_int.h"

#include "protocol/route.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct retiring {
    rmq_consumer_t *c;
    rmq_runner_t *runner;
} retiring_t;

struct rmq_reconf {
    int count;        /* reloads that took effect */
    int pool_waiting; /* the consumer's runner waits for the retired ones before it goes */
    retiring_t **retiring;
    int n_retiring;
    rmq_conf_t **old; /* configurations replaced by a reload */
    int n_old;
};

struct rmq_reconf *rmq__reconf_new(void)
{
    return rmq__xcalloc(1, sizeof(struct rmq_reconf));
}

void rmq__reconf_free(struct rmq_reconf *r)
{
    if (!r) return;
    for (int i = 0; i < r->n_old; i++) rmq__conf_destroy(r->old[i]);
    free(r->old);
    free(r->retiring);
    free(r);
}

const rmq_conf_t *rmq__consumer_conf(const rmq_consumer_t *c)
{
    return c->conf;
}

uv_loop_t *rmq__consumer_loop(rmq_consumer_t *c)
{
    return &c->loop;
}

int rmq__consumer_can_adopt(const rmq_consumer_t *c)
{
    return c->state == RMQ_CLIENT_RUNNING;
}

int rmq__consumer_reload_count(const rmq_consumer_t *c)
{
    return c->reconf ? c->reconf->count : 0;
}

void rmq__consumer_runner_opts(rmq_consumer_t *c, const rmq_conf_t *cf, rmq_runner_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->loop = &c->loop;
    o->nthreads = cf->consume_thread_min;
    o->consumer_group = cf->consumer_group;
    o->consume_timeout_ms = rmq__conf_consume_timeout_ms(cf);
    o->memory_limit_kb = (int64_t)cf->lua_memory_limit_mb * 1024;
    o->socket_max = cf->lua_socket_max_per_thread;
    o->ssl_ca_file = cf->lua_ssl_trusted_certificate;
    o->ssl_verify_depth = cf->lua_ssl_verify_depth;
    o->ngx_shim = cf->lua_ngx_shim;
    o->batches_per_thread = cf->consume_batches_per_thread;
    o->flow = c->flow;
    o->ud = c;
    o->done = rmq__consume_done;
    o->begin = rmq__consume_begin;
    o->ran = rmq__stats_ran;
    o->abandoned = rmq__consume_abandoned;
}

/* ---- what cannot change ---------------------------------------------------------------------- */

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
    {"namesrv_domain", "the address service is asked from start"},
    {"namesrv_domain_subgroup", "the address service is asked from start"},
    {"namesrv_addr_refresh_interval", "the address service is asked from start"},
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
    {"client_rebalance", "the POP retry topics were subscribed at start"},
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

int rmq__consumer_conf_refused(const rmq_consumer_t *c, const rmq_conf_t *next, char *errstr,
                               size_t errstr_size)
{
    const rmq_conf_t *cur = c->conf;
    for (size_t i = 0; i < RMQ_ARRAY_SIZE(fixed); i++) {
        const rmq_conf_prop_t *p = rmq__conf_prop_find(fixed[i].name);
        if (!p || same_value(cur, next, p)) continue;
        char a[256], b[256];
        rmq__conf_get(cur, p->name, a, sizeof(a));
        rmq__conf_get(next, p->name, b, sizeof(b));
        rmq__seterr(errstr, errstr_size,
                    "%s cannot change while the consumer runs (\"%s\" -> \"%s\": %s); restart "
                    "rmqlua to change it",
                    p->name, a, b, fixed[i].why);
        return 1;
    }
    return 0;
}

/* ---- the switch (loop thread) ---------------------------------------------------------------- */

/* A retired runner's batch that did not run: to the consumer's runner (it runs there once), or,
 * with no runner left (shutting down), through the usual not-run path. */
static void requeue(void *ud, rmq_batch_t *b)
{
    rmq_consumer_t *c = ud;
    if (!c->pool) {
        rmq__consume_done(c, b);
        return;
    }
    b->status = RMQ_CONSUME_SUCCESS;
    b->ack_count = b->n;
    c->hops->submit(c->pool, b); /* orderly batches too: any thread takes a queue's batch */
}

static void on_retired(void *ud)
{
    retiring_t *rt = ud;
    rmq_consumer_t *c = rt->c;
    struct rmq_reconf *r = c->reconf;
    for (int i = 0; i < r->n_retiring; i++)
        if (r->retiring[i] == rt) {
            r->retiring[i] = r->retiring[--r->n_retiring];
            break;
        }
    free(rt);
    c->n_retiring--;
    /* Stopping too: the batches handed over are consumed within the stop's wait
     * (await_termination_millis_when_shutdown), as a stop without a reload consumes those
     * queued; a runner that never starts would only hold them until the deadline. */
    if (c->n_retiring == 0 && r->pool_waiting && c->pool &&
        (c->state == RMQ_CLIENT_RUNNING || c->state == RMQ_CLIENT_DRAINING)) {
        r->pool_waiting = 0;
        c->hops->go(c->pool); /* the old shutdown hooks ran: the new states run init */
        rmq_log_info("reload", "the previous version finished: %d consume thread(s) run %s now",
                     c->hops->nthreads(c->pool), c->hops->name(c->himpl));
    }
    if (c->state == RMQ_CLIENT_DRAINING) rmq__c_shutdown_resume(c);
}

void rmq__reconf_close(rmq_consumer_t *c)
{
    struct rmq_reconf *r = c->reconf;
    /* Runners still finishing a reload: their handlers get what a shutdown gives them. */
    for (int i = 0; i < r->n_retiring; i++)
        c->hops->hurry(r->retiring[i]->runner, c->conf->await_termination_millis_when_shutdown);
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
    if (ng && (c->hooks & RMQ_HOOK_ON_REVOKE) && c->hops->on_revoke)
        c->hops->on_revoke(c->himpl, gone_mqs, ng);
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

void rmq__consumer_adopt(rmq_consumer_t *c, rmq_conf_t *conf, rmq_runner_t *runner)
{
    struct rmq_reconf *r = c->reconf;
    rmq_conf_t *old = c->conf;
    const rmq_conf_t *cf = conf;
    r->old = realloc(r->old, sizeof(*r->old) * (size_t)(r->n_old + 1));
    if (!r->old) abort();
    r->old[r->n_old++] = old;
    c->conf = conf;
    /* The control side (allocate, on_assign, on_revoke, on_stats): the handler's new version. */
    c->hooks = c->hops->hooks ? c->hops->hooks(c->himpl) : 0;
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
    rmq__stats_reconf(c); /* the new on_stats hook and stats_interval_ms */
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
    /* The consume threads: the new runner takes every batch from now on; the old one hands over
     * what it has not started, finishes what runs, then runs its shutdown hooks; then the new
     * one goes (its states run init). */
    rmq_runner_t *prev = c->pool;
    c->hops->attach(runner);
    c->pool = runner;
    r->pool_waiting = 1;
    r->count++;
    if (prev) {
        retiring_t *rt = rmq__xcalloc(1, sizeof(*rt));
        rt->c = c;
        rt->runner = prev;
        r->retiring = realloc(r->retiring, sizeof(*r->retiring) * (size_t)(r->n_retiring + 1));
        if (!r->retiring) abort();
        r->retiring[r->n_retiring++] = rt;
        c->n_retiring++;
        int handed = c->hops->retire(prev, requeue, on_retired, rt);
        rmq_log_info("reload",
                     "reloaded %s (reload %d): %d consume thread(s), %d subscription(s); %d "
                     "queued batch(es) moved to the new threads, the previous version finishes "
                     "its running batches first",
                     c->hops->name(c->himpl), r->count, cf->consume_thread_min, c->n_subs,
                     handed);
    } else {
        rmq_log_info("reload", "reloaded %s (reload %d): %d consume thread(s), %d subscription(s)",
                     c->hops->name(c->himpl), r->count, cf->consume_thread_min, c->n_subs);
        r->pool_waiting = 0;
        c->hops->go(c->pool);
    }
    /* The brokers learn the new subscriptions, then a rebalance (strategy, threads, topics). */
    if (subs_changed) rmq__c_refresh_routes(c);
    rmq__c_heartbeat_rebalance(c);
}
