-- Tag subscriptions: only the subscribed tags reach the handler (the broker filters by tag
-- code, the client by exact tag), and the committed offsets still reach the queues' max
-- offsets when only filtered messages arrive later: the broker re-runs the parked pull
-- (PullRequestHoldService's periodic check), answers PULL_RETRY_IMMEDIATELY with
-- nextBeginOffset past them, and the client moves its offset (correctTagsOffset).
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local TOPIC, GROUP, QUEUES = "TagTopic", "g_tags", 2

describe("consumer: tag subscription", function()
  local fx = cons.broker_fixture("--topic " .. TOPIC .. ":" .. QUEUES, "tags")

  it("delivers only TagA and TagB and commits past the rest", function()
    local want = {}
    for i = 1, 300 do
      local tag = ({ "TagA", "TagB", "TagC", "TagAB" })[i % 4 + 1]
      local body = "t" .. i
      assert(lib.rmq_devbroker_produce(fx.db, 0, TOPIC, -1, tag, nil, body, #body) >= 0)
      if tag == "TagA" or tag == "TagB" then want[body] = true end
    end
    -- Every queue ends with a wanted message: consuming it commits the max offset.
    for q = 0, QUEUES - 1 do
      local b = "a" .. q
      assert(lib.rmq_devbroker_produce(fx.db, 0, TOPIC, q, "TagA", nil, b, #b) >= 0)
      want[b] = true
    end
    local out = fx.dir .. "/out.txt"
    local s = cons.script(fx.dir, { group = GROUP, ns = fx.ns, topic = TOPIC, out = out,
      tags = "TagA || TagB" })
    local log = fx.dir .. "/run.log"
    local pid = cons.spawn(s, log)
    local n = 0
    for _ in pairs(want) do n = n + 1 end
    helpers.wait_until(function() return cons.count_lines(out) >= n end, 60, "tagged messages")
    helpers.wait_until(function() return (cons.all_committed(fx.db, GROUP, TOPIC, QUEUES)) end, 30,
      "offsets at the last tagged messages")
    -- Then only filtered messages arrive, while the consumer's pulls are parked.
    for q = 0, QUEUES - 1 do
      for k = 1, 5 do
        local b = "c" .. q .. "_" .. k
        assert(lib.rmq_devbroker_produce(fx.db, 0, TOPIC, q, "TagC", nil, b, #b) >= 0)
      end
    end
    helpers.wait_until(function() return (cons.all_committed(fx.db, GROUP, TOPIC, QUEUES)) end, 30,
      "offsets past the filtered tail")
    cons.stop(pid)
    assert.equal(0, cons.exit_code(log))
    local got = {}
    for _, r in ipairs(cons.records(out)) do
      assert.is_true(want[r.body] ~= nil, r.body .. " should have been filtered")
      assert.is_nil(got[r.body])
      got[r.body] = true
    end
    for b in pairs(want) do assert.is_true(got[b], b) end
  end)
end)
