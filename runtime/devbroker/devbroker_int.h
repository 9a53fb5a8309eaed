/*
 * devbroker_int.h -- internals of the development broker, shared by devbroker*.c.
 *
 * Ownership: the rmq_devbroker_t owns its brokers, and each broker owns its topics, queues,
 * stored messages (reference-counted: the store holds one reference, a PULL response being
 * written holds one more per message), consumer groups, offsets and locks.
 * Threads: everything here is touched only on the broker thread (the loop that runs the
 * transports), except the request records and the op queue, which are guarded by db->mu.
 */
#ifndef RMQ_DEVBROKER_INT_H
#define RMQ_DEVBROKER_INT_H

#include "protocol/cmd.h"
#include "base/codes.h"
#include "base/common.h"
#include "devbroker.h"
#include "net/remoting.h"

#include <uv.h>

/* ---- a tiny string-keyed hash map (loop thread) ---------------------------------------------- */

typedef struct db_ent {
    struct db_ent *next;
    char *key;
    void *val;
} db_ent_t;

typedef struct db_map {
    db_ent_t **b;
    size_t nb, n;
} db_map_t;

void *rmq__dbmap_get(const db_map_t *m, const char *key);
/* Insert or replace; returns the previous value (NULL when new). key is copied. */
void *rmq__dbmap_put(db_map_t *m, const char *key, void *val);
/* Remove; returns the value or NULL. */
void *rmq__dbmap_del(db_map_t *m, const char *key);
/* Call fn for each entry (fn must not modify the map). */
void rmq__dbmap_each(const db_map_t *m, void (*fn)(const char *key, void *val, void *ud), void *ud);
/* Free the table and keys; values through free_val when not NULL. */
void rmq__dbmap_free(db_map_t *m, void (*free_val)(void *));

/* ---- store ----------------------------------------------------------------------------------- */

typedef struct db_queue db_queue_t;

/* Messages of one queue are laid out back to back in chunks, so a PULL response is mostly
 * one contiguous buffer (one iovec). A chunk lives while a message in it lives. */
typedef struct db_chunk {
    int refs; /* messages in it + 1 while it is its queue's current chunk */
    size_t cap, used;
    char data[];
} db_chunk_t;

#define DB_CHUNK_SIZE (256 * 1024)

typedef struct db_msg {
    int refs;          /* loop thread only */
    db_chunk_t *chunk; /* holds data */
    int has_tag;       /* TAGS present */
    int32_t tagcode;   /* J-hash of TAGS */
    int64_t qoff;      /* queue offset */
    int64_t phys;      /* commit log offset */
    int64_t store_ts;
    db_queue_t *q;
    uint32_t size; /* bytes at data */
    char *data;    /* the stored form (PROTOCOL 4.1), inside chunk */
} db_msg_t;

struct db_queue {
    struct db_topic *topic;
    int id;
    db_msg_t **ring; /* n messages starting at ring[head % cap], ascending qoff */
    size_t cap, head, n;
    int64_t min_off;        /* queue offset of the first retained message */
    int64_t max_off;        /* queue offset the next message gets */
    int gaps;               /* offsets were skipped (rmq_devbroker_skip_offsets): the ring is
                             * not dense, lookups search it */
    struct db_park *parked; /* long-polling pulls waiting on this queue */
    db_chunk_t *cur;        /* chunk new messages go into */
};

typedef struct db_topic {
    char *name;
    int read_q, write_q, perm, sys_flag, order;
    db_queue_t **queues; /* nq allocated (>= max(read_q, write_q)); never shrinks */
    int nq;
    int64_t sent; /* messages stored (queue choice for produce) */
} db_topic_t;

/* A message that waits for its delay level before being stored. */
typedef struct db_delayed {
    struct db_delayed *next;
    int64_t due_ms; /* monotonic */
    char *topic;
    int queue_id;
    int32_t flag, sys_flag, reconsume;
    int64_t born_ts;
    uint8_t born_host[16];
    int born_ip_len;
    int32_t born_port;
    char *body;
    size_t body_len;
    char *props;
    size_t props_len;
} db_delayed_t;

/* ---- clients and groups ---------------------------------------------------------------------- */

