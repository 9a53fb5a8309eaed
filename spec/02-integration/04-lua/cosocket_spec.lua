-- Handlers that wait without holding their thread (rmq.co, rmq.socket): cosockets against a real
-- TCP peer (spec/c/tools/copeer.c, started and stopped here) with OpenResty's results and error
-- strings, light threads and a user's own coroutines that wait side by side (proven by the peer:
-- it counts the requests waiting at once), and `rmqlua run` against the development broker: a
-- batch's outcome decided when its coroutine ends, consume_timeout counting the time spent
-- waiting, orderly order kept, and a stop that waits for a handler that is waiting.
local helpers = require "helpers"
local rh = require "run_helpers"
local R = require "02-integration.04-lua.runner"
local co = require "rmq.co"
local socket = require "rmq.socket"
local rmq = require "rmq"

local COPEER = (helpers.bin:gsub("[^/]+$", "")) .. "copeer"

-- A copeer answering after delay ms, stopped when the test ends: its port and pid.
local function peer(delay)
  local log = helpers.tmpdir("copeer") .. "/peer.out"
  local pid = helpers.spawn(COPEER .. " --delay " .. (delay or 0), { log = log })
  local port = helpers.wait_until(function()
    return tonumber(rh.read(log):match("PORT (%d+)"))
  end, 10, "copeer's port in " .. log)
  return port, pid
end

-- Ask the peer a question (peak, conns) over a new connection.
local function ask(port, what)
  local s = socket.tcp()
  assert(s:connect("127.0.0.1", port))
  assert(s:send(what .. "\n"))
  local v = assert(s:receive())
  s:close()
  return tonumber(v)
end

describe("rmq.socket against a real peer", function()
  it("sends strings and nested arrays; receives lines, byte counts, until a pattern, all", function()
    local port = peer(0)
    local s = socket.tcp()
    assert.equal(1, s:connect("127.0.0.1", port))
    assert.equal(4, s:send({ "a", { "b", 1 }, "\n" }))
    assert.equal("echo:ab1", s:receive())
    assert.equal(7, s:send("hello\r\n"))
    assert.equal("echo:hello", s:receive("*l"))
    s:send("12345\n")
    assert.equal("echo:", s:receive(5))
    assert.equal("12345", s:receive())
    s:send("k=v\n")
    local it = s:receiveuntil("=")
    assert.equal("echo:k", it())
    assert.equal("v", s:receive())
    local inc = s:receiveuntil("\n", { inclusive = true })
    s:send("x\n")
    assert.equal("echo:x\n", inc())
    s:send("bye\n")
    assert.equal("bye\n", s:receive("*a"))
    assert.same({ nil, "closed" }, { s:receive() })
    assert.same({ nil, "closed" }, { s:send("late\n") })
    assert.same({ nil, "closed" }, { s:close() })
  end)

  it("fails with OpenResty's strings: connection refused, timeout, closed", function()
    local port, pid = peer(0)
    local s = socket.tcp()
    assert(s:connect("127.0.0.1", port))
    s:settimeouts(nil, nil, 100)
    s:send("stall\n")
    assert.same({ nil, "timeout", "" }, { s:receive() })
    -- A read timeout leaves the connection usable.
    s:send("again\n")
    assert.equal("echo:again", s:receive())
    s:send("close\n")
    assert.same({ nil, "closed", "" }, { s:receive() })
    helpers.kill(pid, "KILL")
    assert.same({ nil, "connection refused" }, { socket.tcp():connect("127.0.0.1", port) })
    local ok, err = socket.tcp():connect("no-such-host.invalid", 80)
    assert.is_nil(ok)
    assert.matches("no-such-host.invalid could not be resolved", err, 1, true)
    assert.same({ nil, "bad port number" }, { socket.tcp():connect("127.0.0.1", 0) })
  end)

  it("keeps idle connections in the thread's pool, per host and port", function()
    local port = peer(0)
    local s = socket.tcp()
    assert(s:connect("127.0.0.1", port))
    assert.equal(0, s:getreusedtimes())
    s:send("one\n")
    assert.equal("echo:one", s:receive())
    assert.equal(1, s:setkeepalive(10000, 4))
    assert.same({ nil, "closed" }, { s:getreusedtimes() })
    assert(s:connect("127.0.0.1", port))
    assert.equal(1, s:getreusedtimes())
    s:send("two\n")
    assert.equal("echo:two", s:receive())
    -- Unread data: not pooled.
    s:send("three\n")
    assert.equal("ech", s:receive(3))
    assert.same({ nil, "unread data in buffer" }, { s:setkeepalive() })
    assert.equal(2, ask(port, "conns")) -- the one connection reused, and the one asking
    -- A pooled connection the peer closed meanwhile is not handed out.
    local t = socket.tcp()
    assert(t:connect("127.0.0.1", port, { pool = "p1" }))
    t:send("bye\n")
    rmq.sleep(0.1)
    t:receive() -- "bye", then the peer closes
    t:setkeepalive()
    local u = socket.tcp()
    assert(u:connect("127.0.0.1", port, { pool = "p1" }))
    assert.equal(0, u:getreusedtimes())
    u:close()
  end)

  it("takes a byte count given as a string, as ngx_lua does (nginx.memcached reads so)", function()
    local port = peer(0)
    local s = socket.tcp()
    assert(s:connect("127.0.0.1", port))
    s:send("12345\n")
    assert.equal("echo:", s:receive("5"))
    assert.equal("12345", s:receive())
    assert.same({ nil, "bad pattern argument: x5" }, { s:receive("x5") })
    s:close()
  end)
end)

