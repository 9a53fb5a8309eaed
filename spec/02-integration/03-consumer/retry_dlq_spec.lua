-- A handler that fails chosen messages: they come back through %RETRY%<group> with
-- reconsume_times + 1 and the original topic restored, and land in %DLQ%<group> after
-- max_reconsume_times. The broker's delay levels are scaled down.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local TOPIC, GROUP, N, MAX = "RetryTopic", "g_retry", 200, 2

describe("consumer: failed messages", function()
  local db, ns, dir
  lazy_setup(function()
    db, ns = cons.start_broker("--topic " .. TOPIC .. ":4 --delay-scale 0.001")
    dir = cons.tmpdir("retry")
  end)
  lazy_teardown(function() if db then lib.rmq_devbroker_stop(db) end end)

  it("retries through %RETRY% and ends in %DLQ% after max_reconsume_times", function()
    cons.produce(db, TOPIC, N, "r")
    local out = dir .. "/out.txt"
    -- r7, r77 and r150 always fail; r9 fails once (ack_index-free RECONSUME_LATER).
    local s = cons.script(dir, { group = GROUP, ns = ns, topic = TOPIC, out = out,
      extra = "max_reconsume_times = " .. MAX .. ",",
      body = [[
      local b = msgs[1].body
      if b == "r7" or b == "r77" or b == "r150" then return rmq.RECONSUME_LATER end
      if b == "r9" and msgs[1].reconsume_times == 0 then error("fails once") end
      ]] })
    local log = dir .. "/run.log"
    local pid = cons.spawn(s, log)
    finally(function() if cons.alive(pid) then cons.stop(pid, "KILL") end end)
    local dlq = "%DLQ%" .. GROUP
    helpers.wait_until(function()
      return lib.rmq_devbroker_max_offset(db, 0, dlq, 0) >= 3
    end, 90, "three messages in " .. dlq .. " (log " .. log .. ")")
    helpers.wait_until(function()
      local n = 0
      for _, r in ipairs(cons.records(out)) do if r.body == "r9" then n = n + 1 end end
      return n >= 2
    end, 30, "r9 consumed again")
    cons.stop(pid)
    assert.equal(0, cons.exit_code(log))

    local by = {}
    for _, r in ipairs(cons.records(out)) do
      by[r.body] = by[r.body] or {}
      table.insert(by[r.body], r)
      -- The handler always sees the real topic.
      assert.equal(TOPIC, r.topic)
    end
    for i = 1, N do assert.is_truthy(by["r" .. i], "r" .. i .. " never consumed") end
    for _, b in ipairs({ "r7", "r77", "r150" }) do
      local recs = by[b]
      assert.equal(MAX + 1, #recs, b .. " deliveries")
      table.sort(recs, function(x, y) return x.rt < y.rt end)
      for k, r in ipairs(recs) do
        assert.equal(k - 1, r.rt)
        if k == 1 then
          assert.equal(TOPIC, r.store_topic)
        else
          assert.equal("%RETRY%" .. GROUP, r.store_topic)
        end
      end
    end
    assert.equal(2, #by["r9"])
    assert.equal(1, by["r9"][2].rt)
    assert.equal(3, tonumber(lib.rmq_devbroker_max_offset(db, 0, dlq, 0)))
    -- The original queues are fully committed: failures were sent back, not left behind.
    assert.is_true((cons.all_committed(db, GROUP, TOPIC, 4)))
  end)
end)
