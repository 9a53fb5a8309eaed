-- rmq.DLQ honours ctx.ack_index: the messages after it go to %DLQ%<group>, so with every message
-- acknowledged (ack_index == #msgs) none goes, and with ack_index unset all of them do.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local SEND_BACK = 36 -- CONSUMER_SEND_MSG_BACK

describe("consumer: rmq.DLQ and ctx.ack_index", function()
  local fx = cons.broker_fixture("--topic DlqAck:1 --delay-scale 0.001")

  it("sends only the unacknowledged messages of a batch to the DLQ", function()
    local topic, group = "DlqAck", "g_dlq_ack"
    local dir = helpers.tmpdir("dlq_ack")
    local out = dir .. "/out.txt"
    -- Batches of up to 3: a batch whose first body starts with "all" is acknowledged in full,
    -- one starting with "two" up to its second message, any other one not at all.
    local s = cons.script(dir, { group = group, ns = fx.ns, topic = topic, out = out,
      extra = "consume_message_batch_max_size = 3, pull_batch_size = 3, "
        .. "consume_thread_min = 1, consume_thread_max = 1,",
      body = [[
      local first = msgs[1].body
      if first:sub(1, 3) == "all" then ctx.ack_index = #msgs
      elseif first:sub(1, 3) == "two" then ctx.ack_index = 2 end
      return rmq.DLQ
      ]] })
    -- One pull (pull_batch_size 3) per group of three bodies: each group is one batch.
    local bodies = {}
    local function put(prefix)
      for i = 1, 3 do
        local b = prefix .. i
        bodies[#bodies + 1] = b
        assert(lib.rmq_devbroker_produce(fx.db, 0, topic, 0, nil, nil, b, #b) >= 0)
      end
    end
    put("all_a"); put("two_a"); put("none_a"); put("all_b")
    local log = dir .. "/run.log"
    local pid = helpers.spawn(string.format("%s run %s", helpers.bin, helpers.shq(s)),
      { log = log })
    helpers.wait_until(function() return (cons.all_committed(fx.db, group, topic, 1)) end, 60,
      "every message resolved (log " .. log .. ")")
    helpers.kill(pid)
    -- ack_index = 3 of 3: nothing; ack_index = 2 of 3: one; unset: all three.
    local dlq = "%DLQ%" .. group
    assert.equal(4, lib.rmq_devbroker_count(fx.db, 0, SEND_BACK))
    assert.equal(4, tonumber(lib.rmq_devbroker_max_offset(fx.db, 0, dlq, 0)))
    -- Each message was handled once (nothing came back through %RETRY%).
    local seen = {}
    for _, r in ipairs(cons.records(out)) do
      seen[r.body] = (seen[r.body] or 0) + 1
      assert.equal(topic, r.store_topic)
    end
    for _, b in ipairs(bodies) do assert.equal(1, seen[b], b) end
  end)
end)
