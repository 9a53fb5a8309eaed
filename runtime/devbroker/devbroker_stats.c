/*
 * devbroker_stats.c -- the development broker's put/get counters, as the Java broker keeps them
 * (BrokerStatsManager: TOPIC_PUT_NUMS, TOPIC_PUT_SIZE, GROUP_GET_NUMS, GROUP_GET_SIZE,
 * SNDBCK_PUT_NUMS, BROKER_PUT_NUMS, BROKER_GET_NUMS; StoreStatsService: put/get totals and
 * their 10 s / 60 s / 600 s rates). VIEW_BROKER_STATS_DATA, GET_BROKER_RUNTIME_INFO and the
 * consumeTps of GET_CONSUME_STATS read them (devbroker_admin.c).
 *
 * A stats item counts a value (messages, bytes) and the number of additions ("times") in
 * buckets: 10 s buckets for the last minute, 1 min buckets for the last hour, 1 h buckets for
 * the last day. A window's sum is the sum of its buckets, its tps the sum per second of the
 * window (or of the item's life when shorter), its avgpt the sum per addition, as
 * StatsItem.computeStatsData works them out from its samples. An item exists from its first
 * addition: asking for one that never counted anything is "The stats <NAME> <KEY> not exist",
 * as with the real broker.
 *
 * Ownership: a broker's db_stats_t (b->stats, created on first use) owns its items.
 * Threads: the broker thread only.
 */
#include "devbroker_int.h"
#include "protocol/sql92.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_N 7   /* 10 s buckets: the last minute */
#define HOUR_N 61 /* 1 min buckets: the last hour */
#define DAY_N 25  /* 1 h buckets: the last day */
#define SEC_N 601 /* 1 s buckets: the store's 10 s / 60 s / 600 s rates */

typedef struct bucket {
    int64_t start, value, times;
} bucket_t;

struct db_stat_item {
    int64_t created_ms; /* wall clock */
    int64_t value, times;
    bucket_t min[MIN_N], hour[HOUR_N], day[DAY_N];
};

/* A store-level rate (StoreStatsService's sampled totals). */
typedef struct rate {
    int64_t created_ms, total;
    bucket_t sec[SEC_N];
} rate_t;

static const char *const stat_names[DB_STAT_N] = {
    "TOPIC_PUT_NUMS",  "TOPIC_PUT_SIZE",  "GROUP_GET_NUMS", "GROUP_GET_SIZE",
    "SNDBCK_PUT_NUMS", "BROKER_PUT_NUMS", "BROKER_GET_NUMS"};

enum { R_PUT, R_GET_FOUND, R_GET_MISS, R_GET_TOTAL, R_GET_TRANSFERRED, R_N };

struct db_stats {
    db_map_t items[DB_STAT_N]; /* key -> db_stat_item_t */
    rate_t rates[R_N];
    int64_t put_size_total;
};

static db_stats_t *stats_of(db_broker_t *b)
{
    if (!b->stats) {
        b->stats = rmq__xcalloc(1, sizeof(*b->stats));
        int64_t now = rmq__now_ms();
        for (int i = 0; i < R_N; i++)
            b->stats->rates[i].created_ms = now;
    }
    return b->stats;
}

void rmq__db_stats_free(db_broker_t *b)
{
    if (!b->stats) return;
    for (int i = 0; i < DB_STAT_N; i++)
        rmq__dbmap_free(&b->stats->items[i], free);
    free(b->stats);
    b->stats = NULL;
}

int rmq__db_stats_name(const char *name)
{
    for (int i = 0; i < DB_STAT_N; i++)
        if (strcmp(stat_names[i], name) == 0) return i;
    return -1;
}

static void bucket_add(bucket_t *bk, int n, int64_t len, int64_t now, int64_t v, int64_t t)
{
    int64_t start = now / len * len;
    bucket_t *x = &bk[(start / len) % n];
    if (x->start != start) {
        x->start = start;
        x->value = 0;
        x->times = 0;
    }
    x->value += v;
    x->times += t;
}

