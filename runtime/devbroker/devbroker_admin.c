/*
 * devbroker_admin.c -- the admin requests the Java mqadmin 4.9.4 and the RocketMQ Dashboard
 * send, served by the development broker like AdminBrokerProcessor (broker side) and
 * DefaultRequestProcessor (name server side) do:
 *
 *   broker: GET_BROKER_CONFIG (getBrokerConfig), GET_ALL_TOPIC_CONFIG (the Dashboard's topic
 *   configs), GET_BROKER_RUNTIME_INFO (clusterList, brokerStatus), GET_TOPIC_STATS_INFO
 *   (topicStatus), GET_PRODUCER_CONNECTION_LIST
 *   (producerConnection; producers are learnt from the producerDataSet of HEART_BEAT, as
 *   ProducerManager does), DELETE_TOPIC_IN_BROKER (deleteTopic), QUERY_TOPIC_CONSUME_BY_WHO
 *   (topicList -c, consumerProgress), VIEW_BROKER_STATS_DATA (statsAll),
 *   GET_BROKER_CONSUME_STATS (brokerConsumeStats);
 *   name server: GET_ALL_TOPIC_LIST_FROM_NAMESERVER (topicList, consumerProgress, statsAll),
 *   GET_TOPICS_BY_CLUSTER, GET_SYSTEM_TOPIC_LIST_FROM_NS (the Dashboard's system topics),
 *   DELETE_TOPIC_IN_NAMESRV (deleteTopic).
 *
 * Bodies are written in the captured 4.9.4 form: fastjson's sorted field names, MessageQueue
 * objects as map keys in java.util.HashMap order, Double.toString numbers, the properties text
 * of MixAll.properties2String. Values come from this broker's state (offsets, counters of
 * devbroker_stats.c, its addresses and options).
 *
 * With --store a deleted topic is written to DIR/<broker>/deletedTopics (its name and the
 * commit-log end at deletion) so that its messages are not recovered at the next start.
 *
 * Ownership: b->admin (created on first use) owns the producer groups (pointers to the client
 * records of devbroker_client.c, dropped when their connection closes) and the deleted-topic
 * table. Threads: the broker thread only.
 */
#include "devbroker_int.h"
#include "protocol/fjson.h"
#include "protocol/message.h"
#include "protocol/sql92.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

struct db_admin {
    db_map_t producers; /* group -> prod_group_t */
    db_map_t deleted;   /* topic -> int64_t: commit-log end when it was deleted */
};

typedef struct prod_group {
    db_client_t **members;
    int n, cap;
} prod_group_t;

static struct db_admin *admin_of(db_broker_t *b)
{
    if (!b->admin) b->admin = rmq__xcalloc(1, sizeof(*b->admin));
    return b->admin;
}

static void pg_free(void *v)
{
    prod_group_t *g = v;
    free(g->members);
    free(g);
}

void rmq__db_admin_free(db_broker_t *b)
{
    if (!b->admin) return;
    rmq__dbmap_free(&b->admin->producers, pg_free);
    rmq__dbmap_free(&b->admin->deleted, free);
    free(b->admin);
    b->admin = NULL;
}

/* ---- producers (ProducerManager) ------------------------------------------------------------- */

void rmq__db_producers_heartbeat(db_broker_t *b, db_client_t *c, const char *const *groups, int n)
{
    if (n == 0) return;
    struct db_admin *a = admin_of(b);
    for (int i = 0; i < n; i++) {
        prod_group_t *g = rmq__dbmap_get(&a->producers, groups[i]);
        if (!g) {
            g = rmq__xcalloc(1, sizeof(*g));
            rmq__dbmap_put(&a->producers, groups[i], g);
        }
        int have = 0;
        for (int k = 0; k < g->n; k++)
            have |= g->members[k] == c;
        if (have) continue;
        if (g->n == g->cap) {
            g->cap = g->cap ? g->cap * 2 : 4;
            g->members = realloc(g->members, sizeof(*g->members) * (size_t)g->cap);
            if (!g->members) abort();
        }
        g->members[g->n++] = c;
        rmq_dbg(RMQ_DBG_BROKER, DB_LOG, "%s: producer group %s gains %s", b->name, groups[i],
                c->client_id ? c->client_id : "?");
    }
}

static void pg_remove(prod_group_t *g, db_client_t *c)
{
    for (int k = 0; k < g->n; k++) {
        if (g->members[k] != c) continue;
        memmove(g->members + k, g->members + k + 1, sizeof(*g->members) * (size_t)(g->n - k - 1));
        g->n--;
        return;
    }
}

void rmq__db_producers_unregister(db_broker_t *b, db_client_t *c, const char *group)
{
    /* ProducerManager.unregisterProducer: an emptied group goes. */
    if (!b->admin) return;
    prod_group_t *g = rmq__dbmap_get(&b->admin->producers, group);
    if (!g) return;
    pg_remove(g, c);
    if (g->n == 0) pg_free(rmq__dbmap_del(&b->admin->producers, group));
}

static void drop_one(const char *key, void *val, void *ud)
{
    pg_remove(val, ud);
}

void rmq__db_producers_drop(db_broker_t *b, db_client_t *c)
{
    /* ProducerManager.doChannelCloseEvent: the channel leaves every group (groups stay). */
    if (b->admin) rmq__dbmap_each(&b->admin->producers, drop_one, c);
}

static void conn_json(rmq_buf_t *o, const db_client_t *c, int first)
{
    const char *lang = rmq_language_name(c->language);
    rmq__buf_appendf(o, "%s{\"clientAddr\":", first ? "" : ",");
    rmq__fj_write_str(o, c->addr, strlen(c->addr), 0);
    rmq__buf_appendf(o, ",\"clientId\":");
    rmq__fj_write_str(o, c->client_id ? c->client_id : "", c->client_id ? strlen(c->client_id) : 0,
                      0);
    rmq__buf_appendf(o, ",\"language\":\"%s\",\"version\":%d}", lang ? lang : "OTHER", c->version);
}

void rmq__db_conn_set_json(rmq_buf_t *o, db_client_t *const *members, int n)
{
    rmq__buf_appendf(o, "{\"connectionSet\":[");
    for (int i = 0; i < n; i++)
        conn_json(o, members[i], i == 0);
    rmq__buf_append(o, "]", 1);
}

