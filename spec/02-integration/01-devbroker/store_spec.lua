-- --store DIR: messages, topics and committed offsets survive a restart and a kill -9; a torn
-- write at the end of the commit log is cut off at recovery.
local helpers = require "helpers"
local wire = require "02-integration.01-devbroker.wire"

local SEND_V2, PULL, QUERY_OFF, UPDATE_OFF = 310, 11, 14, 15

local function tmpdir() return helpers.tmpdir("store") end

local function spawn(args)
  local pid, out = helpers.spawn_broker(args)
  local ns
  helpers.wait_until(function()
    ns = helpers.read_file(out):match("name server at (127%.0%.0%.1:%d+)")
    return ns
  end, 10, "broker ready")
  local baddr = helpers.read_file(out):match("broker broker%-a at (127%.0%.0%.1:%d+)")
  return pid, out, ns, baddr
end

local function pull_all(c, topic, qid)
  local r = assert(c:request(PULL, wire.pull_ext("g", topic, qid, 0, {max = 32, sys_flag = 4,
                                                                     subscription = "*"})))
  return r.code == 0 and wire.decode_messages(r.body) or {}, r
end

describe("devbroker --store", function()
  lazy_setup(function() wire.quiet() end)

  it("recovers messages, topics and offsets after a clean stop", function()
    local dir = tmpdir()
    local db, _, lib = wire.start("--store " .. dir .. " --topic S1:2")
    local c = assert(wire.connect(wire.broker_addr(db, 0)))
    for i = 1, 10 do
      assert.equal(0, assert(c:request(SEND_V2, wire.send_ext("S1", {queue = i % 2, tags = "T" .. i}),
                                       "m" .. i)).code)
    end
    assert.equal(0, assert(c:request(UPDATE_OFF, {consumerGroup = "g", topic = "S1", queueId = "1",
                                                  commitOffset = "3"})).code)
    local before = pull_all(c, "S1", 1)
    c:close()
    lib.rmq_devbroker_stop(db)

    db, lib, c = wire.start_connected("--store " .. dir)
    assert.equal(5, tonumber(lib.rmq_devbroker_max_offset(db, 0, "S1", 1)))
    local after = pull_all(c, "S1", 1)
    assert.equal(#before, #after)
    for i, m in ipairs(after) do
      assert.equal(before[i].body, m.body)
      assert.equal(before[i].phys, m.phys)
      assert.equal(before[i].props.TAGS, m.props.TAGS)
    end
    local r = assert(c:request(QUERY_OFF, {consumerGroup = "g", topic = "S1", queueId = "1"}))
    assert.equal("3", r.extFields.offset)
    -- new messages continue after the recovered ones
    r = assert(c:request(SEND_V2, wire.send_ext("S1", {queue = 1}), "new"))
    assert.equal("5", r.extFields.queueOffset)
    -- tag filtering still works on recovered messages
    r = assert(c:request(PULL, wire.pull_ext("g", "S1", 1, 0, {sys_flag = 4, subscription = "T3"})))
    local ms = wire.decode_messages(r.body)
    assert.equal(1, #ms)
    assert.equal("m3", ms[1].body)
  end)

  it("loses nothing answered after kill -9 and cuts a torn write", function()
    local dir = tmpdir()
    local pid, out, _, baddr = spawn("--listen 127.0.0.1:0 --store " .. dir .. " --topic K:1")
    local c = assert(wire.connect(baddr))
    for i = 1, 25 do
      assert.equal(0, assert(c:request(SEND_V2, wire.send_ext("K", {queue = 0}), "k" .. i)).code)
    end
    c:request(UPDATE_OFF, {consumerGroup = "g", topic = "K", queueId = "0", commitOffset = "20"})
    helpers.wait_until(function()
      local f = io.open(dir .. "/broker-a/offsets")
      local s = f and f:read("*a")
      if f then f:close() end
      return s and s:find("^20 ")
    end, 10, "offsets saved")
    c:close()
    helpers.kill(pid, "KILL")
    -- a torn last message
    local f = assert(io.open(dir .. "/broker-a/commitlog", "ab"))
    f:write("\0\0\1\0\218\163\32\167partial")
    f:close()

    local _, _, _, baddr2 = spawn("--listen 127.0.0.1:0 --store " .. dir)
    c = assert(wire.connect(baddr2))
    helpers.defer(function() c:close() end)
    local ms = pull_all(c, "K", 0)
    assert.equal(25, #ms)
    assert.equal("k1", ms[1].body)
    assert.equal("k25", ms[25].body)
    local r = assert(c:request(QUERY_OFF, {consumerGroup = "g", topic = "K", queueId = "0"}))
    assert.equal("20", r.extFields.offset)
    r = assert(c:request(SEND_V2, wire.send_ext("K", {queue = 0}), "k26"))
    assert.equal("25", r.extFields.queueOffset)
    -- the new message was written where the torn bytes were
    local m26 = wire.decode_messages(assert(c:request(PULL, wire.pull_ext("g", "K", 0, 25,
      {sys_flag = 4, subscription = "*"}))).body)[1]
    assert.equal(ms[25].phys + ms[25].size, m26.phys)
  end)
end)
