/*
 * devbroker_index.c -- the development broker's message index and the message queries it
 * serves: QUERY_MESSAGE (mqadmin queryMsgByKey, queryMsgByUniqueKey, the dashboard's message
 * search) and VIEW_MESSAGE_BY_ID (mqadmin queryMsgById: a commit-log offset decoded from an
 * offsetMsgId).
 *
 * What is indexed is what Java's IndexService.buildIndex indexes: for every stored message, its
 * UNIQ_KEY and each of its KEYS (split on MessageConst.KEY_SEPARATOR, " ", empty parts skipped),
 * each under "topic#key" (IndexService.buildKey); rolled-back transactional messages are not.
 * An entry is a message's commit-log offset and store timestamp; a key's entries are in
 * commit-log order. A query walks them from the newest, keeps those inside [beginTimestamp,
 * endTimestamp] up to maxNum (IndexService.queryOffset: at most maxMsgsNumBatch, 64; a unique
 * key query always asks defaultQueryMaxNum, 32), and answers the stored messages in commit-log
 * order (DefaultMessageStore.queryMessage), or QUERY_NOT_FOUND with Java's remark. Unlike
 * Java's index files (timestamps kept in seconds from the file's first entry, keys by hash
 * only), entries keep the exact key and millisecond timestamp, so nothing matches that Java's
 * client would then have to filter out.
 *
 * Life of the index: it lives in memory beside the messages it points at. Every message the
 * store attaches is indexed (rmq__db_attach: a SEND, a delayed or retried message coming due,
 * a slave's copy, and, with --store, each message read back from the commit log at start), so
 * the index is rebuilt from the commit log at open rather than kept in a file of its own: the
 * recovery reads and parses every message anyway, a rebuilt index cannot disagree with the
 * log after a kill -9, and the rebuild happens in rmq__devbroker_start before the broker
 * thread serves anything. A message dropped from the store (--max-bytes) is dropped from the
 * index (rmq__db_index_forget); rmq__db_index_drop_topic forgets a deleted topic's keys.
 *
 * Ownership: each broker owns its index (b->index), freed with its store.
 * Threads: the broker thread (and rmq__devbroker_start before the thread runs).
 */
#include "devbroker_int.h"
#include "message.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MSGS_NUM_BATCH 64    /* MessageStoreConfig.maxMsgsNumBatch */
#define DEFAULT_QUERY_MAX_NUM 32 /* MessageStoreConfig.defaultQueryMaxNum */
#define KEY_SEPARATOR ' '        /* MessageConst.KEY_SEPARATOR */
#define SYSFLAG_TX_ROLLBACK 0xC  /* MessageSysFlag.TRANSACTION_ROLLBACK_TYPE */

typedef struct ix_ent {
    int64_t phys, store_ts;
} ix_ent_t;

/* One key's messages: e[head..n) are live, ascending commit-log offset. The key ("topic#key")
 * lives in the same allocation, and so does the first entry (most keys, a UNIQ_KEY for one,
 * have one message). */
typedef struct ix_post {
    ix_ent_t *e; /* &one while cap is 1 */
    ix_ent_t one;
    uint32_t head, n, cap, klen;
    char key[];
} ix_post_t;

/* A slot keeps its key's hash beside the pointer, so probing reads the slot array alone. */
typedef struct ix_slot {
    uint64_t hash;
    ix_post_t *p; /* NULL: empty */
} ix_slot_t;

/* Open addressing (linear probing, backward-shift deletion, at most half full): one allocation
 * per key, and a lookup touches the slot array and the post it finds. */
struct db_index {
    ix_slot_t *slots;
    size_t mask, nkeys; /* slots: mask + 1, a power of two; 0 before the first key */
    int64_t last_phys;  /* IndexHeader.endPhyOffset: the last message a key was indexed for */
    int64_t last_ts;    /* IndexHeader.endTimestamp: its store timestamp */
    size_t entries;     /* live entries, all keys */
};

static db_index_t *index_of(db_broker_t *b)
{
    if (!b->index) b->index = rmq__xcalloc(1, sizeof(*b->index));
    return b->index;
}

static void post_free(ix_post_t *p)
{
    if (p->e != &p->one) free(p->e);
    free(p);
}

