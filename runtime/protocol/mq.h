/*
 * mq.h -- MessageQueue (topic, brokerName, queueId) and its Java ordering (PROTOCOL.md 3.10),
 * shared by the route (route.h), the allocation strategies (allocate.h) and their callers.
 *
 * Ownership: an rmq_mq_t owns nothing by itself; whoever fills it says who frees its strings
 * (route.h: rmq__mqs_free).
 * Threads: pure functions (defined in mq.c); any thread.
 */
#ifndef RMQ_MQ_H
#define RMQ_MQ_H

typedef struct rmq_mq {
    char *topic;
    char *broker_name;
    int queue_id;
} rmq_mq_t;

/*
 * Java String.compareTo on the UTF-16 code units of two NUL-terminated UTF-8 strings (<0, 0, >0).
 * Differs from strcmp only when a supplementary character meets one in U+E000..U+FFFF.
 */
int rmq__java_strcmp(const char *a, const char *b);
/* MessageQueue.compareTo: topic, then brokerName (Java String order), then queueId. */
int rmq__mq_cmp(const rmq_mq_t *a, const rmq_mq_t *b);

#endif
