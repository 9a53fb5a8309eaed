/*
 * devbroker_register.c -- REGISTER_BROKER towards a remote name server (--name-server): every
 * broker of this process registers its topic table, at start, every 30 s and when it changes.
 *
 * Threads: the broker thread only.
 */
#include "devbroker_int.h"
#include "protocol/fjson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ---- REGISTER_BROKER towards a remote name server ------------------------------------------- */

static void topic_cfg_json(const char *key, void *val, void *ud)
{
    rmq_buf_t *o = ud;
    db_topic_t *t = val;
    if (o->data[o->len - 1] != '{') rmq__buf_append(o, ",", 1);
    rmq__fj_write_str(o, t->name, strlen(t->name), 0);
    rmq__buf_appendf(o,
                     ":{\"order\":false,\"perm\":%d,\"readQueueNums\":%d,\"topicFilterType\":"
                     "\"SINGLE_TAG\",\"topicName\":",
                     t->perm, t->read_q);
    rmq__fj_write_str(o, t->name, strlen(t->name), 0);
    rmq__buf_appendf(o, ",\"topicSysFlag\":0,\"writeQueueNums\":%d}", t->write_q);
}

static void register_done(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    db_broker_t *b = ud;
    if (err)
        rmq_log_warn(DB_LOG, "%s: REGISTER_BROKER failed: %s", b->name, errmsg);
    else if (resp->code != 0)
        rmq_log_warn(DB_LOG, "%s: REGISTER_BROKER answered %d %s", b->name, resp->code,
                     resp->remark ? resp->remark : "");
}

void rmq__db_register_all(rmq_devbroker_t *db)
{
    db->last_register_ms = rmq__mono_ms();
    for (int i = 0; i < db->n_brokers; i++) {
        db_broker_t *b = db->brokers[i];
        if (b->down || !b->node.t) continue;
        b->reg_version = b->data_version;
        rmq_buf_t o;
        rmq__buf_init(&o);
        rmq__buf_appendf(
            &o,
            "{\"filterServerList\":[],\"topicConfigSerializeWrapper\":{\"dataVersion\":"
            "{\"counter\":%lld,\"timestamp\":%lld},\"topicConfigTable\":{",
            (long long)b->data_version, (long long)rmq__now_ms());
        rmq__dbmap_each(&b->topics, topic_cfg_json, &o);
        rmq__buf_append(&o, "}}}", 3);
        rmq_cmd_t c;
        rmq__cmd_init(&c, RMQ_REQ_REGISTER_BROKER, RMQ_SERIALIZE_JSON);
        rmq__cmd_set_ext(&c, "brokerName", b->name);
        rmq__cmd_set_ext(&c, "brokerAddr", b->node.addr);
        rmq__cmd_set_ext(&c, "clusterName", db->cluster);
        rmq__cmd_set_ext(&c, "haServerAddr", b->node.addr);
        rmq__cmd_set_ext_i64(&c, "brokerId", 0);
        rmq__cmd_set_ext(&c, "compressed", "false");
        rmq__cmd_set_ext_i64(&c, "bodyCrc32",
                             (int64_t)(crc32(0, (const Bytef *)o.data, (uInt)o.len) & 0x7FFFFFFF));
        c.body = o.data;
        c.body_len = o.len;
        int rc = rmq__remoting_request(b->node.t, db->remote_ns, &c, 3000, register_done, b);
        if (rc)
            rmq_log_warn(DB_LOG, "%s: REGISTER_BROKER to %s: %s", b->name, db->remote_ns,
                         rmq_err_str(rc));
        c.body = NULL;
        c.body_len = 0;
        rmq__cmd_free(&c);
        rmq__buf_free(&o);
    }
}
