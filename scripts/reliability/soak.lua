-- soak.lua: the soak (scripts/soak; `scripts/reliability.sh --soak` runs it alone, never in the
-- short or long modes): one consumer for M minutes (default 30) at R msgs/s (default 5000)
-- against the development broker (--store), while around it
--   - a second consumer joins and leaves every 60 s (rebalance both ways),
--   - the first is hot-reloaded (SIGHUP) every 5 minutes,
--   - the broker is killed -9 and restarted on the same addresses every 10 minutes (at 2, 12, ..),
--   - the first consumer's link is blackholed for 20 s every 10 minutes (at 6, 16, ..: needs
--     root and nft as the network scenarios; without them there are no blackholes, said in a note).
-- The first consumer starts 20 s after the producer, so its first minute catches up a backlog
-- (every consume thread runs). Its RSS, open file descriptors and threads are sampled every 10 s;
-- at the end each must be within 5 % of its value after that first minute (fds and threads: or
-- within 1).
-- A shorter run (--minutes M < 30, a trial) shrinks the whole schedule by M / 30.
-- Bounds: nothing missing, lag 0, no crash; duplicates are counted (a broker kill, a blackhole
-- and each hand-over bring some) and not bounded here.
local L = require "lib"
local N = require "netns"

local S = {}

local function count_fds(pid)
  local p = io.popen("ls /proc/" .. pid .. "/fd 2>/dev/null | wc -l")
  local n = tonumber(p:read("*a")) or 0
  p:close()
  return n
end

local function sample(p)
  local s = L.read("/proc/" .. p.pid .. "/status")
  return {rss = tonumber(s:match("VmRSS:%s*(%d+)")) or 0, threads = tonumber(s:match("Threads:%s*(%d+)")) or 0,
          fds = count_fds(p.pid)}
end

