/*
 * httpd_test.c -- a small HTTP/1.1 server for the rmq.http specs (spec/02-integration/04-lua/
 * http_spec.lua) and scripts/bench_io, on libuv. It listens on 127.0.0.1 (port 0: the kernel
 * picks one; --port N to choose), prints "PORT <n>" on stdout, keeps connections alive, raises
 * its open-file limit to the hard limit (thousands of connections at once), and answers each
 * request after --delay ms (a request's ?delay=MS overrides it). One request at a time per
 * connection; pipelined requests wait their turn. Routes (any method; HEAD gets no body):
 *
 *   /                 200 "ok"
 *   /echo             200, the request as JSON: {"method":..,"path":..,"headers":{lower-case
 *                     name: value, repeated ones joined with ", "},"body":..}
 *   /plain            200 text/plain, the request body as it came
 *   /status/NNN       status NNN (no body for 1xx, 204, 304)
 *   /chunked?n=K      200, a chunked body of K chunks "chunk <i>\n" (default 3) and a trailer
 *   /bytes/N          200, N bytes "x" with Content-Length
 *   /eof/N            200, N bytes "x" without a length, then the connection is closed
 *   /hook?fail=K      200 "ok"; every K-th request to /hook answers 503 (a counter of its own)
 *   /redirect/N       302 to /redirect/N-1; /redirect/0 answers 200 "redirected"
 *   /close            200 "ok" with Connection: close, then the connection is closed
 *   /drop-next        200 "ok" kept alive; the next request on that connection is not
 *                     answered: the connection is closed (a server's idle close that crossed it)
 *   /stats            {"requests":..,"connections":..,"open":..,"peak_open":..,"inflight":..,
 *                     "peak":..,"status_503":..}: requests parsed and connections that carried
 *                     one (/stats not counted in either), connections open now and at most,
 *                     requests waiting for their answer now and at most, 503s sent
 * Misbehaviours:
 *   /bad/reset        the connection is reset (RST), no answer
 *   /bad/stall        no answer, ever (the connection stays open)
 *   /bad/half         a Content-Length of 100 and 10 bytes of body, then close
 *   /bad/bigheader    a header of 10 MB
 *   /bad/garbage      "GARBAGE 42" for a status line
 *   /bad/header       a header line without a colon
 *   /bad/chunk        a chunked body with the chunk size "zz"
 *   /bad/length       Content-Length: abc
 *   /bad/endless      a body without a length that never ends (64 KiB every millisecond)
 *   anything else     404
 *
 * Not part of the runtime: built only with the tests. Threads: one (its loop).
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <uv.h>

#define MAX_HEAD 65536
#define MAX_BODY (64u << 20)

static uv_loop_t *loop;
static int delay_ms;
static long n_requests, n_conns, n_open, peak_open, inflight, peak_inflight, n_503, hook_count;

enum { ACT_WRITE, ACT_CLOSE_AFTER, ACT_RESET, ACT_STALL, ACT_ENDLESS };

typedef struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t wr;
    char *buf;
    size_t len, cap;
    char *out;
    size_t outlen;
    int refs, closing, busy, action, writing, drop_next, counted;
} conn_t;

/* ---- a growing string ---------------------------------------------------------------------- */
typedef struct {
    char *p;
    size_t n, cap;
} str_t;

static void s_put(str_t *s, const char *d, size_t n)
{
    if (s->n + n + 1 > s->cap) {
        s->cap = (s->n + n + 1) * 2;
        s->p = realloc(s->p, s->cap);
        if (!s->p) abort();
    }
    memcpy(s->p + s->n, d, n);
    s->n += n;
    s->p[s->n] = 0;
}

#define s_lit(s, lit) s_put(s, lit, sizeof(lit) - 1)