/* GET_PRODUCER_CONNECTION_LIST (AdminBrokerProcessor.getProducerConnectionList). */
static void h_producer_conns(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = (db_broker_t *)node;
    const char *group = rmq__db_need_ext(conn, req, "producerGroup");
    if (!group) return;
    prod_group_t *g = b->admin ? rmq__dbmap_get(&b->admin->producers, group) : NULL;
    if (!g) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_SYSTEM_ERROR, "the producer group[%s] not exist",
                            group);
        return;
    }
    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__db_conn_set_json(&o, g->members, g->n);
    rmq__buf_append(&o, "}", 1);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
}

/* ---- small helpers --------------------------------------------------------------------------- */

static void kv(rmq_buf_t *o, const char *k, const char *v)
{
    if (o->data[o->len - 1] != '{') rmq__buf_append(o, ",", 1);
    rmq__fj_write_str(o, k, strlen(k), 0);
    rmq__buf_append(o, ":", 1);
    rmq__fj_write_str(o, v, strlen(v), 0);
}

static void kv_i64(rmq_buf_t *o, const char *k, int64_t v)
{
    char s[32];
    snprintf(s, sizeof(s), "%lld", (long long)v);
    kv(o, k, s);
}

static void kv_dbl(rmq_buf_t *o, const char *k, double d)
{
    rmq_buf_t t;
    rmq__buf_init(&t);
    rmq__db_java_double(&t, d);
    rmq__buf_append_u8(&t, 0);
    kv(o, k, t.data);
    rmq__buf_free(&t);
}

/* "t10 t60 t600" as StoreStatsService.getPutTps() etc. write them. */
static void kv_tps3(rmq_buf_t *o, const char *k, const double *tps)
{
    rmq_buf_t t;
    rmq__buf_init(&t);
    for (int i = 0; i < 3; i++) {
        if (i) rmq__buf_append(&t, " ", 1);
        rmq__db_java_double(&t, tps[i]);
    }
    rmq__buf_append_u8(&t, 0);
    kv(o, k, t.data);
    rmq__buf_free(&t);
}

/* UtilAll.humanReadableByteCount(bytes, false): "0 B", "13.1 KiB", "252.0 GiB". */
static void human_bytes(char *out, size_t size, double bytes)
{
    if (bytes < 1024) {
        snprintf(out, size, "%.0f B", bytes);
        return;
    }
    static const char units[] = "KMGTPE";
    int e = 0;
    double v = bytes;
    while (v >= 1024 && e < 6) {
        v /= 1024;
        e++;
    }
    snprintf(out, size, "%.1f %ciB", v, units[e - 1]);
}

static const char *store_root(const db_broker_t *b)
{
    return b->dir ? b->dir : "";
}

/* The oldest retained message of the commit log, or NULL. */
static const db_msg_t *oldest(const db_broker_t *b)
{
    return b->log_n ? b->log[b->log_head] : NULL;
}

/* ---- GET_BROKER_RUNTIME_INFO ----------------------------------------------------------------- */

/* AdminBrokerProcessor.prepareRuntimeInfo: the KVTable, keys in the order of the captured
 * 4.9.4 answer (a HashMap's order). Thread pools do not exist here: their queues are empty and
 * their capacities the Java defaults; puts complete synchronously (latencies 0). */
