/*
 * cli_init.c -- rmqlua init DIR: writes the start of a new consumer (its script, the script's
 * offline test cases, a systemd environment file and a README) into DIR, never over a file
 * that is already there.
 *
 * Ownership: none beyond the call. Threads: the main thread.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define INIT_NAME_MAX 127 /* the longest topic name a broker accepts */

static const char init_usage[] =
    "usage: rmqlua init [--group G] [--topic T] DIR\n"
    "\n"
    "Write the start of a new consumer into DIR (made if missing), named after DIR's last\n"
    "component NAME:\n"
    "  NAME.lua         the consumer script: subscribes to T, prints each message, acknowledges\n"
    "                   a batch up to its first empty body\n"
    "  NAME_cases.lua   its offline test cases (rmqlua test NAME.lua NAME_cases.lua)\n"
    "  NAME.env         the environment of the systemd unit rmqlua@NAME (/etc/rmqlua/NAME.env)\n"
    "  README.md        how to check, test, run and install it\n"
    "Nothing is overwritten: if any of these files exists, nothing is written.\n"
    "\n"
    "options:\n"
    "  --group G           consumer group (default: NAME_group)\n"
    "  --topic T           topic subscribed to (default: TopicTest)\n"
    "  -h, --help          this text\n"
    "\n"
    "Group and topic names take letters, digits, '_', '-', '%' and '|' (RocketMQ's rule),\n"
    "up to 127 characters.\n"
    "exit codes: 0 written, 1 a file could not be written, 2 usage error or a file exists\n";

/* RocketMQ's rule for topic and group names (Validators.PATTERN): [%|a-zA-Z0-9_-]+. */
static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > INIT_NAME_MAX) return 0;
    for (; *s; s++)
        if (!strchr("%|_-", *s) && !(*s >= 'a' && *s <= 'z') && !(*s >= 'A' && *s <= 'Z') &&
            !(*s >= '0' && *s <= '9'))
            return 0;
    return 1;
}

static const char script_fmt[] =
    "-- %1$s.lua: consumes topic %3$s for group %2$s (written by `rmqlua init`).\n"
    "--\n"
    "--   rmqlua check %1$s.lua                    validate it without a broker\n"
    "--   rmqlua test %1$s.lua %1$s_cases.lua       its offline test cases\n"
    "--   rmqlua run --embedded %1$s.lua           consume sample messages from the in-process\n"
    "--                                           development broker\n"
    "--   rmqlua run --namesrv 127.0.0.1:9876 %1$s.lua\n"
    "--\n"
    "-- consume(msgs, ctx) gets a batch; each message is a view valid only while consume runs.\n"
    "-- Returning nothing acknowledges the batch; ctx.ack_index = n acknowledges the first n\n"
    "-- (the rest come back later); error(...) or rmq.RECONSUME_LATER retries the whole batch.\n"
    "local rmq = require \"rmq\"\n"
    "\n"
    "return {\n"
    "  consumer_group = \"%2$s\",\n"
    "  subscribe = { [\"%3$s\"] = \"*\" },\n"
    "  consume_from_where = \"CONSUME_FROM_FIRST_OFFSET\",\n"
    "\n"
    "  consume = function(msgs, ctx)\n"
    "    for i = 1, #msgs do\n"
    "      local m = msgs[i]\n"
    "      local body = m.body\n"
    "      if body == \"\" then\n"
    "        -- Nothing to handle: acknowledge the messages before this one; this one and the\n"
    "        -- rest come back later (and go to the DLQ after max_reconsume_times).\n"
    "        rmq.log(\"warn\", \"empty body in\", m.msg_id)\n"
    "        ctx.ack_index = i - 1\n"
    "        return\n"
    "      end\n"
    "      -- One write per line: the consume threads share stdout.\n"
    "      -- queue_offset is an int64 cdata: %%d prints it whole.\n"
    "      io.write(string.format(\"%%s %%s#%%d@%%d keys=%%s body=%%s\\n\", m.msg_id, m.topic,\n"
    "        m.queue_id, m.queue_offset, tostring(m.keys), body))\n"
    "    end\n"
    "  end,\n"
    "}\n";

