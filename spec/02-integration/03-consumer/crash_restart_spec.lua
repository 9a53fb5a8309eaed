-- Crashes and outages: kill -9 of the consumer part-way then a restart loses nothing and only
-- re-delivers what was not committed yet; the broker going down and coming back mid-run is
-- survived with nothing missing.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local QUEUES = 4

local function consumed_set(outs)
  local seen, dups = {}, {}
  for _, out in ipairs(outs) do
    for _, r in ipairs(cons.records(out)) do
      if seen[r.body] then dups[#dups + 1] = r end
      seen[r.body] = r
    end
  end
  return seen, dups
end

describe("consumer: kill -9 and restart", function()
  local fx = cons.broker_fixture("--topic CrashTopic:" .. QUEUES, "crash")

  it("misses nothing; duplicates are only offsets not yet committed at the kill", function()
    local N = 20000
    cons.produce(fx.db, "CrashTopic", N, "k")
    local out1, out2 = fx.dir .. "/out1.txt", fx.dir .. "/out2.txt"
    local extra = "consume_thread_min = 2, consume_thread_max = 2,"
    local s1 = cons.script(fx.dir, { name = "c1", group = "g_crash", ns = fx.ns,
      topic = "CrashTopic", out = out1, extra = extra, body = "for _ = 1, 2000 do end" })
    local pid = cons.spawn(s1, fx.dir .. "/run1.log")
    helpers.wait_until(function() return cons.count_lines(out1) >= N / 4 end, 60,
      "part of the messages consumed")
    cons.stop(pid, "KILL")
    local committed = {}
    for q = 0, QUEUES - 1 do
      committed[q] = tonumber(lib.rmq_devbroker_committed_offset(fx.db, 0, "g_crash", "CrashTopic",
        q))
    end
    local s2 = cons.script(fx.dir, { name = "c2", group = "g_crash", ns = fx.ns,
      topic = "CrashTopic", out = out2, extra = extra })
    pid = cons.spawn(s2, fx.dir .. "/run2.log")
    helpers.wait_until(function()
      local seen = consumed_set({ out1, out2 })
      for i = 1, N do if not seen["k" .. i] then return false end end
      return true
    end, 120, "every message consumed across both runs")
    cons.stop(pid)
    assert.equal(0, cons.exit_code(fx.dir .. "/run2.log"))
    local first = {}
    for _, r in ipairs(cons.records(out1)) do first[r.body] = r end
    local redelivered = 0
    for _, r in ipairs(cons.records(out2)) do
      local before = first[r.body]
      if before then
        redelivered = redelivered + 1
        -- Re-delivered only from at or after the offset the broker had committed.
        assert.is_true(r.off >= committed[r.qid], string.format(
          "k at q%d offset %d re-delivered below committed %d", r.qid, r.off, committed[r.qid]))
      end
    end
    assert.is_true(cons.all_committed(fx.db, "g_crash", "CrashTopic", QUEUES))
    -- Sanity: the restart did not start over from zero.
    assert.is_true(redelivered < N / 4 + 1)
  end)
end)

describe("consumer: broker restart mid-run", function()
  local fx = cons.broker_fixture("--topic DownTopic:" .. QUEUES, "down")

  it("reconnects and finishes with nothing missing", function()
    local N = 10000
    cons.produce(fx.db, "DownTopic", N, "d")
    local out = fx.dir .. "/out.txt"
    local s = cons.script(fx.dir, { group = "g_down", ns = fx.ns, topic = "DownTopic", out = out,
      extra = "consume_thread_min = 2, consume_thread_max = 2,",
      body = "for _ = 1, 5000 do end" })
    local log = fx.dir .. "/run.log"
    local pid = cons.spawn(s, log)
    helpers.defer(function() lib.rmq_devbroker_set_down(fx.db, 0, 0) end)
    helpers.wait_until(function() return cons.count_lines(out) >= N / 5 end, 60, "progress")
    assert.equal(0, lib.rmq_devbroker_set_down(fx.db, 0, 1))
    local at_down = cons.count_lines(out)
    -- While it is down, the consumer keeps running (and may finish what it had cached).
    helpers.wait_until(function()
      local n = cons.count_lines(out)
      local still = n == at_down
      at_down = n
      return still
    end, 30, "consumption paused while the broker is down")
    assert.is_true(cons.alive(pid))
    assert.equal(0, lib.rmq_devbroker_set_down(fx.db, 0, 0))
    -- More messages after the restart, too.
    cons.produce(fx.db, "DownTopic", 1000, "e")
    helpers.wait_until(function()
      local seen = consumed_set({ out })
      for i = 1, N do if not seen["d" .. i] then return false end end
      for i = 1, 1000 do if not seen["e" .. i] then return false end end
      return true
    end, 120, "everything consumed after the broker came back (log " .. log .. ")")
    cons.stop(pid)
    assert.equal(0, cons.exit_code(log))
  end)
end)
