-- The examples run for real: `rmqlua run` against the development broker (started in this
-- process through the FFI), messages produced into it, the script's output and the broker's
-- state checked, then SIGINT and a clean exit (code 0).
local helpers = require "helpers"
local rh = require "run_helpers"
local R = require "02-integration.04-lua.runner"

local example = rh.example

describe("examples against the development broker", function()
  R.broker_fixture("--delay-scale 0.01 --enable-property-filter")

  it("hello prints every message", function()
    for i = 1, 3 do R.produce("TopicTest", "hello " .. i, "TagA", "k" .. i) end
    local h = R.start(example("hello"))
    for i = 1, 3 do h.wait_for("body=hello " .. i) end
    assert.matches("TopicTest#%d+@%d+ tags=TagA keys=k1 body=hello 1", h.out())
    assert.are.equal(0, h.stop())
  end)

  it("json decodes, filters and aggregates", function()
    R.produce("OrderTopic", '{"id":1,"customer":"c1","amount":12.5}', "TagA")
    R.produce("OrderTopic", '{"id":2,"customer":"c1","amount":2}', "TagB")
    R.produce("OrderTopic", 'not json', "TagA")
    R.produce("OrderTopic", '{"id":3,"customer":"c2","amount":99}', "TagC") -- filtered by tag
    local h = R.start(example("json"))
    h.wait_for("order 1 customer c1 amount 12.50")
    h.wait_for("skipping")
    assert.are.equal(0, h.stop())
    local out = h.out()
    assert.is_nil(out:find("order 2 "))
    assert.is_nil(out:find("order 3 "))
    assert.matches("customer c1 total 12.5", out) -- from shutdown
  end)

  it("retry sees a failed message come back and sends 'dlq' to the DLQ", function()
    R.produce("RetryTopic", "please fail")
    R.produce("RetryTopic", "dlq")
    local h = R.start(example("retry"))
    h.wait_for("reconsume_times=0 body=please fail")
    h.wait_for("reconsume_times=1 body=please fail", "the retried message")
    helpers.wait_until(function() return R.topic_count("%DLQ%retry_demo", 1) >= 1 end, 30,
      "a message in %DLQ%retry_demo")
    assert.are.equal(0, h.stop())
  end)

  it("allocate owns the queues its strategy chose and consumes from them", function()
    R.create_topic("AllocTopic", 4)
    R.produce("AllocTopic", "alloc-1")
    local h = R.start(example("allocate"))
    for q = 0, 3 do h.wait_for("assigned AllocTopic@[%w-]+#" .. q) end
    h.wait_for("body alloc%-1")
    assert.are.equal(0, h.stop())
  end)

  it("shared handles each order once across threads and counts in a shared dictionary", function()
    R.produce("ShopOrders", '{"id":1,"customer":"c1"}', nil, "order-1")
    R.produce("ShopOrders", '{"id":2,"customer":"c2"}', nil, "order-2")
    R.produce("ShopOrders", '{"id":1,"customer":"c1"}', nil, "order-1") -- a producer retry
    R.produce("ShopOrders", '{"id":3,"customer":"c3"}', nil, "order-3")
    local h = R.start(example("shared"))
    helpers.wait_until(function() return R.committed("shared_demo", "ShopOrders", 8) >= 4 end, 30,
      "four offsets committed")
    assert.are.equal(0, h.stop())
    assert.matches("handled 3 order%(s%), skipped 1 duplicate%(s%)", h.out())
  end)

  it("throttle delivers, pauses on a busy downstream and stops on STOP", function()
    R.produce("JobTopic", "job 1", nil, nil, 0)
    R.produce("JobTopic", "busy: job 2", nil, nil, 0)
    local h = R.start(example("throttle"))
    h.wait_for("delivered job 1")
    h.wait_for("pulling paused for 10%.000 s by rmq%.pause%(%)")
    -- Queue 0's next pull went out before the pause: it still brings STOP.
    R.produce("JobTopic", "", "STOP", nil, 0)
    h.wait_for("rmq%.stop%(%) in consume thread")
    assert.are.equal(0, h.wait_exit(30, "rmqlua to exit by itself"))
    assert.matches("consume_tps_limit 200", h.out())
  end)

  it("reload follows an edit of its rules (--watch), totals carried over", function()
    -- A copy to edit, in the test's own folder.
    local dir = helpers.tmpdir("reload-example")
    local text = helpers.read_file(example("reload"))
    local function save(t) return rh.replace(dir, "reload.lua", t) end
    local path = save(text)
    R.produce("ReloadTopic", "a1", "TagA")
    local h = R.start(path, "--watch")
    h.wait_for("reload demo: version 1 runs on 20 threads")
    helpers.wait_until(function() return R.committed("reload_demo", "ReloadTopic", 8) >= 1 end, 30,
      "a1 consumed")
    -- Version 2 drops TagA.
    save((text:gsub("local VERSION = 1", "local VERSION = 2")
      :gsub('TagA = "accept"', 'TagA = "drop"')))
    h.wait_for("reload demo: version 2 runs on 20 threads", "the edited version")
    h.wait_for("version 1 stops: 1 accepted, 0 delayed, 0 dropped so far")
    R.produce("ReloadTopic", "a2", "TagA")
    helpers.wait_until(function() return R.topic_count("%DLQ%reload_demo", 1) >= 1 end, 30,
      "a2 in %DLQ%reload_demo")
    assert.are.equal(0, h.stop())
    assert.matches("version 2 stops: 1 accepted, 0 delayed, 1 dropped so far", h.out())
  end)

  it("sql92 gets only the EU orders over 10, chosen by the broker", function()
    R.produce_props("OrderTopic", "a", { region = "eu", amount = "12.53" }, "TagA", "sql-o1")
    R.produce_props("OrderTopic", "b", { region = "us", amount = "19" }, "TagA", "sql-o2")
    R.produce_props("OrderTopic", "c", { region = "eu", amount = "9.5" }, "TagB", "sql-o3")
    R.produce_props("OrderTopic", "d", { region = "eu" }, "TagB", "sql-o4")
    R.produce_props("OrderTopic", "e", { region = "eu", amount = "10.25" }, "TagB", "sql-o5")
    local h = R.start(example("sql92"))
    h.wait_for("order sql%-o1 region=eu amount=12.53 tags=TagA")
    h.wait_for("order sql%-o5 region=eu amount=10.25 tags=TagB")
    assert.are.equal(0, h.stop())
    local out = h.out()
    for _, k in ipairs { "sql-o2", "sql-o3", "sql-o4" } do assert.is_nil(out:find(k, 1, true), k) end
    assert.are.equal(2, h.count("order sql%-o"))
  end)

  it("forward sends transformed messages to OutTopic", function()
    R.create_topic("OutTopic", 4)
    R.produce("InTopic", "abc", "TagA")
    R.produce("InTopic", "def", "TagB")
    local h = R.start(example("forward"))
    helpers.wait_until(function() return R.topic_count("OutTopic", 4) >= 2 end, 30,
      "two messages in OutTopic")
    assert.are.equal(0, h.stop())
  end)
end)
