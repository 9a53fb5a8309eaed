-- rmqlua send against the development broker (started in-process through the FFI): what it
-- stores is read back with raw PULL_MESSAGE frames (rawmq.lua), and what it sent on the wire
-- with the broker's request recorder.
local helpers = require "helpers"
local ffi = require "ffi"
local bit = require "bit"
local rh = require "run_helpers"
local raw = dofile(helpers.root .. "/spec/02-integration/02-producer/rawmq.lua")

require "devbroker_ffi" -- rmq_devbroker_* for helpers.lib()

local ALL, NAMESRV = -2, -1
local SEND_V2, ROUTE = 310, 105

local lib = helpers.lib()
local bin = helpers.bin
local tmpdir = helpers.file_tmpdir("send")

local function start_broker(args)
  local err = ffi.new("char[256]")
  local db = lib.rmq_devbroker_start(args, err, 256)
  assert(db ~= nil, "devbroker: " .. ffi.string(err))
  return db, ffi.string(lib.rmq_devbroker_addr(db))
end

local function recorded(db, idx, key)
  local buf = ffi.new("char[65536]")
  local n = lib.rmq_devbroker_request_ext(db, ALL, SEND_V2, idx, key, buf, 65536)
  if n < 0 then return nil end
  return ffi.string(buf, n)
end

local function send(ns, args, stdin)
  local cmd = bin .. " send --namesrv " .. ns .. " " .. args
  if stdin then
    local f = os.tmpname()
    local h = io.open(f, "wb"); h:write(stdin); h:close()
    cmd = cmd .. " < " .. f
    local rc, out = helpers.run(cmd)
    os.remove(f)
    return rc, out
  end
  return helpers.run(cmd .. " < /dev/null")
end

local function sorted_bodies(msgs)
  local t = {}
  for i, m in ipairs(msgs) do t[i] = m.body end
  table.sort(t)
  return t
end

describe("rmqlua send (usage)", function()
  it("prints help and exits 0", function()
    local rc, out = helpers.run(bin .. " send --help")
    assert.equal(0, rc)
    assert.matches("usage: rmqlua send", out, 1, true)
    assert.matches("--count N", out, 1, true)
  end)

  it("exits 2 for usage errors, naming the problem", function()
    local cases = {
      {"send --topic T", "--namesrv is required"},
      {"send --namesrv 127.0.0.1:1", "--topic is required"},
      {"send --namesrv 127.0.0.1:1 --topic T --bogus", "unknown option '--bogus'"},
      {"send --namesrv 127.0.0.1:1 --topic T --size 10", "--size needs --count"},
      {"send --namesrv 127.0.0.1:1 --topic T --count x", "--count needs an integer"},
      {"send --namesrv 127.0.0.1:1 --topic T --count 1 --file /etc/hostname", "exclude each other"},
      {"send --namesrv 127.0.0.1:1 --topic 'bad topic'", "bad topic 'bad topic'"},
      {"send --namesrv 127.0.0.1:1 --topic T --property novalue", "--property needs key=value"},
      {"send --namesrv 127.0.0.1:1 --topic T --file /nonexistent/x", "cannot open /nonexistent/x"},
      {"send --namesrv 127.0.0.1:1 --topic T --delay 19", "--delay needs an integer in 1..18"},
      {"send --namesrv 127.0.0.1:1 --topic T --property TAGS=x", "--property TAGS: the name is reserved"},
      {"send --namesrv 127.0.0.1:1 --topic T --rate 100", "--rate needs --count"},
      {"send --namesrv 127.0.0.1:1 --topic T --count 1 --rate 0",
        "--rate needs an integer in 1..10000000"},
      {"send --namesrv 127.0.0.1:1 --topic T --body-template /etc/hostname",
        "--body-template needs --count"},
      {"send --namesrv 127.0.0.1:1 --topic T --count 1 --size 5 --body-template /etc/hostname",
        "--body-template and --size exclude each other"},
      {"send --namesrv 127.0.0.1:1 --topic T --count 1 --body-template /nonexistent/t",
        "cannot open /nonexistent/t"},
      {"send --topic T --set namesrv_domain=127.0.0.1:99999", "rmqlua send: --set namesrv_domain: "
        .. "name server address service \"http://127.0.0.1:99999/rocketmq/nsaddr\": bad host or port"},
      {"send --topic T --set namesrv_addr_refresh_interval=5",
        "--set namesrv_addr_refresh_interval: not an option of rmqlua send"},
    }
    for _, c in ipairs(cases) do
      local rc, out = helpers.run("NAMESRV_ADDR= " .. bin .. " " .. c[1] .. " < /dev/null")
      assert.equal(2, rc, c[1] .. " -> " .. out)
      assert.matches(c[2], out, 1, true)
    end
  end)
end)

