-- scenarios.lua: the reliability suite's scenarios (scripts/reliability.sh). Each one is a
-- function of a Ctx (ctx.lua) that starts what it needs, does the harm it is about, waits for
-- the outcome and records checks; ctx:finish() then counts crashes and memory.
--
-- Conventions: messages are counted by msgId (UNIQ_KEY, which `rmqlua send --verbose` prints
-- for every acknowledged message and the recorder writes for every delivery); keys
-- "<prefix>-<n>" pick the messages a failing/stuck handler reacts to. "Duplicates" are
-- successful deliveries of a msgId beyond its first.
local L = require "lib"

local S = {}

-- The name server and the broker addresses a scenario uses: a development broker it starts
-- (args for `rmqlua broker`), or the existing cluster of --namesrv (the topic is created on
-- every master with `queues` queues).
local function cluster(ctx, topic, queues, args)
  if L.namesrv then
    local masters = assert(L.cluster_masters(L.namesrv))
    assert(L.create_topic(masters, topic, queues))
    L.wait_for(function() return L.route(L.namesrv, topic) end, 60, "the route of " .. topic)
    return {ns = L.namesrv, addrs = masters}
  end
  return ctx:broker(string.format("--topic %s:%d %s", topic, queues, args or ""))
end

-- A broker address that serves admin requests for the group (any master of the route).
local function any_broker(ns, topic)
  local rt = assert(L.route(ns, topic))
  for _, q in ipairs(rt.queues) do return rt.brokers[q.broker] end
end

-- Wait until the committed offsets of group cover every message of topic (lag 0).
local function wait_lag0(ctx, ns, group, topic, timeout)
  local lag
  local ok = pcall(L.wait_for, function()
    lag = L.lag(ns, group, topic)
    return lag == 0
  end, timeout or 30, "lag 0", 0.5)
  return ok, lag
end

-- The msgIds of files delivered successfully more than once, each with an empty list.
local function delivered_twice(files)
  local ids = {}
  for id, n in L.read_records(files):each_ok() do if n > 1 then ids[id] = {} end end
  return ids
end

