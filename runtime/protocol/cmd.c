/*
 * cmd.c -- RemotingCommand codec (JSON and ROCKETMQ binary headers) and the incremental framer.
 *
 * PROTOCOL.md section 1. What Java 4.9.4 writes, and therefore what the encoder reproduces:
 *   - JSON headers are fastjson's output: keys in alphabetical order, no spaces, null fields left
 *     out, enums by name, strings escaped as fastjson escapes them.
 *   - extFields is a java.util.HashMap, so its entries travel in HashMap iteration order. The
 *     encoder emulates that order (cmd_hashmap.c) from the command's insertion order.
 *   - NettyEncoder writes the fields of a FastCodesHeader (PULL request/response, SEND V2
 *     request, SEND response) first, in a fixed order, then the extFields map (fast_order).
 * The decoder accepts any key order, unknown keys, nulls, escapes and whitespace, checks every
 * length against the bytes that are really there, and never trusts a length field.
 *
 * Ownership: see cmd.h. A decoded command keeps all its strings in one block (c->strings), so a
 * decode costs two allocations (strings, ext array) whatever the number of fields.
 * Threads: any; a command or a framer is used by one thread at a time.
 */
#include "cmd.h"
#include "cmd_int.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "base/codes.h"
#include "base/json_esc.h"

#define JSON_MAX_DEPTH 64
#define FRAMER_DIRECT_MIN 4096 /* read straight into a frame when this much of it is missing */

/* ---- construction and fields ---------------------------------------------------------- */

int rmq__cmd_fast_kind(int32_t request_code, int is_response)
{
    switch (request_code) {
    case RMQ_REQ_PULL_MESSAGE:
        return is_response ? RMQ_FAST_PULL_RESP : RMQ_FAST_PULL_REQ;
    case RMQ_REQ_SEND_MESSAGE_V2:
    case RMQ_REQ_SEND_BATCH_MESSAGE:
    case RMQ_REQ_SEND_REPLY_MESSAGE_V2:
        return is_response ? RMQ_FAST_SEND_RESP : RMQ_FAST_SEND_REQ;
    case RMQ_REQ_SEND_MESSAGE:
    case RMQ_REQ_SEND_REPLY_MESSAGE:
        return is_response ? RMQ_FAST_SEND_RESP : RMQ_FAST_NONE;
    default:
        return RMQ_FAST_NONE;
    }
}

void rmq__cmd_init(rmq_cmd_t *c, int32_t code, int serialize)
{
    memset(c, 0, sizeof(*c));
    c->code = code;
    c->language = RMQ_LANG_JAVA;
    c->version = RMQ_VERSION_V4_9_4;
    c->serialize = serialize;
    c->fast = (uint8_t)rmq__cmd_fast_kind(code, 0);
}

void rmq__cmd_init_response(rmq_cmd_t *c, const rmq_cmd_t *req, int32_t code, const char *remark)
{
    memset(c, 0, sizeof(*c));
    c->code = code;
    c->language = RMQ_LANG_JAVA;
    c->version = RMQ_VERSION_V4_9_4;
    c->opaque = req->opaque;
    c->flag = RMQ_FLAG_RESPONSE;
    c->serialize = req->serialize;
    c->fast = (uint8_t)rmq__cmd_fast_kind(req->code, 1);
    if (remark) c->remark = rmq__xstrdup(remark);
}

/* True when p lies in the decoded-strings block (freed as a whole, not per string). */
static int in_strings(const rmq_cmd_t *c, const char *p)
{
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)c->strings;
    return c->strings && a >= b && a < b + c->strings_len;
}

static void free_str(rmq_cmd_t *c, char *p)
{
    if (p && !in_strings(c, p)) free(p);
}

void rmq__cmd_free(rmq_cmd_t *c)
{
    int i;
    free_str(c, c->remark);
    for (i = 0; i < c->n_ext; i++) {
        free_str(c, c->ext[i].key);
        free_str(c, c->ext[i].val);
    }
    free(c->ext);
    free(c->strings);
    rmq__rbuf_release(c->frame);
    memset(c, 0, sizeof(*c));
}

static int find_ext(const rmq_cmd_t *c, const char *key)
{
    int i;
    for (i = 0; i < c->n_ext; i++)
        if (c->ext[i].key[0] == key[0] && !strcmp(c->ext[i].key, key)) return i;
    return -1;
}

static int grow_ext(rmq_cmd_t *c)
{
    int ncap;
    rmq_kv_t *n;
    if (c->n_ext < c->cap_ext) return 0;
    ncap = c->cap_ext ? c->cap_ext * 2 : 16; /* SEND_MESSAGE_V2 headers carry 13 */
    n = realloc(c->ext, (size_t)ncap * sizeof(*n));
    if (!n) return RMQ_ERR_NOMEM;
    c->ext = n;
    c->cap_ext = ncap;
    return 0;
}

/* Remove entry i keeping the order of the others (Java HashMap.remove keeps iteration order). */
static void remove_ext(rmq_cmd_t *c, int i)
{
    free_str(c, c->ext[i].key);
    free_str(c, c->ext[i].val);
    memmove(&c->ext[i], &c->ext[i + 1], (size_t)(c->n_ext - i - 1) * sizeof(c->ext[0]));
    c->n_ext--;
}