typedef struct db_client {
    rmq_conn_t *conn; /* kept reference */
    struct db_broker *b;
    char *client_id;
    int language, version;
    int64_t last_ms; /* monotonic, last heartbeat */
    char addr[64];
} db_client_t;

typedef struct db_group {
    char *name;
    char *consume_type, *message_model, *consume_from_where;
    db_client_t **members;
    int n_members, cap_members;
    db_map_t subs; /* topic -> rmq_sub_t (subscription.h) */
} db_group_t;

typedef struct db_lock {
    char *client_id;
    int64_t last_ms;
} db_lock_t;

/* A parked PULL_MESSAGE (long polling). */
typedef struct db_park {
    struct db_park *qnext, *qprev; /* on q->parked */
    struct db_park *bnext, *bprev; /* on b->parks */
    db_queue_t *q;
    struct rmq_sub *sub; /* the filter (a copy), NULL = every message */
    struct rmq_sql92 *expr; /* SQL92: the compiled filter (own copy), NULL = none */
    struct db_broker *b;
    rmq_conn_t *conn;  /* kept */
    rmq_rbuf_t *frame; /* kept: the request is decoded again when woken */
    int64_t offset;
    uv_timer_t timer;
    int closing;
} db_park_t;

/* Faults and latency per request code. */
typedef struct db_fault {
    struct db_fault *next;
    int req_code, code, count;
} db_fault_t;

typedef struct db_latency {
    struct db_latency *next;
    int req_code, ms;
} db_latency_t;

/* What the name server and the brokers share: a served endpoint. */
typedef struct db_node {
    struct rmq_devbroker *db;
    int is_ns;
    int idx;           /* broker index, or RMQ_DEVBROKER_NAMESRV */
    rmq_remoting_t *t; /* NULL while down */
    char host[64];
    int port;
    char addr[80];
    uint8_t store_ip[4]; /* STOREHOST address: host when IPv4 (not 0.0.0.0), else 127.0.0.1 */
    db_fault_t *faults;
    db_latency_t *latency;
    struct {
        int code;
        void (*fn)(struct db_node *node, rmq_conn_t *conn, rmq_cmd_t *req);
    } h[64];
    int nh;
} db_node_t;

typedef struct db_broker {
    db_node_t node;
    char name[64];
    int down;
    db_map_t topics;  /* name -> db_topic_t */
    db_map_t groups;  /* name -> db_group_t */
    db_map_t offsets; /* "group\001topic\001qid" -> int64_t* */
    db_map_t locks;   /* "group\001topic\001qid" -> db_lock_t */
    db_map_t filters; /* "group\001topic" -> SQL92 filter data (devbroker_filter.c) */
    /* commit log: every retained message in physical order */
    db_msg_t **log;
    size_t log_cap, log_head, log_n;
    int64_t next_phys;
    int64_t bytes;
    db_delayed_t *delayed; /* sorted by due_ms */
    uv_timer_t delay_timer;
    int64_t sched_off[18]; /* SCHEDULE_TOPIC_XXXX queue offsets (send responses) */
    int64_t data_version, reg_version;
    db_park_t *parks;
    int64_t hold_check_ms; /* last PullRequestHoldService check (monotonic) */
    /* --store: append-only commit log and the saved tables (devbroker_file.c) */
    char *dir;
    int log_fd; /* -1 without --store */
    struct db_broker *master; /* a slave's master (devbroker_slave.c); NULL for a master */
    int64_t id;               /* broker id: 0 master, 1.. slave */
    int64_t last_sync_ms;     /* a slave: last offsets sync from its master (monotonic) */
    int offsets_dirty, topics_dirty;
    struct db_index *index; /* keys of the stored messages (devbroker_index.c); NULL = none yet */
    struct db_stats *stats;         /* put/get counters (devbroker_stats.c), NULL until used */
    struct db_subgroups *subgroups; /* subscription group configs (devbroker_group.c) */
    struct db_admin *admin;         /* producers, deleted topics (devbroker_admin.c) */
    int64_t boot_ms;                /* wall clock at start (bootTimestamp) */
    int64_t suggest_id;             /* suggestWhichBrokerId of pull responses (devbroker_inject.c) */
    int64_t told_max;               /* maxOffset pull responses report; INT64_MIN = the true one */
    int64_t told_max_query;         /* the same for GET_MAX_OFFSET answers */
    /* The store's MessageArrivingListener, set by rmq__db_pull_install: m was stored in q (the
     * pulls parked on it may run), or m NULL: q's topic is being deleted. NULL = nobody
     * listens. The store calls nothing above it but this. */
    void (*arriving)(struct db_broker *b, db_queue_t *q, db_msg_t *m);
    struct db_modes *modes; /* message request modes (devbroker_assign.c), NULL = none set */
    struct db_pop *pop; /* POP consumption and request modes (devbroker_pop.c), NULL = none yet */
} db_broker_t;

