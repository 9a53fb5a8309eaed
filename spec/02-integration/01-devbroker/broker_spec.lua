-- The development broker over real sockets: routes, send/pull, long polling, tag filters,
-- offsets, heartbeats and notifications, send-back/retry/DLQ, locks, unknown codes and garbage.
local helpers = require "helpers"
local wire = require "02-integration.01-devbroker.wire"
local cjson = require "cjson"
local ffi = require "ffi"

local ROUTE, SEND, SEND_V2, PULL = 105, 10, 310, 11
local QUERY_OFF, UPDATE_OFF, MAX_OFF, MIN_OFF, SEARCH_OFF = 14, 15, 30, 31, 29
local HEARTBEAT, UNREGISTER, SEND_BACK, CONSUMER_LIST = 34, 35, 36, 38
local NOTIFY, LOCK, UNLOCK = 40, 41, 42

describe("devbroker", function()
  local db, ns, lib, baddr

  wire.describe_broker("--topic Tq:4 --topic Tf:1 --delay-scale 0.001", function(t)
    db, ns, lib = t.db, t.ns, t.lib
    baddr = wire.broker_addr(db, 0)
  end)

  local function conn(addr)
    local c = assert(wire.connect(addr or baddr))
    return c
  end

  local function send(c, topic, opts)
    local r = assert(c:request(SEND_V2, wire.send_ext(topic, opts), opts and opts.body or "hello"))
    return r
  end

  describe("name server", function()
    it("answers routes in standard JSON for version >= 401", function()
      local c = conn(ns)
      helpers.defer(function() c:close() end)
      local r = assert(c:request(ROUTE, {topic = "Tq"}))
      assert.equal(0, r.code)
      assert.truthy(r.body:find('"brokerAddrs":{"0":"' .. baddr .. '"}', 1, true))
      assert.truthy(r.body:find('"readQueueNums":4', 1, true))
      local route = cjson.decode(r.body)
      assert.equal("broker-a", route.queueDatas[1].brokerName)
      assert.equal(6, route.queueDatas[1].perm)
    end)

    it("answers bare integer keys for old versions unless acceptStandardJsonOnly", function()
      local c = conn(ns)
      helpers.defer(function() c:close() end)
      local r = assert(c:request(ROUTE, {topic = "Tq"}, nil, {version = 317}))
      assert.truthy(r.body:find('"brokerAddrs":{0:"' .. baddr .. '"}', 1, true))
      r = assert(c:request(ROUTE, {topic = "Tq", acceptStandardJsonOnly = "true"}, nil,
                           {version = 317}))
      assert.truthy(r.body:find('"brokerAddrs":{"0":', 1, true))
    end)

    it("answers TOPIC_NOT_EXIST with Java's remark for unknown topics", function()
      local c = conn(ns)
      helpers.defer(function() c:close() end)
      local r = assert(c:request(ROUTE, {topic = "NoSuchTopic"}))
      assert.equal(17, r.code)
      assert.equal("No topic route info in name server for the topic: NoSuchTopic\n" ..
                   "See http://rocketmq.apache.org/docs/faq/ for further details.", r.remark)
    end)

    it("serves TBW102 and auto-creates a topic on the first send with 8 queues", function()
      local c = conn(ns)
      local b = conn()
      helpers.defer(function() c:close(); b:close() end)
      local r = assert(c:request(ROUTE, {topic = "TBW102"}))
      assert.equal(0, r.code)
      assert.equal(8, cjson.decode(r.body).queueDatas[1].writeQueueNums)
      assert.equal(17, assert(c:request(ROUTE, {topic = "AutoT"})).code)
      assert.equal(0, send(b, "AutoT").code)
      r = assert(c:request(ROUTE, {topic = "AutoT"}))
      assert.equal(0, r.code)
      assert.equal(8, cjson.decode(r.body).queueDatas[1].readQueueNums)
    end)

    it("creates and updates topics with UPDATE_AND_CREATE_TOPIC", function()
      local b, c = conn(), conn(ns)
      helpers.defer(function() b:close(); c:close() end)
      local ext = {topic = "Admin1", defaultTopic = "TBW102", readQueueNums = "3",
                   writeQueueNums = "3", perm = "6", topicFilterType = "SINGLE_TAG",
                   topicSysFlag = "0", order = "false"}
      assert.equal(0, assert(b:request(17, ext)).code)
      local rt = cjson.decode(assert(c:request(ROUTE, {topic = "Admin1"})).body)
      assert.equal(3, rt.queueDatas[1].readQueueNums)
      ext.readQueueNums, ext.writeQueueNums, ext.perm = "5", "5", "4"
      assert.equal(0, assert(b:request(17, ext)).code)
      rt = cjson.decode(assert(c:request(ROUTE, {topic = "Admin1"})).body)
      assert.equal(5, rt.queueDatas[1].writeQueueNums)
      assert.equal(4, rt.queueDatas[1].perm)
      -- a read-only topic refuses sends
      local r = send(b, "Admin1")
      assert.equal(16, r.code)
      -- the cluster name is reserved
      ext.topic = "DefaultCluster"
      assert.equal(1, assert(b:request(17, ext)).code)
    end)

    it("answers GET_BROKER_CLUSTER_INFO", function()
      local c = conn(ns)
      helpers.defer(function() c:close() end)
      local r = assert(c:request(106, {}))
      assert.equal(0, r.code)
      assert.truthy(r.body:find('"clusterAddrTable":{"DefaultCluster":["broker-a"]}', 1, true))
      assert.truthy(r.body:find('"brokerAddrs":{0:"' .. baddr .. '"}', 1, true))
    end)
  end)

  describe("send and pull", function()
    it("stores what SEND_MESSAGE_V2 carries and answers like Java", function()
      local c = conn()
      helpers.defer(function() c:close() end)
      local r = send(c, "Tq", {queue = 2, tags = "TagA", keys = "k1 k2", uniq = "AB12",
                               born = 1650000000000, body = "payload"})
      assert.equal(0, r.code)
      assert.equal("2", r.extFields.queueId)
      assert.equal("0", r.extFields.queueOffset)
      assert.equal("DefaultRegion", r.extFields.MSG_REGION)
      assert.equal("true", r.extFields.TRACE_ON)
      assert.equal(32, #r.extFields.msgId)
      local p = assert(c:request(PULL, wire.pull_ext("g_send", "Tq", 2, 0,
                                                      {sys_flag = 4, subscription = "*"})))
      assert.equal(0, p.code)
      assert.equal("FOUND", p.remark)
      assert.equal("1", p.extFields.nextBeginOffset)
      assert.equal("0", p.extFields.minOffset)
      assert.equal("1", p.extFields.maxOffset)
      assert.equal("0", p.extFields.suggestWhichBrokerId)
      local m = wire.decode_messages(p.body)
      assert.equal(1, #m)
      m = m[1]
      assert.equal("payload", m.body)
      assert.equal("Tq", m.topic)
      assert.equal(2, m.queue_id)
      assert.equal(0, m.queue_offset)
      assert.equal(1650000000000, m.born_ts)
      assert.equal("TagA", m.props.TAGS)
      assert.equal("k1 k2", m.props.KEYS)
      assert.equal("AB12", m.props.UNIQ_KEY)
      assert.equal("DefaultCluster", m.props.CLUSTER)
      assert.is_nil(m.props.WAIT)
      assert.same({127, 0, 0, 1}, m.born_host)
      -- offsetMsgId = store host + port + physical offset
      local port = tonumber(baddr:match(":(%d+)$"))
      assert.equal(string.format("7F000001%08X%016X", port, m.phys), r.extFields.msgId)
      -- BODYCRC = crc32(body) & 0x7fffffff; "payload" checked against zlib's value
      assert.equal(m.body_crc, m.body_crc % 2147483648)
    end)

    it("delivers a message with a DELAY level after the (scaled) delay", function()
      local c = conn()
      helpers.defer(function() c:close() end)
      lib.rmq_devbroker_create_topic(db, 0, "Tdelay", 1)
      local r = send(c, "Tdelay", {queue = 0, props = {{"DELAY", "2"}}, body = "later"})
      assert.equal(0, r.code)
      assert.equal("1", r.extFields.queueId) -- SCHEDULE_TOPIC_XXXX queue of level 2
      local m
      helpers.wait_until(function()
        local p = c:request(PULL, wire.pull_ext("g", "Tdelay", 0, 0, {sys_flag = 4, subscription = "*"}))
        if p and p.code == 0 then m = wire.decode_messages(p.body)[1]; return true end
      end, 5, "delayed message")
      assert.equal("later", m.body)
      assert.equal("Tdelay", m.props.REAL_TOPIC)
      assert.equal("0", m.props.REAL_QID)
      assert.equal("2", m.props.DELAY)
    end)

    it("answers SEND_MESSAGE (V1 keys) too", function()
      local c = conn()
      helpers.defer(function() c:close() end)
      local r = assert(c:request(SEND, {producerGroup = "p", topic = "Tq", defaultTopic = "TBW102",
                                        defaultTopicQueueNums = "4", queueId = "3", sysFlag = "0",
                                        bornTimestamp = "1", flag = "7",
                                        properties = wire.props({{"TAGS", "X"}}),
                                        reconsumeTimes = "0", unitMode = "false",
                                        batch = "false"}, "v1"))
      assert.equal(0, r.code)
      assert.equal("3", r.extFields.queueId)
    end)

    it("stores SEND_BATCH_MESSAGE bodies as separate messages", function()
      local c = conn()
      helpers.defer(function() c:close() end)
      lib.rmq_devbroker_create_topic(db, 0, "Tbatch", 1)
      local function inner(body, props)
        local p = wire.props(props)
        local size = 20 + #body + 2 + #p
        return wire.be32(size) .. wire.be32(0) .. wire.be32(0) .. wire.be32(5) ..
               wire.be32(#body) .. body .. string.char(math.floor(#p / 256), #p % 256) .. p
      end
      local body = inner("one", {{"UNIQ_KEY", "U1"}, {"TAGS", "A"}}) ..
                   inner("two", {{"UNIQ_KEY", "U2"}, {"KEYS", "k2"}})
      local ext = wire.send_ext("Tbatch", {queue = 0})
      ext.i = wire.props({{"WAIT", "true"}})
      ext.m = "true"
      local r = assert(c:request(320, ext, body))
      assert.equal(0, r.code)
      assert.equal("0", r.extFields.queueOffset)
      assert.truthy(r.extFields.msgId:match("^%x+,%x+$"))
      local p = assert(c:request(PULL, wire.pull_ext("g", "Tbatch", 0, 0, {sys_flag = 4, subscription = "*"})))
      local ms = wire.decode_messages(p.body)
      assert.equal(2, #ms)
      assert.equal("one", ms[1].body)
      assert.equal("U1", ms[1].props.UNIQ_KEY)
      assert.equal("A", ms[1].props.TAGS)
      assert.equal("DefaultCluster", ms[1].props.CLUSTER)
      assert.is_nil(ms[1].props.WAIT)
      assert.equal("two", ms[2].body)
      assert.equal("k2", ms[2].props.KEYS)
      assert.equal(5, ms[2].flag)
      -- a truncated body is refused
      r = assert(c:request(320, ext, body:sub(1, 30)))
      assert.equal(13, r.code)
      -- batches to a retry topic are refused
      r = assert(c:request(320, wire.send_ext("%RETRY%gb", {queue = 0}), body))
      assert.equal(13, r.code)
    end)

    it("rejects a send with a missing required field", function()
      local c = conn()
      helpers.defer(function() c:close() end)
      local ext = wire.send_ext("Tq")
      ext.b = nil
      local r = assert(c:request(SEND_V2, ext, "x"))
      assert.equal(1, r.code)
      assert.truthy(r.remark:find("<b> is null", 1, true))
    end)

    it("maps store statuses to pull codes as PullMessageProcessor does", function()
      local c = conn()
      helpers.defer(function() c:close() end)
      lib.rmq_devbroker_create_topic(db, 0, "Tstat", 1)
      local function pull(off)
        return assert(c:request(PULL, wire.pull_ext("g_stat", "Tstat", 0, off,
                                                     {sys_flag = 4, subscription = "*"})))
      end
      local r = pull(0)
      assert.equal(19, r.code)
      assert.equal("NO_MESSAGE_IN_QUEUE", r.remark)
      r = pull(5)
      assert.equal(21, r.code)
      assert.equal("0", r.extFields.nextBeginOffset)
      for i = 1, 3 do lib.rmq_devbroker_produce(db, 0, "Tstat", 0, nil, nil, "m", 1) end
      r = pull(3)
      assert.equal(19, r.code)
      assert.equal("OFFSET_OVERFLOW_ONE", r.remark)
      assert.equal("3", r.extFields.nextBeginOffset)
      r = pull(9)
      assert.equal(21, r.code)
      assert.equal("OFFSET_OVERFLOW_BADLY", r.remark)
      assert.equal("0", r.extFields.nextBeginOffset)
      r = pull(1)
      assert.equal(0, r.code)
      assert.equal(2, #wire.decode_messages(r.body))
      -- queue id out of range
      r = assert(c:request(PULL, wire.pull_ext("g_stat", "Tstat", 4, 0,
                                                {sys_flag = 4, subscription = "*"})))
      assert.equal(1, r.code)
      -- unknown topic
      r = assert(c:request(PULL, wire.pull_ext("g_stat", "NoTopic", 0, 0,
                                                {sys_flag = 4, subscription = "*"})))
      assert.equal(17, r.code)
    end)

    it("serves at most maxMsgNums (and 32) messages per pull", function()
      local c = conn()
      helpers.defer(function() c:close() end)
      lib.rmq_devbroker_create_topic(db, 0, "Tmany", 1)
      for i = 1, 40 do lib.rmq_devbroker_produce(db, 0, "Tmany", 0, nil, nil, "m" .. i, #("m" .. i)) end
      local r = assert(c:request(PULL, wire.pull_ext("g", "Tmany", 0, 0,
                                                      {max = 5, sys_flag = 4, subscription = "*"})))
      assert.equal(5, #wire.decode_messages(r.body))
      assert.equal("5", r.extFields.nextBeginOffset)
      r = assert(c:request(PULL, wire.pull_ext("g", "Tmany", 0, 0,
                                                {max = 64, sys_flag = 4, subscription = "*"})))
      local ms = wire.decode_messages(r.body)
      assert.equal(32, #ms)
      assert.equal("m32", ms[32].body)
      assert.equal("32", r.extFields.nextBeginOffset)
    end)

    it("filters by tag code and answers PULL_RETRY_IMMEDIATELY when nothing matched", function()
      local c = conn()
      helpers.defer(function() c:close() end)
      lib.rmq_devbroker_create_topic(db, 0, "Ttag", 1)
      lib.rmq_devbroker_produce(db, 0, "Ttag", 0, "TagB", nil, "b1", 2)
      lib.rmq_devbroker_produce(db, 0, "Ttag", 0, "TagA", nil, "a1", 2)
      lib.rmq_devbroker_produce(db, 0, "Ttag", 0, nil, nil, "n1", 2)
      lib.rmq_devbroker_produce(db, 0, "Ttag", 0, "TagC", nil, "c1", 2)
      local r = assert(c:request(PULL, wire.pull_ext("g", "Ttag", 0, 0,
                                                      {sys_flag = 4, subscription = "TagA || TagC"})))
      local ms = wire.decode_messages(r.body)
      assert.equal(2, #ms)
      assert.equal("a1", ms[1].body)
      assert.equal("c1", ms[2].body)
      assert.equal("4", r.extFields.nextBeginOffset)
      r = assert(c:request(PULL, wire.pull_ext("g", "Ttag", 0, 0,
                                                {sys_flag = 4, subscription = "TagZ"})))
      assert.equal(20, r.code)
      assert.equal("NO_MATCHED_MESSAGE", r.remark)
      assert.equal("4", r.extFields.nextBeginOffset)
    end)

    it("filters with the codeSet registered by heartbeat", function()
      local c = conn()
      helpers.defer(function() c:close() end)
      lib.rmq_devbroker_create_topic(db, 0, "Thb", 1)
      lib.rmq_devbroker_produce(db, 0, "Thb", 0, "TagA", nil, "a", 1)
      lib.rmq_devbroker_produce(db, 0, "Thb", 0, "TagB", nil, "b", 1)
      local body = wire.heartbeat_body("cid-hb", "g_hb",
        {{topic = "Thb", sub = "TagB", tags = {"TagB"}, codes = {2598920}, version = 10}})
      assert.equal(0, assert(c:request(HEARTBEAT, nil, body)).code)
      local r = assert(c:request(PULL, wire.pull_ext("g_hb", "Thb", 0, 0, {sub_version = 10})))
      local ms = wire.decode_messages(r.body)
      assert.equal(1, #ms)
      assert.equal("b", ms[1].body)
      -- a newer subVersion than registered
      r = assert(c:request(PULL, wire.pull_ext("g_hb", "Thb", 0, 0, {sub_version = 11})))
      assert.equal(25, r.code)
      -- a topic the group did not subscribe
      r = assert(c:request(PULL, wire.pull_ext("g_hb", "Tq", 0, 0, {sub_version = 1})))
      assert.equal(24, r.code)
      -- a group without heartbeat
      r = assert(c:request(PULL, wire.pull_ext("g_none", "Tq", 0, 0, {sub_version = 1})))
      assert.equal(24, r.code)
      assert.truthy(r.remark:find("group info not exist", 1, true))
    end)

    it("parks a long-polling pull and answers it when a matching message arrives", function()
      local c = conn()
      local p = conn()
      helpers.defer(function() c:close(); p:close() end)
      lib.rmq_devbroker_create_topic(db, 0, "Tlp", 1)
      local op = c:send_request(PULL, wire.pull_ext("g", "Tlp", 0, 0,
                                                     {sys_flag = 6, subscription = "TagA", suspend = 20000}))
      local f, err = c:read_frame(0.3)
      assert.is_nil(f)
      assert.equal("timeout", err)
      -- a message that does not match leaves it parked
      assert.equal(0, send(p, "Tlp", {tags = "TagB", body = "nope"}).code)
      f, err = c:read_frame(0.3)
      assert.is_nil(f)
      assert.equal(0, send(p, "Tlp", {tags = "TagA", body = "wake"}).code)
      local r = assert(c:wait_response(op, 5))
      assert.equal(0, r.code)
      local ms = wire.decode_messages(r.body)
      assert.equal(1, #ms)
      assert.equal("wake", ms[1].body)
      assert.equal("2", r.extFields.nextBeginOffset)
    end)

    it("answers a parked pull with PULL_NOT_FOUND when its suspend time runs out", function()
      local c = conn()
      helpers.defer(function() c:close() end)
      lib.rmq_devbroker_create_topic(db, 0, "Tlp2", 1)
      local op = c:send_request(PULL, wire.pull_ext("g", "Tlp2", 0, 0,
                                                     {sys_flag = 6, subscription = "*", suspend = 300}))
      local r = assert(c:wait_response(op, 5 * helpers.scale))
      assert.equal(19, r.code)
      assert.equal("NO_MESSAGE_IN_QUEUE", r.remark)
    end)

    it("does not crash when a client with a parked pull goes away", function()
      local c = conn()
      lib.rmq_devbroker_create_topic(db, 0, "Tlp3", 1)
      c:send_request(PULL, wire.pull_ext("g", "Tlp3", 0, 0,
                                          {sys_flag = 6, subscription = "*", suspend = 20000}))
      assert.equal(1, lib.rmq_devbroker_wait(db, 0, PULL, 1, 5000) >= 1 and 1 or 0)
      c:close()
      helpers.sleep(0.1)
      local p = conn()
      helpers.defer(function() p:close() end)
      assert.equal(0, send(p, "Tlp3").code)
    end)
  end)

  describe("offsets", function()
    it("queries, updates and commits offsets", function()
      local c = conn()
      helpers.defer(function() c:close() end)
      local q = {consumerGroup = "g_off", topic = "Tq", queueId = "1"}
      local r = assert(c:request(QUERY_OFF, q))
      -- young queue: offset 0 like the real broker (min offset 0, offset 0 in memory)
      assert.equal(0, r.code)
      assert.equal("0", r.extFields.offset)
      assert(c:oneway(UPDATE_OFF, {consumerGroup = "g_off", topic = "Tq", queueId = "1",
                                   commitOffset = "7"}))
      helpers.wait_until(function()
        return lib.rmq_devbroker_committed_offset(db, 0, "g_off", "Tq", 1) == 7
      end, 5, "committed offset 7")
      r = assert(c:request(QUERY_OFF, q))
      assert.equal("7", r.extFields.offset)
      r = assert(c:request(UPDATE_OFF, {consumerGroup = "g_off", topic = "Tq", queueId = "1",
                                        commitOffset = "9"}))
      assert.equal(0, r.code)
      -- the commit flag of a pull stores commitOffset
      c:request(PULL, wire.pull_ext("g_off", "Tq", 1, 0,
                                     {sys_flag = 5, commit = 11, subscription = "*"}))
      assert.equal(11, tonumber(lib.rmq_devbroker_committed_offset(db, 0, "g_off", "Tq", 1)))
    end)

    it("answers QUERY_NOT_FOUND when the queue's head was dropped", function()
      local db2, lib2, c = wire.start_connected("--max-bytes 2048 --topic Tcap:1")
      local body = string.rep("x", 300)
      for i = 1, 20 do lib2.rmq_devbroker_produce(db2, 0, "Tcap", 0, nil, nil, body, #body) end
      local min = tonumber(lib2.rmq_devbroker_min_offset(db2, 0, "Tcap", 0))
      assert.truthy(min > 0)
      assert.equal(20, tonumber(lib2.rmq_devbroker_max_offset(db2, 0, "Tcap", 0)))
      local r = assert(c:request(QUERY_OFF, {consumerGroup = "g", topic = "Tcap", queueId = "0"}))
      assert.equal(22, r.code)
      r = assert(c:request(MIN_OFF, {topic = "Tcap", queueId = "0"}))
      assert.equal(tostring(min), r.extFields.offset)
      r = assert(c:request(PULL, wire.pull_ext("g", "Tcap", 0, 0, {sys_flag = 4, subscription = "*"})))
      assert.equal(21, r.code)
      assert.equal("OFFSET_TOO_SMALL", r.remark)
      assert.equal(tostring(min), r.extFields.nextBeginOffset)
    end)

    it("answers GET_MAX_OFFSET, GET_MIN_OFFSET and SEARCH_OFFSET_BY_TIMESTAMP", function()
      local c = conn()
      helpers.defer(function() c:close() end)
      lib.rmq_devbroker_create_topic(db, 0, "Toff", 1)
      for i = 1, 3 do lib.rmq_devbroker_produce(db, 0, "Toff", 0, nil, nil, "x", 1) end
      local r = assert(c:request(MAX_OFF, {topic = "Toff", queueId = "0"}))
      assert.equal("3", r.extFields.offset)
      r = assert(c:request(MIN_OFF, {topic = "Toff", queueId = "0"}))
      assert.equal("0", r.extFields.offset)
      r = assert(c:request(SEARCH_OFF, {topic = "Toff", queueId = "0", timestamp = "0"}))
      assert.equal("0", r.extFields.offset)
      r = assert(c:request(SEARCH_OFF, {topic = "Toff", queueId = "0",
                                        timestamp = "99999999999999"}))
      assert.equal("2", r.extFields.offset)
      r = assert(c:request(MAX_OFF, {topic = "NoTopic", queueId = "0"}))
      assert.equal("0", r.extFields.offset)
    end)
  end)

  describe("consumer groups", function()
    it("registers heartbeats, notifies members and lists consumers", function()
      local a, b = conn(), conn()
      helpers.defer(function() a:close(); b:close() end)
      local subs = {{topic = "Tq", version = 5}}
      assert.equal(0, assert(a:request(HEARTBEAT, nil, wire.heartbeat_body("cid-a", "g_grp", subs))).code)
      local r = assert(a:request(CONSUMER_LIST, {consumerGroup = "g_grp"}))
      assert.same({"cid-a"}, cjson.decode(r.body).consumerIdList)
      assert.equal(0, assert(b:request(HEARTBEAT, nil, wire.heartbeat_body("cid-b", "g_grp", subs))).code)
      -- a is told that the group changed
      local n = a.inbox[1] or assert(a:read_frame(5))
      assert.equal(NOTIFY, n.code)
      assert.equal("g_grp", n.extFields.consumerGroup)
      assert.equal(2, n.flag)
      r = assert(a:request(CONSUMER_LIST, {consumerGroup = "g_grp"}))
      local ids = cjson.decode(r.body).consumerIdList
      table.sort(ids)
      assert.same({"cid-a", "cid-b"}, ids)
      -- the retry topic exists now
      local nsc = conn(ns)
      helpers.defer(function() nsc:close() end)
      assert.equal(0, assert(nsc:request(ROUTE, {topic = "%RETRY%g_grp"})).code)
      -- connection list for admins
      r = assert(a:request(203, {consumerGroup = "g_grp"}))
      assert.equal(0, r.code)
      local cc = cjson.decode(r.body)
      assert.equal(2, #cc.connectionSet)
      assert.equal("CLUSTERING", cc.messageModel)
      assert.is_table(cc.subscriptionTable.Tq)
      -- b leaves: a is notified again
      a.inbox = {}
      assert.equal(0, assert(b:request(UNREGISTER, {clientID = "cid-b", consumerGroup = "g_grp"})).code)
      n = assert(a:read_frame(5))
      assert.equal(NOTIFY, n.code)
      assert.equal(1, lib.rmq_devbroker_group_size(db, 0, "g_grp"))
      -- a's connection closes: the group is gone
      a:close()
      helpers.wait_until(function() return lib.rmq_devbroker_group_size(db, 0, "g_grp") == 0 end,
                         5, "group empty")
      r = assert(b:request(CONSUMER_LIST, {consumerGroup = "g_grp"}))
      assert.equal(1, r.code)
      assert.equal("no consumer for this group, g_grp", r.remark)
    end)

    it("expires channels without heartbeat", function()
      local db2, lib2, c = wire.start_connected("--channel-expire-ms 300")
      c:request(HEARTBEAT, nil, wire.heartbeat_body("cid-x", "g_exp", {{topic = "T"}}))
      assert.equal(1, lib2.rmq_devbroker_group_size(db2, 0, "g_exp"))
      helpers.wait_until(function() return lib2.rmq_devbroker_group_size(db2, 0, "g_exp") == 0 end,
                         10, "channel expiry")
    end)
  end)

  describe("admin calls relayed to consumers", function()
    it("relays GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY to the named client", function()
      local consumer, admin, p = conn(), conn(), conn()
      helpers.defer(function() consumer:close(); admin:close(); p:close() end)
      consumer:request(HEARTBEAT, nil, wire.heartbeat_body("cid-ri", "g_ri", {{topic = "Tq"}}))
      local op = admin:send_request(307, {consumerGroup = "g_ri", clientId = "cid-ri",
                                          jstackEnable = "false"})
      local req = assert(consumer:read_frame(5))
      while req.code == NOTIFY do req = assert(consumer:read_frame(5)) end
      assert.equal(307, req.code)
      assert.equal("cid-ri", req.extFields.clientId)
      assert.equal("false", req.extFields.jstackEnable)
      consumer:send_raw(wire.encode(0, nil, '{"jstack":""}', {flag = 1, opaque = req.opaque}))
      local r = assert(admin:wait_response(op, 5))
      assert.equal(0, r.code)
      assert.equal('{"jstack":""}', r.body)
      -- a client that is not there
      r = assert(admin:request(307, {consumerGroup = "g_ri", clientId = "nobody",
                                     jstackEnable = "false"}))
      assert.equal(1, r.code)
      assert.equal("The Consumer <g_ri> <nobody> not online", r.remark)
      -- consume a stored message directly
      local s = send(p, "Tq", {queue = 0, body = "direct", tags = "TagD"})
      op = admin:send_request(309, {consumerGroup = "g_ri", clientId = "cid-ri",
                                    msgId = s.extFields.msgId})
      req = assert(consumer:read_frame(5))
      assert.equal(309, req.code)
      assert.equal("broker-a", req.extFields.brokerName)
      local m = wire.decode_messages(req.body)
      assert.equal(1, #m)
      assert.equal("direct", m[1].body)
      assert.equal("TagD", m[1].props.TAGS)
      consumer:send_raw(wire.encode(0, nil, '{"consumeResult":"CR_SUCCESS"}',
                                    {flag = 1, opaque = req.opaque}))
      r = assert(admin:wait_response(op, 5))
      assert.equal(0, r.code)
      assert.truthy(r.body:find("CR_SUCCESS", 1, true))
    end)

    it("answers GET_CONSUME_STATS with the group's offsets", function()
      local c = conn()
      helpers.defer(function() c:close() end)
      lib.rmq_devbroker_create_topic(db, 0, "Tcs", 2)
      for i = 1, 3 do lib.rmq_devbroker_produce(db, 0, "Tcs", 0, nil, nil, "x", 1) end
      c:request(UPDATE_OFF, {consumerGroup = "g_cs", topic = "Tcs", queueId = "0", commitOffset = "2"})
      local r = assert(c:request(208, {consumerGroup = "g_cs", topic = "Tcs"}))
      assert.equal(0, r.code)
      assert.truthy(r.body:find('{"brokerName":"broker-a","queueId":0,"topic":"Tcs"}:{"brokerOffset":3,"consumerOffset":2,"lastTimestamp":', 1, true))
      assert.truthy(r.body:find('{"brokerName":"broker-a","queueId":1,"topic":"Tcs"}:{"brokerOffset":0,"consumerOffset":0,"lastTimestamp":0}', 1, true))
      assert.truthy(r.body:find('^{"consumeTps":0.0,"offsetTable":{'))
    end)
  end)

  describe("send back", function()
    it("re-stores a failed message in %RETRY%group after its delay level", function()
      local c = conn()
      helpers.defer(function() c:close() end)
      lib.rmq_devbroker_create_topic(db, 0, "Tsb", 1)
      send(c, "Tsb", {tags = "TagA", uniq = "UNIQ1", body = "retry-me"})
      local r = assert(c:request(PULL, wire.pull_ext("g_sb", "Tsb", 0, 0, {sys_flag = 4, subscription = "*"})))
      local m = wire.decode_messages(r.body)[1]
      r = assert(c:request(SEND_BACK, {offset = tostring(m.phys), group = "g_sb", delayLevel = "0",
                                       originMsgId = "UNIQ1", originTopic = "Tsb",
                                       unitMode = "false", maxReconsumeTimes = "16"}))
      assert.equal(0, r.code)
      -- level 3 = 10 s, scaled by 0.001
      local rm
      helpers.wait_until(function()
        r = c:request(PULL, wire.pull_ext("g_sb", "%RETRY%g_sb", 0, 0, {sys_flag = 4, subscription = "*"}))
        if r and r.code == 0 then rm = wire.decode_messages(r.body)[1]; return true end
      end, 10, "retry message")
      assert.equal("retry-me", rm.body)
      assert.equal("%RETRY%g_sb", rm.topic)
      assert.equal(1, rm.reconsume)
      assert.equal("Tsb", rm.props.RETRY_TOPIC)
      assert.equal("UNIQ1", rm.props.UNIQ_KEY)
      assert.equal("3", rm.props.DELAY)
      assert.equal("false", rm.props.WAIT)
      assert.equal(32, #rm.props.ORIGIN_MESSAGE_ID)
      assert.equal(m.born_ts, rm.born_ts)
      -- second failure: keeps ORIGIN_MESSAGE_ID and RETRY_TOPIC, level 4
      r = assert(c:request(SEND_BACK, {offset = tostring(rm.phys), group = "g_sb", delayLevel = "0",
                                       unitMode = "false", maxReconsumeTimes = "16"}))
      assert.equal(0, r.code)
      local rm2
      helpers.wait_until(function()
        r = c:request(PULL, wire.pull_ext("g_sb", "%RETRY%g_sb", 0, 1, {sys_flag = 4, subscription = "*"}))
        if r and r.code == 0 then rm2 = wire.decode_messages(r.body)[1]; return true end
      end, 10, "second retry")
      assert.equal(2, rm2.reconsume)
      assert.equal("4", rm2.props.DELAY)
      assert.equal(rm.props.ORIGIN_MESSAGE_ID, rm2.props.ORIGIN_MESSAGE_ID)
      assert.equal("Tsb", rm2.props.RETRY_TOPIC)
    end)

    it("sends to %DLQ%group when reconsumeTimes reaches the maximum or delayLevel < 0", function()
      local c = conn()
      helpers.defer(function() c:close() end)
      lib.rmq_devbroker_create_topic(db, 0, "Tdlq", 1)
      send(c, "Tdlq", {body = "d1"})
      send(c, "Tdlq", {body = "d2"})
      local r = assert(c:request(PULL, wire.pull_ext("g_dlq", "Tdlq", 0, 0, {sys_flag = 4, subscription = "*"})))
      local ms = wire.decode_messages(r.body)
      r = assert(c:request(SEND_BACK, {offset = tostring(ms[1].phys), group = "g_dlq", delayLevel = "0",
                                       unitMode = "false", maxReconsumeTimes = "0"}))
      assert.equal(0, r.code)
      r = assert(c:request(SEND_BACK, {offset = tostring(ms[2].phys), group = "g_dlq", delayLevel = "-1",
                                       unitMode = "false"}))
      assert.equal(0, r.code)
      r = assert(c:request(PULL, wire.pull_ext("g_dlq", "%DLQ%g_dlq", 0, 0, {sys_flag = 4, subscription = "*"})))
      assert.equal(0, r.code)
      local d = wire.decode_messages(r.body)
      assert.equal(2, #d)
      assert.equal("d1", d[1].body)
      assert.equal("d2", d[2].body)
      assert.equal(1, d[1].reconsume)
      assert.equal("Tdlq", d[1].props.RETRY_TOPIC)
      -- a message resent to %RETRY% past its maximum goes to the DLQ as well
      r = send(c, "%RETRY%g_dlq", {reconsume = 3, max_reconsume = 3, queue = 0, body = "d3"})
      assert.equal(0, r.code)
      assert.equal(3, tonumber(lib.rmq_devbroker_max_offset(db, 0, "%DLQ%g_dlq", 0)))
      -- an unknown offset is an error
      r = assert(c:request(SEND_BACK, {offset = "999999999", group = "g_dlq", delayLevel = "0",
                                       unitMode = "false"}))
      assert.equal(1, r.code)
    end)
  end)

  describe("locks", function()
    local function body(client, qids)
      local set = {}
      for _, q in ipairs(qids) do set[#set + 1] = {topic = "Tq", brokerName = "broker-a", queueId = q} end
      return cjson.encode({consumerGroup = "g_lock", clientId = client, mqSet = set})
    end

    it("grants each queue to one client until unlocked or expired", function()
      local c = conn()
      helpers.defer(function() c:close() end)
      local r = assert(c:request(LOCK, nil, body("c1", {0, 1})))
      assert.equal(0, r.code)
      assert.equal(2, #cjson.decode(r.body).lockOKMQSet)
      r = assert(c:request(LOCK, nil, body("c2", {1, 2})))
      local ok = cjson.decode(r.body).lockOKMQSet
      assert.equal(1, #ok)
      assert.equal(2, ok[1].queueId)
      local buf = ffi.new("char[128]")
      assert.truthy(lib.rmq_devbroker_lock_owner(db, 0, "g_lock", "Tq", 1, buf, 128) > 0)
      assert.equal("c1", ffi.string(buf))
      r = assert(c:request(UNLOCK, nil, body("c1", {1})))
      assert.equal(0, r.code)
      r = assert(c:request(LOCK, nil, body("c2", {1})))
      assert.equal(1, #cjson.decode(r.body).lockOKMQSet)
    end)

    it("lets another client take an expired lock", function()
      local _, _, c = wire.start_connected("--lock-expire-ms 200 --topic Tq:4")
      assert.equal(1, #cjson.decode(assert(c:request(LOCK, nil, body("c1", {0}))).body).lockOKMQSet)
      assert.equal(0, #cjson.decode(assert(c:request(LOCK, nil, body("c2", {0}))).body).lockOKMQSet)
      helpers.sleep(0.4)
      assert.equal(1, #cjson.decode(assert(c:request(LOCK, nil, body("c2", {0}))).body).lockOKMQSet)
    end)
  end)

  describe("robustness", function()
    it("answers REQUEST_CODE_NOT_SUPPORTED for unknown codes", function()
      local c = conn()
      helpers.defer(function() c:close() end)
      local r = assert(c:request(9999, {}))
      assert.equal(3, r.code)
      assert.equal(" request type 9999 not supported", r.remark)
    end)

    it("closes the connection on garbage and keeps serving others", function()
      for _, junk in ipairs({"\0\0\0\5\0\0\0\1x", "\255\255\255\255garbage", "\0\0\0\20\1\0\0\200abcdefghijklmnop",
                             "\0\0\0\12\0\0\0\4{{{{" .. "\0\0\0\0"}) do
        local c = conn()
        c:send_raw(junk)
        local f, err = c:read_frame(2)
        assert.is_nil(f)
        assert.equal("closed", err)
        c:close()
      end
      local c = conn()
      helpers.defer(function() c:close() end)
      assert.equal(0, send(c, "Tq").code)
    end)

    it("survives random frames with valid framing", function()
      math.randomseed(42)
      for i = 1, 50 do
        local c = conn()
        local n = math.random(0, 200)
        local t = {}
        for k = 1, n do t[k] = string.char(math.random(0, 255)) end
        local junk = table.concat(t)
        c:send_raw(wire.be32(#junk + 4) .. wire.be32(math.random(0, 300)) .. junk)
        c:read_frame(0.05)
        c:close()
      end
      -- valid headers with random codes and junk fields
      local c = conn()
      helpers.defer(function() c:close() end)
      for code = 0, 400 do
        c:send_request(code, {topic = "Tq", queueId = "x", consumerGroup = "", offset = "-1"}, "{")
      end
      assert.equal(0, send(c, "Tq").code)
    end)
  end)

  describe("controls", function()
    it("injects errors, disconnects and latency, and counts requests", function()
      local c = conn(ns)
      helpers.defer(function() c:close() end)
      lib.rmq_devbroker_reset_counts(db)
      assert.equal(0, lib.rmq_devbroker_push_error(db, wire.NAMESRV, ROUTE, 14, 1))
      local r = assert(c:request(ROUTE, {topic = "Tq"}))
      assert.equal(14, r.code)
      assert.equal(0, assert(c:request(ROUTE, {topic = "Tq"})).code)
      assert.equal(2, lib.rmq_devbroker_count(db, wire.NAMESRV, ROUTE))
      assert.equal(2, lib.rmq_devbroker_wait(db, wire.ALL, ROUTE, 2, 1000))
      assert.equal(-1, lib.rmq_devbroker_wait(db, wire.ALL, ROUTE, 3, 50))
      local buf = ffi.new("char[64]")
      assert.equal(2, lib.rmq_devbroker_request_ext(db, wire.NAMESRV, ROUTE, -1, "topic", buf, 64))
      assert.equal("Tq", ffi.string(buf))
      lib.rmq_devbroker_push_error(db, wire.NAMESRV, ROUTE, wire.DISCONNECT, 1)
      local _, err = c:request(ROUTE, {topic = "Tq"})
      assert.equal("closed", err)
      c = conn(ns)
      lib.rmq_devbroker_set_latency(db, wire.NAMESRV, ROUTE, 300)
      local op = c:send_request(ROUTE, {topic = "Tq"})
      assert.is_nil(c:read_frame(0.1))
      assert.equal(0, assert(c:wait_response(op, 5)).code)
      lib.rmq_devbroker_set_latency(db, wire.NAMESRV, ROUTE, 0)
    end)

    it("takes a broker down and up again", function()
      local c = conn(ns)
      helpers.defer(function() c:close() end)
      assert.equal(0, lib.rmq_devbroker_set_down(db, 0, 1))
      assert.equal(17, assert(c:request(ROUTE, {topic = "Tq"})).code)
      assert.is_nil(wire.connect(baddr))
      assert.equal(0, lib.rmq_devbroker_set_down(db, 0, 0))
      assert.equal(0, assert(c:request(ROUTE, {topic = "Tq"})).code)
      local b = conn()
      helpers.defer(function() b:close() end)
      assert.equal(0, send(b, "Tq").code)
    end)
  end)
end)