static void h_runtime_info(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = (db_broker_t *)node;
    int db5 = node->db->rocketmq5; /* a 5.3.3 broker's version */
    db_stats_totals_t st;
    rmq__db_stats_totals(b, &st);
    int64_t now = rmq__now_ms();
    int64_t up = (now - b->boot_ms) / 1000;
    char rt[128], cap[128], flush[32];
    snprintf(rt, sizeof(rt), "[ %lld days, %lld hours, %lld minutes, %lld seconds ]",
             (long long)(up / 86400), (long long)(up / 3600 % 24), (long long)(up / 60 % 60),
             (long long)(up % 60));
    /* UtilAll.getDiskPartitionSpaceUsedPercent: -1 without a store directory, else the used
     * share of its file system rounded to 2 decimals. */
    double ratio = -1.0;
    cap[0] = 0;
    if (b->dir) {
        struct statvfs vs;
        if (statvfs(b->dir, &vs) == 0 && vs.f_blocks > 0) {
            double total = (double)vs.f_blocks * (double)vs.f_frsize;
            double fr = (double)vs.f_bavail * (double)vs.f_frsize;
            ratio = (double)(int64_t)((total - fr) / total * 100 + 0.5) / 100.0;
            char t1[32], t2[32];
            human_bytes(t1, sizeof(t1), total);
            human_bytes(t2, sizeof(t2), fr);
            snprintf(cap, sizeof(cap), "Total : %s, Free : %s.", t1, t2);
        }
    }
    char ratio_s[48];
    rmq__java_double_str(ratio, ratio_s, sizeof(ratio_s));
    human_bytes(flush, sizeof(flush), 0); /* every put is written before it is answered */
    const db_msg_t *first = oldest(b);
    int64_t msg_get_total = st.get_transferred;

    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__buf_appendf(&o, "{\"table\":{");
    kv_i64(&o, "msgPutTotalTodayNow", st.put_times);
    for (int i = 0; i < 18; i++) {
        /* scheduleMessageOffset_<level>: "<delivered>,<max>" of SCHEDULE_TOPIC_XXXX. */
        if (b->sched_off[i] <= 0) continue;
        int64_t pending = 0;
        for (const db_delayed_t *d = b->delayed; d; d = d->next) {
            uint32_t vl = 0;
            const char *lv = rmq__props_find(d->props, d->props_len, "DELAY", 5, &vl);
            pending += lv && vl && vl < 4 && atoi(lv) == i + 1;
        }
        char k[40], v[64];
        snprintf(k, sizeof(k), "scheduleMessageOffset_%d", i + 1);
        snprintf(v, sizeof(v), "%lld,%lld", (long long)(b->sched_off[i] - pending),
                 (long long)b->sched_off[i]);
        kv(&o, k, v);
    }
    kv(&o, "sendThreadPoolQueueHeadWaitTimeMills", "0");
    {
        char d[300];
        snprintf(d, sizeof(d),
                 "[<=0ms]:%lld [0~10ms]:0 [10~50ms]:0 [50~100ms]:0 [100~200ms]:0 "
                 "[200~500ms]:0 [500ms~1s]:0 [1~2s]:0 [2~3s]:0 [3~4s]:0 [4~5s]:0 [5~10s]:0 "
                 "[10s~]:0 ",
                 (long long)st.put_times);
        kv(&o, "putMessageDistributeTime", d);
    }
    kv(&o, "queryThreadPoolQueueHeadWaitTimeMills", "0");
    kv(&o, "remainHowManyDataToFlush", flush);
    kv_i64(&o, "msgGetTotalTodayNow", msg_get_total);
    kv(&o, "queryThreadPoolQueueSize", "0");
    kv_i64(&o, "bootTimestamp", b->boot_ms);
    kv(&o, "msgPutTotalYesterdayMorning", "0");
    kv(&o, "msgGetTotalYesterdayMorning", "0");
    kv(&o, "pullThreadPoolQueueSize", "0");
    kv_i64(&o, "commitLogMinOffset", first ? first->phys : 0);
    kv(&o, "pullThreadPoolQueueHeadWaitTimeMills", "0");
    kv(&o, "runtime", rt);
    kv(&o, "dispatchMaxBuffer", "0");
    kv_i64(&o, "brokerVersion", db5 ? DB_VERSION_V5_3_3 : RMQ_VERSION_V4_9_4);
    kv_tps3(&o, "putTps", st.put_tps);
    kv_tps3(&o, "getMissTps", st.get_miss_tps);
    kv_tps3(&o, "getTransferedTps", st.get_transferred_tps);
    kv(&o, "EndTransactionQueueSize", "0");
    kv_tps3(&o, "getTotalTps", st.get_total_tps);
    kv(&o, "consumeQueueDiskRatio", ratio_s);
    kv(&o, "pageCacheLockTimeMills", "0");
    kv(&o, "commitLogDiskRatio", ratio_s);
    kv_tps3(&o, "getFoundTps", st.get_found_tps);
    kv(&o, "EndTransactionThreadPoolQueueCapacity", "100000");
    kv(&o, "putMessageFailedTimes", "0");
    kv(&o, "putLatency999", "0.00");
    if (b->dir) {
        char k[4200];
        snprintf(k, sizeof(k), "commitLogDiskRatio_%s/commitlog", b->dir);
        kv(&o, k, ratio_s);
    }
    kv_i64(&o, "commitLogMaxOffset", b->next_phys);
    kv(&o, "getMessageEntireTimeMax", "0");
    kv(&o, "msgPutTotalTodayMorning", "0");
    kv_i64(&o, "putMessageTimesTotal", st.put_times);
    kv(&o, "putLatency99", "0.00");
    kv(&o, "msgGetTotalTodayMorning", "0");
    kv(&o, "brokerVersionDesc", db5 ? "V5_3_3" : "V4_9_4");
    kv(&o, "sendThreadPoolQueueSize", "0");
    kv(&o, "startAcceptSendRequestTimeStamp", "0");
    kv(&o, "putMessageEntireTimeMax", "0");
    kv_i64(&o, "earliestMessageTimeStamp", first ? first->store_ts : -1);
    if (cap[0]) kv(&o, "commitLogDirCapacity", cap);
    kv(&o, "remainTransientStoreBufferNumbs", "2147483647");
    kv(&o, "queryThreadPoolQueueCapacity", "20000");
    kv_dbl(&o, "putMessageAverageSize",
           st.put_times ? (double)st.put_size / (double)st.put_times : 0.0);
    kv(&o, "dispatchBehindBytes", "0");
    kv_i64(&o, "putMessageSizeTotal", st.put_size);
    kv(&o, "sendThreadPoolQueueCapacity", "10000");
    kv(&o, "pullThreadPoolQueueCapacity", "100000");
    rmq__buf_append(&o, "}}", 2);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
}

/* ---- GET_BROKER_CONFIG ----------------------------------------------------------------------- */

/* The configuration as the 4.9.4 broker lists it (BrokerConfig, NettyServerConfig,
 * NettyClientConfig, MessageStoreConfig; Properties order of the captured answer). NULL values
 * are this broker's own and filled in below; the rest are the Java defaults, which the
 * development broker follows (queue, transfer and message limits) or does not have
 * (thread pools, file sizes). */
