/*
 * devbroker.h -- the development broker: one name server and N brokers in one process, for
 * development and tests (never for production data). Modelled on librdkafka's mock cluster.
 *
 * What it is: an in-memory RocketMQ 4.9.4 look-alike that speaks the remoting protocol on real
 * sockets (optionally backed by an append-only commit log, --store DIR: devbroker_file.c). The name server answers GET_ROUTEINFO_BY_TOPIC (standard JSON for version >= 401 or
 * acceptStandardJsonOnly, bare integer keys otherwise), GET_BROKER_CLUSTER_INFO and
 * REGISTER_BROKER (so a second `rmqlua broker --name-server ADDR` process joins the cluster).
 * Each broker stores messages per (topic, queue) and serves SEND_MESSAGE(_V2) and
 * SEND_BATCH_MESSAGE, PULL_MESSAGE
 * with long polling and tag filtering, SQL92 property filtering when started with
 * --enable-property-filter (refused otherwise, as the Java broker's default refuses it),
 * consumer offsets, heartbeats and consumer groups,
 * CONSUMER_SEND_MSG_BACK with the retry/DLQ rules and delay levels, queue locks, and relays
 * admin calls to consumers. PROTOCOL.md sections 2, 3, 4, 5.3, 6.5, 6.11, 9. Not served:
 * transactions (REQUEST_CODE_NOT_SUPPORTED or the broker's "not supported" error, as a broker
 * without those features answers). With --slaves N each broker has N slaves
 * (devbroker_slave.c): same name, broker ids 1..N, its messages replicated, reads and offsets
 * served, writes refused.
 *
 * RocketMQ 5 (--rocketmq-version 5, rmq_devbroker_opts_t.rocketmq5): the brokers answer as
 * 5.3.3 does (brokerVersion 479 / V5_3_3, routes with BrokerData's enableActingMaster) and also
 * serve POP consumption (devbroker_pop.c): POP_MESSAGE (200050) with long polling, initMode,
 * tag and SQL92 expressions, the PopMessageResponseHeader offset infos; ACK_MESSAGE (200051),
 * BATCH_ACK_MESSAGE (200151), CHANGE_MESSAGE_INVISIBLETIME (200053); an un-acked message
 * revived after its invisible time into %RETRY%<group>_<topic> with its reconsume count raised
 * and 1ST_POP_TIME set, delivered from there with the actual retry topic (retry "1" in the
 * offset infos). And broker-side assignment (devbroker_assign.c): SET_MESSAGE_REQUEST_MODE
 * (401, `mqadmin setConsumeMode`), GET_ALL_MESSAGE_REQUEST_MODE (402), QUERY_ASSIGNMENT (400,
 * averagely in PULL mode; queue -1 of each broker, or popShareQueueNum shares, in POP mode).
 * Not kept: request modes and POP checkpoints are memory only (not in --store). Without the
 * option these codes are answered REQUEST_CODE_NOT_SUPPORTED, as a 4.9.4 broker does.
 *
 * Files: devbroker.c (options, thread, request gate, controls), devbroker_ns.c (name server),
 * devbroker_broker.c (send, send-back, handler install), devbroker_pull.c (pull, long polling),
 * devbroker_offset.c (offsets, locks), devbroker_client.c (heartbeats, groups, relayed admin
 * calls), devbroker_register.c (REGISTER_BROKER), devbroker_store.c (topics, queues,
 * messages), devbroker_file.c and devbroker_recover.c (--store), devbroker_slave.c (--slaves),
 * devbroker_inject.c (offset gaps, corrupted messages), devbroker_filter.c (SQL92 filters),
 * devbroker_reply.c (replies, handler table), devbroker_pop.c (POP, acks, revive),
 * devbroker_assign.c (request modes, QUERY_ASSIGNMENT), devbroker_map.c (string map),
 * devbroker_int.h (shared internals).
 *
 * Running: rmq__devbroker_start() starts its own thread and libuv loop; everything the
 * broker owns (sockets, store, groups) lives on that thread. The control functions below are
 * synchronous and may be called from any thread except the broker's own: each one posts an
 * operation to the broker's loop and waits for it to finish. `rmqlua broker` (cli_broker.c)
 * runs the same code in the foreground.
 *
 * Ownership: the caller owns the handle between start and stop; rmq_devbroker_stop() frees it.
 * Strings returned by the address functions live as long as the handle.
 */
#ifndef RMQ_DEVBROKER_H
#define RMQ_DEVBROKER_H

#include "base/common.h"

