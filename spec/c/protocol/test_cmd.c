/*
 * test_cmd.c -- the RemotingCommand codec and the framer against real 4.9.4 frames.
 *
 * Inputs (run from the repo root): spec/fixtures/wire/<session>/ (captured frames + index.json)
 * and spec/fixtures/vectors/remoting.json (frames made by the Java classes).
 *
 * Byte-identical re-encoding of captured frames: every request/oneway frame written by a Java
 * process re-encodes exactly. Exceptions, with the reason:
 *   - 06_route_json_versions frames sent from "client:*": a hand-written test client, not
 *     fastjson (its keys are not in alphabetical order). They must still decode.
 * Responses are re-encoded too and must match as well once their FastCodesHeader kind (known
 * only from the request) is set; the count is printed.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/cmd.h"
#include "base/codes.h"

#define TEST_MAX_FAILURES 50
#include "test_util.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static rmq_rbuf_t *rbuf_of(const void *p, size_t n)
{
    rmq_rbuf_t *rb = rmq__rbuf_new(n);
    memcpy(rb->data, p, n);
    return rb;
}

/* Decode a whole frame given as bytes; returns the rmq__cmd_decode result. */
static int decode_bytes(const void *p, size_t n, rmq_cmd_t *c, char *err, size_t errsz)
{
    rmq_rbuf_t *rb = rbuf_of(p, n);
    int rc = rmq__cmd_decode(rb, c, err, errsz);
    rmq__rbuf_release(rb);
    return rc;
}

/* Header fields equal (ext compared as maps), body equal. */
static int cmd_equal(const rmq_cmd_t *a, const rmq_cmd_t *b, char *why, size_t whysz)
{
    int i;
    if (a->code != b->code || a->language != b->language || a->version != b->version ||
        a->opaque != b->opaque || a->flag != b->flag) {
        snprintf(why, whysz,
                 "scalar fields differ (code %d/%d lang %d/%d ver %d/%d op %d/%d "
                 "flag %d/%d)",
                 a->code, b->code, a->language, b->language, a->version, b->version, a->opaque,
                 b->opaque, a->flag, b->flag);
        return 0;
    }
    if (!a->remark != !b->remark || (a->remark && strcmp(a->remark, b->remark))) {
        snprintf(why, whysz, "remark differs");
        return 0;
    }
    if (a->n_ext != b->n_ext) {
        snprintf(why, whysz, "ext count %d vs %d", a->n_ext, b->n_ext);
        return 0;
    }
    for (i = 0; i < a->n_ext; i++) {
        const char *v = rmq__cmd_ext(b, a->ext[i].key);
        if (!v || strcmp(v, a->ext[i].val)) {
            snprintf(why, whysz, "ext %s differs", a->ext[i].key);
            return 0;
        }
    }
    if (a->body_len != b->body_len || (a->body_len && memcmp(a->body, b->body, a->body_len))) {
        snprintf(why, whysz, "body differs");
        return 0;
    }
    return 1;
}

/* Re-encode c in serialize type t and decode that again into out. */
static int reencode(const rmq_cmd_t *c, int t, rmq_cmd_t *out, char *err, size_t errsz)
{
    rmq_cmd_t tmp = *c;
    rmq_buf_t b;
    int rc;
    tmp.serialize = t;
    rmq__buf_init(&b);
    rc = rmq__cmd_encode(&tmp, &b);
    if (!rc) rc = decode_bytes(b.data, b.len, out, err, errsz);
    rmq__buf_free(&b);
    return rc;
}

/* Compare a decoded command with the `header` object of index.json or remoting.json. */
static void check_header(const rmq_cmd_t *c, json_t *h, const char *what)
{
    json_t *ext = json_object_get(h, "extFields"), *lang = json_object_get(h, "language");
    json_t *remark = json_object_get(h, "remark");
    const char *k;
    json_t *v;
    CHECKF(c->code == json_integer_value(json_object_get(h, "code")), "%s: code", what);
    CHECKF(c->version == json_integer_value(json_object_get(h, "version")), "%s: version", what);
    CHECKF(c->opaque == json_integer_value(json_object_get(h, "opaque")), "%s: opaque", what);
    CHECKF(c->flag == json_integer_value(json_object_get(h, "flag")), "%s: flag", what);
    if (json_is_string(lang))
        CHECKF(rmq_language_name(c->language) &&
                   !strcmp(rmq_language_name(c->language), json_string_value(lang)),
               "%s: language %d vs %s", what, c->language, json_string_value(lang));
    if (json_is_string(remark))
        CHECKF(c->remark && !strcmp(c->remark, json_string_value(remark)), "%s: remark", what);
    else
        CHECKF(!c->remark, "%s: remark should be absent", what);
    CHECKF(c->n_ext == (int)json_object_size(ext), "%s: %d ext fields, expected %d", what, c->n_ext,
           (int)json_object_size(ext));
    json_object_foreach(ext, k, v)
    {
        const char *got = rmq__cmd_ext(c, k);
        CHECKF(got && !strcmp(got, json_string_value(v)), "%s: ext %s = %s, expected %s", what, k,
               got ? got : "(absent)", json_string_value(v));
    }
}

/* ---- framer helpers -------------------------------------------------------------------------- */

typedef struct collect {
    rmq_rbuf_t **frames;
    int n, cap;
    int stop_after; /* reset the framer from the callback after this many frames (0: never) */
    rmq_framer_t *f;
} collect_t;

static void collect_cb(void *ud, rmq_rbuf_t *frame)
{
    collect_t *k = ud;
    if (k->n == k->cap) {
        k->cap = k->cap ? k->cap * 2 : 64;
        k->frames = realloc(k->frames, (size_t)k->cap * sizeof(*k->frames));
    }
    k->frames[k->n++] = frame;
    if (k->stop_after && k->n == k->stop_after) rmq__framer_reset(k->f);
}

static void collect_free(collect_t *k)
{
    int i;
    for (i = 0; i < k->n; i++)
        rmq__rbuf_release(k->frames[i]);
    free(k->frames);
    memset(k, 0, sizeof(*k));
}

