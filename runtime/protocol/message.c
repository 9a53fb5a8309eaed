/*
 * message.c -- decoding pulled message bodies into views, message ids, properties, and the
 * stored-format encoder used by the development broker.
 *
 * Ownership and threads: see message.h. The only process-wide state is the UNIQ_KEY generator
 * (fixed prefix set once under pthread_once, month start under a mutex, atomic counter).
 */
#include "message.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <lz4frame.h>
#include <zlib.h>
#include <zstd.h>

struct rmq_msgset_infl {
    rmq_msgset_infl_t *next;
    size_t len;
    char data[];
};

/* Largest body we inflate (Java has no limit; this keeps a zip bomb from taking the process). */
#define INFLATE_MAX ((size_t)1 << 30)

static const char HEX[] = "0123456789ABCDEF";

/* ---- properties ------------------------------------------------------------------------ */

int rmq__props_foreach(const char *props, size_t plen, rmq_props_fn fn, void *ud)
{
    size_t i = 0;
    while (i < plen) {
        const char *seg = props + i;
        const char *end = memchr(seg, RMQ_PROP_SEP, plen - i);
        size_t slen = end ? (size_t)(end - seg) : plen - i;
        const char *kv = memchr(seg, RMQ_PROP_NV_SEP, slen);
        /* Java: the separator must have at least one byte on either side inside the segment. */
        if (kv && kv > seg && (size_t)(kv - seg) < slen - 1) {
            int rc = fn(ud, seg, (size_t)(kv - seg), kv + 1, slen - (size_t)(kv - seg) - 1);
            if (rc) return rc;
        }
        i += slen + 1;
    }
    return 0;
}

const char *rmq__props_find(const char *props, size_t plen, const char *key, size_t klen,
                            uint32_t *vlen)
{
    const char *found = NULL;
    size_t i = 0;
    while (i < plen) {
        const char *seg = props + i;
        const char *end = memchr(seg, RMQ_PROP_SEP, plen - i);
        size_t slen = end ? (size_t)(end - seg) : plen - i;
        if (slen > klen + 1 && seg[klen] == RMQ_PROP_NV_SEP && memcmp(seg, key, klen) == 0 &&
            klen > 0 && !memchr(seg, RMQ_PROP_NV_SEP, klen)) {
            found = seg + klen + 1;
            *vlen = (uint32_t)(slen - klen - 1);
        }
        i += slen + 1;
    }
    return found;
}

int rmq__props_append_n(rmq_buf_t *b, const char *key, size_t klen, const char *val, size_t vlen)
{
    if (!val) return 0;
    if (rmq__buf_reserve(b, klen + vlen + 2)) return RMQ_ERR_NOMEM;
    if (b->len) b->data[b->len++] = RMQ_PROP_SEP;
    memcpy(b->data + b->len, key, klen);
    b->len += klen;
    b->data[b->len++] = RMQ_PROP_NV_SEP;
    memcpy(b->data + b->len, val, vlen);
    b->len += vlen;
    return 0;
}

int rmq__props_append(rmq_buf_t *b, const char *key, const char *val)
{
    return rmq__props_append_n(b, key, strlen(key), val, val ? strlen(val) : 0);
}

/* One pass over the properties: the last TAGS, KEYS and UNIQ_KEY win. */
static int scan_prop(void *ud, const char *k, size_t klen, const char *v, size_t vlen)
{
    rmq_msg_t *m = ud;
    if (klen == 4 && memcmp(k, "TAGS", 4) == 0) {
        m->tags = v;
        m->tags_len = (uint32_t)vlen;
    } else if (klen == 4 && memcmp(k, "KEYS", 4) == 0) {
        m->keys = v;
        m->keys_len = (uint32_t)vlen;
    } else if (klen == 8 && memcmp(k, "UNIQ_KEY", 8) == 0) {
        m->uniq_key = v;
        m->uniq_key_len = (uint32_t)vlen;
    }
    return 0;
}

int rmq__msg_restore_retry_topic(rmq_msg_t *m)
{
    uint32_t vlen;
    const char *v = rmq__props_find(m->props, m->props_len, "RETRY_TOPIC", 11, &vlen);
    if (!v) return 0;
    m->topic = v;
    m->topic_len = vlen;
    return 1;
}

int rmq__msg_restore_retry_topic_for(rmq_msg_t *m, const char *group_retry_topic, size_t len)
{
    if (m->store_topic_len != len || memcmp(m->store_topic, group_retry_topic, len) != 0) return 0;
    return rmq__msg_restore_retry_topic(m);
}

/* ---- message set --------------------------------------------------------------------- */

