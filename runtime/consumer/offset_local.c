/*
 * offset_local.c -- the BROADCASTING offset store (LocalFileOffsetStore, PROTOCOL.md 6.16): the
 * table of offsets.json kept in memory, and its writes done off the loop thread.
 *
 * The table holds every entry the file had at start plus every offset persisted since, in
 * insertion order (the file's entry order follows it, offset_file.h). Only this process writes
 * the file (its path holds the client id), so the table is what the file holds once the writes
 * queued so far are done: READ_FROM_STORE looks an offset up here instead of reading the file on
 * the loop thread.
 *
 * persistAll: nothing at all while no queue is owned (LocalFileOffsetStore.persistAll returns at
 * once for an empty set: a consumer that never reached a broker must not wipe the file); else
 * the owned queues' offsets go into the table and the whole table is written. Java 4.9.4 writes
 * the owned queues only, which drops from the file the queues not owned at that moment (a
 * broker briefly out of the route, a topic unsubscribed for one run); later Java
 * (LocalFileOffsetStore.persistAll reading the file back first) keeps them, and so does this.
 *
 * Writes: the encoded table goes to a libuv worker (uv_queue_work) that runs the
 * rmq__offset_file_write sequence (.tmp written and fsynced, previous file to .bak, rename), so
 * a slow or stuck disk never stalls the loop. One write at a time: a snapshot made while one is
 * in flight waits as "next", and a newer one replaces it, so an older snapshot never lands after
 * a newer one. A queued work request keeps the loop alive, so the write made at shutdown
 * finishes before rmq__consumer_run returns.
 *
 * Ownership: the store belongs to the consumer (c->local); the snapshot buffers belong to the
 * store, the one in flight is read by the worker until its after-callback runs.
 * Threads: loop thread, except write_work (a libuv worker: reads w->path and w->inflight only).
 * rmq__local_offsets_load runs on the consumer's thread before its loop runs.
 */
#include "consumer_int.h"

#include "offset_file.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct rmq_local_offsets {
    rmq_consumer_t *c;
    char *path;                /* offsets.json */
    rmq_offset_entry_t *e;     /* the file's table, insertion order; strings owned */
    int n, cap;
    uv_work_t req;
    int busy;                  /* req queued or running */
    rmq_buf_t inflight;        /* the snapshot being written (read by the worker) */
    rmq_buf_t next;            /* the newest snapshot waiting for the worker, when has_next */
    int has_next;
    int n_inflight;            /* entries in the snapshot being written (for the log) */
    int n_next;
    int rc;                    /* result of the last write (worker -> after-callback) */
    char err[512];
};

int rmq__local_offsets_load(rmq_consumer_t *c, char *errstr, size_t errstr_size)
{
    rmq_local_offsets_t *w = rmq__xcalloc(1, sizeof(*w));
    rmq_buf_t b;
    rmq__buf_init(&b);
    rmq__buf_init(&w->inflight);
    rmq__buf_init(&w->next);
    int rc = rmq__offset_file_path(c->conf->local_offset_store_dir, c->client_id, c->group, &b);
    if (rc == 0) rc = rmq__buf_append(&b, "", 1);
    if (rc) {
        rmq__buf_free(&b);
        free(w);
        rmq__seterr(errstr, errstr_size, "out of memory");
        return rc;
    }
    w->c = c;
    w->path = b.data;
    /* Blocking reads are fine here: this runs before the consumer's loop does (nothing waits on
     * it yet), as LocalFileOffsetStore.load() runs in DefaultMQPushConsumerImpl.start(). */
    rc = rmq__offset_file_load(w->path, &w->e, &w->n, errstr, errstr_size);
    if (rc) {
        free(w->path);
        free(w);
        return rc;
    }
    w->cap = w->n;
    c->local = w;
    rmq_log_info("offset", "local offset store %s: %d offset(s)", w->path, w->n);
    return 0;
}

