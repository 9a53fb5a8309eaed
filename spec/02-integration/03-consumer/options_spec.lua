-- Every consumer option has an effect: one test per option (or group of options) that no other
-- spec shows, each observed at the development broker (the requests it recorded, their bodies,
-- its connection list and offsets) or in what the consumer logs. Options that are not
-- supported are refused instead (spec/c/test_conf.c).
local helpers = require "helpers"
local ffi = require "ffi"
local cjson = require "cjson"
local raw = require "rawclient"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local PULL, HEART_BEAT, ROUTE, UPDATE_OFFSET, UNREGISTER, CONSUMER_LIST, SEARCH_BY_TIME =
  11, 34, 105, 15, 35, 38, 29

local function ext(db, target, code, key, idx)
  local buf = ffi.new("char[512]")
  local n = lib.rmq_devbroker_request_ext(db, target, code, idx or -1, key, buf, 512)
  if n < 0 then return nil end
  return ffi.string(buf, n)
end

-- The extField key of the last request with this code whose extField match_key is match_val.
local function ext_where(db, code, match_key, match_val, key)
  for i = lib.rmq_devbroker_count(db, 0, code) - 1, 0, -1 do
    if ext(db, 0, code, match_key, i) == match_val then return ext(db, 0, code, key, i) end
  end
  return nil
end

local function body(db, target, code, idx)
  local buf = ffi.new("char[4096]")
  local n = lib.rmq_devbroker_request_body(db, target, code, idx or -1, buf, 4096)
  if n < 0 then return nil end
  return ffi.string(buf, math.min(n, 4096))
end

