/*
 * test_route.c -- fastjson-style JSON (fjson) and TopicRouteData (route) against every JSON body
 * captured from a real 4.9.4 name server, broker and client: routes in both forms (written back
 * byte for byte in the form the name server chose for the request version), object-keyed maps
 * (GET_CONSUMER_RUNNING_INFO, GET_CONSUME_STATS), the local offset file vector (pretty form),
 * the subscribe set, Java ordering and malformed input.
 */
#include "protocol/fjson.h"
#include "protocol/route.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

/* Body of a captured frame ([4 L][4 type<<24|H][header][body]) as a fresh buffer. */
/* A malformed input and the words its error must contain. */
typedef struct bad_input {
    const char *in;
    const char *msg;
} bad_input_t;

static char *frame_body(const char *session, const char *file, size_t *len)
{
    size_t n, off;
    char *raw = test_wire_frame(session, file, &n, &off), *body;
    *len = n - off;
    body = malloc(*len + 1);
    memcpy(body, raw + off, *len);
    body[*len] = '\0';
    free(raw);
    return body;
}

static json_t *find_frame(json_t *frames, const char *file)
{
    size_t i;
    json_t *f;
    json_array_foreach(frames, i, f)
    {
        if (strcmp(json_string_value(json_object_get(f, "file")), file) == 0) return f;
    }
    return NULL;
}

static int n_bodies, n_routes, n_bare, n_std, n_running, n_stats;

static void check_route_body(const char *where, json_t *frames, json_t *f, const char *body,
                             size_t len)
{
    json_t *req = find_frame(frames, json_string_value(json_object_get(f, "request_file")));
    json_t *rh = json_object_get(req, "header");
    const char *accept = json_string_value(
        json_object_get(json_object_get(rh, "extFields"), "acceptStandardJsonOnly"));
    int standard = json_integer_value(json_object_get(rh, "version")) >= 401 ||
                   (accept && strcmp(accept, "true") == 0);
    rmq_route_t *r = NULL, *other = NULL;
    char err[256];
    rmq_buf_t out;
    CHECKF(rmq__route_parse(body, len, &r, err, sizeof(err)) == 0, "%s: %s", where, err);
    if (!r) return;
    n_routes++;
    standard ? n_std++ : n_bare++;
    CHECK(strstr(body, standard ? "{\"0\":" : "{0:") != NULL);
    CHECK(r->n_qds >= 1 && r->n_bds == 1);
    CHECK(strcmp(r->bds[0].broker_name, "broker-a") == 0);
    CHECK(strcmp(r->bds[0].cluster, "DefaultCluster") == 0);
    CHECK(r->bds[0].n_addrs == 1 && r->bds[0].addrs[0].id == 0);
    CHECK(strcmp(rmq__route_master_addr(r, "broker-a"), "127.0.0.1:10911") == 0);
    CHECK(strcmp(rmq__route_any_addr(r, "broker-a"), "127.0.0.1:10911") == 0);
    CHECK(rmq__route_master_addr(r, "broker-b") == NULL);
    CHECK(r->order_topic_conf == NULL);

    /* Written back in the form the name server chose: the captured bytes. */
    rmq__buf_init(&out);
    CHECK(rmq__route_write(r, standard, &out) == 0);
    CHECKF(out.len == len && memcmp(out.data, body, len) == 0, "%s: wrote %.*s", where,
           (int)out.len, out.data);
    /* The other form parses to the same route. */
    out.len = 0;
    CHECK(rmq__route_write(r, !standard, &out) == 0);
    CHECK(rmq__route_parse(out.data, out.len, &other, err, sizeof(err)) == 0);
    CHECK(other && rmq__route_equal(r, other));
    rmq__route_free(other);
    rmq__buf_free(&out);

    /* Subscribe set: readQueueNums queues, sorted. */
    rmq_mq_t *mqs;
    int n;
    CHECK(rmq__route_subscribe_mqs(r, "CapTopic", &mqs, &n) == 0);
    CHECK(n == (r->qds[0].perm & RMQ_PERM_READ ? r->qds[0].read_queue_nums : 0));
    for (int i = 0; i < n; i++)
        CHECK(mqs[i].queue_id == i && strcmp(mqs[i].broker_name, "broker-a") == 0 &&
              strcmp(mqs[i].topic, "CapTopic") == 0);
    rmq__mqs_free(mqs, n);
    rmq__route_free(r);
}

