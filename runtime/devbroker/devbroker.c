/*
 * devbroker.c -- the development broker's life cycle and control API: options, the broker
 * thread and its loop, the request gate (recording, injected errors, latency), and the
 * synchronous controls callable from other threads.
 *
 * Ownership: rmq_devbroker_t owns the loop, the name server node, the brokers and the
 * request records. Control calls post a db_op_t to the loop (async + mutex) and wait on the
 * condition variable until the loop marks it done.
 * Threads: functions named rmq_devbroker_* / rmq__devbroker_start run on any thread but the
 * broker's; everything static below the "loop thread" mark runs on the broker thread.
 */
#include "devbroker_int.h"
#include "protocol/message.h"
#include "net/tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- options --------------------------------------------------------------------------------- */

static const char usage_text[] =
    "usage: rmqlua broker [options]\n"
    "\n"
    "A development broker: one RocketMQ name server and N brokers in one process, for\n"
    "development and tests only. Messages are kept in memory (nothing survives a restart\n"
    "unless --store is given); when a broker holds more than --max-bytes the oldest messages\n"
    "are dropped.\n"
    "\n"
    "options:\n"
    "  --listen HOST:PORT        name server address (default 127.0.0.1:9876)\n"
    "  --brokers N               brokers in this process (default 1, max 16)\n"
    "  --slaves N                slaves per broker (default 0, max 3): same broker name, broker\n"
    "                            ids 1..N, messages replicated, offsets and reads served, writes\n"
    "                            refused (memory only: not with --store or --name-server)\n"
    "  --broker-listen A[,B...]  broker addresses HOST:PORT (default 127.0.0.1:0 each)\n"
    "  --broker-name PREFIX      broker names PREFIX-a, PREFIX-b, ... (default broker)\n"
    "  --cluster NAME            cluster name (default DefaultCluster)\n"
    "  --topic NAME[:QUEUES]     create a topic on every broker (repeatable; default 8 queues)\n"
    "  --default-queues N        queues of TBW102 and of auto-created topics (default 8)\n"
    "  --delay-scale F           multiply the delay levels (1s 5s 10s 30s 1m ... 2h) by F\n"
    "  --max-bytes N[K|M|G]      message bytes kept per broker (default 512M)\n"
    "  --name-server ADDR        serve no name server; register the brokers with ADDR\n"
    "  --channel-expire-ms N     consumer channel expiry without heartbeat (default 120000)\n"
    "  --lock-expire-ms N        queue lock expiry (default 60000)\n"
    "  --enable-property-filter [true|false]\n"
    "                            serve SQL92 subscriptions (enablePropertyFilter; off by\n"
    "                            default as in the Java broker, which then refuses them with\n"
    "                            \"The broker does not support consumer to filter message by\n"
    "                            SQL92\")\n"
    "  --rocketmq-version 4|5    4 (default): a 4.9.4 broker; 5: a 5.3.3 broker, which also\n"
    "                            serves POP consumption and broker-side assignment\n"
    "                            (POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE,\n"
    "                            CHANGE_MESSAGE_INVISIBLETIME, QUERY_ASSIGNMENT,\n"
    "                            SET_MESSAGE_REQUEST_MODE, GET_ALL_MESSAGE_REQUEST_MODE) and\n"
    "                            gives its version and routes as 5.3.3 does\n"
    "  --log-level L             error, warn, info (default) or debug\n"
    "  --log-debug CATS          debug categories: remoting,broker,... or all\n"
    "  --acl FILE                check every broker request against FILE, a plain_acl.yml\n"
    "                            (accounts: accessKey, secretKey, admin, defaultTopicPerm,\n"
    "                            defaultGroupPerm, topicPerms, groupPerms, whiteRemoteAddress;\n"
    "                            globalWhiteRemoteAddresses), as PlainAccessValidator does;\n"
    "                            refusals are answered SYSTEM_ERROR with the AclException text\n"
    "  --tls-cert FILE           serve TLS with this PEM certificate chain (with --tls-key);\n"
    "                            clients check that it names the address they dial (IP\n"
    "                            127.0.0.1 on loopback: subjectAltName IP:127.0.0.1)\n"
    "  --tls-key FILE            its PEM private key\n"
    "  --tls-key-password P      the key's password\n"
    "  --tls-mode MODE           permissive (default: plain and TLS clients on one port, told\n"
    "                            apart by their first byte) or enforcing (plain ones refused)\n"
    "  --tls-verify-client CA    require client certificates signed by the CAs in file CA\n"
    "  --store DIR               also append messages to DIR/<broker>/commitlog and recover\n"
    "                            them at start. Nothing answered is lost on kill -9 (no fsync:\n"
    "                            a machine crash can lose recent writes); lost on kill -9: the\n"
    "                            last second of committed offsets and retries still waiting\n"
    "                            for their delay. The file is never trimmed. A broker given\n"
    "                            no port takes its port of the last run again, so offsetMsgIds\n"
    "                            (queryMsgById) stay valid; the key index is rebuilt at start.\n"
    "  --fault CODE:RATE:KIND    make requests with CODE (number or name, e.g. PULL_MESSAGE)\n"
    "                            fail at random with probability RATE (0..1): KIND disconnect\n"
    "                            (close the connection), drop (never answer) or a response\n"
    "                            code (number or name, e.g. SYSTEM_BUSY); repeatable\n"
    "  --help                    this text\n"
    "\n"
    "The Java mqadmin 4.9.4 (and the RocketMQ Dashboard) work against it: updateTopic,\n"
    "topicRoute, topicClusterList, clusterList, brokerStatus, topicList [-c], topicStatus,\n"
    "getBrokerConfig, updateSubGroup, deleteSubGroup, consumerProgress, consumerConnection,\n"
    "consumerStatus, producerConnection, brokerConsumeStats, statsAll, queryMsgByKey,\n"
    "queryMsgByUniqueKey, queryMsgById, queryMsgByOffset, printMsg, resetOffsetByTime,\n"
    "deleteTopic. Other request codes are answered REQUEST_CODE_NOT_SUPPORTED (logged once\n"
    "per code).\n"
    "\n"
    "Prints \"rmqlua broker: name server at HOST:PORT\" when ready; stops on SIGTERM/SIGINT.\n";

const char *rmq__devbroker_usage(void)
{
    return usage_text;
}

static int parse_i64(const char *s, int64_t *out, int allow_suffix)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s) return -1;
    if (allow_suffix && *end) {
        if (*end == 'K' || *end == 'k')
            v *= 1024;
        else if (*end == 'M' || *end == 'm')
            v *= 1024 * 1024;
        else if (*end == 'G' || *end == 'g')
            v *= 1024LL * 1024 * 1024;
        else
            return -1;
        end++;
    }
    if (*end) return -1;
    *out = v;
    return 0;
}

/* The value v of integer option name into *out: 0, or -1 with errstr saying it must be min..max
 * (max < 0: at least min). */
static int int_opt(const char *name, const char *v, int64_t min, int64_t max, int allow_suffix,
                   int64_t *out, char *errstr, size_t errstr_size)
{
    if (!parse_i64(v, out, allow_suffix) && *out >= min && (max < 0 || *out <= max)) return 0;
    if (max < 0)
        rmq__seterr(errstr, errstr_size, "%s must be >= %lld, not '%s'", name, (long long)min, v);
    else
        rmq__seterr(errstr, errstr_size, "%s must be %lld..%lld, not '%s'", name, (long long)min,
                    (long long)max, v);
    return -1;
}

