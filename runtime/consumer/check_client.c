/*
 * check_client.c -- CHECK_CLIENT_CONFIG (46) for subscriptions that are not TAG (SQL92):
 * MQClientInstance.checkClientInBroker / MQClientAPIImpl.checkClientInBroker, 4.9.4.
 *
 * Java asks one broker of each non-TAG subscription's topic (findBrokerAddrByTopic) at start,
 * before the first heartbeat, with the body CheckClientRequestBody {"clientId", "group",
 * "subscriptionData"}. A broker without property filtering answers SYSTEM_ERROR "The broker
 * does not support consumer to filter message by SQL92", a bad expression
 * SUBSCRIPTION_PARSE_FAILED, and Java's start() then throws MQClientException ("CODE: 1  DESC:
 * ..."): the consumer never runs. Here the check goes out when the subscription's first route
 * arrives (routes come asynchronously) and that route's heartbeat waits for the answer; a refusal
 * stops the consumer with the broker's message (exit code 1). A transport failure is logged with
 * Java's wording and does not stop it (Java would fail start; a network blip must not end the
 * process): the pulls then show whatever the broker says.
 *
 * Ownership: one allocation per request (consumer + subscription index + what to do next) until
 * its callback.
 * Threads: the loop thread.
 */
#include "consumer_int.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct check_req {
    rmq_consumer_t *c;
    int idx; /* subscription index (subs never move after start) */
    void (*then)(rmq_consumer_t *c); /* after an answer that does not stop the consumer */
} check_req_t;

static void on_check(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    check_req_t *r = ud;
    rmq_consumer_t *c = r->c;
    rmq_csub_t *s = &c->subs[r->idx];
    void (*then)(rmq_consumer_t *c) = r->then;
    free(r);
    s->check_state = RMQ_CHECK_DONE;
    if (c->state != RMQ_CLIENT_RUNNING) return;
    if (err) {
        rmq_log_warn("client",
                     "CHECK_CLIENT_CONFIG for %s failed (%s): Check client in broker error, maybe "
                     "because you use %s to filter message, but server has not been upgraded to "
                     "support! Consuming goes on; the pulls will show what the broker says",
                     s->sd->topic, errmsg, s->sd->expression_type);
    } else if (resp->code != RMQ_RESP_SUCCESS) {
        /* MQClientException(code, remark): "CODE: 1  DESC: ..." and the consumer does not start. */
        rmq_log_error("client",
                      "cannot consume %s: the broker refused the %s subscription \"%s\": CODE: %d  "
                      "DESC: %s (%s)",
                      s->sd->topic, s->sd->expression_type, s->sd->sub_string, resp->code,
                      resp->remark ? resp->remark : "", rmq_err_name(resp->code));
        c->exit_code = RMQ_CONSUMER_EXIT_FAILURE;
        rmq__consumer_stop(c);
        return;
    } else {
        rmq_dbg(RMQ_DBG_REMOTING, "client", "CHECK_CLIENT_CONFIG %s: ok", s->sd->topic);
    }
    then(c);
}

int rmq__check_client_config(rmq_consumer_t *c, rmq_csub_t *s, void (*then)(rmq_consumer_t *c))
{
    if (s->check_state == RMQ_CHECK_PENDING) return 1;
    if (s->check_state == RMQ_CHECK_DONE || !strcmp(s->sd->expression_type, "TAG")) return 0;
    const char *addr = rmq__c_topic_addr(c, s->sd->topic);
    if (!addr) return 0; /* Java: no broker address, no check */
    rmq_buf_t body;
    rmq__buf_init(&body);
    rmq__buf_append(&body, "{\"clientId\":", 12);
    rmq__buf_append_json_str(&body, c->client_id, strlen(c->client_id));
    rmq__buf_append(&body, ",\"group\":", 9);
    rmq__buf_append_json_str(&body, c->group, strlen(c->group));
    rmq__buf_append(&body, ",\"subscriptionData\":", 20);
    rmq__sub_to_json(s->sd, &body);
    rmq__buf_append(&body, "}", 1);
    rmq_cmd_t cmd;
    rmq__cmd_init(&cmd, RMQ_REQ_CHECK_CLIENT_CONFIG, RMQ_SERIALIZE_JSON);
    cmd.body = body.data;
    cmd.body_len = body.len;
    check_req_t *r = rmq__xcalloc(1, sizeof(*r));
    r->c = c;
    r->idx = (int)(s - c->subs);
    r->then = then;
    int rc = rmq__remoting_request(c->rt, addr, &cmd, c->conf->mq_client_api_timeout, on_check, r);
    cmd.body = NULL;
    rmq__cmd_free(&cmd);
    rmq__buf_free(&body);
    if (rc) {
        free(r);
        rmq_log_warn("client", "cannot send CHECK_CLIENT_CONFIG for %s to %s: %s", s->sd->topic,
                     addr, rmq_err_str(rc));
        return 0;
    }
    s->check_state = RMQ_CHECK_PENDING;
    rmq_dbg(RMQ_DBG_REMOTING, "client", "CHECK_CLIENT_CONFIG %s (%s) -> %s", s->sd->topic,
            s->sd->expression_type, addr);
    return 1;
}
