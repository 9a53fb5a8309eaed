/*
 * cli_conn.h -- the connection options of the client commands (`rmqlua send`, `rmqlua tail`,
 * `rmqlua redrive`): `--set KEY=VALUE` for access_key, secret_key, security_token (ACL
 * signing, as AclClientRPCHook), use_tls and tls_* (TLS on every connection), and, for the
 * commands that take it, namespace; the check of those options and the TLS context before any
 * connection (usage errors, exit 2); the transport options that sign every request and open TLS
 * sessions; and a broker's ACL refusal reported once, in the same words as `rmqlua run` uses
 * (rmq__acl_explain), after which the command stops and exits with RMQ_CLI_EXIT_ACL.
 *
 * Ownership: the command owns its rmq_cli_conn_t (usually inside its run struct) and keeps it
 * until its transport is gone; the conf and the TLS context belong to it and are freed by
 * rmq__cli_conn_free. The transport keeps its own reference to the TLS context and its own copy
 * of the keys.
 * Threads: the main thread (argument parsing) and the command's loop thread (the refusal).
 */
#ifndef RMQ_CLI_CONN_H
#define RMQ_CLI_CONN_H

#include "conf.h"
#include "remoting.h"
#include "tls.h"

#include <stdio.h>

/* Exit code of a command that a broker's access control refused (as `rmqlua run`'s). */
#define RMQ_CLI_EXIT_ACL 3

typedef struct rmq_cli_conn {
    const char *cmd;    /* "send", "tail", ...: messages start with "rmqlua <cmd>: " */
    int with_namespace; /* --set namespace is one of this command's options */
    rmq_conf_t *conf;   /* the options set; NULL while none was */
    rmq_tls_ctx_t *tls; /* use_tls: the client context (rmq__cli_conn_check) */
    int refused;        /* a broker's ACL refused a request (reported once) */
    /* Called once, on the loop thread, right after the first refusal was reported: the command
     * stops (its exit code is then RMQ_CLI_EXIT_ACL). */
    void (*on_refused)(void *ud);
    void *ud;
} rmq_cli_conn_t;

void rmq__cli_conn_init(rmq_cli_conn_t *cc, const char *cmd, int with_namespace);

/* --set KEY=VALUE. Returns 0, or -1 after saying on stderr what is wrong (the key is not one of
 * this command's options, or its value is not valid for it). */
int rmq__cli_conn_set(rmq_cli_conn_t *cc, const char *kv);

/* After the arguments: the ACL keys and TLS settings go together (rmq__conf_check_security) and
 * the TLS files load. Returns 0, or -1 after saying why on stderr (a usage error, exit 2). */
int rmq__cli_conn_check(rmq_cli_conn_t *cc);

/* Fill the security part of a transport's options: TLS context, ACL keys, the refusal hook.
 * ro->ud becomes cc (the hook's argument): the command uses none of the other ro callbacks. */
void rmq__cli_conn_remoting_opts(rmq_cli_conn_t *cc, rmq_remoting_opts_t *ro);

/* The namespace (NULL when not set). */
const char *rmq__cli_conn_namespace(const rmq_cli_conn_t *cc);

/* The --set lines of a command's --help, their descriptions starting at column col. */
void rmq__cli_conn_usage(const rmq_cli_conn_t *cc, FILE *out, int col);

void rmq__cli_conn_free(rmq_cli_conn_t *cc);

#endif
