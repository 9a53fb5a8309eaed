/*
 * log.c -- formatting log lines (text or JSON), the writer thread that owns the log output, the
 * live status line on a terminal, the stdout relay, and the summaries of repeated errors
 * (log.h).
 *
 * Ownership: process-wide state. The format and the log file descriptor are set by
 * rmq__log_start / rmq__log_set_format on the main thread before other threads log. The queue,
 * the status text and the flags are guarded by `mu`; the table of repeated errors by `rep_mu`.
 * While the writer runs, it alone writes to the log descriptor, the terminal and the relayed
 * stdout, and it alone reopens the file.
 * Threads: any thread logs; the writer thread is started and joined by the main thread.
 */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* ---- configuration and queue ------------------------------------------------------------- */

enum { IT_LOG = 0, IT_TTY = 1 };

typedef struct item {
    struct item *next;
    int kind; /* IT_LOG: to the log descriptor; IT_TTY: to the terminal (stderr) as it is */
    size_t len;
    char data[];
} item_t;

static int g_format = RMQ_LOG_TEXT;
static int g_fd = 2;       /* log lines go here */
static char *g_path;       /* the log file, reopened on request */
static int g_status_tty;   /* stderr is a terminal with a live status line */
static int g_log_on_term;  /* log lines go to that terminal (no file) */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int running;         /* the writer takes lines (written under mu, atomically) */
static int stopping;        /* rmq__log_stop called (under mu) */
static item_t *q_head, *q_tail;
static size_t q_bytes;
static int64_t q_dropped;
static char status_text[1024];
static int status_set, status_gen;

static pthread_t writer;
static int started;
static int wake_r = -1, wake_w = -1;
static int wake_pending;             /* atomic: a wake-up byte is in the pipe */
static atomic_int reopen_req;        /* set by a signal handler on any thread, taken by the writer */
static int relay_r = -1, real_out = -1; /* the stdout relay: pipe read end, the terminal */

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) {
                struct pollfd pfd = {.fd = fd, .events = POLLOUT};
                poll(&pfd, 1, 100);
                continue;
            }
            return; /* nothing sensible to do with a log line that cannot be written */
        }
        p += w;
        n -= (size_t)w;
    }
}

/* The wake-up pipe is made once and never closed, so a thread (or a signal handler) writing to
 * it while the writer stops cannot hit a descriptor reused for something else. */
static void wake(void)
{
    if (!__atomic_exchange_n(&wake_pending, 1, __ATOMIC_ACQ_REL) && wake_w >= 0) {
        if (write(wake_w, "w", 1) < 0) { /* the pipe is full: the writer is awake anyway */
        }
    }
}

/* Queue a line for the writer, or write it now when there is none. */
static void emit(int kind, const char *line, size_t len)
{
    if (!__atomic_load_n(&running, __ATOMIC_ACQUIRE)) { /* no writer: at once, no allocation */
        write_all(kind == IT_TTY ? 2 : g_fd, line, len);
        return;
    }
    item_t *it = malloc(sizeof(*it) + len);
    pthread_mutex_lock(&mu);
    if (!running) {
        pthread_mutex_unlock(&mu);
        free(it);
        write_all(kind == IT_TTY ? 2 : g_fd, line, len);
        return;
    }
    if (!it || q_bytes + len > RMQ_LOG_QUEUE_MAX) {
        q_dropped++;
        pthread_mutex_unlock(&mu);
        free(it);
        return;
    }
    it->next = NULL;
    it->kind = kind;
    it->len = len;
    memcpy(it->data, line, len);
    if (q_tail) q_tail->next = it;
    else q_head = it;
    q_tail = it;
    q_bytes += len;
    pthread_mutex_unlock(&mu);
    wake();
}

/* ---- formatting -------------------------------------------------------------------------- */

