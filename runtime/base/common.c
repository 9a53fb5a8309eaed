/*
 * common.c -- error names, logging, buffers, clocks, Java String.hashCode, the signal mask of a
 * finishing thread.
 *
 * Ownership: the log level and debug mask are process globals, written at start-up before any
 * thread runs and read without locks afterwards. Everything else is stateless.
 * Threads: any.
 */
#include "common.h"
#include "codes.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int rmq__log_level = RMQ_LOG_INFO;
unsigned rmq__log_debug = 0;

/* The name of err as a RocketMQ response code (they are positive), else fallback. */
static const char *response_name_or(int err, const char *fallback)
{
    const char *n = err > 0 ? rmq_response_code_name(err) : NULL;
    return n ? n : fallback;
}

const char *rmq_err_name(int err)
{
    switch (err) {
#define RMQ_ERR_NAME_(name, val, msg)                                                              \
    case val:                                                                                      \
        return &(#name)[4]; /* strip "RMQ_" */
        RMQ_LOCAL_ERRORS(RMQ_ERR_NAME_)
#undef RMQ_ERR_NAME_
    default:
        return response_name_or(err, "UNKNOWN");
    }
}

const char *rmq_err_str(int err)
{
    switch (err) {
#define RMQ_ERR_MSG_(name, val, msg)                                                               \
    case val:                                                                                      \
        return msg;
        RMQ_LOCAL_ERRORS(RMQ_ERR_MSG_)
#undef RMQ_ERR_MSG_
    default:
        return response_name_or(err, "unknown error");
    }
}

void rmq__seterr(char *errstr, size_t errstr_size, const char *fmt, ...)
{
    va_list ap;
    if (!errstr || !errstr_size) return;
    va_start(ap, fmt);
    vsnprintf(errstr, errstr_size, fmt, ap);
    va_end(ap);
}

int rmq__name_ok(const char *s, size_t max)
{
    if (!*s || strlen(s) > max) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '%' || *s == '|' || *s == '_' || *s == '-'))
            return 0;
    return 1;
}

/* ---- logging ---------------------------------------------------------------------------- */

void rmq_log_set_level(int level)
{
    rmq__log_level = level;
}

int rmq__log_debug_parse(const char *categories, char *errstr, size_t errstr_size)
{
    static const struct {
        const char *name;
        unsigned bit;
    } cats[] = {{"remoting", RMQ_DBG_REMOTING}, {"namesrv", RMQ_DBG_NAMESRV},
                {"rebalance", RMQ_DBG_REBALANCE}, {"pull", RMQ_DBG_PULL},
                {"consume", RMQ_DBG_CONSUME},     {"offset", RMQ_DBG_OFFSET},
                {"lua", RMQ_DBG_LUA},             {"broker", RMQ_DBG_BROKER},
                {"all", RMQ_DBG_ALL}};
    unsigned mask = 0;
    const char *p = categories ? categories : "";
    while (*p) {
        size_t n = strcspn(p, ", ");
        if (n) {
            size_t i;
            for (i = 0; i < RMQ_ARRAY_SIZE(cats); i++)
                if (strlen(cats[i].name) == n && !memcmp(cats[i].name, p, n)) break;
            if (i == RMQ_ARRAY_SIZE(cats)) {
                rmq__seterr(errstr, errstr_size,
                            "log_debug: unknown category \"%.*s\" (known: remoting, namesrv, "
                            "rebalance, pull, consume, offset, lua, broker, all)",
                            (int)n, p);
                return -1;
            }
            mask |= cats[i].bit;
        }
        p += n;
        while (*p == ',' || *p == ' ') p++;
    }
    return (int)mask;
}

int rmq_log_set_debug(const char *categories, char *errstr, size_t errstr_size)
{
    int mask = rmq__log_debug_parse(categories, errstr, errstr_size);
    if (mask < 0) return -1;
    rmq__log_debug = (unsigned)mask;
    if (mask && rmq__log_level < RMQ_LOG_DEBUG) rmq__log_level = RMQ_LOG_DEBUG;
    return mask;
}

/* rmq__log itself is in log.c, with the output it goes to. */

/* ---- buffers ---------------------------------------------------------------------------- */

void rmq__buf_init(rmq_buf_t *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
}

void rmq__buf_free(rmq_buf_t *b)
{
    free(b->data);
    rmq__buf_init(b);
}

size_t rmq__buf_give(rmq_buf_t *b, char *out, size_t out_size)
{
    size_t len = b->len;
    if (out_size) {
        size_t k = len < out_size - 1 ? len : out_size - 1;
        if (k) memcpy(out, b->data, k);
        out[k] = '\0';
    }
    rmq__buf_free(b);
    return len;
}

