/*
 * test_remoting.c -- the remoting transport over real sockets on 127.0.0.1 (and ::1 when the
 * host has it), one loop driven by the test: a server and a client made with the transport,
 * and raw peers (plain uv_tcp sockets speaking bytes) for timeouts, oneway, dropped
 * connections, malformed frames and broker-initiated requests.
 *
 * Leak checking: run the binary of an RMQ_SANITIZE=1 build with ASAN_OPTIONS=detect_leaks=1.
 */
#include "base/codes.h"
#include "net/remoting.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test_loop.h"

/* ---- response collector ---------------------------------------------------------------------- */

typedef struct result {
    int done;
    int calls;
    int err;
    int code;
    int serialize;
    int32_t opaque;
    char remark[128];
    char errmsg[300];
    char echo[64];
    rmq_rbuf_t *frame; /* kept: the body stays valid after the callback */
    const char *body;
    size_t body_len;
} result_t;

static void on_resp(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    result_t *r = ud;
    r->calls++;
    r->done = 1;
    r->err = err;
    snprintf(r->errmsg, sizeof r->errmsg, "%s", errmsg ? errmsg : "(null)");
    if (err == 0) {
        r->code = resp->code;
        r->serialize = resp->serialize;
        r->opaque = resp->opaque;
        snprintf(r->remark, sizeof r->remark, "%s", resp->remark ? resp->remark : "");
        const char *e = rmq__cmd_ext(resp, "echo");
        snprintf(r->echo, sizeof r->echo, "%s", e ? e : "");
        if (resp->frame) r->frame = rmq__rbuf_keep(resp->frame);
        r->body = resp->body;
        r->body_len = resp->body_len;
    } else {
        CHECK(resp == NULL);
    }
}

static void result_clear(result_t *r)
{
    if (r->frame) rmq__rbuf_release(r->frame);
    memset(r, 0, sizeof(*r));
}

/* ---- a transport server: echo handlers ------------------------------------------------------- */

typedef struct server {
    rmq_remoting_t *t;
    int port;
    rmq_conn_t *last; /* kept: the last accepted connection */
    int opened, closed, requests;
    int last_close_err;
    int written_calls;
} server_t;

/* HEART_BEAT: answer SUCCESS, ext echo = ext "i", body copied back. */
static void h_echo(rmq_conn_t *c, rmq_cmd_t *req, void *ud)
{
    server_t *s = ud;
    rmq_cmd_t resp;
    s->requests++;
    rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, "ok");
    const char *i = rmq__cmd_ext(req, "i");
    if (i) rmq__cmd_set_ext(&resp, "echo", i);
    resp.body = req->body;
    resp.body_len = req->body_len;
    CHECK(rmq__conn_reply(c, &resp) == 0);
    rmq__cmd_free(&resp);
}

/* Zero-copy: the request frame is lent as the response body until written. */
static void on_written_frame(void *ud, int status)
{
    CHECK(status == 0);
    rmq__rbuf_release(ud);
}

static void h_echo_lent(rmq_conn_t *c, rmq_cmd_t *req, void *ud)
{
    server_t *s = ud;
    rmq_cmd_t resp;
    s->requests++;
    rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, NULL);
    resp.body = req->body;
    resp.body_len = req->body_len;
    rmq_rbuf_t *f = rmq__rbuf_keep(req->frame);
    if (rmq__conn_reply_ex(c, &resp, NULL, 0, on_written_frame, f) != 0) rmq__rbuf_release(f);
    rmq__cmd_free(&resp);
}

/* PULL_MESSAGE: 32 x 1 KiB "messages" written from caller buffers, one writev. */
static char pull_msgs[32][1024];

static void on_written_count(void *ud, int status)
{
    server_t *s = ud;
    CHECK(status == 0);
    s->written_calls++;
}

static void h_pull(rmq_conn_t *c, rmq_cmd_t *req, void *ud)
{
    rmq_cmd_t resp;
    uv_buf_t bufs[32];
    rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, "FOUND");
    for (int i = 0; i < 32; i++)
        bufs[i] = uv_buf_init(pull_msgs[i], sizeof pull_msgs[i]);
    if (rmq__cmd_ext_bool(req, "copy"))
        CHECK(rmq__conn_reply_ex(c, &resp, bufs, 32, NULL, NULL) == 0);
    else
        CHECK(rmq__conn_reply_ex(c, &resp, bufs, 32, on_written_count, ud) == 0);
    rmq__cmd_free(&resp);
}

static void srv_open(rmq_conn_t *c, void *ud)
{
    server_t *s = ud;
    s->opened++;
    CHECK(rmq__conn_is_server(c));
    CHECK(rmq__conn_state(c) == RMQ_CONN_OPEN);
    if (s->last) rmq__conn_release(s->last);
    s->last = rmq__conn_keep(c);
}

static void srv_close(rmq_conn_t *c, int err, const char *why, void *ud)
{
    server_t *s = ud;
    s->closed++;
    s->last_close_err = err;
    CHECK(why != NULL);
}

static void server_start(server_t *s, const char *host, size_t max_frame)
{
    char err[200];
    memset(s, 0, sizeof(*s));
    rmq_remoting_opts_t o = {.loop = loop,
                             .name = "test-server",
                             .max_frame = max_frame,
                             .on_open = srv_open,
                             .on_close = srv_close,
                             .ud = s};
    CHECK(rmq__remoting_new(&o, &s->t, err, sizeof err) == 0);
    rmq__remoting_set_handler(s->t, RMQ_REQ_HEART_BEAT, h_echo, s);
    rmq__remoting_set_handler(s->t, RMQ_REQ_SEND_MESSAGE, h_echo_lent, s);
    rmq__remoting_set_handler(s->t, RMQ_REQ_PULL_MESSAGE, h_pull, s);
    int rc = rmq__remoting_listen(s->t, host, 0, err, sizeof err);
    if (rc) fprintf(stderr, "listen: %s\n", err);
    CHECK(rc == 0);
    s->port = rmq__remoting_port(s->t);
    CHECK(s->port > 0);
}

static int destroyed_count;
static void on_destroyed(void *ud)
{
    (*(int *)ud)++;
    destroyed_count++;
}

static void transport_destroy(rmq_remoting_t *t)
{
    int done = 0;
    rmq__remoting_destroy(t, on_destroyed, &done);
    WAIT_UNTIL(done == 1, 2000);
}

static void server_stop(server_t *s)
{
    if (s->last) rmq__conn_release(s->last);
    s->last = NULL;
    transport_destroy(s->t);
}

/* ---- client transport ------------------------------------------------------------------------ */

typedef struct client {
    rmq_remoting_t *t;
    int opened, closed;
    int last_close_err;
    char last_close_why[300];
    int notified; /* NOTIFY_CONSUMER_IDS_CHANGED count */
    int notify_flag;
    char notify_group[64];
    /* asynchronous answer to GET_CONSUMER_RUNNING_INFO */
    rmq_conn_t *pending_conn;
    rmq_cmd_t pending_resp;
    int have_pending_resp;
} client_t;

static void cli_open(rmq_conn_t *c, void *ud)
{
    client_t *cl = ud;
    CHECK(!rmq__conn_is_server(c));
    cl->opened++;
}

static void cli_close(rmq_conn_t *c, int err, const char *why, void *ud)
{
    client_t *cl = ud;
    cl->closed++;
    cl->last_close_err = err;
    snprintf(cl->last_close_why, sizeof cl->last_close_why, "%s", why);
}