typedef struct rmq_devbroker rmq_devbroker_t;

/* Defaults. */
#define RMQ_DEVBROKER_LISTEN_DEFAULT "127.0.0.1:9876"
#define RMQ_DEVBROKER_DEFAULT_QUEUES 8                /* TBW102 / auto-created topics */
#define RMQ_DEVBROKER_MAX_BYTES (512LL * 1024 * 1024) /* per broker; the oldest are dropped */
#define RMQ_DEVBROKER_CLUSTER "DefaultCluster"
#define RMQ_DEVBROKER_CHANNEL_EXPIRE_MS 120000 /* consumer channel idle expiry */
#define RMQ_DEVBROKER_LOCK_EXPIRE_MS 60000     /* rebalance.lockMaxLiveTime */
#define RMQ_DEVBROKER_MAX_BROKERS 16 /* masters and slaves together */
#define RMQ_DEVBROKER_MAX_SLAVES 3   /* per master */

/* Targets of the control functions: a broker index 0..N-1, or the name server. */
#define RMQ_DEVBROKER_NAMESRV (-1)
#define RMQ_DEVBROKER_ALL (-2)

/* The error "code" that makes the target close the connection instead of answering. */
#define RMQ_DEVBROKER_DISCONNECT (-1)
/* --fault only: the request is swallowed and never answered. */
#define RMQ_DEVBROKER_DROP (-2)

typedef struct rmq_devbroker_opts {
    const char *listen;        /* name server host:port; NULL = "127.0.0.1:0" (in-process) */
    int brokers;               /* 0 = 1 */
    const char *broker_listen; /* "host:port[,host:port...]" per broker; NULL = host:0 each */
    const char *broker_name;   /* name prefix; NULL = "broker" (broker-a, broker-b, ...) */
    const char *cluster;       /* NULL = RMQ_DEVBROKER_CLUSTER */
    const char *const *topics; /* "NAME[:QUEUES]" created on every broker at start */
    int n_topics;
    int default_queues;        /* 0 = RMQ_DEVBROKER_DEFAULT_QUEUES */
    double delay_scale;        /* multiplies delay-level delays; 0 = 1.0 */
    int64_t max_bytes;         /* per broker; 0 = RMQ_DEVBROKER_MAX_BYTES */
    const char *name_server;   /* register with this remote name server, serve none locally */
    int64_t channel_expire_ms; /* 0 = RMQ_DEVBROKER_CHANNEL_EXPIRE_MS */
    int64_t lock_expire_ms;    /* 0 = RMQ_DEVBROKER_LOCK_EXPIRE_MS */
    const char *store_dir;     /* NULL = memory only; else append-only files (devbroker_file.c) */
    int slaves;                /* slaves per broker, broker ids 1..slaves (devbroker_slave.c) */
    int enable_property_filter; /* serve SQL92 subscriptions (devbroker_filter.c); 0 = refuse */
    int rocketmq5; /* --rocketmq-version 5: serve as a 5.3.3 broker (POP, assignment); 0 = 4.9.4 */
    const char *const *faults; /* "CODE:RATE:KIND" random faults (devbroker_fault.c) */
    int n_faults;
    /* `rmqlua broker` only (logging is process-wide): -1 = unchanged, else RMQ_LOG_* */
    int log_level;
    const char *log_debug; /* debug categories ("remoting,broker") or NULL */
    /* Security (devbroker_acl.c, tls.h) */
    const char *acl_file;          /* plain_acl.yml: the brokers check every request */
    const char *tls_cert;          /* PEM certificate chain: serve TLS (with tls_key) */
    const char *tls_key;           /* PEM private key */
    const char *tls_key_password;  /* or NULL */
    int tls_enforcing;             /* --tls-mode enforcing (default permissive, as Java's) */
    const char *tls_verify_client; /* CA file: require client certificates it signed */
} rmq_devbroker_opts_t;

/*
 * Parse command-line style options (the flags of `rmqlua broker`, argv[0] excluded) into opts.
 * Strings in opts point into argv; topics and faults into one table the caller frees with
 * free(opts->topics).
 * Returns 0, 1 when --help was given (nothing else parsed), or RMQ_ERR_CONFIG naming the bad
 * option in errstr.
 */
int rmq__devbroker_parse_args(int argc, char **argv, rmq_devbroker_opts_t *opts, char *errstr,
                              size_t errstr_size);
/* The --help text. */
const char *rmq__devbroker_usage(void);