int rmq__devbroker_parse_args(int argc, char **argv, rmq_devbroker_opts_t *o, char *errstr,
                              size_t errstr_size)
{
    memset(o, 0, sizeof(*o));
    o->log_level = -1;
    const char **topics = NULL, **faults = NULL;
    int nt = 0, nf = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            free(topics);
            free(faults);
            return 1;
        }
        if (strncmp(a, "--", 2) != 0) {
            rmq__seterr(errstr, errstr_size, "unexpected argument '%s'", a);
            goto bad;
        }
        if (!strcmp(a, "--enable-property-filter")) {
            /* BrokerConfig.enablePropertyFilter: a bare flag, or followed by true / false. */
            o->enable_property_filter = 1;
            if (i + 1 < argc && (!strcmp(argv[i + 1], "true") || !strcmp(argv[i + 1], "false")))
                o->enable_property_filter = !strcmp(argv[++i], "true");
            continue;
        }
        if (i + 1 >= argc) {
            rmq__seterr(errstr, errstr_size, "option %s needs a value", a);
            goto bad;
        }
        const char *v = argv[++i];
        int64_t n;
        if (!strcmp(a, "--listen"))
            o->listen = v;
        else if (!strcmp(a, "--broker-listen"))
            o->broker_listen = v;
        else if (!strcmp(a, "--broker-name"))
            o->broker_name = v;
        else if (!strcmp(a, "--cluster"))
            o->cluster = v;
        else if (!strcmp(a, "--name-server"))
            o->name_server = v;
        else if (!strcmp(a, "--topic")) {
            const char **nt2 = realloc(topics, sizeof(*topics) * (size_t)(nt + 1));
            if (!nt2) goto nomem;
            topics = nt2;
            topics[nt++] = v;
        } else if (!strcmp(a, "--brokers")) {
            if (int_opt(a, v, 1, RMQ_DEVBROKER_MAX_BROKERS, 0, &n, errstr, errstr_size)) goto bad;
            o->brokers = (int)n;
        } else if (!strcmp(a, "--slaves")) {
            if (int_opt(a, v, 0, RMQ_DEVBROKER_MAX_SLAVES, 0, &n, errstr, errstr_size)) goto bad;
            o->slaves = (int)n;
        } else if (!strcmp(a, "--default-queues")) {
            if (int_opt(a, v, 1, 1024, 0, &n, errstr, errstr_size)) goto bad;
            o->default_queues = (int)n;
        } else if (!strcmp(a, "--delay-scale")) {
            char *end;
            double d = strtod(v, &end);
            if (end == v || *end || !(d > 0) || d > 1000) {
                rmq__seterr(errstr, errstr_size, "--delay-scale must be a number > 0, not '%s'", v);
                goto bad;
            }
            o->delay_scale = d;
        } else if (!strcmp(a, "--max-bytes")) {
            if (int_opt(a, v, 1024, -1, 1, &n, errstr, errstr_size)) goto bad;
            o->max_bytes = n;
        } else if (!strcmp(a, "--channel-expire-ms")) {
            if (int_opt(a, v, 100, -1, 0, &n, errstr, errstr_size)) goto bad;
            o->channel_expire_ms = n;
        } else if (!strcmp(a, "--lock-expire-ms")) {
            if (int_opt(a, v, 1, -1, 0, &n, errstr, errstr_size)) goto bad;
            o->lock_expire_ms = n;
        } else if (!strcmp(a, "--fault")) {
            if (rmq__db_fault_parse(v, NULL, NULL, NULL, errstr, errstr_size)) goto bad;
            const char **nf2 = realloc(faults, sizeof(*faults) * (size_t)(nf + 1));
            if (!nf2) goto nomem;
            faults = nf2;
            faults[nf++] = v;
        } else if (!strcmp(a, "--rocketmq-version")) {
            if (strcmp(v, "4") && strcmp(v, "5")) {
                rmq__seterr(errstr, errstr_size, "--rocketmq-version: '%s' is neither 4 nor 5", v);
                goto bad;
            }
            o->rocketmq5 = !strcmp(v, "5");
        } else if (!strcmp(a, "--store")) {
            o->store_dir = v;
        } else if (!strcmp(a, "--acl")) {
            o->acl_file = v;
        } else if (!strcmp(a, "--tls-cert")) {
            o->tls_cert = v;
        } else if (!strcmp(a, "--tls-key")) {
            o->tls_key = v;
        } else if (!strcmp(a, "--tls-key-password")) {
            o->tls_key_password = v;
        } else if (!strcmp(a, "--tls-verify-client")) {
            o->tls_verify_client = v;
        } else if (!strcmp(a, "--tls-mode")) {
            if (strcmp(v, "permissive") && strcmp(v, "enforcing")) {
                rmq__seterr(errstr, errstr_size,
                            "--tls-mode must be permissive or enforcing, not '%s'", v);
                goto bad;
            }
            o->tls_enforcing = !strcmp(v, "enforcing");
        } else if (!strcmp(a, "--log-debug")) {
            o->log_debug = v;
        } else if (!strcmp(a, "--log-level")) {
            static const char *const lv[] = {"error", "warn", "info", "debug"};
            o->log_level = -1;
            for (int k = 0; k < 4; k++)
                if (!strcmp(v, lv[k])) o->log_level = k;
            if (o->log_level < 0) {
                rmq__seterr(errstr, errstr_size,
                            "--log-level must be error, warn, info or debug, not '%s'", v);
                goto bad;
            }
        } else {
            rmq__seterr(errstr, errstr_size, "unknown option %s (see --help)", a);
            goto bad;
        }
    }
    if (!o->tls_cert != !o->tls_key) {
        rmq__seterr(errstr, errstr_size, "--tls-cert and --tls-key go together");
        goto bad;
    }
    if (!o->tls_cert && (o->tls_key_password || o->tls_verify_client || o->tls_enforcing)) {
        rmq__seterr(errstr, errstr_size, "%s needs --tls-cert and --tls-key",
                    o->tls_key_password ? "--tls-key-password"
                    : o->tls_verify_client ? "--tls-verify-client" : "--tls-mode enforcing");
        goto bad;
    }
    if (nf) { /* one table: topics, then faults (the caller frees opts->topics) */
        const char **all = realloc(topics, sizeof(*topics) * (size_t)(nt + nf));
        if (!all) goto nomem;
        topics = all;
        memcpy(topics + nt, faults, sizeof(*faults) * (size_t)nf);
        free(faults);
        faults = NULL;
        o->faults = topics + nt;
        o->n_faults = nf;
    }
    o->topics = topics;
    o->n_topics = nt;
    return 0;
nomem:
    rmq__seterr(errstr, errstr_size, "out of memory");
bad:
    free(topics);
    free(faults);
    o->topics = NULL;
    return RMQ_ERR_CONFIG;
}

/* ---- loop thread: the request gate ----------------------------------------------------------- */

static void rec_free(db_rec_t *r);

/* What a record keeps of req: a reference on a small frame, else a copy of its header. */
static rmq_rbuf_t *rec_frame(const rmq_cmd_t *req)
{
    rmq_rbuf_t *f = req->frame, *h;
    if (f && f->len <= DB_REC_FRAME_MAX) return rmq__rbuf_keep(f);
    if (f && f->len >= 8) {
        size_t hl = rmq__rd32(f->data + 4) & 0xffffffu;
        if (8 + hl <= f->len && (h = rmq__rbuf_new(8 + hl))) {
            memcpy(h->data, f->data, 8 + hl);
            rmq__wr32(h->data, (uint32_t)(4 + hl));
            return h;
        }
    }
    /* Not a decoded command (or an odd frame): encode its header. */
    rmq_cmd_t tmp = *req;
    rmq_buf_t b;
    rmq__buf_init(&b);
    tmp.body = NULL;
    tmp.body_len = 0;
    h = NULL;
    if (rmq__cmd_encode_header(&tmp, &b) == 0 && (h = rmq__rbuf_new(b.len)))
        memcpy(h->data, b.data, b.len);
    rmq__buf_free(&b);
    return h;
}

