/*
 * consumer_int.h -- private state of the push consumer engine, shared by its files: client.c
 * (start, broker requests, shutdown), instance.c (the state the parts share), queue.c, routes.c
 * (routes, heartbeats), check_client.c, direct.c, assignment.c (RocketMQ 5 QUERY_ASSIGNMENT),
 * pop.c (RocketMQ 5 POP), rebalance.c, pull.c, flow.c, undecodable.c,
 * consume.c, consume_orderly.c, offset_store.c, offset_local.c and stats.c. Which file declares
 * what, and the order they call each other in, is at the end ("the files of the engine").
 *
 * Ownership: the consumer owns everything reachable from rmq_consumer_t. An owned queue
 * (rmq_qent_t) is reference-counted: one reference for the queue table, one per pull in flight,
 * one per batch or send-back in flight and one per locally retried batch. A dropped queue leaves
 * the table at once; it is freed when its last reference goes. Messages are owned by whichever
 * batch / send-back holds them (the process queue only indexes them), and released with
 * rmq__msg_release() when resolved or abandoned.
 * Threads: everything here is touched on the loop thread only, except the fields marked
 * "any thread" (stop flag, stats snapshot under stats_mu).
 */
#ifndef RMQ_CONSUMER_INT_H
#define RMQ_CONSUMER_INT_H

#include "allocate.h"
#include "base/codes.h"
#include "conf.h"
#include "consumer.h"
#include "flow.h"
#include "handler.h"
#include "memtrim.h"
#include "protocol/message.h"
#include "process_queue.h"
#include "producer/producer.h"
#include "net/remoting.h"
#include "stats.h"
#include "protocol/subscription.h"
#include "net/tls.h"

#include <stdatomic.h>
#include <uv.h>

/* Java constants (PROTOCOL.md 5, 6). */
#define RMQ_PULL_SUSPEND_MS 15000          /* BROKER_SUSPEND_MAX_TIME_MILLIS */
#define RMQ_PULL_TIMEOUT_MS 30000          /* CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND */
#define RMQ_FLOW_CONTROL_DELAY_MS 50       /* PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL */
#define RMQ_OFFSET_ILLEGAL_DELAY_MS 10000
#define RMQ_SENDBACK_RETRY_DELAY_MS 5000   /* submitConsumeRequestLater */
#define RMQ_REBALANCE_INTERVAL_MS 20000    /* rocketmq.client.rebalance.waitInterval */
#define RMQ_PULL_MAX_IDLE_MS 120000        /* rocketmq.client.pull.pullMaxIdleTime */
#define RMQ_OFFSET_TIMEOUT_MS 5000         /* QUERY/UPDATE_CONSUMER_OFFSET */
#define RMQ_ADMIN_TIMEOUT_MS 6000          /* GET_MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP */
#define RMQ_SENDBACK_TIMEOUT_MS 5000       /* CONSUMER_SEND_MSG_BACK */
#define RMQ_MAX_RECONSUME_DEFAULT 16

/* ---- client state machine ------------------------------------------------------------------- */

typedef enum {
    RMQ_CLIENT_CREATED = 0,
    RMQ_CLIENT_STARTING,  /* pool started, first routes/heartbeats in flight */
    RMQ_CLIENT_RUNNING,
    RMQ_CLIENT_DRAINING,  /* stop requested: no more pulls, waiting for in-flight batches */
    RMQ_CLIENT_CLOSING,   /* offsets persisted, unregistering, closing handles */
    RMQ_CLIENT_STOPPED
} rmq_client_state_t;

/* ---- rebalance state machine ---------------------------------------------------------------- */

typedef enum {
    RMQ_RB_IDLE = 0,
    RMQ_RB_RUNNING, /* consumer lists / start offsets being fetched */
} rmq_rb_state_t;

/* ---- subscriptions ---------------------------------------------------------------------------- */

enum { RMQ_CHECK_NONE = 0, RMQ_CHECK_PENDING, RMQ_CHECK_DONE };

typedef struct rmq_csub {
    rmq_sub_t *sd;    /* SubscriptionData: topic (wire, namespace-wrapped), tags, subVersion */
    /* The subscribe set from the last route: readable queues, sorted Java order. */
    rmq_mq_t *mqs;
    int n_mqs;
    int have_route;
    int route_inflight;
    int check_state; /* RMQ_CHECK_*: CHECK_CLIENT_CONFIG of a non-TAG subscription */
    int pop_retry;   /* the POP retry topic %RETRY%<group>_<topic> of a subscribed topic
                      * (client_rebalance false): pulled only while the topic is not popped */
    rmq_topic_stats_t st;  /* statistics of this topic's queues (stats.h) */
} rmq_csub_t;

