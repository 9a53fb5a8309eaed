/*
 * cmd.h -- RemotingCommand: the frame codec (JSON and ROCKETMQ binary headers) and the
 * incremental framer that cuts a byte stream into frames.
 *
 * PROTOCOL.md section 1 (RemotingCommand.java, RocketMQSerializable.java, NettyDecoder.java).
 *
 * Ownership: an rmq_cmd_t owns its remark and extFields strings; a decoded command also holds one
 * reference on the frame buffer its body points into. rmq_cmd_free() releases both.
 * An encoded command's body is borrowed: the caller keeps it alive until the write completes.
 * Threads: any; a command or framer is used by one thread at a time.
 */
#ifndef RMQ_CMD_H
#define RMQ_CMD_H

#include "base/common.h"

#define RMQ_SERIALIZE_JSON 0
#define RMQ_SERIALIZE_ROCKETMQ 1

#define RMQ_FLAG_RESPONSE 0x1
#define RMQ_FLAG_ONEWAY 0x2

/* Netty's maxFrameLength: compared with the frame size including the 4-byte length field. */
#define RMQ_FRAME_MAX_DEFAULT 16777216

typedef struct rmq_kv {
    char *key; /* NUL-terminated, owned by the command */
    char *val;
} rmq_kv_t;

typedef struct rmq_cmd {
    int32_t code;
    int32_t language; /* LanguageCode value (RMQ_LANG_JAVA ...) */
    int32_t version;  /* 401 for everything we send */
    int32_t opaque;
    int32_t flag;  /* RMQ_FLAG_RESPONSE | RMQ_FLAG_ONEWAY */
    int serialize; /* RMQ_SERIALIZE_JSON or RMQ_SERIALIZE_ROCKETMQ: the header's type */
    char *remark;  /* NULL when absent */
    rmq_kv_t *ext; /* extFields in insertion order (decode: wire order, last duplicate wins) */
    int n_ext;
    int cap_ext;
    const char *body; /* NULL when absent */
    size_t body_len;
    rmq_rbuf_t *frame; /* decoded commands: the whole frame (body points into it); else NULL */
    /* -- encoding details (zero is right for almost everything) -- */
    uint8_t fast;      /* RMQ_FAST_*: Java FastCodesHeader field order of a ROCKETMQ header */
    uint8_t fast_dup;  /* ROCKETMQ + fast: also repeat the fast-coded fields in the map part, as
                        * Java does once an RPC hook (ACL) filled extFields; set by decode when a
                        * key appeared twice */
    uint8_t ext_empty; /* JSON: write "extFields":{} even when n_ext == 0 (Java: a custom header
                        * whose fields are all null); set by decode */
    char *strings;     /* decoded commands: one block holding the decoded strings; ext/remark
                        * strings inside it are not freed one by one */
    size_t strings_len;
} rmq_cmd_t;

/*
 * FastCodesHeader (4.9.4 NettyEncoder): for these header classes a ROCKETMQ header carries the
 * class's fields first, in a fixed order, then the remaining extFields in HashMap order. JSON
 * headers are not affected. rmq__cmd_init/_init_response pick the kind from the request code;
 * a decoded request gets it from its code, a decoded response has RMQ_FAST_NONE (its request
 * code is not on the wire): set c->fast before re-encoding it if the order matters.
 */
enum {
    RMQ_FAST_NONE = 0,
    RMQ_FAST_PULL_REQ,  /* PullMessageRequestHeader: PULL_MESSAGE request */
    RMQ_FAST_SEND_REQ,  /* SendMessageRequestHeaderV2: SEND_MESSAGE_V2, SEND_BATCH_MESSAGE,
                         * SEND_REPLY_MESSAGE_V2 requests */
    RMQ_FAST_PULL_RESP, /* PullMessageResponseHeader: any response to PULL_MESSAGE */
    RMQ_FAST_SEND_RESP  /* SendMessageResponseHeader: any response to a SEND_* request */
};

/* Fast kind of a request with this code (is_response 0) or of a response to it (1). */
int rmq__cmd_fast_kind(int32_t request_code, int is_response);

/* A request with code, language JAVA, version 401, flag 0, opaque 0 (the transport assigns it). */
void rmq__cmd_init(rmq_cmd_t *c, int32_t code, int serialize);
/* A response to req: same opaque and serialize type, flag RESPONSE. remark may be NULL. */
void rmq__cmd_init_response(rmq_cmd_t *c, const rmq_cmd_t *req, int32_t code, const char *remark);
void rmq__cmd_free(rmq_cmd_t *c);

/*
 * Set (or replace, keeping its position) an extField; key and value are copied. val NULL removes
 * the key. Return 0 or RMQ_ERR_NOMEM. The insertion order is the Java HashMap insertion order
 * the encoder emulates: put a header's fields in the Java class's declaration order
 * (makeCustomHeaderToNet), then any extra keys in the order Java adds them (e.g. ACL Signature,
 * then AccessKey); it only matters for keys that share a HashMap bucket.
 */
int rmq__cmd_set_ext(rmq_cmd_t *c, const char *key, const char *val);
int rmq__cmd_set_ext_i64(rmq_cmd_t *c, const char *key, int64_t v);
int rmq__cmd_set_ext_bool(rmq_cmd_t *c, const char *key, int v);
int rmq__cmd_set_remark(rmq_cmd_t *c, const char *remark);

