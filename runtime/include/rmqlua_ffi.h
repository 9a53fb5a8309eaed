/*
 * rmqlua_ffi.h -- the only declarations Lua sees (ffi.cdef). Plain C, no preprocessor lines
 * between the BEGIN/END markers, so the text can be handed to ffi.cdef as it is.
 *
 * Ownership: a rmq_msg_t is a view over a pulled buffer owned by the loop thread's process
 * queue; a consume thread borrows a batch from the moment it is dispatched until it posts the
 * result. Nothing here may be kept by Lua after the handler returns.
 * Threads: message views are read on the consume thread that holds the batch.
 */
#ifndef RMQLUA_FFI_H
#define RMQLUA_FFI_H

#include <stddef.h>
#include <stdint.h>

#define RMQ_FFI_ABI_VERSION 5

/* RMQ_FFI_BEGIN */
typedef struct rmq_msg {
    /* Strings are pointer + length into the pulled frame (not NUL-terminated); len 0 = absent. */
    const char *topic;      /* the real topic (RETRY_TOPIC restored for retried messages) */
    const char *store_topic;/* the topic as stored (%RETRY%group for a retried message) */
    const char *tags;
    const char *keys;
    const char *body;       /* decompressed body */
    const char *props;      /* raw properties string, name\1value\2... */
    const char *uniq_key;   /* UNIQ_KEY property (the msg_id a Java consumer reports) */
    const char *broker_name;
    uint32_t topic_len, store_topic_len, tags_len, keys_len, body_len, props_len, uniq_key_len,
        broker_name_len;
    int64_t queue_offset;
    int64_t commit_log_offset;
    int64_t born_timestamp;
    int64_t store_timestamp;
    int64_t prepared_tx_offset;
    int64_t min_offset; /* from the pull response (Java adds MIN_OFFSET/MAX_OFFSET properties) */
    int64_t max_offset;
    int32_t queue_id;
    int32_t flag;
    int32_t sys_flag;
    int32_t body_crc;
    int32_t reconsume_times;
    int32_t born_port;
    int32_t store_port;
    uint8_t born_host[16]; /* 4 bytes used unless sys_flag has 0x10 (BORNHOST_V6) */
    uint8_t store_host[16];/* 4 bytes used unless sys_flag has 0x20 (STOREHOSTADDRESS_V6) */
    void *owner;           /* internal: what keeps the bytes alive */
} rmq_msg_t;

/* Consume status, the same values as the Lua constants rmq.SUCCESS etc. */
enum {
    RMQ_CONSUME_SUCCESS = 0,
    RMQ_CONSUME_RECONSUME_LATER = 1, /* concurrent: send back messages after ack_index */
    RMQ_CONSUME_DLQ = 2,             /* send the unacknowledged messages straight to the DLQ */
    RMQ_CONSUME_SUSPEND = 3,         /* orderly: SUSPEND_CURRENT_QUEUE_A_MOMENT */
    RMQ_CONSUME_COMMIT = 4           /* orderly, deprecated Java COMMIT: treated as SUCCESS */
};

/*
 * A message queued by rmq.send() inside a handler. The consume thread fills it (one allocation
 * holds the array and every string); the engine's producer sends it on the loop thread after the
 * batch came back and stores the outcome in result. Strings are not NUL-terminated.
 */
typedef struct rmq_send {
    const char *topic;
    const char *body;
    const char *tags;  /* len 0 = none */
    const char *keys;  /* len 0 = none; several keys separated by spaces (Java KEY_SEPARATOR) */
    const char *props; /* user properties, name\1value\2... (len 0 = none) */
    uint32_t topic_len, body_len, tags_len, keys_len, props_len;
    int32_t delay_level; /* DELAY property; 0 = none */
    int32_t result;      /* set by the engine: 0 sent, else an error code */
} rmq_send_t;

typedef struct rmq_batch {
    rmq_msg_t **msgs;  /* n borrowed views */
    int32_t n;
    int32_t orderly;   /* 1 for consume_orderly batches */
    /* Result, filled by the consume thread before the batch goes back. */
    int32_t status;         /* RMQ_CONSUME_* */
    int32_t ack_count;      /* messages acknowledged from the front (Lua ctx.ack_index) */
    int32_t delay_level;    /* ctx.delay_level: 0 = broker decides (Java default) */
    int64_t suspend_millis; /* orderly SUSPEND: -1 = suspend_current_queue_time_millis */
    int32_t thread_index;   /* which consume thread ran it (0-based) */
    void *internal;         /* engine bookkeeping (process queue, generation) */
    /* ABI 2: also set by the consume thread. */
    int32_t handler_error;  /* 1 when the handler raised (or timed out); status says what follows */
    int32_t nsends;         /* messages queued by rmq.send() during the handler */
    rmq_send_t *sends;      /* owned by the batch until rmq__pool_batch_release() (consume_pool.h) */
} rmq_batch_t;

