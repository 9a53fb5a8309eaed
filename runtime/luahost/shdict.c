/*
 * shdict.c -- shared dictionaries (shdict.h): a hash table with an LRU list per dictionary,
 * behind one mutex each, with the semantics of OpenResty's ngx.shared.DICT
 * (ngx_http_lua_shdict.c): stores that do not fit evict from the LRU tail (expired entries
 * first), lookups move an entry to the LRU head, flush_all marks everything expired.
 *
 * Ownership: a set owns its dictionaries, a dictionary its entries (one allocation each: header,
 * key, string value). Strings handed out are copies.
 * Threads: any thread; a dictionary's entries under its mutex, the set's list under the set's.
 */
#include "shdict.h"

#include <stdio.h>
#include <stdlib.h>
#include <uv.h>

enum { T_NIL = 0, T_BOOLEAN = 1, T_NUMBER = 3, T_STRING = 4 };

typedef struct node {
    struct node *hnext;          /* hash chain */
    struct node *lprev, *lnext;  /* LRU list: head = most recently used */
    uint64_t hash;
    int64_t expires;             /* monotonic ms; 0 = never */
    double num;                  /* number, boolean (0/1) */
    uint32_t key_len, val_len;   /* val_len: string bytes after the key */
    uint32_t flags;              /* user flags */
    uint8_t type;
    char data[];                 /* key, then a string value */
} node_t;

struct rmq_shdict {
    struct rmq_shdict *next; /* the set's list */
    char name[65];
    uv_mutex_t mu;
    node_t **buckets;
    size_t nbuckets; /* power of two */
    size_t n;        /* entries */
    size_t used;     /* bytes charged */
    size_t capacity;
    node_t *lru_head, *lru_tail;
};

struct rmq_shdicts {
    uv_mutex_t mu;
    rmq_shdict_t *list;
    int n;
};

/* Fixed charge per entry: its header and its bucket slot. */
size_t rmq__shdict_entry_overhead(void)
{
    return sizeof(node_t) + sizeof(node_t *);
}

static size_t charge_of(size_t key_len, size_t val_len)
{
    return rmq__shdict_entry_overhead() + key_len + val_len;
}

