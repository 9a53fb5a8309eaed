/*
 * metrics_http.c -- the metrics endpoint (metrics_http.h) on libmicrohttpd: one internal polling
 * thread, a listening socket bound here (so port 0 works and the chosen port is known), GET and
 * HEAD on /metrics, /stats and /health.
 *
 * libmicrohttpd is loaded with dlopen when an endpoint starts, not linked: it brings GnuTLS and
 * its libraries along (about 2.5 MB resident), which a consumer without metrics_listen (the
 * default) should not pay for. The .deb depends on its package (libmicrohttpd12).
 *
 * Ownership: the server owns its socket and the libmicrohttpd daemon; every response body is a
 * malloc'ed buffer handed to libmicrohttpd, which frees it. The publisher is borrowed.
 * Threads: start/stop on the caller's thread; the request handler runs on libmicrohttpd's
 * thread and touches only a snapshot it holds a reference on, and /proc.
 */
#include "metrics_http.h"

#include <microhttpd.h>

#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define CT_PROMETHEUS "text/plain; version=0.0.4; charset=utf-8"
#define CT_JSON "application/json"
#define CT_TEXT "text/plain; charset=utf-8"

/* ---- libmicrohttpd, loaded on first use ---------------------------------------------------------
 */

#define MHD_SONAME "libmicrohttpd.so.12" /* Debian 12's libmicrohttpd12 (0.9.x) */

static struct {
    __typeof__(MHD_start_daemon) *start_daemon;
    __typeof__(MHD_quiesce_daemon) *quiesce_daemon;
    __typeof__(MHD_stop_daemon) *stop_daemon;
    __typeof__(MHD_create_response_from_buffer_with_free_callback) *response_from_buffer;
    __typeof__(MHD_add_response_header) *add_response_header;
    __typeof__(MHD_queue_response) *queue_response;
    __typeof__(MHD_destroy_response) *destroy_response;
} mhd;
static uv_once_t mhd_once = UV_ONCE_INIT;
static char mhd_err[256];

static void mhd_load(void)
{
    /* Kept loaded for the life of the process (a later endpoint reuses it). */
    void *h = dlopen(MHD_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(mhd_err, sizeof(mhd_err),
                 "the metrics endpoint needs libmicrohttpd "
                 "(Debian package libmicrohttpd12): %s",
                 dlerror());
        return;
    }
    struct {
        const char *name;
        void **fn;
    } syms[] = {
        {"MHD_start_daemon", (void **)&mhd.start_daemon},
        {"MHD_quiesce_daemon", (void **)&mhd.quiesce_daemon},
        {"MHD_stop_daemon", (void **)&mhd.stop_daemon},
        {"MHD_create_response_from_buffer_with_free_callback", (void **)&mhd.response_from_buffer},
        {"MHD_add_response_header", (void **)&mhd.add_response_header},
        {"MHD_queue_response", (void **)&mhd.queue_response},
        {"MHD_destroy_response", (void **)&mhd.destroy_response},
    };
    for (size_t i = 0; i < RMQ_ARRAY_SIZE(syms); i++) {
        *syms[i].fn = dlsym(h, syms[i].name);
        if (!*syms[i].fn) {
            snprintf(mhd_err, sizeof(mhd_err), "%s has no %s", MHD_SONAME, syms[i].name);
            mhd.start_daemon = NULL;
            return;
        }
    }
}

/* ---- the endpoint ------------------------------------------------------------------------------
 */

struct rmq_metrics {
    struct MHD_Daemon *d;
    rmq_stats_pub_t *pub;
    int port;
    char address[300];
};

int rmq__metrics_parse_listen(const char *listen, char *host, size_t host_size, int *port,
                              char *errstr, size_t errstr_size)
{
    const char *colon = listen ? strrchr(listen, ':') : NULL;
    if (!colon || colon == listen) {
        rmq__seterr(errstr, errstr_size,
                    "\"%s\": expected host:port (127.0.0.1:9100, "
                    "[::1]:9100, 0.0.0.0:0 for any free port)",
                    listen ? listen : "");
        return -1;
    }
    const char *h = listen;
    size_t hl = (size_t)(colon - listen);
    if (h[0] == '[') {
        if (hl < 3 || h[hl - 1] != ']') {
            rmq__seterr(errstr, errstr_size, "\"%s\": an IPv6 host goes in brackets ([::1]:9100)",
                        listen);
            return -1;
        }
        h++;
        hl -= 2;
    }
    char *end = NULL;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || errno || p < 0 || p > 65535) {
        rmq__seterr(errstr, errstr_size, "\"%s\": the port must be 0..65535", listen);
        return -1;
    }
    if (host) {
        if (hl >= host_size) {
            rmq__seterr(errstr, errstr_size, "\"%s\": host name too long", listen);
            return -1;
        }
        memcpy(host, h, hl);
        host[hl] = 0;
    }
    if (port) *port = (int)p;
    return 0;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = 0;
    rmq_log_warn("metrics", "%s", msg);
}

/* Queue a response whose body (malloc'ed, len bytes) libmicrohttpd frees. */
static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, const char *ctype,
                               char *body, size_t len)
{
    struct MHD_Response *r = mhd.response_from_buffer(len, body, free);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    mhd.add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        mhd.add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result ok = mhd.queue_response(conn, status, r);
    mhd.destroy_response(r);
    return ok;
}

