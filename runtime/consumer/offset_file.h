/*
 * offset_file.h -- LocalFileOffsetStore's file (BROADCASTING consumers, PROTOCOL.md 6.16):
 * <local_offset_store_dir>/<clientId>/<group>/offsets.json holding
 * OffsetSerializeWrapper.toJson(true) -- fastjson pretty format with MessageQueue objects as map
 * keys -- written the MixAll.string2File way (<path>.tmp, previous content to <path>.bak, then
 * the .tmp becomes <path>) and read back with a fallback to <path>.bak.
 *
 * Entry order follows Java's ConcurrentHashMap iteration order for the table size the entries
 * need (bucket of MessageQueue.hashCode, insertion order within a bucket), so a file written
 * here matches the Java client's bytes for the same insertion order (bins reordered by a Java
 * resize are not emulated; readers never depend on the order).
 *
 * Ownership: entry arrays returned by the readers are owned by the caller
 * (rmq__offset_file_free). Threads: no shared state; file I/O is blocking, so the engine loads
 * at start before its loop runs and writes from a libuv worker (offset_local.c), never on the
 * loop thread.
 */
#ifndef RMQ_OFFSET_FILE_H
#define RMQ_OFFSET_FILE_H

#include "allocate.h" /* rmq_mq_t */
#include "base/common.h"

typedef struct rmq_offset_entry {
    rmq_mq_t mq;
    int64_t offset;
} rmq_offset_entry_t;

/* "<dir>/<client_id>/<group>/offsets.json" appended to out. */
int rmq__offset_file_path(const char *dir, const char *client_id, const char *group,
                          rmq_buf_t *out);

/* Append OffsetSerializeWrapper.toJson(true) of the entries (in Java's map order) to out. */
int rmq__offset_file_encode(const rmq_offset_entry_t *e, int n, rmq_buf_t *out);

/*
 * Parse a file's content (fastjson: object-valued keys; standard-JSON string keys are not
 * produced by Java and are rejected). Returns RMQ_OK with *out and *n (caller frees), or
 * RMQ_ERR_BAD_JSON with errstr. An empty offsetTable gives *n == 0.
 */
int rmq__offset_file_decode(const char *data, size_t len, rmq_offset_entry_t **out, int *n,
                            char *errstr, size_t errstr_size);
void rmq__offset_file_free(rmq_offset_entry_t *e, int n);

/*
 * Write data to path: parent directories created (0755), <path>.tmp written and fsynced, the
 * previous <path> copied to <path>.bak, then <path>.tmp renamed over <path> (atomic; Java deletes
 * <path> first, leaving a moment with no file). Returns RMQ_OK or RMQ_ERR_IO naming the file.
 */
int rmq__offset_file_write(const char *path, const char *data, size_t len, char *errstr,
                           size_t errstr_size);

/*
 * LocalFileOffsetStore.readLocalOffset: <path> if it exists, is non-empty and parses; otherwise
 * <path>.bak. Returns RMQ_OK with the entries (*n == 0, *out NULL when neither file exists:
 * no offsets yet), or RMQ_ERR_BAD_JSON when <path> is unusable and <path>.bak does not parse
 * ("readLocalOffset Exception, maybe fastjson version too low" in Java).
 */
int rmq__offset_file_load(const char *path, rmq_offset_entry_t **out, int *n, char *errstr,
                          size_t errstr_size);

/* Thin exports for FFI specs. */
RMQ_EXPORT size_t rmq_offset_file_encode(const rmq_offset_entry_t *e, int n, char *out,
                                         size_t out_size);
RMQ_EXPORT int rmq_offset_file_write(const char *path, const char *data, size_t len, char *errstr,
                                     size_t errstr_size);
RMQ_EXPORT int rmq_offset_file_load(const char *path, rmq_offset_entry_t **out, int *n,
                                    char *errstr, size_t errstr_size);
RMQ_EXPORT int rmq_offset_file_decode(const char *data, size_t len, rmq_offset_entry_t **out,
                                      int *n, char *errstr, size_t errstr_size);
RMQ_EXPORT void rmq_offset_file_free(rmq_offset_entry_t *e, int n);

#endif
