/*
 * test_shdict.h -- for C tests that read a shared dictionary (runtime/luahost/shdict.c): a key's
 * type and number. Header only, included after luahost/shdict.h; called on the test's thread.
 */
#ifndef RMQ_TEST_SHDICT_H
#define RMQ_TEST_SHDICT_H

#include <string.h>

/* The value types rmq_shdict_get returns (Lua's type numbers). */
enum { T_NIL = 0, T_BOOLEAN = 1, T_NUMBER = 3, T_STRING = 4 };

/* The type of key k in d (T_NIL when absent); its number into *num when num is not NULL (0 when
 * it is not a number). A string value copied out of line is freed. */
static inline int test_shdict_get(rmq_shdict_t *d, const char *k, double *num)
{
    char buf[64];
    char *p = buf;
    size_t len = sizeof(buf);
    uint32_t flags;
    int stale;
    double n = 0;
    int t = rmq_shdict_get(d, k, strlen(k), 0, &n, &p, &len, &flags, &stale);
    if (p != buf) rmq_shdict_free_buf(p);
    if (num) *num = n;
    return t;
}

#endif
