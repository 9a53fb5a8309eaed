/*
 * cli_lua.c -- rmqlua run / check / test: the consumer script from the command line.
 *
 *   rmqlua run [--namesrv ADDR] [--set KEY=VALUE]... [--embedded] [--watch] [--log-debug CATS]
 *              SCRIPT
 *   rmqlua check [--set KEY=VALUE]... SCRIPT
 *   rmqlua test SCRIPT CASES
 *
 * Exit codes: 0 success, 1 runtime failure (or failed test cases), 2 usage or configuration
 * error (bad arguments, bad script, rejected options, certificates that do not load), always
 * before any connection; 3 (run) refused by a broker's access control (ACL).
 *
 * `run` starts the log writer (log.h) with the log_format / log_file options, so no thread of the
 * consumer ever waits on the log output; signals: SIGINT / SIGTERM stop cleanly, SIGUSR1 reopens
 * the log file, SIGHUP reloads the script (reload.h; --watch does it on every change of it).
 *
 * Ownership: everything is local to one command. Threads: the main thread; `run` hands the
 * main thread to the consumer's loop and keeps the status line from a small helper thread.
 */
#include "cli.h"

#include "cli_sample.h"
#include "consumer/conf.h"
#include "consumer/consumer.h"
#include "devbroker/devbroker.h"
#include "base/log.h"
#include "luahost/lua_handler.h"
#include "luahost/lua_state.h"
#include "luahost/script.h"
#include "protocol/sql92.h"
#include "net/tls.h"

#include <stdatomic.h>

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
    const char *log_format;
    const char *log_file;
    const char *sample_body;
    const char *metrics; /* --metrics HOST:PORT (option metrics_listen) */
    int embedded;
    int watch;            /* --watch: reload when the script or a module beside it changes */
    long sample_messages; /* --sample-messages: -1 = default (1000 with --embedded) */
    long max_messages;    /* --max-messages: 0 = no limit */
    int nsets;
    char **sets; /* "key=value", pointing into argv */
} cli_opts_t;

static const char run_usage[] =
    "usage: rmqlua run [OPTIONS] SCRIPT\n"
    "\n"
    "Consume with the hooks of a Lua consumer script until SIGINT/SIGTERM. SIGHUP reloads the\n"
    "script: the new version is checked as `rmqlua check` does and replaces the running one\n"
    "(no batch lost or run twice); if it fails, the running version stays and the error is\n"
    "logged with file:line.\n"
    "\n"
    "options:\n"
    "  --namesrv ADDR      name server(s) \"host:port;host:port\" when the script does not set\n"
    "                      namesrv_addr (else $NAMESRV_ADDR)\n"
    "  --set KEY=VALUE     override any option of the script (repeatable)\n"
    "  --embedded          start the in-process development broker (with property\n"
    "                      filtering, for SQL92 subscriptions) and consume from it\n"
    "  --sample-messages N with --embedded: a sample producer puts N messages (default 1000)\n"
    "                      into the subscribed topics (tags TagA/TagB, keys sample-<i>,\n"
    "                      properties id=<i>, region=eu|us|apac, amount=the json amount)\n"
    "  --sample-body B     their bodies: json (default: orders with a note \"ok\", \"fail once\",\n"
    "                      \"dlq\" or \"poison\"), text, or a FILE whose lines are the bodies\n"
    "  --max-messages N    stop cleanly once N messages were consumed\n"
    "  --watch             reload when the script or a module it requires beside it changes\n"
    "                      (polled every second)\n"
    "  --log-format F      text (default) or json: one JSON object per line (log_format)\n"
    "  --log-file PATH     append the log to PATH instead of stderr; SIGUSR1 reopens it\n"
    "                      (log_file)\n"
    "  --metrics HOST:PORT serve /metrics (Prometheus), /stats (JSON) and /health over HTTP\n"
    "                      (option metrics_listen; port 0 = any free port, logged)\n"
    "  --log-debug CATS    debug logs: remoting,namesrv,rebalance,pull,consume,offset,lua,broker\n"
    "                      or all (log_debug)\n"
    "  -h, --help          this text\n"
    "\n"
    "The --log-* flags override the script's log_* options. On a terminal a live status line\n"
    "shows messages/s, failures, retries, DLQ, sends, lag and cached messages; otherwise a status\n"
    "line is logged every 10 s. The last line, at stop, gives the totals and the overall rate.\n"
    "signals: SIGINT/SIGTERM stop cleanly, SIGUSR1 reopens the log file, SIGHUP reloads the\n"
    "script\n"
    "exit codes: 0 stopped cleanly, 1 runtime failure, 2 usage or configuration error\n"
    "(certificates that do not load included), 3 refused by a broker's access control (a wrong\n"
    "secret_key, an unknown access_key or a missing permission, named in the message)\n";

