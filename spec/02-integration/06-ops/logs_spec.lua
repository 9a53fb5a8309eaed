-- Logs of `rmqlua run`: JSON lines, repeated handler errors summarised, the log file reopened
-- on SIGUSR1 (logrotate), SIGHUP reloading without ending the process, the log_* options of a
-- script, and a log reader that does not read not holding up consumption.
local helpers = require "helpers"
local rh = require "run_helpers"
local cjson = require "cjson"

local write, read, lines, exit_code = rh.write, rh.read, rh.lines, rh.exit_code
local example = rh.example

-- Every message fails on its first delivery with the same error (an invalid UTF-8 byte in it),
-- and is acknowledged when it comes back a second later.
local FAILING = [[
return {
  consumer_group = "logs_failing",
  subscribe = { LogTopic = "*" },
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  consume_thread_min = 2, consume_thread_max = 2,
  consume = function(msgs, ctx)
    if msgs[1].reconsume_times == 0 then
      ctx.delay_level = 1
      error("cannot handle this message \255 yet")
    end
  end,
}
]]

-- `rmqlua run --embedded ARGS`, stdout and stderr apart, with a time limit.
local run = rh.embedded

local function valid_utf8(path)
  return os.execute("iconv -f UTF-8 -t UTF-8 " .. helpers.shq(path) .. " > /dev/null 2>&1") == 0
end

