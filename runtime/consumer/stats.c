/*
 * stats.c -- the consumer's statistics (stats.h): the live counters' update functions called
 * where things happen (pull.c, consume.c, consume_orderly.c, rebalance.c, the transport's
 * open/close callbacks, the consume pool's ran hook), Java's StatsItem sampling for
 * GET_CONSUMER_RUNNING_INFO, the snapshot built every second and published for the metrics
 * endpoint, the on_stats hook every stats_interval_ms, and the renderers (Prometheus text, JSON,
 * Lua table) and /proc reading used by whoever serves a snapshot.
 *
 * Ownership: the consumer embeds its rmq_cstats_t; stats.c owns what it points to (the
 * publisher, the metrics endpoint, the list of addresses seen). Snapshots: see stats.h.
 * Threads: the update functions, rmq__stats_init/start/tick/close/free and the snapshot build
 * run on the loop thread (rmq__stats_ran on a consume thread: it only writes into the batch it
 * was given). Publishing, acquiring, releasing and rendering: any thread. rmq__stats_proc_read
 * reads /proc: the metrics endpoint's thread calls it, never the loop thread.
 */
#include "consumer_int.h"

#include "metrics_http.h"

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

/* ---- histograms and names ------------------------------------------------------------------ */

#define MS_NS 1000000LL
#define S_NS 1000000000LL

const int64_t rmq__hist_bounds_ns[32] = {
    100000,    250000,    500000,     MS_NS,       2500000,     5000000,      10000000,  25000000,
    50000000,  100000000, 250000000,  500000000,   S_NS,        5 * S_NS / 2, 5 * S_NS,  10 * S_NS,
    30 * S_NS, 60 * S_NS, 300 * S_NS, 1800 * S_NS, 3600 * S_NS, INT64_MAX,    INT64_MAX, INT64_MAX,
    INT64_MAX, INT64_MAX, INT64_MAX,  INT64_MAX,   INT64_MAX,   INT64_MAX,    INT64_MAX, INT64_MAX};

const char *const rmq__pull_result_names[RMQ_PULL_R_N] = {
    "found", "no_new_msg", "no_matched_msg", "offset_illegal", "broker_error", "failed"};

/* ---- Java's StatsItem ------------------------------------------------------------------------ */

/* StatsItem.samplingInSeconds / samplingInMinutes: the first sample of an item also records a
 * zero one period earlier; the oldest of more than 7 samples is dropped. An item is sampled only
 * once it exists, i.e. from its first addition on (StatsItemSet.getAndCreateStatsItem). */
void rmq__stats_item_sample(rmq_stats_item_t *it, int minute, int64_t now_ms)
{
    if (it->times == 0) return;
    rmq_call_snap_t *l = minute ? it->minute : it->hour;
    int *n = minute ? &it->n_minute : &it->n_hour;
    int64_t period = minute ? 10 * 1000 : 10 * 60 * 1000;
    if (*n == 0) l[(*n)++] = (rmq_call_snap_t){now_ms - period, 0, 0};
    if (*n == RMQ_STATS_WINDOW) {
        memmove(l, l + 1, sizeof(*l) * (RMQ_STATS_WINDOW - 1));
        (*n)--;
    }
    l[(*n)++] = (rmq_call_snap_t){now_ms, it->times, it->value};
}

/* StatsItem.computeStatsData. */
rmq_stats_window_t rmq__stats_item_window(const rmq_stats_item_t *it, int minute)
{
    rmq_stats_window_t w = {0, 0, 0};
    const rmq_call_snap_t *l = minute ? it->minute : it->hour;
    int n = minute ? it->n_minute : it->n_hour;
    if (n == 0) return w;
    const rmq_call_snap_t *first = &l[0], *last = &l[n - 1];
    w.sum = last->value - first->value;
    if (last->ts_ms > first->ts_ms)
        w.tps = (double)w.sum * 1000.0 / (double)(last->ts_ms - first->ts_ms);
    int64_t td = last->times - first->times;
    if (td > 0) w.avgpt = (double)w.sum / (double)td;
    return w;
}

/* ConsumerStatsManager.consumeStatus: pullRT and consumeRT are per-call averages (ms), the TPS
 * figures per second over the last minute; consumeRT falls back to the hour when the minute saw
 * nothing, and consumeFailedMsgs is the hour's sum. */
void rmq__topic_consume_status(const rmq_topic_stats_t *t, rmq_consume_status_t *out)
{
    out->pull_rt = rmq__stats_item_window(&t->j_pull_rt, 1).avgpt;
    out->pull_tps = rmq__stats_item_window(&t->j_pull_tps, 1).tps;
    rmq_stats_window_t crt = rmq__stats_item_window(&t->j_consume_rt, 1);
    if (crt.sum == 0) crt = rmq__stats_item_window(&t->j_consume_rt, 0);
    out->consume_rt = crt.avgpt;
    out->consume_ok_tps = rmq__stats_item_window(&t->j_consume_ok, 1).tps;
    out->consume_failed_tps = rmq__stats_item_window(&t->j_consume_failed, 1).tps;
    out->consume_failed_msgs = rmq__stats_item_window(&t->j_consume_failed, 0).sum;
}

static void sample_topic(rmq_topic_stats_t *t, int minute, int64_t now)
{
    rmq__stats_item_sample(&t->j_pull_rt, minute, now);
    rmq__stats_item_sample(&t->j_pull_tps, minute, now);
    rmq__stats_item_sample(&t->j_consume_rt, minute, now);
    rmq__stats_item_sample(&t->j_consume_ok, minute, now);
    rmq__stats_item_sample(&t->j_consume_failed, minute, now);
}

