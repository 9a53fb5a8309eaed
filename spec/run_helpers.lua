-- spec/run_helpers.lua: what the integration specs that write scripts and run rmqlua share, beside
-- spec/helpers.lua: script and data files, what a run wrote (read while it is being written),
-- the exit code of a run started with helpers.spawn, `rmqlua` commands in the foreground, and
-- the development broker in-process (FFI) with messages stored straight into it.
--
--   local rh = require "run_helpers"
local ffi = require "ffi"
local helpers = require "helpers"

local M = {}

-- Write text to dir/name; returns the path.
function M.write(dir, name, text)
  local path = dir .. "/" .. name
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

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

-- examples/NAME.lua of the repository.
function M.example(name) return helpers.root .. "/examples/" .. name .. ".lua" end

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

return M