/* extField lookup: the value or NULL. */
const char *rmq__cmd_ext(const rmq_cmd_t *c, const char *key);
/* Parse an extField as Java Long.parseLong/Integer.parseInt would.
 * Returns 0, RMQ_ERR_NOT_FOUND (absent) or RMQ_ERR_INVALID (not a number / out of range). */
int rmq__cmd_ext_i64(const rmq_cmd_t *c, const char *key, int64_t *out);
int rmq__cmd_ext_i32(const rmq_cmd_t *c, const char *key, int32_t *out);
/* Boolean.parseBoolean: "true" in any case is true, anything else (or absent) false. */
int rmq__cmd_ext_bool(const rmq_cmd_t *c, const char *key);

/*
 * Append the frame prefix and header to out: [int32 frameLength][int32 type<<24|H][header].
 * frameLength counts c->body_len, so the caller writes the body right after (writev, no copy).
 * The header is what Java 4.9.4's NettyEncoder writes for the same command: JSON as fastjson
 * writes it, extFields in java.util.HashMap order, FastCodesHeader fields first for ROCKETMQ.
 * Returns 0; RMQ_ERR_INVALID (bad serialize type, a key over 32767 bytes in a ROCKETMQ header);
 * RMQ_ERR_TOO_LARGE (header over 16 MiB - 1, or frame over RMQ_FRAME_MAX_DEFAULT); or
 * RMQ_ERR_NOMEM. On error out is left as it was.
 */
int rmq__cmd_encode_header(const rmq_cmd_t *c, rmq_buf_t *out);
/* Append the whole frame, body included. */
int rmq__cmd_encode(const rmq_cmd_t *c, rmq_buf_t *out);

/*
 * Decode one whole frame (starting at the 4-byte length) into c. On success c takes its own
 * reference on frame. Returns 0, or RMQ_ERR_BAD_FRAME (RMQ_ERR_NOMEM) with the reason in errstr
 * (c is then left empty and needs no free).
 * Both header types are accepted on every frame. JSON: any key order, unknown keys and nesting
 * (64 levels), nulls, escapes, numbers or booleans as extFields values (kept as text), language
 * as a name (unknown names become RMQ_LANG_OTHER) or a number. ROCKETMQ: every length is checked
 * against the bytes present; an empty remark, key or value decodes as absent (Java: null).
 * extFields keep the wire order; a repeated key overwrites the earlier value in place.
 * Strings are NUL-terminated: a value carrying "\u0000" reads as cut there.
 */
int rmq__cmd_decode(rmq_rbuf_t *frame, rmq_cmd_t *c, char *errstr, size_t errstr_size);

/* "PULL_MESSAGE(11) opaque=5 flag=0" style summary for logs. */
void rmq__cmd_describe(const rmq_cmd_t *c, char *dst, size_t dst_size);

/*
 * The framer cuts a TCP byte stream into frames. Each complete frame is handed over in its own
 * reference-counted buffer (ownership passes to the callback). Large frames are read straight
 * into their final buffer: rmq__framer_alloc() tells libuv's alloc callback where to read.
 */
typedef void (*rmq_frame_cb)(void *ud, rmq_rbuf_t *frame);

typedef struct rmq_framer {
    size_t max_frame;  /* limit on 4 + frameLength, as Netty's maxFrameLength */
    uint8_t lenbuf[4]; /* the length word while it is incomplete */
    size_t lenhave;
    rmq_rbuf_t *cur;     /* frame being filled, or NULL */
    size_t have;         /* bytes of cur filled */
    unsigned epoch;      /* bumped by rmq__framer_reset: a callback may reset to stop the feed */
    int err;             /* sticky error after a bad length word (0 when healthy) */
    char scratch[65536]; /* read buffer used between frames (small frames, several per read) */
} rmq_framer_t;

/* max_frame 0 means RMQ_FRAME_MAX_DEFAULT. */
void rmq__framer_init(rmq_framer_t *f, size_t max_frame);
void rmq__framer_reset(rmq_framer_t *f); /* drop any partial frame (also the way to free it) */
/* Where the next read should land: inside the current frame when its length is known,
 * else the scratch buffer. */
void rmq__framer_alloc(rmq_framer_t *f, char **base, size_t *len);
/*
 * Account for n bytes that were read into the area rmq__framer_alloc() returned, or feed bytes
 * from anywhere else (rmq__framer_feed). Calls cb for each complete frame. Returns 0, or
 * RMQ_ERR_TOO_LARGE / RMQ_ERR_BAD_FRAME / RMQ_ERR_NOMEM (errstr says why); the stream is then
 * unusable and every later call fails the same way until rmq__framer_reset().
 * The callback must not free the framer; it may call rmq__framer_reset() (e.g. before closing the
 * connection), and then no further frame of this feed is delivered and the call returns 0.
 * Validated here: frameLength >= 4 and 4 + frameLength <= max_frame. The rest is
 * rmq__cmd_decode's job.
 */
int rmq__framer_commit(rmq_framer_t *f, const char *base, size_t n, rmq_frame_cb cb, void *ud,
                       char *errstr, size_t errstr_size);
int rmq__framer_feed(rmq_framer_t *f, const char *p, size_t n, rmq_frame_cb cb, void *ud,
                     char *errstr, size_t errstr_size);

#endif