rmq_msgset_t *rmq__msgset_keep(rmq_msgset_t *set)
{
    __atomic_add_fetch(&set->refs, 1, __ATOMIC_RELAXED);
    return set;
}

void rmq__msgset_release(rmq_msgset_t *set)
{
    if (__atomic_sub_fetch(&set->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    rmq_msgset_infl_t *in = set->infl;
    while (in) {
        rmq_msgset_infl_t *next = in->next;
        free(in);
        in = next;
    }
    if (set->frame) rmq__rbuf_release(set->frame);
    free(set);
}

void rmq__msg_release(rmq_msg_t *m)
{
    rmq__msgset_release((rmq_msgset_t *)m->owner);
}

int rmq__msg_undecodable(const rmq_msg_t *m)
{
    const rmq_msgset_t *set = m->owner;
    return set && set->n_bad > 0 && m >= set->bad && m < set->bad + set->n_bad;
}

const char *rmq__msg_undecodable_why(const rmq_msg_t *m)
{
    if (!rmq__msg_undecodable(m)) return NULL;
    const rmq_msgset_t *set = m->owner;
    return set->bad_why[m - set->bad];
}

char *rmq__msgset_alloc(rmq_msgset_t *set, size_t n)
{
    rmq_msgset_infl_t *node = rmq__xmalloc(sizeof(*node) + n);
    node->len = n;
    node->next = set->infl;
    set->infl = node;
    set->mem += sizeof(*node) + n;
    return node->data;
}

/* ---- compressed bodies (PROTOCOL 4.3; RocketMQ 5.x CompressionType) --------------------- */

/* An output buffer that grows by doubling up to INFLATE_MAX; becomes a node of the set. */
typedef struct {
    rmq_msgset_infl_t *node;
    size_t cap, len;
} outbuf_t;

static int out_init(outbuf_t *o, size_t src_len)
{
    o->cap = src_len < 64 ? 256 : src_len * 4;
    o->len = 0;
    o->node = malloc(sizeof(*o->node) + o->cap);
    return o->node ? 0 : RMQ_ERR_NOMEM;
}

/* Room for more output: 0, RMQ_ERR_NOMEM, or RMQ_ERR_BAD_MESSAGE past INFLATE_MAX. */
static int out_grow(outbuf_t *o, char *err, size_t errsz)
{
    if (o->cap >= INFLATE_MAX) {
        rmq__seterr(err, errsz, "decompressed body larger than %zu bytes", INFLATE_MAX);
        return RMQ_ERR_BAD_MESSAGE;
    }
    rmq_msgset_infl_t *bigger = realloc(o->node, sizeof(*o->node) + o->cap * 2);
    if (!bigger) return RMQ_ERR_NOMEM;
    o->node = bigger;
    o->cap *= 2;
    return 0;
}

/* Link the finished output into the set as the message's body. */
static int out_done(outbuf_t *o, rmq_msgset_t *set, const char **out, uint32_t *out_len,
                    char *err, size_t errsz)
{
    if (o->len > UINT32_MAX) {
        free(o->node);
        rmq__seterr(err, errsz, "decompressed body too large");
        return RMQ_ERR_BAD_MESSAGE;
    }
    o->node->len = o->len;
    o->node->next = set->infl;
    set->infl = o->node;
    set->mem += sizeof(*o->node) + o->cap;
    *out = o->node->data;
    *out_len = (uint32_t)o->len;
    return 0;
}

/* ZLIB (type 0 or 3): a zlib stream (Java's Deflater / InflaterInputStream). */
static int inflate_zlib(outbuf_t *o, const char *src, size_t len, char *err, size_t errsz)
{
    z_stream zs;
    int zrc, rc = 0;
    memset(&zs, 0, sizeof(zs));
    if (inflateInit(&zs) != Z_OK) return RMQ_ERR_NOMEM;
    zs.next_in = (Bytef *)src;
    zs.avail_in = (uInt)len;
    for (;;) {
        zs.next_out = (Bytef *)o->node->data + zs.total_out;
        zs.avail_out = (uInt)(o->cap - zs.total_out);
        zrc = inflate(&zs, Z_NO_FLUSH);
        if (zrc == Z_STREAM_END) break;
        if (zrc == Z_BUF_ERROR && zs.avail_in == 0) {
            rmq__seterr(err, errsz, "zlib body truncated (stream ends early)");
            rc = RMQ_ERR_BAD_MESSAGE;
            break;
        }
        if (zrc != Z_OK && zrc != Z_BUF_ERROR) {
            rmq__seterr(err, errsz, "zlib body corrupt: %s", zs.msg ? zs.msg : "inflate error");
            rc = RMQ_ERR_BAD_MESSAGE;
            break;
        }
        if (zs.avail_out == 0 && (rc = out_grow(o, err, errsz)) != 0) break;
    }
    o->len = zs.total_out;
    inflateEnd(&zs);
    return rc;
}

/* LZ4 (type 1): LZ4 frames (lz4-java's LZ4FrameOutputStream, which Lz4Compressor uses; its
 * LZ4FrameInputStream reads concatenated frames, so do we). */
static int inflate_lz4(outbuf_t *o, const char *src, size_t len, char *err, size_t errsz)
{
    LZ4F_dctx *dctx = NULL;
    size_t in = 0, hint = 1;
    int rc = 0;
    if (LZ4F_isError(LZ4F_createDecompressionContext(&dctx, LZ4F_VERSION))) return RMQ_ERR_NOMEM;
    while (in < len || hint != 0) {
        if (o->len == o->cap && (rc = out_grow(o, err, errsz)) != 0) break;
        size_t dst = o->cap - o->len, srcn = len - in;
        hint = LZ4F_decompress(dctx, o->node->data + o->len, &dst, src + in, &srcn, NULL);
        if (LZ4F_isError(hint)) {
            rmq__seterr(err, errsz, "LZ4 body corrupt: %s", LZ4F_getErrorName(hint));
            rc = RMQ_ERR_BAD_MESSAGE;
            break;
        }
        in += srcn;
        o->len += dst;
        if (srcn == 0 && dst == 0) { /* there was room for output: no progress is possible */
            rmq__seterr(err, errsz, in == len ? "LZ4 body truncated (frame ends early)"
                                              : "LZ4 body corrupt (no progress)");
            rc = RMQ_ERR_BAD_MESSAGE;
            break;
        }
    }
    LZ4F_freeDecompressionContext(dctx);
    return rc;
}

/* ZSTD (type 2): zstd frames (zstd-jni's ZstdOutputStream, which ZstdCompressor uses). */
static int inflate_zstd(outbuf_t *o, const char *src, size_t len, char *err, size_t errsz)
{
    ZSTD_DStream *ds = ZSTD_createDStream();
    ZSTD_inBuffer ib = {src, len, 0};
    size_t ret = 1;
    int rc = 0;
    if (!ds) return RMQ_ERR_NOMEM;
    while (ib.pos < ib.size || ret != 0) {
        if (o->len == o->cap && (rc = out_grow(o, err, errsz)) != 0) break;
        ZSTD_outBuffer ob = {o->node->data, o->cap, o->len};
        size_t before_in = ib.pos;
        ret = ZSTD_decompressStream(ds, &ob, &ib);
        if (ZSTD_isError(ret)) {
            rmq__seterr(err, errsz, "ZSTD body corrupt: %s", ZSTD_getErrorName(ret));
            rc = RMQ_ERR_BAD_MESSAGE;
            break;
        }
        int progress = ob.pos > o->len || ib.pos > before_in;
        o->len = ob.pos;
        if (!progress) { /* there was room for output: no progress is possible */
            rmq__seterr(err, errsz, ib.pos == ib.size ? "ZSTD body truncated (frame ends early)"
                                                      : "ZSTD body corrupt (no progress)");
            rc = RMQ_ERR_BAD_MESSAGE;
            break;
        }
    }
    ZSTD_freeDStream(ds);
    return rc;
}

/*
 * Decompress a body of compression type `type` ((sysFlag & 0x700) >> 8: 0 or 3 zlib, 1 LZ4,
 * 2 ZSTD, as CompressionType.findByValue) into a new node of the set. 0, or an error with err.
 */
static int decompress_body(rmq_msgset_t *set, int type, const char *src, size_t len,
                           const char **out, uint32_t *out_len, char *err, size_t errsz)
{
    outbuf_t o;
    int rc;
    if (out_init(&o, len)) return RMQ_ERR_NOMEM;
    switch (type) {
    case 0:
    case 3:
        rc = inflate_zlib(&o, src, len, err, errsz);
        break;
    case 1:
        rc = inflate_lz4(&o, src, len, err, errsz);
        break;
    case 2:
        rc = inflate_zstd(&o, src, len, err, errsz);
        break;
    default:
        rmq__seterr(err, errsz, "unknown compression type %d", type);
        rc = RMQ_ERR_BAD_MESSAGE;
        break;
    }
    if (rc) {
        free(o.node);
        return rc;
    }
    return out_done(&o, set, out, out_len, err, errsz);
}

/*
 * Decode the message of t bytes (TOTALSIZE, already checked against the buffer) at p into m.
 * Returns 0, or RMQ_ERR_BAD_MESSAGE / RMQ_ERR_NOMEM with the reason in err.
 */
static int decode_one(rmq_msgset_t *set, const char *p, size_t t, int flags, rmq_msg_t *m,
                      char *err, size_t errsz)
{
    size_t pos = 4, hl;
    uint32_t magic, bodylen, topiclen;
    int16_t propslen;
    const char *what;

#define NEED(n, name)                                                                              \
    do {                                                                                           \
        if (t - pos < (size_t)(n)) {                                                               \
            what = name;                                                                           \
            goto overrun;                                                                          \
        }                                                                                          \
    } while (0)

    NEED(4 + 4 + 4 + 4 + 8 + 8 + 4 + 8, "header");
    magic = rmq__rd32(p + 4);
    m->body_crc = (int32_t)rmq__rd32(p + 8);
    m->queue_id = (int32_t)rmq__rd32(p + 12);
    m->flag = (int32_t)rmq__rd32(p + 16);
    m->queue_offset = (int64_t)rmq__rd64(p + 20);
    m->commit_log_offset = (int64_t)rmq__rd64(p + 28);
    m->sys_flag = (int32_t)rmq__rd32(p + 36);
    m->born_timestamp = (int64_t)rmq__rd64(p + 40);
    pos = 48;
    hl = (m->sys_flag & RMQ_SYSFLAG_BORNHOST_V6) ? 16 : 4;
    NEED(hl + 4 + 8, "BORNHOST");
    memcpy(m->born_host, p + pos, hl);
    m->born_port = (int32_t)rmq__rd32(p + pos + hl);
    pos += hl + 4;
    m->store_timestamp = (int64_t)rmq__rd64(p + pos);
    pos += 8;
    hl = (m->sys_flag & RMQ_SYSFLAG_STOREHOST_V6) ? 16 : 4;
    NEED(hl + 4 + 4 + 8 + 4, "STOREHOST");
    memcpy(m->store_host, p + pos, hl);
    m->store_port = (int32_t)rmq__rd32(p + pos + hl);
    pos += hl + 4;
    m->reconsume_times = (int32_t)rmq__rd32(p + pos);
    m->prepared_tx_offset = (int64_t)rmq__rd64(p + pos + 4);
    bodylen = rmq__rd32(p + pos + 12);
    pos += 16;
    if (bodylen > 0x7fffffffu) {
        rmq__seterr(err, errsz, "BODYLEN %d is negative", (int32_t)bodylen);
        return RMQ_ERR_BAD_MESSAGE;
    }
    NEED(bodylen, "BODY");
    m->body = bodylen ? p + pos : NULL;
    m->body_len = bodylen;
    pos += bodylen;
    if (magic == RMQ_MSG_MAGIC_V2) {
        NEED(2, "TOPICLEN");
        topiclen = rmq__rd16(p + pos);
        pos += 2;
        if (topiclen > 32767) { /* Java reads a short */
            rmq__seterr(err, errsz, "TOPICLEN %d is negative", (int16_t)topiclen);
            return RMQ_ERR_BAD_MESSAGE;
        }
    } else {
        NEED(1, "TOPICLEN");
        topiclen = (uint8_t)p[pos];
        pos += 1;
    }
    NEED(topiclen, "TOPIC");
    m->topic = m->store_topic = p + pos;
    m->topic_len = m->store_topic_len = topiclen;
    pos += topiclen;
    NEED(2, "PROPERTIESLEN");
    propslen = (int16_t)rmq__rd16(p + pos);
    pos += 2;
    if (propslen > 0) { /* Java: a negative length means no properties */
        NEED(propslen, "PROPERTIES");
        m->props = p + pos;
        m->props_len = (uint32_t)propslen;
        pos += (size_t)propslen;
        rmq__props_foreach(m->props, m->props_len, scan_prop, m);
    }
#undef NEED

    if ((m->sys_flag & RMQ_SYSFLAG_COMPRESSED) && bodylen > 0 && !(flags & RMQ_DECODE_RAW_BODY)) {
        int type = (m->sys_flag & RMQ_SYSFLAG_COMPRESSION_MASK) >> 8;
        int rc;
        if (type > 3) {
            rmq__seterr(err, errsz, "unknown compression type %d (sysFlag 0x%x)", type,
                        (unsigned)m->sys_flag);
            return RMQ_ERR_BAD_MESSAGE;
        }
        rc = decompress_body(set, type, m->body, bodylen, &m->body, &m->body_len, err, errsz);
        if (rc) return rc;
    }
    return 0;

overrun:
    rmq__seterr(err, errsz, "%s at byte %zu runs past TOTALSIZE %zu", what, pos, t);
    return RMQ_ERR_BAD_MESSAGE;
}

/*
 * RMQ_DECODE_KEEP_BAD: move the message that failed to decode (at msgs[set->n], its header
 * fields as far as they were read) to the back of the array (slot nmax - 1 - n_bad), without
 * strings or body, with a copy of why.
 */
static void keep_bad(rmq_msgset_t *set, size_t nmax, const rmq_msg_t *m, const char *why,
                     const char *broker_name, size_t bnlen, int64_t min_offset,
                     int64_t max_offset)
{
    if (!set->bad_why)
        set->bad_why = (const char **)(void *)rmq__msgset_alloc(set, nmax * sizeof(char *));
    rmq_msg_t *b = &set->msgs[nmax - 1 - (size_t)set->n_bad];
    *b = *m;
    b->topic = b->store_topic = b->tags = b->keys = b->body = b->props = b->uniq_key = NULL;
    b->topic_len = b->store_topic_len = b->tags_len = b->keys_len = b->body_len = b->props_len =
        b->uniq_key_len = 0;
    b->broker_name = broker_name ? set->broker_name : NULL;
    b->broker_name_len = (uint32_t)bnlen;
    b->min_offset = min_offset;
    b->max_offset = max_offset;
    b->owner = set;
    size_t wl = strlen(why);
    char *w = rmq__msgset_alloc(set, wl + 1);
    memcpy(w, why, wl + 1);
    set->bad_why[set->n_bad++] = w;
}

/* NOMEM while decoding: forget the kept bad messages (they hold no reference yet). */
static void keep_bad_release(rmq_msgset_t *set)
{
    set->n_bad = 0;
}

int rmq__msgset_decode_ex(rmq_rbuf_t *frame, const char *body, size_t len, const char *broker_name,
                          int64_t min_offset, int64_t max_offset, int flags, rmq_msgset_t **out,
                          char *errstr, size_t errstr_size)
{
    size_t off = 0, nmax = 0, bnlen = broker_name ? strlen(broker_name) : 0, head;
    rmq_msgset_t *set;
    int rc = RMQ_OK;
    char why[160];

    *out = NULL;
    /* Pass 1: count messages by TOTALSIZE (an upper bound: a message may still be bad). */
    while (len - off >= 4) {
        uint32_t t = rmq__rd32(body + off);
        if (t < RMQ_MSG_MIN_SIZE || t > len - off) break;
        nmax++;
        off += t;
    }
    head = (sizeof(rmq_msgset_t) + 15) & ~(size_t)15;
    set = malloc(head + nmax * sizeof(rmq_msg_t) + bnlen + 1);
    if (!set) return RMQ_ERR_NOMEM;
    set->mem = head + nmax * sizeof(rmq_msg_t) + bnlen + 1 +
               (frame ? sizeof(rmq_rbuf_t) + frame->len : 0);
    set->pq_held = 0;
    set->refs = 1;
    set->frame = frame ? rmq__rbuf_keep(frame) : NULL;
    set->n = 0;
    set->msgs = (rmq_msg_t *)((char *)set + head);
    set->n_bad = 0;
    set->bad = NULL;
    set->bad_why = NULL;
    set->lost = 0;
    set->lost_at = len;
    set->lost_queue_offset = -1;
    set->infl = NULL;
    set->recv_ns = 0;
    set->broker_name = (char *)(set->msgs + nmax);
    if (bnlen) memcpy(set->broker_name, broker_name, bnlen);
    set->broker_name[bnlen] = '\0';

    /* Pass 2: decode. */
    off = 0;
    while (off < len) {
        rmq_msg_t *m;
        uint32_t t;
        int r;
        if (len - off < 4) {
            rmq__seterr(errstr, errstr_size,
                        "message %d at body offset %zu: truncated (%zu bytes left, no TOTALSIZE)",
                        set->n, off, len - off);
            rc = RMQ_ERR_BAD_MESSAGE;
            break;
        }
        t = rmq__rd32(body + off);
        if (t < RMQ_MSG_MIN_SIZE || t > len - off || set->n + set->n_bad >= (int)nmax) {
            rmq__seterr(errstr, errstr_size,
                        "message %d at body offset %zu: TOTALSIZE %d %s (%zu bytes left)",
                        set->n + set->n_bad, off, (int32_t)t,
                        t < RMQ_MSG_MIN_SIZE ? "too small" : "past the body", len - off);
            rc = RMQ_ERR_BAD_MESSAGE;
            set->lost = 1;
            set->lost_at = off;
            if (len - off >= 28) set->lost_queue_offset = (int64_t)rmq__rd64(body + off + 20);
            break;
        }
        m = &set->msgs[set->n];
        memset(m, 0, sizeof(*m));
        r = decode_one(set, body + off, t, flags, m, why, sizeof(why));
        if (r == RMQ_ERR_NOMEM) {
            set->n = 0;
            keep_bad_release(set);
            rmq__msgset_release(set);
            return RMQ_ERR_NOMEM;
        }
        if (r) {
            if (rc == RMQ_OK)
                rmq__seterr(errstr, errstr_size,
                            "message %d at body offset %zu (queueOffset %lld): %s",
                            set->n + set->n_bad, off, (long long)m->queue_offset, why);
            rc = RMQ_ERR_BAD_MESSAGE;
            if (!(flags & RMQ_DECODE_KEEP_BAD)) break;
            keep_bad(set, nmax, m, why, broker_name, bnlen, min_offset, max_offset);
            off += t;
            continue;
        }
        m->broker_name = broker_name ? set->broker_name : NULL;
        m->broker_name_len = (uint32_t)bnlen;
        m->min_offset = min_offset;
        m->max_offset = max_offset;
        m->owner = set;
        set->n++;
        off += t;
    }
    if (set->n_bad > 0) { /* kept from the end of the array backwards: put in body order */
        set->bad = set->msgs + nmax - set->n_bad;
        for (int i = 0, j = set->n_bad - 1; i < j; i++, j--) {
            rmq_msg_t tm = set->bad[i];
            set->bad[i] = set->bad[j];
            set->bad[j] = tm;
            const char *tw = set->bad_why[i];
            set->bad_why[i] = set->bad_why[j];
            set->bad_why[j] = tw;
        }
    }
    set->refs = set->n + set->n_bad + 1;
    *out = set;
    return rc;
}

int rmq__msgset_decode(rmq_rbuf_t *frame, const char *body, size_t len, const char *broker_name,
                       int64_t min_offset, int64_t max_offset, rmq_msgset_t **out, char *errstr,
                       size_t errstr_size)
{
    return rmq__msgset_decode_ex(frame, body, len, broker_name, min_offset, max_offset, 0, out,
                                 errstr, errstr_size);
}

/* ---- ids ------------------------------------------------------------------------------- */

static char *hex_bytes(char *o, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        *o++ = HEX[b[i] >> 4];
        *o++ = HEX[b[i] & 15];
    }
    return o;
}

int rmq__offset_msg_id(const uint8_t *ip, int ip_len, int32_t port, int64_t offset, char *out)
{
    uint8_t b[28];
    memcpy(b, ip, (size_t)ip_len);
    rmq__wr32(b + ip_len, (uint32_t)port);
    rmq__wr32(b + ip_len + 4, (uint32_t)((uint64_t)offset >> 32));
    rmq__wr32(b + ip_len + 8, (uint32_t)offset);
    *hex_bytes(out, b, (size_t)ip_len + 12) = '\0';
    return (ip_len + 12) * 2;
}

static int unhex(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

int rmq__offset_msg_id_decode(const char *id, size_t len, uint8_t *ip, int *ip_len, int32_t *port,
                              int64_t *offset)
{
    uint8_t b[28];
    size_t n = len / 2, il;
    if (len != 32 && len != 56) return RMQ_ERR_INVALID;
    for (size_t i = 0; i < n; i++) {
        int hi = unhex(id[2 * i]), lo = unhex(id[2 * i + 1]);
        if (hi < 0 || lo < 0) return RMQ_ERR_INVALID;
        b[i] = (uint8_t)(hi << 4 | lo);
    }
    il = len == 32 ? 4 : 16;
    memcpy(ip, b, il);
    *ip_len = (int)il;
    *port = (int32_t)rmq__rd32(b + il);
    *offset = (int64_t)rmq__rd64(b + il + 4);
    return 0;
}

int rmq__uniq_id_make(const uint8_t *ip, int ip_len, uint16_t pid, uint32_t seed, uint32_t ms,
                      uint16_t counter, char *out)
{
    uint8_t b[28];
    memcpy(b, ip, (size_t)ip_len);
    b[ip_len] = (uint8_t)(pid >> 8);
    b[ip_len + 1] = (uint8_t)pid;
    rmq__wr32(b + ip_len + 2, seed);
    rmq__wr32(b + ip_len + 6, ms);
    b[ip_len + 10] = (uint8_t)(counter >> 8);
    b[ip_len + 11] = (uint8_t)counter;
    *hex_bytes(out, b, (size_t)ip_len + 12) = '\0';
    return (ip_len + 12) * 2;
}

static pthread_once_t uniq_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t uniq_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t uniq_ip[4];
static uint16_t uniq_pid;
static uint32_t uniq_seed;
static int64_t uniq_start, uniq_next; /* under uniq_lock */
static unsigned uniq_counter;         /* atomic */

static int ip_is_private(const uint8_t *a)
{
    return a[0] == 10 || (a[0] == 172 && (a[1] & 0xf0) == 16) || (a[0] == 192 && a[1] == 168);
}

/* UtilAll.getIP (IPv4 part): the first non-private address, else the first private one;
 * loopback is skipped here so that ids from different hosts differ; else a clock-derived fake. */
static void uniq_init(void)
{
    struct ifaddrs *ifs = NULL, *i;
    int have = 0;
    if (getifaddrs(&ifs) == 0) {
        for (i = ifs; i; i = i->ifa_next) {
            const uint8_t *a;
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
            a = (const uint8_t *)&((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr;
            if (a[0] == 127 || a[0] == 0) continue;
            if (!ip_is_private(a)) {
                memcpy(uniq_ip, a, 4);
                have = 2;
                break;
            }
            if (!have) {
                memcpy(uniq_ip, a, 4);
                have = 1;
            }
        }
        freeifaddrs(ifs);
    }
    if (!have) { /* MessageClientIDSetter.createFakeIP: bytes 4..7 of currentTimeMillis */
        uint64_t now = (uint64_t)rmq__now_ms();
        rmq__wr32(uniq_ip, (uint32_t)now);
    }
    uniq_pid = (uint16_t)getpid();
    if (getrandom(&uniq_seed, sizeof(uniq_seed), GRND_NONBLOCK) != (ssize_t)sizeof(uniq_seed))
        uniq_seed = (uint32_t)rmq__now_ms() ^ ((uint32_t)getpid() << 16);
}

/* Start of the month containing now_ms and of the next one, local time. */
static void month_bounds(int64_t now_ms, int64_t *start, int64_t *next)
{
    time_t s = (time_t)(now_ms / 1000);
    struct tm tm;
    localtime_r(&s, &tm);
    tm.tm_mday = 1;
    tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
    tm.tm_isdst = -1;
    *start = (int64_t)mktime(&tm) * 1000;
    tm.tm_mon += 1;
    tm.tm_isdst = -1;
    *next = (int64_t)mktime(&tm) * 1000;
}

int rmq__uniq_id_new(char *out)
{
    int64_t now = rmq__now_ms(), start;
    unsigned c;
    pthread_once(&uniq_once, uniq_init);
    pthread_mutex_lock(&uniq_lock);
    if (now >= uniq_next) month_bounds(now, &uniq_start, &uniq_next);
    start = uniq_start;
    pthread_mutex_unlock(&uniq_lock);
    c = __atomic_fetch_add(&uniq_counter, 1, __ATOMIC_RELAXED);
    return rmq__uniq_id_make(uniq_ip, 4, uniq_pid, uniq_seed, (uint32_t)(now - start), (uint16_t)c,
                             out);
}

/* ---- encoder -------------------------------------------------------------------------- */

static size_t topic_len_of(const rmq_msg_t *m, const char **tp)
{
    if (m->store_topic_len) {
        *tp = m->store_topic;
        return m->store_topic_len;
    }
    *tp = m->topic;
    return m->topic_len;
}

size_t rmq__msg_stored_size(const rmq_msg_t *m)
{
    const char *tp;
    size_t tl = topic_len_of(m, &tp);
    size_t bh = (m->sys_flag & RMQ_SYSFLAG_BORNHOST_V6) ? 20 : 8;
    size_t sh = (m->sys_flag & RMQ_SYSFLAG_STOREHOST_V6) ? 20 : 8;
    return 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + bh + 8 + sh + 4 + 8 + 4 + m->body_len +
           (tl > 127 ? 2 : 1) + tl + 2 + m->props_len;
}

static inline uint8_t *put32(uint8_t *o, uint32_t v)
{
    rmq__wr32(o, v);
    return o + 4;
}
static inline uint8_t *put64(uint8_t *o, int64_t v)
{
    rmq__wr32(o, (uint32_t)((uint64_t)v >> 32));
    rmq__wr32(o + 4, (uint32_t)v);
    return o + 8;
}

int rmq__msg_encode_stored(rmq_buf_t *out, const rmq_msg_t *m)
{
    const char *tp;
    size_t tl = topic_len_of(m, &tp), size = rmq__msg_stored_size(m), hl;
    uint8_t *o;
    uint32_t crc;
    if (tl > 32767 || m->props_len > 32767 || size > 0x7fffffff) return RMQ_ERR_INVALID;
    if (rmq__buf_reserve(out, size)) return RMQ_ERR_NOMEM;
    crc = m->body_len ? (uint32_t)crc32(0, (const Bytef *)m->body, m->body_len) : 0;
    o = (uint8_t *)out->data + out->len;
    o = put32(o, (uint32_t)size);
    o = put32(o, tl > 127 ? RMQ_MSG_MAGIC_V2 : RMQ_MSG_MAGIC_V1);
    o = put32(o, crc & 0x7FFFFFFFu);
    o = put32(o, (uint32_t)m->queue_id);
    o = put32(o, (uint32_t)m->flag);
    o = put64(o, m->queue_offset);
    o = put64(o, m->commit_log_offset);
    o = put32(o, (uint32_t)m->sys_flag);
    o = put64(o, m->born_timestamp);
    hl = (m->sys_flag & RMQ_SYSFLAG_BORNHOST_V6) ? 16 : 4;
    memcpy(o, m->born_host, hl);
    o = put32(o + hl, (uint32_t)m->born_port);
    o = put64(o, m->store_timestamp);
    hl = (m->sys_flag & RMQ_SYSFLAG_STOREHOST_V6) ? 16 : 4;
    memcpy(o, m->store_host, hl);
    o = put32(o + hl, (uint32_t)m->store_port);
    o = put32(o, (uint32_t)m->reconsume_times);
    o = put64(o, m->prepared_tx_offset);
    o = put32(o, m->body_len);
    if (m->body_len) memcpy(o, m->body, m->body_len);
    o += m->body_len;
    if (tl > 127) {
        *o++ = (uint8_t)(tl >> 8);
        *o++ = (uint8_t)tl;
    } else {
        *o++ = (uint8_t)tl;
    }
    if (tl) memcpy(o, tp, tl);
    o += tl;
    *o++ = (uint8_t)(m->props_len >> 8);
    *o++ = (uint8_t)m->props_len;
    if (m->props_len) memcpy(o, m->props, m->props_len);
    out->len += size;
    return 0;
}

int rmq__zlib_deflate(const char *src, size_t len, int level, rmq_buf_t *out)
{
    z_stream zs;
    uLong bound;
    int zrc;
    memset(&zs, 0, sizeof(zs));
    if (deflateInit(&zs, level) != Z_OK) return RMQ_ERR_INVALID;
    bound = deflateBound(&zs, (uLong)len);
    if (rmq__buf_reserve(out, bound)) {
        deflateEnd(&zs);
        return RMQ_ERR_NOMEM;
    }
    zs.next_in = (Bytef *)src;
    zs.avail_in = (uInt)len;
    zs.next_out = (Bytef *)out->data + out->len;
    zs.avail_out = (uInt)bound;
    zrc = deflate(&zs, Z_FINISH);
    if (zrc == Z_STREAM_END) out->len += zs.total_out;
    deflateEnd(&zs);
    return zrc == Z_STREAM_END ? 0 : RMQ_ERR_NOMEM;
}

/* ---- FFI leaf functions ---------------------------------------------------------------- */

RMQ_EXPORT int rmq_ffi_abi_version(void)
{
    return RMQ_FFI_ABI_VERSION;
}

RMQ_EXPORT int rmq_msg_offset_msg_id(const rmq_msg_t *m, char *out)
{
    int v6 = (m->sys_flag & RMQ_SYSFLAG_STOREHOST_V6) != 0;
    return rmq__offset_msg_id(m->store_host, v6 ? 16 : 4, m->store_port, m->commit_log_offset, out);
}

void rmq__msg_id(const rmq_msg_t *m, char *out)
{
    if (m->uniq_key_len && m->uniq_key_len < 57) {
        memcpy(out, m->uniq_key, m->uniq_key_len);
        out[m->uniq_key_len] = 0;
    } else {
        rmq_msg_offset_msg_id(m, out);
    }
}

/* "1.2.3.4:5678", or for IPv6 Java's getHostAddress form in brackets: "[0:0:0:0:0:0:0:1]:5678". */
RMQ_EXPORT int rmq_msg_host(const rmq_msg_t *m, int store, char *out)
{
    const uint8_t *a = store ? m->store_host : m->born_host;
    int port = store ? m->store_port : m->born_port;
    int v6 = (m->sys_flag & (store ? RMQ_SYSFLAG_STOREHOST_V6 : RMQ_SYSFLAG_BORNHOST_V6)) != 0;
    if (!v6) return snprintf(out, 64, "%u.%u.%u.%u:%d", a[0], a[1], a[2], a[3], port);
    return snprintf(out, 64, "[%x:%x:%x:%x:%x:%x:%x:%x]:%d", rmq__rd16(a), rmq__rd16(a + 2),
                    rmq__rd16(a + 4), rmq__rd16(a + 6), rmq__rd16(a + 8), rmq__rd16(a + 10),
                    rmq__rd16(a + 12), rmq__rd16(a + 14), port);
}

RMQ_EXPORT const char *rmq_msg_prop(const rmq_msg_t *m, const char *key, uint32_t *len)
{
    if (!m || !key || !len || !m->props) return NULL;
    return rmq__props_find(m->props, m->props_len, key, strlen(key), len);
}
