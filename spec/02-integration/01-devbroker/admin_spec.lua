-- What the development broker's admin requests do (mqadmin 4.9.4 and the Dashboard send them):
-- deleteTopic, updateSubGroup / deleteSubGroup and what a group config changes, the put/get
-- counters of statsAll and brokerConsumeStats, broker runtime info and topic stats, producer
-- connections, topic lists, the broker config, and the log of unsupported request codes. All
-- through real sockets against the development broker (in process, or `rmqlua broker`).
local helpers = require "helpers"
local wire = require "02-integration.01-devbroker.wire"
local admin = require "02-integration.01-devbroker.admin"
local cjson = require "cjson"

local req, json = admin.req, admin.json

local SUSPEND, SUBSCRIPTION = 2, 4

-- An in-process broker and a connection to its broker (c) and name server (n); stop(db) stops
-- it before the end of the test (else the test's cleanup does).
local running = {}
local function stop(db)
  if running[db] then
    running[db] = nil
    wire.lib().rmq_devbroker_stop(db)
  end
end

local function start(args)
  local db, ns, lib = wire.start(args)
  running[db] = true
  helpers.defer(function() stop(db) end)
  local c = assert(wire.connect(wire.broker_addr(db, 0)))
  local n = assert(wire.connect(ns))
  helpers.defer(function() c:close(); n:close() end)
  return db, lib, c, n, ns
end

-- PULL_MESSAGE with its own subscription "*" (no heartbeat needed); returns the answer and its
-- decoded messages.
local function pull(c, group, topic, qid, offset)
  local r = req(c, 11, wire.pull_ext(group, topic, qid, offset,
                                     {sys_flag = SUBSCRIPTION, subscription = "*", suspend = 0}))
  return r, r.code == 0 and wire.decode_messages(r.body) or {}
end

local function sub_group(c, cfg)
  local body = {brokerId = 0, consumeBroadcastEnable = false, consumeEnable = true,
                consumeFromMinEnable = false, notifyConsumerIdsChangedEnable = true,
                retryMaxTimes = 16, retryQueueNums = 1, whichBrokerWhenConsumeSlowly = 1}
  for k, v in pairs(cfg) do body[k] = v end
  local r = req(c, 200, {}, cjson.encode(body))
  assert.equal(0, r.code)
end

local function create_topic(c, topic, queues)
  local q = tostring(queues or 4)
  local r = req(c, 17, {topic = topic, readQueueNums = q, writeQueueNums = q, perm = "6",
                        topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false",
                        defaultTopic = "TBW102"})
  assert.equal(0, r.code)
end

local function topic_list(n)
  local r = req(n, 206, {})
  assert.equal(0, r.code)
  local set = {}
  for _, t in ipairs(json(r).topicList) do set[t] = true end
  return set
end

describe("devbroker admin: deleteTopic", function()
  lazy_setup(function() wire.quiet() end)

  it("takes the topic out of routes, topic lists, stats and the store, also after a restart",
     function()
    local dir = helpers.tmpdir("deltopic")
    local db, lib, c, n = start("--store " .. dir)
    create_topic(c, "DelT", 2)
    create_topic(c, "KeepT", 2)
    admin.send(c, "DelT", 6, {queues = 2})
    admin.send(c, "KeepT", 3, {queues = 1})
    assert.equal(0, req(n, 105, {topic = "DelT"}).code)
    assert.is_true(topic_list(n).DelT)
    -- a pull parked on the topic is answered when it goes
    local parked = c:send_request(11, wire.pull_ext("g_del", "DelT", 0, 3,
                                  {sys_flag = SUBSCRIPTION + SUSPEND, subscription = "*",
                                   suspend = 30000}))

    local c3 = assert(wire.connect(wire.broker_addr(db, 0)))
    helpers.defer(function() c3:close() end)
    local r = req(c3, 215, {topic = "DelT"})
    assert.equal(0, r.code)
    local p = c:wait_response(parked, 5 * helpers.scale)
    assert.truthy(p, "the parked pull was answered")
    assert.equal(17, p.code) -- TOPIC_NOT_EXIST
    assert.equal(0, req(n, 216, {topic = "DelT", clusterName = "DefaultCluster"}).code)

    assert.equal(17, req(n, 105, {topic = "DelT"}).code)
    local tl = topic_list(n)
    assert.is_nil(tl.DelT)
    assert.is_true(tl.KeepT)
    assert.is_nil(json(req(n, 224, {cluster = "DefaultCluster"})).topicList.DelT)
    r = req(c, 202, {topic = "DelT"})
    assert.equal(17, r.code)
    assert.equal("topic[DelT] not exist", r.remark)
    assert.equal(17, (pull(c, "g_del", "DelT", 0, 0)).code)
    -- queryMsgByKey no longer finds its messages (K1..K6 were its keys)
    local q = req(c, 12, {topic = "DelT", key = "K1", maxNum = "64", beginTimestamp = "0",
                          endTimestamp = "9223372036854775807", _UNIQUE_KEY_QUERY = "false"})
    assert.equal(22, q.code) -- QUERY_NOT_FOUND
    assert.equal(0, req(c, 12, {topic = "KeepT", key = "K1", maxNum = "64", beginTimestamp = "0",
                                endTimestamp = "9223372036854775807",
                                _UNIQUE_KEY_QUERY = "false"}).code)
    -- the other topic keeps its messages
    local _, ms = pull(c, "g_keep", "KeepT", 0, 0)
    assert.equal(3, #ms)

    -- created again, it starts empty; a restart brings back only what came after the delete
    create_topic(c, "DelT", 2)
    assert.equal(0, tonumber(lib.rmq_devbroker_max_offset(db, 0, "DelT", 0)))
    admin.send(c, "DelT", 1, {queues = 1})
    c:close(); n:close()
    stop(db)
    local db2 = start("--store " .. dir)
    assert.equal(1, tonumber(lib.rmq_devbroker_max_offset(db2, 0, "DelT", 0)))
    assert.is_true(tonumber(lib.rmq_devbroker_max_offset(db2, 0, "DelT", 1)) <= 0)
    assert.equal(3, tonumber(lib.rmq_devbroker_max_offset(db2, 0, "KeepT", 0)))
    local c2 = assert(wire.connect(wire.broker_addr(db2, 0)))
    helpers.defer(function() c2:close() end)
    local _, again = pull(c2, "g_del2", "DelT", 0, 0)
    assert.equal(1, #again)
    assert.equal("body-1", again[1].body)
    -- with a store directory, brokerStatus shows its disk use
    local t = json(req(c2, 28, {})).table
    local ratio = tonumber(t.commitLogDiskRatio)
    assert.is_true(ratio >= 0 and ratio <= 1)
    assert.equal(t.commitLogDiskRatio, t["commitLogDiskRatio_" .. dir .. "/broker-a/commitlog"])
    assert.truthy(t.commitLogDirCapacity:match("^Total : [%d.]+ %a+, Free : [%d.]+ %a+%.$"))
  end)

  it("lists the system topics: cluster and broker names (GET_SYSTEM_TOPIC_LIST_FROM_NS)",
     function()
    local db, _, _, n = start("--brokers 2")
    local body = json(req(n, 304, {}))
    table.sort(body.topicList)
    assert.same({"DefaultCluster", "broker-a", "broker-b"}, body.topicList)
    assert.equal(wire.broker_addr(db, 0), body.brokerAddr)
  end)

  it("deletes an unknown topic without complaint, as the Java broker does", function()
    local _, _, c, n = start("")
    assert.equal(0, req(c, 215, {topic = "NeverThereT"}).code)
    assert.equal(0, req(n, 216, {topic = "NeverThereT"}).code)
  end)
end)

describe("devbroker admin: subscription groups", function()
  lazy_setup(function() wire.quiet() end)

  -- Store one message, pull it as group and send it back; pull the retry and send it back
  -- again. max: the maxReconsumeTimes header of both send-backs (nil: not sent).
  local function fail_twice(db, lib, c, group, topic, max)
    local from = tonumber(lib.rmq_devbroker_max_offset(db, 0, topic, 0))
    admin.send(c, topic, 1)
    local _, ms = pull(c, group, topic, 0, from)
    assert.equal(1, #ms)
    local back = {offset = tostring(ms[1].phys), group = group, delayLevel = "0",
                  originMsgId = "x", originTopic = topic, unitMode = "false",
                  maxReconsumeTimes = max and tostring(max) or nil}
    assert.equal(0, req(c, 36, back).code)
    local retry = "%RETRY%" .. group
    helpers.wait_until(function()
      return tonumber(lib.rmq_devbroker_max_offset(db, 0, retry, 0)) == 1
    end, 10, "the first retry")
    local _, rs = pull(c, group, retry, 0, 0)
    assert.equal(1, #rs)
    assert.equal(1, rs[1].reconsume)
    back.offset = tostring(rs[1].phys)
    assert.equal(0, req(c, 36, back).code)
  end

  local function dlq_count(db, lib, group)
    local v = tonumber(lib.rmq_devbroker_max_offset(db, 0, "%DLQ%" .. group, 0))
    return v > 0 and v or 0
  end

  it("retryMaxTimes=1 sends a message to the DLQ after one retry", function()
    local db, lib, c = start("--delay-scale 0.001 --topic RetryT:1")
    sub_group(c, {groupName = "g_once", retryMaxTimes = 1})
    fail_twice(db, lib, c, "g_once", "RetryT")
    helpers.wait_until(function() return dlq_count(db, lib, "g_once") == 1 end, 10, "the DLQ")
    local _, dl = pull(c, "g_once", "%DLQ%g_once", 0, 0)
    assert.equal("body-1", dl[1].body)
    -- both send-backs count for the original topic (the retry's RETRY_TOPIC): statsAll's
    -- SNDBCK_PUT_NUMS
    local sb = req(c, 315, {statsName = "SNDBCK_PUT_NUMS", statsKey = "RetryT@g_once"})
    assert.equal(0, sb.code)
    assert.equal(2, json(sb).statsMinute.sum)
    -- the store took the message, its retry and its dead letter
    assert.equal("3", json(req(c, 28, {})).table.putMessageTimesTotal)
    -- nothing went back to the retry topic
    helpers.sleep(0.2)
    assert.equal(1, tonumber(lib.rmq_devbroker_max_offset(db, 0, "%RETRY%g_once", 0)))
  end)

  it("leaves the default (16) retries and the client's maxReconsumeTimes in charge", function()
    local db, lib, c = start("--delay-scale 0.001 --topic RetryT:1")
    -- no config: created with retryMaxTimes 16 -> a second retry
    fail_twice(db, lib, c, "g_default", "RetryT")
    helpers.wait_until(function()
      return tonumber(lib.rmq_devbroker_max_offset(db, 0, "%RETRY%g_default", 0)) == 2
    end, 10, "the second retry")
    assert.equal(0, dlq_count(db, lib, "g_default"))
    -- retryMaxTimes 1, but the client says 16 (SendMessageProcessor: the header wins)
    sub_group(c, {groupName = "g_client", retryMaxTimes = 1})
    fail_twice(db, lib, c, "g_client", "RetryT", 16)
    helpers.wait_until(function()
      return tonumber(lib.rmq_devbroker_max_offset(db, 0, "%RETRY%g_client", 0)) == 2
    end, 10, "the second retry")
    assert.equal(0, dlq_count(db, lib, "g_client"))
  end)

  it("consumeEnable=false refuses pulls until enabled again", function()
    local _, _, c = start("--topic GateT:1")
    admin.send(c, "GateT", 2)
    sub_group(c, {groupName = "g_gate", consumeEnable = false})
    local r = pull(c, "g_gate", "GateT", 0, 0)
    assert.equal(16, r.code) -- NO_PERMISSION
    assert.equal("subscription group no permission, g_gate", r.remark)
    sub_group(c, {groupName = "g_gate", consumeEnable = true})
    local ok, ms = pull(c, "g_gate", "GateT", 0, 0)
    assert.equal(0, ok.code)
    assert.equal(2, #ms)
  end)

  it("consumeBroadcastEnable=false refuses a BROADCASTING group's pulls", function()
    local _, _, c = start("--topic BcT:1")
    admin.send(c, "BcT", 1)
    local hb = wire.heartbeat_body("127.0.0.1@bc", "g_bc", {{topic = "BcT"}},
                                   {model = "BROADCASTING"})
    assert.equal(0, req(c, 34, {}, hb).code)
    sub_group(c, {groupName = "g_bc", consumeBroadcastEnable = false})
    local r = req(c, 11, wire.pull_ext("g_bc", "BcT", 0, 0, {suspend = 0}))
    assert.equal(16, r.code)
    assert.equal("the consumer group[g_bc] can not consume by broadcast way", r.remark)
    sub_group(c, {groupName = "g_bc", consumeBroadcastEnable = true})
    r = req(c, 11, wire.pull_ext("g_bc", "BcT", 0, 0, {suspend = 0}))
    assert.equal(0, r.code)
  end)

  it("lists, deletes (with its offsets) and persists group configs with --store", function()
    local dir = helpers.tmpdir("subgroups")
    local db, lib, c = start("--store " .. dir .. " --topic SgT:1")
    sub_group(c, {groupName = "g_keep", retryMaxTimes = 3, consumeEnable = false})
    sub_group(c, {groupName = "g_drop"})
    admin.send(c, "SgT", 2)
    req(c, 15, {consumerGroup = "g_drop", topic = "SgT", queueId = "0", commitOffset = "2"})
    assert.equal(2, tonumber(lib.rmq_devbroker_committed_offset(db, 0, "g_drop", "SgT", 0)))
    local all = json(req(c, 201, {})).subscriptionGroupTable
    assert.equal(3, all.g_keep.retryMaxTimes)
    assert.is_false(all.g_keep.consumeEnable)
    assert.truthy(all.g_drop)
    assert.truthy(all.TOOLS_CONSUMER) -- the system groups of SubscriptionGroupManager.init

    assert.equal(0, req(c, 207, {groupName = "g_drop", removeOffset = "true"}).code)
    all = json(req(c, 201, {})).subscriptionGroupTable
    assert.is_nil(all.g_drop)
    assert.equal(-1, tonumber(lib.rmq_devbroker_committed_offset(db, 0, "g_drop", "SgT", 0)))

    c:close()
    stop(db)
    local _, _, c2 = start("--store " .. dir)
    all = json(req(c2, 201, {})).subscriptionGroupTable
    assert.equal(3, all.g_keep.retryMaxTimes)
    assert.is_false(all.g_keep.consumeEnable)
    assert.is_nil(all.g_drop)
    assert.equal(16, (pull(c2, "g_keep", "SgT", 0, 0)).code)
  end)
end)

describe("devbroker admin: counters and state", function()
  lazy_setup(function() wire.quiet() end)

  local function stats(c, name, key)
    local r = req(c, 315, {statsName = name, statsKey = key})
    return r, r.code == 0 and json(r) or nil
  end

  it("counts puts and gets per topic and group (statsAll) and reports them per group " ..
     "(brokerConsumeStats), runtime info and topic stats from the real offsets", function()
    local db, lib, c = start("--topic StatT:2")
    local r = stats(c, "TOPIC_PUT_NUMS", "StatT")
    assert.equal(1, r.code)
    assert.equal("The stats <TOPIC_PUT_NUMS> <StatT> not exist", r.remark)

    admin.send(c, "StatT", 10, {queues = 2})
    local got, last, bytes = 0, {}, 0
    for q = 0, 1 do
      local _, ms = pull(c, "g_stat", "StatT", q, 0)
      got = got + #ms
      last[q] = ms[#ms]
      for _, m in ipairs(ms) do bytes = bytes + m.size end
    end
    assert.equal(10, got)
    -- the group commits queue 0 only
    req(c, 15, {consumerGroup = "g_stat", topic = "StatT", queueId = "0", commitOffset = "5"})

    local _, put = stats(c, "TOPIC_PUT_NUMS", "StatT")
    for _, w in ipairs({"statsMinute", "statsHour", "statsDay"}) do
      assert.equal(10, put[w].sum)
      assert.equal(1.0, put[w].avgpt) -- one message per put
      assert.is_true(put[w].tps > 0)
    end
    local _, size = stats(c, "TOPIC_PUT_SIZE", "StatT")
    assert.equal(bytes, size.statsMinute.sum)
    local _, get = stats(c, "GROUP_GET_NUMS", "StatT@g_stat")
    assert.equal(10, get.statsMinute.sum)
    assert.equal(10, get.statsDay.sum)
    assert.equal(5.0, get.statsMinute.avgpt) -- five messages per pull
    local _, bput = stats(c, "BROKER_PUT_NUMS", "DefaultCluster")
    assert.equal(10, bput.statsMinute.sum)
    assert.equal(1, (stats(c, "GROUP_GET_NUMS", "StatT@nobody")).code)

    -- brokerConsumeStats: the group's queues with the broker's and its own offsets
    r = req(c, 317, {isOrder = "false"})
    assert.equal(0, r.code)
    local body = admin.parse(r.body)
    assert.equal(wire.broker_addr(db, 0), admin.get(body, "brokerAddr").v)
    assert.equal("5", admin.get(body, "totalDiff").v)
    local found
    for _, item in ipairs(admin.get(body, "consumeStatsList").items) do
      if item.members[1][1].v == "g_stat" then found = item.members[1][2] end
    end
    assert.truthy(found, "g_stat listed")
    assert.equal(1, #found.items)
    local ot = admin.get(found.items[1], "offsetTable")
    assert.equal(2, #ot.members)
    for _, m in ipairs(ot.members) do
      local qid = tonumber(admin.get(m[1], "queueId").v)
      assert.equal("StatT", admin.get(m[1], "topic").v)
      assert.equal("5", admin.get(m[2], "brokerOffset").v)
      assert.equal(qid == 0 and "5" or "0", admin.get(m[2], "consumerOffset").v)
      assert.equal(qid == 0 and tostring(last[0].store_ts) or "0",
                   admin.get(m[2], "lastTimestamp").v)
    end
    assert.is_true(tonumber(admin.get(found.items[1], "consumeTps").v) > 0)

    -- broker runtime info (clusterList, brokerStatus)
    local t = json(req(c, 28, {})).table
    assert.equal("10", t.msgPutTotalTodayNow)
    assert.equal("10", t.putMessageTimesTotal)
    assert.equal("10", t.msgGetTotalTodayNow)
    assert.equal(tostring(bytes), t.putMessageSizeTotal)
    assert.equal(tostring(math.max(last[0].phys + last[0].size, last[1].phys + last[1].size)),
                 t.commitLogMaxOffset)
    assert.equal("V4_9_4", t.brokerVersionDesc)
    assert.equal("-1.0", t.commitLogDiskRatio) -- no store directory (getDiskPartitionSpaceUsedPercent)
    assert.is_true(tonumber(t.putTps:match("^(%S+)")) > 0)
    assert.is_true(math.abs(tonumber(t.bootTimestamp) / 1000 - os.time()) < 60)

    -- topic stats: min, max and the store time of each queue's last message
    local ts = admin.parse(req(c, 202, {topic = "StatT"}).body)
    local seen = 0
    for _, m in ipairs(admin.get(ts, "offsetTable").members) do
      local qid = tonumber(admin.get(m[1], "queueId").v)
      assert.equal(tostring(tonumber(lib.rmq_devbroker_max_offset(db, 0, "StatT", qid))),
                   admin.get(m[2], "maxOffset").v)
      assert.equal("0", admin.get(m[2], "minOffset").v)
      assert.equal(tostring(last[qid].store_ts), admin.get(m[2], "lastUpdateTimestamp").v)
      seen = seen + 1
    end
    assert.equal(2, seen)

    -- who consumes the topic: the group with offsets on it, and an online subscriber
    local hb = wire.heartbeat_body("127.0.0.1@who", "g_online", {{topic = "StatT"}})
    assert.equal(0, req(c, 34, {}, hb).code)
    local who = {}
    for _, g in ipairs(json(req(c, 300, {topic = "StatT"})).groupList) do who[g] = true end
    assert.same({g_stat = true, g_online = true}, who)
  end)

  it("gives consumerProgress without -g every group: %RETRY% topics listed, stats per group",
     function()
    local _, _, c, n = start("--topic ProgT:2")
    admin.send(c, "ProgT", 4, {queues = 2})
    for i, g in ipairs({"g_prog1", "g_prog2"}) do
      local hb = wire.heartbeat_body("127.0.0.1@prog" .. i, g,
                                     {{topic = "ProgT"}, {topic = "%RETRY%" .. g}})
      assert.equal(0, req(c, 34, {}, hb).code)
      req(c, 15, {consumerGroup = g, topic = "ProgT", queueId = "0", commitOffset = tostring(i)})
    end
    -- ConsumerProgressSubCommand: the groups are the %RETRY% topics of the topic list
    local tl = topic_list(n)
    for i, g in ipairs({"g_prog1", "g_prog2"}) do
      assert.is_true(tl["%RETRY%" .. g])
      local body = admin.parse(req(c, 208, {consumerGroup = g}).body)
      local q0
      for _, m in ipairs(admin.get(body, "offsetTable").members) do
        if admin.get(m[1], "topic").v == "ProgT" and admin.get(m[1], "queueId").v == "0" then
          q0 = m[2]
        end
      end
      assert.equal(tostring(i), admin.get(q0, "consumerOffset").v)
      assert.equal("2", admin.get(q0, "brokerOffset").v)
      assert.equal(0, req(c, 203, {consumerGroup = g}).code)
    end
  end)

  it("knows producers from their heartbeats (producerConnection)", function()
    local db, lib, c = start("")
    local p = assert(wire.connect(wire.broker_addr(db, 0)))
    local hb = cjson.encode({clientID = "127.0.0.1@prod-1", consumerDataSet = setmetatable({}, cjson.array_mt),
                             producerDataSet = {{groupName = "g_prod"},
                                                {groupName = "CLIENT_INNER_PRODUCER"}}})
    assert.equal(0, req(p, 34, {}, hb).code)
    local r = req(c, 204, {producerGroup = "g_prod"})
    assert.equal(0, r.code)
    local cs = json(r).connectionSet
    assert.equal(1, #cs)
    assert.equal("127.0.0.1@prod-1", cs[1].clientId)
    assert.equal("JAVA", cs[1].language)
    assert.equal(401, cs[1].version)
    assert.truthy(cs[1].clientAddr:match("^127%.0%.0%.1:%d+$"))
    r = req(c, 204, {producerGroup = "g_nope"})
    assert.equal(1, r.code)
    assert.equal("the producer group[g_nope] not exist", r.remark)
    -- UNREGISTER_CLIENT with producerGroup: the emptied group goes
    assert.equal(0, req(p, 35, {clientID = "127.0.0.1@prod-1", producerGroup = "g_prod"}).code)
    assert.equal(1, req(c, 204, {producerGroup = "g_prod"}).code)
    -- a closed connection leaves its groups
    assert.equal(0, req(p, 34, {}, hb).code)
    p:close()
    helpers.wait_until(function()
      local x = req(c, 204, {producerGroup = "g_prod"})
      return x.code == 0 and #json(x).connectionSet == 0
    end, 10, "the producer to leave")
  end)

  it("lists a running `rmqlua send` in producerConnection (its heartbeats)", function()
    local _, _, c, _, ns = start("--topic SendT:2")
    local rcfile = helpers.tmpdir("sendhb") .. "/rc"
    local pid = helpers.spawn(helpers.bin .. " send --namesrv " .. ns ..
                              " --topic SendT --group g_sender --count 8 --rate 2",
                              {rc = rcfile})
    helpers.defer(function() helpers.kill(pid) end)
    local cs
    helpers.wait_until(function()
      local r = req(c, 204, {producerGroup = "g_sender"})
      cs = r.code == 0 and json(r).connectionSet
      return cs and #cs == 1
    end, 10, "the producer's heartbeat")
    assert.truthy(cs[1].clientId:match("^[%d.]+@%d+$"), cs[1].clientId)
    assert.equal(401, cs[1].version)
    -- the inner producer group is announced too, as a Java client does
    assert.equal(0, req(c, 204, {producerGroup = "CLIENT_INNER_PRODUCER"}).code)
    helpers.wait_until(function()
      local f = io.open(rcfile)
      if f then f:close() end
      return f and helpers.read_file(rcfile):match("%d+")
    end, 20, "rmqlua send to end")
    assert.equal("0", helpers.read_file(rcfile):match("%d+"))
    helpers.wait_until(function()
      return #json(req(c, 204, {producerGroup = "g_sender"})).connectionSet == 0
    end, 10, "the producer to leave")
  end)

  it("lists the topic configs (GET_ALL_TOPIC_CONFIG, the Dashboard's topic config)", function()
    local _, _, c = start("--topic CfgT:3")
    create_topic(c, "CfgT2", 5)
    local r = req(c, 21, {})
    assert.equal(0, r.code)
    local body = json(r)
    assert.truthy(body.dataVersion.counter)
    local t = body.topicConfigTable.CfgT2
    assert.same({order = false, perm = 6, readQueueNums = 5, topicFilterType = "SINGLE_TAG",
                 topicName = "CfgT2", topicSysFlag = 0, writeQueueNums = 5}, t)
    assert.equal(3, body.topicConfigTable.CfgT.readQueueNums)
    assert.equal(7, body.topicConfigTable.TBW102.perm)
  end)

  it("answers getBrokerConfig with this broker's own settings", function()
    local db, lib, c, _, ns = start("--default-queues 6 --enable-property-filter")
    local r = req(c, 26, {})
    assert.equal(0, r.code)
    assert.truthy(r.extFields.version:match('^{"counter":0,"timestamp":%d+}$'))
    local cfg = {}
    for k, v in r.body:gmatch("([^=\n]+)=([^\n]*)\n") do cfg[k] = v end
    assert.equal("broker-a", cfg.brokerName)
    assert.equal("DefaultCluster", cfg.brokerClusterName)
    assert.equal(wire.broker_addr(db, 0):match(":(%d+)$"), cfg.listenPort)
    assert.equal(ns, cfg.namesrvAddr)
    assert.equal("6", cfg.defaultTopicQueueNums)
    assert.equal("true", cfg.enablePropertyFilter)
    assert.equal("32", cfg.maxTransferCountOnMessageInMemory)
  end)
end)

describe("devbroker admin: documentation", function()
  it("--help and docs/commands.md list the mqadmin commands served", function()
    local rc, out = helpers.run(helpers.bin .. " broker --help")
    assert.equal(0, rc)
    local readme = helpers.read_file(helpers.root .. "/docs/commands.md")
    for _, cmd in ipairs({"clusterList", "brokerStatus", "topicList", "topicStatus",
                          "getBrokerConfig", "updateSubGroup", "deleteSubGroup",
                          "consumerProgress", "producerConnection", "brokerConsumeStats",
                          "statsAll", "queryMsgByKey", "queryMsgByUniqueKey", "queryMsgById",
                          "deleteTopic"}) do
      assert.truthy(out:find(cmd, 1, true), cmd .. " in --help")
      assert.truthy(readme:find("`" .. cmd .. "`", 1, true), cmd .. " in docs/commands.md")
    end
  end)
end)

describe("devbroker admin: unsupported request codes", function()
  it("answers them REQUEST_CODE_NOT_SUPPORTED and logs each code once, with its name",
     function()
    local pid, out = helpers.spawn_broker("--listen 127.0.0.1:0 --log-level warn")
    helpers.defer(function() helpers.kill(pid) end)
    local ns = wire.ready_ns(out)
    local n = assert(wire.connect(ns))
    helpers.defer(function() n:close() end)
    for _ = 1, 3 do
      local r = req(n, 306, {})
      assert.equal(3, r.code)
      assert.equal(" request type 306 not supported", r.remark)
    end
    assert.equal(3, req(n, 9999, {}).code)
    assert.equal(3, req(n, 9999, {}).code)
    local log
    helpers.wait_until(function()
      log = helpers.read_file(out)
      return log:find("9999", 1, true)
    end, 10, "the log line")
    local _, n306 = log:gsub("request code 306 %(CLEAN_EXPIRED_CONSUMEQUEUE%)", "")
    local _, n9999 = log:gsub("request code 9999 %(unknown code%)", "")
    local _, any = log:gsub("not supported", "")
    assert.equal(1, n306)
    assert.equal(1, n9999)
    assert.equal(2, any)
  end)
end)
