-- timed.lua: consumer scripts for the specs that need to know when and where handlers ran.
-- Every state of the script gets now_ms() (CLOCK_MONOTONIC, comparable across the states and
-- with the spec's own now_ms()), sleep_ms(ms) (a blocking C call, which a consume-timeout
-- interrupt cannot cut short) and rec(line) (appends line .. "\n" to the output file, one write
-- per line so that lines of different threads never interleave).
--
--   local timed = dofile(helpers.root .. "/spec/02-integration/03-consumer/timed.lua")
--   local path = timed.script(dir, { group =, ns =, topic =, out =, options = "lua source",
--     handler = "lua source (msgs, ctx in scope)", hooks = "lua source", orderly = bool })
local ffi = require "ffi"
local rh = require "run_helpers"

local M = {}

local PRELUDE = [[
local ffi = require "ffi"
for _, d in ipairs({ "struct rmq_spec_ts { long sec; long nsec; };",
                     "int clock_gettime(int clk, struct rmq_spec_ts *ts);",
                     "int poll(void *fds, unsigned long nfds, int timeout);" }) do
  pcall(ffi.cdef, d)
end
local ts = ffi.new("struct rmq_spec_ts")
local function now_ms()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.sec) * 1000 + math.floor(tonumber(ts.nsec) / 1e6)
end
local function sleep_ms(ms) ffi.C.poll(nil, 0, ms) end
]]

for _, d in ipairs({ "struct rmq_spec_ts { long sec; long nsec; };",
                     "int clock_gettime(int clk, struct rmq_spec_ts *ts);" }) do
  pcall(ffi.cdef, d)
end
local ts = ffi.new("struct rmq_spec_ts")
function M.now_ms()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.sec) * 1000 + math.floor(tonumber(ts.nsec) / 1e6)
end

function M.script(dir, o)
  local src = PRELUDE .. string.format([[
local rmq = require "rmq"
local out = assert(io.open(%q, "a"))
out:setvbuf("no")
local function rec(line) out:write(line .. "\n") end
return {
  consumer_group = %q,
  namesrv_addr = %q,
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  subscribe = { [%q] = "*" },
  %s
  %s
  %s = function(msgs, ctx)
    %s
  end,
}
]], o.out, o.group, o.ns, o.topic, o.options or "", o.hooks or "",
    o.orderly and "consume_orderly" or "consume", o.handler or "")
  return rh.write(dir, (o.name or "consumer") .. ".lua", src)
end

-- Lines of a file split into words: { {w1, w2, ...}, ... }; numbers converted.
function M.rows(path)
  local rows = {}
  local f = io.open(path, "r")
  if not f then return rows end
  for l in f:lines() do
    local r = {}
    for w in l:gmatch("%S+") do r[#r + 1] = tonumber(w) or w end
    if #r > 0 then rows[#rows + 1] = r end
  end
  f:close()
  return rows
end

return M
