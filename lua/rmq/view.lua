-- rmq.view: messages as FFI views (ffi.metatype on rmq_view_t, a box holding one rmq_msg_t *).
--
-- Fields (m.<name>):
--   topic, store_topic, tags, keys, broker_name   strings (tags/keys nil when absent)
--   body          the body as a Lua string, made on first access and cached for the call
--   body_ptr, body_len   zero-copy access: const char * cdata and length
--   properties    table of all properties, built on first access (cached for the call)
--   msg_id        UNIQ_KEY when present, else offset_msg_id (what a Java consumer reports)
--   offset_msg_id, born_host, store_host   strings ("1.2.3.4:5678")
--   queue_id, reconsume_times, sys_flag, flag, body_crc   numbers
--   queue_offset, commit_log_offset, born_timestamp, store_timestamp,
--   prepared_tx_offset   int64 cdata (use tonumber() when a double is enough)
--   m:property(name)     one property value (string or nil), without building the table
--
-- A view is valid while the handler runs. When it returns the dispatcher clears the pointer;
-- a view kept after that raises "message view used after its handler returned" instead of
-- reading memory that is gone. Copy what you need (m.body is a copy) during the call.
--
-- Threads: one module per Lua state; the caches are that state's.
local ffi = require "ffi"
local core = require "rmq.core"

local C = core.C
local str = ffi.string
local error, tostring = error, tostring

local M = {}

local idbuf = ffi.new("char[64]")
local lenbuf = ffi.new("uint32_t[1]")

-- Per-call caches keyed by view; the dispatcher clears them when M.dirty is set.
local body_cache, props_cache = {}, {}
M.dirty = false

local function opt_str(p, n)
  if n == 0 then return nil end
  return str(p, n)
end

local function parse_props(p, n)
  local t = {}
  if n == 0 then return t end
  local s = str(p, n)
  -- Java string2messageProperties: split at \2, key/value at the first \1, empty ones dropped.
  for seg in (s .. "\2"):gmatch("([^\2]*)\2") do
    local k, v = seg:match("^([^\1]*)\1(.*)$")
    if k and k ~= "" and v ~= "" then t[k] = v end
  end
  return t
end
M.parse_props = parse_props

-- cache[v], made on first access as make(p, n) (and the caches marked for clearing).
local function cached(cache, v, make, p, n)
  local x = cache[v]
  if x == nil then
    x = make(p, n)
    cache[v] = x
    M.dirty = true
  end
  return x
end

local function property(v, name)
  local m = v.m
  if m == nil then error("message view used after its handler returned", 2) end
  if type(name) ~= "string" then error("m:property(name): name must be a string", 2) end
  local p = C.rmq_msg_prop(m, name, lenbuf)
  if p == nil then return nil end
  return str(p, lenbuf[0])
end

local get = {
  topic = function(m) return str(m.topic, m.topic_len) end,
  store_topic = function(m)
    if m.store_topic_len == 0 then return str(m.topic, m.topic_len) end
    return str(m.store_topic, m.store_topic_len)
  end,
  tags = function(m) return opt_str(m.tags, m.tags_len) end,
  keys = function(m) return opt_str(m.keys, m.keys_len) end,
  broker_name = function(m) return opt_str(m.broker_name, m.broker_name_len) end,
  body = function(m, v) return cached(body_cache, v, str, m.body, m.body_len) end,
  body_ptr = function(m) return m.body end,
  body_len = function(m) return m.body_len end,
  properties = function(m, v) return cached(props_cache, v, parse_props, m.props, m.props_len) end,
  offset_msg_id = function(m)
    local n = C.rmq_msg_offset_msg_id(m, idbuf)
    return str(idbuf, n)
  end,
  born_host = function(m)
    local n = C.rmq_msg_host(m, 0, idbuf)
    return str(idbuf, n)
  end,
  store_host = function(m)
    local n = C.rmq_msg_host(m, 1, idbuf)
    return str(idbuf, n)
  end,
  queue_id = function(m) return m.queue_id end,
  reconsume_times = function(m) return m.reconsume_times end,
  sys_flag = function(m) return m.sys_flag end,
  flag = function(m) return m.flag end,
  body_crc = function(m) return m.body_crc end,
  queue_offset = function(m) return m.queue_offset end,
  commit_log_offset = function(m) return m.commit_log_offset end,
  born_timestamp = function(m) return m.born_timestamp end,
  store_timestamp = function(m) return m.store_timestamp end,
  prepared_tx_offset = function(m) return m.prepared_tx_offset end,
  property = function() return property end,
}
get.msg_id = function(m)
  if m.uniq_key_len > 0 then return str(m.uniq_key, m.uniq_key_len) end
  return get.offset_msg_id(m)
end
M.fields = get

local mt = {
  __index = function(v, k)
    local m = v.m
    if m == nil then
      error("message view used after its handler returned (copy what you need, e.g. m.body, "
        .. "during the call)", 2)
    end
    local f = get[k]
    if f == nil then error("message has no field '" .. tostring(k) .. "'", 2) end
    return f(m, v)
  end,
  __newindex = function(_, k)
    error("message views are read-only (field '" .. tostring(k) .. "')", 2)
  end,
  __tostring = function(v)
    local m = v.m
    if m == nil then return "rmq message (expired view)" end
    return "rmq message " .. get.topic(m) .. "#" .. m.queue_id .. "@" .. tostring(m.queue_offset)
  end,
}

-- The view type: rmq_view_t with the accessors above. new(ptr) makes a view of ptr.
local view_t = ffi.metatype("rmq_view_t", mt)
M.new = view_t
M.ctype = view_t

-- Clear the per-call caches (the dispatcher calls this when M.dirty is set).
local clear = require "table.clear"
function M.reset()
  clear(body_cache)
  clear(props_cache)
  M.dirty = false
end

return M
