-- PULL_OFFSET_MOVED (OFFSET_ILLEGAL): a committed offset past the end of the queue is corrected
-- to the broker's nextBeginOffset after 10 s (with minOffset 0 a 4.9.4 broker answers 0), the
-- queue is taken again by the next rebalance and consumption continues from there.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local raw = dofile(helpers.root .. "/spec/02-integration/02-producer/rawmq.lua")
local lib = cons.lib

local TOPIC, GROUP = "MovedTopic", "g_moved"

describe("consumer: offset moved", function()
  local fx = cons.broker_fixture("--topic " .. TOPIC .. ":1", "moved")
  lazy_teardown(raw.close_all)

  it("corrects an offset beyond the queue to the broker's nextBeginOffset", function()
    cons.produce(fx.db, TOPIC, 10, "old")
    local baddr = cons.broker_addr(fx.db)
    local r = assert(raw.request(baddr, 15, { consumerGroup = GROUP, topic = TOPIC,
      queueId = "0", commitOffset = "1000" }))
    assert.equal(0, r.code)
    assert.equal(1000, tonumber(lib.rmq_devbroker_committed_offset(fx.db, 0, GROUP, TOPIC, 0)))
    local out = fx.dir .. "/out.txt"
    local s = cons.script(fx.dir, { group = GROUP, ns = fx.ns, topic = TOPIC, out = out })
    local log = fx.dir .. "/run.log"
    local pid = cons.spawn(s, log)
    cons.produce(fx.db, TOPIC, 5, "new")
    helpers.wait_until(function() return cons.count_lines(out) >= 15 end, 60,
      "every message after the correction (log " .. log .. ")")
    helpers.wait_until(function() return (cons.all_committed(fx.db, GROUP, TOPIC, 1)) end, 30,
      "committed 15")
    cons.stop(pid)
    local seen = {}
    for _, rec in ipairs(cons.records(out)) do
      assert.is_nil(seen[rec.body], rec.body)
      seen[rec.body] = true
    end
    assert.equal(15, cons.count_lines(out))
    local l = cons.read(log)
    assert.matches("PULL_OFFSET_MOVED", l, 1, true)
    assert.matches("corrected to 0", l, 1, true)
  end)
end)
