/*
 * assignment.c -- RocketMQ 5 broker-side assignment for the push consumer: QUERY_ASSIGNMENT
 * (400, MQClientAPIImpl.queryAssignment) with a QueryAssignmentRequestBody (topic,
 * consumerGroup, clientId, strategyName, messageModel) and the decoding of the broker's
 * QueryAssignmentResponseBody (messageQueueAssignments: {messageQueue, mode}). What the
 * rebalance does with the answer (PULL queues pulled, POP assignments popped) is rebalance.c's.
 *
 * Ownership: a query in flight owns its context; the assignments handed to the callback are
 * borrowed for the call (their strings are the parsed answer's).
 * Threads: loop thread only.
 */
#include "consumer_int.h"

#include "protocol/fjson.h"

#include <stdio.h>
#include <stdlib.h>

#define RMQ_QUERY_ASSIGNMENT_TIMEOUT_MS 3000 /* RebalanceImpl.QUERY_ASSIGNMENT_TIMEOUT */

int rmq__assign_by_broker(const rmq_consumer_t *c)
{
    /* RebalancePushImpl.clientRebalance: BROADCASTING always allocates here. Java 5.3.3 does
     * so for an orderly consumer too ("order pop consume not implement yet"); here one whose
     * client_rebalance is false asks the broker, and pops its POP queues with order=true
     * (pop.c). client_rebalance is true by default: an orderly consumer allocates here and
     * pulls unless told otherwise, as in Java. */
    return !c->conf->client_rebalance && c->conf->message_model == RMQ_MODEL_CLUSTERING &&
           !c->assign_unsupported;
}

typedef struct assign_q {
    rmq_assign_cb cb;
    void *ud;
} assign_q_t;

static void on_answer(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    assign_q_t *aq = ud;
    rmq_assign_cb cb = aq->cb;
    void *cud = aq->ud;
    free(aq);
    if (err) {
        cb(cud, err, NULL, 0, errmsg);
        return;
    }
    if (resp->code != RMQ_RESP_SUCCESS) {
        cb(cud, resp->code, NULL, 0, resp->remark ? resp->remark : rmq_err_name(resp->code));
        return;
    }
    char perr[128] = "no body";
    rmq_fjdoc_t *d = resp->body ? rmq__fj_parse(resp->body, resp->body_len, perr, sizeof(perr))
                                : NULL;
    rmq_fj_t *list = d ? rmq__fj_get(rmq__fj_root(d), "messageQueueAssignments") : NULL;
    if (!list || (list->type != RMQ_FJ_ARRAY && list->type != RMQ_FJ_NULL)) {
        char why[192];
        snprintf(why, sizeof(why), "bad QueryAssignmentResponseBody: %s",
                 d ? "no messageQueueAssignments array" : perr);
        if (d) rmq__fj_free(d);
        cb(cud, RMQ_ERR_BAD_JSON, NULL, 0, why);
        return;
    }
    int cap = list->type == RMQ_FJ_ARRAY ? (int)list->len : 0, n = 0;
    rmq_assignment_t *a = rmq__xcalloc((size_t)cap + 1, sizeof(*a));
    if (list->type == RMQ_FJ_ARRAY) {
        for (rmq_fj_t *e = list->child; e; e = e->next) {
            rmq_fj_t *mq = rmq__fj_get(e, "messageQueue");
            const char *mode = rmq__fj_get_str(e, "mode");
            int32_t qid = 0;
            /* RebalanceImpl skips an assignment without a message queue. */
            if (!mq || mq->type != RMQ_FJ_OBJECT) continue;
            const char *topic = rmq__fj_get_str(mq, "topic");
            const char *broker = rmq__fj_get_str(mq, "brokerName");
            if (!topic || !broker || rmq__fj_get_i32(mq, "queueId", &qid) != 0) {
                rmq_log_warn("rebalance", "QUERY_ASSIGNMENT: an assignment without topic, "
                             "brokerName or queueId skipped");
                continue;
            }
            a[n].mq.topic = (char *)topic;
            a[n].mq.broker_name = (char *)broker;
            a[n].mq.queue_id = qid;
            a[n].pop = mode && !strcmp(mode, "POP");
            n++;
        }
    }
    cb(cud, 0, a, n, NULL);
    free(a);
    rmq__fj_free(d);
}

int rmq__assign_query(rmq_consumer_t *c, const char *addr, const char *topic, rmq_assign_cb cb,
                      void *ud)
{
    char strategy[64] = "AVG";
    if (rmq__conf_get(c->conf, "allocate_message_queue_strategy", strategy,
                      sizeof(strategy)) != 0 || !strcmp(strategy, "LUA"))
        snprintf(strategy, sizeof(strategy), "AVG");
    /* QueryAssignmentRequestBody as fastjson writes it (sorted keys). */
    rmq_buf_t body;
    rmq__buf_init(&body);
    rmq__buf_append(&body, "{\"clientId\":", 12);
    rmq__fj_write_str(&body, c->client_id, strlen(c->client_id), 0);
    rmq__buf_append(&body, ",\"consumerGroup\":", 17);
    rmq__fj_write_str(&body, c->group, strlen(c->group), 0);
    rmq__buf_appendf(&body, ",\"messageModel\":\"%s\",\"strategyName\":",
                     c->conf->message_model == RMQ_MODEL_BROADCASTING ? "BROADCASTING"
                                                                      : "CLUSTERING");
    rmq__fj_write_str(&body, strategy, strlen(strategy), 0);
    rmq__buf_append(&body, ",\"topic\":", 9);
    rmq__fj_write_str(&body, topic, strlen(topic), 0);
    rmq__buf_append(&body, "}", 1);
    rmq_cmd_t cmd;
    rmq__cmd_init(&cmd, RMQ_REQ_QUERY_ASSIGNMENT, RMQ_SERIALIZE_JSON);
    cmd.language = c->conf->language;
    cmd.body = body.data;
    cmd.body_len = body.len;
    assign_q_t *aq = rmq__xcalloc(1, sizeof(*aq));
    aq->cb = cb;
    aq->ud = ud;
    int rc = rmq__remoting_request(c->rt, addr, &cmd, RMQ_QUERY_ASSIGNMENT_TIMEOUT_MS, on_answer,
                                   aq);
    cmd.body = NULL;
    rmq__cmd_free(&cmd);
    rmq__buf_free(&body);
    rmq_dbg(RMQ_DBG_REBALANCE, "rebalance", "QUERY_ASSIGNMENT %s -> %s (%s)", topic, addr,
            rc ? rmq_err_name(rc) : "sent");
    if (rc) free(aq);
    return rc;
}
