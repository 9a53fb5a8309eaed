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

return M
