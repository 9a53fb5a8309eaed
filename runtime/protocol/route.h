/*
 * route.h -- TopicRouteData (GET_ROUTEINFO_BY_TOPIC body, PROTOCOL.md 3.2), MessageQueue and
 * its Java ordering (3.10).
 *
 * Ownership: rmq__route_parse() returns a route that owns all its strings and arrays;
 * rmq__route_free() releases it. An rmq_mq_t list from rmq__route_subscribe_mqs() owns its
 * strings; rmq__mqs_free() releases it.
 * Threads: pure functions on caller-owned data; any thread.
 */
#ifndef RMQ_ROUTE_H
#define RMQ_ROUTE_H

#include "base/common.h"
#include "mq.h"

/* PermName bits. */
#define RMQ_PERM_PRIORITY 8
#define RMQ_PERM_READ 4
#define RMQ_PERM_WRITE 2
#define RMQ_PERM_INHERIT 1

#define RMQ_MASTER_ID 0

/*
 * Queue counts a name server sends are bounded before anything is allocated by them: a
 * readQueueNums of 2^31 - 1 would make a subscribe set of 2^31 - 1 entries (Java allocates them
 * until OutOfMemoryError). No deployment comes near: every queue is a consume-queue directory on
 * its broker. Per queueDatas entry (read and write), and per route (readable, writable).
 */
#define RMQ_ROUTE_MAX_QUEUE_NUMS 65536
#define RMQ_ROUTE_MAX_QUEUES (1 << 20)

typedef struct rmq_queue_data {
    char *broker_name;
    int32_t read_queue_nums;
    int32_t write_queue_nums;
    int32_t perm;
    int32_t topic_sys_flag;
} rmq_queue_data_t;

typedef struct rmq_broker_addr {
    int64_t id; /* 0 = master */
    char *addr; /* "ip:port" */
} rmq_broker_addr_t;

typedef struct rmq_broker_data {
    char *cluster;
    char *broker_name;
    rmq_broker_addr_t *addrs; /* in id order */
    int n_addrs;
} rmq_broker_data_t;

typedef struct rmq_route {
    char *order_topic_conf; /* NULL when absent */
    rmq_queue_data_t *qds;
    int n_qds;
    rmq_broker_data_t *bds;
    int n_bds;
    int rocketmq5; /* write: as a 5.x name server (BrokerData's "enableActingMaster":false) */
} rmq_route_t;

/*
 * Parse a route body in either form (standard "0": keys or bare 0: keys; "topicSynFlag" of very
 * old servers accepted). Returns 0 with *out set, or RMQ_ERR_BAD_JSON with the reason and byte
 * offset (or the missing field, or the queue count past RMQ_ROUTE_MAX_QUEUE_NUMS /
 * RMQ_ROUTE_MAX_QUEUES and its broker) in errstr, or RMQ_ERR_NOMEM.
 */
int rmq__route_parse(const char *json, size_t len, rmq_route_t **out, char *errstr,
                     size_t errstr_size);
void rmq__route_free(rmq_route_t *r);
/* Deep copy; NULL when out of memory. */
rmq_route_t *rmq__route_dup(const rmq_route_t *r);

/*
 * Append the route as the 4.9.4 name server writes it: standard != 0 gives the form for request
 * version >= 401 or acceptStandardJsonOnly (quoted ids, non-ASCII as \uXXXX), else bare integer
 * ids. Keys sorted as fastjson sorts them; queueDatas/brokerDatas in the route's order;
 * filterServerTable always {}. Returns 0 or RMQ_ERR_NOMEM.
 */
int rmq__route_write(const rmq_route_t *r, int standard, rmq_buf_t *out);

/* Java's change detection (TopicRouteData.equals after sorting queue and broker data by
 * brokerName): 1 when a and b describe the same route. */
int rmq__route_equal(const rmq_route_t *a, const rmq_route_t *b);

const rmq_broker_data_t *rmq__route_broker(const rmq_route_t *r, const char *broker_name);
/* Address of broker id 0 of broker_name, or NULL. */
const char *rmq__route_master_addr(const rmq_route_t *r, const char *broker_name);
/*
 * MQClientInstance.findBrokerAddressInAdmin: the first address of broker_name in the iteration
 * order of Java's HashMap<Long, String> brokerAddrs (buckets of Long.hashCode spread over a table
 * of 16 grown at 3/4 load, ascending; ids in one bucket by id, where Java keeps insertion order):
 * the master while the route has it, else a slave. *slave set; NULL when there is no address.
 */
const char *rmq__route_admin_addr(const rmq_route_t *r, const char *broker_name, int *slave);
/* The master if present, else the address with the lowest id (Java picks a random slave), or
 * NULL. */
const char *rmq__route_any_addr(const rmq_route_t *r, const char *broker_name);

/*
 * The subscribe set (MQClientInstance.topicRouteData2TopicSubscribeInfo): for every queue data
 * with PERM_READ, queues 0..readQueueNums-1 of topic, sorted by rmq__mq_cmp. *out is NULL when
 * *n is 0. Returns 0 or RMQ_ERR_NOMEM.
 */
int rmq__route_subscribe_mqs(const rmq_route_t *r, const char *topic, rmq_mq_t **out, int *n);
void rmq__mqs_free(rmq_mq_t *mqs, int n);

/* rmq__mq_cmp, rmq__java_strcmp: mq.h. A qsort-compatible rmq__mq_cmp over rmq_mq_t elements: */
int rmq__mq_qsort_cmp(const void *a, const void *b);

#endif
