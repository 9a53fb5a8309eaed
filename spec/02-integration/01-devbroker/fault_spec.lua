-- `rmqlua broker --fault CODE:RATE:KIND`: random faults per request code, set from outside the
-- process (the reliability suite's brokers are separate processes).
local helpers = require "helpers"
local wire = require "02-integration.01-devbroker.wire"

local GET_MAX_OFFSET, QUERY_CONSUMER_OFFSET, GET_ROUTEINFO = 30, 14, 105

-- `rmqlua broker ARGS` in the background; returns the broker's address, its log file and pid.
local function broker(args)
  local pid, out = helpers.spawn_broker("--listen 127.0.0.1:0 --topic FaultT:2 --log-level info " ..
    args)
  local addr
  helpers.wait_until(function()
    addr = helpers.read_file(out):match("rmqlua broker: broker broker%-a at (127%.0%.0%.1:%d+)")
    return addr and helpers.read_file(out):find("name server at", 1, true)
  end, 10, "ready line")
  return addr, out, pid
end

local function max_offset_ext() return {topic = "FaultT", queueId = "0"} end

describe("rmqlua broker --fault", function()
  it("answers every picked request with the given response code, others untouched", function()
    local addr = broker("--fault GET_MAX_OFFSET:1:SYSTEM_BUSY")
    local c = assert(wire.connect(addr))
    helpers.defer(function() c:close() end)
    for _ = 1, 5 do
      local r = assert(c:request(GET_MAX_OFFSET, max_offset_ext()))
      assert.equal(2, r.code) -- SYSTEM_BUSY
      assert.equal("devbroker: injected error", r.remark)
    end
    local r = assert(c:request(QUERY_CONSUMER_OFFSET, {consumerGroup = "g", topic = "FaultT",
      queueId = "0"}))
    assert.not_equal(2, r.code) -- answered by the broker itself
    assert.not_equal("devbroker: injected error", r.remark)
  end)

  it("closes the connection for disconnect, and never answers for drop", function()
    local addr = broker("--fault 30:1:disconnect --fault QUERY_CONSUMER_OFFSET:1:drop")
    local c = assert(wire.connect(addr))
    helpers.defer(function() c:close() end)
    local r, err = c:request(QUERY_CONSUMER_OFFSET, {consumerGroup = "g", topic = "FaultT",
      queueId = "0"}, nil, {timeout = 1})
    assert.is_nil(r)
    assert.equal("timeout", err)
    -- still open: a request without a rule is answered
    r = assert(c:request(GET_ROUTEINFO, {topic = "FaultT"}))
    assert.equal(3, r.code) -- REQUEST_CODE_NOT_SUPPORTED: brokers do not serve routes
    r, err = c:request(GET_MAX_OFFSET, max_offset_ext(), nil, {timeout = 5})
    assert.is_nil(r)
    assert.equal("closed", err)
  end)

  it("picks requests at the given rate and logs how many when it stops", function()
    local addr, out, pid = broker("--fault GET_MAX_OFFSET:0.5:SYSTEM_ERROR")
    local c = assert(wire.connect(addr))
    helpers.defer(function() c:close() end)
    local failed = 0
    for _ = 1, 400 do
      local r = assert(c:request(GET_MAX_OFFSET, max_offset_ext()))
      if r.code == 1 then failed = failed + 1 else assert.equal(0, r.code) end
    end
    -- binomial(400, 0.5): mean 200, sd 10
    assert.is_true(failed > 130 and failed < 270, "picked " .. failed .. " of 400")
    c:close()
    helpers.kill(pid, "TERM")
    assert.truthy(helpers.read_file(out):find("fault: " .. failed .. " GET_MAX_OFFSET request(s)",
      1, true))
  end)

  it("refuses a bad rule with exit code 2 naming --fault and what is wrong", function()
    for spec, why in pairs {["PULL_MESSAGE:0.5"] = "CODE:RATE:KIND",
                            ["NO_SUCH_CODE:0.5:drop"] = "unknown request code",
                            ["PULL_MESSAGE:1.5:drop"] = "RATE must be",
                            ["PULL_MESSAGE:0.5:explode"] = "KIND must be"} do
      local rc, out = helpers.run(helpers.bin .. " broker --fault " .. spec)
      assert.equal(2, rc)
      assert.truthy(out:find("--fault '" .. spec .. "'", 1, true), out)
      assert.truthy(out:find(why, 1, true), out)
    end
  end)
end)
