-- What every file of examples/ owes its reader, checked for each one found there (a new example
-- is held to it without editing this spec): it starts with what it shows and how to run it
-- (against a name server, on the embedded broker, and its offline cases), it has offline cases in
-- examples/cases/ that `rmqlua test` passes, and `rmqlua check` passes it with strict_globals.
-- The examples that stop by themselves after --max-messages print whole lines on --embedded,
-- one record each, with 20 consume threads writing at once.
local helpers = require "helpers"
local rh = require "run_helpers"

local dir = helpers.root .. "/examples"

local function lua_files(d)
  local out = {}
  local p = io.popen("ls " .. helpers.shq(d))
  for f in p:lines() do
    local n = f:match("^(.+)%.lua$")
    if n then out[#out + 1] = n end
  end
  p:close()
  table.sort(out)
  return out
end

-- The comment block a file opens with.
local function header(path)
  local t = {}
  for line in (helpers.read_file(path) .. "\n"):gmatch("([^\n]*)\n") do
    if not line:match("^%-%-") then break end
    t[#t + 1] = line
  end
  return table.concat(t, "\n")
end

local function has(text, s) return text:find(s, 1, true) ~= nil end

describe("examples/", function()
  local names = lua_files(dir)

  it("holds examples, each with its cases file, and no cases file without an example", function()
    assert.is_true(#names >= 9, "examples found: " .. #names)
    local set = {}
    for _, n in ipairs(names) do set[n] = true end
    for _, n in ipairs(lua_files(dir .. "/cases")) do
      assert.is_true(set[n] == true, "examples/cases/" .. n .. ".lua has no examples/" .. n .. ".lua")
    end
  end)

  for _, n in ipairs(names) do
    local ex, cases = dir .. "/" .. n .. ".lua", dir .. "/cases/" .. n .. ".lua"

    it(n .. ".lua starts with what it shows and how to run it", function()
      local h = header(ex)
      assert.matches("^%-%- " .. n:gsub("%p", "%%%0") .. "%.lua: %S", h)
      assert.is_true(has(h, "rmqlua run examples/" .. n .. ".lua"), n .. ": no `rmqlua run` line")
      assert.is_true(has(h, "--embedded"), n .. ": no `--embedded` line")
      local test = "rmqlua test examples/" .. n .. ".lua examples/cases/" .. n .. ".lua"
      assert.is_true(has(h, test), n .. ": no `" .. test .. "` line")
      assert.is_true(has(header(cases), test), "cases/" .. n .. ".lua does not say how it runs")
    end)

    -- The ones that consume every sample message (the others choose, delay or hold some).
    local stops = { hello = true, json = true, retry = true, allocate = true, forward = true,
      throttle = true }
    if stops[n] then
      it(n .. ".lua prints whole lines on --embedded", function()
        local rc, out, err = rh.embedded("--sample-messages 40 --max-messages 40 " .. ex)
        assert.are.equal(0, rc, err)
        local lines = 0
        for line in out:gmatch("[^\n]+") do
          lines = lines + 1
          -- Two writes run together would show a second record's first word inside the line.
          local first = line:match("^%S+")
          assert.is_nil(line:find(first, #first + 1, true), "interleaved: " .. line)
        end
        assert.is_true(lines > 0, n .. " printed nothing on stdout")
      end)
    end

    it(n .. ".lua passes check (strict_globals) and its offline cases", function()
      local rc, out = rh.rmqlua("check --set strict_globals=true " .. ex)
      assert.are.equal(0, rc, out)
      rc, out = rh.rmqlua("test " .. ex .. " " .. cases)
      assert.are.equal(0, rc, out)
      assert.matches("case%(s%), 0 failed", out)
    end)
  end
end)