/* ---- owned queue ------------------------------------------------------------------------------ */

typedef struct rmq_qent {
    rmq_consumer_t *c;
    struct rmq_qent *next; /* queue table (singly linked) */
    struct rmq_qent *live_prev, *live_next; /* c->live: every entry alive, in the table or not */
    rmq_mq_t mq;           /* owned strings */
    rmq_csub_t *sub;       /* the subscription of mq.topic (re-pointed when a reload replaces
                            * subs, for every live entry, dropped ones too; NULL once its topic
                            * is no longer subscribed) */
    char *name;            /* "topic@broker#qid" for logs (owned; sized to fit) */
    rmq_pq_t pq;
    int refs;
    int in_table;
    uint64_t gen;          /* unique per assignment; results for another gen are ignored */
    int64_t next_offset;   /* next offset to pull */
    int64_t offset;        /* in-memory committed offset, -1 = none */
    int64_t broker_max;    /* maxOffset from the last pull response, -1 unknown */
    int64_t suggest_broker_id;
    int pull_inflight;
    int timer_armed;
    uv_timer_t timer;      /* pull later */
    /* orderly consumption (consume_orderly.c) */
    int locked;            /* the broker lock is held (LOCK_BATCH_MQ said so); written atomically
                            * (rmq__consume_begin reads it on a consume thread) */
    int64_t last_lock_ms;  /* monotonic time of the last successful lock (the same) */
    int consuming;         /* a batch of this queue is in the pool */
    int unlock_pending;    /* dropped while consuming: unlock when the batch returns */
    int after_revoke;      /* orderly, new entry: first check that no batch of an earlier entry
                            * of the same queue is still in the pool */
    int dtimer_armed;
    int dtimer_relock;     /* the dispatch timer locks the queue first */
    uv_timer_t dtimer;     /* dispatch later (suspend, lock retry) */
    int n_closing;         /* handles still closing when freed */
    int64_t last_pull_ms;  /* monotonic */
    /* flow.c: parked while the script paused pulling or waiting for consume_tps_limit tokens */
    int flow_parked, flow_go, flow_reserved;
    struct rmq_qent *flow_next;
    int64_t pull_sent_ns;  /* uv_hrtime() when the pull in flight was sent (stats) */
    /* pop.c: a POP assignment of the broker (RocketMQ 5; mq.queue_id -1 = every queue of the
     * broker): POP_MESSAGE instead of pulls (pull_inflight and timer serve the pops), no
     * process queue and no offset (the broker keeps the group's). */
    int pop;
    int pop_waiting;       /* popped, not yet acked or changed (PopProcessQueue waitAckCounter) */
    /* pop.c, orderly POP (an entry of one message queue, popped with order=true): the process
     * queue holds the popped messages, consume_orderly.c dispatches them one batch at a time,
     * and pop_ord keeps the extraInfo of each (by queue offset; owned). */
    struct rmq_pop_ord *pop_ord;
    int pop_ord_n;
    int64_t pop_ord_deadline_ms; /* popTime + invisibleTime of the popped messages */
} rmq_qent_t;

/* The extraInfo (POP_CK) of one message an orderly POP entry holds. */
typedef struct rmq_pop_ord {
    int64_t off;
    char *ck;
} rmq_pop_ord_t;

/* A queue's lag: the broker's max offset past the committed offset (the pull position before
 * any commit); 0 while the max is unknown. The status line, /stats and /metrics use it, and it
 * agrees with consumerProgress once the offset persisted. */
static inline int64_t rmq__qent_lag(const rmq_qent_t *q)
{
    if (q->broker_max < 0) return 0;
    return rmq__lag(q->broker_max, q->offset >= 0 ? q->offset : q->next_offset);
}

/* ---- batch in flight -------------------------------------------------------------------------- */

