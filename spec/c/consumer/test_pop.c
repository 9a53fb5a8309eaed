/*
 * test_pop.c -- the POP extraInfo of the consumer (rmq__pop_extra_info, pop.c) against what
 * the Java client's ExtraInfoUtil.buildExtraInfo(ckQueueOffset, popTime, invisibleTime,
 * reviveQid, topic, brokerName, queueId, msgQueueOffset) builds: eight fields joined by
 * MessageConst.KEY_SEPARATOR (" "), the fifth the retry mark of the topic (getRetry: "0" a
 * normal topic, "1" a retry topic, "2" a V2 POP retry topic, KeyBuilder.buildPopRetryTopicV2);
 * and the delivery counts of an order=true POP answer's orderCountInfo
 * (rmq__pop_order_count, ExtraInfoUtil.parseOrderCountInfo and processPopResponse's lookup).
 * Single-threaded.
 */
#include "consumer/consumer_int.h"

#include <stdio.h>
#include <string.h>

#include "test_util.h"

static void test_extra_info(void)
{
    char out[512];
    rmq__pop_extra_info(out, sizeof(out), 5, 1700000000000LL, 60000, 0, "TopicA", "broker-a", 3,
                        7);
    CHECK(!strcmp(out, "5 1700000000000 60000 0 0 broker-a 3 7"));
    rmq__pop_extra_info(out, sizeof(out), 0, 1, 5000, 2, "%RETRY%g_TopicA", "b", 0, 0);
    CHECK(!strcmp(out, "0 1 5000 2 1 b 0 0"));
    rmq__pop_extra_info(out, sizeof(out), 9, 2, 300000, 1, "%RETRY%g+TopicA", "b", 1, 12);
    CHECK(!strcmp(out, "9 2 300000 1 2 b 1 12"));
    /* the group retry topic is a retry topic too ("1"); a '+' outside a retry topic is not */
    rmq__pop_extra_info(out, sizeof(out), 1, 1, 1, 0, "%RETRY%g", "b", 0, 1);
    CHECK(!strcmp(out, "1 1 1 0 1 b 0 1"));
    rmq__pop_extra_info(out, sizeof(out), 1, 1, 1, 0, "a+b", "b", 0, 1);
    CHECK(!strcmp(out, "1 1 1 0 0 b 0 1"));
    /* 64-bit offsets as they are; a small buffer truncates, NUL-terminated */
    rmq__pop_extra_info(out, sizeof(out), INT64_MAX, 1, 1, 0, "T", "b", 2147483647, INT64_MAX);
    CHECK(!strcmp(out, "9223372036854775807 1 1 0 0 b 2147483647 9223372036854775807"));
    char small[8];
    rmq__pop_extra_info(small, sizeof(small), 123456789, 1, 1, 0, "T", "b", 0, 1);
    CHECK(!strcmp(small, "1234567"));
}

static void test_order_count(void)
{
    /* ConsumerOrderInfoManager.update: a count per offset delivered before, then the queue's */
    const char *info = "0 qo3%7 2;0 qo3%8 1;0 3 1";
    CHECK(rmq__pop_order_count(info, '0', 3, 7) == 2);
    CHECK(rmq__pop_order_count(info, '0', 3, 8) == 1);
    CHECK(rmq__pop_order_count(info, '0', 3, 9) == 1);  /* the queue's entry */
    CHECK(rmq__pop_order_count(info, '0', 4, 7) == -1); /* another queue */
    CHECK(rmq__pop_order_count(info, '1', 3, 7) == -1); /* another retry mark */
    CHECK(rmq__pop_order_count("0 2 0", '0', 2, 0) == 0);
    /* one entry, no ";"; the queue's entry before the message's does not hide it */
    CHECK(rmq__pop_order_count("0 12 1;0 qo12%5 4", '0', 12, 5) == 4);
    /* qo1%1 is not queue 11's nor offset 11's */
    CHECK(rmq__pop_order_count("0 qo1%1 3", '0', 11, 1) == -1);
    CHECK(rmq__pop_order_count("0 qo1%1 3", '0', 1, 11) == -1);
    /* 64-bit offsets */
    CHECK(rmq__pop_order_count("2 qo0%9223372036854775807 5", '2', 0, INT64_MAX) == 5);
    /* malformed or empty: skipped */
    CHECK(rmq__pop_order_count("", '0', 0, 0) == -1);
    CHECK(rmq__pop_order_count(NULL, '0', 0, 0) == -1);
    CHECK(rmq__pop_order_count(";;0;0 qo0%1;garbage;0 0 7", '0', 0, 1) == 7);
}

int main(void)
{
    test_extra_info();
    test_order_count();
    return test_report("test_pop");
}
