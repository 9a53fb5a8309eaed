/*
 * remoting.c -- the remoting transport (see remoting.h for the model and the contracts).
 *
 * Ownership: a transport owns its timer, its listener, its address table (client side), its
 * handler table and every connection object. A connection is reference counted: the transport
 * holds one reference from creation until its handle's close callback; rmq__conn_keep() adds
 * more; the object is freed at zero. Pending requests live in one transport-wide list sorted by
 * deadline (scanned by the one timer), in a per-connection list (failed together on close) and
 * in a hash by opaque (responses). Write requests own their encoded header (and the body, when
 * copied); lent buffers go back through the written callback.
 * Writes on an OPEN connection are coalesced: frames are encoded into the connection's open
 * batch (headers and copied bodies in one buffer, lent buffers as their own slices) and the
 * batch goes to libuv as one uv_write from the transport's idle handle (once per loop turn),
 * when it grows past BATCH_MAX_BYTES/BATCH_MAX_SEGS, or right before the connection closes.
 * A batch in flight holds a connection reference; its written callbacks run when it completes.
 * A connection may own a TLS session (tls.c; the "TLS" section below holds the hooks): reads go
 * through it into the framer, writes through it as ciphertext; it is freed with the handle.
 * Plain connections never touch it. With ACL keys, request_on signs each request (acl.c).
 * The pending requests, sending requests and replies, and dispatch are in remoting_request.c;
 * the listener and accepting in remoting_server.c; what the three share in remoting_int.h.
 * Threads: the loop thread of opts.loop only.
 */
#include "remoting_int.h"
#include "base/codes.h"
#include "dial.h"
#include "tls.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const state_names[] = {"WAITING", "CONNECTING", "OPEN", "CLOSING", "CLOSED"};

const char *rmq__conn_state_name(int state)
{
    if (state < 0 || state >= (int)RMQ_ARRAY_SIZE(state_names)) return "UNKNOWN";
    return state_names[state];
}

static void set_state(rmq_conn_t *c, int state)
{
    rmq_dbg(RMQ_DBG_REMOTING, c->t ? SUB(c->t) : "remoting", "connection %s%s: %s -> %s", c->addr,
            c->is_server ? " (accepted)" : "", rmq__conn_state_name(c->state),
            rmq__conn_state_name(state));
    c->state = state;
}

static void arm_timer(rmq_remoting_t *t, int64_t at);
static void conn_close(rmq_conn_t *c, int err, int pending_err, const char *why);

/* ---- connection objects ---------------------------------------------------------------------- */

rmq_conn_t *rmq__conn_keep(rmq_conn_t *c)
{
    c->refs++;
    return c;
}

static void batch_free(wbatch_t *b);

void rmq__conn_release(rmq_conn_t *c)
{
    if (--c->refs > 0) return;
    if (c->t) list_remove(&c->all);
    rmq__framer_reset(&c->framer);
    while (c->spare) {
        wbatch_t *b = c->spare;
        c->spare = b->next_spare;
        batch_free(b);
    }
    free(c);
}

int rmq__conn_state(const rmq_conn_t *c)
{
    return c->state;
}
const char *rmq__conn_peer(const rmq_conn_t *c)
{
    return c->addr;
}
int rmq__conn_is_server(const rmq_conn_t *c)
{
    return c->is_server;
}
size_t rmq__conn_pending(const rmq_conn_t *c)
{
    return c->npending;
}
void rmq__conn_set_ud(rmq_conn_t *c, void *ud)
{
    c->ud = ud;
}
void *rmq__conn_get_ud(const rmq_conn_t *c)
{
    return c->ud;
}
rmq_remoting_t *rmq__conn_transport(const rmq_conn_t *c)
{
    return c->t;
}

rmq_conn_t *rmq__remoting_conn_new(rmq_remoting_t *t, int is_server)
{
    rmq_conn_t *c = rmq__xcalloc(1, sizeof(*c));
    c->t = t;
    c->refs = 1; /* the transport's */
    c->is_server = is_server;
    c->state = is_server ? RMQ_CONN_CONNECTING : RMQ_CONN_WAITING; /* accepting / not started */
    list_init(&c->live);
    list_init(&c->pending);
    list_init(&c->queued);
    list_init(&c->dirty);
    list_push_back(&t->all_conns, &c->all);
    rmq__framer_init(&c->framer, t->opts.max_frame);
    return c;
}

static void on_handle_close(uv_handle_t *h);

/* ---- timer ----------------------------------------------------------------------------------- */

static void on_timer(uv_timer_t *tm);

static void arm_timer(rmq_remoting_t *t, int64_t at)
{
    if (t->destroying || t->in_scan) return; /* the scan re-arms when it ends */
    if (t->timer_at >= 0 && t->timer_at <= at) return;
    int64_t now = now_ms(t);
    t->timer_at = at;
    uv_timer_start(&t->timer, on_timer, at > now ? (uint64_t)(at - now) : 0, 0);
}

void rmq__remoting_arm_timer(rmq_remoting_t *t, int64_t at)
{
    arm_timer(t, at);
}

static int64_t conn_deadline(const rmq_remoting_t *t, const rmq_conn_t *c)
{
    if (c->doomed) return 0;
    switch (c->state) {
    case RMQ_CONN_WAITING:
    case RMQ_CONN_CONNECTING:
        return c->is_server ? -1 : c->deadline;
    case RMQ_CONN_OPEN:
        return t->opts.idle_timeout_ms > 0 ? c->last_io + t->opts.idle_timeout_ms : -1;
    default:
        return -1;
    }
}

static void rearm(rmq_remoting_t *t)
{
    int64_t at = -1;
    if (!list_empty(&t->pending))
        at = CONTAINER_OF(t->pending.next, pending_t, by_deadline)->deadline;
    for (link_t *l = t->conns.next; l != &t->conns; l = l->next) {
        int64_t d = conn_deadline(t, CONTAINER_OF(l, rmq_conn_t, live));
        if (d >= 0 && (at < 0 || d < at)) at = d;
    }
    t->timer_at = -1;
    uv_timer_stop(&t->timer);
    if (at >= 0) arm_timer(t, at);
}

static void start_connect(rmq_conn_t *c);
static void handle_closed(rmq_remoting_t *t);

/* One connection due for an action at now, or NULL. */
static rmq_conn_t *conn_due(rmq_remoting_t *t, int64_t now)
{
    for (link_t *l = t->conns.next; l != &t->conns; l = l->next) {
        rmq_conn_t *c = CONTAINER_OF(l, rmq_conn_t, live);
        int64_t d = conn_deadline(t, c);
        if (d >= 0 && d <= now) return c;
    }
    return NULL;
}

