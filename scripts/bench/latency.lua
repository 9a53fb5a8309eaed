-- scripts/bench_latency: see the header of that script.
local lib = require "lib"
local ffi = lib.ffi
lib.name = "bench_latency"

local opt = lib.parse({ build = "string", rates = "list", seconds = "number", threads = "number",
  batch = "number", queues = "number", json = "flag", namesrv = "string", topic = "string",
  set = "multi", nice = "string", rt = "number" },
  { rates = { 1000, 10000, 50000 }, seconds = 10, threads = 20, batch = 1, queues = 8, topic = "BenchLatency", set = {} }, arg, lib.ROOT .. "/scripts/bench_latency")

if opt.nice then
  lib.nice = tonumber(opt.nice) or lib.die("--nice needs a number")
end
if opt.rt then
  if opt.rt < 1 or opt.rt > 99 then lib.die("--rt needs a priority in 1..99") end
  lib.rt = opt.rt
end

local HB = 100001 -- histogram buckets: 0..99999 µs, then one for >= 100 ms
local SLOT = 2 * HB + 8 -- per thread: two histograms, then max_store, max_send, count
local tmp = lib.tmpdir()
local machine = lib.machine()

local namesrv, broker_pid = opt.namesrv, nil
if not namesrv then
  namesrv, broker_pid = lib.start_broker(string.format("--topic %s:%d", lib.sh_quote(opt.topic),
    opt.queues), 1024)
end

