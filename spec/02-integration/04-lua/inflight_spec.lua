-- Several batches in flight on one consume thread (consume_batches_per_thread): once a handler
-- waits, its thread runs its batches as coroutines and starts others while some wait. Proven
-- with `rmqlua run` against the development broker and a real TCP peer (spec/c/tools/copeer.c,
-- which counts the requests waiting at once): interleaving on ONE thread, one at a time with the
-- option at 1, orderly order per queue with queues interleaving, the outcome rules and rmq.send
-- per batch, consume_timeout on a batch that waits while others go on, and a stop that waits
-- for the batches in flight (nothing lost over a stop and a restart).
local helpers = require "helpers"
local rh = require "run_helpers"
local R = require "02-integration.04-lua.runner"
local socket = require "rmq.socket"

local COPEER = (helpers.bin:gsub("[^/]+$", "")) .. "copeer"

-- A copeer answering after delay ms, stopped when the test ends: its port.
local function peer(delay)
  local log = helpers.tmpdir("copeer") .. "/peer.out"
  helpers.spawn(COPEER .. " --delay " .. delay, { log = log })
  return helpers.wait_until(function()
    return tonumber(rh.read(log):match("PORT (%d+)"))
  end, 10, "copeer's port in " .. log)
end

-- The most requests that waited for their answer at once at the peer.
local function peak(port)
  local s = socket.tcp()
  assert(s:connect("127.0.0.1", port))
  assert(s:send("peak\n"))
  local v = assert(s:receive())
  s:close()
  return tonumber(v)
end

-- A consumer script on one consume thread whose handler asks the peer at o.port (its answer
-- printed with the message) and then runs o.body. o: file, group, topic, queues, n
-- (consume_batches_per_thread), port, orderly, extra (more fields), body.
local function one_thread(o)
  return R.consumer_script(o.file, o.group, o.topic, o.queues, string.format([[
  consume_thread_min = 1, consume_thread_max = 1,
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  consume_batches_per_thread = %d,
%s
  %s = function(msgs, ctx)
    local m = msgs[1]
    local s = rmq.socket.tcp()
    assert(s:connect("127.0.0.1", %d))
    assert(s:send(m.body .. "\n"))
    local answer = assert(s:receive())
    s:setkeepalive()
    print("ran " .. m.queue_id .. " " .. m.body .. " " .. m.reconsume_times .. " " .. answer)
%s
  end,
}
]], o.n, o.extra or "", o.orderly and "consume_orderly" or "consume", o.port, o.body or ""))
end

