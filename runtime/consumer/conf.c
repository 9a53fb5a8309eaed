/*
 * conf.c -- the option table, parsing, checkConfig and the generated option reference (conf.h).
 *
 * Ownership: an rmq_conf_t owns its strings, subscriptions and parsed queue list.
 * Threads: no global state; a conf is used by one thread at a time (see conf.h).
 */
#include "conf.h"

#include "base/codes.h"
#include "base/log.h"
#include "protocol/sql92.h"
#include "metrics_http.h"
#include "protocol/subscription.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>

#define FAQ_SEE "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
#define FAQ_DEFAULT                                                                                \
    "\nFor more information, please visit the url, http://rocketmq.apache.org/docs/faq/"
#define GROUP_PATTERN "^[%|a-zA-Z0-9_-]+$"

/* Option flag (internal): the default is computed at rmq__conf_new; defval documents it. */
#define F_DYNAMIC (1 << 8)
/* Option flag (internal): expand a leading "~/" to $HOME. */
#define F_PATH (1 << 9)
/* Option flag (internal): only the default value is accepted; any other value is refused by
 * rmq__conf_set with the description, which says why it is not supported. */
#define F_UNSUPPORTED (1 << 10)

/* ---- enum tables -------------------------------------------------------------------------- */

static const rmq_conf_enum_val_t e_model[] = {
    {"CLUSTERING", RMQ_MODEL_CLUSTERING}, {"BROADCASTING", RMQ_MODEL_BROADCASTING}, {NULL, 0}};

static const rmq_conf_enum_val_t e_cfw[] = {
    {"CONSUME_FROM_LAST_OFFSET", RMQ_CFW_LAST_OFFSET},
    {"CONSUME_FROM_FIRST_OFFSET", RMQ_CFW_FIRST_OFFSET},
    {"CONSUME_FROM_TIMESTAMP", RMQ_CFW_TIMESTAMP},
    {"CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
     RMQ_CFW_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST},
    {"CONSUME_FROM_MIN_OFFSET", RMQ_CFW_MIN_OFFSET},
    {"CONSUME_FROM_MAX_OFFSET", RMQ_CFW_MAX_OFFSET},
    {NULL, 0}};

#define ALLOC_ENUMS_COMMON                                                                         \
    {"AVG", RMQ_ALLOC_AVG}, {"AVG_BY_CIRCLE", RMQ_ALLOC_AVG_BY_CIRCLE},                            \
        {"CONSISTENT_HASH", RMQ_ALLOC_CONSISTENT_HASH}, {"CONFIG", RMQ_ALLOC_CONFIG},              \
        {"MACHINE_ROOM", RMQ_ALLOC_MACHINE_ROOM},                                                  \
        {"AllocateMessageQueueAveragely", RMQ_ALLOC_AVG},                                          \
        {"AllocateMessageQueueAveragelyByCircle", RMQ_ALLOC_AVG_BY_CIRCLE},                        \
        {"AllocateMessageQueueConsistentHash", RMQ_ALLOC_CONSISTENT_HASH},                         \
        {"AllocateMessageQueueByConfig", RMQ_ALLOC_CONFIG},                                        \
    {                                                                                              \
        "AllocateMessageQueueByMachineRoom", RMQ_ALLOC_MACHINE_ROOM                                \
    }

static const rmq_conf_enum_val_t e_alloc[] = {
    ALLOC_ENUMS_COMMON,
    {"MACHINE_ROOM_NEARBY", RMQ_ALLOC_MACHINE_ROOM_NEARBY},
    {"AllocateMachineRoomNearby", RMQ_ALLOC_MACHINE_ROOM_NEARBY},
    {"LUA", RMQ_ALLOC_LUA},
    {NULL, 0}};

static const rmq_conf_enum_val_t e_alloc_inner[] = {ALLOC_ENUMS_COMMON, {NULL, 0}};

static const rmq_conf_enum_val_t e_listener[] = {{"CONCURRENTLY", RMQ_LISTENER_CONCURRENTLY},
                                                 {"ORDERLY", RMQ_LISTENER_ORDERLY},
                                                 {"BOTH", RMQ_LISTENER_BOTH},
                                                 {NULL, 0}};

static const rmq_conf_enum_val_t e_log_format[] = {
    {"text", RMQ_LOG_TEXT}, {"json", RMQ_LOG_JSON}, {NULL, 0}};

static const rmq_conf_enum_val_t e_lang[] = {
#define LANG_ENUM_(n, v) {#n, v},
    RMQ_LANGUAGE_CODES(LANG_ENUM_)
#undef LANG_ENUM_
        {NULL, 0}};

/* ---- validators ----------------------------------------------------------------------------- */

static void free_config_mqs(rmq_conf_t *c)
{
    int i;
    for (i = 0; i < c->n_alloc_config_mqs; i++) {
        free(c->alloc_config_mqs[i].topic);
        free(c->alloc_config_mqs[i].broker_name);
    }
    free(c->alloc_config_mqs);
    c->alloc_config_mqs = NULL;
    c->n_alloc_config_mqs = 0;
}

/* "topic:brokerName:queueId,..." -> conf->alloc_config_mqs. */
static int v_config_queues(rmq_conf_t *c, const char *v, char *errstr, size_t n)
{
    rmq_mq_t *mqs = NULL;
    int nmq = 0, cap = 0;
    const char *p = v ? v : "";
    while (*p) {
        const char *e = strchr(p, ','), *c1, *c2, *s = p;
        size_t len;
        char *item, *end;
        long qid;
        if (!e) e = p + strlen(p);
        len = (size_t)(e - p);
        while (len && isspace((unsigned char)*s))
            s++, len--;
        while (len && isspace((unsigned char)s[len - 1]))
            len--;
        p = *e ? e + 1 : e;
        if (!len) continue;
        item = rmq__xstrndup(s, len);
        c1 = strchr(item, ':');
        c2 = strrchr(item, ':');
        errno = 0;
        qid = (c1 && c2 > c1) ? strtol(c2 + 1, &end, 10) : 0;
        if (!c1 || c2 == c1 || c1 == item || c2 == c1 + 1 || !c2[1] || *end || errno || qid < 0 ||
            qid > INT_MAX) {
            rmq__seterr(errstr, n,
                        "allocate_config_queues: bad queue \"%s\" (expected "
                        "topic:brokerName:queueId, comma-separated)",
                        item);
            free(item);
            for (int i = 0; i < nmq; i++)
                free(mqs[i].topic), free(mqs[i].broker_name);
            free(mqs);
            return -1;
        }
        if (nmq == cap) {
            cap = cap ? cap * 2 : 4;
            mqs = realloc(mqs, sizeof(*mqs) * (size_t)cap);
            if (!mqs) abort();
        }
        mqs[nmq].topic = rmq__xstrndup(item, (size_t)(c1 - item));
        mqs[nmq].broker_name = rmq__xstrndup(c1 + 1, (size_t)(c2 - c1 - 1));
        mqs[nmq].queue_id = (int)qid;
        nmq++;
        free(item);
    }
    free_config_mqs(c);
    c->alloc_config_mqs = mqs;
    c->n_alloc_config_mqs = nmq;
    return 0;
}

/* Checked without touching the live log settings, which other threads may be reading. */
static int v_log_debug(rmq_conf_t *c, const char *v, char *errstr, size_t n)
{
    return rmq__log_debug_parse(v, errstr, n) < 0 ? -1 : 0;
}

static int v_metrics_listen(rmq_conf_t *c, const char *v, char *errstr, size_t n)
{
    char err[256];
    if (!v) return 0;
    if (rmq__metrics_parse_listen(v, NULL, 0, NULL, err, sizeof(err))) {
        rmq__seterr(errstr, n, "metrics_listen: %s", err);
        return -1;
    }
    return 0;
}

static int v_nonempty(rmq_conf_t *c, const char *v, char *errstr, size_t n)
{
    if (!v || !*v) {
        rmq__seterr(errstr, n, "machine_room_separator: must not be empty");
        return -1;
    }
    return 0;
}

/* ---- the table --------------------------------------------------------------------------------
 */

#define OFF(f) offsetof(rmq_conf_t, f)
#define NOLIM 0, 0
#define I32 INT32_MIN, INT32_MAX
#define I64 INT64_MIN, INT64_MAX

