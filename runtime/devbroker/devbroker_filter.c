/*
 * devbroker_filter.c -- property filtering (SQL92 subscriptions) in the development broker, as
 * the 4.9.4 broker does it with enablePropertyFilter (`--enable-property-filter`, off by
 * default like the Java broker's setting):
 *
 *  - ConsumerFilterManager: a heartbeat carrying a SQL92 subscription registers its compiled
 *    expression per (group, topic) with the subscription's subVersion as clientVersion; an
 *    expression that does not compile is not registered (a pull then answers
 *    FILTER_DATA_NOT_EXIST). A newer version replaces an older one; an older one is ignored.
 *  - ClientManageProcessor.checkClientConfig: CHECK_CLIENT_CONFIG answers SUCCESS for TAG,
 *    SYSTEM_ERROR "The broker does not support consumer to filter message by SQL92" when
 *    property filtering is off, SUBSCRIPTION_PARSE_FAILED with the compile error otherwise.
 *  - PullMessageProcessor / ExpressionMessageFilter: the filter data a pull uses (or the
 *    refusal), and the match of one stored message (isMatchedByCommitLog over its properties;
 *    no bloom filter, so isMatchedByConsumeQueue lets every SQL92 entry through).
 *
 * Ownership: the broker's filter map owns its entries (expression text and compiled tree); a
 * pull that waits (long polling) keeps its own compiled copy.
 * Threads: the broker thread only.
 */
#include "devbroker_int.h"
#include "protocol/fjson.h"
#include "protocol/sql92.h"
#include "protocol/subscription.h"

#include <stdio.h>
#include <stdlib.h>

#define FILTER_UNSUPPORTED "The broker does not support consumer to filter message by "

typedef struct db_filter {
    char *expression;
    char *type;
    int64_t client_version;
    rmq_sql92_t *compiled;
} db_filter_t;

static void fkey(char *key, size_t size, const char *group, const char *topic)
{
    snprintf(key, size, "%s\001%s", group, topic);
}

static void filter_free(void *v)
{
    db_filter_t *f = v;
    if (!f) return;
    rmq__sql92_free(f->compiled);
    free(f->expression);
    free(f->type);
    free(f);
}

int rmq__db_filter_is_tag(const char *type)
{
    return !type || !*type || !strcmp(type, "TAG"); /* ExpressionType.isTagType */
}

int rmq__db_filter_compile(const char *type, const char *expression, rmq_sql92_t **out,
                           char *errstr, size_t errstr_size)
{
    const char *cls = NULL;
    char err[512];
    *out = NULL;
    if (!type || strcmp(type, "SQL92")) {
        /* FilterFactory.get(type) is null for anything else: a NullPointerException. */
        rmq__seterr(errstr, errstr_size, "java.lang.NullPointerException");
        return RMQ_ERR_INVALID;
    }
    if (rmq__sql92_compile(expression, out, err, sizeof(err), &cls)) {
        /* MQFilterException(msg, cause).getMessage() is the cause's toString(). */
        rmq__seterr(errstr, errstr_size, "%s: %s", cls ? cls : "java.lang.RuntimeException", err);
        return RMQ_ERR_INVALID;
    }
    return RMQ_OK;
}

void rmq__db_filter_register(db_broker_t *b, const char *group, const rmq_sub_t *sub)
{
    if (rmq__db_filter_is_tag(sub->expression_type) || !sub->sub_string || !*sub->sub_string)
        return;
    char key[600], err[512];
    fkey(key, sizeof(key), group, sub->topic);
    db_filter_t *old = rmq__dbmap_get(&b->filters, key);
    if (old && sub->sub_version <= old->client_version) return;
    rmq_sql92_t *e = NULL;
    if (rmq__db_filter_compile(sub->expression_type, sub->sub_string, &e, err, sizeof(err))) {
        rmq_log_warn(DB_LOG,
                     "%s: consumer %s subscribes %s with an expression that does not "
                     "compile (%s): %s",
                     b->name, group, sub->topic, sub->sub_string, err);
        return;
    }
    db_filter_t *f = rmq__xcalloc(1, sizeof(*f));
    f->expression = rmq__xstrdup(sub->sub_string);
    f->type = rmq__xstrdup(sub->expression_type);
    f->client_version = sub->sub_version;
    f->compiled = e;
    filter_free(rmq__dbmap_put(&b->filters, key, f));
    rmq_dbg(RMQ_DBG_BROKER, DB_LOG, "%s: filter of %s on %s: %s %s (version %lld)", b->name, group,
            sub->topic, f->type, f->expression, (long long)f->client_version);
}

