/*
 * cli_lua.c -- rmqlua run / check / test.
 *
 * Threads: the main thread.
 */
#include "cli.h"

#include <stdio.h>

int rmq__cli_run(int argc, char **argv)
{
    fprintf(stderr, "rmqlua run: not available in this build yet\n");
    return 2;
}

int rmq__cli_check(int argc, char **argv)
{
    fprintf(stderr, "rmqlua check: not available in this build yet\n");
    return 2;
}

int rmq__cli_test(int argc, char **argv)
{
    fprintf(stderr, "rmqlua test: not available in this build yet\n");
    return 2;
}
