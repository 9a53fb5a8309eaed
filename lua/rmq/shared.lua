-- rmq.shared: the script's shared dictionaries, `rmq.shared.NAME` in every state of a consumer.
--
-- A script declares them with `shared = { counters = "16m", seen = "64m" }` (a size limit each:
-- bytes, or a number with k, m or g). The dictionaries live in C (runtime/luahost/shdict.c), one mutex
-- each, shared by the control state and every consume thread, and they survive a reload of the
-- script. The methods follow OpenResty's ngx.shared.DICT:
--
--   value, flags = d:get(key)                 nil when absent or expired (flags only when not 0)
--   value, flags, stale = d:get_stale(key)    also an expired value, stale = true
--   ok, err, forcible = d:set(key, value, exptime?, flags?)   value nil deletes
--   ok, err = d:safe_set(key, value, exptime?, flags?)        never evicts: "no memory"
--   ok, err, forcible = d:add(...)            only when absent: else false, "exists"
--   ok, err = d:safe_add(...)
--   ok, err, forcible = d:replace(...)        only when present: else false, "not found"
--   d:delete(key)
--   newval, err, forcible = d:incr(key, value, init?, init_ttl?)  absent without init:
--                                             nil, "not found"; a non-number: nil, "not a number"
--   ttl, err = d:ttl(key)                     seconds left (0 = never expires), or nil, "not found"
--   ok, err = d:expire(key, exptime)          exptime 0 = never; nil, "not found"
--   d:flush_all()                             every entry expired (memory reused as needed)
--   n = d:flush_expired(max_count?)
--   keys = d:get_keys(max_count?)             default 1024, 0 = all; most recently used first
--   d:capacity(), d:free_space()              bytes
-- Values are strings, numbers or booleans; exptime is in seconds (0.001 resolution, 0 = never).
-- A store that does not fit evicts the least recently used entries (forcible = true).
-- `get` of a number or boolean allocates nothing on the Lua heap.
local ffi = require "ffi"
local core = require "rmq.core"

local C = core.C
local ffi_string, ffi_cast = ffi.string, ffi.cast
local type, tostring, tonumber, error, floor = type, tostring, tonumber, error, math.floor
local host = package.loaded["rmq.host"] or {}

local M = {}

local T_NIL, T_BOOLEAN, T_NUMBER, T_STRING = 0, 1, 3, 4
-- RMQ_SHDICT_SET, _ADD, _REPLACE, _SAFE (rmqlua_ffi.h)
local SET, ADD, REPLACE, SAFE = 0, 1, 2, 0x10

-- Out-parameters, made once per state.
local num_p = ffi.new("double[1]")
local str_p = ffi.new("char *[1]")
local len_p = ffi.new("size_t[1]")
local flags_p = ffi.new("uint32_t[1]")
local stale_p = ffi.new("int[1]")
local err_p = ffi.new("const char *[1]")
local forcible_p = ffi.new("int[1]")
local keys_p = ffi.new("rmq_shdict_key_t *[1]")
local STRBUF = 4096
local strbuf = ffi.new("char[?]", STRBUF)

-- The set of dictionaries: the consumer's (rmq.host.shdicts, an address), else one of this
-- state's own (rmqlua test / check, specs), freed with the state.
local set
local function the_set()
  if set == nil then
    if host.shdicts and host.shdicts ~= 0 then
      set = ffi_cast("rmq_shdicts_t *", host.shdicts)
    else
      set = ffi.gc(C.rmq_shdicts_new(), C.rmq_shdicts_free)
    end
  end
  return set
end

local methods = {}
local mt = { __index = methods }

local function zone(self)
  if type(self) ~= "table" or getmetatable(self) ~= mt then
    error('bad "zone" argument (call it as dict:method(...), with a colon)', 3)
  end
  return self.cd
end

