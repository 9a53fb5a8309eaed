/*
 * devbroker_broker.c -- the broker role of the development broker: SEND_MESSAGE(_V2),
 * PULL_MESSAGE (long polling, tag filtering, PullMessageProcessor's status mapping), consumer
 * offsets, HEART_BEAT and consumer groups (NOTIFY_CONSUMER_IDS_CHANGED, channel expiry),
 * CONSUMER_SEND_MSG_BACK (retry topic, delay levels, DLQ), LOCK/UNLOCK_BATCH_MQ, admin calls
 * relayed to consumers, and REGISTER_BROKER towards a remote name server.
 *
 * PROTOCOL.md 2.3 (per-command rules), 3.3-3.6 (bodies), 4 (stored format), 5.3 (pull),
 * 6.5 (heartbeat/subscription), 6.11 (send back), 9 (%RETRY% / %DLQ%).
 *
 * Ownership: a client record (db_client_t) belongs to its connection (conn ud) from the first
 * HEART_BEAT until the connection closes; groups point at client records and drop them when
 * the connection closes. A parked pull keeps its connection and its request frame.
 * Threads: the broker thread only.
 */
#include "devbroker_int.h"
#include "protocol/fjson.h"
#include "protocol/message.h"
#include "protocol/sql92.h"
#include "protocol/subscription.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#define SYSFLAG_COMMIT 0x1
#define SYSFLAG_SUSPEND 0x2
#define SYSFLAG_SUBSCRIPTION 0x4

#define MAX_TRANSFER_BYTES (256 * 1024) /* maxTransferBytesOnMessageInMemory */
#define MAX_TRANSFER_COUNT 32           /* maxTransferCountOnMessageInMemory */
#define CQ_FILE_ENTRIES 300000          /* entries per consume queue file (6000000 / 20) */
#define VERSION_V3_4_9 121              /* MQVersion.Version.V3_4_9.ordinal() */
#define CALL_CLIENT_TIMEOUT_MS 10000
#define HOLD_CHECK_MS 5000 /* PullRequestHoldService period with long polling */

static const int64_t delay_level_ms[18] = {1000,   5000,   10000,   30000,   60000,   120000,
                                           180000, 240000, 300000,  360000,  420000,  480000,
                                           540000, 600000, 1200000, 1800000, 3600000, 7200000};

/* ---- header fields --------------------------------------------------------------------------- */

typedef struct hdr {
    rmq_conn_t *conn;
    const rmq_cmd_t *req;
    int failed;
} hdr_t;

static void hdr_fail(hdr_t *h, const char *fmt, const char *key)
{
    if (h->failed) return;
    h->failed = 1;
    char msg[256];
    snprintf(msg, sizeof(msg), fmt, key);
    rmq__db_reply_code(h->conn, h->req, RMQ_RESP_SYSTEM_ERROR, msg);
}

static const char *hdr_str(hdr_t *h, const char *key)
{
    const char *v = rmq__cmd_ext(h->req, key);
    if (!v)
        hdr_fail(h,
                 "org.apache.rocketmq.remoting.exception.RemotingCommandException: the "
                 "custom field <%s> is null",
                 key);
    return v;
}

static int64_t hdr_i64(hdr_t *h, const char *key)
{
    int64_t v = 0;
    int rc = rmq__cmd_ext_i64(h->req, key, &v);
    if (rc == RMQ_ERR_NOT_FOUND)
        hdr_fail(h,
                 "org.apache.rocketmq.remoting.exception.RemotingCommandException: the "
                 "custom field <%s> is null",
                 key);
    else if (rc)
        hdr_fail(h, "java.lang.NumberFormatException: bad value of <%s>", key);
    return v;
}

/* Optional number: def when absent. */
static int64_t hdr_opt_i64(hdr_t *h, const char *key, int64_t def, int *present)
{
    int64_t v = def;
    int rc = rmq__cmd_ext_i64(h->req, key, &v);
    if (present) *present = rc == 0;
    if (rc == RMQ_ERR_NOT_FOUND) return def;
    if (rc) hdr_fail(h, "java.lang.NumberFormatException: bad value of <%s>", key);
    return v;
}

static db_broker_t *broker_of(db_node_t *node)
{
    return (db_broker_t *)node;
}

/* ---- offsets --------------------------------------------------------------------------------- */

static void okey(char *key, size_t size, const char *group, const char *topic, int qid)
{
    snprintf(key, size, "%s\001%s\001%d", group, topic, qid);
}

int64_t rmq__db_offset_get(db_broker_t *b, const char *group, const char *topic, int qid)
{
    char key[600];
    okey(key, sizeof(key), group, topic, qid);
    int64_t *v = rmq__dbmap_get(&b->offsets, key);
    return v ? *v : -1;
}

void rmq__db_offset_set(db_broker_t *b, const char *group, const char *topic, int qid, int64_t v)
{
    char key[600];
    okey(key, sizeof(key), group, topic, qid);
    int64_t *p = rmq__dbmap_get(&b->offsets, key);
    if (!p) {
        p = rmq__xmalloc(sizeof(*p));
        rmq__dbmap_put(&b->offsets, key, p);
    }
    *p = v;
    b->offsets_dirty = 1;
}

/* ---- peer address ---------------------------------------------------------------------------- */

static void peer_host(rmq_conn_t *conn, uint8_t *ip, int *ip_len, int32_t *port)
{
    char host[64];
    int p = 0;
    memset(ip, 0, 16);
    *ip_len = 4;
    *port = 0;
    if (rmq__addr_split(rmq__conn_peer(conn), host, sizeof(host), &p)) return;
    *port = p;
    if (inet_pton(AF_INET, host, ip) == 1) return;
    if (inet_pton(AF_INET6, host, ip) == 1) *ip_len = 16;
}

static void offset_msg_id(const db_broker_t *b, int64_t phys, char *out)
{
    rmq__offset_msg_id(b->node.store_ip, 4, b->node.port, phys, out);
}

/* ---- properties ------------------------------------------------------------------------------ */

typedef struct {
    rmq_buf_t *out;
    const char *const *drop; /* keys left out */
} props_copy_t;

static int props_copy_fn(void *ud, const char *k, size_t kl, const char *v, size_t vl)
{
    props_copy_t *pc = ud;
    for (const char *const *d = pc->drop; *d; d++)
        if (strlen(*d) == kl && memcmp(*d, k, kl) == 0) return 0;
    return rmq__props_append_n(pc->out, k, kl, v, vl);
}

static void props_copy(rmq_buf_t *out, const char *props, size_t len, const char *const *drop)
{
    props_copy_t pc = {out, drop};
    rmq__props_foreach(props, len, props_copy_fn, &pc);
}

/* ---- topics ---------------------------------------------------------------------------------- */

static int topic_char_ok(const char *t)
{
    return rmq__name_ok(t, 127);
}

static db_topic_t *sys_topic(db_broker_t *b, const char *name)
{
    db_topic_t *t = rmq__db_topic_get(b, name);
    return t ? t : rmq__db_topic_create(b, name, 1, 1, 6);
}

/* ---- SEND_MESSAGE / SEND_MESSAGE_V2 ---------------------------------------------------------- */

/*
 * SEND_BATCH_MESSAGE: the body is a list of messages as MessageDecoder.encodeMessages writes
 * them (TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODYLEN, BODY, PROPERTIESLEN, PROPERTIES). Each is
 * stored in the same queue with its own properties followed by the batch's (CLUSTER included),
 * as MessageExtBatchEncoder does. The answer's msgId lists every offsetMsgId, comma-separated;
 * queueOffset is the first message's.
 */
static void send_batch(db_broker_t *b, rmq_conn_t *conn, rmq_cmd_t *req, db_topic_t *t,
                       db_msg_in_t *in, const rmq_buf_t *batch_props)
{
    const uint8_t *p = (const uint8_t *)req->body, *end = p + req->body_len;
    rmq_buf_t ids, props;
    rmq__buf_init(&ids);
    rmq__buf_init(&props);
    int64_t first = -1;
    char msg[300];
    int n = 0;
    while (p && p < end) {
        if (end - p < 22) goto bad;
        uint32_t size = rmq__rd32(p);
        if (size < 22 || size > (size_t)(end - p)) goto bad;
        int32_t flag = (int32_t)rmq__rd32(p + 12);
        uint32_t blen = rmq__rd32(p + 16);
        if (blen > size - 22) goto bad;
        const uint8_t *body = p + 20;
        uint32_t plen = rmq__rd16(body + blen);
        if (20 + blen + 2 + plen != size) goto bad;
        props.len = 0;
        rmq__buf_append(&props, body + blen + 2, plen);
        if (plen && batch_props->len && props.data[props.len - 1] != RMQ_PROP_SEP)
            rmq__buf_append_u8(&props, RMQ_PROP_SEP);
        rmq__buf_append(&props, batch_props->data, batch_props->len);
        in->flag = flag;
        in->body = (const char *)body;
        in->body_len = blen;
        in->props = props.data;
        in->props_len = props.len;
        db_msg_t *m = rmq__db_store(b, t, in, msg, sizeof(msg));
        if (!m) goto fail;
        char id[64];
        offset_msg_id(b, m->phys, id);
        if (ids.len) rmq__buf_append(&ids, ",", 1);
        rmq__buf_append(&ids, id, strlen(id));
        if (first < 0) first = m->qoff;
        rmq__db_stats_on_put(b, t->name, 1, (int64_t)m->size);
        n++;
        p += size;
    }
    if (n == 0) goto bad;
    rmq__buf_append_u8(&ids, 0);
    rmq_cmd_t resp;
    rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, NULL);
    rmq__cmd_set_ext(&resp, "msgId", ids.data);
    rmq__cmd_set_ext_i64(&resp, "queueId", in->queue_id);
    rmq__cmd_set_ext_i64(&resp, "queueOffset", first);
    rmq__cmd_set_ext(&resp, "MSG_REGION", "DefaultRegion");
    rmq__cmd_set_ext(&resp, "TRACE_ON", "true");
    if (!(req->flag & RMQ_FLAG_ONEWAY)) rmq__db_reply(conn, &resp);
    rmq__cmd_free(&resp);
    rmq__buf_free(&ids);
    rmq__buf_free(&props);
    return;
bad:
    snprintf(msg, sizeof(msg), "malformed batch body at byte %ld (%d messages stored)",
             (long)(p ? p - (const uint8_t *)req->body : 0), n);
fail:
    rmq__buf_free(&ids);
    rmq__buf_free(&props);
    rmq__db_reply_code(conn, req, RMQ_RESP_MESSAGE_ILLEGAL, msg);
}

