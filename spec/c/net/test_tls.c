/*
 * test_tls.c -- the transport's TLS and ACL signing over real sockets on 127.0.0.1, one loop
 * driven by the test, certificates made with the `openssl` command into a fresh temporary
 * folder: TLS requests and responses (big bodies across many records, many small frames in one
 * write, lent response buffers), a permissive listener serving a plain and a TLS client, an
 * enforcing one refusing the plain client, a server certificate nobody trusts (the handshake
 * fails naming the address and OpenSSL's reason, and the address backs off), the server's
 * identity (a certificate for another name, or naming only a DNS name when an IP is dialled, is
 * refused naming the address, the certificate's names and the option; IPv4 and IPv6 literals
 * match IP entries; the check can be turned off), a TLS client told that a server answering in
 * plaintext or closing at once may not speak TLS, certificate files that do not load, and
 * every request signed with the access key (responses never).
 *
 * Leak checking: the ASan build runs C tests with detect_leaks=1.
 */
#include "protocol/acl.h"
#include "base/codes.h"
#include "net/remoting.h"
#include "net/tls.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_loop.h"

static char dir[256];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

static const char *path(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* A CA, server certificates it signed (server: IP 127.0.0.1 and ::1, DNS localhost; wrong:
 * DNS wrong.example; dnsonly: DNS localhost only), and a second CA with its own server
 * certificate. */
static int make_certs(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/rmq-test-tls-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) return -1;
    const char *ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const char *lo = "IP:127.0.0.1,IP:::1,DNS:localhost";
    return sh("cd '%s' && for ca in ca rogue_ca; do openssl req -x509 %s -keyout $ca.key -out $ca.pem "
              "-days 2 -subj /CN=$ca >/dev/null 2>&1 || exit 1; done && "
              "for s in server:ca:%s rogue:rogue_ca:%s wrong:ca:DNS:wrong.example "
              "dnsonly:ca:DNS:localhost; do n=${s%%%%:*}; r=${s#*:}; c=${r%%%%:*}; san=${r#*:}; "
              "openssl req %s -keyout $n.key -out $n.csr -subj /CN=127.0.0.1 "
              "-addext subjectAltName=$san >/dev/null 2>&1 && "
              "openssl x509 -req -in $n.csr -CA $c.pem -CAkey $c.key -CAcreateserial -out $n.pem "
              "-days 2 -copy_extensions copy >/dev/null 2>&1 || exit 1; done && "
              "echo junk > junk.pem",
              dir, ec, lo, lo, ec);
}

/* ---- responses and servers ------------------------------------------------------------------ */

typedef struct result {
    int done, err, code;
    char errmsg[400];
    size_t body_len;
    int body_ok;
    char sig[64];
} result_t;

static char expect_body[200000];

static void on_resp(void *ud, int err, rmq_cmd_t *resp, const char *errmsg)
{
    result_t *r = ud;
    r->done++;
    r->err = err;
    snprintf(r->errmsg, sizeof r->errmsg, "%s", errmsg);
    if (!err) {
        r->code = resp->code;
        r->body_len = resp->body_len;
        r->body_ok = resp->body_len <= sizeof expect_body &&
                     (resp->body_len == 0 || !memcmp(resp->body, expect_body, resp->body_len));
        const char *s = rmq__cmd_ext(resp, "Signature");
        snprintf(r->sig, sizeof r->sig, "%s", s ? s : "");
    }
}

typedef struct server {
    rmq_remoting_t *t;
    int port;
    int requests;
    int signed_ok, signed_bad;
    char addr[64];
} server_t;

static int lent_written;

/* The lent body (a reference on the request's frame) is no longer needed. */
static void on_lent_written(void *ud, int status)
{
    lent_written++;
    rmq__rbuf_release(ud);
    (void)status;
}

/* Echo the body back lent (the zero-copy path: the frame is kept until written), and check the
 * signature when there is one. */
