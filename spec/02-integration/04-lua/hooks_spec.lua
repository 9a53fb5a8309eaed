-- Hooks under `rmqlua run` against the development broker: init and shutdown once per consume
-- state, per-thread isolation of globals, a handler error logged with the message id while the
-- runtime keeps going (the message comes back), consume_orderly with SUSPEND, and a handler
-- reading a view after its batch.
local helpers = require "helpers"
local R = require "02-integration.04-lua.runner"

describe("hooks under rmqlua run", function()
  R.broker_fixture("--delay-scale 0.01")

  it("prints whole lines when several consume threads print at once", function()
    R.fill_topic("PrintTopic", 8, 200, "p")
    local script = R.write("prints.lua", R.head("print_group", "PrintTopic", 4) .. [[
  consume = function(msgs, ctx)
    for i = 1, #msgs do
      for k = 1, 20 do print("line", ctx.thread_index, msgs[i].body, k) end
    end
  end,
}
]])
    local h = R.start(script)
    helpers.wait_until(function() return h.count("line\t%d\tp%d+\t20\n") >= 200 end, 30,
      "200 messages printed")
    assert.are.equal(0, h.stop())
    -- Lua's own print writes each argument and the newline apart: threads' lines interleaved.
    local n = 0
    for l in h.out():gmatch("[^\n]*line[^\n]*") do
      assert.matches("^line\t%d\tp%d+\t%d+$", l)
      n = n + 1
    end
    assert.are.equal(200 * 20, n)
  end)

  it("run init and shutdown once per consume state, each state with its own globals", function()
    R.fill_topic("IsoTopic", 8, 40, "m")
    local script = R.write("iso.lua", "TOP = (TOP or 0) + 1\nlocal count = 0\n"
      .. R.head("iso_group", "IsoTopic", 3) .. [[
  init = function(ctx)
    INITS = (INITS or 0) + 1
    MINE = ctx.thread_index
    print(string.format("init thread=%d of %d inits=%d top=%d", ctx.thread_index, ctx.thread_count, INITS, TOP))
  end,
  consume = function(msgs, ctx)
    count = count + #msgs
    if MINE ~= ctx.thread_index then print("ISOLATION BROKEN") end
    for i = 1, #msgs do print("consumed " .. msgs[i].body .. " by " .. ctx.thread_index) end
  end,
  shutdown = function(ctx)
    print(string.format("shutdown thread=%d inits=%d", ctx.thread_index, INITS))
  end,
}
]])
    local h = R.start(script)
    for t = 1, 3 do h.wait_for("init thread=" .. t .. " of 3 inits=1 top=1") end
    require("helpers").wait_until(function() return h.count("consumed m%d+ by") >= 40 end, 30,
      "40 messages consumed")
    assert.are.equal(0, h.stop())
    local out = h.out()
    assert.is_nil(out:find("ISOLATION BROKEN"))
    assert.are.equal(3, h.count("init thread="))
    for t = 1, 3 do
      assert.are.equal(1, h.count("shutdown thread=" .. t .. " inits=1"))
    end
  end)

  it("log a handler error with the message id and consume the message again", function()
    R.produce("ErrTopic", "explode")
    local script = R.write("err.lua", [[
return {
  consumer_group = "err_group",
  subscribe = { ErrTopic = "*" },
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  consume = function(msgs, ctx)
    local m = msgs[1]
    print("attempt " .. m.reconsume_times .. " " .. m.msg_id)
    ctx.delay_level = 1
    if m.reconsume_times == 0 then error("handler exploded") end
    KEPT = m
  end,
}
]])
    local h = R.start(script)
    h.wait_for("attempt 0 ")
    local id = h.out():match("attempt 0 (%w+)")
    h.wait_for("handler exploded")
    h.wait_for("attempt 1 " .. id, "the message again")
    assert.are.equal(0, h.stop())
    local out = h.out()
    assert.matches("consume failed for 1 message%(s%) %[" .. id .. "%]", out)
    assert.matches("stack traceback", out)
  end)

  it("suspend an orderly queue and consume the same message again", function()
    R.create_topic("OrdTopic", 1)
    R.produce("OrdTopic", "o1", nil, nil, 0)
    R.produce("OrdTopic", "o2", nil, nil, 0)
    local script = R.write("ord.lua", [[
local rmq = require "rmq"
local tries = 0
return {
  consumer_group = "ord_group",
  subscribe = { OrdTopic = "*" },
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  consume_orderly = function(msgs, ctx)
    local b = msgs[1].body
    print("ordered " .. b)
    if b == "o1" then
      tries = tries + 1
      if tries < 3 then ctx.suspend_millis = 10; return rmq.SUSPEND end
    end
  end,
}
]])
    local h = R.start(script)
    h.wait_for("ordered o2")
    assert.are.equal(0, h.stop())
    local out = h.out()
    -- o1 three times (two suspends), and o2 only after o1 succeeded.
    local seq = {}
    for b in out:gmatch("ordered (o%d)") do seq[#seq + 1] = b end
    assert.are.same({ "o1", "o1", "o1", "o2" }, { seq[1], seq[2], seq[3], seq[4] })
  end)

  it("log a bad allocate result and fall back to AllocateMessageQueueAveragely", function()
    R.create_topic("BadAllocTopic", 2)
    R.produce("BadAllocTopic", "still consumed", nil, nil, 1)
    local script = R.write("badalloc.lua", [[
return {
  consumer_group = "badalloc_group",
  subscribe = { BadAllocTopic = "*" },
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  allocate = function(group, cid, mq_all, cid_all)
    return { { topic = "NotMine", broker_name = "nowhere", queue_id = 7 } }
  end,
  consume = function(msgs) print("got " .. msgs[1].body) end,
}
]])
    local h = R.start(script)
    h.wait_for("not one of mq_all", "the allocate error")
    h.wait_for("got still consumed", "consumption through the averagely fallback")
    assert.are.equal(0, h.stop())
  end)

  it("call on_revoke and on_assign when a second consumer joins the group", function()
    R.create_topic("RevTopic", 4)
    local text = [[
return {
  consumer_group = "rev_group",
  subscribe = { RevTopic = "*" },
  on_assign = function(mqs)
    for _, mq in ipairs(mqs) do
      if mq.topic == "RevTopic" then print("assigned " .. mq.queue_id) end
    end
  end,
  on_revoke = function(mqs)
    for _, mq in ipairs(mqs) do
      if mq.topic == "RevTopic" then print("revoked " .. mq.queue_id) end
    end
  end,
  consume = function() end,
}
]]
    local a = R.run(R.write("rev_a.lua", text))
    helpers.defer(function() a.stop() end)
    for q = 0, 3 do a.wait_for("assigned " .. q) end
    local b = R.run(R.write("rev_b.lua", text))
    helpers.defer(function() b.stop() end)
    -- Averagely over two clients: each ends with two queues, so A gives two away.
    require("helpers").wait_until(function() return a.count("revoked %d") == 2 end, 60,
      "two queues revoked from the first consumer")
    require("helpers").wait_until(function() return b.count("assigned %d") == 2 end, 60,
      "two queues assigned to the second consumer")
    assert.are.equal(0, b.stop())
    assert.are.equal(0, a.stop())
  end)
end)