S[21] = {title = "soak", dev = true, soak = true, run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local secs, rate = o.secs, o.rate
  local store = ctx.dir .. "/store"
  local link, host
  if N.available() then
    link = N.link()
    ctx.links = {link}
    host = link.host
  else
    host = "127.0.0.1"
    ctx:note("no network namespaces here (%s): no blackholes", select(2, N.available()))
  end
  local b = ctx:broker(string.format("--listen %s:0 --broker-listen %s:0 --topic %s:8 --store %s",
    host, host, topic, L.shq(store)))
  -- Restarts keep the name server's port too.
  b.args = b.args:gsub("%-%-listen %S+", "--listen " .. b.ns, 1)
  -- A run shorter than 30 minutes (a trial) has its schedule shrunk in proportion.
  local k = math.min(1, secs / 1800)
  -- The first consumer starts `lead` seconds after the producer, so its first minute catches up
  -- a backlog: every consume thread runs, and its Lua state and compiled traces are warm, before
  -- the baseline is taken (a thread that never ran holds less; after the first catch-up the
  -- process holds what running every thread needs).
  local lead = math.max(2, 20 * k)
  local producer = ctx:paced({ns = b.ns, topic = topic, rate = rate, secs = secs + lead, prefix = "s"})
  L.sleep(lead)
  local ca = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "a",
                           bin = link and (link.exec .. L.bin) or nil})
  L.wait_for(function() return L.read(ca.log):find("started as ", 1, true) end, 30, "the consumer's start")
  local t0 = L.mono()
  local samples, base = {}, nil
  local cb, joins, reloads, restarts, holes = nil, 0, 0, 0, 0
  local next_sample, next_member, next_reload = t0 + 10, t0 + 60 * k, t0 + 300 * k
  local next_restart, next_hole = t0 + 120 * k, t0 + 360 * k
  local hole = math.max(2, 20 * k)
  while L.mono() - t0 < secs do
    local now = L.mono()
    if now >= next_sample then
      local s = sample(ca)
      s.t = now - t0
      samples[#samples + 1] = s
      if not base and now - t0 >= 60 then base = s end -- (every thread has run: warm)
      next_sample = next_sample + 10
    end
    if now >= next_member then
      if cb then
        cb:stop(60)
        cb = nil
      else
        joins = joins + 1
        cb = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "b" .. joins})
      end
      next_member = next_member + 60 * k
    end
    if now >= next_reload then
      ca:signal(1) -- SIGHUP: hot reload
      reloads = reloads + 1
      ctx:log("reload %d of the first consumer", reloads)
      next_reload = next_reload + 300 * k
    end
    if now >= next_restart then
      b.proc:kill9()
      L.sleep(2)
      b:restart()
      restarts = restarts + 1
      ctx:log("broker restart %d", restarts)
      next_restart = next_restart + 600 * k
    end
    if link and now >= next_hole then
      link:fault("blackhole", {b.ns, b.addrs[b.names[1]]})
      ctx:log("blackhole %d (%.0f s)", holes + 1, hole)
      L.sleep(hole)
      link:clear()
      holes = holes + 1
      next_hole = next_hole + 600 * k
    end
    L.sleep(1)
  end
  producer:wait(120)
  ctx:collect(producer)
  if cb then cb:stop(60) end
  ctx:wait_consumed(600)
  local lag
  local lag_ok = pcall(L.wait_for, function()
    lag = L.lag(b.ns, group, topic)
    return lag == 0
  end, 60, "lag 0", 1)
  local last = sample(ca)
  ca:stop(60)
  ctx:check(lag_ok, "lag 0 once everything was consumed (lag %s)", tostring(lag))
  ctx:note("%d join(s) of a second consumer, %d reload(s), %d broker restart(s), %d blackhole(s)", joins,
    reloads, restarts, holes)
  local series = {}
  for i, s in ipairs(samples) do
    if i % 6 == 0 then
      series[#series + 1] = string.format("%dmin %.1fMB %dfd %dthr", math.floor(i / 6), s.rss / 1024, s.fds, s.threads)
    end
  end
  ctx:note("first consumer every minute: %s", table.concat(series, ", "))
  -- Every sample into the scenario's folder; when the thread count changed; RSS range per tenth.
  local f = io.open(ctx.dir .. "/samples.txt", "w")
  local changes, prev = {}, nil
  for _, s in ipairs(samples) do
    f:write(string.format("%.0f %d %d %d\n", s.t, s.rss, s.fds, s.threads))
    if prev and s.threads ~= prev then
      changes[#changes + 1] = string.format("%d -> %d at %.0f s", prev, s.threads, s.t)
    end
    prev = s.threads
  end
  f:close()
  if #changes > 0 then ctx:note("thread count changes: %s", table.concat(changes, ", ")) end
  local tenth, ranges = math.max(1, math.floor(#samples / 10)), {}
  for i = 1, #samples, tenth do
    local lo, hi = math.huge, 0
    for j = i, math.min(#samples, i + tenth - 1) do
      lo, hi = math.min(lo, samples[j].rss), math.max(hi, samples[j].rss)
    end
    ranges[#ranges + 1] = string.format("%.0f-%.0f s: %.1f-%.1f", samples[i].t,
      samples[math.min(#samples, i + tenth - 1)].t, lo / 1024, hi / 1024)
  end
  ctx:note("RSS (MB, lowest-highest sample) by tenth of the run: %s", table.concat(ranges, "; "))
  if base then
    local function within(a, b0, slack) return math.abs(a - b0) <= math.max(b0 * 0.05, slack) end
    if not (L.asan or L.tsan) then
      ctx:check(within(last.rss, base.rss, 0), "RSS at the end within 5 %% of after the first minute (%.1f -> %.1f MB)",
        base.rss / 1024, last.rss / 1024)
    end
    ctx:check(within(last.fds, base.fds, 1), "open fds at the end within 5 %% (or 1) of after the first minute (%d -> %d)",
      base.fds, last.fds)
    ctx:check(within(last.threads, base.threads, 1),
      "threads at the end within 5 %% (or 1) of after the first minute (%d -> %d)", base.threads, last.threads)
  else
    ctx:note("shorter than a minute: no baseline for RSS, fds and threads")
  end
  ctx:count()
end}

return S
