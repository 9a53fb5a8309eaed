/*
 * cossl.c -- TLS on cosockets (cossl.h): OpenSSL client sessions over memory BIOs for
 * sock:sslhandshake (lua/rmq/socket.lua), driven by coloop.c's reads and writes, and the
 * thread's client context built from its rmq_coloop_conf_t.
 *
 * Verification follows OpenResty's: the handshake itself does not stop on a bad certificate
 * (SSL_VERIFY_NONE); once it is done, a verifying caller gets the chain's result as
 * "<code>: <reason>" and a certificate that does not name server_name (checked by OpenSSL during
 * the handshake, X509_VERIFY_PARAM_set1_host / set1_ip_asc) as "certificate host mismatch".
 *
 * Ownership: a session owns its SSL (which owns both BIOs); the thread owns its context.
 * Threads: the thread that owns the socket; the context is thread-local.
 */
#include "cossl.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rmq_cossl {
    SSL *ssl;
    BIO *in;  /* ciphertext from the peer (the SSL reads it) */
    BIO *out; /* ciphertext for the peer (the SSL writes it) */
    int verify;
};

/* The thread's context and the settings it was made from. */
static _Thread_local SSL_CTX *tctx;
static _Thread_local char *tctx_ca;
static _Thread_local int tctx_depth = -1;

static int same_str(const char *a, const char *b)
{
    if (!a || !b) return a == b;
    return strcmp(a, b) == 0;
}

void rmq__cossl_free_self(void)
{
    SSL_CTX_free(tctx);
    tctx = NULL;
    free(tctx_ca);
    tctx_ca = NULL;
    tctx_depth = -1;
}

static const char *ssl_reason(void)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    return r ? r : "unknown error";
}

/* The thread's context for cf: made, or made again when the settings changed. NULL with errbuf
 * naming the option and the file when the CA file cannot be loaded. */
static SSL_CTX *thread_ctx(const rmq_coloop_conf_t *cf, char *errbuf, size_t n)
{
    const char *ca = cf->ca_file && *cf->ca_file ? cf->ca_file : NULL;
    if (tctx && same_str(ca, tctx_ca) && tctx_depth == cf->verify_depth) return tctx;
    rmq__cossl_free_self();
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) {
        snprintf(errbuf, n, "cannot make a TLS context (%s)", ssl_reason());
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    SSL_CTX_set_verify_depth(ctx, cf->verify_depth);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    ERR_clear_error();
    int ok =
        ca ? SSL_CTX_load_verify_locations(ctx, ca, NULL) : SSL_CTX_set_default_verify_paths(ctx);
    if (ok != 1) {
        if (ca)
            snprintf(errbuf, n, "lua_ssl_trusted_certificate: cannot load %s (%s)", ca,
                     ssl_reason());
        else
            snprintf(errbuf, n, "cannot load the system's CA certificates (%s)", ssl_reason());
        ERR_clear_error();
        SSL_CTX_free(ctx);
        return NULL;
    }
    tctx = ctx;
    tctx_ca = ca ? rmq__xstrdup(ca) : NULL;
    tctx_depth = cf->verify_depth;
    return ctx;
}

static int is_ip(const char *s)
{
    ASN1_OCTET_STRING *a = a2i_IPADDRESS(s);
    if (!a) return 0;
    ASN1_OCTET_STRING_free(a);
    return 1;
}

rmq_cossl_t *rmq__cossl_new(const rmq_coloop_conf_t *cf, const char *server_name, int verify,
                            void *session, char *errbuf, size_t errbuf_size, const char **err)
{
    SSL_CTX *ctx = thread_ctx(cf, errbuf, errbuf_size);
    if (!ctx) {
        *err = errbuf;
        return NULL;
    }
    SSL *ssl = SSL_new(ctx);
    if (!ssl) {
        *err = "handshake failed";
        return NULL;
    }
    rmq_cossl_t *t = rmq__xcalloc(1, sizeof(*t));
    t->ssl = ssl;
    t->in = BIO_new(BIO_s_mem());
    t->out = BIO_new(BIO_s_mem());
    if (!t->in || !t->out) abort();    /* out of memory */
    BIO_set_mem_eof_return(t->in, -1); /* empty: "retry", not end of stream */
    SSL_set_bio(ssl, t->in, t->out);
    SSL_set_connect_state(ssl);
    t->verify = verify;
    int ip = server_name && *server_name && is_ip(server_name);
    if (server_name && *server_name && !ip) SSL_set_tlsext_host_name(ssl, server_name);
    if (verify && server_name && *server_name) {
        X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
        if (ip)
            X509_VERIFY_PARAM_set1_ip_asc(vp, server_name);
        else
            X509_VERIFY_PARAM_set1_host(vp, server_name, 0);
    }
    if (session) SSL_set_session(ssl, (SSL_SESSION *)session);
    return t;
}

void rmq__cossl_free(rmq_cossl_t *t)
{
    if (!t) return;
    SSL_free(t->ssl); /* frees both BIOs */
    free(t);
}

void rmq__cossl_feed(rmq_cossl_t *t, const char *p, size_t n)
{
    if (n) BIO_write(t->in, p, (int)n);
}

int rmq__cossl_handshake(rmq_cossl_t *t, char *errbuf, size_t errbuf_size, const char **err)
{
    ERR_clear_error();
    int rc = SSL_do_handshake(t->ssl);
    if (rc != 1) {
        int e = SSL_get_error(t->ssl, rc);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return 0;
        ERR_clear_error();
        *err = "handshake failed";
        return -1;
    }
    if (t->verify) {
        long v = SSL_get_verify_result(t->ssl);
        if (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH) {
            *err = "certificate host mismatch";
            return -1;
        }
        if (v != X509_V_OK) {
            snprintf(errbuf, errbuf_size, "%ld: %s", v, X509_verify_cert_error_string(v));
            *err = errbuf;
            return -1;
        }
        if (!SSL_get0_peer_certificate(t->ssl)) {
            *err = "no peer certificate";
            return -1;
        }
    }
    return 1;
}

int rmq__cossl_read(rmq_cossl_t *t, char *buf, size_t cap)
{
    ERR_clear_error();
    int n = SSL_read(t->ssl, buf, cap > INT32_MAX ? INT32_MAX : (int)cap);
    if (n > 0) return n;
    int e = SSL_get_error(t->ssl, n);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return 0;
    ERR_clear_error();
    return e == SSL_ERROR_ZERO_RETURN ? -1 : -2;
}

int rmq__cossl_write(rmq_cossl_t *t, const char *p, size_t n)
{
    while (n > 0) {
        int chunk = n > 1 << 30 ? 1 << 30 : (int)n;
        ERR_clear_error();
        int w = SSL_write(t->ssl, p, chunk); /* a memory BIO takes it all */
        if (w <= 0) {
            ERR_clear_error();
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

char *rmq__cossl_take(rmq_cossl_t *t, size_t *len)
{
    size_t n = BIO_ctrl_pending(t->out);
    *len = 0;
    if (n == 0) return NULL;
    char *b = rmq__xmalloc(n);
    int got = BIO_read(t->out, b, (int)n);
    if (got <= 0) {
        free(b);
        return NULL;
    }
    *len = (size_t)got;
    return b;
}

void *rmq__cossl_session(rmq_cossl_t *t)
{
    return SSL_get1_session(t->ssl);
}

/* Free a session rmq_cosock_ssl_session returned (Lua's ffi.gc). */
RMQ_EXPORT void rmq_cosock_ssl_session_free(void *session)
{
    SSL_SESSION_free((SSL_SESSION *)session);
}
