/*
 * conf.h -- consumer configuration: one declarative option table (rmq__conf_props) drives
 * parsing (Lua option tables, `--set key=value`), defaults, checkConfig and the generated option
 * reference in docs/options.md.
 *
 * Every option is the snake_case name of a DefaultMQPushConsumer / ClientConfig field, with the
 * Java client's default (4.9.4). Setting an option only parses its type (an unknown option, a bad
 * number or an unknown enum value is an error naming the option, the value and what is allowed);
 * ranges are enforced by rmq__conf_check, which applies DefaultMQPushConsumerImpl.checkConfig's
 * rules in Java's order with Java's message text, then our own limits for the options Java does
 * not check. A value out of range is reported in our words first, "option NAME = VALUE is out of
 * range (allowed: RANGE)", followed for Java's checks by "Java checkConfig: " and Java's message
 * as it is; Java's other messages end with "(option NAME=VALUE)".
 *
 * Ownership: an rmq_conf_t owns every string and array it points to; rmq__conf_dup makes a deep
 * copy. The client engine takes its own copy at start and never changes it afterwards.
 * Threads: a conf is not synchronised. Build and check it on one thread, then treat it as
 * read-only; a read-only conf may be read from any thread.
 */
#ifndef RMQ_CONF_H
#define RMQ_CONF_H

#include "base/common.h"
#include "allocate.h" /* rmq_mq_t */

#include <stdint.h>

/* ---- enum values ------------------------------------------------------------------------ */

/* "Unset" (Java null) for enum options: rmq__conf_set(conf, name, NULL, ...). */
#define RMQ_CONF_UNSET (-1)

/* message_model (MessageModel). */
enum { RMQ_MODEL_CLUSTERING = 0, RMQ_MODEL_BROADCASTING = 1 };

/*
 * consume_from_where (ConsumeFromWhere). The three deprecated Java names are accepted and kept
 * (so rmq__conf_get shows what was configured), but behave exactly like LAST_OFFSET: use
 * rmq__conf_cfw_effective() when deciding where a new queue starts.
 */
enum {
    RMQ_CFW_LAST_OFFSET = 0,                              /* CONSUME_FROM_LAST_OFFSET (default) */
    RMQ_CFW_FIRST_OFFSET = 1,                             /* CONSUME_FROM_FIRST_OFFSET */
    RMQ_CFW_TIMESTAMP = 2,                                /* CONSUME_FROM_TIMESTAMP */
    RMQ_CFW_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = 3, /* deprecated = LAST_OFFSET */
    RMQ_CFW_MIN_OFFSET = 4,                               /* deprecated = LAST_OFFSET */
    RMQ_CFW_MAX_OFFSET = 5                                /* deprecated = LAST_OFFSET */
};
static inline int rmq__conf_cfw_effective(int cfw)
{
    return (cfw == RMQ_CFW_FIRST_OFFSET || cfw == RMQ_CFW_TIMESTAMP) ? cfw : RMQ_CFW_LAST_OFFSET;
}

/*
 * allocate_message_queue_strategy (and allocate_nearby_inner_strategy). Accepted spellings:
 * the getName() value ("AVG", ...), the Java class name ("AllocateMessageQueueAveragely", with or
 * without the org.apache.rocketmq.client.consumer.rebalance. package), and for the nearby
 * strategy also "MACHINE_ROOM_NEARBY-<inner>" (sets the inner strategy too). RMQ_ALLOC_LUA means
 * the script's allocate hook decides; rmq__allocate does not run it (see allocate.h).
 */
enum {
    RMQ_ALLOC_AVG = 0,                 /* AllocateMessageQueueAveragely (default) */
    RMQ_ALLOC_AVG_BY_CIRCLE = 1,       /* AllocateMessageQueueAveragelyByCircle */
    RMQ_ALLOC_CONSISTENT_HASH = 2,     /* AllocateMessageQueueConsistentHash */
    RMQ_ALLOC_CONFIG = 3,              /* AllocateMessageQueueByConfig */
    RMQ_ALLOC_MACHINE_ROOM = 4,        /* AllocateMessageQueueByMachineRoom */
    RMQ_ALLOC_MACHINE_ROOM_NEARBY = 5, /* AllocateMachineRoomNearby */
    RMQ_ALLOC_LUA = 6                  /* the script's allocate hook */
};

/*
 * message_listener: which Java listener interface the script implements. Java's default is null
 * (checkConfig: "messageListener is null"), so THE RUNTIME MUST SET IT from the script's hooks
 * before rmq__conf_check: CONCURRENTLY (MessageListenerConcurrently) or ORDERLY
 * (MessageListenerOrderly). BOTH means the script defines both kinds of hook, which checkConfig
 * rejects like Java rejects a listener that is neither ("must be instanceof ...").
 */
