/*
 * offset_file.c -- LocalFileOffsetStore file format and write/read sequence (offset_file.h).
 *
 * Ownership: see offset_file.h. Threads: no shared state.
 */
#include "offset_file.h"

#include "protocol/fjson.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int rmq__offset_file_path(const char *dir, const char *client_id, const char *group, rmq_buf_t *out)
{
    return rmq__buf_appendf(out, "%s/%s/%s/offsets.json", dir, client_id, group);
}

/* MessageQueue.hashCode(). */
static int32_t mq_hash(const rmq_mq_t *mq)
{
    uint32_t r = 1;
    r = 31 * r + (uint32_t)rmq_java_hash(mq->broker_name, strlen(mq->broker_name));
    r = 31 * r + (uint32_t)mq->queue_id;
    r = 31 * r + (uint32_t)rmq_java_hash(mq->topic, strlen(mq->topic));
    return (int32_t)r;
}

int rmq__offset_file_encode(const rmq_offset_entry_t *e, int n, rmq_buf_t *b)
{
    uint32_t cap = 16, *bucket;
    int *ord, i, j, rc = 0;
    /* ConcurrentHashMap: resized when the count reaches 0.75 * table size. */
    while ((uint64_t)n * 4 >= (uint64_t)cap * 3)
        cap <<= 1;
    ord = rmq__xmalloc(sizeof(int) * (size_t)(n ? n : 1));
    bucket = rmq__xmalloc(sizeof(uint32_t) * (size_t)(n ? n : 1));
    for (i = 0; i < n; i++) {
        uint32_t h = (uint32_t)mq_hash(&e[i].mq);
        bucket[i] = ((h ^ (h >> 16)) & 0x7fffffff) & (cap - 1);
        ord[i] = i;
    }
    for (i = 1; i < n; i++) { /* stable: insertion order within a bucket */
        int v = ord[i];
        for (j = i; j > 0 && bucket[ord[j - 1]] > bucket[v]; j--)
            ord[j] = ord[j - 1];
        ord[j] = v;
    }
    rc |= rmq__buf_append(b, "{\n\t\"offsetTable\":{", strlen("{\n\t\"offsetTable\":{"));
    for (i = 0; i < n; i++) {
        const rmq_offset_entry_t *x = &e[ord[i]];
        static const char open_entry[] = ",{\n\t\t\t\"brokerName\":";
        rc |= rmq__buf_append(b, open_entry + (i ? 0 : 1), sizeof(open_entry) - (i ? 1 : 2));
        rc |= rmq__buf_append_json_str(b, x->mq.broker_name, strlen(x->mq.broker_name));
        rc |= rmq__buf_appendf(b, ",\n\t\t\t\"queueId\":%d,\n\t\t\t\"topic\":", x->mq.queue_id);
        rc |= rmq__buf_append_json_str(b, x->mq.topic, strlen(x->mq.topic));
        rc |= rmq__buf_appendf(b, "\n\t\t}:%lld", (long long)x->offset);
    }
    rc |= rmq__buf_append(b, n ? "\n\t}\n}" : "}\n}", n ? 5 : 3);
    free(ord);
    free(bucket);
    return rc ? RMQ_ERR_NOMEM : RMQ_OK;
}

void rmq__offset_file_free(rmq_offset_entry_t *e, int n)
{
    int i;
    if (!e) return;
    for (i = 0; i < n; i++) {
        free(e[i].mq.topic);
        free(e[i].mq.broker_name);
    }
    free(e);
}

int rmq__offset_file_decode(const char *data, size_t len, rmq_offset_entry_t **out, int *n,
                            char *errstr, size_t errstr_size)
{
    char perr[128];
    rmq_fjdoc_t *d = rmq__fj_parse(data, len, perr, sizeof(perr));
    rmq_fj_t *root, *tab, *m;
    rmq_offset_entry_t *e = NULL;
    int k = 0;
    *out = NULL;
    *n = 0;
    if (!d) {
        rmq__seterr(errstr, errstr_size, "offsets file: %s", perr);
        return RMQ_ERR_BAD_JSON;
    }
    root = rmq__fj_root(d);
    tab = root && root->type == RMQ_FJ_OBJECT ? rmq__fj_get(root, "offsetTable") : NULL;
    if (!tab || tab->type == RMQ_FJ_NULL) { /* no table: no offsets */
        rmq__fj_free(d);
        if (!root || root->type != RMQ_FJ_OBJECT) {
            rmq__seterr(errstr, errstr_size, "offsets file: not an object");
            return RMQ_ERR_BAD_JSON;
        }
        return RMQ_OK;
    }
    if (tab->type != RMQ_FJ_OBJECT) {
        rmq__fj_free(d);
        rmq__seterr(errstr, errstr_size, "offsets file: offsetTable is not a map");
        return RMQ_ERR_BAD_JSON;
    }
    e = rmq__xcalloc(tab->len ? tab->len : 1, sizeof(*e));
    for (m = tab->child; m; m = m->next) {
        const rmq_fj_t *key = m->key;
        const char *t, *b;
        int32_t q;
        int64_t off;
        if (!key || key->type != RMQ_FJ_OBJECT || !(t = rmq__fj_get_str(key, "topic")) ||
            !(b = rmq__fj_get_str(key, "brokerName")) || rmq__fj_get_i32(key, "queueId", &q) ||
            rmq__fj_i64(m, &off)) {
            rmq__offset_file_free(e, k);
            rmq__fj_free(d);
            rmq__seterr(errstr, errstr_size,
                        "offsets file: entry %d is not {topic,brokerName,queueId}:offset", k + 1);
            return RMQ_ERR_BAD_JSON;
        }
        e[k].mq.topic = rmq__xstrdup(t);
        e[k].mq.broker_name = rmq__xstrdup(b);
        e[k].mq.queue_id = q;
        e[k].offset = off;
        k++;
    }
    rmq__fj_free(d);
    *out = e;
    *n = k;
    return RMQ_OK;
}

