-- Messages the consumer cannot decode never stop their queue: each is logged once with its
-- offset and stored in %DLQ%<group> with CONSUMER_SEND_MSG_BACK (delayLevel -1; the fixed
-- header still gives its commit-log offset), every other message is consumed and the committed
-- offset reaches the queue's end. The development broker damages stored messages in place
-- (rmq_devbroker_corrupt: the sysFlag's COMPRESSED bit flipped on, so the plain body is an
-- invalid zlib stream), at the start of the first pull response and in its middle.
--
-- Bodies that RocketMQ 5.x producers compress with LZ4 or ZSTD (sysFlag compression type 1 or
-- 2, SEND_MESSAGE straight to the broker as a 5.x producer sends it) reach the handler
-- decompressed. The compressed bodies are spec/fixtures/codec/compression (lz4 and zstd CLIs).
--
-- A popped message (POP mode, development broker in 5.x mode) that cannot be decoded goes to
-- the DLQ the same way and is then acked: it does not come back after its invisible time, and
-- an orderly POP queue goes on with the messages after it, in order.
local helpers = require "helpers"
local ffi = require "ffi"
local raw = require "rawclient"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local SEND, SEND_BACK = 10, 36
local PULL, POP = 11, 200050
local N = 12
local CORRUPT = { [0] = true, [5] = true } -- queue offsets damaged (b1 and b6)
local SYSFLAG_LOW_BYTE = 39                 -- PROTOCOL 4.1: SYSFLAG at byte 36, big-endian

