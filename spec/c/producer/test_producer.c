/*
 * test_producer.c -- the producer over real sockets against a scripted name server and two
 * scripted brokers built on the remoting transport (all on one loop driven by the test): route
 * lookup and the TBW102 fallback, SEND_MESSAGE_V2 header and properties, round robin, retries
 * with lastBrokerName avoidance, non-retryable codes, compression, the %RETRY% re-send
 * (rmq__producer_send_retry), the send window, validation and destroy.
 */
#include "base/codes.h"
#include "protocol/message.h"
#include "producer/producer.h"
#include "net/remoting.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "test_loop.h"

/* ---- the scripted cluster ------------------------------------------------------------------- */

#define MAX_REC 256

typedef struct sent_rec {
    int broker;
    char ext[16][512]; /* a..m by letter index */
    int has[16];
    char *body;
    size_t body_len;
    rmq_rbuf_t *frame; /* the whole request frame as received */
} sent_rec_t;

typedef struct cluster {
    rmq_remoting_t *ns;
    rmq_remoting_t *br[2];
    char ns_addr[64], br_addr[2][64];
    char route_topics[64][64]; /* topics asked for, in order */
    int n_route;
    sent_rec_t rec[MAX_REC];
    int n_rec;
    int faults[2][8]; /* per broker: response codes to answer next (0 = none) */
    int n_faults[2];
    int64_t offsets[2];
    int route_mode; /* Known* topics: 0 both brokers, 1 broker-b only, 2 not exist */
    int hold;       /* keep SEND requests unanswered */
    rmq_conn_t *held_conn[MAX_REC];
    rmq_cmd_t held_resp[MAX_REC];
    int n_held;
} cluster_t;

static cluster_t cl;

static void h_route(rmq_conn_t *c, rmq_cmd_t *req, void *ud)
{
    const char *topic = rmq__cmd_ext(req, "topic");
    if (cl.n_route < 64) snprintf(cl.route_topics[cl.n_route++], 64, "%s", topic ? topic : "");
    rmq_cmd_t resp;
    char body[1024];
    if (topic && !strcmp(topic, "TBW102")) {
        /* Only broker-a carries the auto-create key topic, with 8 queues. */
        snprintf(body, sizeof(body),
                 "{\"brokerDatas\":[{\"brokerAddrs\":{\"0\":\"%s\"},\"brokerName\":\"broker-a\","
                 "\"cluster\":\"C\"}],\"filterServerTable\":{},\"queueDatas\":[{\"brokerName\":"
                 "\"broker-a\",\"perm\":7,\"readQueueNums\":8,\"topicSysFlag\":0,"
                 "\"writeQueueNums\":8}]}",
                 cl.br_addr[0]);
    } else if (topic && !strcmp(topic, "OrderHuge")) {
        /* orderTopicConf counts past any real broker's: 2^31 - 1, and past an int. */
        snprintf(body, sizeof(body),
                 "{\"brokerDatas\":[{\"brokerAddrs\":{\"0\":\"%s\"},\"brokerName\":\"broker-a\","
                 "\"cluster\":\"C\"},{\"brokerAddrs\":{\"0\":\"%s\"},\"brokerName\":\"broker-b\","
                 "\"cluster\":\"C\"}],\"filterServerTable\":{},\"orderTopicConf\":"
                 "\"broker-a:2147483647;broker-b:2;broker-a:99999999999\",\"queueDatas\":["
                 "{\"brokerName\":\"broker-a\",\"perm\":6,\"readQueueNums\":4,\"topicSysFlag\":0,"
                 "\"writeQueueNums\":4},{\"brokerName\":\"broker-b\",\"perm\":6,"
                 "\"readQueueNums\":4,\"topicSysFlag\":0,\"writeQueueNums\":4}]}",
                 cl.br_addr[0], cl.br_addr[1]);
    } else if (topic && !strncmp(topic, "Known", 5) && cl.route_mode == 1) {
        snprintf(body, sizeof(body),
                 "{\"brokerDatas\":[{\"brokerAddrs\":{\"0\":\"%s\"},\"brokerName\":\"broker-b\","
                 "\"cluster\":\"C\"}],\"filterServerTable\":{},\"queueDatas\":[{\"brokerName\":"
                 "\"broker-b\",\"perm\":6,\"readQueueNums\":2,\"topicSysFlag\":0,"
                 "\"writeQueueNums\":2}]}",
                 cl.br_addr[1]);
    } else if (topic && (!strncmp(topic, "Known", 5) || !strcmp(topic, "CapTopic")) &&
               cl.route_mode == 0) {
        /* broker-b listed first: the producer sorts by brokerName. broker-c has no master. */
        snprintf(body, sizeof(body),
                 "{\"brokerDatas\":[{\"brokerAddrs\":{\"0\":\"%s\"},\"brokerName\":\"broker-b\","
                 "\"cluster\":\"C\"},{\"brokerAddrs\":{\"0\":\"%s\"},\"brokerName\":\"broker-a\","
                 "\"cluster\":\"C\"},{\"brokerAddrs\":{\"1\":\"127.0.0.1:1\"},\"brokerName\":"
                 "\"broker-c\",\"cluster\":\"C\"}],\"filterServerTable\":{},\"queueDatas\":["
                 "{\"brokerName\":\"broker-b\",\"perm\":6,\"readQueueNums\":4,\"topicSysFlag\":0,"
                 "\"writeQueueNums\":4},{\"brokerName\":\"broker-a\",\"perm\":6,"
                 "\"readQueueNums\":4,\"topicSysFlag\":0,\"writeQueueNums\":4},{\"brokerName\":"
                 "\"broker-c\",\"perm\":6,\"readQueueNums\":4,\"topicSysFlag\":0,"
                 "\"writeQueueNums\":4}]}",
                 cl.br_addr[1], cl.br_addr[0]);
    } else {
        rmq__cmd_init_response(&resp, req, RMQ_RESP_TOPIC_NOT_EXIST,
                               "No topic route info in name server for the topic");
        rmq__conn_reply(c, &resp);
        rmq__cmd_free(&resp);
        return;
    }
    rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, NULL);
    resp.body = body;
    resp.body_len = strlen(body);
    rmq__conn_reply(c, &resp);
    rmq__cmd_free(&resp);
}

