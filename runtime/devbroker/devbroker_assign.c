/*
 * devbroker_assign.c -- RocketMQ 5.x broker-side assignment of the development broker:
 * SET_MESSAGE_REQUEST_MODE (401, MessageRequestModeManager: a group's mode PULL or POP per
 * topic, what `mqadmin setConsumeMode` sends), GET_ALL_MESSAGE_REQUEST_MODE (402) and
 * QUERY_ASSIGNMENT (400, QueryAssignmentProcessor: which queues a client gets and in which
 * mode). Assignment in PULL mode is AllocateMessageQueueAveragely over the sorted queues of
 * every broker of this process that serves the topic and the sorted client ids of the group;
 * in POP mode with popShareQueueNum <= 0 every client gets queue -1 of every broker ("pop from
 * all queues"), with popShareQueueNum > 0 its own averaged share and that of the next
 * popShareQueueNum clients.
 *
 * Ownership: b->modes (the mode table) is owned by the broker, freed by rmq__db_assign_free.
 * Threads: the broker thread only.
 */
#include "devbroker_int.h"
#include "protocol/fjson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RETRY_PREFIX "%RETRY%"

typedef struct db_mode {
    char *topic, *group;
    int pop;       /* MessageRequestMode: 0 PULL, 1 POP */
    int32_t share; /* popShareQueueNum */
} db_mode_t;

typedef struct db_modes {
    db_mode_t *v;
    int n, cap;
} db_modes_t;

static db_mode_t *mode_find(db_broker_t *b, const char *topic, const char *group)
{
    if (!b->modes) return NULL;
    for (int i = 0; i < b->modes->n; i++)
        if (!strcmp(b->modes->v[i].topic, topic) && !strcmp(b->modes->v[i].group, group))
            return &b->modes->v[i];
    return NULL;
}

static void mode_json(rmq_buf_t *o, const db_mode_t *m)
{
    /* SetMessageRequestModeRequestBody as fastjson writes it (sorted keys). */
    rmq__buf_append(o, "{\"consumerGroup\":", 17);
    rmq__fj_write_str(o, m->group, strlen(m->group), 0);
    rmq__buf_appendf(o,
                     ",\"mode\":\"%s\",\"popShareQueueNum\":%d,\"topic\":", m->pop ? "POP" : "PULL",
                     (int)m->share);
    rmq__fj_write_str(o, m->topic, strlen(m->topic), 0);
    rmq__buf_append(o, "}", 1);
}

/* MessageRequestMode.valueOf: 0 PULL, 1 POP, -1 anything else. */
static int parse_mode(const char *s)
{
    if (!s) return -1;
    if (!strcmp(s, "PULL")) return 0;
    if (!strcmp(s, "POP")) return 1;
    return -1;
}

static void h_set_mode(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = rmq__db_broker_of(node);
    rmq_fjdoc_t *doc = rmq__db_parse_body(conn, req, "SetMessageRequestModeRequestBody");
    if (!doc) return;
    rmq_fj_t *root = rmq__fj_root(doc);
    const char *topic = rmq__fj_get_str(root, "topic");
    const char *group = rmq__fj_get_str(root, "consumerGroup");
    const char *mode_s = rmq__fj_get_str(root, "mode");
    int32_t share = 0;
    rmq__fj_get_i32(root, "popShareQueueNum", &share);
    int mode = parse_mode(mode_s ? mode_s : "PULL");
    if (!topic || !group) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR,
                            "bad SetMessageRequestModeRequestBody: no %s",
                            topic ? "consumerGroup" : "topic");
    } else if (mode < 0) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR,
                            "bad SetMessageRequestModeRequestBody: mode %s is neither PULL nor "
                            "POP",
                            mode_s);
    } else if (!strncmp(topic, RETRY_PREFIX, strlen(RETRY_PREFIX))) {
        /* QueryAssignmentProcessor.setMessageRequestMode */
        rmq__db_reply_code(conn, req, RMQ_RESP_NO_PERMISSION,
                           "retry topic is not allowed to set mode");
    } else {
        db_mode_t *m = mode_find(b, topic, group);
        if (!m) {
            if (!b->modes) b->modes = rmq__xcalloc(1, sizeof(*b->modes));
            db_modes_t *t = b->modes;
            if (t->n == t->cap) {
                t->cap = t->cap ? t->cap * 2 : 8;
                t->v = realloc(t->v, sizeof(*t->v) * (size_t)t->cap);
                if (!t->v) abort();
            }
            m = &t->v[t->n++];
            m->topic = rmq__xstrdup(topic);
            m->group = rmq__xstrdup(group);
        }
        m->pop = mode;
        m->share = share;
        rmq_log_info(DB_LOG, "%s: group %s consumes topic %s in %s mode", b->name, group, topic,
                     mode ? "POP" : "PULL");
        rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
    }
    rmq__fj_free(doc);
}

