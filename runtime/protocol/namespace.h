/*
 * namespace.h -- RocketMQ namespaces (PROTOCOL.md 9, Java NamespaceUtil): the wire name of a
 * topic or group in a namespace ("ns%T", "%RETRY%ns%G", "%DLQ%ns%G") and the user's name of a
 * pulled message's topic. Used by the push consumer (client.c, consume.c) and by `rmqlua tail`
 * and `rmqlua redrive`, which read and write a namespace's names as Java's DefaultMQPullConsumer
 * and DefaultMQProducer do.
 *
 * Ownership: rmq__ns_wrap returns a new string (the caller frees it); rmq__ns_strip_msg changes
 * the message view in place (a new topic is allocated from the message's own set).
 * Threads: pure, any thread; rmq__ns_strip_msg on the thread that owns the message (the loop).
 */
#ifndef RMQ_NAMESPACE_H
#define RMQ_NAMESPACE_H

#include "message.h"

/* 1 when topic is one of TopicValidator's system topics (TBW102, SCHEDULE_TOPIC_XXXX, ...): never
 * wrapped in a namespace. */
int rmq__ns_system_topic(const char *topic);
/* 1 when a producer's send to topic is refused before it leaves (Validators.checkMessage:
 * TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET). Other system topics (RMQ_SYS_TRACE_TOPIC, TBW102)
 * are the broker's to accept or refuse. */
int rmq__ns_send_forbidden(const char *topic);

/* NamespaceUtil.wrapNamespace(ns, r): a new string; r itself (copied) when ns is NULL or empty,
 * r is a system topic or group, or r is wrapped already. */
char *rmq__ns_wrap(const char *ns, const char *r);

/* NamespaceUtil.withoutNamespace(m->topic, ns) applied to a message view: "ns%T" -> "T",
 * "%RETRY%ns%G" -> "%RETRY%G"; nothing when ns is NULL or empty or the topic is not in ns.
 * m->store_topic is left as stored. */
void rmq__ns_strip_msg(const char *ns, rmq_msg_t *m);

#endif
