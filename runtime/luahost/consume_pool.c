/*
 * consume_pool.c -- the consume threads (consume_pool.h): each owns one LuaJIT state for life,
 * runs one lua_pcall of the Lua dispatcher (rmq.dispatch) per batch, and posts the batch back
 * to the loop thread. Once a handler of its state waited on I/O, a thread serves instead (serve
 * mode, below): its batches run as coroutines of its state, several in flight.
 *
 * Logs name consume threads 1-based, like ctx.thread_index in Lua; batch->thread_index is
 * 0-based.
 *
 * Ownership: the pool owns its threads, their states, the queues and the async/timer handles.
 * Batches are the engine's: queued pointers are borrowed until done() returns them.
 * Threads: rmq__pool_start/attach/submit/submit_to/stop/retire/go and every callback run on the
 * loop thread (opts.begin excepted: it runs on the consume thread; rmq__pool_prepare/discard run
 * on any one thread: they touch no loop handle); thread_main runs on each consume thread and
 * touches only its own state plus the queues under p->mu. No other thread ever calls into a
 * consume thread's Lua state: to interrupt a handler, the watchdog or the stopping reaper sets
 * the thread's interrupt flag (an atomic), and the count hook the consume thread installed on its
 * own state raises the error when it sees it. (lua_sethook from another thread would rewrite the
 * state's dispatch table and abort its trace recorder while that thread runs: a data race with
 * LuaJIT's JIT state.)
 */
#include "consume_pool.h"

#include "base/log.h"
#include "batch_log.h"
#include "coloop.h"
#include "lua_memlimit.h"
#include "lua_state.h"

#include <lauxlib.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- a FIFO of batch pointers (growable ring) ------------------------------------------ */

typedef struct bq {
    rmq_batch_t **a;
    int cap, head, n;
} bq_t;

static void bq_push(bq_t *q, rmq_batch_t *b)
{
    if (q->n == q->cap) {
        int ncap = q->cap ? q->cap * 2 : 16;
        rmq_batch_t **na = rmq__xmalloc(sizeof(*na) * (size_t)ncap);
        for (int i = 0; i < q->n; i++) na[i] = q->a[(q->head + i) % q->cap];
        free(q->a);
        q->a = na;
        q->cap = ncap;
        q->head = 0;
    }
    q->a[(q->head + q->n) % q->cap] = b;
    q->n++;
}

static rmq_batch_t *bq_pop(bq_t *q)
{
    if (q->n == 0) return NULL;
    rmq_batch_t *b = q->a[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
    return b;
}

/* ---- the pool -------------------------------------------------------------------------- */

/* WAITING: loaded, its init deferred until rmq__pool_go() (a reload). SERVING: its batches run
 * as coroutines, several in flight (serve mode, below). */
typedef enum {
    CT_STARTING = 0,
    CT_IDLE,
    CT_BUSY,
    CT_STOPPED,
    CT_FAILED,
    CT_WAITING,
    CT_SERVING
} ct_state_t;
static const char *ct_state_names[] = {"STARTING", "IDLE",    "BUSY",   "STOPPED",
                                       "FAILED",   "WAITING", "SERVING"};

/* A batch in flight in serve mode: b under p->mu (NULL = free slot); irq set by the watchdog or
 * the reaper (atomic), why with it under p->mu; raised and reported on the consume thread. */
typedef struct flight {
    rmq_batch_t *b;
    int64_t start; /* coarse monotonic ms */
    int64_t start_ns;
    int irq;
    const char *why;
    int raised;   /* the count hook raised its interrupt in the batch */
    int reported; /* rmq_serve_expired handed it to the scheduler */
    int lost;     /* its thread was abandoned by a stop: the batch went back NOT_RUN (mu) */
} flight_t;

typedef struct cthread {
    rmq_pool_t *p;
    int index;
    uv_thread_t tid;
    uv_cond_t cond;   /* signalled when work arrives for this thread (or on quit) */
    bq_t q;           /* batches for this thread only (orderly) */
    ct_state_t state; /* under p->mu */
    lua_State *L;     /* the thread's own */
    int ref_dispatch, ref_shutdown, ref_init;
    int inited; /* its init hook ran: its shutdown hook runs at the end */
    rmq_batch_t **slot; /* the dispatcher's slot (a cdata inside L) */
    rmq_batch_t *cur;   /* running batch, under p->mu */
    int64_t cur_start;  /* monotonic ms */
    int interrupted;    /* an interrupt was requested for cur (under p->mu) */
    int irq;            /* the request itself: set by another thread, read and cleared by this
                         * thread's count hook (atomic) */
    const char *interrupt_why;
    int abandoned;      /* stop gave up on it: it must not post its batch */
    rmq_batch_t *lost;  /* the batch it ran when abandoned, until on_async replaced it */
    int woken;          /* signalled for a shared batch and not yet awake (under p->mu;
                         * counted in p->waking) */
    int64_t lua_bytes;  /* its Lua heap (relaxed atomic: any thread reads) */
    unsigned since_note;/* batches since lua_bytes was last noted */
    int worked;         /* ran a batch since its last idle collection */
    rmq_memlimit_t ml;  /* lua_memory_limit_mb on L (lua_memlimit.h) when ml.limit > 0 */
    rmq_coloop_t *co;   /* the thread's event loop (coloop.h) once it made one (under p->mu) */
    /* Serve mode (consume_batches_per_thread > 1): once a handler of its state waited in place
     * (waits), the thread runs its batches as coroutines, up to p->o.batches_per_thread in
     * flight (fl, nfl under p->mu). in_serve and serve_cur (the slot the scheduler is running,
     * -1 none) are the thread's own: its count hook reads them. */
    int waits, in_serve, serve_cur, ref_serve;
    flight_t *fl;
    int nfl;
} cthread_t;

struct rmq_pool {
    rmq_pool_opts_t o;
    char *script_path, *group;
    rmq_coloop_conf_t co_conf; /* each thread's cosocket settings; co_conf.ca_file is the pool's */
    int n;
    cthread_t *t;
    uv_mutex_t mu;
    uv_cond_t start_cond; /* thread states changing during start; the reaper's wake-up */
    bq_t shared;
    bq_t done;
    bq_t done_spare; /* loop thread: swapped with done to drain it under one lock */
    bq_t held;       /* loop thread: submitted between hold and flush */
    int holding;     /* loop thread */
    int waking;      /* threads signalled for a shared batch, not yet awake (under mu) */
    int pending;    /* submitted, not yet returned through done() (loop thread) */
    int n_lost;     /* batches of abandoned threads not yet replaced (under mu) */
    int running;    /* under mu */
    int64_t errors; /* under mu */
    int stopping, quit;
    int go;                   /* defer_init: the threads may run init (under mu) */
    rmq_pool_done_cb requeue; /* retired: where batches that did not run go (loop thread) */
    int64_t stop_deadline;
    char start_err[1024];
    uv_async_t async;
    uv_timer_t watchdog;
    uv_thread_t reaper;
    int reaper_started, reaped, closing, open_handles;
    void (*close_cb)(void *ud);
    void *close_ud;
};

static void set_state(cthread_t *t, ct_state_t s)
{
    if (t->state != s)
        rmq_dbg(RMQ_DBG_CONSUME, "consume", "thread %d: %s -> %s", t->index + 1,
                ct_state_names[t->state], ct_state_names[s]);
    t->state = s;
}

/*
 * The count hook every consume state carries from its start (installed by its own thread): every
 * RMQ_POOL_HOOK_COUNT interpreted bytecodes it checks the thread's interrupt flag, and raises
 * the interrupt error once when it is set. Compiled traces do not count (their loops run at full
 * speed, and cannot be interrupted); in the interpreter the hook dispatch costs a counter
 * decrement per bytecode. A large count keeps the hook from firing (and aborting the trace
 * recorder, as every hook call does) while the JIT records a trace.
 */
#define RMQ_POOL_HOOK_COUNT 100000

/* A thread idle this long after running batches makes a full collection of its state. */
#define RMQ_POOL_IDLE_GC_MS 5000

static _Thread_local cthread_t *self_thread; /* the consume thread running this code */

static void check_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    cthread_t *t = self_thread;
    if (t && t->in_serve) {
        /* Serve mode: only the batch that ran past its time (or was stopped) is interrupted,
         * when it runs; the scheduler itself never is. */
        int k = t->serve_cur;
        if (k < 0 || t->fl[k].raised || !__atomic_load_n(&t->fl[k].irq, __ATOMIC_ACQUIRE)) return;
        t->fl[k].raised = 1;
        luaL_error(L, "interrupted: %s", "the handler ran past consume_timeout or the pool stopped");
    }
    if (!t || !__atomic_load_n(&t->irq, __ATOMIC_ACQUIRE)) return;
    __atomic_store_n(&t->irq, 0, __ATOMIC_RELAXED); /* once: error handlers run Lua too */
    luaL_error(L, "interrupted: %s", "the handler ran past consume_timeout or the pool stopped");
}