typedef struct rmq_cbatch {
    rmq_batch_t b;          /* b.internal = this; b.msgs = msgs */
    rmq_qent_t *q;          /* one reference */
    struct rmq_cbatch *next;/* retry-later list */
    int64_t due_ms;         /* retry-later: monotonic time to resubmit */
    int64_t submit_ms;
    int64_t start_ms;       /* when its handler started (monotonic ms), 0 = not yet: written by
                             * the consume thread (rmq__consume_begin), read by the loop thread,
                             * both atomically */
    struct rmq_cbatch *iprev, *inext; /* batches in the pool (consume timeout scan) */
    int expired;            /* some of its messages were sent back by the consume timeout */
    int need_lock;          /* orderly, CLUSTERING: runs only while its queue's broker lock is
                             * held (rmq__consume_begin), else comes back SKIPPED */
    struct rmq_direct *direct; /* CONSUME_MESSAGE_DIRECTLY: no queue; answered when done */
    int n_pending;          /* send-backs still in flight for this batch */
    int n_retry;            /* messages collected for the local retry */
    rmq_batch_run_t run;    /* handler timing, written by the consume thread (stats) */
    char **pop_ck;          /* a POP batch (pop.c): each message's extraInfo (POP_CK), owned;
                             * NULL for pulled messages */
    int pop_n;              /* entries of pop_ck */
    int64_t pop_deadline_ms;/* a POP batch: popTime + invisibleTime (wall clock), after which
                             * its handler does not run (rmq__consume_begin) */
    rmq_msg_t *msgs[];      /* b.n views */
} rmq_cbatch_t;

/* ---- the consumer ---------------------------------------------------------------------------- */

struct rmq_consumer {
    rmq_conf_t *conf;       /* own copy */
    /* What runs the handlers (handler.h; borrowed): its consume side is pool, its control
     * side gives the allocate / on_assign / on_revoke / on_stats hooks. */
    const rmq_handler_ops_t *hops;
    void *himpl;
    rmq_flow_t *flow;       /* rmq.pause/resume/stop and consume_tps_limit (flow.c) */
    struct rmq_reconf *reconf; /* a reload's new version taking over (reconf.c) */
    uint32_t subs_gen;      /* bumped when a reload replaces subs: replies asked for with an
                             * older value (route, consumer list) are ignored */
    int n_retiring;         /* pools a reload replaced, still finishing their batches */
    unsigned hooks;
    uv_loop_t loop;
    uv_async_t stop_async;       /* also wakes the loop for a reload request */
    atomic_int stop_requested;   /* any thread, a signal handler too; then stop_async */
    atomic_int reload_requested; /* any thread, a signal handler too (SIGHUP); then stop_async */
    rmq_remoting_t *rt;
    rmq_producer_t *producer;
    struct rmq_trace *trace; /* enable_msg_trace: the trace dispatcher (trace.h), or NULL */
    struct rmq_nsaddr *nsaddr; /* the address service fetcher, when namesrv_domain is used */
    char *nsaddr_list;         /* its last list taken (loop thread), else NULL */
    rmq_runner_t *pool;     /* the handler's runner (consume threads) */
    rmq_client_state_t state;
    int exit_code;
    rmq_tls_ctx_t *tls;     /* use_tls: the client context (built in rmq__consumer_new) */
    /* ACL: established once a heartbeat round was accepted by every broker; before that an
     * ACL refusal stops the consumer (RMQ_CONSUMER_EXIT_ACL), afterwards it is logged (the
     * same message at most once a minute). */
    int acl_established;
    char acl_last[768];
    int64_t acl_last_ms;

    char client_id[256];
    char *group;            /* wire group (namespace-wrapped) */
    char *retry_topic;      /* "%RETRY%" + group */
    size_t retry_topic_len;
    int max_reconsume;      /* -1 -> 16 (concurrent) or INT_MAX (orderly) */
    int orderly;            /* the script consumes with consume_orderly */
    int64_t start_ms;

    rmq_csub_t *subs;
    int n_subs;
    struct rmq_local_offsets *local; /* BROADCASTING: offsets.json (offset_local.c) */
    struct rmq_route **routes; /* index-aligned with subs: last route of each topic, or NULL */
    int paused;             /* RESET_CONSUMER_CLIENT_OFFSETs in progress: no rebalance, no pull */

    rmq_qent_t *queues;
    int n_queues;
    /* Every queue entry not freed yet: those in the table and those dropped but still held by a
     * batch, a send-back or a request (a reload re-points their subscription). */
    rmq_qent_t *live;
    uint64_t next_gen;
    int thr_queue;          /* effective pull_threshold_for_queue */
    int thr_size_queue;     /* effective pull_threshold_size_for_queue (MiB) */

    rmq_cbatch_t *retry_list;
    rmq_cbatch_t *inflight; /* batches submitted to the pool, oldest last */
    struct rmq_expire *expiring; /* consume-timeout send-backs in flight (consume.c) */
    int inflight_batches;
    int inflight_sendbacks;

