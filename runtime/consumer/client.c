/*
 * client.c -- the push consumer's client instance (MQClientInstance + DefaultMQPushConsumerImpl
 * start/shutdown, PROTOCOL.md 6.1-6.3, 6.17, 2.4): clientId, the start sequence (transport,
 * producer, pool, timers, and the hooks the lower parts call: consumer_int.h), the
 * broker-initiated requests (NOTIFY_CONSUMER_IDS_CHANGED, GET_CONSUMER_RUNNING_INFO,
 * GET_CONSUMER_STATUS_FROM_CLIENT, RESET_CONSUMER_CLIENT_OFFSET; CONSUME_MESSAGE_DIRECTLY is
 * direct.c's), offsets persisted every persist_consumer_offset_interval, the stats snapshot, and
 * the shutdown sequence. Routes and heartbeats are routes.c's; the state the parts share
 * (addresses, subscriptions, state names, stop) is instance.c's. The top of the engine: it may
 * call every other file of consumer/, and none of them calls it.
 *
 * Ownership: the consumer owns its loop, transport, producer, runner (the handler's consume
 * threads), routes and queues (see consumer_int.h); the handler is borrowed. The conf given to
 * rmq__consumer_new is copied.
 * Threads: rmq__consumer_new/run/destroy on the caller's thread (which becomes the loop thread);
 * rmq__consumer_reload and rmq__consumer_stats from any thread (rmq__consumer_stop too:
 * instance.c); everything else on the loop.
 */
#include "consumer_int.h"
#include "nsaddr_http.h"
#include "trace.h"
#include "net/dial.h"

#include "protocol/acl.h"
#include "protocol/fjson.h"
#include "protocol/namespace.h"
#include "protocol/route.h"

#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* ---- offsets persisted periodically ---------------------------------------------------------- */

static void on_persist_timer(uv_timer_t *t)
{
    rmq_consumer_t *c = t->data;
    if (c->state == RMQ_CLIENT_RUNNING) rmq__offset_persist_all(c);
}

/* ---- stats ------------------------------------------------------------------------------------- */

static void stats_build(rmq_consumer_t *c)
{
    int64_t now = rmq__mono_ms();
    double dt = c->last_stats_ms ? (double)(now - c->last_stats_ms) / 1000.0 : 0;
    rmq_consumer_stats_t s = {0};
    s.msgs_consumed = c->n_consumed;
    s.msgs_failed = c->n_failed;
    s.msgs_retried = c->n_retried;
    s.msgs_dlq = c->n_dlq;
    s.msgs_pulled = c->n_pulled;
    if (dt > 0) {
        s.consume_rate = (double)(c->n_consumed - c->last_consumed) / dt;
        s.pull_rate = (double)(c->n_pulled - c->last_pulled) / dt;
    }
    for (rmq_qent_t *q = c->queues; q; q = q->next) {
        s.owned_queues++;
        s.cached_msgs += q->pq.count;
        s.cached_bytes += q->pq.bytes;
        s.lag = rmq__add_sat(s.lag, rmq__qent_lag(q));
    }
    /* Stopping releases every queue: keep the lag they had. */
    if (!s.owned_queues && c->state >= RMQ_CLIENT_CLOSING) s.lag = c->snap.lag;
    s.inflight_batches = c->inflight_batches;
    s.started_ms = c->start_ms;
    s.msgs_sent = c->n_sent;
    s.msgs_popped = c->n_popped;
    s.pop_acks = c->n_pop_acked;
    s.pop_changes = c->n_pop_changed;
    c->last_consumed = c->n_consumed;
    c->last_pulled = c->n_pulled;
    c->last_stats_ms = now;
    uv_mutex_lock(&c->stats_mu);
    c->snap = s;
    uv_mutex_unlock(&c->stats_mu);
}

static void on_stats_timer(uv_timer_t *t)
{
    rmq_consumer_t *c = t->data;
    stats_build(c);
    rmq__stats_tick(c);
    rmq__memtrim_tick(&c->memtrim, c->n_pulled + c->n_popped);
}

void rmq__consumer_stats(rmq_consumer_t *c, rmq_consumer_stats_t *out)
{
    uv_mutex_lock(&c->stats_mu);
    *out = c->snap;
    uv_mutex_unlock(&c->stats_mu);
}

const char *rmq__consumer_client_id(const rmq_consumer_t *c) { return c->client_id; }

/* ---- broker -> client requests ------------------------------------------------------------- */

static void h_notify(rmq_conn_t *conn, rmq_cmd_t *req, void *ud)
{
    rmq_consumer_t *c = ud;
    (void)conn;
    const char *g = rmq__cmd_ext(req, "consumerGroup");
    rmq_dbg(RMQ_DBG_REBALANCE, "client", "NOTIFY_CONSUMER_IDS_CHANGED for %s", g ? g : "?");
    if (c->state == RMQ_CLIENT_RUNNING) rmq__rb_wakeup(c);
}

/* A Java double as fastjson writes it for these stats: at least one decimal ("0.0", "12.5"). */
static rmq_fj_t *fj_num_d(rmq_fjdoc_t *d, double v)
{
    char buf[64];
    snprintf(buf, sizeof(buf), "%.3f", v);
    size_t n = strlen(buf);
    while (n > 0 && buf[n - 1] == '0' && n >= 2 && buf[n - 2] != '.') buf[--n] = 0;
    return rmq__fj_new_num_text(d, buf);
}

