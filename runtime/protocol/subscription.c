/*
 * subscription.c -- SubscriptionData building, fastjson form and tag filters (subscription.h).
 *
 * Ownership: every rmq_sub_t is owned by whoever built or duplicated it.
 * Threads: no shared state; callable from any thread.
 */
#include "subscription.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Java String.trim(): drop leading and trailing chars <= ' '. */
static void java_trim(const char **s, size_t *n)
{
    while (*n && (unsigned char)(*s)[0] <= ' ') {
        (*s)++;
        (*n)--;
    }
    while (*n && (unsigned char)(*s)[*n - 1] <= ' ')
        (*n)--;
}

/* HashMap.hash(): h ^ (h >>> 16). */
static uint32_t spread(int32_t h)
{
    uint32_t u = (uint32_t)h;
    return u ^ (u >> 16);
}

/* Final table size of a java.util.HashSet() after n distinct adds (load factor 0.75). */
static uint32_t hashset_capacity(int n)
{
    uint32_t cap = 16;
    while ((uint64_t)n * 4 > (uint64_t)cap * 3)
        cap <<= 1;
    return cap;
}

/* Stable reorder of idx[0..n) by bucket index (insertion sort keeps insertion order in a bucket).
 */
static void bucket_order(int *idx, const uint32_t *bucket, int n)
{
    int i, j;
    for (i = 1; i < n; i++) {
        int v = idx[i];
        for (j = i; j > 0 && bucket[idx[j - 1]] > bucket[v]; j--)
            idx[j] = idx[j - 1];
        idx[j] = v;
    }
}

static int add_tag(rmq_sub_t *sub, const char *t, size_t n, int *cap_tags)
{
    int i;
    int32_t code;
    for (i = 0; i < sub->n_tags; i++)
        if (strlen(sub->tags[i]) == n && !memcmp(sub->tags[i], t, n)) return 0;
    if (sub->n_tags == *cap_tags) {
        *cap_tags = *cap_tags ? *cap_tags * 2 : 4;
        sub->tags = realloc(sub->tags, sizeof(*sub->tags) * (size_t)*cap_tags);
        sub->codes = realloc(sub->codes, sizeof(*sub->codes) * (size_t)*cap_tags);
        if (!sub->tags || !sub->codes) abort();
    }
    sub->tags[sub->n_tags++] = rmq__xstrndup(t, n);
    code = rmq_java_hash(t, n);
    for (i = 0; i < sub->n_codes; i++)
        if (sub->codes[i] == code) return 0;
    sub->codes[sub->n_codes++] = code;
    return 0;
}

/* Put tags and codes into HashSet iteration order (both were collected in insertion order). */
static void to_hashset_order(rmq_sub_t *sub)
{
    int n = sub->n_tags > sub->n_codes ? sub->n_tags : sub->n_codes;
    int *idx, i;
    uint32_t *bucket, cap;
    if (n < 2) return;
    idx = rmq__xmalloc(sizeof(int) * (size_t)n);
    bucket = rmq__xmalloc(sizeof(uint32_t) * (size_t)n);

    cap = hashset_capacity(sub->n_tags);
    for (i = 0; i < sub->n_tags; i++) {
        idx[i] = i;
        bucket[i] = spread(rmq_java_hash(sub->tags[i], strlen(sub->tags[i]))) & (cap - 1);
    }
    bucket_order(idx, bucket, sub->n_tags);
    {
        char **t = rmq__xmalloc(sizeof(char *) * (size_t)sub->n_tags);
        for (i = 0; i < sub->n_tags; i++)
            t[i] = sub->tags[idx[i]];
        memcpy(sub->tags, t, sizeof(char *) * (size_t)sub->n_tags);
        free(t);
    }

    cap = hashset_capacity(sub->n_codes);
    for (i = 0; i < sub->n_codes; i++) {
        idx[i] = i;
        bucket[i] = spread(sub->codes[i]) & (cap - 1); /* Integer.hashCode() == value */
    }
    bucket_order(idx, bucket, sub->n_codes);
    {
        int32_t *c = rmq__xmalloc(sizeof(int32_t) * (size_t)(sub->n_codes ? sub->n_codes : 1));
        for (i = 0; i < sub->n_codes; i++)
            c[i] = sub->codes[idx[i]];
        memcpy(sub->codes, c, sizeof(int32_t) * (size_t)sub->n_codes);
        free(c);
    }
    free(idx);
    free(bucket);
}

