-- The status line of `rmqlua run`. On a terminal (a pseudo-terminal made by script(1), from
-- bsdutils) the live line is cleared before any other line, so neither a log line nor the
-- script's own output is ever glued to it, and the last line gives the totals and the real
-- overall rate. Off a terminal a plain status line is logged every 10 s.
local helpers = require "helpers"
local rh = require "run_helpers"

local write, read, exit_code = rh.write, rh.read, rh.exit_code

-- What a terminal shows once the bytes are written: \r goes to column 0, ESC[K erases to the
-- end of the line, \n ends the line; other escape sequences are not expected.
local function screen(bytes)
  local out, line, col = {}, {}, 0
  local i, n = 1, #bytes
  while i <= n do
    local c = bytes:sub(i, i)
    if c == "\r" then
      col = 0
    elseif c == "\n" then
      out[#out + 1] = table.concat(line)
      line, col = {}, 0
    elseif c == "\27" then
      local seq = bytes:match("^\27%[K", i)
      assert(seq, "unexpected escape sequence at byte " .. i .. ": " .. bytes:sub(i, i + 10):gsub("\27", "ESC"))
      for k = #line, col + 1, -1 do line[k] = nil end
      i = i + #seq - 1
    else
      col = col + 1
      line[col] = c
    end
    i = i + 1
  end
  if #line > 0 then out[#out + 1] = table.concat(line) end
  return out
end

-- 1200 messages, 4 threads, ~10 ms each: a few seconds of live status with the script's output
-- and log lines going by.
local SLOW = [[
local ffi = require "ffi"
local rmq = require "rmq"
ffi.cdef "int poll(void *fds, unsigned long nfds, int timeout);"
return {
  consumer_group = "status_slow",
  subscribe = { StatusTopic = "*" },
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  consume_thread_min = 4, consume_thread_max = 4,
  consume = function(msgs)
    for i = 1, #msgs do
      local m = msgs[i]
      ffi.C.poll(nil, 0, 10)
      io.write("msg " .. m.keys .. " done\n")
      if tonumber(m.queue_offset) % 25 == 0 then rmq.log("info", "checkpoint at", m.keys) end
    end
  end,
}
]]

describe("the status line on a terminal", function()
  it("never has another line glued to it, and the last line gives the totals and the overall rate", function()
    local d = helpers.tmpdir("pty")
    local script = write(d, "slow.lua", SLOW)
    local typescript = d .. "/typescript"
    local cmd = string.format("%s run --embedded --sample-messages 1200 --max-messages 1200 %s",
      helpers.bin, script)
    local rc, out = helpers.run(string.format("timeout %d script -qfec %s %s < /dev/null",
      math.floor(120 * helpers.scale), helpers.shq(cmd), helpers.shq(typescript)))
    assert.are.equal(0, rc, out)
    local raw = read(typescript)
    assert.matches("\r\27%[K%d+ msg/s | consumed %d+ | failed 0 | retried 0 | dlq 0 | lag %d+", raw)
    local msgs, logs, final = 0, 0, nil
    for _, l in ipairs(screen(raw)) do
      if l:find("^Script started") or l:find("^Script done") or l == "" then
        -- script(1)'s own header and trailer
      elseif l:find("^msg sample%-%d+ done$") then
        msgs = msgs + 1
      elseif l:find("^%d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d%.%d%d%d %u+ +%[[%w-]+%] ") then
        logs = logs + 1
        assert.is_nil(l:find("msg/s |", 1, true), "status glued to a log line: " .. l)
        assert.is_nil(l:find("msg sample", 1, true), "output glued to a log line: " .. l)
        assert.is_nil(l:find("%d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d", 24), "two log lines in one: " .. l)
      elseif l:find("^stopped after") then
        assert.is_nil(final, "two final lines")
        final = l
      else
        error("a line that is neither output, a log line nor the final line: " .. l)
      end
    end
    assert.are.equal(1200, msgs)
    assert.is_true(logs > 40, "log lines: " .. logs)
    assert.truthy(final, "no final line")
    local secs, consumed, rate = final:match(
      "^stopped after ([%d.]+) s: consumed (%d+) %(([%d.]+) msg/s overall%) | failed 0 | retried 0 | dlq 0 | sent 0 | lag 0$")
    assert.truthy(secs, final)
    assert.are.equal("1200", consumed)
    secs, rate = tonumber(secs), tonumber(rate)
    assert.is_true(secs >= 1 and rate > 0, final)
    assert.is_true(math.abs(rate - 1200 / secs) <= 0.1 * rate, final)
  end)
end)

describe("the status line off a terminal", function()
  it("is a plain log line every 10 s", function()
    local pid, _, errf, rcf = rh.spawn_hello("notty", 3)
    helpers.wait_until(function() return read(errf):find("%[status%] %d+ msg/s") end, 30,
      "a status line")
    helpers.kill(pid, "TERM")
    assert.are.equal(0, exit_code(rcf))
    local err = read(errf)
    assert.matches("INFO  %[status%] %d+ msg/s | consumed 3 | failed 0 | retried 0 | dlq 0 | lag 0 | cached 0 | queues %d+\n", err)
    assert.matches("INFO  %[status%] stopped after [%d.]+ s: consumed 3 %([%d.]+ msg/s overall%)", err)
    assert.is_nil(err:find("[\r\27]"), "terminal control bytes off a terminal")
  end)
end)
