-- netfault.lua: the reliability suite's network-fault scenarios (14-20; scenarios.lua holds
-- 1-13). The consumer runs in a network namespace of its own (netns.lua), joined to the root
-- namespace by a veth pair; the development broker listens on the pair's root-side address and
-- advertises it; a scenario breaks the link with nftables or tc inside what this run created,
-- and mends it. Each scenario states its bounds next to it (docs/reliability.md has the table)
-- and fills the table's network columns: time to notice, time to recover, CPU during the fault.
--
-- Short mode shortens some faults (said at each); --long runs the durations of issue 24.
local L = require "lib"
local N = require "netns"

local S = {}

local SLACK_S = 3 -- scheduling, the suite's 0.5 s polls, a loaded 2-core machine

-- A development broker on a new link's root-side address (name server and broker ports both
-- there). Returns link, broker (b.ns, b.addrs, b.names).
local function net_cluster(ctx, topic, queues, args)
  local link = N.link()
  ctx.links = ctx.links or {}
  ctx.links[#ctx.links + 1] = link
  local b = ctx:broker(string.format("--listen %s:0 --broker-listen %s:0 --topic %s:%d %s",
    link.host, link.host, topic, queues, args or ""))
  return link, b
end

-- Another namespace for a second consumer, reaching the first link's host address.
local function second_link(ctx)
  local link = N.link()
  ctx.links[#ctx.links + 1] = link
  return link
end

local function port(addr) return tonumber(addr:match(":(%d+)$")) end

-- The consumer's CPU use (percent of one core) between two calls.
local function cpu_meter(p)
  local t0, c0 = L.mono(), N.cpu_s(p.pid)
  return function()
    local dt = L.mono() - t0
    return dt > 0 and 100 * (N.cpu_s(p.pid) - c0) / dt or 0
  end
end

-- Wait until none of the connections in `old` (local ports) is established any more; returns
-- the seconds waited, or nil after timeout.
local function wait_closed(link, bport, old, timeout)
  local t0 = L.mono()
  local ok = pcall(L.wait_for, function()
    local now = link:conns(bport)
    for lp in pairs(old) do if now[lp] then return false end end
    return true
  end, timeout, "the consumer to close its broker connection", 0.25)
  return ok and (L.mono() - t0) or nil
end

-- Seconds from now until the record files grow by one delivery (nil after timeout).
local function wait_progress(ctx, timeout)
  ctx.tally:poll()
  local n0, t0 = ctx.tally.nrec, L.mono()
  local ok = pcall(L.wait_for, function()
    ctx.tally:poll()
    return ctx.tally.nrec > n0 or ctx.tally:consumed_of(ctx.produced) >= ctx.nproduced
  end, timeout, "deliveries after the fault", 0.2)
  return ok and (L.mono() - t0) or nil
end

-- Wait (up to 30 s) until the group's committed offsets cover the topic: ok, lag.
local function wait_lag0(ns, group, topic)
  local lag
  local ok = pcall(L.wait_for, function()
    lag = L.lag(ns, group, topic)
    return lag == 0
  end, 30, "lag 0", 0.5)
  return ok, lag
end

local function secs(v) return v and string.format("%.1f s", v) or "never" end

-- ---- 14. broker blackhole ---------------------------------------------------------------------
-- Every packet to and from the broker's port (name server included) dropped, no RST, for 30 s
-- (short mode: 15 s, enough to see the notice, the close and the redial).
-- Bounds: the consumer closes its silent broker connection within heartbeat_broker_interval +
-- mq_client_api_timeout (+ slack): 5 s + 3 s here; after the link returns it consumes again
-- within 20 s; 0 missing; duplicates 0 (no connection to the broker is lost before an offset
-- reaches it: the commits of the blackhole go out again on the next persist).

local HB_MS, API_MS = 5000, 3000

S[14] = {title = "broker blackhole 30 s (short: 15 s)", long_title = "broker blackhole 30 s", netns = true,
         run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local link, b = net_cluster(ctx, topic, 8)
  ctx:produce({ns = b.ns, topic = topic, n = 20000, prefix = "n"})
  local c = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "c", sleep_ms = 10,
                          bin = link.exec .. L.bin,
                          set = {heartbeat_broker_interval = HB_MS, mq_client_api_timeout = API_MS}})
  ctx:wait_records(4000, "consumption before the blackhole")
  local baddr = b.addrs[b.names[1]]
  local bport = port(baddr)
  local old = link:conns(bport)
  ctx:check(next(old) ~= nil, "the consumer is connected to the broker before the blackhole")
  local cpu = cpu_meter(c)
  link:fault("blackhole", {baddr, b.ns})
  local hole = o.long and 30 or 15
  ctx:log("blackhole on %s and %s for %d s", baddr, b.ns, hole)
  local t0 = L.mono()
  local notice = wait_closed(link, bport, old, hole)
  ctx.row.notice_s = notice
  L.sleep(math.max(0, hole - (L.mono() - t0)))
  ctx.row.cpu_pct = cpu()
  link:clear()
  ctx:log("link back; the old connection closed after %s", secs(notice))
  local bound = (HB_MS + API_MS) / 1000 + SLACK_S
  ctx:check(notice and notice <= bound, "the silent broker noticed (connection closed) within %.0f s: %s",
    bound, secs(notice))
  local rec = wait_progress(ctx, 60)
  ctx.row.recover_s = rec
  ctx:check(rec and rec <= 20, "consuming again within 20 s of the link's return: %s", secs(rec))
  ctx:go_fast()
  ctx:wait_consumed(180)
  local lag_ok, lag = wait_lag0(b.ns, group, topic)
  c:stop()
  ctx:check(lag_ok, "lag 0 once everything was consumed (lag %s)", tostring(lag))
  ctx:count()
  ctx:check(ctx.row.dups == 0, "no duplicates (nothing committed was lost): %d", ctx.row.dups)
end}

return S