static inline db_broker_t *rmq__db_broker_of(db_node_t *node)
{
    return (db_broker_t *)node;
}

/* A broker registered by another process (REGISTER_BROKER). */
typedef struct db_remote {
    struct db_remote *next;
    char *name, *cluster, *addr;
    int64_t last_ms;
    rmq_conn_t *conn; /* kept; the registration dies with it */
    db_map_t topics;  /* name -> db_topic_t (queue counts only) */
} db_remote_t;

/* A recorded request: its frame (or, for a big one, a copy of its header alone), decoded only
 * when rmq_devbroker_request_ext asks. */
typedef struct db_rec {
    struct db_rec *next;
    int target, code;
    rmq_rbuf_t *frame;
} db_rec_t;

#define DB_REC_FRAME_MAX 4096 /* bigger request frames: only the header is kept */

#define DB_MAX_RECS 10000 /* requests kept for rmq_devbroker_request_ext */
#define DB_CODES 1024     /* request codes counted */

/* The slot of a request code in the counts: the code itself below 1000, the 5.x POP codes
 * 200050..200059 and 200150..200159 in 1000..1019; -1 for a code not counted. */
static inline int rmq__db_count_slot(int code)
{
    if (code >= 0 && code < 1000) return code;
    if (code >= 200050 && code < 200060) return 1000 + code - 200050;
    if (code >= 200150 && code < 200160) return 1010 + code - 200150;
    return -1;
}

typedef struct db_op {
    struct db_op *next;
    void (*fn)(struct rmq_devbroker *db, void *arg);
    void *arg;
    int done;
} db_op_t;

struct rmq_devbroker {
    uv_loop_t loop;
    uv_thread_t thread;
    uv_async_t async;
    uv_timer_t scan_timer; /* channel expiry, lock expiry, remote broker expiry, re-register */
    uv_mutex_t mu;
    uv_cond_t cond;
    db_op_t *ops, *ops_tail;
    struct db_deferred *deferred; /* requests delayed by injected latency */
    db_rec_t *recs, *recs_tail;   /* the last DB_MAX_RECS requests, oldest first */
    int n_recs;
    int recording;
    int counts[RMQ_DEVBROKER_MAX_BROKERS + 1][DB_CODES]; /* [0] name server, [i + 1] broker i */
    uint8_t unsupported_logged[65536 / 8]; /* codes logged as unsupported (broker thread) */
    int stopping;

    rmq_devbroker_opts_t o; /* strings below are owned copies */
    char *cluster;
    char *remote_ns; /* --name-server */
    char *store_dir; /* --store */
    int default_queues;
    double delay_scale;
    int property_filter; /* --enable-property-filter (BrokerConfig.enablePropertyFilter) */
    int rocketmq5;       /* --rocketmq-version 5: a 5.3.3 broker (devbroker_pop.c, _assign.c) */
    int64_t max_bytes, channel_expire_ms, lock_expire_ms;
    struct rmq_tls_ctx *tls; /* --tls-cert/--tls-key: name server and brokers serve TLS */
    int tls_enforcing;       /* --tls-mode enforcing: plain clients are refused */
    struct db_acl *acl;      /* --acl: the brokers check every request */

    int has_ns;
    db_node_t ns;
    db_remote_t *remotes;
    int n_brokers;
    db_broker_t *brokers[RMQ_DEVBROKER_MAX_BROKERS];
    char ns_addr[80];
    int64_t last_register_ms;
    struct db_rfault *rfaults; /* --fault rules (devbroker_fault.c) */
    uint64_t rng;
};

/* devbroker_fault.c: --fault CODE:RATE:KIND. parse checks one spec (outputs may be NULL);
 * init installs the rules at start; roll returns 1 when it handled req (the gate stops). */
