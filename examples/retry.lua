-- retry.lua: fail some messages and watch them come back.
--
--   rmqlua run examples/retry.lua --namesrv 127.0.0.1:9876
--   rmqlua run examples/retry.lua --embedded   (of the sample messages, every 10th says
--                                               "fail once", every 50th "dlq", every 100th
--                                               "poison": watch retried and dlq in the status)
--   rmqlua test examples/retry.lua examples/cases/retry.lua   (offline test cases, no broker)
--
-- A body containing "fail" fails on its first delivery and succeeds on the second; "poison"
-- always fails until max_reconsume_times is reached, then goes to %DLQ%retry_demo; "dlq"
-- goes to the dead-letter queue at once.
--
-- The return contract of consume(msgs, ctx):
--   return nothing / true          success (every message acknowledged)
--   ctx.ack_index = n              only the first n messages are acknowledged; the rest come
--                                  back later
--   return rmq.RECONSUME_LATER     the whole batch comes back later (also: return false)
--   error(...)                     same, and the error with its traceback and the message ids
--                                  is logged; the runtime keeps going
--   ctx.delay_level = n            when they come back (1 = 1s, 2 = 5s, 3 = 10s, ... 18 = 2h;
--                                  0 = the broker decides: 3 + reconsume_times)
--   return rmq.DLQ                 the unacknowledged messages go straight to the DLQ
local rmq = require "rmq"

return {
  consumer_group = "retry_demo",
  subscribe = { RetryTopic = "*" },
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  consume_message_batch_max_size = 1,
  max_reconsume_times = 3,

  consume = function(msgs, ctx)
    local m = msgs[1]
    local body = m.body
    -- One write per line: 20 threads share stdout, and print() writes in pieces.
    io.write(string.format("got %s reconsume_times=%d body=%s\n", m.msg_id, m.reconsume_times,
      body))
    if body:find("dlq", 1, true) then
      return rmq.DLQ
    end
    if body:find("poison", 1, true) then
      ctx.delay_level = 1
      error("cannot process " .. body)
    end
    if body:find("fail", 1, true) and m.reconsume_times == 0 then
      ctx.delay_level = 1 -- come back in about a second
      return rmq.RECONSUME_LATER
    end
  end,
}
