-- consume_orderly: each queue is locked on the broker by the consumer, its messages reach the
-- handler in offset order one batch at a time, a suspended message is consumed again before
-- anything after it, and one that keeps failing goes to %DLQ%<group> after max_reconsume_times.
local helpers = require "helpers"
local ffi = require "ffi"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local TOPIC, GROUP, QUEUES, N, MAX = "OrdTopic", "g_ord", 4, 4000, 3

describe("consumer: orderly", function()
  -- The DLQ re-send carries DELAY = 3 + reconsume_times: scale the delays down.
  local fx = cons.broker_fixture("--topic " .. TOPIC .. ":" .. QUEUES .. " --delay-scale 0.001",
    "ord")

  it("keeps queue order through suspends and sends a stuck message to the DLQ", function()
    cons.produce(fx.db, TOPIC, N, "o")
    local out = fx.dir .. "/out.txt"
    local s = cons.script(fx.dir, { group = GROUP, ns = fx.ns, topic = TOPIC, out = out,
      orderly = true,
      extra = "max_reconsume_times = " .. MAX .. ", suspend_current_queue_time_millis = 20,",
      body = [[
      local m = msgs[1]
      if m.body == "o10" and m.reconsume_times < 2 then
        ctx.suspend_millis = 30
        return rmq.SUSPEND
      end
      if m.body == "o21" then return rmq.SUSPEND end
      ]] })
    local log = fx.dir .. "/run.log"
    local pid = cons.spawn(s, log)
    helpers.wait_until(function() return (cons.all_committed(fx.db, GROUP, TOPIC, QUEUES)) end, 120,
      "every queue committed (log " .. log .. ")")
    -- Every queue is locked by this consumer.
    local cid = cons.read(log):match("started as (%S+)")
    local buf = ffi.new("char[256]")
    for q = 0, QUEUES - 1 do
      local n = lib.rmq_devbroker_lock_owner(fx.db, 0, GROUP, TOPIC, q, buf, 256)
      assert.is_true(n > 0, "queue " .. q .. " not locked")
      assert.equal(cid, ffi.string(buf, n))
    end
    cons.stop(pid)
    assert.equal(0, cons.exit_code(log))
    -- After shutdown the locks are given back.
    for q = 0, QUEUES - 1 do
      assert.equal(-1, lib.rmq_devbroker_lock_owner(fx.db, 0, GROUP, TOPIC, q, buf, 256))
    end

    local recs = cons.records(out)
    local last = {}
    local count = {}
    for _, r in ipairs(recs) do
      count[r.body] = (count[r.body] or 0) + 1
      local prev = last[r.qid]
      if count[r.body] == 1 then
        -- A first delivery never comes before an earlier offset of its queue finished.
        assert.is_true(prev == nil or r.off > prev, string.format(
          "queue %d: offset %d after %s", r.qid, r.off, tostring(prev)))
      else
        -- A repeat is the message the queue is stuck on.
        assert.equal(prev, r.off)
      end
      last[r.qid] = r.off
    end
    for i = 1, N do assert.is_truthy(count["o" .. i], "o" .. i) end
    assert.equal(3, count["o10"])
    assert.equal(MAX + 1, count["o21"])
    local others = 0
    for b, n in pairs(count) do if b ~= "o10" and b ~= "o21" and n > 1 then others = others + 1 end end
    assert.equal(0, others)
    helpers.wait_until(function()
      return lib.rmq_devbroker_max_offset(fx.db, 0, "%DLQ%" .. GROUP, 0) >= 1
    end, 30, "o21 in the DLQ")
    assert.equal(1, tonumber(lib.rmq_devbroker_max_offset(fx.db, 0, "%DLQ%" .. GROUP, 0)))
  end)

  it("moves queue locks between two consumers without overlapping", function()
    local topic, group = "OrdTwo", "g_ord2"
    lib.rmq_devbroker_create_topic(fx.db, 0, topic, QUEUES)
    cons.produce(fx.db, topic, 2000, "p")
    local outs, pids, logs = {}, {}, {}
    local function start(i)
      outs[i] = fx.dir .. "/two" .. i .. ".txt"
      logs[i] = fx.dir .. "/two" .. i .. ".log"
      local s = cons.script(fx.dir, { name = "two" .. i, group = group, ns = fx.ns, topic = topic,
        out = outs[i], orderly = true, extra = "consume_thread_min = 2, consume_thread_max = 2,",
        body = "for _ = 1, 20000 do end" })
      pids[i] = cons.spawn(s, logs[i])
    end
    start(1)
    helpers.wait_until(function() return cons.count_lines(outs[1]) >= 200 end, 60, "progress")
    start(2)
    -- Both end up with locked queues (the second after its next rebalance rounds).
    local buf = require("ffi").new("char[256]")
    local function owners()
      local o = {}
      for q = 0, QUEUES - 1 do
        local n = lib.rmq_devbroker_lock_owner(fx.db, 0, group, topic, q, buf, 256)
        o[q] = n > 0 and require("ffi").string(buf, n) or nil
      end
      return o
    end
    local cid2
    helpers.wait_until(function()
      cid2 = cid2 or cons.read(logs[2]):match("started as (%S+)")
      if not cid2 then return false end
      local n2 = 0
      for _, owner in pairs(owners()) do if owner == cid2 then n2 = n2 + 1 end end
      return n2 == QUEUES / 2
    end, 90, "the second consumer holds half of the locks")
    -- New messages after the move: each queue's go to its lock owner only, in order.
    for i = 1, 400 do
      local b = "z" .. i
      assert(lib.rmq_devbroker_produce(fx.db, 0, topic, -1, nil, nil, b, #b) >= 0)
    end
    helpers.wait_until(function()
      local n = 0
      for i = 1, 2 do
        for _, r in ipairs(cons.records(outs[i])) do if r.body:sub(1, 1) == "z" then n = n + 1 end end
      end
      return n >= 400
    end, 60, "second wave consumed")
    local byq = {}
    for i = 1, 2 do
      local last = {}
      for _, r in ipairs(cons.records(outs[i])) do
        if r.body:sub(1, 1) == "z" then
          byq[r.qid] = byq[r.qid] or {}
          byq[r.qid][i] = true
          assert.is_true(last[r.qid] == nil or r.off > last[r.qid])
          last[r.qid] = r.off
        end
      end
    end
    for q = 0, QUEUES - 1 do
      local c = 0
      for _ in pairs(byq[q] or {}) do c = c + 1 end
      assert.equal(1, c, "queue " .. q)
    end
    for i = 1, 2 do cons.stop(pids[i]) end
  end)
end)
