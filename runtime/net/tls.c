/*
 * tls.c -- TLS contexts and sessions over libuv streams (tls.h).
 *
 * Ownership: a context owns its SSL_CTX (reference counted, shared read-only by the sessions);
 * a session owns its SSL (with its two memory BIOs), its read buffer and the plaintext held
 * until the handshake finishes; each ciphertext write in flight owns its own buffer.
 * Threads: contexts are built on any thread (they read files); a session and every callback
 * run on its stream's loop thread. OpenSSL's error queue is per thread and cleared around every
 * call, so sessions on one loop never see each other's errors.
 */
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct rmq_tls_ctx {
    SSL_CTX *ssl;
    int refs; /* atomic */
    int is_server;
    int check_name; /* client: the certificate must name the address dialled */
};

#define TLS_READ_BUF (64 * 1024)
#define TLS_RECORD (16 * 1024) /* plaintext gathered per SSL_write: one full record */

typedef struct held_write {
    uv_write_t *req;
    uv_write_cb cb;
} held_write_t;

struct rmq_tls {
    rmq_tls_ctx_t *ctx;
    SSL *ssl;
    BIO *rbio, *wbio; /* owned by ssl */
    uv_stream_t *stream;
    rmq_tls_io_t io;
    void *ud;
    int established;
    int got_bytes;     /* client: something arrived from the server */
    int plain_answer;  /* client: the server's first bytes were not a TLS record */
    char host[256];    /* client: the host dialled (a name or an IP), for the identity check */
    char names[256];   /* client: the names a certificate that did not match holds */
    rmq_buf_t held; /* plaintext written before the handshake finished */
    held_write_t *held_cbs;
    unsigned n_held, cap_held;
    char rbuf[TLS_READ_BUF];
};

/* One uv_write of ciphertext; runs the callbacks of the writes it carries when done. */
typedef struct twrite {
    uv_write_t w;
    unsigned ndone;
    held_write_t *done;
    char *data;
    size_t len;
} twrite_t;

/* ---- errors ------------------------------------------------------------------------------------ */

/* OpenSSL's reason for the last failure ("certificate verify failed (self-signed certificate)"). */
static void ssl_reason(const SSL *ssl, char *out, size_t n)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    char code[64];
    if (!r && e) {
        ERR_error_string_n(e, code, sizeof code);
        r = code;
    }
    long v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
    if (v != X509_V_OK && ssl && !SSL_is_server(ssl))
        snprintf(out, n, "%s (%s)", r ? r : "certificate verify failed",
                 X509_verify_cert_error_string(v));
    else
        snprintf(out, n, "%s", r ? r : "unexpected end of the TLS stream");
    ERR_clear_error();
}

/* Why the session's handshake failed: OpenSSL's reason, and for a certificate that does not
 * name the address dialled, that address, the names the certificate holds and the option. */
static void handshake_reason(rmq_tls_t *s, char *out, size_t n)
{
    long v = SSL_get_verify_result(s->ssl);
    if (s->plain_answer) {
        snprintf(out, n, "the server answered in plaintext, not TLS: it may not speak TLS "
                 "(use_tls = false for a plain server)");
        ERR_clear_error();
    } else if ((v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH) &&
               s->names[0]) {
        snprintf(out, n, "certificate verify failed: the server's certificate does not name %.100s, "
                 "the %s dialled (it names %.200s); tls_verify_server_name = false turns this "
                 "check off", s->host, v == X509_V_ERR_IP_ADDRESS_MISMATCH ? "IP" : "host name",
                 s->names);
        ERR_clear_error();
    } else {
        ssl_reason(s->ssl, out, n);
    }
}

/* ---- the server's identity --------------------------------------------------------------------- */

