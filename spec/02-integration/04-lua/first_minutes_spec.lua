-- What a new user meets in the first minutes: `rmqlua test` validating like `check`, clear
-- messages for the usual mistakes (no name server, an option out of range, a missing file, a
-- syntax error), the examples run with --embedded showing what each one is about, and their
-- output one whole line per message even from 20 threads.
local helpers = require "helpers"
local rh = require "run_helpers"

local rmqlua, write, exit_code, example, lines = rh.rmqlua, rh.write, rh.exit_code, rh.example,
  rh.lines

local function esc(s) return (s:gsub("%p", "%%%0")) end

local function count(s, plain)
  local n, i = 0, 1
  while true do
    local a, b = s:find(plain, i, true)
    if not a then return n end
    n, i = n + 1, b + 1
  end
end

-- `rmqlua args` exits 2 (a usage or configuration error), its output matching pattern and
-- giving the hint (plain text).
local function refused_with_hint(args, pattern, hint)
  local rc, out = rmqlua(args)
  assert.are.equal(2, rc, out)
  assert.matches(pattern, out)
  assert.matches(hint, out, 1, true)
end

-- `rmqlua run --embedded` with a time limit; stdout and stderr apart.
local embedded = rh.embedded

local GOOD = [[
local seen = {}
return {
  consumer_group = "fm_good",
  subscribe = { T = "*" },
  consume = function(msgs, ctx)
    for i = 1, #msgs do
      local id = msgs[i].msg_id
      if seen[id] then error("msg_id " .. id .. " seen twice") end
      seen[id] = true
    end
  end,
}
]]

describe("rmqlua test validates the script as check does", function()
  it("rejects an unknown option with file:line (exit 2), like check", function()
    local d = helpers.tmpdir("fm")
    local script = write(d, "typo.lua", "return {\n  consumer_group = 'g',\n  subscribe = { T = '*' },\n"
      .. "  consume_thred_min = 4,\n  consume = function() end,\n}\n")
    local cases = write(d, "cases.lua", "return { { name = 'a', messages = { { body = 'x' } } } }\n")
    local rc, out = rmqlua("check " .. script)
    assert.are.equal(2, rc, out)
    assert.matches(esc(script) .. ":4: unknown option", out)
    refused_with_hint("test " .. script .. " " .. cases,
      esc(script) .. ":4: unknown option \"consume_thred_min\"", "did you mean consume_thread_min")
  end)

  it("applies checkConfig's ranges (exit 2)", function()
    local d = helpers.tmpdir("fm")
    local script = write(d, "range.lua", "return { consumer_group = 'g', subscribe = { T = '*' },\n"
      .. "  pull_batch_size = 5000, consume = function() end }\n")
    local cases = write(d, "cases.lua", "return { { name = 'a', messages = { { body = 'x' } } } }\n")
    rh.expect_pattern(rmqlua, "test " .. script .. " " .. cases, 2,
      esc(script) .. ":2: option pull_batch_size = 5000 is out of range")
  end)

  it("rejects an unknown key in a case's expectations, naming the line and the known keys", function()
    local d = helpers.tmpdir("fm")
    local script = write(d, "good.lua", GOOD)
    local cases = write(d, "cases.lua", "return {\n  { name = 'ok', messages = { { body = 'x' } },\n"
      .. "    expect = { status = 'SUCCESS' } },\n  { name = 'typo', messages = { { body = 'y' } },\n"
      .. "    expect = { stauts = 'RECONSUME_LATER' } },\n}\n")
    refused_with_hint("test " .. script .. " " .. cases,
      esc(cases) .. ":5: case 'typo': unknown key 'stauts' in expect", "did you mean status?")
  end)

  it("rejects unknown keys in a case, a message and a sent entry", function()
    local d = helpers.tmpdir("fm")
    local script = write(d, "good.lua", GOOD)
    local bad = {
      { "{ name = 'c', mesages = {} }", "unknown key 'mesages' in the case" },
      { "{ name = 'c', messages = { { bdy = 'x' } } }", "unknown key 'bdy' in messages%[1%]" },
      { "{ name = 'c', messages = { { body = 'x' } }, expect = { sent = { { topik = 'x' } } } }",
        "unknown key 'topik' in expect%.sent%[1%]" },
    }
    for i, c in ipairs(bad) do
      local cases = write(d, "bad" .. i .. ".lua", "return {\n  " .. c[1] .. ",\n}\n")
      local rc, out = rmqlua("test " .. script .. " " .. cases)
      assert.are.equal(2, rc, out)
      assert.matches(esc(cases) .. ":2: case 'c': " .. c[2], out)
    end
  end)

  it("reports a syntax error in the script or the cases file as file:line, without a traceback", function()
    local d = helpers.tmpdir("fm")
    local good = write(d, "good.lua", GOOD)
    local bad = write(d, "syn.lua", "return {\n  consumer_group = 'g'\n  subscribe = { T = '*' },\n}\n")
    local cases = write(d, "cases.lua", "return { { name = 'a', messages = { { body = 'x' } } } }\n")
    local bad_cases = write(d, "cases_syn.lua", "return {\n  { name = 'a' \n  { name = 'b' },\n}\n")
    local rc, out = rmqlua("test " .. bad .. " " .. cases)
    assert.are.equal(2, rc, out)
    assert.matches(esc(bad) .. ":3: '}' expected", out)
    assert.is_nil(out:find("traceback"), out)
    assert.is_nil(out:find("testrun.lua", 1, true), out)
    rc, out = rmqlua("test " .. good .. " " .. bad_cases)
    assert.are.equal(2, rc, out)
    assert.matches(esc(bad_cases) .. ":3: '}' expected", out)
    assert.is_nil(out:find("traceback"), out)
    rc, out = rmqlua("test " .. good .. " " .. d .. "/none.lua")
    assert.are.equal(2, rc, out)
    assert.are.equal(1, count(out, d .. "/none.lua"), out)
    assert.is_nil(out:find("traceback"), out)
  end)

  it("gives every test message its own msg_id (unless the case sets one)", function()
    local d = helpers.tmpdir("fm")
    local script = write(d, "good.lua", GOOD)
    local cases = write(d, "cases.lua", [[
return {
  { name = "three", messages = { { body = "a" }, { body = "b" }, { body = "c" } },
    expect = { status = "SUCCESS", error = false } },
  { name = "three more", messages = { { body = "a" }, { body = "b" }, { body = "c" } },
    expect = { status = "SUCCESS", error = false } },
  { name = "given ids", messages = { { body = "a", msg_id = "MINE1" }, { body = "b", msg_id = "MINE1" } },
    expect = { error = "msg_id MINE1 seen twice" } },
}
]])
    rh.expect_pattern(rmqlua, "test " .. script .. " " .. cases, 0, "3 case%(s%), 0 failed")
  end)
end)

