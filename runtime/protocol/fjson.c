/*
 * fjson.c -- tolerant reader and writer for fastjson-style JSON (see fjson.h).
 *
 * Ownership: every node and string lives in the document's arena (a list of blocks).
 * Threads: none shared; a document belongs to the thread using it.
 */
#include "fjson.h"

#include "base/json_esc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct block {
    struct block *next;
    size_t used, cap;
    char data[];
} block_t;

struct rmq_fjdoc {
    block_t *blocks;
    rmq_fj_t *root;
};

static void *arena_alloc(rmq_fjdoc_t *doc, size_t n)
{
    block_t *b = doc->blocks;
    n = (n + 15) & ~(size_t)15;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 8192 ? n : 8192;
        b = malloc(sizeof(*b) + cap);
        if (!b) return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = doc->blocks;
        doc->blocks = b;
    }
    b->used += n;
    return b->data + b->used - n;
}

rmq_fjdoc_t *rmq__fj_new(void)
{
    rmq_fjdoc_t *doc = calloc(1, sizeof(*doc));
    return doc;
}

void rmq__fj_free(rmq_fjdoc_t *doc)
{
    block_t *b, *next;
    if (!doc) return;
    for (b = doc->blocks; b; b = next) {
        next = b->next;
        free(b);
    }
    free(doc);
}

rmq_fj_t *rmq__fj_root(const rmq_fjdoc_t *doc)
{
    return doc->root;
}
void rmq__fj_set_root(rmq_fjdoc_t *doc, rmq_fj_t *root)
{
    doc->root = root;
}

static rmq_fj_t *new_node(rmq_fjdoc_t *doc, rmq_fj_type_t type)
{
    rmq_fj_t *v = arena_alloc(doc, sizeof(*v));
    if (v) {
        memset(v, 0, sizeof(*v));
        v->type = type;
    }
    return v;
}

/* ---- parser ---------------------------------------------------------------------------- */

typedef struct parser {
    const char *p, *end, *start;
    rmq_fjdoc_t *doc;
    char *err;
    size_t errsz;
    int failed;
} parser_t;

static rmq_fj_t *fail(parser_t *ps, const char *what)
{
    if (!ps->failed) {
        ps->failed = 1;
        rmq__seterr(ps->err, ps->errsz, "malformed JSON: %s at byte %zu", what,
                    (size_t)(ps->p - ps->start));
    }
    return NULL;
}

