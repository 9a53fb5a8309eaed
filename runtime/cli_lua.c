/*
 * cli_lua.c -- rmqlua run / check / test: the consumer script from the command line.
 *
 *   rmqlua run [--namesrv ADDR] [--set KEY=VALUE]... [--embedded] [--log-debug CATS] SCRIPT
 *   rmqlua check [--set KEY=VALUE]... SCRIPT
 *   rmqlua test SCRIPT CASES
 *
 * Exit codes: 0 success, 1 runtime failure (or failed test cases), 2 usage or configuration
 * error (bad arguments, bad script, rejected options, certificates that do not load), always
 * before any connection; 3 (run) refused by a broker's access control (ACL).
 *
 * Ownership: everything is local to one command. Threads: the main thread; `run` hands the
 * main thread to the consumer's loop and prints status from a small helper thread.
 */
#include "cli.h"

#include "conf.h"
#include "consumer.h"
#include "devbroker.h"
#include "lua_state.h"
#include "script.h"
#include "tls.h"

#include <lauxlib.h>
#include <uv.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2

typedef struct cli_opts {
    const char *script;
    const char *cases;
    const char *namesrv;
    const char *log_debug;
    int embedded;
    long sample_messages; /* --sample-messages: -1 = default (1000 with --embedded) */
    long max_messages;    /* --max-messages: 0 = no limit */
    int nsets;
    char **sets; /* "key=value", pointing into argv */
} cli_opts_t;

static const char run_usage[] =
    "usage: rmqlua run [OPTIONS] SCRIPT\n"
    "\n"
    "Consume with the hooks of a Lua consumer script until SIGINT/SIGTERM.\n"
    "\n"
    "options:\n"
    "  --namesrv ADDR      name server(s) \"host:port;host:port\" when the script does not set\n"
    "                      namesrv_addr (else $NAMESRV_ADDR)\n"
    "  --set KEY=VALUE     override any option of the script (repeatable)\n"
    "  --embedded          start the in-process development broker and consume from it\n"
    "  --sample-messages N with --embedded: a sample producer puts N messages (default 1000)\n"
    "                      into the subscribed topics (tags TagA/TagB, keys sample-<i>)\n"
    "  --max-messages N    stop cleanly once N messages were consumed\n"
    "  --log-debug CATS    debug logs: remoting,namesrv,rebalance,pull,consume,offset,lua,broker\n"
    "                      or all\n"
    "  -h, --help          this text\n"
    "\n"
    "On a terminal a live status line shows messages/s, failures, retries, lag and cached\n"
    "messages; otherwise a status line is logged every 10 s.\n"
    "exit codes: 0 stopped cleanly, 1 runtime failure, 2 usage or configuration error\n"
    "(certificates that do not load included), 3 refused by a broker's access control (a wrong\n"
    "secret_key, an unknown access_key or a missing permission, named in the message)\n";

static const char check_usage[] =
    "usage: rmqlua check [--set KEY=VALUE]... SCRIPT\n"
    "\n"
    "Load and validate a consumer script without a broker: its options (checkConfig rules),\n"
    "subscriptions and hooks in the control role, then in a consume state (top-level code and\n"
    "init run once, then shutdown), and with use_tls the certificate, key and CA files.\n"
    "exit codes: 0 valid, 2 invalid (the message names file:line)\n";

static const char test_usage[] =
    "usage: rmqlua test SCRIPT CASES\n"
    "\n"
    "Run the script's handler over offline test cases (no broker). CASES is a Lua file that\n"
    "returns a list of { name =, messages = { {topic =, tags =, keys =, body =, properties =,\n"
    "...}, ... }, expect = { status =, ack_index =, delay_level =, error =, sent = {...} } }.\n"
    "See lua/rmq/testrun.lua for every field.\n"
    "exit codes: 0 every case passed, 1 a case failed, 2 bad script or cases file\n";