/* Sum of the buckets of the last span ms (the current, partial bucket included). */
static void bucket_sum(const bucket_t *bk, int n, int64_t len, int64_t now, int64_t span,
                       int64_t *v, int64_t *t)
{
    int64_t cur = now / len * len, from = cur - span + len;
    *v = 0;
    if (t) *t = 0;
    for (int i = 0; i < n; i++) {
        if (bk[i].start < from || bk[i].start > cur) continue;
        *v += bk[i].value;
        if (t) *t += bk[i].times;
    }
}

void rmq__db_stats_add(db_broker_t *b, int name, const char *key, int64_t value, int64_t times)
{
    db_stats_t *s = stats_of(b);
    db_stat_item_t *it = rmq__dbmap_get(&s->items[name], key);
    int64_t now = rmq__now_ms();
    if (!it) {
        it = rmq__xcalloc(1, sizeof(*it));
        it->created_ms = now;
        rmq__dbmap_put(&s->items[name], key, it);
    }
    it->value += value;
    it->times += times;
    bucket_add(it->min, MIN_N, 10000, now, value, times);
    bucket_add(it->hour, HOUR_N, 60000, now, value, times);
    bucket_add(it->day, DAY_N, 3600000, now, value, times);
}

static void rate_add(rate_t *r, int64_t v)
{
    r->total += v;
    bucket_add(r->sec, SEC_N, 1000, rmq__now_ms(), v, 1);
}

/* Messages per second over the last span ms (or the rate's life when shorter). */
static double rate_tps(const rate_t *r, int64_t span)
{
    int64_t now = rmq__now_ms(), v;
    bucket_sum(r->sec, SEC_N, 1000, now, span, &v, NULL);
    int64_t life = now - r->created_ms;
    int64_t el = life < span ? life : span;
    if (el < 1000) el = 1000;
    return (double)v * 1000.0 / (double)el;
}

static void stat_key(char *out, size_t size, const char *topic, const char *group)
{
    /* BrokerStatsManager.buildStatsKey */
    snprintf(out, size, "%s@%s", topic, group);
}

void rmq__db_stats_on_put(db_broker_t *b, const char *topic, int64_t msgs, int64_t bytes)
{
    /* SendMessageProcessor: incTopicPutNums(topic, msgs, 1), incTopicPutSize, incBrokerPutNums. */
    rmq__db_stats_add(b, DB_STAT_TOPIC_PUT_NUMS, topic, msgs, 1);
    rmq__db_stats_add(b, DB_STAT_TOPIC_PUT_SIZE, topic, bytes, 1);
    rmq__db_stats_add(b, DB_STAT_BROKER_PUT_NUMS, b->node.db->cluster, msgs, 0);
}

void rmq__db_stats_on_store(db_broker_t *b, int64_t bytes)
{
    /* StoreStatsService: every message the store takes (sent, sent back, delivered after its
     * delay level) counts in putMessageTimesTotal and putMessageSizeTotal. */
    db_stats_t *s = stats_of(b);
    rate_add(&s->rates[R_PUT], 1);
    s->put_size_total += bytes;
}

void rmq__db_stats_on_get(db_broker_t *b, const char *topic, const char *group, int64_t msgs,
                          int64_t bytes)
{
    db_stats_t *s = stats_of(b);
    rate_add(&s->rates[R_GET_TOTAL], 1);
    if (msgs <= 0) {
        rate_add(&s->rates[R_GET_MISS], 1);
        return;
    }
    /* PullMessageProcessor on FOUND: incGroupGetNums, incGroupGetSize, incBrokerGetNums. */
    char key[600];
    stat_key(key, sizeof(key), topic, group);
    rmq__db_stats_add(b, DB_STAT_GROUP_GET_NUMS, key, msgs, 1);
    rmq__db_stats_add(b, DB_STAT_GROUP_GET_SIZE, key, bytes, 1);
    rmq__db_stats_add(b, DB_STAT_BROKER_GET_NUMS, b->node.db->cluster, msgs, 0);
    rate_add(&s->rates[R_GET_FOUND], 1);
    rate_add(&s->rates[R_GET_TRANSFERRED], msgs);
}