/* val NULL removes the key (Java map.put(k, null) makes the field absent to every reader). */
int rmq__cmd_set_ext(rmq_cmd_t *c, const char *key, const char *val)
{
    int i = find_ext(c, key);
    char *k, *v;
    if (!val) {
        if (i >= 0) remove_ext(c, i);
        return 0;
    }
    if (!(v = strdup(val))) return RMQ_ERR_NOMEM;
    if (i >= 0) {
        free_str(c, c->ext[i].val);
        c->ext[i].val = v;
        return 0;
    }
    if (grow_ext(c) || !(k = strdup(key))) {
        free(v);
        return RMQ_ERR_NOMEM;
    }
    c->ext[c->n_ext].key = k;
    c->ext[c->n_ext].val = v;
    c->n_ext++;
    return 0;
}

/* v in decimal (as "%lld") at dst, NUL-terminated; returns the length (dst: 21 bytes or more). */
static size_t fmt_i64(char *dst, int64_t v)
{
    char tmp[24];
    size_t n = 0, len = 0;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) dst[len++] = '-';
    while (n)
        dst[len++] = tmp[--n];
    dst[len] = '\0';
    return len;
}

int rmq__cmd_set_ext_i64(rmq_cmd_t *c, const char *key, int64_t v)
{
    char tmp[24];
    fmt_i64(tmp, v);
    return rmq__cmd_set_ext(c, key, tmp);
}

int rmq__cmd_set_ext_bool(rmq_cmd_t *c, const char *key, int v)
{
    return rmq__cmd_set_ext(c, key, v ? "true" : "false");
}

int rmq__cmd_set_remark(rmq_cmd_t *c, const char *remark)
{
    char *r = NULL;
    if (remark && !(r = strdup(remark))) return RMQ_ERR_NOMEM;
    free_str(c, c->remark);
    c->remark = r;
    return 0;
}

const char *rmq__cmd_ext(const rmq_cmd_t *c, const char *key)
{
    int i = find_ext(c, key);
    return i >= 0 ? c->ext[i].val : NULL;
}

/* Long.parseLong: optional sign, then ASCII digits only, range-checked. */
static int parse_java_long(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    int neg = 0;
    uint64_t acc = 0, lim;
    if (*s == '-' || *s == '+') neg = *s++ == '-';
    if (!*s) return RMQ_ERR_INVALID;
    lim = neg ? (uint64_t)(-(lo + 1)) + 1 : (uint64_t)hi;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return RMQ_ERR_INVALID;
        if (acc > (lim - (uint64_t)(*s - '0')) / 10) return RMQ_ERR_INVALID;
        acc = acc * 10 + (uint64_t)(*s - '0');
    }
    *out = neg ? (int64_t)(0 - acc) : (int64_t)acc;
    return 0;
}

int rmq__cmd_ext_i64(const rmq_cmd_t *c, const char *key, int64_t *out)
{
    const char *v = rmq__cmd_ext(c, key);
    if (!v) return RMQ_ERR_NOT_FOUND;
    return parse_java_long(v, INT64_MIN, INT64_MAX, out);
}

int rmq__cmd_ext_i32(const rmq_cmd_t *c, const char *key, int32_t *out)
{
    int64_t v;
    const char *s = rmq__cmd_ext(c, key);
    int rc;
    if (!s) return RMQ_ERR_NOT_FOUND;
    if ((rc = parse_java_long(s, INT32_MIN, INT32_MAX, &v))) return rc;
    *out = (int32_t)v;
    return 0;
}

int rmq__cmd_ext_bool(const rmq_cmd_t *c, const char *key)
{
    const char *v = rmq__cmd_ext(c, key);
    return v && !strcasecmp(v, "true");
}

/* ---- FastCodesHeader field orders (4.9.4 encode(ByteBuf) methods) ---------------------- */

static const char *const fast_pull_req[] = {
    "consumerGroup", "topic",      "queueId",        "queueOffset",
    "maxMsgNums",    "sysFlag",    "commitOffset",   "suspendTimeoutMillis",
    "subscription",  "subVersion", "expressionType", NULL};
static const char *const fast_send_req[] = {"a", "b", "c", "d", "e", "f", "g",
                                            "h", "i", "j", "k", "l", "m", NULL};
static const char *const fast_pull_resp[] = {"suggestWhichBrokerId", "nextBeginOffset", "minOffset",
                                             "maxOffset", NULL};
static const char *const fast_send_resp[] = {"msgId", "queueId", "queueOffset", "transactionId",
                                             NULL};

static const char *const *fast_fields(int kind)
{
    switch (kind) {
    case RMQ_FAST_PULL_REQ:
        return fast_pull_req;
    case RMQ_FAST_SEND_REQ:
        return fast_send_req;
    case RMQ_FAST_PULL_RESP:
        return fast_pull_resp;
    case RMQ_FAST_SEND_RESP:
        return fast_send_resp;
    default:
        return NULL;
    }
}

/* ---- JSON writer (fastjson form) --------------------------------------------------------- */

/*
 * fastjson SerializeWriter.writeStringWithDoubleQuote with default features: \b \t \n \f \r \"
 * \\ as two-character escapes; other chars below 0x20, U+007F..U+009F and U+2028/U+2029 as
 * \uXXXX with upper-case hex (IOUtils.DIGITS); everything else as is (UTF-8).
 */
