-- The development broker's SQL92 property filtering, over the wire with the raw client:
-- CHECK_CLIENT_CONFIG (ClientManageProcessor.checkClientConfig), filter data registered by
-- heartbeats (ConsumerFilterManager), pulls filtered by message properties
-- (ExpressionMessageFilter.isMatchedByCommitLog), long polling woken only by a matching message,
-- and the refusal of a broker started without --enable-property-filter.
local ffi = require "ffi"
local cjson = require "cjson"
local helpers = require "helpers"
local wire = require "02-integration.01-devbroker.wire"

local PULL, HEART_BEAT, CHECK_CLIENT_CONFIG = 11, 34, 46
local SUCCESS, SYSTEM_ERROR, PULL_NOT_FOUND = 0, 1, 19
local SUBSCRIPTION_PARSE_FAILED, FILTER_DATA_NOT_EXIST, FILTER_DATA_NOT_LATEST = 23, 27, 28
local REFUSED = "The broker does not support consumer to filter message by SQL92"

local function check_body(group, type, expr)
  return cjson.encode({clientId = "127.0.0.1@spec", group = group,
    subscriptionData = {classFilterMode = false, codeSet = setmetatable({}, cjson.array_mt),
      expressionType = type, subString = expr, subVersion = 1,
      tagsSet = setmetatable({}, cjson.array_mt), topic = "T"}})
end

