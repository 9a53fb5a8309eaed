-- consume_orderly: a queue revoked while its batch runs gets its broker lock back only once that
-- batch ended (the deferred unlock). When a rebalance gives the queue back before that, the new
-- entry relies on the same broker lock: the old batch's end must not unlock it (Java keeps the
-- process queue and its lock), and the new entry's handlers wait for the old batch (Java's
-- per-queue consume lock).
local helpers = require "helpers"
local ffi = require "ffi"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local timed = dofile(helpers.root .. "/spec/02-integration/03-consumer/timed.lua")
local lib = cons.lib

local UNLOCK = 42
local TOPIC, GROUP, QUEUES, PER_QUEUE = "OrdRelock", "g_ord_relock", 2, 5

describe("consumer: orderly queue revoked and given back while its batch runs", function()
  local fx = cons.broker_fixture("--topic " .. TOPIC .. ":" .. QUEUES)

  it("keeps the broker lock of the re-assigned queue", function()
    local hold = math.floor(8000 * helpers.scale)
    -- The first message of each queue holds its handler for `hold` ms, the first time only
    -- (a marker file per queue; the states of the consume threads share nothing else).
    local dir, out, s = timed.orderly(fx, "ord_relock", { group = GROUP, topic = TOPIC,
      queues = QUEUES, per_queue = PER_QUEUE,
      options = "consume_thread_min = 4, consume_thread_max = 4,",
      handler = function(d) return string.format([[
    local m = msgs[1]
    local q = m.queue_id
    local marker = %q .. "/held" .. q
    local held = io.open(marker)
    if m.queue_offset == 0 and not held then
      io.open(marker, "w"):close()
      rec(string.format("start %%s %%d %%d", m.body, q, now_ms()))
      sleep_ms(%d)
      rec(string.format("end %%s %%d %%d", m.body, q, now_ms()))
    else
      if held then held:close() end
      rec(string.format("msg %%s %%d %%d", m.body, q, now_ms()))
    end
    ]], d, hold) end })
    local log = dir .. "/run.log"
    local pid = helpers.spawn(string.format("%s run %s", helpers.bin, helpers.shq(s)),
      { log = log })
    helpers.wait_until(function()
      local n = 0
      for _, r in ipairs(timed.rows(out)) do n = n + (r[1] == "start" and 1 or 0) end
      return n == QUEUES
    end, 60, "both queues' first batches running (log " .. log .. ")")
    local cid = cons.read(log):match("started as (%S+)")
    assert.is_truthy(cid)

    -- A second member joins: one queue is revoked while its batch runs (the unlock waits).
    local leave = cons.join_group(fx.db, GROUP, TOPIC)
    local name
    helpers.wait_until(function()
      name = cons.read(log):match("(" .. TOPIC .. "@%S+#%d+): revoked")
      return name
    end, 30, "a queue revoked (log " .. log .. ")")
    local qid = tonumber(name:match("#(%d+)$"))
    -- It leaves again: the queue comes back to the consumer, under the lock it still holds.
    assert(leave())
    helpers.wait_until(function()
      local n = 0
      for _ in cons.read(log):gmatch(name:gsub("%p", "%%%0") .. ": assigned") do n = n + 1 end
      return n == 2
    end, 30, "the queue assigned again (log " .. log .. ")")
    local ended
    for _, r in ipairs(timed.rows(out)) do
      if r[1] == "end" and r[3] == qid then ended = true end
    end
    assert.is_nil(ended, "the held batch ended before the queue came back: hold longer")
    lib.rmq_devbroker_reset_counts(fx.db)

    -- The old batch ends; its queue's lock stays with the consumer, and the queue goes on.
    local t_end
    helpers.wait_until(function()
      for _, r in ipairs(timed.rows(out)) do
        if r[1] == "end" and r[3] == qid then t_end = r[4]; return true end
      end
    end, 60, "the held batch ended (log " .. log .. ")")
    helpers.wait_until(function()
      local n = 0
      for _, r in ipairs(timed.rows(out)) do
        if r[1] == "msg" and r[3] == qid then n = n + 1 end
      end
      return n >= PER_QUEUE - 1
    end, 60, "the re-assigned queue consumed (log " .. log .. ")")
    helpers.sleep(0.5)
    assert.equal(0, lib.rmq_devbroker_count(fx.db, 0, UNLOCK))
    local buf = ffi.new("char[256]")
    local n = lib.rmq_devbroker_lock_owner(fx.db, 0, GROUP, TOPIC, qid, buf, 256)
    assert.is_true(n > 0, "queue " .. qid .. " unlocked")
    assert.equal(cid, ffi.string(buf, n))
    -- The new entry's handlers did not run alongside the old batch.
    for _, r in ipairs(timed.rows(out)) do
      if r[1] == "msg" and r[3] == qid then
        assert.is_true(r[4] >= t_end, r[2] .. " ran while the revoked batch still ran")
      end
    end
    helpers.kill(pid)
  end)
end)
