-- rmq.lint: what `rmqlua check` finds in a script's code without running a batch.
--
-- global_writes(path): every assignment to a global in the script and in the modules it loads
-- from its own folder. Each consume thread keeps its Lua state from batch to batch, so a handler
-- that writes `count = count + 1` where it meant `local count` carries that value into the next
-- batch (of any queue the thread serves), and reloads see it too. The scan reads the compiled
-- bytecode (jit.util): a GSET instruction is a write to a global, its line the source line.
-- Control role only (`rmqlua check`); nothing here runs on a consume thread.
local jutil = require "jit.util"
local bit = require "bit"
local script = require "rmq.script"

local band, rshift = bit.band, bit.rshift
local funcbc, funck, funcinfo = jutil.funcbc, jutil.funck, jutil.funcinfo

local M = {}

-- The opcode of GSET in this LuaJIT, learned from a chunk that is one global write (its
-- numbering is not stable across LuaJIT versions): 1 KPRI, 2 GSET "g", 3 RET0.
local GSET
do
  local probe = assert(load("g = nil", "=probe"))
  local ins = funcbc(probe, 2)
  assert(ins and funck(probe, -rshift(ins, 16) - 1) == "g", "rmq.lint: unexpected LuaJIT bytecode")
  GSET = band(ins, 0xff)
end

-- Append { file =, line =, name = } for every GSET of fn and of the functions nested in it.
local function scan(fn, file, out)
  local fi = funcinfo(fn)
  if fi.children then
    for n = -1, -1e9, -1 do
      local k = funck(fn, n)
      if k == nil then break end
      if type(k) == "proto" then scan(k, file, out) end
    end
  end
  for pc = 1, 1e9 do
    local ins = funcbc(fn, pc)
    if not ins then break end
    if band(ins, 0xff) == GSET then
      local name = funck(fn, -rshift(ins, 16) - 1)
      out[#out + 1] = { file = file, line = funcinfo(fn, pc).currentline, name = tostring(name) }
    end
  end
end

-- global_writes(path) -> list of { file, line, name }, sorted by file then line. The script is
-- loaded (as `rmqlua check` loads it) so that the modules it requires from its folder are known.
function M.global_writes(path)
  script.load(path)
  local out = {}
  for _, file in ipairs(script.local_files(path)) do
    local f = io.open(file, "rb")
    if f then
      local src = f:read("*a")
      f:close()
      local fn = load(src, "@" .. file, "t")
      if fn then scan(fn, file, out) end
    end
  end
  table.sort(out, function(a, b)
    if a.file ~= b.file then return a.file < b.file end
    return a.line < b.line
  end)
  return out
end

return M