static uint64_t rng = 88172645463325252ull;
static uint64_t xrand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Feed the stream in chunks: mode 0 one byte at a time, 1 random sizes, 2 all at once,
 * 3 through alloc/commit as libuv would, with random read sizes. */
static int framer_run(const char *s, size_t n, int mode, collect_t *k, rmq_framer_t *f)
{
    char err[256];
    size_t off = 0;
    int rc = 0;
    k->f = f;
    while (off < n && !rc) {
        size_t chunk;
        if (mode == 0)
            chunk = 1;
        else if (mode == 2)
            chunk = n - off;
        else
            chunk = 1 + (size_t)(xrand() % ((xrand() & 1) ? 64 : 100000));
        if (chunk > n - off) chunk = n - off;
        if (mode == 3) {
            char *base;
            size_t len;
            rmq__framer_alloc(f, &base, &len);
            if (chunk > len) chunk = len;
            memcpy(base, s + off, chunk);
            rc = rmq__framer_commit(f, base, chunk, collect_cb, k, err, sizeof(err));
        } else {
            rc = rmq__framer_feed(f, s + off, chunk, collect_cb, k, err, sizeof(err));
        }
        off += chunk;
    }
    return rc;
}

/* ---- captured sessions --------------------------------------------------------------------- */

static int total_frames, total_requests_same, total_responses_same, total_responses;

static void test_session(const char *dir)
{
    char path[1024], err[256];
    json_t *idx, *frames, *fr;
    size_t i, nframes;
    char *stream = NULL;
    size_t stream_len = 0, *offs;
    int mode, handmade;

    snprintf(path, sizeof(path), "%s/index.json", dir);
    idx = test_load_json(path);
    if (!idx) return;
    frames = json_object_get(idx, "frames");
    nframes = json_array_size(frames);
    offs = calloc(nframes + 1, sizeof(*offs));

    json_array_foreach(frames, i, fr)
    {
        const char *file = json_string_value(json_object_get(fr, "file"));
        const char *kind = json_string_value(json_object_get(fr, "kind"));
        const char *direction = json_string_value(json_object_get(fr, "direction"));
        const char *st = json_string_value(json_object_get(fr, "serialize_type"));
        int reqcode = (int)json_integer_value(json_object_get(fr, "request_code"));
        size_t len;
        char *bytes, what[1100];
        rmq_cmd_t c, c2;
        rmq_buf_t b;
        int rc, is_resp = !strcmp(kind, "response");

        snprintf(path, sizeof(path), "%s/%s", dir, file);
        snprintf(what, sizeof(what), "%s", path);
        bytes = test_read_file(path, &len);
        CHECKF(bytes != NULL, "cannot read %s", path);
        if (!bytes) continue;
        stream = realloc(stream, stream_len + len);
        memcpy(stream + stream_len, bytes, len);
        offs[i] = stream_len;
        stream_len += len;
        offs[i + 1] = stream_len;

        rc = decode_bytes(bytes, len, &c, err, sizeof(err));
        CHECKF(rc == 0, "%s: decode failed: %s", what, err);
        if (rc) {
            free(bytes);
            continue;
        }
        total_frames++;
        check_header(&c, json_object_get(fr, "header"), what);
        CHECKF(c.serialize == (!strcmp(st, "ROCKETMQ") ? 1 : 0), "%s: serialize type", what);
        CHECKF(c.body_len == (size_t)json_integer_value(json_object_get(fr, "body_length")),
               "%s: body length", what);
        CHECKF(!!(c.flag & RMQ_FLAG_RESPONSE) == is_resp, "%s: response flag", what);

        /* Re-encode in the same type: byte-identical. */
        if (is_resp) c.fast = (uint8_t)rmq__cmd_fast_kind(reqcode, 1);
        rmq__buf_init(&b);
        rc = rmq__cmd_encode(&c, &b);
        CHECKF(rc == 0, "%s: encode failed %d", what, rc);
        handmade = !strncmp(direction, "client:", 7);
        if (!rc) {
            int same = b.len == len && !memcmp(b.data, bytes, len);
            if (is_resp) {
                total_responses++;
                total_responses_same += same;
                CHECKF(same, "%s: response does not re-encode byte-identically", what);
            } else if (!handmade) {
                total_requests_same += same;
                CHECKF(same, "%s: request does not re-encode byte-identically", what);
            }
        }
        rmq__buf_free(&b);

        /* Round trip through both serialize types: JSON -> ROCKETMQ -> JSON and back. */
        {
            int t = c.serialize ^ 1;
            rmq_cmd_t c3;
            rc = reencode(&c, t, &c2, err, sizeof(err));
            CHECKF(rc == 0, "%s: re-encode as %d failed: %s", what, t, err);
            if (!rc) {
                CHECKF(cmd_equal(&c, &c2, err, sizeof(err)), "%s: type %d round trip: %s", what, t,
                       err);
                rc = reencode(&c2, t ^ 1, &c3, err, sizeof(err));
                CHECKF(rc == 0, "%s: back to %d failed: %s", what, t ^ 1, err);
                if (!rc) {
                    CHECKF(cmd_equal(&c, &c3, err, sizeof(err)), "%s: back: %s", what, err);
                    rmq__cmd_free(&c3);
                }
                rmq__cmd_free(&c2);
            }
        }
        rmq__cmd_free(&c);
        free(bytes);
    }

    /* The framer: the whole session as one stream, cut in every way. */
    for (mode = 0; mode < 4; mode++) {
        collect_t k = {0};
        rmq_framer_t *f = malloc(sizeof(*f));
        int rc, rep, reps = mode == 1 || mode == 3 ? 5 : 1;
        for (rep = 0; rep < reps; rep++) {
            rmq__framer_init(f, 0);
            rc = framer_run(stream, stream_len, mode, &k, f);
            CHECKF(rc == 0, "%s: framer mode %d failed", dir, mode);
            CHECKF(k.n == (int)nframes, "%s: framer mode %d gave %d frames, expected %zu", dir,
                   mode, k.n, nframes);
            CHECKF(f->cur == NULL && f->lenhave == 0, "%s: framer left a partial frame", dir);
            for (i = 0; i < (size_t)k.n && i < nframes; i++) {
                size_t flen = offs[i + 1] - offs[i];
                CHECKF(k.frames[i]->len == flen &&
                           !memcmp(k.frames[i]->data, stream + offs[i], flen),
                       "%s: framer mode %d frame %zu differs", dir, mode, i);
            }
            collect_free(&k);
            rmq__framer_reset(f);
        }
        free(f);
    }
    /* A callback that resets the framer stops the feed at once. */
    if (nframes > 3) {
        collect_t k = {0};
        rmq_framer_t *f = malloc(sizeof(*f));
        rmq__framer_init(f, 0);
        k.stop_after = 2;
        CHECKF(framer_run(stream, stream_len, 2, &k, f) == 0, "%s: stop", dir);
        CHECKF(k.n == 2, "%s: reset in the callback delivered %d frames", dir, k.n);
        collect_free(&k);
        rmq__framer_reset(f);
        free(f);
    }
    free(stream);
    free(offs);
    json_decref(idx);
}

