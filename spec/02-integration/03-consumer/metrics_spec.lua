-- The metrics endpoint (`--metrics HOST:PORT` / metrics_listen) of a running consumer against the
-- development broker: /metrics parsed by the Prometheus text-format parser of Debian's
-- python3-prometheus-client (spec/python/prom_scrape.py), /stats, /health; the consumer lag
-- against the broker's own view (GET_CONSUME_STATS, what mqadmin consumerProgress shows);
-- on_stats. (The ConsumeStatus figures of GET_CONSUMER_RUNNING_INFO: consume_status_spec.lua.)
local helpers = require "helpers"
local cjson = require "cjson"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local raw = dofile(helpers.root .. "/spec/02-integration/02-producer/rawmq.lua")
local lib = cons.lib

local scrape, base_url = cons.scrape, cons.metrics_url

-- Sum of the samples of family `name` whose labels match every key of `want`.
local function sum(fams, name, want)
  local f = fams[name]
  assert(f, "no family " .. name)
  local total, n = 0, 0
  for _, s in ipairs(f.samples) do
    local ok = s.name == (want and want.__sample or s.name)
    for k, v in pairs(want or {}) do
      if k ~= "__sample" and s.labels[k] ~= v then ok = false end
    end
    if ok then
      total = total + s.value
      n = n + 1
    end
  end
  return total, n
end

-- The broker's consumer lag of group on topic (brokerOffset - consumerOffset over the queues,
-- as mqadmin consumerProgress computes it from GET_CONSUME_STATS).
local function broker_lag(baddr, group, topic)
  local r = assert(raw.request(baddr, 208, { consumerGroup = group, topic = topic }))
  assert.equal(0, r.code, r.remark)
  local lag, n = 0, 0
  local pat = '"topic":"([^"]+)"}:{"brokerOffset":(%d+),"consumerOffset":(%d+)'
  for t, bo, co in r.body:gmatch(pat) do
    if t == topic then
      lag = lag + tonumber(bo) - tonumber(co)
      n = n + 1
    end
  end
  assert.is_true(n > 0, "no queue of " .. topic .. " in " .. r.body)
  return lag
end

local function script(dir, opts)
  return cons.script(dir, opts)
end