void rmq__db_stats_on_send_back(db_broker_t *b, const char *topic, const char *group)
{
    char key[600];
    stat_key(key, sizeof(key), topic, group);
    rmq__db_stats_add(b, DB_STAT_SNDBCK_PUT_NUMS, key, 1, 1);
}

void rmq__db_java_double(rmq_buf_t *o, double d)
{
    char num[48];
    rmq__java_double_str(d, num, sizeof(num));
    rmq__buf_append(o, num, strlen(num));
}

/* One window as BrokerStatsItem: {"avgpt":..,"sum":..,"tps":..} (fastjson's sorted keys). */
static void window_json(rmq_buf_t *o, const db_stat_item_t *it, const bucket_t *bk, int n,
                        int64_t len, int64_t span, int64_t now)
{
    int64_t v, t;
    bucket_sum(bk, n, len, now, span, &v, &t);
    int64_t life = now - it->created_ms;
    int64_t el = life < span ? life : span;
    if (el < 1000) el = 1000;
    rmq__buf_appendf(o, "{\"avgpt\":");
    rmq__db_java_double(o, t > 0 ? (double)v / (double)t : 0.0);
    rmq__buf_appendf(o, ",\"sum\":%lld,\"tps\":", (long long)v);
    rmq__db_java_double(o, (double)v * 1000.0 / (double)el);
    rmq__buf_append(o, "}", 1);
}

int rmq__db_stats_view(db_broker_t *b, int name, const char *key, rmq_buf_t *o)
{
    db_stat_item_t *it = b->stats ? rmq__dbmap_get(&b->stats->items[name], key) : NULL;
    if (!it) return -1;
    int64_t now = rmq__now_ms();
    rmq__buf_appendf(o, "{\"statsDay\":");
    window_json(o, it, it->day, DAY_N, 3600000, 86400000, now);
    rmq__buf_appendf(o, ",\"statsHour\":");
    window_json(o, it, it->hour, HOUR_N, 60000, 3600000, now);
    rmq__buf_appendf(o, ",\"statsMinute\":");
    window_json(o, it, it->min, MIN_N, 10000, 60000, now);
    rmq__buf_append(o, "}", 1);
    return 0;
}

double rmq__db_stats_group_tps(db_broker_t *b, const char *topic, const char *group)
{
    /* BrokerStatsManager.tpsGroupGetNums: the minute tps of GROUP_GET_NUMS topic@group. */
    char key[600];
    stat_key(key, sizeof(key), topic, group);
    db_stat_item_t *it =
        b->stats ? rmq__dbmap_get(&b->stats->items[DB_STAT_GROUP_GET_NUMS], key) : NULL;
    if (!it) return 0.0;
    int64_t now = rmq__now_ms(), v;
    bucket_sum(it->min, MIN_N, 10000, now, 60000, &v, NULL);
    int64_t life = now - it->created_ms;
    int64_t el = life < 60000 ? life : 60000;
    if (el < 1000) el = 1000;
    return (double)v * 1000.0 / (double)el;
}

void rmq__db_stats_totals(db_broker_t *b, db_stats_totals_t *out)
{
    db_stats_t *s = stats_of(b);
    memset(out, 0, sizeof(*out));
    out->put_times = s->rates[R_PUT].total;
    out->put_size = s->put_size_total;
    out->get_transferred = s->rates[R_GET_TRANSFERRED].total;
    static const int64_t spans[3] = {10000, 60000, 600000};
    for (int k = 0; k < 3; k++) {
        out->put_tps[k] = rate_tps(&s->rates[R_PUT], spans[k]);
        out->get_found_tps[k] = rate_tps(&s->rates[R_GET_FOUND], spans[k]);
        out->get_miss_tps[k] = rate_tps(&s->rates[R_GET_MISS], spans[k]);
        out->get_total_tps[k] = rate_tps(&s->rates[R_GET_TOTAL], spans[k]);
        out->get_transferred_tps[k] = rate_tps(&s->rates[R_GET_TRANSFERRED], spans[k]);
    }
}