    rmq_rb_state_t rb_state;
    int rb_again;           /* a wake-up came while running: run once more */
    int rb_outstanding;     /* async steps of the running rebalance */
    int rb_changed;

    int64_t sub_hb_ms;      /* monotonic: last extra heartbeat for a SUBSCRIPTION_NOT_* pull */
    struct rmq_bad *bad_list; /* undecodable messages waiting to be sent again (undecodable.c) */
    uv_timer_t t_bad;
    uv_timer_t t_route, t_heartbeat, t_rebalance, t_persist, t_stats, t_retry, t_drain,
        t_expire, t_lock;
    int drain_started;      /* shutdown: waiting for send-backs in flight */
    int64_t drain_deadline; /* monotonic */

    /* stats (loop thread counters; snapshot copied under stats_mu) */
    int64_t n_consumed, n_failed, n_retried, n_dlq, n_pulled;
    int64_t n_sent; /* rmq.send() messages sent */
    int64_t last_consumed, last_pulled, last_stats_ms;
    rmq_memtrim_t memtrim; /* memtrim.h: freed heap pages handed back */
    uv_mutex_t stats_mu;
    rmq_consumer_stats_t snap;
    rmq_cstats_t stats;     /* stats.c: metrics, on_stats, health */

    /* Hooks: what a lower part asks of a higher one, as a call through these (set by
     * rmq__consumer_new) instead of a call up the files. */
    void (*hook_rb_wakeup)(rmq_consumer_t *c); /* rmq__rb_wakeup: a heartbeat round after a
                                                * route change (routes.c) */
    void (*hook_drop_queue)(rmq_consumer_t *c, rmq_qent_t *q, int persist);
                                               /* rmq__rb_drop_queue: OFFSET_ILLEGAL (pull.c) */
    void (*hook_pop_result)(rmq_consumer_t *c, rmq_cbatch_t *cb);
                                               /* rmq__pop_result: a POP batch came back
                                                * (consume.c) */
    /* RocketMQ 5 (assignment.c, pop.c): a broker answered QUERY_ASSIGNMENT "request code not
     * supported" (4.x): the client allocates from then on. */
    int assign_unsupported;
    int64_t n_popped, n_pop_acked, n_pop_changed; /* POP deliveries, ACK_MESSAGEs and
                                                   * CHANGE_MESSAGE_INVISIBLETIMEs that succeeded */
};

/* ---- the files of the engine and what each declares ------------------------------------------
 *
 * Lowest first: a file calls functions of the files listed before it only, except in three
 * circles (stats.c and metrics_http.c, consume.c and consume_orderly.c, and pull.c, flow.c and
 * pop.c: a parked queue is resumed through rmq__pull_now, which hands a POP one to pop.c). A
 * part that must make a higher one act calls a hook of the consumer instead: c->hook_rb_wakeup,
 * c->hook_drop_queue and c->hook_pop_result, set by rmq__consumer_new (client.c, the top). The
 * files with a header of their own (conf, allocate, process_queue, flow, stats, metrics_http,
 * offset_file) declare it there. */

/* instance.c: the state the engine's parts share; it calls no other file of the engine */
const char *rmq__client_state_name(rmq_client_state_t s);
void rmq__client_set_state(rmq_consumer_t *c, rmq_client_state_t s);
rmq_csub_t *rmq__c_sub(rmq_consumer_t *c, const char *topic);
/* Master address of broker_name, or NULL. */
const char *rmq__c_master_addr(rmq_consumer_t *c, const char *broker_name);
/* findBrokerAddressInSubscribe (PROTOCOL 5.2): addr or NULL; *slave set. */
const char *rmq__c_sub_addr(rmq_consumer_t *c, const char *broker_name, int64_t id, int *slave);
/* Any address of some broker serving topic (random BrokerData, master preferred), or NULL. */
const char *rmq__c_topic_addr(rmq_consumer_t *c, const char *topic);
/* Every distinct broker address over all routes. Returns the count; *out is malloc'ed (the
 * addresses are the routes'). */
int rmq__c_all_addrs(rmq_consumer_t *c, const char ***out);
/* resetRetryAndNamespace's second half: strip the namespace from m->topic (loop thread, before
 * the message is handed to a consume thread). */
void rmq__c_strip_namespace(rmq_consumer_t *c, rmq_msg_t *m);
/* The topic a message is sent back under: m->topic wrapped with the namespace again (Java's
 * sendMessageBack: msg.setTopic(withNamespace(msg.getTopic()))). A new string. */