/* Leaf functions for Lua (never raise, never block, never re-enter Lua). */
int rmq_ffi_abi_version(void);
/* offsetMsgId (uppercase hex, 32 or 56 chars) into out (at least 57 bytes); returns its length. */
int rmq_msg_offset_msg_id(const rmq_msg_t *m, char *out);
/* Dotted/colon text "1.2.3.4:5678" of the born or store host into out (>= 64 bytes). */
int rmq_msg_host(const rmq_msg_t *m, int store, char *out);
/* Find a property value in m->props: returns its pointer and sets *len, or NULL. */
const char *rmq_msg_prop(const rmq_msg_t *m, const char *key, uint32_t *len);

/*
 * ABI 3: shared dictionaries (shdict.c, shdict.h), rmq.shared.NAME in Lua, with the semantics
 * of OpenResty's ngx.shared.DICT. Keys are 1..65535 bytes. Value types are Lua's type numbers:
 * 0 nil (absent), 1 boolean (num 0 or 1), 3 number, 4 string. Times are ms; an exptime of 0
 * means "never expires". Errors are static strings: "exists", "not found", "not a number",
 * "no memory".
 */
typedef struct rmq_shdicts rmq_shdicts_t;
typedef struct rmq_shdict rmq_shdict_t;
typedef struct rmq_shdict_key {
    const char *key;
    size_t len;
} rmq_shdict_key_t;
enum {
    RMQ_SHDICT_SET = 0,
    RMQ_SHDICT_ADD = 1,     /* only when absent (or expired): else "exists" */
    RMQ_SHDICT_REPLACE = 2, /* only when present: else "not found" */
    RMQ_SHDICT_SAFE = 0x10  /* with SET or ADD: never evict; "no memory" when full */
};
/* A set of dictionaries; free it after every state that used it is closed. */
rmq_shdicts_t *rmq_shdicts_new(void);
void rmq_shdicts_free(rmq_shdicts_t *s);
/* Create dictionary name (1..64 of [A-Za-z0-9_]) with a size limit of capacity bytes (at least
 * 8192), or set the new limit of an existing one (evicting LRU entries when it shrank). Returns
 * it, or NULL with err naming the problem. */
rmq_shdict_t *rmq_shdicts_declare(rmq_shdicts_t *s, const char *name, double capacity, char *err,
                                  size_t err_size);
/* The dictionary called name, or NULL. */
rmq_shdict_t *rmq_shdicts_find(rmq_shdicts_t *s, const char *name);
/* Read key: returns the value type (0 when absent or expired; with get_stale an expired value is
 * returned and *stale set to 1). A number or boolean goes to *num; a string is copied into *str
 * when it fits *str_len bytes, else into a new buffer *str points to afterwards (free it with
 * rmq_shdict_free_buf); *str_len is then its length. *flags: the user flags. */
int rmq_shdict_get(rmq_shdict_t *d, const char *key, size_t key_len, int get_stale, double *num,
                   char **str, size_t *str_len, uint32_t *flags, int *stale);
/* set / add / replace (op, optionally | RMQ_SHDICT_SAFE); type 0 deletes. Returns 0, or -1 with
 * *err. *forcible = 1 when unexpired entries were evicted to make room. */
int rmq_shdict_store(rmq_shdict_t *d, int op, const char *key, size_t key_len, int type,
                     const char *str, size_t str_len, double num, int64_t exptime_ms,
                     uint32_t flags, const char **err, int *forcible);
/* *value += the stored number (the new value in *value). Absent or expired: "not found", or with
 * has_init the entry is created as init + *value with init_ttl_ms. Returns 0 or -1 with *err. */
int rmq_shdict_incr(rmq_shdict_t *d, const char *key, size_t key_len, double *value, int has_init,
                    double init, int64_t init_ttl_ms, const char **err, int *forcible);
/* Remaining time to live in *ttl_ms (0 = never expires). Returns 0, or -1 when absent/expired. */
int rmq_shdict_ttl(rmq_shdict_t *d, const char *key, size_t key_len, double *ttl_ms);
/* New time to live (0 = never). Returns 0, or -1 when absent/expired. */
int rmq_shdict_expire(rmq_shdict_t *d, const char *key, size_t key_len, int64_t exptime_ms);
/* Mark every entry expired (their memory is reused as needed). */
void rmq_shdict_flush_all(rmq_shdict_t *d);
/* Free up to max_count (0 = all) expired entries; returns how many. */
int rmq_shdict_flush_expired(rmq_shdict_t *d, int max_count);
/* Up to max_count (0 = all) unexpired keys, most recently used first, in one block *out (an array
 * of n entries followed by the key bytes; free it with rmq_shdict_free_buf). Returns n. */
int rmq_shdict_keys(rmq_shdict_t *d, int max_count, rmq_shdict_key_t **out);
/* The size limit, and the bytes not charged to an entry. */
double rmq_shdict_capacity(rmq_shdict_t *d);
double rmq_shdict_free_space(rmq_shdict_t *d);
void rmq_shdict_free_buf(void *p);

