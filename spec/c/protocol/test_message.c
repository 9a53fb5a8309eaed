/*
 * test_message.c -- the message decoder against every PULL_MESSAGE response captured from a real
 * 4.9.4 broker (spec/fixtures/wire/<session>/index.json lists the decoded messages), the
 * stored-format encoder (byte-identical re-encoding, PROTOCOL 10.5), compressed and IPv6
 * messages, properties rules (4.4, 10.4), ids (10.3, msgid.json) and damaged bodies.
 */
#include "protocol/message.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

#include "test_util.h"

/* A captured frame: [4 L][4 type<<24|H][header H][body]. */
typedef struct frame {
    rmq_rbuf_t *rb;
    const char *body;
    size_t body_len;
} frame_t;

static frame_t load_frame(const char *session, const char *file)
{
    size_t len, off;
    char *raw = test_wire_frame(session, file, &len, &off);
    frame_t fr;
    fr.rb = rmq__rbuf_new(len);
    memcpy(fr.rb->data, raw, len);
    free(raw);
    fr.body = fr.rb->data + off;
    fr.body_len = len - off;
    return fr;
}

static int sveq(const char *p, uint32_t n, const char *s)
{
    return s && strlen(s) == n && memcmp(p, s, n) == 0;
}

static int64_t ext_i64(json_t *frame, const char *key)
{
    json_t *v =
        json_object_get(json_object_get(json_object_get(frame, "header"), "extFields"), key);
    return v ? strtoll(json_string_value(v), NULL, 10) : -1;
}

static int count_pair(void *ud, const char *k, size_t kl, const char *v, size_t vl)
{
    (*(int *)ud)++;
    return 0;
}

/* ---- what SEND_MESSAGE_V2 told the producer: UNIQ_KEY -> (offset msgId, frame) ---------- */

typedef struct sent {
    char uniq[64];
    char msg_id[64];
    char session[64];
    char file[128];
} sent_t;
static sent_t sent[256];
static int nsent;

/* The frame numbered seq (index.json may hold only some frames of a session). */
static json_t *frame_by_seq(json_t *frames, json_int_t seq)
{
    size_t i;
    json_t *f = json_array_get(frames, (size_t)(seq - 1));
    if (f && json_integer_value(json_object_get(f, "seq")) == seq) return f;
    json_array_foreach(frames, i, f)
    {
        if (json_integer_value(json_object_get(f, "seq")) == seq) return f;
    }
    return NULL;
}

static void collect_sends(const char *session, json_t *frames)
{
    size_t i;
    json_t *f;
    json_array_foreach(frames, i, f)
    {
        json_t *ext = json_object_get(json_object_get(f, "header"), "extFields");
        const char *kind = json_string_value(json_object_get(f, "kind"));
        int code = (int)json_integer_value(json_object_get(f, "request_code"));
        const char *props, *uk;
        json_t *resp;
        uint32_t ulen;
        if ((code != 310 && code != 10) || strcmp(kind, "request") != 0) continue;
        props = json_string_value(json_object_get(ext, code == 310 ? "i" : "properties"));
        if (!props) continue;
        uk = rmq__props_find(props, strlen(props), "UNIQ_KEY", 8, &ulen);
        resp = frame_by_seq(frames, json_integer_value(json_object_get(f, "response_seq")));
        if (!uk || !resp || nsent >= 256) continue;
        sent_t *s = &sent[nsent++];
        snprintf(s->uniq, sizeof(s->uniq), "%.*s", (int)ulen, uk);
        snprintf(s->msg_id, sizeof(s->msg_id), "%s",
                 json_string_value(json_object_get(
                     json_object_get(json_object_get(resp, "header"), "extFields"), "msgId")));
        snprintf(s->session, sizeof(s->session), "%.63s", session);
        snprintf(s->file, sizeof(s->file), "%s", json_string_value(json_object_get(f, "file")));
    }
}

static const sent_t *find_sent(const char *uniq, uint32_t len)
{
    for (int i = 0; i < nsent; i++)
        if (sveq(uniq, len, sent[i].uniq)) return &sent[i];
    return NULL;
}

/* ---- captured pulls ------------------------------------------------------------------- */

static int n_pulls, n_msgs, n_compressed, n_idmatch, n_retry, n_origin;
static char origin_ids[64][64];
static int n_origin_ids;
static char all_ids[1024][64];
static int n_all_ids;