static void record(db_node_t *node, const rmq_cmd_t *req)
{
    rmq_devbroker_t *db = node->db;
    if (!db->recording) return;
    rmq_rbuf_t *frame = rec_frame(req), *old = NULL;
    db_rec_t *r = NULL;
    uv_mutex_lock(&db->mu);
    int slot = rmq__db_count_slot(req->code);
    if (slot >= 0) db->counts[node->idx + 1][slot]++;
    if (db->n_recs >= DB_MAX_RECS) { /* reuse the oldest */
        r = db->recs;
        db->recs = r->next;
        if (!db->recs) db->recs_tail = NULL;
        db->n_recs--;
        old = r->frame;
    }
    if (!r) r = rmq__xmalloc(sizeof(*r));
    r->next = NULL;
    r->target = node->idx;
    r->code = req->code;
    r->frame = frame;
    if (db->recs_tail)
        db->recs_tail->next = r;
    else
        db->recs = r;
    db->recs_tail = r;
    db->n_recs++;
    uv_cond_broadcast(&db->cond);
    uv_mutex_unlock(&db->mu);
    rmq__rbuf_release(old);
}

static void rec_free(db_rec_t *r)
{
    rmq__rbuf_release(r->frame);
    free(r);
}

typedef struct db_deferred {
    uv_timer_t timer;
    struct db_deferred *next, *prev;
    db_node_t *node;
    rmq_conn_t *conn;
    rmq_rbuf_t *frame;
    db_handler_fn fn;
} db_deferred_t;

static void deferred_closed(uv_handle_t *h)
{
    free(h->data);
}

static void deferred_unlink(db_deferred_t *d)
{
    rmq_devbroker_t *db = d->node->db;
    if (d->prev)
        d->prev->next = d->next;
    else
        db->deferred = d->next;
    if (d->next) d->next->prev = d->prev;
    rmq__conn_release(d->conn);
    rmq__rbuf_release(d->frame);
    uv_close((uv_handle_t *)&d->timer, deferred_closed);
}

static void deferred_fire(uv_timer_t *t)
{
    db_deferred_t *d = t->data;
    if (rmq__conn_state(d->conn) == RMQ_CONN_OPEN && d->node->t) {
        rmq_cmd_t c;
        char err[128];
        if (rmq__cmd_decode(d->frame, &c, err, sizeof(err)) == 0) {
            d->fn(d->node, d->conn, &c);
            rmq__cmd_free(&c);
        }
    }
    deferred_unlink(d);
}

static void gate(rmq_conn_t *conn, rmq_cmd_t *req, void *ud)
{
    db_node_t *node = ud;
    db_handler_fn fn = NULL;
    for (int i = 0; i < node->nh; i++)
        if (node->h[i].code == req->code) fn = node->h[i].fn;
    if (!fn) return; /* not installed: cannot happen */
    record(node, req);
    /* The broker's ACL RPC hook runs before the processor (the name server checks nothing). */
    if (node->db->acl && !node->is_ns && rmq__db_acl_check(node->db->acl, conn, req)) return;

    for (db_fault_t **pf = &node->faults; *pf; pf = &(*pf)->next) {
        db_fault_t *f = *pf;
        if (f->req_code != req->code || f->count <= 0) continue;
        int code = f->code;
        if (--f->count == 0) {
            *pf = f->next;
            free(f);
        }
        if (code == RMQ_DEVBROKER_DISCONNECT) {
            rmq__conn_close(conn, RMQ_OK, "devbroker: injected disconnect");
        } else {
            rmq__db_reply_code(conn, req, code, "devbroker: injected error");
        }
        return;
    }
    if (node->db->rfaults && rmq__db_fault_roll(node, conn, req)) return;

    int ms = 0;
    for (db_latency_t *l = node->latency; l; l = l->next)
        if (l->req_code == 0 || l->req_code == req->code) ms = l->ms;
    if (ms > 0 && req->frame) {
        db_deferred_t *d = rmq__xcalloc(1, sizeof(*d));
        d->node = node;
        d->conn = rmq__conn_keep(conn);
        d->frame = rmq__rbuf_keep(req->frame);
        d->fn = fn;
        d->next = node->db->deferred;
        if (d->next) d->next->prev = d;
        node->db->deferred = d;
        uv_timer_init(&node->db->loop, &d->timer);
        d->timer.data = d;
        uv_timer_start(&d->timer, deferred_fire, (uint64_t)ms, 0);
        return;
    }
    fn(node, conn, req);
}

/* A request code without a handler: answered REQUEST_CODE_NOT_SUPPORTED with the Java remark
 * (NettyRemotingAbstract.processRequestCommand), recorded like any request, and logged once per
 * code and process (with the code's name) rather than once per request: a tool that polls an
 * unsupported code would otherwise fill the log. */
static void unsupported(rmq_conn_t *conn, rmq_cmd_t *req, void *ud)
{
    db_node_t *node = ud;
    rmq_devbroker_t *db = node->db;
    /* The transport's table holds codes below 65536: the 5.x POP codes (200050...) of the
     * node's table come here and go through the gate. */
    for (int i = 0; i < node->nh; i++)
        if (node->h[i].code == req->code) {
            gate(conn, req, ud);
            return;
        }
    record(node, req);
    char remark[64];
    snprintf(remark, sizeof(remark), " request type %d not supported", req->code);
    unsigned code = (unsigned)req->code & 0xffffu; /* the broker thread's own table */
    if (!(db->unsupported_logged[code / 8] & (1u << (code % 8)))) {
        db->unsupported_logged[code / 8] |= (uint8_t)(1u << (code % 8));
        const char *name = rmq_request_code_name(req->code);
        rmq_log_warn(DB_LOG,
                     "%s: request code %d (%s) from %s is not supported; answered "
                     "REQUEST_CODE_NOT_SUPPORTED (logged once per code)",
                     node->is_ns ? "name server" : ((db_broker_t *)node)->name, req->code,
                     name ? name : "unknown code", rmq__conn_peer(conn));
    }
    rmq__db_reply_code(conn, req, RMQ_RESP_REQUEST_CODE_NOT_SUPPORTED, remark);
}

static void node_on_close(rmq_conn_t *conn, int err, const char *why, void *ud)
{
    db_node_t *node = ud;
    if (node->is_ns)
        rmq__db_ns_conn_closed(node->db, conn);
    else
        rmq__db_broker_conn_closed((db_broker_t *)node, conn);
}