static void test_captures(void)
{
    static char names[64][256];
    int n = test_wire_sessions(names, 64), i;
    for (i = 0; i < n; i++) {
        char dir[400];
        snprintf(dir, sizeof(dir), TEST_WIRE "/%.255s", names[i]);
        test_session(dir);
    }
    CHECKF(total_frames > 600, "only %d captured frames", total_frames);
    printf(
        "decoded %d captured frames; %d requests and %d/%d responses re-encode byte-identically\n",
        total_frames, total_requests_same, total_responses_same, total_responses);
}

/* ---- remoting.json vectors ------------------------------------------------------------------ */

static void check_vector(json_t *v)
{
    const char *name = json_string_value(json_object_get(v, "name"));
    const char *st = json_string_value(json_object_get(v, "serializeType"));
    const char *fh = json_string_value(json_object_get(v, "frameHex"));
    const char *nh = json_string_value(json_object_get(v, "nettyEncoderFrameHex"));
    json_t *ext = json_object_get(v, "extFieldsAfterMakeCustomHeaderToNet");
    char what[300], err[256];
    size_t flen, nlen = 0;
    char *frame = test_unhex_alloc(fh, &flen), *netty = nh ? test_unhex_alloc(nh, &nlen) : NULL;
    rmq_cmd_t c, c2;
    rmq_buf_t b;
    int rc, code = (int)json_integer_value(json_object_get(v, "code"));

    snprintf(what, sizeof(what), "vector %s/%s", name, st);
    rc = decode_bytes(frame, flen, &c, err, sizeof(err));
    CHECKF(rc == 0, "%s: %s", what, err);
    if (rc) goto out;
    check_header(&c, json_object_get(v, "decodedFromWire"), what);
    CHECKF(c.code == code &&
               c.serialize == (int)json_integer_value(json_object_get(v, "serializeTypeCode")),
           "%s: code/type", what);

    /* encode() form: plain HashMap order. */
    rmq__buf_init(&b);
    c.fast = RMQ_FAST_NONE;
    CHECKF(rmq__cmd_encode(&c, &b) == 0, "%s: encode", what);
    CHECKF(b.len == flen && !memcmp(b.data, frame, flen), "%s: re-encode differs from frameHex",
           what);
    rmq__buf_free(&b);

    /* NettyEncoder form: FastCodesHeader order (and duplicates after an RPC hook). */
    c.fast = (uint8_t)rmq__cmd_fast_kind(code, 0);
    if (netty) {
        rmq__buf_init(&b);
        c.fast_dup = strstr(name, "Acl") != NULL;
        CHECKF(rmq__cmd_encode(&c, &b) == 0, "%s: encode", what);
        CHECKF(b.len == nlen && !memcmp(b.data, netty, nlen),
               "%s: fast encode differs from nettyEncoderFrameHex", what);
        rmq__buf_free(&b);
        /* Decoding the wire form and encoding it again gives the wire form. */
        CHECKF(decode_bytes(netty, nlen, &c2, err, sizeof(err)) == 0, "%s: %s", what, err);
        check_header(&c2, json_object_get(v, "decodedFromWire"), what);
        CHECKF(c2.fast_dup == (strstr(name, "Acl") != NULL), "%s: fast_dup after decode", what);
        rmq__buf_init(&b);
        CHECKF(rmq__cmd_encode(&c2, &b) == 0, "%s: encode", what);
        CHECKF(b.len == nlen && !memcmp(b.data, netty, nlen), "%s: netty form does not round-trip",
               what);
        rmq__buf_free(&b);
        rmq__cmd_free(&c2);
    } else {
        rmq__buf_init(&b);
        CHECKF(rmq__cmd_encode(&c, &b) == 0, "%s: encode", what);
        CHECKF(b.len == flen && !memcmp(b.data, frame, flen), "%s: wire form differs", what);
        rmq__buf_free(&b);
    }

    /* Built from scratch the way a client builds it: the same bytes. The insertion order is
     * the header class's field order as listed in the vector (only collisions inside one
     * HashMap bucket could make it matter). */
    {
        rmq_cmd_t n;
        const char *k;
        json_t *val;
        static const char *pull_fields[] = {
            "consumerGroup", "topic",      "queueId",        "queueOffset",
            "maxMsgNums",    "sysFlag",    "commitOffset",   "suspendTimeoutMillis",
            "subscription",  "subVersion", "expressionType", "Signature",
            "AccessKey",     NULL}; /* declaration order, then the ACL hook's adds */
        rmq__cmd_init(&n, code, c.serialize);
        n.opaque = c.opaque;
        if (code == RMQ_REQ_PULL_MESSAGE) {
            /* maxMsgNums, sysFlag and suspendTimeoutMillis share a bucket: the order in which
             * makeCustomHeaderToNet puts them (field declaration order) shows on the wire. */
            int i;
            for (i = 0; pull_fields[i]; i++)
                if (json_object_get(ext, pull_fields[i]))
                    rmq__cmd_set_ext(&n, pull_fields[i],
                                     json_string_value(json_object_get(ext, pull_fields[i])));
            CHECKF(n.n_ext == (int)json_object_size(ext), "%s: unexpected PULL field", what);
        } else {
            json_object_foreach(ext, k, val) rmq__cmd_set_ext(&n, k, json_string_value(val));
        }
        n.body = c.body;
        n.body_len = c.body_len;
        n.fast = RMQ_FAST_NONE;
        rmq__buf_init(&b);
        CHECKF(rmq__cmd_encode(&n, &b) == 0, "%s: encode", what);
        CHECKF(b.len == flen && !memcmp(b.data, frame, flen), "%s: built command differs", what);
        rmq__buf_free(&b);
        rmq__cmd_free(&n);
    }
    rmq__cmd_free(&c);
out:
    free(frame);
    free(netty);
}

