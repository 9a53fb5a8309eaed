/*
 * coloop.c -- the per-thread event loop of coroutine handlers (coloop.h) and the FFI leaf
 * functions Lua uses on it (rmqlua_ffi.h, ABI 4): timers (rmq.sleep), the wait that runs the
 * loop (the scheduler in lua/rmq/co.lua), and TCP sockets (rmq.socket.tcp, lua/rmq/socket.lua).
 *
 * Every operation that waits (a timer, a connect, a send, a read) gets an id from the thread's
 * counter and completes by putting that id on the thread's ready list; rmq_co_wait() runs the
 * loop until the list is not empty and hands the ids to Lua, which resumes the coroutines
 * waiting on them. An id nobody waits for any more (its coroutine was abandoned) is ignored by
 * Lua. Nothing here calls into Lua, raises, or touches another thread's loop.
 *
 * TLS (ABI 5, sslhandshake): a socket with a cossl.h session feeds it the ciphertext it reads
 * and writes what it produces; the received bytes then hold plaintext, so receive and its
 * patterns work unchanged. The handshake takes the connect's slot (its timer and error).
 * A thread holds at most rmq_coloop_conf_t.max_sockets sockets (lua_socket_max_per_thread):
 * counted from rmq_cosock_new to rmq_cosock_free, pooled ones included.
 *
 * Sockets: a rmq_cosock_t is owned by Lua (ffi.gc calls rmq_cosock_free); the handles inside it
 * are closed there and the memory freed by the close callback. At most one connect or send and
 * one read are pending per socket (the Lua side keeps to that). Error strings are OpenResty's
 * ("timeout", "closed", "connection refused", "connection reset by peer", "<host> could not be
 * resolved (...)"), static or kept in the socket until its next operation.
 *
 * Ownership: the loop, its timers and its ready list belong to the thread (thread-local).
 * Threads: the thread that owns the loop; rmq__coloop_wake from any thread.
 */
#include "coloop.h"

#include "cossl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <uv.h>

struct rmq_coloop {
    uv_loop_t loop;
    uv_async_t wake; /* unreferenced: only breaks a wait so the interrupt flag is seen */
    int *irq;
    int64_t next_id;
    int64_t *ready;
    int nready, cap;
    int pending; /* operations started and not completed */
    int nsocks;  /* sockets made and not yet freed (pooled ones included) */
    int kicked;  /* the wake-up fired (new work or an interrupt): rmq_serve_wait returns */
};

static _Thread_local rmq_coloop_t *self;
static _Thread_local int *self_irq;
static _Thread_local void (*self_made)(void *ud, rmq_coloop_t *c);
static _Thread_local void *self_made_ud;
static _Thread_local int self_waited; /* rmq_co_waited since rmq__coloop_take_waited */
static _Thread_local const rmq_coloop_conf_t *self_conf;
static _Thread_local rmq_coloop_conf_t own_conf; /* rmq_co_configure's */
static _Thread_local char *own_ca;

static const rmq_coloop_conf_t default_conf = {RMQ_COLOOP_MAX_SOCKETS, NULL,
                                               RMQ_COLOOP_VERIFY_DEPTH};

void rmq__coloop_configure(const rmq_coloop_conf_t *conf)
{
    self_conf = conf;
}

const rmq_coloop_conf_t *rmq__coloop_conf(void)
{
    return self_conf ? self_conf : &default_conf;
}

/* Set this thread's cosocket settings (the options' values; for tests and embedders that run
 * Lua outside a consumer): max_sockets <= 0 and verify_depth < 0 keep the defaults, ca_file
 * NULL or "" means the system's CA store. */
RMQ_EXPORT void rmq_co_configure(int max_sockets, const char *ca_file, int verify_depth)
{
    free(own_ca);
    own_ca = ca_file && *ca_file ? rmq__xstrdup(ca_file) : NULL;
    own_conf.max_sockets = max_sockets > 0 ? max_sockets : RMQ_COLOOP_MAX_SOCKETS;
    own_conf.ca_file = own_ca;
    own_conf.verify_depth = verify_depth >= 0 ? verify_depth : RMQ_COLOOP_VERIFY_DEPTH;
    self_conf = &own_conf;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q) abort(); /* the ready list: a few ids */
    return q;
}

