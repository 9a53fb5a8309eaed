/*
 * test_devbroker.c -- the development broker driven from C through the remoting transport (a
 * client transport on the test's own loop, real sockets): routes, send, pull with long polling,
 * heartbeat, send back into the retry topic, locks, the control API, the byte cap, and a full
 * stop. Its main use is leak checking of the broker's life cycle: run the binary of an
 * RMQ_SANITIZE=1 build with ASAN_OPTIONS=detect_leaks=1.
 */
#include "base/codes.h"
#include "devbroker/devbroker.h"
#include "protocol/message.h"
#include "net/remoting.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static uv_loop_t loop;
static rmq_remoting_t *client;

typedef struct result {
    int done, err, code;
    rmq_buf_t body;
    char ext[8][2][128];
    int n_ext;
} result_t;

static void on_resp(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    result_t *r = ud;
    r->done = 1;
    r->err = err;
    if (err) return;
    r->code = resp->code;
    if (resp->body_len) rmq__buf_append(&r->body, resp->body, resp->body_len);
    for (int i = 0; i < resp->n_ext && i < 8; i++) {
        snprintf(r->ext[i][0], 128, "%s", resp->ext[i].key);
        snprintf(r->ext[i][1], 128, "%s", resp->ext[i].val);
        r->n_ext = i + 1;
    }
}

static const char *ext_of(const result_t *r, const char *key)
{
    for (int i = 0; i < r->n_ext; i++)
        if (!strcmp(r->ext[i][0], key)) return r->ext[i][1];
    return NULL;
}

static void run_until(result_t *r, int ms)
{
    int64_t dl = rmq__mono_ms() + ms;
    while (!r->done && rmq__mono_ms() < dl)
        uv_run(&loop, UV_RUN_NOWAIT);
}

/* Send cmd to addr and wait for the answer (r must be zeroed; the caller frees r->body). */
static void call(const char *addr, rmq_cmd_t *c, result_t *r, int ms)
{
    memset(r, 0, sizeof(*r));
    rmq__buf_init(&r->body);
    int rc = rmq__remoting_request(client, addr, c, ms, on_resp, r);
    CHECK(rc == 0);
    if (rc == 0) run_until(r, ms + 1000);
    CHECK(r->done);
    rmq__cmd_free(c);
}

static void send_msg(const char *addr, const char *topic, int qid, const char *tags,
                     const char *body, result_t *r)
{
    rmq_cmd_t c;
    rmq__cmd_init(&c, RMQ_REQ_SEND_MESSAGE_V2, RMQ_SERIALIZE_JSON);
    char q[16];
    snprintf(q, sizeof(q), "%d", qid);
    rmq_buf_t props;
    rmq__buf_init(&props);
    rmq__props_append(&props, "WAIT", "true");
    if (tags) rmq__props_append(&props, "TAGS", tags);
    rmq__buf_append_u8(&props, 0);
    rmq__cmd_set_ext(&c, "a", "p");
    rmq__cmd_set_ext(&c, "b", topic);
    rmq__cmd_set_ext(&c, "c", "TBW102");
    rmq__cmd_set_ext(&c, "d", "4");
    rmq__cmd_set_ext(&c, "e", q);
    rmq__cmd_set_ext(&c, "f", "0");
    rmq__cmd_set_ext(&c, "g", "1");
    rmq__cmd_set_ext(&c, "h", "0");
    rmq__cmd_set_ext(&c, "i", props.data);
    c.body = body;
    c.body_len = strlen(body);
    call(addr, &c, r, 3000);
    rmq__buf_free(&props);
}

