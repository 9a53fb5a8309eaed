/*
 * devbroker_client.c -- clients and consumer groups of the development broker: HEART_BEAT,
 * UNREGISTER_CLIENT, NOTIFY_CONSUMER_IDS_CHANGED, channel expiry, GET_CONSUMER_LIST_BY_GROUP,
 * GET_CONSUMER_CONNECTION_LIST, GET_CONSUME_STATS, and the admin calls relayed to consumers
 * (GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY, INVOKE_BROKER_TO_RESET_OFFSET /
 * _GET_CONSUMER_STATUS through Broker2Client).
 *
 * PROTOCOL.md 3.3-3.6 (bodies), 6.5 (heartbeat/subscription).
 *
 * Ownership: a client record (db_client_t) belongs to its connection (conn ud) from the first
 * HEART_BEAT until the connection closes; groups point at client records and drop them when
 * the connection closes.
 * Threads: the broker thread only.
 */
#include "devbroker_int.h"
#include "protocol/fjson.h"
#include "protocol/message.h"
#include "protocol/subscription.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALL_CLIENT_TIMEOUT_MS 10000

/* ---- clients and groups ---------------------------------------------------------------------- */

static void notify_group(db_broker_t *b, db_group_t *g)
{
    for (int i = 0; i < g->n_members; i++) {
        rmq_cmd_t c;
        rmq__cmd_init(&c, RMQ_REQ_NOTIFY_CONSUMER_IDS_CHANGED, RMQ_SERIALIZE_JSON);
        rmq__cmd_set_ext(&c, "consumerGroup", g->name);
        int rc = rmq__conn_request(g->members[i]->conn, &c, 0, RMQ_REQF_ONEWAY, NULL, NULL);
        if (rc)
            rmq_dbg(RMQ_DBG_BROKER, DB_LOG, "notify %s failed: %s", g->members[i]->addr,
                    rmq_err_str(rc));
        rmq__cmd_free(&c);
    }
}

static void sub_free_v(void *v)
{
    rmq__sub_destroy(v);
}

static void group_free(db_group_t *g)
{
    free(g->name);
    free(g->consume_type);
    free(g->message_model);
    free(g->consume_from_where);
    free(g->members);
    rmq__dbmap_free(&g->subs, sub_free_v);
    free(g);
}

static void group_free_v(void *v)
{
    group_free(v);
}

void rmq__db_broker_free_groups(db_broker_t *b)
{
    rmq__dbmap_free(&b->groups, group_free_v);
    rmq__db_offsets_free(b);
}

static int group_has(const db_group_t *g, const db_client_t *c)
{
    for (int i = 0; i < g->n_members; i++)
        if (g->members[i] == c) return 1;
    return 0;
}

/* Remove c from g; returns 1 when it was a member. Frees the group when it becomes empty. */
static int group_remove(db_broker_t *b, db_group_t *g, db_client_t *c, int notify)
{
    for (int i = 0; i < g->n_members; i++) {
        if (g->members[i] != c) continue;
        g->members[i] = g->members[--g->n_members];
        if (g->n_members == 0) {
            rmq__dbmap_del(&b->groups, g->name);
            group_free(g);
        } else if (notify)
            notify_group(b, g);
        return 1;
    }
    return 0;
}

typedef struct {
    db_broker_t *b;
    db_client_t *c;
    db_group_t *list[256];
    int n;
} collect_t;

static void collect_groups(const char *key, void *val, void *ud)
{
    collect_t *cl = ud;
    if (cl->n < 256 && group_has(val, cl->c)) cl->list[cl->n++] = val;
}

static void client_drop(db_broker_t *b, db_client_t *c)
{
    collect_t cl = {.b = b, .c = c};
    rmq__dbmap_each(&b->groups, collect_groups, &cl);
    for (int i = 0; i < cl.n; i++)
        group_remove(b, cl.list[i], c, 1);
}

void rmq__db_broker_conn_closed(db_broker_t *b, rmq_conn_t *conn)
{
    rmq__db_pull_conn_closed(b, conn); /* its parked pulls go now */
    db_client_t *c = rmq__conn_get_ud(conn);
    if (!c) return;
    rmq__conn_set_ud(conn, NULL);
    client_drop(b, c);
    rmq__db_producers_drop(b, c);
    rmq__conn_release(c->conn);
    free(c->client_id);
    free(c);
}

typedef struct {
    int64_t now, expire_ms;
    db_client_t *list[256];
    int n;
} expired_t;