static void h_running_info(rmq_conn_t *conn, rmq_cmd_t *req, void *ud)
{
    rmq_consumer_t *c = ud;
    if (!rmq__c_group_is_ours(c, conn, req, "consumerGroup")) return;
    rmq_fjdoc_t *d = rmq__fj_new();
    rmq_fj_t *root = rmq__fj_new_obj(d);
    rmq__fj_set_root(d, root);
    if (rmq__cmd_ext_bool(req, "jstackEnable"))
        rmq__fj_obj_set(d, root, "jstack", rmq__fj_new_str(d, "", 0));
    /* mqTable: MessageQueue object keys, in Java TreeMap order (sorted). */
    rmq_fj_t *mqt = rmq__fj_new_obj(d);
    int nq = 0;
    for (rmq_qent_t *q = c->queues; q; q = q->next) nq++;
    rmq_qent_t **qs = rmq__xmalloc(sizeof(*qs) * (size_t)(nq + 1));
    nq = 0;
    for (rmq_qent_t *q = c->queues; q; q = q->next) qs[nq++] = q;
    for (int i = 1; i < nq; i++)
        for (int j = i; j > 0 && rmq__mq_cmp(&qs[j - 1]->mq, &qs[j]->mq) > 0; j--) {
            rmq_qent_t *t = qs[j];
            qs[j] = qs[j - 1];
            qs[j - 1] = t;
        }
    for (int i = 0; i < nq; i++) {
        rmq_qent_t *q = qs[i];
        rmq_fj_t *pi = rmq__fj_new_obj(d);
        rmq_msg_t *first = rmq__pq_first(&q->pq);
        int64_t maxo = rmq__pq_last_offset(&q->pq);
        rmq__fj_obj_set(d, pi, "cachedMsgCount", rmq__fj_new_i64(d, q->pq.count));
        rmq__fj_obj_set(d, pi, "cachedMsgMaxOffset", rmq__fj_new_i64(d, maxo));
        rmq__fj_obj_set(d, pi, "cachedMsgMinOffset",
                        rmq__fj_new_i64(d, first ? first->queue_offset : 0));
        rmq__fj_obj_set(d, pi, "cachedMsgSizeInMiB",
                        rmq__fj_new_i64(d, q->pq.bytes / (1024 * 1024)));
        rmq__fj_obj_set(d, pi, "commitOffset", rmq__fj_new_i64(d, q->offset >= 0 ? q->offset : 0));
        rmq__fj_obj_set(d, pi, "droped", rmq__fj_new_bool(d, q->pq.state == RMQ_PQ_DROPPED));
        rmq__fj_obj_set(d, pi, "lastConsumeTimestamp", rmq__fj_new_i64(d, q->pq.last_consume_ms));
        rmq__fj_obj_set(d, pi, "lastLockTimestamp",
                        rmq__fj_new_i64(d, q->locked ? rmq__now_ms() - (rmq__mono_ms() -
                                                                        q->last_lock_ms)
                                                     : c->start_ms));
        rmq__fj_obj_set(d, pi, "lastPullTimestamp",
                        rmq__fj_new_i64(d, rmq__now_ms() - (rmq__mono_ms() - q->last_pull_ms)));
        rmq__fj_obj_set(d, pi, "locked", rmq__fj_new_bool(d, q->locked));
        rmq__fj_obj_set(d, pi, "transactionMsgCount", rmq__fj_new_i64(d, 0));
        rmq__fj_obj_set(d, pi, "transactionMsgMaxOffset", rmq__fj_new_i64(d, 0));
        rmq__fj_obj_set(d, pi, "transactionMsgMinOffset", rmq__fj_new_i64(d, 0));
        rmq__fj_obj_set(d, pi, "tryUnlockTimes", rmq__fj_new_i64(d, 0));
        rmq__fj_obj_add(mqt, rmq__fj_new_mq(d, q->mq.topic, q->mq.broker_name, q->mq.queue_id),
                        pi);
    }
    free(qs);
    rmq__fj_obj_set(d, root, "mqTable", mqt);
    /* properties: every option by its Java name, then the PROP_* keys. */
    rmq_fj_t *props = rmq__fj_new_obj(d);
    int np = 0;
    const rmq_conf_prop_t *tab = rmq__conf_props(&np);
    char val[1024];
    for (int i = 0; i < np; i++) {
        if (!tab[i].java_name || (tab[i].flags & RMQ_CONF_F_SENSITIVE)) continue;
        if (rmq__conf_get(c->conf, tab[i].name, val, sizeof(val)) != RMQ_OK) continue;
        rmq__fj_obj_set(d, props, tab[i].java_name, rmq__fj_new_str(d, val, strlen(val)));
    }
    snprintf(val, sizeof(val), "%s;",
             c->conf->namesrv_addr && *c->conf->namesrv_addr ? c->conf->namesrv_addr
             : c->nsaddr_list                                ? c->nsaddr_list
                                                             : "");
    rmq__fj_obj_set(d, props, "PROP_NAMESERVER_ADDR", rmq__fj_new_str(d, val, strlen(val)));
    snprintf(val, sizeof(val), "%d", c->conf->consume_thread_min);
    rmq__fj_obj_set(d, props, "PROP_THREADPOOL_CORE_SIZE", rmq__fj_new_str(d, val, strlen(val)));
    rmq__fj_obj_set(d, props, "PROP_CONSUMEORDERLY",
                    rmq__fj_new_str(d, c->orderly ? "true" : "false", c->orderly ? 4 : 5));
    rmq__fj_obj_set(d, props, "PROP_CONSUME_TYPE", rmq__fj_new_str(d, "CONSUME_PASSIVELY", 17));
    rmq__fj_obj_set(d, props, "PROP_CLIENT_VERSION", rmq__fj_new_str(d, "V4_9_4", 6));
    snprintf(val, sizeof(val), "%" PRId64, c->start_ms);
    rmq__fj_obj_set(d, props, "PROP_CONSUMER_START_TIMESTAMP",
                    rmq__fj_new_str(d, val, strlen(val)));
    rmq__fj_obj_set(d, root, "properties", props);
    /* statusTable: topic -> ConsumeStatus (ConsumerStatsManager.consumeStatus), a TreeMap
     * (Java String order). */
    rmq_fj_t *st = rmq__fj_new_obj(d);
    int *so = rmq__xmalloc(sizeof(int) * (size_t)(c->n_subs + 1));
    for (int i = 0; i < c->n_subs; i++) so[i] = i;
    for (int i = 1; i < c->n_subs; i++)
        for (int j = i; j > 0 && rmq__java_strcmp(c->subs[so[j - 1]].sd->topic,
                                                  c->subs[so[j]].sd->topic) > 0; j--) {
            int t = so[j];
            so[j] = so[j - 1];
            so[j - 1] = t;
        }
    for (int k = 0; k < c->n_subs; k++) {
        const rmq_csub_t *s = &c->subs[so[k]];
        rmq_consume_status_t v;
        rmq__topic_consume_status(&s->st, &v);
        rmq_fj_t *cs = rmq__fj_new_obj(d);
        rmq__fj_obj_set(d, cs, "consumeFailedMsgs", rmq__fj_new_i64(d, v.consume_failed_msgs));
        rmq__fj_obj_set(d, cs, "consumeFailedTPS", fj_num_d(d, v.consume_failed_tps));
        rmq__fj_obj_set(d, cs, "consumeOKTPS", fj_num_d(d, v.consume_ok_tps));
        rmq__fj_obj_set(d, cs, "consumeRT", fj_num_d(d, v.consume_rt));
        rmq__fj_obj_set(d, cs, "pullRT", fj_num_d(d, v.pull_rt));
        rmq__fj_obj_set(d, cs, "pullTPS", fj_num_d(d, v.pull_tps));
        rmq__fj_obj_set(d, st, s->sd->topic, cs);
    }
    free(so);
    rmq__fj_obj_set(d, root, "statusTable", st);
    /* subscriptionSet, sorted by topic + "@" + subString; written with the shared writer. */
    rmq_buf_t subs;
    rmq__buf_init(&subs);
    int *ord = rmq__xmalloc(sizeof(int) * (size_t)(c->n_subs + 1));
    for (int i = 0; i < c->n_subs; i++) ord[i] = i;
    for (int i = 1; i < c->n_subs; i++)
        for (int j = i; j > 0; j--) {
            char ka[1024], kb[1024];
            snprintf(ka, sizeof(ka), "%s@%s", c->subs[ord[j - 1]].sd->topic,
                     c->subs[ord[j - 1]].sd->sub_string);
            snprintf(kb, sizeof(kb), "%s@%s", c->subs[ord[j]].sd->topic,
                     c->subs[ord[j]].sd->sub_string);
            if (strcmp(ka, kb) <= 0) break;
            int t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    rmq__buf_append(&subs, "[", 1);
    for (int i = 0; i < c->n_subs; i++) {
        if (i) rmq__buf_append(&subs, ",", 1);
        rmq__sub_to_json(c->subs[ord[i]].sd, &subs);
    }
    rmq__buf_append(&subs, "]", 1);
    free(ord);
    char perr[128];
    rmq_fjdoc_t *sd = rmq__fj_parse(subs.data, subs.len, perr, sizeof(perr));
    rmq_buf_t body;
    rmq__buf_init(&body);
    rmq__fj_write(&body, root, 0);
    /* Splice "subscriptionSet" in last (fastjson's key order: jstack, mqTable, properties,
     * statusTable, subscriptionSet). */
    if (body.len > 0 && sd) {
        body.len--; /* drop the closing brace */
        rmq__buf_append(&body, ",\"subscriptionSet\":", 19);
        rmq__fj_write(&body, rmq__fj_root(sd), 0);
        rmq__buf_append(&body, "}", 1);
    }
    if (sd) rmq__fj_free(sd);
    rmq__buf_free(&subs);
    rmq__c_reply_body(conn, req, &body);
    rmq__buf_free(&body);
    rmq__fj_free(d);
}

/* Bin of a MessageQueue key in a java.util.HashMap of capacity cap (MessageQueue.hashCode,
 * spread h ^ (h >>> 16)). */
static uint32_t mq_bin(const rmq_mq_t *mq, uint32_t cap)
{
    uint32_t h = 31u + (uint32_t)rmq_java_hash(mq->broker_name, strlen(mq->broker_name));
    h = 31u * h + (uint32_t)mq->queue_id;
    h = 31u * h + (uint32_t)rmq_java_hash(mq->topic, strlen(mq->topic));
    return (h ^ (h >> 16)) & (cap - 1);
}

static void h_consumer_status(rmq_conn_t *conn, rmq_cmd_t *req, void *ud)
{
    rmq_consumer_t *c = ud;
    if (!rmq__c_group_is_ours(c, conn, req, "group")) return;
    const char *topic = rmq__cmd_ext(req, "topic");
    rmq_fjdoc_t *d = rmq__fj_new();
    rmq_fj_t *root = rmq__fj_new_obj(d);
    rmq__fj_set_root(d, root);
    rmq__fj_obj_set(d, root, "consumerTable", rmq__fj_new_obj(d));
    rmq_fj_t *t = rmq__fj_new_obj(d);
    /* cloneOffsetTable fills a new HashMap: its iteration order is by bin (the capacity doubles
     * from 16 while the entries exceed 3/4 of it), then insertion order. */
    int n = 0;
    for (rmq_qent_t *q = c->queues; q; q = q->next)
        n++;
    rmq_qent_t **sel = rmq__xmalloc(sizeof(*sel) * ((size_t)n + 1));
    uint32_t *bin = rmq__xmalloc(sizeof(*bin) * ((size_t)n + 1));
    n = 0;
    for (rmq_qent_t *q = c->queues; q; q = q->next) {
        if (topic && *topic && strcmp(topic, q->mq.topic)) continue;
        if (q->offset < 0) continue;
        sel[n++] = q;
    }
    uint32_t cap = 16;
    while ((uint64_t)n * 4 > (uint64_t)cap * 3)
        cap *= 2;
    for (int i = 0; i < n; i++) {
        rmq_qent_t *v = sel[i];
        uint32_t b = mq_bin(&v->mq, cap);
        int j = i;
        for (; j > 0 && bin[j - 1] > b; j--) {
            sel[j] = sel[j - 1];
            bin[j] = bin[j - 1];
        }
        sel[j] = v;
        bin[j] = b;
    }
    for (int i = 0; i < n; i++)
        rmq__fj_obj_add(t, rmq__fj_new_mq(d, sel[i]->mq.topic, sel[i]->mq.broker_name,
                                          sel[i]->mq.queue_id),
                        rmq__fj_new_i64(d, sel[i]->offset));
    free(sel);
    free(bin);
    rmq__fj_obj_set(d, root, "messageQueueTable", t);
    rmq_buf_t body;
    rmq__buf_init(&body);
    rmq__fj_write(&body, root, 0);
    rmq__c_reply_body(conn, req, &body);
    rmq__buf_free(&body);
    rmq__fj_free(d);
}

/* RESET_CONSUMER_CLIENT_OFFSET: pause, drop the queues, after 10 s write the new offsets and
 * resume with a rebalance (MQClientInstance.resetOffset). */
typedef struct reset_op {
    uv_timer_t t;
    rmq_consumer_t *c;
    rmq_mq_t *mqs;
    int64_t *offs;
    int n;       /* entries of mqs/offs (all freed) */
    int n_write; /* the first n_write: queues held when the reset came, written at the end */
} reset_op_t;

/* MQClientInstance.resetOffset sleeps 10 s between dropping the queues and writing offsets. */
#define RMQ_RESET_OFFSET_PAUSE_MS 10000

static void reset_close(uv_handle_t *h)
{
    reset_op_t *r = (reset_op_t *)h;
    rmq__mqs_free(r->mqs, r->n);
    free(r->offs);
    free(r);
}

static void on_reset_timer(uv_timer_t *t)
{
    reset_op_t *r = (reset_op_t *)t;
    rmq_consumer_t *c = r->c;
    if (c->state == RMQ_CLIENT_RUNNING) {
        for (int i = 0; i < r->n_write; i++) {
            rmq_cmd_t cmd;
            const char *addr = rmq__c_master_addr(c, r->mqs[i].broker_name);
            if (!addr) continue;
            rmq__cmd_init(&cmd, RMQ_REQ_UPDATE_CONSUMER_OFFSET, RMQ_SERIALIZE_JSON);
            rmq__cmd_set_ext(&cmd, "consumerGroup", c->group);
            rmq__cmd_set_ext(&cmd, "topic", r->mqs[i].topic);
            rmq__cmd_set_ext_i64(&cmd, "queueId", r->mqs[i].queue_id);
            rmq__cmd_set_ext_i64(&cmd, "commitOffset", r->offs[i]);
            rmq__remoting_oneway(c->rt, addr, &cmd);
            rmq__cmd_free(&cmd);
        }
    }
    if (c->paused > 0) c->paused--;
    if (c->state == RMQ_CLIENT_RUNNING && !c->paused) {
        rmq_log_info("client", "reset offsets of %s written for %d queue(s), consumer resumed",
                     r->mqs && r->n ? r->mqs[0].topic : "", r->n_write);
        rmq__rb_wakeup(c);
    }
    uv_close((uv_handle_t *)t, reset_close);
}

static void h_reset_offset(rmq_conn_t *conn, rmq_cmd_t *req, void *ud)
{
    rmq_consumer_t *c = ud;
    (void)conn;
    const char *g = rmq__cmd_ext(req, "group");
    const char *topic = rmq__cmd_ext(req, "topic");
    if (!g || strcmp(g, c->group) || !topic || c->state != RMQ_CLIENT_RUNNING) return;
    char err[128];
    rmq_fjdoc_t *d = NULL;
    if (req->body && req->body_len) {
        d = rmq__fj_parse(req->body, req->body_len, err, sizeof(err));
        if (!d) {
            rmq_log_error("client", "RESET_CONSUMER_CLIENT_OFFSET: bad body: %s", err);
            return;
        }
    }
    rmq_fj_t *tab = d ? rmq__fj_get(rmq__fj_root(d), "offsetTable") : NULL;
    reset_op_t *r = rmq__xcalloc(1, sizeof(*r));
    r->c = c;
    int cap = tab ? (int)tab->len + 1 : 1;
    r->mqs = rmq__xcalloc((size_t)cap, sizeof(rmq_mq_t));
    r->offs = rmq__xcalloc((size_t)cap, sizeof(int64_t));
    for (rmq_fj_t *e = tab ? tab->child : NULL; e; e = e->next) {
        const rmq_fj_t *mqo = tab->type == RMQ_FJ_OBJECT ? e->key : e;
        int64_t off = 0;
        if (!mqo || mqo->type != RMQ_FJ_OBJECT) continue;
        if (tab->type == RMQ_FJ_OBJECT ? rmq__fj_i64(e, &off) : rmq__fj_get_i64(e, "offset", &off))
            continue;
        const char *t = rmq__fj_get_str(mqo, "topic"), *b = rmq__fj_get_str(mqo, "brokerName");
        int32_t qid = 0;
        if (!t || !b || rmq__fj_get_i32(mqo, "queueId", &qid) || strcmp(t, topic)) continue;
        r->mqs[r->n].topic = rmq__xstrdup(t);
        r->mqs[r->n].broker_name = rmq__xstrdup(b);
        r->mqs[r->n].queue_id = qid;
        r->offs[r->n++] = off;
    }
    rmq__fj_free(d);
    rmq_log_info("client", "broker asked to reset %d queue offset(s) of %s", r->n, topic);
    c->paused++;
    /* Only the queues this consumer holds are dropped now and written after the pause. */
    int kept = 0;
    for (int i = 0; i < r->n; i++) {
        rmq_qent_t *q = c->queues;
        while (q && rmq__mq_cmp(&q->mq, &r->mqs[i]))
            q = q->next;
        if (q) {
            q->offset = -1; /* not persisted: the reset value is written later */
            rmq__rb_drop_queue(c, q, 0);
            rmq_mq_t tmp = r->mqs[kept];
            r->mqs[kept] = r->mqs[i];
            r->mqs[i] = tmp;
            r->offs[kept++] = r->offs[i];
        }
    }
    rmq_log_info("client", "%d of them held here: pulls paused for %d ms", kept,
                 RMQ_RESET_OFFSET_PAUSE_MS);
    r->n_write = kept;
    uv_timer_init(&c->loop, &r->t);
    uv_timer_start(&r->t, on_reset_timer, RMQ_RESET_OFFSET_PAUSE_MS, 0);
}

/* ---- clientId --------------------------------------------------------------------------------- */

static void make_client_id(rmq_consumer_t *c)
{
    char ip[64];
    const rmq_conf_t *cf = c->conf;
    if (cf->client_ip && *cf->client_ip)
        snprintf(ip, sizeof(ip), "%s", cf->client_ip);
    else
        rmq__local_ip(ip, sizeof(ip));
    char inst[128];
    const char *iname = cf->instance_name ? cf->instance_name : "DEFAULT";
    if (cf->message_model == RMQ_MODEL_CLUSTERING && !strcmp(iname, "DEFAULT"))
        snprintf(inst, sizeof(inst), "%d#%" PRIu64, (int)getpid(), (uint64_t)uv_hrtime());
    else
        snprintf(inst, sizeof(inst), "%s", iname);
    int k = snprintf(c->client_id, sizeof(c->client_id), "%s@%s", ip, inst);
    if (cf->unit_name && *cf->unit_name && k > 0 && (size_t)k < sizeof(c->client_id))
        k += snprintf(c->client_id + k, sizeof(c->client_id) - (size_t)k, "@%s", cf->unit_name);
    if (cf->enable_stream_request_type && k > 0 && (size_t)k < sizeof(c->client_id))
        snprintf(c->client_id + k, sizeof(c->client_id) - (size_t)k, "@STREAM");
}

/* ---- lifecycle -------------------------------------------------------------------------------- */

static void on_stop_async(uv_async_t *a);

/*
 * A broker refused a request on ACL grounds (any request: heartbeat, pull, offsets, send-back,
 * the re-send to %RETRY%). Before the consumer is established it stops with
 * RMQ_CONSUMER_EXIT_ACL; afterwards (a permission revoked while running) it is logged, the
 * request's own retry goes on, and the same message is repeated at most once a minute.
 */
static void on_acl_refused(void *ud, const char *addr, int32_t code, const rmq_cmd_t *resp)
{
    rmq_consumer_t *c = ud;
    char msg[768];
    rmq__acl_explain(msg, sizeof msg, addr, code, c->conf->access_key, resp->remark);
    if (!c->acl_established && c->state == RMQ_CLIENT_RUNNING &&
        !atomic_load(&c->stop_requested)) {
        rmq_log_error("client", "%s; stopping (exit code %d)", msg, RMQ_CONSUMER_EXIT_ACL);
        c->exit_code = RMQ_CONSUMER_EXIT_ACL;
        c->acl_last_ms = rmq__mono_ms();
        snprintf(c->acl_last, sizeof c->acl_last, "%s", msg);
        rmq__consumer_stop(c);
        return;
    }
    int64_t now = rmq__mono_ms();
    if (!strncmp(c->acl_last, msg, sizeof c->acl_last - 1) && now - c->acl_last_ms < 60000)
        return;
    snprintf(c->acl_last, sizeof c->acl_last, "%s", msg);
    c->acl_last_ms = now;
    rmq_log_error("client", "%s", msg);
}

int rmq__consumer_new(rmq_conf_t *conf, const rmq_handler_t *handler, rmq_consumer_t **out,
                      char *errstr, size_t errstr_size)
{
    *out = NULL;
    if (rmq__conf_check(conf, errstr, errstr_size)) return RMQ_ERR_CONFIG;
    if (conf->n_subs == 0) {
        rmq__seterr(errstr, errstr_size, "no subscription: the script subscribes to nothing "
                    "(option subscribe)");
        return RMQ_ERR_CONFIG;
    }
    if ((!conf->namesrv_addr || !*conf->namesrv_addr) &&
        (!conf->namesrv_domain || !*conf->namesrv_domain)) {
        rmq__seterr(errstr, errstr_size, "no name server: set namesrv_addr (or NAMESRV_ADDR) or "
                    "namesrv_domain");
        return RMQ_ERR_CONFIG;
    }
    rmq_consumer_t *c = rmq__xcalloc(1, sizeof(*c));
    uv_mutex_init(&c->stats_mu);
    c->conf = rmq__conf_dup(conf);
    c->hops = handler->ops;
    c->himpl = handler->impl;
    c->flow = rmq__flow_new(c);
    c->reconf = rmq__reconf_new();
    int rc = c->hops->bind(c->himpl, c, c->flow, errstr, errstr_size);
    if (rc) {
        rmq__flow_free(c->flow);
        rmq__reconf_free(c->reconf);
        uv_mutex_destroy(&c->stats_mu);
        rmq__conf_destroy(c->conf);
        free(c);
        return rc;
    }
    c->hooks = c->hops->hooks ? c->hops->hooks(c->himpl) : 0;
    rmq__stats_init(c);
    const rmq_conf_t *cf = c->conf;
    c->group = rmq__ns_wrap(cf->namespace, cf->consumer_group);
    rmq_buf_t b;
    rmq__buf_init(&b);
    rmq__buf_appendf(&b, "%%RETRY%%%s", c->group);
    c->retry_topic = b.data;
    c->retry_topic_len = b.len;
    c->orderly = cf->message_listener == RMQ_LISTENER_ORDERLY;
    c->max_reconsume = cf->max_reconsume_times >= 0 ? cf->max_reconsume_times
                       : c->orderly                 ? INT_MAX
                                                    : RMQ_MAX_RECONSUME_DEFAULT;
    if (rmq__c_build_subs(c, cf, &c->subs, &c->n_subs, errstr, errstr_size)) {
        rmq__consumer_destroy(c);
        return RMQ_ERR_CONFIG;
    }
    c->routes = rmq__xcalloc((size_t)c->n_subs, sizeof(rmq_route_t *));
    /* Certificates and keys are read here, before any connection (a file that does not load
     * is a configuration error naming it). */
    if (rmq__tls_ctx_from_conf(cf, &c->tls, errstr, errstr_size)) {
        rmq__consumer_destroy(c);
        return RMQ_ERR_CONFIG;
    }
    c->thr_queue = cf->pull_threshold_for_queue;
    c->thr_size_queue = cf->pull_threshold_size_for_queue;
    /* What the lower parts ask of the rebalance (consumer_int.h, "hooks"). */
    c->hook_rb_wakeup = rmq__rb_wakeup;
    c->hook_drop_queue = rmq__rb_drop_queue;
    c->hook_pop_result = rmq__pop_result;
    if (uv_loop_init(&c->loop)) {
        rmq__seterr(errstr, errstr_size, "cannot create the event loop");
        rmq__consumer_destroy(c);
        return RMQ_ERR_NOMEM;
    }
    uv_async_init(&c->loop, &c->stop_async, on_stop_async);
    c->stop_async.data = c;
    *out = c;
    return 0;
}

static void timer_init(rmq_consumer_t *c, uv_timer_t *t)
{
    uv_timer_init(&c->loop, t);
    t->data = c;
}

static void shutdown_begin(rmq_consumer_t *c);

static void on_stop_async(uv_async_t *a)
{
    rmq_consumer_t *c = a->data;
    int stop = atomic_load(&c->stop_requested);
    /* Taken with an exchange: a SIGHUP that lands from here on is kept for the next wake-up. */
    if (!stop && c->state == RMQ_CLIENT_RUNNING && atomic_exchange(&c->reload_requested, 0)) {
        if (c->hops->reload) c->hops->reload(c->himpl);
    }
    if (stop && c->state == RMQ_CLIENT_RUNNING) shutdown_begin(c);
    else if (stop && c->state == RMQ_CLIENT_CREATED) uv_close((uv_handle_t *)a, NULL);
}

/* Any thread, and a signal handler (SIGHUP): an atomic store (lock-free) and uv_async_send are
 * both async-signal-safe. The loop thread takes the request in on_stop_async. */
void rmq__consumer_reload(rmq_consumer_t *c)
{
    atomic_store(&c->reload_requested, 1);
    uv_async_send(&c->stop_async);
}

/* The address service's answer: new connections to a name server use it; the routes are asked
 * for at once from the new list. Loop thread. */
static int on_nsaddr_list(void *ud, const char *list, char *errstr, size_t errstr_size)
{
    rmq_consumer_t *c = ud;
    if (rmq__remoting_set_namesrv(c->rt, list, errstr, errstr_size)) return RMQ_ERR_CONFIG;
    free(c->nsaddr_list);
    c->nsaddr_list = rmq__xstrdup(list);
    if (c->state == RMQ_CLIENT_RUNNING) rmq__c_refresh_routes(c);
    return 0;
}

static int start_nsaddr(rmq_consumer_t *c, char *errstr, size_t errstr_size)
{
    const rmq_conf_t *cf = c->conf;
    char *url = rmq__nsaddr_url(cf->namesrv_domain, cf->namesrv_domain_subgroup, cf->unit_name);
    int rc =
        rmq__nsaddr_start(&c->loop, url, cf->namesrv_addr_refresh_interval, RMQ_NSADDR_TIMEOUT_MS,
                          on_nsaddr_list, c, &c->nsaddr, errstr, errstr_size);
    if (!rc) rmq_log_info("client", "name server list from the address service %s", url);
    free(url);
    return rc;
}

int rmq__consumer_run(rmq_consumer_t *c)
{
    char err[512];
    const rmq_conf_t *cf = c->conf;
    if (atomic_load(&c->stop_requested)) {
        uv_close((uv_handle_t *)&c->stop_async, NULL);
        uv_run(&c->loop, UV_RUN_DEFAULT);
        return RMQ_CONSUMER_EXIT_OK;
    }
    /* A broker closing a connection must not kill the process with SIGPIPE on the next write
     * (libuv writes with write(2)): the process ignores SIGPIPE from here on. */
    signal(SIGPIPE, SIG_IGN);
    rmq__client_set_state(c, RMQ_CLIENT_STARTING);
    make_client_id(c);
    c->start_ms = rmq__now_ms();
    if (rmq__offset_load(c, err, sizeof(err))) {
        rmq_log_error("client", "cannot start: %s", err);
        uv_close((uv_handle_t *)&c->stop_async, NULL);
        uv_run(&c->loop, UV_RUN_DEFAULT);
        return RMQ_CONSUMER_EXIT_FAILURE;
    }
    rmq_remoting_opts_t ro = {0};
    ro.loop = &c->loop;
    ro.name = "remoting";
    ro.max_frame = (size_t)cf->frame_max_length;
    ro.tls_client = c->tls;
    ro.acl_access_key = cf->access_key;
    ro.acl_secret_key = cf->secret_key;
    ro.acl_security_token = cf->security_token;
    ro.on_acl_refused = on_acl_refused;
    ro.on_open = rmq__stats_on_open;
    ro.on_close = rmq__stats_on_close;
    ro.ud = c;
    int by_http = !cf->namesrv_addr || !*cf->namesrv_addr;
    if (rmq__remoting_new(&ro, &c->rt, err, sizeof(err)) ||
        (by_http ? start_nsaddr(c, err, sizeof(err))
                 : rmq__remoting_set_namesrv(c->rt, cf->namesrv_addr, err, sizeof(err)))) {
        rmq_log_error("client", "cannot start: %s", err);
        if (c->rt) rmq__remoting_destroy(c->rt, NULL, NULL);
        c->rt = NULL;
        uv_close((uv_handle_t *)&c->stop_async, NULL);
        uv_run(&c->loop, UV_RUN_DEFAULT);
        return RMQ_CONSUMER_EXIT_CONFIG;
    }
    timer_init(c, &c->t_route);
    timer_init(c, &c->t_heartbeat);
    timer_init(c, &c->t_rebalance);
    timer_init(c, &c->t_persist);
    timer_init(c, &c->t_stats);
    timer_init(c, &c->t_retry);
    timer_init(c, &c->t_drain);
    timer_init(c, &c->t_expire);
    timer_init(c, &c->t_lock);
    timer_init(c, &c->t_bad);
    rmq__remoting_set_handler(c->rt, RMQ_REQ_NOTIFY_CONSUMER_IDS_CHANGED, h_notify, c);
    rmq__remoting_set_handler(c->rt, RMQ_REQ_GET_CONSUMER_RUNNING_INFO, h_running_info, c);
    rmq__remoting_set_handler(c->rt, RMQ_REQ_GET_CONSUMER_STATUS_FROM_CLIENT, h_consumer_status,
                              c);
    rmq__remoting_set_handler(c->rt, RMQ_REQ_RESET_CONSUMER_CLIENT_OFFSET, h_reset_offset, c);
    rmq__remoting_set_handler(c->rt, RMQ_REQ_CONSUME_MESSAGE_DIRECTLY, rmq__direct_request, c);
    rmq_producer_opts_t po = {0};
    po.group = RMQ_PRODUCER_INNER_GROUP;
    po.retry_times = -1;
    po.unit_mode = cf->unit_mode;
    /* The inner producer shares the client instance's route refresh and request timeout. */
    po.route_poll_ms = cf->poll_name_server_interval;
    po.route_timeout_ms = cf->mq_client_api_timeout;
    if (rmq__producer_new(&c->loop, c->rt, &po, &c->producer, err, sizeof(err))) {
        rmq_log_warn("client", "no internal producer (send-back fallback off): %s", err);
        c->producer = NULL;
    }
    if (cf->enable_msg_trace && c->producer)
        c->trace = rmq__trace_new(&c->loop, c->producer, cf->customized_trace_topic,
                                  cf->consumer_group);
    rmq__flow_start(c->flow, &c->loop, cf->consume_tps_limit, cf->pull_batch_size);
    rmq_runner_opts_t pl;
    rmq__consumer_runner_opts(c, cf, &pl);
    if (rmq__stats_start(c, err, sizeof(err))) {
        rmq_log_error("client", "cannot start: %s", err);
        c->exit_code = RMQ_CONSUMER_EXIT_FAILURE;
        rmq__client_set_state(c, RMQ_CLIENT_RUNNING);
        atomic_store(&c->stop_requested, 1);
        shutdown_begin(c);
        uv_run(&c->loop, UV_RUN_DEFAULT);
        return c->exit_code;
    }
    if (c->hops->start(c->himpl, &pl, &c->pool, err, sizeof(err))) {
        rmq_log_error("client", "cannot start the consume threads: %s", err);
        c->pool = NULL;
        c->exit_code = RMQ_CONSUMER_EXIT_CONFIG;
        rmq__client_set_state(c, RMQ_CLIENT_RUNNING);
        atomic_store(&c->stop_requested, 1);
        shutdown_begin(c);
        uv_run(&c->loop, UV_RUN_DEFAULT);
        return c->exit_code;
    }
    rmq__client_set_state(c, RMQ_CLIENT_RUNNING);
    rmq_log_info("client", "consumer %s started as %s (%d subscription(s), %d consume "
                 "thread(s))", c->group, c->client_id, c->n_subs, cf->consume_thread_min);
    uv_timer_start(&c->t_route, rmq__c_route_timer, (uint64_t)cf->poll_name_server_interval,
                   (uint64_t)cf->poll_name_server_interval);
    uv_timer_start(&c->t_heartbeat, rmq__c_heartbeat_timer,
                   (uint64_t)cf->heartbeat_broker_interval,
                   (uint64_t)cf->heartbeat_broker_interval);
    uv_timer_start(&c->t_persist, on_persist_timer, (uint64_t)cf->persist_consumer_offset_interval,
                   (uint64_t)cf->persist_consumer_offset_interval);
    uv_timer_start(&c->t_stats, on_stats_timer, 1000, 1000);
    if (c->orderly && cf->message_model == RMQ_MODEL_CLUSTERING)
        uv_timer_start(&c->t_lock, rmq__orderly_lock_all_timer, 1000, RMQ_LOCK_INTERVAL_MS);
    if (!c->orderly) {
        /* cleanExpiredMsg runs every consume timeout (ConsumeMessageConcurrentlyService.start). */
        uint64_t iv = (uint64_t)rmq__conf_consume_timeout_ms(cf);
        uv_timer_start(&c->t_expire, rmq__consume_expire_timer, iv, iv);
    }
    rmq__rb_timer_start(c);
    rmq__c_refresh_routes(c);
    if (c->hops->run) c->hops->run(c->himpl); /* --watch */
    if (atomic_load(&c->stop_requested)) shutdown_begin(c);
    uv_run(&c->loop, UV_RUN_DEFAULT);
    stats_build(c);
    rmq__stats_tick(c);
    return c->exit_code;
}

/* ---- shutdown (PROTOCOL.md 6.17) ------------------------------------------------------------ */

static void shutdown_persist(rmq_consumer_t *c);
static void shutdown_finish(rmq_consumer_t *c);

static void on_pool_closed(void *ud)
{
    rmq_consumer_t *c = ud;
    c->pool = NULL;
    rmq_dbg(RMQ_DBG_CONSUME, "client", "consume threads stopped; %d send-back(s) in flight",
            c->inflight_sendbacks);
    shutdown_persist(c);
}

void rmq__c_shutdown_resume(rmq_consumer_t *c)
{
    shutdown_persist(c);
}

static void shutdown_begin(rmq_consumer_t *c)
{
    rmq_log_info("client", "shutting down %s", c->client_id);
    rmq__client_set_state(c, RMQ_CLIENT_DRAINING);
    uv_timer_stop(&c->t_route);
    uv_timer_stop(&c->t_heartbeat);
    uv_timer_stop(&c->t_rebalance);
    uv_timer_stop(&c->t_expire);
    uv_timer_stop(&c->t_lock);
    rmq__flow_close(c->flow); /* parked queues released, no more pulls */
    if (c->hops->close) c->hops->close(c->himpl); /* no reload from now on */
    rmq__reconf_close(c);
    rmq__consume_abandon_retries(c);
    rmq__undecodable_abandon(c);
    if (c->pool)
        c->hops->stop(c->pool, c->conf->await_termination_millis_when_shutdown, on_pool_closed,
                      c);
    else
        shutdown_persist(c);
}

typedef struct unreg_round {
    rmq_consumer_t *c;
    int pending;
} unreg_round_t;

static void unreg_done(unreg_round_t *r)
{
    if (--r->pending > 0) return;
    rmq_consumer_t *c = r->c;
    free(r);
    shutdown_finish(c);
}

static void on_unreg(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    (void)resp;
    if (err) rmq_log_warn("client", "UNREGISTER_CLIENT failed: %s", errmsg);
    unreg_done(ud);
}

static void on_drain_timer(uv_timer_t *t) { shutdown_persist(t->data); }

static void shutdown_persist(rmq_consumer_t *c)
{
    if (c->state != RMQ_CLIENT_DRAINING) return;
    if (c->pool || c->n_retiring > 0) return; /* a pool a reload replaced is still finishing */
    /* Send-backs in flight get a bounded wait (their own timeout is 5 s, then the re-send). */
    if (c->inflight_sendbacks > 0 && !c->drain_started) {
        c->drain_started = 1;
        c->drain_deadline = rmq__mono_ms() + 9000;
        uv_timer_start(&c->t_drain, on_drain_timer, 50, 50);
        return;
    }
    if (c->inflight_sendbacks > 0 && rmq__mono_ms() < c->drain_deadline) return;
    uv_timer_stop(&c->t_drain);
    stats_build(c);
    rmq__client_set_state(c, RMQ_CLIENT_CLOSING);
    rmq__trace_flush(c->trace); /* best effort: on the wire before UNREGISTER_CLIENT returns */
    /* Persist every owned queue's offset (oneway), then drop them all. */
    rmq__offset_persist_all(c);
    while (c->queues) rmq__rb_drop_queue(c, c->queues, 0);
    const char **addrs;
    int n = rmq__c_all_addrs(c, &addrs);
    unreg_round_t *r = rmq__xcalloc(1, sizeof(*r));
    r->c = c;
    r->pending = 1;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 2; k++) {
            rmq_cmd_t cmd;
            rmq__cmd_init(&cmd, RMQ_REQ_UNREGISTER_CLIENT, RMQ_SERIALIZE_JSON);
            rmq__cmd_set_ext(&cmd, "clientID", c->client_id);
            rmq__cmd_set_ext(&cmd, k == 0 ? "consumerGroup" : "producerGroup",
                             k == 0 ? c->group : RMQ_PRODUCER_INNER_GROUP);
            int rc = rmq__remoting_request_ex(c->rt, addrs[i], &cmd,
                                              c->conf->mq_client_api_timeout, RMQ_REQF_SYNC,
                                              on_unreg, r);
            rmq__cmd_free(&cmd);
            if (rc == 0) r->pending++;
        }
    }
    free(addrs);
    unreg_done(r);
}