static void pull(const char *addr, const char *group, const char *topic, int qid, int64_t off,
                 int sys_flag, const char *sub, int64_t suspend, result_t *r, int wait_ms)
{
    rmq_cmd_t c;
    rmq__cmd_init(&c, RMQ_REQ_PULL_MESSAGE, RMQ_SERIALIZE_ROCKETMQ);
    rmq__cmd_set_ext(&c, "consumerGroup", group);
    rmq__cmd_set_ext(&c, "topic", topic);
    rmq__cmd_set_ext_i64(&c, "queueId", qid);
    rmq__cmd_set_ext_i64(&c, "queueOffset", off);
    rmq__cmd_set_ext_i64(&c, "maxMsgNums", 32);
    rmq__cmd_set_ext_i64(&c, "sysFlag", sys_flag);
    rmq__cmd_set_ext_i64(&c, "commitOffset", 0);
    rmq__cmd_set_ext_i64(&c, "suspendTimeoutMillis", suspend);
    rmq__cmd_set_ext_i64(&c, "subVersion", 0);
    if (sub) rmq__cmd_set_ext(&c, "subscription", sub);
    rmq__cmd_set_ext(&c, "expressionType", "TAG");
    memset(r, 0, sizeof(*r));
    rmq__buf_init(&r->body);
    CHECK(rmq__remoting_request(client, addr, &c, 30000, on_resp, r) == 0);
    rmq__cmd_free(&c);
    if (wait_ms) run_until(r, wait_ms);
}

