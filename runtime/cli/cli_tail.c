/*
 * cli_tail.c -- rmqlua tail TOPIC: read a topic without a consumer group and print its messages,
 * like `kcat -C`: from the start, the end, an offset, N before the end or a point in time
 * (reader.c), on every queue or one, with a tag filter (broker and client) or a SQL92 selector
 * (evaluated here, sql92.c), as lines in a --format, as JSON, or through a Lua --handler run by a
 * consume thread (consume_pool.c with rmq.handler). Nothing is committed: tail pulls without the
 * COMMIT flag under MixAll.TOOLS_CONSUMER_GROUP, as mqadmin's readers do. With --set, requests
 * are signed and go over TLS (cli_conn.c); --set namespace=NS reads NS%TOPIC under
 * NS%TOOLS_CONSUMER and shows TOPIC, as DefaultMQPullConsumer with a namespace does.
 *
 * Ownership: everything belongs to this command's run: its loop, transport, reader, output
 * writer, pool and selector. Messages go back (rmq__msg_release) once printed or handled.
 * Threads: the main thread runs the loop; with --handler one consume thread runs the script.
 * Output is written by the libuv thread pool (fdwriter.c), so the loop never blocks on stdout.
 */
#include "cli.h"
#include "cli_conn.h"
#include "base/common.h"
#include "luahost/consume_pool.h"
#include "base/fdwriter.h"
#include "protocol/message.h"
#include "protocol/namespace.h"
#include "reader.h"
#include "net/remoting.h"
#include "protocol/sql92.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <uv.h>

#define TOOLS_GROUP "TOOLS_CONSUMER" /* MixAll.TOOLS_CONSUMER_GROUP */
#define OUT_HIGH_WATER (4 << 20)     /* stop pulling while this much output waits */
#define DEFAULT_FORMAT "%t %b:%q@%o %i tags=%g keys=%k %s"

typedef struct tail_run {
    uv_loop_t loop;
    rmq_remoting_t *rt;
    rmq_reader_t *reader;
    rmq_fdw_t *out;
    rmq_pool_t *pool;
    rmq_cli_signals_t signals;
    rmq_sql92_t *sql;
    rmq_cli_conn_t cc; /* --namesrv, --set: ACL keys, TLS, namespace; an ACL refusal: exit 3 */
    char *wire_topic, *wire_group; /* the topic and group in the namespace */

    /* options */
    const char *topic, *tags, *sql_text, *format, *handler, *broker;
    int queue_id, json, stop_at_end;
    int64_t limit; /* -n; 0 = none */
    rmq_from_t from;
    int64_t from_value;

    /* state */
    int64_t shown;       /* messages printed or handed to the handler */
    int64_t filtered;    /* dropped by --sql */
    int64_t failed;      /* handler batches that failed */
    int handler_batches; /* in the pool */
    rmq_rq_t **held;     /* queues waiting for the output to drain */
    int n_held, cap_held;
    int stopping, exit_code, warned_send;
} tail_run_t;

