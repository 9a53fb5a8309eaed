/*
 * allocate.c -- AllocateMessageQueueStrategy implementations and Java orderings (allocate.h).
 *
 * Ownership: no state; temporary arrays are freed before returning.
 * Threads: pure; callable from any thread.
 */
#include "allocate.h"

#include "conf.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#define LOG_SUB "rebalance"

/* Stable insertion-merge sort helpers (Collections.sort is stable). */
void rmq__mq_sort(rmq_mq_t *mqs, int n)
{
    int i, j;
    for (i = 1; i < n; i++) {
        rmq_mq_t v = mqs[i];
        for (j = i; j > 0 && rmq__mq_cmp(&mqs[j - 1], &v) > 0; j--)
            mqs[j] = mqs[j - 1];
        mqs[j] = v;
    }
}

static int cid_cmp(const void *a, const void *b)
{
    return rmq__java_strcmp(*(const char *const *)a, *(const char *const *)b);
}

void rmq__cid_sort(const char **cids, int n)
{
    /* Equal client ids are identical strings, so stability does not matter here. */
    if (n > 1) qsort(cids, (size_t)n, sizeof(*cids), cid_cmp);
}

int rmq__mq_to_string(const rmq_mq_t *mq, rmq_buf_t *out)
{
    return rmq__buf_appendf(out, "MessageQueue [topic=%s, brokerName=%s, queueId=%d]", mq->topic,
                            mq->broker_name, mq->queue_id);
}

int rmq__allocate_out_cap(const struct rmq_conf *conf, int n_mq)
{
    return (n_mq > 0 ? n_mq : 0) + conf->n_alloc_config_mqs + 1;
}

const rmq_mq_t *rmq__allocate_result_mq(const struct rmq_conf *conf, const rmq_mq_t *mq_all,
                                        int n_mq, int idx)
{
    return idx < n_mq ? &mq_all[idx] : &conf->alloc_config_mqs[idx - n_mq];
}

uint32_t rmq__alloc_md5_hash(const char *key, size_t len)
{
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int dl = 0;
    if (!EVP_Digest(key, len, d, &dl, EVP_md5(), NULL) || dl < 4) return 0;
    return ((uint32_t)d[0] << 24) | ((uint32_t)d[1] << 16) | ((uint32_t)d[2] << 8) | d[3];
}

/* ---- strategies -------------------------------------------------------------------------------
 */

static int index_of(const char *cid, const char *const *cid_all, int n_cid)
{
    int i;
    for (i = 0; i < n_cid; i++)
        if (!strcmp(cid_all[i], cid)) return i;
    return -1;
}

/* AbstractAllocateMessageQueueStrategy.check: <0 error, 0 not in cidAll (empty result), 1 ok. */
static int check(const char *group, const char *cid, int n_mq, const char *const *cid_all,
                 int n_cid, char *errstr, size_t n)
{
    if (!cid || !*cid) {
        rmq__seterr(errstr, n, "currentCID is empty");
        return -1;
    }
    if (n_mq <= 0) {
        rmq__seterr(errstr, n, "mqAll is null or mqAll empty");
        return -1;
    }
    if (n_cid <= 0) {
        rmq__seterr(errstr, n, "cidAll is null or cidAll empty");
        return -1;
    }
    if (index_of(cid, cid_all, n_cid) < 0) {
        rmq_log_info(LOG_SUB, "[BUG] ConsumerGroup: %s The consumerId: %s not in cidAll (%d ids)",
                     group ? group : "", cid, n_cid);
        return 0;
    }
    return 1;
}

/* The strategies below work on index lists: sel[0..n_sel) are indices into mq_all. */

static void avg(int index, int n_cid, const int *sel, int n, int *out, int *n_out)
{
    int mod, size, start, range, i;
    if (n <= 0) return;
    mod = n % n_cid;
    size = n <= n_cid ? 1 : (mod > 0 && index < mod ? n / n_cid + 1 : n / n_cid);
    start = (mod > 0 && index < mod) ? index * size : index * size + mod;
    range = size < n - start ? size : n - start;
    for (i = 0; i < range; i++)
        out[(*n_out)++] = sel[(start + i) % n];
}

