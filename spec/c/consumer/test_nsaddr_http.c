/*
 * test_nsaddr_http.c -- the address service fetcher (consumer/nsaddr_http.c) against a real
 * local TCP server on the test's loop: the URL Java builds, a close-delimited answer, a
 * Content-Length answer on a connection left open, a status other than 200, a chunked answer and
 * a server that never answers (the fetch times out and the next one works); a failure before the
 * first list told to the caller (rmq__nsaddr_on_first_failure), later ones not; the fetcher closes
 * with no handle left behind. Single-threaded: the test's loop.
 */
#include "consumer/nsaddr_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_loop.h"

enum { M_CLOSE, M_LENGTH_OPEN, M_404, M_CHUNKED, M_SILENT };

static int mode;
static uv_tcp_t server;
static uv_tcp_t *clients[64];
static int n_clients, n_lists, n_fails;
static char last_list[256], fail_msg[512];

static void on_client_closed(uv_handle_t *h)
{
    free(h);
}

static void close_client(uv_tcp_t *t)
{
    for (int i = 0; i < n_clients; i++)
        if (clients[i] == t) clients[i] = NULL;
    if (!uv_is_closing((uv_handle_t *)t)) uv_close((uv_handle_t *)t, on_client_closed);
}

static void on_written(uv_write_t *w, int status)
{
    (void)status;
    if (mode == M_CLOSE || mode == M_404 || mode == M_CHUNKED) close_client(w->data);
    free(w);
}

static void on_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    static char buf[4096];
    (void)h, (void)sz;
    *b = uv_buf_init(buf, sizeof buf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    if (n < 0) {
        close_client((uv_tcp_t *)s);
        return;
    }
    if (n == 0 || s->data) return; /* answered already */
    s->data = s;
    static const char *answers[] = {
        "HTTP/1.1 200 OK\r\nServer: t\r\n\r\n127.0.0.1:1;127.0.0.1:2\n",
        "HTTP/1.0 200 OK\r\ncontent-length: 11\r\n\r\n10.0.0.1:99 and what follows",
        "HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\n9:9",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n127.0.0.1:9\r\n0\r\n\r\n",
    };
    if (mode == M_SILENT) return;
    uv_write_t *w = malloc(sizeof(*w));
    w->data = s;
    uv_buf_t wb = uv_buf_init((char *)answers[mode], (unsigned)strlen(answers[mode]));
    uv_write(w, s, &wb, 1, on_written);
}

static void on_conn(uv_stream_t *srv, int status)
{
    if (status) return;
    uv_tcp_t *c = malloc(sizeof(*c));
    uv_tcp_init(loop, c);
    c->data = NULL;
    if (uv_accept(srv, (uv_stream_t *)c) || n_clients == 64) {
        uv_close((uv_handle_t *)c, on_client_closed);
        return;
    }
    clients[n_clients++] = c;
    uv_read_start((uv_stream_t *)c, on_alloc, on_read);
}

static int on_list(void *ud, const char *list, char *errstr, size_t errstr_size)
{
    (void)ud, (void)errstr, (void)errstr_size;
    snprintf(last_list, sizeof last_list, "%s", list);
    n_lists++;
    return 0;
}

static void on_fail(void *ud, const char *msg)
{
    (void)ud;
    snprintf(fail_msg, sizeof fail_msg, "%s", msg);
    n_fails++;
}

static void test_url(void)
{
    char *u = rmq__nsaddr_url("jmenv.tbsite.net", "nsaddr", NULL);
    CHECK(!strcmp(u, "http://jmenv.tbsite.net:8080/rocketmq/nsaddr"));
    free(u);
    u = rmq__nsaddr_url("127.0.0.1:8081", "g1", "unitA");
    CHECK(!strcmp(u, "http://127.0.0.1:8081/rocketmq/g1-unitA?nofix=1"));
    free(u);
    rmq_nsaddr_t *n;
    char err[256];
    CHECK(rmq__nsaddr_start(loop, "ftp://x/y", 1000, 1000, on_list, NULL, &n, err, sizeof err) ==
          RMQ_ERR_CONFIG);
    CHECK(strstr(err, "\"ftp://x/y\"") != NULL);
    CHECK(rmq__nsaddr_start(loop, "http://x:99999/y", 1000, 1000, on_list, NULL, &n, err,
                            sizeof err) == RMQ_ERR_CONFIG);
    CHECK(strstr(err, "bad host or port") != NULL);
}

