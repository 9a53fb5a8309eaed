-- scripts/bench_startup: see the header of that script.
local lib = require "lib"
lib.name = "bench_startup"

local opt = lib.parse({ build = "string", threads = "number", runs = "number", namesrv = "string",
  topic = "string", set = "multi" }, { threads = 20, runs = 10, topic = "BenchStartup", set = {} },
  arg, lib.ROOT .. "/scripts/bench_startup")

local SLOT = 8 -- int64 per consume thread: init done, first message (CLOCK_MONOTONIC ns)
local tmp = lib.tmpdir()
local machine = lib.machine()
local namesrv = opt.namesrv
if not namesrv then
  namesrv = lib.start_broker(string.format("--topic %s:8", opt.topic), 64)
  lib.send(namesrv, string.format("--topic %s --count 1000 --size 100", opt.topic))
end

local function script(group, cfile, size)
  return lib.consumer_script("local slot\n", group, opt.topic, "FIRST", opt.threads,
    string.format([=[
  init = function(ctx)
    slot = map(%q, %d) + ctx.thread_index * %d
    slot[0] = mono_ns()
  end,
  consume = function(msgs, ctx)
    if slot[1] == 0 then slot[1] = mono_ns() end
  end,
]=], cfile, size, SLOT))
end

local rows, firsts, readies, rsss = {}, {}, {}, {}
for r = 1, opt.runs do
  local size = (opt.threads + 2) * SLOT * 8
  local base, cfile = lib.shared("s." .. r, size)
  local path = string.format("%s/s%d.lua", tmp, r)
  lib.write_file(path, script(string.format("bench_start_%d_%d", r, math.random(1e9)), cfile, size))
  local argv = { lib.BIN, "run", "--namesrv", namesrv }
  for _, kv in ipairs(opt.set) do argv[#argv + 1] = "--set"; argv[#argv + 1] = kv end
  argv[#argv + 1] = path
  local log = string.format("%s/s%d.log", tmp, r)
  local t0 = lib.now_ns()
  local pid = lib.spawn_argv(argv, log)
  local first, ready, rss
  local deadline = t0 + 30e9
  while true do
    local f, all, last = math.huge, true, 0
    for t = 1, opt.threads do
      local s = base + t * SLOT
      local i, m = tonumber(s[0]), tonumber(s[1])
      if i == 0 then all = false else last = math.max(last, i) end
      if m > 0 then f = math.min(f, m) end
    end
    if all then ready = last end
    if f < math.huge and ready then
      first = f
      rss = lib.status_kb(pid, "VmRSS")
      break
    end
    if not lib.alive(pid) then lib.fail("the consumer exited:\n%s", lib.tail(log)) end
    if lib.now_ns() > deadline then lib.fail("no message in 30 s:\n%s", lib.tail(log)) end
    lib.sleep_ms(1)
  end
  lib.stop(pid)
  firsts[r], readies[r], rsss[r] = (first - t0) / 1e6, (ready - t0) / 1e6, rss / 1024
  io.stderr:write(string.format("run %d: first message %.1f ms, threads ready %.1f ms\n", r,
    firsts[r], readies[r]))
end

local function stats(t)
  local mn, mx = math.huge, 0
  for _, v in ipairs(t) do mn, mx = math.min(mn, v), math.max(mx, v) end
  return string.format("%.1f", lib.median(t)), string.format("%.1f", mn), string.format("%.1f", mx)
end
print(string.format("\nrmqlua start-up: exec -> first message, %d consume threads, %d runs, %s",
  opt.threads, opt.runs, opt.namesrv and ("name server " .. opt.namesrv) or "development broker"))
print("machine: " .. machine)
local a, b, c = stats(firsts)
local d, e, f = stats(readies)
lib.table({ "", "median ms", "min ms", "max ms" }, {
  { "exec -> first message", a, b, c },
  { "exec -> every thread's init done", d, e, f },
})
print(string.format("RSS at the first message: %.1f MB (median)", lib.median(rsss)))
lib.cleanup()
