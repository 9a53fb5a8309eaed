/*
 * test_log.c -- log.c: JSON lines that a strict parser (jansson) accepts whatever the message
 * holds (invalid UTF-8, control bytes), key fields, the order of lines from several threads
 * through the writer, the file reopened on request while lines keep coming, the summaries of
 * repeated errors (what is alike and what is not), and lines written at once after the writer
 * stopped.
 */
#include "base/log.h"

#include "test_util.h"

#include <pthread.h>
#include <sys/stat.h>

static char dir[256];

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t r = fread(s, 1, (size_t)n, f);
    s[r] = '\0';
    fclose(f);
    return s;
}

/* Every line of path as a JSON object (NULL-terminated array), or NULL if one is not. */
static json_t **json_lines(const char *path, int *count)
{
    char *s = slurp(path);
    json_t **out = calloc(strlen(s) + 2, sizeof(json_t *));
    int n = 0;
    for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
        json_error_t e;
        json_t *j = json_loads(line, 0, &e);
        CHECKF(j && json_is_object(j), "not a JSON object (%s): %s", e.text, line);
        if (!j) continue;
        out[n++] = j;
    }
    free(s);
    *count = n;
    return out;
}

static void free_lines(json_t **l, int n)
{
    for (int i = 0; i < n; i++) json_decref(l[i]);
    free(l);
}

/* The log started in format (RMQ_LOG_TEXT or RMQ_LOG_JSON) on the file name in dir, whose path
 * goes into path. */
static void start_log(char *path, size_t size, const char *name, int format)
{
    snprintf(path, size, "%s/%s", dir, name);
    rmq_log_opts_t o = {.format = format, .file = path};
    char err[256];
    CHECK(rmq__log_start(&o, err, sizeof(err)) == 0);
}

static void test_json_lines(void)
{
    char path[300];
    start_log(path, sizeof(path), "json.log", RMQ_LOG_JSON);
    rmq_log_field_t f[3] = {{"msg_id", "ABC\xff", 0}, {"queue", NULL, 3}, {"offset", NULL, 1LL << 40}};
    rmq__logf(RMQ_LOG_ERROR, "lua", f, 3, "bad \xc3\x28 utf8, quote \" backslash \\ tab\t nl\n ctl \x01 ok \xe2\x82\xac");
    rmq_log_info("client", "plain %d", 42);
    rmq__log_stop();
    int n;
    json_t **l = json_lines(path, &n);
    CHECKF(n == 2, "%d lines", n);
    if (n == 2) {
        CHECK(!strcmp(json_string_value(json_object_get(l[0], "level")), "error"));
        CHECK(!strcmp(json_string_value(json_object_get(l[0], "category")), "lua"));
        const char *m = json_string_value(json_object_get(l[0], "message"));
        CHECKF(m && !strcmp(m, "bad \xef\xbf\xbd( utf8, quote \" backslash \\ tab\t nl\n ctl \x01 ok "
                               "\xe2\x82\xac"),
               "message %s", m ? m : "(none)");
        CHECK(!strcmp(json_string_value(json_object_get(l[0], "msg_id")), "ABC\xef\xbf\xbd"));
        CHECK(json_integer_value(json_object_get(l[0], "queue")) == 3);
        CHECK(json_integer_value(json_object_get(l[0], "offset")) == (1LL << 40));
        const char *t = json_string_value(json_object_get(l[0], "time"));
        CHECKF(t && strlen(t) == 29 && t[10] == 'T' && t[19] == '.' && (t[23] == '+' || t[23] == '-'),
               "time %s", t ? t : "(none)");
        CHECK(!strcmp(json_string_value(json_object_get(l[1], "message")), "plain 42"));
        CHECK(!strcmp(json_string_value(json_object_get(l[1], "level")), "info"));
    }
    free_lines(l, n);
    rmq__log_set_format(RMQ_LOG_TEXT);
}

typedef struct {
    int id;
} th_arg_t;

static void *logger(void *p)
{
    th_arg_t *a = p;
    for (int i = 0; i < 2000; i++) rmq_log_info("t", "thread %d line %d", a->id, i);
    return NULL;
}

