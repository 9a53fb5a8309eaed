/*
 * devbroker_ns.c -- the name-server role of the development broker: GET_ROUTEINFO_BY_TOPIC
 * (both JSON forms), GET_BROKER_CLUSTER_INFO, REGISTER_BROKER / UNREGISTER_BROKER from brokers
 * of other processes (expired after 120 s without registration or when their connection
 * closes). Routes of in-process brokers are read live from their topic tables; a broker that
 * is down is left out, as the real name server drops a broker whose channel closed (with
 * --slaves, a broker name is listed with the addresses of its master and slaves that are up).
 *
 * PROTOCOL.md 2.3.1, 3.2 (RouteInfoManager, DefaultRequestProcessor).
 * Ownership: the remote broker records (db_remote_t) belong to the rmq_devbroker_t.
 * Threads: the broker thread only.
 */
#include "devbroker_int.h"
#include "protocol/fjson.h"
#include "protocol/route.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define BROKER_CHANNEL_EXPIRED_MS 120000

static void free_topic_cfg(void *v)
{
    db_topic_t *t = v;
    free(t->name);
    free(t);
}

static void remote_free(db_remote_t *r)
{
    free(r->name);
    free(r->cluster);
    free(r->addr);
    if (r->conn) rmq__conn_release(r->conn);
    rmq__dbmap_free(&r->topics, free_topic_cfg);
    free(r);
}

void rmq__db_ns_free(rmq_devbroker_t *db)
{
    while (db->remotes) {
        db_remote_t *r = db->remotes;
        db->remotes = r->next;
        remote_free(r);
    }
}

static void remove_remote_if(rmq_devbroker_t *db, int (*pred)(db_remote_t *, const void *),
                             const void *arg)
{
    for (db_remote_t **pp = &db->remotes; *pp;) {
        db_remote_t *r = *pp;
        if (pred(r, arg)) {
            rmq_log_info(DB_LOG, "name server: broker %s (%s) removed", r->name, r->addr);
            *pp = r->next;
            remote_free(r);
        } else
            pp = &r->next;
    }
}

static int by_conn(db_remote_t *r, const void *conn)
{
    return r->conn == conn;
}
static int by_addr(db_remote_t *r, const void *addr)
{
    return strcmp(r->addr, addr) == 0;
}
static int by_age(db_remote_t *r, const void *now)
{
    return *(const int64_t *)now - r->last_ms > BROKER_CHANNEL_EXPIRED_MS;
}

void rmq__db_ns_conn_closed(rmq_devbroker_t *db, rmq_conn_t *conn)
{
    remove_remote_if(db, by_conn, conn);
}

void rmq__db_ns_scan(rmq_devbroker_t *db, int64_t now_mono)
{
    remove_remote_if(db, by_age, &now_mono);
}

/* ---- GET_ROUTEINFO_BY_TOPIC ------------------------------------------------------------------ */

typedef struct {
    rmq_broker_addr_t a[RMQ_DEVBROKER_MAX_SLAVES + 1]; /* master and slaves, id order */
} addr_row_t;

/* The addresses of master b and its slaves (devbroker_slave.c) that are up, in broker id order;
 * returns the count (at most RMQ_DEVBROKER_MAX_SLAVES + 1). */
static int group_addrs(rmq_devbroker_t *db, db_broker_t *b, int64_t *ids, const char **addrs)
{
    int n = 0;
    if (!b->down) {
        ids[n] = 0;
        addrs[n++] = b->node.addr;
    }
    for (int k = 1; k <= RMQ_DEVBROKER_MAX_SLAVES; k++)
        for (int i = 0; i < db->n_brokers; i++) {
            db_broker_t *s = db->brokers[i];
            if (s->master == b && s->id == k && !s->down) {
                ids[n] = k;
                addrs[n++] = s->node.addr;
            }
        }
    return n;
}

typedef struct {
    rmq_queue_data_t qds[RMQ_DEVBROKER_MAX_BROKERS + 64];
    rmq_broker_data_t bds[RMQ_DEVBROKER_MAX_BROKERS + 64];
    addr_row_t addrs[RMQ_DEVBROKER_MAX_BROKERS + 64];
    int n;
} route_acc_t;

