/*
 * test_stats.c -- the statistics at the C level: Java's StatsItem sampling and windows (the
 * arithmetic of StatsItem.computeStatsData and ConsumerStatsManager.consumeStatus), histogram
 * bucket edges (le is inclusive), snapshot publishing and reference counts, the renderers
 * (label escaping, cumulative buckets, the JSON shape) and the metrics_listen parser.
 */
#include "consumer/metrics_http.h"
#include "consumer/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static int near(double a, double b)
{
    return fabs(a - b) < 1e-9;
}

static void test_stats_item(void)
{
    rmq_stats_item_t it;
    memset(&it, 0, sizeof(it));
    /* No addition yet: the item does not exist, sampling records nothing. */
    rmq__stats_item_sample(&it, 1, 1000);
    CHECK(it.n_minute == 0);
    rmq_stats_window_t w = rmq__stats_item_window(&it, 1);
    CHECK(w.sum == 0 && w.tps == 0 && w.avgpt == 0);
    /* Two additions, then the first sample: a zero one 10 s earlier, then (times, value). */
    rmq__stats_item_add(&it, 30);
    rmq__stats_item_add(&it, 50);
    rmq__stats_item_sample(&it, 1, 100000);
    CHECK(it.n_minute == 2);
    CHECK(it.minute[0].ts_ms == 90000 && it.minute[0].times == 0 && it.minute[0].value == 0);
    w = rmq__stats_item_window(&it, 1);
    CHECK(w.sum == 80);
    CHECKF(near(w.tps, 8.0), "%g", w.tps);      /* 80 over 10 s */
    CHECKF(near(w.avgpt, 40.0), "%g", w.avgpt); /* 80 over 2 additions */
    /* Eight more samples: only the last 7 stay (a minute), the sum is last - first. */
    for (int i = 1; i <= 8; i++) {
        rmq__stats_item_add(&it, 10);
        rmq__stats_item_sample(&it, 1, 100000 + i * 10000);
    }
    CHECK(it.n_minute == RMQ_STATS_WINDOW);
    CHECK(it.minute[0].ts_ms == 120000);
    w = rmq__stats_item_window(&it, 1);
    CHECK(w.sum == 60);
    CHECKF(near(w.tps, 1.0), "%g", w.tps);
    CHECKF(near(w.avgpt, 10.0), "%g", w.avgpt);
    /* The hour list is separate: 10-minute period, same rules. */
    rmq__stats_item_sample(&it, 0, 2000000);
    w = rmq__stats_item_window(&it, 0);
    CHECK(it.n_hour == 2 && it.hour[0].ts_ms == 2000000 - 600000);
    CHECK(w.sum == 160);

    /* consumeStatus: consumeRT falls back to the hour when the minute saw nothing, and
     * consumeFailedMsgs is the hour's sum. */
    rmq_topic_stats_t t;
    memset(&t, 0, sizeof(t));
    rmq__stats_item_add(&t.j_consume_rt, 7);
    rmq__stats_item_add(&t.j_consume_failed, 5);
    rmq__stats_item_sample(&t.j_consume_rt, 0, 600000);
    rmq__stats_item_sample(&t.j_consume_failed, 0, 600000);
    rmq__stats_item_sample(&t.j_consume_failed, 1, 600000);
    rmq_consume_status_t cs;
    rmq__topic_consume_status(&t, &cs);
    CHECKF(near(cs.consume_rt, 7.0), "%g", cs.consume_rt);
    CHECK(cs.consume_failed_msgs == 5);
    CHECKF(near(cs.consume_failed_tps, 0.5), "%g", cs.consume_failed_tps);
    CHECK(cs.pull_tps == 0 && cs.consume_ok_tps == 0);
}