/* Append the printable form of a name the peer sent (control bytes escaped). */
static void put_name(char *out, size_t n, size_t *at, const char *prefix, const unsigned char *p,
                     int len)
{
    size_t k = *at;
    if (k + 1 >= n) return;
    int w = snprintf(out + k, n - k, "%s%s", k ? ", " : "", prefix);
    if (w < 0 || (size_t)w >= n - k) {
        *at = n - 1;
        return;
    }
    k += (size_t)w;
    for (int i = 0; i < len && k + 5 < n; i++) {
        if (p[i] >= 0x20 && p[i] < 0x7f)
            out[k++] = (char)p[i];
        else
            k += (size_t)snprintf(out + k, n - k, "\\x%02x", p[i]);
    }
    out[k] = '\0';
    *at = k;
}

/* The names x holds, for an error: "DNS:a.example, IP:10.0.0.1", else its CN, else a note. */
static void cert_names(X509 *x, char *out, size_t n)
{
    size_t at = 0;
    out[0] = '\0';
    GENERAL_NAMES *gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    int count = gens ? sk_GENERAL_NAME_num(gens) : 0;
    for (int i = 0; i < count; i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
        if (g->type == GEN_DNS) {
            put_name(out, n, &at, "DNS:", ASN1_STRING_get0_data(g->d.dNSName),
                     ASN1_STRING_length(g->d.dNSName));
        } else if (g->type == GEN_IPADD) {
            char ip[INET6_ADDRSTRLEN] = "?";
            int len = ASN1_STRING_length(g->d.iPAddress);
            const unsigned char *b = ASN1_STRING_get0_data(g->d.iPAddress);
            if (len == 4 || len == 16) inet_ntop(len == 4 ? AF_INET : AF_INET6, b, ip, sizeof ip);
            put_name(out, n, &at, "IP:", (const unsigned char *)ip, (int)strlen(ip));
        }
    }
    GENERAL_NAMES_free(gens);
    if (at) return;
    X509_NAME *subj = X509_get_subject_name(x);
    int i = subj ? X509_NAME_get_index_by_NID(subj, NID_commonName, -1) : -1;
    if (i >= 0) {
        ASN1_STRING *cn = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subj, i));
        put_name(out, n, &at, "CN=", ASN1_STRING_get0_data(cn), ASN1_STRING_length(cn));
        snprintf(out + at, n - at, "%s", count ? "" : " and no subjectAltName");
    } else {
        snprintf(out, n, "no DNS or IP name at all");
    }
}

/* OpenSSL's verification callback: keeps the names of a certificate that does not name the
 * address dialled, for the error (the certificate is gone once the handshake failed). */
static int on_verify(int ok, X509_STORE_CTX *xs)
{
    int e = X509_STORE_CTX_get_error(xs);
    if (ok || (e != X509_V_ERR_HOSTNAME_MISMATCH && e != X509_V_ERR_IP_ADDRESS_MISMATCH))
        return ok;
    SSL *ssl = X509_STORE_CTX_get_ex_data(xs, SSL_get_ex_data_X509_STORE_CTX_idx());
    rmq_tls_t *s = ssl ? SSL_get_app_data(ssl) : NULL;
    X509 *x = X509_STORE_CTX_get0_cert(xs);
    if (s && x) cert_names(x, s->names, sizeof s->names);
    return ok;
}

/* ---- contexts ---------------------------------------------------------------------------------- */

static int pw_cb(char *buf, int size, int rwflag, void *u)
{
    const char *pw = u;
    (void)rwflag;
    if (!pw) return 0; /* never prompt on a terminal: an encrypted key without a password fails */
    size_t len = strlen(pw);
    if (len > (size_t)size) len = (size_t)size;
    memcpy(buf, pw, len);
    return (int)len;
}

/* A readable file, else an error naming the option and errno's reason. */
static int readable(const char *opt, const char *path, char *errstr, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        rmq__seterr(errstr, n, "%s: cannot read %s: %s", opt, path, strerror(errno));
        return -1;
    }
    fclose(f);
    return 0;
}