static void skip_ws(parser_t *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static rmq_fj_t *parse_string(parser_t *ps)
{
    const char *q = ps->p + 1, *s;
    char *o, *buf;
    rmq_fj_t *v;
    /* Find the closing quote first: the decoded text is never longer than the source. */
    for (s = q; s < ps->end && *s != '"'; s++)
        if (*s == '\\') s++;
    if (s >= ps->end) return fail(ps, "unterminated string");
    v = new_node(ps->doc, RMQ_FJ_STRING);
    buf = arena_alloc(ps->doc, (size_t)(s - q) + 1);
    if (!v || !buf) return fail(ps, "out of memory");
    o = buf;
    while (q < s) {
        char c = *q;
        if (c != '\\') {
            if ((unsigned char)c < 0x20) {
                ps->p = q;
                return fail(ps, "control character in string");
            }
            *o++ = c;
            q++;
            continue;
        }
        q++;
        switch (rmq__json_unescape(&q, s, &o, 0)) {
        case RMQ_JESC_OK:
            break;
        case RMQ_JESC_BAD:
            ps->p = q - 1;
            return fail(ps, "bad escape in string");
        default:
            ps->p = q - 1;
            return fail(ps, "bad \\u escape");
        }
    }
    *o = '\0';
    v->s = buf;
    v->len = (size_t)(o - buf);
    ps->p = s + 1;
    return v;
}

static rmq_fj_t *parse_number(parser_t *ps)
{
    const char *q = ps->p, *digits;
    int is_int = 1;
    rmq_fj_t *v;
    char *text;
    if (q < ps->end && *q == '-') q++;
    digits = q;
    while (q < ps->end && *q >= '0' && *q <= '9')
        q++;
    if (q == digits) return fail(ps, "bad number");
    if (q < ps->end && *q == '.') {
        const char *f = ++q;
        is_int = 0;
        while (q < ps->end && *q >= '0' && *q <= '9')
            q++;
        if (q == f) return fail(ps, "bad number fraction");
    }
    if (q < ps->end && (*q == 'e' || *q == 'E')) {
        const char *e;
        is_int = 0;
        q++;
        if (q < ps->end && (*q == '+' || *q == '-')) q++;
        e = q;
        while (q < ps->end && *q >= '0' && *q <= '9')
            q++;
        if (q == e) return fail(ps, "bad number exponent");
    }
    /* fastjson type suffixes (L, S, B, F, D) are accepted and dropped. */
    v = new_node(ps->doc, RMQ_FJ_NUMBER);
    text = arena_alloc(ps->doc, (size_t)(q - ps->p) + 1);
    if (!v || !text) return fail(ps, "out of memory");
    memcpy(text, ps->p, (size_t)(q - ps->p));
    text[q - ps->p] = '\0';
    v->s = text;
    v->len = (size_t)(q - ps->p);
    v->d = strtod(text, NULL);
    if (is_int) {
        char *endp;
        errno = 0;
        long long ll = strtoll(text, &endp, 10);
        if (errno == 0 && *endp == '\0') {
            v->is_int = 1;
            v->i = ll;
        }
    }
    if (q < ps->end && (*q == 'L' || *q == 'S' || *q == 'B' || *q == 'F' || *q == 'D')) q++;
    ps->p = q;
    return v;
}

static rmq_fj_t *parse_value(parser_t *ps, int depth);

static rmq_fj_t *parse_container(parser_t *ps, int depth, int is_obj)
{
    char close = is_obj ? '}' : ']';
    rmq_fj_t *v = new_node(ps->doc, is_obj ? RMQ_FJ_OBJECT : RMQ_FJ_ARRAY);
    if (!v) return fail(ps, "out of memory");
    if (depth >= RMQ_FJ_MAX_DEPTH) return fail(ps, "nesting deeper than 64");
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return v;
    }
    for (;;) {
        rmq_fj_t *key = NULL, *val;
        if (is_obj) {
            key = parse_value(ps, depth + 1); /* any value may be a key (fastjson maps) */
            if (!key) return NULL;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') return fail(ps, "expected ':'");
            ps->p++;
        }
        val = parse_value(ps, depth + 1);
        if (!val) return NULL;
        rmq__fj_obj_add(v, key, val); /* key NULL in an array */
        skip_ws(ps);
        if (ps->p >= ps->end)
            return fail(ps, is_obj ? "unterminated object" : "unterminated array");
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p == close) {
            ps->p++;
            return v;
        }
        return fail(ps, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static rmq_fj_t *parse_word(parser_t *ps, const char *w, rmq_fj_type_t type)
{
    size_t n = strlen(w);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, w, n) != 0)
        return fail(ps, "unexpected character");
    ps->p += n;
    rmq_fj_t *v = new_node(ps->doc, type);
    return v ? v : fail(ps, "out of memory");
}

static rmq_fj_t *parse_value(parser_t *ps, int depth)
{
    skip_ws(ps);
    if (ps->p >= ps->end) return fail(ps, "unexpected end of input");
    switch (*ps->p) {
    case '{':
        return parse_container(ps, depth, 1);
    case '[':
        return parse_container(ps, depth, 0);
    case '"':
        return parse_string(ps);
    case 't':
        return parse_word(ps, "true", RMQ_FJ_TRUE);
    case 'f':
        return parse_word(ps, "false", RMQ_FJ_FALSE);
    case 'n':
        return parse_word(ps, "null", RMQ_FJ_NULL);
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) return parse_number(ps);
        return fail(ps, "unexpected character");
    }
}

