/*
 * test_devbroker_index.c -- the development broker's message index (devbroker_index.c) driven
 * through its store (devbroker_store.c) without a loop or sockets: messages stored with
 * rmq__db_store are found under topic#key for their UNIQ_KEY and each KEYS entry, in commit-log
 * order; rmq__db_index_drop_topic forgets exactly one topic's keys (the hook topic deletion
 * calls), also while keys of other topics share its hash slots; messages dropped by the
 * byte cap leave the index (a damaged one is not found either); everything is freed with the
 * store (run the binary of an RMQ_SANITIZE=1 build for leaks).
 */
#include "devbroker/devbroker_int.h"
#include "protocol/message.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define FOREVER INT64_MAX

static rmq_devbroker_t db;

static db_broker_t *broker_new(int64_t max_bytes)
{
    memset(&db, 0, sizeof(db));
    db.default_queues = 4;
    db.max_bytes = max_bytes;
    db_broker_t *b = calloc(1, sizeof(*b));
    b->node.db = &db;
    b->log_fd = -1;
    b->node.store_ip[0] = 127, b->node.store_ip[3] = 1;
    b->node.port = 10911;
    snprintf(b->name, sizeof(b->name), "broker-a");
    return b;
}

static void broker_free(db_broker_t *b)
{
    rmq__db_broker_store_free(b);
    free(b);
}

/* Store one message with these KEYS (NULL: none) and UNIQ_KEY; returns its commit-log offset. */
static int64_t put(db_broker_t *b, const char *topic, const char *keys, const char *uniq)
{
    db_topic_t *t = rmq__db_topic_get(b, topic);
    if (!t) t = rmq__db_topic_create(b, topic, 4, 4, 6);
    rmq_buf_t props;
    rmq__buf_init(&props);
    if (keys) rmq__props_append(&props, "KEYS", keys);
    if (uniq) rmq__props_append(&props, "UNIQ_KEY", uniq);
    static const uint8_t lo[4] = {127, 0, 0, 1};
    char body[64];
    int bl = snprintf(body, sizeof(body), "%s/%s", topic, uniq ? uniq : "-");
    db_msg_in_t in = {.topic = topic,
                      .queue_id = (int)(t->sent % 4),
                      .born_ts = 1700000000000,
                      .born_host = lo,
                      .born_ip_len = 4,
                      .body = body,
                      .body_len = (size_t)bl,
                      .props = props.data,
                      .props_len = props.len};
    char err[256];
    db_msg_t *m = rmq__db_store(b, t, &in, err, sizeof(err));
    rmq__buf_free(&props);
    CHECKF(m != NULL, "store: %s", err);
    return m ? m->phys : -1;
}

static int find(db_broker_t *b, const char *topic, const char *key, int64_t *out)
{
    return rmq__db_index_query(b, topic, key, 64, 0, FOREVER, out);
}

static void test_keys(void)
{
    db_broker_t *b = broker_new(1 << 30);
    int64_t out[64];
    CHECK(find(b, "T", "a", out) == 0); /* no index yet */
    int64_t p1 = put(b, "T", "a b", "U1");
    int64_t p2 = put(b, "T", "  b  c ", "U2"); /* empty keys between separators: none */
    int64_t p3 = put(b, "T", "a a", "a");      /* found once, its UNIQ_KEY included */
    put(b, "T", NULL, NULL);                   /* nothing to index */
    CHECK(find(b, "T", "a", out) == 2 && out[0] == p1 && out[1] == p3);
    CHECK(find(b, "T", "b", out) == 2 && out[0] == p1 && out[1] == p2);
    CHECK(find(b, "T", "c", out) == 1 && out[0] == p2);
    CHECK(find(b, "T", "U2", out) == 1 && out[0] == p2);
    CHECK(find(b, "T", "", out) == 0);
    CHECK(find(b, "T", " ", out) == 0);
    CHECK(find(b, "U", "a", out) == 0);
    CHECK(find(b, "T#a", "", out) == 0);
    CHECKF(rmq__db_index_entries(b) == 9, "%zu entries", rmq__db_index_entries(b));
    /* maxNum: the newest, in commit-log order */
    CHECK(rmq__db_index_query(b, "T", "a", 1, 0, FOREVER, out) == 1 && out[0] == p3);
    CHECK(rmq__db_index_query(b, "T", "a", 0, 0, FOREVER, out) == 0);
    broker_free(b);
}