static void h_send(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = broker_of(node);
    rmq_devbroker_t *db = node->db;
    int v2 = req->code == RMQ_REQ_SEND_MESSAGE_V2 || req->code == RMQ_REQ_SEND_BATCH_MESSAGE;
    hdr_t h = {conn, req, 0};
    hdr_str(&h, v2 ? "a" : "producerGroup");
    const char *topic = hdr_str(&h, v2 ? "b" : "topic");
    hdr_str(&h, v2 ? "c" : "defaultTopic");
    hdr_i64(&h, v2 ? "d" : "defaultTopicQueueNums");
    int64_t qid = hdr_i64(&h, v2 ? "e" : "queueId");
    int64_t sys_flag = hdr_i64(&h, v2 ? "f" : "sysFlag");
    int64_t born_ts = hdr_i64(&h, v2 ? "g" : "bornTimestamp");
    int64_t flag = hdr_i64(&h, v2 ? "h" : "flag");
    const char *props = rmq__cmd_ext(req, v2 ? "i" : "properties");
    int64_t reconsume = hdr_opt_i64(&h, v2 ? "j" : "reconsumeTimes", 0, NULL);
    int has_max = 0;
    int64_t max_re = hdr_opt_i64(&h, v2 ? "l" : "maxReconsumeTimes", 0, &has_max);
    if (h.failed) return;
    if (!props) props = "";
    char msg[512];

    if (!topic_char_ok(topic)) {
        snprintf(msg, sizeof(msg),
                 "The specified topic[%s] contains illegal characters, allowing only "
                 "^[%%|a-zA-Z0-9_-]+$",
                 topic);
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
        return;
    }
    if (strcmp(topic, "TBW102") == 0 || strcmp(topic, "SCHEDULE_TOPIC_XXXX") == 0) {
        snprintf(msg, sizeof(msg), "Sending message to topic[%s] is forbidden.", topic);
        rmq__db_reply_code(conn, req, RMQ_RESP_NO_PERMISSION, msg);
        return;
    }
    db_topic_t *t = rmq__db_topic_get(b, topic);
    if (!t) {
        if (strncmp(topic, "%RETRY%", 7) == 0 || strncmp(topic, "%DLQ%", 5) == 0)
            t = rmq__db_topic_create(b, topic, 1, 1, 6);
        else
            t = rmq__db_topic_create(b, topic, db->default_queues, db->default_queues, 6);
        if (db->remote_ns) rmq__db_register_all(db);
    }
    if (!(t->perm & 2)) {
        snprintf(msg, sizeof(msg), "the topic[%s] sending message is forbidden", topic);
        rmq__db_reply_code(conn, req, RMQ_RESP_NO_PERMISSION, msg);
        return;
    }
    if (qid >= t->write_q) {
        snprintf(msg, sizeof(msg), "request queueId[%d] is illegal, topic:%s Producer: %s",
                 (int)qid, topic, rmq__conn_peer(conn));
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
        return;
    }
    if (qid < 0) qid = rand() % (t->write_q > 0 ? t->write_q : 1);

    int batch = req->code == RMQ_REQ_SEND_BATCH_MESSAGE;
    if (batch && strncmp(topic, "%RETRY%", 7) == 0) {
        snprintf(msg, sizeof(msg), "batch request does not support retry group %s", topic);
        rmq__db_reply_code(conn, req, RMQ_RESP_MESSAGE_ILLEGAL, msg);
        return;
    }

    /* %RETRY% with too many reconsumes goes to the DLQ (handleRetryAndDLQ). */
    const char *dest = topic;
    char dlq[300];
    if (strncmp(topic, "%RETRY%", 7) == 0) {
        /* SendMessageProcessor.handleRetryAndDLQ: the group's retryMaxTimes, unless the
         * client (V3_4_9 or later) sends its own maxReconsumeTimes. */
        int64_t max = rmq__db_subgroup_find(b, topic + 7)->retry_max_times;
        if (req->version >= VERSION_V3_4_9 && has_max) max = max_re;
        if (reconsume >= max) {
            snprintf(dlq, sizeof(dlq), "%%DLQ%%%s", topic + 7);
            t = sys_topic(b, dlq);
            dest = dlq;
            qid = 0;
        }
    }

    rmq_buf_t pb;
    rmq__buf_init(&pb);
    static const char *const drop[] = {"WAIT", "CLUSTER", NULL};
    props_copy(&pb, props, strlen(props), drop);
    rmq__props_append(&pb, "CLUSTER", db->cluster);

    uint8_t ip[16];
    int ip_len;
    int32_t port;
    peer_host(conn, ip, &ip_len, &port);
    db_msg_in_t in = {.topic = dest,
                      .queue_id = (int)qid,
                      .flag = (int32_t)flag,
                      .sys_flag = (int32_t)sys_flag,
                      .reconsume = (int32_t)reconsume,
                      .born_ts = born_ts,
                      .born_host = ip,
                      .born_ip_len = ip_len,
                      .born_port = port,
                      .body = req->body,
                      .body_len = req->body_len};

    if (batch) {
        send_batch(b, conn, req, t, &in, &pb);
        rmq__buf_free(&pb);
        return;
    }

    uint32_t dl_len = 0;
    const char *dl = rmq__props_find(pb.data, pb.len, "DELAY", 5, &dl_len);
    int level = 0;
    if (dl && dl_len < 8 && (sys_flag & RMQ_SYSFLAG_TX_MASK) == 0) {
        char tmp[8];
        memcpy(tmp, dl, dl_len);
        tmp[dl_len] = 0;
        level = atoi(tmp);
    }
    rmq_cmd_t resp;
    rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, NULL);
    char id[64];
    if (level > 0) {
        if (level > 18) level = 18;
        char qs[16];
        snprintf(qs, sizeof(qs), "%d", (int)qid);
        rmq__props_append(&pb, "REAL_TOPIC", dest);
        rmq__props_append(&pb, "REAL_QID", qs);
        in.props = pb.data;
        in.props_len = pb.len;
        rmq__db_store_delayed(b, &in, (int64_t)(delay_level_ms[level - 1] * db->delay_scale));
        offset_msg_id(b, b->next_phys, id);
        rmq__cmd_set_ext(&resp, "msgId", id);
        rmq__cmd_set_ext_i64(&resp, "queueId", level - 1);
        rmq__cmd_set_ext_i64(&resp, "queueOffset", b->sched_off[level - 1]++);
    } else {
        in.props = pb.data;
        in.props_len = pb.len;
        db_msg_t *m = rmq__db_store(b, t, &in, msg, sizeof(msg));
        if (!m) {
            rmq__cmd_free(&resp);
            rmq__buf_free(&pb);
            rmq__db_reply_code(conn, req, RMQ_RESP_MESSAGE_ILLEGAL, msg);
            return;
        }
        rmq__db_stats_on_put(b, t->name, 1, (int64_t)m->size);
        offset_msg_id(b, m->phys, id);
        rmq__cmd_set_ext(&resp, "msgId", id);
        rmq__cmd_set_ext_i64(&resp, "queueId", qid);
        rmq__cmd_set_ext_i64(&resp, "queueOffset", m->qoff);
    }
    rmq__cmd_set_ext(&resp, "MSG_REGION", "DefaultRegion");
    rmq__cmd_set_ext(&resp, "TRACE_ON", "true");
    rmq__buf_free(&pb);
    if (!(req->flag & RMQ_FLAG_ONEWAY)) rmq__db_reply(conn, &resp);
    rmq__cmd_free(&resp);
}

/* ---- PULL_MESSAGE ---------------------------------------------------------------------------- */

typedef struct pull_write {
    int n;
    db_msg_t *msgs[];
} pull_write_t;

static void pull_written(void *ud, int status)
{
    pull_write_t *w = ud;
    for (int i = 0; i < w->n; i++)
        rmq__db_msg_release(w->msgs[i]);
    free(w);
}

static void park_closed(uv_handle_t *h)
{
    db_park_t *p = h->data;
    free(p);
}

static void park_finish(db_broker_t *b, db_park_t *p)
{
    if (p->qprev)
        p->qprev->qnext = p->qnext;
    else
        p->q->parked = p->qnext;
    if (p->qnext) p->qnext->qprev = p->qprev;
    if (p->bprev)
        p->bprev->bnext = p->bnext;
    else
        b->parks = p->bnext;
    if (p->bnext) p->bnext->bprev = p->bprev;
    rmq__conn_release(p->conn);
    rmq__rbuf_release(p->frame);
    if (p->sub) rmq__sub_destroy(p->sub);
    rmq__sql92_free(p->expr);
    uv_close((uv_handle_t *)&p->timer, park_closed);
}

static void do_pull(db_broker_t *b, rmq_conn_t *conn, rmq_cmd_t *req, int allow_suspend);

static void park_wake(db_broker_t *b, db_park_t *p)
{
    if (rmq__conn_state(p->conn) == RMQ_CONN_OPEN && b->node.t) {
        rmq_cmd_t c;
        char err[128];
        if (rmq__cmd_decode(p->frame, &c, err, sizeof(err)) == 0) {
            do_pull(b, p->conn, &c, 0);
            rmq__cmd_free(&c);
        }
    }
    park_finish(b, p);
}

static void park_timeout(uv_timer_t *t)
{
    db_park_t *p = t->data;
    park_wake(p->b, p);
}

/* isMatchedByConsumeQueue (tags code), then for SQL92 isMatchedByCommitLog (properties). */
static int sub_match(const rmq_sub_t *sub, const rmq_sql92_t *expr, const db_msg_t *m)
{
    if (!sub) return 1;
    if (!rmq__db_filter_is_tag(sub->expression_type)) return rmq__db_filter_match(expr, m);
    return rmq__sub_match_code(sub, 1, m->has_tag ? m->tagcode : 0);
}

void rmq__db_wake_parked(db_broker_t *b, db_queue_t *q, db_msg_t *m)
{
    db_park_t *p = q->parked;
    while (p) {
        db_park_t *next = p->qnext;
        if (rmq__db_qmax(q) > p->offset && sub_match(p->sub, p->expr, m)) park_wake(b, p);
        p = next;
    }
}

void rmq__db_wake_all_parked(db_broker_t *b, db_queue_t *q)
{
    while (q->parked)
        park_wake(b, q->parked);
}

void rmq__db_drop_parked(db_broker_t *b)
{
    while (b->parks)
        park_finish(b, b->parks);
}

static const char *status_name[] = {"FOUND",
                                    "NO_MATCHED_MESSAGE",
                                    "MESSAGE_WAS_REMOVING",
                                    "OFFSET_FOUND_NULL",
                                    "OFFSET_OVERFLOW_BADLY",
                                    "OFFSET_OVERFLOW_ONE",
                                    "OFFSET_TOO_SMALL",
                                    "NO_MATCHED_LOGIC_QUEUE",
                                    "NO_MESSAGE_IN_QUEUE"};
enum {
    ST_FOUND,
    ST_NO_MATCHED_MESSAGE,
    ST_MESSAGE_WAS_REMOVING,
    ST_OFFSET_FOUND_NULL,
    ST_OFFSET_OVERFLOW_BADLY,
    ST_OFFSET_OVERFLOW_ONE,
    ST_OFFSET_TOO_SMALL,
    ST_NO_MATCHED_LOGIC_QUEUE,
    ST_NO_MESSAGE_IN_QUEUE
};

