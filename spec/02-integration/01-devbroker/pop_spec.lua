-- RocketMQ 5.x mode of the development broker: the message request modes
-- (SET_MESSAGE_REQUEST_MODE / GET_ALL_MESSAGE_REQUEST_MODE), QUERY_ASSIGNMENT in PULL and POP
-- modes, POP_MESSAGE with long polling and expressions, ACK_MESSAGE,
-- CHANGE_MESSAGE_INVISIBLETIME and the revive of un-acked messages; order=true pops
-- (ConsumerOrderInfoManager: one batch per queue outstanding). Header and body fields are
-- named as the Java 5.x classes name them (PopMessageRequestHeader / ResponseHeader,
-- AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader / ResponseHeader,
-- QueryAssignmentRequestBody / ResponseBody, SetMessageRequestModeRequestBody).
local helpers = require "helpers"
local cjson = require "cjson"
local wire = require "02-integration.01-devbroker.wire"

local PULL, HEARTBEAT, RUNTIME_INFO, ROUTE = 11, 34, 28, 105
local QUERY_ASSIGNMENT, SET_MODE, GET_ALL_MODES = 400, 401, 402
local POP, ACK, CHANGE_INVISIBLE, BATCH_ACK = 200050, 200051, 200053, 200151
local POLLING_TIMEOUT = 210

