-- netfault.lua: the reliability suite's network-fault scenarios (14-20 and 22; scenarios.lua holds
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
    return ctx.tally.nrec > n0 or ctx:consumed() >= ctx:produced()
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
local PERSIST_S = 5 -- persist_consumer_offset_interval (default)

S[14] = {title = "broker blackhole 30 s (short: 15 s)", long_title = "broker blackhole 30 s", netns = true, dev = true,
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

-- ---- 15. name server blackhole --------------------------------------------------------------
-- Only the name server's port dropped (20 s; long: 60 s) while the broker stays reachable.
-- Bounds: messages sent during the blackhole are consumed during it (the routes the consumer
-- has serve on); the name server connection is closed within poll_name_server_interval +
-- mq_client_api_timeout (+ slack): 2 s + 3 s here; route queries reach it again within
-- poll_name_server_interval + slack after the link returns; 0 missing, 0 duplicates.

local POLL_NS_MS = 2000

S[15] = {title = "name server blackhole 20 s", long_title = "name server blackhole 60 s", netns = true, dev = true,
         run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local link, b = net_cluster(ctx, topic, 8)
  ctx:produce({ns = b.ns, topic = topic, n = 2000, prefix = "n"})
  local c = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "c", bin = link.exec .. L.bin,
                          set = {poll_name_server_interval = POLL_NS_MS, mq_client_api_timeout = API_MS}})
  ctx:wait_consumed(60, "the messages sent before the blackhole")
  local nsport = port(b.ns)
  local old = link:conns(nsport)
  ctx:check(next(old) ~= nil, "the consumer is connected to the name server before the blackhole")
  local cpu = cpu_meter(c)
  link:fault("blackhole", {b.ns})
  local hole = o.long and 60 or 20
  ctx:log("name server %s blackholed for %d s", b.ns, hole)
  local t0 = L.mono()
  local notice = wait_closed(link, nsport, old, hole / 2)
  ctx.row.notice_s = notice
  local bound = (POLL_NS_MS + API_MS) / 1000 + SLACK_S
  ctx:check(notice and notice <= bound, "the silent name server's connection closed within %.0f s: %s",
    bound, secs(notice))
  -- Sent (from the root namespace) and consumed while the name server is unreachable.
  ctx:produce({ns = b.ns, topic = topic, n = 2000, prefix = "d"})
  local during = pcall(ctx.wait_consumed, ctx, math.max(1, hole - (L.mono() - t0) - 1),
    "the messages sent during the blackhole")
  ctx:check(during, "the messages sent during the blackhole consumed during it (%d of %d so far)",
    ctx:consumed(), ctx:produced())
  L.sleep(math.max(0, hole - (L.mono() - t0)))
  ctx.row.cpu_pct = cpu()
  link:clear()
  local t1 = L.mono()
  local back = pcall(L.wait_for, function() return next(link:conns(nsport)) ~= nil end, 30,
    "a name server connection again", 0.25)
  local rec = back and (L.mono() - t1) or nil
  ctx.row.recover_s = rec
  local rbound = POLL_NS_MS / 1000 + SLACK_S
  ctx:check(rec and rec <= rbound, "route queries reach the name server again within %.0f s: %s", rbound, secs(rec))
  ctx:produce({ns = b.ns, topic = topic, n = 1000, prefix = "a"})
  ctx:wait_consumed(60)
  local lag_ok, lag = wait_lag0(b.ns, group, topic)
  c:stop()
  ctx:check(lag_ok, "lag 0 once everything was consumed (lag %s)", tostring(lag))
  ctx:count()
  ctx:check(ctx.row.dups == 0, "no duplicates: %d", ctx.row.dups)
end}

-- ---- 16. one-way loss broker -> consumer -----------------------------------------------------
-- Packets from the broker's port dropped (15 s; long: 30 s); the consumer's requests still
-- arrive (pulls, commits, heartbeats), their answers never do. Bounds: the connection is closed
-- within heartbeat_broker_interval + mq_client_api_timeout (+ slack); no committed offset goes
-- back; consuming again within 20 s of the link's return; 0 missing, 0 duplicates.

