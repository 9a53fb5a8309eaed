-- sql92.lua: let the broker choose the messages by their properties (a SQL92 selector, Java's
-- MessageSelector.bySql). Only orders from the EU over 10 reach consume().
--
--   rmqlua run examples/sql92.lua --embedded          (sample orders carry region and amount)
--   rmqlua test examples/sql92.lua examples/cases/sql92.lua
--
-- The broker evaluates the selector over each message's properties (the producer's user
-- properties plus TAGS, KEYS, ...); it needs enablePropertyFilter=true, else the consumer stops
-- at start with the broker's "The broker does not support consumer to filter message by SQL92".
-- Properties are strings: `amount > 10.0` compares them as doubles, while `amount > 10` would
-- read them with Integer.valueOf and skip a message whose amount is "12.53" (see
-- examples/README.md, "SQL92 subscriptions").
local rmq = require "rmq"

local seen = 0 -- per consume thread

return {
  consumer_group = "eu_big_orders",
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  subscribe = {
    OrderTopic = rmq.sql92("region = 'eu' AND amount > 10.0"),
  },

  consume = function(msgs, ctx)
    for i = 1, #msgs do
      local m = msgs[i]
      seen = seen + 1
      io.write(string.format("order %s region=%s amount=%s tags=%s\n", tostring(m.keys),
        m:property("region"), m:property("amount"), tostring(m.tags)))
    end
  end,

  shutdown = function(ctx)
    rmq.log("info", "thread", ctx.thread_index, "saw", seen, "EU order(s) over 10")
  end,
}
