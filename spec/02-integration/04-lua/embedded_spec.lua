-- `rmqlua run --embedded`: the in-process development broker, the sample producer and a script
-- consuming, as the README's first command runs it.
local helpers = require "helpers"

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

  it("rejects a bad --max-messages value", function()
    local rc, out = helpers.run(helpers.bin .. " run --embedded --max-messages x "
      .. helpers.root .. "/examples/hello.lua")
    assert.are.equal(2, rc)
    assert.matches("--max-messages needs a number", out, 1, true)
  end)
end)
