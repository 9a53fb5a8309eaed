/*
 * devbroker_fault.c -- random faults of the development broker (`--fault CODE:RATE:KIND`), so
 * that a process outside the broker (a reliability run, a shell script) can make a broker flaky
 * without driving it through the in-process control API.
 *
 * Each --fault gives a request code (number or name, e.g. 11 or PULL_MESSAGE), a probability
 * 0..1 and what happens to a request picked by it:
 *   disconnect   the connection is closed instead of answering (every request in flight on it
 *                is lost: a connection reset as the client sees it)
 *   drop         the request is swallowed: no answer ever comes (the client times out)
 *   CODE         answered with that response code (a number or a name such as SYSTEM_BUSY) and
 *                the remark "devbroker: injected error"
 * The rules apply to every node of the process (name server and brokers); a request code has
 * at most one rule (the last one given wins). Requests picked are counted per rule and the
 * counts are logged when the broker stops.
 *
 * Ownership: the rules belong to the rmq_devbroker_t (rmq__db_faults_init / _free).
 * Threads: rmq__db_fault_parse on any thread; everything else on the broker thread (the
 * request gate), after start.
 */
#include "devbroker_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

struct db_rfault {
    struct db_rfault *next;
    int req_code;
    double rate;
    int code; /* a response code, RMQ_DEVBROKER_DISCONNECT or RMQ_DEVBROKER_DROP */
    int64_t picked;
};

/* A request code by number or name, or -1. */
static int request_code(const char *s, size_t len)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s + len && len > 0) return v >= 0 && v < DB_CODES ? (int)v : -1;
    for (int c = 0; c < DB_CODES; c++) {
        const char *n = rmq_request_code_name(c);
        if (n && strlen(n) == len && !memcmp(n, s, len)) return c;
    }
    return -1;
}

/* A response code by number or name; 0 when unknown (SUCCESS is no fault either). */
static int response_code(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s && !*end) return v > 0 && v < 100000 ? (int)v : 0;
    for (int c = 1; c < 100000; c++) {
        const char *n = rmq_response_code_name(c);
        if (n && !strcmp(n, s)) return c;
    }
    return 0;
}

int rmq__db_fault_parse(const char *spec, int *req_code, double *rate, int *code, char *errstr,
                        size_t errstr_size)
{
    const char *c1 = strchr(spec, ':');
    const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c1 || !c2) {
        rmq__seterr(errstr, errstr_size, "--fault '%s': want CODE:RATE:KIND", spec);
        return RMQ_ERR_CONFIG;
    }
    int rc = request_code(spec, (size_t)(c1 - spec));
    if (rc < 0) {
        rmq__seterr(errstr, errstr_size, "--fault '%s': unknown request code '%.*s'", spec,
                    (int)(c1 - spec), spec);
        return RMQ_ERR_CONFIG;
    }
    char num[64];
    size_t nl = (size_t)(c2 - c1 - 1);
    char *end = NULL;
    double r = -1;
    if (nl > 0 && nl < sizeof(num)) {
        memcpy(num, c1 + 1, nl);
        num[nl] = 0;
        r = strtod(num, &end);
        if (*end) r = -1;
    }
    if (!(r >= 0 && r <= 1)) {
        rmq__seterr(errstr, errstr_size, "--fault '%s': RATE must be a number in 0..1", spec);
        return RMQ_ERR_CONFIG;
    }
    const char *kind = c2 + 1;
    int k;
    if (!strcmp(kind, "disconnect"))
        k = RMQ_DEVBROKER_DISCONNECT;
    else if (!strcmp(kind, "drop"))
        k = RMQ_DEVBROKER_DROP;
    else if (!(k = response_code(kind))) {
        rmq__seterr(errstr, errstr_size,
                    "--fault '%s': KIND must be disconnect, drop or a response code (a number "
                    "> 0 or a name such as SYSTEM_BUSY)",
                    spec);
        return RMQ_ERR_CONFIG;
    }
    if (req_code) *req_code = rc;
    if (rate) *rate = r;
    if (code) *code = k;
    return 0;
}

int rmq__db_faults_init(rmq_devbroker_t *db, const char *const *specs, int n, char *errstr,
                        size_t errstr_size)
{
    db->rng = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() ^
              (uint64_t)(uintptr_t)db;
    if (!db->rng) db->rng = 1;
    for (int i = 0; i < n; i++) {
        int req, code;
        double rate;
        int rc = rmq__db_fault_parse(specs[i], &req, &rate, &code, errstr, errstr_size);
        if (rc) return rc;
        db_rfault_t *f = NULL;
        for (db_rfault_t *x = db->rfaults; x; x = x->next)
            if (x->req_code == req) f = x;
        if (!f) {
            f = rmq__xcalloc(1, sizeof(*f));
            f->next = db->rfaults;
            db->rfaults = f;
        }
        f->req_code = req;
        f->rate = rate;
        f->code = code;
        rmq_log_info(DB_LOG, "fault: %s requests %s with probability %g",
                     rmq_request_code_name(req) ? rmq_request_code_name(req) : "code",
                     code == RMQ_DEVBROKER_DISCONNECT ? "disconnect"
                     : code == RMQ_DEVBROKER_DROP     ? "are dropped"
                                                      : "fail",
                     rate);
    }
    return 0;
}

void rmq__db_faults_free(rmq_devbroker_t *db)
{
    for (db_rfault_t *f = db->rfaults, *n; f; f = n) {
        n = f->next;
        const char *name = rmq_request_code_name(f->req_code);
        rmq_log_info(DB_LOG, "fault: %" PRId64 " %s request(s) (code %d) picked", f->picked,
                     name ? name : "?", f->req_code);
        free(f);
    }
    db->rfaults = NULL;
}

/* xorshift64*: a uniform double in [0, 1). */
static double roll(rmq_devbroker_t *db)
{
    uint64_t x = db->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    db->rng = x;
    return (double)((x * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}

int rmq__db_fault_roll(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    rmq_devbroker_t *db = node->db;
    for (db_rfault_t *f = db->rfaults; f; f = f->next) {
        if (f->req_code != req->code) continue;
        if (f->rate <= 0 || roll(db) >= f->rate) return 0;
        f->picked++;
        rmq_dbg(RMQ_DBG_BROKER, DB_LOG, "fault: %s from %s (opaque %d): %s",
                rmq_request_code_name(req->code) ? rmq_request_code_name(req->code) : "request",
                rmq__conn_peer(conn), req->opaque,
                f->code == RMQ_DEVBROKER_DISCONNECT ? "disconnect"
                : f->code == RMQ_DEVBROKER_DROP     ? "dropped"
                                                    : "error");
        if (f->code == RMQ_DEVBROKER_DISCONNECT)
            rmq__conn_close(conn, RMQ_OK, "devbroker: injected disconnect");
        else if (f->code != RMQ_DEVBROKER_DROP)
            rmq__db_reply_code(conn, req, f->code, "devbroker: injected error");
        return 1;
    }
    return 0;
}
