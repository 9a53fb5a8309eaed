-- One `rmqlua run` consumer against the development broker: 100,000 messages on 8 queues are
-- each consumed exactly once, and the committed offsets reach the queues' max offsets; the
-- consumer stops cleanly on SIGTERM (exit 0, offsets persisted, unregistered).
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local N, QUEUES = 100000, 8

describe("consumer: one consumer, 8 queues", function()
  local db, ns, dir
  lazy_setup(function()
    db, ns = cons.start_broker("--topic AllTopic:" .. QUEUES)
    dir = cons.tmpdir("all")
    cons.produce(db, "AllTopic", N, "m")
  end)
  lazy_teardown(function() if db then lib.rmq_devbroker_stop(db) end end)

  it("consumes every message exactly once and commits the max offsets", function()
    local out = dir .. "/out.txt"
    local script = cons.script(dir, { group = "g_all", ns = ns, topic = "AllTopic", out = out,
      extra = "consume_message_batch_max_size = 8," })
    local pid = cons.spawn(script, dir .. "/run.log")
    helpers.wait_until(function() return cons.count_lines(out) >= N end, 180,
      "100000 messages consumed (log: " .. dir .. "/run.log)")
    -- Offsets reach the broker by pull commit flags and the 5 s persist task.
    helpers.wait_until(function() return cons.all_committed(db, "g_all", "AllTopic", QUEUES) end,
      30, "committed offsets = max offsets")
    cons.stop(pid)
    local seen, dups = {}, 0
    for _, r in ipairs(cons.records(out)) do
      assert.equal("AllTopic", r.topic)
      if seen[r.body] then dups = dups + 1 end
      seen[r.body] = true
    end
    local missing = 0
    for i = 1, N do if not seen["m" .. i] then missing = missing + 1 end end
    assert.equal(0, missing)
    assert.equal(0, dups)
    assert.equal(N, cons.count_lines(out))
    local ok, q, com, max = cons.all_committed(db, "g_all", "AllTopic", QUEUES)
    assert.is_true(ok, string.format("queue %s committed %s max %s", tostring(q), tostring(com),
      tostring(max)))
    -- Shutdown unregistered the client: the group is empty on the broker.
    helpers.wait_until(function() return lib.rmq_devbroker_group_size(db, 0, "g_all") == 0 end,
      10, "group empty after shutdown")
    assert.equal(0, cons.exit_code(dir .. "/run.log"))
  end)
end)