static void check_message(const char *where, rmq_msg_t *m, json_t *jm, const frame_t *fr)
{
    char buf[64], id[64];
    const char *k;
    json_t *v, *props = json_object_get(jm, "properties");
    int pairs = 0;
    uint32_t vlen;
    const char *p;

#define IEQ(field, key)                                                                            \
    CHECKF((int64_t)m->field == json_integer_value(json_object_get(jm, key)), "%s %s", where, key)
    IEQ(body_crc, "bodyCRC");
    IEQ(queue_id, "queueId");
    IEQ(flag, "flag");
    IEQ(queue_offset, "queueOffset");
    IEQ(commit_log_offset, "commitLogOffset");
    IEQ(sys_flag, "sysFlag");
    IEQ(born_timestamp, "bornTimestamp");
    IEQ(store_timestamp, "storeTimestamp");
    IEQ(reconsume_times, "reconsumeTimes");
    IEQ(prepared_tx_offset, "preparedTransactionOffset");
#undef IEQ
    rmq_msg_host(m, 0, buf);
    CHECKF(strcmp(buf, json_string_value(json_object_get(jm, "bornHost"))) == 0, "%s born %s",
           where, buf);
    rmq_msg_host(m, 1, buf);
    CHECKF(strcmp(buf, json_string_value(json_object_get(jm, "storeHost"))) == 0, "%s store %s",
           where, buf);
    CHECK(
        sveq(m->store_topic, m->store_topic_len, json_string_value(json_object_get(jm, "topic"))));
    CHECK(sveq(m->topic, m->topic_len, json_string_value(json_object_get(jm, "topic"))));
    CHECK(sveq(m->broker_name, m->broker_name_len, "broker-a"));
    CHECK(m->owner != NULL);

    /* Body: stored length, inflated length for compressed ones, and the preview text. */
    if (json_object_get(jm, "compression")) {
        n_compressed++;
        CHECK(strcmp(json_string_value(json_object_get(jm, "compression")), "zlib") == 0);
        CHECKF((int64_t)m->body_len ==
                   json_integer_value(json_object_get(jm, "uncompressedBodyLength")),
               "%s inflated %u", where, m->body_len);
        CHECK(m->body < fr->rb->data || m->body >= fr->rb->data + fr->rb->len);
    } else {
        const char *prev = json_string_value(json_object_get(jm, "bodyPreview"));
        CHECK((int64_t)m->body_len == json_integer_value(json_object_get(jm, "bodyLength")));
        CHECK(m->body >= fr->body && m->body + m->body_len <= fr->body + fr->body_len);
        CHECK(prev && m->body_len >= strlen(prev) && memcmp(m->body, prev, strlen(prev)) == 0);
    }

    /* Properties: every pair of index.json, nothing else; tags/keys/uniq_key views. */
    json_object_foreach(props, k, v)
    {
        p = rmq_msg_prop(m, k, &vlen);
        CHECKF(p && sveq(p, vlen, json_string_value(v)), "%s property %s", where, k);
    }
    rmq__props_foreach(m->props, m->props_len, count_pair, &pairs);
    CHECK((size_t)pairs == json_object_size(props));
    v = json_object_get(props, "TAGS");
    CHECK(v ? sveq(m->tags, m->tags_len, json_string_value(v)) : m->tags_len == 0);
    v = json_object_get(props, "KEYS");
    CHECK(v ? sveq(m->keys, m->keys_len, json_string_value(v)) : m->keys_len == 0);
    v = json_object_get(props, "UNIQ_KEY");
    CHECK(v ? sveq(m->uniq_key, m->uniq_key_len, json_string_value(v)) : m->uniq_key_len == 0);

    /* offsetMsgId: what the broker answered the producer's SEND for this UNIQ_KEY. */
    CHECK(rmq_msg_offset_msg_id(m, id) == 32 && strlen(id) == 32);
    if (n_all_ids < 1024) strcpy(all_ids[n_all_ids++], id);
    if (m->reconsume_times == 0 && m->uniq_key_len) {
        const sent_t *s = find_sent(m->uniq_key, m->uniq_key_len);
        if (s) {
            n_idmatch++;
            CHECKF(strcmp(s->msg_id, id) == 0, "%s offsetMsgId %s != SEND msgId %s", where, id,
                   s->msg_id);
            if (json_object_get(jm, "compression")) {
                /* The producer's compressed bytes inflate to the same body. */
                frame_t sf = load_frame(s->session, s->file);
                uLongf dl = m->body_len + 16;
                char *d = malloc(dl);
                CHECK(uncompress((Bytef *)d, &dl, (const Bytef *)sf.body, sf.body_len) == Z_OK);
                CHECK(dl == m->body_len && memcmp(d, m->body, dl) == 0);
                free(d);
                rmq__rbuf_release(sf.rb);
            }
        }
    }
    p = rmq_msg_prop(m, "ORIGIN_MESSAGE_ID", &vlen);
    if (p && n_origin_ids < 64) snprintf(origin_ids[n_origin_ids++], 64, "%.*s", (int)vlen, p);

    /* Retry deliveries: RETRY_TOPIC restored, store_topic kept. */
    p = rmq_msg_prop(m, "RETRY_TOPIC", &vlen);
    if (p) {
        char group_topic[128];
        rmq_msg_t copy = *m;
        n_retry++;
        snprintf(group_topic, sizeof(group_topic), "%.*s", (int)m->store_topic_len, m->store_topic);
        CHECK(rmq__msg_restore_retry_topic_for(&copy, "%RETRY%other", 12) == 0);
        CHECK(copy.topic == m->topic);
        CHECK(rmq__msg_restore_retry_topic_for(&copy, group_topic, strlen(group_topic)) == 1);
        CHECK(copy.topic == p && copy.topic_len == vlen);
        CHECK(copy.store_topic == m->store_topic && copy.store_topic_len == m->store_topic_len);
    } else {
        rmq_msg_t copy = *m;
        CHECK(rmq__msg_restore_retry_topic(&copy) == 0 && copy.topic == m->topic);
    }
}