rmq_fjdoc_t *rmq__fj_parse(const char *json, size_t len, char *errstr, size_t errstr_size)
{
    parser_t ps = {json, json + len, json, NULL, errstr, errstr_size, 0};
    ps.doc = rmq__fj_new();
    if (!ps.doc) {
        rmq__seterr(errstr, errstr_size, "out of memory");
        return NULL;
    }
    ps.doc->root = parse_value(&ps, 0);
    if (ps.doc->root) {
        skip_ws(&ps);
        if (ps.p != ps.end) fail(&ps, "trailing characters");
    }
    if (ps.failed || !ps.doc->root) {
        rmq__fj_free(ps.doc);
        return NULL;
    }
    return ps.doc;
}

/* ---- reading ---------------------------------------------------------------------------- */

rmq_fj_t *rmq__fj_get(const rmq_fj_t *obj, const char *name)
{
    rmq_fj_t *v, *found = NULL;
    size_t n = strlen(name);
    if (!obj || obj->type != RMQ_FJ_OBJECT) return NULL;
    for (v = obj->child; v; v = v->next) {
        const rmq_fj_t *k = v->key;
        if (k && (k->type == RMQ_FJ_STRING || k->type == RMQ_FJ_NUMBER) && k->len == n &&
            memcmp(k->s, name, n) == 0)
            found = v;
    }
    return found;
}

int rmq__fj_i64(const rmq_fj_t *v, int64_t *out)
{
    if (!v) return RMQ_ERR_INVALID;
    if (v->type == RMQ_FJ_NUMBER && v->is_int) {
        *out = v->i;
        return 0;
    }
    if (v->type == RMQ_FJ_STRING && v->len > 0) {
        char *endp;
        errno = 0;
        long long ll = strtoll(v->s, &endp, 10);
        if (errno == 0 && *endp == '\0' && v->s[0] != ' ' && v->s[0] != '+') {
            *out = ll;
            return 0;
        }
    }
    return RMQ_ERR_INVALID;
}

int rmq__fj_get_i64(const rmq_fj_t *obj, const char *name, int64_t *out)
{
    rmq_fj_t *v = rmq__fj_get(obj, name);
    if (!v || v->type == RMQ_FJ_NULL) return RMQ_ERR_NOT_FOUND;
    return rmq__fj_i64(v, out);
}

int rmq__fj_get_i32(const rmq_fj_t *obj, const char *name, int32_t *out)
{
    int64_t x;
    int rc = rmq__fj_get_i64(obj, name, &x);
    if (rc) return rc;
    if (x < INT32_MIN || x > INT32_MAX) return RMQ_ERR_INVALID;
    *out = (int32_t)x;
    return 0;
}

const char *rmq__fj_get_str(const rmq_fj_t *obj, const char *name)
{
    rmq_fj_t *v = rmq__fj_get(obj, name);
    return v && v->type == RMQ_FJ_STRING ? v->s : NULL;
}

int rmq__fj_get_bool(const rmq_fj_t *obj, const char *name)
{
    rmq_fj_t *v = rmq__fj_get(obj, name);
    if (!v) return -1;
    return v->type == RMQ_FJ_TRUE ? 1 : v->type == RMQ_FJ_FALSE ? 0 : -1;
}

/* ---- building ----------------------------------------------------------------------------- */

rmq_fj_t *rmq__fj_new_obj(rmq_fjdoc_t *doc)
{
    return new_node(doc, RMQ_FJ_OBJECT);
}
rmq_fj_t *rmq__fj_new_arr(rmq_fjdoc_t *doc)
{
    return new_node(doc, RMQ_FJ_ARRAY);
}

rmq_fj_t *rmq__fj_new_str(rmq_fjdoc_t *doc, const char *s, size_t len)
{
    rmq_fj_t *v = new_node(doc, RMQ_FJ_STRING);
    char *c = arena_alloc(doc, len + 1);
    if (!v || !c) return NULL;
    memcpy(c, s, len);
    c[len] = '\0';
    v->s = c;
    v->len = len;
    return v;
}

rmq_fj_t *rmq__fj_new_num_text(rmq_fjdoc_t *doc, const char *text)
{
    rmq_fj_t *v = rmq__fj_new_str(doc, text, strlen(text));
    if (!v) return NULL;
    v->type = RMQ_FJ_NUMBER;
    v->d = strtod(text, NULL);
    return v;
}