typedef struct db_rfault db_rfault_t;
int rmq__db_fault_parse(const char *spec, int *req_code, double *rate, int *code, char *errstr,
                        size_t errstr_size);
int rmq__db_faults_init(rmq_devbroker_t *db, const char *const *specs, int n, char *errstr,
                        size_t errstr_size);
void rmq__db_faults_free(rmq_devbroker_t *db);
int rmq__db_fault_roll(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req);

/* devbroker_store.c */
db_topic_t *rmq__db_topic_get(db_broker_t *b, const char *name);
/* Create (or update when queues > 0 and it exists) a topic; queues <= 0 = default count. */
db_topic_t *rmq__db_topic_create(db_broker_t *b, const char *name, int read_q, int write_q,
                                 int perm);
db_queue_t *rmq__db_queue(db_topic_t *t, int qid); /* NULL when qid out of range */
static inline int64_t rmq__db_qmax(const db_queue_t *q)
{
    return q->max_off;
}
db_msg_t *rmq__db_qget(const db_queue_t *q, int64_t off); /* NULL when not retained */
/* The retained message with the smallest queue offset >= off, or NULL. */
db_msg_t *rmq__db_qnext(const db_queue_t *q, int64_t off);
/* Remove topic t and its messages (DELETE_TOPIC_IN_BROKER); parked pulls on it are answered
 * first. */
void rmq__db_topic_delete(db_broker_t *b, db_topic_t *t);
void rmq__db_msg_release(db_msg_t *m);
/* A new message record with size bytes of data in q's current chunk (refs 1). */
db_msg_t *rmq__db_msg_alloc(db_queue_t *q, size_t size);

typedef struct db_msg_in {
    const char *topic;
    int queue_id;
    int32_t flag, sys_flag, reconsume;
    int64_t born_ts;
    const uint8_t *born_host;
    int born_ip_len;
    int32_t born_port;
    const char *body;
    size_t body_len;
    const char *props;
    size_t props_len;
} db_msg_in_t;

/* Store a message now in topic t; returns it (owned by the store) or NULL (errstr). */
db_msg_t *rmq__db_store(db_broker_t *b, db_topic_t *t, const db_msg_in_t *in, char *errstr,
                        size_t errstr_size);
/* Append m (already encoded, phys/qoff set) to its queue and the commit log order. */
void rmq__db_attach(db_broker_t *b, db_msg_t *m);
/* Keep a copy and store it after delay_ms (into in->topic, created on demand). */
void rmq__db_store_delayed(db_broker_t *b, const db_msg_in_t *in, int64_t delay_ms);
void rmq__db_broker_store_init(db_broker_t *b);
void rmq__db_broker_store_free(db_broker_t *b);
/* Binary search by store timestamp (ConsumeQueue.getOffsetInQueueByTime). */
int64_t rmq__db_search_time(const db_queue_t *q, int64_t ts);

/* devbroker_broker.c: SEND, CONSUMER_SEND_MSG_BACK, UPDATE_AND_CREATE_TOPIC */
void rmq__db_broker_install(db_broker_t *b); /* every handler of a broker, on b->node */

/* devbroker_pull.c: PULL_MESSAGE and long polling */
void rmq__db_pull_install(db_broker_t *b); /* the handler and b->arriving */
/* Drop every parked pull (broker going down or stopping). */
void rmq__db_drop_parked(db_broker_t *b);
void rmq__db_pull_conn_closed(db_broker_t *b, rmq_conn_t *conn); /* drop conn's parked pulls */
void rmq__db_pull_hold_check(db_broker_t *b, int64_t now_mono); /* every scan */

/* devbroker_pop.c: RocketMQ 5.x POP consumption (POP_MESSAGE with long polling, ACK_MESSAGE,
 * BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, revive) */
void rmq__db_pop_install(db_broker_t *b);
/* The store's arrival of m in q: the pops parked on its topic run again (from arriving). */
void rmq__db_pop_arriving(db_broker_t *b, db_queue_t *q, db_msg_t *m);
void rmq__db_pop_conn_closed(db_broker_t *b, rmq_conn_t *conn); /* drop conn's parked pops */
void rmq__db_pop_drop_parked(db_broker_t *b);                   /* answer none, drop all */
/* Revive every message whose invisible time has passed (every broker scan). */
void rmq__db_pop_revive(db_broker_t *b, int64_t now_mono);
void rmq__db_pop_free(db_broker_t *b);

