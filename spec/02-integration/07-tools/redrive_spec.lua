-- rmqlua redrive against the development broker: dead letters made by a real consumer
-- (`rmqlua run` returning rmq.DLQ) moved back to %RETRY%G and consumed again, or to their
-- original topic with topic, tags, keys and properties restored; a second run moves nothing
-- (the progress group's offsets); --where, --dry-run, and the failures (no RETRY_TOPIC, a
-- write-only DLQ as a 4.9 broker makes it, a predicate that raises).
local helpers = require "helpers"
local rh = require "run_helpers"
local wire = require "02-integration.01-devbroker.wire"

local lib = require "devbroker_ffi"
lib.rmq_log_set_level(0) -- only errors: the transport logs every connection

local PULL, UPDATE_AND_CREATE_TOPIC = 11, 17
local BOOKKEEPING = { "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "REAL_TOPIC", "REAL_QID", "DELAY",
  "RECONSUME_TIME", "MAX_RECONSUME_TIMES" }

local db, ns, broker, conn

-- Every message of topic (all queues) through raw pulls: { {q, off, body, tags, keys, props} }.
local function read_topic(topic, queues)
  local out = {}
  for q = 0, (queues or 1) - 1 do
    local off = 0
    while true do
      local r = assert(conn:request(PULL, wire.pull_ext("spec_reader", topic, q, off,
        { sys_flag = 4, subscription = "*" })))
      if r.code ~= 0 then break end
      for _, m in ipairs(wire.decode_messages(r.body, true)) do
        out[#out + 1] = { q = q, off = m.queue_offset, body = m.body, tags = m.props.TAGS,
          keys = m.props.KEYS, props = m.props, reconsume = m.reconsume, topic = m.topic }
      end
      off = tonumber(r.extFields.nextBeginOffset)
    end
  end
  return out
end

local function count(topic, queues)
  return rh.stored(db, topic, queues)
end

local function progress(group, pgroup)
  return tonumber(lib.rmq_devbroker_committed_offset(db, 0, pgroup or ("%REDRIVE%" .. group),
    "%DLQ%" .. group, 0))
end

local function redrive(args)
  return helpers.run(string.format("timeout %d %s redrive --namesrv %s %s",
    math.floor(60 * helpers.scale), helpers.bin, ns, args))
end

local function produce(topic, q, body, tags, keys, props)
  rh.produce_props(db, topic, q, body, props, tags, keys)
end

-- A consumer of group on topic: returns rmq.DLQ (every message goes to %DLQ%group), or
-- records "topic reconsume body" lines into out and succeeds.
local function consumer(dir, group, topic, out)
  return rh.write(dir, group .. (out and "-ok" or "-dlq") .. ".lua", string.format([[
local rmq = require "rmq"
local out = %s
if out then out = assert(io.open(out, "a")); out:setvbuf("no") end
return {
  consumer_group = %q, namesrv_addr = %q,
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  subscribe = { [%q] = "*" },
  consume = function(msgs)
    if not out then return rmq.DLQ end
    for i = 1, #msgs do
      local m = msgs[i]
      out:write(m.topic .. " " .. m.reconsume_times .. " " .. m.body .. "\n") -- one write a line
    end
  end,
}
]], out and string.format("%q", out) or "nil", group, ns, topic))
end

