/*
 * stats.h -- the consumer's statistics: live counters updated where things happen, and the
 * immutable snapshot built from them that feeds the metrics endpoint (/metrics, /stats,
 * /health: metrics_http.c), the control state's on_stats hook and GET_CONSUMER_RUNNING_INFO.
 *
 * Live counters (rmq_topic_stats_t per subscribed topic, rmq_cstats_t per consumer) are plain
 * integers and fixed-bucket histograms owned by the loop thread: no lock and no atomic per
 * message. Measurements taken on a consume thread (handler start and end) travel back with the
 * batch and are counted when its result arrives on the loop thread; each consume thread reports
 * its heap itself (the handler's memory op, handler.h). The loop thread builds a snapshot every
 * second and publishes it: publishing swaps one pointer under a mutex held for that swap only,
 * and readers take a reference the same way, so a reader never holds up the loop thread for
 * longer than a pointer copy, and a snapshot stays valid for as long as its reader holds it.
 *
 * The ConsumeStatus figures of GET_CONSUMER_RUNNING_INFO are computed like Java's
 * ConsumerStatsManager: one StatsItem (value, times) per figure and topic, sampled every 10 s
 * (the last 7 samples: one minute) and every 10 minutes (the last 7: one hour).
 *
 * Ownership: a published snapshot is reference-counted (rmq__stats_snap_release frees it with
 * the last reference); everything it points to is inside it. A publisher owns its current
 * snapshot's reference.
 * Threads: live counters and rmq__stats_build on the loop thread only; publish/acquire/release
 * and the renderers on any thread; rmq__stats_proc_read reads /proc and so must never run on the
 * loop thread.
 */
#ifndef RMQ_STATS_H
#define RMQ_STATS_H

#include "base/common.h"
#include "consumer.h"

#include <jansson.h>
#include <uv.h>

/* ---- histograms ------------------------------------------------------------------------------ */

/* Finite upper bounds (le) of every histogram, in ns: 100 us .. 1 h, then +Inf. The array has
 * 32 entries, the ones past RMQ_HIST_BOUNDS being INT64_MAX, for a branch-free search. */
#define RMQ_HIST_BOUNDS 21
extern const int64_t rmq__hist_bounds_ns[32];

typedef struct rmq_hist {
    int64_t counts[RMQ_HIST_BOUNDS + 1]; /* per bucket (not cumulative); the last one is +Inf */
    int64_t count;
    int64_t sum_ns;
} rmq_hist_t;

/* Count one observation of ns nanoseconds (negative counts as 0): the first bucket whose bound
 * is >= ns, found in five steps without a branch (a lower bound over the 32 entries). */
static inline void rmq__hist_observe(rmq_hist_t *h, int64_t ns)
{
    const int64_t *b = rmq__hist_bounds_ns;
    int i = 0;
    if (ns < 0) ns = 0;
    i += (ns > b[i + 15]) ? 16 : 0;
    i += (ns > b[i + 7]) ? 8 : 0;
    i += (ns > b[i + 3]) ? 4 : 0;
    i += (ns > b[i + 1]) ? 2 : 0;
    i += (ns > b[i]) ? 1 : 0;
    h->counts[i]++;
    h->count++;
    h->sum_ns += ns;
}

/* ---- Java's StatsItem (org.apache.rocketmq.common.stats) ------------------------------------- */

#define RMQ_STATS_WINDOW 7 /* samples kept: 7 x 10 s = a minute, 7 x 10 min = an hour */

typedef struct rmq_call_snap {
    int64_t ts_ms; /* monotonic */
    int64_t times;
    int64_t value;
} rmq_call_snap_t;

typedef struct rmq_stats_item {
    int64_t value; /* sum of what was added */
    int64_t times; /* additions; an item exists (is sampled) from its first addition on */
    rmq_call_snap_t minute[RMQ_STATS_WINDOW];
    rmq_call_snap_t hour[RMQ_STATS_WINDOW];
    int n_minute, n_hour;
} rmq_stats_item_t;