static const char cases_fmt[] =
    "-- rmqlua test %1$s.lua %1$s_cases.lua: the handler of %1$s.lua over messages made here,\n"
    "-- without a broker (fields: lua/rmq/testrun.lua).\n"
    "return {\n"
    "  { name = \"acknowledges a batch\",\n"
    "    messages = { { topic = \"%2$s\", keys = \"k1\", body = \"hello\" },\n"
    "                 { topic = \"%2$s\", body = \"world\" } },\n"
    "    expect = { status = \"SUCCESS\", ack_index = 2, error = false } },\n"
    "  { name = \"acknowledges up to an empty body\",\n"
    "    messages = { { topic = \"%2$s\", body = \"one\" }, { topic = \"%2$s\", body = \"\" },\n"
    "                 { topic = \"%2$s\", body = \"three\" } },\n"
    "    expect = { status = \"SUCCESS\", ack_index = 1, error = false } },\n"
    "}\n";

static const char env_fmt[] =
    "# %1$s.env: the environment of the systemd unit rmqlua@%1$s (installed as\n"
    "# /etc/rmqlua/%1$s.env beside /etc/rmqlua/%1$s.lua). RMQLUA_ARGS are flags of `rmqlua run`.\n"
    "NAMESRV_ADDR=127.0.0.1:9876\n"
    "RMQLUA_ARGS=--log-format json\n";

static const char readme_fmt[] =
    "# %1$s\n"
    "\n"
    "A RocketMQ consumer run by rmqlua: group `%2$s`, topic `%3$s`.\n"
    "\n"
    "| file | what |\n"
    "|---|---|\n"
    "| `%1$s.lua` | the consumer script (options, subscription, `consume` hook) |\n"
    "| `%1$s_cases.lua` | its offline test cases |\n"
    "| `%1$s.env` | the environment of the systemd unit `rmqlua@%1$s` |\n"
    "\n"
    "```sh\n"
    "rmqlua check %1$s.lua                      # validate without a broker\n"
    "rmqlua test %1$s.lua %1$s_cases.lua         # run the test cases\n"
    "rmqlua run --embedded %1$s.lua             # consume sample messages, in-process broker\n"
    "rmqlua run --namesrv 127.0.0.1:9876 %1$s.lua\n"
    "```\n"
    "\n"
    "Installed as a service (the unit `rmqlua@.service` comes with rmqlua):\n"
    "\n"
    "```sh\n"
    "sudo install -D -m 644 %1$s.lua /etc/rmqlua/%1$s.lua\n"
    "sudo install -D -m 644 %1$s.env /etc/rmqlua/%1$s.env\n"
    "sudo systemctl enable --now rmqlua@%1$s\n"
    "journalctl -u rmqlua@%1$s -f\n"
    "```\n"
    "\n"
    "`man rmqlua-run` lists the flags of `rmqlua run`; the options a script may set are in\n"
    "rmqlua's README (option reference).\n";

/* Write text to path, refusing an existing file (O_EXCL). Returns 0, or -1 after saying why
 * on stderr. */