-- The check behind "duplicates bounded by one persist window": a successful delivery of a
-- msgId already consumed is fine when the earlier delivery happened inside one of the
-- intervals {from, to} (unix ms) -- the persist window before a kill, say -- and that interval
-- ended before the redelivery. Returns the number of duplicates outside and an example.
local function dup_check(files, intervals)
  -- Pass 1: successful deliveries per msgId; pass 2: the times of those delivered twice or
  -- more, compared in time order (several consumers write several files at once).
  local times = delivered_twice(files)
  L.read_records(files, function(r)
    local ts = r.st == "k" and times[r.id]
    if ts then ts[#ts + 1] = r.ms end
  end)
  local outside, example = 0, nil
  for id, ts in pairs(times) do
    table.sort(ts)
    for k = 2, #ts do
      local prev, now = ts[k - 1], ts[k]
      local ok = false
      for _, iv in ipairs(intervals) do
        if prev >= iv[1] and prev <= iv[2] and iv[2] <= now + 1000 then ok = true break end
      end
      if not ok then
        outside = outside + 1
        example = example or string.format("%s consumed at %d and again %.1f s later", id, prev,
          (now - prev) / 1000)
      end
    end
  end
  return outside, example
end

-- The same bound where queues change hands between members: a duplicate is fine when the
-- earlier delivery happened at most window_ms before another member first consumed from that
-- queue after it, or consumed the message itself (the hand-over: the new owner starts from the
-- last offset committed before it).
-- excused(prev, dup), when given, accepts a duplicate beyond that window (each a record with ms,
-- off, label, broker, qid, store). Returns the number of duplicates outside and an example.
local function dup_handover_check(files, window_ms, excused)
  local dup = delivered_twice(files)
  local per_q, labels, nl = {}, {}, 0 -- queue -> {ms, label#, ms, label#, ...}
  L.read_records(files, function(r)
    if r.st ~= "k" then return end
    local q = r.broker .. ":" .. r.qid .. ":" .. r.store
    local li = labels[r.label]
    if not li then nl = nl + 1; labels[r.label] = nl; li = nl end
    local a = per_q[q]
    if not a then a = {}; per_q[q] = a end
    a[#a + 1] = r.ms
    a[#a + 1] = li
    local d = dup[r.id]
    if d then
      d[#d + 1] = {ms = r.ms, li = li, q = q, off = r.off, label = r.label, broker = r.broker,
                   qid = r.qid, store = r.store}
    end
  end)
  -- Sort each queue's deliveries by time (pairs of numbers).
  for q, a in pairs(per_q) do
    local idx = {}
    for k = 1, #a, 2 do idx[#idx + 1] = k end
    table.sort(idx, function(x, y) return a[x] < a[y] end)
    local sorted = {}
    for _, k in ipairs(idx) do sorted[#sorted + 1] = a[k]; sorted[#sorted + 1] = a[k + 1] end
    per_q[q] = sorted
  end
  -- The first delivery on q by another member than li after ms (a binary search, then a walk).
  local function handover(q, ms, li)
    local a = per_q[q]
    local lo, hi = 1, #a / 2
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if a[2 * mid - 1] <= ms then lo = mid + 1 else hi = mid end
    end
    for k = lo, #a / 2 do
      if a[2 * k - 1] > ms and a[2 * k] ~= li then return a[2 * k - 1] end
    end
  end
  local outside, example = 0, nil
  for id, ds in pairs(dup) do
    table.sort(ds, function(x, y) return x.ms < y.ms end)
    for k = 2, #ds do
      local prev = ds[k - 1]
      local h = handover(prev.q, prev.ms, prev.li)
      -- The second delivery itself, by another member, is the change of hands (when both came
      -- in the same millisecond, the search above, for a later one, does not see it).
      if ds[k].li ~= prev.li and (not h or ds[k].ms < h) then h = ds[k].ms end
      if (not h or h - prev.ms > window_ms) and not (excused and excused(prev, ds[k])) then
        outside = outside + 1
        example = example or string.format("%s consumed at %d, again %.1f s later; the queue changed hands %s",
          id, prev.ms, (ds[k].ms - prev.ms) / 1000, h and string.format("%.1f s after", (h - prev.ms) / 1000) or "never")
      end
    end
  end
  return outside, example
end

local PERSIST_MS = 5000 -- persist_consumer_offset_interval (default)
local WINDOW_SLACK_MS = 2000 -- a slow batch in flight, the oneway commit, scheduling

-- When each member's log says it lost a queue ("<topic>@<broker>#<qid>: revoked", or its pull
-- expired and it dropped the queue): label -> queue name -> unix ms of each loss. A queue can
-- leave a member and come back to it in the next round (allocations differ while the members'
-- views of the group do): what it consumed of the queue and had not committed is then
-- delivered again, to that same member.
local function queue_losses(ctx)
  local out = {}
  for _, p in ipairs(ctx.procs) do
    local f = p.rec and p.label and p.log and io.open(p.log, "rb")
    if f then
      local per = {}
      for line in f:lines() do
        local Y, Mo, D, h, mi, sec, ms, q = line:match(
          "^(%d+)%-(%d+)%-(%d+) (%d+):(%d+):(%d+)%.(%d+) %u+%s+%[rebalance%] (%S+): ")
        if q and (line:find(": revoked", 1, true) or line:find("dropping it for now", 1, true)) then
          local t = os.time({year = tonumber(Y), month = tonumber(Mo), day = tonumber(D),
            hour = tonumber(h), min = tonumber(mi), sec = tonumber(sec)}) * 1000 + tonumber(ms)
          per[q] = per[q] or {}
          table.insert(per[q], t)
        end
      end
      f:close()
      out[p.label] = per
    end
  end
  return out
end

-- An excuse for dup_handover_check: the member that consumed a message twice lost its queue
-- between the two deliveries, at most window_ms after the first (the loss persisted what was
-- committed; what was in flight came again when the queue came back).
local function lost_and_back(ctx, window_ms)
  local losses = queue_losses(ctx)
  return function(prev, dup)
    if prev.label ~= dup.label then return false end
    local per = losses[prev.label]
    local ts = per and per[prev.store .. "@" .. prev.broker .. "#" .. prev.qid]
    for _, t in ipairs(ts or {}) do
      -- (a batch running when the queue left records after the loss: up to the slack)
      if t - prev.ms >= -WINDOW_SLACK_MS and t - prev.ms <= window_ms and t <= dup.ms then return true end
    end
    return false
  end
end

-- (for a look at kept record files: luajit -e 'require("scenarios").checks...')
S.checks = {dup_check = dup_check, dup_handover_check = dup_handover_check, queue_losses = queue_losses,
            lost_and_back = lost_and_back}

-- Record files of a scenario's consumers, in the order they started.
local function rec_files(ctx)
  local out = {}
  for _, p in ipairs(ctx.procs) do if p.rec then out[#out + 1] = p.rec end end
  return out
end

-- ---- 1. consumer kill -9 loop ----------------------------------------------------------------


S[1] = {title = "consumer kill -9 ×10", long_title = "consumer kill -9 every 3-8 s", run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local b = cluster(ctx, topic, 8)
  local N = o.long and 0 or 20000
  local producer = ctx:feed(o, {ns = b.ns, topic = topic, n = N, prefix = "a"})
  local kills = o.long and math.huge or 10
  local ends, files, committed = {}, {}, {}
  local k, deadline = 0, L.mono() + (o.secs or 0)
  while k < kills and (not o.long or L.mono() < deadline) do
    k = k + 1
    local label = "run" .. k
    -- 20 threads sleeping 66 ms per message: ~300 msg/s, so each kill lands mid-stream.
    local c = ctx:consumer({ns = b.ns, group = group, topic = topic, label = label,
                            sleep_ms = o.long and 0 or 66})
    files[#files + 1] = c.rec
    L.wait_for(function()
      ctx.tally:poll()
      return L.exists(c.rec) and #L.read(c.rec) > 0
    end, 60, label .. "'s first delivery")
    L.sleep(3 + math.random() * 5)
    c:kill9()
    ends[label] = L.now_ms() -- once it is gone: no delivery of that run comes after
    L.sleep(0.3)
    committed[k] = assert(L.offsets(b.ns, topic, "committed", group))
    ctx:log("kill %d: consumer %s killed, %d distinct consumed so far", k, label,
      ctx:consumed())
  end
  if producer then
    producer:wait(120)
    ctx:collect(producer)
  end
  ctx:go_fast()
  local c = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "final", sleep_ms = 66})
  files[#files + 1] = c.rec
  ctx:wait_consumed(300)
  local lag_ok, lag = wait_lag0(ctx, b.ns, group, topic, 20)
  c:stop()
  ctx:check(lag_ok, "lag 0 once everything was consumed (lag %s)", tostring(lag))
  -- No delivery below the offset committed before each kill, in the run after it.
  local below, example = 0, nil
  for i = 1, k do
    local after = i < k and ("run" .. (i + 1)) or "final"
    L.read_records({files[i + 1]}, function(r)
      if r.label ~= after or r.store:find("^%%RETRY%%") then return end
      local com = committed[i][r.broker .. ":" .. r.qid]
      if com and com >= 0 and r.off < com then
        below = below + 1
        example = example or string.format("%s %s:%d offset %d < committed %d", after, r.broker,
          r.qid, r.off, com)
      end
    end)
  end
  ctx:check(below == 0, "no delivery below the offset committed before each kill (%d%s)", below,
    example and (": " .. example) or "")
  local iv = {}
  for _, e in pairs(ends) do iv[#iv + 1] = {e - PERSIST_MS - WINDOW_SLACK_MS, e} end
  local outside, ex = dup_check(files, iv)
  ctx:check(outside == 0, "duplicates only of what was consumed in the persist window (%d s) before a kill: %d outside%s",
    (PERSIST_MS + WINDOW_SLACK_MS) / 1000, outside, ex and (", e.g. " .. ex) or "")
  ctx:count()
  ctx:note("%d kills; duplicates %s (≤ one persist window of consumption per kill)", k,
    L.num(ctx.row.dups))
end}

-- ---- 2. broker kill -9 and restart -----------------------------------------------------------

-- The broker under test in its own process (--name-server), so that killing it leaves the name
-- server up, as in a real cluster.
local function split_cluster(ctx, topic, queues, broker_args)
  local nsb = ctx:broker("--broker-name nsonly", {name = "namesrv"})
  local b = ctx:broker(string.format("--name-server %s --broker-name rel --topic %s:%d %s", nsb.ns,
    topic, queues, broker_args or ""), {name = "broker"})
  b.ns = nsb.ns
  L.wait_for(function()
    local rt = L.route(nsb.ns, topic)
    return rt and #rt.queues == queues
  end, 60, "the broker's registration")
  return nsb, b
end

S[2] = {title = "broker kill -9 + restart", long_title = "broker kill -9 every 1-2 min", dev = true, run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local store = ctx.dir .. "/store"
  local _, b = split_cluster(ctx, topic, 8, "--store " .. L.shq(store))
  local producer = ctx:feed(o, {ns = b.ns, topic = topic, n = 20000, prefix = "b"})
  -- ~2000 msg/s: the kill lands with most of the messages still to come.
  local c = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "c", sleep_ms = o.long and 0 or 10})
  local ends = {}
  local deadline = L.mono() + (o.secs or 0)
  local restarts = 0
  repeat
    ctx:wait_records((o.long and 1 or 4000) * (restarts + 1), "consumption before the broker kill")
    if o.long then L.sleep(60 + math.random() * 60) end
    ctx.tally:poll()
    local killed_at = L.now_ms()
    b.proc:kill9()
    ctx:log("broker killed (-9) at %d records", ctx.tally.nrec)
    L.sleep(5)
    b:restart()
    restarts = restarts + 1
    ctx:log("broker restarted from %s", store)
    ends["c@" .. restarts] = killed_at
  until not o.long or L.mono() > deadline
  if producer then
    producer:wait(120)
    ctx:collect(producer)
  end
  ctx:go_fast()
  ctx:wait_consumed(300)
  local lag_ok = wait_lag0(ctx, b.ns, group, topic, 30)
  c:stop()
  local lag = L.lag(b.ns, group, topic)
  ctx:check(lag_ok and lag == 0, "lag 0 after a clean stop (lag %s)", tostring(lag))
  ctx:count()
  -- The broker keeps committed offsets up to its last second before the kill (--store): only
  -- what was consumed in the persist window before it (or while it was down) may come again.
  local iv = {}
  for _, e in pairs(ends) do iv[#iv + 1] = {e - PERSIST_MS - WINDOW_SLACK_MS, e + 5000 + 2000} end
  local outside, ex = dup_check(rec_files(ctx), iv)
  ctx:check(outside == 0, "duplicates only of what was consumed in the persist window before the kill or while it was down: %d outside%s",
    outside, ex and (", e.g. " .. ex) or "")
  ctx:note("%d broker kill(s); duplicates %s", restarts, L.num(ctx.row.dups))
end}

-- ---- 3. broker freeze ---------------------------------------------------------------------------

S[3] = {title = "broker SIGSTOP 40 s", long_title = "broker SIGSTOP 40 s every 1-2 min", dev = true, run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local _, b = split_cluster(ctx, topic, 8)
  local producer = ctx:feed(o, {ns = b.ns, topic = topic, n = 20000, prefix = "c"})
  local c = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "c", sleep_ms = o.long and 0 or 10})
  local deadline = L.mono() + (o.secs or 0)
  local freezes = 0
  repeat
    ctx:wait_records(4000 * (freezes + 1), "consumption before the freeze")
    if o.long then L.sleep(60 + math.random() * 60) end
    ctx.tally:poll()
    b.proc:signal(19) -- SIGSTOP: sockets stay open, nothing answers
    local frozen_at = ctx.tally.nrec
    ctx:log("broker frozen (SIGSTOP) at %d records", frozen_at)
    L.sleep(40)
    ctx.tally:poll()
    local during = ctx.tally.nrec
    b.proc:signal(18) -- SIGCONT
    local thawed = L.mono()
    freezes = freezes + 1
    ctx:log("broker resumed (SIGCONT); %d deliveries while frozen (what was cached)", during - frozen_at)
    local ok = pcall(L.wait_for, function()
      ctx.tally:poll()
      return ctx.tally.nrec > during or ctx:consumed() >= ctx:produced()
    end, 120, "deliveries after SIGCONT")
    ctx:check(ok, "consumption resumed after SIGCONT (%.1f s)", L.mono() - thawed)
    if ok then ctx:note("freeze %d: consumption resumed %.1f s after SIGCONT", freezes, L.mono() - thawed) end
  until not o.long or L.mono() > deadline
  if producer then
    producer:wait(120)
    ctx:collect(producer)
  end
  ctx:go_fast()
  ctx:wait_consumed(300)
  local lag_ok, lag = wait_lag0(ctx, b.ns, group, topic, 30)
  c:stop()
  ctx:check(lag_ok, "lag 0 once everything was consumed (lag %s)", tostring(lag))
  local log = L.read(c.log)
  local pulls = select(2, log:gsub("PULL_MESSAGE%(11%)[^\n]*timed out", ""))
  local others = select(2, log:gsub("timed out", "")) - pulls
  ctx:note("consumer log: %d pull(s) and %d other request(s) timed out during the freeze", pulls, others)
  ctx:count()
  ctx:check(ctx.row.dups == 0, "no duplicates (a freeze loses no offset): %d", ctx.row.dups)
end}

-- ---- 4. connection resets -----------------------------------------------------------------------

S[4] = {title = "connection resets (200k)", long_title = "connection resets", dev = true, run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  -- A reset closes the connection with every request in flight on it, and the broker forgets
  -- the consumer's channel until its next heartbeat (as a 4.9.4 broker does): pulls then fail
  -- with SUBSCRIPTION_NOT_EXIST. Heartbeats every 5 s (not 30) keep each pause short; commits
  -- every second (not 5) put more of them in the way of a reset.
  local faults = "--fault PULL_MESSAGE:0.004:disconnect --fault UPDATE_CONSUMER_OFFSET:0.05:disconnect " ..
                 "--fault QUERY_CONSUMER_OFFSET:0.1:disconnect"
  local b = ctx:broker(string.format("--topic %s:8 %s --log-level info", topic, faults))
  local c = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "c",
                          set = {persist_consumer_offset_interval = 1000, heartbeat_broker_interval = 5000}})
  local p = ctx:feed(o, {ns = b.ns, topic = topic, n = 200000, prefix = "d", wait = false})
  p:wait((o.secs or 0) + 300)
  ctx:collect(p)
  ctx:log("%s produced", L.num(ctx:produced()))
  ctx:wait_consumed(300)
  local lag_ok, lag = wait_lag0(ctx, b.ns, group, topic, 60)
  ctx:check(lag_ok, "lag 0 once everything was consumed, commits surviving the resets (lag %s)", tostring(lag))
  c:stop()
  b.proc:stop()
  local fc = b:fault_counts()
  ctx:note("resets injected: PULL_MESSAGE %d, UPDATE_CONSUMER_OFFSET %d, QUERY_CONSUMER_OFFSET %d",
    fc.PULL_MESSAGE or 0, fc.UPDATE_CONSUMER_OFFSET or 0, fc.QUERY_CONSUMER_OFFSET or 0)
  ctx:check((fc.PULL_MESSAGE or 0) > 0 and ((fc.UPDATE_CONSUMER_OFFSET or 0) + (fc.QUERY_CONSUMER_OFFSET or 0)) > 0,
    "resets hit both the pull and the offset paths")
  ctx:count()
  ctx:check(ctx.row.dups == 0, "no duplicates (nothing was consumed twice by one consumer): %d", ctx.row.dups)
end}

-- ---- 5. rebalance churn -------------------------------------------------------------------------

S[5] = {title = "rebalance churn (5 members)", run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local b = cluster(ctx, topic, 16)
  local churn_s = o.long and o.secs or 60
  local settle_s, observe_s = 15, 15
  local rate = o.long and o.rate or 400
  local producer = ctx:paced({ns = b.ns, topic = topic, rate = rate,
                              secs = churn_s + settle_s + observe_s, prefix = "e"})
  local members, n = {}, 0
  local function start()
    n = n + 1
    local c = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "m" .. n, sleep_ms = 2})
    members[#members + 1] = c
  end
  for _ = 1, 5 do start() end
  local t_end = L.mono() + churn_s
  local kills, terms, starts = 0, 0, 0
  while L.mono() < t_end do
    L.sleep(3)
    if (#members > 2 and math.random() < 0.5) or #members >= 7 then
      local i = math.random(#members)
      local c = table.remove(members, i)
      if math.random() < 0.5 then
        c:kill9()
        kills = kills + 1
      else
        c:stop()
        terms = terms + 1
      end
    else
      start()
      starts = starts + 1
    end
    ctx.tally:poll()
  end
  while #members < 5 do start() end
  ctx:log("churn over: %d kill -9, %d SIGTERM, %d started; %d members now", kills, terms, starts, #members)
  L.sleep(settle_s)
  local from = L.now_ms()
  L.sleep(observe_s)
  local to = L.now_ms()
  producer:wait(60)
  ctx:collect(producer)
  ctx:wait_consumed(120)
  for _, c in ipairs(members) do c:stop() end
  -- Once churn stopped: each queue consumed by one member only.
  local owners = {}
  local recs = {}
  for _, p in ipairs(ctx.procs) do if p.rec then recs[#recs + 1] = p.rec end end
  L.read_records(recs, function(r)
    if r.ms >= from and r.ms <= to and r.store == topic then
      local q = r.broker .. ":" .. r.qid
      owners[q] = owners[q] or {}
      owners[q][r.label] = true
    end
  end)
  local shared, ex = 0, nil
  for q, set in pairs(owners) do
    local names = {}
    for l in pairs(set) do names[#names + 1] = l end
    if #names > 1 then
      shared = shared + 1
      table.sort(names)
      ex = ex or (q .. " by " .. table.concat(names, ","))
    end
  end
  ctx:check(shared == 0, "after churn (a %d s window, %d s after it) no queue consumed by two members: %d%s",
    observe_s, settle_s, shared, ex and (" (" .. ex .. ")") or "")
  ctx:note("churn: %d kill -9, %d SIGTERM, %d started over %d s", kills, terms, starts, churn_s)
  ctx:count()
  -- A member killed loses what it consumed since its last persist; a queue changing hands may
  -- be queried by its new owner before the old one's last commit arrived.
  -- A queue can also leave a member and come back to it (lost_and_back).
  local window = PERSIST_MS + WINDOW_SLACK_MS
  local outside, ex = dup_handover_check(rec_files(ctx), window, lost_and_back(ctx, window))
  ctx:check(outside == 0, "duplicates only of what was consumed in the persist window before its queue changed hands "
    .. "(to another member, or away and back): %d outside%s", outside, ex and (", e.g. " .. ex) or "")
end}

-- ---- 6. two brokers, one down ------------------------------------------------------------------

S[6] = {title = "2 brokers, one down 30 s", dev = true, run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local a = ctx:broker(string.format("--broker-name a --topic %s:8", topic), {name = "broker-a"})
  local store = ctx.dir .. "/store-b"
  local bb = ctx:broker(string.format("--name-server %s --broker-name b --topic %s:8 --store %s",
    a.ns, topic, L.shq(store)), {name = "broker-b"})
  L.wait_for(function()
    local rt = L.route(a.ns, topic)
    return rt and #rt.queues == 16
  end, 60, "both brokers in the route")
  ctx:produce({ns = a.ns, topic = topic, n = 20000, prefix = "f"})
  local per = {}
  local t_down, t_up
  ctx.tally.hook = function(r)
    if r.st ~= "k" then return end
    local phase = not t_down and "before" or (not t_up or r.ms < t_up) and "down" or "after"
    local key = r.broker .. "/" .. phase
    per[key] = (per[key] or 0) + 1
  end
  local c = ctx:consumer({ns = a.ns, group = group, topic = topic, label = "c", sleep_ms = 40})
  ctx:wait_records(3000, "consumption before taking broker b down")
  ctx.tally:poll()
  t_down = L.now_ms()
  bb.proc:kill9()
  ctx:log("broker b down (kill -9)")
  L.sleep(30)
  ctx.tally:poll()
  t_up = L.now_ms()
  bb:restart()
  ctx:log("broker b back (--store)")
  ctx:go_fast()
  local back = L.mono()
  local resumed
  L.wait_for(function()
    ctx.tally:poll()
    if not resumed and (per["b-a/after"] or 0) > 0 then resumed = L.mono() - back end
    return ctx:consumed() >= ctx:produced()
  end, 300, "every message, broker b's included")
  c:stop()
  local a_down, b_down = per["a-a/down"] or 0, per["b-a/down"] or 0
  ctx:note("deliveries while b was down: a %d, b %d (cached before); b's queues resumed %.1f s after its restart",
    a_down, b_down, resumed or -1)
  ctx:check(a_down > 1000, "broker a's queues kept flowing while b was down (%d deliveries)", a_down)
  ctx:check(resumed ~= nil, "broker b's queues resumed after its restart")
  ctx:count()
  -- What was consumed from b since its last commit before it went down, and while it was down
  -- (no commit can reach it; its queues are dropped from the route), comes again.
  local outside, ex = dup_check(rec_files(ctx), {{t_down - PERSIST_MS - WINDOW_SLACK_MS, t_up}})
  ctx:check(outside == 0, "duplicates only of what was consumed in the persist window before b went down, or while it was down: %d outside%s",
    outside, ex and (", e.g. " .. ex) or "")
end}

-- ---- 7. slow handler ---------------------------------------------------------------------------

S[7] = {title = "slow handler (1 s/batch)", run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local b = cluster(ctx, topic, 8)
  local N, SIZE = 50000, 2048
  ctx:produce({ns = b.ns, topic = topic, n = N, size = SIZE, prefix = "g"})
  local threshold, batch = 1000, 32 -- pull_threshold_for_queue, pull_batch_size (defaults)
  local c = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "c", sleep_ms = 1000})
  local addr = any_broker(b.ns, topic)
  local cid
  L.wait_for(function()
    local ids = L.consumer_ids(addr, group)
    cid = ids and ids[1]
    return cid
  end, 60, "the consumer's clientId")
  local max_q, max_where, samples, total_max = 0, "-", 0, 0
  local t_end = L.mono() + 25
  while L.mono() < t_end do
    local counts = L.cached_counts(addr, group, cid)
    if counts then
      samples = samples + 1
      local total = 0
      for q, n in pairs(counts) do
        total = total + n
        if n > max_q then max_q, max_where = n, q end
      end
      if total > total_max then total_max = total end
    end
    c:mem()
    L.sleep(0.5)
  end
  local rss_mb = c.hwm_kb / 1024
  ctx:note("cached per queue at most %d (%s; bound %d), all queues %d, over %d samples; peak RSS %.1f MB with %s MB produced",
    max_q, max_where, threshold + batch, total_max, samples, rss_mb, L.num(N * SIZE / 1048576))
  ctx:check(samples >= 10, "GET_CONSUMER_RUNNING_INFO answered (%d samples)", samples)
  ctx:check(max_q <= threshold + batch, "cached messages per queue <= pull_threshold_for_queue + pull_batch_size (%d <= %d)",
    max_q, threshold + batch)
  if not (L.asan or L.tsan) then
    ctx:check(rss_mb <= 64, "RSS bounded while messages wait: %.1f MB <= 64 MB", rss_mb)
  end
  ctx:go_fast()
  ctx:wait_consumed(300)
  c:stop()
  ctx:count()
end}

-- ---- 8. stuck handler ------------------------------------------------------------------------------

S[8] = {title = "stuck handler (consume_timeout 1)", background = true, run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local b = cluster(ctx, topic, 8, "--delay-scale 0.1")
  ctx:produce({ns = b.ns, topic = topic, n = 20000, prefix = "h"})
  local STUCK = 5 -- key h-5: blocked in C on its first delivery
  local first, again, stuck_id
  ctx.tally.hook = function(r)
    if r.key == "h-" .. STUCK then
      stuck_id = r.id
      if r.st == "s" then first = first or r.ms
      elseif r.st == "k" and r.rt >= 1 then again = again or r.ms end
    end
  end
  local c = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "c", mode = "stuck",
                          key = STUCK, set = {consume_timeout = 1}})
  L.wait_for(function()
    ctx.tally:poll()
    return again and ctx:consumed() >= ctx:produced()
  end, 240, "the stuck message to come back and everything to be consumed", 1)
  ctx:release()
  L.sleep(2)
  c:stop()
  local after = (again - first) / 1000
  ctx:note("the stuck message (%s) came back %.1f s after its handler started", stuck_id or "?", after)
  ctx:check(after >= 60 and after <= 150, "sent back after consume_timeout (1 min): %.1f s", after)
  ctx:count()
  ctx:check(ctx.row.dups == 0, "nothing else redelivered: %d duplicate(s)", ctx.row.dups)
end}

-- ---- 9. failing handler ------------------------------------------------------------------------------

S[9] = {title = "failing handler → DLQ", run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local b = cluster(ctx, topic, 8, "--delay-scale 0.01")
  ctx:produce({ns = b.ns, topic = topic, n = 20000, prefix = "i"})
  local MAX = 2
  local failing, deliveries = {}, {}
  ctx.tally.hook = function(r)
    local n = tonumber(r.key:match("(%d+)$"))
    if n and n % 10 == 0 then failing[r.id] = true end
    deliveries[r.id] = (deliveries[r.id] or 0) + 1
  end
  local c = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "c", mode = "fail10",
                          set = {max_reconsume_times = MAX}})
  local dlq_topic = "%DLQ%" .. group
  local nfail = 2000
  local dlq_n = 0
  L.wait_for(function()
    ctx.tally:poll()
    local rt = L.route(b.ns, dlq_topic)
    if rt then
      local mx = L.offsets(b.ns, dlq_topic, "max", nil, rt)
      dlq_n = 0
      for _, v in pairs(mx or {}) do dlq_n = dlq_n + v end
    end
    return dlq_n >= nfail and ctx:consumed() >= ctx:produced() - nfail
  end, 300, "the failing tenth in the DLQ and the rest consumed", 1)
  L.sleep(2)
  c:stop()
  -- Identity of what is in the DLQ (the development broker serves %DLQ% pulls; a real broker's
  -- DLQ is write-only, then only the count is checked).
  local rt = L.route(b.ns, dlq_topic)
  local ids, dlq_msgs, err = {}, 0, nil
  for _, q in ipairs(rt and rt.queues or {}) do
    local msgs
    msgs, err = L.pull_all(rt.brokers[q.broker], ctx:group("dlqread"), dlq_topic, q.qid)
    if not msgs then break end
    for _, m in ipairs(msgs) do
      local id = m.props.UNIQ_KEY or m.props.ORIGIN_MESSAGE_ID
      ids[id] = (ids[id] or 0) + 1
      dlq_msgs = dlq_msgs + 1
    end
  end
  -- consumed counts the messages handled successfully; the failing ones never were.
  local c2 = ctx:count(true)
  local nf = 0
  for _ in pairs(failing) do nf = nf + 1 end
  if err then
    ctx:note("DLQ not readable (%s): counted by its offsets only", err)
    ctx.row.dlq = dlq_n
    ctx:check(c2.distinct + dlq_n == ctx:produced(), "consumed + DLQ = produced (%d + %d = %d)",
      c2.distinct, dlq_n, ctx:produced())
  else
    ctx.row.dlq = dlq_msgs
    local once, wrong = 0, 0
    for id in pairs(failing) do if ids[id] == 1 then once = once + 1 end end
    for id in pairs(ids) do if not failing[id] then wrong = wrong + 1 end end
    ctx:check(once == nf and dlq_msgs == nf and wrong == 0,
      "each failing message in %s exactly once (%d of %d once, %d in it, %d that never failed)",
      dlq_topic, once, nf, dlq_msgs, wrong)
    ctx:check(c2.distinct + dlq_msgs == ctx:produced(), "consumed + DLQ = produced (%d + %d = %d)",
      c2.distinct, dlq_msgs, ctx:produced())
  end
  -- Every failing message delivered 1 + max_reconsume_times times.
  local wrong_n = 0
  for id in pairs(failing) do if deliveries[id] ~= MAX + 1 then wrong_n = wrong_n + 1 end end
  ctx:check(wrong_n == 0, "each failing message delivered 1 + max_reconsume_times = %d times (%d otherwise)",
    MAX + 1, wrong_n)
  local missing = ctx:produced() - c2.distinct - nf
  ctx.row.missing = missing
  ctx:check(missing == 0, "nothing missing besides the failing tenth (missing %d)", missing)
