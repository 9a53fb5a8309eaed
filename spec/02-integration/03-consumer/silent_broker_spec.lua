-- A broker that stops answering while its connection stays open (a partition, a half-open
-- connection: nothing tells the client) is noticed by the heartbeat: HEART_BEAT is a
-- synchronous call, and one that times out closes its connection (clientCloseSocketIfTimeout),
-- so the next request dials again. Before, the connection stayed open and every request on it
-- timed out until TCP gave up (minutes). The network-fault scenario 14 of
-- scripts/reliability.sh shows the same against a real blackhole.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local HEART_BEAT = 34
local TOPIC, GROUP = "SilentTopic", "g_silent"

local function reconnects(url)
  local m = assert(cons.scrape(url .. "/metrics"))
  local f = assert(m.families.rmqlua_reconnects, "no family rmqlua_reconnects")
  local n = 0
  for _, s in ipairs(f.samples) do n = n + s.value end
  return n
end

describe("consumer: a broker whose HEART_BEAT answers stop coming", function()
  it("closes the connection at the heartbeat's timeout, dials again and goes on consuming", function()
    local db, ns = cons.test_broker("--topic " .. TOPIC .. ":2")
    local dir = helpers.tmpdir("silent")
    local out = dir .. "/out.txt"
    local s = cons.script(dir, { group = GROUP, ns = ns, topic = TOPIC, out = out,
      extra = "heartbeat_broker_interval = 500, mq_client_api_timeout = 300," })
    local log = dir .. "/run.log"
    local pid = helpers.spawn(helpers.bin .. " run " .. s .. " --metrics 127.0.0.1:0",
      { log = log, rc = log .. ".rc" })
    local url = cons.metrics_url(log)
    cons.produce(db, TOPIC, 10, "a")
    helpers.wait_until(function() return cons.count_lines(out) >= 10 end, 30, "consumed")
    assert.equal(0, reconnects(url))
    -- The broker answers HEART_BEAT 5 s late: each one times out after 300 ms.
    assert.equal(0, lib.rmq_devbroker_set_latency(db, cons.ALL, HEART_BEAT, 5000))
    helpers.wait_until(function() return reconnects(url) >= 2 end, 30,
      "the connection closed at a heartbeat's timeout and dialled again, twice (log " .. log .. ")")
    assert.is_truthy(cons.read(log):match("HEART_BEAT%(34%)[^\n]*timed out after 300 ms"))
    -- Answered in time again: consumption goes on over the new connection.
    assert.equal(0, lib.rmq_devbroker_set_latency(db, cons.ALL, HEART_BEAT, 0))
    cons.produce(db, TOPIC, 10, "b")
    helpers.wait_until(function() return cons.count_lines(out) >= 20 end, 30, "consumed after")
    helpers.kill(pid, "TERM")
    assert.equal(0, cons.exit_code(log))
  end)
end)
