/*
 * remoting_request.c -- requests and their responses on the remoting transport (remoting.h):
 * the table of pending requests (one transport-wide list sorted by deadline, scanned by the
 * timer in remoting.c; one list per connection, failed together when it closes; a hash by
 * opaque that matches each response to its request), sending requests (signed with the ACL
 * keys when set, acl.c) and replies, and the dispatch of each decoded frame: a response to its
 * pending request, a request to the handler registered for its code.
 *
 * Ownership: a pending entry is allocated when a request that awaits an answer is sent and is
 * freed after its callback ran (response, timeout or close). Commands are not taken over (see
 * remoting.h).
 * Threads: the loop thread of the transport's opts.loop only.
 */
#include "remoting_int.h"
#include "protocol/acl.h"
#include "base/codes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- pending requests: by opaque, by deadline, by connection --------------------------------- */

static size_t hslot(const rmq_remoting_t *t, int32_t opaque)
{
    uint32_t h = (uint32_t)opaque * 2654435761u;
    return h & (t->hash_size - 1);
}

static void hash_grow(rmq_remoting_t *t)
{
    size_t nsize = t->hash_size ? t->hash_size * 2 : 256;
    pending_t **nh = rmq__xcalloc(nsize, sizeof(*nh));
    size_t old = t->hash_size;
    pending_t **oh = t->hash;
    t->hash = nh;
    t->hash_size = nsize;
    for (size_t i = 0; i < old; i++) {
        pending_t *p = oh[i];
        while (p) {
            pending_t *n = p->hnext;
            size_t s = hslot(t, p->opaque);
            p->hnext = nh[s];
            nh[s] = p;
            p = n;
        }
    }
    free(oh);
}

static void hash_add(rmq_remoting_t *t, pending_t *p)
{
    if (t->npending + 1 > t->hash_size) hash_grow(t);
    size_t s = hslot(t, p->opaque);
    p->hnext = t->hash[s];
    t->hash[s] = p;
}

pending_t *rmq__remoting_pending_find(rmq_remoting_t *t, int32_t opaque)
{
    if (!t->hash_size) return NULL;
    for (pending_t *p = t->hash[hslot(t, opaque)]; p; p = p->hnext)
        if (p->opaque == opaque) return p;
    return NULL;
}

static void hash_del(rmq_remoting_t *t, pending_t *p)
{
    pending_t **pp = &t->hash[hslot(t, p->opaque)];
    while (*pp && *pp != p)
        pp = &(*pp)->hnext;
    if (*pp) *pp = p->hnext;
}

/* Insert p in the deadline list (from the tail: most requests share a timeout). */
static void pending_add(rmq_remoting_t *t, rmq_conn_t *c, pending_t *p)
{
    link_t *pos = t->pending.prev;
    while (pos != &t->pending && CONTAINER_OF(pos, pending_t, by_deadline)->deadline > p->deadline)
        pos = pos->prev;
    list_insert_after(pos, &p->by_deadline);
    list_push_back(&c->pending, &p->by_conn);
    hash_add(t, p);
    t->npending++;
    c->npending++;
    rmq__remoting_arm_timer(t, p->deadline);
}

void rmq__remoting_pending_unlink(rmq_remoting_t *t, pending_t *p)
{
    list_remove(&p->by_deadline);
    list_remove(&p->by_conn);
    hash_del(t, p);
    t->npending--;
    p->conn->npending--;
}

/* Unlink p, run its callback with a local error, free it. */
void rmq__remoting_pending_fail(rmq_remoting_t *t, pending_t *p, int err, const char *msg)
{
    rmq__remoting_pending_unlink(t, p);
    p->cb(p->ud, err, NULL, msg);
    free(p);
}

/* ---- requests -------------------------------------------------------------------------------- */