enum { RMQ_LISTENER_CONCURRENTLY = 0, RMQ_LISTENER_ORDERLY = 1, RMQ_LISTENER_BOTH = 2 };

/* ---- the configuration -------------------------------------------------------------------- */

/* One subscribe(topic, expression) call, in call order (a topic subscribed again replaces it). */
typedef struct rmq_conf_sub {
    char *topic;      /* as given by the user (not namespace-wrapped) */
    char *expression; /* subString as given ("TagA || TagB", "*"); never NULL */
    char *type;       /* expression type: "TAG" or "SQL92" */
} rmq_conf_sub_t;

/*
 * Field names are the option names. Strings are NULL when unset (Java null). Booleans are int
 * 0/1. Java long fields are int64_t. Enums are int (RMQ_CONF_UNSET when set to null).
 */
typedef struct rmq_conf {
    /* DefaultMQPushConsumer */
    char *consumer_group;                /* default "DEFAULT_CONSUMER" (rejected by check) */
    int message_model;                   /* RMQ_MODEL_* */
    int consume_from_where;              /* RMQ_CFW_* */
    char *consume_timestamp;             /* yyyyMMddHHmmss local time; default now - 30 min */
    int allocate_message_queue_strategy; /* RMQ_ALLOC_* */
    int allocate_nearby_inner_strategy;  /* RMQ_ALLOC_*, for MACHINE_ROOM_NEARBY; default AVG */
    char *allocate_config_queues;        /* CONFIG: "topic:brokerName:queueId,..." */
    char *allocate_machine_room_idcs;    /* MACHINE_ROOM: "idc1,idc2" (consumeridcs) */
    char *machine_room_separator;        /* MACHINE_ROOM_NEARBY resolver separator, "-" */
    int consistent_hash_virtual_nodes;   /* CONSISTENT_HASH virtualNodeCnt, 10 */
    int message_listener;                /* RMQ_LISTENER_*, set by the runtime from the script */
    int consume_thread_min;              /* 20 */
    int consume_thread_max;              /* 20 */
    int64_t adjust_thread_pool_nums_threshold;      /* 100000 */
    int consume_concurrently_max_span;              /* 2000 */
    int pull_threshold_for_queue;                   /* 1000 messages */
    int pull_threshold_size_for_queue;              /* 100 MiB */
    int pull_threshold_for_topic;                   /* -1 (off) */
    int pull_threshold_size_for_topic;              /* -1 (off), MiB */
    int64_t pull_interval;                          /* 0 ms */
    int consume_message_batch_max_size;             /* 1 */
    int pull_batch_size;                            /* 32 */
    int client_rebalance;                           /* true (5.x: false asks the broker) */
    int pop_threshold_for_queue;                    /* 96 messages waiting for their ack */
    int64_t pop_invisible_time;                     /* 60000 ms */
    int pop_batch_nums;                             /* 32 */
    int post_subscription_when_pull;                /* false */
    int unit_mode;                                  /* false */
    int max_reconsume_times;                        /* -1 (16 concurrently, INT_MAX orderly) */
    int64_t suspend_current_queue_time_millis;      /* 1000 */
    int64_t consume_timeout;                        /* 15 minutes */
    int64_t consume_timeout_millis;                 /* 0 = consume_timeout (rmqlua's own) */
    int lua_memory_limit_mb;                        /* 0 = none (rmqlua's own) */
    int lua_socket_max_per_thread;                  /* 10000 (rmqlua's own) */
    char *lua_ssl_trusted_certificate;              /* NULL = the system's CA store */
    int lua_ssl_verify_depth;                       /* 5 (rmqlua's own) */
    int consume_batches_per_thread;                 /* 64 (rmqlua's own): in flight */
    int strict_globals;                             /* false (rmqlua's own): check warns */
    int lua_ngx_shim;                               /* false (rmqlua's own): no global ngx */
    int64_t await_termination_millis_when_shutdown; /* 0 */
    /* ClientConfig */
    char *namesrv_addr;                           /* default: env NAMESRV_ADDR, else NULL */
    char *namesrv_domain;                         /* NULL = no address service */
    char *namesrv_domain_subgroup;                /* "nsaddr" */
    int namesrv_addr_refresh_interval;            /* 120000 ms (rmqlua's own) */
    char *instance_name;                          /* "DEFAULT" */
    char *unit_name;                              /* NULL */
    char *client_ip;                              /* NULL = detect (RemotingUtil.getLocalAddress) */
    char *namespace;                              /* NULL */
    int enable_msg_trace;                         /* false */
    char *customized_trace_topic;                 /* "RMQ_SYS_TRACE_TOPIC" */
    int poll_name_server_interval;                /* 30000 ms */
    int heartbeat_broker_interval;                /* 30000 ms */
    int persist_consumer_offset_interval;         /* 5000 ms */
    int64_t pull_time_delay_mills_when_exception; /* 1000 ms */
    int mq_client_api_timeout;                    /* 3000 ms */
    int vip_channel_enabled;                      /* false */
    int language;                                 /* RMQ_LANG_* (codes.h), JAVA */
    char *access_key;                             /* ACL (AclClientRPCHook); NULL = no signing */
    char *secret_key;
    char *security_token;
    int enable_stream_request_type; /* false; clientId gets "@STREAM" */
    /* TLS (ClientConfig.useTLS, TlsSystemConfig tls.client.*; tls.h) */
    int use_tls;                      /* false */
    int tls_test_mode_enable;         /* false (Java: true): trust any server certificate */
    char *tls_client_cert_path;       /* NULL */
    char *tls_client_key_path;        /* NULL */
    char *tls_client_key_password;    /* NULL */
    char *tls_client_trust_cert_path; /* NULL = the system's CA file */
    int tls_client_auth_server;       /* true (Java: false): verify the server's certificate */
    int tls_verify_server_name;       /* true (Java: none): the certificate names the address */
    /* runtime */
    char *local_offset_store_dir; /* "$HOME/.rocketmq_offsets" */
    int frame_max_length;         /* 16777216 */
    char *log_debug;              /* "remoting,rebalance,pull,lua" or "all"; NULL */
    int log_format;               /* RMQ_LOG_TEXT / RMQ_LOG_JSON (log.h); `rmqlua run` applies */
    char *log_file;               /* NULL = stderr; `rmqlua run` applies */
    int consume_tps_limit;        /* messages per second per process, 0 = no limit (flow.c) */
    char *metrics_listen;         /* "host:port" of the metrics endpoint; NULL = off */
    int stats_interval_ms;        /* period of the on_stats hook, 10000 */

    /* subscriptions, in subscribe order */
    rmq_conf_sub_t *subs;
    int n_subs;
    /* parsed allocate_config_queues (kept in step by rmq__conf_set) */
    rmq_mq_t *alloc_config_mqs;
    int n_alloc_config_mqs;
} rmq_conf_t;