static void check_mq_key(const rmq_fj_t *k)
{
    CHECK(k && k->type == RMQ_FJ_OBJECT && k->len == 3);
    CHECK(rmq__fj_get_str(k, "brokerName") &&
          strcmp(rmq__fj_get_str(k, "brokerName"), "broker-a") == 0);
    const char *t = rmq__fj_get_str(k, "topic");
    CHECK(t && (strcmp(t, "CapTopic") == 0 || strcmp(t, "%RETRY%cap_status_g") == 0));
    int32_t q = -1;
    CHECK(rmq__fj_get_i32(k, "queueId", &q) == 0 && q >= 0 && q < 4);
}

static void check_running_info(const rmq_fj_t *root)
{
    const rmq_fj_t *mqt = rmq__fj_get(root, "mqTable"), *v;
    int64_t x;
    n_running++;
    CHECK(mqt && mqt->type == RMQ_FJ_OBJECT && mqt->len == 5);
    for (v = mqt ? mqt->child : NULL; v; v = v->next) {
        check_mq_key(v->key);
        CHECK(rmq__fj_get_i64(v, "commitOffset", &x) == 0 && x >= 0);
        CHECK(rmq__fj_get_bool(v, "droped") == 0 && rmq__fj_get_bool(v, "locked") == 0);
    }
    /* The second key: {"brokerName":"broker-a","queueId":0,"topic":"CapTopic"} -> commitOffset 5.
     */
    v = mqt->child->next;
    CHECK(strcmp(rmq__fj_get_str(v->key, "topic"), "CapTopic") == 0);
    CHECK(rmq__fj_get_i64(v, "commitOffset", &x) == 0 && x == 5);
    const rmq_fj_t *props = rmq__fj_get(root, "properties");
    CHECK(props && rmq__fj_get_str(props, "PROP_CONSUME_TYPE") &&
          strcmp(rmq__fj_get_str(props, "PROP_CONSUME_TYPE"), "CONSUME_PASSIVELY") == 0);
    CHECK(rmq__fj_get_str(props, "PROP_NAMESERVER_ADDR") &&
          strcmp(rmq__fj_get_str(props, "PROP_NAMESERVER_ADDR"), "127.0.0.1:9876;") == 0);
    CHECK(rmq__fj_get_i64(props, "PROP_CONSUMER_START_TIMESTAMP", &x) == 0 && x > 1700000000000LL);
    CHECK(rmq__fj_get(root, "subscriptionSet")->type == RMQ_FJ_ARRAY);
    CHECK(rmq__fj_get(root, "statusTable")->type == RMQ_FJ_OBJECT);
}

static void check_consume_stats(const rmq_fj_t *root)
{
    const rmq_fj_t *t = rmq__fj_get(root, "offsetTable"), *v,
                   *tps = rmq__fj_get(root, "consumeTps");
    int64_t x;
    n_stats++;
    CHECK(tps && tps->type == RMQ_FJ_NUMBER && !tps->is_int && tps->d == 2.2 &&
          strcmp(tps->s, "2.2") == 0);
    CHECK(t && t->len == 5);
    for (v = t ? t->child : NULL; v; v = v->next) {
        check_mq_key(v->key);
        CHECK(rmq__fj_get_i64(v, "brokerOffset", &x) == 0 && x >= 0);
    }
    CHECK(rmq__fj_get_i64(t->child, "consumerOffset", &x) == 0 && x == 6);
}

static void test_captures(void)
{
    char names[64][256];
    int nn = test_wire_sessions(names, 64);
    CHECK(nn > 0);
    for (int s = 0; s < nn; s++) {
        const char *session = names[s];
        char where[700];
        json_t *idx, *frames, *f;
        size_t i;
        idx = test_wire_index(session);
        if (!idx) continue;
        frames = json_object_get(idx, "frames");
        json_array_foreach(frames, i, f)
        {
            const char *file = json_string_value(json_object_get(f, "file"));
            const char *kind = json_string_value(json_object_get(f, "kind"));
            int code = (int)json_integer_value(json_object_get(f, "request_code"));
            size_t len;
            char *body, err[256];
            rmq_fjdoc_t *doc;
            rmq_buf_t out;
            if (!json_object_get(f, "body_text")) continue;
            /* GET_BROKER_CONFIG's body is properties text (MixAll.properties2String). */
            if (code == 26) continue;
            body = frame_body(session, file, &len);
            snprintf(where, sizeof(where), "%.255s/%.255s", session, file);
            CHECK(strlen(json_string_value(json_object_get(f, "body_text"))) == len);
            /* Every JSON body the Java side wrote reads and writes back byte for byte. */
            n_bodies++;
            doc = rmq__fj_parse(body, len, err, sizeof(err));
            CHECKF(doc != NULL, "%s: %s", where, err);
            if (doc) {
                rmq__buf_init(&out);
                CHECK(rmq__fj_write(&out, rmq__fj_root(doc), 0) == 0);
                CHECKF(out.len == len && memcmp(out.data, body, len) == 0, "%s: rewrote %.*s",
                       where, (int)out.len, out.data);
                rmq__buf_free(&out);
                /* The running info and consume stats of consumer cap_status_g. */
                int status_session = strcmp(session, "04_consumer_status") == 0;
                if (status_session && code == 307 && strcmp(kind, "response") == 0)
                    check_running_info(rmq__fj_root(doc));
                if (status_session && code == 208 && strcmp(kind, "response") == 0)
                    check_consume_stats(rmq__fj_root(doc));
                rmq__fj_free(doc);
            }
            if (code == 105 && strcmp(kind, "response") == 0)
                check_route_body(where, frames, f, body, len);
            free(body);
        }
        json_decref(idx);
    }
    printf("captures: %d JSON bodies, %d routes (%d standard, %d bare keys), %d running infos, "
           "%d consume stats\n",
           n_bodies, n_routes, n_std, n_bare, n_running, n_stats);
    CHECK(n_bodies >= 100 && n_routes >= 20 && n_std >= 10 && n_bare >= 2);
    CHECK(n_running >= 2 && n_stats >= 1);
}

