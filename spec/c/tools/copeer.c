/*
 * copeer.c -- a small TCP peer for the cosocket specs (spec/02-integration/04-lua/
 * cosocket_spec.lua), on libuv: it listens on 127.0.0.1 (port 0: the kernel picks one), prints
 * "PORT <n>" on stdout, and answers each line it receives on a connection after --delay ms:
 *
 *   close        the connection is closed at once (no answer)
 *   stall        no answer, ever (the connection stays open)
 *   peak         "<n>": the most lines that were waiting for their answer at one time
 *   conns        "<n>": connections accepted so far
 *   bye          "bye", then the connection is closed
 *   anything     "echo:<line>"
 *
 * Lines end with \n (a \r before it is kept in the echo). It runs until killed. Not part of the
 * runtime: built only with the tests. Threads: one (its loop).
 *
 * --tls CERT KEY: every connection is TLS (OpenSSL over memory BIOs, the server's certificate
 * chain and key in PEM files), the lines and answers above inside it. --hs close: the
 * connection is closed when the client's first handshake bytes arrive; --hs stall: they are
 * never answered (the specs' handshakes that fail and that time out).
 */
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

static uv_loop_t *loop;
static int delay_ms;
static int waiting, peak, conns;
static SSL_CTX *tls_ctx; /* --tls */
static const char *hs_mode = ""; /* --hs */

typedef struct conn {
    uv_tcp_t tcp;
    char buf[65536];
    size_t len;
    int closing, refs;
    SSL *ssl; /* --tls */
    BIO *in, *out;
} conn_t;

typedef struct answer {
    uv_timer_t timer;
    uv_write_t wr;
    conn_t *c;
    char *text;
    size_t len;
    int then_close;
} answer_t;

static void conn_unref(conn_t *c)
{
    if (--c->refs == 0) {
        if (c->ssl) SSL_free(c->ssl);
        free(c);
    }
}

static void on_raw_written(uv_write_t *w, int status)
{
    free(w->data);
    free(w);
}

/* TLS: write out what the session produced (ciphertext). */
static void tls_flush(conn_t *c)
{
    size_t n = BIO_ctrl_pending(c->out);
    if (n == 0 || c->closing) return;
    char *b = malloc(n);
    int got = BIO_read(c->out, b, (int)n);
    uv_write_t *w = malloc(sizeof(*w));
    w->data = b;
    uv_buf_t ub = uv_buf_init(b, (unsigned)(got > 0 ? got : 0));
    if (got <= 0 || uv_write(w, (uv_stream_t *)&c->tcp, &ub, 1, on_raw_written)) {
        free(b);
        free(w);
    }
}

static void on_conn_closed(uv_handle_t *h)
{
    conn_unref(h->data);
}

static void conn_close(conn_t *c)
{
    if (c->closing) return;
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_answer_closed(uv_handle_t *h)
{
    answer_t *a = h->data;
    conn_unref(a->c);
    free(a->text);
    free(a);
}

static void on_written(uv_write_t *w, int status)
{
    answer_t *a = w->data;
    if (a->then_close) conn_close(a->c);
    uv_close((uv_handle_t *)&a->timer, on_answer_closed);
}

static void on_due(uv_timer_t *t)
{
    answer_t *a = t->data;
    waiting--;
    if (a->c->closing) {
        uv_close((uv_handle_t *)&a->timer, on_answer_closed);
        return;
    }
    if (a->c->ssl) { /* encrypted and queued before the (empty) write that completes the answer */
        SSL_write(a->c->ssl, a->text, (int)a->len);
        tls_flush(a->c);
        a->len = 0;
    }
    uv_buf_t b = uv_buf_init(a->text, (unsigned)a->len);
    a->wr.data = a;
    if (uv_write(&a->wr, (uv_stream_t *)&a->c->tcp, &b, 1, on_written))
        uv_close((uv_handle_t *)&a->timer, on_answer_closed);
}

static void on_line(conn_t *c, const char *line, size_t n)
{
    if (n == 5 && !memcmp(line, "close", 5)) {
        conn_close(c);
        return;
    }
    if (n == 5 && !memcmp(line, "stall", 5)) return;
    answer_t *a = calloc(1, sizeof(*a));
    a->c = c;
    c->refs++;
    a->text = malloc(n + 32);
    if (n == 4 && !memcmp(line, "peak", 4))
        a->len = (size_t)sprintf(a->text, "%d\n", peak);
    else if (n == 3 && !memcmp(line, "bye", 3)) {
        a->len = (size_t)sprintf(a->text, "bye\n");
        a->then_close = 1;
    } else if (n == 5 && !memcmp(line, "conns", 5))
        a->len = (size_t)sprintf(a->text, "%d\n", conns);
    else {
        memcpy(a->text, "echo:", 5);
        memcpy(a->text + 5, line, n);
        a->text[5 + n] = '\n';
        a->len = n + 6;
    }
    waiting++;
    if (waiting > peak) peak = waiting;
    uv_timer_init(loop, &a->timer);
    a->timer.data = a;
    uv_timer_start(&a->timer, on_due, (uint64_t)delay_ms, 0);
}

static void on_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    conn_t *c = h->data;
    *b = uv_buf_init(c->buf + c->len, (unsigned)(sizeof(c->buf) - c->len));
}