static void h_notify(rmq_conn_t *c, rmq_cmd_t *req, void *ud)
{
    client_t *cl = ud;
    cl->notified++;
    cl->notify_flag = req->flag;
    const char *g = rmq__cmd_ext(req, "consumerGroup");
    snprintf(cl->notify_group, sizeof cl->notify_group, "%s", g ? g : "");
}

/* Answered later, from the test body (the handler keeps the connection). */
static void h_running_info(rmq_conn_t *c, rmq_cmd_t *req, void *ud)
{
    client_t *cl = ud;
    CHECK(!cl->have_pending_resp);
    rmq__cmd_init_response(&cl->pending_resp, req, RMQ_RESP_SUCCESS, NULL);
    cl->pending_resp.body = "{\"properties\":{}}";
    cl->pending_resp.body_len = strlen(cl->pending_resp.body);
    cl->pending_conn = rmq__conn_keep(c);
    cl->have_pending_resp = 1;
}

static void client_answer_pending(client_t *cl)
{
    CHECK(cl->have_pending_resp);
    if (!cl->have_pending_resp) return;
    CHECK(rmq__conn_reply(cl->pending_conn, &cl->pending_resp) == 0);
    rmq__cmd_free(&cl->pending_resp);
    rmq__conn_release(cl->pending_conn);
    cl->pending_conn = NULL;
    cl->have_pending_resp = 0;
}

static void client_start_opts(client_t *cl, rmq_remoting_opts_t *o)
{
    char err[200];
    memset(cl, 0, sizeof(*cl));
    o->loop = loop;
    o->name = "test-client";
    o->on_open = cli_open;
    o->on_close = cli_close;
    o->ud = cl;
    CHECK(rmq__remoting_new(o, &cl->t, err, sizeof err) == 0);
    rmq__remoting_set_handler(cl->t, RMQ_REQ_NOTIFY_CONSUMER_IDS_CHANGED, h_notify, cl);
    rmq__remoting_set_handler(cl->t, RMQ_REQ_GET_CONSUMER_RUNNING_INFO, h_running_info, cl);
}

static void client_start(client_t *cl)
{
    rmq_remoting_opts_t o;
    memset(&o, 0, sizeof o);
    client_start_opts(cl, &o);
}

static void client_stop(client_t *cl)
{
    if (cl->have_pending_resp) {
        rmq__cmd_free(&cl->pending_resp);
        rmq__conn_release(cl->pending_conn);
        cl->have_pending_resp = 0;
    }
    transport_destroy(cl->t);
}

static int send_echo(rmq_remoting_t *t, const char *addr, int serialize, int i, const char *body,
                     size_t body_len, int64_t timeout, result_t *r)
{
    rmq_cmd_t req;
    rmq__cmd_init(&req, RMQ_REQ_HEART_BEAT, serialize);
    rmq__cmd_set_ext_i64(&req, "i", i);
    req.body = body;
    req.body_len = body_len;
    int rc = rmq__remoting_request(t, addr, &req, timeout, on_resp, r);
    rmq__cmd_free(&req);
    return rc;
}

/* ---- raw peer: a plain uv_tcp server speaking bytes ------------------------------------------ */

typedef struct raw_peer {
    uv_tcp_t listener;
    int port;
    uv_tcp_t *conn; /* the current accepted connection, or NULL */
    int accepted;
    int eof;    /* the current connection was closed by the other side */
    int answer; /* answer requests with SUCCESS (else stay silent) */
    rmq_framer_t framer;
    int nframes;
    rmq_cmd_t last; /* last command received (decoded) */
    int have_last;
    int handles;
} raw_peer_t;

static void raw_handle_closed(uv_handle_t *h)
{
    raw_peer_t *p = h->data;
    p->handles--;
    if (h != (uv_handle_t *)&p->listener) free(h);
}

static void raw_write_done(uv_write_t *w, int status)
{
    free(w->data);
    free(w);
}

/* Write bytes on a uv stream (copied). */
static void raw_write(uv_stream_t *s, const void *data, size_t len)
{
    uv_write_t *w = malloc(sizeof(*w));
    char *copy = malloc(len);
    memcpy(copy, data, len);
    w->data = copy;
    uv_buf_t b = uv_buf_init(copy, (unsigned)len);
    CHECK(uv_write(w, s, &b, 1, raw_write_done) == 0);
}

static void raw_send_cmd(uv_stream_t *s, const rmq_cmd_t *c)
{
    rmq_buf_t b;
    rmq__buf_init(&b);
    CHECK(rmq__cmd_encode(c, &b) == 0);
    raw_write(s, b.data, b.len);
    rmq__buf_free(&b);
}

static void raw_on_frame(void *ud, rmq_rbuf_t *frame)
{
    raw_peer_t *p = ud;
    char err[200];
    rmq_cmd_t c;
    int rc = rmq__cmd_decode(frame, &c, err, sizeof err);
    rmq__rbuf_release(frame);
    CHECK(rc == 0);
    if (rc) return;
    p->nframes++;
    if (p->answer && !(c.flag & (RMQ_FLAG_ONEWAY | RMQ_FLAG_RESPONSE))) {
        rmq_cmd_t resp;
        rmq__cmd_init_response(&resp, &c, RMQ_RESP_SUCCESS, "raw");
        raw_send_cmd((uv_stream_t *)p->conn, &resp);
        rmq__cmd_free(&resp);
    }
    if (p->have_last) rmq__cmd_free(&p->last);
    p->last = c;
    p->have_last = 1;
}

static void raw_alloc(uv_handle_t *h, size_t sz, uv_buf_t *buf)
{
    static char b[65536];
    buf->base = b;
    buf->len = sizeof b;
}

static void raw_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    raw_peer_t *p = s->data;
    char err[200];
    if (n > 0) {
        CHECK(rmq__framer_feed(&p->framer, buf->base, (size_t)n, raw_on_frame, p, err,
                               sizeof err) == 0);
    } else if (n < 0) {
        if ((uv_tcp_t *)s == p->conn) {
            p->eof = 1;
            p->conn = NULL;
        }
        uv_close((uv_handle_t *)s, raw_handle_closed);
    }
}

/* Drop the current accepted connection (the transport sees the peer close it). */
static void raw_drop(raw_peer_t *p)
{
    if (!p->conn) return;
    uv_close((uv_handle_t *)p->conn, raw_handle_closed);
    p->conn = NULL;
}

static void raw_on_conn(uv_stream_t *server, int status)
{
    raw_peer_t *p = server->data;
    CHECK(status == 0);
    uv_tcp_t *c = malloc(sizeof(*c));
    uv_tcp_init(loop, c);
    c->data = p;
    p->handles++;
    CHECK(uv_accept(server, (uv_stream_t *)c) == 0);
    raw_drop(p); /* one connection at a time */
    p->conn = c;
    p->eof = 0;
    p->accepted++;
    rmq__framer_reset(&p->framer);
    uv_read_start((uv_stream_t *)c, raw_alloc, raw_read);
}

static void raw_start_port(raw_peer_t *p, int answer, int port)
{
    struct sockaddr_in sa;
    memset(p, 0, sizeof(*p));
    p->answer = answer;
    rmq__framer_init(&p->framer, 0);
    uv_tcp_init(loop, &p->listener);
    p->listener.data = p;
    p->handles = 1;
    uv_ip4_addr("127.0.0.1", port, &sa);
    CHECK(uv_tcp_bind(&p->listener, (struct sockaddr *)&sa, 0) == 0);
    CHECK(uv_listen((uv_stream_t *)&p->listener, 16, raw_on_conn) == 0);
    int len = sizeof sa;
    uv_tcp_getsockname(&p->listener, (struct sockaddr *)&sa, &len);
    p->port = ntohs(sa.sin_port);
}

