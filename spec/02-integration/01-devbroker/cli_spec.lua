-- `rmqlua broker` as a process: ready line, usage, errors, routes, clean stop on SIGTERM.
local helpers = require "helpers"
local wire = require "02-integration.01-devbroker.wire"

local spawn = helpers.spawn_broker

local alive = helpers.alive

describe("rmqlua broker", function()
  it("says in --help that it is for development and tests", function()
    local rc, out = helpers.run(helpers.bin .. " broker --help")
    assert.equal(0, rc)
    assert.truthy(out:find("development and tests", 1, true))
    assert.truthy(out:find("--delay-scale", 1, true))
    assert.truthy(out:find("in memory", 1, true))
  end)

  it("rejects bad options with exit code 2 naming the option", function()
    local rc, out = helpers.run(helpers.bin .. " broker --brokers zero")
    assert.equal(2, rc)
    assert.truthy(out:find("--brokers", 1, true))
    rc, out = helpers.run(helpers.bin .. " broker --frobnicate 1")
    assert.equal(2, rc)
    assert.truthy(out:find("--frobnicate", 1, true))
    rc, out = helpers.run(helpers.bin .. " broker --listen nonsense")
    assert.equal(2, rc)
    assert.truthy(out:find("nonsense", 1, true))
    rc, out = helpers.run(helpers.bin .. " broker --log-level loud")
    assert.equal(2, rc)
    assert.truthy(out:find("--log-level", 1, true))
  end)

  it("prints the ready line, serves routes and stops cleanly on SIGTERM", function()
    local pid, out = spawn("--listen 127.0.0.1:0 --brokers 2 --topic CliT:3 --log-level warn")
    local ns = wire.ready_ns(out)
    local c = assert(wire.connect(ns))
    local r = assert(c:request(105, {topic = "CliT"}))
    assert.equal(0, r.code)
    assert.truthy(r.body:find('"readQueueNums":3', 1, true))
    assert.truthy(r.body:find("broker-b", 1, true))
    c:close()
    os.execute("kill -TERM " .. pid)
    helpers.wait_until(function() return not alive(pid) end, 10, "exit after SIGTERM")
    assert.truthy(helpers.read_file(out):find("SIGTERM, stopping", 1, true))
    assert.is_nil(helpers.read_file(out):find(" INFO ", 1, true))
  end)

  it("fails with exit code 1 when the port is taken", function()
    local db, ns, lib = wire.start("")
    helpers.defer(function() lib.rmq_devbroker_stop(db) end)
    local rc, out = helpers.run(helpers.bin .. " broker --listen " .. ns)
    assert.equal(1, rc)
    assert.truthy(out:find("rmqlua broker:", 1, true))
  end)
end)