int rmq__sub_build(const char *topic, const char *sub_string, const char *type, rmq_sub_t **out,
                   char *errstr, size_t errstr_size)
{
    rmq_sub_t *sub;
    int is_tag = !type || !*type || !strcmp(type, "TAG");
    *out = NULL;
    if (!is_tag && strcmp(type, "SQL92") != 0) {
        rmq__seterr(errstr, errstr_size,
                    "unknown expression type \"%s\" for topic %s (allowed: TAG, SQL92)", type,
                    topic ? topic : "null");
        return RMQ_ERR_INVALID;
    }
    if (!is_tag && (!sub_string || !*sub_string)) {
        rmq__seterr(errstr, errstr_size, "Expression can't be null! %s", type);
        return RMQ_ERR_INVALID;
    }
    sub = rmq__xcalloc(1, sizeof(*sub));
    sub->topic = rmq__xstrdup(topic ? topic : "");
    sub->expression_type = rmq__xstrdup(is_tag ? "TAG" : "SQL92");
    sub->sub_version = rmq__now_ms();
    if (!is_tag) {
        sub->sub_string = rmq__xstrdup(sub_string);
    } else if (!sub_string || !*sub_string || !strcmp(sub_string, RMQ_SUB_ALL)) {
        sub->sub_string = rmq__xstrdup(RMQ_SUB_ALL);
    } else {
        /* String.split("\\|\\|"): pieces between non-overlapping "||", trailing empties dropped. */
        const char *p = sub_string, *end = sub_string + strlen(sub_string);
        const char *last_nonempty_end = NULL;
        int cap_tags = 0;
        sub->sub_string = rmq__xstrdup(sub_string);
        for (;;) {
            const char *q = strstr(p, "||");
            const char *pe = q ? q : end;
            if (pe > p) last_nonempty_end = pe;
            if (!q) break;
            p = q + 2;
        }
        if (!last_nonempty_end) {
            rmq__sub_destroy(sub);
            rmq__seterr(errstr, errstr_size, "subString split error");
            return RMQ_ERR_INVALID;
        }
        p = sub_string;
        for (;;) {
            const char *q = strstr(p, "||");
            const char *pe = q ? q : end;
            const char *t = p;
            size_t n = (size_t)(pe - p);
            java_trim(&t, &n);
            if (n) add_tag(sub, t, n, &cap_tags);
            if (!q || pe >= last_nonempty_end) break;
            p = q + 2;
        }
        to_hashset_order(sub);
    }
    *out = sub;
    return RMQ_OK;
}

void rmq__sub_destroy(rmq_sub_t *sub)
{
    int i;
    if (!sub) return;
    for (i = 0; i < sub->n_tags; i++)
        free(sub->tags[i]);
    free(sub->tags);
    free(sub->codes);
    free(sub->topic);
    free(sub->sub_string);
    free(sub->expression_type);
    free(sub);
}

rmq_sub_t *rmq__sub_dup(const rmq_sub_t *s)
{
    rmq_sub_t *d = rmq__xcalloc(1, sizeof(*d));
    int i;
    *d = *s;
    d->topic = rmq__xstrdup(s->topic);
    d->sub_string = rmq__xstrdup(s->sub_string);
    d->expression_type = rmq__xstrdup(s->expression_type);
    d->tags = rmq__xmalloc(sizeof(char *) * (size_t)(s->n_tags ? s->n_tags : 1));
    for (i = 0; i < s->n_tags; i++)
        d->tags[i] = rmq__xstrdup(s->tags[i]);
    d->codes = rmq__xmalloc(sizeof(int32_t) * (size_t)(s->n_codes ? s->n_codes : 1));
    if (s->n_codes) memcpy(d->codes, s->codes, sizeof(int32_t) * (size_t)s->n_codes);
    return d;
}

