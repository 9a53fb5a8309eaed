/*
 * consume_pool.h -- the consume threads: the one narrow interface between the client engine
 * (loop thread) and the Lua handlers.
 *
 * Each consume thread owns one LuaJIT state for life (the script loaded once, hooks held as
 * registry refs). The loop thread submits batches; a thread runs the script's hook once per
 * batch under lua_pcall, fills the batch's result fields and posts it back; the done callback
 * then runs on the loop thread (queue + uv_async_t; uv_async_send coalesces, the callback drains
 * the whole queue).
 * A thread whose handler waited on I/O runs its batches as coroutines from then on, up to
 * batches_per_thread in flight; each is a batch not yet done until done() returns it.
 *
 * Ownership: the pool owns its threads and their Lua states. A submitted batch (and the messages
 * it points to) stays owned by the engine; the pool only borrows it until done() is called.
 * Threads: rmq__pool_start/attach/submit/stop/retire/go are called on the loop thread only;
 * done() runs there too. rmq__pool_prepare and rmq__pool_discard may run on any thread (a
 * reload prepares the next pool on a worker thread).
 */
#ifndef RMQ_CONSUME_POOL_H
#define RMQ_CONSUME_POOL_H

#include "base/common.h"
#include "consumer/handler.h"
#include "rmqlua_ffi.h"

#include <uv.h>

typedef struct rmq_pool rmq_pool_t;

/* The engine's callbacks, statuses and run measurements (RMQ_CONSUME_NOT_RUN,
 * RMQ_CONSUME_SKIPPED, rmq_batch_run_t) are those of the handler interface
 * (consumer/handler.h): the pool is the Lua host's runner. */
typedef rmq_handler_done_cb rmq_pool_done_cb;
typedef rmq_handler_begin_cb rmq_pool_begin_cb;
typedef rmq_handler_ran_cb rmq_pool_ran_cb;

typedef struct rmq_pool_opts {
    const char *script_path; /* the consumer script */
    int nthreads;            /* consume_thread_min */
    uv_loop_t *loop;         /* the loop thread's loop */
    rmq_pool_done_cb done;
    void *ud;
    const char *consumer_group; /* for ctx and logs */
    /* A handler running longer than this is interrupted (its batch comes back with
     * handler_error = 1 and RECONSUME_LATER, or SUSPEND when orderly). 0 = the Java default
     * consumeTimeout, 15 minutes. See rmq__pool_start() for what cannot be interrupted. */
    int64_t consume_timeout_ms;
    /* lua_memory_limit_mb in KiB (0 = none): a batch whose handler makes its state go past it
     * fails (handler_error = 1, RECONSUME_LATER or SUSPEND), and that thread's state is made
     * anew; a state over it once the script is loaded fails the start. lua_memlimit.h says
     * when the limit is checked. */
    int64_t lua_memory_limit_kb;
    /* The threads' cosockets (coloop.h): lua_socket_max_per_thread (<= 0: the default),
     * lua_ssl_trusted_certificate (NULL = the system's CA store; copied, and checked readable
     * by the start), lua_ssl_verify_depth (<= 0: the default). */
    int socket_max;
    const char *ssl_ca_file;
    int ssl_verify_depth;
    int ngx_shim; /* RMQ_NGX_* (lua_state.h): lua_ngx_shim; 0 = the script's table decides */
    /* consume_batches_per_thread (<= 1: one batch at a time): once a handler of a thread's
     * state waited on I/O in place, that thread runs its batches as coroutines, up to this many
     * in flight; each counts as running until it comes back through done(). */
    int batches_per_thread;
    rmq_pool_begin_cb begin; /* optional; its ud is ud */
    rmq_shdicts_t *shdicts; /* the consumer's shared dictionaries (rmq.shared); may be NULL */
    rmq_flow_t *flow;       /* where rmq.pause/resume/stop go; may be NULL */
    /* 1: rmq__pool_prepare loads the states without running init; each thread runs init and
     * starts taking batches after rmq__pool_go() (a reload: the old threads' shutdown hooks run
     * first). An init failure is then logged, and the thread runs its state anyway. */
    int defer_init;
    /* Lua modules the threads use: loader_module.load(path) validates the script and returns its
     * spec (NULL = "rmq.script", the consumer script contract), dispatch_module.new(spec, info)
     * builds the per-batch dispatcher (NULL = "rmq.dispatch"). `rmqlua tail --handler` and
     * `rmqlua redrive --where` run their scripts through these. */
    const char *loader_module;
    const char *dispatch_module;
    rmq_pool_ran_cb ran; /* optional (statistics) */
    /* Optional, loop thread: a stop gave up on the thread running batch (its handler did not
     * come back). That thread may still come back later and then write into batch and read the
     * messages it points to, so the owner must leave both alone for good: it returns a copy of
     * batch (the same messages), which comes back through done() / requeue() NOT_RUN in its
     * place. Without it, batch itself comes back. */
    rmq_batch_t *(*abandoned)(void *ud, rmq_batch_t *batch);
} rmq_pool_opts_t;

