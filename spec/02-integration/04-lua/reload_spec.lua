-- Hot reload under `rmqlua run` against the development broker: SIGHUP under load with every
-- message counted exactly once across four versions and three thread counts (shared
-- dictionaries carry the counts over), the old shutdown hooks before the new init hooks; a
-- broken version (syntax, init, an option) is refused with file:line and the running one stays;
-- a subscription change, a changed expression and a new allocate hook take effect (the new
-- control state's hooks see it); changes that cannot be made live are refused; --watch reloads
-- when the script or a module beside it changes.
local helpers = require "helpers"
local rh = require "run_helpers"
local R = require "02-integration.04-lua.runner"

-- Replace a file in one step (an editor's save), so a reload never reads half of it.
local function put(name, text) return rh.replace(R.tmpdir, name, text) end

local committed = R.committed

-- Writes the script name with text (its first version, which prints "v1 got <body>"), starts it
-- and waits until it consumed "one", produced to topic: the script's path and the run.
local function start_v1(name, text, topic)
  local path = put(name, text)
  local h = R.start(path)
  R.produce(topic, "one")
  h.wait_for("v1 got one")
  return path, h
end

local function lines(out, pattern)
  local n = 0
  for _ in out:gmatch(pattern) do n = n + 1 end
  return n
end

describe("hot reload", function()
  R.broker_fixture("--delay-scale 0.01")

  it("under load: every message once, across versions and thread counts", function()
    local N, Q = 3000, 8
    R.fill_topic("LoadTopic", Q, N, "m")
    local function version(v, threads)
      return string.format([[
local rmq = require "rmq"
local ffi = require "ffi"
ffi.cdef "int poll(void *fds, unsigned long nfds, int timeout);"
return {
  consumer_group = "reload_load",
  subscribe = { LoadTopic = "*" },
  consume_thread_min = %d, consume_thread_max = %d,
  consume_message_batch_max_size = 4,
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  consume_tps_limit = 800,
  shared = { c = "64k", seen = "2m" },
  init = function(ctx)
    if rmq.role == "consume" then
      print("%s init " .. ctx.thread_index .. "/" .. ctx.thread_count)
    end
  end,
  consume = function(msgs, ctx)
    local c, seen = rmq.shared.c, rmq.shared.seen
    ffi.C.poll(nil, 0, 20) -- a slow handler: batches wait for a thread
    for i = 1, #msgs do
      local b = msgs[i].body
      if not seen:add(b, true) then c:incr("dup", 1, 0); print("DUP " .. b) end
      c:incr("%s", 1, 0)
      local t = c:incr("total", 1, 0)
      if t %% 100 == 0 then print("total " .. t) end
      if t == %d then print("ALL DONE") end
    end
  end,
  shutdown = function(ctx)
    if rmq.role ~= "consume" then return end
    local c = rmq.shared.c
    print(string.format("%s shutdown %%d v1=%%d v2=%%d v3=%%d v4=%%d dup=%%d total=%%d",
      ctx.thread_index, c:get("v1") or 0, c:get("v2") or 0, c:get("v3") or 0, c:get("v4") or 0,
      c:get("dup") or 0, c:get("total") or 0))
  end,
}
]], threads, threads, v, v, N, v)
    end
    local path = put("load.lua", version("v1", 4))
    local h = R.start(path)
    local function total()
      local n = 0
      for v in h.out():gmatch("total (%d+)") do n = math.max(n, tonumber(v)) end
      return n
    end
    local steps = { { 400, "v2", 8 }, { 1200, "v3", 2 }, { 2000, "v4", 6 } }
    for k, s in ipairs(steps) do
      helpers.wait_until(function() return total() >= s[1] end, 30, s[1] .. " messages")
      assert.is_nil(h.out():find("ALL DONE"), "consumed before reload " .. k)
      put("load.lua", version(s[2], s[3]))
      h.signal("HUP")
      h.wait_for("reloaded [^\n]*load%.lua %(reload " .. k .. "%): " .. s[3] .. " consume thread",
        "reload " .. k)
      h.wait_for(s[3] .. " consume thread%(s%) run [^\n]*load%.lua now", "reload " .. k .. " done")
    end
    h.wait_for("ALL DONE", "every message")
    helpers.wait_until(function() return committed("reload_load", "LoadTopic", Q) == N end, 30,
      "every offset committed")
    assert.are.equal(0, h.stop())
    local out = h.out()
    assert.is_nil(out:find("DUP "), "a message handled twice")
    assert.are.equal(1, lines(out, "ALL DONE"))
    -- Each version's threads, with their count; every version handled some of the messages.
    assert.are.equal(4, lines(out, "v1 init %d/4"))
    assert.are.equal(8, lines(out, "v2 init %d/8"))
    assert.are.equal(2, lines(out, "v3 init %d/2"))
    assert.are.equal(6, lines(out, "v4 init %d/6"))
    assert.are.equal(4, lines(out, "v1 shutdown"))
    assert.are.equal(6, lines(out, "v4 shutdown"))
    -- The old version's shutdown hooks ran before the new version's init hooks.
    for _, pair in ipairs({ { "v1 shutdown", "v2 init %d/8" }, { "v2 shutdown", "v3 init %d/2" },
      { "v3 shutdown", "v4 init %d/6" } }) do
      local last_old, first_new = 0, nil
      for pos in out:gmatch("()" .. pair[1]) do last_old = pos end
      first_new = out:find(pair[2])
      assert.is_true(last_old > 0 and first_new and last_old < first_new, pair[1])
    end
    local v1, v2, v3, v4, dup, tot = out:match(
      "v4 shutdown %d+ v1=(%d+) v2=(%d+) v3=(%d+) v4=(%d+) dup=(%d+) total=(%d+)")
    assert.is_truthy(v1, out)
    v1, v2, v3, v4 = tonumber(v1), tonumber(v2), tonumber(v3), tonumber(v4)
    assert.are.equal(N, tonumber(tot))
    assert.are.equal(0, tonumber(dup))
    assert.are.equal(N, v1 + v2 + v3 + v4)
    assert.is_true(v1 > 0 and v2 > 0 and v3 > 0 and v4 > 0, out:match("v4 shutdown[^\n]*"))
    -- Batches that waited for a thread of the old version ran on the new one.
    local moved = 0
    for n in out:gmatch("(%d+) queued batch%(es%) moved to the new threads") do
      moved = moved + tonumber(n)
    end
    assert.is_true(moved > 0, "no queued batch was handed over")
  end)

  it("keeps the running version when the new one is broken, and says why with file:line", function()
    local function version(v, extra_init)
      return R.script_head("reload_broken", "BrokenTopic") .. string.format([[
  consume_thread_min = 2, consume_thread_max = 2,
  init = function(ctx)
    %s
  end,
  consume = function(msgs) print("%s got " .. msgs[1].body) end,
}
]], extra_init or "", v)
    end
    local path, h = start_v1("broken.lua", version("v1"), "BrokenTopic")
    local esc = path:gsub("%p", "%%%0")
    -- A syntax error.
    put("broken.lua", "local rmq = require \"rmq\"\nreturn {\n  consumer_group = ,\n}\n")
    h.signal("HUP")
    h.wait_for("reload of " .. esc .. " failed: " .. esc .. ":3: unexpected symbol near ','",
      "the syntax error")
    h.wait_for("The previous version keeps running")
    R.produce("BrokenTopic", "two")
    h.wait_for("v1 got two", "v1 after the syntax error")
    -- init raises (run once in a throwaway state, as `rmqlua check` does).
    put("broken.lua", version("v2", 'error("cannot connect to the database")'))
    h.signal("HUP")
    h.wait_for("reload of " .. esc .. " failed: init hook failed: " .. esc
      .. ":7: cannot connect to the database", "the init error")
    R.produce("BrokenTopic", "three")
    h.wait_for("v1 got three", "v1 after the init error")
    -- An option out of Java's bounds, with the line that sets it.
    put("broken.lua", (version("v2"):gsub("consume_thread_min = 2, consume_thread_max = 2",
      "consume_thread_min = 0, consume_thread_max = 2")))
    h.signal("HUP")
    h.wait_for("reload of " .. esc .. " failed: " .. esc .. ":5: [^\n]*consume_thread_min",
      "the option error")
    R.produce("BrokenTopic", "four")
    h.wait_for("v1 got four", "v1 after the option error")
    assert.is_nil(h.out():find("v2 got"))
    -- A good version takes over.
    put("broken.lua", version("v2"))
    h.signal("HUP")
    h.wait_for("reloaded [^\n]*broken%.lua %(reload 1%)")
    R.produce("BrokenTopic", "five")
    h.wait_for("v2 got five")
    assert.are.equal(0, h.stop())
  end)

  it("leaves the process with the threads it had: the job runs on a thread that ends with it",
    function()
    local function version(v)
      return R.script_head("reload_threads", "ThreadsTopic") .. string.format([[
  consume_thread_min = 2, consume_thread_max = 2,
  consume = function(msgs) print("%s got " .. msgs[1].body) end,
}
]], v)
    end
    local _, h = start_v1("threads.lua", version("v1"), "ThreadsTopic")
    local function threads()
      return tonumber(rh.read("/proc/" .. h.pid() .. "/status"):match("Threads:%s*(%d+)"))
    end
    local before = threads()
    for k = 1, 3 do
      put("threads.lua", version("v" .. (k + 1)))
      h.signal("HUP")
      h.wait_for("reloaded [^\n]*threads%.lua %(reload " .. k .. "%)", "reload " .. k)
      R.produce("ThreadsTopic", "m" .. k)
      h.wait_for("v" .. (k + 1) .. " got m" .. k, "v" .. (k + 1))
      -- The old version's threads end once their batches are done; nothing else stays.
      helpers.wait_until(function() return threads() == before end, 20,
        string.format("%d threads as before reload %d (now %d)", before, k, threads()))
    end
    assert.are.equal(0, h.stop())
  end)

  it("applies new subscriptions, expressions and allocate hooks; the new control hooks see them",
    function()
    R.create_topic("SubA", 4)
    R.create_topic("SubB", 4)
    local function version(v, subscribe, allocate)
      return string.format([[
return {
  consumer_group = "reload_subs",
  subscribe = { %s },
  consume_thread_min = 2, consume_thread_max = 2,
  %s
  on_assign = function(mqs)
    for _, mq in ipairs(mqs) do print("%s assigned " .. mq.topic .. "#" .. mq.queue_id) end
  end,
  on_revoke = function(mqs)
    for _, mq in ipairs(mqs) do print("%s revoked " .. mq.topic .. "#" .. mq.queue_id) end
  end,
  consume = function(msgs) print("%s got " .. msgs[1].topic .. " " .. msgs[1].body) end,
}
]], subscribe, allocate or "", v, v, v)
    end
    local path = put("subs.lua", version("v1", 'SubA = "*"'))
    local h = R.start(path)
    for q = 0, 3 do h.wait_for("v1 assigned SubA#" .. q) end
    R.produce("SubA", "a1", nil, nil, 1)
    h.wait_for("v1 got SubA a1")
    -- SubA -> SubB: SubA's queues are revoked (reported to the new version's on_revoke), SubB's
    -- are assigned (its on_assign), and only SubB is consumed from now on.
    put("subs.lua", version("v2", 'SubB = "*"'))
    h.signal("HUP")
    h.wait_for("unsubscribed from SubA")
    for q = 0, 3 do
      h.wait_for("v2 revoked SubA#" .. q)
      h.wait_for("v2 assigned SubB#" .. q)
    end
    R.produce("SubA", "a2", nil, nil, 1)
    R.produce("SubB", "b1", nil, nil, 2)
    h.wait_for("v2 got SubB b1")
    -- A tag expression and an allocate hook that keeps only queue 0: queues 1-3 are revoked by
    -- the rebalance the reload starts.
    put("subs.lua", version("v3", 'SubB = "TagX"', [[
  allocate = function(group, cid, mq_all, cid_all)
    local mine = {}
    for _, mq in ipairs(mq_all) do if mq.queue_id == 0 then mine[#mine + 1] = mq end end
    return mine
  end,]]))
    h.signal("HUP")
    h.wait_for('subscription of SubB: "%*" %-> "TagX"')
    for q = 1, 3 do h.wait_for("v3 revoked SubB#" .. q) end
    R.produce("SubB", "not-mine", "TagX", nil, 2)
    R.produce("SubB", "filtered", "TagY", nil, 0)
    R.produce("SubB", "b2", "TagX", nil, 0)
    h.wait_for("v3 got SubB b2")
    helpers.sleep(0.3)
    assert.are.equal(0, h.stop())
    local out = h.out()
    assert.is_nil(out:find("SubA a2"), "SubA consumed after it was unsubscribed")
    assert.is_nil(out:find("filtered"), "a TagY message passed the TagX expression")
    assert.is_nil(out:find("not%-mine"), "a queue the allocate hook gave away was consumed")
    assert.is_nil(out:find("v1 revoked"))
  end)

  it("applies a new consume_tps_limit to the queues already waiting for tokens", function()
    local N = 400
    R.fill_topic("PacedTopic", 2, N, "p")
    local function version(limit)
      return string.format([[
local rmq = require "rmq"
%s  consume_tps_limit = %d,
  shared = { c = "64k" },
  consume = function(msgs)
    local n = rmq.shared.c:incr("n", #msgs, 0)
    print("paced " .. n)
    if n == %d then print("PACED DONE") end
  end,
}
]], R.head("reload_paced", "PacedTopic", 2), limit, N)
    end
    local path = put("paced.lua", version(20))
    local h = R.start(path)
    h.wait_for("paced 20", "the first second at 20 messages/s")
    local before = 0
    for v in h.out():gmatch("paced (%d+)") do before = math.max(before, tonumber(v)) end
    assert.is_true(before < 100, before .. " consumed at 20 messages/s")
    put("paced.lua", version(0))
    h.signal("HUP")
    -- At 20 messages/s the rest would take more than 15 s; without the limit it takes moments.
    helpers.wait_until(function() return h.out():find("PACED DONE") end, 6, "the rest, unpaced")
    assert.matches("%(reload 1%)", h.out())
    assert.are.equal(0, h.stop())
  end)

  it("refuses changes that cannot be made while running, and keeps the running version",
    function()
    local function version(v, extra)
      return string.format([[
return {
  consumer_group = "reload_fixed",
  subscribe = { FixedTopic = "*" },
  consume_thread_min = 1, consume_thread_max = 1,
  %s
  consume = function(msgs) print("%s got " .. msgs[1].body) end,
}
]], extra or "", v)
    end
    local _, h = start_v1("fixed.lua", version("v1"), "FixedTopic")
    put("fixed.lua", (version("v2"):gsub('"reload_fixed"', '"another_group"')))
    h.signal("HUP")
    h.wait_for('refused: consumer_group cannot change while the consumer runs %("reload_fixed" '
      .. '%-> "another_group"', "the refused group")
    h.wait_for("restart rmqlua to change it%. The previous version keeps running%.")
    put("fixed.lua", version("v2", 'message_model = "BROADCASTING",'))
    h.signal("HUP")
    h.wait_for('refused: message_model cannot change while the consumer runs %("CLUSTERING" '
      .. '%-> "BROADCASTING"', "the refused model")
    put("fixed.lua", (version("v2"):gsub("consume = function", "consume_orderly = function")))
    h.signal("HUP")
    h.wait_for("refused: message_listener cannot change", "the refused handler kind")
    put("fixed.lua", version("v2", 'log_format = "json",'))
    h.signal("HUP")
    h.wait_for("refused: log_format cannot change", "the refused log format")
    R.produce("FixedTopic", "two")
    h.wait_for("v1 got two")
    assert.is_nil(h.out():find("v2 got"))
    assert.is_nil(h.out():find("reloaded "))
    -- log_debug does change live.
    assert.is_nil(h.out():find("DEBUG [rebalance]", 1, true))
    put("fixed.lua", version("v2", 'log_debug = "rebalance",'))
    h.signal("HUP")
    h.wait_for("%(reload 1%)")
    h.wait_for("DEBUG %[rebalance%]", "rebalance debug lines after the reload")
    assert.are.equal(0, h.stop())
  end)

  -- The consumer's inner producer (rmq.send, the send-back fallback, the DLQ of orderly
  -- queues) shares the client instance's route refresh period and request timeout
  -- (MQClientInstance: one pollNameServerInterval, one mqClientAPITimeout): a reload that
  -- changes them applies to its requests too, as it does to the consumer's own.
  it("applies poll_name_server_interval and mq_client_api_timeout to the inner producer",
    function()
    local ffi = require "ffi"
    local NS, ROUTE = -1, 105
    R.create_topic("ProdOptIn", 1)
    R.create_topic("ProdOptOut", 1)
    R.create_topic("ProdOptLate", 1)
    helpers.defer(function() R.lib.rmq_devbroker_set_latency(R.db, NS, ROUTE, 0) end)
    local function version(v, extra)
      return string.format([[
local rmq = require "rmq"
%s  %s
  consume = function(msgs)
    for i = 1, #msgs do
      print("%s got " .. msgs[i].body)
      rmq.send(msgs[i].body, "from %s")
    end
  end,
}
]], R.head("reload_prodopt", "ProdOptIn", 1), extra or "", v, v)
    end
    -- The producer's route requests for a topic, among the name server's recorded ones.
    local buf = ffi.new("char[256]")
    local function route_requests(topic)
      local n, total = 0, R.lib.rmq_devbroker_count(R.db, NS, ROUTE)
      for i = 0, total - 1 do
        local len = R.lib.rmq_devbroker_request_ext(R.db, NS, ROUTE, i, "topic", buf, 256)
        if len >= 0 and ffi.string(buf, len) == topic then n = n + 1 end
      end
      return n
    end
    local path = put("prodopt.lua", version("v1"))
    local h = R.start(path)
    R.lib.rmq_devbroker_reset_counts(R.db)
    R.produce("ProdOptIn", "ProdOptOut")
    h.wait_for("v1 got ProdOptOut")
    helpers.wait_until(function() return R.topic_count("ProdOptOut", 1) >= 1 end, 20,
      "the forwarded message stored")
    put("prodopt.lua", version("v2",
      "poll_name_server_interval = 300, mq_client_api_timeout = 1000,"))
    h.signal("HUP")
    h.wait_for("%(reload 1%)")
    -- The producer refreshes the route of the topic it sent to every 300 ms now (it did every
    -- 30 s before the reload).
    local before = route_requests("ProdOptOut")
    helpers.sleep(2)
    local polls = route_requests("ProdOptOut") - before
    assert.truthy(polls >= 3, "the producer asked for the route of ProdOptOut " .. polls ..
      " time(s) in the 2 s after the reload (poll_name_server_interval 300 ms)")
    -- Route answers 1.8 s late: past the new 1 s request timeout (before the reload 3 s).
    assert.equal(0, R.lib.rmq_devbroker_set_latency(R.db, NS, ROUTE, 1800))
    R.produce("ProdOptIn", "ProdOptLate")
    h.wait_for("v2 got ProdOptLate")
    h.wait_for("no route for topic ProdOptLate: .*timed out after 1000 ms",
      "the route request of the producer timed out after 1000 ms")
    R.lib.rmq_devbroker_set_latency(R.db, NS, ROUTE, 0)
    assert.are.equal(0, h.stop())
  end)

  it("--watch reloads when the script or a module beside it changes; dictionaries carry over",
    function()
    put("watch_helper.lua", 'return { label = "m1" }\n')
    local function version(v)
      return string.format([[
local rmq = require "rmq"
local helper = require "watch_helper"
return {
  consumer_group = "reload_watch",
  subscribe = { WatchTopic = "*" },
  consume_thread_min = 2, consume_thread_max = 2,
  shared = { state = "64k" },
  init = function() rmq.shared.state:add("born", "%s") end,
  consume = function(msgs)
    print("%s/" .. helper.label .. " got " .. msgs[1].body .. " born="
      .. rmq.shared.state:get("born"))
  end,
}
]], v, v)
    end
    local path = put("watch.lua", version("s1"))
    local h = R.start(path, "--watch")
    h.wait_for("watching [^\n]*watch%.lua and 1 module%(s%) beside it")
    R.produce("WatchTopic", "one")
    h.wait_for("s1/m1 got one born=s1")
    put("watch_helper.lua", 'return { label = "m2" }\n')
    h.wait_for("watch_helper%.lua changed", "the module's change")
    h.wait_for("%(reload 1%)")
    R.produce("WatchTopic", "two")
    h.wait_for("s1/m2 got two born=s1", "the module's new version")
    put("watch.lua", version("s2"))
    h.wait_for("watch%.lua changed", "the script's change")
    h.wait_for("%(reload 2%)")
    R.produce("WatchTopic", "three")
    -- The value set by the first version's init is still there.
    h.wait_for("s2/m2 got three born=s1", "the script's new version")
    assert.are.equal(0, h.stop())
  end)
end)
