/*
 * test_trace.c -- the message trace records (consumer/trace.c) against the text the RocketMQ
 * 4.9.4 Java classes make (spec/fixtures/trace/encoder.json, from TraceDataEncoder): every
 * SubBefore and SubAfter case byte for byte.
 *
 * Run from the repo root. Threads: one.
 */
#include "consumer/trace.h"

#include "test_util.h"

#include <jansson.h>
#include <string.h>

static const char *str_or_null(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static void test_vectors(void)
{
    json_t *root = test_load_json("spec/fixtures/trace/encoder.json");
    CHECK(json_array_size(root) >= 4);
    size_t i;
    json_t *c;
    json_array_foreach(root, i, c) {
        const char *name = str_or_null(c, "name");
        json_t *jb = json_object_get(c, "beans");
        size_t n = json_array_size(jb);
        rmq_trace_bean_t beans[8];
        CHECK(n > 0 && n <= 8);
        for (size_t k = 0; k < n && k < 8; k++) {
            json_t *b = json_array_get(jb, k);
            const char *id = str_or_null(b, "msgId"), *keys = str_or_null(b, "keys");
            beans[k] = (rmq_trace_bean_t){.msg_id = id, .msg_id_len = strlen(id), .keys = keys,
                                          .keys_len = keys ? strlen(keys) : 0,
                                          .retry_times = (int)json_integer_value(
                                              json_object_get(b, "retryTimes"))};
        }
        rmq_trace_ctx_t x = {
            .timestamp = json_integer_value(json_object_get(c, "timeStamp")),
            .region = str_or_null(c, "regionId"),
            .group = str_or_null(c, "groupName"),
            .request_id = str_or_null(c, "requestId"),
            .cost_ms = (int)json_integer_value(json_object_get(c, "costTime")),
            .success = json_is_true(json_object_get(c, "success")),
            .context_code = (int)json_integer_value(json_object_get(c, "contextCode")),
            .beans = beans,
            .n = (int)n};
        rmq_buf_t out;
        rmq__buf_init(&out);
        const char *type = str_or_null(c, "traceType");
        int rc = !strcmp(type, "SubBefore") ? rmq__trace_encode_sub_before(&out, &x)
                                             : rmq__trace_encode_sub_after(&out, &x);
        CHECK(rc == 0);
        const char *want = str_or_null(c, "data");
        CHECKF(out.len == strlen(want) && memcmp(out.data, want, out.len) == 0,
               "%s: got %.*s", name, (int)out.len, out.data);
        rmq__buf_free(&out);
    }
    json_decref(root);
}

int main(void)
{
    test_vectors();
    return test_report("test_trace");
}