/* Under p->mu. Ask the state running t->cur to raise an error at its next hook point. */
static void interrupt(cthread_t *t, const char *why)
{
    if (!t->cur || t->interrupted) return;
    t->interrupted = 1;
    t->interrupt_why = why;
    __atomic_store_n(&t->irq, 1, __ATOMIC_RELEASE);
    if (t->co) rmq__coloop_wake(t->co); /* a handler waiting on its loop sees it at once */
}

/* Under p->mu. Ask the scheduler of a serving thread to abandon each of its in-flight batches
 * (all, or only those started before `before` ms) that is not interrupted yet. */
static int interrupt_flights(cthread_t *t, const char *why, int64_t before)
{
    int n = 0;
    for (int k = 0; t->fl && k < t->p->o.batches_per_thread; k++) {
        flight_t *f = &t->fl[k];
        if (!f->b || f->why || (before && f->start >= before)) continue;
        f->why = why;
        __atomic_store_n(&f->irq, 1, __ATOMIC_RELEASE);
        n++;
    }
    if (n && t->co) rmq__coloop_wake(t->co);
    return n;
}

/* Under p->mu: a batch goes back to the loop thread. */
static void post_done(rmq_pool_t *p, rmq_batch_t *b)
{
    /* on_async drains until the queue is empty: a wake-up is needed only for the first one. */
    int was_empty = p->done.n == 0;
    bq_push(&p->done, b);
    if (was_empty) uv_async_send(&p->async);
}

static void not_run(rmq_pool_t *p, rmq_batch_t *b)
{
    b->status = RMQ_CONSUME_NOT_RUN;
    b->ack_count = 0;
    b->handler_error = 0;
    b->nsends = 0;
    b->sends = NULL;
    post_done(p, b);
}

/* Under p->mu: every queued (not running) batch goes back as NOT_RUN. */
static void flush_queued(rmq_pool_t *p)
{
    rmq_batch_t *b;
    while ((b = bq_pop(&p->shared))) not_run(p, b);
    for (int i = 0; i < p->n; i++)
        while ((b = bq_pop(&p->t[i].q))) not_run(p, b);
}

/*
 * Under p->mu: an idle thread to signal for shared work, marked as on its way, or NULL when one
 * is already on its way (it wakes the next one if work is still queued when it takes its batch)
 * or none is idle. One thread waking at a time keeps a burst of fast batches on the threads
 * already running instead of waking (and context-switching) every thread for one batch each;
 * slow batches still spread over every thread, one wake-up latency apart.
 */
static cthread_t *pick_idle(rmq_pool_t *p)
{
    if (p->waking > 0) return NULL;
    for (int i = 0; i < p->n; i++) {
        cthread_t *t = &p->t[i];
        if (t->woken || t == self_thread) continue;
        if (t->state == CT_IDLE) {
            t->woken = 1;
            p->waking++;
            return t;
        }
        /* A serving thread with room: its loop's wake-up, here (its loop lives while it
         * serves); nothing left to signal. */
        if (t->state == CT_SERVING && t->nfl < p->o.batches_per_thread) {
            t->woken = 1;
            p->waking++;
            rmq__coloop_wake(t->co);
            return NULL;
        }
    }
    return NULL;
}

/* The pool's mutex guards a few pointer moves at a time: an adaptive mutex spins briefly
 * before sleeping, which saves a futex wait/wake pair per contended hand-over. */
static void init_mutex(uv_mutex_t *mu)
{
#if defined(PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP)
    pthread_mutexattr_t a;
    if (pthread_mutexattr_init(&a) == 0) {
        int ok = pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP) == 0 &&
                 pthread_mutex_init(mu, &a) == 0;
        pthread_mutexattr_destroy(&a);
        if (ok) return;
    }
#endif
    uv_mutex_init(mu);
}

/* ---- running a batch (consume thread) ----------------------------------------------------- */

static const char *field_str(lua_State *L, int idx, const char *k, size_t *len)
{
    lua_getfield(L, idx, k);
    const char *s = lua_isstring(L, -1) ? lua_tolstring(L, -1, len) : NULL;
    if (!s) *len = 0;
    lua_pop(L, 1); /* the string stays alive: it is referenced by the entry table */
    return s;
}

/* Copy the sends table at idx (a list built by rmq.send, already validated) into one block. */
static void collect_sends(lua_State *L, int idx, rmq_batch_t *b)
{
    static const char *names[] = {"topic", "body", "tags", "keys", "props"};
    int n = (int)lua_objlen(L, idx);
    if (n <= 0) return;
    size_t total = sizeof(rmq_send_t) * (size_t)n;
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, idx, i);
        for (int k = 0; k < 5; k++) {
            size_t len;
            field_str(L, lua_gettop(L), names[k], &len);
            total += len;
        }
        lua_pop(L, 1);
    }
    rmq_send_t *s = rmq__xcalloc(1, total);
    char *w = (char *)(s + n);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, idx, i + 1);
        int e = lua_gettop(L);
        const char **ptrs[] = {&s[i].topic, &s[i].body, &s[i].tags, &s[i].keys, &s[i].props};
        uint32_t *lens[] = {&s[i].topic_len, &s[i].body_len, &s[i].tags_len, &s[i].keys_len,
                            &s[i].props_len};
        for (int k = 0; k < 5; k++) {
            size_t len;
            const char *v = field_str(L, e, names[k], &len);
            *ptrs[k] = w;
            *lens[k] = (uint32_t)len;
            if (len) memcpy(w, v, len);
            w += len;
        }
        lua_getfield(L, e, "delay_level");
        s[i].delay_level = (int32_t)lua_tointeger(L, -1);
        lua_pop(L, 2);
    }
    b->sends = s;
    b->nsends = n;
}

void rmq__pool_batch_release(rmq_batch_t *b)
{
    free(b->sends);
    b->sends = NULL;
    b->nsends = 0;
}


/* The running batch's start for the consume_timeout watchdog (minutes): the coarse clock has
 * CLOCK_MONOTONIC's epoch (rmq__mono_ms), lags it by a few ms and costs a fraction of a read. */