static const rmq_conf_prop_t props[] = {
    /* consumer */
    {"consumer_group", "consumerGroup", RMQ_CONF_STRING, OFF(consumer_group), "DEFAULT_CONSUMER",
     NOLIM, "not blank, <= 255 chars of [%|a-zA-Z0-9_-], not DEFAULT_CONSUMER", NULL, NULL,
     RMQ_CONF_F_JAVA_CHECK,
     "Consumer group. Consumers of one group share the topic's queues (CLUSTERING)."},
    {"message_model", "messageModel", RMQ_CONF_ENUM, OFF(message_model), "CLUSTERING", NOLIM, NULL,
     e_model, NULL, RMQ_CONF_F_JAVA_CHECK,
     "CLUSTERING: the group shares the queues and offsets live on the broker. BROADCASTING: "
     "every consumer gets every message, offsets in a local file."},
    {"consume_from_where", "consumeFromWhere", RMQ_CONF_ENUM, OFF(consume_from_where),
     "CONSUME_FROM_LAST_OFFSET", NOLIM, NULL, e_cfw, NULL, RMQ_CONF_F_JAVA_CHECK,
     "Where a queue with no committed offset starts. The deprecated Java names "
     "(..._AND_FROM_MIN_WHEN_BOOT_FIRST, CONSUME_FROM_MIN_OFFSET, CONSUME_FROM_MAX_OFFSET) behave "
     "as CONSUME_FROM_LAST_OFFSET."},
    {"consume_timestamp", "consumeTimestamp", RMQ_CONF_STRING, OFF(consume_timestamp),
     "now - 30 min", NOLIM, "yyyyMMddHHmmss (lenient, local time)", NULL, NULL,
     RMQ_CONF_F_JAVA_CHECK | F_DYNAMIC,
     "Start time for CONSUME_FROM_TIMESTAMP, yyyyMMddHHmmss in local time."},
    {"allocate_message_queue_strategy", "allocateMessageQueueStrategy", RMQ_CONF_ENUM,
     OFF(allocate_message_queue_strategy), "AVG", NOLIM,
     "AVG, AVG_BY_CIRCLE, CONSISTENT_HASH, CONFIG, MACHINE_ROOM, MACHINE_ROOM_NEARBY[-<inner>], "
     "LUA, or the Java class name",
     e_alloc, NULL, RMQ_CONF_F_JAVA_CHECK,
     "Queue allocation strategy (Java getName() or class name; MACHINE_ROOM_NEARBY-<inner> also "
     "sets the inner strategy; LUA = the script's allocate hook)."},
    {"allocate_nearby_inner_strategy", NULL, RMQ_CONF_ENUM, OFF(allocate_nearby_inner_strategy),
     "AVG", NOLIM, "AVG, AVG_BY_CIRCLE, CONSISTENT_HASH, MACHINE_ROOM, or the Java class name",
     e_alloc_inner, NULL, 0, "Inner strategy of MACHINE_ROOM_NEARBY, applied per machine room."},
    {"allocate_config_queues", NULL, RMQ_CONF_STRING, OFF(allocate_config_queues), NULL, NOLIM,
     "topic:brokerName:queueId,...", NULL, v_config_queues, 0,
     "CONFIG strategy: the fixed queue list (AllocateMessageQueueByConfig.messageQueueList)."},
    {"allocate_machine_room_idcs", NULL, RMQ_CONF_STRING, OFF(allocate_machine_room_idcs), NULL,
     NOLIM, "idc,idc,...", NULL, NULL, 0,
     "MACHINE_ROOM strategy: the consumer's machine rooms (consumeridcs); brokerNames must look "
     "like <idc>@<name>."},
    {"machine_room_separator", NULL, RMQ_CONF_STRING, OFF(machine_room_separator), "-", NOLIM,
     "non-empty", NULL, v_nonempty, 0,
     "MACHINE_ROOM_NEARBY resolver: the machine room of a brokerName / clientId is the part "
     "before the first separator (the whole string without one)."},
    {"consistent_hash_virtual_nodes", NULL, RMQ_CONF_INT, OFF(consistent_hash_virtual_nodes), "10",
     0, 100000, NULL, NULL, NULL, 0,
     "CONSISTENT_HASH strategy: virtual nodes per consumer (virtualNodeCnt)."},
    {"message_listener", "messageListener", RMQ_CONF_ENUM, OFF(message_listener), NULL, NOLIM, NULL,
     e_listener, NULL, RMQ_CONF_F_JAVA_CHECK | F_DYNAMIC,
     "Set by the runtime from the script's hooks (consume: CONCURRENTLY, consume_orderly: "
     "ORDERLY); a script or --set that sets it is refused."},
    {"consume_thread_min", "consumeThreadMin", RMQ_CONF_INT, OFF(consume_thread_min), "20", 1, 1000,
     NULL, NULL, NULL, RMQ_CONF_F_JAVA_CHECK,
     "Consume threads (one LuaJIT state each); must be <= consume_thread_max."},
    {"consume_thread_max", "consumeThreadMax", RMQ_CONF_INT, OFF(consume_thread_max), "20", 1, 1000,
     NULL, NULL, NULL, RMQ_CONF_F_JAVA_CHECK,
     "Checked as Java checks it (1..1000, >= consume_thread_min). As in Java, whose consume "
     "pool has an unbounded queue and so never grows past its core size, no more than "
     "consume_thread_min threads run."},
    {"adjust_thread_pool_nums_threshold", "adjustThreadPoolNumsThreshold", RMQ_CONF_INT64,
     OFF(adjust_thread_pool_nums_threshold), "100000", I64, "100000 only", NULL, NULL,
     F_UNSUPPORTED,
     "Not supported: the thread-pool adjustment it drives does nothing in Java 4.9.4 either "
     "(ConsumeMessageConcurrentlyService.incCorePoolSize is empty), so only the default is "
     "accepted."},
    {"consume_concurrently_max_span", "consumeConcurrentlyMaxSpan", RMQ_CONF_INT,
     OFF(consume_concurrently_max_span), "2000", 1, 65535, NULL, NULL, NULL, RMQ_CONF_F_JAVA_CHECK,
     "Concurrent consumption: stop pulling a queue while its cached offset span exceeds this."},
    {"pull_threshold_for_queue", "pullThresholdForQueue", RMQ_CONF_INT,
     OFF(pull_threshold_for_queue), "1000", 1, 65535, NULL, NULL, NULL, RMQ_CONF_F_JAVA_CHECK,
     "Flow control: cached messages per queue."},
    {"pull_threshold_size_for_queue", "pullThresholdSizeForQueue", RMQ_CONF_INT,
     OFF(pull_threshold_size_for_queue), "100", 1, 1024, NULL, NULL, NULL, RMQ_CONF_F_JAVA_CHECK,
     "Flow control: memory the cached messages of a queue hold, MiB (the whole pulled "
     "frame of each, not only its body)."},
    {"pull_threshold_for_topic", "pullThresholdForTopic", RMQ_CONF_INT,
     OFF(pull_threshold_for_topic), "-1", -1, 6553500, "-1 (off) or 1..6553500", NULL, NULL,
     RMQ_CONF_F_JAVA_CHECK,
     "Flow control per topic, split over the owned queues (overrides pull_threshold_for_queue)."},
    {"pull_threshold_size_for_topic", "pullThresholdSizeForTopic", RMQ_CONF_INT,
     OFF(pull_threshold_size_for_topic), "-1", -1, 102400, "-1 (off) or 1..102400", NULL, NULL,
     RMQ_CONF_F_JAVA_CHECK, "Flow control per topic in MiB, split over the owned queues."},
    {"pull_interval", "pullInterval", RMQ_CONF_INT64, OFF(pull_interval), "0", 0, 65535, NULL, NULL,
     NULL, RMQ_CONF_F_JAVA_CHECK, "Pause between pulls of one queue, ms."},
    {"consume_message_batch_max_size", "consumeMessageBatchMaxSize", RMQ_CONF_INT,
     OFF(consume_message_batch_max_size), "1", 1, 1024, NULL, NULL, NULL, RMQ_CONF_F_JAVA_CHECK,
     "Messages per handler call."},
    {"pull_batch_size", "pullBatchSize", RMQ_CONF_INT, OFF(pull_batch_size), "32", 1, 1024, NULL,
     NULL, NULL, RMQ_CONF_F_JAVA_CHECK, "Messages per PULL_MESSAGE request."},
    {"client_rebalance", "clientRebalance", RMQ_CONF_BOOL, OFF(client_rebalance), "true", NOLIM,
     NULL, NULL, NULL, 0,
     "RocketMQ 5: false asks the broker which queues this client gets and in which mode, PULL "
     "or POP (QUERY_ASSIGNMENT, RebalanceImpl.getRebalanceResultFromBroker); a 4.x broker that "
     "does not know the request falls back to the client-side allocation. BROADCASTING "
     "consumers always allocate on the client, as in Java. Unlike Java 5.3.3, which leaves "
     "orderly POP unimplemented and always allocates an orderly consumer on the client, an "
     "orderly consumer with false asks the broker too and pops its POP queues with order=true, "
     "each queue in offset order (README, RocketMQ 5)."},
    {"pop_threshold_for_queue", "popThresholdForQueue", RMQ_CONF_INT,
     OFF(pop_threshold_for_queue), "96", 1, 65535, NULL, NULL, NULL, 0,
     "POP flow control: popped messages of one assignment waiting for their ack before the "
     "next POP_MESSAGE waits."},
    {"pop_invisible_time", "popInvisibleTime", RMQ_CONF_INT64, OFF(pop_invisible_time), "60000",
     5000, 300000, NULL, NULL, NULL, RMQ_CONF_F_JAVA_CHECK,
     "POP: ms a popped message stays invisible to the group before the broker delivers it "
     "again (unless acked)."},
    {"pop_batch_nums", "popBatchNums", RMQ_CONF_INT, OFF(pop_batch_nums), "32", 1, 32, NULL,
     NULL, NULL, RMQ_CONF_F_JAVA_CHECK, "POP: messages per POP_MESSAGE request (maxMsgNums)."},
    {"post_subscription_when_pull", "postSubscriptionWhenPull", RMQ_CONF_BOOL,
     OFF(post_subscription_when_pull), "false", NOLIM, NULL, NULL, NULL, 0,
     "Send the subscription expression with every pull."},
    {"unit_mode", "unitMode", RMQ_CONF_BOOL, OFF(unit_mode), "false", NOLIM, NULL, NULL, NULL, 0,
     "Unit mode: sent in the heartbeat's consumer data (the broker then creates the retry "
     "topic as a unit topic) and in the re-sends to %RETRY%."},
    {"max_reconsume_times", "maxReconsumeTimes", RMQ_CONF_INT, OFF(max_reconsume_times), "-1", I32,
     NULL, NULL, NULL, 0,
     "Deliveries before a message goes to the DLQ; -1 = 16 (concurrently) or unlimited "
     "(orderly)."},
    {"suspend_current_queue_time_millis", "suspendCurrentQueueTimeMillis", RMQ_CONF_INT64,
     OFF(suspend_current_queue_time_millis), "1000", 0, INT64_MAX, NULL, NULL, NULL, 0,
     "Orderly: pause before a failed batch is retried, ms."},
    {"consume_timeout", "consumeTimeout", RMQ_CONF_INT64, OFF(consume_timeout), "15", 1,
     INT64_MAX / 60000, ">= 1", NULL, NULL, 0,
     "Minutes. A handler running longer is interrupted; concurrently, a message whose handler "
     "started longer ago is sent back (batches waiting for a thread never expire)."},
    {"consume_timeout_millis", NULL, RMQ_CONF_INT64, OFF(consume_timeout_millis), "0", 0,
     INT64_MAX, "0 (use consume_timeout) or >= 1", NULL, NULL, 0,
     "The consume timeout in ms, replacing consume_timeout's minutes when set (> 0)."},
    {"lua_memory_limit_mb", NULL, RMQ_CONF_INT, OFF(lua_memory_limit_mb), "0", 0, 1048576,
     "0 (none) or 1..1048576", NULL, NULL, 0,
     "MiB one consume thread's Lua state may hold, garbage not yet collected included (0 = no "
     "limit). While a handler runs, an allocation past it fails (\"not enough memory\"): that "
     "batch fails and comes back later, and the thread's state is made anew (init runs, then the "
     "old state's shutdown). The process is not stopped."},
    {"lua_socket_max_per_thread", NULL, RMQ_CONF_INT, OFF(lua_socket_max_per_thread), "10000", 1,
     1000000, NULL, NULL, NULL, 0,
     "Cosockets (rmq.socket.tcp) one consume thread may hold open at once, idle ones in the "
     "keep-alive pool included. A connect past it fails with nil and an error naming this "
     "option (the handler decides; an error it raises fails the batch, which comes back later). "
     "Java has no such limit; OpenResty's nearest is worker_connections."},
    {"lua_ssl_trusted_certificate", NULL, RMQ_CONF_STRING, OFF(lua_ssl_trusted_certificate), NULL,
     NOLIM, "PEM file", NULL, NULL, F_PATH,
     "CA certificates (PEM) that sock:sslhandshake(..., true) verifies a server's certificate "
     "against, as OpenResty's directive of that name; unset = the system's CA store. Checked "
     "when the consume threads start."},
    {"lua_ssl_verify_depth", NULL, RMQ_CONF_INT, OFF(lua_ssl_verify_depth), "5", 1, 100, NULL,
     NULL, NULL, 0,
     "The longest certificate chain sock:sslhandshake accepts (intermediate CAs below the "
     "trusted one). OpenResty's default is 1; rmqlua's is 5, so that a public service's usual "
     "chain (a leaf, one or two intermediates) verifies without setting it."},
    {"consume_batches_per_thread", NULL, RMQ_CONF_INT, OFF(consume_batches_per_thread), "64", 1,
     100000, NULL, NULL, NULL, 0,
     "The most batches one consume thread holds in flight (rmqlua's own). A thread runs one "
     "batch at a time until a handler of its state first waits on I/O (rmq.sleep, a cosocket); "
     "from then on its batches run as coroutines, and while some wait it starts others, up to "
     "this many at once. 1 keeps one batch per thread; a handler that never waits runs one "
     "batch at a time whatever the value."},
    {"strict_globals", NULL, RMQ_CONF_BOOL, OFF(strict_globals), "false", NOLIM, NULL, NULL, NULL,
     0,
     "rmqlua's own. `rmqlua check` reports every assignment to a global in the script and in the "
     "modules it loads from its folder, naming file, line and global (a forgotten `local`: the "
     "value lives on in the thread's Lua state into the next batch). false: a warning; true: an "
     "error (exit 2)."},
    {"lua_ngx_shim", NULL, RMQ_CONF_BOOL, OFF(lua_ngx_shim), "false", NOLIM, NULL, NULL, NULL, 0,
     "rmqlua's own. true: the global `ngx` (require \"rmq.ngx\": OpenResty's ngx.socket.tcp, "
     "ngx.sleep, ngx.log, ngx.null, ngx.timer.at, ...) is installed in every Lua state of the "
     "script before the script runs, so that OpenResty's pure-Lua drivers (nginx.redis, "
     "nginx.memcached, ...) load unchanged. false: no global `ngx`."},
    {"await_termination_millis_when_shutdown", "awaitTerminationMillisWhenShutdown", RMQ_CONF_INT64,
     OFF(await_termination_millis_when_shutdown), "0", 0, INT64_MAX, NULL, NULL, NULL, 0,
     "Shutdown: wait this long for running handlers, ms (0 = do not wait)."},
    /* ClientConfig */
    {"namesrv_addr", "namesrvAddr", RMQ_CONF_STRING, OFF(namesrv_addr), "env NAMESRV_ADDR", NOLIM,
     "host:port;host:port", NULL, NULL, F_DYNAMIC, "Name server addresses."},
    {"namesrv_domain", NULL, RMQ_CONF_STRING, OFF(namesrv_domain),
     "env ROCKETMQ_NAMESRV_DOMAIN", NOLIM, "host or host:port", NULL, NULL, F_DYNAMIC,
     "Name server address service (Java's system property rocketmq.namesrv.domain): when "
     "namesrv_addr is not set, the list is fetched from "
     "http://<namesrv_domain>:8080/rocketmq/<namesrv_domain_subgroup> (a domain with a port is "
     "used as it is) at start and every namesrv_addr_refresh_interval ms; a failed fetch or a bad "
     "answer keeps the last good list. Unset = off (Java's default, jmenv.tbsite.net, is not "
     "assumed)."},
    {"namesrv_domain_subgroup", NULL, RMQ_CONF_STRING,
     OFF(namesrv_domain_subgroup), "nsaddr", NOLIM, NULL, NULL, NULL, 0,
     "Last part of the address service's URL (Java's rocketmq.namesrv.domain.subgroup); the "
     "environment's ROCKETMQ_NAMESRV_DOMAIN_SUBGROUP, when set, replaces the default."},
    {"namesrv_addr_refresh_interval", NULL, RMQ_CONF_INT, OFF(namesrv_addr_refresh_interval),
     "120000", 1, INT32_MAX, NULL, NULL, NULL, 0,
     "Period of the address service fetch, ms (Java: a fixed 2 minutes)."},
    {"instance_name", "instanceName", RMQ_CONF_STRING, OFF(instance_name), "DEFAULT", NOLIM, NULL,
     NULL, NULL, 0,
     "Instance name in the clientId; DEFAULT becomes <pid>#<nanotime> in CLUSTERING mode."},
    {"unit_name", "unitName", RMQ_CONF_STRING, OFF(unit_name), NULL, NOLIM, NULL, NULL, NULL, 0,
     "Appended to the clientId when set."},
    {"client_ip", "clientIP", RMQ_CONF_STRING, OFF(client_ip), NULL, NOLIM, NULL, NULL, NULL, 0,
     "IP in the clientId; unset = detected like RemotingUtil.getLocalAddress."},
    {"namespace", "namespace", RMQ_CONF_STRING, OFF(namespace), NULL, NOLIM, NULL, NULL, NULL, 0,
     "Namespace that wraps the group and topics (ns%name)."},
    {"enable_msg_trace", "enableMsgTrace", RMQ_CONF_BOOL, OFF(enable_msg_trace), "false", NOLIM,
     NULL, NULL, NULL, 0,
     "Message trace (RIP-6, Java's DefaultMQPushConsumer(group, enableMsgTrace)): a SubBefore "
     "and a SubAfter record per consumed message (group, request id, message id, retry times, "
     "keys, cost, success, ConsumeReturnType), batched and sent asynchronously to "
     "customized_trace_topic, with the message ids and keys as the trace message's keys, so "
     "`mqadmin QueryMsgTraceById` and the dashboard show who consumed a message. Sending never "
     "slows or fails consumption: records that cannot be sent are dropped, with a warning in "
     "the log at most once a minute."},
    {"customized_trace_topic", "customizedTraceTopic", RMQ_CONF_STRING,
     OFF(customized_trace_topic), "RMQ_SYS_TRACE_TOPIC", NOLIM, "topic name", NULL, NULL, 0,
     "Topic the trace records go to when enable_msg_trace is on (Java's customizedTraceTopic)."},
    {"poll_name_server_interval", "pollNameServerInterval", RMQ_CONF_INT,
     OFF(poll_name_server_interval), "30000", 1, INT32_MAX, NULL, NULL, NULL, 0,
     "Route refresh period, ms."},
    {"heartbeat_broker_interval", "heartbeatBrokerInterval", RMQ_CONF_INT,
     OFF(heartbeat_broker_interval), "30000", 1, INT32_MAX, NULL, NULL, NULL, 0,
     "Heartbeat period, ms."},
    {"persist_consumer_offset_interval", "persistConsumerOffsetInterval", RMQ_CONF_INT,
     OFF(persist_consumer_offset_interval), "5000", 1, INT32_MAX, NULL, NULL, NULL, 0,
     "Offset commit period, ms."},
    {"pull_time_delay_mills_when_exception", "pullTimeDelayMillsWhenException", RMQ_CONF_INT64,
     OFF(pull_time_delay_mills_when_exception), "1000", 0, INT64_MAX, NULL, NULL, NULL, 0,
     "Delay before retrying a failed pull, ms."},
    {"mq_client_api_timeout", "mqClientApiTimeout", RMQ_CONF_INT, OFF(mq_client_api_timeout),
     "3000", 1, INT32_MAX, NULL, NULL, NULL, 0, "Timeout of ordinary requests, ms."},
    {"vip_channel_enabled", "vipChannelEnabled", RMQ_CONF_BOOL, OFF(vip_channel_enabled), "false",
     NOLIM, "false only", NULL, NULL, F_UNSUPPORTED,
     "Not supported: rmqlua never uses the broker's VIP port (port - 2), so only false is "
     "accepted."},
    {"language", "language", RMQ_CONF_ENUM, OFF(language), "JAVA", NOLIM, NULL, e_lang, NULL, 0,
     "LanguageCode of the HEART_BEAT request, which brokers show in their connection lists; "
     "other requests say JAVA, as Java's MQClientAPIImpl sends them."},
    {"access_key", "accessKey", RMQ_CONF_STRING, OFF(access_key), NULL, NOLIM, NULL, NULL, NULL, 0,
     "ACL access key: when set, every request to name servers and brokers is signed as "
     "AclClientRPCHook signs it (needs secret_key)."},
    {"secret_key", "secretKey", RMQ_CONF_STRING, OFF(secret_key), NULL, NOLIM, NULL, NULL, NULL,
     RMQ_CONF_F_SENSITIVE, "ACL secret key (the HmacSHA1 key; needs access_key)."},
    {"security_token", "securityToken", RMQ_CONF_STRING, OFF(security_token), NULL, NOLIM, NULL,
     NULL, NULL, RMQ_CONF_F_SENSITIVE,
     "ACL security token (SessionCredentials.securityToken), signed and sent when set (needs "
     "access_key)."},
    {"enable_stream_request_type", "enableStreamRequestType", RMQ_CONF_BOOL,
     OFF(enable_stream_request_type), "false", NOLIM, NULL, NULL, NULL, 0,
     "Appends @STREAM to the clientId."},
    /* TLS: ClientConfig.useTLS and TlsSystemConfig's tls.client.* */
    {"use_tls", "useTLS", RMQ_CONF_BOOL, OFF(use_tls), "false", NOLIM, NULL, NULL, NULL, 0,
     "TLS on every connection, name servers and brokers."},
    {"tls_test_mode_enable", "tls.test.mode.enable", RMQ_CONF_BOOL, OFF(tls_test_mode_enable),
     "false", NOLIM, NULL, NULL, NULL, 0,
     "Trust any server certificate (no verification). Java's default is true; rmqlua's is false, "
     "so that use_tls alone verifies the server."},
    {"tls_client_cert_path", "tls.client.certPath", RMQ_CONF_STRING, OFF(tls_client_cert_path),
     NULL, NOLIM, "PEM file", NULL, NULL, F_PATH,
     "Client certificate chain presented to servers that ask for one (with tls_client_key_path)."},
    {"tls_client_key_path", "tls.client.keyPath", RMQ_CONF_STRING, OFF(tls_client_key_path), NULL,
     NOLIM, "PEM file", NULL, NULL, F_PATH,
     "Private key of tls_client_cert_path (PKCS#8 or traditional PEM, encrypted or not)."},
    {"tls_client_key_password", "tls.client.keyPassword", RMQ_CONF_STRING,
     OFF(tls_client_key_password), NULL, NOLIM, NULL, NULL, NULL, RMQ_CONF_F_SENSITIVE,
     "Password of an encrypted tls_client_key_path."},
    {"tls_client_trust_cert_path", "tls.client.trustCertPath", RMQ_CONF_STRING,
     OFF(tls_client_trust_cert_path), NULL, NOLIM, "PEM file", NULL, NULL, F_PATH,
     "CA certificates the server's certificate must chain to; unset = the system's CA file."},
    {"tls_client_auth_server", "tls.client.authServer", RMQ_CONF_BOOL,
     OFF(tls_client_auth_server), "true", NOLIM, NULL, NULL, NULL, 0,
     "Verify the server's certificate chain (and, with tls_verify_server_name, that it names the "
     "address dialled). Java's default is false; rmqlua's is true. No effect with "
     "tls_test_mode_enable."},
    {"tls_verify_server_name", NULL, RMQ_CONF_BOOL, OFF(tls_verify_server_name), "true", NOLIM,
     NULL, NULL, NULL, 0,
     "When the server's certificate is verified, it must also name the address dialled: its "
     "subjectAltName DNS entries (or CN without any) for a host name, its IP entries for an IP; "
     "a mismatch fails the handshake. Java does not check (Kafka's "
     "ssl.endpoint.identification.algorithm=https does); false skips the check."},
    /* runtime */
    {"local_offset_store_dir", "localOffsetStoreDir", RMQ_CONF_STRING, OFF(local_offset_store_dir),
     "~/.rocketmq_offsets", NOLIM, NULL, NULL, NULL, F_DYNAMIC | F_PATH,
     "BROADCASTING offsets: <dir>/<clientId>/<group>/offsets.json."},
    {"frame_max_length", "frameMaxLength", RMQ_CONF_INT, OFF(frame_max_length), "16777216", 1024,
     INT32_MAX, NULL, NULL, NULL, 0, "Largest remoting frame accepted, bytes."},
    {"log_debug", NULL, RMQ_CONF_STRING, OFF(log_debug), NULL, NOLIM,
     "remoting,namesrv,rebalance,pull,consume,offset,lua,broker,all", NULL, v_log_debug, 0,
     "Debug log categories."},
    {"log_format", NULL, RMQ_CONF_ENUM, OFF(log_format), "text", NOLIM, NULL, e_log_format, NULL,
     0,
     "Log lines as text, or as JSON objects one per line (time, level, category, message and "
     "key fields such as msg_id, topic, queue, offset). `--log-format`."},
    {"log_file", NULL, RMQ_CONF_STRING, OFF(log_file), NULL, NOLIM, "a file path", NULL, NULL,
     F_PATH,
     "Append log lines to this file instead of stderr; reopened on SIGUSR1 (logrotate). "
     "`--log-file`."},
    {"consume_tps_limit", NULL, RMQ_CONF_INT, OFF(consume_tps_limit), "0", 0, 1000000,
     "0 (off) or 1..1000000", NULL, NULL, 0,
     "rmqlua's own (Java has only pull_interval): at most this many messages per second for the "
     "whole process. A token bucket paces the pulls (a pull asks for no more than the bucket "
     "holds, at most pull_batch_size), so messages do not pile up in memory."},
    {"metrics_listen", NULL, RMQ_CONF_STRING, OFF(metrics_listen), NULL, NOLIM,
     "host:port (port 0 = any free port)", NULL, v_metrics_listen, 0,
     "Serve /metrics (Prometheus), /stats (JSON) and /health over HTTP on this address; unset = "
     "off. `--metrics HOST:PORT`."},
    {"stats_interval_ms", NULL, RMQ_CONF_INT, OFF(stats_interval_ms), "10000", 100, INT32_MAX,
     NULL, NULL, NULL, 0, "Period of the script's on_stats(snapshot) hook, ms."},
};

