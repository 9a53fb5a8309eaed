/*
 * devbroker_acl.c -- the development broker's access control (`rmqlua broker --acl FILE`): a
 * plain_acl.yml read with libyaml, and every broker request checked as the 4.9.4 broker's
 * PlainAccessValidator.parse + PlainPermissionManager.validate / checkPerm do it (PROTOCOL.md 8).
 *
 * The file (the 4.9.4 plain_acl.yml keys; others are ignored with a warning):
 *   globalWhiteRemoteAddresses: [ "10.10.*.*", ... ]   # these addresses skip every check
 *   accounts:
 *     - accessKey: RocketMQ          # longer than 6 characters, like secretKey
 *       secretKey: 12345678
 *       whiteRemoteAddress: 192.168.0.*   # this account skips the checks from these addresses
 *       admin: false
 *       defaultTopicPerm: DENY       # PUB, SUB, PUB|SUB, SUB|PUB or DENY (anything else: DENY)
 *       defaultGroupPerm: SUB
 *       topicPerms: [ "topicA=DENY", "topicB=PUB|SUB" ]
 *       groupPerms: [ "groupA=SUB" ]
 * Address patterns (RemoteAddressStrategyFactory): "*" (or *.*.*.*) matches every address; an
 * IPv4 pattern matches segment by segment, each segment a number, "*", a range "a-b" or a set
 * "{a,b}"; "a,b,c" lists addresses; anything else must equal the address.
 *
 * A refused request is answered as the 4.9.4 broker answers an exception thrown by its RPC
 * hook: SYSTEM_ERROR with "org.apache.rocketmq.acl.common.AclException: <message>, <frame>"
 * (NettyRemotingAbstract.processRequestCommand; the frame has no line number). Oneway requests
 * get no answer and are not served. The name server checks nothing (as in 4.9.4).
 *
 * Ownership: the ACL table is built before the broker thread starts and read-only afterwards.
 * Threads: rmq__db_acl_load/free on the starting/stopping thread; rmq__db_acl_check on the
 * broker thread.
 */
#include "protocol/acl.h"
#include "devbroker_int.h"
#include "protocol/mq.h" /* rmq__java_strcmp */

#include <errno.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <yaml.h>

/* Permission (rocketmq-acl): bits. */
#define PERM_DENY 1
#define PERM_ANY 2
#define PERM_PUB 4
#define PERM_SUB 8

#define ACL_EXCEPTION "org.apache.rocketmq.acl.common.AclException: "
#define KEY_MIN_LENGTH 6 /* AclConstants.ACCESS_KEY_MIN_LENGTH / SECRET_KEY_MIN_LENGTH */

typedef struct acl_perm {
    char *resource; /* a topic, or "%RETRY%<group>" for a group */
    uint8_t perm;
} acl_perm_t;

typedef struct acl_account {
    char *access_key, *secret_key, *white;
    int admin;
    uint8_t default_topic, default_group;
    acl_perm_t *perms;
    int n_perms;
} acl_account_t;

struct db_acl {
    char **white; /* globalWhiteRemoteAddresses */
    int n_white;
    acl_account_t *acc;
    int n_acc;
};

/* ---- loading ----------------------------------------------------------------------------------- */

/* Permission.parsePermFromString. */
static uint8_t parse_perm(const char *s)
{
    if (!s) return PERM_DENY;
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n == 3 && !strncmp(s, "PUB", 3)) return PERM_PUB;
    if (n == 3 && !strncmp(s, "SUB", 3)) return PERM_SUB;
    if (n == 7 && (!strncmp(s, "PUB|SUB", 7) || !strncmp(s, "SUB|PUB", 7)))
        return PERM_PUB | PERM_SUB;
    return PERM_DENY;
}