-- Returns key, nil or nil, err.
local function check_key(key)
  if key == nil then return nil, "nil key" end
  if type(key) ~= "string" then key = tostring(key) end
  local n = #key
  if n == 0 then return nil, "empty key" end
  if n > 65535 then return nil, "key too long" end
  return key
end

local function getv(self, key, stale)
  local d = zone(self)
  local k, kerr = check_key(key)
  if not k then return nil, kerr end
  str_p[0] = strbuf
  len_p[0] = STRBUF
  local t = C.rmq_shdict_get(d, k, #k, stale, num_p, str_p, len_p, flags_p, stale_p)
  local v
  if t == T_NUMBER then
    v = num_p[0]
  elseif t == T_BOOLEAN then
    v = num_p[0] ~= 0
  elseif t == T_STRING then
    local p = str_p[0]
    v = ffi_string(p, len_p[0])
    if p ~= strbuf then C.rmq_shdict_free_buf(p) end
  else
    return nil
  end
  local fl = flags_p[0]
  if stale == 1 then return v, fl ~= 0 and fl or nil, stale_p[0] == 1 end
  if fl ~= 0 then return v, fl end
  return v
end

function methods.get(self, key) return getv(self, key, 0) end
function methods.get_stale(self, key) return getv(self, key, 1) end

local function ms_of(sec, what, level)
  if sec == nil then return 0 end
  if type(sec) ~= "number" or sec < 0 or sec ~= sec then
    error('bad "' .. what .. '" argument', level + 1)
  end
  if sec == 0 then return 0 end
  local ms = floor(sec * 1000)
  return ms < 1 and 1 or ms
end

local function store(self, op, key, value, exptime, flags)
  local d = zone(self)
  local k, kerr = check_key(key)
  if not k then return nil, kerr end
  local ms = ms_of(exptime, "exptime", 3)
  if flags == nil then
    flags = 0
  elseif type(flags) ~= "number" or flags < 0 or flags > 4294967295 or flags % 1 ~= 0 then
    error('bad "flags" argument', 3)
  end
  local tv, vt, str, slen, num = type(value), T_NIL, nil, 0, 0
  if tv == "string" then vt, str, slen = T_STRING, value, #value
  elseif tv == "number" then vt, num = T_NUMBER, value
  elseif tv == "boolean" then vt, num = T_BOOLEAN, value and 1 or 0
  elseif tv ~= "nil" then return nil, "bad value type"
  end
  local rc = C.rmq_shdict_store(d, op, k, #k, vt, str, slen, num, ms, flags, err_p, forcible_p)
  if rc == 0 then return true, nil, forcible_p[0] == 1 end
  return false, ffi_string(err_p[0]), forcible_p[0] == 1
end

-- set, add and replace return ok, err, forcible; safe_set and safe_add (which never evict) ok,
-- err.
local function store_method(op)
  return function(self, key, value, exptime, flags)
    return store(self, op, key, value, exptime, flags)
  end
end
local function safe_store_method(op)
  return function(self, key, value, exptime, flags)
    local ok, err = store(self, op + SAFE, key, value, exptime, flags)
    return ok, err
  end
end
methods.set, methods.safe_set = store_method(SET), safe_store_method(SET)
methods.add, methods.safe_add = store_method(ADD), safe_store_method(ADD)
methods.replace = store_method(REPLACE)
function methods.delete(self, key)
  return store(self, SET, key, nil)
end

function methods.incr(self, key, value, init, init_ttl)
  local d = zone(self)
  local k, kerr = check_key(key)
  if not k then return nil, kerr end
  if type(value) ~= "number" then
    value = tonumber(value)
    if not value then error("cannot convert 'value' to number", 2) end
  end
  local has_init, iv, ttl = 0, 0, 0
  if init ~= nil then
    iv = tonumber(init)
    if not iv then error("cannot convert 'init' to number", 2) end
    has_init = 1
  end
  if init_ttl ~= nil then
    if init == nil then error('must provide "init" when providing "init_ttl"', 2) end
    ttl = ms_of(init_ttl, "init_ttl", 2)
  end
  num_p[0] = value
  local rc = C.rmq_shdict_incr(d, k, #k, num_p, has_init, iv, ttl, err_p, forcible_p)
  if rc ~= 0 then return nil, ffi_string(err_p[0]) end
  if init == nil then return num_p[0] end
  return num_p[0], nil, forcible_p[0] == 1
end

function methods.ttl(self, key)
  local d = zone(self)
  local k, kerr = check_key(key)
  if not k then return nil, kerr end
  if C.rmq_shdict_ttl(d, k, #k, num_p) ~= 0 then return nil, "not found" end
  return num_p[0] / 1000
end

function methods.expire(self, key, exptime)
  local d = zone(self)
  local k, kerr = check_key(key)
  if not k then return nil, kerr end
  if exptime == nil then error('bad "exptime" argument', 2) end
  local ms = ms_of(exptime, "exptime", 2)
  if C.rmq_shdict_expire(d, k, #k, ms) ~= 0 then return nil, "not found" end
  return true
end

function methods.flush_all(self)
  C.rmq_shdict_flush_all(zone(self))
end

function methods.flush_expired(self, max_count)
  local d = zone(self)
  if max_count ~= nil and type(max_count) ~= "number" then error('bad "max_count" argument', 2) end
  return C.rmq_shdict_flush_expired(d, max_count or 0)
end

function methods.get_keys(self, max_count)
  local d = zone(self)
  if max_count == nil then max_count = 1024 end
  if type(max_count) ~= "number" or max_count < 0 then error('bad "max_count" argument', 2) end
  local n = C.rmq_shdict_keys(d, max_count, keys_p)
  local block = keys_p[0]
  local out = {}
  for i = 0, n - 1 do out[i + 1] = ffi_string(block[i].key, block[i].len) end
  if block ~= nil then C.rmq_shdict_free_buf(block) end
  return out
end

function methods.capacity(self) return C.rmq_shdict_capacity(zone(self)) end
function methods.free_space(self) return C.rmq_shdict_free_space(zone(self)) end

-- rmq.shared: NAME -> dictionary object, made when first used.
M.dicts = setmetatable({}, { __index = function(t, name)
  if type(name) ~= "string" then return nil end
  local cd = C.rmq_shdicts_find(the_set(), name)
  if cd == nil then
    error("rmq.shared." .. name .. ": no such shared dictionary (declare it in the script: "
      .. "shared = { " .. name .. " = \"1m\" })", 2)
  end
  local d = setmetatable({ cd = cd, name = name }, mt)
  rawset(t, name, d)
  return d
end })

-- Size text ("16m", "64k", "1g", "8192") or a number of bytes -> bytes, or nil, message.
function M.parse_size(v)
  if type(v) == "number" then
    if v % 1 ~= 0 then return nil, "must be a whole number of bytes" end
    return v
  end
  if type(v) ~= "string" then return nil, "must be a size such as \"16m\" or \"64k\", got " .. type(v) end
  local n, unit = v:match("^%s*(%d+)%s*([kKmMgG]?)%s*$")
  if not n then return nil, "bad size \"" .. v .. "\" (a number with k, m or g, such as \"16m\")" end
  local mult = ({ [""] = 1, k = 1024, m = 1024 ^ 2, g = 1024 ^ 3 })[unit:lower()]
  return tonumber(n) * mult
end

M.MIN_SIZE = 8192

-- Declare the dictionaries of a loaded script (spec.__shared: { {name=, size=, line=} ... })
-- in this state's set. Returns true, or nil, line, message.
function M.declare(list)
  local s = the_set()
  local err = ffi.new("char[256]")
  for _, e in ipairs(list) do
    if C.rmq_shdicts_declare(s, e.name, e.size, err, 256) == nil then
      return nil, e.line, ffi_string(err)
    end
  end
  return true
end

return M
