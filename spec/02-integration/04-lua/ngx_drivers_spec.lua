-- The ngx shim (rmq.ngx, the lua_ngx_shim option) proven with OpenResty's pure-Lua drivers as
-- Debian ships them, loaded unchanged from where scripts/deps unpacked them ($RMQ_NGX_LUA,
-- default /usr/local/share/rmqlua-test/ngx-lua/usr/share/lua/5.1), against real servers started
-- and stopped here: redis-server (nginx.redis: INCR per message key under `rmqlua run` over the
-- development broker, pooled with set_keepalive, the counts read back with redis-cli),
-- memcached (nginx.memcached), a WebSocket echo server (spec/python/ws_echo.py, the
-- nginx.websocket client, over ws:// and wss://), and the kafka producer (what loads, and its failure against a port
-- nobody listens on). Also the shim's own values: crc32, base64, ngx.null, ngx.re, ngx.log's
-- levels in the runtime's log, ngx.timer.at (on time, and premature at stop).
local helpers = require "helpers"
local rh = require "run_helpers"
local R = require "02-integration.04-lua.runner"
local sec = require "02-integration.06-security.sec"
local C = require("rmq.core").C
local ngx = require "rmq.ngx"

local NGX_LUA = os.getenv("RMQ_NGX_LUA") or "/usr/local/share/rmqlua-test/ngx-lua/usr/share/lua/5.1"
local WS_ECHO = helpers.root .. "/spec/python/ws_echo.py"

assert(io.open(NGX_LUA .. "/nginx/redis.lua"),
  "OpenResty's drivers are not unpacked in " .. NGX_LUA .. ": run scripts/deps --test"):close()
package.path = NGX_LUA .. "/?.lua;" .. package.path
rawset(_G, "ngx", ngx) -- the drivers look for the global, as lua_ngx_shim installs it