/* A scalar's text, NULL for a YAML null ("", "~", "null"), or NULL when not a scalar. */
static const char *scalar(yaml_node_t *n)
{
    if (!n || n->type != YAML_SCALAR_NODE) return NULL;
    const char *v = (const char *)n->data.scalar.value;
    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
        (!*v || !strcmp(v, "~") || !strcasecmp(v, "null")))
        return NULL;
    return v;
}

static char *trimmed(const char *s, size_t n)
{
    while (n && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    return rmq__xstrndup(s, n);
}

/* topicPerms / groupPerms (Permission.parseResourcePerms): "name=PERM" items. */
static int load_perms(const char *path, acl_account_t *a, yaml_document_t *doc, yaml_node_t *seq,
                      int is_topic, char *errstr, size_t n)
{
    if (!seq) return 0;
    if (seq->type != YAML_SEQUENCE_NODE) {
        rmq__seterr(errstr, n, "%s: account %s: %s must be a list of \"name=PERM\"", path,
                    a->access_key, is_topic ? "topicPerms" : "groupPerms");
        return -1;
    }
    for (yaml_node_item_t *it = seq->data.sequence.items.start;
         it < seq->data.sequence.items.top; it++) {
        const char *v = scalar(yaml_document_get_node(doc, *it));
        const char *eq = v ? strchr(v, '=') : NULL;
        if (!eq || eq == v || !eq[1] || strchr(eq + 1, '=')) {
            /* AclException "Parse resource permission failed for topic:..." */
            rmq__seterr(errstr, n, "%s: account %s: Parse resource permission failed for %s:%s "
                        "(want name=PERM)", path, a->access_key, is_topic ? "topic" : "group",
                        v ? v : "(not a string)");
            return -1;
        }
        char *name = trimmed(v, (size_t)(eq - v));
        a->perms = realloc(a->perms, sizeof(*a->perms) * (size_t)(a->n_perms + 1));
        if (!a->perms) abort();
        acl_perm_t *p = &a->perms[a->n_perms++];
        if (is_topic) {
            p->resource = name;
        } else {
            rmq_buf_t b;
            rmq__buf_init(&b);
            rmq__buf_appendf(&b, "%%RETRY%%%s", name);
            free(name);
            p->resource = b.data;
        }
        p->perm = parse_perm(eq + 1);
    }
    return 0;
}

static int load_account(const char *path, db_acl_t *acl, yaml_document_t *doc, yaml_node_t *m,
                        int idx, char *errstr, size_t n)
{
    if (m->type != YAML_MAPPING_NODE) {
        rmq__seterr(errstr, n, "%s: accounts[%d] is not a mapping", path, idx);
        return -1;
    }
    acl->acc = realloc(acl->acc, sizeof(*acl->acc) * (size_t)(acl->n_acc + 1));
    if (!acl->acc) abort();
    acl_account_t *a = &acl->acc[acl->n_acc++];
    memset(a, 0, sizeof(*a));
    a->default_topic = a->default_group = PERM_DENY;
    yaml_node_t *topics = NULL, *groups = NULL;
    for (yaml_node_pair_t *pr = m->data.mapping.pairs.start; pr < m->data.mapping.pairs.top;
         pr++) {
        const char *k = scalar(yaml_document_get_node(doc, pr->key));
        yaml_node_t *vn = yaml_document_get_node(doc, pr->value);
        const char *v = scalar(vn);
        if (!k) continue;
        if (!strcmp(k, "accessKey")) {
            free(a->access_key);
            a->access_key = v ? rmq__xstrdup(v) : NULL;
        } else if (!strcmp(k, "secretKey")) {
            free(a->secret_key);
            a->secret_key = v ? rmq__xstrdup(v) : NULL;
        } else if (!strcmp(k, "whiteRemoteAddress")) {
            free(a->white);
            a->white = v ? rmq__xstrdup(v) : NULL;
        } else if (!strcmp(k, "admin")) {
            a->admin = v && (!strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
                             !strcasecmp(v, "on"));
        } else if (!strcmp(k, "defaultTopicPerm")) {
            a->default_topic = parse_perm(v);
        } else if (!strcmp(k, "defaultGroupPerm")) {
            a->default_group = parse_perm(v);
        } else if (!strcmp(k, "topicPerms")) {
            topics = vn;
        } else if (!strcmp(k, "groupPerms")) {
            groups = vn;
        } else {
            rmq_log_warn(DB_LOG, "%s: accounts[%d]: unknown key \"%s\" ignored", path, idx, k);
        }
    }
    /* PlainPermissionManager.checkPlainAccessConfig */
    if (!a->access_key || !a->secret_key || strlen(a->access_key) <= KEY_MIN_LENGTH ||
        strlen(a->secret_key) <= KEY_MIN_LENGTH) {
        rmq__seterr(errstr, n, "%s: accounts[%d]: The accessKey=%s and secretKey=%s cannot be "
                    "null and length should longer than 6", path, idx,
                    a->access_key ? a->access_key : "null", a->secret_key ? "***" : "null");
        return -1;
    }
    for (int i = 0; i < acl->n_acc - 1; i++)
        if (!strcmp(acl->acc[i].access_key, a->access_key))
            rmq_log_warn(DB_LOG, "%s: accessKey %s defined twice: the first one counts", path,
                         a->access_key);
    if (load_perms(path, a, doc, groups, 0, errstr, n) ||
        load_perms(path, a, doc, topics, 1, errstr, n))
        return -1;
    return 0;
}

int rmq__db_acl_load(const char *path, db_acl_t **out, char *errstr, size_t n)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        rmq__seterr(errstr, n, "--acl %s: %s", path, strerror(errno));
        return RMQ_ERR_CONFIG;
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_file(&parser, f);
    int ok = yaml_parser_load(&parser, &doc);
    if (!ok) {
        rmq__seterr(errstr, n, "--acl %s:%zu:%zu: %s", path, parser.problem_mark.line + 1,
                    parser.problem_mark.column + 1,
                    parser.problem ? parser.problem : "YAML error");
        yaml_parser_delete(&parser);
        fclose(f);
        return RMQ_ERR_CONFIG;
    }
    yaml_parser_delete(&parser);
    fclose(f);
    db_acl_t *acl = rmq__xcalloc(1, sizeof(*acl));
    int rc = 0;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && root->type != YAML_MAPPING_NODE) {
        rmq__seterr(errstr, n, "--acl %s: the document is not a mapping (want accounts: and "
                    "globalWhiteRemoteAddresses:)", path);
        rc = RMQ_ERR_CONFIG;
    }
    for (yaml_node_pair_t *pr = root && !rc ? root->data.mapping.pairs.start : NULL;
         pr && pr < root->data.mapping.pairs.top && !rc; pr++) {
        const char *k = scalar(yaml_document_get_node(&doc, pr->key));
        yaml_node_t *v = yaml_document_get_node(&doc, pr->value);
        if (!k) continue;
        int is_acc = !strcmp(k, "accounts");
        if (!is_acc && strcmp(k, "globalWhiteRemoteAddresses")) {
            if (strcmp(k, "dataVersion"))
                rmq_log_warn(DB_LOG, "--acl %s: unknown key \"%s\" ignored", path, k);
            continue;
        }
        if (scalar(v) == NULL && v && v->type == YAML_SCALAR_NODE) continue; /* null */
        if (!v || v->type != YAML_SEQUENCE_NODE) {
            rmq__seterr(errstr, n, "--acl %s: %s must be a list", path, k);
            rc = RMQ_ERR_CONFIG;
            break;
        }
        int i = 0;
        for (yaml_node_item_t *it = v->data.sequence.items.start;
             it < v->data.sequence.items.top && !rc; it++, i++) {
            yaml_node_t *item = yaml_document_get_node(&doc, *it);
            if (is_acc) {
                char e[512];
                if (load_account(path, acl, &doc, item, i, e, sizeof e)) {
                    rmq__seterr(errstr, n, "--acl %s", e);
                    rc = RMQ_ERR_CONFIG;
                }
            } else {
                const char *w = scalar(item);
                if (!w) continue;
                acl->white = realloc(acl->white, sizeof(char *) * (size_t)(acl->n_white + 1));
                if (!acl->white) abort();
                acl->white[acl->n_white++] = rmq__xstrdup(w);
            }
        }
    }
    yaml_document_delete(&doc);
    if (rc) {
        rmq__db_acl_free(acl);
        return rc;
    }
    rmq_log_info(DB_LOG, "ACL from %s: %d account(s), %d global white address pattern(s)", path,
                 acl->n_acc, acl->n_white);
    *out = acl;
    return 0;
}

