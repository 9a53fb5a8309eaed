/*
 * devbroker_pull.c -- PULL_MESSAGE of the development broker: the status mapping of
 * PullMessageProcessor, tag and SQL92 filtering, and long polling (a pull parked on its queue
 * until a message arrives, its suspend timeout ends, or PullRequestHoldService's 5 s check
 * finds the queue grown).
 *
 * PROTOCOL.md 2.3 (per-command rules), 5.3 (pull).
 *
 * Ownership: a parked pull keeps its connection and its request frame until it is answered or
 * dropped. The store tells of new messages through b->arriving (set by rmq__db_pull_install).
 * Threads: the broker thread only.
 */
#include "devbroker_int.h"
#include "protocol/sql92.h"
#include "protocol/subscription.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SYSFLAG_COMMIT 0x1
#define SYSFLAG_SUSPEND 0x2
#define SYSFLAG_SUBSCRIPTION 0x4

#define MAX_TRANSFER_BYTES (256 * 1024) /* maxTransferBytesOnMessageInMemory */
#define MAX_TRANSFER_COUNT 32           /* maxTransferCountOnMessageInMemory */
#define CQ_FILE_ENTRIES 300000          /* entries per consume queue file (6000000 / 20) */
#define HOLD_CHECK_MS 5000              /* PullRequestHoldService period with long polling */

/* ---- PULL_MESSAGE ---------------------------------------------------------------------------- */

typedef struct pull_write {
    int n;
    db_msg_t *msgs[];
} pull_write_t;

static void pull_written(void *ud, int status)
{
    pull_write_t *w = ud;
    for (int i = 0; i < w->n; i++)
        rmq__db_msg_release(w->msgs[i]);
    free(w);
}

static void park_closed(uv_handle_t *h)
{
    db_park_t *p = h->data;
    free(p);
}

static void park_finish(db_broker_t *b, db_park_t *p)
{
    if (p->qprev)
        p->qprev->qnext = p->qnext;
    else
        p->q->parked = p->qnext;
    if (p->qnext) p->qnext->qprev = p->qprev;
    if (p->bprev)
        p->bprev->bnext = p->bnext;
    else
        b->parks = p->bnext;
    if (p->bnext) p->bnext->bprev = p->bprev;
    rmq__conn_release(p->conn);
    rmq__rbuf_release(p->frame);
    if (p->sub) rmq__sub_destroy(p->sub);
    rmq__sql92_free(p->expr);
    uv_close((uv_handle_t *)&p->timer, park_closed);
}

static void do_pull(db_broker_t *b, rmq_conn_t *conn, rmq_cmd_t *req, int allow_suspend);

static void park_wake(db_broker_t *b, db_park_t *p)
{
    if (rmq__conn_state(p->conn) == RMQ_CONN_OPEN && b->node.t) {
        rmq_cmd_t c;
        char err[128];
        if (rmq__cmd_decode(p->frame, &c, err, sizeof(err)) == 0) {
            do_pull(b, p->conn, &c, 0);
            rmq__cmd_free(&c);
        }
    }
    park_finish(b, p);
}

static void park_timeout(uv_timer_t *t)
{
    db_park_t *p = t->data;
    park_wake(p->b, p);
}

/* isMatchedByConsumeQueue (tags code), then for SQL92 isMatchedByCommitLog (properties). */
static int sub_match(const rmq_sub_t *sub, const rmq_sql92_t *expr, const db_msg_t *m)
{
    if (!sub) return 1;
    if (!rmq__db_filter_is_tag(sub->expression_type)) return rmq__db_filter_match(expr, m);
    return rmq__sub_match_code(sub, 1, m->has_tag ? m->tagcode : 0);
}

/* The store's MessageArrivingListener (b->arriving): m was stored in q, so the pulls parked on
 * q that it matches run again; m NULL: q's topic is being deleted, every pull parked on it is
 * answered now. */
static void arriving(db_broker_t *b, db_queue_t *q, db_msg_t *m)
{
    rmq__db_pop_arriving(b, q, m); /* and the parked POP_MESSAGEs of q's topic */
    if (!m) {
        while (q->parked)
            park_wake(b, q->parked);
        return;
    }
    db_park_t *p = q->parked;
    while (p) {
        db_park_t *next = p->qnext;
        if (rmq__db_qmax(q) > p->offset && sub_match(p->sub, p->expr, m)) park_wake(b, p);
        p = next;
    }
}

