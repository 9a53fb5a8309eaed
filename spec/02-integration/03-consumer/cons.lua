-- Shared pieces of the consumer integration specs: the development broker in-process (FFI),
-- consumer scripts written to a temp dir that record what they consume, and `rmqlua run`
-- subprocesses.
local helpers = require "helpers"
local rh = require "run_helpers"
local ffi = require "ffi"
local lib = require "devbroker_ffi"

local M = { lib = lib, ALL = rh.ALL, NAMESRV = rh.NAMESRV }

-- A fresh temp directory for one test (removed when the test ends).
function M.tmpdir(name)
  return helpers.tmpdir("consumer-" .. name)
end

-- A development broker in-process: db, name server address.
M.start_broker = rh.start_broker

-- What the development broker recorded of the requests it got (any broker of it): the extField
-- key of the idx-th request with code, and that request's body (nil when absent).
function M.request_ext(db, code, idx, key)
  local buf = ffi.new("char[1024]")
  local n = lib.rmq_devbroker_request_ext(db, M.ALL, code, idx, key, buf, 1024)
  if n < 0 then return nil end
  return ffi.string(buf, n)
end

function M.request_body(db, code, idx)
  local buf = ffi.new("char[4096]")
  local n = lib.rmq_devbroker_request_body(db, M.ALL, code, idx, buf, 4096)
  if n < 0 then return nil end
  return ffi.string(buf, n)
end

-- SET_MESSAGE_REQUEST_MODE (401) as mqadmin setConsumeMode sends it, a raw frame to broker 0:
-- mode "POP" or "PULL", share the popShareQueueNum (default 0).
function M.set_mode(db, topic, group, mode, share)
  local wire = dofile(helpers.root .. "/spec/02-integration/01-devbroker/wire.lua")
  local c = assert(wire.connect(M.broker_addr(db, 0)))
  local r = assert(c:request(401, nil, require("cjson").encode({ topic = topic,
    consumerGroup = group, mode = mode, popShareQueueNum = share or 0 })))
  c:close()
  if r.code ~= 0 then error("SET_MESSAGE_REQUEST_MODE answered " .. tostring(r.code), 2) end
end

-- The development broker of a describe block, started (args as M.start_broker) in its
-- lazy_setup and stopped in its lazy_teardown: returns the table the setup fills, with db, ns,
-- and dir (M.tmpdir(tmpname)) when tmpname is given.
function M.broker_fixture(args, tmpname)
  return helpers.describe_fixture(function(t)
    t.db, t.ns = M.start_broker(args)
    if tmpname then t.dir = M.tmpdir(tmpname) end
  end, function(t) if t.db then lib.rmq_devbroker_stop(t.db) end end)
end

-- A development broker for one test (args as M.start_broker), stopped when the test ends: db,
-- name server address.
function M.test_broker(args)
  local db, ns = M.start_broker(args)
  helpers.defer(function() lib.rmq_devbroker_stop(db) end)
  return db, ns
end

-- A development broker for one test with o.topic on o.queues queues (retries delayed 1000 times
-- less), holding o.n messages "<o.prefix><i>", stopped when the test ends, after o.close (rawmq's
-- close_all, say) when given; and a temp folder of the test, helpers.tmpdir(o.tmpname). Returns
-- db, the name server address, the folder, and the paths out.txt and run.log in it.
function M.loaded_broker(o)
  local db, ns = M.test_broker("--topic " .. o.topic .. ":" .. o.queues .. " --delay-scale 0.001")
  if o.close then helpers.defer(o.close) end
  M.produce(db, o.topic, o.n, o.prefix)
  local dir = helpers.tmpdir(o.tmpname)
  return db, ns, dir, dir .. "/out.txt", dir .. "/run.log"
end