const rmq_conf_prop_t *rmq__conf_props(int *n)
{
    *n = (int)RMQ_ARRAY_SIZE(props);
    return props;
}

const rmq_conf_prop_t *rmq__conf_prop_find(const char *name)
{
    size_t i;
    if (!name) return NULL;
    for (i = 0; i < RMQ_ARRAY_SIZE(props); i++)
        if (!strcmp(props[i].name, name)) return &props[i];
    return NULL;
}

/* ---- field access ------------------------------------------------------------------------------
 */

#define FIELD(c, p, T) ((T *)((char *)(c) + (p)->offset))
#define CFIELD(c, p, T) ((const T *)((const char *)(c) + (p)->offset))

static const char *enum_name(const rmq_conf_enum_val_t *e, int v)
{
    for (; e->name; e++)
        if (e->value == v) return e->name;
    return NULL;
}

static void enum_allowed(const rmq_conf_enum_val_t *e, char *out, size_t n)
{
    size_t len = 0;
    out[0] = '\0';
    for (; e->name && len + 1 < n; e++) {
        int w = snprintf(out + len, n - len, "%s%s", len ? ", " : "", e->name);
        if (w < 0) break;
        len += (size_t)w;
    }
}

static int parse_bool(const char *v, int *out)
{
    static const char *t[] = {"true", "1", "yes", "on"}, *f[] = {"false", "0", "no", "off"};
    size_t i;
    for (i = 0; i < 4; i++) {
        if (!strcasecmp(v, t[i])) return *out = 1, 0;
        if (!strcasecmp(v, f[i])) return *out = 0, 0;
    }
    return -1;
}

