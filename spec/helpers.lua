-- spec/helpers.lua: shared test helpers. Load with `local helpers = require "helpers"`.
--
-- Every spec runs under the same LuaJIT the runtime uses (scripts/busted), with
-- RMQLUA_LIB/RMQLUA_BIN/RMQLUA_ROOT set by ctest.
local ffi = require "ffi"

local M = {}

M.root = os.getenv("RMQLUA_ROOT") or "."
M.lib_path = os.getenv("RMQLUA_LIB") or (M.root .. "/build/librmqlua.so")
M.bin = os.getenv("RMQLUA_BIN") or (M.root .. "/build/rmqlua")
M.fixtures = M.root .. "/spec/fixtures"
-- Every timeout in a spec is multiplied by this (sanitizer builds and slow machines).
M.scale = tonumber(os.getenv("RMQ_TEST_TIMEOUT_SCALE") or "1") or 1

local lib
-- The runtime library, loaded once with its symbols global (so ffi.C sees them too), and pinned:
-- LuaJIT unloads an ffi.load()ed library when the state closes at exit, and a thread of the
-- library (a development broker or consumer a spec left running, or a worker still winding down)
-- would then run on unmapped code. RTLD_NODELETE keeps it mapped until the process ends.
function M.lib()
  if not lib then
    lib = ffi.load(M.lib_path, true)
    ffi.cdef [[ void *dlopen(const char *file, int mode); ]]
    local RTLD_NOW, RTLD_GLOBAL, RTLD_NODELETE = 0x2, 0x100, 0x1000
    assert(ffi.C.dlopen(M.lib_path, RTLD_NOW + RTLD_GLOBAL + RTLD_NODELETE) ~= nil,
      "cannot pin " .. M.lib_path)
  end
  return lib
end

-- Whole file as a string, or error naming the file.
function M.read_file(path)
  local f, err = io.open(path, "rb")
  if not f then error("cannot open " .. path .. ": " .. tostring(err), 2) end
  local s = f:read("*a")
  f:close()
  return s
end

function M.fixture(rel) return M.read_file(M.fixtures .. "/" .. rel) end

function M.json_fixture(rel)
  return require("cjson").decode(M.fixture(rel))
end

-- Names of the files in a directory (sorted).
function M.dir(path)
  local out = {}
  local p = io.popen('ls -1 "' .. path .. '" 2>/dev/null')
  for name in p:lines() do out[#out + 1] = name end
  p:close()
  return out
end

function M.sleep(sec)
  ffi.cdef [[ int poll(void *fds, unsigned long nfds, int timeout); ]]
  M.sleep = function(s) ffi.C.poll(nil, 0, math.floor(s * 1000)) end
  return M.sleep(sec)
end

-- Poll fn() until it returns a truthy value or timeout (seconds, scaled) passes.
function M.wait_until(fn, timeout, what)
  local deadline = os.time() + (timeout or 10) * M.scale
  local step = 0.01
  while true do
    local v = fn()
    if v then return v end
    if os.time() > deadline then
      error("timed out waiting for " .. (what or "condition"), 2)
    end
    M.sleep(step)
    if step < 0.2 then step = step * 2 end
  end
end

-- The keys of table t, sorted.
function M.sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

-- Hex string (lowercase) of a byte string, and back.
function M.tohex(s)
  return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end
function M.fromhex(h)
  return (h:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end))
end

-- Run a shell command; returns exit code, stdout+stderr.
function M.run(cmd)
  local p = io.popen(cmd .. " 2>&1; echo \"__rc=$?\"")
  local out = p:read("*a")
  p:close()
  local rc = tonumber(out:match("__rc=(%d+)%s*$"))
  out = out:gsub("__rc=%d+%s*$", "")
  return rc, out
end

-- ---- cleanup ------------------------------------------------------------------------------------
-- busted 2.x keeps only the LAST finally() registered in an `it` block, so a spec never calls
-- finally() itself: helpers.defer(fn) collects cleanups and registers one runner that calls them
-- all, newest first, even when one of them fails (the first failure is re-raised afterwards).
-- Outside an `it` (in lazy_setup, say) the caller runs helpers.run_deferred() from lazy_teardown.
local deferred = {}

function M.run_deferred()
  local list = deferred
  deferred = {}
  local first_err
  for i = #list, 1, -1 do
    local ok, err = pcall(list[i])
    if not ok and not first_err then first_err = err end
  end
  if first_err then error(first_err, 0) end
end

-- busted gives finally(), lazy_setup() and the like to the environment of the spec functions,
-- not to modules: find one in the environment of the nearest caller that has it.
local function busted_fn(name)
  for level = 1, 40 do
    local ok, env = pcall(getfenv, level)
    if not ok then return nil end
    if env ~= _G and type(env) == "table" then
      local f = env[name]
      if f then return f end
    end
  end
end

local function busted_finally() return busted_fn("finally") end