static void on_wake(uv_async_t *a)
{
    ((rmq_coloop_t *)a->data)->kicked = 1;
}

rmq_coloop_t *rmq__coloop_self(void)
{
    if (self) return self;
    rmq_coloop_t *c = rmq__xcalloc(1, sizeof(*c));
    if (uv_loop_init(&c->loop) != 0) abort(); /* out of file descriptors or memory */
    uv_async_init(&c->loop, &c->wake, on_wake);
    c->wake.data = c;
    uv_unref((uv_handle_t *)&c->wake);
    c->next_id = 1;
    c->irq = self_irq;
    self = c;
    if (self_made) self_made(self_made_ud, c);
    return c;
}

void rmq__coloop_prepare(int *irq, void (*made)(void *ud, rmq_coloop_t *c), void *ud)
{
    self_irq = irq;
    self_made = made;
    self_made_ud = ud;
}

void rmq__coloop_wake(rmq_coloop_t *c)
{
    uv_async_send(&c->wake);
}

static void on_walk_close(uv_handle_t *h, void *arg)
{
    if (!uv_is_closing(h)) uv_close(h, (uv_close_cb)arg);
}

static void free_handle_mem(uv_handle_t *h)
{
    free(h->data); /* every handle on the loop but wake points to its own allocation */
}

static void nothing(uv_handle_t *h)
{
}

void rmq__coloop_free_self(void)
{
    rmq_coloop_t *c = self;
    if (!c) return;
    uv_close((uv_handle_t *)&c->wake, nothing);
    uv_walk(&c->loop, on_walk_close, (void *)free_handle_mem);
    uv_run(&c->loop, UV_RUN_DEFAULT);
    uv_loop_close(&c->loop);
    free(c->ready);
    free(c);
    self = NULL;
    rmq__cossl_free_self();
}

static int64_t new_id(rmq_coloop_t *c)
{
    c->pending++;
    return c->next_id++;
}

static void post(rmq_coloop_t *c, int64_t id)
{
    if (c->nready == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 64;
        c->ready = xrealloc(c->ready, sizeof(*c->ready) * (size_t)c->cap);
    }
    c->ready[c->nready++] = id;
    c->pending--;
}

/* ---- time and the wait ------------------------------------------------------------------ */

RMQ_EXPORT double rmq_co_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)(tv.tv_usec / 1000) / 1000.0;
}

typedef struct co_timer {
    uv_timer_t h;
    int64_t id;
} co_timer_t;

static void on_sleep(uv_timer_t *h)
{
    co_timer_t *tm = h->data;
    post(self, tm->id);
    uv_close((uv_handle_t *)h, free_handle_mem);
}

static uint64_t ms_of(double ms)
{
    if (!(ms > 0)) return 0;
    if (ms > 1e12) return (uint64_t)1e12;
    return (uint64_t)(ms + 0.5);
}

RMQ_EXPORT int64_t rmq_co_sleep(double ms)
{
    rmq_coloop_t *c = rmq__coloop_self();
    co_timer_t *tm = rmq__xcalloc(1, sizeof(*tm));
    uv_timer_init(&c->loop, &tm->h);
    tm->h.data = tm;
    tm->id = new_id(c);
    uv_update_time(&c->loop); /* count from now, not from the loop's last run */
    uv_timer_start(&tm->h, on_sleep, ms_of(ms), 0);
    return tm->id;
}

RMQ_EXPORT int rmq_co_wait(int64_t *ids, int max)
{
    rmq_coloop_t *c = rmq__coloop_self();
    for (;;) {
        if (c->irq && __atomic_load_n(c->irq, __ATOMIC_ACQUIRE)) {
            __atomic_store_n(c->irq, 0, __ATOMIC_RELAXED);
            return -1;
        }
        if (c->nready > 0) {
            int n = c->nready < max ? c->nready : max;
            memcpy(ids, c->ready, sizeof(*ids) * (size_t)n);
            memmove(c->ready, c->ready + n, sizeof(*ids) * (size_t)(c->nready - n));
            c->nready -= n;
            return n;
        }
        if (c->pending <= 0) return 0;
        uv_run(&c->loop, UV_RUN_ONCE);
    }
}

