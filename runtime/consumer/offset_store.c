/*
 * offset_store.c -- the remote (CLUSTERING) offset store (RemoteBrokerOffsetStore,
 * PROTOCOL.md 6.7) and the start-offset queries used when a queue is assigned (6.8):
 * QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET (oneway), GET_MAX_OFFSET and
 * SEARCH_OFFSET_BY_TIMESTAMP.
 *
 * BROADCASTING uses the LocalFileOffsetStore instead (6.16, offset_local.c): the file is read at
 * start into a table that READ_FROM_STORE consults, and rewritten (off the loop thread) every
 * persist interval and at shutdown once a queue is owned.
 *
 * The in-memory offset of a queue lives in its rmq_qent_t (offset, -1 = none): a queue leaves
 * memory exactly when it leaves the table (persisted first), which is Java's persist + remove.
 *
 * Ownership: query contexts are owned by the request until their callback ran.
 * Threads: loop thread only.
 */
#include "consumer_int.h"

#include "offset_file.h"
#include "protocol/route.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

void rmq__offset_update(rmq_qent_t *q, int64_t off, int increase_only)
{
    if (off < 0) return;
    if (q->offset < 0 || !increase_only || off > q->offset) {
        rmq_dbg(RMQ_DBG_OFFSET, "offset", "%s: offset %" PRId64 " -> %" PRId64, q->name,
                q->offset, off);
        q->offset = off;
    }
}

/*
 * Where offsets go, as RemoteBrokerOffsetStore.updateConsumeOffsetToBroker and
 * fetchConsumeOffsetFromBroker choose it: MQClientInstance.findBrokerAddressInAdmin(brokerName),
 * i.e. the master while the route lists it, else a slave (route.h). When the broker has no
 * address at all, Java updates the topic's route from the name server and looks again; that call
 * would block here, so the routes are asked for now and the next persist finds the address.
 */
static const char *admin_addr(rmq_consumer_t *c, const rmq_mq_t *mq, int *slave)
{
    for (int i = 0; i < c->n_subs; i++) {
        const char *a = c->routes[i] ? rmq__route_admin_addr(c->routes[i], mq->broker_name, slave)
                                     : NULL;
        if (a) return a;
    }
    if (c->state == RMQ_CLIENT_RUNNING) rmq__c_refresh_routes(c);
    return NULL;
}

