/*
 * dial.c -- resolve a host name and connect to its addresses in turn (see dial.h).
 *
 * A dial moves through: resolving (gai in flight) -> attempting address i (a probe TCP handle
 * connecting, with a timer) -> probe closed -> next address, or finished. A connected probe's
 * socket is duplicated and handed over (the probe handle itself is closed), so the caller's own
 * handle can adopt it with uv_tcp_open(). Finishing closes the timer; the callback runs from its
 * close callback, when the dial holds no handle any more.
 *
 * Ownership: see dial.h. Threads: the loop thread only (the lookup itself runs on libuv's pool).
 */
#include "dial.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct rmq_dial {
    uv_loop_t *loop;
    rmq_dial_cb cb;
    void *ud;
    char host[256];
    int port;
    int64_t timeout_ms;
    uv_getaddrinfo_t gai;
    int resolving;
    struct sockaddr_storage sa[RMQ_DIAL_MAX_ADDRS];
    int n, next;
    uv_tcp_t probe;
    int probe_open; /* initialised and not closed yet */
    uv_connect_t creq;
    uv_timer_t timer;
    int timed_out;  /* the current attempt's timer fired */
    int connected;  /* fd holds the connected socket */
    int canceled;
    int finishing;
    int status;
    uv_os_sock_t fd;
    rmq_buf_t report; /* "addr (error), ..." */
};

static void attempt(rmq_dial_t *d);

static void on_timer_closed(uv_handle_t *h)
{
    rmq_dial_t *d = h->data;
    int status = d->status;
    if (d->canceled) {
        if (d->connected) close(d->fd);
        status = RMQ_ERR_DESTROYED;
    }
    if (status == RMQ_ERR_TRANSPORT) {
        rmq_buf_t msg;
        rmq__buf_init(&msg);
        if (d->n == 0)
            rmq__buf_appendf(&msg, "%.*s", (int)d->report.len, d->report.data);
        else
            rmq__buf_appendf(&msg, "cannot connect to \"%s\" port %d: tried %.*s", d->host,
                             d->port, (int)d->report.len, d->report.data);
        rmq__buf_append(&msg, "", 1);
        d->cb(d->ud, status, (uv_os_sock_t)-1, msg.data ? msg.data : "cannot connect");
        rmq__buf_free(&msg);
    } else {
        d->cb(d->ud, status, status == 0 ? d->fd : (uv_os_sock_t)-1, NULL);
    }
    rmq__buf_free(&d->report);
    free(d);
}

static void finish(rmq_dial_t *d, int status)
{
    d->finishing = 1;
    d->status = status;
    uv_close((uv_handle_t *)&d->timer, on_timer_closed);
}

static void sa_name(const struct sockaddr_storage *sa, char *out, size_t size)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        uv_ip6_name(s6, ip, sizeof(ip));
        snprintf(out, size, "[%s]:%d", ip, ntohs(s6->sin6_port));
    } else {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        uv_ip4_name(s4, ip, sizeof(ip));
        snprintf(out, size, "%s:%d", ip, ntohs(s4->sin_port));
    }
}

/* Add "addr (why)" for the address being tried to the report. */
static void note(rmq_dial_t *d, const char *why)
{
    char name[INET6_ADDRSTRLEN + 16];
    sa_name(&d->sa[d->next - 1], name, sizeof(name));
    rmq__buf_appendf(&d->report, "%s%s (%s)", d->report.len ? ", " : "", name, why);
    rmq_dbg(RMQ_DBG_REMOTING, "dial", "%s port %d: %s: %s", d->host, d->port, name, why);
}

static void on_probe_closed(uv_handle_t *h)
{
    rmq_dial_t *d = h->data;
    d->probe_open = 0;
    d->timed_out = 0;
    if (d->canceled)
        finish(d, RMQ_ERR_DESTROYED);
    else if (d->connected)
        finish(d, 0);
    else
        attempt(d);
}

static void on_connect(uv_connect_t *req, int status)
{
    rmq_dial_t *d = req->data;
    uv_timer_stop(&d->timer);
    if (!d->canceled && !d->timed_out) {
        if (status == 0) {
            uv_os_fd_t fd;
            int rc = uv_fileno((uv_handle_t *)&d->probe, &fd);
            int dup_fd = rc == 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
            if (dup_fd >= 0) {
                d->fd = dup_fd;
                d->connected = 1;
            } else {
                note(d, rc ? uv_strerror(rc) : strerror(errno));
            }
        } else {
            note(d, uv_strerror(status));
        }
    }
    if (!uv_is_closing((uv_handle_t *)&d->probe))
        uv_close((uv_handle_t *)&d->probe, on_probe_closed);
}

static void on_attempt_timeout(uv_timer_t *t)
{
    rmq_dial_t *d = t->data;
    char why[64];
    snprintf(why, sizeof(why), "timed out after %lld ms", (long long)d->timeout_ms);
    d->timed_out = 1;
    note(d, why);
    if (!uv_is_closing((uv_handle_t *)&d->probe))
        uv_close((uv_handle_t *)&d->probe, on_probe_closed); /* on_connect: UV_ECANCELED */
}