static void h_send(rmq_conn_t *c, rmq_cmd_t *req, void *ud)
{
    int b = (int)(intptr_t)ud;
    if (cl.n_rec < MAX_REC) {
        sent_rec_t *r = &cl.rec[cl.n_rec++];
        r->broker = b;
        for (int i = 0; i < 13; i++) {
            char k[2] = {(char)('a' + i), 0};
            const char *v = rmq__cmd_ext(req, k);
            r->has[i] = v != NULL;
            if (v) snprintf(r->ext[i], sizeof(r->ext[i]), "%s", v);
        }
        r->body = malloc(req->body_len + 1);
        memcpy(r->body, req->body, req->body_len);
        r->body_len = req->body_len;
        r->frame = req->frame ? rmq__rbuf_keep(req->frame) : NULL;
    }
    rmq_cmd_t resp;
    if (cl.n_faults[b] > 0) {
        int code = cl.faults[b][0];
        memmove(cl.faults[b], cl.faults[b] + 1, sizeof(int) * 7);
        cl.n_faults[b]--;
        rmq__cmd_init_response(&resp, req, code, "scripted error");
        rmq__conn_reply(c, &resp);
        rmq__cmd_free(&resp);
        return;
    }
    rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, NULL);
    char mid[64];
    snprintf(mid, sizeof(mid), "7F00000100002A9F%016llX", (unsigned long long)cl.offsets[b] * 100);
    rmq__cmd_set_ext(&resp, "msgId", mid);
    rmq__cmd_set_ext(&resp, "queueId", rmq__cmd_ext(req, "e"));
    rmq__cmd_set_ext_i64(&resp, "queueOffset", cl.offsets[b]++);
    if (cl.hold) {
        cl.held_conn[cl.n_held] = rmq__conn_keep(c);
        cl.held_resp[cl.n_held++] = resp;
        return;
    }
    rmq__conn_reply(c, &resp);
    rmq__cmd_free(&resp);
}

static void release_held(void)
{
    for (int i = 0; i < cl.n_held; i++) {
        rmq__conn_reply(cl.held_conn[i], &cl.held_resp[i]);
        rmq__cmd_free(&cl.held_resp[i]);
        rmq__conn_release(cl.held_conn[i]);
    }
    cl.n_held = 0;
}

static rmq_remoting_t *server(char *addr)
{
    rmq_remoting_opts_t o;
    memset(&o, 0, sizeof(o));
    o.loop = loop;
    o.name = "fake";
    rmq_remoting_t *t = NULL;
    char err[128];
    CHECK(rmq__remoting_new(&o, &t, err, sizeof(err)) == 0);
    CHECK(rmq__remoting_listen(t, "127.0.0.1", 0, err, sizeof(err)) == 0);
    snprintf(addr, 64, "127.0.0.1:%d", rmq__remoting_port(t));
    return t;
}

static void cluster_start(void)
{
    memset(&cl, 0, sizeof(cl));
    cl.ns = server(cl.ns_addr);
    rmq__remoting_set_handler(cl.ns, RMQ_REQ_GET_ROUTEINFO_BY_TOPIC, h_route, NULL);
    for (int b = 0; b < 2; b++) {
        cl.br[b] = server(cl.br_addr[b]);
        rmq__remoting_set_handler(cl.br[b], RMQ_REQ_SEND_MESSAGE_V2, h_send, (void *)(intptr_t)b);
    }
}

static void cluster_reset(void)
{
    for (int i = 0; i < cl.n_rec; i++) {
        free(cl.rec[i].body);
        if (cl.rec[i].frame) rmq__rbuf_release(cl.rec[i].frame);
    }
    cl.n_rec = 0;
    cl.n_route = 0;
    memset(cl.n_faults, 0, sizeof(cl.n_faults));
}

static void cluster_stop(void)
{
    cluster_reset();
    rmq__remoting_destroy(cl.ns, NULL, NULL);
    rmq__remoting_destroy(cl.br[0], NULL, NULL);
    rmq__remoting_destroy(cl.br[1], NULL, NULL);
    run_for(50);
}

