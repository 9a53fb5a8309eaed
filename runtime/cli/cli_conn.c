/*
 * cli_conn.c -- the connection options of the client commands (cli_conn.h): the arguments they
 * all take (--namesrv, --set, --log-debug), their check, the loop and the transport with its
 * signing and TLS, its name servers from the address service when none is given
 * (consumer/nsaddr_http.c, as `rmqlua run` asks it), SIGINT and SIGTERM on that loop, and the ACL
 * refusal that ends a command.
 *
 * Ownership: see cli_conn.h. Threads: the main thread, and the command's loop for the refusal,
 * the signals and the address service's answers.
 */
#include "cli_conn.h"

#include "protocol/acl.h"
#include "base/common.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* The options of ClientConfig that are about the connection (ACL, TLS, the name server address
 * service). */
static const char *const conn_options[] = {"access_key",
                                           "secret_key",
                                           "security_token",
                                           "use_tls",
                                           "tls_test_mode_enable",
                                           "tls_client_cert_path",
                                           "tls_client_key_path",
                                           "tls_client_key_password",
                                           "tls_client_trust_cert_path",
                                           "tls_client_auth_server",
                                           "tls_verify_server_name",
                                           "namesrv_domain",
                                           "namesrv_domain_subgroup"};

void rmq__cli_conn_init(rmq_cli_conn_t *cc, const char *cmd, int with_namespace,
                        void (*usage)(const rmq_cli_conn_t *cc, FILE *out))
{
    memset(cc, 0, sizeof(*cc));
    cc->cmd = cmd;
    cc->with_namespace = with_namespace;
    cc->usage = usage;
}

static int allowed(const rmq_cli_conn_t *cc, const char *key)
{
    for (size_t i = 0; i < RMQ_ARRAY_SIZE(conn_options); i++)
        if (!strcmp(key, conn_options[i])) return 1;
    return (cc->with_namespace && !strcmp(key, "namespace")) ||
           (cc->refresh && !strcmp(key, "namesrv_addr_refresh_interval"));
}

const char *rmq__cli_value(const rmq_cli_conn_t *cc, int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "rmqlua %s: %s needs a value\n", cc->cmd, argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int rmq__cli_conn_arg(rmq_cli_conn_t *cc, int argc, char **argv, int *i)
{
    const char *a = argv[*i], *v;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
        cc->usage(cc, stdout);
        return 2;
    }
    if (strcmp(a, "--namesrv") && strcmp(a, "--set") && strcmp(a, "--log-debug")) return 0;
    if (!(v = rmq__cli_value(cc, argc, argv, i))) return -1;
    if (!strcmp(a, "--namesrv")) {
        cc->namesrv = v;
    } else if (!strcmp(a, "--set")) {
        if (rmq__cli_conn_set(cc, v)) return -1;
    } else {
        char err[128];
        if (rmq_log_set_debug(v, err, sizeof(err)) < 0) {
            fprintf(stderr, "rmqlua %s: --log-debug: %s\n", cc->cmd, err);
            return -1;
        }
    }
    return 1;
}

int rmq__cli_conn_namesrv(rmq_cli_conn_t *cc)
{
    if (!cc->namesrv) cc->namesrv = getenv("NAMESRV_ADDR");
    if (cc->namesrv && *cc->namesrv) return 0;
    cc->namesrv = NULL;
    /* The environment's ROCKETMQ_NAMESRV_DOMAIN(_SUBGROUP) come with the options' defaults. */
    const char *dom = getenv("ROCKETMQ_NAMESRV_DOMAIN");
    if (!cc->conf && dom && *dom) cc->conf = rmq__conf_new();
    if (cc->conf && cc->conf->namesrv_domain && *cc->conf->namesrv_domain) return 0;
    fprintf(stderr,
            "rmqlua %s: --namesrv is required (or set NAMESRV_ADDR, or --set "
            "namesrv_domain=HOST[:PORT] or ROCKETMQ_NAMESRV_DOMAIN for a name server address "
            "service)\n",
            cc->cmd);
    return -1;
}

