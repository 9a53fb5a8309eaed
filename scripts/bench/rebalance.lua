-- scripts/bench_rebalance: see the header of that script.
local lib = require "lib"
local ffi = lib.ffi
lib.name = "bench_rebalance"

local opt = lib.parse({ build = "string", consumers = "number", queues = "number",
  brokers = "number", rate = "number", threads = "number", ["repeat"] = "number",
  namesrv = "string", topic = "string" }, { consumers = 10, queues = 256, brokers = 2,
  rate = 2000, threads = 2, ["repeat"] = 3, topic = "BenchRebalance" }, arg,
  lib.ROOT .. "/scripts/bench_rebalance")

local tmp = lib.tmpdir()
local machine = lib.machine()
local MAXC = opt.consumers + opt["repeat"] + 1
local MAXN = math.floor(opt.rate * (120 + 60 * opt["repeat"])) -- message numbers counted
local seen, seen_path = lib.shared("seen", MAXC * MAXN)
seen = ffi.cast("uint8_t *", seen)

local namesrv = opt.namesrv
if not namesrv then
  namesrv = lib.start_broker(string.format("--brokers %d --topic %s:%d", opt.brokers,
    opt.topic, math.ceil(opt.queues / opt.brokers)), 256)
end
local group = "bench_rebalance_" .. math.random(1e9)

local function script_for(k)
  local pre = string.format([=[
local seen = ffi.cast("uint8_t *", map(%q, %d)) + %d
local owned, path = {}, %q
local function publish(mqs, own)
  for _, mq in ipairs(mqs) do
    if mq.topic == %q then owned[mq.broker_name .. ":" .. mq.queue_id] = own end
  end
  local f = assert(io.open(path .. ".tmp", "wb"))
  for key in pairs(owned) do f:write(key, "\n") end
  f:close()
  assert(os.rename(path .. ".tmp", path))
end
]=], seen_path, MAXC * MAXN, k * MAXN, string.format("%s/owned.%d", tmp, k), opt.topic)
  return lib.consumer_script(pre, group, opt.topic, "LAST", opt.threads, string.format([=[
  on_assign = function(mqs) publish(mqs, true) end,
  on_revoke = function(mqs) publish(mqs, nil) end,
  consume = function(msgs)
    for i = 1, #msgs do
      local m = msgs[i]
      local p, n = m.body_ptr, 0
      for j = 0, m.body_len - 1 do n = n * 10 + (p[j] - 48) end
      if n < %d then seen[n] = seen[n] + 1 end
    end
  end,
]=], MAXN))
end

local consumers = {} -- k -> { pid =, alive = }
local function start_consumer(k)
  local path = string.format("%s/c%d.lua", tmp, k)
  lib.write_file(path, script_for(k))
  os.remove(string.format("%s/owned.%d", tmp, k))
  local t0 = lib.now_ns()
  local pid = lib.spawn_argv({ lib.BIN, "run", "--namesrv", namesrv, path },
    string.format("%s/c%d.log", tmp, k))
  consumers[k] = { pid = pid, live = true }
  return t0
end

-- owners: queue -> count over live consumers; per consumer counts.
local function ownership()
  local owners, per, nlive = {}, {}, 0
  for k, c in pairs(consumers) do
    if c.live then
      nlive = nlive + 1
      per[k] = 0
      local s = lib.read_file(string.format("%s/owned.%d", tmp, k)) or ""
      for key in s:gmatch("[^\n]+") do
        owners[key] = (owners[key] or 0) + 1
        per[k] = per[k] + 1
      end
    end
  end
  return owners, per, nlive
end

-- Every queue exactly once, every live consumer at least its AVG share.
local function settled()
  local owners, per, nlive = ownership()
  local n = 0
  for _, c in pairs(owners) do
    if c ~= 1 then return false end
    n = n + 1
  end
  if n ~= opt.queues then return false end
  local share = math.floor(opt.queues / nlive)
  for _, v in pairs(per) do if v < share then return false end end
  return true
end