static const char check_usage[] =
    "usage: rmqlua check [--set KEY=VALUE]... SCRIPT\n"
    "\n"
    "Load and validate a consumer script without a broker: its options (checkConfig rules),\n"
    "subscriptions and hooks in the control role, then in a consume state (top-level code and\n"
    "init run once, then shutdown), and with use_tls the certificate, key and CA files.\n"
    "Warns about every global the script or a module from its folder assigns (file:line; an\n"
    "error with strict_globals = true).\n"
    "exit codes: 0 valid, 2 invalid (the message names file:line)\n";

static const char test_usage[] =
    "usage: rmqlua test SCRIPT CASES\n"
    "\n"
    "Run the script's handler over offline test cases (no broker). CASES is a Lua file that\n"
    "returns a list of { name =, messages = { {topic =, tags =, keys =, body =, properties =,\n"
    "...}, ... }, expect = { delivered =, status =, ack_index =, delay_level =, error =,\n"
    "sent = {...} } }. A SQL92 subscription first filters the messages by their properties, as\n"
    "the broker would (delivered: how many, or which, reach the handler). Handlers that wait\n"
    "(rmq.sleep, cosockets, rmq.http) run as in a consume thread; a case's\n"
    "http = { [\"POST http://host/path\"] = { status = 200, body = \"ok\" } } (or an error\n"
    "string, or a function(req)) answers rmq.http without a network (expect.http: the requests).\n"
    "See lua/rmq/testrun.lua for every field; an unknown key is an error. The script is\n"
    "validated first exactly as `rmqlua check` does (options, checkConfig).\n"
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
        } else if (allow_run_flags &&
                   (!strcmp(a, "--log-format") || !strcmp(a, "--log-file") ||
                    !strcmp(a, "--sample-body"))) {
            if (i + 1 >= argc) {
                fprintf(stderr, "rmqlua run: %s needs a value\n", a);
                return EXIT_USAGE;
            }
            if (!strcmp(a, "--log-format")) o->log_format = argv[++i];
            else if (!strcmp(a, "--log-file")) o->log_file = argv[++i];
            else o->sample_body = argv[++i];
        } else if (allow_run_flags && !strcmp(a, "--metrics")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "rmqlua run: --metrics needs HOST:PORT\n");
                return EXIT_USAGE;
            }
            o->metrics = argv[++i];
        } else if (allow_run_flags && !strcmp(a, "--embedded")) {
            o->embedded = 1;
        } else if (allow_run_flags && !strcmp(a, "--watch")) {
            o->watch = 1;
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

/* The conf: --namesrv, then the script's options, then --set, then the --log-* and --metrics
 * flags. 0, or EXIT_USAGE with the message in err. Any thread (a reload builds its conf on a
 * worker thread). */
static int make_conf(const cli_opts_t *o, rmq_conf_t **out, char *err, size_t errsz)
{
    char e[2048];
    rmq_conf_t *conf = rmq__conf_new();
    if (o->namesrv && rmq__conf_set(conf, "namesrv_addr", o->namesrv, e, sizeof(e))) {
        rmq__seterr(err, errsz, "--namesrv: %s", e);
        goto fail;
    }
    if (rmq__script_load(o->script, conf, NULL, e, sizeof(e))) {
        rmq__seterr(err, errsz, "%s", e);
        goto fail;
    }
    for (int i = 0; i < o->nsets; i++) {
        const char *kv = o->sets[i];
        const char *eq = strchr(kv, '=');
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)(eq - kv), kv);
        int rc = strcmp(key, "message_listener")
                     ? rmq__conf_set(conf, key, eq + 1, e, sizeof(e))
                     : (rmq__seterr(e, sizeof(e), "%s", RMQ_SCRIPT_LISTENER_MSG), RMQ_ERR_CONFIG);
        if (rc) {
            rmq__seterr(err, errsz, "--set %s: %s", key, e);
            goto fail;
        }
    }
    const struct {
        const char *flag, *opt, *val;
    } flags[] = {{"--log-format", "log_format", o->log_format},
                 {"--log-file", "log_file", o->log_file},
                 {"--log-debug", "log_debug", o->log_debug},
                 {"--metrics", "metrics_listen", o->metrics}};
    for (size_t i = 0; i < RMQ_ARRAY_SIZE(flags); i++) {
        if (flags[i].val && rmq__conf_set(conf, flags[i].opt, flags[i].val, e, sizeof(e))) {
            rmq__seterr(err, errsz, "%s: %s", flags[i].flag, e);
            goto fail;
        }
    }
    *out = conf;
    return 0;