static void raw_start(raw_peer_t *p, int answer)
{
    raw_start_port(p, answer, 0);
}

static void raw_stop(raw_peer_t *p)
{
    raw_drop(p);
    uv_close((uv_handle_t *)&p->listener, raw_handle_closed);
    WAIT_UNTIL(p->handles == 0, 2000);
    rmq__framer_reset(&p->framer);
    if (p->have_last) rmq__cmd_free(&p->last);
    p->have_last = 0;
}

/* ---- raw client: connects to a transport server and writes bytes ----------------------------- */

typedef struct raw_client {
    uv_tcp_t tcp;
    uv_connect_t creq;
    int connected, eof, closed;
    size_t got; /* bytes received */
} raw_client_t;

static void rc_closed(uv_handle_t *h)
{
    ((raw_client_t *)h->data)->closed = 1;
}

static void rc_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    raw_client_t *r = s->data;
    if (n > 0) r->got += (size_t)n;
    if (n < 0) {
        r->eof = 1;
        uv_close((uv_handle_t *)s, rc_closed);
    }
}

static void rc_connected(uv_connect_t *req, int status)
{
    raw_client_t *r = req->data;
    CHECK(status == 0);
    r->connected = 1;
    uv_read_start((uv_stream_t *)&r->tcp, raw_alloc, rc_read);
}

static void raw_client_connect(raw_client_t *r, int port)
{
    struct sockaddr_in sa;
    memset(r, 0, sizeof(*r));
    uv_tcp_init(loop, &r->tcp);
    r->tcp.data = r;
    r->creq.data = r;
    uv_ip4_addr("127.0.0.1", port, &sa);
    CHECK(uv_tcp_connect(&r->creq, &r->tcp, (struct sockaddr *)&sa, rc_connected) == 0);
    WAIT_UNTIL(r->connected, 2000);
}

static void raw_client_close(raw_client_t *r)
{
    if (!r->eof && !uv_is_closing((uv_handle_t *)&r->tcp))
        uv_close((uv_handle_t *)&r->tcp, rc_closed);
    WAIT_UNTIL(r->closed, 2000);
}

static void put32(unsigned char *p, uint32_t v)
{
    rmq__wr32(p, v);
}

/* ================================================================================================
 */

static void addr_of(char *dst, size_t n, const char *host, int port)
{
    if (strchr(host, ':'))
        snprintf(dst, n, "[%s]:%d", host, port);
    else
        snprintf(dst, n, "%s:%d", host, port);
}

/* A server on 127.0.0.1, a client, and the server's address in addr. */
static void server_and_client(server_t *s, client_t *cl, char *addr, size_t n)
{
    server_start(s, "127.0.0.1", 0);
    client_start(cl);
    addr_of(addr, n, "127.0.0.1", s->port);
}

/* A raw peer on 127.0.0.1 (answering or not), a client, and the peer's address in addr. */
static void raw_and_client(raw_peer_t *p, int answer, client_t *cl, char *addr, size_t n)
{
    raw_start(p, answer);
    client_start(cl);
    addr_of(addr, n, "127.0.0.1", p->port);
}

static void test_addr_split(void)
{
    char h[64];
    int port = 0;
    CHECK(rmq__addr_split("127.0.0.1:10911", h, sizeof h, &port) == 0);
    CHECK(strcmp(h, "127.0.0.1") == 0 && port == 10911);
    CHECK(rmq__addr_split("[::1]:9876", h, sizeof h, &port) == 0);
    CHECK(strcmp(h, "::1") == 0 && port == 9876);
    CHECK(rmq__addr_split("broker-a:9", h, sizeof h, &port) == 0 && strcmp(h, "broker-a") == 0);
    CHECK(rmq__addr_split("127.0.0.1", h, sizeof h, &port) == RMQ_ERR_INVALID);
    CHECK(rmq__addr_split("127.0.0.1:", h, sizeof h, &port) == RMQ_ERR_INVALID);
    CHECK(rmq__addr_split("127.0.0.1:0", h, sizeof h, &port) == RMQ_ERR_INVALID);
    CHECK(rmq__addr_split("127.0.0.1:70000", h, sizeof h, &port) == RMQ_ERR_INVALID);
    CHECK(rmq__addr_split("[::1]9876", h, sizeof h, &port) == RMQ_ERR_INVALID);
    CHECK(rmq__addr_split(":9876", h, sizeof h, &port) == RMQ_ERR_INVALID);
    CHECK(strcmp(rmq__conn_state_name(RMQ_CONN_OPEN), "OPEN") == 0);
    CHECK(strcmp(rmq__conn_state_name(99), "UNKNOWN") == 0);
}

/* Requests and responses between two transports, both serialize types, over host. */
static void test_request_response(const char *host)
{
    server_t s;
    client_t cl;
    result_t r[2];
    char addr[80];
    memset(r, 0, sizeof r);
    server_start(&s, host, 0);
    client_start(&cl);
    addr_of(addr, sizeof addr, host, s.port);

    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, 7, "hello", 5, 3000, &r[0]) == 0);
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_ROCKETMQ, 8, "world!", 6, 3000, &r[1]) == 0);
    CHECK(r[0].calls == 0); /* never from inside the call */
    CHECK(rmq__remoting_pending(cl.t) == 2);
    /* Both went on one connection, queued while it connects. */
    rmq_conn_t *c = rmq__remoting_find_conn(cl.t, addr);
    CHECK(c != NULL && rmq__conn_state(c) == RMQ_CONN_CONNECTING);
    CHECK(c && strcmp(rmq__conn_peer(c), addr) == 0);
    WAIT_UNTIL(r[0].done && r[1].done, 3000);
    CHECK(r[0].err == 0 && r[0].code == RMQ_RESP_SUCCESS && r[0].serialize == RMQ_SERIALIZE_JSON);
    CHECK(strcmp(r[0].echo, "7") == 0 && strcmp(r[0].remark, "ok") == 0);
    CHECK(r[0].body_len == 5 && memcmp(r[0].body, "hello", 5) == 0);
    CHECK(r[1].err == 0 && r[1].serialize == RMQ_SERIALIZE_ROCKETMQ);
    CHECK(strcmp(r[1].echo, "8") == 0 && r[1].body_len == 6 && memcmp(r[1].body, "world!", 6) == 0);
    CHECK(r[0].opaque != r[1].opaque);
    CHECK(cl.opened == 1 && s.opened == 1 && s.requests == 2);
    CHECK(rmq__remoting_pending(cl.t) == 0);
    rmq_remoting_stats_t cs, ss;
    rmq__remoting_stats(cl.t, &cs);
    rmq__remoting_stats(s.t, &ss);
    CHECK(cs.requests_sent == 2 && cs.responses_recv == 2 && cs.connects == 1 && cs.conns == 1);
    CHECK(cs.pending == 0 && cs.timeouts == 0 && cs.closes == 0);
    CHECK(ss.accepts == 1 && ss.requests_recv == 2 && ss.conns == 1);
    CHECK(cs.bytes_out == ss.bytes_in && ss.bytes_out == cs.bytes_in && cs.bytes_in > 0);

    /* The zero-copy response with 32 lent buffers (the broker's PULL response). */
    result_t pr;
    memset(&pr, 0, sizeof pr);
    for (int i = 0; i < 32; i++)
        memset(pull_msgs[i], 'a' + i % 26, sizeof pull_msgs[i]);
    rmq_cmd_t req;
    rmq__cmd_init(&req, RMQ_REQ_PULL_MESSAGE, RMQ_SERIALIZE_ROCKETMQ);
    rmq__cmd_set_ext(&req, "topic", "T");
    CHECK(rmq__remoting_request(cl.t, addr, &req, 3000, on_resp, &pr) == 0);
    rmq__cmd_free(&req);
    WAIT_UNTIL(pr.done, 3000);
    CHECK(pr.err == 0 && pr.body_len == 32 * 1024 && s.written_calls == 1);
    int same = pr.body_len == 32 * 1024;
    for (int i = 0; same && i < 32; i++)
        same = memcmp(pr.body + i * 1024, pull_msgs[i], 1024) == 0;
    CHECK(same);
    CHECK(strcmp(pr.remark, "FOUND") == 0);
    result_clear(&pr);
    /* The same with the extra buffers copied (no written callback). */
    rmq__cmd_init(&req, RMQ_REQ_PULL_MESSAGE, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext_bool(&req, "copy", 1);
    CHECK(rmq__remoting_request(cl.t, addr, &req, 3000, on_resp, &pr) == 0);
    rmq__cmd_free(&req);
    WAIT_UNTIL(pr.done, 3000);
    CHECK(pr.err == 0 && pr.body_len == 32 * 1024 && s.written_calls == 1);
    same = pr.body_len == 32 * 1024;
    for (int i = 0; same && i < 32; i++)
        same = memcmp(pr.body + i * 1024, pull_msgs[i], 1024) == 0;
    CHECK(same);
    result_clear(&pr);

    /* Bad arguments fail synchronously; the callback never runs. */
    result_t bad;
    memset(&bad, 0, sizeof bad);
    CHECK(send_echo(cl.t, "nonsense", RMQ_SERIALIZE_JSON, 1, NULL, 0, 1000, &bad) ==
          RMQ_ERR_INVALID);
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, 1, NULL, 0, 0, &bad) == RMQ_ERR_INVALID);
    CHECK(send_echo(cl.t, NULL, RMQ_SERIALIZE_JSON, 1, NULL, 0, 1000, &bad) == RMQ_ERR_NOT_FOUND);
    run_for(20);
    CHECK(bad.calls == 0);

    client_stop(&cl);
    WAIT_UNTIL(s.closed == 1, 2000); /* the server sees the client go */
    server_stop(&s);
    for (int i = 0; i < 2; i++)
        result_clear(&r[i]);
}

