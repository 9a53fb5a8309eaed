/*
 * fdwriter.h -- ordered, non-blocking writes to a file descriptor (standard output of `rmqlua
 * tail` and `rmqlua redrive`) from the loop thread: text is appended to a buffer and written by
 * the libuv thread pool (uv_fs_write), one write at a time, so the loop never waits on a slow
 * terminal or pipe. The caller watches rmq__fdw_queued() to stop producing while a lot is
 * waiting, and gets on_drain when everything has been written.
 *
 * Ownership: the writer owns its buffers; the caller owns the descriptor (never closed here).
 * Threads: the loop thread only.
 */
#ifndef RMQ_FDWRITER_H
#define RMQ_FDWRITER_H

#include "common.h"

#include <uv.h>

typedef struct rmq_fdw rmq_fdw_t;

rmq_fdw_t *rmq__fdw_new(uv_loop_t *loop, int fd);
/* The buffer to append to; call rmq__fdw_flush() afterwards. */
rmq_buf_t *rmq__fdw_buf(rmq_fdw_t *w);
void rmq__fdw_flush(rmq_fdw_t *w);
/* Bytes appended and not yet written. */
size_t rmq__fdw_queued(const rmq_fdw_t *w);
/* The first write error (a negative libuv code, e.g. UV_EPIPE when the reader of a pipe went
 * away), else 0. After an error further text is dropped. */
int rmq__fdw_error(const rmq_fdw_t *w);
/* cb runs on the loop each time everything queued has been written (or a write failed). */
void rmq__fdw_on_drain(rmq_fdw_t *w, void (*cb)(void *ud), void *ud);
/* Write what is queued, then free the writer and call cb (may be NULL): from the loop, or at
 * once when nothing is queued. */
void rmq__fdw_close(rmq_fdw_t *w, void (*cb)(void *ud), void *ud);

#endif
