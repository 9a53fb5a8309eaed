/*
 * common.h -- error codes, logging, growable and reference-counted buffers, byte order.
 *
 * Ownership: nothing here owns long-lived state except the log configuration, which is set once
 * at start-up (rmq__log_set_level) before any thread is started. Where log lines go (text or
 * JSON, stderr or a file, the writer thread) is log.c's (log.h).
 * Threads: every function here may be called from any thread.
 */
#ifndef RMQ_COMMON_H
#define RMQ_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define RMQ_EXPORT __attribute__((visibility("default")))
#define RMQ_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define RMQ_LIKELY(x) __builtin_expect(!!(x), 1)
#define RMQ_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define RMQ_EXPORT
#define RMQ_PRINTF(a, b)
#define RMQ_LIKELY(x) (x)
#define RMQ_UNLIKELY(x) (x)
#endif

/*
 * Local errors are negative; RocketMQ response codes (0 = SUCCESS, 17 = TOPIC_NOT_EXIST, ...)
 * are carried as themselves, so one int says what happened to any request.
 */
#define RMQ_LOCAL_ERRORS(X)                                                                        \
    X(RMQ_OK, 0, "success")                                                                        \
    X(RMQ_ERR_TIMEOUT, -1, "request timed out")                                                    \
    X(RMQ_ERR_TRANSPORT, -2, "connection failed or closed")                                        \
    X(RMQ_ERR_DESTROYED, -3, "handle destroyed before completion")                                 \
    X(RMQ_ERR_BAD_FRAME, -4, "malformed remoting frame")                                           \
    X(RMQ_ERR_BAD_MESSAGE, -5, "malformed message")                                                \
    X(RMQ_ERR_NOMEM, -6, "out of memory")                                                          \
    X(RMQ_ERR_INVALID, -7, "invalid argument")                                                     \
    X(RMQ_ERR_TOO_LARGE, -8, "frame larger than the maximum frame size")                           \
    X(RMQ_ERR_NOT_FOUND, -9, "not found")                                                          \
    X(RMQ_ERR_BAD_JSON, -10, "malformed JSON")                                                     \
    X(RMQ_ERR_CONFIG, -11, "invalid configuration")                                                \
    X(RMQ_ERR_IO, -12, "I/O error")                                                                \
    X(RMQ_ERR_LUA, -13, "Lua error")                                                               \
    X(RMQ_ERR_STATE, -14, "operation not valid in this state")                                     \
    X(RMQ_ERR_NO_ROUTE, -15, "no route for topic")                                                 \
    X(RMQ_ERR_SHUTDOWN, -16, "shutting down")

typedef enum {
#define RMQ_ERR_ENUM_(name, val, msg) name = val,
    RMQ_LOCAL_ERRORS(RMQ_ERR_ENUM_)
#undef RMQ_ERR_ENUM_
} rmq_err_t;

/* Name of a local error or a RocketMQ response code ("TIMEOUT", "TOPIC_NOT_EXIST", ...). */
RMQ_EXPORT const char *rmq_err_name(int err);
/* Human text for a local error or a RocketMQ response code. */
RMQ_EXPORT const char *rmq_err_str(int err);

/* Copy a formatted message into errstr (always NUL-terminated when errstr_size > 0). */
void rmq__seterr(char *errstr, size_t errstr_size, const char *fmt, ...) RMQ_PRINTF(3, 4);

/* 1 when s is a legal topic or group name of 1..max characters: Java's
 * Validators.VALID_PATTERN_STR, ^[%|a-zA-Z0-9_-]+$; else 0. */
int rmq__name_ok(const char *s, size_t max);

/* ---- logging ---------------------------------------------------------------------------- */

typedef enum { RMQ_LOG_ERROR = 0, RMQ_LOG_WARN, RMQ_LOG_INFO, RMQ_LOG_DEBUG } rmq_log_level_t;

/* Debug categories, switched on by the log_debug option ("remoting,rebalance,pull,lua"). */
enum {
    RMQ_DBG_REMOTING = 1 << 0,
    RMQ_DBG_NAMESRV = 1 << 1,
    RMQ_DBG_REBALANCE = 1 << 2,
    RMQ_DBG_PULL = 1 << 3,
    RMQ_DBG_CONSUME = 1 << 4,
    RMQ_DBG_OFFSET = 1 << 5,
    RMQ_DBG_LUA = 1 << 6,
    RMQ_DBG_BROKER = 1 << 7,
    RMQ_DBG_ALL = 0xff
};

extern int rmq__log_level;
extern unsigned rmq__log_debug;

RMQ_EXPORT void rmq_log_set_level(int level);
/* Parse "remoting,pull" or "all"; returns the mask, or -1 naming the bad word in errstr. */
RMQ_EXPORT int rmq_log_set_debug(const char *categories, char *errstr, size_t errstr_size);
/* The same parse without touching the live settings (any thread): the mask, or -1. */
int rmq__log_debug_parse(const char *categories, char *errstr, size_t errstr_size);
void rmq__log(int level, const char *subsys, const char *fmt, ...) RMQ_PRINTF(3, 4);

#define rmq_log_error(sub, ...) rmq__log(RMQ_LOG_ERROR, sub, __VA_ARGS__)
#define rmq_log_warn(sub, ...)                                                                     \
    do {                                                                                           \
        if (rmq__log_level >= RMQ_LOG_WARN) rmq__log(RMQ_LOG_WARN, sub, __VA_ARGS__);              \
    } while (0)
#define rmq_log_info(sub, ...)                                                                     \
    do {                                                                                           \
        if (rmq__log_level >= RMQ_LOG_INFO) rmq__log(RMQ_LOG_INFO, sub, __VA_ARGS__);              \
    } while (0)
