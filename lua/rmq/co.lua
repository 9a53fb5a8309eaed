-- rmq.co: waiting without blocking the consume thread's event loop (runtime/luahost/coloop.c).
--
-- A call that waits (rmq.sleep, a cosocket operation) starts the I/O in C, which returns an id.
-- Inside a light thread (rmq.thread.spawn: a coroutine, a "task") it records which task waits on
-- that id and yields WAIT; elsewhere (the batch's handler itself, init, shutdown, the control
-- state, `rmqlua test`) it runs the thread's loop in place (rmq_co_wait) until its id completed,
-- resuming meanwhile every task whose id completed. So light threads wait side by side, and a
-- handler that never waits runs exactly as before: a plain xpcall, no coroutine (M.run). Once a
-- batch waited in place, the consume thread serves (M.serve_step): every batch then runs as a
-- coroutine of its own, several in flight (consume_batches_per_thread).
--
-- A user's own coroutines keep working: coroutine.resume and coroutine.wrap are replaced (in
-- every state, when this module loads, before any script) by versions that pass a WAIT yielded
-- inside a user coroutine up to the scheduler and resume the user coroutine with the answer, as
-- OpenResty does for ngx.socket.
--
--   rmq.sleep(seconds)    wait, letting the thread's other light threads run
--   rmq.now()             seconds since the epoch, with millisecond precision (ngx.now)
--   rmq.thread.spawn(f, ...) -> thread   run f(...) as a light thread of the batch at once,
--                         until it first waits; wait(t1, ...) -> ok, results of the first one
--                         done (false, err when it raised); kill(t) -> true, or nil, err.
--                         Threads still running when the batch's handler returns are killed.
--
-- Threads: one scheduler per Lua state (each consume thread owns one).
local ffi = require "ffi"

local co_create, co_resume, co_yield, co_status = coroutine.create, coroutine.resume,
  coroutine.yield, coroutine.status
local type, select, error, tostring, unpack = type, select, error, tostring, unpack
local pairs, xpcall, tonumber, getmetatable, setmetatable = pairs, xpcall, tonumber, getmetatable, setmetatable

local M = {}
local WAIT = setmetatable({}, { __tostring = function() return "rmq.co.WAIT" end })
M.WAIT = WAIT

local INTERRUPTED = "interrupted: the handler ran past consume_timeout or the pool stopped"

local C, ids
local function lib()
  if not C then
    C = require("rmq.core").C
    ids = ffi.new("int64_t[64]")
  end
  return C
end

local current      -- the task the scheduler is running (nil outside a batch)
local batch_root   -- the running batch's root (M.run), for light threads and sockets
local waiting = {} -- id -> task (or a sync marker)
local readyq, nready = {}, 0 -- tasks to resume from Lua (thread ends, user yields)

local function push_ready(t, token)
  nready = nready + 1
  readyq[nready] = t
  readyq[-nready] = token or false
end

-- ---- user coroutines: runtime waits pass through them --------------------------------------
local function pass(co, ok, a, ...)
  if ok and a == WAIT and current ~= nil and co_status(co) == "suspended" then
    return pass(co, co_resume(co, co_yield(WAIT)))
  end
  return ok, a, ...
end

local function resume(co, ...)
  return pass(co, co_resume(co, ...))
end

local function unwrap(ok, ...)
  if not ok then error((...), 0) end
  return ...
end

local function wrap(f)
  local co = co_create(f)
  return function(...)
    return unwrap(pass(co, co_resume(co, ...)))
  end
end

M.resume, M.wrap = resume, wrap
coroutine.resume = resume -- luacheck: ignore 122 (replaced in every state, as OpenResty does)
coroutine.wrap = wrap -- luacheck: ignore 122

-- ---- tasks ---------------------------------------------------------------------------------
local function finish(t, ok, ...)
  t.done = true
  t.res = { n = select("#", ...) + 1, ok, ... }
  local ws = t.waiters
  if ws then
    t.waiters = nil
    for i = 1, #ws do push_ready(ws[i], ws[i].wait_token) end
  end
  local kids = t.root and t.root.kids
  if kids then kids[t] = nil end