/* Create node->t, install its handlers and listen. */
static int node_up(db_node_t *node, char *errstr, size_t errstr_size)
{
    rmq_remoting_opts_t ro;
    memset(&ro, 0, sizeof(ro));
    ro.loop = &node->db->loop;
    ro.name = node->is_ns ? "devbroker-ns" : "devbroker";
    ro.idle_timeout_ms = node->db->channel_expire_ms;
    ro.close_on_timeout = -1;
    ro.on_close = node_on_close;
    ro.ud = node;
    ro.tls_server = node->db->tls;
    ro.tls_enforcing = node->db->tls_enforcing;
    int rc = rmq__remoting_new(&ro, &node->t, errstr, errstr_size);
    if (rc) return rc;
    for (int i = 0; i < node->nh; i++)
        rmq__remoting_set_handler(node->t, node->h[i].code, gate, node);
    rmq__remoting_set_default_handler(node->t, unsupported, node);
    rc = rmq__remoting_listen(node->t, node->host, node->port, errstr, errstr_size);
    if (rc) {
        rmq__remoting_destroy(node->t, NULL, NULL);
        node->t = NULL;
        return rc;
    }
    node->port = rmq__remoting_port(node->t);
    /* The address put in routes: a wildcard listener is advertised as loopback. */
    const char *adv = node->host;
    if (!strcmp(adv, "0.0.0.0") || !*adv)
        adv = "127.0.0.1";
    else if (!strcmp(adv, "::"))
        adv = "::1";
    if (strchr(adv, ':'))
        snprintf(node->addr, sizeof(node->addr), "[%s]:%d", adv, node->port);
    else
        snprintf(node->addr, sizeof(node->addr), "%s:%d", adv, node->port);
    char names[256];
    if (node->db->tls && !rmq__tls_ctx_names_host(node->db->tls, adv, names, sizeof names))
        rmq_log_warn(ro.name,
                     "%s: the --tls-cert certificate does not name %s (it names %s): clients "
                     "that check the server's name (rmqlua by default) refuse it; give it "
                     "subjectAltName IP:%s",
                     node->addr, adv, names, adv);
    return 0;
}

static int node_init(rmq_devbroker_t *db, db_node_t *node, int idx, const char *addr, char *errstr,
                     size_t errstr_size)
{
    node->db = db;
    node->idx = idx;
    node->is_ns = idx == RMQ_DEVBROKER_NAMESRV;
    if (rmq__addr_split(addr, node->host, sizeof(node->host), &node->port)) {
        /* port 0 is fine for us; rmq__addr_split wants 1..65535 */
        const char *c = strrchr(addr, ':');
        if (!c || strcmp(c, ":0") != 0 || (size_t)(c - addr) >= sizeof(node->host)) {
            rmq__seterr(errstr, errstr_size, "bad address '%s' (want HOST:PORT)", addr);
            return RMQ_ERR_CONFIG;
        }
        size_t hl = (size_t)(c - addr);
        if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']') {
            memcpy(node->host, addr + 1, hl - 2);
            node->host[hl - 2] = 0;
        } else {
            memcpy(node->host, addr, hl);
            node->host[hl] = 0;
        }
        node->port = 0;
    }
    unsigned a0, a1, a2, a3;
    node->store_ip[0] = 127, node->store_ip[1] = 0, node->store_ip[2] = 0, node->store_ip[3] = 1;
    if (sscanf(node->host, "%u.%u.%u.%u", &a0, &a1, &a2, &a3) == 4 && a0 < 256 && a1 < 256 &&
        a2 < 256 && a3 < 256 && (a0 | a1 | a2 | a3)) {
        node->store_ip[0] = (uint8_t)a0, node->store_ip[1] = (uint8_t)a1;
        node->store_ip[2] = (uint8_t)a2, node->store_ip[3] = (uint8_t)a3;
    }
    return 0;
}

int rmq__db_node_init(rmq_devbroker_t *db, db_node_t *node, int idx, const char *addr,
                      char *errstr, size_t errstr_size)
{
    return node_init(db, node, idx, addr, errstr, errstr_size);
}

int rmq__db_node_up(db_node_t *node, char *errstr, size_t errstr_size)
{
    return node_up(node, errstr, errstr_size);
}

/* ---- loop thread: ops ------------------------------------------------------------------------ */

static void op_finish(rmq_devbroker_t *db, db_op_t *op)
{
    uv_mutex_lock(&db->mu);
    op->done = 1;
    uv_cond_broadcast(&db->cond);
    uv_mutex_unlock(&db->mu);
}

static void on_async(uv_async_t *a)
{
    rmq_devbroker_t *db = a->data;
    for (;;) {
        uv_mutex_lock(&db->mu);
        db_op_t *op = db->ops;
        if (op) {
            db->ops = op->next;
            if (!db->ops) db->ops_tail = NULL;
        }
        uv_mutex_unlock(&db->mu);
        if (!op) break;
        op->fn(db, op->arg);
        op_finish(db, op);
    }
}

/* Run fn(db, arg) on the loop thread and wait for it. */
static void run_sync(rmq_devbroker_t *db, void (*fn)(rmq_devbroker_t *, void *), void *arg)
{
    db_op_t op = {.fn = fn, .arg = arg};
    uv_mutex_lock(&db->mu);
    if (db->stopping) {
        uv_mutex_unlock(&db->mu);
        return;
    }
    if (db->ops_tail)
        db->ops_tail->next = &op;
    else
        db->ops = &op;
    db->ops_tail = &op;
    uv_mutex_unlock(&db->mu);
    uv_async_send(&db->async);
    uv_mutex_lock(&db->mu);
    while (!op.done)
        uv_cond_wait(&db->cond, &db->mu);
    uv_mutex_unlock(&db->mu);
}

void rmq__db_run_sync(rmq_devbroker_t *db, void (*fn)(rmq_devbroker_t *, void *), void *arg)
{
    run_sync(db, fn, arg);
}

static void on_scan(uv_timer_t *t)
{
    rmq_devbroker_t *db = t->data;
    int64_t now = rmq__mono_ms();
    for (int i = 0; i < db->n_brokers; i++) {
        if (!db->brokers[i]->down) rmq__db_broker_scan(db->brokers[i], now);
        rmq__db_file_flush(db->brokers[i]);
    }
    if (db->has_ns) rmq__db_ns_scan(db, now);
    rmq__db_slaves_sync(db, now);
    if (db->remote_ns) {
        /* Every 30 s (registerNameServerPeriod), and soon after a topic table changed. */
        int changed = 0;
        for (int i = 0; i < db->n_brokers; i++)
            changed |= !db->brokers[i]->down &&
                       db->brokers[i]->data_version != db->brokers[i]->reg_version;
        if (changed || now - db->last_register_ms >= 30000) rmq__db_register_all(db);
    }
}

static void thread_main(void *arg)
{
    rmq_devbroker_t *db = arg;
    uv_run(&db->loop, UV_RUN_DEFAULT);
    rmq__thread_finishing();
}

/* ---- start / stop ---------------------------------------------------------------------------- */

static void clear_faults(db_node_t *node);

/* The injected errors and latencies of a node. */
static void node_free_rules(db_node_t *node)
{
    clear_faults(node);
    for (db_latency_t *l = node->latency, *n; l; l = n) {
        n = l->next;
        free(l);
    }
    node->latency = NULL;
}

static void db_free(rmq_devbroker_t *db)
{
    for (int i = 0; i < db->n_brokers; i++) {
        db_broker_t *b = db->brokers[i];
        if (!b) continue;
        rmq__db_file_close(b);
        free(b->dir);
        rmq__db_broker_free_groups(b);
        rmq__db_filter_free_all(b);
        rmq__db_subgroups_free(b);
        rmq__db_admin_free(b);
        rmq__db_pop_free(b);
        rmq__db_assign_free(b);
        rmq__db_broker_store_free(b);
        node_free_rules(&b->node);
        free(b);
    }
    node_free_rules(&db->ns);
    rmq__db_ns_free(db);
    rmq__db_faults_free(db);
    for (db_rec_t *r = db->recs, *n; r; r = n) {
        n = r->next;
        rec_free(r);
    }
    free(db->cluster);
    free(db->remote_ns);
    rmq__tls_ctx_release(db->tls);
    rmq__db_acl_free(db->acl);
    uv_mutex_destroy(&db->mu);
    uv_cond_destroy(&db->cond);
    free(db);
}