static int parse_i64(const char *v, int64_t *out)
{
    char *end;
    long long x;
    while (isspace((unsigned char)*v))
        v++;
    if (!*v) return -1;
    errno = 0;
    x = strtoll(v, &end, 10);
    while (isspace((unsigned char)*end))
        end++;
    if (errno || *end) return -1;
    *out = x;
    return 0;
}

static int find_enum(const rmq_conf_enum_val_t *e, const char *v, int *out)
{
    static const char pkg[] = "org.apache.rocketmq.client.consumer.rebalance.";
    if (!strncmp(v, pkg, sizeof(pkg) - 1)) v += sizeof(pkg) - 1;
    for (; e->name; e++)
        if (!strcasecmp(e->name, v)) return *out = e->value, 0;
    return -1;
}

static char *expand_path(const char *v)
{
    const char *home = getenv("HOME");
    if (v[0] == '~' && (v[1] == '/' || !v[1]) && home) {
        size_t hl = strlen(home), vl = strlen(v + 1);
        char *p = rmq__xmalloc(hl + vl + 1);
        memcpy(p, home, hl);
        memcpy(p + hl, v + 1, vl + 1);
        return p;
    }
    return rmq__xstrdup(v);
}

static int set_prop(rmq_conf_t *c, const rmq_conf_prop_t *p, const char *v, char *errstr, size_t n)
{
    char allowed[1024];
    switch (p->type) {
    case RMQ_CONF_STRING: {
        char **f = FIELD(c, p, char *);
        if (p->validate && p->validate(c, v, errstr, n)) return RMQ_ERR_CONFIG;
        free(*f);
        *f = v ? ((p->flags & F_PATH) ? expand_path(v) : rmq__xstrdup(v)) : NULL;
        return RMQ_OK;
    }
    case RMQ_CONF_INT:
    case RMQ_CONF_INT64: {
        int64_t x;
        if (!v) {
            rmq__seterr(errstr, n, "option %s: a number is required, not null", p->name);
            return RMQ_ERR_CONFIG;
        }
        if (parse_i64(v, &x) || (p->type == RMQ_CONF_INT && (x < INT32_MIN || x > INT32_MAX))) {
            rmq__seterr(errstr, n, "option %s: \"%s\" is not a %s integer", p->name, v,
                        p->type == RMQ_CONF_INT ? "32-bit" : "64-bit");
            return RMQ_ERR_CONFIG;
        }
        if (p->type == RMQ_CONF_INT)
            *FIELD(c, p, int) = (int)x;
        else
            *FIELD(c, p, int64_t) = x;
        return RMQ_OK;
    }
    case RMQ_CONF_BOOL: {
        int b;
        if (!v || parse_bool(v, &b)) {
            rmq__seterr(errstr, n,
                        "option %s: \"%s\" is not a boolean (allowed: true, false, 1, 0, yes, "
                        "no, on, off)",
                        p->name, v ? v : "null");
            return RMQ_ERR_CONFIG;
        }
        *FIELD(c, p, int) = b;
        return RMQ_OK;
    }
    case RMQ_CONF_ENUM: {
        int e;
        if (!v) {
            *FIELD(c, p, int) = RMQ_CONF_UNSET;
            return RMQ_OK;
        }
        if (p->enums == e_alloc && !strncasecmp(v, "MACHINE_ROOM_NEARBY-", 20)) {
            if (find_enum(e_alloc_inner, v + 20, &e)) {
                enum_allowed(e_alloc_inner, allowed, sizeof(allowed));
                rmq__seterr(errstr, n,
                            "option %s: unknown inner strategy \"%s\" in \"%s\" (allowed: %s)",
                            p->name, v + 20, v, allowed);
                return RMQ_ERR_CONFIG;
            }
            c->allocate_nearby_inner_strategy = e;
            *FIELD(c, p, int) = RMQ_ALLOC_MACHINE_ROOM_NEARBY;
            return RMQ_OK;
        }
        if (find_enum(p->enums, v, &e)) {
            enum_allowed(p->enums, allowed, sizeof(allowed));
            rmq__seterr(errstr, n, "option %s: unknown value \"%s\" (allowed: %s)", p->name, v,
                        allowed);
            return RMQ_ERR_CONFIG;
        }
        *FIELD(c, p, int) = e;
        return RMQ_OK;
    }
    }
    return RMQ_ERR_CONFIG;
}

