/*
 * devbroker_broker.c -- the broker role of the development broker: SEND_MESSAGE(_V2),
 * SEND_BATCH_MESSAGE, CONSUMER_SEND_MSG_BACK (retry topic, delay levels, DLQ),
 * UPDATE_AND_CREATE_TOPIC, and the install of every handler a broker serves: PULL_MESSAGE and
 * long polling (devbroker_pull.c), offsets and locks (devbroker_offset.c), clients, groups and
 * the calls relayed to consumers (devbroker_client.c), the message index, subscription groups
 * and the admin requests.
 *
 * PROTOCOL.md 2.3 (per-command rules), 4 (stored format), 6.11 (send back), 9 (%RETRY% / %DLQ%).
 *
 * Threads: the broker thread only.
 */
#include "devbroker_int.h"
#include "protocol/message.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#define VERSION_V3_4_9 121 /* MQVersion.Version.V3_4_9.ordinal() */

static const int64_t delay_level_ms[18] = {1000,   5000,   10000,   30000,   60000,   120000,
                                           180000, 240000, 300000,  360000,  420000,  480000,
                                           540000, 600000, 1200000, 1800000, 3600000, 7200000};

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
    db_broker_t *b = rmq__db_broker_of(node);
    rmq_devbroker_t *db = node->db;
    int v2 = req->code == RMQ_REQ_SEND_MESSAGE_V2 || req->code == RMQ_REQ_SEND_BATCH_MESSAGE;
    db_hdr_t h = {conn, req, 0};
    rmq__db_hdr_str(&h, v2 ? "a" : "producerGroup");
    const char *topic = rmq__db_hdr_str(&h, v2 ? "b" : "topic");
    rmq__db_hdr_str(&h, v2 ? "c" : "defaultTopic");
    rmq__db_hdr_i64(&h, v2 ? "d" : "defaultTopicQueueNums");
    int64_t qid = rmq__db_hdr_i64(&h, v2 ? "e" : "queueId");
    int64_t sys_flag = rmq__db_hdr_i64(&h, v2 ? "f" : "sysFlag");
    int64_t born_ts = rmq__db_hdr_i64(&h, v2 ? "g" : "bornTimestamp");
    int64_t flag = rmq__db_hdr_i64(&h, v2 ? "h" : "flag");
    const char *props = rmq__cmd_ext(req, v2 ? "i" : "properties");
    int64_t reconsume = rmq__db_hdr_opt_i64(&h, v2 ? "j" : "reconsumeTimes", 0, NULL);
    int has_max = 0;
    int64_t max_re = rmq__db_hdr_opt_i64(&h, v2 ? "l" : "maxReconsumeTimes", 0, &has_max);
    if (h.failed) return;
    if (!props) props = "";
    char msg[512];

    if (!topic_char_ok(topic)) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR,
                            "The specified topic[%s] contains illegal characters, allowing only "
                            "^[%%|a-zA-Z0-9_-]+$",
                            topic);
        return;
    }
    if (strcmp(topic, "TBW102") == 0 || strcmp(topic, "SCHEDULE_TOPIC_XXXX") == 0) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_NO_PERMISSION,
                            "Sending message to topic[%s] is forbidden.", topic);
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
        rmq__db_reply_codef(conn, req, RMQ_RESP_NO_PERMISSION,
                            "the topic[%s] sending message is forbidden", topic);
        return;
    }
    if (qid >= t->write_q) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR,
                            "request queueId[%d] is illegal, topic:%s Producer: %s", (int)qid,
                            topic, rmq__conn_peer(conn));
        return;
    }
    if (qid < 0) qid = rand() % (t->write_q > 0 ? t->write_q : 1);

    int batch = req->code == RMQ_REQ_SEND_BATCH_MESSAGE;
    if (batch && strncmp(topic, "%RETRY%", 7) == 0) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_MESSAGE_ILLEGAL,
                            "batch request does not support retry group %s", topic);
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

