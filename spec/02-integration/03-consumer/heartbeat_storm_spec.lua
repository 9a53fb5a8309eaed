-- Pulls answered SUBSCRIPTION_NOT_EXIST are retried after pull_time_delay_mills_when_exception,
-- as Java does (DefaultMQPushConsumerImpl.pullMessage's onException): they do not start a
-- heartbeat round each (8 queues failing every 100 ms were 80 HEART_BEATs a second). At most one
-- extra heartbeat per heartbeat_broker_interval goes out for them.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local PULL, HEART_BEAT, SUBSCRIPTION_NOT_EXIST = 11, 34, 24
local TOPIC, GROUP, QUEUES = "HbTopic", "g_hb", 8

describe("consumer: pulls failing with SUBSCRIPTION_NOT_EXIST", function()
  it("are delayed without a heartbeat round each", function()
    local db, ns = cons.test_broker("--topic " .. TOPIC .. ":" .. QUEUES)
    assert.equal(0, lib.rmq_devbroker_push_error(db, cons.ALL, PULL, SUBSCRIPTION_NOT_EXIST,
      100000))
    local dir = helpers.tmpdir("hb")
    local out = dir .. "/out.txt"
    local s = cons.script(dir, { group = GROUP, ns = ns, topic = TOPIC, out = out,
      extra = "pull_time_delay_mills_when_exception = 100," })
    local log = dir .. "/run.log"
    local pid = helpers.spawn(helpers.bin .. " run " .. s, { log = log, rc = log .. ".rc" })
    -- Start-up (its heartbeats and rebalance) is over once every queue failed twice; then ten
    -- more failed pulls per queue (the retry queue's too).
    local function failed_pulls(n)
      assert.is_true(lib.rmq_devbroker_wait(db, cons.ALL, PULL, n * (QUEUES + 1),
        math.floor(60000 * helpers.scale)) > 0, "failing pulls (log " .. log .. ")")
    end
    failed_pulls(2)
    lib.rmq_devbroker_reset_counts(db)
    failed_pulls(10)
    local hb = lib.rmq_devbroker_count(db, cons.ALL, HEART_BEAT)
    assert.is_true(hb <= 1, hb .. " HEART_BEATs for " ..
      lib.rmq_devbroker_count(db, cons.ALL, PULL) .. " failed pulls")
    assert.is_truthy(cons.read(log):match("SUBSCRIPTION_NOT_EXIST"))

    -- Once the broker answers again, the queues are consumed.
    lib.rmq_devbroker_clear_errors(db)
    cons.produce(db, TOPIC, 40, "h")
    helpers.wait_until(function() return cons.count_lines(out) >= 40 end, 30, "consumed")
    helpers.kill(pid)
    assert.equal(0, cons.exit_code(log))
  end)
end)