/*
 * Start the name server and the brokers on a new thread. Returns 0 with *out set, or
 * RMQ_ERR_CONFIG / RMQ_ERR_IO (e.g. the port is taken) with the reason in errstr.
 */
int rmq__devbroker_start(const rmq_devbroker_opts_t *opts, rmq_devbroker_t **out, char *errstr,
                         size_t errstr_size);

/* ---- FFI / embedding API (any thread but the broker's) --------------------------------------- */

/*
 * Start from a command-line style string ("--brokers 2 --topic T:4 --delay-scale 0.01"; words
 * split on blanks). The name server listens on 127.0.0.1:0 unless --listen is given. Returns
 * the handle, or NULL with the reason in errstr.
 */
RMQ_EXPORT rmq_devbroker_t *rmq_devbroker_start(const char *args, char *errstr, size_t errstr_size);
/* Stop everything, join the thread and free the handle. */
RMQ_EXPORT void rmq_devbroker_stop(rmq_devbroker_t *db);
/* "127.0.0.1:PORT" of the name server (or of the remote one with --name-server). */
RMQ_EXPORT const char *rmq_devbroker_addr(rmq_devbroker_t *db);
RMQ_EXPORT int rmq_devbroker_broker_count(rmq_devbroker_t *db);
/* Address and name of broker idx, or NULL. */
RMQ_EXPORT const char *rmq_devbroker_broker_addr(rmq_devbroker_t *db, int idx);
RMQ_EXPORT const char *rmq_devbroker_broker_name(rmq_devbroker_t *db, int idx);
/* Index (for every call taking a broker index) of slave k (1..--slaves) of broker idx, or -1.
 * Slaves come after the N brokers: rmq_devbroker_broker_count() counts them too. */
RMQ_EXPORT int rmq_devbroker_slave(rmq_devbroker_t *db, int idx, int k);

/*
 * Make the next `count` requests with this code at target (broker index, NAMESRV or ALL) fail:
 * answered with response code `code` (remark "devbroker: injected error"), or the connection is
 * closed when code is RMQ_DEVBROKER_DISCONNECT. Oneway requests are dropped. Returns 0 or
 * RMQ_ERR_INVALID.
 */
RMQ_EXPORT int rmq_devbroker_push_error(rmq_devbroker_t *db, int target, int req_code, int code,
                                        int count);
/* Clear every pushed error. */
RMQ_EXPORT void rmq_devbroker_clear_errors(rmq_devbroker_t *db);
/*
 * Take a broker down (listener and every connection closed, removed from routes; its data is
 * kept) or bring it back up on the same address. Returns 0, RMQ_ERR_INVALID or RMQ_ERR_IO.
 */
RMQ_EXPORT int rmq_devbroker_set_down(rmq_devbroker_t *db, int broker, int down);
/* Delay every answer of target for requests with req_code (0 = every code) by ms (0 = none). */
RMQ_EXPORT int rmq_devbroker_set_latency(rmq_devbroker_t *db, int target, int req_code, int ms);
/*
 * Request recording (on by default). rmq_devbroker_count(): requests received so far by target
 * (ALL = anywhere) with req_code (0 = any). rmq_devbroker_wait(): wait until at least n of them
 * arrived; returns the count reached, or -1 after timeout_ms. rmq_devbroker_reset_counts()
 * forgets every record. Codes below 1000 and the 5.x POP codes (200050..200059,
 * 200150..200159) are counted.
 */
RMQ_EXPORT int rmq_devbroker_count(rmq_devbroker_t *db, int target, int req_code);
RMQ_EXPORT int rmq_devbroker_wait(rmq_devbroker_t *db, int target, int req_code, int n,
                                  int timeout_ms);
RMQ_EXPORT void rmq_devbroker_reset_counts(rmq_devbroker_t *db);
/*
 * Connections open at the name server and the brokers (those clients made; the slaves' not
 * counted), as the broker thread sees them: a client that exited is counted until the broker
 * has read what it sent last and its close. Wait for 0 before rmq_devbroker_reset_counts() so
 * that a finished client's last requests are not recorded after the reset.
 */
RMQ_EXPORT int rmq_devbroker_connections(rmq_devbroker_t *db);
/*
 * extField `key` of the idx-th (0-based; negative counts from the last) recorded request with
 * target/req_code, copied into buf. Only the last 10000 requests are kept (counts are exact).
 * Returns the value length, or -1 when there is no such request or field.
 */
RMQ_EXPORT int rmq_devbroker_request_ext(rmq_devbroker_t *db, int target, int req_code, int idx,
                                         const char *key, char *buf, size_t size);
