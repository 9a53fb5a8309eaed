-- rmqlua check / test / run on good and bad scripts: exit codes (0 ok, 1 failure, 2 usage or
-- configuration) and messages naming file:line, all before any connection.
local helpers = require "helpers"
local rh = require "run_helpers"

local tmpdir, write = rh.script_dir("lua-cli")
local rmqlua = rh.rmqlua

local GOOD = [[
local rmq = require "rmq"
local helper = require "good_helper"   -- a module beside the script
local cjson = require "cjson"
return {
  consumer_group = "cli_good",
  subscribe = { T = "TagA || TagB" },
  consume_thread_min = 2,
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  init = function(ctx) INIT_RAN = helper.value end,
  consume = function(msgs, ctx)
    local n = 0
    for i = 1, #msgs do
      if msgs[i].body == "fail" then error("bad body at " .. i) end
      n = n + #cjson.decode(msgs[i].body)
    end
    if n > 2 then ctx.ack_index = 1 end
    ctx.delay_level = 2
    rmq.send("Out", "n=" .. n, { tags = "X" })
  end,
}
]]

describe("rmqlua check", function()
  lazy_setup(function()
    write("good_helper.lua", "return { value = 42 }\n")
    write("good.lua", GOOD)
  end)

  it("accepts a good script (exit 0)", function()
    rh.expect_pattern(rmqlua, "check " .. tmpdir .. "/good.lua", 0,
      "ok %(consumer_group cli_good, 1 subscription")
  end)

  local bad = {
    { "syntax error", "return {\n  consumer_group = 'g'\n  subscribe = {},\n}\n", ":3:" },
    { "missing consume", "local x = 1\nreturn {\n  consumer_group = 'g',\n  subscribe = { T = '*' },\n}\n",
      ":2: the script defines no handler" },
    { "bad option type", "return {\n  consumer_group = 'g',\n  subscribe = { T = '*' },\n"
      .. "  consume_thread_min = 'four',\n  consume = function() end,\n}\n",
      ":4: option consume_thread_min" },
    { "table option", "return {\n  consumer_group = 'g',\n  subscribe = { T = '*' },\n"
      .. "  pull_batch_size = {},\n  consume = function() end,\n}\n",
      ":4: option 'pull_batch_size' must be a string, number or boolean" },
    { "unknown option", "return {\n  consumer_group = 'g',\n  subscribe = { T = '*' },\n"
      .. "  consume_thred_min = 4,\n  consume = function() end,\n}\n",
      ":4: unknown option" },
    { "bad enum", "return {\n  consumer_group = 'g',\n  subscribe = { T = '*' },\n"
      .. "  message_model = 'BROADCAST',\n  consume = function() end,\n}\n",
      ":4: .*message_model" },
    { "hook not a function", "return {\n  consumer_group = 'g',\n  subscribe = { T = '*' },\n"
      .. "  consume = function() end,\n  init = 5,\n}\n", ":5: hook 'init' must be a function" },
    { "both handlers", "return {\n  consumer_group = 'g',\n  subscribe = { T = '*' },\n"
      .. "  consume = function() end,\n  consume_orderly = function() end,\n}\n",
      ":5: the script defines both" },
    { "no subscribe", "return {\n  consumer_group = 'g',\n  consume = function() end,\n}\n",
      ":1: the script has no subscribe table" },
    { "error at top level", "local t = nil\nlocal x = t.field\nreturn {}\n", ":2: attempt to index" },
    { "not a table", "return 42\n", ":1: the script must return a table" },
    { "init fails", "return {\n  consumer_group = 'g',\n  subscribe = { T = '*' },\n"
      .. "  consume = function() end,\n  init = function() error('no database') end,\n}\n",
      ":5: no database" },
    { "missing module", "local m = require 'does_not_exist'\nreturn {}\n",
      ":1: module 'does_not_exist' not found" },
  }
  for i, c in ipairs(bad) do
    it("rejects a script with a " .. c[1] .. " with file:line and exit 2", function()
      local path = write("bad" .. i .. ".lua", c[2])
      rh.expect_pattern(rmqlua, "check " .. path, 2, path:gsub("%p", "%%%0") .. c[3])
    end)
  end

  it("names a folder given as the script (exit 2)", function()
    local dir = helpers.tmpdir("folder.lua")
    rh.expect(rmqlua, "check " .. dir, 2, "cannot open script " .. dir .. ": Is a directory")
  end)

  it("applies checkConfig (exit 2, the option named)", function()
    local path = write("range.lua", "return { consumer_group = 'g', subscribe = { T = '*' },\n"
      .. "  consume_thread_min = 0, consume = function() end }\n")
    local rc, out = rmqlua("check " .. path)
    assert.are.equal(2, rc, out)
    assert.matches("consume_thread_min", out)
    assert.matches(path:gsub("%p", "%%%0") .. ":2: option consume_thread_min = 0 is out of range", out)
    assert.matches("consumeThreadMin Out of range", out, 1, true)
  end)

  it("takes --set overrides and rejects bad ones", function()
    local rc, out = rmqlua("check --set consume_thread_min=0 " .. tmpdir .. "/good.lua")
    assert.are.equal(2, rc, out)
    rc, out = rmqlua("check --set nope=1 " .. tmpdir .. "/good.lua")
    assert.are.equal(2, rc, out)
    assert.matches("nope", out)
    rc, out = rmqlua("check --set pull_batch_size=16 " .. tmpdir .. "/good.lua")
    assert.are.equal(0, rc, out)
    rc, out = rmqlua("check --set consume_tps_limit=-5 " .. tmpdir .. "/good.lua")
    assert.are.equal(2, rc, out)
    assert.matches("consume_tps_limit", out, 1, true)
    assert.matches("out of range", out, 1, true)
    rh.expect_pattern(rmqlua, "check --set consume_tps_limit=500 " .. tmpdir .. "/good.lua", 0)
  end)

  it("names a missing file and answers usage errors with exit 2", function()
    local rc, out = rmqlua("check " .. tmpdir .. "/missing.lua")
    assert.are.equal(2, rc, out)
    assert.matches("missing%.lua", out)
    rc = rmqlua("check")
    assert.are.equal(2, rc)
    rc = rmqlua("check --bogus x.lua")
    assert.are.equal(2, rc)
  end)
end)

