-- allocate.lua: a custom queue allocation strategy.
--
--   rmqlua run examples/allocate.lua --namesrv 127.0.0.1:9876
--   rmqlua run examples/allocate.lua --embedded
--   rmqlua test examples/allocate.lua examples/cases/allocate.lua   (offline test cases, no broker)
--
-- allocate(group, client_id, mq_all, cid_all) runs in the control state on the network thread
-- at every rebalance. mq_all is the sorted list of the topic's queues
-- ({ topic =, broker_name =, queue_id = }), cid_all the sorted client ids of the group. Return
-- the queues this client should own: a subset of mq_all (the same tables or equal ones). A
-- result that is not a subset, or an error, is logged and the rebalance falls back to
-- AllocateMessageQueueAveragely. This one deals queues round-robin by queue id (like
-- AllocateMessageQueueAveragelyByCircle), so queue n always belongs to client n % #cid_all.
--
-- on_assign(mqs) / on_revoke(mqs) run after a rebalance changed what this client owns.

local function name(mq) return mq.topic .. "@" .. mq.broker_name .. "#" .. mq.queue_id end

return {
  consumer_group = "allocate_demo",
  subscribe = { AllocTopic = "*" },
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",

  allocate = function(group, client_id, mq_all, cid_all)
    local me
    for i, cid in ipairs(cid_all) do
      if cid == client_id then me = i end
    end
    if not me then return {} end
    local mine = {}
    for i, mq in ipairs(mq_all) do
      if (i - 1) % #cid_all == me - 1 then mine[#mine + 1] = mq end
    end
    return mine
  end,

  -- Output: one io.write per line, so lines from 20 threads never interleave (print() writes
  -- its pieces one by one).
  on_assign = function(mqs)
    for _, mq in ipairs(mqs) do io.write("assigned " .. name(mq) .. "\n") end
  end,

  on_revoke = function(mqs)
    for _, mq in ipairs(mqs) do io.write("revoked " .. name(mq) .. "\n") end
  end,

  consume = function(msgs)
    for i = 1, #msgs do
      local m = msgs[i]
      io.write(string.format("queue %d offset %d body %s\n", m.queue_id, tonumber(m.queue_offset),
        m.body))
    end
  end,
}
