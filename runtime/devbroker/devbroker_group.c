/*
 * devbroker_group.c -- subscription group configs of the development broker, as
 * SubscriptionGroupManager keeps them: the system groups at start, a group created with the
 * defaults the first time a heartbeat, pull or send-back names it (autoCreateSubscriptionGroup),
 * UPDATE_AND_CREATE_SUBSCRIPTIONGROUP / DELETE_SUBSCRIPTIONGROUP (mqadmin updateSubGroup /
 * deleteSubGroup) and GET_ALL_SUBSCRIPTIONGROUP_CONFIG (the Dashboard's group list).
 *
 * What a config changes (devbroker_broker.c and devbroker_pull.c read it): retryMaxTimes
 * decides when a sent-back message (or one sent to %RETRY%<group>) goes to %DLQ%<group> unless
 * the client sends its own maxReconsumeTimes (SendMessageProcessor); retryQueueNums 0 turns
 * send-back into a no-op;
 * consumeEnable false refuses pulls (NO_PERMISSION "subscription group no permission, G");
 * consumeBroadcastEnable false refuses pulls of a BROADCASTING group (PullMessageProcessor).
 * consumeFromMinEnable, brokerId, whichBrokerWhenConsumeSlowly and
 * notifyConsumerIdsChangedEnable are kept and reported only.
 *
 * With --store the table is saved as DIR/<broker>/subscriptionGroups (one group a line) when it
 * changed, with the topic and offset tables, and read back at start.
 *
 * Ownership: b->subgroups (created on first use) owns the configs.
 * Threads: the broker thread (and rmq__devbroker_start before the thread runs).
 */
#include "devbroker_int.h"
#include "protocol/fjson.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct db_subgroups {
    db_map_t map;               /* name -> db_subgroup_t */
    int64_t counter, timestamp; /* dataVersion */
    int dirty;
};

static void sg_free(void *v)
{
    db_subgroup_t *g = v;
    free(g->name);
    free(g);
}

static db_subgroup_t *sg_new(const char *name)
{
    /* SubscriptionGroupConfig's field defaults. */
    db_subgroup_t *g = rmq__xcalloc(1, sizeof(*g));
    g->name = rmq__xstrdup(name);
    g->consume_enable = 1;
    g->consume_from_min_enable = 1;
    g->consume_broadcast_enable = 1;
    g->notify_consumer_ids_changed_enable = 1;
    g->retry_queue_nums = 1;
    g->retry_max_times = 16;
    g->broker_id = 0;
    g->which_broker_when_consume_slowly = 1;
    return g;
}

static void changed(struct db_subgroups *s)
{
    s->counter++;
    s->timestamp = rmq__now_ms();
    s->dirty = 1;
}

static struct db_subgroups *sgs_of(db_broker_t *b)
{
    if (!b->subgroups) {
        struct db_subgroups *s = rmq__xcalloc(1, sizeof(*s));
        s->timestamp = rmq__now_ms();
        b->subgroups = s;
        /* SubscriptionGroupManager.init */
        static const char *const sys[] = {
            "TOOLS_CONSUMER",  "FILTERSRV_CONSUMER",    "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
            "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER"};
        for (size_t i = 0; i < RMQ_ARRAY_SIZE(sys); i++)
            rmq__dbmap_put(&s->map, sys[i], sg_new(sys[i]));
    }
    return b->subgroups;
}

db_subgroup_t *rmq__db_subgroup_get(db_broker_t *b, const char *group)
{
    return rmq__dbmap_get(&sgs_of(b)->map, group);
}

db_subgroup_t *rmq__db_subgroup_find(db_broker_t *b, const char *group)
{
    struct db_subgroups *s = sgs_of(b);
    db_subgroup_t *g = rmq__dbmap_get(&s->map, group);
    if (!g) {
        g = sg_new(group);
        rmq__dbmap_put(&s->map, group, g);
        changed(s);
        rmq_dbg(RMQ_DBG_BROKER, DB_LOG, "%s: subscription group %s created", b->name, group);
    }
    return g;
}

typedef struct {
    void (*fn)(db_subgroup_t *g, void *ud);
    void *ud;
} each_t;

static void each_one(const char *key, void *val, void *ud)
{
    each_t *e = ud;
    e->fn(val, e->ud);
}

void rmq__db_subgroup_each(db_broker_t *b, void (*fn)(db_subgroup_t *g, void *ud), void *ud)
{
    each_t e = {fn, ud};
    rmq__dbmap_each(&sgs_of(b)->map, each_one, &e);
}