char *rmq__c_wire_topic(rmq_consumer_t *c, const rmq_msg_t *m);
/* CONSUMER_SEND_MSG_BACK of m for c's group (sendMessageBack's header: the commit-log offset,
 * delay_level, originMsgId id, originTopic topic, unitMode, maxReconsumeTimes) initialised in
 * cmd; the caller sends it and frees it (rmq__cmd_free). */
void rmq__c_send_back_cmd(rmq_consumer_t *c, const rmq_msg_t *m, int delay_level,
                          const char *id, const char *topic, rmq_cmd_t *cmd);
/* The subscriptions of cf as rmq_csub_t entries (namespace-wrapped; %RETRY%<group> added in
 * CLUSTERING), new SubscriptionData each. 0 or RMQ_ERR_CONFIG with errstr. */
int rmq__c_build_subs(rmq_consumer_t *c, const rmq_conf_t *cf, rmq_csub_t **out, int *n,
                      char *errstr, size_t errstr_size);
int rmq__c_tag_match(const rmq_csub_t *s, const rmq_msg_t *m);
/* Answers to a broker's request: an error with remark, or success with body (borrowed). */
void rmq__c_reply_error(rmq_conn_t *conn, rmq_cmd_t *req, int code, const char *remark);
void rmq__c_reply_body(rmq_conn_t *conn, rmq_cmd_t *req, rmq_buf_t *body);
/* 1 when the request's ext field key names our group; else answers SYSTEM_ERROR (unless
 * oneway) and returns 0. */
int rmq__c_group_is_ours(rmq_consumer_t *c, rmq_conn_t *conn, rmq_cmd_t *req, const char *key);
/* (rmq__consumer_stop, consumer.h, is instance.c's too.) */

/* queue.c: an owned queue's entry, from rmq__qent_new (it enters the queue table; one
 * reference, the table's) to the free after its last rmq__qent_release */
rmq_qent_t *rmq__qent_new(rmq_consumer_t *c, const rmq_mq_t *mq);
rmq_qent_t *rmq__qent_keep(rmq_qent_t *q);
void rmq__qent_release(rmq_qent_t *q);

/* check_client.c: CHECK_CLIENT_CONFIG for a non-TAG subscription whose route just arrived.
 * Returns 1 when the check is on its way (its answer calls then(c), or stops the consumer when
 * the broker refuses), 0 when none is needed. */
int rmq__check_client_config(rmq_consumer_t *c, rmq_csub_t *s, void (*then)(rmq_consumer_t *c));

/* routes.c: routes and heartbeats */
void rmq__c_heartbeat_all(rmq_consumer_t *c);
/* Heartbeat every broker, then rebalance (a subscription changed). */
void rmq__c_heartbeat_rebalance(rmq_consumer_t *c);
void rmq__c_refresh_routes(rmq_consumer_t *c);
/* The periodic timers (timer data = consumer). */
void rmq__c_route_timer(uv_timer_t *t);
void rmq__c_heartbeat_timer(uv_timer_t *t);

/* offset_store.c (with offset_local.c below it): offsets */
void rmq__offset_update(rmq_qent_t *q, int64_t off, int increase_only);
void rmq__offset_persist(rmq_consumer_t *c, rmq_qent_t *q);
void rmq__offset_persist_all(rmq_consumer_t *c);
/* Start: BROADCASTING locates (and checks) the local offset file; CLUSTERING does nothing.
 * Returns 0 or RMQ_ERR_BAD_JSON / RMQ_ERR_NOMEM with errstr (the consumer does not start). */
int rmq__offset_load(rmq_consumer_t *c, char *errstr, size_t errstr_size);
/* offset_local.c: the BROADCASTING store (LocalFileOffsetStore). load: at start, before the
 * loop runs (0, or RMQ_ERR_BAD_JSON / RMQ_ERR_NOMEM with errstr); read: the file's offset of mq
 * or -1; set: put an offset in the table (written by the next persist_all); persist_all: write
 * the table with the owned queues' offsets, off the loop thread; free: after the loop ended. */