static void h_echo(rmq_conn_t *c, rmq_cmd_t *req, void *ud)
{
    server_t *s = ud;
    s->requests++;
    const char *ak = rmq__cmd_ext(req, "AccessKey"), *sig = rmq__cmd_ext(req, "Signature");
    if (ak && sig) {
        rmq_buf_t content;
        char want[64];
        rmq__buf_init(&content);
        rmq__acl_content(req, &content);
        rmq__acl_hmac_base64("sk_for_tests", content.data ? content.data : "", content.len, want,
                             sizeof want);
        rmq__buf_free(&content);
        if (!strcmp(ak, "ak_for_tests") && !strcmp(sig, want))
            s->signed_ok++;
        else
            s->signed_bad++;
    }
    rmq_cmd_t resp;
    rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, NULL);
    resp.body = req->body;
    resp.body_len = req->body_len;
    rmq_rbuf_t *frame = rmq__rbuf_keep(req->frame);
    if (rmq__conn_reply_ex(c, &resp, NULL, 0, on_lent_written, frame) != 0) {
        CHECK(0);
        rmq__rbuf_release(frame);
    }
    resp.body = NULL;
    resp.body_len = 0;
    rmq__cmd_free(&resp);
}

static void server_start_on(server_t *s, rmq_tls_ctx_t *tls, int enforcing, const char *ip)
{
    char err[256];
    memset(s, 0, sizeof *s);
    rmq_remoting_opts_t o = {
        .loop = loop, .name = "tls-server", .tls_server = tls, .tls_enforcing = enforcing};
    CHECK(rmq__remoting_new(&o, &s->t, err, sizeof err) == 0);
    rmq__remoting_set_handler(s->t, RMQ_REQ_HEART_BEAT, h_echo, s);
    CHECK(rmq__remoting_listen(s->t, ip, 0, err, sizeof err) == 0);
    s->port = rmq__remoting_port(s->t);
    snprintf(s->addr, sizeof s->addr, strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, s->port);
}

static void server_start(server_t *s, rmq_tls_ctx_t *tls, int enforcing)
{
    server_start_on(s, tls, enforcing, "127.0.0.1");
}

static void on_destroyed(void *ud)
{
    *(int *)ud = 1;
}

static void transport_destroy(rmq_remoting_t *t)
{
    int done = 0;
    rmq__remoting_destroy(t, on_destroyed, &done);
    WAIT_UNTIL(done, 3000);
}

static rmq_remoting_t *client_new(rmq_tls_ctx_t *tls, const char *ak, const char *sk)
{
    char err[256];
    rmq_remoting_t *t = NULL;
    rmq_remoting_opts_t o;
    memset(&o, 0, sizeof o);
    o.loop = loop;
    o.name = "tls-client";
    o.tls_client = tls;
    o.reconnect_min_ms = 200;
    o.acl_access_key = ak;
    o.acl_secret_key = sk;
    CHECK(rmq__remoting_new(&o, &t, err, sizeof err) == 0);
    return t;
}

static int send_req(rmq_remoting_t *t, const char *addr, size_t body_len, result_t *r)
{
    rmq_cmd_t req;
    rmq__cmd_init(&req, RMQ_REQ_HEART_BEAT, RMQ_SERIALIZE_JSON);
    rmq__cmd_set_ext(&req, "clientID", "test");
    req.body = expect_body;
    req.body_len = body_len;
    int rc = rmq__remoting_request(t, addr, &req, (int64_t)(5000 * scale), on_resp, r);
    req.body = NULL;
    req.body_len = 0;
    rmq__cmd_free(&req);
    return rc;
}

/* ---- tests ------------------------------------------------------------------------------------ */

static rmq_tls_ctx_t *server_ctx(const char *cert, const char *key)
{
    char err[512];
    rmq_tls_ctx_t *ctx = NULL;
    rmq_tls_server_conf_t sc = {.cert_path = path(cert), .key_path = path(key)};
    CHECK(rmq__tls_ctx_server(&sc, &ctx, err, sizeof err) == 0);
    if (!ctx) fprintf(stderr, "server ctx: %s\n", err);
    return ctx;
}

static rmq_tls_ctx_t *client_ctx_ex(const char *ca, int test_mode, int skip_name_check)
{
    char err[512];
    rmq_tls_ctx_t *ctx = NULL;
    rmq_tls_client_conf_t cc = {.test_mode = test_mode, .auth_server = 1,
                                .trust_cert_path = ca ? path(ca) : NULL,
                                .skip_name_check = skip_name_check};
    CHECK(rmq__tls_ctx_client(&cc, &ctx, err, sizeof err) == 0);
    if (!ctx) fprintf(stderr, "client ctx: %s\n", err);
    return ctx;
}

static rmq_tls_ctx_t *client_ctx(const char *ca, int test_mode)
{
    return client_ctx_ex(ca, test_mode, 0);
}

static int count_done(const result_t *r, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += r[i].done;
    return k;
}