static void avg_by_circle(int index, int n_cid, const int *sel, int n, int *out, int *n_out)
{
    int i;
    for (i = index; i < n; i++)
        if (i % n_cid == index) out[(*n_out)++] = sel[i];
}

typedef struct ring_node {
    uint32_t hash;
    int cid; /* index into cid_all */
} ring_node_t;

static int ring_find(const ring_node_t *r, int n, uint32_t h, int *found)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (r[mid].hash < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < n && r[lo].hash == h;
    return lo;
}

static int consistent_hash(const rmq_conf_t *conf, const char *cid, const rmq_mq_t *mq_all,
                           const int *sel, int n, const char *const *cid_all, int n_cid, int *out,
                           int *n_out)
{
    int vn = conf->consistent_hash_virtual_nodes, nr = 0, i, k;
    ring_node_t *ring;
    rmq_buf_t key;
    if (vn <= 0 || n <= 0) return RMQ_OK;
    ring = rmq__xmalloc(sizeof(*ring) * (size_t)n_cid * (size_t)vn);
    rmq__buf_init(&key);
    for (i = 0; i < n_cid; i++) {
        int existing = 0, j;
        /* getExistingReplicas: virtual nodes already on the ring for this physical node. */
        if (index_of(cid_all[i], cid_all, n_cid) < i)
            for (j = 0; j < nr; j++)
                existing += !strcmp(cid_all[ring[j].cid], cid_all[i]);
        for (k = 0; k < vn; k++) {
            int found, pos;
            uint32_t h;
            key.len = 0;
            rmq__buf_appendf(&key, "%s-%d", cid_all[i], k + existing);
            h = rmq__alloc_md5_hash(key.data, key.len);
            pos = ring_find(ring, nr, h, &found);
            if (found) { /* TreeMap.put: the later insertion wins */
                ring[pos].cid = i;
                continue;
            }
            memmove(ring + pos + 1, ring + pos, sizeof(*ring) * (size_t)(nr - pos));
            ring[pos].hash = h;
            ring[pos].cid = i;
            nr++;
        }
    }
    for (i = 0; i < n; i++) {
        int found, pos;
        uint32_t h;
        key.len = 0;
        rmq__mq_to_string(&mq_all[sel[i]], &key);
        h = rmq__alloc_md5_hash(key.data, key.len);
        pos = ring_find(ring, nr, h, &found);
        if (pos == nr) pos = 0; /* no key >= h: wrap to the smallest */
        if (!strcmp(cid_all[ring[pos].cid], cid)) out[(*n_out)++] = sel[i];
    }
    rmq__buf_free(&key);
    free(ring);
    return RMQ_OK;
}

static int by_config(const rmq_conf_t *conf, const rmq_mq_t *mq_all, int n_mq, int *out, int *n_out,
                     int java_raw)
{
    int i, j, k;
    for (i = 0; i < conf->n_alloc_config_mqs; i++) {
        const rmq_mq_t *want = &conf->alloc_config_mqs[i];
        for (j = 0; j < n_mq; j++)
            if (want->queue_id == mq_all[j].queue_id && !strcmp(want->topic, mq_all[j].topic) &&
                !strcmp(want->broker_name, mq_all[j].broker_name))
                break;
        if (j == n_mq) {
            /* Not among this topic's readable queues. Java hands it out anyway (even a queue of
             * another topic); the engine's entry point skips it. */
            if (!java_raw) {
                rmq_dbg(RMQ_DBG_REBALANCE, LOG_SUB,
                        "allocate_config_queues: %s:%s:%d is not in this allocation's queues",
                        want->topic, want->broker_name, want->queue_id);
                continue;
            }
            j = n_mq + i;
        }
        for (k = 0; k < *n_out; k++)
            if (out[k] == j) break;
        if (k == *n_out) out[(*n_out)++] = j;
    }
    return RMQ_OK;
}

/* Is `s` (length n) one of the comma-separated words of list? */
static int in_list(const char *list, const char *s, size_t n)
{
    const char *p = list ? list : "";
    while (*p) {
        size_t w;
        while (*p == ',' || *p == ' ')
            p++;
        w = strcspn(p, ", ");
        if (w == n && !memcmp(p, s, n)) return 1;
        p += w;
    }
    return 0;
}

