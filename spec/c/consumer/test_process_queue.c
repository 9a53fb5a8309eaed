/*
 * test_process_queue.c -- the process queue against a plain reference model (a sorted array):
 * Java ProcessQueue semantics for putMessage/removeMessage, the committed offset never passing
 * an unresolved message, gaps, duplicates and clear; memory that follows the number of held
 * messages however far apart their offsets are (sparse tag subscriptions).
 */
#include "protocol/message.h"
#include "consumer/process_queue.h"

#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

static rmq_msg_t *mk(int64_t off, uint32_t body_len)
{
    rmq_msg_t *m = calloc(1, sizeof(*m));
    m->queue_offset = off;
    m->body_len = body_len;
    return m;
}

static void test_java_semantics(void)
{
    rmq_pq_t pq;
    rmq__pq_init(&pq, "T@b#0");
    rmq_msg_t *m[10];
    for (int i = 0; i < 10; i++) m[i] = mk(100 + i, 10);
    CHECK(rmq__pq_remove(&pq, m, 1) == -1); /* empty before: -1 */
    for (int i = 0; i < 10; i++) CHECK(rmq__pq_put(&pq, m[i]) == 1);
    CHECK(pq.count == 10 && pq.bytes == 100);
    CHECK(rmq__pq_max_span(&pq) == 9);
    CHECK(rmq__pq_put(&pq, m[3]) == 0); /* duplicate offset */
    rmq_msg_t *dup = mk(103, 99);
    CHECK(rmq__pq_put(&pq, dup) == 0);
    CHECK(pq.count == 10);
    /* Removing a later message leaves the first one: offset stays at the smallest held. */
    CHECK(rmq__pq_remove(&pq, &m[5], 1) == 100);
    /* A view that is not the held one is skipped. */
    CHECK(rmq__pq_remove(&pq, &dup, 1) == 100 && pq.count == 9);
    CHECK(rmq__pq_remove(&pq, &m[0], 1) == 101);
    CHECK(rmq__pq_remove(&pq, m + 1, 4) == 106); /* 101..104 gone, 105 already gone */
    CHECK(rmq__pq_first(&pq) == m[6]);
    CHECK(rmq__pq_remove(&pq, m + 6, 4) == 110); /* empty: queueOffsetMax + 1 */
    CHECK(pq.count == 0 && pq.bytes == 0);
    CHECK(rmq__pq_max_span(&pq) == 0);
    CHECK(rmq__pq_first(&pq) == NULL);
    rmq__pq_free(&pq);
    for (int i = 0; i < 10; i++) free(m[i]);
    free(dup);
}

static void test_gaps_and_growth(void)
{
    rmq_pq_t pq;
    rmq__pq_init(&pq, "T@b#1");
    rmq_msg_t *a = mk(5, 1), *b = mk(5000, 2), *c = mk(70000, 3), *d = mk(4, 4);
    CHECK(rmq__pq_put(&pq, a) == 1);
    CHECK(rmq__pq_put(&pq, b) == 1);
    CHECK(rmq__pq_put(&pq, c) == 1);
    CHECK(rmq__pq_get(&pq, 5000) == b);
    CHECK(rmq__pq_get(&pq, 5001) == NULL);
    CHECK(rmq__pq_max_span(&pq) == 69995);
    /* An offset below the first key (a resubmitted, older message) is accepted. */
    CHECK(rmq__pq_put(&pq, d) == 1);
    CHECK(rmq__pq_first(&pq) == d);
    CHECK(pq.queue_offset_max == 4); /* Java: the last newly inserted */
    CHECK(rmq__pq_remove(&pq, &d, 1) == 5);
    CHECK(rmq__pq_remove(&pq, &a, 1) == 5000);
    CHECK(rmq__pq_remove(&pq, &c, 1) == 5000);
    CHECK(rmq__pq_max_span(&pq) == 0);
    CHECK(rmq__pq_remove(&pq, &b, 1) == 5); /* queue_offset_max + 1 */
    rmq__pq_free(&pq);
    free(a), free(b), free(c), free(d);
}

/* Held messages far apart (a sparse tag subscription): every one is indexed, and the index
 * costs O(count), not O(offset span). */
