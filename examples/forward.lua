-- forward.lua: consume, transform, send to another topic.
--
--   rmqlua run examples/forward.lua --namesrv 127.0.0.1:9876
--   rmqlua run examples/forward.lua --embedded   (the status line counts what was sent)
--   rmqlua test examples/forward.lua examples/cases/forward.lua   (offline test cases, no broker)
--
-- Every message of InTopic is sent to OutTopic with its body upper-cased, its tags kept and a
-- property naming where it came from. rmq.send(topic, body, opts) queues the message; the
-- runtime sends it from the network thread after the handler returned successfully. If a send
-- fails, the batch counts as failed and is consumed again (so a message may be forwarded twice:
-- make the receiver idempotent, e.g. with the ORIGIN key below). If the handler fails, nothing
-- it queued is sent.
--   opts: tags = "T", keys = "k" or { "k1", "k2" }, properties = { name = "value" },
--         delay_level = n
local rmq = require "rmq"

return {
  consumer_group = "forward_demo",
  subscribe = { InTopic = "*" },
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  consume_message_batch_max_size = 8,

  consume = function(msgs)
    for i = 1, #msgs do
      local m = msgs[i]
      local body = m.body:upper()
      rmq.send("OutTopic", body, {
        tags = m.tags,
        keys = { "ORIGIN_" .. m.msg_id },
        properties = { forwarded_from = m.topic },
      })
      -- One write per line: the consume threads share stdout.
      io.write(string.format("forward %s %s#%d -> OutTopic (%d bytes, tags %s)\n", m.msg_id,
        m.topic, m.queue_id, #body, tostring(m.tags)))
    end
  end,
}