static uint64_t hash_key(const char *k, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
    /* The table takes the low bits, where FNV mixes least: fold the high ones in (splitmix64's
     * finalizer). */
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

/* The slot holding key k (hash h), or the empty slot where it would go. */
static size_t ix_find(const db_index_t *ix, const char *k, size_t kl, uint64_t h)
{
    size_t i = (size_t)h & ix->mask;
    for (const ix_slot_t *sl; (sl = &ix->slots[i])->p != NULL; i = (i + 1) & ix->mask)
        if (sl->hash == h && sl->p->klen == kl && memcmp(sl->p->key, k, kl) == 0) break;
    return i;
}

static ix_post_t *ix_get(const db_index_t *ix, const char *k, size_t kl)
{
    if (!ix->slots) return NULL;
    return ix->slots[ix_find(ix, k, kl, hash_key(k, kl))].p;
}

static void ix_grow(db_index_t *ix)
{
    size_t n = ix->slots ? (ix->mask + 1) * 2 : 1024;
    ix_slot_t *old = ix->slots;
    size_t old_n = old ? ix->mask + 1 : 0;
    ix->slots = rmq__xcalloc(n, sizeof(*ix->slots));
    ix->mask = n - 1;
    for (size_t i = 0; i < old_n; i++) {
        if (!old[i].p) continue;
        size_t j = (size_t)old[i].hash & ix->mask;
        while (ix->slots[j].p)
            j = (j + 1) & ix->mask;
        ix->slots[j] = old[i];
    }
    free(old);
}

/* Remove the key in slot i (linear probing's backward shift: no tombstones). */
static void ix_del_slot(db_index_t *ix, size_t i)
{
    ix->slots[i].p = NULL;
    ix->nkeys--;
    for (size_t j = (i + 1) & ix->mask; ix->slots[j].p; j = (j + 1) & ix->mask) {
        size_t home = (size_t)ix->slots[j].hash & ix->mask;
        /* slots[j] may move back to i unless its home lies cyclically in (i, j]. */
        int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays) continue;
        ix->slots[i] = ix->slots[j];
        ix->slots[j].p = NULL;
        i = j;
    }
}

/* "topic#key" in buf (or a heap copy when it does not fit: *heap to free). */
static char *build_key(char *buf, size_t size, const char *topic, size_t tl, const char *key,
                       size_t kl, char **heap)
{
    char *k = buf;
    *heap = NULL;
    if (tl + kl + 2 > size) k = *heap = rmq__xmalloc(tl + kl + 2);
    memcpy(k, topic, tl);
    k[tl] = '#';
    memcpy(k + tl + 1, key, kl);
    k[tl + 1 + kl] = 0;
    return k;
}

typedef struct each_key {
    const char *topic;
    size_t tl;
    void (*fn)(struct each_key *ek, const char *key, size_t kl);
    db_index_t *ix;
    const db_msg_t *m;
    int added;
} each_key_t;

static void with_key(each_key_t *ek, const char *key, size_t kl)
{
    char buf[512], *heap;
    char *k = build_key(buf, sizeof(buf), ek->topic, ek->tl, key, kl, &heap);
    ek->fn(ek, k, ek->tl + 1 + kl);
    free(heap);
}

/* Call ek->fn for the UNIQ_KEY and each of the KEYS of m, as IndexService.buildIndex does. */
static void for_each_key(const db_msg_t *m, each_key_t *ek)
{
    db_stored_t v;
    if (rmq__db_stored_parse(m, &v)) return;
    if ((v.sys_flag & SYSFLAG_TX_ROLLBACK) == SYSFLAG_TX_ROLLBACK) return;
    ek->topic = v.topic;
    ek->tl = v.topic_len;
    ek->m = m;
    uint32_t ul = 0, kl = 0;
    const char *uniq = rmq__props_find(v.props, v.props_len, "UNIQ_KEY", 8, &ul);
    if (uniq) with_key(ek, uniq, ul);
    const char *keys = rmq__props_find(v.props, v.props_len, "KEYS", 4, &kl);
    for (size_t i = 0; keys && i < kl;) {
        size_t j = i;
        while (j < kl && keys[j] != KEY_SEPARATOR)
            j++;
        if (j > i) with_key(ek, keys + i, j - i);
        i = j + 1;
    }
}