static void take_lines(conn_t *c, size_t n);

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    conn_t *c = s->data;
    if (n < 0) {
        conn_close(c);
        return;
    }
    if (!c->ssl) {
        take_lines(c, (size_t)n);
        return;
    }
    if (n == 0) return;
    if (!strcmp(hs_mode, "close")) {
        conn_close(c);
        return;
    }
    if (!strcmp(hs_mode, "stall")) return;
    /* The ciphertext was read into the line buffer's free end: move it into the session. */
    BIO_write(c->in, c->buf + c->len, (int)n);
    if (!SSL_is_init_finished(c->ssl)) {
        int rc = SSL_do_handshake(c->ssl);
        tls_flush(c);
        if (rc != 1) {
            int e = SSL_get_error(c->ssl, rc);
            if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) conn_close(c);
            return;
        }
    }
    for (;;) {
        size_t room = sizeof(c->buf) - c->len;
        if (room == 0) {
            conn_close(c);
            return;
        }
        int got = SSL_read(c->ssl, c->buf + c->len, (int)room);
        tls_flush(c);
        if (got <= 0) {
            int e = SSL_get_error(c->ssl, got);
            if (e != SSL_ERROR_WANT_READ) conn_close(c);
            return;
        }
        take_lines(c, (size_t)got);
        if (c->closing) return;
    }
}

/* n more bytes of plaintext at the end of the line buffer: answer the lines complete. */
static void take_lines(conn_t *c, size_t n)
{
    c->len += n;
    size_t start = 0;
    for (size_t i = 0; i < c->len && !c->closing; i++) {
        if (c->buf[i] != '\n') continue;
        on_line(c, c->buf + start, i - start);
        start = i + 1;
    }
    if (c->closing) return;
    memmove(c->buf, c->buf + start, c->len - start);
    c->len -= start;
    if (c->len == sizeof(c->buf)) conn_close(c); /* a line longer than the buffer */
}

static void on_connection(uv_stream_t *server, int status)
{
    if (status) return;
    conn_t *c = calloc(1, sizeof(*c));
    c->refs = 1;
    uv_tcp_init(loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept(server, (uv_stream_t *)&c->tcp)) {
        conn_close(c);
        return;
    }
    conns++;
    if (tls_ctx) {
        c->ssl = SSL_new(tls_ctx);
        c->in = BIO_new(BIO_s_mem());
        c->out = BIO_new(BIO_s_mem());
        BIO_set_mem_eof_return(c->in, -1);
        SSL_set_bio(c->ssl, c->in, c->out);
        SSL_set_accept_state(c->ssl);
    }
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--delay") && i + 1 < argc)
            delay_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tls") && i + 2 < argc) {
            tls_ctx = SSL_CTX_new(TLS_server_method());
            if (SSL_CTX_use_certificate_chain_file(tls_ctx, argv[i + 1]) != 1 ||
                SSL_CTX_use_PrivateKey_file(tls_ctx, argv[i + 2], SSL_FILETYPE_PEM) != 1) {
                fprintf(stderr, "copeer: cannot load %s / %s\n", argv[i + 1], argv[i + 2]);
                ERR_print_errors_fp(stderr);
                return 1;
            }
            i += 2;
        } else if (!strcmp(argv[i], "--hs") && i + 1 < argc)
            hs_mode = argv[++i];
        else {
            fprintf(stderr, "usage: copeer [--delay MS] [--tls CERT KEY [--hs close|stall]]\n");
            return 2;
        }
    }
    loop = uv_default_loop();
    uv_tcp_t server;
    uv_tcp_init(loop, &server);
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", 0, &sa);
    if (uv_tcp_bind(&server, (struct sockaddr *)&sa, 0) ||
        uv_listen((uv_stream_t *)&server, 4096, on_connection)) {
        fprintf(stderr, "copeer: cannot listen on 127.0.0.1\n");
        return 1;
    }
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    uv_tcp_getsockname(&server, (struct sockaddr *)&ss, &len);
    printf("PORT %d\n", ntohs(((struct sockaddr_in *)&ss)->sin_port));
    fflush(stdout);
    return uv_run(loop, UV_RUN_DEFAULT);
}