static const char *const config_keys[][2] = {
    {"shortPollingTimeMills", "1000"},
    {"serverSocketBacklog", "1024"},
    {"clientWorkerThreads", "4"},
    {"clientAsyncSemaphoreValue", "65535"},
    {"channelNotActiveInterval", "60000"},
    {"enableConsumeQueueExt", "false"},
    {"clientSocketSndBufSize", "0"},
    {"haHousekeepingInterval", "20000"},
    {"consumerManageThreadPoolNums", "32"},
    {"transactionCheckInterval", "60000"},
    {"storePathRootDir", NULL},
    {"autoCreateTopicEnable", "true"},
    {"syncFlushTimeout", "5000"},
    {"clientChannelMaxIdleTimeSeconds", "120"},
    {"autoDeleteUnusedStats", "false"},
    {"maxIndexNum", "20000000"},
    {"defaultTopicQueueNums", NULL},
    {"clientSocketRcvBufSize", "0"},
    {"clientManagerThreadPoolQueueCapacity", "1000000"},
    {"writeBufferLowWaterMark", "0"},
    {"debugLockEnable", "false"},
    {"notifyConsumerIdsChangedEnable", "true"},
    {"enableDetailStat", "true"},
    {"brokerFastFailureEnable", "true"},
    {"transientStorePoolEnable", "false"},
    {"queryMessageThreadPoolNums", "10"},
    {"maxMessageSize", "4194304"},
    {"useReentrantLockWhenPutMessage", "true"},
    {"waitTimeMillsInTransactionQueue", "3000"},
    {"messageIndexEnable", "true"},
    {"commercialBaseCount", "1"},
    {"diskFallRecorded", "true"},
    {"scheduleAsyncDeliverMaxResendNum2Blocked", "3"},
    {"endTransactionThreadPoolNums", "12"},
    {"filterSupportRetry", "false"},
    {"brokerTopicEnable", "true"},
    {"destroyMapedFileIntervalForcibly", "120000"},
    {"messageDelayLevel", "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"},
    {"offsetCheckInSlave", "false"},
    {"deleteConsumeQueueFilesInterval", "100"},
    {"flushCommitLogTimed", "true"},
    {"isolateLogEnable", "false"},
    {"haSlaveFallbehindMax", "268435456"},
    {"waitTimeMillsInSendQueue", "200"},
    {"defaultQueryMaxNum", "32"},
    {"namesrvAddr", NULL},
    {"clientCloseSocketIfTimeout", "true"},
    {"haSendHeartbeatInterval", "5000"},
    {"serverCallbackExecutorThreads", "0"},
    {"brokerName", NULL},
    {"fetchNamesrvAddrByAddressServer", "false"},
    {"longPollingEnable", "true"},
    {"enableCalcFilterBitMap", "false"},
    {"redeleteHangedFileInterval", "120000"},
    {"diskMaxUsedSpaceRatio", "75"},
    {"transactionCheckMax", "15"},
    {"maxTransferBytesOnMessageInMemory", "262144"},
    {"enableScheduleMessageStats", "true"},
    {"flushCommitLogLeastPages", "4"},
    {"maxHashSlotNum", "5000000"},
    {"sendMessageThreadPoolNums", "2"},
    {"serverSocketRcvBufSize", "0"},
    {"putMsgIndexHightWater", "600000"},
    {"accessMessageInMemoryMaxRatio", "40"},
    {"slaveReadEnable", "false"},
    {"fileReservedTime", "48"},
    {"enableDLegerCommitLog", "false"},
    {"commercialTransCount", "1"},
    {"replyThreadPoolQueueCapacity", "10000"},
    {"consumerFallbehindThreshold", "17179869184"},
    {"maxErrorRateOfBloomFilter", "20"},
    {"storeReplyMessageEnable", "true"},
    {"heartbeatThreadPoolNums", "2"},
    {"startAcceptSendRequestTimeStamp", "0"},
    {"traceOn", "true"},
    {"flushDiskType", "ASYNC_FLUSH"},
    {"maxLmqConsumeQueueNum", "20000"},
    {"rejectTransactionMessage", "false"},
    {"flushIntervalConsumeQueue", "1000"},
    {"clientOnewaySemaphoreValue", "65535"},
    {"isEnableBatchPush", "false"},
    {"highSpeedMode", "false"},
    {"adminBrokerThreadPoolNums", "16"},
    {"flushConsumeQueueThoroughInterval", "60000"},
    {"sendThreadPoolQueueCapacity", "10000"},
    {"putThreadPoolQueueCapacity", "10000"},
    {"commercialTimerCount", "1"},
    {"pullThreadPoolQueueCapacity", "100000"},
    {"haListenPort", NULL},
    {"commitIntervalCommitLog", "200"},
    {"serverSocketSndBufSize", "0"},
    {"enableMultiDispatch", "false"},
    {"flushConsumeQueueLeastPages", "2"},
    {"mappedFileSizeConsumeQueue", "6000000"},
    {"transientStorePoolSize", "5"},
    {"registerNameServerPeriod", "30000"},
    {"writeBufferHighWaterMark", "0"},
    {"disableConsumeIfConsumerReadSlowly", "false"},
    {"serverChannelMaxIdleTimeSeconds", NULL},
    {"commercialBigCount", "1"},
    {"mappedFileSizeCommitLog", "1073741824"},
    {"maxTransferBytesOnMessageInDisk", "65536"},
    {"serverOnewaySemaphoreValue", "256"},
    {"checkCRCOnRecover", "true"},
    {"forceRegister", "true"},
    {"transferMsgByHeap", "true"},
    {"flushConsumerOffsetInterval", "5000"},
    {"flushDelayOffsetInterval", "10000"},
    {"endTransactionPoolQueueCapacity", "100000"},
    {"flushIntervalCommitLog", "500"},
    {"waitTimeMillsInPullQueue", "5000"},
    {"deleteWhen", "04"},
    {"flushCommitLogThoroughInterval", "10000"},
    {"aclEnable", NULL},
    {"cleanResourceInterval", "10000"},
    {"serverAsyncSemaphoreValue", "64"},
    {"connectTimeoutMillis", "3000"},
    {"storePathCommitLog", NULL},
    {"clientPooledByteBufAllocatorEnable", "false"},
    {"commitCommitLogThoroughInterval", "200"},
    {"rocketmqHome", NULL},
    {"useEpollNativeSelector", "false"},
    {"maxTransferCountOnMessageInMemory", "32"},
    {"serverPooledByteBufAllocatorEnable", "true"},
    {"autoCreateSubscriptionGroup", "true"},
    {"flushLeastPagesWhenWarmMapedFile", "4096"},
    {"filterDataCleanTimeSpan", "86400000"},
    {"warmMapedFileEnable", "false"},
    {"traceTopicEnable", "false"},
    {"clientManageThreadPoolNums", "32"},
    {"consumerManagerThreadPoolQueueCapacity", "1000000"},
    {"cleanFileForciblyEnable", "true"},
    {"serverSelectorThreads", "3"},
    {"enableScheduleAsyncDeliver", "false"},
    {"compressedRegister", "false"},
    {"brokerIP2", NULL},
    {"enableLmq", "false"},
    {"commitCommitLogLeastPages", "4"},
    {"brokerRole", NULL},
    {"brokerIP1", NULL},
    {"brokerPermission", "6"},
    {"maxDelayTime", "40"},
    {"transactionTimeOut", "6000"},
    {"maxTransferCountOnMessageInDisk", "8"},
    {"clientCallbackExecutorThreads", "2"},
    {"filterServerNums", "0"},
    {"fastFailIfNoBufferInStorePool", "false"},
    {"useTLS", NULL},
    {"duplicationEnable", "false"},
    {"pullMessageThreadPoolNums", "20"},
    {"brokerId", NULL},
    {"registerBrokerTimeoutMills", "6000"},
    {"mappedFileSizeConsumeQueueExt", "50331648"},
    {"msgTraceTopicName", "RMQ_SYS_TRACE_TOPIC"},
    {"osPageCacheBusyTimeOutMills", "1000"},
    {"expectConsumerNumUseFilter", "32"},
    {"scheduleAsyncDeliverMaxPendingLimit", "2000"},
    {"serverWorkerThreads", "8"},
    {"slaveTimeout", "3000"},
    {"queryThreadPoolQueueCapacity", "20000"},
    {"maxMsgsNumBatch", "64"},
    {"flushConsumerOffsetHistoryInterval", "60000"},
    {"bitMapLengthConsumeQueueExt", "112"},
    {"processReplyMessageThreadPoolNums", "20"},
    {"clusterTopicEnable", "true"},
    {"regionId", "DefaultRegion"},
    {"putMessageFutureThreadPoolNums", "2"},
    {"brokerClusterName", NULL},
    {"commercialEnable", "true"},
    {"haTransferBatchSize", "32768"},
    {"messageStorePlugIn", ""},
    {"listenPort", NULL},
    {"waitTimeMillsInHeartbeatQueue", "31000"},
    {"messageIndexSafe", "false"},
    {"heartbeatThreadPoolQueueCapacity", "50000"},
    {"enablePropertyFilter", NULL},
    {"deleteCommitLogFilesInterval", "100"},
};

