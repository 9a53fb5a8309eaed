/*
 * namespace.c -- NamespaceUtil (namespace.h, PROTOCOL.md 9): wrapNamespace and withoutNamespace
 * as Java 4.9.4 applies them to topics and groups.
 *
 * Ownership: see namespace.h. Threads: any (no state).
 */
#include "namespace.h"

#include "base/common.h"

#include <string.h>

/* TopicValidator's system topics. */
static const char *const system_topics[] = {"TBW102",
                                            "SCHEDULE_TOPIC_XXXX",
                                            "BenchmarkTest",
                                            "RMQ_SYS_TRANS_HALF_TOPIC",
                                            "RMQ_SYS_TRACE_TOPIC",
                                            "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                                            "TRANS_CHECK_MAX_TIME_TOPIC",
                                            "SELF_TEST_TOPIC",
                                            "OFFSET_MOVED_EVENT"};

int rmq__ns_system_topic(const char *topic)
{
    for (size_t i = 0; i < RMQ_ARRAY_SIZE(system_topics); i++)
        if (!strcmp(topic, system_topics[i])) return 1;
    return 0;
}

/* TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET (4.9.4). */
static const char *const not_allowed_send[] = {"SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC",
                                               "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                                               "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC",
                                               "OFFSET_MOVED_EVENT"};

int rmq__ns_send_forbidden(const char *topic)
{
    for (size_t i = 0; i < RMQ_ARRAY_SIZE(not_allowed_send); i++)
        if (!strcmp(topic, not_allowed_send[i])) return 1;
    return 0;
}

/* A system topic, "rmq_sys_...", or MixAll.isSysConsumerGroup. */
static int is_system(const char *r)
{
    return rmq__ns_system_topic(r) || !strncmp(r, "rmq_sys_", 8) || !strncmp(r, "CID_RMQ_SYS_", 12);
}

char *rmq__ns_wrap(const char *ns, const char *r)
{
    if (!ns || !*ns || !*r || is_system(r)) return rmq__xstrdup(r);
    const char *prefix = "";
    const char *s = r;
    if (!strncmp(r, "%RETRY%", 7))
        prefix = "%RETRY%", s = r + 7;
    else if (!strncmp(r, "%DLQ%", 5))
        prefix = "%DLQ%", s = r + 5;
    size_t nl = strlen(ns);
    if (!strncmp(s, ns, nl) && s[nl] == '%') return rmq__xstrdup(r);
    rmq_buf_t b;
    rmq__buf_init(&b);
    rmq__buf_appendf(&b, "%s%s%%%s", prefix, ns, s);
    return b.data;
}

/* Length of the retry / DLQ prefix of r (NamespaceUtil.withOutRetryAndDLQ). */
static size_t rd_prefix(const char *r, size_t len)
{
    if (len >= 7 && !memcmp(r, "%RETRY%", 7)) return 7;
    if (len >= 5 && !memcmp(r, "%DLQ%", 5)) return 5;
    return 0;
}

void rmq__ns_strip_msg(const char *ns, rmq_msg_t *m)
{
    if (!ns || !*ns || m->topic_len == 0) return;
    size_t nl = strlen(ns), pl = rd_prefix(m->topic, m->topic_len);
    const char *s = m->topic + pl;
    size_t sl = m->topic_len - pl;
    if (sl <= nl || memcmp(s, ns, nl) != 0 || s[nl] != '%') return;
    nl = (size_t)((const char *)memchr(s, '%', sl) - s); /* Java cuts at the first '%' */
    if (nl == 0) return;
    char name[256];
    if (m->topic_len < sizeof(name)) { /* withoutNamespace(r): not for system resources */
        memcpy(name, m->topic, m->topic_len);
        name[m->topic_len] = 0;
        if (is_system(name)) return;
    }
    if (pl == 0) { /* a suffix of the same bytes */
        m->topic += nl + 1;
        m->topic_len -= (uint32_t)(nl + 1);
        return;
    }
    size_t rest = sl - nl - 1;
    char *t = rmq__msgset_alloc(m->owner, pl + rest);
    memcpy(t, m->topic, pl);
    memcpy(t + pl, s + nl + 1, rest);
    m->topic = t;
    m->topic_len = (uint32_t)(pl + rest);
}