describe("messages for the usual mistakes", function()
  it("run without a name server says how to give one", function()
    local rc, out = rmqlua("run " .. example("hello"))
    assert.are.equal(2, rc, out)
    for _, way in ipairs({ "--namesrv", "NAMESRV_ADDR", "namesrv_addr", "--embedded" }) do
      assert.matches(way, out, 1, true)
    end
  end)

  it("an option out of range names the option, the value and the allowed range, then Java's words", function()
    local rc, out = rmqlua("check --set consume_thread_min=0 " .. example("hello"))
    assert.are.equal(2, rc, out)
    assert.matches("option consume_thread_min = 0 is out of range (allowed: 1..1000)", out, 1, true)
    assert.matches("consumeThreadMin Out of range [1, 1000]", out, 1, true)
    rc, out = rmqlua("check --set pull_threshold_for_topic=0 " .. example("hello"))
    assert.are.equal(2, rc, out)
    assert.matches("option pull_threshold_for_topic = 0 is out of range (allowed: -1 (off) or 1..6553500)",
      out, 1, true)
    -- an option Java does not check
    rh.expect(rmqlua, "check --set frame_max_length=10 " .. example("hello"), 2,
      "option frame_max_length = 10 is out of range (allowed: >= 1024)")
  end)

  it("a missing script file is named once", function()
    local d = helpers.tmpdir("fm")
    for _, cmd in ipairs({ "run --embedded", "check" }) do
      local rc, out = rmqlua(cmd .. " " .. d .. "/nope.lua")
      assert.are.equal(2, rc, out)
      assert.are.equal(1, count(out, d .. "/nope.lua"), out)
      assert.matches("No such file or directory", out, 1, true)
    end
  end)
end)