void rmq__db_acl_free(db_acl_t *acl)
{
    if (!acl) return;
    for (int i = 0; i < acl->n_white; i++)
        free(acl->white[i]);
    free(acl->white);
    for (int i = 0; i < acl->n_acc; i++) {
        acl_account_t *a = &acl->acc[i];
        free(a->access_key);
        free(a->secret_key);
        free(a->white);
        for (int k = 0; k < a->n_perms; k++)
            free(a->perms[k].resource);
        free(a->perms);
    }
    free(acl->acc);
    free(acl);
}

/* ---- address patterns (RemoteAddressStrategyFactory) ----------------------------------------- */

/* One IPv4 segment pattern against one number. */
static int seg_match(const char *p, size_t n, long v)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, p, n);
    buf[n] = '\0';
    if (!strcmp(buf, "*")) return 1;
    if (buf[0] == '{' && buf[n - 1] == '}') {
        buf[n - 1] = '\0';
        for (char *s = strtok(buf + 1, ","); s; s = strtok(NULL, ","))
            if (strtol(s, NULL, 10) == v) return 1;
        return 0;
    }
    char *dash = strchr(buf, '-'), *end;
    if (dash) {
        *dash = '\0';
        long lo = strtol(buf, &end, 10), hi = strtol(dash + 1, NULL, 10);
        return v >= lo && v <= hi;
    }
    long x = strtol(buf, &end, 10);
    return *end == '\0' && x == v;
}

