/*
 * sql92.c -- the SQL92 selector of RocketMQ 4.9.4 (sql92.h): a lazy lexer and a recursive
 * descent parser shaped like the JavaCC-generated SelectorParser, the expression factories'
 * checks (ComparisonExpression.createXxx, ConstantExpression.createFromDecimal/createFloat,
 * SelectorParser.asBooleanExpression), and an evaluator with the evaluate() rules of the Java
 * expression classes.
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
#include "sql92.h"

#include "message.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#define CLS_PARSE "org.apache.rocketmq.filter.parser.ParseException"
#define CLS_TOKEN "org.apache.rocketmq.filter.parser.TokenMgrError"
#define CLS_RUNTIME "java.lang.RuntimeException"
#define CLS_NUMBER "java.lang.NumberFormatException"

/* ---- values (what Expression.evaluate returns) ----------------------------------------------- */

typedef enum { V_NULL = 0, V_BOOL, V_INT, V_LONG, V_DOUBLE, V_STR } vt_t;

typedef struct val {
    vt_t t;
    union {
        int b;
        int32_t i;
        int64_t l;
        double d;
        struct {
            const char *p;
            size_t n;
        } s;
    } u;
} val_t;

static int is_number(const val_t *v)
{
    return v->t == V_INT || v->t == V_LONG || v->t == V_DOUBLE;
}

/* ---- the tree ------------------------------------------------------------------------------- */

typedef enum {
    N_CONST, /* ConstantExpression (NULL/TRUE/FALSE are BooleanConstantExpression) */
    N_PROP,  /* PropertyExpression */
    N_NEG,   /* UnaryExpression.createNegate */
    N_NOT,   /* UnaryExpression.createNOT */
    N_CAST,  /* UnaryExpression.createBooleanCast (a property used as a boolean) */
    N_AND,   /* LogicExpression.createAND */
    N_OR,    /* LogicExpression.createOR */
    N_EQ,    /* ComparisonExpression.doCreateEqual */
    N_GT,
    N_GE,
    N_LT,
    N_LE,
    N_IN /* UnaryExpression.createInExpression */
} nk_t;

typedef struct node {
    nk_t k;
    int depth;
    struct node *l, *r; /* operands; unary ones use l */
    val_t v;            /* N_CONST */
    const char *name;   /* N_PROP, NUL-terminated */
    size_t name_len;
    int not_in; /* N_IN */
    int n_list;
    val_t *list;
} node_t;

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    char data[];
} chunk_t;

struct rmq_sql92 {
    chunk_t *arena;
    node_t *root;
    int ignored; /* offset of the first token after the expression, or -1 */
};