static void check_pull(const char *session, json_t *f)
{
    json_t *msgs = json_object_get(f, "messages"), *jm;
    const char *file = json_string_value(json_object_get(f, "file"));
    frame_t fr = load_frame(session, file);
    rmq_msgset_t *set = NULL, *raw = NULL;
    char err[256] = "", where[256];
    int64_t minoff = ext_i64(f, "minOffset"), maxoff = ext_i64(f, "maxOffset");
    size_t i;
    rmq_buf_t re;

    n_pulls++;
    CHECK((int64_t)fr.body_len == json_integer_value(json_object_get(f, "body_length")));
    CHECKF(rmq__msgset_decode(fr.rb, fr.body, fr.body_len, "broker-a", minoff, maxoff, &set, err,
                              sizeof(err)) == RMQ_OK,
           "%s/%s: %s", session, file, err);
    CHECK(set && (size_t)set->n == json_array_size(msgs));
    CHECK(fr.rb->refs == 2); /* the set holds the frame */
    json_array_foreach(msgs, i, jm)
    {
        if (i >= (size_t)set->n) break;
        snprintf(where, sizeof(where), "%s/%s msg %zu", session, file, i);
        check_message(where, &set->msgs[i], jm, &fr);
        CHECK(set->msgs[i].min_offset == minoff && set->msgs[i].max_offset == maxoff);
        n_msgs++;
    }

    /* Re-encoding the raw (still compressed) views gives the captured body byte for byte. */
    CHECK(rmq__msgset_decode_ex(fr.rb, fr.body, fr.body_len, "broker-a", minoff, maxoff,
                                RMQ_DECODE_RAW_BODY, &raw, err, sizeof(err)) == RMQ_OK);
    rmq__buf_init(&re);
    for (int j = 0; j < raw->n; j++) {
        CHECK((int64_t)rmq__msg_stored_size(&raw->msgs[j]) ==
              json_integer_value(json_object_get(json_array_get(msgs, (size_t)j), "totalSize")));
        CHECK(rmq__msg_encode_stored(&re, &raw->msgs[j]) == 0);
    }
    CHECKF(re.len == fr.body_len && memcmp(re.data, fr.body, re.len) == 0, "%s/%s re-encode",
           session, file);
    rmq__buf_free(&re);

    /* Release the messages one by one (as consumed), then the creator references. */
    for (int j = 0; j < raw->n; j++)
        rmq__msg_release(&raw->msgs[j]);
    rmq__msgset_release(raw);
    for (int j = set->n - 1; j >= 0; j--)
        rmq__msg_release(&set->msgs[j]);
    CHECK(fr.rb->refs == 2);
    rmq__msgset_release(set);
    CHECK(fr.rb->refs == 1);
    rmq__rbuf_release(fr.rb);
}

static void test_captures(void)
{
    char names[32][256];
    int nn = test_wire_sessions(names, 32);
    CHECK(nn > 0);
    json_t *idx[32];
    for (int s = 0; s < nn; s++) {
        idx[s] = test_wire_index(names[s]);
        if (idx[s]) collect_sends(names[s], json_object_get(idx[s], "frames"));
    }
    for (int s = 0; s < nn; s++) {
        size_t i;
        json_t *f;
        if (!idx[s]) continue;
        json_array_foreach(json_object_get(idx[s], "frames"), i, f)
        {
            if (json_is_array(json_object_get(f, "messages"))) check_pull(names[s], f);
        }
        json_decref(idx[s]);
    }
    /* A retry's ORIGIN_MESSAGE_ID is the offsetMsgId of the first delivery. */
    for (int i = 0; i < n_origin_ids; i++) {
        int found = 0;
        for (int j = 0; j < n_all_ids && !found; j++)
            found = strcmp(origin_ids[i], all_ids[j]) == 0;
        CHECKF(found, "ORIGIN_MESSAGE_ID %s matches no pulled message", origin_ids[i]);
        n_origin += found;
    }
    printf("captures: %d pulls, %d messages (%d compressed, %d retries), %d ids matched SEND "
           "responses, %d origin ids\n",
           n_pulls, n_msgs, n_compressed, n_retry, n_idmatch, n_origin);
    CHECK(n_pulls >= 30 && n_msgs >= 500 && n_compressed >= 2 && n_retry >= 2);
    CHECK(n_idmatch >= 20 && n_origin >= 2);
}

/* ---- PROTOCOL 10.5: one stored message ------------------------------------------------ */

static const char V105_HEX[] =
    "0000009cdaa320a777d189820000000000000000000000000000000500000000000003e800000000000001802b"
    "a9f400c0a800020000c350000001802ba9f47bc0a8000100002a9f000000000000000000000000000000054865"
    "6c6c6f09546f70696354657374003354414753015461674102554e49515f4b4559013746303030303031304132"
    "423138423441414332303030303030303030303030";

static rmq_msg_t v105_msg(void)
{
    static const char props[] = "TAGS\001TagA\002UNIQ_KEY\0017F0000010A2B18B4AAC2000000000000";
    rmq_msg_t m;
    memset(&m, 0, sizeof(m));
    m.queue_offset = 5;
    m.commit_log_offset = 1000;
    m.born_timestamp = 1650000000000LL;
    memcpy(m.born_host, "\xc0\xa8\x00\x02", 4);
    m.born_port = 50000;
    m.store_timestamp = 1650000000123LL;
    memcpy(m.store_host, "\xc0\xa8\x00\x01", 4);
    m.store_port = 10911;
    m.body = "Hello";
    m.body_len = 5;
    m.topic = "TopicTest";
    m.topic_len = 9;
    m.props = props;
    m.props_len = sizeof(props) - 1;
    return m;
}

static void test_vector_10_5(void)
{
    char want[256], id[64], host[64];
    size_t n = test_unhex(V105_HEX, want);
    rmq_msg_t m = v105_msg();
    rmq_buf_t b;
    rmq_msgset_t *set;
    char err[128];
    rmq__buf_init(&b);
    CHECK(n == 156);
    CHECK(rmq__msg_stored_size(&m) == 156);
    CHECK(rmq__msg_encode_stored(&b, &m) == 0);
    CHECK(b.len == 156 && memcmp(b.data, want, 156) == 0);

    CHECK(rmq__msgset_decode(NULL, want, n, NULL, 3, 9, &set, err, sizeof(err)) == RMQ_OK);
    CHECK(set->n == 1);
    rmq_msg_t *d = &set->msgs[0];
    CHECK(d->body_crc == 0x77d18982);
    CHECK(sveq(d->uniq_key, d->uniq_key_len, "7F0000010A2B18B4AAC2000000000000"));
    CHECK(sveq(d->tags, d->tags_len, "TagA") && d->keys_len == 0);
    CHECK(sveq(d->body, d->body_len, "Hello") && sveq(d->topic, d->topic_len, "TopicTest"));
    CHECK(d->broker_name == NULL && d->min_offset == 3 && d->max_offset == 9);
    CHECK(rmq_msg_offset_msg_id(d, id) == 32 &&
          strcmp(id, "C0A8000100002A9F00000000000003E8") == 0);
    CHECK(rmq_msg_host(d, 0, host) > 0 && strcmp(host, "192.168.0.2:50000") == 0);
    CHECK(rmq_msg_host(d, 1, host) > 0 && strcmp(host, "192.168.0.1:10911") == 0);
    rmq__msg_release(d);
    rmq__msgset_release(set);

    /* 10.3 */
    CHECK(rmq__offset_msg_id((const uint8_t *)"\xc0\xa8\x00\x01", 4, 10911, 123456789, id) == 32);
    CHECK(strcmp(id, "C0A8000100002A9F00000000075BCD15") == 0);
    rmq__buf_free(&b);
}