static int ipv4_match(const char *pat, const char *ip)
{
    long parts[4];
    if (sscanf(ip, "%ld.%ld.%ld.%ld", &parts[0], &parts[1], &parts[2], &parts[3]) != 4) return 0;
    const char *p = pat;
    for (int i = 0; i < 4; i++) {
        const char *e = p;
        int depth = 0;
        while (*e && (depth || *e != '.')) {
            if (*e == '{') depth++;
            if (*e == '}') depth--;
            e++;
        }
        if (!seg_match(p, (size_t)(e - p), parts[i])) return 0;
        if (i < 3 && *e != '.') return 0;
        p = e + (*e == '.');
    }
    return *p == '\0';
}

/* Does pattern allow address ip (no port)? NULL / blank never matches. */
static int addr_match(const char *pat, const char *ip)
{
    if (!pat) return 0;
    while (*pat == ' ')
        pat++;
    if (!*pat) return 0;
    if (!strcmp(pat, "*") || !strcmp(pat, "*.*.*.*") || !strcmp(pat, "*:*:*:*:*:*:*:*")) return 1;
    if (strchr(pat, ',') && !strchr(pat, '{')) {
        char *copy = rmq__xstrdup(pat), *save = NULL;
        int m = 0;
        for (char *s = strtok_r(copy, ",", &save); s && !m; s = strtok_r(NULL, ",", &save))
            m = addr_match(s, ip);
        free(copy);
        return m;
    }
    if (!strcmp(pat, ip)) return 1;
    return strchr(pat, ':') ? 0 : ipv4_match(pat, ip);
}

