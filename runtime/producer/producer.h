/*
 * producer.h -- a message producer on the loop thread: route lookup on the name server (with the
 * TBW102 auto-create fallback), a route cache refreshed every 30 s, round robin over the
 * writable queues of masters, SEND_MESSAGE_V2 with properties, zlib compression of large bodies,
 * retries on another queue/broker, and many sends in flight.
 *
 * PROTOCOL.md 2.3.1 (GET_ROUTEINFO_BY_TOPIC), 2.3.13 (SEND_MESSAGE_V2), 3.2 (TopicRouteData and
 * the publish queue list), 4.4-4.6 (properties, UNIQ_KEY), 6.11 (the %RETRY% re-send fallback).
 * Java reference: DefaultMQProducerImpl.sendDefaultImpl / sendKernelImpl, TopicPublishInfo.
 *
 * Used by `rmqlua send` and by the consumer engine for the sendMessageBack fallback (a failed
 * message re-sent to %RETRY%<group> as a new message, rmq__producer_send_retry()).
 *
 * Ownership: the caller owns the loop and the transport (rmq_remoting_t) and keeps both alive
 * until rmq__producer_destroy() returned; the transport's name-server list (set by the caller
 * with rmq__remoting_set_namesrv) is what route lookups use. The producer owns its route cache,
 * its timer and every send request. A message handed to rmq__producer_send() is copied (topic,
 * properties, body -- compressed if large), so the caller may free it when the call returns.
 * Threads: every function here, and every callback, runs on the loop thread.
 */
#ifndef RMQ_PRODUCER_H
#define RMQ_PRODUCER_H

#include "base/common.h"
#include "net/remoting.h"

#include <uv.h>

typedef struct rmq_producer rmq_producer_t;

/* Defaults (DefaultMQProducer 4.9.4). */
#define RMQ_PRODUCER_GROUP_DEFAULT "DEFAULT_PRODUCER"
#define RMQ_PRODUCER_INNER_GROUP "CLIENT_INNER_PRODUCER" /* MixAll.CLIENT_INNER_PRODUCER_GROUP */
#define RMQ_PRODUCER_CREATE_TOPIC_KEY "TBW102" /* TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC */
#define RMQ_PRODUCER_DEFAULT_TOPIC_QUEUE_NUMS 4
#define RMQ_PRODUCER_SEND_TIMEOUT_MS 3000     /* sendMsgTimeout */
#define RMQ_PRODUCER_RETRY_TIMES 2            /* retryTimesWhenSendFailed */
#define RMQ_PRODUCER_COMPRESS_OVER 4096       /* compressMsgBodyOverHowmuch */
#define RMQ_PRODUCER_COMPRESS_LEVEL 5         /* rocketmq.message.compressLevel */
#define RMQ_PRODUCER_MAX_MESSAGE_SIZE 4194304 /* maxMessageSize (4 MiB) */
#define RMQ_PRODUCER_ROUTE_POLL_MS 30000      /* pollNameServerInterval */
#define RMQ_PRODUCER_ROUTE_TIMEOUT_MS 3000    /* mqClientApiTimeout */
/* Route requests per lookup while name servers are unreachable (the list is tried in turn). */
#define RMQ_PRODUCER_ROUTE_TRIES 3
#define RMQ_PRODUCER_MAX_INFLIGHT 1024 /* requests on the wire at once (rmqlua's window) */
#define RMQ_PRODUCER_TOPIC_MAX_LEN 127 /* Validators.TOPIC_MAX_LENGTH */

typedef struct rmq_producer_opts {
    const char *group;        /* producer group; NULL = RMQ_PRODUCER_GROUP_DEFAULT */
    int64_t send_timeout_ms;  /* 0 = RMQ_PRODUCER_SEND_TIMEOUT_MS; counts over all attempts */
    int retry_times;          /* extra attempts; < 0 = RMQ_PRODUCER_RETRY_TIMES */
    int compress_over;        /* 0 = RMQ_PRODUCER_COMPRESS_OVER; < 0 = never compress */
    int compress_level;       /* 0 = RMQ_PRODUCER_COMPRESS_LEVEL; 1..9 */
    int max_inflight;         /* 0 = RMQ_PRODUCER_MAX_INFLIGHT; more sends wait in a FIFO */
    int64_t route_poll_ms;    /* 0 = RMQ_PRODUCER_ROUTE_POLL_MS */
    int64_t route_timeout_ms; /* 0 = RMQ_PRODUCER_ROUTE_TIMEOUT_MS */
    int64_t max_message_size; /* 0 = RMQ_PRODUCER_MAX_MESSAGE_SIZE */
    /* unitMode of every send (SendMessageRequestHeader.unitMode): the consumer's unit_mode for
     * its re-sends, as the inner producer gets it through ClientConfig.resetClientConfig. */
    int unit_mode;
} rmq_producer_opts_t;

/* One property. val NULL removes the key (set earlier in the same list or by the producer). */
typedef struct rmq_prop {
    const char *key;
    const char *val;
} rmq_prop_t;