/* ---- CONSUMER_SEND_MSG_BACK ------------------------------------------------------------------ */

static void h_send_back(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = rmq__db_broker_of(node);
    rmq_devbroker_t *db = node->db;
    db_hdr_t h = {conn, req, 0};
    int64_t off = rmq__db_hdr_i64(&h, "offset");
    const char *group = rmq__db_hdr_str(&h, "group");
    int64_t level = rmq__db_hdr_i64(&h, "delayLevel");
    int has_max = 0;
    int64_t max_re = rmq__db_hdr_opt_i64(&h, "maxReconsumeTimes", 0, &has_max);
    if (h.failed) return;
    char retry[300], msg[300];
    snprintf(retry, sizeof(retry), "%%RETRY%%%s", group);
    sys_topic(b, retry);
    db_msg_t *m = rmq__db_find_phys(b, off);
    db_stored_t v;
    if (!m || rmq__db_stored_parse(m, &v)) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR, "look message by offset failed, %lld",
                            (long long)off);
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
    db_msg_in_t in = rmq__db_stored_in(&v);
    in.reconsume = rmq__reconsume_plus(v.reconsume, 1);
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

/* ---- topics (admin)
 * ------------------------------------------------------------------------------ */

static void h_create_topic(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = rmq__db_broker_of(node);
    db_hdr_t h = {conn, req, 0};
    const char *topic = rmq__db_hdr_str(&h, "topic");
    int64_t rq = rmq__db_hdr_i64(&h, "readQueueNums");
    int64_t wq = rmq__db_hdr_i64(&h, "writeQueueNums");
    int64_t perm = rmq__db_hdr_i64(&h, "perm");
    if (h.failed) return;
    if (!topic_char_ok(topic) || strcmp(topic, node->db->cluster) == 0 || rq < 0 || wq < 0 ||
        rq > 1024 || wq > 1024) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR,
                            "The topic[%s] is conflict with system reserved words.", topic);
        return;
    }
    db_topic_t *t = rmq__db_topic_create(b, topic, rq ? (int)rq : 1, wq ? (int)wq : 1, (int)perm);
    if (rq == 0) t->read_q = 0;
    if (wq == 0) t->write_q = 0;
    if (node->db->remote_ns) rmq__db_register_all(node->db);
    rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
}

/* ---- install --------------------------------------------------------------------------------- */

void rmq__db_broker_install(db_broker_t *b)
{
    db_node_t *n = &b->node;
    rmq__db_set_handler(n, RMQ_REQ_SEND_MESSAGE, h_send);
    rmq__db_set_handler(n, RMQ_REQ_SEND_MESSAGE_V2, h_send);
    rmq__db_set_handler(n, RMQ_REQ_SEND_BATCH_MESSAGE, h_send);
    rmq__db_set_handler(n, RMQ_REQ_UPDATE_AND_CREATE_TOPIC, h_create_topic);
    rmq__db_set_handler(n, RMQ_REQ_CONSUMER_SEND_MSG_BACK, h_send_back);
    rmq__db_set_handler(n, RMQ_REQ_CHECK_CLIENT_CONFIG, rmq__db_h_check_client_config);
    rmq__db_pull_install(b);   /* PULL_MESSAGE */
    if (b->node.db->rocketmq5) {
        rmq__db_pop_install(b);    /* POP_MESSAGE, (BATCH_)ACK_MESSAGE, CHANGE_..INVISIBLETIME */
        rmq__db_assign_install(b); /* QUERY_ASSIGNMENT, SET/GET_ALL_MESSAGE_REQUEST_MODE */
    }
    rmq__db_offset_install(b); /* offsets, LOCK/UNLOCK_BATCH_MQ */
    rmq__db_client_install(b); /* HEART_BEAT, consumer groups, calls relayed to consumers */
    rmq__db_index_install(b);  /* QUERY_MESSAGE, VIEW_MESSAGE_BY_ID */
    rmq__db_group_install(b);
    rmq__db_admin_install(b);
}