static void test_vectors(void)
{
    json_t *root = test_load_json("spec/fixtures/vectors/remoting.json"), *v;
    size_t i;
    int n = 0;
    if (!root) return;
    json_array_foreach(json_object_get(root, "frames"), i, v)
    {
        check_vector(v);
        n++;
    }
    json_array_foreach(json_object_get(root, "extraCases"), i, v)
    {
        check_vector(v);
        n++;
    }
    CHECKF(n == 9, "%d vectors", n);
    json_decref(root);

    /* PROTOCOL.md 10.6 built from scratch, both header types. */
    {
        static const char js[] = "{\"code\":105,\"extFields\":{\"topic\":\"TopicTest\"},\"flag\":0,"
                                 "\"language\":\"JAVA\",\"opaque\":1,\"serializeTypeCurrentRPC\":"
                                 "\"JSON\",\"version\":401}";
        size_t blen;
        char *bin =
            test_unhex_alloc("0000002d010000290069000191000000010000000000000000000000140005746f"
                             "70696300000009546f70696354657374",
                             &blen);
        rmq_cmd_t c;
        rmq_buf_t b;
        rmq__cmd_init(&c, RMQ_REQ_GET_ROUTEINFO_BY_TOPIC, RMQ_SERIALIZE_JSON);
        c.opaque = 1;
        rmq__cmd_set_ext(&c, "topic", "TopicTest");
        rmq__buf_init(&b);
        CHECKF(rmq__cmd_encode(&c, &b) == 0, "10.6 json");
        CHECKF(b.len == 139 && rmq__rd32(b.data) == 135 && rmq__rd32(b.data + 4) == 131 &&
                   !memcmp(b.data + 8, js, 131),
               "10.6 json frame");
        b.len = 0;
        c.serialize = RMQ_SERIALIZE_ROCKETMQ;
        CHECKF(rmq__cmd_encode(&c, &b) == 0, "10.6 bin");
        CHECKF(b.len == blen && !memcmp(b.data, bin, blen), "10.6 binary frame");
        /* encode_header leaves the body to the caller but counts it. */
        b.len = 0;
        c.body = "xyz";
        c.body_len = 3;
        CHECKF(rmq__cmd_encode_header(&c, &b) == 0 && b.len == blen && rmq__rd32(b.data) == 48,
               "encode_header counts the body");
        rmq__buf_free(&b);
        rmq__cmd_free(&c);
        free(bin);
    }
}

/* ---- JSON parser ----------------------------------------------------------------------------- */

static rmq_buf_t frame_buf;

/* A whole frame around header bytes h (serialize type t), plus an optional body. */
static const char *mkframe(int t, const void *h, size_t hlen, const char *body, size_t *len)
{
    size_t blen = body ? strlen(body) : 0;
    frame_buf.len = 0;
    rmq__buf_append_be32(&frame_buf, (uint32_t)(4 + hlen + blen));
    rmq__buf_append_be32(&frame_buf, (uint32_t)t << 24 | (uint32_t)hlen);
    rmq__buf_append(&frame_buf, h, hlen);
    if (blen) rmq__buf_append(&frame_buf, body, blen);
    *len = frame_buf.len;
    return frame_buf.data;
}

static int decode_json_hdr(const char *json, rmq_cmd_t *c, char *err, size_t errsz)
{
    size_t len;
    const char *f = mkframe(0, json, strlen(json), NULL, &len);
    return decode_bytes(f, len, c, err, errsz);
}