/* mkdir -p of the directory part of path. */
static int make_parents(const char *path)
{
    char *p = rmq__xstrdup(path), *s;
    for (s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, 0755) && errno != EEXIST) {
            free(p);
            return -1;
        }
        *s = '/';
    }
    free(p);
    return 0;
}

static int write_file(const char *path, const char *data, size_t len, int sync)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    size_t done = 0;
    if (fd < 0) return -1;
    while (done < len) {
        ssize_t w = write(fd, data + done, len - done);
        if (w < 0) {
            if (errno == EINTR) continue;
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    if (sync && fsync(fd)) {
        close(fd);
        return -1;
    }
    return close(fd);
}

/* Whole file into b; -1 with errno (ENOENT when missing). */
static int read_file(const char *path, rmq_buf_t *b)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char tmp[8192];
    if (fd < 0) return -1;
    for (;;) {
        ssize_t r = read(fd, tmp, sizeof(tmp));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
        if (r == 0) break;
        if (rmq__buf_append(b, tmp, (size_t)r)) {
            close(fd);
            errno = ENOMEM;
            return -1;
        }
    }
    close(fd);
    return 0;
}

int rmq__offset_file_write(const char *path, const char *data, size_t len, char *errstr,
                           size_t errstr_size)
{
    rmq_buf_t tmp, bak, prev;
    int rc = RMQ_OK;
    rmq__buf_init(&tmp);
    rmq__buf_init(&bak);
    rmq__buf_init(&prev);
    rmq__buf_appendf(&tmp, "%s.tmp", path);
    rmq__buf_appendf(&bak, "%s.bak", path);
    if (make_parents(path)) {
        rmq__seterr(errstr, errstr_size, "offsets file: cannot create the directory of %s: %s",
                    path, strerror(errno));
        rc = RMQ_ERR_IO;
    } else if (write_file(tmp.data, data, len, 1)) {
        rmq__seterr(errstr, errstr_size, "offsets file: cannot write %s: %s", tmp.data,
                    strerror(errno));
        rc = RMQ_ERR_IO;
    } else if (read_file(path, &prev) == 0 && write_file(bak.data, prev.data, prev.len, 0)) {
        rmq__seterr(errstr, errstr_size, "offsets file: cannot write %s: %s", bak.data,
                    strerror(errno));
        rc = RMQ_ERR_IO;
    } else if (rename(tmp.data, path)) {
        rmq__seterr(errstr, errstr_size, "offsets file: cannot rename %s to %s: %s", tmp.data, path,
                    strerror(errno));
        rc = RMQ_ERR_IO;
    }
    rmq__buf_free(&tmp);
    rmq__buf_free(&bak);
    rmq__buf_free(&prev);
    return rc;
}

int rmq__offset_file_load(const char *path, rmq_offset_entry_t **out, int *n, char *errstr,
                          size_t errstr_size)
{
    rmq_buf_t b, bakp;
    char err[256];
    int rc;
    *out = NULL;
    *n = 0;
    rmq__buf_init(&b);
    if (read_file(path, &b) == 0 && b.len > 0) {
        rc = rmq__offset_file_decode(b.data, b.len, out, n, err, sizeof(err));
        if (rc == RMQ_OK) {
            rmq__buf_free(&b);
            return RMQ_OK;
        }
        rmq_log_warn("offset", "readLocalOffset %s: %s; trying %s.bak", path, err, path);
    }
    b.len = 0;
    rmq__buf_init(&bakp);
    rmq__buf_appendf(&bakp, "%s.bak", path);
    rc = RMQ_OK;
    if (read_file(bakp.data, &b) == 0 && b.len > 0) {
        rc = rmq__offset_file_decode(b.data, b.len, out, n, err, sizeof(err));
        if (rc != RMQ_OK)
            rmq__seterr(errstr, errstr_size,
                        "readLocalOffset Exception, maybe fastjson version too low (%s: %s)",
                        bakp.data, err);
    }
    rmq__buf_free(&bakp);
    rmq__buf_free(&b);
    return rc;
}

size_t rmq_offset_file_encode(const rmq_offset_entry_t *e, int n, char *out, size_t out_size)
{
    rmq_buf_t b;
    rmq__buf_init(&b);
    rmq__offset_file_encode(e, n, &b);
    return rmq__buf_give(&b, out, out_size);
}

int rmq_offset_file_write(const char *path, const char *data, size_t len, char *errstr,
                          size_t errstr_size)
{
    return rmq__offset_file_write(path, data, len, errstr, errstr_size);
}

int rmq_offset_file_load(const char *path, rmq_offset_entry_t **out, int *n, char *errstr,
                         size_t errstr_size)
{
    return rmq__offset_file_load(path, out, n, errstr, errstr_size);
}

int rmq_offset_file_decode(const char *data, size_t len, rmq_offset_entry_t **out, int *n,
                           char *errstr, size_t errstr_size)
{
    return rmq__offset_file_decode(data, len, out, n, errstr, errstr_size);
}

void rmq_offset_file_free(rmq_offset_entry_t *e, int n)
{
    rmq__offset_file_free(e, n);
}