-- The body of a handler (M.script's opts.body) that fails on a message's first delivery by its
-- body's last digit: 3 raises, 7 asks for a retry, 9 goes to the DLQ.
M.FAIL_BY_DIGIT = [[
        local m = msgs[1]
        if m.reconsume_times == 0 then
          local last = m.body:sub(-1)
          if last == "3" then error("boom " .. m.body) end
          if last == "7" then return rmq.RECONSUME_LATER end
          if last == "9" then return rmq.DLQ end
        end]]

-- A raw client joins group (on topic) with one heartbeat to broker 0: it sorts after every
-- rmqlua client id, so the allocation gives it the last queues. Returns a function that makes it
-- leave (UNREGISTER_CLIENT; the response, or nil once it left) and that runs anyway when the
-- test ends.
function M.join_group(db, group, topic)
  local wire = dofile(helpers.root .. "/spec/02-integration/01-devbroker/wire.lua")
  local c = assert(wire.connect(wire.broker_addr(db, 0)))
  local cid = "zzz-member@spec"
  require("luassert").equal(0, assert(c:request(34 --[[HEART_BEAT]], nil,
    wire.heartbeat_body(cid, group, { { topic = topic } }))).code)
  local left = false
  local function leave()
    if left then return nil end
    left = true
    local r = c:request(35 --[[UNREGISTER_CLIENT]], { clientID = cid, consumerGroup = group })
    c:close()
    return r
  end
  helpers.defer(leave)
  return leave
end

-- The address of broker idx (0 when not given) of a development broker.
function M.broker_addr(db, idx)
  return ffi.string(lib.rmq_devbroker_broker_addr(db, idx or 0))
end

-- Store one message with body on queue q of topic (broker 0).
function M.put(db, topic, q, body)
  assert(lib.rmq_devbroker_produce(db, 0, topic, q, nil, nil, body, #body) >= 0)
end

-- Store n messages on topic, spread round robin over queues; bodies "<prefix><i>".
M.produce = rh.produce_n

-- Store n messages in each of the queues 0 .. queues - 1 of topic: bodies "q<queue>_<i>", i = 1
-- .. n in offset order.
function M.fill_queues(db, topic, queues, n)
  for i = 1, n do
    for q = 0, queues - 1 do
      local b = string.format("q%d_%d", q, i)
      assert(lib.rmq_devbroker_produce(db, 0, topic, q, nil, nil, b, #b) >= 0)
    end
  end
end

-- Write a consumer script. opts: group, ns, topic, out (file), extra (Lua source for more
-- options), body (Lua source of the handler body after the record is written; may return a
-- status), tags (subscription expression), orderly (consume_orderly instead of consume).
function M.script(dir, opts)
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
  return rh.write(dir, (opts.name or "consumer") .. ".lua", src)
end

-- Start `rmqlua run script` in the background; returns the pid. Output goes to log, and the
-- exit code to log .. ".rc" once it exited (M.exit_code).
function M.spawn(script, log, args, env)
  os.remove(log .. ".rc")
  local cmd = string.format("(%s %s run %s %s > %q 2>&1 < /dev/null & echo $!; wait $!; echo $? > %q) &",
    env or "", helpers.bin, script, args or "", log, log .. ".rc")
  local p = io.popen(cmd)
  local pid = tonumber(p:read("*l"))
  p:close()
  assert(pid, "could not start rmqlua run")
  helpers.defer(function() helpers.kill(pid, "KILL") end)
  return pid
end

-- The exit code of a spawned run (waits up to 10 s, scaled, for the .rc file).
function M.exit_code(log)
  return rh.exit_code(log .. ".rc", 10, "exit code of " .. log)
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

M.lines = rh.file_lines

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
  return #rh.file_lines(path)
end

M.read = rh.read

-- GET url of a consumer's metrics endpoint through spec/python/prom_scrape.py (Debian's
-- python3-prometheus-client parses /metrics): {status, content_type, body[, families]}, or nil
-- and the error text.
function M.scrape(url)
  local rc, out = helpers.run("/usr/bin/python3 " ..
    helpers.shq(helpers.root .. "/spec/python/prom_scrape.py") .. " " .. helpers.shq(url))
  if rc == 3 then error("the exposition does not parse: " .. out, 2) end
  if rc ~= 0 then return nil, out end
  return require("cjson").decode(out)
end

-- The metrics endpoint's base URL from a consumer's log (--metrics 127.0.0.1:0).
function M.metrics_url(log)
  local addr = helpers.wait_until(function()
    return M.read(log):match("metrics on http://([%d%.]+:%d+)/metrics")
  end, 20, "the metrics address in " .. log)
  return "http://" .. addr
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