static void own_config(const db_broker_t *b, const char *key, char *out, size_t size)
{
    const rmq_devbroker_t *db = b->node.db;
    if (!strcmp(key, "storePathRootDir"))
        snprintf(out, size, "%s", store_root(b));
    else if (!strcmp(key, "storePathCommitLog"))
        snprintf(out, size, "%s%s", store_root(b), b->dir ? "/commitlog" : "");
    else if (!strcmp(key, "defaultTopicQueueNums"))
        snprintf(out, size, "%d", db->default_queues);
    else if (!strcmp(key, "namesrvAddr"))
        snprintf(out, size, "%s", db->ns_addr);
    else if (!strcmp(key, "brokerName"))
        snprintf(out, size, "%s", b->name);
    else if (!strcmp(key, "brokerClusterName"))
        snprintf(out, size, "%s", db->cluster);
    else if (!strcmp(key, "listenPort"))
        snprintf(out, size, "%d", b->node.port);
    else if (!strcmp(key, "haListenPort"))
        snprintf(out, size, "%d", b->node.port + 1);
    else if (!strcmp(key, "serverChannelMaxIdleTimeSeconds"))
        snprintf(out, size, "%lld", (long long)(db->channel_expire_ms / 1000));
    else if (!strcmp(key, "aclEnable"))
        snprintf(out, size, "%s", db->acl ? "true" : "false");
    else if (!strcmp(key, "useTLS"))
        snprintf(out, size, "%s", db->tls ? "true" : "false");
    else if (!strcmp(key, "rocketmqHome"))
        snprintf(out, size, "%s", getenv("ROCKETMQ_HOME") ? getenv("ROCKETMQ_HOME") : "");
    else if (!strcmp(key, "brokerIP1") || !strcmp(key, "brokerIP2"))
        snprintf(out, size, "%u.%u.%u.%u", b->node.store_ip[0], b->node.store_ip[1],
                 b->node.store_ip[2], b->node.store_ip[3]);
    else if (!strcmp(key, "brokerRole"))
        snprintf(out, size, "%s", b->master ? "SLAVE" : "ASYNC_MASTER");
    else if (!strcmp(key, "brokerId"))
        snprintf(out, size, "%lld", (long long)b->id);
    else if (!strcmp(key, "enablePropertyFilter"))
        snprintf(out, size, "%s", db->property_filter ? "true" : "false");
    else
        out[0] = 0;
}

/* GET_BROKER_CONFIG: MixAll.properties2String ("key=value\n" each) and the configuration's
 * data version in the "version" header field. */
static void h_broker_config(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = (db_broker_t *)node;
    rmq_buf_t o;
    rmq__buf_init(&o);
    for (size_t i = 0; i < RMQ_ARRAY_SIZE(config_keys); i++) {
        char v[4300];
        const char *val = config_keys[i][1];
        if (!val) {
            own_config(b, config_keys[i][0], v, sizeof(v));
            val = v;
        }
        rmq__buf_appendf(&o, "%s=%s\n", config_keys[i][0], val);
    }
    rmq_cmd_t resp;
    rmq__cmd_init_response(&resp, req, RMQ_RESP_SUCCESS, NULL);
    char ver[96];
    snprintf(ver, sizeof(ver), "{\"counter\":0,\"timestamp\":%lld}", (long long)b->boot_ms);
    rmq__cmd_set_ext(&resp, "version", ver);
    resp.body = o.data;
    resp.body_len = o.len;
    if (!(req->flag & RMQ_FLAG_ONEWAY)) rmq__db_reply(conn, &resp);
    resp.body = NULL;
    resp.body_len = 0;
    rmq__cmd_free(&resp);
    rmq__buf_free(&o);
}

/* ---- GET_ALL_TOPIC_CONFIG -------------------------------------------------------------------- */

static void topic_config_json(const char *key, void *val, void *ud)
{
    rmq_buf_t *o = ud;
    const db_topic_t *t = val;
    if (o->data[o->len - 1] != '{') rmq__buf_append(o, ",", 1);
    rmq__fj_write_str(o, t->name, strlen(t->name), 0);
    rmq__buf_appendf(o,
                     ":{\"order\":%s,\"perm\":%d,\"readQueueNums\":%d,"
                     "\"topicFilterType\":\"SINGLE_TAG\",\"topicName\":",
                     t->order ? "true" : "false", t->perm, t->read_q);
    rmq__fj_write_str(o, t->name, strlen(t->name), 0);
    rmq__buf_appendf(o, ",\"topicSysFlag\":%d,\"writeQueueNums\":%d}", t->sys_flag, t->write_q);
}

/* GET_ALL_TOPIC_CONFIG (the Dashboard's and mqadmin's examineTopicConfig): the topic table as
 * TopicConfigManager.encode() writes it. */