static void usage(const rmq_cli_conn_t *cc, FILE *out)
{
    fputs(
        "usage: rmqlua tail [options] TOPIC\n"
        "\n"
        "Read TOPIC without a consumer group and print its messages, one line each (like\n"
        "kcat -C). No offset of any group moves: the pulls never commit.\n"
        "\n"
        "where to start (in every queue read):\n"
        "  --from last        only messages stored from now on (default)\n"
        "  --from first       the oldest message kept\n"
        "  --from OFFSET      this queue offset\n"
        "  --from -N          N messages before the end\n"
        "  --from @MS         the message stored closest to MS (ms since the epoch; the broker's\n"
        "                     SEARCH_OFFSET_BY_TIMESTAMP) and what follows it\n"
        "  --from 'YYYY-MM-DD HH:MM[:SS[.mmm]]'  the same in local time ('T' or '#' may join\n"
        "                     date and time; mqadmin's yyyy-MM-dd#HH:mm:ss:SSS works too)\n"
        "\n"
        "what to read:\n"
        "  --queue N          only queue N (on every broker, or on --broker)\n"
        "  --broker NAME      only this broker's queues\n"
        "  --tags EXPR        tag expression (\"TagA || TagB\"): the broker and the client filter\n"
        "  --sql EXPR         SQL92 selector, evaluated here over each message's properties\n"
        "                     (works with any broker, property filtering or not)\n"
        "  -n, --count N      stop after N messages\n"
        "  -e, --exit         stop at the end of every queue (its max offset when tail started)\n"
        "                     instead of waiting for new messages\n"
        "\n"
        "how to show them:\n"
        "  --format FMT       one line per message (default \"" DEFAULT_FORMAT "\"):\n"
        "                     %t topic, %b broker, %q queue id, %o queue offset, %i msgId\n"
        "                     (UNIQ_KEY, else the offset msgId), %I offset msgId, %g tags, %k "
        "keys,\n"
        "                     %s body, %S body size, %T store time (ms), %B born time (ms),\n"
        "                     %h born host, %H store host, %r reconsume times, %f flag,\n"
        "                     %p every property (k=v,...), %{NAME} property NAME, %% a percent;\n"
        "                     \\t \\n \\\\ escapes\n"
        "  --json             one JSON object per line (a body that is not UTF-8 comes as\n"
        "                     body_base64)\n"
        "  --handler SCRIPT   hand the messages to SCRIPT instead: it returns function(msgs, ctx)\n"
        "                     or a table with consume (a consumer script works as it is); it runs\n"
        "                     in a consume thread, its result is reported, never acted upon\n"
        "\n"
        "  --namesrv ADDR     name server(s) \"host:port;host:port\" (default $NAMESRV_ADDR, else\n"
        "                     the list of the address service of --set namesrv_domain, asked at\n"
        "                     start and again every namesrv_addr_refresh_interval ms: new\n"
        "                     connections use its latest good list)\n",
        out);
    rmq__cli_conn_usage(cc, out, 21);
    fputs("                     (ACL: the access key needs SUB on TOPIC and on group\n"
          "                     TOOLS_CONSUMER; namespace=NS reads NS%TOPIC as group\n"
          "                     NS%TOOLS_CONSUMER and shows the topic as TOPIC)\n"
          "  --log-debug CATS   debug logs (remoting,pull,lua,... or all)\n"
          "  -h, --help         this text\n"
          "\n"
          "Stops on SIGINT/SIGTERM, at -n, or with -e at the end. Messages go to stdout, the rest "
          "to\n"
          "stderr. exit codes: 0 stopped, 1 runtime failure (no such topic, reading refused, a\n"
          "failed --handler batch, no name server list from the address service at start),\n"
          "2 usage error (certificates that do not load included),\n"
          "3 refused by a broker's access control (the message names access key, resource and\n"
          "permission)\n",
          out);
}

/* ---- --from --------------------------------------------------------------------------------- */

static int digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

/* YYYY-MM-DD[(T| |#)HH:MM[:SS[(.|:)mmm]]] in local time -> ms since the epoch. */
static int parse_date(const char *s, int64_t *ms)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    int y, mo, d, h = 0, mi = 0, sec = 0, milli = 0;
    size_t n = strlen(s);
    if (n < 10 || s[4] != '-' || s[7] != '-' || digits(s, 4, &y) || digits(s + 5, 2, &mo) ||
        digits(s + 8, 2, &d))
        return -1;
    const char *p = s + 10;
    if (*p) {
        if (*p != 'T' && *p != ' ' && *p != '#') return -1;
        p++;
        if (strlen(p) < 5 || p[2] != ':' || digits(p, 2, &h) || digits(p + 3, 2, &mi)) return -1;
        p += 5;
        if (*p == ':') {
            if (strlen(p) < 3 || digits(p + 1, 2, &sec)) return -1;
            p += 3;
            if (*p == '.' || *p == ':') {
                if (strlen(p) != 4 || digits(p + 1, 3, &milli)) return -1;
                p += 4;
            }
        }
        if (*p) return -1;
    }
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return -1;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    tm.tm_isdst = -1;
    time_t t = mktime(&tm);
    if (t == (time_t)-1) return -1;
    *ms = (int64_t)t * 1000 + milli;
    return 0;
}