static void test_json_parser(void)
{
    char err[256];
    rmq_cmd_t c;
    int rc;
    static const char *bad[] = {
        "",
        "[]",
        "{",
        "{\"code\":1",
        "{\"code\":1,}",
        "{\"code\" 1}",
        "{\"code\":\"105\"}",
        "{\"code\":1.5}",
        "{\"code\":1e3}",
        "{\"code\":2147483648}",
        "{\"code\":-2147483649}",
        "{\"code\":01}",
        "{\"code\":-}",
        "{\"code\":true}",
        "{\"remark\":5}",
        "{\"remark\":\"abc}",
        "{\"remark\":\"a\\x\"}",
        "{\"remark\":\"a\\u12G4\"}",
        "{\"remark\":\"a\\u12\"}",
        "{\"remark\":\"a\\",
        "{\"extFields\":[]}",
        "{\"extFields\":\"x\"}",
        "{\"extFields\":{\"a\":{}}}",
        "{\"extFields\":{\"a\":[1]}}",
        "{\"extFields\":{\"a\":\"b\",}}",
        "{\"extFields\":{\"a\" \"b\"}}",
        "{\"extFields\":{1:\"b\"}}",
        "{\"extFields\":{\"a\":tru}}",
        "{\"language\":{}}",
        "{\"language\":300}",
        "{\"language\":-1}",
        "{\"x\":[1,2,}",
        "{\"x\":{\"a\":1,\"b\"}}",
        "{\"x\":nul}",
        "{\"code\":1} x",
        "{\"code\":1}}",
        "{'code':1}",
    };
    size_t i;
    for (i = 0; i < RMQ_ARRAY_SIZE(bad); i++) {
        rc = decode_json_hdr(bad[i], &c, err, sizeof(err));
        CHECKF(rc == RMQ_ERR_BAD_FRAME, "bad JSON accepted: %s", bad[i]);
        CHECKF(c.strings == NULL && c.frame == NULL, "failed decode left state");
        if (!rc) rmq__cmd_free(&c);
    }
    /* Deep nesting in an unknown key: refused, without recursion trouble. */
    {
        rmq_buf_t j;
        int k;
        rmq__buf_init(&j);
        rmq__buf_append(&j, "{\"x\":", 5);
        for (k = 0; k < 100000; k++)
            rmq__buf_append(&j, "[", 1);
        rmq__buf_append(&j, "\0", 1);
        rc = decode_json_hdr(j.data, &c, err, sizeof(err));
        CHECKF(rc == RMQ_ERR_BAD_FRAME && strstr(err, "deep"), "deep nesting: %d %s", rc, err);
        j.len = 5;
        for (k = 0; k < 30; k++)
            rmq__buf_append(&j, "[{\"a\":", 6);
        rmq__buf_append(&j, "1", 1);
        for (k = 0; k < 30; k++)
            rmq__buf_append(&j, "}]", 2);
        rmq__buf_append(&j, ",\"code\":7}", 11);
        rc = decode_json_hdr(j.data, &c, err, sizeof(err));
        CHECKF(rc == 0 && c.code == 7, "moderate nesting refused: %s", err);
        if (!rc) rmq__cmd_free(&c);
        rmq__buf_free(&j);
    }

    /* Lenient where Java is: any order, whitespace, unknown keys, nulls, numbers as language. */
    rc =
        decode_json_hdr(" \r\n{ \"unknown\" : {\"n\":[1,-2.5e+3,true,false,null,{\"q\":\"\\\"\"}]},"
                        "\"version\" : 401 , \"language\":1,\"opaque\":-7,\"remark\":null,"
                        "\"extFields\" : { \"k\" : \"v\" , \"n\":12, \"b\":true, \"z\":null },"
                        "\"flag\":3,\"code\":-12,\"serializeTypeCurrentRPC\":\"JSON\"} \t",
                        &c, err, sizeof(err));
    CHECKF(rc == 0, "lenient header: %s", err);
    if (!rc) {
        CHECKF(c.code == -12 && c.version == 401 && c.language == RMQ_LANG_CPP && c.opaque == -7 &&
                   c.flag == 3 && !c.remark,
               "lenient header fields");
        CHECKF(c.n_ext == 3 && !strcmp(rmq__cmd_ext(&c, "k"), "v") &&
                   !strcmp(rmq__cmd_ext(&c, "n"), "12") && !strcmp(rmq__cmd_ext(&c, "b"), "true") &&
                   !rmq__cmd_ext(&c, "z"),
               "lenient ext");
        rmq__cmd_free(&c);
    }
    /* Missing everything: Java defaults. */
    rc = decode_json_hdr("{}", &c, err, sizeof(err));
    CHECKF(rc == 0 && c.code == 0 && c.language == RMQ_LANG_JAVA && !c.remark && c.n_ext == 0 &&
               !c.ext_empty,
           "empty object");
    if (!rc) rmq__cmd_free(&c);
    /* A key with an escaped NUL is not the key before the NUL. */
    rc = decode_json_hdr("{\"code\\u0000x\":5,\"opaque\":6}", &c, err, sizeof(err));
    CHECKF(rc == 0 && c.code == 0 && c.opaque == 6, "NUL in a key: %s", err);
    if (!rc) rmq__cmd_free(&c);
    /* An unknown (newer) language name is kept as OTHER. */
    rc = decode_json_hdr("{\"language\":\"NODE_JS\"}", &c, err, sizeof(err));
    CHECKF(rc == 0 && c.language == RMQ_LANG_OTHER, "unknown language name");
    if (!rc) rmq__cmd_free(&c);
    /* Escapes: \uXXXX to UTF-8, surrogate pairs, lone surrogates as U+FFFD. */
    rc = decode_json_hdr("{\"remark\":\"a\\u00e9\\u4e2d\\uD83D\\uDE00\\ud800x\\udc00\\n\\/\\\\\","
                         "\"extFields\":{\"k\\u0001\":\"\\u0002\\t\"}}",
                         &c, err, sizeof(err));
    CHECKF(rc == 0, "escapes: %s", err);
    if (!rc) {
        CHECKF(!strcmp(c.remark,
                       "a\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\xef\xbf\xbdx\xef\xbf\xbd\n/\\"),
               "escape decoding: %s", c.remark);
        CHECKF(!strcmp(rmq__cmd_ext(&c, "k\x01"), "\x02\t"), "escaped ext");
        rmq__cmd_free(&c);
    }
    /* Duplicate ext keys: last value wins, first position kept. */
    rc = decode_json_hdr("{\"extFields\":{\"a\":\"1\",\"b\":\"2\",\"a\":\"3\"}}", &c, err,
                         sizeof(err));
    CHECKF(rc == 0 && c.n_ext == 2 && !strcmp(c.ext[0].key, "a") && !strcmp(c.ext[0].val, "3"),
           "duplicate keys");
    if (!rc) rmq__cmd_free(&c);
    /* "extFields":{} is remembered so that it re-encodes. */
    rc = decode_json_hdr("{\"code\":0,\"extFields\":{},\"flag\":1,\"language\":\"JAVA\",\"opaque\":"
                         "3,\"serializeTypeCurrentRPC\":\"JSON\",\"version\":401}",
                         &c, err, sizeof(err));
    CHECKF(rc == 0 && c.ext_empty && c.n_ext == 0, "empty extFields");
    if (!rc) rmq__cmd_free(&c);
}

