-- scripts/bench_queues: see the header of that script.
local lib = require "lib"
local ffi = lib.ffi
lib.name = "bench_queues"

local opt = lib.parse({ build = "string", queues = "list", brokers = "number", idle = "number",
  threads = "number", namesrv = "string", topics = "string", set = "multi", ["repeat"] = "number" },
  { queues = { 8, 1024, 4096 }, brokers = 4, idle = 40, threads = 20, set = {}, ["repeat"] = 1 },
  arg, lib.ROOT .. "/scripts/bench_queues")

local SLOT = 8 -- int64 per consume thread: count, first, last (CLOCK_MONOTONIC ns)
local tmp = lib.tmpdir()
local machine = lib.machine()
local topics = {}
if opt.namesrv then
  if not opt.topics then lib.die("--namesrv needs --topics") end
  for t in opt.topics:gmatch("[^,]+") do topics[#topics + 1] = t end
  if #topics ~= #opt.queues then lib.die("--topics needs one topic per --queues entry") end
end

local function counter_script(group, topic, cfile, size)
  return lib.consumer_script("local slot\n", group, topic, "FIRST", opt.threads,
    string.format([=[
  init = function(ctx)
    slot = map(%q, %d) + ctx.thread_index * %d
  end,
  consume = function(msgs, ctx)
    local s = slot
    local t = mono_ns()
    if s[0] == 0 then s[1] = t end
    s[2] = t
    s[0] = s[0] + #msgs
  end,
]=], cfile, size, SLOT))
end

local function one_run(q, k, run)
  local topic, namesrv, broker_pid = topics[k], opt.namesrv, nil
  if not namesrv then
    topic = "BenchQueues" .. q
    local per = math.ceil(q / opt.brokers)
    namesrv, broker_pid = lib.start_broker(string.format("--brokers %d --topic %s:%d",
      opt.brokers, topic, per), 64)
  end
  -- One message per queue (the producer goes round robin over the queues).
  lib.send(namesrv, string.format("--topic %s --count %d --size 100", topic, q))
  local size = (opt.threads + 2) * SLOT * 8
  local base, cfile = lib.shared(string.format("q.%d.%d", q, run), size)
  local group = string.format("bench_q_%d_%d_%d", q, run, math.random(1e9))
  local script = string.format("%s/q_%d_%d.lua", tmp, q, run)
  lib.write_file(script, counter_script(group, topic, cfile, size))
  local argv = { lib.BIN, "run", "--namesrv", namesrv }
  for _, kv in ipairs(opt.set) do argv[#argv + 1] = "--set"; argv[#argv + 1] = kv end
  argv[#argv + 1] = script
  local clog = string.format("%s/consumer_%d_%d.log", tmp, q, run)
  local t0 = lib.now_ns()
  local pid = lib.spawn_argv(argv, clog)
  local function total()
    local n, first, last = 0, math.huge, 0
    for t = 1, opt.threads do
      local s = base + t * SLOT
      local c = tonumber(s[0])
      if c > 0 then
        n = n + c
        first = math.min(first, tonumber(s[1]))
        last = math.max(last, tonumber(s[2]))
      end
    end
    return n, first, last
  end
  local deadline = t0 + 120e9
  local n, first, last
  repeat
    if not lib.alive(pid) then lib.fail("the consumer exited:\n%s", lib.tail(clog)) end
    if lib.now_ns() > deadline then
      lib.fail("%d queues: %d of %d messages in 120 s:\n%s", q, (total()), q, lib.tail(clog))
    end
    lib.sleep_ms(5)
    n, first, last = total()
  until n >= q
  -- Idle: a trickle of 10 msgs/s while the consumer holds every queue.
  lib.sleep_ms(2000)
  local spid = lib.send_bg(namesrv, string.format("--topic %s --count %d --rate 10 --size 100",
    topic, (opt.idle + 5) * 10))
  lib.sleep_ms(500)
  local c0, i0 = lib.cpu_s(pid), lib.now_ns()
  local b0 = broker_pid and lib.cpu_s(broker_pid)
  lib.sleep_ms(opt.idle * 1000)
  local c1, i1 = lib.cpu_s(pid), lib.now_ns()
  local b1 = broker_pid and lib.cpu_s(broker_pid)
  local rss, hwm = lib.status_kb(pid, "VmRSS"), lib.status_kb(pid, "VmHWM")
  local got = total()
  lib.stop(spid, 2000)
  lib.stop(pid)
  if broker_pid then lib.stop(broker_pid) end
  return {
    first = (first - t0) / 1e6, all = (last - t0) / 1e6,
    idle = (c1 - c0) / ((i1 - i0) / 1e9) * 100,
    bidle = b1 and (b1 - b0) / ((i1 - i0) / 1e9) * 100,
    rss = rss / 1024, hwm = hwm / 1024, trickle = got - q,
  }
end

local results = {}
for k, q in ipairs(opt.queues) do
  local runs = {}
  for r = 1, opt["repeat"] do
    io.stderr:write(string.format("%d queues, run %d ...\n", q, r))
    runs[r] = one_run(q, k, r)
    io.stderr:write(string.format("  first message %.0f ms, all %.0f ms, idle %.2f%% of a core, RSS %.1f MB\n",
      runs[r].first, runs[r].all, runs[r].idle, runs[r].rss))
  end
  local m = {}
  for _, key in ipairs({ "first", "all", "idle", "bidle", "rss", "hwm", "trickle" }) do
    local vals = {}
    for _, r in ipairs(runs) do vals[#vals + 1] = r[key] or 0 end
    m[key] = lib.median(vals)
  end
  m.q = q
  results[#results + 1] = m
end

print(string.format("\nrmqlua with many queues: one consumer, %d consume threads, %s, "
  .. "one message per queue then 10 msgs/s%s",
  opt.threads, opt.namesrv and ("name server " .. opt.namesrv)
    or (opt.brokers .. " development brokers (one process)"),
  opt["repeat"] > 1 and string.format(", medians of %d runs", opt["repeat"]) or ""))
print("machine: " .. machine)
local rows = {}
local ref = results[1]
for _, r in ipairs(results) do
  local per = (r ~= ref) and string.format("%.1f KB", (r.rss - ref.rss) * 1024 / (r.q - ref.q)) or "-"
  rows[#rows + 1] = { tostring(r.q), string.format("%.0f ms", r.first), string.format("%.0f ms", r.all),
    string.format("%.2f%%", r.idle), string.format("%.1f", r.rss), string.format("%.1f", r.hwm),
    per, opt.namesrv and "n/a" or string.format("%.1f%%", r.bidle), tostring(r.trickle) }
end
lib.table({ "queues", "first msg", "all pre-filled", "idle CPU", "RSS MB", "peak MB",
  "per queue", "broker idle", "trickle got" }, rows)
print(string.format([[
first msg / all pre-filled: consumer exec -> first / last of the one-per-queue messages;
idle CPU: consumer CPU over %d s with only the trickle arriving, share of one core; RSS at the
end of that; per queue: (RSS - RSS at %d queues) / (queues - %d).]], opt.idle, ref.q, ref.q))
lib.cleanup()
