/*
 * test_conf.c -- conf, allocation, subscription and offset-file code at the C level: ownership
 * (new/dup/destroy under ASan/valgrind), and allocation invariants on many random inputs
 * (every queue owned by exactly one consumer, every consumer computing the same plan).
 */
#include "protocol/acl.h"
#include "consumer/allocate.h"
#include "consumer/conf.h"
#include "consumer/offset_file.h"
#include "protocol/subscription.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static void test_conf_lifecycle(void)
{
    char err[1024];
    rmq_conf_t *c = rmq__conf_new(), *d;
    CHECK(rmq__conf_set(c, "consumer_group", "G", err, sizeof(err)) == RMQ_OK);
    CHECK(rmq__conf_set(c, "consumer_group", "G2", err, sizeof(err)) == RMQ_OK);
    CHECK(rmq__conf_set(c, "message_listener", "ORDERLY", err, sizeof(err)) == RMQ_OK);
    CHECK(rmq__conf_set(c, "allocate_config_queues", "T:b:1, T:b@x:2", err, sizeof(err)) == RMQ_OK);
    CHECK(c->n_alloc_config_mqs == 2 && !strcmp(c->alloc_config_mqs[1].broker_name, "b@x"));
    CHECK(rmq__conf_set(c, "allocate_config_queues", "T:b:x", err, sizeof(err)) == RMQ_ERR_CONFIG);
    CHECK(c->n_alloc_config_mqs == 2); /* a rejected value changes nothing */
    /* log_debug is checked by the parser of rmq_log_set_debug, without applying it. */
    CHECK(rmq__conf_set(c, "log_debug", "remoting, pull", err, sizeof(err)) == RMQ_OK);
    CHECK(rmq__log_debug == 0);
    CHECK(rmq__conf_set(c, "log_debug", "pull,bogus", err, sizeof(err)) == RMQ_ERR_CONFIG);
    CHECK(strstr(err, "unknown category \"bogus\"") != NULL);
    CHECK(rmq__log_debug_parse("remoting,pull", err, sizeof(err)) ==
          (int)(RMQ_DBG_REMOTING | RMQ_DBG_PULL));
    CHECK(rmq__log_debug_parse("", err, sizeof(err)) == 0);
    CHECK(rmq__conf_set(c, "secret_key", "s3cret", err, sizeof(err)) == RMQ_OK);
    CHECK(rmq__conf_set(c, "access_key", "app_key", err, sizeof(err)) == RMQ_OK);
    CHECK(rmq__conf_set(c, "namespace", NULL, err, sizeof(err)) == RMQ_OK);
    CHECK(rmq__conf_set(c, "pull_batch_size", NULL, err, sizeof(err)) == RMQ_ERR_CONFIG);
    CHECK(rmq__conf_add_subscription(c, "T", "TagA || TagB", err, sizeof(err)) == RMQ_OK);
    CHECK(rmq__conf_add_subscription(c, "T", "TagC", err, sizeof(err)) == RMQ_OK);
    CHECK(rmq__conf_add_subscription(c, "U", NULL, err, sizeof(err)) == RMQ_OK);
    CHECK(c->n_subs == 2 && !strcmp(c->subs[0].expression, "TagC") &&
          !strcmp(c->subs[1].expression, "*"));
    CHECK(rmq__conf_check(c, err, sizeof(err)) == RMQ_OK);
    d = rmq__conf_dup(c);
    rmq__conf_destroy(c);
    CHECK(!strcmp(d->consumer_group, "G2") && !strcmp(d->secret_key, "s3cret"));
    CHECK(d->n_subs == 2 && !strcmp(d->subs[1].topic, "U"));
    CHECK(d->n_alloc_config_mqs == 2 && d->alloc_config_mqs[0].queue_id == 1);
    CHECK(d->message_listener == RMQ_LISTENER_ORDERLY);
    rmq__conf_destroy(d);
}

static void test_parse_timestamp(void)
{
    int64_t a, b;
    CHECK(rmq__conf_parse_timestamp("20220101000000", &a) == 0);
    /* Lenient: month 13 of 2021 is January 2022. */
    CHECK(rmq__conf_parse_timestamp("20211301000000", &b) == 0 && a == b);
    CHECK(rmq__conf_parse_timestamp("20220101000060", &b) == 0 && b == a + 60000);
    CHECK(rmq__conf_parse_timestamp("2022", &b) == -1);
    CHECK(rmq__conf_parse_timestamp(NULL, &b) == -1);
}

static unsigned rnd_state = 12345;
static unsigned rnd(unsigned n)
{
    rnd_state = rnd_state * 1103515245u + 12345u;
    return (rnd_state >> 16) % n;
}