fail:
    rmq__conf_destroy(conf);
    return EXIT_USAGE;
}

/* make_conf, the message printed. 0 or EXIT_USAGE. */
static int build_conf(const char *cmd, const cli_opts_t *o, rmq_conf_t **out)
{
    char err[2048];
    int rc = make_conf(o, out, err, sizeof(err));
    if (rc) fprintf(stderr, "rmqlua %s: %s\n", cmd, err);
    return rc;
}

/*
 * The line of the script that sets option `name` ("name =" after a non-identifier character),
 * or 0. Used to point checkConfig errors ("(option name=value)") at the script.
 */
static int option_line(const char *path, const char *err)
{
    const char *o = strstr(err, "(option ");
    if (o) o += 8;
    else if (!strncmp(err, "option ", 7)) o = err + 7; /* "option NAME = VALUE is out of range" */
    else return 0;
    size_t n = strcspn(o, " =)");
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

/* A reload's conf: what `run` built at start, from the script as it is now. */
typedef struct reload_ctx {
    const cli_opts_t *o;
    const char *embedded_namesrv; /* --embedded: the development broker's name server */
} reload_ctx_t;

static int reload_conf(void *ud, const char *path, rmq_conf_t **out, char *err, size_t errsz)
{
    reload_ctx_t *rc = ud;
    (void)path;
    char e[2048];
    rmq_conf_t *conf = NULL;
    if (make_conf(rc->o, &conf, err, errsz)) return RMQ_ERR_CONFIG;
    if (rc->embedded_namesrv &&
        rmq__conf_set(conf, "namesrv_addr", rc->embedded_namesrv, e, sizeof(e))) {
        rmq__seterr(err, errsz, "%s", e);
        rmq__conf_destroy(conf);
        return RMQ_ERR_CONFIG;
    }
    if (rmq__conf_check(conf, e, sizeof(e))) {
        int line = option_line(rc->o->script, e);
        if (line > 0)
            rmq__seterr(err, errsz, "%s:%d: %s", rc->o->script, line, e);
        else
            rmq__seterr(err, errsz, "%s: %s", rc->o->script, e);
        rmq__conf_destroy(conf);
        return RMQ_ERR_CONFIG;
    }
    *out = conf;
    return 0;
}

/* A SQL92 selector with text after its expression is valid, but the broker never reads that
 * text (SelectorParser's JmsSelector has no <EOF>): say so, it is almost always a mistake. */
static void warn_ignored_sql92(const char *path, const rmq_conf_t *conf)
{
    for (int i = 0; i < conf->n_subs; i++) {
        if (strcmp(conf->subs[i].type, "SQL92")) continue;
        rmq_sql92_t *e = NULL;
        if (rmq__sql92_compile(conf->subs[i].expression, &e, NULL, 0, NULL)) continue;
        int at = rmq__sql92_ignored(e);
        if (at >= 0)
            fprintf(stderr,
                    "rmqlua check: %s: warning: subscribe %s: the broker ignores the text after "
                    "the SQL92 expression: \"%s\" (combine conditions with AND / OR)\n",
                    path, conf->subs[i].topic, conf->subs[i].expression + at);
        rmq__sql92_free(e);
    }
}

/* TLS settings that leave the server unauthenticated are valid, but worth a word. */
static void warn_tls(const char *path, const rmq_conf_t *conf)
{
    if (!conf->use_tls) return;
    if (conf->tls_test_mode_enable)
        fprintf(stderr, "rmqlua check: %s: warning: tls_test_mode_enable = true: any server "
                "certificate is trusted, anyone on the path can read and answer this client\n",
                path);
    else if (!conf->tls_client_auth_server)
        fprintf(stderr, "rmqlua check: %s: warning: tls_client_auth_server = false: any server "
                "certificate is trusted, anyone on the path can read and answer this client\n",
                path);
    else if (!conf->tls_verify_server_name)
        fprintf(stderr, "rmqlua check: %s: warning: tls_verify_server_name = false: the "
                "server's certificate is verified but need not name the address dialled, so any "
                "certificate its CAs issued is accepted as this server\n",
                path);
}

/*
 * Every assignment to a global in the script and the modules it loads from its folder
 * (rmq.lint.global_writes), one line each on stderr: a warning, or with strict_globals an error.
 * Returns 0, or EXIT_USAGE when strict_globals found one or the scan itself failed.
 */
static int check_globals(const char *path, const rmq_conf_t *conf)
{
    char err[4096];
    rmq_lua_host_t h = {.role = "check", .script_path = path,
                        .consumer_group = conf->consumer_group, .thread_index = 0,
                        .thread_count = 1, .ngx_shim = conf->lua_ngx_shim ? RMQ_NGX_ON : RMQ_NGX_OFF};
    lua_State *L = rmq__lua_new(&h, err, sizeof(err));
    if (!L) {
        fprintf(stderr, "rmqlua check: %s\n", err);
        return EXIT_USAGE;
    }
    int rc = EXIT_USAGE;
    if (rmq__lua_getfield_mod(L, "rmq.lint", "global_writes", err, sizeof(err))) goto fail;
    lua_pushstring(L, path);
    if (rmq__lua_pcall(L, 1, 1, err, sizeof(err))) goto fail;
    int n = (int)lua_objlen(L, -1);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        lua_getfield(L, -1, "file");
        lua_getfield(L, -2, "line");
        lua_getfield(L, -3, "name");
        fprintf(stderr,
                "rmqlua check: %s:%d: %s: assigns the global '%s' (a forgotten `local`? it keeps "
                "its value in the thread's Lua state from one batch to the next)\n",
                lua_tostring(L, -3), (int)lua_tointeger(L, -2),
                conf->strict_globals ? "error" : "warning", lua_tostring(L, -1));
        lua_pop(L, 4);
    }
    rc = n > 0 && conf->strict_globals ? EXIT_USAGE : 0;
    lua_close(L);
    return rc;
fail:
    fprintf(stderr, "rmqlua check: %s\n", err);
    lua_close(L);
    return rc;
}