S[16] = {title = "one-way loss broker→consumer 15 s", long_title = "one-way loss broker→consumer 30 s",
         netns = true, dev = true, run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local link, b = net_cluster(ctx, topic, 8)
  ctx:produce({ns = b.ns, topic = topic, n = 20000, prefix = "n"})
  local c = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "c", sleep_ms = 10,
                          bin = link.exec .. L.bin,
                          set = {heartbeat_broker_interval = HB_MS, mq_client_api_timeout = API_MS}})
  ctx:wait_records(4000, "consumption before the loss")
  local baddr = b.addrs[b.names[1]]
  local bport = port(baddr)
  local old = link:conns(bport)
  local before = assert(L.offsets(b.ns, topic, "committed", group))
  local cpu = cpu_meter(c)
  link:fault("in", {baddr})
  local hole = o.long and 30 or 15
  ctx:log("packets from %s dropped for %d s", baddr, hole)
  local t0 = L.mono()
  local notice = wait_closed(link, bport, old, hole)
  ctx.row.notice_s = notice
  L.sleep(math.max(0, hole - (L.mono() - t0)))
  ctx.row.cpu_pct = cpu()
  local mid = assert(L.offsets(b.ns, topic, "committed", group))
  link:clear()
  local bound = (HB_MS + API_MS) / 1000 + SLACK_S
  ctx:check(notice and notice <= bound, "the connection without answers closed within %.0f s: %s",
    bound, secs(notice))
  local back = 0
  for k, v in pairs(before) do if (mid[k] or -1) < v then back = back + 1 end end
  ctx:check(back == 0, "offsets committed before the loss stay committed (%d queue(s) went back)", back)
  local rec = wait_progress(ctx, 60)
  ctx.row.recover_s = rec
  ctx:check(rec and rec <= 20, "consuming again within 20 s of the link's return: %s", secs(rec))
  ctx:go_fast()
  ctx:wait_consumed(180)
  local lag_ok, lag = wait_lag0(b.ns, group, topic)
  c:stop()
  ctx:check(lag_ok, "lag 0 once everything was consumed (lag %s)", tostring(lag))
  local log = L.read(c.log)
  ctx:note("consumer log: %d pull(s) timed out", select(2, log:gsub("PULL_MESSAGE%(11%)[^\n]*timed out", "")))
  ctx:count()
  ctx:check(ctx.row.dups == 0, "no duplicates: %d", ctx.row.dups)
end}

-- ---- 17. slow link ---------------------------------------------------------------------------
-- 256 KiB messages (uncompressed), 4 queues, pull_threshold_size_for_queue 4 MiB, one consume
-- thread. First the flow-control bound: 104 messages (26 MiB, 6.5 MiB a queue) waiting and a
-- handler taking 500 ms a message, so the cache fills until the size threshold stops the pulls
-- (the broker answers one 256 KiB message a pull: maxTransferBytesOnMessageInMemory); then the
-- link slows to 1 Mbit/s both ways (tc tbf on the veth pair) while the pulls are held, the
-- handler goes fast, and the rest (about 24, long: 24 + 100 more) come over the slow link, about
-- 2 s each. Bounds: the pulls were held by the size threshold on every queue (the consumer's
-- "flow control, N MiB held" log lines, log_debug = pull); the cache really filled (peak RSS at
-- least 2 × 4 MiB above the start) and peak RSS stays within what the consumer had before the
-- messages + 4 queues × (4 MiB + 1 MiB, the threshold counting whole MiB, + one 256 KiB pull)
-- + 24 MiB for the runtime's own buffers; pulls answered slowly do not turn into a retry storm
-- (at most one timed-out pull per queue); 0 missing.

local THR_MIB, QUEUES = 4, 4

