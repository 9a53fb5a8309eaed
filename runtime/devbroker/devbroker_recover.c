/*
 * devbroker_recover.c -- a broker's --store directory opened, recovered and kept saved:
 * rmq__db_file_open reads the topic table, the subscription groups, the deleted topics, the
 * commit log (cut after a torn last message; messages of a topic deleted after them are
 * skipped) and the consumer offsets back; rmq__db_file_flush rewrites the tables that changed;
 * rmq__db_file_close saves them a last time. The files themselves: devbroker_file.c.
 *
 * Threads: the broker thread (and rmq__devbroker_start before the thread runs).
 */
#include "devbroker_int.h"
#include "protocol/message.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static int mkdir_p(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

static void topic_line(const char *key, void *val, void *ud)
{
    db_topic_t *t = val;
    rmq__buf_appendf(ud, "%s %d %d %d\n", t->name, t->read_q, t->write_q, t->perm);
}

static void offset_line(const char *key, void *val, void *ud)
{
    /* key is "group\001topic\001qid": written as is (groups and topics have no newline) */
    rmq__buf_appendf(ud, "%lld %s\n", (long long)*(int64_t *)val, key);
}

/* Rewrite DIR/<broker>/name from the lines fn writes for each entry of m, when *dirty. */
static void save_table(db_broker_t *b, const char *name, const db_map_t *m,
                       void (*fn)(const char *key, void *val, void *ud), int *dirty)
{
    if (!*dirty) return;
    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__dbmap_each(m, fn, &o);
    if (rmq__db_file_save(b, name, &o) == 0)
        *dirty = 0;
    else
        rmq_log_error(DB_LOG, "%s: cannot save %s in %s: %s", b->name, name, b->dir,
                      strerror(errno));
    rmq__buf_free(&o);
}

void rmq__db_file_flush(db_broker_t *b)
{
    if (b->log_fd < 0) return;
    save_table(b, "topics", &b->topics, topic_line, &b->topics_dirty);
    save_table(b, "offsets", &b->offsets, offset_line, &b->offsets_dirty);
    rmq__db_subgroups_flush(b);
}

void rmq__db_file_close(db_broker_t *b)
{
    if (b->log_fd < 0) return;
    rmq__db_file_flush(b);
    close(b->log_fd);
    b->log_fd = -1;
}

/* Rebuild one message read back from the commit log at file offset pos; NULL when it is not a
 * whole, valid message there (a torn write). */
static db_msg_t *recover_one(db_broker_t *b, const uint8_t *p, size_t avail, int64_t pos)
{
    if (avail < RMQ_MSG_MIN_SIZE) return NULL;
    uint32_t size = rmq__rd32(p);
    uint32_t magic = rmq__rd32(p + 4);
    if (size < RMQ_MSG_MIN_SIZE || size > avail ||
        (magic != RMQ_MSG_MAGIC_V1 && magic != RMQ_MSG_MAGIC_V2))
        return NULL;
    if ((int64_t)rmq__rd64(p + 28) != pos) return NULL;
    int32_t qid = (int32_t)rmq__rd32(p + 12);
    int64_t qoff = (int64_t)rmq__rd64(p + 20);
    int32_t sys_flag = (int32_t)rmq__rd32(p + 36);
    size_t q = 48 + ((sys_flag & RMQ_SYSFLAG_BORNHOST_V6) ? 20 : 8);
    int64_t store_ts = (int64_t)rmq__rd64(p + q);
    q += 8 + ((sys_flag & RMQ_SYSFLAG_STOREHOST_V6) ? 20 : 8) + 4 + 8;
    if (q + 4 > size) return NULL;
    uint32_t body_len = rmq__rd32(p + q);
    q += 4;
    if (q + body_len + 1 > size) return NULL;
    uint32_t crc = (uint32_t)(crc32(0, p + q, body_len) & 0x7FFFFFFF);
    if (crc != rmq__rd32(p + 8)) return NULL;
    q += body_len;
    size_t tl;
    if (magic == RMQ_MSG_MAGIC_V2) {
        tl = rmq__rd16(p + q);
        q += 2;
    } else
        tl = p[q++];
    if (q + tl + 2 > size) return NULL;
    char topic[32768];
    memcpy(topic, p + q, tl);
    topic[tl] = 0;
    q += tl;
    uint32_t pl = rmq__rd16(p + q);
    q += 2;
    if (q + pl != size) return NULL;
    if (rmq__db_deleted_skip(b, topic, pos)) return (db_msg_t *)-1; /* its topic was deleted */
    db_topic_t *t = rmq__db_topic_get(b, topic);
    if (!t) t = rmq__db_topic_create(b, topic, qid + 1, qid + 1, 6);
    db_queue_t *dq = rmq__db_queue(t, qid);
    if (!dq) {
        rmq__db_topic_create(b, topic, qid + 1 > t->read_q ? qid + 1 : t->read_q,
                             qid + 1 > t->write_q ? qid + 1 : t->write_q, t->perm);
        dq = rmq__db_queue(t, qid);
    }
    if (!dq) return NULL;
    if (dq->n == 0 && dq->max_off == 0 && qoff > 0) /* head trimmed */
        dq->min_off = dq->max_off = qoff;
    if (qoff < rmq__db_qmax(dq)) { /* above it: offsets were skipped (a gap) */
        rmq_log_warn(DB_LOG,
                     "%s: commit log offset %lld: queue offset %lld of %s/%d, expected "
                     "%lld; message skipped",
                     b->name, (long long)pos, (long long)qoff, topic, qid,
                     (long long)rmq__db_qmax(dq));
        return (db_msg_t *)-1;
    }
    db_msg_t *m = rmq__db_msg_alloc(dq, size);
    memcpy(m->data, p, size);
    m->qoff = qoff;
    m->phys = pos;
    m->store_ts = store_ts;
    uint32_t vl = 0;
    const char *tag = rmq__props_find((const char *)p + q, pl, "TAGS", 4, &vl);
    if (tag && vl) {
        m->has_tag = 1;
        m->tagcode = rmq_java_hash(tag, vl);
    }
    return m;
}