/* FNV-1a, 64 bit. */
static uint64_t hash_of(const char *k, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)k[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* ---- LRU list and hash table (under d->mu) ------------------------------------------------- */

static void lru_unlink(rmq_shdict_t *d, node_t *x)
{
    if (x->lprev) x->lprev->lnext = x->lnext;
    else d->lru_head = x->lnext;
    if (x->lnext) x->lnext->lprev = x->lprev;
    else d->lru_tail = x->lprev;
    x->lprev = x->lnext = NULL;
}

static void lru_push_head(rmq_shdict_t *d, node_t *x)
{
    x->lprev = NULL;
    x->lnext = d->lru_head;
    if (d->lru_head) d->lru_head->lprev = x;
    d->lru_head = x;
    if (!d->lru_tail) d->lru_tail = x;
}

static void lru_touch(rmq_shdict_t *d, node_t *x)
{
    if (d->lru_head == x) return;
    lru_unlink(d, x);
    lru_push_head(d, x);
}

static node_t *lookup(rmq_shdict_t *d, const char *key, size_t klen, uint64_t h)
{
    for (node_t *x = d->buckets[h & (d->nbuckets - 1)]; x; x = x->hnext)
        if (x->hash == h && x->key_len == klen && !memcmp(x->data, key, klen)) return x;
    return NULL;
}

static void grow(rmq_shdict_t *d)
{
    size_t nb = d->nbuckets * 2;
    node_t **b = calloc(nb, sizeof(*b));
    if (!b) return; /* stays correct, only slower */
    for (size_t i = 0; i < d->nbuckets; i++) {
        node_t *x = d->buckets[i];
        while (x) {
            node_t *nx = x->hnext;
            size_t j = x->hash & (nb - 1);
            x->hnext = b[j];
            b[j] = x;
            x = nx;
        }
    }
    free(d->buckets);
    d->buckets = b;
    d->nbuckets = nb;
}

static void insert(rmq_shdict_t *d, node_t *x)
{
    if (d->n >= d->nbuckets) grow(d);
    size_t j = x->hash & (d->nbuckets - 1);
    x->hnext = d->buckets[j];
    d->buckets[j] = x;
    lru_push_head(d, x);
    d->n++;
    d->used += charge_of(x->key_len, x->val_len);
}

static void remove_node(rmq_shdict_t *d, node_t *x)
{
    node_t **pp = &d->buckets[x->hash & (d->nbuckets - 1)];
    while (*pp != x) pp = &(*pp)->hnext;
    *pp = x->hnext;
    lru_unlink(d, x);
    d->n--;
    d->used -= charge_of(x->key_len, x->val_len);
    free(x);
}

static int expired(const node_t *x, int64_t now)
{
    return x->expires != 0 && x->expires <= now;
}

/*
 * ngx_http_lua_shdict_expire: n == 1 frees one or two expired entries from the LRU tail;
 * n == 0 frees the tail entry by force, then one or two expired ones. Returns how many were
 * freed; *evicted_live is set when an unexpired entry was among them.
 */
static int expire_tail(rmq_shdict_t *d, int n, int64_t now, int *evicted_live)
{
    int freed = 0;
    while (n < 3) {
        node_t *x = d->lru_tail;
        if (!x) return freed;
        if (n++ != 0 && !expired(x, now)) return freed;
        if (!expired(x, now) && evicted_live) *evicted_live = 1;
        remove_node(d, x);
        freed++;
    }
    return freed;
}

/*
 * Make room for charge bytes: the expired tail goes first; then, unless safe, up to 30 forced
 * evictions from the LRU tail (ngx_http_lua_shdict_set_helper). Returns 0 or -1 ("no memory").
 */
static int make_room(rmq_shdict_t *d, size_t charge, int safe, int64_t now, int *forcible)
{
    expire_tail(d, 1, now, NULL);
    if (charge > d->capacity) return -1; /* would never fit: evict nothing for it */
    if (d->used + charge <= d->capacity) return 0;
    if (safe) return -1;
    for (int i = 0; i < 30; i++) {
        if (expire_tail(d, 0, now, forcible) == 0) break;
        if (d->used + charge <= d->capacity) return 0;
    }
    return -1;
}

static node_t *new_node(const char *key, size_t klen, uint64_t h, int type, const char *str,
                        size_t slen, double num, int64_t expires, uint32_t flags)
{
    size_t vlen = type == T_STRING ? slen : 0;
    node_t *x = malloc(sizeof(node_t) + klen + vlen);
    if (!x) return NULL;
    memset(x, 0, sizeof(*x));
    x->hash = h;
    x->key_len = (uint32_t)klen;
    x->val_len = (uint32_t)vlen;
    x->type = (uint8_t)type;
    x->num = num;
    x->flags = flags;
    x->expires = expires;
    memcpy(x->data, key, klen);
    if (vlen) memcpy(x->data + klen, str, vlen);
    return x;
}

static int64_t deadline(int64_t ttl_ms, int64_t now)
{
    return ttl_ms > 0 ? now + ttl_ms : 0;
}

/* Store a value under key, d's mutex held; x is key's entry (live or expired) or NULL. A value of
 * x's size goes in place; else x goes and a new entry takes the value, after make_room evicted
 * what it must. Returns 0, or -1 when there is no room (x is gone then). */
static int put_locked(rmq_shdict_t *d, node_t *x, const char *key, size_t key_len, uint64_t h,
                      int type, const char *str, size_t str_len, double num, int64_t expires,
                      uint32_t flags, int safe, int64_t now, int *forcible)
{
    size_t vlen = type == T_STRING ? str_len : 0;
    if (x && x->val_len == vlen) { /* same size: in place */
        x->type = (uint8_t)type;
        x->num = num;
        x->flags = flags;
        x->expires = expires;
        if (vlen) memcpy(x->data + x->key_len, str, vlen);
        lru_touch(d, x);
        return 0;
    }
    if (x) remove_node(d, x);
    node_t *nx = NULL;
    if (make_room(d, charge_of(key_len, vlen), safe, now, forcible) == 0)
        nx = new_node(key, key_len, h, type, str, str_len, num, expires, flags);
    if (!nx) return -1;
    insert(d, nx);
    return 0;
}

/* ---- the set -------------------------------------------------------------------------------- */

RMQ_EXPORT rmq_shdicts_t *rmq_shdicts_new(void)
{
    rmq_shdicts_t *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    uv_mutex_init(&s->mu);
    return s;
}

static void dict_free(rmq_shdict_t *d)
{
    node_t *x = d->lru_head;
    while (x) {
        node_t *nx = x->lnext;
        free(x);
        x = nx;
    }
    free(d->buckets);
    uv_mutex_destroy(&d->mu);
    free(d);
}

RMQ_EXPORT void rmq_shdicts_free(rmq_shdicts_t *s)
{
    if (!s) return;
    rmq_shdict_t *d = s->list;
    while (d) {
        rmq_shdict_t *nd = d->next;
        dict_free(d);
        d = nd;
    }
    uv_mutex_destroy(&s->mu);
    free(s);
}

int rmq__shdicts_count(rmq_shdicts_t *s)
{
    uv_mutex_lock(&s->mu);
    int n = s->n;
    uv_mutex_unlock(&s->mu);
    return n;
}

static rmq_shdict_t *find_locked(rmq_shdicts_t *s, const char *name)
{
    for (rmq_shdict_t *d = s->list; d; d = d->next)
        if (!strcmp(d->name, name)) return d;
    return NULL;
}

RMQ_EXPORT rmq_shdict_t *rmq_shdicts_find(rmq_shdicts_t *s, const char *name)
{
    if (!s || !name) return NULL;
    uv_mutex_lock(&s->mu);
    rmq_shdict_t *d = find_locked(s, name);
    uv_mutex_unlock(&s->mu);
    return d;
}

RMQ_EXPORT rmq_shdict_t *rmq_shdicts_declare(rmq_shdicts_t *s, const char *name, double capacity,
                                             char *err, size_t err_size)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 64 || strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_") != n) {
        rmq__seterr(err, err_size, "bad shared dictionary name '%s' (1 to 64 of A-Z a-z 0-9 _)",
                    name ? name : "");
        return NULL;
    }
    if (!(capacity >= RMQ_SHDICT_MIN_SIZE) || capacity > (double)(SIZE_MAX / 2)) {
        rmq__seterr(err, err_size, "shared dictionary %s: size %.0f bytes is out of range (at "
                    "least %d, 8k)", name, capacity, RMQ_SHDICT_MIN_SIZE);
        return NULL;
    }
    size_t cap = (size_t)capacity;
    uv_mutex_lock(&s->mu);
    rmq_shdict_t *d = find_locked(s, name);
    if (d) {
        uv_mutex_lock(&d->mu);
        d->capacity = cap;
        int64_t now = rmq__mono_ms();
        while (d->used > d->capacity && d->lru_tail) expire_tail(d, 0, now, NULL);
        uv_mutex_unlock(&d->mu);
        uv_mutex_unlock(&s->mu);
        return d;
    }
    d = calloc(1, sizeof(*d));
    node_t **b = calloc(64, sizeof(*b));
    if (!d || !b) {
        free(d);
        free(b);
        uv_mutex_unlock(&s->mu);
        rmq__seterr(err, err_size, "shared dictionary %s: out of memory", name);
        return NULL;
    }
    memcpy(d->name, name, n + 1);
    uv_mutex_init(&d->mu);
    d->buckets = b;
    d->nbuckets = 64;
    d->capacity = cap;
    d->next = s->list;
    s->list = d;
    s->n++;
    uv_mutex_unlock(&s->mu);
    rmq_dbg(RMQ_DBG_LUA, "shdict", "shared dictionary %s: %zu bytes", name, cap);
    return d;
}

