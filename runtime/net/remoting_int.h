/*
 * remoting_int.h -- what the files of the remoting transport share (remoting.c: connections,
 * timer, writes, reads, TLS hooks, life cycle; remoting_request.c: the table of pending requests
 * by opaque, sending requests and replies, matching responses and dispatching requests to the
 * handler table; remoting_server.c: the listener and accepted connections). Not for use outside
 * net/remoting*.c: everything else goes through remoting.h.
 * Threads: the loop thread of the transport's opts.loop only, as remoting.h.
 */
#ifndef RMQ_REMOTING_INT_H
#define RMQ_REMOTING_INT_H

#include "remoting.h"

#include <stddef.h>

#define SUB(t) ((t)->name)

/* ---- intrusive doubly linked lists ----------------------------------------------------------- */

typedef struct link {
    struct link *prev, *next;
} link_t;

static inline void list_init(link_t *h)
{
    h->prev = h->next = h;
}
static inline int list_empty(const link_t *h)
{
    return h->next == h;
}
static inline void list_insert_after(link_t *pos, link_t *n)
{
    n->prev = pos;
    n->next = pos->next;
    pos->next->prev = n;
    pos->next = n;
}
static inline void list_push_back(link_t *h, link_t *n)
{
    list_insert_after(h->prev, n);
}
static inline void list_remove(link_t *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}

#define CONTAINER_OF(ptr, type, field) ((type *)((char *)(ptr)-offsetof(type, field)))

/* ---- types ----------------------------------------------------------------------------------- */

typedef struct pending {
    link_t by_deadline; /* t->pending, sorted by deadline */
    link_t by_conn;     /* conn->pending */
    struct pending *hnext;
    rmq_conn_t *conn;
    int32_t opaque;
    int32_t code;
    unsigned flags;
    int64_t deadline;
    int64_t timeout_ms;
    rmq_response_cb cb;
    void *ud;
} pending_t;

typedef struct wreq {
    uv_write_t req;
    link_t link; /* conn->queued while the connection is not OPEN */
    rmq_conn_t *conn;
    rmq_written_cb written;
    void *wud;
    int32_t opaque; /* a request's opaque, when awaited is set */
    int awaited;    /* a request with a pending entry: skipped if that is gone when queued */
    rmq_buf_t hdr;  /* encoded header (and body, when copied) */
    unsigned nbufs;
    uv_buf_t bufs[];
} wreq_t;

#define BATCH_MAX_BYTES (256 * 1024) /* hand a batch to libuv once it holds this much */
#define BATCH_MAX_SEGS 512           /* ... or this many slices (stays under IOV_MAX) */
#define BATCH_SPARES 4               /* finished batches a connection keeps for reuse */
#define SPARE_MAX_BYTES (64 * 1024)  /* ... without a buffer larger than this (a burst's) */

typedef struct wseg {
    const char *ext; /* a lent buffer, or NULL: [off, off + len) of the batch's data */
    size_t off, len;
} wseg_t;

typedef struct wdone {
    rmq_written_cb cb;
    void *ud;
} wdone_t;

/* Frames collected for one uv_write (see the top of remoting.c). */
typedef struct wbatch {
    uv_write_t req;
    struct wbatch *next_spare;
    rmq_conn_t *conn;
    rmq_buf_t data; /* encoded headers and copied bodies */
    wseg_t *segs;
    unsigned nsegs, segcap;
    wdone_t *done; /* written callbacks of lent buffers */
    unsigned ndone, donecap;
    uv_buf_t *bufs;
    unsigned bufcap;
} wbatch_t;

typedef struct peer {
    link_t link; /* t->peers */
    char *addr;
    rmq_conn_t *conn; /* the live connection (state < CLOSING), or NULL */
    int fails;        /* consecutive failed connects */
    int64_t retry_at; /* no connect before this (loop time) */
    int unanswered;   /* consecutive plain connections closed by it before any answer */
    int hinted;       /* the likely cause of those closes was logged */
} peer_t;