/* Levenshtein distance, capped (names are short). */
static int edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), i, j;
    int row[64], prev, tmp;
    if (la >= 63 || lb >= 63) return 99;
    for (j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (i = 1; i <= la; i++) {
        prev = row[0];
        row[0] = (int)i;
        for (j = 1; j <= lb; j++) {
            int best = prev + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            tmp = row[j];
            row[j] = best;
            prev = tmp;
        }
    }
    return row[lb];
}

/* The option a mistyped or Java-spelled (camelCase) name most likely meant, or NULL. */
static const char *suggest(const char *name)
{
    const char *best = NULL;
    int best_d = 4;
    size_t i;
    for (i = 0; i < RMQ_ARRAY_SIZE(props); i++) {
        int d;
        if (props[i].java_name && !strcasecmp(props[i].java_name, name)) return props[i].name;
        d = edit_distance(name, props[i].name);
        if (d < best_d) best_d = d, best = props[i].name;
    }
    return best;
}

/* value means the option's default (same number or boolean, same text otherwise). */
static int is_default_value(const rmq_conf_prop_t *p, const char *v)
{
    int64_t a, b;
    int x, y;
    if (!v || !p->defval) return v == p->defval;
    switch (p->type) {
    case RMQ_CONF_INT:
    case RMQ_CONF_INT64:
        return !parse_i64(v, &a) && !parse_i64(p->defval, &b) && a == b;
    case RMQ_CONF_BOOL:
        return !parse_bool(v, &x) && !parse_bool(p->defval, &y) && x == y;
    default:
        return !strcmp(v, p->defval);
    }
}

int rmq__conf_set(rmq_conf_t *c, const char *name, const char *value, char *errstr, size_t n)
{
    const rmq_conf_prop_t *p = rmq__conf_prop_find(name);
    if (!p) {
        const char *s = name ? suggest(name) : NULL;
        if (s)
            rmq__seterr(errstr, n, "unknown option \"%s\" (value \"%s\"); did you mean %s?", name,
                        value ? value : "null", s);
        else
            rmq__seterr(errstr, n, "unknown option \"%s\" (value \"%s\"); see the option reference",
                        name ? name : "null", value ? value : "null");
        return RMQ_ERR_CONFIG;
    }
    if ((p->flags & F_UNSUPPORTED) && !is_default_value(p, value)) {
        rmq__seterr(errstr, n, "option %s=%s is not supported: %s", p->name,
                    value ? value : "null", p->desc);
        return RMQ_ERR_CONFIG;
    }
    return set_prop(c, p, value, errstr, n);
}

static void get_prop(const rmq_conf_t *c, const rmq_conf_prop_t *p, char *out, size_t n,
                     const char *null_text)
{
    switch (p->type) {
    case RMQ_CONF_STRING: {
        const char *s = *CFIELD(c, p, char *);
        if (s && (p->flags & RMQ_CONF_F_SENSITIVE)) s = "[redacted]";
        snprintf(out, n, "%s", s ? s : null_text);
        break;
    }
    case RMQ_CONF_INT:
        snprintf(out, n, "%d", *CFIELD(c, p, int));
        break;
    case RMQ_CONF_INT64:
        snprintf(out, n, "%" PRId64, *CFIELD(c, p, int64_t));
        break;
    case RMQ_CONF_BOOL:
        snprintf(out, n, "%s", *CFIELD(c, p, int) ? "true" : "false");
        break;
    case RMQ_CONF_ENUM: {
        int v = *CFIELD(c, p, int);
        const char *s = v == RMQ_CONF_UNSET ? null_text : enum_name(p->enums, v);
        if (p->enums == e_alloc && v == RMQ_ALLOC_MACHINE_ROOM_NEARBY)
            snprintf(out, n, "MACHINE_ROOM_NEARBY-%s",
                     enum_name(e_alloc_inner, c->allocate_nearby_inner_strategy)
                         ? enum_name(e_alloc_inner, c->allocate_nearby_inner_strategy)
                         : "?");
        else if (s)
            snprintf(out, n, "%s", s);
        else
            snprintf(out, n, "%d", v);
        break;
    }
    }
}