static int json_put_str(rmq_buf_t *b, const char *str, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *s = (const unsigned char *)str;
    size_t i, run = 0;
    /* Room for the worst case (every byte a 6-character escape), then write in place. */
    if (n > (SIZE_MAX - 2) / 6 || rmq__buf_reserve(b, 6 * n + 2)) return RMQ_ERR_NOMEM;
    char *o = b->data + b->len;
    *o++ = '"';
    for (i = 0; i < n; i++) {
        unsigned c = s[i], cp = 0;
        size_t skip = 0;
        char esc = 0;
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x7f) continue;
        esc = rmq__json_escape_letter((unsigned char)c);
        if (!esc && (c < 0x20 || c == 0x7f))
            cp = c, skip = 1;
        else if (!esc && c == 0xc2 && i + 1 < n && s[i + 1] >= 0x80 && s[i + 1] <= 0x9f)
            cp = s[i + 1], skip = 2;
        else if (!esc && c == 0xe2 && i + 2 < n && s[i + 1] == 0x80 &&
                 (s[i + 2] == 0xa8 || s[i + 2] == 0xa9))
            cp = 0x2000u | (s[i + 2] == 0xa8 ? 0x28u : 0x29u), skip = 3;
        if (!esc && !skip) continue;
        /* Flush the plain run before this character. */
        memcpy(o, str + run, i - run);
        o += i - run;
        *o++ = '\\';
        if (esc) {
            *o++ = esc;
            run = i + 1;
        } else {
            *o++ = 'u';
            *o++ = hex[(cp >> 12) & 15];
            *o++ = hex[(cp >> 8) & 15];
            *o++ = hex[(cp >> 4) & 15];
            *o++ = hex[cp & 15];
            i += skip - 1;
            run = i + 1;
        }
    }
    memcpy(o, str + run, n - run);
    o += n - run;
    *o++ = '"';
    b->len = (size_t)(o - b->data);
    return 0;
}

static int put_ch(rmq_buf_t *b, char ch)
{
    if (b->len == b->cap && rmq__buf_reserve(b, 1)) return RMQ_ERR_NOMEM;
    b->data[b->len++] = ch;
    return 0;
}

/* Append the literal lit, then v in decimal. */
static int put_lit_i64(rmq_buf_t *b, const char *lit, size_t lit_len, int64_t v)
{
    if (rmq__buf_reserve(b, lit_len + 24)) return RMQ_ERR_NOMEM;
    memcpy(b->data + b->len, lit, lit_len);
    b->len += lit_len;
    b->len += fmt_i64(b->data + b->len, v);
    return 0;
}
#define PUT_LIT_I64(b, lit, v) put_lit_i64((b), lit, sizeof(lit) - 1, (v))

static int encode_json(const rmq_cmd_t *c, rmq_buf_t *b)
{
    int order_stack[32], *order = order_stack, n, i, rc = RMQ_ERR_NOMEM;
    const char *lang = rmq_language_name(c->language);

    if (c->n_ext > (int)RMQ_ARRAY_SIZE(order_stack) &&
        !(order = malloc((size_t)c->n_ext * sizeof(*order))))
        return RMQ_ERR_NOMEM;
    if ((n = rmq__cmd_hashmap_order(c, NULL, order)) < 0) goto out;
    if (PUT_LIT_I64(b, "{\"code\":", (int)c->code)) goto out;
    if (n > 0 || c->ext_empty) {
        if (rmq__buf_append(b, ",\"extFields\":{", 14)) goto out;
        for (i = 0; i < n; i++) {
            const rmq_kv_t *kv = &c->ext[order[i]];
            if (i && put_ch(b, ',')) goto out;
            if (json_put_str(b, kv->key, strlen(kv->key)) || put_ch(b, ':') ||
                json_put_str(b, kv->val, strlen(kv->val)))
                goto out;
        }
        if (rmq__buf_append(b, "}", 1)) goto out;
    }
    if (PUT_LIT_I64(b, ",\"flag\":", (int)c->flag) || rmq__buf_append(b, ",\"language\":", 12))
        goto out;
    if (lang ? rmq__buf_append(b, "\"", 1) || rmq__buf_append(b, lang, strlen(lang)) ||
                   rmq__buf_append(b, "\"", 1)
             : PUT_LIT_I64(b, "", (int)c->language))
        goto out;
    if (PUT_LIT_I64(b, ",\"opaque\":", (int)c->opaque)) goto out;
    if (c->remark) {
        if (rmq__buf_append(b, ",\"remark\":", 10) || json_put_str(b, c->remark, strlen(c->remark)))
            goto out;
    }
    if (PUT_LIT_I64(b, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":", (int)c->version) ||
        rmq__buf_append(b, "}", 1))
        goto out;
    rc = 0;
out:
    if (order != order_stack) free(order);
    return rc;
}

/* ---- ROCKETMQ binary writer ----------------------------------------------------------------- */

static int bin_put_kv(rmq_buf_t *b, const rmq_kv_t *kv)
{
    size_t kl = strlen(kv->key), vl = strlen(kv->val);
    /* Java writes the key length as a short: longer keys cannot be represented. */
    if (kl > INT16_MAX || vl > INT32_MAX) return RMQ_ERR_INVALID;
    if (rmq__buf_append_be16(b, (uint16_t)kl) || rmq__buf_append(b, kv->key, kl) ||
        rmq__buf_append_be32(b, (uint32_t)vl) || rmq__buf_append(b, kv->val, vl))
        return RMQ_ERR_NOMEM;
    return 0;
}

