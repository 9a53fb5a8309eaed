/*
 * test_script.c -- the control state (script.c) with real script files: options and
 * subscriptions applied to a conf (listener and allocate strategy from the hooks), errors with
 * file:line, the allocate hook and the validation of its result, on_assign / on_revoke.
 */
#include "consumer/conf.h"
#include "luahost/script.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"

static char *write_script(const char *name, const char *text)
{
    return test_write_script("test_script", name, text);
}

static const char *script_text =
    "local out = os.getenv('RMQ_TEST_HOOK_OUT')\n"
    "local function log(s) local f = io.open(out, 'a'); f:write(s, '\\n'); f:close() end\n"
    "return {\n"
    "  consumer_group = 'ctl_group',\n"
    "  consume_thread_min = 3,\n"
    "  consume_message_batch_max_size = 16,\n"
    "  message_model = 'BROADCASTING',\n"
    "  subscribe = { TopicA = 'TagA || TagB' },\n"
    "  consume = function() end,\n"
    "  allocate = function(group, cid, mq_all, cid_all)\n"
    "    assert(group == 'ctl_group' and cid == 'me' and #cid_all == 2)\n"
    "    if MODE == nil then MODE = 'ok' end\n"
    "    local mode = MODE\n"
    "    if mode == 'ok' then MODE = 'foreign'; return { mq_all[3], { topic = 'TopicA', broker_name = 'b', queue_id = 0 } } end\n"
    "    if mode == 'foreign' then MODE = 'dup'; return { { topic = 'X', broker_name = 'b', queue_id = 9 } } end\n"
    "    if mode == 'dup' then MODE = 'err'; return { mq_all[1], mq_all[1] } end\n"
    "    if mode == 'err' then MODE = 'str'; error('strategy broke') end\n"
    "    if mode == 'str' then MODE = 'empty'; return 'nope' end\n"
    "    return {}\n"
    "  end,\n"
    "  on_assign = function(mqs) log('assign ' .. #mqs .. ' ' .. mqs[1].topic .. '#' .. mqs[1].queue_id) end,\n"
    "  on_revoke = function(mqs) error('revoke hook error') end,\n"
    "}\n";

static void test_conf_and_hooks(void)
{
    char err[2048];
    char out[256];
    snprintf(out, sizeof(out), "/tmp/rmq_test_script_%d_hooks.out", (int)getpid());
    unlink(out);
    setenv("RMQ_TEST_HOOK_OUT", out, 1);
    char *path = write_script("ctl", script_text);
    rmq_conf_t *conf = rmq__conf_new();
    rmq_script_t *s = NULL;
    int rc = rmq__script_load(path, conf, &s, err, sizeof(err));
    if (rc) fprintf(stderr, "load: %s\n", err);
    CHECK(rc == 0 && s != NULL);
    if (!s) return;
    CHECK(!strcmp(conf->consumer_group, "ctl_group"));
    CHECK(conf->consume_thread_min == 3);
    CHECK(conf->consume_message_batch_max_size == 16);
    CHECK(conf->message_model == RMQ_MODEL_BROADCASTING);
    CHECK(conf->message_listener == RMQ_LISTENER_CONCURRENTLY);
    CHECK(conf->allocate_message_queue_strategy == RMQ_ALLOC_LUA);
    CHECK(conf->n_subs == 1 && !strcmp(conf->subs[0].topic, "TopicA") &&
          !strcmp(conf->subs[0].expression, "TagA || TagB"));
    CHECK(rmq__script_hooks(s) == (RMQ_HOOK_CONSUME | RMQ_HOOK_ALLOCATE | RMQ_HOOK_ON_ASSIGN |
                                   RMQ_HOOK_ON_REVOKE));

    rmq_mq_t mqs[4] = {{"TopicA", "b", 0}, {"TopicA", "b", 1}, {"TopicA", "b", 2},
                       {"TopicA", "b", 3}};
    const char *cids[] = {"me", "other"};
    int idx[4];
    /* A subset (the same tables, or equal ones) -> their indexes in order. */
    rc = rmq__script_allocate(s, "ctl_group", "me", mqs, 4, cids, 2, idx, err, sizeof(err));
    CHECK(rc == 2 && idx[0] == 2 && idx[1] == 0);
    /* Not a subset, duplicates, an error, not a list: negative with a message. */
    const char *want[] = {"not one of mq_all", "duplicate", "strategy broke", "not a list"};
    for (int i = 0; i < 4; i++) {
        rc = rmq__script_allocate(s, "ctl_group", "me", mqs, 4, cids, 2, idx, err, sizeof(err));
        CHECK(rc < 0);
        if (!strstr(err, want[i])) fprintf(stderr, "allocate %d: %s\n", i, err);
        CHECK(strstr(err, want[i]) != NULL);
    }
    rc = rmq__script_allocate(s, "ctl_group", "me", mqs, 4, cids, 2, idx, err, sizeof(err));
    CHECK(rc == 0);

    rmq__script_on_assign(s, &mqs[1], 2);
    rmq__script_on_revoke(s, mqs, 1); /* raises: logged, not fatal */
    FILE *f = fopen(out, "r");
    CHECK(f != NULL);
    if (f) {
        char buf[128] = {0};
        CHECK(fgets(buf, sizeof(buf), f) != NULL);
        CHECK(!strcmp(buf, "assign 2 TopicA#1\n"));
        fclose(f);
    }
    rmq__script_destroy(s);
    rmq__conf_destroy(conf);
    unlink(out);
    test_drop_script(path);
}

static void test_errors(void)
{
    char err[2048];
    struct {
        const char *name, *text, *want;
        int rc;
    } cases[] = {
        {"unknown", "return {\n consumer_group = 'g',\n subscribe = { T = '*' },\n bogus_opt = 1,\n"
                    " consume = function() end }\n",
         ":4: unknown option", RMQ_ERR_CONFIG},
        {"badsub", "return {\n consumer_group = 'g',\n subscribe = {\n  ['bad topic!'] = '*' },\n"
                   " consume = function() end }\n",
         ":4: subscribe bad topic!", RMQ_ERR_CONFIG},
        {"syntax", "return {\n x = = 1 }\n", ":2:", RMQ_ERR_LUA},
        {"orderly", "return { consumer_group = 'g', subscribe = { T = '*' },\n"
                    " consume_orderly = function() end }\n",
         NULL, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *path = write_script(cases[i].name, cases[i].text);
        rmq_conf_t *conf = rmq__conf_new();
        err[0] = 0;
        int rc = rmq__script_load(path, conf, NULL, err, sizeof(err));
        CHECK(rc == cases[i].rc);
        if (cases[i].want) {
            if (!strstr(err, cases[i].want)) fprintf(stderr, "%s: %s\n", cases[i].name, err);
            CHECK(strstr(err, path) != NULL && strstr(err, cases[i].want) != NULL);
        } else {
            CHECK(conf->message_listener == RMQ_LISTENER_ORDERLY);
            CHECK(conf->allocate_message_queue_strategy != RMQ_ALLOC_LUA);
        }
        rmq__conf_destroy(conf);
        test_drop_script(path);
    }
}

int main(void)
{
    test_conf_and_hooks();
    test_errors();
    return test_report("test_script");
}