-- A loopback port nobody listens on at this moment.
local function free_port()
  local p = io.popen([[python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); ]]
    .. [[print(s.getsockname()[1])']])
  local port = tonumber(p:read("*l"))
  p:close()
  return assert(port, "no free port")
end

-- Start cmd (a format with %d for the port) on a free port until ready(port, log) says so; the
-- process is stopped when the test ends (helpers.spawn). Returns the port and the pid.
local function serve(name, cmd, ready)
  local dir = helpers.tmpdir(name)
  for _ = 1, 5 do
    local port = free_port()
    local log = dir .. "/" .. name .. ".log"
    local pid = helpers.spawn(string.format(cmd, port, dir), { log = log })
    local state = helpers.wait_until(function()
      if ready(port, log) then return "ready" end
      if not helpers.alive(pid) then return "gone" end
    end, 15, name .. " ready")
    if state == "ready" then return port, pid end
  end
  error(name .. " did not start on a free port")
end

local function connects(port)
  local s = ngx.socket.tcp()
  s:settimeout(1000)
  local ok = s:connect("127.0.0.1", port)
  s:close()
  return ok
end

local function redis_server()
  return serve("redis", "redis-server --port %d --bind 127.0.0.1 --save '' --appendonly no "
    .. "--protected-mode no --dir %s", function(_, log)
      return rh.read(log):find("Ready to accept connections", 1, true)
    end)
end

local function redis_cli(port, args)
  local p = io.popen(string.format("redis-cli -h 127.0.0.1 -p %d --raw %s", port, args))
  local out = p:read("*a")
  p:close()
  return out
end

local function memcached()
  local root = io.popen("id -u"):read("*l") == "0"
  return serve("memcached", "memcached -l 127.0.0.1 -p %d -U 0" .. (root and " -u root" or "")
    .. " -m 16", connects)
end

describe("the ngx shim's values", function()
  it("crc32_short and crc32_long give zlib's CRC-32", function()
    assert.equal(0, ngx.crc32_short(""))
    assert.equal(907060870, ngx.crc32_short("hello"))
    assert.equal(3421780262, ngx.crc32_long("123456789"))
    assert.equal(1095738169, ngx.crc32_long("The quick brown fox jumps over the lazy dog"))
  end)

  it("encodes and decodes base64 (padding optional), nil for bad input", function()
    assert.equal("aGVsbG8=", ngx.encode_base64("hello"))
    assert.equal("aGVsbG8", ngx.encode_base64("hello", true))
    assert.equal("", ngx.encode_base64(""))
    assert.equal("hello", ngx.decode_base64("aGVsbG8="))
    assert.equal("hello", ngx.decode_base64("aGVsbG8"))
    local all = {}
    for i = 0, 255 do all[#all + 1] = string.char(i) end
    all = table.concat(all)
    assert.equal(all, ngx.decode_base64(ngx.encode_base64(all)))
    assert.is_nil(ngx.decode_base64("a*b="))
    assert.is_nil(ngx.decode_base64("a"))
  end)

  it("sha1_bin, md5, md5_bin, hmac_sha1 give the standard digests", function()
    local hex = helpers.tohex
    assert.equal("a9993e364706816aba3e25717850c26c9cd0d89d", hex(ngx.sha1_bin("abc")):lower())
    assert.equal("900150983cd24fb0d6963f7d28e17f72", ngx.md5("abc"))
    assert.equal("900150983cd24fb0d6963f7d28e17f72", hex(ngx.md5_bin("abc")):lower())
    -- RFC 2202, test case 2
    assert.equal("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79",
      hex(ngx.hmac_sha1("Jefe", "what do ya want for nothing?")):lower())
    -- The WebSocket accept hash of RFC 6455's example key.
    assert.equal("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
      ngx.encode_base64(ngx.sha1_bin("dGhlIHNhbXBsZSBub25jZQ==258EAFA5-E914-47DA-95CA-C5AB0DC85B11")))
  end)

  it("ngx.null is the NULL lightuserdata of cjson.null", function()
    assert.equal("userdata", type(ngx.null))
    assert.equal(require("cjson").null, ngx.null)
  end)

  it("ngx.re.match and find: captures, names, unmatched groups, options, errors", function()
    local m = ngx.re.match("ws://example.org:8080/x?y", [[^(wss?)://([^:/]+)(?::(\d+))?(.*)]], "jo")
    assert.same({ [0] = "ws://example.org:8080/x?y", "ws", "example.org", "8080", "/x?y" }, m)
    m = ngx.re.match("ws://h/p", [[^(wss?)://([^:/]+)(?::(\d+))?(.*)]], "jo")
    assert.is_false(m[3])
    m = ngx.re.match("key=Value", [[(?<k>\w+)=(?<v>\w+)]])
    assert.equal("key", m.k)
    assert.equal("Value", m.v)
    assert.equal("Value", m[2])
    assert.truthy(ngx.re.match("HELLO", "hello", "i"))
    assert.is_nil(ngx.re.match("HELLO", "hello"))
    assert.same({ 3, 5 }, { ngx.re.find("a bcd", [[b\w+]]) })
    local ctx = { pos = 3 }
    assert.equal("2", ngx.re.match("1 2", [[\d]], "", ctx)[0])
    assert.equal(4, ctx.pos)
    local ok, err = ngx.re.match("x", "(")
    assert.is_nil(ok)
    assert.matches("pcre2_compile() failed", err, 1, true)
    ok, err = ngx.re.match("x", "x", "Q")
    assert.is_nil(ok)
    assert.matches('unknown flag "Q"', err, 1, true)
    for i = 1, 1100 do -- past the cache's 1,024 regexes: compiled for the call alone
      assert.equal(tostring(i), ngx.re.match("n" .. i .. "n", "(" .. i .. ")")[1])
    end
    assert.has_error(function() ngx.re.gsub("a", "a", "b") end,
      "ngx.re.gsub is not part of rmqlua's ngx shim (ngx.re.match and ngx.re.find are)")
  end)

  it("escapes and unescapes URI components", function()
    assert.equal("a%20b%2Fc~_.-", ngx.escape_uri("a b/c~_.-"))
    assert.equal("a b/c d", ngx.unescape_uri("a%20b%2Fc+d"))
  end)

  it("rejects a bad log level, a bad timer", function()
    assert.has_error(function() ngx.log(99, "x") end, "ngx.log: bad log level 99 (ngx.STDERR .. ngx.DEBUG)")
    assert.has_error(function() ngx.timer.at(-1, print) end, "ngx.timer.at: bad delay -1 (seconds >= 0)")
    assert.has_error(function() ngx.timer.at(1, 2) end, "ngx.timer.at: expects a function, got number")
  end)
end)

describe("OpenResty's drivers over the shim", function()
  it("nginx.memcached: set, get, incr, delete against memcached", function()
    local port = memcached()
    local memcached_mod = require "nginx.memcached"
    local mc = assert(memcached_mod:new())
    mc:set_timeout(5000)
    assert(mc:connect("127.0.0.1", port))
    assert.equal(1, mc:set("greeting k", "hello memcached", 60))
    assert.equal("hello memcached", (mc:get("greeting k")))
    assert(mc:set("n", "41"))
    assert.equal(42, tonumber((mc:incr("n", 1))))
    assert(mc:delete("n"))
    assert.is_nil((mc:get("n")))
    assert(mc:set_keepalive(10000, 4))
    local mc2 = memcached_mod:new()
    assert(mc2:connect("127.0.0.1", port))
    assert.equal(1, mc2:get_reused_times())
    mc2:close()
  end)

  it("nginx.redis: commands, ngx.null for a missing key, pipelines, errors", function()
    local port = redis_server()
    local redis = require "nginx.redis"
    local red = redis:new()
    red:set_timeout(5000)
    assert(red:connect("127.0.0.1", port))
    assert.equal("OK", red:set("a", "1"))
    assert.equal(2, red:incr("a"))
    assert.equal(ngx.null, red:get("missing"))
    red:init_pipeline()
    red:incr("p")
    red:incr("p")
    red:get("p")
    assert.same({ 1, 2, "2" }, red:commit_pipeline())
    assert.equal("OK", red:set("word", "x"))
    local ok, err = red:incr("word") -- not an integer: Redis's error, the connection usable
    assert.is_false(ok)
    assert.matches("not an integer", err, 1, true)
    assert.equal("x", red:get("word"))
    assert(red:set_keepalive(10000, 4))
    assert.equal("2", redis_cli(port, "GET a"):match("%S+"))
  end)

  it("nginx.websocket.client: handshake, text, binary, ping, close against an echo server", function()
    local port = serve("ws_echo", "python3 " .. WS_ECHO .. " %d", function(_, log)
      return rh.read(log):find("PORT %d+")
    end)
    local client = require "nginx.websocket.client"
    local wb = assert(client:new({ timeout = 5000 }))
    assert(wb:connect("ws://127.0.0.1:" .. port .. "/echo"))
    assert(wb:send_text("hello ws"))
    local data, typ = wb:recv_frame()
    assert.equal("hello ws", data)
    assert.equal("text", typ)
    local big = string.rep("b", 70000)
    wb = client:new({ timeout = 5000, max_payload_len = 100000 })
    assert(wb:connect("ws://127.0.0.1:" .. port .. "/"))
    assert(wb:send_binary(big))
    data, typ = wb:recv_frame()
    assert.equal("binary", typ)
    assert.equal(big, data)
    assert(wb:send_ping("p1"))
    data, typ = wb:recv_frame()
    assert.same({ "p1", "pong" }, { data, typ })
    assert(wb:send_close(1000, "bye"))
    data, typ = wb:recv_frame()
    assert.equal("close", typ)
    wb:close()
    local _, err = client:new():connect("ws://127.0.0.1:" .. free_port() .. "/")
    assert.equal("failed to connect: connection refused", err)
  end)

  it("nginx.websocket.client over wss://: sslhandshake verified against the spec's CA", function()
    local certs = sec.make_certs(helpers.tmpdir("ws_certs"))
    local port = serve("wss_echo", "python3 " .. WS_ECHO .. " %d --tls " .. helpers.shq(certs.server)
      .. " " .. helpers.shq(certs.server_key), function(_, log)
        return rh.read(log):find("PORT %d+")
      end)
    local client = require "nginx.websocket.client"
    -- This thread's CA file, as a consume thread gets lua_ssl_trusted_certificate.
    C.rmq_co_configure(0, certs.ca, -1)
    helpers.defer(function() C.rmq_co_configure(0, nil, -1) end)
    local wb = assert(client:new({ timeout = 5000 }))
    assert(wb:connect("wss://127.0.0.1:" .. port .. "/", { ssl_verify = true }))
    assert(wb:send_text("over tls"))
    assert.same({ "over tls", "text" }, { wb:recv_frame() })
    wb:close()
    -- Not trusted: the system's CA store does not know the spec's CA.
    C.rmq_co_configure(0, nil, -1)
    local _, err = client:new({ timeout = 5000 }):connect("wss://127.0.0.1:" .. port .. "/",
      { ssl_verify = true })
    assert.matches("^ssl handshake failed: ", err)
  end)

  it("nginx.kafka: every module loads; a producer fails cleanly when no broker answers", function()
    -- Its calls into ngx: socket.tcp, sleep, log, time, timer.at, worker.pid, worker.exiting,
    -- crc32_short, crc32_long, config.debug, null: all in the shim.
    for _, m in ipairs { "errors", "request", "response", "broker", "client", "ringbuffer",
      "sendbuffer", "producer" } do
      assert.equal("table", type(require("nginx.kafka." .. m)), m)
    end
    local producer = require "nginx.kafka.producer"
    local port = free_port()
    local p = producer:new({ { host = "127.0.0.1", port = port } }, { socket_timeout = 2000 })
    local ok, err = p:send("test", nil, "message")
    assert.is_nil(ok)
    assert.equal("not found topic", err) -- its metadata request was refused
  end)
end)

describe("examples/redis_counter.lua on --embedded", function()
  local function env(port)
    return string.format("LUA_PATH=%s REDIS_ADDR=127.0.0.1:%d ", helpers.shq(NGX_LUA .. "/?.lua;;"), port)
  end

  it("counts every sample message in Redis", function()
    local port = redis_server()
    local rc, out = helpers.run(string.format("%s timeout %d %s run --embedded --sample-messages 40 "
      .. "--max-messages 40 %s", env(port), math.floor(120 * helpers.scale), helpers.bin,
      rh.example("redis_counter")))
    assert.equal(0, rc, out)
    local sum = redis_cli(port, [[EVAL "local s = 0 for _, k in ipairs(redis.call('keys', 'count:*')) ]]
      .. [[do s = s + tonumber(redis.call('get', k)) end return s" 0]])
    assert.is_true(tonumber(sum:match("%d+")) >= 40, "counted: " .. sum)
    assert.equal("1", redis_cli(port, "GET count:sample-7"):match("%S+"))
  end)

  it("passes its offline cases with the driver on the path too, and counts against a stubbed Redis", function()
    local cases = rh.write(helpers.tmpdir("redis_cases"), "counts.lua", [[
-- A Redis that answers each INCR of a pipeline with a count per key.
local function redis(conn)
  local n = {}
  while true do
    local line = conn:receive("*l")
    if not line then return end
    if line == "*2" then
      conn:receive("*l"); conn:receive("*l") -- $4, incr
      conn:receive("*l")
      local key = conn:receive("*l")
      n[key] = (n[key] or 0) + 1
      conn:send(":" .. n[key] .. "\r\n")
    end
  end
end
return {
  { name = "counts per key", peers = { ["127.0.0.1:6379"] = redis },
    messages = { { keys = "a" }, { keys = "a b" }, { tags = "T" }, {} },
    expect = { status = "SUCCESS", error = false } },
}
]])
    local lp = "LUA_PATH=" .. helpers.shq(NGX_LUA .. "/?.lua;;") .. " "
    local ex = rh.example("redis_counter")
    local rc, out = helpers.run(lp .. helpers.bin .. " test " .. ex .. " " .. helpers.root
      .. "/examples/cases/redis_counter.lua")
    assert.equal(0, rc, out)
    assert.matches("redis: closed", out, 1, true)
    assert.matches("redis INCR: ERR stub refuses", out, 1, true)
    rc, out = helpers.run(lp .. helpers.bin .. " test " .. ex .. " " .. cases)
    assert.equal(0, rc, out)
    assert.matches("1 case(s), 0 failed", out, 1, true)
    -- Without the driver the same case fails: it is the driver that spoke to the stub.
    rc, out = helpers.run(helpers.bin .. " test " .. ex .. " " .. cases)
    assert.equal(1, rc, out)
    assert.matches("the Redis driver is not installed", out, 1, true)
  end)

  it("fails its batches cleanly when Redis does not answer, and stops cleanly", function()
    local d = helpers.tmpdir("redis_counter")
    local log, rcf = d .. "/out", d .. "/rc"
    local pid = helpers.spawn(string.format("sh -c %s", helpers.shq(env(free_port()) .. "exec "
      .. helpers.bin .. " run --embedded --sample-messages 10 " .. rh.example("redis_counter"))),
      { log = log, rc = rcf })
    helpers.wait_until(function() return rh.read(log):find("come back later: redis 127.0.0.1:%d+: connection refused") end,
      30, "a batch sent back")
    assert.is_true(helpers.alive(pid))
    os.execute("kill -INT " .. pid)
    assert.equal(0, rh.exit_code(rcf, 60))
  end)
end)

describe("rmqlua run with lua_ngx_shim", function()
  R.broker_fixture("--delay-scale 0.001")

  it("counts every message in Redis with nginx.redis (INCR per key, pooled connections)", function()
    local port = redis_server()
    local N, KEYS = 40, 5
    local script = R.consumer_script("ngx_redis.lua", "ngx_redis", "NgxRedis", 2, string.format([[
  lua_ngx_shim = true,
  consume_thread_min = 2, consume_thread_max = 2,
  consume_message_batch_max_size = 4,
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  init = function()
    print("ngx is a " .. type(ngx))
  end,
  consume = function(msgs)
    local redis = require "nginx.redis"
    local red = redis:new()
    red:set_timeout(5000)
    local ok, err = red:connect("127.0.0.1", %d)
    if not ok then error("redis: " .. err) end
    for i = 1, #msgs do
      local n, ierr = red:incr("count:" .. msgs[i].keys)
      if not n then error("incr: " .. ierr) end
    end
    print("reused " .. red:get_reused_times())
    assert(red:set_keepalive(10000, 8))
  end,
}
]], port))
    -- The drivers' folder on the consume states' path: the script says where they are.
    script = R.write("ngx_redis.lua", "package.path = " .. string.format("%q", NGX_LUA .. "/?.lua;")
      .. " .. package.path\n" .. rh.read(script))
    for i = 1, N do R.produce("NgxRedis", "m" .. i, nil, "k" .. (i % KEYS), i % 2) end
    local h = R.start(script)
    helpers.wait_until(function() return R.committed("ngx_redis", "NgxRedis", 2) == N end, 60,
      "every message committed")
    local total = 0
    for k = 0, KEYS - 1 do
      local n = tonumber(redis_cli(port, "GET count:k" .. k):match("%d+"))
      assert.is_true(n ~= nil and n >= N / KEYS, "count of k" .. k .. ": " .. tostring(n))
      total = total + n
    end
    assert.is_true(total >= N)
    assert.equal(2, h.count("ngx is a table"))
    assert.is_true(h.out():find("reused [1-9]") ~= nil, "a pooled connection reused")
    assert.equal(0, h.stop())
  end)

  it("logs through ngx.log at the runtime's levels; runs timers on time, and premature at stop", function()
    local script = R.consumer_script("ngx_log.lua", "ngx_log", "NgxLog", 1, [[
  lua_ngx_shim = true,
  consume_thread_min = 1, consume_thread_max = 1,
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  init = function()
    assert(ngx.timer.at(0.05, function(premature, tag)
      print("timer " .. tag .. " " .. tostring(premature) .. " " .. tostring(ngx.worker.exiting()))
    end, "early"))
    assert(ngx.timer.at(3600, function(premature, tag)
      print("timer " .. tag .. " " .. tostring(premature) .. " " .. tostring(ngx.worker.exiting()))
      io.stdout:flush()
    end, "late"))
  end,
  consume = function(msgs)
    ngx.log(ngx.ERR, "ngx err ", msgs[1].body, " ", 1, " ", true, " ", ngx.null, " ", nil)
    ngx.log(ngx.WARN, "ngx warn")
    ngx.log(ngx.DEBUG, "ngx debug hidden")
    ngx.sleep(0.2) -- the loop runs: the early timer fires
    print("worker " .. ngx.worker.id() .. "/" .. ngx.worker.count() .. " pid " .. ngx.worker.pid())
    io.stdout:flush()
  end,
}
]])
    local h = R.start(script)
    R.produce("NgxLog", "m1")
    h.wait_for("timer early false false")
    h.wait_for("worker 0/1 pid %d+")
    local pid = tonumber(h.out():match("worker 0/1 pid (%d+)"))
    assert.equal(h.pid(), pid)
    assert.matches("ERROR[^\n]*ngx err m1 1 true null nil", h.out())
    assert.matches("WARN[^\n]*ngx warn", h.out())
    assert.is_nil(h.out():find("ngx debug hidden", 1, true))
    assert.equal(0, h.count("timer late"))
    assert.equal(0, h.stop())
    assert.equal(1, h.count("timer late true true"))
  end)

  it("installs no global ngx without the option; check names the option", function()
    local dir, write = rh.script_dir("ngx_off")
    local body = 'package.path = ' .. string.format("%q", NGX_LUA .. "/?.lua;") .. ' .. package.path\n'
      .. 'local redis = require "nginx.redis"\nreturn {\n  consumer_group = "ngx_off",\n'
      .. '  subscribe = { T = "*" },\n%s  consume = function() return redis end,\n}\n'
    local off = write("off.lua", string.format(body, ""))
    local rc, out = rh.rmqlua("check " .. off)
    assert.equal(2, rc, out)
    assert.matches("attempt to index global 'ngx'", out, 1, true)
    assert.matches("set lua_ngx_shim = true", out, 1, true)
    rc, out = rh.rmqlua("check --set lua_ngx_shim=true " .. off)
    assert.equal(0, rc, out)
    local on = write("on.lua", string.format(body, "  lua_ngx_shim = true,\n"))
    rc, out = rh.rmqlua("check --set strict_globals=true " .. on)
    assert.equal(0, rc, out)
    local plain = write("plain.lua", 'return {\n  consumer_group = "ngx_off",\n  subscribe = { T = "*" },\n'
      .. '  consume = function() end,\n  init = function() assert(ngx == nil, "ngx is set") end,\n}\n')
    rc, out = rh.rmqlua("check " .. plain)
    assert.equal(0, rc, out)
    os.execute("rm -rf " .. helpers.shq(dir))
  end)
end)