static int machine_room(const rmq_conf_t *conf, int index, int n_cid, const rmq_mq_t *mq_all,
                        const int *sel, int n, int *out, int *n_out)
{
    int *pre = rmq__xmalloc(sizeof(int) * (size_t)(n ? n : 1));
    int npre = 0, i, mod, rem;
    for (i = 0; i < n; i++) {
        /* brokerName.split("@") has exactly 2 parts (trailing empty parts dropped). */
        const char *b = mq_all[sel[i]].broker_name, *at = strchr(b, '@');
        const char *second, *second_end;
        if (!at) continue;
        second = at + 1;
        second_end = strchr(second, '@');
        if (!second_end)
            second_end = second + strlen(second);
        else {
            /* More '@': only trailing empty pieces may follow ("a@b@" -> [a, b]). */
            const char *r = second_end;
            while (*r == '@')
                r++;
            if (*r) continue;
        }
        if (second_end == second) continue; /* "a@" -> [a] */
        if (at > b && in_list(conf->allocate_machine_room_idcs, b, (size_t)(at - b)))
            pre[npre++] = sel[i];
    }
    mod = npre / n_cid;
    rem = npre % n_cid;
    for (i = mod * index; i < mod * index + mod; i++)
        out[(*n_out)++] = pre[i];
    if (rem > index) out[(*n_out)++] = pre[index + mod * n_cid];
    free(pre);
    return RMQ_OK;
}

static int run_inner(int strategy, const rmq_conf_t *conf, const char *group, const char *cid,
                     const rmq_mq_t *mq_all, const int *sel, int n, const char *const *cid_all,
                     int n_cid, int *out, int *n_out, char *errstr, size_t errstr_size);

/* Machine room of a name: the part before the first separator (whole string without one). */
static size_t room_len(const rmq_conf_t *conf, const char *s)
{
    const char *sep = conf->machine_room_separator && *conf->machine_room_separator
                          ? conf->machine_room_separator
                          : "-";
    const char *p = strstr(s, sep);
    return p ? (size_t)(p - s) : strlen(s);
}

typedef struct room {
    const char *name;
    size_t len;
} room_t;

static int room_cmp(const void *a, const void *b)
{
    const room_t *x = a, *y = b;
    char *xs = rmq__xstrndup(x->name, x->len), *ys = rmq__xstrndup(y->name, y->len);
    int r = rmq__java_strcmp(xs, ys);
    free(xs);
    free(ys);
    return r;
}

/*
 * AllocateMachineRoomNearby: group queues and consumers by machine room (TreeMap order); this
 * consumer's room first (its queues among its room's consumers), then every other room that has
 * queues but no consumer at all (shared by everyone).
 */
