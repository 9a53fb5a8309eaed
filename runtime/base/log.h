/*
 * log.h -- where log lines go. common.h declares what every file calls (rmq__log and the
 * rmq_log_* / rmq_dbg macros); this header is for the few places that configure the output, add
 * key fields, draw the status line or summarise repeated errors.
 *
 * Formats: text, "2024-05-01 12:00:00.123 INFO  [client] message" (local time), or JSON, one
 * object per line: {"time":"2024-05-01T12:00:00.123+02:00","level":"info","category":"client",
 * "message":"...", then the line's key fields ("msg_id", "topic", "broker", "queue", "offset",
 * "thread", ...)}. Bytes that are not UTF-8 become U+FFFD, so every line parses.
 *
 * Until rmq__log_start() each line is written at once by the thread that logs it (one write per
 * line; `check`, `test`, `send`, `broker`, programs embedding the library). After it, a writer
 * thread owns the output: a logging thread formats its line, appends it to a queue and returns.
 * The queue is bounded (RMQ_LOG_QUEUE_MAX bytes): past that, lines are dropped and counted, and
 * the count is logged once the writer caught up, so the loop thread never waits for a terminal,
 * a pipe or a disk. The writer keeps the queue's order, reopens the log file when asked
 * (rmq__log_reopen, from SIGUSR1), and on a terminal draws the live status line: it clears it
 * before writing any other line and draws it again after, so no line is ever glued to it. When
 * stdout is that terminal too, the process's stdout (a script's print and io.write) is relayed
 * through the writer for the same reason. rmq__log_stop() writes everything still queued.
 *
 * Repeated errors: rmq__log_repeated() writes an error in full the first RMQ_LOG_REPEAT_FULL
 * times in each RMQ_LOG_REPEAT_WINDOW_MS window for errors that are alike, counts the others, and
 * writes one summary when the window ends (or at rmq__log_stop):
 *   "… and 2,341 more like it in the last 10 s: <the first line of the first one>"
 * Errors are alike when their first lines are equal once the text in brackets (message ids) and
 * the numbers are taken out; line numbers after ".lua:" are kept, so two places in a script
 * are two kinds of error.
 *
 * Ownership: the log configuration and the writer are process-wide (one log per process).
 * Threads: rmq__log_start() and rmq__log_stop() on the main thread, start before and stop after
 * the threads that log (lines logged outside that span are written at once). Everything else:
 * any thread. rmq__log_reopen() is also async-signal-safe.
 */
#ifndef RMQ_LOG_H
#define RMQ_LOG_H

#include "common.h"
#include "rmqlua_ffi.h"

typedef enum { RMQ_LOG_TEXT = 0, RMQ_LOG_JSON = 1 } rmq_log_format_t;

#define RMQ_LOG_QUEUE_MAX (8u << 20) /* bytes of formatted lines waiting for the writer */
#define RMQ_LOG_REPEAT_FULL 5        /* errors alike written in full per window */
#define RMQ_LOG_REPEAT_WINDOW_MS 10000

/* A key field of a JSON line: a string when str is not NULL, else the integer num. Text lines
 * do not show fields (the message says what matters). */
typedef struct rmq_log_field {
    const char *key;
    const char *str;
    int64_t num;
} rmq_log_field_t;

typedef struct rmq_log_opts {
    int format;       /* RMQ_LOG_TEXT or RMQ_LOG_JSON */
    const char *file; /* append to this file (created 0644) instead of stderr; NULL = stderr */
    int status_tty;   /* stderr is a terminal showing the live status line */
    int relay_stdout; /* with status_tty: stdout is that terminal too, relay it */
} rmq_log_opts_t;

/*
 * Open the file (if any) and start the writer thread. Returns 0, or RMQ_ERR_IO with errstr
 * naming the file and the reason (nothing started). Calling it twice is RMQ_ERR_STATE.
 */
int rmq__log_start(const rmq_log_opts_t *o, char *errstr, size_t errstr_size);
/* Write every queued line and pending summary, put stdout back, stop the writer. Lines logged
 * afterwards are written at once to the same place (the file stays open). Idempotent. */
void rmq__log_stop(void);
/* Ask the writer to reopen the log file (logrotate's SIGUSR1). Async-signal-safe; no-op without
 * a file or a writer. */
void rmq__log_reopen(void);

/* Set the format without a writer (lines written at once). */
void rmq__log_set_format(int format);

/* rmq__log with key fields. */
void rmq__logf(int level, const char *cat, const rmq_log_field_t *fields, int nfields,
               const char *fmt, ...) RMQ_PRINTF(5, 6);

/* An error that may repeat (see above): text is the whole message; key fields as rmq__logf. */
void rmq__log_repeated(int level, const char *cat, const rmq_log_field_t *fields, int nfields,
                       const char *text);

/*
 * The live status line (status_tty only; otherwise ignored): line replaces the one shown, NULL
 * takes it away. rmq__log_status_end() takes it away and writes final_line (plus a newline) in
 * its place on the terminal, after every line queued before it.
 */
void rmq__log_status(const char *line);
void rmq__log_status_end(const char *final_line);

/* Write the summaries of repeated errors now, whatever their windows (tests; rmq__log_stop). */
void rmq__log_flush_repeats(void);

#endif