int rmq__conf_get(const rmq_conf_t *c, const char *name, char *out, size_t n)
{
    const rmq_conf_prop_t *p = rmq__conf_prop_find(name);
    if (n) out[0] = '\0';
    if (!p) return RMQ_ERR_NOT_FOUND;
    if (n) get_prop(c, p, out, n, "");
    return RMQ_OK;
}

/* ---- new / dup / destroy --------------------------------------------------------------------- */

static void format_ts(int64_t ms, char *out, size_t n)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    localtime_r(&t, &tm);
    snprintf(out, n, "%04d%02d%02d%02d%02d%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec);
}

rmq_conf_t *rmq__conf_new(void)
{
    rmq_conf_t *c = rmq__xcalloc(1, sizeof(*c));
    char err[256], ts[32];
    size_t i;
    for (i = 0; i < RMQ_ARRAY_SIZE(props); i++) {
        const rmq_conf_prop_t *p = &props[i];
        if (p->flags & F_DYNAMIC) continue;
        if (set_prop(c, p, p->defval, err, sizeof(err)) != RMQ_OK) {
            rmq_log_error("conf", "bad default for %s: %s", p->name, err);
            abort();
        }
    }
    /* Dynamic defaults. */
    format_ts(rmq__now_ms() - 30 * 60 * 1000, ts, sizeof(ts));
    c->consume_timestamp = rmq__xstrdup(ts);
    c->message_listener = RMQ_CONF_UNSET;
    {
        const char *ns = getenv("NAMESRV_ADDR");
        c->namesrv_addr = ns && *ns ? rmq__xstrdup(ns) : NULL;
        /* Java's system properties rocketmq.namesrv.domain(.subgroup), as the environment. */
        const char *dom = getenv("ROCKETMQ_NAMESRV_DOMAIN");
        c->namesrv_domain = dom && *dom ? rmq__xstrdup(dom) : NULL;
        const char *sub = getenv("ROCKETMQ_NAMESRV_DOMAIN_SUBGROUP");
        if (sub && *sub) {
            free(c->namesrv_domain_subgroup);
            c->namesrv_domain_subgroup = rmq__xstrdup(sub);
        }
    }
    c->local_offset_store_dir = expand_path("~/.rocketmq_offsets");
    return c;
}

rmq_conf_t *rmq__conf_dup(const rmq_conf_t *s)
{
    rmq_conf_t *d = rmq__xcalloc(1, sizeof(*d));
    size_t i;
    int k;
    *d = *s;
    for (i = 0; i < RMQ_ARRAY_SIZE(props); i++) {
        if (props[i].type == RMQ_CONF_STRING) {
            char **f = FIELD(d, &props[i], char *);
            if (*f) *f = rmq__xstrdup(*f);
        }
    }
    d->subs = rmq__xcalloc((size_t)(s->n_subs ? s->n_subs : 1), sizeof(*d->subs));
    for (k = 0; k < s->n_subs; k++) {
        d->subs[k].topic = rmq__xstrdup(s->subs[k].topic);
        d->subs[k].expression = rmq__xstrdup(s->subs[k].expression);
        d->subs[k].type = rmq__xstrdup(s->subs[k].type);
    }
    d->alloc_config_mqs =
        rmq__xcalloc((size_t)(s->n_alloc_config_mqs ? s->n_alloc_config_mqs : 1), sizeof(rmq_mq_t));
    for (k = 0; k < s->n_alloc_config_mqs; k++) {
        d->alloc_config_mqs[k].topic = rmq__xstrdup(s->alloc_config_mqs[k].topic);
        d->alloc_config_mqs[k].broker_name = rmq__xstrdup(s->alloc_config_mqs[k].broker_name);
        d->alloc_config_mqs[k].queue_id = s->alloc_config_mqs[k].queue_id;
    }
    return d;
}

void rmq__conf_destroy(rmq_conf_t *c)
{
    size_t i;
    int k;
    if (!c) return;
    for (i = 0; i < RMQ_ARRAY_SIZE(props); i++)
        if (props[i].type == RMQ_CONF_STRING) free(*FIELD(c, &props[i], char *));
    for (k = 0; k < c->n_subs; k++) {
        free(c->subs[k].topic);
        free(c->subs[k].expression);
        free(c->subs[k].type);
    }
    free(c->subs);
    free_config_mqs(c);
    free(c);
}

/* ---- subscriptions ------------------------------------------------------------------------------
 */

/* Number of UTF-16 code units of a UTF-8 string (Java String.length()). */
static size_t utf16_len(const char *s)
{
    size_t n = 0;
    const unsigned char *p = (const unsigned char *)s;
    for (; *p; p++) {
        if ((*p & 0xC0) == 0x80) continue; /* continuation byte */
        n += (*p >= 0xF0) ? 2 : 1;
    }
    return n;
}

static int is_blank(const char *s)
{
    /* UtilAll.isBlank: null, empty or only Character.isWhitespace chars (ASCII subset here). */
    if (!s) return 1;
    for (; *s; s++)
        if (!(*s == ' ' || (*s >= '\t' && *s <= '\r') || (*s >= 0x1c && *s <= 0x1f))) return 0;
    return 1;
}

static int name_illegal(const char *s)
{
    return *s && !rmq__name_ok(s, SIZE_MAX);
}

int rmq__conf_add_subscription_type(rmq_conf_t *c, const char *topic, const char *expression,
                                    const char *type, char *errstr, size_t n)
{
    rmq_sub_t *sub;
    char err[512];
    int k;
    /* Validators.checkTopic (the system-topic rule is for producers only). */
    if (is_blank(topic)) {
        rmq__seterr(errstr, n, "The specified topic is blank" FAQ_DEFAULT "\n(subscription)");
        return RMQ_ERR_CONFIG;
    }
    if (utf16_len(topic) > 127) {
        rmq__seterr(errstr, n,
                    "The specified topic is longer than topic max length 127." FAQ_DEFAULT
                    "\n(subscription topic %.40s...)",
                    topic);
        return RMQ_ERR_CONFIG;
    }
    if (name_illegal(topic)) {
        rmq__seterr(errstr, n,
                    "The specified topic[%s] contains illegal characters, allowing only "
                    "%s" FAQ_DEFAULT "\n(subscription)",
                    topic, GROUP_PATTERN);
        return RMQ_ERR_CONFIG;
    }
    if (rmq__sub_build(topic, expression, type, &sub, err, sizeof(err)) != RMQ_OK) {
        rmq__seterr(errstr, n, "subscription exception: %s\n(subscription %s: \"%s\")", err, topic,
                    expression ? expression : "null");
        return RMQ_ERR_CONFIG;
    }
    rmq__sub_destroy(sub);
    if (type && !strcmp(type, "SQL92")) {
        /* Java leaves the syntax to the broker (CHECK_CLIENT_CONFIG at start); checking it here
         * reports a bad selector with the script's line, before any connection. */
        rmq_sql92_t *e = NULL;
        if (rmq__sql92_compile(expression, &e, err, sizeof(err), NULL) != RMQ_OK) {
            rmq__seterr(errstr, n, "invalid SQL92 expression: %s\n(subscription %s: \"%s\")", err,
                        topic, expression);
            return RMQ_ERR_CONFIG;
        }
        rmq__sql92_free(e);
    }
    for (k = 0; k < c->n_subs; k++)
        if (!strcmp(c->subs[k].topic, topic)) break;
    if (k == c->n_subs) {
        c->subs = realloc(c->subs, sizeof(*c->subs) * (size_t)(c->n_subs + 1));
        if (!c->subs) abort();
        c->subs[k].topic = rmq__xstrdup(topic);
        c->n_subs++;
    } else {
        free(c->subs[k].expression);
        free(c->subs[k].type);
    }
    c->subs[k].expression = rmq__xstrdup(expression ? expression : RMQ_SUB_ALL);
    c->subs[k].type = rmq__xstrdup(type && *type ? type : "TAG");
    return RMQ_OK;
}

int rmq__conf_add_subscription(rmq_conf_t *c, const char *topic, const char *expression,
                               char *errstr, size_t n)
{
    return rmq__conf_add_subscription_type(c, topic, expression, NULL, errstr, n);
}

/* ---- timestamps (lenient SimpleDateFormat "yyyyMMddHHmmss")
 * --------------------------------------- */

/* DecimalFormat integer parse of s[*pos..end): optional '-', then ASCII digits. */
static int dec_parse(const char *s, size_t end, size_t *pos, int64_t *val)
{
    size_t p = *pos, d0;
    int neg = 0;
    int64_t v = 0;
    if (p < end && s[p] == '-') neg = 1, p++;
    d0 = p;
    while (p < end && s[p] >= '0' && s[p] <= '9') {
        if (v < INT64_MAX / 10 - 10) v = v * 10 + (s[p] - '0');
        p++;
    }
    if (p == d0) return -1;
    *pos = p;
    *val = neg ? -v : v;
    return 0;
}