describe("devbroker: RocketMQ 5.x mode", function()
  local db, ns, lib, c

  lazy_setup(function()
    wire.quiet()
    db, ns, lib = wire.start("--rocketmq-version 5 --topic Tpop:2 --topic Tlong:1 --topic Trev:1 --topic Tinv:1 " ..
                            "--topic Tack:1 --topic Tbatch:1 --topic Tassign:4 --topic Tshare:2 --topic Texp:1 " ..
                            "--topic Tord:2 --topic Tordre:1 --topic Tordinv:1")
    c = assert(wire.connect(wire.broker_addr(db, 0)))
  end)
  lazy_teardown(function()
    if c then c:close() end
    if db then lib.rmq_devbroker_stop(db) end
  end)

  local function produce(topic, q, tags, body)
    assert(lib.rmq_devbroker_produce(db, 0, topic, q, tags, nil, body, #body) >= 0)
  end

  local function pop_ext(group, topic, opts)
    opts = opts or {}
    return {consumerGroup = group, topic = topic, queueId = tostring(opts.queue or -1),
            maxMsgNums = tostring(opts.max or 32),
            invisibleTime = tostring(opts.invisible or 60000),
            pollTime = tostring(opts.poll or 0), bornTime = tostring(os.time() * 1000),
            initMode = tostring(opts.init or 0), expType = opts.exp_type, exp = opts.exp,
            order = opts.order and "true" or nil}
  end

  local function pop(group, topic, opts)
    return assert(c:request(POP, pop_ext(group, topic, opts)))
  end

  -- ExtraInfoUtil.buildExtraInfo of a popped message, as the Java client builds it.
  local function extra_info(r, m)
    local retry = m.topic:find("^%%RETRY%%") and "1" or "0"
    local start = r.extFields.startOffsetInfo:match(retry .. " " .. m.queue_id .. " (%d+)")
    return table.concat({start, r.extFields.popTime, r.extFields.invisibleTime,
                         r.extFields.reviveQid, retry, "broker-a", m.queue_id,
                         string.format("%d", m.queue_offset)}, " ")
  end

  local function ack_ext(group, r, m)
    return {consumerGroup = group, topic = m.topic, queueId = tostring(m.queue_id),
            extraInfo = extra_info(r, m), offset = string.format("%d", m.queue_offset)}
  end

  local function bodies(msgs)
    local out = {}
    for _, m in ipairs(msgs) do out[#out + 1] = m.body end
    table.sort(out)
    return out
  end

  -- fastjson's Long map keys written bare ({0:"..."}) read as strings ({"0":"..."}).
  local function json(body) return cjson.decode((body:gsub("([{,])(%d+):", '%1"%2":'))) end

  describe("version and route", function()
    it("answer as a 5.3.3 broker and name server, and as 4.9.4 without the option", function()
      local kv = json(assert(c:request(RUNTIME_INFO)).body).table
      assert.equal("V5_3_3", kv.brokerVersionDesc)
      assert.equal("479", kv.brokerVersion)
      local nsc = assert(wire.connect(ns))
      helpers.defer(function() nsc:close() end)
      local r = assert(nsc:request(ROUTE, {topic = "Tpop"}))
      assert.equal(0, r.code)
      local bd = json(r.body).brokerDatas[1]
      assert.equal("broker-a", bd.brokerName)
      assert.equal(false, bd.enableActingMaster)
      -- a 4.9.4 development broker (the default): its answers as before, and no 5.x request
      local db4, ns4 = wire.start("--topic Tpop:2")
      helpers.defer(function() lib.rmq_devbroker_stop(db4) end)
      local c4 = assert(wire.connect(wire.broker_addr(db4, 0)))
      local n4 = assert(wire.connect(ns4))
      helpers.defer(function() c4:close(); n4:close() end)
      kv = json(assert(c4:request(RUNTIME_INFO)).body).table
      assert.equal("V4_9_4", kv.brokerVersionDesc)
      assert.equal("401", kv.brokerVersion)
      bd = json(assert(n4:request(ROUTE, {topic = "Tpop"})).body).brokerDatas[1]
      assert.is_nil(bd.enableActingMaster)
      for _, code in ipairs({POP, ACK, BATCH_ACK, CHANGE_INVISIBLE, QUERY_ASSIGNMENT, SET_MODE,
                             GET_ALL_MODES}) do
        r = assert(c4:request(code, {}))
        assert.equal(3, r.code)
        assert.equal(" request type " .. code .. " not supported", r.remark)
      end
    end)

    it("is served by `rmqlua broker --rocketmq-version 5`, as mqadmin setConsumeMode needs",
       function()
      local rc, out = helpers.run(helpers.bin .. " broker --help")
      assert.equal(0, rc)
      assert.truthy(out:find("--rocketmq-version 4|5", 1, true))
      local pid, log = helpers.spawn_broker("--listen 127.0.0.1:0 --topic CliPop:2 " ..
                                            "--rocketmq-version 5 --log-level warn")
      local nsc = assert(wire.connect(wire.ready_ns(log)))
      helpers.defer(function() nsc:close() end)
      local route = json(assert(nsc:request(ROUTE, {topic = "CliPop"})).body)
      local addr = route.brokerDatas[1].brokerAddrs["0"]
      local bc = assert(wire.connect(addr))
      helpers.defer(function() bc:close() end)
      -- the body MQClientAPIImpl.setMessageRequestMode sends
      local r = assert(bc:request(SET_MODE, nil, cjson.encode({topic = "CliPop",
        consumerGroup = "g_cli", mode = "POP", popShareQueueNum = 1})))
      assert.equal(0, r.code)
      r = assert(bc:request(GET_ALL_MODES))
      assert.equal("POP", cjson.decode(r.body).messageRequestModeMap.CliPop.g_cli.mode)
      helpers.kill(pid)
    end)

    it("refuses a version it does not serve", function()
      local ffi = require "ffi"
      local err = ffi.new("char[512]")
      assert.is_true(lib.rmq_devbroker_start("--rocketmq-version 6", err, 512) == nil)
      assert.equal("--rocketmq-version: '6' is neither 4 nor 5", ffi.string(err))
    end)
  end)

  describe("message request modes", function()
    it("are set, read back and refused for retry topics", function()
      local r = assert(c:request(GET_ALL_MODES))
      assert.equal(0, r.code)
      assert.same({messageRequestModeMap = {}}, cjson.decode(r.body))
      r = assert(c:request(SET_MODE, nil, cjson.encode({topic = "Tpop", consumerGroup = "g_mode",
                                                        mode = "POP", popShareQueueNum = 2})))
      assert.equal(0, r.code)
      r = assert(c:request(SET_MODE, nil, cjson.encode({topic = "Tpop", consumerGroup = "g_mode2",
                                                        mode = "PULL"})))
      assert.equal(0, r.code)
      r = assert(c:request(GET_ALL_MODES))
      assert.equal(0, r.code)
      assert.same({messageRequestModeMap = {Tpop = {
        g_mode = {topic = "Tpop", consumerGroup = "g_mode", mode = "POP", popShareQueueNum = 2},
        g_mode2 = {topic = "Tpop", consumerGroup = "g_mode2", mode = "PULL",
                   popShareQueueNum = 0}}}}, cjson.decode(r.body))
      r = assert(c:request(SET_MODE, nil, cjson.encode({topic = "%RETRY%g_mode",
                                                        consumerGroup = "g_mode", mode = "POP"})))
      assert.equal(16, r.code)
      assert.equal("retry topic is not allowed to set mode", r.remark)
      r = assert(c:request(SET_MODE, nil, cjson.encode({topic = "Tpop", consumerGroup = "g_mode",
                                                        mode = "PUSH"})))
      assert.equal(1, r.code)
      assert.matches("mode PUSH is neither PULL nor POP", r.remark, 1, true)
      r = assert(c:request(SET_MODE, nil, "{not json"))
      assert.equal(1, r.code)
      assert.matches("bad SetMessageRequestModeRequestBody", r.remark, 1, true)
    end)
  end)

  describe("QUERY_ASSIGNMENT", function()
    local function join(conn, cid, group, topic)
      local body = wire.heartbeat_body(cid, group, {{topic = topic}})
      assert.equal(0, assert(conn:request(HEARTBEAT, nil, body)).code)
    end

    local function assigned(conn, cid, group, topic)
      local r = assert(conn:request(QUERY_ASSIGNMENT, nil, cjson.encode({
        topic = topic, consumerGroup = group, clientId = cid, strategyName = "AVG",
        messageModel = "CLUSTERING"})))
      assert.equal(0, r.code)
      local out = {}
      for _, a in ipairs(cjson.decode(r.body).messageQueueAssignments) do
        assert.equal(topic, a.messageQueue.topic)
        assert.equal("broker-a", a.messageQueue.brokerName)
        out[#out + 1] = a.mode .. ":" .. a.messageQueue.queueId
      end
      table.sort(out)
      return out
    end

    it("shares the queues averagely in PULL mode and hands out all in POP mode", function()
      local a = assert(wire.connect(wire.broker_addr(db, 0)))
      local b = assert(wire.connect(wire.broker_addr(db, 0)))
      local x = assert(wire.connect(wire.broker_addr(db, 0)))
      helpers.defer(function() a:close(); b:close(); x:close() end)
      join(a, "cid-a", "g_assign", "Tassign")
      join(b, "cid-b", "g_assign", "Tassign")
      -- no mode set: PULL, AllocateMessageQueueAveragely over sorted queues and clients
      assert.same({"PULL:0", "PULL:1"}, assigned(a, "cid-a", "g_assign", "Tassign"))
      assert.same({"PULL:2", "PULL:3"}, assigned(b, "cid-b", "g_assign", "Tassign"))
      -- POP, popShareQueueNum 0: every client pops from every queue (queue -1)
      assert.equal(0, assert(c:request(SET_MODE, nil, cjson.encode({
        topic = "Tassign", consumerGroup = "g_assign", mode = "POP"}))).code)
      assert.same({"POP:-1"}, assigned(a, "cid-a", "g_assign", "Tassign"))
      assert.same({"POP:-1"}, assigned(b, "cid-b", "g_assign", "Tassign"))
      -- POP, popShareQueueNum 1: its own share and the next client's
      assert.equal(0, assert(c:request(SET_MODE, nil, cjson.encode({
        topic = "Tassign", consumerGroup = "g_assign", mode = "POP",
        popShareQueueNum = 1}))).code)
      assert.same({"POP:0", "POP:1", "POP:2", "POP:3"}, assigned(a, "cid-a", "g_assign", "Tassign"))
      -- back to PULL
      assert.equal(0, assert(c:request(SET_MODE, nil, cjson.encode({
        topic = "Tassign", consumerGroup = "g_assign", mode = "PULL"}))).code)
      assert.same({"PULL:2", "PULL:3"}, assigned(b, "cid-b", "g_assign", "Tassign"))
      -- a client that is not in the group gets nothing
      assert.same({}, assigned(x, "cid-x", "g_assign", "Tassign"))
    end)

    it("gives more consumers than queues all work in POP mode", function()
      local conns = {}
      helpers.defer(function() for _, k in ipairs(conns) do k:close() end end)
      for i = 1, 3 do
        conns[i] = assert(wire.connect(wire.broker_addr(db, 0)))
        join(conns[i], "cid-" .. i, "g_share", "Tshare")
      end
      -- PULL: the third client of a two-queue topic is idle
      assert.same({}, assigned(conns[3], "cid-3", "g_share", "Tshare"))
      assert.equal(0, assert(c:request(SET_MODE, nil, cjson.encode({
        topic = "Tshare", consumerGroup = "g_share", mode = "POP"}))).code)
      for i = 1, 3 do
        assert.same({"POP:-1"}, assigned(conns[i], "cid-" .. i, "g_share", "Tshare"))
      end
    end)

    it("answers a bad body and an unknown topic", function()
      local r = assert(c:request(QUERY_ASSIGNMENT, nil, cjson.encode({topic = "Tassign"})))
      assert.equal(1, r.code)
      assert.equal("bad QueryAssignmentRequestBody: no consumerGroup", r.remark)
      r = assert(c:request(QUERY_ASSIGNMENT, nil, cjson.encode({
        topic = "NoSuchTopic", consumerGroup = "g", clientId = "cid"})))
      assert.equal(22, r.code)
    end)
  end)

  describe("POP_MESSAGE", function()
    it("pops from every queue with the PopMessageResponseHeader fields", function()
      produce("Tpop", 0, "TagA", "p0")
      produce("Tpop", 1, "TagA", "p1")
      produce("Tpop", 1, "TagB", "p2")
      local r = pop("g_pop", "Tpop")
      assert.equal(0, r.code)
      local msgs = wire.decode_messages(r.body)
      assert.same({"p0", "p1", "p2"}, bodies(msgs))
      assert.equal("60000", r.extFields.invisibleTime)
      assert.equal("0", r.extFields.reviveQid)
      assert.equal("0", r.extFields.restNum)
      assert.truthy(tonumber(r.extFields.popTime) > 0)
      -- "<retry> <queueId> <startOffset>" and "<retry> <queueId> <offset>,<offset>" per queue
      local starts, offs = {}, {}
      for s in r.extFields.startOffsetInfo:gmatch("[^;]+") do starts[#starts + 1] = s end
      for s in r.extFields.msgOffsetInfo:gmatch("[^;]+") do offs[#offs + 1] = s end
      table.sort(starts)
      table.sort(offs)
      assert.same({"0 0 0", "0 1 0"}, starts)
      assert.same({"0 0 0", "0 1 0,1"}, offs)
      -- the group's offsets moved: nothing more
      r = pop("g_pop", "Tpop")
      assert.equal(POLLING_TIMEOUT, r.code)
      assert.equal("0", r.extFields.restNum)
      -- a pop of one queue, with initMode MAX for a new group
      produce("Tpop", 1, "TagA", "p3")
      r = pop("g_pop_max", "Tpop", {queue = 1, init = 1})
      assert.equal(POLLING_TIMEOUT, r.code)
      produce("Tpop", 1, "TagA", "p4")
      r = pop("g_pop_max", "Tpop", {queue = 1, init = 1})
      assert.equal(0, r.code)
      assert.same({"p4"}, bodies(wire.decode_messages(r.body)))
      -- 4.x requests are answered as before
      r = assert(c:request(PULL, wire.pull_ext("g_pull4", "Tpop", 1, 0, {sys_flag = 4,
                                                                          subscription = "*"})))
      assert.equal(0, r.code)
      assert.same({"p1", "p2", "p3", "p4"}, bodies(wire.decode_messages(r.body)))
    end)

    it("counts the 5.x requests for rmq_devbroker_count and rmq_devbroker_wait", function()
      local pops = lib.rmq_devbroker_count(db, wire.ALL, POP)
      local acks = lib.rmq_devbroker_count(db, 0, BATCH_ACK)
      pop("g_count", "Tpop")
      assert(c:request(BATCH_ACK, nil, cjson.encode({acks = {}})))
      assert.equal(pops + 1, lib.rmq_devbroker_wait(db, 0, POP, pops + 1, 5000))
      assert.equal(acks + 1, lib.rmq_devbroker_count(db, 0, BATCH_ACK))
      assert.equal(0, lib.rmq_devbroker_count(db, 0, 200059))
    end)

    it("filters by the request's tag or SQL92 expression", function()
      produce("Texp", 0, "TagA", "a1")
      produce("Texp", 0, "TagB", "b1")
      produce("Texp", 0, "TagA", "a2")
      local r = pop("g_exp", "Texp", {exp_type = "TAG", exp = "TagA"})
      assert.equal(0, r.code)
      assert.same({"a1", "a2"}, bodies(wire.decode_messages(r.body)))
      assert.equal("0 0 0,2", r.extFields.msgOffsetInfo)
      r = pop("g_exp2", "Texp", {exp_type = "SQL92", exp = "TAGS = 'TagB'"})
      assert.equal(0, r.code)
      assert.same({"b1"}, bodies(wire.decode_messages(r.body)))
      r = pop("g_exp3", "Texp", {exp_type = "SQL92", exp = "a >"})
      assert.equal(23, r.code)
      assert.equal("parse the consumer's subscription failed", r.remark)
    end)

    it("refuses bad requests as the Java processor does", function()
      local ext = pop_ext("g_bad", "Tpop")
      ext.invisibleTime = nil
      local r = assert(c:request(POP, ext))
      assert.equal(1, r.code)
      assert.matches("the custom field <invisibleTime> is null", r.remark, 1, true)
      r = pop("g_bad", "Tpop", {max = 33})
      assert.equal(13, r.code)
      assert.matches("pop message's num is greater than 32", r.remark, 1, true)
      r = pop("g_bad", "NoSuchTopic")
      assert.equal(17, r.code)
      r = pop("g_bad", "Tpop", {queue = 7})
      assert.equal(1, r.code)
      assert.matches("queueId[7] is illegal", r.remark, 1, true)
    end)

    it("long polls until a message arrives or its poll time ends", function()
      local op = c:send_request(POP, pop_ext("g_long", "Tlong", {poll = 30000}))
      -- still parked: a request sent after it is answered first
      local r = assert(c:request(GET_ALL_MODES))
      assert.equal(0, r.code)
      produce("Tlong", 0, "TagA", "late")
      r = assert(c:wait_response(op, 10 * helpers.scale))
      assert.equal(0, r.code)
      assert.same({"late"}, bodies(wire.decode_messages(r.body)))
      -- nothing arrives: POLLING_TIMEOUT once the poll time is over
      r = assert(c:request(POP, pop_ext("g_long", "Tlong", {poll = 300})))
      assert.equal(POLLING_TIMEOUT, r.code)
      -- a parked pop whose connection closes is dropped
      local d = assert(wire.connect(wire.broker_addr(db, 0)))
      d:send_request(POP, pop_ext("g_long", "Tlong", {poll = 30000}))
      assert.equal(0, assert(d:request(GET_ALL_MODES)).code)
      d:close()
      produce("Tlong", 0, "TagA", "after")
      r = pop("g_long", "Tlong")
      assert.equal(0, r.code)
      assert.same({"after"}, bodies(wire.decode_messages(r.body)))
    end)
  end)

  describe("invisible time and revive", function()
    it("delivers an un-acked message again from the retry topic with its reconsume count + 1",
       function()
      produce("Trev", 0, "TagA", "again")
      local r = pop("g_rev", "Trev", {invisible = 1000})
      assert.equal(0, r.code)
      local first = wire.decode_messages(r.body)[1]
      assert.equal(0, first.reconsume)
      local pop_time = r.extFields.popTime
      local m
      r = helpers.wait_until(function()
        local x = pop("g_rev", "Trev", {invisible = 60000})
        if x.code == 0 then return x end
        assert.equal(POLLING_TIMEOUT, x.code)
      end, 15, "the revived message")
      m = wire.decode_messages(r.body)[1]
      assert.equal("again", m.body)
      assert.equal("%RETRY%g_rev_Trev", m.topic)
      assert.equal(1, m.reconsume)
      assert.equal(pop_time, wire.parse_props(m.props_raw)["1ST_POP_TIME"])
      assert.equal("1 0 0", r.extFields.msgOffsetInfo)
      assert.equal("1 0 0", r.extFields.startOffsetInfo)
      -- acked from the retry topic: it does not come back
      assert.equal(0, assert(c:request(ACK, ack_ext("g_rev", r, m))).code)
    end)

    it("acks: an acked message is not revived", function()
      produce("Tack", 0, "TagA", "k1")
      produce("Tack", 0, "TagA", "k2")
      local r = pop("g_ack", "Tack", {invisible = 1000})
      assert.equal(0, r.code)
      local msgs = wire.decode_messages(r.body)
      assert.equal(2, #msgs)
      -- the first acked, the second not: only the second comes back
      assert.equal(0, assert(c:request(ACK, ack_ext("g_ack", r, msgs[1]))).code)
      local again = helpers.wait_until(function()
        local x = pop("g_ack", "Tack")
        if x.code == 0 then return x end
      end, 15, "the un-acked message")
      local back = wire.decode_messages(again.body)
      assert.same({msgs[2].body}, bodies(back))
      assert.equal(0, assert(c:request(ACK, ack_ext("g_ack", again, back[1]))).code)
      -- bad acks
      local ext = ack_ext("g_ack", r, msgs[1])
      ext.extraInfo = nil
      local x = assert(c:request(ACK, ext))
      assert.equal(1, x.code)
      assert.matches("the custom field <extraInfo> is null", x.remark, 1, true)
      ext = ack_ext("g_ack", r, msgs[1])
      ext.queueId = "5"
      x = assert(c:request(ACK, ext))
      assert.equal(13, x.code)
      ext = ack_ext("g_ack", r, msgs[1])
      ext.offset = "99"
      x = assert(c:request(ACK, ext))
      assert.equal(208, x.code)
      ext = ack_ext("g_ack", r, msgs[1])
      ext.extraInfo = "garbage"
      x = assert(c:request(ACK, ext))
      assert.equal(1, x.code)
      assert.equal("extraInfo is illegal: garbage", x.remark)
    end)

    it("batch acks: the BatchAck bitSet acks offsets from its startOffset", function()
      for i = 1, 4 do produce("Tbatch", 0, "TagA", "b" .. i) end
      local r = pop("g_batch", "Tbatch", {invisible = 1000})
      assert.equal(0, r.code)
      assert.equal("0 0 0,1,2,3", r.extFields.msgOffsetInfo)
      -- offsets 0, 1 and 3 acked: BitSet {0, 1, 3}.toByteArray() = {0x0b}, base64 "Cw=="
      local body = cjson.encode({brokerName = "broker-a", acks = {{
        c = "g_batch", t = "Tbatch", r = "0", so = 0, q = 0, rq = 0,
        pt = tonumber(r.extFields.popTime), it = 1000, b = "Cw=="}}})
      local x = assert(c:request(BATCH_ACK, nil, body))
      assert.equal(0, x.code)
      local again = helpers.wait_until(function()
        local y = pop("g_batch", "Tbatch")
        if y.code == 0 then return y end
      end, 15, "the message left un-acked")
      local back = wire.decode_messages(again.body)
      assert.same({"b3"}, bodies(back))
      assert.equal(1, back[1].reconsume)
      -- the revived one acked in its retry topic through retry "1"
      body = cjson.encode({brokerName = "broker-a", acks = {{
        c = "g_batch", t = "Tbatch", r = "1", so = back[1].queue_offset, q = 0, rq = 0,
        pt = tonumber(again.extFields.popTime), it = 60000, b = "AQ=="}}})
      assert.equal(0, assert(c:request(BATCH_ACK, nil, body)).code)
      x = assert(c:request(BATCH_ACK, nil, cjson.encode({brokerName = "broker-a"})))
      assert.equal(1, x.code)
      assert.equal("bad BatchAckMessageRequestBody: no acks", x.remark)
      x = assert(c:request(BATCH_ACK, nil, cjson.encode({acks = {{c = "g_batch", t = "Tbatch",
        so = 0, q = 0, pt = 1, b = "!!"}}})))
      assert.equal(1, x.code)
      assert.equal("bad BatchAckMessageRequestBody: bitSet is not base64: !!", x.remark)
    end)

    it("changes the invisible time of a popped message", function()
      produce("Tinv", 0, "TagA", "later")
      local r = pop("g_inv", "Tinv", {invisible = 600000})
      assert.equal(0, r.code)
      local m = wire.decode_messages(r.body)[1]
      local ext = ack_ext("g_inv", r, m)
      ext.invisibleTime = "1000"
      local x = assert(c:request(CHANGE_INVISIBLE, ext))
      assert.equal(0, x.code)
      -- ChangeInvisibleTimeResponseHeader
      assert.equal("1000", x.extFields.invisibleTime)
      assert.equal("0", x.extFields.reviveQid)
      assert.truthy(tonumber(x.extFields.popTime) >= tonumber(r.extFields.popTime))
      local again = helpers.wait_until(function()
        local y = pop("g_inv", "Tinv")
        if y.code == 0 then return y end
      end, 15, "the message after its new invisible time")
      local back = wire.decode_messages(again.body)[1]
      assert.equal("later", back.body)
      assert.equal(1, back.reconsume)
      assert.equal(0, assert(c:request(ACK, ack_ext("g_inv", again, back))).code)
      ext.invisibleTime = nil
      x = assert(c:request(CHANGE_INVISIBLE, ext))
      assert.equal(1, x.code)
      assert.matches("the custom field <invisibleTime> is null", x.remark, 1, true)
    end)
  end)
  describe("order=true", function()
    local function offset_of(group, topic, q)
      return tonumber(assert(c:request(14 --[[QUERY_CONSUMER_OFFSET]],
        {consumerGroup = group, topic = topic, queueId = tostring(q)})).extFields.offset)
    end

    it("hands out one batch per queue until it is acked, committing the group's offset",
       function()
      for i = 1, 3 do produce("Tord", 0, "TagA", "o" .. i) end
      produce("Tord", 1, "TagA", "q1")
      local r = pop("g_ord", "Tord", {queue = 0, max = 2, order = true})
      assert.equal(0, r.code)
      local msgs = wire.decode_messages(r.body)
      assert.same({"o1", "o2"}, {msgs[1].body, msgs[2].body})
      assert.equal("999", r.extFields.reviveQid) -- KeyBuilder.POP_ORDER_REVIVE_QUEUE
      assert.equal("0 0 0", r.extFields.orderCountInfo)
      assert.equal("0 0 0,1", r.extFields.msgOffsetInfo)
      -- the queue is blocked while the batch is out, though o3 waits; the other queue is not
      assert.equal(POLLING_TIMEOUT, pop("g_ord", "Tord", {queue = 0, order = true}).code)
      local other = pop("g_ord", "Tord", {queue = 1, order = true})
      assert.equal(0, other.code)
      assert.equal("q1", wire.decode_messages(other.body)[1].body)
      -- a pop of every queue skips the blocked ones
      assert.equal(POLLING_TIMEOUT, pop("g_ord", "Tord", {order = true}).code)
      -- the first ack commits the offset to the second message; the queue stays blocked
      assert.equal(0, assert(c:request(ACK, ack_ext("g_ord", r, msgs[1]))).code)
      assert.equal(1, offset_of("g_ord", "Tord", 0))
      assert.equal(POLLING_TIMEOUT, pop("g_ord", "Tord", {queue = 0, order = true}).code)
      assert.equal(0, assert(c:request(ACK, ack_ext("g_ord", r, msgs[2]))).code)
      assert.equal(2, offset_of("g_ord", "Tord", 0))
      local n = pop("g_ord", "Tord", {queue = 0, order = true})
      assert.equal(0, n.code)
      assert.equal("o3", wire.decode_messages(n.body)[1].body)
      -- an ack naming an offset the batch does not hold is refused
      local bad = ack_ext("g_ord", n, wire.decode_messages(n.body)[1])
      bad.offset = "0"
      assert.equal(13, assert(c:request(ACK, bad)).code) -- MESSAGE_ILLEGAL
      -- BATCH_ACK_MESSAGE of an order batch (reviveQueueId 999): offset 2 from startOffset 2
      local body = cjson.encode({brokerName = "broker-a", acks = {{
        c = "g_ord", t = "Tord", r = "0", so = 2, q = 0, rq = 999,
        pt = tonumber(n.extFields.popTime), it = 60000, b = "AQ=="}}})
      assert.equal(0, assert(c:request(BATCH_ACK, nil, body)).code)
      assert.equal(3, offset_of("g_ord", "Tord", 0))
      produce("Tord", 0, "TagA", "o4")
      local n4 = pop("g_ord", "Tord", {queue = 0, order = true})
      assert.equal(0, n4.code)
      assert.equal("o4", wire.decode_messages(n4.body)[1].body)
    end)

    it("hands the same batch out again after its invisible time, counting the deliveries",
       function()
      produce("Tordre", 0, "TagA", "r1")
      produce("Tordre", 0, "TagA", "r2")
      local r = pop("g_ordre", "Tordre", {queue = 0, max = 1, invisible = 1000, order = true})
      assert.equal(0, r.code)
      assert.equal("r1", wire.decode_messages(r.body)[1].body)
      -- a long poll parked on the blocked queue is answered with the batch again once the
      -- invisible time passed
      local op = c:send_request(POP, pop_ext("g_ordre", "Tordre",
        {queue = 0, max = 1, poll = 60000, order = true}))
      local again = assert(c:wait_response(op, 15 * helpers.scale))
      assert.equal(0, again.code)
      local m = wire.decode_messages(again.body)[1]
      assert.equal("r1", m.body)
      assert.equal("Tordre", m.topic) -- from the queue again, not revived to a retry topic
      assert.equal("0 qo0%0 1;0 0 1", again.extFields.orderCountInfo)
      -- parked while the batch is out; the ack answers it with the next message
      op = c:send_request(POP, pop_ext("g_ordre", "Tordre",
        {queue = 0, max = 1, poll = 60000, order = true}))
      assert.equal(0, assert(c:request(ACK, ack_ext("g_ordre", again, m))).code)
      local nxt = assert(c:wait_response(op, 15 * helpers.scale))
      assert.equal(0, nxt.code)
      assert.equal("r2", wire.decode_messages(nxt.body)[1].body)
      assert.equal("0 0 0", nxt.extFields.orderCountInfo)
    end)

    it("changes when a message of the batch comes back", function()
      produce("Tordinv", 0, "TagA", "s1")
      produce("Tordinv", 0, "TagA", "s2")
      local r = pop("g_ordinv", "Tordinv", {queue = 0, max = 1, invisible = 600000, order = true})
      assert.equal(0, r.code)
      local m = wire.decode_messages(r.body)[1]
      local ext = ack_ext("g_ordinv", r, m)
      ext.invisibleTime = "1000"
      local x = assert(c:request(CHANGE_INVISIBLE, ext))
      assert.equal(0, x.code)
      assert.equal("999", x.extFields.reviveQid)
      local back = helpers.wait_until(function()
        local y = pop("g_ordinv", "Tordinv", {queue = 0, max = 1, order = true})
        if y.code == 0 then return y end
        assert.equal(POLLING_TIMEOUT, y.code)
      end, 15, "the message after its new invisible time")
      assert.equal("s1", wire.decode_messages(back.body)[1].body)
    end)
  end)
end)
