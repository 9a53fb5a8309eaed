-- mqadmin's resetOffsetByTime and consumer status against a running consumer, through the
-- development broker (INVOKE_BROKER_TO_RESET_OFFSET -> RESET_CONSUMER_CLIENT_OFFSET,
-- INVOKE_BROKER_TO_GET_CONSUMER_STATUS -> GET_CONSUMER_STATUS_FROM_CLIENT): the consumer answers
-- with its in-memory offsets, and a reset drops its queues, writes the new offsets after the
-- pause (MQClientInstance.resetOffset) and consumes the same messages again.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local raw = dofile(helpers.root .. "/spec/02-integration/02-producer/rawmq.lua")
local lib = cons.lib

-- 6 write queues, 4 read queues: the reset table covers the write queues, the consumer holds
-- only the 4 readable ones.
local TOPIC, GROUP, QUEUES, WRITE_QUEUES, N = "ResetTopic", "g_reset", 4, 6, 20
local CREATE_TOPIC, UPDATE_OFF, INVOKE_RESET, INVOKE_STATUS = 17, 15, 222, 223

local function mq_key(q)
  return string.format('{"brokerName":"broker-a","queueId":%d,"topic":"%s"}', q, TOPIC)
end

describe("consumer: offsets reset by the broker", function()
  local db, ns, dir
  lazy_setup(function()
    db, ns = cons.start_broker()
    dir = cons.tmpdir("reset")
    local baddr = cons.broker_addr(db)
    local r = assert(raw.request(baddr, CREATE_TOPIC, { topic = TOPIC, readQueueNums = "4",
      writeQueueNums = "6", perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0",
      order = "false", defaultTopic = "TBW102" }))
    assert.equal(0, r.code, r.remark)
  end)
  lazy_teardown(function()
    raw.close_all()
    if db then lib.rmq_devbroker_stop(db) end
  end)

  it("answers its offsets and consumes again from the reset point", function()
    local before = (os.time() - 2) * 1000 -- earlier than every message below
    for i = 1, N do
      local body = "r" .. i
      assert(lib.rmq_devbroker_produce(db, 0, TOPIC, i % QUEUES, nil, nil, body, #body) >= 0)
    end
    local baddr = cons.broker_addr(db)
    -- the queues nobody reads have committed offsets too (the broker needs one per write queue)
    for q = QUEUES, WRITE_QUEUES - 1 do
      assert.equal(0, assert(raw.request(baddr, UPDATE_OFF, { consumerGroup = GROUP,
        topic = TOPIC, queueId = tostring(q), commitOffset = "5" })).code)
    end
    local out = dir .. "/out.txt"
    local s = cons.script(dir, { group = GROUP, ns = ns, topic = TOPIC, out = out })
    local log = dir .. "/run.log"
    local pid = cons.spawn(s, log)
    helpers.wait_until(function() return cons.count_lines(out) >= N end, 60, "consumed once")
    helpers.wait_until(function() return (cons.all_committed(db, GROUP, TOPIC, QUEUES)) end, 30,
      "offsets committed")
    local cid = helpers.wait_until(function() return cons.read(log):match("started as (%S+)") end,
      10, "clientId in the log")

    -- GET_CONSUMER_STATUS_FROM_CLIENT: the in-memory offsets of the topic, under the client id
    local r = assert(raw.request(baddr, INVOKE_STATUS, { topic = TOPIC, group = GROUP }))
    assert.equal(0, r.code, r.remark)
    -- only the asked topic, in the HashMap order of the MessageQueue keys (2, 1, 3, 0 here)
    local t = {}
    for _, q in ipairs({2, 1, 3, 0}) do
      t[#t + 1] = mq_key(q) .. ":" .. tonumber(lib.rmq_devbroker_max_offset(db, 0, TOPIC, q))
    end
    assert.equal('{"consumerTable":{"' .. cid .. '":{' .. table.concat(t, ",") ..
      '}},"messageQueueTable":{}}', r.body)

    -- reset to a time before the first message: everything is consumed a second time
    r = assert(raw.request(baddr, INVOKE_RESET, { topic = TOPIC, group = GROUP,
      timestamp = tostring(before), isForce = "false" }))
    assert.equal(0, r.code, r.remark)
    -- in java.util.HashMap order of the MessageQueue keys
    t = {}
    for _, q in ipairs({5, 2, 1, 4, 3, 0}) do t[#t + 1] = mq_key(q) .. ":0" end
    assert.equal('{"offsetTable":{' .. table.concat(t, ",") .. "}}", r.body)
    -- paused until the offsets are written: a pull answered meanwhile is consumed, but no new
    -- pull goes out (the retry queue's next message waits for the resume)
    helpers.wait_until(function() return cons.read(log):find("broker asked to reset", 1, true) end,
      10, "reset received")
    local function consumed(body)
      for _, rec in ipairs(cons.records(out)) do if rec.body == body then return true end end
      return false
    end
    local retry = "%RETRY%" .. GROUP
    assert(lib.rmq_devbroker_produce(db, 0, retry, 0, nil, nil, "x1", 2) >= 0)
    helpers.wait_until(function() return consumed("x1") end, 30, "x1 from the parked pull")
    assert(lib.rmq_devbroker_produce(db, 0, retry, 0, nil, nil, "x2", 2) >= 0)
    helpers.wait_until(function() return consumed("x2") end, 60, "x2 after the resume")
    assert.truthy(cons.read(log):find("consumer resumed", 1, true), "x2 pulled while paused")
    helpers.wait_until(function() return cons.count_lines(out) >= 2 * N + 2 end, 60,
      "consumed again")
    helpers.wait_until(function() return (cons.all_committed(db, GROUP, TOPIC, QUEUES)) end, 30,
      "offsets committed again")
    cons.stop(pid)
    assert.equal(0, cons.exit_code(log))
    local seen = {}
    for _, rec in ipairs(cons.records(out)) do seen[rec.body] = (seen[rec.body] or 0) + 1 end
    for i = 1, N do assert.equal(2, seen["r" .. i], "r" .. i) end
    assert.truthy(cons.read(log):find("reset 6 queue offset(s) of " .. TOPIC, 1, true))
    -- only the queues the consumer held were written (MQClientInstance.resetOffset)
    for q = QUEUES, WRITE_QUEUES - 1 do
      assert.equal(5, tonumber(lib.rmq_devbroker_committed_offset(db, 0, GROUP, TOPIC, q)))
    end
  end)
end)