static int load_pair(SSL_CTX *ssl, const char *cert_opt, const char *cert, const char *key_opt,
                     const char *key, const char *password, char *errstr, size_t n)
{
    char why[256];
    if (readable(cert_opt, cert, errstr, n) || readable(key_opt, key, errstr, n)) return -1;
    ERR_clear_error();
    if (SSL_CTX_use_certificate_chain_file(ssl, cert) != 1) {
        ssl_reason(NULL, why, sizeof why);
        rmq__seterr(errstr, n, "%s: cannot load the certificate chain %s: %s", cert_opt, cert,
                    why);
        return -1;
    }
    SSL_CTX_set_default_passwd_cb(ssl, pw_cb);
    SSL_CTX_set_default_passwd_cb_userdata(ssl, (void *)password);
    int ok = SSL_CTX_use_PrivateKey_file(ssl, key, SSL_FILETYPE_PEM) == 1;
    SSL_CTX_set_default_passwd_cb_userdata(ssl, NULL);
    if (!ok) {
        ssl_reason(NULL, why, sizeof why);
        if (strstr(why, "mismatch"))
            rmq__seterr(errstr, n, "%s: the private key %s does not match the certificate %s "
                        "(%s)", key_opt, key, cert, why);
        else
            rmq__seterr(errstr, n, "%s: cannot load the private key %s: %s%s", key_opt, key, why,
                        password ? " (wrong password?)" : " (if it is encrypted: its password)");
        return -1;
    }
    if (SSL_CTX_check_private_key(ssl) != 1) {
        ssl_reason(NULL, why, sizeof why);
        rmq__seterr(errstr, n, "%s: the private key %s does not match the certificate %s: %s",
                    key_opt, key, cert, why);
        return -1;
    }
    return 0;
}

static int load_trust(SSL_CTX *ssl, const char *opt, const char *path, char *errstr, size_t n)
{
    char why[256];
    if (readable(opt, path, errstr, n)) return -1;
    ERR_clear_error();
    if (SSL_CTX_load_verify_locations(ssl, path, NULL) != 1) {
        ssl_reason(NULL, why, sizeof why);
        rmq__seterr(errstr, n, "%s: cannot load CA certificates from %s: %s", opt, path, why);
        return -1;
    }
    return 0;
}

/* A new context of method with what clients and servers share (TLS 1.2 at least, no
 * renegotiation). Returns it, or NULL after saying in errstr why it could not be made (what
 * names the option it is for). */
static rmq_tls_ctx_t *ctx_new(const SSL_METHOD *method, int is_server, const char *what,
                              char *errstr, size_t n)
{
    ERR_clear_error();
    SSL_CTX *ssl = SSL_CTX_new(method);
    if (!ssl) {
        char why[256];
        ssl_reason(NULL, why, sizeof why);
        rmq__seterr(errstr, n, "%s: cannot create a TLS context: %s", what, why);
        return NULL;
    }
    rmq_tls_ctx_t *c = rmq__xcalloc(1, sizeof(*c));
    c->ssl = ssl;
    c->refs = 1;
    c->is_server = is_server;
    SSL_CTX_set_min_proto_version(ssl, TLS1_2_VERSION);
    SSL_CTX_set_options(ssl, SSL_OP_NO_RENEGOTIATION);
    /* Idle connections do not keep 34 KB of record buffers each. */
    SSL_CTX_set_mode(ssl, SSL_MODE_RELEASE_BUFFERS);
    return c;
}

/* The system's CA file, loaded at once (a hashed directory would be read during handshakes, on
 * the loop thread). NULL when there is none. */
static const char *system_ca_file(void)
{
    const char *env = getenv(X509_get_default_cert_file_env());
    if (env && *env && access(env, R_OK) == 0) return env;
    const char *def = X509_get_default_cert_file();
    if (def && access(def, R_OK) == 0) return def;
    if (access("/etc/ssl/certs/ca-certificates.crt", R_OK) == 0)
        return "/etc/ssl/certs/ca-certificates.crt";
    return NULL;
}

