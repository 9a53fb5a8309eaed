/*
 * startstop.c -- the reliability suite's start/stop cycler (scripts/reliability.sh, scenario
 * "start/stop"): N start/stop cycles of one push consumer in one process through the library's
 * C API (consumer.h, with the Lua handler of luahost/lua_handler.h), with the process's file
 * descriptors, threads and resident memory measured after the first cycle and after the last.
 * Built by CMake as `reliability_startstop` (never installed); not a test of its own.
 *
 *   reliability_startstop --namesrv ADDR --script PATH [--cycles N] [--max-wait-ms MS]
 *                         [--set KEY=VALUE]...
 *
 * Each cycle builds a conf from the script (as `rmqlua run` does), creates the consumer, runs
 * its loop on a new thread, lets it run for a random 0..MS ms (default 60, so that stops land
 * before the route is known, during the first rebalance, and while batches run), stops it,
 * joins the thread and destroys everything. Output, one line per sample (cycle 1, every 10%
 * and the last):
 *   cycle N fds F threads T rss_kb R hwm_kb H rc C
 * and at the end "done N cycles in S s" (exit 0), or the failure (exit 1: a cycle whose consumer
 * could not be created or whose run did not return 0).
 *
 * Ownership: everything is created and freed within one cycle. Threads: the main thread drives
 * the cycles; each cycle's consumer loop runs on its own thread, joined before the next cycle.
 */
#include "consumer/conf.h"
#include "consumer/consumer.h"
#include "luahost/lua_handler.h"
#include "luahost/script.h"

#include <uv.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct run_arg {
    rmq_consumer_t *c;
    int rc;
} run_arg_t;

static void run_main(void *arg)
{
    run_arg_t *r = arg;
    r->rc = rmq__consumer_run(r->c);
}

/* Entries of a /proc folder (minus . and ..). */
static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* A "Name:   value kB" field of /proc/self/status, or -1. */
static long status_kb(const char *name)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(name);
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, name, n) && line[n] == ':') {
            v = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

static void sample(int cycle, int rc)
{
    int fds = count_dir("/proc/self/fd") - 1; /* opendir's own descriptor is listed too */
    int threads = count_dir("/proc/self/task");
    printf("cycle %d fds %d threads %d rss_kb %ld hwm_kb %ld rc %d\n", cycle, fds, threads,
           status_kb("VmRSS"), status_kb("VmHWM"), rc);
    fflush(stdout);
}

static void usage(FILE *out)
{
    fputs("usage: reliability_startstop --namesrv ADDR --script PATH [--cycles N]\n"
          "                             [--max-wait-ms MS] [--set KEY=VALUE]...\n",
          out);
}

int main(int argc, char **argv)
{
    const char *ns = NULL, *script = NULL;
    long cycles = 1000, max_wait = 60;
    const char *sets[64];
    int nsets = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            usage(stderr);
            return 2;
        }
        i++;
        if (!strcmp(a, "--namesrv"))
            ns = v;
        else if (!strcmp(a, "--script"))
            script = v;
        else if (!strcmp(a, "--cycles"))
            cycles = strtol(v, NULL, 10);
        else if (!strcmp(a, "--max-wait-ms"))
            max_wait = strtol(v, NULL, 10);
        else if (!strcmp(a, "--set") && strchr(v, '=') && nsets < 64)
            sets[nsets++] = v;
        else {
            usage(stderr);
            return 2;
        }
    }
    if (!ns || !script || cycles < 1 || max_wait < 0) {
        usage(stderr);
        return 2;
    }
    rmq_log_set_level(RMQ_LOG_WARN);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    int64_t t0 = rmq__mono_ms();
    char err[4096];
    for (long n = 1; n <= cycles; n++) {
        rmq_conf_t *conf = rmq__conf_new();
        int rc = rmq__conf_set(conf, "namesrv_addr", ns, err, sizeof(err));
        if (!rc) rc = rmq__script_load(script, conf, NULL, err, sizeof(err));
        for (int k = 0; !rc && k < nsets; k++) {
            char kv[512];
            snprintf(kv, sizeof(kv), "%s", sets[k]);
            char *eq = strchr(kv, '=');
            *eq = 0;
            rc = rmq__conf_set(conf, kv, eq + 1, err, sizeof(err));
        }
        if (!rc) rc = rmq__conf_check(conf, err, sizeof(err));
        rmq_consumer_t *c = NULL;
        rmq_lua_handler_t *lh = rmq__lua_handler_new(script);
        if (!rc) rc = rmq__consumer_new(conf, &lh->h, &c, err, sizeof(err));
        if (rc) {
            fprintf(stderr, "cycle %ld: %s\n", n, err);
            rmq__lua_handler_free(lh);
            rmq__conf_destroy(conf);
            return 1;
        }
        run_arg_t r = {.c = c, .rc = -1};
        uv_thread_t th;
        if (uv_thread_create(&th, run_main, &r)) {
            fprintf(stderr, "cycle %ld: cannot create a thread\n", n);
            return 1;
        }
        long wait = max_wait ? rand() % (max_wait + 1) : 0;
        if (wait) usleep((useconds_t)wait * 1000);
        rmq__consumer_stop(c);
        uv_thread_join(&th);
        rmq__consumer_destroy(c);
        rmq__lua_handler_free(lh);
        rmq__conf_destroy(conf);
        if (r.rc != RMQ_CONSUMER_EXIT_OK) {
            fprintf(stderr, "cycle %ld: the consumer's run returned %d\n", n, r.rc);
            sample((int)n, r.rc);
            return 1;
        }
        if (n == 1 || n == cycles || n % (cycles / 10 ? cycles / 10 : 1) == 0) sample((int)n, r.rc);
    }
    printf("done %ld cycles in %.1f s\n", cycles, (double)(rmq__mono_ms() - t0) / 1000.0);
    return 0;
}