static int parse_int64(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno) return -1;
    *out = v;
    return 0;
}

static int parse_from(const char *v, rmq_from_t *from, int64_t *value)
{
    int64_t n;
    if (!strcmp(v, "first"))
        *from = RMQ_FROM_FIRST;
    else if (!strcmp(v, "last"))
        *from = RMQ_FROM_LAST;
    else if (v[0] == '@' && !parse_int64(v + 1, &n) && n >= 0) {
        *from = RMQ_FROM_TIMESTAMP;
        *value = n;
    } else if (v[0] == '-' && !parse_int64(v + 1, &n) && n > 0) {
        *from = RMQ_FROM_BEFORE_END;
        *value = n;
    } else if (v[0] >= '0' && v[0] <= '9' && !parse_int64(v, &n)) {
        *from = RMQ_FROM_OFFSET;
        *value = n;
    } else if (!parse_date(v, &n)) {
        *from = RMQ_FROM_TIMESTAMP;
        *value = n;
    } else {
        return -1;
    }
    return 0;
}

/* ---- output --------------------------------------------------------------------------------- */

/* Length of the well-formed UTF-8 sequence at s (RFC 3629), 0 when it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (!len || c > 0xF4 || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && s[1] < 0xA0) return 0;  /* overlong */
    if (c == 0xED && s[1] >= 0xA0) return 0; /* surrogate */
    if (c == 0xF0 && s[1] < 0x90) return 0;  /* overlong */
    if (c == 0xF4 && s[1] >= 0x90) return 0; /* above U+10FFFF */
    return len;
}

static int utf8_valid(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t l = utf8_len((const unsigned char *)s + i, n - i);
        if (!l) return 0;
        i += l;
    }
    return 1;
}

/* A JSON string; bytes that are not UTF-8 become \u00XX (their Latin-1 reading). */
static void json_str(rmq_buf_t *b, const char *s, size_t n)
{
    if (utf8_valid(s, n)) {
        rmq__buf_append_json_str(b, s, n);
        return;
    }
    rmq__buf_append(b, "\"", 1);
    for (size_t i = 0; i < n;) {
        size_t l = utf8_len((const unsigned char *)s + i, n - i);
        if (l) {
            rmq_buf_t t;
            rmq__buf_init(&t);
            rmq__buf_append_json_str(&t, s + i, l);
            rmq__buf_append(b, t.data + 1, t.len - 2);
            rmq__buf_free(&t);
            i += l;
        } else {
            rmq__buf_appendf(b, "\\u%04x", (unsigned char)s[i]);
            i++;
        }
    }
    rmq__buf_append(b, "\"", 1);
}

static void base64(rmq_buf_t *b, const unsigned char *s, size_t n)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    rmq__buf_reserve(b, (n + 2) / 3 * 4);
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < n) v |= (uint32_t)s[i + 1] << 8;
        if (i + 2 < n) v |= s[i + 2];
        char q[4] = {tbl[(v >> 18) & 63], tbl[(v >> 12) & 63], i + 1 < n ? tbl[(v >> 6) & 63] : '=',
                     i + 2 < n ? tbl[v & 63] : '='};
        rmq__buf_append(b, q, 4);
    }
}

typedef struct props_out {
    rmq_buf_t *b;
    int n;
} props_out_t;

static int props_list(void *ud, const char *k, size_t kl, const char *v, size_t vl)
{
    props_out_t *o = ud;
    if (o->n++) rmq__buf_append(o->b, ",", 1);
    rmq__buf_append(o->b, k, kl);
    rmq__buf_append(o->b, "=", 1);
    rmq__buf_append(o->b, v, vl);
    return 0;
}

