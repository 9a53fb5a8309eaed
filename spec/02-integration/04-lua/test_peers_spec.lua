-- rmqlua test with stubbed cosocket peers (a case's `peers`, lua/rmq/testrun.lua): a handler
-- that talks to a service over rmq.socket.tcp() runs offline against a Lua function playing the
-- service: what it sends reaches the stub, the stub's answers come back, keep-alive reuses the
-- stubbed connection, sslhandshake is recorded; a connect to a host:port no case stubs fails
-- naming it, a stub that raises fails the case, a stub that does not answer gives "timeout".
local rh = require "run_helpers"

local tmpdir, write = rh.script_dir("test-peers")
local rmqlua = rh.rmqlua

-- A handler with a Redis-like counter: one INCR per message key over a pooled connection.
local SCRIPT = [[
local rmq = require "rmq"
return {
  consumer_group = "peers", subscribe = { Counts = "*" },
  consume = function(msgs)
    for i = 1, #msgs do
      local s = rmq.socket.tcp()
      local ok, err = s:connect("127.0.0.1", 6379)
      if not ok then error("connect: " .. err) end
      if msgs[i].tags == "tls" then assert(s:sslhandshake(false, "counter.test", true)) end
      assert(s:send({ "INCR ", msgs[i].keys, "\r\n" }))
      local line, rerr = s:receive()
      if not line then error("receive: " .. rerr) end
      if line:sub(1, 1) ~= ":" then error("unexpected answer " .. line) end
      rmq.send("Counted", msgs[i].keys .. "=" .. line:sub(2) .. " reused "
        .. s:getreusedtimes())
      s:setkeepalive()
    end
  end,
}
]]

describe("rmqlua test: stubbed cosocket peers", function()
  lazy_setup(function() write("counter.lua", SCRIPT) end)

  it("runs a handler that talks to a service against a stub of it", function()
    local cases = write("counter_cases.lua", [[
local function counter(conn)
  local n = {}
  while true do
    local line = conn:receive()
    if not line then return end
    local key = assert(line:match("^INCR (%S+)$"), "not an INCR: " .. line)
    n[key] = (n[key] or 0) + 1
    conn:send(":" .. n[key] .. "\r\n")
  end
end
return {
  { name = "counts", peers = { ["127.0.0.1:6379"] = counter },
    messages = { { keys = "a" }, { keys = "a" }, { keys = "b" } },
    expect = { status = "SUCCESS", sent = {
      { topic = "Counted", body = "a=1 reused 0" },
      { topic = "Counted", body = "a=2 reused 1" },
      { topic = "Counted", body = "b=1 reused 2" } } } },
  { name = "over TLS", peers = { ["127.0.0.1:6379"] = function(conn)
      conn:receive()
      assert(conn.tls and conn.server_name == "counter.test", "no TLS")
      conn:send(":7\r\n")
    end },
    messages = { { keys = "t", tags = "tls" } },
    expect = { sent = { { topic = "Counted", body = "t=7 reused 0" } } } },
  { name = "scripted", peers = { ["127.0.0.1:6379"] = {
      { "INCR x\r\n", ":5\r\n" }, { "INCR y\r\n", ":9\r\n" } } },
    messages = { { keys = "x" }, { keys = "y" } },
    expect = { sent = { { topic = "Counted", body = "x=5 reused 0" },
      { topic = "Counted", body = "y=9 reused 1" } } } },
}
]])
    rh.expect_pattern(rmqlua, "test " .. tmpdir .. "/counter.lua " .. cases, 0,
      "ok   counts", "ok   over TLS", "ok   scripted", "3 case%(s%), 0 failed")
  end)

  it("fails a connect nobody stubbed, a stub that raises, and a stub that does not answer", function()
    local cases = write("counter_bad.lua", [[
return {
  { name = "elsewhere", peers = { ["127.0.0.1:6380"] = function() end },
    messages = { { keys = "a" } },
    expect = { error = "connect: rmqlua test: no peer stubbed for 127.0.0.1:6379" } },
  { name = "raises", peers = { ["127.0.0.1:6379"] = function(conn)
      conn:receive()
      error("the stub saw something it did not expect")
    end },
    messages = { { keys = "a" } }, expect = { status = "RECONSUME_LATER" } },
  { name = "silent", peers = { ["127.0.0.1:6379"] = function(conn)
      conn:receive()
      conn:receive()
    end },
    messages = { { keys = "a" } }, expect = { error = "receive: timeout" } },
  { name = "bad peers", peers = { ["no port"] = 1 }, messages = { { keys = "a" } } },
  { name = "off script", peers = { ["127.0.0.1:6379"] = { { "INCR b\r\n", ":1\r\n" } } },
    messages = { { keys = "a" } }, expect = { status = "RECONSUME_LATER" } },
}
]])
    rh.expect_pattern(rmqlua, "test " .. tmpdir .. "/counter.lua " .. cases, 1,
      "ok   elsewhere",
      "FAIL raises: .-peer 127%.0%.0%.1:6379 raised: .-the stub saw something it did not expect",
      "ok   silent",
      "FAIL bad peers: [^\n]*peers: each entry is \"host:port\" = function%(conn%) or a list of "
        .. "{ sent, answer }, got no port = number",
      "FAIL off script: .-peer 127%.0%.0%.1:6379 raised: step 1: expected \"INCR b\\r\\n\", "
        .. "got \"INCR a\\r\\n\"",
      "5 case%(s%), 3 failed")
  end)
end)
