/*
 * cli_send.c -- rmqlua send: produce messages to a topic through the name server's route
 * (the producer of producer.c), from generated bodies, a file, or lines of standard input.
 *
 * Ownership: everything is owned by this command's run: its own libuv loop, the transport, the
 * producer, the message source. Standard input is read with uv_fs_read (thread pool), so the
 * loop never blocks; reading pauses while the send window is full.
 * Threads: the main thread, which runs the loop.
 */
#include "cli.h"
#include "cli_conn.h"
#include "base/common.h"
#include "producer/producer.h"
#include "producer/producer_heartbeat.h"
#include "net/remoting.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#define MAX_PROPS 64
#define MAX_REPORTED_FAILURES 10

enum { SRC_STDIN = 0, SRC_COUNT, SRC_FILE };

typedef struct send_run {
    uv_loop_t loop;
    rmq_remoting_t *t;
    rmq_producer_t *p;
    rmq_producer_hb_t *hb; /* its heartbeat: brokers list it for producerConnection */

    /* options */
    const char *topic;
    const char *tags;
    const char *keys; /* "{n}" replaced by the message number */
    int delay;
    rmq_prop_t props[MAX_PROPS];
    int n_props;
    int src;
    int64_t count;
    int64_t size;
    const char *file;
    int window;
    int verbose;
    rmq_cli_conn_t cc;     /* --namesrv, --set: ACL keys, TLS; a refusal: exit 3 */
    int64_t rate;          /* --rate: messages per second, 0 = as fast as the window allows */
    const char *tmpl_file; /* --body-template */
    rmq_buf_t tmpl;        /* its text */

    /* source state */
    int64_t next; /* messages handed to the producer */
    int eof;      /* no more messages will come */
    char *filebuf;
    size_t file_len;
    rmq_buf_t body; /* generated body */
    rmq_buf_t pattern; /* 'a' + i % 26 for i < size: the generated bodies' filler */
    rmq_buf_t kbuf; /* keys with {n} replaced */
    uv_fs_t rd;
    int reading;
    char rdbuf[65536];
    rmq_buf_t line; /* the incomplete last line of stdin */

    /* --rate pacing: a 1 ms timer raises the allowance to rate x elapsed time */
    uv_timer_t pace;
    int pacing;
    uint64_t pace_start_ns;
    int64_t allowed; /* messages that may have been handed to the producer by now */

    /* results */
    int64_t sent, failed;
    int64_t started_ms;
    int stopping;
} send_run_t;

static void usage(const rmq_cli_conn_t *cc, FILE *out)
{
    fprintf(
        out,
        "usage: rmqlua send --namesrv ADDR --topic TOPIC [options]\n"
        "\n"
        "Produce messages with SEND_MESSAGE_V2 to the masters of the topic's route (looked up\n"
        "on the name server; an unknown topic is created by the broker from TBW102).\n"
        "\n"
        "message source (one of):\n"
        "  (default)            every line of standard input is one message (empty lines skipped)\n"
        "  --count N [--size S] N generated messages of S bytes each (default 100)\n"
        "  --file F             the whole file F as one message\n"
        "  --count N --body-template F\n"
        "                       N bodies from the text of file F, where {n} becomes the message\n"
        "                       number (0..N-1), {n%%K} that number modulo K, and {now_us} the\n"
        "                       wall clock (CLOCK_REALTIME) in microseconds when the message is\n"
        "                       handed to the producer; any other text is copied as it is\n"
        "\n"
        "options:\n"
        "  --namesrv ADDR       name server list \"host:port[;host:port]\" (default: "
        "$NAMESRV_ADDR,\n"
        "                       else the list of the address service of --set namesrv_domain,\n"
        "                       http://<namesrv_domain>:8080/rocketmq/<namesrv_domain_subgroup>,\n"
        "                       asked once before sending)\n"
        "  --topic T            target topic\n"
        "  --tags A             TAGS property\n"
        "  --keys K             KEYS property (space-separated keys); \"{n}\" becomes the message "
        "number\n"
        "  --property k=v       a user property (repeatable)\n"
        "  --delay LEVEL        delay level 1..18 (DELAY property)\n"
        "  --group G            producer group (default %s)\n"
        "  --window N           sends in flight at once (default %d)\n"
        "  --rate R             with --count: hand R messages per second to the producer,\n"
        "                       paced every millisecond (default: as fast as --window allows)\n"
        "  --timeout MS         send timeout over all attempts (default %d)\n"
        "  --retries N          extra attempts on another queue/broker (default %d)\n"
        "  --compress-over N    zlib-compress bodies of at least N bytes (default %d)\n"
        "  --no-compress        never compress\n",
        RMQ_PRODUCER_GROUP_DEFAULT, RMQ_PRODUCER_MAX_INFLIGHT, RMQ_PRODUCER_SEND_TIMEOUT_MS,
        RMQ_PRODUCER_RETRY_TIMES, RMQ_PRODUCER_COMPRESS_OVER);
    rmq__cli_conn_usage(cc, out, 23);
    fputs("  --verbose            print one line per message sent (status, ids, queue, offset)\n"
          "  --log-debug CATS     debug logging (\"remoting,namesrv\" or \"all\")\n"
          "  --help               this text\n"
          "\n"
          "Prints \"sent N, failed M in X s (R msg/s)\" on stderr at the end.\n"
          "exit codes: 0 all sent, 1 some failed (or the address service gave no name server\n"
          "list), 2 usage error (certificates that do not load included), 3 refused by a\n"
          "broker's access control (the message names access key, topic and permission)\n",
          out);
}