/* Close the handles this file and the store own (the transports close their own). */
static void close_own_handles(rmq_devbroker_t *db)
{
    while (db->deferred)
        deferred_unlink(db->deferred);
    for (int i = 0; i < db->n_brokers; i++) {
        rmq__db_drop_parked(db->brokers[i]);
        if (db->brokers[i]->delay_timer.loop &&
            !uv_is_closing((uv_handle_t *)&db->brokers[i]->delay_timer))
            uv_close((uv_handle_t *)&db->brokers[i]->delay_timer, NULL);
    }
    if (!uv_is_closing((uv_handle_t *)&db->scan_timer))
        uv_close((uv_handle_t *)&db->scan_timer, NULL);
    if (!uv_is_closing((uv_handle_t *)&db->async)) uv_close((uv_handle_t *)&db->async, NULL);
}

int rmq__devbroker_start(const rmq_devbroker_opts_t *o, rmq_devbroker_t **out, char *errstr,
                         size_t errstr_size)
{
    rmq_devbroker_t *db = rmq__xcalloc(1, sizeof(*db));
    uv_mutex_init(&db->mu);
    uv_cond_init(&db->cond);
    db->recording = 1;
    db->cluster = rmq__xstrdup(o->cluster ? o->cluster : RMQ_DEVBROKER_CLUSTER);
    db->default_queues = o->default_queues > 0 ? o->default_queues : RMQ_DEVBROKER_DEFAULT_QUEUES;
    db->delay_scale = o->delay_scale > 0 ? o->delay_scale : 1.0;
    db->property_filter = o->enable_property_filter;
    db->rocketmq5 = o->rocketmq5;
    db->max_bytes = o->max_bytes > 0 ? o->max_bytes : RMQ_DEVBROKER_MAX_BYTES;
    db->channel_expire_ms =
        o->channel_expire_ms > 0 ? o->channel_expire_ms : RMQ_DEVBROKER_CHANNEL_EXPIRE_MS;
    db->lock_expire_ms = o->lock_expire_ms > 0 ? o->lock_expire_ms : RMQ_DEVBROKER_LOCK_EXPIRE_MS;
    int n = o->brokers > 0 ? o->brokers : 1;
    if (n > RMQ_DEVBROKER_MAX_BROKERS) n = RMQ_DEVBROKER_MAX_BROKERS;
    if (o->slaves && (o->store_dir || o->name_server || n * (1 + o->slaves) > RMQ_DEVBROKER_MAX_BROKERS)) {
        if (o->store_dir || o->name_server)
            rmq__seterr(errstr, errstr_size, "--slaves works in memory with the local name "
                        "server only (not with --store or --name-server)");
        else
            rmq__seterr(errstr, errstr_size, "--brokers %d with --slaves %d makes more than %d "
                        "brokers", n, o->slaves, RMQ_DEVBROKER_MAX_BROKERS);
        uv_mutex_destroy(&db->mu);
        uv_cond_destroy(&db->cond);
        free(db->cluster);
        free(db);
        return RMQ_ERR_CONFIG;
    }
    int rc = uv_loop_init(&db->loop);
    if (rc) {
        rmq__seterr(errstr, errstr_size, "uv_loop_init: %s", uv_strerror(rc));
        db_free(db);
        return RMQ_ERR_IO;
    }
    uv_async_init(&db->loop, &db->async, on_async);
    db->async.data = db;
    uv_timer_init(&db->loop, &db->scan_timer);
    db->scan_timer.data = db;
    /* Certificates and the ACL file are read now, before the broker thread runs. */
    if (o->tls_cert) {
        rmq_tls_server_conf_t tc = {.cert_path = o->tls_cert,
                                    .key_path = o->tls_key,
                                    .key_password = o->tls_key_password,
                                    .client_ca_path = o->tls_verify_client};
        rc = rmq__tls_ctx_server(&tc, &db->tls, errstr, errstr_size);
        if (rc) goto fail;
        db->tls_enforcing = o->tls_enforcing;
    }
    if (o->acl_file) {
        rc = rmq__db_acl_load(o->acl_file, &db->acl, errstr, errstr_size);
        if (rc) goto fail;
    }

    if (o->name_server) {
        db->remote_ns = rmq__xstrdup(o->name_server);
        snprintf(db->ns_addr, sizeof(db->ns_addr), "%s", o->name_server);
    } else {
        db->has_ns = 1;
        rc = node_init(db, &db->ns, RMQ_DEVBROKER_NAMESRV, o->listen ? o->listen : "127.0.0.1:0",
                       errstr, errstr_size);
        if (rc) goto fail;
        rmq__db_ns_install(db);
        rc = node_up(&db->ns, errstr, errstr_size);
        if (rc) goto fail;
        snprintf(db->ns_addr, sizeof(db->ns_addr), "%s", db->ns.addr);
    }

    const char *bl = o->broker_listen;
    for (int i = 0; i < n; i++) {
        db_broker_t *b = rmq__xcalloc(1, sizeof(*b));
        b->log_fd = -1;
        b->told_max = INT64_MIN;
        b->told_max_query = INT64_MIN;
        db->brokers[i] = b;
        db->n_brokers = i + 1;
        char addr[128];
        if (bl && *bl) {
            const char *comma = strchr(bl, ',');
            size_t len = comma ? (size_t)(comma - bl) : strlen(bl);
            if (len >= sizeof(addr)) len = sizeof(addr) - 1;
            memcpy(addr, bl, len);
            addr[len] = 0;
            bl = comma ? comma + 1 : NULL;
        } else {
            snprintf(addr, sizeof(addr), "%s:0", db->has_ns ? db->ns.host : "127.0.0.1");
        }
        snprintf(b->name, sizeof(b->name), "%s-%c", o->broker_name ? o->broker_name : "broker",
                 'a' + i);
        rc = node_init(db, &b->node, i, addr, errstr, errstr_size);
        if (rc) goto fail;
        rmq__db_broker_store_init(b);
        if (o->store_dir) {
            rc = rmq__db_file_open(b, o->store_dir, errstr, errstr_size);
            if (rc) goto fail;
        }
        uv_timer_init(&db->loop, &b->delay_timer);
        b->delay_timer.data = b;
        rmq__db_broker_install(b);
        /* --store with no port given: the port of the last run, so that the offsetMsgIds handed
         * out then (store host and port + commit-log offset) still name this broker. */
        int saved = o->store_dir && b->node.port == 0 ? rmq__db_file_port(b) : 0;
        if (saved) b->node.port = saved;
        rc = node_up(&b->node, errstr, errstr_size);
        if (rc && saved) {
            rmq_log_warn(DB_LOG,
                         "%s: cannot listen on port %d again (%s): on a new port, the "
                         "offsetMsgIds of earlier messages name the old one",
                         b->name, saved, errstr);
            b->node.port = 0;
            rc = node_up(&b->node, errstr, errstr_size);
        }
        if (rc) goto fail;
        if (o->store_dir) rmq__db_file_save_port(b);
        for (int k = 0; k < o->n_topics; k++) {
            char name[256];
            const char *spec = o->topics[k];
            const char *colon = strrchr(spec, ':');
            int q = db->default_queues;
            size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
            if (colon) {
                int64_t v;
                if (parse_i64(colon + 1, &v, 0) || v < 1 || v > 1024) {
                    rmq__seterr(errstr, errstr_size, "--topic %s: bad queue count", spec);
                    rc = RMQ_ERR_CONFIG;
                    goto fail;
                }
                q = (int)v;
            }
            if (len == 0 || len > 127) {
                rmq__seterr(errstr, errstr_size, "--topic '%s': bad topic name", spec);
                rc = RMQ_ERR_CONFIG;
                goto fail;
            }
            memcpy(name, spec, len);
            name[len] = 0;
            rmq__db_topic_create(b, name, q, q, 6);
        }
    }
    if (o->slaves) {
        rc = rmq__db_slaves_start(db, o->slaves, errstr, errstr_size);
        if (rc) goto fail;
    }
    rc = rmq__db_faults_init(db, o->faults, o->n_faults, errstr, errstr_size);
    if (rc) goto fail;
    uv_timer_start(&db->scan_timer, on_scan, 1000, 1000);
    if (db->remote_ns) rmq__db_register_all(db);
    rc = uv_thread_create(&db->thread, thread_main, db);
    if (rc) {
        rmq__seterr(errstr, errstr_size, "uv_thread_create: %s", uv_strerror(rc));
        rc = RMQ_ERR_IO;
        goto fail;
    }
    *out = db;
    return 0;

fail:
    if (db->ns.t) rmq__remoting_destroy(db->ns.t, NULL, NULL);
    for (int i = 0; i < db->n_brokers; i++)
        if (db->brokers[i]->node.t) rmq__remoting_destroy(db->brokers[i]->node.t, NULL, NULL);
    close_own_handles(db);
    uv_run(&db->loop, UV_RUN_DEFAULT);
    uv_loop_close(&db->loop);
    db_free(db);
    return rc ? rc : RMQ_ERR_IO;
}

