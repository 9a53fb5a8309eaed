/*
 * sql92_int.h -- what the two files of the SQL92 selector share: the values and the tree
 * (sql92_parse.c builds it, sql92.c evaluates and prints it) and the Java rules both need.
 * Not for use outside protocol/sql92*.c: everything else goes through sql92.h.
 * Threads: any, as sql92.h.
 */
#ifndef RMQ_SQL92_INT_H
#define RMQ_SQL92_INT_H

#include "sql92.h"

/* The Java exception classes a failure is reported with. */
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

static inline int is_number(const val_t *v)
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

/* ---- sql92.c --------------------------------------------------------------------------------- */

/* Integer.parseInt / Long.parseLong (radix 10) of s[0, n) within [min, max]: 0 with *out, or
 * -1 (not a number, or out of range). */
int rmq__sql92_parse_long(const char *s, size_t n, int64_t min, int64_t max, int64_t *out);
/* Append v as text to b: quote, as the tree prints a constant (ConstantExpression.toString);
 * else as the value's own toString. */
void rmq__sql92_val_str(const val_t *v, int quote, rmq_buf_t *b);
/* Append the tree's toString to b. */
void rmq__sql92_node_str(const node_t *n, rmq_buf_t *b);
/* ComparisonExpression.__compare of lv and rv: 0 with *res (<0, 0, >0), or -1 with the message of
 * what Java throws in err. */
int rmq__sql92_compare(val_t lv, val_t rv, int *res, char *err, size_t size);

#endif
