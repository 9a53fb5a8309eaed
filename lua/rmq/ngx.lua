-- rmq.ngx: the subset of OpenResty's `ngx` API that the pure-Lua OpenResty drivers use (Debian's
-- lua-nginx-redis, lua-nginx-memcached, the lua-nginx-websocket client, the lua-nginx-kafka
-- producer), over rmq's cosockets, light threads and log. `require "rmq.ngx"` returns the table;
-- the option lua_ngx_shim = true installs it as the global `ngx` in every state of the script
-- before the script runs (rmq.script), which is where those drivers look for it.
--
--   ngx.socket.tcp            rmq.socket.tcp (connect, send, receive, receiveuntil, settimeout(s),
--                             setkeepalive, getreusedtimes, close)
--   ngx.sleep, ngx.now        rmq.sleep, rmq.now; ngx.time() whole seconds; ngx.update_time()
--                             does nothing (ngx.now is never cached)
--   ngx.thread                spawn / wait / kill = rmq.thread
--   ngx.timer.at(delay, f, ...)  f(premature, ...) in a light thread of this state after delay s
--   ngx.log(level, ...)       the arguments joined without separators, to the runtime's log;
--                             ngx.STDERR .. ngx.DEBUG (EMERG, ALERT, CRIT, ERR: error; WARN:
--                             warn; NOTICE, INFO: info; DEBUG: debug)
--   ngx.null                  a NULL lightuserdata, equal to cjson.null and rmq.json.null
--   ngx.worker.pid/id/count/exiting, ngx.config.debug/ngx_lua_version/subsystem/nginx_version
--   ngx.crc32_short/crc32_long, ngx.encode_base64/decode_base64, ngx.escape_uri/unescape_uri
--   ngx.sha1_bin, ngx.md5, ngx.md5_bin, ngx.hmac_sha1   OpenSSL's libcrypto through the FFI
--   ngx.re.match/find         PCRE2 (libpcre2-8, through the FFI), OpenResty's options (a d i j
--                             m o s u x D J); captures [0], [1].. (false when unmatched), names
--   ngx.var, ngx.ctx          empty tables; ngx.shared: the script's rmq.shared dictionaries
--
-- Threads: one copy per Lua state; timers and sockets belong to the state (the consume thread)
-- that made them.
local ffi = require "ffi"
local bit = require "bit"
local co = require "rmq.co"

local type, tostring, select, error, tonumber = type, tostring, select, error, tonumber
local pairs, pcall, unpack, getmetatable, setmetatable = pairs, pcall, unpack, getmetatable, setmetatable
local concat, floor, char, byte = table.concat, math.floor, string.char, string.byte
local band, bor, bxor, rshift, lshift = bit.band, bit.bor, bit.bxor, bit.rshift, bit.lshift

local host = package.loaded["rmq.host"] or {}

local ngx = {}

-- ---- log -----------------------------------------------------------------------------------
ngx.STDERR, ngx.EMERG, ngx.ALERT, ngx.CRIT, ngx.ERR = 0, 1, 2, 3, 4
ngx.WARN, ngx.NOTICE, ngx.INFO, ngx.DEBUG = 5, 6, 7, 8
ngx.OK, ngx.ERROR, ngx.AGAIN, ngx.DONE, ngx.DECLINED = 0, -1, -2, -4, -5

-- ngx level -> the runtime's (0 error, 1 warn, 2 info, 3 debug)
local TO_RMQ = { [0] = 0, 0, 0, 0, 0, 1, 2, 2, 3 }
local NAMES = { [0] = "ERROR", "WARN", "INFO", "DEBUG" }

local function write_log(lv, msg)
  if host.log then return host.log(lv, msg) end
  io.stderr:write("[", NAMES[lv], "] lua: ", msg, "\n")
end

local null -- set below

local function logstr(v)
  if v == nil then return "nil" end
  if v == null then return "null" end
  local tv = type(v)
  if tv == "boolean" then return v and "true" or "false" end
  if tv == "string" or tv == "number" then return tostring(v) end
  if tv == "table" then
    local mt = getmetatable(v)
    if mt and mt.__tostring then return tostring(v) end
  end
  error("bad argument to 'log' (string, number, boolean, nil, ngx.null or a table with "
    .. "__tostring expected, got " .. tv .. ")", 3)
end

function ngx.log(level, ...)
  local lv = type(level) == "number" and TO_RMQ[level]
  if not lv then
    error("ngx.log: bad log level " .. tostring(level) .. " (ngx.STDERR .. ngx.DEBUG)", 2)
  end
  local n = select("#", ...)
  local parts = {}
  for i = 1, n do parts[i] = logstr((select(i, ...))) end
  write_log(lv, concat(parts))
end

-- ---- null, time, sleep, threads --------------------------------------------------------------
null = require("rmq.json").null
ngx.null = null

