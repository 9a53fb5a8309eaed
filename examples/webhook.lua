-- webhook.lua: POST each message as JSON to an HTTP endpoint (rmq.http), retrying what failed.
--
--   WEBHOOK_URL=http://127.0.0.1:8080/hook rmqlua run examples/webhook.lua --namesrv 127.0.0.1:9876
--   rmqlua run examples/webhook.lua --embedded   (with nothing listening on WEBHOOK_URL every
--                                                 message fails and comes back: watch retried
--                                                 in the status line, then start a receiver)
--   rmqlua test examples/webhook.lua examples/cases/webhook.lua   (offline: the cases stub the
--                                                                  endpoint's answers)
--
-- WEBHOOK_URL (default http://127.0.0.1:8080/hook) receives
--   {"topic":..,"tags":..,"keys":..,"msg_id":..,"reconsume_times":..,"born_timestamp":"..",
--    "body":..}
-- with the message id as its Idempotency-Key header (a message can be delivered more than once:
-- the receiver drops what it has seen). WEBHOOK_TIMEOUT_MS (default 5000) bounds each request.
--   2xx                        success
--   5xx, 408, 429, a timeout,  the message comes back later (rmq.RECONSUME_LATER) on the
--   a refused connection       broker's schedule (10 s, 30 s, 1 min, 2 min, ... 2 h), up to
--                              max_reconsume_times (16: nearly 5 hours of a receiver down),
--                              then it goes to %DLQ%webhook_demo
--   any other 4xx              the receiver refuses this message: retrying will not change its
--                              mind, so it goes to the dead-letter queue at once (rmq.DLQ);
--                              `rmqlua redrive` sends it back once the receiver is fixed
--   3xx                        as a 4xx (rmq.http follows no redirect unless asked: give the
--                              final URL)
-- The handler waits for the answer on its consume thread's event loop (rmq.http is a cosocket
-- client), not in a blocking call.
local rmq = require "rmq"
local cjson = require "cjson"

local URL = os.getenv("WEBHOOK_URL") or "http://127.0.0.1:8080/hook"
local TIMEOUT = tonumber(os.getenv("WEBHOOK_TIMEOUT_MS") or "") or 5000

local function payload(m)
  return cjson.encode({ topic = m.topic, tags = m.tags, keys = m.keys, msg_id = m.msg_id,
    reconsume_times = m.reconsume_times, born_timestamp = tostring(m.born_timestamp):gsub("LL$", ""),
    body = m.body })
end

return {
  consumer_group = "webhook_demo",
  subscribe = { WebhookTopic = "*" },
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  consume_message_batch_max_size = 1, -- one message, one request, one outcome

  consume = function(msgs)
    local m = msgs[1]
    -- A table per request: other coroutines of this thread may run while this one waits.
    local headers = { ["Content-Type"] = "application/json", ["Idempotency-Key"] = m.msg_id }
    local res, err = rmq.http.request { method = "POST", url = URL, headers = headers,
      body = payload(m), timeout = TIMEOUT }
    local status = res and res.status
    -- One write per line: the consume threads share stdout.
    if status and status >= 200 and status < 300 then
      io.write(string.format("posted %s -> %d\n", m.msg_id, status))
      return rmq.SUCCESS
    end
    if not status or status >= 500 or status == 408 or status == 429 then
      io.write(string.format("retry %s (%s), delivery %d\n", m.msg_id, status or err,
        m.reconsume_times + 1))
      return rmq.RECONSUME_LATER
    end
    io.write(string.format("refused %s (%d): to %%DLQ%%webhook_demo\n", m.msg_id, status))
    return rmq.DLQ
  end,
}