describe("the examples with --embedded", function()
  it("json: the sample orders are decoded, filtered and totalled (4 threads, whole lines)", function()
    local rc, out, err = embedded("--sample-messages 400 --max-messages 400 " .. example("json"))
    assert.are.equal(0, rc, err)
    local orders = 0
    for _, l in ipairs(lines(out)) do
      assert.matches("^order %d+ customer c%d amount %d+%.%d%d total %d+%.%d%d$", l)
      orders = orders + 1
    end
    -- about half the amounts are under min_amount (10) and skipped
    assert.is_true(orders > 100 and orders < 300, "orders printed: " .. orders)
    assert.matches("customer c%d total", err)
  end)

  it("allocate: every line whole with 20 consume threads", function()
    local rc, out, err = embedded("--sample-messages 3000 --max-messages 3000 " .. example("allocate"))
    assert.are.equal(0, rc, err)
    local n = 0
    for _, l in ipairs(lines(out)) do
      if not l:find("^assigned ") then
        assert.matches('^queue %d+ offset %d+ body {"id":%d+,[^{}]*}$', l)
        n = n + 1
      end
    end
    assert.are.equal(3000, n)
  end)

  it("retry: 'fail' comes back once, 'dlq' goes to the DLQ, 'poison' is retried (whole lines)", function()
    local d = helpers.tmpdir("retry")
    local out, errf, rcf = d .. "/out", d .. "/err", d .. "/rc"
    local pid = helpers.spawn(string.format("sh -c 'exec %s run --embedded --sample-messages 100 %s 2> %s'",
      helpers.bin, example("retry"), errf), { log = out, rc = rcf })
    local function text() return rh.read(out) end
    helpers.wait_until(function() return text():find("reconsume_times=1 body=[^\n]*fail") end, 60,
      "a 'fail' message back once")
    helpers.wait_until(function() return text():find("reconsume_times=2 body=[^\n]*poison") end, 60,
      "the poison message retried twice")
    helpers.kill(pid, "INT")
    assert.are.equal(0, exit_code(rcf))
    for _, l in ipairs(lines(text())) do
      assert.matches("^got %x+ reconsume_times=%d body={[^{}]*}$", l)
    end
    assert.matches("body=[^\n]*dlq", text())
    local final = helpers.read_file(errf):match("[^\n]*stopped after[^\n]*")
    assert.truthy(final, helpers.read_file(errf))
    assert.matches("dlq 1", final)
    assert.matches("retried [1-9]", final)
  end)

  it("forward: the status line counts the sends", function()
    local rc, _, err = embedded("--sample-messages 20 --max-messages 20 " .. example("forward"))
    assert.are.equal(0, rc, err)
    local final = err:match("[^\n]*stopped after[^\n]*")
    assert.truthy(final, err)
    assert.matches("consumed 20", final)
    assert.matches("sent 20", final)
  end)

  it("--sample-body text and FILE, and a clear error for a missing FILE", function()
    local rc, out, err = embedded("--sample-body text --sample-messages 3 --max-messages 3 "
      .. example("hello"))
    assert.are.equal(0, rc, err)
    assert.matches("keys=sample%-1 body=sample message 1\n", out)
    local d = helpers.tmpdir("bodies")
    local f = write(d, "bodies.txt", "first body\nsecond body\n")
    rc, out, err = embedded("--sample-body " .. f .. " --sample-messages 3 --max-messages 3 "
      .. example("hello"))
    assert.are.equal(0, rc, err)
    assert.matches("keys=sample%-1 body=first body\n", out)
    assert.matches("keys=sample%-2 body=second body\n", out)
    assert.matches("keys=sample%-3 body=first body\n", out)
    rc, out, err = embedded("--sample-body " .. d .. "/none.txt " .. example("hello"))
    assert.are.equal(2, rc, err)
    assert.matches("--sample-body", err, 1, true)
    assert.are.equal(1, count(err, d .. "/none.txt"), err)
  end)
end)

describe("the test suite offline", function()
  for _, spec in ipairs({ "ali_ons_spec.lua", "ali_ons_acl_spec.lua" }) do
    it("skips the ali-ons interop spec " .. spec .. " with RMQ_SKIP_INTEROP=1, without npm", function()
      -- npm pointed at nothing: were the specs to run, npm ci would fail on a fresh checkout.
      local rc, out = helpers.run("cd " .. helpers.shq(helpers.root) .. " && RMQ_SKIP_INTEROP=1 "
        .. "npm_config_registry=http://127.0.0.1:9/ scripts/busted spec/02-integration/05-interop/"
        .. spec)
      assert.are.equal(0, rc, out)
      assert.matches("0 successes / 0 failures / 0 errors / 1 pending", out, 1, true)
      assert.matches("RMQ_SKIP_INTEROP=1", out, 1, true)
    end)
  end
end)