static void append_field(rmq_buf_t *b, const rmq_msg_t *m, char f)
{
    char tmp[64];
    switch (f) {
    case 't':
        rmq__buf_append(b, m->topic, m->topic_len);
        break;
    case 'b':
        rmq__buf_append(b, m->broker_name, m->broker_name_len);
        break;
    case 'q':
        rmq__buf_appendf(b, "%d", (int)m->queue_id);
        break;
    case 'o':
        rmq__buf_appendf(b, "%" PRId64, m->queue_offset);
        break;
    case 'i':
        rmq__msg_id(m, tmp);
        rmq__buf_appendf(b, "%s", tmp);
        break;
    case 'I':
        rmq_msg_offset_msg_id(m, tmp);
        rmq__buf_appendf(b, "%s", tmp);
        break;
    case 'g':
        rmq__buf_append(b, m->tags, m->tags_len);
        break;
    case 'k':
        rmq__buf_append(b, m->keys, m->keys_len);
        break;
    case 's':
        rmq__buf_append(b, m->body, m->body_len);
        break;
    case 'S':
        rmq__buf_appendf(b, "%u", (unsigned)m->body_len);
        break;
    case 'T':
        rmq__buf_appendf(b, "%" PRId64, m->store_timestamp);
        break;
    case 'B':
        rmq__buf_appendf(b, "%" PRId64, m->born_timestamp);
        break;
    case 'h':
        rmq_msg_host(m, 0, tmp);
        rmq__buf_appendf(b, "%s", tmp);
        break;
    case 'H':
        rmq_msg_host(m, 1, tmp);
        rmq__buf_appendf(b, "%s", tmp);
        break;
    case 'r':
        rmq__buf_appendf(b, "%d", (int)m->reconsume_times);
        break;
    case 'f':
        rmq__buf_appendf(b, "%d", (int)m->flag);
        break;
    case 'p': {
        props_out_t o = {b, 0};
        rmq__props_foreach(m->props, m->props_len, props_list, &o);
        break;
    }
    default:
        break;
    }
}

static void format_line(tail_run_t *t, rmq_buf_t *b, const rmq_msg_t *m)
{
    for (const char *p = t->format; *p; p++) {
        if (*p == '\\' && p[1]) {
            p++;
            rmq__buf_append(b, *p == 'n' ? "\n" : *p == 't' ? "\t" : p, 1);
        } else if (*p != '%' || !p[1]) {
            rmq__buf_append(b, p, 1);
        } else if (p[1] == '%') {
            rmq__buf_append(b, "%", 1);
            p++;
        } else if (p[1] == '{') {
            const char *close = strchr(p + 2, '}');
            if (!close) {
                rmq__buf_append(b, p, strlen(p));
                break;
            }
            uint32_t vl = 0;
            const char *v =
                rmq__props_find(m->props, m->props_len, p + 2, (size_t)(close - p - 2), &vl);
            if (v) rmq__buf_append(b, v, vl);
            p = close;
        } else {
            append_field(b, m, p[1]);
            p++;
        }
    }
    rmq__buf_append(b, "\n", 1);
}

static int props_json(void *ud, const char *k, size_t kl, const char *v, size_t vl)
{
    props_out_t *j = ud;
    if (j->n++) rmq__buf_append(j->b, ",", 1);
    json_str(j->b, k, kl);
    rmq__buf_append(j->b, ":", 1);
    json_str(j->b, v, vl);
    return 0;
}

