/*
 * producer_heartbeat.h -- HEART_BEAT of a standalone producer (`rmqlua send`), so that brokers
 * know it (ProducerManager: mqadmin producerConnection, the Dashboard's producer page).
 *
 * Ownership: the caller owns the rmq_producer_hb_t and stops it before destroying the producer
 * or the transport. Threads: the loop thread of the producer.
 */
#ifndef RMQ_PRODUCER_HEARTBEAT_H
#define RMQ_PRODUCER_HEARTBEAT_H

#include "producer.h"
#include "net/remoting.h"

#include <uv.h>

#define RMQ_PRODUCER_HEARTBEAT_MS 30000      /* ClientConfig.heartbeatBrokerInterval */
#define RMQ_PRODUCER_HEARTBEAT_DELAY_MS 1000 /* MQClientInstance.startScheduledTask's first */

typedef struct rmq_producer_hb rmq_producer_hb_t;

/* Send {"clientID":client_id,"consumerDataSet":[],"producerDataSet":[{group},
 * {CLIENT_INNER_PRODUCER}]} to every master of p's routes, RMQ_PRODUCER_HEARTBEAT_DELAY_MS after
 * the start (and again every RMQ_PRODUCER_HEARTBEAT_DELAY_MS while no route names a broker), then
 * every interval_ms, as MQClientInstance.sendHeartbeatToAllBrokerWithLock.
 * The timer does not keep the loop alive. Strings are copied. */
rmq_producer_hb_t *rmq__producer_hb_start(uv_loop_t *loop, rmq_remoting_t *t, rmq_producer_t *p,
                                          const char *group, const char *client_id,
                                          int64_t interval_ms);
/* Stop and free (after its timer closes). NULL is a no-op. */
void rmq__producer_hb_stop(rmq_producer_hb_t *h);

/* "<ip>@<pid>": the client id of a Java producer with the default instance name
 * (ClientConfig.buildMQClientId after changeInstanceNameToPID). */
void rmq__producer_client_id(char *out, size_t size);


#endif