/* The consume timeout in ms: consume_timeout_millis when set, else consume_timeout minutes. */
static inline int64_t rmq__conf_consume_timeout_ms(const rmq_conf_t *c)
{
    return c->consume_timeout_millis > 0 ? c->consume_timeout_millis : c->consume_timeout * 60000;
}

/* ---- the option table ------------------------------------------------------------------- */

typedef enum {
    RMQ_CONF_STRING = 0,
    RMQ_CONF_INT,   /* int32 */
    RMQ_CONF_INT64, /* Java long */
    RMQ_CONF_BOOL,  /* true/false (also 1/0, yes/no, on/off) */
    RMQ_CONF_ENUM
} rmq_conf_type_t;

typedef struct rmq_conf_enum_val {
    const char *name;
    int value;
} rmq_conf_enum_val_t;

/* Option flags. */
enum {
    RMQ_CONF_F_SENSITIVE = 1 << 0, /* rmq__conf_get shows "[redacted]" */
    RMQ_CONF_F_JAVA_CHECK = 1 << 1 /* range checked by checkConfig with Java's message */
};

typedef struct rmq_conf_prop {
    const char *name;      /* snake_case option name */
    const char *java_name; /* Java field name ("consumeThreadMin"), or NULL for ours */
    rmq_conf_type_t type;
    size_t offset;      /* offsetof(rmq_conf_t, field) */
    const char *defval; /* default as text (NULL = null); dynamic defaults are described */
    int64_t min, max;   /* INT/INT64 range enforced by rmq__conf_check */
    const char *range;  /* range as shown in the docs when not just "min..max", or NULL */
    const rmq_conf_enum_val_t *enums; /* ENUM: names (first spelling of a value is canonical) */
    /* STRING: extra validation at set time (returns 0, or -1 with errstr); may be NULL. */
    int (*validate)(rmq_conf_t *conf, const char *value, char *errstr, size_t errstr_size);
    int flags;
    const char *desc;
} rmq_conf_prop_t;

/* The option table, in documentation order. */
const rmq_conf_prop_t *rmq__conf_props(int *n);
/* The table entry for an option name, or NULL. */
const rmq_conf_prop_t *rmq__conf_prop_find(const char *name);

/* ---- API (internal) ----------------------------------------------------------------------- */

/* A conf with every option at its default (Java's). Aborts only on out-of-memory. */
rmq_conf_t *rmq__conf_new(void);
/* Deep copy. */
rmq_conf_t *rmq__conf_dup(const rmq_conf_t *conf);
void rmq__conf_destroy(rmq_conf_t *conf);