end}

-- ---- 10. sparse tags -----------------------------------------------------------------------------

S[10] = {title = "sparse tags (1 per 100k, 2M)", run = function(ctx, o)
  local topic = ctx:topic()
  local GAP, MATCHES = 100000, 20
  local b = cluster(ctx, topic, 1, "--max-bytes 2G")
  for i = 1, MATCHES do
    ctx:produce({ns = b.ns, topic = topic, n = GAP - 1, size = 10, prefix = "noise" .. i, tags = "noise",
                 verbose = false})
    ctx:produce({ns = b.ns, topic = topic, n = 1, size = 10, prefix = "j" .. i, tags = "match"})
  end
  ctx:log("%s messages stored, %d matching", L.num(GAP * MATCHES), ctx:produced())
  -- A slow handler keeps matches cached while the consumer pulls across the gaps:
  -- concurrently (span-limited) and orderly (no span check).
  local cc = ctx:consumer({ns = b.ns, group = ctx:group("c"), topic = topic, tags = "match",
                           label = "concurrent", sleep_ms = 500,
                           set = {consume_thread_min = 2, consume_thread_max = 2}})
  local co = ctx:consumer({ns = b.ns, group = ctx:group("o"), topic = topic, tags = "match",
                           label = "orderly", sleep_ms = 500, orderly = true,
                           set = {consume_thread_min = 2, consume_thread_max = 2}})
  local per = {concurrent = {}, orderly = {}} -- label -> msgId -> successful deliveries
  ctx.tally.hook = function(r)
    if r.st == "k" then per[r.label][r.id] = (per[r.label][r.id] or 0) + 1 end
  end
  -- The baseline: each consumer's RSS once it consumed its first match (started, states
  -- loaded, pulling across the gaps).
  local base = {}
  L.wait_for(function()
    ctx.tally:poll()
    for _, c in ipairs({cc, co}) do
      local _, rss = c:mem()
      if not base[c] and rss > 0 and next(per[c.label]) then base[c] = rss end
    end
    local a, b2 = 0, 0
    for _ in pairs(per.concurrent) do a = a + 1 end
    for _ in pairs(per.orderly) do b2 = b2 + 1 end
    return a >= MATCHES and b2 >= MATCHES
  end, 300, "both consumers to consume every match", 0.5)
  for _, c in ipairs({cc, co}) do c:stop() end
  for _, c in ipairs({cc, co}) do
    local grow = (c.hwm_kb - (base[c] or c.hwm_kb)) / 1024
    ctx:note("%s: peak RSS %.1f MB (%.1f MB above the RSS at its first match)", c.label, c.hwm_kb / 1024, grow)
    if not (L.asan or L.tsan) then
      ctx:check(grow <= 8, "%s: RSS flat over a %s-offset span (+%.1f MB <= 8 MB)", c.label,
        L.num(GAP * MATCHES), grow)
    end
  end
  -- Two groups consume the same messages: count per group.
  ctx:count(true)
  local missing, dups = 0, 0
  for name, set in pairs(per) do
    local miss = 0
    for id in ctx.ids:each_produced() do
      if not set[id] then miss = miss + 1 else dups = dups + set[id] - 1 end
    end
    missing = missing + miss
    ctx:check(miss == 0, "%s consumer: every match consumed (missing %d)", name, miss)
  end
  ctx.row.missing, ctx.row.dups = missing, dups