static const char *const level_upper[] = {"ERROR", "WARN", "INFO", "DEBUG"};
static const char *const level_lower[] = {"error", "warn", "info", "debug"};

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t k;
    uint32_t cp;
    if (c < 0xc2 || c > 0xf4) return 0;
    k = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    if (n < k) return 0;
    cp = c & (k == 2 ? 0x1f : k == 3 ? 0x0f : 0x07);
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return k;
}

/* s as a JSON string literal; bytes that are not UTF-8 become \ufffd. */
static void json_str(rmq_buf_t *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    rmq__buf_reserve(b, n + 2);
    rmq__buf_append(b, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        if (c >= 0x80) {
            size_t k = utf8_len(p + i, n - i);
            if (k) rmq__buf_append(b, p + i, k), i += k;
            else rmq__buf_append(b, "\\ufffd", 6), i++;
            continue;
        }
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            rmq__buf_append(b, e, 2);
        } else if (c == '\n') {
            rmq__buf_append(b, "\\n", 2);
        } else if (c == '\t') {
            rmq__buf_append(b, "\\t", 2);
        } else if (c == '\r') {
            rmq__buf_append(b, "\\r", 2);
        } else if (c < 0x20 || c == 0x7f) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            rmq__buf_append(b, e, 6);
        } else {
            rmq__buf_append(b, &p[i], 1);
        }
        i++;
    }
    rmq__buf_append(b, "\"", 1);
}

/* One whole line (with its newline) into b. */
static void format_line(rmq_buf_t *b, int level, const char *cat, const rmq_log_field_t *f,
                        int nf, const char *msg, size_t msglen)
{
    struct timespec ts;
    struct tm tm;
    int lv = level < 0 ? 0 : level > 3 ? 3 : level;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    if (g_format == RMQ_LOG_JSON) {
        long off = tm.tm_gmtoff / 60;
        char sign = off < 0 ? '-' : '+';
        if (off < 0) off = -off;
        rmq__buf_appendf(b,
                         "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ld%c%02ld:%02ld\","
                         "\"level\":\"%s\",\"category\":",
                         tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                         tm.tm_sec, ts.tv_nsec / 1000000, sign, off / 60, off % 60,
                         level_lower[lv]);
        json_str(b, cat, strlen(cat));
        rmq__buf_append(b, ",\"message\":", 11);
        json_str(b, msg, msglen);
        for (int i = 0; i < nf; i++) {
            rmq__buf_append(b, ",", 1);
            json_str(b, f[i].key, strlen(f[i].key));
            rmq__buf_append(b, ":", 1);
            if (f[i].str) json_str(b, f[i].str, strlen(f[i].str));
            else rmq__buf_appendf(b, "%lld", (long long)f[i].num);
        }
        rmq__buf_append(b, "}\n", 2);
        return;
    }
    rmq__buf_appendf(b, "%04d-%02d-%02d %02d:%02d:%02d.%03ld %-5s [%s] ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, level_upper[lv], cat);
    rmq__buf_append(b, msg, msglen);
    rmq__buf_append(b, "\n", 1);
}

static void vlogf(int level, const char *cat, const rmq_log_field_t *f, int nf, const char *fmt,
                  va_list ap)
{
    char small[2048], *msg = small;
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof(small)) {
        size_t cap = (size_t)n < 65536 ? (size_t)n + 1 : 65536;
        msg = malloc(cap);
        if (msg) {
            vsnprintf(msg, cap, fmt, ap2);
            n = (int)strlen(msg);
        } else {
            msg = small;
            n = (int)strlen(small);
        }
    }
    va_end(ap2);
    rmq_buf_t b;
    rmq__buf_init(&b);
    format_line(&b, level, cat, f, nf, msg, (size_t)n);
    if (msg != small) free(msg);
    if (b.data) emit(IT_LOG, b.data, b.len);
    rmq__buf_free(&b);
}

void rmq__log(int level, const char *subsys, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlogf(level, subsys, NULL, 0, fmt, ap);
    va_end(ap);
}

