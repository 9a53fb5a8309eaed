-- A drained backlog's memory goes back to the system. A consumer catching up a backlog holds
-- its process queues full up to their flow-control bounds and runs every consume thread; once
-- the backlog drained, the free heap pages are handed back (malloc_trim every 10 s of activity:
-- runtime/consumer/memtrim.c) and each thread left idle collects its Lua state
-- (consume_pool.c), so the process's RSS comes down from the backlog's peak instead of keeping
-- it for good. Against the development broker, under `rmqlua run`.
local helpers = require "helpers"
local rh = require "run_helpers"
local R = require "02-integration.04-lua.runner"

local function rss_kb(pid)
  return tonumber(rh.read("/proc/" .. pid .. "/status"):match("VmRSS:%s*(%d+)")) or 0
end

-- A sanitizer's allocator keeps what is freed (ASan's quarantine): what this asserts is glibc's.
local sanitized = os.getenv("RMQ_LD_PRELOAD") ~= nil

describe("a drained backlog", function()
  R.broker_fixture()

  local it_glibc = sanitized and pending or it
  it_glibc("hands its memory back: the RSS comes down from the backlog's peak", function()
    local N, Q = 24000, 8
    local body = string.rep("x", 2000)
    R.create_topic("BacklogTopic", Q)
    for i = 1, N do R.produce("BacklogTopic", body .. i, nil, nil, i % Q) end
    local path = R.write("backlog.lua", R.script_head("backlog_mem", "BacklogTopic") .. [[
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  consume_thread_min = 4, consume_thread_max = 4,
  init = function()
    require("ffi").cdef "int poll(void *fds, unsigned long nfds, int timeout);"
  end,
  -- Slow enough for the process queues to fill up to their bounds (1,000 messages a queue).
  consume = function() require("ffi").C.poll(nil, 0, 1) end,
}
]])
    local h = R.start(path)
    local pid = h.pid()
    -- The peak while the backlog is consumed.
    local peak = 0
    helpers.wait_until(function()
      peak = math.max(peak, rss_kb(pid))
      return R.committed("backlog_mem", "BacklogTopic", Q) == N
    end, 120, "every offset committed")
    -- 8 queues x 1,000 messages of 2 KB held at the peak: 16 MB of bodies; most of it goes back
    -- (within the 10 s between trims, and the 5 s after which an idle thread collects).
    helpers.wait_until(function()
      return peak - rss_kb(pid) >= 8 * 1024
    end, 30, "the RSS 8 MB under the backlog's peak of " .. peak .. " KiB")
    assert.are.equal(0, h.stop())
  end)
end)
