-- rmq.where: the predicate of `rmqlua redrive --where SCRIPT`, which chooses the dead letters
-- that move. The script returns function(m) -> truthy to move m (or a table with where =
-- function(m), and optionally init(ctx) / shutdown(ctx)); m is a message view as consume gets
-- it (m.body, m.tags, m.keys, m:property(name), m.reconsume_times, ...), valid during the call.
--
-- The consume pool runs it through this module as loader (load) and dispatcher (new): one call
-- per batch; the batch comes back with the selected messages first, in their order, and
-- ack_count = how many were selected (the others follow). A predicate that raises fails the
-- whole batch (status RECONSUME_LATER, handler_error 1) and nothing of it moves.
--
-- Threads: one dispatcher per consume state.
local ffi = require "ffi"
local rmq = require "rmq"
local view = require "rmq.view"
local script = require "rmq.script"

local xpcall, traceback, tostring = xpcall, debug.traceback, tostring

local M = {}

local function fail(path, msg) script.load_error(path .. ": " .. msg) end

function M.load(path)
  local t = script.run_file_or_fail(path)
  if type(t) == "function" then return { where = t } end
  if type(t) ~= "table" or type(t.where) ~= "function" then
    fail(path, "a --where script returns function(m) -> boolean (or a table with where = "
      .. "function(m)), got " .. type(t))
  end
  script.check_init_shutdown(path, t)
  return { where = t.where, init = t.init, shutdown = t.shutdown }
end

local function on_error(e) return traceback(tostring(e), 2) end

function M.new(spec, info)
  local slot = ffi.new("rmq_batch_t *[1]")
  local where = spec.where
  local d = { slot = slot, slot_addr = tonumber(ffi.cast("uintptr_t", slot)) }
  local ctx = { thread_index = (info.thread_index or 0) + 1, thread_count = info.thread_count or 1,
    consumer_group = info.consumer_group }

  function d.dispatch()
    local b = slot[0]
    local n = b.n
    local arr = b.msgs
    local picked, rest = {}, {}
    for i = 0, n - 1 do
      local v = view.new(arr[i])
      local ok, r = xpcall(where, on_error, v)
      v.m = nil
      if view.dirty then view.reset() end
      if not ok then
        b.status = rmq.RECONSUME_LATER
        b.ack_count = 0
        b.handler_error = 1
        return "--where failed at queue offset " .. tostring(tonumber(arr[i].queue_offset)) .. ": "
          .. tostring(r), nil
      end
      if r then picked[#picked + 1] = arr[i] else rest[#rest + 1] = arr[i] end
    end
    for i = 1, #picked do arr[i - 1] = picked[i] end
    for i = 1, #rest do arr[#picked + i - 1] = rest[i] end
    b.status = rmq.SUCCESS
    b.ack_count = #picked
    b.delay_level = 0
    b.suspend_millis = -1
    b.handler_error = 0
    return nil, nil
  end

  function d.init() if spec.init then spec.init(ctx) end end
  function d.shutdown() if spec.shutdown then spec.shutdown(ctx) end end
  return d
end

return M
