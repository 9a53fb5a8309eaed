-- The push consumer engine's files (runtime/consumer/) call each other in no circle of more than
-- 4 of them: the parts get what they need from lower files (instance.c, queue.c, routes.c,
-- direct.c) and make a higher one act through the consumer's hooks, not by calling up into
-- client.c or rebalance.c (consumer_int.h, "the files of the engine"). The circles are the ones
-- scripts/check_layers --graph prints (strongly connected components of the file-level call
-- graph); a circle that also holds files of another folder counts its consumer/ files.
local helpers = require "helpers"

describe("consumer/ call graph", function()
  it("has no circle of more than 4 consumer/ files", function()
    local rc, out = helpers.run("python3 " .. helpers.shq(helpers.root .. "/scripts/check_layers")
                                .. " --graph")
    -- check_layers exits 1 while any fault of another folder is left; the graph is printed anyway.
    assert.is_true(rc == 0 or rc == 1, out)
    assert.is_truthy(out:find("layer %d+ consumer/"), "no graph in:\n" .. out)
    local wide = {}
    for line in out:gmatch("[^\n]+") do
      local files = line:match("^circle %(%d+ files%): (.*)$")
      if files then
        local n = 0
        for _ in files:gmatch("consumer/%S+") do n = n + 1 end
        if n > 4 then wide[#wide + 1] = line end
      end
    end
    assert.are.same({}, wide)
  end)
end)
