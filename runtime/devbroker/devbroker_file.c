/*
 * devbroker_file.c -- the files of a broker's --store directory, DIR/<broker name>/: the
 * commit log appended to as messages are stored, a whole file replaced (a temporary file
 * renamed) or read back, and the port file. Opening the directory, recovery and the periodic
 * saving of the tables are in devbroker_recover.c.
 *
 * Layout, per broker: DIR/<broker name>/commitlog holds every stored message back to back in
 * the stored format (PROTOCOL 4.1); a message's commit-log offset is its byte position in the
 * file, as in RocketMQ. DIR/<broker name>/topics and .../offsets hold the topic table and the
 * consumer offsets as text, rewritten (write to a temporary file, then rename) when changed,
 * at most once a second and at stop. DIR/<broker name>/port is the port it listens on, taken
 * again at the next start when none is given (as a RocketMQ broker keeps its listenPort), so
 * that the offsetMsgIds it handed out (store host and port + commit-log offset) stay valid.
 *
 * Durability: each message is written with write(2) before the SEND is answered, without
 * fsync. A killed process (kill -9) loses nothing that was answered; the last message may be
 * torn and is cut off at recovery. A machine crash can lose what the kernel had not written
 * back yet. Committed offsets of the last second and messages waiting for their delay level
 * (retries) are lost on kill -9. The commit log is never trimmed: --max-bytes bounds memory,
 * and recovery reads the whole file and keeps the newest --max-bytes.
 *
 * Threads: the broker thread (and rmq__devbroker_start before the thread runs).
 */
#include "devbroker_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void rmq__db_file_path(const db_broker_t *b, const char *name, char *out, size_t size)
{
    snprintf(out, size, "%s/%s", b->dir, name);
}

/* Write a whole file atomically. */
int rmq__db_file_save(const db_broker_t *b, const char *name, const rmq_buf_t *data)
{
    char path[4200], tmp[4300];
    rmq__db_file_path(b, name, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return -1;
    if (data->len && fwrite(data->data, 1, data->len, f) != data->len) {
        fclose(f);
        return -1;
    }
    if (fclose(f)) return -1;
    return rename(tmp, path);
}

void rmq__db_file_append(db_broker_t *b, const db_msg_t *m)
{
    size_t off = 0;
    while (off < m->size) {
        ssize_t n =
            pwrite(b->log_fd, m->data + off, m->size - off, (off_t)(m->phys + (int64_t)off));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            rmq_log_error(DB_LOG, "%s: commit log write failed: %s (the store is memory-only now)",
                          b->name, strerror(errno));
            close(b->log_fd);
            b->log_fd = -1;
            return;
        }
        off += (size_t)n;
    }
}

int rmq__db_file_port(const db_broker_t *b)
{
    char path[4200], line[32];
    rmq__db_file_path(b, "port", path, sizeof(path));
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int port = 0;
    if (fgets(line, sizeof(line), f)) port = atoi(line);
    fclose(f);
    return port > 0 && port < 65536 ? port : 0;
}

void rmq__db_file_save_port(db_broker_t *b)
{
    rmq_buf_t o;
    rmq__buf_init(&o);
    rmq__buf_appendf(&o, "%d\n", b->node.port);
    if (rmq__db_file_save(b, "port", &o))
        rmq_log_warn(DB_LOG, "%s: cannot save its port in %s: %s", b->name, b->dir,
                     strerror(errno));
    rmq__buf_free(&o);
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    rmq_buf_t b;
    rmq__buf_init(&b);
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
        rmq__buf_append(&b, tmp, n);
    fclose(f);
    rmq__buf_append_u8(&b, 0);
    *len = b.len - 1;
    return b.data;
}

char *rmq__db_file_read(const db_broker_t *b, const char *name, size_t *len)
{
    char path[4200];
    rmq__db_file_path(b, name, path, sizeof(path));
    return read_all(path, len);
}
