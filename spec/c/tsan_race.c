/*
 * tsan_race.c -- a deliberate data race, for the ThreadSanitizer build only: it shows that the
 * TSan step of scripts/test can fail (spec/02-integration/08-tsan/race_spec.lua runs it under
 * the step's TSAN_OPTIONS and expects a report). It has the shape of the race the status thread
 * of `rmqlua run` once had: one thread polls a stop flag that another thread sets.
 *
 * Usage: tsan_race race    the flag is a plain int: TSan must report a data race
 *        tsan_race atomic  the flag is a C11 atomic: TSan must stay silent, exit 0
 * Threads: main and one poller it starts and joins.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int plain_stop;          /* written by main, read by the poller: no ordering at all */
static atomic_int atomic_stop;  /* the same, as it must be */
static int use_atomic;

static void *poller(void *arg)
{
    (void)arg;
    for (;;) {
        int stop = use_atomic ? atomic_load(&atomic_stop) : plain_stop;
        if (stop) break;
        usleep(1000);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "race") && strcmp(argv[1], "atomic"))) {
        fprintf(stderr, "usage: tsan_race race|atomic\n");
        return 2;
    }
    use_atomic = !strcmp(argv[1], "atomic");
    pthread_t t;
    if (pthread_create(&t, NULL, poller, NULL)) {
        fprintf(stderr, "tsan_race: cannot start the poller thread\n");
        return 1;
    }
    usleep(20000); /* the poller has read the flag by now */
    if (use_atomic) atomic_store(&atomic_stop, 1);
    else plain_stop = 1;
    pthread_join(t, NULL);
    printf("tsan_race: %s: done\n", argv[1]);
    return 0;
}