rmq_fj_t *rmq__fj_new_i64(rmq_fjdoc_t *doc, int64_t x)
{
    char tmp[24];
    rmq_fj_t *v;
    snprintf(tmp, sizeof(tmp), "%lld", (long long)x);
    v = rmq__fj_new_num_text(doc, tmp);
    if (v) {
        v->is_int = 1;
        v->i = x;
    }
    return v;
}

rmq_fj_t *rmq__fj_new_bool(rmq_fjdoc_t *doc, int b)
{
    return new_node(doc, b ? RMQ_FJ_TRUE : RMQ_FJ_FALSE);
}

void rmq__fj_arr_add(rmq_fj_t *arr, rmq_fj_t *val)
{
    val->next = NULL;
    if (arr->last)
        arr->last->next = val;
    else
        arr->child = val;
    arr->last = val;
    arr->len++;
}

void rmq__fj_obj_add(rmq_fj_t *obj, rmq_fj_t *key, rmq_fj_t *val)
{
    val->key = key;
    rmq__fj_arr_add(obj, val);
}

rmq_fj_t *rmq__fj_obj_set(rmq_fjdoc_t *doc, rmq_fj_t *obj, const char *name, rmq_fj_t *val)
{
    rmq_fj_t *k = rmq__fj_new_str(doc, name, strlen(name));
    if (!k || !val) return NULL;
    rmq__fj_obj_add(obj, k, val);
    return val;
}

rmq_fj_t *rmq__fj_new_mq(rmq_fjdoc_t *doc, const char *topic, const char *broker_name, int queue_id)
{
    rmq_fj_t *o = rmq__fj_new_obj(doc);
    if (!o) return NULL;
    if (!rmq__fj_obj_set(doc, o, "brokerName",
                         rmq__fj_new_str(doc, broker_name, strlen(broker_name))) ||
        !rmq__fj_obj_set(doc, o, "queueId", rmq__fj_new_i64(doc, queue_id)) ||
        !rmq__fj_obj_set(doc, o, "topic", rmq__fj_new_str(doc, topic, strlen(topic))))
        return NULL;
    return o;
}

/* ---- writing ----------------------------------------------------------------------------- */

/* \u00XX for byte d into e; returns the 6 characters written. */
static size_t u00_escape(char *e, unsigned char d)
{
    static const char hex[] = "0123456789ABCDEF";
    memcpy(e, "\\u00", 4);
    e[4] = hex[d >> 4];
    e[5] = hex[d & 15];
    return 6;
}

int rmq__fj_write_str(rmq_buf_t *out, const char *s, size_t len, int flags)
{
    size_t i = 0;
    if (rmq__buf_reserve(out, len + 2)) return RMQ_ERR_NOMEM;
    out->data[out->len++] = '"';
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        char e[12];
        size_t en = 0;
        char x = c == '/' ? ((flags & RMQ_FJ_ASCII) ? '/' : 0) : rmq__json_escape_letter(c);
        if (x) {
            e[0] = '\\';
            e[1] = x;
            en = 2;
        }
        if (en) {
            i++;
        } else if (c < 0x20 || c == 0x7F) {
            en = u00_escape(e, c);
            i++;
        } else if (c == 0xC2 && i + 1 < len && (unsigned char)s[i + 1] < 0xA0 &&
                   (unsigned char)s[i + 1] >= 0x80) {
            /* fastjson escapes U+0080..U+009F (IOUtils.specicalFlags_doubleQuotes) in any mode. */
            en = u00_escape(e, (unsigned char)s[i + 1]);
            i += 2;
        } else if (c >= 0x80 && (flags & RMQ_FJ_ASCII)) {
            /* Decode one UTF-8 sequence; write UTF-16 units as \uXXXX. Bad bytes pass through. */
            unsigned cp;
            size_t need = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0, k;
            if (need == 0 || len - i <= need) {
                if (rmq__buf_append(out, &s[i], 1)) return RMQ_ERR_NOMEM;
                i++;
                continue;
            }
            cp = c & (0x3F >> need);
            for (k = 1; k <= need; k++)
                cp = cp << 6 | ((unsigned char)s[i + k] & 0x3F);
            i += need + 1;
            if (cp >= 0x10000) {
                unsigned hi = 0xD800 + ((cp - 0x10000) >> 10),
                         lo = 0xDC00 + ((cp - 0x10000) & 0x3FF);
                snprintf(e, sizeof(e), "\\u%04X", hi);
                if (rmq__buf_append(out, e, 6)) return RMQ_ERR_NOMEM;
                cp = lo;
            }
            snprintf(e, sizeof(e), "\\u%04X", cp);
            en = 6;
        } else {
            size_t j = i + 1; /* s[i] itself needs no escape (checked above) */
            /* Copy a run of plain bytes at once. */
            while (j < len) {
                unsigned char d = (unsigned char)s[j];
                if (d < 0x20 || d == '"' || d == '\\' || d == 0x7F || d == 0xC2 ||
                    (d == '/' && (flags & RMQ_FJ_ASCII)) || (d >= 0x80 && (flags & RMQ_FJ_ASCII)))
                    break;
                j++;
            }
            if (rmq__buf_append(out, s + i, j - i)) return RMQ_ERR_NOMEM;
            i = j;
            continue;
        }
        if (rmq__buf_append(out, e, en)) return RMQ_ERR_NOMEM;
    }
    return rmq__buf_append(out, "\"", 1);
}