static void test_sparse_gaps(void)
{
    rmq_pq_t pq;
    rmq__pq_init(&pq, "T@b#4");
    const int64_t G = 50000000; /* 50M offsets between neighbours */
    const int64_t BIG = ((int64_t)1 << 31) + 12345;
    int64_t offs[] = {7, 7 + G, 7 + 2 * G, BIG, BIG + G, ((int64_t)1 << 40) + 1};
    enum { K = sizeof(offs) / sizeof(offs[0]) };
    rmq_msg_t *m[K];
    for (int i = 0; i < K; i++) {
        m[i] = mk(offs[i], 3);
        CHECKF(rmq__pq_put(&pq, m[i]) == 1, "offset %lld", (long long)offs[i]);
    }
    CHECK(pq.count == K && pq.bytes == 3 * K);
    CHECKF(pq.cap <= 64, "index capacity %llu for %d messages", (unsigned long long)pq.cap, K);
    for (int i = 0; i < K; i++) CHECK(rmq__pq_get(&pq, offs[i]) == m[i]);
    CHECK(rmq__pq_get(&pq, 8) == NULL && rmq__pq_get(&pq, BIG - 1) == NULL);
    CHECK(rmq__pq_first(&pq) == m[0]);
    CHECK(rmq__pq_max_span(&pq) == offs[K - 1] - 7);
    /* The committed offset never passes the first unresolved one, however far the rest are. */
    CHECK(rmq__pq_remove(&pq, &m[1], 1) == 7);
    CHECK(rmq__pq_remove(&pq, &m[0], 1) == 7 + 2 * G);
    CHECK(rmq__pq_remove(&pq, &m[3], 1) == 7 + 2 * G);
    CHECK(rmq__pq_remove(&pq, &m[2], 1) == BIG + G);
    CHECK(rmq__pq_max_span(&pq) == offs[K - 1] - (BIG + G));
    CHECK(rmq__pq_remove(&pq, &m[4], 1) == offs[K - 1]);
    CHECK(rmq__pq_remove(&pq, &m[5], 1) == offs[K - 1] + 1);
    CHECK(pq.count == 0 && pq.bytes == 0);
    rmq__pq_free(&pq);
    for (int i = 0; i < K; i++) free(m[i]);

    /* Many sparse messages: capacity stays proportional to what is held as they come and go. */
    rmq__pq_init(&pq, "T@b#5");
    enum { N = 4096 };
    rmq_msg_t **v = calloc(N, sizeof(*v));
    for (int i = 0; i < N; i++) {
        v[i] = mk(BIG + (int64_t)i * G, 1);
        CHECK(rmq__pq_put(&pq, v[i]) == 1);
    }
    CHECKF(pq.cap <= 2 * N, "capacity %llu for %d", (unsigned long long)pq.cap, N);
    for (int i = 0; i < N - 8; i++) {
        int64_t got = rmq__pq_remove(&pq, &v[i], 1);
        CHECKF(got == BIG + (int64_t)(i + 1) * G, "remove %d -> %lld", i, (long long)got);
    }
    CHECK(pq.count == 8);
    CHECKF(pq.cap <= 64, "capacity %llu after draining to 8", (unsigned long long)pq.cap);
    for (int i = N - 8; i < N; i++) CHECK(rmq__pq_get(&pq, v[i]->queue_offset) == v[i]);
    rmq__pq_free(&pq);
    for (int i = 0; i < N; i++) free(v[i]);
    free(v);
}

/* Memory held: a held message pins its whole decoded set (the pulled frame); the set counts
 * once however many of its messages are held, and goes when the last one is removed. */