static const char *rec_ext(int i, char letter)
{
    return cl.rec[i].has[letter - 'a'] ? cl.rec[i].ext[letter - 'a'] : NULL;
}

/* Property value from a recorded properties string, copied into a static buffer. */
static const char *prop(const char *props, const char *key)
{
    static char v[256];
    uint32_t vl = 0;
    const char *p = rmq__props_find(props, strlen(props), key, strlen(key), &vl);
    if (!p) return NULL;
    snprintf(v, sizeof(v), "%.*s", (int)vl, p);
    return v;
}

/* Each key=value in want (separated by ';') is a property in props with that value. */
static void check_props(const char *props, const char *want)
{
    char buf[512], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", want);
    for (char *kv = strtok_r(buf, ";", &save); kv; kv = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(kv, '=');
        *eq = '\0';
        const char *got = prop(props, kv);
        CHECKF(got && !strcmp(got, eq + 1), "property %s is '%s', not '%s'", kv,
               got ? got : "(none)", eq + 1);
    }
}

/* ---- the client side ---------------------------------------------------------------------- */

typedef struct outcome {
    int done;
    int err;
    rmq_send_result_t res;
    char broker[64];
    char errmsg[512];
} outcome_t;

static void on_done(void *ud, int err, const rmq_send_result_t *res, const char *errmsg)
{
    outcome_t *o = ud;
    o->done++;
    o->err = err;
    if (res) {
        o->res = *res;
        snprintf(o->broker, sizeof(o->broker), "%s", res->broker_name);
    }
    snprintf(o->errmsg, sizeof(o->errmsg), "%s", errmsg ? errmsg : "");
}

static int count_done(const outcome_t *o, int n)
{
    int d = 0;
    for (int i = 0; i < n; i++)
        d += o[i].done;
    return d;
}

static rmq_remoting_t *client;

static rmq_producer_t *producer(const char *namesrv, rmq_producer_opts_t *po)
{
    rmq_remoting_opts_t o;
    memset(&o, 0, sizeof(o));
    o.loop = loop;
    char err[128];
    CHECK(rmq__remoting_new(&o, &client, err, sizeof(err)) == 0);
    CHECK(rmq__remoting_set_namesrv(client, namesrv, err, sizeof(err)) == 0);
    rmq_producer_t *p = NULL;
    CHECK(rmq__producer_new(loop, client, po, &p, err, sizeof(err)) == 0);
    return p;
}

static void producer_done(rmq_producer_t *p)
{
    rmq__producer_destroy(p);
    rmq__remoting_destroy(client, NULL, NULL);
    run_for(20);
}

static int send_simple(rmq_producer_t *p, const char *topic, const char *body, outcome_t *o)
{
    rmq_send_msg_t m = {.topic = topic, .body = body, .body_len = strlen(body)};
    char err[128];
    return rmq__producer_send(p, &m, on_done, o, err, sizeof(err));
}

/* One message sent; returns when it is done, within ms (scaled). */
static void send_wait(rmq_producer_t *p, const char *topic, const char *body, outcome_t *o,
                      int ms)
{
    CHECK(send_simple(p, topic, body, o) == 0);
    WAIT_UNTIL(o->done == 1, ms);
}

/* Each broker answers its next n sends (at most 8) with code. */
static void fail_next(int code, int n)
{
    for (int b = 0; b < 2; b++) {
        for (int i = 0; i < n; i++)
            cl.faults[b][i] = code;
        cl.n_faults[b] = n;
    }
}

/* On the reset cluster whose brokers fail their next n sends with code, one send of body to
 * KnownR (outcome in o): it fails with code after attempts sends. */
static void send_failing(rmq_producer_t *p, int code, int n, const char *body, outcome_t *o,
                         int attempts)
{
    cluster_reset();
    fail_next(code, n);
    memset(o, 0, sizeof(*o));
    send_wait(p, "KnownR", body, o, 3000);
    CHECK(o->err == code);
    CHECK(cl.n_rec == attempts);
}

/* The cluster reset and a producer on it with the default options. */
static rmq_producer_t *fresh_producer(void)
{
    cluster_reset();
    return producer(cl.ns_addr, NULL);
}

/* The queue id the i-th recorded send went to; CHECKs that it is below nq. Returns -1 when it is
 * not. */
static int rec_queue(int i, int nq)
{
    int q = atoi(rec_ext(i, 'e'));
    CHECK(q >= 0 && q < nq);
    return q >= 0 && q < nq ? q : -1;
}

/* n messages with body "m" sent to topic, their outcomes o[0..n-1] (cleared first); returns when
 * all are done. */