void rmq__db_subgroups_free(db_broker_t *b)
{
    if (!b->subgroups) return;
    rmq__dbmap_free(&b->subgroups->map, sg_free);
    free(b->subgroups);
    b->subgroups = NULL;
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static void sg_json(rmq_buf_t *o, const db_subgroup_t *g)
{
    rmq__buf_appendf(o,
                     "{\"brokerId\":%lld,\"consumeBroadcastEnable\":%s,\"consumeEnable\":%s,"
                     "\"consumeFromMinEnable\":%s,\"groupName\":",
                     (long long)g->broker_id, g->consume_broadcast_enable ? "true" : "false",
                     g->consume_enable ? "true" : "false",
                     g->consume_from_min_enable ? "true" : "false");
    rmq__fj_write_str(o, g->name, strlen(g->name), 0);
    rmq__buf_appendf(o,
                     ",\"notifyConsumerIdsChangedEnable\":%s,\"retryMaxTimes\":%d,"
                     "\"retryQueueNums\":%d,\"whichBrokerWhenConsumeSlowly\":%lld}",
                     g->notify_consumer_ids_changed_enable ? "true" : "false", g->retry_max_times,
                     g->retry_queue_nums, (long long)g->which_broker_when_consume_slowly);
}

/* A JSON boolean field as Java's Boolean would take it: absent keeps def. */
static int bool_field(const rmq_fj_t *obj, const char *name, int def)
{
    rmq_fj_t *v = rmq__fj_get(obj, name);
    if (!v) return def;
    if (v->type == RMQ_FJ_TRUE) return 1;
    if (v->type == RMQ_FJ_FALSE) return 0;
    if (v->type == RMQ_FJ_STRING) return strcmp(v->s, "true") == 0;
    return def;
}

/* ---- handlers -------------------------------------------------------------------------------- */

/* UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: the body is a SubscriptionGroupConfig; fields it does
 * not carry take their defaults (the body replaces the config, as updateSubscriptionGroupConfig
 * puts the decoded object). */
static void h_update(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = (db_broker_t *)node;
    char err[256], msg[320];
    rmq_fjdoc_t *doc = req->body && req->body_len
                           ? rmq__fj_parse(req->body, req->body_len, err, sizeof(err))
                           : NULL;
    if (!doc) {
        /* A config that does not decode is ignored, as `if (config != null)` does. */
        if (req->body && req->body_len) {
            snprintf(msg, sizeof(msg), "bad SubscriptionGroupConfig: %s", err);
            rmq_log_warn(DB_LOG, "%s: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP from %s: %s", b->name,
                         rmq__conn_peer(conn), msg);
        }
        rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
        return;
    }
    rmq_fj_t *root = rmq__fj_root(doc);
    const char *name =
        root && root->type == RMQ_FJ_OBJECT ? rmq__fj_get_str(root, "groupName") : NULL;
    if (!name || !*name) {
        rmq__fj_free(doc);
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR,
                           "the subscription group config has no groupName");
        return;
    }
    db_subgroup_t *g = sg_new(name);
    g->consume_enable = bool_field(root, "consumeEnable", 1);
    g->consume_from_min_enable = bool_field(root, "consumeFromMinEnable", 1);
    g->consume_broadcast_enable = bool_field(root, "consumeBroadcastEnable", 1);
    g->notify_consumer_ids_changed_enable = bool_field(root, "notifyConsumerIdsChangedEnable", 1);
    int32_t i32;
    int64_t i64;
    if (rmq__fj_get_i32(root, "retryQueueNums", &i32) == 0) g->retry_queue_nums = i32;
    if (rmq__fj_get_i32(root, "retryMaxTimes", &i32) == 0) g->retry_max_times = i32;
    if (rmq__fj_get_i64(root, "brokerId", &i64) == 0) g->broker_id = i64;
    if (rmq__fj_get_i64(root, "whichBrokerWhenConsumeSlowly", &i64) == 0)
        g->which_broker_when_consume_slowly = i64;
    rmq__fj_free(doc);
    struct db_subgroups *s = sgs_of(b);
    db_subgroup_t *old = rmq__dbmap_put(&s->map, g->name, g);
    rmq_log_info(DB_LOG, "%s: subscription group %s %s (retryMaxTimes %d, consumeEnable %s)",
                 b->name, g->name, old ? "updated" : "created", g->retry_max_times,
                 g->consume_enable ? "true" : "false");
    if (old) sg_free(old);
    changed(s);
    rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
}