/*
 * The body of the same request (copied into buf, truncated to size). Returns the body length, or
 * -1 when there is no such request. Requests bigger than 4 KiB were recorded without their body.
 */
RMQ_EXPORT int rmq_devbroker_request_body(rmq_devbroker_t *db, int target, int req_code, int idx,
                                          char *buf, size_t size);
/* Create or update a topic on broker (or ALL) with `queues` read and write queues. */
RMQ_EXPORT int rmq_devbroker_create_topic(rmq_devbroker_t *db, int broker, const char *topic,
                                          int queues);
/*
 * Store a message directly (as if sent by a producer at 127.0.0.1:0): tags/keys may be NULL.
 * queue_id < 0 picks queue (count % write queues). Returns the queue offset (>= 0) or an error.
 * The topic is auto-created like a SEND would.
 */
RMQ_EXPORT int64_t rmq_devbroker_produce(rmq_devbroker_t *db, int broker, const char *topic,
                                         int queue_id, const char *tags, const char *keys,
                                         const char *body, size_t body_len);
/*
 * Test data shaping (devbroker_inject.c). rmq_devbroker_skip_offsets(): the queue's next
 * message gets an offset n higher than it would have: n offsets with nothing stored (as if
 * messages a subscription filters out had been stored and cleaned), which a pull scans past at
 * once. Returns the new max offset or an error. rmq_devbroker_corrupt(): XOR byte pos of the
 * stored form (PROTOCOL 4.1) of the message at offset with mask (1..255); every later pull sees
 * it. Returns 0 or RMQ_ERR_INVALID (no such message or byte).
 */
RMQ_EXPORT int64_t rmq_devbroker_skip_offsets(rmq_devbroker_t *db, int broker, const char *topic,
                                              int queue_id, int64_t n);
RMQ_EXPORT int rmq_devbroker_corrupt(rmq_devbroker_t *db, int broker, const char *topic,
                                     int queue_id, int64_t offset, size_t pos, unsigned mask);
/* The same with user properties: props is name\1value\2name\1value (props_len bytes, no
 * leading or trailing \2), stored after KEYS, UNIQ_KEY and TAGS. */
RMQ_EXPORT int64_t rmq_devbroker_produce_props(rmq_devbroker_t *db, int broker, const char *topic,
                                               int queue_id, const char *tags, const char *keys,
                                               const char *props, size_t props_len,
                                               const char *body, size_t body_len);
/* The suggestWhichBrokerId that broker puts in its PULL_MESSAGE responses from now on (0 by
 * default; a 4.9.4 broker suggests a slave's id to a consumer reading far behind). Any int64 is
 * taken: what a client does with an id no broker has is what a test may want to see. */
RMQ_EXPORT int rmq_devbroker_set_suggest(rmq_devbroker_t *db, int broker, int64_t broker_id);
/* The maxOffset that broker puts in its PULL_MESSAGE responses from now on, whatever the queue
 * holds (INT64_MIN, the default: the true one). A lie no sane broker tells; clients must survive
 * it. */
RMQ_EXPORT int rmq_devbroker_set_told_max(rmq_devbroker_t *db, int broker, int64_t max_offset);
/* The same for the offset of that broker's GET_MAX_OFFSET answers (any queue). */
RMQ_EXPORT int rmq_devbroker_set_told_max_query(rmq_devbroker_t *db, int broker,
                                                int64_t max_offset);
/* Max / min queue offset, or the committed offset of group (-1 when none); < -1 on errors. */
RMQ_EXPORT int64_t rmq_devbroker_max_offset(rmq_devbroker_t *db, int broker, const char *topic,
                                            int queue_id);
RMQ_EXPORT int64_t rmq_devbroker_min_offset(rmq_devbroker_t *db, int broker, const char *topic,
                                            int queue_id);
RMQ_EXPORT int64_t rmq_devbroker_committed_offset(rmq_devbroker_t *db, int broker,
                                                  const char *group, const char *topic,
                                                  int queue_id);
/* Number of live consumer connections of group on broker. */
RMQ_EXPORT int rmq_devbroker_group_size(rmq_devbroker_t *db, int broker, const char *group);
/* Owner clientId of a locked queue copied into buf; returns its length, or -1 when unlocked. */
RMQ_EXPORT int rmq_devbroker_lock_owner(rmq_devbroker_t *db, int broker, const char *group,
                                        const char *topic, int queue_id, char *buf, size_t size);

#endif