/* ---- compressed and IPv6 messages built with the encoder ------------------------------ */

static void test_compressed_and_ipv6(void)
{
    char plain[10000], err[256], host[64], id[64];
    rmq_buf_t z, body;
    rmq_msgset_t *set;
    rmq_msg_t m = v105_msg();
    uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0x02};
    for (size_t i = 0; i < sizeof(plain); i++)
        plain[i] = (char)('a' + (i * 7 + i / 13) % 26);
    rmq__buf_init(&z);
    rmq__buf_init(&body);
    CHECK(rmq__zlib_deflate(plain, sizeof(plain), 5, &z) == 0 && z.len < sizeof(plain));

    /* 1: Java zlib (0x301) with IPv6 born and store hosts; 2: Go/C++ zlib (0x1); 3: LZ4. */
    m.body = z.data;
    m.body_len = (uint32_t)z.len;
    m.sys_flag = 0x301 | RMQ_SYSFLAG_BORNHOST_V6 | RMQ_SYSFLAG_STOREHOST_V6;
    memcpy(m.born_host, v6, 16);
    memcpy(m.store_host, v6, 16);
    m.store_host[15] = 3;
    CHECK(rmq__msg_encode_stored(&body, &m) == 0);
    m.sys_flag = 0x1;
    m.queue_offset = 6;
    CHECK(rmq__msg_encode_stored(&body, &m) == 0);
    m.sys_flag = 0x101;
    m.queue_offset = 7;
    CHECK(rmq__msg_encode_stored(&body, &m) == 0);

    rmq_rbuf_t *rb = rmq__rbuf_new(body.len);
    memcpy(rb->data, body.data, body.len);
    CHECK(rmq__msgset_decode(rb, rb->data, rb->len, "b", 0, 8, &set, err, sizeof(err)) ==
          RMQ_ERR_BAD_MESSAGE);
    CHECKF(strstr(err, "LZ4") && strstr(err, "queueOffset 7"), "%s", err);
    CHECK(set->n == 2);
    for (int i = 0; i < set->n; i++) {
        rmq_msg_t *d = &set->msgs[i];
        CHECK(d->body_len == sizeof(plain) && memcmp(d->body, plain, sizeof(plain)) == 0);
        CHECK(sveq(d->tags, d->tags_len, "TagA"));
    }
    rmq_msg_t *d = &set->msgs[0];
    CHECK(d->sys_flag == (0x301 | 0x30));
    CHECK(memcmp(d->born_host, v6, 16) == 0 && d->born_port == 50000 && d->store_port == 10911);
    CHECK(rmq_msg_host(d, 0, host) > 0 && strcmp(host, "[2001:db8:0:0:0:0:1:2]:50000") == 0);
    CHECK(rmq_msg_host(d, 1, host) > 0 && strcmp(host, "[2001:db8:0:0:0:0:1:3]:10911") == 0);
    CHECK(rmq_msg_offset_msg_id(d, id) == 56);
    CHECK(strcmp(id, "20010DB800000000000000000001000300002A9F00000000000003E8") == 0);
    CHECK(set->msgs[1].sys_flag == 1 && set->msgs[1].queue_offset == 6);
    rmq__msgset_release(set);
    rmq__msg_release(&set->msgs[1]);
    CHECK(rb->refs == 2);
    rmq__msg_release(&set->msgs[0]);
    CHECK(rb->refs == 1);

    /* Raw decode keeps the compressed bytes and re-encodes all three exactly. */
    CHECK(rmq__msgset_decode_ex(rb, rb->data, rb->len, "b", 0, 8, RMQ_DECODE_RAW_BODY, &set, err,
                                sizeof(err)) == RMQ_OK);
    CHECK(set->n == 3);
    rmq_buf_t re;
    rmq__buf_init(&re);
    for (int i = 0; i < set->n; i++)
        CHECK(rmq__msg_encode_stored(&re, &set->msgs[i]) == 0);
    CHECK(re.len == body.len && memcmp(re.data, body.data, re.len) == 0);
    set->refs = 1;
    rmq__msgset_release(set);
    rmq__buf_free(&re);

    /* A ZSTD type and an unknown type are named; a corrupt zlib stream is reported. */
    rb->data[4 + 4 + 4 + 4 + 4 + 8 + 8 + 2] =
        0x02; /* first message's sysFlag byte 2: 0x2 -> ZSTD */
    CHECK(rmq__msgset_decode(rb, rb->data, rb->len, "b", 0, 8, &set, err, sizeof(err)) ==
          RMQ_ERR_BAD_MESSAGE);
    CHECKF(strstr(err, "ZSTD") && set->n == 0, "%s", err);
    rmq__msgset_release(set);
    rb->data[38] = 0x05;
    CHECK(rmq__msgset_decode(rb, rb->data, rb->len, "b", 0, 8, &set, err, sizeof(err)) ==
          RMQ_ERR_BAD_MESSAGE);
    CHECKF(strstr(err, "unknown compression type 5"), "%s", err);
    rmq__msgset_release(set);
    rb->data[38] = 0x03;
    rb->data[4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 20 + 8 + 20 + 4 + 8 + 4 + 10] ^= 0x55; /* body */
    CHECK(rmq__msgset_decode(rb, rb->data, rb->len, "b", 0, 8, &set, err, sizeof(err)) ==
          RMQ_ERR_BAD_MESSAGE);
    CHECKF(strstr(err, "zlib") && set->n == 0, "%s", err);
    rmq__msgset_release(set);
    CHECK(rb->refs == 1);
    rmq__rbuf_release(rb);
    rmq__buf_free(&z);
    rmq__buf_free(&body);
}