/* ---- the local offset file (LocalFileOffsetStore.persistAll, fastjson PrettyFormat) ------ */

static void test_offsets_file(void)
{
    size_t len;
    char *file = test_fixture("spec/fixtures/vectors/offsets-file/offsets.json", &len), err[256];
    rmq_fjdoc_t *doc = rmq__fj_parse(file, len, err, sizeof(err)), *mk;
    const rmq_fj_t *t, *v;
    rmq_buf_t out;
    int n = 0;
    int64_t x;
    static const struct {
        const char *topic, *broker;
        int q;
        int64_t off;
    } want[] = {
        {"TopicOrder", "broker-b", 0, 42},
        {"TopicOrder", "broker-b", 1, 123456789},
        {"TopicOrder", "broker-b", 2, 9007199254740993LL},
        {"TopicTest", "broker-a", 2, 1024},
        {"TopicTest", "broker-a", 1, 1},
        {"TopicTest", "broker-a", 0, 0},
    };
    CHECKF(doc != NULL, "%s", err);
    if (!doc) return;
    t = rmq__fj_get(rmq__fj_root(doc), "offsetTable");
    CHECK(t && t->type == RMQ_FJ_OBJECT && t->len == 6);
    for (v = t->child; v && n < 6; v = v->next, n++) {
        int32_t q;
        CHECK(strcmp(rmq__fj_get_str(v->key, "topic"), want[n].topic) == 0);
        CHECK(strcmp(rmq__fj_get_str(v->key, "brokerName"), want[n].broker) == 0);
        CHECK(rmq__fj_get_i32(v->key, "queueId", &q) == 0 && q == want[n].q);
        CHECK(rmq__fj_i64(v, &x) == 0 && x == want[n].off); /* 2^53+1 exact */
    }
    rmq__buf_init(&out);
    CHECK(rmq__fj_write(&out, rmq__fj_root(doc), RMQ_FJ_PRETTY) == 0);
    CHECKF(out.len == len && memcmp(out.data, file, len) == 0, "pretty:\n%.*s", (int)out.len,
           out.data);

    /* Built from scratch with the same entries: the same bytes. */
    mk = rmq__fj_new();
    rmq_fj_t *root = rmq__fj_new_obj(mk), *tab = rmq__fj_new_obj(mk);
    rmq__fj_set_root(mk, root);
    rmq__fj_obj_set(mk, root, "offsetTable", tab);
    for (int i = 0; i < 6; i++)
        rmq__fj_obj_add(tab, rmq__fj_new_mq(mk, want[i].topic, want[i].broker, want[i].q),
                        rmq__fj_new_i64(mk, want[i].off));
    out.len = 0;
    CHECK(rmq__fj_write(&out, root, RMQ_FJ_PRETTY) == 0);
    CHECK(out.len == len && memcmp(out.data, file, len) == 0);
    /* Compact form: the fastjson object-key map of ResetOffsetBody / GetConsumerStatusBody. */
    out.len = 0;
    CHECK(rmq__fj_write(&out, root, 0) == 0);
    rmq__buf_append(&out, "", 1);
    CHECKF(strncmp(out.data,
                   "{\"offsetTable\":{{\"brokerName\":\"broker-b\",\"queueId\":0,\"topic\":"
                   "\"TopicOrder\"}:42,{\"brokerName\":\"broker-b\",\"queueId\":1,",
                   100) == 0,
           "%s", out.data);
    /* Empty containers stay {} and [] in both forms. */
    rmq_fj_t *e = rmq__fj_new_obj(mk);
    rmq__fj_obj_set(mk, e, "a", rmq__fj_new_obj(mk));
    rmq__fj_obj_set(mk, e, "b", rmq__fj_new_arr(mk));
    out.len = 0;
    CHECK(rmq__fj_write(&out, e, RMQ_FJ_PRETTY) == 0);
    CHECK(out.len == strlen("{\n\t\"a\":{},\n\t\"b\":[]\n}") &&
          memcmp(out.data, "{\n\t\"a\":{},\n\t\"b\":[]\n}", out.len) == 0);
    /* fastjson's own PrettyFormatTest: [{},{}] -> "[\n\t{},\n\t{}\n]". */
    rmq_fj_t *arr = rmq__fj_new_arr(mk);
    rmq__fj_arr_add(arr, rmq__fj_new_obj(mk));
    rmq__fj_arr_add(arr, rmq__fj_new_obj(mk));
    out.len = 0;
    CHECK(rmq__fj_write(&out, arr, RMQ_FJ_PRETTY) == 0);
    CHECKF(out.len == 12 && memcmp(out.data, "[\n\t{},\n\t{}\n]", 12) == 0, "%.*s", (int)out.len,
           out.data);
    rmq__fj_free(mk);
    rmq__buf_free(&out);
    rmq__fj_free(doc);
    free(file);
}