static enum MHD_Result respond_text(struct MHD_Connection *conn, unsigned status, const char *fmt,
                                    ...) RMQ_PRINTF(3, 4);

static enum MHD_Result respond_text(struct MHD_Connection *conn, unsigned status, const char *fmt,
                                    ...)
{
    rmq_buf_t b;
    va_list ap;
    char line[1024];
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    rmq__buf_init(&b);
    rmq__buf_appendf(&b, "%s\n", line);
    return respond(conn, status, CT_TEXT, b.data, b.len);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    rmq_metrics_t *m = cls;
    (void)version;
    (void)upload_data;
    (void)req_cls;
    if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
        return respond_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method %s not allowed", method);
    if (*upload_data_size) return MHD_NO; /* a GET with a body: drop the connection */
    int is_metrics = !strcmp(url, "/metrics"), is_stats = !strcmp(url, "/stats"),
        is_health = !strcmp(url, "/health");
    if (!is_metrics && !is_stats && !is_health) {
        if (!strcmp(url, "/"))
            return respond_text(conn, MHD_HTTP_OK,
                                "rmqlua: /metrics (Prometheus), /stats (JSON),"
                                " /health");
        return respond_text(conn, MHD_HTTP_NOT_FOUND,
                            "not found: %s (try /metrics, /stats, "
                            "/health)",
                            url);
    }
    rmq_stats_snap_t *s = rmq__stats_acquire(m->pub);
    if (!s) return respond_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "starting: no statistics yet");
    enum MHD_Result rc;
    if (is_health) {
        rc = respond_text(conn, s->healthy ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, "%s",
                          s->reason);
    } else {
        rmq_proc_stats_t proc;
        rmq__stats_proc_read(&proc);
        if (is_metrics) {
            rmq_buf_t b;
            rmq__buf_init(&b);
            rmq__stats_prometheus(s, &proc, &b);
            rc = respond(conn, MHD_HTTP_OK, CT_PROMETHEUS, b.data, b.len);
        } else {
            json_t *j = rmq__stats_json(s, &proc);
            char *txt = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
            json_decref(j);
            size_t n = txt ? strlen(txt) : 0;
            if (txt) {
                /* jansson allocates with malloc (its default allocator): ours to free(). */
                char *body = realloc(txt, n + 2);
                if (body) {
                    body[n++] = '\n';
                    body[n] = 0;
                    txt = body;
                }
            }
            rc = txt ? respond(conn, MHD_HTTP_OK, CT_JSON, txt, n) : MHD_NO;
        }
    }
    rmq__stats_snap_release(s);
    return rc;
}

/* Bind and listen on host:port; returns the socket, or -1 with errstr. */
static int bind_listen(const char *host, int port, char *errstr, size_t errstr_size)
{
    struct addrinfo hints, *res = NULL, *ai;
    char ps[16];
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(ps, sizeof(ps), "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc) {
        rmq__seterr(errstr, errstr_size, "cannot resolve %s: %s", host, gai_strerror(rc));
        return -1;
    }
    int fd = -1, err = 0;
    for (ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 64)) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        rmq__seterr(errstr, errstr_size, "cannot listen on %s:%d: %s", host, port, strerror(err));
    return fd;
}

int rmq__metrics_start(const char *listen, rmq_stats_pub_t *pub, rmq_metrics_t **out, char *errstr,
                       size_t errstr_size)
{
    char host[256];
    int port = 0;
    *out = NULL;
    if (rmq__metrics_parse_listen(listen, host, sizeof(host), &port, errstr, errstr_size))
        return RMQ_ERR_CONFIG;
    uv_once(&mhd_once, mhd_load);
    if (!mhd.start_daemon) {
        rmq__seterr(errstr, errstr_size, "%s", mhd_err);
        return RMQ_ERR_IO;
    }
    int fd = bind_listen(host, port, errstr, errstr_size);
    if (fd < 0) return RMQ_ERR_IO;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char bound[128] = "";
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        char hb[96], pb[16];
        if (getnameinfo((struct sockaddr *)&ss, sl, hb, sizeof(hb), pb, sizeof(pb),
                        NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
            port = atoi(pb);
            snprintf(bound, sizeof(bound), ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", hb, pb);
        }
    }
    rmq_metrics_t *m = rmq__xcalloc(1, sizeof(*m));
    m->pub = pub;
    m->port = port;
    snprintf(m->address, sizeof(m->address), "%s", *bound ? bound : listen);
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (ss.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    m->d =
        mhd.start_daemon(flags, 0, NULL, NULL, on_request, m, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
                         NULL, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT, 64u,
                         MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
    if (!m->d) {
        rmq__seterr(errstr, errstr_size, "cannot start the HTTP server on %s", m->address);
        close(fd);
        free(m);
        return RMQ_ERR_IO;
    }
    *out = m;
    return 0;
}

const char *rmq__metrics_address(const rmq_metrics_t *m)
{
    return m->address;
}

int rmq__metrics_port(const rmq_metrics_t *m)
{
    return m->port;
}

void rmq__metrics_stop(rmq_metrics_t *m)
{
    if (!m) return;
    /* Quiescing hands the listening socket back (else libmicrohttpd closes it itself); it is
     * closed after the stop joined the server thread. */
    MHD_socket fd = mhd.quiesce_daemon(m->d);
    mhd.stop_daemon(m->d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
    free(m);
}
