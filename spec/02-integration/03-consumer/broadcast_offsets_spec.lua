-- BROADCASTING offsets.json (LocalFileOffsetStore) on the edge paths: a consumer that owns no
-- queue never writes the file, queues not owned this run keep the offsets the file had, a write
-- blocked on the disk does not stop consumption, and the last persist at shutdown reaches the
-- file before the process exits.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local GROUP = "g_bcoff"
local ffi = require "ffi"
pcall(ffi.cdef, "int open(const char *path, int flags, ...); int close(int fd);")
local O_RDONLY, O_NONBLOCK = 0, 2048 -- Linux

-- A broadcasting consumer script of instance `inst` keeping its offsets under dir/offsets.
local function script(dir, name, ns, topic, out, inst, persist_ms)
  return cons.script(dir, { name = name, group = GROUP, ns = ns, topic = topic, out = out,
    extra = string.format('message_model = "BROADCASTING", instance_name = %q, '
      .. 'local_offset_store_dir = %q, persist_consumer_offset_interval = %d,',
      inst, dir .. "/offsets", persist_ms) })
end

local function run(script_path, log)
  local rc = log .. ".rc"
  local pid = helpers.spawn(string.format("%s run %s", helpers.shq(helpers.bin),
    helpers.shq(script_path)), { log = log, rc = rc })
  return pid
end

