/*
 * message.h -- the stored message format (PULL_MESSAGE bodies), message ids, properties.
 *
 * PROTOCOL.md section 4 (MessageDecoder.java, MessageClientIDSetter.java, MessageSysFlag.java).
 *
 * Ownership: rmq__msgset_decode() turns one pulled body into an rmq_msgset_t: one allocation
 * holding the set, its rmq_msg_t array and the broker name, plus one allocation per inflated
 * (compressed) body. Every rmq_msg_t is a view: its strings point into the frame (or into an
 * inflated body owned by the set). The set holds one reference on the frame. The set is
 * reference-counted: it starts with one reference per decoded message plus one for the caller
 * (the "creator reference"). rmq__msg_release(m) drops the reference of message m;
 * rmq__msgset_release(set) drops any other reference (first of all the creator reference).
 * Messages in set->bad (RMQ_DECODE_KEEP_BAD) hold a reference each too.
 * When the count reaches zero the inflated bodies, the frame reference and the set are freed.
 * Threads: decoding happens on the loop thread; a set's reference count is atomic, so messages
 * may be released from any thread. Views are read by one thread at a time (the batch rule of
 * rmqlua_ffi.h). rmq__uniq_id_new() is thread-safe. Everything else is pure.
 */
#ifndef RMQ_MESSAGE_H
#define RMQ_MESSAGE_H

#include "base/common.h"
#include "rmqlua_ffi.h"

#define RMQ_MSG_MAGIC_V1 0xDAA320A7u /* 1-byte TOPICLEN (4.x) */
#define RMQ_MSG_MAGIC_V2 0xDAA320ABu /* 2-byte TOPICLEN (5.x) */

/* MessageSysFlag bits (PROTOCOL 4.2). */
#define RMQ_SYSFLAG_COMPRESSED 0x1
#define RMQ_SYSFLAG_MULTI_TAGS 0x2
#define RMQ_SYSFLAG_TX_MASK 0xC
#define RMQ_SYSFLAG_BORNHOST_V6 0x10
#define RMQ_SYSFLAG_STOREHOST_V6 0x20
#define RMQ_SYSFLAG_COMPRESSION_MASK 0x700
#define RMQ_SYSFLAG_ZLIB_TYPE 0x300 /* what a Java producer sets with COMPRESSED (0x301) */

/* Property separators (MessageDecoder.NAME_VALUE_SEPARATOR / PROPERTY_SEPARATOR). */
#define RMQ_PROP_NV_SEP '\001'
#define RMQ_PROP_SEP '\002'

/* Smallest stored message: IPv4 fields up to and including BODYLEN (88 bytes; PROTOCOL 4.1's
 * "92 bytes of fixed header" miscounts, its own 10.5 example is 88 + 5 + 1 + 9 + 2 + 51 = 156)
 * + TOPICLEN (1) + PROPERTIESLEN (2). */
#define RMQ_MSG_MIN_SIZE 91

typedef struct rmq_msgset_infl rmq_msgset_infl_t;

typedef struct rmq_msgset {
    int refs;                /* __atomic builtins: one per live message + the creator reference */
    rmq_rbuf_t *frame;       /* one reference, released with the set */
    int n;                   /* decoded messages */
    rmq_msg_t *msgs;         /* n views, in the same allocation as the set */
    /* RMQ_DECODE_KEEP_BAD: messages whose framing (TOTALSIZE) holds but that cannot be decoded.
     * Each keeps the fixed header fields that could be read (queue_offset, commit_log_offset,
     * sys_flag, hosts...) and has no strings or body; bad_why[i] says why (owned by the set). */
    int n_bad;
    rmq_msg_t *bad;          /* n_bad views, in body order, in the same allocation */
    const char **bad_why;
    /* Framing lost: TOTALSIZE at body offset lost_at (< the body length) is unusable, and
     * nothing after it could be split into messages; lost_queue_offset is the QUEUEOFFSET
     * field there when one can be read, else -1. */
    int lost;
    size_t lost_at;
    int64_t lost_queue_offset;
    rmq_msgset_infl_t *infl; /* inflated bodies (singly linked), owned */
    char *broker_name;       /* NUL-terminated copy, in the same allocation */
    size_t mem;              /* bytes the set keeps alive: its frame, its allocation and the
                              * inflated bodies (what flow control counts, process_queue.h) */
    int pq_held;             /* its messages held in a process queue (loop thread only) */
    int64_t recv_ns;         /* uv_hrtime() when its pull response arrived (stats), 0 unknown */
} rmq_msgset_t;