int rmq__conf_parse_timestamp(const char *ts, int64_t *ms_out)
{
    static const int width[6] = {4, 2, 2, 2, 2, 2};
    int64_t v[6];
    size_t len, pos = 0;
    int i;
    struct tm tm;
    time_t t;
    if (!ts) return -1;
    len = strlen(ts);
    for (i = 0; i < 6; i++) {
        size_t start = pos, end;
        int obey = i < 5; /* every field but the last abuts a numeric field */
        while (pos < len && (ts[pos] == ' ' || ts[pos] == '\t'))
            pos++;
        if (pos >= len) return -1;
        if (obey) {
            if (start + (size_t)width[i] > len) return -1;
            end = start + (size_t)width[i];
        } else {
            end = len;
        }
        if (pos >= end || dec_parse(ts, end, &pos, &v[i])) return -1;
        v[i] = (int32_t)(uint32_t)(uint64_t)v[i]; /* Number.intValue() */
    }
    memset(&tm, 0, sizeof(tm));
    tm.tm_year = (int)(v[0] - 1900);
    tm.tm_mon = (int)(v[1] - 1);
    tm.tm_mday = (int)v[2];
    tm.tm_hour = (int)v[3];
    tm.tm_min = (int)v[4];
    tm.tm_sec = (int)v[5];
    tm.tm_isdst = -1;
    t = mktime(&tm);
    if (ms_out) *ms_out = (int64_t)t * 1000;
    return 0;
}

/* ---- checkConfig
 * ---------------------------------------------------------------------------------- */

static int fail(char *errstr, size_t n, const char *java_msg, const rmq_conf_t *c, const char *opt)
{
    char val[300];
    const rmq_conf_prop_t *p = rmq__conf_prop_find(opt);
    get_prop(c, p, val, sizeof(val), "null");
    rmq__seterr(errstr, n, "%s\n(option %s=%s)", java_msg, opt, val);
    return RMQ_ERR_CONFIG;
}

/* The values an INT/INT64 option allows, as the option reference shows them. */
static void range_text(const rmq_conf_prop_t *p, char *out, size_t n)
{
    if (p->range)
        snprintf(out, n, "%s", p->range);
    else if (p->min == INT32_MIN && p->max == INT32_MAX)
        snprintf(out, n, "any int32");
    else if (p->min == INT64_MIN && p->max == INT64_MAX)
        snprintf(out, n, "any int64");
    else if ((p->max == INT32_MAX && p->type == RMQ_CONF_INT) || p->max == INT64_MAX)
        snprintf(out, n, ">= %" PRId64, p->min);
    else
        snprintf(out, n, "%" PRId64 "..%" PRId64, p->min, p->max);
}

/* "option NAME = VALUE is out of range (allowed: RANGE)" */
static void out_of_range(const rmq_conf_prop_t *p, int64_t v, char *out, size_t n)
{
    char allowed[256];
    range_text(p, allowed, sizeof(allowed));
    snprintf(out, n, "option %s = %" PRId64 " is out of range (allowed: %s)", p->name, v, allowed);
}

/* A range checkConfig enforces: our words first, then Java's message as it is. */
static int check_range(const rmq_conf_t *c, const char *opt, const char *java, int64_t v,
                       int64_t lo, int64_t hi, char *errstr, size_t n)
{
    char ours[512];
    if (v >= lo && v <= hi) return 0;
    out_of_range(rmq__conf_prop_find(opt), v, ours, sizeof(ours));
    rmq__seterr(errstr, n,
                "%s\nJava checkConfig: %s Out of range [%" PRId64 ", %" PRId64 "]" FAQ_SEE, ours,
                java, lo, hi);
    return -1;
}

int rmq__conf_check(const rmq_conf_t *c, char *errstr, size_t n)
{
    char msg[1024];
    const char *g = c->consumer_group;
    size_t i;

    /* Validators.checkGroup */
    if (is_blank(g))
        return fail(errstr, n, "the specified group is blank" FAQ_DEFAULT, c, "consumer_group");
    if (utf16_len(g) > 255)
        return fail(errstr, n,
                    "the specified group is longer than group max length 255." FAQ_DEFAULT, c,
                    "consumer_group");
    if (name_illegal(g)) {
        snprintf(
            msg, sizeof(msg),
            "the specified group[%s] contains illegal characters, allowing only %s" FAQ_DEFAULT, g,
            GROUP_PATTERN);
        return fail(errstr, n, msg, c, "consumer_group");
    }
    if (!strcmp(g, "DEFAULT_CONSUMER"))
        return fail(errstr, n,
                    "consumerGroup can not equal DEFAULT_CONSUMER, please specify another "
                    "one." FAQ_SEE,
                    c, "consumer_group");
    if (c->message_model == RMQ_CONF_UNSET)
        return fail(errstr, n, "messageModel is null" FAQ_SEE, c, "message_model");
    if (c->consume_from_where == RMQ_CONF_UNSET)
        return fail(errstr, n, "consumeFromWhere is null" FAQ_SEE, c, "consume_from_where");
    if (rmq__conf_parse_timestamp(c->consume_timestamp, NULL)) {
        snprintf(msg, sizeof(msg),
                 "consumeTimestamp is invalid, the valid format is yyyyMMddHHmmss,but received "
                 "%s " FAQ_SEE,
                 c->consume_timestamp ? c->consume_timestamp : "null");
        return fail(errstr, n, msg, c, "consume_timestamp");
    }
    if (c->allocate_message_queue_strategy == RMQ_CONF_UNSET)
        return fail(errstr, n, "allocateMessageQueueStrategy is null" FAQ_SEE, c,
                    "allocate_message_queue_strategy");
    /* "subscription is null": the C subscription list cannot be null. */
    if (c->message_listener == RMQ_CONF_UNSET)
        return fail(errstr, n, "messageListener is null" FAQ_SEE, c, "message_listener");
    if (c->message_listener != RMQ_LISTENER_CONCURRENTLY &&
        c->message_listener != RMQ_LISTENER_ORDERLY)
        return fail(errstr, n,
                    "messageListener must be instanceof MessageListenerOrderly or "
                    "MessageListenerConcurrently" FAQ_SEE,
                    c, "message_listener");
    if (check_range(c, "consume_thread_min", "consumeThreadMin", c->consume_thread_min, 1, 1000,
                    errstr, n) ||
        check_range(c, "consume_thread_max", "consumeThreadMax", c->consume_thread_max, 1, 1000,
                    errstr, n))
        return RMQ_ERR_CONFIG;
    if (c->consume_thread_min > c->consume_thread_max) {
        snprintf(msg, sizeof(msg),
                 "consumeThreadMin (%d) is larger than consumeThreadMax (%d)" FAQ_DEFAULT,
                 c->consume_thread_min, c->consume_thread_max);
        rmq__seterr(errstr, n, "%s\n(option consume_thread_min=%d, consume_thread_max=%d)", msg,
                    c->consume_thread_min, c->consume_thread_max);
        return RMQ_ERR_CONFIG;
    }
    if (check_range(c, "consume_concurrently_max_span", "consumeConcurrentlyMaxSpan",
                    c->consume_concurrently_max_span, 1, 65535, errstr, n) ||
        check_range(c, "pull_threshold_for_queue", "pullThresholdForQueue",
                    c->pull_threshold_for_queue, 1, 65535, errstr, n))
        return RMQ_ERR_CONFIG;
    if (c->pull_threshold_for_topic != -1 &&
        check_range(c, "pull_threshold_for_topic", "pullThresholdForTopic",
                    c->pull_threshold_for_topic, 1, 6553500, errstr, n))
        return RMQ_ERR_CONFIG;
    if (check_range(c, "pull_threshold_size_for_queue", "pullThresholdSizeForQueue",
                    c->pull_threshold_size_for_queue, 1, 1024, errstr, n))
        return RMQ_ERR_CONFIG;
    if (c->pull_threshold_size_for_topic != -1 &&
        check_range(c, "pull_threshold_size_for_topic", "pullThresholdSizeForTopic",
                    c->pull_threshold_size_for_topic, 1, 102400, errstr, n))
        return RMQ_ERR_CONFIG;
    if (check_range(c, "pull_interval", "pullInterval", c->pull_interval, 0, 65535, errstr, n) ||
        check_range(c, "consume_message_batch_max_size", "consumeMessageBatchMaxSize",
                    c->consume_message_batch_max_size, 1, 1024, errstr, n) ||
        check_range(c, "pull_batch_size", "pullBatchSize", c->pull_batch_size, 1, 1024, errstr, n))
        return RMQ_ERR_CONFIG;
    /* DefaultMQPushConsumerImpl.checkConfig (5.x): popInvisibleTime, popBatchNums. */
    if (check_range(c, "pop_invisible_time", "popInvisibleTime", c->pop_invisible_time, 5000,
                    300000, errstr, n) ||
        check_range(c, "pop_batch_nums", "popBatchNums", c->pop_batch_nums, 1, 32, errstr, n))
        return RMQ_ERR_CONFIG;

    /* Our limits for the options Java does not check. */
    for (i = 0; i < RMQ_ARRAY_SIZE(props); i++) {
        const rmq_conf_prop_t *p = &props[i];
        int64_t v;
        if (p->flags & RMQ_CONF_F_JAVA_CHECK) continue;
        if (p->type == RMQ_CONF_INT)
            v = *CFIELD(c, p, int);
        else if (p->type == RMQ_CONF_INT64)
            v = *CFIELD(c, p, int64_t);
        else
            continue;
        if (v < p->min || v > p->max) {
            out_of_range(p, v, errstr, n);
            return RMQ_ERR_CONFIG;
        }
    }
    if (c->allocate_message_queue_strategy == RMQ_ALLOC_MACHINE_ROOM_NEARBY &&
        (!enum_name(e_alloc_inner, c->allocate_nearby_inner_strategy) ||
         c->allocate_nearby_inner_strategy == RMQ_ALLOC_CONFIG)) {
        rmq__seterr(errstr, n,
                    "option allocate_nearby_inner_strategy must be AVG, AVG_BY_CIRCLE, "
                    "CONSISTENT_HASH or MACHINE_ROOM for MACHINE_ROOM_NEARBY");
        return RMQ_ERR_CONFIG;
    }
    if (c->language == RMQ_CONF_UNSET) {
        rmq__seterr(errstr, n, "option language is null");
        return RMQ_ERR_CONFIG;
    }
    return rmq__conf_check_security(c, errstr, n);
}