/* A message to send. Everything is borrowed for the duration of the call only. */
typedef struct rmq_send_msg {
    const char *topic;
    const char *body;
    size_t body_len;
    int32_t flag;     /* Message.flag (user int) */
    const char *tags; /* TAGS, or NULL */
    const char *keys; /* KEYS ("k1 k2"), or NULL */
    int delay_level;  /* DELAY when > 0 */
    /* Properties already encoded (name\1value\2...), e.g. copied from a pulled message; may be
     * NULL. Applied first; tags/keys/delay and props[] then override. */
    const char *props_raw;
    size_t props_raw_len;
    const rmq_prop_t *props; /* user properties, applied in order (later ones win) */
    int n_props;
} rmq_send_msg_t;

/* SendStatus (Java): what the broker said about a stored message. */
typedef enum {
    RMQ_SEND_OK = 0,
    RMQ_SEND_FLUSH_DISK_TIMEOUT,
    RMQ_SEND_FLUSH_SLAVE_TIMEOUT,
    RMQ_SEND_SLAVE_NOT_AVAILABLE
} rmq_send_status_t;

const char *rmq__send_status_name(int status);

typedef struct rmq_send_result {
    int status;              /* rmq_send_status_t */
    char msg_id[57];         /* UNIQ_KEY */
    char offset_msg_id[57];  /* the broker's msgId (store host + commit log offset) */
    const char *topic;       /* valid during the callback */
    const char *broker_name; /* valid during the callback */
    int32_t queue_id;
    int64_t queue_offset;
    int attempts; /* 1 + retries used */
} rmq_send_result_t;

/*
 * The outcome of one send. err 0: res says where the message went. Otherwise err is a local
 * error (RMQ_ERR_TIMEOUT, RMQ_ERR_TRANSPORT, RMQ_ERR_NO_ROUTE, RMQ_ERR_DESTROYED ...) or the
 * broker's response code of the last attempt, res is NULL and errmsg names the topic and the
 * reason. errmsg and res are valid during the callback only.
 */
typedef void (*rmq_send_cb)(void *ud, int err, const rmq_send_result_t *res, const char *errmsg);

/*
 * Create a producer sending through transport t on loop (t's loop). The name servers are t's
 * (rmq__remoting_set_namesrv). Returns 0, or RMQ_ERR_CONFIG with errstr naming the option.
 */
int rmq__producer_new(uv_loop_t *loop, rmq_remoting_t *t, const rmq_producer_opts_t *opts,
                      rmq_producer_t **out, char *errstr, size_t errstr_size);

/*
 * Take new values of the options a consumer's inner producer shares with its client instance
 * (route_poll_ms, route_timeout_ms, unit_mode; 0 for a period or a timeout = the default), as
 * rmq_producer_opts_t gives them: a reload of the consumer's script. Requests on the wire keep
 * the timeout they were sent with; the route timer's next tick is a whole new period away.
 * Loop thread.
 */
void rmq__producer_reconf(rmq_producer_t *p, int64_t route_poll_ms, int64_t route_timeout_ms,
                          int unit_mode);

/*
 * Fail every send not yet completed with RMQ_ERR_DESTROYED (callbacks run inside this call),
 * stop the route timer and free the producer once the timer handle has closed (later, from the
 * loop). Responses that arrive afterwards are ignored. The transport may be destroyed after
 * this call returns.
 */
void rmq__producer_destroy(rmq_producer_t *p);

/*
 * Send m asynchronously: cb runs exactly once, later, never from inside this call (unless the
 * call fails: then it never runs). The message is checked like Java's Validators.checkMessage
 * (topic name and length, body not empty, body size <= max_message_size) and UNIQ_KEY is set
 * when absent, WAIT=true when absent. For topics starting with "%RETRY%", RECONSUME_TIME and
 * MAX_RECONSUME_TIMES move from the properties into the header.
 * Returns 0, RMQ_ERR_INVALID (errstr names the field), RMQ_ERR_NOMEM or RMQ_ERR_SHUTDOWN.
 */
int rmq__producer_send(rmq_producer_t *p, const rmq_send_msg_t *m, rmq_send_cb cb, void *ud,
                       char *errstr, size_t errstr_size);

/*
 * The sendMessageBack fallback (PROTOCOL 6.11 step 4): send a new message to "%RETRY%<group>"
 * with body, flag and a copy of the properties of the failed message (props_raw), plus
 * ORIGIN_MESSAGE_ID (the existing one if not blank, else msg_id), RETRY_TOPIC = topic,
 * RECONSUME_TIME = reconsume_times + 1, MAX_RECONSUME_TIMES = max_reconsume_times,
 * DELAY = 3 + reconsume_times, TRAN_MSG removed. UNIQ_KEY is kept. Same contract as
 * rmq__producer_send().
 */
int rmq__producer_send_retry(rmq_producer_t *p, const char *group, const char *topic,
                             const char *body, size_t body_len, int32_t flag, const char *props_raw,
                             size_t props_raw_len, const char *msg_id, int reconsume_times,
                             int max_reconsume_times, rmq_send_cb cb, void *ud, char *errstr,
                             size_t errstr_size);

/* Sends accepted and not yet completed (waiting for a route, queued, or on the wire). */
size_t rmq__producer_outstanding(const rmq_producer_t *p);
/* The distinct master addresses of the routes p holds, at most max (borrowed: valid until the
 * routes change); returns the count. For producer_heartbeat.c. */
int rmq__producer_broker_addrs(const rmq_producer_t *p, const char **addrs, int max);

#endif
