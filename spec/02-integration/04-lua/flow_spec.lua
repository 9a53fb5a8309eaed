-- The script's say over pulling under `rmqlua run` against the development broker:
-- consume_tps_limit holds the rate within 10 % over 10 s while the messages pulled but not yet
-- consumed stay bounded (the pulls slow down; nothing piles up), rmq.pause()/rmq.resume() from a
-- consume hook stop and restart the pulls (what was in flight is still consumed; a pause of
-- math.huge seconds too), a timed pause ends by itself, a control-state hook may pause too, and
-- rmq.stop() ends the process cleanly.
local ffi = require "ffi"
local helpers = require "helpers"
local R = require "02-integration.04-lua.runner"

ffi.cdef [[
  struct rmq_spec_timespec { long tv_sec; long tv_nsec; };
  int clock_gettime(int clk, struct rmq_spec_timespec *ts);
]]
local ts = ffi.new("struct rmq_spec_timespec")
local function now()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) / 1e9
end

local PULL_MESSAGE = 11

-- Messages pulled from topic so far (an upper bound): for each queue, the offset and the size of
-- the last PULL_MESSAGE request the broker received.
local function pulled_upper_bound(topic, queues)
  local n = R.lib.rmq_devbroker_count(R.db, R.ALL, PULL_MESSAGE)
  local buf = ffi.new("char[64]")
  local last = {}
  for idx = n - 1, math.max(0, n - 2000), -1 do
    local len = R.lib.rmq_devbroker_request_ext(R.db, R.ALL, PULL_MESSAGE, idx, "topic", buf, 64)
    if len > 0 and ffi.string(buf, len) == topic then
      R.lib.rmq_devbroker_request_ext(R.db, R.ALL, PULL_MESSAGE, idx, "queueId", buf, 64)
      local q = tonumber(ffi.string(buf))
      if last[q] == nil then
        R.lib.rmq_devbroker_request_ext(R.db, R.ALL, PULL_MESSAGE, idx, "queueOffset", buf, 64)
        local off = tonumber(ffi.string(buf))
        R.lib.rmq_devbroker_request_ext(R.db, R.ALL, PULL_MESSAGE, idx, "maxMsgNums", buf, 64)
        last[q] = off + tonumber(ffi.string(buf))
      end
    end
  end
  local total = 0
  for q = 0, queues - 1 do total = total + (last[q] or 0) end
  return total
end

-- A handler pauses with `call` on "pause" from the control topic and resumes on "resume": the
-- data topic's messages stop until then. Topics and group are named after tag.
local function pause_resume(tag, call, logged)
  local ctl, data = "Ctl" .. tag, "Data" .. tag
  R.create_topic(ctl, 1)
  R.create_topic(data, 1)
  local script = R.write("pause" .. tag .. ".lua", string.format([[
local rmq = require "rmq"
return {
  consumer_group = "pause_group_%s",
  subscribe = { %s = "*", %s = "*" },
  consume_thread_min = 2, consume_thread_max = 2,
  consume = function(msgs)
    for i = 1, #msgs do
      local b = msgs[i].body
      if b == "pause" then %s; print("PAUSED")
      elseif b == "resume" then rmq.resume(); print("RESUMED")
      else print("data " .. b) end
    end
  end,
}
]], tag, ctl, data, call))
  local h = R.start(script)
  R.produce(data, "d0")
  h.wait_for("data d0", "consumption before the pause")
  R.produce(ctl, "pause")
  h.wait_for("PAUSED")
  h.wait_for(logged)
  -- The pull that was in flight on the data topic still brings d1; after it, nothing is pulled.
  R.produce(data, "d1")
  h.wait_for("data d1", "the in-flight pull's message")
  helpers.sleep(0.3)
  local pulls = R.lib.rmq_devbroker_count(R.db, R.ALL, PULL_MESSAGE)
  R.produce(data, "d2")
  helpers.sleep(1.0)
  assert.is_nil(h.out():find("data d2"), "d2 consumed while paused")
  assert.are.equal(pulls, R.lib.rmq_devbroker_count(R.db, R.ALL, PULL_MESSAGE))
  -- The control topic's pull was in flight too: it brings "resume", and the handler resumes.
  R.produce(ctl, "resume")
  h.wait_for("RESUMED")
  h.wait_for("data d2", "d2 after rmq.resume()")
  h.wait_for("pulling resumed by rmq.resume%(%) in consume thread %d")
  assert.are.equal(0, h.stop())
end