describe("--log-format json", function()
  it("writes one JSON object per line, handler errors with their message's key fields", function()
    local d = helpers.tmpdir("json")
    local script = write(d, "failing.lua", FAILING)
    local rc, _, err, errf = run("--log-format json --sample-messages 40 --max-messages 40 " .. script)
    assert.are.equal(0, rc, err)
    assert.is_true(valid_utf8(errf), "stderr is not valid UTF-8")
    local full, repeated, summaries, status = 0, 0, 0, nil
    for _, l in ipairs(lines(err)) do
      local ok, o = pcall(cjson.decode, l)
      assert.is_true(ok and type(o) == "table", "not a JSON object: " .. l)
      assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%d[+-]%d%d:%d%d$", o.time)
      assert.truthy(({ error = 1, warn = 1, info = 1, debug = 1 })[o.level], l)
      assert.are.equal("string", type(o.category), l)
      assert.are.equal("string", type(o.message), l)
      if o.category == "lua" and o.msg_id then
        full = full + 1
        assert.matches("^%x+$", o.msg_id)
        assert.are.equal(32, #o.msg_id)
        assert.are.equal("LogTopic", o.topic)
        assert.are.equal("broker-a", o.broker)
        assert.are.equal("number", type(o.queue))
        assert.are.equal("number", type(o.offset))
        assert.are.equal(1, o.batch)
        assert.is_true(o.thread == 1 or o.thread == 2, l)
        assert.matches("cannot handle this message \u{fffd} yet", o.message, 1, true)
      elseif o.repeated then
        summaries = summaries + 1
        repeated = repeated + o.repeated
        assert.are.equal("error", o.level)
        assert.are.equal("lua", o.category)
        assert.matches("^\u{2026} and %d+ more like it in the last %d+ s: thread %d: consume failed",
          o.message)
        assert.matches("cannot handle this message", o.like, 1, true)
      elseif o.category == "status" and o.message:find("^stopped after") then
        status = o
      end
    end
    assert.are.equal(40, full + repeated, err)
    assert.is_true(summaries >= 1 and full <= 5 * summaries + 5, err)
    assert.truthy(status, "no final status line")
    assert.are.equal(40, status.consumed)
    assert.are.equal(40, status.failed)
    assert.are.equal(0, status.lag)
  end)
end)

describe("repeated handler errors", function()
  it("are written in full five times, then summarised with their count", function()
    local d = helpers.tmpdir("rep")
    local script = write(d, "failing.lua", FAILING)
    local rc, _, err = run("--sample-messages 60 --max-messages 60 " .. script)
    assert.are.equal(0, rc, err)
    local full, more = 0, 0
    for _, l in ipairs(lines(err)) do
      if l:find("ERROR %[lua%] thread %d: consume failed for 1 message%(s%)") then full = full + 1 end
      local n = l:match("ERROR %[lua%] \u{2026} and ([%d,]+) more like it in the last %d+ s: thread")
      if n then more = more + tonumber((n:gsub(",", ""))) end
    end
    assert.are.equal(60, full + more, err)
    assert.is_true(more >= 45, err)
  end)
end)

describe("--log-file", function()
  it("writes the log to the file, and SIGUSR1 reopens it after it was moved away", function()
    local d = helpers.tmpdir("file")
    local log, out, rcf = d .. "/rmqlua.log", d .. "/out", d .. "/rc"
    local pid = helpers.spawn(string.format("%s run --embedded --sample-messages 5 --log-file %s %s",
      helpers.bin, log, example("hello")), { log = out, rc = rcf })
    helpers.wait_until(function() return read(log):find("sample producer: 5 message%(s%) stored") end,
      30, "the sample producer's line in the log file")
    helpers.wait_until(function() return read(out):find("keys=sample%-5") end, 30, "message 5")
    assert.is_nil(read(log):find("keys=sample", 1, true), "stdout went to the log file")
    assert.is_true(os.rename(log, log .. ".1"))
    os.execute("kill -USR1 " .. pid)
    helpers.wait_until(function() return read(log):find("log file " .. log .. " reopened", 1, true) end,
      30, "the reopened log file")
    assert.is_true(helpers.alive(pid))
    helpers.kill(pid, "TERM")
    assert.are.equal(0, exit_code(rcf))
    local old, new = read(log .. ".1"), read(log)
    assert.matches("sample producer", old)
    assert.is_nil(old:find("reopened", 1, true))
    assert.matches("INFO  %[status%] stopped after [%d.]+ s: consumed 5 ", new)
    assert.are.equal("", read(out):gsub("[^\n]*keys=sample[^\n]*\n", ""), "only the script's output on stdout")
  end)

  it("names the file when it cannot be opened (exit 2)", function()
    local d = helpers.tmpdir("file")
    local rc, out = helpers.run(helpers.bin .. " run --embedded --log-file " .. d
      .. "/no/such/dir/x.log " .. example("hello"))
    assert.are.equal(2, rc, out)
    assert.matches("log file " .. d .. "/no/such/dir/x.log: No such file or directory", out, 1, true)
  end)
end)

describe("SIGHUP", function()
  it("reloads the script (see 04-lua/reload_spec.lua): logged, the consumer goes on", function()
    local pid, out, errf, rcf = rh.spawn_hello("hup", 3)
    helpers.wait_until(function() return read(out):find("keys=sample%-3") end, 30, "message 3")
    os.execute("kill -HUP " .. pid)
    helpers.wait_until(function() return read(errf):find("(reload 1)", 1, true) end, 30,
      "the reload")
    assert.is_true(helpers.alive(pid))
    assert.matches("INFO  %[reload%] reloading [^\n]*hello%.lua", read(errf))
    helpers.kill(pid, "TERM")
    assert.are.equal(0, exit_code(rcf))
  end)
end)

describe("log options in the script", function()
  it("log_format, log_debug and log_file take effect; the --log-* flags override them", function()
    local d = helpers.tmpdir("opts")
    local log = d .. "/from-script.log"
    local script = write(d, "opts.lua", string.format([[
return {
  consumer_group = "logs_opts",
  subscribe = { OptTopic = "*" },
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  log_format = "json",
  log_debug = "rebalance",
  log_file = %q,
  consume = function() end,
}
]], log))
    local rc, _, err = run("--sample-messages 3 --max-messages 3 " .. script)
    assert.are.equal(0, rc, err)
    local debug = 0
    for _, l in ipairs(lines(read(log))) do
      local o = cjson.decode(l)
      if o.level == "debug" and o.category == "rebalance" then debug = debug + 1 end
    end
    assert.is_true(debug > 0, "no rebalance debug line in " .. read(log))
    local log2 = d .. "/from-flag.log"
    rc, _, err = run("--log-format text --log-file " .. log2 .. " --sample-messages 3 --max-messages 3 "
      .. script)
    assert.are.equal(0, rc, err)
    assert.matches("DEBUG [rebalance]", read(log2), 1, true)
    assert.matches("INFO  [status] stopped after", read(log2), 1, true)
  end)
end)

describe("a log reader that does not read", function()
  it("does not hold up consumption (lines wait in the writer's queue)", function()
    local d = helpers.tmpdir("stall")
    local fifo, out, rcf = d .. "/fifo", d .. "/out", d .. "/rc"
    assert.is_true(os.execute("mkfifo " .. fifo) == 0)
    -- Opens the fifo, then reads nothing for a long while.
    local reader = helpers.spawn("sh -c 'exec 3< " .. fifo .. "; exec sleep 600'")
    local pid = helpers.spawn(string.format(
      "sh -c 'exec %s run --embedded --log-debug all --sample-messages 3000 --max-messages 3000 %s 2> %s'",
      helpers.bin, example("hello"), fifo), { log = out, rc = rcf })
    helpers.wait_until(function() return select(2, read(out):gsub("keys=sample%-", "")) == 3000 end, 60,
      "3000 messages consumed while nobody reads the log")
    helpers.kill(reader, "KILL")
    helpers.wait_until(function() return not helpers.alive(pid) end, 60, "rmqlua to exit")
    assert.are.equal(0, exit_code(rcf))
  end)
end)