/* fastjson string escaping on encode. */
static void test_json_writer(void)
{
    rmq_cmd_t c;
    rmq_buf_t b;
    const char *want = "{\"code\":0,\"extFields\":{\"k\":\"\\u0001\\u0007\\b\\t\\n\\u000B\\f\\r"
                       "\\u001F\\\"\\\\/\\u007F\\u0080\\u009F\xc2\xa0\xc3\xa9\\u2028\\u2029\xe2\x80"
                       "\xaa\xf0\x9f\x98\x80\"},\"flag\":1,\"language\":\"JAVA\",\"opaque\":9,"
                       "\"remark\":\"\",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":401}";
    rmq_cmd_t req;
    rmq__cmd_init(&req, 1234, RMQ_SERIALIZE_JSON);
    req.opaque = 9;
    rmq__cmd_init_response(&c, &req, 0, "");
    rmq__cmd_set_ext(&c, "k",
                     "\x01\x07\b\t\n\x0b\f\r\x1f\"\\/\x7f\xc2\x80\xc2\x9f\xc2\xa0\xc3\xa9"
                     "\xe2\x80\xa8\xe2\x80\xa9\xe2\x80\xaa\xf0\x9f\x98\x80");
    rmq__buf_init(&b);
    CHECKF(rmq__cmd_encode(&c, &b) == 0, "encode");
    CHECKF(b.len == 8 + strlen(want) && !memcmp(b.data + 8, want, strlen(want)),
           "fastjson escaping: %.*s", (int)b.len - 8, b.data + 8);
    /* And it decodes back to the same bytes. */
    {
        rmq_cmd_t d;
        char err[256];
        CHECKF(decode_bytes(b.data, b.len, &d, err, sizeof(err)) == 0, "%s", err);
        CHECKF(!strcmp(rmq__cmd_ext(&d, "k"), rmq__cmd_ext(&c, "k")) && d.remark && !*d.remark,
               "escaped value round trip");
        rmq__cmd_free(&d);
    }
    rmq__buf_free(&b);
    rmq__cmd_free(&c);
    rmq__cmd_free(&req);
}

/* ---- binary parser ----------------------------------------------------------------------------
 */

static size_t bin_hdr(char *out, int32_t remark_len, const char *remark, int32_t ext_len,
                      const char *ext, size_t ext_bytes)
{
    size_t n = 0;
    memcpy(out, "\x00\x0b\x00\x01\x91\x00\x00\x00\x05\x00\x00\x00\x00", 13);
    n = 13;
    rmq__wr32(out + n, (uint32_t)remark_len);
    n += 4;
    if (remark) memcpy(out + n, remark, strlen(remark)), n += strlen(remark);
    rmq__wr32(out + n, (uint32_t)ext_len);
    n += 4;
    memcpy(out + n, ext, ext_bytes);
    return n + ext_bytes;
}

static void test_binary_parser(void)
{
    char h[256], err[256];
    size_t hl, fl;
    const char *f;
    rmq_cmd_t c;
    int rc;
    /* A good one first: remark, two entries, one empty value (absent), one duplicate. */
    static const char ext[] = "\x00\x01"
                              "a"
                              "\x00\x00\x00\x01"
                              "1"
                              "\x00\x01"
                              "b"
                              "\x00\x00\x00\x00"
                              "\x00\x01"
                              "a"
                              "\x00\x00\x00\x02"
                              "22";
    hl = bin_hdr(h, 2, "ok", sizeof(ext) - 1, ext, sizeof(ext) - 1);
    f = mkframe(1, h, hl, "BODY", &fl);
    rc = decode_bytes(f, fl, &c, err, sizeof(err));
    CHECKF(rc == 0, "good binary header: %s", err);
    if (!rc) {
        CHECKF(c.code == 11 && c.language == 0 && c.version == 401 && c.opaque == 5 && c.flag == 0,
               "binary scalars");
        CHECKF(c.remark && !strcmp(c.remark, "ok"), "binary remark");
        CHECKF(c.n_ext == 1 && !strcmp(rmq__cmd_ext(&c, "a"), "22") && !rmq__cmd_ext(&c, "b"),
               "binary ext");
        CHECKF(c.fast_dup == 1 && c.fast == RMQ_FAST_PULL_REQ, "binary fast flags");
        CHECKF(c.body_len == 4 && !memcmp(c.body, "BODY", 4), "binary body");
        rmq__cmd_free(&c);
    }
    /* Remark length 0: absent. */
    hl = bin_hdr(h, 0, NULL, 0, "", 0);
    f = mkframe(1, h, hl, NULL, &fl);
    rc = decode_bytes(f, fl, &c, err, sizeof(err));
    CHECKF(rc == 0 && !c.remark && !c.body && c.body_len == 0, "empty remark");
    if (!rc) rmq__cmd_free(&c);

#define BAD_BIN(desc, ...)                                                                         \
    do {                                                                                           \
        hl = bin_hdr(h, __VA_ARGS__);                                                              \
        f = mkframe(1, h, hl, "BODY", &fl);                                                        \
        rc = decode_bytes(f, fl, &c, err, sizeof(err));                                            \
        CHECKF(rc == RMQ_ERR_BAD_FRAME, "%s accepted", desc);                                      \
        if (!rc) rmq__cmd_free(&c);                                                                \
    } while (0)
    BAD_BIN("remark longer than header", 100, "ab", 0, "", 0);
    BAD_BIN("negative remark length", -1, NULL, 0, "", 0);
    BAD_BIN("remark eating the ext length", 6, "ab", 0, "", 0);
    BAD_BIN("ext length past the header", 0, NULL, 50,
            "\x00\x01"
            "a",
            3);
    BAD_BIN("negative ext length", 0, NULL, -5, "", 0);
    BAD_BIN("key longer than ext area", 0, NULL, 8,
            "\x00\x09"
            "abcdef",
            8);
    BAD_BIN("negative key length", 0, NULL, 8,
            "\xff\xff"
            "abcdef",
            8);
    BAD_BIN("value longer than ext area", 0, NULL, 9,
            "\x00\x01"
            "a"
            "\x00\x00\x00\x09"
            "xy",
            9);
    BAD_BIN("negative value length", 0, NULL, 9,
            "\x00\x01"
            "a"
            "\xff\xff\xff\xff"
            "xy",
            9);
    BAD_BIN("truncated key length", 0, NULL, 1, "\x00", 1);
    BAD_BIN("truncated value length", 0, NULL, 5,
            "\x00\x01"
            "a"
            "\x00\x00",
            5);
    BAD_BIN("bytes after the ext area", 0, NULL, 0, "zz", 2);
#undef BAD_BIN
    /* Truncated fixed part: every length below 21. */
    {
        size_t n;
        hl = bin_hdr(h, 0, NULL, 0, "", 0);
        for (n = 0; n < hl; n++) {
            f = mkframe(1, h, n, NULL, &fl);
            rc = decode_bytes(f, fl, &c, err, sizeof(err));
            CHECKF(rc == RMQ_ERR_BAD_FRAME, "binary header cut at %zu accepted", n);
            if (!rc) rmq__cmd_free(&c);
        }
    }
}

