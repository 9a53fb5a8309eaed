/*
 * producer_heartbeat.c -- the heartbeat of a standalone producer: HEART_BEAT with its group in
 * producerDataSet to the masters of the topics it sends to, 1 s after the start and every 30 s
 * (MQClientInstance.startScheduledTask / sendHeartbeatToAllBroker). Consumers send their own
 * heartbeat (client.c), which names the inner producer.
 *
 * Ownership: rmq_producer_hb_t holds copies of its strings and its timer; answers to heartbeats
 * carry no pointer to it, so it can go while some are on the wire.
 * Threads: the producer's loop thread only.
 */
#include "producer_heartbeat.h"

#include "base/codes.h"
#include "base/log.h"
#include "net/dial.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SUB "producer"
#define HB_TIMEOUT_MS 3000 /* mqClientApiTimeout */
#define MAX_BROKERS 64

struct rmq_producer_hb {
    uv_timer_t timer;
    rmq_remoting_t *t;
    rmq_producer_t *p;
    char *body;
    size_t body_len;
    int64_t interval_ms;
    int sent; /* a heartbeat went out */
};

static void hb_done(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    const char *addr = ud;
    if (err)
        rmq_dbg(RMQ_DBG_REMOTING, SUB, "heartbeat to %s failed: %s", addr, errmsg);
    else if (resp->code != RMQ_RESP_SUCCESS)
        rmq_dbg(RMQ_DBG_REMOTING, SUB, "heartbeat to %s: code %d %s", addr, resp->code,
                resp->remark ? resp->remark : "");
    free(ud);
}

static void tick(uv_timer_t *timer)
{
    rmq_producer_hb_t *h = timer->data;
    const char *addrs[MAX_BROKERS];
    int n = rmq__producer_broker_addrs(h->p, addrs, MAX_BROKERS);
    for (int i = 0; i < n; i++) {
        rmq_cmd_t c;
        rmq__cmd_init(&c, RMQ_REQ_HEART_BEAT, RMQ_SERIALIZE_JSON);
        c.body = h->body;
        c.body_len = h->body_len;
        char *ud = rmq__xstrdup(addrs[i]);
        if (rmq__remoting_request(h->t, addrs[i], &c, HB_TIMEOUT_MS, hb_done, ud)) free(ud);
        c.body = NULL;
        c.body_len = 0;
        rmq__cmd_free(&c);
    }
    /* Until a route names a broker, look again after the first delay rather than a whole
     * interval: the Java producer's first heartbeat goes out at start(), ours needs a route. */
    if (n > 0) h->sent = 1;
    uv_timer_start(&h->timer, tick,
                   (uint64_t)(h->sent ? h->interval_ms : RMQ_PRODUCER_HEARTBEAT_DELAY_MS), 0);
}

rmq_producer_hb_t *rmq__producer_hb_start(uv_loop_t *loop, rmq_remoting_t *t, rmq_producer_t *p,
                                          const char *group, const char *client_id,
                                          int64_t interval_ms)
{
    rmq_producer_hb_t *h = rmq__xcalloc(1, sizeof(*h));
    h->t = t;
    h->p = p;
    h->interval_ms = interval_ms > 0 ? interval_ms : RMQ_PRODUCER_HEARTBEAT_MS;
    rmq_buf_t b;
    rmq__buf_init(&b);
    rmq__buf_append(&b, "{\"clientID\":", 12);
    rmq__buf_append_json_str(&b, client_id, strlen(client_id));
    rmq__buf_appendf(&b, ",\"consumerDataSet\":[],\"producerDataSet\":[{\"groupName\":");
    rmq__buf_append_json_str(&b, group, strlen(group));
    rmq__buf_appendf(&b, "},{\"groupName\":\"%s\"}]}", RMQ_PRODUCER_INNER_GROUP);
    h->body = b.data;
    h->body_len = b.len;
    uv_timer_init(loop, &h->timer);
    h->timer.data = h;
    uv_timer_start(&h->timer, tick, RMQ_PRODUCER_HEARTBEAT_DELAY_MS, 0);
    uv_unref((uv_handle_t *)&h->timer);
    return h;
}

static void closed(uv_handle_t *handle)
{
    rmq_producer_hb_t *h = handle->data;
    free(h->body);
    free(h);
}

void rmq__producer_hb_stop(rmq_producer_hb_t *h)
{
    if (!h) return;
    uv_timer_stop(&h->timer);
    uv_close((uv_handle_t *)&h->timer, closed);
}

void rmq__producer_client_id(char *out, size_t size)
{
    char ip[64];
    rmq__local_ip(ip, sizeof(ip));
    snprintf(out, size, "%s@%d", ip, (int)getpid());
}