/* ---- live counters: updated where things happen (loop thread) -------------------------------- */

static rmq_topic_stats_t *tstats(rmq_qent_t *q)
{
    return q && q->sub ? &q->sub->st : NULL;
}

void rmq__stats_pulled(rmq_qent_t *q, rmq_msgset_t *set, int n)
{
    rmq_topic_stats_t *t = tstats(q);
    set->recv_ns = (int64_t)uv_hrtime();
    if (!t) return;
    t->pulled += n;
    /* DefaultMQPushConsumerImpl's PullCallback: incPullTPS(group, topic, msgFoundList.size()) */
    rmq__stats_item_add(&t->j_pull_tps, n);
}

void rmq__stats_pull_done(rmq_qent_t *q, int err, int code)
{
    rmq_topic_stats_t *t = tstats(q);
    if (!t) return;
    int r;
    if (err)
        r = RMQ_PULL_R_FAILED;
    else if (code == RMQ_RESP_SUCCESS)
        r = RMQ_PULL_R_FOUND;
    else if (code == RMQ_RESP_PULL_NOT_FOUND)
        r = RMQ_PULL_R_NO_NEW_MSG;
    else if (code == RMQ_RESP_PULL_RETRY_IMMEDIATELY)
        r = RMQ_PULL_R_NO_MATCHED_MSG;
    else if (code == RMQ_RESP_PULL_OFFSET_MOVED)
        r = RMQ_PULL_R_OFFSET_ILLEGAL;
    else
        r = RMQ_PULL_R_BROKER_ERROR;
    t->pulls[r]++;
    if (err) return; /* Java counts the pull RT in PullCallback.onSuccess only */
    int64_t rt = (int64_t)uv_hrtime() - q->pull_sent_ns;
    rmq__hist_observe(&t->pull_rt, rt);
    rmq__stats_item_add(&t->j_pull_rt, rt / MS_NS); /* incPullRT(group, topic, ms) */
}

void rmq__stats_consumed(rmq_qent_t *q, int ok, int failed)
{
    rmq_topic_stats_t *t = tstats(q);
    if (!t) return;
    t->consumed += ok;
    t->failed += failed;
    /* ConsumeMessage{Concurrently,Orderly}Service.processConsumeResult */
    rmq__stats_item_add(&t->j_consume_ok, ok);
    rmq__stats_item_add(&t->j_consume_failed, failed);
}

void rmq__stats_sent_back(rmq_qent_t *q, int dlq)
{
    rmq_topic_stats_t *t = tstats(q);
    if (!t) return;
    if (dlq)
        t->dlq++;
    else
        t->sent_back++;
}

void rmq__stats_timeout(rmq_qent_t *q)
{
    rmq_topic_stats_t *t = tstats(q);
    if (t) t->consume_timeouts++;
}

/* Consume thread: the timing goes into the batch's own record. */
void rmq__stats_ran(void *ud, rmq_batch_t *b, const rmq_batch_run_t *run)
{
    (void)ud;
    ((rmq_cbatch_t *)b->internal)->run = *run;
}

void rmq__stats_batch_done(rmq_consumer_t *c, rmq_cbatch_t *cb)
{
    rmq_topic_stats_t *t = tstats(cb->q);
    rmq_batch_run_t run = cb->run, *r = &run;
    cb->run.start_ns = 0; /* counted once, even if the batch runs again (local retry) */
    if (!t || r->start_ns == 0) return;
    int64_t took = r->end_ns - r->start_ns;
    rmq__hist_observe(&t->process, took);
    /* ConsumeRequest.run: incConsumeRT(group, topic, ms spent in the listener) */
    rmq__stats_item_add(&t->j_consume_rt, took / MS_NS);
    if (cb->b.handler_error) t->lua_errors++;
    if (r->timed_out && !cb->expired) t->consume_timeouts++;
    if (cb->b.n <= 0) return;
    const rmq_msgset_t *set = cb->msgs[0]->owner;
    if (set && set->recv_ns) rmq__hist_observe(&t->await, r->start_ns - set->recv_ns);
    /* The handler's start on the wall clock, in ms like the store timestamps. */
    int64_t start_ms = (r->start_ns + c->stats.wall_minus_mono_ns) / MS_NS;
    for (int i = 0; i < cb->b.n; i++) {
        /* A store timestamp is the broker's word: one before 1970 or after now counts as 0
         * (the difference of any two int64 would overflow). */
        int64_t ts = cb->msgs[i]->store_timestamp;
        int64_t d = ts >= 0 && ts <= start_ms ? start_ms - ts : 0;
        rmq__hist_observe(&t->delivery, d < INT64_MAX / MS_NS ? d * MS_NS : INT64_MAX);
    }
}

/* ---- connections: reconnects and the name server ----------------------------------------- */

/* Is addr one of the configured name servers, or of the address service's last list (as
 * rmq__remoting_set_namesrv reads the list)? */
static int is_namesrv(const rmq_consumer_t *c, const char *addr)
{
    const char *p = c->conf->namesrv_addr && *c->conf->namesrv_addr ? c->conf->namesrv_addr
                                                                  : c->nsaddr_list;
    size_t al = strlen(addr);
    while (p && *p) {
        size_t n = strcspn(p, ";");
        const char *s = p, *e = p + n;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if ((size_t)(e - s) > 7 && !strncmp(s, "http://", 7)) s += 7;
        if ((size_t)(e - s) == al && !memcmp(s, addr, al)) return 1;
        p += n;
        if (*p) p++;
    }
    return 0;
}

