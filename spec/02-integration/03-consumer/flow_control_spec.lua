-- A slow handler: the consumer never holds more than pull_threshold_for_queue messages per queue
-- (plus the one pull that may land when the count is at the threshold, as in Java). Observed on
-- the broker: every PULL_MESSAGE carries queueOffset (next to pull) and commitOffset (the
-- smallest unconsumed offset), so queueOffset - commitOffset is what the consumer caches.
local helpers = require "helpers"
local ffi = require "ffi"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib
local bit = require "bit"

pcall(ffi.cdef, [[
int rmq_devbroker_request_ext(rmq_devbroker_t *db, int target, int req_code, int idx,
                              const char *key, char *buf, size_t size);
]])

local PULL = 11
local THRESHOLD, BATCH, N = 10, 4, 300

describe("consumer: flow control", function()
  local fx = cons.broker_fixture("--topic SlowTopic:1", "slow")

  it("caches at most pull_threshold_for_queue messages per queue", function()
    cons.produce(fx.db, "SlowTopic", N, "s")
    local out = fx.dir .. "/out.txt"
    local s = cons.script(fx.dir, { group = "g_slow", ns = fx.ns, topic = "SlowTopic", out = out,
      extra = string.format("pull_threshold_for_queue = %d, pull_batch_size = %d, "
        .. "consume_thread_min = 1, consume_thread_max = 1,", THRESHOLD, BATCH),
      body = [[
      local ffi = require "ffi"
      pcall(ffi.cdef, "int poll(void *fds, unsigned long nfds, int timeout);")
      ffi.C.poll(nil, 0, 5)
      ]] })
    local log = fx.dir .. "/run.log"
    local pid = cons.spawn(s, log)
    helpers.wait_until(function() return cons.count_lines(out) >= N end, 120,
      "all consumed (log " .. log .. ")")
    cons.stop(pid)
    local buf = ffi.new("char[64]")
    local function ext(i, key)
      local n = lib.rmq_devbroker_request_ext(fx.db, cons.ALL, PULL, i, key, buf, 64)
      if n < 0 then return nil end
      return tonumber(ffi.string(buf, n))
    end
    local pulls = lib.rmq_devbroker_count(fx.db, cons.ALL, PULL)
    local max_cached, checked = 0, 0
    for i = 0, pulls - 1 do
      local topic = ffi.new("char[128]")
      local tn = lib.rmq_devbroker_request_ext(fx.db, cons.ALL, PULL, i, "topic", topic, 128)
      local sys = ext(i, "sysFlag")
      if tn > 0 and ffi.string(topic, tn) == "SlowTopic" and sys and bit.band(sys, 1) == 1 then
        local cached = ext(i, "queueOffset") - ext(i, "commitOffset")
        if cached > max_cached then max_cached = cached end
        checked = checked + 1
      end
    end
    assert.is_true(checked > 10, "pulls with a commit offset: " .. checked)
    assert.is_true(max_cached <= THRESHOLD + BATCH,
      "cached up to " .. max_cached .. " messages")
    -- The threshold was actually reached (the handler is slower than the pulls).
    assert.is_true(max_cached >= THRESHOLD, "cached only up to " .. max_cached)
    local seen = {}
    for _, r in ipairs(cons.records(out)) do seen[r.body] = true end
    for i = 1, N do assert.is_true(seen["s" .. i] ~= nil, "s" .. i) end
  end)
end)