static int64_t coarse_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void run_batch(cthread_t *t, rmq_batch_t *b)
{
    lua_State *L = t->L;
    rmq_pool_t *p = t->p;
    char err[4096];
    b->thread_index = t->index;
    b->handler_error = 0;
    b->nsends = 0;
    b->sends = NULL;
    if (p->o.begin && p->o.begin(p->o.ud, b, t->cur_start)) {
        b->status = RMQ_CONSUME_SKIPPED;
        b->ack_count = 0;
        return;
    }
    *t->slot = b;
    lua_rawgeti(L, LUA_REGISTRYINDEX, t->ref_dispatch);
    rmq__memlimit_arm(&t->ml, 1); /* only inside this pcall does the limit refuse */
    int rc = lua_pcall(L, 0, 2, 1); /* index 1: rmq__lua_traceback */
    rmq__memlimit_arm(&t->ml, 0);
    *t->slot = NULL;
    int failed = 0;
    if (rc) {
        const char *m = lua_tostring(L, -1);
        snprintf(err, sizeof(err), "%s", m ? m : "(error without a message)");
        lua_pop(L, 1);
        /* The dispatcher itself failed (an interrupt outside the handler's xpcall, memory). */
        b->status = b->orderly ? RMQ_CONSUME_SUSPEND : RMQ_CONSUME_RECONSUME_LATER;
        b->ack_count = 0;
        b->handler_error = 1;
        char text[4200];
        snprintf(text, sizeof(text), "dispatch failed for %d message(s): %s", b->n, err);
        rmq__log_batch_error(t->index, b, text);
        failed = 1;
    } else {
        if (lua_isstring(L, -2)) {
            rmq__log_batch_error(t->index, b, lua_tostring(L, -2));
            failed = 1;
        }
        if (lua_istable(L, -1)) collect_sends(L, lua_gettop(L), b);
        lua_pop(L, 2);
    }
    if (failed) {
        uv_mutex_lock(&p->mu);
        p->errors++;
        uv_mutex_unlock(&p->mu);
    }
}

/* ---- thread life ------------------------------------------------------------------------- */

/* Create the thread's state: script loaded, dispatcher built, init run. 0 or error in err. */
static int load_state(cthread_t *t, char *err, size_t errsz)
{
    rmq_pool_t *p = t->p;
    rmq_lua_host_t h = {.role = "consume",
                        .script_path = p->script_path,
                        .consumer_group = p->group,
                        .thread_index = t->index,
                        .thread_count = p->n,
                        .shdicts = p->o.shdicts,
                        .flow = p->o.flow,
                        .ngx_shim = p->o.ngx_shim};
    lua_State *L = rmq__lua_new(&h, err, errsz);
    if (!L) return RMQ_ERR_LUA;
    t->L = L;
    const char *loader = p->o.loader_module ? p->o.loader_module : "rmq.script";
    const char *dispatcher = p->o.dispatch_module ? p->o.dispatch_module : "rmq.dispatch";
    if (rmq__lua_getfield_mod(L, loader, "load", err, errsz)) return RMQ_ERR_LUA;
    lua_pushstring(L, p->script_path);
    if (rmq__lua_pcall(L, 1, 1, err, errsz)) return RMQ_ERR_LUA;
    int spec = lua_gettop(L);
    if (rmq__lua_getfield_mod(L, dispatcher, "new", err, errsz)) return RMQ_ERR_LUA;
    lua_pushvalue(L, spec);
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, t->index);
    lua_setfield(L, -2, "thread_index");
    lua_pushinteger(L, p->n);
    lua_setfield(L, -2, "thread_count");
    if (p->group) {
        lua_pushstring(L, p->group);
        lua_setfield(L, -2, "consumer_group");
    }
    if (rmq__lua_pcall(L, 2, 1, err, errsz)) return RMQ_ERR_LUA;
    int d = lua_gettop(L);
    lua_getfield(L, d, "slot_addr");
    t->slot = (rmq_batch_t **)(uintptr_t)lua_tonumber(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, d, "dispatch");
    t->ref_dispatch = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_getfield(L, d, "shutdown");
    t->ref_shutdown = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_getfield(L, d, "init");
    t->ref_init = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_getfield(L, d, "serve"); /* LUA_REFNIL for a dispatcher without serve mode */
    t->ref_serve = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_settop(L, 0);
    /* The message handler of run_batch's lua_pcall (rmq__lua_pcall's), kept at stack index 1 so
     * that no closure is made per batch. */
    lua_pushcfunction(L, rmq__lua_traceback); /* stays at index 1 for run_batch */
    lua_sethook(L, check_hook, LUA_MASKCOUNT, RMQ_POOL_HOOK_COUNT); /* this thread, its state */
    if (!t->slot) {
        rmq__seterr(err, errsz, "%s returned no slot", dispatcher);
        return RMQ_ERR_LUA;
    }
    return 0;
}

/* The state's init hook (once). 0 or error in err. */
static int run_init(cthread_t *t, char *err, size_t errsz)
{
    rmq_pool_t *p = t->p;
    t->inited = 1;
    lua_rawgeti(t->L, LUA_REGISTRYINDEX, t->ref_init);
    if (rmq__lua_pcall(t->L, 0, 0, err, errsz)) {
        char tmp[1024];
        snprintf(tmp, sizeof(tmp), "%s", err);
        rmq__seterr(err, errsz, "init hook of %s (thread %d) failed: %s", p->script_path,
                    t->index + 1, tmp);
        return RMQ_ERR_LUA;
    }
    return 0;
}

/* lua_memory_limit_mb on the thread's state, once its init ran: 0, or RMQ_ERR_LUA when the
 * state is not under the limit even then (nothing installed). */
static int limit_memory(cthread_t *t, char *err, size_t errsz)
{
    rmq_pool_t *p = t->p;
    if (p->o.lua_memory_limit_kb <= 0) return 0;
    lua_gc(t->L, LUA_GCCOLLECT, 0);
    int64_t used = lua_gc(t->L, LUA_GCCOUNT, 0);
    if (used >= p->o.lua_memory_limit_kb) {
        rmq__seterr(err, errsz,
                    "the Lua state of consume thread %d holds %lld KiB once %s is loaded and its "
                    "init ran: not under lua_memory_limit_mb %lld",
                    t->index + 1, (long long)used, p->script_path,
                    (long long)(p->o.lua_memory_limit_kb / 1024));
        return RMQ_ERR_LUA;
    }
    rmq__memlimit_install(t->L, &t->ml, (size_t)p->o.lua_memory_limit_kb * 1024);
    return 0;
}

/*
 * lua_memory_limit_mb, after a batch (consume thread): the batch during which the limit refused
 * an allocation fails even if its handler caught the error, and the thread's state is made
 * anew. The new state is made first (its init runs), then the old one's shutdown hook runs and
 * it is closed; if no new state can be made, the old one is kept.
 */