static int newline(rmq_buf_t *out, int indent)
{
    if (rmq__buf_reserve(out, (size_t)indent + 1)) return RMQ_ERR_NOMEM;
    out->data[out->len++] = '\n';
    for (int i = 0; i < indent; i++)
        out->data[out->len++] = '\t';
    return 0;
}

static int write_value(rmq_buf_t *out, const rmq_fj_t *v, int flags, int indent);

static int write_container(rmq_buf_t *out, const rmq_fj_t *v, int flags, int indent)
{
    int is_obj = v->type == RMQ_FJ_OBJECT, pretty = flags & RMQ_FJ_PRETTY;
    const rmq_fj_t *c;
    if (rmq__buf_append(out, is_obj ? "{" : "[", 1)) return RMQ_ERR_NOMEM;
    for (c = v->child; c; c = c->next) {
        if (c != v->child && rmq__buf_append(out, ",", 1)) return RMQ_ERR_NOMEM;
        if (is_obj) {
            const rmq_fj_t *k = c->key;
            if (!k || k->type == RMQ_FJ_STRING) {
                if (pretty && newline(out, indent + 1)) return RMQ_ERR_NOMEM;
                if (rmq__fj_write_str(out, k ? k->s : "", k ? k->len : 0, flags))
                    return RMQ_ERR_NOMEM;
            } else if (write_value(out, k, flags, indent + 1)) {
                return RMQ_ERR_NOMEM;
            }
            if (rmq__buf_append(out, ":", 1)) return RMQ_ERR_NOMEM;
        } else if (pretty && newline(out, indent + 1)) {
            return RMQ_ERR_NOMEM;
        }
        if (write_value(out, c, flags, indent + 1)) return RMQ_ERR_NOMEM;
    }
    if (pretty && v->child && newline(out, indent)) return RMQ_ERR_NOMEM;
    return rmq__buf_append(out, is_obj ? "}" : "]", 1);
}

static int write_value(rmq_buf_t *out, const rmq_fj_t *v, int flags, int indent)
{
    switch (v->type) {
    case RMQ_FJ_NULL:
        return rmq__buf_append(out, "null", 4);
    case RMQ_FJ_TRUE:
        return rmq__buf_append(out, "true", 4);
    case RMQ_FJ_FALSE:
        return rmq__buf_append(out, "false", 5);
    case RMQ_FJ_NUMBER:
        return rmq__buf_append(out, v->s, v->len);
    case RMQ_FJ_STRING:
        return rmq__fj_write_str(out, v->s, v->len, flags);
    case RMQ_FJ_ARRAY:
    case RMQ_FJ_OBJECT:
        return write_container(out, v, flags, indent);
    }
    return RMQ_ERR_INVALID;
}

int rmq__fj_write(rmq_buf_t *out, const rmq_fj_t *v, int flags)
{
    return write_value(out, v, flags, 0);
}
