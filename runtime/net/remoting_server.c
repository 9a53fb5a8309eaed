/*
 * remoting_server.c -- the server side of the remoting transport (remoting.h): the listener and
 * the connections it accepts. An accepted connection is OPEN at once (on a TLS listener its
 * first byte decides between TLS and plain, in remoting.c's reader) and from then on is served
 * like any other connection.
 *
 * Ownership: the transport owns its listener handle (closed by rmq__remoting_destroy) and every
 * accepted connection.
 * Threads: the loop thread of the transport's opts.loop only.
 */
#include "remoting_int.h"

#include <stdio.h>
#include <string.h>

/* ---- server side ----------------------------------------------------------------------------- */

static void format_sockaddr(const struct sockaddr_storage *sa, char *dst, size_t n)
{
    char ip[64] = "?";
    if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        uv_ip6_name(s6, ip, sizeof ip);
        snprintf(dst, n, "[%s]:%d", ip, ntohs(s6->sin6_port));
    } else {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        uv_ip4_name(s4, ip, sizeof ip);
        snprintf(dst, n, "%s:%d", ip, ntohs(s4->sin_port));
    }
}

static void on_connection(uv_stream_t *server, int status)
{
    rmq_remoting_t *t = server->data;
    if (status < 0) {
        rmq_log_warn(SUB(t), "accept on port %d failed: %s", t->port, uv_strerror(status));
        return;
    }
    if (t->destroying) return;
    rmq_conn_t *c = rmq__remoting_conn_new(t, 1);
    int rc = uv_tcp_init(t->loop, &c->tcp);
    if (rc < 0) {
        rmq_log_warn(SUB(t), "accept: socket: %s", uv_strerror(rc));
        rmq__conn_release(c);
        return;
    }
    c->tcp.data = c;
    c->handle_inited = 1;
    t->handles++;
    list_push_back(&t->conns, &c->live);
    rc = uv_accept(server, (uv_stream_t *)&c->tcp);
    if (rc < 0) {
        char msg[120];
        snprintf(msg, sizeof msg, "accept failed: %s", uv_strerror(rc));
        snprintf(c->addr, sizeof c->addr, "(unaccepted)");
        rmq__remoting_conn_close(c, RMQ_ERR_TRANSPORT, RMQ_ERR_TRANSPORT, msg);
        return;
    }
    struct sockaddr_storage sa;
    int len = sizeof sa;
    memset(&sa, 0, sizeof sa);
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &len) == 0)
        format_sockaddr(&sa, c->addr, sizeof c->addr);
    else
        snprintf(c->addr, sizeof c->addr, "(unknown peer)");
    rmq_log_info(SUB(t), "accepted connection from %s", c->addr);
    t->st.accepts++;
    c->sniff = t->opts.tls_server != NULL;
    rmq__remoting_conn_opened(c);
}

int rmq__remoting_listen(rmq_remoting_t *t, const char *host, int port, char *errstr,
                         size_t errstr_size)
{
    struct sockaddr_storage sa;
    memset(&sa, 0, sizeof sa);
    if (t->listening || t->destroying) {
        rmq__seterr(errstr, errstr_size, "transport already listening or destroyed");
        return RMQ_ERR_INVALID;
    }
    if (port < 0 || port > 65535 ||
        (uv_ip4_addr(host, port, (struct sockaddr_in *)&sa) != 0 &&
         uv_ip6_addr(host, port, (struct sockaddr_in6 *)&sa) != 0)) {
        rmq__seterr(errstr, errstr_size, "bad listen address \"%s\" port %d", host, port);
        return RMQ_ERR_INVALID;
    }
    int rc = uv_tcp_init(t->loop, &t->listener);
    if (rc < 0) {
        rmq__seterr(errstr, errstr_size, "listen socket: %s", uv_strerror(rc));
        return RMQ_ERR_IO;
    }
    t->listener.data = t;
    t->handles++;
    t->listening = 1;
    rc = uv_tcp_bind(&t->listener, (struct sockaddr *)&sa, 0);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&t->listener, 1024, on_connection);
    if (rc < 0) {
        rmq__seterr(errstr, errstr_size, "listen on %s:%d: %s", host, port, uv_strerror(rc));
        t->listening = 0;
        uv_close((uv_handle_t *)&t->listener, rmq__remoting_plain_closed);
        return RMQ_ERR_IO;
    }
    int len = sizeof sa;
    uv_tcp_getsockname(&t->listener, (struct sockaddr *)&sa, &len);
    t->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                             : ((struct sockaddr_in *)&sa)->sin_port);
    rmq_log_info(SUB(t), "listening on %s:%d", host, t->port);
    return 0;
}

int rmq__remoting_port(const rmq_remoting_t *t)
{
    return t->listening ? t->port : 0;
}
