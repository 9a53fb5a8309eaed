/*
 * cli.h -- the subcommands of the rmqlua executable. Each returns the process exit code:
 * 0 success, 1 runtime failure, 2 usage or configuration error (before any connection).
 *
 * Threads: called on the main thread only.
 */
#ifndef RMQ_CLI_H
#define RMQ_CLI_H

int rmq__cli_run(int argc, char **argv);    /* cli_lua.c: rmqlua run SCRIPT */
int rmq__cli_check(int argc, char **argv);  /* cli_lua.c: rmqlua check SCRIPT */
int rmq__cli_test(int argc, char **argv);   /* cli_lua.c: rmqlua test SCRIPT CASES */
int rmq__cli_broker(int argc, char **argv); /* cli_broker.c: rmqlua broker */
int rmq__cli_send(int argc, char **argv);   /* cli_send.c: rmqlua send */
int rmq__cli_tail(int argc, char **argv);   /* cli_tail.c: rmqlua tail TOPIC */
int rmq__cli_redrive(int argc, char **argv); /* cli_redrive.c: rmqlua redrive --group G */
int rmq__cli_init(int argc, char **argv);    /* cli_init.c: rmqlua init DIR */

#endif