static void do_pull(db_broker_t *b, rmq_conn_t *conn, rmq_cmd_t *req, int allow_suspend)
{
    hdr_t h = {conn, req, 0};
    const char *group = hdr_str(&h, "consumerGroup");
    const char *topic = hdr_str(&h, "topic");
    int64_t qid = hdr_i64(&h, "queueId");
    int64_t offset = hdr_i64(&h, "queueOffset");
    int64_t max_nums = hdr_i64(&h, "maxMsgNums");
    int64_t sys_flag = hdr_i64(&h, "sysFlag");
    int64_t commit_offset = hdr_i64(&h, "commitOffset");
    int64_t suspend_ms = hdr_i64(&h, "suspendTimeoutMillis");
    hdr_i64(&h, "subVersion");
    if (h.failed) return;
    int64_t sub_version = 0;
    rmq__cmd_ext_i64(req, "subVersion", &sub_version);
    const char *expr_type = rmq__cmd_ext(req, "expressionType");
    const char *sub_str = rmq__cmd_ext(req, "subscription");
    char msg[512];

    /* PullMessageProcessor: the group's config (created when missing), then consumeEnable. */
    const db_subgroup_t *sg = rmq__db_subgroup_find(b, group);
    if (!sg->consume_enable) {
        snprintf(msg, sizeof(msg), "subscription group no permission, %s", group);
        rmq__db_reply_code(conn, req, RMQ_RESP_NO_PERMISSION, msg);
        return;
    }

    db_topic_t *t = rmq__db_topic_get(b, topic);
    if (!t) {
        snprintf(msg, sizeof(msg),
                 "topic[%s] not exist, apply first please! \nSee "
                 "http://rocketmq.apache.org/docs/faq/ for further details.",
                 topic);
        rmq__db_reply_code(conn, req, RMQ_RESP_TOPIC_NOT_EXIST, msg);
        return;
    }
    if (!(t->perm & 4)) {
        snprintf(msg, sizeof(msg), "the topic[%s] pulling message is forbidden", topic);
        rmq__db_reply_code(conn, req, RMQ_RESP_NO_PERMISSION, msg);
        return;
    }
    if (qid < 0 || qid >= t->read_q) {
        snprintf(msg, sizeof(msg),
                 "queueId[%d] is illegal, topic:[%s] topicConfig.readQueueNums:[%d] consumer:[%s]",
                 (int)qid, topic, t->read_q, rmq__conn_peer(conn));
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
        return;
    }

    rmq_sub_t *own = NULL;
    const rmq_sub_t *sub = NULL;
    if (sys_flag & SYSFLAG_SUBSCRIPTION) {
        char err[256];
        if (rmq__sub_build(topic, sub_str ? sub_str : "", expr_type, &own, err, sizeof(err))) {
            rmq__db_reply_code(conn, req, RMQ_RESP_SUBSCRIPTION_PARSE_FAILED,
                               "parse the consumer's subscription failed");
            return;
        }
        sub = own;
    } else {
        db_group_t *g = rmq__dbmap_get(&b->groups, group);
        if (!g) {
            rmq__db_reply_code(conn, req, RMQ_RESP_SUBSCRIPTION_NOT_EXIST,
                               "the consumer's group info not exist\nSee "
                               "http://rocketmq.apache.org/docs/faq/ for further details.");
            return;
        }
        if (!sg->consume_broadcast_enable && g->message_model &&
            strcmp(g->message_model, "BROADCASTING") == 0) {
            snprintf(msg, sizeof(msg),
                     "the consumer group[%s] can not consume by broadcast way", group);
            rmq__db_reply_code(conn, req, RMQ_RESP_NO_PERMISSION, msg);
            return;
        }
        sub = rmq__dbmap_get(&g->subs, topic);
        if (!sub) {
            rmq__db_reply_code(conn, req, RMQ_RESP_SUBSCRIPTION_NOT_EXIST,
                               "the consumer's subscription not exist\nSee "
                               "http://rocketmq.apache.org/docs/faq/ for further details.");
            return;
        }
        if (sub->sub_version < sub_version) {
            rmq__db_reply_code(conn, req, RMQ_RESP_SUBSCRIPTION_NOT_LATEST,
                               "the consumer's subscription not latest");
            return;
        }
    }
    /* SQL92: the filter data (or FILTER_DATA_NOT_EXIST / _NOT_LATEST), then the refusal of a
     * broker without property filtering (devbroker_filter.c). */
    rmq_sql92_t *expr = NULL;
    if (rmq__db_filter_for_pull(b, conn, req, group, sub, own != NULL, sub_version, &expr) < 0) {
        if (own) rmq__sub_destroy(own);
        return;
    }
    if (rmq__db_filter_is_tag(sub->expression_type) && sub->sub_string &&
        strcmp(sub->sub_string, RMQ_SUB_ALL) == 0)
        sub = NULL;

    db_queue_t *q = rmq__db_queue(t, (int)qid);
    int64_t min = q->min_off, max = rmq__db_qmax(q), next = offset;
    int status;
    db_msg_t *found[MAX_TRANSFER_COUNT];
    int n = 0;
    if (max == 0) {
        status = ST_NO_MESSAGE_IN_QUEUE;
        next = 0;
    } else if (offset < min) {
        status = ST_OFFSET_TOO_SMALL;
        next = min;
    } else if (offset == max) {
        status = ST_OFFSET_OVERFLOW_ONE;
        next = offset;
    } else if (offset > max) {
        status = ST_OFFSET_OVERFLOW_BADLY;
        next = min == 0 ? min : max;
    } else {
        status = ST_NO_MATCHED_MESSAGE;
        /* DefaultMessageStore.getMessage: up to max(16000, maxMsgNums * 20) bytes of consume
         * queue (20 per entry), and never past the end of the consume queue file holding
         * `offset` (getIndexBuffer maps one file). */
        int64_t scan_cap = max_nums > 800 ? max_nums : 800;
        int64_t file_end = (offset / CQ_FILE_ENTRIES + 1) * CQ_FILE_ENTRIES;
        int64_t end = max < file_end ? max : file_end;
        int64_t i = offset, scanned = 0;
        size_t bytes = 0;
        while (i < end && scanned < scan_cap) {
            db_msg_t *m = rmq__db_qget(q, i);
            if (!m) {
                /* Offsets skipped by rmq_devbroker_skip_offsets have no entries to scan: go
                 * straight to the next message (a broker would answer NO_MATCHED_MSG per file
                 * of filtered entries on the way, ending at the same place). */
                m = rmq__db_qnext(q, i);
                if (!m) {
                    i = max;
                    break;
                }
                i = m->qoff;
                file_end = (i / CQ_FILE_ENTRIES + 1) * CQ_FILE_ENTRIES;
                end = max < file_end ? max : file_end;
            }
            if (n > 0 && bytes > 0) {
                if (max_nums <= n || bytes + m->size > MAX_TRANSFER_BYTES ||
                    n > MAX_TRANSFER_COUNT - 1)
                    break;
            }
            scanned++;
            i++;
            if (!sub_match(sub, expr, m)) continue;
            found[n++] = m;
            bytes += m->size;
            status = ST_FOUND;
        }
        next = i;
    }

    int code;
    switch (status) {
    case ST_FOUND:
        code = RMQ_RESP_SUCCESS;
        break;
    case ST_NO_MESSAGE_IN_QUEUE:
    case ST_NO_MATCHED_LOGIC_QUEUE:
        code = offset != 0 ? RMQ_RESP_PULL_OFFSET_MOVED : RMQ_RESP_PULL_NOT_FOUND;
        break;
    case ST_OFFSET_FOUND_NULL:
    case ST_OFFSET_OVERFLOW_ONE:
        code = RMQ_RESP_PULL_NOT_FOUND;
        break;
    case ST_OFFSET_OVERFLOW_BADLY:
    case ST_OFFSET_TOO_SMALL:
        code = RMQ_RESP_PULL_OFFSET_MOVED;
        break;
    default:
        code = RMQ_RESP_PULL_RETRY_IMMEDIATELY;
        break;
    }

    if (allow_suspend && (sys_flag & SYSFLAG_COMMIT))
        rmq__db_offset_set(b, group, topic, (int)qid, commit_offset);
    {
        int64_t got = 0;
        for (int i = 0; i < n; i++)
            got += found[i]->size;
        rmq__db_stats_on_get(b, topic, group, n, got);
    }

    if (code == RMQ_RESP_PULL_NOT_FOUND && allow_suspend && (sys_flag & SYSFLAG_SUSPEND) &&
        req->frame) {
        db_park_t *p = rmq__xcalloc(1, sizeof(*p));
        p->q = q;
        p->b = b;
        p->conn = rmq__conn_keep(conn);
        p->frame = rmq__rbuf_keep(req->frame);
        p->offset = offset;
        p->sub = sub ? rmq__sub_dup(sub) : NULL;
        p->expr = expr; /* the parked pull owns it now */
        expr = NULL;
        p->qnext = q->parked;
        if (p->qnext) p->qnext->qprev = p;
        q->parked = p;
        p->bnext = b->parks;
        if (p->bnext) p->bnext->bprev = p;
        b->parks = p;
        uv_timer_init(&b->node.db->loop, &p->timer);
        p->timer.data = p;
        uv_timer_start(&p->timer, park_timeout, (uint64_t)(suspend_ms > 0 ? suspend_ms : 0), 0);
        if (own) rmq__sub_destroy(own);
        return;
    }
    if (own) rmq__sub_destroy(own);
    rmq__sql92_free(expr);
    if (req->flag & RMQ_FLAG_ONEWAY) return;

    rmq_cmd_t resp;
    rmq__cmd_init_response(&resp, req, code, status_name[status]);
    /* A long-polled request is answered by the hold service in the server's default type. */
    if (!allow_suspend) resp.serialize = RMQ_SERIALIZE_JSON;
    rmq__cmd_set_ext_i64(&resp, "suggestWhichBrokerId", b->suggest_id);
    rmq__cmd_set_ext_i64(&resp, "nextBeginOffset", next);
    rmq__cmd_set_ext_i64(&resp, "maxOffset", b->told_max == INT64_MIN ? max : b->told_max);
    rmq__cmd_set_ext_i64(&resp, "minOffset", min);
    if (n == 0) {
        rmq__db_reply(conn, &resp);
        rmq__cmd_free(&resp);
        return;
    }
    pull_write_t *w = rmq__xmalloc(sizeof(*w) + sizeof(db_msg_t *) * (size_t)n);
    uv_buf_t bufs[MAX_TRANSFER_COUNT];
    w->n = n;
    unsigned nb = 0;
    for (int i = 0; i < n; i++) {
        w->msgs[i] = found[i];
        found[i]->refs++;
        /* Neighbours in one chunk go out as one buffer. */
        if (nb && bufs[nb - 1].base + bufs[nb - 1].len == found[i]->data) {
            bufs[nb - 1].len += found[i]->size;
        } else {
            bufs[nb++] = uv_buf_init(found[i]->data, found[i]->size);
        }
    }
    if (rmq__conn_reply_ex(conn, &resp, bufs, nb, pull_written, w) != 0)
        pull_written(w, RMQ_ERR_TRANSPORT);
    rmq__cmd_free(&resp);
}

static void h_pull(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    do_pull(broker_of(node), conn, req, 1);
}

/* ---- offsets --------------------------------------------------------------------------------- */

static void h_query_offset(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = broker_of(node);
    hdr_t h = {conn, req, 0};
    const char *group = hdr_str(&h, "consumerGroup");
    const char *topic = hdr_str(&h, "topic");
    int64_t qid = hdr_i64(&h, "queueId");
    if (h.failed) return;
    int64_t off = rmq__db_offset_get(b, group, topic, (int)qid);
    if (off < 0) {
        db_topic_t *t = rmq__db_topic_get(b, topic);
        db_queue_t *q = t ? rmq__db_queue(t, (int)qid) : NULL;
        int64_t min = q ? q->min_off : 0;
        /* minOffset <= 0 and offset 0 not "in disk" (everything here is in memory). */
        if (min <= 0) off = 0;
    }
    rmq_cmd_t resp;
    if (off >= 0) {
        rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, NULL);
        rmq__cmd_set_ext_i64(&resp, "offset", off);
    } else {
        rmq__cmd_init_response(&resp, req, RMQ_RESP_QUERY_NOT_FOUND,
                               "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first");
    }
    if (!(req->flag & RMQ_FLAG_ONEWAY)) rmq__db_reply(conn, &resp);
    rmq__cmd_free(&resp);
}

static void h_update_offset(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = broker_of(node);
    hdr_t h = {conn, req, 0};
    const char *group = hdr_str(&h, "consumerGroup");
    const char *topic = hdr_str(&h, "topic");
    int64_t qid = hdr_i64(&h, "queueId");
    int64_t off = hdr_i64(&h, "commitOffset");
    if (h.failed) return;
    rmq__db_offset_set(b, group, topic, (int)qid, off);
    rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
}

