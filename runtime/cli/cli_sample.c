/*
 * cli_sample.c -- the sample producer of `rmqlua run --embedded` (cli_sample.h): N messages put
 * straight into the in-process development broker, round robin over the script's subscribed
 * topics, tags TagA / TagB alternately, keys sample-<i>, user properties id = i, region = eu,
 * us or apac in turn and amount = the json body's amount (for SQL92 selectors, examples/sql92.lua),
 * so that each example shows its point without another program.
 *
 * Bodies (--sample-body):
 *   json (default)  {"id":i,"customer":"c1".."c5","amount":0.00..19.99,"note":NOTE}
 *   text            "sample message i", with " (NOTE)" when NOTE is not "ok"
 *   FILE            the lines of FILE (empty ones skipped), one per message, from the first
 *                   again when there are fewer lines than messages
 * NOTE is "poison" for every 100th message, "dlq" for every other 50th, "fail once" for every
 * other 10th and "ok" otherwise: what examples/retry.lua reacts to. About half the amounts are
 * below 10, what examples/json.lua filters out.
 *
 * Ownership: a rmq_sample_t owns the lines read from FILE; the broker and the conf are borrowed
 * and must outlive the producer thread.
 * Threads: rmq__sample_load on the main thread; rmq__sample_main runs on its own thread.
 */
#include "cli_sample.h"

#include "consumer/conf.h"
#include "devbroker/devbroker.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int rmq__sample_load(rmq_sample_t *sp, const char *body, char *errstr, size_t errstr_size)
{
    sp->mode = RMQ_SAMPLE_JSON;
    sp->lines = NULL;
    sp->nlines = 0;
    if (!body || !strcmp(body, "json")) return 0;
    if (!strcmp(body, "text")) {
        sp->mode = RMQ_SAMPLE_TEXT;
        return 0;
    }
    FILE *f = fopen(body, "rb");
    if (!f) {
        rmq__seterr(errstr, errstr_size, "%s: %s", body, strerror(errno));
        return RMQ_ERR_IO;
    }
    rmq_buf_t b;
    rmq__buf_init(&b);
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) rmq__buf_append(&b, chunk, n);
    fclose(f);
    rmq__buf_append(&b, "\n", 1);
    int cap = 0;
    for (size_t i = 0, start = 0; i < b.len; i++) {
        if (b.data[i] != '\n') continue;
        size_t len = i - start;
        if (len && b.data[start + len - 1] == '\r') len--;
        if (len) {
            if (sp->nlines == cap) {
                cap = cap ? cap * 2 : 16;
                sp->lines = realloc(sp->lines, sizeof(*sp->lines) * (size_t)cap);
                if (!sp->lines) abort();
            }
            sp->lines[sp->nlines++] = rmq__xstrndup(b.data + start, len);
        }
        start = i + 1;
    }
    rmq__buf_free(&b);
    if (sp->nlines == 0) {
        free(sp->lines);
        sp->lines = NULL;
        rmq__seterr(errstr, errstr_size, "%s: no line to use as a message body", body);
        return RMQ_ERR_CONFIG;
    }
    sp->mode = RMQ_SAMPLE_FILE;
    return 0;
}

void rmq__sample_free(rmq_sample_t *sp)
{
    for (int i = 0; i < sp->nlines; i++) free(sp->lines[i]);
    free(sp->lines);
    sp->lines = NULL;
    sp->nlines = 0;
}

static const char *note_of(long i)
{
    if (i % 100 == 0) return "poison";
    if (i % 50 == 0) return "dlq";
    if (i % 10 == 0) return "fail once";
    return "ok";
}

/* The body of message i (1-based) into buf; returns its length. */
static size_t body_of(const rmq_sample_t *sp, long i, char *buf, size_t size, const char **out)
{
    int n = 0;
    const char *note = note_of(i);
    switch (sp->mode) {
    case RMQ_SAMPLE_FILE:
        *out = sp->lines[(i - 1) % sp->nlines];
        return strlen(*out);
    case RMQ_SAMPLE_TEXT:
        n = strcmp(note, "ok") ? snprintf(buf, size, "sample message %ld (%s)", i, note)
                               : snprintf(buf, size, "sample message %ld", i);
        break;
    default: {
        long cents = (i * 7919) % 2000;
        n = snprintf(buf, size, "{\"id\":%ld,\"customer\":\"c%ld\",\"amount\":%ld.%02ld,\"note\":\"%s\"}",
                     i, (i - 1) % 5 + 1, cents / 100, cents % 100, note);
        break;
    }
    }
    *out = buf;
    return n > 0 ? (size_t)n : 0;
}

void rmq__sample_main(void *arg)
{
    rmq_sample_t *sp = arg;
    const char *topics[64];
    int nt = 0;
    char buf[256], keys[32], props[96];
    static const char *const regions[] = {"eu", "us", "apac"};
    long sent = 0;
    for (int i = 0; i < sp->conf->n_subs && nt < 64; i++)
        if (strncmp(sp->conf->subs[i].topic, "%RETRY%", 7)) topics[nt++] = sp->conf->subs[i].topic;
    for (long i = 1; nt && i <= sp->n && !atomic_load(&sp->stop); i++) {
        const char *body;
        size_t len = body_of(sp, i, buf, sizeof(buf), &body);
        snprintf(keys, sizeof(keys), "sample-%ld", i);
        long cents = (i * 7919) % 2000; /* the json body's amount */
        int pn = snprintf(props, sizeof(props), "id\001%ld\002region\001%s\002amount\001%ld.%02ld",
                          i, regions[(i - 1) % 3], cents / 100, cents % 100);
        if (rmq_devbroker_produce_props(sp->db, 0, topics[(i - 1) % nt], -1,
                                        (i & 1) ? "TagA" : "TagB", keys, props, (size_t)pn, body,
                                        len) >= 0)
            sent++;
    }
    rmq_log_info("cli", "sample producer: %ld message(s) stored", sent);
    rmq__thread_finishing();
}