void rmq__logf(int level, const char *cat, const rmq_log_field_t *fields, int nfields,
               const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlogf(level, cat, fields, nfields, fmt, ap);
    va_end(ap);
}

void rmq__log_set_format(int format)
{
    g_format = format == RMQ_LOG_JSON ? RMQ_LOG_JSON : RMQ_LOG_TEXT;
}

/* ---- repeated errors --------------------------------------------------------------------- */

#define REP_SLOTS 32

typedef struct rep {
    int used;
    char sig[160];
    char cat[32];
    char first[240]; /* first line of the first error of the window */
    int level;
    int64_t start_ms;
    int full;
    int64_t more;
} rep_t;

typedef struct rep_summary {
    char cat[32];
    char first[240];
    int level;
    int64_t more;
    int64_t secs;
} rep_summary_t;

static pthread_mutex_t rep_mu = PTHREAD_MUTEX_INITIALIZER;
static rep_t reps[REP_SLOTS];

/* The first line of text: bracketed text dropped, digit runs as '#' except a line number after
 * ".lua:". */
static void signature(const char *text, char *out, size_t n)
{
    size_t o = 0;
    int depth = 0;
    for (const char *p = text; *p && *p != '\n' && o + 1 < n; p++) {
        if (*p == '[') depth++;
        else if (*p == ']' && depth) depth--;
        else if (depth) continue;
        else if (*p >= '0' && *p <= '9') {
            int keep = p - text >= 5 && !strncmp(p - 5, ".lua:", 5);
            if (keep) {
                while (*p >= '0' && *p <= '9' && o + 1 < n) out[o++] = *p++;
                p--;
            } else {
                while (p[1] >= '0' && p[1] <= '9') p++;
                out[o++] = '#';
            }
        } else out[o++] = *p;
    }
    out[o] = '\0';
}

static void first_line(const char *text, char *out, size_t n)
{
    size_t k = strcspn(text, "\n");
    if (k >= n) k = n - 1;
    memcpy(out, text, k);
    out[k] = '\0';
}

static void take_summary(rep_t *r, int64_t secs, rep_summary_t *s)
{
    memcpy(s->cat, r->cat, sizeof(s->cat));
    memcpy(s->first, r->first, sizeof(s->first));
    s->level = r->level;
    s->more = r->more;
    s->secs = secs < 1 ? 1 : secs;
}

static void write_summary(const rep_summary_t *s)
{
    char num[32], tmp[32];
    int n = snprintf(tmp, sizeof(tmp), "%lld", (long long)s->more), o = 0;
    for (int i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0) num[o++] = ',';
        num[o++] = tmp[i];
    }
    num[o] = '\0';
    rmq_log_field_t f[3] = {{"repeated", NULL, s->more}, {"window_s", NULL, s->secs},
                            {"like", s->first, 0}};
    rmq__logf(s->level, s->cat, f, 3, "\xe2\x80\xa6 and %s more like it in the last %lld s: %s",
              num, (long long)s->secs, s->first);
}

/* Summaries of windows that ended (all of them when force), written outside the lock. */
static void repeats_tick(int force)
{
    rep_summary_t out[REP_SLOTS];
    int n = 0;
    int64_t now = rmq__mono_ms();
    pthread_mutex_lock(&rep_mu);
    for (int i = 0; i < REP_SLOTS; i++) {
        rep_t *r = &reps[i];
        if (!r->used) continue;
        int64_t age = now - r->start_ms;
        if (!force && age < RMQ_LOG_REPEAT_WINDOW_MS) continue;
        if (r->more > 0)
            take_summary(r, force && age < RMQ_LOG_REPEAT_WINDOW_MS ? (age + 999) / 1000
                                                                    : RMQ_LOG_REPEAT_WINDOW_MS / 1000,
                         &out[n++]);
        r->used = 0;
    }
    pthread_mutex_unlock(&rep_mu);
    for (int i = 0; i < n; i++) write_summary(&out[i]);
}

