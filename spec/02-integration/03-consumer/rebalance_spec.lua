-- Three consumers of one group started at different times: every message is consumed, and once
-- the rebalance has settled no queue is consumed by two consumers.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local N, QUEUES, TOPIC, GROUP = 30000, 8, "RbTopic", "g_rb"

describe("consumer: rebalance among three consumers", function()
  local fx = cons.broker_fixture("--topic " .. TOPIC .. ":" .. QUEUES, "rb")

  it("splits the queues and consumes everything", function()
    cons.produce(fx.db, TOPIC, N, "w")
    local outs, pids = {}, {}
    local function start(i)
      outs[i] = fx.dir .. "/out" .. i .. ".txt"
      local s = cons.script(fx.dir, { name = "c" .. i, group = GROUP, ns = fx.ns, topic = TOPIC,
        out = outs[i], extra = "consume_thread_min = 2, consume_thread_max = 2," ..
        "pull_batch_size = 8," })
      pids[i] = cons.spawn(s, fx.dir .. "/run" .. i .. ".log")
    end
    local function total()
      local n = 0
      for i = 1, #outs do n = n + cons.count_lines(outs[i]) end
      return n
    end
    start(1)
    helpers.wait_until(function() return total() >= N / 10 end, 60, "first consumer progress")
    start(2)
    helpers.wait_until(function() return lib.rmq_devbroker_group_size(fx.db, 0, GROUP) == 2 end,
      30, "second consumer registered")
    helpers.wait_until(function() return total() >= N / 3 end, 60, "progress with two")
    start(3)
    helpers.wait_until(function() return lib.rmq_devbroker_group_size(fx.db, 0, GROUP) == 3 end,
      30, "third consumer registered")

    -- Every first-wave message is consumed by someone (duplicates allowed around a move).
    helpers.wait_until(function()
      local seen, n = {}, 0
      for i = 1, 3 do
        for _, r in ipairs(cons.records(outs[i])) do
          if r.body:sub(1, 1) == "w" and not seen[r.body] then seen[r.body] = true; n = n + 1 end
        end
      end
      return n == N
    end, 180, "every first-wave message consumed")

    -- Settle: probe rounds (one message per queue) until two rounds in a row were each consumed
    -- exactly once, by the same owner per queue, with all three consumers owning queues.
    local round, prev_owner = 0, nil
    -- Owner per queue of probe round r; complete when every queue's probe was seen, clean
    -- when no probe was consumed by two consumers.
    local function owners_of(r)
      local owner, count, clean = {}, 0, true
      for i = 1, 3 do
        for _, rec in ipairs(cons.records(outs[i])) do
          local rr, q = rec.body:match("^p(%d+)_(%d+)$")
          if rr and tonumber(rr) == r then
            q = tonumber(q)
            if owner[q] and owner[q] ~= i then clean = false end
            if not owner[q] then count = count + 1 end
            owner[q] = i
          end
        end
      end
      return owner, count == QUEUES, clean
    end
    helpers.wait_until(function()
      round = round + 1
      for q = 0, QUEUES - 1 do
        local b = "p" .. round .. "_" .. q
        assert(lib.rmq_devbroker_produce(fx.db, 0, TOPIC, q, nil, nil, b, #b) >= 0)
      end
      helpers.wait_until(function() return select(2, owners_of(round)) end, 30, "probe round")
      local owner, _, clean = owners_of(round)
      local stable = clean and prev_owner ~= nil
      local used = {}
      for q = 0, QUEUES - 1 do
        if prev_owner and prev_owner[q] ~= owner[q] then stable = false end
        used[owner[q]] = true
      end
      prev_owner = clean and owner or nil
      return stable and used[1] and used[2] and used[3]
    end, 120, "rebalance settled")

    -- Second wave: each queue is consumed by exactly one consumer.
    for i = 1, 800 do
      local b = "x" .. i
      assert(lib.rmq_devbroker_produce(fx.db, 0, TOPIC, -1, nil, nil, b, #b) >= 0)
    end
    local byq = {}
    helpers.wait_until(function()
      byq = {}
      local n = 0
      for i = 1, 3 do
        for _, r in ipairs(cons.records(outs[i])) do
          if r.body:sub(1, 1) == "x" then
            byq[r.qid] = byq[r.qid] or {}
            byq[r.qid][i] = true
            n = n + 1
          end
        end
      end
      return n >= 800
    end, 60, "second wave consumed")
    for q = 0, QUEUES - 1 do
      local c = 0
      for _ in pairs(byq[q] or {}) do c = c + 1 end
      assert.equal(1, c, "queue " .. q .. " consumed by " .. c .. " consumers")
    end
    for _, pid in ipairs(pids) do cons.stop(pid) end
  end)
end)
