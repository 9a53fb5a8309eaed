/*
 * fuzz_route.c -- libFuzzer target: the fastjson reader (parse, write, re-parse must write the
 * same bytes) and the route parser (a parsed route written in the old bare-key form parses back
 * to an equal route; the standard form is written too). Seeds: spec/fixtures/fuzz/route/.
 */
#include "protocol/fjson.h"
#include "protocol/route.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    rmq_fjdoc_t *doc = rmq__fj_parse((const char *)data, size, err, sizeof(err)), *doc2;
    rmq_route_t *r, *r2;
    rmq_buf_t a, b;
    rmq__buf_init(&a);
    rmq__buf_init(&b);
    if (doc) {
        if (rmq__fj_write(&a, rmq__fj_root(doc), 0)) __builtin_trap();
        doc2 = rmq__fj_parse(a.data, a.len, err, sizeof(err));
        if (!doc2) __builtin_trap();
        if (rmq__fj_write(&b, rmq__fj_root(doc2), 0) || a.len != b.len ||
            memcmp(a.data, b.data, a.len) != 0)
            __builtin_trap();
        b.len = 0;
        rmq__fj_write(&b, rmq__fj_root(doc2), RMQ_FJ_PRETTY | RMQ_FJ_ASCII);
        rmq__fj_get(rmq__fj_root(doc2), "queueDatas");
        rmq__fj_free(doc2);
        rmq__fj_free(doc);
    }
    if (rmq__route_parse((const char *)data, size, &r, err, sizeof(err)) == 0) {
        rmq_mq_t *mqs;
        int n;
        a.len = 0;
        if (rmq__route_write(r, 0, &a)) __builtin_trap();
        if (rmq__route_parse(a.data, a.len, &r2, err, sizeof(err)) != 0 || !rmq__route_equal(r, r2))
            __builtin_trap();
        rmq__route_free(r2);
        a.len = 0;
        rmq__route_write(r, 1, &a);
        if (r->n_bds) rmq__route_master_addr(r, r->bds[0].broker_name);
        /* Keep the subscribe set small: a fuzzed readQueueNums may be huge. */
        int64_t total = 0;
        for (int i = 0; i < r->n_qds; i++)
            if (r->qds[i].read_queue_nums > 0) total += r->qds[i].read_queue_nums;
        if (total < 4096 && rmq__route_subscribe_mqs(r, "T", &mqs, &n) == 0) rmq__mqs_free(mqs, n);
        rmq__route_free(r);
    }
    rmq__buf_free(&a);
    rmq__buf_free(&b);
    return 0;
}
