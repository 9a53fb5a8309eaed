/*
 * test_json_esc.c -- rmq__json_unescape (json_esc.c), the JSON string escapes shared by the
 * RemotingCommand header parser and the fastjson reader: every simple escape, \u to UTF-8,
 * surrogate pairs, lone surrogates in both modes (U+FFFD for cmd.c, the 3-byte form for
 * fjson.c), the lookahead bound and the errors, with where the input and output pointers end.
 */
#include "base/json_esc.h"

#include "test_util.h"

/* Decode every escape of src (a JSON string body, no quotes) into out; returns the first error
 * or RMQ_JESC_OK, *len the output length, *at where decoding stopped. */
static int run(const char *src, int flags, char *out, size_t *len, size_t *at)
{
    const char *p = src, *end = src + strlen(src);
    char *o = out;
    int rc = RMQ_JESC_OK;
    while (p < end && rc == RMQ_JESC_OK) {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        p++;
        rc = rmq__json_unescape(&p, end, &o, flags);
    }
    *len = (size_t)(o - out);
    *at = (size_t)(p - src);
    return rc;
}

#define DECODES(src, flags, want)                                                                  \
    do {                                                                                           \
        char out_[64];                                                                             \
        size_t len_, at_;                                                                          \
        int rc_ = run(src, flags, out_, &len_, &at_);                                              \
        CHECKF(rc_ == RMQ_JESC_OK && len_ == sizeof(want) - 1 && !memcmp(out_, want, len_),        \
               "%s (flags %d): rc %d, %zu bytes", src, flags, rc_, len_);                          \
        CHECKF(len_ <= strlen(src), "%s: output longer than input", src);                          \
    } while (0)

#define FAILS(src, flags, want_rc, want_at)                                                        \
    do {                                                                                           \
        char out_[64];                                                                             \
        size_t len_, at_;                                                                          \
        int rc_ = run(src, flags, out_, &len_, &at_);                                              \
        CHECKF(rc_ == (want_rc) && at_ == (want_at), "%s (flags %d): rc %d at %zu", src, flags,    \
               rc_, at_);                                                                          \
    } while (0)

static void test_both_modes(void)
{
    for (int f = 0; f <= RMQ_JESC_LONE_FFFD; f++) {
        DECODES("a\\\"\\\\\\/\\b\\f\\n\\r\\tz", f, "a\"\\/\b\f\n\r\tz");
        DECODES("\\u0041\\u00e9\\u4E2D\\u0000", f, "A\xc3\xa9\xe4\xb8\xad\0");
        DECODES("\\uD83D\\uDE00!", f, "\xf0\x9f\x98\x80!"); /* U+1F600 from its pair */
        DECODES("\\udbff\\udfff", f, "\xf4\x8f\xbf\xbf");   /* U+10FFFF */
        FAILS("ab\\x", f, RMQ_JESC_BAD, 3);                 /* stops on the escape letter */
        FAILS("\\u12G4", f, RMQ_JESC_BAD_U, 1);
        FAILS("\\u12", f, RMQ_JESC_SHORT_U, 1);
    }
}

static void test_lone_surrogates(void)
{
    /* cmd.c: U+FFFD; fjson.c: the surrogate's own 3-byte form (Java keeps the char). */
    DECODES("\\ud800x", RMQ_JESC_LONE_FFFD, "\xef\xbf\xbdx");
    DECODES("\\ud800x", 0, "\xed\xa0\x80x");
    DECODES("\\udc00", RMQ_JESC_LONE_FFFD, "\xef\xbf\xbd");
    DECODES("\\udc00", 0, "\xed\xb0\x80");
    /* A high surrogate then a \u that is not a low one: that escape is read on its own. */
    DECODES("\\ud800\\u0041", RMQ_JESC_LONE_FFFD,
            "\xef\xbf\xbd"
            "A");
    DECODES("\\ud800\\u0041", 0,
            "\xed\xa0\x80"
            "A");
    /* The pair must fit before end: cut short, the high one is lone. */
    DECODES("\\ud800", RMQ_JESC_LONE_FFFD, "\xef\xbf\xbd");
    /* A bad second \u: an error at once (cmd.c), or on its own turn (fjson.c). */
    FAILS("\\ud800\\uZZZZ", RMQ_JESC_LONE_FFFD, RMQ_JESC_BAD_U, 1);
    FAILS("\\ud800\\uZZZZ", 0, RMQ_JESC_BAD_U, 7);
}

int main(void)
{
    test_both_modes();
    test_lone_surrogates();
    return test_report("test_json_esc");
}