describe("rmq.co", function()
  it("runs light threads side by side: the peer sees them all waiting at once", function()
    local port = peer(300)
    local N = 6
    local ok, r = co.run(function()
      local ts = {}
      for i = 1, N do
        ts[i] = rmq.thread.spawn(function(k)
          local s = socket.tcp()
          assert(s:connect("127.0.0.1", port))
          s:send("t" .. k .. "\n")
          local v = s:receive()
          s:setkeepalive()
          return v
        end, i)
      end
      local got = {}
      for i = 1, N do
        local tok, v = rmq.thread.wait(ts[i])
        got[i] = tok and v
      end
      return got
    end, debug.traceback)
    assert.is_true(ok, r)
    for i = 1, N do assert.equal("echo:t" .. i, r[i]) end
    assert.equal(N, ask(port, "peak"))
  end)

  it("passes a wait inside a user's coroutine through to the scheduler", function()
    local port = peer(50)
    local ok, r = co.run(function()
      -- In a light thread (a coroutine the scheduler resumes), beside another one.
      local side = rmq.thread.spawn(function()
        local s = socket.tcp()
        assert(s:connect("127.0.0.1", port))
        local gen = coroutine.wrap(function()
          for i = 1, 2 do
            s:send("w" .. i .. "\n")
            coroutine.yield(s:receive())
          end
        end)
        return gen() .. "," .. gen()
      end)
      local other = rmq.thread.spawn(function() rmq.sleep(0.01); return "x" end)
      local got = { select(2, rmq.thread.wait(side)), select(2, rmq.thread.wait(other)) }
      assert(got[1] == "echo:w1,echo:w2" and got[2] == "x", "light threads: " .. tostring(got[1]))
      -- In the handler itself.
      local s = socket.tcp()
      assert(s:connect("127.0.0.1", port))
      local gen = coroutine.wrap(function()
        for i = 1, 3 do
          s:send("g" .. i .. "\n")
          coroutine.yield(s:receive())
        end
      end)
      local side2 = rmq.thread.spawn(function() rmq.sleep(0.01); return "side" end)
      local out = { gen(), gen(), gen() }
      local c2 = coroutine.create(function(a) local b = coroutine.yield(a + 1); rmq.sleep(0); return b * 2 end)
      local _, x = coroutine.resume(c2, 1)
      local _, y = coroutine.resume(c2, 10)
      out[4], out[5] = x, y
      out[6] = select(2, rmq.thread.wait(side2))
      return out
    end, debug.traceback)
    assert.is_true(ok, r)
    assert.same({ "echo:g1", "echo:g2", "echo:g3", 2, 20, "side" }, r)
  end)

  it("closes what a batch left open and stops the light threads it left running", function()
    local port = peer(0)
    local kept, ran_on = nil, false
    local ok = co.run(function()
      kept = socket.tcp()
      assert(kept:connect("127.0.0.1", port))
      rmq.thread.spawn(function() rmq.sleep(0.05); ran_on = true end)
    end, debug.traceback)
    assert.is_true(ok)
    assert.same({ nil, "closed" }, { kept:getreusedtimes() })
    rmq.sleep(0.2) -- the loop runs: the killed thread's wake-up comes and is ignored
    assert.is_false(ran_on)
  end)

  it("reports an error after a wait like one before it, and keeps going", function()
    local ok, err = co.run(function() rmq.sleep(0.01); error("late failure") end, debug.traceback)
    assert.is_false(ok)
    assert.matches("late failure", err, 1, true)
    assert.same({ true, 7 }, { co.run(function(a, b) rmq.sleep(0); return a + b end,
      debug.traceback, 3, 4) })
    local ok2, e2 = co.run(function() rmq.thread.kill(rmq.thread.spawn(function() rmq.sleep(5) end))
      return rmq.thread.wait(rmq.thread.spawn(function() error("in thread") end)) end, debug.traceback)
    assert.is_true(ok2)
    assert.is_false(e2) -- wait: false, then the thread's error
  end)
end)

