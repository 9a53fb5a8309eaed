/*
 * devbroker_store.c -- the development broker's in-memory store: topics, per-queue
 * offset-indexed rings of stored messages, the commit log order (physical offsets, the byte
 * cap that drops the oldest messages), delayed messages (delay levels), and the synchronous
 * replication of a master's topics and messages to its slaves (--slaves).
 *
 * Ownership: a broker's store owns one reference on every retained message; a PULL response
 * being written holds one more per message (rmq__db_msg_release drops it). Dropping the oldest
 * message moves its queue's min offset; a message in flight stays alive until written. Every
 * message attached joins the message index (devbroker_index.c) and leaves it when dropped.
 * Above the store, only the pull's long polling hears of a new message: through b->arriving,
 * so that the store calls nothing above it.
 * Threads: the broker thread only.
 */
#include "devbroker_int.h"
#include "protocol/message.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- replication to slaves (--slaves) ------------------------------------------------------- */

/* A master's slaves take every topic it creates and every message it stores at once, with the
 * same queue offsets (devbroker_slave.c). */
static void slaves_topic(db_broker_t *b, const db_topic_t *t)
{
    rmq_devbroker_t *db = b->node.db;
    for (int i = 0; i < db->n_brokers; i++) {
        db_broker_t *s = db->brokers[i];
        if (s->master == b) rmq__db_topic_create(s, t->name, t->read_q, t->write_q, t->perm);
    }
}

static void slaves_store(db_broker_t *b, const db_topic_t *t, const db_msg_in_t *in)
{
    rmq_devbroker_t *db = b->node.db;
    for (int i = 0; i < db->n_brokers; i++) {
        db_broker_t *s = db->brokers[i];
        if (s->master != b) continue;
        db_topic_t *st = rmq__db_topic_get(s, t->name);
        char err[256];
        if (!st || !rmq__db_store(s, st, in, err, sizeof(err)))
            rmq_log_warn(DB_LOG, "%s: slave %lld did not take a message of %s", s->name,
                         (long long)s->id, t->name);
    }
}

/* ---- topics and queues ----------------------------------------------------------------------- */

db_topic_t *rmq__db_topic_get(db_broker_t *b, const char *name)
{
    return rmq__dbmap_get(&b->topics, name);
}

db_queue_t *rmq__db_queue(db_topic_t *t, int qid)
{
    if (qid < 0 || qid >= t->nq) return NULL;
    return t->queues[qid];
}

static void topic_ensure(db_topic_t *t, int n)
{
    if (n <= t->nq) return;
    t->queues = realloc(t->queues, sizeof(*t->queues) * (size_t)n);
    if (!t->queues) abort();
    for (int i = t->nq; i < n; i++) {
        db_queue_t *q = rmq__xcalloc(1, sizeof(*q));
        q->topic = t;
        q->id = i;
        t->queues[i] = q;
    }
    t->nq = n;
}

db_topic_t *rmq__db_topic_create(db_broker_t *b, const char *name, int read_q, int write_q,
                                 int perm)
{
    db_topic_t *t = rmq__db_topic_get(b, name);
    if (read_q <= 0) read_q = b->node.db->default_queues;
    if (write_q <= 0) write_q = read_q;
    if (!t) {
        t = rmq__xcalloc(1, sizeof(*t));
        t->name = rmq__xstrdup(name);
        rmq__dbmap_put(&b->topics, name, t);
        rmq_dbg(RMQ_DBG_BROKER, DB_LOG, "%s: topic %s created with %d/%d queues", b->name, name,
                read_q, write_q);
    }
    t->read_q = read_q;
    t->write_q = write_q;
    t->perm = perm;
    topic_ensure(t, read_q > write_q ? read_q : write_q);
    b->data_version++;
    b->topics_dirty = 1;
    if (!b->master) slaves_topic(b, t);
    return t;
}