-- Run n of instance inst over topic: script c<n>, its records in out<n>.txt and its log in
-- run<n>.log, all in dir (n "" for a test's only run). Returns the pid, the records file and
-- the log.
local function start(dir, n, ns, topic, inst, persist_ms)
  local out, log = dir .. "/out" .. n .. ".txt", dir .. "/run" .. n .. ".log"
  return run(script(dir, "c" .. n, ns, topic, out, inst, persist_ms), log), out, log
end

local function stop(pid, log)
  helpers.kill(pid, "TERM")
  assert.equal(0, cons.exit_code(log), cons.read(log))
end

-- The offsets.json of instance inst (the client id starts with the host's IP).
local function offsets_path(dir, inst)
  local p = io.popen("ls " .. helpers.shq(dir .. "/offsets") .. "/*@" .. inst .. "/" .. GROUP
    .. "/offsets.json 2>/dev/null")
  local path = p:read("*l")
  p:close()
  return path
end

-- { ["broker#qid"] = offset } of the entries of topic in a file's content.
local function entries(content, topic)
  local t = {}
  for b, q, tp, off in content:gmatch('"brokerName":"([^"]+)",%s*"queueId":(%d+),%s*"topic":"'
      .. '([^"]+)"%s*}:%s*(%d+)') do
    if tp == topic then t[b .. "#" .. q] = tonumber(off) end
  end
  return t
end

local function sum(t)
  local s = 0
  for _, v in pairs(t) do s = s + v end
  return s
end

-- Waits until the offsets.json of instance inst exists with its entries of topic adding up to n
-- (those of its .bak too when bak); returns its path.
local function wait_offsets(dir, inst, topic, n, bak)
  local path
  helpers.wait_until(function()
    path = offsets_path(dir, inst)
    return path and sum(entries(cons.read(path), topic)) == n
      and (not bak or sum(entries(cons.read(path .. ".bak"), topic)) == n)
  end, 30, "offsets.json" .. (bak and " and .bak" or "") .. " at " .. n)
  return path
end

local function produce(db, broker, topic, n, prefix)
  for i = 1, n do
    local body = prefix .. i
    assert(lib.rmq_devbroker_produce(db, broker, topic, -1, nil, nil, body, #body) >= 0)
  end
end

-- A development broker for one test (args as cons.test_broker) and its folder
-- helpers.tmpdir(tag): db, name server address, folder.
local function test_broker(args, tag)
  local db, ns = cons.test_broker(args)
  return db, ns, helpers.tmpdir(tag)
end

describe("consumer: broadcasting offsets.json", function()
  it("is left untouched, .bak included, by a run that never owns a queue", function()
    local TOPIC = "BcKeep"
    local db, ns, dir = test_broker("--topic " .. TOPIC .. ":4", "bckeep")
    produce(db, 0, TOPIC, 40, "k")
    -- A first run consumes everything and persists (several times: the .bak exists too).
    local pid, out, log = start(dir, 1, ns, TOPIC, "keep", 100)
    helpers.wait_until(function() return cons.count_lines(out) >= 40 end, 30, "40 consumed")
    local path = wait_offsets(dir, "keep", TOPIC, 40, true)
    stop(pid, log)
    local before, before_bak = cons.read(path), cons.read(path .. ".bak")
    local n = 0
    for _ in pairs(entries(before, TOPIC)) do n = n + 1 end
    assert.equal(4, n)

    -- The same consumer (same client id, so the same file) while no name server answers: it
    -- never owns a queue, persists every 100 ms, and is stopped before any rebalance.
    local dead, dead_addr = cons.start_broker("")
    lib.rmq_devbroker_stop(dead) -- its port now refuses connections
    local pid2, _, log2 = start(dir, 2, dead_addr, TOPIC, "keep", 100)
    helpers.sleep(1.5 * helpers.scale)
    stop(pid2, log2)
    assert.equal(before, cons.read(path))
    assert.equal(before_bak, cons.read(path .. ".bak"))

    -- And a later run still resumes from it: only new messages arrive.
    produce(db, 0, TOPIC, 8, "n")
    local pid3, out3, log3 = start(dir, 3, ns, TOPIC, "keep", 100)
    helpers.wait_until(function() return cons.count_lines(out3) >= 8 end, 30, "8 new consumed")
    helpers.sleep(0.5)
    stop(pid3, log3)
    for _, r in ipairs(cons.records(out3)) do assert.equal("n", r.body:sub(1, 1)) end
    assert.equal(8, cons.count_lines(out3))
  end)

  it("keeps the offsets of queues this run does not own", function()
    local TOPIC = "BcSubset"
    local db, ns, dir = test_broker("--brokers 2 --topic " .. TOPIC .. ":4", "bcsubset")
    local name_b = require("ffi").string(lib.rmq_devbroker_broker_name(db, 1))
    produce(db, 0, TOPIC, 20, "a")
    produce(db, 1, TOPIC, 20, "b")
    local pid1, out1, log1 = start(dir, 1, ns, TOPIC, "sub", 100)
    helpers.wait_until(function() return cons.count_lines(out1) >= 40 end, 30, "40 consumed")
    local path = wait_offsets(dir, "sub", TOPIC, 40)
    stop(pid1, log1)
    local first = entries(cons.read(path), TOPIC)

    -- Broker b leaves the route: this run owns broker a's queues only.
    assert.equal(0, lib.rmq_devbroker_set_down(db, 1, 1))
    produce(db, 0, TOPIC, 10, "x")
    produce(db, 1, TOPIC, 10, "y")
    local pid2, out2, log2 = start(dir, 2, ns, TOPIC, "sub", 100)
    helpers.wait_until(function() return cons.count_lines(out2) >= 10 end, 30, "10 consumed")
    helpers.wait_until(function() return sum(entries(cons.read(path), TOPIC)) == 50 end, 30,
      "broker a's new offsets persisted")
    helpers.sleep(0.5) -- more persists
    stop(pid2, log2)
    local second = entries(cons.read(path), TOPIC)
    for q = 0, 3 do
      local k = name_b .. "#" .. q
      assert.equal(first[k], second[k], k .. " kept in " .. cons.read(path))
    end

    -- Broker b is back: the next run resumes it where the file says, with no re-delivery.
    assert.equal(0, lib.rmq_devbroker_set_down(db, 1, 0))
    local pid3, out3, log3 = start(dir, 3, ns, TOPIC, "sub", 100)
    helpers.wait_until(function() return cons.count_lines(out3) >= 10 end, 30, "y consumed")
    helpers.sleep(1)
    stop(pid3, log3)
    for _, r in ipairs(cons.records(out3)) do assert.equal("y", r.body:sub(1, 1), r.body) end
    assert.equal(10, cons.count_lines(out3))
  end)

  it("goes on consuming while a write of the file is blocked, and persists once it can",
    function()
    local TOPIC = "BcSlow"
    local db, ns, dir = test_broker("--topic " .. TOPIC .. ":2", "bcslow")
    produce(db, 0, TOPIC, 10, "a")
    local pid, out, log = start(dir, "", ns, TOPIC, "slow", 300)
    local path = wait_offsets(dir, "slow", TOPIC, 10)
    -- The next write of offsets.json.tmp blocks in open() until a reader comes: a disk that
    -- does not answer.
    local fifo = path .. ".tmp"
    helpers.wait_until(function()
      return os.execute("mkfifo " .. helpers.shq(fifo) .. " 2>/dev/null") == 0
    end, 10, "mkfifo " .. fifo)
    -- A reader makes every writer of the fifo go through (the write then fails: a fifo cannot
    -- be fsync'ed); with the fifo gone, the next write makes a regular file again.
    local reader
    local function unblock()
      if not reader then
        reader = ffi.C.open(fifo, O_RDONLY + O_NONBLOCK)
        assert(reader >= 0, "open " .. fifo)
        helpers.sleep(0.2)
        os.remove(fifo)
      end
    end
    helpers.defer(function()
      unblock()
      ffi.C.close(reader)
    end)
    produce(db, 0, TOPIC, 10, "b")
    helpers.wait_until(function() return cons.count_lines(out) >= 20 end, 30, "20 consumed")
    helpers.sleep(1.5) -- a persist of the new offsets is now stuck on the fifo
    produce(db, 0, TOPIC, 10, "c")
    helpers.wait_until(function() return cons.count_lines(out) >= 30 end, 15,
      "30 consumed while the offsets write is blocked")
    assert.equal(10, sum(entries(cons.read(path), TOPIC)), "the write is still blocked")
    unblock()
    helpers.wait_until(function() return sum(entries(cons.read(path), TOPIC)) == 30 end, 15,
      "offsets.json at 30")
    stop(pid, log)
    assert.equal(30, cons.count_lines(out))
  end)

  it("writes the last offsets at shutdown before the process exits", function()
    local TOPIC = "BcLast"
    local db, ns, dir = test_broker("--topic " .. TOPIC .. ":4", "bclast")
    produce(db, 0, TOPIC, 24, "a")
    -- No periodic persist within the test: only the one at shutdown writes the file.
    local pid, out, log = start(dir, "", ns, TOPIC, "last", 600000)
    helpers.wait_until(function() return cons.count_lines(out) >= 24 end, 30, "24 consumed")
    helpers.sleep(0.3)
    assert.is_nil(offsets_path(dir, "last"))
    stop(pid, log)
    local path = offsets_path(dir, "last")
    assert.is_truthy(path, "offsets.json written at shutdown")
    assert.equal(24, sum(entries(cons.read(path), TOPIC)))
  end)
end)
