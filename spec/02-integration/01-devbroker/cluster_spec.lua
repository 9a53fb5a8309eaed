-- Several brokers: in one process (--brokers 2), and a second `rmqlua broker --name-server`
-- process joining the first one's name server with REGISTER_BROKER.
local helpers = require "helpers"
local wire = require "02-integration.01-devbroker.wire"
local cjson = require "cjson"

local ROUTE, SEND_V2, PULL = 105, 310, 11

local function route(c, topic)
  local r = assert(c:request(ROUTE, {topic = topic}))
  if r.code ~= 0 then return nil, r end
  return cjson.decode(r.body), r
end

local function names(rt)
  local t = {}
  for _, b in ipairs(rt.brokerDatas) do t[#t + 1] = b.brokerName end
  table.sort(t)
  return table.concat(t, ",")
end

-- Start a broker process; returns pid, output file.
local spawn = helpers.spawn_broker

describe("devbroker cluster", function()
  lazy_setup(function() wire.quiet() end)

  it("serves two in-process brokers behind one name server", function()
    local db, ns, lib = wire.start("--brokers 2 --topic C2:4")
    helpers.defer(function() lib.rmq_devbroker_stop(db) end)
    assert.equal(2, lib.rmq_devbroker_broker_count(db))
    local c = assert(wire.connect(ns))
    helpers.defer(function() c:close() end)
    local rt = assert(route(c, "C2"))
    assert.equal("broker-a,broker-b", names(rt))
    assert.equal(2, #rt.queueDatas)
    for i = 0, 1 do
      local addr = wire.broker_addr(db, i)
      local found = false
      for _, b in ipairs(rt.brokerDatas) do found = found or b.brokerAddrs["0"] == addr end
      assert.is_true(found)
      local b = assert(wire.connect(addr))
      local r = assert(b:request(SEND_V2, wire.send_ext("C2", {queue = 1}), "to-" .. i))
      assert.equal(0, r.code)
      local p = assert(b:request(PULL, wire.pull_ext("g", "C2", 1, 0, {sys_flag = 4, subscription = "*"})))
      assert.equal("to-" .. i, wire.decode_messages(p.body)[1].body)
      b:close()
    end
    local r = assert(c:request(106, {}))
    assert.truthy(r.body:find('"DefaultCluster":["broker-a","broker-b"]', 1, true))
    -- a topic auto-created on one broker is routed to that broker only
    local b = assert(wire.connect(wire.broker_addr(db, 1)))
    assert.equal(0, assert(b:request(SEND_V2, wire.send_ext("OnlyB", {queue = 0}), "x")).code)
    b:close()
    assert.equal("broker-b", names(assert(route(c, "OnlyB"))))
    -- a broker taken down leaves the route
    lib.rmq_devbroker_set_down(db, 0, 1)
    assert.equal("broker-b", names(assert(route(c, "C2"))))
    lib.rmq_devbroker_set_down(db, 0, 0)
    assert.equal("broker-a,broker-b", names(assert(route(c, "C2"))))
  end)

  it("adds a broker process to the cluster with --name-server", function()
    local db, ns, lib = wire.start("--topic Shared:2")
    helpers.defer(function() lib.rmq_devbroker_stop(db) end)
    local pid, out = spawn("--name-server " .. ns .. " --broker-name other --topic Shared:2 --topic Mine:3")
    helpers.wait_until(function()
      return helpers.read_file(out):find("name server at " .. ns, 1, true)
    end, 10, "second broker ready")
    local c = assert(wire.connect(ns))
    helpers.defer(function() c:close() end)
    local rt
    helpers.wait_until(function()
      rt = route(c, "Shared")
      return rt and #rt.brokerDatas == 2
    end, 10, "route with both brokers")
    assert.equal("broker-a,other-a", names(rt))
    local mine = assert(route(c, "Mine"))
    assert.equal("other-a", names(mine))
    assert.equal(3, mine.queueDatas[1].readQueueNums)
    -- the remote broker serves sends and pulls at the address it registered
    local addr = mine.brokerDatas[1].brokerAddrs["0"]
    local b = assert(wire.connect(addr))
    assert.equal(0, assert(b:request(SEND_V2, wire.send_ext("Mine", {queue = 2}), "remote")).code)
    local p = assert(b:request(PULL, wire.pull_ext("g", "Mine", 2, 0, {sys_flag = 4, subscription = "*"})))
    assert.equal("remote", wire.decode_messages(p.body)[1].body)
    -- a topic created there later reaches the name server
    assert.equal(0, assert(b:request(SEND_V2, wire.send_ext("Later", {queue = 0}), "x")).code)
    b:close()
    helpers.wait_until(function() return route(c, "Later") ~= nil end, 10, "Later routed")
    -- the process stops on SIGTERM and its broker leaves the route
    os.execute("kill -TERM " .. pid)
    helpers.wait_until(function() return route(c, "Mine") == nil end, 10, "remote broker removed")
    assert.equal("broker-a", names(assert(route(c, "Shared"))))
  end)
end)
