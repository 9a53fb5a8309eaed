-- Broker-initiated requests served by a running consumer, asked through the development
-- broker's relay as mqadmin does: GET_CONSUMER_RUNNING_INFO answers in fastjson's object-keyed
-- form (MessageQueue objects as map keys) with the key order of a Java 4.9.4 consumer
-- (spec/fixtures/wire/04_consumer_status).
local helpers = require "helpers"
local cjson = require "cjson"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local raw = dofile(helpers.root .. "/spec/02-integration/02-producer/rawmq.lua")
local lib = cons.lib

local TOPIC, GROUP, N = "AdmTopic", "g_admin", 100

-- The keys of the first object value found after pattern `after` in s, in order.
local function keys_after(s, after)
  local i = s:find(after, 1, true)
  assert(i, "not found: " .. after)
  local j = s:find("}", i + #after, true)
  local obj = s:sub(i + #after, j)
  local keys = {}
  for k in obj:gmatch('"([%w]+)":') do keys[#keys + 1] = k end
  return keys
end

local function fixture_running_info()
  local idx = helpers.json_fixture("wire/04_consumer_status/index.json")
  for _, f in ipairs(idx.frames) do
    if f.request_code == 307 and f.kind == "response" then return f.body_text end
  end
end

describe("consumer: GET_CONSUMER_RUNNING_INFO", function()
  local fx = cons.broker_fixture("--topic " .. TOPIC .. ":4", "admin")
  lazy_teardown(raw.close_all)

  it("answers like a Java consumer", function()
    cons.produce(fx.db, TOPIC, N, "a")
    local out = fx.dir .. "/out.txt"
    local s = cons.script(fx.dir, { group = GROUP, ns = fx.ns, topic = TOPIC, out = out })
    local log = fx.dir .. "/run.log"
    local pid = cons.spawn(s, log)
    helpers.wait_until(function() return cons.count_lines(out) >= N end, 60, "consumed")
    local cid = helpers.wait_until(function() return cons.read(log):match("started as (%S+)") end,
      10, "clientId in the log")
    local baddr = cons.broker_addr(fx.db)
    local r
    helpers.wait_until(function()
      r = assert(raw.request(baddr, 307, { consumerGroup = GROUP, clientId = cid,
        jstackEnable = "false" }))
      assert.equal(0, r.code, r.remark)
      -- Every queue's in-memory offset reached 25.
      for q = 0, 3 do
        local key = string.format('{"brokerName":"broker-a","queueId":%d,"topic":"%s"}:', q, TOPIC)
        local v = r.body:match(key:gsub("%p", "%%%0") .. '{[^}]*"commitOffset":(%d+)')
        if tonumber(v) ~= 25 then return false end
      end
      return true
    end, 30, "running info with committed offsets")
    local body = r.body
    -- Top-level order and the object keys of mqTable (first: the retry queue, TreeMap order).
    assert.matches('^{"mqTable":{{"brokerName":"broker%-a","queueId":0,"topic":"%%RETRY%%'
      .. GROUP .. '"}:{"cachedMsgCount":0,', body)
    local a = body:find('"properties":{', 1, true)
    local b = body:find('"statusTable":{', 1, true)
    local c = body:find('"subscriptionSet":[', 1, true)
    assert.is_true(a and b and c and a < b and b < c)
    assert.matches('"subscriptionSet":%[{"classFilterMode":false,"codeSet":%[%],'
      .. '"expressionType":"TAG","subString":"%*","subVersion":%d+,"tagsSet":%[%],'
      .. '"topic":"%%RETRY%%' .. GROUP .. '"},{.-"topic":"' .. TOPIC .. '"}%]}$', body)
    -- ProcessQueueInfo and ConsumeStatus keys exactly as the Java client writes them.
    local want = fixture_running_info()
    assert.same(keys_after(want, '"topic":"CapTopic"}:'), keys_after(body, '"topic":"' .. TOPIC .. '"}:'))
    assert.same(keys_after(want, '"CapTopic":'), keys_after(body, '"' .. TOPIC .. '":'))
    -- statusTable is a TreeMap: %RETRY%... sorts before the topic.
    assert.is_true(body:find('"%RETRY%' .. GROUP .. '":{"consumeFailedMsgs"', 1, true)
      < body:find('"' .. TOPIC .. '":{"consumeFailedMsgs"', 1, true))
    -- The properties admin tools read.
    assert.matches('"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"', body, 1, true)
    assert.matches('"PROP_CONSUMEORDERLY":"false"', body, 1, true)
    assert.matches('"PROP_CONSUMER_START_TIMESTAMP":"%d+"', body)
    assert.matches('"PROP_CLIENT_VERSION":"V4_9_4"', body, 1, true)
    assert.matches('"PROP_NAMESERVER_ADDR":"' .. fx.ns:gsub("%p", "%%%0") .. ';"', body)
    assert.matches('"consumerGroup":"' .. GROUP .. '"', body, 1, true)
    -- A group the consumer does not have: SYSTEM_ERROR naming it.
    local e = assert(raw.request(baddr, 307, { consumerGroup = "g_other", clientId = cid,
      jstackEnable = "false" }))
    assert.are_not.equal(0, e.code)

    -- CONSUME_MESSAGE_DIRECTLY: the broker relays one stored message; the handler runs once.
    local msgs = assert(raw.pull(baddr, TOPIC, 1, 0, 1))
    local m = msgs[1]
    local port = tonumber(baddr:match(":(%d+)$"))
    local hi = math.floor(m.physical_offset / 2 ^ 32)
    local lo = m.physical_offset - hi * 2 ^ 32
    local id = string.format("7F000001%08X%08X%08X", port, hi, lo)
    local before = cons.count_lines(out)
    local d = assert(raw.request(baddr, 309, { consumerGroup = GROUP, clientId = cid, msgId = id }))
    assert.equal(0, d.code, d.remark)
    assert.matches('^{"autoCommit":true,"consumeResult":"CR_SUCCESS","order":false,'
      .. '"spentTimeMills":%d+}$', d.body)
    assert.equal(before + 1, cons.count_lines(out))
    local recs = cons.records(out)
    assert.equal(m.body, recs[#recs].body)
    cons.stop(pid)
    assert.equal(0, cons.exit_code(log))
  end)
end)