static void test_order_and_reopen(void)
{
    char path[300], moved[320];
    start_log(path, sizeof(path), "order.log", RMQ_LOG_TEXT);
    snprintf(moved, sizeof(moved), "%s.1", path);
    pthread_t th[4];
    th_arg_t args[4];
    for (int i = 0; i < 4; i++) {
        args[i].id = i;
        pthread_create(&th[i], NULL, logger, &args[i]);
    }
    /* Moved away and reopened while the threads log: no line is lost, each file in order. */
    usleep(2000);
    CHECK(rename(path, moved) == 0);
    rmq__log_reopen();
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    rmq_log_info("t", "after the threads");
    rmq__log_stop();
    rmq_log_info("t", "after the writer stopped");

    char *a = slurp(moved), *b = slurp(path);
    int next[4] = {0, 0, 0, 0}, total = 0, reopened = 0;
    for (int k = 0; k < 2; k++) {
        char *s = k ? b : a;
        for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
            int t, i;
            const char *p = strstr(line, "] ");
            if (strstr(line, "[log] log file ") && strstr(line, " reopened")) {
                CHECKF(k == 1, "the reopen line is in the old file");
                reopened++;
                continue;
            }
            if (p && sscanf(p + 2, "thread %d line %d", &t, &i) == 2 && t >= 0 && t < 4) {
                CHECKF(i == next[t], "thread %d: line %d after %d", t, i, next[t] - 1);
                next[t] = i + 1;
                total++;
            }
        }
    }
    CHECKF(total == 8000, "%d lines of 8000", total);
    CHECK(reopened == 1);
    free(a);
    free(b);
    b = slurp(path);
    CHECK(strstr(b, "after the threads") != NULL);
    CHECK(strstr(b, "after the writer stopped") != NULL);
    free(b);
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

static void test_repeats(void)
{
    char path[300];
    start_log(path, sizeof(path), "repeat.log", RMQ_LOG_JSON);
    char text[256];
    for (int i = 0; i < 1200; i++) { /* ids and numbers differ: alike */
        snprintf(text, sizeof(text),
                 "thread %d: consume failed for 1 message(s) [ID%04d]: x.lua:7: bad amount %d\n"
                 "stack traceback:\n\tx.lua:7: in function",
                 i % 3 + 1, i, i * 7);
        rmq__log_repeated(RMQ_LOG_ERROR, "lua", NULL, 0, text);
    }
    for (int i = 0; i < 3; i++) /* another line of the script: another kind of error */
        rmq__log_repeated(RMQ_LOG_ERROR, "lua", NULL, 0,
                          "thread 1: consume failed for 1 message(s) [X]: x.lua:8: bad amount 1");
    rmq__log_stop();
    int n;
    json_t **l = json_lines(path, &n);
    int full7 = 0, full8 = 0, summaries = 0;
    for (int i = 0; i < n; i++) {
        const char *m = json_string_value(json_object_get(l[i], "message"));
        json_t *rep = json_object_get(l[i], "repeated");
        if (rep) {
            summaries++;
            CHECK(json_integer_value(rep) == 1195);
            CHECKF(strstr(m, "\xe2\x80\xa6 and 1,195 more like it in the last ") == m, "%s", m);
            CHECK(strstr(json_string_value(json_object_get(l[i], "like")), "x.lua:7: bad amount 0"));
        } else if (strstr(m, "x.lua:7:")) {
            full7++;
        } else if (strstr(m, "x.lua:8:")) {
            full8++;
        }
    }
    CHECKF(full7 == 5 && full8 == 3 && summaries == 1, "full %d + %d, %d summaries", full7, full8,
           summaries);
    free_lines(l, n);
    char *s = slurp(path);
    CHECK(count(s, "stack traceback") == 5);
    free(s);
    rmq__log_set_format(RMQ_LOG_TEXT);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/test_log.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_json_lines();
    test_order_and_reopen();
    test_repeats();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd)) {
    }
    return test_report("test_log");
}
