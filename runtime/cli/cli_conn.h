/*
 * cli_conn.h -- the connection options of the client commands (`rmqlua send`, `rmqlua tail`,
 * `rmqlua redrive`): the arguments they all take (`--namesrv ADDR`, else $NAMESRV_ADDR, else
 * the name server address service; `--log-debug CATS`; `--set KEY=VALUE` for access_key,
 * secret_key, security_token (ACL signing, as AclClientRPCHook), use_tls and tls_* (TLS on every
 * connection), namesrv_domain and namesrv_domain_subgroup (the address service, as `rmqlua run`
 * asks it: consumer/nsaddr_http.c), and, for the commands that take them, namespace and
 * namesrv_addr_refresh_interval); the check of those options and the TLS context before any
 * connection (usage errors, exit 2); the command's loop and transport, which signs every request
 * and opens TLS sessions, its name servers given or asked of the address service before the
 * command starts (and, for a command that keeps refreshing, again every
 * namesrv_addr_refresh_interval ms); SIGINT and SIGTERM caught on that loop; and a broker's ACL
 * refusal reported once, in the same words as `rmqlua run` uses (rmq__acl_explain), after which
 * the command stops and exits with RMQ_CLI_EXIT_ACL.
 *
 * Ownership: the command owns its rmq_cli_conn_t (usually inside its run struct) and keeps it
 * until its transport is gone; the conf and the TLS context belong to it and are freed by
 * rmq__cli_conn_free. The transport keeps its own reference to the TLS context and its own copy
 * of the keys.
 * Threads: the main thread (argument parsing) and the command's loop thread (the refusal, the
 * address service's answers).
 */
#ifndef RMQ_CLI_CONN_H
#define RMQ_CLI_CONN_H

#include "consumer/conf.h"
#include "consumer/nsaddr_http.h"
#include "net/remoting.h"
#include "net/tls.h"

#include <stdio.h>

/* Exit code of a command that a broker's access control refused (as `rmqlua run`'s). */
#define RMQ_CLI_EXIT_ACL 3

typedef struct rmq_cli_conn {
    const char *cmd;     /* "send", "tail", ...: messages start with "rmqlua <cmd>: " */
    const char *namesrv; /* --namesrv, else $NAMESRV_ADDR (rmq__cli_conn_namesrv), else NULL:
                          * the address service (conf->namesrv_domain) */
    int with_namespace;  /* --set namespace is one of this command's options */
    int refresh;         /* the command runs long: it asks the address service again every
                          * namesrv_addr_refresh_interval ms (an option of its --set) */
    rmq_conf_t *conf;    /* the options set; NULL while none was */
    rmq_tls_ctx_t *tls;  /* use_tls: the client context (rmq__cli_conn_check) */
    int refused;         /* a broker's ACL refused a request (reported once) */
    /* The command's --help text, written to out (-h and --help print it on stdout). */
    void (*usage)(const struct rmq_cli_conn *cc, FILE *out);
    /* Called once, on the loop thread, right after the first refusal was reported: the command
     * stops (its exit code is then RMQ_CLI_EXIT_ACL). */
    void (*on_refused)(void *ud);
    void *ud;
    /* The address service, loop thread: the fetcher (while it runs), the transport its lists
     * go to, whether a first list was taken, and the failure before it (else NULL). */
    rmq_nsaddr_t *nsaddr;
    rmq_remoting_t *ns_rt;
    int ns_taken;
    char *ns_err;
} rmq_cli_conn_t;

void rmq__cli_conn_init(rmq_cli_conn_t *cc, const char *cmd, int with_namespace,
                        void (*usage)(const rmq_cli_conn_t *cc, FILE *out));

/* In a command's argument loop (`for (int i = 1; i < argc; i++)`), for the option at argv[*i]:
 * the value after it, *i moved onto that value; NULL, after saying on stderr that the option
 * needs a value, when there is none (a usage error, exit 2). */
const char *rmq__cli_value(const rmq_cli_conn_t *cc, int argc, char **argv, int *i);

/* In such a loop (argc, argv, index i): v = the value after the option at argv[i], or return 2
 * from the argument parser when there is none (rmq__cli_value said so). */