describe("consumer options", function()
  local db, ns

  lazy_setup(function()
    db, ns = cons.start_broker("--topic OptT:2 --topic ns1%NsT:2 --topic PullT:1 --topic IvT:1 "
      .. "--topic ErrT:1 --topic TimerT:1 --topic FrameT:1 --topic AwaitT:1 "
      .. "--topic SpanT:1 --topic TopicThrT:1 --topic SizeQT:1 --topic SizeTT:1 --delay-scale 0.001")
  end)
  lazy_teardown(function() if db then lib.rmq_devbroker_stop(db) end end)

  local function run_bg(dir, opts)
    local out = dir .. "/" .. (opts.name or "consumer") .. ".out"
    opts.out, opts.ns = out, ns
    local s = cons.script(dir, opts)
    local log = dir .. "/" .. (opts.name or "consumer") .. ".log"
    local pid = cons.spawn(s, log)
    return pid, out, log
  end

  it("client_ip, instance_name, unit_name, enable_stream_request_type make the clientId; " ..
     "language and unit_mode reach the broker", function()
    local dir = cons.tmpdir("opt-client")
    cons.produce(db, "OptT", 4, "c")
    -- c2 fails once and its send-back fails: the inner producer re-sends it, in unit mode too.
    assert.equal(0, lib.rmq_devbroker_push_error(db, 0, 36 --[[CONSUMER_SEND_MSG_BACK]], 1, 1))
    local pid, out, log = run_bg(dir, { group = "g_client", topic = "OptT", extra = [[
      client_ip = "10.9.8.7", instance_name = "inst7", unit_name = "unitX",
      enable_stream_request_type = true, language = "CPP", unit_mode = true,]],
      body = [[if msgs[1].body == "c2" and msgs[1].reconsume_times == 0 then return rmq.RECONSUME_LATER end]] })
    helpers.wait_until(function() return cons.count_lines(out) >= 5 end, 30, "consumed (" .. log .. ")")
    assert.equal("true", ext(db, 0, 310 --[[SEND_MESSAGE_V2]], "k")) -- unitMode
    local cid = "10.9.8.7@inst7@unitX@STREAM"
    local hb_body = body(db, 0, HEART_BEAT)
    assert.is_string(hb_body)
    local hb = cjson.decode(hb_body)
    assert.equal(cid, hb.clientID)
    assert.is_true(hb.consumerDataSet[1].unitMode)
    -- The broker's connection list shows the language of the heartbeat.
    local c = assert(raw.connect(ffi.string(lib.rmq_devbroker_broker_addr(db, 0))))
    local resp = assert(c:request(203 --[[GET_CONSUMER_CONNECTION_LIST]], { consumerGroup = "g_client" }))
    c:close()
    assert.equal(0, resp.code, resp.remark)
    local cl = resp.body
    local conns = cjson.decode(cl).connectionSet
    assert.equal(1, #conns)
    assert.equal(cid, conns[1].clientId)
    assert.equal("CPP", conns[1].language)
    cons.stop(pid)
    assert.equal(0, cons.exit_code(log))
    assert.equal(cid, ext(db, 0, UNREGISTER, "clientID"))
  end)

  it("namespace wraps the group and the topics", function()
    local dir = cons.tmpdir("opt-ns")
    cons.produce(db, "ns1%NsT", 6, "n")
    -- n3 fails once: sent back (its topic wrapped again), it returns through %RETRY%ns1%g_ns.
    local pid, out, log = run_bg(dir, { group = "g_ns", topic = "NsT", extra = [[namespace = "ns1",]],
      body = [[if msgs[1].body == "n3" and msgs[1].reconsume_times == 0 then return rmq.RECONSUME_LATER end]] })
    helpers.wait_until(function() return cons.count_lines(out) >= 7 end, 30, "consumed (" .. log .. ")")
    cons.stop(pid)
    -- The handler sees the topic without the namespace (resetRetryAndNamespace), retried too.
    for _, r in ipairs(cons.records(out)) do assert.equal("NsT", r.topic) end
    local retried = false
    for _, r in ipairs(cons.records(out)) do
      if r.body == "n3" and r.rt == 1 then retried = (r.store_topic == "%RETRY%ns1%g_ns") end
    end
    assert.is_true(retried)
    assert.equal("ns1%NsT", ext(db, 0, 36 --[[CONSUMER_SEND_MSG_BACK]], "originTopic"))
    assert.equal("ns1%g_ns", ext(db, 0, CONSUMER_LIST, "consumerGroup"))
    local committed = 0
    for q = 0, 1 do
      committed = committed + tonumber(lib.rmq_devbroker_committed_offset(db, 0, "ns1%g_ns", "ns1%NsT", q))
    end
    assert.equal(6, committed)
  end)

  it("pull_batch_size and post_subscription_when_pull shape PULL_MESSAGE", function()
    local dir = cons.tmpdir("opt-pull")
    cons.produce(db, "PullT", 3, "p", "TagA")
    local pid, out = run_bg(dir, { name = "plain", group = "g_pull0", topic = "PullT", tags = "TagA || TagB" })
    helpers.wait_until(function() return cons.count_lines(out) >= 3 end, 30, "consumed")
    cons.stop(pid)
    assert.equal("32", ext_where(db, PULL, "topic", "PullT", "maxMsgNums"))
    assert.is_nil(ext_where(db, PULL, "topic", "PullT", "subscription"))
    pid, out = run_bg(dir, { name = "opts", group = "g_pull1", topic = "PullT", tags = "TagA || TagB",
      extra = "pull_batch_size = 7, post_subscription_when_pull = true," })
    helpers.wait_until(function() return cons.count_lines(out) >= 3 end, 30, "consumed")
    cons.stop(pid)
    assert.equal("7", ext_where(db, PULL, "topic", "PullT", "maxMsgNums"))
    assert.equal("TagA || TagB", ext_where(db, PULL, "topic", "PullT", "subscription"))
  end)

  it("pull_interval pauses between two pulls of a queue", function()
    local dir = cons.tmpdir("opt-interval")
    cons.produce(db, "IvT", 20, "i")
    local pid, out = run_bg(dir, { group = "g_iv", topic = "IvT",
      extra = "pull_batch_size = 1, pull_interval = 1500," })
    helpers.wait_until(function() return cons.count_lines(out) >= 1 end, 30, "first message")
    helpers.sleep(2)
    -- Without the pause all 20 would be in by now; with it, one more pull at most came back.
    assert.is_true(cons.count_lines(out) <= 3, cons.count_lines(out) .. " consumed")
    cons.stop(pid)
  end)

  it("pull_time_delay_mills_when_exception delays the pull after a failed one", function()
    local dir = cons.tmpdir("opt-pulldelay")
    local before = lib.rmq_devbroker_count(db, 0, PULL)
    assert.equal(0, lib.rmq_devbroker_push_error(db, 0, PULL, 1 --[[SYSTEM_ERROR]], 1000))
    helpers.defer(function() lib.rmq_devbroker_clear_errors(db) end)
    local pid = run_bg(dir, { group = "g_pulldelay", topic = "ErrT",
      extra = "pull_time_delay_mills_when_exception = 5000," })
    helpers.wait_until(function() return lib.rmq_devbroker_count(db, 0, PULL) > before end, 30, "a pull")
    helpers.sleep(3)
    -- Two queues (ErrT and %RETRY%g_pulldelay), one failed pull each, the next ones 5 s later
    -- (at the 1000 ms default there would be about three more each by now).
    assert.is_true(lib.rmq_devbroker_count(db, 0, PULL) - before <= 2,
      (lib.rmq_devbroker_count(db, 0, PULL) - before) .. " pulls")
    cons.stop(pid)
  end)

  it("heartbeat_broker_interval, poll_name_server_interval, persist_consumer_offset_interval set the timers", function()
    local dir = cons.tmpdir("opt-timers")
    cons.produce(db, "TimerT", 2, "t")
    local hb0, rt0, up0 = lib.rmq_devbroker_count(db, 0, HEART_BEAT),
      lib.rmq_devbroker_count(db, cons.NAMESRV, ROUTE), lib.rmq_devbroker_count(db, 0, UPDATE_OFFSET)
    local pid, _, log = run_bg(dir, { group = "g_timers", topic = "TimerT", extra = [[
      heartbeat_broker_interval = 300, poll_name_server_interval = 300,
      persist_consumer_offset_interval = 300,]] })
    -- At the defaults (30 s, 30 s, 5 s) these counts take minutes.
    helpers.wait_until(function()
      return lib.rmq_devbroker_count(db, 0, HEART_BEAT) - hb0 >= 6 and
        lib.rmq_devbroker_count(db, cons.NAMESRV, ROUTE) - rt0 >= 12 and
        lib.rmq_devbroker_count(db, 0, UPDATE_OFFSET) - up0 >= 40
    end, 20, "heartbeats, route queries and offset commits every 300 ms (" .. log .. ")")
    cons.stop(pid)
  end)

  it("mq_client_api_timeout bounds ordinary requests", function()
    local dir = cons.tmpdir("opt-timeout")
    assert.equal(0, lib.rmq_devbroker_set_latency(db, 0, HEART_BEAT, 2000))
    helpers.defer(function() lib.rmq_devbroker_set_latency(db, 0, HEART_BEAT, 0) end)
    local pid, _, log = run_bg(dir, { group = "g_timeout", topic = "OptT", extra = "mq_client_api_timeout = 400," })
    local broker = ffi.string(lib.rmq_devbroker_broker_addr(db, 0))
    helpers.wait_until(function()
      local text = cons.read(log)
      return text:find("to " .. broker .. " timed out after 400 ms", 1, true)
        and text:find("HEART_BEAT", 1, true)
    end, 30, "a HEART_BEAT timed out after 400 ms (" .. log .. ")")
    cons.stop(pid)
  end)

  it("frame_max_length refuses bigger frames", function()
    local dir = cons.tmpdir("opt-frame")
    local big = string.rep("F", 3000)
    assert.is_true(lib.rmq_devbroker_produce(db, 0, "FrameT", 0, nil, nil, big, #big) >= 0)
    local pid, _, log = run_bg(dir, { group = "g_frame", topic = "FrameT", extra = "frame_max_length = 2048," })
    helpers.wait_until(function()
      return cons.read(log):find("exceeds the maximum frame size 2048", 1, true)
    end, 30, "the frame refused (" .. log .. ")")
    cons.stop(pid)
  end)

  it("consume_timestamp is where CONSUME_FROM_TIMESTAMP starts", function()
    local dir = cons.tmpdir("opt-ts")
    -- A broker that dropped the oldest messages: a new group does not simply start at 0 (the
    -- 4.9.4 broker answers offset 0 while a queue still holds its first message).
    local tdb, tns = cons.test_broker("--topic TsT:1 --max-bytes 4096")
    cons.produce(tdb, "TsT", 100, "s")
    local min = tonumber(lib.rmq_devbroker_min_offset(tdb, 0, "TsT", 0))
    assert.is_true(min > 0)
    local out = dir .. "/ts.out"
    local s = cons.script(dir, { group = "g_ts", topic = "TsT", out = out, ns = tns, extra = [[
      consume_from_where = "CONSUME_FROM_TIMESTAMP", consume_timestamp = "20200102030405",]] })
    local pid = cons.spawn(s, dir .. "/ts.log")
    helpers.wait_until(function() return cons.count_lines(out) >= 100 - min end, 30, "consumed")
    cons.stop(pid)
    local want = os.time { year = 2020, month = 1, day = 2, hour = 3, min = 4, sec = 5 } * 1000
    assert.equal(tostring(want), ext(tdb, 0, SEARCH_BY_TIME, "timestamp"))
  end)

  it("consume_from_where CONSUME_FROM_LAST_OFFSET (and the deprecated names) start a new group at the end", function()
    local dir = cons.tmpdir("opt-last")
    local tdb, tns = cons.test_broker("--topic LastT:1 --max-bytes 4096")
    cons.produce(tdb, "LastT", 100, "old")
    assert.is_true(tonumber(lib.rmq_devbroker_min_offset(tdb, 0, "LastT", 0)) > 0)
    for i, cfw in ipairs { "CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_MAX_OFFSET" } do
      local out = dir .. "/last" .. i .. ".out"
      local s = cons.script(dir, { name = "last" .. i, group = "g_last" .. i, topic = "LastT", out = out,
        ns = tns, extra = ("consume_from_where = %q,"):format(cfw) })
      local pid = cons.spawn(s, dir .. "/last" .. i .. ".log")
      -- Its first pull of LastT asks for the end of the queue.
      local last = tostring(tonumber(lib.rmq_devbroker_max_offset(tdb, 0, "LastT", 0)))
      helpers.wait_until(function()
        for k = 0, lib.rmq_devbroker_count(tdb, 0, PULL) - 1 do
          if ext(tdb, 0, PULL, "topic", k) == "LastT" and ext(tdb, 0, PULL, "consumerGroup", k) == "g_last" .. i then
            return assert.equal(last, ext(tdb, 0, PULL, "queueOffset", k)) or true
          end
        end
      end, 30, "the group's first pull")
      local body = "new" .. i
      assert.is_true(lib.rmq_devbroker_produce(tdb, 0, "LastT", 0, nil, nil, body, #body) >= 0)
      helpers.wait_until(function() return cons.count_lines(out) >= 1 end, 30, "the new message")
      cons.stop(pid)
      local recs = cons.records(out)
      assert.equal(1, #recs)
      assert.equal(body, recs[1].body)
    end
  end)

  it("await_termination_millis_when_shutdown lets a running handler finish", function()
    local dir = cons.tmpdir("opt-await")
    cons.produce(db, "AwaitT", 1, "slow")
    local marker = dir .. "/done"
    local pid, out, log = run_bg(dir, { group = "g_await", topic = "AwaitT",
      extra = "await_termination_millis_when_shutdown = 20000,",
      body = ([[
      local ffi = require "ffi"
      pcall(ffi.cdef, "int poll(void *fds, unsigned long nfds, int timeout);")
      ffi.C.poll(nil, 0, 2000)
      local f = io.open(%q, "w"); f:write("done"); f:close()
      ]]):format(marker) })
    helpers.wait_until(function() return cons.count_lines(out) >= 1 end, 30, "the handler started")
    cons.stop(pid) -- SIGTERM while the handler sleeps
    assert.equal(0, cons.exit_code(log))
    assert.equal("done", cons.read(marker))
    assert.equal(1, tonumber(lib.rmq_devbroker_committed_offset(db, 0, "g_await", "AwaitT", 0)))
  end)

  it("log_debug switches debug categories on", function()
    local dir = cons.tmpdir("opt-logdebug")
    local pid, _, log = run_bg(dir, { group = "g_logdebug", topic = "OptT", extra = [[log_debug = "namesrv,remoting",]] })
    helpers.wait_until(function()
      local text = cons.read(log)
      return text:find("DEBUG [remoting]", 1, true) and text:find("GET_ROUTEINFO_BY_TOPIC", 1, true)
    end, 30, "remoting debug lines (" .. log .. ")")
    cons.stop(pid)
  end)

  it("message_listener comes from the hooks: a script or --set that sets it is refused", function()
    local dir = cons.tmpdir("opt-listener")
    local s = cons.script(dir, { group = "g_l", topic = "OptT", out = dir .. "/l.out", ns = ns,
      extra = [[message_listener = "ORDERLY",]] })
    local rc, out = helpers.run(helpers.bin .. " check " .. helpers.shq(s))
    assert.equal(2, rc, out)
    assert.truthy(out:find("message_listener is set by the runtime from the script's hooks", 1, true), out)
    s = cons.script(dir, { name = "plain", group = "g_l", topic = "OptT", out = dir .. "/l.out", ns = ns })
    rc, out = helpers.run(helpers.bin .. " check --set message_listener=ORDERLY " .. helpers.shq(s))
    assert.equal(2, rc, out)
    assert.truthy(out:find("message_listener is set by the runtime", 1, true), out)
  end)

  -- Flow control, seen at the broker: each PULL_MESSAGE carries queueOffset (next to pull) and
  -- commitOffset (smallest unconsumed), so their difference is what the consumer holds.
  local function max_cached(topic)
    local buf = ffi.new("char[128]")
    local function x(i, key)
      local n = lib.rmq_devbroker_request_ext(db, 0, PULL, i, key, buf, 128)
      return n >= 0 and ffi.string(buf, n) or nil
    end
    local best, checked = 0, 0
    for i = 0, lib.rmq_devbroker_count(db, 0, PULL) - 1 do
      if x(i, "topic") == topic and x(i, "commitOffset") then
        local c = tonumber(x(i, "queueOffset")) - tonumber(x(i, "commitOffset"))
        if c > best then best = c end
        checked = checked + 1
      end
    end
    return best, checked
  end

  local flows = {
    { opt = "consume_concurrently_max_span = 20", topic = "SpanT", n = 150, size = 8, limit = 20 },
    -- Per queue: 12 over the two owned queues (the topic's and %RETRY%'s), as Java divides it.
    { opt = "pull_threshold_for_topic = 12", topic = "TopicThrT", n = 150, size = 8, limit = 6 },
    -- Whole MiB, as Java compares them: pulls stop once 2 MiB (32 bodies of 64 KiB) are held.
    { opt = "pull_threshold_size_for_queue = 1", topic = "SizeQT", n = 80, size = 64 * 1024, limit = 32 },
    { opt = "pull_threshold_size_for_topic = 1", topic = "SizeTT", n = 80, size = 64 * 1024, limit = 32 },
  }
  for _, fl in ipairs(flows) do
    it(fl.opt:match("^%S+") .. " holds back pulls", function()
      local dir = cons.tmpdir("opt-flow")
      local b = string.rep("b", fl.size)
      for i = 1, fl.n do
        assert.is_true(lib.rmq_devbroker_produce(db, 0, fl.topic, 0, nil, nil, b, #b) >= 0)
      end
      local s = dir .. "/flow.lua"
      local f = assert(io.open(s, "w"))
      f:write(([[
local ffi = require "ffi"
pcall(ffi.cdef, "int poll(void *fds, unsigned long nfds, int timeout);")
local out = assert(io.open(%q, "a"))
out:setvbuf("line")
return {
  consumer_group = "g_flow_%s", namesrv_addr = %q, consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  subscribe = { %s = "*" }, consume_thread_min = 1, consume_thread_max = 1, pull_batch_size = 4,
  %s,
  consume = function(msgs) ffi.C.poll(nil, 0, 5); out:write("x\n") end,
}
]]):format(dir .. "/flow.out", fl.topic, ns, fl.topic, fl.opt))
      f:close()
      local pid = cons.spawn(s, dir .. "/flow.log")
      helpers.wait_until(function() return cons.count_lines(dir .. "/flow.out") >= fl.n end, 120,
        "all consumed (" .. dir .. "/flow.log)")
      cons.stop(pid)
      local best, checked = max_cached(fl.topic)
      assert.is_true(checked > 5, "pulls with a commit offset: " .. checked)
      assert.is_true(best <= fl.limit + 4 + 1, "held up to " .. best)
      assert.is_true(best >= fl.limit - 4, "held only up to " .. best .. " (the limit was never reached)")
    end)
  end
end)
