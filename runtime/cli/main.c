/*
 * main.c -- the rmqlua executable: picks a subcommand.
 *
 * Ownership: none. Threads: the main thread.
 */
#include "cli.h"
#include "base/common.h"
#include "luahost/lua_state.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: rmqlua COMMAND [ARGS]\n"
            "\n"
            "RocketMQ consumers written in Lua, run natively.\n"
            "\n"
            "commands:\n"
            "  run SCRIPT      consume with the hooks of a Lua script\n"
            "  check SCRIPT    load and validate a script without a broker\n"
            "  test SCRIPT CASES  run a script's handler over offline test cases\n"
            "  send            produce messages (route lookup, SEND_MESSAGE_V2)\n"
            "  tail TOPIC      print a topic's messages without a consumer group\n"
            "  redrive         move dead letters (%%DLQ%%group) back for another try\n"
            "  broker          run the development name server and broker\n"
            "  init DIR        write a new consumer: script, test cases, systemd env, README\n"
            "  version         print the version\n"
            "\n"
            "'rmqlua COMMAND --help' tells more about each command.\n"
            "exit codes: 0 success, 1 runtime failure, 2 usage or configuration error\n");
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : NULL;
    if (!cmd || !strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(cmd ? stdout : stderr);
        return cmd ? 0 : 2;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("rmqlua %s (RocketMQ remoting protocol, client version V4_9_4)\n"
               "Lua modules: %s\n",
               RMQLUA_VERSION, rmq__lua_dir());
        return 0;
    }
    if (!strcmp(cmd, "run")) return rmq__cli_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "check")) return rmq__cli_check(argc - 1, argv + 1);
    if (!strcmp(cmd, "test")) return rmq__cli_test(argc - 1, argv + 1);
    if (!strcmp(cmd, "broker")) return rmq__cli_broker(argc - 1, argv + 1);
    if (!strcmp(cmd, "send")) return rmq__cli_send(argc - 1, argv + 1);
    if (!strcmp(cmd, "tail")) return rmq__cli_tail(argc - 1, argv + 1);
    if (!strcmp(cmd, "redrive")) return rmq__cli_redrive(argc - 1, argv + 1);
    if (!strcmp(cmd, "init")) return rmq__cli_init(argc - 1, argv + 1);
    fprintf(stderr, "rmqlua: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
