-- RocketMQ 5 in the consumer: broker-side assignment (client_rebalance = false asks the broker
-- with QUERY_ASSIGNMENT which queues it gets and in which mode) and POP consumption
-- (POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME), against the development broker in
-- 5.x mode; and the fall back to the client-side allocation against a 4.x broker. Request
-- headers are checked by the Java classes' field names (PopMessageRequestHeader,
-- AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, QueryAssignmentRequestBody).
local helpers = require "helpers"
local cjson = require "cjson"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local QUERY_ASSIGNMENT = 400
local POP, ACK, CHANGE_INVISIBLE = 200050, 200051, 200053

-- The broker's record of requests (extField, body), and setConsumeMode.
local ext, body, set_mode = cons.request_ext, cons.request_body, cons.set_mode

-- The distinct bodies consumed (over the record files), and how many records in all.
local function consumed(outs)
  local seen, n, total = {}, 0, 0
  for _, o in ipairs(outs) do
    for _, r in ipairs(cons.records(o)) do
      total = total + 1
      if not seen[r.body] then seen[r.body] = true; n = n + 1 end
    end
  end
  return seen, n, total
end

local function script(dir, name, group, ns, topic, out, extra, handler)
  return cons.script(dir, { name = name, group = group, ns = ns, topic = topic, out = out,
    extra = "client_rebalance = false, consume_thread_min = 2, consume_thread_max = 2, " ..
      (extra or ""), body = handler })
end

