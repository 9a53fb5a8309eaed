/*
 * sql92_parse.c -- compiling a SQL92 selector (sql92.h): a lazy lexer and a recursive descent
 * parser shaped like the JavaCC-generated SelectorParser of RocketMQ 4.9.4, and the expression
 * factories' checks (ComparisonExpression.createXxx, ConstantExpression.createFromDecimal /
 * createFloat, SelectorParser.asBooleanExpression). sql92.c evaluates what this builds.
 *
 * Ownership: a compiled expression is one arena (a chain of blocks) holding the tree and the
 * strings of its constants and names; rmq__sql92_free (sql92.c) releases it.
 * Threads: no shared state; compiling is pure.
 */
#include "sql92_int.h"

#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

/* ---- arena ----------------------------------------------------------------------------------- */

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
    rmq__sql92_node_str(n, &b);
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
        if (rmq__sql92_compare(hi->v, lo->v, &cmp, err, sizeof(err))) {
            fail(p, CLS_RUNTIME, "%s", err);
            return NULL;
        }
        if (cmp < 0) {
            rmq_buf_t a, b;
            rmq__buf_init(&a);
            rmq__buf_init(&b);
            rmq__sql92_val_str(&lo->v, 0, &a);
            rmq__sql92_val_str(&hi->v, 0, &b);
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
        if (rmq__sql92_parse_long(d.p, n, INT64_MIN, INT64_MAX, &x)) {
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

/* Operands joined by the keyword tk (AND, OR), each made a boolean expression, built left to
 * right into nk nodes (LogicExpression.createAND / createOR). */
static node_t *logic_expr(parser_t *p, tk_t tk, nk_t nk, node_t *(*operand)(parser_t *))
{
    node_t *left = operand(p);
    while (left) {
        int k = peek_kind(p, 0);
        if (k < 0) return NULL;
        if (k != (int)tk) return left;
        take(p);
        node_t *right = operand(p);
        if (!right) return NULL;
        node_t *l = as_boolean(p, left), *r = l ? as_boolean(p, right) : NULL;
        left = r ? mk(p, nk, l, r) : NULL;
    }
    return NULL;
}

static node_t *and_expr(parser_t *p)
{
    return logic_expr(p, T_AND, N_AND, equality_expr);
}

static node_t *or_expr(parser_t *p)
{
    return logic_expr(p, T_OR, N_OR, and_expr);
}

/* ---- API ------------------------------------------------------------------------------------- */

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
