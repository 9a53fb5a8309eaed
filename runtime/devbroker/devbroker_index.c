/*
 * devbroker_index.c -- the development broker's message index and the message queries it
 * serves: QUERY_MESSAGE (mqadmin queryMsgByKey, queryMsgByUniqueKey, the dashboard's message
 * search) and VIEW_MESSAGE_BY_ID (mqadmin queryMsgById: a commit-log offset decoded from an
 * offsetMsgId).
 *
 * What is indexed is what Java's IndexService.buildIndex indexes: for every stored message, its
 * UNIQ_KEY and each of its KEYS (split on MessageConst.KEY_SEPARATOR, " ", empty parts skipped),
 * each under "topic#key" (IndexService.buildKey); rolled-back transactional messages are not.
 * An entry is a message's commit-log offset, store timestamp and the key's hash, laid out as
 * Java's IndexFile lays them (see struct db_index). A query walks the key's chain from the
 * newest entry, keeps those inside [beginTimestamp, endTimestamp] up to maxNum
 * (IndexService.queryOffset: at most maxMsgsNumBatch, 64; a unique-key query always asks
 * defaultQueryMaxNum, 32), and answers the stored messages in commit-log order
 * (DefaultMessageStore.queryMessage), or QUERY_NOT_FOUND with Java's remark. Unlike Java, whose
 * index keeps timestamps in seconds from its file's first entry and answers every message whose
 * key has the same hash (its client filters them), timestamps are exact to the millisecond and
 * only messages that carry the key in the topic asked are answered.
 *
 * Life of the index: it lives in memory beside the messages it points at. Every message the
 * store attaches is indexed (rmq__db_attach: a SEND, a delayed or retried message coming due,
 * a slave's copy, and, with --store, each message read back from the commit log at start), so
 * the index is rebuilt from the commit log at open rather than kept in a file of its own: the
 * recovery reads and parses every message anyway, a rebuilt index cannot disagree with the
 * log after a kill -9, and the rebuild happens in rmq__devbroker_start before the broker
 * thread serves anything. A message dropped from the store (--max-bytes) is dropped from the
 * index (rmq__db_index_forget); after rmq__db_index_drop_topic, the keys a deleted topic had
 * are never answered again, and their entries go with their messages.
 *
 * Ownership: each broker owns its index (b->index), freed with its store.
 * Threads: the broker thread (and rmq__devbroker_start before the thread runs).
 */
#include "devbroker_int.h"
#include "protocol/message.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MSGS_NUM_BATCH 64    /* MessageStoreConfig.maxMsgsNumBatch */
#define DEFAULT_QUERY_MAX_NUM 32 /* MessageStoreConfig.defaultQueryMaxNum */
#define KEY_SEPARATOR ' '        /* MessageConst.KEY_SEPARATOR */
#define SYSFLAG_TX_ROLLBACK 0xC  /* MessageSysFlag.TRANSACTION_ROLLBACK_TYPE */
#define MIN_SLOTS 1024

/* One indexed key of one message (IndexFile's 20-byte entry, with the timestamp whole). */
typedef struct ix_ent {
    int64_t phys, store_ts;
    uint32_t hash; /* 32 bits of the key's hash; its slot is hash & mask */
    uint32_t prev; /* how many entries back the previous one of its slot is; 0: none */
} ix_ent_t;

/*
 * The layout of Java's IndexFile, in memory: entries are appended in commit-log order to a ring
 * (entry number seq lives at ring[seq & (cap - 1)]; [tail, head) are live), and each slot of a
 * hash table holds the newest entry whose key hashes there (seq + 1; 0: none), each entry the
 * previous one of its slot. A key is its 32-bit hash: a query walks its slot's chain from the
 * newest entry and reads the message of each entry with the same hash to keep only those that
 * do carry the key in the topic asked (Java leaves that to its client). Messages leave the store
 * oldest first, so forgetting one only moves the tail; a chain ends at the tail.
 */
struct db_index {
    ix_ent_t *ring;
    size_t cap; /* a power of two */
    uint64_t tail, head;
    uint64_t *slots;
    size_t mask;       /* slots: mask + 1, a power of two, at least the live entries */
    db_map_t dropped;  /* topic -> uint64_t: its entries below that seq are forgotten */
    int64_t last_phys; /* IndexHeader.endPhyOffset: the last message a key was indexed for */
    int64_t last_ts;   /* IndexHeader.endTimestamp: its store timestamp */
};

static db_index_t *index_of(db_broker_t *b)
{
    if (!b->index) b->index = rmq__xcalloc(1, sizeof(*b->index));
    return b->index;
}

