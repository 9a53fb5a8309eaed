/*
 * codes.c -- names for request, response and language codes.
 *
 * Ownership: constant tables. Threads: any.
 */
#include "codes.h"

const char *rmq_request_code_name(int code)
{
    switch (code) {
#define RMQ_REQ_NAME_(n, v)                                                                        \
    case v:                                                                                        \
        return #n;
        RMQ_REQUEST_CODES(RMQ_REQ_NAME_)
#undef RMQ_REQ_NAME_
    default:
        return NULL;
    }
}

const char *rmq_response_code_name(int code)
{
    switch (code) {
#define RMQ_RESP_NAME_(n, v)                                                                       \
    case v:                                                                                        \
        return #n;
        RMQ_RESPONSE_CODES(RMQ_RESP_NAME_)
#undef RMQ_RESP_NAME_
    default:
        return NULL;
    }
}

const char *rmq_language_name(int lang)
{
    switch (lang) {
#define RMQ_LANG_NAME_(n, v)                                                                       \
    case v:                                                                                        \
        return #n;
        RMQ_LANGUAGE_CODES(RMQ_LANG_NAME_)
#undef RMQ_LANG_NAME_
    default:
        return NULL;
    }
}

int rmq_language_from_name(const char *name, size_t len)
{
#define RMQ_LANG_FROM_(n, v)                                                                       \
    if (len == sizeof(#n) - 1 && !memcmp(name, #n, len)) return v;
    RMQ_LANGUAGE_CODES(RMQ_LANG_FROM_)
#undef RMQ_LANG_FROM_
    return -1;
}
