/*
 * test_pop.c -- the POP extraInfo of the consumer (rmq__pop_extra_info, pop.c) against what
 * the Java client's ExtraInfoUtil.buildExtraInfo(ckQueueOffset, popTime, invisibleTime,
 * reviveQid, topic, brokerName, queueId, msgQueueOffset) builds: eight fields joined by
 * MessageConst.KEY_SEPARATOR (" "), the fifth the retry mark of the topic (getRetry: "0" a
 * normal topic, "1" a retry topic, "2" a V2 POP retry topic, KeyBuilder.buildPopRetryTopicV2).
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

int main(void)
{
    test_extra_info();
    return test_report("test_pop");
}