void rmq__log_flush_repeats(void)
{
    repeats_tick(1);
}

void rmq__log_repeated(int level, const char *cat, const rmq_log_field_t *fields, int nfields,
                       const char *text)
{
    char sig[160];
    rep_summary_t done;
    int have_done = 0, full = 0;
    int64_t now = rmq__mono_ms();
    signature(text, sig, sizeof(sig));
    pthread_mutex_lock(&rep_mu);
    rep_t *r = NULL, *oldest = NULL, *free_slot = NULL;
    for (int i = 0; i < REP_SLOTS; i++) {
        rep_t *x = &reps[i];
        if (!x->used) {
            if (!free_slot) free_slot = x;
            continue;
        }
        if (!strcmp(x->sig, sig) && !strcmp(x->cat, cat)) {
            r = x;
            break;
        }
        if (!oldest || x->start_ms < oldest->start_ms) oldest = x;
    }
    if (r && now - r->start_ms >= RMQ_LOG_REPEAT_WINDOW_MS) {
        if (r->more > 0) take_summary(r, RMQ_LOG_REPEAT_WINDOW_MS / 1000, &done), have_done = 1;
        r->used = 0;
        free_slot = r;
        r = NULL;
    }
    if (!r) {
        if (!free_slot) { /* full: the oldest window ends early */
            free_slot = oldest;
            if (oldest->more > 0 && !have_done)
                take_summary(oldest, (now - oldest->start_ms + 999) / 1000, &done), have_done = 1;
        }
        r = free_slot;
        memset(r, 0, sizeof(*r));
        r->used = 1;
        snprintf(r->sig, sizeof(r->sig), "%s", sig);
        snprintf(r->cat, sizeof(r->cat), "%s", cat);
        first_line(text, r->first, sizeof(r->first));
        r->level = level;
        r->start_ms = now;
    }
    if (r->full < RMQ_LOG_REPEAT_FULL) r->full++, full = 1;
    else r->more++;
    pthread_mutex_unlock(&rep_mu);
    if (have_done) write_summary(&done);
    if (full) rmq__logf(level, cat, fields, nfields, "%s", text);
}

/* ---- status line ------------------------------------------------------------------------- */

void rmq__log_status(const char *line)
{
    pthread_mutex_lock(&mu);
    int live = running && g_status_tty;
    if (live) {
        snprintf(status_text, sizeof(status_text), "%s", line ? line : "");
        status_set = line != NULL;
        status_gen++;
    }
    pthread_mutex_unlock(&mu);
    if (live) wake();
}

void rmq__log_status_end(const char *final_line)
{
    pthread_mutex_lock(&mu);
    status_set = 0;
    status_gen++;
    pthread_mutex_unlock(&mu);
    size_t n = strlen(final_line);
    char *s = malloc(n + 1);
    if (!s) return;
    memcpy(s, final_line, n);
    s[n] = '\n';
    emit(IT_TTY, s, n + 1);
    free(s);
}

/* ---- the writer -------------------------------------------------------------------------- */

/* Output of one round, in order: consecutive bytes for one descriptor go out in one write. */
typedef struct wout {
    rmq_buf_t buf;
    int fd;
    int status_shown; /* the status line is on the terminal now */
    int open_line;    /* relayed stdout ended without a newline */
    int shown_gen;
} wout_t;

static void wflush(wout_t *w)
{
    if (w->buf.len) write_all(w->fd, w->buf.data, w->buf.len);
    w->buf.len = 0;
}

static void wput(wout_t *w, int fd, const char *p, size_t n)
{
    if (fd != w->fd) {
        wflush(w);
        w->fd = fd;
    }
    rmq__buf_append(&w->buf, p, n);
}

/* Before anything is written to the terminal: take the status line away. */
static void term_clear(wout_t *w)
{
    if (w->status_shown) {
        wput(w, 2, "\r\033[K", 4);
        w->status_shown = 0;
    }
}

