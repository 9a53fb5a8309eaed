/*
 * allocate.h -- queue allocation strategies (AllocateMessageQueueStrategy) with the Java
 * client's exact answers, and the Java orderings the rebalance needs before calling them.
 *
 * Strategies: AVG (Averagely), AVG_BY_CIRCLE, CONSISTENT_HASH (MD5 ConsistentHashRouter,
 * consistent_hash_virtual_nodes), CONFIG (allocate_config_queues), MACHINE_ROOM
 * (allocate_machine_room_idcs, brokerNames "<idc>@<name>") and MACHINE_ROOM_NEARBY (inner
 * strategy allocate_nearby_inner_strategy; machine room of a broker = brokerName before the first
 * machine_room_separator, of a consumer = clientId before the first separator, the whole string
 * when there is none). The strategy and its parameters come from an rmq_conf_t (conf.h).
 *
 * Ownership: nothing here keeps state; the caller owns every array passed in and out.
 * Threads: every function is pure and may run on any thread (the engine calls them on the loop
 * thread during rebalance).
 */
#ifndef RMQ_ALLOCATE_H
#define RMQ_ALLOCATE_H

#include "base/common.h"
#include "protocol/mq.h"

#include <stdint.h>

struct rmq_conf;

/* rmq__java_strcmp and rmq__mq_cmp: mq.h. */
/* Collections.sort(mqAll) / Collections.sort(cidAll), in place (stable). */
void rmq__mq_sort(rmq_mq_t *mqs, int n);
void rmq__cid_sort(const char **cids, int n);

/* MessageQueue.toString(): "MessageQueue [topic=T, brokerName=B, queueId=N]" into out. */
int rmq__mq_to_string(const rmq_mq_t *mq, rmq_buf_t *out);
/* ConsistentHashRouter.MD5Hash: first 4 bytes of MD5(key) as an unsigned big-endian number. */
uint32_t rmq__alloc_md5_hash(const char *key, size_t len);

/*
 * Run conf's allocate_message_queue_strategy for one topic, exactly as the Java strategy's
 * allocate(group, cid, mq_all, cid_all) does ON THE LISTS AS GIVEN. Callers must sort both lists
 * first (rmq__mq_sort, rmq__cid_sort) as RebalanceImpl does, or consumers disagree.
 *
 * out_idx must have room for n_mq entries; on success it holds *n_out indices into mq_all in
 * Java's result order. CONFIG returns the configured queues that are among mq_all, in configured
 * order, each once. (Deliberate difference: Java's AllocateMessageQueueByConfig returns its whole
 * list for every topic, even queues of other topics or missing from the route; those are skipped
 * here. rmq__allocate_java below gives Java's raw answer.)
 *
 * Returns RMQ_OK (possibly with *n_out == 0: currentCID not in cid_all is logged "[BUG]" and
 * yields nothing, as in Java), or RMQ_ERR_INVALID with errstr for Java's IllegalArgumentException
 * cases (empty cid, empty mq_all, empty cid_all; a machine room that resolves to ""), or
 * RMQ_ERR_STATE for RMQ_ALLOC_LUA (the Lua layer runs the script's hook itself), or
 * RMQ_ERR_CONFIG for bad strategy parameters. On error the caller keeps the current assignment.
 */
int rmq__allocate(const struct rmq_conf *conf, const char *group, const char *cid,
                  const rmq_mq_t *mq_all, int n_mq, const char *const *cid_all, int n_cid,
                  int *out_idx, int *n_out, char *errstr, size_t errstr_size);

/*
 * Java's raw answer, for parity tests: like rmq__allocate, but CONFIG also returns configured
 * queues that are not in mq_all, as indices >= n_mq meaning conf->alloc_config_mqs[i - n_mq].
 * out_idx needs rmq__allocate_out_cap(conf, n_mq) entries; rmq__allocate_result_mq() resolves an
 * index of either kind.
 */
int rmq__allocate_java(const struct rmq_conf *conf, const char *group, const char *cid,
                       const rmq_mq_t *mq_all, int n_mq, const char *const *cid_all, int n_cid,
                       int *out_idx, int *n_out, char *errstr, size_t errstr_size);
int rmq__allocate_out_cap(const struct rmq_conf *conf, int n_mq);
const rmq_mq_t *rmq__allocate_result_mq(const struct rmq_conf *conf, const rmq_mq_t *mq_all,
                                        int n_mq, int idx);

/* Same as rmq__allocate with the strategy given explicitly (parameters still from conf). */
int rmq__allocate_with(int strategy, const struct rmq_conf *conf, const char *group,
                       const char *cid, const rmq_mq_t *mq_all, int n_mq,
                       const char *const *cid_all, int n_cid, int *out_idx, int *n_out,
                       char *errstr, size_t errstr_size);

/* Thin exports for FFI specs. */
RMQ_EXPORT int rmq_allocate(const struct rmq_conf *conf, const char *group, const char *cid,
                            const rmq_mq_t *mq_all, int n_mq, const char *const *cid_all, int n_cid,
                            int *out_idx, int *n_out, char *errstr, size_t errstr_size);
RMQ_EXPORT int rmq_allocate_java(const struct rmq_conf *conf, const char *group, const char *cid,
                                 const rmq_mq_t *mq_all, int n_mq, const char *const *cid_all,
                                 int n_cid, int *out_idx, int *n_out, char *errstr,
                                 size_t errstr_size);
RMQ_EXPORT int rmq_allocate_out_cap(const struct rmq_conf *conf, int n_mq);
RMQ_EXPORT const rmq_mq_t *rmq_allocate_result_mq(const struct rmq_conf *conf,
                                                  const rmq_mq_t *mq_all, int n_mq, int idx);
RMQ_EXPORT void rmq_mq_sort(rmq_mq_t *mqs, int n);
RMQ_EXPORT void rmq_cid_sort(const char **cids, int n);
RMQ_EXPORT int rmq_java_strcmp(const char *a, const char *b);
RMQ_EXPORT uint32_t rmq_alloc_md5_hash(const char *key, size_t len);

#endif