typedef struct rmq_local_offsets rmq_local_offsets_t;
int rmq__local_offsets_load(rmq_consumer_t *c, char *errstr, size_t errstr_size);
int64_t rmq__local_offsets_read(rmq_consumer_t *c, const rmq_mq_t *mq);
void rmq__local_offsets_set(rmq_consumer_t *c, const rmq_mq_t *mq, int64_t off);
void rmq__local_offsets_persist_all(rmq_consumer_t *c);
void rmq__local_offsets_free(rmq_consumer_t *c);
/* READ_FROM_STORE: cb(ud, offset) with offset >= 0, -1 (no offset) or -2 (error). */
typedef void (*rmq_offset_cb)(void *ud, int64_t offset);
int rmq__offset_query(rmq_consumer_t *c, const rmq_mq_t *mq, rmq_offset_cb cb, void *ud);
/* GET_MAX_OFFSET (code RMQ_REQ_GET_MAX_OFFSET) / SEARCH_OFFSET_BY_TIMESTAMP (ts >= 0). */
int rmq__offset_admin(rmq_consumer_t *c, const rmq_mq_t *mq, int64_t ts, rmq_offset_cb cb,
                      void *ud);

/* stats.c (stats.h): the live counters, where things happen; one call each */
void rmq__stats_pulled(rmq_qent_t *q, rmq_msgset_t *set, int n);   /* FOUND, after the filter */
void rmq__stats_pull_done(rmq_qent_t *q, int err, int code);      /* any pull outcome */
void rmq__stats_consumed(rmq_qent_t *q, int ok, int failed);
void rmq__stats_sent_back(rmq_qent_t *q, int dlq);
void rmq__stats_timeout(rmq_qent_t *q);                           /* a batch hit consume_timeout */
void rmq__stats_batch_done(rmq_consumer_t *c, rmq_cbatch_t *cb);  /* a batch came back, ran */
void rmq__stats_ran(void *ud, rmq_batch_t *b, const rmq_batch_run_t *run); /* pool's ran hook */
/* Transport on_open / on_close (ud = consumer): reconnects, name-server connectivity. */
void rmq__stats_on_open(rmq_conn_t *conn, void *ud);
void rmq__stats_on_close(rmq_conn_t *conn, int err, const char *why, void *ud);
/* Lifecycle: init in rmq__consumer_new; start when running (the metrics endpoint, on_stats):
 * 0 or an error with errstr; tick every second (sampling, snapshot); close with the other
 * handles; free in rmq__consumer_destroy (stops the endpoint). */
void rmq__stats_init(rmq_consumer_t *c);
int rmq__stats_start(rmq_consumer_t *c, char *errstr, size_t errstr_size);
void rmq__stats_tick(rmq_consumer_t *c);
/* After a reload: (re)start or stop the on_stats timer for the new hooks and interval. */
void rmq__stats_reconf(rmq_consumer_t *c);
void rmq__stats_close(rmq_consumer_t *c);
void rmq__stats_free(rmq_consumer_t *c);

/* direct.c: CONSUME_MESSAGE_DIRECTLY, the request (a remoting handler, ud = consumer) and the
 * result of its batch (answers the broker, frees it). */
void rmq__direct_request(rmq_conn_t *conn, rmq_cmd_t *req, void *ud);
void rmq__direct_done(rmq_consumer_t *c, rmq_cbatch_t *cb);

/* consume.c (and consume_orderly.c: they call each other) */
/* Put pulled messages into q's process queue and submit them in batches; takes the messages'
 * references (duplicates are released). */
void rmq__consume_submit(rmq_consumer_t *c, rmq_qent_t *q, rmq_msg_t **msgs, int n);
void rmq__consume_done(void *ud, rmq_batch_t *b);
/* The runner's begin callback (handler.h), on a consume thread: skips a batch of a dropped
 * queue, or an orderly one whose queue's broker lock is no longer held, else publishes the
 * handler's start time. */
int rmq__consume_begin(void *ud, rmq_batch_t *b, int64_t start_ms);
/* The runner's abandoned callback (handler.h): a copy of b in its place, b left to its
 * thread for good. */
rmq_batch_t *rmq__consume_abandoned(void *ud, rmq_batch_t *b);
void rmq__consume_retry_timer(uv_timer_t *t);
/* cleanExpiredMsg: every consume timeout (timer data = consumer). */
void rmq__consume_expire_timer(uv_timer_t *t);
/* Release every locally retried batch (shutdown). */
void rmq__consume_abandon_retries(rmq_consumer_t *c);

/* consume.c, shared with consume_orderly.c */
rmq_cbatch_t *rmq__cbatch_new(rmq_qent_t *q, rmq_msg_t **msgs, int n);
void rmq__cbatch_free(rmq_cbatch_t *cb);
void rmq__cbatch_submit(rmq_consumer_t *c, rmq_cbatch_t *cb, int thread_index);