static int encode_bin(const rmq_cmd_t *c, rmq_buf_t *b)
{
    int order_stack[32], *order = order_stack, n, i, rc = RMQ_ERR_NOMEM;
    uint8_t sel_stack[32], *sel = NULL;
    const char *const *fast = fast_fields(c->fast);
    size_t rl = c->remark ? strlen(c->remark) : 0, extpos;

    if (rl > INT32_MAX) return RMQ_ERR_INVALID;
    if (c->n_ext > (int)RMQ_ARRAY_SIZE(order_stack)) {
        order = malloc((size_t)c->n_ext * (sizeof(*order) + 1));
        if (!order) return RMQ_ERR_NOMEM;
    }
    /* Java: writeShort(code), writeByte(language), writeShort(version): truncated like Java. */
    if (rmq__buf_append_be16(b, (uint16_t)c->code) || rmq__buf_append_u8(b, (uint8_t)c->language) ||
        rmq__buf_append_be16(b, (uint16_t)c->version) ||
        rmq__buf_append_be32(b, (uint32_t)c->opaque) ||
        rmq__buf_append_be32(b, (uint32_t)c->flag) || rmq__buf_append_be32(b, (uint32_t)rl) ||
        rmq__buf_append(b, c->remark, rl))
        goto out;
    extpos = b->len;
    if (rmq__buf_append_be32(b, 0)) goto out;
    if (fast) {
        int k;
        sel = order == order_stack ? sel_stack : (uint8_t *)(order + c->n_ext);
        memset(sel, 1, (size_t)c->n_ext);
        for (k = 0; fast[k]; k++) {
            int j = find_ext(c, fast[k]);
            if (j < 0) continue;
            if ((rc = bin_put_kv(b, &c->ext[j]))) goto out;
            rc = RMQ_ERR_NOMEM;
            if (!c->fast_dup) sel[j] = 0;
        }
    }
    if ((n = rmq__cmd_hashmap_order(c, sel, order)) < 0) goto out;
    for (i = 0; i < n; i++)
        if ((rc = bin_put_kv(b, &c->ext[order[i]]))) goto out;
    if (b->len - extpos - 4 > INT32_MAX) {
        rc = RMQ_ERR_TOO_LARGE;
        goto out;
    }
    rmq__wr32(b->data + extpos, (uint32_t)(b->len - extpos - 4));
    rc = 0;
out:
    if (order != order_stack) free(order);
    return rc;
}

int rmq__cmd_encode_header(const rmq_cmd_t *c, rmq_buf_t *out)
{
    size_t start = out->len, h;
    int rc;
    if (c->serialize != RMQ_SERIALIZE_JSON && c->serialize != RMQ_SERIALIZE_ROCKETMQ)
        return RMQ_ERR_INVALID;
    if (rmq__buf_reserve(out, 8)) return RMQ_ERR_NOMEM;
    out->len += 8;
    rc = c->serialize == RMQ_SERIALIZE_JSON ? encode_json(c, out) : encode_bin(c, out);
    h = out->len - start - 8;
    if (!rc && (h > 0xffffff || 8 + h + c->body_len > RMQ_FRAME_MAX_DEFAULT))
        rc = RMQ_ERR_TOO_LARGE;
    if (rc) {
        out->len = start;
        return rc;
    }
    rmq__wr32(out->data + start, (uint32_t)(4 + h + c->body_len));
    rmq__wr32(out->data + start + 4, ((uint32_t)c->serialize << 24) | (uint32_t)h);
    return 0;
}

int rmq__cmd_encode(const rmq_cmd_t *c, rmq_buf_t *out)
{
    size_t start = out->len;
    int rc = rmq__cmd_encode_header(c, out);
    if (rc) return rc;
    if (c->body_len && rmq__buf_append(out, c->body, c->body_len)) {
        out->len = start;
        return RMQ_ERR_NOMEM;
    }
    return 0;
}

/* ---- decoding: shared ------------------------------------------------------------------------ */

typedef struct dec {
    rmq_cmd_t *c;
    char *arena; /* == c->strings */
    size_t used, cap;
    char *err;
    size_t errsz;
    int dup; /* a key appeared twice */
} dec_t;

/* Store key -> val (both in the arena). val NULL removes the key. Later duplicates overwrite
 * earlier ones in place, like HashMap.put. */
static int dec_put(dec_t *d, char *key, char *val)
{
    rmq_cmd_t *c = d->c;
    int i = find_ext(c, key);
    if (i >= 0) {
        d->dup = 1;
        if (val)
            c->ext[i].val = val;
        else
            remove_ext(c, i);
        return 0;
    }
    if (!val) return 0;
    if (grow_ext(c)) return RMQ_ERR_NOMEM;
    c->ext[c->n_ext].key = key;
    c->ext[c->n_ext].val = val;
    c->n_ext++;
    return 0;
}

/* ---- JSON header parser ------------------------------------------------------------------ */

typedef struct jp {
    dec_t *d;
    const char *s, *p, *end;
    const char *why;
    size_t slen; /* decoded length of the last string (it may hold a NUL) */
} jp_t;

static int jfail(jp_t *j, const char *why)
{
    if (!j->why) j->why = why;
    return -1;
}