/* Parse argv (argv[0] is the command). Returns 0, 1 for --help, or EXIT_USAGE. */
static int parse(int argc, char **argv, cli_opts_t *o, int npos, const char *usage,
                 int allow_run_flags)
{
    memset(o, 0, sizeof(*o));
    o->sample_messages = -1;
    o->sets = calloc((size_t)argc + 1, sizeof(char *));
    int pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            return 1;
        }
        if (!strcmp(a, "--set") && npos == 1) {
            if (i + 1 >= argc || !strchr(argv[i + 1], '=')) {
                fprintf(stderr, "rmqlua %s: --set needs KEY=VALUE\n", argv[0]);
                return EXIT_USAGE;
            }
            o->sets[o->nsets++] = argv[++i];
        } else if (allow_run_flags && !strcmp(a, "--namesrv")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "rmqlua run: --namesrv needs an address\n");
                return EXIT_USAGE;
            }
            o->namesrv = argv[++i];
        } else if (allow_run_flags && !strcmp(a, "--log-debug")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "rmqlua run: --log-debug needs categories\n");
                return EXIT_USAGE;
            }
            o->log_debug = argv[++i];
        } else if (allow_run_flags && !strcmp(a, "--embedded")) {
            o->embedded = 1;
        } else if (allow_run_flags &&
                   (!strcmp(a, "--sample-messages") || !strcmp(a, "--max-messages"))) {
            char *end = NULL;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
            if (i + 1 >= argc || !end || *end || v < 0) {
                fprintf(stderr, "rmqlua run: %s needs a number >= 0\n", a);
                return EXIT_USAGE;
            }
            i++;
            if (a[2] == 's') o->sample_messages = v;
            else o->max_messages = v;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "rmqlua %s: unknown option %s\n\n%s", argv[0], a, usage);
            return EXIT_USAGE;
        } else {
            if (pos == 0) o->script = a;
            else if (pos == 1) o->cases = a;
            pos++;
        }
    }
    if (pos != npos) {
        fprintf(stderr, "rmqlua %s: expected %s\n\n%s", argv[0],
                npos == 1 ? "one SCRIPT" : "SCRIPT and CASES", usage);
        return EXIT_USAGE;
    }
    return 0;
}

/* Build the conf: --namesrv, then the script's options, then --set. 0 or EXIT_USAGE. */
static int build_conf(const char *cmd, const cli_opts_t *o, rmq_conf_t **out)
{
    char err[2048];
    rmq_conf_t *conf = rmq__conf_new();
    if (o->namesrv && rmq__conf_set(conf, "namesrv_addr", o->namesrv, err, sizeof(err))) {
        fprintf(stderr, "rmqlua %s: --namesrv: %s\n", cmd, err);
        goto fail;
    }
    if (rmq__script_load(o->script, conf, NULL, err, sizeof(err))) {
        fprintf(stderr, "rmqlua %s: %s\n", cmd, err);
        goto fail;
    }
    for (int i = 0; i < o->nsets; i++) {
        char *kv = o->sets[i];
        char *eq = strchr(kv, '=');
        *eq = 0;
        int rc = strcmp(kv, "message_listener") ? rmq__conf_set(conf, kv, eq + 1, err, sizeof(err))
                                                : (rmq__seterr(err, sizeof(err), "%s",
                                                               RMQ_SCRIPT_LISTENER_MSG),
                                                   RMQ_ERR_CONFIG);
        *eq = '=';
        if (rc) {
            fprintf(stderr, "rmqlua %s: --set %s: %s\n", cmd, kv, err);
            goto fail;
        }
    }
    *out = conf;
    return 0;
fail:
    rmq__conf_destroy(conf);
    return EXIT_USAGE;
}

/*
 * The line of the script that sets option `name` ("name =" after a non-identifier character),
 * or 0. Used to point checkConfig errors ("(option name=value)") at the script.
 */
static int option_line(const char *path, const char *err)
{
    const char *o = strstr(err, "(option ");
    if (!o) return 0;
    o += 8;
    size_t n = strcspn(o, "=)");
    if (n == 0 || n > 100) return 0;
    char name[128];
    memcpy(name, o, n);
    name[n] = 0;
    o = name;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024];
    int ln = 0, found = 0;
    while (!found && fgets(line, sizeof(line), f)) {
        ln++;
        for (char *p = strstr(line, o); p && !found; p = strstr(p + 1, o)) {
            if (strncmp(p, o, n)) continue;
            char before = p == line ? ' ' : p[-1];
            const char *q = p + n;
            while (*q == ' ' || *q == '\t') q++;
            if ((before == '_' || (before >= 'a' && before <= 'z') || (before >= 'A' && before <= 'Z') ||
                 (before >= '0' && before <= '9')) || *q != '=' || q[1] == '=')
                continue;
            /* the match must end the identifier */
            char after = p[n];
            if (after == '_' || (after >= 'a' && after <= 'z') || (after >= '0' && after <= '9'))
                continue;
            found = ln;
        }
    }
    fclose(f);
    return found;
}

