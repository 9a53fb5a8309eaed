-- A queue taken away by a rebalance while many of its batches wait for a consume thread: those
-- batches never reach the handler (Java's ConsumeRequest.run returns when the process queue is
-- dropped); the new owner consumes them instead.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local timed = dofile(helpers.root .. "/spec/02-integration/03-consumer/timed.lua")

local TOPIC, GROUP, PER_QUEUE = "DropTopic", "g_drop", 150

describe("consumer: a revoked queue", function()
  local fx = cons.broker_fixture("--topic " .. TOPIC .. ":2")

  it("does not run the batches of a revoked queue still waiting in the pool", function()
    local dir = helpers.tmpdir("drop")
    cons.fill_queues(fx.db, TOPIC, 2, PER_QUEUE)
    local out, revoked = dir .. "/out.txt", dir .. "/revoked.txt"
    -- One consume thread, 20 ms per message: the pool holds a long backlog of both queues.
    local s = timed.script(dir, { group = GROUP, ns = fx.ns, topic = TOPIC, out = out,
      options = "consume_thread_min = 1, consume_thread_max = 1,",
      hooks = string.format([[
  on_revoke = function(mqs)
    local f = assert(io.open(%q, "a"))
    for _, mq in ipairs(mqs) do f:write(mq.queue_id, " ", now_ms(), "\n") end
    f:close()
  end,]], revoked),
      handler = [[
    local t = now_ms()
    sleep_ms(20)
    local m = msgs[1]
    rec(string.format("%s %d %d %d", m.body, m.queue_id, tonumber(m.queue_offset), t))
    ]] })
    local log = dir .. "/run.log"
    local pid = helpers.spawn(string.format("%s run %s", helpers.bin, helpers.shq(s)),
      { log = log })
    helpers.wait_until(function() return #timed.rows(out) >= 10 end, 60,
      "consumption started (log " .. log .. ")")

    -- A second member joins the group (a raw client's heartbeat): the broker notifies the
    -- consumer, whose rebalance hands one of its two queues over.
    local leave = cons.join_group(fx.db, GROUP, TOPIC)
    local rq, rt
    helpers.wait_until(function()
      local r = timed.rows(revoked)[1]
      if r then rq, rt = r[1], r[2] end
      return r ~= nil
    end, 30, "a queue revoked (log " .. log .. ")")
    -- The kept queue is consumed to its end; a backlog of the revoked queue would have run
    -- interleaved with it.
    helpers.wait_until(function()
      local n = 0
      for _, r in ipairs(timed.rows(out)) do n = n + (r[2] ~= rq and 1 or 0) end
      return n >= PER_QUEUE
    end, 60, "the kept queue consumed (log " .. log .. ")")
    helpers.sleep(0.5)
    local late, before = 0, 0
    for _, r in ipairs(timed.rows(out)) do
      if r[2] == rq then
        if r[4] > rt then late = late + 1 else before = before + 1 end
      end
    end
    -- At most the one batch that may have been taken in the instant of the revocation.
    assert.is_true(late <= 1, late .. " batch(es) of the revoked queue ran after the revocation")
    assert.is_true(before < PER_QUEUE, "the revoked queue was consumed to its end before")
    assert(leave())
    helpers.kill(pid)
  end)
end)
