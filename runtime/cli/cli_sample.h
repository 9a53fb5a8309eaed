/*
 * cli_sample.h -- the sample producer of `rmqlua run --embedded --sample-messages N
 * [--sample-body json|text|FILE]` (cli_sample.c says what the bodies look like).
 *
 * Ownership: rmq_sample_t owns the body lines read from FILE (rmq__sample_free); db and conf are
 * borrowed. Threads: load and free on the main thread, rmq__sample_main on the producer thread;
 * `stop` may be set from any thread.
 */
#ifndef RMQ_CLI_SAMPLE_H
#define RMQ_CLI_SAMPLE_H

#include "base/common.h"

#include <stdatomic.h>

typedef struct rmq_devbroker rmq_devbroker_t;
typedef struct rmq_conf rmq_conf_t;

enum { RMQ_SAMPLE_JSON = 0, RMQ_SAMPLE_TEXT, RMQ_SAMPLE_FILE };

typedef struct rmq_sample {
    rmq_devbroker_t *db;
    const rmq_conf_t *conf; /* the subscribed topics */
    long n;                 /* messages to store */
    atomic_int stop; /* any thread */
    int mode; /* RMQ_SAMPLE_* */
    char **lines;
    int nlines;
} rmq_sample_t;

/* Choose the bodies: "json" (or NULL), "text", or a file whose lines are the bodies. Returns 0,
 * or RMQ_ERR_IO / RMQ_ERR_CONFIG with errstr "FILE: reason". Sets mode and lines only. */
int rmq__sample_load(rmq_sample_t *sp, const char *body, char *errstr, size_t errstr_size);
void rmq__sample_free(rmq_sample_t *sp);
/* Thread body: store sp->n messages (until sp->stop), then log how many were stored. */
void rmq__sample_main(void *arg);

#endif