static void add_one(each_key_t *ek, const char *key, size_t kl)
{
    db_index_t *ix = ek->ix;
    if (!ix->slots || (ix->nkeys + 1) * 2 > ix->mask + 1) ix_grow(ix);
    uint64_t h = hash_key(key, kl);
    size_t i = ix_find(ix, key, kl, h);
    ix_post_t *p = ix->slots[i].p;
    if (!p) {
        p = rmq__xmalloc(sizeof(*p) + kl + 1);
        memset(p, 0, sizeof(*p));
        p->klen = (uint32_t)kl;
        memcpy(p->key, key, kl + 1);
        p->e = &p->one;
        p->cap = 1;
        ix->slots[i].hash = h;
        ix->slots[i].p = p;
        ix->nkeys++;
    }
    /* The same key twice in one message (or equal to its UNIQ_KEY) points at it once. */
    if (p->n > p->head && p->e[p->n - 1].phys == ek->m->phys) return;
    if (p->n == p->cap) {
        if (p->head > 0) { /* reuse the room of forgotten entries first */
            memmove(p->e, p->e + p->head, (p->n - p->head) * sizeof(*p->e));
            p->n -= p->head;
            p->head = 0;
        }
        if (p->n == p->cap) {
            ix_ent_t *e = rmq__xmalloc(sizeof(*e) * p->cap * 2);
            memcpy(e, p->e, sizeof(*e) * p->n);
            if (p->e != &p->one) free(p->e);
            p->e = e;
            p->cap *= 2;
        }
    }
    p->e[p->n].phys = ek->m->phys;
    p->e[p->n].store_ts = ek->m->store_ts;
    p->n++;
    ix->entries++;
    ek->added = 1;
}

void rmq__db_index_add(db_broker_t *b, const db_msg_t *m)
{
    each_key_t ek = {.fn = add_one, .ix = index_of(b)};
    for_each_key(m, &ek);
    if (ek.added) {
        ek.ix->last_phys = m->phys;
        ek.ix->last_ts = m->store_ts;
    }
}

static void forget_one(each_key_t *ek, const char *key, size_t kl)
{
    db_index_t *ix = ek->ix;
    if (!ix->slots) return;
    size_t i = ix_find(ix, key, kl, hash_key(key, kl));
    ix_post_t *p = ix->slots[i].p;
    if (!p) return; /* its topic was dropped */
    /* Messages leave the store oldest first: what goes is at the head. */
    while (p->head < p->n && p->e[p->head].phys <= ek->m->phys) {
        p->head++;
        ix->entries--;
    }
    if (p->head == p->n) {
        ix_del_slot(ix, i);
        post_free(p);
    }
}

void rmq__db_index_forget(db_broker_t *b, const db_msg_t *m)
{
    if (!b->index) return;
    each_key_t ek = {.fn = forget_one, .ix = b->index};
    for_each_key(m, &ek);
}

void rmq__db_index_drop_topic(db_broker_t *b, const char *topic)
{
    db_index_t *ix = b->index;
    if (!ix || !ix->slots) return;
    /* A topic name has no '#' (Validators.VALID_PATTERN_STR), so "topic#" is its keys alone. */
    size_t tl = strlen(topic), dropped = 0;
    for (size_t i = 0; i <= ix->mask;) {
        ix_post_t *p = ix->slots[i].p;
        if (p && p->klen > tl && p->key[tl] == '#' && memcmp(p->key, topic, tl) == 0) {
            ix->entries -= p->n - p->head;
            ix_del_slot(ix, i); /* another key may move into slot i: look at it again */
            post_free(p);
            dropped++;
            continue;
        }
        i++;
    }
    rmq_dbg(RMQ_DBG_BROKER, DB_LOG, "%s: index forgot topic %s (%zu keys)", b->name, topic,
            dropped);
}

void rmq__db_index_free(db_broker_t *b)
{
    db_index_t *ix = b->index;
    if (!ix) return;
    for (size_t i = 0; ix->slots && i <= ix->mask; i++)
        if (ix->slots[i].p) post_free(ix->slots[i].p);
    free(ix->slots);
    free(ix);
    b->index = NULL;
}

size_t rmq__db_index_entries(const db_broker_t *b)
{
    return b->index ? b->index->entries : 0;
}

/* ---- QUERY_MESSAGE --------------------------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int rmq__db_index_query(const db_broker_t *b, const char *topic, const char *key, int max,
                        int64_t begin, int64_t end, int64_t *out)
{
    if (!b->index) return 0;
    char buf[512], *heap;
    size_t tl = strlen(topic), kl = strlen(key);
    const char *k = build_key(buf, sizeof(buf), topic, tl, key, kl, &heap);
    ix_post_t *p = ix_get(b->index, k, tl + 1 + kl);
    free(heap);
    if (!p) return 0;
    /* IndexFile.selectPhyOffset: newest first, inside [begin, end], at most max ... Entries
     * below the oldest retained message are gone from the store (normally forgotten already;
     * not when a message was damaged in place and no longer names its keys). */
    int64_t oldest = b->log_n ? b->log[b->log_head]->phys : b->next_phys;
    int n = 0;
    for (size_t i = p->n; i > p->head && n < max; i--) {
        const ix_ent_t *e = &p->e[i - 1];
        if (e->phys < oldest) break;
        if (e->store_ts >= begin && e->store_ts <= end) out[n++] = e->phys;
    }
    /* ... answered in commit-log order (DefaultMessageStore.queryMessage sorts them). */
    qsort(out, (size_t)n, sizeof(out[0]), cmp_i64);
    return n;
}