ngx.sleep = co.sleep
ngx.now = co.now
ngx.thread = co.thread
function ngx.time() return floor(co.now()) end
function ngx.update_time() end

ngx.socket = setmetatable({}, { __index = function(t, k)
  if k == "tcp" then -- loaded when first used (it needs the runtime's FFI symbols)
    local v = require("rmq.socket").tcp
    rawset(t, k, v)
    return v
  end
end })

-- ---- worker, config ----------------------------------------------------------------------------
pcall(ffi.cdef, "int getpid(void);")
local exiting = false
local tidx = tonumber(host.thread_index)
ngx.worker = {
  pid = function() return ffi.C.getpid() end,
  id = function() return (tidx and tidx >= 0) and tidx or nil end,
  count = function() return tonumber(host.thread_count) or 1 end,
  exiting = function() return exiting end,
}
ngx.config = {
  debug = false,
  subsystem = "rmqlua",
  ngx_lua_version = 10026, -- the ngx_lua API level this shim answers for (0.10.26)
  nginx_version = 1025003,
  prefix = function() return "" end,
}

-- ---- timers ------------------------------------------------------------------------------------
--[[
ngx.timer.at(delay, f, ...) -> true, or nil and an error. f(premature, ...) runs in a light
thread of this state, not tied to the batch that made it (it is not killed when that batch's
handler returns), once delay seconds have passed and this state's loop runs: while a handler of
this thread waits (a cosocket, ngx.sleep, ...). At shutdown (the state's shutdown hook) every
timer that has not run yet runs at once with premature = true, as OpenResty's do when the worker
exits.
]]
local pending = {} -- timer -> true
local ntimers = 0
ngx.timer = {}

local function fire(t, premature)
  if t.fired then return end
  t.fired = true
  pending[t] = nil
  ntimers = ntimers - 1
  local ok, err = pcall(t.f, premature, unpack(t.args, 1, t.args.n))
  if not ok then write_log(0, "ngx.timer callback failed: " .. tostring(err)) end
end

function ngx.timer.at(delay, f, ...)
  if type(delay) ~= "number" or delay ~= delay or delay < 0 then
    error("ngx.timer.at: bad delay " .. tostring(delay) .. " (seconds >= 0)", 2)
  end
  if type(f) ~= "function" then
    error("ngx.timer.at: expects a function, got " .. type(f), 2)
  end
  if exiting then return nil, "process exiting" end
  local t = { f = f, args = { n = select("#", ...), ... } }
  pending[t] = true
  ntimers = ntimers + 1
  co.spawn_detached(function()
    co.sleep(delay)
    if not exiting then fire(t, false) end
  end)
  return true
end

function ngx.timer.every(delay, f, ...)
  if type(delay) ~= "number" or delay ~= delay or delay <= 0 then
    error("ngx.timer.every: bad delay " .. tostring(delay) .. " (seconds > 0)", 2)
  end
  if type(f) ~= "function" then
    error("ngx.timer.every: expects a function, got " .. type(f), 2)
  end
  local args = { n = select("#", ...), ... }
  local function again(premature)
    f(premature, unpack(args, 1, args.n))
    if not premature then ngx.timer.at(delay, again) end
  end
  return ngx.timer.at(delay, again)
end

function ngx.timer.pending_count() return ntimers end
function ngx.timer.running_count() return 0 end

-- The state stops (its shutdown hook, from rmq.dispatch): ngx.worker.exiting() is true from now
-- on, and every timer not yet run runs with premature = true.
function ngx._stop()
  exiting = true
  local ts = {}
  for t in pairs(pending) do ts[#ts + 1] = t end
  for i = 1, #ts do fire(ts[i], true) end
end

-- ---- crc32 (zlib's CRC-32), base64, URI escapes -----------------------------------------------
local crc_table = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if band(c, 1) ~= 0 then c = bxor(rshift(c, 1), 0xEDB88320) else c = rshift(c, 1) end
  end
  crc_table[i] = c
end

local function crc32(s)
  if type(s) ~= "string" then s = tostring(s) end
  local c = 0xFFFFFFFF
  for i = 1, #s do
    c = bxor(rshift(c, 8), crc_table[band(bxor(c, byte(s, i)), 0xFF)])
  end
  c = bxor(c, 0xFFFFFFFF)
  if c < 0 then c = c + 4294967296 end
  return c
end
ngx.crc32_short, ngx.crc32_long = crc32, crc32

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local b64enc, b64dec = {}, {}
for i = 1, 64 do
  b64enc[i - 1] = B64:sub(i, i)
  b64dec[byte(B64, i)] = i - 1
end

function ngx.encode_base64(s, no_padding)
  if s == nil then s = "" end
  if type(s) ~= "string" then
    if type(s) ~= "number" then
      error("ngx.encode_base64: string expected, got " .. type(s), 2)
    end
    s = tostring(s)
  end
  local out, n = {}, #s
  for i = 1, n - 2, 3 do
    local a, b, c = byte(s, i, i + 2)
    local v = bor(lshift(a, 16), lshift(b, 8), c)
    out[#out + 1] = b64enc[rshift(v, 18)] .. b64enc[band(rshift(v, 12), 63)]
      .. b64enc[band(rshift(v, 6), 63)] .. b64enc[band(v, 63)]
  end
  local rest = n % 3
  if rest == 1 then
    local v = lshift(byte(s, n), 16)
    out[#out + 1] = b64enc[rshift(v, 18)] .. b64enc[band(rshift(v, 12), 63)]
      .. (no_padding and "" or "==")
  elseif rest == 2 then
    local a, b = byte(s, n - 1, n)
    local v = bor(lshift(a, 16), lshift(b, 8))
    out[#out + 1] = b64enc[rshift(v, 18)] .. b64enc[band(rshift(v, 12), 63)]
      .. b64enc[band(rshift(v, 6), 63)] .. (no_padding and "" or "=")
  end
  return concat(out)
end

-- nil when s is not base64 (padding optional, as in OpenResty).
function ngx.decode_base64(s)
  if type(s) ~= "string" then
    error("ngx.decode_base64: string expected, got " .. type(s), 2)
  end
  s = s:gsub("=+$", "")
  if #s % 4 == 1 then return nil end
  local out, acc, bits = {}, 0, 0
  for i = 1, #s do
    local v = b64dec[byte(s, i)]
    if not v then return nil end
    acc = bor(lshift(band(acc, 0xFFFF), 6), v)
    bits = bits + 6
    if bits >= 8 then
      bits = bits - 8
      out[#out + 1] = char(band(rshift(acc, bits), 0xFF))
    end
  end
  return concat(out)
end

function ngx.escape_uri(s)
  if s == nil then return "" end
  return (tostring(s):gsub("[^%w%-_%.~]", function(c) return ("%%%02X"):format(byte(c)) end))
end

function ngx.unescape_uri(s)
  if s == nil then return "" end
  s = tostring(s):gsub("+", " ")
  return (s:gsub("%%(%x%x)", function(h) return char(tonumber(h, 16)) end))
end

-- ---- digests: OpenSSL's libcrypto (the runtime links it for TLS), through the FFI -------------
-- dlopen()ed once more and never closed, as rmq.ngx_re does with PCRE2: a state's close must not
-- unmap it under a finalizer.
pcall(ffi.cdef, [[
void *dlopen(const char *file, int mode);
unsigned char *SHA1(const unsigned char *d, size_t n, unsigned char *md);
unsigned char *MD5(const unsigned char *d, size_t n, unsigned char *md);
const void *EVP_sha1(void);
unsigned char *HMAC(const void *evp_md, const void *key, int key_len, const unsigned char *d,
                    size_t n, unsigned char *md, unsigned int *md_len);
]])
local crypto
local mdbuf = ffi.new("unsigned char[64]")
local mdlen = ffi.new("unsigned int[1]")
local function libcrypto()
  if crypto == nil then
    crypto = false
    for _, name in ipairs { "libcrypto.so.3", "libcrypto.so" } do
      if ffi.C.dlopen(name, 2) ~= nil then -- RTLD_NOW
        crypto = ffi.load(name)
        break
      end
    end
    if not crypto then error("ngx: OpenSSL's libcrypto cannot be loaded (Debian's libssl3)", 3) end
  end
  return crypto
end

local function digest_arg(s, what)
  if type(s) == "number" then return tostring(s) end
  if type(s) ~= "string" then error(what .. ": string expected, got " .. type(s), 3) end
  return s
end

function ngx.sha1_bin(s)
  s = digest_arg(s, "ngx.sha1_bin")
  libcrypto().SHA1(s, #s, mdbuf)
  return ffi.string(mdbuf, 20)
end

function ngx.md5_bin(s)
  s = digest_arg(s, "ngx.md5_bin")
  libcrypto().MD5(s, #s, mdbuf)
  return ffi.string(mdbuf, 16)
end

function ngx.md5(s)
  return (ngx.md5_bin(digest_arg(s, "ngx.md5")):gsub(".", function(c) return ("%02x"):format(byte(c)) end))
end

function ngx.hmac_sha1(key, s)
  key, s = digest_arg(key, "ngx.hmac_sha1"), digest_arg(s, "ngx.hmac_sha1")
  local C = libcrypto()
  C.HMAC(C.EVP_sha1(), key, #key, s, #s, mdbuf, mdlen)
  return ffi.string(mdbuf, mdlen[0])
end

-- ---- ngx.re ------------------------------------------------------------------------------------
ngx.re = require "rmq.ngx_re"

-- ---- request-scoped tables (empty: there is no HTTP request) ----------------------------------
ngx.var = {}
ngx.ctx = {}
ngx.header = {}
ngx.shared = setmetatable({}, { __index = function(_, k)
  return require("rmq.shared").dicts[k]
end })

return ngx