RMQ_EXPORT void rmq_co_waited(void)
{
    self_waited = 1;
}

int rmq__coloop_take_waited(void)
{
    int w = self_waited;
    self_waited = 0;
    return w;
}

/* The serve mode's wait (consume_pool.c): like rmq_co_wait, but it also returns 0 when the
 * wake-up fired (work queued for this thread, an in-flight batch interrupted), and -2 when
 * nothing is pending (no operation could ever complete). */
RMQ_EXPORT int rmq_serve_wait(int64_t *ids, int max)
{
    rmq_coloop_t *c = rmq__coloop_self();
    for (;;) {
        if (c->nready > 0) {
            int n = c->nready < max ? c->nready : max;
            memcpy(ids, c->ready, sizeof(*ids) * (size_t)n);
            memmove(c->ready, c->ready + n, sizeof(*ids) * (size_t)(c->nready - n));
            c->nready -= n;
            return n;
        }
        if (c->kicked) {
            c->kicked = 0;
            return 0;
        }
        if (c->pending <= 0) return -2;
        uv_run(&c->loop, UV_RUN_ONCE);
    }
}

/* ---- TCP sockets ------------------------------------------------------------------------ */

enum { OP_CONN = 0, OP_SEND = 1, OP_READ = 2 };

struct rmq_cosock {
    uv_tcp_t tcp;
    uv_timer_t timer[3]; /* connect, send, read */
    uv_getaddrinfo_t gai;
    uv_connect_t conn;
    uv_write_t wr;
    int64_t id[3];       /* the pending operation's id, 0 = none */
    const char *err[3];  /* its result: NULL = ok */
    char errbuf[512];    /* a resolver error */
    char host[256];
    int port;
    int open_handles;    /* handles to close before the memory goes */
    int tcp_init, connected, eof, reading, broken, freed, idle;
    char *wbuf;          /* a copy of the data being sent */
    char *rbuf;          /* received and not yet taken (plaintext over TLS) */
    size_t rlen, rcap, rhead;
    rmq_cossl_t *tls;    /* after sslhandshake (cossl.h), else NULL */
    int handshaking;     /* the handshake is the pending OP_CONN */
    char *cbuf;          /* TLS: ciphertext read from the peer, fed to tls at once */
};

/* TLS: a write of ciphertext (its own buffer); last completes the pending send. */
typedef struct tls_wr {
    uv_write_t w;
    rmq_cosock_t *s;
    char *buf;
    int last;
} tls_wr_t;

static int tls_flush(rmq_cosock_t *s, int last);
static size_t tls_drain(rmq_cosock_t *s, int *end);

static const char *uv_err_text(int e)
{
    switch (e) {
    case UV_ECONNREFUSED: return "connection refused";
    case UV_ECONNRESET: return "connection reset by peer";
    case UV_ETIMEDOUT: return "timeout";
    case UV_EPIPE:
    case UV_EOF:
    case UV_ECANCELED: return "closed";
    case UV_ENETUNREACH: return "network is unreachable";
    case UV_EHOSTUNREACH: return "no route to host";
    case UV_EADDRNOTAVAIL: return "cannot assign requested address";
    default: return uv_strerror(e);
    }
}

static void sock_mem_free(rmq_cosock_t *s)
{
    free(s->wbuf);
    free(s->rbuf);
    free(s->cbuf);
    rmq__cossl_free(s->tls);
    free(s);
}

static void sock_handle_closed(uv_handle_t *h)
{
    rmq_cosock_t *s = h->data;
    if (--s->open_handles == 0) sock_mem_free(s);
}

/* Complete operation op of s with err (NULL: success). */
static void finish(rmq_cosock_t *s, int op, const char *err)
{
    if (!s->id[op]) return;
    uv_timer_stop(&s->timer[op]);
    s->err[op] = err;
    int64_t id = s->id[op];
    s->id[op] = 0;
    post(self, id);
}

