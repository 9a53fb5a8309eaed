/*
 * devbroker_offset.c -- consumer offsets and queue locks of the development broker:
 * QUERY/UPDATE_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP,
 * LOCK/UNLOCK_BATCH_MQ, the offset table the other parts read and write, and the HashMap order
 * of a topic's queues that offset tables are answered in.
 *
 * Ownership: the broker's offset and lock maps own their values.
 * Threads: the broker thread only.
 */
#include "devbroker_int.h"
#include "protocol/fjson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- offsets --------------------------------------------------------------------------------- */

static void okey(char *key, size_t size, const char *group, const char *topic, int qid)
{
    snprintf(key, size, "%s\001%s\001%d", group, topic, qid);
}

int64_t rmq__db_offset_get(db_broker_t *b, const char *group, const char *topic, int qid)
{
    char key[600];
    okey(key, sizeof(key), group, topic, qid);
    int64_t *v = rmq__dbmap_get(&b->offsets, key);
    return v ? *v : -1;
}

void rmq__db_offset_set(db_broker_t *b, const char *group, const char *topic, int qid, int64_t v)
{
    char key[600];
    okey(key, sizeof(key), group, topic, qid);
    int64_t *p = rmq__dbmap_get(&b->offsets, key);
    if (!p) {
        p = rmq__xmalloc(sizeof(*p));
        rmq__dbmap_put(&b->offsets, key, p);
    }
    *p = v;
    b->offsets_dirty = 1;
}

/* A key of the offset table ("group\001topic\001qid") of group: the topic after it, else NULL. */
static const char *topic_of(const char *key, const char *group, size_t glen)
{
    return strncmp(key, group, glen) == 0 && key[glen] == '\001' ? key + glen + 1 : NULL;
}

typedef struct {
    const char *group;
    size_t glen;
    char **out;
    int max, n;
} of_group_t;

static void group_topic(const char *key, void *val, void *ud)
{
    of_group_t *g = ud;
    const char *t = topic_of(key, g->group, g->glen);
    const char *end = t ? strchr(t, '\001') : NULL;
    if (!end) return;
    for (int i = 0; i < g->n; i++)
        if (strlen(g->out[i]) == (size_t)(end - t) && !memcmp(g->out[i], t, (size_t)(end - t)))
            return;
    if (g->n < g->max) g->out[g->n++] = rmq__xstrndup(t, (size_t)(end - t));
}

int rmq__db_offset_topics(db_broker_t *b, const char *group, char **topics, int max)
{
    of_group_t g = {.group = group, .glen = strlen(group), .out = topics, .max = max};
    rmq__dbmap_each(&b->offsets, group_topic, &g);
    return g.n;
}

static void group_key(const char *key, void *val, void *ud)
{
    of_group_t *g = ud;
    if (g->n < g->max && topic_of(key, g->group, g->glen)) g->out[g->n++] = rmq__xstrdup(key);
}

void rmq__db_offsets_drop_group(db_broker_t *b, const char *group)
{
    enum { MAX_KEYS = 1024 };
    char **keys = rmq__xmalloc(sizeof(*keys) * MAX_KEYS);
    of_group_t g = {.group = group, .glen = strlen(group), .out = keys, .max = MAX_KEYS};
    rmq__dbmap_each(&b->offsets, group_key, &g);
    for (int i = 0; i < g.n; i++) {
        free(rmq__dbmap_del(&b->offsets, keys[i]));
        free(keys[i]);
    }
    if (g.n) b->offsets_dirty = 1;
    free(keys);
}

void rmq__db_mq_json(rmq_buf_t *o, const char *broker, int qid, const char *topic)
{
    rmq__buf_append(o, "{\"brokerName\":", 14);
    rmq__fj_write_str(o, broker, strlen(broker), 0);
    rmq__buf_appendf(o, ",\"queueId\":%d,\"topic\":", qid);
    rmq__fj_write_str(o, topic, strlen(topic), 0);
    rmq__buf_append(o, "}", 1);
}

/* The iteration order of a java.util.HashMap<MessageQueue, V> filled with queues 0..n-1 of one
 * topic in queue order: MessageQueue.hashCode, spread h ^ (h >>> 16), default capacity 16
 * doubled while n > 3/4 of it, bins in index order, each bin in insertion order (bins of 8 that
 * would be treeified do not occur for these hashes). */