int rmq__tls_ctx_client(const rmq_tls_client_conf_t *cf, rmq_tls_ctx_t **out, char *errstr,
                        size_t n)
{
    *out = NULL;
    rmq_tls_ctx_t *c = ctx_new(TLS_client_method(), 0, "use_tls", errstr, n);
    if (!c) return RMQ_ERR_CONFIG;
    SSL_CTX *ssl = c->ssl;
    /* TlsHelper.buildSslContext(forClient): test mode (or authServer off) trusts any server
     * certificate; otherwise the chain is verified against the trust file, else the system's
     * CAs, and (unlike Java's SslContext, like librdkafka and Kafka's clients since 2.0) the
     * certificate must name the address dialled unless skip_name_check (rmq__tls_new). */
    int verify = !cf->test_mode && cf->auth_server;
    if (verify) {
        const char *ca = cf->trust_cert_path;
        if (ca && *ca) {
            if (load_trust(ssl, "tls_client_trust_cert_path", ca, errstr, n)) goto fail;
        } else if ((ca = system_ca_file()) != NULL) {
            if (load_trust(ssl, "tls_client_auth_server (system CA file)", ca, errstr, n))
                goto fail;
        } else {
            rmq__seterr(errstr, n, "tls_client_auth_server: no tls_client_trust_cert_path and no "
                        "system CA file to verify the server with");
            goto fail;
        }
        SSL_CTX_set_verify(ssl, SSL_VERIFY_PEER, on_verify);
        c->check_name = !cf->skip_name_check;
    } else {
        SSL_CTX_set_verify(ssl, SSL_VERIFY_NONE, NULL);
    }
    if (cf->cert_path && *cf->cert_path &&
        load_pair(ssl, "tls_client_cert_path", cf->cert_path, "tls_client_key_path",
                  cf->key_path, cf->key_password, errstr, n))
        goto fail;
    *out = c;
    return 0;
fail:
    rmq__tls_ctx_release(c);
    return RMQ_ERR_CONFIG;
}