static void jws(jp_t *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

/*
 * Parse a string at j->p (which is on the opening quote) into the arena, NUL-terminated.
 * The decoded form is never longer than the quoted source, so the arena (header length + 1)
 * always has room. A lone surrogate becomes U+FFFD.
 */
static int jstring(jp_t *j, char **out)
{
    dec_t *d = j->d;
    char *o = d->arena + d->used, *start = o;
    const char *p;
    /* The output is never longer than the rest of the source: guard it anyway. */
    if (d->used + (size_t)(j->end - j->p) + 1 > d->cap) return jfail(j, "string too long");
    j->p++; /* opening quote */
    for (;;) {
        /* Copy the plain run in one go. */
        p = j->p;
        while (p < j->end && *p != '"' && *p != '\\')
            p++;
        memcpy(o, j->p, (size_t)(p - j->p));
        o += p - j->p;
        j->p = p;
        if (p >= j->end) return jfail(j, "unterminated string");
        if (*p == '"') break;
        /* Backslash escape. */
        if (++j->p >= j->end) return jfail(j, "unterminated string");
        switch (rmq__json_unescape(&j->p, j->end, &o, RMQ_JESC_LONE_FFFD)) {
        case RMQ_JESC_OK:
            break;
        case RMQ_JESC_SHORT_U:
            return jfail(j, "truncated \\u escape");
        case RMQ_JESC_BAD_U:
            return jfail(j, "bad \\u escape");
        default:
            return jfail(j, "bad escape in string");
        }
    }
    j->p++; /* closing quote */
    j->slen = (size_t)(o - start);
    *o++ = '\0';
    d->used += (size_t)(o - start);
    *out = start;
    return 0;
}

static int jliteral(jp_t *j, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n)) return jfail(j, "bad literal");
    j->p += n;
    return 0;
}

/* A JSON number token (validated); its text is [*b, j->p). */
static int jnumber(jp_t *j, const char **b, int *is_int)
{
    const char *p = j->p;
    *b = p;
    *is_int = 1;
    if (p < j->end && *p == '-') p++;
    if (p >= j->end || *p < '0' || *p > '9') return jfail(j, "bad number");
    if (*p == '0')
        p++;
    else
        while (p < j->end && *p >= '0' && *p <= '9')
            p++;
    if (p < j->end && *p == '.') {
        *is_int = 0;
        p++;
        if (p >= j->end || *p < '0' || *p > '9') return jfail(j, "bad number");
        while (p < j->end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < j->end && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < j->end && (*p == '+' || *p == '-')) p++;
        if (p >= j->end || *p < '0' || *p > '9') return jfail(j, "bad number");
        while (p < j->end && *p >= '0' && *p <= '9')
            p++;
    }
    j->p = p;
    return 0;
}

static int jint32(jp_t *j, int32_t *out, const char *what)
{
    const char *b;
    int is_int;
    int64_t v = 0;
    int neg;
    if (j->p < j->end && *j->p == 'n') return jliteral(j, "null"); /* null: Java leaves 0 */
    if (j->p >= j->end || !(*j->p == '-' || (*j->p >= '0' && *j->p <= '9'))) return jfail(j, what);
    if (jnumber(j, &b, &is_int)) return -1;
    if (!is_int) return jfail(j, what);
    neg = *b == '-';
    for (b += neg; b < j->p; b++) {
        v = v * 10 + (*b - '0');
        if (v > (int64_t)INT32_MAX + 1) return jfail(j, what);
    }
    if (neg) v = -v;
    if (v > INT32_MAX) return jfail(j, what);
    *out = (int32_t)v;
    return 0;
}

/* Skip any JSON value, nesting at most JSON_MAX_DEPTH deep. */
static int jskip(jp_t *j, int depth)
{
    const char *b;
    int is_int;
    char *tmp;
    jws(j);
    if (j->p >= j->end) return jfail(j, "truncated value");
    switch (*j->p) {
    case '"': {
        size_t mark = j->d->used;
        int rc = jstring(j, &tmp);
        j->d->used = mark;
        return rc;
    }
    case 't':
        return jliteral(j, "true");
    case 'f':
        return jliteral(j, "false");
    case 'n':
        return jliteral(j, "null");
    case '{':
    case '[': {
        char close = *j->p == '{' ? '}' : ']';
        int obj = close == '}', first = 1;
        if (depth >= JSON_MAX_DEPTH) return jfail(j, "nesting too deep");
        j->p++;
        for (;;) {
            jws(j);
            if (j->p >= j->end) return jfail(j, "unterminated object or array");
            if (*j->p == close) {
                j->p++;
                return 0;
            }
            if (!first) {
                if (*j->p != ',') return jfail(j, "expected ','");
                j->p++;
                jws(j);
            }
            first = 0;
            if (obj) {
                size_t mark = j->d->used;
                if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a key");
                if (jstring(j, &tmp)) return -1;
                j->d->used = mark;
                jws(j);
                if (j->p >= j->end || *j->p != ':') return jfail(j, "expected ':'");
                j->p++;
            }
            if (jskip(j, depth + 1)) return -1;
        }
    }
    default:
        return jnumber(j, &b, &is_int);
    }
}

