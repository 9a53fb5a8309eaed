-- `rmqlua run --embedded`: the in-process development broker, the sample producer and a script
-- consuming, as the README's first command runs it; and every thread of such a run at work at
-- once (the TSan build runs this file: a data race between them fails it).
local helpers = require "helpers"
local rh = require "run_helpers"

describe("rmqlua run --embedded", function()
  it("consumes every sample message once with examples/hello.lua and stops at --max-messages", function()
    local rc, out = helpers.run(string.format(
      "timeout %d %s run --embedded --sample-messages 500 --max-messages 500 %s/examples/hello.lua 2>/dev/null",
      math.floor(120 * helpers.scale), helpers.bin, helpers.root))
    assert.are.equal(0, rc, out)
    local seen, n = {}, 0
    for key in out:gmatch("keys=sample%-(%d+) ") do
      local k = tonumber(key)
      assert.is_nil(seen[k], "sample-" .. key .. " consumed twice")
      seen[k] = true
      n = n + 1
    end
    assert.are.equal(500, n)
    for i = 1, 500 do assert.is_true(seen[i], "sample-" .. i .. " missing") end
  end)

  it("runs the sample producer, 8 consume threads sharing a dictionary, retries and two reloads "
    .. "together, and stops cleanly", function()
    local N = 400
    local dir = helpers.tmpdir("embedded-threads")
    local script = rh.write(dir, "threads.lua", [[
local rmq = require "rmq"
return {
  consumer_group = "threads_group",
  subscribe = { ThreadsTopic = "*" },
  consume_thread_min = 8, consume_thread_max = 8,
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  shared = { counts = "1m" },
  consume = function(msgs, ctx)
    local m = msgs[1]
    -- Every 10th sample body says "fail once": it comes back a second later.
    if m.body:find("fail once", 1, true) and m.reconsume_times == 0 then
      ctx.delay_level = 1
      return rmq.RECONSUME_LATER
    end
    if rmq.shared.counts:add(m.keys, true) and rmq.shared.counts:incr("done", 1, 0) == ]]
      .. N .. [[ then
      io.write("ALL CONSUMED\n")
    end
  end,
}
]])
    local log, rcf = dir .. "/run.log", dir .. "/run.rc"
    local pid = helpers.spawn(string.format("%s run --embedded --sample-messages %d %s",
      helpers.bin, N, helpers.shq(script)), { log = log, rc = rcf })
    -- The log in the message is read when the wait ends, not when it starts; a process that
    -- ended (a sanitizer report) ends the wait.
    local function wait_log(pattern, what)
      local ok, err = pcall(helpers.wait_until, function()
        return rh.read(log):find(pattern, 1, true) or not helpers.alive(pid)
      end, 60, what)
      local out = rh.read(log)
      if not ok or not out:find(pattern, 1, true) then
        error((ok and "rmqlua run ended before " .. what or tostring(err)) .. " (log: " .. out
          .. ")", 2)
      end
    end
    wait_log("started as", "the consumer started")
    os.execute("kill -HUP " .. pid)
    wait_log("(reload 1)", "the first reload")
    os.execute("kill -HUP " .. pid)
    wait_log("(reload 2)", "the second reload")
    wait_log("ALL CONSUMED", N .. " sample messages consumed")
    os.execute("kill -INT " .. pid)
    local rc = rh.exit_code(rcf, 60, "the exit of rmqlua run")
    local out = rh.read(log)
    assert.are.equal(0, rc, out)
    assert.falsy(out:find("Sanitizer", 1, true), out)
    assert.truthy(out:find("sample producer: " .. N .. " message(s) stored", 1, true), out)
    assert.truthy(out:find("stopped after", 1, true), out)
  end)

  it("rejects a bad --max-messages value", function()
    local rc, out = helpers.run(helpers.bin .. " run --embedded --max-messages x "
      .. helpers.root .. "/examples/hello.lua")
    assert.are.equal(2, rc)
    assert.matches("--max-messages needs a number", out, 1, true)
  end)
end)
