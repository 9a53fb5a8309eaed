-- Two brokers serving one topic: the consumer heartbeats both, pulls from both, and commits
-- each queue's offset on the broker that holds it, with two consumers sharing the queues.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local TOPIC, GROUP, QUEUES, N = "TwoB", "g_twob", 4, 2000

describe("consumer: two brokers", function()
  local db, ns, dir
  lazy_setup(function()
    db, ns = cons.start_broker("--brokers 2 --topic " .. TOPIC .. ":" .. QUEUES)
    dir = cons.tmpdir("twob")
  end)
  lazy_teardown(function() if db then lib.rmq_devbroker_stop(db) end end)

  it("consumes from both and commits on each", function()
    for b = 0, 1 do
      for i = 1, N do
        local body = "b" .. b .. "_" .. i
        assert(lib.rmq_devbroker_produce(db, b, TOPIC, -1, nil, nil, body, #body) >= 0)
      end
    end
    local outs, pids = {}, {}
    helpers.defer(function()
      for _, pid in pairs(pids) do if cons.alive(pid) then cons.stop(pid, "KILL") end end
    end)
    for i = 1, 2 do
      outs[i] = dir .. "/out" .. i .. ".txt"
      local s = cons.script(dir, { name = "c" .. i, group = GROUP, ns = ns, topic = TOPIC,
        out = outs[i] })
      pids[i] = cons.spawn(s, dir .. "/run" .. i .. ".log")
    end
    local function committed_all()
      for b = 0, 1 do
        for q = 0, QUEUES - 1 do
          local max = lib.rmq_devbroker_max_offset(db, b, TOPIC, q)
          if lib.rmq_devbroker_committed_offset(db, b, GROUP, TOPIC, q) ~= max then return false end
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
