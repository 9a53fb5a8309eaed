-- SQL92 subscriptions from the script's side: the selector table and rmq.sql92(), `rmqlua
-- check` validating the syntax offline (file:line, exit 2; a warning for text the broker would
-- ignore), and `rmqlua test` cases that state properties and expect which messages the selector
-- delivers.
local helpers = require "helpers"
local rh = require "run_helpers"

local tmpdir, write = rh.script_dir("sql92-cli")
local rmqlua = rh.rmqlua

local function script(subscribe)
  return string.format([[
local rmq = require "rmq"
return {
  consumer_group = "sql_cli",
  subscribe = {
    %s
  },
  consume = function(msgs, ctx) end,
}
]], subscribe)
end

describe("SQL92 subscriptions in scripts", function()
  it("rmqlua check accepts rmq.sql92() and the table form", function()
    local p = write("ok.lua", script([[A = rmq.sql92("a > 5 AND b IN ('x', 'y')"),
    B = { type = "SQL92", expression = "c IS NOT NULL" },
    C = { type = "TAG", expression = "TagA || TagB" },
    D = "*",]]))
    local rc, out = rmqlua("check " .. p)
    assert.are.equal(0, rc, out)
    assert.matches("ok %(consumer_group sql_cli, 4 subscription", out)
    assert.is_nil(out:find("warning", 1, true))
  end)

  local bad = {
    { "a selector that does not compile", [[X = rmq.sql92("a > 'x'"),]],
      ":5: subscribe X: invalid SQL92 expression: Value ''x'' cannot be compared." },
    { "a syntax error", [[X = rmq.sql92("a = 1 AND"),]],
      ":5: subscribe X: invalid SQL92 expression: Encountered \"<EOF>\" at line 1, column 10" },
    { "0.0, refused by Java's ConstantExpression", [[X = rmq.sql92("a > 0.0"),]],
      "0.0 is less than 4.9E-324" },
    { "an empty expression", [[X = rmq.sql92(""),]], "Expression can't be null! SQL92" },
    { "an unknown type", [[X = { type = "XPATH", expression = "a" },]],
      ":5: subscribe.X: type must be \"TAG\" or \"SQL92\", got XPATH" },
    { "an unknown key", [[X = { type = "SQL92", expr = "a > 1" },]],
      ":5: subscribe.X: unknown key 'expr' in the selector (type, expression)" },
    { "a non-string expression", [[X = { type = "SQL92", expression = 5 },]],
      ":5: subscribe.X: expression must be a string, got number" },
  }
  for i, b in ipairs(bad) do
    it("rmqlua check rejects " .. b[1] .. " with file:line (exit 2)", function()
      local p = write("bad" .. i .. ".lua", script(b[2]))
      rh.expect(rmqlua, "check " .. p, 2, b[3])
    end)
  end

  it("rmq.sql92 wants a string", function()
    local p = write("badarg.lua", script([[X = rmq.sql92(42),]]))
    rh.expect(rmqlua, "check " .. p, 2, "rmq.sql92: the expression must be a string, got number")
  end)

  it("rmqlua check warns about text after the expression, which the broker never reads", function()
    local p = write("trailing.lua", script([[X = rmq.sql92("a = 1 b = 2"),]]))
    local rc, out = rmqlua("check " .. p)
    assert.are.equal(0, rc, out)
    assert.matches("warning: subscribe X: the broker ignores the text after the SQL92 expression: "
      .. "\"b = 2\"", out, 1, true)
  end)

  describe("rmqlua test", function()
    local sp
    lazy_setup(function()
      sp = write("orders.lua", [[
local rmq = require "rmq"
return {
  consumer_group = "sql_test",
  subscribe = { Orders = rmq.sql92("region = 'eu' AND amount > 100") },
  consume = function(msgs, ctx)
    for i = 1, #msgs do
      if msgs[i].keys == "boom" then error("handler saw boom") end
    end
  end,
}
]])
    end)

    it("delivers only the messages whose properties match", function()
      local cases = write("cases_ok.lua", [[
return {
  { name = "match", messages = { { keys = "a", properties = { region = "eu", amount = "101" } } },
    expect = { delivered = 1, status = "SUCCESS", ack_index = 1 } },
  { name = "mixed", messages = {
      { keys = "b", properties = { region = "us", amount = "500" } },
      { keys = "c", properties = { region = "eu", amount = 700 } },
      { keys = "d", properties = { region = "eu", amount = "1.5" } },  -- Integer.valueOf throws
      { keys = "e", properties = { region = "eu" } },                 -- NULL
      { keys = "f", tags = "TagA", properties = { region = "eu", amount = "200" } } },
    expect = { delivered = { 2, 5 }, ack_index = 2 } },
  { name = "none", messages = { { keys = "boom", properties = { region = "us" } } },
    expect = { delivered = 0 } },
}
]])
      rh.expect_pattern(rmqlua, "test " .. sp .. " " .. cases, 0, "3 case%(s%), 0 failed")
    end)

    it("fails a case whose expectation the selector contradicts", function()
      local cases = write("cases_bad.lua", [[
return {
  { name = "count", messages = { { keys = "a", properties = { region = "eu", amount = "99" } } },
    expect = { delivered = 1 } },
  { name = "list", messages = {
      { keys = "a", properties = { region = "eu", amount = "300" } },
      { keys = "b", properties = { region = "eu", amount = "400" } } },
    expect = { delivered = { 2 } } },
  { name = "nothing passed", messages = { { keys = "a", properties = { region = "us" } } },
    expect = { status = "SUCCESS" } },
  { name = "the handler still runs on what passed",
    messages = { { keys = "boom", properties = { region = "eu", amount = "500" } } },
    expect = { delivered = 1, error = false } },
}
]])
      rh.expect_pattern(rmqlua, "test " .. sp .. " " .. cases, 1,
        "FAIL count: delivered 0 message%(s%) %(%), expected 1",
        "FAIL list: delivered messages {1,2}, expected {2}",
        "FAIL nothing passed: expect.status given, but no message passed",
        "FAIL the handler still runs on what passed: unexpected error: .*handler saw boom",
        "4 case%(s%), 4 failed")
    end)

    it("reports a selector that does not compile (exit 2)", function()
      local p = write("badsel.lua", script([[X = rmq.sql92("a >"),]]))
      local cases = write("cases_any.lua", "return {}\n")
      rh.expect(rmqlua, "test " .. p .. " " .. cases, 2, "subscribe X: invalid SQL92 expression")
    end)

    it("runs the example's offline cases", function()
      rh.expect_pattern(rmqlua, "test " .. helpers.root .. "/examples/sql92.lua "
        .. helpers.root .. "/examples/cases/sql92.lua", 0,
        "5 case%(s%), 0 failed")
    end)
  end)
end)