static int have_ipv6(void)
{
    uv_tcp_t t;
    struct sockaddr_in6 sa;
    uv_ip6_addr("::1", 0, &sa);
    uv_tcp_init(loop, &t);
    int ok = uv_tcp_bind(&t, (struct sockaddr *)&sa, 0) == 0;
    int closed = 0;
    t.data = &closed;
    uv_close((uv_handle_t *)&t, NULL);
    run_for(1);
    return ok;
}

/* A peer that never answers: RMQ_ERR_TIMEOUT; a SYNC timeout closes the channel. */
static void test_timeout(void)
{
    raw_peer_t p;
    client_t cl;
    result_t r = {0}, r2 = {0};
    char addr[64];
    raw_and_client(&p, 0, &cl, addr, sizeof addr);

    /* An asynchronous request: timeout, connection stays. */
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, 1, NULL, 0, 150, &r) == 0);
    WAIT_UNTIL(r.done, 3000);
    CHECK(r.err == RMQ_ERR_TIMEOUT && r.calls == 1);
    CHECK(strstr(r.errmsg, "timed out") != NULL && strstr(r.errmsg, addr) != NULL);
    CHECK(p.nframes == 1); /* the peer did receive it */
    rmq_conn_t *c = rmq__remoting_find_conn(cl.t, addr);
    CHECK(c && rmq__conn_state(c) == RMQ_CONN_OPEN);
    CHECK(rmq__remoting_pending(cl.t) == 0);

    /* A synchronous request: the timeout closes the connection (clientCloseSocketIfTimeout),
     * and another request pending on it fails with RMQ_ERR_TRANSPORT. */
    rmq_cmd_t req;
    rmq__cmd_init(&req, RMQ_REQ_HEART_BEAT, RMQ_SERIALIZE_JSON);
    CHECK(rmq__remoting_request_ex(cl.t, addr, &req, 150, RMQ_REQF_SYNC, on_resp, &r2) == 0);
    rmq__cmd_free(&req);
    result_t r3;
    memset(&r3, 0, sizeof r3);
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, 3, NULL, 0, 60000, &r3) == 0);
    WAIT_UNTIL(r2.done && r3.done, 3000);
    CHECK(r2.err == RMQ_ERR_TIMEOUT);
    CHECK(r3.err == RMQ_ERR_TRANSPORT && strstr(r3.errmsg, "closed") != NULL);
    CHECK(cl.closed == 1 && cl.last_close_err == RMQ_ERR_TIMEOUT);
    WAIT_UNTIL(p.eof, 2000);
    CHECK(rmq__remoting_find_conn(cl.t, addr) == NULL);

    client_stop(&cl);
    raw_stop(&p);
    result_clear(&r);
    result_clear(&r2);
    result_clear(&r3);
}

/* Oneway: returns at once with nothing pending; the peer gets the ONEWAY flag. */
static void test_oneway(void)
{
    raw_peer_t p;
    client_t cl;
    char addr[64];
    raw_and_client(&p, 1, &cl, addr, sizeof addr);
    rmq_cmd_t req;
    rmq__cmd_init(&req, RMQ_REQ_UPDATE_CONSUMER_OFFSET, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext(&req, "consumerGroup", "G");
    CHECK(rmq__remoting_oneway(cl.t, addr, &req) == 0);
    CHECK(rmq__remoting_request_ex(cl.t, addr, &req, 0, RMQ_REQF_ONEWAY, on_resp, NULL) ==
          RMQ_ERR_INVALID); /* no callback for oneway */
    rmq__cmd_free(&req);
    CHECK(rmq__remoting_pending(cl.t) == 0);
    WAIT_UNTIL(p.nframes == 1, 3000);
    CHECK(p.have_last && p.last.code == RMQ_REQ_UPDATE_CONSUMER_OFFSET);
    CHECK(p.have_last && p.last.flag == RMQ_FLAG_ONEWAY);
    CHECK(p.have_last && rmq__cmd_ext(&p.last, "consumerGroup") &&
          strcmp(rmq__cmd_ext(&p.last, "consumerGroup"), "G") == 0);
    client_stop(&cl);
    raw_stop(&p);
}

/* The peer drops the connection: pending requests fail, the next request reconnects. */
static void test_drop_reconnect(void)
{
    raw_peer_t p;
    client_t cl;
    result_t r[3], ok;
    char addr[64];
    memset(r, 0, sizeof r);
    memset(&ok, 0, sizeof ok);
    raw_and_client(&p, 0, &cl, addr, sizeof addr);
    for (int i = 0; i < 3; i++)
        CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, i, NULL, 0, 60000, &r[i]) == 0);
    WAIT_UNTIL(p.nframes == 3, 3000);
    raw_drop(&p);
    WAIT_UNTIL(r[0].done && r[1].done && r[2].done, 3000);
    for (int i = 0; i < 3; i++) {
        CHECK(r[i].err == RMQ_ERR_TRANSPORT && r[i].calls == 1);
        CHECK(strstr(r[i].errmsg, addr) != NULL);
    }
    CHECK(cl.closed == 1 && cl.last_close_err == RMQ_ERR_TRANSPORT);
    p.answer = 1;
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_ROCKETMQ, 9, NULL, 0, 3000, &ok) == 0);
    WAIT_UNTIL(ok.done, 3000);
    CHECK(ok.err == 0 && ok.code == RMQ_RESP_SUCCESS && strcmp(ok.remark, "raw") == 0);
    CHECK(p.accepted == 2 && cl.opened == 2);

    /* The peer receives the serialize type that was asked for. */
    CHECK(p.have_last && p.last.serialize == RMQ_SERIALIZE_ROCKETMQ);

    client_stop(&cl);
    raw_stop(&p);
    for (int i = 0; i < 3; i++)
        result_clear(&r[i]);
    result_clear(&ok);
}