S[17] = {title = "slow link 1 Mbit/s, 256 KiB messages", netns = true, dev = true, run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local link, b = net_cluster(ctx, topic, QUEUES)
  local c = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "c", bin = link.exec .. L.bin,
                          sleep_ms = 500, set = {pull_threshold_size_for_queue = THR_MIB, consume_thread_min = 1,
                                                 consume_thread_max = 1, log_debug = "pull"}})
  L.wait_for(function() return L.read(c.log):find("started as ", 1, true) end, 30, "the consumer's start")
  L.sleep(2)
  local _, rss0 = c:mem()
  -- Not compressed (the generated bodies compress to almost nothing): 256 KiB on the wire each.
  local n = 104 + (o.long and 100 or 0)
  local t0 = L.mono()
  ctx:produce({ns = b.ns, topic = topic, n = n, size = 256 * 1024, prefix = "s", args = "--no-compress"})
  -- The pulls held by the size threshold on every queue.
  local function held()
    local qs, k, lines = {}, 0, 0
    for q in L.read(c.log):gmatch("%[pull%] (%S+): flow control, %d+ MiB held") do
      lines = lines + 1
      if not qs[q] then qs[q] = true; k = k + 1 end
    end
    return k, lines
  end
  local ok = pcall(L.wait_for, function() c:mem() return held() >= QUEUES end, 30,
    "the pulls held by flow control on every queue", 0.2)
  local hq = held()
  ctx:check(ok, "pulls held by pull_threshold_size_for_queue (%d MiB) on %d of %d queues", THR_MIB, hq, QUEUES)
  for _ = 1, 8 do c:mem(); L.sleep(0.25) end -- the cache at its fullest, pulls still held
  local hold_kb = c.hwm_kb
  -- The link slows while the pulls are held; the rest comes over it.
  link:slow("1mbit")
  local cpu = cpu_meter(c)
  ctx:go_fast()
  ctx:wait_consumed(60 + (n - 80) * 3, "the big messages over the slow link")
  ctx.row.cpu_pct = cpu()
  ctx.row.notice_s, ctx.row.recover_s = false, false -- nothing to notice: the link only slows
  ctx:note("%d messages of 256 KiB in %.1f s, the last ones over 1 Mbit/s", n, L.mono() - t0)
  link:slow(nil)
  c:mem()
  local lag_ok, lag = wait_lag0(b.ns, group, topic)
  c:stop()
  ctx:check(lag_ok, "lag 0 once everything was consumed (lag %s)", tostring(lag))
  local log = L.read(c.log)
  local _, lines = held()
  ctx:note("%d flow-control hold(s) logged (one per %d ms retry of a held queue)", lines, 50)
  local timeouts = select(2, log:gsub("PULL_MESSAGE%(11%)[^\n]*timed out", ""))
  ctx:check(timeouts <= QUEUES, "no pull retry storm: %d pull(s) timed out (at most one per queue)", timeouts)
  local bound_kb = rss0 + QUEUES * ((THR_MIB + 1) * 1024 + 256) + 24 * 1024
  if not (L.asan or L.tsan) then
    ctx:check(hold_kb - rss0 >= 2 * THR_MIB * 1024, "the cache filled while pulls were held: RSS +%.1f MB (>= %d MB)",
      (hold_kb - rss0) / 1024, 2 * THR_MIB)
    ctx:check(c.hwm_kb <= bound_kb, "peak RSS %.1f MB within %.1f MB (%.1f MB before + %d × (%d + 1 MiB + 256 KiB) + 24 MB)",
      c.hwm_kb / 1024, bound_kb / 1024, rss0 / 1024, QUEUES, THR_MIB)
  end
  ctx:count()
end}

-- ---- 18. reset storm -------------------------------------------------------------------------
-- Every packet to the broker's and the name server's ports rejected with a TCP reset for 20 s:
-- the open connections are reset on their next write, every new one is refused at once.
-- Bounds: no busy loop: CPU during the storm at most 20 % of one core (ASan: 40 %) and at most
-- 150 connection attempts (reconnect back-off 100 ms doubling to 5 s per address, requests
-- queued meanwhile); consuming again within 10 s (5 s back-off + slack) of the storm's end;
-- 0 missing; duplicates only of what was consumed in the persist window before the storm.