/* ---- the reader's leniency, strings, numbers and errors ---------------------------------- */

static void test_reader(void)
{
    char err[256];
    rmq_fjdoc_t *doc;
    rmq_buf_t out;
    int64_t x;
    rmq__buf_init(&out);

    /* Surrogate pairs, escapes, bare keys, whitespace, unknown keys, duplicates (last wins). */
    static const char s1[] =
        " { \"s\" : \"a\\u00e9\\u6807\\ud83d\\ude00\\n\\/\\\"\" , 7 : true, -1:null,"
        " \"d\":1, \"d\":2, \"n\":[1.5e3,-0.25,9223372036854775807,-9223372036854775808,"
        "9223372036854775808] , \"q\":\"12\"} ";
    doc = rmq__fj_parse(s1, sizeof(s1) - 1, err, sizeof(err));
    CHECKF(doc != NULL, "%s", err);
    if (doc) {
        const rmq_fj_t *r = rmq__fj_root(doc), *n;
        CHECK(strcmp(rmq__fj_get_str(r, "s"), "a\xc3\xa9\xe6\xa0\x87\xf0\x9f\x98\x80\n/\"") == 0);
        CHECK(rmq__fj_get_bool(r, "7") == 1);
        CHECK(rmq__fj_get(r, "-1")->type == RMQ_FJ_NULL);
        CHECK(rmq__fj_get_i64(r, "-1", &x) == RMQ_ERR_NOT_FOUND);
        CHECK(rmq__fj_get_i64(r, "d", &x) == 0 && x == 2);
        CHECK(rmq__fj_get_i64(r, "q", &x) == 0 && x == 12); /* Java longs sent as strings */
        CHECK(rmq__fj_get_i64(r, "s", &x) == RMQ_ERR_INVALID);
        CHECK(rmq__fj_get_i64(r, "missing", &x) == RMQ_ERR_NOT_FOUND);
        n = rmq__fj_get(r, "n");
        CHECK(n && n->len == 5);
        CHECK(!n->child->is_int && n->child->d == 1500.0);
        CHECK(n->child->next->d == -0.25);
        CHECK(n->child->next->next->is_int && n->child->next->next->i == INT64_MAX);
        CHECK(n->child->next->next->next->i == INT64_MIN);
        CHECK(!n->child->next->next->next->next->is_int); /* out of int64 range */
        CHECK(rmq__fj_get_i32(r, "7", (int32_t *)&x) == RMQ_ERR_INVALID);
        out.len = 0;
        CHECK(rmq__fj_write(&out, r, 0) == 0);
        rmq__buf_append(&out, "", 1);
        CHECKF(strcmp(out.data,
                      "{\"s\":\"a\xc3\xa9\xe6\xa0\x87\xf0\x9f\x98\x80\\n/\\\"\",7:true,-1:null,"
                      "\"d\":1,\"d\":2,\"n\":[1.5e3,-0.25,9223372036854775807,"
                      "-9223372036854775808,9223372036854775808],\"q\":\"12\"}") == 0,
               "%s", out.data);
        out.len = 0;
        CHECK(rmq__fj_write_str(&out, rmq__fj_get_str(r, "s"), strlen(rmq__fj_get_str(r, "s")),
                                RMQ_FJ_ASCII) == 0);
        rmq__buf_append(&out, "", 1);
        CHECKF(strcmp(out.data, "\"a\\u00E9\\u6807\\uD83D\\uDE00\\n\\/\\\"\"") == 0, "%s",
               out.data);
        rmq__fj_free(doc);
    }
    /* U+007F..U+009F are escaped in both forms (IOUtils.specicalFlags_doubleQuotes), other
     * non-ASCII only in the BrowserCompatible form. */
    out.len = 0;
    CHECK(rmq__fj_write_str(&out, "a\x7f\xc2\x80\xc2\x9f\xc2\xa0\xc2\xa9\xc2", 11, 0) == 0);
    CHECKF(out.len == 26 &&
               memcmp(out.data, "\"a\\u007F\\u0080\\u009F\xc2\xa0\xc2\xa9\xc2\"", 26) == 0,
           "%.*s", (int)out.len, out.data);
    out.len = 0;
    CHECK(rmq__fj_write_str(&out, "\x7f\xc2\xa9", 3, RMQ_FJ_ASCII) == 0);
    CHECK(out.len == 14 && memcmp(out.data, "\"\\u007F\\u00A9\"", 14) == 0);
    /* Control characters are written as fastjson does. */
    out.len = 0;
    CHECK(rmq__fj_write_str(&out, "\x01\t\x1f", 3, 0) == 0);
    CHECK(out.len == 16 && memcmp(out.data, "\"\\u0001\\t\\u001F\"", 16) == 0);

    /* Malformed input: the reason and the byte offset. */
    static const bad_input_t bad[] = {
        {"", "unexpected end of input at byte 0"},
        {"{", "unexpected end of input at byte 1"},
        {"{\"a\"}", "expected ':' at byte 4"},
        {"{\"a\":1 \"b\":2}", "expected ',' or '}' at byte 7"},
        {"[1,2", "unterminated array at byte 4"},
        {"[1 2]", "expected ',' or ']' at byte 3"},
        {"\"abc", "unterminated string at byte 0"},
        {"\"a\\x\"", "bad escape in string at byte 2"},
        {"\"\\u12G4\"", "bad \\u escape at byte 1"},
        {"\"a\nb\"", "control character in string at byte 2"},
        {"tru", "unexpected character at byte 0"},
        {"-", "bad number at byte 0"},
        {"1.", "bad number fraction at byte 0"},
        {"1e+", "bad number exponent at byte 0"},
        {"{} x", "trailing characters at byte 3"},
        {"@", "unexpected character at byte 0"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        doc = rmq__fj_parse(bad[i].in, strlen(bad[i].in), err, sizeof(err));
        CHECKF(doc == NULL && strstr(err, bad[i].msg), "input %zu: got \"%s\"", i, err);
        rmq__fj_free(doc);
    }
    /* Depth: 64 levels parse, 65 do not; a deep attack fails fast. */
    char deep[2100];
    for (int depth = 64; depth <= 65; depth++) {
        memset(deep, '[', (size_t)depth);
        memset(deep + depth, ']', (size_t)depth);
        doc = rmq__fj_parse(deep, (size_t)depth * 2, err, sizeof(err));
        if (depth == 64)
            CHECK(doc != NULL);
        else
            CHECKF(doc == NULL && strstr(err, "nesting deeper than 64 at byte 64"), "%s", err);
        rmq__fj_free(doc);
    }
    memset(deep, '{', sizeof(deep));
    doc = rmq__fj_parse(deep, sizeof(deep), err, sizeof(err));
    CHECK(doc == NULL && strstr(err, "nesting"));
    rmq__buf_free(&out);
}

/* ---- routes: both forms, old spellings, order config, subscribe set, Java order ---------- */

static void test_routes(void)
{
    static const char two[] =
        "{\"brokerDatas\":[{\"brokerAddrs\":{1:\"10.0.0.2:10911\",0:\"10.0.0.1:10911\"},"
        "\"brokerName\":\"broker-b\",\"cluster\":\"c1\"},{\"brokerAddrs\":{\"2\":\"10.0.0.9:"
        "10911\"},"
        "\"brokerName\":\"broker-a\",\"cluster\":\"c1\"}],\"filterServerTable\":{},"
        "\"orderTopicConf\":\"broker-b:2;broker-a:2\",\"queueDatas\":[{\"brokerName\":\"broker-b\","
        "\"perm\":6,\"readQueueNums\":2,\"topicSynFlag\":1,\"writeQueueNums\":3},{\"brokerName\":"
        "\"broker-a\",\"perm\":4,\"readQueueNums\":3,\"topicSysFlag\":0,\"writeQueueNums\":3},"
        "{\"brokerName\":\"broker-w\",\"perm\":2,\"readQueueNums\":8,\"writeQueueNums\":8},"
        "{\"brokerName\":\"broker-a\",\"perm\":6,\"readQueueNums\":1,\"writeQueueNums\":3}],"
        "\"extra\":{\"x\":[1,{}]}}";
    rmq_route_t *r = NULL, *r2 = NULL, *d;
    char err[256];
    rmq_buf_t out;
    rmq_mq_t *mqs;
    int n;
    CHECKF(rmq__route_parse(two, sizeof(two) - 1, &r, err, sizeof(err)) == 0, "%s", err);
    if (!r) return;
    CHECK(r->n_qds == 4 && r->n_bds == 2);
    CHECK(r->qds[0].topic_sys_flag == 1 && r->qds[0].write_queue_nums == 3);
    CHECK(strcmp(r->order_topic_conf, "broker-b:2;broker-a:2") == 0);
    CHECK(r->bds[0].addrs[0].id == 0 && r->bds[0].addrs[1].id == 1); /* sorted by id */
    CHECK(strcmp(rmq__route_master_addr(r, "broker-b"), "10.0.0.1:10911") == 0);
    CHECK(rmq__route_master_addr(r, "broker-a") == NULL);
    CHECK(strcmp(rmq__route_any_addr(r, "broker-a"), "10.0.0.9:10911") == 0);
    CHECK(rmq__route_any_addr(r, "broker-x") == NULL);

    /* Subscribe set: readable queue data only, sorted by brokerName then id, no duplicates. */
    CHECK(rmq__route_subscribe_mqs(r, "T", &mqs, &n) == 0);
    CHECK(n == 5);
    static const char *wb[] = {"broker-a", "broker-a", "broker-a", "broker-b", "broker-b"};
    static const int wq[] = {0, 1, 2, 0, 1};
    for (int i = 0; i < n && i < 5; i++)
        CHECK(strcmp(mqs[i].broker_name, wb[i]) == 0 && mqs[i].queue_id == wq[i] &&
              strcmp(mqs[i].topic, "T") == 0);
    rmq__mqs_free(mqs, n);

    /* Both written forms; they parse back to an equal route. */
    rmq__buf_init(&out);
    CHECK(rmq__route_write(r, 0, &out) == 0);
    rmq__buf_append(&out, "", 1);
    CHECKF(strstr(out.data, "{\"brokerAddrs\":{0:\"10.0.0.1:10911\",1:\"10.0.0.2:10911\"}") &&
               strstr(out.data, "\"filterServerTable\":{},\"orderTopicConf\":\"broker-b:2;broker-a:"
                                "2\",\"queueDatas\":[") &&
               strstr(out.data, "{\"brokerName\":\"broker-b\",\"perm\":6,\"readQueueNums\":2,"
                                "\"topicSysFlag\":1,\"writeQueueNums\":3}"),
           "%s", out.data);
    CHECK(rmq__route_parse(out.data, out.len - 1, &r2, err, sizeof(err)) == 0 &&
          rmq__route_equal(r, r2));
    rmq__route_free(r2);
    out.len = 0;
    CHECK(rmq__route_write(r, 1, &out) == 0);
    rmq__buf_append(&out, "", 1);
    CHECK(strstr(out.data,
                 "{\"brokerAddrs\":{\"0\":\"10.0.0.1:10911\",\"1\":\"10.0.0.2:10911\"}") != NULL);
    CHECK(rmq__route_parse(out.data, out.len - 1, &r2, err, sizeof(err)) == 0 &&
          rmq__route_equal(r, r2));

    /* Change detection ignores the order of queue and broker data, sees any field change. */
    d = rmq__route_dup(r);
    CHECK(d && rmq__route_equal(r, d));
    rmq_queue_data_t tq = d->qds[0];
    d->qds[0] = d->qds[1];
    d->qds[1] = tq;
    rmq_broker_data_t tb = d->bds[0];
    d->bds[0] = d->bds[1];
    d->bds[1] = tb;
    CHECK(rmq__route_equal(r, d));
    d->qds[2].perm = 6;
    CHECK(!rmq__route_equal(r, d));
    d->qds[2].perm = 2;
    CHECK(rmq__route_equal(r, d));
    d->bds[0].addrs[0].id = 3;
    CHECK(!rmq__route_equal(r, d));
    rmq__route_free(d);
    rmq__route_free(r2);
    rmq__route_free(r);

    /* Non-ASCII names: \uXXXX in the standard form, raw UTF-8 in the old one. */
    static const char utf[] =
        "{\"brokerDatas\":[{\"brokerAddrs\":{0:\"h:1\"},\"brokerName\":\"b\xe6\xa0\x87\"}],"
        "\"queueDatas\":[{\"brokerName\":\"b\\u6807\",\"perm\":6,\"readQueueNums\":1,"
        "\"writeQueueNums\":1}]}";
    CHECK(rmq__route_parse(utf, sizeof(utf) - 1, &r, err, sizeof(err)) == 0);
    CHECK(strcmp(r->qds[0].broker_name, r->bds[0].broker_name) == 0 && r->bds[0].cluster == NULL);
    out.len = 0;
    CHECK(rmq__route_write(r, 1, &out) == 0);
    rmq__buf_append(&out, "", 1);
    CHECKF(
        strcmp(out.data,
               "{\"brokerDatas\":[{\"brokerAddrs\":{\"0\":\"h:1\"},\"brokerName\":\"b\\u6807\"}],"
               "\"filterServerTable\":{},\"queueDatas\":[{\"brokerName\":\"b\\u6807\","
               "\"perm\":6,\"readQueueNums\":1,\"topicSysFlag\":0,\"writeQueueNums\":1}]}") == 0,
        "%s", out.data);
    out.len = 0;
    CHECK(rmq__route_write(r, 0, &out) == 0);
    rmq__buf_append(&out, "", 1);
    CHECK(strstr(out.data, "\"brokerName\":\"b\xe6\xa0\x87\"") != NULL);
    rmq__route_free(r);

    /* Bad routes name the field at fault. */
    static const bad_input_t bad[] = {
        {"[]", "not a JSON object"},
        {"{\"queueDatas\":{}}", "not an array"},
        {"{\"queueDatas\":[{\"perm\":6}]}", "queueDatas[0] has no brokerName"},
        {"{\"queueDatas\":[{\"brokerName\":\"a\",\"perm\":\"x\"}]}",
         "queueDatas[0].perm is not an int"},
        {"{\"queueDatas\":[{\"brokerName\":\"a\",\"perm\":99999999999}]}",
         "queueDatas[0].perm is not an int"},
        {"{\"brokerDatas\":[{\"brokerName\":\"a\"},{}]}", "brokerDatas[1] has no brokerName"},
        {"{\"brokerDatas\":[{\"brokerName\":\"a\",\"brokerAddrs\":[]}]}",
         "brokerAddrs is not a map"},
        {"{\"brokerDatas\":[{\"brokerName\":\"a\",\"brokerAddrs\":{\"m\":\"x\"}}]}",
         "entry 0 is not id"},
        {"{\"brokerDatas\":[{\"brokerName\":\"a\",\"brokerAddrs\":{0:1}}]}", "entry 0 is not id"},
        {"{\"brokerDatas\":[{\"brokerAddrs\":{0:\"a\"}", "unterminated object at byte 38"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = rmq__route_parse(bad[i].in, strlen(bad[i].in), &r, err, sizeof(err));
        CHECKF(rc == RMQ_ERR_BAD_JSON && r == NULL && strstr(err, bad[i].msg), "route %zu: %s", i,
               err);
    }
    /* A duplicated broker id keeps its last address (Java HashMap). */
    static const char dupid[] = "{\"brokerDatas\":[{\"brokerAddrs\":{1:\"x:1\",0:\"m:1\",\"1\":\"y:"
                                "1\"},\"brokerName\":\"a\"}]}";
    CHECK(rmq__route_parse(dupid, sizeof(dupid) - 1, &r, err, sizeof(err)) == 0);
    CHECK(r->bds[0].n_addrs == 2 && strcmp(r->bds[0].addrs[1].addr, "y:1") == 0);
    CHECK(strcmp(rmq__route_master_addr(r, "a"), "m:1") == 0);
    rmq__route_free(r);
    /* A route with no readable queue data has an empty subscribe set. */
    CHECK(rmq__route_parse("{}", 2, &r, err, sizeof(err)) == 0);
    CHECK(rmq__route_subscribe_mqs(r, "T", &mqs, &n) == 0 && n == 0 && mqs == NULL);
    rmq__route_free(r);
    rmq__buf_free(&out);
}

static void test_mq_order(void)
{
    /* U+1F600 (surrogates D83D..) sorts before U+FF21 in Java, after it in code point order. */
    rmq_mq_t a = {"T", "b\xf0\x9f\x98\x80", 0}, b = {"T", "b\xef\xbc\xa1", 0};
    rmq_mq_t c = {"T", "b", 3}, e = {"T", "b", 10}, f = {"S", "z", 0}, g = {"T", "ba", 0};
    CHECK(rmq__mq_cmp(&a, &b) < 0 && rmq__mq_cmp(&b, &a) > 0);
    CHECK(rmq__mq_cmp(&c, &e) < 0 && rmq__mq_cmp(&e, &c) > 0 && rmq__mq_cmp(&c, &c) == 0);
    CHECK(rmq__mq_cmp(&f, &c) < 0); /* topic first */
    CHECK(rmq__mq_cmp(&c, &g) < 0); /* prefix sorts first */
    rmq_mq_t arr[] = {g, a, e, b, c, f};
    qsort(arr, 6, sizeof(arr[0]), rmq__mq_qsort_cmp);
    CHECK(arr[0].topic[0] == 'S' && arr[1].queue_id == 3 && arr[2].queue_id == 10);
    CHECK(strcmp(arr[3].broker_name, "ba") == 0 && arr[4].broker_name == a.broker_name &&
          arr[5].broker_name == b.broker_name);
}

/* ---- queue counts a name server sends: bounded before anything is allocated by them ------- */

static void test_route_queue_nums_bound(void)
{
    char json[4096], err[256];
    rmq_route_t *r = NULL;
    static const char *fmt =
        "{\"brokerDatas\":[{\"brokerAddrs\":{\"0\":\"10.0.0.1:10911\"},\"brokerName\":"
        "\"broker-a\"}],\"queueDatas\":[{\"brokerName\":\"broker-z\",\"perm\":6,"
        "\"readQueueNums\":1,\"writeQueueNums\":1},{\"brokerName\":\"broker-a\",\"perm\":6,"
        "\"readQueueNums\":%lld,\"writeQueueNums\":%lld}]}";
    /* 2^31 - 1 read queues: the subscribe set would be 2^31 - 1 queue entries. */
    snprintf(json, sizeof(json), fmt, 2147483647LL, 4LL);
    CHECK(rmq__route_parse(json, strlen(json), &r, err, sizeof(err)) == RMQ_ERR_BAD_JSON);
    CHECKF(r == NULL && strstr(err, "queueDatas[1]") && strstr(err, "broker-a") &&
               strstr(err, "readQueueNums 2147483647") && strstr(err, "65536"),
           "%s", err);
    rmq__route_free(r);
    r = NULL;
    /* The producer's publish set counts writeQueueNums. */
    snprintf(json, sizeof(json), fmt, 4LL, 65537LL);
    CHECK(rmq__route_parse(json, strlen(json), &r, err, sizeof(err)) == RMQ_ERR_BAD_JSON);
    CHECKF(r == NULL && strstr(err, "writeQueueNums 65537"), "%s", err);
    rmq__route_free(r);
    r = NULL;
    /* The bound itself is accepted, and gives that many queues. */
    snprintf(json, sizeof(json), fmt, 65536LL, 65536LL);
    CHECKF(rmq__route_parse(json, strlen(json), &r, err, sizeof(err)) == 0, "%s", err);
    if (r) {
        rmq_mq_t *mqs = NULL;
        int n = 0;
        CHECK(rmq__route_subscribe_mqs(r, "T", &mqs, &n) == 0 && n == 65537);
        rmq__mqs_free(mqs, n);
    }
    rmq__route_free(r);
    r = NULL;
    /* Many brokers under the bound each, more than 2^20 queues in all. */
    {
        rmq_buf_t b;
        rmq__buf_init(&b);
        rmq__buf_appendf(&b, "{\"queueDatas\":[");
        for (int i = 0; i < 17; i++)
            rmq__buf_appendf(&b, "%s{\"brokerName\":\"broker-%d\",\"perm\":6,"
                             "\"readQueueNums\":65536,\"writeQueueNums\":1}", i ? "," : "", i);
        rmq__buf_appendf(&b, "]}");
        CHECK(rmq__route_parse(b.data, b.len, &r, err, sizeof(err)) == RMQ_ERR_BAD_JSON);
        CHECKF(r == NULL && strstr(err, "queueDatas[16]") && strstr(err, "broker-16") &&
                   strstr(err, "1114112 readable queues") && strstr(err, "1048576"),
               "%s", err);
        rmq__route_free(r);
        r = NULL;
        rmq__buf_free(&b);
    }
    /* Negative counts stay as they come (no queues, as in Java's loops). */
    snprintf(json, sizeof(json), fmt, -2147483648LL, -1LL);
    CHECKF(rmq__route_parse(json, strlen(json), &r, err, sizeof(err)) == 0, "%s", err);
    rmq__route_free(r);
}

int main(void)
{
    test_captures();
    test_offsets_file();
    test_reader();
    test_routes();
    test_mq_order();
    test_route_queue_nums_bound();
    return test_report("test_route");
}
