-- ctx.lua: one scenario's run in the reliability suite: its folder, the processes it started
-- (brokers, consumers, producers), the messages its producers had acknowledged, the records its
-- consumers wrote, the checks it made, and its row of the results table.
local L = require "lib"

local Ctx = {}
Ctx.__index = Ctx

local RECORDER

-- id: scenario number; title: its name in the table.
function Ctx.new(id, title)
  RECORDER = RECORDER or (L.root .. "/scripts/reliability/recorder.lua")
  local dir = string.format("%s/s%02d", L.work, id)
  os.execute("mkdir -p " .. L.shq(dir))
  local run = string.format("%x", L.now_ms() % 0xFFFFFFF)
  local ids = require("idtab").new()
  local self = setmetatable({id = id, title = title, dir = dir, procs = {}, ids = ids,
                             tally = L.tally(nil, ids), checks = {}, notes = {},
                             started = L.mono(), run = run, rss_series = {}}, Ctx)
  self.row = {produced = 0, consumed = 0, missing = 0, dups = 0, dlq = "-", crashes = 0,
              rss_kb = 0}
  return self
end

-- A name unique to this run: "Rel03_1a2b3c" (topics), "rel03_1a2b3c" (groups).
function Ctx:topic(suffix) return string.format("Rel%02d%s_%s", self.id, suffix or "", self.run) end
function Ctx:group(suffix) return string.format("rel%02d%s_%s", self.id, suffix or "", self.run) end

function Ctx:log(fmt, ...)
  L.progress("%-2d %s", self.id, string.format(fmt, ...))
end

