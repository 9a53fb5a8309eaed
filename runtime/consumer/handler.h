/*
 * handler.h -- the one interface between the push consumer engine and whatever runs its
 * message handlers: the consume side (a runner: threads that take batches, run the handler once
 * per batch and give each batch back with its outcome), the control side (the allocation
 * strategy, on_assign / on_revoke, on_stats with the stats snapshot as C data) and the
 * lifecycle (bind, run, reload request, close). The Lua host (luahost/lua_handler.h)
 * implements it; a C program may implement it with C functions (spec/c/consumer/
 * test_engine_c_handler.c).
 *
 * Ownership: the caller of rmq__consumer_new owns the handler (rmq_handler_t and what impl
 * points to) and keeps it alive until rmq__consumer_destroy returned. A runner belongs to the
 * engine from start (or rmq__consumer_adopt) until its close callback ran. A submitted batch
 * (and the messages it points to) stays owned by the engine; the runner only borrows it until
 * done() is called for it.
 * Threads: every op is called on the loop thread, except bind (the thread of
 * rmq__consumer_new) and the callbacks marked otherwise (begin, ran: a consume thread).
 *
 * Required: bind, name, start, submit, submit_to, hold, flush, nthreads, batch_release, stop.
 * The others may be NULL: the control hooks and memory (then not used), run / reload / close
 * (nothing to do); attach, go, retire and hurry are used only for runners a handler hands over
 * with rmq__consumer_adopt.
 */
#ifndef RMQ_HANDLER_H
#define RMQ_HANDLER_H

#include "base/common.h"
#include "protocol/mq.h"
#include "rmqlua_ffi.h"

#include <uv.h>

typedef struct rmq_conf rmq_conf_t;
typedef struct rmq_consumer rmq_consumer_t;
typedef struct rmq_stats_snap rmq_stats_snap_t; /* stats.h */
/* A handler's consume side; what it is belongs to the implementation. */
typedef struct rmq_runner rmq_runner_t;

/* batch->status of a batch the runner never ran (shutdown). */
#define RMQ_CONSUME_NOT_RUN (-1)
/* batch->status of a batch whose handler was not called because begin() refused it. */
#define RMQ_CONSUME_SKIPPED (-2)

/* Which optional control hooks a handler has (ops->hooks()); the Lua host adds its own bits. */
enum {
    RMQ_HOOK_CONSUME = 1 << 0,
    RMQ_HOOK_CONSUME_ORDERLY = 1 << 1,
    RMQ_HOOK_ALLOCATE = 1 << 2,
    RMQ_HOOK_INIT = 1 << 3,
    RMQ_HOOK_SHUTDOWN = 1 << 4,
    RMQ_HOOK_ON_ASSIGN = 1 << 5,
    RMQ_HOOK_ON_REVOKE = 1 << 6,
    RMQ_HOOK_ON_STATS = 1 << 7
};

/* Called on the loop thread for every batch that was submitted, exactly once. */
typedef void (*rmq_handler_done_cb)(void *ud, rmq_batch_t *batch);
/*
 * Called on the consume thread that took a batch, right before its handler runs, with the
 * handler's start time (CLOCK_MONOTONIC ms, within a few ms). Returns 0 to run the handler, or
 * nonzero to skip it: the batch then comes back with status RMQ_CONSUME_SKIPPED. It runs
 * concurrently with the loop thread: it may read only what is safe to read from any thread
 * (atomics) and write only the batch's own engine data (atomically where the loop thread reads
 * it before done()).
 */
typedef int (*rmq_handler_begin_cb)(void *ud, rmq_batch_t *batch, int64_t start_ms);

/* What a consume thread measured about one run of a batch (uv_hrtime clock, ns). */
typedef struct rmq_batch_run {
    int64_t start_ns, end_ns; /* the handler call */
    int timed_out;            /* interrupted for running past consume_timeout */
} rmq_batch_run_t;
/* Called on the consume thread right after a batch ran, before it goes back: keep it to a few
 * stores into the batch's own bookkeeping (no locks, no logging). */
