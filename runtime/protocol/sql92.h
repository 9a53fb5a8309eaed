/*
 * sql92.h -- RocketMQ's SQL92 message selector (MessageSelector.bySql): the 4.9.4 grammar of
 * org.apache.rocketmq.filter (SelectorParser.jj) compiled into a small tree, and its evaluation
 * over message properties with the Java classes' rules (ComparisonExpression, LogicExpression,
 * UnaryExpression, ConstantExpression, PropertyExpression).
 *
 * What the grammar accepts: comparisons = <> > >= < <=, [NOT] BETWEEN x AND y, [NOT] IN
 * ('a', ...), IS [NOT] NULL, AND / OR / NOT, unary + and -, parentheses; literals: 'strings'
 * ('' for a quote), integers (long range, optional L suffix), decimals and exponents, TRUE,
 * FALSE, NULL; identifiers [a-zA-Z_$][a-zA-Z0-9_$]* naming properties (case-sensitive; the
 * keywords are not). Comments -- ... and / * ... * / are skipped. As in Java, parsing stops after
 * the first complete expression: text after it is ignored (rmq__sql92_ignored() says where).
 *
 * Evaluation, as the broker does it (ExpressionMessageFilter.isMatchedByCommitLog): a message
 * matches only when the expression yields TRUE. Property values are strings; comparing one with a
 * number converts it with Integer/Long/Double.valueOf, and a value that does not convert makes the
 * evaluation throw (RMQ_SQL92_ERROR: the message does not match, whatever an OR around it says).
 * A missing property is NULL, and NULL propagates as in Java (three-valued AND/OR/NOT).
 *
 * Ownership: a compiled expression owns all its memory (one arena); the caller frees it.
 * Threads: compile and eval are pure; a compiled expression is immutable and may be evaluated
 * from any number of threads at once.
 */
#ifndef RMQ_SQL92_H
#define RMQ_SQL92_H

#include "base/common.h"
#include "rmqlua_ffi.h"

/* Outcome of an evaluation: Java's Boolean.FALSE / TRUE / null, or a thrown exception. */
enum { RMQ_SQL92_FALSE = 0, RMQ_SQL92_TRUE = 1, RMQ_SQL92_NULL = 2, RMQ_SQL92_ERROR = 3 };

/* Deepest expression tree accepted (nesting and chained operators); Java would overflow its
 * stack somewhere above. */
#define RMQ_SQL92_MAX_DEPTH 1000

/*
 * Compile expr (SelectorParser.parse). Returns RMQ_OK with *out (caller frees), or
 * RMQ_ERR_INVALID with *out NULL, errstr holding the message (Java's exception message, e.g.
 * "Encountered \"=\" at line 1, column 5. ..." or "Value ''x'' cannot be compared.") and, when
 * jclass is not NULL, *jclass the Java exception class that message comes with
 * ("org.apache.rocketmq.filter.parser.ParseException", "java.lang.RuntimeException", ...):
 * the broker answers "<class>: <message>".
 */
int rmq__sql92_compile(const char *expr, rmq_sql92_t **out, char *errstr, size_t errstr_size,
                       const char **jclass);
void rmq__sql92_free(rmq_sql92_t *e);

/* Byte offset in the expression where parsing stopped when text follows the expression (Java
 * ignores it), else -1. */
int rmq__sql92_ignored(const rmq_sql92_t *e);

/*
 * Evaluate over a properties string (name\1value\2..., Java's string2messageProperties rules:
 * the last duplicate wins, empty names or values are absent). Returns RMQ_SQL92_TRUE, _FALSE,
 * _NULL or _ERROR; for _ERROR errstr (may be NULL) says what Java would have thrown.
 */
int rmq__sql92_eval(const rmq_sql92_t *e, const char *props, size_t props_len, char *errstr,
                    size_t errstr_size);

/* 1 when the message matches (the evaluation is TRUE), else 0. */
static inline int rmq__sql92_match(const rmq_sql92_t *e, const char *props, size_t props_len)
{
    return rmq__sql92_eval(e, props, props_len, NULL, 0) == RMQ_SQL92_TRUE;
}

/* The expression back as text in Java's toString() form (for logs and tests). */
size_t rmq__sql92_to_string(const rmq_sql92_t *e, char *out, size_t out_size);

/* Double.toString's text of d ("0.0", "66.66666666666667", "1.0E7"); also used for the
 * development broker's stats bodies. */
void rmq__java_double_str(double d, char *out, size_t size);

/* The exported FFI forms (rmq_sql92_compile, _eval, _free, _ignored, _to_string) are declared in
 * rmqlua_ffi.h: Lua uses them for `rmqlua test` and rmq.sql92(). */

#endif