static void s_fmt(str_t *s, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    s_put(s, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static void s_json(str_t *s, const char *d, size_t n)
{
    s_lit(s, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)d[i];
        if (ch == '"' || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            s_put(s, e, 2);
        } else if (ch < 0x20) {
            s_fmt(s, "\\u%04x", ch);
        } else {
            s_put(s, (const char *)&d[i], 1);
        }
    }
    s_lit(s, "\"");
}

/* ---- connections --------------------------------------------------------------------------- */
static void conn_unref(uv_handle_t *h)
{
    conn_t *c = h->data;
    if (--c->refs) return;
    free(c->buf);
    free(c->out);
    free(c);
}

static void conn_close(conn_t *c)
{
    if (c->closing) return;
    c->closing = 1;
    n_open--;
    if (c->busy) inflight--;
    c->busy = 0;
    uv_close((uv_handle_t *)&c->timer, conn_unref);
    uv_close((uv_handle_t *)&c->tcp, conn_unref);
}

static void conn_reset(conn_t *c)
{
    if (c->closing) return;
    c->closing = 1;
    n_open--;
    if (c->busy) inflight--;
    c->busy = 0;
    uv_close((uv_handle_t *)&c->timer, conn_unref);
    if (uv_tcp_close_reset(&c->tcp, conn_unref)) uv_close((uv_handle_t *)&c->tcp, conn_unref);
}

static void try_request(conn_t *c);

static void on_written(uv_write_t *w, int status)
{
    conn_t *c = w->data;
    c->writing = 0;
    free(c->out);
    c->out = NULL;
    if (c->closing) return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    if (c->action == ACT_ENDLESS) return; /* the timer writes the next piece */
    if (c->busy) inflight--;
    c->busy = 0;
    if (c->action == ACT_CLOSE_AFTER) {
        conn_close(c);
        return;
    }
    try_request(c);
}

static void write_out(conn_t *c)
{
    uv_buf_t b = uv_buf_init(c->out, (unsigned)c->outlen);
    c->wr.data = c;
    c->writing = 1;
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_written)) {
        c->writing = 0;
        conn_close(c);
    }
}

static void on_due(uv_timer_t *t)
{
    conn_t *c = t->data;
    if (c->closing) return;
    switch (c->action) {
    case ACT_RESET:
        conn_reset(c);
        return;
    case ACT_STALL:
        return;
    case ACT_ENDLESS:
        if (c->writing) return;
        if (!c->out) {
            c->outlen = 65536;
            c->out = malloc(c->outlen);
            memset(c->out, 'x', c->outlen);
        }
        write_out(c);
        return;
    default:
        write_out(c);
    }
}

/* The value of query parameter name in q (up to '&'), or NULL. */
static const char *qparam(const char *q, const char *name, char *out, size_t outsz)
{
    size_t nl = strlen(name);
    while (q && *q) {
        if (!strncmp(q, name, nl) && q[nl] == '=') {
            size_t i = 0;
            q += nl + 1;
            while (*q && *q != '&' && i + 1 < outsz) out[i++] = *q++;
            out[i] = 0;
            return out;
        }
        q = strchr(q, '&');
        if (q) q++;
    }
    return NULL;
}

static const char *reason_of(int st)
{
    switch (st) {
    case 200: return "OK";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
    }
}

/* A complete answer with a Content-Length body. */
static void answer(str_t *o, int st, const char *ctype, const char *body, size_t blen, int head,
                   int close, const char *extra)
{
    s_fmt(o, "HTTP/1.1 %d %s\r\n", st, reason_of(st));
    if (st == 503) n_503++;
    if (extra) s_put(o, extra, strlen(extra));
    if (close) s_lit(o, "Connection: close\r\n");
    if ((st >= 100 && st < 200) || st == 204 || st == 304) {
        s_lit(o, "\r\n");
        return;
    }
    s_fmt(o, "Content-Type: %s\r\nContent-Length: %zu\r\n\r\n", ctype, blen);
    if (!head && blen) s_put(o, body, blen);
}

