/*
 * fuzz_frame.c -- libFuzzer target for the framer and the RemotingCommand codec.
 *
 * Input: byte 0 picks where the rest is split; the rest is a byte stream fed to the framer in two
 * chunks (the first through rmq__framer_feed, the second through alloc/commit as libuv would).
 * Every frame that comes out is decoded; every command that decodes is re-encoded as JSON and as
 * ROCKETMQ, and each encoding must decode again to the same command (within what the binary
 * header can carry, see same_cmd). Any other outcome aborts.
 * Seeds: spec/fixtures/fuzz/frame/ (captured frames with a split byte in front).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/cmd.h"

#define FUZZ_MAX_FRAME (1u << 20)

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_frame: %s: %s\n", what, detail ? detail : "");
    abort();
}

/* The binary header truncates code and version to 16 bits, and an empty remark, key or value
 * comes back as absent; JSON keeps everything. */
static int same_str_bin(const char *a, const char *b)
{
    if (!a || !*a) return !b;
    return b && !strcmp(a, b);
}

static void same_cmd(const rmq_cmd_t *a, const rmq_cmd_t *b, int t)
{
    int i, n = 0;
    int32_t code = t ? (int16_t)a->code : a->code, version = t ? (int16_t)a->version : a->version;
    if (b->code != code || b->version != version || b->opaque != a->opaque || b->flag != a->flag ||
        b->language != a->language || b->serialize != t)
        fail("scalar fields changed", t ? "ROCKETMQ" : "JSON");
    if (t ? !same_str_bin(a->remark, b->remark)
          : (!a->remark != !b->remark || (a->remark && strcmp(a->remark, b->remark))))
        fail("remark changed", a->remark);
    for (i = 0; i < a->n_ext; i++) {
        const char *v = rmq__cmd_ext(b, a->ext[i].key);
        if (t && (!*a->ext[i].key || !*a->ext[i].val)) continue;
        n++;
        if (!v || strcmp(v, a->ext[i].val)) fail("ext value changed", a->ext[i].key);
    }
    if (b->n_ext != n) fail("ext count changed", t ? "ROCKETMQ" : "JSON");
    if (a->body_len != b->body_len || (a->body_len && memcmp(a->body, b->body, a->body_len)))
        fail("body changed", NULL);
}

static void on_frame(void *ud, rmq_rbuf_t *frame)
{
    rmq_cmd_t c;
    char err[256], desc[256];
    int t;
    (void)ud;
    if (rmq__cmd_decode(frame, &c, err, sizeof(err))) {
        rmq__rbuf_release(frame);
        return;
    }
    rmq__cmd_describe(&c, desc, sizeof(desc));
    for (t = 0; t < 2; t++) {
        rmq_cmd_t e = c, d;
        rmq_buf_t b;
        rmq_rbuf_t *rb;
        int rc;
        e.serialize = t;
        rmq__buf_init(&b);
        rc = rmq__cmd_encode(&e, &b);
        /* Refusals that are legitimate: a key too long for the binary short length, or a
         * header that grew past the frame limits (JSON escapes take up to 6 bytes per byte). */
        if (rc == RMQ_ERR_INVALID || rc == RMQ_ERR_TOO_LARGE) {
            rmq__buf_free(&b);
            continue;
        }
        if (rc) fail("encode failed", desc);
        rb = rmq__rbuf_new(b.len);
        memcpy(rb->data, b.data, b.len);
        if (rmq__cmd_decode(rb, &d, err, sizeof(err)))
            fail("re-encoded frame does not decode", err);
        same_cmd(&c, &d, t);
        rmq__cmd_free(&d);
        rmq__rbuf_release(rb);
        rmq__buf_free(&b);
    }
    rmq__cmd_free(&c);
    rmq__rbuf_release(frame);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static rmq_framer_t f; /* 64 KiB of scratch: keep it off the stack */
    char err[256];
    const char *p;
    size_t n, split;
    int rc;
    if (size < 1) return 0;
    p = (const char *)data + 1;
    n = size - 1;
    split = n * data[0] / 255;
    rmq__framer_init(&f, FUZZ_MAX_FRAME);
    rc = rmq__framer_feed(&f, p, split, on_frame, NULL, err, sizeof(err));
    p += split;
    n -= split;
    while (!rc && n > 0) {
        char *base;
        size_t len;
        rmq__framer_alloc(&f, &base, &len);
        if (len > n) len = n;
        memcpy(base, p, len);
        rc = rmq__framer_commit(&f, base, len, on_frame, NULL, err, sizeof(err));
        p += len;
        n -= len;
    }
    if (rc && rc != RMQ_ERR_BAD_FRAME && rc != RMQ_ERR_TOO_LARGE) fail("framer", err);
    rmq__framer_reset(&f);
    return 0;
}