function Ctx:note(fmt, ...)
  self.notes[#self.notes + 1] = string.format(fmt, ...)
end

-- A bound or expectation: recorded with its text; a false one fails the row.
function Ctx:check(ok, fmt, ...)
  local text = string.format(fmt, ...)
  self.checks[#self.checks + 1] = {ok = not not ok, text = text}
  if not ok then self:log("CHECK FAILED: %s", text) end
  return ok
end

function Ctx:spawn(cmd, opts)
  opts = opts or {}
  opts.dir = self.dir
  local p = L.spawn(cmd, opts)
  self.procs[#self.procs + 1] = p
  return p
end

-- ---- brokers -------------------------------------------------------------------------------

local Broker = {}
Broker.__index = Broker

-- `rmqlua broker ARGS` (loopback, log level warn); waits for the ready line. Returns a Broker:
-- proc, ns (name server address), addrs (broker name -> address), names (in order).
function Ctx:broker(args, opts)
  opts = opts or {}
  local b = setmetatable({ctx = self, args = args, opts = opts}, Broker)
  b:start(args)
  return b
end

function Broker:start(args)
  local ctx = self.ctx
  local listen = self.ns_listen and ("--listen " .. self.ns_listen .. " ") or ""
  if not args:find("--listen", 1, true) and not args:find("--name-server", 1, true) and listen == "" then
    listen = "--listen 127.0.0.1:0 "
  end
  local bl = self.broker_listen and ("--broker-listen " .. self.broker_listen .. " ") or ""
  self.proc = ctx:spawn(L.bin .. " broker --log-level warn " .. listen .. bl .. args,
    {name = self.opts.name or "broker", kind = "broker"})
  local p = self.proc
  local text
  L.wait_for(function()
    if p:rc() then error("rmqlua broker exited with " .. p:rc() .. ": " .. p:tail(5)) end
    text = L.read(p.log)
    return text:find("name server at ", 1, true)
  end, 30, "the development broker's ready line", 0.05)
  self.ns = text:match("name server at (%S+)")
  self.addrs, self.names = {}, {}
  for name, addr in text:gmatch("broker (%S+) at (%S+)") do
    self.addrs[name] = addr
    self.names[#self.names + 1] = name
  end
  if not self.ns_listen and not args:find("--name-server", 1, true) then self.ns_listen = self.ns end
  if not self.broker_listen then
    local l = {}
    for _, n in ipairs(self.names) do l[#l + 1] = self.addrs[n] end
    self.broker_listen = table.concat(l, ",")
  end
end

-- Start again on the same addresses (with --store the messages are back).
function Broker:restart()
  self:start(self.args)
end

-- The fault counts the broker logged when it stopped: { PULL_MESSAGE = n, ... }.
function Broker:fault_counts()
  local out = {}
  for n, name in L.read(self.proc.log):gmatch("fault: (%d+) (%S+) request%(s%)") do
    out[name] = (out[name] or 0) + tonumber(n)
  end
  return out
end

-- ---- consumers -----------------------------------------------------------------------------

-- `rmqlua run recorder.lua` with opts: ns, group, topic, tags, label, mode, sleep_ms, key,
-- orderly, set (table of option = value), bin (another rmqlua), env (more environment).
-- Returns the proc; its records go to proc.rec and are read by the scenario's tally.
function Ctx:consumer(opts)
  local rec = string.format("%s/records-%s.txt", self.dir, opts.label or "c")
  local env = {REL_OUT = rec, REL_GROUP = opts.group, REL_TOPIC = opts.topic,
               REL_TAGS = opts.tags, REL_LABEL = opts.label, REL_MODE = opts.mode,
               REL_SLEEP_MS = opts.sleep_ms and tostring(opts.sleep_ms), REL_KEY = opts.key and
               tostring(opts.key), REL_ORDERLY = opts.orderly and "1" or nil,
               REL_FAST = self.dir .. "/fast", REL_RELEASE = self.dir .. "/release"}
  for k, v in pairs(opts.env or {}) do env[k] = v end
  local sets = {}
  for k, v in pairs(opts.set or {}) do sets[#sets + 1] = "--set " .. L.shq(k .. "=" .. tostring(v)) end
  table.sort(sets)
  local cmd = string.format("%s run %s --namesrv %s %s", opts.bin or L.bin, L.shq(RECORDER),
    L.shq(opts.ns), table.concat(sets, " "))
  local p = self:spawn(cmd, {name = "consumer-" .. (opts.label or "c"), kind = "consumer", env = env})
  p.rec = rec
  p.label = opts.label
  p.ready_pattern = "started as "
  self.tally:add_file(rec)
  return p
end

-- Handlers sleeping per batch (REL_SLEEP_MS) stop sleeping from now on.
function Ctx:go_fast() L.write(self.dir .. "/fast", "") end
-- The stuck handler returns.
function Ctx:release() L.write(self.dir .. "/release", "") end

-- ---- producers -----------------------------------------------------------------------------

-- Read the msgIds of a finished `rmqlua send --verbose` into the produced set (and, when into
-- is given, the new ones into that table as keys).
-- Line by line: a soak's producer log grows past a gigabyte, more than one Lua string holds.
function Ctx:collect(p, into)
  local n = 0
  local sent, failed
  local f = io.open(p.log, "rb")
  if f then
    for line in f:lines() do
      -- (a whole id only: an id cut short by another line is no message of ours)
      for st, id in line:gmatch("(%u[%u_]+) msgId=(%x+) ") do
        if st == "SEND_OK" or st:find("TIMEOUT") or st == "SLAVE_NOT_AVAILABLE" then
          if self.ids:produce(id) then
            n = n + 1
            if into then into[id] = true end
          end
        end
      end
      local s1, f1 = line:match("sent (%d+), failed (%d+)")
      if s1 then sent, failed = s1, f1 end
    end
    f:close()
  end
  p.sent, p.failed = tonumber(sent), tonumber(failed)
  return n
end

-- `rmqlua send`: n messages of size bytes with keys "<prefix>-<n>" (n from 0). opts: ns, topic,
-- prefix, size, tags, verbose (default true: the msgIds join the produced set), wait (default
-- true), into (a table: the new msgIds as its keys), args (more `rmqlua send` options). Returns the number acknowledged (or the proc when
-- wait is false).
function Ctx:produce(opts)
  local verbose = opts.verbose ~= false
  local cmd = string.format("%s send --namesrv %s --topic %s --count %d --size %d --keys %s %s %s %s",
    L.bin, L.shq(opts.ns), L.shq(opts.topic), opts.n, opts.size or 100,
    L.shq((opts.prefix or "k") .. "-{n}"), opts.tags and ("--tags " .. L.shq(opts.tags)) or "",
    verbose and "--verbose" or "", opts.args or "")
  local p = self:spawn(cmd, {name = "send", kind = "producer", expect = {[0] = true, [1] = true}})
  p.verbose = verbose
  if opts.wait == false then return p end
  p:wait(600)
  if verbose then self:collect(p, opts.into) end
  if p:rc() ~= 0 then
    self:note("producer: %s", (L.read(p.log):match("[^\n]*sent %d+, failed %d+[^\n]*") or ("exit " .. p:rc())))
  end
  return verbose and p.sent or tonumber(L.read(p.log):match("sent (%d+)")) or 0
end

-- A steady producer: rate msgs/s for secs seconds (pace.lua | rmqlua send --verbose). Returns
-- the proc; Ctx:collect(proc) once it ended.
function Ctx:paced(opts)
  local send = string.format("%s send --namesrv %s --topic %s --keys %s --verbose %s", L.shq(L.bin),
    L.shq(opts.ns), L.shq(opts.topic), L.shq((opts.prefix or "p") .. "-{n}"),
    opts.tags and ("--tags " .. L.shq(opts.tags)) or "")
  local cmd = string.format("luajit %s %d %d %s %s", L.shq(L.root .. "/scripts/reliability/pace.lua"),
    opts.rate, opts.secs, L.shq(L.work .. "/pids"), L.shq(send))
  local p = self:spawn(cmd, {name = "paced", kind = "producer", expect = {[0] = true, [1] = true}})
  p.paced = true
  return p
end

-- A scenario's messages in either mode: in the long mode a steady producer of o.rate msgs/s for
-- o.secs seconds (Ctx:paced, returned), else opts.n messages sent at once (Ctx:produce: nothing
-- returned, or the proc when opts.wait is false). opts: ns, topic, n, prefix, wait.
function Ctx:feed(o, opts)
  if o.long then
    return self:paced({ns = opts.ns, topic = opts.topic, rate = o.rate, secs = o.secs,
                       prefix = opts.prefix})
  end
  local r = self:produce(opts)
  if opts.wait == false then return r end
end

-- ---- results -------------------------------------------------------------------------------

function Ctx:sample_mem()
  local peak = 0
  for _, p in ipairs(self.procs) do
    if p.kind == "consumer" and not p.exit_rc and p:alive() then p:mem() end
    if p.kind == "consumer" and p.hwm_kb > peak then peak = p.hwm_kb end
  end
  return peak
end

-- Stop whatever is still running (SIGKILL: the scenario is over), then fill in crashes, peak
-- memory and the count against the produced set.
function Ctx:finish()
  self:sample_mem()
  for _, p in ipairs(self.procs) do
    if not p:rc() then
      if p:alive() then
        p:mem()
        if p.kind == "broker" or p.kind == "tool" then
          p:signal(18) -- a frozen broker first thaws
          if not pcall(p.stop, p, 15) then p:kill9() end
        else
          p:kill9() -- the scenario is over (or failed) with this one still running
        end
      else
        pcall(p.wait, p, 5)
      end
    end
  end
  -- Every process counts, producers included (their exit code 1 says some sends failed, as
  -- during a broker outage; a signal or a sanitizer report in their log is a crash).
  local crashes = {}
  for _, p in ipairs(self.procs) do
    local why = p:crash()
    if why then crashes[#crashes + 1] = why end
  end
  self.row.crashes = #crashes
  for _, why in ipairs(crashes) do self:check(false, "no crash: %s", why) end
  if self.tally then
    self.tally:poll()
    if self.tally.bad > 0 then
      self:note("%d unreadable record line(s) ignored (cut by kill -9 in the middle of a write, "
        .. "or a garbled message's fields)", self.tally.bad)
    end
  end
  local peak = 0
  for _, p in ipairs(self.procs) do
    if p.kind == "consumer" and p.hwm_kb > peak then peak = p.hwm_kb end
  end
  self.row.rss_kb = self.row.rss_kb > 0 and self.row.rss_kb or peak
end

-- The usual count: distinct/missing/duplicates against the produced set, and the check that
-- nothing is missing (unless no_check: the scenario checks what it expects itself).
function Ctx:count(no_check)
  self.tally:poll()
  local c = self.tally:count()
  self.row.produced = self.ids.nproduced
  self.row.consumed = c.distinct
  self.row.missing = c.missing
  self.row.dups = c.dups
  if c.extra > 0 then
    self:note("%d consumed msgId(s) the producer never had acknowledged (stored, answer lost; "
      .. "or a fake broker's messages)", c.extra)
  end
  if no_check then return c end
  self:check(c.missing == 0, "nothing missing (missing %d%s)", c.missing,
    #c.examples > 0 and (", e.g. " .. table.concat(c.examples, " ")) or "")
  return c
end

-- Messages acknowledged to the producers so far; distinct ones of them consumed so far.
function Ctx:produced() return self.ids.nproduced end
function Ctx:consumed() return self.ids.done end

-- Wait (up to 120 s) until the record files hold n records, what naming the wait.
function Ctx:wait_records(n, what)
  return L.wait_for(function()
    self.tally:poll()
    return self.tally.nrec >= n
  end, 120, what)
end

-- Wait until every produced message was consumed at least once.
function Ctx:wait_consumed(timeout, what)
  return L.wait_for(function()
    self.tally:poll()
    return self:consumed() >= self:produced()
  end, timeout, what or "every produced message to be consumed", 0.5)
end

return Ctx
