-- wire.lua: the raw RocketMQ remoting client (spec/rawclient.lua) plus what the development
-- broker specs add: SEND/PULL/heartbeat request bodies and the broker's FFI control API.
local ffi = require "ffi"
local cjson = require "cjson"

-- Everything generic (connect, request, encode/decode, decode_messages, props, rd32...) comes
-- from the shared raw client; connections are rawclient connections.
local M = setmetatable({}, {__index = require "rawclient"})

-- SEND_MESSAGE_V2 extFields.
function M.send_ext(topic, opts)
  opts = opts or {}
  local props = {{"UNIQ_KEY", opts.uniq or string.format("%032X", math.random(1, 2^30))},
                 {"WAIT", "true"}}
  if opts.tags then props[#props + 1] = {"TAGS", opts.tags} end
  if opts.keys then props[#props + 1] = {"KEYS", opts.keys} end
  for _, kv in ipairs(opts.props or {}) do props[#props + 1] = kv end
  return {a = "test_producer", b = topic, c = "TBW102", d = "4", e = tostring(opts.queue or 0),
          f = "0", g = tostring(opts.born or 1700000000000), h = "0", i = M.props(props),
          j = tostring(opts.reconsume or 0), k = "false", m = "false",
          l = opts.max_reconsume and tostring(opts.max_reconsume) or nil}
end

-- A heartbeat body for one consumer group.
function M.heartbeat_body(client_id, group, subs, opts)
  opts = opts or {}
  local set = {}
  for _, s in ipairs(subs) do
    set[#set + 1] = {classFilterMode = false, topic = s.topic, subString = s.sub or "*",
                     tagsSet = setmetatable(s.tags or {}, cjson.array_mt),
                     codeSet = setmetatable(s.codes or {}, cjson.array_mt),
                     subVersion = s.version or 1000, expressionType = s.type or "TAG"}
  end
  return cjson.encode({clientID = client_id, producerDataSet = setmetatable({}, cjson.array_mt),
                       consumerDataSet = {{groupName = group, consumeType = "CONSUME_PASSIVELY",
                                           messageModel = opts.model or "CLUSTERING",
                                           consumeFromWhere = "CONSUME_FROM_FIRST_OFFSET",
                                           subscriptionDataSet = set, unitMode = false}}})
end

function M.pull_ext(group, topic, qid, offset, opts)
  opts = opts or {}
  return {consumerGroup = group, topic = topic, queueId = tostring(qid),
          queueOffset = tostring(offset), maxMsgNums = tostring(opts.max or 32),
          sysFlag = tostring(opts.sys_flag or 0), commitOffset = tostring(opts.commit or 0),
          suspendTimeoutMillis = tostring(opts.suspend or 15000),
          subVersion = tostring(opts.sub_version or 0), expressionType = opts.type or "TAG",
          subscription = opts.subscription}
end

-- The development broker's FFI API (spec/devbroker_ffi.lua).
function M.lib() return require "devbroker_ffi" end

-- Only errors in the log (the transport logs every connection at INFO).
function M.quiet() M.lib().rmq_log_set_level(0) end

M.NAMESRV, M.ALL, M.DISCONNECT = -1, -2, -1

-- Start an in-process development broker; returns db, name server address, lib.
function M.start(args)
  local lib = M.lib()
  local err = ffi.new("char[512]")
  local db = lib.rmq_devbroker_start(args or "", err, 512)
  assert(db ~= nil, "devbroker: " .. ffi.string(err))
  return db, ffi.string(lib.rmq_devbroker_addr(db)), lib
end

function M.broker_addr(db, i)
  return ffi.string(M.lib().rmq_devbroker_broker_addr(db, i or 0))
end

-- The development broker of a describe block (args as M.start, the log quiet): started in its
-- lazy_setup, which then calls ready(t) with the table it fills (db, ns, lib), and stopped in
-- its lazy_teardown, which first closes t.c when ready left a connection there. Returns t.
function M.describe_broker(args, ready)
  local helpers = require "helpers"
  return helpers.describe_fixture(function(t)
    M.quiet()
    t.db, t.ns, t.lib = M.start(args)
    if ready then ready(t) end
  end, function(t)
    if t.c then t.c:close() end
    if t.db then t.lib.rmq_devbroker_stop(t.db) end
  end)
end

-- M.describe_broker with a connection to its first broker (t.c), made in the lazy_setup, which
-- then calls ready(db, lib, connection).
function M.broker_fixture(args, ready)
  return M.describe_broker(args, function(t)
    t.c = assert(M.connect(M.broker_addr(t.db, 0)))
    if ready then ready(t.db, t.lib, t.c) end
  end)
end

-- A development broker for one test (args as M.start), stopped when the test ends, and a
-- connection to its first broker, closed then: returns db, lib and the connection.
function M.start_connected(args)
  local helpers = require "helpers"
  local db, _, lib = M.start(args)
  helpers.defer(function() lib.rmq_devbroker_stop(db) end)
  local c = assert(M.connect(M.broker_addr(db, 0)))
  helpers.defer(function() c:close() end)
  return db, lib, c
end

-- The name server address of a `rmqlua broker` process whose output goes to the file out, once
-- it printed its ready line (waits up to 10 s, scaled).
function M.ready_ns(out)
  local helpers = require "helpers"
  return helpers.wait_until(function()
    return helpers.read_file(out):match("rmqlua broker: name server at (127%.0%.0%.1:%d+)")
  end, 10, "ready line")
end

-- SEND_MESSAGE_V2 extFields storing again a message of a capture (m: an entry of its
-- index.json): its topic, queue and properties, but for CLUSTER (the real cluster's name).
function M.resend_ext(m)
  local props = {}
  for k, v in pairs(m.properties) do
    if k ~= "CLUSTER" then props[#props + 1] = {k, v} end
  end
  local ext = M.send_ext(m.topic, {queue = m.queueId})
  ext.i = M.props(props)
  return ext
end

return M