/* consume_orderly.c (ConsumeMessageOrderlyService, PROTOCOL.md 6.14) */
#define RMQ_LOCK_TIMEOUT_MS 1000
#define RMQ_LOCK_INTERVAL_MS 20000   /* rocketmq.client.rebalance.lockInterval */
#define RMQ_LOCK_MAX_LIVE_MS 30000   /* client-side lock validity */
typedef void (*rmq_lock_cb)(rmq_qent_t *q, int ok);
/* LOCK_BATCH_MQ for one queue; cb(q, ok) later (holds a queue reference meanwhile). */
void rmq__orderly_lock(rmq_qent_t *q, rmq_lock_cb cb);
/* Every 20 s: lock all owned queues per broker, refreshing q->locked (timer data = consumer). */
void rmq__orderly_lock_all_timer(uv_timer_t *t);
/* UNLOCK_BATCH_MQ oneway for one queue. */
void rmq__orderly_unlock(rmq_consumer_t *c, const rmq_mq_t *mq);
/* q's lock was granted after q left (revoked while its LOCK_BATCH_MQ was on its way, or the
 * consumer stopping): unlock it, unless a live entry of the same queue relies on it. */
void rmq__orderly_lock_orphaned(rmq_qent_t *q);
/* Hand the next batch of q to its consume thread if none is running. */
void rmq__orderly_dispatch(rmq_qent_t *q);
/* The result of an orderly batch (after any rmq.send went out), or its return unrun
 * (RMQ_CONSUME_NOT_RUN, RMQ_CONSUME_SKIPPED). Frees cb. An orderly POP batch goes on to
 * c->hook_pop_result. */
void rmq__orderly_result(rmq_consumer_t *c, rmq_cbatch_t *cb);
/* A failed orderly batch (SUSPEND_CURRENT_QUEUE_A_MOMENT; RECONSUME_LATER, DLQ and errors count
 * as suspend), PULL or POP: checkReconsumeTimes. Its messages that reached max_reconsume_times
 * (all of them for rmq.DLQ) are re-sent to %RETRY%<group> with their reconsume count at the
 * maximum, which the broker stores in %DLQ%<group>; the others, and any whose send failed, are
 * kept (with raise, their reconsume count goes up by one here: PULL; POP's broker counts).
 * Once every send answered, settle(x) runs (then x is freed): sent[i] says which are stored,
 * kept how many stay, suspend_ms the suspend time (the batch's or
 * suspend_current_queue_time_millis, within 10..30000 as Java). Counts the batch as failed. */
typedef struct rmq_ord_fail rmq_ord_fail_t;
struct rmq_ord_fail {
    rmq_consumer_t *c;
    rmq_cbatch_t *cb; /* the batch (holds its queue's reference): settle frees it */
    int64_t suspend_ms;
    char *sent; /* per message: 1 = stored in the DLQ */
    int kept;   /* messages not stored: they stay on the queue */
    /* rmq__orderly_fail's own */
    int pending, raise;
    const char *sub;
    void (*settle)(rmq_ord_fail_t *x);
};
void rmq__orderly_fail(rmq_consumer_t *c, rmq_cbatch_t *cb, int raise, const char *sub,
                       void (*settle)(rmq_ord_fail_t *x));

/* undecodable.c: a message of a pull response that could not be decoded (set->bad) goes to
 * %DLQ%<group>; takes its reference. */
void rmq__undecodable_submit(rmq_consumer_t *c, rmq_qent_t *q, rmq_msg_t *m);
/* A popped message of q that could not be decoded goes to %DLQ%<group> the same way, then
 * rmq__pop_undecodable_done acks it with ck, its extraInfo. Takes m's reference (one of its own:
 * an orderly POP entry's process queue holds another) and ck (malloc'd). */
void rmq__undecodable_submit_pop(rmq_consumer_t *c, rmq_qent_t *q, rmq_msg_t *m, char *ck);
void rmq__undecodable_timer(uv_timer_t *t);
/* Shutdown: forget those waiting to be sent again (their messages stay held). */
void rmq__undecodable_abandon(rmq_consumer_t *c);

/* assignment.c: QUERY_ASSIGNMENT (RocketMQ 5 broker-side assignment, MQClientAPIImpl.
 * queryAssignment) for topic to the broker at addr. cb(ud, rc, list, n, why) later: rc 0 with the
 * assignments (borrowed for the call), RMQ_RESP_REQUEST_CODE_NOT_SUPPORTED from a 4.x broker, or
 * another error with why. Returns 0 when sent (cb then runs once), else an error (cb never
 * runs). */
