/*
 * cli_redrive.c -- rmqlua redrive --group G: move the dead letters of consumer group G (topic
 * %DLQ%G) back for another try, to %RETRY%G (G consumes them again, with a fresh count of
 * retries) or, with --to-origin, to the topic each came from (RETRY_TOPIC) with its tags, keys
 * and properties as the producer sent them. --where SCRIPT lets a Lua predicate choose; --dry-run
 * only prints what would move.
 *
 * Progress: the offsets of a dedicated group (default "%REDRIVE%G") on %DLQ%G, stored on the
 * broker with UPDATE_CONSUMER_OFFSET as any consumer's are (`mqadmin consumerProgress` shows
 * them), read back with QUERY_CONSUMER_OFFSET at the next run: a message is moved once. Within a
 * queue messages are sent one after the other and the offset is committed after each pulled
 * batch, so a run that fails stops exactly at the message that could not be sent; only a run
 * killed in the middle of a batch can move that batch's first messages again next time. The run
 * reads up to the max offsets %DLQ%G had when it started.
 *
 * Connection: --set signs every request and opens TLS sessions (cli_conn.c); an ACL refusal ends
 * the run with exit code 3. --set namespace=NS works on the namespace's names, as a Java client
 * with that namespace would: %DLQ%NS%G, %RETRY%NS%G and the progress group %REDRIVE%NS%G (a
 * --progress-group P is NS%P).
 *
 * Ownership: this command's run owns its loop, transport, reader (reader.c), producer
 * (producer.c), output writer and, with --where, one consume thread (consume_pool.c with
 * rmq.where). A pulled batch is owned by its job until it is moved and committed.
 * Threads: the main thread runs the loop; the --where script runs in the consume thread.
 */
#include "protocol/acl.h"
#include "cli.h"
#include "cli_conn.h"
#include "base/codes.h"
#include "base/common.h"
#include "luahost/consume_pool.h"
#include "base/fdwriter.h"
#include "protocol/message.h"
#include "protocol/namespace.h"
#include "producer/producer.h"
#include "reader.h"
#include "net/remoting.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <uv.h>

#define COMMIT_TIMEOUT_MS 5000
#define COMMIT_TRIES 5
#define PROGRESS_EVERY_MS 2000

typedef struct redrive_run redrive_run_t;

/* One pulled batch of one queue: the selected messages first, then the rest. */
typedef struct job {
    rmq_batch_t b; /* for the --where thread; b.msgs = msgs */
    redrive_run_t *run;
    rmq_rq_t *q; /* the reader's: used only while the run is not stopping (stop frees it) */
    /* q's broker, master address and queue id, for the commit and the logs: they outlive q */
    char broker[128], addr[80];
    int queue_id;
    int n, nsel;    /* messages; selected (moved) ones at the front */
    int i;          /* next selected message to send */
    int64_t next;   /* the queue's offset after this batch */
    int64_t commit; /* what to commit when the job ends */
    int tries;
    int failed; /* a message could not be moved: the queue stops after the commit */
    uv_timer_t timer;
    rmq_msg_t *msgs[];
} job_t;

struct redrive_run {
    uv_loop_t loop;
    rmq_remoting_t *rt;
    rmq_reader_t *reader;
    rmq_producer_t *producer;
    rmq_pool_t *pool;
    rmq_fdw_t *out;
    rmq_cli_signals_t signals;
    uv_timer_t progress;
    rmq_cli_conn_t cc; /* --namesrv, --set: ACL keys, TLS, namespace; an ACL refusal: exit 3 */

    const char *group, *where, *progress_group_opt;
    char dlq[300], retry[300], progress_group[300];
    int to_origin, dry_run, verbose;

    int64_t moved, skipped, failed, total, last_reported;
    int jobs; /* batches not finished */
    int stopping, exit_code, started;
};