/* The connection is unusable from now on: pending operations fail with err. */
static void sock_break(rmq_cosock_t *s, const char *err)
{
    s->broken = 1;
    if (s->reading) {
        uv_read_stop((uv_stream_t *)&s->tcp);
        s->reading = 0;
    }
    for (int op = 0; op < 3; op++) finish(s, op, err);
}

RMQ_EXPORT rmq_cosock_t *rmq_cosock_new(void)
{
    rmq_coloop_t *c = rmq__coloop_self();
    rmq_cosock_t *s = rmq__xcalloc(1, sizeof(*s));
    for (int i = 0; i < 3; i++) {
        uv_timer_init(&c->loop, &s->timer[i]);
        s->timer[i].data = s;
    }
    s->open_handles = 3;
    c->nsocks++;
    return s;
}

RMQ_EXPORT void rmq_cosock_free(rmq_cosock_t *s)
{
    if (s->freed) return;
    s->freed = 1;
    if (self) self->nsocks--;
    /* Ids still pending are dropped: nobody waits on a socket the collector took. */
    for (int op = 0; op < 3; op++)
        if (s->id[op]) {
            s->id[op] = 0;
            if (self) self->pending--;
        }
    if (s->gai.data) uv_cancel((uv_req_t *)&s->gai); /* on_resolved frees nothing more */
    for (int i = 0; i < 3; i++) uv_close((uv_handle_t *)&s->timer[i], sock_handle_closed);
    if (s->tcp_init) uv_close((uv_handle_t *)&s->tcp, sock_handle_closed);
}

static void on_op_timeout(uv_timer_t *h)
{
    rmq_cosock_t *s = h->data;
    int op = (int)(h - s->timer);
    if (op == OP_READ) {
        if (s->reading) uv_read_stop((uv_stream_t *)&s->tcp);
        s->reading = 0;
        finish(s, op, "timeout"); /* a read timeout leaves the connection usable */
        return;
    }
    if (op == OP_CONN) { /* a connect or a TLS handshake: the connection goes */
        finish(s, op, "timeout");
        s->broken = 1;
        s->reading = 0; /* closing the handle stops it */
        s->handshaking = 0;
        if (s->tcp_init && !uv_is_closing((uv_handle_t *)&s->tcp)) {
            uv_close((uv_handle_t *)&s->tcp, sock_handle_closed);
            s->tcp_init = 0;
        }
        return;
    }
    sock_break(s, "timeout");
}

static void start_op_timer(rmq_cosock_t *s, int op, double timeout_ms)
{
    uint64_t ms = ms_of(timeout_ms);
    /* The loop's clock stopped when it last ran (maybe long ago): count from now. */
    uv_update_time(s->timer[op].loop);
    if (ms) uv_timer_start(&s->timer[op], on_op_timeout, ms, 0);
}

static void on_connected(uv_connect_t *req, int status)
{
    rmq_cosock_t *s = req->data;
    if (s->freed || !s->id[OP_CONN]) return; /* timed out or collected meanwhile */
    if (status) {
        finish(s, OP_CONN, uv_err_text(status));
        s->broken = 1;
        return;
    }
    s->connected = 1;
    finish(s, OP_CONN, NULL);
}

static int start_connect(rmq_cosock_t *s, const struct sockaddr *sa)
{
    rmq_coloop_t *c = self;
    uv_tcp_init(&c->loop, &s->tcp);
    s->tcp.data = s;
    s->tcp_init = 1;
    s->open_handles++;
    uv_tcp_nodelay(&s->tcp, 1);
    s->conn.data = s;
    int rc = uv_tcp_connect(&s->conn, &s->tcp, sa, on_connected);
    if (rc) {
        finish(s, OP_CONN, uv_err_text(rc));
        s->broken = 1;
    }
    return rc;
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    rmq_cosock_t *s = req->data;
    req->data = NULL;
    if (s->freed) {
        uv_freeaddrinfo(res);
        /* The socket's memory waited for this request (rmq_cosock_free). */
        if (--s->open_handles == 0) sock_mem_free(s);
        return;
    }
    s->open_handles--;
    if (!s->id[OP_CONN]) { /* timed out while resolving */
        uv_freeaddrinfo(res);
        return;
    }
    if (status || !res) {
        snprintf(s->errbuf, sizeof(s->errbuf), "%.255s could not be resolved (%.200s)", s->host,
                 uv_strerror(status ? status : UV_EAI_NONAME));
        finish(s, OP_CONN, s->errbuf);
        s->broken = 1;
        uv_freeaddrinfo(res);
        return;
    }
    struct sockaddr_storage ss;
    memcpy(&ss, res->ai_addr, res->ai_addrlen);
    uv_freeaddrinfo(res);
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)s->port);
    else
        ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)s->port);
    start_connect(s, (struct sockaddr *)&ss);
}

