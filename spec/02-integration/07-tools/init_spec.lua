-- rmqlua init DIR: what it writes passes `rmqlua check` and `rmqlua test`, consumes the sample
-- messages under `rmqlua run --embedded`, and no existing file is ever overwritten.
local helpers = require "helpers"
local rh = require "run_helpers"

local shq = helpers.shq

local function init(args) return rh.rmqlua("init " .. args) end

describe("rmqlua init", function()
  it("writes a script, its test cases, an environment file and a README that check, test and run",
    function()
      local d = helpers.tmpdir("init") .. "/orders"
      local rc, out = init("--group orders_g --topic Orders " .. shq(d))
      assert.equals(0, rc, out)
      for _, f in ipairs({ "orders.lua", "orders_cases.lua", "orders.env", "README.md" }) do
        assert.matches("wrote " .. d:gsub("%p", "%%%0") .. "/" .. f:gsub("%p", "%%%0"), out)
      end
      local script = rh.read(d .. "/orders.lua")
      assert.matches('consumer_group = "orders_g"', script, 1, true)
      assert.matches('subscribe = { ["Orders"] = "*" }', script, 1, true)
      assert.matches("\nNAMESRV_ADDR=[^\n]+\nRMQLUA_ARGS=", rh.read(d .. "/orders.env"))
      assert.matches("systemctl enable %-%-now rmqlua@orders", rh.read(d .. "/README.md"))

      rc, out = rh.rmqlua("check " .. shq(d .. "/orders.lua"))
      assert.equals(0, rc, out)
      assert.matches("ok %(consumer_group orders_g, 1 subscription", out)

      rc, out = rh.rmqlua("test " .. shq(d .. "/orders.lua") .. " " .. shq(d .. "/orders_cases.lua"))
      assert.equals(0, rc, out)
      assert.matches("2 case%(s%), 0 failed", out)

      local stdout, stderr
      rc, stdout, stderr = rh.embedded("--sample-messages 12 --max-messages 12 "
        .. shq(d .. "/orders.lua"))
      assert.equals(0, rc, stderr)
      local n = 0
      for line in stdout:gmatch("[^\n]+") do
        assert.matches("^%x+ Orders#%d+@%d+ keys=sample%-%d+ body={", line)
        n = n + 1
      end
      assert.equals(12, n, stdout)
      assert.matches("consumed 12 ", stderr)
    end)

  it("names the group after DIR and subscribes to TopicTest by default", function()
    local d = helpers.tmpdir("init") .. "/billing/"
    local rc, out = init(shq(d))
    assert.equals(0, rc, out)
    local script = rh.read(d .. "billing.lua")
    assert.matches('consumer_group = "billing_group"', script, 1, true)
    assert.matches('subscribe = { ["TopicTest"] = "*" }', script, 1, true)
  end)

  it("refuses to overwrite: one existing file and nothing is written", function()
    local d = helpers.tmpdir("init") .. "/pay"
    assert.equals(0, os.execute("mkdir " .. shq(d)))
    rh.write(d, "README.md", "mine\n")
    local rc, out = init(shq(d))
    assert.equals(2, rc, out)
    assert.matches(d:gsub("%p", "%%%0") .. "/README%.md exists; nothing written", out)
    assert.equals("mine\n", rh.read(d .. "/README.md"))
    assert.is_nil(io.open(d .. "/pay.lua"))
    assert.is_nil(io.open(d .. "/pay_cases.lua"))
    assert.is_nil(io.open(d .. "/pay.env"))

    -- A second init over a complete one names every file and leaves them as they were.
    local e = helpers.tmpdir("init") .. "/again"
    assert.equals(0, (init(shq(e))))
    rh.write(e, "again.lua", "-- edited\n")
    rc, out = init("--topic Other " .. shq(e))
    assert.equals(2, rc, out)
    for _, f in ipairs({ "again.lua", "again_cases.lua", "again.env", "README.md" }) do
      assert.matches("/" .. f:gsub("%p", "%%%0") .. " exists", out)
    end
    assert.equals("-- edited\n", rh.read(e .. "/again.lua"))
  end)

  it("rejects bad names, unknown flags and a missing DIR, naming the fault", function()
    local base = helpers.tmpdir("init")
    local cases = {
      { "--topic 'a b' " .. shq(base .. "/x"), "%-%-topic 'a b': a name is 1 to 127" },
      { "--group '' " .. shq(base .. "/x"), "%-%-group '': a name is" },
      { "--group", "%-%-group needs a value" },
      { "--frobnicate " .. shq(base .. "/x"), "unknown option %-%-frobnicate" },
      { "", "DIR is missing" },
      { shq(base .. "/x") .. " " .. shq(base .. "/y"), "one DIR only" },
      { shq(base .. "/has.dot"), "DIR '.*has%.dot': its last component names the consumer" },
    }
    for _, c in ipairs(cases) do
      local rc, out = init(c[1])
      assert.equals(2, rc, c[1] .. ": " .. out)
      assert.matches("rmqlua init: " .. c[2], out)
    end
    -- None of them made a folder.
    local _, ls = helpers.run("ls -A " .. shq(base))
    assert.equals("", ls)
  end)

  it("says where it cannot write", function()
    local base = helpers.tmpdir("init")
    rh.write(base, "file", "")
    local rc, out = init(shq(base .. "/file/sub"))
    assert.equals(1, rc, out)
    assert.matches("cannot make .*/file/sub: Not a directory", out)
  end)
end)