void rmq__db_mq_hash_order(const char *broker, const char *topic, int n, int *order)
{
    uint32_t cap = 16;
    while ((uint64_t)n * 4 > (uint64_t)cap * 3)
        cap *= 2;
    uint32_t bh = (uint32_t)rmq_java_hash(broker, strlen(broker));
    uint32_t th = (uint32_t)rmq_java_hash(topic, strlen(topic));
    uint32_t *bin = rmq__xmalloc(sizeof(*bin) * ((size_t)n + 1));
    for (int i = 0; i < n; i++) {
        uint32_t h = 31u * (31u * (31u + bh) + (uint32_t)i) + th;
        bin[i] = (h ^ (h >> 16)) & (cap - 1);
        order[i] = i;
    }
    for (int i = 1; i < n; i++) { /* stable: equal bins keep insertion order */
        int v = order[i], j = i;
        for (; j > 0 && bin[order[j - 1]] > bin[v]; j--)
            order[j] = order[j - 1];
        order[j] = v;
    }
    free(bin);
}

/* ---- offsets --------------------------------------------------------------------------------- */

/* The queue a Query/UpdateConsumerOffsetRequestHeader names: consumerGroup, topic, queueId. */
typedef struct {
    const char *group, *topic;
    int64_t qid;
} okey_t;

static void hdr_okey(db_hdr_t *h, okey_t *k)
{
    k->group = rmq__db_hdr_str(h, "consumerGroup");
    k->topic = rmq__db_hdr_str(h, "topic");
    k->qid = rmq__db_hdr_i64(h, "queueId");
}

static void h_query_offset(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = rmq__db_broker_of(node);
    db_hdr_t h = {conn, req, 0};
    okey_t k;
    hdr_okey(&h, &k);
    if (h.failed) return;
    int64_t off = rmq__db_offset_get(b, k.group, k.topic, (int)k.qid);
    if (off < 0) {
        db_topic_t *t = rmq__db_topic_get(b, k.topic);
        db_queue_t *q = t ? rmq__db_queue(t, (int)k.qid) : NULL;
        int64_t min = q ? q->min_off : 0;
        /* minOffset <= 0 and offset 0 not "in disk" (everything here is in memory). */
        if (min <= 0) off = 0;
    }
    rmq_cmd_t resp;
    if (off >= 0) {
        rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, NULL);
        rmq__cmd_set_ext_i64(&resp, "offset", off);
    } else {
        rmq__cmd_init_response(&resp, req, RMQ_RESP_QUERY_NOT_FOUND,
                               "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first");
    }
    if (!(req->flag & RMQ_FLAG_ONEWAY)) rmq__db_reply(conn, &resp);
    rmq__cmd_free(&resp);
}

static void h_update_offset(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_hdr_t h = {conn, req, 0};
    okey_t k;
    hdr_okey(&h, &k);
    int64_t off = rmq__db_hdr_i64(&h, "commitOffset");
    if (h.failed) return;
    rmq__db_offset_set(rmq__db_broker_of(node), k.group, k.topic, (int)k.qid, off);
    rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
}

static void reply_offset(rmq_conn_t *conn, rmq_cmd_t *req, int64_t off)
{
    if (req->flag & RMQ_FLAG_ONEWAY) return;
    rmq_cmd_t resp;
    rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, NULL);
    rmq__cmd_set_ext_i64(&resp, "offset", off);
    rmq__db_reply(conn, &resp);
    rmq__cmd_free(&resp);
}

static db_queue_t *hdr_queue(db_broker_t *b, db_hdr_t *h)
{
    const char *topic = rmq__db_hdr_str(h, "topic");
    int64_t qid = rmq__db_hdr_i64(h, "queueId");
    if (h->failed) return NULL;
    db_topic_t *t = rmq__db_topic_get(b, topic);
    return t ? rmq__db_queue(t, (int)qid) : NULL;
}

static void h_max_offset(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_hdr_t h = {conn, req, 0};
    db_broker_t *b = rmq__db_broker_of(node);
    db_queue_t *q = hdr_queue(b, &h);
    if (h.failed) return;
    if (b->told_max_query != INT64_MIN)
        reply_offset(conn, req, b->told_max_query);
    else
        reply_offset(conn, req, q ? rmq__db_qmax(q) : 0);
}