static void peer_failed(rmq_remoting_t *t, peer_t *p)
{
    int64_t delay = t->opts.reconnect_min_ms;
    for (int i = 0; i < p->fails && delay < t->opts.reconnect_max_ms; i++)
        delay *= 2;
    if (delay > t->opts.reconnect_max_ms) delay = t->opts.reconnect_max_ms;
    p->fails++;
    p->retry_at = now_ms(t) + delay;
}

static void on_timer(uv_timer_t *tm)
{
    rmq_remoting_t *t = tm->data;
    int64_t now = now_ms(t);
    char msg[256];
    t->in_scan = 1;
    t->timer_at = -1;
    /* Requests past their deadline. */
    while (!t->destroying && !list_empty(&t->pending)) {
        pending_t *p = CONTAINER_OF(t->pending.next, pending_t, by_deadline);
        if (p->deadline > now) break;
        rmq_conn_t *c = rmq__conn_keep(p->conn);
        int close_it = (p->flags & RMQ_REQF_SYNC) && t->opts.close_on_timeout > 0 &&
                       c->state < RMQ_CONN_CLOSING;
        snprintf(msg, sizeof msg, "%s(%d) opaque=%d to %s timed out after %lld ms (state %s)",
                 rmq_request_code_name(p->code) ? rmq_request_code_name(p->code) : "request",
                 p->code, p->opaque, c->addr, (long long)p->timeout_ms,
                 rmq__conn_state_name(c->state));
        rmq_log_warn(SUB(t), "%s", msg);
        t->st.timeouts++;
        rmq__remoting_pending_fail(t, p, RMQ_ERR_TIMEOUT, msg);
        if (close_it) conn_close(c, RMQ_ERR_TIMEOUT, RMQ_ERR_TRANSPORT, msg);
        rmq__conn_release(c);
    }
    /* Connections with something due: connect now, connect timeout, idle, deferred close. */
    rmq_conn_t *c;
    while (!t->destroying && (c = conn_due(t, now)) != NULL) {
        if (c->doomed) {
            conn_close(c, RMQ_ERR_TRANSPORT, RMQ_ERR_TRANSPORT, c->doom_why);
        } else if (c->state == RMQ_CONN_WAITING) {
            start_connect(c);
        } else if (c->state == RMQ_CONN_CONNECTING) {
            snprintf(msg, sizeof msg, "%s %s timed out after %lld ms",
                     c->tls ? "TLS handshake with" : "connect to", c->addr,
                     (long long)t->opts.connect_timeout_ms);
            rmq_log_warn(SUB(t), "%s", msg);
            c->connect_failed = 1;
            conn_close(c, RMQ_ERR_TRANSPORT, RMQ_ERR_TRANSPORT, msg);
        } else {
            snprintf(msg, sizeof msg, "connection %s idle for %lld ms", c->addr,
                     (long long)(now - c->last_io));
            rmq_log_info(SUB(t), "%s, closing it", msg);
            conn_close(c, RMQ_ERR_TRANSPORT, RMQ_ERR_TRANSPORT, msg);
        }
    }
    t->in_scan = 0;
    if (!t->destroying) rearm(t);
}

/* ---- writing --------------------------------------------------------------------------------- */

/* uv_write on c's socket, through its TLS session when it has one (no copy when plain). */
static int conn_write(rmq_conn_t *c, uv_write_t *req, const uv_buf_t *bufs, unsigned n,
                      uv_write_cb cb)
{
    if (RMQ_UNLIKELY(c->tls != NULL)) return rmq__tls_write(c->tls, req, bufs, n, cb);
    return uv_write(req, (uv_stream_t *)&c->tcp, bufs, n, cb);
}

/*
 * A uv_write on c (one frame, or a batch) completed with status: run its callbacks through
 * finish(arg, 0 or RMQ_ERR_TRANSPORT), close c when the write failed while it was OPEN, and drop
 * the reference the write held.
 */
static void write_ended(rmq_conn_t *c, int status, void (*finish)(void *arg, int status), void *arg)
{
    if (status < 0 && status != UV_ECANCELED && c->state == RMQ_CONN_OPEN) {
        char msg[200];
        snprintf(msg, sizeof msg, "write to %s failed: %s", c->addr, uv_strerror(status));
        rmq_log_warn(c->t ? SUB(c->t) : "remoting", "%s", msg);
        finish(arg, RMQ_ERR_TRANSPORT);
        conn_close(c, RMQ_ERR_TRANSPORT, RMQ_ERR_TRANSPORT, msg);
    } else {
        finish(arg, status < 0 ? RMQ_ERR_TRANSPORT : 0);
    }
    rmq__conn_release(c);
}

/* A uv_write on c failed synchronously (rc): c is closed at the next timer run. */
static void write_refused(rmq_conn_t *c, int rc)
{
    snprintf(c->doom_why, sizeof c->doom_why, "write failed: %s", uv_strerror(rc));
    rmq_log_warn(SUB(c->t), "write to %s failed: %s", c->addr, uv_strerror(rc));
    c->doomed = 1;
    arm_timer(c->t, 0);
}

static void wreq_done(wreq_t *w, int status)
{
    if (w->written) w->written(w->wud, status);
    rmq__buf_free(&w->hdr);
    free(w);
}

static void wreq_finish(void *w, int status)
{
    wreq_done(w, status);
}

static void on_write(uv_write_t *req, int status)
{
    wreq_t *w = CONTAINER_OF(req, wreq_t, req);
    write_ended(w->conn, status, wreq_finish, w);
}

/* Hand w to libuv; on a synchronous failure the connection is closed at the next timer run. */
static int wreq_issue(rmq_conn_t *c, wreq_t *w)
{
    int rc = conn_write(c, &w->req, w->bufs, w->nbufs, on_write);
    if (rc < 0) {
        write_refused(c, rc);
        return RMQ_ERR_TRANSPORT;
    }
    rmq__conn_keep(c);
    c->last_io = now_ms(c->t);
    for (unsigned i = 0; i < w->nbufs; i++)
        c->t->st.bytes_out += w->bufs[i].len;
    return 0;
}

static void batch_free(wbatch_t *b)
{
    rmq__buf_free(&b->data);
    free(b->segs);
    free(b->done);
    free(b->bufs);
    free(b);
}

/* Run the written callbacks of b, then keep it as c's spare or free it. */
static void batch_finish(rmq_conn_t *c, wbatch_t *b, int status)
{
    for (unsigned i = 0; i < b->ndone; i++)
        b->done[i].cb(b->done[i].ud, status);
    b->ndone = 0;
    b->nsegs = 0;
    b->data.len = 0;
    if (c->nspare < BATCH_SPARES && b->data.cap <= 2 * BATCH_MAX_BYTES) {
        /* A burst (thousands of queues' first pulls) filled it: do not keep that much. */
        if (b->data.cap > SPARE_MAX_BYTES) {
            rmq__buf_free(&b->data);
            rmq__buf_init(&b->data);
        }
        b->next_spare = c->spare;
        c->spare = b;
        c->nspare++;
    } else {
        batch_free(b);
    }
}

