/*
 * direct.c -- CONSUME_MESSAGE_DIRECTLY (PROTOCOL.md 2.4.5, 3.9): a broker relays mqadmin's
 * consumeMessage; the handler runs once on the stored message it sent, as a batch of one
 * without a queue, and the answer is a ConsumeMessageDirectlyResult. Offsets and send-back are
 * untouched. client.c registers rmq__direct_request for the request code; consume.c hands the
 * batch back to rmq__direct_done.
 *
 * Ownership: the request's context (struct rmq_direct: the connection kept, the decoded set's
 * creator reference) and the batch belong to the consumer from the request until the result
 * was answered.
 * Threads: loop thread only.
 */
#include "consumer_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* CONSUME_MESSAGE_DIRECTLY: run the handler once on the stored message the broker sent, answer
 * with ConsumeMessageDirectlyResult (PROTOCOL.md 2.4.5, 3.9). Offsets and send-back untouched. */
struct rmq_direct {
    rmq_conn_t *conn;     /* kept */
    rmq_cmd_t req;        /* only opaque, code and serialize are used for the answer */
    rmq_msgset_t *set;    /* creator reference */
    int64_t start_ms;
};

void rmq__direct_done(rmq_consumer_t *c, rmq_cbatch_t *cb)
{
    struct rmq_direct *d = cb->direct;
    rmq_batch_t *b = &cb->b;
    (void)c;
    const char *res;
    if (b->status == RMQ_CONSUME_NOT_RUN)
        res = "CR_THROW_EXCEPTION";
    else if (b->handler_error)
        res = "CR_THROW_EXCEPTION";
    else if (b->status == RMQ_CONSUME_SUCCESS)
        res = "CR_SUCCESS";
    else if (b->status == RMQ_CONSUME_COMMIT)
        res = "CR_COMMIT";
    else
        res = "CR_LATER";
    rmq_buf_t body;
    rmq__buf_init(&body);
    rmq__buf_appendf(&body, "{\"autoCommit\":true,\"consumeResult\":\"%s\",\"order\":%s,", res,
                     b->orderly ? "true" : "false");
    if (b->status == RMQ_CONSUME_NOT_RUN)
        rmq__buf_appendf(&body, "\"remark\":\"the consumer is shutting down\",");
    else if (b->handler_error)
        rmq__buf_appendf(&body, "\"remark\":\"the handler raised an error (see the consumer log)\",");
    rmq__buf_appendf(&body, "\"spentTimeMills\":%" PRId64 "}", rmq__now_ms() - d->start_ms);
    c->hops->batch_release(b);
    rmq__c_reply_body(d->conn, &d->req, &body);
    rmq__buf_free(&body);
    rmq__conn_release(d->conn);
    rmq__msg_release(cb->msgs[0]);
    rmq__msgset_release(d->set);
    free(d);
    free(cb);
}

void rmq__direct_request(rmq_conn_t *conn, rmq_cmd_t *req, void *ud)
{
    rmq_consumer_t *c = ud;
    if (!rmq__c_group_is_ours(c, conn, req, "consumerGroup")) return;
    if (c->state != RMQ_CLIENT_RUNNING || !c->pool) {
        rmq__c_reply_error(conn, req, RMQ_RESP_SYSTEM_ERROR, "the consumer is not running");
        return;
    }
    char err[256] = "";
    rmq_msgset_t *set = NULL;
    int rc = req->body ? rmq__msgset_decode(req->frame, req->body, req->body_len,
                                            rmq__cmd_ext(req, "brokerName"), 0, 0, &set, err,
                                            sizeof(err))
                       : RMQ_ERR_BAD_MESSAGE;
    if (!set || set->n < 1) {
        char remark[300];
        snprintf(remark, sizeof(remark), "cannot decode the message: %s",
                 *err ? err : rmq_err_str(rc));
        if (set) rmq__msgset_release(set);
        rmq__c_reply_error(conn, req, RMQ_RESP_SYSTEM_ERROR, remark);
        return;
    }
    for (int i = 1; i < set->n; i++) rmq__msg_release(&set->msgs[i]);
    rmq_msg_t *m = &set->msgs[0];
    rmq__msg_restore_retry_topic_for(m, c->retry_topic, c->retry_topic_len);
    rmq__c_strip_namespace(c, m);
    struct rmq_direct *d = rmq__xcalloc(1, sizeof(*d));
    d->conn = rmq__conn_keep(conn);
    d->req.opaque = req->opaque;
    d->req.code = req->code;
    d->req.serialize = req->serialize;
    d->set = set;
    d->start_ms = rmq__now_ms();
    rmq_cbatch_t *cb = rmq__xcalloc(1, sizeof(*cb) + sizeof(rmq_msg_t *));
    cb->msgs[0] = m;
    cb->b.msgs = cb->msgs;
    cb->b.n = 1;
    cb->b.internal = cb;
    cb->b.orderly = c->orderly;
    cb->b.ack_count = 1;
    cb->b.suspend_millis = -1;
    cb->direct = d;
    c->inflight_batches++;
    c->hops->submit(c->pool, &cb->b);
}