/* ---- LZ4 and ZSTD bodies (RocketMQ 5.x producers) ------------------------------------- */

/* Bodies compressed by the lz4 and zstd command line tools (spec/fixtures/codec/README.md):
 * LZ4 frames like lz4-java's LZ4FrameOutputStream (4 MiB independent blocks, no content
 * checksum) and with 64 KiB linked blocks and a checksum; ZSTD frames streamed (no content size,
 * no checksum, like zstd-jni's ZstdOutputStream) and with both. Each decodes to body.txt; a
 * damaged or truncated stream is named and stops the decode like a damaged zlib stream. */
static void test_lz4_zstd(void)
{
    static const struct {
        const char *file;
        int32_t sys_flag;
        const char *name;
    } cases[] = {
        {"body.lz4", 0x101, "LZ4"},
        {"body-64k-linked.lz4", 0x101, "LZ4"},
        {"body.zst", 0x201, "ZSTD"},
        {"body-checksum.zst", 0x201, "ZSTD"},
    };
    size_t plain_len;
    char *plain = test_fixture("spec/fixtures/codec/compression/body.txt", &plain_len);
    for (size_t k = 0; k < RMQ_ARRAY_SIZE(cases); k++) {
        char path[256], err[256];
        snprintf(path, sizeof(path), "spec/fixtures/codec/compression/%s", cases[k].file);
        size_t zlen;
        char *z = test_fixture(path, &zlen);
        rmq_msg_t m = v105_msg();
        m.body = z;
        m.body_len = (uint32_t)zlen;
        m.sys_flag = cases[k].sys_flag;
        rmq_buf_t body;
        rmq__buf_init(&body);
        CHECK(rmq__msg_encode_stored(&body, &m) == 0);
        m.queue_offset++;
        CHECK(rmq__msg_encode_stored(&body, &m) == 0);
        rmq_msgset_t *set = NULL;
        int rc = rmq__msgset_decode(NULL, body.data, body.len, "b", 0, 9, &set, err,
                                    sizeof(err));
        CHECKF(rc == RMQ_OK && set->n == 2, "%s: %s", cases[k].file, err);
        for (int i = 0; i < set->n; i++)
            CHECKF(set->msgs[i].body_len == plain_len &&
                       memcmp(set->msgs[i].body, plain, plain_len) == 0,
                   "%s: body %d (%u bytes)", cases[k].file, i, set->msgs[i].body_len);
        set->refs = 1;
        rmq__msgset_release(set);
        /* Damaged: the body of the first message cut short, then garbled. */
        size_t body_at = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4;
        m.body_len = (uint32_t)(zlen - 9);
        rmq_buf_t bad;
        rmq__buf_init(&bad);
        CHECK(rmq__msg_encode_stored(&bad, &m) == 0);
        rc = rmq__msgset_decode(NULL, bad.data, bad.len, "b", 0, 9, &set, err, sizeof(err));
        CHECKF(rc == RMQ_ERR_BAD_MESSAGE && set->n == 0 && strstr(err, cases[k].name),
               "%s cut: %s", cases[k].file, err);
        set->refs = 1;
        rmq__msgset_release(set);
        for (size_t i = 0; i < 64; i++) body.data[body_at + 20 + i] ^= 0x5a;
        rc = rmq__msgset_decode(NULL, body.data, body.len, "b", 0, 9, &set, err, sizeof(err));
        CHECKF(rc == RMQ_ERR_BAD_MESSAGE && set->n == 0 && strstr(err, cases[k].name),
               "%s garbled: %s", cases[k].file, err);
        set->refs = 1;
        rmq__msgset_release(set);
        rmq__buf_free(&bad);
        rmq__buf_free(&body);
        free(z);
    }
    free(plain);
}

/* RMQ_DECODE_KEEP_BAD: messages whose content cannot be decoded are kept aside with their
 * header fields and the reason, and decoding goes on after them; an unusable TOTALSIZE still
 * ends it (set->lost). Without the flag the first one ends the decode (Java's decodes()). */