/* devbroker_assign.c: QUERY_ASSIGNMENT, SET_MESSAGE_REQUEST_MODE and
 * GET_ALL_MESSAGE_REQUEST_MODE (MessageRequestModeManager, QueryAssignmentProcessor) */
void rmq__db_assign_install(db_broker_t *b);
void rmq__db_assign_free(db_broker_t *b);

/* devbroker_offset.c: consumer offsets and queue locks */
void rmq__db_offset_install(db_broker_t *b);
int64_t rmq__db_offset_get(db_broker_t *b, const char *group, const char *topic, int qid);
void rmq__db_offset_set(db_broker_t *b, const char *group, const char *topic, int qid, int64_t v);
/* The iteration order of a java.util.HashMap<MessageQueue, V> of queues 0..n-1 of a topic. */
void rmq__db_mq_hash_order(const char *broker, const char *topic, int n, int *order);
/* A MessageQueue as JSON: {"brokerName":...,"queueId":...,"topic":...}. */
void rmq__db_mq_json(rmq_buf_t *o, const char *broker, int qid, const char *topic);
void rmq__db_offsets_free(db_broker_t *b); /* the offset and lock tables */
/* The topics group has offsets of, each once: at most max copies into topics (the caller frees
 * them); returns the count. */
int rmq__db_offset_topics(db_broker_t *b, const char *group, char **topics, int max);
void rmq__db_offsets_drop_group(db_broker_t *b, const char *group); /* removeOffset */

/* devbroker_client.c: clients, consumer groups, calls relayed to consumers */
void rmq__db_client_install(db_broker_t *b);
void rmq__db_broker_conn_closed(db_broker_t *b, rmq_conn_t *conn);
void rmq__db_broker_scan(db_broker_t *b, int64_t now_mono);
void rmq__db_broker_free_groups(db_broker_t *b);

/* devbroker_register.c: register this process's brokers with the remote name server
 * (REGISTER_BROKER). */
void rmq__db_register_all(struct rmq_devbroker *db);

/* devbroker_stored.c: a stored message read back. The retained message at commit-log offset
 * phys, or NULL; and the fields of a stored message. */
db_msg_t *rmq__db_find_phys(db_broker_t *b, int64_t phys);
typedef struct db_stored {
    const char *topic;
    size_t topic_len;
    const char *body, *props;
    size_t body_len, props_len;
    int32_t flag, sys_flag, reconsume;
    int64_t born_ts;
    uint8_t born_host[16];
    int born_ip_len;
    int32_t born_port;
} db_stored_t;
int rmq__db_stored_parse(const db_msg_t *m, db_stored_t *v); /* 0 or -1 (malformed) */
/* A message to store again from v: its flags, reconsumeTimes, born fields and body (borrowed);
 * topic, queue and properties zero. */
db_msg_in_t rmq__db_stored_in(const db_stored_t *v);

/* devbroker_filter.c: SQL92 subscriptions (ConsumerFilterManager, checkClientConfig). */
struct rmq_sub;
struct rmq_sql92;
int rmq__db_filter_is_tag(const char *type);
/* Compile a filter expression as FilterFactory.get(type).compile does; errstr is the message a
 * broker reports ("<exception class>: <message>"). */
int rmq__db_filter_compile(const char *type, const char *expression, struct rmq_sql92 **out,
                           char *errstr, size_t errstr_size);
/* A heartbeat stored a new subscription of group: register its filter data when not TAG. */
void rmq__db_filter_register(db_broker_t *b, const char *group, const struct rmq_sub *sub);
void rmq__db_filter_free_all(db_broker_t *b);
/*
 * The filter a pull uses. sub is the request's subscription (from_request: the SUBSCRIPTION
 * flag) or the group's registered one. Returns 0 for TAG (no expression), 1 with *expr (the
 * caller frees it; NULL means "no filter data: every message matches"), or -1 after answering
 * the request (FILTER_DATA_NOT_EXIST / _NOT_LATEST, or SYSTEM_ERROR without property filtering).
 */
int rmq__db_filter_for_pull(db_broker_t *b, rmq_conn_t *conn, const rmq_cmd_t *req,
                            const char *group, const struct rmq_sub *sub, int from_request,
                            int64_t sub_version, struct rmq_sql92 **expr);