static void op_stop(rmq_devbroker_t *db, void *arg)
{
    uv_mutex_lock(&db->mu);
    db->stopping = 1;
    uv_mutex_unlock(&db->mu);
    for (int i = 0; i < db->n_brokers; i++) {
        db_broker_t *b = db->brokers[i];
        rmq__db_drop_parked(b);
        if (b->node.t) rmq__remoting_destroy(b->node.t, NULL, NULL);
        b->node.t = NULL;
        rmq__db_file_close(b);
    }
    if (db->ns.t) rmq__remoting_destroy(db->ns.t, NULL, NULL);
    db->ns.t = NULL;
    close_own_handles(db);
}

RMQ_EXPORT void rmq_devbroker_stop(rmq_devbroker_t *db)
{
    if (!db) return;
    run_sync(db, op_stop, NULL);
    uv_thread_join(&db->thread);
    /* Anything closed late (transport internals) finishes here. */
    uv_run(&db->loop, UV_RUN_DEFAULT);
    uv_loop_close(&db->loop);
    db_free(db);
}

/* ---- FFI controls ---------------------------------------------------------------------------- */

RMQ_EXPORT rmq_devbroker_t *rmq_devbroker_start(const char *args, char *errstr, size_t errstr_size)
{
    char *copy = rmq__xstrdup(args ? args : "");
    char *argv[256];
    int argc = 0;
    for (char *p = strtok(copy, " \t\r\n"); p && argc < 256; p = strtok(NULL, " \t\r\n"))
        argv[argc++] = p;
    rmq_devbroker_opts_t o;
    int rc = rmq__devbroker_parse_args(argc, argv, &o, errstr, errstr_size);
    if (rc == 1) {
        rmq__seterr(errstr, errstr_size, "--help is not an option here");
        rc = RMQ_ERR_CONFIG;
    }
    rmq_devbroker_t *db = NULL;
    if (rc == 0) {
        if (rmq__devbroker_start(&o, &db, errstr, errstr_size)) db = NULL;
    }
    free((void *)o.topics);
    free(copy);
    return db;
}

RMQ_EXPORT const char *rmq_devbroker_addr(rmq_devbroker_t *db)
{
    return db->ns_addr;
}
RMQ_EXPORT int rmq_devbroker_broker_count(rmq_devbroker_t *db)
{
    return db->n_brokers;
}
RMQ_EXPORT const char *rmq_devbroker_broker_addr(rmq_devbroker_t *db, int idx)
{
    return idx >= 0 && idx < db->n_brokers ? db->brokers[idx]->node.addr : NULL;
}
RMQ_EXPORT const char *rmq_devbroker_broker_name(rmq_devbroker_t *db, int idx)
{
    return idx >= 0 && idx < db->n_brokers ? db->brokers[idx]->name : NULL;
}

RMQ_EXPORT int rmq_devbroker_slave(rmq_devbroker_t *db, int idx, int k)
{
    if (idx < 0 || idx >= db->n_brokers || db->brokers[idx]->master) return -1;
    for (int i = 0; i < db->n_brokers; i++)
        if (db->brokers[i]->master == db->brokers[idx] && db->brokers[i]->id == k) return i;
    return -1;
}

static db_node_t *node_of(rmq_devbroker_t *db, int target)
{
    if (target == RMQ_DEVBROKER_NAMESRV) return db->has_ns ? &db->ns : NULL;
    if (target >= 0 && target < db->n_brokers) return &db->brokers[target]->node;
    return NULL;
}

typedef struct {
    int target, req_code, code, count, ms, down, rc;
} ctl_args_t;

static void push_error_one(db_node_t *node, const ctl_args_t *a)
{
    db_fault_t *f = rmq__xcalloc(1, sizeof(*f));
    f->req_code = a->req_code;
    f->code = a->code;
    f->count = a->count;
    db_fault_t **pp = &node->faults;
    while (*pp)
        pp = &(*pp)->next;
    *pp = f;
}

/* fn on the node a->target names, or on every node for RMQ_DEVBROKER_ALL; RMQ_ERR_INVALID in
 * a->rc when there is no such node. */
static void on_target(rmq_devbroker_t *db, ctl_args_t *a,
                      void (*fn)(db_node_t *node, const ctl_args_t *a))
{
    if (a->target == RMQ_DEVBROKER_ALL) {
        if (db->has_ns) fn(&db->ns, a);
        for (int i = 0; i < db->n_brokers; i++)
            fn(&db->brokers[i]->node, a);
        return;
    }
    db_node_t *node = node_of(db, a->target);
    if (!node) {
        a->rc = RMQ_ERR_INVALID;
        return;
    }
    fn(node, a);
}

static void op_push_error(rmq_devbroker_t *db, void *arg)
{
    on_target(db, arg, push_error_one);
}

RMQ_EXPORT int rmq_devbroker_push_error(rmq_devbroker_t *db, int target, int req_code, int code,
                                        int count)
{
    if (count <= 0) return RMQ_ERR_INVALID;
    ctl_args_t a = {.target = target, .req_code = req_code, .code = code, .count = count};
    run_sync(db, op_push_error, &a);
    return a.rc;
}

static void clear_faults(db_node_t *node)
{
    for (db_fault_t *f = node->faults, *n; f; f = n) {
        n = f->next;
        free(f);
    }
    node->faults = NULL;
}

static void op_clear_errors(rmq_devbroker_t *db, void *arg)
{
    clear_faults(&db->ns);
    for (int i = 0; i < db->n_brokers; i++)
        clear_faults(&db->brokers[i]->node);
}

RMQ_EXPORT void rmq_devbroker_clear_errors(rmq_devbroker_t *db)
{
    run_sync(db, op_clear_errors, NULL);
}