/* Nothing listens: the connect fails, the request fails with RMQ_ERR_TRANSPORT; the next
 * request waits out the backoff and fails again; the name-server list fails over. */
static void test_connect_fail_and_namesrv(void)
{
    raw_peer_t p, dead;
    client_t cl;
    result_t r, r2;
    char addr[64], list[160], good[64], err[200];
    memset(&r, 0, sizeof r);
    memset(&r2, 0, sizeof r2);
    raw_start(&dead, 0);
    int dead_port = dead.port;
    raw_stop(&dead); /* its port is now closed */
    raw_start(&p, 1);
    client_start(&cl);
    addr_of(addr, sizeof addr, "127.0.0.1", dead_port);
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, 1, NULL, 0, 3000, &r) == 0);
    WAIT_UNTIL(r.done, 3000);
    CHECK(r.err == RMQ_ERR_TRANSPORT && strstr(r.errmsg, "connect") != NULL);
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, 2, NULL, 0, 3000, &r2) == 0);
    rmq_conn_t *c = rmq__remoting_find_conn(cl.t, addr);
    CHECK(c && rmq__conn_state(c) == RMQ_CONN_WAITING); /* in backoff: queued */
    WAIT_UNTIL(r2.done, 3000);
    CHECK(r2.err == RMQ_ERR_TRANSPORT);

    CHECK(rmq__remoting_set_namesrv(cl.t, "bad", err, sizeof err) == RMQ_ERR_CONFIG);
    CHECK(strstr(err, "bad") != NULL);
    CHECK(rmq__remoting_namesrv(cl.t) == NULL);
    addr_of(good, sizeof good, "127.0.0.1", p.port);
    snprintf(list, sizeof list, "http://%s;;%s", addr, good);
    CHECK(rmq__remoting_set_namesrv(cl.t, list, err, sizeof err) == 0);
    int ok = 0;
    for (int attempt = 0; attempt < 3 && !ok; attempt++) {
        result_t n;
        memset(&n, 0, sizeof n);
        rmq_cmd_t req;
        rmq__cmd_init(&req, RMQ_REQ_GET_ROUTEINFO_BY_TOPIC, RMQ_SERIALIZE_JSON);
        CHECK(rmq__remoting_request(cl.t, NULL, &req, 3000, on_resp, &n) == 0);
        rmq__cmd_free(&req);
        WAIT_UNTIL(n.done, 3000);
        ok = n.err == 0;
        result_clear(&n);
    }
    CHECK(ok);
    CHECK(rmq__remoting_namesrv(cl.t) && strcmp(rmq__remoting_namesrv(cl.t), good) == 0);
    client_stop(&cl);
    raw_stop(&p);
    result_clear(&r);
    result_clear(&r2);
}

/* Connect timeout: a listener that never accepts, its backlog filled so SYNs go unanswered. */
typedef struct probe {
    uv_tcp_t tcp;
    uv_connect_t req;
    int done, closed;
} probe_t;

static void probe_connected(uv_connect_t *req, int status)
{
    ((probe_t *)req->data)->done = 1;
}

static void probe_closed(uv_handle_t *h)
{
    ((probe_t *)h->data)->closed = 1;
}

static void test_connect_timeout(void)
{
    enum { NPROBE = 8 };
    probe_t pr[NPROBE];
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(fd, 0) == 0);
    getsockname(fd, (struct sockaddr *)&sa, &len);
    int port = ntohs(sa.sin_port), n = 0, hanging = 0;
    for (; n < NPROBE && !hanging; n++) {
        memset(&pr[n], 0, sizeof pr[n]);
        uv_tcp_init(loop, &pr[n].tcp);
        pr[n].tcp.data = pr[n].req.data = &pr[n];
        uv_tcp_connect(&pr[n].req, &pr[n].tcp, (struct sockaddr *)&sa, probe_connected);
        int64_t dl = rmq__mono_ms() + 300;
        uv_timer_start(&guard, on_guard, 10, 10);
        while (!pr[n].done && rmq__mono_ms() < dl)
            uv_run(loop, UV_RUN_ONCE);
        uv_timer_stop(&guard);
        hanging = !pr[n].done;
    }
    if (hanging) {
        client_t cl;
        result_t r = {0};
        char addr[64];
        rmq_remoting_opts_t o = {.connect_timeout_ms = 200};
        client_start_opts(&cl, &o);
        addr_of(addr, sizeof addr, "127.0.0.1", port);
        CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, 1, NULL, 0, 60000, &r) == 0);
        WAIT_UNTIL(r.done, 5000);
        CHECK(r.err == RMQ_ERR_TRANSPORT && strstr(r.errmsg, "timed out") != NULL);
        CHECK(strstr(cl.last_close_why, "connect") != NULL);
        client_stop(&cl);
        result_clear(&r);
    } else {
        fprintf(stderr, "test_remoting: connects to a full backlog complete here, "
                        "connect-timeout case skipped\n");
    }
    for (int i = 0; i < n; i++)
        uv_close((uv_handle_t *)&pr[i].tcp, probe_closed);
    for (int i = 0; i < n; i++)
        WAIT_UNTIL(pr[i].closed, 2000);
    close(fd);
}

/* A request that expires while its connection waits out the backoff is never sent late. */
static void test_expired_before_connect(void)
{
    raw_peer_t p;
    client_t cl;
    result_t r1, r2, r3;
    char addr[64];
    memset(&r1, 0, sizeof r1);
    memset(&r2, 0, sizeof r2);
    memset(&r3, 0, sizeof r3);
    raw_start(&p, 1);
    int port = p.port;
    raw_stop(&p);
    rmq_remoting_opts_t o = {.reconnect_min_ms = 300};
    client_start_opts(&cl, &o);
    addr_of(addr, sizeof addr, "127.0.0.1", port);
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, 1, NULL, 0, 3000, &r1) == 0);
    WAIT_UNTIL(r1.done, 3000);
    CHECK(r1.err == RMQ_ERR_TRANSPORT);
    raw_start_port(&p, 1, port);
    CHECK(p.port == port);
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, 2, NULL, 0, 50, &r2) == 0);
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, 3, NULL, 0, 5000, &r3) == 0);
    WAIT_UNTIL(r3.done, 5000);
    CHECK(r2.done && r2.err == RMQ_ERR_TIMEOUT && strstr(r2.errmsg, "WAITING") != NULL);
    CHECK(r3.err == 0 && strcmp(r3.remark, "raw") == 0);
    CHECK(p.nframes == 1 && p.have_last && strcmp(rmq__cmd_ext(&p.last, "i"), "3") == 0);
    client_stop(&cl);
    raw_stop(&p);
    result_clear(&r1);
    result_clear(&r2);
    result_clear(&r3);
}

