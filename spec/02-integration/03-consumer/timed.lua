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
local helpers = require "helpers"
local rh = require "run_helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")

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

-- An orderly case over the broker fixture fx: a fresh folder helpers.tmpdir(tag), each of the
-- o.queues queues of o.topic filled with o.per_queue messages (cons.fill_queues), and an orderly
-- script written as M.script does with o's group, topic, options and handler (a function of the
-- folder when the handler needs it). Returns the folder, the output file and the script's path.
function M.orderly(fx, tag, o)
  local dir = helpers.tmpdir(tag)
  cons.fill_queues(fx.db, o.topic, o.queues, o.per_queue)
  local out = dir .. "/out.txt"
  local handler = o.handler
  if type(handler) == "function" then handler = handler(dir) end
  return dir, out, M.script(dir, { group = o.group, ns = fx.ns, topic = o.topic, out = out,
    orderly = true, options = o.options, handler = handler })
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