/* For random topologies: every queue goes to exactly one consumer, for every strategy that
 * partitions the queues. */
static void test_allocation_partitions(void)
{
    static const char *strategies[] = {"AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH",
                                       "MACHINE_ROOM_NEARBY-AVG",
                                       "MACHINE_ROOM_NEARBY-CONSISTENT_HASH"};
    char err[512];
    for (int round = 0; round < 300; round++) {
        int n_mq = 1 + (int)rnd(40), n_cid = 1 + (int)rnd(12);
        rmq_mq_t *mqs = calloc((size_t)n_mq, sizeof(*mqs));
        char **cid_store = calloc((size_t)n_cid, sizeof(char *));
        const char **cids = calloc((size_t)n_cid, sizeof(char *));
        int *owner = calloc((size_t)n_mq, sizeof(int));
        int *out = calloc((size_t)n_mq + 1, sizeof(int));
        for (int i = 0; i < n_mq; i++) {
            char b[32];
            snprintf(b, sizeof(b), "%s-broker-%u", rnd(2) ? "hz" : "sh", rnd(3));
            mqs[i].topic = strdup("T");
            mqs[i].broker_name = strdup(b);
            mqs[i].queue_id = i;
        }
        for (int i = 0; i < n_cid; i++) {
            char b[48];
            snprintf(b, sizeof(b), "%s-10.0.0.%d@%u", rnd(2) ? "hz" : "sh", i, rnd(1000));
            cid_store[i] = strdup(b);
            cids[i] = cid_store[i];
        }
        rmq__mq_sort(mqs, n_mq);
        rmq__cid_sort(cids, n_cid);
        for (size_t s = 0; s < RMQ_ARRAY_SIZE(strategies); s++) {
            rmq_conf_t *c = rmq__conf_new();
            CHECK(rmq__conf_set(c, "allocate_message_queue_strategy", strategies[s], err,
                                sizeof(err)) == RMQ_OK);
            memset(owner, 0, sizeof(int) * (size_t)n_mq);
            for (int k = 0; k < n_cid; k++) {
                int n_out = -1;
                CHECK(rmq__allocate(c, "G", cids[k], mqs, n_mq, cids, n_cid, out, &n_out, err,
                                    sizeof(err)) == RMQ_OK);
                for (int j = 0; j < n_out; j++) {
                    CHECK(out[j] >= 0 && out[j] < n_mq);
                    if (out[j] >= 0 && out[j] < n_mq) owner[out[j]]++;
                }
            }
            for (int i = 0; i < n_mq; i++)
                if (owner[i] != 1) {
                    fprintf(stderr, "%s: round %d queue %d owned %d times\n", strategies[s], round,
                            i, owner[i]);
                    failures++;
                    break;
                }
            rmq__conf_destroy(c);
        }
        for (int i = 0; i < n_mq; i++)
            free(mqs[i].topic), free(mqs[i].broker_name);
        for (int i = 0; i < n_cid; i++)
            free(cid_store[i]);
        free(mqs);
        free(cid_store);
        free(cids);
        free(owner);
        free(out);
    }
}

static void test_subscription(void)
{
    char err[256];
    rmq_sub_t *s = NULL, *d;
    rmq_buf_t b;
    CHECK(rmq__sub_build("T", "||", NULL, &s, err, sizeof(err)) == RMQ_ERR_INVALID && !s);
    CHECK(!strcmp(err, "subString split error"));
    CHECK(rmq__sub_build("T", "a||b||a||c", NULL, &s, err, sizeof(err)) == RMQ_OK);
    CHECK(s->n_tags == 3 && s->n_codes == 3);
    d = rmq__sub_dup(s);
    rmq__sub_destroy(s);
    rmq__buf_init(&b);
    CHECK(rmq__sub_to_json(d, &b) == RMQ_OK);
    CHECK(strstr(b.data, "\"tagsSet\":[\"a\",\"b\",\"c\"]") != NULL);
    rmq__buf_free(&b);
    CHECK(rmq__sub_match_tags(d, "b", 1) == 1 && rmq__sub_match_tags(d, "d", 1) == 0);
    rmq__sub_destroy(d);
}

static void test_offset_file_roundtrip(void)
{
    rmq_offset_entry_t e[3] = {{{"T", "b", 0}, 5}, {{"T", "b", 1}, INT64_MAX}, {{"U", "c", 7}, -1}};
    rmq_offset_entry_t *r = NULL;
    rmq_buf_t b;
    char err[256];
    int n = 0;
    rmq__buf_init(&b);
    CHECK(rmq__offset_file_encode(e, 3, &b) == RMQ_OK);
    CHECK(rmq__offset_file_decode(b.data, b.len, &r, &n, err, sizeof(err)) == RMQ_OK);
    CHECK(n == 3);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < 3; j++)
            if (r[i].mq.queue_id == e[j].mq.queue_id) CHECK(r[i].offset == e[j].offset);
    rmq__offset_file_free(r, n);
    rmq__buf_free(&b);
}

