/*
 * route.c -- TopicRouteData parse/write, broker address lookup, the subscribe set and the
 * MessageQueue ordering (see route.h).
 *
 * Ownership: routes and mq lists are plain heap trees owned by the caller.
 * Threads: no shared state.
 */
#include "route.h"

#include <stdlib.h>

#include "fjson.h"

/* ---- MessageQueue order (rmq__mq_cmp and rmq__java_strcmp: mq.c) ---------- */

int rmq__mq_qsort_cmp(const void *a, const void *b)
{
    return rmq__mq_cmp(a, b);
}

/* ---- free / dup ------------------------------------------------------------------------- */

void rmq__route_free(rmq_route_t *r)
{
    if (!r) return;
    for (int i = 0; i < r->n_qds; i++)
        free(r->qds[i].broker_name);
    for (int i = 0; i < r->n_bds; i++) {
        rmq_broker_data_t *bd = &r->bds[i];
        free(bd->cluster);
        free(bd->broker_name);
        for (int j = 0; j < bd->n_addrs; j++)
            free(bd->addrs[j].addr);
        free(bd->addrs);
    }
    free(r->qds);
    free(r->bds);
    free(r->order_topic_conf);
    free(r);
}

static char *dupstr(const char *s, int *oom)
{
    char *d;
    if (!s) return NULL;
    d = strdup(s);
    if (!d) *oom = 1;
    return d;
}

rmq_route_t *rmq__route_dup(const rmq_route_t *r)
{
    int oom = 0;
    rmq_route_t *d = calloc(1, sizeof(*d));
    if (!d) return NULL;
    d->order_topic_conf = dupstr(r->order_topic_conf, &oom);
    d->qds = r->n_qds ? calloc((size_t)r->n_qds, sizeof(*d->qds)) : NULL;
    d->bds = r->n_bds ? calloc((size_t)r->n_bds, sizeof(*d->bds)) : NULL;
    if ((r->n_qds && !d->qds) || (r->n_bds && !d->bds)) {
        rmq__route_free(d);
        return NULL;
    }
    d->n_qds = r->n_qds;
    for (int i = 0; i < r->n_qds; i++) {
        d->qds[i] = r->qds[i];
        d->qds[i].broker_name = dupstr(r->qds[i].broker_name, &oom);
    }
    d->n_bds = r->n_bds;
    for (int i = 0; i < r->n_bds; i++) {
        const rmq_broker_data_t *s = &r->bds[i];
        rmq_broker_data_t *bd = &d->bds[i];
        bd->cluster = dupstr(s->cluster, &oom);
        bd->broker_name = dupstr(s->broker_name, &oom);
        bd->addrs = s->n_addrs ? calloc((size_t)s->n_addrs, sizeof(*bd->addrs)) : NULL;
        if (s->n_addrs && !bd->addrs) {
            oom = 1;
            continue;
        }
        bd->n_addrs = s->n_addrs;
        for (int j = 0; j < s->n_addrs; j++) {
            bd->addrs[j].id = s->addrs[j].id;
            bd->addrs[j].addr = dupstr(s->addrs[j].addr, &oom);
        }
    }
    if (oom) {
        rmq__route_free(d);
        return NULL;
    }
    return d;
}

/* ---- parse ------------------------------------------------------------------------------ */

/* brokerAddrs entries while parsing: sorted by id, then by position, so that a duplicate id
 * keeps its last value as Java's HashMap does. */
typedef struct addr_ent {
    int64_t id;
    const char *addr;
    size_t pos;
} addr_ent_t;