static void test_answers(void)
{
    struct sockaddr_in a;
    struct sockaddr_storage ss;
    int len = sizeof ss;
    char url[128], err[256];
    uv_ip4_addr("127.0.0.1", 0, &a);
    uv_tcp_init(loop, &server);
    CHECK(uv_tcp_bind(&server, (const struct sockaddr *)&a, 0) == 0);
    CHECK(uv_listen((uv_stream_t *)&server, 16, on_conn) == 0);
    uv_tcp_getsockname(&server, (struct sockaddr *)&ss, &len);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/rocketmq/nsaddr",
             ntohs(((struct sockaddr_in *)&ss)->sin_port));

    rmq_nsaddr_t *n = NULL;
    mode = M_CLOSE;
    CHECK(rmq__nsaddr_start(loop, url, 100, 300, on_list, NULL, &n, err, sizeof err) == 0);
    WAIT_UNTIL(n_lists == 1, 5000);
    CHECK(!strcmp(last_list, "127.0.0.1:1;127.0.0.1:2"));

    /* Content-Length delimits the body; the server keeps the connection open. */
    mode = M_LENGTH_OPEN;
    WAIT_UNTIL(n_lists == 2, 5000);
    CHECK(!strcmp(last_list, "10.0.0.1:99"));

    /* A 404, a chunked answer and silence hand nothing on. */
    int before = n_clients;
    mode = M_404;
    WAIT_UNTIL(n_clients >= before + 2, 5000);
    mode = M_CHUNKED;
    before = n_clients;
    WAIT_UNTIL(n_clients >= before + 2, 5000);
    mode = M_SILENT;
    before = n_clients;
    WAIT_UNTIL(n_clients >= before + 2, 5000); /* each silent fetch timed out and a new one began */
    CHECK(n_lists == 2);

    /* The fetcher goes on after all that. */
    mode = M_CLOSE;
    WAIT_UNTIL(n_lists == 3, 5000);
    CHECK(!strcmp(last_list, "127.0.0.1:1;127.0.0.1:2"));
    CHECK(n_fails == 0);
    rmq__nsaddr_close(n);

    /* A failure before the first list goes to the caller, naming the URL and the fault; once a
     * list was taken, failures are logged again (the last list stays). */
    mode = M_404;
    CHECK(rmq__nsaddr_start(loop, url, 100, 300, on_list, NULL, &n, err, sizeof err) == 0);
    rmq__nsaddr_on_first_failure(n, on_fail);
    WAIT_UNTIL(n_fails >= 1, 5000);
    CHECK(strstr(fail_msg, url) != NULL);
    CHECK(strstr(fail_msg, "HTTP status 404") != NULL);
    CHECK(n_lists == 3);
    mode = M_CLOSE;
    WAIT_UNTIL(n_lists == 4, 5000);
    int fails = n_fails;
    mode = M_404;
    before = n_clients;
    WAIT_UNTIL(n_clients >= before + 2, 5000);
    CHECK(n_fails == fails);
    CHECK(n_lists == 4);

    rmq__nsaddr_close(n);
    for (int i = 0; i < n_clients; i++)
        if (clients[i]) close_client(clients[i]);
    uv_close((uv_handle_t *)&server, NULL);
}

int main(void)
{
    test_loop_open("namesrv");
    test_url();
    test_answers();
    CHECK(test_loop_close() == 0);
    return test_report("test_nsaddr_http");
}
