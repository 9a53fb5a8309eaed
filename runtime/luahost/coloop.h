/*
 * coloop.h -- the event loop of a thread that runs Lua handlers as coroutines (rmq.sleep,
 * rmq.thread, rmq.socket): one libuv loop per thread, made when the thread first needs it, never
 * shared with the network thread (which alone owns the broker sockets).
 *
 * Lua drives it through the FFI (rmqlua_ffi.h, ABI 4): a call that would block starts the I/O on
 * the loop and returns an id; the coroutine yields; the scheduler (lua/rmq/co.lua) calls
 * rmq_co_wait(), which runs the loop until some ids are done and returns them, and resumes the
 * coroutines waiting on them. C never calls into Lua.
 *
 * Ownership: the loop and every handle on it belong to the thread (thread-local); a consume
 * thread frees its loop with rmq__coloop_free_self() once its Lua state is closed.
 * Threads: everything on the owning thread, except rmq__coloop_wake (any thread).
 */
#ifndef RMQ_COLOOP_H
#define RMQ_COLOOP_H

#include "base/common.h"
#include "rmqlua_ffi.h"

typedef struct rmq_coloop rmq_coloop_t;

/* The settings of a thread's cosockets (options lua_socket_max_per_thread,
 * lua_ssl_trusted_certificate, lua_ssl_verify_depth in consumer/conf.c). */
typedef struct rmq_coloop_conf {
    int max_sockets;        /* open cosockets (pooled ones included) a thread may hold */
    const char *ca_file;    /* PEM CA certificates sslhandshake trusts; NULL = the system's */
    int verify_depth;       /* the longest certificate chain sslhandshake accepts */
} rmq_coloop_conf_t;

#define RMQ_COLOOP_MAX_SOCKETS 10000
#define RMQ_COLOOP_VERIFY_DEPTH 5

/* This thread's loop, made now if it has none (aborts when libuv cannot make one). */
rmq_coloop_t *rmq__coloop_self(void);
/*
 * For the loop this thread makes when it first waits (none is made for a handler that never
 * waits): irq, the thread's interrupt flag (an atomic int, consume_pool.c; rmq_co_wait returns -1
 * and clears it once it is set), and made(ud, loop), called on this thread right after the loop
 * is made, so that another thread can rmq__coloop_wake it from then on. Call it before the
 * thread's first Lua state runs anything.
 */
void rmq__coloop_prepare(int *irq, void (*made)(void *ud, rmq_coloop_t *c), void *ud);
/* The settings this thread's cosockets use from now on (conf is the caller's and must outlive
 * the thread's sockets; NULL = the defaults). This thread only. */
void rmq__coloop_configure(const rmq_coloop_conf_t *conf);
/* This thread's settings (the defaults when none were given). */
const rmq_coloop_conf_t *rmq__coloop_conf(void);
/* Wake the thread if it is waiting in rmq_co_wait (so that it sees its interrupt flag). Any
 * thread, as long as the loop is alive. */
void rmq__coloop_wake(rmq_coloop_t *c);
/* 1 once a batch's handler on this thread waited in place (rmq_co_waited), then cleared. */
int rmq__coloop_take_waited(void);
/* Close every handle of this thread's loop (timers and sockets still pending are dropped) and
 * free it. No-op on a thread without one. */
void rmq__coloop_free_self(void);

#endif
