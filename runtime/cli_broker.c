/*
 * cli_broker.c -- rmqlua broker / send.
 *
 * Threads: the main thread.
 */
#include "cli.h"

#include <stdio.h>

int rmq__cli_broker(int argc, char **argv)
{
    fprintf(stderr, "rmqlua broker: not available in this build yet\n");
    return 2;
}
