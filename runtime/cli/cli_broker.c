/*
 * cli_broker.c -- rmqlua broker: the development broker (devbroker.h) in the foreground.
 *
 * Threads: the main thread waits for SIGINT/SIGTERM (blocked before the broker thread starts,
 * so only sigwait sees them); the broker runs on its own thread.
 */
#include "cli.h"
#include "devbroker/devbroker.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

int rmq__cli_broker(int argc, char **argv)
{
    rmq_devbroker_opts_t o;
    char err[512];
    int rc = rmq__devbroker_parse_args(argc - 1, argv + 1, &o, err, sizeof(err));
    if (rc == 1) {
        fputs(rmq__devbroker_usage(), stdout);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "rmqlua broker: %s\n", err);
        return 2;
    }
    if (!o.listen) o.listen = RMQ_DEVBROKER_LISTEN_DEFAULT;
    if (o.log_level >= 0) rmq_log_set_level(o.log_level);
    if (o.log_debug && rmq_log_set_debug(o.log_debug, err, sizeof(err)) < 0) {
        fprintf(stderr, "rmqlua broker: --log-debug: %s\n", err);
        free((void *)o.topics);
        return 2;
    }

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    rmq_devbroker_t *db = NULL;
    rc = rmq__devbroker_start(&o, &db, err, sizeof(err));
    free((void *)o.topics);
    if (rc) {
        fprintf(stderr, "rmqlua broker: %s\n", err);
        return rc == RMQ_ERR_CONFIG ? 2 : 1;
    }
    for (int i = 0; i < rmq_devbroker_broker_count(db); i++)
        printf("rmqlua broker: broker %s at %s\n", rmq_devbroker_broker_name(db, i),
               rmq_devbroker_broker_addr(db, i));
    printf("rmqlua broker: name server at %s\n", rmq_devbroker_addr(db));
    fflush(stdout);

    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "rmqlua broker: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rmq_devbroker_stop(db);
    return 0;
}