describe("rmqlua send (development broker)", function()
  local db, ns

  lazy_setup(function()
    db, ns = start_broker("--brokers 2 --topic SendT:4 --topic CountT:4 --topic BigT:2 "
      .. "--topic RetryT:4 --topic DelayT:4 --topic StdinT:4 --topic RateT:2 --topic TmplT:2 "
      .. "--delay-scale 0.01")
  end)

  lazy_teardown(function()
    raw.close_all()
    if db then lib.rmq_devbroker_stop(db) end
  end)

  before_each(function()
    lib.rmq_devbroker_clear_errors(db)
    lib.rmq_devbroker_reset_counts(db)
  end)

  it("sends stdin lines with tags, keys and properties; a pull reads them back", function()
    local rc, out = send(ns, "--topic SendT --tags TagA --keys 'k1 k2' --property color=red "
      .. "--property n=7 --verbose", "one\ntwo\r\n\nthree")
    assert.equal(0, rc, out)
    assert.matches("sent 3, failed 0 in", out, 1, true)

    -- What went on the wire: SEND_MESSAGE_V2 with the V2 short keys.
    assert.equal(3, lib.rmq_devbroker_count(db, ALL, SEND_V2))
    assert.equal("DEFAULT_PRODUCER", recorded(db, 0, "a"))
    assert.equal("SendT", recorded(db, 0, "b"))
    assert.equal("TBW102", recorded(db, 0, "c"))
    assert.equal("4", recorded(db, 0, "d"))
    assert.equal("0", recorded(db, 0, "f"))
    assert.equal("0", recorded(db, 0, "h"))
    assert.equal("0", recorded(db, 0, "j"))
    assert.equal("false", recorded(db, 0, "k"))
    assert.equal("false", recorded(db, 0, "m"))
    assert.is_nil(recorded(db, 0, "l"))
    local wire_props = raw.parse_props(recorded(db, 0, "i"))
    assert.equal("true", wire_props.WAIT)
    assert.is_nil(wire_props.DELAY)
    local born = tonumber(recorded(db, 0, "g"))
    assert.truthy(born and math.abs(born - os.time() * 1000) < 600000)

    -- The verbose lines name the ids and queues.
    local verbose = {}
    for status, uniq, omid, broker, q, off in out:gmatch(
        "(SEND_OK) msgId=(%x+) offsetMsgId=(%x+) queue=SendT:([%w%-_]+):(%d+) queueOffset=(%d+)") do
      verbose[uniq] = {omid = omid, broker = broker, q = tonumber(q), off = tonumber(off)}
    end

    local msgs = assert(raw.pull_all(ns, "SendT"))
    assert.equal(3, #msgs)
    assert.same({"one", "three", "two"}, sorted_bodies(msgs))
    for _, m in ipairs(msgs) do
      assert.equal("SendT", m.topic)
      assert.equal("TagA", m.props.TAGS)
      assert.equal("k1 k2", m.props.KEYS)
      assert.equal("red", m.props.color)
      assert.equal("7", m.props.n)
      assert.matches("^%x+$", m.props.UNIQ_KEY)
      assert.equal(32, #m.props.UNIQ_KEY)
      assert.equal(0, m.reconsume_times)
      local v = verbose[m.props.UNIQ_KEY]
      assert.truthy(v, "verbose line for " .. m.props.UNIQ_KEY)
      assert.equal(m.broker_name, v.broker)
      assert.equal(m.queue_id, v.q)
      assert.equal(m.queue_offset, v.off)
    end
  end)

  it("keeps each --verbose line whole when its log lines share the file (stdout and stderr as one)", function()
    -- Debug logs of every request go to stderr while the verbose lines go to stdout; both are
    -- one file here, as when a script runs `rmqlua send --verbose > log 2>&1` and reads the ids
    -- back: a line cut by a log line loses its message id.
    local rc, out = send(ns, "--topic SendWhole --count 3000 --size 10 --verbose --log-debug remoting")
    assert.equal(0, rc, out:sub(-2000))
    local whole, cut = 0, {}
    for line in out:gmatch("[^\n]+") do
      if line:find("SEND_OK", 1, true) then
        if line:match("^SEND_OK msgId=%x+ offsetMsgId=%x+ queue=SendWhole:[%w%-_]+:%d+ queueOffset=%d+$") then
          whole = whole + 1
        elseif #cut < 3 then
          cut[#cut + 1] = line
        end
      end
    end
    assert.same({}, cut)
    assert.equal(3000, whole)
  end)

  it("sends every line of a long standard input (lines cut across 64 KiB reads)", function()
    local lines = {}
    for i = 1, 6000 do lines[i] = ("stdin-line-%05d"):format(i) end
    local rc, out = send(ns, "--topic StdinT --window 64", table.concat(lines, "\n") .. "\n")
    assert.equal(0, rc, out)
    assert.matches("sent 6000, failed 0", out, 1, true)
    local msgs = assert(raw.pull_all(ns, "StdinT"))
    assert.equal(6000, #msgs)
    local seen = {}
    for _, m in ipairs(msgs) do
      local n = assert(tonumber(m.body:match("^stdin%-line%-(%d+)$")), m.body)
      seen[n] = (seen[n] or 0) + 1
    end
    for i = 1, 6000 do assert.equal(1, seen[i], "line " .. i) end
  end)

  it("sends --delay as the DELAY property; the broker delivers the message later", function()
    local rc, out = send(ns, "--topic DelayT --delay 2", "later\n")
    assert.equal(0, rc, out)
    assert.equal("2", raw.parse_props(recorded(db, 0, "i")).DELAY)
    local msgs
    helpers.wait_until(function()
      msgs = raw.pull_all(ns, "DelayT")
      return msgs and #msgs == 1
    end, 10, "the delayed message in DelayT")
    assert.equal("later", msgs[1].body)
    assert.equal("2", msgs[1].props.DELAY)
  end)

  it("generates --count N bodies of --size S, round robin over the queues of both brokers", function()
    local rc, out = send(ns, "--topic CountT --count 400 --size 150 --keys 'key-{n}'")
    assert.equal(0, rc, out)
    assert.matches("sent 400, failed 0 in", out, 1, true)
    local msgs = assert(raw.pull_all(ns, "CountT"))
    assert.equal(400, #msgs)
    local seen, per_queue = {}, {}
    for _, m in ipairs(msgs) do
      assert.equal(150, #m.body)
      local n = assert(tonumber(m.body:match("^(%d+):")), m.body)
      assert.is_nil(seen[n])
      seen[n] = true
      assert.equal("key-" .. n, m.props.KEYS)
      local q = m.broker_name .. ":" .. m.queue_id
      per_queue[q] = (per_queue[q] or 0) + 1
    end
    for n = 0, 399 do assert.truthy(seen[n], "message " .. n) end
    -- 8 queues (4 on each broker), 400 messages in round robin: 50 each.
    local nq = 0
    for q, c in pairs(per_queue) do
      nq = nq + 1
      assert.equal(50, c, q)
    end
    assert.equal(8, nq)
  end)

  it("--rate R hands message k to the producer no earlier than k/R s after the start", function()
    -- 60 messages at 100/s: message k is born (stamped by the producer) at least 10k ms after
    -- the command started, so the last one at least 590 ms after it, whatever the load.
    ffi.cdef [[
      typedef struct { long tv_sec; long tv_nsec; } send_spec_ts_t;
      int send_spec_clock_gettime(int, send_spec_ts_t *) __asm__("clock_gettime");
    ]]
    local ts = ffi.new("send_spec_ts_t")
    ffi.C.send_spec_clock_gettime(0, ts) -- CLOCK_REALTIME, as the born timestamp
    local t0 = tonumber(ts.tv_sec) * 1000 + math.floor(tonumber(ts.tv_nsec) / 1e6)
    local rc, out = send(ns, "--topic RateT --count 60 --rate 100")
    assert.equal(0, rc, out)
    assert.matches("sent 60, failed 0 in", out, 1, true)
    local msgs = assert(raw.pull_all(ns, "RateT"))
    assert.equal(60, #msgs)
    local seen = 0
    for _, m in ipairs(msgs) do
      local n = assert(tonumber(m.body:match("^(%d+):")), m.body)
      local born = tonumber(m.born_ts)
      assert.is_true(born >= t0 + 10 * n - 1,
        string.format("message %d born %d ms after the start (at least %d)", n, born - t0, 10 * n))
      seen = seen + 1
    end
    assert.equal(60, seen)
  end)

  it("--body-template F fills {n}, {n%K} and {now_us} per message, keeps other braces", function()
    local tpl = tmpdir .. "/order.json"
    local h = assert(io.open(tpl, "wb"))
    h:write('{"id":{n},"user":"u{n%3}","sent_us":{now_us},"items":[{"sku":"{x}"}],"m":"{n%}"}')
    h:close()
    local before_us = os.time() * 1000000 - 2000000
    local rc, out = send(ns, "--topic TmplT --count 7 --body-template " .. tpl)
    assert.equal(0, rc, out)
    local after_us = os.time() * 1000000 + 2000000
    local msgs = assert(raw.pull_all(ns, "TmplT"))
    assert.equal(7, #msgs)
    local seen = {}
    for _, m in ipairs(msgs) do
      local id, user, us = m.body:match('^{"id":(%d+),"user":"u(%d+)","sent_us":(%d+),'
        .. '"items":%[{"sku":"{x}"}%],"m":"{n%%}"}$')
      assert.truthy(id, m.body)
      id, user, us = tonumber(id), tonumber(user), tonumber(us)
      assert.is_nil(seen[id])
      seen[id] = true
      assert.equal(id % 3, user)
      assert.is_true(us >= before_us and us <= after_us, "sent_us " .. us)
      -- {now_us} is the wall clock in microseconds: within a second of the born timestamp (ms).
      assert.is_true(math.abs(us / 1000 - tonumber(m.born_ts)) < 1000, m.body)
    end
    for n = 0, 6 do assert.truthy(seen[n], "message " .. n) end
  end)

  it("compresses a body of 4096 bytes or more with zlib (sysFlag 0x301), and not with --no-compress", function()
    local f = tmpdir .. "/producer_big.bin"
    local parts = {}
    for i = 1, 400 do parts[i] = string.format("line %05d of a large body;", i) end
    local big = table.concat(parts)
    assert.truthy(#big >= 4096)
    local h = io.open(f, "wb"); h:write(big); h:close()

    local rc, out = send(ns, "--topic BigT --file " .. f)
    assert.equal(0, rc, out)
    rc, out = send(ns, "--topic BigT --no-compress --file " .. f)
    assert.equal(0, rc, out)
    local small = tmpdir .. "/producer_small.bin"
    h = io.open(small, "wb"); h:write(big:sub(1, 4095)); h:close()
    rc, out = send(ns, "--topic BigT --file " .. small)
    assert.equal(0, rc, out)
    os.remove(f); os.remove(small)

    assert.equal("769", recorded(db, 0, "f"))
    assert.equal("0", recorded(db, 1, "f"))
    assert.equal("0", recorded(db, 2, "f"))
    local msgs = assert(raw.pull_all(ns, "BigT"))
    assert.equal(3, #msgs)
    local compressed, plain = 0, 0
    for _, m in ipairs(msgs) do
      if #m.body == #big then
        assert.equal(big, m.body)
      else
        assert.equal(big:sub(1, 4095), m.body)
      end
      if m.sys_flag % 2 == 1 then
        compressed = compressed + 1
        assert.equal(0x300, bit.band(m.sys_flag, 0x700))
        assert.truthy(#m.stored_body < #m.body)
        assert.equal("\120\94", m.stored_body:sub(1, 2)) -- zlib header of level 5: 78 5E
      else
        plain = plain + 1
        assert.equal(m.body, m.stored_body)
      end
    end
    assert.equal(1, compressed)
    assert.equal(2, plain)
  end)

  it("auto-creates an unknown topic through the TBW102 route", function()
    local topic = "AutoCreated_" .. os.time()
    assert.is_nil((raw.route(ns, topic)))
    local rc, out = send(ns, "--topic " .. topic .. " --count 12 --size 20")
    assert.equal(0, rc, out)
    assert.matches("sent 12, failed 0", out, 1, true)
    -- Asked for the topic, got TOPIC_NOT_EXIST, then asked for TBW102.
    local buf = ffi.new("char[256]")
    local seen = {}
    for i = 0, lib.rmq_devbroker_count(db, NAMESRV, ROUTE) - 1 do
      local n = lib.rmq_devbroker_request_ext(db, NAMESRV, ROUTE, i, "topic", buf, 256)
      if n > 0 then seen[ffi.string(buf, n)] = true end
    end
    assert.truthy(seen[topic])
    assert.truthy(seen.TBW102)
    local msgs
    helpers.wait_until(function()
      msgs = raw.pull_all(ns, topic)
      return msgs and #msgs == 12
    end, 10, "auto-created topic route and messages")
  end)

  it("retries a retryable broker error on another broker", function()
    -- One injected SYSTEM_ERROR on each broker: attempt 1 fails on broker X, attempt 2 avoids X
    -- (lastBrokerName) and fails on Y, attempt 3 avoids Y and is stored on X.
    lib.rmq_devbroker_push_error(db, ALL, SEND_V2, 1 --[[SYSTEM_ERROR]], 1)
    local rc, out = send(ns, "--topic RetryT --verbose", "retry me\n")
    assert.equal(0, rc, out)
    assert.matches("sent 1, failed 0", out, 1, true)
    assert.equal(3, lib.rmq_devbroker_count(db, ALL, SEND_V2))
    local a, b = lib.rmq_devbroker_count(db, 0, SEND_V2), lib.rmq_devbroker_count(db, 1, SEND_V2)
    assert.same({1, 2}, a < b and {a, b} or {b, a})
    assert.equal(recorded(db, 0, "i"), recorded(db, 2, "i")) -- the same UNIQ_KEY on every attempt
    local msgs = assert(raw.pull_all(ns, "RetryT"))
    assert.equal(1, #msgs)
    assert.equal("retry me", msgs[1].body)
  end)

  it("gives up after 1 + 2 attempts and exits 1 naming the topic and the broker's answer", function()
    lib.rmq_devbroker_push_error(db, ALL, SEND_V2, 14 --[[SERVICE_NOT_AVAILABLE]], 3)
    local rc, out = send(ns, "--topic RetryT", "never stored\n")
    assert.equal(1, rc, out)
    assert.matches("sent 0, failed 1", out, 1, true)
    assert.matches("send to topic RetryT failed after 3 attempts", out, 1, true)
    assert.matches("SERVICE_NOT_AVAILABLE", out, 1, true)
    assert.equal(3, lib.rmq_devbroker_count(db, ALL, SEND_V2))
  end)

  it("retries on another broker when a broker drops the connection", function()
    lib.rmq_devbroker_push_error(db, 0, SEND_V2, -1 --[[disconnect]], 1)
    local rc, out = send(ns, "--topic RetryT --count 10 --window 1")
    assert.equal(0, rc, out)
    assert.matches("sent 10, failed 0", out, 1, true)
    -- Round robin reaches broker 0 within 10 sends; its dropped attempt went to broker 1.
    assert.equal(11, lib.rmq_devbroker_count(db, ALL, SEND_V2))
  end)

  it("fails a send that gets no answer within --timeout", function()
    lib.rmq_devbroker_set_latency(db, ALL, SEND_V2, 3000)
    helpers.defer(function() lib.rmq_devbroker_set_latency(db, ALL, SEND_V2, 0) end)
    local rc, out = send(ns, "--topic RetryT --timeout 300", "slow\n")
    assert.equal(1, rc, out)
    assert.matches("sent 0, failed 1", out, 1, true)
    -- On a slow machine the first attempt can use up the budget and a second one follows.
    assert.matches("send to topic RetryT failed[^:]*: broker broker%-%a %(127.0.0.1:%d+%) queue %d: .*time", out)
    assert.matches("timed out after 300 ms", out, 1, true)
    assert.matches("(ERR_TIMEOUT)", out, 1, true)
  end)

  it("does not retry a non-retryable broker error", function()
    lib.rmq_devbroker_push_error(db, ALL, SEND_V2, 13 --[[MESSAGE_ILLEGAL]], 1)
    local rc, out = send(ns, "--topic RetryT", "illegal\n")
    assert.equal(1, rc, out)
    assert.matches("sent 0, failed 1", out, 1, true)
    assert.matches("send to topic RetryT failed: broker broker%-%a %(127.0.0.1:%d+%) queue %d answered MESSAGE_ILLEGAL", out)
    assert.equal(1, lib.rmq_devbroker_count(db, ALL, SEND_V2))
  end)
end)

describe("rmqlua send (failing name server)", function()
  it("fails every message with a clear error and exits 1", function()
    -- A listening socket that is closed again: nothing listens on that port any more.
    local rc, out = helpers.run(bin .. " send --namesrv 127.0.0.1:1 --topic NoNs --count 3 < /dev/null")
    assert.equal(1, rc, out)
    assert.matches("sent 0, failed 3", out, 1, true)
    assert.matches("send to topic NoNs failed: no route info for the topic", out, 1, true)
    assert.matches("127.0.0.1:1", out, 1, true)
  end)

  it("fails when the name server does not know the topic nor TBW102", function()
    local db, ns = start_broker("")
    helpers.defer(function() lib.rmq_devbroker_stop(db) end)
    lib.rmq_devbroker_push_error(db, NAMESRV, ROUTE, 17 --[[TOPIC_NOT_EXIST]], 2)
    local rc, out = helpers.run(bin .. " send --namesrv " .. ns .. " --topic Missing --count 1 < /dev/null")
    assert.equal(1, rc, out)
    assert.matches("no route info for the topic", out, 1, true)
    assert.matches("TOPIC_NOT_EXIST", out, 1, true)
  end)
end)

describe("rmqlua send (name server address service)", function()
  -- `rmqlua send --topic NsHttpT ARGS` with $NAMESRV_ADDR as env_ns says (unset when nil) and
  -- the address service of svc: exit code and output.
  local function send_by(svc, args, env_ns)
    return helpers.run(("%s %s send --topic NsHttpT --set namesrv_domain=%s %s < /dev/null")
      :format(env_ns and "NAMESRV_ADDR=" .. env_ns or "env -u NAMESRV_ADDR", bin, svc.domain, args))
  end

  it("sends through the name server the service names when neither --namesrv nor NAMESRV_ADDR is given", function()
    local db, ns = start_broker("--topic NsHttpT:2")
    helpers.defer(function() lib.rmq_devbroker_stop(db) end)
    local svc = rh.address_service("ns-send", ns .. "\n")
    local rc, out = send_by(svc, "--set namesrv_domain_subgroup=ns-send --count 5")
    assert.equal(0, rc, out)
    assert.matches("sent 5, failed 0", out, 1, true)
    assert.matches("name server list from " .. svc.url .. ": " .. ns, out, 1, true)
    assert.equal(5, lib.rmq_devbroker_count(db, ALL, SEND_V2))
    assert.is_true(lib.rmq_devbroker_count(db, NAMESRV, ROUTE) > 0)

    -- NAMESRV_ADDR comes first: the service (now down) is not asked.
    svc.stop()
    rc, out = send_by(svc, "--set namesrv_domain_subgroup=ns-send --count 2", ns)
    assert.equal(0, rc, out)
    assert.matches("sent 2, failed 0", out, 1, true)
    assert.is_nil(out:find("address service", 1, true), out)
    assert.equal(7, lib.rmq_devbroker_count(db, ALL, SEND_V2))
  end)

  it("takes the service from the environment (ROCKETMQ_NAMESRV_DOMAIN, ..._SUBGROUP)", function()
    local db, ns = start_broker("--topic NsHttpT:2")
    helpers.defer(function() lib.rmq_devbroker_stop(db) end)
    local svc = rh.address_service("ns-envsend", ns .. "\n")
    local rc, out = helpers.run(("env -u NAMESRV_ADDR ROCKETMQ_NAMESRV_DOMAIN=%s "
      .. "ROCKETMQ_NAMESRV_DOMAIN_SUBGROUP=ns-envsend %s send --topic NsHttpT --count 4 < /dev/null")
      :format(svc.domain, bin))
    assert.equal(0, rc, out)
    assert.matches("name server list from " .. svc.url .. ": " .. ns, out, 1, true)
    assert.equal(4, lib.rmq_devbroker_count(db, ALL, SEND_V2))
  end)

  it("names the URL and the fault and exits 1 when the service gives no list: garbage, empty, 404, down", function()
    local db = start_broker("--topic NsHttpT:2")
    helpers.defer(function() lib.rmq_devbroker_stop(db) end)
    local svc = rh.address_service("nsaddr", "no address here\n") -- the default subgroup
    local rc, out = send_by(svc, "--count 3")
    assert.equal(1, rc, out)
    assert.matches("rmqlua send: name server address service " .. svc.url
      .. " answered \"no address here\": bad name server address", out, 1, true)
    svc.set("\r\n")
    rc, out = send_by(svc, "--count 3")
    assert.equal(1, rc, out)
    assert.matches("rmqlua send: name server address service " .. svc.url
      .. " answered an empty body", out, 1, true)
    rc, out = send_by(svc, "--count 3 --set namesrv_domain_subgroup=other")
    assert.equal(1, rc, out)
    assert.matches("rmqlua send: name server address service http://" .. svc.domain
      .. "/rocketmq/other: HTTP status 404", out, 1, true)
    svc.stop()
    rc, out = send_by(svc, "--count 3")
    assert.equal(1, rc, out)
    assert.matches("rmqlua send: name server address service " .. svc.url .. ": cannot connect",
      out, 1, true)
    assert.equal(0, lib.rmq_devbroker_count(db, NAMESRV, ROUTE))
    assert.equal(0, lib.rmq_devbroker_count(db, ALL, SEND_V2))
  end)
end)