end

-- Serve mode (several batches in flight, see M.serve_step): the batches that ended in this
-- step, and what the running batch sees as its own (rmq._sink, the interrupt hook's slot).
local BATCH_DONE = setmetatable({}, { __tostring = function() return "rmq.co.BATCH_DONE" end })
local serve -- the serve mode's state once the thread serves (nil before)
local batch_end -- function(t, ok, err, sends): a batch task ended (serve mode)

-- Resume task t with the given values and look at how it stopped.
local function step(t, ok, a, b, ...)
  if ok and a == BATCH_DONE then return batch_end(t, true, b, ...) end
  if co_status(t.co) == "dead" then
    if t.slot then return batch_end(t, false, ok and "the batch's coroutine ended" or tostring(a)) end
    return finish(t, ok, a, b, ...)
  end
  if a == WAIT then return end
  push_ready(t) -- a plain yield at the task's top level: resumed in the next round
end

-- Serve mode: make root's batch the one the state runs (its sends, its slot for the hook).
local function enter(root)
  local s = serve
  local live = s.live
  if live == root then return end
  local rmq = s.rmq
  if live then live.sink = rmq._sink end
  if root and root.slot then
    rmq._sink, rmq._in_handler = root.sink, true
    s.cur[0] = root.slot
    s.live = root
  else
    rmq._sink, rmq._in_handler = nil, false
    s.cur[0] = -1
    s.live = nil
  end
end

local function run_task(t, ...)
  local prev = current
  current = t
  if serve == nil or not serve.on then
    step(t, co_resume(t.co, ...))
  else
    enter(t.root)
    step(t, co_resume(t.co, ...))
    enter(prev and prev.root)
  end
  current = prev
end

-- Hand the ids C completed to their tasks. sync: the marker of an in-place wait.
local function dispatch_ids(n)
  for i = 0, n - 1 do
    local id = tonumber(ids[i])
    local t = waiting[id]
    if t ~= nil then
      waiting[id] = nil
      if t.sync then t.sync = false else run_task(t, true) end
    end
  end
end

local function run_readyq()
  local q, n = readyq, nready
  readyq, nready = {}, 0
  for i = 1, n do
    local t, token = q[i], q[-i]
    if not t.done and (not token or t.wait_token == token) then
      if token then t.wait_token = nil end
      run_task(t)
    end
  end
end

-- Run the loop until done() is true. Returns nil, or the reason it cannot go on.
local function drive(done)
  local lc = lib()
  if batch_root ~= nil then lc.rmq_co_waited() end -- a batch waits: the thread serves from now on
  while not done() do
    if nready > 0 then
      run_readyq()
    else
      local n = lc.rmq_co_wait(ids, 64)
      if n < 0 then return INTERRUPTED end
      if n == 0 then return "deadlock: every coroutine of the handler waits and nothing is pending" end
      dispatch_ids(n)
    end
  end
end

-- Forget what the tasks under root wait on (root abandoned or its batch over).
local function drop_root(root)
  for id, t in pairs(waiting) do
    if t.root == root then waiting[id] = nil end
  end
  local kids = root.kids
  if kids then
    for k in pairs(kids) do k.done, k.killed = true, true end
    root.kids = nil
  end
  local socks = root.socks
  if socks then
    for s in pairs(socks) do s:close() end
    root.socks = nil
  end
end

-- Wait for id (a C operation just started). Returns what the scheduler resumed with (true), or
-- raises when the in-place wait cannot go on.
function M.await(id)
  id = tonumber(id) -- an int64 cdata from C: a table key must be a number
  local t = current
  if t ~= nil then
    waiting[id] = t
    return co_yield(WAIT)
  end
  local marker = { sync = true }
  waiting[id] = marker
  local err = drive(function() return not marker.sync end)
  if err then
    waiting[id] = nil
    error(err, 2)
  end
  return true
end

-- The batch's root task (nil outside a batch, and in a detached light thread), for resources to
-- release with it.
function M.root()
  if current ~= nil then return current.root end
  return batch_root
end

--[[
run(f, eh, a, b) -> ok, r: xpcall(f, eh, a, b) as the batch of this thread. A wait in f runs
the thread's loop in place (its light threads and their user coroutines run meanwhile); a wait
that is interrupted (consume_timeout, stop) raises in f. When f returns, the light threads it
left running are killed and the sockets it left open closed. f itself is not a coroutine: a
handler that never waits costs what a plain xpcall costs (no resume, its traces intact).
]]
local ROOT = {} -- every batch's (one batch at a time): its kids and socks are cleared after it
ROOT.root = ROOT

function M.run(f, eh, a, b)
  batch_root = ROOT
  local ok, r = xpcall(f, eh, a, b)
  batch_root = nil
  if ROOT.kids or ROOT.socks then drop_root(ROOT) end
  return ok, r
end

-- ---- serve mode: several batches in flight on one thread -----------------------------------
-- Once a batch's handler waited in place, the consume thread (consume_pool.c) calls
-- serve_step() in a loop: each batch runs as a task of its own (a coroutine taken from a free
-- list, its own root for light threads and sockets, its own rmq.send sink), and the thread's
-- loop runs while they wait. A batch that ran past consume_timeout while it waited (or that a
-- stop gave up on) is abandoned: its light threads killed, its sockets closed, never resumed.

-- A batch task's coroutine: runs fn(a, b) for one batch after another.
local function batch_loop(fn, a, b)
  while true do
    fn, a, b = co_yield(BATCH_DONE, fn(a, b))
  end
end

local function forget(t)
  for id, w in pairs(waiting) do
    if w == t or w.root == t then waiting[id] = nil end
  end
end

function batch_end(t, ok, err, sends)
  local s = serve
  local k = t.slot
  if t.kids or t.socks then drop_root(t) end
  s.flight[k] = nil
  s.nflight = s.nflight - 1
  local out, n = s.out, s.nout
  -- A coroutine that died (an interrupt outside the handler's xpcall) set no result: abandoned.
  out[3 * n + 1], out[3 * n + 2], out[3 * n + 3] = ok and k or -k - 1, err or false, sends or false
  s.nout = n + 1
  t.slot = nil
  if ok then
    s.free[#s.free + 1] = t -- suspended in batch_loop: the next batch reuses it
  else
    t.done = true
  end
end

-- Give up slot k's batch (it waits and will not be resumed): err or the C side's reason.
local function abandon(k, err)
  local s = serve
  local t = s.flight[k]
  if t == nil then return end
  forget(t)
  if t.kids or t.socks then drop_root(t) end
  t.done, t.slot = true, nil
  s.flight[k] = nil
  s.nflight = s.nflight - 1
  local out, n = s.out, s.nout
  out[3 * n + 1], out[3 * n + 2], out[3 * n + 3] = -k - 1, err or false, false
  s.nout = n + 1
end

--[[
serve_step(body, newstate) -> out, n, nflight: one round of the serve mode. Starts the batches C
has for this thread (body(b, st) runs each in a task; st = newstate() once per pooled task, its
ctx and slot), waits once on the thread's loop, resumes what completed and abandons what C
interrupted. out holds n triples: slot (negative -slot-1: abandoned), error text or false, the
batch's sends or false. serve_step(nil, nil, true) forgets every batch in flight (the C side
failed them).
]]
function M.serve_step(body, newstate, reset)
  local lc = lib()
  local s = serve
  if s == nil then
    s = { flight = {}, nflight = 0, free = {}, out = {}, nout = 0, bp = ffi.new("rmq_batch_t *[1]"),
      slots = ffi.new("int[64]"), cur = lc.rmq_serve_cur(), rmq = require "rmq" }
    serve = s
  end
  s.out, s.nout = {}, 0
  if reset then
    for k in pairs(s.flight) do abandon(k) end
    s.on = true
    enter(nil)
    s.on = false
    return s.out, 0, 0
  end
  s.on = true
  local bp = s.bp
  while true do
    local k = lc.rmq_serve_take(bp)
    if k < 0 then break end
    local free = s.free
    local t = free[#free]
    if t ~= nil then
      free[#free] = nil
      t.done, t.res, t.waiters, t.wait_token = nil, nil, nil, nil
    else
      t = { co = co_create(batch_loop), st = newstate() }
      t.root = t
    end
    t.slot = k
    s.flight[k] = t
    s.nflight = s.nflight + 1
    run_task(t, body, bp[0], t.st)
  end
  if s.nflight > 0 then
    if nready > 0 then
      run_readyq()
    else
      local n = lc.rmq_serve_wait(ids, 64)
      if n > 0 then
        dispatch_ids(n)
      elseif n == -2 and nready == 0 then
        for k in pairs(s.flight) do
          abandon(k, "deadlock: every coroutine of the handler waits and nothing is pending")
        end
      end
    end
    local ne = lc.rmq_serve_expired(s.slots, 64)
    for i = 0, ne - 1 do abandon(s.slots[i]) end
  end
  s.on = false
  return s.out, s.nout, s.nflight
end

-- ---- rmq.sleep, rmq.now, rmq.thread --------------------------------------------------------
function M.sleep(s)
  if type(s) ~= "number" or s ~= s or s < 0 then
    error("rmq.sleep: seconds must be a number >= 0, got " .. tostring(s), 2)
  end
  M.await(lib().rmq_co_sleep(s * 1000))
end

function M.now()
  return lib().rmq_co_now()
end

local thread_mt = { __tostring = function() return "rmq.thread" end }
local thread = {}
M.thread = thread

function thread.spawn(f, ...)
  if type(f) ~= "function" then
    error("rmq.thread.spawn: expects a function, got " .. type(f), 2)
  end
  local root = current and current.root or batch_root
  local t = setmetatable({ co = co_create(f), root = root }, thread_mt)
  if root then
    root.kids = root.kids or {}
    root.kids[t] = true
  end
  run_task(t, ...)
  return t
end

-- spawn_detached(f, ...): a light thread that belongs to no batch (ngx.timer.at): it is not
-- killed when the batch that made it ends, and runs on whenever this state's loop runs.
function M.spawn_detached(f, ...)
  local t = setmetatable({ co = co_create(f) }, thread_mt)
  run_task(t, ...)
  return t
end

local function first_done(...)
  for i = 1, select("#", ...) do
    local t = select(i, ...)
    if t.done and not t.killed then return t end
  end
end

function thread.wait(...)
  local n = select("#", ...)
  if n == 0 then error("rmq.thread.wait: no thread given", 2) end
  for i = 1, n do
    local t = select(i, ...)
    if getmetatable(t) ~= thread_mt then error("rmq.thread.wait: argument " .. i .. " is not a thread", 2) end
  end
  local t = first_done(...)
  if t == nil then
    local alive = false
    for i = 1, n do
      if not select(i, ...).killed then alive = true end
    end
    if not alive then return nil, "already waited or killed" end
    local me = current
    if me ~= nil then
      local token = {}
      me.wait_token = token
      for i = 1, n do
        local o = select(i, ...)
        if not o.done then
          o.waiters = o.waiters or {}
          o.waiters[#o.waiters + 1] = me
        end
      end
      repeat co_yield(WAIT) until first_done(...)
      me.wait_token = nil
    else
      local ts = { ... }
      local err = drive(function() return first_done(unpack(ts, 1, n)) ~= nil end)
      if err then error(err, 2) end
    end
    t = first_done(...)
  end
  t.killed = true -- waited: it cannot be waited for again
  return unpack(t.res, 1, t.res.n)
end

function thread.kill(t)
  if getmetatable(t) ~= thread_mt then error("rmq.thread.kill: expects a thread", 2) end
  if t.done then return nil, "already terminated" end
  if t == current then return nil, "cannot kill the running thread" end
  t.done, t.killed = true, true
  for id, w in pairs(waiting) do
    if w == t then waiting[id] = nil end
  end
  if t.root and t.root.kids then t.root.kids[t] = nil end
  return true
end

return M
