/*
 * routes.c -- the client instance's two periodic duties (MQClientInstance, PROTOCOL.md 6.3-6.5):
 * the routes of the subscribed topics from the name servers, every poll_name_server_interval
 * and when a part finds a broker missing (a topic without any route yet is asked again sooner),
 * and the heartbeats (HeartbeatData, 3.3) to every broker address of those routes, at every
 * heartbeat_broker_interval and when a route changes. A changed route first has its SQL92
 * subscriptions checked (check_client.c), then its heartbeat round wakes the rebalance through
 * the consumer's hook_rb_wakeup (set by rmq__consumer_new), not by calling up into
 * rebalance.c.
 *
 * Ownership: the routes belong to the consumer (c->routes, index-aligned with c->subs); a
 * request context belongs to its request until its callback ran, a heartbeat round to its
 * last answer.
 * Threads: loop thread only.
 */
#include "consumer_int.h"

#include "protocol/acl.h"
#include "protocol/route.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- heartbeat ---------------------------------------------------------------------------------- */

static const char *cfw_name(int cfw)
{
    switch (cfw) {
    case RMQ_CFW_FIRST_OFFSET: return "CONSUME_FROM_FIRST_OFFSET";
    case RMQ_CFW_TIMESTAMP: return "CONSUME_FROM_TIMESTAMP";
    case RMQ_CFW_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST:
        return "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST";
    case RMQ_CFW_MIN_OFFSET: return "CONSUME_FROM_MIN_OFFSET";
    case RMQ_CFW_MAX_OFFSET: return "CONSUME_FROM_MAX_OFFSET";
    default: return "CONSUME_FROM_LAST_OFFSET";
    }
}

static void heartbeat_json(rmq_consumer_t *c, rmq_buf_t *b)
{
    rmq__buf_append(b, "{\"clientID\":", 12);
    rmq__buf_append_json_str(b, c->client_id, strlen(c->client_id));
    rmq__buf_appendf(b, ",\"consumerDataSet\":[{\"consumeFromWhere\":\"%s\",\"consumeType\":"
                     "\"CONSUME_PASSIVELY\",\"groupName\":", cfw_name(c->conf->consume_from_where));
    rmq__buf_append_json_str(b, c->group, strlen(c->group));
    rmq__buf_appendf(b, ",\"messageModel\":\"%s\",\"subscriptionDataSet\":[",
                     c->conf->message_model == RMQ_MODEL_BROADCASTING ? "BROADCASTING"
                                                                       : "CLUSTERING");
    for (int i = 0; i < c->n_subs; i++) {
        if (i) rmq__buf_append(b, ",", 1);
        rmq__sub_to_json(c->subs[i].sd, b);
    }
    rmq__buf_appendf(b, "],\"unitMode\":%s}],\"producerDataSet\":[{\"groupName\":\"%s\"}]}",
                     c->conf->unit_mode ? "true" : "false", RMQ_PRODUCER_INNER_GROUP);
}

typedef struct hb_round {
    rmq_consumer_t *c;
    int pending;
    int wake_rebalance;
    int sent, failed;
} hb_round_t;

static void hb_round_done(hb_round_t *r)
{
    if (--r->pending > 0) return;
    if (r->sent > 0 && !r->failed && !r->c->acl_established) {
        r->c->acl_established = 1;
        rmq_dbg(RMQ_DBG_ALL, "client", "every broker accepted the heartbeat");
    }
    if (r->wake_rebalance && r->c->state == RMQ_CLIENT_RUNNING) r->c->hook_rb_wakeup(r->c);
    free(r);
}

static void on_hb(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    hb_round_t *r = ud;
    if (err || resp->code != RMQ_RESP_SUCCESS) r->failed++;
    if (err)
        rmq_log_warn("client", "HEART_BEAT failed: %s", errmsg);
    else if (resp->code != RMQ_RESP_SUCCESS && !rmq__acl_refused(resp))
        rmq_log_warn("client", "HEART_BEAT answered %s: %s", rmq_err_name(resp->code),
                     resp->remark ? resp->remark : "");
    hb_round_done(r);
}

static void heartbeat_round(rmq_consumer_t *c, int wake)
{
    if (c->state != RMQ_CLIENT_RUNNING) return;
    const char **addrs;
    int n = rmq__c_all_addrs(c, &addrs);
    rmq_buf_t body;
    rmq__buf_init(&body);
    heartbeat_json(c, &body);
    hb_round_t *r = rmq__xcalloc(1, sizeof(*r));
    r->c = c;
    r->pending = 1;
    r->wake_rebalance = wake;
    for (int i = 0; i < n; i++) {
        rmq_cmd_t cmd;
        rmq__cmd_init(&cmd, RMQ_REQ_HEART_BEAT, RMQ_SERIALIZE_JSON);
        cmd.language = c->conf->language;
        cmd.body = body.data;
        cmd.body_len = body.len;
        /* Sent as a synchronous call (MQClientAPIImpl.sendHearbeat is invokeSync): when it times
         * out, the connection is closed (clientCloseSocketIfTimeout), so a broker gone silent
         * (a partition, a half-open connection) is noticed within one heartbeat interval plus
         * mq_client_api_timeout, and the next request dials again. */
        int rc = rmq__remoting_request_ex(c->rt, addrs[i], &cmd, c->conf->mq_client_api_timeout,
                                          RMQ_REQF_SYNC, on_hb, r);
        cmd.body = NULL;
        rmq__cmd_free(&cmd);
        if (rc == 0) r->pending++, r->sent++;
        else r->failed++;
        rmq_dbg(RMQ_DBG_REMOTING, "client", "HEART_BEAT -> %s (%s)", addrs[i],
                rc ? rmq_err_name(rc) : "sent");
    }
    free(addrs);
    rmq__buf_free(&body);
    hb_round_done(r);
}