/* checkConfig failed: print it with the script's line for the option when there is one. */
static void print_check_error(const char *cmd, const char *path, const char *err)
{
    int line = option_line(path, err);
    if (line > 0)
        fprintf(stderr, "rmqlua %s: %s:%d: %s\n", cmd, path, line, err);
    else
        fprintf(stderr, "rmqlua %s: %s: %s\n", cmd, path, err);
}

/* Load the script in a consume-role state and run init then shutdown once. */
static int check_consume_role(const char *path, const char *group, char *err, size_t errsz)
{
    rmq_lua_host_t h = {.role = "check", .script_path = path, .consumer_group = group,
                        .thread_index = 0, .thread_count = 1};
    lua_State *L = rmq__lua_new(&h, err, errsz);
    if (!L) return RMQ_ERR_LUA;
    int rc = RMQ_ERR_LUA;
    if (rmq__lua_getfield_mod(L, "rmq.script", "load", err, errsz)) goto out;
    lua_pushstring(L, path);
    if (rmq__lua_pcall(L, 1, 1, err, errsz)) goto out;
    int spec = lua_gettop(L);
    if (rmq__lua_getfield_mod(L, "rmq.dispatch", "new", err, errsz)) goto out;
    lua_pushvalue(L, spec);
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, 0);
    lua_setfield(L, -2, "thread_index");
    lua_pushinteger(L, 1);
    lua_setfield(L, -2, "thread_count");
    if (group) {
        lua_pushstring(L, group);
        lua_setfield(L, -2, "consumer_group");
    }
    if (rmq__lua_pcall(L, 2, 1, err, errsz)) goto out;
    int d = lua_gettop(L);
    char tmp[2048];
    lua_getfield(L, d, "init");
    if (rmq__lua_pcall(L, 0, 0, tmp, sizeof(tmp))) {
        rmq__seterr(err, errsz, "init hook failed: %s", tmp);
        goto out;
    }
    lua_getfield(L, d, "shutdown");
    if (rmq__lua_pcall(L, 0, 0, tmp, sizeof(tmp))) {
        rmq__seterr(err, errsz, "shutdown hook failed: %s", tmp);
        goto out;
    }
    rc = 0;
out:
    lua_close(L);
    return rc;
}

/* Scripts print() from consume threads: keep stdout line-buffered even into a pipe or file,
 * so lines are not held back until exit. */
static void line_buffered_stdout(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
}

int rmq__cli_check(int argc, char **argv)
{
    cli_opts_t o;
    line_buffered_stdout();
    int rc = parse(argc, argv, &o, 1, check_usage, 0);
    if (rc) {
        free(o.sets);
        return rc == 1 ? 0 : rc;
    }
    rmq_conf_t *conf = NULL;
    if ((rc = build_conf("check", &o, &conf))) {
        free(o.sets);
        return rc;
    }
    char err[4096];
    rmq_tls_ctx_t *tls = NULL;
    rc = 0;
    if (rmq__conf_check(conf, err, sizeof(err))) {
        print_check_error("check", o.script, err);
        rc = EXIT_USAGE;
    } else if (rmq__tls_ctx_from_conf(conf, &tls, err, sizeof(err))) {
        fprintf(stderr, "rmqlua check: %s: %s\n", o.script, err);
        rc = EXIT_USAGE;
    } else if (check_consume_role(o.script, conf->consumer_group, err, sizeof(err))) {
        fprintf(stderr, "rmqlua check: %s\n", err);
        rc = EXIT_USAGE;
    } else {
        printf("%s: ok (consumer_group %s, %d subscription(s), %s)\n", o.script,
               conf->consumer_group ? conf->consumer_group : "?", conf->n_subs,
               conf->message_listener == RMQ_LISTENER_ORDERLY ? "consume_orderly" : "consume");
    }
    rmq__tls_ctx_release(tls);
    rmq__conf_destroy(conf);
    free(o.sets);
    return rc;
}

static int l_print_line(lua_State *L)
{
    const char *s = luaL_checkstring(L, 1);
    printf("%s\n", s);
    fflush(stdout);
    return 0;
}

