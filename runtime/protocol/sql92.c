/*
 * sql92.c -- the SQL92 selector of RocketMQ 4.9.4 (sql92.h): the evaluator, with the evaluate()
 * rules of the Java expression classes, the Java number texts and toString forms, and the API.
 * The lexer, the parser and the expression factories' checks that build the tree are in
 * sql92_parse.c; the tree and the values in sql92_int.h.
 *
 * Java's Expression.evaluate returns an Object (null, Boolean, Integer, Long, Double, String) or
 * throws; here a value is a tagged union and a throw is an ERROR status carried up the recursion
 * (nothing catches it on the way, as in Java, so one bad comparison fails the whole selector).
 *
 * Not emulated: Integer/Long.valueOf accept Unicode decimal digits of other scripts (only ASCII
 * here), and String.compareTo orders by UTF-16 code unit where this compares UTF-8 bytes (only
 * equality of strings reaches a comparison, so the outcome is the same).
 *
 * Ownership: a compiled expression is one arena (a chain of blocks) holding the tree and the
 * strings of its constants and names; rmq__sql92_free releases it.
 * Threads: no shared state; a compiled expression is read-only.
 */
#include "sql92_int.h"

#include "message.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

/* ---- Java number texts ------------------------------------------------------------------------
 */

/* Double.toString (shortest digits that read back; Java's layout: 0.001 <= |d| < 1e7 plain,
 * otherwise d.dddE[-]n). */
void rmq__java_double_str(double d, char *out, size_t size)
{
    if (isnan(d)) {
        snprintf(out, size, "NaN");
        return;
    }
    if (isinf(d)) {
        snprintf(out, size, "%s", d < 0 ? "-Infinity" : "Infinity");
        return;
    }
    if (d == 0) {
        snprintf(out, size, "%s", signbit(d) ? "-0.0" : "0.0");
        return;
    }
    char buf[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof(buf), "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d) break;
    }
    /* buf: [-]D[.DDD]e[+-]XX */
    char digits[24];
    int nd = 0, neg = buf[0] == '-';
    const char *p = buf + neg;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char *o = out;
    size_t left = size;
#define PUT(ch)                                                                                    \
    do {                                                                                           \
        if (left > 1) {                                                                            \
            *o++ = (ch);                                                                           \
            left--;                                                                                \
        }                                                                                          \
    } while (0)
    if (neg) PUT('-');
    if (exp >= -3 && exp < 7) {
        if (exp < 0) {
            PUT('0');
            PUT('.');
            for (int i = -1; i > exp; i--)
                PUT('0');
            for (int i = 0; i < nd; i++)
                PUT(digits[i]);
        } else {
            for (int i = 0; i <= exp; i++)
                PUT(i < nd ? digits[i] : '0');
            PUT('.');
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++)
                    PUT(digits[i]);
            else
                PUT('0');
        }
    } else {
        PUT(digits[0]);
        PUT('.');
        if (nd > 1)
            for (int i = 1; i < nd; i++)
                PUT(digits[i]);
        else
            PUT('0');
        PUT('E');
        char eb[8];
        snprintf(eb, sizeof(eb), "%d", exp);
        for (char *q = eb; *q; q++)
            PUT(*q);
    }
#undef PUT
    *o = 0;
}

/* Integer.parseInt / Long.parseLong (radix 10): [+-]?digits, no blanks, within range. */
int rmq__sql92_parse_long(const char *s, size_t n, int64_t min, int64_t max, int64_t *out)
{
    size_t i = 0;
    int neg = 0;
    if (n == 0) return -1;
    if (s[0] == '-' || s[0] == '+') {
        neg = s[0] == '-';
        if (n == 1) return -1;
        i = 1;
    }
    uint64_t v = 0, lim = neg ? (uint64_t)0 - (uint64_t)min : (uint64_t)max;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (lim - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)((uint64_t)0 - v) : (int64_t)v;
    return 0;
}

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/*
 * Double.valueOf(String) (FloatingDecimal.readJavaFormatString): surrounding chars <= ' ' are
 * trimmed; [+-]? then "NaN", "Infinity", a decimal (digits, optional point and fraction, at
 * least one digit, optional exponent) or a hex float (0x..p..), then an optional f/F/d/D.
 */
