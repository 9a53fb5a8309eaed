/*
 * instance.c -- the client instance's shared state, as the engine's parts (pull, consume,
 * rebalance, offsets, stats) read it: the client state machine, the subscriptions and the
 * broker addresses the routes give (MQClientInstance.findBrokerAddressIn*), the namespace of
 * message topics (PROTOCOL.md 9), the CONSUMER_SEND_MSG_BACK request of a message, the
 * answers to a broker's requests, and the stop request.
 * It calls no other file of the engine: every part may use it.
 *
 * Ownership: the consumer owns its subscriptions and routes (see consumer_int.h); the strings
 * returned here are borrowed from them (valid until the next route of that topic) unless said
 * otherwise.
 * Threads: rmq__consumer_stop from any thread (async-signal-safe); everything else on the loop
 * thread (rmq__c_build_subs also on the thread of rmq__consumer_new, before the loop runs).
 */
#include "consumer_int.h"

#include "protocol/namespace.h"
#include "protocol/route.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- client state machine ------------------------------------------------------------------- */

static const char *client_state_names[] = {"CREATED", "STARTING", "RUNNING",
                                           "DRAINING", "CLOSING", "STOPPED"};

const char *rmq__client_state_name(rmq_client_state_t s)
{
    return (unsigned)s < RMQ_ARRAY_SIZE(client_state_names) ? client_state_names[s] : "?";
}

void rmq__client_set_state(rmq_consumer_t *c, rmq_client_state_t s)
{
    if (c->state == s) return;
    rmq_dbg(RMQ_DBG_ALL, "client", "%s: %s -> %s", c->client_id,
            rmq__client_state_name(c->state), rmq__client_state_name(s));
    c->state = s;
}

/* ---- namespaces (PROTOCOL.md 9, namespace.c) -------------------------------------------------- */

/*
 * Before the handler runs: NamespaceUtil.withoutNamespace(msg.getTopic(), namespace), as
 * ConsumeMessageConcurrentlyService / ConsumeMessageOrderlyService do in
 * resetRetryAndNamespace after the retry topic was restored: "ns%T" -> "T",
 * "%RETRY%ns%G" -> "%RETRY%G". m->store_topic is left as stored.
 */
void rmq__c_strip_namespace(rmq_consumer_t *c, rmq_msg_t *m)
{
    rmq__ns_strip_msg(c->conf->namespace, m);
}

char *rmq__c_wire_topic(rmq_consumer_t *c, const rmq_msg_t *m)
{
    char *t = rmq__xstrndup(m->topic, m->topic_len);
    char *w = rmq__ns_wrap(c->conf->namespace, t);
    free(t);
    return w;
}

