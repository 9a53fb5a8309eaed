/*
 * batch_log.h -- how a consume thread logs a failed batch.
 *
 * Ownership: nothing kept. Threads: any consume thread (the log writer is thread-safe).
 */
#ifndef RMQ_BATCH_LOG_H
#define RMQ_BATCH_LOG_H

#include "rmqlua_ffi.h"

/*
 * A failed batch of a consume thread (text: what the dispatcher reported, with the message ids
 * and the traceback), logged with rmq__log_repeated in category "lua" with the fields thread
 * (1-based), topic, broker, queue, offset and msg_id of the batch's first message, and batch
 * (its size). Called on the consume thread while it still holds the batch.
 */
void rmq__log_batch_error(int thread_index, const rmq_batch_t *b, const char *text);

#endif