static void on_rt_closed(void *ud)
{
    rmq_consumer_t *c = ud;
    c->rt = NULL;
    uv_close((uv_handle_t *)&c->stop_async, NULL);
}

static void shutdown_finish(rmq_consumer_t *c)
{
    if (c->nsaddr) rmq__nsaddr_close(c->nsaddr);
    c->nsaddr = NULL;
    uv_timer_stop(&c->t_persist);
    uv_timer_stop(&c->t_stats);
    uv_timer_stop(&c->t_drain);
    uv_timer_stop(&c->t_retry);
    uv_close((uv_handle_t *)&c->t_route, NULL);
    uv_close((uv_handle_t *)&c->t_heartbeat, NULL);
    uv_close((uv_handle_t *)&c->t_rebalance, NULL);
    uv_close((uv_handle_t *)&c->t_persist, NULL);
    uv_close((uv_handle_t *)&c->t_stats, NULL);
    uv_close((uv_handle_t *)&c->t_retry, NULL);
    uv_close((uv_handle_t *)&c->t_drain, NULL);
    uv_close((uv_handle_t *)&c->t_expire, NULL);
    uv_close((uv_handle_t *)&c->t_lock, NULL);
    uv_close((uv_handle_t *)&c->t_bad, NULL);
    rmq__stats_close(c);
    rmq__trace_close(c->trace);
    c->trace = NULL;
    if (c->producer) rmq__producer_destroy(c->producer);
    c->producer = NULL;
    rmq__client_set_state(c, RMQ_CLIENT_STOPPED);
    rmq_log_info("client", "%s stopped: %" PRId64 " message(s) consumed, %" PRId64
                 " sent back", c->client_id, c->n_consumed, c->n_retried);
    if (c->rt)
        rmq__remoting_destroy(c->rt, on_rt_closed, c);
    else
        on_rt_closed(c);
}

void rmq__consumer_destroy(rmq_consumer_t *c)
{
    if (!c) return;
    free(c->nsaddr_list);
    if (c->stop_async.loop) {
        if (!uv_is_closing((uv_handle_t *)&c->stop_async))
            uv_close((uv_handle_t *)&c->stop_async, NULL);
        uv_run(&c->loop, UV_RUN_DEFAULT);
        uv_loop_close(&c->loop);
    }
    rmq_route_t **rt = c->routes;
    for (int i = 0; i < c->n_subs; i++) {
        rmq__sub_destroy(c->subs[i].sd);
        rmq__mqs_free(c->subs[i].mqs, c->subs[i].n_mqs);
        if (rt && rt[i]) rmq__route_free(rt[i]);
    }
    free(c->routes);
    free(c->subs);
    rmq__tls_ctx_release(c->tls);
    rmq__flow_free(c->flow);
    rmq__reconf_free(c->reconf);
    rmq__stats_free(c);
    uv_mutex_destroy(&c->stats_mu);
    rmq__conf_destroy(c->conf);
    rmq__local_offsets_free(c);
    free(c->group);
    free(c->retry_topic);
    free(c);
}