/* Host names are resolved asynchronously before each connect. */
static void test_host_name(void)
{
    server_t s;
    client_t cl;
    result_t r = {0}, bad = {0};
    char addr[64];
    server_start(&s, "127.0.0.1", 0);
    client_start(&cl);
    snprintf(addr, sizeof addr, "localhost:%d", s.port);
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, 5, NULL, 0, 5000, &r) == 0);
    rmq_conn_t *c = rmq__remoting_find_conn(cl.t, addr);
    CHECK(c && rmq__conn_state(c) == RMQ_CONN_CONNECTING);
    WAIT_UNTIL(r.done, 5000);
    CHECK(r.err == 0 && strcmp(r.echo, "5") == 0);
    /* A name that does not resolve fails the request, never the call. */
    CHECK(send_echo(cl.t, "no-such-host.invalid:9876", RMQ_SERIALIZE_JSON, 6, NULL, 0, 20000,
                    &bad) == 0);
    WAIT_UNTIL(bad.done, 20000);
    CHECK(bad.err == RMQ_ERR_TRANSPORT);
    /* Destroy while a lookup is in flight: the close callback waits for it. */
    result_t inflight;
    memset(&inflight, 0, sizeof inflight);
    CHECK(send_echo(cl.t, "no-such-host-2.invalid:9876", RMQ_SERIALIZE_JSON, 7, NULL, 0, 20000,
                    &inflight) == 0);
    client_stop(&cl);
    CHECK(inflight.done && inflight.err == RMQ_ERR_DESTROYED);
    server_stop(&s);
    result_clear(&r);
    result_clear(&bad);
    result_clear(&inflight);
}

/* Idle connections close after idle_timeout_ms with no reads and writes. */
static void test_idle_close(void)
{
    server_t s;
    client_t cl;
    result_t r;
    char addr[64];
    memset(&r, 0, sizeof r);
    server_start(&s, "127.0.0.1", 0);
    rmq_remoting_opts_t o;
    memset(&o, 0, sizeof o);
    o.idle_timeout_ms = 200;
    o.connect_timeout_ms = 30000; /* no other deadline near: the idle check arms its own */
    client_start_opts(&cl, &o);
    addr_of(addr, sizeof addr, "127.0.0.1", s.port);
    /* A long-timeout request: the idle check must not wait for its deadline. */
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, 1, NULL, 0, 60000, &r) == 0);
    WAIT_UNTIL(r.done, 3000);
    CHECK(r.err == 0);
    WAIT_UNTIL(cl.closed == 1, 3000);
    CHECK(strstr(cl.last_close_why, "idle") != NULL);
    WAIT_UNTIL(s.closed == 1, 3000);
    client_stop(&cl);
    server_stop(&s);
    result_clear(&r);
}

/* Malformed frames close only the connection that sent them; the server keeps serving. */
static void send_bad(server_t *s, const unsigned char *bytes, size_t n, const char *what)
{
    raw_client_t rc;
    int closed_before = s->closed;
    raw_client_connect(&rc, s->port);
    raw_write((uv_stream_t *)&rc.tcp, bytes, n);
    WAIT_UNTIL(rc.eof, 3000);
    if (!rc.eof) fprintf(stderr, "  (%s was not rejected)\n", what);
    CHECK(rc.got == 0);
    raw_client_close(&rc);
    WAIT_UNTIL(s->closed == closed_before + 1, 2000);
    CHECK(s->last_close_err == RMQ_ERR_TRANSPORT);
}

static void test_malformed_to_server(void)
{
    server_t s;
    client_t cl;
    result_t r;
    char addr[64];
    unsigned char b[64];
    server_start(&s, "127.0.0.1", 1 << 20);
    client_start(&cl);
    addr_of(addr, sizeof addr, "127.0.0.1", s.port);
    memset(&r, 0, sizeof r);
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, 1, NULL, 0, 3000, &r) == 0);
    WAIT_UNTIL(r.done, 3000);
    CHECK(r.err == 0);
    result_clear(&r);

    /* serialize type 2 */
    memset(b, 0, sizeof b);
    put32(b, 4 + 2);
    put32(b + 4, (2u << 24) | 2);
    memcpy(b + 8, "{}", 2);
    send_bad(&s, b, 10, "bad serialize type");
    /* header length larger than the frame */
    put32(b, 4 + 2);
    put32(b + 4, 100);
    send_bad(&s, b, 10, "lying header length");
    /* frame larger than max_frame (1 MiB here) */
    put32(b, 2u << 20);
    put32(b + 4, 2);
    send_bad(&s, b, 10, "frame over max size");
    /* frame length below 4 */
    put32(b, 1);
    send_bad(&s, b, 8, "frame length 1");
    /* JSON header that is not JSON */
    put32(b, 4 + 5);
    put32(b + 4, 5);
    memcpy(b + 8, "{nope", 5);
    send_bad(&s, b, 13, "bad JSON");

    rmq_remoting_stats_t ss;
    rmq__remoting_stats(s.t, &ss);
    CHECK(ss.malformed == 5 && ss.closes == 5 && ss.accepts == 6);
    /* The good client's connection was never touched. */
    CHECK(cl.closed == 0);
    memset(&r, 0, sizeof r);
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_ROCKETMQ, 2, "x", 1, 3000, &r) == 0);
    WAIT_UNTIL(r.done, 3000);
    CHECK(r.err == 0 && strcmp(r.echo, "2") == 0);
    CHECK(cl.opened == 1);
    result_clear(&r);
    client_stop(&cl);
    server_stop(&s);
}

/* A malformed response closes the client's connection and fails its pending requests. */
static void test_malformed_to_client(void)
{
    raw_peer_t p;
    client_t cl;
    result_t r[2];
    char addr[64];
    unsigned char b[16];
    memset(r, 0, sizeof r);
    raw_and_client(&p, 0, &cl, addr, sizeof addr);
    for (int i = 0; i < 2; i++)
        CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, i, NULL, 0, 60000, &r[i]) == 0);
    WAIT_UNTIL(p.nframes == 2, 3000);
    put32(b, 4 + 2);
    put32(b + 4, (9u << 24) | 2);
    memcpy(b + 8, "{}", 2);
    raw_write((uv_stream_t *)p.conn, b, 10);
    WAIT_UNTIL(r[0].done && r[1].done, 3000);
    for (int i = 0; i < 2; i++) {
        CHECK(r[i].err == RMQ_ERR_TRANSPORT);
        CHECK(strstr(r[i].errmsg, "malformed") != NULL && strstr(r[i].errmsg, addr) != NULL);
    }
    WAIT_UNTIL(p.eof, 2000);
    client_stop(&cl);
    raw_stop(&p);
    for (int i = 0; i < 2; i++)
        result_clear(&r[i]);
}

static void count_conn(rmq_conn_t *c, void *ud)
{
    (*(int *)ud)++;
}

static void close_conn(rmq_conn_t *c, void *ud)
{
    rmq__conn_close(c, RMQ_OK, "closed by the test");
}

/* The server calls the client: oneway notify, a request answered later in the request's
 * serialize type, an unknown code answered REQUEST_CODE_NOT_SUPPORTED. */
