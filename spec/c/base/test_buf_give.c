/*
 * test_buf_give.c -- rmq__buf_give (common.c), the snprintf-style hand-over behind the exported
 * *_to_json / *_encode / describe functions: the full length whatever out_size, out truncated
 * and NUL-terminated, out untouched (may be NULL) for size 0, the buffer freed every time
 * (LeakSanitizer in an RMQ_SANITIZE=1 build).
 */
#include "base/common.h"

#include "test_util.h"

static void fill(rmq_buf_t *b, const char *s)
{
    rmq__buf_init(b);
    rmq__buf_append(b, s, strlen(s));
}

int main(void)
{
    rmq_buf_t b;
    char out[16];

    fill(&b, "hello world");
    CHECK(rmq__buf_give(&b, NULL, 0) == 11);
    CHECK(b.data == NULL && b.len == 0);

    for (size_t size = 1; size <= sizeof(out); size++) {
        size_t want = size - 1 < 11 ? size - 1 : 11;
        memset(out, 'x', sizeof(out));
        fill(&b, "hello world");
        CHECKF(rmq__buf_give(&b, out, size) == 11, "size %zu", size);
        CHECKF(strlen(out) == want && memcmp(out, "hello world", want) == 0, "size %zu: %s", size,
               out);
        CHECKF(size == sizeof(out) || out[size] == 'x', "size %zu: wrote past out_size", size);
        CHECK(b.data == NULL && b.len == 0);
    }

    rmq__buf_init(&b); /* empty */
    memset(out, 'x', sizeof(out));
    CHECK(rmq__buf_give(&b, out, sizeof(out)) == 0 && out[0] == '\0');
    return test_report("test_buf_give");
}