static void check_memory(cthread_t *t, rmq_batch_t *b)
{
    size_t tripped = t->ml.tripped;
    if (!tripped) return;
    if (b->status != RMQ_CONSUME_SKIPPED && !b->handler_error) {
        rmq__pool_batch_release(b);
        b->status = b->orderly ? RMQ_CONSUME_SUSPEND : RMQ_CONSUME_RECONSUME_LATER;
        b->ack_count = 0;
        b->handler_error = 1;
    }
    rmq_log_error("lua",
                  "thread %d: the handler went past lua_memory_limit_mb %zu (an allocation was "
                  "refused at %zu MiB): the batch fails and comes back later; making the "
                  "thread's Lua state anew",
                  t->index + 1, t->ml.limit >> 20, tripped >> 20);
    lua_State *old = t->L;
    int ref_shutdown = t->ref_shutdown, ref_dispatch = t->ref_dispatch, ref_init = t->ref_init;
    int ref_serve = t->ref_serve;
    int inited = t->inited;
    rmq_batch_t **slot = t->slot;
    size_t limit = t->ml.limit;
    char err[1024];
    rmq__memlimit_uninstall(old, &t->ml); /* the old state frees through its own allocator */
    t->L = NULL;
    int rc = load_state(t, err, sizeof(err));
    if (!rc) rc = run_init(t, err, sizeof(err));
    if (!rc) rc = limit_memory(t, err, sizeof(err));
    if (rc) {
        rmq_log_error("lua", "thread %d: no new Lua state (%s): keeping the old one",
                      t->index + 1, err);
        if (t->L) lua_close(t->L);
        t->L = old, t->slot = slot, t->inited = inited;
        t->ref_shutdown = ref_shutdown, t->ref_dispatch = ref_dispatch, t->ref_init = ref_init;
        t->ref_serve = ref_serve;
        lua_gc(old, LUA_GCCOLLECT, 0);
        rmq__memlimit_install(old, &t->ml, limit);
        return;
    }
    if (inited) {
        lua_rawgeti(old, LUA_REGISTRYINDEX, ref_shutdown);
        if (rmq__lua_pcall(old, 0, 0, err, sizeof(err)))
            rmq_log_error("lua", "thread %d: shutdown hook of the old state failed: %s",
                          t->index + 1, err);
    }
    lua_close(old);
}

static void run_shutdown(cthread_t *t)
{
    char err[2048];
    if (!t->inited) return; /* a state whose init never ran is closed without its shutdown */
    __atomic_store_n(&t->irq, 0, __ATOMIC_RELAXED); /* a stop request for the last batch */
    lua_rawgeti(t->L, LUA_REGISTRYINDEX, t->ref_shutdown);
    if (rmq__lua_pcall(t->L, 0, 0, err, sizeof(err)))
        rmq_log_error("lua", "thread %d: shutdown hook failed: %s", t->index + 1, err);
}

/* The consume thread records its Lua heap for rmq__pool_lua_memory (a field read, no GC): after
 * init, every 64th batch and whenever it runs out of work. */
static void note_lua_memory(cthread_t *t)
{
    int64_t kb = lua_gc(t->L, LUA_GCCOUNT, 0), b = lua_gc(t->L, LUA_GCCOUNTB, 0);
    __atomic_store_n(&t->lua_bytes, kb * 1024 + b, __ATOMIC_RELAXED);
    t->since_note = 0;
}

/* Consume thread: its handler first waited, so it made its loop (coloop.h). */
static void loop_made(void *ud, rmq_coloop_t *c)
{
    cthread_t *t = ud;
    uv_mutex_lock(&t->p->mu);
    t->co = c; /* interrupt() wakes it from now on */
    uv_mutex_unlock(&t->p->mu);
}

/* ---- serve mode: several batches in flight (consume thread) ------------------------------- */

/*
 * Once a handler of a thread's state waited in place (rmq.co's wait inside a batch), the thread
 * serves: the scheduler of its state (rmq.co.serve_step, through the dispatcher's serve) takes
 * batches with rmq_serve_take, runs each as a coroutine of the state, waits on the thread's loop
 * with rmq_serve_wait and resumes the coroutines whose I/O completed; each lua_pcall of serve
 * is one step, and returns the batches that ended in it. A handler that never waits never gets
 * here: its batches keep the direct path (run_batch).
 */

/* Consume thread, in serve mode: the next batch for this thread (its own queue first, then the
 * shared one) in a free flight slot, *out = the batch; -1 when nothing is queued or every slot
 * is taken. The batch counts as running from here. A batch that opts.begin skips goes back at
 * once. */
RMQ_EXPORT int rmq_serve_take(rmq_batch_t **out)
{
    cthread_t *t = self_thread;
    rmq_pool_t *p = t->p;
    uv_mutex_lock(&p->mu);
    if (t->woken) { /* picked for shared work: awake now */
        t->woken = 0;
        p->waking--;
    }
    for (;;) {
        if (t->nfl >= p->o.batches_per_thread) break;
        rmq_batch_t *b = bq_pop(&t->q);
        int shared = 0;
        if (!b && !p->quit) shared = (b = bq_pop(&p->shared)) != NULL;
        if (!b) break;
        if (p->stopping && rmq__mono_ms() >= p->stop_deadline) {
            not_run(p, b); /* stop's wait is over: queued batches are not run */
            continue;
        }
        int k = 0;
        while (t->fl[k].b) k++;
        flight_t *f = &t->fl[k];
        memset(f, 0, sizeof(*f));
        f->b = b;
        f->start = coarse_ms();
        t->nfl++;
        p->running++;
        cthread_t *next = shared && p->shared.n > 0 ? pick_idle(p) : NULL;
        uv_mutex_unlock(&p->mu);
        if (next) uv_cond_signal(&next->cond);
        b->thread_index = t->index;
        b->handler_error = 0;
        b->nsends = 0;
        b->sends = NULL;
        f->start_ns = (int64_t)uv_hrtime();
        if (!p->o.begin || !p->o.begin(p->o.ud, b, f->start)) {
            *out = b;
            return k;
        }
        b->status = RMQ_CONSUME_SKIPPED;
        b->ack_count = 0;
        rmq_batch_run_t run = {.start_ns = f->start_ns, .end_ns = (int64_t)uv_hrtime()};
        uv_mutex_lock(&p->mu);
        f->b = NULL;
        t->nfl--;
        p->running--;
        if (p->o.ran) p->o.ran(p->o.ud, b, &run);
        post_done(p, b);
    }
    uv_mutex_unlock(&p->mu);
    return -1;
}

/* Consume thread: the flight slots whose batch the watchdog or a stop interrupted and that the
 * scheduler has not been told of yet (it abandons them). */
RMQ_EXPORT int rmq_serve_expired(int *slots, int max)
{
    cthread_t *t = self_thread;
    int n = 0;
    for (int k = 0; k < t->p->o.batches_per_thread && n < max; k++) {
        flight_t *f = &t->fl[k];
        if (f->reported || !__atomic_load_n(&f->irq, __ATOMIC_ACQUIRE)) continue;
        f->reported = 1;
        slots[n++] = k;
    }
    return n;
}

RMQ_EXPORT int *rmq_serve_cur(void)
{
    return &self_thread->serve_cur;
}

/* Consume thread: flight slot k's batch ended. abandoned: the scheduler gave it up (interrupted
 * while it waited, or it could never go on); err: the error to log, or NULL; sends at stack
 * index si (0 = none). Its result fields are set unless abandoned. */
static void flight_done(cthread_t *t, int k, int abandoned, const char *err, int si)
{
    rmq_pool_t *p = t->p;
    flight_t *f = &t->fl[k];
    rmq_batch_t *b = f->b;
    int failed = 0;
    uv_mutex_lock(&p->mu);
    const char *why = f->why;
    uv_mutex_unlock(&p->mu);
    if (abandoned) {
        b->status = b->orderly ? RMQ_CONSUME_SUSPEND : RMQ_CONSUME_RECONSUME_LATER;
        b->ack_count = 0;
        b->handler_error = 1;
        char text[1200];
        snprintf(text, sizeof(text), "%s handler of %d message(s) did not finish: %s",
                 b->orderly ? "consume_orderly" : "consume", b->n,
                 err ? err : why && !strcmp(why, "stop") ? "the pool stopped"
                                                         : "it ran past consume_timeout");
        if (!why || strcmp(why, "stop")) rmq__log_batch_error(t->index, b, text);
        failed = 1;
    } else {
        if (err) {
            rmq__log_batch_error(t->index, b, err);
            failed = 1;
        }
        if (si) collect_sends(t->L, si, b);
    }
    rmq_batch_run_t run = {.start_ns = f->start_ns, .end_ns = (int64_t)uv_hrtime()};
    uv_mutex_lock(&p->mu);
    if (t->abandoned) { /* stop already returned its batches; the thread only ends */
        uv_mutex_unlock(&p->mu);
        return;
    }
    why = f->why;
    if (failed) p->errors++;
    if (why && !strcmp(why, "stop")) {
        rmq__pool_batch_release(b);
        b->status = RMQ_CONSUME_NOT_RUN;
        b->ack_count = 0;
    }
    run.timed_out = why && !strcmp(why, "consume_timeout");
    f->b = NULL;
    t->nfl--;
    p->running--;
    if (p->o.ran) p->o.ran(p->o.ud, b, &run);
    post_done(p, b);
    if (p->stopping) uv_cond_broadcast(&p->start_cond);
    uv_mutex_unlock(&p->mu);
}