static void batch_written(void *b, int status)
{
    batch_finish(((wbatch_t *)b)->conn, b, status);
}

static void on_batch_write(uv_write_t *req, int status)
{
    wbatch_t *b = CONTAINER_OF(req, wbatch_t, req);
    write_ended(b->conn, status, batch_written, b);
}

/* Hand c's open batch to libuv (one uv_write); on a synchronous failure the connection is
 * closed at the next timer run. */
static void batch_flush(rmq_conn_t *c)
{
    wbatch_t *b = c->out;
    if (!b) return;
    c->out = NULL;
    list_remove(&c->dirty);
    if (b->bufcap < b->nsegs) {
        free(b->bufs);
        b->bufcap = b->nsegs < 64 ? 64 : b->nsegs;
        b->bufs = rmq__xmalloc(b->bufcap * sizeof(*b->bufs));
    }
    for (unsigned i = 0; i < b->nsegs; i++) {
        const wseg_t *sg = &b->segs[i];
        b->bufs[i] = uv_buf_init(sg->ext ? (char *)sg->ext : b->data.data + sg->off,
                                 (unsigned)sg->len);
    }
    int rc = conn_write(c, &b->req, b->bufs, b->nsegs, on_batch_write);
    if (rc < 0) {
        write_refused(c, rc);
        batch_finish(c, b, RMQ_ERR_TRANSPORT);
        return;
    }
    rmq__conn_keep(c);
}

static void on_flusher(uv_idle_t *h)
{
    rmq_remoting_t *t = h->data;
    while (!list_empty(&t->dirty))
        batch_flush(CONTAINER_OF(t->dirty.next, rmq_conn_t, dirty));
    uv_idle_stop(&t->flusher);
}

static wseg_t *batch_seg(wbatch_t *b)
{
    if (b->nsegs == b->segcap) {
        b->segcap = b->segcap ? 2 * b->segcap : 64;
        b->segs = realloc(b->segs, b->segcap * sizeof(*b->segs));
        if (!b->segs) abort();
    }
    return &b->segs[b->nsegs++];
}

/* Add [off, data.len) of b's own data as a slice (merged with a preceding own slice). */
static void batch_own(wbatch_t *b, size_t off)
{
    if (b->data.len == off) return;
    if (b->nsegs && !b->segs[b->nsegs - 1].ext &&
        b->segs[b->nsegs - 1].off + b->segs[b->nsegs - 1].len == off) {
        b->segs[b->nsegs - 1].len += b->data.len - off;
        return;
    }
    wseg_t *sg = batch_seg(b);
    sg->ext = NULL;
    sg->off = off;
    sg->len = b->data.len - off;
}

/*
 * Encode cmd's header into out, its frame length counting the body and every extra buffer;
 * copy: the body and the extra buffers follow it in out. *body_len gets that frame's body
 * length. Returns 0 or an error (out may hold part of the frame).
 */
static int encode_frame(const rmq_cmd_t *cmd, int copy, const uv_buf_t *extra, unsigned n_extra,
                        rmq_buf_t *out, size_t *body_len)
{
    rmq_cmd_t tmp = *cmd;
    for (unsigned i = 0; i < n_extra; i++)
        tmp.body_len += extra[i].len;
    *body_len = tmp.body_len;
    int rc = rmq__cmd_encode_header(&tmp, out);
    if (!rc && copy) {
        rc = rmq__buf_reserve(out, tmp.body_len);
        if (!rc && cmd->body_len) rc = rmq__buf_append(out, cmd->body, cmd->body_len);
        for (unsigned i = 0; !rc && i < n_extra; i++)
            rc = rmq__buf_append(out, extra[i].base, extra[i].len);
    }
    return rc;
}

/* OPEN: append the frame to c's open batch. Same contract as conn_send. */
static int batch_send(rmq_conn_t *c, const rmq_cmd_t *cmd, int copy, const uv_buf_t *extra,
                      unsigned n_extra, rmq_written_cb written, void *wud)
{
    rmq_remoting_t *t = c->t;
    wbatch_t *b = c->out;
    if (!b) {
        if (c->spare) {
            b = c->spare;
            c->spare = b->next_spare;
            c->nspare--;
        } else {
            b = rmq__xcalloc(1, sizeof(*b));
            rmq__buf_init(&b->data);
        }
        b->conn = c;
    }
    size_t start = b->data.len, body_len;
    int rc = encode_frame(cmd, copy, extra, n_extra, &b->data, &body_len);
    if (!rc && written && b->ndone == b->donecap) {
        b->donecap = b->donecap ? 2 * b->donecap : 16;
        b->done = realloc(b->done, b->donecap * sizeof(*b->done));
        if (!b->done) abort();
    }
    if (rc) {
        rmq_log_warn(SUB(t), "cannot encode %d for %s: %s", cmd->code, c->addr, rmq_err_str(rc));
        b->data.len = start;
        if (!c->out) batch_finish(c, b, 0);
        return rc;
    }
    batch_own(b, start);
    if (!copy) {
        if (cmd->body_len) {
            wseg_t *sg = batch_seg(b);
            sg->ext = (const char *)cmd->body;
            sg->len = cmd->body_len;
        }
        for (unsigned i = 0; i < n_extra; i++) {
            if (!extra[i].len) continue;
            wseg_t *sg = batch_seg(b);
            sg->ext = extra[i].base;
            sg->len = extra[i].len;
        }
    }
    if (written) {
        b->done[b->ndone].cb = written;
        b->done[b->ndone++].ud = wud;
    }
    t->st.bytes_out += (b->data.len - start) + (copy ? 0 : body_len);
    c->last_io = now_ms(t);
    if (!c->out) {
        c->out = b;
        list_push_back(&t->dirty, &c->dirty);
        if (!uv_is_active((uv_handle_t *)&t->flusher)) uv_idle_start(&t->flusher, on_flusher);
    }
    if (b->data.len >= BATCH_MAX_BYTES || b->nsegs >= BATCH_MAX_SEGS) batch_flush(c);
    return 0;
}

/*
 * Encode cmd and send it (OPEN) or queue it (WAITING/CONNECTING). copy: the body goes into the
 * transport's buffer; else body and extra are lent until written runs. Returns 0 or an error
 * (nothing sent, written never runs).
 */