static void usage(const rmq_cli_conn_t *cc, FILE *out)
{
    fputs(
        "usage: rmqlua redrive --group G [options]\n"
        "\n"
        "Move the dead letters of consumer group G (topic %DLQ%G) back for another try: to\n"
        "%RETRY%G by default (G consumes them again, with a fresh count of retries), or with\n"
        "--to-origin to the topic each one came from, as the producer sent it (topic, tags, keys\n"
        "and properties restored from the dead letter).\n"
        "\n"
        "  --group G           the consumer group whose dead letters move (required)\n"
        "  --to-origin         send each to its original topic (its RETRY_TOPIC property)\n"
        "  --where SCRIPT      move only what SCRIPT selects: it returns function(m) -> boolean\n"
        "                      (m as consume gets it: m.body, m.tags, m.keys, m:property(name),\n"
        "                      m.reconsume_times, ...); the others are passed over\n"
        "  --dry-run           print what would move (one line each); move nothing, record no\n"
        "                      progress\n"
        "  --progress-group P  the group whose offsets on %DLQ%G record how far redrive got\n"
        "                      (default %REDRIVE%G); a second run goes on from there, so nothing\n"
        "                      moves twice. Another P starts again from the oldest dead letter.\n"
        "  --verbose           print one line per message moved\n"
        "  --namesrv ADDR      name server(s) (default $NAMESRV_ADDR, else the list of the\n"
        "                      address service of --set namesrv_domain, asked once at start)\n",
        out);
    rmq__cli_conn_usage(cc, out, 22);
    fputs(
        "                      (ACL: the access key needs SUB on %DLQ%G and on the progress\n"
        "                      group, PUB on G, or with --to-origin on the original topics;\n"
        "                      namespace=NS works on %DLQ%NS%G, %RETRY%NS%G, %REDRIVE%NS%G)\n"
        "  --log-debug CATS    debug logs (remoting,pull,lua,... or all)\n"
        "  -h, --help          this text\n"
        "\n"
        "A run reads up to the end %DLQ%G had when it started. Progress goes to stderr every 2 s\n"
        "and a summary at the end. A Java 4.9 broker creates %DLQ% topics write-only: allow\n"
        "reading first (mqadmin updateTopicPerm -t %DLQ%G -p 6 ...).\n"
        "exit codes: 0 done (or nothing to move), 1 a message could not be moved or read (or\n"
        "the address service gave no name server list), 2 usage error (certificates that do\n"
        "not load included), 3 refused by a broker's access control (the message names access\n"
        "key, resource and permission)\n",
        out);
}

/* ---- output ---------------------------------------------------------------------------------- */

static void describe(rmq_buf_t *b, const rmq_msg_t *m)
{
    char id[64];
    rmq__msg_id(m, id);
    rmq__buf_appendf(b, "%.*s@%.*s#%d:%" PRId64 " msgId=%s", (int)m->topic_len, m->topic,
                     (int)m->broker_name_len, m->broker_name, (int)m->queue_id, m->queue_offset,
                     id);
    if (m->tags_len) rmq__buf_appendf(b, " tags=%.*s", (int)m->tags_len, m->tags);
    if (m->keys_len) rmq__buf_appendf(b, " keys=%.*s", (int)m->keys_len, m->keys);
}

/* describe() as a string of its own, for a log line; the caller frees it. */
static char *described(const rmq_msg_t *m)
{
    rmq_buf_t b;
    rmq__buf_init(&b);
    describe(&b, m);
    rmq__buf_append(&b, "", 1);
    return b.data;
}

static void report(redrive_run_t *r, int final)
{
    if (!final && r->moved + r->skipped + r->failed == r->last_reported) return;
    r->last_reported = r->moved + r->skipped + r->failed;
    if (r->dry_run)
        fprintf(stderr,
                "rmqlua redrive: %s%s: %" PRId64 " would move to %s, %" PRId64
                " passed over by --where (dry run: nothing moved, no progress recorded)\n",
                final ? "done, " : "", r->dlq, r->moved, r->to_origin ? "their topics" : r->retry,
                r->skipped);
    else
        fprintf(stderr,
                "rmqlua redrive: %s%s: %" PRId64 " moved to %s, %" PRId64
                " passed over by --where, %" PRId64 " failed (progress in group %s)\n",
                final ? "done, " : "", r->dlq, r->moved,
                r->to_origin ? "their original topics" : r->retry, r->skipped, r->failed,
                r->progress_group);
}