S[18] = {title = "reset storm 20 s", netns = true, dev = true, run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local link, b = net_cluster(ctx, topic, 8)
  ctx:produce({ns = b.ns, topic = topic, n = 20000, prefix = "n"})
  local c = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "c", sleep_ms = 10,
                          bin = link.exec .. L.bin})
  ctx:wait_records(4000, "consumption before the storm")
  local baddr = b.addrs[b.names[1]]
  local cpu = cpu_meter(c)
  local started = L.now_ms()
  link:fault("reset", {baddr, b.ns})
  ctx:log("every packet to %s and %s answered with a reset for 20 s", baddr, b.ns)
  local t0 = L.mono()
  local notice = wait_closed(link, port(baddr), link:conns(port(baddr)), 20)
  ctx.row.notice_s = notice
  L.sleep(math.max(0, 20 - (L.mono() - t0)))
  ctx.row.cpu_pct = cpu()
  local syns = link:rejected()
  link:clear()
  local limit = (L.asan or L.tsan) and 40 or 20
  ctx:check(ctx.row.cpu_pct <= limit, "no busy loop: CPU during the storm %.1f %% <= %d %%", ctx.row.cpu_pct, limit)
  ctx:check(syns <= 150, "connection attempts during the storm: %d packets reset (<= 150)", syns)
  local rec = wait_progress(ctx, 60)
  ctx.row.recover_s = rec
  ctx:check(rec and rec <= 10, "consuming again within 10 s of the storm's end: %s", secs(rec))
  ctx:go_fast()
  ctx:wait_consumed(180)
  local lag_ok, lag = wait_lag0(b.ns, group, topic)
  c:stop()
  ctx:check(lag_ok, "lag 0 once everything was consumed (lag %s)", tostring(lag))
  ctx:count()
  local outside, ex = require("scenarios").checks.dup_check({c.rec},
    {{started - 5000 - 2000, started + 22000}})
  ctx:check(outside == 0, "duplicates only of what was consumed in the persist window before the storm: %d outside%s",
    outside, ex and (", e.g. " .. ex) or "")
end}

-- ---- 19. partition of one of two consumers ----------------------------------------------------
-- Two consumers, each in its own namespace; one is cut off from the broker and the name server
-- (30 s; long: 60 s), the broker expiring a channel after 10 s without a heartbeat (its default,
-- 120 s, is longer than the partition), heartbeats every 2 s. Bounds: its queues are consumed by the other member during the
-- partition (all 8 queues); it rejoins and consumes again after the link returns; 0 missing;
-- duplicates only of what was delivered within one hand-over window (the partition's length +
-- the persist interval + slack) before the queue's new owner started on it.

S[19] = {title = "partition of 1 of 2 consumers 30 s", long_title = "partition of 1 of 2 consumers 60 s",
         netns = true, dev = true, run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local la, b = net_cluster(ctx, topic, 8, "--channel-expire-ms 10000")
  local lb = second_link(ctx)
  ctx:produce({ns = b.ns, topic = topic, n = 6000, prefix = "n"})
  local set = {heartbeat_broker_interval = 2000}
  local ca = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "a", sleep_ms = 20,
                           bin = la.exec .. L.bin, set = set})
  local cb = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "b", sleep_ms = 20,
                           bin = lb.exec .. L.bin, set = set})
  ctx:wait_records(2000, "consumption by both before the partition")
  local baddr = b.addrs[b.names[1]]
  local cpu = cpu_meter(ca)
  local cut_ms = L.now_ms()
  la:fault("blackhole", {baddr, b.ns})
  local hole = o.long and 60 or 30
  ctx:log("consumer a cut off for %d s", hole)
  local t0 = L.mono()
  -- Sent during the partition: the other member must get every queue's share.
  ctx:produce({ns = b.ns, topic = topic, n = 4000, prefix = "d"})
  local qs_b = {}
  local function b_queues()
    local n = 0
    for _ in pairs(qs_b) do n = n + 1 end
    return n
  end
  ctx.tally.hook = function(r)
    if r.label == "b" and r.ms > cut_ms and not r.store:find("^%%RETRY%%") then qs_b[r.qid] = true end
  end
  local ok = pcall(L.wait_for, function()
    ctx.tally:poll()
    return b_queues() == 8
  end, hole, "the other member consuming every queue", 0.5)
  local handed = ok and (L.mono() - t0) or nil
  ctx.row.notice_s = handed
  ctx:check(ok, "the partitioned member's queues consumed by the other one during the partition (%d of 8 queues, after %s)",
    b_queues(), secs(handed))
  L.sleep(math.max(0, hole - (L.mono() - t0)))
  ctx.row.cpu_pct = cpu()
  la:clear()
  local back_ms = L.now_ms()
  ctx:log("consumer a's link back")
  -- It rejoins: new messages reach it again.
  local a_after = 0
  ctx.tally.hook = function(r) if r.label == "a" and r.ms > back_ms then a_after = a_after + 1 end end
  local t1 = L.mono()
  ctx:produce({ns = b.ns, topic = topic, n = 4000, prefix = "r"})
  local rejoined = pcall(L.wait_for, function()
    ctx.tally:poll()
    return a_after > 0
  end, 90, "the partitioned member consuming again", 0.5)
  ctx.row.recover_s = rejoined and (L.mono() - t1) or nil
  ctx:check(rejoined, "the partitioned member rejoined and consumed again (%s after its link returned)",
    secs(ctx.row.recover_s))
  ctx:go_fast()
  ctx:wait_consumed(180)
  local lag_ok, lag = wait_lag0(b.ns, group, topic)
  ca:stop()
  cb:stop()
  ctx:check(lag_ok, "lag 0 once everything was consumed (lag %s)", tostring(lag))
  ctx:count()
  local window = (hole + PERSIST_S + SLACK_S) * 1000
  local outside, ex = require("scenarios").checks.dup_handover_check({ca.rec, cb.rec}, window)
  ctx:check(outside == 0, "duplicates only within one hand-over window (%.0f s): %d outside%s",
    window / 1000, outside, ex and (", e.g. " .. ex) or "")