int rmq__remoting_conn_send(rmq_conn_t *c, const rmq_cmd_t *cmd, int awaited, int copy,
                            const uv_buf_t *extra, unsigned n_extra, rmq_written_cb written,
                            void *wud)
{
    if (c->state >= RMQ_CONN_CLOSING || !c->t || c->t->destroying) return RMQ_ERR_TRANSPORT;
    if (c->state == RMQ_CONN_OPEN) return batch_send(c, cmd, copy, extra, n_extra, written, wud);
    unsigned nb = copy ? 1 : 1 + (cmd->body_len ? 1 : 0) + n_extra;
    wreq_t *w = rmq__xcalloc(1, sizeof(*w) + nb * sizeof(uv_buf_t));
    w->conn = c;
    w->written = written;
    w->wud = wud;
    w->awaited = awaited;
    w->opaque = cmd->opaque;
    rmq__buf_init(&w->hdr);
    list_init(&w->link);
    size_t body_len;
    int rc = encode_frame(cmd, copy, extra, n_extra, &w->hdr, &body_len);
    if (rc) {
        rmq_log_warn(SUB(c->t), "cannot encode %d for %s: %s", cmd->code, c->addr, rmq_err_str(rc));
        rmq__buf_free(&w->hdr);
        free(w);
        return rc;
    }
    w->bufs[w->nbufs++] = uv_buf_init(w->hdr.data, (unsigned)w->hdr.len);
    if (!copy) {
        if (cmd->body_len)
            w->bufs[w->nbufs++] = uv_buf_init((char *)cmd->body, (unsigned)cmd->body_len);
        for (unsigned i = 0; i < n_extra; i++)
            w->bufs[w->nbufs++] = extra[i];
    }
    if (c->state == RMQ_CONN_OPEN) {
        rc = wreq_issue(c, w);
        if (rc) {
            rmq__buf_free(&w->hdr);
            free(w);
        }
        return rc;
    }
    list_push_back(&c->queued, &w->link);
    return 0;
}

/* ---- closing --------------------------------------------------------------------------------- */

static void ns_advance(rmq_remoting_t *t, const char *addr)
{
    if (t->n_ns > 1 && strcmp(t->ns[t->ns_idx], addr) == 0) {
        t->ns_idx = (t->ns_idx + 1) % t->n_ns;
        rmq_log_info(SUB(t), "name server %s unavailable, switching to %s", addr, t->ns[t->ns_idx]);
    }
}

/*
 * Close c: CLOSING, handle closed, queued writes dropped, pending requests failed with
 * pending_err, on_close(err). Callbacks run from here; c stays allocated until they are done.
 */
static void conn_close(rmq_conn_t *c, int err, int pending_err, const char *why)
{
    rmq_remoting_t *t = c->t;
    char msg[400];
    if (c->state >= RMQ_CONN_CLOSING) return;
    rmq__conn_keep(c);
    int was = c->state;
    batch_flush(c); /* what was sent before the close goes out first */
    set_state(c, RMQ_CONN_CLOSING);
    list_remove(&c->live);
    t->st.closes++;
    if (c->connect_failed) t->st.connect_failures++;
    if (c->peer) {
        peer_t *p = c->peer;
        p->conn = NULL;
        c->peer = NULL;
        if (c->connect_failed) peer_failed(t, p);
        if (err != RMQ_ERR_DESTROYED && (c->connect_failed || was == RMQ_CONN_OPEN))
            ns_advance(t, p->addr);
        if (!p->fails && !p->unanswered && !p->hinted) { /* nothing to remember about it */
            list_remove(&p->link);
            free(p->addr);
            free(p);
        }
    }
    if (c->dial) rmq__dial_cancel(c->dial); /* on_dialed still runs */
    if (c->handle_inited) {
        if (was == RMQ_CONN_OPEN) uv_read_stop((uv_stream_t *)&c->tcp);
        uv_close((uv_handle_t *)&c->tcp, on_handle_close);
    }
    while (!list_empty(&c->queued)) {
        wreq_t *w = CONTAINER_OF(c->queued.next, wreq_t, link);
        list_remove(&w->link);
        wreq_done(w, RMQ_ERR_TRANSPORT);
    }
    snprintf(msg, sizeof msg, "connection to %s closed: %s", c->addr, why);
    while (!list_empty(&c->pending)) {
        pending_t *p = CONTAINER_OF(c->pending.next, pending_t, by_conn);
        rmq__remoting_pending_fail(t, p, pending_err, msg);
    }
    if (t->opts.on_close) t->opts.on_close(c, err, why, t->opts.ud);
    if (!c->handle_inited) {
        set_state(c, RMQ_CONN_CLOSED);
        c->refs--; /* the transport's reference (no close callback will come); ours remains */
    }
    rmq__conn_release(c);
}

void rmq__remoting_conn_close(rmq_conn_t *c, int err, int pending_err, const char *why)
{
    conn_close(c, err, pending_err, why);
}

void rmq__conn_close(rmq_conn_t *c, int err, const char *why)
{
    if (!c->t) return;
    conn_close(c, err, RMQ_ERR_TRANSPORT, why ? why : "closed");
}

static void transport_free(rmq_remoting_t *t)
{
    void (*cb)(void *) = t->destroy_cb;
    void *ud = t->destroy_ud;
    while (!list_empty(&t->all_conns)) {
        rmq_conn_t *c = CONTAINER_OF(t->all_conns.next, rmq_conn_t, all);
        list_remove(&c->all);
        c->t = NULL;
    }
    free(t->hash);
    rmq__tls_ctx_release(t->opts.tls_client);
    rmq__tls_ctx_release(t->opts.tls_server);
    free(t->acl_ak);
    free(t->acl_sk);
    free(t->acl_token);
    free(t);
    if (cb) cb(ud);
}

static void handle_closed(rmq_remoting_t *t)
{
    if (--t->handles == 0 && t->destroying) transport_free(t);
}

static void on_handle_close(uv_handle_t *h)
{
    rmq_conn_t *c = h->data;
    rmq_remoting_t *t = c->t;
    set_state(c, RMQ_CONN_CLOSED);
    rmq__framer_reset(&c->framer);
    rmq__tls_free(c->tls); /* every write callback has run */
    c->tls = NULL;
    rmq__conn_release(c); /* the transport's reference */
    handle_closed(t);
}

void rmq__remoting_plain_closed(uv_handle_t *h)
{
    handle_closed(h->data);
}

/* ---- reading and dispatch -------------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* A frame from c does not decode (err says why): c is closed. */
static void frame_malformed(rmq_conn_t *c, const char *err)
{
    char why[300];
    snprintf(why, sizeof why, "malformed frame: %s", err);
    rmq_log_error(SUB(c->t), "malformed frame from %s: %s; closing the connection", c->addr, err);
    c->t->st.malformed++;
    conn_close(c, RMQ_ERR_TRANSPORT, RMQ_ERR_TRANSPORT, why);
}

