/*
 * devbroker_slave.c -- slaves of the development broker (`--slaves N`), so that a spec can take
 * a master down and watch clients fall back to its slave, as with a RocketMQ 4.9.4 master/slave
 * pair (BrokerRole SYNC_MASTER + SLAVE).
 *
 * A slave is a broker of its own (own port, store, groups, offsets and locks) with its master's
 * name and broker id 1..N. It serves what a 4.9.4 slave serves: pulls, offset queries and
 * updates, heartbeats, admin reads. Writes are refused as a slave's message store refuses them
 * (SEND_MESSAGE / SEND_BATCH_MESSAGE / CONSUMER_SEND_MSG_BACK answer SERVICE_NOT_AVAILABLE).
 * Replication is synchronous: every topic the master creates and every message it stores is
 * created / stored on its slaves at once (same queue offsets), the way HA replication leaves a
 * SYNC_MASTER's slave. Consumer offsets go the other way only as SlaveSynchronize does it: every
 * 10 s a slave whose master is up takes the master's offsets (syncConsumerOffset, a putAll), so
 * offsets a client committed on the slave while the master was down are overwritten once the
 * master is back, as on a real slave.
 *
 * Routes (devbroker_ns.c) list each broker name once with the addresses of its master and
 * slaves that are up (brokerAddrs {0: master, 1: slave, ...}); the queue data stays while any of
 * them is up, as RouteInfoManager keeps a broker name's queue data until its last address goes.
 *
 * Memory only and with the local name server only (--store and --name-server are refused with
 * --slaves). Slaves sit after the masters in db->brokers (rmq_devbroker_slave() gives their
 * index), so every control function (set_down, counts, committed_offset, ...) takes them.
 *
 * Ownership: slaves are brokers of the rmq_devbroker_t like the others. Threads: broker thread.
 */
#include "devbroker_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLAVE_SYNC_MS 10000 /* SlaveSynchronize.syncAll period */

static void h_refuse_write(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    (void)node;
    /* DefaultMessageStore.putMessage on a slave: PutMessageStatus.SERVICE_NOT_AVAILABLE. */
    rmq__db_reply_code(conn, req, RMQ_RESP_SERVICE_NOT_AVAILABLE,
                       "service not available now. It may be caused by one of the following "
                       "reasons: the broker's disk is full, messages are put to the slave, "
                       "message store has been shut down, etc.");
}

typedef struct {
    db_broker_t *s;
} copy_ud_t;

static void copy_topic(const char *key, void *val, void *ud)
{
    (void)key;
    const db_topic_t *t = val;
    db_broker_t *s = ((copy_ud_t *)ud)->s;
    rmq__db_topic_create(s, t->name, t->read_q, t->write_q, t->perm);
}

int rmq__db_slaves_start(rmq_devbroker_t *db, int per_master, char *errstr, size_t errstr_size)
{
    int masters = db->n_brokers;
    for (int i = 0; i < masters; i++) {
        db_broker_t *m = db->brokers[i];
        for (int k = 1; k <= per_master; k++) {
            db_broker_t *s = rmq__xcalloc(1, sizeof(*s));
            s->log_fd = -1;
            s->master = m;
            s->id = k;
            int idx = db->n_brokers;
            db->brokers[idx] = s;
            db->n_brokers = idx + 1;
            snprintf(s->name, sizeof(s->name), "%s", m->name);
            char addr[128];
            snprintf(addr, sizeof(addr), "%s%s%s:0", strchr(m->node.host, ':') ? "[" : "",
                     m->node.host, strchr(m->node.host, ':') ? "]" : "");
            int rc = rmq__db_node_init(db, &s->node, idx, addr, errstr, errstr_size);
            if (rc) return rc;
            rmq__db_broker_store_init(s);
            copy_ud_t cu = {s};
            rmq__dbmap_each(&m->topics, copy_topic, &cu);
            uv_timer_init(&db->loop, &s->delay_timer);
            s->delay_timer.data = s;
            rmq__db_broker_install(s);
            rmq__db_set_handler(&s->node, RMQ_REQ_SEND_MESSAGE, h_refuse_write);
            rmq__db_set_handler(&s->node, RMQ_REQ_SEND_MESSAGE_V2, h_refuse_write);
            rmq__db_set_handler(&s->node, RMQ_REQ_SEND_BATCH_MESSAGE, h_refuse_write);
            rmq__db_set_handler(&s->node, RMQ_REQ_CONSUMER_SEND_MSG_BACK, h_refuse_write);
            rc = rmq__db_node_up(&s->node, errstr, errstr_size);
            if (rc) return rc;
            rmq_log_info(DB_LOG, "%s: slave %lld on %s", s->name, (long long)s->id, s->node.addr);
        }
    }
    return 0;
}

static void copy_offset(const char *key, void *val, void *ud)
{
    db_broker_t *s = ud;
    int64_t *p = rmq__dbmap_get(&s->offsets, key);
    if (!p) {
        p = rmq__xmalloc(sizeof(*p));
        rmq__dbmap_put(&s->offsets, key, p);
    }
    *p = *(const int64_t *)val;
}

void rmq__db_slaves_sync(rmq_devbroker_t *db, int64_t now_mono)
{
    for (int i = 0; i < db->n_brokers; i++) {
        db_broker_t *s = db->brokers[i];
        if (!s->master || s->down || s->master->down) continue;
        if (s->last_sync_ms && now_mono - s->last_sync_ms < SLAVE_SYNC_MS) continue;
        s->last_sync_ms = now_mono;
        rmq__dbmap_each(&s->master->offsets, copy_offset, s);
    }
}