static void json_line(rmq_buf_t *b, const rmq_msg_t *m)
{
    char id[64], oid[64], bh[64], sh[64];
    rmq__msg_id(m, id);
    rmq_msg_offset_msg_id(m, oid);
    rmq_msg_host(m, 0, bh);
    rmq_msg_host(m, 1, sh);
    rmq__buf_append(b, "{\"topic\":", 9);
    json_str(b, m->topic, m->topic_len);
    rmq__buf_append(b, ",\"broker\":", 10);
    json_str(b, m->broker_name, m->broker_name_len);
    rmq__buf_appendf(b,
                     ",\"queue_id\":%d,\"queue_offset\":%" PRId64 ",\"msg_id\":\"%s\","
                     "\"offset_msg_id\":\"%s\"",
                     (int)m->queue_id, m->queue_offset, id, oid);
    if (m->tags_len) {
        rmq__buf_append(b, ",\"tags\":", 8);
        json_str(b, m->tags, m->tags_len);
    }
    if (m->keys_len) {
        rmq__buf_append(b, ",\"keys\":", 8);
        json_str(b, m->keys, m->keys_len);
    }
    rmq__buf_appendf(b,
                     ",\"store_timestamp\":%" PRId64 ",\"born_timestamp\":%" PRId64
                     ",\"born_host\":\"%s\",\"store_host\":\"%s\",\"reconsume_times\":%d,"
                     "\"flag\":%d,\"properties\":{",
                     m->store_timestamp, m->born_timestamp, bh, sh, (int)m->reconsume_times,
                     (int)m->flag);
    props_out_t j = {b, 0};
    rmq__props_foreach(m->props, m->props_len, props_json, &j);
    rmq__buf_append(b, "}", 1);
    if (utf8_valid(m->body, m->body_len)) {
        rmq__buf_append(b, ",\"body\":", 8);
        rmq__buf_append_json_str(b, m->body, m->body_len);
    } else {
        rmq__buf_append(b, ",\"body_base64\":\"", 16);
        base64(b, (const unsigned char *)m->body, m->body_len);
        rmq__buf_append(b, "\"", 1);
    }
    rmq__buf_append(b, "}\n", 2);
}

/* ---- stopping ----------------------------------------------------------------------------------
 */

static void on_rt_closed(void *ud)
{
    tail_run_t *t = ud;
    t->rt = NULL;
}

static void on_out_closed(void *ud)
{
    tail_run_t *t = ud;
    t->out = NULL;
    rmq__cli_signals_close(&t->signals);
    if (t->rt) rmq__remoting_destroy(t->rt, on_rt_closed, t);
}

static void on_pool_closed(void *ud)
{
    tail_run_t *t = ud;
    t->pool = NULL;
    rmq__fdw_close(t->out, on_out_closed, t);
}

/* Stop reading; let the handler finish and the output drain, then close everything. */
static void stop(tail_run_t *t, int code)
{
    if (code > t->exit_code) t->exit_code = code;
    if (t->stopping) return;
    t->stopping = 1;
    rmq__cli_conn_close(&t->cc);
    if (t->reader) rmq__reader_destroy(t->reader);
    t->reader = NULL;
    t->n_held = 0;
    if (t->pool)
        rmq__pool_stop(t->pool, 0, on_pool_closed, t);
    else
        on_pool_closed(t);
}

/* SIGINT, SIGTERM: stop as at the end. */
static void on_signal(void *ud)
{
    stop(ud, 0);
}

/* A broker's ACL refused a request (said by cli_conn.c): stop reading. */
static void on_acl_refused(void *ud)
{
    stop(ud, RMQ_CLI_EXIT_ACL);
}

/* ---- the reader's callbacks -------------------------------------------------------------------
 */

static void on_drain(void *ud)
{
    tail_run_t *t = ud;
    if (rmq__fdw_error(t->out)) {
        /* the reader of our stdout went away (| head): a normal end */
        if (rmq__fdw_error(t->out) != UV_EPIPE)
            fprintf(stderr, "rmqlua tail: writing the output: %s\n",
                    uv_strerror(rmq__fdw_error(t->out)));
        stop(t, rmq__fdw_error(t->out) == UV_EPIPE ? 0 : 1);
        return;
    }
    int n = t->n_held;
    t->n_held = 0;
    for (int i = 0; i < n && !t->stopping; i++)
        rmq__reader_next(t->held[i]);
}

static void hold(tail_run_t *t, rmq_rq_t *q)
{
    if (t->n_held == t->cap_held) {
        t->cap_held = t->cap_held ? t->cap_held * 2 : 16;
        t->held = realloc(t->held, sizeof(*t->held) * (size_t)t->cap_held);
        if (!t->held) abort();
    }
    t->held[t->n_held++] = q;
}

typedef struct tail_batch {
    rmq_batch_t b;
    rmq_rq_t *q;      /* the reader's: used only while tail is not stopping (stop frees it) */
    char broker[128]; /* q's broker and queue id, for the log: they outlive q */
    int queue_id;
    rmq_msg_t *msgs[];
} tail_batch_t;

