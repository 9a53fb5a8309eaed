-- The suggestWhichBrokerId of a pull response picks where the queue's next pull goes, as
-- MQClientInstance.findBrokerAddressInSubscribe(brokerName, brokerId, false) does: that broker
-- id, else id + 1 for a slave id, else the broker name's first address. Whatever number a broker
-- sends (2^63 - 1, negative, unknown) the consumer keeps pulling from an address it has.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local PULL = 11
local TOPIC, QUEUES, N = "SuggestT", 2, 40

local function consume_all(db, ns, dir, group, out)
  local script = cons.script(dir, {group = group, ns = ns, topic = TOPIC, out = out,
    extra = "pull_batch_size = 4,"})
  local log = dir .. "/" .. group .. ".log"
  local pid = cons.spawn(script, log)
  helpers.wait_until(function()
    assert(cons.alive(pid), "the consumer ended: " .. cons.read(log))
    return cons.count_lines(out) >= N
  end, 30, "every message consumed (log " .. log .. ")")
  helpers.wait_until(function() return (cons.all_committed(db, group, TOPIC, QUEUES)) end, 30,
    "every offset committed (log " .. log .. ")")
  assert.is_true(cons.alive(pid), "consumer alive (log " .. log .. ")")
  cons.stop(pid)
  assert.equal(0, cons.exit_code(log), cons.read(log))
  local seen = {}
  for _, r in ipairs(cons.records(out)) do seen[r.body] = (seen[r.body] or 0) + 1 end
  for i = 1, N do assert.equal(1, seen["m" .. i], "m" .. i) end
  return cons.read(log)
end

describe("consumer: suggestWhichBrokerId", function()
  it("an id no broker has (2^63 - 1, -7) leaves the pulls on the master", function()
    local db, ns = cons.test_broker("--topic " .. TOPIC .. ":" .. QUEUES)
    cons.produce(db, TOPIC, N, "m")
    for k, id in ipairs({"9223372036854775807LL", "-7LL"}) do
      lib.rmq_devbroker_reset_counts(db)
      assert.equal(0, lib.rmq_devbroker_set_suggest(db, 0, loadstring("return " .. id)()))
      local dir = helpers.tmpdir("suggest")
      -- every response after the first suggests the id: about N / 4 pulls follow one
      local text = consume_all(db, ns, dir, "g_suggest" .. k, dir .. "/out.txt")
      assert.is_true(lib.rmq_devbroker_count(db, 0, PULL) > N / 4 / QUEUES, text)
    end
  end)

  it("a slave's id sends the pulls to that slave", function()
    local db, ns = cons.test_broker("--slaves 1 --topic " .. TOPIC .. ":" .. QUEUES)
    local slave = lib.rmq_devbroker_slave(db, 0, 1)
    cons.produce(db, TOPIC, N, "m")
    assert.equal(0, lib.rmq_devbroker_set_suggest(db, 0, 1))
    assert.equal(0, lib.rmq_devbroker_set_suggest(db, slave, 1))
    local dir = helpers.tmpdir("suggest")
    consume_all(db, ns, dir, "g_suggest_slave", dir .. "/out.txt")
    assert.is_true(lib.rmq_devbroker_count(db, slave, PULL) > 0)
  end)
end)
