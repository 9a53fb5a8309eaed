-- Flow control sees the pulled frames that held messages keep in memory: one unresolved
-- message keeps its whole PULL response alive, so a queue where every frame is pinned by one
-- held message stops pulling once the frames held reach pull_threshold_size_for_queue, even
-- though the held bodies alone are far below it.
--
-- 128 bodies of 30000 bytes in one queue: the development broker answers a pull with at most
-- 256 KiB of messages (maxTransferBytesOnMessageInMemory), i.e. 8 of them, so the handler
-- holds the first message of every frame (offset % 8 == 0) until the spec releases it. With
-- pull_threshold_size_for_queue = 1 (MiB) the consumer must stop after about 9 frames
-- (9 x 240 KiB > 2 MiB) while the held bodies are only 9 x 30000 bytes.
local helpers = require "helpers"
local ffi = require "ffi"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local PULL = 11
local TOPIC, GROUP, N, SIZE, PER_FRAME = "PinTopic", "g_pin", 128, 30000, 8

describe("consumer: pulled frames pinned by held messages", function()
  it("stop the pulls at pull_threshold_size_for_queue", function()
    local db, ns = cons.test_broker("--topic " .. TOPIC .. ":1")
    for i = 0, N - 1 do
      local body = string.format("%05d", i) .. string.rep("x", SIZE - 5)
      assert(lib.rmq_devbroker_produce(db, 0, TOPIC, 0, nil, nil, body, #body) == i)
    end
    local dir = helpers.tmpdir("pinned")
    local out, release = dir .. "/out.txt", dir .. "/release"
    local script = dir .. "/consumer.lua"
    local f = assert(io.open(script, "w"))
    f:write(string.format([[
local ffi = require "ffi"
pcall(ffi.cdef, "int poll(void *fds, unsigned long nfds, int timeout);")
local out = assert(io.open(%q, "a"))
out:setvbuf("no")
local function released()
  local r = io.open(%q)
  if r then r:close() end
  return r ~= nil
end
return {
  consumer_group = %q,
  namesrv_addr = %q,
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  subscribe = { [%q] = "*" },
  pull_threshold_size_for_queue = 1,
  consume_thread_min = 20, consume_thread_max = 20,
  consume = function(msgs, ctx)
    local off = tonumber(msgs[1].queue_offset)
    out:write(off .. "\n") -- one write: 20 threads share the file
    if off %% %d == 0 then
      while not released() do ffi.C.poll(nil, 0, 20) end
    end
  end,
}
]], out, release, GROUP, ns, TOPIC, PER_FRAME))
    f:close()
    local log = dir .. "/run.log"
    local pid = helpers.spawn(helpers.bin .. " run --log-debug pull " .. script,
      { log = log, rc = log .. ".rc" })

    -- Either the consumer stops pulling for the size of what it holds, or it pulls it all.
    helpers.wait_until(function()
      return cons.read(log):match("flow control, %d+ MiB") or cons.count_lines(out) >= N
    end, 60, "size flow control or every message (log " .. log .. ")")
    local handled = cons.count_lines(out)
    local buf = ffi.new("char[32]")
    local n = lib.rmq_devbroker_request_ext(db, cons.ALL, PULL, -1, "queueOffset", buf, 32)
    local pulled_to = tonumber(ffi.string(buf, n))
    assert.is_true(handled < N, handled .. " of " .. N .. " handled while each frame was pinned")
    assert.is_truthy(cons.read(log):match("flow control, %d+ MiB"))
    -- Stopped at the frames' memory: about 9 frames, far from the 70 a count of held bodies
    -- would allow.
    assert.is_true(pulled_to >= 6 * PER_FRAME and pulled_to <= 12 * PER_FRAME,
      "pulled up to offset " .. pulled_to)

    -- Released, everything is consumed and committed.
    assert(io.open(release, "w")):close()
    helpers.wait_until(function() return cons.count_lines(out) >= N end, 60, "all consumed")
    helpers.wait_until(function()
      return tonumber(lib.rmq_devbroker_committed_offset(db, 0, GROUP, TOPIC, 0)) == N
    end, 30, "committed offset " .. N)
    helpers.kill(pid)
    assert.equal(0, cons.exit_code(log))
  end)
end)