static uint32_t hash_key(const char *topic, size_t tl, const char *key, size_t kl)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a over "topic#key" (IndexService.buildKey) */
    for (size_t i = 0; i < tl; i++)
        h = (h ^ (unsigned char)topic[i]) * 1099511628211ull;
    h = (h ^ (unsigned char)'#') * 1099511628211ull;
    for (size_t i = 0; i < kl; i++)
        h = (h ^ (unsigned char)key[i]) * 1099511628211ull;
    /* splitmix64's finalizer: the table takes the low bits, where FNV mixes least */
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
    return (uint32_t)(h ^ (h >> 32));
}

static ix_ent_t *ent(const db_index_t *ix, uint64_t seq)
{
    return &ix->ring[seq & (ix->cap - 1)];
}

/* Put entry seq at the head of its slot's chain. */
static void link_ent(db_index_t *ix, uint64_t seq)
{
    ix_ent_t *e = ent(ix, seq);
    uint64_t *slot = &ix->slots[e->hash & ix->mask];
    uint64_t dist = *slot ? seq - (*slot - 1) : 0;
    e->prev = dist <= UINT32_MAX ? (uint32_t)dist : 0;
    *slot = seq + 1;
}

static void grow(db_index_t *ix)
{
    uint64_t live = ix->head - ix->tail;
    if (live == ix->cap) {
        size_t cap = ix->cap ? ix->cap * 2 : MIN_SLOTS;
        ix_ent_t *ring = rmq__xmalloc(cap * sizeof(*ring));
        for (uint64_t seq = ix->tail; seq < ix->head; seq++)
            ring[seq & (cap - 1)] = *ent(ix, seq);
        free(ix->ring);
        ix->ring = ring;
        ix->cap = cap;
    }
    if (!ix->slots || live > ix->mask) { /* more entries than slots: twice the slots */
        size_t n = ix->slots ? (ix->mask + 1) * 2 : MIN_SLOTS;
        free(ix->slots);
        ix->slots = rmq__xcalloc(n, sizeof(*ix->slots));
        ix->mask = n - 1;
        for (uint64_t seq = ix->tail; seq < ix->head; seq++)
            link_ent(ix, seq);
    }
}

typedef void (*key_fn)(db_index_t *ix, const db_msg_t *m, const char *topic, size_t tl,
                       const char *key, size_t kl, void *ud);

/* Call fn for the UNIQ_KEY and each of the KEYS of stored message v (IndexService.buildIndex:
 * KEYS split on MessageConst.KEY_SEPARATOR, empty parts skipped). */
static void each_key(const db_stored_t *v, key_fn fn, db_index_t *ix, const db_msg_t *m, void *ud)
{
    uint32_t ul = 0, kl = 0;
    const char *uniq = rmq__props_find(v->props, v->props_len, "UNIQ_KEY", 8, &ul);
    if (uniq) fn(ix, m, v->topic, v->topic_len, uniq, ul, ud);
    const char *keys = rmq__props_find(v->props, v->props_len, "KEYS", 4, &kl);
    for (size_t i = 0; keys && i < kl;) {
        size_t j = i;
        while (j < kl && keys[j] != KEY_SEPARATOR)
            j++;
        if (j > i) fn(ix, m, v->topic, v->topic_len, keys + i, j - i, ud);
        i = j + 1;
    }
}

static void add_key(db_index_t *ix, const db_msg_t *m, const char *topic, size_t tl,
                    const char *key, size_t kl, void *ud)
{
    grow(ix);
    uint64_t seq = ix->head++;
    ix_ent_t *e = ent(ix, seq);
    e->phys = m->phys;
    e->store_ts = m->store_ts;
    e->hash = hash_key(topic, tl, key, kl);
    link_ent(ix, seq);
    *(int *)ud = 1;
}

void rmq__db_index_add(db_broker_t *b, const db_msg_t *m)
{
    db_stored_t v;
    if (rmq__db_stored_parse(m, &v)) return;
    if ((v.sys_flag & SYSFLAG_TX_ROLLBACK) == SYSFLAG_TX_ROLLBACK) return;
    db_index_t *ix = index_of(b);
    int added = 0;
    each_key(&v, add_key, ix, m, &added);
    if (added) {
        ix->last_phys = m->phys;
        ix->last_ts = m->store_ts;
    }
}

void rmq__db_index_forget(db_broker_t *b, const db_msg_t *m)
{
    db_index_t *ix = b->index;
    while (ix && ix->tail < ix->head && ent(ix, ix->tail)->phys <= m->phys)
        ix->tail++;
}

