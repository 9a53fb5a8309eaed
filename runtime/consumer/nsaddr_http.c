/*
 * nsaddr_http.c -- the name server address service (nsaddr_http.h): a small HTTP/1.0 GET over
 * libuv (the host resolved and connected through net/dial.c, never a blocking call), an answer
 * delimited by Content-Length or by the server closing, a timeout per fetch, and the refresh timer.
 *
 * Ownership: the fetcher owns its URL, its handles, its buffers and the last list it handed on.
 * Threads: the loop thread only.
 */
#include "nsaddr_http.h"

#include "base/codes.h"
#include "base/common.h"
#include "base/log.h"
#include "net/dial.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Headers may take this much on top of the body before an answer counts as too long. */
#define MAX_HEAD 8192

struct rmq_nsaddr {
    uv_loop_t *loop;
    char *url;
    char host[256];
    int port;
    char *path;
    int64_t interval_ms, timeout_ms;
    rmq_nsaddr_cb cb;
    rmq_nsaddr_fail_cb on_fail; /* a failure before the first list, else NULL (logged) */
    void *ud;
    uv_timer_t t_iv, t_to;
    uv_tcp_t tcp;
    uv_write_t wr;
    rmq_dial_t *dial;
    rmq_buf_t req, in;
    char *last;
    int busy, tcp_open, timed_out, closing, handles;
};

char *rmq__nsaddr_url(const char *domain, const char *subgroup, const char *unit_name)
{
    rmq_buf_t b;
    rmq__buf_init(&b);
    /* MixAll.getWSAddr: a domain with a port is taken as it is, else port 8080. */
    if (strchr(domain, ':'))
        rmq__buf_appendf(&b, "http://%s/rocketmq/%s", domain, subgroup);
    else
        rmq__buf_appendf(&b, "http://%s:8080/rocketmq/%s", domain, subgroup);
    /* TopAddressing.fetchNSAddr: the unit name is appended. */
    if (unit_name && *unit_name) rmq__buf_appendf(&b, "-%s?nofix=1", unit_name);
    return b.data;
}

static void maybe_free(rmq_nsaddr_t *n)
{
    if (!n->closing || n->handles || n->dial) return;
    rmq__buf_free(&n->req);
    rmq__buf_free(&n->in);
    free(n->url);
    free(n->path);
    free(n->last);
    free(n);
}

static void on_closed(uv_handle_t *h)
{
    rmq_nsaddr_t *n = h->data;
    n->handles--;
    if (h == (uv_handle_t *)&n->tcp) n->busy = 0;
    maybe_free(n);
}

/* A copy of at most 120 bytes of s fit for a log line (control bytes as '?'). */
static void printable(const char *s, size_t len, char *out, size_t out_size)
{
    size_t i, k = 0;
    for (i = 0; i < len && k + 4 < out_size && i < 120; i++)
        out[k++] = isprint((unsigned char)s[i]) ? s[i] : '?';
    if (i < len && k + 4 < out_size) out[k++] = '.', out[k++] = '.', out[k++] = '.';
    out[k] = 0;
}

/* A fetch failed (msg names the URL and the fault): told to on_fail while no list was taken, else
 * logged. */
static void failed(rmq_nsaddr_t *n, const char *msg)
{
    if (n->on_fail && !n->last)
        n->on_fail(n->ud, msg);
    else
        rmq_log_warn("namesrv", "%s; keeping the last name server list", msg);
}

/* The fetch ended: err is NULL when body/len holds a 200 answer. Closes the connection; the next
 * fetch may start once it is closed. */
static void fetch_end(rmq_nsaddr_t *n, const char *err, const char *body, size_t len)
{
    char e[256], shown[128], msg[1024];
    msg[0] = 0;
    uv_timer_stop(&n->t_to);
    if (err) {
        snprintf(msg, sizeof msg, "name server address service %s: %s", n->url, err);
    } else {
        /* TopAddressing.clearNewLine: trimmed, line breaks removed. */
        char *s = rmq__xstrndup(body, len), *w = s;
        for (char *r = s; *r; r++)
            if (*r != '\r' && *r != '\n') *w++ = *r;
        *w = 0;
        char *a = s;
        while (*a == ' ' || *a == '\t')
            a++;
        size_t al = strlen(a);
        while (al && (a[al - 1] == ' ' || a[al - 1] == '\t'))
            a[--al] = 0;
        printable(a, al, shown, sizeof shown);
        if (!al) {
            snprintf(msg, sizeof msg, "name server address service %s answered an empty body",
                     n->url);
        } else if (n->last && strcmp(n->last, a) == 0) {
            rmq_dbg(RMQ_DBG_NAMESRV, "namesrv", "name server address service %s: unchanged (%s)",
                    n->url, shown);
        } else if (n->cb(n->ud, a, e, sizeof e)) {
            snprintf(msg, sizeof msg, "name server address service %s answered \"%s\": %s", n->url,
                     shown, e);
        } else {
            rmq_log_info("namesrv", "name server list from %s: %s", n->url, a);
            free(n->last);
            n->last = rmq__xstrdup(a);
        }
        free(s);
    }
    if (msg[0]) failed(n, msg);
    n->in.len = 0;
    if (n->tcp_open) {
        n->tcp_open = 0;
        uv_close((uv_handle_t *)&n->tcp, on_closed);
    } else {
        n->busy = 0;
    }
}

