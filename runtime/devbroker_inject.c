/*
 * devbroker_inject.c -- development broker controls that shape stored data for tests: gaps in a
 * queue's offsets (a queue whose messages a subscription filters lie billions of offsets apart;
 * its slaves get the same gap), corrupted bytes in a stored message (what a consumer must
 * survive; only the named broker's copy), the suggestWhichBrokerId and maxOffset of a broker's
 * pull responses, and the offset its GET_MAX_OFFSET answers give.
 *
 * Ownership: the store's (devbroker_store.c); these only change what it holds.
 * Threads: the exported functions are called from any thread but the broker's; each posts its
 * work to the broker's loop and waits (rmq__db_run_sync), like the controls in devbroker.c.
 */
#include "devbroker.h"
#include "devbroker_int.h"

typedef struct {
    int broker, queue_id;
    const char *topic;
    int64_t offset, n;
    size_t pos;
    unsigned mask;
    int64_t result;
} inject_args_t;

static db_queue_t *queue_of(db_broker_t *b, inject_args_t *a, int create)
{
    db_topic_t *t = rmq__db_topic_get(b, a->topic);
    if (!t && create) t = rmq__db_topic_create(b, a->topic, 0, 0, 6);
    return t ? rmq__db_queue(t, a->queue_id) : NULL;
}

static void op_skip(rmq_devbroker_t *db, void *arg)
{
    inject_args_t *a = arg;
    db_broker_t *b = db->brokers[a->broker];
    a->result = RMQ_ERR_INVALID;
    /* The master and its slaves (devbroker_slave.c) keep the same queue offsets. */
    for (int i = 0; i < db->n_brokers; i++) {
        db_broker_t *x = db->brokers[i];
        if (x != b && x->master != b) continue;
        db_queue_t *q = queue_of(x, a, 1);
        if (!q) return;
        q->max_off += a->n;
        q->gaps = 1;
        if (x == b) a->result = q->max_off;
    }
}

RMQ_EXPORT int64_t rmq_devbroker_skip_offsets(rmq_devbroker_t *db, int broker, const char *topic,
                                              int queue_id, int64_t n)
{
    if (broker < 0 || broker >= db->n_brokers || !topic || !*topic || queue_id < 0 || n < 0 ||
        n > ((int64_t)1 << 50))
        return RMQ_ERR_INVALID;
    inject_args_t a = {.broker = broker, .topic = topic, .queue_id = queue_id, .n = n,
                       .result = RMQ_ERR_SHUTDOWN};
    rmq__db_run_sync(db, op_skip, &a);
    return a.result;
}

static void op_corrupt(rmq_devbroker_t *db, void *arg)
{
    inject_args_t *a = arg;
    db_queue_t *q = queue_of(db->brokers[a->broker], a, 0);
    db_msg_t *m = q ? rmq__db_qget(q, a->offset) : NULL;
    if (!m || a->pos >= m->size) {
        a->result = RMQ_ERR_INVALID;
        return;
    }
    m->data[a->pos] = (char)((unsigned char)m->data[a->pos] ^ a->mask);
    a->result = 0;
}

RMQ_EXPORT int rmq_devbroker_corrupt(rmq_devbroker_t *db, int broker, const char *topic,
                                     int queue_id, int64_t offset, size_t pos, unsigned mask)
{
    if (broker < 0 || broker >= db->n_brokers || !topic || mask == 0 || mask > 255)
        return RMQ_ERR_INVALID;
    inject_args_t a = {.broker = broker, .topic = topic, .queue_id = queue_id, .offset = offset,
                       .pos = pos, .mask = mask, .result = RMQ_ERR_SHUTDOWN};
    rmq__db_run_sync(db, op_corrupt, &a);
    return (int)a.result;
}

static void op_suggest(rmq_devbroker_t *db, void *arg)
{
    inject_args_t *a = arg;
    db->brokers[a->broker]->suggest_id = a->n;
    a->result = 0;
}

RMQ_EXPORT int rmq_devbroker_set_suggest(rmq_devbroker_t *db, int broker, int64_t broker_id)
{
    if (broker < 0 || broker >= db->n_brokers) return RMQ_ERR_INVALID;
    inject_args_t a = {.broker = broker, .n = broker_id, .result = RMQ_ERR_SHUTDOWN};
    rmq__db_run_sync(db, op_suggest, &a);
    return (int)a.result;
}

static void op_told_max(rmq_devbroker_t *db, void *arg)
{
    inject_args_t *a = arg;
    db->brokers[a->broker]->told_max = a->n;
    a->result = 0;
}

RMQ_EXPORT int rmq_devbroker_set_told_max(rmq_devbroker_t *db, int broker, int64_t max_offset)
{
    if (broker < 0 || broker >= db->n_brokers) return RMQ_ERR_INVALID;
    inject_args_t a = {.broker = broker, .n = max_offset, .result = RMQ_ERR_SHUTDOWN};
    rmq__db_run_sync(db, op_told_max, &a);
    return (int)a.result;
}

static void op_told_max_query(rmq_devbroker_t *db, void *arg)
{
    inject_args_t *a = arg;
    db->brokers[a->broker]->told_max_query = a->n;
    a->result = 0;
}

RMQ_EXPORT int rmq_devbroker_set_told_max_query(rmq_devbroker_t *db, int broker,
                                                int64_t max_offset)
{
    if (broker < 0 || broker >= db->n_brokers) return RMQ_ERR_INVALID;
    inject_args_t a = {.broker = broker, .n = max_offset, .result = RMQ_ERR_SHUTDOWN};
    rmq__db_run_sync(db, op_told_max_query, &a);
    return (int)a.result;
}