/*
 * Set option `name` from text. value NULL means Java null: strings become NULL, enums
 * RMQ_CONF_UNSET; numbers and booleans cannot be null. Returns RMQ_OK, or RMQ_ERR_CONFIG with
 * errstr naming the option, the value and what is allowed (unknown option, not a number, out of
 * the type's range, unknown enum value). Ranges are checked later by rmq__conf_check.
 */
int rmq__conf_set(rmq_conf_t *conf, const char *name, const char *value, char *errstr,
                  size_t errstr_size);

/*
 * The value as text for logs and stats (booleans "true"/"false", enums by canonical name,
 * null as "" with RMQ_OK, sensitive options "[redacted]" when set). Returns RMQ_OK, or
 * RMQ_ERR_NOT_FOUND for an unknown option. out is always NUL-terminated (truncated if short).
 */
int rmq__conf_get(const rmq_conf_t *conf, const char *name, char *out, size_t out_size);

/*
 * subscribe(topic, expression): check the topic (Validators.checkTopic without the system-topic
 * rule: not blank, <= 127 characters, only [%|a-zA-Z0-9_-]) and the expression
 * (FilterAPI.buildSubscriptionData: "||" alone is "subString split error"); type NULL means
 * "TAG". expression NULL means "*". A "SQL92" expression must compile (sql92.h). Subscribing a
 * topic again replaces its expression.
 * Returns RMQ_OK or RMQ_ERR_CONFIG with errstr.
 */
int rmq__conf_add_subscription(rmq_conf_t *conf, const char *topic, const char *expression,
                               char *errstr, size_t errstr_size);
int rmq__conf_add_subscription_type(rmq_conf_t *conf, const char *topic, const char *expression,
                                    const char *type, char *errstr, size_t errstr_size);

/*
 * DefaultMQPushConsumerImpl.checkConfig, in Java's order, first failure wins; then the limits
 * Java does not check (option table ranges, consistent_hash_virtual_nodes >= 0, the strategy
 * parameters). Returns RMQ_OK or RMQ_ERR_CONFIG. On error errstr is Java's getMessage() text
 * exactly (FAQ URL suffix included), followed by "\n(option <snake_name>=<value>)" naming our
 * option; for our own limits the message is ours and also names the option.
 */
int rmq__conf_check(const rmq_conf_t *conf, char *errstr, size_t errstr_size);
/*
 * The part of rmq__conf_check about ACL keys and TLS settings (also used by `rmqlua send`):
 * access_key needs secret_key and the other way round; TLS settings need use_tls; a client
 * certificate needs its key; a trust file needs verification on. RMQ_OK or RMQ_ERR_CONFIG.
 */
int rmq__conf_check_security(const rmq_conf_t *conf, char *errstr, size_t errstr_size);

/*
 * UtilAll.parseDate(ts, "yyyyMMddHHmmss") as Java's lenient SimpleDateFormat does it (month 13
 * rolls over, trailing text is ignored), in local time. Returns 0 with *ms_out (epoch ms), or -1
 * when Java would return null.
 */
int rmq__conf_parse_timestamp(const char *ts, int64_t *ms_out);

/* The TLS client context a configuration asks for (use_tls, tls_test_mode_enable,
 * tls_client_*): *out NULL when use_tls is off, else one reference. 0, or RMQ_ERR_CONFIG with
 * errstr naming the option and the file that could not be loaded (tls_conf.c). Any thread. */
typedef struct rmq_tls_ctx rmq_tls_ctx_t;
int rmq__tls_ctx_from_conf(const rmq_conf_t *conf, rmq_tls_ctx_t **out, char *errstr,
                           size_t errstr_size);

/* The option reference as a Markdown table (name, type, default, range, description). */
int rmq__conf_describe_markdown(rmq_buf_t *out);

/* ---- thin exports for FFI specs and embedding ------------------------------------------------ */

RMQ_EXPORT rmq_conf_t *rmq_conf_new(void);
RMQ_EXPORT void rmq_conf_destroy(rmq_conf_t *conf);
RMQ_EXPORT rmq_conf_t *rmq_conf_dup(const rmq_conf_t *conf);
RMQ_EXPORT int rmq_conf_set(rmq_conf_t *conf, const char *name, const char *value, char *errstr,
                            size_t errstr_size);
RMQ_EXPORT int rmq_conf_get(const rmq_conf_t *conf, const char *name, char *out, size_t out_size);
RMQ_EXPORT int rmq_conf_add_subscription(rmq_conf_t *conf, const char *topic,
                                         const char *expression, const char *type, char *errstr,
                                         size_t errstr_size);
RMQ_EXPORT int rmq_conf_check(const rmq_conf_t *conf, char *errstr, size_t errstr_size);
/* Writes the Markdown reference into out (truncated, NUL-terminated); returns its full length. */
RMQ_EXPORT size_t rmq_conf_describe_markdown(char *out, size_t out_size);

#endif
