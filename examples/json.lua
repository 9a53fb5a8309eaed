-- json.lua: decode JSON bodies, filter, aggregate.
--
--   rmqlua run examples/json.lua --namesrv 127.0.0.1:9876
--   rmqlua run examples/json.lua --embedded   (the sample producer's bodies are such orders)
--   rmqlua test examples/json.lua examples/cases/json.lua   (offline test cases, no broker)
--
-- Orders arrive on OrderTopic as {"id": 1, "customer": "c1", "amount": 12.5}. Orders of at
-- least min_amount are added to a per-customer total; the others are skipped. Every message
-- is acknowledged: a body that is not JSON is logged and skipped, not retried (retrying would
-- not fix it).
--
-- Top-level code runs once in every Lua state (one per consume thread), so `totals` below is
-- per thread, without locks. Values are never shared between threads.
local rmq = require "rmq"
-- rmq.json decodes a message's body where it lies (no Lua string of it); its results and errors
-- are lua-cjson's. decode_safe returns nil, err instead of raising (like cjson.safe).
local json = require "rmq.json"

local min_amount = 10
local totals = {}   -- customer -> sum, this thread only
local seen = 0

return {
  consumer_group = "order_audit",
  subscribe = { OrderTopic = "TagA || TagB" },
  consume_thread_min = 4,
  consume_thread_max = 4,
  consume_message_batch_max_size = 16,
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",

  init = function(ctx)
    rmq.log("info", "json consumer thread", ctx.thread_index, "of", ctx.thread_count, "ready")
  end,

  consume = function(msgs, ctx)
    for i = 1, #msgs do
      local m = msgs[i]
      local order, err = json.decode_safe(m)
      if type(order) ~= "table" then
        rmq.log("warn", "skipping", m.msg_id, "(not a JSON object:", err or type(order), ")")
      elseif type(order.amount) == "number" and order.amount >= min_amount then
        local c = tostring(order.customer)
        totals[c] = (totals[c] or 0) + order.amount
        -- One write per line: 4 threads share stdout, and print() writes in pieces.
        io.write(string.format("order %s customer %s amount %.2f total %.2f\n", tostring(order.id),
          c, order.amount, totals[c]))
      end
      seen = seen + 1
    end
  end,

  shutdown = function(ctx)
    for c, sum in pairs(totals) do
      rmq.log("info", "thread", ctx.thread_index, "customer", c, "total", sum)
    end
    rmq.log("info", "thread", ctx.thread_index, "saw", seen, "message(s)")
  end,
}