static void test_tls_requests(void)
{
    rmq_tls_ctx_t *sctx = server_ctx("server.pem", "server.key");
    rmq_tls_ctx_t *cctx = client_ctx("ca.pem", 0);
    server_t s;
    server_start(&s, sctx, 1);
    rmq_remoting_t *t = client_new(cctx, "ak_for_tests", "sk_for_tests");
    /* One big body (many TLS records each way), then 300 small ones written together. */
    result_t big;
    memset(&big, 0, sizeof big);
    CHECK(send_req(t, s.addr, sizeof expect_body, &big) == 0);
    WAIT_UNTIL(big.done == 1, 5000);
    CHECK(big.err == 0 && big.code == RMQ_RESP_SUCCESS);
    CHECK(big.body_len == sizeof expect_body && big.body_ok);
    static result_t small[300];
    memset(small, 0, sizeof small);
    for (int i = 0; i < 300; i++)
        CHECK(send_req(t, s.addr, (size_t)(i * 7 % 500), &small[i]) == 0);
    WAIT_UNTIL(count_done(small, 300) == 300, 5000);
    for (int i = 0; i < 300; i++) {
        CHECK(small[i].err == 0 && small[i].body_ok);
        CHECK(small[i].sig[0] == '\0'); /* responses are never signed */
    }
    /* Every request arrived signed, and the signatures check out. */
    CHECK(s.requests == 301);
    CHECK(lent_written == 301);
    CHECK(s.signed_ok == 301 && s.signed_bad == 0);
    transport_destroy(t);
    transport_destroy(s.t);
    rmq__tls_ctx_release(sctx);
    rmq__tls_ctx_release(cctx);
}

static void test_permissive_and_enforcing(void)
{
    rmq_tls_ctx_t *sctx = server_ctx("server.pem", "server.key");
    rmq_tls_ctx_t *cctx = client_ctx("ca.pem", 0);
    for (int enforcing = 0; enforcing < 2; enforcing++) {
        server_t s;
        server_start(&s, sctx, enforcing);
        rmq_remoting_t *tls = client_new(cctx, NULL, NULL), *plain = client_new(NULL, NULL, NULL);
        result_t a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        CHECK(send_req(tls, s.addr, 100, &a) == 0);
        CHECK(send_req(plain, s.addr, 100, &b) == 0);
        WAIT_UNTIL(a.done && b.done, 5000);
        CHECK(a.err == 0 && a.body_ok);
        if (enforcing) {
            CHECK(b.err == RMQ_ERR_TRANSPORT); /* closed without an answer */
        } else {
            CHECK(b.err == 0 && b.body_ok);
        }
        transport_destroy(tls);
        transport_destroy(plain);
        transport_destroy(s.t);
    }
    rmq__tls_ctx_release(sctx);
    rmq__tls_ctx_release(cctx);
}

static void test_untrusted_server(void)
{
    rmq_tls_ctx_t *sctx = server_ctx("rogue.pem", "rogue.key");
    rmq_tls_ctx_t *cctx = client_ctx("ca.pem", 0), *test_mode = client_ctx(NULL, 1);
    server_t s;
    server_start(&s, sctx, 1);
    rmq_remoting_t *t = client_new(cctx, NULL, NULL);
    result_t r;
    memset(&r, 0, sizeof r);
    CHECK(send_req(t, s.addr, 10, &r) == 0);
    WAIT_UNTIL(r.done, 5000);
    char want[128];
    snprintf(want, sizeof want, "TLS handshake with %s failed: certificate verify failed", s.addr);
    CHECK(r.err == RMQ_ERR_TRANSPORT);
    CHECKF(strstr(r.errmsg, want) != NULL, "%s", r.errmsg);
    /* The address is in backoff: the next request waits for the next attempt, which fails too. */
    rmq_remoting_stats_t st;
    memset(&r, 0, sizeof r);
    CHECK(send_req(t, s.addr, 10, &r) == 0);
    WAIT_UNTIL(r.done, 5000);
    rmq__remoting_stats(t, &st);
    CHECK(st.connect_failures == 2 && st.connects == 0);
    transport_destroy(t);
    /* Test mode trusts it. */
    t = client_new(test_mode, NULL, NULL);
    memset(&r, 0, sizeof r);
    CHECK(send_req(t, s.addr, 10, &r) == 0);
    WAIT_UNTIL(r.done, 5000);
    CHECK(r.err == 0 && r.body_ok);
    transport_destroy(t);
    transport_destroy(s.t);
    rmq__tls_ctx_release(sctx);
    rmq__tls_ctx_release(cctx);
    rmq__tls_ctx_release(test_mode);
}