static void scan_expired(const char *key, void *val, void *ud)
{
    expired_t *ex = ud;
    db_group_t *g = val;
    for (int i = 0; i < g->n_members && ex->n < 256; i++) {
        db_client_t *c = g->members[i];
        int dup = 0;
        for (int k = 0; k < ex->n; k++)
            dup |= ex->list[k] == c;
        if (!dup && ex->now - c->last_ms > ex->expire_ms) ex->list[ex->n++] = c;
    }
}

/* ConsumerManager.scanNotActiveChannel: close channels without a heartbeat for too long (the
 * close handler then removes them from their groups and notifies the rest). */
void rmq__db_broker_scan(db_broker_t *b, int64_t now_mono)
{
    rmq__db_pull_hold_check(b, now_mono);
    rmq__db_pop_revive(b, now_mono); /* un-acked POP messages past their invisible time */
    expired_t ex = {.now = now_mono, .expire_ms = b->node.db->channel_expire_ms};
    rmq__dbmap_each(&b->groups, scan_expired, &ex);
    for (int i = 0; i < ex.n; i++) {
        db_client_t *c = ex.list[i];
        if (rmq__conn_state(c->conn) < RMQ_CONN_CLOSING) {
            rmq_log_info(DB_LOG, "%s: channel %s (%s) expired", b->name, c->addr, c->client_id);
            rmq__conn_close(c->conn, RMQ_OK, "consumer channel expired");
        }
    }
}

static db_client_t *client_of(db_broker_t *b, rmq_conn_t *conn, const char *client_id,
                              const rmq_cmd_t *req)
{
    db_client_t *c = rmq__conn_get_ud(conn);
    if (!c) {
        c = rmq__xcalloc(1, sizeof(*c));
        c->conn = rmq__conn_keep(conn);
        c->b = b;
        snprintf(c->addr, sizeof(c->addr), "%s", rmq__conn_peer(conn));
        rmq__conn_set_ud(conn, c);
    }
    if (client_id && (!c->client_id || strcmp(c->client_id, client_id) != 0)) {
        free(c->client_id);
        c->client_id = rmq__xstrdup(client_id);
    }
    c->language = req->language;
    c->version = req->version;
    c->last_ms = rmq__mono_ms();
    return c;
}

static char *dup_or(const char *s, const char *def)
{
    return rmq__xstrdup(s ? s : def);
}