static void op_set_down(rmq_devbroker_t *db, void *arg)
{
    ctl_args_t *a = arg;
    if (a->target < 0 || a->target >= db->n_brokers) {
        a->rc = RMQ_ERR_INVALID;
        return;
    }
    db_broker_t *b = db->brokers[a->target];
    if (a->down && !b->down) {
        b->down = 1;
        rmq__db_drop_parked(b);
        rmq__remoting_destroy(b->node.t, NULL, NULL);
        b->node.t = NULL;
        rmq_log_info(DB_LOG, "%s (%s) is down", b->name, b->node.addr);
    } else if (!a->down && b->down) {
        char err[256];
        int rc = node_up(&b->node, err, sizeof(err));
        if (rc) {
            rmq_log_error(DB_LOG, "%s cannot come back up: %s", b->name, err);
            a->rc = RMQ_ERR_IO;
            return;
        }
        b->down = 0;
        rmq_log_info(DB_LOG, "%s (%s) is up", b->name, b->node.addr);
        if (db->remote_ns) rmq__db_register_all(db);
    }
}

RMQ_EXPORT int rmq_devbroker_set_down(rmq_devbroker_t *db, int broker, int down)
{
    ctl_args_t a = {.target = broker, .down = down};
    run_sync(db, op_set_down, &a);
    /* The old listening socket is closed by the loop just after the transport was destroyed:
     * when the port is still busy, try again for a second. */
    for (int i = 0; a.rc == RMQ_ERR_IO && !down && i < 50; i++) {
        uv_sleep(20);
        a.rc = 0;
        run_sync(db, op_set_down, &a);
    }
    return a.rc;
}

static void latency_one(db_node_t *node, const ctl_args_t *a)
{
    db_latency_t **pp = &node->latency;
    while (*pp && (*pp)->req_code != a->req_code)
        pp = &(*pp)->next;
    if (*pp) {
        if (a->ms <= 0) {
            db_latency_t *l = *pp;
            *pp = l->next;
            free(l);
        } else
            (*pp)->ms = a->ms;
        return;
    }
    if (a->ms <= 0) return;
    db_latency_t *l = rmq__xcalloc(1, sizeof(*l));
    l->req_code = a->req_code;
    l->ms = a->ms;
    *pp = l;
}

static void op_latency(rmq_devbroker_t *db, void *arg)
{
    on_target(db, arg, latency_one);
}

RMQ_EXPORT int rmq_devbroker_set_latency(rmq_devbroker_t *db, int target, int req_code, int ms)
{
    ctl_args_t a = {.target = target, .req_code = req_code, .ms = ms};
    run_sync(db, op_latency, &a);
    return a.rc;
}

static int rec_match(const db_rec_t *r, int target, int req_code)
{
    return (target == RMQ_DEVBROKER_ALL || r->target == target) &&
           (req_code == 0 || r->code == req_code);
}

static int count_locked(rmq_devbroker_t *db, int target, int req_code)
{
    int n = 0;
    for (int t = 0; t <= db->n_brokers; t++) {
        if (target != RMQ_DEVBROKER_ALL && target + 1 != t) continue;
        int slot = rmq__db_count_slot(req_code);
        if (req_code > 0 && slot >= 0)
            n += db->counts[t][slot];
        else if (req_code == 0)
            for (int c = 0; c < DB_CODES; c++)
                n += db->counts[t][c];
    }
    return n;
}

/* Retained records matching target/code. */
static int recs_locked(rmq_devbroker_t *db, int target, int req_code)
{
    int n = 0;
    for (db_rec_t *r = db->recs; r; r = r->next)
        if (rec_match(r, target, req_code)) n++;
    return n;
}

RMQ_EXPORT int rmq_devbroker_count(rmq_devbroker_t *db, int target, int req_code)
{
    uv_mutex_lock(&db->mu);
    int n = count_locked(db, target, req_code);
    uv_mutex_unlock(&db->mu);
    return n;
}

static void count_conn(rmq_conn_t *conn, void *ud)
{
    (void)conn;
    (*(int *)ud)++;
}

static void op_connections(rmq_devbroker_t *db, void *arg)
{
    int *n = arg;
    if (db->ns.t) rmq__remoting_foreach_conn(db->ns.t, count_conn, n);
    for (int i = 0; i < db->n_brokers; i++)
        if (db->brokers[i] && db->brokers[i]->node.t)
            rmq__remoting_foreach_conn(db->brokers[i]->node.t, count_conn, n);
}

RMQ_EXPORT int rmq_devbroker_connections(rmq_devbroker_t *db)
{
    int n = 0;
    rmq__db_run_sync(db, op_connections, &n);
    return n;
}

RMQ_EXPORT int rmq_devbroker_wait(rmq_devbroker_t *db, int target, int req_code, int n,
                                  int timeout_ms)
{
    uint64_t deadline = uv_hrtime() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
    uv_mutex_lock(&db->mu);
    int c;
    while ((c = count_locked(db, target, req_code)) < n) {
        uint64_t now = uv_hrtime();
        if (now >= deadline) {
            c = -1;
            break;
        }
        uv_cond_timedwait(&db->cond, &db->mu, deadline - now);
    }
    uv_mutex_unlock(&db->mu);
    return c;
}

RMQ_EXPORT void rmq_devbroker_reset_counts(rmq_devbroker_t *db)
{
    uv_mutex_lock(&db->mu);
    db_rec_t *r = db->recs;
    db->recs = db->recs_tail = NULL;
    db->n_recs = 0;
    memset(db->counts, 0, sizeof(db->counts));
    uv_mutex_unlock(&db->mu);
    while (r) {
        db_rec_t *n = r->next;
        rec_free(r);
        r = n;
    }
}

/* The request recorded as the idx-th (from 0; negative: from the end, -1 the last) of those
 * matching target/code, decoded into *c (the caller frees it). Returns 0, or -1 when there is no
 * such record or its frame is not kept or does not decode. db->mu held. */
static int rec_decode_locked(rmq_devbroker_t *db, int target, int req_code, int idx, rmq_cmd_t *c)
{
    if (idx < 0) idx += recs_locked(db, target, req_code);
    int i = 0;
    for (db_rec_t *r = db->recs; r && idx >= 0; r = r->next) {
        if (!rec_match(r, target, req_code)) continue;
        if (i++ != idx) continue;
        char err[128];
        return r->frame && rmq__cmd_decode(r->frame, c, err, sizeof err) == 0 ? 0 : -1;
    }
    return -1;
}

RMQ_EXPORT int rmq_devbroker_request_ext(rmq_devbroker_t *db, int target, int req_code, int idx,
                                         const char *key, char *buf, size_t size)
{
    int ret = -1;
    rmq_cmd_t c;
    uv_mutex_lock(&db->mu);
    if (rec_decode_locked(db, target, req_code, idx, &c) == 0) {
        const char *v = rmq__cmd_ext(&c, key);
        if (v) {
            ret = (int)strlen(v);
            if (size) snprintf(buf, size, "%s", v);
        }
        rmq__cmd_free(&c);
    }
    uv_mutex_unlock(&db->mu);
    return ret;
}

RMQ_EXPORT int rmq_devbroker_request_body(rmq_devbroker_t *db, int target, int req_code, int idx,
                                          char *buf, size_t size)
{
    int ret = -1;
    rmq_cmd_t c;
    uv_mutex_lock(&db->mu);
    /* A big request's record kept its header only: its body reads as empty. */
    if (rec_decode_locked(db, target, req_code, idx, &c) == 0) {
        ret = (int)c.body_len;
        size_t k = c.body_len < size ? c.body_len : size;
        if (k) memcpy(buf, c.body, k);
        rmq__cmd_free(&c);
    }
    uv_mutex_unlock(&db->mu);
    return ret;
}

typedef struct {
    int broker, queue_id, queues;
    const char *topic, *group, *tags, *keys, *body, *props;
    size_t body_len, props_len;
    int64_t result;
    char *buf;
    size_t size;
} data_args_t;