/* ---- operations ----------------------------------------------------------------------------- */

RMQ_EXPORT int rmq_shdict_get(rmq_shdict_t *d, const char *key, size_t key_len, int get_stale,
                              double *num, char **str, size_t *str_len, uint32_t *flags,
                              int *stale)
{
    uint64_t h = hash_of(key, key_len);
    uv_mutex_lock(&d->mu);
    node_t *x = lookup(d, key, key_len, h);
    int is_stale = 0;
    if (x && x->expires) is_stale = expired(x, rmq__mono_ms());
    if (!x || (is_stale && !get_stale)) {
        uv_mutex_unlock(&d->mu);
        return T_NIL;
    }
    lru_touch(d, x);
    int type = x->type;
    *flags = x->flags;
    *stale = is_stale;
    if (type == T_STRING) {
        size_t n = x->val_len;
        char *dst = *str;
        if (n > *str_len) {
            dst = malloc(n ? n : 1);
            if (!dst) {
                uv_mutex_unlock(&d->mu);
                return T_NIL;
            }
            *str = dst;
        }
        memcpy(dst, x->data + x->key_len, n);
        *str_len = n;
    } else {
        *num = x->num;
    }
    uv_mutex_unlock(&d->mu);
    return type;
}

RMQ_EXPORT int rmq_shdict_store(rmq_shdict_t *d, int op, const char *key, size_t key_len, int type,
                                const char *str, size_t str_len, double num, int64_t exptime_ms,
                                uint32_t flags, const char **err, int *forcible)
{
    int safe = (op & RMQ_SHDICT_SAFE) != 0;
    op &= ~RMQ_SHDICT_SAFE;
    *forcible = 0;
    *err = NULL;
    if (type != T_NIL && type != T_BOOLEAN && type != T_NUMBER && type != T_STRING) {
        *err = "bad value type";
        return -1;
    }
    if (type == T_STRING && str_len > UINT32_MAX) {
        *err = "no memory";
        return -1;
    }
    uint64_t h = hash_of(key, key_len);
    uv_mutex_lock(&d->mu);
    int64_t now = rmq__mono_ms();
    node_t *x = lookup(d, key, key_len, h);
    int live = x && !expired(x, now);
    if (op == RMQ_SHDICT_ADD && live) {
        uv_mutex_unlock(&d->mu);
        *err = "exists";
        return -1;
    }
    if (op == RMQ_SHDICT_REPLACE && !live) {
        uv_mutex_unlock(&d->mu);
        *err = "not found";
        return -1;
    }
    if (type == T_NIL) { /* delete */
        if (x) remove_node(d, x);
        uv_mutex_unlock(&d->mu);
        return 0;
    }
    int rc = put_locked(d, x, key, key_len, h, type, str, str_len, num, deadline(exptime_ms, now),
                        flags, safe, now, forcible);
    uv_mutex_unlock(&d->mu);
    if (rc) *err = "no memory";
    return rc;
}