static void test_pinned_memory(void)
{
    rmq_buf_t body;
    rmq__buf_init(&body);
    char payload[1000];
    memset(payload, 'p', sizeof(payload));
    for (int i = 0; i < 4; i++) {
        rmq_msg_t m;
        memset(&m, 0, sizeof(m));
        m.topic = "T";
        m.topic_len = 1;
        m.body = payload;
        m.body_len = sizeof(payload);
        m.queue_offset = 10 + i;
        CHECK(rmq__msg_encode_stored(&body, &m) == 0);
    }
    rmq_rbuf_t *frame = rmq__rbuf_new(body.len + 500); /* a header before the body */
    memcpy(frame->data + 500, body.data, body.len);
    rmq_msgset_t *set = NULL;
    char err[128];
    CHECK(rmq__msgset_decode(frame, frame->data + 500, body.len, "b", 0, 14, &set, err,
                             sizeof(err)) == 0);
    rmq__rbuf_release(frame);
    CHECK(set->n == 4);
    CHECK(set->mem >= body.len + 500);
    rmq_pq_t pq;
    rmq__pq_init(&pq, "T@b#6");
    rmq_msg_t *plain = mk(20, 7); /* no set: counts its body */
    for (int i = 0; i < 4; i++) CHECK(rmq__pq_put(&pq, &set->msgs[i]) == 1);
    CHECK(rmq__pq_put(&pq, plain) == 1);
    CHECK(pq.bytes == 4 * 1000 + 7);
    CHECK(pq.mem == (int64_t)set->mem + 7);
    rmq_msg_t *first3[] = {&set->msgs[0], &set->msgs[1], &set->msgs[2]};
    rmq__pq_remove(&pq, first3, 3);
    /* One message left keeps the whole frame: 1000 bytes of body, the whole set held. */
    CHECK(pq.bytes == 1000 + 7 && pq.mem == (int64_t)set->mem + 7);
    rmq_msg_t *last = &set->msgs[3];
    rmq__pq_remove(&pq, &last, 1);
    CHECK(pq.bytes == 7 && pq.mem == 7);
    CHECK(rmq__pq_put(&pq, &set->msgs[1]) == 1);
    CHECK(pq.mem == (int64_t)set->mem + 7);
    rmq__pq_clear(&pq, NULL, NULL);
    CHECK(pq.mem == 0 && set->pq_held == 0);
    rmq__pq_free(&pq);
    for (int i = 0; i < 4; i++) rmq__msg_release(&set->msgs[i]);
    rmq__msgset_release(set);
    rmq__buf_free(&body);
    free(plain);
}

static int cleared;
static void on_clear(void *ud, rmq_msg_t *m)
{
    int64_t *last = ud;
    CHECK(m->queue_offset > *last);
    *last = m->queue_offset;
    cleared++;
}

static void test_clear_and_state(void)
{
    rmq_pq_t pq;
    rmq__pq_init(&pq, "T@b#2");
    CHECK(pq.state == RMQ_PQ_STARTING);
    rmq__pq_set_state(&pq, RMQ_PQ_ACTIVE);
    CHECK(strcmp(rmq__pq_state_name(pq.state), "ACTIVE") == 0);
    rmq_msg_t *m[5];
    for (int i = 0; i < 5; i++) m[i] = mk(i * 3, 1), rmq__pq_put(&pq, m[i]);
    int64_t last = -1;
    rmq__pq_clear(&pq, on_clear, &last);
    CHECK(cleared == 5 && pq.count == 0 && pq.bytes == 0);
    rmq__pq_set_state(&pq, RMQ_PQ_DROPPED);
    CHECK(strcmp(rmq__pq_state_name(pq.state), "DROPPED") == 0);
    rmq__pq_free(&pq);
    for (int i = 0; i < 5; i++) free(m[i]);
}

/*
 * Random puts/removes against a reference: the committed offset is exactly Java's, and the index
 * stays proportional to the count. Offsets start above 2^31 with sparse gaps: mostly dense,
 * some short gaps (filtered tags), a few of 50M offsets.
 */
