/*
 * test_util.h -- what every C test in spec/c shares: the CHECK macros and their counters, the
 * end-of-run report, the timeout scale, files (whole fixture files, captured frames, the wire
 * capture sessions and their index.json, temporary scripts) and hex. Header only: CMake builds
 * each spec/c/test_*.c as its own executable, so everything here is static (inline), one copy
 * per test. Tests run single-threaded from the repo root.
 *
 * A test that wants to stop after many failures defines TEST_MAX_FAILURES before including.
 */
#ifndef RMQ_TEST_UTIL_H
#define RMQ_TEST_UTIL_H

#include <dirent.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef TEST_MAX_FAILURES
#define TEST_MAX_FAILURES 0 /* no limit */
#endif

#define TEST_WIRE "spec/fixtures/wire"

static int failures, checks;

static inline void test_failed_(const char *file, int line, const char *expr)
{
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, expr);
    failures++;
    if (TEST_MAX_FAILURES && failures > TEST_MAX_FAILURES) exit(1);
}

__attribute__((format(printf, 4, 5))) static inline void
test_failedf_(const char *file, int line, const char *expr, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", file, line, expr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    failures++;
    if (TEST_MAX_FAILURES && failures > TEST_MAX_FAILURES) exit(1);
}

/* CHECK(cond); CHECKF(cond, fmt, ...) adds a message (its arguments are evaluated only on
 * failure). */
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) test_failed_(__FILE__, __LINE__, #cond);                                      \
    } while (0)
#define CHECKF(cond, ...)                                                                          \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) test_failedf_(__FILE__, __LINE__, #cond, __VA_ARGS__);                        \
    } while (0)

/* The end of main: "<name>: N checks passed" and 0, or the failure count on stderr and 1. */
static inline int test_report(const char *name)
{
    if (failures) {
        fprintf(stderr, "%s: %d of %d check(s) failed\n", name, failures, checks);
        return 1;
    }
    printf("%s: %d checks passed\n", name, checks);
    return 0;
}

/* RMQ_TEST_TIMEOUT_SCALE (default 1): the multiplier for every wait. */
static inline double test_scale(void)
{
    const char *s = getenv("RMQ_TEST_TIMEOUT_SCALE");
    return s && atof(s) > 0 ? atof(s) : 1.0;
}

/* ---- files ----------------------------------------------------------------------------------- */

/* A whole file, NUL-terminated (*len excludes the NUL); NULL if it cannot be read. */
static inline char *test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    *len = (size_t)n;
    return buf;
}

/* A fixture the test cannot run without: exits 2 naming it when it cannot be read. */
static inline char *test_fixture(const char *path, size_t *len)
{
    char *buf = test_read_file(path, len);
    if (!buf) {
        fprintf(stderr, "cannot read %s (run from the repo root)\n", path);
        exit(2);
    }
    return buf;
}

/* A captured frame spec/fixtures/wire/<session>/<file> ([4 L][4 type<<24|H][header H][body]);
 * *body_off is where its body starts. */
static inline char *test_wire_frame(const char *session, const char *file, size_t *len,
                                    size_t *body_off)
{
    char path[600];
    char *raw;
    const unsigned char *u;
    snprintf(path, sizeof(path), TEST_WIRE "/%.255s/%.255s", session, file);
    raw = test_fixture(path, len);
    u = (const unsigned char *)raw;
    *body_off = 8 + ((size_t)u[5] << 16 | (size_t)u[6] << 8 | u[7]);
    return raw;
}

static inline int test_cmp_names(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* The capture sessions under spec/fixtures/wire (directories named NN_...), sorted; CHECKs that
 * the directory opens. Returns how many (at most max). */
static inline int test_wire_sessions(char (*names)[256], int max)
{
    DIR *d = opendir(TEST_WIRE);
    struct dirent *e;
    int n = 0;
    CHECKF(d != NULL, "cannot open %s (run from the repo root)", TEST_WIRE);
    if (!d) return 0;
    while ((e = readdir(d)) && n < max)
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9') snprintf(names[n++], 256, "%s", e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof(*names), test_cmp_names);
    return n;
}

/* The JSON file at path, or NULL after a failed CHECK naming the file and what is wrong. */
static inline json_t *test_load_json(const char *path)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CHECKF(root != NULL, "%s: %s", path, je.text);
    return root;
}

/* spec/fixtures/wire/<session>/index.json (decoded headers and messages of the capture), or NULL
 * after a failed CHECK naming the file. */
static inline json_t *test_wire_index(const char *session)
{
    char path[600];
    snprintf(path, sizeof(path), TEST_WIRE "/%.255s/index.json", session);
    return test_load_json(path);
}

/* Writes text to /tmp/rmq_<test>_<pid>_<name>.lua; returns the path (free it). */
static inline char *test_write_script(const char *test, const char *name, const char *text)
{
    char path[256];
    FILE *f;
    snprintf(path, sizeof(path), "/tmp/rmq_%s_%d_%s.lua", test, (int)getpid(), name);
    f = fopen(path, "w");
    if (!f) abort();
    fputs(text, f);
    fclose(f);
    return strdup(path);
}

/* A file written by test_write_script: removed, its path freed. */
static inline void test_drop_script(char *path)
{
    unlink(path);
    free(path);
}

/* ---- hex ------------------------------------------------------------------------------------- */

/* Hex digits (pairs, no separators) into out (room for strlen(hex)/2); returns the byte count. */
static inline size_t test_unhex(const char *hex, char *out)
{
    size_t n = 0;
    for (; hex[0] && hex[1]; hex += 2) {
        unsigned v;
        sscanf(hex, "%2x", &v);
        out[n++] = (char)v;
    }
    return n;
}

/* The same into a fresh buffer (free it). */
static inline char *test_unhex_alloc(const char *hex, size_t *len)
{
    char *out = malloc(strlen(hex) / 2 + 1);
    *len = test_unhex(hex, out);
    return out;
}

#endif