static void test_basics(void)
{
    char err[256];
    rmq_devbroker_t *db =
        rmq_devbroker_start("--brokers 2 --topic T:2 --delay-scale 0.001", err, sizeof(err));
    CHECK(db != NULL);
    if (!db) {
        fprintf(stderr, "start: %s\n", err);
        return;
    }
    const char *ns = rmq_devbroker_addr(db);
    const char *b0 = rmq_devbroker_broker_addr(db, 0);
    result_t r;
    rmq_cmd_t c;

    rmq__cmd_init(&c, RMQ_REQ_GET_ROUTEINFO_BY_TOPIC, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext(&c, "topic", "T");
    call(ns, &c, &r, 3000);
    CHECK(r.code == 0);
    CHECK(r.body.len && memmem(r.body.data, r.body.len, "broker-b", 8) != NULL);
    rmq__buf_free(&r.body);

    /* A long-polling pull woken by a send. */
    result_t p;
    pull(b0, "g", "T", 1, 0, 2 | 4, "*", 20000, &p, 100);
    CHECK(!p.done);
    send_msg(b0, "T", 1, "TagA", "hello", &r);
    CHECK(r.code == 0 && ext_of(&r, "msgId") != NULL);
    rmq__buf_free(&r.body);
    run_until(&p, 5000);
    CHECK(p.done && p.code == 0);
    CHECK(p.body.len > 0 && memmem(p.body.data, p.body.len, "hello", 5) != NULL);
    int64_t phys = p.body.len >= 36 ? (int64_t)rmq__rd64(p.body.data + 28) : -1;
    rmq__buf_free(&p.body);

    /* A heartbeat, then the message goes back to %RETRY%g. */
    rmq__cmd_init(&c, RMQ_REQ_HEART_BEAT, RMQ_SERIALIZE_JSON);
    static const char hb[] =
        "{\"clientID\":\"cid\",\"consumerDataSet\":[{\"consumeFromWhere\":\"CONSUME_FROM_LAST_"
        "OFFSET\","
        "\"consumeType\":\"CONSUME_PASSIVELY\",\"groupName\":\"g\",\"messageModel\":\"CLUSTERING\","
        "\"subscriptionDataSet\":[{\"classFilterMode\":false,\"codeSet\":[2598919],"
        "\"expressionType\":\"TAG\",\"subString\":\"TagA\",\"subVersion\":5,\"tagsSet\":[\"TagA\"],"
        "\"topic\":\"T\"}],\"unitMode\":false}],\"producerDataSet\":[]}";
    c.body = hb;
    c.body_len = sizeof(hb) - 1;
    call(b0, &c, &r, 3000);
    CHECK(r.code == 0);
    rmq__buf_free(&r.body);
    CHECK(rmq_devbroker_group_size(db, 0, "g") == 1);

    rmq__cmd_init(&c, RMQ_REQ_CONSUMER_SEND_MSG_BACK, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext_i64(&c, "offset", phys);
    rmq__cmd_set_ext(&c, "group", "g");
    rmq__cmd_set_ext(&c, "delayLevel", "0");
    rmq__cmd_set_ext(&c, "unitMode", "false");
    call(b0, &c, &r, 3000);
    CHECK(r.code == 0);
    rmq__buf_free(&r.body);
    int64_t dl = rmq__mono_ms() + 5000;
    while (rmq_devbroker_max_offset(db, 0, "%RETRY%g", 0) < 1 && rmq__mono_ms() < dl)
        uv_run(&loop, UV_RUN_NOWAIT);
    CHECK(rmq_devbroker_max_offset(db, 0, "%RETRY%g", 0) == 1);

    /* A pull parked at stop time, a lock, a down/up broker, injected errors. */
    pull(b0, "g", "T", 0, 0, 2, NULL, 20000, &p, 100);
    rmq__cmd_init(&c, RMQ_REQ_LOCK_BATCH_MQ, RMQ_SERIALIZE_JSON);
    static const char lk[] =
        "{\"consumerGroup\":\"g\",\"clientId\":\"cid\",\"mqSet\":[{\"brokerName\":"
        "\"broker-a\",\"queueId\":0,\"topic\":\"T\"}]}";
    c.body = lk;
    c.body_len = sizeof(lk) - 1;
    call(b0, &c, &r, 3000);
    CHECK(r.code == 0 && r.body.len && memmem(r.body.data, r.body.len, "lockOKMQSet", 11));
    rmq__buf_free(&r.body);
    CHECK(rmq_devbroker_push_error(db, RMQ_DEVBROKER_NAMESRV, RMQ_REQ_GET_ROUTEINFO_BY_TOPIC,
                                   RMQ_RESP_SYSTEM_BUSY, 1) == 0);
    rmq__cmd_init(&c, RMQ_REQ_GET_ROUTEINFO_BY_TOPIC, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext(&c, "topic", "T");
    call(ns, &c, &r, 3000);
    CHECK(r.code == RMQ_RESP_SYSTEM_BUSY);
    rmq__buf_free(&r.body);
    CHECK(rmq_devbroker_set_down(db, 1, 1) == 0);
    CHECK(rmq_devbroker_set_down(db, 1, 0) == 0);
    CHECK(rmq_devbroker_set_latency(db, RMQ_DEVBROKER_ALL, 0, 5) == 0);
    CHECK(rmq_devbroker_count(db, RMQ_DEVBROKER_ALL, RMQ_REQ_PULL_MESSAGE) == 2);
    rmq_devbroker_stop(db);
    run_until(&p, 5000);
    CHECK(p.done);
    rmq__buf_free(&p.body);
}

static void test_cap(void)
{
    char err[256];
    rmq_devbroker_t *db = rmq_devbroker_start("--max-bytes 4096 --topic C:1", err, sizeof(err));
    CHECK(db != NULL);
    if (!db) return;
    char body[400];
    memset(body, 'x', sizeof(body));
    for (int i = 0; i < 50; i++)
        CHECK(rmq_devbroker_produce(db, 0, "C", 0, "t", "k", body, sizeof(body)) == i);
    CHECK(rmq_devbroker_max_offset(db, 0, "C", 0) == 50);
    int64_t min = rmq_devbroker_min_offset(db, 0, "C", 0);
    CHECK(min > 35 && min < 50);
    rmq_devbroker_stop(db);
}

int main(void)
{
    uv_loop_init(&loop);
    rmq_log_set_level(RMQ_LOG_ERROR);
    rmq_remoting_opts_t o;
    memset(&o, 0, sizeof(o));
    o.loop = &loop;
    char err[256];
    if (rmq__remoting_new(&o, &client, err, sizeof(err))) {
        fprintf(stderr, "remoting: %s\n", err);
        return 1;
    }
    test_basics();
    test_cap();
    rmq__remoting_destroy(client, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return test_report("test_devbroker");
}
