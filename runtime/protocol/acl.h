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
#include "base/common.h"

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
 * A broker's ACL refusal: the response's remark carries the AclException text. A 4.9.4 broker
 * answers SYSTEM_ERROR with "org.apache.rocketmq.acl.common.AclException: <message>, <stack
 * frame>" (NettyRemotingAbstract, PROTOCOL.md 1.9 and 8); NO_PERMISSION with that text counts
 * too. Other NO_PERMISSION answers (a topic or broker not readable) are not ACL refusals.
 */
int rmq__acl_refused(const rmq_cmd_t *resp);

/*
 * The permission a request of this code needs on a topic (is_group 0) or on a group's retry
 * topic (is_group 1), as PlainAccessValidator.parse asks for it: "PUB", "SUB", or NULL when
 * the broker checks no resource for this code.
 */
const char *rmq__acl_needed_perm(int32_t req_code, int is_group);

/*
 * A sentence a user understands for an ACL refusal of a request (code req_code) sent to addr:
 * it names the access key, the resource and the permission when the broker's message says
 * which, then quotes the broker ("ACL: broker 127.0.0.1:10911 refused HEART_BEAT: access key
 * 'app1' has no SUB permission on topic TopicA (broker: No default permission for
 * topic:TopicA)"). access_key NULL = none configured.
 */
void rmq__acl_explain(char *out, size_t out_size, const char *addr, int32_t req_code,
                      const char *access_key, const char *remark);

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