/* MessageRequestModeManager's encode(): {"messageRequestModeMap":{topic:{group:body}}}. */
static void h_get_all_modes(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = rmq__db_broker_of(node);
    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__buf_append(&o, "{\"messageRequestModeMap\":{", 26);
    int n = b->modes ? b->modes->n : 0;
    char *done = calloc((size_t)n + 1, 1);
    int first_topic = 1;
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        const char *topic = b->modes->v[i].topic;
        if (!first_topic) rmq__buf_append(&o, ",", 1);
        first_topic = 0;
        rmq__fj_write_str(&o, topic, strlen(topic), 0);
        rmq__buf_append(&o, ":{", 2);
        int first = 1;
        for (int j = i; j < n; j++) {
            if (done[j] || strcmp(b->modes->v[j].topic, topic)) continue;
            done[j] = 1;
            if (!first) rmq__buf_append(&o, ",", 1);
            first = 0;
            rmq__fj_write_str(&o, b->modes->v[j].group, strlen(b->modes->v[j].group), 0);
            rmq__buf_append(&o, ":", 1);
            mode_json(&o, &b->modes->v[j]);
        }
        rmq__buf_append(&o, "}", 1);
    }
    rmq__buf_append(&o, "}}", 2);
    free(done);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
}

/* ---- QUERY_ASSIGNMENT ------------------------------------------------------------------------ */

typedef struct mq_ref {
    const char *broker;
    int qid;
} mq_ref_t;

