-- lua/types/rmq.lua, the lua-language-server definitions shipped for editors, never goes stale: it is
-- what scripts/gen_types makes from the option table, and it defines exactly what the rmq module
-- of a running script holds, every hook a script may define, every field of a message view.
local helpers = require "helpers"
local rh = require "run_helpers"

local shq = helpers.shq

local function types() return helpers.read_file(helpers.root .. "/lua/types/rmq.lua") end

-- The ---@field names of class cls in text.
local function class_fields(text, cls)
  local body = text:match("\n%-%-%-@class " .. cls:gsub("%p", "%%%0") .. "\n(.-)\n[^%-]")
  assert.is_not_nil(body, "no class " .. cls)
  local t = {}
  for name in body:gmatch("%-%-%-@field ([%w_]+)") do t[name] = true end
  return t
end

local keys = helpers.sorted_keys

describe("lua/types/rmq.lua", function()
  it("is what scripts/gen_types prints from the option table", function()
    local rc, out = helpers.run(shq(helpers.root .. "/scripts/gen_types") .. " "
      .. shq(helpers.lib_path) .. " 2>/dev/null")
    assert.equals(0, rc)
    assert.are.equal(out, types(),
      "lua/types/rmq.lua is stale: run scripts/gen_types > lua/types/rmq.lua")
  end)

  it("gives rmq.Script every option of the table with its type and default", function()
    local ffi = require "ffi"
    ffi.cdef "size_t rmq_conf_describe_markdown(char *out, size_t out_size);"
    local lib = helpers.lib()
    local n = tonumber(lib.rmq_conf_describe_markdown(nil, 0))
    local buf = ffi.new("char[?]", n + 1)
    lib.rmq_conf_describe_markdown(buf, n + 1)
    local text = types()
    local fields = class_fields(text, "rmq.Script")
    local count = 0
    for name, typ, default in ffi.string(buf, n):gmatch("\n| `([%w_]+)` | (%w+) | ([^|]-) |") do
      count = count + 1
      local line = text:match("\n%-%-%-@field " .. name .. "%? ([^\n]+)")
      assert.is_not_nil(line, name)
      local want = ({ bool = "^boolean ", int = "^integer ", int64 = "^integer|string ",
        string = "^string ", enum = '^["s]' })[typ]
      assert.matches(want, line, nil, false, name)
      assert.matches(" default " .. default:gsub("`", ""):gsub("&lt;", "<"):gsub("&gt;", ">")
        :gsub("%p", "%%%0") .. " ", line)
      fields[name] = nil
    end
    assert.truthy(count > 50)
    -- What is left is the script's own keys: subscribe, shared and the hooks.
    local hooks = require("rmq.script").HOOKS
    local rest = { subscribe = true, shared = true }
    for h in pairs(hooks) do rest[h] = true end
    assert.same(keys(rest), keys(fields))
  end)

  it("defines exactly the rmq module a running script gets", function()
    local d = helpers.tmpdir("types")
    local out = d .. "/keys"
    -- The module as the runtime hands it to a script (rmqlua check runs its top-level code).
    rh.write(d, "probe.lua", string.format([[
local rmq = require "rmq"
local f = assert(io.open(%q, "a"))
local seen = {}
for k in pairs(rmq) do seen[k] = true end
for _, k in ipairs(rmq._lazy) do if rmq[k] ~= nil then seen[k] = true end end
for k in pairs(seen) do
  if not k:match("^_") then f:write(rmq.role, " ", k, "\n") end
end
f:close()
return { consumer_group = "types_probe", subscribe = { T = "*" }, consume = function() end }
]], out))
    local rc, res = rh.rmqlua("check " .. shq(d .. "/probe.lua"))
    assert.equals(0, rc, res)
    local got = {}
    for role, k in rh.read(out):gmatch("(%S+) (%S+)\n") do
      got[k] = true -- every role: the control state, and the consume state of check
    end
    assert.truthy(got.send and got.log and got.version, rh.read(out))
    local text = types()
    local defined = {}
    for k in text:gmatch("\nrmq%.([%w_]+) = ") do defined[k] = true end
    for k in text:gmatch("\nfunction rmq%.([%w_]+)%(") do defined[k] = true end
    assert.same(keys(got), keys(defined))
  end)

  it("gives rmq.Message every field of a message view", function()
    local text = types()
    local fields = class_fields(text, "rmq.Message")
    for k in text:gmatch("\nfunction Message:([%w_]+)%(") do fields[k] = true end
    assert.same(keys(require("rmq.view").fields), keys(fields))
  end)

  it("is installed under share/rmqlua/types and named in the README", function()
    local readme = helpers.read_file(helpers.root .. "/README.md")
    assert.matches("share/rmqlua/types", readme, 1, true)
    assert.matches("---@type rmq.Script", readme, 1, true)
    local cmake = helpers.read_file(helpers.root .. "/CMakeLists.txt")
    assert.matches("lua/types/rmq.lua", cmake, 1, true)
  end)
end)