/* A required header field, or an answer as Java's header decoding gives (NULL / -1). */
static const char *need_str(rmq_conn_t *conn, const rmq_cmd_t *req, const char *key)
{
    const char *v = rmq__cmd_ext(req, key);
    if (!v) {
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "org.apache.rocketmq.remoting.exception.RemotingCommandException: the custom "
                 "field <%s> is null",
                 key);
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
    }
    return v;
}

static int need_i64(rmq_conn_t *conn, const rmq_cmd_t *req, const char *key, int64_t *out)
{
    if (!need_str(conn, req, key)) return -1;
    if (rmq__cmd_ext_i64(req, key, out)) {
        char msg[200];
        snprintf(msg, sizeof(msg), "java.lang.NumberFormatException: bad value of <%s>", key);
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
        return -1;
    }
    return 0;
}

/* QueryMessageProcessor.queryMessage + DefaultMessageStore.queryMessage. */
static void h_query_message(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = (db_broker_t *)node;
    int64_t max_num, begin, end;
    const char *topic = need_str(conn, req, "topic");
    if (!topic) return;
    const char *key = need_str(conn, req, "key");
    if (!key || need_i64(conn, req, "maxNum", &max_num) ||
        need_i64(conn, req, "beginTimestamp", &begin) || need_i64(conn, req, "endTimestamp", &end))
        return;
    const char *uniq = rmq__cmd_ext(req, "_UNIQUE_KEY_QUERY"); /* MixAll.UNIQUE_MSG_QUERY_FLAG */
    if (uniq && !strcmp(uniq, "true")) max_num = DEFAULT_QUERY_MAX_NUM;
    if (max_num > MAX_MSGS_NUM_BATCH) max_num = MAX_MSGS_NUM_BATCH;

    int64_t found[MAX_MSGS_NUM_BATCH];
    int nf =
        rmq__db_index_query(b, topic, key, (int)(max_num > 0 ? max_num : 0), begin, end, found);
    db_index_t *ix = b->index;

    rmq_buf_t body;
    rmq__buf_init(&body);
    for (int i = 0; i < nf; i++) {
        const db_msg_t *m = rmq__db_find_phys(b, found[i]);
        if (m) rmq__buf_append(&body, m->data, m->size);
    }
    if (req->flag & RMQ_FLAG_ONEWAY) {
        rmq__buf_free(&body);
        return;
    }
    rmq_cmd_t resp;
    rmq__cmd_init_response(&resp, req, body.len ? RMQ_RESP_SUCCESS : RMQ_RESP_QUERY_NOT_FOUND,
                           body.len ? NULL : "can not find message, maybe time range not correct");
    /* DefaultMessageStore.queryMessage takes the index's last update only from a query that
     * found offsets: QUERY_NOT_FOUND says 0 and 0. */
    rmq__cmd_set_ext_i64(&resp, "indexLastUpdateTimestamp", nf ? ix->last_ts : 0);
    rmq__cmd_set_ext_i64(&resp, "indexLastUpdatePhyoffset", nf ? ix->last_phys : 0);
    if (body.len) {
        resp.body = body.data;
        resp.body_len = body.len;
    }
    rmq__db_reply(conn, &resp);
    resp.body = NULL; /* ours: freed below */
    resp.body_len = 0;
    rmq__cmd_free(&resp);
    rmq__buf_free(&body);
}

/* ---- VIEW_MESSAGE_BY_ID ---------------------------------------------------------------------- */

/* QueryMessageProcessor.viewMessageById: the stored message at a commit-log offset. */
static void h_view_by_id(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = (db_broker_t *)node;
    int64_t off;
    if (need_i64(conn, req, "offset", &off)) return;
    const db_msg_t *m = rmq__db_find_phys(b, off);
    if (!m) {
        char msg[100];
        snprintf(msg, sizeof(msg), "can not find message by the offset, %lld", (long long)off);
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
        return;
    }
    rmq_buf_t o = {m->data, m->size, m->size};
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
}

void rmq__db_index_install(db_broker_t *b)
{
    rmq__db_set_handler(&b->node, RMQ_REQ_QUERY_MESSAGE, h_query_message);
    rmq__db_set_handler(&b->node, RMQ_REQ_VIEW_MESSAGE_BY_ID, h_view_by_id);
}