/* The i-th retained message of q (0 = the oldest). */
static db_msg_t *qat(const db_queue_t *q, size_t i)
{
    return q->ring[(q->head + i) % q->cap];
}

/* Index of the first retained message with qoff >= off (q->n when none). */
static size_t qlower(const db_queue_t *q, int64_t off)
{
    size_t lo = 0, hi = q->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (qat(q, mid)->qoff < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

db_msg_t *rmq__db_qget(const db_queue_t *q, int64_t off)
{
    if (q->n == 0 || off < q->min_off || off >= rmq__db_qmax(q)) return NULL;
    if (!q->gaps) return qat(q, (size_t)(off - q->min_off));
    size_t i = qlower(q, off);
    return i < q->n && qat(q, i)->qoff == off ? qat(q, i) : NULL;
}

db_msg_t *rmq__db_qnext(const db_queue_t *q, int64_t off)
{
    if (q->n == 0 || off >= rmq__db_qmax(q)) return NULL;
    if (off <= q->min_off) return qat(q, 0);
    if (!q->gaps) return qat(q, (size_t)(off - q->min_off));
    size_t i = qlower(q, off);
    return i < q->n ? qat(q, i) : NULL;
}

static void ring_push(db_msg_t ***ring, size_t *cap, size_t *head, size_t *n, db_msg_t *m)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        db_msg_t **r = rmq__xmalloc(sizeof(*r) * nc);
        for (size_t i = 0; i < *n; i++)
            r[i] = (*ring)[(*head + i) % *cap];
        free(*ring);
        *ring = r;
        *cap = nc;
        *head = 0;
    }
    (*ring)[(*head + *n) % *cap] = m;
    (*n)++;
}

static void chunk_unref(db_chunk_t *c)
{
    if (--c->refs == 0) free(c);
}

void rmq__db_msg_release(db_msg_t *m)
{
    if (--m->refs == 0) chunk_unref(m->chunk); /* m lives in its chunk */
}

/*
 * Fault in the pages of a new big chunk with one call: messages are copied into it one by one,
 * and a page fault per 4 KiB page costs more than the copy (a no-op on kernels before 5.14).
 */
static void prefault(char *p, size_t n)
{
#ifdef MADV_POPULATE_WRITE
    static long pg;
    if (n < 64 * 1024) return;
    if (!pg) pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return;
    uintptr_t a = ((uintptr_t)p + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
    uintptr_t e = ((uintptr_t)p + n) & ~((uintptr_t)pg - 1);
    if (e > a) (void)madvise((void *)a, e - a, MADV_POPULATE_WRITE);
#else
    (void)p;
    (void)n;
#endif
}

/*
 * Messages' data fill a chunk from the start (neighbours stay contiguous: one buffer for a
 * pull); their db_msg_t are carved from its end, which lowers c->cap, so no allocation per
 * message. A chunk's nominal size is c->cap rounded up to 8 KiB.
 */
#define MSG_HDR ((sizeof(db_msg_t) + 7) & ~(size_t)7)

db_msg_t *rmq__db_msg_alloc(db_queue_t *q, size_t size)
{
    db_chunk_t *c = q->cur;
    size_t need = size + MSG_HDR + 8; /* + alignment of the header below the data */
    if (!c || c->cap - c->used < need) {
        /* Small queues start small: 8 KiB, doubling up to DB_CHUNK_SIZE. */
        size_t cap = c ? ((c->cap + 8191) & ~(size_t)8191) * 2 : 8192;
        if (cap > DB_CHUNK_SIZE) cap = DB_CHUNK_SIZE;
        if (cap < need) cap = (need + 7) & ~(size_t)7;
        if (c) chunk_unref(c);
        c = rmq__xmalloc(sizeof(*c) + cap);
        prefault(c->data, cap);
        c->refs = 1;
        c->cap = cap;
        c->used = 0;
        q->cur = c;
    }
    c->cap = ((c->cap & ~(size_t)7) - MSG_HDR); /* data (c->used) never reaches it: see need */
    db_msg_t *m = (db_msg_t *)(void *)(c->data + c->cap);
    memset(m, 0, sizeof(*m));
    m->refs = 1;
    m->chunk = c;
    m->data = c->data + c->used;
    m->size = (uint32_t)size;
    m->q = q;
    c->used += size;
    c->refs++;
    return m;
}

int64_t rmq__db_search_time(const db_queue_t *q, int64_t ts)
{
    if (q->n == 0) return 0;
    size_t lo = 0, hi = q->n - 1;
    const db_msg_t *first = qat(q, 0);
    const db_msg_t *last = qat(q, q->n - 1);
    if (ts <= first->store_ts) return first->qoff;
    if (ts >= last->store_ts) return last->qoff;
    /* Largest index with store_ts <= ts. */
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        if (qat(q, mid)->store_ts <= ts)
            lo = mid;
        else
            hi = mid - 1;
    }
    const db_msg_t *left = qat(q, lo);
    if (left->store_ts == ts) {
        /* The first of equal timestamps. */
        while (lo > 0 && qat(q, lo - 1)->store_ts == ts)
            lo--;
        return qat(q, lo)->qoff;
    }
    const db_msg_t *right = lo + 1 < q->n ? qat(q, lo + 1) : NULL;
    if (!right) return left->qoff;
    return (ts - left->store_ts) <= (right->store_ts - ts) ? left->qoff : right->qoff;
}