/* rmq__msgset_decode_ex() flags. */
#define RMQ_DECODE_RAW_BODY 0x1 /* keep compressed bodies as stored (no inflate): dev broker */
#define RMQ_DECODE_KEEP_BAD 0x2 /* go past messages that cannot be decoded, into set->bad */

/*
 * Decode a PULL_MESSAGE (or CONSUME_MESSAGE_DIRECTLY) body of len bytes at body, which lies
 * inside frame (body may be NULL when len is 0; frame may be NULL when the caller keeps the bytes
 * alive longer than the set, as tests and the development broker do). Every message gets
 * broker_name (copied into the set, may be NULL), min_offset and max_offset (the pull
 * response's minOffset/maxOffset), and owner = the set. On return *out holds the new set
 * (creator reference + one per message).
 *
 * Returns RMQ_OK when the whole body decoded. Returns RMQ_ERR_BAD_MESSAGE when decoding stopped
 * early (truncated body, fields overrunning TOTALSIZE, an unknown compression type, a corrupt
 * zlib, LZ4 or ZSTD stream): *out then holds the messages before the fault, like Java's
 * MessageDecoder.decodes(), and errstr names the message and the field at fault. With
 * RMQ_DECODE_KEEP_BAD, a message whose TOTALSIZE is usable but whose content is not goes to
 * set->bad (one reference each, like the decoded ones) and decoding goes on after it; it still
 * stops where TOTALSIZE is unusable (set->lost). RMQ_ERR_BAD_MESSAGE then means either.
 * Returns RMQ_ERR_NOMEM with *out = NULL. Never reads outside [body, body + len).
 * Loop thread (or any single thread); frame gets one more reference, the caller keeps its own.
 * The set's messages are in body order; message i is set->msgs[i].
 */
int rmq__msgset_decode(rmq_rbuf_t *frame, const char *body, size_t len, const char *broker_name,
                       int64_t min_offset, int64_t max_offset, rmq_msgset_t **out, char *errstr,
                       size_t errstr_size);
int rmq__msgset_decode_ex(rmq_rbuf_t *frame, const char *body, size_t len, const char *broker_name,
                          int64_t min_offset, int64_t max_offset, int flags, rmq_msgset_t **out,
                          char *errstr, size_t errstr_size);

/* n bytes that live as long as set (freed with it); loop thread, before its messages are handed
 * to a consume thread. Aborts when out of memory (small strings only). */
char *rmq__msgset_alloc(rmq_msgset_t *set, size_t n);

rmq_msgset_t *rmq__msgset_keep(rmq_msgset_t *set);
/* Drop one reference; the last one frees the set, its inflated bodies and its frame reference. */
void rmq__msgset_release(rmq_msgset_t *set);
/* Drop the reference held by message m (m->owner); m must not be used afterwards. */
void rmq__msg_release(rmq_msg_t *m);
/* 1 when m is one of its set's undecodable messages (set->bad), else 0. */
int rmq__msg_undecodable(const rmq_msg_t *m);
/* Why m could not be decoded (m undecodable), else NULL. */
const char *rmq__msg_undecodable_why(const rmq_msg_t *m);

/*
 * Look up a property with Java's string2messageProperties rules (PROTOCOL 4.4): segments split at
 * \2, key/value split at the first \1, empty keys or values dropped, the last duplicate wins.
 * Returns a pointer into props and sets *vlen, or NULL.
 */
const char *rmq__props_find(const char *props, size_t plen, const char *key, size_t klen,
                            uint32_t *vlen);

/* Callback form: calls fn for every kept pair in order (duplicates included); stops and returns
 * fn's value when it is non-zero, else returns 0. */