static void test_hist(void)
{
    rmq_hist_t h;
    memset(&h, 0, sizeof(h));
    rmq__hist_observe(&h, 100000); /* exactly 0.0001 s: the first bucket (le is inclusive) */
    rmq__hist_observe(&h, 100001); /* just above: the second */
    rmq__hist_observe(&h, -5);     /* clock skew counts as 0 */
    rmq__hist_observe(&h, 4000LL * 1000000000); /* past the last bound: +Inf */
    CHECK(h.counts[0] == 2 && h.counts[1] == 1 && h.counts[RMQ_HIST_BOUNDS] == 1);
    CHECK(h.count == 4);
    CHECK(h.sum_ns == 100000 + 100001 + 4000LL * 1000000000);
    for (int i = 1; i < RMQ_HIST_BOUNDS; i++)
        CHECK(rmq__hist_bounds_ns[i] > rmq__hist_bounds_ns[i - 1]);
    /* Every edge: a bound itself lands in its bucket, one ns more in the next one. */
    for (int i = 0; i < RMQ_HIST_BOUNDS; i++) {
        memset(&h, 0, sizeof(h));
        rmq__hist_observe(&h, rmq__hist_bounds_ns[i]);
        rmq__hist_observe(&h, rmq__hist_bounds_ns[i] + 1);
        rmq__hist_observe(&h, rmq__hist_bounds_ns[i] - 1);
        CHECKF(h.counts[i] == 2 && h.counts[i + 1] == 1, "bucket %d", i);
    }
    memset(&h, 0, sizeof(h));
    rmq__hist_observe(&h, INT64_MAX);
    CHECK(h.counts[RMQ_HIST_BOUNDS] == 1);
}

static rmq_stats_snap_t *sample_snap(void)
{
    rmq_stats_snap_t *s = calloc(1, sizeof(*s));
    s->refs = 1;
    s->group = strdup("g\"1\\");
    s->client_id = strdup("1.2.3.4@1");
    s->namesrv = strdup("127.0.0.1:9876");
    s->state = "RUNNING";
    s->running = s->healthy = s->namesrv_connected = 1;
    snprintf(s->reason, sizeof(s->reason), "ok");
    s->n_topics = 1;
    s->topics = calloc(1, sizeof(*s->topics));
    s->topics[0].topic = strdup("T\nx");
    s->topics[0].consumed = 42;
    s->topics[0].pulls[RMQ_PULL_R_FOUND] = 3;
    rmq__hist_observe(&s->topics[0].process, 2000000);
    rmq__hist_observe(&s->topics[0].process, 20000000);
    s->n_queues = 1;
    s->queues = calloc(1, sizeof(*s->queues));
    s->queues[0].broker = strdup("broker-a");
    s->queues[0].queue_id = 3;
    s->queues[0].lag = 9;
    s->queues[0].committed = -1;
    s->n_threads = 2;
    s->lua_memory = calloc(2, sizeof(int64_t));
    s->lua_memory[1] = 12345;
    return s;
}

static void test_render(void)
{
    rmq_stats_snap_t *s = sample_snap();
    rmq_buf_t b;
    rmq__buf_init(&b);
    rmq__stats_prometheus(s, NULL, &b);
    rmq__buf_append(&b, "", 1);
    const char *t = b.data;
    /* Label values escaped: \ " and newline. */
    CHECKF(strstr(t, "rmqlua_consumed_messages_total{group=\"g\\\"1\\\\\",topic=\"T\\nx\"} 42\n") !=
               NULL,
           "%s", t);
    CHECK(strstr(t, "# HELP rmqlua_consumed_messages_total ") != NULL);
    CHECK(strstr(t, "# TYPE rmqlua_consumed_messages_total counter\n") != NULL);
    CHECK(strstr(t, ",result=\"found\"} 3\n") != NULL);
    CHECK(strstr(t, ",broker=\"broker-a\",queue=\"3\"} 9\n") != NULL);
    CHECK(strstr(t, "rmqlua_committed_offset{group=\"g\\\"1\\\\\",topic=\"T\\nx\",broker=\"broker-"
                    "a\",queue=\"3\"} -1\n") != NULL);
    CHECK(strstr(t, "rmqlua_lua_memory_bytes{group=\"g\\\"1\\\\\",thread=\"2\"} 12345\n") != NULL);
    /* Cumulative buckets: 2 ms falls in le=0.0025, 20 ms in le=0.025. */
    CHECK(strstr(t, "le=\"0.001\"} 0\n") != NULL);
    CHECK(strstr(t, "le=\"0.0025\"} 1\n") != NULL);
    CHECK(strstr(t, "le=\"0.025\"} 2\n") != NULL);
    CHECK(strstr(t, "le=\"+Inf\"} 2\n") != NULL);
    CHECK(
        strstr(t, "rmqlua_process_time_seconds_count{group=\"g\\\"1\\\\\",topic=\"T\\nx\"} 2\n") !=
        NULL);
    CHECK(strstr(t, "# TYPE process_cpu_seconds_total counter\n") != NULL);
    CHECK(strstr(t, "process_open_fds") == NULL); /* no /proc figures were given */
    /* Every line is a comment or a sample ending in a number. */
    for (const char *l = t; *l; l = strchr(l, '\n') + 1) {
        const char *e = strchr(l, '\n');
        CHECK(e != NULL);
        if (!e) break;
        CHECK(*l == '#' || (e[-1] >= '0' && e[-1] <= '9') || e[-1] == 'f');
    }
    rmq__buf_free(&b);

    rmq_proc_stats_t p;
    rmq__stats_proc_read(&p);
    CHECK(p.ok && p.rss_bytes > 0 && p.open_fds > 0 && p.cpu_seconds >= 0 && p.start_time_s > 1e9);
    json_t *j = rmq__stats_json(s, &p);
    CHECK(json_integer_value(json_object_get(json_object_get(json_object_get(j, "topics"), "T\nx"),
                                             "consumed")) == 42);
    json_t *h = json_object_get(
        json_object_get(json_object_get(json_object_get(j, "topics"), "T\nx"), "histograms"),
        "process_time_seconds");
    CHECK(json_array_size(json_object_get(h, "le")) == RMQ_HIST_BOUNDS);
    CHECK(json_array_size(json_object_get(h, "counts")) == RMQ_HIST_BOUNDS + 1);
    CHECK(json_integer_value(json_object_get(json_object_get(j, "process"), "open_fds")) > 0);
    CHECK(json_is_true(json_object_get(json_object_get(j, "health"), "healthy")));
    json_decref(j);

    /* Publishing: readers keep their reference after the next publish. */
    rmq_stats_pub_t *pub = rmq__stats_pub_new();
    CHECK(rmq__stats_acquire(pub) == NULL);
    rmq__stats_publish(pub, s);
    rmq_stats_snap_t *r = rmq__stats_acquire(pub);
    CHECK(r == s && s->refs == 2);
    rmq__stats_publish(pub, sample_snap());
    CHECK(r->refs == 1 && r->topics[0].consumed == 42);
    rmq__stats_snap_release(r);
    rmq__stats_pub_destroy(pub);
}