typedef void (*rmq_handler_ran_cb)(void *ud, rmq_batch_t *batch, const rmq_batch_run_t *run);

/* What the engine gives a runner it starts (rmq__consumer_runner_opts fills it from a
 * configuration). Every callback gets ud. */
typedef struct rmq_runner_opts {
    uv_loop_t *loop;            /* the loop thread's loop */
    int nthreads;               /* consume_thread_min */
    const char *consumer_group; /* for logs */
    /* A handler running longer than this is interrupted where the runner can (its batch comes
     * back with handler_error = 1 and RECONSUME_LATER, or SUSPEND when orderly). */
    int64_t consume_timeout_ms;
    int64_t memory_limit_kb;    /* lua_memory_limit_mb in KiB (0 = none): the Lua host's */
    /* The Lua host's cosockets: lua_socket_max_per_thread, lua_ssl_trusted_certificate (NULL =
     * the system's CA store; the runner copies it), lua_ssl_verify_depth. */
    int socket_max;
    const char *ssl_ca_file;
    int ssl_verify_depth;
    int ngx_shim;               /* lua_ngx_shim (0 or 1): the Lua host's */
    int batches_per_thread;     /* consume_batches_per_thread: in flight per thread */
    rmq_flow_t *flow;           /* where pause/resume/stop requests go */
    void *ud;
    rmq_handler_done_cb done;
    rmq_handler_begin_cb begin;
    rmq_handler_ran_cb ran;     /* optional (statistics) */
    /* A stop gave up on the thread running batch (its handler did not come back): returns a
     * copy of batch (the same messages) that comes back NOT_RUN in its place; batch is left to
     * that thread for good. */
    rmq_batch_t *(*abandoned)(void *ud, rmq_batch_t *batch);
} rmq_runner_opts_t;

typedef struct rmq_handler_ops {
    /* ---- lifecycle ---- */
    /* rmq__consumer_new, after the configuration passed its checks: the handler learns its
     * engine and the engine's flow control, and loads what it needs. 0, or an error
     * (RMQ_ERR_CONFIG, RMQ_ERR_LUA, ...) with errstr naming the thing at fault (the consumer is
     * then not created). */
    int (*bind)(void *impl, rmq_consumer_t *c, rmq_flow_t *flow, char *errstr,
                size_t errstr_size);
    /* Optional: the loop runs (the consumer started). */
    void (*run)(void *impl);
    /* Optional: a reload was asked for (rmq__consumer_reload). The handler builds the new
     * version off the loop and hands it over with rmq__consumer_adopt. */
    void (*reload)(void *impl);
    /* Optional: the consumer shuts down: no reload from now on. */
    void (*close)(void *impl);
    /* What the handler runs, for logs (a script's path). */
    const char *(*name)(void *impl);

    /* ---- consume side (a runner) ---- */
    /* Start a runner (threads ready, taking batches). 0 and *out, or an error with errstr. */
    int (*start)(void *impl, const rmq_runner_opts_t *o, rmq_runner_t **out, char *errstr,
                 size_t errstr_size);
    /* Adopted runners (rmq__consumer_adopt): attach makes it take batches (its loop handles);
     * go lets it run them, once the runners it replaced are gone. */
    void (*attach)(rmq_runner_t *r);
    void (*go)(rmq_runner_t *r);
    /* Queue a batch for any idle thread, or for one given thread (orderly). A stopping runner
     * gives it back NOT_RUN through done(). */
    void (*submit)(rmq_runner_t *r, rmq_batch_t *b);
    void (*submit_to)(rmq_runner_t *r, int thread_index, rmq_batch_t *b);
    /* Between hold and flush submit only collects; flush hands them all over at once. */
    void (*hold)(rmq_runner_t *r);
    void (*flush)(rmq_runner_t *r);
    int (*nthreads)(const rmq_runner_t *r);
    /* Bytes of heap of consume thread i (0 when the runner does not know). Any thread. */
    int64_t (*memory)(const rmq_runner_t *r, int i);
    /* Free what a consume thread attached to a batch (its sends) and clear those fields. */
    void (*batch_release)(rmq_batch_t *b);
    /* A reload replaced r: its queued batches go to requeue() at once, its running ones
     * finish and come back through done(), then close_cb(ud). Returns how many were handed. */
    int (*retire)(rmq_runner_t *r, rmq_handler_done_cb requeue, void (*close_cb)(void *ud),
                  void *ud);
    /* A stopping (or retired) runner's handlers get at most await_ms from now. */
    void (*hurry)(rmq_runner_t *r, int64_t await_ms);
    /* Stop: queued batches run for up to await_ms, then the rest come back NOT_RUN; close_cb
     * once the runner is freed. */
    void (*stop)(rmq_runner_t *r, int64_t await_ms, void (*close_cb)(void *ud), void *ud);

    /* ---- control side (loop thread) ---- */
    /* RMQ_HOOK_* bits of the hooks below that exist now (a reload may change them). */
    unsigned (*hooks)(void *impl);
    /* allocate_message_queue_strategy = LUA: the chosen queues as indexes into mq_all
     * (out_idx has room for n_mq); returns how many, or a negative error with errstr (the
     * rebalance then uses AllocateMessageQueueAveragely). */
    int (*allocate)(void *impl, const char *group, const char *client_id, const rmq_mq_t *mq_all,
                    int n_mq, const char *const *cid_all, int n_cid, int *out_idx, char *errstr,
                    size_t errstr_size);
    /* Queues newly assigned to / taken from this client (borrowed for the call). */
    void (*on_assign)(void *impl, const rmq_mq_t *mqs, int n);
    void (*on_revoke)(void *impl, const rmq_mq_t *mqs, int n);
    /* Every stats_interval_ms: the snapshot (borrowed for the call, stats.h). */
    void (*on_stats)(void *impl, const rmq_stats_snap_t *snap);
} rmq_handler_ops_t;