describe("rmqlua run: handlers that wait", function()
  R.broker_fixture("--delay-scale 0.001")

  it("decides a batch's outcome when its coroutine ends", function()
    local port = peer(20)
    local script = R.consumer_script("co_outcome.lua", "co_outcome", "CoOutcome", 1, string.format([[
  consume_thread_min = 2, consume_thread_max = 2,
  consume = function(msgs, ctx)
    local m = msgs[1]
    local s = rmq.socket.tcp()
    assert(s:connect("127.0.0.1", %d))
    s:send(m.body .. "\n")
    local answer = s:receive()
    s:setkeepalive()
    print("ran " .. m.body .. " " .. m.reconsume_times .. " " .. answer)
    if m.reconsume_times == 0 then
      if m.body == "raise" then error("after a wait") end
      if m.body == "later" then return rmq.RECONSUME_LATER end
      if m.body == "false" then return false end
    end
  end,
}
]], port))
    local h = R.start(script)
    for _, b in ipairs({ "raise", "later", "false", "fine" }) do R.produce("CoOutcome", b) end
    for _, b in ipairs({ "raise", "later", "false" }) do
      h.wait_for("ran " .. b .. " 1 echo:" .. b, b .. " consumed again")
    end
    helpers.wait_until(function() return R.committed("co_outcome", "CoOutcome", 1) == 4 end, 30,
      "the queue committed")
    assert.equal(1, h.count("ran fine "))
    assert.matches("after a wait", h.out(), 1, true)
    assert.equal(0, h.stop())
  end)

  it("counts consume_timeout from the handler's start, time spent waiting included", function()
    local timeout = math.floor(800 * helpers.scale)
    local script = R.consumer_script("co_timeout.lua", "co_timeout", "CoTimeout", 1, string.format([[
  consume_thread_min = 1, consume_thread_max = 1,
  consume_timeout_millis = %d,
  consume = function(msgs)
    local m = msgs[1]
    print("start " .. m.body .. " " .. m.reconsume_times)
    if m.reconsume_times == 0 then rmq.sleep(600) end
    print("done " .. m.body .. " " .. m.reconsume_times)
  end,
}
]], timeout))
    local h = R.start(script)
    R.produce("CoTimeout", "waits")
    h.wait_for("done waits 1", "the timed-out message consumed again")
    assert.equal(0, h.count("done waits 0"))
    assert.matches("interrupting it", h.out(), 1, true)
    assert.equal(0, h.stop())
  end)

  it("keeps orderly order while handlers wait", function()
    local script = R.consumer_script("co_order.lua", "co_order", "CoOrder", 2, [[
  consume_thread_min = 2, consume_thread_max = 2,
  consume_orderly = function(msgs)
    for i = 1, #msgs do
      rmq.sleep(0.005 * (i % 3))
      print("got " .. msgs[i].queue_id .. " " .. msgs[i].body)
    end
  end,
}
]])
    local h = R.start(script)
    for i = 1, 20 do R.produce("CoOrder", tostring(i), nil, nil, i % 2) end
    helpers.wait_until(function() return h.count("got %d+ %d+\n") == 20 end, 30, "20 messages")
    local last = { [0] = 0, [1] = 0 }
    for q, b in h.out():gmatch("got (%d+) (%d+)\n") do
      q, b = tonumber(q), tonumber(b)
      assert.is_true(b > last[q], "order of queue " .. q)
      last[q] = b
    end
    assert.equal(0, h.stop())
  end)

  it("stop waits for a handler that is waiting", function()
    local script = R.consumer_script("co_stop.lua", "co_stop", "CoStop", 1, [[
  consume = function(msgs)
    print("begin " .. msgs[1].body)
    io.stdout:flush()
    rmq.sleep(1)
    print("end " .. msgs[1].body)
  end,
}
]])
    local h = R.run(script)
    R.produce("CoStop", "m1")
    h.wait_for("begin m1")
    assert.equal(0, h.stop())
    assert.equal(1, h.count("end m1"))
    assert.equal(1, R.committed("co_stop", "CoStop", 1))
  end)
end)