static int java_parse_double(const char *s, size_t n, double *out)
{
    while (n && (unsigned char)s[0] <= ' ')
        s++, n--;
    while (n && (unsigned char)s[n - 1] <= ' ')
        n--;
    if (n == 0) return -1;
    size_t i = 0;
    int neg = 0;
    if (s[0] == '+' || s[0] == '-') neg = s[0] == '-', i++;
    if (n - i == 3 && !memcmp(s + i, "NaN", 3)) {
        *out = NAN;
        return 0;
    }
    if (n - i == 8 && !memcmp(s + i, "Infinity", 8)) {
        *out = neg ? -INFINITY : INFINITY;
        return 0;
    }
    size_t start = i, end = n;
    char last = s[end - 1];
    if (end > i && (last == 'f' || last == 'F' || last == 'd' || last == 'D')) end--; /* suffix */
    if (end - i >= 2 && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'X')) {
        /* hex: 0x h* [. h*] p [+-] d+ with at least one hex digit */
        size_t j = i + 2, hd = 0;
        while (j < end && is_hex(s[j]))
            j++, hd++;
        if (j < end && s[j] == '.') {
            j++;
            while (j < end && is_hex(s[j]))
                j++, hd++;
        }
        if (!hd || j >= end || (s[j] != 'p' && s[j] != 'P')) return -1;
        j++;
        if (j < end && (s[j] == '+' || s[j] == '-')) j++;
        size_t ed = 0;
        while (j < end && s[j] >= '0' && s[j] <= '9')
            j++, ed++;
        if (!ed || j != end) return -1;
    } else {
        size_t j = i, dd = 0;
        while (j < end && s[j] >= '0' && s[j] <= '9')
            j++, dd++;
        if (j < end && s[j] == '.') {
            j++;
            while (j < end && s[j] >= '0' && s[j] <= '9')
                j++, dd++;
        }
        if (!dd) return -1;
        if (j < end && (s[j] == 'e' || s[j] == 'E')) {
            j++;
            if (j < end && (s[j] == '+' || s[j] == '-')) j++;
            size_t ed = 0;
            while (j < end && s[j] >= '0' && s[j] <= '9')
                j++, ed++;
            if (!ed) return -1;
        }
        if (j != end) return -1;
    }
    char tmp[512];
    size_t len = end - start;
    char *buf = len < sizeof(tmp) ? tmp : rmq__xmalloc(len + 1);
    memcpy(buf, s + start, len);
    buf[len] = 0;
    double d = strtod(buf, NULL);
    if (buf != tmp) free(buf);
    *out = neg ? -d : d;
    return 0;
}

/* ---- toString (for messages) -------------------------------------------------------------------
 */

void rmq__sql92_val_str(const val_t *v, int quote, rmq_buf_t *b)
{
    char num[40];
    switch (v->t) {
    case V_NULL:
        rmq__buf_append(b, "NULL", 4);
        break;
    case V_BOOL:
        rmq__buf_appendf(b, "%s", v->u.b ? (quote ? "TRUE" : "true") : (quote ? "FALSE" : "false"));
        break;
    case V_INT:
        rmq__buf_appendf(b, "%d", (int)v->u.i);
        break;
    case V_LONG:
        rmq__buf_appendf(b, "%lld", (long long)v->u.l);
        break;
    case V_DOUBLE:
        rmq__java_double_str(v->u.d, num, sizeof(num));
        rmq__buf_appendf(b, "%s", num);
        break;
    case V_STR:
        if (!quote) {
            rmq__buf_append(b, v->u.s.p, v->u.s.n);
            break;
        }
        /* ConstantExpression.encodeString */
        rmq__buf_append(b, "'", 1);
        for (size_t i = 0; i < v->u.s.n; i++) {
            if (v->u.s.p[i] == '\'') rmq__buf_append(b, "'", 1);
            rmq__buf_append(b, v->u.s.p + i, 1);
        }
        rmq__buf_append(b, "'", 1);
        break;
    }
}