describe("metrics endpoint", function()
  local N, TOPIC, GROUP = 200, "MetTopic", "g_metrics"
  local RETRY = "%RETRY%" .. GROUP

  it("counts what the handlers saw, in a format a Prometheus parser reads", function()
    local db, ns, dir, out, log = cons.loaded_broker({ topic = TOPIC, queues = 4, n = N,
      prefix = "a", tmpname = "metrics", close = raw.close_all })
    -- First delivery: bodies ending in 3 raise, in 7 ask for a retry, in 9 go to the DLQ.
    local s = script(dir, { group = GROUP, ns = ns, topic = TOPIC, out = out,
      extra = "persist_consumer_offset_interval = 200, consume_thread_min = 4,",
      body = cons.FAIL_BY_DIGIT })
    local pid = helpers.spawn(helpers.bin .. " run " .. s .. " --metrics 127.0.0.1:0",
      { log = log, rc = log .. ".rc" })
    local url = base_url(log)
    local E = N / 10 -- bodies ending in each digit
    -- The handler saw every message once on the topic's queues, and the 3s and 7s again from
    -- the retry topic.
    helpers.wait_until(function() return cons.count_lines(out) >= N + 2 * E end, 60, "deliveries")
    local seen = { [TOPIC] = 0, [RETRY] = 0 }
    for _, r in ipairs(cons.records(out)) do seen[r.store_topic] = seen[r.store_topic] + 1 end
    assert.same({ [TOPIC] = N, [RETRY] = 2 * E }, seen)

    local m
    helpers.wait_until(function()
      m = assert(scrape(url .. "/metrics"))
      local f = m.families
      return sum(f, "rmqlua_consumed_messages", { topic = RETRY }) == 2 * E
        and sum(f, "rmqlua_consumer_lag") == 0
        and sum(f, "rmqlua_dlq_messages", { topic = TOPIC }) == E
        and sum(f, "rmqlua_sent_back_messages", { topic = TOPIC }) == 2 * E
    end, 30, "the counters to settle and the lag to reach 0")
    assert.equal(200, m.status)
    assert.matches("^text/plain; version=0%.0%.4", m.content_type)
    local f = m.families
    -- Every family has its HELP and TYPE lines (a family without TYPE parses as "unknown").
    for name, fam in pairs(f) do
      assert.are_not.equal("unknown", fam.type, name .. " has no TYPE line")
      assert.is_true(#fam.help > 0, name .. " has no HELP line")
    end
    local want = {
      rmqlua_consumed_messages = "counter", rmqlua_failed_messages = "counter",
      rmqlua_sent_back_messages = "counter", rmqlua_dlq_messages = "counter",
      rmqlua_pulled_messages = "counter", rmqlua_pull_requests = "counter",
      rmqlua_rebalances = "counter", rmqlua_reconnects = "counter",
      rmqlua_consume_timeouts = "counter", rmqlua_lua_errors = "counter",
      rmqlua_consumer_lag = "gauge", rmqlua_cached_messages = "gauge",
      rmqlua_cached_bytes = "gauge", rmqlua_committed_offset = "gauge",
      rmqlua_owned_queues = "gauge", rmqlua_lua_memory_bytes = "gauge",
      rmqlua_inflight_batches = "gauge",
      rmqlua_process_time_seconds = "histogram", rmqlua_await_time_seconds = "histogram",
      rmqlua_delivery_latency_seconds = "histogram", rmqlua_pull_rt_seconds = "histogram",
      process_cpu_seconds = "counter", process_resident_memory_bytes = "gauge",
      process_virtual_memory_bytes = "gauge", process_open_fds = "gauge",
      process_max_fds = "gauge", process_start_time_seconds = "gauge",
    }
    for name, typ in pairs(want) do
      assert.is_truthy(f[name], "missing family " .. name)
      assert.equal(typ, f[name].type, name)
    end
    -- Counters equal what the handlers did, per topic and labelled by group.
    local t = { group = GROUP, topic = TOPIC }
    assert.equal(N - 3 * E, sum(f, "rmqlua_consumed_messages", t))
    assert.equal(3 * E, sum(f, "rmqlua_failed_messages", t))
    assert.equal(2 * E, sum(f, "rmqlua_sent_back_messages", t))
    assert.equal(E, sum(f, "rmqlua_dlq_messages", t))
    assert.equal(E, sum(f, "rmqlua_lua_errors", t))
    assert.equal(N, sum(f, "rmqlua_pulled_messages", t))
    assert.equal(0, sum(f, "rmqlua_consume_timeouts", t))
    assert.equal(2 * E, sum(f, "rmqlua_pulled_messages", { topic = RETRY }))
    assert.equal(0, sum(f, "rmqlua_failed_messages", { topic = RETRY }))
    assert.is_true(sum(f, "rmqlua_pull_requests", { topic = TOPIC, result = "found" }) >= 4)
    assert.is_true(sum(f, "rmqlua_rebalances") >= 1)
    assert.equal(4, sum(f, "rmqlua_owned_queues", t))
    local _, nq = sum(f, "rmqlua_consumer_lag", { topic = TOPIC, broker = "broker-a" })
    assert.equal(4, nq)
    assert.equal(0, sum(f, "rmqlua_cached_messages"))
    assert.equal(N / 4 * 4, sum(f, "rmqlua_committed_offset", t)) -- 50 per queue
    local _, nthreads = sum(f, "rmqlua_lua_memory_bytes")
    assert.equal(4, nthreads)
    for _, smp in ipairs(f.rmqlua_lua_memory_bytes.samples) do assert.is_true(smp.value > 10000) end
    -- Histograms: one handler call per message here (batch size 1), cumulative buckets.
    for _, h in ipairs { "rmqlua_process_time_seconds", "rmqlua_await_time_seconds",
                         "rmqlua_delivery_latency_seconds" } do
      assert.equal(N, sum(f, h, { topic = TOPIC, __sample = h .. "_count" }), h)
      assert.equal(2 * E, sum(f, h, { topic = RETRY, __sample = h .. "_count" }), h)
      assert.equal(N, sum(f, h, { topic = TOPIC, le = "+Inf", __sample = h .. "_bucket" }), h)
      local prev = 0
      for _, smp in ipairs(f[h].samples) do
        if smp.name == h .. "_bucket" and smp.labels.topic == TOPIC then
          assert.is_true(smp.value >= prev, h .. " buckets are cumulative")
          prev = smp.value
        end
      end
    end
    local pulls = sum(f, "rmqlua_pull_rt_seconds",
      { topic = TOPIC, __sample = "rmqlua_pull_rt_seconds_count" })
    assert.is_true(pulls >= 4)
    -- The standard process series.
    assert.is_true(sum(f, "process_cpu_seconds") > 0)
    assert.is_true(sum(f, "process_resident_memory_bytes") > 1e6)
    assert.is_true(sum(f, "process_open_fds") > 3)
    assert.is_true(math.abs(sum(f, "process_start_time_seconds") - os.time()) < 600)

    -- /stats: the same figures as JSON; /health: 200 with a reason.
    local st = assert(scrape(url .. "/stats"))
    assert.equal(200, st.status)
    assert.matches("^application/json", st.content_type)
    local j = cjson.decode(st.body)
    assert.equal(GROUP, j.group)
    assert.equal("RUNNING", j.state)
    assert.equal(N - 3 * E, j.topics[TOPIC].consumed)
    assert.equal(E, j.topics[TOPIC].dlq)
    assert.equal(N, j.topics[TOPIC].histograms.process_time_seconds.count)
    assert.equal(4, #j.lua_memory_bytes)
    assert.equal(0, j.totals.lag)
    assert.is_true(j.health.healthy)
    local hl = assert(scrape(url .. "/health"))
    assert.equal(200, hl.status)
    assert.matches("^ok: .* running, name server 127%.0%.0%.1:%d+ connected\n$", hl.body)
    local nf = assert(scrape(url .. "/nothing"))
    assert.equal(404, nf.status)

    -- The broker's view of the lag (mqadmin consumerProgress) agrees once offsets persisted.
    local baddr = cons.broker_addr(db)
    helpers.wait_until(function() return broker_lag(baddr, GROUP, TOPIC) == 0 end, 20,
      "the committed offsets on the broker")

    helpers.kill(pid, "TERM")
    assert.equal(0, cons.exit_code(log))
  end)

  it("shows the same lag as the broker while a handler holds a message, then 0", function()
    local group = "g_metrics_lag"
    local db, ns = cons.start_broker("--topic " .. TOPIC .. ":2")
    helpers.defer(function() raw.close_all(); lib.rmq_devbroker_stop(db) end)
    cons.produce(db, TOPIC, 40, "s")
    local dir = helpers.tmpdir("metrics-lag")
    local out, log, flag = dir .. "/out.txt", dir .. "/run.log", dir .. "/go"
    local s = script(dir, { group = group, ns = ns, topic = TOPIC, out = out,
      extra = "persist_consumer_offset_interval = 200, consume_thread_min = 2,",
      body = string.format([[
        if msgs[1].body == "s7" then
          local ffi = require "ffi"
          pcall(ffi.cdef, "int poll(void *fds, unsigned long nfds, int timeout);")
          while true do
            local f = io.open(%q)
            if f then f:close() break end
            ffi.C.poll(nil, 0, 20)
          end
        end]], flag) })
    local pid = helpers.spawn(helpers.bin .. " run " .. s .. " --metrics 127.0.0.1:0",
      { log = log, rc = log .. ".rc" })
    helpers.defer(function() io.open(flag, "w"):close() end)
    local url = base_url(log)
    local baddr = cons.broker_addr(db)
    helpers.wait_until(function() return cons.count_lines(out) >= 40 end, 60, "deliveries")
    -- s7 sits on queue 0 at offset 3 (round robin over 2 queues): that queue's committed offset
    -- stays at 3 while the 16 messages after it are consumed, so its lag is 20 - 3.
    local lag
    helpers.wait_until(function()
      local m = assert(scrape(url .. "/metrics"))
      lag = sum(m.families, "rmqlua_consumer_lag", { topic = TOPIC })
      return lag > 0 and lag == broker_lag(baddr, group, TOPIC)
    end, 30, "the metrics lag and the broker's lag to agree")
    assert.equal(17, lag)
    io.open(flag, "w"):close()
    helpers.wait_until(function()
      local m = assert(scrape(url .. "/metrics"))
      return sum(m.families, "rmqlua_consumer_lag", { topic = TOPIC }) == 0
        and broker_lag(baddr, group, TOPIC) == 0
    end, 30, "both lags to reach 0")
    helpers.kill(pid, "TERM")
    assert.equal(0, cons.exit_code(log))
  end)

  it("counts a handler stuck past consume_timeout_millis once, and no batch that only waited",
    function()
    local topic, group, BACKLOG = "MetTimeout", "g_metrics_timeout", 8
    local retry = "%RETRY%" .. group
    local timeout = math.floor(1000 * helpers.scale)
    local db, ns = cons.start_broker("--topic " .. topic .. ":1 --delay-scale 0.001")
    helpers.defer(function() raw.close_all(); lib.rmq_devbroker_stop(db) end)
    local bodies = { "stuck" }
    for i = 1, BACKLOG do bodies[#bodies + 1] = "b" .. i end
    for _, b in ipairs(bodies) do
      assert(lib.rmq_devbroker_produce(db, 0, topic, 0, nil, nil, b, #b) >= 0)
    end
    local dir = helpers.tmpdir("metrics-timeout")
    local out, log = dir .. "/out.txt", dir .. "/run.log"
    -- One consume thread. On its first delivery "stuck" blocks it in a C call for 2 timeouts +
    -- 2 s: the consume-timeout round (every timeout) sends it back. The backlog waits behind it
    -- in the pool for longer than the timeout, which is no timeout: its handlers had not started.
    local s = script(dir, { group = group, ns = ns, topic = topic, out = out,
      extra = string.format("consume_thread_min = 1, consume_thread_max = 1, "
        .. "consume_timeout_millis = %d,", timeout),
      body = string.format([[
        local m = msgs[1]
        if m.body == "stuck" and m.reconsume_times == 0 then
          local ffi = require "ffi"
          pcall(ffi.cdef, "int poll(void *fds, unsigned long nfds, int timeout);")
          ffi.C.poll(nil, 0, %d)
        end]], 2 * timeout + 2000) })
    local pid = helpers.spawn(helpers.bin .. " run " .. s .. " --metrics 127.0.0.1:0",
      { log = log, rc = log .. ".rc" })
    local url = base_url(log)
    helpers.wait_until(function()
      local again = false
      for _, r in ipairs(cons.records(out)) do
        if r.body == "stuck" and r.rt == 1 then again = true end
      end
      return again and cons.count_lines(out) >= #bodies + 1
    end, 60, "the backlog and the stuck message again from " .. retry .. " (log " .. log .. ")")
    local f
    helpers.wait_until(function()
      f = assert(scrape(url .. "/metrics")).families
      return sum(f, "rmqlua_consumed_messages", { topic = retry }) == 1
        and sum(f, "rmqlua_consumer_lag", { topic = topic }) == 0
    end, 30, "the counters to settle")
    assert.matches("(consume timeout): sending them back", cons.read(log), 1, true)
    assert.equal(1, sum(f, "rmqlua_sent_back_messages", { topic = topic }))
    -- One batch ran into the timeout: the stuck one, counted once (the timeout round sent it
    -- back; its handler's end does not count it again); neither the backlog nor its second
    -- delivery counts.
    assert.equal(1, sum(f, "rmqlua_consume_timeouts", { group = group, topic = topic }))
    assert.equal(0, sum(f, "rmqlua_consume_timeouts", { topic = retry }))
    assert.equal(1, sum(f, "rmqlua_consume_timeouts"))
    local j = cjson.decode(assert(scrape(url .. "/stats")).body)
    assert.equal(1, j.topics[topic].consume_timeouts)
    helpers.kill(pid, "TERM")
    assert.equal(0, cons.exit_code(log))
  end)

  it("says 503 on /health while the name server is away, 200 again when it is back", function()
    local db, ns = cons.start_broker("--topic " .. TOPIC .. ":2")
    local stopped = false
    helpers.defer(function() if not stopped then lib.rmq_devbroker_stop(db) end end)
    local dir = helpers.tmpdir("metrics-health")
    local out, log = dir .. "/out.txt", dir .. "/run.log"
    local s = script(dir, { group = "g_metrics_health", ns = ns, topic = TOPIC, out = out,
      extra = "poll_name_server_interval = 300," })
    local pid = helpers.spawn(helpers.bin .. " run " .. s .. " --metrics 127.0.0.1:0",
      { log = log, rc = log .. ".rc" })
    local url = base_url(log)
    local h
    helpers.wait_until(function()
      h = assert(scrape(url .. "/health"))
      return h.status == 200
    end, 20, "/health 200")
    local m = assert(scrape(url .. "/metrics"))
    assert.equal(1, sum(m.families, "rmqlua_healthy"))
    lib.rmq_devbroker_stop(db)
    stopped = true
    helpers.wait_until(function()
      h = assert(scrape(url .. "/health"))
      return h.status == 503
    end, 20, "/health 503")
    assert.matches("^no name server connection: " .. ns:gsub("%p", "%%%0") .. ": .+\n$", h.body)
    assert.equal(#h.body, h.body:find("\n", 1, true)) -- one line
    m = assert(scrape(url .. "/metrics"))
    assert.equal(0, sum(m.families, "rmqlua_healthy"))
    local j = cjson.decode(assert(scrape(url .. "/stats")).body)
    assert.is_false(j.health.healthy)
    assert.is_false(j.name_server.connected)
    assert.equal(0, sum(m.families, "rmqlua_reconnects"))
    -- A name server on the same address again: the next route lookup reconnects.
    local db2 = cons.start_broker("--listen " .. ns .. " --topic " .. TOPIC .. ":2")
    helpers.defer(function() lib.rmq_devbroker_stop(db2) end)
    helpers.wait_until(function()
      h = assert(scrape(url .. "/health"))
      return h.status == 200
    end, 20, "/health 200 again")
    m = assert(scrape(url .. "/metrics"))
    assert.is_true(sum(m.families, "rmqlua_reconnects") >= 1)
    assert.equal(1, sum(m.families, "rmqlua_healthy"))
    helpers.kill(pid, "TERM")
    assert.equal(0, cons.exit_code(log))
  end)

  it("calls on_stats every stats_interval_ms with the snapshot as a table", function()
    local db, ns = cons.test_broker("--topic " .. TOPIC .. ":2")
    cons.produce(db, TOPIC, 30, "o")
    local dir = helpers.tmpdir("metrics-onstats")
    local out, log, snaps = dir .. "/out.txt", dir .. "/run.log", dir .. "/snaps.txt"
    local s = script(dir, { group = "g_metrics_onstats", ns = ns, topic = TOPIC, out = out,
      extra = string.format([[
        stats_interval_ms = 200,
        on_stats = function(snap)
          local f = assert(io.open(%q, "a"))
          f:write(require("cjson").encode(snap), "\n")
          f:close()
        end,]], snaps) })
    local pid = helpers.spawn(helpers.bin .. " run " .. s, { log = log, rc = log .. ".rc" })
    local last
    helpers.wait_until(function()
      local lines = cons.lines(snaps)
      if #lines < 3 then return false end
      last = cjson.decode(lines[#lines])
      return last.topics[TOPIC] and last.topics[TOPIC].consumed == 30
    end, 30, "on_stats with every message counted")
    assert.equal("g_metrics_onstats", last.group)
    assert.equal("RUNNING", last.state)
    assert.is_true(last.health.healthy)
    assert.equal(30, last.topics[TOPIC].pulled)
    assert.equal(30, last.topics[TOPIC].histograms.delivery_latency_seconds.count)
    assert.equal(2, last.topics[TOPIC].owned_queues)
    assert.equal(0, last.totals.lag)
    assert.equal(20, #last.lua_memory_bytes) -- consume_thread_min's default
    assert.is_true(last.process.cpu_seconds_total > 0)
    assert.equal(3, #last.queues) -- and the retry topic's queue
    helpers.kill(pid, "TERM")
    assert.equal(0, cons.exit_code(log))
    assert.is_nil(cons.read(log):find("on_stats hook", 1, true))
  end)

  it("takes a new on_stats and stats_interval_ms on a reload, not a new metrics_listen",
    function()
    local db, ns = cons.test_broker("--topic " .. TOPIC .. ":2")
    local dir = helpers.tmpdir("metrics-reload")
    local log, snaps, path = dir .. "/run.log", dir .. "/snaps.txt", dir .. "/reload.lua"
    local function version(listen, hook)
      local f = assert(io.open(path .. ".tmp", "w"))
      f:write(string.format([[
return {
  consumer_group = "g_metrics_reload", namesrv_addr = %q,
  subscribe = { %s = "*" },
  metrics_listen = %q,
  stats_interval_ms = 200,
  consume = function(msgs, ctx) end,
  %s
}
]], ns, TOPIC, listen, hook and string.format([[on_stats = function(s)
    local f = assert(io.open(%q, "a")); f:write(s.group, "\n"); f:close()
  end,]], snaps) or ""))
      f:close()
      assert(os.rename(path .. ".tmp", path))
    end
    version("127.0.0.1:0", false)
    local pid = helpers.spawn(helpers.bin .. " run " .. path, { log = log, rc = log .. ".rc" })
    local url = base_url(log)
    helpers.sleep(0.5)
    assert.equal(0, cons.count_lines(snaps)) -- no hook yet
    version("127.0.0.1:0", true)
    os.execute("kill -HUP " .. pid) -- a reload
    helpers.wait_until(function() return cons.count_lines(snaps) >= 3 end, 20,
      "on_stats of the reloaded script")
    assert.equal("g_metrics_reload", cons.lines(snaps)[1])
    version("127.0.0.1:1", true)
    os.execute("kill -HUP " .. pid)
    helpers.wait_until(function()
      return cons.read(log):find("metrics_listen cannot change while the consumer runs", 1, true)
    end, 20, "the refused metrics_listen")
    assert.equal(200, assert(scrape(url .. "/health")).status) -- the endpoint serves on
    helpers.kill(pid, "TERM")
    assert.equal(0, cons.exit_code(log))
  end)

  it("rejects a bad metrics_listen and a port in use", function()
    local rc, txt = helpers.run(helpers.bin .. " run --metrics 127.0.0.1:99999 "
      .. helpers.root .. "/examples/hello.lua")
    assert.equal(2, rc)
    assert.matches("--metrics: metrics_listen: \"127.0.0.1:99999\": the port must be 0..65535",
      txt, 1, true)
    rc, txt = helpers.run(helpers.bin .. " run --set metrics_listen=nocolon "
      .. helpers.root .. "/examples/hello.lua")
    assert.equal(2, rc)
    assert.matches("expected host:port", txt, 1, true)
    -- A port already taken: the consumer does not start.
    local db, ns = cons.test_broker("--topic " .. TOPIC .. ":2")
    local dir = helpers.tmpdir("metrics-busy")
    local s = script(dir, { group = "g_metrics_busy", ns = ns, topic = TOPIC, out = dir .. "/o" })
    local taken = ns:match(":(%d+)$") -- the name server's own port
    rc, txt = helpers.run(helpers.bin .. " run " .. s .. " --metrics 127.0.0.1:" .. taken)
    assert.equal(1, rc)
    assert.matches("cannot start: metrics_listen 127.0.0.1:" .. taken .. ": cannot listen on",
      txt, 1, true)
  end)
end)
