/*
 * trace.h -- message trace of the consumer (RIP-6; Java's ConsumeMessageTraceHookImpl,
 * TraceDataEncoder and AsyncTraceDispatcher of RocketMQ 4.9.4): a SubBefore and a SubAfter
 * record per consumed message, batched and sent asynchronously to the trace topic by the
 * consumer's inner producer.
 *
 * Threads: the loop thread only (rmq__trace_encode_* are pure and may run anywhere).
 */
#ifndef RMQ_CONSUMER_TRACE_H
#define RMQ_CONSUMER_TRACE_H

#include "base/common.h"
#include "rmqlua_ffi.h"
#include "producer/producer.h"

#include <stdint.h>
#include <uv.h>

/* TraceConstants: CONTENT_SPLITOR and FIELD_SPLITOR. */
#define RMQ_TRACE_CONTENT_SEP '\001'
#define RMQ_TRACE_FIELD_SEP '\002'
#define RMQ_TRACE_DEFAULT_TOPIC "RMQ_SYS_TRACE_TOPIC"

/* ConsumeReturnType ordinals, the SubAfter record's contextCode. */
enum {
    RMQ_TRACE_RT_SUCCESS = 0,
    RMQ_TRACE_RT_TIME_OUT = 1,
    RMQ_TRACE_RT_EXCEPTION = 2,
    RMQ_TRACE_RT_RETURNNULL = 3,
    RMQ_TRACE_RT_FAILED = 4
};

/* One message of a record (TraceBean): keys NULL = the message has no KEYS (Java prints
 * "null"); strings are not NUL-terminated. */
typedef struct rmq_trace_bean {
    const char *msg_id;
    size_t msg_id_len;
    const char *keys;
    size_t keys_len;
    int retry_times;
} rmq_trace_bean_t;

/* The records of one consume batch (a TraceContext); region NULL prints "null" as Java does. */
typedef struct rmq_trace_ctx {
    int64_t timestamp; /* ms since the epoch */
    const char *region;
    const char *group;
    const char *request_id;
    int cost_ms;
    int success;
    int context_code;
    const rmq_trace_bean_t *beans;
    int n;
} rmq_trace_ctx_t;

/* TraceDataEncoder.encoderFromContextBean's transData for SubBefore / SubAfter, appended to
 * out. Returns 0, or RMQ_ERR_NOMEM. */
int rmq__trace_encode_sub_before(rmq_buf_t *out, const rmq_trace_ctx_t *ctx);
int rmq__trace_encode_sub_after(rmq_buf_t *out, const rmq_trace_ctx_t *ctx);

typedef struct rmq_trace rmq_trace_t;

/* A dispatcher sending to topic (NULL or "" = RMQ_SYS_TRACE_TOPIC) through p for group (the
 * group without its namespace). */
rmq_trace_t *rmq__trace_new(uv_loop_t *loop, rmq_producer_t *p, const char *topic,
                            const char *group);
/*
 * Add one batch's records (AsyncTraceDispatcher.append): msgs[0..n), the handler's start
 * (wall ms) and how long it ran (ms), whether it succeeded and its contextCode. Messages whose
 * TRACE_ON property is "false" are left out. Never fails: when the trace topic cannot keep up,
 * records are dropped and logged (with the count) at most once a minute.
 */
void rmq__trace_batch(rmq_trace_t *t, rmq_msg_t *const *msgs, int n, int64_t start_wall_ms,
                      int64_t run_ms, int success, int context_code);
/* Send what is buffered now (shutdown). */
void rmq__trace_flush(rmq_trace_t *t);
/* Stop the timer and free t once it closed; sends in flight complete without it. */
void rmq__trace_close(rmq_trace_t *t);

#endif