static void reply_offset(rmq_conn_t *conn, rmq_cmd_t *req, int64_t off)
{
    if (req->flag & RMQ_FLAG_ONEWAY) return;
    rmq_cmd_t resp;
    rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, NULL);
    rmq__cmd_set_ext_i64(&resp, "offset", off);
    rmq__db_reply(conn, &resp);
    rmq__cmd_free(&resp);
}

static db_queue_t *hdr_queue(db_broker_t *b, hdr_t *h)
{
    const char *topic = hdr_str(h, "topic");
    int64_t qid = hdr_i64(h, "queueId");
    if (h->failed) return NULL;
    db_topic_t *t = rmq__db_topic_get(b, topic);
    return t ? rmq__db_queue(t, (int)qid) : NULL;
}

static void h_max_offset(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    hdr_t h = {conn, req, 0};
    db_broker_t *b = broker_of(node);
    db_queue_t *q = hdr_queue(b, &h);
    if (h.failed) return;
    if (b->told_max_query != INT64_MIN)
        reply_offset(conn, req, b->told_max_query);
    else
        reply_offset(conn, req, q ? rmq__db_qmax(q) : 0);
}

static void h_min_offset(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    hdr_t h = {conn, req, 0};
    db_queue_t *q = hdr_queue(broker_of(node), &h);
    if (!h.failed) reply_offset(conn, req, q ? q->min_off : 0);
}

static void h_search_offset(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    hdr_t h = {conn, req, 0};
    db_queue_t *q = hdr_queue(broker_of(node), &h);
    int64_t ts = hdr_i64(&h, "timestamp");
    if (!h.failed) reply_offset(conn, req, q ? rmq__db_search_time(q, ts) : 0);
}

/* ---- clients and groups ---------------------------------------------------------------------- */

static void notify_group(db_broker_t *b, db_group_t *g)
{
    for (int i = 0; i < g->n_members; i++) {
        rmq_cmd_t c;
        rmq__cmd_init(&c, RMQ_REQ_NOTIFY_CONSUMER_IDS_CHANGED, RMQ_SERIALIZE_JSON);
        rmq__cmd_set_ext(&c, "consumerGroup", g->name);
        int rc = rmq__conn_request(g->members[i]->conn, &c, 0, RMQ_REQF_ONEWAY, NULL, NULL);
        if (rc)
            rmq_dbg(RMQ_DBG_BROKER, DB_LOG, "notify %s failed: %s", g->members[i]->addr,
                    rmq_err_str(rc));
        rmq__cmd_free(&c);
    }
}

static void sub_free_v(void *v)
{
    rmq__sub_destroy(v);
}

static void group_free(db_group_t *g)
{
    free(g->name);
    free(g->consume_type);
    free(g->message_model);
    free(g->consume_from_where);
    free(g->members);
    rmq__dbmap_free(&g->subs, sub_free_v);
    free(g);
}

static void group_free_v(void *v)
{
    group_free(v);
}
static void lock_free_v(void *v)
{
    db_lock_t *l = v;
    free(l->client_id);
    free(l);
}

void rmq__db_broker_free_groups(db_broker_t *b)
{
    rmq__dbmap_free(&b->groups, group_free_v);
    rmq__dbmap_free(&b->offsets, free);
    rmq__dbmap_free(&b->locks, lock_free_v);
}

static int group_has(const db_group_t *g, const db_client_t *c)
{
    for (int i = 0; i < g->n_members; i++)
        if (g->members[i] == c) return 1;
    return 0;
}

/* Remove c from g; returns 1 when it was a member. Frees the group when it becomes empty. */
static int group_remove(db_broker_t *b, db_group_t *g, db_client_t *c, int notify)
{
    for (int i = 0; i < g->n_members; i++) {
        if (g->members[i] != c) continue;
        g->members[i] = g->members[--g->n_members];
        if (g->n_members == 0) {
            rmq__dbmap_del(&b->groups, g->name);
            group_free(g);
        } else if (notify)
            notify_group(b, g);
        return 1;
    }
    return 0;
}

typedef struct {
    db_broker_t *b;
    db_client_t *c;
    db_group_t *list[256];
    int n;
} collect_t;

static void collect_groups(const char *key, void *val, void *ud)
{
    collect_t *cl = ud;
    if (cl->n < 256 && group_has(val, cl->c)) cl->list[cl->n++] = val;
}

static void client_drop(db_broker_t *b, db_client_t *c)
{
    collect_t cl = {.b = b, .c = c};
    rmq__dbmap_each(&b->groups, collect_groups, &cl);
    for (int i = 0; i < cl.n; i++)
        group_remove(b, cl.list[i], c, 1);
}

void rmq__db_broker_conn_closed(db_broker_t *b, rmq_conn_t *conn)
{
    /* Parked pulls of this connection go now. */
    for (db_park_t *p = b->parks, *n; p; p = n) {
        n = p->bnext;
        if (p->conn == conn) park_finish(b, p);
    }
    db_client_t *c = rmq__conn_get_ud(conn);
    if (!c) return;
    rmq__conn_set_ud(conn, NULL);
    client_drop(b, c);
    rmq__db_producers_drop(b, c);
    rmq__conn_release(c->conn);
    free(c->client_id);
    free(c);
}

typedef struct {
    int64_t now, expire_ms;
    db_client_t *list[256];
    int n;
} expired_t;

static void scan_expired(const char *key, void *val, void *ud)
{
    expired_t *ex = ud;
    db_group_t *g = val;
    for (int i = 0; i < g->n_members && ex->n < 256; i++) {
        db_client_t *c = g->members[i];
        int dup = 0;
        for (int k = 0; k < ex->n; k++)
            dup |= ex->list[k] == c;
        if (!dup && ex->now - c->last_ms > ex->expire_ms) ex->list[ex->n++] = c;
    }
}

/* ConsumerManager.scanNotActiveChannel: close channels without a heartbeat for too long (the
 * close handler then removes them from their groups and notifies the rest). */
void rmq__db_broker_scan(db_broker_t *b, int64_t now_mono)
{
    /* PullRequestHoldService.checkHoldRequest, every 5 s: a parked pull whose queue has grown
     * runs again whatever the tags of the new messages (only filtered ones: the pull answers
     * PULL_RETRY_IMMEDIATELY / NO_MATCHED_MESSAGE with nextBeginOffset past them). */
    if (now_mono - b->hold_check_ms >= HOLD_CHECK_MS) {
        b->hold_check_ms = now_mono;
        /* From the head again after each wake: answering may close a connection, and its
         * other parked pulls go with it. */
        db_park_t *p = b->parks;
        while (p) {
            if (rmq__db_qmax(p->q) > p->offset) {
                park_wake(b, p);
                p = b->parks;
            } else {
                p = p->bnext;
            }
        }
    }
    expired_t ex = {.now = now_mono, .expire_ms = b->node.db->channel_expire_ms};
    rmq__dbmap_each(&b->groups, scan_expired, &ex);
    for (int i = 0; i < ex.n; i++) {
        db_client_t *c = ex.list[i];
        if (rmq__conn_state(c->conn) < RMQ_CONN_CLOSING) {
            rmq_log_info(DB_LOG, "%s: channel %s (%s) expired", b->name, c->addr, c->client_id);
            rmq__conn_close(c->conn, RMQ_OK, "consumer channel expired");
        }
    }
}

static db_client_t *client_of(db_broker_t *b, rmq_conn_t *conn, const char *client_id,
                              const rmq_cmd_t *req)
{
    db_client_t *c = rmq__conn_get_ud(conn);
    if (!c) {
        c = rmq__xcalloc(1, sizeof(*c));
        c->conn = rmq__conn_keep(conn);
        c->b = b;
        snprintf(c->addr, sizeof(c->addr), "%s", rmq__conn_peer(conn));
        rmq__conn_set_ud(conn, c);
    }
    if (client_id && (!c->client_id || strcmp(c->client_id, client_id) != 0)) {
        free(c->client_id);
        c->client_id = rmq__xstrdup(client_id);
    }
    c->language = req->language;
    c->version = req->version;
    c->last_ms = rmq__mono_ms();
    return c;
}

static char *dup_or(const char *s, const char *def)
{
    return rmq__xstrdup(s ? s : def);
}

/* Parse a request's JSON body; on failure answer SYSTEM_ERROR "bad <what>: <why>" and return
 * NULL. The caller frees the document. */
static rmq_fjdoc_t *parse_body(rmq_conn_t *conn, rmq_cmd_t *req, const char *what)
{
    char err[256], msg[300];
    rmq_fjdoc_t *doc = rmq__fj_parse(req->body ? req->body : "", req->body_len, err, sizeof(err));
    if (!doc) {
        snprintf(msg, sizeof(msg), "bad %s: %s", what, err);
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
    }
    return doc;
}

static void h_heartbeat(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = broker_of(node);
    rmq_fjdoc_t *doc = parse_body(conn, req, "HeartbeatData");
    if (!doc) return;
    rmq_fj_t *root = rmq__fj_root(doc);
    const char *client_id = rmq__fj_get_str(root, "clientID");
    db_client_t *c = client_of(b, conn, client_id ? client_id : "", req);
    rmq_fj_t *cds = rmq__fj_get(root, "consumerDataSet");
    for (rmq_fj_t *cd = cds && cds->type == RMQ_FJ_ARRAY ? cds->child : NULL; cd; cd = cd->next) {
        const char *gname = rmq__fj_get_str(cd, "groupName");
        if (!gname || !*gname) continue;
        rmq__db_subgroup_find(b, gname); /* ClientManageProcessor.heartBeat */
        db_group_t *g = rmq__dbmap_get(&b->groups, gname);
        int changed = 0;
        if (!g) {
            g = rmq__xcalloc(1, sizeof(*g));
            g->name = rmq__xstrdup(gname);
            rmq__dbmap_put(&b->groups, gname, g);
        }
        free(g->consume_type);
        free(g->message_model);
        free(g->consume_from_where);
        g->consume_type = dup_or(rmq__fj_get_str(cd, "consumeType"), "CONSUME_PASSIVELY");
        g->message_model = dup_or(rmq__fj_get_str(cd, "messageModel"), "CLUSTERING");
        g->consume_from_where =
            dup_or(rmq__fj_get_str(cd, "consumeFromWhere"), "CONSUME_FROM_LAST_OFFSET");
        if (!group_has(g, c)) {
            if (g->n_members == g->cap_members) {
                g->cap_members = g->cap_members ? g->cap_members * 2 : 4;
                g->members = realloc(g->members, sizeof(*g->members) * (size_t)g->cap_members);
                if (!g->members) abort();
            }
            g->members[g->n_members++] = c;
            changed = 1;
        }
        /* Subscriptions: replace when the new subVersion is greater; drop missing topics. */
        db_map_t seen = {0};
        rmq_fj_t *subs = rmq__fj_get(cd, "subscriptionDataSet");
        for (rmq_fj_t *sd = subs && subs->type == RMQ_FJ_ARRAY ? subs->child : NULL; sd;
             sd = sd->next) {
            const char *topic = rmq__fj_get_str(sd, "topic");
            if (!topic) continue;
            rmq__dbmap_put(&seen, topic, (void *)1);
            int64_t ver = 0;
            rmq__fj_get_i64(sd, "subVersion", &ver);
            rmq_sub_t *old = rmq__dbmap_get(&g->subs, topic);
            if (old && ver <= old->sub_version) continue;
            rmq_sub_t *ns = rmq__xcalloc(1, sizeof(*ns));
            ns->topic = rmq__xstrdup(topic);
            ns->sub_string = dup_or(rmq__fj_get_str(sd, "subString"), "*");
            ns->expression_type = dup_or(rmq__fj_get_str(sd, "expressionType"), "TAG");
            ns->sub_version = ver;
            rmq_fj_t *codes = rmq__fj_get(sd, "codeSet");
            if (codes && codes->type == RMQ_FJ_ARRAY && codes->len) {
                ns->codes = rmq__xcalloc(codes->len, sizeof(int32_t));
                for (rmq_fj_t *cv = codes->child; cv; cv = cv->next) {
                    int64_t v;
                    if (rmq__fj_i64(cv, &v) == 0) ns->codes[ns->n_codes++] = (int32_t)v;
                }
            }
            rmq_fj_t *tags = rmq__fj_get(sd, "tagsSet");
            if (tags && tags->type == RMQ_FJ_ARRAY && tags->len) {
                ns->tags = rmq__xcalloc(tags->len, sizeof(char *));
                for (rmq_fj_t *tv = tags->child; tv; tv = tv->next)
                    if (tv->type == RMQ_FJ_STRING) ns->tags[ns->n_tags++] = rmq__xstrdup(tv->s);
            }
            if (old) rmq__sub_destroy(old);
            rmq__dbmap_put(&g->subs, topic, ns);
            rmq__db_filter_register(b, gname, ns);
        }
        /* Remove topics that are no longer subscribed. */
        char *gone[256];
        int ngone = 0;
        for (size_t i = 0; i < g->subs.nb; i++)
            for (db_ent_t *e = g->subs.b[i]; e; e = e->next)
                if (!rmq__dbmap_get(&seen, e->key) && ngone < 256) gone[ngone++] = e->key;
        for (int i = 0; i < ngone; i++) {
            char *k = rmq__xstrdup(gone[i]);
            rmq_sub_t *old = rmq__dbmap_del(&g->subs, k);
            if (old) rmq__sub_destroy(old);
            free(k);
        }
        rmq__dbmap_free(&seen, NULL);
        char retry[300];
        snprintf(retry, sizeof(retry), "%%RETRY%%%s", gname);
        if (!rmq__db_topic_get(b, retry)) {
            rmq__db_topic_create(b, retry, 1, 1, 6);
            if (node->db->remote_ns) rmq__db_register_all(node->db);
        }
        if (changed) {
            rmq_dbg(RMQ_DBG_BROKER, DB_LOG, "%s: group %s gains %s (%d members)", b->name, gname,
                    c->client_id, g->n_members);
            notify_group(b, g);
        }
    }
    const char *pgroups[64];
    int npg = 0;
    rmq_fj_t *pds = rmq__fj_get(root, "producerDataSet");
    for (rmq_fj_t *pd = pds && pds->type == RMQ_FJ_ARRAY ? pds->child : NULL; pd && npg < 64;
         pd = pd->next) {
        const char *gname = rmq__fj_get_str(pd, "groupName");
        if (gname && *gname) pgroups[npg++] = gname;
    }
    rmq__db_producers_heartbeat(b, c, pgroups, npg);
    rmq__fj_free(doc);
    rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
}