typedef struct rmq_assignment {
    rmq_mq_t mq;
    int pop; /* MessageRequestMode: 0 PULL, 1 POP */
} rmq_assignment_t;
typedef void (*rmq_assign_cb)(void *ud, int rc, const rmq_assignment_t *a, int n,
                              const char *why);
int rmq__assign_query(rmq_consumer_t *c, const char *addr, const char *topic, rmq_assign_cb cb,
                      void *ud);
/* 1 when the rebalance asks the broker (client_rebalance false, CLUSTERING, and no broker said
 * it does not know QUERY_ASSIGNMENT); an orderly consumer too, unlike Java 5.3.3. */
int rmq__assign_by_broker(const rmq_consumer_t *c);

/* pop.c: POP consumption of a POP assignment (DefaultMQPushConsumerImpl.popMessage,
 * ConsumeMessagePopConcurrentlyService): POP_MESSAGE with long polling, the batches to the
 * runner, ACK_MESSAGE or CHANGE_MESSAGE_INVISIBLETIME for their results. */
void rmq__pop_now(rmq_qent_t *q);
/* A POP batch came back (any status): acks, invisible-time changes, release; frees cb. An
 * orderly POP batch (b.orderly) comes here from rmq__orderly_result: success acks it, the
 * next batch of its queue follows; a failure sends what reached max_reconsume_times to the
 * DLQ and changes the invisible time of the rest of the queue's popped messages to the
 * suspend time, so that the broker hands them out again in order. */
void rmq__pop_result(rmq_consumer_t *c, rmq_cbatch_t *cb);
/* A popped message m of q that could not be decoded was stored in %DLQ%<group>, or given up
 * (undecodable.c): ACK_MESSAGE with ck, its extraInfo; an orderly POP entry lets it go and goes
 * on with the messages after it. Borrows m and ck. */
void rmq__pop_undecodable_done(rmq_consumer_t *c, rmq_qent_t *q, rmq_msg_t *m, const char *ck);
/* ExtraInfoUtil.buildExtraInfo with the message's offset: the POP_CK string into out (NUL
 * terminated, truncated to out_size). */
void rmq__pop_extra_info(char *out, size_t out_size, int64_t ck_offset, int64_t pop_time,
                         int64_t invisible, int revive_qid, const char *topic,
                         const char *broker, int qid, int64_t msg_offset);
/* processPopResponse for an order=true pop: the delivery count of the message at (mark, qid,
 * off) -- mark the retry mark of its topic, '0', '1' or '2' -- from the answer's
 * orderCountInfo (ExtraInfoUtil.parseOrderCountInfo: "<retry> <key> <count>" entries separated
 * by ";", the key "qo<queueId>%<offset>" for one message or "<queueId>" for the queue): the
 * message's own entry, else its queue's; -1 when neither is there (malformed entries are
 * skipped). */
int rmq__pop_order_count(const char *info, char mark, int qid, int64_t off);

/* pull.c (and flow.c, flow.h: they call each other) */
void rmq__pull_now(rmq_qent_t *q);
void rmq__pull_later(rmq_qent_t *q, int64_t delay_ms);

/* rebalance.c */
void rmq__rb_wakeup(rmq_consumer_t *c);
void rmq__rb_timer_start(rmq_consumer_t *c);
const char *rmq__rb_state_name(rmq_rb_state_t s);
/* Drop a queue: mark dropped, persist + remove its offset, leave the table. */
void rmq__rb_drop_queue(rmq_consumer_t *c, rmq_qent_t *q, int persist);
/* The per-queue pull thresholds from the topic-wide ones (when set) over the queues owned now
 * (RebalancePushImpl.messageQueueChanged); loop thread. */
void rmq__rb_flow_thresholds(rmq_consumer_t *c);

/* client.c: the top (start, broker requests, shutdown) */
/* Shutdown: go on once the consume threads (and any pool a reload retired) are done. */
void rmq__c_shutdown_resume(rmq_consumer_t *c);

/* reconf.c (a reload's new version, handler.h rmq__consumer_adopt) */
struct rmq_reconf *rmq__reconf_new(void);
void rmq__reconf_free(struct rmq_reconf *r);
/* Shutdown: runners a reload retired get what a shutdown gives their handlers. */
void rmq__reconf_close(rmq_consumer_t *c);

#endif
