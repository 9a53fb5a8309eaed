/*
 * flow.h -- the script's say over pulling: rmq.pause(seconds) / rmq.resume() / rmq.stop() from
 * any hook, and consume_tps_limit, a token bucket that paces the pulls.
 *
 * Requests come from any thread (a consume thread's hook, the control state) through
 * rmq_flow_request() (rmqlua_ffi.h): an op on a queue and a uv_async_t wake-up; the loop thread
 * applies them. While paused, no pull goes out (pulls already in flight finish and what is
 * cached is consumed); a queue that wants to pull is parked here and pulled again on resume.
 * With consume_tps_limit = R, a pull asks for at most the tokens the bucket holds (capacity
 * min(R, pull_batch_size), refilled at R per second) and takes them before it is sent; what the
 * response did not use is given back. So the consumer pulls no faster than it may consume and
 * messages do not pile up in the process queues; a queue without tokens waits parked, in FIFO
 * order.
 *
 * Java (DefaultMQPushConsumer 4.9.4) has no rate limit, only pullInterval; consume_tps_limit is
 * rmqlua's own. rmq.pause is like DefaultMQPushConsumer.suspend()/resume() but timed, and the
 * rebalance goes on while paused (queues can move to other consumers meanwhile).
 *
 * Ownership: the consumer owns its flow; a parked queue holds one reference on it.
 * Threads: rmq_flow_request from any thread; everything else on the loop thread (new/free on the
 * consumer's creating thread, before the loop runs / after it ended).
 */
#ifndef RMQ_FLOW_H
#define RMQ_FLOW_H

#include "base/common.h"
#include "rmqlua_ffi.h"

#include <uv.h>

typedef struct rmq_consumer rmq_consumer_t;
typedef struct rmq_qent rmq_qent_t;

/* Requests (rmq_flow_request's op). */
enum { RMQ_FLOW_PAUSE = 1, RMQ_FLOW_RESUME = 2, RMQ_FLOW_STOP = 3 };

/* A flow for c; requests posted before rmq__flow_start() wait for it. */
rmq_flow_t *rmq__flow_new(rmq_consumer_t *c);
/* Start on the consumer's loop with a limit of tps messages per second (0 = none) and pulls of
 * at most pull_batch messages. */
void rmq__flow_start(rmq_flow_t *f, uv_loop_t *loop, int tps, int pull_batch);
/* A new limit (0 = none), applied from now on. */
void rmq__flow_set_limit(rmq_flow_t *f, int tps, int pull_batch);
/* Shutdown: release every parked queue, ignore further requests, close the handles. */
void rmq__flow_close(rmq_flow_t *f);
/* Free (after the loop closed the handles, or if never started). */
void rmq__flow_free(rmq_flow_t *f);

/* rmq__pull_now, before anything else is checked: 1 when the script paused pulling (q is parked
 * and pulled again on resume), else 0. */
int rmq__flow_gate(rmq_qent_t *q);
/* rmq__pull_now, right before the request is sent: how many messages the pull may ask for (want,
 * or fewer under consume_tps_limit; they are taken from the bucket), or 0 when q was parked to
 * wait for tokens. */
int rmq__flow_take(rmq_qent_t *q, int want);
/* The pull's request failed or its response arrived: give back what it took. */
void rmq__flow_refund(rmq_qent_t *q);
/* n messages of a pull response were kept: they use n of the tokens given back. */
void rmq__flow_charge(rmq_qent_t *q, int n);
/* q leaves the consumer (dropped): forget it if parked. */
void rmq__flow_unpark(rmq_qent_t *q);
/* 1 while the script has pulling paused. */
int rmq__flow_paused(const rmq_flow_t *f);

#endif
