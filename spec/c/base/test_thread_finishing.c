/*
 * test_thread_finishing.c -- rmq__thread_finishing (common.c): a signal the kernel gave to a
 * thread just before that thread ends still runs its handler. A ThreadSanitizer build runs a
 * handler at the thread's next intercepted call (unless the thread is blocked in one); a thread
 * that makes no such call before it ends takes the signal with it. That is how `rmqlua run
 * --embedded` lost a SIGHUP that landed on the sample producer as it finished. Here the thread
 * holds still in a loop TSan does not see, the signal reaches it there, then it ends.
 * Threads: main and one thread of the test's own; only that thread leaves SIGHUP unblocked.
 */
#include "base/common.h"

#include "test_util.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>

static volatile sig_atomic_t hups;
static volatile int ready, go;

static void on_hup(int sig)
{
    (void)sig;
    hups++;
}

/* Plain loads and stores TSan does not instrument: no intercepted call, so a signal the thread
 * receives meanwhile stays deferred. */
__attribute__((no_sanitize_thread, noinline)) static void flag_set(volatile int *f)
{
    *f = 1;
}

__attribute__((no_sanitize_thread, noinline)) static void flag_wait(volatile int *f)
{
    while (!*f) {
    }
}

static void *finisher(void *arg)
{
    (void)arg;
    sigset_t hup;
    sigemptyset(&hup);
    sigaddset(&hup, SIGHUP);
    pthread_sigmask(SIG_UNBLOCK, &hup, NULL);
    flag_set(&ready);
    flag_wait(&go); /* the SIGHUP arrives here */
    rmq__thread_finishing();
    return NULL;
}

static int hup_pending(void)
{
    sigset_t p;
    sigpending(&p);
    return sigismember(&p, SIGHUP);
}

int main(void)
{
    sigset_t hup;
    sigemptyset(&hup);
    sigaddset(&hup, SIGHUP);
    signal(SIGHUP, on_hup);
    /* Blocked here, so the kernel can give the signal to the finishing thread only. */
    pthread_sigmask(SIG_BLOCK, &hup, NULL);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, finisher, NULL) == 0);
    flag_wait(&ready);
    CHECK(kill(getpid(), SIGHUP) == 0);
    /* Pending for the process until the kernel hands it to the thread. */
    int64_t deadline = rmq__mono_ms() + (int64_t)(10000 * test_scale());
    while (hup_pending() && rmq__mono_ms() < deadline) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    CHECKF(!hup_pending(), "SIGHUP still pending after %.0f s", 10 * test_scale());
    flag_set(&go);
    CHECK(pthread_join(t, NULL) == 0);
    CHECKF(hups == 1, "the SIGHUP the finishing thread received ran its handler %d time(s)",
           (int)hups);
    pthread_sigmask(SIG_UNBLOCK, &hup, NULL); /* nothing left over for this thread either */
    CHECK(hups == 1);
    signal(SIGHUP, SIG_DFL);
    return test_report("test_thread_finishing");
}
