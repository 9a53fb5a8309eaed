/*
 * remoting.h -- the RocketMQ remoting transport on libuv: connections, request/response
 * correlation by opaque, timeouts, incoming-request dispatch. One implementation serves both the
 * client engine (connects to name servers and brokers) and the development broker (listens and
 * accepts clients, and also sends broker -> client requests).
 *
 * PROTOCOL.md 1.1 (framing), 1.2 (opaque, flags), 1.9 (errors made by the remoting layer),
 * 1.10 (connection behaviour of the Java client), 2.4 (server -> client requests).
 *
 * Model
 *   rmq_remoting_t  a transport: one loop, one options set, one opaque counter, one timer, one
 *                   handler table, the client-side address table and (optionally) a listener.
 *   rmq_conn_t      one TCP connection, symmetric: either side may send requests on it, and
 *                   each side answers the other's requests. A client connection belongs to an
 *                   address ("host:port"); a server connection was accepted by the listener.
 *
 * Ownership
 *   - The caller owns the loop. rmq__remoting_new() allocates the transport; it is freed by the
 *     transport itself after rmq__remoting_destroy()'s close callback has run.
 *   - The transport owns its connections. A connection pointer handed to a callback is valid
 *     during that callback. To use it later (an asynchronous reply, a broker keeping a
 *     client's channel), take a reference with rmq__conn_keep() and drop it with
 *     rmq__conn_release(); a kept connection that has closed stays allocated (state CLOSED) and
 *     every send on it fails with RMQ_ERR_TRANSPORT.
 *   - A command passed to a send function is not taken over: without a written callback, its
 *     header and body are encoded into the transport's own buffer and the caller may free the
 *     command as soon as the call returns. With a written callback (rmq__conn_reply_ex), the
 *     body and the extra buffers are lent, not copied, until that callback runs.
 *   - A response handed to a response callback, and a request handed to a handler, belong to
 *     the transport and are valid during the callback only. To keep the body, take a reference
 *     on cmd->frame (rmq__rbuf_keep) and keep cmd->body/body_len.
 *
 * Callbacks (libuv's rule): when a function returns an error, its callback never runs; when it
 * returns 0, its callback runs exactly once, later, never from inside the call.
 *
 * Threads: everything here runs on the loop thread that owns opts.loop, callbacks included.
 */
#ifndef RMQ_REMOTING_H
#define RMQ_REMOTING_H

#include "protocol/cmd.h"
#include "base/common.h"

#include <uv.h>

typedef struct rmq_remoting rmq_remoting_t;
typedef struct rmq_conn rmq_conn_t;

/* ---- defaults (Java NettyClientConfig / NettySystemConfig 4.9.4) ----------------------------- */

#define RMQ_CONNECT_TIMEOUT_MS_DEFAULT 3000 /* com.rocketmq.remoting.client.connect.timeout */
#define RMQ_IDLE_TIMEOUT_MS_DEFAULT 120000  /* ...client.channel.maxIdleTimeSeconds = 120 */
#define RMQ_RECONNECT_MIN_MS_DEFAULT 100    /* first delay after a failed connect */
#define RMQ_RECONNECT_MAX_MS_DEFAULT 5000   /* the delay doubles up to this */

/* ---- connection state machine ---------------------------------------------------------------- */

/*
 * WAITING     client: a connect failed recently; the next attempt starts at the backoff deadline.
 *             Requests are queued (their timeouts keep running).
 * CONNECTING  client: TCP connect in progress (connect timeout applies); requests are queued and
 *             written in order once connected. Server: being accepted (never seen by callers).
 * OPEN        connected (client) or accepted (server): reads and writes flow.
 * CLOSING     uv_close() issued; every pending request has been failed; nothing is sent.
 * CLOSED      the handle is closed; the object lives on only while someone holds a reference.
 *
 * Transitions: WAITING -> CONNECTING -> OPEN -> CLOSING -> CLOSED, and any state -> CLOSING.
 * Every change goes through one set_state() that logs "old -> new" under log_debug "remoting".
 */