struct rmq_conn {
    uv_tcp_t tcp; /* tcp.data = this */
    rmq_remoting_t *t;
    int refs;
    int state;
    int is_server;
    int handle_inited;
    int doomed; /* close at the next timer run (a failure found where closing is unsafe) */
    int connect_failed;
    char doom_why[160];
    link_t live;     /* t->conns while state < CLOSING */
    link_t all;      /* t->all_conns while allocated */
    link_t pending;  /* pending_t.by_conn */
    link_t queued;   /* wreq_t written once OPEN */
    link_t dirty;    /* t->dirty while out holds frames */
    wbatch_t *out;   /* frames not yet handed to libuv (OPEN only), or NULL */
    wbatch_t *spare; /* finished batches kept for reuse (next_spare), up to BATCH_SPARES */
    int nspare;
    size_t npending;
    peer_t *peer; /* client side: its address entry (NULL once detached) */
    uv_connect_t connect_req;
    struct rmq_dial *dial; /* host name being resolved and dialled (counted in t->handles) */
    int host_name;         /* host is a name: resolved (asynchronously) before each connect */
    int port;
    char host[256];
    struct sockaddr_storage sa;
    int64_t deadline; /* WAITING: connect start; CONNECTING: connect timeout */
    int64_t last_io;
    void *ud;
    char addr[80];
    rmq_framer_t framer;
    struct rmq_tls *tls; /* the TLS session (remoting.c, "TLS"), or NULL: plain */
    int sniff;           /* accepted by a TLS listener: the first byte read decides */
    int reading;         /* uv_read_start done */
    int answered;        /* a frame arrived on it */
};

typedef struct handler_slot {
    rmq_request_handler h;
    void *ud;
} handler_slot_t;

struct rmq_remoting {
    uv_loop_t *loop;
    char name[32];
    rmq_remoting_opts_t opts;
    uv_timer_t timer;
    int64_t timer_at;  /* deadline the timer is armed for, or -1 */
    uv_idle_t flusher; /* hands the open batches of t->dirty to libuv */
    link_t dirty;      /* connections with an open batch */
    int in_scan;
    uv_tcp_t listener;
    int listening;
    int port;
    int handles; /* handles initialised and not yet closed (timer, listener, connections) */
    int destroying;
    void (*destroy_cb)(void *ud);
    void *destroy_ud;
    uint32_t next_opaque;

    link_t conns;     /* live connections */
    link_t all_conns; /* every allocated connection */
    link_t peers;
    link_t pending; /* by deadline */
    size_t npending;
    pending_t **hash;
    size_t hash_size; /* power of two */

    handler_slot_t *handlers;
    int n_handlers;
    handler_slot_t dflt;

    char **ns;
    int n_ns;
    int ns_idx;

    rmq_remoting_stats_t st; /* conns and pending are filled in by rmq__remoting_stats */

    char *acl_ak, *acl_sk, *acl_token; /* copies of the opts' ACL keys (acl_ak NULL: unsigned) */
};

static inline int64_t now_ms(rmq_remoting_t *t)
{
    return (int64_t)uv_now(t->loop);
}

/* ---- remoting.c ------------------------------------------------------------------------------ */

/* A new connection object (WAITING, or CONNECTING when accepted), holding the transport's
 * reference; the caller initialises its handle. */
rmq_conn_t *rmq__remoting_conn_new(rmq_remoting_t *t, int is_server);
/* OPEN: start reading, write what was queued, tell the owner. */
void rmq__remoting_conn_opened(rmq_conn_t *c);
/* Close c with err; its pending requests fail with pending_err (see conn_close). */
void rmq__remoting_conn_close(rmq_conn_t *c, int err, int pending_err, const char *why);
/* The connection for addr, created (and started) when needed; see conn_for_addr. */
int rmq__remoting_conn_for_addr(rmq_remoting_t *t, const char *addr, rmq_conn_t **out, char *err,
                                size_t errsz);
/* Encode cmd and send or queue it on c; see conn_send. Returns 0 or an error. */
int rmq__remoting_conn_send(rmq_conn_t *c, const rmq_cmd_t *cmd, int awaited, int copy,
                            const uv_buf_t *extra, unsigned n_extra, rmq_written_cb written,
                            void *wud);
/* The timer fires at `at` (loop time) at the latest. */
void rmq__remoting_arm_timer(rmq_remoting_t *t, int64_t at);
/* Close callback of the transport's own handles (timer, idle, listener). */
void rmq__remoting_plain_closed(uv_handle_t *h);

/* ---- remoting_request.c ---------------------------------------------------------------------- */

/* The pending request with this opaque, or NULL. */
pending_t *rmq__remoting_pending_find(rmq_remoting_t *t, int32_t opaque);
/* Unlink p from the deadline list, its connection's list and the opaque table (not freed). */
void rmq__remoting_pending_unlink(rmq_remoting_t *t, pending_t *p);
/* Unlink p, run its callback with a local error, free it. */
void rmq__remoting_pending_fail(rmq_remoting_t *t, pending_t *p, int err, const char *msg);
/* A decoded frame from c: a response goes to its pending request, a request to its handler. */
void rmq__remoting_dispatch(rmq_conn_t *c, rmq_cmd_t *cmd);

#endif
