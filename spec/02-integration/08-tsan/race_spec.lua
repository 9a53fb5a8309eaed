-- The ThreadSanitizer step can fail: a small C program with a deliberate data race
-- (spec/c/tsan_race.c), run with the TSAN_OPTIONS every test of the TSan build runs with, is
-- reported and stops with TSan's exit code; the same program with the flag made atomic runs
-- clean. Only the TSan build (RMQ_TSAN=ON) builds the program; elsewhere this is pending.
local helpers = require "helpers"

local prog = os.getenv("RMQ_TSAN_RACE")

describe("ThreadSanitizer step", function()
  if not prog then
    it("needs the TSan build", function() pending("not a ThreadSanitizer build (RMQ_TSAN)") end)
    return
  end

  it("runs with the options that make a race fail the run", function()
    local opts = os.getenv("TSAN_OPTIONS") or ""
    assert.truthy(opts:find("halt_on_error=1", 1, true), opts)
    assert.truthy(opts:find("suppressions=", 1, true), opts)
  end)

  it("reports a deliberate data race and fails", function()
    local rc, out = helpers.run(helpers.shq(prog) .. " race")
    assert.truthy(out:find("WARNING: ThreadSanitizer: data race", 1, true), out)
    -- Both sides of the race are named: the poller's read and main's write.
    assert.truthy(out:find("poller", 1, true), out)
    assert.truthy(out:find("in main", 1, true), out)
    assert.are_not.equal(0, rc)
    -- halt_on_error: the program stops at the report, before it would have finished.
    assert.falsy(out:find("done", 1, true), out)
  end)

  it("stays silent once the flag is a C11 atomic", function()
    local rc, out = helpers.run(helpers.shq(prog) .. " atomic")
    assert.falsy(out:find("ThreadSanitizer", 1, true), out)
    assert.equal(0, rc, out)
    assert.truthy(out:find("tsan_race: atomic: done", 1, true), out)
  end)
end)