/* Consume thread, called and returning under p->mu: serve until nothing is in flight and
 * nothing is queued for this thread (or the pool quits); the thread is IDLE again on return. */
static void serve(cthread_t *t)
{
    rmq_pool_t *p = t->p;
    lua_State *L = t->L;
    if (t->woken) {
        t->woken = 0;
        p->waking--;
    }
    set_state(t, CT_SERVING);
    t->in_serve = 1;
    t->serve_cur = -1;
    uv_mutex_unlock(&p->mu);
    rmq_dbg(RMQ_DBG_CONSUME, "consume", "thread %d: serving (up to %d batches in flight)",
            t->index + 1, p->o.batches_per_thread);
    for (;;) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, t->ref_serve);
        rmq__memlimit_arm(&t->ml, 1);
        int rc = lua_pcall(L, 0, 3, 1); /* index 1: rmq__lua_traceback */
        rmq__memlimit_arm(&t->ml, 0);
        t->serve_cur = -1;
        int inflight;
        if (rc) {
            /* The scheduler itself failed (memory): every batch in flight fails, and the
             * scheduler forgets them (serve_reset). */
            const char *m = lua_tostring(L, -1);
            char err[2048];
            snprintf(err, sizeof(err), "the batch scheduler failed: %s",
                     m ? m : "(error without a message)");
            lua_pop(L, 1);
            for (int k = 0; k < p->o.batches_per_thread; k++)
                if (t->fl[k].b) flight_done(t, k, 1, err, 0);
            lua_rawgeti(L, LUA_REGISTRYINDEX, t->ref_serve);
            lua_pushboolean(L, 1); /* serve(true): reset */
            if (lua_pcall(L, 1, 0, 1)) lua_pop(L, 1);
            inflight = 0;
        } else {
            int out = lua_gettop(L) - 2;
            int n = (int)lua_tointeger(L, out + 1);
            inflight = (int)lua_tointeger(L, out + 2);
            for (int i = 0; i < n; i++) {
                lua_rawgeti(L, out, 3 * i + 1);
                int k = (int)lua_tointeger(L, -1);
                lua_rawgeti(L, out, 3 * i + 2);
                const char *err = lua_isstring(L, -1) ? lua_tostring(L, -1) : NULL;
                lua_rawgeti(L, out, 3 * i + 3);
                int si = lua_istable(L, -1) ? lua_gettop(L) : 0;
                if (k < 0)
                    flight_done(t, -k - 1, 1, err, 0);
                else
                    flight_done(t, k, 0, err, si);
                lua_pop(L, 3);
            }
            lua_pop(L, 3);
        }
        if (++t->since_note >= 64) note_lua_memory(t);
        t->worked = 1;
        uv_mutex_lock(&p->mu);
        if (t->abandoned) break;
        if (inflight == 0 && (p->quit || (!t->q.n && !p->shared.n) ||
                              (p->stopping && rmq__mono_ms() >= p->stop_deadline)))
            break;
        uv_mutex_unlock(&p->mu);
    }
    t->in_serve = 0;
    if (t->abandoned) return; /* a stop gave up on it: it only ends */
    if (t->woken) {
        t->woken = 0;
        p->waking--;
    }
    set_state(t, CT_IDLE);
    if (p->stopping) uv_cond_broadcast(&p->start_cond);
    rmq_dbg(RMQ_DBG_CONSUME, "consume", "thread %d: nothing in flight, serving ends",
            t->index + 1);
    if (t->ml.tripped) {
        /* lua_memory_limit_mb went past while serving: the state is made anew now that no
         * batch is in flight (the batches it failed already came back). */
        rmq_batch_t none = {.status = RMQ_CONSUME_SKIPPED};
        uv_mutex_unlock(&p->mu);
        check_memory(t, &none);
        uv_mutex_lock(&p->mu);
    }
}

static void thread_main(void *arg)
{
    cthread_t *t = arg;
    rmq_pool_t *p = t->p;
    char err[1024];
    self_thread = t;
    rmq__coloop_configure(&p->co_conf);
    rmq__coloop_prepare(&t->irq, loop_made, t);
    int rc = load_state(t, err, sizeof(err));
    if (!rc && !p->o.defer_init) rc = run_init(t, err, sizeof(err));
    if (!rc && !p->o.defer_init) rc = limit_memory(t, err, sizeof(err));

    uv_mutex_lock(&p->mu);
    if (rc) {
        if (!p->start_err[0]) snprintf(p->start_err, sizeof(p->start_err), "%s", err);
        set_state(t, CT_FAILED);
        uv_cond_broadcast(&p->start_cond);
        uv_mutex_unlock(&p->mu);
        if (t->L) lua_close(t->L);
        t->L = NULL;
        rmq__coloop_free_self();
        rmq__thread_finishing();
        return;
    }
    if (p->o.defer_init) {
        /* Loaded: rmq__pool_prepare returns; init waits for the go (the old threads of a reload
         * run their shutdown hooks first), or the pool is discarded or stopped before. */
        set_state(t, CT_WAITING);
        uv_cond_broadcast(&p->start_cond);
        while (!p->go && !p->quit) uv_cond_wait(&t->cond, &p->mu);
        if (!p->quit) {
            uv_mutex_unlock(&p->mu);
            if (run_init(t, err, sizeof(err)))
                rmq_log_error("lua", "%s; the thread runs the reloaded script without it", err);
            else if (limit_memory(t, err, sizeof(err)))
                rmq_log_error("lua", "%s; the thread runs without the limit", err);
            uv_mutex_lock(&p->mu);
        }
    }
    set_state(t, CT_IDLE);
    uv_cond_broadcast(&p->start_cond);
    note_lua_memory(t);
    for (;;) {
        if (t->waits && t->ref_serve != LUA_REFNIL && p->o.batches_per_thread > 1 && !p->quit &&
            (t->q.n || p->shared.n) &&
            !(p->stopping && rmq__mono_ms() >= p->stop_deadline)) {
            serve(t); /* returns under p->mu, the thread IDLE again */
            if (t->abandoned) break;
            continue;
        }
        rmq_batch_t *b = bq_pop(&t->q);
        int shared = 0;
        if (!b && !p->quit) shared = (b = bq_pop(&p->shared)) != NULL;
        if (b && p->stopping && rmq__mono_ms() >= p->stop_deadline) {
            not_run(p, b); /* stop's wait is over: queued batches are not run */
            continue;
        }
        if (b) {
            t->cur = b;
            t->cur_start = coarse_ms();
            if (t->interrupted) {
                /* The last batch was interrupted: its hook may not have seen the flag. */
                __atomic_store_n(&t->irq, 0, __ATOMIC_RELAXED);
                t->interrupted = 0;
            }
            p->running++;
            set_state(t, CT_BUSY);
            /* More shared work queued and nobody on the way: wake one more thread (it chains
             * on in turn). This thread is BUSY now, so it cannot pick itself. */
            cthread_t *next = shared && p->shared.n > 0 ? pick_idle(p) : NULL;
            uv_mutex_unlock(&p->mu);
            if (next) uv_cond_signal(&next->cond);

            rmq_batch_run_t run = {.start_ns = (int64_t)uv_hrtime()};
            run_batch(t, b);
            run.end_ns = (int64_t)uv_hrtime();
            if (rmq__coloop_take_waited()) t->waits = 1; /* serve mode from the next batch */
            if (++t->since_note == 64) note_lua_memory(t);
            t->worked = 1;
            if (t->ml.limit) check_memory(t, b);

            uv_mutex_lock(&p->mu);
            if (t->abandoned) break; /* stop already returned its batch */
            p->running--;
            t->cur = NULL;
            if (t->interrupted && t->interrupt_why && !strcmp(t->interrupt_why, "stop")) {
                rmq__pool_batch_release(b);
                b->status = RMQ_CONSUME_NOT_RUN;
                b->ack_count = 0;
            }
            run.timed_out = t->interrupted && t->interrupt_why &&
                            !strcmp(t->interrupt_why, "consume_timeout");
            if (p->o.ran) p->o.ran(p->o.ud, b, &run);
            set_state(t, CT_IDLE);
            post_done(p, b);
            if (p->stopping) uv_cond_broadcast(&p->start_cond);
            continue;
        }
        if (p->quit) break;
        if (t->since_note) note_lua_memory(t);
        if (t->worked) {
            /* Idle after work: once it stays idle RMQ_POOL_IDLE_GC_MS, a full collection, so
             * the garbage of a burst (a backlog caught up by every thread at once) does not keep
             * its heap at the high-water mark until its next batch. Work that arrives meanwhile
             * is found by the loop's next look at the queues. */
            int waited = uv_cond_timedwait(&t->cond, &p->mu, RMQ_POOL_IDLE_GC_MS * 1000000ull);
            if (waited == UV_ETIMEDOUT && !p->quit && !t->q.n && !p->shared.n) {
                t->worked = 0;
                uv_mutex_unlock(&p->mu);
                lua_gc(t->L, LUA_GCCOLLECT, 0);
                note_lua_memory(t);
                uv_mutex_lock(&p->mu);
            }
        } else {
            uv_cond_wait(&t->cond, &p->mu);
        }
        if (t->woken) {
            t->woken = 0;
            p->waking--;
        }
    }
    int abandoned = t->abandoned;
    if (!abandoned) set_state(t, CT_STOPPED);
    uv_mutex_unlock(&p->mu);
    if (!abandoned) run_shutdown(t);
    lua_close(t->L); /* its sockets close (their memory goes with the loop's last run) */
    t->L = NULL;
    uv_mutex_lock(&p->mu);
    t->co = NULL;
    uv_mutex_unlock(&p->mu);
    rmq__coloop_free_self();
    rmq__thread_finishing();
}