/* StatsItemSet.addValue(key, v, 1). */
static inline void rmq__stats_item_add(rmq_stats_item_t *it, int64_t v)
{
    it->value += v;
    it->times++;
}

/* StatsSnapshot: the difference between the first and the last sample of a window. */
typedef struct rmq_stats_window {
    int64_t sum;
    double tps;   /* sum per second */
    double avgpt; /* sum per addition */
} rmq_stats_window_t;

/* samplingInSeconds (minute = 1) / samplingInMinutes (minute = 0) at monotonic time now_ms. */
void rmq__stats_item_sample(rmq_stats_item_t *it, int minute, int64_t now_ms);
/* computeStatsData over the minute or hour samples. */
rmq_stats_window_t rmq__stats_item_window(const rmq_stats_item_t *it, int minute);

/* The six ConsumeStatus figures (ConsumerStatsManager.consumeStatus). */
typedef struct rmq_consume_status {
    double pull_rt, pull_tps, consume_rt, consume_ok_tps, consume_failed_tps;
    int64_t consume_failed_msgs;
} rmq_consume_status_t;

/* ---- live counters ------------------------------------------------------------------------- */

/* The outcome of one PULL_MESSAGE (label `result` of rmqlua_pull_requests_total). */
enum {
    RMQ_PULL_R_FOUND = 0,
    RMQ_PULL_R_NO_NEW_MSG,
    RMQ_PULL_R_NO_MATCHED_MSG,
    RMQ_PULL_R_OFFSET_ILLEGAL,
    RMQ_PULL_R_BROKER_ERROR, /* any other response code */
    RMQ_PULL_R_FAILED,       /* no response: timeout or transport */
    RMQ_PULL_R_N
};
extern const char *const rmq__pull_result_names[RMQ_PULL_R_N];

/* Per subscribed topic (queues of that topic), loop thread. */
typedef struct rmq_topic_stats {
    int64_t consumed;         /* acknowledged by the handler */
    int64_t failed;           /* not acknowledged (any outcome) */
    int64_t sent_back;        /* sent back for a retry (CONSUMER_SEND_MSG_BACK or re-send) */
    int64_t dlq;              /* sent to the DLQ (rmq.DLQ, orderly retries spent, undecodable) */
    int64_t pulled;           /* received in PULL_MESSAGE responses (after the tag filter) */
    int64_t consume_timeouts; /* batches that ran into consume_timeout */
    int64_t lua_errors;       /* batches whose handler raised (or was interrupted) */
    int64_t pulls[RMQ_PULL_R_N];
    rmq_hist_t process;  /* handler time per batch */
    rmq_hist_t await;    /* pull response received -> handler start, per batch */
    rmq_hist_t delivery; /* store timestamp -> handler start, per message */
    rmq_hist_t pull_rt;  /* PULL_MESSAGE sent -> answered */
    /* ConsumerStatsManager's items (ms and message counts, like Java) */
    rmq_stats_item_t j_pull_rt, j_pull_tps, j_consume_rt, j_consume_ok, j_consume_failed;
} rmq_topic_stats_t;

/* ConsumerStatsManager.consumeStatus for one topic. */
void rmq__topic_consume_status(const rmq_topic_stats_t *t, rmq_consume_status_t *out);

typedef struct rmq_stats_pub rmq_stats_pub_t;
typedef struct rmq_metrics rmq_metrics_t;

/* Per consumer, loop thread (embedded in the consumer; stats.c owns it). */
typedef struct rmq_cstats {
    int64_t rebalances; /* rebalance rounds started */
    int64_t reconnects; /* client connections opened again to an address seen before */
    char **seen_addrs;  /* addresses connected to so far */
    int n_seen;
    int ns_connected;    /* the last name-server connection event was an open */
    char ns_reason[256]; /* why not, when not */
    int64_t next_minute_sample, next_hour_sample; /* monotonic ms */
    int64_t wall_minus_mono_ns;                   /* wall clock - uv_hrtime, refreshed every tick */
    double process_start_s;                       /* read once from /proc before the loop runs */
    rmq_stats_pub_t *pub;                         /* the published snapshot */
    rmq_metrics_t *metrics; /* the HTTP endpoint, when metrics_listen is set */
    uv_timer_t t_on_stats;  /* stats_interval_ms: the on_stats hook */
    int t_on_stats_inited;
} rmq_cstats_t;