void rmq__stats_on_open(rmq_conn_t *conn, void *ud)
{
    rmq_consumer_t *c = ud;
    rmq_cstats_t *st = &c->stats;
    if (rmq__conn_is_server(conn)) return;
    const char *addr = rmq__conn_peer(conn);
    int seen = 0;
    for (int i = 0; i < st->n_seen && !seen; i++)
        seen = !strcmp(st->seen_addrs[i], addr);
    if (seen) {
        st->reconnects++;
    } else {
        st->seen_addrs = realloc(st->seen_addrs, sizeof(char *) * (size_t)(st->n_seen + 1));
        if (!st->seen_addrs) abort();
        st->seen_addrs[st->n_seen++] = rmq__xstrdup(addr);
    }
    if (is_namesrv(c, addr)) {
        st->ns_connected = 1;
        snprintf(st->ns_reason, sizeof(st->ns_reason), "name server %s connected", addr);
    }
}

void rmq__stats_on_close(rmq_conn_t *conn, int err, const char *why, void *ud)
{
    rmq_consumer_t *c = ud;
    if (rmq__conn_is_server(conn) || err == RMQ_ERR_DESTROYED || err == RMQ_OK) return;
    const char *addr = rmq__conn_peer(conn);
    /* The transport closes a connection idle for 2 minutes: that says nothing about the server
     * (with poll_name_server_interval > 2 min the route lookups reopen it each time). */
    if (!is_namesrv(c, addr) || strstr(why, " idle for ")) return;
    c->stats.ns_connected = 0;
    snprintf(c->stats.ns_reason, sizeof(c->stats.ns_reason), "no name server connection: %s: %s",
             addr, why);
}

/* ---- snapshots ------------------------------------------------------------------------------ */

rmq_stats_snap_t *rmq__stats_snap_keep(rmq_stats_snap_t *s)
{
    __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
    return s;
}

void rmq__stats_snap_release(rmq_stats_snap_t *s)
{
    if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    for (int i = 0; i < s->n_topics; i++)
        free(s->topics[i].topic);
    for (int i = 0; i < s->n_queues; i++)
        free(s->queues[i].broker);
    free(s->topics);
    free(s->queues);
    free(s->lua_memory);
    free(s->group);
    free(s->client_id);
    free(s->namesrv);
    free(s);
}

struct rmq_stats_pub {
    uv_mutex_t mu; /* guards cur: held for a pointer swap or a reference count only */
    rmq_stats_snap_t *cur;
};

rmq_stats_pub_t *rmq__stats_pub_new(void)
{
    rmq_stats_pub_t *p = rmq__xcalloc(1, sizeof(*p));
    uv_mutex_init(&p->mu);
    return p;
}

void rmq__stats_pub_destroy(rmq_stats_pub_t *p)
{
    if (!p) return;
    rmq__stats_snap_release(p->cur);
    uv_mutex_destroy(&p->mu);
    free(p);
}

void rmq__stats_publish(rmq_stats_pub_t *p, rmq_stats_snap_t *s)
{
    uv_mutex_lock(&p->mu);
    rmq_stats_snap_t *old = p->cur;
    p->cur = s;
    uv_mutex_unlock(&p->mu);
    rmq__stats_snap_release(old);
}

rmq_stats_snap_t *rmq__stats_acquire(rmq_stats_pub_t *p)
{
    uv_mutex_lock(&p->mu);
    rmq_stats_snap_t *s = p->cur ? rmq__stats_snap_keep(p->cur) : NULL;
    uv_mutex_unlock(&p->mu);
    return s;
}