/* Scripts print() from consume threads: keep stdout line-buffered even into a pipe or file,
 * so lines are not held back until exit. */
static void line_buffered_stdout(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
}

/*
 * What `check` and `test` both do first: load the script in the control role, apply its options
 * and --set, then checkConfig. 0 with *out, or EXIT_USAGE after printing why.
 */
static int load_checked(const char *cmd, const cli_opts_t *o, rmq_conf_t **out)
{
    rmq_conf_t *conf = NULL;
    int rc = build_conf(cmd, o, &conf);
    if (rc) return rc;
    char err[4096];
    if (rmq__conf_check(conf, err, sizeof(err))) {
        print_check_error(cmd, o->script, err);
        rmq__conf_destroy(conf);
        return EXIT_USAGE;
    }
    *out = conf;
    return 0;
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
    if ((rc = load_checked("check", &o, &conf))) {
        free(o.sets);
        return rc;
    }
    char err[4096];
    rmq_tls_ctx_t *tls = NULL;
    if (rmq__tls_ctx_from_conf(conf, &tls, err, sizeof(err))) {
        fprintf(stderr, "rmqlua check: %s: %s\n", o.script, err);
        rc = EXIT_USAGE;
    } else if (rmq__script_check_consume(o.script, conf->consumer_group, conf->lua_ngx_shim, err,
                                         sizeof(err))) {
        fprintf(stderr, "rmqlua check: %s\n", err);
        rc = EXIT_USAGE;
    } else if ((rc = check_globals(o.script, conf)) == 0) {
        warn_ignored_sql92(o.script, conf);
        warn_tls(o.script, conf);
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
    if (rc) {
        free(o.sets);
        return rc == 1 ? 0 : rc;
    }
    rmq_conf_t *conf = NULL;
    rc = load_checked("test", &o, &conf);
    free(o.sets);
    if (rc) return rc;
    int ngx_shim = conf->lua_ngx_shim ? RMQ_NGX_ON : RMQ_NGX_OFF;
    rmq__conf_destroy(conf);
    char err[4096];
    rmq_lua_host_t h = {.role = "test", .script_path = o.script, .thread_index = 0,
                        .thread_count = 1, .ngx_shim = ngx_shim};
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
    if (lua_isnil(L, -2)) { /* a bad script or cases file: the message says file:line */
        snprintf(err, sizeof(err), "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "?");
        goto out;
    }
    rc = lua_tointeger(L, -2) > 0 ? EXIT_RUNTIME : 0;
out:
    if (rc == EXIT_USAGE) fprintf(stderr, "rmqlua test: %s\n", err);
    lua_close(L);
    return rc;
}

/* ---- run ----------------------------------------------------------------------------------- */

/* The consumer the signal handlers act on: set and cleared by the main thread, read by a handler
 * on whichever thread the signal lands. */
static _Atomic(rmq_consumer_t *) g_consumer;

static void on_signal(int sig)
{
    rmq_consumer_t *c = atomic_load(&g_consumer);
    if (sig == SIGUSR1) {
        rmq__log_reopen();
    } else if (sig == SIGHUP) {
        if (c) rmq__consumer_reload(c); /* before it exists: nothing to do */
    } else if (c) {
        rmq__consumer_stop(c);
    }
}

typedef struct status_ctx {
    rmq_consumer_t *c;
    atomic_int stop; /* set by the main thread once the consumer has returned */
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

/* The figures of a status line as JSON key fields. */
static int status_fields(const rmq_consumer_stats_t *st, rmq_log_field_t *f)
{
    int n = 0;
    f[n++] = (rmq_log_field_t){"consumed", NULL, st->msgs_consumed};
    f[n++] = (rmq_log_field_t){"failed", NULL, st->msgs_failed};
    f[n++] = (rmq_log_field_t){"retried", NULL, st->msgs_retried};
    f[n++] = (rmq_log_field_t){"dlq", NULL, st->msgs_dlq};
    f[n++] = (rmq_log_field_t){"sent", NULL, st->msgs_sent};
    f[n++] = (rmq_log_field_t){"popped", NULL, st->msgs_popped};
    f[n++] = (rmq_log_field_t){"pop_acks", NULL, st->pop_acks};
    f[n++] = (rmq_log_field_t){"pop_changes", NULL, st->pop_changes};
    f[n++] = (rmq_log_field_t){"lag", NULL, st->lag};
    return n;
}

static void status_main(void *arg)
{
    status_ctx_t *s = arg;
    int64_t last_log = rmq__mono_ms();
    int done = 0;
    while (!atomic_load(&s->stop) && !done) {
        for (int i = 0; i < 10 && !atomic_load(&s->stop) && !done; i++) {
            usleep(100000);
            done = reached_max(s);
        }
        if (atomic_load(&s->stop)) break;
        rmq_consumer_stats_t st;
        rmq__consumer_stats(s->c, &st);
        char line[400], sent[40] = "", pop[96] = "";
        if (st.msgs_sent > 0) snprintf(sent, sizeof(sent), " | sent %lld", (long long)st.msgs_sent);
        if (st.msgs_popped > 0)
            snprintf(pop, sizeof(pop), " | popped %lld acked %lld changed %lld",
                     (long long)st.msgs_popped, (long long)st.pop_acks,
                     (long long)st.pop_changes);
        snprintf(line, sizeof(line),
                 "%.0f msg/s | consumed %lld | failed %lld | retried %lld | dlq %lld%s%s | lag "
                 "%lld | cached %lld | queues %d",
                 st.consume_rate, (long long)st.msgs_consumed, (long long)st.msgs_failed,
                 (long long)st.msgs_retried, (long long)st.msgs_dlq, sent, pop, (long long)st.lag,
                 (long long)st.cached_msgs, st.owned_queues);
        if (s->tty) {
            rmq__log_status(line);
        } else if (rmq__mono_ms() - last_log >= 10000) {
            rmq_log_field_t f[16];
            int nf = status_fields(&st, f);
            f[nf++] = (rmq_log_field_t){"cached", NULL, st.cached_msgs};
            f[nf++] = (rmq_log_field_t){"queues", NULL, st.owned_queues};
            f[nf++] = (rmq_log_field_t){"rate", NULL, (int64_t)(st.consume_rate + 0.5)};
            last_log = rmq__mono_ms();
            if (rmq__log_level >= RMQ_LOG_INFO) rmq__logf(RMQ_LOG_INFO, "status", f, nf, "%s", line);
        }
    }
    rmq__thread_finishing();
}

/*
 * The last line, at stop: totals, the overall rate (consumed over the time since the consumer
 * started) and the elapsed time, from the consumer's final figures. On a terminal it replaces
 * the live line; otherwise it is logged.
 */
static void final_status(const rmq_consumer_stats_t *st, int tty)
{
    if (st->started_ms <= 0) return;
    double secs = (double)(rmq__now_ms() - st->started_ms) / 1000.0;
    if (secs < 0.001) secs = 0.001;
    char line[320];
    snprintf(line, sizeof(line),
             "stopped after %.1f s: consumed %lld (%.1f msg/s overall) | failed %lld | retried "
             "%lld | dlq %lld | sent %lld | lag %lld",
             secs, (long long)st->msgs_consumed, (double)st->msgs_consumed / secs,
             (long long)st->msgs_failed, (long long)st->msgs_retried, (long long)st->msgs_dlq,
             (long long)st->msgs_sent, (long long)st->lag);
    if (tty) {
        rmq__log_status_end(line);
    } else {
        rmq_log_field_t f[16];
        int nf = status_fields(st, f);
        f[nf++] = (rmq_log_field_t){"elapsed_ms", NULL, (int64_t)(secs * 1000)};
        rmq__logf(RMQ_LOG_INFO, "status", f, nf, "%s", line);
    }
}

static const char no_namesrv[] =
    "rmqlua run: no name server. Give one with --namesrv HOST:PORT, the NAMESRV_ADDR\n"
    "environment variable or namesrv_addr = \"HOST:PORT\" in the script (several:\n"
    "\"a:9876;b:9876\"), namesrv_domain = \"HOST[:PORT]\" for an address service, or add\n"
    "--embedded to consume from the in-process development broker.\n";

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
    rmq_conf_t *conf = NULL;
    if ((rc = build_conf("run", &o, &conf))) {
        free(o.sets);
        return rc;
    }
    rmq_devbroker_t *db = NULL;
    rmq_consumer_t *c = NULL;
    rmq_lua_handler_t *lh = NULL;
    int logging = 0;
    rmq_sample_t sp = {0};
    rmq_consumer_stats_t final = {0};
    int tty = isatty(2);
    if (!o.embedded && !conf->namesrv_addr && !conf->namesrv_domain) {
        fputs(no_namesrv, stderr);
        rc = EXIT_USAGE;
        goto out;
    }
    if (o.sample_body && !o.embedded) {
        fprintf(stderr, "rmqlua run: --sample-body needs --embedded\n");
        rc = EXIT_USAGE;
        goto out;
    }
    if (o.embedded && rmq__sample_load(&sp, o.sample_body, err, sizeof(err))) {
        fprintf(stderr, "rmqlua run: --sample-body %s\n", err);
        rc = EXIT_USAGE;
        goto out;
    }
    if (conf->log_debug && rmq_log_set_debug(conf->log_debug, err, sizeof(err)) < 0) {
        fprintf(stderr, "rmqlua run: %s\n", err);
        rc = EXIT_USAGE;
        goto out;
    }
    rmq_log_opts_t lo = {.format = conf->log_format, .file = conf->log_file, .status_tty = tty,
                         .relay_stdout = tty && isatty(1)};
    if (rmq__log_start(&lo, err, sizeof(err))) {
        fprintf(stderr, "rmqlua run: %s\n", err);
        rc = EXIT_USAGE;
        goto out;
    }
    logging = 1;
    /* SIGUSR1 and SIGHUP would end the process by default: handled from the start. */
    signal(SIGUSR1, on_signal);
    signal(SIGHUP, on_signal);
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
        rmq__buf_appendf(&args, "--enable-property-filter true ");
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
    lh = rmq__lua_handler_new(o.script);
    if ((rc = rmq__consumer_new(conf, &lh->h, &c, err, sizeof(err)))) {
        fprintf(stderr, "rmqlua run: %s\n", err);
        rc = (rc == RMQ_ERR_NOMEM) ? EXIT_RUNTIME : EXIT_USAGE;
        c = NULL;
        goto out;
    }
    reload_ctx_t rctx = {.o = &o, .embedded_namesrv = db ? rmq_devbroker_addr(db) : NULL};
    rmq__lua_handler_set_conf_builder(lh, reload_conf, &rctx);
    if (o.watch) rmq__lua_handler_watch(lh, 1000);
    atomic_store(&g_consumer, c);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    status_ctx_t sc = {.c = c, .tty = tty, .max_messages = o.max_messages};
    uv_thread_t st, spt;
    int have_status = uv_thread_create(&st, status_main, &sc) == 0;
    sp.db = db;
    sp.conf = conf;
    sp.n = o.sample_messages < 0 ? 1000 : o.sample_messages;
    int have_sample = db && sp.n > 0 && conf->n_subs > 0 &&
                      uv_thread_create(&spt, rmq__sample_main, &sp) == 0;
    rc = rmq__consumer_run(c);
    atomic_store(&sp.stop, 1);
    if (have_sample) uv_thread_join(&spt);
    atomic_store(&sc.stop, 1);
    if (have_status) uv_thread_join(&st);
    rmq__consumer_stats(c, &final);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    atomic_store(&g_consumer, NULL);
out:
    if (c) rmq__consumer_destroy(c);
    rmq__lua_handler_free(lh);
    if (db) rmq_devbroker_stop(db);
    if (logging) {
        final_status(&final, tty); /* the last line, after the broker's */
        rmq__log_stop();
        signal(SIGUSR1, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
    }
    rmq__sample_free(&sp);
    rmq__conf_destroy(conf);
    free(o.sets);
    return rc;
}