local function run_case(orderly)
  local topic = orderly and "BadOrderly" or "BadTopic"
  local group = orderly and "g_bad_orderly" or "g_bad"
  local dlq = "%DLQ%" .. group
  local db, ns = cons.test_broker("--topic " .. topic .. ":1")
  for i = 1, N do
    local body = "b" .. i
    assert(lib.rmq_devbroker_produce(db, 0, topic, 0, nil, nil, body, #body) == i - 1)
  end
  for off in pairs(CORRUPT) do
    assert.equal(0, lib.rmq_devbroker_corrupt(db, 0, topic, 0, off, SYSFLAG_LOW_BYTE, 1))
  end
  local dir = helpers.tmpdir("bad")
  local out = dir .. "/out.txt"
  local s = cons.script(dir, { group = group, ns = ns, topic = topic, out = out,
    orderly = orderly })
  local log = dir .. "/run.log"
  local pid = helpers.spawn(helpers.bin .. " run " .. s, { log = log, rc = log .. ".rc" })
  helpers.wait_until(function()
    return tonumber(lib.rmq_devbroker_committed_offset(db, 0, group, topic, 0)) == N
  end, 60, "committed offset " .. N .. " (log " .. log .. ")")
  assert.equal(2, tonumber(lib.rmq_devbroker_max_offset(db, 0, dlq, 0)))
  helpers.kill(pid)
  assert.equal(0, cons.exit_code(log))

  local got, last = {}, -1
  for _, r in ipairs(cons.records(out)) do
    assert.is_nil(CORRUPT[r.off], "corrupt offset " .. r.off .. " reached the handler")
    got[r.off] = true
    if orderly then
      assert.is_true(r.off > last, "orderly: offset " .. r.off .. " after " .. last)
      last = r.off
    end
  end
  for off = 0, N - 1 do
    if not CORRUPT[off] then assert.is_true(got[off], "offset " .. off .. " consumed") end
  end
  -- Logged once each, with the offset.
  local text = cons.read(log)
  for off in pairs(CORRUPT) do
    local n = 0
    for _ in text:gmatch("message at offset " .. off .. " %(commit log offset %d+%) cannot be "
      .. "decoded") do n = n + 1 end
    assert.equal(1, n, "log lines for offset " .. off)
  end
  -- Sent back straight to the DLQ.
  local buf = ffi.new("char[64]")
  local backs = lib.rmq_devbroker_count(db, cons.ALL, SEND_BACK)
  assert.equal(2, backs)
  for i = 0, backs - 1 do
    local n = lib.rmq_devbroker_request_ext(db, cons.ALL, SEND_BACK, i, "delayLevel", buf, 64)
    assert.equal("-1", ffi.string(buf, n))
  end
end

-- A consumer of group in POP mode against a 5.x development broker: topic on one queue holding
-- N messages "b1".."bN", queue offset bad corrupted, before(db) run (when given) before the
-- consumer starts with the options extra (and client_rebalance = false, pop_batch_nums = 4).
-- Returns db, the consumer's record file, its log and its pid.
local function pop_run(topic, group, bad, orderly, extra, before)
  local db, ns = cons.test_broker("--rocketmq-version 5 --topic " .. topic .. ":1")
  cons.set_mode(db, topic, group, "POP")
  for i = 1, N do
    local body = "b" .. i
    assert(lib.rmq_devbroker_produce(db, 0, topic, 0, nil, nil, body, #body) == i - 1)
  end
  assert.equal(0, lib.rmq_devbroker_corrupt(db, 0, topic, 0, bad, SYSFLAG_LOW_BYTE, 1))
  if before then before(db) end
  local dir = helpers.tmpdir("badpop")
  local out = dir .. "/out.txt"
  local s = cons.script(dir, { group = group, ns = ns, topic = topic, out = out,
    orderly = orderly, extra = "client_rebalance = false, pop_batch_nums = 4, " .. extra })
  local log = dir .. "/run.log"
  local pid = helpers.spawn(helpers.bin .. " run " .. s, { log = log, rc = log .. ".rc" })
  return db, out, log, pid
end

-- POP mode: N messages on one queue, queue offset 5 corrupted; the consumer pops with a 5 s
-- invisible time. The corrupt message is stored in %DLQ%<group> (read back: its commit-log
-- offset's bytes), acked, and never delivered again; every other message is consumed once (in
-- order for an orderly consumer).
local function pop_case(orderly)
  local topic = orderly and "BadPopOrd" or "BadPop"
  local group = orderly and "g_badpop_ord" or "g_badpop"
  local dlq = "%DLQ%" .. group
  local bad = 5
  local db, out, log, pid = pop_run(topic, group, bad, orderly, "pop_invisible_time = 5000,")
  helpers.wait_until(function()
    return cons.count_lines(out) >= N - 1 and
      tonumber(lib.rmq_devbroker_max_offset(db, 0, dlq, 0)) >= 1
  end, 60, "every good message consumed and the corrupt one in " .. dlq .. " (log " .. log .. ")")
  -- More than one invisible time later: nothing came again.
  helpers.sleep(7)
  helpers.kill(pid)
  assert.equal(0, cons.exit_code(log))
  assert.equal(1, tonumber(lib.rmq_devbroker_max_offset(db, 0, dlq, 0)))

  local got, last = {}, -1
  for _, r in ipairs(cons.records(out)) do
    assert.is_true(r.off ~= bad, "the corrupt offset reached the handler")
    assert.is_nil(got[r.off], "offset " .. r.off .. " consumed twice")
    got[r.off] = true
    if orderly then
      assert.is_true(r.off > last, "orderly: offset " .. r.off .. " after " .. last)
      last = r.off
    end
  end
  for off = 0, N - 1 do
    if off ~= bad then assert.is_true(got[off], "offset " .. off .. " consumed") end
  end
  -- Logged once.
  local n = 0
  for _ in cons.read(log):gmatch("message at offset " .. bad .. " %(commit log offset %d+%) " ..
    "cannot be decoded") do n = n + 1 end
  assert.equal(1, n, "log lines for offset " .. bad)
  -- Sent back straight to the DLQ, and what the DLQ holds is that message (its body b6).
  local buf = ffi.new("char[64]")
  assert.equal(1, lib.rmq_devbroker_count(db, cons.ALL, SEND_BACK))
  local k = lib.rmq_devbroker_request_ext(db, cons.ALL, SEND_BACK, 0, "delayLevel", buf, 64)
  assert.equal("-1", ffi.string(buf, k))
  local c = assert(raw.connect(ffi.string(lib.rmq_devbroker_broker_addr(db, 0))))
  helpers.defer(function() c:close() end)
  local r = assert(c:request(PULL, { consumerGroup = "reader", topic = dlq, queueId = "0",
    queueOffset = "0", maxMsgNums = "1", sysFlag = "4", commitOffset = "0",
    suspendTimeoutMillis = "0", expressionType = "TAG", subscription = "*", subVersion = "0" }))
  assert.equal(0, r.code)
  assert.is_truthy(r.body and r.body:find("b" .. (bad + 1), 1, true), "the DLQ holds b" .. (bad + 1))
  -- Acked: the broker's POP of the queue (and of its retry topic) has nothing more.
  r = assert(c:request(POP, { consumerGroup = group, topic = topic, queueId = "0",
    maxMsgNums = "32", invisibleTime = "60000", pollTime = "0", bornTime = "0", initMode = "0",
    expType = "TAG", exp = "*", order = orderly and "true" or "false" }))
  assert.is_true(r.code ~= 0, "the broker popped a message again")
end

describe("consumer: undecodable messages", function()
  it("go to the DLQ and the queue is consumed past them (concurrently)", function()
    run_case(false)
  end)
  it("go to the DLQ and the queue is consumed past them (orderly)", function()
    run_case(true)
  end)

  it("popped: go to the DLQ and are acked, every other message consumed once (POP)",
    function()
      pop_case(false)
    end)
  it("popped: an orderly POP queue goes on past them, in order", function()
    pop_case(true)
  end)

  it("popped: refused 3 times by the broker, acked anyway and logged as lost (orderly POP)",
    function()
      local topic, group, bad = "BadPopLost", "g_badpop_lost", 5
      -- The broker refuses the send-back 3 times; an invisible time longer than its retries
      -- (5 s apart).
      local db, out, log, pid = pop_run(topic, group, bad, true, "pop_invisible_time = 60000,",
        function(d)
          assert.equal(0, lib.rmq_devbroker_push_error(d, 0, SEND_BACK, 1 --[[SYSTEM_ERROR]], 3))
        end)
      -- the acks (the corrupt message's too) commit the queue to its end
      helpers.wait_until(function()
        return tonumber(lib.rmq_devbroker_committed_offset(db, 0, group, topic, 0)) == N
      end, 60, "committed offset " .. N .. " (log " .. log .. ")")
      helpers.kill(pid)
      assert.equal(0, cons.exit_code(log))
      assert.equal(0, tonumber(lib.rmq_devbroker_max_offset(db, 0, "%DLQ%" .. group, 0)))
      assert.equal(3, lib.rmq_devbroker_count(db, cons.ALL, SEND_BACK))
      local last = -1
      for _, r in ipairs(cons.records(out)) do
        assert.is_true(r.off ~= bad and r.off > last, "offset " .. r.off .. " after " .. last)
        last = r.off
      end
      assert.equal(N - 1, #cons.records(out))
      assert.is_truthy(cons.read(log):find("undecodable message at offset " .. bad ..
        " %(commit log offset %d+%) refused 3 times by the broker .*it is lost"))
    end)

  it("LZ4 and ZSTD bodies of 5.x producers reach the handler decompressed", function()
    local topic, group = "ZTopic", "g_z"
    local db, ns = cons.test_broker("--topic " .. topic .. ":1")
    local fx = helpers.fixtures .. "/codec/compression/"
    local plain = helpers.read_file(fx .. "body.txt")
    local cases = {
      { key = "lz4", file = "body.lz4", sys = 0x101 },
      { key = "lz4-linked", file = "body-64k-linked.lz4", sys = 0x101 },
      { key = "zstd", file = "body.zst", sys = 0x201 },
      { key = "zstd-checksum", file = "body-checksum.zst", sys = 0x201 },
      { key = "zlib-type0", file = nil, sys = 0 },
    }
    local c = assert(raw.connect(ffi.string(lib.rmq_devbroker_broker_addr(db, 0))))
    helpers.defer(function() c:close() end)
    for i, k in ipairs(cases) do
      local body = k.file and helpers.read_file(fx .. k.file) or "plain body"
      local r = assert(c:request(SEND, { producerGroup = "p5", topic = topic,
        defaultTopic = "TBW102", defaultTopicQueueNums = "4", queueId = "0",
        sysFlag = tostring(k.sys), bornTimestamp = "1", flag = "0",
        properties = raw.props({ { "KEYS", k.key }, { "UNIQ_KEY", "U" .. i } }),
        reconsumeTimes = "0", unitMode = "false", batch = "false" }, body))
      assert.equal(0, r.code)
    end
    local dir = helpers.tmpdir("z")
    local out = dir .. "/out.txt"
    local script = dir .. "/consumer.lua"
    local f = assert(io.open(script, "w"))
    f:write(string.format([[
local out = assert(io.open(%q, "a"))
out:setvbuf("no")
local pf = assert(io.open(%q, "rb"))
local plain = pf:read("*a")
pf:close()
return {
  consumer_group = %q, namesrv_addr = %q, consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  subscribe = { [%q] = "*" },
  consume = function(msgs)
    local m = msgs[1]
    local want = m.keys == "zlib-type0" and "plain body" or plain
    local verdict = m.body == want and "same" or "differs"
    out:write(string.format("%%s %%s %%d\n", m.keys, verdict, #m.body))
  end,
}
]], out, fx .. "body.txt", group, ns, topic))
    f:close()
    local log = dir .. "/run.log"
    local pid = helpers.spawn(helpers.bin .. " run " .. script, { log = log, rc = log .. ".rc" })
    helpers.wait_until(function() return cons.count_lines(out) >= #cases end, 60,
      "every body (log " .. log .. ")")
    helpers.kill(pid)
    assert.equal(0, cons.exit_code(log))
    local seen = {}
    for l in io.lines(out) do
      local key, verdict, len = l:match("^(%S+) (%S+) (%d+)$")
      assert.equal("same", verdict, l)
      seen[key] = tonumber(len)
    end
    for _, k in ipairs(cases) do
      assert.equal(k.file and #plain or #"plain body", seen[k.key], k.key)
    end
  end)
end)
