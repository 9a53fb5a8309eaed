-- Offsets with the master down: RemoteBrokerOffsetStore sends UPDATE_CONSUMER_OFFSET and
-- QUERY_CONSUMER_OFFSET to MQClientInstance.findBrokerAddressInAdmin(brokerName), the master
-- while the route lists it, else the slave. The development broker runs a slave (--slaves 1).
local helpers = require "helpers"
local rh = require "run_helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local TOPIC, GROUP, QUEUES = "SlaveOff", "g_slaveoff", 4
local QUERY, UPDATE = 14, 15

-- Every queue's committed offset on broker idx equals its max offset.
local function committed_all(db, idx)
  for q = 0, QUEUES - 1 do
    local max = lib.rmq_devbroker_max_offset(db, idx, TOPIC, q)
    if lib.rmq_devbroker_committed_offset(db, idx, GROUP, TOPIC, q) ~= max then return false end
  end
  return true
end

describe("consumer: offsets with the master down", function()
  it("go to the slave, and the next owner resumes from them", function()
    local db, ns = cons.test_broker("--slaves 1 --topic " .. TOPIC .. ":" .. QUEUES)
    local slave = lib.rmq_devbroker_slave(db, 0, 1)
    assert.is_true(slave > 0)
    local dir = helpers.tmpdir("slaveoff")
    local function start(name, out)
      local s = cons.script(dir, { name = name, group = GROUP, ns = ns, topic = TOPIC, out = out,
        extra = "persist_consumer_offset_interval = 200, poll_name_server_interval = 300," })
      local log = dir .. "/" .. name .. ".log"
      return helpers.spawn(helpers.shq(helpers.bin) .. " run " .. helpers.shq(s),
        { log = log, rc = log .. ".rc" }), log
    end

    rh.produce_n(db, TOPIC, 40, "a")
    -- The slave holds the same queues and offsets.
    for q = 0, QUEUES - 1 do
      assert.equal(lib.rmq_devbroker_max_offset(db, 0, TOPIC, q),
        lib.rmq_devbroker_max_offset(db, slave, TOPIC, q))
    end
    local out1 = dir .. "/out1.txt"
    local pid1, log1 = start("c1", out1)
    helpers.wait_until(function() return committed_all(db, 0) end, 30, "offsets on the master")
    assert.equal(40, cons.count_lines(out1))
    local updates_before = lib.rmq_devbroker_count(db, slave, UPDATE)

    -- The master goes away: its queues are served by the slave (pulls and offsets).
    assert.equal(0, lib.rmq_devbroker_set_down(db, 0, 1))
    rh.produce_n(db, TOPIC, 12, "b") -- stored while down (kept) and replicated to the slave
    helpers.wait_until(function() return cons.count_lines(out1) >= 52 end, 30,
      "the new messages pulled from the slave")
    helpers.wait_until(function() return committed_all(db, slave) end, 30,
      "every offset persisted to the slave")
    assert.is_true(lib.rmq_devbroker_count(db, slave, UPDATE) > updates_before)
    helpers.kill(pid1, "TERM")
    assert.equal(0, cons.exit_code(log1))

    -- The next owner asks the slave (the master is still down) and goes on from there.
    local queries_before = lib.rmq_devbroker_count(db, slave, QUERY)
    rh.produce_n(db, TOPIC, 6, "c")
    local out2 = dir .. "/out2.txt"
    local pid2, log2 = start("c2", out2)
    helpers.wait_until(function() return cons.count_lines(out2) >= 6 end, 30, "6 new consumed")
    assert.is_true(lib.rmq_devbroker_count(db, slave, QUERY) >= queries_before + QUEUES)
    helpers.sleep(0.5)
    helpers.kill(pid2, "TERM")
    assert.equal(0, cons.exit_code(log2))
    for _, r in ipairs(cons.records(out2)) do assert.equal("c", r.body:sub(1, 1), r.body) end
    assert.equal(6, cons.count_lines(out2))
  end)

  it("go to the master again once it is back", function()
    local db, ns = cons.test_broker("--slaves 1 --topic " .. TOPIC .. ":" .. QUEUES)
    local slave = lib.rmq_devbroker_slave(db, 0, 1)
    local dir = helpers.tmpdir("slaveback")
    local out = dir .. "/out.txt"
    local s = cons.script(dir, { name = "c", group = GROUP, ns = ns, topic = TOPIC, out = out,
      extra = "persist_consumer_offset_interval = 200, poll_name_server_interval = 300," })
    local log = dir .. "/c.log"
    local pid = helpers.spawn(helpers.shq(helpers.bin) .. " run " .. helpers.shq(s),
      { log = log, rc = log .. ".rc" })
    assert.equal(0, lib.rmq_devbroker_set_down(db, 0, 1))
    rh.produce_n(db, TOPIC, 20, "a")
    helpers.wait_until(function() return committed_all(db, slave) end, 30, "offsets on the slave")
    assert.is_false(committed_all(db, 0))
    assert.equal(0, lib.rmq_devbroker_set_down(db, 0, 0))
    rh.produce_n(db, TOPIC, 8, "b")
    helpers.wait_until(function() return committed_all(db, 0) end, 30, "offsets on the master")
    helpers.kill(pid, "TERM")
    assert.equal(0, cons.exit_code(log))
    assert.equal(28, cons.count_lines(out))
  end)
end)
