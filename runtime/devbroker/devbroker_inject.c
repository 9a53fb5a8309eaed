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

/* The numbers a broker puts in its answers in place of the true ones: an int64 field of
 * db_broker_t (at a->pos), set on the broker's loop. */
static void op_set_answer(rmq_devbroker_t *db, void *arg)
{
    inject_args_t *a = arg;
    memcpy((char *)db->brokers[a->broker] + a->pos, &a->n, sizeof(a->n));
    a->result = 0;
}

static int set_answer(rmq_devbroker_t *db, int broker, size_t field, int64_t v)
{
    if (broker < 0 || broker >= db->n_brokers) return RMQ_ERR_INVALID;
    inject_args_t a = {.broker = broker, .pos = field, .n = v, .result = RMQ_ERR_SHUTDOWN};
    rmq__db_run_sync(db, op_set_answer, &a);
    return (int)a.result;
}

RMQ_EXPORT int rmq_devbroker_set_suggest(rmq_devbroker_t *db, int broker, int64_t broker_id)
{
    return set_answer(db, broker, offsetof(db_broker_t, suggest_id), broker_id);
}

RMQ_EXPORT int rmq_devbroker_set_told_max(rmq_devbroker_t *db, int broker, int64_t max_offset)
{
    return set_answer(db, broker, offsetof(db_broker_t, told_max), max_offset);
}

RMQ_EXPORT int rmq_devbroker_set_told_max_query(rmq_devbroker_t *db, int broker,
                                                int64_t max_offset)
{
    return set_answer(db, broker, offsetof(db_broker_t, told_max_query), max_offset);
}