static void send_all(rmq_producer_t *p, const char *topic, outcome_t *o, int n)
{
    memset(o, 0, sizeof(*o) * (size_t)n);
    for (int i = 0; i < n; i++)
        CHECK(send_simple(p, topic, "m", &o[i]) == 0);
    WAIT_UNTIL(count_done(o, n) == n, 3000);
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void test_send_header_and_props(void)
{
    rmq_producer_t *p = fresh_producer();
    rmq_prop_t props[] = {{"color", "red"}, {"n", "1"}, {"n", "2"}, {"gone", "x"}, {"gone", NULL}};
    rmq_send_msg_t m = {.topic = "KnownA",
                        .body = "hello",
                        .body_len = 5,
                        .flag = 7,
                        .tags = "TagA",
                        .keys = "k1 k2",
                        .delay_level = 3,
                        .props = props,
                        .n_props = 5};
    outcome_t o = {0};
    char err[128];
    CHECK(rmq__producer_send(p, &m, on_done, &o, err, sizeof(err)) == 0);
    CHECK(o.done == 0); /* never from inside the call */
    CHECK(rmq__producer_outstanding(p) == 1);
    WAIT_UNTIL(o.done == 1, 3000);
    CHECK(o.err == 0);
    CHECK(rmq__producer_outstanding(p) == 0);
    CHECK(cl.n_route == 1 && !strcmp(cl.route_topics[0], "KnownA"));
    CHECK(cl.n_rec == 1);
    if (cl.n_rec == 1) {
        CHECK(!strcmp(rec_ext(0, 'a'), "DEFAULT_PRODUCER"));
        CHECK(!strcmp(rec_ext(0, 'b'), "KnownA"));
        CHECK(!strcmp(rec_ext(0, 'c'), "TBW102"));
        CHECK(!strcmp(rec_ext(0, 'd'), "4"));
        CHECK(!strcmp(rec_ext(0, 'f'), "0"));
        CHECK(llabs(atoll(rec_ext(0, 'g')) - rmq__now_ms()) < 60000);
        CHECK(!strcmp(rec_ext(0, 'h'), "7"));
        CHECK(!strcmp(rec_ext(0, 'j'), "0"));
        CHECK(!strcmp(rec_ext(0, 'k'), "false"));
        CHECK(rec_ext(0, 'l') == NULL);
        CHECK(!strcmp(rec_ext(0, 'm'), "false"));
        const char *pr = rec_ext(0, 'i');
        check_props(pr, "TAGS=TagA;KEYS=k1 k2;DELAY=3;WAIT=true;color=red;n=2");
        CHECK(prop(pr, "gone") == NULL);
        CHECK(strlen(prop(pr, "UNIQ_KEY")) == 32);
        CHECK(!strcmp(prop(pr, "UNIQ_KEY"), o.res.msg_id));
        CHECK(pr[strlen(pr) - 1] != '\002');
        CHECK(cl.rec[0].body_len == 5 && !memcmp(cl.rec[0].body, "hello", 5));
        CHECK(o.res.status == RMQ_SEND_OK);
        CHECK(o.res.queue_offset == cl.offsets[cl.rec[0].broker] - 1);
        CHECK(o.res.queue_id == atoi(rec_ext(0, 'e')));
        CHECK(strlen(o.res.offset_msg_id) == 32);
        CHECK(!strcmp(o.broker, cl.rec[0].broker ? "broker-b" : "broker-a"));
        CHECK(o.res.attempts == 1);
    }
    /* A given UNIQ_KEY is kept. */
    rmq_prop_t up[] = {{"UNIQ_KEY", "ABCDEF"}};
    rmq_send_msg_t m2 = {.topic = "KnownA", .body = "x", .body_len = 1, .props = up, .n_props = 1};
    outcome_t o2 = {0};
    CHECK(rmq__producer_send(p, &m2, on_done, &o2, err, sizeof(err)) == 0);
    WAIT_UNTIL(o2.done == 1, 3000);
    CHECK(!strcmp(o2.res.msg_id, "ABCDEF"));
    CHECK(cl.n_route == 1); /* the route is cached */
    producer_done(p);
}

static void test_round_robin(void)
{
    rmq_producer_t *p = fresh_producer();
    outcome_t o[16];
    send_all(p, "KnownRR", o, 16);
    int per[2][4] = {{0}};
    for (int i = 0; i < cl.n_rec; i++) {
        int q = rec_queue(i, 4);
        if (q >= 0) per[cl.rec[i].broker][q]++;
    }
    /* 8 writable master queues (broker-c has no master), 16 sends: each queue twice. */
    for (int b = 0; b < 2; b++)
        for (int q = 0; q < 4; q++)
            CHECK(per[b][q] == 2);
    producer_done(p);
}

/* An orderTopicConf entry whose queue count is past RMQ_ROUTE_MAX_QUEUE_NUMS (or not an int) is
 * left out with an error: the other entries are published to, nothing is allocated by it. */
static void test_order_conf_huge_count(void)
{
    rmq_producer_t *p = fresh_producer();
    outcome_t o[4];
    send_all(p, "OrderHuge", o, 4);
    int per[2] = {0};
    for (int i = 0; i < 4; i++) CHECKF(o[i].err == 0, "%s", o[i].errmsg);
    for (int i = 0; i < cl.n_rec; i++) {
        CHECK(cl.rec[i].broker == 1);
        int q = rec_queue(i, 2);
        if (q >= 0) per[q]++;
    }
    CHECK(cl.n_rec == 4 && per[0] == 2 && per[1] == 2);
    producer_done(p);
}

static void test_auto_create_fallback(void)
{
    rmq_producer_t *p = fresh_producer();
    outcome_t o[8];
    send_all(p, "NewTopic", o, 8);
    CHECK(cl.n_route == 2);
    CHECK(!strcmp(cl.route_topics[0], "NewTopic"));
    CHECK(!strcmp(cl.route_topics[1], "TBW102"));
    int per[8] = {0};
    for (int i = 0; i < cl.n_rec; i++) {
        CHECK(o[i].err == 0);
        CHECK(cl.rec[i].broker == 0);
        CHECK(!strcmp(rec_ext(i, 'b'), "NewTopic"));
        int q = rec_queue(i, 4); /* min(defaultTopicQueueNums 4, 8) */
        if (q >= 0) per[q]++;
    }
    for (int q = 0; q < 4; q++)
        CHECK(per[q] == 2);
    producer_done(p);
}

static void test_retry(void)
{
    rmq_producer_t *p = fresh_producer();
    /* One SYSTEM_ERROR on each broker: X fails, Y (not X) fails, X again succeeds. */
    fail_next(RMQ_RESP_SYSTEM_ERROR, 1);
    outcome_t o = {0};
    send_wait(p, "KnownR", "retry", &o, 3000);
    CHECK(o.err == 0);
    CHECK(o.res.attempts == 3);
    CHECK(cl.n_rec == 3);
    if (cl.n_rec == 3) {
        CHECK(cl.rec[0].broker != cl.rec[1].broker);
        CHECK(cl.rec[2].broker == cl.rec[0].broker);
        CHECK(!strcmp(rec_ext(0, 'i'), rec_ext(2, 'i'))); /* same UNIQ_KEY */
    }
    /* Three failures: gives up, names the topic, the broker and the code. */
    outcome_t o2;
    send_failing(p, RMQ_RESP_SERVICE_NOT_AVAILABLE, 2, "fail", &o2, 3);
    CHECK(strstr(o2.errmsg, "send to topic KnownR failed after 3 attempts") != NULL);
    CHECK(strstr(o2.errmsg, "SERVICE_NOT_AVAILABLE") != NULL);
    /* Not retryable. */
    outcome_t o3;
    send_failing(p, RMQ_RESP_MESSAGE_ILLEGAL, 1, "illegal", &o3, 1);
    CHECK(strstr(o3.errmsg, "send to topic KnownR failed: broker broker-") != NULL);
    CHECK(strstr(o3.errmsg, "MESSAGE_ILLEGAL: scripted error") != NULL);
    cl.n_faults[0] = cl.n_faults[1] = 0;
    producer_done(p);
}

static int inflate_eq(const char *z, size_t zl, const char *want, size_t wl)
{
    char *out = malloc(wl + 16);
    uLongf ol = wl + 16;
    int rc = uncompress((Bytef *)out, &ol, (const Bytef *)z, zl);
    int ok = rc == Z_OK && ol == wl && !memcmp(out, want, wl);
    free(out);
    return ok;
}

static void test_compression(void)
{
    cluster_reset();
    char *big = malloc(5000);
    for (int i = 0; i < 5000; i++)
        big[i] = (char)('a' + (i * 7 % 13));
    rmq_producer_t *p = producer(cl.ns_addr, NULL);
    outcome_t o[2];
    memset(o, 0, sizeof(o));
    rmq_send_msg_t m = {.topic = "KnownZ", .body = big, .body_len = 5000};
    char err[128];
    CHECK(rmq__producer_send(p, &m, on_done, &o[0], err, sizeof(err)) == 0);
    m.body_len = 4095;
    CHECK(rmq__producer_send(p, &m, on_done, &o[1], err, sizeof(err)) == 0);
    WAIT_UNTIL(o[0].done && o[1].done, 3000);
    CHECK(cl.n_rec == 2);
    for (int i = 0; i < cl.n_rec; i++) {
        if (cl.rec[i].body_len < 4095) {
            CHECK(!strcmp(rec_ext(i, 'f'), "769"));
            CHECK((unsigned char)cl.rec[i].body[0] == 0x78 &&
                  (unsigned char)cl.rec[i].body[1] == 0x5E);
            CHECK(inflate_eq(cl.rec[i].body, cl.rec[i].body_len, big, 5000));
        } else {
            CHECK(!strcmp(rec_ext(i, 'f'), "0"));
            CHECK(cl.rec[i].body_len == 4095);
        }
    }
    producer_done(p);

    cluster_reset();
    rmq_producer_opts_t po = {.retry_times = -1, .compress_over = -1};
    p = producer(cl.ns_addr, &po);
    outcome_t o3 = {0};
    m.body_len = 5000;
    CHECK(rmq__producer_send(p, &m, on_done, &o3, err, sizeof(err)) == 0);
    WAIT_UNTIL(o3.done, 3000);
    CHECK(cl.n_rec == 1 && !strcmp(rec_ext(0, 'f'), "0") && cl.rec[0].body_len == 5000);
    producer_done(p);
    free(big);
}

static void test_send_retry(void)
{
    rmq_producer_t *p = fresh_producer();
    const char raw[] = "TAGS\001TagA\002UNIQ_KEY\001ABC123\002TRAN_MSG\001true\002KEYS\001k9";
    outcome_t o = {0};
    char err[128];
    /* %RETRY%g is unknown to the name server: sent through the TBW102 route. */
    CHECK(rmq__producer_send_retry(p, "g", "OrigTopic", "body", 4, 5, raw, strlen(raw), "MSGID1", 2,
                                   16, on_done, &o, err, sizeof(err)) == 0);
    WAIT_UNTIL(o.done == 1, 3000);
    CHECK(o.err == 0);
    CHECK(cl.n_rec == 1);
    if (cl.n_rec == 1) {
        CHECK(!strcmp(rec_ext(0, 'b'), "%RETRY%g"));
        CHECK(!strcmp(rec_ext(0, 'j'), "3"));
        CHECK(rec_ext(0, 'l') && !strcmp(rec_ext(0, 'l'), "16"));
        CHECK(!strcmp(rec_ext(0, 'h'), "5"));
        CHECK(!strcmp(rec_ext(0, 'f'), "0")); /* TRAN_MSG removed: not a half message */
        const char *pr = rec_ext(0, 'i');
        check_props(pr, "ORIGIN_MESSAGE_ID=MSGID1;RETRY_TOPIC=OrigTopic;DELAY=5;UNIQ_KEY=ABC123;"
                        "TAGS=TagA;KEYS=k9");
        CHECK(prop(pr, "TRAN_MSG") == NULL);
        CHECK(prop(pr, "RECONSUME_TIME") == NULL);
        CHECK(prop(pr, "MAX_RECONSUME_TIMES") == NULL);
        CHECK(!strcmp(o.res.msg_id, "ABC123"));
    }
    /* An existing ORIGIN_MESSAGE_ID is kept. */
    cluster_reset();
    const char raw2[] = "ORIGIN_MESSAGE_ID\001FIRST\002RETRY_TOPIC\001OrigTopic";
    outcome_t o2 = {0};
    CHECK(rmq__producer_send_retry(p, "g", "OrigTopic", "b", 1, 0, raw2, strlen(raw2), "SECOND", 0,
                                   16, on_done, &o2, err, sizeof(err)) == 0);
    WAIT_UNTIL(o2.done == 1, 3000);
    CHECK(cl.n_rec == 1 && !strcmp(prop(rec_ext(0, 'i'), "ORIGIN_MESSAGE_ID"), "FIRST"));
    CHECK(cl.n_rec == 1 && !strcmp(rec_ext(0, 'j'), "1"));
    producer_done(p);
}

static void test_window(void)
{
    cluster_reset();
    rmq_producer_opts_t po = {.retry_times = -1, .max_inflight = 4};
    rmq_producer_t *p = producer(cl.ns_addr, &po);
    outcome_t o[10];
    memset(o, 0, sizeof(o));
    cl.hold = 1;
    for (int i = 0; i < 10; i++)
        CHECK(send_simple(p, "KnownW", "w", &o[i]) == 0);
    CHECK(rmq__producer_outstanding(p) == 10);
    WAIT_UNTIL(cl.n_rec == 4, 3000);
    run_for(100);
    CHECK(cl.n_rec == 4); /* no more than the window on the wire */
    cl.hold = 0;
    release_held();
    WAIT_UNTIL(count_done(o, 10) == 10, 3000);
    CHECK(cl.n_rec == 10);
    for (int i = 0; i < 10; i++)
        CHECK(o[i].err == 0);
    producer_done(p);
}

static void test_route_refresh(void)
{
    cluster_reset();
    cl.route_mode = 0;
    rmq_producer_opts_t po = {.retry_times = -1, .route_poll_ms = 50};
    rmq_producer_t *p = producer(cl.ns_addr, &po);
    outcome_t o[8];
    memset(o, 0, sizeof(o));
    send_wait(p, "KnownRefresh", "r", &o[0], 3000);
    /* The route moves to broker-b only: picked up by the periodic refresh. */
    cl.route_mode = 1;
    int asked = cl.n_route;
    WAIT_UNTIL(cl.n_route >= asked + 2, 3000);
    cluster_reset();
    for (int i = 1; i < 5; i++)
        CHECK(send_simple(p, "KnownRefresh", "r", &o[i]) == 0);
    WAIT_UNTIL(count_done(o + 1, 4) == 4, 3000);
    CHECK(cl.n_rec == 4);
    for (int i = 0; i < cl.n_rec; i++) {
        CHECK(cl.rec[i].broker == 1);
        CHECK(atoi(rec_ext(i, 'e')) < 2);
    }
    /* The name server forgets the topic: the producer keeps the route it has. */
    cl.route_mode = 2;
    asked = cl.n_route;
    WAIT_UNTIL(cl.n_route >= asked + 2, 3000);
    cluster_reset();
    send_wait(p, "KnownRefresh", "r", &o[5], 3000);
    CHECK(o[5].err == 0 && cl.n_rec == 1 && cl.rec[0].broker == 1);
    cl.route_mode = 0;
    producer_done(p);
}

static void test_validation_and_destroy(void)
{
    char err[160];
    /* The trace topic is a system topic a producer may send to (the broker decides). */
    rmq_producer_t *tp = fresh_producer();
    outcome_t to = {0};
    rmq_send_msg_t tm = {.topic = "RMQ_SYS_TRACE_TOPIC", .body = "x", .body_len = 1};
    err[0] = '\0';
    CHECKF(rmq__producer_send(tp, &tm, on_done, &to, err, sizeof(err)) == 0, "%s", err);
    rmq__producer_destroy(tp);
    CHECK(to.done == 1 && to.err == RMQ_ERR_DESTROYED);
    rmq__remoting_destroy(client, NULL, NULL);
    run_for(20);

    rmq_producer_t *p = fresh_producer();
    outcome_t o = {0};
    rmq_send_msg_t m = {.topic = "bad topic", .body = "x", .body_len = 1};
    CHECK(rmq__producer_send(p, &m, on_done, &o, err, sizeof(err)) == RMQ_ERR_INVALID);
    CHECK(strstr(err, "illegal characters") != NULL);
    /* Validators.checkMessage refuses TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET only; the
     * other system topics (the trace topic of enable_msg_trace) go to the broker. */
    m.topic = "SCHEDULE_TOPIC_XXXX";
    CHECK(rmq__producer_send(p, &m, on_done, &o, err, sizeof(err)) == RMQ_ERR_INVALID);
    CHECK(strstr(err, "sending message to topic [SCHEDULE_TOPIC_XXXX] is forbidden") != NULL);
    m.topic = "OFFSET_MOVED_EVENT"; /* the last of NOT_ALLOWED_SEND_TOPIC_SET */
    CHECK(rmq__producer_send(p, &m, on_done, &o, err, sizeof(err)) == RMQ_ERR_INVALID);
    CHECK(strstr(err, "is forbidden") != NULL);
    m.topic = "Fine";
    m.body_len = 0;
    CHECK(rmq__producer_send(p, &m, on_done, &o, err, sizeof(err)) == RMQ_ERR_INVALID);
    CHECK(strstr(err, "body length is zero") != NULL);
    m.body_len = RMQ_PRODUCER_MAX_MESSAGE_SIZE + 1;
    CHECK(rmq__producer_send(p, &m, on_done, &o, err, sizeof(err)) == RMQ_ERR_INVALID);
    rmq_prop_t bad[] = {{"k", "a\001b"}};
    rmq_send_msg_t m2 = {.topic = "Fine", .body = "x", .body_len = 1, .props = bad, .n_props = 1};
    CHECK(rmq__producer_send(p, &m2, on_done, &o, err, sizeof(err)) == RMQ_ERR_INVALID);
    run_for(20);
    CHECK(o.done == 0);

    /* Destroy with sends waiting and on the wire: each callback runs once, DESTROYED. */
    cl.hold = 1;
    outcome_t w[3];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 3; i++)
        CHECK(send_simple(p, "KnownD", "d", &w[i]) == 0);
    WAIT_UNTIL(cl.n_rec == 3, 3000);
    outcome_t q = {0};
    CHECK(send_simple(p, "KnownOther", "d", &q) == 0); /* waits for its route */
    rmq__producer_destroy(p);
    for (int i = 0; i < 3; i++)
        CHECK(w[i].done == 1 && w[i].err == RMQ_ERR_DESTROYED);
    CHECK(q.done == 1 && q.err == RMQ_ERR_DESTROYED);
    cl.hold = 0;
    release_held(); /* responses to an orphaned producer are dropped */
    run_for(50);
    for (int i = 0; i < 3; i++)
        CHECK(w[i].done == 1);
    rmq__remoting_destroy(client, NULL, NULL);
    run_for(20);
}