static void h_all_topic_config(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = (db_broker_t *)node;
    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__buf_appendf(&o,
                     "{\"dataVersion\":{\"counter\":%lld,\"timestamp\":%lld},"
                     "\"topicConfigTable\":{",
                     (long long)b->data_version, (long long)b->boot_ms);
    rmq__dbmap_each(&b->topics, topic_config_json, &o);
    rmq__buf_append(&o, "}}", 2);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
}

/* ---- GET_TOPIC_STATS_INFO -------------------------------------------------------------------- */

/* AdminBrokerProcessor.getTopicStatsInfo: per write queue min, max and the store time of the
 * last message, in the HashMap order of TopicStatsTable.offsetTable. */
static void h_topic_stats(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = (db_broker_t *)node;
    const char *topic = rmq__db_need_ext(conn, req, "topic");
    if (!topic) return;
    db_topic_t *t = rmq__db_topic_get(b, topic);
    if (!t) {
        rmq__db_reply_codef(conn, req, RMQ_RESP_TOPIC_NOT_EXIST, "topic[%s] not exist", topic);
        return;
    }
    int n = t->write_q;
    int *order = rmq__xmalloc(sizeof(*order) * ((size_t)n + 1));
    rmq__db_mq_hash_order(b->name, t->name, n, order);
    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__buf_appendf(&o, "{\"offsetTable\":{");
    for (int k = 0; k < n; k++) {
        int i = order[k];
        db_queue_t *q = rmq__db_queue(t, i);
        int64_t min = q ? q->min_off : 0, max = q ? rmq__db_qmax(q) : 0, ts = 0;
        if (max > 0 && q) {
            db_msg_t *m = rmq__db_qget(q, max - 1);
            if (m) ts = m->store_ts;
        }
        if (k) rmq__buf_append(&o, ",", 1);
        rmq__db_mq_json(&o, b->name, i, t->name);
        rmq__buf_appendf(&o,
                         ":{\"lastUpdateTimestamp\":%lld,\"maxOffset\":%lld,\"minOffset\":%lld}",
                         (long long)ts, (long long)max, (long long)min);
    }
    rmq__buf_append(&o, "}}", 2);
    free(order);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
}

/* ---- QUERY_TOPIC_CONSUME_BY_WHO -------------------------------------------------------------- */

typedef struct {
    const char *topic;
    size_t tl;
    db_map_t seen;
    rmq_buf_t *o;
    int n;
} who_t;

static void who_add(who_t *w, const char *group, size_t len)
{
    char g[512];
    if (len >= sizeof(g)) return;
    memcpy(g, group, len);
    g[len] = 0;
    if (rmq__dbmap_get(&w->seen, g)) return;
    rmq__dbmap_put(&w->seen, g, (void *)1);
    if (w->n++) rmq__buf_append(w->o, ",", 1);
    rmq__fj_write_str(w->o, g, len, 0);
}

static void who_online(const char *key, void *val, void *ud)
{
    who_t *w = ud;
    db_group_t *g = val;
    if (rmq__dbmap_get(&g->subs, w->topic)) who_add(w, g->name, strlen(g->name));
}

static void who_offsets(const char *key, void *val, void *ud)
{
    /* "group\001topic\001qid" */
    who_t *w = ud;
    const char *s1 = strchr(key, '\001');
    if (!s1 || strncmp(s1 + 1, w->topic, w->tl) != 0 || s1[1 + w->tl] != '\001') return;
    who_add(w, key, (size_t)(s1 - key));
}

/* AdminBrokerProcessor.queryTopicConsumeByWho: the online groups subscribing the topic and the
 * groups with an offset on it. */
static void h_consume_by_who(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = (db_broker_t *)node;
    const char *topic = rmq__db_need_ext(conn, req, "topic");
    if (!topic) return;
    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__buf_appendf(&o, "{\"groupList\":[");
    who_t w = {.topic = topic, .tl = strlen(topic), .o = &o};
    rmq__dbmap_each(&b->groups, who_online, &w);
    rmq__dbmap_each(&b->offsets, who_offsets, &w);
    rmq__dbmap_free(&w.seen, NULL);
    rmq__buf_append(&o, "]}", 2);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
}

/* ---- VIEW_BROKER_STATS_DATA ------------------------------------------------------------------ */

static void h_stats_data(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = (db_broker_t *)node;
    const char *name = rmq__db_need_ext(conn, req, "statsName");
    const char *key = name ? rmq__db_need_ext(conn, req, "statsKey") : NULL;
    if (!key) return;
    int id = rmq__db_stats_name(name);
    rmq_buf_t o;
    rmq__buf_init(&o);
    if (id < 0 || rmq__db_stats_view(b, id, key, &o) < 0) {
        char msg[600];
        snprintf(msg, sizeof(msg), "The stats <%s> <%s> not exist", name, key);
        rmq__buf_free(&o);
        rmq__db_reply_code(conn, req, RMQ_RESP_SYSTEM_ERROR, msg);
        return;
    }
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
}

/* ---- GET_BROKER_CONSUME_STATS ---------------------------------------------------------------- */

typedef struct {
    db_broker_t *b;
    rmq_buf_t *o;
    int order_only, n;
    int64_t total_diff;
} bcs_t;