static void h_min_offset(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_hdr_t h = {conn, req, 0};
    db_queue_t *q = hdr_queue(rmq__db_broker_of(node), &h);
    if (!h.failed) reply_offset(conn, req, q ? q->min_off : 0);
}

static void h_search_offset(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_hdr_t h = {conn, req, 0};
    db_queue_t *q = hdr_queue(rmq__db_broker_of(node), &h);
    int64_t ts = rmq__db_hdr_i64(&h, "timestamp");
    if (!h.failed) reply_offset(conn, req, q ? rmq__db_search_time(q, ts) : 0);
}

/* ---- locks ----------------------------------------------------------------------------------- */

static void lock_free_v(void *v)
{
    db_lock_t *l = v;
    free(l->client_id);
    free(l);
}

void rmq__db_offsets_free(db_broker_t *b)
{
    rmq__dbmap_free(&b->offsets, free);
    rmq__dbmap_free(&b->locks, lock_free_v);
}

static void h_lock(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req, int unlock)
{
    db_broker_t *b = rmq__db_broker_of(node);
    char key[600];
    rmq_fjdoc_t *doc = rmq__db_parse_body(conn, req, "lock body");
    if (!doc) return;
    rmq_fj_t *root = rmq__fj_root(doc);
    const char *group = rmq__fj_get_str(root, "consumerGroup");
    const char *client = rmq__fj_get_str(root, "clientId");
    rmq_fj_t *set = rmq__fj_get(root, "mqSet");
    if (!group || !client) {
        rmq__fj_free(doc);
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, "consumerGroup or clientId missing");
        return;
    }
    int64_t now = rmq__mono_ms();
    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__buf_appendf(&o, "{\"lockOKMQSet\":[");
    int first = 1;
    for (rmq_fj_t *mq = set && set->type == RMQ_FJ_ARRAY ? set->child : NULL; mq; mq = mq->next) {
        const char *topic = rmq__fj_get_str(mq, "topic");
        const char *bn = rmq__fj_get_str(mq, "brokerName");
        int32_t qid = 0;
        if (!topic || rmq__fj_get_i32(mq, "queueId", &qid)) continue;
        okey(key, sizeof(key), group, topic, qid);
        db_lock_t *l = rmq__dbmap_get(&b->locks, key);
        if (unlock) {
            if (l && strcmp(l->client_id, client) == 0) lock_free_v(rmq__dbmap_del(&b->locks, key));
            continue;
        }
        int ok = 0;
        if (!l) {
            l = rmq__xcalloc(1, sizeof(*l));
            l->client_id = rmq__xstrdup(client);
            rmq__dbmap_put(&b->locks, key, l);
            ok = 1;
        } else if (strcmp(l->client_id, client) == 0) {
            ok = 1;
        } else if (now - l->last_ms > node->db->lock_expire_ms) {
            free(l->client_id);
            l->client_id = rmq__xstrdup(client);
            ok = 1;
        }
        if (!ok) continue;
        l->last_ms = now;
        if (!first) rmq__buf_append(&o, ",", 1);
        rmq__db_mq_json(&o, bn ? bn : b->name, qid, topic);
        first = 0;
    }
    rmq__buf_append(&o, "]}", 2);
    rmq__fj_free(doc);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, unlock ? NULL : &o);
    rmq__buf_free(&o);
}

static void h_lock_batch(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    h_lock(node, conn, req, 0);
}
static void h_unlock_batch(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    h_lock(node, conn, req, 1);
}

void rmq__db_offset_install(db_broker_t *b)
{
    db_node_t *n = &b->node;
    rmq__db_set_handler(n, RMQ_REQ_QUERY_CONSUMER_OFFSET, h_query_offset);
    rmq__db_set_handler(n, RMQ_REQ_UPDATE_CONSUMER_OFFSET, h_update_offset);
    rmq__db_set_handler(n, RMQ_REQ_SEARCH_OFFSET_BY_TIMESTAMP, h_search_offset);
    rmq__db_set_handler(n, RMQ_REQ_GET_MAX_OFFSET, h_max_offset);
    rmq__db_set_handler(n, RMQ_REQ_GET_MIN_OFFSET, h_min_offset);
    rmq__db_set_handler(n, RMQ_REQ_LOCK_BATCH_MQ, h_lock_batch);
    rmq__db_set_handler(n, RMQ_REQ_UNLOCK_BATCH_MQ, h_unlock_batch);
}