/* Parse and answer the first complete request in the buffer, if any. */
static void try_request(conn_t *c)
{
    if (c->busy || c->closing) return;
    char *end = NULL;
    for (size_t i = 3; i < c->len; i++) {
        if (c->buf[i] == '\n' && c->buf[i - 1] == '\r' && c->buf[i - 2] == '\n' &&
            c->buf[i - 3] == '\r') {
            end = c->buf + i + 1;
            break;
        }
    }
    if (!end) {
        if (c->len > MAX_HEAD) conn_close(c);
        return;
    }
    size_t hlen = (size_t)(end - c->buf);
    /* The request line. */
    char method[16], target[2048];
    const char *eol = memchr(c->buf, '\r', hlen);
    size_t llen = (size_t)(eol - c->buf);
    char line[4096];
    if (llen >= sizeof(line)) {
        conn_close(c);
        return;
    }
    memcpy(line, c->buf, llen);
    line[llen] = 0;
    int minor = 1;
    if (sscanf(line, "%15s %2047s HTTP/1.%d", method, target, &minor) != 3) {
        conn_close(c);
        return;
    }
    /* The headers. */
    str_t hj = {0};
    long clen = 0;
    int keep = minor == 1, chunked_req = 0;
    s_lit(&hj, "{");
    /* Header names and values, a repeated name's values joined with ", " in the echo. */
    enum { MAXH = 128 };
    char hname[MAXH][64];
    str_t hval[MAXH];
    int nh = 0;
    memset(hval, 0, sizeof(hval));
    const char *p = eol + 2;
    while (p < end - 2) {
        const char *le = memchr(p, '\r', (size_t)(end - p));
        const char *colon = memchr(p, ':', (size_t)(le - p));
        if (colon) {
            char name[256];
            size_t nl = (size_t)(colon - p) < sizeof(name) - 1 ? (size_t)(colon - p) : sizeof(name) - 1;
            for (size_t i = 0; i < nl; i++) name[i] = (char)tolower((unsigned char)p[i]);
            name[nl] = 0;
            const char *v = colon + 1;
            while (v < le && (*v == ' ' || *v == '\t')) v++;
            size_t vl = (size_t)(le - v);
            if (!strcmp(name, "content-length")) clen = strtol(v, NULL, 10);
            if (!strcmp(name, "transfer-encoding")) chunked_req = 1;
            if (!strcmp(name, "connection")) {
                if (vl >= 5 && !strncasecmp(v, "close", 5)) keep = 0;
                if (vl >= 10 && !strncasecmp(v, "keep-alive", 10)) keep = 1;
            }
            int k = 0;
            while (k < nh && strcmp(hname[k], name)) k++;
            if (k == nh && nh < MAXH && nl < sizeof(hname[0])) {
                memcpy(hname[nh], name, nl + 1);
                nh++;
            } else if (k < nh) {
                s_lit(&hval[k], ", ");
            }
            if (k < nh) s_put(&hval[k], v, vl);
        }
        p = le + 2;
    }
    for (int k = 0; k < nh; k++) {
        if (k) s_lit(&hj, ",");
        s_json(&hj, hname[k], strlen(hname[k]));
        s_lit(&hj, ":");
        s_json(&hj, hval[k].p ? hval[k].p : "", hval[k].n);
        free(hval[k].p);
    }
    s_lit(&hj, "}");
    if (chunked_req || clen < 0 || (size_t)clen > MAX_BODY) {
        free(hj.p);
        conn_close(c);
        return;
    }
    if (c->len < hlen + (size_t)clen) { /* the body is still coming */
        free(hj.p);
        return;
    }
    const char *body = end;
    if (strncmp(target, "/stats", 6)) {
        n_requests++;
        if (!c->counted) n_conns++;
        c->counted = 1;
    }
    if (c->drop_next) {
        free(hj.p);
        conn_close(c);
        return;
    }
    c->busy = 1;
    inflight++;
    if (inflight > peak_inflight) peak_inflight = inflight;

    char *q = strchr(target, '?');
    char path[2048];
    size_t pl = q ? (size_t)(q - target) : strlen(target);
    memcpy(path, target, pl);
    path[pl] = 0;
    const char *query = q ? q + 1 : "";
    char pv[64];
    int delay = delay_ms;
    if (qparam(query, "delay", pv, sizeof(pv))) delay = atoi(pv);
    int head = !strcmp(method, "HEAD");
    int close = !keep;

    str_t o = {0};
    c->action = ACT_WRITE;
    if (!strcmp(path, "/")) {
        answer(&o, 200, "text/plain", "ok", 2, head, close, NULL);
    } else if (!strcmp(path, "/echo")) {
        str_t j = {0};
        s_lit(&j, "{\"method\":");
        s_json(&j, method, strlen(method));
        s_lit(&j, ",\"path\":");
        s_json(&j, target, strlen(target));
        s_lit(&j, ",\"headers\":");
        s_put(&j, hj.p, hj.n);
        s_lit(&j, ",\"body\":");
        s_json(&j, body, (size_t)clen);
        s_lit(&j, "}");
        answer(&o, 200, "application/json", j.p, j.n, head, close, NULL);
        free(j.p);
    } else if (!strcmp(path, "/plain")) {
        answer(&o, 200, "text/plain", body, (size_t)clen, head, close, NULL);
    } else if (!strncmp(path, "/status/", 8)) {
        int st = atoi(path + 8);
        if (st < 100 || st > 999) st = 400;
        char b[32];
        int bl = snprintf(b, sizeof(b), "status %d", st);
        answer(&o, st, "text/plain", b, (size_t)bl, head, close, NULL);
    } else if (!strcmp(path, "/chunked")) {
        int n = qparam(query, "n", pv, sizeof(pv)) ? atoi(pv) : 3;
        s_fmt(&o, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n%s\r\n",
              close ? "Connection: close\r\n" : "");
        if (!head) {
            for (int i = 0; i < n; i++) {
                char b[32];
                int bl = snprintf(b, sizeof(b), "chunk %d\n", i);
                s_fmt(&o, "%x\r\n%s\r\n", bl, b);
            }
            s_lit(&o, "0\r\nX-Trailer: yes\r\n\r\n");
        }
    } else if (!strncmp(path, "/bytes/", 7) || !strncmp(path, "/eof/", 5)) {
        int eof = path[1] == 'e';
        long n = atol(path + (eof ? 5 : 7));
        if (n < 0 || n > (long)MAX_BODY) n = 0;
        char *b = malloc((size_t)n + 1);
        memset(b, 'x', (size_t)n);
        if (eof) {
            s_lit(&o, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n");
            if (!head) s_put(&o, b, (size_t)n);
            c->action = ACT_CLOSE_AFTER;
        } else {
            answer(&o, 200, "text/plain", b, (size_t)n, head, close, NULL);
        }
        free(b);
    } else if (!strcmp(path, "/hook")) {
        int k = qparam(query, "fail", pv, sizeof(pv)) ? atoi(pv) : 0;
        hook_count++;
        if (k > 0 && hook_count % k == 0)
            answer(&o, 503, "text/plain", "busy", 4, head, close, NULL);
        else
            answer(&o, 200, "text/plain", "ok", 2, head, close, NULL);
    } else if (!strncmp(path, "/redirect/", 10)) {
        int n = atoi(path + 10);
        if (n <= 0) {
            answer(&o, 200, "text/plain", "redirected", 10, head, close, NULL);
        } else {
            char loc[64];
            snprintf(loc, sizeof(loc), "Location: /redirect/%d\r\n", n - 1);
            answer(&o, 302, "text/plain", "", 0, head, close, loc);
        }
    } else if (!strcmp(path, "/close")) {
        answer(&o, 200, "text/plain", "ok", 2, head, 1, NULL);
        close = 1;
    } else if (!strcmp(path, "/drop-next")) {
        answer(&o, 200, "text/plain", "ok", 2, head, close, NULL);
        c->drop_next = 1;
    } else if (!strcmp(path, "/stats")) {
        char b[512];
        int bl = snprintf(b, sizeof(b),
                          "{\"requests\":%ld,\"connections\":%ld,\"open\":%ld,\"peak_open\":%ld,"
                          "\"inflight\":%ld,\"peak\":%ld,\"status_503\":%ld}",
                          n_requests, n_conns, n_open, peak_open, inflight, peak_inflight, n_503);
        answer(&o, 200, "application/json", b, (size_t)bl, head, close, NULL);
    } else if (!strcmp(path, "/bad/reset")) {
        c->action = ACT_RESET;
    } else if (!strcmp(path, "/bad/stall")) {
        c->action = ACT_STALL;
    } else if (!strcmp(path, "/bad/half")) {
        s_lit(&o, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789");
        c->action = ACT_CLOSE_AFTER;
    } else if (!strcmp(path, "/bad/bigheader")) {
        size_t big = 10u << 20;
        s_lit(&o, "HTTP/1.1 200 OK\r\nX-Big: ");
        char *b = malloc(big);
        memset(b, 'b', big);
        s_put(&o, b, big);
        free(b);
        s_lit(&o, "\r\nContent-Length: 2\r\n\r\nok");
    } else if (!strcmp(path, "/bad/garbage")) {
        s_lit(&o, "GARBAGE 42\r\nContent-Length: 2\r\n\r\nok");
    } else if (!strcmp(path, "/bad/header")) {
        s_lit(&o, "HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 2\r\n\r\nok");
    } else if (!strcmp(path, "/bad/chunk")) {
        s_lit(&o, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n");
    } else if (!strcmp(path, "/bad/length")) {
        s_lit(&o, "HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nok");
    } else if (!strcmp(path, "/bad/endless")) {
        s_lit(&o, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n");
        c->action = ACT_ENDLESS;
    } else {
        answer(&o, 404, "text/plain", "not found", 9, head, close, NULL);
    }
    free(hj.p);
    if (close && c->action == ACT_WRITE) c->action = ACT_CLOSE_AFTER;
    /* The request leaves the buffer. */
    size_t used = hlen + (size_t)clen;
    memmove(c->buf, c->buf + used, c->len - used);
    c->len -= used;
    free(c->out);
    c->out = o.p;
    c->outlen = o.n;
    if (c->action == ACT_ENDLESS)
        uv_timer_start(&c->timer, on_due, (uint64_t)delay, 1);
    else
        uv_timer_start(&c->timer, on_due, (uint64_t)delay, 0);
}

static void on_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    conn_t *c = h->data;
    (void)sz;
    if (c->cap - c->len < 65536) {
        c->cap = c->cap ? c->cap * 2 : 131072;
        c->buf = realloc(c->buf, c->cap);
        if (!c->buf) abort();
    }
    *b = uv_buf_init(c->buf + c->len, (unsigned)(c->cap - c->len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    conn_t *c = s->data;
    (void)b;
    if (n < 0) {
        conn_close(c);
        return;
    }
    c->len += (size_t)n;
    if (c->len > MAX_HEAD + MAX_BODY) {
        conn_close(c);
        return;
    }
    try_request(c);
}

static void on_connection(uv_stream_t *server, int status)
{
    if (status) return;
    conn_t *c = calloc(1, sizeof(*c));
    c->refs = 2;
    uv_tcp_init(loop, &c->tcp);
    uv_timer_init(loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    n_open++;
    if (uv_accept(server, (uv_stream_t *)&c->tcp)) {
        conn_close(c);
        return;
    }
    if (n_open > peak_open) peak_open = n_open;
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

int main(int argc, char **argv)
{
    int port = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--delay") && i + 1 < argc)
            delay_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: httpd_test [--delay MS] [--port N]\n");
            return 2;
        }
    }
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl)) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    loop = uv_default_loop();
    uv_tcp_t server;
    uv_tcp_init(loop, &server);
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", port, &sa);
    if (uv_tcp_bind(&server, (struct sockaddr *)&sa, 0) ||
        uv_listen((uv_stream_t *)&server, 4096, on_connection)) {
        fprintf(stderr, "httpd_test: cannot listen on 127.0.0.1:%d\n", port);
        return 1;
    }
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    uv_tcp_getsockname(&server, (struct sockaddr *)&ss, &len);
    printf("PORT %d\n", ntohs(((struct sockaddr_in *)&ss)->sin_port));
    fflush(stdout);
    return uv_run(loop, UV_RUN_DEFAULT);
}
