-- docs/ covers what the code has, and names nothing the code does not: every option of the
-- option table, every rmq.* function (rmq, rmq.json, the shared dictionaries' methods), every
-- command and every flag of each command (docs/commands.md holds each command's --help, as
-- scripts/gen_docs_md writes it). Fails in either direction.
local helpers = require "helpers"

local root = helpers.root
local function read(rel) return helpers.read_file(root .. "/" .. rel) end

local sorted_keys = helpers.sorted_keys

-- Both ways: what is in `code` and not in `docs`, and the other way round.
local function same_sets(code, docs, what)
  local only_code, only_docs = {}, {}
  for k in pairs(code) do if not docs[k] then only_code[#only_code + 1] = k end end
  for k in pairs(docs) do if not code[k] then only_docs[#only_docs + 1] = k end end
  table.sort(only_code)
  table.sort(only_docs)
  assert.are.same({}, only_code, what .. " in the code but not in docs/")
  assert.are.same({}, only_docs, what .. " in docs/ but not in the code")
end

local function c_sources()
  local p = io.popen("find " .. helpers.shq(root .. "/runtime") .. " -name '*.c'")
  local files = {}
  for f in p:lines() do files[#files + 1] = f end
  p:close()
  return files
end

-- The help text of `rmqlua ARGS --help`.
local function help(args)
  local rc, out = helpers.run(helpers.bin .. " " .. args .. " --help")
  assert.are.equal(0, rc, out)
  return out
end

describe("docs/", function()
  it("leaves the README a landing page (at most 200 lines) that links every page of docs/", function()
    local readme = read("README.md")
    local _, lines = readme:gsub("\n", "")
    assert.is_true(lines <= 200, "README.md has " .. lines .. " lines")
    local p = io.popen("ls " .. helpers.shq(root .. "/docs"))
    for f in p:lines() do
      assert.truthy(readme:find("(docs/" .. f .. ")", 1, true), "README.md links docs/" .. f)
    end
    p:close()
  end)

  it("names every option of the option table, and no other", function()
    local code = {}
    for _, f in ipairs(c_sources()) do
      for name in helpers.read_file(f):gmatch('\n%s*{"([%l%d_]+)", [%w"._]+, RMQ_CONF_%u+') do
        code[name] = true
      end
    end
    assert.is_true(#sorted_keys(code) > 50, "options found in runtime/: " .. #sorted_keys(code))
    local docs = {}
    local ref = read("docs/options.md"):match("<!%-%- OPTIONS%-BEGIN %-%->(.-)<!%-%- OPTIONS%-END %-%->")
    assert.is_not_nil(ref, "docs/options.md has no OPTIONS-BEGIN/END markers")
    for name in ref:gmatch("\n| `([%l%d_]+)` |") do docs[name] = true end
    same_sets(code, docs, "options")
  end)

  it("documents every rmq.* function in docs/lua-api.md, and no other", function()
    -- The modules as a script sees them (public names: no leading underscore).
    helpers.lib()
    local rmq = require "rmq"
    local shared = require "rmq.shared"
    local code = {}
    local function functions_of(t, prefix)
      for k, v in pairs(t) do
        if type(v) == "function" and not k:match("^_") then code[prefix .. k] = true end
      end
    end
    functions_of(rmq, "rmq.")
    -- The fields loaded on first use (pairs() does not see them before).
    for _, k in ipairs(rmq._lazy) do
      if type(rmq[k]) == "function" then code["rmq." .. k] = true end
    end
    functions_of(rmq.thread, "rmq.thread.")
    functions_of(rmq.socket, "rmq.socket.")
    functions_of(getmetatable(rmq.socket.tcp()).__index, "rmq.socket.tcp():")
    functions_of(rmq.http, "rmq.http.")
    functions_of(require "rmq.json", "rmq.json.")
    assert(shared.declare({ { name = "docs_coverage", size = 65536, line = 1 } }))
    functions_of(getmetatable(rmq.shared.docs_coverage).__index, "rmq.shared.NAME:")
    assert.is_true(code["rmq.send"] and code["rmq.json.decode"] and code["rmq.shared.NAME:get"])
    local docs = {}
    -- "### rmq.x.y(args)", "### rmq.socket.tcp():connect(args)": the name before the argument list.
    for name in read("docs/lua-api.md"):gmatch("\n### (rmq[^\n ]-)%([^%(%)\n]*%)\n") do
      docs[name] = true
    end
    same_sets(code, docs, "rmq functions")
  end)

  describe("commands", function()
    -- The commands main() dispatches on.
    local code = {}
    for name in read("runtime/cli/main.c"):gmatch('strcmp%(cmd, "(%l+)"%)') do
      if name ~= "help" then code[name] = true end
    end
    local commands_md = read("docs/commands.md")

    it("are each in docs/commands.md and the README's table, and no other", function()
      assert.is_true(code.run and code.version and #sorted_keys(code) >= 8)
      local docs = {}
      for name in commands_md:gmatch("\n### rmqlua (%l+)\n") do docs[name] = true end
      same_sets(code, docs, "commands")
      local readme = read("README.md")
      for name in pairs(code) do
        assert.truthy(readme:find("| `rmqlua " .. name, 1, true), name .. " in the README's table")
      end
      -- `rmqlua --help` lists the same commands.
      local listed = {}
      for line in help(""):match("commands:\n(.-)\n\n"):gmatch("[^\n]+") do
        listed[line:match("^  (%l+)")] = true
      end
      same_sets(code, listed, "commands of rmqlua --help")
    end)

    it("have their --help, every flag, in docs/commands.md (scripts/gen_docs_md)", function()
      local function block(name)
        local b = commands_md:match("<!%-%- HELP%-BEGIN " .. name .. " %-%->\n```text\n(.-)```\n<!%-%- HELP%-END "
          .. name .. " %-%->")
        assert.is_not_nil(b, "docs/commands.md has no --help of " .. name .. ": run scripts/gen_docs_md")
        return b
      end
      assert.are.equal(help(""), block("rmqlua"), "rmqlua --help: run scripts/gen_docs_md")
      for name in pairs(code) do
        if name ~= "version" then
          assert.are.equal(help(name), block(name), "rmqlua " .. name .. " --help: run scripts/gen_docs_md")
        end
      end
    end)

    it("take every flag the text of docs/commands.md names", function()
      local flags = {}
      for name in pairs(code) do
        if name ~= "version" then
          for f in help(name):gmatch("%-%-[%l%d][%l%d-]*") do flags[f] = true end
        end
      end
      local prose = commands_md:gsub("<!%-%- HELP%-BEGIN.-HELP%-END %l+ %-%->", "")
      local unknown = {}
      for f in prose:gmatch("%-%-[%l%d][%l%d-]*") do
        if not flags[f] then unknown[f] = true end
      end
      assert.are.same({}, sorted_keys(unknown), "flags in docs/commands.md that no command takes")
    end)
  end)
end)