void rmq__c_send_back_cmd(rmq_consumer_t *c, const rmq_msg_t *m, int delay_level,
                          const char *id, const char *topic, rmq_cmd_t *cmd)
{
    rmq__cmd_init(cmd, RMQ_REQ_CONSUMER_SEND_MSG_BACK, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext_i64(cmd, "offset", m->commit_log_offset);
    rmq__cmd_set_ext(cmd, "group", c->group);
    rmq__cmd_set_ext_i64(cmd, "delayLevel", delay_level);
    rmq__cmd_set_ext(cmd, "originMsgId", id);
    rmq__cmd_set_ext(cmd, "originTopic", topic);
    rmq__cmd_set_ext_bool(cmd, "unitMode", c->conf->unit_mode != 0); /* ClientConfig.isUnitMode() */
    rmq__cmd_set_ext_i64(cmd, "maxReconsumeTimes", c->max_reconsume);
}

/* ---- subscriptions and addresses -------------------------------------------------------------- */

int rmq__c_build_subs(rmq_consumer_t *c, const rmq_conf_t *cf, rmq_csub_t **out, int *n_out,
                      char *errstr, size_t errstr_size)
{
    rmq_csub_t *subs = rmq__xcalloc((size_t)cf->n_subs * 2 + 1, sizeof(rmq_csub_t));
    int n = 0, retry = 0;
    for (int i = 0; i < cf->n_subs; i++) {
        char *t = rmq__ns_wrap(cf->namespace, cf->subs[i].topic);
        int rc = rmq__sub_build(t, cf->subs[i].expression, cf->subs[i].type, &subs[n].sd, errstr,
                                errstr_size);
        free(t);
        if (rc) {
            for (int k = 0; k < n; k++) rmq__sub_destroy(subs[k].sd);
            free(subs);
            return RMQ_ERR_CONFIG;
        }
        if (!strcmp(subs[n].sd->topic, c->retry_topic)) retry = 1;
        n++;
    }
    if (cf->message_model == RMQ_MODEL_CLUSTERING && !cf->client_rebalance) {
        /* RebalanceImpl.updateMessageQueueAssignment: the POP retry topic of each topic
         * (KeyBuilder.buildPopRetryTopic, %RETRY%<group>_<topic>) is subscribed while the
         * topic is consumed in PULL mode, so that what POP left there is consumed too
         * (rebalance.c leaves it alone while the topic is popped). */
        int users = n;
        for (int i = 0; i < users; i++) {
            const char *t = subs[i].sd->topic;
            if (!strncmp(t, "%RETRY%", 7)) continue;
            size_t len = strlen(c->group) + strlen(t) + 9;
            char *pt = rmq__xmalloc(len);
            snprintf(pt, len, "%%RETRY%%%s_%s", c->group, t);
            if (rmq__sub_build(pt, "*", NULL, &subs[n].sd, errstr, errstr_size) == 0) {
                subs[n].pop_retry = 1;
                n++;
            }
            free(pt);
        }
    }
    if (cf->message_model == RMQ_MODEL_CLUSTERING && !retry) {
        rmq__sub_build(c->retry_topic, "*", NULL, &subs[n].sd, errstr, errstr_size);
        n++;
    }
    *out = subs;
    *n_out = n;
    return 0;
}

rmq_csub_t *rmq__c_sub(rmq_consumer_t *c, const char *topic)
{
    for (int i = 0; i < c->n_subs; i++)
        if (!strcmp(c->subs[i].sd->topic, topic)) return &c->subs[i];
    return NULL;
}

int rmq__c_tag_match(const rmq_csub_t *s, const rmq_msg_t *m)
{
    return rmq__sub_match_tags(s->sd, m->tags_len ? m->tags : NULL, m->tags_len);
}

static rmq_route_t **routes_of(rmq_consumer_t *c) { return c->routes; }

const char *rmq__c_master_addr(rmq_consumer_t *c, const char *broker_name)
{
    rmq_route_t **rt = routes_of(c);
    for (int i = 0; i < c->n_subs; i++) {
        if (!rt[i]) continue;
        const char *a = rmq__route_master_addr(rt[i], broker_name);
        if (a) return a;
    }
    return NULL;
}

const char *rmq__c_sub_addr(rmq_consumer_t *c, const char *broker_name, int64_t id, int *slave)
{
    rmq_route_t **rt = routes_of(c);
    const rmq_broker_data_t *bd = NULL;
    for (int i = 0; i < c->n_subs && !bd; i++)
        if (rt[i]) bd = rmq__route_broker(rt[i], broker_name);
    *slave = 0;
    if (!bd || bd->n_addrs == 0) return NULL;
    /* MQClientInstance.findBrokerAddressInSubscribe: the id, else id + 1 for a slave id (Java's
     * long wraps past Long.MAX_VALUE, where no broker is: nothing to look for then). */
    for (int k = 0; k < 2; k++) {
        if (k == 1 && (id == 0 || id == INT64_MAX)) break;
        int64_t want = k == 0 ? id : id + 1;
        for (int j = 0; j < bd->n_addrs; j++)
            if (bd->addrs[j].id == want) {
                *slave = want != 0;
                return bd->addrs[j].addr;
            }
    }
    *slave = bd->addrs[0].id != 0;
    return bd->addrs[0].addr;
}

const char *rmq__c_topic_addr(rmq_consumer_t *c, const char *topic)
{
    rmq_route_t **rt = routes_of(c);
    for (int i = 0; i < c->n_subs; i++) {
        if (strcmp(c->subs[i].sd->topic, topic) || !rt[i] || rt[i]->n_bds == 0) continue;
        const rmq_broker_data_t *bd = &rt[i]->bds[rand() % rt[i]->n_bds];
        const char *a = rmq__route_any_addr(rt[i], bd->broker_name);
        if (a) return a;
    }
    return NULL;
}

/* Every distinct broker address over all routes. Returns the count; *out is malloc'ed. */
int rmq__c_all_addrs(rmq_consumer_t *c, const char ***out)
{
    rmq_route_t **rt = routes_of(c);
    int n = 0, cap = 8;
    const char **v = rmq__xmalloc(sizeof(*v) * (size_t)cap);
    for (int i = 0; i < c->n_subs; i++) {
        if (!rt[i]) continue;
        for (int b = 0; b < rt[i]->n_bds; b++)
            for (int a = 0; a < rt[i]->bds[b].n_addrs; a++) {
                const char *addr = rt[i]->bds[b].addrs[a].addr;
                int dup = 0;
                for (int k = 0; k < n && !dup; k++) dup = !strcmp(v[k], addr);
                if (dup) continue;
                if (n == cap) v = realloc(v, sizeof(*v) * (size_t)(cap *= 2));
                v[n++] = addr;
            }
    }
    *out = v;
    return n;
}

/* ---- answers to broker requests ------------------------------------------------------------ */

void rmq__c_reply_error(rmq_conn_t *conn, rmq_cmd_t *req, int code, const char *remark)
{
    rmq_cmd_t resp;
    rmq__cmd_init_response(&resp, req, code, remark);
    rmq__conn_reply(conn, &resp);
    rmq__cmd_free(&resp);
}

void rmq__c_reply_body(rmq_conn_t *conn, rmq_cmd_t *req, rmq_buf_t *body)
{
    rmq_cmd_t resp;
    rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, NULL);
    resp.body = body->data;
    resp.body_len = body->len;
    rmq__conn_reply(conn, &resp);
    resp.body = NULL;
    rmq__cmd_free(&resp);
}

int rmq__c_group_is_ours(rmq_consumer_t *c, rmq_conn_t *conn, rmq_cmd_t *req, const char *key)
{
    const char *g = rmq__cmd_ext(req, key);
    if (g && !strcmp(g, c->group)) return 1;
    char remark[512];
    snprintf(remark, sizeof(remark), "The Consumer Group <%s> not exist in this consumer",
             g ? g : "");
    if (!(req->flag & RMQ_FLAG_ONEWAY))
        rmq__c_reply_error(conn, req, RMQ_RESP_SYSTEM_ERROR, remark);
    return 0;
}

/* ---- stop ------------------------------------------------------------------------------------- */

/* Any thread, and a signal handler: an atomic store (lock-free) and uv_async_send are both
 * async-signal-safe. The loop thread reads the flag in on_stop_async (client.c). */
void rmq__consumer_stop(rmq_consumer_t *c)
{
    atomic_store(&c->stop_requested, 1);
    uv_async_send(&c->stop_async);
}