/* Connect to host:port (an IP address, or a name resolved on libuv's thread pool). Returns the
 * id of the connect, or -1 with *err (nothing pending). */
RMQ_EXPORT int64_t rmq_cosock_connect(rmq_cosock_t *s, const char *host, int port,
                                      double timeout_ms, const char **err)
{
    rmq_coloop_t *c = rmq__coloop_self();
    if (s->tcp_init || s->broken || s->id[OP_CONN]) {
        *err = "already connected";
        return -1;
    }
    int max = rmq__coloop_conf()->max_sockets;
    if (c->nsocks > max) {
        snprintf(s->errbuf, sizeof(s->errbuf),
                 "too many open sockets on this thread (%d open; lua_socket_max_per_thread = %d)",
                 c->nsocks - 1, max);
        *err = s->errbuf;
        return -1;
    }
    if (port < 1 || port > 65535) {
        *err = "bad port number";
        return -1;
    }
    if (strlen(host) >= sizeof(s->host)) {
        *err = "host name too long";
        return -1;
    }
    snprintf(s->host, sizeof(s->host), "%s", host);
    s->port = port;
    s->id[OP_CONN] = new_id(c);
    int64_t id = s->id[OP_CONN];
    start_op_timer(s, OP_CONN, timeout_ms);
    struct sockaddr_storage ss;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) == 0 ||
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) == 0) {
        start_connect(s, (struct sockaddr *)&ss);
        return id;
    }
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    s->gai.data = s;
    s->open_handles++;
    int rc = uv_getaddrinfo(&c->loop, &s->gai, on_resolved, host, NULL, &hints);
    if (rc) {
        s->gai.data = NULL;
        s->open_handles--;
        snprintf(s->errbuf, sizeof(s->errbuf), "%.255s could not be resolved (%.200s)", host,
                 uv_strerror(rc));
        finish(s, OP_CONN, s->errbuf);
    }
    return id;
}

static void on_written(uv_write_t *req, int status)
{
    rmq_cosock_t *s = req->data;
    free(s->wbuf);
    s->wbuf = NULL;
    if (s->freed) return;
    if (status) {
        sock_break(s, status == UV_ECANCELED ? "closed" : uv_err_text(status));
        return;
    }
    finish(s, OP_SEND, NULL);
}

/* Send len bytes of data (copied). Returns the id, or -1 with *err. */
RMQ_EXPORT int64_t rmq_cosock_send(rmq_cosock_t *s, const char *data, size_t len,
                                   double timeout_ms, const char **err)
{
    rmq_coloop_t *c = rmq__coloop_self();
    if (!s->connected || s->broken || !s->tcp_init) {
        *err = "closed";
        return -1;
    }
    if (s->id[OP_SEND] || s->wbuf || s->handshaking) {
        *err = "socket busy writing";
        return -1;
    }
    if (s->tls) {
        if (rmq__cossl_write(s->tls, data, len)) {
            *err = "closed";
            return -1;
        }
        int64_t id = s->id[OP_SEND] = new_id(c);
        start_op_timer(s, OP_SEND, timeout_ms);
        tls_flush(s, 1); /* a failure completes the send with its error */
        return id;
    }
    s->wbuf = rmq__xmalloc(len ? len : 1);
    memcpy(s->wbuf, data, len);
    uv_buf_t b = uv_buf_init(s->wbuf, (unsigned)len);
    s->wr.data = s;
    int rc = uv_write(&s->wr, (uv_stream_t *)&s->tcp, &b, 1, on_written);
    if (rc) {
        free(s->wbuf);
        s->wbuf = NULL;
        *err = uv_err_text(rc);
        return -1;
    }
    s->id[OP_SEND] = new_id(c);
    start_op_timer(s, OP_SEND, timeout_ms);
    return s->id[OP_SEND];
}

