/*
 * fdwriter.c -- ordered writes to a descriptor through the libuv thread pool (fdwriter.h).
 *
 * Ownership: `pending` collects text; when no write is in flight it is swapped with `writing`,
 * whose bytes are lent to uv_fs_write until its callback (a short write continues from where it
 * stopped). The writer is freed after close once nothing is in flight.
 * Threads: the loop thread.
 */
#include "fdwriter.h"

#include <stdlib.h>

struct rmq_fdw {
    uv_loop_t *loop;
    int fd;
    rmq_buf_t pending, writing;
    size_t done; /* bytes of `writing` already written */
    uv_fs_t req;
    int busy;
    int err;
    int closing;
    void (*on_drain)(void *ud);
    void *drain_ud;
    void (*close_cb)(void *ud);
    void *close_ud;
};

rmq_fdw_t *rmq__fdw_new(uv_loop_t *loop, int fd)
{
    rmq_fdw_t *w = rmq__xcalloc(1, sizeof(*w));
    w->loop = loop;
    w->fd = fd;
    rmq__buf_init(&w->pending);
    rmq__buf_init(&w->writing);
    w->req.data = w;
    return w;
}

rmq_buf_t *rmq__fdw_buf(rmq_fdw_t *w)
{
    return &w->pending;
}

size_t rmq__fdw_queued(const rmq_fdw_t *w)
{
    return w->pending.len + (w->writing.len - w->done);
}

int rmq__fdw_error(const rmq_fdw_t *w)
{
    return w->err;
}

void rmq__fdw_on_drain(rmq_fdw_t *w, void (*cb)(void *ud), void *ud)
{
    w->on_drain = cb;
    w->drain_ud = ud;
}

static void finish(rmq_fdw_t *w)
{
    void (*cb)(void *) = w->close_cb;
    void *ud = w->close_ud;
    rmq__buf_free(&w->pending);
    rmq__buf_free(&w->writing);
    free(w);
    if (cb) cb(ud);
}

static void start(rmq_fdw_t *w);

static void on_write(uv_fs_t *req)
{
    rmq_fdw_t *w = req->data;
    ssize_t n = req->result;
    uv_fs_req_cleanup(req);
    w->busy = 0;
    if (n < 0) {
        if (!w->err) w->err = (int)n;
        w->pending.len = 0;
        w->writing.len = w->done = 0;
    } else {
        w->done += (size_t)n;
    }
    if (w->done >= w->writing.len) {
        w->writing.len = w->done = 0;
        if (w->err) w->pending.len = 0;
    }
    start(w);
    if (!w->busy) {
        if (w->closing) {
            finish(w);
            return;
        }
        if (w->on_drain) w->on_drain(w->drain_ud);
    }
}

static void start(rmq_fdw_t *w)
{
    if (w->busy || w->err) return;
    if (w->done >= w->writing.len) {
        if (w->pending.len == 0) return;
        rmq_buf_t t = w->writing;
        w->writing = w->pending;
        w->pending = t;
        w->pending.len = 0;
        w->done = 0;
    }
    uv_buf_t b = uv_buf_init(w->writing.data + w->done, (unsigned)(w->writing.len - w->done));
    int rc = uv_fs_write(w->loop, &w->req, w->fd, &b, 1, -1, on_write);
    if (rc) {
        w->err = rc;
        w->pending.len = 0;
        w->writing.len = w->done = 0;
        return;
    }
    w->busy = 1;
}

void rmq__fdw_flush(rmq_fdw_t *w)
{
    if (w->err) w->pending.len = 0;
    start(w);
}

void rmq__fdw_close(rmq_fdw_t *w, void (*cb)(void *ud), void *ud)
{
    w->closing = 1;
    w->close_cb = cb;
    w->close_ud = ud;
    start(w);
    if (!w->busy) finish(w);
}