/* ---- checking ---------------------------------------------------------------------------------- */

typedef struct need {
    const char *resource; /* borrowed (request strings) or owned (retry topics, in own[]) */
    uint8_t perm;
} need_t;

typedef struct needs {
    need_t v[64];
    int n;
    char *own[64];
    int n_own;
} needs_t;

/* PlainAccessResource.addResourceAndPerm: a map, the last perm for a resource wins. */
static void add_need(needs_t *ns, const char *resource, uint8_t perm)
{
    if (!resource) return;
    for (int i = 0; i < ns->n; i++)
        if (!strcmp(ns->v[i].resource, resource)) {
            ns->v[i].perm = perm;
            return;
        }
    if (ns->n < (int)RMQ_ARRAY_SIZE(ns->v)) {
        ns->v[ns->n].resource = resource;
        ns->v[ns->n++].perm = perm;
    }
}

static void add_retry_need(needs_t *ns, const char *group, uint8_t perm)
{
    if (!group || ns->n_own >= (int)RMQ_ARRAY_SIZE(ns->own)) return;
    rmq_buf_t b;
    rmq__buf_init(&b);
    rmq__buf_appendf(&b, "%%RETRY%%%s", group);
    ns->own[ns->n_own++] = b.data;
    add_need(ns, b.data, perm);
}

static void needs_free(needs_t *ns)
{
    for (int i = 0; i < ns->n_own; i++)
        free(ns->own[i]);
}

/* PlainAccessValidator.parse: the resources each request code needs. Returns 0, or -1 with the
 * AclException message (a body that does not parse). */
static int parse_needs(const rmq_cmd_t *req, needs_t *ns, char *msg, size_t n)
{
    switch (req->code) {
    case RMQ_REQ_SEND_MESSAGE:
        add_need(ns, rmq__cmd_ext(req, "topic"), PERM_PUB);
        break;
    case RMQ_REQ_SEND_MESSAGE_V2:
        add_need(ns, rmq__cmd_ext(req, "b"), PERM_PUB);
        break;
    case RMQ_REQ_CONSUMER_SEND_MSG_BACK:
        add_need(ns, rmq__cmd_ext(req, "originTopic"), PERM_PUB);
        add_retry_need(ns, rmq__cmd_ext(req, "group"), PERM_SUB);
        break;
    case RMQ_REQ_PULL_MESSAGE:
        add_need(ns, rmq__cmd_ext(req, "topic"), PERM_SUB);
        add_retry_need(ns, rmq__cmd_ext(req, "consumerGroup"), PERM_SUB);
        break;
    case RMQ_REQ_QUERY_MESSAGE:
        add_need(ns, rmq__cmd_ext(req, "topic"), PERM_SUB);
        break;
    case RMQ_REQ_HEART_BEAT: {
        json_error_t je;
        json_t *hb = json_loadb(req->body ? req->body : "", req->body_len, 0, &je);
        if (!hb) {
            snprintf(msg, n, "HEART_BEAT body: %s", je.text);
            return -1;
        }
        size_t i, k;
        json_t *cd, *sd;
        json_array_foreach(json_object_get(hb, "consumerDataSet"), i, cd)
        {
            const char *g = json_string_value(json_object_get(cd, "groupName"));
            add_retry_need(ns, g, PERM_SUB);
            json_array_foreach(json_object_get(cd, "subscriptionDataSet"), k, sd)
            {
                const char *t = json_string_value(json_object_get(sd, "topic"));
                if (t && ns->n_own < (int)RMQ_ARRAY_SIZE(ns->own)) {
                    ns->own[ns->n_own] = rmq__xstrdup(t); /* outlives the JSON */
                    add_need(ns, ns->own[ns->n_own++], PERM_SUB);
                }
            }
        }
        json_decref(hb);
        break;
    }
    case RMQ_REQ_UNREGISTER_CLIENT:
    case RMQ_REQ_GET_CONSUMER_LIST_BY_GROUP:
        add_retry_need(ns, rmq__cmd_ext(req, "consumerGroup"), PERM_SUB);
        break;
    case RMQ_REQ_UPDATE_CONSUMER_OFFSET:
        add_retry_need(ns, rmq__cmd_ext(req, "consumerGroup"), PERM_SUB);
        add_need(ns, rmq__cmd_ext(req, "topic"), PERM_SUB);
        break;
    default:
        break;
    }
    return 0;
}