#define rmq_dbg(cat, sub, ...)                                                                     \
    do {                                                                                           \
        if (RMQ_UNLIKELY(rmq__log_debug & (cat))) rmq__log(RMQ_LOG_DEBUG, sub, __VA_ARGS__);       \
    } while (0)

/* ---- growable buffer (single owner) --------------------------------------------------- */

typedef struct rmq_buf {
    char *data;
    size_t len;
    size_t cap;
} rmq_buf_t;

void rmq__buf_init(rmq_buf_t *b);
void rmq__buf_free(rmq_buf_t *b);
/* Copy b into the caller's out[out_size] (truncated, always NUL-terminated when out_size > 0),
 * free b and return the full length (snprintf-style; exported *_to_json style functions). */
size_t rmq__buf_give(rmq_buf_t *b, char *out, size_t out_size);
/* Make room for n more bytes; returns 0 or RMQ_ERR_NOMEM. */
int rmq__buf_reserve(rmq_buf_t *b, size_t n);
int rmq__buf_append(rmq_buf_t *b, const void *p, size_t n);
int rmq__buf_appendf(rmq_buf_t *b, const char *fmt, ...) RMQ_PRINTF(2, 3);
int rmq__buf_append_u8(rmq_buf_t *b, uint8_t v);
int rmq__buf_append_be16(rmq_buf_t *b, uint16_t v);
int rmq__buf_append_be32(rmq_buf_t *b, uint32_t v);
int rmq__buf_append_be64(rmq_buf_t *b, uint64_t v);
/* Append s as a JSON string literal (quotes and escapes included). */
int rmq__buf_append_json_str(rmq_buf_t *b, const char *s, size_t n);

/* ---- reference-counted immutable byte block (a received frame, an inflated body) ------ */

typedef struct rmq_rbuf {
    int refs; /* only through __atomic builtins; starts at 1 */
    size_t len;
    char data[];
} rmq_rbuf_t;

/* Allocate len bytes with one reference; NULL when out of memory. */
rmq_rbuf_t *rmq__rbuf_new(size_t len);
rmq_rbuf_t *rmq__rbuf_keep(rmq_rbuf_t *rb);
void rmq__rbuf_release(rmq_rbuf_t *rb);

/* ---- byte order ---------------------------------------------------------------------- */

static inline uint16_t rmq__rd16(const void *p)
{
    const uint8_t *b = (const uint8_t *)p;
    return (uint16_t)((b[0] << 8) | b[1]);
}
static inline uint32_t rmq__rd32(const void *p)
{
    const uint8_t *b = (const uint8_t *)p;
    return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | b[3];
}
static inline uint64_t rmq__rd64(const void *p)
{
    const uint8_t *b = (const uint8_t *)p;
    return ((uint64_t)rmq__rd32(b) << 32) | rmq__rd32(b + 4);
}
static inline void rmq__wr32(void *p, uint32_t v)
{
    uint8_t *b = (uint8_t *)p;
    b[0] = (uint8_t)(v >> 24);
    b[1] = (uint8_t)(v >> 16);
    b[2] = (uint8_t)(v >> 8);
    b[3] = (uint8_t)v;
}

/* ---- offsets a broker reports -------------------------------------------------------------- */

/*
 * Offsets come from brokers, and any int64 can arrive (a damaged or hostile broker): figures
 * derived from them saturate instead of overflowing (undefined in C). rmq__offset_after: the
 * offset after off, where Java adds 1 (2^63 - 1 stays itself); rmq__lag: how far max is ahead of
 * base, 0 when it is not; rmq__add_sat: a + b for a, b >= 0.
 */
static inline int64_t rmq__offset_after(int64_t off)
{
    return off < INT64_MAX ? off + 1 : off;
}
static inline int64_t rmq__lag(int64_t max, int64_t base)
{
    if (max <= base) return 0;
    if (base < 0 && max > INT64_MAX + base) return INT64_MAX;
    return max - base;
}
static inline int64_t rmq__add_sat(int64_t a, int64_t b)
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}
/* A message's reconsume count (int32, from the broker) plus n >= 0, saturated at 2^31 - 1 where
 * Java's int would wrap to a negative count (which would take it out of the DLQ's reach). */
static inline int32_t rmq__reconsume_plus(int32_t rt, int32_t n)
{
    return rt > INT32_MAX - n ? INT32_MAX : rt + n;
}

/* ---- time and misc --------------------------------------------------------------------- */

/* Wall clock in milliseconds since the epoch (Java System.currentTimeMillis). */
int64_t rmq__now_ms(void);
/* Monotonic clock in milliseconds. */
int64_t rmq__mono_ms(void);

/* Java String.hashCode over the UTF-16 code units of a UTF-8 string (tag codes, hashing). */
RMQ_EXPORT int32_t rmq_java_hash(const char *utf8, size_t len);

void *rmq__xmalloc(size_t n); /* abort on out-of-memory: only for small control structures */
void *rmq__xcalloc(size_t n, size_t sz);
char *rmq__xstrdup(const char *s);
char *rmq__xstrndup(const char *s, size_t n);

/*
 * The last call of every thread the runtime starts (a consume thread, the sample producer, the
 * log writer...), on that thread: it blocks every signal, so from then on the kernel gives a
 * signal sent to the process (SIGHUP, SIGINT, SIGTERM, SIGUSR1) to a thread that lives on. A
 * signal that reached this thread before has run its handler when this returns. Without it a
 * ThreadSanitizer build loses such a signal: TSan runs a handler at the thread's next
 * intercepted call, and a thread on its way out makes none.
 */
void rmq__thread_finishing(void);

#define RMQ_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