RMQ_EXPORT int rmq_shdict_incr(rmq_shdict_t *d, const char *key, size_t key_len, double *value,
                               int has_init, double init, int64_t init_ttl_ms, const char **err,
                               int *forcible)
{
    *forcible = 0;
    *err = NULL;
    uint64_t h = hash_of(key, key_len);
    uv_mutex_lock(&d->mu);
    int64_t now = rmq__mono_ms();
    node_t *x = lookup(d, key, key_len, h);
    if (x && !expired(x, now)) {
        if (x->type != T_NUMBER) {
            uv_mutex_unlock(&d->mu);
            *err = "not a number";
            return -1;
        }
        x->num += *value;
        *value = x->num;
        lru_touch(d, x);
        uv_mutex_unlock(&d->mu);
        return 0;
    }
    if (!has_init) {
        uv_mutex_unlock(&d->mu);
        *err = "not found";
        return -1;
    }
    /* an expired entry of the right size is reused */
    double v = init + *value;
    int rc = put_locked(d, x, key, key_len, h, T_NUMBER, NULL, 0, v, deadline(init_ttl_ms, now), 0,
                        0, now, forcible);
    uv_mutex_unlock(&d->mu);
    if (rc)
        *err = "no memory";
    else
        *value = v;
    return rc;
}