typedef enum {
    RMQ_CONN_WAITING = 0,
    RMQ_CONN_CONNECTING,
    RMQ_CONN_OPEN,
    RMQ_CONN_CLOSING,
    RMQ_CONN_CLOSED
} rmq_conn_state_t;

const char *rmq__conn_state_name(int state);

/* ---- callbacks ------------------------------------------------------------------------------- */

/*
 * The outcome of a request. err is 0 with resp the response (any RocketMQ response code is
 * in resp->code: a non-zero code is still err == 0), or a local error with resp NULL:
 *   RMQ_ERR_TIMEOUT    no response within timeout_ms;
 *   RMQ_ERR_TRANSPORT  connect failed, connection closed or dropped, malformed frame, write
 *                      failed (errmsg names the address and the reason);
 *   RMQ_ERR_DESTROYED  the transport was destroyed first.
 * errmsg is a human sentence valid during the callback ("" when err == 0).
 * resp is valid during the callback only (see Ownership).
 */
typedef void (*rmq_response_cb)(void *ud, int err, rmq_cmd_t *resp, const char *errmsg);

/*
 * An incoming request (flag RESPONSE clear). req is valid during the call. Answer with
 * rmq__conn_reply() now or later (keep the connection and note req->opaque and req->serialize,
 * or build the response with rmq__cmd_init_response() now and send it later). Oneway requests
 * (req->flag & RMQ_FLAG_ONEWAY) must not be answered.
 */
typedef void (*rmq_request_handler)(rmq_conn_t *conn, rmq_cmd_t *req, void *ud);

/* A connection was accepted (server) or became OPEN (client). */
typedef void (*rmq_conn_open_cb)(rmq_conn_t *conn, void *ud);
/* A connection left OPEN/CONNECTING/WAITING for good: err is RMQ_ERR_TRANSPORT (peer closed,
 * error, malformed frame, idle, connect failure), RMQ_ERR_TIMEOUT (closed after a sync timeout),
 * RMQ_OK (closed by rmq__conn_close with RMQ_OK) or RMQ_ERR_DESTROYED. Runs once per connection,
 * after its pending requests were failed. */
typedef void (*rmq_conn_close_cb)(rmq_conn_t *conn, int err, const char *why, void *ud);

/* A lent write finished: the body and the extra buffers are no longer referenced. status is 0
 * (handed to the kernel) or a local error (the connection closed first). */
typedef void (*rmq_written_cb)(void *ud, int status);

/* ---- transport ------------------------------------------------------------------------------- */