static void test_no_name_server(void)
{
    rmq_producer_t *p = producer("127.0.0.1:1", NULL);
    outcome_t o = {0};
    send_wait(p, "Anything", "x", &o, 5000);
    CHECK(o.err != 0);
    CHECK(strstr(o.errmsg, "send to topic Anything failed: no route info for the topic") != NULL);
    CHECK(strstr(o.errmsg, "127.0.0.1:1") != NULL);
    producer_done(p);
}

static rmq_rbuf_t *read_frame(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    rmq_rbuf_t *rb = rmq__rbuf_new((size_t)n);
    if (fread(rb->data, 1, (size_t)n, f) != (size_t)n) {
        rmq__rbuf_release(rb);
        rb = NULL;
    }
    fclose(f);
    return rb;
}

/* Properties strings equal as maps (Java writes them in HashMap order), except UNIQ_KEY. */
static int props_same(const char *a, const char *b)
{
    static const char *const keys[] = {"KEYS", "WAIT", "TAGS", "DELAY"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        uint32_t al = 0, bl = 0;
        const char *av = rmq__props_find(a, strlen(a), keys[i], strlen(keys[i]), &al);
        const char *bv = rmq__props_find(b, strlen(b), keys[i], strlen(keys[i]), &bl);
        if (!av != !bv || al != bl || (av && memcmp(av, bv, al))) return 0;
    }
    int na = 1, nb = 1;
    for (const char *p = a; *p; p++)
        na += *p == '\002';
    for (const char *p = b; *p; p++)
        nb += *p == '\002';
    uint32_t ul = 0;
    return na == nb && rmq__props_find(a, strlen(a), "UNIQ_KEY", 8, &ul) && ul == 32;
}

