/*
 * devbroker_stored.c -- a stored message of the development broker read back: found by its
 * commit-log offset (VIEW_MESSAGE_BY_ID, QUERY_MESSAGE, CONSUMER_SEND_MSG_BACK, an offsetMsgId)
 * and its fields parsed from the stored form (PROTOCOL.md 4.1), and those fields handed on to
 * store the message again. It calls nothing else of the development broker, so that the message
 * index the store maintains can read messages without calling the store back.
 *
 * Threads: the broker thread only.
 */
#include "devbroker_int.h"
#include "protocol/message.h"

#include <string.h>

/* The retained message at commit-log offset phys (a binary search of the commit log order), or
 * NULL. */
db_msg_t *rmq__db_find_phys(db_broker_t *b, int64_t phys)
{
    size_t lo = 0, hi = b->log_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        db_msg_t *m = b->log[(b->log_head + mid) % b->log_cap];
        if (m->phys == phys) return m;
        if (m->phys < phys)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Read back the fields of one stored message (CONSUMER_SEND_MSG_BACK, property filters, the
 * message index). */
int rmq__db_stored_parse(const db_msg_t *m, db_stored_t *v)
{
    const uint8_t *p = (const uint8_t *)m->data, *end = p + m->size;
    memset(v, 0, sizeof(*v));
    uint32_t magic = rmq__rd32(p + 4);
    v->flag = (int32_t)rmq__rd32(p + 16);
    v->sys_flag = (int32_t)rmq__rd32(p + 36);
    v->born_ts = (int64_t)rmq__rd64(p + 40);
    const uint8_t *q = p + 48;
    v->born_ip_len = (v->sys_flag & RMQ_SYSFLAG_BORNHOST_V6) ? 16 : 4;
    memcpy(v->born_host, q, (size_t)v->born_ip_len);
    v->born_port = (int32_t)rmq__rd32(q + v->born_ip_len);
    q += v->born_ip_len + 4;
    q += 8; /* store timestamp */
    q += ((v->sys_flag & RMQ_SYSFLAG_STOREHOST_V6) ? 16 : 4) + 4;
    /* Every length is checked against the size: a message damaged in place
     * (rmq_devbroker_corrupt) is read by the message index when it leaves the store. */
    if (end - q < 4 + 8 + 4) return -1;
    v->reconsume = (int32_t)rmq__rd32(q);
    q += 4 + 8;
    v->body_len = rmq__rd32(q);
    q += 4;
    v->body = (const char *)q;
    size_t tll = magic == RMQ_MSG_MAGIC_V2 ? 2 : 1;
    if ((size_t)(end - q) < (size_t)v->body_len + tll) return -1;
    q += v->body_len;
    v->topic_len = tll == 2 ? rmq__rd16(q) : *q;
    q += tll;
    if ((size_t)(end - q) < v->topic_len + 2) return -1;
    v->topic = (const char *)q;
    q += v->topic_len;
    v->props_len = rmq__rd16(q);
    q += 2;
    v->props = (const char *)q;
    return (size_t)(end - q) < v->props_len ? -1 : 0;
}

/* The fields a message stored again keeps from v (flag, sysFlag, reconsumeTimes, born time and
 * host, body); topic, queue and properties are zero for the caller to set. The result borrows v's
 * pointers (v itself for born_host): valid while v and its message are. */
db_msg_in_t rmq__db_stored_in(const db_stored_t *v)
{
    db_msg_in_t in = {.flag = v->flag,
                      .sys_flag = v->sys_flag,
                      .reconsume = v->reconsume,
                      .born_ts = v->born_ts,
                      .born_host = v->born_host,
                      .born_ip_len = v->born_ip_len,
                      .born_port = v->born_port,
                      .body = v->body,
                      .body_len = v->body_len};
    return in;
}