typedef struct rmq_remoting_opts {
    uv_loop_t *loop;            /* required */
    const char *name;           /* log subsystem, e.g. "remoting" or "broker"; default "remoting" */
    size_t max_frame;           /* 0 = RMQ_FRAME_MAX_DEFAULT; limit on 4 + frameLength */
    int64_t connect_timeout_ms; /* 0 = RMQ_CONNECT_TIMEOUT_MS_DEFAULT */
    int64_t idle_timeout_ms;    /* 0 = RMQ_IDLE_TIMEOUT_MS_DEFAULT; < 0 = never close idle */
    int64_t reconnect_min_ms;   /* 0 = RMQ_RECONNECT_MIN_MS_DEFAULT */
    int64_t reconnect_max_ms;   /* 0 = RMQ_RECONNECT_MAX_MS_DEFAULT */
    /* clientCloseSocketIfTimeout: a request sent with RMQ_REQF_SYNC that times out closes its
     * connection (its other pending requests fail with RMQ_ERR_TRANSPORT). 0 = default (on),
     * < 0 = off. */
    int close_on_timeout;
    /* Serialize type of the responses the remoting layer makes itself (REQUEST_CODE_NOT_SUPPORTED),
     * Java's default type: RMQ_SERIALIZE_JSON (0, default) or RMQ_SERIALIZE_ROCKETMQ. */
    int serialize;
    rmq_conn_open_cb on_open;   /* optional */
    rmq_conn_close_cb on_close; /* optional */
    void *ud;                   /* passed to on_open / on_close / on_acl_refused */
    /* ---- security (tls.h, acl.h) ---- */
    /* Connections this side makes are TLS with this context (ClientConfig.useTLS): name servers
     * and brokers alike. A connection is OPEN once its handshake finished; a failed handshake is
     * a failed connect (backoff), its message names the address and OpenSSL's reason. The
     * transport keeps a reference. NULL = plain. */
    struct rmq_tls_ctx *tls_client;
    /* Accepted connections: with a context, the first byte decides (TlsModeHandler): 0x16
     * starts a TLS session, anything else is plain, refused (closed) in enforcing mode. */
    struct rmq_tls_ctx *tls_server;
    int tls_enforcing; /* with tls_server: plain clients are refused */
    /* Sign every request sent, name servers and brokers (AclClientRPCHook; responses are never
     * signed). Copied. NULL / "" access key = no signing. */
    const char *acl_access_key;
    const char *acl_secret_key;
    const char *acl_security_token; /* optional */
    /* A response that is an ACL refusal (acl.h rmq__acl_refused) to a request of code req_code
     * sent to addr; runs just before the request's own callback. Optional. */
    void (*on_acl_refused)(void *ud, const char *addr, int32_t req_code, const rmq_cmd_t *resp);
} rmq_remoting_opts_t;

/* Create a transport on opts->loop. Returns 0 or RMQ_ERR_INVALID (errstr says which option). */
int rmq__remoting_new(const rmq_remoting_opts_t *opts, rmq_remoting_t **out, char *errstr,
                      size_t errstr_size);

/*
 * Close every connection and the listener, fail every pending request with RMQ_ERR_DESTROYED
 * (callbacks run from inside this call, before it returns; on_close runs for each connection),
 * stop the timer. close_cb (optional) runs from the loop once every handle is closed; the
 * transport is freed just before it. Connections still referenced by rmq__conn_keep stay
 * allocated (CLOSED) until released. Call once; the transport must not be used afterwards.
 */
void rmq__remoting_destroy(rmq_remoting_t *t, void (*close_cb)(void *ud), void *ud);

/*
 * Handler for incoming requests with this code (0 <= code < 65536; NULL removes it).
 * A request whose code has no handler goes to the default handler if set, else is answered
 * REQUEST_CODE_NOT_SUPPORTED with remark " request type <code> not supported" (also for
 * oneway requests, like Java), in opts->serialize type.
 */
void rmq__remoting_set_handler(rmq_remoting_t *t, int32_t code, rmq_request_handler h, void *ud);
void rmq__remoting_set_default_handler(rmq_remoting_t *t, rmq_request_handler h, void *ud);

/* ---- sending requests ------------------------------------------------------------------------ */

/* Request flags (the flags argument of the _ex functions). */
/* ONEWAY on the wire: no response expected, no callback. */
#define RMQ_REQF_ONEWAY 0x1
/* A "synchronous" call in Java terms: its timeout closes the connection when
 * opts.close_on_timeout is on (clientCloseSocketIfTimeout). */
#define RMQ_REQF_SYNC 0x2