/* Loop thread: a new snapshot (one reference) of everything the consumer counts now. */
static rmq_stats_snap_t *build(rmq_consumer_t *c)
{
    rmq_cstats_t *st = &c->stats;
    rmq_stats_snap_t *s = rmq__xcalloc(1, sizeof(*s));
    s->refs = 1;
    s->time_ms = rmq__now_ms();
    s->started_ms = c->start_ms;
    s->group = rmq__xstrdup(c->group);
    s->client_id = rmq__xstrdup(c->client_id);
    const char *ns = c->rt ? rmq__remoting_namesrv(c->rt) : NULL;
    s->namesrv = rmq__xstrdup(ns ? ns : (c->conf->namesrv_addr ? c->conf->namesrv_addr : ""));
    s->state = rmq__client_state_name(c->state);
    s->running = c->state == RMQ_CLIENT_RUNNING;
    s->namesrv_connected = st->ns_connected;
    s->healthy = s->running && s->namesrv_connected;
    if (!s->running)
        snprintf(s->reason, sizeof(s->reason), "not running: the consumer is %s", s->state);
    else if (s->healthy)
        snprintf(s->reason, sizeof(s->reason), "ok: %s running, %s", s->client_id, st->ns_reason);
    else
        snprintf(s->reason, sizeof(s->reason), "%s",
                 st->ns_reason[0] ? st->ns_reason : "no name server connection yet");
    s->rebalances = st->rebalances;
    s->reconnects = st->reconnects;
    s->totals = c->snap;
    s->n_topics = c->n_subs;
    s->topics = rmq__xcalloc((size_t)c->n_subs + 1, sizeof(*s->topics));
    for (int i = 0; i < c->n_subs; i++) {
        const rmq_topic_stats_t *t = &c->subs[i].st;
        rmq_snap_topic_t *o = &s->topics[i];
        o->topic = rmq__xstrdup(c->subs[i].sd->topic);
        o->consumed = t->consumed;
        o->failed = t->failed;
        o->sent_back = t->sent_back;
        o->dlq = t->dlq;
        o->pulled = t->pulled;
        o->consume_timeouts = t->consume_timeouts;
        o->lua_errors = t->lua_errors;
        memcpy(o->pulls, t->pulls, sizeof(o->pulls));
        o->process = t->process;
        o->await = t->await;
        o->delivery = t->delivery;
        o->pull_rt = t->pull_rt;
        rmq__topic_consume_status(t, &o->status);
    }
    int nq = 0;
    for (rmq_qent_t *q = c->queues; q; q = q->next)
        nq++;
    s->queues = rmq__xcalloc((size_t)nq + 1, sizeof(*s->queues));
    for (rmq_qent_t *q = c->queues; q; q = q->next) {
        if (!q->sub) continue;
        rmq_snap_queue_t *o = &s->queues[s->n_queues++];
        o->topic = (int)(q->sub - c->subs);
        o->broker = rmq__xstrdup(q->mq.broker_name);
        o->queue_id = q->mq.queue_id;
        o->committed = q->offset;
        o->broker_max = q->broker_max;
        o->cached_msgs = q->pq.count;
        o->cached_bytes = q->pq.bytes;
        o->lag = rmq__qent_lag(q);
        rmq_snap_topic_t *t = &s->topics[o->topic];
        t->owned_queues++;
        t->lag = rmq__add_sat(t->lag, o->lag);
        t->cached_msgs += o->cached_msgs;
        t->cached_bytes += o->cached_bytes;
    }
    s->n_threads = c->pool ? c->hops->nthreads(c->pool) : 0;
    s->lua_memory = rmq__xcalloc((size_t)s->n_threads + 1, sizeof(int64_t));
    for (int i = 0; i < s->n_threads; i++)
        s->lua_memory[i] = c->hops->memory ? c->hops->memory(c->pool, i) : 0;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        s->cpu_seconds = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                         (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
        s->max_rss_bytes = (int64_t)ru.ru_maxrss * 1024;
    }
    s->process_start_s = st->process_start_s;
    return s;
}

/* ---- lifecycle (loop thread) ----------------------------------------------------------------- */

#define MINUTE_SAMPLE_MS (10 * 1000)    /* StatsItemSet: samplingInSeconds every 10 s */
#define HOUR_SAMPLE_MS (10 * 60 * 1000) /* samplingInMinutes every 10 min */

void rmq__stats_init(rmq_consumer_t *c)
{
    rmq_cstats_t *st = &c->stats;
    st->pub = rmq__stats_pub_new();
    /* Read once here, before the loop runs: the loop thread never reads files. */
    st->process_start_s = rmq__stats_proc_start_time();
}

static void refresh_clock(rmq_cstats_t *st)
{
    st->wall_minus_mono_ns = rmq__now_ms() * MS_NS - (int64_t)uv_hrtime();
}

static void on_stats_hook(uv_timer_t *t)
{
    rmq_consumer_t *c = t->data;
    if (c->state != RMQ_CLIENT_RUNNING || !c->hops->on_stats) return;
    rmq_stats_snap_t *s = build(c);
    rmq__stats_publish(c->stats.pub, rmq__stats_snap_keep(s));
    c->hops->on_stats(c->himpl, s);
    rmq__stats_snap_release(s);
}

int rmq__stats_start(rmq_consumer_t *c, char *errstr, size_t errstr_size)
{
    rmq_cstats_t *st = &c->stats;
    int64_t now = rmq__mono_ms();
    refresh_clock(st);
    st->next_minute_sample = now; /* StatsItemSet.init: both samplers start at once */
    st->next_hour_sample = now;
    uv_timer_init(&c->loop, &st->t_on_stats);
    st->t_on_stats.data = c;
    st->t_on_stats_inited = 1;
    rmq__stats_reconf(c);
    const char *listen = c->conf->metrics_listen;
    if (listen && *listen) {
        char err[256];
        if (rmq__metrics_start(listen, st->pub, &st->metrics, err, sizeof(err))) {
            rmq__seterr(errstr, errstr_size, "metrics_listen %s: %s", listen, err);
            return RMQ_ERR_IO;
        }
        rmq_log_info("stats", "metrics on http://%s/metrics (also /stats, /health)",
                     rmq__metrics_address(st->metrics));
    }
    rmq__stats_tick(c);
    return 0;
}

void rmq__stats_reconf(rmq_consumer_t *c)
{
    rmq_cstats_t *st = &c->stats;
    if (!st->t_on_stats_inited || uv_is_closing((uv_handle_t *)&st->t_on_stats)) return;
    uint64_t iv = (uint64_t)c->conf->stats_interval_ms;
    if (!(c->hooks & RMQ_HOOK_ON_STATS) || iv == 0)
        uv_timer_stop(&st->t_on_stats);
    else if (!uv_is_active((uv_handle_t *)&st->t_on_stats) ||
             uv_timer_get_repeat(&st->t_on_stats) != iv)
        uv_timer_start(&st->t_on_stats, on_stats_hook, iv, iv);
}

