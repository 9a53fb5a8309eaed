/*
 * dial.h -- connect to a host name: resolve it without blocking the loop (uv_getaddrinfo runs on
 * libuv's worker threads), then try each address it resolved to, one after the other, until one
 * accepts. Numeric addresses do not need this (remoting.c connects them directly).
 *
 * Order: IPv4 addresses first, then the others, each family in the resolver's order. The Java
 * client resolves with new InetSocketAddress(host, port) (RemotingHelper.string2SocketAddress),
 * i.e. the first address of InetAddress.getAllByName, which lists IPv4 first by default
 * (java.net.preferIPv6Addresses=false), and connects to that one address only; going on to the
 * next address when one refuses is what makes `localhost` work where it resolves to ::1 first
 * and the server listens on 127.0.0.1 (or the reverse).
 *
 * Each attempt has its own timeout (the connect timeout, as Java's per connect). When every
 * attempt failed, the report names the host, every address tried and its error:
 *   cannot connect to "localhost" port 9876: tried 127.0.0.1:9876 (connection refused),
 *   [::1]:9876 (connection refused)
 *
 * Ownership: the dial owns itself and frees itself after its callback ran; on success the
 * callback receives a connected socket it then owns. Threads: the loop thread of `loop`.
 * Callbacks: libuv's rule -- when rmq__dial_start returns an error the callback never runs;
 * otherwise it runs exactly once, later, after every handle of the dial is closed.
 */
#ifndef RMQ_DIAL_H
#define RMQ_DIAL_H

#include "base/common.h"

#include <uv.h>

#define RMQ_DIAL_MAX_ADDRS 8 /* addresses tried per connect (the first ones, in order) */

typedef struct rmq_dial rmq_dial_t;

/*
 * status 0: fd is a connected, non-blocking socket now owned by the callee, report NULL.
 * status RMQ_ERR_TRANSPORT: nothing connected, report says why (valid during the call).
 * status RMQ_ERR_DESTROYED: rmq__dial_cancel() was called.
 */
typedef void (*rmq_dial_cb)(void *ud, int status, uv_os_sock_t fd, const char *report);

/* Start resolving host and connecting to port. Returns 0 (*out set: a handle for cancel, valid
 * until the callback runs) or RMQ_ERR_TRANSPORT with the reason in errstr. */
int rmq__dial_start(uv_loop_t *loop, const char *host, int port, int64_t attempt_timeout_ms,
                    rmq_dial_cb cb, void *ud, rmq_dial_t **out, char *errstr, size_t errstr_size);

/* Stop: the callback runs later with RMQ_ERR_DESTROYED. Only before the callback ran. */
void rmq__dial_cancel(rmq_dial_t *d);

/* RemotingUtil.getLocalAddress: the local address a Java client puts in its client id (the first
 * non-loopback, non-192.168 IPv4 address, else the last private one, else 127.0.0.1). Any thread. */
void rmq__local_ip(char *out, size_t n);

#endif
