-- rmqlua tail against the development broker: every starting point (first, last, an offset, N
-- before the end, a time as @ms and as a local date) with every filter (none, tags, SQL92), one
-- queue or all, the line format, JSON (binary bodies as base64), a Lua --handler, -n, -e, and no
-- offset ever committed.
local ffi = require "ffi"
local cjson = require "cjson"
local helpers = require "helpers"
local rh = require "run_helpers"

local lib = require "devbroker_ffi"
lib.rmq_log_set_level(0) -- only errors: the transport logs every connection

pcall(ffi.cdef, [[
struct tail_timeval { long tv_sec; long tv_usec; };
int gettimeofday(struct tail_timeval *tv, void *tz);
]])
local function now_ms()
  local tv = ffi.new("struct tail_timeval")
  ffi.C.gettimeofday(tv, nil)
  return tonumber(tv.tv_sec) * 1000 + math.floor(tonumber(tv.tv_usec) / 1000)
end

local PULL, ROUTE = 11, 105
local NAMESRV = rh.NAMESRV
local TOPIC = "TailT"

local db, ns
-- Everything stored, in store order: { q =, off =, body =, tags =, keys =, props = {} }
local stored = {}
local split_ms -- store time between the two halves

local function produce(q, body, tags, keys, props)
  local off = rh.produce_props(db, TOPIC, q, body, props, tags, keys)
  stored[#stored + 1] = { q = q, off = off, body = body, tags = tags, keys = keys,
    props = props or {} }
end