void rmq__c_heartbeat_all(rmq_consumer_t *c) { heartbeat_round(c, 0); }

void rmq__c_heartbeat_rebalance(rmq_consumer_t *c) { heartbeat_round(c, 1); }

void rmq__c_heartbeat_timer(uv_timer_t *t)
{
    rmq_consumer_t *c = t->data;
    heartbeat_round(c, 0);
}

/* ---- routes ------------------------------------------------------------------------------------ */

typedef struct route_req {
    rmq_consumer_t *c;
    int idx;
    uint32_t gen; /* c->subs_gen when asked: idx means nothing in another one */
} route_req_t;

static void on_route(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    route_req_t *rq = ud;
    rmq_consumer_t *c = rq->c;
    int i = rq->idx;
    uint32_t gen = rq->gen;
    free(rq);
    if (c->state != RMQ_CLIENT_RUNNING || gen != c->subs_gen) return;
    rmq_csub_t *s = &c->subs[i];
    s->route_inflight = 0;
    if (err || resp->code != RMQ_RESP_SUCCESS || !resp->body) {
        /* A topic without any route yet is asked again soon (the next name server after a
         * transport failure), not only at the next poll. */
        if (!s->have_route)
            uv_timer_start(&c->t_route, rmq__c_route_timer,
                           (uint64_t)c->conf->pull_time_delay_mills_when_exception,
                           (uint64_t)c->conf->poll_name_server_interval);
    }
    if (err) {
        rmq_log_warn("client", "GET_ROUTEINFO_BY_TOPIC %s failed: %s", s->sd->topic, errmsg);
        return;
    }
    if (resp->code != RMQ_RESP_SUCCESS || !resp->body) {
        /* TOPIC_NOT_EXIST on %RETRY% is normal until a heartbeat created it. */
        rmq_dbg(RMQ_DBG_NAMESRV, "client", "route of %s: %s %s", s->sd->topic,
                rmq_err_name(resp->code), resp->remark ? resp->remark : "");
        if (strncmp(s->sd->topic, "%RETRY%", 7))
            rmq_log_warn("client", "no route for topic %s: %s", s->sd->topic,
                         resp->remark ? resp->remark : rmq_err_name(resp->code));
        return;
    }
    char errstr[256];
    rmq_route_t *r = NULL;
    if (rmq__route_parse(resp->body, resp->body_len, &r, errstr, sizeof(errstr))) {
        rmq_log_error("client", "bad route of %s: %s", s->sd->topic, errstr);
        return;
    }
    rmq_route_t **rt = c->routes;
    if (rt[i] && s->have_route && rmq__route_equal(rt[i], r)) {
        rmq__route_free(r);
        return;
    }
    rmq_mq_t *mqs = NULL;
    int n = 0;
    rmq__route_subscribe_mqs(r, s->sd->topic, &mqs, &n);
    if (rt[i]) rmq__route_free(rt[i]);
    rt[i] = r;
    rmq__mqs_free(s->mqs, s->n_mqs);
    s->mqs = mqs;
    s->n_mqs = n;
    s->have_route = 1;
    rmq_log_info("client", "route of %s changed: %d readable queue(s) on %d broker(s)",
                 s->sd->topic, n, r->n_bds);
    /* A SQL92 subscription is checked with the broker first (check_client.c). New brokers
     * need our heartbeat before pulls; then rebalance. */
    if (rmq__check_client_config(c, s, rmq__c_heartbeat_rebalance)) return;
    heartbeat_round(c, 1);
}

void rmq__c_refresh_routes(rmq_consumer_t *c)
{
    if (c->state != RMQ_CLIENT_RUNNING) return;
    for (int i = 0; i < c->n_subs; i++) {
        rmq_csub_t *s = &c->subs[i];
        if (s->route_inflight) continue;
        rmq_cmd_t cmd;
        rmq__cmd_init(&cmd, RMQ_REQ_GET_ROUTEINFO_BY_TOPIC, RMQ_SERIALIZE_JSON);
        rmq__cmd_set_ext(&cmd, "topic", s->sd->topic);
        route_req_t *rq = rmq__xcalloc(1, sizeof(*rq));
        rq->c = c;
        rq->idx = i;
        rq->gen = c->subs_gen;
        /* Synchronous in the Java client too: a name server that stopped answering has its
         * connection closed, and the next query moves on to the next name server. */
        int rc = rmq__remoting_request_ex(c->rt, NULL, &cmd, c->conf->mq_client_api_timeout,
                                          RMQ_REQF_SYNC, on_route, rq);
        rmq__cmd_free(&cmd);
        if (rc) {
            free(rq);
            rmq_log_warn("client", "cannot ask the name server for %s: %s", s->sd->topic,
                         rmq_err_str(rc));
        } else {
            s->route_inflight = 1;
        }
    }
}

void rmq__c_route_timer(uv_timer_t *t) { rmq__c_refresh_routes(t->data); }