/*
 * Send req to addr and call cb once with the outcome. addr is "host:port", "[v6]:port", or NULL
 * for the current name server (rmq__remoting_set_namesrv). A host name is resolved before each
 * connect, asynchronously (libuv thread pool), IPv4 first like Java. The transport sets req->opaque
 * (one counter per transport) and clears the RESPONSE/ONEWAY flag bits it manages; everything else
 * (code, serialize, extFields, body) is sent as is. req can be freed when the call returns.
 * The first request to an address creates its connection; requests made while it connects are
 * queued (a queued request that times out before the connection opens is dropped, not sent
 * late). timeout_ms (> 0) counts from this call, connect time included. A failed connect puts
 * the address in backoff (reconnect_min_ms doubling up to reconnect_max_ms, reset by a
 * successful connect); requests made meanwhile wait for the next attempt (state WAITING).
 * Returns 0 (cb will run), or RMQ_ERR_INVALID (bad address / timeout), RMQ_ERR_NOMEM,
 * RMQ_ERR_NOT_FOUND (addr NULL and no name server set), RMQ_ERR_SHUTDOWN (destroyed): cb never
 * runs.
 */
int rmq__remoting_request(rmq_remoting_t *t, const char *addr, rmq_cmd_t *req, int64_t timeout_ms,
                          rmq_response_cb cb, void *ud);
/* Same with RMQ_REQF_* flags. With RMQ_REQF_ONEWAY, cb and ud must be NULL and timeout_ms is
 * ignored; the request is queued or written and forgotten (a failure is only logged). */
int rmq__remoting_request_ex(rmq_remoting_t *t, const char *addr, rmq_cmd_t *req,
                             int64_t timeout_ms, unsigned flags, rmq_response_cb cb, void *ud);
/* Oneway to addr: rmq__remoting_request_ex(t, addr, req, 0, RMQ_REQF_ONEWAY, NULL, NULL). */
int rmq__remoting_oneway(rmq_remoting_t *t, const char *addr, rmq_cmd_t *req);

/*
 * Send a request on one given connection (the broker calling a client: NOTIFY_CONSUMER_IDS_
 * CHANGED, GET_CONSUMER_RUNNING_INFO...). Responses are correlated the same way. Same contract
 * as rmq__remoting_request_ex; RMQ_ERR_TRANSPORT when the connection is CLOSING/CLOSED.
 */
int rmq__conn_request(rmq_conn_t *conn, rmq_cmd_t *req, int64_t timeout_ms, unsigned flags,
                      rmq_response_cb cb, void *ud);

/* ---- answering requests ---------------------------------------------------------------------- */

/*
 * Send a response. resp->opaque and resp->serialize must be the request's (rmq__cmd_init_response
 * does that); the RESPONSE flag is set here. Header and body are copied; resp can be freed on
 * return. Returns 0, or RMQ_ERR_TRANSPORT when the connection is not OPEN (nothing is sent).
 */
int rmq__conn_reply(rmq_conn_t *conn, rmq_cmd_t *resp);
/*
 * Zero-copy response: the frame is [header][resp->body][extra[0]]...[extra[n-1]] written with one
 * uv_write (the frame length counts them all), nothing copied but the header. resp->body and the
 * extra buffers are lent until written(wud, status) runs; on an error return written never runs
 * and nothing was sent. The extra array itself is copied. (The broker's PULL response: 32 stored
 * messages straight from their buffers.) With written NULL, body and extras are copied instead.
 */
int rmq__conn_reply_ex(rmq_conn_t *conn, rmq_cmd_t *resp, const uv_buf_t *extra, unsigned n_extra,
                       rmq_written_cb written, void *wud);

/* ---- connections ----------------------------------------------------------------------------- */

rmq_conn_t *rmq__conn_keep(rmq_conn_t *conn);
void rmq__conn_release(rmq_conn_t *conn);
/* Close now: pending requests fail with RMQ_ERR_TRANSPORT and errmsg "closed: <why>", on_close
 * runs with err. No-op when already CLOSING/CLOSED. */
void rmq__conn_close(rmq_conn_t *conn, int err, const char *why);