end}

-- ---- 11. hostile broker --------------------------------------------------------------------------

S[11] = {title = "hostile broker (60 s)", dev = true, run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local good = ctx:broker(string.format("--broker-name good --topic %s:4", topic), {name = "broker-good"})
  local hostile = ctx:spawn(string.format("luajit %s --namesrv %s --topic %s --queues 4 --fixtures %s",
    L.shq(L.root .. "/scripts/reliability/hostile_broker.lua"), L.shq(good.ns), L.shq(topic),
    L.shq(L.root .. "/spec/fixtures/wire")), {name = "hostile", kind = "tool"})
  hostile.stop_expect = {[143] = true} -- it has no SIGTERM handler
  L.wait_for(function()
    local rt = L.route(good.ns, topic)
    return rt and #rt.queues == 8
  end, 30, "the hostile broker in the route")
  local bin = L.asan_bin or L.bin
  ctx:note("consumer: %s%s", bin, L.asan_bin and " (ASan+UBSan)" or " (no ASan build found: release)")
  -- Heartbeats, routes and rebalances every 2 s rather than 20-30 s: more requests meet the
  -- hostile broker in the minute.
  local c = ctx:consumer({ns = good.ns, group = group, topic = topic, label = "c", bin = bin,
                          set = {heartbeat_broker_interval = 2000, poll_name_server_interval = 2000,
                                 pull_time_delay_mills_when_exception = 200},
                          env = {ASAN_OPTIONS = "detect_leaks=1:abort_on_error=1:halt_on_error=1",
                                 UBSAN_OPTIONS = "print_stacktrace=1:halt_on_error=1"}})
  c.stop_expect = {[0] = true}
  -- The good broker only takes writes (the hostile one registers its queues read-only).
  local p = ctx:paced({ns = good.ns, topic = topic, rate = 350, secs = 60, prefix = "k"})
  local t_end = L.mono() + 60
  while L.mono() < t_end and c:alive() do
    L.sleep(1)
    ctx.tally:poll()
  end
  ctx:check(c:alive(), "the consumer ran through the hostile minute")
  p:wait(60)
  ctx:collect(p)
  pcall(ctx.wait_consumed, ctx, 60)
  c:stop(60)
  hostile:stop()
  local stats = "no statistics"
  for line in L.read(hostile.log):gmatch("hostile: %d+ connection[^\n]*") do stats = line end
  ctx:note("%s", stats)
  local log = L.read(c.log)
  local closed = select(2, log:gsub("\n[^\n]*" .. "closed[^\n]*", ""))
  ctx:note("consumer log: %d line(s) about closed connections", closed)
  ctx:count()
end}