/* MessageConst.STRING_HASH_SET: names Message.putUserProperty refuses. */
static const char *const reserved_props[] = {"KEYS",
                                             "TAGS",
                                             "WAIT",
                                             "DELAY",
                                             "RETRY_TOPIC",
                                             "REAL_TOPIC",
                                             "REAL_QID",
                                             "TRAN_MSG",
                                             "PGROUP",
                                             "MIN_OFFSET",
                                             "MAX_OFFSET",
                                             "BUYER_ID",
                                             "ORIGIN_MESSAGE_ID",
                                             "TRANSFER_FLAG",
                                             "CORRECTION_FLAG",
                                             "MQ2_FLAG",
                                             "RECONSUME_TIME",
                                             "MSG_REGION",
                                             "TRACE_ON",
                                             "UNIQ_KEY",
                                             "MAX_RECONSUME_TIMES",
                                             "CONSUME_START_TIME",
                                             "INSTANCE_ID",
                                             "CORRELATION_ID",
                                             "REPLY_TO_CLIENT",
                                             "TTL",
                                             "ARRIVE_TIME",
                                             "PUSH_REPLY_TIME",
                                             "CLUSTER",
                                             "MSG_TYPE",
                                             "INNER_MULTI_QUEUE_OFFSET"};

static int parse_i64(const char *opt, const char *s, int64_t min, int64_t max, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < min || v > max) {
        fprintf(stderr, "rmqlua send: %s needs an integer in %lld..%lld, got '%s'\n", opt,
                (long long)min, (long long)max, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

static void finish(send_run_t *r);
static void feed(send_run_t *r);

static void on_sent(void *ud, int err, const rmq_send_result_t *res, const char *errmsg)
{
    send_run_t *r = ud;
    if (err == 0) {
        r->sent++;
        if (r->verbose)
            printf("%s msgId=%s offsetMsgId=%s queue=%s:%s:%d queueOffset=%lld\n",
                   rmq__send_status_name(res->status), res->msg_id, res->offset_msg_id, res->topic,
                   res->broker_name, res->queue_id, (long long)res->queue_offset);
    } else {
        r->failed++;
        if (r->cc.refused)
            ; /* said once, by the connection's refusal hook (cli_conn.c) */
        else if (r->failed <= MAX_REPORTED_FAILURES)
            fprintf(stderr, "rmqlua send: %s (%s)\n", errmsg, rmq_err_name(err));
        else if (r->failed == MAX_REPORTED_FAILURES + 1)
            fprintf(stderr, "rmqlua send: more failures not shown\n");
    }
    feed(r);
}

/* Hand one message to the producer; a message the producer rejects counts as failed. */
static void send_one(send_run_t *r, const char *body, size_t len)
{
    const char *keys = r->keys;
    if (keys && strstr(keys, "{n}")) {
        r->kbuf.len = 0;
        for (const char *s = keys; *s;) {
            const char *hit = strstr(s, "{n}");
            if (!hit) {
                rmq__buf_append(&r->kbuf, s, strlen(s));
                break;
            }
            rmq__buf_append(&r->kbuf, s, (size_t)(hit - s));
            char nb[24];
            int nl = snprintf(nb, sizeof(nb), "%lld", (long long)r->next);
            rmq__buf_append(&r->kbuf, nb, (size_t)nl);
            s = hit + 3;
        }
        rmq__buf_append_u8(&r->kbuf, 0);
        keys = r->kbuf.data;
    }
    rmq_send_msg_t m = {
        .topic = r->topic,
        .body = body,
        .body_len = len,
        .tags = r->tags,
        .keys = keys,
        .delay_level = r->delay,
        .props = r->props,
        .n_props = r->n_props,
    };
    char err[256];
    r->next++;
    int rc = rmq__producer_send(r->p, &m, on_sent, r, err, sizeof(err));
    if (rc) {
        r->failed++;
        if (r->failed <= MAX_REPORTED_FAILURES)
            fprintf(stderr, "rmqlua send: message %lld not sent: %s\n", (long long)r->next, err);
    }
}

/* ---- standard input ---------------------------------------------------------------------- */

static void send_line(send_run_t *r, const char *s, size_t n)
{
    if (n && s[n - 1] == '\r') n--;
    if (n) send_one(r, s, n);
}

static void on_read(uv_fs_t *req)
{
    send_run_t *r = req->data;
    ssize_t n = req->result;
    uv_fs_req_cleanup(req);
    r->reading = 0;
    if (n < 0) {
        fprintf(stderr, "rmqlua send: reading standard input: %s\n", uv_strerror((int)n));
        r->failed++;
        n = 0;
    }
    if (n == 0) {
        if (r->line.len) send_line(r, r->line.data, r->line.len);
        r->line.len = 0;
        r->eof = 1;
    } else {
        const char *s = r->rdbuf, *end = r->rdbuf + n;
        while (s < end) {
            const char *nl = memchr(s, '\n', (size_t)(end - s));
            if (!nl) {
                rmq__buf_append(&r->line, s, (size_t)(end - s));
                break;
            }
            if (r->line.len) {
                rmq__buf_append(&r->line, s, (size_t)(nl - s));
                send_line(r, r->line.data, r->line.len);
                r->line.len = 0;
            } else {
                send_line(r, s, (size_t)(nl - s));
            }
            s = nl + 1;
        }
    }
    feed(r);
}

/* ---- the feed loop ------------------------------------------------------------------------ */

static void make_body(send_run_t *r)
{
    /* "<n>:" then a repeating pattern up to size bytes: distinct and checkable. */
    char nb[24];
    int64_t v = r->next;
    int n = 0;
    do {
        nb[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    r->body.len = 0;
    while (n)
        rmq__buf_append_u8(&r->body, (uint8_t)nb[--n]);
    rmq__buf_append_u8(&r->body, ':');
    if (r->pattern.len < (size_t)r->size) {
        r->pattern.len = 0;
        rmq__buf_reserve(&r->pattern, (size_t)r->size);
        while (r->pattern.len < (size_t)r->size)
            r->pattern.data[r->pattern.len] = (char)('a' + (r->pattern.len % 26)),
            r->pattern.len++;
    }
    if (r->body.len < (size_t)r->size) {
        rmq__buf_reserve(&r->body, (size_t)r->size - r->body.len);
        memcpy(r->body.data + r->body.len, r->pattern.data + r->body.len,
               (size_t)r->size - r->body.len);
    }
    r->body.len = (size_t)r->size;
}

static void append_i64(rmq_buf_t *b, int64_t v)
{
    char nb[24];
    int n = snprintf(nb, sizeof(nb), "%lld", (long long)v);
    rmq__buf_append(b, nb, (size_t)n);
}

/* The --body-template text with {n}, {n%K} and {now_us} replaced; other text as it is. */
static void make_template_body(send_run_t *r)
{
    const char *s = r->tmpl.data, *end = s + r->tmpl.len;
    r->body.len = 0;
    while (s < end) {
        const char *open = memchr(s, '{', (size_t)(end - s));
        if (!open) {
            rmq__buf_append(&r->body, s, (size_t)(end - s));
            break;
        }
        rmq__buf_append(&r->body, s, (size_t)(open - s));
        size_t left = (size_t)(end - open);
        if (left >= 3 && !memcmp(open, "{n}", 3)) {
            append_i64(&r->body, r->next);
            s = open + 3;
        } else if (left >= 8 && !memcmp(open, "{now_us}", 8)) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            append_i64(&r->body, (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
            s = open + 8;
        } else if (left >= 5 && !memcmp(open, "{n%", 3) && open[3] >= '1' && open[3] <= '9') {
            const char *d = open + 3;
            int64_t k = 0;
            while (d < end && *d >= '0' && *d <= '9' && k < INT64_MAX / 10)
                k = k * 10 + (*d++ - '0');
            if (d < end && *d == '}') {
                append_i64(&r->body, r->next % k);
                s = d + 1;
            } else {
                rmq__buf_append_u8(&r->body, '{');
                s = open + 1;
            }
        } else {
            rmq__buf_append_u8(&r->body, '{');
            s = open + 1;
        }
    }
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* --rate: the allowance grows with the time since the first message, so a late tick catches up
 * (a burst of at most what the producer's window takes) instead of lowering the rate. */
static void pace_update(send_run_t *r)
{
    uint64_t el = mono_ns() - r->pace_start_ns;
    r->allowed = (int64_t)((double)r->rate * (double)el / 1e9) + 1;
}

static void on_pace(uv_timer_t *t)
{
    send_run_t *r = t->data;
    pace_update(r);
    feed(r);
}

/* Keep the producer's window full; finish when the source is exhausted and all sends are done. */
static void feed(send_run_t *r)
{
    if (r->stopping) return;
    size_t window = (size_t)r->window;
    if (r->rate && !r->pacing && !r->eof) {
        r->pacing = 1;
        r->pace_start_ns = mono_ns();
        r->allowed = 1;
        uv_timer_init(&r->loop, &r->pace);
        r->pace.data = r;
        uv_timer_start(&r->pace, on_pace, 1, 1);
    }
    while (!r->eof && rmq__producer_outstanding(r->p) < window) {
        if (r->rate && r->next >= r->allowed) break;
        if (r->src == SRC_COUNT) {
            if (r->next >= r->count) {
                r->eof = 1;
                break;
            }
            if (r->tmpl_file)
                make_template_body(r);
            else
                make_body(r);
            send_one(r, r->body.data, r->body.len);
        } else if (r->src == SRC_FILE) {
            send_one(r, r->filebuf, r->file_len);
            r->eof = 1;
        } else {
            if (!r->reading) {
                r->reading = 1;
                uv_buf_t b = uv_buf_init(r->rdbuf, sizeof(r->rdbuf));
                r->rd.data = r;
                if (uv_fs_read(&r->loop, &r->rd, 0, &b, 1, -1, on_read)) {
                    r->reading = 0;
                    r->eof = 1;
                }
            }
            break;
        }
    }
    if (r->eof && !r->reading && rmq__producer_outstanding(r->p) == 0) finish(r);
}

static void finish(send_run_t *r)
{
    r->stopping = 1;
    if (r->pacing) {
        uv_timer_stop(&r->pace);
        uv_close((uv_handle_t *)&r->pace, NULL);
        r->pacing = 0;
    }
    rmq__producer_hb_stop(r->hb);
    r->hb = NULL;
    rmq__producer_destroy(r->p);
    r->p = NULL;
    rmq__remoting_destroy(r->t, NULL, NULL);
    r->t = NULL;
}

static int read_whole(const char *path, rmq_buf_t *out)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "rmqlua send: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    rmq_buf_t b;
    rmq__buf_init(&b);
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
        rmq__buf_append(&b, tmp, n);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "rmqlua send: cannot read %s\n", path);
        rmq__buf_free(&b);
        return -1;
    }
    if (b.len == 0) {
        fprintf(stderr, "rmqlua send: %s is empty (a message body cannot be empty)\n", path);
        rmq__buf_free(&b);
        return -1;
    }
    *out = b;
    return 0;
}

static int read_file(send_run_t *r)
{
    rmq_buf_t b;
    if (read_whole(r->file, &b)) return -1;
    r->filebuf = b.data;
    r->file_len = b.len;
    return 0;
}

/* A broker's ACL refused a send (said by cli_conn.c): stop producing; the exit code is 3. */
static void on_acl_refused(void *ud)
{
    send_run_t *r = ud;
    r->eof = 1;
}

static int parse_args(send_run_t *r, int argc, char **argv, rmq_producer_opts_t *po)
{
    int have_size = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int64_t n;
        int c;
#define NEED_VALUE() RMQ_CLI_NEED_VALUE(&r->cc, v)
        if ((c = rmq__cli_conn_arg(&r->cc, argc, argv, &i)) != 0) {
            if (c != 1) return c < 0 ? 2 : 1; /* -h, --help, --namesrv, --set, --log-debug */
        } else if (!strcmp(a, "-n")) {
            NEED_VALUE();
            r->cc.namesrv = v;
        } else if (!strcmp(a, "--topic") || !strcmp(a, "-t")) {
            NEED_VALUE();
            r->topic = v;
        } else if (!strcmp(a, "--tags")) {
            NEED_VALUE();
            r->tags = v;
        } else if (!strcmp(a, "--keys")) {
            NEED_VALUE();
            r->keys = v;
        } else if (!strcmp(a, "--property") || !strcmp(a, "-p")) {
            NEED_VALUE();
            const char *eq = strchr(v, '=');
            if (!eq || eq == v || !eq[1]) {
                fprintf(stderr,
                        "rmqlua send: --property needs key=value with both non-empty, "
                        "got '%s'\n",
                        v);
                return 2;
            }
            if (r->n_props == MAX_PROPS) {
                fprintf(stderr, "rmqlua send: at most %d --property options\n", MAX_PROPS);
                return 2;
            }
            char *k = rmq__xstrndup(v, (size_t)(eq - v));
            for (size_t j = 0; j < RMQ_ARRAY_SIZE(reserved_props); j++) {
                if (!strcmp(k, reserved_props[j])) {
                    fprintf(stderr,
                            "rmqlua send: --property %s: the name is reserved by RocketMQ "
                            "(use --tags, --keys or --delay for those)\n",
                            k);
                    free(k);
                    return 2;
                }
            }
            if (strchr(k, 1) || strchr(k, 2) || strchr(eq + 1, 1) || strchr(eq + 1, 2)) {
                fprintf(stderr, "rmqlua send: --property %s: bytes 0x01 and 0x02 are not allowed\n",
                        k);
                free(k);
                return 2;
            }
            r->props[r->n_props].key = k;
            r->props[r->n_props].val = eq + 1;
            r->n_props++;
        } else if (!strcmp(a, "--delay")) {
            NEED_VALUE();
            if (parse_i64(a, v, 1, 18, &n)) return 2;
            r->delay = (int)n;
        } else if (!strcmp(a, "--count")) {
            NEED_VALUE();
            if (parse_i64(a, v, 1, INT64_MAX, &n)) return 2;
            r->count = n;
        } else if (!strcmp(a, "--size")) {
            NEED_VALUE();
            if (parse_i64(a, v, 1, RMQ_PRODUCER_MAX_MESSAGE_SIZE, &n)) return 2;
            r->size = n;
            have_size = 1;
        } else if (!strcmp(a, "--rate")) {
            NEED_VALUE();
            if (parse_i64(a, v, 1, 10000000, &n)) return 2;
            r->rate = n;
        } else if (!strcmp(a, "--body-template")) {
            NEED_VALUE();
            r->tmpl_file = v;
        } else if (!strcmp(a, "--file")) {
            NEED_VALUE();
            r->file = v;
        } else if (!strcmp(a, "--group")) {
            NEED_VALUE();
            po->group = v;
        } else if (!strcmp(a, "--window")) {
            NEED_VALUE();
            if (parse_i64(a, v, 1, 65536, &n)) return 2;
            r->window = (int)n;
        } else if (!strcmp(a, "--timeout")) {
            NEED_VALUE();
            if (parse_i64(a, v, 1, 3600000, &n)) return 2;
            po->send_timeout_ms = n;
        } else if (!strcmp(a, "--retries")) {
            NEED_VALUE();
            if (parse_i64(a, v, 0, 100, &n)) return 2;
            po->retry_times = (int)n;
        } else if (!strcmp(a, "--compress-over")) {
            NEED_VALUE();
            if (parse_i64(a, v, 1, INT32_MAX, &n)) return 2;
            po->compress_over = (int)n;
        } else if (!strcmp(a, "--no-compress")) {
            po->compress_over = -1;
        } else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
            r->verbose = 1;
        } else {
            fprintf(stderr, "rmqlua send: unknown option '%s' (see rmqlua send --help)\n", a);
            return 2;
        }
#undef NEED_VALUE
    }
    if (rmq__cli_conn_namesrv(&r->cc)) return 2;
    if (!r->topic) {
        fprintf(stderr, "rmqlua send: --topic is required\n");
        return 2;
    }
    if (r->file && r->count) {
        fprintf(stderr, "rmqlua send: --file and --count exclude each other\n");
        return 2;
    }
    if (r->tmpl_file && !r->count) {
        fprintf(stderr, "rmqlua send: --body-template needs --count\n");
        return 2;
    }
    if (r->tmpl_file && have_size) {
        fprintf(stderr, "rmqlua send: --body-template and --size exclude each other\n");
        return 2;
    }
    if (r->rate && !r->count) {
        fprintf(stderr, "rmqlua send: --rate needs --count\n");
        return 2;
    }
    if (have_size && !r->count) {
        fprintf(stderr, "rmqlua send: --size needs --count\n");
        return 2;
    }
    r->src = r->file ? SRC_FILE : r->count ? SRC_COUNT : SRC_STDIN;
    if (!have_size) r->size = 100;
    if (rmq__cli_conn_check(&r->cc)) return 2;
    return 0;
}

int rmq__cli_send(int argc, char **argv)
{
    send_run_t *r = rmq__xcalloc(1, sizeof(*r));
    rmq__cli_conn_init(&r->cc, "send", 0, usage);
    r->cc.on_refused = on_acl_refused;
    r->cc.ud = r;
    rmq_producer_opts_t po;
    memset(&po, 0, sizeof(po));
    po.retry_times = -1;
    r->window = RMQ_PRODUCER_MAX_INFLIGHT;
    rmq__buf_init(&r->body);
    rmq__buf_init(&r->pattern);
    rmq__buf_init(&r->kbuf);
    rmq__buf_init(&r->line);
    rmq__buf_init(&r->tmpl);
    int rc = parse_args(r, argc, argv, &po);
    char err[256];
    if (rc == 0 && r->src == SRC_FILE && read_file(r)) rc = 2;
    if (rc == 0 && r->tmpl_file && read_whole(r->tmpl_file, &r->tmpl)) rc = 2;
    if (rc == 0) {
        /* Check the topic before connecting anywhere (a usage error). */
        if (!rmq__name_ok(r->topic, RMQ_PRODUCER_TOPIC_MAX_LEN)) {
            fprintf(stderr, "rmqlua send: bad topic '%s': 1..%d characters of [%%|a-zA-Z0-9_-]\n",
                    r->topic, RMQ_PRODUCER_TOPIC_MAX_LEN);
            rc = 2;
        }
    }
    if (rc == 0) po.max_inflight = r->window;
    /* One write per verbose line: with stdout and stderr on one file (> log 2>&1), a fully
     * buffered stdout would be cut at its buffer's edge and a log line would land inside a
     * message id. */
    if (rc == 0 && r->verbose) setvbuf(stdout, NULL, _IOLBF, 0);
    if (rc == 0) {
        if ((rc = rmq__cli_conn_open(&r->cc, &r->loop, &r->t)) != 0) {
            /* said by rmq__cli_conn_open */
        } else if (rmq__producer_new(&r->loop, r->t, &po, &r->p, err, sizeof(err))) {
            fprintf(stderr, "rmqlua send: %s\n", err);
            rc = 2;
        }
        if (rc == 0) {
            char cid[128];
            rmq__producer_client_id(cid, sizeof(cid));
            r->hb = rmq__producer_hb_start(&r->loop, r->t, r->p,
                                           po.group ? po.group : RMQ_PRODUCER_GROUP_DEFAULT, cid,
                                           RMQ_PRODUCER_HEARTBEAT_MS);
            r->started_ms = rmq__mono_ms();
            feed(r);
            uv_run(&r->loop, UV_RUN_DEFAULT);
            double secs = (double)(rmq__mono_ms() - r->started_ms) / 1000.0;
            fflush(stdout);
            fprintf(stderr, "sent %lld, failed %lld in %.3f s (%.0f msg/s)\n", (long long)r->sent,
                    (long long)r->failed, secs, secs > 0 ? (double)r->sent / secs : 0.0);
            rc = r->cc.refused ? RMQ_CLI_EXIT_ACL : r->failed ? 1 : 0;
        } else {
            if (r->p) rmq__producer_destroy(r->p);
            if (r->t) rmq__remoting_destroy(r->t, NULL, NULL);
            uv_run(&r->loop, UV_RUN_DEFAULT);
        }
        uv_loop_close(&r->loop);
    } else if (rc == 1) {
        rc = 0; /* --help */
    }
    for (int i = 0; i < r->n_props; i++)
        free((char *)r->props[i].key);
    rmq__cli_conn_free(&r->cc);
    free(r->filebuf);
    rmq__buf_free(&r->body);
    rmq__buf_free(&r->pattern);
    rmq__buf_free(&r->kbuf);
    rmq__buf_free(&r->line);
    rmq__buf_free(&r->tmpl);
    free(r);
    return rc;
}