describe("rmqlua test", function()
  lazy_setup(function()
    write("good_helper.lua", "return { value = 42 }\n")
    write("good.lua", GOOD)
  end)

  it("runs passing cases (exit 0)", function()
    local cases = write("cases_ok.lua", [[
return {
  { name = "one", messages = { { body = "[1]" } },
    expect = { status = "SUCCESS", ack_index = 1, delay_level = 2,
               sent = { { topic = "Out", body = "n=1", tags = "X" } } } },
  { name = "partial ack", messages = { { body = "[1,2]" }, { body = "[3]" } },
    expect = { status = "SUCCESS", ack_index = 1 } },
  { name = "error", messages = { { body = "[1]" }, { body = "fail" } },
    expect = { status = "RECONSUME_LATER", ack_index = 0, error = "bad body at 2", sent = {} } },
}
]])
    rh.expect_pattern(rmqlua, "test " .. tmpdir .. "/good.lua " .. cases, 0,
      "ok   one", "ok   partial ack", "3 case%(s%), 0 failed")
  end)

  it("runs consume_orderly cases (SUSPEND with suspend_millis)", function()
    local script = write("orderly.lua", [[
local rmq = require "rmq"
return {
  consumer_group = "ord", subscribe = { T = "*" },
  consume_orderly = function(msgs, ctx)
    if msgs[1].body == "wait" then ctx.suspend_millis = 500; return rmq.SUSPEND end
  end,
}
]])
    local cases = write("orderly_cases.lua", [[
return {
  { name = "ok", messages = { { body = "go" } }, expect = { status = "SUCCESS", ack_index = 1 } },
  { name = "suspend", messages = { { body = "wait" } },
    expect = { status = "SUSPEND", suspend_millis = 500 } },
}
]])
    local rc, out = rmqlua("check " .. script)
    assert.are.equal(0, rc, out)
    assert.matches("consume_orderly", out)
    rh.expect_pattern(rmqlua, "test " .. script .. " " .. cases, 0, "2 case%(s%), 0 failed")
  end)

  it("reports failing cases (exit 1)", function()
    local cases = write("cases_bad.lua", [[
return {
  { name = "wrong status", messages = { { body = "fail" } }, expect = { status = "SUCCESS" } },
  { name = "wrong send", messages = { { body = "[1]" } },
    expect = { sent = { { topic = "Elsewhere" } } } },
}
]])
    rh.expect_pattern(rmqlua, "test " .. tmpdir .. "/good.lua " .. cases, 1,
      "FAIL wrong status: status \"RECONSUME_LATER\", expected \"SUCCESS\"",
      "FAIL wrong send: sent%[1%]%.topic \"Out\", expected \"Elsewhere\"", "2 case%(s%), 2 failed")
  end)

  it("checks the handler's rmq.pause / rmq.resume / rmq.stop calls", function()
    local script = write("flowcalls.lua", [[
local rmq = require "rmq"
return {
  consumer_group = "flowcalls", subscribe = { T = "*" },
  consume = function(msgs)
    local b = msgs[1].body
    if b == "slow" then rmq.pause(5)
    elseif b == "hold" then rmq.pause()
    elseif b == "go" then rmq.resume()
    elseif b == "done" then rmq.stop()
    elseif b == "bad" then rmq.pause(-1) end
  end,
}
]])
    local cases = write("flowcalls_cases.lua", [[
return {
  { name = "timed", messages = { { body = "slow" } }, expect = { pause = 5, stop = false } },
  { name = "until resume", messages = { { body = "hold" } }, expect = { pause = true } },
  { name = "resume", messages = { { body = "go" } }, expect = { resume = true, pause = false } },
  { name = "stop", messages = { { body = "done" } }, expect = { stop = true } },
  { name = "bad", messages = { { body = "bad" } },
    expect = { status = "RECONSUME_LATER", error = "rmq.pause: seconds must be a number > 0" } },
  { name = "wrong seconds", messages = { { body = "slow" } }, expect = { pause = 1 } },
  { name = "unexpected", messages = { { body = "done" } }, expect = { stop = false } },
  { name = "missing", messages = { { body = "x" } }, expect = { pause = true } },
}
]])
    local rc, out = rmqlua("test " .. script .. " " .. cases)
    assert.are.equal(1, rc, out)
    for _, ok in ipairs({ "timed", "until resume", "resume", "stop", "bad" }) do
      assert.matches("ok   " .. ok, out, 1, true)
    end
    assert.matches("FAIL wrong seconds: rmq.pause(5) called, expected rmq.pause(1)", out, 1, true)
    assert.matches("FAIL unexpected: rmq.stop() called, expected none", out, 1, true)
    assert.matches("FAIL missing: rmq.pause not called, expected rmq.pause()", out, 1, true)
    assert.matches("8 case%(s%), 3 failed", out)
  end)

  it("rejects a bad script or cases file (exit 2)", function()
    local rc, out = rmqlua("test " .. tmpdir .. "/bad1.lua " .. tmpdir .. "/cases_ok.lua")
    assert.are.equal(2, rc, out)
    local syntax = write("cases_syntax.lua", "return {\n{\n")
    rh.expect_pattern(rmqlua, "test " .. tmpdir .. "/good.lua " .. syntax, 2, "cases_syntax%.lua:")
  end)
end)