describe("consume_batches_per_thread", function()
  R.broker_fixture("--delay-scale 0.001")

  it("is checked like any option: 1..100000, named in the error", function()
    for _, v in ipairs({ "0", "100001" }) do
      local rc, out = helpers.run(helpers.bin .. " check --set consume_batches_per_thread=" .. v
        .. " " .. helpers.shq(helpers.root .. "/examples/hello.lua"))
      assert.equal(2, rc)
      assert.truthy(out:find("option consume_batches_per_thread = " .. v .. " is out of range", 1,
        true), out)
    end
  end)

  it("interleaves batches that wait on one consume thread", function()
    local port = peer(50)
    R.fill_topic("InflightMany", 2, 40, "m")
    local h = R.start(one_thread({ file = "inflight_many.lua", group = "inflight_many",
      topic = "InflightMany", queues = 2, n = 8, port = port }))
    helpers.wait_until(function() return h.count("ran %d+ m%d+ 0 ") == 40 end, 60,
      "40 messages")
    helpers.wait_until(function() return R.committed("inflight_many", "InflightMany", 2) == 40 end,
      30, "40 committed")
    local p = peak(port)
    assert.is_true(p > 1, "requests waiting at once on one thread: " .. p)
    assert.is_true(p <= 8, "no more than consume_batches_per_thread in flight: " .. p)
    assert.equal(0, h.stop())
  end)

  it("at 1 runs one batch at a time", function()
    local port = peer(20)
    R.fill_topic("InflightOne", 2, 20, "m")
    local h = R.start(one_thread({ file = "inflight_one.lua", group = "inflight_one",
      topic = "InflightOne", queues = 2, n = 1, port = port }))
    helpers.wait_until(function() return h.count("ran %d+ m%d+ 0 ") == 20 end, 60,
      "20 messages")
    assert.equal(1, peak(port))
    assert.equal(0, h.stop())
  end)

  it("keeps each orderly queue in order while queues interleave on one thread", function()
    local port = peer(30)
    R.fill_topic("InflightOrder", 4, 40, "")
    local h = R.start(one_thread({ file = "inflight_order.lua", group = "inflight_order",
      topic = "InflightOrder", queues = 4, n = 8, port = port, orderly = true }))
    helpers.wait_until(function() return h.count("ran %d+ %d+ 0 ") == 40 end, 60, "40 messages")
    local last, seen = {}, 0
    for q, b in h.out():gmatch("ran (%d+) (%d+) 0 ") do
      q, b = tonumber(q), tonumber(b)
      assert.equal(b % 4, q)
      assert.is_true(b > (last[q] or 0), "order of queue " .. q)
      last[q] = b
      seen = seen + 1
    end
    assert.equal(40, seen)
    local p = peak(port)
    assert.is_true(p > 1, "queues interleaving on one thread: " .. p)
    assert.is_true(p <= 4, "one batch per queue in flight: " .. p)
    assert.equal(0, h.stop())
  end)

  it("decides each batch's outcome and sends per batch while others wait", function()
    local port = peer(30)
    R.create_topic("InflightFwd", 1)
    local bodies = { "raise", "later", "false", "dlq" }
    for i = 1, 12 do bodies[#bodies + 1] = "fine" .. i end
    R.create_topic("InflightOut", 2)
    for i, b in ipairs(bodies) do R.produce("InflightOut", b, nil, nil, i % 2) end
    local h = R.start(one_thread({ file = "inflight_out.lua", group = "inflight_out",
      topic = "InflightOut", queues = 2, n = 8, port = port, body = [[
    rmq.send("InflightFwd", m.body .. "/" .. m.reconsume_times)
    if m.reconsume_times == 0 then
      if m.body == "raise" then error("raised after a wait") end
      if m.body == "later" then return rmq.RECONSUME_LATER end
      if m.body == "false" then return false end
      if m.body == "dlq" then return rmq.DLQ end
    end]] }))
    for _, b in ipairs({ "raise", "later", "false" }) do
      h.wait_for("ran %d+ " .. b .. " 1 echo:" .. b, b .. " consumed again")
    end
    helpers.wait_until(function() return R.committed("inflight_out", "InflightOut", 2) == 16 end,
      30, "16 committed")
    -- Forwards of the batches that succeeded, and only theirs: 12 fine, 3 on their second run.
    helpers.wait_until(function() return R.topic_count("InflightFwd", 1) == 15 end, 30,
      "15 forwards")
    for i = 1, 12 do assert.equal(1, h.count("ran %d+ fine" .. i .. " ")) end
    assert.equal(1, h.count("ran %d+ dlq "))
    assert.equal(1, R.topic_count("%DLQ%inflight_out", 1))
    assert.matches("raised after a wait", h.out(), 1, true)
    assert.equal(0, h.stop())
    assert.equal(15, R.topic_count("InflightFwd", 1))
  end)

  it("interrupts a batch in flight that loops past consume_timeout, not the others", function()
    local port = peer(20)
    R.create_topic("InflightSpin", 1)
    R.produce("InflightSpin", "warm")
    R.produce("InflightSpin", "spin")
    for i = 1, 10 do R.produce("InflightSpin", "fast" .. i) end
    local h = R.start(one_thread({ file = "inflight_spin.lua", group = "inflight_spin",
      topic = "InflightSpin", queues = 1, n = 8, port = port,
      extra = string.format("  consume_timeout_millis = %d,", math.floor(1000 * helpers.scale)),
      body = [[
    if m.body == "spin" and m.reconsume_times == 0 then
      rmq.sleep(0.01)
      jit.off(true, true) -- interpreted: the count hook sees the interrupt
      while true do local _ = {} end
    end
    print("done " .. m.body .. " " .. m.reconsume_times)]] }))
    h.wait_for("done spin 1", "the interrupted message consumed again")
    -- A batch taken while the loop held the thread may be past consume_timeout too when it
    -- ends (the engine then sends its messages back): each is done at least once.
    helpers.wait_until(function()
      for i = 1, 10 do
        if h.count("done fast" .. i .. " %d+\n") == 0 then return false end
      end
      return true
    end, 30, "10 fast")
    assert.equal(0, h.count("done spin 0"))
    assert.matches("interrupted: the handler ran past consume_timeout", h.out(), 1, true)
    helpers.wait_until(function() return R.committed("inflight_spin", "InflightSpin", 1) == 12 end,
      30, "12 committed")
    assert.equal(0, h.stop())
  end)

  it("acknowledges each batch's ctx.ack_index while batches interleave", function()
    local port = peer(20)
    R.fill_topic("InflightAck", 1, 24, "m")
    local h = R.start(one_thread({ file = "inflight_ack.lua", group = "inflight_ack",
      topic = "InflightAck", queues = 1, n = 8, port = port,
      extra = "  consume_message_batch_max_size = 4,", body = [[
    if m.reconsume_times == 0 then
      print("batch " .. m.body .. " " .. #msgs)
      rmq.sleep(0.01)
      ctx.ack_index = 1
    else
      for i = 1, #msgs do print("again " .. msgs[i].body) end
    end]] }))
    -- The first message of each first delivery is acknowledged, the others come back.
    local function expected()
      local n = 0
      for k in h.out():gmatch("batch m%d+ (%d+)") do n = n + tonumber(k) - 1 end
      return n
    end
    helpers.wait_until(function()
      return R.committed("inflight_ack", "InflightAck", 1) == 24 and h.count("batch m%d+ ") > 0
        and h.count("again m%d+") == expected()
    end, 60, "24 committed, every message after an ack_index consumed again")
    local firsts = {}
    for b in h.out():gmatch("batch (m%d+) ") do firsts[b] = true end
    for b in h.out():gmatch("again (m%d+)") do
      assert.is_nil(firsts[b], b .. " was acknowledged, yet consumed again")
    end
    assert.is_true(h.count("batch m%d+ [2-4]") > 0, "batches of more than one message")
    assert.equal(0, h.stop())
  end)

  it("runs light threads and a user's coroutines inside batches in flight", function()
    local port = peer(30)
    R.fill_topic("InflightKids", 2, 20, "m")
    local h = R.start(one_thread({ file = "inflight_kids.lua", group = "inflight_kids",
      topic = "InflightKids", queues = 2, n = 8, port = port, body = [[
    local function ask(what)
      local c = rmq.socket.tcp()
      assert(c:connect("127.0.0.1", ]] .. port .. [[))
      assert(c:send(what .. "\n"))
      local a = assert(c:receive())
      c:setkeepalive()
      return a
    end
    local t1 = rmq.thread.spawn(ask, "kid-" .. m.body)
    local f = coroutine.wrap(function()
      coroutine.yield(ask("co-" .. m.body))
      return "end"
    end)
    assert(f() == "echo:co-" .. m.body)
    assert(f() == "end")
    local ok, a = rmq.thread.wait(t1)
    assert(ok and a == "echo:kid-" .. m.body)
    print("both " .. m.body)]] }))
    helpers.wait_until(function() return h.count("both m%d+\n") == 20 end, 60, "20 messages")
    helpers.wait_until(function() return R.committed("inflight_kids", "InflightKids", 2) == 20 end,
      30, "20 committed")
    local p = peak(port)
    assert.is_true(p > 2, "light threads of several batches waiting at once: " .. p)
    assert.equal(0, h.stop())
  end)

  it("abandons a waiting batch past consume_timeout while the others go on", function()
    local port = peer(20)
    R.create_topic("InflightSlow", 1)
    -- The first batch waits in place (the thread serves from the next one on).
    R.produce("InflightSlow", "warm")
    R.produce("InflightSlow", "slow")
    for i = 1, 10 do R.produce("InflightSlow", "fast" .. i) end
    local h = R.start(one_thread({ file = "inflight_slow.lua", group = "inflight_slow",
      topic = "InflightSlow", queues = 1, n = 8, port = port,
      extra = string.format("  consume_timeout_millis = %d,", math.floor(1500 * helpers.scale)),
      body = [[
    if m.body == "slow" and m.reconsume_times == 0 then rmq.sleep(600) end
    print("done " .. m.body .. " " .. m.reconsume_times)]] }))
    h.wait_for("done slow 1", "the timed-out message consumed again")
    for i = 1, 10 do assert.equal(1, h.count("done fast" .. i .. " 0\n")) end
    assert.equal(0, h.count("done slow 0"))
    assert.matches("in flight for more than consume_timeout", h.out(), 1, true)
    assert.matches("did not finish: it ran past consume_timeout", h.out(), 1, true)
    helpers.wait_until(function() return R.committed("inflight_slow", "InflightSlow", 1) == 12 end,
      30, "12 committed")
    assert.equal(0, h.stop())
  end)

  it("a reload waits for the batches in flight; each message ends once", function()
    local port = peer(0)
    R.fill_topic("InflightReload", 2, 30, "m")
    local h = R.start(one_thread({ file = "inflight_reload.lua", group = "inflight_reload",
      topic = "InflightReload", queues = 2, n = 8, port = port, body = [[
    rmq.sleep(0.2)
    print("end " .. m.body)
    io.stdout:flush()]] }))
    helpers.wait_until(function() return h.count("ran %d+ m%d+ ") >= 3 end, 30, "batches started")
    h.signal("HUP")
    h.wait_for("reloaded [^\n]*inflight_reload%.lua %(reload 1%)")
    helpers.wait_until(function() return h.count("end m%d+\n") >= 30 end, 60, "30 ended")
    helpers.wait_until(function()
      return R.committed("inflight_reload", "InflightReload", 2) == 30
    end, 30, "30 committed")
    for i = 1, 30 do assert.equal(1, h.count("end m" .. i .. "\n"), "m" .. i) end
    assert.equal(0, h.stop())
  end)

  -- A batch in flight stuck in a C call (no interrupt reaches it) when a reload retires its
  -- version: the old version gives up on the thread (consume_timeout + 10 s after the reload)
  -- and the batch runs in the new version. The thread comes back later and ends the batch it
  -- had: that batch must still be there (the sanitizer build reports a use of freed memory
  -- otherwise), and the new version's result stands.
  it("a reload gives up on a thread whose batch in flight is stuck in a C call", function()
    local port = peer(0)
    R.create_topic("InflightStuck", 1)
    R.produce("InflightStuck", "warm")
    R.produce("InflightStuck", "stuck")
    local h = R.start(one_thread({ file = "inflight_stuck.lua", group = "inflight_stuck",
      topic = "InflightStuck", queues = 1, n = 8, port = port,
      extra = "  consume_timeout_millis = 1000, shared = { d = '64k' },", body = [[
    if m.body == "stuck" then
      local run = rmq.shared.d:incr("runs", 1, 0)
      print("start stuck " .. run)
      io.stdout:flush()
      if run == 1 then
        local ffi = require "ffi"
        pcall(ffi.cdef, "int poll(void *fds, unsigned long nfds, int timeout);")
        ffi.C.poll(nil, 0, 20000) -- a C call: no interrupt reaches it
        print("late stuck")
        io.stdout:flush()
        error("came back late")
      end
      print("end stuck " .. run)
    end]] }))
    h.wait_for("start stuck 1", "the stuck batch")
    h.signal("HUP")
    h.wait_for("reloaded [^\n]*inflight_stuck%.lua %(reload 1%)")
    h.wait_for("in flight did not end after stop; abandoning the thread",
      "the retired version giving up on its thread")
    h.wait_for("end stuck 2", "the batch run by the new version")
    h.wait_for("came back late", "the stuck handler coming back")
    helpers.wait_until(function()
      return R.committed("inflight_stuck", "InflightStuck", 1) == 2
    end, 30, "2 committed")
    assert.equal(0, h.stop())
  end)

  it("stop waits for the batches in flight; a restart consumes the rest, none missing", function()
    local port = peer(0)
    R.fill_topic("InflightStop", 2, 30, "m")
    local script = one_thread({ file = "inflight_stop.lua", group = "inflight_stop",
      topic = "InflightStop", queues = 2, n = 8, port = port, body = [[
    io.stdout:flush()
    rmq.sleep(0.3)
    print("end " .. m.body)
    io.stdout:flush()]] })
    local h = R.run(script)
    helpers.wait_until(function() return h.count("ran %d+ m%d+ ") >= 3 end, 30, "batches started")
    assert.equal(0, h.stop())
    local ended, n1 = {}, 0
    for b in h.out():gmatch("end (m%d+)") do
      if not ended[b] then n1 = n1 + 1 end
      ended[b] = true
    end
    -- Every batch that started also ended: none was cut off by the stop.
    assert.equal(h.count("ran %d+ m%d+ "), h.count("end m%d+"))
    assert.is_true(R.committed("inflight_stop", "InflightStop", 2) <= n1,
      "nothing committed past a batch in flight")
    local h2 = R.start(script)
    helpers.wait_until(function()
      for b in h2.out():gmatch("end (m%d+)") do ended[b] = true end
      local n = 0
      for _ in pairs(ended) do n = n + 1 end
      return n == 30
    end, 60, "all 30 consumed over the two runs")
    helpers.wait_until(function() return R.committed("inflight_stop", "InflightStop", 2) == 30 end,
      30, "30 committed")
    assert.equal(0, h2.stop())
  end)
end)