void rmq__stats_tick(rmq_consumer_t *c)
{
    rmq_cstats_t *st = &c->stats;
    int64_t now = rmq__mono_ms();
    if (st->next_minute_sample && now >= st->next_minute_sample) {
        for (int i = 0; i < c->n_subs; i++)
            sample_topic(&c->subs[i].st, 1, now);
        while (st->next_minute_sample <= now)
            st->next_minute_sample += MINUTE_SAMPLE_MS;
    }
    if (st->next_hour_sample && now >= st->next_hour_sample) {
        for (int i = 0; i < c->n_subs; i++)
            sample_topic(&c->subs[i].st, 0, now);
        while (st->next_hour_sample <= now)
            st->next_hour_sample += HOUR_SAMPLE_MS;
    }
    refresh_clock(st);
    rmq__stats_publish(st->pub, build(c));
}

void rmq__stats_close(rmq_consumer_t *c)
{
    rmq_cstats_t *st = &c->stats;
    if (st->t_on_stats_inited && !uv_is_closing((uv_handle_t *)&st->t_on_stats))
        uv_close((uv_handle_t *)&st->t_on_stats, NULL);
}

void rmq__stats_free(rmq_consumer_t *c)
{
    rmq_cstats_t *st = &c->stats;
    if (st->metrics) rmq__metrics_stop(st->metrics);
    st->metrics = NULL;
    rmq__stats_pub_destroy(st->pub);
    st->pub = NULL;
    for (int i = 0; i < st->n_seen; i++)
        free(st->seen_addrs[i]);
    free(st->seen_addrs);
    st->seen_addrs = NULL;
    st->n_seen = 0;
}

/* ---- /proc (never on the loop thread) -------------------------------------------------------- */

static int64_t boot_time_s(void)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return 0;
    char line[256];
    long long bt = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "btime %lld", &bt) == 1) break;
    fclose(f);
    return bt;
}

/* Fields of /proc/self/stat after the command: utime, stime, starttime, vsize, rss. */
static int read_self_stat(unsigned long long *ut, unsigned long long *stime,
                          unsigned long long *start, unsigned long long *vsize, long long *rss)
{
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f) return -1;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    if (!p) return -1;
    /* state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime
     * cutime cstime priority nice num_threads itrealvalue starttime vsize rss */
    int k = sscanf(p + 2,
                   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d "
                   "%*d %*d %llu %llu %lld",
                   ut, stime, start, vsize, rss);
    return k == 5 ? 0 : -1;
}

double rmq__stats_proc_start_time(void)
{
    unsigned long long ut, stime, start, vsize;
    long long rss;
    long tck = sysconf(_SC_CLK_TCK);
    int64_t bt = boot_time_s();
    if (read_self_stat(&ut, &stime, &start, &vsize, &rss) || tck <= 0 || !bt) return 0;
    return (double)bt + (double)start / (double)tck;
}

void rmq__stats_proc_read(rmq_proc_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    unsigned long long ut, stime, start, vsize;
    long long rss;
    long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    if (read_self_stat(&ut, &stime, &start, &vsize, &rss) || tck <= 0) return;
    /* CPU time from getrusage (microseconds): /proc's clock ticks (10 ms) read 0 for a consumer
     * that has used less than one tick, as a quiet one often has. */
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        out->cpu_seconds = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    else
        out->cpu_seconds = (double)(ut + stime) / (double)tck;
    out->vsize_bytes = (int64_t)vsize;
    out->rss_bytes = (int64_t)rss * page;
    int64_t bt = boot_time_s();
    out->start_time_s = bt ? (double)bt + (double)start / (double)tck : 0;
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') out->open_fds++;
        closedir(d);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        out->max_fds = rl.rlim_cur == RLIM_INFINITY ? -1 : (int64_t)rl.rlim_cur;
    out->ok = 1;
}

/* ---- Prometheus text format 0.0.4 ------------------------------------------------------------ */

static void esc_label(rmq_buf_t *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\')
            rmq__buf_append(b, "\\\\", 2);
        else if (*v == '"')
            rmq__buf_append(b, "\\\"", 2);
        else if (*v == '\n')
            rmq__buf_append(b, "\\n", 2);
        else
            rmq__buf_append(b, v, 1);
    }
}

static void family(rmq_buf_t *b, const char *name, const char *type, const char *help)
{
    rmq__buf_appendf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{group="g" -- the caller adds labels with lbl() and ends with val_*(). */
static void sample(rmq_buf_t *b, const char *name, const char *suffix, const rmq_stats_snap_t *s)
{
    rmq__buf_appendf(b, "%s%s{group=\"", name, suffix);
    esc_label(b, s->group);
    rmq__buf_append(b, "\"", 1);
}

static void lbl(rmq_buf_t *b, const char *k, const char *v)
{
    rmq__buf_appendf(b, ",%s=\"", k);
    esc_label(b, v);
    rmq__buf_append(b, "\"", 1);
}

static void val_i64(rmq_buf_t *b, int64_t v)
{
    rmq__buf_appendf(b, "} %" PRId64 "\n", v);
}

/* The shortest of %.15g..%.17g that reads back as v (0.03, not 0.029999999999999999). */
static const char *dbl(char *out, size_t n, double v)
{
    if (isnan(v)) return "NaN";
    if (isinf(v)) return v < 0 ? "-Inf" : "+Inf";
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, n, "%.*g", prec, v);
        if (strtod(out, NULL) == v) break;
    }
    return out;
}