static void test_keep_bad(void)
{
    char err[256];
    rmq_buf_t b;
    rmq_msg_t m = v105_msg();
    rmq__buf_init(&b);
    /* offsets 5..10: 5 bad (COMPRESSED over a plain body), 7 bad (unknown compression type),
     * 10 bad (COMPRESSED), the others good. */
    for (int i = 0; i < 6; i++) {
        m.queue_offset = 5 + i;
        m.commit_log_offset = 1000 + 156 * i;
        m.sys_flag = i == 0 || i == 5 ? 0x1 : i == 2 ? 0x501 : 0;
        CHECK(rmq__msg_encode_stored(&b, &m) == 0);
    }
    rmq_msgset_t *set = NULL;
    int rc = rmq__msgset_decode_ex(NULL, b.data, b.len, "b", 0, 11, RMQ_DECODE_KEEP_BAD, &set,
                                   err, sizeof(err));
    CHECKF(rc == RMQ_ERR_BAD_MESSAGE && strstr(err, "queueOffset 5"), "%s", err);
    CHECK(set->n == 3 && set->n_bad == 3 && !set->lost);
    CHECK(set->refs == 3 + 3 + 1);
    int64_t good[] = {6, 8, 9}, bad[] = {5, 7, 10};
    for (int i = 0; i < 3; i++) {
        CHECK(set->msgs[i].queue_offset == good[i] && !rmq__msg_undecodable(&set->msgs[i]));
        CHECK(set->msgs[i].body_len == m.body_len);
        rmq_msg_t *x = &set->bad[i];
        CHECK(x->queue_offset == bad[i] && rmq__msg_undecodable(x) && x->owner == set);
        CHECK(x->commit_log_offset == 1000 + 156 * (bad[i] - 5));
        CHECK(x->body == NULL && x->body_len == 0 && x->topic_len == 0 && x->props_len == 0);
        CHECK(x->broker_name_len == 1 && x->max_offset == 11);
        const char *why = rmq__msg_undecodable_why(x);
        CHECKF(why && strstr(why, bad[i] == 7 ? "unknown compression type 5" : "zlib"), "%s",
               why ? why : "(null)");
    }
    CHECK(rmq__msg_undecodable_why(&set->msgs[0]) == NULL);
    for (int i = 0; i < 3; i++) rmq__msg_release(&set->msgs[i]);
    for (int i = 0; i < 3; i++) rmq__msg_release(&set->bad[i]);
    CHECK(set->refs == 1);
    rmq__msgset_release(set);

    /* Without the flag: stops at the first (Java), nothing kept aside. */
    rc = rmq__msgset_decode(NULL, b.data, b.len, "b", 0, 11, &set, err, sizeof(err));
    CHECK(rc == RMQ_ERR_BAD_MESSAGE && set->n == 0 && set->n_bad == 0 && set->refs == 1);
    rmq__msgset_release(set);

    /* Framing lost after two messages: a TOTALSIZE past the body. */
    rmq__wr32(b.data + 2 * 156, 100000);
    rc = rmq__msgset_decode_ex(NULL, b.data, b.len, "b", 0, 11, RMQ_DECODE_KEEP_BAD, &set, err,
                               sizeof(err));
    CHECKF(rc == RMQ_ERR_BAD_MESSAGE && strstr(err, "TOTALSIZE"), "%s", err);
    CHECK(set->n == 1 && set->n_bad == 1 && set->lost && set->lost_at == 2 * 156);
    CHECK(set->lost_queue_offset == 7);
    CHECK(set->msgs[0].queue_offset == 6 && set->bad[0].queue_offset == 5);
    set->refs = 1;
    rmq__msgset_release(set);
    /* Lost at the very start, too short for a QUEUEOFFSET. */
    rc = rmq__msgset_decode_ex(NULL, "\0\0\0\5abc", 7, "b", 0, 11, RMQ_DECODE_KEEP_BAD, &set, err,
                               sizeof(err));
    CHECK(rc == RMQ_ERR_BAD_MESSAGE && set->n == 0 && set->n_bad == 0 && set->lost &&
          set->lost_at == 0 && set->lost_queue_offset == -1);
    rmq__msgset_release(set);
    rmq__buf_free(&b);
}

/* ---- 5.x magic with a 2-byte topic length --------------------------------------------- */

static void test_magic_v2(void)
{
    char topic[300], err[128];
    rmq_msg_t m = v105_msg();
    rmq_buf_t b;
    rmq_msgset_t *set;
    memset(topic, 'T', sizeof(topic));
    m.topic = topic;
    m.topic_len = sizeof(topic);
    rmq__buf_init(&b);
    CHECK(rmq__msg_encode_stored(&b, &m) == 0);
    CHECK(rmq__rd32(b.data + 4) == RMQ_MSG_MAGIC_V2);
    CHECK(rmq__msgset_decode(NULL, b.data, b.len, NULL, 0, 0, &set, err, sizeof(err)) == RMQ_OK);
    CHECK(set->n == 1 && set->msgs[0].topic_len == 300 && set->msgs[0].topic[299] == 'T');
    CHECK(sveq(set->msgs[0].body, set->msgs[0].body_len, "Hello"));
    set->refs = 1;
    rmq__msgset_release(set);

    /* The smallest message: no body, no topic, no properties = 91 bytes. */
    memset(&m, 0, sizeof(m));
    m.queue_offset = 1;
    b.len = 0;
    CHECK(rmq__msg_stored_size(&m) == RMQ_MSG_MIN_SIZE && RMQ_MSG_MIN_SIZE == 91);
    CHECK(rmq__msg_encode_stored(&b, &m) == 0 && b.len == 91);
    CHECK(rmq__msg_encode_stored(&b, &m) == 0 && b.len == 182);
    CHECK(rmq__msgset_decode(NULL, b.data, b.len, NULL, 0, 0, &set, err, sizeof(err)) == RMQ_OK);
    CHECK(set->n == 2 && set->msgs[1].queue_offset == 1 && set->msgs[1].body == NULL &&
          set->msgs[1].body_len == 0 && set->msgs[1].props_len == 0 && set->msgs[1].topic_len == 0);
    set->refs = 1;
    rmq__msgset_release(set);
    rmq__buf_free(&b);
}

/* ---- properties (PROTOCOL 4.4, 10.4) ---------------------------------------------------- */

