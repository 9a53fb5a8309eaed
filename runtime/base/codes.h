/*
 * codes.h -- RocketMQ request codes, response codes and language codes, with names for logs.
 *
 * Ownership: constant tables only. Threads: any.
 * Source: RequestCode.java, ResponseCode.java, RemotingSysResponseCode.java, LanguageCode.java
 * (rocketmq-all-4.9.4).
 */
#ifndef RMQ_CODES_H
#define RMQ_CODES_H

#include "common.h"

#define RMQ_REQUEST_CODES(X)                                                                       \
    X(SEND_MESSAGE, 10)                                                                            \
    X(PULL_MESSAGE, 11)                                                                            \
    X(QUERY_MESSAGE, 12)                                                                           \
    X(QUERY_BROKER_OFFSET, 13)                                                                     \
    X(QUERY_CONSUMER_OFFSET, 14)                                                                   \
    X(UPDATE_CONSUMER_OFFSET, 15)                                                                  \
    X(UPDATE_AND_CREATE_TOPIC, 17)                                                                 \
    X(GET_ALL_TOPIC_CONFIG, 21)                                                                    \
    X(GET_BROKER_CONFIG, 26)                                                                       \
    X(GET_BROKER_RUNTIME_INFO, 28)                                                                 \
    X(SEARCH_OFFSET_BY_TIMESTAMP, 29)                                                              \
    X(GET_MAX_OFFSET, 30)                                                                          \
    X(GET_MIN_OFFSET, 31)                                                                          \
    X(GET_EARLIEST_MSG_STORETIME, 32)                                                              \
    X(VIEW_MESSAGE_BY_ID, 33)                                                                      \
    X(HEART_BEAT, 34)                                                                              \
    X(UNREGISTER_CLIENT, 35)                                                                       \
    X(CONSUMER_SEND_MSG_BACK, 36)                                                                  \
    X(END_TRANSACTION, 37)                                                                         \
    X(GET_CONSUMER_LIST_BY_GROUP, 38)                                                              \
    X(CHECK_TRANSACTION_STATE, 39)                                                                 \
    X(NOTIFY_CONSUMER_IDS_CHANGED, 40)                                                             \
    X(LOCK_BATCH_MQ, 41)                                                                           \
    X(UNLOCK_BATCH_MQ, 42)                                                                         \
    X(GET_ALL_CONSUMER_OFFSET, 43)                                                                 \
    X(GET_ALL_DELAY_OFFSET, 45)                                                                    \
    X(CHECK_CLIENT_CONFIG, 46)                                                                     \
    X(PUT_KV_CONFIG, 100)                                                                          \
    X(GET_KV_CONFIG, 101)                                                                          \
    X(DELETE_KV_CONFIG, 102)                                                                       \
    X(REGISTER_BROKER, 103)                                                                        \
    X(UNREGISTER_BROKER, 104)                                                                      \
    X(GET_ROUTEINFO_BY_TOPIC, 105)                                                                 \
    X(GET_BROKER_CLUSTER_INFO, 106)                                                                \
    X(UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 200)                                                    \
    X(GET_ALL_SUBSCRIPTIONGROUP_CONFIG, 201)                                                       \
    X(GET_TOPIC_STATS_INFO, 202)                                                                   \
    X(GET_CONSUMER_CONNECTION_LIST, 203)                                                           \
    X(GET_PRODUCER_CONNECTION_LIST, 204)                                                           \
    X(WIPE_WRITE_PERM_OF_BROKER, 205)                                                              \
    X(GET_ALL_TOPIC_LIST_FROM_NAMESERVER, 206)                                                     \
    X(DELETE_SUBSCRIPTIONGROUP, 207)                                                               \
    X(GET_CONSUME_STATS, 208)                                                                      \
    X(DELETE_TOPIC_IN_BROKER, 215)                                                                 \
    X(DELETE_TOPIC_IN_NAMESRV, 216)                                                                \
    X(RESET_CONSUMER_CLIENT_OFFSET, 220)                                                           \
    X(GET_CONSUMER_STATUS_FROM_CLIENT, 221)                                                        \
    X(INVOKE_BROKER_TO_RESET_OFFSET, 222)                                                          \
    X(INVOKE_BROKER_TO_GET_CONSUMER_STATUS, 223)                                                   \
    X(QUERY_TOPIC_CONSUME_BY_WHO, 300)                                                             \
    X(GET_TOPICS_BY_CLUSTER, 224)                                                                  \
    X(QUERY_CONSUME_TIME_SPAN, 303)                                                                \
    X(GET_SYSTEM_TOPIC_LIST_FROM_NS, 304)                                                          \
    X(GET_SYSTEM_TOPIC_LIST_FROM_BROKER, 305)                                                      \
    X(CLEAN_EXPIRED_CONSUMEQUEUE, 306)                                                             \
    X(GET_CONSUMER_RUNNING_INFO, 307)                                                              \
    X(QUERY_CORRECTION_OFFSET, 308)                                                                \
    X(CONSUME_MESSAGE_DIRECTLY, 309)                                                               \
    X(SEND_MESSAGE_V2, 310)                                                                        \
    X(GET_UNIT_TOPIC_LIST, 311)                                                                    \
    X(GET_HAS_UNIT_SUB_TOPIC_LIST, 312)                                                            \
    X(GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST, 313)                                                     \
    X(CLONE_GROUP_OFFSET, 314)                                                                     \
    X(VIEW_BROKER_STATS_DATA, 315)                                                                 \
    X(CLEAN_UNUSED_TOPIC, 316)                                                                     \
    X(GET_BROKER_CONSUME_STATS, 317)                                                               \
    X(UPDATE_NAMESRV_CONFIG, 318)                                                                  \
    X(GET_NAMESRV_CONFIG, 319)                                                                     \
    X(SEND_BATCH_MESSAGE, 320)                                                                     \
    X(QUERY_CONSUME_QUEUE, 321)                                                                    \
    X(QUERY_DATA_VERSION, 322)                                                                     \
    X(RESUME_CHECK_HALF_MESSAGE, 323)                                                              \
    X(SEND_REPLY_MESSAGE, 324)                                                                     \
    X(SEND_REPLY_MESSAGE_V2, 325)                                                                  \
    X(PUSH_REPLY_MESSAGE_TO_CLIENT, 326)                                                           \
    X(QUERY_ASSIGNMENT, 400)                                                                       \
    X(SET_MESSAGE_REQUEST_MODE, 401)                                                               \
    X(GET_ALL_MESSAGE_REQUEST_MODE, 402)                                                           \
    X(POP_MESSAGE, 200050)                                                                         \
    X(ACK_MESSAGE, 200051)                                                                         \
    X(CHANGE_MESSAGE_INVISIBLETIME, 200053)                                                        \
    X(BATCH_ACK_MESSAGE, 200151)