static void relay_read(wout_t *w)
{
    char buf[65536];
    for (;;) {
        ssize_t r = read(relay_r, buf, sizeof(buf));
        if (r > 0) {
            term_clear(w);
            wput(w, real_out, buf, (size_t)r);
            w->open_line = buf[r - 1] != '\n';
            continue;
        }
        if (r == 0) { /* every writer of stdout is gone */
            close(relay_r);
            relay_r = -1;
        } else if (errno == EINTR) {
            continue;
        }
        return;
    }
}

static void write_items(wout_t *w, item_t *it)
{
    while (it) {
        item_t *next = it->next;
        int to_term = it->kind == IT_TTY || g_log_on_term;
        if (to_term) {
            term_clear(w);
            if (w->open_line) wput(w, 2, "\n", 1), w->open_line = 0;
        }
        wput(w, it->kind == IT_TTY ? 2 : g_fd, it->data, it->len);
        free(it);
        it = next;
    }
}

static void draw_status(wout_t *w, const char *text, int gen)
{
    struct winsize ws;
    int cols = 80;
    if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1) cols = ws.ws_col;
    size_t n = strlen(text);
    if (n > (size_t)cols - 1) n = (size_t)cols - 1;
    wput(w, 2, "\r\033[K", 4);
    wput(w, 2, text, n);
    w->status_shown = 1;
    w->shown_gen = gen;
}

static void do_reopen(void)
{
    if (!g_path) return;
    int fd = open(g_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        rmq_log_error("log", "cannot reopen the log file %s: %s (still writing to the old one)",
                      g_path, strerror(errno));
        return;
    }
    if (fd != g_fd) {
        dup2(fd, g_fd);
        close(fd);
    }
    rmq_log_info("log", "log file %s reopened", g_path);
}

static void *writer_main(void *arg)
{
    (void)arg;
    wout_t w = {.fd = -1};
    rmq__buf_init(&w.buf);
    int64_t last_tick = rmq__mono_ms();
    for (;;) {
        struct pollfd pfd[2] = {{.fd = wake_r, .events = POLLIN}, {.fd = relay_r, .events = POLLIN}};
        int npfd = relay_r >= 0 ? 2 : 1;
        if (poll(pfd, (nfds_t)npfd, 1000) < 0 && errno != EINTR) pfd[0].revents = 0;
        char drain[256];
        while (read(wake_r, drain, sizeof(drain)) > 0) {
        }
        __atomic_store_n(&wake_pending, 0, __ATOMIC_RELEASE);
        if (atomic_exchange(&reopen_req, 0)) {
            do_reopen();
        }
        if (relay_r >= 0) relay_read(&w);
        int64_t now = rmq__mono_ms();
        if (now - last_tick >= 1000) {
            last_tick = now;
            repeats_tick(0);
        }

        pthread_mutex_lock(&mu);
        int stop = stopping;
        pthread_mutex_unlock(&mu);
        if (stop) {
            /* Last round: stdout already points back at the terminal; what was relayed is in
             * the pipe. Pending summaries are queued, then nothing is taken any more. */
            if (relay_r >= 0) relay_read(&w);
            repeats_tick(1);
        }

        pthread_mutex_lock(&mu);
        item_t *items = q_head;
        q_head = q_tail = NULL;
        q_bytes = 0;
        int64_t dropped = q_dropped;
        q_dropped = 0;
        char status[sizeof(status_text)];
        int have_status = status_set, gen = status_gen;
        if (have_status) memcpy(status, status_text, sizeof(status));
        if (stop) __atomic_store_n(&running, 0, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&mu);

        write_items(&w, items);
        if (dropped) {
            rmq_buf_t b;
            rmq__buf_init(&b);
            char msg[128];
            int n = snprintf(msg, sizeof(msg),
                             "%lld log line(s) dropped: the log output could not keep up",
                             (long long)dropped);
            format_line(&b, RMQ_LOG_WARN, "log", NULL, 0, msg, (size_t)n);
            if (g_log_on_term) term_clear(&w);
            wput(&w, g_fd, b.data, b.len);
            rmq__buf_free(&b);
        }
        if (g_status_tty && !w.open_line) {
            if (have_status && (!w.status_shown || w.shown_gen != gen)) draw_status(&w, status, gen);
            else if (!have_status) term_clear(&w);
        }
        wflush(&w);
        if (stop) break;
    }
    rmq__buf_free(&w.buf);
    rmq__thread_finishing();
    return NULL;
}

