/*
 * subscription.h -- SubscriptionData: FilterAPI.buildSubscriptionData / FilterAPI.build, its
 * fastjson form for HEART_BEAT, and the two tag filters (the broker's codeSet match and the
 * client's tagsSet match after a pull).
 *
 * tagsSet and codeSet are kept in Java HashSet iteration order (bucket order for the final
 * table size, insertion order within a bucket), so the heartbeat JSON is byte-for-byte what the
 * Java client sends. (Not emulated: a bucket that Java would treeify, i.e. 8 or more tags in
 * one bucket of a table of 64 or more.)
 *
 * Ownership: an rmq_sub_t owns all its strings and arrays.
 * Threads: pure functions; a built subscription is immutable and may be read from any thread.
 */
#ifndef RMQ_SUBSCRIPTION_H
#define RMQ_SUBSCRIPTION_H

#include "base/common.h"

#include <stdint.h>

#define RMQ_SUB_ALL "*"

typedef struct rmq_sub {
    char *topic;
    char *sub_string;      /* "*" for null/""/"*", else unchanged (untrimmed) */
    char *expression_type; /* "TAG" or "SQL92" */
    int class_filter_mode; /* always 0 (class filters are gone in 4.9) */
    int64_t sub_version;   /* System.currentTimeMillis() at build */
    char **tags;           /* tagsSet, HashSet order */
    int n_tags;
    int32_t *codes; /* codeSet (J-hash of each tag, deduplicated), HashSet order */
    int n_codes;
} rmq_sub_t;

/*
 * FilterAPI.build(topic, sub_string, type): type NULL, "" or "TAG" -> buildSubscriptionData
 * (split on "||", trim, drop empty pieces; an expression made only of "||" is "subString split
 * error"); "SQL92" -> expression kept as is ("Expression can't be null! SQL92" when empty).
 * Other types are rejected. Returns RMQ_OK with *out (caller destroys), or RMQ_ERR_INVALID with
 * errstr (Java's message text) and *out NULL.
 */
int rmq__sub_build(const char *topic, const char *sub_string, const char *type, rmq_sub_t **out,
                   char *errstr, size_t errstr_size);
void rmq__sub_destroy(rmq_sub_t *sub);
rmq_sub_t *rmq__sub_dup(const rmq_sub_t *sub);

/* True when the subscription takes every message ("*" / no tags): no client-side filtering. */
int rmq__sub_is_all(const rmq_sub_t *sub);

/*
 * Append the fastjson form (as inside HeartbeatData.consumerDataSet[].subscriptionDataSet):
 * {"classFilterMode":false,"codeSet":[..],"expressionType":"TAG","subString":"..",
 *  "subVersion":N,"tagsSet":[..],"topic":".."}
 */
int rmq__sub_to_json(const rmq_sub_t *sub, rmq_buf_t *out);

/*
 * Client-side filter after a pull (PullAPIWrapper.processPullResult): 1 when the message is
 * kept. With an empty tagsSet (or class filter mode) every message is kept; otherwise a message
 * is kept only when it has TAGS (tags != NULL) equal to one of tagsSet exactly.
 */
int rmq__sub_match_tags(const rmq_sub_t *sub, const char *tags, size_t len);

/*
 * Broker-side filter (ExpressionMessageFilter.isMatchedByConsumeQueue, TAG type): 1 when a
 * consume-queue entry with this tagsCode passes: subString "*", or codeSet contains
 * (int)tags_code. has_code 0 means tagsCode null (always passes). For the development broker.
 */
int rmq__sub_match_code(const rmq_sub_t *sub, int has_code, int64_t tags_code);

/* Thin exports for FFI specs. */
RMQ_EXPORT rmq_sub_t *rmq_sub_build(const char *topic, const char *sub_string, const char *type,
                                    char *errstr, size_t errstr_size);
RMQ_EXPORT void rmq_sub_destroy(rmq_sub_t *sub);
/* Writes the fastjson form into out (truncated, NUL-terminated); returns its full length. */
RMQ_EXPORT size_t rmq_sub_to_json(const rmq_sub_t *sub, char *out, size_t out_size);
RMQ_EXPORT int rmq_sub_match_tags(const rmq_sub_t *sub, const char *tags, size_t len);
RMQ_EXPORT int rmq_sub_match_code(const rmq_sub_t *sub, int has_code, int64_t tags_code);

#endif
