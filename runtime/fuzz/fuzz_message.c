/*
 * fuzz_message.c -- libFuzzer target: decode an arbitrary PULL_MESSAGE body (decompressing, raw,
 * and past undecodable messages), read every view, and check that re-encoding the raw views
 * decodes to the same messages.
 * Seeds: spec/fixtures/fuzz/message/ (bodies cut from the captured PULL responses).
 */
#include "protocol/message.h"

#include <stdlib.h>

static void same(const rmq_msg_t *a, const rmq_msg_t *b)
{
    if (a->queue_offset != b->queue_offset || a->commit_log_offset != b->commit_log_offset ||
        a->sys_flag != b->sys_flag || a->body_len != b->body_len ||
        a->store_topic_len != b->store_topic_len || a->props_len != b->props_len ||
        a->tags_len != b->tags_len || a->uniq_key_len != b->uniq_key_len ||
        (a->body_len && memcmp(a->body, b->body, a->body_len) != 0) ||
        memcmp(a->store_topic, b->store_topic, a->store_topic_len) != 0 ||
        (a->props_len && memcmp(a->props, b->props, a->props_len) != 0))
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rmq_rbuf_t *rb = rmq__rbuf_new(size);
    rmq_msgset_t *set, *raw, *again;
    char err[256], id[64], host[64];
    uint32_t vl;
    rmq_buf_t re;
    if (!rb) return 0;
    memcpy(rb->data, data, size);
    if (rmq__msgset_decode(rb, rb->data, size, "b", 1, 2, &set, err, sizeof(err)) !=
        RMQ_ERR_NOMEM) {
        for (int i = 0; i < set->n; i++) {
            rmq_msg_t *m = &set->msgs[i];
            rmq_msg_offset_msg_id(m, id);
            rmq_msg_host(m, 0, host);
            rmq_msg_host(m, 1, host);
            rmq_msg_prop(m, "TAGS", &vl);
            rmq__msg_restore_retry_topic(m);
            if (m->body_len) (void)(volatile char)m->body[m->body_len - 1];
            rmq__msg_release(m);
        }
        rmq__msgset_release(set);
    }
    if (rmq__msgset_decode_ex(rb, rb->data, size, "b", 1, 2, RMQ_DECODE_RAW_BODY, &raw, err,
                              sizeof(err)) != RMQ_ERR_NOMEM) {
        rmq__buf_init(&re);
        for (int i = 0; i < raw->n; i++)
            if (rmq__msg_encode_stored(&re, &raw->msgs[i])) __builtin_trap();
        if (rmq__msgset_decode_ex(NULL, re.data, re.len, "b", 1, 2, RMQ_DECODE_RAW_BODY, &again,
                                  err, sizeof(err)) != RMQ_OK ||
            again->n != raw->n)
            __builtin_trap();
        for (int i = 0; i < raw->n; i++)
            same(&raw->msgs[i], &again->msgs[i]);
        again->refs = 1;
        rmq__msgset_release(again);
        rmq__buf_free(&re);
        raw->refs = 1;
        rmq__msgset_release(raw);
    }
    /* Past undecodable messages (the consumer's way): every kept view released, good or bad. */
    if (rmq__msgset_decode_ex(rb, rb->data, size, "b", 1, 2, RMQ_DECODE_KEEP_BAD, &set, err,
                              sizeof(err)) != RMQ_ERR_NOMEM) {
        if (set->lost && set->lost_at >= size) __builtin_trap();
        for (int i = 0; i < set->n; i++) {
            if (rmq__msg_undecodable(&set->msgs[i])) __builtin_trap();
            rmq__msg_release(&set->msgs[i]);
        }
        for (int i = 0; i < set->n_bad; i++) {
            rmq_msg_t *m = &set->bad[i];
            if (!rmq__msg_undecodable(m) || !rmq__msg_undecodable_why(m) || m->body_len)
                __builtin_trap();
            rmq_msg_offset_msg_id(m, id);
            rmq__msg_release(m);
        }
        rmq__msgset_release(set);
    }
    rmq__rbuf_release(rb);
    return 0;
}
