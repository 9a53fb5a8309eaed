/*
 * devbroker_reply.c -- what every part of the development broker answers and dispatches
 * through: the reply helpers, the handler table of a node (the request gate of devbroker.c
 * serves it), the readers of request header fields and JSON bodies that answer a bad
 * request the way Java's header decoding does, and the topic and queue checks of a read (PULL,
 * POP). It calls nothing else of the development broker.
 *
 * Threads: the broker thread (rmq__db_set_handler also in rmq__devbroker_start before it runs).
 */
#include "devbroker_int.h"
#include "protocol/fjson.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* Java's answer to a request without a required header field. */
#define FIELD_NULL                                                                                 \
    "org.apache.rocketmq.remoting.exception.RemotingCommandException: the custom field <%s> is "   \
    "null"

void rmq__db_reply(rmq_conn_t *conn, rmq_cmd_t *resp)
{
    int rc = rmq__conn_reply(conn, resp);
    if (rc)
        rmq_dbg(RMQ_DBG_BROKER, DB_LOG, "reply to %s failed: %s", rmq__conn_peer(conn),
                rmq_err_str(rc));
}

void rmq__db_reply_code(rmq_conn_t *conn, const rmq_cmd_t *req, int code, const char *remark)
{
    if (req->flag & RMQ_FLAG_ONEWAY) return;
    rmq_cmd_t resp;
    rmq__cmd_init_response(&resp, req, code, remark);
    rmq__db_reply(conn, &resp);
    rmq__cmd_free(&resp);
}

const char *rmq__db_need_ext(rmq_conn_t *conn, const rmq_cmd_t *req, const char *key)
{
    const char *v = rmq__cmd_ext(req, key);
    if (!v) {
        char msg[200];
        snprintf(msg, sizeof(msg), FIELD_NULL, key);
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
    }
    return v;
}

void rmq__db_reply_codef(rmq_conn_t *conn, const rmq_cmd_t *req, int code, const char *fmt, ...)
{
    char remark[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(remark, sizeof(remark), fmt, ap);
    va_end(ap);
    rmq__db_reply_code(conn, req, code, remark);
}

void rmq__db_reply_no_topic(rmq_conn_t *conn, const rmq_cmd_t *req, const char *topic)
{
    rmq__db_reply_codef(conn, req, RMQ_RESP_TOPIC_NOT_EXIST,
                        "topic[%s] not exist, apply first please! \nSee "
                        "http://rocketmq.apache.org/docs/faq/ for further details.",
                        topic);
}

void rmq__db_reply_bad_qid(rmq_conn_t *conn, const rmq_cmd_t *req, int code, const char *topic,
                           int64_t qid, int read_q)
{
    rmq__db_reply_codef(
        conn, req, code,
        "queueId[%d] is illegal, topic:[%s] topicConfig.readQueueNums:[%d] consumer:[%s]", (int)qid,
        topic, read_q, rmq__conn_peer(conn));
}

int rmq__db_check_read(rmq_conn_t *conn, const rmq_cmd_t *req, const db_topic_t *t,
                       const char *topic, int64_t qid, int64_t min_qid, const char *verb)
{
    if (!t) {
        rmq__db_reply_no_topic(conn, req, topic);
        return -1;
    }
    if (!(t->perm & 4)) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_NO_PERMISSION,
                            "the topic[%s] %s message is forbidden", topic, verb);
        return -1;
    }
    if (qid < min_qid || qid >= t->read_q) {
        rmq__db_reply_bad_qid(conn, req, RMQ_RESP_SYSTEM_ERROR, topic, qid, t->read_q);
        return -1;
    }
    return 0;
}

void rmq__db_reply_body(rmq_conn_t *conn, const rmq_cmd_t *req, int code, const char *remark,
                        const rmq_buf_t *body)
{
    if (req->flag & RMQ_FLAG_ONEWAY) return;
    rmq_cmd_t resp;
    rmq__cmd_init_response(&resp, req, code, remark);
    if (body) {
        resp.body = body->data;
        resp.body_len = body->len;
    }
    rmq__db_reply(conn, &resp);
    resp.body = NULL; /* borrowed */
    resp.body_len = 0;
    rmq__cmd_free(&resp);
}

void rmq__db_set_handler(db_node_t *node, int code, db_handler_fn fn)
{
    int i;
    for (i = 0; i < node->nh; i++)
        if (node->h[i].code == code) break;
    if (i == node->nh) {
        if (node->nh >= (int)RMQ_ARRAY_SIZE(node->h)) abort();
        node->nh++;
    }
    node->h[i].code = code;
    node->h[i].fn = fn;
}

/* ---- header fields --------------------------------------------------------------------------- */

static void hdr_fail(db_hdr_t *h, const char *fmt, const char *key)
{
    if (h->failed) return;
    h->failed = 1;
    char msg[256];
    snprintf(msg, sizeof(msg), fmt, key);
    rmq__db_reply_code(h->conn, h->req, RMQ_RESP_SYSTEM_ERROR, msg);
}

const char *rmq__db_hdr_str(db_hdr_t *h, const char *key)
{
    const char *v = rmq__cmd_ext(h->req, key);
    if (!v) hdr_fail(h, FIELD_NULL, key);
    return v;
}

int64_t rmq__db_hdr_i64(db_hdr_t *h, const char *key)
{
    int64_t v = 0;
    int rc = rmq__cmd_ext_i64(h->req, key, &v);
    if (rc == RMQ_ERR_NOT_FOUND)
        hdr_fail(h, FIELD_NULL, key);
    else if (rc)
        hdr_fail(h, "java.lang.NumberFormatException: bad value of <%s>", key);
    return v;
}

int64_t rmq__db_hdr_opt_i64(db_hdr_t *h, const char *key, int64_t def, int *present)
{
    int64_t v = def;
    int rc = rmq__cmd_ext_i64(h->req, key, &v);
    if (present) *present = rc == 0;
    if (rc == RMQ_ERR_NOT_FOUND) return def;
    if (rc) hdr_fail(h, "java.lang.NumberFormatException: bad value of <%s>", key);
    return v;
}

rmq_fjdoc_t *rmq__db_parse_body(rmq_conn_t *conn, rmq_cmd_t *req, const char *what)
{
    char err[256], msg[300];
    rmq_fjdoc_t *doc = rmq__fj_parse(req->body ? req->body : "", req->body_len, err, sizeof(err));
    if (!doc) {
        snprintf(msg, sizeof(msg), "bad %s: %s", what, err);
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
    }
    return doc;
}