-- Bodies: {"sent_us":<16 digits>,... The handler reads the digits at offset 11.
local tpl = tmp .. "/body.json"
if opt.json then
  lib.write_file(tpl, lib.order_template())
else
  local t = '{"sent_us":{now_us},"id":{n},"pad":"'
  lib.write_file(tpl, t .. string.rep("x", 128 - #t - 2 + 2) .. '"}')
end
local probe = tmp .. "/probe.json"
lib.write_file(probe, '{"probe":{n}}')

local function consumer_script(group, cfile, size, since)
  return lib.consumer_script("local base\n", group, opt.topic, "LAST", opt.threads,
    string.format([=[
  consume_message_batch_max_size = %d,
  init = function(ctx)
    base = ffi.cast("int32_t *", map(%q, %d)) + (ctx.thread_index - 1) * %d
  end,
  consume = function(msgs, ctx)
    local now = tonumber(real_us())
    local h = base
    local hs = h + %d
    local meta = ffi.cast("int64_t *", h + 2 * %d)
    for i = 1, #msgs do
      local m = msgs[i]
      local p = m.body_ptr
      if m.body_len >= 40 and p[2] == 115 then -- {"sent_us":
        local sent = 0
        for k = 11, 26 do
          local c = p[k]
          if c < 48 or c > 57 then break end
          sent = sent * 10 + (c - 48)
        end
        if sent < %.0f then goto skip end -- sent before this run (an earlier rate's messages)
        local d1 = now - tonumber(m.store_timestamp) * 1000
        local d2 = now - sent
        if d1 < 0 then d1 = 0 end
        if d2 < 0 then d2 = 0 end
        if d1 > meta[0] then meta[0] = d1 end
        if d2 > meta[1] then meta[1] = d2 end
        if d1 > %d then d1 = %d end
        if d2 > %d then d2 = %d end
        h[d1] = h[d1] + 1
        hs[d2] = hs[d2] + 1
      end
      meta[2] = meta[2] + 1
      ::skip::
    end
  end,
]=], opt.batch, cfile, size, SLOT, HB, HB, since, HB - 1, HB - 1, HB - 1, HB - 1))
end

local function percentiles(hist_of)
  -- hist_of(b) -> count in bucket b summed over threads
  local total = 0
  local counts = {}
  for b = 0, HB - 1 do
    local c = hist_of(b)
    counts[b] = c
    total = total + c
  end
  local function pct(q)
    local want = math.ceil(total * q)
    local acc = 0
    for b = 0, HB - 1 do
      acc = acc + counts[b]
      if acc >= want and acc > 0 then return b end
    end
    return HB - 1
  end
  return total, pct(0.5), pct(0.99), pct(0.999)
end

local function fmt_us(us)
  if us >= HB - 1 then return ">100 ms" end
  if us >= 10000 then return string.format("%.1f ms", us / 1000) end
  return string.format("%.2f ms", us / 1000)
end

local rows = {}
for _, rate in ipairs(opt.rates) do
  local group = string.format("bench_lat_%d_%d", rate, math.random(1e9))
  local size = opt.threads * SLOT * 4 + 64
  size = size + (8 - size % 8)
  local base, cfile = lib.shared(string.format("lat.%d", rate), size)
  local script = tmp .. "/lat_" .. rate .. ".lua"
  -- SLOT int32 words per thread: two histograms, then max_store, max_send, count (int64)
  lib.write_file(script, consumer_script(group, cfile, size, lib.real_us()))
  local sets = ""
  for _, kv in ipairs(opt.set) do sets = sets .. " --set " .. lib.sh_quote(kv) end
  local clog = tmp .. "/consumer_" .. rate .. ".log"
  local cpid = lib.spawn(string.format("%s run --namesrv %s%s %s", lib.sh_quote(lib.BIN), namesrv,
    sets, lib.sh_quote(script)), clog)
  local i32 = ffi.cast("int32_t *", base)
  local function consumed()
    local n = 0
    for t = 0, opt.threads - 1 do
      n = n + tonumber(ffi.cast("int64_t *", i32 + t * SLOT + 2 * HB)[2])
    end
    return n
  end
  -- Wait until the consumer takes messages from every queue: probes at 200/s until at least
  -- 2 x queues of them were consumed (round robin over the queues), then a quiet second.
  io.stderr:write(string.format("rate %d: starting the consumer ...\n", rate))
  local ppid = lib.send_bg(namesrv, string.format("--topic %s --count %d --rate 200 --body-template %s",
    lib.sh_quote(opt.topic), 200 * 30, lib.sh_quote(probe)))
  local deadline = lib.now_ns() + 60e9
  while consumed() < 2 * opt.queues + 1 do
    if not lib.alive(cpid) then lib.fail("the consumer exited:\n%s", lib.tail(clog)) end
    if lib.now_ns() > deadline then lib.fail("the consumer got no probe in 60 s:\n%s", lib.tail(clog)) end
    lib.sleep_ms(20)
  end
  lib.sleep_ms(1000)
  lib.stop(ppid, 2000)
  lib.sleep_ms(300)
  local before = consumed()
  io.stderr:write(string.format("rate %d: sending %d messages for %d s ...\n", rate,
    rate * opt.seconds, opt.seconds))
  local cpu0, t0 = lib.cpu_s(cpid), lib.now_ns()
  local out = lib.send(namesrv, string.format("--topic %s --count %d --rate %d --body-template %s",
    lib.sh_quote(opt.topic), rate * opt.seconds, rate, lib.sh_quote(tpl)), opt.seconds * 10 + 60)
  local want = before + rate * opt.seconds
  deadline = lib.now_ns() + 60e9
  while consumed() < want and lib.now_ns() < deadline do lib.sleep_ms(10) end
  local dt = (lib.now_ns() - t0) / 1e9
  local cpu1 = lib.cpu_s(cpid)
  local hwm = lib.status_kb(cpid, "VmHWM")
  lib.stop(cpid)
  local got = consumed() - before
  local function hist(off)
    return function(b)
      local n = 0
      for t = 0, opt.threads - 1 do n = n + i32[t * SLOT + off + b] end
      return n
    end
  end
  local function maxof(k)
    local m = 0
    for t = 0, opt.threads - 1 do
      m = math.max(m, tonumber(ffi.cast("int64_t *", i32 + t * SLOT + 2 * HB)[k]))
    end
    return m
  end
  local n1, p50s, p99s, p999s = percentiles(hist(0))
  local _, p50p, p99p, p999p = percentiles(hist(HB))
  local achieved = tonumber(out:match("%(([%d.]+) msg/s%)")) or 0
  rows[#rows + 1] = { tostring(rate), string.format("%.0f", achieved), tostring(n1),
    fmt_us(p50s), fmt_us(p99s), fmt_us(p999s), fmt_us(maxof(0)),
    fmt_us(p50p), fmt_us(p99p), fmt_us(p999p), fmt_us(maxof(1)),
    string.format("%.1f%%", (cpu1 - cpu0) / dt * 100), string.format("%.1f", (hwm or 0) / 1024) }
  if got < rate * opt.seconds then
    io.stderr:write(string.format("  only %d of %d messages consumed\n", got, rate * opt.seconds))
  end
end

print(string.format("\nrmqlua delivery latency: %s bodies, %d queues, %d consume threads, "
  .. "batch %d, %d s per rate, %s",
  opt.json and "~1 KiB JSON" or "128 B", opt.queues, opt.threads, opt.batch, opt.seconds,
  opt.namesrv and ("name server " .. opt.namesrv) or "development broker"))
print("machine: " .. machine
  .. (lib.nice and string.format(" (broker, producer and consumer at nice %d)", lib.nice) or "")
  .. (lib.rt and string.format(" (broker, producer and consumer under SCHED_FIFO %d)", lib.rt)
    or ""))
lib.table({ "rate/s", "sent/s", "measured", "store p50", "p99", "p99.9", "max",
  "send p50", "p99", "p99.9", "max", "consumer CPU", "RSS MB" }, rows)
print([[
store: broker store timestamp (ms resolution) -> handler start; send: producer clock when the
message was handed to the producer (µs, in the body) -> handler start. consumer CPU: share of
one core over the producing time; RSS: peak.]])
lib.cleanup()