void rmq__db_drop_parked(db_broker_t *b)
{
    while (b->parks)
        park_finish(b, b->parks);
    rmq__db_pop_drop_parked(b);
}

void rmq__db_pull_conn_closed(db_broker_t *b, rmq_conn_t *conn)
{
    for (db_park_t *p = b->parks, *n; p; p = n) {
        n = p->bnext;
        if (p->conn == conn) park_finish(b, p);
    }
    rmq__db_pop_conn_closed(b, conn);
}

/* PullRequestHoldService.checkHoldRequest, every 5 s: a parked pull whose queue has grown runs
 * again whatever the tags of the new messages (only filtered ones: the pull answers
 * PULL_RETRY_IMMEDIATELY / NO_MATCHED_MESSAGE with nextBeginOffset past them). */
void rmq__db_pull_hold_check(db_broker_t *b, int64_t now_mono)
{
    if (now_mono - b->hold_check_ms < HOLD_CHECK_MS) return;
    b->hold_check_ms = now_mono;
    /* From the head again after each wake: answering may close a connection, and its other
     * parked pulls go with it. */
    db_park_t *p = b->parks;
    while (p) {
        if (rmq__db_qmax(p->q) > p->offset) {
            park_wake(b, p);
            p = b->parks;
        } else {
            p = p->bnext;
        }
    }
}

static const char *status_name[] = {"FOUND",
                                    "NO_MATCHED_MESSAGE",
                                    "MESSAGE_WAS_REMOVING",
                                    "OFFSET_FOUND_NULL",
                                    "OFFSET_OVERFLOW_BADLY",
                                    "OFFSET_OVERFLOW_ONE",
                                    "OFFSET_TOO_SMALL",
                                    "NO_MATCHED_LOGIC_QUEUE",
                                    "NO_MESSAGE_IN_QUEUE"};
enum {
    ST_FOUND,
    ST_NO_MATCHED_MESSAGE,
    ST_MESSAGE_WAS_REMOVING,
    ST_OFFSET_FOUND_NULL,
    ST_OFFSET_OVERFLOW_BADLY,
    ST_OFFSET_OVERFLOW_ONE,
    ST_OFFSET_TOO_SMALL,
    ST_NO_MATCHED_LOGIC_QUEUE,
    ST_NO_MESSAGE_IN_QUEUE
};