#define RMQ_RESPONSE_CODES(X)                                                                      \
    X(SUCCESS, 0)                                                                                  \
    X(SYSTEM_ERROR, 1)                                                                             \
    X(SYSTEM_BUSY, 2)                                                                              \
    X(REQUEST_CODE_NOT_SUPPORTED, 3)                                                               \
    X(TRANSACTION_FAILED, 4)                                                                       \
    X(FLUSH_DISK_TIMEOUT, 10)                                                                      \
    X(SLAVE_NOT_AVAILABLE, 11)                                                                     \
    X(FLUSH_SLAVE_TIMEOUT, 12)                                                                     \
    X(MESSAGE_ILLEGAL, 13)                                                                         \
    X(SERVICE_NOT_AVAILABLE, 14)                                                                   \
    X(VERSION_NOT_SUPPORTED, 15)                                                                   \
    X(NO_PERMISSION, 16)                                                                           \
    X(TOPIC_NOT_EXIST, 17)                                                                         \
    X(TOPIC_EXIST_ALREADY, 18)                                                                     \
    X(PULL_NOT_FOUND, 19)                                                                          \
    X(PULL_RETRY_IMMEDIATELY, 20)                                                                  \
    X(PULL_OFFSET_MOVED, 21)                                                                       \
    X(QUERY_NOT_FOUND, 22)                                                                         \
    X(SUBSCRIPTION_PARSE_FAILED, 23)                                                               \
    X(SUBSCRIPTION_NOT_EXIST, 24)                                                                  \
    X(SUBSCRIPTION_NOT_LATEST, 25)                                                                 \
    X(SUBSCRIPTION_GROUP_NOT_EXIST, 26)                                                            \
    X(FILTER_DATA_NOT_EXIST, 27)                                                                   \
    X(FILTER_DATA_NOT_LATEST, 28)                                                                  \
    X(TRANSACTION_SHOULD_COMMIT, 200)                                                              \
    X(TRANSACTION_SHOULD_ROLLBACK, 201)                                                            \
    X(TRANSACTION_STATE_UNKNOW, 202)                                                               \
    X(TRANSACTION_STATE_GROUP_WRONG, 203)                                                          \
    X(NO_BUYER_ID, 204)                                                                            \
    X(NOT_IN_CURRENT_UNIT, 205)                                                                    \
    X(CONSUMER_NOT_ONLINE, 206)                                                                    \
    X(CONSUME_MSG_TIMEOUT, 207)                                                                    \
    X(NO_MESSAGE, 208)                                                                             \
    X(UPDATE_AND_CREATE_ACL_CONFIG_FAILED, 209)                                                    \
    X(DELETE_ACL_CONFIG_FAILED, 210)                                                               \
    X(UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED, 211)