int rmq__cli_conn_set(rmq_cli_conn_t *cc, const char *kv)
{
    const char *eq = strchr(kv, '=');
    char err[512];
    if (!eq || eq == kv) {
        fprintf(stderr, "rmqlua %s: --set needs KEY=VALUE, got '%s'\n", cc->cmd, kv);
        return -1;
    }
    char *key = rmq__xstrndup(kv, (size_t)(eq - kv));
    if (!allowed(cc, key)) {
        fprintf(stderr,
                "rmqlua %s: --set %s: not an option of rmqlua %s (only access_key, "
                "secret_key, security_token, use_tls, tls_*, namesrv_domain, "
                "namesrv_domain_subgroup%s%s)\n",
                cc->cmd, key, cc->cmd, cc->refresh ? ", namesrv_addr_refresh_interval" : "",
                cc->with_namespace ? ", namespace" : "");
        free(key);
        return -1;
    }
    if (!cc->conf) cc->conf = rmq__conf_new();
    int rc = rmq__conf_set(cc->conf, key, eq + 1, err, sizeof err);
    const rmq_conf_prop_t *p = rmq__conf_prop_find(key);
    if (rc) {
        fprintf(stderr, "rmqlua %s: --set %s: %s\n", cc->cmd, key, err);
    } else if (p->type == RMQ_CONF_INT || p->type == RMQ_CONF_INT64) {
        /* The range (rmq__conf_check's part for a script's options), at once. */
        long long v = strtoll(eq + 1, NULL, 10);
        if (v < p->min || v > p->max) {
            fprintf(stderr, "rmqlua %s: --set %s: %lld is out of range (allowed: %lld..%lld)\n",
                    cc->cmd, key, v, (long long)p->min, (long long)p->max);
            rc = -1;
        }
    }
    free(key);
    return rc ? -1 : 0;
}

int rmq__cli_conn_check(rmq_cli_conn_t *cc)
{
    char err[512];
    if (!cc->conf) return 0;
    if (rmq__conf_check_security(cc->conf, err, sizeof err) ||
        rmq__tls_ctx_from_conf(cc->conf, &cc->tls, err, sizeof err)) {
        fprintf(stderr, "rmqlua %s: %s\n", cc->cmd, err);
        return -1;
    }
    return 0;
}

/* A broker's ACL refused a request: say so once, in the user's terms (the access key, the
 * resource and the permission, as `rmqlua run` says it), and let the command stop. */
static void on_acl_refused(void *ud, const char *addr, int32_t code, const rmq_cmd_t *resp)
{
    rmq_cli_conn_t *cc = ud;
    char msg[768];
    if (cc->refused) return;
    cc->refused = 1;
    rmq__acl_explain(msg, sizeof msg, addr, code, cc->conf ? cc->conf->access_key : NULL,
                     resp->remark);
    fprintf(stderr, "rmqlua %s: %s\n", cc->cmd, msg);
    if (cc->on_refused) cc->on_refused(cc->ud);
}

/* The address service's answer: the transport's name servers from now on (new connections).
 * Loop thread. */
static int on_ns_list(void *ud, const char *list, char *errstr, size_t errstr_size)
{
    rmq_cli_conn_t *cc = ud;
    if (rmq__remoting_set_namesrv(cc->ns_rt, list, errstr, errstr_size)) return RMQ_ERR_CONFIG;
    cc->ns_taken = 1;
    return 0;
}

/* The address service gave no list before the first one (its URL and the fault in msg). */
static void on_ns_failure(void *ud, const char *msg)
{
    rmq_cli_conn_t *cc = ud;
    if (!cc->ns_err) cc->ns_err = rmq__xstrdup(msg);
}

/* Asks the address service of --set namesrv_domain for the name servers of rt, running the loop
 * until it answers; with cc->refresh it goes on asking (rmq__cli_conn_close stops it). Returns 0
 * when rt has them, else the exit code after saying why on stderr: 2 (the domain makes no URL),
 * 1 (no list). */
static int ask_nsaddr(rmq_cli_conn_t *cc, uv_loop_t *loop, rmq_remoting_t *rt)
{
    char err[1024];
    const rmq_conf_t *cf = cc->conf;
    char *url = rmq__nsaddr_url(cf->namesrv_domain, cf->namesrv_domain_subgroup, NULL);
    cc->ns_rt = rt;
    int rc = rmq__nsaddr_start(loop, url, cf->namesrv_addr_refresh_interval, RMQ_NSADDR_TIMEOUT_MS,
                               on_ns_list, cc, &cc->nsaddr, err, sizeof(err));
    free(url);
    if (rc) {
        fprintf(stderr, "rmqlua %s: --set namesrv_domain: %s\n", cc->cmd, err);
        return 2;
    }
    rmq__nsaddr_on_first_failure(cc->nsaddr, on_ns_failure);
    while (!cc->ns_taken && !cc->ns_err)
        if (!uv_run(loop, UV_RUN_ONCE)) break;
    if (!cc->ns_taken) {
        fprintf(stderr, "rmqlua %s: %s\n", cc->cmd,
                cc->ns_err ? cc->ns_err : "the name server address service gave no list");
        rmq__cli_conn_close(cc);
        return 1;
    }
    if (!cc->refresh) rmq__cli_conn_close(cc);
    return 0;
}