/* isMatchedByCommitLog: 1 when m's properties satisfy expr (expr NULL: 1). */
int rmq__db_filter_match(const struct rmq_sql92 *expr, const db_msg_t *m);
void rmq__db_h_check_client_config(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req);

/* devbroker_recover.c: --store DIR opened and recovered, its tables saved */
int rmq__db_file_open(db_broker_t *b, const char *root, char *errstr, size_t errstr_size);
void rmq__db_file_flush(db_broker_t *b); /* save dirty topic and offset tables */
void rmq__db_file_close(db_broker_t *b);

/* devbroker_file.c: the files of DIR/<broker> */
void rmq__db_file_append(db_broker_t *b, const db_msg_t *m);
void rmq__db_file_path(const db_broker_t *b, const char *name, char *out, size_t size);
/* The port the broker listened on in its last run (DIR/<broker>/port), 0 when unknown; and
 * saving the one it listens on now. */
int rmq__db_file_port(const db_broker_t *b);
void rmq__db_file_save_port(db_broker_t *b);
/* Replace DIR/<broker>/name with data (a temporary file renamed); 0 or -1 (errno). */
int rmq__db_file_save(const db_broker_t *b, const char *name, const rmq_buf_t *data);
/* The whole of DIR/<broker>/name, NUL-terminated (the caller frees it), or NULL. */
char *rmq__db_file_read(const db_broker_t *b, const char *name, size_t *len);

/* devbroker_slave.c: --slaves */
/* Start `per_master` slaves for every broker (after the brokers and their topics exist). */
int rmq__db_slaves_start(struct rmq_devbroker *db, int per_master, char *errstr,
                         size_t errstr_size);
/* Every 10 s, each slave whose master is up takes the master's consumer offsets. */
void rmq__db_slaves_sync(struct rmq_devbroker *db, int64_t now_mono);

/* devbroker_acl.c: --acl FILE (plain_acl.yml), checked on every broker request */
typedef struct db_acl db_acl_t;
/* Read and check the file (before the broker thread starts). 0 or RMQ_ERR_CONFIG naming it. */
int rmq__db_acl_load(const char *path, db_acl_t **out, char *errstr, size_t errstr_size);
void rmq__db_acl_free(db_acl_t *acl);
/* 0: allowed. Else the request was refused and answered (not for oneway) and must not be
 * served. Broker thread. */
int rmq__db_acl_check(const db_acl_t *acl, rmq_conn_t *conn, const rmq_cmd_t *req);

/* devbroker_index.c: the message index (UNIQ_KEY and KEYS) and QUERY_MESSAGE /
 * VIEW_MESSAGE_BY_ID. Broker thread. */
typedef struct db_index db_index_t;
void rmq__db_index_install(db_broker_t *b);                   /* from rmq__db_broker_install */
void rmq__db_index_add(db_broker_t *b, const db_msg_t *m);    /* m joined the store */
void rmq__db_index_forget(db_broker_t *b, const db_msg_t *m); /* m (the oldest) left it */
/* Forget every key of topic (its messages no longer answer QUERY_MESSAGE). */
void rmq__db_index_drop_topic(db_broker_t *b, const char *topic);
size_t rmq__db_index_entries(const db_broker_t *b); /* live index entries */
/* The commit-log offsets (into out, room for max) of the newest max messages stored under
 * topic#key with a store timestamp in [begin, end], in commit-log order; returns the count. */
int rmq__db_index_query(const db_broker_t *b, const char *topic, const char *key, int max,
                        int64_t begin, int64_t end, int64_t *out);