int rmq__conn_state(const rmq_conn_t *conn);
/* "127.0.0.1:53412": the peer (server side) or the address connected to (client side). */
const char *rmq__conn_peer(const rmq_conn_t *conn);
/* 1 for an accepted connection, 0 for one this side connected. */
int rmq__conn_is_server(const rmq_conn_t *conn);
/* Requests sent on this connection still waiting for a response. */
size_t rmq__conn_pending(const rmq_conn_t *conn);
/* One pointer of user data per connection (the broker's client record); NULL initially. */
void rmq__conn_set_ud(rmq_conn_t *conn, void *ud);
void *rmq__conn_get_ud(const rmq_conn_t *conn);
rmq_remoting_t *rmq__conn_transport(const rmq_conn_t *conn); /* NULL once the transport is gone */

/* Call fn for every connection not yet CLOSING/CLOSED (fn may close the one it is given). */
void rmq__remoting_foreach_conn(rmq_remoting_t *t, void (*fn)(rmq_conn_t *conn, void *ud),
                                void *ud);
/* The client connection for addr if one exists (any state before CLOSING), else NULL. */
rmq_conn_t *rmq__remoting_find_conn(rmq_remoting_t *t, const char *addr);
/* Close the client connection to addr if any (e.g. a broker removed from the route). */
void rmq__remoting_close_addr(rmq_remoting_t *t, const char *addr, const char *why);
/* Requests waiting for a response, over all connections. */
size_t rmq__remoting_pending(const rmq_remoting_t *t);

/* Counters since the transport was created (for the stats snapshot). */
typedef struct rmq_remoting_stats {
    uint64_t requests_sent;  /* requests and oneways handed to a connection */
    uint64_t responses_recv; /* responses matched to a pending request */
    uint64_t timeouts;       /* requests failed with RMQ_ERR_TIMEOUT */
    uint64_t requests_recv;  /* incoming requests dispatched */
    uint64_t connects;       /* client connections that reached OPEN */
    uint64_t connect_failures;
    uint64_t accepts;   /* server connections accepted */
    uint64_t closes;    /* connections closed, any reason */
    uint64_t malformed; /* connections closed for a malformed frame */
    uint64_t bytes_in;
    uint64_t bytes_out; /* bytes handed to uv_write */
    uint64_t conns;     /* live connections now */
    uint64_t pending;   /* requests waiting for a response now */
} rmq_remoting_stats_t;

void rmq__remoting_stats(const rmq_remoting_t *t, rmq_remoting_stats_t *out);

/* ---- server side ----------------------------------------------------------------------------- */

/*
 * Listen on host:port ("127.0.0.1", "0.0.0.0", "::1"; port 0 = ephemeral). Accepted connections
 * are OPEN at once (on_open runs) and dispatch like client ones. One listener per transport.
 * Returns 0 or RMQ_ERR_INVALID / RMQ_ERR_IO with the reason in errstr.
 */
int rmq__remoting_listen(rmq_remoting_t *t, const char *host, int port, char *errstr,
                         size_t errstr_size);
/* The bound port (after rmq__remoting_listen), else 0. */
int rmq__remoting_port(const rmq_remoting_t *t);

/* ---- name servers ---------------------------------------------------------------------------- */

/*
 * Set the name-server list "a:9876;b:9876" (Java namesrvAddr; "http://" prefixes stripped,
 * empty items ignored). One name server is chosen (the round-robin index starts at a random
 * value) and requests with addr NULL go there; when a connection to it fails or drops, the
 * next one in the list is chosen (round-robin). Returns 0, or RMQ_ERR_CONFIG naming the bad item.
 */
int rmq__remoting_set_namesrv(rmq_remoting_t *t, const char *list, char *errstr,
                              size_t errstr_size);
/* The currently chosen name server address, or NULL when none is set. */
const char *rmq__remoting_namesrv(const rmq_remoting_t *t);

/* ---- addresses ------------------------------------------------------------------------------- */

/*
 * Split "host:port" or "[v6]:port" into host (brackets removed, NUL-terminated into
 * host[host_size]) and port (1..65535). Returns 0 or RMQ_ERR_INVALID.
 */
int rmq__addr_split(const char *addr, char *host, size_t host_size, int *port);

#endif