/* Room for at least 16 KiB more at the end of the received bytes: where, and *room; NULL when
 * memory ran out. */
static char *rbuf_room(rmq_cosock_t *s, size_t *room)
{
    if (s->rhead > 0 && s->rhead == s->rlen) s->rhead = s->rlen = 0;
    if (s->rcap - s->rlen < 16384) {
        if (s->rhead > 0) {
            memmove(s->rbuf, s->rbuf + s->rhead, s->rlen - s->rhead);
            s->rlen -= s->rhead;
            s->rhead = 0;
        }
        if (s->rcap - s->rlen < 16384) {
            size_t ncap = s->rcap ? s->rcap * 2 : 65536;
            char *nb = realloc(s->rbuf, ncap);
            if (!nb) return NULL;
            s->rbuf = nb;
            s->rcap = ncap;
        }
    }
    *room = s->rcap - s->rlen;
    return s->rbuf + s->rlen;
}

enum { CBUF_SIZE = 65536 };

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    rmq_cosock_t *s = h->data;
    if (s->tls) { /* ciphertext: fed to the session at once, so one buffer does */
        if (!s->cbuf) s->cbuf = malloc(CBUF_SIZE);
        *buf = uv_buf_init(s->cbuf, s->cbuf ? CBUF_SIZE : 0);
        return;
    }
    size_t room = 0;
    char *p = rbuf_room(s, &room);
    *buf = uv_buf_init(p, (unsigned)room); /* NULL: libuv reports UV_ENOBUFS to on_read */
}

/* ---- TLS (cossl.h) ------------------------------------------------------------------------ */

static void stop_reading(rmq_cosock_t *s)
{
    if (s->reading) uv_read_stop((uv_stream_t *)&s->tcp);
    s->reading = 0;
}

static void on_tls_written(uv_write_t *req, int status)
{
    tls_wr_t *w = req->data;
    rmq_cosock_t *s = w->s;
    int last = w->last;
    free(w->buf);
    free(w);
    if (s->freed) return;
    if (status) {
        sock_break(s, status == UV_ECANCELED ? "closed" : uv_err_text(status));
        return;
    }
    if (last) finish(s, OP_SEND, NULL);
}

/* Write out the ciphertext the session produced; last: its completion completes the pending
 * send (at once when there is nothing to write). 0, or -1 when the write could not start (the
 * socket is then broken and its pending operations failed). */