static void val_f(rmq_buf_t *b, double v)
{
    char num[40];
    rmq__buf_appendf(b, "} %s\n", dbl(num, sizeof(num), v));
}

typedef struct {
    const char *name, *help;
    size_t off;
} tfield_t;

#define TF(f) offsetof(rmq_snap_topic_t, f)
static const tfield_t topic_counters[] = {
    {"rmqlua_consumed_messages_total", "Messages the handler acknowledged.", TF(consumed)},
    {"rmqlua_failed_messages_total",
     "Messages the handler did not acknowledge (error, RECONSUME_LATER, DLQ, SUSPEND).",
     TF(failed)},
    {"rmqlua_sent_back_messages_total",
     "Messages sent back for a later retry (CONSUMER_SEND_MSG_BACK, or re-sent to %RETRY%).",
     TF(sent_back)},
    {"rmqlua_dlq_messages_total",
     "Messages sent to the dead-letter queue (the handler's rmq.DLQ, orderly retries spent, "
     "undecodable messages).",
     TF(dlq)},
    {"rmqlua_pulled_messages_total", "Messages received in PULL_MESSAGE responses.", TF(pulled)},
    {"rmqlua_consume_timeouts_total", "Batches that ran into consume_timeout.",
     TF(consume_timeouts)},
    {"rmqlua_lua_errors_total", "Batches whose handler raised an error (or was interrupted).",
     TF(lua_errors)},
};

typedef struct {
    const char *name, *help;
    size_t off;
} hfield_t;

static const hfield_t topic_hists[] = {
    {"rmqlua_process_time_seconds", "Handler time per batch.", TF(process)},
    {"rmqlua_await_time_seconds",
     "From the pull response's arrival to the handler's start, per batch.", TF(await)},
    {"rmqlua_delivery_latency_seconds",
     "From the broker's store timestamp to the handler's start, per message.", TF(delivery)},
    {"rmqlua_pull_rt_seconds", "PULL_MESSAGE round trip (long polling included).", TF(pull_rt)},
};
#undef TF

static void le_text(char *out, size_t n, int i)
{
    snprintf(out, n, "%.10g", (double)rmq__hist_bounds_ns[i] / 1e9);
}