/* RocketMQ 5.x reuses 209 and 210 (the 4.x ACL failures above) for POP long polling. */
#define RMQ_RESP_POLLING_FULL 209
#define RMQ_RESP_POLLING_TIMEOUT 210

#define RMQ_LANGUAGE_CODES(X)                                                                      \
    X(JAVA, 0)                                                                                     \
    X(CPP, 1)                                                                                      \
    X(DOTNET, 2)                                                                                   \
    X(PYTHON, 3)                                                                                   \
    X(DELPHI, 4)                                                                                   \
    X(ERLANG, 5)                                                                                   \
    X(RUBY, 6)                                                                                     \
    X(OTHER, 7)                                                                                    \
    X(HTTP, 8)                                                                                     \
    X(GO, 9)                                                                                       \
    X(PHP, 10)                                                                                     \
    X(OMS, 11)                                                                                     \
    X(RUST, 12)

enum {
#define RMQ_REQ_ENUM_(n, v) RMQ_REQ_##n = v,
    RMQ_REQUEST_CODES(RMQ_REQ_ENUM_)
#undef RMQ_REQ_ENUM_
};

enum {
#define RMQ_RESP_ENUM_(n, v) RMQ_RESP_##n = v,
    RMQ_RESPONSE_CODES(RMQ_RESP_ENUM_)
#undef RMQ_RESP_ENUM_
};

enum {
#define RMQ_LANG_ENUM_(n, v) RMQ_LANG_##n = v,
    RMQ_LANGUAGE_CODES(RMQ_LANG_ENUM_)
#undef RMQ_LANG_ENUM_
};

/* Version ordinal sent on every command: MQVersion.Version.V4_9_4.ordinal(). */
#define RMQ_VERSION_V4_9_4 401

/* Names, or NULL for unknown codes. */
RMQ_EXPORT const char *rmq_request_code_name(int code);
RMQ_EXPORT const char *rmq_response_code_name(int code);
RMQ_EXPORT const char *rmq_language_name(int lang);
/* Language value for a name ("JAVA" -> 0), or -1. */
RMQ_EXPORT int rmq_language_from_name(const char *name, size_t len);

#endif