static void on_progress(uv_timer_t *t)
{
    report(t->data, 0);
}

/* ---- stopping -------------------------------------------------------------------------------- */

static void on_rt_closed(void *ud)
{
    redrive_run_t *r = ud;
    r->rt = NULL;
}

static void on_out_closed(void *ud)
{
    redrive_run_t *r = ud;
    r->out = NULL;
    rmq__cli_signals_close(&r->signals);
    uv_close((uv_handle_t *)&r->progress, NULL);
    if (r->producer) rmq__producer_destroy(r->producer);
    r->producer = NULL;
    if (r->rt) rmq__remoting_destroy(r->rt, on_rt_closed, r);
}

static void on_pool_closed(void *ud)
{
    redrive_run_t *r = ud;
    r->pool = NULL;
    if (r->started) report(r, 1);
    rmq__fdw_close(r->out, on_out_closed, r);
}

static void finish(redrive_run_t *r)
{
    if (r->pool)
        rmq__pool_stop(r->pool, 0, on_pool_closed, r);
    else
        on_pool_closed(r);
}

/* Stop reading; the batches being moved finish (and commit) first. */
static void stop(redrive_run_t *r, int code)
{
    if (code > r->exit_code) r->exit_code = code;
    if (r->stopping) return;
    r->stopping = 1;
    if (r->reader) rmq__reader_destroy(r->reader);
    r->reader = NULL;
    if (r->jobs == 0) finish(r);
}

/* SIGINT, SIGTERM: stop as at the end. */
static void on_signal(void *ud)
{
    stop(ud, 0);
}

/* A broker's ACL refused a request (said by cli_conn.c): stop reading; the batches being moved
 * end at their first message not moved, and their progress is recorded if the broker lets us. */
static void on_acl_refused(void *ud)
{
    stop(ud, RMQ_CLI_EXIT_ACL);
}

/* ---- a batch: move, commit, next ----------------------------------------------------------------
 */

static void job_closed(uv_handle_t *h)
{
    job_t *j = h->data;
    redrive_run_t *r = j->run;
    free(j);
    if (--r->jobs == 0 && r->stopping) finish(r);
}

static void job_end(job_t *j)
{
    redrive_run_t *r = j->run;
    for (int i = 0; i < j->n; i++)
        if (j->msgs[i]) rmq__msg_release(j->msgs[i]);
    if (!r->stopping) {
        if (j->failed)
            rmq__reader_stop_queue(j->q);
        else
            rmq__reader_next(j->q);
    }
    uv_close((uv_handle_t *)&j->timer, job_closed);
}

static void commit(job_t *j);

static void on_commit_timer(uv_timer_t *t)
{
    commit(t->data);
}

static void on_commit(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    job_t *j = ud;
    if (!err && resp->code == RMQ_RESP_SUCCESS) {
        rmq_dbg(RMQ_DBG_OFFSET, "redrive", "%s#%d: progress %" PRId64 " committed", j->broker,
                j->queue_id, j->commit);
        job_end(j);
        return;
    }
    char why[300];
    snprintf(why, sizeof(why), "%s",
             err            ? errmsg
             : resp->remark ? resp->remark
                            : rmq_err_name(resp->code));
    /* An ACL refusal (said once by cli_conn.c) does not go away by asking again. */
    if (++j->tries < COMMIT_TRIES && !(resp && rmq__acl_refused(resp))) {
        rmq_log_warn("redrive", "%s#%d: recording the progress (%" PRId64 ") failed: %s; again",
                     j->broker, j->queue_id, j->commit, why);
        uv_timer_start(&j->timer, on_commit_timer, 1000, 0);
        return;
    }
    rmq_log_error("redrive",
                  "%s#%d: cannot record the progress (offset %" PRId64 ") in group %s: "
                  "%s. What this batch moved may move again at the next run",
                  j->broker, j->queue_id, j->commit, j->run->progress_group, why);
    j->run->exit_code = 1;
    j->failed = 1;
    job_end(j);
}

