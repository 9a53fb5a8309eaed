/*
 * cossl.h -- TLS on cosockets (sock:sslhandshake, lua/rmq/socket.lua): one OpenSSL session per
 * socket over a pair of memory BIOs. coloop.c feeds it the ciphertext its reads bring and writes
 * out the ciphertext it produces, so a handshake or a read that waits yields like any other
 * cosocket operation; nothing here touches a socket, the loop or Lua.
 *
 * Trust: one client SSL_CTX per thread, made at the first handshake from the thread's
 * rmq_coloop_conf_t (lua_ssl_trusted_certificate, or the system's CA store; lua_ssl_verify_depth)
 * and made again when those settings change.
 *
 * Ownership: a session is owned by its socket (rmq__cossl_free when the socket's memory goes);
 * the thread's context by the thread (rmq__cossl_free_self). SSL_SESSION objects handed to Lua
 * (rmq_cosock_ssl_session) are Lua's, freed by rmq_cosock_ssl_session_free.
 * Threads: everything on the thread that owns the socket.
 */
#ifndef RMQ_COSSL_H
#define RMQ_COSSL_H

#include "base/common.h"
#include "coloop.h"

typedef struct rmq_cossl rmq_cossl_t;

/*
 * A client session for a handshake with server_name (SNI unless it is an IP address or empty;
 * with verify, the certificate must name it), resuming session (an SSL_SESSION *, or NULL) when
 * the server agrees. Returns it, or NULL with *err (a static string or errbuf) when the thread's
 * trust settings cannot be loaded.
 */
rmq_cossl_t *rmq__cossl_new(const rmq_coloop_conf_t *cf, const char *server_name, int verify,
                            void *session, char *errbuf, size_t errbuf_size, const char **err);
void rmq__cossl_free(rmq_cossl_t *t); /* NULL is fine */
/* n bytes of ciphertext read from the peer. */
void rmq__cossl_feed(rmq_cossl_t *t, const char *p, size_t n);
/* One step of the handshake: 1 done (verified when asked), 0 it needs more from the peer, -1
 * failed with *err (OpenResty's strings: "handshake failed", "<code>: <reason>" for a chain that
 * does not verify, "certificate host mismatch"). */
int rmq__cossl_handshake(rmq_cossl_t *t, char *errbuf, size_t errbuf_size, const char **err);
/* Decrypt what was fed into buf (cap bytes): > 0 bytes decrypted, 0 it needs more from the
 * peer, -1 the peer closed the TLS session (close_notify), -2 a TLS error. */
int rmq__cossl_read(rmq_cossl_t *t, char *buf, size_t cap);
/* Encrypt n plaintext bytes (the ciphertext waits for rmq__cossl_take). 0, or -1. */
int rmq__cossl_write(rmq_cossl_t *t, const char *p, size_t n);
/* The ciphertext waiting to go to the peer: a malloc'd buffer (the caller's) and its length, or
 * NULL and 0 when there is none. */
char *rmq__cossl_take(rmq_cossl_t *t, size_t *len);
/* The session to resume next time (an SSL_SESSION *, one reference: the caller's), or NULL. */
void *rmq__cossl_session(rmq_cossl_t *t);
/* Free this thread's context (at the thread's end). */
void rmq__cossl_free_self(void);

#endif
