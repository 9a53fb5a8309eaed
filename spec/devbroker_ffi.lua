-- devbroker_ffi.lua: the development broker's exported C API (runtime/devbroker/devbroker.h) declared for
-- the FFI once per Lua state, for every spec that runs a broker in-process.
--
--   local lib = require "devbroker_ffi"   -- helpers.lib() with rmq_devbroker_* declared
local ffi = require "ffi"
local helpers = require "helpers"

-- One declaration at a time, each allowed to exist already (a spec may declare some itself).
for decl in ([[
typedef struct rmq_devbroker rmq_devbroker_t;
rmq_devbroker_t *rmq_devbroker_start(const char *args, char *errstr, size_t errstr_size);
void rmq_devbroker_stop(rmq_devbroker_t *db);
const char *rmq_devbroker_addr(rmq_devbroker_t *db);
int rmq_devbroker_broker_count(rmq_devbroker_t *db);
const char *rmq_devbroker_broker_addr(rmq_devbroker_t *db, int idx);
const char *rmq_devbroker_broker_name(rmq_devbroker_t *db, int idx);
int rmq_devbroker_slave(rmq_devbroker_t *db, int idx, int k);
int rmq_devbroker_push_error(rmq_devbroker_t *db, int target, int req_code, int code, int count);
void rmq_devbroker_clear_errors(rmq_devbroker_t *db);
int rmq_devbroker_set_down(rmq_devbroker_t *db, int broker, int down);
int rmq_devbroker_set_latency(rmq_devbroker_t *db, int target, int req_code, int ms);
int rmq_devbroker_count(rmq_devbroker_t *db, int target, int req_code);
int rmq_devbroker_wait(rmq_devbroker_t *db, int target, int req_code, int n, int timeout_ms);
void rmq_devbroker_reset_counts(rmq_devbroker_t *db);
int rmq_devbroker_connections(rmq_devbroker_t *db);
int rmq_devbroker_request_ext(rmq_devbroker_t *db, int target, int req_code, int idx,
                              const char *key, char *buf, size_t size);
int rmq_devbroker_request_body(rmq_devbroker_t *db, int target, int req_code, int idx,
                               char *buf, size_t size);
int rmq_devbroker_create_topic(rmq_devbroker_t *db, int broker, const char *topic, int queues);
int64_t rmq_devbroker_produce(rmq_devbroker_t *db, int broker, const char *topic, int queue_id,
                              const char *tags, const char *keys, const char *body, size_t body_len);
int64_t rmq_devbroker_skip_offsets(rmq_devbroker_t *db, int broker, const char *topic,
                                   int queue_id, int64_t n);
int rmq_devbroker_corrupt(rmq_devbroker_t *db, int broker, const char *topic, int queue_id,
                          int64_t offset, size_t pos, unsigned mask);
int64_t rmq_devbroker_produce_props(rmq_devbroker_t *db, int broker, const char *topic,
                                    int queue_id, const char *tags, const char *keys,
                                    const char *props, size_t props_len, const char *body,
                                    size_t body_len);
int64_t rmq_devbroker_max_offset(rmq_devbroker_t *db, int broker, const char *topic, int queue_id);
int64_t rmq_devbroker_min_offset(rmq_devbroker_t *db, int broker, const char *topic, int queue_id);
int64_t rmq_devbroker_committed_offset(rmq_devbroker_t *db, int broker, const char *group,
                                       const char *topic, int queue_id);
int rmq_devbroker_group_size(rmq_devbroker_t *db, int broker, const char *group);
int rmq_devbroker_set_suggest(rmq_devbroker_t *db, int broker, int64_t broker_id);
int rmq_devbroker_set_told_max(rmq_devbroker_t *db, int broker, int64_t max_offset);
int rmq_devbroker_set_told_max_query(rmq_devbroker_t *db, int broker, int64_t max_offset);
int rmq_devbroker_lock_owner(rmq_devbroker_t *db, int broker, const char *group,
                             const char *topic, int queue_id, char *buf, size_t size);
void rmq_log_set_level(int level);
]]):gmatch("[^;]+;") do
  pcall(ffi.cdef, decl)
end

return helpers.lib()
