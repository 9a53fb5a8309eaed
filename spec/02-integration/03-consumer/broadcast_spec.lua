-- BROADCASTING: every consumer of the group gets every message, offsets live in the local
-- offsets.json (LocalFileOffsetStore), and a restarted consumer continues from its file.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local TOPIC, GROUP, N, QUEUES = "BcTopic", "g_bc", 2000, 4

describe("consumer: broadcasting", function()
  local fx = cons.broker_fixture("--topic " .. TOPIC .. ":" .. QUEUES, "bc")

  it("delivers everything to each consumer and resumes from the local offset file", function()
    cons.produce(fx.db, TOPIC, N, "b")
    local function script(i, out)
      return cons.script(fx.dir, { name = "bc" .. i, group = GROUP, ns = fx.ns, topic = TOPIC,
        out = out, extra = string.format('message_model = "BROADCASTING", '
          .. 'instance_name = "inst%d", local_offset_store_dir = %q,', i, fx.dir .. "/offsets") })
    end
    local outs, pids, logs = {}, {}, {}
    for i = 1, 2 do
      outs[i] = fx.dir .. "/out" .. i .. ".txt"
      logs[i] = fx.dir .. "/run" .. i .. ".log"
      pids[i] = cons.spawn(script(i, outs[i]), logs[i])
    end
    for i = 1, 2 do
      helpers.wait_until(function() return cons.count_lines(outs[i]) >= N end, 60,
        "consumer " .. i .. " got everything")
    end
    for i = 1, 2 do
      cons.stop(pids[i])
      assert.equal(0, cons.exit_code(logs[i]))
      local seen = {}
      for _, r in ipairs(cons.records(outs[i])) do
        assert.is_nil(seen[r.body], "duplicate " .. r.body)
        seen[r.body] = true
      end
      for k = 1, N do assert.is_true(seen["b" .. k], "b" .. k) end
    end
    -- The file of consumer 1: <fx.dir>/<ip>@inst1/g_bc/offsets.json with every queue at its max.
    local p = io.popen("ls " .. fx.dir .. "/offsets/*@inst1/" .. GROUP .. "/offsets.json")
    local path = p:read("*l")
    p:close()
    assert.is_truthy(path, "offsets.json of consumer 1")
    local content = cons.read(path)
    for q = 0, QUEUES - 1 do
      local max = tonumber(lib.rmq_devbroker_max_offset(fx.db, 0, TOPIC, q))
      local pat = '"queueId":' .. q .. ',%s*"topic":"' .. TOPIC .. '"%s*}:%s*(%d+)'
      assert.equal(max, tonumber(content:match(pat)), "queue " .. q .. " in " .. content)
    end
    -- No offsets were committed on the broker.
    assert.equal(-1, tonumber(lib.rmq_devbroker_committed_offset(fx.db, 0, GROUP, TOPIC, 0)))
    -- Restart consumer 1 and add messages: only the new ones arrive.
    cons.produce(fx.db, TOPIC, 100, "n")
    local out3 = fx.dir .. "/out3.txt"
    pids[3] = cons.spawn(script(1, out3), fx.dir .. "/run3.log")
    helpers.wait_until(function() return cons.count_lines(out3) >= 100 end, 60, "new messages")
    cons.stop(pids[3])
    for _, r in ipairs(cons.records(out3)) do assert.equal("n", r.body:sub(1, 1)) end
    assert.equal(100, cons.count_lines(out3))
  end)
end)