void rmq__stats_prometheus(const rmq_stats_snap_t *s, const rmq_proc_stats_t *proc, rmq_buf_t *out)
{
    char qid[16], le[32];
    for (size_t f = 0; f < RMQ_ARRAY_SIZE(topic_counters); f++) {
        family(out, topic_counters[f].name, "counter", topic_counters[f].help);
        for (int i = 0; i < s->n_topics; i++) {
            sample(out, topic_counters[f].name, "", s);
            lbl(out, "topic", s->topics[i].topic);
            val_i64(out, *(const int64_t *)((const char *)&s->topics[i] + topic_counters[f].off));
        }
    }
    family(out, "rmqlua_pull_requests_total", "counter", "PULL_MESSAGE requests by outcome.");
    for (int i = 0; i < s->n_topics; i++)
        for (int r = 0; r < RMQ_PULL_R_N; r++) {
            sample(out, "rmqlua_pull_requests_total", "", s);
            lbl(out, "topic", s->topics[i].topic);
            lbl(out, "result", rmq__pull_result_names[r]);
            val_i64(out, s->topics[i].pulls[r]);
        }
    family(out, "rmqlua_popped_messages_total", "counter",
           "Messages received in POP_MESSAGE answers (RocketMQ 5 POP).");
    sample(out, "rmqlua_popped_messages_total", "", s);
    val_i64(out, s->totals.msgs_popped);
    family(out, "rmqlua_pop_acks_total", "counter", "ACK_MESSAGEs the broker accepted (POP).");
    sample(out, "rmqlua_pop_acks_total", "", s);
    val_i64(out, s->totals.pop_acks);
    family(out, "rmqlua_pop_invisible_time_changes_total", "counter",
           "CHANGE_MESSAGE_INVISIBLETIMEs the broker accepted (POP: consumed again later).");
    sample(out, "rmqlua_pop_invisible_time_changes_total", "", s);
    val_i64(out, s->totals.pop_changes);
    family(out, "rmqlua_rebalances_total", "counter", "Rebalance rounds run.");
    sample(out, "rmqlua_rebalances_total", "", s);
    val_i64(out, s->rebalances);
    family(out, "rmqlua_reconnects_total", "counter",
           "Connections to a name server or broker opened again after one was lost.");
    sample(out, "rmqlua_reconnects_total", "", s);
    val_i64(out, s->reconnects);

    static const struct {
        const char *name, *help;
        size_t off;
    } qg[] = {
        {"rmqlua_consumer_lag", "Broker max offset minus the committed offset.",
         offsetof(rmq_snap_queue_t, lag)},
        {"rmqlua_cached_messages", "Messages pulled and not yet resolved.",
         offsetof(rmq_snap_queue_t, cached_msgs)},
        {"rmqlua_cached_bytes", "Body bytes of the cached messages.",
         offsetof(rmq_snap_queue_t, cached_bytes)},
        {"rmqlua_committed_offset", "Committed consume offset (-1: none yet).",
         offsetof(rmq_snap_queue_t, committed)},
    };
    for (size_t f = 0; f < RMQ_ARRAY_SIZE(qg); f++) {
        family(out, qg[f].name, "gauge", qg[f].help);
        for (int i = 0; i < s->n_queues; i++) {
            const rmq_snap_queue_t *q = &s->queues[i];
            snprintf(qid, sizeof(qid), "%d", q->queue_id);
            sample(out, qg[f].name, "", s);
            lbl(out, "topic", s->topics[q->topic].topic);
            lbl(out, "broker", q->broker);
            lbl(out, "queue", qid);
            val_i64(out, *(const int64_t *)((const char *)q + qg[f].off));
        }
    }
    family(out, "rmqlua_owned_queues", "gauge", "Message queues this consumer owns.");
    for (int i = 0; i < s->n_topics; i++) {
        sample(out, "rmqlua_owned_queues", "", s);
        lbl(out, "topic", s->topics[i].topic);
        val_i64(out, s->topics[i].owned_queues);
    }
    family(out, "rmqlua_lua_memory_bytes", "gauge", "Lua heap of each consume thread.");
    for (int i = 0; i < s->n_threads; i++) {
        snprintf(qid, sizeof(qid), "%d", i + 1);
        sample(out, "rmqlua_lua_memory_bytes", "", s);
        lbl(out, "thread", qid);
        val_i64(out, s->lua_memory[i]);
    }
    family(out, "rmqlua_inflight_batches", "gauge",
           "Batches handed to consume threads, not back yet.");
    sample(out, "rmqlua_inflight_batches", "", s);
    val_i64(out, s->totals.inflight_batches);
    family(out, "rmqlua_healthy", "gauge",
           "1 when running and connected to a name server (what /health says), else 0.");
    sample(out, "rmqlua_healthy", "", s);
    val_i64(out, s->healthy);

    for (size_t f = 0; f < RMQ_ARRAY_SIZE(topic_hists); f++) {
        const char *name = topic_hists[f].name;
        family(out, name, "histogram", topic_hists[f].help);
        for (int i = 0; i < s->n_topics; i++) {
            const rmq_hist_t *h =
                (const rmq_hist_t *)((const char *)&s->topics[i] + topic_hists[f].off);
            int64_t cum = 0;
            for (int k = 0; k <= RMQ_HIST_BOUNDS; k++) {
                cum += h->counts[k];
                if (k < RMQ_HIST_BOUNDS)
                    le_text(le, sizeof(le), k);
                else
                    snprintf(le, sizeof(le), "+Inf");
                sample(out, name, "_bucket", s);
                lbl(out, "topic", s->topics[i].topic);
                lbl(out, "le", le);
                val_i64(out, cum);
            }
            sample(out, name, "_sum", s);
            lbl(out, "topic", s->topics[i].topic);
            val_f(out, (double)h->sum_ns / 1e9);
            sample(out, name, "_count", s);
            lbl(out, "topic", s->topics[i].topic);
            val_i64(out, h->count);
        }
    }

    /* The standard process series (names and meaning of the Prometheus client libraries). */
    char num[40];
    double cpu = proc && proc->ok ? proc->cpu_seconds : s->cpu_seconds;
    double start = proc && proc->ok && proc->start_time_s ? proc->start_time_s : s->process_start_s;
    family(out, "process_cpu_seconds_total", "counter",
           "Total user and system CPU time spent in seconds.");
    rmq__buf_appendf(out, "process_cpu_seconds_total %s\n", dbl(num, sizeof(num), cpu));
    if (proc && proc->ok) {
        family(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
        rmq__buf_appendf(out, "process_resident_memory_bytes %" PRId64 "\n", proc->rss_bytes);
        family(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
        rmq__buf_appendf(out, "process_virtual_memory_bytes %" PRId64 "\n", proc->vsize_bytes);
        family(out, "process_open_fds", "gauge", "Number of open file descriptors.");
        rmq__buf_appendf(out, "process_open_fds %" PRId64 "\n", proc->open_fds);
        family(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
        rmq__buf_appendf(out, "process_max_fds %" PRId64 "\n", proc->max_fds);
    }
    if (start > 0) {
        family(out, "process_start_time_seconds", "gauge",
               "Start time of the process since unix epoch in seconds.");
        rmq__buf_appendf(out, "process_start_time_seconds %s\n", dbl(num, sizeof(num), start));
    }
}

/* ---- JSON (/stats) and the Lua table (on_stats): one shape ---------------------------------- */

static json_t *hist_json(const rmq_hist_t *h)
{
    json_t *o = json_object(), *le = json_array(), *cnt = json_array();
    int64_t cum = 0;
    for (int k = 0; k <= RMQ_HIST_BOUNDS; k++) {
        cum += h->counts[k];
        if (k < RMQ_HIST_BOUNDS)
            json_array_append_new(le, json_real((double)rmq__hist_bounds_ns[k] / 1e9));
        json_array_append_new(cnt, json_integer(cum));
    }
    json_object_set_new(o, "count", json_integer(h->count));
    json_object_set_new(o, "sum", json_real((double)h->sum_ns / 1e9));
    json_object_set_new(o, "le", le);
    json_object_set_new(o, "counts", cnt);
    return o;
}

#define SETI(o, k, v) json_object_set_new(o, k, json_integer((json_int_t)(v)))
#define SETR(o, k, v) json_object_set_new(o, k, json_real((double)(v)))
#define SETS(o, k, v) json_object_set_new(o, k, json_string(v))

json_t *rmq__stats_json(const rmq_stats_snap_t *s, const rmq_proc_stats_t *proc)
{
    json_t *root = json_object();
    SETI(root, "time_ms", s->time_ms);
    SETI(root, "started_ms", s->started_ms);
    SETS(root, "group", s->group);
    SETS(root, "client_id", s->client_id);
    SETS(root, "state", s->state);
    json_t *h = json_object();
    json_object_set_new(h, "healthy", json_boolean(s->healthy));
    SETS(h, "reason", s->reason);
    json_object_set_new(root, "health", h);
    json_t *ns = json_object();
    SETS(ns, "address", s->namesrv);
    json_object_set_new(ns, "connected", json_boolean(s->namesrv_connected));
    json_object_set_new(root, "name_server", ns);
    SETI(root, "rebalances", s->rebalances);
    SETI(root, "reconnects", s->reconnects);
    const rmq_consumer_stats_t *t = &s->totals;
    json_t *tot = json_object();
    SETI(tot, "consumed", t->msgs_consumed);
    SETI(tot, "failed", t->msgs_failed);
    SETI(tot, "sent_back", t->msgs_retried);
    SETI(tot, "dlq", t->msgs_dlq);
    SETI(tot, "sent", t->msgs_sent);
    SETI(tot, "popped", t->msgs_popped);
    SETI(tot, "pop_acks", t->pop_acks);
    SETI(tot, "pop_invisible_time_changes", t->pop_changes);
    SETI(tot, "pulled", t->msgs_pulled);
    SETR(tot, "consume_rate", t->consume_rate);
    SETR(tot, "pull_rate", t->pull_rate);
    SETI(tot, "lag", t->lag);
    SETI(tot, "cached_messages", t->cached_msgs);
    SETI(tot, "cached_bytes", t->cached_bytes);
    SETI(tot, "owned_queues", t->owned_queues);
    SETI(tot, "inflight_batches", t->inflight_batches);
    json_object_set_new(root, "totals", tot);
    json_t *topics = json_object();
    for (int i = 0; i < s->n_topics; i++) {
        const rmq_snap_topic_t *tp = &s->topics[i];
        json_t *o = json_object();
        SETI(o, "consumed", tp->consumed);
        SETI(o, "failed", tp->failed);
        SETI(o, "sent_back", tp->sent_back);
        SETI(o, "dlq", tp->dlq);
        SETI(o, "pulled", tp->pulled);
        SETI(o, "consume_timeouts", tp->consume_timeouts);
        SETI(o, "lua_errors", tp->lua_errors);
        json_t *pr = json_object();
        for (int r = 0; r < RMQ_PULL_R_N; r++)
            SETI(pr, rmq__pull_result_names[r], tp->pulls[r]);
        json_object_set_new(o, "pull_requests", pr);
        SETI(o, "lag", tp->lag);
        SETI(o, "cached_messages", tp->cached_msgs);
        SETI(o, "cached_bytes", tp->cached_bytes);
        SETI(o, "owned_queues", tp->owned_queues);
        json_t *cs = json_object();
        SETR(cs, "pullRT", tp->status.pull_rt);
        SETR(cs, "pullTPS", tp->status.pull_tps);
        SETR(cs, "consumeRT", tp->status.consume_rt);
        SETR(cs, "consumeOKTPS", tp->status.consume_ok_tps);
        SETR(cs, "consumeFailedTPS", tp->status.consume_failed_tps);
        SETI(cs, "consumeFailedMsgs", tp->status.consume_failed_msgs);
        json_object_set_new(o, "consume_status", cs);
        json_t *hs = json_object();
        json_object_set_new(hs, "process_time_seconds", hist_json(&tp->process));
        json_object_set_new(hs, "await_time_seconds", hist_json(&tp->await));
        json_object_set_new(hs, "delivery_latency_seconds", hist_json(&tp->delivery));
        json_object_set_new(hs, "pull_rt_seconds", hist_json(&tp->pull_rt));
        json_object_set_new(o, "histograms", hs);
        json_object_set_new(topics, tp->topic, o);
    }
    json_object_set_new(root, "topics", topics);
    json_t *qs = json_array();
    for (int i = 0; i < s->n_queues; i++) {
        const rmq_snap_queue_t *q = &s->queues[i];
        json_t *o = json_object();
        SETS(o, "topic", s->topics[q->topic].topic);
        SETS(o, "broker", q->broker);
        SETI(o, "queue", q->queue_id);
        SETI(o, "committed_offset", q->committed);
        SETI(o, "broker_max_offset", q->broker_max);
        SETI(o, "lag", q->lag);
        SETI(o, "cached_messages", q->cached_msgs);
        SETI(o, "cached_bytes", q->cached_bytes);
        json_array_append_new(qs, o);
    }
    json_object_set_new(root, "queues", qs);
    json_t *lm = json_array();
    for (int i = 0; i < s->n_threads; i++)
        json_array_append_new(lm, json_integer(s->lua_memory[i]));
    json_object_set_new(root, "lua_memory_bytes", lm);
    json_t *p = json_object();
    SETR(p, "cpu_seconds_total", proc && proc->ok ? proc->cpu_seconds : s->cpu_seconds);
    SETR(p, "start_time_seconds",
         proc && proc->ok && proc->start_time_s ? proc->start_time_s : s->process_start_s);
    SETI(p, "max_resident_memory_bytes", s->max_rss_bytes);
    if (proc && proc->ok) {
        SETI(p, "resident_memory_bytes", proc->rss_bytes);
        SETI(p, "virtual_memory_bytes", proc->vsize_bytes);
        SETI(p, "open_fds", proc->open_fds);
        SETI(p, "max_fds", proc->max_fds);
    }
    json_object_set_new(root, "process", p);
    return root;
}
