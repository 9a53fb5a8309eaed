/*
 * batch_log.c -- a failed batch in the log (batch_log.h): the fields of its first message, the
 * error summarised when it repeats (base/log.h: rmq__log_repeated).
 *
 * Ownership: nothing kept. Threads: the consume thread that ran the batch.
 */
#include "batch_log.h"

#include "base/common.h"
#include "base/log.h"

#include <stdio.h>
#include <string.h>

void rmq__log_batch_error(int thread_index, const rmq_batch_t *b, const char *text)
{
    char topic[256] = "", broker[128] = "", id[160] = "", line[256];
    rmq_log_field_t f[7];
    int nf = 0;
    f[nf++] = (rmq_log_field_t){"thread", NULL, thread_index + 1};
    if (b->n > 0) {
        const rmq_msg_t *m = b->msgs[0];
        snprintf(topic, sizeof(topic), "%.*s", (int)m->topic_len, m->topic ? m->topic : "");
        snprintf(broker, sizeof(broker), "%.*s", (int)m->broker_name_len,
                 m->broker_name ? m->broker_name : "");
        if (m->uniq_key_len)
            snprintf(id, sizeof(id), "%.*s", (int)m->uniq_key_len, m->uniq_key);
        else
            rmq_msg_offset_msg_id(m, id);
        f[nf++] = (rmq_log_field_t){"topic", topic, 0};
        f[nf++] = (rmq_log_field_t){"broker", broker, 0};
        f[nf++] = (rmq_log_field_t){"queue", NULL, m->queue_id};
        f[nf++] = (rmq_log_field_t){"offset", NULL, m->queue_offset};
        f[nf++] = (rmq_log_field_t){"msg_id", id, 0};
    }
    f[nf++] = (rmq_log_field_t){"batch", NULL, b->n};
    rmq_buf_t t;
    rmq__buf_init(&t);
    snprintf(line, sizeof(line), "thread %d: ", thread_index + 1);
    rmq__buf_append(&t, line, strlen(line));
    rmq__buf_append(&t, text, strlen(text) + 1);
    rmq__log_repeated(RMQ_LOG_ERROR, "lua", f, nf, t.data ? t.data : text);
    rmq__buf_free(&t);
}
