/*
 * acl.c -- AclClientRPCHook request signing (acl.h).
 *
 * Ownership: no state. Threads: any.
 */
#include "acl.h"

#include "mq.h" /* rmq__java_strcmp */

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>

static int kv_cmp(const void *a, const void *b)
{
    const rmq_kv_t *x = *(const rmq_kv_t *const *)a, *y = *(const rmq_kv_t *const *)b;
    return rmq__java_strcmp(x->key, y->key);
}

int rmq__acl_content(const rmq_cmd_t *c, rmq_buf_t *out)
{
    const rmq_kv_t **sorted;
    int i, rc = 0;
    if (c->n_ext > 0) {
        sorted = rmq__xmalloc(sizeof(*sorted) * (size_t)c->n_ext);
        for (i = 0; i < c->n_ext; i++)
            sorted[i] = &c->ext[i];
        qsort(sorted, (size_t)c->n_ext, sizeof(*sorted), kv_cmp); /* keys are unique */
        for (i = 0; i < c->n_ext && !rc; i++) {
            if (!strcmp(sorted[i]->key, "Signature") || !sorted[i]->val) continue;
            rc = rmq__buf_append(out, sorted[i]->val, strlen(sorted[i]->val));
        }
        free(sorted);
    }
    if (!rc && c->body && c->body_len) rc = rmq__buf_append(out, c->body, c->body_len);
    return rc ? RMQ_ERR_NOMEM : RMQ_OK;
}

int rmq__acl_hmac_base64(const char *secret_key, const void *data, size_t len, char *sig,
                         size_t sig_size)
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    unsigned char b64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
    int n;
    if (!HMAC(EVP_sha1(), secret_key, (int)strlen(secret_key), data, len, mac, &mac_len))
        return RMQ_ERR_INVALID;
    n = EVP_EncodeBlock(b64, mac, (int)mac_len);
    if (n < 0 || (size_t)n + 1 > sig_size) return RMQ_ERR_INVALID;
    memcpy(sig, b64, (size_t)n + 1);
    return RMQ_OK;
}

int rmq__acl_sign(rmq_cmd_t *c, const char *access_key, const char *secret_key,
                  const char *security_token)
{
    rmq_buf_t content;
    char sig[64];
    int rc;
    if (!access_key || !secret_key) return RMQ_ERR_INVALID;
    if (rmq__cmd_set_ext(c, "AccessKey", access_key)) return RMQ_ERR_NOMEM;
    if (security_token && rmq__cmd_set_ext(c, "SecurityToken", security_token))
        return RMQ_ERR_NOMEM;
    rmq__buf_init(&content);
    rc = rmq__acl_content(c, &content);
    if (!rc) rc = rmq__acl_hmac_base64(secret_key, content.data, content.len, sig, sizeof(sig));
    rmq__buf_free(&content);
    if (!rc && rmq__cmd_set_ext(c, "Signature", sig)) rc = RMQ_ERR_NOMEM;
    return rc;
}

int rmq_acl_sign_fields(const char *const *keys, const char *const *vals, int n, const char *body,
                        size_t body_len, const char *access_key, const char *secret_key,
                        const char *security_token, char *content, size_t content_size,
                        size_t *content_len, char *sig, size_t sig_size)
{
    rmq_cmd_t c;
    rmq_buf_t b;
    int i, rc;
    const char *s;
    rmq__cmd_init(&c, 0, RMQ_SERIALIZE_JSON);
    for (i = 0; i < n; i++)
        if (rmq__cmd_set_ext(&c, keys[i], vals[i])) {
            rmq__cmd_free(&c);
            return RMQ_ERR_NOMEM;
        }
    c.body = body;
    c.body_len = body_len;
    rc = rmq__acl_sign(&c, access_key, secret_key, security_token);
    rmq__buf_init(&b);
    if (!rc) rc = rmq__acl_content(&c, &b);
    if (!rc) {
        size_t k = b.len < content_size ? b.len : content_size;
        if (k) memcpy(content, b.data, k);
        if (content_len) *content_len = b.len;
        s = rmq__cmd_ext(&c, "Signature");
        if (!s || strlen(s) + 1 > sig_size)
            rc = RMQ_ERR_INVALID;
        else
            memcpy(sig, s, strlen(s) + 1);
    }
    rmq__buf_free(&b);
    c.body = NULL;
    c.body_len = 0;
    rmq__cmd_free(&c);
    return rc;
}