-- A fixture of the describe block this is called in: setup() runs in its lazy_setup and fills
-- the table returned (setup(t)), teardown(t) in its lazy_teardown.
function M.describe_fixture(setup, teardown)
  local lazy_setup, lazy_teardown = busted_fn("lazy_setup"), busted_fn("lazy_teardown")
  assert(lazy_setup and lazy_teardown, "a describe fixture is made inside a describe block")
  local t = {}
  lazy_setup(function() setup(t) end)
  lazy_teardown(function() teardown(t) end)
  return t
end

-- Returns true when fn will run at the end of the current `it`; false outside one (describe,
-- lazy_setup, before_each), where nothing is registered and the caller cleans up itself.
function M.defer(fn)
  local fin = busted_finally()
  if not fin then return false end
  deferred[#deferred + 1] = fn
  fin(M.run_deferred)
  return true
end

local function shq(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
M.shq = shq

-- Temp files and folders live under $TMPDIR, which scripts/busted makes fresh for each spec file
-- and checks is empty afterwards. os.tmpname() follows it too (LuaJIT's ignores TMPDIR).
local tmp_base = os.getenv("TMPDIR") or "/tmp"
local tmp_seq = 0
function os.tmpname() -- luacheck: ignore 122 (replaced on purpose: see above)
  local p = io.popen("mktemp " .. shq(tmp_base .. "/lua_XXXXXX"))
  local path = p:read("*l")
  p:close()
  assert(path and path ~= "", "mktemp failed in " .. tmp_base)
  return path
end

-- A new folder $TMPDIR/<prefix>XXXXXX (mktemp -d).
local function mkdtemp(prefix)
  local p = io.popen("mktemp -d " .. shq(tmp_base .. "/" .. prefix .. "XXXXXX"))
  local d = p:read("*l")
  p:close()
  assert(d and d ~= "", "mktemp -d failed in " .. tmp_base)
  return d
end

-- A fresh temp folder. Made inside an `it`, it is removed when the test ends (helpers.defer);
-- made in a describe / lazy_setup, it is a folder of the whole file (helpers.file_tmpdir).
function M.tmpdir(name)
  tmp_seq = tmp_seq + 1
  name = (name or "spec"):gsub("[^%w_.-]", "_")
  if not busted_finally() then return M.file_tmpdir(name) end
  local d = mkdtemp(string.format("%s-%d-", name, tmp_seq))
  M.defer(function() os.execute("rm -rf " .. shq(d)) end)
  return d
end

-- A temp folder for a whole spec file (shared by its tests), under $TMPDIR/file-*: scripts/busted
-- removes it with $TMPDIR when the file's run ends, and does not count it as left behind.
function M.file_tmpdir(name)
  return mkdtemp("file-" .. (name or "spec"):gsub("[^%w_.-]", "_") .. "-")
end

-- Is the process alive (and not a zombie)?
function M.alive(pid)
  local f = io.open("/proc/" .. pid .. "/stat", "r")
  if not f then return false end
  local st = f:read("*l") or ""
  f:close()
  return not st:match("^%d+ %b() [ZX]")
end

-- Start a shell command in the background; returns its pid. The process is killed (SIGKILL) and
-- waited for when the test ends unless it already exited. opts.log: stdout+stderr go there (else
-- /dev/null); opts.rc: its exit code is written to that file when it exits.
function M.spawn(cmd, opts)
  opts = opts or {}
  local log = opts.log and shq(opts.log) or "/dev/null"
  local line
  if opts.rc then
    os.remove(opts.rc)
    line = string.format("(%s > %s 2>&1 < /dev/null & echo $!; wait $!; echo $? > %s) &",
      cmd, log, shq(opts.rc))
  else
    line = string.format("(exec %s > %s 2>&1 < /dev/null) & echo $!", cmd, log)
  end
  local p = io.popen(line)
  local pid = tonumber(p:read("*l"))
  p:close()
  assert(pid, "could not start: " .. cmd)
  if not M.defer(function() M.kill(pid, "KILL") end) then
    M.kill(pid, "KILL")
    error("helpers.spawn outside an `it`: nothing would stop " .. cmd, 2)
  end
  return pid
end

-- `rmqlua broker ARGS` in the background (helpers.spawn, inside an `it`): returns the pid and
-- the file its output goes to (in a temp folder of the test).
function M.spawn_broker(args)
  local out = M.tmpdir("broker") .. "/broker.log"
  assert(io.open(out, "w")):close() -- readable at once, before the shell opens it
  return M.spawn(M.bin .. " broker " .. args, { log = out }), out
end

-- Send sig (default TERM) and wait until the process is gone (timeout seconds, scaled).
function M.kill(pid, sig, timeout)
  if not M.alive(pid) then return end
  os.execute(string.format("kill -%s %d 2>/dev/null", sig or "TERM", pid))
  M.wait_until(function() return not M.alive(pid) end, timeout or 30,
    "process " .. pid .. " to exit")
end

return M