/* ---- loop thread side --------------------------------------------------------------------- */

static void free_pool(rmq_pool_t *p)
{
    for (int i = 0; i < p->n; i++) {
        uv_cond_destroy(&p->t[i].cond);
        free(p->t[i].q.a);
        free(p->t[i].fl);
    }
    free(p->t);
    free(p->shared.a);
    free(p->done.a);
    free(p->done_spare.a);
    free(p->held.a);
    uv_cond_destroy(&p->start_cond);
    uv_mutex_destroy(&p->mu);
    free(p->script_path);
    free(p->group);
    free((char *)p->co_conf.ca_file);
    free(p);
}

static void on_handle_closed(uv_handle_t *h)
{
    rmq_pool_t *p = h->data;
    if (--p->open_handles > 0) return;
    void (*cb)(void *) = p->close_cb;
    void *ud = p->close_ud;
    int abandoned = 0;
    for (int i = 0; i < p->n; i++) abandoned |= p->t[i].abandoned;
    /* An abandoned thread may still wake up and touch the pool: then it is leaked on purpose. */
    if (!abandoned) free_pool(p);
    if (cb) cb(ud);
}

/* Loop thread: b, or the copy the owner made of it when b is the batch of an abandoned thread
 * (that thread may still write into b: the owner leaves b to it). */
static rmq_batch_t *replace_lost(rmq_pool_t *p, rmq_batch_t *b)
{
    for (int i = 0; i < p->n; i++) {
        cthread_t *t = &p->t[i];
        int found = t->lost == b;
        uv_mutex_lock(&p->mu);
        for (int k = 0; !found && t->fl && k < p->o.batches_per_thread; k++)
            if (t->fl[k].lost && t->fl[k].b == b) found = 1, t->fl[k].lost = 0;
        if (found) {
            if (t->lost == b) t->lost = NULL;
            p->n_lost--;
        }
        uv_mutex_unlock(&p->mu);
        if (!found) continue;
        if (!p->o.abandoned) return b;
        rmq_batch_t *nb = p->o.abandoned(p->o.ud, b);
        nb->status = RMQ_CONSUME_NOT_RUN;
        nb->ack_count = 0;
        nb->handler_error = 0;
        nb->nsends = 0;
        nb->sends = NULL;
        return nb;
    }
    return b;
}

static void on_async(uv_async_t *a)
{
    rmq_pool_t *p = a->data;
    for (;;) {
        /* Take every finished batch under one lock (the consume threads keep posting into the
         * other queue meanwhile), then run the callbacks without it. */
        uv_mutex_lock(&p->mu);
        bq_t got = p->done;
        p->done = p->done_spare;
        int reaped = p->reaped;
        int lost = p->n_lost;
        uv_mutex_unlock(&p->mu);
        if (got.n == 0) {
            p->done_spare = got;
            if (reaped && !p->closing) {
                p->closing = 1;
                uv_thread_join(&p->reaper);
                uv_close((uv_handle_t *)&p->async, on_handle_closed);
                uv_close((uv_handle_t *)&p->watchdog, on_handle_closed);
            }
            return;
        }
        rmq_batch_t *b;
        while ((b = bq_pop(&got))) {
            p->pending--;
            if (lost) b = replace_lost(p, b);
            if (p->requeue && b->status == RMQ_CONSUME_NOT_RUN)
                p->requeue(p->o.ud, b); /* retired: it goes to the pool that replaced this one */
            else
                p->o.done(p->o.ud, b);
        }
        got.head = 0;
        p->done_spare = got;
    }
}

static void on_watchdog(uv_timer_t *tm)
{
    rmq_pool_t *p = tm->data;
    int64_t now = rmq__mono_ms();
    uv_mutex_lock(&p->mu);
    for (int i = 0; i < p->n; i++) {
        cthread_t *t = &p->t[i];
        if (t->cur && !t->interrupted && now - t->cur_start > p->o.consume_timeout_ms) {
            rmq_log_error("lua",
                          "thread %d: %s handler running for %lld ms (consume_timeout %lld ms): "
                          "interrupting it",
                          t->index + 1, t->cur->orderly ? "consume_orderly" : "consume",
                          (long long)(now - t->cur_start), (long long)p->o.consume_timeout_ms);
            interrupt(t, "consume_timeout");
        }
        if (!t->nfl) continue;
        /* Serve mode: every batch in flight, from its own start, yielded time included. */
        int n = interrupt_flights(t, "consume_timeout", now - p->o.consume_timeout_ms);
        if (n)
            rmq_log_error("lua",
                          "thread %d: %d batch(es) in flight for more than consume_timeout "
                          "%lld ms: interrupting them (one that waits is given up)",
                          t->index + 1, n, (long long)p->o.consume_timeout_ms);
    }
    uv_mutex_unlock(&p->mu);
}

