-- Shared by the 04-lua specs: the development broker through the FFI, and `rmqlua run` in the
-- background (output in a file, SIGINT to stop, its exit code).
local helpers = require "helpers"
local rh = require "run_helpers"

require "devbroker_ffi" -- rmq_devbroker_* for helpers.lib()

local M = { ALL = -2 }
local lib = helpers.lib()
M.lib = lib

M.tmpdir = helpers.file_tmpdir("lua-runner")

function M.write(name, text)
  return rh.write(M.tmpdir, name, text)
end

-- The opening of a consumer script's returned table, a field a line: "return {", the group,
-- topic subscribed with "*", threads consume threads (min and max) and
-- CONSUME_FROM_FIRST_OFFSET. The script goes on with its other fields.
function M.head(group, topic, threads)
  return string.format('return {\n  consumer_group = %q,\n  subscribe = { %s = "*" },\n'
    .. '  consume_thread_min = %d, consume_thread_max = %d,\n'
    .. '  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",\n', group, topic, threads, threads)
end

-- The opening of a script that requires rmq and returns its table: "return {", the group and
-- topic subscribed with "*", a field a line. The script goes on with its other fields.
function M.script_head(group, topic)
  return string.format('local rmq = require "rmq"\nreturn {\n  consumer_group = %q,\n'
    .. '  subscribe = { %s = "*" },\n', group, topic)
end

-- Create topic (queues queues) and write the script file: M.script_head(group, topic), then
-- rest (its other fields and the closing brace). Returns the script's path.
function M.consumer_script(file, group, topic, queues, rest)
  M.create_topic(topic, queues)
  return M.write(file, M.script_head(group, topic) .. rest)
end

function M.start_broker(args)
  M.db, M.addr = rh.start_broker(args)
end

function M.stop_broker()
  if M.db ~= nil then lib.rmq_devbroker_stop(M.db) end
  M.db = nil
end

-- The development broker (M.db, M.addr) of the describe block this is called in: started with
-- args in its lazy_setup, stopped in its lazy_teardown.
function M.broker_fixture(args)
  helpers.describe_fixture(function() M.start_broker(args) end, M.stop_broker)
end

-- Topic with queues queues on every broker.
function M.create_topic(topic, queues)
  lib.rmq_devbroker_create_topic(M.db, M.ALL, topic, queues)
end

-- Topic with queues queues, holding n messages: body prefix .. i on queue i % queues.
function M.fill_topic(topic, queues, n, prefix)
  M.create_topic(topic, queues)
  for i = 1, n do M.produce(topic, prefix .. i, nil, nil, i % queues) end
end

function M.produce(topic, body, tags, keys, queue_id)
  local off = lib.rmq_devbroker_produce(M.db, 0, topic, queue_id or -1, tags, keys, body, #body)
  assert(off >= 0, "produce to " .. topic .. " failed")
end

-- produce with user properties { name = value }
function M.produce_props(topic, body, props, tags, keys)
  rh.produce_props(M.db, topic, -1, body, props, tags, keys)
end

function M.topic_count(topic, queues)
  return rh.stored(M.db, topic, queues)
end

-- The sum of group's committed offsets on topic (queues 0 .. queues - 1).
function M.committed(group, topic, queues)
  return rh.committed(M.db, group, topic, queues)
end

-- Start `rmqlua run` in the background; returns a handle with out(), wait_for(), stop().
function M.run(script, extra)
  local name = script:match("([^/]+)%.lua$")
  local out = M.tmpdir .. "/" .. name .. ".out"
  local pidf, rcf = out .. ".pid", out .. ".rc"
  os.remove(rcf)
  os.remove(pidf)
  os.remove(out)
  local cmd = string.format("(sh -c 'echo $$ > %s; exec %s run --namesrv %s %s %s' > %s 2>&1; "
    .. "echo $? > %s) &", pidf, helpers.bin, M.addr, extra or "", script, out, rcf)
  os.execute(cmd)
  local h = {}
  function h.pid()
    return helpers.wait_until(function() return tonumber(rh.read(pidf):match("%d+")) end, 10,
      "pid of " .. name)
  end
  -- Whatever happens in the test, the process does not outlive it.
  helpers.defer(function()
    if h.rc then return end
    helpers.kill(h.pid(), "KILL")
  end)
  function h.out() return rh.read(out) end
  function h.wait_for(pattern, what)
    return helpers.wait_until(function() return h.out():find(pattern) end, 30,
      (what or pattern) .. " in the output of " .. name)
  end
  function h.count(pattern)
    local n = 0
    for _ in h.out():gmatch(pattern) do n = n + 1 end
    return n
  end
  -- Send a signal (e.g. "HUP") to the running process.
  function h.signal(sig)
    os.execute("kill -" .. sig .. " " .. h.pid())
  end
  -- Its exit code once it exited by itself (nil while it runs).
  function h.exited()
    local rc = tonumber(rh.read(rcf):match("%d+"))
    if rc then h.rc = rc end
    return rc
  end
  -- Wait until it exited by itself (timeout seconds, scaled; default 30): its exit code.
  function h.wait_exit(timeout, what)
    return helpers.wait_until(h.exited, timeout or 30, what or ("exit of " .. name))
  end
  function h.stop()
    if h.rc then return h.rc end
    os.execute("kill -INT " .. h.pid())
    h.rc = rh.exit_code(rcf, 60, "exit of " .. name)
    return h.rc
  end
  return h
end

-- M.run, and the process stopped with SIGINT (h.stop) when the test ends.
function M.start(script, extra)
  local h = M.run(script, extra)
  helpers.defer(function() h.stop() end)
  return h
end

return M