describe("consumer: RocketMQ 5 broker-side assignment and POP", function()

  it("client_rebalance = false consumes in PULL mode what the broker assigns", function()
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5pull:4")
    local dir = cons.tmpdir("pop-pull")
    cons.produce(db, "T5pull", 200, "a")
    local out = dir .. "/out.txt"
    local pid = cons.spawn(script(dir, "c", "g5pull", ns, "T5pull", out), dir .. "/run.log")
    helpers.wait_until(function() return select(2, consumed({out})) == 200 end, 60,
      "every message consumed")
    -- QueryAssignmentRequestBody, and no POP in PULL mode
    assert.is_true(lib.rmq_devbroker_count(db, cons.ALL, QUERY_ASSIGNMENT) >= 1)
    local raw = body(db, QUERY_ASSIGNMENT, 0)
    assert.is_string(raw)
    local qa = cjson.decode(raw)
    assert.equal("g5pull", qa.consumerGroup)
    assert.equal("CLUSTERING", qa.messageModel)
    assert.equal("AVG", qa.strategyName)
    assert.truthy(qa.clientId and #qa.clientId > 0)
    assert.truthy(qa.topic == "T5pull" or qa.topic == "%RETRY%g5pull")
    assert.equal(0, lib.rmq_devbroker_count(db, cons.ALL, POP))
    assert.is_true(lib.rmq_devbroker_count(db, cons.ALL, 11 --[[PULL_MESSAGE]]) >= 1)
    cons.stop(pid)
    assert.equal(0, cons.exit_code(dir .. "/run.log"), "a clean stop")
  end)

  it("switches a group from PULL to POP and back while consuming, nothing lost", function()
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5sw:4")
    local dir = cons.tmpdir("pop-switch")
    local out = dir .. "/out.txt"
    cons.produce(db, "T5sw", 100, "p")
    local pid = cons.spawn(script(dir, "c", "g5sw", ns, "T5sw", out), dir .. "/run.log")
    helpers.wait_until(function() return select(2, consumed({out})) == 100 end, 60,
      "PULL mode consumed")
    set_mode(db, "T5sw", "g5sw", "POP")
    cons.produce(db, "T5sw", 100, "q")
    -- the next rebalance (at most 20 s) finds POP mode
    helpers.wait_until(function() return lib.rmq_devbroker_count(db, cons.ALL, POP) > 0 end, 60,
      "POP_MESSAGE sent")
    helpers.wait_until(function() return select(2, consumed({out})) == 200 end, 60,
      "everything consumed across the switch")
    cons.produce(db, "T5sw", 100, "r")
    helpers.wait_until(function() return select(2, consumed({out})) == 300 end, 60,
      "POP mode consumed")
    helpers.wait_until(function() return lib.rmq_devbroker_count(db, cons.ALL, ACK) > 0 end, 30,
      "ACK_MESSAGE sent")
    -- PopMessageRequestHeader, field by field
    local n = lib.rmq_devbroker_count(db, cons.ALL, POP)
    local i = n - 1
    assert.equal("g5sw", ext(db, POP, i, "consumerGroup"))
    assert.equal("T5sw", ext(db, POP, i, "topic"))
    assert.equal("-1", ext(db, POP, i, "queueId"))
    assert.equal("32", ext(db, POP, i, "maxMsgNums"))
    assert.equal("60000", ext(db, POP, i, "invisibleTime"))
    assert.equal("15000", ext(db, POP, i, "pollTime"))
    assert.truthy(tonumber(ext(db, POP, i, "bornTime")) > 1.6e12)
    assert.equal("0", ext(db, POP, i, "initMode")) -- CONSUME_FROM_FIRST_OFFSET: MIN
    assert.equal("TAG", ext(db, POP, i, "expType"))
    assert.equal("*", ext(db, POP, i, "exp"))
    assert.equal("false", ext(db, POP, i, "order"))
    -- AckMessageRequestHeader: extraInfo as ExtraInfoUtil.buildExtraInfo, offset its last field
    local info = assert(ext(db, ACK, 0, "extraInfo"))
    local f = {}
    for w in info:gmatch("%S+") do f[#f + 1] = w end
    assert.equal(8, #f)
    assert.equal("60000", f[3])
    assert.equal("0", f[5])
    assert.equal("broker-a", f[6])
    assert.equal(f[7], ext(db, ACK, 0, "queueId"))
    assert.equal(f[8], ext(db, ACK, 0, "offset"))
    assert.equal("g5sw", ext(db, ACK, 0, "consumerGroup"))
    assert.equal("T5sw", ext(db, ACK, 0, "topic"))
    -- and back to PULL
    set_mode(db, "T5sw", "g5sw", "PULL")
    local pulls = lib.rmq_devbroker_count(db, cons.ALL, 11)
    helpers.wait_until(function() return lib.rmq_devbroker_count(db, cons.ALL, 11) > pulls + 4 end,
      60, "pulling again")
    cons.produce(db, "T5sw", 100, "s")
    helpers.wait_until(function() return select(2, consumed({out})) == 400 end, 60,
      "PULL mode again, nothing lost")
    cons.stop(pid)
    assert.equal(0, cons.exit_code(dir .. "/run.log"), "a clean stop")
  end)

  it("an orderly consumer allocates on the client and pulls by default, as the Java 5.3.3 client",
    function()
    -- RebalancePushImpl.clientRebalance: orderly always allocates on the client, whatever the
    -- broker's mode for the group says; with client_rebalance = false rmqlua pops it in order
    -- (pop_orderly_spec), with the default (true) it behaves as Java.
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5ord:4")
    set_mode(db, "T5ord", "g5ord", "POP")
    local dir = cons.tmpdir("pop-ord")
    cons.fill_queues(db, "T5ord", 4, 25)
    local out = dir .. "/out.txt"
    local pid = cons.spawn(cons.script(dir, { group = "g5ord", ns = ns, topic = "T5ord", out = out,
      orderly = true, extra = "consume_thread_min = 2, consume_thread_max = 2," }),
      dir .. "/run.log")
    helpers.wait_until(function() return select(2, consumed({out})) == 100 end, 60,
      "every message consumed")
    cons.stop(pid)
    assert.equal(0, cons.exit_code(dir .. "/run.log"), "a clean stop")
    local last = {}
    for _, r in ipairs(cons.records(out)) do
      local q, i = r.body:match("^q(%d+)_(%d+)$")
      q, i = tonumber(q), tonumber(i)
      assert.is_true(i > (last[q] or 0), "queue " .. q .. " in order at " .. r.body)
      last[q] = i
    end
    assert.same({ [0] = 25, 25, 25, 25 }, last)
    assert.equal(0, lib.rmq_devbroker_count(db, cons.ALL, QUERY_ASSIGNMENT))
    assert.equal(0, lib.rmq_devbroker_count(db, cons.ALL, POP))
    assert.is_true(lib.rmq_devbroker_count(db, cons.ALL, 41 --[[LOCK_BATCH_MQ]]) >= 1)
    assert.is_true(lib.rmq_devbroker_count(db, cons.ALL, 11 --[[PULL_MESSAGE]]) >= 1)
  end)

  it("gives more consumers than queues all messages in POP mode", function()
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5many:1")
    set_mode(db, "T5many", "g5many", "POP")
    local dir = cons.tmpdir("pop-many")
    local outs, pids = {}, {}
    for i = 1, 3 do
      outs[i] = dir .. "/out" .. i .. ".txt"
      -- one message per POP, so that the three share the single queue's messages
      pids[i] = cons.spawn(script(dir, "c" .. i, "g5many", ns, "T5many", outs[i],
        "pop_batch_nums = 1,", "rmq.sleep(0.02)"), dir .. "/run" .. i .. ".log")
    end
    helpers.wait_until(function() return lib.rmq_devbroker_group_size(db, 0, "g5many") == 3 end,
      30, "three consumers registered")
    helpers.wait_until(function() return lib.rmq_devbroker_count(db, cons.ALL, POP) >= 3 end, 30,
      "pops in flight")
    cons.produce(db, "T5many", 300, "m")
    helpers.wait_until(function() return select(2, consumed(outs)) == 300 end, 60,
      "every message consumed")
    for i = 1, 3 do
      assert.is_true(#cons.records(outs[i]) > 0, "consumer " .. i .. " got messages")
    end
    for i = 1, 3 do
      cons.stop(pids[i])
      assert.equal(0, cons.exit_code(dir .. "/run" .. i .. ".log"), "a clean stop")
    end
  end)

  it("stops popping while pop_threshold_for_queue messages wait for their ack", function()
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5thr:1")
    set_mode(db, "T5thr", "g5thr", "POP")
    local dir = cons.tmpdir("pop-thr")
    local out, marks = dir .. "/out.txt", dir .. "/marks.txt"
    cons.produce(db, "T5thr", 24, "h")
    -- eight threads, one message per POP: without the threshold eight handlers would run at once
    local pid = cons.spawn(script(dir, "c", "g5thr", ns, "T5thr", out,
      "consume_thread_min = 8, consume_thread_max = 8, pop_batch_nums = 1, " ..
      "pop_threshold_for_queue = 2,",
      string.format([[local f = io.open(%q, "a"); f:write("+\n"); f:close()
        rmq.sleep(0.2)
        f = io.open(%q, "a"); f:write("-\n"); f:close()]], marks, marks)), dir .. "/run.log")
    helpers.wait_until(function() return select(2, consumed({out})) == 24 end, 60,
      "every message consumed")
    -- Java pops while the waiting count is not above the threshold: at most threshold + 1
    local cur, max = 0, 0
    for _, l in ipairs(cons.lines(marks)) do
      cur = cur + (l == "+" and 1 or -1)
      if cur > max then max = cur end
    end
    assert.is_true(max >= 2, "handlers ran side by side: " .. max)
    assert.is_true(max <= 3, "at most pop_threshold_for_queue + 1 waiting: " .. max)
    cons.stop(pid)
    assert.equal(0, cons.exit_code(dir .. "/run.log"), "a clean stop")
  end)

  it("pops with the subscription's SQL92 expression and tags", function()
    local rh = require "run_helpers"
    local db, ns = cons.test_broker("--rocketmq-version 5 --enable-property-filter " ..
      "--topic T5sql:1 --topic T5tag:1")
    set_mode(db, "T5sql", "g5sql", "POP")
    set_mode(db, "T5tag", "g5sql", "POP")
    for i = 1, 10 do
      rh.produce_props(db, "T5sql", 0, "s" .. i, { n = tostring(i) })
      rh.produce_props(db, "T5tag", 0, "t" .. i, {}, i % 2 == 0 and "TagA" or "TagB")
    end
    local dir = cons.tmpdir("pop-sql")
    local out = dir .. "/out.txt"
    local src = string.format([[
local rmq = require "rmq"
local out = assert(io.open(%q, "a"))
out:setvbuf("no")
return {
  consumer_group = "g5sql", namesrv_addr = %q, client_rebalance = false,
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  subscribe = { T5sql = rmq.sql92("n > 5"), T5tag = "TagA" },
  consume = function(msgs)
    -- one write per record: the consume threads append to the same file
    for i = 1, #msgs do out:write(msgs[i].body .. " " .. msgs[i].topic .. "\n") end
  end,
}
]], out, ns)
    local pid = cons.spawn(rh.write(dir, "c.lua", src), dir .. "/run.log")
    local want = { "s10", "s6", "s7", "s8", "s9", "t10", "t2", "t4", "t6", "t8" }
    local got
    helpers.wait_until(function()
      got = {}
      for _, l in ipairs(cons.lines(out)) do got[#got + 1] = l:match("^(%S+)") end
      table.sort(got)
      return #got >= #want
    end, 60, "the matching messages consumed")
    assert.same(want, got)
    local seen = {}
    for i = 0, lib.rmq_devbroker_count(db, cons.ALL, POP) - 1 do
      local t = ext(db, POP, i, "topic")
      seen[t] = { ext(db, POP, i, "expType"), ext(db, POP, i, "exp"), ext(db, POP, i, "bname") }
    end
    assert.same({ "SQL92", "n > 5", "broker-a" }, seen.T5sql)
    assert.same({ "TAG", "TagA", "broker-a" }, seen.T5tag)
    cons.stop(pid)
    assert.equal(0, cons.exit_code(dir .. "/run.log"), "a clean stop")
  end)

  it("holds POP_MESSAGE to consume_tps_limit as it holds pulls", function()
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5tps:2")
    set_mode(db, "T5tps", "g5tps", "POP")
    local dir = cons.tmpdir("pop-tps")
    local out = dir .. "/out.txt"
    cons.produce(db, "T5tps", 30, "t")
    local pid = cons.spawn(script(dir, "c", "g5tps", ns, "T5tps", out, "consume_tps_limit = 10,"),
      dir .. "/run.log")
    helpers.wait_until(function() return select(2, consumed({out})) == 30 end, 60,
      "every message consumed")
    local n = lib.rmq_devbroker_count(db, cons.ALL, POP)
    assert.is_true(n >= 3)
    for i = 0, n - 1 do
      assert.is_true(tonumber(ext(db, POP, i, "maxMsgNums")) <= 10, "POP " .. i)
    end
    cons.stop(pid)
    assert.equal(0, cons.exit_code(dir .. "/run.log"), "a clean stop")
  end)

  it("pops the queues of its share with popShareQueueNum", function()
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5share:4")
    set_mode(db, "T5share", "g5share", "POP", 1)
    local dir = cons.tmpdir("pop-share")
    local outs, pids = { dir .. "/out1.txt", dir .. "/out2.txt" }, {}
    for i = 1, 2 do
      pids[i] = cons.spawn(script(dir, "c" .. i, "g5share", ns, "T5share", outs[i]),
        dir .. "/run" .. i .. ".log")
    end
    helpers.wait_until(function() return lib.rmq_devbroker_group_size(db, 0, "g5share") == 2 end,
      30, "two consumers registered")
    cons.produce(db, "T5share", 100, "x")
    helpers.wait_until(function() return select(2, consumed(outs)) == 100 end, 60,
      "every message consumed")
    -- each POP names one queue of the client's share (and its neighbour's), never -1
    local n = lib.rmq_devbroker_count(db, cons.ALL, POP)
    local qids = {}
    for i = 0, n - 1 do qids[ext(db, POP, i, "queueId")] = true end
    assert.is_nil(qids["-1"])
    assert.same({ ["0"] = true, ["1"] = true, ["2"] = true, ["3"] = true }, qids)
    -- the acks name the queue the message came from
    for i = 0, lib.rmq_devbroker_count(db, cons.ALL, ACK) - 1 do
      local f = {}
      for w in assert(ext(db, ACK, i, "extraInfo")):gmatch("%S+") do f[#f + 1] = w end
      assert.equal(f[7], ext(db, ACK, i, "queueId"))
    end
    for i = 1, 2 do
      cons.stop(pids[i])
      assert.equal(0, cons.exit_code(dir .. "/run" .. i .. ".log"), "a clean stop")
    end
  end)

  it("delivers a killed POP consumer's un-acked messages to another after the invisible time",
    function()
      local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5kill:2")
      set_mode(db, "T5kill", "g5kill", "POP")
      local dir = cons.tmpdir("pop-kill")
      local out1, out2 = dir .. "/out1.txt", dir .. "/out2.txt"
      cons.produce(db, "T5kill", 20, "k")
      -- the first consumer never comes back from its handler
      local pid1 = cons.spawn(script(dir, "c1", "g5kill", ns, "T5kill", out1,
        "pop_invisible_time = 5000, pop_batch_nums = 4,", "rmq.sleep(3600)"), dir .. "/run1.log")
      helpers.wait_until(function() return #cons.records(out1) >= 1 end, 30, "first consumer popped")
      cons.stop(pid1, "KILL")
      local pid2 = cons.spawn(script(dir, "c2", "g5kill", ns, "T5kill", out2,
        "pop_invisible_time = 5000,"), dir .. "/run2.log")
      helpers.wait_until(function() return select(2, consumed({out2})) == 20 end, 60,
        "every message consumed by the second")
      -- those the first had popped came back from the retry topic with their count raised
      local first = {}
      for _, r in ipairs(cons.records(out1)) do first[r.body] = true end
      for _, r in ipairs(cons.records(out2)) do
        if first[r.body] then
          assert.equal("T5kill", r.topic)
          assert.is_true(r.rt >= 1, r.body .. " reconsume count")
        end
      end
      cons.stop(pid2)
      assert.equal(0, cons.exit_code(dir .. "/run2.log"), "a clean stop")
    end)

  it("does not run a popped batch whose invisible time passed while it waited", function()
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5late:1")
    set_mode(db, "T5late", "g5late", "POP")
    local dir = cons.tmpdir("pop-late")
    local out = dir .. "/out.txt"
    cons.produce(db, "T5late", 2, "w")
    -- one thread, both messages in one POP: w1 holds the thread past the invisible time (a
    -- blocking sleep), so w2 waits too long and is left to the broker (isPopTimeout)
    local pid = cons.spawn(script(dir, "c", "g5late", ns, "T5late", out,
      "consume_thread_min = 1, consume_thread_max = 1, pop_batch_nums = 2, " ..
      "pop_invisible_time = 5000,",
      'if msgs[1].body == "w1" and msgs[1].reconsume_times == 0 then os.execute("sleep 7") end'),
      dir .. "/run.log")
    helpers.wait_until(function()
      for _, r in ipairs(cons.records(out)) do
        if r.body == "w2" and r.rt >= 1 then return true end
      end
    end, 60, "w2 delivered again")
    for _, r in ipairs(cons.records(out)) do
      assert.is_false(r.body == "w2" and r.rt == 0, "w2 ran after its invisible time")
    end
    assert.matches("1 message(s) not consumed: their invisible time passed",
      cons.read(dir .. "/run.log"), 1, true)
    cons.stop(pid)
    assert.equal(0, cons.exit_code(dir .. "/run.log"), "a clean stop")
  end)

  it("changes the invisible time for RECONSUME_LATER: consumed again, count raised", function()
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5later:1")
    set_mode(db, "T5later", "g5later", "POP")
    local dir = cons.tmpdir("pop-later")
    local out = dir .. "/out.txt"
    cons.produce(db, "T5later", 3, "l")
    local pid = cons.spawn(script(dir, "c", "g5later", ns, "T5later", out, nil,
      "if msgs[1].reconsume_times == 0 then return rmq.RECONSUME_LATER end"), dir .. "/run.log",
      "--metrics 127.0.0.1:0")
    local url = cons.metrics_url(dir .. "/run.log")
    helpers.wait_until(function() return #cons.records(out) >= 3 end, 30, "first deliveries")
    helpers.wait_until(function()
      return lib.rmq_devbroker_count(db, cons.ALL, CHANGE_INVISIBLE) >= 3 end, 30,
      "CHANGE_MESSAGE_INVISIBLETIME sent")
    -- ChangeInvisibleTimeRequestHeader: delay level 0 of a first delivery is popDelayLevel[0]
    assert.equal("10000", ext(db, CHANGE_INVISIBLE, 0, "invisibleTime"))
    assert.equal("g5later", ext(db, CHANGE_INVISIBLE, 0, "consumerGroup"))
    assert.equal("T5later", ext(db, CHANGE_INVISIBLE, 0, "topic"))
    assert.equal("0", ext(db, CHANGE_INVISIBLE, 0, "queueId"))
    local info = assert(ext(db, CHANGE_INVISIBLE, 0, "extraInfo"))
    assert.equal(info:match("(%d+)$"), ext(db, CHANGE_INVISIBLE, 0, "offset"))
    helpers.wait_until(function()
      local again = 0
      for _, r in ipairs(cons.records(out)) do
        if r.rt >= 1 then
          again = again + 1
          assert.equal("T5later", r.topic)
        end
      end
      return again >= 3
    end, 60, "consumed again with the reconsume count raised")
    -- the status line's figures in /stats and /metrics: 6 deliveries, 3 changes, 3 acks
    local st
    helpers.wait_until(function()
      st = cjson.decode(assert(cons.scrape(url .. "/stats")).body).totals
      return st.pop_acks == 3
    end, 30, "the acks counted")
    assert.equal(6, st.popped)
    assert.equal(3, st.pop_invisible_time_changes)
    assert.equal(3, st.consumed)
    assert.equal(3, st.failed)
    local fam = {}
    for _, f in pairs(assert(cons.scrape(url .. "/metrics")).families) do
      for _, smp in ipairs(f.samples) do fam[smp.name] = (fam[smp.name] or 0) + smp.value end
    end
    assert.equal(6, fam.rmqlua_popped_messages_total)
    assert.equal(3, fam.rmqlua_pop_acks_total)
    assert.equal(3, fam.rmqlua_pop_invisible_time_changes_total)
    cons.stop(pid)
    assert.equal(0, cons.exit_code(dir .. "/run.log"), "a clean stop")
  end)

  it("consumes in PULL mode what POP left in the POP retry topic after a switch back", function()
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5back:1")
    set_mode(db, "T5back", "g5back", "POP")
    local dir = cons.tmpdir("pop-back")
    local out = dir .. "/out.txt"
    cons.produce(db, "T5back", 2, "b")
    -- each message is consumed again 30 s later (delay level 1); meanwhile the group goes back
    -- to PULL (the next rebalance, within 20 s)
    local pid = cons.spawn(script(dir, "c", "g5back", ns, "T5back", out, nil,
      "if msgs[1].reconsume_times == 0 then ctx.delay_level = 1; return rmq.RECONSUME_LATER end"),
      dir .. "/run.log")
    helpers.wait_until(function()
      return lib.rmq_devbroker_count(db, cons.ALL, CHANGE_INVISIBLE) >= 2 end, 30,
      "CHANGE_MESSAGE_INVISIBLETIME sent")
    assert.equal("30000", ext(db, CHANGE_INVISIBLE, 0, "invisibleTime"))
    set_mode(db, "T5back", "g5back", "PULL")
    -- revived into %RETRY%g5back_T5back, pulled from there with the count raised
    helpers.wait_until(function()
      local again = {}
      for _, r in ipairs(cons.records(out)) do
        if r.rt >= 1 then again[r.body] = r end
      end
      return again.b1 and again.b2 and true
    end, 90, "consumed again in PULL mode")
    local pulled_retry = false
    for i = 0, lib.rmq_devbroker_count(db, cons.ALL, 11) - 1 do
      if ext(db, 11, i, "topic") == "%RETRY%g5back_T5back" then pulled_retry = true end
    end
    assert.is_true(pulled_retry, "PULL_MESSAGE of the POP retry topic")
    cons.stop(pid)
    assert.equal(0, cons.exit_code(dir .. "/run.log"), "a clean stop")
  end)

  it("refuses a reload that changes client_rebalance", function()
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5rl:1")
    local dir = cons.tmpdir("pop-reload")
    local out, log = dir .. "/out.txt", dir .. "/run.log"
    local s = script(dir, "c", "g5rl", ns, "T5rl", out)
    local pid = cons.spawn(s, log)
    cons.produce(db, "T5rl", 1, "r")
    helpers.wait_until(function() return #cons.records(out) == 1 end, 30, "consumed")
    local src = cons.read(s):gsub("client_rebalance = false", "client_rebalance = true")
    local f = assert(io.open(s, "w"))
    f:write(src)
    f:close()
    os.execute("kill -HUP " .. pid)
    helpers.wait_until(function()
      return cons.read(log):find("client_rebalance cannot change while the consumer runs", 1, true)
    end, 30, "the reload refused")
    cons.produce(db, "T5rl", 1, "s")
    helpers.wait_until(function() return #cons.records(out) == 2 end, 30,
      "the previous version consuming")
    assert.equal(0, lib.rmq_devbroker_count(db, cons.ALL, POP))
    cons.stop(pid)
    assert.equal(0, cons.exit_code(log), "a clean stop")
  end)

  it("falls back to the client-side allocation against a 4.x broker with one log line",
    function()
      local db, ns = cons.test_broker("--topic T4fb:2")
      local dir = cons.tmpdir("pop-4x")
      local out, log = dir .. "/out.txt", dir .. "/run.log"
      cons.produce(db, "T4fb", 50, "f")
      local pid = cons.spawn(script(dir, "c", "g4fb", ns, "T4fb", out), log)
      helpers.wait_until(function() return select(2, consumed({out})) == 50 end, 60,
        "every message consumed")
      assert.is_true(lib.rmq_devbroker_count(db, cons.ALL, QUERY_ASSIGNMENT) >= 1)
      cons.stop(pid)
      assert.equal(0, cons.exit_code(log), "a clean stop")
      local n = 0
      for _, l in ipairs(cons.lines(log)) do
        if l:find("does not know QUERY_ASSIGNMENT", 1, true) then n = n + 1 end
      end
      assert.equal(1, n)
    end)
end)