/* ---- frame-level checks ---------------------------------------------------------------------- */

static void test_frame_errors(void)
{
    char err[256], fr[64];
    rmq_cmd_t c;
    int rc;
    rmq_rbuf_t *rb;
    /* Too short. */
    rc = decode_bytes("\x00\x00\x00\x03\x00\x00", 6, &c, err, sizeof(err));
    CHECKF(rc == RMQ_ERR_BAD_FRAME, "short frame");
    /* Length field disagreeing with the buffer. */
    memcpy(fr, "\x00\x00\x00\x09\x00\x00\x00\x02{}\x00", 11);
    rc = decode_bytes(fr, 10, &c, err, sizeof(err));
    CHECKF(rc == RMQ_ERR_BAD_FRAME, "lying length");
    /* Header longer than the frame. */
    memcpy(fr, "\x00\x00\x00\x06\x00\x00\x00\x03{}", 10);
    rc = decode_bytes(fr, 10, &c, err, sizeof(err));
    CHECKF(rc == RMQ_ERR_BAD_FRAME && strstr(err, "header length"), "header > frame: %s", err);
    /* Bad serialize type. */
    memcpy(fr, "\x00\x00\x00\x06\x02\x00\x00\x02{}", 10);
    rc = decode_bytes(fr, 10, &c, err, sizeof(err));
    CHECKF(rc == RMQ_ERR_BAD_FRAME && strstr(err, "serialize"), "serialize type 2: %s", err);
    memcpy(fr, "\x00\x00\x00\x06\xff\x00\x00\x02{}", 10);
    CHECKF(decode_bytes(fr, 10, &c, err, sizeof(err)) == RMQ_ERR_BAD_FRAME, "serialize type 255");
    /* A good minimal frame with a body; the body points into the frame, which c keeps. */
    memcpy(fr, "\x00\x00\x00\x09\x00\x00\x00\x02{}abc", 13);
    rb = rbuf_of(fr, 13);
    rc = rmq__cmd_decode(rb, &c, err, sizeof(err));
    CHECKF(rc == 0 && c.body == rb->data + 10 && c.body_len == 3 && c.frame == rb && rb->refs == 2,
           "body view");
    if (!rc) rmq__cmd_free(&c);
    CHECKF(rb->refs == 1, "free releases the frame");
    rmq__rbuf_release(rb);
}

static void test_framer_errors(void)
{
    rmq_framer_t *f = malloc(sizeof(*f));
    collect_t k = {0};
    char err[256];
    int rc;
    /* Negative, too small, too big, exactly the limit. */
    rmq__framer_init(f, 0);
    rc = rmq__framer_feed(f, "\xff\xff\xff\xff", 4, collect_cb, &k, err, sizeof(err));
    CHECKF(rc == RMQ_ERR_BAD_FRAME, "negative length: %d", rc);
    rc = rmq__framer_feed(f, "\x00\x00\x00\x08", 4, collect_cb, &k, err, sizeof(err));
    CHECKF(rc == RMQ_ERR_BAD_FRAME, "error is sticky");
    rmq__framer_reset(f);
    rc = rmq__framer_feed(f, "\x00\x00\x00\x03", 4, collect_cb, &k, err, sizeof(err));
    CHECKF(rc == RMQ_ERR_BAD_FRAME, "length 3");
    rmq__framer_reset(f);
    rc = rmq__framer_feed(f, "\x00\xff\xff\xfd", 4, collect_cb, &k, err, sizeof(err));
    CHECKF(rc == RMQ_ERR_TOO_LARGE, "16777213 + 4 > 16 MiB: %d", rc);
    rmq__framer_reset(f);
    rc = rmq__framer_feed(f, "\x00\xff\xff", 3, collect_cb, &k, err, sizeof(err));
    CHECKF(rc == 0, "partial length word");
    rc = rmq__framer_feed(f, "\xfc", 1, collect_cb, &k, err, sizeof(err));
    CHECKF(rc == 0 && f->cur && f->cur->len == 16777216, "exactly the limit is accepted");
    rmq__framer_reset(f);
    /* A configured limit. */
    rmq__framer_init(f, 100);
    rc = rmq__framer_feed(f, "\x00\x00\x00\x61", 4, collect_cb, &k, err, sizeof(err));
    CHECKF(rc == RMQ_ERR_TOO_LARGE && strstr(err, "maximum"), "configured limit: %s", err);
    rmq__framer_reset(f);
    rc = rmq__framer_feed(f, "\x00\x00\x00\x60", 4, collect_cb, &k, err, sizeof(err));
    CHECKF(rc == 0, "configured limit exactly");
    /* A large frame goes straight into its buffer; alloc points inside it. */
    {
        char *base;
        size_t len;
        rmq__framer_alloc(f, &base, &len);
        CHECKF(base == f->scratch, "small remainder reads into scratch");
        rmq__framer_reset(f);
        rmq__framer_init(f, 0);
        rc = rmq__framer_feed(f, "\x00\x01\x00\x04\x00\x00\x00\x00", 8, collect_cb, &k, err,
                              sizeof(err));
        rmq__framer_alloc(f, &base, &len);
        CHECKF(rc == 0 && base == f->cur->data + 8 && len == 65536, "direct read area");
        memset(base, 'x', len);
        rc = rmq__framer_commit(f, base, len, collect_cb, &k, err, sizeof(err));
        CHECKF(rc == 0 && k.n == 1 && k.frames[0]->len == 65544 && !f->cur, "direct read frame");
        collect_free(&k);
    }
    rmq__framer_reset(f);
    free(f);
}

/* ---- fields API ---------------------------------------------------------------------------- */

