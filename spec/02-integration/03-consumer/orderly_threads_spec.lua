-- consume_orderly: any consume thread may take any queue (Java's ConsumeMessageOrderlyService
-- submits each queue's ConsumeRequest to one shared pool), one batch per queue at a time, so
-- 16 queues keep 16 threads busy and each queue's messages still run one after another, in
-- offset order.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local timed = dofile(helpers.root .. "/spec/02-integration/03-consumer/timed.lua")

-- With 16 threads, a queue-name hash would put these 16 queues on only 10 threads.
local TOPIC, GROUP, QUEUES, PER_QUEUE, THREADS = "OrdAny", "g_ord_any", 16, 10, 16

describe("consumer: orderly queues on a shared pool", function()
  local fx = cons.broker_fixture("--topic " .. TOPIC .. ":" .. QUEUES)

  it("runs 16 queues on 16 threads at once and keeps each queue in order", function()
    local dir, out, s = timed.orderly(fx, "ord_any", { group = GROUP, topic = TOPIC,
      queues = QUEUES, per_queue = PER_QUEUE,
      options = string.format("consume_thread_min = %d, consume_thread_max = %d,", THREADS,
        THREADS),
      handler = [[
    local t0 = now_ms()
    sleep_ms(150)
    local m = msgs[1]
    rec(string.format("%s %d %d %d %d %d", m.body, m.queue_id, tonumber(m.queue_offset),
      ctx.thread_index, t0, now_ms()))
    ]] })
    local log = dir .. "/run.log"
    local pid = helpers.spawn(string.format("%s run %s", helpers.bin, helpers.shq(s)),
      { log = log })
    helpers.wait_until(function() return #timed.rows(out) >= QUEUES * PER_QUEUE end, 120,
      "every message consumed (log " .. log .. ")")
    helpers.kill(pid)
    local rows = timed.rows(out)
    assert.equal(QUEUES * PER_QUEUE, #rows)

    -- Threads used, and handlers running at the same time.
    local threads, nthreads, events = {}, 0, {}
    for _, r in ipairs(rows) do
      if not threads[r[4]] then threads[r[4]] = true; nthreads = nthreads + 1 end
      events[#events + 1] = { r[5], 1 }
      events[#events + 1] = { r[6], -1 }
    end
    table.sort(events, function(a, b)
      if a[1] ~= b[1] then return a[1] < b[1] end
      return a[2] < b[2] -- an end before a start at the same ms
    end)
    local running, max_running = 0, 0
    for _, e in ipairs(events) do
      running = running + e[2]
      if running > max_running then max_running = running end
    end
    assert.is_true(nthreads >= 13, nthreads .. " thread(s) used")
    assert.is_true(max_running >= 13, max_running .. " handler(s) at most at once")

    -- Per queue: every message once, in offset order, never two at a time.
    local byq = {}
    for _, r in ipairs(rows) do
      byq[r[2]] = byq[r[2]] or {}
      table.insert(byq[r[2]], r)
    end
    for q = 0, QUEUES - 1 do
      local list = byq[q]
      assert.equal(PER_QUEUE, #list, "queue " .. q)
      table.sort(list, function(a, b) return a[5] < b[5] end)
      for k = 1, #list do
        assert.equal(string.format("q%d_%d", q, k), list[k][1])
        assert.equal(k - 1, list[k][3])
        if k > 1 then
          assert.is_true(list[k][5] >= list[k - 1][6],
            string.format("queue %d: offset %d started before %d ended", q, k - 1, k - 2))
        end
      end
    end
  end)
end)