static void commit(job_t *j)
{
    redrive_run_t *r = j->run;
    if (r->dry_run) {
        job_end(j);
        return;
    }
    rmq_cmd_t cmd;
    rmq__reader_queue_cmd(&cmd, RMQ_REQ_UPDATE_CONSUMER_OFFSET, r->progress_group, r->dlq,
                          j->queue_id);
    rmq__cmd_set_ext_i64(&cmd, "commitOffset", j->commit);
    int rc = rmq__remoting_request(r->rt, j->addr, &cmd, COMMIT_TIMEOUT_MS, on_commit, j);
    rmq__cmd_free(&cmd);
    if (rc) on_commit(j, rc, NULL, rmq_err_str(rc));
}

/* Properties a dead letter carries for the retry and DLQ bookkeeping (set by CONSUMER_SEND_MSG_
 * BACK, the schedule service and the consumer), dropped from what is sent again. */
static const char *const bookkeeping[] = {"DELAY",
                                          "REAL_TOPIC",
                                          "REAL_QID",
                                          "RECONSUME_TIME",
                                          "MAX_RECONSUME_TIMES",
                                          "WAIT",
                                          "CLUSTER",
                                          "MIN_OFFSET",
                                          "MAX_OFFSET",
                                          "CONSUME_START_TIME",
                                          "TRAN_MSG",
                                          "PGROUP",
                                          "TRAN_PREPARED_QUEUE_OFFSET"};
/* What the first trip to the retry topic added: gone when the message goes home. */
static const char *const origin_only[] = {"RETRY_TOPIC", "ORIGIN_MESSAGE_ID"};

static void send_next(job_t *j);

/* m could not be moved (said by the caller): a failure; the queue stops at m, and the progress
 * recorded is m's offset, so that the next run starts with it. */
static void stop_at(job_t *j, const rmq_msg_t *m)
{
    j->run->failed++;
    j->run->exit_code = 1;
    j->failed = 1;
    j->commit = m->queue_offset;
    commit(j);
}

static void on_sent(void *ud, int err, const rmq_send_result_t *res, const char *errmsg)
{
    job_t *j = ud;
    redrive_run_t *r = j->run;
    rmq_msg_t *m = j->msgs[j->i];
    if (err) {
        if (!r->cc.refused) { /* an ACL refusal was said once by cli_conn.c */
            char *d = described(m);
            rmq_log_error("redrive",
                          "cannot move %s: %s (%s); this queue stops here, the next run "
                          "starts with it",
                          d, errmsg, rmq_err_name(err));
            free(d);
        }
        stop_at(j, m);
        return;
    }
    r->moved++;
    if (r->verbose) {
        rmq_buf_t *b = rmq__fdw_buf(r->out);
        rmq__buf_append(b, "moved ", 6);
        describe(b, m);
        rmq__buf_appendf(b, " -> %s msgId=%s queue=%s#%d offset=%" PRId64 "\n", res->topic,
                         res->msg_id, res->broker_name, (int)res->queue_id, res->queue_offset);
        rmq__fdw_flush(r->out);
    }
    j->i++;
    send_next(j);
}

