-- clock.lua: the reliability suite's clocks, its blocking sleep and a file test, shared by the
-- driver (lib.lua), the steady producer (pace.lua) and the consumer script (recorder.lua, loaded
-- in each consume state). Plain functions over libc through the FFI: any thread may call them
-- in its own Lua state.
local ffi = require "ffi"

pcall(ffi.cdef, [[
  struct rel_timespec { long tv_sec; long tv_nsec; };
  int clock_gettime(int clk, struct rel_timespec *ts);
  int poll(void *fds, unsigned long nfds, int timeout);
]])
local C = ffi.C
local ts = ffi.new("struct rel_timespec")

local M = {}

-- CLOCK_REALTIME in whole milliseconds: comparable between the processes of a run.
function M.now_ms()
  C.clock_gettime(0, ts)
  return tonumber(ts.tv_sec) * 1000 + math.floor(tonumber(ts.tv_nsec) / 1e6)
end

-- CLOCK_MONOTONIC in seconds.
function M.mono()
  C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) / 1e9
end

-- Blocks the calling thread for ms milliseconds (a C call: a Lua hook cannot cut it short).
function M.sleep_ms(ms) C.poll(nil, 0, ms) end

-- Whether path exists and can be opened for reading.
function M.exists(path)
  local f = io.open(path, "r")
  if f then f:close() return true end
  return false
end

return M