static int write_new(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "rmqlua init: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            fprintf(stderr, "rmqlua init: %s: %s\n", path, w < 0 ? strerror(errno) : "short write");
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    if (close(fd) < 0) {
        fprintf(stderr, "rmqlua init: %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

int rmq__cli_init(int argc, char **argv)
{
    const char *dir = NULL, *group = NULL, *topic = "TopicTest";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(init_usage, stdout);
            return 0;
        }
        if (!strcmp(a, "--group") || !strcmp(a, "--topic")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "rmqlua init: %s needs a value\n\n%s", a, init_usage);
                return 2;
            }
            const char *v = argv[++i];
            if (!valid_name(v)) {
                fprintf(stderr,
                        "rmqlua init: %s '%s': a name is 1 to %d of the characters a-z A-Z 0-9 "
                        "_ - %% |\n",
                        a, v, INIT_NAME_MAX);
                return 2;
            }
            if (!strcmp(a, "--group")) group = v;
            else topic = v;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "rmqlua init: unknown option %s\n\n%s", a, init_usage);
            return 2;
        } else if (dir) {
            fprintf(stderr, "rmqlua init: one DIR only ('%s' and '%s')\n\n%s", dir, a, init_usage);
            return 2;
        } else {
            dir = a;
        }
    }
    if (!dir) {
        fprintf(stderr, "rmqlua init: DIR is missing\n\n%s", init_usage);
        return 2;
    }

    /* NAME: DIR's last component, trailing slashes dropped. */
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/') dl--;
    size_t ds = dl;
    while (ds > 0 && dir[ds - 1] != '/') ds--;
    char name[INIT_NAME_MAX + 1];
    size_t nl = dl - ds;
    if (nl > INIT_NAME_MAX - 6) nl = INIT_NAME_MAX - 6;
    memcpy(name, dir + ds, nl);
    name[nl] = 0;
    if (!valid_name(name) || !strcmp(name, ".") || !strcmp(name, "..")) {
        fprintf(stderr,
                "rmqlua init: DIR '%s': its last component names the consumer and its files, so "
                "it takes only the characters a-z A-Z 0-9 _ - %% |\n",
                dir);
        return 2;
    }
    char defgroup[INIT_NAME_MAX + 8]; /* NAME is cut to leave room for "_group" */
    if (!group) {
        snprintf(defgroup, sizeof(defgroup), "%s_group", name);
        group = defgroup;
    }

    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "rmqlua init: cannot make %s: %s\n", dir, strerror(errno));
        return 1;
    }
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "rmqlua init: %s is not a directory\n", dir);
        return 2;
    }

    enum { NFILES = 4 };
    const char *suffix[NFILES] = {".lua", "_cases.lua", ".env", NULL};
    char path[NFILES][4096], *text[NFILES] = {0};
    int rc = 0;
    for (int f = 0; f < NFILES; f++) {
        int n = suffix[f] ? snprintf(path[f], sizeof(path[f]), "%.*s/%s%s", (int)dl, dir, name,
                                     suffix[f])
                          : snprintf(path[f], sizeof(path[f]), "%.*s/README.md", (int)dl, dir);
        if (n < 0 || (size_t)n >= sizeof(path[f])) {
            fprintf(stderr, "rmqlua init: DIR '%s' is too long\n", dir);
            return 2;
        }
        if (lstat(path[f], &st) == 0) {
            fprintf(stderr, "rmqlua init: %s exists; nothing written (init never overwrites)\n",
                    path[f]);
            rc = 2;
        }
    }
    if (rc) return rc;

    const char *fmt[NFILES] = {script_fmt, cases_fmt, env_fmt, readme_fmt};
    for (int f = 0; f < NFILES && !rc; f++) {
        int n = f == 1 ? asprintf(&text[f], fmt[f], name, topic)
                       : asprintf(&text[f], fmt[f], name, group, topic);
        if (n < 0) {
            text[f] = NULL;
            fprintf(stderr, "rmqlua init: out of memory\n");
            rc = 1;
        }
    }
    /* All or nothing: a file that cannot be written takes back the ones written before it. */
    int written = 0;
    for (; written < NFILES && !rc; written++) {
        if (write_new(path[written], text[written]) < 0) rc = 1;
    }
    for (int f = 0; f < written; f++) {
        if (rc && f < written - 1) unlink(path[f]);
        else if (!rc) printf("wrote %s\n", path[f]);
    }
    if (rc) fprintf(stderr, "rmqlua init: nothing written\n");
    for (int f = 0; f < NFILES; f++) free(text[f]);
    if (!rc)
        printf("next: cd %.*s && rmqlua check %s.lua && rmqlua test %s.lua %s_cases.lua\n",
               (int)dl, dir, name, name, name);
    return rc;
}