int rmq__cli_conn_open(rmq_cli_conn_t *cc, uv_loop_t *loop, rmq_remoting_t **rt)
{
    char err[1024];
    rmq_remoting_opts_t ro;
    signal(SIGPIPE, SIG_IGN);
    uv_loop_init(loop);
    memset(&ro, 0, sizeof(ro));
    ro.loop = loop;
    ro.name = cc->cmd;
    ro.tls_client = cc->tls;
    if (cc->conf) {
        ro.acl_access_key = cc->conf->access_key;
        ro.acl_secret_key = cc->conf->secret_key;
        ro.acl_security_token = cc->conf->security_token;
    }
    ro.on_acl_refused = on_acl_refused;
    ro.ud = cc;
    *rt = NULL;
    if (rmq__remoting_new(&ro, rt, err, sizeof(err)) ||
        (cc->namesrv && rmq__remoting_set_namesrv(*rt, cc->namesrv, err, sizeof(err)))) {
        fprintf(stderr, "rmqlua %s: --namesrv: %s\n", cc->cmd, err);
        if (*rt) rmq__remoting_destroy(*rt, NULL, NULL);
        *rt = NULL;
        return 2;
    }
    int rc = cc->namesrv ? 0 : ask_nsaddr(cc, loop, *rt);
    if (rc) {
        rmq__remoting_destroy(*rt, NULL, NULL);
        *rt = NULL;
    }
    return rc;
}

void rmq__cli_conn_close(rmq_cli_conn_t *cc)
{
    if (cc->nsaddr) rmq__nsaddr_close(cc->nsaddr);
    cc->nsaddr = NULL;
}

static void on_signal(uv_signal_t *h, int sig)
{
    rmq_cli_signals_t *sg = h->data;
    (void)sig;
    sg->on_stop(sg->ud);
}

void rmq__cli_signals_start(rmq_cli_signals_t *sg, uv_loop_t *loop, void (*on_stop)(void *ud),
                            void *ud)
{
    sg->on_stop = on_stop;
    sg->ud = ud;
    uv_signal_init(loop, &sg->sigint);
    uv_signal_init(loop, &sg->sigterm);
    sg->sigint.data = sg->sigterm.data = sg;
    uv_signal_start(&sg->sigint, on_signal, SIGINT);
    uv_signal_start(&sg->sigterm, on_signal, SIGTERM);
}

void rmq__cli_signals_close(rmq_cli_signals_t *sg)
{
    uv_close((uv_handle_t *)&sg->sigint, NULL);
    uv_close((uv_handle_t *)&sg->sigterm, NULL);
}

const char *rmq__cli_conn_namespace(const rmq_cli_conn_t *cc)
{
    const char *ns = cc->conf ? cc->conf->namespace : NULL;
    return ns && *ns ? ns : NULL;
}

void rmq__cli_conn_usage(const rmq_cli_conn_t *cc, FILE *out, int col)
{
    const int pad = col - 2 - (int)strlen("--set KEY=VALUE");
    fprintf(out,
            "  --set KEY=VALUE%*sa connection option, named as in consumer scripts "
            "(repeatable):\n"
            "%*saccess_key, secret_key, security_token (ACL signing), use_tls,\n"
            "%*stls_test_mode_enable, tls_client_cert_path, tls_client_key_path,\n"
            "%*stls_client_key_password, tls_client_trust_cert_path,\n"
            "%*stls_client_auth_server, tls_verify_server_name,\n"
            "%*snamesrv_domain, namesrv_domain_subgroup",
            pad > 1 ? pad : 1, "", col, "", col, "", col, "", col, "", col, "");
    if (cc->refresh) fprintf(out, ",\n%*snamesrv_addr_refresh_interval", col, "");
    fprintf(out, "%s\n", cc->with_namespace ? ", namespace" : "");
}

void rmq__cli_conn_free(rmq_cli_conn_t *cc)
{
    free(cc->ns_err);
    cc->ns_err = NULL;
    rmq__tls_ctx_release(cc->tls);
    cc->tls = NULL;
    if (cc->conf) rmq__conf_destroy(cc->conf);
    cc->conf = NULL;
}