/* Send the selected messages one after the other, then commit the batch. */
static void send_next(job_t *j)
{
    redrive_run_t *r = j->run;
    while (j->i < j->nsel) {
        rmq_msg_t *m = j->msgs[j->i];
        char topic[300];
        if (r->to_origin) {
            uint32_t tl = 0;
            const char *t = rmq__props_find(m->props, m->props_len, "RETRY_TOPIC", 11, &tl);
            if (!t || tl >= sizeof(topic)) {
                char *d = described(m);
                rmq_log_error("redrive",
                              "%s has no RETRY_TOPIC property: its original topic is "
                              "unknown (redrive it without --to-origin); this queue stops here",
                              d);
                free(d);
                stop_at(j, m);
                return;
            }
            memcpy(topic, t, tl);
            topic[tl] = 0;
        } else {
            snprintf(topic, sizeof(topic), "%s", r->retry);
        }
        if (r->dry_run) {
            rmq_buf_t *b = rmq__fdw_buf(r->out);
            rmq__buf_append(b, "would move ", 11);
            describe(b, m);
            rmq__buf_appendf(b, " -> %s\n", topic);
            rmq__fdw_flush(r->out);
            r->moved++;
            j->i++;
            continue;
        }
        rmq_prop_t drop[RMQ_ARRAY_SIZE(bookkeeping) + RMQ_ARRAY_SIZE(origin_only)];
        int nd = 0;
        for (size_t k = 0; k < RMQ_ARRAY_SIZE(bookkeeping); k++)
            drop[nd++] = (rmq_prop_t){bookkeeping[k], NULL};
        if (r->to_origin)
            for (size_t k = 0; k < RMQ_ARRAY_SIZE(origin_only); k++)
                drop[nd++] = (rmq_prop_t){origin_only[k], NULL};
        rmq_send_msg_t sm = {.topic = topic,
                             .body = m->body,
                             .body_len = m->body_len,
                             .flag = m->flag,
                             .props_raw = m->props,
                             .props_raw_len = m->props_len,
                             .props = drop,
                             .n_props = nd};
        char err[300];
        int rc = rmq__producer_send(r->producer, &sm, on_sent, j, err, sizeof(err));
        if (rc) on_sent(j, rc, NULL, err);
        return;
    }
    j->commit = j->next;
    commit(j);
}

static void start_job(job_t *j)
{
    redrive_run_t *r = j->run;
    r->skipped += j->n - j->nsel;
    send_next(j);
}

static void on_where_done(void *ud, rmq_batch_t *b)
{
    (void)ud;
    job_t *j = (job_t *)b;
    redrive_run_t *r = j->run;
    rmq__pool_batch_release(b);
    if (b->status == RMQ_CONSUME_NOT_RUN) {
        /* stopping: nothing of this batch moved, nothing committed (not a failure) */
        j->nsel = 0;
        j->failed = 1;
        job_end(j);
        return;
    }
    if (b->handler_error || b->status != RMQ_CONSUME_SUCCESS) {
        /* the predicate raised (logged by the pool with the message ids) */
        fprintf(stderr,
                "rmqlua redrive: --where failed on %s#%d: this queue stops before queue "
                "offset %" PRId64 "\n",
                j->broker, j->queue_id, j->msgs[0]->queue_offset);
        r->exit_code = 1;
        r->failed++;
        j->failed = 1;
        j->nsel = 0;
        job_end(j);
        return;
    }
    j->nsel = b->ack_count; /* the selected ones come first (rmq.where) */
    start_job(j);
}

static void on_msgs(void *ud, rmq_rq_t *q, rmq_msg_t **msgs, int n)
{
    redrive_run_t *r = ud;
    job_t *j = rmq__xcalloc(1, sizeof(*j) + sizeof(rmq_msg_t *) * (size_t)n);
    memcpy(j->msgs, msgs, sizeof(rmq_msg_t *) * (size_t)n);
    j->run = r;
    j->q = q;
    snprintf(j->broker, sizeof(j->broker), "%s", q->broker_name);
    snprintf(j->addr, sizeof(j->addr), "%s", q->addr);
    j->queue_id = q->queue_id;
    j->n = n;
    j->nsel = n;
    j->next = q->next;
    uv_timer_init(&r->loop, &j->timer);
    j->timer.data = j;
    r->jobs++;
    r->total += n;
    if (r->pool) {
        j->b.msgs = j->msgs;
        j->b.n = n;
        rmq__pool_submit(r->pool, &j->b);
        return;
    }
    start_job(j);
}

static void on_done(void *ud)
{
    stop(ud, 0);
}