/* Drop the oldest messages while the broker holds more than max_bytes (keep at least one). */
static void evict(db_broker_t *b)
{
    int64_t max = b->node.db->max_bytes;
    while (b->bytes > max && b->log_n > 1) {
        db_msg_t *m = b->log[b->log_head];
        b->log_head = (b->log_head + 1) % b->log_cap;
        b->log_n--;
        db_queue_t *q = m->q;
        /* Per-queue order equals commit-log order, so m is the head of its queue. */
        if (q->n && q->ring[q->head] == m) {
            q->head = (q->head + 1) % q->cap;
            q->n--;
            q->min_off = q->n ? qat(q, 0)->qoff : q->max_off;
        }
        b->bytes -= m->size;
        rmq__db_index_forget(b, m);
        rmq__db_msg_release(m);
    }
}

db_msg_t *rmq__db_store(db_broker_t *b, db_topic_t *t, const db_msg_in_t *in, char *errstr,
                        size_t errstr_size)
{
    db_queue_t *q = rmq__db_queue(t, in->queue_id);
    if (!q) {
        rmq__seterr(errstr, errstr_size, "queueId %d is illegal for topic %s", in->queue_id,
                    t->name);
        return NULL;
    }
    rmq_msg_t mm;
    memset(&mm, 0, sizeof(mm));
    mm.topic = t->name;
    mm.topic_len = (uint32_t)strlen(t->name);
    mm.body = in->body;
    mm.body_len = (uint32_t)in->body_len;
    mm.props = in->props;
    mm.props_len = (uint32_t)in->props_len;
    mm.queue_id = in->queue_id;
    mm.flag = in->flag;
    mm.sys_flag = in->sys_flag & ~(RMQ_SYSFLAG_BORNHOST_V6 | RMQ_SYSFLAG_STOREHOST_V6);
    if (in->born_ip_len == 16) mm.sys_flag |= RMQ_SYSFLAG_BORNHOST_V6;
    mm.queue_offset = rmq__db_qmax(q);
    mm.commit_log_offset = b->next_phys;
    mm.born_timestamp = in->born_ts;
    memcpy(mm.born_host, in->born_host, (size_t)in->born_ip_len);
    mm.born_port = in->born_port;
    mm.store_timestamp = rmq__now_ms();
    memcpy(mm.store_host, b->node.store_ip, 4);
    mm.store_port = b->node.port;
    mm.reconsume_times = in->reconsume;
    size_t size = rmq__msg_stored_size(&mm);
    if (in->props_len > 32767 || mm.topic_len > 127) {
        rmq__seterr(errstr, errstr_size, "the message's %s is too long",
                    in->props_len > 32767 ? "properties string" : "topic");
        return NULL;
    }
    db_msg_t *m = rmq__db_msg_alloc(q, size);
    /* Encode in place: the buffer already has exactly the room the encoder reserves. */
    rmq_buf_t out = {m->data, 0, size};
    int rc = rmq__msg_encode_stored(&out, &mm);
    if (rc || out.data != m->data || out.len != size) {
        if (out.data != m->data) abort(); /* the encoder reallocated: cannot happen */
        rmq__db_msg_release(m);
        rmq__seterr(errstr, errstr_size, "cannot encode the message: %s", rmq_err_str(rc));
        return NULL;
    }
    m->qoff = mm.queue_offset;
    m->phys = mm.commit_log_offset;
    m->store_ts = mm.store_timestamp;
    uint32_t tl = 0;
    const char *tag = rmq__props_find(in->props, in->props_len, "TAGS", 4, &tl);
    if (tag && tl) {
        m->has_tag = 1;
        m->tagcode = rmq_java_hash(tag, tl);
    }
    if (b->log_fd >= 0) rmq__db_file_append(b, m);
    rmq__db_attach(b, m);
    rmq__db_stats_on_store(b, (int64_t)m->size);
    if (b->arriving) b->arriving(b, q, m);
    if (!b->master) slaves_store(b, t, in);
    return m;
}