static int mq_cmp(const void *a, const void *b)
{
    const mq_ref_t *x = a, *y = b;
    int c = strcmp(x->broker, y->broker);
    return c ? c : (x->qid > y->qid) - (x->qid < y->qid);
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* AllocateMessageQueueAveragely: the [start, start + n) range of mq_all that client idx of
 * ncid gets. */
static void averagely(int nmq, int idx, int ncid, int *start, int *n)
{
    int mod = nmq % ncid;
    int avg = nmq <= ncid ? 1 : (mod > 0 && idx < mod ? nmq / ncid + 1 : nmq / ncid);
    *start = (mod > 0 && idx < mod) ? idx * avg : idx * avg + mod;
    int range = avg < nmq - *start ? avg : nmq - *start;
    *n = range > 0 ? range : 0;
}

static void assignment_json(rmq_buf_t *o, int *first, const char *topic, const mq_ref_t *mq,
                            int pop)
{
    if (!*first) rmq__buf_append(o, ",", 1);
    *first = 0;
    rmq__buf_append(o, "{\"messageQueue\":", 16);
    rmq__db_mq_json(o, mq->broker, mq->qid, topic);
    rmq__buf_appendf(o, ",\"mode\":\"%s\"}", pop ? "POP" : "PULL");
}

static void h_query_assignment(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = rmq__db_broker_of(node);
    rmq_fjdoc_t *doc = rmq__db_parse_body(conn, req, "QueryAssignmentRequestBody");
    if (!doc) return;
    rmq_fj_t *root = rmq__fj_root(doc);
    const char *topic = rmq__fj_get_str(root, "topic");
    const char *group = rmq__fj_get_str(root, "consumerGroup");
    const char *cid = rmq__fj_get_str(root, "clientId");
    const char *model = rmq__fj_get_str(root, "messageModel");
    if (!topic || !group || !cid) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR,
                            "bad QueryAssignmentRequestBody: no %s",
                            !topic   ? "topic"
                            : !group ? "consumerGroup"
                                     : "clientId");
        rmq__fj_free(doc);
        return;
    }
    /* Every queue of the topic on the brokers of this process (the topic route). */
    rmq_devbroker_t *db = node->db;
    int nmq = 0, cap = 0;
    mq_ref_t *mqs = NULL;
    for (int i = 0; i < db->n_brokers; i++) {
        db_broker_t *x = db->brokers[i];
        if (x->down || x->master) continue;
        db_topic_t *t = rmq__db_topic_get(x, topic);
        if (!t) continue;
        for (int q = 0; q < t->read_q; q++) {
            if (nmq == cap) {
                cap = cap ? cap * 2 : 16;
                mqs = realloc(mqs, sizeof(*mqs) * (size_t)cap);
                if (!mqs) abort();
            }
            mqs[nmq].broker = x->name;
            mqs[nmq++].qid = q;
        }
    }
    if (nmq == 0) {
        /* QueryAssignmentProcessor: no route of the topic. */
        rmq__db_reply_codef(conn, req, RMQ_RESP_QUERY_NOT_FOUND,
                            "No topic route info in name server for the topic: %s", topic);
        free(mqs);
        rmq__fj_free(doc);
        return;
    }
    qsort(mqs, (size_t)nmq, sizeof(*mqs), mq_cmp);
    db_mode_t *m = mode_find(b, topic, group);
    int pop = m ? m->pop : 0;
    int share = m ? m->share : 0;

    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__buf_append(&o, "{\"messageQueueAssignments\":[", 28);
    int first = 1;
    if (model && !strcmp(model, "BROADCASTING")) {
        for (int i = 0; i < nmq; i++)
            assignment_json(&o, &first, topic, &mqs[i], pop);
    } else if (pop && share <= 0) {
        /* Each client pops from every queue: queue -1 of each broker. */
        for (int i = 0; i < nmq; i++) {
            if (i > 0 && !strcmp(mqs[i].broker, mqs[i - 1].broker)) continue;
            mq_ref_t all = {mqs[i].broker, -1};
            assignment_json(&o, &first, topic, &all, pop);
        }
    } else {
        /* The group's clients, sorted (the consumer table of this broker). */
        db_group_t *g = rmq__dbmap_get(&b->groups, group);
        int ncid = g ? g->n_members : 0;
        char **cids = rmq__xcalloc((size_t)ncid + 1, sizeof(*cids));
        for (int i = 0; i < ncid; i++)
            cids[i] = g->members[i]->client_id;
        qsort(cids, (size_t)ncid, sizeof(*cids), str_cmp);
        int idx = -1;
        for (int i = 0; i < ncid; i++)
            if (!strcmp(cids[i], cid)) idx = i;
        if (idx < 0) {
            rmq_log_warn(DB_LOG, "%s: QUERY_ASSIGNMENT: client %s is not a member of group %s",
                         b->name, cid, group);
        } else {
            int rounds = pop ? (share < ncid - 1 ? share : ncid - 1) + 1 : 1;
            char *given = calloc((size_t)nmq, 1);
            for (int r = 0; r < rounds; r++) {
                int start, n;
                averagely(nmq, (idx + r) % ncid, ncid, &start, &n);
                for (int i = start; i < start + n; i++) {
                    if (given[i]) continue;
                    given[i] = 1;
                    assignment_json(&o, &first, topic, &mqs[i], pop);
                }
            }
            free(given);
        }
        free(cids);
    }
    rmq__buf_append(&o, "]}", 2);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
    free(mqs);
    rmq__fj_free(doc);
}

void rmq__db_assign_install(db_broker_t *b)
{
    rmq__db_set_handler(&b->node, RMQ_REQ_QUERY_ASSIGNMENT, h_query_assignment);
    rmq__db_set_handler(&b->node, RMQ_REQ_SET_MESSAGE_REQUEST_MODE, h_set_mode);
    rmq__db_set_handler(&b->node, RMQ_REQ_GET_ALL_MESSAGE_REQUEST_MODE, h_get_all_modes);
}

void rmq__db_assign_free(db_broker_t *b)
{
    if (!b->modes) return;
    for (int i = 0; i < b->modes->n; i++) {
        free(b->modes->v[i].topic);
        free(b->modes->v[i].group);
    }
    free(b->modes->v);
    free(b->modes);
    b->modes = NULL;
}