static const char *sym_of(nk_t k)
{
    switch (k) {
    case N_AND:
        return "&&";
    case N_OR:
        return "||";
    case N_EQ:
        return "==";
    case N_GT:
        return ">";
    case N_GE:
        return ">=";
    case N_LT:
        return "<";
    case N_LE:
        return "<=";
    case N_NOT:
        return "NOT";
    case N_NEG:
        return "-";
    default:
        return "?";
    }
}

void rmq__sql92_node_str(const node_t *n, rmq_buf_t *b)
{
    switch (n->k) {
    case N_CONST:
        rmq__sql92_val_str(&n->v, 1, b);
        break;
    case N_PROP:
        rmq__buf_append(b, n->name, n->name_len);
        break;
    case N_CAST:
        rmq__sql92_node_str(n->l, b);
        break;
    case N_NEG:
    case N_NOT:
        rmq__buf_appendf(b, "(%s ", sym_of(n->k));
        rmq__sql92_node_str(n->l, b);
        rmq__buf_append(b, ")", 1);
        break;
    case N_IN:
        rmq__sql92_node_str(n->l, b);
        rmq__buf_appendf(b, " %s ( ", n->not_in ? "NOT IN" : "IN");
        for (int i = 0; i < n->n_list; i++) {
            if (i) rmq__buf_append(b, ", ", 2);
            rmq__sql92_val_str(&n->list[i], 0, b);
        }
        rmq__buf_append(b, " )", 2);
        break;
    default:
        rmq__buf_append(b, "(", 1);
        rmq__sql92_node_str(n->l, b);
        rmq__buf_appendf(b, " %s ", sym_of(n->k));
        rmq__sql92_node_str(n->r, b);
        rmq__buf_append(b, ")", 1);
        break;
    }
}

/* ---- __compare (ComparisonExpression.__compare with convertStringExpressions) ------------------
 */

typedef struct ectx {
    const char *props;
    size_t props_len;
    char *err;
    size_t err_size;
} ectx_t;