static void test_broker_initiated(void)
{
    server_t s;
    client_t cl;
    result_t r, hb;
    char addr[64];
    memset(&hb, 0, sizeof hb);
    server_and_client(&s, &cl, addr, sizeof addr);
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, 1, NULL, 0, 3000, &hb) == 0);
    WAIT_UNTIL(hb.done && s.last != NULL, 3000);
    rmq_conn_t *sc = s.last;
    CHECK(sc != NULL);
    if (!sc) return;

    rmq_cmd_t req;
    rmq__cmd_init(&req, RMQ_REQ_NOTIFY_CONSUMER_IDS_CHANGED, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext(&req, "consumerGroup", "G1");
    CHECK(rmq__conn_request(sc, &req, 0, RMQ_REQF_ONEWAY, NULL, NULL) == 0);
    rmq__cmd_free(&req);
    WAIT_UNTIL(cl.notified == 1, 3000);
    CHECK(strcmp(cl.notify_group, "G1") == 0 && cl.notify_flag == RMQ_FLAG_ONEWAY);

    for (int st = RMQ_SERIALIZE_JSON; st <= RMQ_SERIALIZE_ROCKETMQ; st++) {
        memset(&r, 0, sizeof r);
        rmq__cmd_init(&req, RMQ_REQ_GET_CONSUMER_RUNNING_INFO, st);
        rmq__cmd_set_ext(&req, "consumerGroup", "G1");
        rmq__cmd_set_ext(&req, "clientId", "cid");
        rmq__cmd_set_ext_bool(&req, "jstackEnable", 0);
        CHECK(rmq__conn_request(sc, &req, 5000, 0, on_resp, &r) == 0);
        int32_t opaque = req.opaque;
        rmq__cmd_free(&req);
        WAIT_UNTIL(cl.have_pending_resp, 3000);
        run_for(10);
        CHECK(!r.done); /* not answered yet */
        client_answer_pending(&cl);
        WAIT_UNTIL(r.done, 3000);
        CHECK(r.err == 0 && r.code == RMQ_RESP_SUCCESS && r.serialize == st);
        CHECK(r.opaque == opaque);
        CHECK(r.body_len == 17 && memcmp(r.body, "{\"properties\":{}}", 17) == 0);
        result_clear(&r);
    }

    for (int st = RMQ_SERIALIZE_JSON; st <= RMQ_SERIALIZE_ROCKETMQ; st++) {
        memset(&r, 0, sizeof r);
        rmq__cmd_init(&req, 9999, st);
        CHECK(rmq__conn_request(sc, &req, 5000, 0, on_resp, &r) == 0);
        rmq__cmd_free(&req);
        WAIT_UNTIL(r.done, 3000);
        CHECK(r.err == 0 && r.code == RMQ_RESP_REQUEST_CODE_NOT_SUPPORTED);
        CHECK(strcmp(r.remark, " request type 9999 not supported") == 0);
        /* Made by the remoting layer: the responder's default type (JSON), as Java does. */
        CHECK(r.serialize == RMQ_SERIALIZE_JSON);
        result_clear(&r);
    }
    /* The server also answers unknown codes. */
    memset(&r, 0, sizeof r);
    rmq__cmd_init(&req, RMQ_REQ_QUERY_MESSAGE, RMQ_SERIALIZE_ROCKETMQ);
    CHECK(rmq__remoting_request(cl.t, addr, &req, 3000, on_resp, &r) == 0);
    rmq__cmd_free(&req);
    WAIT_UNTIL(r.done, 3000);
    CHECK(r.err == 0 && r.code == RMQ_RESP_REQUEST_CODE_NOT_SUPPORTED);
    CHECK(strcmp(r.remark, " request type 12 not supported") == 0);
    result_clear(&r);

    /* Enumeration, and closing from the server side. */
    CHECK(rmq__conn_pending(sc) == 0);
    int n = 0;
    rmq__remoting_foreach_conn(s.t, count_conn, &n);
    CHECK(n == 1);
    rmq__conn_set_ud(sc, &n);
    CHECK(rmq__conn_get_ud(sc) == &n);
    rmq__remoting_foreach_conn(s.t, close_conn, NULL);
    WAIT_UNTIL(s.closed == 1 && cl.closed == 1, 2000);
    CHECK(s.last_close_err == RMQ_OK);
    n = 0;
    rmq__remoting_foreach_conn(s.t, count_conn, &n);
    CHECK(n == 0);
    client_stop(&cl);
    CHECK(rmq__conn_state(sc) >= RMQ_CONN_CLOSING);
    rmq_cmd_t late;
    rmq__cmd_init(&late, RMQ_REQ_NOTIFY_CONSUMER_IDS_CHANGED, RMQ_SERIALIZE_JSON);
    CHECK(rmq__conn_request(sc, &late, 0, RMQ_REQF_ONEWAY, NULL, NULL) == RMQ_ERR_TRANSPORT);
    rmq__cmd_free(&late);
    server_stop(&s);
    result_clear(&hb);
}

/* An unknown oneway request from a raw peer still gets REQUEST_CODE_NOT_SUPPORTED (Java). */
static void test_unknown_oneway_from_peer(void)
{
    raw_peer_t p;
    client_t cl;
    result_t r;
    char addr[64];
    memset(&r, 0, sizeof r);
    raw_and_client(&p, 1, &cl, addr, sizeof addr);
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, 1, NULL, 0, 3000, &r) == 0);
    WAIT_UNTIL(r.done, 3000);
    CHECK(r.err == 0);
    rmq_cmd_t req;
    rmq__cmd_init(&req, 4242, RMQ_SERIALIZE_JSON);
    req.opaque = 77;
    req.flag = RMQ_FLAG_ONEWAY;
    raw_send_cmd((uv_stream_t *)p.conn, &req);
    rmq__cmd_free(&req);
    WAIT_UNTIL(p.nframes == 2, 3000);
    CHECK(p.have_last && (p.last.flag & RMQ_FLAG_RESPONSE) && p.last.opaque == 77);
    CHECK(p.have_last && p.last.code == RMQ_RESP_REQUEST_CODE_NOT_SUPPORTED);
    CHECK(p.have_last && p.last.remark &&
          strcmp(p.last.remark, " request type 4242 not supported") == 0);
    /* A response nobody waits for is dropped; the connection stays. */
    rmq__cmd_init(&req, RMQ_RESP_SUCCESS, RMQ_SERIALIZE_JSON);
    req.opaque = 123456;
    req.flag = RMQ_FLAG_RESPONSE;
    raw_send_cmd((uv_stream_t *)p.conn, &req);
    rmq__cmd_free(&req);
    run_for(30);
    CHECK(cl.closed == 0);
    client_stop(&cl);
    raw_stop(&p);
    result_clear(&r);
}

/* A 10 MB body there (copied) and back (lent). */
static void test_big_body(void)
{
    server_t s;
    client_t cl;
    result_t r;
    char addr[64];
    size_t n = 10u * 1024 * 1024;
    char *body = malloc(n);
    for (size_t i = 0; i < n; i++)
        body[i] = (char)(i * 31 + (i >> 12));
    memset(&r, 0, sizeof r);
    server_and_client(&s, &cl, addr, sizeof addr);
    rmq_cmd_t req;
    rmq__cmd_init(&req, RMQ_REQ_SEND_MESSAGE, RMQ_SERIALIZE_ROCKETMQ);
    req.body = body;
    req.body_len = n;
    CHECK(rmq__remoting_request(cl.t, addr, &req, 20000, on_resp, &r) == 0);
    rmq__cmd_free(&req);
    WAIT_UNTIL(r.done, 20000);
    CHECK(r.err == 0 && r.body_len == n && memcmp(r.body, body, n) == 0);
    result_clear(&r);
    client_stop(&cl);
    server_stop(&s);
    free(body);
}