static void op_create_topic(rmq_devbroker_t *db, void *arg)
{
    data_args_t *a = arg;
    for (int i = 0; i < db->n_brokers; i++)
        if (a->broker == RMQ_DEVBROKER_ALL || a->broker == i)
            rmq__db_topic_create(db->brokers[i], a->topic, a->queues, a->queues, 6);
    if (db->remote_ns) rmq__db_register_all(db);
}

RMQ_EXPORT int rmq_devbroker_create_topic(rmq_devbroker_t *db, int broker, const char *topic,
                                          int queues)
{
    if (!topic || !*topic || strlen(topic) > 127 || queues < 1 || queues > 1024)
        return RMQ_ERR_INVALID;
    if (broker != RMQ_DEVBROKER_ALL && (broker < 0 || broker >= db->n_brokers))
        return RMQ_ERR_INVALID;
    data_args_t a = {.broker = broker, .topic = topic, .queues = queues};
    run_sync(db, op_create_topic, &a);
    return 0;
}

static void op_produce(rmq_devbroker_t *db, void *arg)
{
    data_args_t *a = arg;
    db_broker_t *b = db->brokers[a->broker];
    db_topic_t *t = rmq__db_topic_get(b, a->topic);
    if (!t) t = rmq__db_topic_create(b, a->topic, 0, 0, 6);
    rmq_buf_t props;
    rmq__buf_init(&props);
    char uniq[64];
    rmq__uniq_id_new(uniq);
    if (a->keys) rmq__props_append(&props, "KEYS", a->keys);
    rmq__props_append(&props, "UNIQ_KEY", uniq);
    if (a->tags) rmq__props_append(&props, "TAGS", a->tags);
    if (a->props_len) {
        rmq__buf_append(&props, "\002", 1);
        rmq__buf_append(&props, a->props, a->props_len);
    }
    rmq__props_append(&props, "CLUSTER", db->cluster);
    static const uint8_t lo[4] = {127, 0, 0, 1};
    db_msg_in_t in = {.topic = a->topic,
                      .queue_id = a->queue_id >= 0 ? a->queue_id
                                                   : (int)(t->sent % (t->write_q ? t->write_q : 1)),
                      .born_ts = rmq__now_ms(),
                      .born_host = lo,
                      .born_ip_len = 4,
                      .body = a->body,
                      .body_len = a->body_len,
                      .props = props.data,
                      .props_len = props.len};
    char err[256];
    if (!rmq__db_queue(t, in.queue_id) || in.queue_id >= t->write_q) {
        a->result = RMQ_ERR_INVALID;
    } else {
        db_msg_t *m = rmq__db_store(b, t, &in, err, sizeof(err));
        a->result = m ? m->qoff : RMQ_ERR_NOMEM;
    }
    rmq__buf_free(&props);
}

RMQ_EXPORT int64_t rmq_devbroker_produce(rmq_devbroker_t *db, int broker, const char *topic,
                                         int queue_id, const char *tags, const char *keys,
                                         const char *body, size_t body_len)
{
    return rmq_devbroker_produce_props(db, broker, topic, queue_id, tags, keys, NULL, 0, body,
                                       body_len);
}

RMQ_EXPORT int64_t rmq_devbroker_produce_props(rmq_devbroker_t *db, int broker, const char *topic,
                                               int queue_id, const char *tags, const char *keys,
                                               const char *props, size_t props_len,
                                               const char *body, size_t body_len)
{
    if (broker < 0 || broker >= db->n_brokers || !topic || !*topic) return RMQ_ERR_INVALID;
    if (props_len && (!props || props[0] == '\002' || props[props_len - 1] == '\002'))
        return RMQ_ERR_INVALID;
    data_args_t a = {.broker = broker,
                     .topic = topic,
                     .queue_id = queue_id,
                     .tags = tags,
                     .keys = keys,
                     .props = props,
                     .props_len = props ? props_len : 0,
                     .body = body,
                     .body_len = body_len,
                     .result = RMQ_ERR_SHUTDOWN};
    run_sync(db, op_produce, &a);
    return a.result;
}

enum { Q_MAX, Q_MIN, Q_COMMITTED, Q_GROUP_SIZE, Q_LOCK };

typedef struct {
    data_args_t d;
    int what;
} query_args_t;

static void op_query(rmq_devbroker_t *db, void *arg)
{
    query_args_t *a = arg;
    db_broker_t *b = db->brokers[a->d.broker];
    db_topic_t *t = a->d.topic ? rmq__db_topic_get(b, a->d.topic) : NULL;
    db_queue_t *q = t ? rmq__db_queue(t, a->d.queue_id) : NULL;
    switch (a->what) {
    case Q_MAX:
        a->d.result = q ? rmq__db_qmax(q) : 0;
        break;
    case Q_MIN:
        a->d.result = q ? q->min_off : 0;
        break;
    case Q_COMMITTED:
        a->d.result = rmq__db_offset_get(b, a->d.group, a->d.topic, a->d.queue_id);
        break;
    case Q_GROUP_SIZE: {
        db_group_t *g = rmq__dbmap_get(&b->groups, a->d.group);
        a->d.result = g ? g->n_members : 0;
        break;
    }
    case Q_LOCK: {
        char key[512];
        snprintf(key, sizeof(key), "%s\001%s\001%d", a->d.group, a->d.topic, a->d.queue_id);
        db_lock_t *l = rmq__dbmap_get(&b->locks, key);
        if (l && rmq__mono_ms() - l->last_ms <= db->lock_expire_ms) {
            a->d.result = (int64_t)strlen(l->client_id);
            if (a->d.size) snprintf(a->d.buf, a->d.size, "%s", l->client_id);
        } else
            a->d.result = -1;
        break;
    }
    }
}

static int64_t query(rmq_devbroker_t *db, int broker, int what, const char *group,
                     const char *topic, int qid, char *buf, size_t size)
{
    if (broker < 0 || broker >= db->n_brokers) return RMQ_ERR_INVALID;
    query_args_t a = {.d = {.broker = broker,
                            .group = group,
                            .topic = topic,
                            .queue_id = qid,
                            .buf = buf,
                            .size = size,
                            .result = RMQ_ERR_SHUTDOWN},
                      .what = what};
    run_sync(db, op_query, &a);
    return a.d.result;
}

RMQ_EXPORT int64_t rmq_devbroker_max_offset(rmq_devbroker_t *db, int broker, const char *topic,
                                            int queue_id)
{
    return query(db, broker, Q_MAX, NULL, topic, queue_id, NULL, 0);
}
RMQ_EXPORT int64_t rmq_devbroker_min_offset(rmq_devbroker_t *db, int broker, const char *topic,
                                            int queue_id)
{
    return query(db, broker, Q_MIN, NULL, topic, queue_id, NULL, 0);
}
RMQ_EXPORT int64_t rmq_devbroker_committed_offset(rmq_devbroker_t *db, int broker,
                                                  const char *group, const char *topic,
                                                  int queue_id)
{
    if (!group || !topic) return RMQ_ERR_INVALID;
    return query(db, broker, Q_COMMITTED, group, topic, queue_id, NULL, 0);
}
RMQ_EXPORT int rmq_devbroker_group_size(rmq_devbroker_t *db, int broker, const char *group)
{
    if (!group) return RMQ_ERR_INVALID;
    return (int)query(db, broker, Q_GROUP_SIZE, group, NULL, 0, NULL, 0);
}
RMQ_EXPORT int rmq_devbroker_lock_owner(rmq_devbroker_t *db, int broker, const char *group,
                                        const char *topic, int queue_id, char *buf, size_t size)
{
    if (!group || !topic) return RMQ_ERR_INVALID;
    return (int)query(db, broker, Q_LOCK, group, topic, queue_id, buf, size);
}
