-- `cmake --install` into a temporary prefix, then the installed rmqlua run from another folder
-- with a clean environment (no RMQLUA_* variable, no LUA_PATH) against the development broker;
-- the library and rmqlua_ffi.h usable by a C program; the systemd unit template filled in for
-- the prefix.
local helpers = require "helpers"
local ffi = require "ffi"

require "devbroker_ffi"

local lib = helpers.lib()
local shq = helpers.shq
local build = os.getenv("RMQLUA_BUILD") or (helpers.root .. "/build")

-- A file's whole text, or nil when it cannot be read.
local function read(path)
  local ok, s = pcall(helpers.read_file, path)
  return ok and s or nil
end

local function exists(path) return read(path) ~= nil end

-- A command with only PATH, HOME and what sanitizer builds and the spec runner need.
local function clean_env(home)
  local keep = { "RMQ_TEST_TAG", "ASAN_OPTIONS", "UBSAN_OPTIONS" }
  local parts = { "env -i PATH=/usr/bin:/bin HOME=" .. shq(home) }
  for _, k in ipairs(keep) do
    local v = os.getenv(k)
    if v then parts[#parts + 1] = k .. "=" .. shq(v) end
  end
  return table.concat(parts, " ")
end

describe("cmake --install", function()
  local base, prefix, elsewhere

  lazy_setup(function()
    base = os.tmpname()
    os.remove(base)
    assert(os.execute("mkdir -p " .. shq(base)) == 0)
    prefix, elsewhere = base .. "/prefix", base .. "/elsewhere"
    assert(os.execute("mkdir -p " .. shq(elsewhere)) == 0)
    local rc, out = helpers.run("cmake --install " .. shq(build) .. " --prefix " .. shq(prefix))
    assert(rc == 0, out)
  end)
  lazy_teardown(function()
    if base then os.execute("rm -rf " .. shq(base)) end
  end)

  it("puts the binary, library, header, Lua modules, examples and the unit where they belong", function()
    assert.truthy(exists(prefix .. "/bin/rmqlua"))
    assert.truthy(exists(prefix .. "/include/rmqlua_ffi.h"))
    local _, libs = helpers.run("ls " .. shq(prefix) .. "/lib*/librmqlua.so " .. shq(prefix)
      .. "/lib/*/librmqlua.so 2>/dev/null")
    assert.matches("librmqlua%.so", libs)
    for _, m in ipairs({ "init", "core", "cdef", "view", "dispatch", "script", "testrun" }) do
      assert.truthy(exists(prefix .. "/share/rmqlua/lua/rmq/" .. m .. ".lua"), m)
    end
    for _, e in ipairs({ "hello", "json", "retry", "allocate", "forward", "shared", "throttle",
      "reload" }) do
      assert.truthy(exists(prefix .. "/share/doc/rmqlua/examples/" .. e .. ".lua"), e)
      assert.truthy(exists(prefix .. "/share/doc/rmqlua/examples/cases/" .. e .. ".lua"), e)
    end
    assert.truthy(exists(prefix .. "/share/doc/rmqlua/README.md"))
    for _, d in ipairs({ "getting-started", "writing-handlers", "lua-api", "commands", "options",
      "operations", "security", "reliability", "performance", "architecture" }) do
      assert.truthy(exists(prefix .. "/share/doc/rmqlua/docs/" .. d .. ".md"), d)
    end
    assert.truthy(exists(prefix .. "/share/doc/rmqlua/examples/monitoring/grafana/rmqlua-dashboard.json"))
    local unit = read(prefix .. "/lib/systemd/system/rmqlua@.service")
    assert.truthy(unit)
    assert.matches("\nExecStart=" .. prefix:gsub("%p", "%%%0") .. "/bin/rmqlua run %$RMQLUA_ARGS /etc/rmqlua/%%i%.lua\n", unit)
    assert.matches("\nRestart=on%-failure\n", unit)
    assert.matches("\nKillSignal=SIGTERM\n", unit)
    assert.matches("\nExecReload=/bin/kill %-HUP %$MAINPID\n", unit) -- SIGHUP reloads the script
    assert.is_nil(unit:find("@RMQLUA_", 1, true))
  end)

  it("puts the man pages, the bash completion and the editor types where man, bash and editors look",
    function()
      for _, page in ipairs({ "rmqlua", "rmqlua-run", "rmqlua-check", "rmqlua-test", "rmqlua-init",
        "rmqlua-send", "rmqlua-tail", "rmqlua-redrive", "rmqlua-broker" }) do
        assert.truthy(exists(prefix .. "/share/man/man1/" .. page .. ".1"), page)
      end
      -- man finds a page by name in the installed tree (man and bash are not sanitizer builds).
      local rc, out = helpers.run("LD_PRELOAD= MANWIDTH=100 man -M " .. shq(prefix .. "/share/man")
        .. " rmqlua-run")
      assert.are.equal(0, rc, out)
      assert.matches("rmqlua%-run %- consume with the hooks of a Lua script", out)
      local comp = prefix .. "/share/bash-completion/completions/rmqlua"
      rc, out = helpers.run("LD_PRELOAD= bash --norc --noprofile -c " .. shq(". " .. shq(comp)
        .. "; COMP_WORDS=(rmqlua in); COMP_CWORD=1; _rmqlua; echo \"${COMPREPLY[@]}\""))
      assert.are.equal(0, rc, out)
      assert.are.equal("init\n", out)
      assert.are.equal(read(helpers.root .. "/lua/types/rmq.lua"),
        read(prefix .. "/share/rmqlua/types/rmq.lua"))
    end)

  it("gives a systemd unit that systemd-analyze accepts without a remark", function()
    local rc = helpers.run("command -v systemd-analyze")
    if rc ~= 0 then
      pending("systemd-analyze is not installed")
      return
    end
    local d = helpers.tmpdir("unit")
    local copy = d .. "/rmqlua@demo.service"
    assert(os.execute("cp " .. shq(prefix .. "/lib/systemd/system/rmqlua@.service") .. " " .. shq(copy)) == 0)
    local out
    rc, out = helpers.run("systemd-analyze verify " .. shq(copy))
    assert.are.equal(0, rc, out)
    assert.are.equal("", out)
  end)

  it("finds its Lua modules beside itself, with no environment variable", function()
    local rc, out = helpers.run("cd " .. shq(elsewhere) .. " && " .. clean_env(elsewhere) .. " "
      .. shq(prefix .. "/bin/rmqlua") .. " version")
    assert.are.equal(0, rc, out)
    local real = select(2, helpers.run("realpath " .. shq(prefix .. "/share/rmqlua/lua"))):match("[^\n]+")
    assert.matches("Lua modules: " .. real:gsub("%p", "%%%0") .. "\n", out)
  end)

  it("runs an installed example from another folder against the development broker", function()
    local err = ffi.new("char[256]")
    local db = lib.rmq_devbroker_start("--topic TopicTest:4", err, 256)
    assert(db ~= nil, ffi.string(err))
    helpers.defer(function() lib.rmq_devbroker_stop(db) end)
    for i = 1, 5 do
      local body = "installed " .. i
      assert(lib.rmq_devbroker_produce(db, 0, "TopicTest", -1, "TagA", "k" .. i, body, #body) >= 0)
    end
    local rc, out = helpers.run(string.format("cd %s && %s timeout %d %s run --namesrv %s --max-messages 5 %s",
      shq(elsewhere), clean_env(elsewhere), math.floor(60 * helpers.scale), shq(prefix .. "/bin/rmqlua"),
      ffi.string(lib.rmq_devbroker_addr(db)), shq(prefix .. "/share/doc/rmqlua/examples/hello.lua")))
    assert.are.equal(0, rc, out)
    for i = 1, 5 do assert.matches("keys=k" .. i .. " body=installed " .. i .. "\n", out, 1, true) end
    assert.matches("stopped after [%d.]+ s: consumed 5 ", out)
  end)

  it("runs --embedded and rmqlua test from another folder", function()
    local rc, out = helpers.run(string.format("cd %s && %s timeout %d %s run --embedded --sample-messages 10 --max-messages 10 %s",
      shq(elsewhere), clean_env(elsewhere), math.floor(60 * helpers.scale), shq(prefix .. "/bin/rmqlua"),
      shq(prefix .. "/share/doc/rmqlua/examples/hello.lua")))
    assert.are.equal(0, rc, out)
    assert.matches("keys=sample%-10 ", out)
    local ex = prefix .. "/share/doc/rmqlua/examples/"
    rc, out = helpers.run(string.format("cd %s && %s %s test %s %s", shq(elsewhere), clean_env(elsewhere),
      shq(prefix .. "/bin/rmqlua"), shq(ex .. "retry.lua"), shq(ex .. "cases/retry.lua")))
    assert.are.equal(0, rc, out)
    assert.matches("5 case%(s%), 0 failed", out)
  end)

  it("lets a C program link the library with the installed header", function()
    local d = helpers.tmpdir("cuser")
    local src = d .. "/user.c"
    local f = assert(io.open(src, "w"))
    f:write([[
#include <stdio.h>
#include <rmqlua_ffi.h>
int main(void)
{
    printf("abi %d of %d\n", rmq_ffi_abi_version(), RMQ_FFI_ABI_VERSION);
    return rmq_ffi_abi_version() == RMQ_FFI_ABI_VERSION ? 0 : 1;
}
]])
    f:close()
    local libdir = select(2, helpers.run("dirname $(ls " .. shq(prefix) .. "/lib*/librmqlua.so "
      .. shq(prefix) .. "/lib/*/librmqlua.so 2>/dev/null | head -1)")):match("[^\n]+")
    -- A sanitizer build's library needs its sanitizer's runtime in the program.
    local san = os.getenv("RMQ_TEST_TSAN") == "1" and " -fsanitize=thread" or
      os.getenv("RMQ_LD_PRELOAD") and " -fsanitize=address,undefined" or ""
    local rc, out = helpers.run(string.format("cc%s -o %s %s -I%s -L%s -lrmqlua -Wl,-rpath,%s",
      san, shq(d .. "/user"), shq(src), shq(prefix .. "/include"), shq(libdir), shq(libdir)))
    assert.are.equal(0, rc, out)
    rc, out = helpers.run(shq(d .. "/user"))
    assert.are.equal(0, rc, out)
    assert.matches("^abi %d+ of %d+\n$", out)
  end)
end)
