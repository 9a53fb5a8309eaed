-- The specs clean up after themselves: busted 2.x keeps only the last finally() of an `it`, so a
-- spec registers cleanups with helpers.defer (which calls finally once for all of them), and
-- writes temporary files under $TMPDIR (helpers.tmpdir / file_tmpdir), which scripts/busted
-- checks and removes. Processes left running fail the run in scripts/busted itself.
local helpers = require "helpers"

local function spec_files()
  local out = {}
  local p = io.popen("cd " .. helpers.shq(helpers.root) .. " && find spec -name '*.lua' | sort")
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  return out
end

-- What offending(path) lists for each spec file not in skip, in one list.
local function offenders(skip, offending)
  local bad = {}
  for _, f in ipairs(spec_files()) do
    if not skip[f] then
      for _, b in ipairs(offending(f)) do bad[#bad + 1] = b end
    end
  end
  return bad
end

describe("spec hygiene", function()
  it("finds the spec files", function()
    assert.is_true(#spec_files() > 20)
  end)

  it("no spec calls finally() directly (helpers.defer collects cleanups)", function()
    local skip = { ["spec/helpers.lua"] = true, ["spec/01-unit/spec_hygiene_spec.lua"] = true }
    assert.same({}, offenders(skip, function(f)
      local bad, n = {}, 0
      for line in io.lines(helpers.root .. "/" .. f) do
        n = n + 1
        local code = line:gsub("%-%-.*$", "")
        if code:find("%f[%w_.]finally%s*%(") then bad[#bad + 1] = f .. ":" .. n end
      end
      return bad
    end))
  end)

  it("no spec writes into the source tree's spec/.tmp", function()
    assert.same({}, offenders({ ["spec/01-unit/spec_hygiene_spec.lua"] = true }, function(f)
      return helpers.read_file(helpers.root .. "/" .. f):find("spec/.tmp", 1, true) and { f } or {}
    end))
  end)

  it("helpers.defer runs every cleanup of a test, newest first, even after one fails", function()
    local order = {}
    helpers.run_deferred() -- nothing pending from elsewhere
    assert.is_true(helpers.defer(function() order[#order + 1] = 1 end))
    helpers.defer(function() error("boom") end)
    helpers.defer(function() order[#order + 1] = 3 end)
    local ok, err = pcall(helpers.run_deferred)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("boom", 1, true))
    assert.same({ 3, 1 }, order)
  end)
end)