/* Lock d and find key's entry: returned when it is live, else NULL (missing or expired); *now
 * is the time that was judged at. The caller unlocks d->mu. */
static node_t *lock_live(rmq_shdict_t *d, const char *key, size_t key_len, int64_t *now)
{
    uint64_t h = hash_of(key, key_len);
    uv_mutex_lock(&d->mu);
    *now = rmq__mono_ms();
    node_t *x = lookup(d, key, key_len, h);
    return x && !expired(x, *now) ? x : NULL;
}

RMQ_EXPORT int rmq_shdict_ttl(rmq_shdict_t *d, const char *key, size_t key_len, double *ttl_ms)
{
    int64_t now;
    node_t *x = lock_live(d, key, key_len, &now);
    if (x) *ttl_ms = x->expires ? (double)(x->expires - now) : 0;
    uv_mutex_unlock(&d->mu);
    return x ? 0 : -1;
}

RMQ_EXPORT int rmq_shdict_expire(rmq_shdict_t *d, const char *key, size_t key_len,
                                 int64_t exptime_ms)
{
    int64_t now;
    node_t *x = lock_live(d, key, key_len, &now);
    if (x) x->expires = deadline(exptime_ms, now);
    uv_mutex_unlock(&d->mu);
    return x ? 0 : -1;
}

RMQ_EXPORT void rmq_shdict_flush_all(rmq_shdict_t *d)
{
    uv_mutex_lock(&d->mu);
    for (node_t *x = d->lru_head; x; x = x->lnext) x->expires = 1; /* long past */
    uv_mutex_unlock(&d->mu);
}

RMQ_EXPORT int rmq_shdict_flush_expired(rmq_shdict_t *d, int max_count)
{
    int freed = 0;
    uv_mutex_lock(&d->mu);
    int64_t now = rmq__mono_ms();
    node_t *x = d->lru_tail;
    while (x && (max_count <= 0 || freed < max_count)) {
        node_t *px = x->lprev;
        if (expired(x, now)) {
            remove_node(d, x);
            freed++;
        }
        x = px;
    }
    uv_mutex_unlock(&d->mu);
    return freed;
}

RMQ_EXPORT int rmq_shdict_keys(rmq_shdict_t *d, int max_count, rmq_shdict_key_t **out)
{
    *out = NULL;
    uv_mutex_lock(&d->mu);
    int64_t now = rmq__mono_ms();
    size_t n = 0, bytes = 0;
    for (node_t *x = d->lru_head; x && (max_count <= 0 || n < (size_t)max_count); x = x->lnext)
        if (!expired(x, now)) {
            n++;
            bytes += x->key_len;
        }
    rmq_shdict_key_t *k = malloc(sizeof(*k) * n + bytes + 1);
    if (!k) {
        uv_mutex_unlock(&d->mu);
        return 0;
    }
    char *w = (char *)(k + n);
    size_t i = 0;
    for (node_t *x = d->lru_head; x && i < n; x = x->lnext) {
        if (expired(x, now)) continue;
        memcpy(w, x->data, x->key_len);
        k[i].key = w;
        k[i].len = x->key_len;
        w += x->key_len;
        i++;
    }
    uv_mutex_unlock(&d->mu);
    *out = k;
    return (int)n;
}

RMQ_EXPORT double rmq_shdict_capacity(rmq_shdict_t *d)
{
    uv_mutex_lock(&d->mu);
    double c = (double)d->capacity;
    uv_mutex_unlock(&d->mu);
    return c;
}

RMQ_EXPORT double rmq_shdict_free_space(rmq_shdict_t *d)
{
    uv_mutex_lock(&d->mu);
    double f = d->used < d->capacity ? (double)(d->capacity - d->used) : 0;
    uv_mutex_unlock(&d->mu);
    return f;
}

RMQ_EXPORT void rmq_shdict_free_buf(void *p)
{
    free(p);
}