static rmq_offset_entry_t *find(rmq_local_offsets_t *w, const rmq_mq_t *mq)
{
    for (int i = 0; i < w->n; i++)
        if (!rmq__mq_cmp(&w->e[i].mq, mq)) return &w->e[i];
    return NULL;
}

int64_t rmq__local_offsets_read(rmq_consumer_t *c, const rmq_mq_t *mq)
{
    const rmq_offset_entry_t *e = c->local ? find(c->local, mq) : NULL;
    return e ? e->offset : -1;
}

void rmq__local_offsets_set(rmq_consumer_t *c, const rmq_mq_t *mq, int64_t off)
{
    rmq_local_offsets_t *w = c->local;
    if (!w || off < 0) return;
    rmq_offset_entry_t *e = find(w, mq);
    if (!e) {
        if (w->n == w->cap) {
            w->cap = w->cap ? w->cap * 2 : 16;
            w->e = realloc(w->e, sizeof(*w->e) * (size_t)w->cap);
            if (!w->e) abort();
        }
        e = &w->e[w->n++];
        e->mq.topic = rmq__xstrdup(mq->topic);
        e->mq.broker_name = rmq__xstrdup(mq->broker_name);
        e->mq.queue_id = mq->queue_id;
    }
    e->offset = off;
}

static void write_after(uv_work_t *req, int status);

/* Worker thread: the blocking write sequence. Touches w->path, w->inflight, w->rc, w->err. */
static void write_work(uv_work_t *req)
{
    rmq_local_offsets_t *w = req->data;
    w->rc = rmq__offset_file_write(w->path, w->inflight.data, w->inflight.len, w->err,
                                   sizeof(w->err));
}

/* Hand w->next to the worker. */
static void write_start(rmq_consumer_t *c)
{
    rmq_local_offsets_t *w = c->local;
    rmq_buf_t t = w->inflight;
    w->inflight = w->next;
    w->next = t;
    w->next.len = 0;
    w->n_inflight = w->n_next;
    w->has_next = 0;
    w->req.data = w;
    int rc = uv_queue_work(&c->loop, &w->req, write_work, write_after);
    if (rc) {
        rmq_log_error("offset", "cannot persist offsets to %s: %s", w->path, uv_strerror(rc));
        return;
    }
    w->busy = 1;
}

static void write_after(uv_work_t *req, int status)
{
    rmq_local_offsets_t *w = req->data;
    rmq_consumer_t *c = w->c;
    w->busy = 0;
    if (status)
        rmq_log_error("offset", "cannot persist offsets to %s: %s", w->path, uv_strerror(status));
    else if (w->rc)
        rmq_log_error("offset", "cannot persist offsets: %s", w->err);
    else
        rmq_dbg(RMQ_DBG_OFFSET, "offset", "persisted %d offset(s) to %s", w->n_inflight,
                w->path);
    if (w->has_next) write_start(c);
}

void rmq__local_offsets_persist_all(rmq_consumer_t *c)
{
    rmq_local_offsets_t *w = c->local;
    if (!w || !c->queues) return; /* LocalFileOffsetStore.persistAll: empty set, no write */
    for (rmq_qent_t *q = c->queues; q; q = q->next)
        if (q->offset >= 0) rmq__local_offsets_set(c, &q->mq, q->offset);
    w->next.len = 0;
    if (rmq__offset_file_encode(w->e, w->n, &w->next)) {
        rmq_log_error("offset", "cannot persist offsets to %s: out of memory", w->path);
        return;
    }
    w->n_next = w->n;
    w->has_next = 1;
    if (!w->busy) write_start(c);
}

void rmq__local_offsets_free(rmq_consumer_t *c)
{
    rmq_local_offsets_t *w = c->local;
    if (!w) return;
    rmq__offset_file_free(w->e, w->n);
    rmq__buf_free(&w->inflight);
    rmq__buf_free(&w->next);
    free(w->path);
    free(w);
    c->local = NULL;
}