static void test_listen(void)
{
    char host[64], err[256];
    int port = -1;
    CHECK(rmq__metrics_parse_listen("127.0.0.1:9100", host, sizeof(host), &port, err,
                                    sizeof(err)) == 0);
    CHECK(!strcmp(host, "127.0.0.1") && port == 9100);
    CHECK(rmq__metrics_parse_listen("[::1]:0", host, sizeof(host), &port, err, sizeof(err)) == 0);
    CHECK(!strcmp(host, "::1") && port == 0);
    CHECK(rmq__metrics_parse_listen("localhost:80", host, sizeof(host), &port, err, sizeof(err)) ==
          0);
    CHECK(rmq__metrics_parse_listen("9100", NULL, 0, NULL, err, sizeof(err)) == -1);
    CHECK(strstr(err, "expected host:port") != NULL);
    CHECK(rmq__metrics_parse_listen("h:65536", NULL, 0, NULL, err, sizeof(err)) == -1);
    CHECK(strstr(err, "0..65535") != NULL);
    CHECK(rmq__metrics_parse_listen("h:", NULL, 0, NULL, err, sizeof(err)) == -1);
    CHECK(rmq__metrics_parse_listen("[::1:80", NULL, 0, NULL, err, sizeof(err)) == -1);
    /* The endpoint itself: port 0 binds a free port and reports it; a second bind of it fails. */
    rmq_stats_pub_t *pub = rmq__stats_pub_new();
    rmq_metrics_t *m = NULL, *m2 = NULL;
    CHECK(rmq__metrics_start("127.0.0.1:0", pub, &m, err, sizeof(err)) == 0);
    if (m) {
        CHECK(rmq__metrics_port(m) > 0);
        char again[64];
        snprintf(again, sizeof(again), "127.0.0.1:%d", rmq__metrics_port(m));
        CHECK(!strcmp(rmq__metrics_address(m), again));
        CHECK(rmq__metrics_start(again, pub, &m2, err, sizeof(err)) == RMQ_ERR_IO);
        CHECK(m2 == NULL && strstr(err, "cannot listen on") != NULL);
        rmq__metrics_stop(m);
    }
    rmq__stats_pub_destroy(pub);
}

int main(void)
{
    test_stats_item();
    test_hist();
    test_render();
    test_listen();
    return test_report("test_stats");
}