static void h_heartbeat(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = rmq__db_broker_of(node);
    rmq_fjdoc_t *doc = rmq__db_parse_body(conn, req, "HeartbeatData");
    if (!doc) return;
    rmq_fj_t *root = rmq__fj_root(doc);
    const char *client_id = rmq__fj_get_str(root, "clientID");
    db_client_t *c = client_of(b, conn, client_id ? client_id : "", req);
    rmq_fj_t *cds = rmq__fj_get(root, "consumerDataSet");
    for (rmq_fj_t *cd = cds && cds->type == RMQ_FJ_ARRAY ? cds->child : NULL; cd; cd = cd->next) {
        const char *gname = rmq__fj_get_str(cd, "groupName");
        if (!gname || !*gname) continue;
        rmq__db_subgroup_find(b, gname); /* ClientManageProcessor.heartBeat */
        db_group_t *g = rmq__dbmap_get(&b->groups, gname);
        int changed = 0;
        if (!g) {
            g = rmq__xcalloc(1, sizeof(*g));
            g->name = rmq__xstrdup(gname);
            rmq__dbmap_put(&b->groups, gname, g);
        }
        free(g->consume_type);
        free(g->message_model);
        free(g->consume_from_where);
        g->consume_type = dup_or(rmq__fj_get_str(cd, "consumeType"), "CONSUME_PASSIVELY");
        g->message_model = dup_or(rmq__fj_get_str(cd, "messageModel"), "CLUSTERING");
        g->consume_from_where =
            dup_or(rmq__fj_get_str(cd, "consumeFromWhere"), "CONSUME_FROM_LAST_OFFSET");
        if (!group_has(g, c)) {
            if (g->n_members == g->cap_members) {
                g->cap_members = g->cap_members ? g->cap_members * 2 : 4;
                g->members = realloc(g->members, sizeof(*g->members) * (size_t)g->cap_members);
                if (!g->members) abort();
            }
            g->members[g->n_members++] = c;
            changed = 1;
        }
        /* Subscriptions: replace when the new subVersion is greater; drop missing topics. */
        db_map_t seen = {0};
        rmq_fj_t *subs = rmq__fj_get(cd, "subscriptionDataSet");
        for (rmq_fj_t *sd = subs && subs->type == RMQ_FJ_ARRAY ? subs->child : NULL; sd;
             sd = sd->next) {
            const char *topic = rmq__fj_get_str(sd, "topic");
            if (!topic) continue;
            rmq__dbmap_put(&seen, topic, (void *)1);
            int64_t ver = 0;
            rmq__fj_get_i64(sd, "subVersion", &ver);
            rmq_sub_t *old = rmq__dbmap_get(&g->subs, topic);
            if (old && ver <= old->sub_version) continue;
            rmq_sub_t *ns = rmq__xcalloc(1, sizeof(*ns));
            ns->topic = rmq__xstrdup(topic);
            ns->sub_string = dup_or(rmq__fj_get_str(sd, "subString"), "*");
            ns->expression_type = dup_or(rmq__fj_get_str(sd, "expressionType"), "TAG");
            ns->sub_version = ver;
            rmq_fj_t *codes = rmq__fj_get(sd, "codeSet");
            if (codes && codes->type == RMQ_FJ_ARRAY && codes->len) {
                ns->codes = rmq__xcalloc(codes->len, sizeof(int32_t));
                for (rmq_fj_t *cv = codes->child; cv; cv = cv->next) {
                    int64_t v;
                    if (rmq__fj_i64(cv, &v) == 0) ns->codes[ns->n_codes++] = (int32_t)v;
                }
            }
            rmq_fj_t *tags = rmq__fj_get(sd, "tagsSet");
            if (tags && tags->type == RMQ_FJ_ARRAY && tags->len) {
                ns->tags = rmq__xcalloc(tags->len, sizeof(char *));
                for (rmq_fj_t *tv = tags->child; tv; tv = tv->next)
                    if (tv->type == RMQ_FJ_STRING) ns->tags[ns->n_tags++] = rmq__xstrdup(tv->s);
            }
            if (old) rmq__sub_destroy(old);
            rmq__dbmap_put(&g->subs, topic, ns);
            rmq__db_filter_register(b, gname, ns);
        }
        /* Remove topics that are no longer subscribed. */
        char *gone[256];
        int ngone = 0;
        for (size_t i = 0; i < g->subs.nb; i++)
            for (db_ent_t *e = g->subs.b[i]; e; e = e->next)
                if (!rmq__dbmap_get(&seen, e->key) && ngone < 256) gone[ngone++] = e->key;
        for (int i = 0; i < ngone; i++) {
            char *k = rmq__xstrdup(gone[i]);
            rmq_sub_t *old = rmq__dbmap_del(&g->subs, k);
            if (old) rmq__sub_destroy(old);
            free(k);
        }
        rmq__dbmap_free(&seen, NULL);
        char retry[300];
        snprintf(retry, sizeof(retry), "%%RETRY%%%s", gname);
        if (!rmq__db_topic_get(b, retry)) {
            rmq__db_topic_create(b, retry, 1, 1, 6);
            if (node->db->remote_ns) rmq__db_register_all(node->db);
        }
        if (changed) {
            rmq_dbg(RMQ_DBG_BROKER, DB_LOG, "%s: group %s gains %s (%d members)", b->name, gname,
                    c->client_id, g->n_members);
            notify_group(b, g);
        }
    }
    const char *pgroups[64];
    int npg = 0;
    rmq_fj_t *pds = rmq__fj_get(root, "producerDataSet");
    for (rmq_fj_t *pd = pds && pds->type == RMQ_FJ_ARRAY ? pds->child : NULL; pd && npg < 64;
         pd = pd->next) {
        const char *gname = rmq__fj_get_str(pd, "groupName");
        if (gname && *gname) pgroups[npg++] = gname;
    }
    rmq__db_producers_heartbeat(b, c, pgroups, npg);
    rmq__fj_free(doc);
    rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
}

static void h_unregister(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = rmq__db_broker_of(node);
    db_hdr_t h = {conn, req, 0};
    rmq__db_hdr_str(&h, "clientID");
    if (h.failed) return;
    const char *group = rmq__cmd_ext(req, "consumerGroup");
    db_client_t *c = rmq__conn_get_ud(conn);
    if (group && *group && c) {
        db_group_t *g = rmq__dbmap_get(&b->groups, group);
        if (g) group_remove(b, g, c, 1);
    }
    const char *pgroup = rmq__cmd_ext(req, "producerGroup");
    if (pgroup && *pgroup && c) rmq__db_producers_unregister(b, c, pgroup);
    rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
}

static void h_consumer_list(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = rmq__db_broker_of(node);
    db_hdr_t h = {conn, req, 0};
    const char *group = rmq__db_hdr_str(&h, "consumerGroup");
    if (h.failed) return;
    db_group_t *g = rmq__dbmap_get(&b->groups, group);
    if (!g || g->n_members == 0) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR, "no consumer for this group, %s",
                            group);
        return;
    }
    rmq_buf_t body;
    rmq__buf_init(&body);
    rmq__buf_append(&body, "{\"consumerIdList\":[", 19);
    for (int i = 0; i < g->n_members; i++) {
        if (i) rmq__buf_append(&body, ",", 1);
        const char *id = g->members[i]->client_id ? g->members[i]->client_id : "";
        rmq__fj_write_str(&body, id, strlen(id), 0);
    }
    rmq__buf_append(&body, "]}", 2);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &body);
    rmq__buf_free(&body);
}

