-- Two brokers serving one topic: the consumer heartbeats both, pulls from both, and commits
-- each queue's offset on the broker that holds it, with two consumers sharing the queues.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local TOPIC, GROUP, QUEUES, N = "TwoB", "g_twob", 4, 2000

describe("consumer: two brokers", function()
  local fx = cons.broker_fixture("--brokers 2 --topic " .. TOPIC .. ":" .. QUEUES, "twob")

  it("consumes from both and commits on each", function()
    for b = 0, 1 do
      for i = 1, N do
        local body = "b" .. b .. "_" .. i
        assert(lib.rmq_devbroker_produce(fx.db, b, TOPIC, -1, nil, nil, body, #body) >= 0)
      end
    end
    local outs, pids = {}, {}
    for i = 1, 2 do
      outs[i] = fx.dir .. "/out" .. i .. ".txt"
      local s = cons.script(fx.dir, { name = "c" .. i, group = GROUP, ns = fx.ns, topic = TOPIC,
        out = outs[i] })
      pids[i] = cons.spawn(s, fx.dir .. "/run" .. i .. ".log")
    end
    local function committed_all()
      for b = 0, 1 do
        for q = 0, QUEUES - 1 do
          local max = lib.rmq_devbroker_max_offset(fx.db, b, TOPIC, q)
          local com = lib.rmq_devbroker_committed_offset(fx.db, b, GROUP, TOPIC, q)
          if com ~= max then return false end
        end
      end
      return true
    end
    helpers.wait_until(committed_all, 60, "every queue of both brokers committed")
    for i = 1, 2 do cons.stop(pids[i]) end
    local seen = {}
    for i = 1, 2 do
      for _, r in ipairs(cons.records(outs[i])) do seen[r.body] = true end
    end
    for b = 0, 1 do
      for i = 1, N do assert.is_true(seen["b" .. b .. "_" .. i], "b" .. b .. "_" .. i) end
    end
  end)
end)
