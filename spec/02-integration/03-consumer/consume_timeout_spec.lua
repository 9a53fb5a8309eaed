-- The consume timeout counts from the moment a handler starts (Java's CONSUME_START_TIME), not
-- from when the batch was queued: a backlog waiting for a busy consume thread is never sent
-- back, while a message whose handler is stuck past the timeout is (CONSUMER_SEND_MSG_BACK,
-- delay level 3) and comes back through %RETRY%<group>.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local timed = dofile(helpers.root .. "/spec/02-integration/03-consumer/timed.lua")
local lib = cons.lib

local SEND_BACK = 36
local TOPIC, GROUP, BACKLOG = "ExpTopic", "g_exp", 15

describe("consumer: consume timeout", function()
  local fx = cons.broker_fixture("--topic " .. TOPIC .. ":1 --delay-scale 0.001")

  it("expires a stuck handler's message, never a batch still waiting for a thread", function()
    local dir = helpers.tmpdir("exp")
    local timeout = math.floor(1500 * helpers.scale)
    -- One consume thread. "stuck" blocks it in a C call (which no interrupt can cut short) for
    -- 2 timeouts + 2 s: the first expiry round after its start sees it; meanwhile the backlog
    -- waits in the pool for longer than the timeout. Each backlog message then takes 100 ms.
    local bodies = { "stuck" }
    for i = 1, BACKLOG do bodies[#bodies + 1] = "b" .. i end
    for _, b in ipairs(bodies) do
      assert(lib.rmq_devbroker_produce(fx.db, 0, TOPIC, 0, nil, nil, b, #b) >= 0)
    end
    local out = dir .. "/out.txt"
    local s = timed.script(dir, { group = GROUP, ns = fx.ns, topic = TOPIC, out = out,
      options = string.format("consume_thread_min = 1, consume_thread_max = 1, "
        .. "consume_timeout_millis = %d,", timeout),
      handler = string.format([[
    local m = msgs[1]
    if m.body == "stuck" and m.reconsume_times == 0 then sleep_ms(%d) else sleep_ms(100) end
    rec(string.format("%%s %%d %%s", m.body, m.reconsume_times, m.store_topic))
    ]], 2 * timeout + 2000) })
    local log = dir .. "/run.log"
    local pid = helpers.spawn(string.format("%s run %s", helpers.bin, helpers.shq(s)),
      { log = log })
    -- The stuck message comes back from %RETRY% once the broker's delay passed.
    helpers.wait_until(function()
      for _, r in ipairs(timed.rows(out)) do
        if r[1] == "stuck" and r[2] == 1 then return true end
      end
    end, 60, "the stuck message consumed again (log " .. log .. ")")
    helpers.wait_until(function() return #timed.rows(out) >= #bodies + 1 end, 60,
      "the backlog consumed (log " .. log .. ")")
    helpers.wait_until(function() return (cons.all_committed(fx.db, GROUP, TOPIC, 1)) end, 30,
      "the queue committed (log " .. log .. ")")
    helpers.sleep(0.5)
    helpers.kill(pid)
    -- One send-back: the stuck message; the backlog stayed where it was.
    assert.equal(1, lib.rmq_devbroker_count(fx.db, 0, SEND_BACK))
    local seen = {}
    for _, r in ipairs(timed.rows(out)) do
      local k = r[1] .. "/" .. r[2]
      seen[k] = (seen[k] or 0) + 1
    end
    assert.equal(1, seen["stuck/0"])
    assert.equal(1, seen["stuck/1"])
    for i = 1, BACKLOG do assert.equal(1, seen["b" .. i .. "/0"], "b" .. i) end
    assert.equal(#bodies + 1, #timed.rows(out))
    assert.matches("(consume timeout): sending them back", cons.read(log), 1, true)
  end)
end)