/* One broker name: its queue data and n addresses (ids[k], addrs[k]). */
static void acc_add(route_acc_t *a, const char *cluster, const char *name, int n,
                    const int64_t *ids, const char *const *addrs, const db_topic_t *t)
{
    if (a->n >= (int)RMQ_ARRAY_SIZE(a->qds)) return;
    int i = a->n++;
    a->qds[i].broker_name = (char *)name;
    a->qds[i].read_queue_nums = t->read_q;
    a->qds[i].write_queue_nums = t->write_q;
    a->qds[i].perm = t->perm;
    a->qds[i].topic_sys_flag = t->sys_flag;
    for (int k = 0; k < n; k++) {
        a->addrs[i].a[k].id = ids[k];
        a->addrs[i].a[k].addr = (char *)addrs[k];
    }
    a->bds[i].cluster = (char *)cluster;
    a->bds[i].broker_name = (char *)name;
    a->bds[i].addrs = a->addrs[i].a;
    a->bds[i].n_addrs = n;
}

static void h_route(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    rmq_devbroker_t *db = node->db;
    const char *topic = rmq__db_need_ext(conn, req, "topic");
    if (!topic) return;
    route_acc_t *a = rmq__xcalloc(1, sizeof(*a));
    for (int i = 0; i < db->n_brokers; i++) {
        db_broker_t *b = db->brokers[i];
        if (b->master) continue; /* listed with its master */
        int64_t ids[RMQ_DEVBROKER_MAX_SLAVES + 1];
        const char *addrs[RMQ_DEVBROKER_MAX_SLAVES + 1];
        int n = group_addrs(db, b, ids, addrs);
        db_topic_t *t = rmq__db_topic_get(b, topic);
        if (t && n) acc_add(a, db->cluster, b->name, n, ids, addrs, t);
    }
    for (db_remote_t *r = db->remotes; r; r = r->next) {
        db_topic_t *t = rmq__dbmap_get(&r->topics, topic);
        int64_t id0 = 0;
        const char *addr = r->addr;
        if (t) acc_add(a, r->cluster, r->name, 1, &id0, &addr, t);
    }
    if (a->n == 0) {
        char msg[400];
        snprintf(msg, sizeof(msg),
                 "No topic route info in name server for the topic: %s\nSee "
                 "http://rocketmq.apache.org/docs/faq/ for further details.",
                 topic);
        free(a);
        rmq__db_reply_code(conn, req, RMQ_RESP_TOPIC_NOT_EXIST, msg);
        return;
    }
    /* Sort by broker name (insertion sort: a handful of brokers). */
    for (int i = 1; i < a->n; i++) {
        for (int j = i; j > 0 && strcmp(a->qds[j - 1].broker_name, a->qds[j].broker_name) > 0;
             j--) {
            rmq_queue_data_t tq = a->qds[j];
            a->qds[j] = a->qds[j - 1];
            a->qds[j - 1] = tq;
            addr_row_t ta = a->addrs[j];
            a->addrs[j] = a->addrs[j - 1];
            a->addrs[j - 1] = ta;
            rmq_broker_data_t tb = a->bds[j];
            a->bds[j] = a->bds[j - 1];
            a->bds[j - 1] = tb;
        }
    }
    for (int i = 0; i < a->n; i++)
        a->bds[i].addrs = a->addrs[i].a;
    rmq_route_t r = {
        .qds = a->qds, .n_qds = a->n, .bds = a->bds, .n_bds = a->n, .rocketmq5 = db->rocketmq5};
    int standard =
        req->version >= RMQ_VERSION_V4_9_4 || rmq__cmd_ext_bool(req, "acceptStandardJsonOnly");
    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__route_write(&r, standard, &o);
    free(a);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
}

/* ---- GET_BROKER_CLUSTER_INFO (fastjson default: Long map keys bare) ------------------------ */