static int addr_ent_cmp(const void *a, const void *b)
{
    const addr_ent_t *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int i32_field(const rmq_fj_t *o, const char *name, int32_t *out, const char *where, int idx,
                     char *errstr, size_t errstr_size)
{
    int rc = rmq__fj_get_i32(o, name, out);
    if (rc == RMQ_ERR_NOT_FOUND) {
        *out = 0;
        return 0;
    }
    if (rc) rmq__seterr(errstr, errstr_size, "route: %s[%d].%s is not an int", where, idx, name);
    return rc ? RMQ_ERR_BAD_JSON : 0;
}

int rmq__route_parse(const char *json, size_t len, rmq_route_t **out, char *errstr,
                     size_t errstr_size)
{
    char why[192];
    rmq_fjdoc_t *doc = rmq__fj_parse(json, len, why, sizeof(why));
    const rmq_fj_t *root, *qds, *bds, *v;
    const char *otc;
    rmq_route_t *r;
    int i, oom = 0, rc = RMQ_ERR_BAD_JSON;

    *out = NULL;
    if (!doc) {
        rmq__seterr(errstr, errstr_size, "route: %s", why);
        return RMQ_ERR_BAD_JSON;
    }
    root = rmq__fj_root(doc);
    if (root->type != RMQ_FJ_OBJECT) {
        rmq__fj_free(doc);
        rmq__seterr(errstr, errstr_size, "route: body is not a JSON object");
        return RMQ_ERR_BAD_JSON;
    }
    qds = rmq__fj_get(root, "queueDatas");
    bds = rmq__fj_get(root, "brokerDatas");
    if ((qds && qds->type != RMQ_FJ_ARRAY && qds->type != RMQ_FJ_NULL) ||
        (bds && bds->type != RMQ_FJ_ARRAY && bds->type != RMQ_FJ_NULL)) {
        rmq__fj_free(doc);
        rmq__seterr(errstr, errstr_size, "route: queueDatas/brokerDatas is not an array");
        return RMQ_ERR_BAD_JSON;
    }
    r = calloc(1, sizeof(*r));
    if (!r) goto nomem;
    otc = rmq__fj_get_str(root, "orderTopicConf");
    r->order_topic_conf = dupstr(otc, &oom);
    if (qds && qds->type == RMQ_FJ_ARRAY && qds->len) {
        int64_t n_read = 0, n_write = 0;
        r->qds = calloc(qds->len, sizeof(*r->qds));
        if (!r->qds) goto nomem;
        for (i = 0, v = qds->child; v; v = v->next, i++) {
            rmq_queue_data_t *qd = &r->qds[i];
            const char *bn = rmq__fj_get_str(v, "brokerName");
            if (v->type != RMQ_FJ_OBJECT || !bn) {
                rmq__seterr(errstr, errstr_size, "route: queueDatas[%d] has no brokerName", i);
                goto bad;
            }
            r->n_qds = i + 1;
            qd->broker_name = dupstr(bn, &oom);
            if (i32_field(v, "readQueueNums", &qd->read_queue_nums, "queueDatas", i, errstr,
                          errstr_size) ||
                i32_field(v, "writeQueueNums", &qd->write_queue_nums, "queueDatas", i, errstr,
                          errstr_size) ||
                i32_field(v, "perm", &qd->perm, "queueDatas", i, errstr, errstr_size))
                goto bad;
            if (rmq__fj_get(v, "topicSysFlag")) {
                if (i32_field(v, "topicSysFlag", &qd->topic_sys_flag, "queueDatas", i, errstr,
                              errstr_size))
                    goto bad;
            } else if (i32_field(v, "topicSynFlag", &qd->topic_sys_flag, "queueDatas", i, errstr,
                                 errstr_size)) {
                goto bad;
            }
            if (qd->read_queue_nums > RMQ_ROUTE_MAX_QUEUE_NUMS ||
                qd->write_queue_nums > RMQ_ROUTE_MAX_QUEUE_NUMS) {
                int rd = qd->read_queue_nums > RMQ_ROUTE_MAX_QUEUE_NUMS;
                rmq__seterr(errstr, errstr_size,
                            "route: queueDatas[%d] (broker %s): %s %d is more than %d", i, bn,
                            rd ? "readQueueNums" : "writeQueueNums",
                            (int)(rd ? qd->read_queue_nums : qd->write_queue_nums),
                            RMQ_ROUTE_MAX_QUEUE_NUMS);
                goto bad;
            }
            if ((qd->perm & RMQ_PERM_READ) && qd->read_queue_nums > 0) n_read += qd->read_queue_nums;
            if ((qd->perm & RMQ_PERM_WRITE) && qd->write_queue_nums > 0)
                n_write += qd->write_queue_nums;
            if (n_read > RMQ_ROUTE_MAX_QUEUES || n_write > RMQ_ROUTE_MAX_QUEUES) {
                rmq__seterr(errstr, errstr_size,
                            "route: queueDatas[%d] (broker %s) makes %lld %s queues, more than %d",
                            i, bn, (long long)(n_read > RMQ_ROUTE_MAX_QUEUES ? n_read : n_write),
                            n_read > RMQ_ROUTE_MAX_QUEUES ? "readable" : "writable",
                            RMQ_ROUTE_MAX_QUEUES);
                goto bad;
            }
        }
    }
    if (bds && bds->type == RMQ_FJ_ARRAY && bds->len) {
        r->bds = calloc(bds->len, sizeof(*r->bds));
        if (!r->bds) goto nomem;
        for (i = 0, v = bds->child; v; v = v->next, i++) {
            rmq_broker_data_t *bd = &r->bds[i];
            const char *bn = rmq__fj_get_str(v, "brokerName");
            const rmq_fj_t *addrs = rmq__fj_get(v, "brokerAddrs"), *a;
            addr_ent_t *ents;
            int j;
            if (v->type != RMQ_FJ_OBJECT || !bn) {
                rmq__seterr(errstr, errstr_size, "route: brokerDatas[%d] has no brokerName", i);
                goto bad;
            }
            r->n_bds = i + 1;
            bd->broker_name = dupstr(bn, &oom);
            bd->cluster = dupstr(rmq__fj_get_str(v, "cluster"), &oom);
            if (addrs && addrs->type == RMQ_FJ_NULL) addrs = NULL;
            if (addrs && addrs->type != RMQ_FJ_OBJECT) {
                rmq__seterr(errstr, errstr_size, "route: brokerDatas[%d].brokerAddrs is not a map",
                            i);
                goto bad;
            }
            if (!addrs || !addrs->len) continue;
            ents = malloc(addrs->len * sizeof(*ents));
            bd->addrs = calloc(addrs->len, sizeof(*bd->addrs));
            if (!ents || !bd->addrs) {
                free(ents);
                goto nomem;
            }
            for (j = 0, a = addrs->child; a; a = a->next, j++) {
                if (rmq__fj_i64(a->key, &ents[j].id) || a->type != RMQ_FJ_STRING) {
                    rmq__seterr(errstr, errstr_size,
                                "route: brokerDatas[%d].brokerAddrs entry %d is not id:\"addr\"", i,
                                j);
                    free(ents);
                    goto bad;
                }
                ents[j].addr = a->s;
                ents[j].pos = (size_t)j;
            }
            qsort(ents, addrs->len, sizeof(*ents), addr_ent_cmp);
            for (size_t e = 0; e < addrs->len; e++) {
                if (e + 1 < addrs->len && ents[e + 1].id == ents[e].id) continue; /* later wins */
                bd->addrs[bd->n_addrs].id = ents[e].id;
                bd->addrs[bd->n_addrs].addr = dupstr(ents[e].addr, &oom);
                bd->n_addrs++;
            }
            free(ents);
        }
    }
    if (oom) goto nomem;
    rmq__fj_free(doc);
    *out = r;
    return 0;
nomem:
    rmq__seterr(errstr, errstr_size, "route: out of memory");
    rc = RMQ_ERR_NOMEM;
bad:
    rmq__route_free(r);
    rmq__fj_free(doc);
    return rc;
}

/* ---- write ------------------------------------------------------------------------------ */

int rmq__route_write(const rmq_route_t *r, int standard, rmq_buf_t *out)
{
    int f = standard ? RMQ_FJ_ASCII : 0, rc = 0;
#define S(lit) rc |= rmq__buf_append(out, lit, sizeof(lit) - 1)
#define STR(s) rc |= rmq__fj_write_str(out, s, strlen(s), f)
    S("{\"brokerDatas\":[");
    for (int i = 0; i < r->n_bds; i++) {
        const rmq_broker_data_t *bd = &r->bds[i];
        if (i) S(",");
        S("{\"brokerAddrs\":{");
        for (int j = 0; j < bd->n_addrs; j++) {
            rc |= rmq__buf_appendf(out, standard ? "%s\"%lld\":" : "%s%lld:", j ? "," : "",
                                   (long long)bd->addrs[j].id);
            STR(bd->addrs[j].addr);
        }
        S("},\"brokerName\":");
        STR(bd->broker_name);
        if (bd->cluster) {
            S(",\"cluster\":");
            STR(bd->cluster);
        }
        if (r->rocketmq5) S(",\"enableActingMaster\":false");
        S("}");
    }
    S("],\"filterServerTable\":{},");
    if (r->order_topic_conf) {
        S("\"orderTopicConf\":");
        STR(r->order_topic_conf);
        S(",");
    }
    S("\"queueDatas\":[");
    for (int i = 0; i < r->n_qds; i++) {
        const rmq_queue_data_t *qd = &r->qds[i];
        if (i) S(",");
        S("{\"brokerName\":");
        STR(qd->broker_name);
        rc |= rmq__buf_appendf(out,
                               ",\"perm\":%d,\"readQueueNums\":%d,\"topicSysFlag\":%d,"
                               "\"writeQueueNums\":%d}",
                               qd->perm, qd->read_queue_nums, qd->topic_sys_flag,
                               qd->write_queue_nums);
    }
    S("]}");
#undef S
#undef STR
    return rc ? RMQ_ERR_NOMEM : 0;
}

/* ---- equality --------------------------------------------------------------------------- */

static int nstrcmp(const char *a, const char *b)
{
    if (!a || !b) return a == b ? 0 : a ? 1 : -1;
    return strcmp(a, b);
}

static int qd_ptr_cmp(const void *a, const void *b)
{
    const rmq_queue_data_t *x = *(const rmq_queue_data_t *const *)a;
    const rmq_queue_data_t *y = *(const rmq_queue_data_t *const *)b;
    int c = strcmp(x->broker_name, y->broker_name);
    if (c) return c;
    if (x->read_queue_nums != y->read_queue_nums)
        return x->read_queue_nums < y->read_queue_nums ? -1 : 1;
    if (x->write_queue_nums != y->write_queue_nums)
        return x->write_queue_nums < y->write_queue_nums ? -1 : 1;
    if (x->perm != y->perm) return x->perm < y->perm ? -1 : 1;
    return x->topic_sys_flag < y->topic_sys_flag ? -1 : x->topic_sys_flag > y->topic_sys_flag;
}

static int bd_cmp(const rmq_broker_data_t *x, const rmq_broker_data_t *y)
{
    int c = strcmp(x->broker_name, y->broker_name);
    if (c) return c;
    if ((c = nstrcmp(x->cluster, y->cluster))) return c;
    if (x->n_addrs != y->n_addrs) return x->n_addrs < y->n_addrs ? -1 : 1;
    for (int i = 0; i < x->n_addrs; i++) {
        if (x->addrs[i].id != y->addrs[i].id) return x->addrs[i].id < y->addrs[i].id ? -1 : 1;
        if ((c = strcmp(x->addrs[i].addr, y->addrs[i].addr))) return c;
    }
    return 0;
}

static int bd_ptr_cmp(const void *a, const void *b)
{
    return bd_cmp(*(const rmq_broker_data_t *const *)a, *(const rmq_broker_data_t *const *)b);
}

/* 1 when the n entries (of size bytes) of arrays xa and xb are the same ones in any order:
 * pointers to them (in pa and pb, room for n each) sorted by cmp, then compared pairwise. */
static int same_sorted(const void **pa, const void **pb, const void *xa, const void *xb, int n,
                       size_t size, int (*cmp)(const void *, const void *))
{
    for (int i = 0; i < n; i++) {
        pa[i] = (const char *)xa + (size_t)i * size;
        pb[i] = (const char *)xb + (size_t)i * size;
    }
    qsort(pa, (size_t)n, sizeof(*pa), cmp);
    qsort(pb, (size_t)n, sizeof(*pb), cmp);
    for (int i = 0; i < n; i++)
        if (cmp(&pa[i], &pb[i]) != 0) return 0;
    return 1;
}

int rmq__route_equal(const rmq_route_t *a, const rmq_route_t *b)
{
    int n = a->n_qds > a->n_bds ? a->n_qds : a->n_bds, eq = 1;
    const void **pa, **pb;
    if (a->n_qds != b->n_qds || a->n_bds != b->n_bds ||
        nstrcmp(a->order_topic_conf, b->order_topic_conf))
        return 0;
    if (n == 0) return 1;
    pa = malloc(sizeof(*pa) * (size_t)n * 2);
    if (!pa) return 0; /* unknown: report a change, the caller re-applies the route */
    pb = pa + n;
    eq = same_sorted(pa, pb, a->qds, b->qds, a->n_qds, sizeof(*a->qds), qd_ptr_cmp) &&
         same_sorted(pa, pb, a->bds, b->bds, a->n_bds, sizeof(*a->bds), bd_ptr_cmp);
    free(pa);
    return eq;
}

/* ---- lookups ------------------------------------------------------------------------------- */

const rmq_broker_data_t *rmq__route_broker(const rmq_route_t *r, const char *broker_name)
{
    for (int i = 0; i < r->n_bds; i++)
        if (strcmp(r->bds[i].broker_name, broker_name) == 0) return &r->bds[i];
    return NULL;
}

/* HashMap bucket of a Long key for a table of cap (a power of two). */
static uint32_t long_bucket(int64_t id, uint32_t cap)
{
    uint32_t h = (uint32_t)((uint64_t)id ^ ((uint64_t)id >> 32)); /* Long.hashCode */
    return (h ^ (h >> 16)) & (cap - 1);                             /* HashMap.hash */
}

const char *rmq__route_admin_addr(const rmq_route_t *r, const char *broker_name, int *slave)
{
    const rmq_broker_data_t *bd = rmq__route_broker(r, broker_name);
    const rmq_broker_addr_t *best = NULL;
    uint32_t cap = 16, bb = 0;
    *slave = 0;
    if (!bd) return NULL;
    while ((uint64_t)bd->n_addrs * 4 > (uint64_t)cap * 3)
        cap <<= 1;
    for (int j = 0; j < bd->n_addrs; j++) { /* addrs are in id order */
        const rmq_broker_addr_t *a = &bd->addrs[j];
        if (!a->addr) continue;
        uint32_t b = long_bucket(a->id, cap);
        if (!best || b < bb) best = a, bb = b;
    }
    if (!best) return NULL;
    *slave = best->id != RMQ_MASTER_ID;
    return best->addr;
}

const char *rmq__route_master_addr(const rmq_route_t *r, const char *broker_name)
{
    const rmq_broker_data_t *bd = rmq__route_broker(r, broker_name);
    if (!bd) return NULL;
    for (int j = 0; j < bd->n_addrs; j++)
        if (bd->addrs[j].id == RMQ_MASTER_ID) return bd->addrs[j].addr;
    return NULL;
}

const char *rmq__route_any_addr(const rmq_route_t *r, const char *broker_name)
{
    const rmq_broker_data_t *bd = rmq__route_broker(r, broker_name);
    const char *m;
    if (!bd || bd->n_addrs == 0) return NULL;
    m = rmq__route_master_addr(r, broker_name);
    return m ? m : bd->addrs[0].addr; /* addrs are sorted by id */
}

void rmq__mqs_free(rmq_mq_t *mqs, int n)
{
    if (!mqs) return;
    for (int i = 0; i < n; i++) {
        free(mqs[i].topic);
        free(mqs[i].broker_name);
    }
    free(mqs);
}

int rmq__route_subscribe_mqs(const rmq_route_t *r, const char *topic, rmq_mq_t **out, int *n)
{
    size_t total = 0, k = 0;
    rmq_mq_t *mqs;
    *out = NULL;
    *n = 0;
    for (int i = 0; i < r->n_qds; i++)
        if ((r->qds[i].perm & RMQ_PERM_READ) && r->qds[i].read_queue_nums > 0)
            total += (size_t)r->qds[i].read_queue_nums;
    if (total == 0) return 0;
    if (total > INT32_MAX) return RMQ_ERR_INVALID;
    mqs = calloc(total, sizeof(*mqs));
    if (!mqs) return RMQ_ERR_NOMEM;
    for (int i = 0; i < r->n_qds; i++) {
        const rmq_queue_data_t *qd = &r->qds[i];
        if (!(qd->perm & RMQ_PERM_READ)) continue;
        for (int q = 0; q < qd->read_queue_nums; q++, k++) {
            mqs[k].topic = strdup(topic);
            mqs[k].broker_name = strdup(qd->broker_name);
            mqs[k].queue_id = q;
            if (!mqs[k].topic || !mqs[k].broker_name) {
                rmq__mqs_free(mqs, (int)k + 1);
                return RMQ_ERR_NOMEM;
            }
        }
    }
    qsort(mqs, total, sizeof(*mqs), rmq__mq_qsort_cmp);
    /* Java collects into a HashSet: a broker listed twice gives its queues once. */
    k = total ? 1 : 0;
    for (size_t i = 1; i < total; i++) {
        if (rmq__mq_cmp(&mqs[i], &mqs[k - 1]) == 0) {
            free(mqs[i].topic);
            free(mqs[i].broker_name);
        } else {
            mqs[k++] = mqs[i];
        }
    }
    *out = mqs;
    *n = (int)k;
    return 0;
}