-- Store messages in topic, let a consumer of group send them all to %DLQ%group.
local function make_dead_letters(group, topic, msgs)
  for _, m in ipairs(msgs) do produce(topic, m.q or -1, m.body, m.tags, m.keys, m.props) end
  local dir = helpers.tmpdir("redrive-" .. group)
  local pid = helpers.spawn(helpers.bin .. " run " .. consumer(dir, group, topic),
    { log = dir .. "/dlq.log" })
  helpers.wait_until(function() return count("%DLQ%" .. group) >= #msgs end, 60,
    #msgs .. " dead letters of " .. group)
  helpers.kill(pid, "TERM")
  assert.are.equal(#msgs, count("%DLQ%" .. group))
  return dir
end

local lines = rh.file_lines

describe("rmqlua redrive", function()
  lazy_setup(function()
    db, ns = rh.start_broker("--delay-scale 0.001")
    broker = wire.broker_addr(db, 0)
    conn = assert(wire.connect(broker))
  end)
  lazy_teardown(function()
    if conn then conn:close() end
    if db ~= nil then lib.rmq_devbroker_stop(db) end
  end)

  it("moves every dead letter to %RETRY%G once, however often it runs; G consumes them again", function()
    lib.rmq_devbroker_create_topic(db, 0, "RdO", 2)
    local msgs = {}
    for i = 1, 6 do msgs[i] = { body = "rd" .. i, tags = "T" .. i % 2, keys = "k" .. i } end
    local dir = make_dead_letters("RdG", "RdO", msgs)

    local rc, out = redrive("--group RdG --dry-run")
    assert.are.equal(0, rc, out)
    local n = 0
    for _ in out:gmatch("would move %%DLQ%%RdG@broker%-a#0:%d+ msgId=%x+ tags=T%d keys=k%d %-> %%RETRY%%RdG") do
      n = n + 1
    end
    assert.are.equal(6, n, out)
    assert.are.equal(0, count("%RETRY%RdG"))
    assert.are.equal(-1, progress("RdG"))

    rc, out = redrive("--group RdG --verbose")
    assert.are.equal(0, rc, out)
    assert.matches("6 moved to %RETRY%RdG, 0 passed over by --where, 0 failed", out, 1, true)
    n = 0
    for src, id, dst in out:gmatch("moved %%DLQ%%RdG@broker%-a#0:(%d+) msgId=(%x+) [^\n]* %-> "
        .. "%%RETRY%%RdG msgId=(%x+) queue=broker%-a#0 offset=%d+") do
      assert.are.equal(id, dst) -- the msgId (UNIQ_KEY) travels with the message
      n = n + 1
    end
    assert.are.equal(6, n, out)
    assert.are.equal(6, count("%RETRY%RdG"))
    assert.are.equal(6, progress("RdG"))

    rc, out = redrive("--group RdG")
    assert.are.equal(0, rc, out)
    assert.matches("0 moved to %RETRY%RdG", out, 1, true)
    assert.are.equal(6, count("%RETRY%RdG"))

    -- what the retry topic holds: the dead letters' properties, a fresh reconsume count
    local back = read_topic("%RETRY%RdG")
    assert.are.equal(6, #back)
    for _, m in ipairs(back) do
      assert.are.equal("RdO", m.props.RETRY_TOPIC)
      assert.are.equal(0, m.reconsume)
      for _, k in ipairs { "DELAY", "REAL_TOPIC", "REAL_QID", "RECONSUME_TIME" } do
        assert.is_nil(m.props[k], k)
      end
    end

    -- G consumes them again, seen under their original topic
    local seen = dir .. "/seen"
    local pid = helpers.spawn(helpers.bin .. " run " .. consumer(dir, "RdG", "RdO", seen),
      { log = dir .. "/ok.log" })
    helpers.wait_until(function() return #lines(seen) >= 6 end, 60, "the 6 redriven messages")
    helpers.sleep(0.5)
    helpers.kill(pid, "TERM")
    local got = lines(seen)
    table.sort(got)
    local exp = {}
    for i = 1, 6 do exp[i] = "RdO 0 rd" .. i end
    table.sort(exp)
    assert.same(exp, got)
  end)

  it("--to-origin sends each home with its topic, tags, keys and properties", function()
    lib.rmq_devbroker_create_topic(db, 0, "RoT", 2)
    local msgs = {
      { q = 0, body = "o1", tags = "TagA", keys = "key1 key1b", props = { color = "red", n = "1" } },
      { q = 1, body = "o2", tags = "TagB", keys = "key2", props = { color = "blue" } },
      { q = 0, body = "o3", props = { only = "props" } },
      { q = 1, body = string.rep("z", 5000), tags = "Big", keys = "key4", props = { size = "5000" } },
    }
    make_dead_letters("RoG", "RoT", msgs)
    local originals = read_topic("RoT", 2)
    assert.are.equal(4, #originals)

    local rc, out = redrive("--group RoG --to-origin")
    assert.are.equal(0, rc, out)
    assert.matches("4 moved to their original topics", out, 1, true)
    local all = read_topic("RoT", 2)
    assert.are.equal(8, #all)
    local by_body = {}
    for _, m in ipairs(originals) do by_body[m.body] = { orig = m } end
    for _, m in ipairs(all) do
      local e = by_body[m.body]
      if e.orig.off ~= m.off or e.orig.q ~= m.q then e.copy = m end
    end
    for body, e in pairs(by_body) do
      local o, c = e.orig, e.copy
      assert.is_not_nil(c, "no copy of " .. body:sub(1, 10) .. " in RoT")
      assert.are.equal("RoT", c.topic)
      assert.are.equal(o.tags, c.tags)
      assert.are.equal(o.keys, c.keys)
      assert.are.equal(o.body, c.body)
      for k, v in pairs(o.props) do assert.are.equal(v, c.props[k], "property " .. k) end
      for _, k in ipairs(BOOKKEEPING) do assert.is_nil(c.props[k], k .. " left on " .. body:sub(1, 10)) end
      for k in pairs(c.props) do
        assert.is_not_nil(o.props[k], "property " .. k .. " was not on the original")
      end
    end

    rc, out = redrive("--group RoG --to-origin")
    assert.are.equal(0, rc, out)
    assert.matches("0 moved", out, 1, true)
    assert.are.equal(8, count("RoT", 2))
  end)

  it("--where moves only what the predicate selects; the others are passed over", function()
    lib.rmq_devbroker_create_topic(db, 0, "RwT", 1)
    local msgs = {}
    for i = 1, 5 do msgs[i] = { body = (i % 2 == 1 and "keep" or "drop") .. i, keys = "w" .. i } end
    local dir = make_dead_letters("RwG", "RwT", msgs)
    local where = rh.write(dir, "where.lua",
      'return function(m) return m.body:sub(1, 4) == "keep" and m:property("KEYS") ~= nil end\n')
    local rc, out = redrive("--group RwG --where " .. where .. " --dry-run")
    assert.are.equal(0, rc, out)
    assert.matches("3 would move to %RETRY%RwG, 2 passed over by --where", out, 1, true)
    rc, out = redrive("--group RwG --where " .. where)
    assert.are.equal(0, rc, out)
    assert.matches("3 moved to %RETRY%RwG, 2 passed over by --where, 0 failed", out, 1, true)
    local moved = {}
    for _, m in ipairs(read_topic("%RETRY%RwG")) do moved[#moved + 1] = m.body end
    table.sort(moved)
    assert.same({ "keep1", "keep3", "keep5" }, moved)
    -- the progress group went past all five; another one starts from the oldest again
    rc, out = redrive("--group RwG")
    assert.matches("0 moved", out, 1, true)
    rc, out = redrive("--group RwG --progress-group RwG_again --dry-run")
    assert.are.equal(0, rc, out)
    assert.matches("5 would move", out, 1, true)
  end)

  it("stops at a dead letter without RETRY_TOPIC (--to-origin) and goes on from it next time", function()
    produce("%DLQ%RfG", 0, "home", "T", "f1", { RETRY_TOPIC = "RfHome" })
    produce("%DLQ%RfG", 0, "lost", "T", "f2", {})
    produce("%DLQ%RfG", 0, "home2", "T", "f3", { RETRY_TOPIC = "RfHome" })
    local rc, out = redrive("--group RfG --to-origin")
    assert.are.equal(1, rc, out)
    assert.matches("has no RETRY_TOPIC property", out, 1, true)
    assert.matches("1 moved to their original topics, 0 passed over by --where, 1 failed", out, 1, true)
    assert.are.equal(1, progress("RfG"))
    assert.are.equal(1, count("RfHome", 8))
    rc, out = redrive("--group RfG --to-origin")
    assert.are.equal(1, rc, out)
    assert.are.equal(1, count("RfHome", 8))
    assert.are.equal(1, progress("RfG"))
  end)

  it("explains a dead-letter topic the broker will not let it read (a 4.9 broker's default)", function()
    local r = assert(conn:request(UPDATE_AND_CREATE_TOPIC, { topic = "%DLQ%RpG", defaultTopic = "TBW102",
      readQueueNums = "1", writeQueueNums = "1", perm = "2", topicFilterType = "SINGLE_TAG" }))
    assert.are.equal(0, r.code)
    local rc, out = redrive("--group RpG")
    assert.are.equal(1, rc, out)
    assert.matches("topic %DLQ%RpG is not readable", out, 1, true)
    assert.matches("updateTopicPerm", out, 1, true)
  end)

  it("moves nothing of a batch whose --where raises", function()
    produce("%DLQ%RxG", 0, "x1", nil, nil, { RETRY_TOPIC = "RxT" })
    local dir = helpers.tmpdir("redrive-where-error")
    local where = rh.write(dir, "bad.lua", 'return function(m) error("predicate blew up") end\n')
    local rc, out = redrive("--group RxG --where " .. where)
    assert.are.equal(1, rc, out)
    assert.matches("predicate blew up", out, 1, true)
    assert.are.equal(0, count("%RETRY%RxG"))
    assert.are.equal(-1, progress("RxG"))
  end)

  it("finishes and records the batch it is moving when stopped (SIGTERM) in the middle of it", function()
    -- G's topics, as its consumers' heartbeat and first dead letter make them
    lib.rmq_devbroker_create_topic(db, 0, "%RETRY%RsG", 1)
    lib.rmq_devbroker_create_topic(db, 0, "%DLQ%RsG", 1)
    local dir = helpers.tmpdir("redrive-stop")
    local marker = dir .. "/started"
    -- the predicate says it started, then takes a while over each message
    local where = rh.write(dir, "slow.lua",
      "return function(m)\n" .. rh.busy_after_marker(marker) .. "  return true\nend\n")
    local function stopped_run(name)
      os.remove(marker)
      return rh.term_when_started(string.format("%s redrive --namesrv %s --group RsG --where %s",
        helpers.bin, ns, where), marker, dir .. "/" .. name .. ".log")
    end

    for i = 1, 3 do produce("%DLQ%RsG", 0, "s" .. i, nil, nil, { RETRY_TOPIC = "RsT" }) end
    local rc, out = stopped_run("first")
    assert.are.equal(0, rc, out)
    assert.matches("3 moved to %RETRY%RsG", out, 1, true)
    assert.are.equal(3, count("%RETRY%RsG"))
    assert.are.equal(3, progress("RsG"))

    -- a message that cannot be sent while stopping is still a failure (exit 1), not moved past
    produce("%DLQ%RsG", 0, "s4", nil, nil, { RETRY_TOPIC = "RsT" })
    assert.are.equal(0, lib.rmq_devbroker_push_error(db, 0, 310 --[[SEND_MESSAGE_V2]],
      1 --[[SYSTEM_ERROR]], 100))
    helpers.defer(function() lib.rmq_devbroker_clear_errors(db) end)
    rc, out = stopped_run("second")
    lib.rmq_devbroker_clear_errors(db)
    assert.are.equal(1, rc, out)
    assert.matches("0 moved to %RETRY%RsG, 0 passed over by --where, 1 failed", out, 1, true)
    assert.are.equal(3, count("%RETRY%RsG"))
    assert.are.equal(3, progress("RsG"))
  end)

  it("counts the dead letters of queues whose broker reports a max offset near 2^63 (saturated)", function()
    lib.rmq_devbroker_create_topic(db, 0, "%DLQ%RxG", 2)
    local INT64_MAX = 0x7fffffffffffffffLL
    assert.equal(0, lib.rmq_devbroker_set_told_max_query(db, 0, INT64_MAX - 2))
    helpers.defer(function() lib.rmq_devbroker_set_told_max_query(db, 0, -INT64_MAX - 1) end)
    -- Two queues of 2^63 - 3 each: their sum is past an int64.
    local rc, out = redrive("--group RxG --dry-run")
    assert.are.equal(0, rc, out)
    assert.matches("%DLQ%RxG: 9223372036854775807 dead letter(s) after the progress of group "
      .. "%REDRIVE%RxG, in 2 queue(s) (dry run)", out, 1, true)
    assert.matches("rmqlua redrive: done, %DLQ%RxG: ", out, 1, true) -- the run ends as usual
  end)

  it("reads and moves through the name server of the address service when neither --namesrv nor NAMESRV_ADDR is given", function()
    -- The group's dead-letter and retry topics, one queue each, as a broker makes them.
    lib.rmq_devbroker_create_topic(db, 0, "%DLQ%RnG", 1)
    lib.rmq_devbroker_create_topic(db, 0, "%RETRY%RnG", 1)
    for i = 1, 3 do produce("%DLQ%RnG", 0, "rn" .. i, nil, nil, { RETRY_TOPIC = "RnO" }) end
    local svc = rh.address_service("ns-redrive", ns .. "\n")
    local function run(args)
      return helpers.run(string.format("env -u NAMESRV_ADDR timeout %d %s redrive --group RnG "
        .. "--set namesrv_domain=%s --set namesrv_domain_subgroup=ns-redrive %s",
        math.floor(60 * helpers.scale), helpers.bin, svc.domain, args))
    end
    local out = rh.expect(run, "", 0, "3 moved to %RETRY%RnG",
      "name server list from " .. svc.url .. ": " .. ns)
    assert.are.equal(3, count("%RETRY%RnG"), out)
    assert.are.equal(3, progress("RnG"))

    -- The service gives no list: the URL and the fault named, exit 1, nothing read or moved.
    produce("%DLQ%RnG", 0, "rn4", nil, nil, { RETRY_TOPIC = "RnO" })
    svc.set("\n")
    rh.expect(run, "", 1, "rmqlua redrive: name server address service " .. svc.url
      .. " answered an empty body")
    svc.stop()
    rh.expect(run, "", 1, "rmqlua redrive: name server address service " .. svc.url
      .. ": cannot connect")
    rh.expect(run, "--set namesrv_addr_refresh_interval=5", 2,
      "--set namesrv_addr_refresh_interval: not an option of rmqlua redrive")
    assert.are.equal(3, count("%RETRY%RnG"))
    assert.are.equal(3, progress("RnG"))
  end)

  it("has nothing to do for a group without dead letters, and wants --group", function()
    rh.expect(redrive, "--group NoDeadLetters", 0,
      "nothing to redrive: %DLQ%NoDeadLetters does not exist")
    rh.expect(redrive, "", 2, "--group is required")
    rh.expect(redrive, "--group 'bad group'", 2)
    local dir = helpers.tmpdir("redrive-folder")
    rh.expect(redrive, "--group NoDeadLetters --where " .. dir, 2,
      "--where: cannot open " .. dir .. ": Is a directory")
    local bad = dir .. "/bad.lua" -- written with rh.write(dir, "bad.lua", ...)
    rh.write(dir, "bad.lua", "return function(m\n")
    local out = rh.expect(redrive, "--group NoDeadLetters --where " .. bad, 2,
      "--where: " .. bad .. ":2: ")
    assert.is_nil(out:find("traceback", 1, true), out)
  end)
end)
