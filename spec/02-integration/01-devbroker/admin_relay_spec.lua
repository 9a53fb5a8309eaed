-- The development broker as a 4.9.4 broker for mqadmin's offset reset and consumer status
-- (AdminBrokerProcessor -> Broker2Client): INVOKE_BROKER_TO_RESET_OFFSET (222) computes the
-- table and sends RESET_CONSUMER_CLIENT_OFFSET (220) to the group's clients,
-- INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223) gathers GET_CONSUMER_STATUS_FROM_CLIENT (221)
-- answers; and PullRequestHoldService's periodic check of parked pulls.
local helpers = require "helpers"
local wire = require "02-integration.01-devbroker.wire"
local ffi = require "ffi"

local PULL, UPDATE_OFF, HEARTBEAT = 11, 15, 34
local RESET_CLIENT, STATUS_CLIENT, INVOKE_RESET, INVOKE_STATUS = 220, 221, 222, 223

describe("devbroker: admin relays", function()
  local db, _, lib, baddr, bname

  wire.describe_broker("--topic Trst:2 --topic Tsta:1 --topic Thold:1", function(t)
    db, lib = t.db, t.lib
    baddr = wire.broker_addr(db, 0)
    bname = ffi.string(lib.rmq_devbroker_broker_name(db, 0))
  end)

  local function conn() return assert(wire.connect(baddr)) end

  -- The next broker request on c, past NOTIFY_CONSUMER_IDS_CHANGED (sent when a client joins).
  local function next_req(c, timeout)
    while true do
      local f, err = c:read_frame(timeout or 5)
      if not f or f.code ~= 40 then return f, err end
    end
  end

  local function mq(topic, qid)
    return string.format('{"brokerName":"%s","queueId":%d,"topic":"%s"}', bname, qid, topic)
  end

  local function consumer(client_id, group, topic)
    local c = conn()
    local body = wire.heartbeat_body(client_id, group, {{topic = topic, sub = "*"}})
    assert.equal(0, assert(c:request(HEARTBEAT, nil, body)).code)
    return c
  end

  local function commit(c, group, topic, qid, off)
    assert.equal(0, assert(c:request(UPDATE_OFF, {consumerGroup = group, topic = topic,
      queueId = tostring(qid), commitOffset = tostring(off)})).code)
  end

  local function reset(a, group, topic, ts, force, opts)
    return assert(a:request(INVOKE_RESET, {topic = topic, group = group, timestamp = tostring(ts),
      isForce = force and "true" or "false"}, nil, opts))
  end

  it("resets offsets: table per write queue, RESET_CONSUMER_CLIENT_OFFSET to each client", function()
    for _ = 1, 3 do assert(lib.rmq_devbroker_produce(db, 0, "Trst", 0, nil, nil, "x", 1) >= 0) end
    for _ = 1, 2 do assert(lib.rmq_devbroker_produce(db, 0, "Trst", 1, nil, nil, "y", 1) >= 0) end
    local a = conn()
    local c1 = consumer("cid-1", "g_rst", "Trst")
    local c2 = consumer("cid-2", "g_rst", "Trst")
    helpers.defer(function() a:close(); c1:close(); c2:close() end)

    -- no committed offsets yet
    local r = reset(a, "g_rst", "Trst", 0, false)
    assert.equal(1, r.code)
    assert.equal("THe consumer group <g_rst> not exist", r.remark)
    r = reset(a, "g_rst", "NoSuchTopic", 0, false)
    assert.equal(1, r.code)
    assert.equal("[reset-offset] reset offset failed, no topic in this broker. topic=NoSuchTopic",
      r.remark)

    commit(a, "g_rst", "Trst", 0, 3)
    commit(a, "g_rst", "Trst", 1, 1)
    -- timestamp 0: the first offsets (smaller than the committed ones)
    r = reset(a, "g_rst", "Trst", 0, false)
    assert.equal(0, r.code)
    -- java.util.HashMap order of the MessageQueue keys (as in the GET_CONSUME_STATS answer of
    -- spec/fixtures/wire/04_consumer_status): queue 1 before queue 0 for this topic
    local want = "{\"offsetTable\":{" .. mq("Trst", 1) .. ":0," .. mq("Trst", 0) .. ":0}}"
    assert.equal(want, r.body)
    for _, c in ipairs({c1, c2}) do
      local f = assert(next_req(c))
      assert.equal(RESET_CLIENT, f.code)
      assert.equal(2, f.flag) -- oneway
      assert.same({topic = "Trst", group = "g_rst", timestamp = "0", isForce = "false"},
        f.extFields)
      assert.equal(want, f.body)
    end

    -- -1: the max offsets, but not past a smaller committed offset unless forced
    r = reset(a, "g_rst", "Trst", -1, false)
    local unforced = "{\"offsetTable\":{" .. mq("Trst", 1) .. ":1," .. mq("Trst", 0) .. ":3}}"
    assert.equal(unforced, r.body)
    r = reset(a, "g_rst", "Trst", -1, true)
    want = "{\"offsetTable\":{" .. mq("Trst", 1) .. ":2," .. mq("Trst", 0) .. ":3}}"
    assert.equal(want, r.body)
    for _, c in ipairs({c1, c2}) do
      assert.equal(unforced, assert(next_req(c)).body)
    end
    for _, c in ipairs({c1, c2}) do
      local f = assert(next_req(c))
      assert.equal("-1", f.extFields.timestamp)
      assert.equal("false", f.extFields.isForce) -- the broker never forwards isForce
      assert.equal(want, f.body)
    end

    -- an admin tool speaking CPP makes the clients get ResetOffsetBodyForC
    r = reset(a, "g_rst", "Trst", 0, false, {language = "CPP"})
    assert.equal("{\"offsetTable\":{" .. mq("Trst", 1) .. ":0," .. mq("Trst", 0) .. ":0}}", r.body)
    local f = assert(next_req(c1))
    assert.equal(string.format('{"offsetTable":[{"brokerName":"%s","offset":0,"queueId":1,' ..
      '"topic":"Trst"},{"brokerName":"%s","offset":0,"queueId":0,"topic":"Trst"}]}', bname, bname),
      f.body)
  end)

  it("answers CONSUMER_NOT_ONLINE when the group has no client", function()
    local a = conn()
    helpers.defer(function() a:close() end)
    commit(a, "g_gone", "Trst", 0, 1)
    commit(a, "g_gone", "Trst", 1, 1)
    local r = reset(a, "g_gone", "Trst", 0, false)
    assert.equal(206, r.code)
    assert.equal("Consumer not online, so can not reset offset, Group: g_gone Topic: Trst " ..
      "Timestamp: 0", r.remark)
  end)

  it("gathers GET_CONSUMER_STATUS_FROM_CLIENT answers by client id", function()
    local a = conn()
    local c1 = consumer("cid-s1", "g_sta", "Tsta")
    local c2 = consumer("cid-s2", "g_sta", "Tsta")
    helpers.defer(function() a:close(); c1:close(); c2:close() end)
    local op = a:send_request(INVOKE_STATUS, {topic = "Tsta", group = "g_sta"})
    local answered = {}
    for i, c in ipairs({c1, c2}) do
      local f = assert(next_req(c))
      assert.equal(STATUS_CLIENT, f.code)
      assert.equal("Tsta", f.extFields.topic)
      assert.equal("g_sta", f.extFields.group)
      if i == 1 then
        local body = "{\"consumerTable\":{},\"messageQueueTable\":{" .. mq("Tsta", 0) .. ":7}}"
        assert(c:send_raw(wire.encode(0, nil, body, {flag = 1, opaque = f.opaque})))
        answered[#answered + 1] = '"cid-s1":{' .. mq("Tsta", 0) .. ':7}'
      else
        -- an error answer is left out
        assert(c:send_raw(wire.encode(1, nil, nil, {flag = 1, opaque = f.opaque})))
      end
    end
    local r = assert(a:wait_response(op, 10))
    assert.equal(0, r.code)
    assert.equal("{\"consumerTable\":{" .. table.concat(answered, ",") ..
      "},\"messageQueueTable\":{}}", r.body)

    -- clientAddr picks one client (by client id)
    op = a:send_request(INVOKE_STATUS, {topic = "Tsta", group = "g_sta", clientAddr = "cid-s2"})
    local f = assert(next_req(c2))
    assert.equal(STATUS_CLIENT, f.code)
    local body = "{\"consumerTable\":{},\"messageQueueTable\":{" .. mq("Tsta", 0) .. ":5}}"
    assert(c2:send_raw(wire.encode(0, nil, body, {flag = 1, opaque = f.opaque})))
    r = assert(a:wait_response(op, 10))
    assert.equal("{\"consumerTable\":{\"cid-s2\":{" .. mq("Tsta", 0) .. ":5}},\"messageQueueTable\":{}}",
      r.body)
    local none, err = next_req(c1, 0.3)
    assert.is_nil(none)
    assert.equal("timeout", err)

    r = assert(a:request(INVOKE_STATUS, {topic = "Tsta", group = "g_nobody"}))
    assert.equal(1, r.code)
  end)

  it("re-runs a parked pull when only filtered messages arrived (hold service check)", function()
    local c = conn()
    helpers.defer(function() c:close() end)
    -- the suspend time is far longer than the wait below: only the periodic check can answer
    local op = c:send_request(PULL, wire.pull_ext("g_hold", "Thold", 0, 0,
      {sys_flag = 6, subscription = "TagA", suspend = 600000}))
    assert.equal(1, lib.rmq_devbroker_wait(db, 0, PULL, 1, 5000) >= 1 and 1 or 0)
    for _ = 1, 3 do assert(lib.rmq_devbroker_produce(db, 0, "Thold", 0, "TagB", nil, "b", 1) >= 0) end
    local r = assert(c:wait_response(op, math.min(30 * helpers.scale, 300)))
    assert.equal(20, r.code) -- PULL_RETRY_IMMEDIATELY
    assert.equal("NO_MATCHED_MESSAGE", r.remark)
    assert.equal("3", r.extFields.nextBeginOffset)
    assert.equal("", r.body)
  end)
end)
