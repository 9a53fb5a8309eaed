-- A name-server list whose first entry is dead still reaches the cluster (failover to the next
-- name server), and messages a handler queues with rmq.send() are produced after the batch
-- succeeds.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local TOPIC, OUT_TOPIC, GROUP, N = "FwdIn", "FwdOut", "g_fwd", 300

describe("consumer: name-server failover and rmq.send", function()
  local fx = cons.broker_fixture("--topic " .. TOPIC .. ":2 --topic " .. OUT_TOPIC .. ":2", "fwd")

  it("consumes through the second name server and forwards every message", function()
    cons.produce(fx.db, TOPIC, N, "f")
    local out = fx.dir .. "/out.txt"
    -- 127.0.0.1:1 refuses connections: the consumer must move on to the real one.
    local s = cons.script(fx.dir, { group = GROUP, ns = "127.0.0.1:1;" .. fx.ns, topic = TOPIC,
      out = out, body = string.format([[
      for i = 1, #msgs do rmq.send(%q, "fwd-" .. msgs[i].body, { tags = "T" }) end
      ]], OUT_TOPIC) })
    local log = fx.dir .. "/run.log"
    local pid = cons.spawn(s, log)
    helpers.wait_until(function() return cons.count_lines(out) >= N end, 60,
      "consumed through the second name server (log " .. log .. ")")
    local function forwarded()
      local n = 0
      for q = 0, 1 do n = n + tonumber(lib.rmq_devbroker_max_offset(fx.db, 0, OUT_TOPIC, q)) end
      return n
    end
    helpers.wait_until(function() return forwarded() >= N end, 30, "forwarded messages stored")
    cons.stop(pid)
    assert.equal(0, cons.exit_code(log))
    assert.equal(N, forwarded())
    assert.is_true((cons.all_committed(fx.db, GROUP, TOPIC, 2)))
  end)
end)