/* Returns 1 when the answer in n->in is complete (and handled), 0 when more is to come. */
static int parse(rmq_nsaddr_t *n, int eof)
{
    const char *d = n->in.data ? n->in.data : "";
    size_t len = n->in.len;
    const char *he = memmem(d, len, "\r\n\r\n", 4);
    size_t skip = 4;
    if (!he) he = memmem(d, len, "\n\n", 2), skip = 2;
    if (!he) {
        if (len > MAX_HEAD) return fetch_end(n, "answer headers too long", NULL, 0), 1;
        if (eof) return fetch_end(n, "connection closed before the answer's headers", NULL, 0), 1;
        return 0;
    }
    size_t hl = (size_t)(he - d), bo = hl + skip;
    int status = 0;
    if (hl < 12 || strncmp(d, "HTTP/1.", 7) != 0 || sscanf(d + 8, " %3d", &status) != 1)
        return fetch_end(n, "not an HTTP/1.x answer", NULL, 0), 1;
    long long cl = -1;
    for (const char *l = memchr(d, '\n', hl); l && l < he;
         l = memchr(l + 1, '\n', hl - (size_t)(l + 1 - d))) {
        const char *h = l + 1;
        if (h >= he) break;
        if (strncasecmp(h, "Content-Length:", 15) == 0)
            cl = strtoll(h + 15, NULL, 10);
        else if (strncasecmp(h, "Transfer-Encoding:", 18) == 0 && strstr(h, "chunked") &&
                 (size_t)(strstr(h, "chunked") - d) < hl)
            return fetch_end(n, "chunked answers are not supported", NULL, 0), 1;
    }
    if (status != 200) {
        char e[64];
        snprintf(e, sizeof e, "HTTP status %d", status);
        return fetch_end(n, e, NULL, 0), 1;
    }
    if (cl > RMQ_NSADDR_MAX_BODY || (cl < 0 && len - bo > RMQ_NSADDR_MAX_BODY))
        return fetch_end(n, "answer longer than 4096 bytes", NULL, 0), 1;
    if (cl >= 0 && len - bo >= (size_t)cl) return fetch_end(n, NULL, d + bo, (size_t)cl), 1;
    if (eof) {
        if (cl >= 0)
            return fetch_end(n, "connection closed before the end of the body", NULL, 0), 1;
        return fetch_end(n, NULL, d + bo, len - bo), 1;
    }
    return 0;
}

static void on_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    rmq_nsaddr_t *n = h->data;
    (void)sz;
    rmq__buf_reserve(&n->in, 4096);
    b->base = n->in.data + n->in.len;
    b->len = 4096;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    rmq_nsaddr_t *n = s->data;
    (void)b;
    if (!n->tcp_open) return;
    if (nread > 0) {
        n->in.len += (size_t)nread;
        parse(n, 0);
    } else if (nread == UV_EOF) {
        parse(n, 1);
    } else if (nread < 0) {
        fetch_end(n, uv_strerror((int)nread), NULL, 0);
    }
}

static void on_write(uv_write_t *w, int status)
{
    rmq_nsaddr_t *n = w->data;
    if (status && status != UV_ECANCELED && n->tcp_open) fetch_end(n, uv_strerror(status), NULL, 0);
}