/* One request from a fresh client transport with cctx to s; r holds the outcome. */
static void one_request(rmq_tls_ctx_t *cctx, const server_t *s, result_t *r)
{
    rmq_remoting_t *t = client_new(cctx, NULL, NULL);
    memset(r, 0, sizeof *r);
    CHECK(send_req(t, s->addr, 10, r) == 0);
    WAIT_UNTIL(r->done, 5000);
    transport_destroy(t);
}

static void test_server_identity(void)
{
    rmq_tls_ctx_t *cctx = client_ctx("ca.pem", 0), *nocheck = client_ctx_ex("ca.pem", 0, 1);
    rmq_tls_ctx_t *wrong = server_ctx("wrong.pem", "wrong.key");
    rmq_tls_ctx_t *dnsonly = server_ctx("dnsonly.pem", "dnsonly.key");
    rmq_tls_ctx_t *good = server_ctx("server.pem", "server.key");
    server_t s;
    result_t r;
    char want[400];
    /* Signed by the trusted CA, but for another name: refused, saying what to do. */
    server_start(&s, wrong, 1);
    one_request(cctx, &s, &r);
    CHECK(r.err == RMQ_ERR_TRANSPORT);
    snprintf(want, sizeof want,
             "TLS handshake with %s failed: certificate verify failed: the server's certificate "
             "does not name 127.0.0.1, the IP dialled (it names DNS:wrong.example); "
             "tls_verify_server_name = false turns this check off", s.addr);
    CHECKF(strstr(r.errmsg, want) != NULL, "%s", r.errmsg);
    /* The check turned off: the chain alone is verified. */
    one_request(nocheck, &s, &r);
    CHECKF(r.err == 0 && r.body_ok, "%s", r.errmsg);
    transport_destroy(s.t);
    /* A DNS name only, dialled by IP: refused (no fallback to the CN 127.0.0.1 either). */
    server_start(&s, dnsonly, 1);
    one_request(cctx, &s, &r);
    CHECK(r.err == RMQ_ERR_TRANSPORT);
    CHECKF(strstr(r.errmsg, "does not name 127.0.0.1, the IP dialled (it names DNS:localhost)"),
           "%s", r.errmsg);
    transport_destroy(s.t);
    /* IP entries match the IPv4 and the IPv6 literal dialled. */
    server_start(&s, good, 1);
    one_request(cctx, &s, &r);
    CHECKF(r.err == 0 && r.body_ok, "%s", r.errmsg);
    transport_destroy(s.t);
    char err[256];
    rmq_remoting_t *probe = client_new(NULL, NULL, NULL);
    int v6 = rmq__remoting_listen(probe, "::1", 0, err, sizeof err) == 0;
    transport_destroy(probe);
    if (v6) {
        server_start_on(&s, good, 1, "::1");
        one_request(cctx, &s, &r);
        CHECKF(r.err == 0 && r.body_ok, "%s", r.errmsg);
        transport_destroy(s.t);
        server_start_on(&s, wrong, 1, "::1");
        one_request(cctx, &s, &r);
        CHECKF(strstr(r.errmsg, "does not name ::1, the IP dialled (it names DNS:wrong.example)"),
               "%s", r.errmsg);
        transport_destroy(s.t);
    } else {
        fprintf(stderr, "test_tls: no IPv6 loopback, the ::1 cases are skipped\n");
    }
    rmq__tls_ctx_release(cctx);
    rmq__tls_ctx_release(nocheck);
    rmq__tls_ctx_release(wrong);
    rmq__tls_ctx_release(dnsonly);
    rmq__tls_ctx_release(good);
}

/* A raw TCP server that answers every connection with 8 plaintext bytes (a RocketMQ frame's
 * length and header length), as a plain server answering something would. */
typedef struct plain_srv {
    uv_tcp_t tcp;
    int port;
    int accepted;
} plain_srv_t;

static void on_plain_closed(uv_handle_t *h)
{
    free(h);
}

/* The answer is out: close the connection. */
static void on_plain_written(uv_write_t *w, int status)
{
    (void)status;
    uv_close((uv_handle_t *)w->handle, on_plain_closed);
    free(w);
}

