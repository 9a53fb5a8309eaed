-- rmq.dispatch: the consume thread's side of a batch. One C->Lua transition per batch: the
-- consume thread stores the batch pointer in the slot and lua_pcalls dispatch() (with a
-- traceback handler, as a second net); dispatch wraps the messages in views, calls the
-- script's handler under rmq.co.run (an xpcall that can wait in place), invalidates the views,
-- and writes the result into the batch.
--
-- The return contract (concurrent, consume(msgs, ctx)):
--   nothing, true, rmq.SUCCESS   success; ctx.ack_index = n acknowledges only the first n
--   false, rmq.RECONSUME_LATER   every message is consumed again later (ctx.delay_level)
--   rmq.DLQ                      the messages after ctx.ack_index (default all) go to the DLQ
--   an error                     like RECONSUME_LATER; the error, its traceback and the message
--                                ids are logged and counted; the thread keeps going
-- Orderly (consume_orderly(msgs, ctx)): nothing, true, rmq.SUCCESS or rmq.COMMIT; rmq.SUSPEND,
-- false, rmq.RECONSUME_LATER or an error suspend the queue for ctx.suspend_millis (default
-- suspend_current_queue_time_millis) and the batch is consumed again.
-- Anything else returned is an error. ctx is reused across batches of one thread: the per-batch
-- fields (ack_index, delay_level, suspend_millis, queue) are reset before each call. ctx.queue
-- is the batch's message queue { topic =, broker_name =, queue_id = } (every message of a
-- batch comes from one queue), made when first read.
--
-- Threads: one dispatcher per consume state.
local ffi = require "ffi"
local rmq = require "rmq"
local view = require "rmq.view"
local co = require "rmq.co"
local co_run = co.run

local tnew = require "table.new"
local type, tostring, traceback = type, tostring, debug.traceback
local floor = math.floor

local SUCCESS, RECONSUME_LATER, DLQ, SUSPEND, COMMIT =
  rmq.SUCCESS, rmq.RECONSUME_LATER, rmq.DLQ, rmq.SUSPEND, rmq.COMMIT

local M = {}

local function on_error(e)
  if type(e) ~= "string" then e = tostring(e) end
  return traceback(e, 2)
end

local function is_int(v) return type(v) == "number" and v == floor(v) end

-- ctx[key] when it is nil or an integer; otherwise nil and the error that fails the batch.
local function int_or_nil(ctx, key)
  local v = ctx[key]
  if v == nil or is_int(v) then return v end
  return nil, "ctx." .. key .. " must be an integer, got " .. tostring(v)
end