void rmq__db_index_free(db_broker_t *b);
/* devbroker_stats.c: BrokerStatsManager's counters. */
enum {
    DB_STAT_TOPIC_PUT_NUMS,
    DB_STAT_TOPIC_PUT_SIZE,
    DB_STAT_GROUP_GET_NUMS,
    DB_STAT_GROUP_GET_SIZE,
    DB_STAT_SNDBCK_PUT_NUMS,
    DB_STAT_BROKER_PUT_NUMS,
    DB_STAT_BROKER_GET_NUMS,
    DB_STAT_N
};
typedef struct db_stats db_stats_t;
typedef struct db_stat_item db_stat_item_t;
typedef struct db_stats_totals {
    int64_t put_times, put_size, get_transferred;
    double put_tps[3], get_found_tps[3], get_miss_tps[3], get_total_tps[3],
        get_transferred_tps[3]; /* over 10 s, 60 s, 600 s */
} db_stats_totals_t;
int rmq__db_stats_name(const char *name); /* DB_STAT_* or -1 */
void rmq__db_stats_add(db_broker_t *b, int name, const char *key, int64_t value, int64_t times);
/* Hooks: msgs sent to topic (bytes: their stored size, as getWroteBytes); a pull of group
 * answered with msgs messages (0: nothing found); a CONSUMER_SEND_MSG_BACK of a message of
 * topic (its RETRY_TOPIC when it has one). */
void rmq__db_stats_on_put(db_broker_t *b, const char *topic, int64_t msgs, int64_t bytes);
void rmq__db_stats_on_get(db_broker_t *b, const char *topic, const char *group, int64_t msgs,
                          int64_t bytes);
void rmq__db_stats_on_send_back(db_broker_t *b, const char *topic, const char *group);
void rmq__db_stats_on_store(db_broker_t *b, int64_t bytes); /* any message stored */
/* BrokerStatsData JSON of one item into o; -1 when the item does not exist. */
int rmq__db_stats_view(db_broker_t *b, int name, const char *key, rmq_buf_t *o);
double rmq__db_stats_group_tps(db_broker_t *b, const char *topic, const char *group);
void rmq__db_stats_totals(db_broker_t *b, db_stats_totals_t *out);
void rmq__db_stats_free(db_broker_t *b);
void rmq__db_java_double(rmq_buf_t *o, double d); /* Double.toString */

/* devbroker_group.c: subscription group configs (SubscriptionGroupManager). */
typedef struct db_subgroup {
    char *name;
    int consume_enable, consume_from_min_enable, consume_broadcast_enable;
    int notify_consumer_ids_changed_enable;
    int32_t retry_queue_nums, retry_max_times;
    int64_t broker_id, which_broker_when_consume_slowly;
} db_subgroup_t;
/* findSubscriptionGroupConfig: the group's config, created with the defaults when missing
 * (autoCreateSubscriptionGroup). */
db_subgroup_t *rmq__db_subgroup_find(db_broker_t *b, const char *group);
/* The group's config only when it exists. */
db_subgroup_t *rmq__db_subgroup_get(db_broker_t *b, const char *group);
void rmq__db_subgroup_each(db_broker_t *b, void (*fn)(db_subgroup_t *g, void *ud), void *ud);
void rmq__db_group_install(db_broker_t *b);
void rmq__db_subgroups_free(db_broker_t *b);
/* --store: DIR/<broker>/subscriptionGroups, read at start and written when changed. */
void rmq__db_subgroups_load(db_broker_t *b);
void rmq__db_subgroups_flush(db_broker_t *b);

/* devbroker_admin.c: the admin requests of mqadmin and the Dashboard. */
void rmq__db_admin_install(db_broker_t *b);
void rmq__db_admin_ns_install(struct rmq_devbroker *db);
/* HEART_BEAT: the producerDataSet of client c (ProducerManager.registerProducer). */
struct db_client;
void rmq__db_producers_heartbeat(db_broker_t *b, struct db_client *c, const char *const *groups,
                                 int n);
void rmq__db_producers_unregister(db_broker_t *b, struct db_client *c, const char *group);
void rmq__db_producers_drop(db_broker_t *b, struct db_client *c); /* its connection closed */
/* The start of a ProducerConnection / ConsumerConnection body: {"connectionSet":[...] with
 * the clientAddr, clientId, language and version of each of n clients (the caller goes on). */
void rmq__db_conn_set_json(rmq_buf_t *o, struct db_client *const *members, int n);
void rmq__db_admin_free(db_broker_t *b);
/* --store: a message of a deleted topic older than its deletion is not recovered. */
void rmq__db_deleted_load(db_broker_t *b);
int rmq__db_deleted_skip(db_broker_t *b, const char *topic, int64_t phys);

/* devbroker_ns.c */
void rmq__db_ns_install(struct rmq_devbroker *db);
void rmq__db_ns_conn_closed(struct rmq_devbroker *db, rmq_conn_t *conn);
void rmq__db_ns_scan(struct rmq_devbroker *db, int64_t now_mono);
void rmq__db_ns_free(struct rmq_devbroker *db);