int rmq__sub_is_all(const rmq_sub_t *sub)
{
    return sub->n_tags == 0 || sub->class_filter_mode;
}

int rmq__sub_to_json(const rmq_sub_t *sub, rmq_buf_t *b)
{
    int i, rc = 0;
    rc |= rmq__buf_appendf(b, "{\"classFilterMode\":%s,\"codeSet\":[",
                           sub->class_filter_mode ? "true" : "false");
    for (i = 0; i < sub->n_codes; i++)
        rc |= rmq__buf_appendf(b, "%s%" PRId32, i ? "," : "", sub->codes[i]);
    rc |= rmq__buf_append(b, "],\"expressionType\":", 19);
    rc |= rmq__buf_append_json_str(b, sub->expression_type, strlen(sub->expression_type));
    rc |= rmq__buf_append(b, ",\"subString\":", 13);
    rc |= rmq__buf_append_json_str(b, sub->sub_string, strlen(sub->sub_string));
    rc |= rmq__buf_appendf(b, ",\"subVersion\":%" PRId64 ",\"tagsSet\":[", sub->sub_version);
    for (i = 0; i < sub->n_tags; i++) {
        if (i) rc |= rmq__buf_append(b, ",", 1);
        rc |= rmq__buf_append_json_str(b, sub->tags[i], strlen(sub->tags[i]));
    }
    rc |= rmq__buf_append(b, "],\"topic\":", 10);
    rc |= rmq__buf_append_json_str(b, sub->topic, strlen(sub->topic));
    rc |= rmq__buf_append(b, "}", 1);
    return rc ? RMQ_ERR_NOMEM : RMQ_OK;
}

int rmq__sub_match_tags(const rmq_sub_t *sub, const char *tags, size_t len)
{
    int i;
    if (rmq__sub_is_all(sub)) return 1;
    if (!tags) return 0;
    for (i = 0; i < sub->n_tags; i++)
        if (strlen(sub->tags[i]) == len && !memcmp(sub->tags[i], tags, len)) return 1;
    return 0;
}

int rmq__sub_match_code(const rmq_sub_t *sub, int has_code, int64_t tags_code)
{
    int i;
    if (sub->class_filter_mode || !has_code) return 1;
    if (!strcmp(sub->sub_string, RMQ_SUB_ALL)) return 1;
    for (i = 0; i < sub->n_codes; i++)
        if (sub->codes[i] == (int32_t)(uint32_t)(uint64_t)tags_code) return 1;
    return 0;
}

/* ---- exports ---------------------------------------------------------------------------- */

rmq_sub_t *rmq_sub_build(const char *topic, const char *sub_string, const char *type, char *errstr,
                         size_t errstr_size)
{
    rmq_sub_t *s = NULL;
    rmq__sub_build(topic, sub_string, type, &s, errstr, errstr_size);
    return s;
}

void rmq_sub_destroy(rmq_sub_t *sub)
{
    rmq__sub_destroy(sub);
}

size_t rmq_sub_to_json(const rmq_sub_t *sub, char *out, size_t out_size)
{
    rmq_buf_t b;
    rmq__buf_init(&b);
    rmq__sub_to_json(sub, &b);
    return rmq__buf_give(&b, out, out_size);
}

int rmq_sub_match_tags(const rmq_sub_t *sub, const char *tags, size_t len)
{
    return rmq__sub_match_tags(sub, tags, len);
}

int rmq_sub_match_code(const rmq_sub_t *sub, int has_code, int64_t tags_code)
{
    return rmq__sub_match_code(sub, has_code, tags_code);
}