static void test_fields(void)
{
    rmq_cmd_t c, r;
    int64_t v;
    int32_t v32;
    char d[200];
    rmq__cmd_init(&c, RMQ_REQ_PULL_MESSAGE, RMQ_SERIALIZE_ROCKETMQ);
    CHECKF(c.language == RMQ_LANG_JAVA && c.version == 401 && c.flag == 0 &&
               c.fast == RMQ_FAST_PULL_REQ,
           "init");
    rmq__cmd_set_ext_i64(&c, "queueOffset", INT64_MIN);
    rmq__cmd_set_ext_i64(&c, "maxMsgNums", 32);
    rmq__cmd_set_ext_bool(&c, "unitMode", 0);
    rmq__cmd_set_ext(&c, "maxMsgNums", "+33");
    CHECKF(c.n_ext == 3 && !strcmp(c.ext[1].key, "maxMsgNums"), "replace keeps position");
    CHECKF(rmq__cmd_ext_i64(&c, "queueOffset", &v) == 0 && v == INT64_MIN, "i64 min");
    CHECKF(rmq__cmd_ext_i32(&c, "maxMsgNums", &v32) == 0 && v32 == 33, "i32 with +");
    CHECKF(rmq__cmd_ext_i32(&c, "queueOffset", &v32) == RMQ_ERR_INVALID, "i32 range");
    CHECKF(rmq__cmd_ext_i64(&c, "nope", &v) == RMQ_ERR_NOT_FOUND, "absent");
    CHECKF(!rmq__cmd_ext_bool(&c, "unitMode") && !rmq__cmd_ext_bool(&c, "nope"), "bool false");
    rmq__cmd_set_ext(&c, "x", "TrUe");
    CHECKF(rmq__cmd_ext_bool(&c, "x"), "bool true any case");
    rmq__cmd_set_ext(&c, "x", "9223372036854775808");
    CHECKF(rmq__cmd_ext_i64(&c, "x", &v) == RMQ_ERR_INVALID, "i64 overflow");
    rmq__cmd_set_ext(&c, "x", "-9223372036854775809");
    CHECKF(rmq__cmd_ext_i64(&c, "x", &v) == RMQ_ERR_INVALID, "i64 underflow");
    rmq__cmd_set_ext(&c, "x", " 1");
    CHECKF(rmq__cmd_ext_i64(&c, "x", &v) == RMQ_ERR_INVALID, "space");
    rmq__cmd_set_ext(&c, "x", "-");
    CHECKF(rmq__cmd_ext_i64(&c, "x", &v) == RMQ_ERR_INVALID, "sign only");
    rmq__cmd_set_ext(&c, "x", NULL);
    CHECKF(c.n_ext == 3 && !rmq__cmd_ext(&c, "x"), "NULL removes");
    c.opaque = 5;
    rmq__cmd_describe(&c, d, sizeof(d));
    CHECKF(!strncmp(d, "PULL_MESSAGE(11) opaque=5 flag=0", 32), "describe: %s", d);
    rmq__cmd_init_response(&r, &c, RMQ_RESP_PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE");
    CHECKF(r.opaque == 5 && r.flag == RMQ_FLAG_RESPONSE && r.serialize == RMQ_SERIALIZE_ROCKETMQ &&
               r.fast == RMQ_FAST_PULL_RESP,
           "init_response");
    rmq__cmd_describe(&r, d, sizeof(d));
    CHECKF(strstr(d, "PULL_NOT_FOUND(19)") && strstr(d, "OFFSET_OVERFLOW_ONE"), "describe: %s", d);
    rmq__cmd_set_remark(&r, NULL);
    CHECKF(!r.remark, "remark cleared");
    rmq__cmd_free(&r);
    rmq__cmd_free(&c);
    /* Bad serialize type on encode. */
    {
        rmq_buf_t b;
        rmq__cmd_init(&c, 1, 7);
        rmq__buf_init(&b);
        CHECKF(rmq__cmd_encode(&c, &b) == RMQ_ERR_INVALID && b.len == 0, "encode bad type");
        rmq__buf_free(&b);
        rmq__cmd_free(&c);
    }
}

/* extFields order = java.util.HashMap iteration order, checked against the JDK itself
 * (spec/fixtures/codec/hashmap_order.json: resizes, treeifyBin resizes and real tree bins). */
static void test_hashmap_order(void)
{
    json_t *root = test_load_json("spec/fixtures/codec/hashmap_order.json"), *cs;
    size_t i;
    int ncases = 0;
    if (!root) return;
    json_array_foreach(root, i, cs)
    {
        const char *name = json_string_value(json_object_get(cs, "name"));
        json_t *keys = json_object_get(cs, "keys"), *order = json_object_get(cs, "order"), *k;
        size_t j;
        int t;
        for (t = 0; t < 2; t++) {
            rmq_cmd_t c, d;
            rmq_buf_t b;
            char err[256];
            rmq__cmd_init(&c, 0, t);
            json_array_foreach(keys, j, k) rmq__cmd_set_ext(&c, json_string_value(k), "v");
            rmq__buf_init(&b);
            CHECKF(rmq__cmd_encode(&c, &b) == 0, "%s: encode", name);
            CHECKF(decode_bytes(b.data, b.len, &d, err, sizeof(err)) == 0, "%s: %s", name, err);
            CHECKF(d.n_ext == (int)json_array_size(order), "%s: count", name);
            json_array_foreach(order, j, k)
            {
                if ((int)j >= d.n_ext) break;
                CHECKF(!strcmp(d.ext[j].key, json_string_value(k)),
                       "%s (type %d): position %zu is %s, "
                       "Java has %s",
                       name, t, j, d.ext[j].key, json_string_value(k));
            }
            rmq__cmd_free(&d);
            rmq__buf_free(&b);
            rmq__cmd_free(&c);
        }
        ncases++;
    }
    CHECKF(ncases > 200, "only %d HashMap cases", ncases);
    json_decref(root);
}

int main(void)
{
    rmq__buf_init(&frame_buf);
    test_fields();
    test_json_parser();
    test_json_writer();
    test_binary_parser();
    test_frame_errors();
    test_framer_errors();
    test_hashmap_order();
    test_vectors();
    test_captures();
    rmq__buf_free(&frame_buf);
    return test_report("test_cmd");
}