static int nearby(const rmq_conf_t *conf, const char *group, const char *cid,
                  const rmq_mq_t *mq_all, const int *sel, int n, const char *const *cid_all,
                  int n_cid, int *out, int *n_out, char *errstr, size_t errstr_size)
{
    room_t *rooms = rmq__xmalloc(sizeof(room_t) * (size_t)(n + 1));
    int nrooms = 0, i, r, rc = RMQ_OK, pass;
    int *qsel = rmq__xmalloc(sizeof(int) * (size_t)(n ? n : 1));
    const char **csel = rmq__xmalloc(sizeof(char *) * (size_t)n_cid);
    size_t my_len = room_len(conf, cid);

    /* An empty room is an error (Java: IllegalArgumentException from allocate). */
    for (i = 0; i < n; i++) {
        const char *b = mq_all[sel[i]].broker_name;
        size_t l = room_len(conf, b);
        if (!l) {
            rmq_buf_t s;
            rmq__buf_init(&s);
            rmq__mq_to_string(&mq_all[sel[i]], &s);
            rmq__seterr(errstr, errstr_size, "Machine room is null for mq %.*s", (int)s.len,
                        s.data);
            rmq__buf_free(&s);
            rc = RMQ_ERR_INVALID;
            goto out;
        }
        rooms[nrooms].name = b;
        rooms[nrooms++].len = l;
    }
    for (i = 0; i < n_cid; i++) {
        if (!room_len(conf, cid_all[i])) {
            rmq__seterr(errstr, errstr_size, "Machine room is null for consumer id %s", cid_all[i]);
            rc = RMQ_ERR_INVALID;
            goto out;
        }
    }
    /* Distinct broker rooms in sorted (TreeMap) order. */
    qsort(rooms, (size_t)nrooms, sizeof(room_t), room_cmp);
    for (pass = 0; pass < 2; pass++) {
        for (r = 0; r < nrooms; r++) {
            int nq = 0, nc = 0, mine;
            if (r > 0 && rooms[r].len == rooms[r - 1].len &&
                !memcmp(rooms[r].name, rooms[r - 1].name, rooms[r].len))
                continue;
            mine = my_len == rooms[r].len && !memcmp(cid, rooms[r].name, my_len);
            if (mine != (pass == 0)) continue;
            for (i = 0; i < n; i++) {
                const char *b = mq_all[sel[i]].broker_name;
                if (room_len(conf, b) == rooms[r].len && !memcmp(b, rooms[r].name, rooms[r].len))
                    qsel[nq++] = sel[i];
            }
            for (i = 0; i < n_cid; i++)
                if (room_len(conf, cid_all[i]) == rooms[r].len &&
                    !memcmp(cid_all[i], rooms[r].name, rooms[r].len))
                    csel[nc++] = cid_all[i];
            if (mine)
                rc = run_inner(conf->allocate_nearby_inner_strategy, conf, group, cid, mq_all, qsel,
                               nq, csel, nc, out, n_out, errstr, errstr_size);
            else if (nc == 0)
                rc = run_inner(conf->allocate_nearby_inner_strategy, conf, group, cid, mq_all, qsel,
                               nq, cid_all, n_cid, out, n_out, errstr, errstr_size);
            if (rc) goto out;
        }
    }
out:
    free(rooms);
    free(qsel);
    free(csel);
    return rc;
}

static int run_inner(int strategy, const rmq_conf_t *conf, const char *group, const char *cid,
                     const rmq_mq_t *mq_all, const int *sel, int n, const char *const *cid_all,
                     int n_cid, int *out, int *n_out, char *errstr, size_t errstr_size)
{
    int c, index;
    if (strategy == RMQ_ALLOC_CONFIG) { /* only reachable as the nearby inner strategy */
        rmq__seterr(errstr, errstr_size, "allocate_nearby_inner_strategy CONFIG is not supported");
        return RMQ_ERR_CONFIG;
    }
    if (strategy == RMQ_ALLOC_LUA) {
        rmq__seterr(errstr, errstr_size,
                    "allocate_message_queue_strategy LUA is run by the Lua layer, not here");
        return RMQ_ERR_STATE;
    }
    c = check(group, cid, n, cid_all, n_cid, errstr, errstr_size);
    if (c < 0) return RMQ_ERR_INVALID;
    if (c == 0) return RMQ_OK;
    index = index_of(cid, cid_all, n_cid);
    switch (strategy) {
    case RMQ_ALLOC_AVG:
        avg(index, n_cid, sel, n, out, n_out);
        return RMQ_OK;
    case RMQ_ALLOC_AVG_BY_CIRCLE:
        avg_by_circle(index, n_cid, sel, n, out, n_out);
        return RMQ_OK;
    case RMQ_ALLOC_CONSISTENT_HASH:
        return consistent_hash(conf, cid, mq_all, sel, n, cid_all, n_cid, out, n_out);
    case RMQ_ALLOC_MACHINE_ROOM:
        return machine_room(conf, index, n_cid, mq_all, sel, n, out, n_out);
    case RMQ_ALLOC_MACHINE_ROOM_NEARBY:
        if (conf->allocate_nearby_inner_strategy == RMQ_ALLOC_MACHINE_ROOM_NEARBY ||
            conf->allocate_nearby_inner_strategy == RMQ_ALLOC_LUA ||
            conf->allocate_nearby_inner_strategy == RMQ_CONF_UNSET) {
            rmq__seterr(errstr, errstr_size,
                        "allocate_nearby_inner_strategy must be a built-in strategy");
            return RMQ_ERR_CONFIG;
        }
        return nearby(conf, group, cid, mq_all, sel, n, cid_all, n_cid, out, n_out, errstr,
                      errstr_size);
    default:
        rmq__seterr(errstr, errstr_size, "allocateMessageQueueStrategy is null");
        return RMQ_ERR_CONFIG;
    }
}