end}

-- ---- 20. downstream faults -------------------------------------------------------------------
-- Handlers that call a service (build/copeer, an echo peer, on the link's root side) over
-- rmq.socket.tcp cosockets, the service's port blackholed, then reset, then slowed to 2 kbit/s,
-- 10 s each (long: 30 s), with consume_timeout_millis 3000. Bounds: every message consumed
-- (answered by the service) in the end, 0 missing; each fault is noticed by the handlers (a
-- failed call or a consume_timeout interruption) within consume_timeout + slack; consuming again
-- within 10 s of each fault's end; no thread stuck: the consumer stops cleanly (exit 0) at the
-- end; duplicates 0 (a batch counts once its answers came, and one interrupted never returns).

local CT_MS = 3000

S[20] = {title = "downstream blackhole/reset/slow 3×10 s", long_title = "downstream blackhole/reset/slow 3×30 s",
         netns = true, dev = true, run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local link, b = net_cluster(ctx, topic, 8, "--delay-scale 0.01")
  local copeer = L.root .. "/build/copeer"
  if L.bin:find("/build-asan/", 1, true) and L.exists(L.root .. "/build-asan/copeer") then
    copeer = L.root .. "/build-asan/copeer"
  end
  local peer = ctx:spawn(L.shq(copeer) .. " --host " .. link.host, {name = "copeer", kind = "tool"})
  peer.stop_expect = {[143] = true} -- it runs until killed
  local pport = L.wait_for(function() return tonumber(L.read(peer.log):match("PORT (%d+)")) end, 10,
    "copeer's port")
  local paddr = link.host .. ":" .. pport
  ctx:produce({ns = b.ns, topic = topic, n = 12000, prefix = "n"})
  local c = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "c", mode = "downstream",
                          sleep_ms = 20, bin = link.exec .. L.bin, env = {REL_DS_ADDR = paddr},
                          set = {consume_timeout_millis = CT_MS, consume_thread_min = 4,
                                 consume_thread_max = 4}})
  ctx:wait_records(1000, "calls to the service before its faults")
  local len = o.long and 30 or 10
  local cpu = cpu_meter(c)
  -- The current phase's start (unix ms): a failed call after it; its end: an answered one after.
  local fault_ms, mend_ms, failed_after, ok_after = math.huge, math.huge, false, false
  ctx.tally.hook = function(r)
    if r.st == "f" and r.ms >= fault_ms then failed_after = true end
    if r.st == "k" and r.ms >= mend_ms then ok_after = true end
  end
  -- The watchdog's lines: "interrupting it" for a batch run directly, "interrupting them" for
  -- batches in flight on a thread whose handlers wait (those waiting are given up).
  local function interrupts() return select(2, L.read(c.log):gsub("interrupting %a+", "")) end
  local worst_notice, worst_recover = 0, 0
  for _, kind in ipairs({"blackhole", "reset", "slow"}) do
    local i0 = interrupts()
    local t0 = L.mono()
    fault_ms, mend_ms, failed_after, ok_after = L.now_ms(), math.huge, false, false
    if kind == "slow" then link:slow("2kbit") else link:fault(kind, {paddr}) end
    ctx:log("service %s: %s for %d s", paddr, kind, len)
    local noticed = pcall(L.wait_for, function()
      ctx.tally:poll()
      return failed_after or interrupts() > i0
    end, len, "the handlers noticing", 0.25)
    local notice = noticed and (L.mono() - t0) or nil
    L.sleep(math.max(0, len - (L.mono() - t0)))
    if kind == "slow" then link:slow(nil) else link:clear() end
    mend_ms = L.now_ms()
    local t1 = L.mono()
    local rec_ok = pcall(L.wait_for, function()
      ctx.tally:poll()
      return ok_after or ctx:consumed() >= ctx:produced()
    end, 60, "calls answered again", 0.2)
    local rec = rec_ok and (L.mono() - t1) or nil
    local bound = CT_MS / 1000 + SLACK_S
    ctx:check(notice and notice <= bound, "%s: the handlers noticed within %.0f s (%s; %d consume_timeout interruption(s))",
      kind, bound, secs(notice), interrupts() - i0)
    ctx:check(rec and rec <= 10, "%s: calls answered again within 10 s of its end: %s", kind, secs(rec))
    worst_notice = notice and math.max(worst_notice, notice) or worst_notice
    worst_recover = rec and math.max(worst_recover, rec) or worst_recover
  end
  ctx.row.cpu_pct = cpu()
  ctx.row.notice_s, ctx.row.recover_s = worst_notice, worst_recover
  ctx:go_fast()
  ctx:wait_consumed(180)
  local lag_ok, lag = wait_lag0(b.ns, group, topic)
  local rc = c:stop(60)
  ctx:check(rc == 0, "no thread stuck: the consumer stopped cleanly (exit %s)", tostring(rc))
  ctx:check(lag_ok, "lag 0 once everything was consumed (lag %s)", tostring(lag))
  ctx:note("%d consume_timeout interruption(s) in all; the table's notice and recover are the worst of the three faults",
    interrupts())
  ctx:count()
  ctx:check(ctx.row.dups == 0, "no duplicates: %d", ctx.row.dups)
  peer:stop(10)