static void on_error(void *ud, int code, const char *msg)
{
    redrive_run_t *r = ud;
    if (code == RMQ_RESP_TOPIC_NOT_EXIST) {
        fprintf(stderr,
                "rmqlua redrive: nothing to redrive: %s does not exist (group %s has "
                "sent nothing to its dead-letter queue)\n",
                r->dlq, r->group);
        stop(r, 0);
        return;
    }
    fprintf(stderr, "rmqlua redrive: %s\n", msg);
    if (code == RMQ_RESP_NO_PERMISSION)
        fprintf(stderr,
                "rmqlua redrive: a 4.9 broker creates %s write-only: allow reading "
                "(mqadmin updateTopicPerm -n NAMESRV -c CLUSTER -t '%s' -p 6) and run "
                "redrive again\n",
                r->dlq, r->dlq);
    stop(r, 1);
}

static void on_ready(void *ud, rmq_rq_t **qs, int n)
{
    redrive_run_t *r = ud;
    int64_t left = 0;
    /* The ends are the broker's max offsets: any int64 may come, and the sum saturates. */
    for (int i = 0; i < n; i++)
        left = rmq__add_sat(left, rmq__lag(qs[i]->end, qs[i]->next));
    r->started = 1;
    fprintf(stderr,
            "rmqlua redrive: %s: %" PRId64 " dead letter(s) after the progress of group "
            "%s, in %d queue(s)%s\n",
            r->dlq, left, r->progress_group, n, r->dry_run ? " (dry run)" : "");
}

/* ---- command line ---------------------------------------------------------------------------- */

static int group_ok(const char *g)
{
    return rmq__name_ok(g, 255);
}

/* Says on stderr that the value g of option opt is not a kind name (then more); returns 2, the
 * exit code of a usage error. */
static int not_a_name(const char *opt, const char *g, const char *kind, const char *more)
{
    fprintf(stderr, "rmqlua redrive: %s '%s' is not a %s name (1..255 of [%%|a-zA-Z0-9_-]%s)\n",
            opt, g, kind, more);
    return 2;
}

static int parse_args(redrive_run_t *r, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int c;
#define NEED_VALUE() RMQ_CLI_NEED_VALUE(&r->cc, v)
        if ((c = rmq__cli_conn_arg(&r->cc, argc, argv, &i)) != 0) {
            if (c != 1) return c < 0 ? 2 : 1; /* -h, --help, --namesrv, --set, --log-debug */
        } else if (!strcmp(a, "--group") || !strcmp(a, "-g")) {
            NEED_VALUE();
            r->group = v;
        } else if (!strcmp(a, "--to-origin")) {
            r->to_origin = 1;
        } else if (!strcmp(a, "--where")) {
            NEED_VALUE();
            r->where = v;
        } else if (!strcmp(a, "--dry-run")) {
            r->dry_run = 1;
        } else if (!strcmp(a, "--progress-group")) {
            NEED_VALUE();
            r->progress_group_opt = v;
        } else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
            r->verbose = 1;
        } else {
            fprintf(stderr, "rmqlua redrive: unknown argument '%s' (see rmqlua redrive --help)\n",
                    a);
            return 2;
        }
#undef NEED_VALUE
    }
    if (!r->group) {
        fprintf(stderr, "rmqlua redrive: --group is required (the consumer group whose %%DLQ%% "
                        "topic to redrive)\n");
        return 2;
    }
    if (!group_ok(r->group) || !strncmp(r->group, "%DLQ%", 5) || !strncmp(r->group, "%RETRY%", 7))
        return not_a_name("--group", r->group, "consumer group", ", not a %RETRY% or %DLQ% topic");
    if (rmq__cli_conn_check(&r->cc)) return 2;
    /* In a namespace: the group's wire name (NamespaceUtil.wrapNamespace), whose %DLQ% and
     * %RETRY% topics a consumer of G with that namespace uses. */
    const char *ns = rmq__cli_conn_namespace(&r->cc);
    char *wg = rmq__ns_wrap(ns, r->group);
    int wg_ok = group_ok(wg);
    snprintf(r->dlq, sizeof(r->dlq), "%%DLQ%%%s", wg);
    snprintf(r->retry, sizeof(r->retry), "%%RETRY%%%s", wg);
    if (r->progress_group_opt) {
        char *wp = rmq__ns_wrap(ns, r->progress_group_opt);
        snprintf(r->progress_group, sizeof(r->progress_group), "%s", wp);
        free(wp);
    } else {
        snprintf(r->progress_group, sizeof(r->progress_group), "%%REDRIVE%%%s", wg);
    }
    if (!wg_ok) {
        fprintf(stderr, "rmqlua redrive: --group '%s' in namespace %s is '%s': longer than 255\n",
                r->group, ns ? ns : "(none)", wg);
        free(wg);
        return 2;
    }
    free(wg);
    if (!group_ok(r->progress_group))
        return not_a_name("--progress-group", r->progress_group, "group", "");
    if (rmq__cli_conn_namesrv(&r->cc)) return 2;
    return 0;
}