static int request_on(rmq_remoting_t *t, rmq_conn_t *c, rmq_cmd_t *req, int64_t timeout_ms,
                      unsigned flags, rmq_response_cb cb, void *ud)
{
    int oneway = (flags & RMQ_REQF_ONEWAY) != 0;
    if (oneway ? cb != NULL : (cb == NULL || timeout_ms <= 0)) return RMQ_ERR_INVALID;
    if (c->state >= RMQ_CONN_CLOSING) return RMQ_ERR_TRANSPORT;
    /* AclClientRPCHook.doBeforeRequest: every request, sync, async or oneway. */
    if (t->acl_ak && rmq__acl_sign(req, t->acl_ak, t->acl_sk, t->acl_token)) return RMQ_ERR_NOMEM;
    req->opaque = (int32_t)t->next_opaque++;
    req->flag &= ~(RMQ_FLAG_RESPONSE | RMQ_FLAG_ONEWAY);
    if (oneway) req->flag |= RMQ_FLAG_ONEWAY;
    pending_t *p = NULL;
    if (!oneway) {
        p = rmq__xcalloc(1, sizeof(*p));
        p->conn = c;
        p->opaque = req->opaque;
        p->code = req->code;
        p->flags = flags;
        p->timeout_ms = timeout_ms;
        p->deadline = now_ms(t) + timeout_ms;
        p->cb = cb;
        p->ud = ud;
        pending_add(t, c, p);
    }
    if (RMQ_UNLIKELY(rmq__log_debug & RMQ_DBG_REMOTING)) {
        char d[160];
        rmq__cmd_describe(req, d, sizeof d);
        rmq_dbg(RMQ_DBG_REMOTING, SUB(t), "%s -> %s (connection %s)", c->addr, d,
                rmq__conn_state_name(c->state));
    }
    int rc = rmq__remoting_conn_send(c, req, !oneway, 1, NULL, 0, NULL, NULL);
    if (rc == 0) t->st.requests_sent++;
    if (rc) {
        if (p) {
            rmq__remoting_pending_unlink(t, p);
            free(p);
        }
        return rc;
    }
    return 0;
}

int rmq__remoting_request_ex(rmq_remoting_t *t, const char *addr, rmq_cmd_t *req,
                             int64_t timeout_ms, unsigned flags, rmq_response_cb cb, void *ud)
{
    char err[256];
    rmq_conn_t *c;
    if (t->destroying) return RMQ_ERR_SHUTDOWN;
    if (!addr) {
        if (!t->n_ns) return RMQ_ERR_NOT_FOUND;
        addr = t->ns[t->ns_idx];
    }
    int oneway = (flags & RMQ_REQF_ONEWAY) != 0;
    if (oneway ? cb != NULL : (cb == NULL || timeout_ms <= 0)) return RMQ_ERR_INVALID;
    int rc = rmq__remoting_conn_for_addr(t, addr, &c, err, sizeof err);
    if (rc) {
        rmq_log_warn(SUB(t), "request %d to %s not sent: %s", req->code, addr, err);
        return rc;
    }
    return request_on(t, c, req, timeout_ms, flags, cb, ud);
}

int rmq__remoting_request(rmq_remoting_t *t, const char *addr, rmq_cmd_t *req, int64_t timeout_ms,
                          rmq_response_cb cb, void *ud)
{
    return rmq__remoting_request_ex(t, addr, req, timeout_ms, 0, cb, ud);
}

int rmq__remoting_oneway(rmq_remoting_t *t, const char *addr, rmq_cmd_t *req)
{
    return rmq__remoting_request_ex(t, addr, req, 0, RMQ_REQF_ONEWAY, NULL, NULL);
}

int rmq__conn_request(rmq_conn_t *c, rmq_cmd_t *req, int64_t timeout_ms, unsigned flags,
                      rmq_response_cb cb, void *ud)
{
    if (!c->t || c->t->destroying) return RMQ_ERR_TRANSPORT;
    return request_on(c->t, c, req, timeout_ms, flags, cb, ud);
}