static void write_sub_json(rmq_buf_t *o, const rmq_sub_t *s)
{
    rmq__buf_appendf(o, "{\"classFilterMode\":false,\"codeSet\":[");
    for (int i = 0; i < s->n_codes; i++)
        rmq__buf_appendf(o, "%s%d", i ? "," : "", s->codes[i]);
    rmq__buf_appendf(o, "],\"expressionType\":");
    rmq__fj_write_str(o, s->expression_type, strlen(s->expression_type), 0);
    rmq__buf_appendf(o, ",\"subString\":");
    rmq__fj_write_str(o, s->sub_string, strlen(s->sub_string), 0);
    rmq__buf_appendf(o, ",\"subVersion\":%lld,\"tagsSet\":[", (long long)s->sub_version);
    for (int i = 0; i < s->n_tags; i++) {
        if (i) rmq__buf_append(o, ",", 1);
        rmq__fj_write_str(o, s->tags[i], strlen(s->tags[i]), 0);
    }
    rmq__buf_appendf(o, "],\"topic\":");
    rmq__fj_write_str(o, s->topic, strlen(s->topic), 0);
    rmq__buf_append(o, "}", 1);
}

static void write_sub_entry(const char *key, void *val, void *ud)
{
    rmq_buf_t *o = ud;
    if (o->data[o->len - 1] != '{') rmq__buf_append(o, ",", 1);
    rmq__fj_write_str(o, key, strlen(key), 0);
    rmq__buf_append(o, ":", 1);
    write_sub_json(o, val);
}

static void h_connection_list(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = rmq__db_broker_of(node);
    db_hdr_t h = {conn, req, 0};
    const char *group = rmq__db_hdr_str(&h, "consumerGroup");
    if (h.failed) return;
    db_group_t *g = rmq__dbmap_get(&b->groups, group);
    if (!g) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_CONSUMER_NOT_ONLINE,
                            "the consumer group[%s] not online", group);
        return;
    }
    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__db_conn_set_json(&o, g->members, g->n_members);
    rmq__buf_appendf(&o,
                     ",\"consumeFromWhere\":\"%s\",\"consumeType\":\"%s\",\"messageModel\":"
                     "\"%s\",\"subscriptionTable\":{",
                     g->consume_from_where, g->consume_type, g->message_model);
    rmq__dbmap_each(&g->subs, write_sub_entry, &o);
    rmq__buf_append(&o, "}}", 2);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
}

/* ---- GET_CONSUME_STATS
 * --------------------------------------------------------------------------- */

static void h_consume_stats(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = rmq__db_broker_of(node);
    db_hdr_t h = {conn, req, 0};
    const char *group = rmq__db_hdr_str(&h, "consumerGroup");
    if (h.failed) return;
    const char *topic = rmq__cmd_ext(req, "topic");
    char *topics[256];
    int ntopics = 0;
    if (topic && *topic)
        topics[ntopics++] = rmq__xstrdup(topic);
    else
        ntopics = rmq__db_offset_topics(b, group, topics, 256);
    db_group_t *g = rmq__dbmap_get(&b->groups, group);
    rmq_buf_t o;
    rmq__buf_init(&o);
    /* consumeTps: BrokerStatsManager.tpsGroupGetNums over the topics listed. */
    double tps = 0.0;
    for (int k = 0; k < ntopics; k++) {
        db_topic_t *t = rmq__db_topic_get(b, topics[k]);
        if (!t) continue;
        if (g && g->subs.n > 0 && !rmq__dbmap_get(&g->subs, t->name)) continue;
        tps += rmq__db_stats_group_tps(b, t->name, group);
    }
    rmq__buf_appendf(&o, "{\"consumeTps\":");
    rmq__db_java_double(&o, tps);
    rmq__buf_appendf(&o, ",\"offsetTable\":{");
    int first = 1;
    for (int k = 0; k < ntopics; k++) {
        db_topic_t *t = rmq__db_topic_get(b, topics[k]);
        if (!t) continue;
        if (g && g->subs.n > 0 && !rmq__dbmap_get(&g->subs, t->name)) continue;
        for (int i = 0; i < t->write_q; i++) {
            db_queue_t *q = rmq__db_queue(t, i);
            int64_t co = rmq__db_offset_get(b, group, t->name, i);
            if (co < 0) co = 0;
            int64_t last = 0;
            if (co > 0) {
                db_msg_t *m = rmq__db_qget(q, co - 1);
                if (m) last = m->store_ts;
            }
            if (!first) rmq__buf_append(&o, ",", 1);
            rmq__db_mq_json(&o, b->name, i, t->name);
            rmq__buf_appendf(&o,
                             ":{\"brokerOffset\":%lld,\"consumerOffset\":%lld,"
                             "\"lastTimestamp\":%lld}",
                             (long long)rmq__db_qmax(q), (long long)co, (long long)last);
            first = 0;
        }
    }
    rmq__buf_append(&o, "}}", 2);
    for (int k = 0; k < ntopics; k++)
        free(topics[k]);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
}