/* extFields: an object of string -> string (numbers and booleans kept as their text). */
static int jext(jp_t *j)
{
    dec_t *d = j->d;
    int first = 1;
    if (j->p < j->end && *j->p == 'n') {
        /* null: no extFields at all. */
        if (jliteral(j, "null")) return -1;
        d->c->n_ext = 0;
        d->c->ext_empty = 0;
        return 0;
    }
    if (j->p >= j->end || *j->p != '{') return jfail(j, "extFields is not an object");
    j->p++;
    d->c->n_ext = 0; /* a repeated extFields key replaces the map, as in fastjson */
    d->c->ext_empty = 1;
    for (;;) {
        char *key, *val = NULL;
        jws(j);
        if (j->p >= j->end) return jfail(j, "unterminated extFields");
        if (*j->p == '}') {
            j->p++;
            break;
        }
        if (!first) {
            if (*j->p != ',') return jfail(j, "expected ',' in extFields");
            j->p++;
            jws(j);
        }
        first = 0;
        if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a key in extFields");
        if (jstring(j, &key)) return -1;
        jws(j);
        if (j->p >= j->end || *j->p != ':') return jfail(j, "expected ':' in extFields");
        j->p++;
        jws(j);
        if (j->p >= j->end) return jfail(j, "truncated extFields");
        if (*j->p == '"') {
            if (jstring(j, &val)) return -1;
        } else if (*j->p == 'n') {
            if (jliteral(j, "null")) return -1;
        } else if (*j->p == 't' || *j->p == 'f') {
            const char *b = j->p;
            if (jliteral(j, *j->p == 't' ? "true" : "false")) return -1;
            if (d->used + (size_t)(j->p - b) + 1 > d->cap) return jfail(j, "value too long");
            val = d->arena + d->used;
            memcpy(val, b, (size_t)(j->p - b));
            val[j->p - b] = '\0';
            d->used += (size_t)(j->p - b) + 1;
        } else if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9')) {
            const char *b;
            int is_int;
            if (jnumber(j, &b, &is_int)) return -1;
            if (d->used + (size_t)(j->p - b) + 1 > d->cap) return jfail(j, "value too long");
            val = d->arena + d->used;
            memcpy(val, b, (size_t)(j->p - b));
            val[j->p - b] = '\0';
            d->used += (size_t)(j->p - b) + 1;
        } else {
            return jfail(j, "extFields value is not a string");
        }
        if (dec_put(d, key, val)) return jfail(j, "out of memory");
    }
    d->c->ext_empty = d->c->n_ext == 0;
    return 0;
}

/* The top-level key just parsed is exactly name (an embedded NUL does not match). */
static int key_is(const jp_t *j, const char *k, const char *name)
{
    return j->slen == strlen(name) && !memcmp(k, name, j->slen);
}

static int decode_json(dec_t *d, const char *h, size_t hlen)
{
    jp_t j = {d, h, h, h + hlen, NULL, 0};
    rmq_cmd_t *c = d->c;
    int first = 1;
    jws(&j);
    if (j.p >= j.end || *j.p != '{') {
        jfail(&j, "header is not a JSON object");
        goto bad;
    }
    j.p++;
    for (;;) {
        char *key;
        size_t mark;
        jws(&j);
        if (j.p >= j.end) {
            jfail(&j, "unterminated object");
            goto bad;
        }
        if (*j.p == '}') {
            j.p++;
            break;
        }
        if (!first) {
            if (*j.p != ',') {
                jfail(&j, "expected ',' or '}'");
                goto bad;
            }
            j.p++;
            jws(&j);
        }
        first = 0;
        if (j.p >= j.end || *j.p != '"') {
            jfail(&j, "expected a key");
            goto bad;
        }
        mark = d->used;
        if (jstring(&j, &key)) goto bad;
        d->used = mark; /* the key is compared now and not kept */
        jws(&j);
        if (j.p >= j.end || *j.p != ':') {
            jfail(&j, "expected ':'");
            goto bad;
        }
        j.p++;
        jws(&j);
        if (j.p >= j.end) {
            jfail(&j, "truncated value");
            goto bad;
        }
        /* key still reads correctly: nothing has been written over it yet. */
        if (key_is(&j, key, "code")) {
            if (jint32(&j, &c->code, "code is not an int")) goto bad;
        } else if (key_is(&j, key, "version")) {
            if (jint32(&j, &c->version, "version is not an int")) goto bad;
        } else if (key_is(&j, key, "opaque")) {
            if (jint32(&j, &c->opaque, "opaque is not an int")) goto bad;
        } else if (key_is(&j, key, "flag")) {
            if (jint32(&j, &c->flag, "flag is not an int")) goto bad;
        } else if (key_is(&j, key, "language")) {
            if (*j.p == '"') {
                char *name;
                int lang;
                mark = d->used;
                if (jstring(&j, &name)) goto bad;
                lang = rmq_language_from_name(name, j.slen);
                d->used = mark;
                /* An unknown (newer) language name: keep going as OTHER. */
                c->language = lang >= 0 ? lang : RMQ_LANG_OTHER;
            } else {
                int32_t v = c->language;
                if (jint32(&j, &v, "language is not a name or a number")) goto bad;
                if (v < 0 || v > 255) {
                    jfail(&j, "language number out of range");
                    goto bad;
                }
                c->language = v;
            }
        } else if (key_is(&j, key, "remark")) {
            if (*j.p == '"') {
                if (jstring(&j, &c->remark)) goto bad;
            } else if (*j.p == 'n') {
                if (jliteral(&j, "null")) goto bad;
                c->remark = NULL;
            } else {
                jfail(&j, "remark is not a string");
                goto bad;
            }
        } else if (key_is(&j, key, "extFields")) {
            if (jext(&j)) goto bad;
        } else {
            /* serializeTypeCurrentRPC and anything unknown. */
            if (jskip(&j, 1)) goto bad;
        }
    }
    jws(&j);
    if (j.p != j.end) {
        jfail(&j, "bytes after the header object");
        goto bad;
    }
    return 0;
bad:
    rmq__seterr(d->err, d->errsz, "bad JSON header at byte %zu of %zu: %s", (size_t)(j.p - j.s),
                hlen, j.why ? j.why : "malformed");
    return RMQ_ERR_BAD_FRAME;
}

/* ---- ROCKETMQ binary header parser ----------------------------------------------------- */

static char *arena_copy(dec_t *d, const char *p, size_t n)
{
    char *s = d->arena + d->used;
    memcpy(s, p, n);
    s[n] = '\0';
    d->used += n + 1;
    return s;
}