/* One group of fetchAllConsumeStatsInBroker: {"<group>":[ConsumeStats per topic]}. */
static void bcs_group(db_subgroup_t *sg, void *ud)
{
    bcs_t *x = ud;
    db_broker_t *b = x->b;
    rmq_buf_t *o = x->o;
    char **topics = rmq__xmalloc(sizeof(*topics) * 512);
    int ntopics = rmq__db_offset_topics(b, sg->name, topics, 512);
    db_group_t *online = rmq__dbmap_get(&b->groups, sg->name);
    if (x->n++) rmq__buf_append(o, ",", 1);
    rmq__buf_append(o, "{", 1);
    rmq__fj_write_str(o, sg->name, strlen(sg->name), 0);
    rmq__buf_append(o, ":[", 2);
    int nt = 0;
    for (int k = 0; k < ntopics; k++) {
        db_topic_t *t = rmq__db_topic_get(b, topics[k]);
        if (!t) continue;
        if (x->order_only && !t->order) continue;
        if (online && online->subs.n > 0 && !rmq__dbmap_get(&online->subs, t->name)) continue;
        int n = t->write_q;
        int *order = rmq__xmalloc(sizeof(*order) * ((size_t)n + 1));
        rmq__db_mq_hash_order(b->name, t->name, n, order);
        if (nt++) rmq__buf_append(o, ",", 1);
        rmq__buf_appendf(o, "{\"consumeTps\":");
        rmq__db_java_double(o, rmq__db_stats_group_tps(b, t->name, sg->name));
        rmq__buf_appendf(o, ",\"offsetTable\":{");
        for (int j = 0; j < n; j++) {
            int i = order[j];
            db_queue_t *q = rmq__db_queue(t, i);
            int64_t max = q ? rmq__db_qmax(q) : 0;
            int64_t co = rmq__db_offset_get(b, sg->name, t->name, i);
            if (co < 0) co = 0;
            int64_t last = 0;
            if (co > 0 && q) {
                db_msg_t *m = rmq__db_qget(q, co - 1);
                if (m) last = m->store_ts;
            }
            x->total_diff += max - co;
            if (j) rmq__buf_append(o, ",", 1);
            rmq__db_mq_json(o, b->name, i, t->name);
            rmq__buf_appendf(o,
                             ":{\"brokerOffset\":%lld,\"consumerOffset\":%lld,"
                             "\"lastTimestamp\":%lld}",
                             (long long)max, (long long)co, (long long)last);
        }
        rmq__buf_append(o, "}}", 2);
        free(order);
    }
    rmq__buf_append(o, "]}", 2);
    for (int k = 0; k < ntopics; k++)
        free(topics[k]);
    free(topics);
}

/* AdminBrokerProcessor.fetchAllConsumeStatsInBroker: every subscription group with its
 * ConsumeStats per topic it has offsets on (isOrder: order topics only), and the total diff. */
static void h_broker_consume_stats(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = (db_broker_t *)node;
    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__buf_appendf(&o, "{\"brokerAddr\":");
    rmq__fj_write_str(&o, b->node.addr, strlen(b->node.addr), 0);
    rmq__buf_appendf(&o, ",\"consumeStatsList\":[");
    bcs_t x = {.b = b, .o = &o, .order_only = rmq__cmd_ext_bool(req, "isOrder")};
    rmq__db_subgroup_each(b, bcs_group, &x);
    rmq__buf_appendf(&o, "],\"totalDiff\":%lld}", (long long)x.total_diff);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
}

/* ---- DELETE_TOPIC_IN_BROKER ------------------------------------------------------------------ */

static void deleted_save(db_broker_t *b)
{
    if (b->log_fd < 0 || !b->admin) return;
    rmq_buf_t o;
    rmq__buf_init(&o);
    for (size_t i = 0; i < b->admin->deleted.nb; i++)
        for (db_ent_t *e = b->admin->deleted.b[i]; e; e = e->next)
            rmq__buf_appendf(&o, "%s %lld\n", e->key, (long long)*(int64_t *)e->val);
    if (rmq__db_file_save(b, "deletedTopics", &o))
        rmq_log_error(DB_LOG, "%s: cannot save deleted topics in %s: %s", b->name, b->dir,
                      strerror(errno));
    rmq__buf_free(&o);
}

static void deleted_mark(db_broker_t *b, const char *topic, int64_t end)
{
    struct db_admin *a = admin_of(b);
    int64_t *v = rmq__dbmap_get(&a->deleted, topic);
    if (!v) {
        v = rmq__xmalloc(sizeof(*v));
        rmq__dbmap_put(&a->deleted, topic, v);
    } else if (*v >= end) {
        return;
    }
    *v = end;
}