static void test_properties(void)
{
    static const char want_hex[] =
        "544147530154616741024b455953016b31206b3202554e49515f4b455901433041383030303130463243313"
        "842344141433235393543354134393030303002574149540174727565";
    char want[128];
    size_t n = test_unhex(want_hex, want);
    rmq_buf_t b;
    uint32_t vl;
    const char *v;
    int pairs = 0;
    rmq__buf_init(&b);
    CHECK(rmq__props_append(&b, "TAGS", "TagA") == 0);
    CHECK(rmq__props_append(&b, "KEYS", "k1 k2") == 0);
    CHECK(rmq__props_append(&b, "NULLV", NULL) == 0); /* Java skips null values */
    CHECK(rmq__props_append(&b, "UNIQ_KEY", "C0A800010F2C18B4AAC2595C5A490000") == 0);
    CHECK(rmq__props_append(&b, "WAIT", "true") == 0);
    CHECK(n == 72 && b.len == 72 && memcmp(b.data, want, 72) == 0);
    v = rmq__props_find(b.data, b.len, "KEYS", 4, &vl);
    CHECK(v && sveq(v, vl, "k1 k2"));
    v = rmq__props_find(b.data, b.len, "WAIT", 4, &vl);
    CHECK(v && sveq(v, vl, "true"));
    CHECK(rmq__props_find(b.data, b.len, "WAI", 3, &vl) == NULL);
    CHECK(rmq__props_find(b.data, b.len, "NULLV", 5, &vl) == NULL);
    rmq__props_foreach(b.data, b.len, count_pair, &pairs);
    CHECK(pairs == 4);

    /* 10.4: only B=x survives. */
    static const char odd[] = "A\001\002B\001x\002\001y\002k\001";
    pairs = 0;
    rmq__props_foreach(odd, sizeof(odd) - 1, count_pair, &pairs);
    CHECK(pairs == 1);
    v = rmq__props_find(odd, sizeof(odd) - 1, "B", 1, &vl);
    CHECK(v && sveq(v, vl, "x"));
    CHECK(rmq__props_find(odd, sizeof(odd) - 1, "A", 1, &vl) == NULL);
    CHECK(rmq__props_find(odd, sizeof(odd) - 1, "k", 1, &vl) == NULL);

    /* Last duplicate wins; the value runs to the segment end (a later \1 is part of it). */
    static const char dup[] = "TAGS\001a\002KEYS\001k\002TAGS\001b\001c\002\002x\002TAGS";
    rmq_msg_t m;
    memset(&m, 0, sizeof(m));
    m.props = dup;
    m.props_len = sizeof(dup) - 1;
    v = rmq_msg_prop(&m, "TAGS", &vl);
    CHECK(v && sveq(v, vl, "b\001c"));
    CHECK(rmq_msg_prop(&m, "x", &vl) == NULL);
    CHECK(rmq_msg_prop(&m, "", &vl) == NULL);
    CHECK(rmq_msg_prop(NULL, "TAGS", &vl) == NULL);

    /* The decoder's TAGS/KEYS/UNIQ_KEY views follow the same rules. */
    rmq_msg_t e = v105_msg();
    rmq_buf_t enc;
    rmq_msgset_t *set;
    char err[128];
    e.props = dup;
    e.props_len = sizeof(dup) - 1;
    rmq__buf_init(&enc);
    CHECK(rmq__msg_encode_stored(&enc, &e) == 0);
    CHECK(rmq__msgset_decode(NULL, enc.data, enc.len, NULL, 0, 0, &set, err, sizeof(err)) == 0);
    CHECK(sveq(set->msgs[0].tags, set->msgs[0].tags_len, "b\001c"));
    CHECK(sveq(set->msgs[0].keys, set->msgs[0].keys_len, "k"));
    CHECK(set->msgs[0].uniq_key == NULL && set->msgs[0].uniq_key_len == 0);
    set->refs = 1;
    rmq__msgset_release(set);

    /* An empty property map is P = 0. */
    rmq_buf_t empty;
    rmq__buf_init(&empty);
    CHECK(rmq__props_append(&empty, "K", NULL) == 0 && empty.len == 0);
    rmq__buf_free(&empty);
    rmq__buf_free(&enc);
    rmq__buf_free(&b);
}

/* ---- ids ------------------------------------------------------------------------------- */

static void test_ids(void)
{
    char id[64], id2[64];
    uint8_t ip[16];
    int ipl;
    int32_t port;
    int64_t off;
    CHECK(rmq__offset_msg_id_decode("C0A8000100002A9F00000000075BCD15", 32, ip, &ipl, &port,
                                    &off) == 0);
    CHECK(ipl == 4 && memcmp(ip, "\xc0\xa8\x00\x01", 4) == 0 && port == 10911 && off == 123456789);
    CHECK(rmq__offset_msg_id_decode("FE80000000000000000000000000000100002AA00000010000000000", 56,
                                    ip, &ipl, &port, &off) == 0);
    CHECK(ipl == 16 && ip[0] == 0xfe && ip[15] == 1 && port == 10912 && off == 1099511627776LL);
    CHECK(rmq__offset_msg_id_decode("C0A8000100002A9F00000000075BCD1", 31, ip, &ipl, &port, &off) ==
          RMQ_ERR_INVALID);
    CHECK(rmq__offset_msg_id_decode("C0A8000100002A9F00000000075BCDZZ", 32, ip, &ipl, &port,
                                    &off) == RMQ_ERR_INVALID);

    /* msgid.json fixedIdsDecoded. */
    CHECK(rmq__uniq_id_make((const uint8_t *)"\x7f\0\0\x01", 4, 4660, 0x0A0B0C0D, 86400000, 1,
                            id) == 32);
    CHECK(strcmp(id, "7F00000112340A0B0C0D05265C000001") == 0);
    uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    CHECK(rmq__uniq_id_make(v6, 16, 48879, 0x11223344, 1, 65535, id) == 56);
    CHECK(strcmp(id, "20010DB8000000000000000000000001BEEF1122334400000001FFFF") == 0);

    /* Generated ids: 32 uppercase hex chars, same fixed prefix, our pid, counter + 1. */
    CHECK(rmq__uniq_id_new(id) == 32 && strlen(id) == 32);
    CHECK(rmq__uniq_id_new(id2) == 32);
    CHECK(memcmp(id, id2, 20) == 0);
    for (int i = 0; i < 32; i++)
        CHECK((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'A' && id[i] <= 'F'));
    unsigned pid, c1, c2, t1;
    sscanf(id + 8, "%4x", &pid);
    sscanf(id + 28, "%4x", &c1);
    sscanf(id2 + 28, "%4x", &c2);
    sscanf(id + 20, "%8x", &t1);
    CHECK(pid == ((unsigned)getpid() & 0xffff));
    CHECK(c2 == ((c1 + 1) & 0xffff));
    CHECK(t1 < 31u * 86400000u + 3600000u); /* ms since the start of this month */
}