/*
 * Start nthreads consume threads, each loading the script into its own state and running its
 * init hook. Returns 0, or an error with errstr naming file:line (no thread is left running).
 *
 * Result of a batch (set before done() runs): status, ack_count, delay_level, suspend_millis,
 * thread_index, handler_error, and sends/nsends (messages the handler queued with rmq.send();
 * the engine sends them, and treats the batch as RECONSUME_LATER / SUSPEND if one fails).
 * A handler error is logged by the pool with the batch's message ids (subsystem "lua"; errors
 * that repeat are summarised, see rmq__log_batch_error in batch_log.h).
 * consume_timeout: a watchdog (loop thread) asks a handler running longer than that to stop by
 * setting a flag; the consume thread's own Lua count hook sees it and raises an error in the
 * handler. A handler stuck in a JIT-compiled loop or in a blocking C call cannot be interrupted
 * (LuaJIT does not run hooks in compiled traces): it is logged once per batch and keeps its
 * thread.
 */
int rmq__pool_start(const rmq_pool_opts_t *opts, rmq_pool_t **out, char *errstr,
                    size_t errstr_size);
/*
 * rmq__pool_start in two steps. prepare: the threads and their states (blocks until every
 * thread is ready or one failed; any thread; no loop handle is touched). attach: the loop
 * handles (the done wake-up, the consume_timeout watchdog); loop thread; submit, stop and retire
 * work from then on. discard: a prepared pool that is not wanted after all (any thread; no hook
 * runs when init was deferred, else the shutdown hooks do).
 */
int rmq__pool_prepare(const rmq_pool_opts_t *opts, rmq_pool_t **out, char *errstr,
                      size_t errstr_size);
void rmq__pool_attach(rmq_pool_t *p);
void rmq__pool_discard(rmq_pool_t *p);
/* defer_init pools: the threads run init and start taking the batches queued meanwhile. */
void rmq__pool_go(rmq_pool_t *p);
/*
 * Retire the pool (a reload replaced it): every queued batch goes to requeue() at once (none of
 * them ran), and so does every batch that comes back not run later (submitted after this, or
 * interrupted by the stop); the running batches finish, a handler past consume_timeout (from its
 * own start) interrupted by the watchdog as before, and come back through done() as usual (one
 * the watchdog cannot interrupt is stopped consume_timeout + 5 s from now); then the shutdown
 * hooks run, the threads are joined and close_cb(ud) runs on the loop. requeue runs on the loop
 * thread with the pool's ud. Returns how many queued batches were handed over at once.
 */
int rmq__pool_retire(rmq_pool_t *p, rmq_pool_done_cb requeue, void (*close_cb)(void *ud),
                     void *ud);
/* A stopping (or retired) pool: its running handlers get at most await_ms from now before the
 * interrupt (the consumer shuts down while a reload's old pool finishes). */
void rmq__pool_hurry(rmq_pool_t *p, int64_t await_ms);
/* Queue a batch for any idle thread (concurrent consumption). A pool that is stopping returns
 * it NOT_RUN through done(); one whose handles are already closing (stopped, threads gone, its
 * close callback not yet run) returns it NOT_RUN through done() (or a retired pool's requeue)
 * before this call returns. */
void rmq__pool_submit(rmq_pool_t *p, rmq_batch_t *b);
/*
 * Between rmq__pool_hold() and rmq__pool_flush(), rmq__pool_submit() only collects batches;
 * flush queues them all under one lock and wakes one idle thread (which wakes the next while
 * work is left), instead of a wake-up per batch. For the batches cut from one pull response.
 */
void rmq__pool_hold(rmq_pool_t *p);
void rmq__pool_flush(rmq_pool_t *p);
/* Queue a batch for one given thread. */
void rmq__pool_submit_to(rmq_pool_t *p, int thread_index, rmq_batch_t *b);
/* Batches queued or running. Any thread. */
int rmq__pool_pending(const rmq_pool_t *p);
/* Batches running in a handler right now. Any thread. */
int rmq__pool_running(const rmq_pool_t *p);
/* Number of consume threads. */
int rmq__pool_nthreads(const rmq_pool_t *p);
/* Bytes of Lua heap of consume thread i (after its last batch, or its init). Any thread. */
int64_t rmq__pool_lua_memory(const rmq_pool_t *p, int i);
/* Handler errors (raised or timed out) since start. Any thread. */
int64_t rmq__pool_errors(const rmq_pool_t *p);
/*
 * Free what the consume thread attached to a batch (its sends) and clear those fields. The
 * engine calls it once it is done with the sends (or right away when there are none); calling it
 * on a batch without sends is a no-op. Loop thread.
 */
void rmq__pool_batch_release(rmq_batch_t *b);
/*
 * Stop: queued batches keep running for up to await_ms (0 = none of them runs); running ones
 * are allowed to finish (a handler still running 5 s after await_ms is interrupted, and after
 * another 5 s its thread is abandoned: its batch comes back NOT_RUN, or opts.abandoned's copy of
 * it). Then each state's shutdown hook runs, the threads are joined and the handles closed,
 * without blocking the loop (a helper thread waits). Batches
 * that were never run (or were interrupted by the stop) are returned through done() with status
 * RMQ_CONSUME_NOT_RUN, so the engine neither acknowledges nor sends them back (their offsets
 * stay uncommitted). Submitting after stop (from a done() callback, say) returns the batch
 * NOT_RUN; after close_cb nothing may be called. A second stop is ignored.
 * close_cb runs on the loop once the pool is freed.
 */
void rmq__pool_stop(rmq_pool_t *p, int64_t await_ms, void (*close_cb)(void *ud), void *ud);

#endif