int rmq__db_file_open(db_broker_t *b, const char *root, char *errstr, size_t errstr_size)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", root, b->name);
    b->dir = rmq__xstrdup(path);
    if (mkdir_p(b->dir)) {
        rmq__seterr(errstr, errstr_size, "--store: cannot create %s: %s", b->dir, strerror(errno));
        return RMQ_ERR_IO;
    }
    /* Topics first: queue counts and permissions as they were. */
    size_t len;
    char *txt = rmq__db_file_read(b, "topics", &len);
    for (char *line = txt ? strtok(txt, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        char name[512];
        int rq, wq, perm;
        if (sscanf(line, "%511s %d %d %d", name, &rq, &wq, &perm) == 4)
            rmq__db_topic_create(b, name, rq > 0 ? rq : 1, wq > 0 ? wq : 1, perm);
    }
    free(txt);
    rmq__db_subgroups_load(b);
    rmq__db_deleted_load(b);

    rmq__db_file_path(b, "commitlog", path, sizeof(path));
    b->log_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (b->log_fd < 0) {
        rmq__seterr(errstr, errstr_size, "--store: cannot open %s: %s", path, strerror(errno));
        return RMQ_ERR_IO;
    }
    int64_t t0 = rmq__mono_ms();
    txt = rmq__db_file_read(b, "commitlog", &len);
    int64_t pos = 0, n = 0;
    while (txt && (size_t)pos < len) {
        db_msg_t *m = recover_one(b, (const uint8_t *)txt + pos, len - (size_t)pos, pos);
        if (!m) break;
        if (m == (db_msg_t *)-1) {
            pos += rmq__rd32(txt + pos);
            continue;
        }
        rmq__db_attach(b, m);
        pos += m->size;
        n++;
    }
    free(txt);
    b->next_phys = pos;
    if ((size_t)pos < len) {
        rmq_log_warn(DB_LOG, "%s: commit log cut at %lld (%zu torn bytes dropped)", b->name,
                     (long long)pos, len - (size_t)pos);
        if (ftruncate(b->log_fd, pos)) {
            rmq__seterr(errstr, errstr_size, "--store: cannot truncate %s: %s", path,
                        strerror(errno));
            return RMQ_ERR_IO;
        }
    }

    txt = rmq__db_file_read(b, "offsets", &len);
    for (char *line = txt ? strtok(txt, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        char *sp = strchr(line, ' ');
        if (!sp) continue;
        int64_t *v = rmq__xmalloc(sizeof(*v));
        *v = strtoll(line, NULL, 10);
        void *old = rmq__dbmap_put(&b->offsets, sp + 1, v);
        free(old);
    }
    free(txt);
    b->offsets_dirty = 0;
    b->topics_dirty = 1;
    rmq_log_info(DB_LOG,
                 "%s: recovered %lld messages (%lld bytes, %zu index entries) from %s in %lld ms",
                 b->name, (long long)n, (long long)pos, rmq__db_index_entries(b), b->dir,
                 (long long)(rmq__mono_ms() - t0));
    return 0;
}