static void h_unregister(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = broker_of(node);
    hdr_t h = {conn, req, 0};
    hdr_str(&h, "clientID");
    if (h.failed) return;
    const char *group = rmq__cmd_ext(req, "consumerGroup");
    db_client_t *c = rmq__conn_get_ud(conn);
    if (group && *group && c) {
        db_group_t *g = rmq__dbmap_get(&b->groups, group);
        if (g) group_remove(b, g, c, 1);
    }
    const char *pgroup = rmq__cmd_ext(req, "producerGroup");
    if (pgroup && *pgroup && c) rmq__db_producers_unregister(b, c, pgroup);
    rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
}

static void h_consumer_list(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = broker_of(node);
    hdr_t h = {conn, req, 0};
    const char *group = hdr_str(&h, "consumerGroup");
    if (h.failed) return;
    db_group_t *g = rmq__dbmap_get(&b->groups, group);
    if (!g || g->n_members == 0) {
        char msg[300];
        snprintf(msg, sizeof(msg), "no consumer for this group, %s", group);
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
        return;
    }
    rmq_buf_t body;
    rmq__buf_init(&body);
    rmq__buf_append(&body, "{\"consumerIdList\":[", 19);
    for (int i = 0; i < g->n_members; i++) {
        if (i) rmq__buf_append(&body, ",", 1);
        const char *id = g->members[i]->client_id ? g->members[i]->client_id : "";
        rmq__fj_write_str(&body, id, strlen(id), 0);
    }
    rmq__buf_append(&body, "]}", 2);
    rmq_cmd_t resp;
    rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, NULL);
    resp.body = body.data;
    resp.body_len = body.len;
    if (!(req->flag & RMQ_FLAG_ONEWAY)) rmq__db_reply(conn, &resp);
    resp.body = NULL;
    resp.body_len = 0;
    rmq__cmd_free(&resp);
    rmq__buf_free(&body);
}

static void write_sub_json(rmq_buf_t *o, const rmq_sub_t *s)
{
    rmq__buf_appendf(o, "{\"classFilterMode\":false,\"codeSet\":[");
    for (int i = 0; i < s->n_codes; i++)
        rmq__buf_appendf(o, "%s%d", i ? "," : "", s->codes[i]);
    rmq__buf_appendf(o, "],\"expressionType\":");
    rmq__fj_write_str(o, s->expression_type, strlen(s->expression_type), 0);
    rmq__buf_appendf(o, ",\"subString\":");
    rmq__fj_write_str(o, s->sub_string, strlen(s->sub_string), 0);
    rmq__buf_appendf(o, ",\"subVersion\":%lld,\"tagsSet\":[", (long long)s->sub_version);
    for (int i = 0; i < s->n_tags; i++) {
        if (i) rmq__buf_append(o, ",", 1);
        rmq__fj_write_str(o, s->tags[i], strlen(s->tags[i]), 0);
    }
    rmq__buf_appendf(o, "],\"topic\":");
    rmq__fj_write_str(o, s->topic, strlen(s->topic), 0);
    rmq__buf_append(o, "}", 1);
}

static void write_sub_entry(const char *key, void *val, void *ud)
{
    rmq_buf_t *o = ud;
    if (o->data[o->len - 1] != '{') rmq__buf_append(o, ",", 1);
    rmq__fj_write_str(o, key, strlen(key), 0);
    rmq__buf_append(o, ":", 1);
    write_sub_json(o, val);
}

static void h_connection_list(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = broker_of(node);
    hdr_t h = {conn, req, 0};
    const char *group = hdr_str(&h, "consumerGroup");
    if (h.failed) return;
    db_group_t *g = rmq__dbmap_get(&b->groups, group);
    if (!g) {
        char msg[300];
        snprintf(msg, sizeof(msg), "the consumer group[%s] not online", group);
        rmq__db_reply_code(conn, req, RMQ_RESP_CONSUMER_NOT_ONLINE, msg);
        return;
    }
    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__buf_appendf(&o, "{\"connectionSet\":[");
    for (int i = 0; i < g->n_members; i++) {
        db_client_t *c = g->members[i];
        const char *lang = rmq_language_name(c->language);
        rmq__buf_appendf(&o, "%s{\"clientAddr\":", i ? "," : "");
        rmq__fj_write_str(&o, c->addr, strlen(c->addr), 0);
        rmq__buf_appendf(&o, ",\"clientId\":");
        rmq__fj_write_str(&o, c->client_id ? c->client_id : "",
                          c->client_id ? strlen(c->client_id) : 0, 0);
        rmq__buf_appendf(&o, ",\"language\":\"%s\",\"version\":%d}", lang ? lang : "OTHER",
                         c->version);
    }
    rmq__buf_appendf(&o,
                     "],\"consumeFromWhere\":\"%s\",\"consumeType\":\"%s\",\"messageModel\":"
                     "\"%s\",\"subscriptionTable\":{",
                     g->consume_from_where, g->consume_type, g->message_model);
    rmq__dbmap_each(&g->subs, write_sub_entry, &o);
    rmq__buf_append(&o, "}}", 2);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
}

/* ---- GET_CONSUME_STATS
 * --------------------------------------------------------------------------- */

typedef struct {
    const char *group;
    size_t glen;
    char *topics[256];
    int n;
} topics_of_t;

static void collect_topics(const char *key, void *val, void *ud)
{
    topics_of_t *to = ud;
    if (strncmp(key, to->group, to->glen) != 0 || key[to->glen] != '\001') return;
    const char *t = key + to->glen + 1;
    const char *end = strchr(t, '\001');
    if (!end) return;
    for (int i = 0; i < to->n; i++)
        if (strlen(to->topics[i]) == (size_t)(end - t) &&
            !memcmp(to->topics[i], t, (size_t)(end - t)))
            return;
    if (to->n < 256) to->topics[to->n++] = rmq__xstrndup(t, (size_t)(end - t));
}

static void h_consume_stats(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = broker_of(node);
    hdr_t h = {conn, req, 0};
    const char *group = hdr_str(&h, "consumerGroup");
    if (h.failed) return;
    const char *topic = rmq__cmd_ext(req, "topic");
    topics_of_t to = {.group = group, .glen = strlen(group)};
    if (topic && *topic)
        to.topics[to.n++] = rmq__xstrdup(topic);
    else
        rmq__dbmap_each(&b->offsets, collect_topics, &to);
    db_group_t *g = rmq__dbmap_get(&b->groups, group);
    rmq_buf_t o;
    rmq__buf_init(&o);
    /* consumeTps: BrokerStatsManager.tpsGroupGetNums over the topics listed. */
    double tps = 0.0;
    for (int k = 0; k < to.n; k++) {
        db_topic_t *t = rmq__db_topic_get(b, to.topics[k]);
        if (!t) continue;
        if (g && g->subs.n > 0 && !rmq__dbmap_get(&g->subs, t->name)) continue;
        tps += rmq__db_stats_group_tps(b, t->name, group);
    }
    rmq__buf_appendf(&o, "{\"consumeTps\":");
    rmq__db_java_double(&o, tps);
    rmq__buf_appendf(&o, ",\"offsetTable\":{");
    int first = 1;
    for (int k = 0; k < to.n; k++) {
        db_topic_t *t = rmq__db_topic_get(b, to.topics[k]);
        if (!t) continue;
        if (g && g->subs.n > 0 && !rmq__dbmap_get(&g->subs, t->name)) continue;
        for (int i = 0; i < t->write_q; i++) {
            db_queue_t *q = rmq__db_queue(t, i);
            int64_t co = rmq__db_offset_get(b, group, t->name, i);
            if (co < 0) co = 0;
            int64_t last = 0;
            if (co > 0) {
                db_msg_t *m = rmq__db_qget(q, co - 1);
                if (m) last = m->store_ts;
            }
            rmq__buf_appendf(&o, "%s{\"brokerName\":", first ? "" : ",");
            rmq__fj_write_str(&o, b->name, strlen(b->name), 0);
            rmq__buf_appendf(&o, ",\"queueId\":%d,\"topic\":", i);
            rmq__fj_write_str(&o, t->name, strlen(t->name), 0);
            rmq__buf_appendf(&o,
                             "}:{\"brokerOffset\":%lld,\"consumerOffset\":%lld,"
                             "\"lastTimestamp\":%lld}",
                             (long long)rmq__db_qmax(q), (long long)co, (long long)last);
            first = 0;
        }
    }
    rmq__buf_append(&o, "}}", 2);
    for (int k = 0; k < to.n; k++)
        free(to.topics[k]);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
}

/* ---- relayed admin calls --------------------------------------------------------------------- */

typedef struct relay {
    rmq_conn_t *admin; /* kept */
    int32_t opaque, serialize, code;
    char who[300];
} relay_t;