static void on_frame(void *ud, rmq_rbuf_t *frame)
{
    rmq_conn_t *c = ud;
    char err[200];
    rmq_cmd_t cmd;
    if (c->state != RMQ_CONN_OPEN || !c->t || c->t->destroying) {
        rmq__rbuf_release(frame);
        return;
    }
    int rc = rmq__cmd_decode(frame, &cmd, err, sizeof err);
    rmq__rbuf_release(frame);
    if (rc) {
        frame_malformed(c, err);
        return;
    }
    if (RMQ_UNLIKELY(rmq__log_debug & RMQ_DBG_REMOTING)) {
        char d[160];
        rmq__cmd_describe(&cmd, d, sizeof d);
        rmq_dbg(RMQ_DBG_REMOTING, SUB(c->t), "%s <- %s", c->addr, d);
    }
    if (RMQ_UNLIKELY(!c->answered)) {
        c->answered = 1;
        if (c->peer) c->peer->unanswered = 0;
    }
    rmq__remoting_dispatch(c, &cmd);
    rmq__cmd_free(&cmd);
}

/* Closes in a row, before any answer, after which a plain client is told the likely cause. */
#define UNANSWERED_HINT 3

/*
 * A plain client connection with requests in flight was closed by the server before any
 * answer. A server that requires TLS (tls.server.mode=enforcing) closes a connection whose
 * first bytes are not a TLS record without a word: after UNANSWERED_HINT such closes in a row,
 * say so once for the address.
 */
static void closed_unanswered(rmq_conn_t *c)
{
    peer_t *p = c->peer;
    if (c->is_server || c->tls || c->answered || !c->npending || !p) return;
    if (++p->unanswered < UNANSWERED_HINT || p->hinted) return;
    p->hinted = 1;
    rmq_log_warn(SUB(c->t),
                 "%s closed %d connections in a row before answering the first request: the "
                 "server may require TLS (use_tls = true), or refuse this client's address",
                 c->addr, p->unanswered);
}

/* ---- TLS (tls.c runs the protocol; these are a connection's hooks into it) ------------------- */

static void connected(rmq_conn_t *c);

static void tls_alloc(void *ud, char **base, size_t *len)
{
    rmq_conn_t *c = ud;
    rmq__framer_alloc(&c->framer, base, len);
}

/* Plaintext read into the framer's area (also a plain connection's first bytes on a TLS
 * listener). Returns non-zero once the connection is no longer OPEN. */
static int tls_commit(void *ud, char *base, size_t n)
{
    rmq_conn_t *c = ud;
    char err[200];
    if (c->state != RMQ_CONN_OPEN) return 1;
    int rc = rmq__framer_commit(&c->framer, base, n, on_frame, c, err, sizeof err);
    if (rc && c->state == RMQ_CONN_OPEN) frame_malformed(c, err);
    return c->state != RMQ_CONN_OPEN;
}

static int tls_established(void *ud)
{
    rmq_conn_t *c = ud;
    char d[96];
    rmq_dbg(RMQ_DBG_REMOTING, SUB(c->t), "connection %s%s: TLS established (%s)", c->addr,
            c->is_server ? " (accepted)" : "", rmq__tls_describe(c->tls, d, sizeof d));
    if (!c->is_server) connected(c); /* CONNECTING -> OPEN, queued requests go out */
    return c->state != RMQ_CONN_OPEN;
}

static const rmq_tls_io_t tls_io = {tls_alloc, tls_commit, tls_established};

/* The handshake failed: on the client side a failed connect (backoff, next name server). */
static void tls_failed(rmq_conn_t *c, const char *reason)
{
    char msg[700];
    snprintf(msg, sizeof msg, "TLS handshake %s %s failed: %s", c->is_server ? "from" : "with",
             c->addr, reason);
    rmq_log_warn(SUB(c->t), "%s", msg);
    if (!c->is_server) c->connect_failed = 1;
    conn_close(c, RMQ_ERR_TRANSPORT, RMQ_ERR_TRANSPORT, msg);
}

/* Client, TCP connected: start the handshake; the connection stays CONNECTING until it ends. */
static void tls_begin(rmq_conn_t *c)
{
    char err[512];
    c->tls = rmq__tls_new(c->t->opts.tls_client, (uv_stream_t *)&c->tcp, &tls_io, c, c->host, err,
                          sizeof err);
    if (!c->tls) {
        tls_failed(c, err);
        return;
    }
    int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (rc < 0) {
        tls_failed(c, uv_strerror(rc));
        return;
    }
    c->reading = 1;
    if (rmq__tls_start(c->tls, err, sizeof err)) tls_failed(c, err);
}

/* n bytes read on a TLS connection, or the first ones on a TLS listener's connection. */
static void tls_read(rmq_conn_t *c, size_t n, const uv_buf_t *buf)
{
    rmq_remoting_t *t = c->t;
    char err[512], why[600];
    c->last_io = now_ms(t);
    t->st.bytes_in += n;
    if (c->sniff) {
        /* NettyRemotingServer.TlsModeHandler: peek at the first byte. */
        c->sniff = 0;
        if ((unsigned char)buf->base[0] != RMQ_TLS_HANDSHAKE_MAGIC) {
            if (t->opts.tls_enforcing) {
                rmq_log_warn(SUB(t), "%s: plain connection refused, TLS is enforced", c->addr);
                conn_close(c, RMQ_ERR_TRANSPORT, RMQ_ERR_TRANSPORT,
                           "plain connection refused, TLS is enforced");
                return;
            }
            tls_commit(c, buf->base, n); /* plain: the bytes are in the framer's area already */
            return;
        }
        c->tls = rmq__tls_new(t->opts.tls_server, (uv_stream_t *)&c->tcp, &tls_io, c, NULL, err,
                              sizeof err);
        if (!c->tls) {
            tls_failed(c, err);
            return;
        }
    }
    if (rmq__tls_feed(c->tls, buf->base, n, err, sizeof err) == 0) return;
    if (!rmq__tls_established(c->tls)) {
        tls_failed(c, err);
        return;
    }
    snprintf(why, sizeof why, "TLS: %s", err);
    rmq_log_warn(SUB(t), "connection %s: %s; closing it", c->addr, why);
    conn_close(c, RMQ_ERR_TRANSPORT, RMQ_ERR_TRANSPORT, why);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    rmq_conn_t *c = h->data;
    char *base;
    size_t len;
    if (RMQ_UNLIKELY(c->tls != NULL))
        rmq__tls_read_buf(c->tls, &base, &len);
    else
        rmq__framer_alloc(&c->framer, &base, &len);
    buf->base = base;
    buf->len = len;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    rmq_conn_t *c = s->data;
    char err[200], why[300];
    if (nread == 0) return;
    if (!c->t || (c->state != RMQ_CONN_OPEN && !(c->tls && c->state == RMQ_CONN_CONNECTING)))
        return;
    rmq__conn_keep(c);
    if (RMQ_UNLIKELY((c->tls != NULL || c->sniff) && nread > 0)) {
        tls_read(c, (size_t)nread, buf);
    } else if (nread > 0) {
        c->last_io = now_ms(c->t);
        c->t->st.bytes_in += (uint64_t)nread;
        int rc =
            rmq__framer_commit(&c->framer, buf->base, (size_t)nread, on_frame, c, err, sizeof err);
        if (rc && c->state == RMQ_CONN_OPEN) frame_malformed(c, err);
    } else {
        if (nread == UV_EOF)
            snprintf(why, sizeof why, "closed by peer");
        else
            snprintf(why, sizeof why, "read failed: %s", uv_strerror((int)nread));
        if (RMQ_UNLIKELY(c->tls && !c->is_server && !rmq__tls_established(c->tls))) {
            char hint[400];
            snprintf(hint, sizeof hint, "%s before the handshake finished: it may not speak TLS "
                     "(use_tls = false for a plain server)",
                     nread == UV_EOF ? "closed by the server" : why);
            tls_failed(c, hint);
        } else {
            rmq_log_info(SUB(c->t), "connection %s %s", c->addr, why);
            closed_unanswered(c);
            conn_close(c, RMQ_ERR_TRANSPORT, RMQ_ERR_TRANSPORT, why);
        }
    }
    rmq__conn_release(c);
}