-- Store a message with user properties {k = v} in queue 0 of topic.
local function produce(lib, db, topic, key, props)
  local p = {}
  for k, v in pairs(props) do p[#p + 1] = k .. "\1" .. v end
  local ps = table.concat(p, "\2")
  local off = lib.rmq_devbroker_produce_props(db, 0, topic, 0, "TagA", key, ps, #ps, key, #key)
  assert(off >= 0, "produce failed: " .. tostring(off))
  return off
end

local function keys_of(body)
  local out = {}
  for _, m in ipairs(wire.decode_messages(body)) do out[#out + 1] = m.props.KEYS end
  return table.concat(out, ",")
end

-- A heartbeat on c from client cid registering group's SQL92 expression sub (version) for
-- topic, asserted to succeed.
local function sql_heartbeat(c, cid, group, topic, sub, version)
  local r = assert(c:request(HEART_BEAT, nil, wire.heartbeat_body(cid, group,
    {{topic = topic, sub = sub, type = "SQL92", version = version}})))
  assert.are.equal(SUCCESS, r.code)
end

-- A PULL on c of queue 0 of topic from offset by group, with the SQL92 expression its heartbeat
-- registered as version: the response.
local function sql_pull(c, group, topic, offset, version)
  return assert(c:request(PULL, wire.pull_ext(group, topic, 0, offset,
    {type = "SQL92", sub_version = version})))
end

describe("devbroker: SQL92 subscriptions", function()
  describe("without --enable-property-filter (the Java broker's default)", function()
    local db, lib, c
    wire.broker_fixture("--topic T:1", function(...) db, lib, c = ... end)

    it("refuses CHECK_CLIENT_CONFIG for SQL92 with the broker's message, accepts TAG", function()
      local r = assert(c:request(CHECK_CLIENT_CONFIG, nil, check_body("g", "SQL92", "a > 1")))
      assert.are.equal(SYSTEM_ERROR, r.code)
      assert.are.equal(REFUSED, r.remark)
      r = assert(c:request(CHECK_CLIENT_CONFIG, nil, check_body("g", "TAG", "*")))
      assert.are.equal(SUCCESS, r.code)
    end)

    it("refuses a SQL92 pull, registered by heartbeat or carried by the request", function()
      produce(lib, db, "T", "k1", {a = "5"})
      sql_heartbeat(c, "127.0.0.1@c1", "g_off", "T", "a > 1", 10)
      local r = sql_pull(c, "g_off", "T", 0, 10)
      assert.are.equal(SYSTEM_ERROR, r.code)
      assert.are.equal(REFUSED, r.remark)
      r = assert(c:request(PULL, wire.pull_ext("g_any", "T", 0, 0,
        {type = "SQL92", sys_flag = 4, subscription = "a > 1"})))
      assert.are.equal(SYSTEM_ERROR, r.code)
      assert.are.equal(REFUSED, r.remark)
    end)
  end)

  describe("with --enable-property-filter", function()
    local db, lib, c
    wire.broker_fixture("--enable-property-filter --topic T:1 --topic W:1", function(...)
      db, lib, c = ...
      -- T: five messages, properties chosen for null and type-mismatch outcomes
      produce(lib, db, "T", "k0", {region = "eu", amount = "250"})
      produce(lib, db, "T", "k1", {region = "us", amount = "900"})
      produce(lib, db, "T", "k2", {region = "eu"})                   -- amount missing: NULL
      produce(lib, db, "T", "k3", {region = "eu", amount = "lots"})  -- Double.valueOf throws
      produce(lib, db, "T", "k4", {region = "eu", amount = "101.5"})
    end)

    it("answers CHECK_CLIENT_CONFIG: SUCCESS, or SUBSCRIPTION_PARSE_FAILED with the error", function()
      local r = assert(c:request(CHECK_CLIENT_CONFIG, nil, check_body("g", "SQL92", "a > 1")))
      assert.are.equal(SUCCESS, r.code)
      r = assert(c:request(CHECK_CLIENT_CONFIG, nil, check_body("g", "SQL92", "a > 'x'")))
      assert.are.equal(SUBSCRIPTION_PARSE_FAILED, r.code)
      assert.are.equal("java.lang.RuntimeException: Value ''x'' cannot be compared.", r.remark)
      r = assert(c:request(CHECK_CLIENT_CONFIG, nil, check_body("g", "SQL92", "a >")))
      assert.are.equal(SUBSCRIPTION_PARSE_FAILED, r.code)
      assert.matches("^org%.apache%.rocketmq%.filter%.parser%.ParseException: Encountered", r.remark)
    end)

    it("filters a pull by the heartbeat's expression over each message's properties", function()
      sql_heartbeat(c, "127.0.0.1@c1", "g_sql", "T", "region = 'eu' AND amount > 100.0", 20)
      local r = sql_pull(c, "g_sql", "T", 0, 20)
      assert.are.equal(SUCCESS, r.code)
      assert.are.equal("k0,k4", keys_of(r.body))
      assert.are.equal("5", r.extFields.nextBeginOffset)
      -- the same through the request's own subscription (SUBSCRIPTION flag)
      r = assert(c:request(PULL, wire.pull_ext("g_req", "T", 0, 0,
        {type = "SQL92", sys_flag = 4, subscription = "amount IS NULL OR amount = 'lots'"})))
      assert.are.equal(SUCCESS, r.code)
      assert.are.equal("k2,k3", keys_of(r.body))
      -- TAGS is a property too
      r = assert(c:request(PULL, wire.pull_ext("g_req", "T", 0, 0,
        {type = "SQL92", sys_flag = 4, subscription = "TAGS = 'TagA' AND KEYS IN ('k1')"})))
      assert.are.equal("k1", keys_of(r.body))
    end)

    it("answers FILTER_DATA_NOT_EXIST when the heartbeat's expression did not compile", function()
      sql_heartbeat(c, "127.0.0.1@c2", "g_bad", "T", "a = NULL", 30)
      local r = sql_pull(c, "g_bad", "T", 0, 30)
      assert.are.equal(FILTER_DATA_NOT_EXIST, r.code)
      assert.are.equal("The broker's consumer filter data is not exist!Your expression may be wrong!",
        r.remark)
    end)

    it("answers FILTER_DATA_NOT_LATEST when only an older expression compiled", function()
      sql_heartbeat(c, "127.0.0.1@c3", "g_ver", "T", "a > 1", 40)
      sql_heartbeat(c, "127.0.0.1@c3", "g_ver", "T", "a >", 41)
      local r = sql_pull(c, "g_ver", "T", 0, 41)
      assert.are.equal(FILTER_DATA_NOT_LATEST, r.code)
      assert.are.equal("the consumer's consumer filter data not latest", r.remark)
    end)

    it("lets every message through a request subscription that does not compile", function()
      -- ConsumerFilterManager.build returns null for it, and no filter data matches everything
      local r = assert(c:request(PULL, wire.pull_ext("g_req2", "T", 0, 0,
        {type = "SQL92", sys_flag = 4, subscription = "a >"})))
      assert.are.equal(SUCCESS, r.code)
      assert.are.equal("k0,k1,k2,k3,k4", keys_of(r.body))
    end)

    it("wakes a long-polling pull only for a message that matches", function()
      sql_heartbeat(c, "127.0.0.1@c4", "g_poll", "W", "n > 10", 50)
      local op = c:send_request(PULL, wire.pull_ext("g_poll", "W", 0, 0,
        {type = "SQL92", sub_version = 50, sys_flag = 2, suspend = 20000}))
      helpers.sleep(0.2)
      produce(lib, db, "W", "w0", {n = "3"})
      local early = c:wait_response(op, 0.5)
      assert.is_nil(early, "a pull woken by a message the selector rejects")
      produce(lib, db, "W", "w1", {n = "11"})
      local r = assert(c:wait_response(op, 10 * helpers.scale))
      assert.are.equal(SUCCESS, r.code)
      assert.are.equal("w1", keys_of(r.body))
      -- nothing new that matches: PULL_NOT_FOUND after the suspend time
      r = sql_pull(c, "g_poll", "W", 2, 50)
      assert.are.equal(PULL_NOT_FOUND, r.code)
    end)
  end)

  it("rmqlua broker takes --enable-property-filter with true or false", function()
    local rc, out = helpers.run(helpers.bin .. " broker --help")
    assert.are.equal(0, rc)
    assert.matches("--enable-property-filter", out, 1, true)
    local lib = wire.lib()
    local err = ffi.new("char[256]")
    local db = lib.rmq_devbroker_start("--enable-property-filter false --topic T:1", err, 256)
    assert(db ~= nil, ffi.string(err))
    helpers.defer(function() lib.rmq_devbroker_stop(db) end)
    local c = assert(wire.connect(wire.broker_addr(db, 0)))
    helpers.defer(function() c:close() end)
    local r = assert(c:request(CHECK_CLIENT_CONFIG, nil, check_body("g", "SQL92", "a > 1")))
    assert.are.equal(REFUSED, r.remark)
  end)
end)
