/*
 * nsaddr_http.h -- the name server address service (Java MQClientAPIImpl.fetchNameServerAddr,
 * TopAddressing): when no name server address is given, the client asks
 * http://<namesrv_domain>:8080/rocketmq/<namesrv_domain_subgroup> (MixAll.getWSAddr; a domain
 * with a port is used as it is) at start and every namesrv_addr_refresh_interval ms, and hands a
 * good answer (host:port;host:port) on. A failure or a bad answer (empty, not host:port, longer
 * than RMQ_NSADDR_MAX_BODY) is logged naming the URL and the fault, and nothing is handed on: the
 * last good list stays. A caller that cannot go on without a first list (the one-shot commands)
 * asks to be told of a failure before it instead (rmq__nsaddr_on_first_failure).
 *
 * Ownership: the caller creates it and asks for it to close; it frees itself after its handles
 * closed. Threads: the loop thread of `loop` only.
 */
#ifndef RMQ_NSADDR_HTTP_H
#define RMQ_NSADDR_HTTP_H

#include <stdint.h>
#include <uv.h>

#define RMQ_NSADDR_MAX_BODY 4096

/* TopAddressing.fetchNSAddr's timeout of one fetch, ms. */
#define RMQ_NSADDR_TIMEOUT_MS 3000

typedef struct rmq_nsaddr rmq_nsaddr_t;

/* Called on the loop thread with each answer that differs from the last one handed on; returns 0
 * when the list was taken, else nonzero with the reason in errstr (the list is then not kept as
 * the last one, so the same answer is tried again). */
typedef int (*rmq_nsaddr_cb)(void *ud, const char *list, char *errstr, size_t errstr_size);

/* Called on the loop thread when a fetch fails, or its answer is empty or not taken, while no
 * list has been taken yet; msg names the URL and the fault ("name server address service
 * http://...: cannot connect ..."). */
typedef void (*rmq_nsaddr_fail_cb)(void *ud, const char *msg);

/* The URL Java's MixAll.getWSAddr and TopAddressing build (unit_name may be NULL). Returns a
 * string the caller frees. */
char *rmq__nsaddr_url(const char *domain, const char *subgroup, const char *unit_name);

/* Start fetching now and every interval_ms; each fetch ends after timeout_ms. Returns 0 or
 * RMQ_ERR_CONFIG with errstr naming the URL at fault. */
int rmq__nsaddr_start(uv_loop_t *loop, const char *url, int64_t interval_ms, int64_t timeout_ms,
                      rmq_nsaddr_cb cb, void *ud, rmq_nsaddr_t **out, char *errstr,
                      size_t errstr_size);

/* From now on, a failure before the first list taken goes to cb (with the ud of
 * rmq__nsaddr_start) instead of the log; later ones are logged as always. Call it right after
 * rmq__nsaddr_start (the first fetch starts on the next turn of the loop). */
void rmq__nsaddr_on_first_failure(rmq_nsaddr_t *n, rmq_nsaddr_fail_cb cb);

/* Stop: no more callbacks; the fetcher frees itself once its handles are closed. */
void rmq__nsaddr_close(rmq_nsaddr_t *n);

#endif