static int decode_bin(dec_t *d, const char *h, size_t hlen)
{
    rmq_cmd_t *c = d->c;
    const uint8_t *u = (const uint8_t *)h;
    size_t p, end;
    int32_t rl, el;

    if (hlen < 21) {
        rmq__seterr(d->err, d->errsz, "ROCKETMQ header of %zu bytes is shorter than 21", hlen);
        return RMQ_ERR_BAD_FRAME;
    }
    c->code = (int16_t)rmq__rd16(u);
    c->language = u[2];
    c->version = (int16_t)rmq__rd16(u + 3);
    c->opaque = (int32_t)rmq__rd32(u + 5);
    c->flag = (int32_t)rmq__rd32(u + 9);
    rl = (int32_t)rmq__rd32(u + 13);
    if (rl < 0 || (size_t)rl > hlen - 21) {
        rmq__seterr(d->err, d->errsz, "ROCKETMQ header: remark length %d past the %zu-byte header",
                    (int)rl, hlen);
        return RMQ_ERR_BAD_FRAME;
    }
    if (rl > 0) c->remark = arena_copy(d, h + 17, (size_t)rl); /* 0 means null */
    p = 17 + (size_t)rl;
    el = (int32_t)rmq__rd32(u + p);
    p += 4;
    if (el < 0 || (size_t)el > hlen - p) {
        rmq__seterr(d->err, d->errsz,
                    "ROCKETMQ header: ext length %d past the %zu-byte header (%zu bytes left)",
                    (int)el, hlen, hlen - p);
        return RMQ_ERR_BAD_FRAME;
    }
    end = p + (size_t)el;
    if (end != hlen) {
        rmq__seterr(d->err, d->errsz, "ROCKETMQ header: %zu bytes after the ext fields",
                    hlen - end);
        return RMQ_ERR_BAD_FRAME;
    }
    while (p < end) {
        int16_t kl;
        int32_t vl;
        char *k, *v;
        if (end - p < 2) goto trunc;
        kl = (int16_t)rmq__rd16(u + p);
        p += 2;
        if (kl < 0 || (size_t)kl > end - p) {
            rmq__seterr(d->err, d->errsz, "ROCKETMQ header: ext key length %d past the ext area",
                        (int)kl);
            return RMQ_ERR_BAD_FRAME;
        }
        k = kl ? arena_copy(d, h + p, (size_t)kl) : NULL;
        p += (size_t)kl;
        if (end - p < 4) goto trunc;
        vl = (int32_t)rmq__rd32(u + p);
        p += 4;
        if (vl < 0 || (size_t)vl > end - p) {
            rmq__seterr(d->err, d->errsz,
                        "ROCKETMQ header: ext value length %d of key \"%.64s\" past the ext area",
                        (int)vl, k ? k : "");
            return RMQ_ERR_BAD_FRAME;
        }
        v = vl ? arena_copy(d, h + p, (size_t)vl) : NULL;
        p += (size_t)vl;
        /* An empty key decodes as null in Java: nobody can look it up, so it is dropped. */
        if (k && dec_put(d, k, v)) {
            rmq__seterr(d->err, d->errsz, "out of memory");
            return RMQ_ERR_NOMEM;
        }
    }
    if (d->dup) c->fast_dup = 1;
    return 0;
trunc:
    rmq__seterr(d->err, d->errsz, "ROCKETMQ header: ext entry truncated at byte %zu of %zu", p,
                hlen);
    return RMQ_ERR_BAD_FRAME;
}

int rmq__cmd_decode(rmq_rbuf_t *frame, rmq_cmd_t *c, char *errstr, size_t errstr_size)
{
    const char *b = frame->data;
    uint32_t len, word, hlen;
    int type, rc;
    dec_t d;

    memset(c, 0, sizeof(*c));
    if (frame->len < 8) {
        rmq__seterr(errstr, errstr_size, "frame of %zu bytes is shorter than 8", frame->len);
        return RMQ_ERR_BAD_FRAME;
    }
    len = rmq__rd32(b);
    if ((size_t)len + 4 != frame->len) {
        rmq__seterr(errstr, errstr_size, "frame length field %d does not match the %zu bytes given",
                    (int)(int32_t)len, frame->len - 4);
        return RMQ_ERR_BAD_FRAME;
    }
    word = rmq__rd32(b + 4);
    type = (int)(word >> 24);
    hlen = word & 0xffffff;
    if (type != RMQ_SERIALIZE_JSON && type != RMQ_SERIALIZE_ROCKETMQ) {
        rmq__seterr(errstr, errstr_size, "unknown serialize type %d", type);
        return RMQ_ERR_BAD_FRAME;
    }
    if (hlen > len - 4) {
        rmq__seterr(errstr, errstr_size, "header length %u exceeds the frame length %u - 4", hlen,
                    len);
        return RMQ_ERR_BAD_FRAME;
    }
    c->language = RMQ_LANG_JAVA;
    c->serialize = type;
    c->strings = malloc((size_t)hlen + 1);
    if (!c->strings) {
        rmq__seterr(errstr, errstr_size, "out of memory");
        return RMQ_ERR_NOMEM;
    }
    c->strings_len = (size_t)hlen + 1;
    d.c = c;
    d.arena = c->strings;
    d.used = 0;
    d.cap = c->strings_len;
    d.err = errstr;
    d.errsz = errstr_size;
    d.dup = 0;
    rc = type == RMQ_SERIALIZE_JSON ? decode_json(&d, b + 8, hlen) : decode_bin(&d, b + 8, hlen);
    if (rc) {
        rmq__cmd_free(c);
        return rc;
    }
    if (!(c->flag & RMQ_FLAG_RESPONSE)) c->fast = (uint8_t)rmq__cmd_fast_kind(c->code, 0);
    if (len - 4 - hlen > 0) {
        c->body = b + 8 + hlen;
        c->body_len = len - 4 - hlen;
    }
    c->frame = rmq__rbuf_keep(frame);
    return 0;
}

