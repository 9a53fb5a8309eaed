/*
 * tls.h -- TLS for remoting connections: OpenSSL driven through memory BIOs over a libuv stream
 * (the Java client's useTLS / TlsSystemConfig, PROTOCOL.md 1.10; the server side is the
 * development broker's, like NettyRemotingServer's TlsModeHandler).
 *
 * Model
 *   rmq_tls_ctx_t  the settings of one side: an SSL_CTX with its certificate, key and trust
 *                  store loaded once, before any connection (file I/O happens here only).
 *   rmq_tls_t      one TLS session on one connection: ciphertext read from the socket is fed in
 *                  (rmq__tls_feed) and comes out as plaintext through the io callbacks, straight
 *                  into the reader's buffer (the remoting framer); plaintext written
 *                  (rmq__tls_write) goes out as one uv_write of ciphertext.
 *
 * Ownership
 *   - A context is reference counted (rmq__tls_ctx_keep / _release); a session keeps its
 *     context. A transport keeps the contexts it was given.
 *   - A session is owned by its connection and freed with rmq__tls_free() once the stream's
 *     handle is closed. Ciphertext writes in flight own their buffers; their completion calls
 *     the caller's write callback with the caller's request and never touches the session.
 *
 * Threads: contexts are created on any thread before use and are read-only afterwards;
 * a session and its callbacks run on the loop thread of its stream.
 */
#ifndef RMQ_TLS_H
#define RMQ_TLS_H

#include "base/common.h"

#include <uv.h>

typedef struct rmq_tls_ctx rmq_tls_ctx_t;
typedef struct rmq_tls rmq_tls_t;

/* Client side (TlsSystemConfig's tls.client.* / tls.test.mode.enable). */
typedef struct rmq_tls_client_conf {
    int test_mode;               /* trust any server certificate (tls.test.mode.enable) */
    int auth_server;             /* verify the server's chain (tls.client.authServer) */
    const char *cert_path;       /* PEM certificate chain presented to the server, or NULL */
    const char *key_path;        /* PEM private key of cert_path, or NULL */
    const char *key_password;    /* password of an encrypted key_path, or NULL */
    const char *trust_cert_path; /* PEM CA certificates; NULL = the system's CA file */
    int skip_name_check;         /* a verified certificate need not name the address dialled
                                  * (!tls_verify_server_name) */
} rmq_tls_client_conf_t;

/* Server side (tls.server.*; the development broker). */
typedef struct rmq_tls_server_conf {
    const char *cert_path;      /* PEM certificate chain (required) */
    const char *key_path;       /* PEM private key (required) */
    const char *key_password;   /* or NULL */
    const char *client_ca_path; /* require client certificates signed by these CAs, or NULL */
} rmq_tls_server_conf_t;

/*
 * Build a context. Returns 0 with *out (one reference), or RMQ_ERR_CONFIG with errstr naming the
 * option (client: tls_client_*; server: the development broker's --tls-* flags), the file that
 * could not be loaded and OpenSSL's reason.
 */
int rmq__tls_ctx_client(const rmq_tls_client_conf_t *conf, rmq_tls_ctx_t **out, char *errstr,
                        size_t errstr_size);
int rmq__tls_ctx_server(const rmq_tls_server_conf_t *conf, rmq_tls_ctx_t **out, char *errstr,
                        size_t errstr_size);
/* 1 when the context's own certificate names host (an IP or a name, as a client checks it);
 * 0 otherwise, with the names it holds in names ("DNS:a.example, IP:10.0.0.1"). */
int rmq__tls_ctx_names_host(const rmq_tls_ctx_t *ctx, const char *host, char *names, size_t n);
rmq_tls_ctx_t *rmq__tls_ctx_keep(rmq_tls_ctx_t *ctx);
void rmq__tls_ctx_release(rmq_tls_ctx_t *ctx); /* NULL is fine */

/* What a session hands to its connection (all on the loop thread). */
typedef struct rmq_tls_io {
    /* Where the next plaintext goes (the reader's buffer). */
    void (*alloc)(void *ud, char **base, size_t *len);
    /* n plaintext bytes were written at base (from alloc). Returns 0 to go on, non-zero when the
     * connection is closing (the feed stops). */
    int (*commit)(void *ud, char *base, size_t n);
    /* The handshake finished. Returns 0 to go on, non-zero to stop the feed. */
    int (*established)(void *ud);
} rmq_tls_io_t;

/*
 * A session on stream (which must outlive it). host: client side, the host dialled, a name or
 * an IP literal (IPv6 without brackets), or NULL. A name is sent as SNI. When the context
 * verifies the server and its name check is on, the certificate must name host: a name matches
 * its subjectAltName DNS entries (a wildcard as the whole left-most label; the CN only when
 * there is no DNS entry), an IP its subjectAltName IP entries; a mismatch fails the handshake
 * with an error naming host, the certificate's names and tls_verify_server_name.
 * Returns the session, or NULL with errstr.
 */
rmq_tls_t *rmq__tls_new(rmq_tls_ctx_t *ctx, uv_stream_t *stream, const rmq_tls_io_t *io, void *ud,
                        const char *host, char *errstr, size_t errstr_size);
/* Free the session once the stream's handle is closed; writes still held for the handshake
 * complete with UV_ECANCELED first. */
void rmq__tls_free(rmq_tls_t *s);

/* Client: send the ClientHello. Returns 0 or RMQ_ERR_TRANSPORT with the reason. */
int rmq__tls_start(rmq_tls_t *s, char *errstr, size_t errstr_size);
/* The buffer libuv reads ciphertext into (its alloc callback). */
void rmq__tls_read_buf(rmq_tls_t *s, char **base, size_t *len);
/*
 * n bytes of ciphertext arrived. Decrypts what it can and hands it to io (established first,
 * once, then commit). Returns 0 (also when io asked to stop), or RMQ_ERR_TRANSPORT with
 * OpenSSL's reason (handshake failure, bad record, the peer's alert; a client whose server
 * answered in plaintext is told it may not speak TLS) in errstr: the caller closes the
 * connection.
 */
int rmq__tls_feed(rmq_tls_t *s, const char *data, size_t n, char *errstr, size_t errstr_size);
/*
 * Like uv_write(req, stream, bufs, n, cb): encrypt bufs (copied: they may be reused when this
 * returns) and write the ciphertext; cb(req, status) runs once when it is written (or failed).
 * Before the handshake finished the plaintext is held and sent after it. Returns 0 or a libuv
 * error (cb never runs).
 */
int rmq__tls_write(rmq_tls_t *s, uv_write_t *req, const uv_buf_t *bufs, unsigned n, uv_write_cb cb);
/* 1 once the handshake finished. */
int rmq__tls_established(const rmq_tls_t *s);
/* "TLSv1.3 TLS_AES_256_GCM_SHA384" after the handshake, for logs. */
const char *rmq__tls_describe(const rmq_tls_t *s, char *buf, size_t n);

/* The first byte of a TLS handshake record: what TlsModeHandler peeks at. */
#define RMQ_TLS_HANDSHAKE_MAGIC 0x16

#endif
