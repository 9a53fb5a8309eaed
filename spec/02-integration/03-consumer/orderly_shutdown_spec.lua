-- consume_orderly and a graceful stop: the batches that finish while the consumer shuts down
-- (within await_termination_millis_when_shutdown) are committed, and the offsets persisted at
-- shutdown are exactly what the handler finished (Java's processConsumeResult commits them,
-- then persistAll runs).
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local timed = dofile(helpers.root .. "/spec/02-integration/03-consumer/timed.lua")
local lib = cons.lib

local TOPIC, GROUP, QUEUES, PER_QUEUE = "OrdStop", "g_ord_stop", 4, 100

describe("consumer: orderly shutdown", function()
  local fx = cons.broker_fixture("--topic " .. TOPIC .. ":" .. QUEUES)

  it("commits the batches that finish during a graceful stop", function()
    -- Each batch takes 300 ms, so at any moment every queue has one running.
    local dir, out, s = timed.orderly(fx, "ord_stop", { group = GROUP, topic = TOPIC,
      queues = QUEUES, per_queue = PER_QUEUE,
      options = "consume_thread_min = 4, consume_thread_max = 4, "
        .. "await_termination_millis_when_shutdown = 5000,",
      handler = [[
    sleep_ms(300)
    local m = msgs[1]
    rec(string.format("%s %d %d", m.body, m.queue_id, tonumber(m.queue_offset)))
    ]] })
    local log = dir .. "/run.log"
    local rc = dir .. "/run.rc"
    local pid = helpers.spawn(string.format("%s run %s", helpers.bin, helpers.shq(s)),
      { log = log, rc = rc })
    local function last_done()
      local last = {}
      for _, r in ipairs(timed.rows(out)) do
        if not last[r[2]] or r[3] > last[r[2]] then last[r[2]] = r[3] end
      end
      return last
    end
    helpers.wait_until(function()
      local last = last_done()
      for q = 0, QUEUES - 1 do if not last[q] or last[q] < 2 then return false end end
      return true
    end, 60, "every queue consuming (log " .. log .. ")")
    helpers.kill(pid, "TERM")
    helpers.wait_until(function()
      local ok, t = pcall(helpers.read_file, rc)
      return ok and t:match("%d")
    end, 10, "exit code")
    assert.equal("0", helpers.read_file(rc):match("%d+"))
    local last = last_done()
    for q = 0, QUEUES - 1 do
      assert.is_true(last[q] < PER_QUEUE - 1, "queue " .. q .. " consumed to its end")
      assert.equal(last[q] + 1,
        tonumber(lib.rmq_devbroker_committed_offset(fx.db, 0, GROUP, TOPIC, q)), "queue " .. q)
    end
  end)
end)