int rmq__pool_start(const rmq_pool_opts_t *opts, rmq_pool_t **out, char *errstr,
                    size_t errstr_size)
{
    int rc = rmq__pool_prepare(opts, out, errstr, errstr_size);
    if (rc) return rc;
    rmq__pool_attach(*out);
    return 0;
}

int rmq__pool_prepare(const rmq_pool_opts_t *opts, rmq_pool_t **out, char *errstr,
                      size_t errstr_size)
{
    if (opts->nthreads < 1 || !opts->script_path || !opts->loop || !opts->done) {
        rmq__seterr(errstr, errstr_size, "consume pool: bad options (nthreads %d)",
                    opts->nthreads);
        return RMQ_ERR_INVALID;
    }
    if (opts->ssl_ca_file && *opts->ssl_ca_file && access(opts->ssl_ca_file, R_OK) != 0) {
        rmq__seterr(errstr, errstr_size, "lua_ssl_trusted_certificate: cannot read %s (%s)",
                    opts->ssl_ca_file, strerror(errno));
        return RMQ_ERR_CONFIG;
    }
    rmq_pool_t *p = rmq__xcalloc(1, sizeof(*p));
    p->o = *opts;
    p->co_conf.max_sockets = opts->socket_max > 0 ? opts->socket_max : RMQ_COLOOP_MAX_SOCKETS;
    p->co_conf.ca_file =
        opts->ssl_ca_file && *opts->ssl_ca_file ? rmq__xstrdup(opts->ssl_ca_file) : NULL;
    p->co_conf.verify_depth =
        opts->ssl_verify_depth > 0 ? opts->ssl_verify_depth : RMQ_COLOOP_VERIFY_DEPTH;
    p->script_path = rmq__xstrdup(opts->script_path);
    p->group = opts->consumer_group ? rmq__xstrdup(opts->consumer_group) : NULL;
    if (p->o.consume_timeout_ms <= 0) p->o.consume_timeout_ms = 15 * 60000;
    if (p->o.batches_per_thread < 1) p->o.batches_per_thread = 1;
    p->n = opts->nthreads;
    p->t = rmq__xcalloc((size_t)p->n, sizeof(cthread_t));
    init_mutex(&p->mu);
    uv_cond_init(&p->start_cond);
    int started = 0;
    for (int i = 0; i < p->n; i++) {
        cthread_t *t = &p->t[i];
        t->p = p;
        t->index = i;
        t->serve_cur = -1;
        if (p->o.batches_per_thread > 1)
            t->fl = rmq__xcalloc((size_t)p->o.batches_per_thread, sizeof(flight_t));
        uv_cond_init(&t->cond);
    }
    for (int i = 0; i < p->n; i++) {
        if (uv_thread_create(&p->t[i].tid, thread_main, &p->t[i]) != 0) {
            snprintf(p->start_err, sizeof(p->start_err), "cannot create consume thread %d", i);
            break;
        }
        started++;
    }
    /* Wait until every started thread is ready or failed. */
    uv_mutex_lock(&p->mu);
    for (;;) {
        int waiting = 0;
        for (int i = 0; i < started; i++)
            if (p->t[i].state == CT_STARTING) waiting = 1;
        if (!waiting) break;
        uv_cond_wait(&p->start_cond, &p->mu);
    }
    int failed = p->start_err[0] != 0;
    if (failed) {
        p->quit = 1;
        for (int i = 0; i < started; i++) uv_cond_signal(&p->t[i].cond);
    }
    uv_mutex_unlock(&p->mu);
    if (failed) {
        for (int i = 0; i < started; i++) uv_thread_join(&p->t[i].tid);
        rmq__seterr(errstr, errstr_size, "%s", p->start_err);
        free_pool(p);
        return RMQ_ERR_LUA;
    }
    *out = p;
    return 0;
}

void rmq__pool_attach(rmq_pool_t *p)
{
    const rmq_pool_opts_t *opts = &p->o;
    uv_async_init(opts->loop, &p->async, on_async);
    p->async.data = p;
    uv_timer_init(opts->loop, &p->watchdog);
    p->watchdog.data = p;
    int64_t iv = p->o.consume_timeout_ms / 4;
    if (iv > 1000) iv = 1000;
    if (iv < 10) iv = 10;
    uv_timer_start(&p->watchdog, on_watchdog, (uint64_t)iv, (uint64_t)iv);
    uv_unref((uv_handle_t *)&p->watchdog);
    p->open_handles = 2;
    rmq_dbg(RMQ_DBG_CONSUME, "consume", "pool started: %d thread(s) running %s", p->n,
            p->script_path);
}

void rmq__pool_discard(rmq_pool_t *p)
{
    uv_mutex_lock(&p->mu);
    p->quit = 1;
    for (int i = 0; i < p->n; i++) uv_cond_signal(&p->t[i].cond);
    uv_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n; i++) uv_thread_join(&p->t[i].tid);
    free_pool(p);
}

void rmq__pool_go(rmq_pool_t *p)
{
    uv_mutex_lock(&p->mu);
    p->go = 1;
    for (int i = 0; i < p->n; i++) uv_cond_signal(&p->t[i].cond);
    uv_mutex_unlock(&p->mu);
}

int rmq__pool_retire(rmq_pool_t *p, rmq_pool_done_cb requeue, void (*close_cb)(void *ud),
                     void *ud)
{
    bq_t q = {0};
    rmq_batch_t *b;
    uv_mutex_lock(&p->mu);
    p->requeue = requeue;
    while ((b = bq_pop(&p->shared))) bq_push(&q, b);
    for (int i = 0; i < p->n; i++)
        while ((b = bq_pop(&p->t[i].q))) bq_push(&q, b);
    uv_mutex_unlock(&p->mu);
    while ((b = bq_pop(&p->held))) bq_push(&q, b);
    int handed = q.n;
    while ((b = bq_pop(&q))) {
        p->pending--;
        requeue(p->o.ud, b);
    }
    free(q.a);
    /* Only running batches are left: they finish, and each keeps its consume_timeout counted
     * from its own start: the watchdog goes on (a stop ends it), so a handler past it is
     * interrupted as it would have been without the reload, and its batch comes back as a
     * handler error (sent back) rather than NOT_RUN to run again in the new pool. Until this
     * pool is done the new one runs nothing, so every queue waits for it. The stop's deadline
     * (consume_timeout from now, then the "stop" interrupt) is left for what the watchdog
     * cannot interrupt. */
    rmq__pool_stop(p, p->o.consume_timeout_ms, close_cb, ud);
    uv_timer_again(&p->watchdog);
    return handed;
}

void rmq__pool_hold(rmq_pool_t *p)
{
    p->holding = 1;
}

void rmq__pool_flush(rmq_pool_t *p)
{
    p->holding = 0;
    if (p->held.n == 0) return;
    cthread_t *t = NULL;
    rmq_batch_t *b;
    uv_mutex_lock(&p->mu);
    if (p->stopping) {
        while ((b = bq_pop(&p->held))) not_run(p, b);
    } else {
        while ((b = bq_pop(&p->held))) bq_push(&p->shared, b);
        t = pick_idle(p);
    }
    uv_mutex_unlock(&p->mu);
    p->held.head = 0;
    if (t) uv_cond_signal(&t->cond);
}

/* Loop thread: a batch given to a pool whose handles are closing (it stopped and its threads
 * are gone) comes back at once, NOT_RUN, through the path on_async would have taken: its
 * wake-up will never fire again, and a batch queued there would never come back (its queue
 * waiting for it for good). The owner may hand it over to a pool that closes in the same loop
 * pass (a retired pool's requeue, when a stop closed the pool that replaced it). */
