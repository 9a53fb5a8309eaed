-- rmq.core: the FFI side of the runtime, loaded once per Lua state.
--
-- It cdefs rmqlua_ffi.h (through the generated rmq.cdef), finds the runtime's symbols and checks
-- the C ABI version: a state whose Lua files do not match the binary fails loudly here, at
-- creation, not later on a message. Inside rmqlua the symbols come from the executable (ffi.C);
-- under a plain luajit (specs, benchmarks) from ffi.load($RMQLUA_LIB, true).
local ffi = require "ffi"
local cdef = require "rmq.cdef"

local M = { ffi = ffi, abi_version = cdef.abi_version }

if not pcall(ffi.typeof, "rmq_msg_t") then
  ffi.cdef(cdef.text)
end
if not pcall(ffi.typeof, "rmq_view_t") then
  -- A message view: one pointer, cleared by the dispatcher when the handler returns.
  ffi.cdef [[ typedef struct rmq_view { const rmq_msg_t *m; } rmq_view_t; ]]
end

local function has_symbols(lib)
  return pcall(function() return lib.rmq_ffi_abi_version end)
end

local C
if has_symbols(ffi.C) then
  C = ffi.C
else
  local path = os.getenv("RMQLUA_LIB")
  if not path or path == "" then
    error("rmq.core: the runtime's symbols are not visible through ffi.C and RMQLUA_LIB is not set "
      .. "(run inside rmqlua, or set RMQLUA_LIB to librmqlua.so)", 0)
  end
  C = ffi.load(path, true)
  -- Pin it: LuaJIT unloads ffi.load()ed libraries when the state closes, and a runtime thread
  -- still winding down would then run on unmapped code.
  ffi.cdef [[ void *dlopen(const char *file, int mode); ]]
  ffi.C.dlopen(path, 0x1102) -- RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE
end
M.C = C

local v = C.rmq_ffi_abi_version()
if v ~= cdef.abi_version then
  error(string.format("rmq.core: FFI ABI mismatch: the runtime has version %d but lua/rmq/cdef.lua "
    .. "was generated for version %d (rebuild, or run scripts/gen_ffi_cdef)", v, cdef.abi_version), 0)
end

return M