#define RMQ_CLI_NEED_VALUE(cc, v)                                                                  \
    do {                                                                                           \
        if (!((v) = rmq__cli_value((cc), argc, argv, &i))) return 2;                               \
    } while (0)

/* The arguments every client command takes, at argv[*i]: -h and --help (the usage printed on
 * stdout), --namesrv ADDR, --set KEY=VALUE and --log-debug CATS. Returns 1 when argv[*i] is one of
 * the last three (*i then on its value), 2 after printing the usage (the command exits 0), 0 when
 * it is none of them, -1 after saying on stderr what is wrong (a usage error, exit 2). */
int rmq__cli_conn_arg(rmq_cli_conn_t *cc, int argc, char **argv, int *i);

/* After the arguments: cc->namesrv from $NAMESRV_ADDR when --namesrv was not given; when neither
 * is, the address service (--set namesrv_domain) is to be asked. Returns 0, or -1 after saying on
 * stderr that there is none of the three (a usage error, exit 2). */
int rmq__cli_conn_namesrv(rmq_cli_conn_t *cc);

/* --set KEY=VALUE. Returns 0, or -1 after saying on stderr what is wrong (the key is not one of
 * this command's options, or its value is not valid for it). */
int rmq__cli_conn_set(rmq_cli_conn_t *cc, const char *kv);

/* After the arguments: the ACL keys and TLS settings go together (rmq__conf_check_security) and
 * the TLS files load. Returns 0, or -1 after saying why on stderr (a usage error, exit 2). */
int rmq__cli_conn_check(rmq_cli_conn_t *cc);

/* The command's loop and transport: SIGPIPE ignored (a broker closing a connection must not
 * kill the command on its next write), loop initialised, and a transport on it named cc->cmd,
 * which signs every request and opens TLS sessions as the options say and reports a refusal
 * (cc->on_refused), set to the name servers cc->namesrv. Without cc->namesrv, the address
 * service is asked first (the loop runs until it answers, RMQ_NSADDR_TIMEOUT_MS at most) and the
 * transport set to its list; with cc->refresh it is asked again every
 * namesrv_addr_refresh_interval ms until rmq__cli_conn_close, each new good list used for new
 * connections (a failure then keeps the last one). Returns 0 with *rt set, else the command's
 * exit code with *rt NULL after saying on stderr why: 2 ("--namesrv: ...", a usage error), 1 (the
 * address service gave no list; the message names its URL and the fault). Either way the loop is
 * initialised: the caller runs it (to close what it started) and closes it. */
int rmq__cli_conn_open(rmq_cli_conn_t *cc, uv_loop_t *loop, rmq_remoting_t **rt);

/* Stops asking the address service (nothing when it is not asked); the loop thread, before the
 * transport is destroyed. A command with cc->refresh calls it when it stops. */
void rmq__cli_conn_close(rmq_cli_conn_t *cc);

/* SIGINT and SIGTERM caught on a command's loop: either calls on_stop(ud) (the command stops
 * as when it is done). The handles are the command's (usually inside its run struct). */
typedef struct rmq_cli_signals {
    uv_signal_t sigint, sigterm;
    void (*on_stop)(void *ud);
    void *ud;
} rmq_cli_signals_t;

/* Starts catching SIGINT and SIGTERM on loop; the loop thread. */
void rmq__cli_signals_start(rmq_cli_signals_t *sg, uv_loop_t *loop, void (*on_stop)(void *ud),
                            void *ud);

/* Closes both handles (no close callback: they are freed with the command's run struct after
 * its loop has run to its end); the loop thread. */
void rmq__cli_signals_close(rmq_cli_signals_t *sg);

/* The namespace (NULL when not set). */
const char *rmq__cli_conn_namespace(const rmq_cli_conn_t *cc);

/* The --set lines of a command's --help, their descriptions starting at column col. */
void rmq__cli_conn_usage(const rmq_cli_conn_t *cc, FILE *out, int col);

void rmq__cli_conn_free(rmq_cli_conn_t *cc);

#endif
