-- shared.lua: state every consume thread sees. rmq.shared.NAME is a dictionary held in C behind
-- its own lock, shared by the 20 consume threads (and the control state) of this process, with
-- OpenResty's ngx.shared.DICT methods: get, set, add, replace, incr, delete, ttl, expire,
-- flush_all, get_keys. Values are strings, numbers or booleans; a full dictionary evicts its
-- least recently used entries. The dictionaries survive a reload of the script.
--
--   rmqlua run examples/shared.lua --namesrv 127.0.0.1:9876
--   rmqlua run examples/shared.lua --embedded   (prints the totals when stopped: Ctrl-C)
--   rmqlua test examples/shared.lua examples/cases/shared.lua   (offline test cases, no broker)
--
-- Orders arrive as JSON ({"id": 1, "customer": "c1"}), keyed by order id. Each order is handled
-- once, whichever thread gets it (a producer retry or a redelivery is skipped), and a customer
-- gets at most 3 orders a minute handled; more come back a minute later.
local rmq = require "rmq"
local cjson = require "cjson.safe"

local PER_MINUTE = 3

-- Stand-in for the real work (a database write, a call to another service).
local function handle(order)
  if order.amount and order.amount < 0 then error("negative amount in order " .. order.id) end
end

return {
  consumer_group = "shared_demo",
  subscribe = { ShopOrders = "*" },
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  shared = { seen = "16m", counters = "1m" },  -- name = size limit (k, m or g)

  consume = function(msgs, ctx)               -- one message per batch (the default)
    local m = msgs[1]
    local order = cjson.decode(m.body)
    if type(order) ~= "table" or not order.customer then
      rmq.log("warn", "not an order:", m.body)
      return
    end
    local seen, counters = rmq.shared.seen, rmq.shared.counters
    local key = m.keys or m.msg_id
    -- add succeeds for one caller only: this thread owns the order for the next hour.
    if not seen:add(key, true, 3600) then
      counters:incr("duplicates", 1, 0)
      return
    end
    -- A counter per customer that starts at 0 and disappears after 60 s.
    local ckey = "customer:" .. order.customer
    if counters:incr(ckey, 1, 0, 60) > PER_MINUTE then
      counters:incr(ckey, -1)
      seen:delete(key)                        -- it comes back: not a duplicate then
      ctx.delay_level = 5                     -- in 1 minute
      return rmq.RECONSUME_LATER
    end
    local ok, err = pcall(handle, order)
    if not ok then
      counters:incr(ckey, -1)
      seen:delete(key)
      error(err, 0)                           -- logged; the message comes back
    end
    counters:incr("handled", 1, 0)
  end,

  shutdown = function(ctx)
    if ctx.thread_index == 1 then
      local c = rmq.shared.counters
      print(string.format("handled %d order(s), skipped %d duplicate(s)", c:get("handled") or 0,
        c:get("duplicates") or 0))
    end
  end,
}