end}

-- ---- 22. partition right after an offset persist ------------------------------------------------
-- Two consumers in namespaces of their own, offsets persisted every second (log_debug = offset
-- logs each UPDATE_CONSUMER_OFFSET, a oneway); consumer a is cut off from the broker and the name
-- server the moment its log shows a persist tick (20 s; long: 60 s; the broker expires a channel
-- after 10 s without a heartbeat), so the ticks after it are lost in the blackhole. The broker's
-- committed offsets read right after the cut are the last persist that reached it. Bounds: a
-- persisted into the blackhole; the other member consumes all 8 queues during the partition; a
-- rejoins and consumes again; 0 missing; every duplicate is a message a consumed since that last
-- persist (at or above its queue's offset committed at the cut, delivered by a before its link
-- returned), or one the other member consumed since the cut from a queue that a, back, still
-- held and pulled from its own position (above the highest offset it had delivered there: as
-- the Java client, whose process queue is dropped only after 120 s without a pull), or one
-- delivered within the rejoin's hand-over window (persist interval + slack before the queue's
-- new owner started on it).

local PERSIST22_MS = 1000

S[22] = {title = "partition after an offset persist 20 s", long_title = "partition after an offset persist 60 s",
         netns = true, dev = true, run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local la, b = net_cluster(ctx, topic, 8, "--channel-expire-ms 10000")
  local lb = second_link(ctx)
  ctx:produce({ns = b.ns, topic = topic, n = 6000, prefix = "n"})
  local function set(more)
    local t = {heartbeat_broker_interval = 2000, persist_consumer_offset_interval = PERSIST22_MS}
    for k, v in pairs(more or {}) do t[k] = v end
    return t
  end
  local ca = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "a", sleep_ms = 20,
                           bin = la.exec .. L.bin, set = set({log_debug = "offset"})})
  local cb = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "b", sleep_ms = 20,
                           bin = lb.exec .. L.bin, set = set()})
  ctx:wait_records(2000, "consumption by both before the partition")
  local function persists() return select(2, L.read(ca.log):gsub("%[offset%] persist ", "")) end
  local p0 = persists()
  L.wait_for(function() return persists() > p0 end, 10, "a persist tick of consumer a", 0.02)
  local baddr = b.addrs[b.names[1]]
  local cpu = cpu_meter(ca)
  la:fault("blackhole", {baddr, b.ns})
  local cut_ms = L.now_ms()
  local p_cut = persists()
  -- What reached the broker: its committed offsets once a is cut off.
  local cut = assert(L.offsets(b.ns, topic, "committed", group))
  local hole = o.long and 60 or 20
  ctx:log("consumer a cut off right after a persist tick, for %d s", hole)
  local t0 = L.mono()
  ctx:produce({ns = b.ns, topic = topic, n = 4000, prefix = "d"})
  local qs_b = {}
  local function b_queues()
    local n = 0
    for _ in pairs(qs_b) do n = n + 1 end
    return n
  end
  ctx.tally.hook = function(r)
    if r.label == "b" and r.ms > cut_ms and not r.store:find("^%%RETRY%%") then qs_b[r.qid] = true end
  end
  local ok = pcall(L.wait_for, function()
    ctx.tally:poll()
    return b_queues() == 8
  end, hole, "the other member consuming every queue", 0.5)
  ctx.row.notice_s = ok and (L.mono() - t0) or nil
  ctx:check(ok, "the partitioned member's queues consumed by the other one during the partition (%d of 8 queues, after %s)",
    b_queues(), secs(ctx.row.notice_s))
  L.sleep(math.max(0, hole - (L.mono() - t0)))
  ctx.row.cpu_pct = cpu()
  local lost = persists() - p_cut
  la:clear()
  local back_ms = L.now_ms()
  ctx:check(lost >= 1, "consumer a persisted into the blackhole: %d queue offset(s) sent there (oneway UPDATE_CONSUMER_OFFSET, lost)", lost)
  local a_after = 0
  ctx.tally.hook = function(r) if r.label == "a" and r.ms > back_ms then a_after = a_after + 1 end end
  local t1 = L.mono()
  ctx:produce({ns = b.ns, topic = topic, n = 4000, prefix = "r"})
  local rejoined = pcall(L.wait_for, function()
    ctx.tally:poll()
    return a_after > 0
  end, 90, "the partitioned member consuming again", 0.5)
  ctx.row.recover_s = rejoined and (L.mono() - t1) or nil
  ctx:check(rejoined, "the partitioned member rejoined and consumed again (%s after its link returned)",
    secs(ctx.row.recover_s))
  ctx:go_fast()
  ctx:wait_consumed(180)
  local lag_ok, lag = wait_lag0(b.ns, group, topic)
  ca:stop()
  cb:stop()
  ctx:check(lag_ok, "lag 0 once everything was consumed (lag %s)", tostring(lag))
  ctx:count()
  -- a's deliveries since the last persist that reached the broker (before its link returned).
  local function since_persist(r)
    local com = cut[r.broker .. ":" .. r.qid]
    return r.label == "a" and r.ms < back_ms and r.store == topic and com ~= nil and r.off >= math.max(com, 0)
  end
  local a_since = 0
  L.read_records({ca.rec}, function(r) if r.st == "k" and since_persist(r) then a_since = a_since + 1 end end)
  -- a's position in each queue when its link returned: the highest offset it had delivered.
  local a_pos = {}
  L.read_records({ca.rec}, function(r)
    if r.st == "k" and r.ms < back_ms and r.store == topic then
      local k = r.broker .. ":" .. r.qid
      a_pos[k] = math.max(a_pos[k] or -1, r.off)
    end
  end)
  -- The other member's deliveries since the cut that a, back, delivered again from its own
  -- position in a queue it still held.
  local function resumed(prev, dup)
    local pos = a_pos[dup.broker .. ":" .. dup.qid]
    return prev.label == "b" and dup.label == "a" and prev.ms >= cut_ms and dup.ms >= back_ms
      and dup.store == topic and pos ~= nil and dup.off > pos
  end
  local persist_dups, resumed_dups = 0, 0
  local window = PERSIST22_MS + SLACK_S * 1000
  local outside, ex = require("scenarios").checks.dup_handover_check({ca.rec, cb.rec}, window, function(prev, dup)
    if since_persist(prev) then persist_dups = persist_dups + 1 return true end
    if resumed(prev, dup) then resumed_dups = resumed_dups + 1 return true end
    return false
  end)
  ctx:note("%d duplicate(s): %d of what a consumed since its last persist that reached the broker (%d such deliveries), %d of what b consumed from queues a resumed from its own position, the rest within the hand-over window",
    ctx.row.dups, persist_dups, a_since, resumed_dups)
  ctx:check(outside == 0 and persist_dups <= a_since,
    "duplicates only of what a consumed since its last persist that reached the broker, of what b consumed from queues a resumed, or within the hand-over window (%.0f s): %d outside%s",
    window / 1000, outside, ex and (", e.g. " .. ex) or "")
end}

return S