static void run_free(redrive_run_t *r)
{
    rmq__cli_conn_free(&r->cc);
    free(r);
}

int rmq__cli_redrive(int argc, char **argv)
{
    redrive_run_t *r = rmq__xcalloc(1, sizeof(*r));
    rmq__cli_conn_init(&r->cc, "redrive", 1, usage);
    r->cc.on_refused = on_acl_refused;
    r->cc.ud = r;
    int rc = parse_args(r, argc, argv);
    char err[1024];
    if (rc) {
        run_free(r);
        return rc == 1 ? 0 : rc;
    }
    rmq_producer_opts_t po;
    memset(&po, 0, sizeof(po));
    po.retry_times = -1;
    if ((rc = rmq__cli_conn_open(&r->cc, &r->loop, &r->rt)) != 0) goto fail;
    if (!r->dry_run && rmq__producer_new(&r->loop, r->rt, &po, &r->producer, err, sizeof(err))) {
        fprintf(stderr, "rmqlua redrive: %s\n", err);
        rc = 2;
        goto fail;
    }
    if (r->where) {
        rmq_pool_opts_t pl = {.script_path = r->where,
                              .nthreads = 1,
                              .loop = &r->loop,
                              .done = on_where_done,
                              .ud = r,
                              .consumer_group = r->group,
                              .loader_module = "rmq.where",
                              .dispatch_module = "rmq.where"};
        if (rmq__pool_start(&pl, &r->pool, err, sizeof(err))) {
            fprintf(stderr, "rmqlua redrive: --where: %s\n", err);
            rc = 2;
            goto fail;
        }
    }
    r->out = rmq__fdw_new(&r->loop, 1);
    rmq_reader_opts_t o = {.loop = &r->loop,
                           .rt = r->rt,
                           .topic = r->dlq,
                           .group = r->progress_group,
                           .from = RMQ_FROM_COMMITTED,
                           .stop_at_end = 1,
                           .queue_id = -1,
                           .ud = r,
                           .on_ready = on_ready,
                           .on_msgs = on_msgs,
                           .on_done = on_done,
                           .on_error = on_error};
    if (rmq__reader_start(&o, &r->reader, err, sizeof(err))) {
        fprintf(stderr, "rmqlua redrive: %s\n", err);
        rc = 2;
        goto fail;
    }
    rmq__cli_signals_start(&r->signals, &r->loop, on_signal, r);
    uv_timer_init(&r->loop, &r->progress);
    r->progress.data = r;
    uv_timer_start(&r->progress, on_progress, PROGRESS_EVERY_MS, PROGRESS_EVERY_MS);
    uv_run(&r->loop, UV_RUN_DEFAULT);
    uv_loop_close(&r->loop);
    rc = r->cc.refused ? RMQ_CLI_EXIT_ACL : r->exit_code;
    run_free(r);
    return rc;
fail:
    if (r->pool) rmq__pool_stop(r->pool, 0, NULL, NULL);
    if (r->producer) rmq__producer_destroy(r->producer);
    if (r->rt) rmq__remoting_destroy(r->rt, NULL, NULL);
    uv_run(&r->loop, UV_RUN_DEFAULT);
    uv_loop_close(&r->loop);
    run_free(r);
    return rc;
}
