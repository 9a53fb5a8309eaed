-- scripts/check_layers: the layering check CI runs over runtime/. Fed small trees with one fault
-- each, it must fail naming the file, the line and the two layers; fed a clean tree (and this
-- repository), it must pass.
local helpers = require "helpers"

local check = helpers.root .. "/scripts/check_layers"

-- A tree under a fresh temp folder: files is { ["runtime/base/a.c"] = text, ... }.
local function tree(files)
  local root = helpers.tmpdir("layers")
  for path, text in pairs(files) do
    local dir = path:match("^(.*)/[^/]+$")
    assert(os.execute("mkdir -p " .. helpers.shq(root .. "/" .. dir)) == 0)
    local f = assert(io.open(root .. "/" .. path, "w"))
    f:write(text)
    f:close()
  end
  return root
end

local function run(root)
  return helpers.run(helpers.shq(check) .. " --root " .. helpers.shq(root))
end

-- A small clean house: protocol uses base, consumer uses both, luahost uses consumer.
local function clean()
  return {
    ["runtime/include/rmqlua_ffi.h"] = "int rmq_ffi_abi_version(void);\n",
    ["runtime/base/common.h"] = "int rmq__xcount(int n);\n",
    ["runtime/base/common.c"] = '#include "common.h"\nint rmq__xcount(int n)\n{\n    return n;\n}\n',
    ["runtime/protocol/cmd.c"] = '#include "base/common.h"\n#include "rmqlua_ffi.h"\n' ..
      "int rmq__cmd_size(int n)\n{\n    return rmq__xcount(n);\n}\n",
    ["runtime/consumer/client.c"] = '#include "base/common.h"\n' ..
      "int rmq__cmd_size(int n);\nint rmq__client_run(int n)\n{\n    return rmq__cmd_size(n);\n}\n",
    ["runtime/luahost/pool.c"] = "int rmq__client_run(int n);\n" ..
      "static int helper(int n) { return n; }\n" ..
      "int rmq__pool_start(int n)\n{\n    return rmq__client_run(helper(n));\n}\n",
  }
end

-- check_layers over the clean house with changes made (path -> text; false removes the file):
-- its exit code and output.
local function run_with(changes)
  local files = clean()
  for path, text in pairs(changes) do files[path] = text or nil end
  return run(tree(files))
end

-- check_layers over the clean house with changes made exits 0.
local function passes_with(changes)
  local rc, out = run_with(changes)
  assert.are.equal(0, rc, out)
end

-- check_layers over the clean house with changes made exits 1, its output matching each of
-- the patterns.
local function fails_with(changes, ...)
  local rc, out = run_with(changes)
  assert.are.equal(1, rc, out)
  for _, pattern in ipairs({ ... }) do assert.matches(pattern, out) end
end