/* ---- damaged bodies ------------------------------------------------------------------------ */

static void test_damaged(void)
{
    char err[256];
    rmq_buf_t b;
    rmq_msgset_t *set;
    rmq_msg_t m = v105_msg();
    rmq__buf_init(&b);
    for (int i = 0; i < 3; i++) {
        m.queue_offset = 5 + i;
        CHECK(rmq__msg_encode_stored(&b, &m) == 0);
    }
    CHECK(b.len == 3 * 156);
    /* Every truncation keeps the whole messages before the cut and says where it stopped. */
    for (size_t cut = 0; cut < b.len; cut++) {
        char *copy = malloc(cut ? cut : 1);
        memcpy(copy, b.data, cut);
        err[0] = '\0';
        int rc = rmq__msgset_decode(NULL, copy, cut, "b", 0, 0, &set, err, sizeof(err));
        CHECK(set != NULL && set->n == (int)(cut / 156));
        if (cut % 156)
            CHECKF(rc == RMQ_ERR_BAD_MESSAGE && strstr(err, "body offset"), "cut %zu", cut);
        else
            CHECK(rc == RMQ_OK);
        for (int i = 0; i < set->n; i++)
            rmq__msg_release(&set->msgs[i]);
        rmq__msgset_release(set);
        free(copy);
    }
    /* TOTALSIZE smaller than the fields: the message is refused, the earlier one kept. */
    rmq__wr32(b.data + 156, 120);
    CHECK(rmq__msgset_decode(NULL, b.data, b.len, "b", 0, 0, &set, err, sizeof(err)) ==
          RMQ_ERR_BAD_MESSAGE);
    CHECKF(set->n == 1 && strstr(err, "message 1") && strstr(err, "TOTALSIZE"), "%s", err);
    set->refs = 1;
    rmq__msgset_release(set);
    /* TOTALSIZE larger than the fields: extra bytes skipped (forward compatible), next decoded. */
    {
        rmq_buf_t x;
        rmq__buf_init(&x);
        rmq__buf_append(&x, b.data, 156);
        rmq__wr32(x.data, 160);
        rmq__buf_append(&x, "\0\0\0\0", 4);
        rmq__buf_append(&x, b.data + 312, 156);
        CHECK(rmq__msgset_decode(NULL, x.data, x.len, "b", 0, 0, &set, err, sizeof(err)) == RMQ_OK);
        CHECK(set->n == 2 && set->msgs[1].queue_offset == 7);
        set->refs = 1;
        rmq__msgset_release(set);
        rmq__buf_free(&x);
    }
    /* Negative BODYLEN and tiny TOTALSIZE. */
    rmq__wr32(b.data + 156, 156);
    rmq__wr32(b.data + 156 + 84, 0xFFFFFFF0u);
    CHECK(rmq__msgset_decode(NULL, b.data, b.len, "b", 0, 0, &set, err, sizeof(err)) ==
          RMQ_ERR_BAD_MESSAGE);
    CHECKF(set->n == 1 && strstr(err, "BODYLEN"), "%s", err);
    set->refs = 1;
    rmq__msgset_release(set);
    rmq__wr32(b.data, 3);
    CHECK(rmq__msgset_decode(NULL, b.data, b.len, "b", 0, 0, &set, err, sizeof(err)) ==
          RMQ_ERR_BAD_MESSAGE);
    CHECK(set->n == 0 && strstr(err, "too small"));
    rmq__msgset_release(set);
    /* An empty body is no messages and no error. */
    CHECK(rmq__msgset_decode(NULL, NULL, 0, "b", 0, 0, &set, err, sizeof(err)) == RMQ_OK &&
          set->n == 0);
    rmq__msgset_release(set);

    /* Pseudo-random garbage (fixed seed), with plausible TOTALSIZE words: never crashes. */
    uint32_t seed = 12345;
    char g[2048];
    for (int round = 0; round < 2000; round++) {
        size_t n = (size_t)(round % 700) + 1;
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            g[i] = (char)(seed >> 16);
        }
        if (n >= 4) rmq__wr32(g, (uint32_t)(RMQ_MSG_MIN_SIZE + (seed >> 8) % n));
        if (n >= 40) rmq__wr32(g + 36, (seed >> 4) & 0x731);
        if (rmq__msgset_decode(NULL, g, n, "b", 0, 0, &set, err, sizeof(err)) == RMQ_ERR_NOMEM)
            continue;
        set->refs = 1;
        rmq__msgset_release(set);
    }
    rmq__buf_free(&b);
}

int main(void)
{
    test_captures();
    test_vector_10_5();
    test_compressed_and_ipv6();
    test_lz4_zstd();
    test_keep_bad();
    test_magic_v2();
    test_properties();
    test_ids();
    test_damaged();
    return test_report("test_message");
}