-- Message ids for a log line (cold path: only after a failure), at most 16.
local function ids_of(b)
  local out = {}
  local n = b.n
  local lim = n < 16 and n or 16
  for i = 0, lim - 1 do
    local ok, id = pcall(view.fields.msg_id, b.msgs[i])
    out[#out + 1] = ok and id or "?"
  end
  if n > lim then out[#out + 1] = "... (" .. n .. " in all)" end
  return table.concat(out, ",")
end

--[[
new(spec, info) -> dispatcher
  spec: the validated script table (rmq.script.load)
  info: { thread_index = 0-based, thread_count =, consumer_group = }
The dispatcher has: slot (rmq_batch_t *[1]), slot_addr (its address as a number, for C),
dispatch() -> errmsg|nil, sends|nil, init() and shutdown().
]]
function M.new(spec, info)
  local handler = spec.consume or spec.consume_orderly
  local orderly = spec.consume_orderly ~= nil
  local slot = ffi.new("rmq_batch_t *[1]")
  local new_view = view.new
  local views = {} -- private: every view handed out in the current batch
  local what = orderly and "consume_orderly" or "consume"
  -- ctx.queue (Java's context.getMessageQueue()): the batch's queue, built when first read.
  local str = ffi.string
  local function new_ctx(sl)
    return setmetatable({
      thread_index = (info.thread_index or 0) + 1, -- 1 .. thread_count
      thread_count = info.thread_count or 1,
      consumer_group = info.consumer_group,
      orderly = orderly,
    }, { __index = function(t, k)
      if k ~= "queue" then return nil end
      local b = sl[0]
      if b == nil or b.n == 0 then return nil end
      local m = b.msgs[0]
      local q = { topic = str(m.topic, m.topic_len), queue_id = m.queue_id,
        broker_name = m.broker_name_len > 0 and str(m.broker_name, m.broker_name_len) or "" }
      rawset(t, "queue", q)
      return q
    end })
  end
  local ctx = new_ctx(slot)

  local d = { slot = slot, ctx = ctx, orderly = orderly }
  d.slot_addr = tonumber(ffi.cast("uintptr_t", slot))

  -- Result for (ok, r): status, ack_count, error text or nil.
  local function result(c, ok, r, n)
    if not ok then
      return orderly and SUSPEND or RECONSUME_LATER, 0, r
    end
    if orderly then
      if r == nil or r == true or r == SUCCESS then return SUCCESS, n end
      if r == COMMIT then return COMMIT, n end
      if r == SUSPEND or r == false or r == RECONSUME_LATER then return SUSPEND, 0 end
      return SUSPEND, 0, what .. " returned " .. tostring(r)
        .. " (expected nothing, true, rmq.SUCCESS, rmq.COMMIT or rmq.SUSPEND)"
    end
    local ack = c.ack_index
    if ack ~= nil then
      if not is_int(ack) then
        return RECONSUME_LATER, 0, "ctx.ack_index must be an integer, got " .. tostring(ack)
      end
      if ack < 0 then ack = 0 elseif ack > n then ack = n end
    end
    if r == nil or r == true or r == SUCCESS then return SUCCESS, ack or n end
    if r == false or r == RECONSUME_LATER then return RECONSUME_LATER, 0 end
    if r == DLQ then return DLQ, ack or 0 end
    return RECONSUME_LATER, 0, what .. " returned " .. tostring(r)
      .. " (expected nothing, true, rmq.SUCCESS, rmq.RECONSUME_LATER or rmq.DLQ)"
  end

  -- Views left from a batch whose dispatch was cut short (an interrupt outside the xpcall).
  local function sweep()
    local i = 1
    while views[i] ~= nil do
      views[i].m = nil
      views[i] = nil
      i = i + 1
    end
    rmq._in_handler = false
  end

  -- Reset only what the last batch set: storing nil into an absent key is a slow path in
  -- LuaJIT (a new hash slot each time, then rehashes) and cost more than the rest of a
  -- batch of one.
  local function reset_ctx(c)
    if rawget(c, "ack_index") ~= nil then c.ack_index = nil end
    if rawget(c, "delay_level") ~= nil then c.delay_level = nil end
    if rawget(c, "suspend_millis") ~= nil then c.suspend_millis = nil end
    if rawget(c, "queue") ~= nil then c.queue = nil end
  end

  -- The batch's outcome from the handler's (ok, r) and c's fields, written into b: the
  -- dispatcher's returns (an error text, or the forwards to send when the batch succeeded).
  local function outcome(b, c, ok, r, n, sends)
    local status, ack, err = result(c, ok, r, n)
    local dl, dl_err = int_or_nil(c, "delay_level")
    local sm, sm_err = int_or_nil(c, "suspend_millis")
    if dl_err or sm_err then
      status, ack, err = orderly and SUSPEND or RECONSUME_LATER, 0, sm_err or dl_err
    end
    b.status = status
    b.ack_count = ack
    b.delay_level = dl or 0
    b.suspend_millis = sm or -1
    b.handler_error = err and 1 or 0
    if err then
      return what .. " failed for " .. n .. " message(s) [" .. ids_of(b) .. "]: " .. err, nil
    end
    -- Forwards go out only when the batch succeeded (a failed batch is consumed again).
    if sends and (status == SUCCESS or status == COMMIT) then return nil, sends end
    return nil, nil
  end

  function d.dispatch()
    if views[1] ~= nil then sweep() end
    local b = slot[0]
    local n = b.n
    local arr = b.msgs
    local msgs = tnew(n, 0)
    for i = 1, n do
      local v = new_view(arr[i - 1])
      msgs[i] = v
      views[i] = v
    end
    reset_ctx(ctx)
    if rmq._sink ~= nil then rmq._sink = nil end
    rmq._in_handler = true
    -- In a coroutine (rmq.co): a handler that waits on I/O lets the thread's loop run.
    local ok, r = co_run(handler, on_error, msgs, ctx)
    rmq._in_handler = false
    local sends = rmq._sink
    if sends ~= nil then rmq._sink = nil end
    -- Invalidate every view of this batch: a kept one now raises a clean error.
    for i = 1, n do
      views[i].m = nil
      views[i] = nil
    end
    if view.dirty then view.reset() end

    return outcome(b, ctx, ok, r, n, sends)
  end

  -- Serve mode (rmq.co.serve_step): one batch in a task of its own, with st's ctx and slot
  -- (each pooled task has its own); the same steps and outcome rules as dispatch().
  local function new_state()
    local sl = ffi.new("rmq_batch_t *[1]")
    return { slot = sl, ctx = new_ctx(sl) }
  end
  local function serve_body(b, st)
    local bctx, sl = st.ctx, st.slot
    sl[0] = b
    local n = b.n
    local arr = b.msgs
    local msgs, vs = tnew(n, 0), tnew(n, 0)
    for i = 1, n do
      local v = new_view(arr[i - 1])
      msgs[i] = v
      vs[i] = v
    end
    reset_ctx(bctx)
    local ok, r = xpcall(handler, on_error, msgs, bctx)
    local sends = rmq._sink
    rmq._sink = nil
    for i = 1, n do vs[i].m = nil end
    if view.dirty then view.reset() end
    sl[0] = nil
    return outcome(b, bctx, ok, r, n, sends)
  end
  local serve_step = co.serve_step
  -- serve() -> out, n, nflight: one step of the serve mode (consume_pool.c calls it in a loop);
  -- serve(true) forgets the batches in flight after the step itself failed.
  function d.serve(reset)
    return serve_step(serve_body, new_state, reset)
  end

  local function hook_ctx(role)
    return { thread_index = ctx.thread_index, thread_count = ctx.thread_count,
      consumer_group = ctx.consumer_group, role = role }
  end
  function d.init()
    if spec.init then spec.init(hook_ctx("init")) end
  end
  function d.shutdown()
    if views[1] ~= nil then sweep() end
    if spec.shutdown then spec.shutdown(hook_ctx("shutdown")) end
    local ngx = package.loaded["rmq.ngx"] -- timers not run yet run now, premature
    if ngx then ngx._stop() end
    local sock = package.loaded["rmq.socket"]
    if sock then sock._close_pools() end
  end
  return d
end

return M