-- Store bodies on queue 0 of topic: at offsets 0, 1, ... (asserted).
local function put_bodies(topic, bodies)
  for i, body in ipairs(bodies) do
    assert(lib.rmq_devbroker_produce(db, 0, topic, 0, nil, nil, body, #body) == i - 1)
  end
end

-- `rmqlua tail` of topic (TOPIC when not given) with args: exit code and output.
local function tail(args, topic)
  return helpers.run(string.format("timeout %d %s tail %s --namesrv %s %s 2>&1",
    math.floor(60 * helpers.scale), helpers.bin, topic or TOPIC, ns, args))
end

-- The lines tail printed with --format '%q %o %s', as a sorted list of "q:off:body".
local function got_of(out)
  local t = {}
  for q, off, body in out:gmatch("M (%d+) (%d+) ([^\n]*)\n") do
    t[#t + 1] = q .. ":" .. off .. ":" .. body
  end
  table.sort(t)
  return t
end

local function want(pred)
  local t = {}
  for _, m in ipairs(stored) do
    if pred(m) then t[#t + 1] = m.q .. ":" .. m.off .. ":" .. m.body end
  end
  table.sort(t)
  return t
end

local FILTERS = {
  { name = "no filter", args = "", keep = function() return true end },
  { name = "--tags", args = "--tags 'TagA || TagC'",
    keep = function(m) return m.tags == "TagA" or m.tags == "TagC" end },
  -- amount compared as a double; "x" makes the comparison throw (no match), absent is NULL
  { name = "--sql", args = [[--sql "region = 'eu' AND amount > 10.0"]],
    keep = function(m)
      local a = tonumber(m.props.amount or "")
      return m.props.region == "eu" and a ~= nil and a > 10
    end },
}

describe("rmqlua tail", function()
  lazy_setup(function()
    db, ns = rh.start_broker("--topic " .. TOPIC .. ":2")
    local regions = { "eu", "us" }
    local tags = { "TagA", "TagB", "TagC" }
    local function half(first, last)
      for i = first, last do
        local props = { region = regions[i % 2 + 1] }
        if i % 5 ~= 0 then props.amount = i % 7 == 0 and "x" or tostring(i * 3) end
        produce(i % 2, "m" .. i, tags[i % 3 + 1], "k" .. i, props)
      end
    end
    half(1, 12)
    -- SEARCH_OFFSET_BY_TIMESTAMP answers the message stored closest to the time: put the time
    -- much nearer the second half
    helpers.sleep(0.4)
    split_ms = now_ms()
    helpers.sleep(0.02)
    half(13, 24)
  end)
  lazy_teardown(function()
    if db ~= nil then lib.rmq_devbroker_stop(db) end
  end)

  local STARTS = {
    { name = "first", args = "--from first", keep = function() return true end },
    { name = "an offset", args = "--from 4", keep = function(m) return m.off >= 4 end },
    { name = "N before the end", args = "--from -3", keep = function(m) return m.off >= 12 - 3 end },
    { name = "@ms", args = function() return "--from @" .. split_ms end,
      keep = function(m) return tonumber(m.body:sub(2)) >= 13 end },
    { name = "a local date", args = function()
        local s = math.floor(split_ms / 1000)
        return string.format("--from '%s.%03d'", os.date("%Y-%m-%d %H:%M:%S", s), split_ms % 1000)
      end, keep = function(m) return tonumber(m.body:sub(2)) >= 13 end },
  }

  for _, st in ipairs(STARTS) do
    for _, f in ipairs(FILTERS) do
      it("reads from " .. st.name .. " with " .. f.name .. " to the end (-e)", function()
        local sargs = type(st.args) == "function" and st.args() or st.args
        local rc, out = tail(sargs .. " " .. f.args .. " -e --format 'M %q %o %s'")
        assert.are.equal(0, rc, out)
        local exp = want(function(m) return st.keep(m) and f.keep(m) end)
        assert.is_true(#exp > 0)
        assert.same(exp, got_of(out))
      end)
    end
  end

  for _, f in ipairs(FILTERS) do
    it("follows from last with " .. f.name .. ": only what is stored afterwards", function()
      local log = helpers.tmpdir("tail-last") .. "/out"
      local rcf = log .. ".rc"
      lib.rmq_devbroker_reset_counts(db)
      -- three new messages that every filter keeps
      helpers.spawn(string.format("%s tail %s --namesrv %s --from last %s -n 3 --format 'M %%q %%o %%s'",
        helpers.bin, TOPIC, ns, f.args), { log = log, rc = rcf })
      helpers.wait_until(function()
        return lib.rmq_devbroker_count(db, 0, PULL) > 0
      end, 30, "tail's first pull")
      helpers.sleep(0.3)
      local before = #stored
      produce(0, "late1", "TagB", "kl1", { region = "us" }) -- only the unfiltered tail wants it
      for i = 2, 4 do produce(i % 2, "late" .. i, "TagA", "kl" .. i, { region = "eu", amount = "99" }) end
      local rc = rh.exit_code(rcf, 60, "tail to stop after -n 3")
      assert.are.equal(0, rc, helpers.read_file(log))
      local exp = {}
      for i = before + 1, #stored do
        if f.keep(stored[i]) and #exp < 3 then exp[#exp + 1] = stored[i] end
      end
      local got = got_of(helpers.read_file(log))
      assert.are.equal(3, #got, helpers.read_file(log))
      -- whichever 3 came first: every one is new and passes the filter
      for _, g in ipairs(got) do
        local ok = false
        for i = before + 1, #stored do
          local m = stored[i]
          if g == m.q .. ":" .. m.off .. ":" .. m.body and f.keep(m) then ok = true end
        end
        assert.is_true(ok, g .. " is not a new message the filter keeps")
      end
    end)
  end

  it("reads one queue (--queue, --broker)", function()
    local rc, out = tail("--from first -e --queue 1 --broker broker-a --format 'M %q %o %s'")
    assert.are.equal(0, rc, out)
    assert.same(want(function(m) return m.q == 1 end), got_of(out))
    rc, out = tail("--from first -e --broker nosuch")
    assert.are.equal(1, rc, out)
    assert.matches("has no readable queue on broker nosuch", out, 1, true)
  end)

  it("stops after -n messages", function()
    local rc, out = tail("--from first -n 5 --format 'M %q %o %s'")
    assert.are.equal(0, rc, out)
    assert.are.equal(5, #got_of(out))
  end)

  it("prints every field of --format", function()
    local rc, out = tail("--from first -e --queue 1 -n 1 --format "
      .. "'%t|%b|%q|%o|%i|%g|%k|%s|%S|%r|%f|%{region}|%{nope}|%%|%p'")
    assert.are.equal(0, rc, out)
    local m
    for _, s in ipairs(stored) do if s.q == 1 and s.off == 0 then m = s end end
    local line = out:match("[^\n]+")
    local f = {}
    for piece in (line .. "|"):gmatch("([^|]*)|") do f[#f + 1] = piece end
    assert.are.equal(TOPIC, f[1])
    assert.are.equal("broker-a", f[2])
    assert.are.equal("1", f[3])
    assert.are.equal("0", f[4])
    assert.matches("^%x+$", f[5])
    assert.are.equal(m.tags, f[6])
    assert.are.equal(m.keys, f[7])
    assert.are.equal(m.body, f[8])
    assert.are.equal(tostring(#m.body), f[9])
    assert.are.equal("0", f[10])
    assert.are.equal("0", f[11])
    assert.are.equal(m.props.region, f[12])
    assert.are.equal("", f[13])
    assert.are.equal("%", f[14])
    assert.matches("region=" .. m.props.region, f[15], 1, true)
    assert.matches("UNIQ_KEY=" .. f[5], f[15], 1, true)
  end)

  it("prints JSON, with a body that is not UTF-8 as base64", function()
    local bin = "\255\0\1bin"
    assert(lib.rmq_devbroker_produce(db, 0, "TailJ", 0, "TB", "kb", bin, #bin) >= 0)
    local text = "héllo \"q\"\n"
    assert(lib.rmq_devbroker_produce(db, 0, "TailJ", 0, nil, nil, text, #text) >= 0)
    local rc, out = helpers.run(string.format("%s tail TailJ --namesrv %s --from first -e --json",
      helpers.bin, ns))
    assert.are.equal(0, rc, out)
    local lines = {}
    for l in out:gmatch("[^\n]+") do lines[#lines + 1] = cjson.decode(l) end
    assert.are.equal(2, #lines)
    assert.are.equal("TailJ", lines[1].topic)
    assert.are.equal(0, lines[1].queue_offset)
    assert.are.equal("TB", lines[1].tags)
    assert.are.equal("kb", lines[1].keys)
    assert.are.equal("TB", lines[1].properties.TAGS)
    assert.is_nil(lines[1].body)
    assert.are.equal("/wABYmlu", lines[1].body_base64)
    assert.are.equal(text, lines[2].body)
    assert.are.equal(lines[2].msg_id, lines[2].properties.UNIQ_KEY)
  end)

  it("runs a --handler over the messages (a consumer script works as it is)", function()
    local dir = helpers.tmpdir("tail-handler")
    local seen = dir .. "/seen"
    local script = rh.write(dir, "h.lua", string.format([[
local out = assert(io.open(%q, "a"))
out:setvbuf("no")
return {
  consumer_group = "ignored", subscribe = { Ignored = "*" },
  consume = function(msgs, ctx)
    for i = 1, #msgs do out:write(msgs[i].body .. " " .. tostring(msgs[i]:property("region")) .. "\n") end
    if msgs[1].body == "m2" then error("handler refuses m2") end
  end,
}
]], seen))
    local rc, out = tail("--from first -e --queue 0 --handler " .. script)
    assert.are.equal(1, rc, out) -- one batch failed: reported, exit 1
    assert.matches("the handler did not consume", out, 1, true)
    local lines = {}
    for l in io.lines(seen) do lines[#lines + 1] = l end
    local exp = {}
    for _, m in ipairs(stored) do
      if m.q == 0 then exp[#exp + 1] = m.body .. " " .. m.props.region end
    end
    table.sort(lines)
    table.sort(exp)
    assert.same(exp, lines)
  end)

  it("reports a --handler batch that fails while tail is being stopped (SIGTERM)", function()
    local dir = helpers.tmpdir("tail-handler-stop")
    local marker = dir .. "/started"
    local script = rh.write(dir, "h.lua", "return function(msgs)\n" ..
      rh.busy_after_marker(marker) .. '  error("handler gives up")\nend\n')
    local rc, text = rh.term_when_started(string.format("%s tail %s --namesrv %s --from first "
      .. "--handler %s", helpers.bin, TOPIC, ns, script), marker, dir .. "/tail.log")
    assert.are.equal(1, rc, text) -- the batch that ran failed: reported, exit 1
    assert.matches("the handler did not consume %d+ of %d+ message%(s%) of broker%-a#%d", text)
  end)

  it("passes over a message it cannot decode and reads on", function()
    put_bodies("TailBad", { "d1", "d2", "d3", "d4" })
    -- the sysFlag's COMPRESSED bit on a plain body: an invalid zlib stream (PROTOCOL 4.1: SYSFLAG
    -- at byte 36, big-endian)
    assert.are.equal(0, lib.rmq_devbroker_corrupt(db, 0, "TailBad", 0, 1, 39, 1))
    local rc, out = tail("--from first -e --format 'M %q %o %s'", "TailBad")
    assert.are.equal(0, rc, out)
    assert.same({ "0:0:d1", "0:2:d3", "0:3:d4" }, got_of(out))
    assert.matches("the message at queue offset 1 cannot be decoded", out, 1, true)
  end)

  it("reads on past unreadable bytes whose queue offset field reads 2^63 - 1", function()
    put_bodies("TailMaxOff", { "x1", "x2", "x3", "x4", "x5" })
    -- Offset 2's TOTALSIZE (byte 0) lies, and its QUEUEOFFSET field (byte 20) becomes 2^63 - 1
    -- (it held 2): nothing from offset 2 on can be split into messages in a pulled body. One
    -- past 2^63 - 1 must not overflow (undefined in C: the ASan+UBSan build stops there), and
    -- the reader goes on with offset 3 once offset 2 cannot be read.
    assert.are.equal(0, lib.rmq_devbroker_corrupt(db, 0, "TailMaxOff", 0, 2, 0, 0x40))
    local masks = {0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfd}
    for k, m in ipairs(masks) do
      assert.are.equal(0, lib.rmq_devbroker_corrupt(db, 0, "TailMaxOff", 0, 2, 20 + k - 1, m))
    end
    local rc, out = tail("--from first -e --format 'M %q %o %s'", "TailMaxOff")
    assert.are.equal(0, rc, out)
    assert.same({ "0:0:x1", "0:1:x2", "0:3:x4", "0:4:x5" }, got_of(out))
    assert.matches("pull body unreadable after queue offset 1 (", out, 1, true)
    assert.matches("reading on from offset 3\n", out, 1, true)
  end)

  it("never commits an offset", function()
    local rc, out = tail("--from first -e --format 'M %q %o %s'")
    assert.are.equal(0, rc, out)
    for q = 0, 1 do
      assert.are.equal(-1, tonumber(lib.rmq_devbroker_committed_offset(db, 0, "TOOLS_CONSUMER",
        TOPIC, q)))
    end
    local buf = ffi.new("char[64]")
    local n = lib.rmq_devbroker_count(db, 0, PULL)
    assert.is_true(n > 0)
    for i = 0, n - 1 do
      if lib.rmq_devbroker_request_ext(db, 0, PULL, i, "sysFlag", buf, 64) >= 0 then
        assert.are.equal(0, tonumber(ffi.string(buf)) % 2, "a pull with the COMMIT flag")
      end
      if lib.rmq_devbroker_request_ext(db, 0, PULL, i, "commitOffset", buf, 64) >= 0 then
        assert.are.equal("0", ffi.string(buf))
      end
    end
  end)

  it("explains bad arguments (exit 2) and a missing topic (exit 1)", function()
    rh.expect(tail, "--from yesterday", 2, "--from takes last, first, OFFSET, -N, @MS")
    rh.expect(tail, "--sql 'a >'", 2, "--sql: invalid SQL92 expression")
    rh.expect(tail, "--json --format x", 2)
    local dir = helpers.tmpdir("tail-folder")
    rh.expect(tail, "--handler " .. dir, 2, "--handler: cannot open " .. dir .. ": Is a directory")
    -- A script that does not load is named with file:line, without rmqlua's own Lua frames.
    local bad = dir .. "/bad.lua" -- written with rh.write(dir, "bad.lua", ...)
    rh.write(dir, "bad.lua", "local t = nil\nt.x = 1\nreturn function() end\n")
    local out = rh.expect(tail, "--handler " .. bad, 2,
      "--handler: " .. bad .. ":2: attempt to index local 't'", bad .. ":2: in main chunk")
    assert.is_nil(out:find("rmq/", 1, true), out)
    rh.write(dir, "bad.lua", "return function(\n")
    out = rh.expect(tail, "--handler " .. bad, 2, "--handler: " .. bad .. ":2: ")
    assert.is_nil(out:find("traceback", 1, true), out)
    rh.expect(helpers.run, string.format("%s tail NoSuchTopic --namesrv %s -e", helpers.bin, ns),
      1, "topic NoSuchTopic does not exist")
  end)
end)

describe("rmqlua tail (name server address service)", function()
  local NS_TOPIC = "NsTailT"

  -- `rmqlua tail NsTailT ARGS` with $NAMESRV_ADDR unset and the address service of svc (ended
  -- after 60 s, scaled, unless background).
  local function tail_cmd(svc, args, background)
    return string.format("env -u NAMESRV_ADDR %s %s tail %s --set namesrv_domain=%s "
      .. "--set namesrv_domain_subgroup=ns-tail --format 'M %%q %%o %%s' %s",
      background and "" or "timeout " .. math.floor(60 * helpers.scale), helpers.bin, NS_TOPIC,
      svc.domain, args)
  end

  local function broker_with(n)
    local tdb, tns = rh.start_broker("--topic " .. NS_TOPIC .. ":2")
    helpers.defer(function() lib.rmq_devbroker_stop(tdb) end)
    for i = 1, n do
      local body = "n" .. i
      assert(lib.rmq_devbroker_produce(tdb, 0, NS_TOPIC, (i - 1) % 2, nil, nil, body, #body) >= 0)
    end
    return tdb, tns
  end

  it("reads through the name server the service names when neither --namesrv nor NAMESRV_ADDR is given", function()
    local _, tns = broker_with(4)
    local svc = rh.address_service("ns-tail", tns .. "\n")
    local rc, out = helpers.run(tail_cmd(svc, "--from first -e"))
    assert.equal(0, rc, out)
    assert.same({ "0:0:n1", "0:1:n3", "1:0:n2", "1:1:n4" }, got_of(out))
  end)

  it("asks again every namesrv_addr_refresh_interval ms, connects by the new list, keeps the last good one", function()
    local tdb, tns = broker_with(3)
    -- The first list names a port nothing listens on: the route request fails and is retried.
    local svc = rh.address_service("ns-tail", "127.0.0.1:1\n")
    local log = helpers.tmpdir("tail-nsaddr") .. "/out"
    local rcf = log .. ".rc"
    local pid = helpers.spawn(tail_cmd(svc, "--from first --set namesrv_addr_refresh_interval=300", true),
      { log = log, rc = rcf })
    helpers.wait_until(function()
      return rh.read(log):find("route of " .. NS_TOPIC, 1, true)
    end, 30, "a failed route request through 127.0.0.1:1")
    assert.equal(0, lib.rmq_devbroker_count(tdb, NAMESRV, ROUTE))
    -- The service names the development broker's name server: the next route request uses it.
    svc.set(tns .. "\n")
    helpers.wait_until(function() return #got_of(rh.read(log)) == 3 end, 30, "the 3 messages")
    assert.matches("name server list from " .. svc.url .. ": " .. tns, rh.read(log), 1, true)
    assert.is_true(lib.rmq_devbroker_count(tdb, NAMESRV, ROUTE) > 0)
    -- Garbage, then the service down: logged with the URL, the list kept, tail reads on.
    svc.set("no address here\n")
    helpers.wait_until(function()
      return rh.read(log):find(svc.url .. " answered \"no address here\"", 1, true)
    end, 30, "the garbage answer logged")
    svc.stop()
    helpers.wait_until(function()
      return rh.read(log):find(svc.url .. ": cannot connect", 1, true)
    end, 30, "the failed fetch logged")
    assert.matches("keeping the last name server list", rh.read(log), 1, true)
    assert.is_true(helpers.alive(pid))
    assert(lib.rmq_devbroker_produce(tdb, 0, NS_TOPIC, 0, nil, nil, "late", 4) >= 0)
    helpers.wait_until(function() return #got_of(rh.read(log)) == 4 end, 30, "the later message")
    helpers.kill(pid, "TERM")
    assert.equal(0, rh.exit_code(rcf), rh.read(log))
  end)

  it("names the URL and the fault and exits 1 when the service gives no list at start", function()
    local svc = rh.address_service("ns-tail", "no address here\n")
    local rc, out = helpers.run(tail_cmd(svc, "-e"))
    assert.equal(1, rc, out)
    assert.matches("rmqlua tail: name server address service " .. svc.url
      .. " answered \"no address here\": bad name server address", out, 1, true)
    svc.stop()
    rc, out = helpers.run(tail_cmd(svc, "-e"))
    assert.equal(1, rc, out)
    assert.matches("rmqlua tail: name server address service " .. svc.url .. ": cannot connect",
      out, 1, true)
    rh.expect(helpers.run, tail_cmd(svc, "--set namesrv_addr_refresh_interval=0"), 2,
      "--set namesrv_addr_refresh_interval:")
  end)
end)