static void test_drop_topic(void)
{
    db_broker_t *b = broker_new(1 << 30);
    /* Enough keys for several table growths, in three topics whose keys share probe runs. */
    const char *topics[3] = {"A", "AB", "B"};
    char key[64], uniq[64];
    for (int i = 0; i < 3000; i++) {
        for (int t = 0; t < 3; t++) {
            snprintf(key, sizeof(key), "k%d g%d all", i, i % 7);
            snprintf(uniq, sizeof(uniq), "U%s%05d", topics[t], i);
            put(b, topics[t], key, uniq);
        }
    }
    int64_t out[64];
    CHECKF(rmq__db_index_entries(b) == 3 * 3000 * 4, "%zu", rmq__db_index_entries(b));
    rmq__db_index_drop_topic(b, "A");
    /* the entries stay (they go with their messages), never answered again */
    CHECKF(rmq__db_index_entries(b) == 3 * 3000 * 4, "%zu", rmq__db_index_entries(b));
    int lost = 0, kept = 0;
    for (int i = 0; i < 3000; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        if (find(b, "A", key, out) != 0) lost++;
        if (find(b, "AB", key, out) == 1 && find(b, "B", key, out) == 1) kept++;
        snprintf(uniq, sizeof(uniq), "UAB%05d", i);
        if (find(b, "AB", uniq, out) != 1) kept--;
    }
    CHECKF(lost == 0, "%d keys of A still found", lost);
    CHECKF(kept == 3000, "%d of 3000 keys of AB and B found", kept);
    CHECK(find(b, "B", "all", out) == 64);
    /* a topic created again after its deletion is indexed from scratch */
    int64_t p = put(b, "A", "k1", "fresh");
    CHECK(find(b, "A", "k1", out) == 1 && out[0] == p);
    rmq__db_index_drop_topic(b, "nothing");
    rmq__db_index_drop_topic(b, "AB");
    rmq__db_index_drop_topic(b, "B");
    CHECK(find(b, "A", "k1", out) == 1 && out[0] == p);
    CHECK(find(b, "B", "all", out) == 0 && find(b, "AB", "k1", out) == 0);
    broker_free(b);
}

static void test_evict(void)
{
    db_broker_t *b = broker_new(20000); /* about 200 of these messages */
    int64_t out[64], phys[1000];
    char key[64], uniq[64];
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "e%d every", i);
        snprintf(uniq, sizeof(uniq), "UE%05d", i);
        phys[i] = put(b, "E", key, uniq);
        if (i == 0) {
            /* damaged in place (rmq_devbroker_corrupt): its body length now runs past its end,
             * so it names no keys when it leaves the store */
            db_msg_t *m = rmq__db_find_phys(b, phys[0]);
            memset(m->data + 84, 0xff, 4);
        }
    }
    int first = -1, indexed = 0;
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "e%d", i);
        int n = find(b, "E", key, out);
        int held = rmq__db_find_phys(b, phys[i]) != NULL;
        CHECKF(n == held, "e%d: found %d, held %d", i, n, held);
        if (held && first < 0) first = i;
        indexed += n;
    }
    CHECKF(first > 500 && indexed == 1000 - first, "first %d, indexed %d", first, indexed);
    /* the damaged one's entries went with it too */
    CHECKF(rmq__db_index_entries(b) == (size_t)indexed * 3, "%zu entries for %d messages",
           rmq__db_index_entries(b), indexed);
    CHECK(find(b, "E", "e0", out) == 0 && find(b, "E", "UE00000", out) == 0);
    CHECK(find(b, "E", "every", out) == 64 && out[63] == phys[999]);
    broker_free(b);
}

int main(void)
{
    test_keys();
    test_drop_topic();
    test_evict();
    return test_report("test_devbroker_index");
}
