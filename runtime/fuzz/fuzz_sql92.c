/*
 * fuzz_sql92.c -- libFuzzer target: the SQL92 selector. The input up to the first byte 0x00 is
 * the expression; what follows is a properties string (name\1value\2...). A compiled expression
 * is evaluated over the properties (the outcome must be one of the four) and printed, and the
 * offset of ignored text must lie inside the expression. Seeds: spec/fixtures/fuzz/sql92/.
 */
#include "protocol/sql92.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *z = memchr(data, 0, size);
    size_t elen = z ? (size_t)(z - data) : size;
    char *expr = malloc(elen + 1);
    if (!expr) return 0;
    memcpy(expr, data, elen);
    expr[elen] = 0;
    const char *props = z ? (const char *)z + 1 : "";
    size_t plen = z ? size - elen - 1 : 0;
    char err[512], text[4096];
    rmq_sql92_t *e = NULL;
    if (rmq__sql92_compile(expr, &e, err, sizeof(err), NULL) == 0) {
        int r = rmq__sql92_eval(e, props, plen, err, sizeof(err));
        if (r < RMQ_SQL92_FALSE || r > RMQ_SQL92_ERROR) __builtin_trap();
        rmq__sql92_to_string(e, text, sizeof(text));
        int ig = rmq__sql92_ignored(e);
        if (ig >= (int)elen) __builtin_trap();
        rmq__sql92_free(e);
    }
    free(expr);
    return 0;
}
