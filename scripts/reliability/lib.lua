-- lib.lua: the machinery of the reliability suite (scripts/reliability.sh): a small cooperative
-- scheduler (each scenario is a coroutine; sleeping yields), processes started by pid with their
-- exit codes and peak memory, the development broker and producers as processes, admin queries
-- over the remoting protocol (spec/rawclient.lua), and the record files the recorder handler
-- writes, read incrementally.
--
-- Everything runs on loopback. Every process started is appended (pid and start time) to the
-- run's pid file, which scripts/reliability.sh uses to stop whatever is left when the run ends.
local ffi = require "ffi"
local cjson = require "cjson"
local raw = require "rawclient"
local clock = require "clock"

pcall(ffi.cdef, "int kill(int pid, int sig);")
local C = ffi.C

local M = {}
M.raw = raw

-- ---- set-up (run.lua fills these) ---------------------------------------------------------
M.bin = nil      -- rmqlua under test
M.asan_bin = nil -- an ASan+UBSan rmqlua for the hostile broker scenario (or nil)
M.root = nil     -- repository root
M.work = nil     -- the run's temp folder (removed by reliability.sh)
M.namesrv = nil  -- --namesrv: an existing cluster
M.quiet = false

M.now_ms, M.mono, M.exists = clock.now_ms, clock.mono, clock.exists
M.t0 = M.mono()

M.shq = require("helpers").shq
local shq = M.shq

-- A file's whole text, "" while it does not exist.
M.read = require("run_helpers").read
function M.write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

-- 12345 -> "12,345"
function M.num(n)
  if type(n) ~= "number" then return tostring(n) end
  local s = tostring(math.floor(n))
  local out = s:reverse():gsub("(%d%d%d)", "%1,"):reverse()
  return (out:gsub("^(-?),", "%1"))
end

function M.progress(fmt, ...)
  if M.quiet then return end
  io.stderr:write(string.format("[%6.1fs] ", M.mono() - M.t0), string.format(fmt, ...), "\n")
  io.stderr:flush()
end

-- ---- scheduler ----------------------------------------------------------------------------
-- Tasks are coroutines; M.sleep yields back here with a wake-up time. Blocking calls (a short
-- admin request, reading a file) simply hold everyone up for that long.
local tasks = {}