/* ---- logging ----------------------------------------------------------------------------- */

void rmq__cmd_describe(const rmq_cmd_t *c, char *dst, size_t dst_size)
{
    int resp = c->flag & RMQ_FLAG_RESPONSE;
    const char *name = resp ? rmq_response_code_name(c->code) : rmq_request_code_name(c->code);
    if (!dst_size) return;
    snprintf(dst, dst_size, "%s%s(%d) opaque=%d flag=%d %s ext=%d body=%zu%s%.80s%s",
             resp ? "response " : "", name ? name : "CODE", (int)c->code, (int)c->opaque,
             (int)c->flag, c->serialize == RMQ_SERIALIZE_ROCKETMQ ? "rocketmq" : "json", c->n_ext,
             c->body_len, c->remark ? " remark=\"" : "", c->remark ? c->remark : "",
             c->remark ? "\"" : "");
}

/* ---- framer -------------------------------------------------------------------------------- */

void rmq__framer_init(rmq_framer_t *f, size_t max_frame)
{
    f->max_frame = max_frame ? max_frame : RMQ_FRAME_MAX_DEFAULT;
    f->lenhave = 0;
    f->cur = NULL;
    f->have = 0;
    f->epoch = 0;
    f->err = 0;
}

void rmq__framer_reset(rmq_framer_t *f)
{
    rmq__rbuf_release(f->cur);
    f->cur = NULL;
    f->have = 0;
    f->lenhave = 0;
    f->err = 0;
    f->epoch++;
}

void rmq__framer_alloc(rmq_framer_t *f, char **base, size_t *len)
{
    if (f->cur && f->cur->len - f->have >= FRAMER_DIRECT_MIN) {
        *base = f->cur->data + f->have;
        *len = f->cur->len - f->have;
    } else {
        *base = f->scratch;
        *len = sizeof(f->scratch);
    }
}

/* Start a frame whose length word is L; returns 0 or an error (sticky). */
static int framer_start(rmq_framer_t *f, uint32_t l, char *errstr, size_t errstr_size)
{
    if ((int32_t)l < 4) {
        rmq__seterr(errstr, errstr_size, "frame length %d is smaller than 4", (int)(int32_t)l);
        return f->err = RMQ_ERR_BAD_FRAME;
    }
    if ((size_t)l + 4 > f->max_frame) {
        rmq__seterr(errstr, errstr_size, "frame of %zu bytes exceeds the maximum frame size %zu",
                    (size_t)l + 4, f->max_frame);
        return f->err = RMQ_ERR_TOO_LARGE;
    }
    if (!(f->cur = rmq__rbuf_new((size_t)l + 4))) {
        rmq__seterr(errstr, errstr_size, "out of memory for a %zu-byte frame", (size_t)l + 4);
        return f->err = RMQ_ERR_NOMEM;
    }
    rmq__wr32(f->cur->data, l);
    f->have = 4;
    return 0;
}

int rmq__framer_feed(rmq_framer_t *f, const char *p, size_t n, rmq_frame_cb cb, void *ud,
                     char *errstr, size_t errstr_size)
{
    unsigned epoch = f->epoch;
    if (f->err) {
        rmq__seterr(errstr, errstr_size, "stream already failed: %s", rmq_err_str(f->err));
        return f->err;
    }
    while (n > 0) {
        if (f->cur) {
            size_t take = f->cur->len - f->have;
            if (take > n) take = n;
            memcpy(f->cur->data + f->have, p, take);
            f->have += take;
            p += take;
            n -= take;
            if (f->have == f->cur->len) {
                rmq_rbuf_t *rb = f->cur;
                f->cur = NULL;
                f->have = 0;
                cb(ud, rb);
                if (f->epoch != epoch) return 0;
            }
        } else if (f->lenhave == 0 && n >= 4) {
            int rc = framer_start(f, rmq__rd32(p), errstr, errstr_size);
            if (rc) return rc;
            p += 4;
            n -= 4;
        } else {
            size_t take = 4 - f->lenhave;
            if (take > n) take = n;
            memcpy(f->lenbuf + f->lenhave, p, take);
            f->lenhave += take;
            p += take;
            n -= take;
            if (f->lenhave == 4) {
                int rc;
                f->lenhave = 0;
                if ((rc = framer_start(f, rmq__rd32(f->lenbuf), errstr, errstr_size))) return rc;
            }
        }
    }
    return 0;
}

int rmq__framer_commit(rmq_framer_t *f, const char *base, size_t n, rmq_frame_cb cb, void *ud,
                       char *errstr, size_t errstr_size)
{
    if (!f->err && f->cur && base == f->cur->data + f->have) {
        /* Read straight into the frame: no copy. */
        size_t take = f->cur->len - f->have;
        if (take > n) take = n;
        f->have += take;
        if (f->have == f->cur->len) {
            unsigned epoch = f->epoch;
            rmq_rbuf_t *rb = f->cur;
            f->cur = NULL;
            f->have = 0;
            cb(ud, rb);
            if (f->epoch != epoch) return 0;
        }
        base += take;
        n -= take;
        if (!n) return 0;
    }
    return rmq__framer_feed(f, base, n, cb, ud, errstr, errstr_size);
}