typedef int (*rmq_props_fn)(void *ud, const char *k, size_t klen, const char *v, size_t vlen);
int rmq__props_foreach(const char *props, size_t plen, rmq_props_fn fn, void *ud);

/*
 * Append one name\1value entry to a buffer that holds only a properties string: a \2 goes
 * first unless b is empty, so the result never ends with \2 (MessageDecoder
 * messageProperties2String). A NULL value is skipped (Java skips null values). Returns 0 or
 * RMQ_ERR_NOMEM.
 */
int rmq__props_append(rmq_buf_t *b, const char *key, const char *val);
int rmq__props_append_n(rmq_buf_t *b, const char *key, size_t klen, const char *val, size_t vlen);

/*
 * Retry-topic restoration (PROTOCOL 6.12): when the RETRY_TOPIC property is present, point
 * m->topic at its value; m->store_topic keeps the stored topic. The _for variant applies it only
 * when the stored topic equals group_retry_topic ("%RETRY%" + wrapped group), as Java's
 * resetRetryAndNamespace does. Return 1 when the topic changed, else 0.
 */
int rmq__msg_restore_retry_topic(rmq_msg_t *m);
int rmq__msg_restore_retry_topic_for(rmq_msg_t *m, const char *group_retry_topic, size_t len);

/*
 * offsetMsgId (PROTOCOL 4.6): uppercase hex of store host address (4 or 16 bytes), port (int32)
 * and commit log offset (int64). out needs 57 bytes; returns the length (32 or 56).
 */
int rmq__offset_msg_id(const uint8_t *ip, int ip_len, int32_t port, int64_t offset, char *out);
/* The msgId a Java consumer shows for m (MessageClientExt.getMsgId): its UNIQ_KEY when it has
 * one (of at most 56 characters), else its offsetMsgId. out needs 57 bytes; NUL-terminated. */
void rmq__msg_id(const rmq_msg_t *m, char *out);
/* Decode an offsetMsgId: 32 chars = IPv4, anything else must be 56 (IPv6). ip needs 16 bytes.
 * Returns 0 or RMQ_ERR_INVALID. */
int rmq__offset_msg_id_decode(const char *id, size_t len, uint8_t *ip, int *ip_len, int32_t *port,
                              int64_t *offset);

/*
 * UNIQ_KEY (MessageClientIDSetter.createUniqID): uppercase hex of ip (4 bytes here), pid low 16
 * bits, a per-process random int, ms since the start of the current month (local time) and a
 * process-wide 16-bit counter. out needs 33 bytes; returns 32. Any thread.
 */
int rmq__uniq_id_new(char *out);
/* The same layout from given parts (ip_len 4 or 16); out needs 57 bytes; returns 32 or 56. */
int rmq__uniq_id_make(const uint8_t *ip, int ip_len, uint16_t pid, uint32_t seed, uint32_t ms,
                      uint16_t counter, char *out);

/*
 * Append the stored form of m (PROTOCOL 4.1, the bytes a broker puts in a PULL body) to out:
 * store_topic (or topic when store_topic_len is 0), body as given (already compressed when
 * sys_flag has COMPRESSED), props as given, BODYCRC = crc32(body) & 0x7FFFFFFF (m->body_crc is
 * ignored), hosts as IPv4 or IPv6 by the sys_flag bits. TOPICLEN is 1 byte (magic V1) for topics
 * up to 127 bytes, else 2 bytes (magic V2). One pass, one reserve. Returns 0, RMQ_ERR_NOMEM, or
 * RMQ_ERR_INVALID (topic longer than 32767 bytes, properties longer than 32767 bytes).
 */
int rmq__msg_encode_stored(rmq_buf_t *out, const rmq_msg_t *m);
/* The number of bytes rmq__msg_encode_stored() appends for m. */
size_t rmq__msg_stored_size(const rmq_msg_t *m);

/* zlib-compress src (level like Java's Deflater(level)) into out (appended). 0 or error. */
int rmq__zlib_deflate(const char *src, size_t len, int level, rmq_buf_t *out);

#endif