static void on_batch_done(void *ud, rmq_batch_t *b)
{
    tail_run_t *t = ud;
    tail_batch_t *tb = (tail_batch_t *)b;
    t->handler_batches--;
    if (b->status != RMQ_CONSUME_NOT_RUN &&
        (b->handler_error ||
         (b->status != RMQ_CONSUME_SUCCESS && b->status != RMQ_CONSUME_COMMIT) ||
         b->ack_count < b->n)) {
        t->failed++;
        rmq_log_warn("tail",
                     "the handler did not consume %d of %d message(s) of %s#%d "
                     "(status %d); tail reports it and goes on (nothing is retried)",
                     (int)(b->n - (b->handler_error ? 0 : b->ack_count)), (int)b->n, tb->broker,
                     tb->queue_id, (int)b->status);
    }
    if (b->nsends && !t->warned_send) {
        t->warned_send = 1;
        rmq_log_warn("tail", "rmq.send is not available in rmqlua tail: %d message(s) not sent",
                     (int)b->nsends);
    }
    rmq__pool_batch_release(b);
    for (int i = 0; i < b->n; i++)
        rmq__msg_release(tb->msgs[i]);
    rmq_rq_t *q = tb->q;
    int stopped = b->status == RMQ_CONSUME_NOT_RUN;
    free(tb);
    if (t->stopping || stopped) return;
    if (t->limit && t->shown >= t->limit) {
        if (t->handler_batches == 0) stop(t, 0);
        return;
    }
    rmq__reader_next(q);
}

static void on_msgs(void *ud, rmq_rq_t *q, rmq_msg_t **msgs, int n)
{
    tail_run_t *t = ud;
    int keep = 0;
    const char *ns = rmq__cli_conn_namespace(&t->cc);
    for (int i = 0; i < n; i++) {
        rmq_msg_t *m = msgs[i];
        /* DefaultMQPullConsumerImpl.resetTopic: the topic as the user named it */
        if (ns) rmq__ns_strip_msg(ns, m);
        int pass = !t->stopping && !(t->limit && t->shown + keep >= t->limit);
        if (pass && t->sql && !rmq__sql92_match(t->sql, m->props, m->props_len)) {
            t->filtered++;
            pass = 0;
        }
        if (pass)
            msgs[keep++] = m;
        else
            rmq__msg_release(m);
    }
    if (t->pool && keep > 0) {
        tail_batch_t *tb = rmq__xcalloc(1, sizeof(*tb) + sizeof(rmq_msg_t *) * (size_t)keep);
        memcpy(tb->msgs, msgs, sizeof(rmq_msg_t *) * (size_t)keep);
        tb->b.msgs = tb->msgs;
        tb->b.n = keep;
        tb->q = q;
        snprintf(tb->broker, sizeof(tb->broker), "%s", q->broker_name);
        tb->queue_id = q->queue_id;
        t->shown += keep;
        t->handler_batches++;
        rmq__pool_submit(t->pool, &tb->b);
        return;
    }
    rmq_buf_t *b = rmq__fdw_buf(t->out);
    for (int i = 0; i < keep; i++) {
        if (t->json)
            json_line(b, msgs[i]);
        else
            format_line(t, b, msgs[i]);
        rmq__msg_release(msgs[i]);
    }
    t->shown += keep;
    rmq__fdw_flush(t->out);
    if (t->limit && t->shown >= t->limit) {
        stop(t, 0);
        return;
    }
    if (rmq__fdw_queued(t->out) > OUT_HIGH_WATER)
        hold(t, q);
    else
        rmq__reader_next(q);
}

static void on_done(void *ud)
{
    tail_run_t *t = ud;
    if (t->handler_batches == 0) stop(t, 0);
}

static void on_queue_end(void *ud, rmq_rq_t *q)
{
    (void)ud;
    rmq_dbg(RMQ_DBG_PULL, "tail", "%s#%d: end reached at %" PRId64, q->broker_name, q->queue_id,
            q->next);
}