/*
 * rmq.pause(seconds) / rmq.resume() / rmq.stop() (flow.c): op 1 pause (seconds <= 0: until
 * resume), 2 resume, 3 stop; thread_index 1-based, 0 for the control state. Any thread: the
 * request is queued for the loop thread. Returns 0, or an error (after shutdown began).
 */
typedef struct rmq_flow rmq_flow_t;
int rmq_flow_request(rmq_flow_t *f, int op, double seconds, int thread_index);
/* SQL92 selectors (sql92.h): compile (NULL with errstr on a bad expression), evaluate over a
 * properties string (0 FALSE, 1 TRUE, 2 NULL, 3 the evaluation threw: errstr says why), free.
 * rmq_sql92_ignored: where text after the expression starts (Java ignores it), or -1. */
typedef struct rmq_sql92 rmq_sql92_t;
rmq_sql92_t *rmq_sql92_compile(const char *expr, char *errstr, size_t errstr_size);
int rmq_sql92_eval(const rmq_sql92_t *e, const char *props, size_t props_len, char *errstr,
                   size_t errstr_size);
void rmq_sql92_free(rmq_sql92_t *e);
int rmq_sql92_ignored(const rmq_sql92_t *e);
size_t rmq_sql92_to_string(const rmq_sql92_t *e, char *out, size_t out_size);
/*
 * ABI 4: the thread's event loop for handlers that wait without holding the thread
 * (luahost/coloop.c; lua/rmq/co.lua and lua/rmq/socket.lua). An operation that waits returns an
 * id (or -1 with *err, nothing pending); rmq_co_wait runs the loop until ids completed, copies
 * up to max of them into ids and returns how many: 0 when nothing is pending, -1 when the
 * thread was interrupted (consume_timeout, stop). It is the one call here that blocks. Errors are
 * static strings, or kept in the socket until its next operation. op numbers of
 * rmq_cosock_err: 0 connect, 1 send, 2 read.
 */
double rmq_co_now(void);
int64_t rmq_co_sleep(double ms);
int rmq_co_wait(int64_t *ids, int max);
/*
 * Batches in flight (consume threads only; luahost/consume_pool.c, lua/rmq/co.lua):
 * rmq_co_waited: a batch's handler waited in place (the thread runs its batches as coroutines
 * from then on, consume_batches_per_thread). In serve mode the scheduler takes batches with
 * rmq_serve_take (the flight slot, with *b the batch; -1 when nothing is queued or the thread
 * holds its limit; never blocks), waits with rmq_serve_wait (ids as rmq_co_wait; 0 when woken
 * for new work or an interrupt, -2 when nothing is pending), asks rmq_serve_expired for the
 * slots whose batch ran past consume_timeout or was stopped, and writes the slot it resumes
 * into *rmq_serve_cur() (-1 between batches) for the interrupt hook.
 */
void rmq_co_waited(void);
int rmq_serve_take(rmq_batch_t **b);
int rmq_serve_wait(int64_t *ids, int max);
int rmq_serve_expired(int *slots, int max);
int *rmq_serve_cur(void);
typedef struct rmq_cosock rmq_cosock_t;
rmq_cosock_t *rmq_cosock_new(void);
void rmq_cosock_free(rmq_cosock_t *s);
int64_t rmq_cosock_connect(rmq_cosock_t *s, const char *host, int port, double timeout_ms,
                           const char **err);
int64_t rmq_cosock_send(rmq_cosock_t *s, const char *data, size_t len, double timeout_ms,
                        const char **err);
int64_t rmq_cosock_read(rmq_cosock_t *s, double timeout_ms, const char **err);
const char *rmq_cosock_err(rmq_cosock_t *s, int op);
size_t rmq_cosock_buffered(rmq_cosock_t *s, const char **data);
void rmq_cosock_consume(rmq_cosock_t *s, size_t n);
int64_t rmq_cosock_find(rmq_cosock_t *s, const char *pat, size_t plen, size_t from);
int rmq_cosock_usable(rmq_cosock_t *s);
int rmq_cosock_set_idle(rmq_cosock_t *s, int idle);
/*
 * ABI 5: TLS on cosockets (luahost/cossl.c) and the thread's cosocket settings.
 * rmq_cosock_sslhandshake: the id of the handshake (its result is rmq_cosock_err(s, 0); the
 * connect timeout applies), 0 when the connection is TLS already, -1 with *err. session: an
 * SSL_SESSION from rmq_cosock_ssl_session (to resume), or NULL. rmq_co_configure: the values of
 * lua_socket_max_per_thread, lua_ssl_trusted_certificate, lua_ssl_verify_depth for this thread
 * (<= 0, NULL, < 0: the defaults).
 */
int64_t rmq_cosock_sslhandshake(rmq_cosock_t *s, const char *server_name, int verify,
                                void *session, double timeout_ms, const char **err);
void *rmq_cosock_ssl_session(rmq_cosock_t *s);
void rmq_cosock_ssl_session_free(void *session);
void rmq_co_configure(int max_sockets, const char *ca_file, int verify_depth);
/* RMQ_FFI_END */

#endif
