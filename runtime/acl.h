/*
 * acl.h -- ACL request signing, as AclClientRPCHook.doBeforeRequest does it (PROTOCOL.md 8).
 *
 * Before a request is sent: extFields gets AccessKey (and SecurityToken when one is configured);
 * the values of all extFields except Signature, sorted by key in Java String order, are
 * concatenated (no keys, no separators) as UTF-8 and followed by the raw body; Signature =
 * Base64(HmacSHA1(secretKey, content)) is added. Responses are never signed.
 *
 * Ownership: nothing kept; the command is modified in place.
 * Threads: pure; callable from any thread (the transport signs on the loop thread).
 */
#ifndef RMQ_ACL_H
#define RMQ_ACL_H

#include "cmd.h"
#include "common.h"

/* Base64 of a 20-byte HMAC-SHA1 is 28 characters. */
#define RMQ_ACL_SIGNATURE_LEN 28

/*
 * The signed content of c: sorted extField values (Signature skipped) then the body. Appends to
 * out; returns RMQ_OK or RMQ_ERR_NOMEM.
 */
int rmq__acl_content(const rmq_cmd_t *c, rmq_buf_t *out);

/* Base64(HmacSHA1(secret_key, data)) into sig (>= RMQ_ACL_SIGNATURE_LEN + 1 bytes). */
int rmq__acl_hmac_base64(const char *secret_key, const void *data, size_t len, char *sig,
                         size_t sig_size);

/*
 * Sign request c: set AccessKey, SecurityToken (when security_token is not NULL) and Signature.
 * Returns RMQ_OK, RMQ_ERR_INVALID when access_key or secret_key is NULL, or RMQ_ERR_NOMEM.
 */
int rmq__acl_sign(rmq_cmd_t *c, const char *access_key, const char *secret_key,
                  const char *security_token);

/*
 * Thin export for FFI specs: sign the header fields keys[i]=vals[i] plus body; writes the signed
 * content (truncated to content_size, its full length in *content_len) and the signature.
 */
RMQ_EXPORT int rmq_acl_sign_fields(const char *const *keys, const char *const *vals, int n,
                                   const char *body, size_t body_len, const char *access_key,
                                   const char *secret_key, const char *security_token,
                                   char *content, size_t content_size, size_t *content_len,
                                   char *sig, size_t sig_size);

#endif
