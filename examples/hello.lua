-- hello.lua: the smallest consumer. Prints every message of TopicTest.
--
--   rmqlua run examples/hello.lua --namesrv 127.0.0.1:9876
--   rmqlua run examples/hello.lua --embedded     (in-process development broker)
--   rmqlua test examples/hello.lua examples/cases/hello.lua   (offline test cases, no broker)
--
-- A consumer is one Lua file returning a table: options (any DefaultMQPushConsumer option in
-- snake_case, Java defaults otherwise), `subscribe` (topic -> tag expression) and hooks.
-- consume(msgs, ctx) gets a batch of up to consume_message_batch_max_size messages. Each
-- message is a view valid only while consume runs: copy what you need (m.body is a copy).
-- Returning nothing means success; raising an error means "consume these again later".
local rmq = require "rmq"

return {
  consumer_group = "hello_group",
  subscribe = { TopicTest = "*" },
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",

  consume = function(msgs, ctx)
    for i = 1, #msgs do
      local m = msgs[i]
      -- One write per line: print() writes its pieces separately, and 20 threads share stdout.
      io.write(string.format("[thread %d/%d] %s %s#%d@%d tags=%s keys=%s body=%s\n",
        ctx.thread_index, ctx.thread_count, m.msg_id, m.topic, m.queue_id,
        tonumber(m.queue_offset), tostring(m.tags), tostring(m.keys), m.body))
    end
    rmq.log("debug", "consumed", #msgs, "message(s)")
  end,
}