void rmq__db_filter_free_all(db_broker_t *b)
{
    rmq__dbmap_free(&b->filters, filter_free);
}

int rmq__db_filter_for_pull(db_broker_t *b, rmq_conn_t *conn, const rmq_cmd_t *req,
                            const char *group, const rmq_sub_t *sub, int from_request,
                            int64_t sub_version, rmq_sql92_t **expr)
{
    *expr = NULL;
    if (rmq__db_filter_is_tag(sub->expression_type)) return 0;
    char err[512];
    if (from_request) {
        /* ConsumerFilterManager.build swallows a compile error and gives null; the pull then
         * goes on without filter data, and ExpressionMessageFilter lets every message through. */
        if (rmq__db_filter_compile(sub->expression_type, sub->sub_string, expr, err, sizeof(err)))
            *expr = NULL;
    } else {
        char key[600];
        fkey(key, sizeof(key), group, sub->topic);
        db_filter_t *f = rmq__dbmap_get(&b->filters, key);
        if (!f) {
            rmq__db_reply_code(conn, req, RMQ_RESP_FILTER_DATA_NOT_EXIST,
                               "The broker's consumer filter data is not exist!Your expression "
                               "may be wrong!");
            return -1;
        }
        if (f->client_version < sub_version) {
            rmq__db_reply_code(conn, req, RMQ_RESP_FILTER_DATA_NOT_LATEST,
                               "the consumer's consumer filter data not latest");
            return -1;
        }
        if (rmq__db_filter_compile(f->type, f->expression, expr, err, sizeof(err))) *expr = NULL;
    }
    if (!b->node.db->property_filter) {
        char msg[256];
        snprintf(msg, sizeof(msg), FILTER_UNSUPPORTED "%s", sub->expression_type);
        rmq__sql92_free(*expr);
        *expr = NULL;
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
        return -1;
    }
    return 1;
}

int rmq__db_filter_match(const rmq_sql92_t *expr, const db_msg_t *m)
{
    if (!expr) return 1; /* no filter data: isMatchedByCommitLog is true */
    db_stored_t v;
    if (rmq__db_stored_parse(m, &v)) return 0;
    char err[256];
    int r = rmq__sql92_eval(expr, v.props, v.props_len, err, sizeof(err));
    if (r == RMQ_SQL92_ERROR)
        rmq_dbg(RMQ_DBG_BROKER, DB_LOG, "Message Filter error at queue offset %lld: %s",
                (long long)m->qoff, err);
    return r == RMQ_SQL92_TRUE;
}

/* CHECK_CLIENT_CONFIG (ClientManageProcessor.checkClientConfig). */
void rmq__db_h_check_client_config(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = (db_broker_t *)node;
    char err[512];
    rmq_fjdoc_t *doc = req->body && req->body_len
                           ? rmq__fj_parse(req->body, req->body_len, err, sizeof(err))
                           : NULL;
    rmq_fj_t *sd = doc ? rmq__fj_get(rmq__fj_root(doc), "subscriptionData") : NULL;
    if (!sd || sd->type != RMQ_FJ_OBJECT) {
        rmq__fj_free(doc);
        rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
        return;
    }
    const char *type = rmq__fj_get_str(sd, "expressionType");
    const char *expression = rmq__fj_get_str(sd, "subString");
    if (rmq__db_filter_is_tag(type)) {
        rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
    } else if (!b->node.db->property_filter) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR, FILTER_UNSUPPORTED "%s", type);
    } else if (strcmp(type, "SQL92")) {
        /* FilterFactory.get(type) is null: a NullPointerException, whose message is null. */
        rmq__db_reply_code(conn, req, RMQ_RESP_SUBSCRIPTION_PARSE_FAILED, NULL);
    } else {
        rmq_sql92_t *e = NULL;
        if (rmq__db_filter_compile(type, expression ? expression : "", &e, err, sizeof(err))) {
            const char *client = rmq__fj_get_str(rmq__fj_root(doc), "clientId");
            const char *group = rmq__fj_get_str(rmq__fj_root(doc), "group");
            rmq_log_warn(DB_LOG,
                         "Client %s@%s filter message, but failed to compile "
                         "expression! sub=%s, error=%s",
                         client ? client : "?", group ? group : "?", expression ? expression : "",
                         err);
            rmq__db_reply_code(conn, req, RMQ_RESP_SUBSCRIPTION_PARSE_FAILED, err);
        } else {
            rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
        }
        rmq__sql92_free(e);
    }
    rmq__fj_free(doc);
}