static void relay_done(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    relay_t *r = ud;
    rmq_cmd_t fake;
    memset(&fake, 0, sizeof(fake));
    fake.code = r->code;
    fake.opaque = r->opaque;
    fake.serialize = r->serialize;
    rmq_cmd_t out;
    if (err) {
        char msg[600];
        snprintf(msg, sizeof(msg), "invoke consumer %s Exception: %s", r->who, errmsg);
        rmq__cmd_init_response(&out, &fake, RMQ_RESP_SYSTEM_ERROR, msg);
    } else {
        rmq__cmd_init_response(&out, &fake, resp->code, resp->remark);
        for (int i = 0; i < resp->n_ext; i++)
            rmq__cmd_set_ext(&out, resp->ext[i].key, resp->ext[i].val);
        out.body = resp->body;
        out.body_len = resp->body_len;
    }
    if (rmq__conn_state(r->admin) == RMQ_CONN_OPEN) rmq__db_reply(r->admin, &out);
    out.body = NULL;
    out.body_len = 0;
    rmq__cmd_free(&out);
    rmq__conn_release(r->admin);
    free(r);
}

static db_client_t *find_client(db_broker_t *b, const char *group, const char *client_id)
{
    db_group_t *g = rmq__dbmap_get(&b->groups, group);
    if (!g) return NULL;
    for (int i = 0; i < g->n_members; i++)
        if (g->members[i]->client_id &&
            (!client_id || !strcmp(g->members[i]->client_id, client_id)))
            return g->members[i];
    return NULL;
}

static void relay(db_broker_t *b, rmq_conn_t *conn, rmq_cmd_t *req, const char *group,
                  const char *client_id, const char *body, size_t body_len, const char *extra_k,
                  const char *extra_v)
{
    db_client_t *c = find_client(b, group, client_id);
    char msg[600];
    if (!c) {
        snprintf(msg, sizeof(msg), "The Consumer <%s> <%s> not online", group,
                 client_id ? client_id : "");
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
        return;
    }
    rmq_cmd_t fw;
    rmq__cmd_init(&fw, req->code, RMQ_SERIALIZE_JSON);
    for (int i = 0; i < req->n_ext; i++)
        rmq__cmd_set_ext(&fw, req->ext[i].key, req->ext[i].val);
    if (extra_k) rmq__cmd_set_ext(&fw, extra_k, extra_v);
    fw.body = body;
    fw.body_len = body_len;
    relay_t *r = rmq__xcalloc(1, sizeof(*r));
    r->admin = rmq__conn_keep(conn);
    r->opaque = req->opaque;
    r->serialize = req->serialize;
    r->code = req->code;
    snprintf(r->who, sizeof(r->who), "<%s> <%s>", group, c->client_id);
    int rc = rmq__conn_request(c->conn, &fw, CALL_CLIENT_TIMEOUT_MS, 0, relay_done, r);
    fw.body = NULL;
    fw.body_len = 0;
    rmq__cmd_free(&fw);
    if (rc) {
        rmq__conn_release(r->admin);
        free(r);
        snprintf(msg, sizeof(msg), "invoke consumer <%s> <%s> Exception: %s", group, c->client_id,
                 rmq_err_str(rc));
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
    }
}

static void h_running_info(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    hdr_t h = {conn, req, 0};
    const char *group = hdr_str(&h, "consumerGroup");
    const char *client_id = hdr_str(&h, "clientId");
    if (h.failed) return;
    relay(broker_of(node), conn, req, group, client_id, NULL, 0, NULL, NULL);
}

/* ---- offsets reset and consumer status through the broker (Broker2Client) -------------------- */

/* Clients whose heartbeat version is below V3_0_7_SNAPSHOT (28) cannot serve these calls. */
#define V3_0_7_SNAPSHOT 28

static const char *version_desc(int v)
{
    static const char *const names[V3_0_7_SNAPSHOT] = {"V3_0_0_SNAPSHOT", "V3_0_0_ALPHA1",
                                                       "V3_0_0_BETA1",    "V3_0_0_BETA2",
                                                       "V3_0_0_BETA3",    "V3_0_0_BETA4",
                                                       "V3_0_0_BETA5",    "V3_0_0_BETA6_SNAPSHOT",
                                                       "V3_0_0_BETA6",    "V3_0_0_BETA7_SNAPSHOT",
                                                       "V3_0_0_BETA7",    "V3_0_0_BETA8_SNAPSHOT",
                                                       "V3_0_0_BETA8",    "V3_0_0_BETA9_SNAPSHOT",
                                                       "V3_0_0_BETA9",    "V3_0_0_FINAL",
                                                       "V3_0_1_SNAPSHOT", "V3_0_1",
                                                       "V3_0_2_SNAPSHOT", "V3_0_2",
                                                       "V3_0_3_SNAPSHOT", "V3_0_3",
                                                       "V3_0_4_SNAPSHOT", "V3_0_4",
                                                       "V3_0_5_SNAPSHOT", "V3_0_5",
                                                       "V3_0_6_SNAPSHOT", "V3_0_6"};
    return v >= 0 && v < V3_0_7_SNAPSHOT ? names[v] : "HIGHER_VERSION";
}

static void write_mq_key(rmq_buf_t *o, const char *broker, int qid, const char *topic)
{
    rmq__buf_append(o, "{\"brokerName\":", 14);
    rmq__fj_write_str(o, broker, strlen(broker), 0);
    rmq__buf_appendf(o, ",\"queueId\":%d,\"topic\":", qid);
    rmq__fj_write_str(o, topic, strlen(topic), 0);
    rmq__buf_append(o, "}", 1);
}

/* The iteration order of a java.util.HashMap<MessageQueue, V> filled with queues 0..n-1 of one
 * topic in queue order: MessageQueue.hashCode, spread h ^ (h >>> 16), default capacity 16
 * doubled while n > 3/4 of it, bins in index order, each bin in insertion order (bins of 8 that
 * would be treeified do not occur for these hashes). */
void rmq__db_mq_hash_order(const char *broker, const char *topic, int n, int *order)
{
    uint32_t cap = 16;
    while ((uint64_t)n * 4 > (uint64_t)cap * 3)
        cap *= 2;
    uint32_t bh = (uint32_t)rmq_java_hash(broker, strlen(broker));
    uint32_t th = (uint32_t)rmq_java_hash(topic, strlen(topic));
    uint32_t *bin = rmq__xmalloc(sizeof(*bin) * ((size_t)n + 1));
    for (int i = 0; i < n; i++) {
        uint32_t h = 31u * (31u * (31u + bh) + (uint32_t)i) + th;
        bin[i] = (h ^ (h >> 16)) & (cap - 1);
        order[i] = i;
    }
    for (int i = 1; i < n; i++) { /* stable: equal bins keep insertion order */
        int v = order[i], j = i;
        for (; j > 0 && bin[order[j - 1]] > bin[v]; j--)
            order[j] = order[j - 1];
        order[j] = v;
    }
    free(bin);
}

/* ResetOffsetBody (MessageQueue objects as keys) or, for C, ResetOffsetBodyForC (a list), both
 * in the HashMap order of Broker2Client's offsetTable. */
static void reset_body(rmq_buf_t *o, const char *broker, const char *topic, const int64_t *offs,
                       int n, int for_c)
{
    int *order = rmq__xmalloc(sizeof(*order) * ((size_t)n + 1));
    rmq__db_mq_hash_order(broker, topic, n, order);
    rmq__buf_append(o, for_c ? "{\"offsetTable\":[" : "{\"offsetTable\":{", 16);
    for (int k = 0; k < n; k++) {
        int i = order[k];
        if (k) rmq__buf_append(o, ",", 1);
        if (for_c) {
            rmq__buf_append(o, "{\"brokerName\":", 14);
            rmq__fj_write_str(o, broker, strlen(broker), 0);
            rmq__buf_appendf(o, ",\"offset\":%lld,\"queueId\":%d,\"topic\":", (long long)offs[i],
                             i);
            rmq__fj_write_str(o, topic, strlen(topic), 0);
            rmq__buf_append(o, "}", 1);
        } else {
            write_mq_key(o, broker, i, topic);
            rmq__buf_appendf(o, ":%lld", (long long)offs[i]);
        }
    }
    rmq__buf_append(o, for_c ? "]}" : "}}", 2);
    free(order);
}

/* INVOKE_BROKER_TO_RESET_OFFSET (AdminBrokerProcessor.resetOffset -> Broker2Client.resetOffset):
 * for each write queue the offset at the timestamp (the max offset for -1), unless the group's
 * committed offset is smaller and isForce is false; RESET_CONSUMER_CLIENT_OFFSET (oneway) to every
 * client of the group; the answer carries the table. The stored offsets change when the clients
 * persist them, as with the real broker. */
static void h_invoke_reset(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = broker_of(node);
    hdr_t h = {conn, req, 0};
    const char *topic = hdr_str(&h, "topic");
    const char *group = hdr_str(&h, "group");
    int64_t ts = hdr_i64(&h, "timestamp");
    const char *force_s = hdr_str(&h, "isForce");
    if (h.failed) return;
    int force = !strcasecmp(force_s, "true");
    char msg[700];
    db_topic_t *t = rmq__db_topic_get(b, topic);
    if (!t) {
        snprintf(msg, sizeof(msg),
                 "[reset-offset] reset offset failed, no topic in this broker. topic=%s", topic);
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
        return;
    }
    int n = t->write_q;
    int64_t *offs = rmq__xcalloc((size_t)n + 1, sizeof(*offs));
    for (int i = 0; i < n; i++) {
        int64_t co = rmq__db_offset_get(b, group, topic, i);
        if (co == -1) {
            snprintf(msg, sizeof(msg), "THe consumer group <%s> not exist", group);
            rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
            free(offs);
            return;
        }
        db_queue_t *q = rmq__db_queue(t, i);
        int64_t to = ts == -1 ? rmq__db_qmax(q) : rmq__db_search_time(q, ts);
        if (to < 0) to = 0;
        offs[i] = force || to < co ? to : co;
    }
    db_group_t *g = rmq__dbmap_get(&b->groups, group);
    if (!g || g->n_members == 0) {
        snprintf(
            msg, sizeof(msg),
            "Consumer not online, so can not reset offset, Group: %s Topic: %s Timestamp: %lld",
            group, topic, (long long)ts);
        rmq__db_reply_code(conn, req, RMQ_RESP_CONSUMER_NOT_ONLINE, msg);
        free(offs);
        return;
    }
    rmq_buf_t body;
    rmq__buf_init(&body);
    reset_body(&body, b->name, topic, offs, n, req->language == RMQ_LANG_CPP);
    rmq_cmd_t fw;
    rmq__cmd_init(&fw, RMQ_REQ_RESET_CONSUMER_CLIENT_OFFSET, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext(&fw, "topic", topic);
    rmq__cmd_set_ext(&fw, "group", group);
    rmq__cmd_set_ext_i64(&fw, "timestamp", ts);
    rmq__cmd_set_ext(&fw, "isForce", "false");
    fw.body = body.data;
    fw.body_len = body.len;
    int code = RMQ_RESP_SUCCESS;
    for (int i = 0; i < g->n_members; i++) {
        db_client_t *c = g->members[i];
        if (c->version < V3_0_7_SNAPSHOT) {
            snprintf(msg, sizeof(msg), "the client does not support this feature. version=%s",
                     version_desc(c->version));
            code = RMQ_RESP_SYSTEM_ERROR;
            break;
        }
        int rc = rmq__conn_request(c->conn, &fw, 0, RMQ_REQF_ONEWAY, NULL, NULL);
        if (rc)
            rmq_log_warn(DB_LOG, "%s: [reset-offset] cannot reach %s: %s", b->name, c->client_id,
                         rmq_err_str(rc));
    }
    fw.body = NULL;
    fw.body_len = 0;
    rmq__cmd_free(&fw);
    if (code == RMQ_RESP_SUCCESS) {
        body.len = 0;
        reset_body(&body, b->name, topic, offs, n, 0);
        rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &body);
    } else {
        rmq__db_reply_code(conn, req, code, msg);
    }
    rmq__buf_free(&body);
    free(offs);
}