typedef struct rmq_handler {
    const rmq_handler_ops_t *ops;
    void *impl;
} rmq_handler_t;

/* ---- what the engine offers a handler (consumer/reconf.c) ---- */

/* The running configuration. Loop thread, or a worker thread while a reload job of the handler
 * runs (only rmq__consumer_adopt replaces it, on the loop thread). */
const rmq_conf_t *rmq__consumer_conf(const rmq_consumer_t *c);
uv_loop_t *rmq__consumer_loop(rmq_consumer_t *c);
/* The runner options for configuration cf (the engine's callbacks, the thread count and
 * timeouts of cf). Any thread. */
void rmq__consumer_runner_opts(rmq_consumer_t *c, const rmq_conf_t *cf, rmq_runner_opts_t *o);
/* 0, or 1 with errstr naming the option of next that differs from the running configuration
 * and cannot change while the consumer runs (consumer_group, message_model, namespace, the
 * clientId's parts, the name server, the keys, TLS, ...). Any thread, as rmq__consumer_conf. */
int rmq__consumer_conf_refused(const rmq_consumer_t *c, const rmq_conf_t *next, char *errstr,
                               size_t errstr_size);
/* 1 while the consumer runs and may take a new version (rmq__consumer_adopt); loop thread. */
int rmq__consumer_can_adopt(const rmq_consumer_t *c);
/*
 * A reload's new version takes over (loop thread; only when rmq__consumer_can_adopt): conf
 * (checked; the consumer owns it from now on, the previous one is kept until destroy) becomes
 * the running configuration -- subscriptions rebuilt (queues of a topic no longer subscribed
 * dropped and reported to on_revoke), thresholds, timers, consume_tps_limit and the inner
 * producer follow it -- and runner (started with defer-init semantics: it runs nothing before
 * go) takes every batch from now on: the previous runner is retired (its queued batches move to
 * the new one at once, its running ones finish), and once every retired runner closed the new
 * one goes. The handler's control side (hooks) is read again. A heartbeat and a rebalance
 * follow.
 */
void rmq__consumer_adopt(rmq_consumer_t *c, rmq_conf_t *conf, rmq_runner_t *runner);
/* How many reloads took effect so far (loop thread). */
int rmq__consumer_reload_count(const rmq_consumer_t *c);

#endif