/* Record what Java would have thrown; returns -1 (the ERROR status of the helpers). */
static int throw_(char *err, size_t size, const char *fmt, ...) RMQ_PRINTF(3, 4);
static int throw_(char *err, size_t size, const char *fmt, ...)
{
    if (err && size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, size, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int nfe(char *err, size_t size, const val_t *s)
{
    return throw_(err, size, "java.lang.NumberFormatException: For input string: \"%.*s\"",
                  (int)(s->u.s.n > 200 ? 200 : s->u.s.n), s->u.s.p);
}

static int to_int(val_t *v, char *err, size_t size)
{
    int64_t x;
    if (rmq__sql92_parse_long(v->u.s.p, v->u.s.n, INT32_MIN, INT32_MAX, &x))
        return nfe(err, size, v);
    v->t = V_INT;
    v->u.i = (int32_t)x;
    return 0;
}

static int to_long(val_t *v, char *err, size_t size)
{
    int64_t x;
    if (rmq__sql92_parse_long(v->u.s.p, v->u.s.n, INT64_MIN, INT64_MAX, &x))
        return nfe(err, size, v);
    v->t = V_LONG;
    v->u.l = x;
    return 0;
}

static int to_double(val_t *v, char *err, size_t size)
{
    double d;
    if (java_parse_double(v->u.s.p, v->u.s.n, &d)) return nfe(err, size, v);
    v->t = V_DOUBLE;
    v->u.d = d;
    return 0;
}

static void widen(val_t *v, vt_t to)
{
    if (to == V_LONG && v->t == V_INT)
        v->u.l = v->u.i;
    else if (to == V_DOUBLE && v->t == V_INT)
        v->u.d = v->u.i;
    else if (to == V_DOUBLE && v->t == V_LONG)
        v->u.d = (double)v->u.l;
    v->t = to;
}

/* Double.compare: -0.0 < 0.0, NaN equal to itself and above everything. */
static int double_cmp(double a, double b)
{
    if (a < b) return -1;
    if (a > b) return 1;
    if (isnan(a) || isnan(b)) return isnan(a) ? (isnan(b) ? 0 : 1) : -1;
    if (a == 0 && b == 0) return signbit(a) == signbit(b) ? 0 : (signbit(a) ? -1 : 1);
    return 0;
}

/* __compare(lv, rv, true): 0 with *res (<0, 0, >0), or -1 when Java throws (err set). */
int rmq__sql92_compare(val_t lv, val_t rv, int *res, char *err, size_t size)
{
    if (lv.t != rv.t) {
        switch (lv.t) {
        case V_BOOL:
            if (rv.t == V_STR)
                return throw_(err, size,
                              "java.lang.ClassCastException: java.lang.Boolean cannot "
                              "be cast to java.lang.String");
            *res = -1;
            return 0;
        case V_INT:
            if (rv.t == V_LONG || rv.t == V_DOUBLE)
                widen(&lv, rv.t);
            else if (rv.t == V_STR) {
                if (to_int(&rv, err, size)) return -1;
            } else {
                *res = -1;
                return 0;
            }
            break;
        case V_LONG:
            if (rv.t == V_INT)
                widen(&rv, V_LONG);
            else if (rv.t == V_DOUBLE)
                widen(&lv, V_DOUBLE);
            else if (rv.t == V_STR) {
                if (to_long(&rv, err, size)) return -1;
            } else {
                *res = -1;
                return 0;
            }
            break;
        case V_DOUBLE:
            if (rv.t == V_INT || rv.t == V_LONG)
                widen(&rv, V_DOUBLE);
            else if (rv.t == V_STR) {
                if (to_double(&rv, err, size)) return -1;
            } else {
                *res = -1;
                return 0;
            }
            break;
        case V_STR:
            if (rv.t == V_BOOL) {
                lv.u.b = lv.u.s.n == 4 && !strncasecmp(lv.u.s.p, "true", 4); /* Boolean.valueOf */
                lv.t = V_BOOL;
            } else if (rv.t == V_INT) {
                if (to_int(&lv, err, size)) return -1;
            } else if (rv.t == V_LONG) {
                if (to_long(&lv, err, size)) return -1;
            } else if (rv.t == V_DOUBLE) {
                if (to_double(&lv, err, size)) return -1;
            } else {
                *res = -1;
                return 0;
            }
            break;
        default:
            *res = -1;
            return 0;
        }
    }
    switch (lv.t) {
    case V_BOOL:
        *res = lv.u.b == rv.u.b ? 0 : (lv.u.b ? 1 : -1);
        break;
    case V_INT:
        *res = lv.u.i < rv.u.i ? -1 : lv.u.i > rv.u.i;
        break;
    case V_LONG:
        *res = lv.u.l < rv.u.l ? -1 : lv.u.l > rv.u.l;
        break;
    case V_DOUBLE:
        *res = double_cmp(lv.u.d, rv.u.d);
        break;
    case V_STR: {
        size_t n = lv.u.s.n < rv.u.s.n ? lv.u.s.n : rv.u.s.n;
        int c = memcmp(lv.u.s.p, rv.u.s.p, n);
        *res = c ? c : (lv.u.s.n < rv.u.s.n ? -1 : lv.u.s.n > rv.u.s.n);
        break;
    }
    default:
        *res = 0;
        break;
    }
    return 0;
}

/* Object.equals of two values (Double.equals compares bits: NaN equals NaN, 0.0 not -0.0). */
static int jequals(const val_t *a, const val_t *b)
{
    if (a->t != b->t) return 0;
    switch (a->t) {
    case V_BOOL:
        return a->u.b == b->u.b;
    case V_INT:
        return a->u.i == b->u.i;
    case V_LONG:
        return a->u.l == b->u.l;
    case V_DOUBLE:
        return double_cmp(a->u.d, b->u.d) == 0;
    case V_STR:
        return a->u.s.n == b->u.s.n && !memcmp(a->u.s.p, b->u.s.p, a->u.s.n);
    default:
        return 1;
    }
}

/* ---- evaluation -------------------------------------------------------------------------------
 */

static int eval(const node_t *n, const ectx_t *c, val_t *out);

static void set_bool(val_t *out, int b)
{
    out->t = V_BOOL;
    out->u.b = b != 0;
}

/* The Boolean an operand of AND/OR/NOT yields: 1/0, or 2 for null; -1 when it threw. */
static int eval_bool(const node_t *n, const ectx_t *c)
{
    val_t v;
    if (eval(n, c, &v)) return -1;
    if (v.t == V_NULL) return 2;
    if (v.t != V_BOOL)
        return throw_(c->err, c->err_size,
                      "java.lang.ClassCastException: the value is not a "
                      "java.lang.Boolean");
    return v.u.b;
}

static int eval(const node_t *n, const ectx_t *c, val_t *out)
{
    val_t lv, rv;
    int x, y, cmp;
    switch (n->k) {
    case N_CONST:
        *out = n->v;
        return 0;
    case N_PROP: {
        uint32_t vl = 0;
        const char *v =
            c->props ? rmq__props_find(c->props, c->props_len, n->name, n->name_len, &vl) : NULL;
        if (!v) {
            out->t = V_NULL;
        } else {
            out->t = V_STR;
            out->u.s.p = v;
            out->u.s.n = vl;
        }
        return 0;
    }
    case N_NEG:
        if (eval(n->l, c, &lv)) return -1;
        if (lv.t == V_INT)
            lv.u.i = (int32_t)(0u - (uint32_t)lv.u.i);
        else if (lv.t == V_LONG)
            lv.u.l = (int64_t)(0ull - (uint64_t)lv.u.l);
        else if (lv.t == V_DOUBLE)
            lv.u.d = -lv.u.d;
        else
            lv.t = V_NULL; /* not a Number: null */
        *out = lv;
        return 0;
    case N_NOT:
        if ((x = eval_bool(n->l, c)) < 0) return -1;
        if (x == 2)
            out->t = V_NULL;
        else
            set_bool(out, !x);
        return 0;
    case N_CAST:
        if (eval(n->l, c, &lv)) return -1;
        if (lv.t == V_NULL)
            out->t = V_NULL;
        else
            set_bool(out, lv.t == V_BOOL && lv.u.b);
        return 0;
    case N_OR:
    case N_AND: {
        /* The side that decides alone (TRUE for OR, FALSE for AND) wins, the right side unread
         * when the left one decides; else NULL when a side is NULL. */
        int decides = n->k == N_OR;
        if ((x = eval_bool(n->l, c)) < 0) return -1;
        if (x == decides) {
            set_bool(out, decides);
            return 0;
        }
        if ((y = eval_bool(n->r, c)) < 0) return -1;
        if (y == decides)
            set_bool(out, decides);
        else if (x == 2 || y == 2)
            out->t = V_NULL;
        else
            set_bool(out, !decides);
        return 0;
    }
    case N_EQ:
        /* doCreateEqual: both sides first, then null rules, equals, compare. */
        if (eval(n->l, c, &lv) || eval(n->r, c, &rv)) return -1;
        if ((lv.t == V_NULL) != (rv.t == V_NULL)) {
            if (lv.t == V_NULL)
                out->t = V_NULL;
            else
                set_bool(out, 0);
            return 0;
        }
        if (lv.t == V_NULL || jequals(&lv, &rv)) {
            set_bool(out, 1);
            return 0;
        }
        if (rmq__sql92_compare(lv, rv, &cmp, c->err, c->err_size)) return -1;
        set_bool(out, cmp == 0);
        return 0;
    case N_GT:
    case N_GE:
    case N_LT:
    case N_LE:
        /* ComparisonExpression.evaluate */
        if (eval(n->l, c, &lv)) return -1;
        if (lv.t == V_NULL) {
            out->t = V_NULL;
            return 0;
        }
        if (eval(n->r, c, &rv)) return -1;
        if (rv.t == V_NULL) {
            out->t = V_NULL;
            return 0;
        }
        if (lv.t == V_STR && rv.t == V_STR) {
            val_t a = lv, b = rv;
            if (to_double(&a, NULL, 0) || to_double(&b, NULL, 0))
                return throw_(c->err, c->err_size,
                              "java.lang.RuntimeException: It's illegal to compare string by "
                              "'>=', '>', '<', '<='. lv=%.*s, rv=%.*s",
                              (int)(lv.u.s.n > 100 ? 100 : lv.u.s.n), lv.u.s.p,
                              (int)(rv.u.s.n > 100 ? 100 : rv.u.s.n), rv.u.s.p);
            cmp = double_cmp(a.u.d, b.u.d);
        } else if (rmq__sql92_compare(lv, rv, &cmp, c->err, c->err_size)) {
            return -1;
        }
        set_bool(out, n->k == N_GT   ? cmp > 0
                      : n->k == N_GE ? cmp >= 0
                      : n->k == N_LT ? cmp < 0
                                     : cmp <= 0);
        return 0;
    case N_IN:
        if (eval(n->l, c, &lv)) return -1;
        if (lv.t != V_STR) {
            out->t = V_NULL;
            return 0;
        }
        x = 0;
        for (int i = 0; i < n->n_list && !x; i++)
            x = jequals(&lv, &n->list[i]);
        set_bool(out, x ^ n->not_in);
        return 0;
    }
    out->t = V_NULL;
    return 0;
}

int rmq__sql92_eval(const rmq_sql92_t *e, const char *props, size_t props_len, char *errstr,
                    size_t errstr_size)
{
    ectx_t c = {props, props_len, errstr, errstr_size};
    val_t v;
    if (errstr && errstr_size) errstr[0] = 0;
    if (eval(e->root, &c, &v)) return RMQ_SQL92_ERROR;
    if (v.t == V_NULL) return RMQ_SQL92_NULL;
    if (v.t != V_BOOL) return RMQ_SQL92_FALSE; /* not a Boolean: no match */
    return v.u.b ? RMQ_SQL92_TRUE : RMQ_SQL92_FALSE;
}

/* ---- API ------------------------------------------------------------------------------------- */

void rmq__sql92_free(rmq_sql92_t *e)
{
    if (!e) return;
    for (chunk_t *c = e->arena, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    free(e);
}

int rmq__sql92_ignored(const rmq_sql92_t *e)
{
    return e->ignored;
}

size_t rmq__sql92_to_string(const rmq_sql92_t *e, char *out, size_t out_size)
{
    rmq_buf_t b;
    rmq__buf_init(&b);
    rmq__sql92_node_str(e->root, &b);
    return rmq__buf_give(&b, out, out_size);
}

/* ---- exports --------------------------------------------------------------------------------- */

RMQ_EXPORT rmq_sql92_t *rmq_sql92_compile(const char *expr, char *errstr, size_t errstr_size)
{
    rmq_sql92_t *e = NULL;
    rmq__sql92_compile(expr, &e, errstr, errstr_size, NULL);
    return e;
}

RMQ_EXPORT void rmq_sql92_free(rmq_sql92_t *e)
{
    rmq__sql92_free(e);
}

RMQ_EXPORT int rmq_sql92_eval(const rmq_sql92_t *e, const char *props, size_t props_len,
                              char *errstr, size_t errstr_size)
{
    return rmq__sql92_eval(e, props, props_len, errstr, errstr_size);
}

RMQ_EXPORT int rmq_sql92_ignored(const rmq_sql92_t *e)
{
    return rmq__sql92_ignored(e);
}

RMQ_EXPORT size_t rmq_sql92_to_string(const rmq_sql92_t *e, char *out, size_t out_size)
{
    return rmq__sql92_to_string(e, out, out_size);
}