static int closed_return(rmq_pool_t *p, rmq_batch_t *b)
{
    if (!p->closing) return 0;
    b->status = RMQ_CONSUME_NOT_RUN;
    b->ack_count = 0;
    b->handler_error = 0;
    b->nsends = 0;
    b->sends = NULL;
    if (p->requeue)
        p->requeue(p->o.ud, b);
    else
        p->o.done(p->o.ud, b);
    return 1;
}

void rmq__pool_submit(rmq_pool_t *p, rmq_batch_t *b)
{
    cthread_t *t = NULL;
    if (closed_return(p, b)) return;
    p->pending++;
    if (p->holding) {
        bq_push(&p->held, b);
        return;
    }
    uv_mutex_lock(&p->mu);
    if (p->stopping) {
        not_run(p, b);
    } else {
        bq_push(&p->shared, b);
        t = pick_idle(p);
    }
    uv_mutex_unlock(&p->mu);
    /* Signalled after the unlock, so the woken thread does not block on the mutex at once.
     * t is idle, i.e. inside uv_cond_wait: if it wakes before this signal for another reason
     * it finds the batch anyway, and the late signal is a spurious wake-up. */
    if (t) uv_cond_signal(&t->cond);
}

void rmq__pool_submit_to(rmq_pool_t *p, int thread_index, rmq_batch_t *b)
{
    if (closed_return(p, b)) return;
    p->pending++;
    uv_mutex_lock(&p->mu);
    if (p->stopping || thread_index < 0 || thread_index >= p->n) {
        if (!p->stopping)
            rmq_log_error("consume", "batch for consume thread %d of %d: not run", thread_index,
                          p->n);
        not_run(p, b);
    } else {
        cthread_t *t = &p->t[thread_index];
        bq_push(&t->q, b);
        uv_cond_signal(&t->cond);
        if (t->state == CT_SERVING) rmq__coloop_wake(t->co); /* it takes its own queue first */
    }
    uv_mutex_unlock(&p->mu);
}

int rmq__pool_pending(const rmq_pool_t *p)
{
    return p->pending;
}

int rmq__pool_nthreads(const rmq_pool_t *p)
{
    return p->n;
}

int64_t rmq__pool_lua_memory(const rmq_pool_t *p, int i)
{
    if (i < 0 || i >= p->n) return 0;
    return __atomic_load_n(&p->t[i].lua_bytes, __ATOMIC_RELAXED);
}

/* p's mutex, which the readers of its counters take through a const pool. */
static uv_mutex_t *mutex_of(const rmq_pool_t *p)
{
    return (uv_mutex_t *)&p->mu;
}

int64_t rmq__pool_errors(const rmq_pool_t *p)
{
    uv_mutex_lock(mutex_of(p));
    int64_t e = p->errors;
    uv_mutex_unlock(mutex_of(p));
    return e;
}

/* Under p->mu: nothing queued and nothing running. */
static int drained(rmq_pool_t *p)
{
    if (p->shared.n || p->running) return 0;
    for (int i = 0; i < p->n; i++)
        if (p->t[i].q.n) return 0;
    return 1;
}

/* The reaper: lets queued batches run until the deadline (then returns them NOT_RUN), lets
 * running batches finish (interrupting them RMQ_POOL_STOP_GRACE_MS after the deadline, their
 * batch then comes back NOT_RUN), then quits and joins the threads; a thread whose handler does
 * not come back within a second grace period is abandoned (logged, its batch returned NOT_RUN). */
#define RMQ_POOL_STOP_GRACE_MS 5000

static void reaper_main(void *arg)
{
    rmq_pool_t *p = arg;
    uv_mutex_lock(&p->mu);
    int interrupted = 0;
    for (;;) {
        int64_t now = rmq__mono_ms();
        if (now >= p->stop_deadline) flush_queued(p);
        if (drained(p)) break;
        if (now >= p->stop_deadline + RMQ_POOL_STOP_GRACE_MS && !interrupted) {
            for (int i = 0; i < p->n; i++) {
                interrupt(&p->t[i], "stop");
                interrupt_flights(&p->t[i], "stop", 0);
            }
            interrupted = 1;
        }
        if (now >= p->stop_deadline + 2 * RMQ_POOL_STOP_GRACE_MS) {
            for (int i = 0; i < p->n; i++) {
                cthread_t *t = &p->t[i];
                if (t->nfl && !t->abandoned) {
                    /* A serving thread whose scheduler did not come back (a batch stuck in a
                     * compiled loop or a blocking call): every batch it holds goes back. */
                    rmq_log_error("consume",
                                  "thread %d: %d batch(es) in flight did not end after stop; "
                                  "abandoning the thread (they are returned as not run)",
                                  t->index + 1, t->nfl);
                    t->abandoned = 1;
                    pthread_detach(t->tid);
                    for (int k = 0; k < p->o.batches_per_thread; k++) {
                        flight_t *f = &t->fl[k];
                        if (!f->b || f->lost) continue;
                        f->lost = 1;
                        p->running--;
                        p->n_lost++;
                        not_run(p, f->b);
                    }
                }
                if (t->cur) {
                    rmq_log_error("consume",
                                  "thread %d: handler did not return after stop; abandoning "
                                  "the thread (its batch is returned as not run)",
                                  t->index + 1);
                    t->abandoned = 1;
                    /* Never joined: detached, so that its stack and descriptor go when its
                     * handler comes back and the thread ends (uv_thread_t is a pthread_t). */
                    pthread_detach(t->tid);
                    rmq_batch_t *b = t->cur;
                    t->cur = NULL;
                    p->running--;
                    t->lost = b;
                    p->n_lost++;
                    not_run(p, b);
                }
            }
            continue;
        }
        int64_t wait = 100;
        uv_cond_timedwait(&p->start_cond, &p->mu, (uint64_t)wait * 1000000u);
    }
    p->quit = 1;
    for (int i = 0; i < p->n; i++) uv_cond_signal(&p->t[i].cond);
    uv_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n; i++) {
        if (!p->t[i].abandoned) uv_thread_join(&p->t[i].tid);
    }
    uv_mutex_lock(&p->mu);
    p->reaped = 1;
    uv_async_send(&p->async);
    uv_mutex_unlock(&p->mu);
    rmq__thread_finishing();
}

void rmq__pool_stop(rmq_pool_t *p, int64_t await_ms, void (*close_cb)(void *ud), void *ud)
{
    uv_mutex_lock(&p->mu);
    if (p->stopping) {
        uv_mutex_unlock(&p->mu);
        return;
    }
    p->stopping = 1;
    p->close_cb = close_cb;
    p->close_ud = ud;
    p->stop_deadline = rmq__mono_ms() + (await_ms > 0 ? await_ms : 0);
    if (await_ms <= 0) flush_queued(p);
    uv_mutex_unlock(&p->mu);
    uv_timer_stop(&p->watchdog);
    uv_thread_create(&p->reaper, reaper_main, p);
    p->reaper_started = 1;
}

void rmq__pool_hurry(rmq_pool_t *p, int64_t await_ms)
{
    uv_mutex_lock(&p->mu);
    int64_t d = rmq__mono_ms() + (await_ms > 0 ? await_ms : 0);
    if (p->stopping && d < p->stop_deadline) {
        p->stop_deadline = d;
        uv_cond_broadcast(&p->start_cond); /* the reaper looks again */
    }
    uv_mutex_unlock(&p->mu);
}

int rmq__pool_running(const rmq_pool_t *p)
{
    uv_mutex_lock(mutex_of(p));
    int r = p->running;
    uv_mutex_unlock(mutex_of(p));
    return r;
}