static int send_update(rmq_consumer_t *c, const rmq_mq_t *mq, int64_t off)
{
    int slave = 0;
    const char *addr = admin_addr(c, mq, &slave);
    if (!addr) {
        rmq_log_warn("offset", "The broker[%s] not exist: offset %" PRId64 " of %s#%d not "
                     "persisted (routes asked for again)", mq->broker_name, off, mq->topic,
                     mq->queue_id);
        return RMQ_ERR_NOT_FOUND;
    }
    rmq_cmd_t cmd;
    rmq__cmd_init(&cmd, RMQ_REQ_UPDATE_CONSUMER_OFFSET, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext(&cmd, "consumerGroup", c->group);
    rmq__cmd_set_ext(&cmd, "topic", mq->topic);
    rmq__cmd_set_ext_i64(&cmd, "queueId", mq->queue_id);
    rmq__cmd_set_ext_i64(&cmd, "commitOffset", off);
    int rc = rmq__remoting_oneway(c->rt, addr, &cmd);
    rmq__cmd_free(&cmd);
    rmq_dbg(RMQ_DBG_OFFSET, "offset", "persist %s@%s#%d = %" PRId64 " -> %s%s (%s)", mq->topic,
            mq->broker_name, mq->queue_id, off, addr, slave ? " (slave)" : "",
            rc ? rmq_err_name(rc) : "sent");
    return rc;
}

static int broadcasting(const rmq_consumer_t *c)
{
    return c->conf->message_model == RMQ_MODEL_BROADCASTING;
}

void rmq__offset_persist(rmq_consumer_t *c, rmq_qent_t *q)
{
    if (broadcasting(c)) {
        /* LocalFileOffsetStore keeps the offset in its memory table (written by the next
         * persistAll), so a queue leaving the table does not lose what it consumed since. */
        rmq__local_offsets_set(c, &q->mq, q->offset);
        return;
    }
    if (q->offset >= 0) send_update(c, &q->mq, q->offset);
}

void rmq__offset_persist_all(rmq_consumer_t *c)
{
    if (broadcasting(c)) {
        rmq__local_offsets_persist_all(c);
        return;
    }
    for (rmq_qent_t *q = c->queues; q; q = q->next) rmq__offset_persist(c, q);
}

int rmq__offset_load(rmq_consumer_t *c, char *errstr, size_t errstr_size)
{
    if (!broadcasting(c)) return 0;
    return rmq__local_offsets_load(c, errstr, errstr_size);
}

/* ---- queries ---------------------------------------------------------------------------------- */

typedef struct offq {
    rmq_consumer_t *c;
    rmq_offset_cb cb;
    void *ud;
    int code; /* request code */
} offq_t;

static void on_offset_resp(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    offq_t *o = ud;
    int64_t off = -2;
    if (err) {
        rmq_log_warn("offset", "%s failed: %s", o->code == RMQ_REQ_QUERY_CONSUMER_OFFSET
                     ? "QUERY_CONSUMER_OFFSET" : "offset query", errmsg);
    } else if (resp->code == RMQ_RESP_SUCCESS) {
        if (rmq__cmd_ext_i64(resp, "offset", &off) != 0) {
            rmq_log_warn("offset", "response without a valid offset field");
            off = -2;
        }
    } else if (o->code == RMQ_REQ_QUERY_CONSUMER_OFFSET) {
        off = -1; /* any broker error code: "no offset" */
    } else {
        rmq_log_warn("offset", "offset request code %d answered %s: %s", o->code,
                     rmq_err_name(resp->code), resp->remark ? resp->remark : "");
        off = -2;
    }
    o->cb(o->ud, off);
    free(o);
}

static int offset_req(rmq_consumer_t *c, rmq_cmd_t *cmd, const rmq_mq_t *mq, int64_t timeout,
                      rmq_offset_cb cb, void *ud)
{
    /* QUERY_CONSUMER_OFFSET: findBrokerAddressInAdmin (master, else a slave);
     * GET_MAX_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP: MQAdminImpl.maxOffset / searchOffset use
     * findBrokerAddressInPublish, the master only ("The broker[...] not exist" without it). */
    const char *addr = cmd->code == RMQ_REQ_QUERY_CONSUMER_OFFSET
                           ? admin_addr(c, mq, &(int){0})
                           : rmq__c_master_addr(c, mq->broker_name);
    if (!addr && cmd->code != RMQ_REQ_QUERY_CONSUMER_OFFSET && c->state == RMQ_CLIENT_RUNNING)
        rmq__c_refresh_routes(c);
    if (!addr) {
        rmq__cmd_free(cmd);
        return RMQ_ERR_NOT_FOUND;
    }
    offq_t *o = rmq__xcalloc(1, sizeof(*o));
    o->c = c, o->cb = cb, o->ud = ud, o->code = cmd->code;
    int rc = rmq__remoting_request(c->rt, addr, cmd, timeout, on_offset_resp, o);
    rmq__cmd_free(cmd);
    if (rc) free(o);
    return rc;
}

int rmq__offset_query(rmq_consumer_t *c, const rmq_mq_t *mq, rmq_offset_cb cb, void *ud)
{
    if (broadcasting(c)) {
        cb(ud, rmq__local_offsets_read(c, mq));
        return 0;
    }
    rmq_cmd_t cmd;
    rmq__cmd_init(&cmd, RMQ_REQ_QUERY_CONSUMER_OFFSET, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext(&cmd, "consumerGroup", c->group);
    rmq__cmd_set_ext(&cmd, "topic", mq->topic);
    rmq__cmd_set_ext_i64(&cmd, "queueId", mq->queue_id);
    return offset_req(c, &cmd, mq, RMQ_OFFSET_TIMEOUT_MS, cb, ud);
}

int rmq__offset_admin(rmq_consumer_t *c, const rmq_mq_t *mq, int64_t ts, rmq_offset_cb cb,
                      void *ud)
{
    rmq_cmd_t cmd;
    rmq__cmd_init(&cmd, ts >= 0 ? RMQ_REQ_SEARCH_OFFSET_BY_TIMESTAMP : RMQ_REQ_GET_MAX_OFFSET,
                  RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext(&cmd, "topic", mq->topic);
    rmq__cmd_set_ext_i64(&cmd, "queueId", mq->queue_id);
    if (ts >= 0) rmq__cmd_set_ext_i64(&cmd, "timestamp", ts);
    return offset_req(c, &cmd, mq, RMQ_ADMIN_TIMEOUT_MS, cb, ud);
}
