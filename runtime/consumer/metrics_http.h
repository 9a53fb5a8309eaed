/*
 * metrics_http.h -- the metrics endpoint: an HTTP/1.1 server (libmicrohttpd) on its own thread
 * serving the published stats snapshot (stats.h):
 *   GET /metrics  the Prometheus text exposition format 0.0.4
 *   GET /stats    the same figures as one JSON document
 *   GET /health   200 when running and connected to a name server, else 503; one line why
 *
 * Ownership: rmq__metrics_start() returns a server that owns its listening socket and thread;
 * the publisher is borrowed and must outlive it (rmq__metrics_stop() first).
 * Threads: start and stop on one thread (the consumer calls them from the loop thread's start
 * and after its loop ended: start binds a socket, and stop joins the server thread, which never
 * waits for the loop). Requests are served on the server's own thread, which reads only the
 * published snapshot (a reference taken under the publisher's brief lock) and /proc.
 */
#ifndef RMQ_METRICS_HTTP_H
#define RMQ_METRICS_HTTP_H

#include "base/common.h"
#include "stats.h"

/*
 * Check "host:port" (IPv4 or IPv6 literal in brackets, or a host name; port 0..65535, 0 = any
 * free port). Returns 0 with host and port filled (when not NULL), or -1 with errstr.
 */
int rmq__metrics_parse_listen(const char *listen, char *host, size_t host_size, int *port,
                              char *errstr, size_t errstr_size);

/* Bind listen and serve pub. Returns 0 and *out, or RMQ_ERR_IO / RMQ_ERR_CONFIG with errstr. */
int rmq__metrics_start(const char *listen, rmq_stats_pub_t *pub, rmq_metrics_t **out, char *errstr,
                       size_t errstr_size);
/* "host:port" actually bound (the port chosen when 0 was asked). */
const char *rmq__metrics_address(const rmq_metrics_t *m);
int rmq__metrics_port(const rmq_metrics_t *m);
/* Stop serving (joins the server thread), close the socket, free. */
void rmq__metrics_stop(rmq_metrics_t *m);

#endif
