-- reload.lua: a consumer to change while it runs.
--
--   rmqlua run examples/reload.lua --namesrv 127.0.0.1:9876 --watch   # reloads on every save
--   kill -HUP <pid of rmqlua>                                        # or when you say so
--   rmqlua run examples/reload.lua --embedded --watch                # against the embedded broker
--   rmqlua test examples/reload.lua examples/cases/reload.lua   (offline test cases, no broker)
--
-- Edit RULES below (or the subscription, consume_thread_min, consume_tps_limit, the allocate
-- hook, ...) and save. The new version is checked first, as `rmqlua check` does: a syntax
-- error, a bad option or a failing init keeps the running version, and the log says why with
-- file:line. Then the threads of the running version finish the batches they run and their
-- shutdown hooks run; the new version's threads run init and take over. No message is lost or
-- handled twice. What must outlive a reload belongs in rmq.shared (here: the totals); Lua
-- locals start afresh in every new state. consumer_group and message_model cannot change while
-- the consumer runs: such a reload is refused and the running version stays.
local rmq = require "rmq"

local VERSION = 1 -- bump it to see the reload in the log

local RULES = {   -- tag -> what becomes of its messages
  TagA = "accept",
  TagB = "delay", -- consumed again in 10 s
  TagC = "drop",  -- to the dead-letter queue %DLQ%reload_demo
}

return {
  consumer_group = "reload_demo",
  subscribe = { ReloadTopic = "*" },
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  shared = { totals = "1m" },

  init = function(ctx)
    -- rmq.role is "check" in the throwaway state a reload checks the script in.
    if ctx.thread_index == 1 and rmq.role == "consume" then
      rmq.log("info", "reload demo: version", VERSION, "runs on", ctx.thread_count, "threads")
    end
  end,

  consume = function(msgs, ctx)               -- one message per batch (the default)
    local m = msgs[1]
    local rule = RULES[m.tags or ""] or "accept"
    rmq.shared.totals:incr(rule, 1, 0)
    if rule == "delay" then
      ctx.delay_level = 3
      return rmq.RECONSUME_LATER
    elseif rule == "drop" then
      return rmq.DLQ
    end
  end,

  shutdown = function(ctx)
    if ctx.thread_index == 1 and rmq.role == "consume" then
      local t = rmq.shared.totals
      print(string.format("version %d stops: %d accepted, %d delayed, %d dropped so far", VERSION,
        t:get("accept") or 0, t:get("delay") or 0, t:get("drop") or 0))
    end
  end,
}