/* ---- the snapshot --------------------------------------------------------------------------- */

typedef struct rmq_snap_topic {
    char *topic;
    int64_t consumed, failed, sent_back, dlq, pulled, consume_timeouts, lua_errors;
    int64_t pulls[RMQ_PULL_R_N];
    int64_t lag, cached_msgs, cached_bytes;
    int owned_queues;
    rmq_hist_t process, await, delivery, pull_rt;
    rmq_consume_status_t status;
} rmq_snap_topic_t;

typedef struct rmq_snap_queue {
    int topic;    /* index into topics */
    char *broker; /* brokerName */
    int queue_id;
    int64_t committed;  /* in-memory committed offset, -1 = none yet */
    int64_t broker_max; /* maxOffset of the last pull response, -1 = unknown */
    int64_t lag;        /* broker_max - committed (or next pull offset), >= 0 */
    int64_t cached_msgs, cached_bytes;
} rmq_snap_queue_t;

typedef struct rmq_stats_snap {
    int refs; /* only through __atomic builtins (rmq__stats_snap_keep / _release) */
    int64_t time_ms;    /* wall clock when built */
    int64_t started_ms; /* wall clock when the consumer started */
    char *group, *client_id, *namesrv;
    const char *state; /* client state name (static) */
    int running, namesrv_connected, healthy;
    char reason[320]; /* one line: why healthy or not */
    int64_t rebalances, reconnects;
    rmq_consumer_stats_t totals; /* the status line's figures */
    int n_topics, n_queues, n_threads;
    rmq_snap_topic_t *topics;
    rmq_snap_queue_t *queues;
    int64_t *lua_memory; /* bytes per consume thread */
    /* process figures a system call gives (getrusage), taken on the loop thread */
    double cpu_seconds;
    int64_t max_rss_bytes;
    double process_start_s; /* process start time, s since the epoch (0 = unknown) */
} rmq_stats_snap_t;

rmq_stats_snap_t *rmq__stats_snap_keep(rmq_stats_snap_t *s);
void rmq__stats_snap_release(rmq_stats_snap_t *s);

/* ---- publishing --------------------------------------------------------------------------- */

rmq_stats_pub_t *rmq__stats_pub_new(void);
/* Frees the publisher and drops its reference on the current snapshot (readers keep theirs). */
void rmq__stats_pub_destroy(rmq_stats_pub_t *p);
/* Replace the current snapshot; takes over the caller's reference. Any thread. */
void rmq__stats_publish(rmq_stats_pub_t *p, rmq_stats_snap_t *s);
/* A new reference on the current snapshot, or NULL before the first one. Any thread. */
rmq_stats_snap_t *rmq__stats_acquire(rmq_stats_pub_t *p);

/* ---- process figures (/proc: never on the loop thread) -------------------------------------- */

typedef struct rmq_proc_stats {
    int ok;             /* 0 when /proc could not be read (the fields below are 0) */
    double cpu_seconds; /* user + system */
    int64_t rss_bytes, vsize_bytes;
    int64_t open_fds, max_fds;
    double start_time_s; /* since the epoch */
} rmq_proc_stats_t;

void rmq__stats_proc_read(rmq_proc_stats_t *out);
/* The process start time in s since the epoch from /proc (0 when unknown). */
double rmq__stats_proc_start_time(void);

/* ---- rendering (any thread) --------------------------------------------------------------- */

/* The Prometheus text exposition format 0.0.4 (proc may be NULL: no process_* series). */
void rmq__stats_prometheus(const rmq_stats_snap_t *s, const rmq_proc_stats_t *proc, rmq_buf_t *out);
/* The snapshot as one JSON object (proc may be NULL). New reference. */
json_t *rmq__stats_json(const rmq_stats_snap_t *s, const rmq_proc_stats_t *proc);

#endif