int rmq__cli_test(int argc, char **argv)
{
    cli_opts_t o;
    line_buffered_stdout();
    int rc = parse(argc, argv, &o, 2, test_usage, 0);
    free(o.sets);
    if (rc) return rc == 1 ? 0 : rc;
    char err[4096];
    rmq_lua_host_t h = {.role = "test", .script_path = o.script, .thread_index = 0,
                        .thread_count = 1};
    lua_State *L = rmq__lua_new(&h, err, sizeof(err));
    if (!L) {
        fprintf(stderr, "rmqlua test: %s\n", err);
        return EXIT_USAGE;
    }
    rc = EXIT_USAGE;
    if (rmq__lua_getfield_mod(L, "rmq.testrun", "run", err, sizeof(err))) goto out;
    lua_pushstring(L, o.script);
    lua_pushstring(L, o.cases);
    lua_pushcfunction(L, l_print_line);
    if (rmq__lua_pcall(L, 3, 2, err, sizeof(err))) goto out;
    rc = lua_tointeger(L, -2) > 0 ? EXIT_RUNTIME : 0;
out:
    if (rc == EXIT_USAGE) fprintf(stderr, "rmqlua test: %s\n", err);
    lua_close(L);
    return rc;
}

/* ---- run ----------------------------------------------------------------------------------- */

static rmq_consumer_t *volatile g_consumer;

static void on_signal(int sig)
{
    (void)sig;
    if (g_consumer) rmq__consumer_stop(g_consumer);
}

typedef struct status_ctx {
    rmq_consumer_t *c;
    volatile int stop;
    int tty;
    long max_messages; /* stop the consumer once this many were consumed; 0 = never */
} status_ctx_t;

/* True once --max-messages were consumed (then the consumer has been asked to stop). */
static int reached_max(status_ctx_t *s)
{
    rmq_consumer_stats_t st;
    if (!s->max_messages) return 0;
    rmq__consumer_stats(s->c, &st);
    if (st.msgs_consumed < s->max_messages) return 0;
    rmq_log_info("cli", "consumed %lld messages (--max-messages %ld): stopping",
                 (long long)st.msgs_consumed, s->max_messages);
    rmq__consumer_stop(s->c);
    return 1;
}

static void status_main(void *arg)
{
    status_ctx_t *s = arg;
    int64_t last_log = rmq__mono_ms();
    int printed = 0, done = 0;
    while (!s->stop && !done) {
        for (int i = 0; i < 10 && !s->stop && !done; i++) {
            usleep(100000);
            done = reached_max(s);
        }
        if (s->stop) break;
        rmq_consumer_stats_t st;
        rmq__consumer_stats(s->c, &st);
        char line[256];
        snprintf(line, sizeof(line),
                 "%.0f msg/s | consumed %lld | failed %lld | retried %lld | dlq %lld | lag %lld "
                 "| cached %lld | queues %d",
                 st.consume_rate, (long long)st.msgs_consumed, (long long)st.msgs_failed,
                 (long long)st.msgs_retried, (long long)st.msgs_dlq, (long long)st.lag,
                 (long long)st.cached_msgs, st.owned_queues);
        if (s->tty) {
            fprintf(stderr, "\r\033[K%s", line);
            fflush(stderr);
            printed = 1;
        } else if (done || rmq__mono_ms() - last_log >= 10000) {
            last_log = rmq__mono_ms();
            rmq_log_info("status", "%s", line);
        }
    }
    if (printed) fputs("\n", stderr);
}

/* The sample producer of --embedded: N messages round robin over the subscribed topics. */
typedef struct sample_ctx {
    rmq_devbroker_t *db;
    const rmq_conf_t *conf;
    long n;
    volatile int stop;
} sample_ctx_t;

static void sample_main(void *arg)
{
    sample_ctx_t *sp = arg;
    const char *topics[64];
    int nt = 0;
    char body[160], keys[32];
    long sent = 0;
    for (int i = 0; i < sp->conf->n_subs && nt < 64; i++)
        if (strncmp(sp->conf->subs[i].topic, "%RETRY%", 7)) topics[nt++] = sp->conf->subs[i].topic;
    for (long i = 0; nt && i < sp->n && !sp->stop; i++) {
        int n = snprintf(body, sizeof(body),
                         "{\"id\":%ld,\"text\":\"sample message %ld from the embedded producer\"}",
                         i + 1, i + 1);
        snprintf(keys, sizeof(keys), "sample-%ld", i + 1);
        if (rmq_devbroker_produce(sp->db, 0, topics[i % nt], -1, (i & 1) ? "TagB" : "TagA", keys,
                                  body, (size_t)n) >= 0)
            sent++;
    }
    rmq_log_info("cli", "sample producer: %ld message(s) stored", sent);
}