function M.go(name, fn)
  local t = {name = name, co = coroutine.create(fn), wake = 0}
  tasks[#tasks + 1] = t
  return t
end

function M.sleep(sec)
  if coroutine.running() then
    coroutine.yield(M.mono() + sec)
  else
    clock.sleep_ms(math.max(0, math.floor(sec * 1000)))
  end
end

-- Run until every task finished. A task that raised has t.err set (with a traceback).
function M.run_tasks()
  while #tasks > 0 do
    local best
    for i, t in ipairs(tasks) do
      if not best or t.wake < tasks[best].wake then best = i end
    end
    local t = tasks[best]
    local d = t.wake - M.mono()
    if d > 0 then clock.sleep_ms(math.ceil(d * 1000)) end
    local ok, res = coroutine.resume(t.co)
    if not ok then
      t.err = debug.traceback(t.co, tostring(res))
      if t.on_error then t.on_error(t.err) end
    end
    if coroutine.status(t.co) == "dead" then
      table.remove(tasks, best)
    else
      t.wake = tonumber(res) or M.mono()
    end
  end
end

-- Poll fn() every `step` seconds until it returns a truthy value; error after timeout seconds.
function M.wait_for(fn, timeout, what, step)
  local deadline = M.mono() + timeout
  while true do
    local v = fn()
    if v then return v end
    if M.mono() > deadline then error("timed out after " .. timeout .. " s waiting for " .. what, 2) end
    M.sleep(step or 0.2)
  end
end

-- ---- processes ----------------------------------------------------------------------------
local Proc = {}
Proc.__index = Proc
local seq = 0

local function starttime(pid)
  local s = M.read("/proc/" .. pid .. "/stat")
  local rest = s:match("%) (.*)$")
  if not rest then return nil end
  local i = 0
  for f in rest:gmatch("%S+") do
    i = i + 1
    if i == 20 then return f end -- field 22 of stat (the 20th after "pid (comm)")
  end
end

function M.register_pid(pid)
  local f = assert(io.open(M.work .. "/pids", "a"))
  f:write(pid, " ", starttime(pid) or "?", "\n")
  f:close()
end

-- Start cmd (a shell command line) in the background. opts: name (file names), env (table),
-- dir (where its log and exit-code file go), kind ("consumer", "broker", "producer", "tool"),
-- expect (exit codes that are no crash when it ends on its own; default {0}).
-- Returns a Proc: pid, log, rcfile.
function M.spawn(cmd, opts)
  opts = opts or {}
  seq = seq + 1
  local dir = opts.dir or M.work
  local name = (opts.name or "proc") .. "-" .. seq
  local p = setmetatable({cmd = cmd, name = name, kind = opts.kind or "tool",
                          log = dir .. "/" .. name .. ".log", rcfile = dir .. "/" .. name .. ".rc",
                          expect = opts.expect or {[0] = true}, hwm_kb = 0, started = M.mono()},
                         Proc)
  local env = {}
  for k, v in pairs(opts.env or {}) do env[#env + 1] = k .. "=" .. shq(v) end
  table.sort(env)
  local line = string.format("(%s %s > %s 2>&1 < /dev/null & echo $!; wait $!; echo $? > %s) 2>/dev/null &",
    table.concat(env, " "), cmd, shq(p.log), shq(p.rcfile))
  local ph = io.popen(line)
  p.pid = tonumber(ph:read("*l"))
  ph:close()
  assert(p.pid, "could not start: " .. cmd)
  M.register_pid(p.pid)
  return p
end

function Proc:alive()
  local st = M.read("/proc/" .. self.pid .. "/stat")
  if st == "" then return false end
  return not st:match("^%d+ %b() [ZX]")
end

function Proc:signal(sig)
  if self:alive() then C.kill(self.pid, sig) end
end

-- VmHWM / VmRSS in kB (0 once gone); the peak seen is kept in self.hwm_kb.
function Proc:mem()
  local s = M.read("/proc/" .. self.pid .. "/status")
  local hwm = tonumber(s:match("VmHWM:%s*(%d+)")) or 0
  local rss = tonumber(s:match("VmRSS:%s*(%d+)")) or 0
  if hwm > self.hwm_kb then self.hwm_kb = hwm end
  return hwm, rss
end

-- The exit code once it exited (nil before).
function Proc:rc()
  if self.exit_rc then return self.exit_rc end
  local v = tonumber(M.read(self.rcfile):match("(%d+)"))
  if v then
    self.exit_rc = v
    self.ended = self.ended or M.mono()
  end
  return v
end

function Proc:wait(timeout)
  return M.wait_for(function() return self:rc() end, timeout or 30,
    self.name .. " (pid " .. self.pid .. ") to exit", 0.1)
end

-- SIGTERM and wait; the exit code must then be 0 (or what `expect` says). A consumer is first
-- given up to 10 s to say it started (a signal before `rmqlua run` installed its handler would
-- end it the default way).
function Proc:stop(timeout)
  self:mem()
  if self:rc() then return self.exit_rc end
  if self.kind == "consumer" and self.ready_pattern then
    pcall(M.wait_for, function()
      return self:rc() or M.read(self.log):find(self.ready_pattern) end, 10, "ready", 0.05)
    if self:rc() then return self.exit_rc end
  end
  self.expect = self.stop_expect or {[0] = true}
  self.stopped_by_us = true
  self:signal(15)
  return self:wait(timeout or 60)
end

-- SIGKILL (an intended crash: 137 is then expected) and wait.
function Proc:kill9()
  self:mem()
  if self:rc() then return self.exit_rc end
  self.expect = {[137] = true}
  self.stopped_by_us = true
  self:signal(9)
  return self:wait(30)
end

-- Sanitizer reports and fatal runtime errors in the log.
local bad_patterns = {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                      "UndefinedBehaviorSanitizer", "WARNING: ThreadSanitizer",
                      "PANIC: unprotected error",
                      "double free", "corrupted size", "Segmentation fault", "Aborted"}
-- The log is scanned in parts: a soak's producer log passes a gigabyte, more than a Lua string
-- may hold.
local SCAN = 8 * 1024 * 1024
function Proc:sanitizer_report()
  local f = io.open(self.log, "rb")
  if not f then return nil end
  local carry = ""
  while true do
    local data = f:read(SCAN)
    if not data then break end
    local s = carry .. data
    for _, pat in ipairs(bad_patterns) do
      local at = s:find(pat, 1, true)
      if at then
        s = s .. (f:read(256) or "") -- the context after it, when the part ended too soon
        f:close()
        return (s:sub(math.max(1, at - 80), at + 160):gsub("\n", " "))
      end
    end
    carry = s:sub(-256)
  end
  f:close()
end

-- Why this process counts as crashed, or nil.
function Proc:crash()
  local rc = self:rc()
  local rep = self:sanitizer_report()
  if rep then return "report in " .. self.name .. ": " .. rep end
  if rc and not self.expect[rc] then
    local why = rc > 128 and ("signal " .. (rc - 128)) or ("exit code " .. rc)
    return self.name .. " ended with " .. why .. (self.stopped_by_us and "" or " (not stopped by the suite)")
  end
end

function Proc:tail(n)
  local lines = {}
  local f = io.open(self.log, "rb")
  local s = ""
  if f then -- the last 64 KiB are enough for a tail (and a log may be huge)
    local size = f:seek("end")
    f:seek("set", math.max(0, size - 65536))
    s = f:read("*a") or ""
    f:close()
  end
  for l in s:gmatch("[^\n]+") do lines[#lines + 1] = l end
  local out = {}
  for i = math.max(1, #lines - (n or 10) + 1), #lines do out[#out + 1] = lines[i] end
  return table.concat(out, "\n")
end

-- ---- admin over the remoting protocol ------------------------------------------------------
local function request(addr, code, ext, body, timeout)
  local c, err = raw.connect(addr)
  if not c then return nil, err end
  local r, e = c:request(code, ext, body, {timeout = timeout or 5})
  c:close()
  return r, e
end
M.request = request

-- The topic's route: { brokers = {name = master address}, queues = {{broker=, qid=}, ...} }.
function M.route(ns, topic)
  local r, err = request(ns, 105, {topic = topic})
  if not r then return nil, err end
  if r.code ~= 0 then return nil, "route of " .. topic .. ": code " .. r.code .. " " .. tostring(r.remark) end
  local d = cjson.decode(r.body)
  local out = {brokers = {}, queues = {}}
  for _, bd in ipairs(d.brokerDatas or {}) do
    out.brokers[bd.brokerName] = bd.brokerAddrs and (bd.brokerAddrs["0"] or bd.brokerAddrs[0])
  end
  for _, qd in ipairs(d.queueDatas or {}) do
    for q = 0, (qd.readQueueNums or 0) - 1 do
      out.queues[#out.queues + 1] = {broker = qd.brokerName, qid = q}
    end
  end
  table.sort(out.queues, function(a, b)
    if a.broker ~= b.broker then return a.broker < b.broker end
    return a.qid < b.qid
  end)
  return out
end

-- Master addresses of every broker of the cluster(s) behind ns.
function M.cluster_masters(ns)
  local r, err = request(ns, 106, {})
  if not r then return nil, err end
  local body = r.body:gsub('"(%d+)"%s*:', '"%1":') -- keys may be bare integers (fastjson)
  body = body:gsub('([{,])(%d+):', '%1"%2":')
  local d = cjson.decode(body)
  local out = {}
  for name, bd in pairs(d.brokerAddrTable or {}) do
    local a = bd.brokerAddrs and bd.brokerAddrs["0"]
    if a then out[name] = a end
  end
  return out
end

-- UPDATE_AND_CREATE_TOPIC on the given master addresses.
function M.create_topic(addrs, topic, queues)
  for _, addr in pairs(addrs) do
    local r, err = request(addr, 17, {topic = topic, defaultTopic = "TBW102",
      readQueueNums = tostring(queues), writeQueueNums = tostring(queues), perm = "6",
      topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false"})
    if not r then return nil, err end
    if r.code ~= 0 then return nil, "create topic " .. topic .. " at " .. addr .. ": " .. tostring(r.remark) end
  end
  return true
end

-- Offsets per queue of the route: kind "max" (GET_MAX_OFFSET), "min" or "committed" (of group;
-- -1 when none). Returns { ["broker:qid"] = offset }, or nil, err.
function M.offsets(ns, topic, kind, group, rt)
  rt = rt or M.route(ns, topic)
  if not rt then return nil, "no route for " .. topic end
  local out = {}
  for _, q in ipairs(rt.queues) do
    local addr = rt.brokers[q.broker]
    if not addr then return nil, "no master address for " .. q.broker end
    local code = kind == "max" and 30 or kind == "min" and 29 or 14
    local r, err = request(addr, code, {topic = topic, queueId = tostring(q.qid), consumerGroup = group})
    if not r then return nil, err end
    local off
    if r.code == 0 then
      off = tonumber(r.extFields.offset)
    elseif kind == "committed" and r.code == 22 then
      off = -1 -- QUERY_NOT_FOUND
    else
      return nil, kind .. " offset of " .. q.broker .. ":" .. q.qid .. ": code " .. r.code
    end
    out[q.broker .. ":" .. q.qid] = off
  end
  return out
end

-- Sum over queues of max - committed (a queue never committed counts its whole max - min).
function M.lag(ns, group, topic)
  local rt = M.route(ns, topic)
  local mx, err = M.offsets(ns, topic, "max", nil, rt)
  if not mx then return nil, err end
  local cm, err2 = M.offsets(ns, topic, "committed", group, rt)
  if not cm then return nil, err2 end
  local mn = M.offsets(ns, topic, "min", nil, rt) or {}
  local lag = 0
  for k, v in pairs(mx) do
    local c = cm[k]
    if not c or c < 0 then c = mn[k] or 0 end
    lag = lag + math.max(0, v - c)
  end
  return lag
end

-- clientIds of a group as the broker at addr sees them.
function M.consumer_ids(addr, group)
  local r, err = request(addr, 38, {consumerGroup = group})
  if not r then return nil, err end
  if r.code ~= 0 then return {} end
  local ok, d = pcall(cjson.decode, r.body)
  return ok and d.consumerIdList or {}
end

-- GET_CONSUMER_RUNNING_INFO through the broker: { ["broker:qid"] = cachedMsgCount }.
function M.cached_counts(addr, group, cid)
  local r, err = request(addr, 307, {consumerGroup = group, clientId = cid, jstackEnable = "false"}, nil, 5)
  if not r then return nil, err end
  if r.code ~= 0 then return nil, "running info: code " .. r.code .. " " .. tostring(r.remark) end
  local out = {}
  for key, info in r.body:gmatch('(%b{})%s*:%s*(%b{})') do
    local b = key:match('"brokerName"%s*:%s*"([^"]*)"')
    local q = key:match('"queueId"%s*:%s*(%d+)')
    local n = info:match('"cachedMsgCount"%s*:%s*(%d+)')
    if b and q and n then out[b .. ":" .. q] = tonumber(n) end
  end
  return out
end

-- Every message of topic:qid at addr, pulled from its min offset (the development broker
-- serves %DLQ% topics; a real broker refuses them: nil, err).
function M.pull_all(addr, group, topic, qid)
  local r = request(addr, 29, {topic = topic, queueId = tostring(qid)})
  local off = r and r.code == 0 and tonumber(r.extFields.offset) or 0
  local out = {}
  for _ = 1, 100000 do
    local p, err = request(addr, 11, {consumerGroup = group, topic = topic, queueId = tostring(qid),
      queueOffset = tostring(off), maxMsgNums = "32", sysFlag = "4", commitOffset = "0",
      suspendTimeoutMillis = "0", subscription = "*", subVersion = "0", expressionType = "TAG"})
    if not p then return nil, err end
    if p.code == 0 then
      for _, m in ipairs(raw.decode_messages(p.body)) do out[#out + 1] = m end
      off = tonumber(p.extFields.nextBeginOffset)
    elseif p.code == 19 or p.code == 20 or p.code == 21 then -- not found / no new / no match
      return out
    else
      return nil, "pull " .. topic .. ":" .. qid .. ": code " .. p.code .. " " .. tostring(p.remark)
    end
  end
  return out
end

-- ---- records ------------------------------------------------------------------------------
-- A Tally reads record files incrementally and keeps, per msg_id, the count of successful
-- deliveries (in an idtab: ids, shared with the scenario's produced set when it gives one), plus
-- whatever the scenario's hook wants from each record.
local Tally = {}
Tally.__index = Tally

function M.tally(hook, ids)
  return setmetatable({files = {}, ids = ids or require("idtab").new(), nrec = 0, hook = hook,
                       pos = {}, bad = 0}, Tally)
end

function Tally:add_file(path) self.files[#self.files + 1] = path end

-- Read the record files once, start to end, through hook: the Tally.
function M.read_records(files, hook)
  local t = M.tally(hook)
  for _, f in ipairs(files) do t:add_file(f) end
  t:poll()
  return t
end

local rec_pat = "^(%S+) (%S+) (%S+) (%d+) (%d+) (%d+) (%d+) (%a) (%S+) (%S+)$"

local CHUNK = 32 * 1024 * 1024 -- a soak's record files grow to hundreds of MB: read them in parts

-- The complete lines of data (up to its last newline) into the tally; n records.
function Tally:take(data)
  local n = 0
  for line in data:gmatch("([^\n]*)\n") do
    local id, key, broker, qid, off, rt, ms, st, label, store = line:match(rec_pat)
    if id then
      n = n + 1
      if st == "k" then self.ids:delivered(id) end
      if self.hook then
        self.hook({id = id, key = key, broker = broker, qid = tonumber(qid), off = tonumber(off),
                   rt = tonumber(rt), ms = tonumber(ms), st = st, label = label, store = store})
      end
    elseif #line > 0 then
      self.bad = self.bad + 1 -- a line cut by kill -9 in the middle of a write
    end
  end
  return n
end

-- Read what was appended since the last call. Returns the number of new records.
function Tally:poll()
  local n = 0
  for _, path in ipairs(self.files) do
    local f = io.open(path, "rb")
    if f then
      local pos = self.pos[path] or 0
      while true do
        f:seek("set", pos)
        local data = f:read(CHUNK)
        local last = data and data:match(".*()\n")
        if not last then break end -- nothing, or a line still being written
        n = n + self:take(data:sub(1, last))
        pos = pos + last
      end
      self.pos[path] = pos
      f:close()
    end
  end
  self.nrec = self.nrec + n
  return n
end

-- Successful deliveries of id (nil when none).
function Tally:ok(id) return self.ids:ok(id) end

-- The ids delivered successfully, each with its count: for id, n in tally:each_ok() do.
function Tally:each_ok() return self.ids:each_ok() end

-- Against the produced set: distinct consumed, missing (list of up to 5), duplicates (successful
-- deliveries beyond the first), extra (consumed msg_ids that were never acknowledged to the
-- producer).
function Tally:count()
  local distinct, missing, dups, extra = 0, 0, 0, 0
  local examples = {}
  for id, produced, k in self.ids:each() do
    if produced and k > 0 then
      distinct = distinct + 1
      dups = dups + (k - 1)
    elseif produced then
      missing = missing + 1
      if #examples < 5 then examples[#examples + 1] = id end
    elseif k > 0 then
      extra = extra + 1
    end
  end
  return {distinct = distinct, missing = missing, dups = dups, extra = extra, examples = examples}
end

-- Distinct produced msg_ids consumed so far (a running count: no walk over the set).
function Tally:consumed() return self.ids.done end

return M