/* INVOKE_BROKER_TO_GET_CONSUMER_STATUS (Broker2Client.getConsumeStatus): GET_CONSUMER_STATUS_FROM_
 * CLIENT to every client of the group (or only to clientAddr, compared with the client id), each
 * SUCCESS answer's messageQueueTable under its client id in consumerTable. Failed or late
 * clients are left out. */
typedef struct status_op {
    rmq_conn_t *admin; /* kept */
    int32_t opaque, serialize, code;
    int pending, n;
    char **ids;      /* client ids */
    rmq_buf_t *tabs; /* messageQueueTable of each answer (len 0: none) */
} status_op_t;

typedef struct status_call {
    status_op_t *op;
    int idx;
} status_call_t;

static void status_finish(status_op_t *op)
{
    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__buf_append(&o, "{\"consumerTable\":{", 18);
    int first = 1;
    for (int i = 0; i < op->n; i++) {
        if (op->tabs[i].len == 0) continue;
        if (!first) rmq__buf_append(&o, ",", 1);
        first = 0;
        rmq__fj_write_str(&o, op->ids[i], strlen(op->ids[i]), 0);
        rmq__buf_append(&o, ":", 1);
        rmq__buf_append(&o, op->tabs[i].data, op->tabs[i].len);
    }
    rmq__buf_append(&o, "},\"messageQueueTable\":{}}", 25);
    rmq_cmd_t fake;
    memset(&fake, 0, sizeof(fake));
    fake.code = op->code;
    fake.opaque = op->opaque;
    fake.serialize = op->serialize;
    if (rmq__conn_state(op->admin) == RMQ_CONN_OPEN)
        rmq__db_reply_body(op->admin, &fake, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
    for (int i = 0; i < op->n; i++) {
        free(op->ids[i]);
        rmq__buf_free(&op->tabs[i]);
    }
    free(op->ids);
    free(op->tabs);
    rmq__conn_release(op->admin);
    free(op);
}

static void status_done(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    status_call_t *sc = ud;
    status_op_t *op = sc->op;
    (void)errmsg;
    if (!err && resp->code == RMQ_RESP_SUCCESS && resp->body && resp->body_len) {
        char perr[128];
        rmq_fjdoc_t *d = rmq__fj_parse(resp->body, resp->body_len, perr, sizeof(perr));
        rmq_fj_t *t = d ? rmq__fj_get(rmq__fj_root(d), "messageQueueTable") : NULL;
        if (t && t->type == RMQ_FJ_OBJECT) rmq__fj_write(&op->tabs[sc->idx], t, 0);
        if (d) rmq__fj_free(d);
    }
    free(sc);
    if (--op->pending == 0) status_finish(op);
}

static void h_invoke_status(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = broker_of(node);
    hdr_t h = {conn, req, 0};
    const char *topic = hdr_str(&h, "topic");
    const char *group = hdr_str(&h, "group");
    if (h.failed) return;
    const char *only = rmq__cmd_ext(req, "clientAddr");
    if (only && !*only) only = NULL;
    char msg[600];
    db_group_t *g = rmq__dbmap_get(&b->groups, group);
    if (!g) { /* getConsumerGroupInfo(group) is null there */
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, "java.lang.NullPointerException");
        return;
    }
    if (g->n_members == 0) {
        snprintf(msg, sizeof(msg), "No Any Consumer online in the consumer group: [%s]", group);
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
        return;
    }
    for (int i = 0; i < g->n_members; i++)
        if (g->members[i]->version < V3_0_7_SNAPSHOT) {
            snprintf(msg, sizeof(msg), "the client does not support this feature. version=%s",
                     version_desc(g->members[i]->version));
            rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
            return;
        }
    status_op_t *op = rmq__xcalloc(1, sizeof(*op));
    op->admin = rmq__conn_keep(conn);
    op->opaque = req->opaque;
    op->serialize = req->serialize;
    op->code = req->code;
    op->ids = rmq__xcalloc((size_t)g->n_members, sizeof(char *));
    op->tabs = rmq__xcalloc((size_t)g->n_members, sizeof(rmq_buf_t));
    op->pending = 1; /* this function's own reference */
    rmq_cmd_t fw;
    rmq__cmd_init(&fw, RMQ_REQ_GET_CONSUMER_STATUS_FROM_CLIENT, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext(&fw, "topic", topic);
    rmq__cmd_set_ext(&fw, "group", group);
    for (int i = 0; i < g->n_members; i++) {
        db_client_t *c = g->members[i];
        const char *id = c->client_id ? c->client_id : "";
        if (only && strcmp(only, id)) continue;
        int k = op->n++;
        op->ids[k] = rmq__xstrdup(id);
        rmq__buf_init(&op->tabs[k]);
        status_call_t *sc = rmq__xmalloc(sizeof(*sc));
        sc->op = op;
        sc->idx = k;
        op->pending++;
        if (rmq__conn_request(c->conn, &fw, 5000, 0, status_done, sc)) {
            op->pending--;
            free(sc);
        }
        if (only) break;
    }
    rmq__cmd_free(&fw);
    if (--op->pending == 0) status_finish(op);
}

static db_msg_t *msg_by_id(db_broker_t *b, const char *id)
{
    uint8_t ip[16];
    int ip_len;
    int32_t port;
    int64_t off;
    if (!id || rmq__offset_msg_id_decode(id, strlen(id), ip, &ip_len, &port, &off)) return NULL;
    return rmq__db_find_phys(b, off);
}

static void h_consume_directly(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = broker_of(node);
    hdr_t h = {conn, req, 0};
    const char *group = hdr_str(&h, "consumerGroup");
    if (h.failed) return;
    const char *client_id = rmq__cmd_ext(req, "clientId");
    const char *id = rmq__cmd_ext(req, "msgId");
    db_msg_t *m = msg_by_id(b, id);
    if (!m) {
        char msg[300];
        snprintf(msg, sizeof(msg), "message id %s not found", id ? id : "(none)");
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
        return;
    }
    relay(b, conn, req, group, client_id, m->data, m->size, "brokerName", b->name);
}

/* ---- CONSUMER_SEND_MSG_BACK ------------------------------------------------------------------ */

/* Read back the fields of one stored message (CONSUMER_SEND_MSG_BACK, property filters). */
int rmq__db_stored_parse(const db_msg_t *m, db_stored_t *v)
{
    const uint8_t *p = (const uint8_t *)m->data, *end = p + m->size;
    memset(v, 0, sizeof(*v));
    uint32_t magic = rmq__rd32(p + 4);
    v->flag = (int32_t)rmq__rd32(p + 16);
    v->sys_flag = (int32_t)rmq__rd32(p + 36);
    v->born_ts = (int64_t)rmq__rd64(p + 40);
    const uint8_t *q = p + 48;
    v->born_ip_len = (v->sys_flag & RMQ_SYSFLAG_BORNHOST_V6) ? 16 : 4;
    memcpy(v->born_host, q, (size_t)v->born_ip_len);
    v->born_port = (int32_t)rmq__rd32(q + v->born_ip_len);
    q += v->born_ip_len + 4;
    q += 8; /* store timestamp */
    q += ((v->sys_flag & RMQ_SYSFLAG_STOREHOST_V6) ? 16 : 4) + 4;
    /* Every length is checked against the size: a message damaged in place
     * (rmq_devbroker_corrupt) is read by the message index when it leaves the store. */
    if (end - q < 4 + 8 + 4) return -1;
    v->reconsume = (int32_t)rmq__rd32(q);
    q += 4 + 8;
    v->body_len = rmq__rd32(q);
    q += 4;
    v->body = (const char *)q;
    size_t tll = magic == RMQ_MSG_MAGIC_V2 ? 2 : 1;
    if ((size_t)(end - q) < (size_t)v->body_len + tll) return -1;
    q += v->body_len;
    v->topic_len = tll == 2 ? rmq__rd16(q) : *q;
    q += tll;
    if ((size_t)(end - q) < v->topic_len + 2) return -1;
    v->topic = (const char *)q;
    q += v->topic_len;
    v->props_len = rmq__rd16(q);
    q += 2;
    v->props = (const char *)q;
    return (size_t)(end - q) < v->props_len ? -1 : 0;
}

static void h_send_back(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = broker_of(node);
    rmq_devbroker_t *db = node->db;
    hdr_t h = {conn, req, 0};
    int64_t off = hdr_i64(&h, "offset");
    const char *group = hdr_str(&h, "group");
    int64_t level = hdr_i64(&h, "delayLevel");
    int has_max = 0;
    int64_t max_re = hdr_opt_i64(&h, "maxReconsumeTimes", 0, &has_max);
    if (h.failed) return;
    char retry[300], msg[300];
    snprintf(retry, sizeof(retry), "%%RETRY%%%s", group);
    sys_topic(b, retry);
    db_msg_t *m = rmq__db_find_phys(b, off);
    db_stored_t v;
    if (!m || rmq__db_stored_parse(m, &v)) {
        snprintf(msg, sizeof(msg), "look message by offset failed, %lld", (long long)off);
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
        return;
    }
    char stored_topic[300];
    snprintf(stored_topic, sizeof(stored_topic), "%.*s", (int)v.topic_len, v.topic);
    /* SendMessageProcessor.asyncConsumerSendMsgBack: the group's config (created when
     * missing); no retry queue: nothing to do; the group's retryMaxTimes unless the client
     * (V3_4_9 or later) sends maxReconsumeTimes. */
    const db_subgroup_t *sg = rmq__db_subgroup_find(b, group);
    if (sg->retry_queue_nums <= 0) {
        rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
        return;
    }
    int64_t max = sg->retry_max_times;
    if (req->version >= VERSION_V3_4_9 && has_max) max = max_re;
    int dlq = v.reconsume >= max || level < 0;
    if (!dlq && level == 0) level = 3 + v.reconsume;
    if (level > 18) level = 18;

    rmq_buf_t pb;
    rmq__buf_init(&pb);
    static const char *const drop[] = {
        "WAIT", "DELAY", "ORIGIN_MESSAGE_ID", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", NULL};
    props_copy(&pb, v.props, v.props_len, drop);
    uint32_t vl = 0;
    const char *rt = rmq__props_find(v.props, v.props_len, "RETRY_TOPIC", 11, &vl);
    /* The original topic, copied now: storing may drop the old message (--max-bytes). */
    char back_topic[300];
    snprintf(back_topic, sizeof(back_topic), "%.*s", rt ? (int)vl : (int)strlen(stored_topic),
             rt ? rt : stored_topic);
    rmq__props_append_n(&pb, "RETRY_TOPIC", 11, rt ? rt : stored_topic,
                        rt ? vl : strlen(stored_topic));
    const char *oid = rmq__props_find(v.props, v.props_len, "ORIGIN_MESSAGE_ID", 17, &vl);
    char id[64];
    if (oid && vl)
        rmq__props_append_n(&pb, "ORIGIN_MESSAGE_ID", 17, oid, vl);
    else {
        offset_msg_id(b, m->phys, id);
        rmq__props_append(&pb, "ORIGIN_MESSAGE_ID", id);
    }
    rmq__props_append(&pb, "WAIT", "false");

    char dlq_topic[300];
    db_msg_in_t in = {.flag = v.flag,
                      .sys_flag = v.sys_flag,
                      .reconsume = rmq__reconsume_plus(v.reconsume, 1),
                      .born_ts = v.born_ts,
                      .born_host = v.born_host,
                      .born_ip_len = v.born_ip_len,
                      .born_port = v.born_port,
                      .body = v.body,
                      .body_len = v.body_len};
    if (dlq) {
        snprintf(dlq_topic, sizeof(dlq_topic), "%%DLQ%%%s", group);
        db_topic_t *t = sys_topic(b, dlq_topic);
        in.topic = dlq_topic;
        in.queue_id = 0;
        in.props = pb.data;
        in.props_len = pb.len;
        if (!rmq__db_store(b, t, &in, msg, sizeof(msg))) {
            rmq__buf_free(&pb);
            rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
            return;
        }
    } else {
        char lv[16];
        snprintf(lv, sizeof(lv), "%d", (int)level);
        rmq__props_append(&pb, "DELAY", lv);
        rmq__props_append(&pb, "REAL_TOPIC", retry);
        rmq__props_append(&pb, "REAL_QID", "0");
        in.topic = retry;
        in.queue_id = 0;
        in.props = pb.data;
        in.props_len = pb.len;
        rmq__db_store_delayed(b, &in, (int64_t)(delay_level_ms[level - 1] * db->delay_scale));
    }
    if (db->remote_ns) rmq__db_register_all(db);
    rmq__buf_free(&pb);
    rmq__db_stats_on_send_back(b, back_topic, group); /* incSendBackNums */
    rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
}

/* ---- locks ----------------------------------------------------------------------------------- */

static void h_lock(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req, int unlock)
{
    db_broker_t *b = broker_of(node);
    char key[600];
    rmq_fjdoc_t *doc = parse_body(conn, req, "lock body");
    if (!doc) return;
    rmq_fj_t *root = rmq__fj_root(doc);
    const char *group = rmq__fj_get_str(root, "consumerGroup");
    const char *client = rmq__fj_get_str(root, "clientId");
    rmq_fj_t *set = rmq__fj_get(root, "mqSet");
    if (!group || !client) {
        rmq__fj_free(doc);
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, "consumerGroup or clientId missing");
        return;
    }
    int64_t now = rmq__mono_ms();
    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__buf_appendf(&o, "{\"lockOKMQSet\":[");
    int first = 1;
    for (rmq_fj_t *mq = set && set->type == RMQ_FJ_ARRAY ? set->child : NULL; mq; mq = mq->next) {
        const char *topic = rmq__fj_get_str(mq, "topic");
        const char *bn = rmq__fj_get_str(mq, "brokerName");
        int32_t qid = 0;
        if (!topic || rmq__fj_get_i32(mq, "queueId", &qid)) continue;
        okey(key, sizeof(key), group, topic, qid);
        db_lock_t *l = rmq__dbmap_get(&b->locks, key);
        if (unlock) {
            if (l && strcmp(l->client_id, client) == 0) lock_free_v(rmq__dbmap_del(&b->locks, key));
            continue;
        }
        int ok = 0;
        if (!l) {
            l = rmq__xcalloc(1, sizeof(*l));
            l->client_id = rmq__xstrdup(client);
            rmq__dbmap_put(&b->locks, key, l);
            ok = 1;
        } else if (strcmp(l->client_id, client) == 0) {
            ok = 1;
        } else if (now - l->last_ms > node->db->lock_expire_ms) {
            free(l->client_id);
            l->client_id = rmq__xstrdup(client);
            ok = 1;
        }
        if (!ok) continue;
        l->last_ms = now;
        rmq__buf_appendf(&o, "%s{\"brokerName\":", first ? "" : ",");
        const char *bname = bn ? bn : b->name;
        rmq__fj_write_str(&o, bname, strlen(bname), 0);
        rmq__buf_appendf(&o, ",\"queueId\":%d,\"topic\":", qid);
        rmq__fj_write_str(&o, topic, strlen(topic), 0);
        rmq__buf_append(&o, "}", 1);
        first = 0;
    }
    rmq__buf_append(&o, "]}", 2);
    rmq__fj_free(doc);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, unlock ? NULL : &o);
    rmq__buf_free(&o);
}