void rmq__db_attach(db_broker_t *b, db_msg_t *m)
{
    db_queue_t *q = m->q;
    b->next_phys = m->phys + m->size;
    b->bytes += m->size;
    if (m->qoff > q->max_off) q->gaps = 1; /* replayed from a --store log with a gap */
    if (q->n == 0 && q->max_off == 0) q->min_off = m->qoff;
    q->max_off = m->qoff + 1;
    ring_push(&q->ring, &q->cap, &q->head, &q->n, m);
    ring_push(&b->log, &b->log_cap, &b->log_head, &b->log_n, m);
    q->topic->sent++;
    rmq__db_index_add(b, m);
    evict(b);
}

/* ---- delayed messages ------------------------------------------------------------------------ */

static void delay_arm(db_broker_t *b);

static void delay_fire(uv_timer_t *timer)
{
    db_broker_t *b = timer->data;
    int64_t now = rmq__mono_ms();
    while (b->delayed && b->delayed->due_ms <= now) {
        db_delayed_t *d = b->delayed;
        b->delayed = d->next;
        db_topic_t *t = rmq__db_topic_get(b, d->topic);
        if (!t) t = rmq__db_topic_create(b, d->topic, 1, 1, 6);
        db_msg_in_t in = {.topic = d->topic,
                          .queue_id = d->queue_id,
                          .flag = d->flag,
                          .sys_flag = d->sys_flag,
                          .reconsume = d->reconsume,
                          .born_ts = d->born_ts,
                          .born_host = d->born_host,
                          .born_ip_len = d->born_ip_len,
                          .born_port = d->born_port,
                          .body = d->body,
                          .body_len = d->body_len,
                          .props = d->props,
                          .props_len = d->props_len};
        char err[256];
        if (!rmq__db_store(b, t, &in, err, sizeof(err)))
            rmq_log_warn(DB_LOG, "%s: delayed message for %s dropped: %s", b->name, d->topic, err);
        free(d);
    }
    delay_arm(b);
}

static void delay_arm(db_broker_t *b)
{
    if (!b->delayed || uv_is_closing((uv_handle_t *)&b->delay_timer)) return;
    int64_t wait = b->delayed->due_ms - rmq__mono_ms();
    uv_timer_start(&b->delay_timer, delay_fire, (uint64_t)(wait > 0 ? wait : 0), 0);
}

