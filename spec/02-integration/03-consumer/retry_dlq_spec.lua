-- A handler that fails chosen messages: they come back through %RETRY%<group> with
-- reconsume_times + 1 and the original topic restored, and land in %DLQ%<group> after
-- max_reconsume_times. The broker's delay levels are scaled down.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local TOPIC, GROUP, N, MAX = "RetryTopic", "g_retry", 200, 2

describe("consumer: failed messages", function()
  local fx = cons.broker_fixture("--topic " .. TOPIC .. ":4 --delay-scale 0.001", "retry")

  it("retries through %RETRY% and ends in %DLQ% after max_reconsume_times", function()
    cons.produce(fx.db, TOPIC, N, "r")
    local out = fx.dir .. "/out.txt"
    -- r7, r77 and r150 always fail; r9 fails once (ack_index-free RECONSUME_LATER).
    local s = cons.script(fx.dir, { group = GROUP, ns = fx.ns, topic = TOPIC, out = out,
      extra = "max_reconsume_times = " .. MAX .. ",",
      body = [[
      local b = msgs[1].body
      if b == "r7" or b == "r77" or b == "r150" then return rmq.RECONSUME_LATER end
      if b == "r9" and msgs[1].reconsume_times == 0 then error("fails once") end
      ]] })
    local log = fx.dir .. "/run.log"
    local pid = cons.spawn(s, log)
    local dlq = "%DLQ%" .. GROUP
    helpers.wait_until(function()
      return lib.rmq_devbroker_max_offset(fx.db, 0, dlq, 0) >= 3
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
    assert.equal(3, tonumber(lib.rmq_devbroker_max_offset(fx.db, 0, dlq, 0)))
    -- The original queues are fully committed: failures were sent back, not left behind.
    assert.is_true((cons.all_committed(fx.db, GROUP, TOPIC, 4)))
  end)

  -- A consumer script (files fx.dir/<name>.*) of group on topic (one queue, made now) whose
  -- handler fails the message <name>1 on its first delivery: script, output file, log file.
  local function fails_first(name, topic, group)
    lib.rmq_devbroker_create_topic(fx.db, 0, topic, 1)
    local out = fx.dir .. "/" .. name .. ".txt"
    local s = cons.script(fx.dir, { name = name, group = group, ns = fx.ns, topic = topic,
      out = out,
      body = string.format([[
      if msgs[1].body == %q and msgs[1].reconsume_times == 0 then
        return rmq.RECONSUME_LATER
      end
      ]], name .. "1") })
    return s, out, fx.dir .. "/" .. name .. ".log"
  end

  -- The records in out once there are two (the first delivery and the next).
  local function two_records(out, what)
    local recs
    helpers.wait_until(function()
      recs = cons.records(out)
      return #recs >= 2
    end, 60, what)
    return recs
  end

  it("re-sends through the producer when CONSUMER_SEND_MSG_BACK fails", function()
    local topic, group = "FallbackTopic", "g_fallback"
    local s, out, log = fails_first("fb", topic, group)
    -- The next CONSUMER_SEND_MSG_BACK (36) is refused with SYSTEM_ERROR (1).
    assert.equal(0, lib.rmq_devbroker_push_error(fx.db, 0, 36, 1, 1))
    helpers.defer(function() lib.rmq_devbroker_clear_errors(fx.db) end)
    local pid = cons.spawn(s, log)
    assert(lib.rmq_devbroker_produce(fx.db, 0, topic, 0, nil, nil, "fb1", 3) >= 0)
    local recs = two_records(out, "fb1 delivered again (log " .. log .. ")")
    cons.stop(pid)
    assert.equal(2, #recs)
    assert.equal(0, recs[1].rt)
    -- Re-sent as a new message to %RETRY%<group> with RECONSUME_TIME 1 and RETRY_TOPIC set.
    assert.equal(1, recs[2].rt)
    assert.equal("%RETRY%" .. group, recs[2].store_topic)
    assert.equal(topic, recs[2].topic)
    assert.equal("fb1", recs[2].body)
  end)

  it("consumes the message again locally when both send-back paths fail", function()
    local topic, group = "LocalTopic", "g_local"
    local s, out, log = fails_first("lr", topic, group)
    local pid = cons.spawn(s, log)
    helpers.wait_until(function() return lib.rmq_devbroker_group_size(fx.db, 0, group) == 1 end, 30,
      "consumer registered")
    -- Refuse the send-back and every attempt of the producer's re-send (1 + 2 retries).
    assert.equal(0, lib.rmq_devbroker_push_error(fx.db, 0, 36, 1, 1))
    assert.equal(0, lib.rmq_devbroker_push_error(fx.db, 0, 310, 1, 3))
    helpers.defer(function() lib.rmq_devbroker_clear_errors(fx.db) end)
    assert(lib.rmq_devbroker_produce(fx.db, 0, topic, 0, nil, nil, "lr1", 3) >= 0)
    local recs = two_records(out, "lr1 consumed again (log " .. log .. ")")
    -- The offset never passed the unresolved message; after success it does.
    helpers.wait_until(function() return (cons.all_committed(fx.db, group, topic, 1)) end, 30,
      "offset committed after the local retry")
    cons.stop(pid)
    assert.equal(2, #recs)
    -- Same stored message (not a new one), reconsume_times incremented locally.
    assert.equal(recs[1].off, recs[2].off)
    assert.equal(topic, recs[2].store_topic)
    assert.equal(1, recs[2].rt)
    assert.matches("consuming it again", cons.read(log), 1, true)
  end)
end)