/* devbroker.c: a node's address and listener (for devbroker_slave.c). */
int rmq__db_node_init(struct rmq_devbroker *db, db_node_t *node, int idx, const char *addr,
                      char *errstr, size_t errstr_size);
int rmq__db_node_up(db_node_t *node, char *errstr, size_t errstr_size);

/* devbroker.c: run fn(db, arg) on the broker's loop and wait for it (control functions). */
void rmq__db_run_sync(struct rmq_devbroker *db, void (*fn)(struct rmq_devbroker *, void *),
                      void *arg);

/* devbroker_reply.c: the handler table the request gate of devbroker.c serves, the replies, and
 * the readers of request fields (calls nothing else of the development broker). */
typedef void (*db_handler_fn)(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req);
/* Set the handler of a request code; before the node is up (rmq__db_node_up registers the
 * table with the transport). */
void rmq__db_set_handler(db_node_t *node, int code, db_handler_fn fn);
/* Reply helpers (errors are logged only: the peer may be gone). */
void rmq__db_reply(rmq_conn_t *conn, rmq_cmd_t *resp);
void rmq__db_reply_code(rmq_conn_t *conn, const rmq_cmd_t *req, int code, const char *remark);
/* The same with a remark formatted as printf does (cut at 1023 bytes). */
void rmq__db_reply_codef(rmq_conn_t *conn, const rmq_cmd_t *req, int code, const char *fmt, ...)
    RMQ_PRINTF(4, 5);
/* A required header field; when absent, answers as Java's header decoding does
 * (SYSTEM_ERROR, "the custom field <key> is null") and returns NULL. */
const char *rmq__db_need_ext(rmq_conn_t *conn, const rmq_cmd_t *req, const char *key);
/* A read or ack of a topic the broker does not have: TOPIC_NOT_EXIST with Java's remark. */
void rmq__db_reply_no_topic(rmq_conn_t *conn, const rmq_cmd_t *req, const char *topic);
/* A queue id outside 0..read_q-1 (or the range of the request): code with Java's remark naming
 * the topic, readQueueNums and the peer. */
void rmq__db_reply_bad_qid(rmq_conn_t *conn, const rmq_cmd_t *req, int code, const char *topic,
                           int64_t qid, int read_q);
/* The checks of a request reading queue qid of topic (t as found, or NULL), in the order of
 * Java's PullMessageProcessor and PopMessageProcessor: the topic exists, is readable ("the
 * topic[x] <verb> message is forbidden") and min_qid <= qid < readQueueNums. Answers the first
 * that fails and returns -1; 0 when all pass. */
int rmq__db_check_read(rmq_conn_t *conn, const rmq_cmd_t *req, const db_topic_t *t,
                       const char *topic, int64_t qid, int64_t min_qid, const char *verb);
/* Reply with a body the caller still owns (not sent for oneway requests). */
void rmq__db_reply_body(rmq_conn_t *conn, const rmq_cmd_t *req, int code, const char *remark,
                        const rmq_buf_t *body);
/* Required and optional header fields of one request: the first one missing or malformed
 * answers it (SYSTEM_ERROR with Java's message) and sets failed; later ones answer nothing. */
typedef struct db_hdr {
    rmq_conn_t *conn;
    const rmq_cmd_t *req;
    int failed;
} db_hdr_t;
const char *rmq__db_hdr_str(db_hdr_t *h, const char *key);
int64_t rmq__db_hdr_i64(db_hdr_t *h, const char *key);
/* An optional number: def when absent (*present, when not NULL, says which). */
int64_t rmq__db_hdr_opt_i64(db_hdr_t *h, const char *key, int64_t def, int *present);
/* Parse a request's JSON body; on failure answer SYSTEM_ERROR "bad <what>: <why>" and return
 * NULL. The caller frees the document. */
struct rmq_fjdoc;
struct rmq_fjdoc *rmq__db_parse_body(rmq_conn_t *conn, rmq_cmd_t *req, const char *what);

#define DB_LOG "devbroker"

/* MQVersion.Version.V5_3_3.ordinal(): what a --rocketmq-version 5 broker reports. */
#define DB_VERSION_V5_3_3 479

#endif