int rmq__buf_reserve(rmq_buf_t *b, size_t n)
{
    size_t need = b->len + n, cap;
    char *p;
    if (need <= b->cap) return 0;
    cap = b->cap ? b->cap : 256;
    while (cap < need) cap *= 2;
    p = realloc(b->data, cap);
    if (!p) return RMQ_ERR_NOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int rmq__buf_append(rmq_buf_t *b, const void *p, size_t n)
{
    if (rmq__buf_reserve(b, n)) return RMQ_ERR_NOMEM;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

int rmq__buf_appendf(rmq_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return RMQ_ERR_INVALID;
    if (rmq__buf_reserve(b, (size_t)n + 1)) return RMQ_ERR_NOMEM;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

int rmq__buf_append_u8(rmq_buf_t *b, uint8_t v)
{
    return rmq__buf_append(b, &v, 1);
}

int rmq__buf_append_be16(rmq_buf_t *b, uint16_t v)
{
    uint8_t x[2] = {(uint8_t)(v >> 8), (uint8_t)v};
    return rmq__buf_append(b, x, 2);
}

int rmq__buf_append_be32(rmq_buf_t *b, uint32_t v)
{
    uint8_t x[4];
    rmq__wr32(x, v);
    return rmq__buf_append(b, x, 4);
}

int rmq__buf_append_be64(rmq_buf_t *b, uint64_t v)
{
    if (rmq__buf_append_be32(b, (uint32_t)(v >> 32))) return RMQ_ERR_NOMEM;
    return rmq__buf_append_be32(b, (uint32_t)v);
}

int rmq__buf_append_json_str(rmq_buf_t *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t i;
    if (rmq__buf_reserve(b, n + 2)) return RMQ_ERR_NOMEM;
    b->data[b->len++] = '"';
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc = 0;
        switch (c) {
        case '"': esc = '"'; break;
        case '\\': esc = '\\'; break;
        case '\n': esc = 'n'; break;
        case '\r': esc = 'r'; break;
        case '\t': esc = 't'; break;
        case '\b': esc = 'b'; break;
        case '\f': esc = 'f'; break;
        default: break;
        }
        if (esc) {
            char e[2] = {'\\', esc};
            if (rmq__buf_append(b, e, 2)) return RMQ_ERR_NOMEM;
        } else if (c < 0x20) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            if (rmq__buf_append(b, e, 6)) return RMQ_ERR_NOMEM;
        } else if (rmq__buf_append(b, &s[i], 1))
            return RMQ_ERR_NOMEM;
    }
    return rmq__buf_append(b, "\"", 1);
}

rmq_rbuf_t *rmq__rbuf_new(size_t len)
{
    rmq_rbuf_t *rb = malloc(sizeof(*rb) + len + 1);
    if (!rb) return NULL;
    rb->refs = 1;
    rb->len = len;
    rb->data[len] = '\0';
    return rb;
}

rmq_rbuf_t *rmq__rbuf_keep(rmq_rbuf_t *rb)
{
    __atomic_add_fetch(&rb->refs, 1, __ATOMIC_RELAXED);
    return rb;
}

void rmq__rbuf_release(rmq_rbuf_t *rb)
{
    if (rb && __atomic_sub_fetch(&rb->refs, 1, __ATOMIC_ACQ_REL) == 0) free(rb);
}

/* ---- time and misc ---------------------------------------------------------------------- */

int64_t rmq__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t rmq__mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void rmq__thread_finishing(void)
{
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
}

int32_t rmq_java_hash(const char *utf8, size_t len)
{
    const unsigned char *s = (const unsigned char *)utf8;
    uint32_t h = 0;
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        unsigned c = s[i];
        size_t n;
        if (c < 0x80) cp = c, n = 1;
        else if ((c & 0xe0) == 0xc0 && i + 1 < len) cp = ((c & 0x1fu) << 6) | (s[i + 1] & 0x3fu), n = 2;
        else if ((c & 0xf0) == 0xe0 && i + 2 < len)
            cp = ((c & 0x0fu) << 12) | ((s[i + 1] & 0x3fu) << 6) | (s[i + 2] & 0x3fu), n = 3;
        else if ((c & 0xf8) == 0xf0 && i + 3 < len)
            cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3fu) << 12) | ((s[i + 2] & 0x3fu) << 6) |
                 (s[i + 3] & 0x3fu),
            n = 4;
        else
            cp = 0xfffd, n = 1; /* Java decodes a malformed byte as U+FFFD */
        if (cp >= 0x10000) {
            cp -= 0x10000;
            h = 31 * h + (0xd800 + (cp >> 10));
            h = 31 * h + (0xdc00 + (cp & 0x3ff));
        } else {
            h = 31 * h + cp;
        }
        i += n;
    }
    return (int32_t)h;
}

static void oom(size_t n)
{
    fprintf(stderr, "rmqlua: out of memory allocating %zu bytes\n", n);
    abort();
}

void *rmq__xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *rmq__xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) oom(n * sz);
    return p;
}

char *rmq__xstrdup(const char *s)
{
    return rmq__xstrndup(s, strlen(s));
}

char *rmq__xstrndup(const char *s, size_t n)
{
    char *p = rmq__xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}