/* Connect to the next address, or finish when none is left. */
static void attempt(rmq_dial_t *d)
{
    while (d->next < d->n) {
        const struct sockaddr *sa = (const struct sockaddr *)&d->sa[d->next++];
        int rc = uv_tcp_init(d->loop, &d->probe);
        if (rc < 0) {
            note(d, uv_strerror(rc));
            continue;
        }
        d->probe.data = d;
        d->probe_open = 1;
        d->creq.data = d;
        rc = uv_tcp_connect(&d->creq, &d->probe, sa, on_connect);
        if (rc < 0) { /* e.g. no IPv6 on this host: EAFNOSUPPORT */
            note(d, uv_strerror(rc));
            uv_close((uv_handle_t *)&d->probe, on_probe_closed);
            return;
        }
        uv_timer_start(&d->timer, on_attempt_timeout, (uint64_t)d->timeout_ms, 0);
        return;
    }
    finish(d, RMQ_ERR_TRANSPORT);
}

static void add_addrs(rmq_dial_t *d, const struct addrinfo *res, int want_v4)
{
    for (const struct addrinfo *a = res; a && d->n < RMQ_DIAL_MAX_ADDRS; a = a->ai_next) {
        if ((a->ai_family == AF_INET) != want_v4) continue;
        if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
        if (a->ai_addrlen > sizeof(d->sa[0])) continue;
        struct sockaddr_storage s;
        memset(&s, 0, sizeof(s));
        memcpy(&s, a->ai_addr, a->ai_addrlen);
        if (s.ss_family == AF_INET6)
            ((struct sockaddr_in6 *)&s)->sin6_port = htons((uint16_t)d->port);
        else
            ((struct sockaddr_in *)&s)->sin_port = htons((uint16_t)d->port);
        int dup = 0;
        for (int i = 0; i < d->n; i++)
            dup |= !memcmp(&d->sa[i], &s, sizeof(s));
        if (!dup) d->sa[d->n++] = s;
    }
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    rmq_dial_t *d = req->data;
    d->resolving = 0;
    if (status == 0 && !d->canceled) {
        /* IPv4 first, as InetAddress.getAllByName orders them with
         * java.net.preferIPv6Addresses=false (Java's default). */
        add_addrs(d, res, 1);
        add_addrs(d, res, 0);
    }
    if (res) uv_freeaddrinfo(res);
    if (d->canceled) {
        finish(d, RMQ_ERR_DESTROYED);
    } else if (status < 0 || d->n == 0) {
        rmq__buf_appendf(&d->report, "cannot resolve \"%s\": %s", d->host,
                         status < 0 ? uv_strerror(status) : "no IPv4 or IPv6 address");
        finish(d, RMQ_ERR_TRANSPORT);
    } else {
        attempt(d);
    }
}

int rmq__dial_start(uv_loop_t *loop, const char *host, int port, int64_t attempt_timeout_ms,
                    rmq_dial_cb cb, void *ud, rmq_dial_t **out, char *errstr, size_t errstr_size)
{
    rmq_dial_t *d = rmq__xcalloc(1, sizeof(*d));
    d->loop = loop;
    d->cb = cb;
    d->ud = ud;
    d->port = port;
    d->timeout_ms = attempt_timeout_ms > 0 ? attempt_timeout_ms : 1;
    d->fd = (uv_os_sock_t)-1;
    snprintf(d->host, sizeof(d->host), "%s", host);
    rmq__buf_init(&d->report);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    d->gai.data = d;
    int rc = uv_getaddrinfo(loop, &d->gai, on_resolved, d->host, NULL, &hints);
    if (rc < 0) {
        rmq__seterr(errstr, errstr_size, "cannot resolve \"%s\": %s", host, uv_strerror(rc));
        free(d);
        return RMQ_ERR_TRANSPORT;
    }
    d->resolving = 1;
    uv_timer_init(loop, &d->timer);
    d->timer.data = d;
    *out = d;
    return 0;
}

void rmq__dial_cancel(rmq_dial_t *d)
{
    if (d->canceled || d->finishing) {
        d->canceled = 1; /* a socket connected meanwhile is closed before the callback */
        return;
    }
    d->canceled = 1;
    if (d->resolving) {
        uv_cancel((uv_req_t *)&d->gai); /* on_resolved runs (UV_EAI_CANCELED or the result) */
    } else if (d->probe_open) {
        uv_timer_stop(&d->timer);
        if (!uv_is_closing((uv_handle_t *)&d->probe))
            uv_close((uv_handle_t *)&d->probe, on_probe_closed);
    }
}

/* RemotingUtil.getLocalAddress: the first non-loopback, non-192.168 IPv4 address, else the last
 * private one, else 127.0.0.1 (the address in the consumer's and the producer's client ids). */
void rmq__local_ip(char *out, size_t n)
{
    uv_interface_address_t *ifs = NULL;
    int cnt = 0;
    snprintf(out, n, "127.0.0.1");
    if (uv_interface_addresses(&ifs, &cnt)) return;
    char last[64] = "";
    for (int i = 0; i < cnt; i++) {
        if (ifs[i].is_internal || ifs[i].address.address4.sin_family != AF_INET) continue;
        char ip[64];
        uv_ip4_name(&ifs[i].address.address4, ip, sizeof(ip));
        if (strncmp(ip, "127.0", 5) && strncmp(ip, "192.168", 7)) {
            snprintf(out, n, "%s", ip);
            uv_free_interface_addresses(ifs, cnt);
            return;
        }
        snprintf(last, sizeof(last), "%s", ip);
    }
    if (*last) snprintf(out, n, "%s", last);
    uv_free_interface_addresses(ifs, cnt);
}