void rmq__db_index_drop_topic(db_broker_t *b, const char *topic)
{
    db_index_t *ix = index_of(b);
    uint64_t *at = rmq__dbmap_get(&ix->dropped, topic);
    if (!at) {
        at = rmq__xmalloc(sizeof(*at));
        rmq__dbmap_put(&ix->dropped, topic, at);
    }
    *at = ix->head; /* its entries so far are never answered again, and go with their messages */
    rmq_dbg(RMQ_DBG_BROKER, DB_LOG, "%s: index forgot topic %s", b->name, topic);
}

void rmq__db_index_free(db_broker_t *b)
{
    db_index_t *ix = b->index;
    if (!ix) return;
    free(ix->ring);
    free(ix->slots);
    rmq__dbmap_free(&ix->dropped, free);
    free(ix);
    b->index = NULL;
}

size_t rmq__db_index_entries(const db_broker_t *b)
{
    return b->index ? (size_t)(b->index->head - b->index->tail) : 0;
}

/* ---- QUERY_MESSAGE --------------------------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct key_match {
    const char *key;
    size_t kl;
    int found;
} key_match_t;

static void match_key(db_index_t *ix, const db_msg_t *m, const char *topic, size_t tl,
                      const char *key, size_t kl, void *ud)
{
    key_match_t *km = ud;
    if (kl == km->kl && memcmp(key, km->key, kl) == 0) km->found = 1;
}

/* The message at phys is in the store, in topic, and carries key. */
static int carries(const db_broker_t *b, int64_t phys, const char *topic, const char *key)
{
    const db_msg_t *m = rmq__db_find_phys((db_broker_t *)b, phys);
    db_stored_t v;
    if (!m || rmq__db_stored_parse(m, &v)) return 0;
    size_t tl = strlen(topic);
    if (v.topic_len != tl || memcmp(v.topic, topic, tl) != 0) return 0;
    key_match_t km = {key, strlen(key), 0};
    each_key(&v, match_key, NULL, m, &km);
    return km.found;
}

int rmq__db_index_query(const db_broker_t *b, const char *topic, const char *key, int max,
                        int64_t begin, int64_t end, int64_t *out)
{
    const db_index_t *ix = b->index;
    if (!ix || !ix->slots || max <= 0) return 0;
    uint32_t h = hash_key(topic, strlen(topic), key, strlen(key));
    uint64_t oldest = ix->tail;
    const uint64_t *dropped = rmq__dbmap_get(&ix->dropped, topic);
    if (dropped && *dropped > oldest) oldest = *dropped;
    /* IndexFile.selectPhyOffset: the slot's chain from the newest entry, those inside [begin,
     * end], at most max, until an entry older than begin ... */
    int n = 0;
    for (uint64_t v = ix->slots[h & ix->mask]; v && v - 1 >= oldest && n < max;) {
        uint64_t seq = v - 1;
        const ix_ent_t *e = ent(ix, seq);
        if (e->hash == h && e->store_ts >= begin && e->store_ts <= end) {
            int dup = 0; /* the same key twice in one message */
            for (int i = 0; i < n && !dup; i++)
                dup = out[i] == e->phys;
            if (!dup && carries(b, e->phys, topic, key)) out[n++] = e->phys;
        }
        if (e->store_ts < begin || !e->prev) break;
        v = seq - e->prev + 1;
    }
    /* ... answered in commit-log order (DefaultMessageStore.queryMessage sorts them). */
    qsort(out, (size_t)n, sizeof(out[0]), cmp_i64);
    return n;
}

/* ---- the handlers ---------------------------------------------------------------------------- */

/* QueryMessageProcessor.queryMessage + DefaultMessageStore.queryMessage. */
static void h_query_message(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = (db_broker_t *)node;
    db_hdr_t h = {conn, req, 0};
    const char *topic = rmq__db_hdr_str(&h, "topic");
    const char *key = rmq__db_hdr_str(&h, "key");
    int64_t max_num = rmq__db_hdr_i64(&h, "maxNum");
    int64_t begin = rmq__db_hdr_i64(&h, "beginTimestamp");
    int64_t end = rmq__db_hdr_i64(&h, "endTimestamp");
    if (h.failed) return;
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
     * found offsets: QUERY_NOT_FOUND says 0 and 0. In the order a 4.9.4 broker writes them. */
    rmq__cmd_set_ext_i64(&resp, "indexLastUpdatePhyoffset", nf ? ix->last_phys : 0);
    rmq__cmd_set_ext_i64(&resp, "indexLastUpdateTimestamp", nf ? ix->last_ts : 0);
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
    db_hdr_t h = {conn, req, 0};
    int64_t off = rmq__db_hdr_i64(&h, "offset");
    if (h.failed) return;
    const db_msg_t *m = rmq__db_find_phys(b, off);
    if (!m) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR,
                            "can not find message by the offset, %lld", (long long)off);
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
