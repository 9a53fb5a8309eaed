-- rmq.json: JSON decoding straight from a message view, without a Lua string of the body.
--
--   local json = require "rmq.json"
--   local order = json.decode(m)          -- m a message view: decodes m's body in place
--   local v = json.decode(s)              -- s a Lua string (as cjson.decode(s))
--   local v = json.decode(ptr, len)       -- bytes at a const char * (e.g. m.body_ptr, m.body_len)
--   local v, err = json.decode_safe(m)    -- nil and the error text instead of raising
--   json.null                             -- what JSON null decodes to (equal to cjson.null)
--
-- Results and errors are lua-cjson's (cjson.decode with its default settings): objects and
-- arrays become tables, numbers doubles, null json.null, and bad text raises an error such as
-- "Expected value but found invalid token at character 1". The decoder is C
-- (runtime/luahost/json_decode.c); a message's body is read while the handler runs, so decode during
-- the call (the result holds copies, never pointers into the message).
--
-- Threads: one module per Lua state.
local ffi = require "ffi"
local view = require "rmq.view"

local c = package.loaded["rmq.json.c"]
if c == nil and package.preload["rmq.json.c"] then c = require "rmq.json.c" end
if c == nil then
  -- A plain luajit (specs, benchmarks): the same C functions from librmqlua.so.
  local path = os.getenv("RMQLUA_LIB")
  local open = path and package.loadlib(path, "rmq_luaopen_json")
  if not open then
    error("rmq.json: the runtime's decoder is not available (run inside rmqlua, or set "
      .. "RMQLUA_LIB to librmqlua.so)", 0)
  end
  c = open()
end

if not pcall(ffi.typeof, "rmq_json_src_t") then
  ffi.cdef [[ typedef struct rmq_json_src { const char *p; uint64_t n; } rmq_json_src_t; ]]
end

local decode_string, decode_box = c.decode_string, c.decode_box
local istype, type, error, pcall = ffi.istype, type, error, pcall
local view_t = view.ctype
local charp = ffi.typeof("const char *")
local box = ffi.new("rmq_json_src_t")

local M = { null = c.null }

function M.decode(x, len)
  local tx = type(x)
  if tx == "cdata" then
    if istype(view_t, x) then
      local m = x.m
      if m == nil then
        error("message view used after its handler returned (decode during the call)", 2)
      end
      box.p, box.n = m.body, m.body_len
      return decode_box(box)
    end
    if type(len) ~= "number" or len < 0 then
      error("rmq.json.decode: a pointer needs a length (decode(ptr, len))", 2)
    end
    box.p, box.n = ffi.cast(charp, x), len
    return decode_box(box)
  end
  if tx == "string" or tx == "number" then return decode_string(x) end
  error("rmq.json.decode: expected a message, a string, or a pointer and a length, got " .. tx, 2)
end

local decode = M.decode
function M.decode_safe(x, len)
  local ok, v = pcall(decode, x, len)
  if ok then return v end
  return nil, v
end

return M
