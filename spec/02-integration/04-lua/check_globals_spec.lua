-- rmqlua check and globals: every assignment to a global in the script or in a module it loads
-- from its folder is reported with its file and line (a forgotten `local` keeps its value in the
-- thread's Lua state from batch to batch); a warning, or with strict_globals = true an error.
local rh = require "run_helpers"

local tmpdir, write = rh.script_dir("check-globals")
local rmqlua = rh.rmqlua

-- `rmqlua check ARGS`: asserts its exit code is rc; returns its output.
local function check(args, rc)
  local got, out = rmqlua("check " .. args)
  assert.are.equal(rc, got, out)
  return out
end

local LEAKY = [[
local util = require "leaky_util"
local total = 0
return {
  consumer_group = "leaky",
  subscribe = { T = "*" },
  consume = function(msgs, ctx)
    for i = 1, #msgs do
      count = i
    end
    total = total + util.bump(#msgs)
  end,
}
]]

local UTIL = [[
local M = {}
function M.bump(n)
  last_n = n
  return n
end
return M
]]

local CLEAN = [[
local seen = 0
return {
  consumer_group = "clean",
  subscribe = { T = "*" },
  consume = function(msgs) seen = seen + #msgs end,
}
]]

describe("rmqlua check: globals", function()
  lazy_setup(function()
    write("leaky_util.lua", UTIL)
    write("leaky.lua", LEAKY)
    write("strict.lua", (LEAKY:gsub('consumer_group = "leaky",',
      'consumer_group = "leaky",\n  strict_globals = true,')))
    write("clean.lua", CLEAN)
  end)

  it("warns about each global a handler or a module of its folder assigns, with file and line",
    function()
    local out = check(tmpdir .. "/leaky.lua", 0)
    local dir = tmpdir:gsub("%p", "%%%0")
    assert.matches(dir .. "/leaky.lua:8: warning: assigns the global 'count'", out)
    assert.matches(dir .. "/leaky_util.lua:3: warning: assigns the global 'last_n'", out)
    assert.matches("ok %(consumer_group leaky", out)
    assert.is_nil(out:find("'total'", 1, true), out) -- an upvalue, not a global
  end)

  it("says nothing about a script that assigns no global", function()
    local out = check(tmpdir .. "/clean.lua", 0)
    assert.is_nil(out:find("assigns the global", 1, true), out)
  end)

  it("fails (exit 2) with strict_globals = true in the script", function()
    local out = check(tmpdir .. "/strict.lua", 2)
    assert.matches("strict.lua:9: error: assigns the global 'count'", out)
    assert.matches("leaky_util.lua:3: error: assigns the global 'last_n'", out)
    assert.is_nil(out:find(": ok (", 1, true), out)
  end)

  it("fails (exit 2) with --set strict_globals=true, and passes a clean script", function()
    local out = check("--set strict_globals=true " .. tmpdir .. "/leaky.lua", 2)
    assert.matches("leaky.lua:8: error: assigns the global 'count'", out)
    check("--set strict_globals=true " .. tmpdir .. "/clean.lua", 0)
  end)
end)