int rmq__cli_run(int argc, char **argv)
{
    cli_opts_t o;
    line_buffered_stdout();
    int rc = parse(argc, argv, &o, 1, run_usage, 1);
    if (rc) {
        free(o.sets);
        return rc == 1 ? 0 : rc;
    }
    char err[4096];
    if (o.log_debug && rmq_log_set_debug(o.log_debug, err, sizeof(err)) < 0) {
        fprintf(stderr, "rmqlua run: --log-debug: %s\n", err);
        free(o.sets);
        return EXIT_USAGE;
    }
    rmq_conf_t *conf = NULL;
    if ((rc = build_conf("run", &o, &conf))) {
        free(o.sets);
        return rc;
    }
    /* The script's log_debug (checked when set), unless --log-debug said otherwise. Before any
     * thread starts: the categories are process-wide. */
    if (!o.log_debug && conf->log_debug && rmq_log_set_debug(conf->log_debug, err, sizeof(err)) < 0) {
        fprintf(stderr, "rmqlua run: log_debug: %s\n", err);
        rmq__conf_destroy(conf);
        free(o.sets);
        return EXIT_USAGE;
    }
    rmq_devbroker_t *db = NULL;
    rmq_consumer_t *c = NULL;
    if (o.embedded && conf->use_tls) {
        fprintf(stderr, "rmqlua run: --embedded: the embedded development broker serves plain "
                "TCP; to try use_tls, start `rmqlua broker --tls-cert F --tls-key F`\n");
        rc = EXIT_USAGE;
        goto out;
    }
    if (o.embedded) {
        /* The subscribed topics exist from the start on the development broker. */
        rmq_buf_t args;
        rmq__buf_init(&args);
        for (int i = 0; i < conf->n_subs; i++)
            rmq__buf_appendf(&args, "--topic %s ", conf->subs[i].topic);
        rmq__buf_append(&args, "", 1);
        db = rmq_devbroker_start(args.data, err, sizeof(err));
        rmq__buf_free(&args);
        if (!db) {
            fprintf(stderr, "rmqlua run: --embedded: %s\n", err);
            rc = EXIT_RUNTIME;
            goto out;
        }
        rmq__conf_set(conf, "namesrv_addr", rmq_devbroker_addr(db), err, sizeof(err));
        rmq_log_info("cli", "development broker: name server %s", rmq_devbroker_addr(db));
    }
    if (rmq__conf_check(conf, err, sizeof(err))) {
        print_check_error("run", o.script, err);
        rc = EXIT_USAGE;
        goto out;
    }
    if ((rc = rmq__consumer_new(conf, o.script, &c, err, sizeof(err)))) {
        fprintf(stderr, "rmqlua run: %s\n", err);
        rc = (rc == RMQ_ERR_NOMEM) ? EXIT_RUNTIME : EXIT_USAGE;
        c = NULL;
        goto out;
    }
    g_consumer = c;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    status_ctx_t sc = {.c = c, .tty = isatty(2), .max_messages = o.max_messages};
    uv_thread_t st, spt;
    int have_status = uv_thread_create(&st, status_main, &sc) == 0;
    long nsample = o.sample_messages < 0 ? 1000 : o.sample_messages;
    sample_ctx_t sp = {.db = db, .conf = conf, .n = nsample};
    int have_sample = db && nsample > 0 && conf->n_subs > 0 &&
                      uv_thread_create(&spt, sample_main, &sp) == 0;
    rc = rmq__consumer_run(c);
    sp.stop = 1;
    if (have_sample) uv_thread_join(&spt);
    sc.stop = 1;
    if (have_status) uv_thread_join(&st);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    g_consumer = NULL;
out:
    if (c) rmq__consumer_destroy(c);
    if (db) rmq_devbroker_stop(db);
    rmq__conf_destroy(conf);
    free(o.sets);
    return rc;
}