void rmq__db_deleted_load(db_broker_t *b)
{
    size_t len;
    char *txt = rmq__db_file_read(b, "deletedTopics", &len);
    for (char *line = txt ? strtok(txt, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        char name[512];
        long long end;
        if (sscanf(line, "%511s %lld", name, &end) == 2) deleted_mark(b, name, end);
    }
    free(txt);
}

int rmq__db_deleted_skip(db_broker_t *b, const char *topic, int64_t phys)
{
    int64_t *v = b->admin ? rmq__dbmap_get(&b->admin->deleted, topic) : NULL;
    return v && phys < *v;
}

static void delete_on(db_broker_t *b, const char *topic)
{
    db_topic_t *t = rmq__db_topic_get(b, topic);
    if (!t) return;
    rmq__db_topic_delete(b, t);
    if (b->log_fd >= 0) {
        deleted_mark(b, topic, b->next_phys);
        deleted_save(b);
    }
}

/* AdminBrokerProcessor.deleteTopic: the topic config goes and, with it, its queues
 * (cleanUnusedTopic); the broker's slaves follow. Deleting an unknown topic succeeds. */
static void h_delete_topic(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    db_broker_t *b = (db_broker_t *)node;
    rmq_devbroker_t *db = node->db;
    const char *topic = rmq__db_need_ext(conn, req, "topic");
    if (!topic) return;
    char name[512];
    snprintf(name, sizeof(name), "%s", topic);
    if (rmq__db_topic_get(b, name))
        rmq_log_info(DB_LOG, "%s: topic %s deleted by %s", b->name, name, rmq__conn_peer(conn));
    delete_on(b, name);
    for (int i = 0; i < db->n_brokers; i++)
        if (db->brokers[i]->master == b) delete_on(db->brokers[i], name);
    if (db->remote_ns) rmq__db_register_all(db);
    rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
}

void rmq__db_admin_install(db_broker_t *b)
{
    db_node_t *n = &b->node;
    b->boot_ms = rmq__now_ms();
    rmq__db_set_handler(n, RMQ_REQ_GET_BROKER_CONFIG, h_broker_config);
    rmq__db_set_handler(n, RMQ_REQ_GET_ALL_TOPIC_CONFIG, h_all_topic_config);
    rmq__db_set_handler(n, RMQ_REQ_GET_BROKER_RUNTIME_INFO, h_runtime_info);
    rmq__db_set_handler(n, RMQ_REQ_GET_TOPIC_STATS_INFO, h_topic_stats);
    rmq__db_set_handler(n, RMQ_REQ_GET_PRODUCER_CONNECTION_LIST, h_producer_conns);
    rmq__db_set_handler(n, RMQ_REQ_DELETE_TOPIC_IN_BROKER, h_delete_topic);
    rmq__db_set_handler(n, RMQ_REQ_QUERY_TOPIC_CONSUME_BY_WHO, h_consume_by_who);
    rmq__db_set_handler(n, RMQ_REQ_VIEW_BROKER_STATS_DATA, h_stats_data);
    rmq__db_set_handler(n, RMQ_REQ_GET_BROKER_CONSUME_STATS, h_broker_consume_stats);
}

/* ---- name server ----------------------------------------------------------------------------- */

typedef struct {
    db_map_t seen;
    rmq_buf_t *o;
    int n;
} tl_t;

static void tl_add(tl_t *tl, const char *topic)
{
    if (rmq__dbmap_get(&tl->seen, topic)) return;
    rmq__dbmap_put(&tl->seen, topic, (void *)1);
    if (tl->n++) rmq__buf_append(tl->o, ",", 1);
    rmq__fj_write_str(tl->o, topic, strlen(topic), 0);
}

static void tl_each(const char *key, void *val, void *ud)
{
    tl_add(ud, key);
}

/* The TopicList of the brokers of cluster (NULL: every broker) the name server knows. */
static void topic_list(rmq_devbroker_t *db, const char *cluster, rmq_buf_t *o)
{
    tl_t tl = {.o = o};
    rmq__buf_appendf(o, "{\"topicList\":[");
    for (int i = 0; i < db->n_brokers; i++) {
        db_broker_t *b = db->brokers[i];
        if (b->down || (cluster && strcmp(cluster, db->cluster) != 0)) continue;
        rmq__dbmap_each(&b->topics, tl_each, &tl);
    }
    for (db_remote_t *r = db->remotes; r; r = r->next)
        if (!cluster || strcmp(cluster, r->cluster) == 0) rmq__dbmap_each(&r->topics, tl_each, &tl);
    rmq__dbmap_free(&tl.seen, NULL);
    rmq__buf_append(o, "]}", 2);
}

static void reply_topic_list(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req,
                             const char *cluster)
{
    rmq_buf_t o;
    rmq__buf_init(&o);
    topic_list(node->db, cluster, &o);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
}

/* GET_ALL_TOPIC_LIST_FROM_NAMESERVER (RouteInfoManager.getAllTopicList). */
static void h_all_topics(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    reply_topic_list(node, conn, req, NULL);
}

/* GET_TOPICS_BY_CLUSTER (RouteInfoManager.getTopicsByCluster). */
static void h_topics_by_cluster(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    const char *cluster = rmq__db_need_ext(conn, req, "cluster");
    if (cluster) reply_topic_list(node, conn, req, cluster);
}

/* GET_SYSTEM_TOPIC_LIST_FROM_NS (RouteInfoManager.getSystemTopicList, the Dashboard's system
 * topics): the cluster names and broker names, and the address of a broker. */
static void h_system_topics(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    rmq_devbroker_t *db = node->db;
    rmq_buf_t o;
    rmq__buf_init(&o);
    tl_t tl = {.o = &o};
    const char *addr = NULL;
    rmq__buf_appendf(&o, "{");
    for (int i = 0; i < db->n_brokers && !addr; i++)
        if (!db->brokers[i]->down && !db->brokers[i]->master) addr = db->brokers[i]->node.addr;
    if (!addr && db->remotes) addr = db->remotes->addr;
    if (addr) {
        rmq__buf_appendf(&o, "\"brokerAddr\":");
        rmq__fj_write_str(&o, addr, strlen(addr), 0);
        rmq__buf_append(&o, ",", 1);
    }
    rmq__buf_appendf(&o, "\"topicList\":[");
    int any = 0;
    for (int i = 0; i < db->n_brokers; i++) {
        if (db->brokers[i]->down || db->brokers[i]->master) continue;
        if (!any++) tl_add(&tl, db->cluster);
        tl_add(&tl, db->brokers[i]->name);
    }
    for (db_remote_t *r = db->remotes; r; r = r->next) {
        tl_add(&tl, r->cluster);
        tl_add(&tl, r->name);
    }
    rmq__dbmap_free(&tl.seen, NULL);
    rmq__buf_append(&o, "]}", 2);
    rmq__db_reply_body(conn, req, RMQ_RESP_SUCCESS, NULL, &o);
    rmq__buf_free(&o);
}

static void free_remote_topic(void *v)
{
    db_topic_t *t = v;
    free(t->name);
    free(t);
}

/* DELETE_TOPIC_IN_NAMESRV (RouteInfoManager.deleteTopic): the topic's queue data goes from the
 * registrations of brokers of other processes (of clusterName when given). The routes of this
 * process's brokers are read from their topic tables: DELETE_TOPIC_IN_BROKER removes those. */
static void h_delete_topic_ns(db_node_t *node, rmq_conn_t *conn, rmq_cmd_t *req)
{
    rmq_devbroker_t *db = node->db;
    const char *topic = rmq__db_need_ext(conn, req, "topic");
    if (!topic) return;
    const char *cluster = rmq__cmd_ext(req, "clusterName");
    for (db_remote_t *r = db->remotes; r; r = r->next) {
        if (cluster && *cluster && strcmp(cluster, r->cluster) != 0) continue;
        db_topic_t *t = rmq__dbmap_del(&r->topics, topic);
        if (t) free_remote_topic(t);
    }
    rmq__db_reply_code(conn, req, RMQ_RESP_SUCCESS, NULL);
}

void rmq__db_admin_ns_install(rmq_devbroker_t *db)
{
    rmq__db_set_handler(&db->ns, RMQ_REQ_GET_ALL_TOPIC_LIST_FROM_NAMESERVER, h_all_topics);
    rmq__db_set_handler(&db->ns, RMQ_REQ_GET_TOPICS_BY_CLUSTER, h_topics_by_cluster);
    rmq__db_set_handler(&db->ns, RMQ_REQ_GET_SYSTEM_TOPIC_LIST_FROM_NS, h_system_topics);
    rmq__db_set_handler(&db->ns, RMQ_REQ_DELETE_TOPIC_IN_NAMESRV, h_delete_topic_ns);
}