void rmq__db_store_delayed(db_broker_t *b, const db_msg_in_t *in, int64_t delay_ms)
{
    size_t tl = strlen(in->topic);
    db_delayed_t *d = rmq__xcalloc(1, sizeof(*d) + tl + 1 + in->body_len + in->props_len + 2);
    char *p = (char *)(d + 1);
    d->topic = p;
    memcpy(p, in->topic, tl + 1);
    p += tl + 1;
    d->body = p;
    if (in->body_len) memcpy(p, in->body, in->body_len);
    p += in->body_len;
    d->props = p;
    if (in->props_len) memcpy(p, in->props, in->props_len);
    d->body_len = in->body_len;
    d->props_len = in->props_len;
    d->queue_id = in->queue_id;
    d->flag = in->flag;
    d->sys_flag = in->sys_flag;
    d->reconsume = in->reconsume;
    d->born_ts = in->born_ts;
    memcpy(d->born_host, in->born_host, (size_t)in->born_ip_len);
    d->born_ip_len = in->born_ip_len;
    d->born_port = in->born_port;
    d->due_ms = rmq__mono_ms() + delay_ms;
    db_delayed_t **pp = &b->delayed;
    while (*pp && (*pp)->due_ms <= d->due_ms)
        pp = &(*pp)->next;
    d->next = *pp;
    *pp = d;
    delay_arm(b);
}

/* ---- life cycle
 * ---------------------------------------------------------------------------------- */

void rmq__db_broker_store_init(db_broker_t *b)
{
    /* TBW102: the auto-create key topic (perm 7 like the real default topic). */
    int q = b->node.db->default_queues;
    rmq__db_topic_create(b, "TBW102", q, q, 7);
}

static void free_topic(void *v)
{
    db_topic_t *t = v;
    for (int i = 0; i < t->nq; i++) {
        db_queue_t *q = t->queues[i];
        free(q->ring); /* messages are released through the commit log */
        if (q->cur) chunk_unref(q->cur);
        free(q);
    }
    free(t->queues);
    free(t->name);
    free(t);
}

void rmq__db_topic_delete(db_broker_t *b, db_topic_t *t)
{
    /* Pulls parked on it are answered first (TOPIC_NOT_EXIST once it is out of the table);
     * its keys are never answered again by QUERY_MESSAGE. */
    rmq__dbmap_del(&b->topics, t->name);
    rmq__db_index_drop_topic(b, t->name);
    for (int i = 0; i < t->nq; i++)
        if (b->arriving) b->arriving(b, t->queues[i], NULL);
    /* Its messages leave the commit log order; the store's reference on each goes with it. */
    size_t kept = 0;
    db_msg_t **log = rmq__xmalloc(sizeof(*log) * (b->log_n ? b->log_n : 1));
    for (size_t i = 0; i < b->log_n; i++) {
        db_msg_t *m = b->log[(b->log_head + i) % b->log_cap];
        if (m->q->topic == t) {
            b->bytes -= m->size;
            rmq__db_msg_release(m);
        } else {
            log[kept++] = m;
        }
    }
    free(b->log);
    b->log = log;
    b->log_cap = b->log_n ? b->log_n : 1;
    b->log_head = 0;
    b->log_n = kept;
    free_topic(t);
    b->data_version++;
    b->topics_dirty = 1;
}

void rmq__db_broker_store_free(db_broker_t *b)
{
    rmq__db_stats_free(b); /* the counters the store keeps (rmq__db_stats_on_store) and the rest */
    for (size_t i = 0; i < b->log_n; i++)
        rmq__db_msg_release(b->log[(b->log_head + i) % b->log_cap]);
    free(b->log);
    b->log = NULL;
    b->log_n = 0;
    rmq__db_index_free(b);
    rmq__dbmap_free(&b->topics, free_topic);
    for (db_delayed_t *d = b->delayed, *n; d; d = n) {
        n = d->next;
        free(d);
    }
    b->delayed = NULL;
}