static void on_plain_conn(uv_stream_t *srv, int status)
{
    static char answer[8] = {0, 0, 0, 4, 0, 0, 0, 0};
    plain_srv_t *ps = srv->data;
    if (status < 0) return;
    uv_tcp_t *c = malloc(sizeof *c);
    uv_tcp_init(loop, c);
    uv_write_t *w = malloc(sizeof *w);
    uv_buf_t b = uv_buf_init(answer, sizeof answer);
    if (uv_accept(srv, (uv_stream_t *)c) == 0 &&
        uv_write(w, (uv_stream_t *)c, &b, 1, on_plain_written) == 0) {
        ps->accepted++;
        return;
    }
    free(w);
    uv_close((uv_handle_t *)c, on_plain_closed);
}

static void test_not_tls(void)
{
    rmq_tls_ctx_t *cctx = client_ctx("ca.pem", 0);
    result_t r;
    /* A plain RocketMQ server: it cannot read a ClientHello and closes the connection. */
    server_t s;
    server_start(&s, NULL, 0);
    one_request(cctx, &s, &r);
    CHECK(r.err == RMQ_ERR_TRANSPORT);
    CHECKF(strstr(r.errmsg, "it may not speak TLS (use_tls = false for a plain server)"), "%s",
           r.errmsg);
    transport_destroy(s.t);
    /* A server answering in plaintext. */
    plain_srv_t ps;
    memset(&ps, 0, sizeof ps);
    struct sockaddr_in sa;
    struct sockaddr_storage bound;
    int blen = sizeof bound;
    uv_ip4_addr("127.0.0.1", 0, &sa);
    CHECK(uv_tcp_init(loop, &ps.tcp) == 0);
    ps.tcp.data = &ps;
    CHECK(uv_tcp_bind(&ps.tcp, (struct sockaddr *)&sa, 0) == 0);
    CHECK(uv_listen((uv_stream_t *)&ps.tcp, 16, on_plain_conn) == 0);
    CHECK(uv_tcp_getsockname(&ps.tcp, (struct sockaddr *)&bound, &blen) == 0);
    snprintf(s.addr, sizeof s.addr, "127.0.0.1:%d", ntohs(((struct sockaddr_in *)&bound)->sin_port));
    one_request(cctx, &s, &r);
    CHECK(ps.accepted >= 1);
    CHECK(r.err == RMQ_ERR_TRANSPORT);
    CHECKF(strstr(r.errmsg, "the server answered in plaintext, not TLS: it may not speak TLS "
                            "(use_tls = false for a plain server)"),
           "%s", r.errmsg);
    uv_close((uv_handle_t *)&ps.tcp, NULL);
    run_for(20);
    rmq__tls_ctx_release(cctx);
}

static void test_bad_files(void)
{
    char err[512];
    rmq_tls_ctx_t *ctx = NULL;
    rmq_tls_client_conf_t cc = {.auth_server = 1, .trust_cert_path = path("junk.pem")};
    CHECK(rmq__tls_ctx_client(&cc, &ctx, err, sizeof err) == RMQ_ERR_CONFIG && !ctx);
    CHECK(strstr(err, "tls_client_trust_cert_path: cannot load CA certificates from ") != NULL);
    CHECK(strstr(err, "junk.pem") != NULL);
    cc.trust_cert_path = path("missing.pem");
    CHECK(rmq__tls_ctx_client(&cc, &ctx, err, sizeof err) == RMQ_ERR_CONFIG);
    CHECK(strstr(err, "missing.pem: No such file or directory") != NULL);
    rmq_tls_server_conf_t sc = {.cert_path = path("server.pem"), .key_path = path("rogue.key")};
    CHECK(rmq__tls_ctx_server(&sc, &ctx, err, sizeof err) == RMQ_ERR_CONFIG);
    CHECK(strstr(err, "does not match the certificate") != NULL);
}

int main(void)
{
    for (size_t i = 0; i < sizeof expect_body; i++)
        expect_body[i] = (char)('a' + i % 23);
    if (make_certs() != 0) {
        fprintf(stderr, "test_tls: openssl could not make the certificates\n");
        return 1;
    }
    test_loop_open(NULL);
    test_tls_requests();
    test_permissive_and_enforcing();
    test_untrusted_server();
    test_server_identity();
    test_not_tls();
    test_bad_files();
    test_loop_close();
    sh("rm -rf '%s'", dir);
    return test_report("test_tls");
}