static void on_dial(void *ud, int status, uv_os_sock_t fd, const char *report)
{
    rmq_nsaddr_t *n = ud;
    n->dial = NULL;
    if (n->closing) {
        if (status == 0) close(fd);
        maybe_free(n);
        return;
    }
    if (status) {
        if (n->timed_out) {
            char e[96];
            snprintf(e, sizeof e, "no answer within %lld ms", (long long)n->timeout_ms);
            fetch_end(n, e, NULL, 0);
        } else {
            fetch_end(n, report ? report : "cannot connect", NULL, 0);
        }
        return;
    }
    uv_tcp_init(n->loop, &n->tcp);
    n->tcp.data = n;
    n->handles++;
    n->tcp_open = 1;
    int rc = uv_tcp_open(&n->tcp, fd);
    if (rc) {
        close(fd);
        fetch_end(n, uv_strerror(rc), NULL, 0);
        return;
    }
    n->req.len = 0;
    rmq__buf_appendf(&n->req,
                     "GET %s HTTP/1.0\r\nHost: %s:%d\r\nAccept: */*\r\nConnection: "
                     "close\r\nUser-Agent: rmqlua\r\n\r\n",
                     n->path, n->host, n->port);
    uv_buf_t wb = uv_buf_init(n->req.data, (unsigned)n->req.len);
    n->wr.data = n;
    if ((rc = uv_write(&n->wr, (uv_stream_t *)&n->tcp, &wb, 1, on_write)) ||
        (rc = uv_read_start((uv_stream_t *)&n->tcp, on_alloc, on_read)))
        fetch_end(n, uv_strerror(rc), NULL, 0);
}

static void on_timeout(uv_timer_t *t)
{
    rmq_nsaddr_t *n = t->data;
    if (n->dial) {
        n->timed_out = 1;
        rmq__dial_cancel(n->dial);
    } else if (n->tcp_open) {
        char e[96];
        snprintf(e, sizeof e, "no answer within %lld ms", (long long)n->timeout_ms);
        fetch_end(n, e, NULL, 0);
    }
}

static void fetch(uv_timer_t *t)
{
    rmq_nsaddr_t *n = t->data;
    char e[256];
    if (n->busy || n->closing) return;
    n->busy = 1;
    n->timed_out = 0;
    n->in.len = 0;
    rmq_dbg(RMQ_DBG_NAMESRV, "namesrv", "fetching the name server list from %s", n->url);
    if (rmq__dial_start(n->loop, n->host, n->port, n->timeout_ms, on_dial, n, &n->dial, e,
                        sizeof e)) {
        n->dial = NULL;
        fetch_end(n, e, NULL, 0);
        return;
    }
    uv_timer_start(&n->t_to, on_timeout, (uint64_t)n->timeout_ms, 0);
}

int rmq__nsaddr_start(uv_loop_t *loop, const char *url, int64_t interval_ms, int64_t timeout_ms,
                      rmq_nsaddr_cb cb, void *ud, rmq_nsaddr_t **out, char *errstr,
                      size_t errstr_size)
{
    *out = NULL;
    if (strncmp(url, "http://", 7) != 0) {
        rmq__seterr(errstr, errstr_size, "name server address service \"%s\": not an http:// URL",
                    url);
        return RMQ_ERR_CONFIG;
    }
    const char *hp = url + 7, *sl = strchr(hp, '/');
    size_t hl = sl ? (size_t)(sl - hp) : strlen(hp);
    const char *colon = memchr(hp, ':', hl);
    size_t nl = colon ? (size_t)(colon - hp) : hl;
    int port = 80;
    if (colon) {
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (end != hp + hl || p < 1 || p > 65535)
            port = -1;
        else
            port = (int)p;
    }
    if (!nl || nl >= 256 || port < 0) {
        rmq__seterr(errstr, errstr_size, "name server address service \"%s\": bad host or port",
                    url);
        return RMQ_ERR_CONFIG;
    }
    rmq_nsaddr_t *n = rmq__xcalloc(1, sizeof(*n));
    n->loop = loop;
    n->url = rmq__xstrdup(url);
    memcpy(n->host, hp, nl);
    n->port = port;
    n->path = rmq__xstrdup(sl ? sl : "/");
    n->interval_ms = interval_ms;
    n->timeout_ms = timeout_ms;
    n->cb = cb;
    n->ud = ud;
    rmq__buf_init(&n->req);
    rmq__buf_init(&n->in);
    uv_timer_init(loop, &n->t_iv);
    uv_timer_init(loop, &n->t_to);
    n->t_iv.data = n->t_to.data = n;
    n->handles = 2;
    uv_timer_start(&n->t_iv, fetch, 0, (uint64_t)interval_ms);
    *out = n;
    return 0;
}

void rmq__nsaddr_on_first_failure(rmq_nsaddr_t *n, rmq_nsaddr_fail_cb cb)
{
    n->on_fail = cb;
}

void rmq__nsaddr_close(rmq_nsaddr_t *n)
{
    n->closing = 1;
    uv_close((uv_handle_t *)&n->t_iv, on_closed);
    uv_close((uv_handle_t *)&n->t_to, on_closed);
    if (n->dial) rmq__dial_cancel(n->dial);
    if (n->tcp_open) {
        n->tcp_open = 0;
        uv_close((uv_handle_t *)&n->tcp, on_closed);
    }
}
