/*
 * shdict.h -- shared dictionaries: the named key/value stores a script declares with
 * `shared = { counters = "16m" }` and reads as rmq.shared.counters in every Lua state of the
 * consumer (control and consume), with the semantics of OpenResty's ngx.shared.DICT.
 *
 * A set (rmq_shdicts_t) holds the dictionaries of one consumer; it outlives every Lua state that
 * uses it, so the values survive a reload of the script. Each dictionary has a size limit in
 * bytes (every entry is charged its key, its value and a fixed header) and evicts the least
 * recently used entries when a store would not fit (the store then reports forcible = true).
 * Entries may expire (a TTL in ms on the monotonic clock); an expired entry reads as absent and
 * is freed first when room is needed.
 *
 * The functions Lua calls are declared in rmqlua_ffi.h (leaf functions: they never raise, never
 * call back, and hold the dictionary's mutex only for the operation itself).
 *
 * Ownership: a set owns its dictionaries; a dictionary lives as long as its set (a declaration
 * never removes one). The set's owner (the consumer, or a Lua state for `rmqlua test` / `check`)
 * frees it after every state that used it is closed.
 * Threads: every function may be called from any thread at any time between new and free; each
 * dictionary has its own mutex, the set one for its list of names.
 */
#ifndef RMQ_SHDICT_H
#define RMQ_SHDICT_H

#include "base/common.h"
#include "rmqlua_ffi.h"

/* The smallest size a dictionary may be declared with (OpenResty's lua_shared_dict minimum). */
#define RMQ_SHDICT_MIN_SIZE 8192
/* Longest key (OpenResty's limit). */
#define RMQ_SHDICT_MAX_KEY 65535
/* Bytes charged for an entry besides its key and value. */
size_t rmq__shdict_entry_overhead(void);

/* Number of dictionaries in the set (any thread). */
int rmq__shdicts_count(rmq_shdicts_t *s);

#endif
