/*
 * test_shdict.c -- shared dictionaries (runtime/luahost/shdict.c) at the C level: the ngx.shared.DICT
 * semantics of set / add / replace / incr / delete / ttl / expire / flush_all / flush_expired /
 * get_keys, string values larger than the caller's buffer, LRU eviction at the size limit with
 * forcible, safe stores, shrinking on a new declaration, and 20 threads hammering one
 * dictionary (incr totals exact, add succeeds once per key).
 */
#include "luahost/shdict.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "test_shdict.h"
#include "test_util.h"

static void msleep(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int set_num(rmq_shdict_t *d, int op, const char *k, double v, int64_t ttl, int *forcible)
{
    const char *err;
    int f = 0;
    int rc = rmq_shdict_store(d, op, k, strlen(k), T_NUMBER, NULL, 0, v, ttl, 0, &err, &f);
    if (forcible) *forcible = f;
    return rc;
}

static int set_str(rmq_shdict_t *d, int op, const char *k, const char *v, size_t n,
                   const char **err, int *forcible)
{
    return rmq_shdict_store(d, op, k, strlen(k), T_STRING, v, n, 0, 0, 0, err, forcible);
}

/* The dictionary name of size bytes declared in s (or NULL; the error is not kept). */
static rmq_shdict_t *declare(rmq_shdicts_t *s, const char *name, double size)
{
    char err[256];
    return rmq_shdicts_declare(s, name, size, err, sizeof(err));
}

/* Type of key; a number into *num. */
static int get(rmq_shdict_t *d, const char *k, double *num)
{
    return test_shdict_get(d, k, num);
}

static void test_declare(void)
{
    rmq_shdicts_t *s = rmq_shdicts_new();
    char err[256];
    CHECK(rmq_shdicts_declare(s, "bad-name", 8192, err, sizeof(err)) == NULL);
    CHECK(strstr(err, "bad shared dictionary name") != NULL);
    CHECK(rmq_shdicts_declare(s, "", 8192, err, sizeof(err)) == NULL);
    CHECK(rmq_shdicts_declare(s, "small", 4096, err, sizeof(err)) == NULL);
    CHECK(strstr(err, "out of range") != NULL);
    rmq_shdict_t *a = rmq_shdicts_declare(s, "a", 16 * 1024, err, sizeof(err));
    CHECK(a != NULL);
    CHECK(rmq_shdicts_find(s, "a") == a);
    CHECK(rmq_shdicts_find(s, "b") == NULL);
    CHECK(rmq_shdict_capacity(a) == 16 * 1024);
    CHECK(rmq_shdict_free_space(a) == 16 * 1024);
    /* Declared again: the same dictionary, its values kept, the new limit applied. */
    CHECK(set_num(a, RMQ_SHDICT_SET, "k", 5, 0, NULL) == 0);
    CHECK(rmq_shdicts_declare(s, "a", 32 * 1024, err, sizeof(err)) == a);
    CHECK(rmq_shdict_capacity(a) == 32 * 1024);
    double v = 0;
    CHECK(get(a, "k", &v) == T_NUMBER && v == 5);
    CHECK(rmq__shdicts_count(s) == 1);
    rmq_shdicts_free(s);
}

static void test_semantics(void)
{
    rmq_shdicts_t *s = rmq_shdicts_new();
    rmq_shdict_t *d = declare(s, "d", 1 << 20);
    const char *err;
    int forcible;
    double v;

    CHECK(get(d, "missing", NULL) == T_NIL);
    CHECK(set_num(d, RMQ_SHDICT_SET, "n", 1.5, 0, NULL) == 0);
    CHECK(get(d, "n", &v) == T_NUMBER && v == 1.5);

    /* add: only when absent. */
    CHECK(rmq_shdict_store(d, RMQ_SHDICT_ADD, "n", 1, T_NUMBER, NULL, 0, 9, 0, 0, &err,
                           &forcible) == -1);
    CHECK(err && !strcmp(err, "exists") && forcible == 0);
    CHECK(set_num(d, RMQ_SHDICT_ADD, "fresh", 2, 0, NULL) == 0);
    /* replace: only when present. */
    CHECK(rmq_shdict_store(d, RMQ_SHDICT_REPLACE, "nope", 4, T_NUMBER, NULL, 0, 1, 0, 0, &err,
                           &forcible) == -1);
    CHECK(err && !strcmp(err, "not found"));
    CHECK(set_num(d, RMQ_SHDICT_REPLACE, "fresh", 3, 0, NULL) == 0);
    CHECK(get(d, "fresh", &v) == T_NUMBER && v == 3);

    /* booleans and user flags */
    CHECK(rmq_shdict_store(d, RMQ_SHDICT_SET, "b", 1, T_BOOLEAN, NULL, 0, 1, 0, 42, &err,
                           &forcible) == 0);
    {
        char buf[8];
        char *p = buf;
        size_t len = sizeof(buf);
        uint32_t flags = 0;
        int stale = 0;
        double n = 0;
        CHECK(rmq_shdict_get(d, "b", 1, 0, &n, &p, &len, &flags, &stale) == T_BOOLEAN);
        CHECK(n == 1 && flags == 42 && stale == 0);
    }

    /* incr */
    v = 2;
    CHECK(rmq_shdict_incr(d, "n", 1, &v, 0, 0, 0, &err, &forcible) == 0 && v == 3.5);
    v = 1;
    CHECK(rmq_shdict_incr(d, "absent", 6, &v, 0, 0, 0, &err, &forcible) == -1);
    CHECK(!strcmp(err, "not found"));
    v = 1;
    CHECK(rmq_shdict_incr(d, "absent", 6, &v, 1, 10, 0, &err, &forcible) == 0 && v == 11);
    v = 1;
    CHECK(rmq_shdict_incr(d, "b", 1, &v, 1, 0, 0, &err, &forcible) == -1);
    CHECK(!strcmp(err, "not a number"));

    /* strings: in the caller's buffer, or a new one when larger */
    CHECK(set_str(d, RMQ_SHDICT_SET, "s", "hello", 5, &err, &forcible) == 0);
    {
        char small[4];
        char *p = small;
        size_t len = sizeof(small);
        uint32_t flags;
        int stale;
        double n;
        CHECK(rmq_shdict_get(d, "s", 1, 0, &n, &p, &len, &flags, &stale) == T_STRING);
        CHECK(p != small && len == 5 && !memcmp(p, "hello", 5));
        if (p != small) rmq_shdict_free_buf(p);
        char big[16];
        p = big;
        len = sizeof(big);
        CHECK(rmq_shdict_get(d, "s", 1, 0, &n, &p, &len, &flags, &stale) == T_STRING);
        CHECK(p == big && len == 5 && !memcmp(p, "hello", 5));
    }
    /* an empty string is a value, not an absence */
    CHECK(set_str(d, RMQ_SHDICT_SET, "e", "", 0, &err, &forcible) == 0);
    CHECK(get(d, "e", NULL) == T_STRING);

    /* delete (type nil) */
    CHECK(rmq_shdict_store(d, RMQ_SHDICT_SET, "s", 1, T_NIL, NULL, 0, 0, 0, 0, &err,
                           &forcible) == 0);
    CHECK(get(d, "s", NULL) == T_NIL);
    CHECK(rmq_shdict_store(d, RMQ_SHDICT_SET, "s", 1, 7, NULL, 0, 0, 0, 0, &err, &forcible) ==
          -1);
    CHECK(!strcmp(err, "bad value type"));

    /* keys: most recently used first */
    rmq_shdict_key_t *keys = NULL;
    int n = rmq_shdict_keys(d, 0, &keys);
    CHECK(n == 5); /* n fresh b absent e */
    int found_n = 0;
    for (int i = 0; i < n; i++)
        if (keys[i].len == 1 && keys[i].key[0] == 'n') found_n = 1;
    CHECK(found_n);
    CHECK(n > 0 && keys[0].len == 1 && keys[0].key[0] == 'e'); /* the last one touched */
    rmq_shdict_free_buf(keys);
    CHECK(rmq_shdict_keys(d, 2, &keys) == 2);
    rmq_shdict_free_buf(keys);

    /* flush_all: everything reads as absent; flush_expired frees it */
    rmq_shdict_flush_all(d);
    CHECK(get(d, "n", NULL) == T_NIL);
    CHECK(rmq_shdict_keys(d, 0, &keys) == 0);
    rmq_shdict_free_buf(keys);
    CHECK(rmq_shdict_free_space(d) < (double)(1 << 20));
    CHECK(rmq_shdict_flush_expired(d, 2) == 2);
    CHECK(rmq_shdict_flush_expired(d, 0) == 3);
    CHECK(rmq_shdict_free_space(d) == (double)(1 << 20));
    rmq_shdicts_free(s);
}

static void test_ttl(void)
{
    rmq_shdicts_t *s = rmq_shdicts_new();
    rmq_shdict_t *d = declare(s, "t", 1 << 16);
    double ttl = -1, v;
    int sc = (int)test_scale();

    CHECK(set_num(d, RMQ_SHDICT_SET, "short", 1, 50 * sc, NULL) == 0);
    CHECK(set_num(d, RMQ_SHDICT_SET, "forever", 1, 0, NULL) == 0);
    CHECK(rmq_shdict_ttl(d, "short", 5, &ttl) == 0 && ttl > 0 && ttl <= 50 * sc);
    CHECK(rmq_shdict_ttl(d, "forever", 7, &ttl) == 0 && ttl == 0);
    CHECK(rmq_shdict_ttl(d, "none", 4, &ttl) == -1);
    /* add over an expired entry succeeds; get_stale still sees it before that */
    msleep(60 * sc + 10);
    CHECK(get(d, "short", NULL) == T_NIL);
    CHECK(rmq_shdict_ttl(d, "short", 5, &ttl) == -1);
    {
        char buf[8];
        char *p = buf;
        size_t len = sizeof(buf);
        uint32_t flags;
        int stale = 0;
        double n = 0;
        CHECK(rmq_shdict_get(d, "short", 5, 1, &n, &p, &len, &flags, &stale) == T_NUMBER);
        CHECK(stale == 1 && n == 1);
    }
    CHECK(set_num(d, RMQ_SHDICT_ADD, "short", 2, 0, NULL) == 0);
    CHECK(get(d, "short", &v) == T_NUMBER && v == 2);
    /* expire: a new TTL on a live key, "not found" otherwise; 0 removes the TTL */
    CHECK(rmq_shdict_expire(d, "forever", 7, 40 * sc) == 0);
    CHECK(rmq_shdict_ttl(d, "forever", 7, &ttl) == 0 && ttl > 0);
    CHECK(rmq_shdict_expire(d, "forever", 7, 0) == 0);
    CHECK(rmq_shdict_ttl(d, "forever", 7, &ttl) == 0 && ttl == 0);
    CHECK(rmq_shdict_expire(d, "none", 4, 10) == -1);
    /* incr with init_ttl: the created entry expires; incr of a live one keeps its TTL */
    const char *err;
    int forcible;
    v = 1;
    CHECK(rmq_shdict_incr(d, "ctr", 3, &v, 1, 0, 40 * sc, &err, &forcible) == 0 && v == 1);
    v = 1;
    CHECK(rmq_shdict_incr(d, "ctr", 3, &v, 1, 0, 0, &err, &forcible) == 0 && v == 2);
    CHECK(rmq_shdict_ttl(d, "ctr", 3, &ttl) == 0 && ttl > 0);
    msleep(50 * sc + 10);
    v = 1;
    CHECK(rmq_shdict_incr(d, "ctr", 3, &v, 0, 0, 0, &err, &forcible) == -1);
    CHECK(!strcmp(err, "not found"));
    rmq_shdicts_free(s);
}

static void test_lru(void)
{
    rmq_shdicts_t *s = rmq_shdicts_new();
    rmq_shdict_t *d = declare(s, "lru", 8192);
    const char *err;
    int forcible = 0;
    char val[200];
    memset(val, 'v', sizeof(val));
    size_t per = rmq__shdict_entry_overhead() + 4 + sizeof(val); /* "kNNN" keys */
    int fit = (int)(8192 / per);
    char k[16];
    int first_forcible = -1;
    for (int i = 0; i < 3 * fit; i++) {
        snprintf(k, sizeof(k), "k%03d", i);
        CHECK(set_str(d, RMQ_SHDICT_SET, k, val, sizeof(val), &err, &forcible) == 0);
        if (forcible && first_forcible < 0) first_forcible = i;
        if (i == 1) CHECK(get(d, "k000", NULL) == T_STRING); /* k000 now recently used */
    }
    /* The first forced eviction came exactly when the limit was reached. */
    CHECKF(first_forcible == fit, "first forcible at %d, %d fit", first_forcible, fit);
    rmq_shdict_key_t *keys;
    int n = rmq_shdict_keys(d, 0, &keys);
    CHECKF(n == fit, "%d keys, %d fit", n, fit);
    CHECK(rmq_shdict_free_space(d) >= 0 && rmq_shdict_free_space(d) < (double)per);
    rmq_shdict_free_buf(keys);
    /* The newest survive, the oldest went first. */
    snprintf(k, sizeof(k), "k%03d", 3 * fit - 1);
    CHECK(get(d, k, NULL) == T_STRING);
    CHECK(get(d, "k001", NULL) == T_NIL);

    /* safe stores never evict */
    CHECK(set_str(d, RMQ_SHDICT_SET | RMQ_SHDICT_SAFE, "safe", val, sizeof(val), &err,
                  &forcible) == -1);
    CHECK(!strcmp(err, "no memory") && forcible == 0);
    /* a value that can never fit evicts nothing */
    char *huge = calloc(1, 9000);
    CHECK(set_str(d, RMQ_SHDICT_SET, "huge", huge, 9000, &err, &forcible) == -1);
    CHECK(!strcmp(err, "no memory"));
    free(huge);
    CHECK(rmq_shdict_keys(d, 0, &keys) == fit);
    rmq_shdict_free_buf(keys);
    /* expired entries go before live ones */
    rmq_shdict_flush_all(d);
    CHECK(set_str(d, RMQ_SHDICT_SET, "after", val, sizeof(val), &err, &forcible) == 0);
    CHECK(forcible == 0);
    rmq_shdicts_free(s);

    /* a smaller limit evicts down to it */

    s = rmq_shdicts_new();
    d = declare(s, "lru", 16384);
    for (int i = 0; i < 100; i++) {
        snprintf(k, sizeof(k), "k%03d", i);
        set_str(d, RMQ_SHDICT_SET, k, val, sizeof(val), &err, &forcible);
    }
    CHECK(declare(s, "lru", 8192) == d);
    CHECK(rmq_shdict_free_space(d) >= 0);
    n = rmq_shdict_keys(d, 0, &keys);
    CHECK(n == fit);
    rmq_shdict_free_buf(keys);
    rmq_shdicts_free(s);
}

#define NTHREADS 20
#define NINCR 20000
#define NKEYS 500

static rmq_shdict_t *g_dict;
static int g_added[NTHREADS];

static void *hammer(void *arg)
{
    int me = (int)(intptr_t)arg;
    const char *err;
    int forcible;
    char k[32];
    for (int i = 0; i < NINCR; i++) {
        double v = 1;
        rmq_shdict_incr(g_dict, "total", 5, &v, 1, 0, 0, &err, &forcible);
        if (i < NKEYS) {
            snprintf(k, sizeof(k), "seen-%d", (i * 7 + me) % NKEYS);
            if (rmq_shdict_store(g_dict, RMQ_SHDICT_ADD, k, strlen(k), T_BOOLEAN, NULL, 0, 1, 0, 0,
                                 &err, &forcible) == 0)
                g_added[me]++;
        }
    }
    return NULL;
}

static void test_threads(void)
{
    rmq_shdicts_t *s = rmq_shdicts_new();
    g_dict = declare(s, "shared", 1 << 20);
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++)
        pthread_create(&th[i], NULL, hammer, (void *)(intptr_t)i);
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    double v = 0;
    CHECK(get(g_dict, "total", &v) == T_NUMBER);
    CHECKF(v == (double)NTHREADS * NINCR, "total %.0f", v);
    int added = 0;
    for (int i = 0; i < NTHREADS; i++) added += g_added[i];
    CHECKF(added == NKEYS, "%d adds succeeded for %d keys", added, NKEYS);
    rmq_shdicts_free(s);
}

int main(void)
{
    test_declare();
    test_semantics();
    test_ttl();
    test_lru();
    test_threads();
    return test_report("test_shdict");
}