/* OPEN: start reading, write what was queued, tell the owner. */
static void conn_opened(rmq_conn_t *c)
{
    rmq_remoting_t *t = c->t;
    set_state(c, RMQ_CONN_OPEN);
    c->last_io = now_ms(t);
    uv_tcp_nodelay(&c->tcp, 1);
    int rc = c->reading ? 0 : uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    c->reading = 1;
    if (rc < 0) {
        char msg[200];
        snprintf(msg, sizeof msg, "read start failed: %s", uv_strerror(rc));
        conn_close(c, RMQ_ERR_TRANSPORT, RMQ_ERR_TRANSPORT, msg);
        return;
    }
    while (!list_empty(&c->queued) && c->state == RMQ_CONN_OPEN) {
        wreq_t *w = CONTAINER_OF(c->queued.next, wreq_t, link);
        list_remove(&w->link);
        pending_t *p = w->awaited ? rmq__remoting_pending_find(t, w->opaque) : NULL;
        if (w->awaited && (!p || p->conn != c)) {
            /* It timed out while the connection was being made: do not send it late. */
            rmq_dbg(RMQ_DBG_REMOTING, SUB(t),
                    "%s: request opaque=%d expired before connect, "
                    "not sent",
                    c->addr, w->opaque);
            wreq_done(w, RMQ_ERR_TIMEOUT);
            continue;
        }
        if (wreq_issue(c, w)) {
            wreq_done(w, RMQ_ERR_TRANSPORT);
            break;
        }
    }
    if (c->state == RMQ_CONN_OPEN && t->opts.idle_timeout_ms > 0)
        arm_timer(t, c->last_io + t->opts.idle_timeout_ms);
    if (c->state == RMQ_CONN_OPEN && t->opts.on_open) t->opts.on_open(c, t->opts.ud);
}

void rmq__remoting_conn_opened(rmq_conn_t *c)
{
    conn_opened(c);
}

/* ---- client connections ---------------------------------------------------------------------- */

int rmq__addr_split(const char *addr, char *host, size_t host_size, int *port)
{
    const char *colon, *hs, *he;
    if (!addr || !*addr) return RMQ_ERR_INVALID;
    if (addr[0] == '[') {
        he = strchr(addr, ']');
        if (!he || he[1] != ':') return RMQ_ERR_INVALID;
        hs = addr + 1;
        colon = he + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon) return RMQ_ERR_INVALID;
        hs = addr;
        he = colon;
    }
    size_t hl = (size_t)(he - hs);
    if (hl == 0 || hl >= host_size) return RMQ_ERR_INVALID;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end || p <= 0 || p > 65535) return RMQ_ERR_INVALID;
    memcpy(host, hs, hl);
    host[hl] = '\0';
    *port = (int)p;
    return 0;
}

/*
 * Split addr; a numeric host fills sa, a host name is left for conn_start to resolve.
 * Returns 0 or RMQ_ERR_INVALID with the reason in err.
 */
static int parse_addr(rmq_conn_t *c, const char *addr, char *err, size_t errsz)
{
    if (rmq__addr_split(addr, c->host, sizeof c->host, &c->port)) {
        rmq__seterr(err, errsz, "bad address \"%s\" (want host:port or [v6]:port)", addr);
        return RMQ_ERR_INVALID;
    }
    if (uv_ip4_addr(c->host, c->port, (struct sockaddr_in *)&c->sa) == 0) return 0;
    if (uv_ip6_addr(c->host, c->port, (struct sockaddr_in6 *)&c->sa) == 0) return 0;
    c->host_name = 1;
    return 0;
}

/* A client connection is up (TCP, and TLS when on): OPEN, backoff reset. */
static void connected(rmq_conn_t *c)
{
    if (c->peer) {
        c->peer->fails = 0;
        c->peer->retry_at = 0;
    }
    c->t->st.connects++;
    conn_opened(c);
}

static void on_connect(uv_connect_t *req, int status)
{
    rmq_conn_t *c = req->data;
    if (c->state != RMQ_CONN_CONNECTING) {
        rmq__conn_release(c); /* closed meanwhile (status is UV_ECANCELED) */
        return;
    }
    if (status < 0) {
        char msg[200];
        snprintf(msg, sizeof msg, "connect to %s failed: %s", c->addr, uv_strerror(status));
        rmq_log_warn(SUB(c->t), "%s", msg);
        c->connect_failed = 1;
        conn_close(c, RMQ_ERR_TRANSPORT, RMQ_ERR_TRANSPORT, msg);
    } else if (c->t->opts.tls_client) {
        tls_begin(c); /* OPEN (and the backoff reset) once the handshake finished */
    } else {
        connected(c);
    }
    rmq__conn_release(c);
}

/* Start the TCP connect to c->sa (on_connect holds a reference). Returns 0 or a libuv error. */
static int tcp_connect(rmq_conn_t *c)
{
    c->connect_req.data = c;
    int rc = uv_tcp_connect(&c->connect_req, &c->tcp, (struct sockaddr *)&c->sa, on_connect);
    if (rc == 0) rmq__conn_keep(c);
    return rc;
}