static int allocate_impl(int strategy, const rmq_conf_t *conf, const char *group, const char *cid,
                         const rmq_mq_t *mq_all, int n_mq, const char *const *cid_all, int n_cid,
                         int *out_idx, int *n_out, char *errstr, size_t errstr_size, int java_raw)
{
    int *sel, i, rc;
    *n_out = 0;
    if (n_mq < 0) n_mq = 0;
    sel = rmq__xmalloc(sizeof(int) * (size_t)(n_mq ? n_mq : 1));
    for (i = 0; i < n_mq; i++)
        sel[i] = i;
    if (strategy == RMQ_ALLOC_CONFIG)
        rc = by_config(conf, mq_all, n_mq, out_idx, n_out, java_raw);
    else
        rc = run_inner(strategy, conf, group, cid, mq_all, sel, n_mq, cid_all, n_cid, out_idx,
                       n_out, errstr, errstr_size);
    free(sel);
    if (rc) *n_out = 0;
    return rc;
}

int rmq__allocate_with(int strategy, const rmq_conf_t *conf, const char *group, const char *cid,
                       const rmq_mq_t *mq_all, int n_mq, const char *const *cid_all, int n_cid,
                       int *out_idx, int *n_out, char *errstr, size_t errstr_size)
{
    return allocate_impl(strategy, conf, group, cid, mq_all, n_mq, cid_all, n_cid, out_idx, n_out,
                         errstr, errstr_size, 0);
}

int rmq__allocate(const rmq_conf_t *conf, const char *group, const char *cid,
                  const rmq_mq_t *mq_all, int n_mq, const char *const *cid_all, int n_cid,
                  int *out_idx, int *n_out, char *errstr, size_t errstr_size)
{
    return allocate_impl(conf->allocate_message_queue_strategy, conf, group, cid, mq_all, n_mq,
                         cid_all, n_cid, out_idx, n_out, errstr, errstr_size, 0);
}

int rmq__allocate_java(const rmq_conf_t *conf, const char *group, const char *cid,
                       const rmq_mq_t *mq_all, int n_mq, const char *const *cid_all, int n_cid,
                       int *out_idx, int *n_out, char *errstr, size_t errstr_size)
{
    return allocate_impl(conf->allocate_message_queue_strategy, conf, group, cid, mq_all, n_mq,
                         cid_all, n_cid, out_idx, n_out, errstr, errstr_size, 1);
}

/* ---- exports ----------------------------------------------------------------------------------
 */

int rmq_allocate(const rmq_conf_t *conf, const char *group, const char *cid, const rmq_mq_t *mq_all,
                 int n_mq, const char *const *cid_all, int n_cid, int *out_idx, int *n_out,
                 char *errstr, size_t errstr_size)
{
    return rmq__allocate(conf, group, cid, mq_all, n_mq, cid_all, n_cid, out_idx, n_out, errstr,
                         errstr_size);
}

int rmq_allocate_java(const rmq_conf_t *conf, const char *group, const char *cid,
                      const rmq_mq_t *mq_all, int n_mq, const char *const *cid_all, int n_cid,
                      int *out_idx, int *n_out, char *errstr, size_t errstr_size)
{
    return rmq__allocate_java(conf, group, cid, mq_all, n_mq, cid_all, n_cid, out_idx, n_out,
                              errstr, errstr_size);
}

void rmq_mq_sort(rmq_mq_t *mqs, int n)
{
    rmq__mq_sort(mqs, n);
}
void rmq_cid_sort(const char **cids, int n)
{
    rmq__cid_sort(cids, n);
}
int rmq_allocate_out_cap(const rmq_conf_t *conf, int n_mq)
{
    return rmq__allocate_out_cap(conf, n_mq);
}
const rmq_mq_t *rmq_allocate_result_mq(const rmq_conf_t *conf, const rmq_mq_t *mq_all, int n_mq,
                                       int idx)
{
    return rmq__allocate_result_mq(conf, mq_all, n_mq, idx);
}
int rmq_java_strcmp(const char *a, const char *b)
{
    return rmq__java_strcmp(a, b);
}
uint32_t rmq_alloc_md5_hash(const char *key, size_t len)
{
    return rmq__alloc_md5_hash(key, len);
}