static void *arena_alloc(struct rmq_sql92 *e, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    chunk_t *c = e->arena;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 4096 ? n : 4096;
        c = rmq__xmalloc(sizeof(*c) + cap);
        c->next = e->arena;
        c->used = 0;
        c->cap = cap;
        e->arena = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

static char *arena_strndup(struct rmq_sql92 *e, const char *s, size_t n)
{
    char *d = arena_alloc(e, n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

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
static int java_parse_long(const char *s, size_t n, int64_t min, int64_t max, int64_t *out)
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

static void val_str(const val_t *v, int quote, rmq_buf_t *b)
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

static void node_str(const node_t *n, rmq_buf_t *b)
{
    switch (n->k) {
    case N_CONST:
        val_str(&n->v, 1, b);
        break;
    case N_PROP:
        rmq__buf_append(b, n->name, n->name_len);
        break;
    case N_CAST:
        node_str(n->l, b);
        break;
    case N_NEG:
    case N_NOT:
        rmq__buf_appendf(b, "(%s ", sym_of(n->k));
        node_str(n->l, b);
        rmq__buf_append(b, ")", 1);
        break;
    case N_IN:
        node_str(n->l, b);
        rmq__buf_appendf(b, " %s ( ", n->not_in ? "NOT IN" : "IN");
        for (int i = 0; i < n->n_list; i++) {
            if (i) rmq__buf_append(b, ", ", 2);
            val_str(&n->list[i], 0, b);
        }
        rmq__buf_append(b, " )", 2);
        break;
    default:
        rmq__buf_append(b, "(", 1);
        node_str(n->l, b);
        rmq__buf_appendf(b, " %s ", sym_of(n->k));
        node_str(n->r, b);
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
    if (java_parse_long(v->u.s.p, v->u.s.n, INT32_MIN, INT32_MAX, &x)) return nfe(err, size, v);
    v->t = V_INT;
    v->u.i = (int32_t)x;
    return 0;
}

static int to_long(val_t *v, char *err, size_t size)
{
    int64_t x;
    if (java_parse_long(v->u.s.p, v->u.s.n, INT64_MIN, INT64_MAX, &x)) return nfe(err, size, v);
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
static int jcompare(val_t lv, val_t rv, int *res, char *err, size_t size)
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
        if ((x = eval_bool(n->l, c)) < 0) return -1;
        if (x == 1) {
            set_bool(out, 1);
            return 0;
        }
        if ((y = eval_bool(n->r, c)) < 0) return -1;
        if (y == 1)
            set_bool(out, 1);
        else if (x == 2 || y == 2)
            out->t = V_NULL;
        else
            set_bool(out, 0);
        return 0;
    case N_AND:
        if ((x = eval_bool(n->l, c)) < 0) return -1;
        if (x == 0) {
            set_bool(out, 0);
            return 0;
        }
        if ((y = eval_bool(n->r, c)) < 0) return -1;
        if (y == 0)
            set_bool(out, 0);
        else if (x == 2 || y == 2)
            out->t = V_NULL;
        else
            set_bool(out, 1);
        return 0;
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
        if (jcompare(lv, rv, &cmp, c->err, c->err_size)) return -1;
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
        } else if (jcompare(lv, rv, &cmp, c->err, c->err_size)) {
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

/* ---- lexer (SelectorParserTokenManager) -------------------------------------------------------
 */

typedef enum {
    T_EOF = 0,
    T_NOT,
    T_AND,
    T_OR,
    T_BETWEEN,
    T_IN,
    T_TRUE,
    T_FALSE,
    T_NULL,
    T_IS,
    T_DEC,
    T_FLOAT,
    T_STR,
    T_ID,
    T_EQ,
    T_NE,
    T_GT,
    T_GE,
    T_LT,
    T_LE,
    T_LP,
    T_COMMA,
    T_RP,
    T_PLUS,
    T_MINUS
} tk_t;

static const char *const tok_names[] = {"<EOF>",
                                        "\"NOT\"",
                                        "\"AND\"",
                                        "\"OR\"",
                                        "\"BETWEEN\"",
                                        "\"IN\"",
                                        "\"TRUE\"",
                                        "\"FALSE\"",
                                        "\"NULL\"",
                                        "\"IS\"",
                                        "<DECIMAL_LITERAL>",
                                        "<FLOATING_POINT_LITERAL>",
                                        "<STRING_LITERAL>",
                                        "<ID>",
                                        "\"=\"",
                                        "\"<>\"",
                                        "\">\"",
                                        "\">=\"",
                                        "\"<\"",
                                        "\"<=\"",
                                        "\"(\"",
                                        "\",\"",
                                        "\")\"",
                                        "\"+\"",
                                        "\"-\""};

static const struct {
    const char *word;
    tk_t k;
} keywords[] = {{"NOT", T_NOT},         {"AND", T_AND},   {"OR", T_OR},
                {"BETWEEN", T_BETWEEN}, {"IN", T_IN},     {"TRUE", T_TRUE},
                {"FALSE", T_FALSE},     {"NULL", T_NULL}, {"IS", T_IS}};

typedef struct tok {
    tk_t k;
    const char *p; /* image */
    size_t n;
    int line, col;
    size_t off;
} tok_t;

typedef struct parser {
    const char *src;
    size_t len, pos;
    int line, col;
    tok_t la[2]; /* lexed, not yet consumed */
    int nla;
    struct rmq_sql92 *e;
    int depth;
    int failed;
    const char *jclass;
    char *err;
    size_t err_size;
} parser_t;

static void fail(parser_t *p, const char *cls, const char *fmt, ...) RMQ_PRINTF(3, 4);
static void fail(parser_t *p, const char *cls, const char *fmt, ...)
{
    if (p->failed) return;
    p->failed = 1;
    p->jclass = cls;
    if (p->err && p->err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err, p->err_size, fmt, ap);
        va_end(ap);
    }
}

static void advance(parser_t *p, size_t n)
{
    for (size_t i = 0; i < n && p->pos < p->len; i++) {
        unsigned char ch = (unsigned char)p->src[p->pos++];
        if (ch == '\n' || (ch == '\r' && !(p->pos < p->len && p->src[p->pos] == '\n'))) {
            p->line++;
            p->col = 1;
        } else if ((ch & 0xC0) != 0x80) {
            p->col++;
        }
    }
}

static int id_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$';
}

static int id_part(char c)
{
    return id_start(c) || (c >= '0' && c <= '9');
}

static size_t digits(const char *s, size_t i, size_t n)
{
    size_t j = i;
    while (j < n && s[j] >= '0' && s[j] <= '9')
        j++;
    return j - i;
}

/* Length of EXPONENT at s[i] ("E" [+-]? digits), 0 when none. */
static size_t exponent(const char *s, size_t i, size_t n)
{
    if (i >= n || (s[i] != 'e' && s[i] != 'E')) return 0;
    size_t j = i + 1;
    if (j < n && (s[j] == '+' || s[j] == '-')) j++;
    size_t d = digits(s, j, n);
    return d ? j + d - i : 0;
}

/* Lex the next token into *t (skipping blanks and comments). 0, or -1 after a lexical error. */
static int lex(parser_t *p, tok_t *t)
{
    const char *s = p->src;
    size_t n = p->len;
    for (;;) {
        if (p->pos >= n) break;
        char c = s[p->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f') {
            advance(p, 1);
            continue;
        }
        if (c == '-' && p->pos + 1 < n && s[p->pos + 1] == '-') {
            /* LINE_COMMENT needs its line end; without one the longest token is "-". */
            size_t j = p->pos + 2;
            while (j < n && s[j] != '\n' && s[j] != '\r')
                j++;
            if (j < n) {
                if (s[j] == '\r' && j + 1 < n && s[j + 1] == '\n') j++;
                advance(p, j + 1 - p->pos);
                continue;
            }
        }
        if (c == '/' && p->pos + 1 < n && s[p->pos + 1] == '*') {
            const char *end = NULL;
            for (size_t j = p->pos + 2; j + 1 < n; j++)
                if (s[j] == '*' && s[j + 1] == '/') {
                    end = s + j + 2;
                    break;
                }
            if (end) {
                advance(p, (size_t)(end - (s + p->pos)));
                continue;
            }
        }
        break;
    }
    memset(t, 0, sizeof(*t));
    t->p = s + p->pos;
    t->off = p->pos;
    t->line = p->line;
    t->col = p->col;
    if (p->pos >= n) {
        t->k = T_EOF;
        return 0;
    }
    size_t i = p->pos, len = 0;
    char c = s[i];
    if (id_start(c)) {
        len = 1;
        while (i + len < n && id_part(s[i + len]))
            len++;
        t->k = T_ID;
        for (size_t k = 0; k < RMQ_ARRAY_SIZE(keywords); k++)
            if (strlen(keywords[k].word) == len && !strncasecmp(keywords[k].word, s + i, len))
                t->k = keywords[k].k;
    } else if ((c >= '0' && c <= '9') || c == '.') {
        size_t dec = 0, flt = 0;
        if (c == '0') {
            dec = 1;
        } else if (c != '.') {
            dec = digits(s, i, n);
            if (i + dec < n && (s[i + dec] == 'l' || s[i + dec] == 'L')) dec++;
        }
        size_t d0 = digits(s, i, n);
        if (d0 && i + d0 < n && s[i + d0] == '.') {
            size_t j = i + d0 + 1;
            j += digits(s, j, n);
            j += exponent(s, j, n);
            flt = j - i;
        } else if (d0) {
            size_t ex = exponent(s, i + d0, n);
            if (ex) flt = d0 + ex;
        } else if (c == '.') {
            size_t d1 = digits(s, i + 1, n);
            if (d1) flt = 1 + d1 + exponent(s, i + 1 + d1, n);
        }
        if (flt > dec) {
            t->k = T_FLOAT;
            len = flt;
        } else if (dec) {
            t->k = T_DEC;
            len = dec;
        }
    } else if (c == '\'') {
        size_t j = i + 1;
        for (;;) {
            if (j >= n) {
                j = 0;
                break;
            }
            if (s[j] == '\'') {
                if (j + 1 < n && s[j + 1] == '\'') {
                    j += 2;
                    continue;
                }
                break;
            }
            j++;
        }
        if (j) {
            t->k = T_STR;
            len = j + 1 - i;
        }
    } else {
        char d = i + 1 < n ? s[i + 1] : 0;
        len = 1;
        switch (c) {
        case '=':
            t->k = T_EQ;
            break;
        case '<':
            if (d == '>')
                t->k = T_NE, len = 2;
            else if (d == '=')
                t->k = T_LE, len = 2;
            else
                t->k = T_LT;
            break;
        case '>':
            if (d == '=')
                t->k = T_GE, len = 2;
            else
                t->k = T_GT;
            break;
        case '(':
            t->k = T_LP;
            break;
        case ',':
            t->k = T_COMMA;
            break;
        case ')':
            t->k = T_RP;
            break;
        case '+':
            t->k = T_PLUS;
            break;
        case '-':
            t->k = T_MINUS;
            break;
        default:
            len = 0;
            break;
        }
    }
    if (!len) {
        unsigned char ch = (unsigned char)c;
        if (ch >= 0x20 && ch < 0x7f)
            fail(p, CLS_TOKEN,
                 "Lexical error at line %d, column %d.  Encountered: \"%c\" (%d), after : \"\"",
                 p->line, p->col, c, ch);
        else
            fail(p, CLS_TOKEN,
                 "Lexical error at line %d, column %d.  Encountered: byte 0x%02x, after : \"\"",
                 p->line, p->col, ch);
        return -1;
    }
    t->n = len;
    advance(p, len);
    return 0;
}

/* The k-th token ahead (0 or 1), lexed on demand as the generated parser does. NULL on error. */
static const tok_t *peek(parser_t *p, int k)
{
    while (p->nla <= k) {
        if (p->failed || lex(p, &p->la[p->nla])) return NULL;
        p->nla++;
    }
    return &p->la[k];
}

static int peek_kind(parser_t *p, int k)
{
    const tok_t *t = peek(p, k);
    return t ? (int)t->k : -1;
}

static tok_t take(parser_t *p)
{
    tok_t t = p->la[0];
    p->la[0] = p->la[1];
    p->nla--;
    return t;
}

static void parse_error(parser_t *p, const tok_t *t, const char *expecting)
{
    if (t->k == T_EOF)
        fail(p, CLS_PARSE, "Encountered \"<EOF>\" at line %d, column %d.\nWas expecting %s",
             t->line, t->col, expecting);
    else
        fail(p, CLS_PARSE, "Encountered \" %s \"%.*s \"\" at line %d, column %d.\nWas expecting %s",
             tok_names[t->k], (int)(t->n > 60 ? 60 : t->n), t->p, t->line, t->col, expecting);
}

/* Consume a token of kind k or fail. */
static int expect(parser_t *p, tk_t k, const char *what)
{
    const tok_t *t = peek(p, 0);
    if (!t) return -1;
    if (t->k != k) {
        parse_error(p, t, what);
        return -1;
    }
    take(p);
    return 0;
}

/* ---- building nodes (the Java factories and their checks) --------------------------------------
 */

static node_t *mk(parser_t *p, nk_t k, node_t *l, node_t *r)
{
    node_t *n = arena_alloc(p->e, sizeof(*n));
    n->k = k;
    n->l = l;
    n->r = r;
    int d = l ? l->depth : 0;
    if (r && r->depth > d) d = r->depth;
    n->depth = d + 1;
    if (n->depth > RMQ_SQL92_MAX_DEPTH) {
        fail(p, CLS_RUNTIME, "the expression is nested more than %d levels deep",
             RMQ_SQL92_MAX_DEPTH);
        return NULL;
    }
    return n;
}

static node_t *mk_const(parser_t *p, val_t v)
{
    node_t *n = mk(p, N_CONST, NULL, NULL);
    if (n) n->v = v;
    return n;
}

/* BooleanExpression instances: every comparison/logic/unary boolean node, and the boolean
 * constants NULL, TRUE and FALSE (BooleanConstantExpression). */
static int is_boolean(const node_t *n)
{
    if (n->k == N_CONST) return n->v.t == V_NULL || n->v.t == V_BOOL;
    return n->k != N_PROP && n->k != N_NEG;
}

/* Java toString of n into buf (bounded, for messages). */
static const char *str_of(const node_t *n, char *buf, size_t size)
{
    rmq_buf_t b;
    rmq__buf_init(&b);
    node_str(n, &b);
    rmq__buf_give(&b, buf, size);
    return buf;
}

/* SelectorParser.asBooleanExpression */
static node_t *as_boolean(parser_t *p, node_t *n)
{
    if (!n) return NULL;
    if (is_boolean(n)) return n;
    if (n->k == N_PROP) return mk(p, N_CAST, n, NULL);
    char s[200];
    fail(p, CLS_PARSE, "Expression will not result in a boolean value: %s",
         str_of(n, s, sizeof(s)));
    return NULL;
}

/* ComparisonExpression.checkLessThanOperand */
static int check_less_than_operand(parser_t *p, const node_t *n)
{
    char s[200];
    if ((n->k == N_CONST && !is_number(&n->v)) || (n->k != N_CONST && is_boolean(n))) {
        fail(p, CLS_RUNTIME, "Value '%s' cannot be compared.", str_of(n, s, sizeof(s)));
        return -1;
    }
    return 0;
}

static node_t *mk_ordered(parser_t *p, nk_t k, node_t *l, node_t *r)
{
    if (!l || !r || check_less_than_operand(p, l) || check_less_than_operand(p, r)) return NULL;
    return mk(p, k, l, r);
}

/* ComparisonExpression.createEqual: checkEqualOperand both, checkEqualOperandCompatability. */
static node_t *mk_equal(parser_t *p, node_t *l, node_t *r)
{
    char a[200], b[200];
    if (!l || !r) return NULL;
    const node_t *ops[2] = {l, r};
    for (int i = 0; i < 2; i++) {
        if (ops[i]->k == N_CONST && ops[i]->v.t == V_NULL) {
            fail(p, CLS_RUNTIME, "'%s' cannot be compared.", str_of(ops[i], a, sizeof(a)));
            return NULL;
        }
    }
    if (l->k == N_CONST && r->k == N_CONST && is_boolean(l) && !is_boolean(r)) {
        fail(p, CLS_RUNTIME, "'%s' cannot be compared with '%s'", str_of(l, a, sizeof(a)),
             str_of(r, b, sizeof(b)));
        return NULL;
    }
    return mk(p, N_EQ, l, r);
}

static node_t *mk_is_null(parser_t *p, node_t *l)
{
    val_t nul = {.t = V_NULL};
    node_t *c = l ? mk_const(p, nul) : NULL;
    return c ? mk(p, N_EQ, l, c) : NULL;
}

/* ComparisonExpression.createBetween: constant bounds must be non-null and low <= high. */
static node_t *mk_between(parser_t *p, node_t *v, node_t *lo, node_t *hi, int not )
{
    if (!v || !lo || !hi) return NULL;
    if (!not &&lo->k == N_CONST && hi->k == N_CONST) {
        if (lo->v.t == V_NULL || hi->v.t == V_NULL) {
            fail(p, CLS_RUNTIME, "Illegal values of between, values can not be null!");
            return NULL;
        }
        int cmp = 0;
        char err[256];
        if (jcompare(hi->v, lo->v, &cmp, err, sizeof(err))) {
            fail(p, CLS_RUNTIME, "%s", err);
            return NULL;
        }
        if (cmp < 0) {
            rmq_buf_t a, b;
            rmq__buf_init(&a);
            rmq__buf_init(&b);
            val_str(&lo->v, 0, &a);
            val_str(&hi->v, 0, &b);
            rmq__buf_append(&a, "", 1);
            rmq__buf_append(&b, "", 1);
            fail(p, CLS_RUNTIME,
                 "Illegal values of between, left value(%s) must less than or equal to right "
                 "value(%s)",
                 a.data, b.data);
            rmq__buf_free(&a);
            rmq__buf_free(&b);
            return NULL;
        }
    }
    if (not ) /* createNotBetween: OR(value < low, value > high) */
        return mk(p, N_OR, mk_ordered(p, N_LT, v, lo), mk_ordered(p, N_GT, v, hi));
    node_t *ge = mk_ordered(p, N_GE, v, lo);
    node_t *le = ge ? mk_ordered(p, N_LE, v, hi) : NULL;
    return le ? mk(p, N_AND, ge, le) : NULL;
}

/* ---- parser (the productions of SelectorParser.jj) ------------------------------------------- */

static node_t *or_expr(parser_t *p);

static int enter(parser_t *p)
{
    if (++p->depth > RMQ_SQL92_MAX_DEPTH) {
        fail(p, CLS_RUNTIME, "the expression is nested more than %d levels deep",
             RMQ_SQL92_MAX_DEPTH);
        return -1;
    }
    return 0;
}

/* stringLitteral: the image without its quotes, '' decoded. */
static int string_literal(parser_t *p, val_t *v)
{
    const tok_t *t = peek(p, 0);
    if (!t) return -1;
    if (t->k != T_STR) {
        parse_error(p, t, "<STRING_LITERAL>");
        return -1;
    }
    tok_t st = take(p);
    char *d = arena_alloc(p->e, st.n);
    size_t k = 0;
    for (size_t i = 1; i + 1 < st.n; i++) {
        d[k++] = st.p[i];
        if (st.p[i] == '\'') i++;
    }
    v->t = V_STR;
    v->u.s.p = d;
    v->u.s.n = k;
    return 0;
}

static node_t *literal(parser_t *p)
{
    const tok_t *t = peek(p, 0);
    val_t v = {.t = V_NULL};
    if (!t) return NULL;
    switch (t->k) {
    case T_STR:
        if (string_literal(p, &v)) return NULL;
        return mk_const(p, v);
    case T_DEC: {
        /* ConstantExpression.createFromDecimal: L stripped, new Long(text), Integer when it fits */
        tok_t d = take(p);
        size_t n = d.n;
        if (d.p[n - 1] == 'l' || d.p[n - 1] == 'L') n--;
        int64_t x;
        if (java_parse_long(d.p, n, INT64_MIN, INT64_MAX, &x)) {
            fail(p, CLS_NUMBER, "For input string: \"%.*s\"", (int)(n > 60 ? 60 : n), d.p);
            return NULL;
        }
        if (x >= INT32_MIN && x <= INT32_MAX) {
            v.t = V_INT;
            v.u.i = (int32_t)x;
        } else {
            v.t = V_LONG;
            v.u.l = x;
        }
        return mk_const(p, v);
    }
    case T_FLOAT: {
        /* ConstantExpression.createFloat: new Double(text), then its two range checks (the
         * lower one is Double.MIN_VALUE, the smallest positive double, so 0.0 is refused). */
        tok_t f = take(p);
        char *text = rmq__xstrndup(f.p, f.n);
        double d = strtod(text, NULL);
        int shown = f.n > 60 ? 60 : (int)f.n;
        free(text);
        if (d > DBL_MAX) {
            fail(p, CLS_RUNTIME, "%.*s%s is greater than 1.7976931348623157E308", shown, f.p,
                 f.n > 60 ? "..." : "");
            return NULL;
        }
        if (d < 4.9e-324) {
            fail(p, CLS_RUNTIME, "%.*s%s is less than 4.9E-324", shown, f.p, f.n > 60 ? "..." : "");
            return NULL;
        }
        v.t = V_DOUBLE;
        v.u.d = d;
        return mk_const(p, v);
    }
    case T_TRUE:
    case T_FALSE:
        v.t = V_BOOL;
        v.u.b = t->k == T_TRUE;
        take(p);
        return mk_const(p, v);
    case T_NULL:
        take(p);
        return mk_const(p, v);
    default:
        parse_error(p, t, "a literal");
        return NULL;
    }
}

static node_t *primary_expr(parser_t *p)
{
    const tok_t *t = peek(p, 0);
    if (!t) return NULL;
    switch (t->k) {
    case T_TRUE:
    case T_FALSE:
    case T_NULL:
    case T_DEC:
    case T_FLOAT:
    case T_STR:
        return literal(p);
    case T_ID: {
        tok_t id = take(p);
        node_t *n = mk(p, N_PROP, NULL, NULL);
        if (!n) return NULL;
        n->name = arena_strndup(p->e, id.p, id.n);
        n->name_len = id.n;
        return n;
    }
    case T_LP: {
        take(p);
        if (enter(p)) return NULL;
        node_t *n = or_expr(p);
        p->depth--;
        if (!n || expect(p, T_RP, "\")\"")) return NULL;
        return n;
    }
    default:
        parse_error(p, t,
                    "one of: \"+\" \"-\" \"NOT\" \"TRUE\" \"FALSE\" \"NULL\" "
                    "<DECIMAL_LITERAL> <FLOATING_POINT_LITERAL> <STRING_LITERAL> <ID> \"(\"");
        return NULL;
    }
}

static node_t *unary_expr(parser_t *p)
{
    const tok_t *t = peek(p, 0);
    node_t *n;
    if (!t) return NULL;
    switch (t->k) {
    case T_PLUS:
    case T_MINUS:
    case T_NOT: {
        tk_t k = t->k;
        take(p);
        if (enter(p)) return NULL;
        n = unary_expr(p);
        p->depth--;
        if (!n) return NULL;
        if (k == T_PLUS) return n;
        if (k == T_MINUS) return mk(p, N_NEG, n, NULL);
        n = as_boolean(p, n);
        return n ? mk(p, N_NOT, n, NULL) : NULL;
    }
    default:
        return primary_expr(p);
    }
}

/* IN ( 'a' [, 'b']... ) after IN was consumed. */
static node_t *in_list(parser_t *p, node_t *left, int not )
{
    if (expect(p, T_LP, "\"(\"")) return NULL;
    val_t items[64], *list = items, v;
    int n = 0, cap = 64;
    for (;;) {
        if (string_literal(p, &v)) goto bad;
        if (n == cap) {
            val_t *nl = rmq__xmalloc(sizeof(*nl) * (size_t)cap * 2);
            memcpy(nl, list, sizeof(*nl) * (size_t)n);
            if (list != items) free(list);
            list = nl;
            cap *= 2;
        }
        list[n++] = v;
        int k = peek_kind(p, 0);
        if (k < 0) goto bad;
        if (k != T_COMMA) break;
        take(p);
    }
    if (expect(p, T_RP, "one of: \",\" \")\"")) goto bad;
    if (left->k != N_PROP) {
        char s[200];
        fail(p, CLS_RUNTIME, "Expected a property for In expression, got: %s",
             str_of(left, s, sizeof(s)));
        goto bad;
    }
    node_t *in = mk(p, N_IN, left, NULL);
    if (in) {
        in->not_in = not ;
        in->n_list = n;
        in->list = arena_alloc(p->e, sizeof(val_t) * (size_t)n);
        memcpy(in->list, list, sizeof(val_t) * (size_t)n);
    }
    if (list != items) free(list);
    return in;
bad:
    if (list != items) free(list);
    return NULL;
}

static node_t *comparison_expr(parser_t *p)
{
    node_t *left = unary_expr(p);
    while (left) {
        int k = peek_kind(p, 0);
        if (k < 0) return NULL;
        switch (k) {
        case T_GT:
        case T_GE:
        case T_LT:
        case T_LE: {
            take(p);
            node_t *right = unary_expr(p);
            nk_t nk = k == T_GT ? N_GT : k == T_GE ? N_GE : k == T_LT ? N_LT : N_LE;
            left = mk_ordered(p, nk, left, right);
            break;
        }
        case T_BETWEEN: {
            take(p);
            node_t *lo = unary_expr(p);
            if (!lo || expect(p, T_AND, "\"AND\"")) return NULL;
            node_t *hi = unary_expr(p);
            left = mk_between(p, left, lo, hi, 0);
            break;
        }
        case T_IN:
            take(p);
            left = in_list(p, left, 0);
            break;
        case T_NOT: {
            int k2 = peek_kind(p, 1);
            if (k2 < 0) return NULL;
            if (k2 == T_BETWEEN) {
                take(p);
                take(p);
                node_t *lo = unary_expr(p);
                if (!lo || expect(p, T_AND, "\"AND\"")) return NULL;
                node_t *hi = unary_expr(p);
                left = mk_between(p, left, lo, hi, 1);
            } else if (k2 == T_IN) {
                take(p);
                take(p);
                left = in_list(p, left, 1);
            } else {
                parse_error(p, peek(p, 0), "one of: \"NOT\" \"BETWEEN\" / \"NOT\" \"IN\"");
                return NULL;
            }
            break;
        }
        default:
            return left;
        }
    }
    return NULL;
}

static node_t *equality_expr(parser_t *p)
{
    node_t *left = comparison_expr(p);
    while (left) {
        int k = peek_kind(p, 0);
        if (k < 0) return NULL;
        if (k == T_EQ || k == T_NE) {
            take(p);
            node_t *right = comparison_expr(p);
            left = mk_equal(p, left, right);
            if (left && k == T_NE) left = mk(p, N_NOT, left, NULL);
        } else if (k == T_IS) {
            int k2 = peek_kind(p, 1);
            if (k2 < 0) return NULL;
            take(p);
            if (k2 == T_NULL) {
                take(p);
                left = mk_is_null(p, left);
            } else {
                if (expect(p, T_NOT, "one of: \"NULL\" \"NOT\"") || expect(p, T_NULL, "\"NULL\""))
                    return NULL;
                left = mk_is_null(p, left);
                if (left) left = mk(p, N_NOT, left, NULL);
            }
        } else {
            return left;
        }
    }
    return NULL;
}

static node_t *and_expr(parser_t *p)
{
    node_t *left = equality_expr(p);
    while (left) {
        int k = peek_kind(p, 0);
        if (k < 0) return NULL;
        if (k != T_AND) return left;
        take(p);
        node_t *right = equality_expr(p);
        if (!right) return NULL;
        node_t *l = as_boolean(p, left), *r = l ? as_boolean(p, right) : NULL;
        left = r ? mk(p, N_AND, l, r) : NULL;
    }
    return NULL;
}

static node_t *or_expr(parser_t *p)
{
    node_t *left = and_expr(p);
    while (left) {
        int k = peek_kind(p, 0);
        if (k < 0) return NULL;
        if (k != T_OR) return left;
        take(p);
        node_t *right = and_expr(p);
        if (!right) return NULL;
        node_t *l = as_boolean(p, left), *r = l ? as_boolean(p, right) : NULL;
        left = r ? mk(p, N_OR, l, r) : NULL;
    }
    return NULL;
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

int rmq__sql92_compile(const char *expr, rmq_sql92_t **out, char *errstr, size_t errstr_size,
                       const char **jclass)
{
    *out = NULL;
    if (jclass) *jclass = NULL;
    if (!expr) {
        rmq__seterr(errstr, errstr_size, "the expression is null");
        if (jclass) *jclass = "java.lang.NullPointerException";
        return RMQ_ERR_INVALID;
    }
    rmq_sql92_t *e = rmq__xcalloc(1, sizeof(*e));
    e->ignored = -1;
    parser_t p = {.src = expr,
                  .len = strlen(expr),
                  .line = 1,
                  .col = 1,
                  .e = e,
                  .err = errstr,
                  .err_size = errstr_size};
    node_t *n = or_expr(&p); /* JmsSelector: orExpression, then asBooleanExpression */
    if (n) n = as_boolean(&p, n);
    if (!n || p.failed) {
        if (!p.failed) fail(&p, CLS_PARSE, "invalid expression");
        if (jclass) *jclass = p.jclass;
        rmq__sql92_free(e);
        return RMQ_ERR_INVALID;
    }
    /* JmsSelector has no <EOF>: whatever follows the expression is never read. */
    if (p.nla > 0 && p.la[0].k != T_EOF) e->ignored = (int)p.la[0].off;
    e->root = n;
    *out = e;
    return RMQ_OK;
}

int rmq__sql92_ignored(const rmq_sql92_t *e)
{
    return e->ignored;
}

size_t rmq__sql92_to_string(const rmq_sql92_t *e, char *out, size_t out_size)
{
    rmq_buf_t b;
    rmq__buf_init(&b);
    node_str(e->root, &b);
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