static int tls_flush(rmq_cosock_t *s, int last)
{
    size_t len = 0;
    char *b = rmq__cossl_take(s->tls, &len);
    if (!b) {
        if (last) finish(s, OP_SEND, NULL);
        return 0;
    }
    tls_wr_t *w = rmq__xcalloc(1, sizeof(*w));
    w->s = s;
    w->buf = b;
    w->last = last;
    w->w.data = w;
    uv_buf_t ub = uv_buf_init(b, (unsigned)len);
    int rc = uv_write(&w->w, (uv_stream_t *)&s->tcp, &ub, 1, on_tls_written);
    if (rc) {
        free(b);
        free(w);
        sock_break(s, uv_err_text(rc));
        return -1;
    }
    return 0;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

/* One step of the handshake, after it started or the peer sent more. */
static void tls_step(rmq_cosock_t *s)
{
    const char *err = NULL;
    int r = rmq__cossl_handshake(s->tls, s->errbuf, sizeof(s->errbuf), &err);
    if (tls_flush(s, 0) < 0) return;
    if (r == 0) {
        if (!s->reading) {
            int rc = uv_read_start((uv_stream_t *)&s->tcp, on_alloc, on_read);
            if (rc) {
                s->handshaking = 0;
                sock_break(s, uv_err_text(rc));
                return;
            }
            s->reading = 1;
        }
        return;
    }
    stop_reading(s);
    s->handshaking = 0;
    if (r < 0) {
        s->broken = 1;
        finish(s, OP_CONN, err);
        return;
    }
    finish(s, OP_CONN, NULL);
}

/* Decrypt what the session holds into the received bytes: how many bytes came out; *end -1
 * when the peer closed the session, -2 on a TLS error, else 0. */
static size_t tls_drain(rmq_cosock_t *s, int *end)
{
    size_t got = 0;
    *end = 0;
    for (;;) {
        size_t room = 0;
        char *p = rbuf_room(s, &room);
        if (!p) {
            *end = -2;
            break;
        }
        int r = rmq__cossl_read(s->tls, p, room);
        if (r > 0) {
            s->rlen += (size_t)r;
            got += (size_t)r;
            continue;
        }
        if (r < 0) *end = r;
        break;
    }
    tls_flush(s, 0); /* what the session answers by itself (a key update) */
    return got;
}

/* A read over TLS brought ciphertext (or the end). */
static void tls_on_read(rmq_cosock_t *s, ssize_t nread, const uv_buf_t *buf)
{
    if (nread < 0) {
        stop_reading(s);
        if (s->handshaking) {
            s->handshaking = 0;
            s->broken = 1;
            finish(s, OP_CONN, nread == UV_EOF ? "handshake failed" : uv_err_text((int)nread));
        } else if (nread == UV_EOF) {
            s->eof = 1;
            finish(s, OP_READ, "closed");
        } else {
            sock_break(s, uv_err_text((int)nread));
        }
        return;
    }
    rmq__cossl_feed(s->tls, buf->base, (size_t)nread);
    if (s->handshaking) {
        tls_step(s);
        return;
    }
    int end = 0;
    size_t got = tls_drain(s, &end);
    if (end == -1) s->eof = 1;
    if (end == -2) s->broken = 1;
    if (got == 0 && end == 0) return; /* a record not complete yet, or a session ticket */
    stop_reading(s);
    finish(s, OP_READ, got ? NULL : "closed");
}

/* Start the TLS handshake on a connected socket (the OP_CONN slot, so the connect's error and
 * timer serve it). Returns its id; 0 when the connection is TLS already (one reused from the
 * pool: nothing to do, as in OpenResty); -1 with *err. */
RMQ_EXPORT int64_t rmq_cosock_sslhandshake(rmq_cosock_t *s, const char *server_name, int verify,
                                           void *session, double timeout_ms, const char **err)
{
    rmq_coloop_t *c = rmq__coloop_self();
    if (!s->connected || s->broken || s->eof || !s->tcp_init) {
        *err = "closed";
        return -1;
    }
    if (s->id[OP_CONN] || s->id[OP_SEND] || s->id[OP_READ] || s->handshaking) {
        *err = "socket busy";
        return -1;
    }
    if (s->tls) return 0;
    if (s->rlen != s->rhead) {
        *err = "unread data in buffer";
        return -1;
    }
    s->tls = rmq__cossl_new(rmq__coloop_conf(), server_name, verify, session, s->errbuf,
                            sizeof(s->errbuf), err);
    if (!s->tls) return -1;
    s->handshaking = 1;
    s->id[OP_CONN] = new_id(c);
    int64_t id = s->id[OP_CONN];
    start_op_timer(s, OP_CONN, timeout_ms);
    tls_step(s);
    return id;
}

/* The TLS session of s to pass to a later handshake (one reference, freed with
 * rmq_cosock_ssl_session_free), or NULL. */
RMQ_EXPORT void *rmq_cosock_ssl_session(rmq_cosock_t *s)
{
    return s->tls && !s->handshaking ? rmq__cossl_session(s->tls) : NULL;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    rmq_cosock_t *s = st->data;
    if (nread == 0) return;
    if (nread == UV_ENOBUFS) {
        sock_break(s, "no memory");
        return;
    }
    if (s->idle) { /* a pooled connection: any data or end makes it unusable */
        uv_read_stop(st);
        s->reading = 0;
        s->broken = 1;
        return;
    }
    if (s->tls) {
        tls_on_read(s, nread, buf);
        return;
    }
    if (nread < 0) {
        uv_read_stop(st);
        s->reading = 0;
        if (nread == UV_EOF) {
            s->eof = 1;
            finish(s, OP_READ, "closed");
        } else {
            sock_break(s, uv_err_text((int)nread));
        }
        return;
    }
    s->rlen += (size_t)nread;
    uv_read_stop(st);
    s->reading = 0;
    finish(s, OP_READ, NULL);
}

/* Wait for more data (appended to the buffer). Returns the id, or -1 with *err ("closed" once
 * the peer closed and nothing more will come). */
RMQ_EXPORT int64_t rmq_cosock_read(rmq_cosock_t *s, double timeout_ms, const char **err)
{
    rmq_coloop_t *c = rmq__coloop_self();
    if (s->eof) {
        *err = "closed";
        return -1;
    }
    if (!s->connected || s->broken || !s->tcp_init) {
        *err = "closed";
        return -1;
    }
    if (s->id[OP_READ] || s->handshaking) {
        *err = "socket busy reading";
        return -1;
    }
    if (s->tls) { /* what the session holds already (it came with the handshake's last bytes) */
        int end = 0;
        size_t got = tls_drain(s, &end);
        if (end == -1) s->eof = 1;
        if (end == -2) s->broken = 1;
        if (got || end) {
            int64_t id = s->id[OP_READ] = new_id(c);
            finish(s, OP_READ, got ? NULL : "closed");
            return id;
        }
    }
    int rc = uv_read_start((uv_stream_t *)&s->tcp, on_alloc, on_read);
    if (rc) {
        *err = uv_err_text(rc);
        return -1;
    }
    s->reading = 1;
    s->id[OP_READ] = new_id(c);
    start_op_timer(s, OP_READ, timeout_ms);
    return s->id[OP_READ];
}

/* The result of the last operation op (0 connect, 1 send, 2 read): NULL = success. */
RMQ_EXPORT const char *rmq_cosock_err(rmq_cosock_t *s, int op)
{
    return s->err[op & 3];
}

/* The received bytes not yet taken: *data and the count. */
RMQ_EXPORT size_t rmq_cosock_buffered(rmq_cosock_t *s, const char **data)
{
    *data = s->rbuf + s->rhead;
    return s->rlen - s->rhead;
}

/* Take n received bytes off the front. */
RMQ_EXPORT void rmq_cosock_consume(rmq_cosock_t *s, size_t n)
{
    size_t have = s->rlen - s->rhead;
    s->rhead += n < have ? n : have;
}

/* Where pat (len plen) starts in the received bytes from offset from on, or -1. */
RMQ_EXPORT int64_t rmq_cosock_find(rmq_cosock_t *s, const char *pat, size_t plen, size_t from)
{
    size_t have = s->rlen - s->rhead;
    if (from >= have || plen == 0) return -1;
    const char *p = memmem(s->rbuf + s->rhead + from, have - from, pat, plen);
    return p ? (int64_t)(p - (s->rbuf + s->rhead)) : -1;
}

/* 1 while the socket is connected and usable (a pooled one: the peer neither closed it nor sent
 * anything meanwhile). */
RMQ_EXPORT int rmq_cosock_usable(rmq_cosock_t *s)
{
    return s->connected && !s->broken && !s->eof && s->tcp_init;
}

/* A connection goes into (idle = 1) or out of the keep-alive pool: while idle it watches for
 * the peer closing it. Returns 0, or -1 when it is not usable (or has unread data). */
RMQ_EXPORT int rmq_cosock_set_idle(rmq_cosock_t *s, int idle)
{
    if (!rmq_cosock_usable(s)) return -1;
    if (idle) {
        if (s->id[OP_READ] || s->id[OP_SEND] || s->rlen != s->rhead) return -1;
        s->idle = 1;
        if (uv_read_start((uv_stream_t *)&s->tcp, on_alloc, on_read)) return -1;
        s->reading = 1;
        return 0;
    }
    s->idle = 0;
    if (s->reading) uv_read_stop((uv_stream_t *)&s->tcp);
    s->reading = 0;
    /* The peer may have closed it (or sent something) since the loop last ran: look now. */
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&s->tcp, &fd) == 0) {
        char c;
        ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
            s->broken = 1;
            return -1;
        }
    }
    return 0;
}