static int set_str(const char *s)
{
    return s && *s;
}

int rmq__conf_check_security(const rmq_conf_t *c, char *errstr, size_t n)
{
    /* SessionCredentials: signing needs both keys; a key or token alone would be ignored. */
    if (set_str(c->access_key) && !set_str(c->secret_key)) {
        rmq__seterr(errstr, n, "option access_key is set but secret_key is not: ACL signing "
                    "needs both (option access_key=%s)", c->access_key);
        return RMQ_ERR_CONFIG;
    }
    if (!set_str(c->access_key) && (set_str(c->secret_key) || set_str(c->security_token))) {
        rmq__seterr(errstr, n, "option %s is set but access_key is not: nothing would be signed",
                    set_str(c->secret_key) ? "secret_key" : "security_token");
        return RMQ_ERR_CONFIG;
    }
    /* The trace topic: Validators.checkTopic's rules, checked now rather than at every send. */
    const char *tt = c->customized_trace_topic;
    if (tt && *tt && !rmq__name_ok(tt, 127)) {
        rmq__seterr(errstr, n, "option customized_trace_topic=%s is not a valid topic name "
                    "(at most 127 characters of [%%|a-zA-Z0-9_-])", tt);
        return RMQ_ERR_CONFIG;
    }
    /* TLS settings that would have no effect. */
    static const char *const paths[] = {"tls_client_cert_path", "tls_client_key_path",
                                        "tls_client_key_password", "tls_client_trust_cert_path"};
    const char *vals[] = {c->tls_client_cert_path, c->tls_client_key_path,
                          c->tls_client_key_password, c->tls_client_trust_cert_path};
    if (!c->use_tls) {
        for (size_t i = 0; i < RMQ_ARRAY_SIZE(paths); i++)
            if (set_str(vals[i])) {
                rmq__seterr(errstr, n, "option %s is set but use_tls is false", paths[i]);
                return RMQ_ERR_CONFIG;
            }
        if (c->tls_test_mode_enable || !c->tls_client_auth_server || !c->tls_verify_server_name) {
            rmq__seterr(errstr, n, "option %s is set but use_tls is false",
                        c->tls_test_mode_enable     ? "tls_test_mode_enable"
                        : !c->tls_client_auth_server ? "tls_client_auth_server"
                                                     : "tls_verify_server_name");
            return RMQ_ERR_CONFIG;
        }
        return RMQ_OK;
    }
    if (set_str(c->tls_client_cert_path) != set_str(c->tls_client_key_path)) {
        rmq__seterr(errstr, n, "option %s is set but %s is not: a client certificate needs its "
                    "key", set_str(c->tls_client_cert_path) ? "tls_client_cert_path"
                                                            : "tls_client_key_path",
                    set_str(c->tls_client_cert_path) ? "tls_client_key_path"
                                                     : "tls_client_cert_path");
        return RMQ_ERR_CONFIG;
    }
    if (set_str(c->tls_client_key_password) && !set_str(c->tls_client_key_path)) {
        rmq__seterr(errstr, n, "option tls_client_key_password is set but tls_client_key_path "
                    "is not");
        return RMQ_ERR_CONFIG;
    }
    if (set_str(c->tls_client_trust_cert_path) &&
        (c->tls_test_mode_enable || !c->tls_client_auth_server)) {
        rmq__seterr(errstr, n, "option tls_client_trust_cert_path has no effect with %s: every "
                    "server certificate is trusted",
                    c->tls_test_mode_enable ? "tls_test_mode_enable=true"
                                            : "tls_client_auth_server=false");
        return RMQ_ERR_CONFIG;
    }
    return RMQ_OK;
}

/* ---- option reference -------------------------------------------------------------------------
 */

static const char *type_name(rmq_conf_type_t t)
{
    switch (t) {
    case RMQ_CONF_STRING:
        return "string";
    case RMQ_CONF_INT:
        return "int";
    case RMQ_CONF_INT64:
        return "int64";
    case RMQ_CONF_BOOL:
        return "bool";
    case RMQ_CONF_ENUM:
        return "enum";
    }
    return "?";
}

/* Append text with '|' escaped for a Markdown table cell. */
static int md_cell(rmq_buf_t *b, const char *s)
{
    int rc = 0;
    for (; *s; s++) {
        if (*s == '|')
            rc |= rmq__buf_append(b, "\\|", 2);
        else if (*s == '<')
            rc |= rmq__buf_append(b, "&lt;", 4);
        else if (*s == '>')
            rc |= rmq__buf_append(b, "&gt;", 4);
        else
            rc |= rmq__buf_append(b, s, 1);
    }
    return rc;
}

int rmq__conf_describe_markdown(rmq_buf_t *b)
{
    size_t i;
    int rc = 0;
    rc |= rmq__buf_appendf(b, "| Option | Type | Default | Range / values | Description |\n"
                              "|---|---|---|---|---|\n");
    for (i = 0; i < RMQ_ARRAY_SIZE(props); i++) {
        const rmq_conf_prop_t *p = &props[i];
        char range[1024];
        range[0] = '\0';
        if (p->range)
            snprintf(range, sizeof(range), "%s", p->range);
        else if (p->type == RMQ_CONF_ENUM)
            enum_allowed(p->enums, range, sizeof(range));
        else if (p->type == RMQ_CONF_BOOL)
            snprintf(range, sizeof(range), "true, false");
        else if (p->type == RMQ_CONF_INT || p->type == RMQ_CONF_INT64)
            range_text(p, range, sizeof(range));
        rc |= rmq__buf_appendf(b, "| `%s` | %s | ", p->name, type_name(p->type));
        if (p->defval && (p->flags & F_DYNAMIC))
            rc |= md_cell(b, p->defval);
        else if (p->defval)
            rc |= rmq__buf_appendf(b, "`%s`", p->defval);
        else
            rc |= rmq__buf_appendf(
                b, "%s", p->type == RMQ_CONF_ENUM ? "null (set by the runtime)" : "unset");
        rc |= rmq__buf_append(b, " | ", 3);
        rc |= md_cell(b, range);
        rc |= rmq__buf_append(b, " | ", 3);
        rc |= md_cell(b, p->desc);
        if (p->java_name) rc |= rmq__buf_appendf(b, " (Java `%s`)", p->java_name);
        rc |= rmq__buf_append(b, " |\n", 3);
    }
    return rc ? RMQ_ERR_NOMEM : RMQ_OK;
}

/* ---- exports ----------------------------------------------------------------------------------
 */

rmq_conf_t *rmq_conf_new(void)
{
    return rmq__conf_new();
}
void rmq_conf_destroy(rmq_conf_t *c)
{
    rmq__conf_destroy(c);
}
rmq_conf_t *rmq_conf_dup(const rmq_conf_t *c)
{
    return rmq__conf_dup(c);
}

int rmq_conf_set(rmq_conf_t *c, const char *name, const char *value, char *errstr, size_t n)
{
    return rmq__conf_set(c, name, value, errstr, n);
}

int rmq_conf_get(const rmq_conf_t *c, const char *name, char *out, size_t n)
{
    return rmq__conf_get(c, name, out, n);
}

int rmq_conf_add_subscription(rmq_conf_t *c, const char *topic, const char *expression,
                              const char *type, char *errstr, size_t n)
{
    return rmq__conf_add_subscription_type(c, topic, expression, type, errstr, n);
}

int rmq_conf_check(const rmq_conf_t *c, char *errstr, size_t n)
{
    return rmq__conf_check(c, errstr, n);
}

size_t rmq_conf_describe_markdown(char *out, size_t out_size)
{
    rmq_buf_t b;
    rmq__buf_init(&b);
    rmq__conf_describe_markdown(&b);
    return rmq__buf_give(&b, out, out_size);
}