int rmq__tls_ctx_server(const rmq_tls_server_conf_t *cf, rmq_tls_ctx_t **out, char *errstr,
                        size_t n)
{
    *out = NULL;
    rmq_tls_ctx_t *c = ctx_new(TLS_server_method(), 1, "--tls-cert", errstr, n);
    if (!c) return RMQ_ERR_CONFIG;
    SSL_CTX *ssl = c->ssl;
    if (!cf->cert_path || !cf->key_path) {
        rmq__seterr(errstr, n, "--tls-cert and --tls-key go together");
        goto fail;
    }
    if (load_pair(ssl, "--tls-cert", cf->cert_path, "--tls-key", cf->key_path, cf->key_password,
                  errstr, n))
        goto fail;
    SSL_CTX_set_session_id_context(ssl, (const unsigned char *)"rmqlua", 6);
    if (cf->client_ca_path) {
        /* tls.server.need.client.auth=require with tls.server.authClient and trustCertPath. */
        if (load_trust(ssl, "--tls-verify-client", cf->client_ca_path, errstr, n)) goto fail;
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(cf->client_ca_path);
        if (names) SSL_CTX_set_client_CA_list(ssl, names);
        SSL_CTX_set_verify(ssl, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    }
    *out = c;
    return 0;
fail:
    rmq__tls_ctx_release(c);
    return RMQ_ERR_CONFIG;
}

int rmq__tls_ctx_names_host(const rmq_tls_ctx_t *c, const char *host, char *names, size_t n)
{
    X509 *x = SSL_CTX_get0_certificate(c->ssl);
    names[0] = '\0';
    if (!x) return 0;
    unsigned char ip[16];
    int ok = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1
                 ? X509_check_ip_asc(x, host, 0) == 1
                 : X509_check_host(x, host, 0, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS, NULL) == 1;
    if (!ok) cert_names(x, names, n);
    return ok;
}

rmq_tls_ctx_t *rmq__tls_ctx_keep(rmq_tls_ctx_t *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
    return c;
}

void rmq__tls_ctx_release(rmq_tls_ctx_t *c)
{
    if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    SSL_CTX_free(c->ssl);
    free(c);
}

/* ---- sessions ---------------------------------------------------------------------------------- */

rmq_tls_t *rmq__tls_new(rmq_tls_ctx_t *ctx, uv_stream_t *stream, const rmq_tls_io_t *io, void *ud,
                        const char *host, char *errstr, size_t n)
{
    char why[256];
    ERR_clear_error();
    SSL *ssl = SSL_new(ctx->ssl);
    BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
    if (!ssl || !rb || !wb) {
        ssl_reason(NULL, why, sizeof why);
        rmq__seterr(errstr, n, "cannot create a TLS session: %s", why);
        SSL_free(ssl);
        BIO_free(rb);
        BIO_free(wb);
        return NULL;
    }
    /* A memory BIO with nothing in it reports "retry", which SSL turns into WANT_READ. */
    BIO_set_mem_eof_return(rb, -1);
    BIO_set_mem_eof_return(wb, -1);
    SSL_set_bio(ssl, rb, wb);
    if (ctx->is_server)
        SSL_set_accept_state(ssl);
    else
        SSL_set_connect_state(ssl);
    rmq_tls_t *s = rmq__xcalloc(1, sizeof(*s));
    if (host && *host && !ctx->is_server) {
        unsigned char ip[16];
        int is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
        snprintf(s->host, sizeof s->host, "%s", host);
        if (!is_ip) SSL_set_tlsext_host_name(ssl, host); /* SNI carries names only (RFC 6066) */
        int ok = 1;
        if (ctx->check_name && is_ip) {
            ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) == 1;
        } else if (ctx->check_name) {
            /* RFC 6125: a wildcard only as the whole left-most label; the CN only without SAN
             * DNS names (OpenSSL's default for a host name). */
            SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
            ok = SSL_set1_host(ssl, host) == 1;
        }
        if (!ok) {
            ssl_reason(NULL, why, sizeof why);
            rmq__seterr(errstr, n, "cannot check the server's certificate against %s: %s", host,
                        why);
            SSL_free(ssl);
            free(s);
            return NULL;
        }
    }
    SSL_set_app_data(ssl, s);
    s->ctx = rmq__tls_ctx_keep(ctx);
    s->ssl = ssl;
    s->rbio = rb;
    s->wbio = wb;
    s->stream = stream;
    s->io = *io;
    s->ud = ud;
    rmq__buf_init(&s->held);
    return s;
}

void rmq__tls_free(rmq_tls_t *s)
{
    if (!s) return;
    /* Writes held for a handshake that never finished complete as cancelled. */
    for (unsigned i = 0; i < s->n_held; i++)
        s->held_cbs[i].cb(s->held_cbs[i].req, UV_ECANCELED);
    SSL_free(s->ssl);
    rmq__tls_ctx_release(s->ctx);
    rmq__buf_free(&s->held);
    free(s->held_cbs);
    free(s);
}

int rmq__tls_established(const rmq_tls_t *s)
{
    return s->established;
}

const char *rmq__tls_describe(const rmq_tls_t *s, char *buf, size_t n)
{
    snprintf(buf, n, "%s %s", SSL_get_version(s->ssl), SSL_get_cipher_name(s->ssl));
    return buf;
}

void rmq__tls_read_buf(rmq_tls_t *s, char **base, size_t *len)
{
    *base = s->rbuf;
    *len = sizeof s->rbuf;
}

static void on_twrite(uv_write_t *w, int status)
{
    twrite_t *tw = (twrite_t *)w;
    for (unsigned i = 0; i < tw->ndone; i++)
        tw->done[i].cb(tw->done[i].req, status);
    free(tw->done);
    free(tw->data);
    free(tw);
}