/* ---- relayed admin calls --------------------------------------------------------------------- */

typedef struct relay {
    rmq_conn_t *admin; /* kept */
    int32_t opaque, serialize, code;
    char who[300];
} relay_t;

static void relay_done(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    relay_t *r = ud;
    rmq_cmd_t fake;
    memset(&fake, 0, sizeof(fake));
    fake.code = r->code;
    fake.opaque = r->opaque;
    fake.serialize = r->serialize;
    rmq_cmd_t out;
    if (err) {
        char msg[600];
        snprintf(msg, sizeof(msg), "invoke consumer %s Exception: %s", r->who, errmsg);
        rmq__cmd_init_response(&out, &fake, RMQ_RESP_SYSTEM_ERROR, msg);
    } else {
        rmq__cmd_init_response(&out, &fake, resp->code, resp->remark);
        for (int i = 0; i < resp->n_ext; i++)
            rmq__cmd_set_ext(&out, resp->ext[i].key, resp->ext[i].val);
        out.body = resp->body;
        out.body_len = resp->body_len;
    }
    if (rmq__conn_state(r->admin) == RMQ_CONN_OPEN) rmq__db_reply(r->admin, &out);
    out.body = NULL;
    out.body_len = 0;
    rmq__cmd_free(&out);
    rmq__conn_release(r->admin);
    free(r);
}

static db_client_t *find_client(db_broker_t *b, const char *group, const char *client_id)
{
    db_group_t *g = rmq__dbmap_get(&b->groups, group);
    if (!g) return NULL;
    for (int i = 0; i < g->n_members; i++)
        if (g->members[i]->client_id &&
            (!client_id || !strcmp(g->members[i]->client_id, client_id)))
            return g->members[i];
    return NULL;
}

static void relay(db_broker_t *b, rmq_conn_t *conn, rmq_cmd_t *req, const char *group,
                  const char *client_id, const char *body, size_t body_len, const char *extra_k,
                  const char *extra_v)
{
    db_client_t *c = find_client(b, group, client_id);
    if (!c) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR, "The Consumer <%s> <%s> not online",
                            group, client_id ? client_id : "");
        return;
    }
    rmq_cmd_t fw;
    rmq__cmd_init(&fw, req->code, RMQ_SERIALIZE_JSON);
    for (int i = 0; i < req->n_ext; i++)
        rmq__cmd_set_ext(&fw, req->ext[i].key, req->ext[i].val);
    if (extra_k) rmq__cmd_set_ext(&fw, extra_k, extra_v);
    fw.body = body;
    fw.body_len = body_len;
    relay_t *r = rmq__xcalloc(1, sizeof(*r));
    r->admin = rmq__conn_keep(conn);
    r->opaque = req->opaque;
    r->serialize = req->serialize;
    r->code = req->code;
    snprintf(r->who, sizeof(r->who), "<%s> <%s>", group, c->client_id);
    int rc = rmq__conn_request(c->conn, &fw, CALL_CLIENT_TIMEOUT_MS, 0, relay_done, r);
    fw.body = NULL;
    fw.body_len = 0;
    rmq__cmd_free(&fw);
    if (rc) {
        rmq__conn_release(r->admin);
        free(r);
        rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR,
                            "invoke consumer <%s> <%s> Exception: %s", group, c->client_id,
                            rmq_err_str(rc));
    }
}

static void h_running_info(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_hdr_t h = {conn, req, 0};
    const char *group = rmq__db_hdr_str(&h, "consumerGroup");
    const char *client_id = rmq__db_hdr_str(&h, "clientId");
    if (h.failed) return;
    relay(rmq__db_broker_of(node), conn, req, group, client_id, NULL, 0, NULL, NULL);
}

/* ---- offsets reset and consumer status through the broker (Broker2Client) -------------------- */

/* Clients whose heartbeat version is below V3_0_7_SNAPSHOT (28) cannot serve these calls. */
#define V3_0_7_SNAPSHOT 28

