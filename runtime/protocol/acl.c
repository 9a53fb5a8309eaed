/*
 * acl.c -- AclClientRPCHook request signing (acl.h).
 *
 * Ownership: no state. Threads: any.
 */
#include "acl.h"

#include "base/codes.h"
#include "mq.h" /* rmq__java_strcmp */

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
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

int rmq__acl_refused(const rmq_cmd_t *resp)
{
    return resp->code != RMQ_RESP_SUCCESS && resp->remark && strstr(resp->remark, "AclException");
}

/* PlainAccessValidator.parse: the resources each request code is checked for. */
const char *rmq__acl_needed_perm(int32_t code, int is_group)
{
    switch (code) {
    case RMQ_REQ_SEND_MESSAGE:
    case RMQ_REQ_SEND_MESSAGE_V2:
        return "PUB"; /* the topic; a %RETRY% topic is the group's */
    case RMQ_REQ_CONSUMER_SEND_MSG_BACK:
        return is_group ? "SUB" : "PUB"; /* originTopic PUB, the group's retry topic SUB */
    case RMQ_REQ_PULL_MESSAGE:
    case RMQ_REQ_QUERY_MESSAGE:
    case RMQ_REQ_HEART_BEAT:
    case RMQ_REQ_UNREGISTER_CLIENT:
    case RMQ_REQ_GET_CONSUMER_LIST_BY_GROUP:
    case RMQ_REQ_UPDATE_CONSUMER_OFFSET:
        return "SUB";
    default:
        return NULL;
    }
}

/* The AclException message alone: without the class name and the stack frame after it. */
static void acl_message(const char *remark, char *out, size_t n)
{
    const char *p = strstr(remark, "AclException");
    if (p) {
        p += strlen("AclException");
        if (*p == ':') p++;
        while (*p == ' ')
            p++;
    } else {
        p = remark;
    }
    size_t len = strlen(p);
    /* exceptionSimpleDesc appends ", <first stack frame>": "Class.method(File.java:12)". */
    const char *comma = NULL;
    for (const char *q = p; (q = strstr(q, ", ")) != NULL; q += 2)
        comma = q;
    if (comma && len && p[len - 1] == ')' && strchr(comma, '(')) len = (size_t)(comma - p);
    if (len >= n) len = n - 1;
    memcpy(out, p, len);
    out[len] = '\0';
}

void rmq__acl_explain(char *out, size_t n, const char *addr, int32_t code, const char *ak,
                      const char *remark)
{
    char msg[512], what[640];
    const char *name = rmq_request_code_name(code);
    char cname[32];
    if (!name) {
        snprintf(cname, sizeof cname, "request %d", code);
        name = cname;
    }
    acl_message(remark ? remark : "", msg, sizeof msg);
    const char *res;
    if (!ak || !*ak) {
        snprintf(what, sizeof what, "the broker requires ACL: set access_key and secret_key");
    } else if (!strncmp(msg, "No acl config for ", 18)) {
        snprintf(what, sizeof what, "access key '%s' is unknown to the broker", ak);
    } else if (!strncmp(msg, "Check signature failed", 22)) {
        snprintf(what, sizeof what,
                 "the signature of access key '%s' does not match: wrong secret_key", ak);
    } else if ((res = strstr(msg, "No default permission for ")) != NULL) {
        res += strlen("No default permission for ");
        int is_group = !strncmp(res, "group:", 6);
        const char *perm = rmq__acl_needed_perm(code, is_group);
        const char *rname = strchr(res, ':') ? strchr(res, ':') + 1 : res;
        snprintf(what, sizeof what, "access key '%s' has no %s permission on %s %s", ak,
                 perm ? perm : "needed", is_group ? "group" : "topic", rname);
    } else if (!strncmp(msg, "Need admin permission", 21)) {
        snprintf(what, sizeof what, "access key '%s' is not an admin account", ak);
    } else {
        snprintf(what, sizeof what, "access key '%s' was refused", ak);
    }
    snprintf(out, n, "ACL: broker %s refused %s: %s (broker: %s)", addr, name, what, msg);
}