static void cluster_entry(rmq_buf_t *o, int *first, const char *cluster, const char *name,
                          int n, const int64_t *ids, const char *const *addrs)
{
    rmq__buf_appendf(o, "%s", *first ? "" : ",");
    rmq__fj_write_str(o, name, strlen(name), 0);
    rmq__buf_appendf(o, ":{\"brokerAddrs\":{");
    for (int k = 0; k < n; k++) {
        rmq__buf_appendf(o, "%s%lld:", k ? "," : "", (long long)ids[k]);
        rmq__fj_write_str(o, addrs[k], strlen(addrs[k]), 0);
    }
    rmq__buf_appendf(o, "},\"brokerName\":");
    rmq__fj_write_str(o, name, strlen(name), 0);
    rmq__buf_appendf(o, ",\"cluster\":");
    rmq__fj_write_str(o, cluster, strlen(cluster), 0);
    rmq__buf_append(o, "}", 1);
    *first = 0;
}

static void h_cluster_info(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    rmq_devbroker_t *db = node->db;
    rmq_buf_t o;
    rmq__buf_init(&o);
    int first = 1;
    rmq__buf_appendf(&o, "{\"brokerAddrTable\":{");
    for (int i = 0; i < db->n_brokers; i++) {
        int64_t ids[RMQ_DEVBROKER_MAX_SLAVES + 1];
        const char *addrs[RMQ_DEVBROKER_MAX_SLAVES + 1];
        int n = db->brokers[i]->master ? 0 : group_addrs(db, db->brokers[i], ids, addrs);
        if (n) cluster_entry(&o, &first, db->cluster, db->brokers[i]->name, n, ids, addrs);
    }
    for (db_remote_t *r = db->remotes; r; r = r->next) {
        int64_t id0 = 0;
        const char *addr = r->addr;
        cluster_entry(&o, &first, r->cluster, r->name, 1, &id0, &addr);
    }
    rmq__buf_appendf(&o, "},\"clusterAddrTable\":{");
    /* Clusters: ours first, then those of remote brokers. */
    const char *clusters[64];
    int nc = 0;
    clusters[nc++] = db->cluster;
    for (db_remote_t *r = db->remotes; r && nc < 64; r = r->next) {
        int seen = 0;
        for (int k = 0; k < nc; k++)
            seen |= !strcmp(clusters[k], r->cluster);
        if (!seen) clusters[nc++] = r->cluster;
    }
    int cfirst = 1;
    for (int k = 0; k < nc; k++) {
        rmq_buf_t names;
        rmq__buf_init(&names);
        int n = 0;
        if (k == 0) {
            for (int i = 0; i < db->n_brokers; i++) {
                int64_t ids[RMQ_DEVBROKER_MAX_SLAVES + 1];
                const char *addrs[RMQ_DEVBROKER_MAX_SLAVES + 1];
                if (db->brokers[i]->master ||
                    !group_addrs(db, db->brokers[i], ids, addrs))
                    continue;
                if (n++) rmq__buf_append(&names, ",", 1);
                rmq__fj_write_str(&names, db->brokers[i]->name, strlen(db->brokers[i]->name), 0);
            }
        }
        for (db_remote_t *r = db->remotes; r; r = r->next) {
            if (strcmp(r->cluster, clusters[k]) != 0) continue;
            if (n++) rmq__buf_append(&names, ",", 1);
            rmq__fj_write_str(&names, r->name, strlen(r->name), 0);
        }
        if (n) {
            rmq__buf_appendf(&o, "%s", cfirst ? "" : ",");
            rmq__fj_write_str(&o, clusters[k], strlen(clusters[k]), 0);
            rmq__buf_append(&o, ":[", 2);
            rmq__buf_append(&o, names.data, names.len);
            rmq__buf_append(&o, "]", 1);
            cfirst = 0;
        }
        rmq__buf_free(&names);
    }
    rmq__buf_append(&o, "}}", 2);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
}

/* ---- REGISTER_BROKER / UNREGISTER_BROKER ----------------------------------------------------- */

