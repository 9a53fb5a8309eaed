/*
 * fjson.h -- JSON as fastjson writes it (PROTOCOL.md 3.1): a tolerant reader and a writer.
 *
 * fastjson output is not always JSON: maps with Long keys come as {0:"a"} (bare integer keys)
 * and maps keyed by MessageQueue as {{"brokerName":"b","queueId":0,"topic":"t"}:5} (an object
 * used as a key). The reader accepts any JSON value as an object key, besides standard JSON.
 * Numbers keep their text, so int64 values (offsets, 2^53+1) and doubles ("2.2", "0.0") survive
 * a read/write round trip unchanged.
 *
 * Ownership: a document (rmq_fjdoc_t) owns every node and string of its tree in an arena;
 * rmq__fj_free() releases them all. Nodes are never freed one by one.
 * Threads: a document is used by one thread at a time; nothing is shared.
 */
#ifndef RMQ_FJSON_H
#define RMQ_FJSON_H

#include "base/common.h"

#define RMQ_FJ_MAX_DEPTH 64

typedef enum {
    RMQ_FJ_NULL = 0,
    RMQ_FJ_FALSE,
    RMQ_FJ_TRUE,
    RMQ_FJ_NUMBER,
    RMQ_FJ_STRING,
    RMQ_FJ_ARRAY,
    RMQ_FJ_OBJECT
} rmq_fj_type_t;

typedef struct rmq_fj rmq_fj_t;
struct rmq_fj {
    rmq_fj_type_t type;
    int is_int;      /* NUMBER: integer syntax that fits int64 (then i is exact) */
    int64_t i;       /* NUMBER: value when is_int */
    double d;        /* NUMBER: value as a double */
    const char *s;   /* STRING: decoded UTF-8, NUL-terminated; NUMBER: its text */
    size_t len;      /* STRING/NUMBER: bytes of s; ARRAY/OBJECT: number of children */
    rmq_fj_t *child; /* ARRAY/OBJECT: first element / member value */
    rmq_fj_t *last;  /* ARRAY/OBJECT: last child (for appending) */
    rmq_fj_t *next;  /* next sibling */
    rmq_fj_t *key;   /* member of an OBJECT: its key (any node; a STRING for standard JSON) */
};

typedef struct rmq_fjdoc rmq_fjdoc_t;

/*
 * Parse len bytes (no NUL needed). Returns the document (root in rmq__fj_root) or NULL with
 * "<what> at byte <offset>" in errstr (malformed input, depth over RMQ_FJ_MAX_DEPTH, trailing
 * garbage, out of memory).
 */
rmq_fjdoc_t *rmq__fj_parse(const char *json, size_t len, char *errstr, size_t errstr_size);
/* An empty document for building a tree to write. NULL when out of memory. */
rmq_fjdoc_t *rmq__fj_new(void);
void rmq__fj_free(rmq_fjdoc_t *doc);
rmq_fj_t *rmq__fj_root(const rmq_fjdoc_t *doc);
void rmq__fj_set_root(rmq_fjdoc_t *doc, rmq_fj_t *root);

/* ---- reading ---- */

/* Member of obj whose key is the string (or bare number text) name; NULL if absent. The last
 * duplicate wins, as in fastjson. */
rmq_fj_t *rmq__fj_get(const rmq_fj_t *obj, const char *name);
/* Integer value of a NUMBER node, or of a STRING holding a Java long ("12"). 0 or
 * RMQ_ERR_INVALID. */
int rmq__fj_i64(const rmq_fj_t *v, int64_t *out);
/* Member conveniences: 0, RMQ_ERR_NOT_FOUND (absent or null) or RMQ_ERR_INVALID (wrong type). */
int rmq__fj_get_i64(const rmq_fj_t *obj, const char *name, int64_t *out);
int rmq__fj_get_i32(const rmq_fj_t *obj, const char *name, int32_t *out);
/* The string of a STRING member, or NULL. */
const char *rmq__fj_get_str(const rmq_fj_t *obj, const char *name);
/* Boolean member: 1 true, 0 false, -1 absent or not a boolean. */
int rmq__fj_get_bool(const rmq_fj_t *obj, const char *name);

/* ---- building (nodes belong to doc) ---- */

rmq_fj_t *rmq__fj_new_obj(rmq_fjdoc_t *doc);
rmq_fj_t *rmq__fj_new_arr(rmq_fjdoc_t *doc);
rmq_fj_t *rmq__fj_new_str(rmq_fjdoc_t *doc, const char *s, size_t len);
rmq_fj_t *rmq__fj_new_i64(rmq_fjdoc_t *doc, int64_t v);
/* A number written with the given text, e.g. "0.0" (fastjson writes doubles Java's way). */
rmq_fj_t *rmq__fj_new_num_text(rmq_fjdoc_t *doc, const char *text);
rmq_fj_t *rmq__fj_new_bool(rmq_fjdoc_t *doc, int v);
/* Append val to an array. */
void rmq__fj_arr_add(rmq_fj_t *arr, rmq_fj_t *val);
/* Append a member: key is any node (a STRING for normal members, an OBJECT for MessageQueue
 * keys, a NUMBER for Long keys). */
void rmq__fj_obj_add(rmq_fj_t *obj, rmq_fj_t *key, rmq_fj_t *val);
/* Append a member with a string key (copied). NULL when out of memory. */
rmq_fj_t *rmq__fj_obj_set(rmq_fjdoc_t *doc, rmq_fj_t *obj, const char *name, rmq_fj_t *val);
/* A MessageQueue object {"brokerName":..,"queueId":..,"topic":..} (fastjson's sorted keys). */
rmq_fj_t *rmq__fj_new_mq(rmq_fjdoc_t *doc, const char *topic, const char *broker_name,
                         int queue_id);

/* ---- writing ---- */

#define RMQ_FJ_PRETTY 0x1 /* fastjson PrettyFormat: tab indents (the local offset file) */
#define RMQ_FJ_ASCII 0x2  /* BrowserCompatible: non-ASCII as \uXXXX, '/' as \/ */

/*
 * Append v as fastjson writes it. Members and elements keep their order; string keys are
 * quoted, NUMBER keys are written bare, OBJECT/ARRAY keys as JSON text (fastjson's non-string
 * map keys). Pretty form follows fastjson 1.2.69: a newline and indent before every string-keyed
 * member and array element, none before a non-string key, "}"/"]" on its own line unless empty.
 * Returns 0 or RMQ_ERR_NOMEM.
 */
int rmq__fj_write(rmq_buf_t *out, const rmq_fj_t *v, int flags);
/* A JSON string literal as fastjson writes it (flags: RMQ_FJ_ASCII). */
int rmq__fj_write_str(rmq_buf_t *out, const char *s, size_t len, int flags);

#endif