local function wait_settled(t0, what)
  local deadline = t0 + (tonumber(os.getenv("RMQ_BENCH_SETTLE_S")) or 120) * 1e9
  while not settled() do
    for k, c in pairs(consumers) do
      if c.live and not lib.alive(c.pid) then
        lib.fail("consumer %d exited:\n%s", k, lib.tail(string.format("%s/c%d.log", tmp, k)))
      end
    end
    if lib.now_ns() > deadline then
      local owners, per = ownership()
      local n, multi, detail = 0, 0, {}
      for q, c in pairs(owners) do
        n = n + 1
        if c > 1 then
          multi = multi + 1
          local who = {}
          for k, cc in pairs(consumers) do
            local owned = lib.read_file(string.format("%s/owned.%d", tmp, k)) or ""
            if cc.live and ("\n" .. owned):find("\n" .. q .. "\n", 1, true) then
              who[#who + 1] = k
            end
          end
          detail[#detail + 1] = q .. " by " .. table.concat(who, ",")
        end
      end
      local shares = {}
      for k, v in pairs(per) do shares[#shares + 1] = k .. ":" .. v end
      lib.fail("%s: not settled in 120 s (%d queues owned, %d by more than one: %s; per consumer %s)",
        what, n, multi, table.concat(detail, "; "), table.concat(shares, " "))
    end
    lib.sleep_ms(5)
  end
  return (lib.now_ns() - t0) / 1e6
end

local function duplicates()
  local d, delivered = 0, 0
  for n = 0, MAXN - 1 do
    local c = 0
    for k = 0, MAXC - 1 do c = c + seen[k * MAXN + n] end
    if c > 1 then d = d + c - 1 end
    delivered = delivered + c
  end
  return d, delivered
end

io.stderr:write(string.format("starting %d consumers ...\n", opt.consumers))
local t0 = lib.now_ns()
for k = 1, opt.consumers do start_consumer(k) end
local t_start = wait_settled(t0, "start")
io.stderr:write(string.format("  settled %.0f ms after the first start\n", t_start))
local tpl = tmp .. "/n.txt"
lib.write_file(tpl, "{n}")
local spid = lib.send_bg(namesrv, string.format("--topic %s --count %d --rate %d --body-template %s",
  opt.topic, MAXN, opt.rate, tpl))
lib.sleep_ms(3000)

local rounds = {}
local next_k = opt.consumers + 1
local oldest = 1
for r = 1, opt["repeat"] do
  local d0 = duplicates()
  io.stderr:write(string.format("round %d: consumer %d joins ...\n", r, next_k))
  local tj = start_consumer(next_k)
  next_k = next_k + 1
  local join_ms = wait_settled(tj, "join")
  lib.sleep_ms(3000)
  local d1 = duplicates()
  io.stderr:write(string.format("  settled in %.0f ms, %d duplicates; consumer %d leaves ...\n",
    join_ms, d1 - d0, oldest))
  local c = consumers[oldest]
  local tl = lib.now_ns()
  lib.kill(c.pid, 15)
  -- The leaver's queues count as owned until it has exited (it gives them up as it stops).
  while lib.alive(c.pid) and lib.now_ns() - tl < 30e9 do lib.sleep_ms(2) end
  c.live = false
  oldest = oldest + 1
  local leave_ms = wait_settled(tl, "leave")
  lib.sleep_ms(3000)
  local d2 = duplicates()
  io.stderr:write(string.format("  settled in %.0f ms, %d duplicates\n", leave_ms, d2 - d1))
  rounds[r] = { join = join_ms, jdup = d1 - d0, leave = leave_ms, ldup = d2 - d1 }
end
lib.stop(spid, 2000)
lib.sleep_ms(1000)
local dtotal, delivered = duplicates()

print(string.format("\nrmqlua rebalance: %d consumers (+1 joins, then 1 leaves) of one group, "
  .. "%d queues, %s, producer %d msgs/s, %d consume threads each",
  opt.consumers, opt.queues, opt.namesrv and ("name server " .. opt.namesrv)
    or (opt.brokers .. " development brokers"), opt.rate, opt.threads))
print("machine: " .. machine)
local rows = {}
for r, x in ipairs(rounds) do
  rows[#rows + 1] = { tostring(r), string.format("%.0f ms", x.join), tostring(x.jdup),
    string.format("%.0f ms", x.leave), tostring(x.ldup) }
end
local function med(key)
  local t = {}
  for _, x in ipairs(rounds) do t[#t + 1] = x[key] end
  return lib.median(t)
end
rows[#rows + 1] = { "median", string.format("%.0f ms", med("join")), string.format("%.0f", med("jdup")),
  string.format("%.0f ms", med("leave")), string.format("%.0f", med("ldup")) }
lib.table({ "round", "join: settled", "duplicates", "leave: settled", "duplicates" }, rows)
print(string.format([[
settled: from the joiner's exec (or the leaver's SIGTERM) until every queue has exactly one owner
and every consumer its AVG share, as the on_assign/on_revoke hooks report; duplicates: messages
delivered more than once within 3 s after that. Initial start of %d consumers: %.0f ms.
Whole run: %d deliveries, %d duplicates.]], opt.consumers, t_start, delivered, dtotal))
lib.cleanup()