int rmq__conn_reply(rmq_conn_t *c, rmq_cmd_t *resp)
{
    if (c->state != RMQ_CONN_OPEN) return RMQ_ERR_TRANSPORT;
    resp->flag = (resp->flag | RMQ_FLAG_RESPONSE) & ~RMQ_FLAG_ONEWAY;
    return rmq__remoting_conn_send(c, resp, 0, 1, NULL, 0, NULL, NULL);
}

int rmq__conn_reply_ex(rmq_conn_t *c, rmq_cmd_t *resp, const uv_buf_t *extra, unsigned n_extra,
                       rmq_written_cb written, void *wud)
{
    if (c->state != RMQ_CONN_OPEN) return RMQ_ERR_TRANSPORT;
    resp->flag = (resp->flag | RMQ_FLAG_RESPONSE) & ~RMQ_FLAG_ONEWAY;
    return rmq__remoting_conn_send(c, resp, 0, written == NULL, extra, n_extra, written, wud);
}

/* ---- dispatch: responses to their requests, requests to their handlers ----------------------- */

static void reply_not_supported(rmq_conn_t *c, const rmq_cmd_t *req)
{
    char remark[64];
    rmq_cmd_t resp;
    snprintf(remark, sizeof remark, " request type %d not supported", req->code);
    rmq__cmd_init_response(&resp, req, RMQ_RESP_REQUEST_CODE_NOT_SUPPORTED, remark);
    resp.serialize = c->t->opts.serialize;
    rmq_log_warn(SUB(c->t), "%s%s", c->addr, remark);
    rmq__conn_reply(c, &resp);
    rmq__cmd_free(&resp);
}

void rmq__remoting_dispatch(rmq_conn_t *c, rmq_cmd_t *cmd)
{
    rmq_remoting_t *t = c->t;
    if (cmd->flag & RMQ_FLAG_RESPONSE) {
        pending_t *p = rmq__remoting_pending_find(t, cmd->opaque);
        if (!p || p->conn != c) {
            rmq_log_warn(SUB(t), "response opaque=%d code=%d from %s matches no request (late?)",
                         cmd->opaque, cmd->code, c->addr);
            return;
        }
        rmq__remoting_pending_unlink(t, p);
        t->st.responses_recv++;
        if (RMQ_UNLIKELY(t->opts.on_acl_refused != NULL) && rmq__acl_refused(cmd))
            t->opts.on_acl_refused(t->opts.ud, c->addr, p->code, cmd);
        p->cb(p->ud, 0, cmd, "");
        free(p);
        return;
    }
    t->st.requests_recv++;
    handler_slot_t *s = NULL;
    if (cmd->code >= 0 && cmd->code < t->n_handlers && t->handlers[cmd->code].h)
        s = &t->handlers[cmd->code];
    else if (t->dflt.h)
        s = &t->dflt;
    if (s)
        s->h(c, cmd, s->ud);
    else
        reply_not_supported(c, cmd);
}

/* ---- handlers -------------------------------------------------------------------------------- */

void rmq__remoting_set_handler(rmq_remoting_t *t, int32_t code, rmq_request_handler h, void *ud)
{
    if (code < 0 || code >= 65536) return;
    if (code >= t->n_handlers) {
        if (!h) return;
        int n = code + 1;
        handler_slot_t *nh = realloc(t->handlers, (size_t)n * sizeof(*nh));
        if (!nh) abort();
        memset(nh + t->n_handlers, 0, (size_t)(n - t->n_handlers) * sizeof(*nh));
        t->handlers = nh;
        t->n_handlers = n;
    }
    t->handlers[code].h = h;
    t->handlers[code].ud = ud;
}

void rmq__remoting_set_default_handler(rmq_remoting_t *t, rmq_request_handler h, void *ud)
{
    t->dflt.h = h;
    t->dflt.ud = ud;
}
