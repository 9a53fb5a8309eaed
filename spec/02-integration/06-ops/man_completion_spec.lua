-- The man pages and the bash completion the build makes from rmqlua's --help texts and option
-- table (scripts/gen_man, scripts/gen_completion): a page per command that says what its --help
-- says, rendered by man; completion of commands, of each command's flags and of option names
-- after --set, driven through bash's programmable completion.
local helpers = require "helpers"
local ffi = require "ffi"

local shq = helpers.shq
local build = os.getenv("RMQLUA_BUILD") or (helpers.root .. "/build")

-- Commands run without the sanitizer runtimes a sanitizer build's specs preload (man, groff
-- and bash are not built for them).
local function sh(cmd) return helpers.run("LD_PRELOAD= " .. cmd) end
local function rmqlua(args) return sh(helpers.bin .. " " .. args) end

-- The commands rmqlua --help lists.
local function commands()
  local rc, top = rmqlua("--help")
  assert.equals(0, rc, top)
  local list = {}
  local section = top:match("\ncommands:\n(.-)\n\n")
  for line in section:gmatch("[^\n]+") do list[#list + 1] = line:match("^  (%l+)") end
  assert.truthy(#list >= 9, top)
  return list
end

-- The flags a --help text names at the start of its items ("  --flag", "  -n, --count").
local function help_flags(help)
  local t = {}
  for item in help:gmatch("\n  +(%-[^\n]*)") do
    for f in (item:match("^(.-)  ") or item):gmatch("%-%-[%w][%w-]*") do t[f] = true end
  end
  return t
end

describe("man pages", function()
  it("exist for rmqlua and every command with a --help, and say what --help says", function()
    local rc, text = sh("MANWIDTH=1000 man -l " .. shq(build .. "/man/rmqlua.1"))
    assert.equals(0, rc, text)
    assert.matches("rmqlua %- RocketMQ consumers written in Lua", text)
    local _, top = rmqlua("--help")
    for _, c in ipairs(commands()) do
      local hrc, help = rmqlua(c .. " --help")
      if c == "version" then
        assert.is_nil(io.open(build .. "/man/rmqlua-version.1"))
      else
        assert.equals(0, hrc, help)
        local page = build .. "/man/rmqlua-" .. c .. ".1"
        local mrc, shown = sh("MANWIDTH=1000 man -l " .. shq(page))
        assert.equals(0, mrc, shown)
        -- NAME: the one-line description of the command list; SEE ALSO the main page.
        local desc = top:match("\n  " .. c .. "[^\n]-  +([^\n]+)")
        assert.matches("rmqlua%-" .. c .. " %- " .. desc:gsub("%p", "%%%0"), shown)
        assert.matches("rmqlua%(1%)", shown)
        assert.matches("rmqlua " .. c, shown:match("SYNOPSIS%s+([^\n]+)"))
        local n = 0
        for f in pairs(help_flags(help)) do
          assert.truthy(shown:find(f, 1, true), page .. " lacks " .. f)
          n = n + 1
        end
        if c ~= "check" and c ~= "test" then assert.truthy(n > 0, c) end
        -- groff finds nothing to warn about.
        local grc, warn = sh("groff -man -Tutf8 -ww -z " .. shq(page))
        assert.equals(0, grc)
        assert.equals("", warn)
      end
    end
  end)
end)

describe("bash completion", function()
  local file = build .. "/completion/rmqlua"

  -- What completing `line` offers (a trailing space starts a new, empty word), sorted.
  local function complete(line)
    local words = {}
    for w in line:gmatch("%S+") do words[#words + 1] = shq(w) end
    if line:match(" $") then words[#words + 1] = "''" end
    local script = string.format(". %s; COMP_WORDS=(%s); COMP_CWORD=%d; COMP_LINE=%s; "
      .. "COMP_POINT=${#COMP_LINE}; _rmqlua; printf '%%s\\n' \"${COMPREPLY[@]}\"",
      shq(file), table.concat(words, " "), #words - 1, shq(line))
    local rc, out = sh("bash --norc --noprofile -c " .. shq(script))
    assert.equals(0, rc, out)
    local t = {}
    for l in out:gmatch("[^\n]+") do t[#t + 1] = l end
    table.sort(t)
    return t
  end

  local function has(list, v)
    for _, x in ipairs(list) do if x == v then return true end end
    return false
  end

  it("is registered for rmqlua, falling back to file names", function()
    local rc, out = sh("bash --norc --noprofile -c " .. shq(". " .. shq(file)
      .. "; complete -p rmqlua"))
    assert.equals(0, rc, out)
    assert.matches("complete .*%-o default .*%-F _rmqlua rmqlua", out)
  end)

  it("completes the commands", function()
    local all = complete("rmqlua ")
    for _, c in ipairs(commands()) do assert.truthy(has(all, c), c) end
    assert.same({ "redrive", "run" }, complete("rmqlua r"))
    assert.same({ "init" }, complete("rmqlua in"))
    assert.same({}, complete("rmqlua nosuch"))
  end)

  it("completes each command's flags, as its --help names them", function()
    for _, c in ipairs(commands()) do
      local _, help = rmqlua(c .. " --help")
      local offered = complete("rmqlua " .. c .. " -")
      for f in pairs(help_flags(help)) do assert.truthy(has(offered, f), c .. " " .. f) end
    end
    assert.same({ "--embedded" }, complete("rmqlua run --emb"))
    assert.same({ "--body-template" }, complete("rmqlua send --body"))
    assert.same({ "--group", "--help", "--topic" }, complete("rmqlua init --"))
    assert.truthy(has(complete("rmqlua tail -"), "-n"))
    -- A script argument: nothing from the function, so bash offers file names.
    assert.same({}, complete("rmqlua run ex"))
    assert.same({}, complete("rmqlua nosuch --"))
  end)

  it("completes option names after --set, from the option table", function()
    local lib = helpers.lib()
    ffi.cdef "size_t rmq_conf_describe_markdown(char *out, size_t out_size);"
    local n = tonumber(lib.rmq_conf_describe_markdown(nil, 0))
    local buf = ffi.new("char[?]", n + 1)
    lib.rmq_conf_describe_markdown(buf, n + 1)
    local want = {}
    for name in ffi.string(buf, n):gmatch("\n| `([%w_]+)` |") do want[#want + 1] = name .. "=" end
    table.sort(want)
    assert.truthy(#want > 50)
    assert.same(want, complete("rmqlua run --set "))
    assert.same({ "consumer_group=" }, complete("rmqlua check --set consumer_gr"))
    -- send, tail and redrive take the connection options their --help lists; broker no --set.
    local _, help = rmqlua("tail --help")
    local listed = help:match("\n  %-%-set KEY=VALUE[^\n]*\n(.-)\n  %-%-")
    local conn = {}
    for name in listed:gmatch("[%w_]+") do
      if has(want, name .. "=") and not has(conn, name .. "=") then conn[#conn + 1] = name .. "=" end
    end
    table.sort(conn)
    assert.truthy(has(conn, "access_key=") and has(conn, "namespace=") and has(conn, "use_tls="))
    assert.same(conn, complete("rmqlua tail --set "))
    assert.same({ "tls_client_auth_server=", "tls_client_cert_path=", "tls_client_key_password=",
      "tls_client_key_path=", "tls_client_trust_cert_path=" },
      complete("rmqlua redrive --set tls_client_"))
    assert.same({}, complete("rmqlua send --set consumer_"))
    assert.same({}, complete("rmqlua broker --set "))
    local pulls = complete("rmqlua run --set pull_")
    assert.truthy(#pulls >= 3)
    for _, p in ipairs(pulls) do assert.matches("^pull_[%w_]+=$", p) end
  end)
end)