/* The host name's dial ended: adopt its connected socket, or close with its report. */
static void on_dialed(void *ud, int status, uv_os_sock_t fd, const char *report)
{
    rmq_conn_t *c = ud;
    rmq_remoting_t *t = c->t; /* alive: the dial counts as one of its handles */
    char why[200], msg[1024];
    c->dial = NULL;
    if (c->state == RMQ_CONN_CONNECTING && status == 0) {
        int rc = uv_tcp_open(&c->tcp, fd);
        if (rc < 0) {
            close(fd);
            snprintf(why, sizeof why, "%s", uv_strerror(rc));
            status = RMQ_ERR_TRANSPORT;
            report = why;
        } else if (t->opts.tls_client) {
            tls_begin(c); /* OPEN (and the backoff reset) once the handshake finished */
        } else {
            connected(c);
        }
    } else if (status == 0) {
        close(fd); /* closed meanwhile */
    }
    if (c->state == RMQ_CONN_CONNECTING && status != 0) {
        snprintf(msg, sizeof msg, "connect to %s failed: %s", c->addr, report);
        rmq_log_warn(SUB(t), "%s", msg);
        c->connect_failed = 1;
        conn_close(c, RMQ_ERR_TRANSPORT, RMQ_ERR_TRANSPORT, msg);
    }
    rmq__conn_release(c);
    handle_closed(t);
}

/*
 * WAITING -> CONNECTING: resolve the host name if there is one, then connect; the connect
 * timeout covers both. Returns 0, or RMQ_ERR_TRANSPORT with the reason in err (the caller
 * closes the connection, or defers that when it runs inside a user's call).
 */
static int conn_start(rmq_conn_t *c, char *err, size_t errsz)
{
    rmq_remoting_t *t = c->t;
    int rc;
    set_state(c, RMQ_CONN_CONNECTING);
    c->deadline = now_ms(t) + t->opts.connect_timeout_ms;
    if (c->host_name) {
        /* Every address of the name in turn, each with the connect timeout (dial.h); this
         * deadline only backs the dial up. */
        c->deadline += t->opts.connect_timeout_ms * RMQ_DIAL_MAX_ADDRS;
        char why[300];
        rc = rmq__dial_start(t->loop, c->host, c->port, t->opts.connect_timeout_ms, on_dialed, c,
                             &c->dial, why, sizeof why);
        if (rc == 0) {
            rmq__conn_keep(c);
            t->handles++;
        } else {
            rmq__seterr(err, errsz, "connect to %s failed: %s", c->addr, why);
            rc = -1;
        }
    } else {
        rc = tcp_connect(c);
        if (rc < 0) rmq__seterr(err, errsz, "connect to %s failed: %s", c->addr, uv_strerror(rc));
    }
    if (rc < 0) {
        rmq_log_warn(SUB(t), "%s", err);
        c->connect_failed = 1;
        return RMQ_ERR_TRANSPORT;
    }
    arm_timer(t, c->deadline);
    return 0;
}

/* From the timer: WAITING -> CONNECTING, or closed at once when that fails. */
static void start_connect(rmq_conn_t *c)
{
    char msg[400];
    if (conn_start(c, msg, sizeof msg)) conn_close(c, RMQ_ERR_TRANSPORT, RMQ_ERR_TRANSPORT, msg);
}

static peer_t *peer_find(rmq_remoting_t *t, const char *addr)
{
    for (link_t *l = t->peers.next; l != &t->peers; l = l->next) {
        peer_t *p = CONTAINER_OF(l, peer_t, link);
        if (strcmp(p->addr, addr) == 0) return p;
    }
    return NULL;
}

/*
 * The connection for addr, created when needed: CONNECTING at once, or WAITING when the address
 * is in its reconnect backoff (the timer starts the connect). Returns 0 with *out, or an error
 * (bad address, socket failure); nothing is left behind on error.
 */
int rmq__remoting_conn_for_addr(rmq_remoting_t *t, const char *addr, rmq_conn_t **out, char *err,
                                size_t errsz)
{
    peer_t *p = peer_find(t, addr);
    if (p && p->conn) {
        *out = p->conn;
        return 0;
    }
    rmq_conn_t *c = rmq__remoting_conn_new(t, 0);
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    int rc = parse_addr(c, addr, err, errsz);
    if (rc) {
        rmq__conn_release(c);
        return rc;
    }
    rc = uv_tcp_init(t->loop, &c->tcp);
    if (rc < 0) {
        rmq__seterr(err, errsz, "socket for %s: %s", addr, uv_strerror(rc));
        rmq__conn_release(c);
        return RMQ_ERR_IO;
    }
    c->tcp.data = c;
    c->handle_inited = 1;
    t->handles++;
    if (!p) {
        p = rmq__xcalloc(1, sizeof(*p));
        p->addr = rmq__xstrdup(addr);
        list_push_back(&t->peers, &p->link);
    }
    c->peer = p;
    p->conn = c;
    list_push_back(&t->conns, &c->live);
    int64_t now = now_ms(t);
    if (p->retry_at > now) {
        c->deadline = p->retry_at;
        rmq_dbg(RMQ_DBG_REMOTING, SUB(t), "connection %s: reconnect in %lld ms", addr,
                (long long)(p->retry_at - now));
        arm_timer(t, c->deadline);
    } else {
        /* Synchronous failures are reported through the timer (callbacks never run from
         * inside the caller's call). */
        if (conn_start(c, c->doom_why, sizeof c->doom_why)) {
            c->doomed = 1;
            arm_timer(t, 0);
        }
    }
    *out = c;
    return 0;
}

/* ---- connections, enumeration ---------------------------------------------------------------- */

void rmq__remoting_foreach_conn(rmq_remoting_t *t, void (*fn)(rmq_conn_t *, void *), void *ud)
{
    /* Snapshot with references: fn may close any connection. */
    size_t n = 0, i = 0;
    for (link_t *l = t->conns.next; l != &t->conns; l = l->next)
        n++;
    if (!n) return;
    rmq_conn_t **v = rmq__xmalloc(n * sizeof(*v));
    for (link_t *l = t->conns.next; l != &t->conns; l = l->next)
        v[i++] = rmq__conn_keep(CONTAINER_OF(l, rmq_conn_t, live));
    for (i = 0; i < n; i++) {
        if (v[i]->state < RMQ_CONN_CLOSING) fn(v[i], ud);
    }
    for (i = 0; i < n; i++)
        rmq__conn_release(v[i]);
    free(v);
}

rmq_conn_t *rmq__remoting_find_conn(rmq_remoting_t *t, const char *addr)
{
    peer_t *p = peer_find(t, addr);
    return p ? p->conn : NULL;
}

void rmq__remoting_close_addr(rmq_remoting_t *t, const char *addr, const char *why)
{
    rmq_conn_t *c = rmq__remoting_find_conn(t, addr);
    if (c) conn_close(c, RMQ_OK, RMQ_ERR_TRANSPORT, why ? why : "closed");
}

size_t rmq__remoting_pending(const rmq_remoting_t *t)
{
    return t->npending;
}

void rmq__remoting_stats(const rmq_remoting_t *t, rmq_remoting_stats_t *out)
{
    *out = t->st;
    out->conns = 0;
    for (const link_t *l = t->conns.next; l != &t->conns; l = l->next)
        out->conns++;
    out->pending = t->npending;
}