static void on_error(void *ud, int code, const char *msg)
{
    tail_run_t *t = ud;
    fprintf(stderr, "rmqlua tail: %s\n", msg);
    (void)code;
    stop(t, 1);
}

static void on_ready(void *ud, rmq_rq_t **qs, int n)
{
    tail_run_t *t = ud;
    for (int i = 0; i < n; i++)
        rmq_dbg(RMQ_DBG_PULL, "tail", "%s %s#%d: from %" PRId64 "%s", t->topic, qs[i]->broker_name,
                qs[i]->queue_id, qs[i]->next, t->stop_at_end ? " to the end" : "");
}

/* ---- command line ------------------------------------------------------------------------------
 */

static int parse_args(tail_run_t *t, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int64_t n;
        int c;
#define NEED_VALUE() RMQ_CLI_NEED_VALUE(&t->cc, v)
        if ((c = rmq__cli_conn_arg(&t->cc, argc, argv, &i)) != 0) {
            if (c != 1) return c < 0 ? 2 : 1; /* -h, --help, --namesrv, --set, --log-debug */
        } else if (!strcmp(a, "--from")) {
            NEED_VALUE();
            if (parse_from(v, &t->from, &t->from_value)) {
                fprintf(stderr,
                        "rmqlua tail: --from takes last, first, OFFSET, -N, @MS or a local time "
                        "'YYYY-MM-DD HH:MM[:SS[.mmm]]', not '%s'\n",
                        v);
                return 2;
            }
        } else if (!strcmp(a, "--queue")) {
            NEED_VALUE();
            if (parse_int64(v, &n) || n < 0 || n > 65535) {
                fprintf(stderr, "rmqlua tail: --queue needs a queue id 0..65535, not '%s'\n", v);
                return 2;
            }
            t->queue_id = (int)n;
        } else if (!strcmp(a, "--broker")) {
            NEED_VALUE();
            t->broker = v;
        } else if (!strcmp(a, "--tags")) {
            NEED_VALUE();
            t->tags = v;
        } else if (!strcmp(a, "--sql")) {
            NEED_VALUE();
            t->sql_text = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--count")) {
            NEED_VALUE();
            if (parse_int64(v, &n) || n < 1) {
                fprintf(stderr, "rmqlua tail: %s needs a number >= 1, not '%s'\n", a, v);
                return 2;
            }
            t->limit = n;
        } else if (!strcmp(a, "-e") || !strcmp(a, "--exit")) {
            t->stop_at_end = 1;
        } else if (!strcmp(a, "--format")) {
            NEED_VALUE();
            t->format = v;
        } else if (!strcmp(a, "--json")) {
            t->json = 1;
        } else if (!strcmp(a, "--handler")) {
            NEED_VALUE();
            t->handler = v;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "rmqlua tail: unknown option '%s' (see rmqlua tail --help)\n", a);
            return 2;
        } else if (!t->topic) {
            t->topic = a;
        } else {
            fprintf(stderr, "rmqlua tail: one TOPIC only ('%s' and '%s')\n", t->topic, a);
            return 2;
        }
#undef NEED_VALUE
    }
    if (!t->topic) {
        fprintf(stderr, "rmqlua tail: which TOPIC? (see rmqlua tail --help)\n");
        return 2;
    }
    if (rmq__cli_conn_namesrv(&t->cc)) return 2;
    if ((t->json != 0) + (t->format != NULL) + (t->handler != NULL) > 1) {
        fprintf(stderr, "rmqlua tail: --format, --json and --handler exclude each other\n");
        return 2;
    }
    if (t->tags && t->sql_text) {
        fprintf(stderr, "rmqlua tail: --tags and --sql exclude each other (TAGS is a property: "
                        "--sql \"TAGS = 'A' AND ...\")\n");
        return 2;
    }
    if (t->sql_text) {
        char err[512];
        if (rmq__sql92_compile(t->sql_text, &t->sql, err, sizeof(err), NULL)) {
            fprintf(stderr, "rmqlua tail: --sql: invalid SQL92 expression: %s\n", err);
            return 2;
        }
        if (rmq__sql92_ignored(t->sql) >= 0)
            fprintf(stderr,
                    "rmqlua tail: warning: --sql: the text after the expression is "
                    "ignored: \"%s\"\n",
                    t->sql_text + rmq__sql92_ignored(t->sql));
    }
    if (!t->format) t->format = DEFAULT_FORMAT;
    if (rmq__cli_conn_check(&t->cc)) return 2;
    /* DefaultMQPullConsumer: the topic (withNamespace) and the group (start()) in the namespace */
    t->wire_topic = rmq__ns_wrap(rmq__cli_conn_namespace(&t->cc), t->topic);
    t->wire_group = rmq__ns_wrap(rmq__cli_conn_namespace(&t->cc), TOOLS_GROUP);
    return 0;
}