int rmq__log_start(const rmq_log_opts_t *o, char *errstr, size_t errstr_size)
{
    int p[2], r[2];
    if (started) {
        rmq__seterr(errstr, errstr_size, "the log writer is already running");
        return RMQ_ERR_STATE;
    }
    rmq__log_set_format(o->format);
    int fd = 2;
    if (o->file) {
        fd = open(o->file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            rmq__seterr(errstr, errstr_size, "log file %s: %s", o->file, strerror(errno));
            return RMQ_ERR_IO;
        }
    }
    if (g_fd != 2) close(g_fd); /* a file of an earlier start */
    g_fd = fd;
    free(g_path);
    g_path = o->file ? rmq__xstrdup(o->file) : NULL;
    if (wake_r < 0) {
        if (pipe2(p, O_CLOEXEC | O_NONBLOCK)) {
            rmq__seterr(errstr, errstr_size, "log writer: pipe: %s", strerror(errno));
            return RMQ_ERR_IO;
        }
        wake_r = p[0], wake_w = p[1];
    }
    g_status_tty = o->status_tty;
    g_log_on_term = o->status_tty && !o->file;
    if (o->status_tty && o->relay_stdout) {
        fflush(stdout);
        real_out = fcntl(1, F_DUPFD_CLOEXEC, 3);
        if (real_out >= 0 && pipe2(r, O_CLOEXEC) == 0) {
            fcntl(r[0], F_SETFL, O_NONBLOCK);
            fcntl(r[0], F_SETPIPE_SZ, 1 << 20); /* room for bursts; best effort */
            dup2(r[1], 1);                      /* fd 1 loses O_CLOEXEC: children inherit it */
            close(r[1]);
            relay_r = r[0];
        } else if (real_out >= 0) {
            close(real_out);
            real_out = -1;
        }
    }
    pthread_mutex_lock(&mu);
    __atomic_store_n(&running, 1, __ATOMIC_RELEASE);
    stopping = 0;
    pthread_mutex_unlock(&mu);
    if (pthread_create(&writer, NULL, writer_main, NULL)) {
        pthread_mutex_lock(&mu);
        __atomic_store_n(&running, 0, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&mu);
        if (relay_r >= 0) {
            dup2(real_out, 1);
            close(relay_r), close(real_out);
            relay_r = real_out = -1;
        }
        rmq__seterr(errstr, errstr_size, "log writer: cannot start its thread");
        return RMQ_ERR_IO;
    }
    started = 1;
    return 0;
}

void rmq__log_stop(void)
{
    if (!started) return;
    fflush(stdout);
    if (real_out >= 0) dup2(real_out, 1); /* closes the relay's write end */
    pthread_mutex_lock(&mu);
    stopping = 1;
    pthread_mutex_unlock(&mu);
    if (write(wake_w, "s", 1) < 0) { /* full: the writer wakes anyway */
    }
    pthread_join(writer, NULL);
    started = 0;
    if (relay_r >= 0) close(relay_r);
    if (real_out >= 0) close(real_out);
    relay_r = real_out = -1;
    g_status_tty = g_log_on_term = 0;
}

void rmq__log_reopen(void)
{
    atomic_store(&reopen_req, 1);
    if (wake_w >= 0 && write(wake_w, "r", 1) < 0) { /* full: the writer wakes anyway */
    }
}