static void test_random_model(void)
{
    enum { N = 20000 };
    rmq_pq_t pq;
    rmq__pq_init(&pq, "T@b#3");
    rmq_msg_t **all = calloc(N, sizeof(*all));
    int64_t *offs = calloc(N, sizeof(*offs));
    char *held = calloc(N, 1);
    int next = 0, nheld = 0;
    int64_t qmax = 0;
    unsigned seed = 12345;
    int64_t o = ((int64_t)1 << 31) - 3;
    for (int i = 0; i < N; i++) {
        seed = seed * 1103515245u + 12345u;
        unsigned r = (seed >> 16) & 0x7fff;
        o += r % 97 == 0 ? 50000000 : r % 5 == 0 ? 1 + (int64_t)(r % 300) : 1;
        offs[i] = o;
    }
    for (int step = 0; step < 200000; step++) {
        seed = seed * 1103515245u + 12345u;
        unsigned r = (seed >> 16) & 0x7fff;
        if ((r % 3 == 0 || nheld == 0) && next < N) {
            /* Pull a batch of up to 32 (some of them filtered by the client). */
            int k = 1 + (int)(r % 32);
            for (int i = 0; i < k && next < N; i++) {
                if ((r + (unsigned)i) % 7 != 0) {
                    all[next] = mk(offs[next], 1 + (uint32_t)(next % 13));
                    CHECK(rmq__pq_put(&pq, all[next]) == 1);
                    held[next] = 1;
                    nheld++;
                    qmax = offs[next];
                }
                next++;
            }
        } else if (nheld > 0) {
            /* Resolve a random held message. */
            int pick = (int)(r * 7919u % (unsigned)next);
            while (!held[pick]) pick = (pick + 1) % next;
            int64_t got = rmq__pq_remove(&pq, &all[pick], 1);
            held[pick] = 0;
            nheld--;
            free(all[pick]);
            all[pick] = NULL;
            int64_t want = qmax + 1;
            for (int i = 0; i < next; i++)
                if (held[i]) {
                    want = offs[i];
                    break;
                }
            CHECK(got == want);
            if (got != want) break;
        }
        CHECK(pq.count == nheld);
        CHECK(pq.mem == pq.bytes); /* no decoded sets here: each message counts its body */
        CHECKF(pq.cap <= 8 * ((uint32_t)nheld + 32), "capacity %u for %d held", pq.cap, nheld);
        if (next >= N && nheld == 0) break;
    }
    CHECK(next == N && nheld == 0);
    for (int i = 0; i < N; i++) free(all[i]);
    free(all);
    free(offs);
    free(held);
    rmq__pq_free(&pq);
}

/* rmq__pq_next: the held message with the smallest offset above a given one, across gaps. */
static void test_next(void)
{
    rmq_pq_t pq;
    rmq__pq_init(&pq, "T@b#0");
    CHECK(rmq__pq_next(&pq, 0) == NULL);
    int64_t offs[] = {10, 11, 15, 300};
    rmq_msg_t *m[4];
    for (int i = 0; i < 4; i++) {
        m[i] = mk(offs[i], 1);
        CHECK(rmq__pq_put(&pq, m[i]) == 1);
    }
    CHECK(rmq__pq_next(&pq, -1) == m[0]);
    CHECK(rmq__pq_next(&pq, 10) == m[1]);
    CHECK(rmq__pq_next(&pq, 11) == m[2]);
    CHECK(rmq__pq_next(&pq, 12) == m[2]);
    CHECK(rmq__pq_next(&pq, 15) == m[3]);
    CHECK(rmq__pq_next(&pq, 300) == NULL);
    rmq__pq_remove(&pq, &m[2], 1);
    CHECK(rmq__pq_next(&pq, 11) == m[3]);
    rmq__pq_free(&pq);
    for (int i = 0; i < 4; i++) free(m[i]);
}

/* Queue offsets as a damaged or hostile broker may send them (any int64): the span and the
 * accumulated count saturate instead of overflowing (undefined; the UBSan build stops there). */
static void test_extreme_offsets(void)
{
    rmq_pq_t pq;
    rmq__pq_init(&pq, "T@b#0");
    rmq_msg_t *lo = mk(INT64_MIN + 1, 1), *hi = mk(INT64_MAX - 1, 1);
    hi->max_offset = INT64_MAX;
    lo->max_offset = INT64_MAX;
    CHECK(rmq__pq_put(&pq, lo) == 1);
    CHECK(pq.acc_cnt == INT64_MAX);
    CHECK(rmq__pq_put(&pq, hi) == 1);
    CHECK(pq.acc_cnt == 1);
    CHECK(rmq__pq_max_span(&pq) == INT64_MAX);
    CHECK(rmq__pq_remove(&pq, &lo, 1) == INT64_MAX - 1);
    CHECK(rmq__pq_max_span(&pq) == 0);
    CHECK(rmq__pq_remove(&pq, &hi, 1) == INT64_MAX); /* queueOffsetMax + 1 */
    rmq__pq_free(&pq);
    free(lo);
    free(hi);
}

int main(void)
{
    test_java_semantics();
    test_next();
    test_extreme_offsets();
    test_gaps_and_growth();
    test_clear_and_state();
    test_random_model();
    test_sparse_gaps();
    test_pinned_memory();
    return test_report("test_process_queue");
}