-- ---- 12. start/stop ----------------------------------------------------------------------------

S[12] = {title = "1,000 start/stop cycles", run = function(ctx, o)
  local topic, group = ctx:topic(), ctx:group()
  local b = cluster(ctx, topic, 4)
  ctx:produce({ns = b.ns, topic = topic, n = 20000, prefix = "l"})
  local tool = L.bin:gsub("rmqlua$", "reliability_startstop")
  if not L.exists(tool) then
    ctx.skip = "no reliability_startstop next to " .. L.bin
    return
  end
  local rec = ctx.dir .. "/records-cycles.txt"
  ctx.tally:add_file(rec)
  local env = {REL_OUT = rec, REL_GROUP = group, REL_TOPIC = topic, REL_LABEL = "cycles",
               REL_SLEEP_MS = "2"}
  local cmd = string.format("%s --namesrv %s --script %s --cycles 1000 --max-wait-ms 80 --set consume_thread_min=4 --set consume_thread_max=4",
    tool, L.shq(b.ns), L.shq(L.root .. "/scripts/reliability/recorder.lua"))
  local p = ctx:spawn(cmd, {name = "startstop", kind = "consumer", env = env})
  repeat
    L.sleep(1)
    p:mem()
  until p:rc()
  local out = L.read(p.log)
  local samples = {}
  for cy, fds, th, rss in out:gmatch("cycle (%d+) fds (%d+) threads (%d+) rss_kb (%d+)") do
    samples[#samples + 1] = {cycle = tonumber(cy), fds = tonumber(fds), threads = tonumber(th), rss = tonumber(rss)}
  end
  local done = out:match("done (%d+) cycles in ([%d.]+) s")
  ctx:check(p:rc() == 0 and done, "1,000 cycles done (exit %s)%s", tostring(p:rc()),
    p:rc() ~= 0 and (": " .. p:tail(3)) or "")
  local first, last = samples[1], samples[#samples]
  if first and last then
    ctx:note("cycle %d: %d fds, %d threads, %.1f MB RSS; cycle %d: %d fds, %d threads, %.1f MB RSS (%s s)",
      first.cycle, first.fds, first.threads, first.rss / 1024, last.cycle, last.fds, last.threads,
      last.rss / 1024, out:match("cycles in ([%d.]+) s") or "?")
    ctx:check(last.fds == first.fds, "file descriptors flat (%d -> %d)", first.fds, last.fds)
    ctx:check(last.threads == first.threads, "threads flat (%d -> %d)", first.threads, last.threads)
    if not (L.asan or L.tsan) then
      ctx:check(last.rss - first.rss <= 4096, "RSS flat (+%.1f MB <= 4 MB)", (last.rss - first.rss) / 1024)
    end
  end
  ctx.tally:poll()
  ctx:log("%d deliveries during the cycles; draining the rest", ctx.tally.nrec)
  local c = ctx:consumer({ns = b.ns, group = group, topic = topic, label = "drain"})
  ctx:wait_consumed(120)
  c:stop()
  ctx:count()
end}

-- ---- 13. bad scripts ---------------------------------------------------------------------------------

S[13] = {title = "bad scripts (error/loop/alloc)", background = true, run = function(ctx, o)
  local b = cluster(ctx, ctx:topic("e"), 4, "--delay-scale 0.01 --topic " .. ctx:topic("l") ..
    ":4 --topic " .. ctx:topic("a") .. ":4")
  if L.namesrv then
    local masters = assert(L.cluster_masters(L.namesrv))
    assert(L.create_topic(masters, ctx:topic("l"), 4))
    assert(L.create_topic(masters, ctx:topic("a"), 4))
  end
  local per = {e = {}, l = {}, a = {}}
  for _, k in ipairs({"e", "l", "a"}) do
    per[k].produced = {}
    ctx:produce({ns = b.ns, topic = ctx:topic(k), n = k == "e" and 20000 or 7000, prefix = "m" .. k,
                 into = per[k].produced})
  end
  local MAX = 1
  local ce = ctx:consumer({ns = b.ns, group = ctx:group("e"), topic = ctx:topic("e"), label = "error",
                           mode = "error", set = {max_reconsume_times = MAX}})
  -- The looping handler's thread is abandoned at stop, and what it holds (its batch's pulled
  -- frame) is leaked on purpose (consume_pool.c): no leak check for that process under ASan.
  local cl = ctx:consumer({ns = b.ns, group = ctx:group("l"), topic = ctx:topic("l"), label = "loop",
                           mode = "loop", key = 3, set = {consume_timeout = 1},
                           env = {ASAN_OPTIONS = "detect_leaks=0"}})
  local ca = ctx:consumer({ns = b.ns, group = ctx:group("a"), topic = ctx:topic("a"), label = "alloc",
                           mode = "alloc", key = 3, set = {lua_memory_limit_mb = 64}})
  local ok = {}
  ctx.tally.hook = function(r) if r.st == "k" then ok[r.label] = (ok[r.label] or 0) + 1 end end
  -- error: every message ends in the DLQ after 1 + max_reconsume_times deliveries.
  local dlq = "%DLQ%" .. ctx:group("e")
  local dlq_n = 0
  local done_e = pcall(L.wait_for, function()
    local rt = L.route(b.ns, dlq)
    local mx = rt and L.offsets(b.ns, dlq, "max", nil, rt)
    dlq_n = 0
    for _, v in pairs(mx or {}) do dlq_n = dlq_n + v end
    return dlq_n >= 20000
  end, 240, "every message of the erroring handler in the DLQ", 1)
  ctx:check(done_e, "erroring handler: every message in %s (%d of 20,000)", dlq, dlq_n)
  ctx.row.dlq = dlq_n
  ce:stop()
  -- loop and alloc: the one runaway message comes back and everything is consumed.
  local function all_consumed(k)
    for id in pairs(per[k].produced) do if not ctx.tally:ok(id) then return false end end
    return true
  end
  local done_la = pcall(L.wait_for, function()
    ctx.tally:poll()
    return all_consumed("l") and all_consumed("a")
  end, 240, "the looping and allocating handlers' messages", 1)
  ctx:check(all_consumed("l"), "looping handler: the runaway message came back and every message was consumed")
  ctx:check(all_consumed("a"), "allocating handler: every message consumed after the state was reset")
  local alog = L.read(ca.log)
  ctx:note("alloc: %s", (alog:match("[^\n]*lua_memory_limit_mb[^\n]*") or "no memory-limit line in the log"):sub(1, 200))
  local llog = L.read(cl.log)
  ctx:note("loop: %s", (llog:match("[^\n]*consume_timeout[^\n]*") or "no consume_timeout line in the log"):sub(1, 200))
  cl:stop(30)
  ca:stop(30)
  -- The erroring handler's messages are in the DLQ, never consumed: count them as such.
  local c = ctx:count(true)
  local missing = c.missing - math.min(dlq_n, 20000)
  ctx.row.missing = missing
  ctx:check(missing == 0, "nothing missing: consumed + DLQ = produced (%d + %d of %d)", c.distinct, dlq_n, ctx:produced())
  local _ = done_la
end}

return S
