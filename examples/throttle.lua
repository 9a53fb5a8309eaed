-- throttle.lua: keep a slow downstream healthy.
--
--   rmqlua run examples/throttle.lua --namesrv 127.0.0.1:9876
--   rmqlua run examples/throttle.lua --embedded   (one line per message delivered)
--   rmqlua test examples/throttle.lua examples/cases/throttle.lua   (offline test cases, no broker)
--
--  * consume_tps_limit = 200: this process consumes at most 200 messages a second. The pulls
--    slow down (a token bucket paces them), so nothing piles up in memory. It is rmqlua's own
--    option: the Java client has only pull_interval.
--  * When the downstream answers "busy", rmq.pause(10) stops pulling for 10 s and the message
--    comes back later; what was already pulled is still handled meanwhile. rmq.resume() would
--    end a pause early; rmq.pause() without seconds lasts until rmq.resume().
--  * A message tagged STOP ends the consumer, as SIGTERM would (rmq.stop): running batches
--    finish, offsets are committed, the exit code is 0.
-- rmq.pause, rmq.resume and rmq.stop work from any hook (init, consume, allocate, on_assign...).
local rmq = require "rmq"

-- Stand-in for the real downstream call: a body starting with "busy" plays an overloaded one.
local function deliver(body)
  if body:sub(1, 4) == "busy" then return nil, "busy" end
  -- One write per line: print() writes the newline separately, and the consume threads share
  -- stdout.
  io.write("delivered " .. body .. "\n")
  return true
end

return {
  consumer_group = "throttle_demo",
  subscribe = { JobTopic = "*" },
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  consume_tps_limit = 200,

  consume = function(msgs, ctx)               -- one message per batch (the default)
    local m = msgs[1]
    if m.tags == "STOP" then
      rmq.stop()
      return
    end
    local ok, err = deliver(m.body)
    if not ok then
      if err == "busy" then rmq.pause(10) end
      ctx.delay_level = 1                     -- back in about a second (after the pause)
      return rmq.RECONSUME_LATER
    end
  end,
}