/* The SEND_MESSAGE_V2 request of the Java 4.9.4 producer (wire capture) and ours for the same
 * message: same code, version, serialize type, extFields and values (but the born timestamp,
 * the queue and the UNIQ_KEY value), same body bytes. */
static void test_same_as_java(void)
{
    const char *files[] = {
        "spec/fixtures/wire/01_producer_session/0005-310-SEND_MESSAGE_V2.request.bin",
        "spec/fixtures/wire/01_producer_session/0053-310-SEND_MESSAGE_V2.request.bin"};
    for (int k = 0; k < 2; k++) {
        rmq_rbuf_t *rb = read_frame(files[k]);
        CHECK(rb != NULL);
        if (!rb) return;
        rmq_cmd_t java;
        char err[128];
        CHECK(rmq__cmd_decode(rb, &java, err, sizeof(err)) == 0);
        rmq__rbuf_release(rb);
        const char *props = rmq__cmd_ext(&java, "i");
        uint32_t tl = 0, kl = 0;
        const char *tags = rmq__props_find(props, strlen(props), "TAGS", 4, &tl);
        const char *keys = rmq__props_find(props, strlen(props), "KEYS", 4, &kl);
        char tbuf[32], kbuf[32];
        snprintf(tbuf, sizeof(tbuf), "%.*s", (int)tl, tags);
        snprintf(kbuf, sizeof(kbuf), "%.*s", (int)kl, keys);

        cluster_reset();
        rmq_producer_opts_t po = {.retry_times = -1, .group = rmq__cmd_ext(&java, "a")};
        rmq_producer_t *p = producer(cl.ns_addr, &po);
        /* The capture's compressed body is Java's deflate output: send the inflated original. */
        char *body = (char *)java.body;
        size_t body_len = java.body_len;
        char *plain = NULL;
        if (!strcmp(rmq__cmd_ext(&java, "f"), "769")) {
            uLongf pl = 65536;
            plain = malloc(pl);
            CHECK(uncompress((Bytef *)plain, &pl, (const Bytef *)body, body_len) == Z_OK);
            body = plain;
            body_len = pl;
        }
        rmq_send_msg_t m = {.topic = rmq__cmd_ext(&java, "b"),
                            .body = body,
                            .body_len = body_len,
                            .tags = tbuf,
                            .keys = kbuf};
        outcome_t o = {0};
        CHECK(rmq__producer_send(p, &m, on_done, &o, err, sizeof(err)) == 0);
        WAIT_UNTIL(o.done == 1, 3000);
        CHECK(cl.n_rec == 1 && cl.rec[0].frame != NULL);
        if (cl.n_rec == 1 && cl.rec[0].frame) {
            rmq_cmd_t ours;
            CHECK(rmq__cmd_decode(cl.rec[0].frame, &ours, err, sizeof(err)) == 0);
            CHECK(ours.code == java.code && ours.version == java.version);
            CHECK(ours.language == java.language && ours.serialize == java.serialize);
            CHECK(ours.flag == java.flag);
            CHECK(java.n_ext == 12 && ours.n_ext == java.n_ext);
            for (int i = 0; i < java.n_ext; i++) {
                const char *key = java.ext[i].key;
                const char *v = rmq__cmd_ext(&ours, key);
                CHECK(v != NULL);
                if (!v || !strcmp(key, "e") || !strcmp(key, "g")) continue;
                if (!strcmp(key, "i")) {
                    CHECK(props_same(v, java.ext[i].val));
                } else if (strcmp(v, java.ext[i].val)) {
                    fprintf(stderr, "extField %s: ours '%s', Java '%s'\n", key, v, java.ext[i].val);
                    CHECK(!"extField differs from Java's");
                }
            }
            /* Same zlib level: the compressed bytes are identical. */
            CHECK(ours.body_len == java.body_len && !memcmp(ours.body, java.body, java.body_len));
            rmq__cmd_free(&ours);
        }
        free(plain);
        rmq__cmd_free(&java);
        producer_done(p);
    }
}

static void test_name_server_failover(void)
{
    /* A dead name server first in the list (the start index is random): the lookup moves on. */
    char list[160];
    snprintf(list, sizeof(list), "127.0.0.1:1;%s", cl.ns_addr);
    for (int round = 0; round < 3; round++) {
        cluster_reset();
        rmq_producer_t *p = producer(list, NULL);
        outcome_t o = {0};
        send_wait(p, "KnownFailover", "x", &o, 5000);
        CHECK(o.err == 0);
        CHECK(cl.n_rec == 1);
        producer_done(p);
    }
}

int main(void)
{
    test_loop_open("all");
    cluster_start();

    test_send_header_and_props();
    test_round_robin();
    test_auto_create_fallback();
    test_order_conf_huge_count();
    test_retry();
    test_compression();
    test_send_retry();
    test_window();
    test_route_refresh();
    test_validation_and_destroy();
    test_no_name_server();
    test_name_server_failover();
    test_same_as_java();

    cluster_stop();
    test_loop_close();
    return test_report("test_producer");
}
