-- pace.lua: the reliability suite's steady producer: feeds lines at a steady rate to the
-- standard input of a command (`rmqlua send`, one message per line).
--
--   luajit pace.lua RATE SECONDS PIDFILE COMMAND
--
-- RATE lines per second for SECONDS seconds (0 = until killed or until the command goes away),
-- written in slices every 10 ms so the rate holds whatever the reader's pace; then standard
-- input is closed and pace.lua waits for the command to finish. COMMAND (one shell word) runs
-- with this process's standard output and error; its pid is appended to PIDFILE (so that
-- whoever started this can stop both by pid).
local clock = require "clock"
local rate = tonumber(arg[1]) or error("usage: pace.lua RATE SECONDS PIDFILE COMMAND")
local secs = tonumber(arg[2]) or 0
local pidfile, command = assert(arg[3]), assert(arg[4])
local function shq(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
-- The pid with its start time (stat field 22), as scripts/reliability.sh records every pid.
local out = assert(io.popen("echo \"$$ $(sed 's/^.*) //' /proc/$$/stat | cut -d' ' -f20)\" >> " ..
  shq(pidfile) .. "; exec " .. command, "w"))
local now = clock.mono
out:setvbuf("full")
local t0 = now()
local written = 0
local line = "m\n"
while true do
  local t = now() - t0
  if secs > 0 and t >= secs then break end
  local due = math.floor(t * rate)
  if due > written then
    local n = due - written
    if not out:write(string.rep(line, n)) then break end
    if not out:flush() then break end
    written = due
  end
  clock.sleep_ms(10)
end
out:close()