static void test_acl_sign(void)
{
    rmq_cmd_t c;
    rmq__cmd_init(&c, 11, RMQ_SERIALIZE_JSON);
    CHECK(rmq__cmd_set_ext(&c, "topic", "TopicTest") == 0);
    CHECK(rmq__acl_sign(&c, "rocketmq2", "12345678", NULL) == RMQ_OK);
    CHECK(!strcmp(rmq__cmd_ext(&c, "Signature"), "GeeGoP9mRvDhoVp4PD5omX0prgE="));
    /* Signing again (a retried request) ignores the old Signature. */
    CHECK(rmq__acl_sign(&c, "rocketmq2", "12345678", NULL) == RMQ_OK);
    CHECK(!strcmp(rmq__cmd_ext(&c, "Signature"), "GeeGoP9mRvDhoVp4PD5omX0prgE="));
    CHECK(rmq__acl_sign(&c, NULL, "x", NULL) == RMQ_ERR_INVALID);
    rmq__cmd_free(&c);
}

/* ACL keys and TLS settings that would be ignored are refused by name; unsupported options
 * accept their default only. */
static void test_security_checks(void)
{
    char err[1024];
    static const struct {
        const char *k1, *v1, *k2, *v2, *want;
    } bad[] = {
        {"access_key", "ak_12345", NULL, NULL, "access_key is set but secret_key is not"},
        {"secret_key", "sk_12345", NULL, NULL, "secret_key is set but access_key is not"},
        {"security_token", "tok", NULL, NULL, "security_token is set but access_key is not"},
        {"tls_client_cert_path", "/c.pem", NULL, NULL, "tls_client_cert_path is set but use_tls"},
        {"tls_test_mode_enable", "true", NULL, NULL, "tls_test_mode_enable is set but use_tls"},
        {"tls_verify_server_name", "false", NULL, NULL,
         "tls_verify_server_name is set but use_tls"},
        {"use_tls", "true", "tls_client_cert_path", "/c.pem", "tls_client_key_path is not"},
        {"use_tls", "true", "tls_client_key_password", "pw", "tls_client_key_path is not"},
        {"tls_test_mode_enable", "true", "tls_client_trust_cert_path", "/ca.pem", "no effect"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rmq_conf_t *c = rmq__conf_new();
        CHECK(rmq__conf_set(c, "consumer_group", "G", err, sizeof(err)) == RMQ_OK);
        CHECK(rmq__conf_set(c, "message_listener", "CONCURRENTLY", err, sizeof(err)) == RMQ_OK);
        if (!strcmp(bad[i].k1, "tls_test_mode_enable") && bad[i].k2)
            CHECK(rmq__conf_set(c, "use_tls", "true", err, sizeof(err)) == RMQ_OK);
        CHECK(rmq__conf_set(c, bad[i].k1, bad[i].v1, err, sizeof(err)) == RMQ_OK);
        if (bad[i].k2) CHECK(rmq__conf_set(c, bad[i].k2, bad[i].v2, err, sizeof(err)) == RMQ_OK);
        CHECK(rmq__conf_check(c, err, sizeof(err)) == RMQ_ERR_CONFIG);
        CHECK(strstr(err, bad[i].want) != NULL);
        rmq__conf_destroy(c);
    }
    rmq_conf_t *c = rmq__conf_new();
    CHECK(rmq__conf_set(c, "vip_channel_enabled", "false", err, sizeof(err)) == RMQ_OK);
    CHECK(rmq__conf_set(c, "vip_channel_enabled", "true", err, sizeof(err)) == RMQ_ERR_CONFIG);
    CHECK(strstr(err, "vip_channel_enabled=true is not supported") != NULL);
    CHECK(rmq__conf_set(c, "adjust_thread_pool_nums_threshold", "100000", err, sizeof(err)) ==
          RMQ_OK);
    CHECK(rmq__conf_set(c, "adjust_thread_pool_nums_threshold", "5", err, sizeof(err)) ==
          RMQ_ERR_CONFIG);
    CHECK(strstr(err, "is not supported") != NULL);
    rmq__conf_destroy(c);
}

int main(void)
{
    test_security_checks();
    test_conf_lifecycle();
    test_parse_timestamp();
    test_allocation_partitions();
    test_subscription();
    test_offset_file_roundtrip();
    test_acl_sign();
    return test_report("test_conf");
}
