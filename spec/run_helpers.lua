-- spec/run_helpers.lua: what the integration specs that write scripts and run rmqlua share, beside
-- spec/helpers.lua: script and data files, what a run wrote (read while it is being written),
-- the exit code of a run started with helpers.spawn, `rmqlua` commands in the foreground, and
-- the development broker in-process (FFI) with messages stored straight into it.
--
--   local rh = require "run_helpers"
local ffi = require "ffi"
local helpers = require "helpers"

local M = {}

-- The targets of the development broker's controls besides a broker's index: every broker,
-- the name server.
M.ALL, M.NAMESRV = -2, -1

-- A folder for the scripts of a spec file (helpers.file_tmpdir(name)) and a function
-- write(name, text) that writes a file in it and returns its path.
function M.script_dir(name)
  local dir = helpers.file_tmpdir(name)
  return dir, function(file, text) return M.write(dir, file, text) end
end

-- Write text to dir/name; returns the path.
function M.write(dir, name, text)
  local path = dir .. "/" .. name
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

-- Replace dir/name with text in one step (an editor's save: written beside it, then renamed),
-- so that a reader never sees half of it; returns the path.
function M.replace(dir, name, text)
  local path = dir .. "/" .. name
  assert(os.rename(M.write(dir, name .. ".tmp", text), path))
  return path
end

-- Lua source of statements that create the file marker and then keep the CPU busy for 0.5 s:
-- the start of a handler (or predicate) that says it started and is still at work.
function M.busy_after_marker(marker)
  return string.format([[
  local mk = io.open(%q, "w"); mk:write("x"); mk:close()
  local t = os.clock() + 0.5
  while os.clock() < t do end
]], marker)
end

local function expect(plain, run, args, want, ...)
  local luassert = require "luassert"
  local rc, out = run(args)
  luassert.are.equal(want, rc, out)
  for i = 1, select("#", ...) do
    if plain then luassert.matches(select(i, ...), out, 1, true)
    else luassert.matches(select(i, ...), out) end
  end
  return out
end

-- run(args) (a spec's function that runs a command: rc, output) must exit with want and print
-- each of the strings given (plain text). Returns the output.
function M.expect(run, args, want, ...) return expect(true, run, args, want, ...) end

-- The same with Lua patterns to match.
function M.expect_pattern(run, args, want, ...) return expect(false, run, args, want, ...) end

-- A file's whole text, "" while it does not exist (a run that has not written it yet).
function M.read(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end

-- The lines of a string, each ended by "\n" (a last line still being written is left out).
function M.lines(s)
  local t = {}
  for l in s:gmatch("([^\n]*)\n") do t[#t + 1] = l end
  return t
end

-- The lines of a file ({} when it does not exist).
function M.file_lines(path)
  local t = {}
  local f = io.open(path, "r")
  if not f then return t end
  for l in f:lines() do t[#t + 1] = l end
  f:close()
  return t
end

-- The exit code (a number) of a helpers.spawn(..., { rc = rcf }) process, whose shell writes it
-- to rcf just after the process is gone: waits for it up to timeout seconds (default 30, scaled).
function M.exit_code(rcf, timeout, what)
  return helpers.wait_until(function()
    return tonumber(M.read(rcf):match("%d+"))
  end, timeout or 30, what or ("the exit code in " .. rcf))
end

-- `cmd` in the background (helpers.spawn, its output in the file log), sent SIGTERM as soon as the
-- file marker exists (what it runs writes it when it has started): its exit code and its output,
-- once it exited (within 60 s, scaled).
function M.term_when_started(cmd, marker, log)
  local rcf = log .. ".rc"
  local pid = helpers.spawn(cmd, { log = log, rc = rcf })
  helpers.wait_until(function()
    local f = io.open(marker)
    if f then f:close() end
    return f ~= nil
  end, 30, marker .. " (the run to start)")
  os.execute("kill -TERM " .. pid)
  return M.exit_code(rcf, 60, "the run to stop after SIGTERM (" .. log .. ")"), M.read(log)
end

-- examples/NAME.lua of the repository.
function M.example(name) return helpers.root .. "/examples/" .. name .. ".lua" end

-- `rmqlua run --embedded --sample-messages n` of examples/hello.lua in the background, in a fresh
-- folder helpers.tmpdir(tag): its stdout in the folder's file out, its stderr in err, its exit
-- code in rc. Returns the pid and the paths of the three files.
function M.spawn_hello(tag, n)
  local d = helpers.tmpdir(tag)
  local out, errf, rcf = d .. "/out", d .. "/err", d .. "/rc"
  local pid = helpers.spawn(string.format("sh -c 'exec %s run --embedded --sample-messages %d %s 2> %s'",
    helpers.bin, n, M.example("hello"), errf), { log = out, rc = rcf })
  return pid, out, errf, rcf
end

-- `rmqlua ARGS` in the foreground with $NAMESRV_ADDR empty: exit code, stdout and stderr.
function M.rmqlua(args)
  return helpers.run("NAMESRV_ADDR= " .. helpers.bin .. " " .. args)
end

-- `rmqlua run --embedded ARGS` in the foreground, ended after 120 s (scaled): exit code, stdout,
-- stderr, and the file that holds stderr.
function M.embedded(args)
  local d = helpers.tmpdir("embedded")
  local outf, errf = d .. "/out", d .. "/err"
  local rc = helpers.run(string.format("(timeout %d %s run --embedded %s > %s 2> %s)",
    math.floor(120 * helpers.scale), helpers.bin, args, outf, errf))
  return rc, M.read(outf), M.read(errf), errf
end

-- A development broker in this process (rmq_devbroker_start ARGS): its handle and the address
-- of its name server. The caller stops it (rmq_devbroker_stop).
function M.start_broker(args)
  local lib = require "devbroker_ffi"
  local err = ffi.new("char[512]")
  local db = lib.rmq_devbroker_start(args or "", err, 512)
  assert(db ~= nil, "devbroker: " .. ffi.string(err))
  return db, ffi.string(lib.rmq_devbroker_addr(db))
end

-- User properties { name = value } as a message stores them: name\1value pairs joined by \2,
-- sorted by name.
function M.props_string(props)
  local p = {}
  for k, v in pairs(props or {}) do p[#p + 1] = k .. "\1" .. v end
  table.sort(p)
  return table.concat(p, "\2")
end

-- Store one message in the first broker's topic (queue -1: the broker's round robin), with
-- user properties { name = value }; returns its queue offset.
function M.produce_props(db, topic, queue, body, props, tags, keys)
  local lib = require "devbroker_ffi"
  local ps = M.props_string(props)
  local off = lib.rmq_devbroker_produce_props(db, 0, topic, queue, tags, keys, ps, #ps, body, #body)
  assert(off >= 0, "produce to " .. topic .. " failed: " .. tostring(off))
  return tonumber(off)
end

-- How many messages the first broker's topic holds in its queues 0 .. queues - 1 (default 1):
-- the sum of their max offsets.
function M.stored(db, topic, queues)
  local lib = require "devbroker_ffi"
  local n = 0
  for q = 0, (queues or 1) - 1 do
    local v = tonumber(lib.rmq_devbroker_max_offset(db, 0, topic, q))
    if v > 0 then n = n + v end
  end
  return n
end

-- The sum of group's committed offsets on the first broker's topic, queues 0 .. queues - 1 (a
-- queue with none counts 0).
function M.committed(db, group, topic, queues)
  local lib = require "devbroker_ffi"
  local n = 0
  for q = 0, queues - 1 do
    local v = tonumber(lib.rmq_devbroker_committed_offset(db, 0, group, topic, q))
    if v > 0 then n = n + v end
  end
  return n
end

-- Store n messages in the first broker's topic, round robin over its queues; bodies
-- "<prefix><i>" (prefix "m" by default).
function M.produce_n(db, topic, n, prefix, tags)
  local lib = require "devbroker_ffi"
  prefix = prefix or "m"
  for i = 1, n do
    local body = prefix .. i
    local off = lib.rmq_devbroker_produce(db, 0, topic, -1, tags, nil, body, #body)
    assert(off >= 0, "produce failed: " .. tostring(off))
  end
end

-- A name server address service (Java's TopAddressing) on 127.0.0.1, inside an `it`: a local
-- HTTP server (python3 http.server, stopped when the test ends) whose /rocketmq/<subgroup> answers
-- the text last given. Returns { domain = "127.0.0.1:PORT" (for namesrv_domain), url = what the
-- client asks, set = function(text) (the next answer), stop = function() (the service down) }.
function M.address_service(subgroup, text)
  local dir = helpers.tmpdir("nsaddr")
  local www = dir .. "/www"
  assert(os.execute("mkdir -p " .. helpers.shq(www .. "/rocketmq")) == 0)
  local s = {}
  function s.set(t) M.replace(www .. "/rocketmq", subgroup, t) end
  s.set(text)
  local log = dir .. "/http.log"
  local pid = helpers.spawn("/usr/bin/python3 -u -m http.server --bind 127.0.0.1 --directory "
    .. helpers.shq(www) .. " 0", { log = log })
  local port = helpers.wait_until(function()
    return M.read(log):match("port (%d+)")
  end, 20, "the address service's port")
  s.domain = "127.0.0.1:" .. port
  s.url = "http://" .. s.domain .. "/rocketmq/" .. subgroup
  function s.stop() helpers.kill(pid, "KILL") end
  return s
end

return M