static void do_pull(db_broker_t *b, rmq_conn_t *conn, rmq_cmd_t *req, int allow_suspend)
{
    db_hdr_t h = {conn, req, 0};
    const char *group = rmq__db_hdr_str(&h, "consumerGroup");
    const char *topic = rmq__db_hdr_str(&h, "topic");
    int64_t qid = rmq__db_hdr_i64(&h, "queueId");
    int64_t offset = rmq__db_hdr_i64(&h, "queueOffset");
    int64_t max_nums = rmq__db_hdr_i64(&h, "maxMsgNums");
    int64_t sys_flag = rmq__db_hdr_i64(&h, "sysFlag");
    int64_t commit_offset = rmq__db_hdr_i64(&h, "commitOffset");
    int64_t suspend_ms = rmq__db_hdr_i64(&h, "suspendTimeoutMillis");
    rmq__db_hdr_i64(&h, "subVersion");
    if (h.failed) return;
    int64_t sub_version = 0;
    rmq__cmd_ext_i64(req, "subVersion", &sub_version);
    const char *expr_type = rmq__cmd_ext(req, "expressionType");
    const char *sub_str = rmq__cmd_ext(req, "subscription");

    /* PullMessageProcessor: the group's config (created when missing), then consumeEnable. */
    const db_subgroup_t *sg = rmq__db_subgroup_find(b, group);
    if (!sg->consume_enable) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_NO_PERMISSION,
                            "subscription group no permission, %s", group);
        return;
    }

    db_topic_t *t = rmq__db_topic_get(b, topic);
    if (rmq__db_check_read(conn, req, t, topic, qid, 0, "pulling")) return;

    rmq_sub_t *own = NULL;
    const rmq_sub_t *sub = NULL;
    if (sys_flag & SYSFLAG_SUBSCRIPTION) {
        char err[256];
        if (rmq__sub_build(topic, sub_str ? sub_str : "", expr_type, &own, err, sizeof(err))) {
            rmq__db_reply_code(conn, req, RMQ_RESP_SUBSCRIPTION_PARSE_FAILED,
                               "parse the consumer's subscription failed");
            return;
        }
        sub = own;
    } else {
        db_group_t *g = rmq__dbmap_get(&b->groups, group);
        if (!g) {
            rmq__db_reply_code(conn, req, RMQ_RESP_SUBSCRIPTION_NOT_EXIST,
                               "the consumer's group info not exist\nSee "
                               "http://rocketmq.apache.org/docs/faq/ for further details.");
            return;
        }
        if (!sg->consume_broadcast_enable && g->message_model &&
            strcmp(g->message_model, "BROADCASTING") == 0) {
            rmq__db_reply_codef(conn, req, RMQ_RESP_NO_PERMISSION,
                                "the consumer group[%s] can not consume by broadcast way", group);
            return;
        }
        sub = rmq__dbmap_get(&g->subs, topic);
        if (!sub) {
            rmq__db_reply_code(conn, req, RMQ_RESP_SUBSCRIPTION_NOT_EXIST,
                               "the consumer's subscription not exist\nSee "
                               "http://rocketmq.apache.org/docs/faq/ for further details.");
            return;
        }
        if (sub->sub_version < sub_version) {
            rmq__db_reply_code(conn, req, RMQ_RESP_SUBSCRIPTION_NOT_LATEST,
                               "the consumer's subscription not latest");
            return;
        }
    }
    /* SQL92: the filter data (or FILTER_DATA_NOT_EXIST / _NOT_LATEST), then the refusal of a
     * broker without property filtering (devbroker_filter.c). */
    rmq_sql92_t *expr = NULL;
    if (rmq__db_filter_for_pull(b, conn, req, group, sub, own != NULL, sub_version, &expr) < 0) {
        if (own) rmq__sub_destroy(own);
        return;
    }
    if (rmq__db_filter_is_tag(sub->expression_type) && sub->sub_string &&
        strcmp(sub->sub_string, RMQ_SUB_ALL) == 0)
        sub = NULL;

    db_queue_t *q = rmq__db_queue(t, (int)qid);
    int64_t min = q->min_off, max = rmq__db_qmax(q), next = offset;
    int status;
    db_msg_t *found[MAX_TRANSFER_COUNT];
    int n = 0;
    if (max == 0) {
        status = ST_NO_MESSAGE_IN_QUEUE;
        next = 0;
    } else if (offset < min) {
        status = ST_OFFSET_TOO_SMALL;
        next = min;
    } else if (offset == max) {
        status = ST_OFFSET_OVERFLOW_ONE;
        next = offset;
    } else if (offset > max) {
        status = ST_OFFSET_OVERFLOW_BADLY;
        next = min == 0 ? min : max;
    } else {
        status = ST_NO_MATCHED_MESSAGE;
        /* DefaultMessageStore.getMessage: up to max(16000, maxMsgNums * 20) bytes of consume
         * queue (20 per entry), and never past the end of the consume queue file holding
         * `offset` (getIndexBuffer maps one file). */
        int64_t scan_cap = max_nums > 800 ? max_nums : 800;
        int64_t file_end = (offset / CQ_FILE_ENTRIES + 1) * CQ_FILE_ENTRIES;
        int64_t end = max < file_end ? max : file_end;
        int64_t i = offset, scanned = 0;
        size_t bytes = 0;
        while (i < end && scanned < scan_cap) {
            db_msg_t *m = rmq__db_qget(q, i);
            if (!m) {
                /* Offsets skipped by rmq_devbroker_skip_offsets have no entries to scan: go
                 * straight to the next message (a broker would answer NO_MATCHED_MSG per file
                 * of filtered entries on the way, ending at the same place). */
                m = rmq__db_qnext(q, i);
                if (!m) {
                    i = max;
                    break;
                }
                i = m->qoff;
                file_end = (i / CQ_FILE_ENTRIES + 1) * CQ_FILE_ENTRIES;
                end = max < file_end ? max : file_end;
            }
            if (n > 0 && bytes > 0) {
                if (max_nums <= n || bytes + m->size > MAX_TRANSFER_BYTES ||
                    n > MAX_TRANSFER_COUNT - 1)
                    break;
            }
            scanned++;
            i++;
            if (!sub_match(sub, expr, m)) continue;
            found[n++] = m;
            bytes += m->size;
            status = ST_FOUND;
        }
        next = i;
    }

    int code;
    switch (status) {
    case ST_FOUND:
        code = RMQ_RESP_SUCCESS;
        break;
    case ST_NO_MESSAGE_IN_QUEUE:
    case ST_NO_MATCHED_LOGIC_QUEUE:
        code = offset != 0 ? RMQ_RESP_PULL_OFFSET_MOVED : RMQ_RESP_PULL_NOT_FOUND;
        break;
    case ST_OFFSET_FOUND_NULL:
    case ST_OFFSET_OVERFLOW_ONE:
        code = RMQ_RESP_PULL_NOT_FOUND;
        break;
    case ST_OFFSET_OVERFLOW_BADLY:
    case ST_OFFSET_TOO_SMALL:
        code = RMQ_RESP_PULL_OFFSET_MOVED;
        break;
    default:
        code = RMQ_RESP_PULL_RETRY_IMMEDIATELY;
        break;
    }

    if (allow_suspend && (sys_flag & SYSFLAG_COMMIT))
        rmq__db_offset_set(b, group, topic, (int)qid, commit_offset);
    {
        int64_t got = 0;
        for (int i = 0; i < n; i++)
            got += found[i]->size;
        rmq__db_stats_on_get(b, topic, group, n, got);
    }

    if (code == RMQ_RESP_PULL_NOT_FOUND && allow_suspend && (sys_flag & SYSFLAG_SUSPEND) &&
        req->frame) {
        db_park_t *p = rmq__xcalloc(1, sizeof(*p));
        p->q = q;
        p->b = b;
        p->conn = rmq__conn_keep(conn);
        p->frame = rmq__rbuf_keep(req->frame);
        p->offset = offset;
        p->sub = sub ? rmq__sub_dup(sub) : NULL;
        p->expr = expr; /* the parked pull owns it now */
        expr = NULL;
        p->qnext = q->parked;
        if (p->qnext) p->qnext->qprev = p;
        q->parked = p;
        p->bnext = b->parks;
        if (p->bnext) p->bnext->bprev = p;
        b->parks = p;
        uv_timer_init(&b->node.db->loop, &p->timer);
        p->timer.data = p;
        uv_timer_start(&p->timer, park_timeout, (uint64_t)(suspend_ms > 0 ? suspend_ms : 0), 0);
        if (own) rmq__sub_destroy(own);
        return;
    }
    if (own) rmq__sub_destroy(own);
    rmq__sql92_free(expr);
    if (req->flag & RMQ_FLAG_ONEWAY) return;

    rmq_cmd_t resp;
    rmq__cmd_init_response(&resp, req, code, status_name[status]);
    /* A long-polled request is answered by the hold service in the server's default type. */
    if (!allow_suspend) resp.serialize = RMQ_SERIALIZE_JSON;
    rmq__cmd_set_ext_i64(&resp, "suggestWhichBrokerId", b->suggest_id);
    rmq__cmd_set_ext_i64(&resp, "nextBeginOffset", next);
    rmq__cmd_set_ext_i64(&resp, "maxOffset", b->told_max == INT64_MIN ? max : b->told_max);
    rmq__cmd_set_ext_i64(&resp, "minOffset", min);
    if (n == 0) {
        rmq__db_reply(conn, &resp);
        rmq__cmd_free(&resp);
        return;
    }
    pull_write_t *w = rmq__xmalloc(sizeof(*w) + sizeof(db_msg_t *) * (size_t)n);
    uv_buf_t bufs[MAX_TRANSFER_COUNT];
    w->n = n;
    unsigned nb = 0;
    for (int i = 0; i < n; i++) {
        w->msgs[i] = found[i];
        found[i]->refs++;
        /* Neighbours in one chunk go out as one buffer. */
        if (nb && bufs[nb - 1].base + bufs[nb - 1].len == found[i]->data) {
            bufs[nb - 1].len += found[i]->size;
        } else {
            bufs[nb++] = uv_buf_init(found[i]->data, found[i]->size);
        }
    }
    if (rmq__conn_reply_ex(conn, &resp, bufs, nb, pull_written, w) != 0)
        pull_written(w, RMQ_ERR_TRANSPORT);
    rmq__cmd_free(&resp);
}

static void h_pull(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    do_pull(rmq__db_broker_of(node), conn, req, 1);
}

void rmq__db_pull_install(db_broker_t *b)
{
    rmq__db_set_handler(&b->node, RMQ_REQ_PULL_MESSAGE, h_pull);
    b->arriving = arriving;
}