/*
 * Write every ciphertext byte the session produced, in one uv_write that completes the ndone
 * callbacks of done (taken over). Nothing to write and nothing to complete: no write.
 * Returns 0 or a libuv error (the callbacks are not run).
 */
static int flush_out(rmq_tls_t *s, held_write_t *done, unsigned ndone)
{
    size_t len = (size_t)BIO_ctrl_pending(s->wbio);
    if (!len && !ndone) return 0;
    twrite_t *tw = rmq__xcalloc(1, sizeof(*tw));
    tw->data = rmq__xmalloc(len ? len : 1);
    if (len && BIO_read(s->wbio, tw->data, (int)len) != (int)len) abort(); /* memory BIO */
    tw->len = len;
    tw->done = done;
    tw->ndone = ndone;
    uv_buf_t b = uv_buf_init(tw->data, (unsigned)len);
    int rc = uv_write(&tw->w, s->stream, &b, 1, on_twrite);
    if (rc < 0) {
        tw->done = NULL; /* the caller keeps them */
        free(tw->data);
        free(tw);
    }
    return rc;
}

/* Encrypt n bytes (whole records of up to TLS_RECORD bytes). Memory BIOs never push back. */
static int encrypt(rmq_tls_t *s, const char *p, size_t n)
{
    while (n) {
        int chunk = n > TLS_RECORD ? TLS_RECORD : (int)n;
        int r = SSL_write(s->ssl, p, chunk);
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Encrypt bufs, gathering small pieces into full records. */
static int encrypt_bufs(rmq_tls_t *s, const uv_buf_t *bufs, unsigned n)
{
    char stage[TLS_RECORD];
    size_t have = 0;
    for (unsigned i = 0; i < n; i++) {
        const char *p = bufs[i].base;
        size_t len = bufs[i].len;
        if (len >= TLS_RECORD) {
            if (have && encrypt(s, stage, have)) return -1;
            have = 0;
            if (encrypt(s, p, len)) return -1;
            continue;
        }
        while (len) {
            size_t k = TLS_RECORD - have < len ? TLS_RECORD - have : len;
            memcpy(stage + have, p, k);
            have += k;
            p += k;
            len -= k;
            if (have == TLS_RECORD) {
                if (encrypt(s, stage, have)) return -1;
                have = 0;
            }
        }
    }
    return have ? encrypt(s, stage, have) : 0;
}

int rmq__tls_write(rmq_tls_t *s, uv_write_t *req, const uv_buf_t *bufs, unsigned n, uv_write_cb cb)
{
    if (!s->established) {
        for (unsigned i = 0; i < n; i++)
            if (rmq__buf_append(&s->held, bufs[i].base, bufs[i].len)) return UV_ENOMEM;
        if (s->n_held == s->cap_held) {
            s->cap_held = s->cap_held ? 2 * s->cap_held : 8;
            s->held_cbs = realloc(s->held_cbs, s->cap_held * sizeof(*s->held_cbs));
            if (!s->held_cbs) abort();
        }
        s->held_cbs[s->n_held].req = req;
        s->held_cbs[s->n_held++].cb = cb;
        return 0;
    }
    ERR_clear_error();
    if (encrypt_bufs(s, bufs, n)) {
        ERR_clear_error();
        return UV_EPROTO;
    }
    held_write_t *d = rmq__xmalloc(sizeof(*d));
    d->req = req;
    d->cb = cb;
    int rc = flush_out(s, d, 1);
    if (rc < 0) free(d);
    return rc;
}

/* The handshake finished: send what was written meanwhile. */
static int release_held(rmq_tls_t *s)
{
    if (!s->n_held) return 0;
    uv_buf_t b = uv_buf_init(s->held.data, (unsigned)s->held.len);
    held_write_t *d = s->held_cbs;
    unsigned nd = s->n_held;
    s->held_cbs = NULL;
    s->n_held = s->cap_held = 0;
    int rc = encrypt_bufs(s, &b, 1) ? UV_EPROTO : flush_out(s, d, nd);
    s->held.len = 0;
    if (rc < 0) {
        /* The stream is failing: the writes complete with the error from the loop. */
        for (unsigned i = 0; i < nd; i++)
            d[i].cb(d[i].req, rc);
        free(d);
    }
    return rc;
}

int rmq__tls_start(rmq_tls_t *s, char *errstr, size_t n)
{
    char why[512];
    ERR_clear_error();
    int r = SSL_do_handshake(s->ssl);
    if (r != 1 && SSL_get_error(s->ssl, r) != SSL_ERROR_WANT_READ) {
        handshake_reason(s, why, sizeof why);
        rmq__seterr(errstr, n, "%s", why);
        return RMQ_ERR_TRANSPORT;
    }
    int rc = flush_out(s, NULL, 0);
    if (rc < 0) {
        rmq__seterr(errstr, n, "write failed: %s", uv_strerror(rc));
        return RMQ_ERR_TRANSPORT;
    }
    return 0;
}

int rmq__tls_feed(rmq_tls_t *s, const char *data, size_t n, char *errstr, size_t errsz)
{
    char why[512];
    int rc;
    if (n && BIO_write(s->rbio, data, (int)n) != (int)n) abort(); /* memory BIO */
    ERR_clear_error();
    if (!s->established) {
        /* A TLS server's first record is a handshake (22) or an alert (21): anything else is a
         * plain server answering (a RocketMQ frame starts with its length, 0 0 ...). */
        if (n && !s->got_bytes && !s->ctx->is_server)
            s->plain_answer = data[0] != RMQ_TLS_HANDSHAKE_MAGIC && data[0] != 21;
        s->got_bytes |= n > 0;
        int r = SSL_do_handshake(s->ssl);
        if (r != 1) {
            int e = SSL_get_error(s->ssl, r);
            if (e != SSL_ERROR_WANT_READ) handshake_reason(s, why, sizeof why);
            flush_out(s, NULL, 0); /* our alert, if any, goes out before the close */
            if (e == SSL_ERROR_WANT_READ) return 0;
            rmq__seterr(errstr, errsz, "%s", why);
            return RMQ_ERR_TRANSPORT;
        }
        s->established = 1;
        if ((rc = flush_out(s, NULL, 0)) < 0 || (rc = release_held(s)) < 0) {
            rmq__seterr(errstr, errsz, "write failed: %s", uv_strerror(rc));
            return RMQ_ERR_TRANSPORT;
        }
        if (s->io.established(s->ud)) return 0;
    }
    for (;;) {
        char *base;
        size_t len;
        s->io.alloc(s->ud, &base, &len);
        int r = SSL_read(s->ssl, base, len > INT32_MAX ? INT32_MAX : (int)len);
        if (r > 0) {
            if (s->io.commit(s->ud, base, (size_t)r)) return 0;
            continue;
        }
        int e = SSL_get_error(s->ssl, r);
        if (e == SSL_ERROR_WANT_READ) break;
        if (e == SSL_ERROR_ZERO_RETURN) {
            rmq__seterr(errstr, errsz, "closed by peer (TLS close_notify)");
        } else {
            ssl_reason(s->ssl, why, sizeof why);
            rmq__seterr(errstr, errsz, "%s", why);
        }
        flush_out(s, NULL, 0);
        return RMQ_ERR_TRANSPORT;
    }
    /* Anything the session has to say back (a TLS 1.3 key update answer). */
    if ((rc = flush_out(s, NULL, 0)) < 0) {
        rmq__seterr(errstr, errsz, "write failed: %s", uv_strerror(rc));
        return RMQ_ERR_TRANSPORT;
    }
    return 0;
}