static const char *version_desc(int v)
{
    static const char *const names[V3_0_7_SNAPSHOT] = {"V3_0_0_SNAPSHOT", "V3_0_0_ALPHA1",
                                                       "V3_0_0_BETA1",    "V3_0_0_BETA2",
                                                       "V3_0_0_BETA3",    "V3_0_0_BETA4",
                                                       "V3_0_0_BETA5",    "V3_0_0_BETA6_SNAPSHOT",
                                                       "V3_0_0_BETA6",    "V3_0_0_BETA7_SNAPSHOT",
                                                       "V3_0_0_BETA7",    "V3_0_0_BETA8_SNAPSHOT",
                                                       "V3_0_0_BETA8",    "V3_0_0_BETA9_SNAPSHOT",
                                                       "V3_0_0_BETA9",    "V3_0_0_FINAL",
                                                       "V3_0_1_SNAPSHOT", "V3_0_1",
                                                       "V3_0_2_SNAPSHOT", "V3_0_2",
                                                       "V3_0_3_SNAPSHOT", "V3_0_3",
                                                       "V3_0_4_SNAPSHOT", "V3_0_4",
                                                       "V3_0_5_SNAPSHOT", "V3_0_5",
                                                       "V3_0_6_SNAPSHOT", "V3_0_6"};
    return v >= 0 && v < V3_0_7_SNAPSHOT ? names[v] : "HIGHER_VERSION";
}

/* ResetOffsetBody (MessageQueue objects as keys) or, for C, ResetOffsetBodyForC (a list), both
 * in the HashMap order of Broker2Client's offsetTable. */
static void reset_body(rmq_buf_t *o, const char *broker, const char *topic, const int64_t *offs,
                       int n, int for_c)
{
    int *order = rmq__xmalloc(sizeof(*order) * ((size_t)n + 1));
    rmq__db_mq_hash_order(broker, topic, n, order);
    rmq__buf_append(o, for_c ? "{\"offsetTable\":[" : "{\"offsetTable\":{", 16);
    for (int k = 0; k < n; k++) {
        int i = order[k];
        if (k) rmq__buf_append(o, ",", 1);
        if (for_c) {
            rmq__buf_append(o, "{\"brokerName\":", 14);
            rmq__fj_write_str(o, broker, strlen(broker), 0);
            rmq__buf_appendf(o, ",\"offset\":%lld,\"queueId\":%d,\"topic\":", (long long)offs[i],
                             i);
            rmq__fj_write_str(o, topic, strlen(topic), 0);
            rmq__buf_append(o, "}", 1);
        } else {
            rmq__db_mq_json(o, broker, i, topic);
            rmq__buf_appendf(o, ":%lld", (long long)offs[i]);
        }
    }
    rmq__buf_append(o, for_c ? "]}" : "}}", 2);
    free(order);
}

/* INVOKE_BROKER_TO_RESET_OFFSET (AdminBrokerProcessor.resetOffset -> Broker2Client.resetOffset):
 * for each write queue the offset at the timestamp (the max offset for -1), unless the group's
 * committed offset is smaller and isForce is false; RESET_CONSUMER_CLIENT_OFFSET (oneway) to every
 * client of the group; the answer carries the table. The stored offsets change when the clients
 * persist them, as with the real broker. */