describe("scripts/check_layers", function()
  it("passes a clean tree", function()
    local rc, out = run(tree(clean()))
    assert.are.equal(0, rc, out)
    assert.matches("no fault", out)
  end)

  it("passes this repository", function()
    local rc, out = helpers.run(helpers.shq(check))
    assert.are.equal(0, rc, out)
  end)

  it("fails on an include that goes up a layer, naming file, line and both layers", function()
    fails_with({
      ["runtime/consumer/conf.h"] = "int rmq__conf_x(void);\n",
      ["runtime/net/tls.c"] = '#include "base/common.h"\n\n#include "consumer/conf.h"\n',
    }, 'runtime/net/tls%.c:3: includes "consumer/conf%.h": net %(layer 3%) may not ' ..
      'use consumer %(layer 5, above it%)')
  end)

  it("passes a plain include of a header of the same folder", function()
    passes_with({
      ["runtime/base/log.h"] = "void rmq__log(void);\n",
      ["runtime/base/log.c"] = '#include "log.h"\n#include "common.h"\nvoid rmq__log(void)\n{\n}\n',
    })
  end)

  it("fails on a call of a function of a higher folder, with no include at all", function()
    fails_with({
      ["runtime/consumer/rebalance.c"] = "int rmq__pool_start(int n);\n\n" ..
        "int rmq__rb_run(int n)\n{\n    return rmq__pool_start(n);\n}\n",
    }, "runtime/consumer/rebalance%.c:5: uses rmq__pool_start%(%) of " ..
      "runtime/luahost/pool%.c: consumer %(layer 5%) may not use luahost %(layer 6, above it%)")
  end)

  it("fails on a use sideways between devbroker/ and consumer/, and from devbroker/ to producer/", function()
    fails_with({
      ["runtime/devbroker/broker.c"] = '#include "consumer/client.h"\n' ..
        "int rmq__client_run(int n);\nint rmq__db_x(int n)\n{\n    return rmq__client_run(n);\n}\n",
      ["runtime/consumer/client.h"] = "int rmq__client_run(int n);\n",
      ["runtime/producer/producer.c"] = "int rmq__producer_send(int n)\n{\n    return n;\n}\n",
      ["runtime/devbroker/store.c"] = "int rmq__producer_send(int n);\n" ..
        "int rmq__db_store(int n)\n{\n    return rmq__producer_send(n);\n}\n",
    }, 'runtime/devbroker/broker%.c:1: includes "consumer/client%.h": devbroker and ' ..
      "consumer are side by side %(layer 5%): neither may use the other",
      "runtime/devbroker/broker%.c:5: uses rmq__client_run%(%)",
      "runtime/devbroker/store%.c:4: uses rmq__producer_send%(%) of " ..
      "runtime/producer/producer%.c: devbroker %(layer 5%) may not use producer %(layer 4%)")
  end)

  it("ignores names in comments and strings", function()
    passes_with({
      ["runtime/base/common.c"] = '#include "common.h"\n/* rmq__pool_start(1) */\n' ..
        'int rmq__xcount(int n)\n{\n    const char *s = "rmq__client_run(n)";\n    return n + (s != 0);\n}\n',
    })
  end)

  it("fails on a circle wider than 4 files inside consumer/, listing its files", function()
    local files = {}
    local names = { "a", "b", "c", "d", "e" }
    for i, n in ipairs(names) do
      local nxt = names[i % #names + 1]
      files["runtime/consumer/" .. n .. ".c"] = string.format(
        "int rmq__c_%s(int n);\nint rmq__c_%s(int n)\n{\n    return n ? rmq__c_%s(n - 1) : 0;\n}\n",
        nxt, n, nxt)
    end
    fails_with(files, "a circle of 5 files inside consumer/ %(at most 4%): a%.c b%.c c%.c d%.c e%.c")
    -- Four files in a circle are allowed.
    files["runtime/consumer/e.c"] = false
    files["runtime/consumer/d.c"] =
      "int rmq__c_a(int n);\nint rmq__c_d(int n)\n{\n    return n ? rmq__c_a(n - 1) : 0;\n}\n"
    passes_with(files)
  end)

  it("fails on a circle across two folders even when each use alone goes down", function()
    -- base calls up into protocol: reported as a use going up and as a circle across folders.
    fails_with({
      ["runtime/base/common.c"] = '#include "common.h"\nint rmq__cmd_size(int n);\n' ..
        "int rmq__xcount(int n)\n{\n    return n > 1 ? rmq__cmd_size(n - 1) : n;\n}\n",
    }, "runtime/base/common%.c:5: uses rmq__cmd_size%(%) of runtime/protocol/cmd%.c: " ..
      "base %(layer 1%) may not use protocol %(layer 2, above it%)",
      "a circle across folders base and protocol")
  end)

  it("fails on a source file over 1,500 lines, a file outside the folders and an unknown folder", function()
    fails_with({
      ["runtime/protocol/big.c"] = string.rep("int x;\n", 1501),
      ["runtime/stray.c"] = "int y;\n",
      ["runtime/misc/z.c"] = "int z;\n",
    }, "runtime/protocol/big%.c:1501: 1501 lines, over the limit of 1500",
      "runtime/stray%.c:1: a source file outside the layer folders",
      "runtime/misc/: a folder that is no layer", "check_layers: 3 fault%(s%)")
  end)
end)