static int kv_cmp(const void *a, const void *b)
{
    const rmq_kv_t *x = *(const rmq_kv_t *const *)a, *y = *(const rmq_kv_t *const *)b;
    return rmq__java_strcmp(x->key, y->key);
}

/* The broker's signed content: every extField but Signature, sorted by key, values only, then
 * the body (PlainAccessValidator.parse, AclUtils.combineRequestContent). _UNIQUE_KEY_QUERY
 * (QUERY_MESSAGE) is left out for clients up to 4.9.3, which did not sign it; a 4.9.4 client
 * signs it (mqadmin queryMsgByKey in the 09_mqadmin_session capture), and PlainAccessValidator
 * after 4.9.4 takes it in from V4_9_4 on (request.getVersion() <= V4_9_3.ordinal()). */
#define VERSION_V4_9_3 399 /* MQVersion.Version.V4_9_3.ordinal() */
static void content_of(const rmq_cmd_t *req, rmq_buf_t *out)
{
    const rmq_kv_t **v = rmq__xmalloc(sizeof(*v) * (size_t)(req->n_ext + 1));
    int n = 0;
    for (int i = 0; i < req->n_ext; i++) {
        if (!strcmp(req->ext[i].key, "Signature")) continue;
        if (req->version <= VERSION_V4_9_3 && !strcmp(req->ext[i].key, "_UNIQUE_KEY_QUERY"))
            continue;
        v[n++] = &req->ext[i];
    }
    qsort(v, (size_t)n, sizeof(*v), kv_cmp);
    for (int i = 0; i < n; i++)
        if (v[i]->val) rmq__buf_append(out, v[i]->val, strlen(v[i]->val));
    if (req->body && req->body_len) rmq__buf_append(out, req->body, req->body_len);
    free(v);
}

/* Permission.checkPermission */
static int perm_ok(uint8_t needed, uint8_t owned)
{
    if (owned & PERM_DENY) return 0;
    if (needed & PERM_ANY) return (owned & (PERM_PUB | PERM_SUB)) != 0;
    return (needed & owned) != 0;
}

static int is_admin_code(int32_t code)
{
    /* Permission.ADMIN_CODE */
    return code == RMQ_REQ_UPDATE_AND_CREATE_TOPIC || code == 25 /* UPDATE_BROKER_CONFIG */ ||
           code == RMQ_REQ_DELETE_TOPIC_IN_BROKER ||
           code == RMQ_REQ_UPDATE_AND_CREATE_SUBSCRIPTIONGROUP ||
           code == RMQ_REQ_DELETE_SUBSCRIPTIONGROUP;
}

/* PlainPermissionManager.checkPerm. Returns 0, or -1 with the message. */
static int check_perm(const acl_account_t *a, int32_t code, const needs_t *ns, char *msg,
                      size_t n)
{
    if (is_admin_code(code) && !a->admin) {
        snprintf(msg, n, "Need admin permission for request code=%d, but accessKey=%s is not",
                 code, a->access_key);
        return -1;
    }
    if (ns->n == 0) return 0;
    if (a->n_perms == 0 && a->admin) return 0; /* an admin without resource perms */
    for (int i = 0; i < ns->n; i++) {
        const char *res = ns->v[i].resource;
        int is_group = !strncmp(res, "%RETRY%", 7);
        int found = -1;
        for (int k = 0; k < a->n_perms && found < 0; k++)
            if (!strcmp(a->perms[k].resource, res)) found = k;
        uint8_t owned = found >= 0     ? a->perms[found].perm
                        : is_group     ? a->default_group
                                       : a->default_topic;
        if (!perm_ok(ns->v[i].perm, owned)) {
            /* PlainAccessResource.printStr */
            snprintf(msg, n, "No default permission for %s:%s", is_group ? "group" : "topic",
                     is_group ? res + 7 : res);
            return -1;
        }
    }
    return 0;
}