static void h_register(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    rmq_devbroker_t *db = node->db;
    const char *name = rmq__cmd_ext(req, "brokerName");
    const char *addr = rmq__cmd_ext(req, "brokerAddr");
    const char *cluster = rmq__cmd_ext(req, "clusterName");
    int64_t id = 0, crc = 0;
    rmq__cmd_ext_i64(req, "brokerId", &id);
    if (!name || !addr || !cluster) {
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR,
                           "org.apache.rocketmq.remoting.exception.RemotingCommandException: the "
                           "custom field <brokerName/brokerAddr/clusterName> is null");
        return;
    }
    if (rmq__cmd_ext_i64(req, "bodyCrc32", &crc) == 0 && crc != 0 && req->body) {
        int64_t got =
            (int64_t)(crc32(0, (const Bytef *)req->body, (uInt)req->body_len) & 0x7FFFFFFF);
        if (got != crc) {
            rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, "crc32 not match");
            return;
        }
    }
    if (id != 0) { /* slaves are not modelled: accept and ignore */
        rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
        return;
    }
    db_remote_t *r = NULL;
    for (db_remote_t *x = db->remotes; x; x = x->next)
        if (!strcmp(x->addr, addr)) r = x;
    if (!r) {
        r = rmq__xcalloc(1, sizeof(*r));
        r->addr = rmq__xstrdup(addr);
        r->next = db->remotes;
        db->remotes = r;
        rmq_log_info(DB_LOG, "name server: broker %s (%s) registered", name, addr);
    }
    free(r->name);
    free(r->cluster);
    r->name = rmq__xstrdup(name);
    r->cluster = rmq__xstrdup(cluster);
    r->last_ms = rmq__mono_ms();
    if (r->conn != conn) {
        if (r->conn) rmq__conn_release(r->conn);
        r->conn = rmq__conn_keep(conn);
    }
    if (req->body && req->body_len) {
        char err[200];
        rmq_fjdoc_t *doc = rmq__fj_parse(req->body, req->body_len, err, sizeof(err));
        rmq_fj_t *w = doc ? rmq__fj_get(rmq__fj_root(doc), "topicConfigSerializeWrapper") : NULL;
        rmq_fj_t *table = w ? rmq__fj_get(w, "topicConfigTable") : NULL;
        if (table && table->type == RMQ_FJ_OBJECT) {
            rmq__dbmap_free(&r->topics, free_topic_cfg);
            for (rmq_fj_t *v = table->child; v; v = v->next) {
                const char *tn = rmq__fj_get_str(v, "topicName");
                if (!tn && v->key && v->key->type == RMQ_FJ_STRING) tn = v->key->s;
                if (!tn) continue;
                db_topic_t *t = rmq__xcalloc(1, sizeof(*t));
                t->name = rmq__xstrdup(tn);
                int32_t x = 0;
                t->read_q = rmq__fj_get_i32(v, "readQueueNums", &x) == 0 ? x : 0;
                t->write_q = rmq__fj_get_i32(v, "writeQueueNums", &x) == 0 ? x : 0;
                t->perm = rmq__fj_get_i32(v, "perm", &x) == 0 ? x : 6;
                t->sys_flag = rmq__fj_get_i32(v, "topicSysFlag", &x) == 0 ? x : 0;
                db_topic_t *old = rmq__dbmap_put(&r->topics, tn, t);
                if (old) free_topic_cfg(old);
            }
        } else if (!doc) {
            rmq_log_warn(DB_LOG, "name server: REGISTER_BROKER from %s: bad body: %s", addr, err);
        }
        if (doc) rmq__fj_free(doc);
    }
    if (req->flag & RMQ_FLAG_ONEWAY) return;
    rmq_cmd_t resp;
    rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, NULL);
    static const char table[] = "{\"table\":{}}";
    resp.body = table;
    resp.body_len = sizeof(table) - 1;
    rmq__db_reply(conn, &resp);
    resp.body = NULL;
    resp.body_len = 0;
    rmq__cmd_free(&resp);
}

static void h_unregister_broker(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    const char *addr = rmq__cmd_ext(req, "brokerAddr");
    if (addr) remove_remote_if(node->db, by_addr, addr);
    rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
}

void rmq__db_ns_install(rmq_devbroker_t *db)
{
    rmq__db_set_handler(&db->ns, RMQ_REQ_GET_ROUTEINFO_BY_TOPIC, h_route);
    rmq__db_set_handler(&db->ns, RMQ_REQ_GET_BROKER_CLUSTER_INFO, h_cluster_info);
    rmq__db_set_handler(&db->ns, RMQ_REQ_REGISTER_BROKER, h_register);
    rmq__db_set_handler(&db->ns, RMQ_REQ_UNREGISTER_BROKER, h_unregister_broker);
    rmq__db_admin_ns_install(db);
}