static void h_invoke_reset(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = rmq__db_broker_of(node);
    db_hdr_t h = {conn, req, 0};
    const char *topic = rmq__db_hdr_str(&h, "topic");
    const char *group = rmq__db_hdr_str(&h, "group");
    int64_t ts = rmq__db_hdr_i64(&h, "timestamp");
    const char *force_s = rmq__db_hdr_str(&h, "isForce");
    if (h.failed) return;
    int force = !strcasecmp(force_s, "true");
    char msg[700];
    db_topic_t *t = rmq__db_topic_get(b, topic);
    if (!t) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR,
                            "[reset-offset] reset offset failed, no topic in this broker. topic=%s",
                            topic);
        return;
    }
    int n = t->write_q;
    int64_t *offs = rmq__xcalloc((size_t)n + 1, sizeof(*offs));
    for (int i = 0; i < n; i++) {
        int64_t co = rmq__db_offset_get(b, group, topic, i);
        if (co == -1) {
            rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR,
                                "THe consumer group <%s> not exist", group);
            free(offs);
            return;
        }
        db_queue_t *q = rmq__db_queue(t, i);
        int64_t to = ts == -1 ? rmq__db_qmax(q) : rmq__db_search_time(q, ts);
        if (to < 0) to = 0;
        offs[i] = force || to < co ? to : co;
    }
    db_group_t *g = rmq__dbmap_get(&b->groups, group);
    if (!g || g->n_members == 0) {
        snprintf(
            msg, sizeof(msg),
            "Consumer not online, so can not reset offset, Group: %s Topic: %s Timestamp: %lld",
            group, topic, (long long)ts);
        rmq__db_reply_code(conn, req, RMQ_RESP_CONSUMER_NOT_ONLINE, msg);
        free(offs);
        return;
    }
    rmq_buf_t body;
    rmq__buf_init(&body);
    reset_body(&body, b->name, topic, offs, n, req->language == RMQ_LANG_CPP);
    rmq_cmd_t fw;
    rmq__cmd_init(&fw, RMQ_REQ_RESET_CONSUMER_CLIENT_OFFSET, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext(&fw, "topic", topic);
    rmq__cmd_set_ext(&fw, "group", group);
    rmq__cmd_set_ext_i64(&fw, "timestamp", ts);
    rmq__cmd_set_ext(&fw, "isForce", "false");
    fw.body = body.data;
    fw.body_len = body.len;
    int code = RMQ_RESP_SUCCESS;
    for (int i = 0; i < g->n_members; i++) {
        db_client_t *c = g->members[i];
        if (c->version < V3_0_7_SNAPSHOT) {
            snprintf(msg, sizeof(msg), "the client does not support this feature. version=%s",
                     version_desc(c->version));
            code = RMQ_RESP_SYSTEM_ERROR;
            break;
        }
        int rc = rmq__conn_request(c->conn, &fw, 0, RMQ_REQF_ONEWAY, NULL, NULL);
        if (rc)
            rmq_log_warn(DB_LOG, "%s: [reset-offset] cannot reach %s: %s", b->name, c->client_id,
                         rmq_err_str(rc));
    }
    fw.body = NULL;
    fw.body_len = 0;
    rmq__cmd_free(&fw);
    if (code == RMQ_RESP_SUCCESS) {
        body.len = 0;
        reset_body(&body, b->name, topic, offs, n, 0);
        rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &body);
    } else {
        rmq__db_reply_code(conn, req, code, msg);
    }
    rmq__buf_free(&body);
    free(offs);
}

/* INVOKE_BROKER_TO_GET_CONSUMER_STATUS (Broker2Client.getConsumeStatus): GET_CONSUMER_STATUS_FROM_
 * CLIENT to every client of the group (or only to clientAddr, compared with the client id), each
 * SUCCESS answer's messageQueueTable under its client id in consumerTable. Failed or late
 * clients are left out. */
typedef struct status_op {
    rmq_conn_t *admin; /* kept */
    int32_t opaque, serialize, code;
    int pending, n;
    char **ids;      /* client ids */
    rmq_buf_t *tabs; /* messageQueueTable of each answer (len 0: none) */
} status_op_t;

typedef struct status_call {
    status_op_t *op;
    int idx;
} status_call_t;