describe("rmqlua run", function()
  it("refuses a bad script before any connection (exit 2)", function()
    rh.expect_pattern(rmqlua, "run --namesrv 127.0.0.1:1 " .. tmpdir .. "/bad2.lua", 2,
      "bad2%.lua:2:")
  end)

  it("needs a name server (exit 2)", function()
    write("good_helper.lua", "return { value = 42 }\n")
    rh.expect_pattern(rmqlua, "run " .. write("good.lua", GOOD), 2, "name server")
  end)
end)

describe("--help", function()
  for _, cmd in ipairs({ "run", "check", "test" }) do
    it("of " .. cmd .. " prints its usage and exits 0", function()
      local rc, out = rmqlua(cmd .. " --help")
      assert.are.equal(0, rc)
      assert.matches("usage: rmqlua " .. cmd, out)
      assert.matches("exit codes", out)
    end)
  end
end)

describe("the examples", function()
  for _, name in ipairs({ "hello", "json", "retry", "allocate", "forward", "shared", "throttle", "reload" }) do
    it(name .. " passes check and its offline cases", function()
      local ex = helpers.root .. "/examples/" .. name .. ".lua"
      local rc, out = rmqlua("check " .. ex)
      assert.are.equal(0, rc, out)
      local cases = helpers.root .. "/examples/cases/" .. name .. ".lua"
      rh.expect_pattern(rmqlua, "test " .. ex .. " " .. cases, 0, "0 failed")
    end)
  end
end)