static void run_free(tail_run_t *t)
{
    rmq__sql92_free(t->sql);
    rmq__cli_conn_free(&t->cc);
    free(t->wire_topic);
    free(t->wire_group);
    free(t->held);
    free(t);
}

int rmq__cli_tail(int argc, char **argv)
{
    tail_run_t *t = rmq__xcalloc(1, sizeof(*t));
    t->queue_id = -1;
    t->from = RMQ_FROM_LAST;
    rmq__cli_conn_init(&t->cc, "tail", 1, usage);
    t->cc.refresh = 1; /* a long run: the address service is asked again */
    t->cc.on_refused = on_acl_refused;
    t->cc.ud = t;
    int rc = parse_args(t, argc, argv);
    char err[1024];
    if (rc) {
        run_free(t);
        return rc == 1 ? 0 : rc;
    }
    if ((rc = rmq__cli_conn_open(&t->cc, &t->loop, &t->rt)) != 0) goto out;
    if (t->handler) {
        rmq_pool_opts_t po = {.script_path = t->handler,
                              .nthreads = 1,
                              .loop = &t->loop,
                              .done = on_batch_done,
                              .ud = t,
                              .consumer_group = TOOLS_GROUP,
                              .loader_module = "rmq.handler"};
        if (rmq__pool_start(&po, &t->pool, err, sizeof(err))) {
            fprintf(stderr, "rmqlua tail: --handler: %s\n", err);
            rc = 2;
            goto out;
        }
    }
    t->out = rmq__fdw_new(&t->loop, 1);
    rmq__fdw_on_drain(t->out, on_drain, t);
    rmq_reader_opts_t o = {.loop = &t->loop,
                           .rt = t->rt,
                           .topic = t->wire_topic,
                           .group = t->wire_group,
                           .tags = t->tags,
                           .from = t->from,
                           .from_value = t->from_value,
                           .stop_at_end = t->stop_at_end,
                           .broker = t->broker,
                           .queue_id = t->queue_id,
                           .ud = t,
                           .on_ready = on_ready,
                           .on_msgs = on_msgs,
                           .on_queue_end = on_queue_end,
                           .on_done = on_done,
                           .on_error = on_error};
    if (rmq__reader_start(&o, &t->reader, err, sizeof(err))) {
        fprintf(stderr, "rmqlua tail: %s\n", err);
        rc = 2;
        goto out;
    }
    rmq__cli_signals_start(&t->signals, &t->loop, on_signal, t);
    uv_run(&t->loop, UV_RUN_DEFAULT);
    rc = t->cc.refused ? RMQ_CLI_EXIT_ACL : t->exit_code ? t->exit_code : (t->failed ? 1 : 0);
    if (t->sql_text && t->filtered)
        rmq_dbg(RMQ_DBG_PULL, "tail", "%" PRId64 " message(s) did not match --sql", t->filtered);
    uv_loop_close(&t->loop);
    run_free(t);
    return rc;
out:
    rmq__cli_conn_close(&t->cc);
    if (t->pool) rmq__pool_stop(t->pool, 0, NULL, NULL);
    if (t->out) rmq__fdw_close(t->out, NULL, NULL);
    if (t->rt) rmq__remoting_destroy(t->rt, NULL, NULL);
    uv_run(&t->loop, UV_RUN_DEFAULT);
    uv_loop_close(&t->loop);
    run_free(t);
    return rc;
}