static void h_delete(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = (db_broker_t *)node;
    const char *name = rmq__db_need_ext(conn, req, "groupName");
    if (!name) return;
    struct db_subgroups *s = sgs_of(b);
    db_subgroup_t *old = rmq__dbmap_del(&s->map, name);
    if (old) {
        rmq_log_info(DB_LOG, "%s: subscription group %s deleted", b->name, name);
        sg_free(old);
        changed(s);
    }
    if (rmq__cmd_ext_bool(req, "removeOffset")) rmq__db_offsets_drop_group(b, name);
    rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
}

static void all_json(db_subgroup_t *g, void *ud)
{
    rmq_buf_t *o = ud;
    if (o->data[o->len - 1] != '{') rmq__buf_append(o, ",", 1);
    rmq__fj_write_str(o, g->name, strlen(g->name), 0);
    rmq__buf_append(o, ":", 1);
    sg_json(o, g);
}

/* GET_ALL_SUBSCRIPTIONGROUP_CONFIG: SubscriptionGroupManager.encode(). */
static void h_get_all(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = (db_broker_t *)node;
    struct db_subgroups *s = sgs_of(b);
    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__buf_appendf(&o,
                     "{\"dataVersion\":{\"counter\":%lld,\"timestamp\":%lld},"
                     "\"subscriptionGroupTable\":{",
                     (long long)s->counter, (long long)s->timestamp);
    rmq__db_subgroup_each(b, all_json, &o);
    rmq__buf_append(&o, "}}", 2);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
}

void rmq__db_group_install(db_broker_t *b)
{
    db_node_t *n = &b->node;
    rmq__db_set_handler(n, RMQ_REQ_UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, h_update);
    rmq__db_set_handler(n, RMQ_REQ_DELETE_SUBSCRIPTIONGROUP, h_delete);
    rmq__db_set_handler(n, RMQ_REQ_GET_ALL_SUBSCRIPTIONGROUP_CONFIG, h_get_all);
}

/* ---- --store --------------------------------------------------------------------------------- */

static void line_of(db_subgroup_t *g, void *ud)
{
    /* name consumeEnable consumeFromMinEnable consumeBroadcastEnable
     * notifyConsumerIdsChangedEnable retryQueueNums retryMaxTimes brokerId
     * whichBrokerWhenConsumeSlowly (group names have no blanks: ^[%|a-zA-Z0-9_-]+$) */
    rmq__buf_appendf(ud, "%s %d %d %d %d %d %d %lld %lld\n", g->name, g->consume_enable,
                     g->consume_from_min_enable, g->consume_broadcast_enable,
                     g->notify_consumer_ids_changed_enable, g->retry_queue_nums, g->retry_max_times,
                     (long long)g->broker_id, (long long)g->which_broker_when_consume_slowly);
}

void rmq__db_subgroups_flush(db_broker_t *b)
{
    if (!b->subgroups || !b->subgroups->dirty || b->log_fd < 0) return;
    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__db_subgroup_each(b, line_of, &o);
    if (rmq__db_file_save(b, "subscriptionGroups", &o) == 0)
        b->subgroups->dirty = 0;
    else
        rmq_log_error(DB_LOG, "%s: cannot save subscription groups in %s: %s", b->name, b->dir,
                      strerror(errno));
    rmq__buf_free(&o);
}

void rmq__db_subgroups_load(db_broker_t *b)
{
    size_t len;
    char *txt = rmq__db_file_read(b, "subscriptionGroups", &len);
    struct db_subgroups *s = sgs_of(b);
    for (char *line = txt ? strtok(txt, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        char name[512];
        int ce, cm, cb, nc, rq, rm;
        long long bid, wb;
        if (sscanf(line, "%511s %d %d %d %d %d %d %lld %lld", name, &ce, &cm, &cb, &nc, &rq, &rm,
                   &bid, &wb) != 9)
            continue;
        db_subgroup_t *g = sg_new(name);
        g->consume_enable = ce;
        g->consume_from_min_enable = cm;
        g->consume_broadcast_enable = cb;
        g->notify_consumer_ids_changed_enable = nc;
        g->retry_queue_nums = rq;
        g->retry_max_times = rm;
        g->broker_id = bid;
        g->which_broker_when_consume_slowly = wb;
        db_subgroup_t *old = rmq__dbmap_put(&s->map, g->name, g);
        if (old) sg_free(old);
    }
    free(txt);
    s->dirty = 0;
}
