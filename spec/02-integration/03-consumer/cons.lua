-- Shared pieces of the consumer integration specs: the development broker in-process (FFI),
-- consumer scripts written to a temp dir that record what they consume, and `rmqlua run`
-- subprocesses.
local helpers = require "helpers"
local ffi = require "ffi"

require "devbroker_ffi" -- rmq_devbroker_* for helpers.lib()

local M = {}
local lib = helpers.lib()
M.lib = lib
M.ALL, M.NAMESRV = -2, -1

-- A fresh temp directory for one test (removed when the test ends).
function M.tmpdir(name)
  return helpers.tmpdir("consumer-" .. name)
end

function M.start_broker(args)
  local err = ffi.new("char[256]")
  local db = lib.rmq_devbroker_start(args or "", err, 256)
  assert(db ~= nil, "devbroker: " .. ffi.string(err))
  return db, ffi.string(lib.rmq_devbroker_addr(db))
end

-- Store n messages on topic, spread round robin over queues; bodies "<prefix><i>".
function M.produce(db, topic, n, prefix, tags)
  prefix = prefix or "m"
  for i = 1, n do
    local body = prefix .. i
    local off = lib.rmq_devbroker_produce(db, 0, topic, -1, tags, nil, body, #body)
    assert(off >= 0, "produce failed: " .. tostring(off))
  end
end

-- Write a consumer script. opts: group, ns, topic, out (file), extra (Lua source for more
-- options), body (Lua source of the handler body after the record is written; may return a
-- status), tags (subscription expression), orderly (consume_orderly instead of consume).
function M.script(dir, opts)
  local path = dir .. "/" .. (opts.name or "consumer") .. ".lua"
  local src = string.format([[
local rmq = require "rmq"
local out = assert(io.open(%q, "a"))
out:setvbuf("no")
local fmt, concat, tonumber = string.format, table.concat, tonumber
return {
  consumer_group = %q,
  namesrv_addr = %q,
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  subscribe = { [%q] = %q },
  %s
  %s = function(msgs, ctx)
    local t = {}
    for i = 1, #msgs do
      local m = msgs[i]
      t[i] = fmt("%%s %%s %%d %%d %%d %%s\n", m.body, m.topic, m.queue_id,
        tonumber(m.queue_offset), m.reconsume_times, m.store_topic)
    end
    out:write(concat(t))
    %s
  end,
}
]], opts.out, opts.group, opts.ns, opts.topic, opts.tags or "*", opts.extra or "",
    opts.orderly and "consume_orderly" or "consume", opts.body or "")
  local f = assert(io.open(path, "w"))
  f:write(src)
  f:close()
  return path
end

-- Start `rmqlua run script` in the background; returns the pid. Output goes to log, and the
-- exit code to log .. ".rc" once it exited (M.exit_code).
function M.spawn(script, log, args)
  os.remove(log .. ".rc")
  local cmd = string.format("(%s run %s %s > %q 2>&1 < /dev/null & echo $!; wait $!; echo $? > %q) &",
    helpers.bin, script, args or "", log, log .. ".rc")
  local p = io.popen(cmd)
  local pid = tonumber(p:read("*l"))
  p:close()
  assert(pid, "could not start rmqlua run")
  helpers.defer(function() helpers.kill(pid, "KILL") end)
  return pid
end

-- The exit code of a spawned run (waits for the .rc file), or nil.
function M.exit_code(log)
  local rc
  helpers.wait_until(function()
    local f = io.open(log .. ".rc")
    if not f then return false end
    rc = tonumber(f:read("*l"))
    f:close()
    return rc ~= nil
  end, 10, "exit code of " .. log)
  return rc
end

function M.alive(pid)
  return os.execute("kill -0 " .. pid .. " 2>/dev/null") == 0
end

-- SIGTERM (or sig) and wait for the process to exit.
function M.stop(pid, sig, timeout)
  os.execute(string.format("kill -%s %d 2>/dev/null", sig or "TERM", pid))
  helpers.wait_until(function() return not M.alive(pid) end, timeout or 30,
    "rmqlua run (pid " .. pid .. ") to exit")
end

function M.lines(path)
  local t = {}
  local f = io.open(path, "r")
  if not f then return t end
  for l in f:lines() do t[#t + 1] = l end
  f:close()
  return t
end

-- Parse the records: { body=, topic=, qid=, off=, rt=, store_topic= }.
function M.records(path)
  local out = {}
  for _, l in ipairs(M.lines(path)) do
    local body, topic, qid, off, rt, st = l:match("^(%S+) (%S+) (%d+) (%d+) (%d+) (%S+)$")
    if body then
      out[#out + 1] = { body = body, topic = topic, qid = tonumber(qid), off = tonumber(off),
        rt = tonumber(rt), store_topic = st }
    end
  end
  return out
end

function M.count_lines(path)
  local f = io.open(path, "r")
  if not f then return 0 end
  local n = 0
  for _ in f:lines() do n = n + 1 end
  f:close()
  return n
end

function M.read(path)
  local f = io.open(path, "r")
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end

-- Committed offsets of group equal the max offsets of every queue of topic (broker 0).
function M.all_committed(db, group, topic, queues)
  for q = 0, queues - 1 do
    local max = lib.rmq_devbroker_max_offset(db, 0, topic, q)
    local com = lib.rmq_devbroker_committed_offset(db, 0, group, topic, q)
    if com ~= max then return false, q, tonumber(com), tonumber(max) end
  end
  return true
end

return M
