-- Message trace (enable_msg_trace; Java's ConsumeMessageTraceHookImpl over AsyncTraceDispatcher):
-- a consumer with trace on sends a SubBefore and a SubAfter record for every message it consumed
-- to the trace topic, with the message ids and keys as the trace messages' keys. The records are
-- read back from the development broker (by `rmqlua tail` and by QUERY_MESSAGE on a message id,
-- what `mqadmin QueryMsgTraceById` sends) and checked field by field; a trace topic whose sends
-- are never answered costs consumption nothing.
local helpers = require "helpers"
local cjson = require "cjson.safe"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local wire = require "02-integration.01-devbroker.wire"

local TOPIC, GROUP = "TraceT", "g_trace"
local N = 30
local QUERY = 12

local function split(s, sep)
  local out, i = {}, 1
  while true do
    local j = s:find(sep, i, true)
    if not j then
      out[#out + 1] = s:sub(i)
      return out
    end
    out[#out + 1] = s:sub(i, j - 1)
    i = j + 1
  end
end

-- Every record of the trace topic's messages: { fields..., msg_keys = the trace message's keys }.
local function trace_records(ns, topic)
  local p = io.popen(string.format("%s tail %s --namesrv %s --from first -e --json 2>/dev/null",
    helpers.bin, topic, ns))
  local recs, msgs = {}, 0
  for line in p:lines() do
    local m = cjson.decode(line)
    if m then
      msgs = msgs + 1
      for _, r in ipairs(split(m.body, "\2")) do
        if r ~= "" then
          local f = split(r, "\1")
          f.msg_keys = m.keys
          recs[#recs + 1] = f
        end
      end
    end
  end
  p:close()
  return recs, msgs
end

local function produce(db)
  local lib = cons.lib
  for i = 1, N do
    local body = "t" .. i
    local keys = i % 3 == 0 and nil or ("k" .. i .. " common")
    assert(lib.rmq_devbroker_produce(db, 0, TOPIC, -1, nil, keys, body, #body) >= 0)
  end
end

describe("consumer: message trace", function()
  it("sends SubBefore and SubAfter records, field by field as Java's TraceDataEncoder", function()
    local db, ns = cons.test_broker("--topic " .. TOPIC .. ":2 --delay-scale 0.001")
    produce(db)
    local dir = cons.tmpdir("trace")
    local ids = dir .. "/ids.txt"
    local before_ms = os.time() * 1000 - 1000
    -- Messages ending in 7 ask for a retry once, those ending in 3 raise once.
    local s = cons.script(dir, { group = GROUP, ns = ns, topic = TOPIC, out = dir .. "/out.txt",
      extra = "enable_msg_trace = true, consume_message_batch_max_size = 1,",
      body = string.format([[
        local m = msgs[1]
        local f = io.open(%q, "a")
        f:write(m.body, " ", m.msg_id, " ", m.reconsume_times, " ", m.keys or "-", "\n")
        f:close()
        if m.reconsume_times == 0 then
          if m.body:sub(-1) == "7" then return rmq.RECONSUME_LATER end
          if m.body:sub(-1) == "3" then error("boom") end
        end]], ids) })
    local log = dir .. "/run.log"
    local pid = cons.spawn(s, log)
    -- Every message consumed (the failed ones twice), then the records on the trace topic.
    local want = N + 6 -- 3 end in 7 (7, 17, 27), 3 in 3 (3, 13, 23)
    helpers.wait_until(function() return cons.count_lines(ids) >= want end, 60, "deliveries")
    local recs
    helpers.wait_until(function()
      recs = trace_records(ns, "RMQ_SYS_TRACE_TOPIC")
      return #recs >= 2 * want
    end, 30, "the trace records")
    cons.stop(pid)
    local after_ms = os.time() * 1000 + 1000

    -- What was delivered: msg id -> { body, deliveries (reconsume times seen), keys }.
    local by_id = {}
    for _, l in ipairs(cons.lines(ids)) do
      local body, id, rt, keys = l:match("^(%S+) (%S+) (%d+) (.*)$")
      local d = by_id[id] or { body = body, rts = {}, keys = keys ~= "-" and keys or nil }
      d.rts[#d.rts + 1] = tonumber(rt)
      by_id[id] = d
    end

    local befores, afters = {}, {}
    for _, r in ipairs(recs) do
      if r[1] == "SubBefore" then
        assert.equal(8, #r, "SubBefore has 8 fields")
        befores[r[5]] = r
      elseif r[1] == "SubAfter" then
        assert.equal(9, #r, "SubAfter has 9 fields")
        afters[#afters + 1] = r
      else
        error("unexpected record type " .. tostring(r[1]))
      end
    end
    local n_after, codes = 0, {}
    for _, a in ipairs(afters) do
      -- SubAfter: type, requestId, msgId, costTime, success, keys, contextCode, timeStamp, group
      local b = assert(befores[a[2]], "a SubBefore with the request id " .. a[2])
      assert.matches("^%x+$", a[2])
      assert.equal(32, #a[2]) -- MessageClientIDSetter.createUniqID
      local d = assert(by_id[a[3]], "a delivered message id " .. a[3])
      assert.equal(a[3], b[6])
      -- SubBefore: type, timeStamp, regionId, groupName, requestId, msgId, retryTimes, keys
      local ts = tonumber(b[2])
      assert.is_true(ts >= before_ms and ts <= after_ms, "timestamp " .. b[2])
      -- regionId: the message's MSG_REGION property; a broker gives MSG_REGION in its send
      -- answer, not in the stored message, so Java prints its null here too.
      assert.equal("null", b[3])
      assert.equal(GROUP, b[4])
      assert.equal(d.keys or "null", b[8])
      assert.equal(d.keys or "null", a[6])
      assert.is_truthy(tonumber(a[4]) >= 0)
      assert.is_true(tonumber(a[8]) >= ts)
      assert.equal(GROUP, a[9])
      local rt = tonumber(b[7])
      local last = d.body:sub(-1)
      local failed_first = rt == 0 and (last == "7" or last == "3")
      assert.equal(failed_first and "false" or "true", a[5], d.body .. " success")
      local code = failed_first and (last == "7" and "4" or "2") or "0"
      assert.equal(code, a[7], d.body .. " ConsumeReturnType")
      codes[code] = (codes[code] or 0) + 1
      -- The trace message's keys hold the message id and its keys.
      local mk = " " .. (a.msg_keys or "") .. " "
      assert.is_truthy(mk:find(" " .. a[3] .. " ", 1, true), "msg id among the keys")
      if d.keys then assert.is_truthy(mk:find(" common ", 1, true)) end
      n_after = n_after + 1
    end
    assert.equal(want, n_after)
    assert.same({ ["0"] = N, ["4"] = 3, ["2"] = 3 }, codes)

    -- QueryMsgTraceById: QUERY_MESSAGE on the trace topic with a message id as the key.
    local id = next(by_id)
    local c = assert(wire.connect(wire.broker_addr(db, 0)))
    helpers.defer(function() c:close() end)
    local r = assert(c:request(QUERY, { topic = "RMQ_SYS_TRACE_TOPIC", key = id, maxNum = "64",
      beginTimestamp = "0", endTimestamp = "9223372036854775807", _UNIQUE_KEY_QUERY = "false" }))
    assert.equal(0, r.code)
    local found = 0
    for _, m in ipairs(wire.decode_messages(r.body, true)) do
      assert.equal("RMQ_SYS_TRACE_TOPIC", m.topic)
      local keys = " " .. (m.props.KEYS or "") .. " "
      assert.is_truthy(keys:find(" " .. id .. " ", 1, true))
      if m.body:find(id, 1, true) then found = found + 1 end
    end
    assert.is_true(found >= 1, "the trace of " .. id .. " found by its id")
  end)

  it("sends SubBefore and SubAfter records for what a POP consumer consumed", function()
    local POP, ACK, SET_MODE = 200050, 200051, 401
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic " .. TOPIC .. ":2")
    -- mqadmin setConsumeMode -m POP: the group pops the topic (client_rebalance = false)
    local c = assert(wire.connect(wire.broker_addr(db, 0)))
    helpers.defer(function() c:close() end)
    local r = assert(c:request(SET_MODE, nil, cjson.encode({ topic = TOPIC, consumerGroup = GROUP,
      mode = "POP", popShareQueueNum = 0 })))
    assert.equal(0, r.code)
    produce(db)
    local dir = cons.tmpdir("trace-pop")
    local ids = dir .. "/ids.txt"
    local before_ms = os.time() * 1000 - 1000
    local s = cons.script(dir, { group = GROUP, ns = ns, topic = TOPIC, out = dir .. "/out.txt",
      extra = "enable_msg_trace = true, client_rebalance = false, " ..
        "consume_message_batch_max_size = 1,",
      body = string.format([[
        local m = msgs[1]
        local f = io.open(%q, "a")
        f:write(m.body, " ", m.msg_id, " ", m.keys or "-", "\n")
        f:close()]], ids) })
    local pid = cons.spawn(s, dir .. "/run.log")
    helpers.wait_until(function() return cons.count_lines(ids) >= N end, 60, "deliveries")
    helpers.wait_until(function() return cons.lib.rmq_devbroker_count(db, cons.ALL, ACK) > 0 end,
      30, "ACK_MESSAGE sent")
    local recs
    helpers.wait_until(function()
      recs = trace_records(ns, "RMQ_SYS_TRACE_TOPIC")
      return #recs >= 2 * N
    end, 30, "the trace records")
    cons.stop(pid)
    local after_ms = os.time() * 1000 + 1000
    assert.equal(0, cons.exit_code(dir .. "/run.log"), "a clean stop")
    -- consumed by POP, not by pulls of the topic
    assert.is_true(cons.lib.rmq_devbroker_count(db, cons.ALL, POP) > 0, "POP_MESSAGE sent")

    local by_id, n_ids = {}, 0
    for _, l in ipairs(cons.lines(ids)) do
      local body, id, keys = l:match("^(%S+) (%S+) (.*)$")
      assert.is_nil(by_id[id], "one delivery of " .. id)
      by_id[id] = { body = body, keys = keys ~= "-" and keys or nil }
      n_ids = n_ids + 1
    end
    assert.equal(N, n_ids)
    local befores, afters = {}, {}
    for _, rec in ipairs(recs) do
      if rec[1] == "SubBefore" then
        assert.equal(8, #rec, "SubBefore has 8 fields")
        befores[rec[5]] = rec
      else
        assert.equal("SubAfter", rec[1])
        assert.equal(9, #rec, "SubAfter has 9 fields")
        afters[#afters + 1] = rec
      end
    end
    local traced = {}
    for _, a in ipairs(afters) do
      local b = assert(befores[a[2]], "a SubBefore with the request id " .. a[2])
      local d = assert(by_id[a[3]], "a consumed message id " .. a[3])
      assert.is_nil(traced[a[3]], "one SubAfter for " .. a[3])
      traced[a[3]] = true
      assert.equal(a[3], b[6])
      local ts = tonumber(b[2])
      assert.is_true(ts >= before_ms and ts <= after_ms, "timestamp " .. b[2])
      assert.equal(GROUP, b[4])
      assert.equal("0", b[7]) -- retryTimes
      assert.equal(d.keys or "null", b[8])
      assert.equal(d.keys or "null", a[6])
      assert.equal("true", a[5])
      assert.equal("0", a[7]) -- ConsumeReturnType SUCCESS
      assert.equal(GROUP, a[9])
      local mk = " " .. (a.msg_keys or "") .. " "
      assert.is_truthy(mk:find(" " .. a[3] .. " ", 1, true), "msg id among the keys")
    end
    assert.equal(N, #afters)
  end)

  it("consumes and commits as fast when the trace topic never answers", function()
    local db, ns = cons.test_broker("--topic " .. TOPIC .. ":2 --fault SEND_MESSAGE_V2:1:drop")
    produce(db)
    local dir = cons.tmpdir("trace-down")
    local out = dir .. "/out.txt"
    local s = cons.script(dir, { group = GROUP, ns = ns, topic = TOPIC, out = out,
      extra = "enable_msg_trace = true, customized_trace_topic = \"MyTrace\", "
        .. "persist_consumer_offset_interval = 200," })
    local log = dir .. "/run.log"
    local pid = cons.spawn(s, log)
    helpers.wait_until(function() return cons.count_lines(out) >= N end, 60, "every message")
    helpers.wait_until(function() return cons.all_committed(db, GROUP, TOPIC, 2) end, 30,
      "offsets committed")
    cons.stop(pid)
    assert.equal(0, cons.exit_code(log))
  end)

  it("refuses a trace topic that is not a topic name, naming the option", function()
    local dir = cons.tmpdir("trace-bad")
    local s = cons.script(dir, { group = GROUP, ns = "127.0.0.1:1", topic = TOPIC,
      out = dir .. "/out.txt", extra = "enable_msg_trace = true, customized_trace_topic = \"a b\"," })
    local p = io.popen(helpers.bin .. " check " .. s .. " 2>&1; echo rc=$?")
    local text = p:read("*a")
    p:close()
    assert.matches("customized_trace_topic", text, 1, true)
    assert.matches("rc=2", text, 1, true)
  end)
end)