/* 10,000 pipelined requests all complete, each with its own response. */
static int pipe_done, pipe_bad;
static void on_pipe_resp(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    intptr_t i = (intptr_t)ud;
    const char *e = err ? NULL : rmq__cmd_ext(resp, "echo");
    char want[32];
    snprintf(want, sizeof want, "%ld", (long)i);
    if (err || !e || strcmp(e, want) != 0) pipe_bad++;
    pipe_done++;
}

static void test_pipelined(void)
{
    server_t s;
    client_t cl;
    char addr[64];
    const int N = 10000;
    pipe_done = pipe_bad = 0;
    server_and_client(&s, &cl, addr, sizeof addr);
    for (intptr_t i = 0; i < N; i++) {
        rmq_cmd_t req;
        rmq__cmd_init(&req, RMQ_REQ_HEART_BEAT,
                      (i & 1) ? RMQ_SERIALIZE_ROCKETMQ : RMQ_SERIALIZE_JSON);
        rmq__cmd_set_ext_i64(&req, "i", i);
        CHECK(rmq__remoting_request(cl.t, addr, &req, 60000, on_pipe_resp, (void *)i) == 0);
        rmq__cmd_free(&req);
    }
    CHECK(rmq__remoting_pending(cl.t) == (size_t)N);
    WAIT_UNTIL(pipe_done == N, 60000);
    CHECK(pipe_bad == 0);
    CHECK(s.requests == N && cl.opened == 1);
    client_stop(&cl);
    server_stop(&s);
}

/* Destroy with requests pending (sent, and queued on a connection in backoff): every callback
 * runs once with RMQ_ERR_DESTROYED; the close callback runs once everything is closed. */
static void on_written_destroy(void *ud, int status)
{
    *(int *)ud = status == 0 ? 1 : 2;
}

static void test_destroy_pending(void)
{
    raw_peer_t p, dead;
    client_t cl;
    result_t r[4];
    char addr[64], dead_addr[64];
    memset(r, 0, sizeof r);
    raw_start(&dead, 0);
    addr_of(dead_addr, sizeof dead_addr, "127.0.0.1", dead.port);
    raw_stop(&dead);
    raw_and_client(&p, 0, &cl, addr, sizeof addr);
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, 0, "abc", 3, 60000, &r[0]) == 0);
    CHECK(send_echo(cl.t, addr, RMQ_SERIALIZE_JSON, 1, NULL, 0, 60000, &r[1]) == 0);
    WAIT_UNTIL(p.nframes == 2, 3000);
    /* One request waiting for a connect, one queued behind the backoff. */
    result_t f;
    memset(&f, 0, sizeof f);
    CHECK(send_echo(cl.t, dead_addr, RMQ_SERIALIZE_JSON, 2, NULL, 0, 60000, &f) == 0);
    WAIT_UNTIL(f.done, 3000);
    CHECK(send_echo(cl.t, dead_addr, RMQ_SERIALIZE_JSON, 2, NULL, 0, 60000, &r[2]) == 0);
    CHECK(send_echo(cl.t, "127.0.0.1:1", RMQ_SERIALIZE_JSON, 3, NULL, 0, 60000, &r[3]) == 0);
    /* A server-side style lent write that is still queued on a connecting connection. */
    rmq_conn_t *qc = rmq__remoting_find_conn(cl.t, dead_addr);
    CHECK(qc && rmq__conn_state(qc) == RMQ_CONN_WAITING);
    rmq__conn_keep(qc);

    int before = destroyed_count;
    int done = 0;
    rmq__remoting_destroy(cl.t, on_destroyed, &done);
    for (int i = 0; i < 4; i++)
        CHECK(r[i].done && r[i].calls == 1 && r[i].err == RMQ_ERR_DESTROYED);
    CHECK(done == 0);
    CHECK(rmq__conn_state(qc) >= RMQ_CONN_CLOSING);
    int wstatus = 0;
    rmq_cmd_t resp;
    rmq__cmd_init(&resp, 0, RMQ_SERIALIZE_JSON);
    CHECK(rmq__conn_reply_ex(qc, &resp, NULL, 0, on_written_destroy, &wstatus) ==
          RMQ_ERR_TRANSPORT);
    rmq__cmd_free(&resp);
    WAIT_UNTIL(done == 1, 3000);
    CHECK(destroyed_count == before + 1);
    CHECK(rmq__conn_transport(qc) == NULL && rmq__conn_state(qc) == RMQ_CONN_CLOSED);
    rmq__conn_release(qc);
    run_for(10);
    CHECK(wstatus == 0);
    for (int i = 0; i < 4; i++)
        CHECK(r[i].calls == 1);
    raw_stop(&p);
    for (int i = 0; i < 4; i++)
        result_clear(&r[i]);
    result_clear(&f);
}

/* Re-entrancy: the transport destroyed from inside a response callback, while more responses
 * sit in the same read; requests made from the failure callbacks are refused. */
typedef struct reent {
    rmq_remoting_t *t;
    int ok, destroyed, other, refused, destroy_done;
} reent_t;

static reent_t reent;

static void on_reent_resp(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    intptr_t i = (intptr_t)ud;
    if (err == 0) {
        reent.ok++;
        if (i == 10) rmq__remoting_destroy(reent.t, on_destroyed, &reent.destroy_done);
    } else if (err == RMQ_ERR_DESTROYED) {
        reent.destroyed++;
        rmq_cmd_t req;
        rmq__cmd_init(&req, RMQ_REQ_HEART_BEAT, RMQ_SERIALIZE_JSON);
        if (rmq__remoting_request(reent.t, "127.0.0.1:1", &req, 1000, on_reent_resp, NULL) ==
            RMQ_ERR_SHUTDOWN)
            reent.refused++;
        rmq__cmd_free(&req);
    } else {
        reent.other++;
    }
}

static void test_reentrancy(void)
{
    server_t s;
    char addr[64], err[200];
    rmq_remoting_opts_t o;
    memset(&reent, 0, sizeof reent);
    memset(&o, 0, sizeof o);
    o.loop = loop;
    server_start(&s, "127.0.0.1", 0);
    CHECK(rmq__remoting_new(&o, &reent.t, err, sizeof err) == 0);
    addr_of(addr, sizeof addr, "127.0.0.1", s.port);
    for (intptr_t i = 0; i < 200; i++) {
        rmq_cmd_t req;
        rmq__cmd_init(&req, RMQ_REQ_HEART_BEAT, RMQ_SERIALIZE_JSON);
        CHECK(rmq__remoting_request(reent.t, addr, &req, 60000, on_reent_resp, (void *)i) == 0);
        rmq__cmd_free(&req);
    }
    WAIT_UNTIL(reent.destroy_done == 1, 5000);
    CHECK(reent.ok + reent.destroyed == 200 && reent.other == 0);
    CHECK(reent.ok >= 11 && reent.destroyed > 0 && reent.refused == reent.destroyed);
    server_stop(&s);
}

int main(void)
{
    test_loop_open("remoting");

    test_addr_split();
    test_request_response("127.0.0.1");
    if (have_ipv6())
        test_request_response("::1");
    else
        fprintf(stderr, "test_remoting: no ::1 on this host, IPv6 case skipped\n");
    test_timeout();
    test_oneway();
    test_drop_reconnect();
    test_connect_fail_and_namesrv();
    test_connect_timeout();
    test_host_name();
    test_expired_before_connect();
    test_idle_close();
    test_malformed_to_server();
    test_malformed_to_client();
    test_broker_initiated();
    test_unknown_oneway_from_peer();
    test_big_body();
    test_pipelined();
    test_destroy_pending();
    test_reentrancy();

    CHECK(test_loop_close() == 0);
    return test_report("test_remoting");
}