describe("flow control from the script", function()
  R.broker_fixture("--delay-scale 0.01")

  it("consume_tps_limit holds the rate within 10 % over 10 s, pulling no further ahead", function()
    local LIMIT, QUEUES, N = 300, 4, 6000
    R.fill_topic("TpsTopic", QUEUES, N, "m")
    local script = R.write("tps.lua", 'local rmq = require "rmq"\n'
      .. R.head("tps_group", "TpsTopic", 4) .. "  consume_tps_limit = " .. LIMIT .. [[,
  shared = { c = "64k" },
  consume = function(msgs)
    print("total " .. rmq.shared.c:incr("n", #msgs, 0))
  end,
}
]])
    local h = R.start(script)
    local function consumed()
      local n = 0
      for v in h.out():gmatch("total (%d+)") do
        v = tonumber(v)
        if v > n then n = v end
      end
      return n
    end
    -- Warm up (connections, rebalance, the first bucket), then count for 10 s.
    helpers.wait_until(function() return consumed() >= 200 end, 30, "the first messages")
    local t0, c0 = now(), consumed()
    local worst = 0
    while now() - t0 < 10 do
      local c = consumed()
      local ahead = pulled_upper_bound("TpsTopic", QUEUES) - c
      if ahead > worst then worst = ahead end
      helpers.sleep(0.1)
    end
    local c1, t1 = consumed(), now()
    assert.are.equal(0, h.stop())
    local rate = (c1 - c0) / (t1 - t0)
    assert.is_true(rate >= LIMIT * 0.9 and rate <= LIMIT * 1.1,
      string.format("%.1f messages/s for a limit of %d", rate, LIMIT))
    -- At most one pull of 32 per queue ahead of the handlers, plus the bucket (32) and the
    -- output lag: far below what the queues would cache without the limit (1000 each).
    assert.is_true(worst <= QUEUES * 32 + 64,
      string.format("%d messages pulled ahead of the handlers", worst))
    assert.matches("consume_tps_limit 300: pulls paced", h.out(), 1, true)
  end)

  it("rmq.pause() and rmq.resume() from a handler stop and restart the pulls", function()
    pause_resume("Topic", "rmq.pause()",
      "pulling paused until rmq.resume%(%), by rmq.pause%(%) in consume thread %d")
  end)

  it("rmq.pause(math.huge) lasts until rmq.resume()", function()
    pause_resume("Huge", "rmq.pause(math.huge)",
      "pulling paused for inf s, that is until rmq.resume%(%), by rmq.pause%(%) in consume "
      .. "thread %d")
  end)

  it("a timed rmq.pause(seconds) ends by itself, and a control hook may pause", function()
    local script = R.consumer_script("timed.lua", "timed_group", "TimedTopic", 1, [[
  consume_thread_min = 1, consume_thread_max = 1,
  on_assign = function(mqs) rmq.pause(0.2); print("on_assign paused") end,
  consume = function(msgs)
    for i = 1, #msgs do
      local b = msgs[i].body
      if b == "pause" then rmq.pause(1.5); print("PAUSED") else print("data " .. b) end
    end
  end,
}
]])
    local h = R.start(script)
    h.wait_for("on_assign paused")
    h.wait_for("by rmq.pause%(%) in the control state")
    h.wait_for("pause over: pulling again", "the end of the control state's pause")
    R.produce("TimedTopic", "pause")
    h.wait_for("PAUSED")
    local t0 = now()
    R.produce("TimedTopic", "a") -- brought by the pull in flight
    h.wait_for("data a")
    helpers.sleep(0.2)
    R.produce("TimedTopic", "b") -- waits for the end of the pause
    h.wait_for("data b", "b after the pause")
    local waited = now() - t0
    assert.is_true(waited >= 1.3, string.format("b consumed %.2f s after the pause", waited))
    assert.are.equal(2, h.count("pause over: pulling again"))
    assert.are.equal(0, h.stop())
  end)

  it("rmq.stop() from a handler shuts the consumer down with exit code 0", function()
    R.produce("StopTopic", "before")
    local script = R.write("stop.lua", [[
local rmq = require "rmq"
return {
  consumer_group = "stop_group",
  subscribe = { StopTopic = "*" },
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  consume = function(msgs)
    print("got " .. msgs[1].body)
    rmq.stop()
  end,
}
]])
    local h = R.start(script)
    h.wait_for("got before")
    assert.are.equal(0, h.wait_exit(30, "rmqlua to exit by itself"))
    local out = h.out()
    assert.matches("rmq%.stop%(%) in consume thread %d+: stopping the consumer", out)
    assert.matches("stopped: 1 message%(s%) consumed", out)
    -- The offset was committed before the exit.
    assert.are.equal(1, R.committed("stop_group", "StopTopic", 8))
  end)
end)