static void status_finish(status_op_t *op)
{
    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__buf_append(&o, "{\"consumerTable\":{", 18);
    int first = 1;
    for (int i = 0; i < op->n; i++) {
        if (op->tabs[i].len == 0) continue;
        if (!first) rmq__buf_append(&o, ",", 1);
        first = 0;
        rmq__fj_write_str(&o, op->ids[i], strlen(op->ids[i]), 0);
        rmq__buf_append(&o, ":", 1);
        rmq__buf_append(&o, op->tabs[i].data, op->tabs[i].len);
    }
    rmq__buf_append(&o, "},\"messageQueueTable\":{}}", 25);
    rmq_cmd_t fake;
    memset(&fake, 0, sizeof(fake));
    fake.code = op->code;
    fake.opaque = op->opaque;
    fake.serialize = op->serialize;
    if (rmq__conn_state(op->admin) == RMQ_CONN_OPEN)
        rmq__db_reply_body(op->admin, &fake, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
    for (int i = 0; i < op->n; i++) {
        free(op->ids[i]);
        rmq__buf_free(&op->tabs[i]);
    }
    free(op->ids);
    free(op->tabs);
    rmq__conn_release(op->admin);
    free(op);
}

static void status_done(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    status_call_t *sc = ud;
    status_op_t *op = sc->op;
    (void)errmsg;
    if (!err && resp->code == RMQ_RESP_SUCCESS && resp->body && resp->body_len) {
        char perr[128];
        rmq_fjdoc_t *d = rmq__fj_parse(resp->body, resp->body_len, perr, sizeof(perr));
        rmq_fj_t *t = d ? rmq__fj_get(rmq__fj_root(d), "messageQueueTable") : NULL;
        if (t && t->type == RMQ_FJ_OBJECT) rmq__fj_write(&op->tabs[sc->idx], t, 0);
        if (d) rmq__fj_free(d);
    }
    free(sc);
    if (--op->pending == 0) status_finish(op);
}

static void h_invoke_status(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = rmq__db_broker_of(node);
    db_hdr_t h = {conn, req, 0};
    const char *topic = rmq__db_hdr_str(&h, "topic");
    const char *group = rmq__db_hdr_str(&h, "group");
    if (h.failed) return;
    const char *only = rmq__cmd_ext(req, "clientAddr");
    if (only && !*only) only = NULL;
    db_group_t *g = rmq__dbmap_get(&b->groups, group);
    if (!g) { /* getConsumerGroupInfo(group) is null there */
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, "java.lang.NullPointerException");
        return;
    }
    if (g->n_members == 0) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR,
                            "No Any Consumer online in the consumer group: [%s]", group);
        return;
    }
    for (int i = 0; i < g->n_members; i++)
        if (g->members[i]->version < V3_0_7_SNAPSHOT) {
            rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR,
                                "the client does not support this feature. version=%s",
                                version_desc(g->members[i]->version));
            return;
        }
    status_op_t *op = rmq__xcalloc(1, sizeof(*op));
    op->admin = rmq__conn_keep(conn);
    op->opaque = req->opaque;
    op->serialize = req->serialize;
    op->code = req->code;
    op->ids = rmq__xcalloc((size_t)g->n_members, sizeof(char *));
    op->tabs = rmq__xcalloc((size_t)g->n_members, sizeof(rmq_buf_t));
    op->pending = 1; /* this function's own reference */
    rmq_cmd_t fw;
    rmq__cmd_init(&fw, RMQ_REQ_GET_CONSUMER_STATUS_FROM_CLIENT, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext(&fw, "topic", topic);
    rmq__cmd_set_ext(&fw, "group", group);
    for (int i = 0; i < g->n_members; i++) {
        db_client_t *c = g->members[i];
        const char *id = c->client_id ? c->client_id : "";
        if (only && strcmp(only, id)) continue;
        int k = op->n++;
        op->ids[k] = rmq__xstrdup(id);
        rmq__buf_init(&op->tabs[k]);
        status_call_t *sc = rmq__xmalloc(sizeof(*sc));
        sc->op = op;
        sc->idx = k;
        op->pending++;
        if (rmq__conn_request(c->conn, &fw, 5000, 0, status_done, sc)) {
            op->pending--;
            free(sc);
        }
        if (only) break;
    }
    rmq__cmd_free(&fw);
    if (--op->pending == 0) status_finish(op);
}

static db_msg_t *msg_by_id(db_broker_t *b, const char *id)
{
    uint8_t ip[16];
    int ip_len;
    int32_t port;
    int64_t off;
    if (!id || rmq__offset_msg_id_decode(id, strlen(id), ip, &ip_len, &port, &off)) return NULL;
    return rmq__db_find_phys(b, off);
}

static void h_consume_directly(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = rmq__db_broker_of(node);
    db_hdr_t h = {conn, req, 0};
    const char *group = rmq__db_hdr_str(&h, "consumerGroup");
    if (h.failed) return;
    const char *client_id = rmq__cmd_ext(req, "clientId");
    const char *id = rmq__cmd_ext(req, "msgId");
    db_msg_t *m = msg_by_id(b, id);
    if (!m) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR, "message id %s not found",
                            id ? id : "(none)");
        return;
    }
    relay(b, conn, req, group, client_id, m->data, m->size, "brokerName", b->name);
}

void rmq__db_client_install(db_broker_t *b)
{
    db_node_t *n = &b->node;
    rmq__db_set_handler(n, RMQ_REQ_HEART_BEAT, h_heartbeat);
    rmq__db_set_handler(n, RMQ_REQ_UNREGISTER_CLIENT, h_unregister);
    rmq__db_set_handler(n, RMQ_REQ_GET_CONSUMER_LIST_BY_GROUP, h_consumer_list);
    rmq__db_set_handler(n, RMQ_REQ_GET_CONSUMER_CONNECTION_LIST, h_connection_list);
    rmq__db_set_handler(n, RMQ_REQ_GET_CONSUME_STATS, h_consume_stats);
    rmq__db_set_handler(n, RMQ_REQ_GET_CONSUMER_RUNNING_INFO, h_running_info);
    rmq__db_set_handler(n, RMQ_REQ_INVOKE_BROKER_TO_RESET_OFFSET, h_invoke_reset);
    rmq__db_set_handler(n, RMQ_REQ_INVOKE_BROKER_TO_GET_CONSUMER_STATUS, h_invoke_status);
    rmq__db_set_handler(n, RMQ_REQ_CONSUME_MESSAGE_DIRECTLY, h_consume_directly);
}