int rmq__db_acl_check(const db_acl_t *acl, rmq_conn_t *conn, const rmq_cmd_t *req)
{
    char ip[80], msg[512];
    const char *where = "PlainPermissionManager.validate(PlainPermissionManager.java)";
    needs_t ns;
    memset(&ns, 0, sizeof ns);
    /* The remote address without its port (and without IPv6 brackets). */
    const char *peer = rmq__conn_peer(conn);
    const char *colon = strrchr(peer, ':');
    size_t len = colon ? (size_t)(colon - peer) : strlen(peer);
    if (len >= 2 && peer[0] == '[' && peer[len - 1] == ']') peer++, len -= 2;
    if (len >= sizeof ip) len = sizeof ip - 1;
    memcpy(ip, peer, len);
    ip[len] = '\0';

    int denied = 1;
    if (parse_needs(req, &ns, msg, sizeof msg)) {
        where = "PlainAccessValidator.parse(PlainAccessValidator.java)";
        goto out;
    }
    for (int i = 0; i < acl->n_white; i++)
        if (addr_match(acl->white[i], ip)) {
            denied = 0;
            goto out;
        }
    const char *ak = rmq__cmd_ext(req, "AccessKey");
    if (!ak) {
        snprintf(msg, sizeof msg, "No accessKey is configured");
        goto out;
    }
    const acl_account_t *a = NULL;
    for (int i = 0; i < acl->n_acc && !a; i++)
        if (!strcmp(acl->acc[i].access_key, ak)) a = &acl->acc[i];
    if (!a) {
        snprintf(msg, sizeof msg, "No acl config for %s", ak);
        goto out;
    }
    if (addr_match(a->white, ip)) {
        denied = 0;
        goto out;
    }
    rmq_buf_t content;
    char sig[64];
    rmq__buf_init(&content);
    content_of(req, &content);
    int ok = rmq__acl_hmac_base64(a->secret_key, content.data ? content.data : "", content.len,
                                  sig, sizeof sig) == 0;
    rmq__buf_free(&content);
    const char *got = rmq__cmd_ext(req, "Signature");
    if (!ok || !got || strlen(got) != strlen(sig) || CRYPTO_memcmp(got, sig, strlen(sig))) {
        snprintf(msg, sizeof msg, "Check signature failed for accessKey=%s", ak);
        goto out;
    }
    /* The trace topic is published to without a permission check. */
    for (int i = 0; i < ns.n; i++)
        if (!strcmp(ns.v[i].resource, "RMQ_SYS_TRACE_TOPIC") && ns.v[i].perm == PERM_PUB) {
            denied = 0;
            goto out;
        }
    if (check_perm(a, req->code, &ns, msg, sizeof msg)) {
        where = "PlainPermissionManager.checkPerm(PlainPermissionManager.java)";
        goto out;
    }
    denied = 0;
out:
    needs_free(&ns);
    if (!denied) return 0;
    const char *name = rmq_request_code_name(req->code);
    rmq_log_warn(DB_LOG, "ACL: %s (code %d) from %s refused: %s", name ? name : "request",
                 req->code, rmq__conn_peer(conn), msg);
    char remark[800];
    snprintf(remark, sizeof remark, ACL_EXCEPTION "%s, org.apache.rocketmq.acl.plain.%s", msg,
             where);
    rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, remark);
    return -1;
}