/* ---- name servers ---------------------------------------------------------------------------- */

static void ns_free(rmq_remoting_t *t)
{
    for (int i = 0; i < t->n_ns; i++)
        free(t->ns[i]);
    free(t->ns);
    t->ns = NULL;
    t->n_ns = 0;
    t->ns_idx = 0;
}

int rmq__remoting_set_namesrv(rmq_remoting_t *t, const char *list, char *errstr, size_t errstr_size)
{
    char **v = NULL;
    int n = 0;
    const char *s = list ? list : "";
    while (*s) {
        const char *e = strchr(s, ';');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        const char *item = s;
        s = e ? e + 1 : s + len;
        while (len && (*item == ' ' || *item == '\t'))
            item++, len--;
        while (len && (item[len - 1] == ' ' || item[len - 1] == '\t'))
            len--;
        if (len >= 7 && strncmp(item, "http://", 7) == 0) item += 7, len -= 7;
        if (!len) continue;
        char *a = rmq__xstrndup(item, len);
        char host[256];
        int port;
        if (rmq__addr_split(a, host, sizeof host, &port)) {
            rmq__seterr(errstr, errstr_size, "bad name server address \"%s\" (want host:port)", a);
            free(a);
            for (int i = 0; i < n; i++)
                free(v[i]);
            free(v);
            return RMQ_ERR_CONFIG;
        }
        v = realloc(v, (size_t)(n + 1) * sizeof(*v));
        if (!v) abort();
        v[n++] = a;
    }
    if (!n) {
        rmq__seterr(errstr, errstr_size, "empty name server list \"%s\"", list ? list : "");
        return RMQ_ERR_CONFIG;
    }
    ns_free(t);
    t->ns = v;
    t->n_ns = n;
    t->ns_idx = (int)((uint64_t)rmq__mono_ms() * 2654435761u % (uint64_t)n);
    return 0;
}

const char *rmq__remoting_namesrv(const rmq_remoting_t *t)
{
    return t->n_ns ? t->ns[t->ns_idx] : NULL;
}

/* ---- life cycle ------------------------------------------------------------------------------ */

int rmq__remoting_new(const rmq_remoting_opts_t *opts, rmq_remoting_t **out, char *errstr,
                      size_t errstr_size)
{
    if (!opts->loop) {
        rmq__seterr(errstr, errstr_size, "remoting: loop is required");
        return RMQ_ERR_INVALID;
    }
    if (opts->serialize != RMQ_SERIALIZE_JSON && opts->serialize != RMQ_SERIALIZE_ROCKETMQ) {
        rmq__seterr(errstr, errstr_size, "remoting: serialize must be 0 (JSON) or 1 (ROCKETMQ)");
        return RMQ_ERR_INVALID;
    }
    if (opts->max_frame && opts->max_frame < 16) {
        rmq__seterr(errstr, errstr_size, "remoting: max_frame %zu is too small", opts->max_frame);
        return RMQ_ERR_INVALID;
    }
    rmq_remoting_t *t = rmq__xcalloc(1, sizeof(*t));
    t->opts = *opts;
    snprintf(t->name, sizeof t->name, "%s", opts->name ? opts->name : "remoting");
    t->opts.name = t->name;
    if (!t->opts.max_frame) t->opts.max_frame = RMQ_FRAME_MAX_DEFAULT;
    if (!t->opts.connect_timeout_ms) t->opts.connect_timeout_ms = RMQ_CONNECT_TIMEOUT_MS_DEFAULT;
    if (!t->opts.idle_timeout_ms) t->opts.idle_timeout_ms = RMQ_IDLE_TIMEOUT_MS_DEFAULT;
    if (t->opts.reconnect_min_ms <= 0) t->opts.reconnect_min_ms = RMQ_RECONNECT_MIN_MS_DEFAULT;
    if (t->opts.reconnect_max_ms <= 0) t->opts.reconnect_max_ms = RMQ_RECONNECT_MAX_MS_DEFAULT;
    if (t->opts.reconnect_max_ms < t->opts.reconnect_min_ms)
        t->opts.reconnect_max_ms = t->opts.reconnect_min_ms;
    if (t->opts.close_on_timeout == 0) t->opts.close_on_timeout = 1;
    if (opts->tls_client) rmq__tls_ctx_keep(opts->tls_client);
    if (opts->tls_server) rmq__tls_ctx_keep(opts->tls_server);
    if (opts->acl_access_key && *opts->acl_access_key) {
        t->acl_ak = rmq__xstrdup(opts->acl_access_key);
        t->acl_sk = rmq__xstrdup(opts->acl_secret_key ? opts->acl_secret_key : "");
        if (opts->acl_security_token) t->acl_token = rmq__xstrdup(opts->acl_security_token);
    }
    t->opts.acl_access_key = t->opts.acl_secret_key = t->opts.acl_security_token = NULL;
    t->loop = opts->loop;
    t->timer_at = -1;
    list_init(&t->conns);
    list_init(&t->all_conns);
    list_init(&t->peers);
    list_init(&t->pending);
    list_init(&t->dirty);
    uv_timer_init(t->loop, &t->timer);
    t->timer.data = t;
    uv_idle_init(t->loop, &t->flusher);
    t->flusher.data = t;
    t->handles = 2;
    *out = t;
    return 0;
}

void rmq__remoting_destroy(rmq_remoting_t *t, void (*close_cb)(void *ud), void *ud)
{
    t->destroy_cb = close_cb;
    t->destroy_ud = ud;
    /* Nothing new starts from here (requests return RMQ_ERR_SHUTDOWN), then every connection
     * closes and fails its pending requests. */
    t->destroying = 1;
    while (!list_empty(&t->conns)) {
        rmq_conn_t *c = CONTAINER_OF(t->conns.next, rmq_conn_t, live);
        conn_close(c, RMQ_ERR_DESTROYED, RMQ_ERR_DESTROYED, "transport destroyed");
    }
    while (!list_empty(&t->peers)) {
        peer_t *p = CONTAINER_OF(t->peers.next, peer_t, link);
        list_remove(&p->link);
        free(p->addr);
        free(p);
    }
    ns_free(t);
    free(t->handlers);
    t->handlers = NULL;
    t->n_handlers = 0;
    t->dflt.h = NULL;
    uv_timer_stop(&t->timer);
    uv_close((uv_handle_t *)&t->timer, rmq__remoting_plain_closed);
    uv_idle_stop(&t->flusher);
    uv_close((uv_handle_t *)&t->flusher, rmq__remoting_plain_closed);
    if (t->listening) {
        t->listening = 0;
        uv_close((uv_handle_t *)&t->listener, rmq__remoting_plain_closed);
    }
}