static void h_lock_batch(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    h_lock(node, conn, req, 0);
}
static void h_unlock_batch(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    h_lock(node, conn, req, 1);
}

/* ---- topics (admin)
 * ------------------------------------------------------------------------------ */

static void h_create_topic(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = broker_of(node);
    hdr_t h = {conn, req, 0};
    const char *topic = hdr_str(&h, "topic");
    int64_t rq = hdr_i64(&h, "readQueueNums");
    int64_t wq = hdr_i64(&h, "writeQueueNums");
    int64_t perm = hdr_i64(&h, "perm");
    if (h.failed) return;
    char msg[300];
    if (!topic_char_ok(topic) || strcmp(topic, node->db->cluster) == 0 || rq < 0 || wq < 0 ||
        rq > 1024 || wq > 1024) {
        snprintf(msg, sizeof(msg), "The topic[%s] is conflict with system reserved words.", topic);
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
        return;
    }
    db_topic_t *t = rmq__db_topic_create(b, topic, rq ? (int)rq : 1, wq ? (int)wq : 1, (int)perm);
    if (rq == 0) t->read_q = 0;
    if (wq == 0) t->write_q = 0;
    if (node->db->remote_ns) rmq__db_register_all(node->db);
    rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
}

/* ---- REGISTER_BROKER towards a remote name server ------------------------------------------- */

static void topic_cfg_json(const char *key, void *val, void *ud)
{
    rmq_buf_t *o = ud;
    db_topic_t *t = val;
    if (o->data[o->len - 1] != '{') rmq__buf_append(o, ",", 1);
    rmq__fj_write_str(o, t->name, strlen(t->name), 0);
    rmq__buf_appendf(o,
                     ":{\"order\":false,\"perm\":%d,\"readQueueNums\":%d,\"topicFilterType\":"
                     "\"SINGLE_TAG\",\"topicName\":",
                     t->perm, t->read_q);
    rmq__fj_write_str(o, t->name, strlen(t->name), 0);
    rmq__buf_appendf(o, ",\"topicSysFlag\":0,\"writeQueueNums\":%d}", t->write_q);
}

static void register_done(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    db_broker_t *b = ud;
    if (err)
        rmq_log_warn(DB_LOG, "%s: REGISTER_BROKER failed: %s", b->name, errmsg);
    else if (resp->code != 0)
        rmq_log_warn(DB_LOG, "%s: REGISTER_BROKER answered %d %s", b->name, resp->code,
                     resp->remark ? resp->remark : "");
}

void rmq__db_register_all(rmq_devbroker_t *db)
{
    db->last_register_ms = rmq__mono_ms();
    for (int i = 0; i < db->n_brokers; i++) {
        db_broker_t *b = db->brokers[i];
        if (b->down || !b->node.t) continue;
        b->reg_version = b->data_version;
        rmq_buf_t o;
        rmq__buf_init(&o);
        rmq__buf_appendf(
            &o,
            "{\"filterServerList\":[],\"topicConfigSerializeWrapper\":{\"dataVersion\":"
            "{\"counter\":%lld,\"timestamp\":%lld},\"topicConfigTable\":{",
            (long long)b->data_version, (long long)rmq__now_ms());
        rmq__dbmap_each(&b->topics, topic_cfg_json, &o);
        rmq__buf_append(&o, "}}}", 3);
        rmq_cmd_t c;
        rmq__cmd_init(&c, RMQ_REQ_REGISTER_BROKER, RMQ_SERIALIZE_JSON);
        rmq__cmd_set_ext(&c, "brokerName", b->name);
        rmq__cmd_set_ext(&c, "brokerAddr", b->node.addr);
        rmq__cmd_set_ext(&c, "clusterName", db->cluster);
        rmq__cmd_set_ext(&c, "haServerAddr", b->node.addr);
        rmq__cmd_set_ext_i64(&c, "brokerId", 0);
        rmq__cmd_set_ext(&c, "compressed", "false");
        rmq__cmd_set_ext_i64(&c, "bodyCrc32",
                             (int64_t)(crc32(0, (const Bytef *)o.data, (uInt)o.len) & 0x7FFFFFFF));
        c.body = o.data;
        c.body_len = o.len;
        int rc = rmq__remoting_request(b->node.t, db->remote_ns, &c, 3000, register_done, b);
        if (rc)
            rmq_log_warn(DB_LOG, "%s: REGISTER_BROKER to %s: %s", b->name, db->remote_ns,
                         rmq_err_str(rc));
        c.body = NULL;
        c.body_len = 0;
        rmq__cmd_free(&c);
        rmq__buf_free(&o);
    }
}

/* ---- install --------------------------------------------------------------------------------- */

void rmq__db_broker_install(db_broker_t *b)
{
    db_node_t *n = &b->node;
    rmq__db_set_handler(n, RMQ_REQ_SEND_MESSAGE, h_send);
    rmq__db_set_handler(n, RMQ_REQ_SEND_MESSAGE_V2, h_send);
    rmq__db_set_handler(n, RMQ_REQ_SEND_BATCH_MESSAGE, h_send);
    rmq__db_set_handler(n, RMQ_REQ_PULL_MESSAGE, h_pull);
    rmq__db_set_handler(n, RMQ_REQ_QUERY_CONSUMER_OFFSET, h_query_offset);
    rmq__db_set_handler(n, RMQ_REQ_UPDATE_CONSUMER_OFFSET, h_update_offset);
    rmq__db_set_handler(n, RMQ_REQ_UPDATE_AND_CREATE_TOPIC, h_create_topic);
    rmq__db_set_handler(n, RMQ_REQ_SEARCH_OFFSET_BY_TIMESTAMP, h_search_offset);
    rmq__db_set_handler(n, RMQ_REQ_GET_MAX_OFFSET, h_max_offset);
    rmq__db_set_handler(n, RMQ_REQ_GET_MIN_OFFSET, h_min_offset);
    rmq__db_set_handler(n, RMQ_REQ_HEART_BEAT, h_heartbeat);
    rmq__db_set_handler(n, RMQ_REQ_UNREGISTER_CLIENT, h_unregister);
    rmq__db_set_handler(n, RMQ_REQ_CONSUMER_SEND_MSG_BACK, h_send_back);
    rmq__db_set_handler(n, RMQ_REQ_GET_CONSUMER_LIST_BY_GROUP, h_consumer_list);
    rmq__db_set_handler(n, RMQ_REQ_LOCK_BATCH_MQ, h_lock_batch);
    rmq__db_set_handler(n, RMQ_REQ_UNLOCK_BATCH_MQ, h_unlock_batch);
    rmq__db_set_handler(n, RMQ_REQ_CHECK_CLIENT_CONFIG, rmq__db_h_check_client_config);
    rmq__db_set_handler(n, RMQ_REQ_GET_CONSUMER_CONNECTION_LIST, h_connection_list);
    rmq__db_set_handler(n, RMQ_REQ_GET_CONSUME_STATS, h_consume_stats);
    rmq__db_set_handler(n, RMQ_REQ_GET_CONSUMER_RUNNING_INFO, h_running_info);
    rmq__db_set_handler(n, RMQ_REQ_INVOKE_BROKER_TO_RESET_OFFSET, h_invoke_reset);
    rmq__db_set_handler(n, RMQ_REQ_INVOKE_BROKER_TO_GET_CONSUMER_STATUS, h_invoke_status);
    rmq__db_set_handler(n, RMQ_REQ_CONSUME_MESSAGE_DIRECTLY, h_consume_directly);
    rmq__db_index_install(b); /* QUERY_MESSAGE, VIEW_MESSAGE_BY_ID */
    rmq__db_group_install(b);
    rmq__db_admin_install(b);
}
