-- rmq.http against a real HTTP server (spec/c/tools/httpd_test.c, started and stopped here, over
-- real sockets): GET and POST, Content-Length, chunked and read-until-close bodies, HEAD, 204 and
-- 304, keep-alive reuse counted by the server, the retry of a request on a pooled connection the
-- server had closed, redirects, thousands of requests in flight at once from one thread, and
-- every misbehaviour of the server (reset, stall, half an answer, a 10 MB header, garbage)
-- mapped to its error without a hang. Then `rmqlua run` against the development broker with a
-- handler that POSTs every message to a server answering 503 to some, and `rmqlua test` with
-- handlers that wait (rmq.sleep, rmq.http) and with stubbed rmq.http answers.
local helpers = require "helpers"
local rh = require "run_helpers"
local R = require "02-integration.04-lua.runner"
local co = require "rmq.co"
local socket = require "rmq.socket"
local http = require "rmq.http"
local rmq = require "rmq"
local cjson = require "cjson"

local HTTPD = (helpers.bin:gsub("[^/]+$", "")) .. "httpd_test"
local T = math.floor(5000 * helpers.scale) -- ms: the timeout of a request that should succeed

-- An httpd_test answering after delay ms, stopped when the test ends: its base url, port, pid.
local function server(delay)
  local log = helpers.tmpdir("httpd") .. "/httpd.out"
  local pid = helpers.spawn(HTTPD .. " --delay " .. (delay or 0), { log = log })
  local port = helpers.wait_until(function()
    return tonumber(rh.read(log):match("PORT (%d+)"))
  end, 10, "httpd_test's port in " .. log)
  return "http://127.0.0.1:" .. port, port, pid
end

local function get(url, extra)
  local o = { url = url, timeout = T }
  for k, v in pairs(extra or {}) do o[k] = v end
  return http.request(o)
end

-- The server's counters (/stats is not counted in them), over a connection of its own: not
-- one of rmq.http's pool.
local function stats(base)
  local port = tonumber(base:match(":(%d+)$"))
  local s = socket.tcp()
  s:settimeout(T)
  assert(s:connect("127.0.0.1", port, { pool = "stats" }))
  assert(s:send("GET /stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
  local all = assert(s:receive("*a"))
  return cjson.decode(all:match("\r\n\r\n(.*)$"))
end

describe("rmq.http against a real server", function()
  it("GETs and POSTs: status, lower-case headers, bodies both ways", function()
    local base = server(0)
    local res = assert(get(base .. "/"))
    assert.equal(200, res.status)
    assert.equal("OK", res.reason)
    assert.equal("ok", res.body)
    assert.equal("2", res.headers["content-length"])
    assert.equal("text/plain", res.headers["content-type"])
    res = assert(http.request { method = "POST", url = base .. "/echo?x=1", body = 'a "b"\n',
      headers = { ["Content-Type"] = "application/json", ["X-Many"] = { "1", "2" } },
      timeout = T })
    assert.equal(200, res.status)
    local e = cjson.decode(res.body)
    assert.equal("POST", e.method)
    assert.equal("/echo?x=1", e.path)
    assert.equal('a "b"\n', e.body)
    assert.equal("6", e.headers["content-length"])
    assert.equal("application/json", e.headers["content-type"])
    assert.equal("1, 2", e.headers["x-many"])
    assert.equal(base:match("//(.*)$"), e.headers.host)
    assert.matches("^rmqlua/", e.headers["user-agent"])
    -- A body without a method is a POST; a url without a path asks for /.
    e = cjson.decode(assert(http.request { url = base .. "/echo", body = "z", timeout = T }).body)
    assert.equal("POST", e.method)
    assert.equal(200, assert(get(base)).status)
    assert.equal(404, assert(get(base .. "/nothing")).status)
    assert.equal(503, assert(get(base .. "/status/503")).status)
  end)

  it("reads Content-Length, chunked and read-until-close bodies; HEAD, 204 and 304 have none", function()
    local base = server(0)
    local res = assert(get(base .. "/chunked?n=3"))
    assert.equal("chunk 0\nchunk 1\nchunk 2\n", res.body)
    assert.equal("chunked", res.headers["transfer-encoding"])
    assert.equal(string.rep("x", 100000), assert(get(base .. "/bytes/100000")).body)
    res = assert(get(base .. "/eof/70000"))
    assert.equal(70000, #res.body)
    res = assert(http.request { method = "HEAD", url = base .. "/bytes/5000", timeout = T })
    assert.equal("5000", res.headers["content-length"])
    assert.equal("", res.body)
    assert.equal("", assert(get(base .. "/status/204")).body)
    assert.equal("", assert(get(base .. "/status/304")).body)
    -- After all of these, the same connection still answers (nothing left unread in it).
    assert.equal("ok", assert(get(base .. "/")).body)
    -- HEAD, 204, 304, chunked and Content-Length answers left the connection reusable; the
    -- read-until-close one ended the first connection.
    assert.equal(2, stats(base).connections)
  end)

  it("reuses keep-alive connections, and not when asked not to or told to close", function()
    local base = server(0)
    for _ = 1, 5 do assert.equal("ok", assert(get(base .. "/")).body) end
    assert.equal(1, stats(base).connections)
    -- keepalive = false: the pooled one is used, then closed, and so is every new one.
    for _ = 1, 3 do assert(get(base .. "/", { keepalive = false })) end
    assert.equal(3, stats(base).connections)
    assert(get(base .. "/close"))
    assert(get(base .. "/"))
    assert.equal(5, stats(base).connections)
    -- HTTP/1.1 pools per scheme, host and port: another server has a pool of its own.
    local base2 = server(0)
    assert(get(base2 .. "/"))
    assert(get(base .. "/"))
    assert.equal(5, stats(base).connections)
    -- A pooled connection idle past keepalive_timeout is not used again.
    assert(get(base .. "/", { keepalive_timeout = 100 }))
    helpers.sleep(0.3)
    assert(get(base .. "/"))
    assert.equal(6, stats(base).connections)
  end)

  it("sends an idempotent request again when the server closed the pooled connection", function()
    local base = server(0)
    assert(get(base .. "/drop-next"))
    -- The server drops the next request on that connection: a GET goes again on a new one.
    assert.equal("ok", assert(get(base .. "/")).body)
    assert.equal(2, stats(base).connections) -- drop-next's, and the GET's second one
    -- A POST is not sent twice...
    assert(get(base .. "/drop-next"))
    assert.same({ nil, "closed" }, { http.request { url = base .. "/echo", body = "x", timeout = T } })
    -- ... unless it carries an Idempotency-Key.
    assert(get(base .. "/drop-next"))
    local res = assert(http.request { url = base .. "/echo", body = "y", timeout = T,
      headers = { ["Idempotency-Key"] = "k1" } })
    assert.equal("y", cjson.decode(res.body).body)
  end)

  it("counts a timeout from the request, not from when the thread's loop last ran", function()
    local base = server(0)
    assert(get(base .. "/")) -- the loop runs, then sits idle for longer than the next timeout
    helpers.sleep(1.2)
    local res, err = get(base .. "/?delay=50", { timeout = 1000 })
    assert.is_truthy(res, err)
    helpers.sleep(0.6)
    local t0 = rmq.now()
    rmq.sleep(0.5)
    assert.is_true(rmq.now() - t0 >= 0.45, "rmq.sleep(0.5) returned after " .. (rmq.now() - t0))
  end)

  it("follows redirects only when asked", function()
    local base = server(0)
    local res = assert(get(base .. "/redirect/2"))
    assert.equal(302, res.status)
    assert.equal("/redirect/1", res.headers.location)
    res = assert(get(base .. "/redirect/2", { redirects = 2 }))
    assert.equal(200, res.status)
    assert.equal("redirected", res.body)
    assert.same({ nil, "too many redirects (1)" }, { get(base .. "/redirect/2", { redirects = 1 }) })
  end)

  it("holds 2,000 requests in flight at once from one thread", function()
    local base = server(math.floor(300 * helpers.scale))
    local N = 2000
    local ok, r = co.run(function()
      local ts = {}
      for i = 1, N do
        ts[i] = rmq.thread.spawn(function()
          local res, err = http.request { url = base .. "/", timeout = 30000 * helpers.scale }
          return res and res.status or err
        end)
      end
      local got = {}
      for i = 1, N do
        local _, v = rmq.thread.wait(ts[i])
        got[v] = (got[v] or 0) + 1
      end
      return got
    end, debug.traceback)
    assert.is_true(ok, r)
    assert.same({ [200] = N }, r)
    local s = stats(base)
    assert.is_true(s.peak >= N, "peak of requests in flight: " .. s.peak)
    assert.is_true(s.peak_open >= N, "peak of open connections: " .. s.peak_open)
  end)
end)

describe("rmq.http against a server that misbehaves", function()
  -- Each request has a timeout: none of them may take it all unless the server stalls.
  local function fails(base, path, want, extra)
    local t0 = rmq.now()
    local res, err = get(base .. path, extra)
    assert.is_nil(res, path .. " answered " .. tostring(res and res.status))
    assert.equal(want, err, path)
    return rmq.now() - t0
  end

  it("maps each misbehaviour to its error, and never hangs", function()
    local base = server(0)
    local ok, err = get(base .. "/bad/reset")
    assert.is_nil(ok)
    assert.is_true(err == "connection reset by peer" or err == "closed", err)
    assert.is_true(fails(base, "/bad/stall", "timeout", { timeout = 300 }) < 3 * helpers.scale)
    fails(base, "/bad/half", "closed before the end of the body")
    fails(base, "/bad/bigheader", "response header too large (over 65536 bytes)")
    fails(base, "/bad/garbage", "malformed response: bad status line 'GARBAGE 42'")
    fails(base, "/bad/header", "malformed response: bad header line 'no colon here'")
    fails(base, "/bad/chunk", "malformed response: bad chunk size 'zz'")
    fails(base, "/bad/length", "malformed response: bad Content-Length 'abc'")
    fails(base, "/bad/endless", "response body too large (over max_body 1048576 bytes)",
      { max_body = 1048576 })
    fails(base, "/bad/endless", "timeout", { timeout = 300 })
    fails(base, "/bytes/2000", "response body too large (over max_body 1000 bytes)",
      { max_body = 1000 })
    fails(base, "/chunked?n=500", "response body too large (over max_body 1000 bytes)",
      { max_body = 1000 })
    -- The server is still fine, and so is this thread's pool.
    assert.equal("ok", assert(get(base .. "/")).body)
  end)

  it("reports a refused connection, an unknown host and a bad url", function()
    local base, port, pid = server(0)
    helpers.kill(pid, "KILL")
    assert.same({ nil, "connection refused" }, { get(base .. "/") })
    local ok, err = get("http://no-such-host.invalid/")
    assert.is_nil(ok)
    assert.matches("no-such-host.invalid could not be resolved", err, 1, true)
    assert.same({ nil, "bad url 'ftp://x/': scheme ftp is not http or https" }, { get("ftp://x/") })
    assert.same({ nil, "bad url 'http://': no host" }, { get("http://") })
    assert.same({ nil, "bad url 'http://h:99999/': bad port" }, { get("http://h:99999/") })
    assert.same({ nil, "bad url 'localhost/x': no scheme (http:// or https://)" },
      { get("localhost/x") })
    assert.same({ nil, "bad url 'http://u@h/': user info (user@) is not supported" },
      { get("http://u@h/") })
    assert.has_error(function() http.request { url = "http://h/", methd = "GET" } end,
      "rmq.http.request: unknown option 'methd' (method, url, headers, body, timeout, "
      .. "keepalive, keepalive_timeout, pool_size, max_body, redirects, ssl_verify)")
    assert.has_error(function()
      http.request { url = "http://127.0.0.1:" .. port .. "/", headers = { X = "a\r\nB: c" } }
    end, "rmq.http.request: header X contains CR or LF")
    assert.has_error(function() http.request { url = "http://h/", method = "get" } end,
      "rmq.http.request: bad method get (upper case: GET, POST, ...)")
  end)

  it("speaks https through sslhandshake", function()
    if socket.tcp().sslhandshake == nil then
      -- This build's cosockets have no sslhandshake: rmq.http says so and the rest is skipped.
      local _, port = server(0)
      assert.same({ nil, "https is not supported by this build" },
        { http.request { url = "https://127.0.0.1:" .. port .. "/", timeout = T } })
      pending("cosockets without sslhandshake in this build: https is not tested")
      return
    end
    local dir = helpers.tmpdir("https")
    local rc, out = helpers.run(string.format("openssl req -x509 -newkey rsa:2048 -nodes "
      .. "-subj /CN=localhost -keyout %s/k.pem -out %s/c.pem -days 1", dir, dir))
    assert.equal(0, rc, out)
    local log = dir .. "/s_server.out"
    helpers.spawn(string.format("openssl s_server -accept 127.0.0.1:0 -cert %s/c.pem -key %s/k.pem -www",
      dir, dir), { log = log })
    local port = helpers.wait_until(function()
      return tonumber(rh.read(log):match("ACCEPT [^\n]*:(%d+)"))
    end, 10, "s_server's port")
    local url = "https://127.0.0.1:" .. port .. "/"
    local res = assert(http.request { url = url, ssl_verify = false, timeout = T })
    assert.equal(200, res.status)
    assert.matches("s_server", res.body, 1, true)
    -- A self-signed certificate does not verify.
    local bad, err = http.request { url = url, timeout = T }
    assert.is_nil(bad)
    assert.is_string(err)
    -- TLS to a server that speaks plain HTTP fails cleanly too.
    local base = server(0)
    bad, err = http.request { url = base:gsub("^http:", "https:") .. "/", ssl_verify = false,
      timeout = 1000 }
    assert.is_nil(bad)
    assert.is_string(err)
  end)
end)

describe("rmqlua run: a handler that POSTs every message", function()
  R.broker_fixture("--delay-scale 0.001")

  it("retries the batches the server answered 503 and consumes everything", function()
    local base = server(5)
    local script = R.consumer_script("http_hook.lua", "http_hook", "HttpHook", 2, string.format([[
  consume_thread_min = 2, consume_thread_max = 2,
  consume = function(msgs)
    local m = msgs[1]
    local res, err = rmq.http.request { method = "POST", url = %q, body = m.body,
      headers = { ["Idempotency-Key"] = m.msg_id }, timeout = 5000 }
    if not res or res.status >= 500 then
      io.write("retry " .. m.body .. " " .. (res and res.status or err) .. "\n")
      return rmq.RECONSUME_LATER
    end
    io.write("posted " .. m.body .. " " .. res.status .. "\n")
  end,
}
]], base .. "/hook?fail=3"))
    local h = R.start(script)
    local N = 12
    for i = 1, N do R.produce("HttpHook", "m" .. i) end
    helpers.wait_until(function() return R.committed("http_hook", "HttpHook", 2) == N end, 60,
      "every message committed")
    for i = 1, N do assert.is_true(h.count("posted m" .. i .. " 200\n") >= 1, "m" .. i) end
    local s = stats(base)
    assert.is_true(s.status_503 >= math.floor(N / 3), "503s: " .. s.status_503)
    assert.equal(s.status_503, h.count("retry m%d+ 503\n"))
    assert.equal(0, h.stop())
  end)
end)

describe("examples/webhook.lua against httpd_test", function()
  R.broker_fixture("--delay-scale 0.001")
  local ffi = require "ffi"
  pcall(ffi.cdef, "int setenv(const char *, const char *, int); int unsetenv(const char *);")

  it("posts every message and retries the ones answered 503", function()
    local base = server(2)
    -- The consumer inherits WEBHOOK_URL from this process.
    ffi.C.setenv("WEBHOOK_URL", base .. "/hook?fail=4", 1)
    helpers.defer(function() ffi.C.unsetenv("WEBHOOK_URL") end)
    R.create_topic("WebhookTopic", 4)
    local N = 10
    for i = 1, N do R.produce("WebhookTopic", "w" .. i) end
    local h = R.start(rh.example("webhook"))
    helpers.wait_until(function() return R.committed("webhook_demo", "WebhookTopic", 4) == N end,
      60, "every message committed")
    assert.equal(N, h.count("posted %x+ %-> 200\n"))
    local s = stats(base)
    assert.is_true(s.status_503 >= 2, "503s: " .. s.status_503)
    assert.equal(s.status_503, h.count("retry %x+ %(503%)"))
    assert.equal(0, h.stop())
  end)
end)

describe("rmqlua test: handlers that wait, and stubbed rmq.http answers", function()
  local dir = helpers.file_tmpdir("http-test")

  local function write(name, text) return rh.write(dir, name, text) end

  local SCRIPT = [[
local rmq = require "rmq"
local http = rmq.http
return {
  consumer_group = "stub_demo",
  subscribe = { Hooks = "*" },
  consume = function(msgs)
    for i = 1, #msgs do
      rmq.sleep(0.001)
      local res, err = http.request { method = "POST", url = os.getenv("HOOK_URL")
        or "http://hook.example/x", body = msgs[i].body, timeout = 2000 }
      if not res then error("hook: " .. err) end
      if res.status >= 500 then return rmq.RECONSUME_LATER end
      if res.body ~= "ok" then error("body " .. res.body) end
    end
  end,
}
]]

  it("runs handlers that wait on rmq.sleep and a real rmq.http", function()
    local base = server(20)
    local s = write("real.lua", SCRIPT)
    local c = write("real_cases.lua", [[
return {
  { name = "posts", messages = { { body = "a" }, { body = "b" } }, expect = { status = "SUCCESS" } },
}
]])
    local rc, out = helpers.run(string.format("HOOK_URL=%s %s test %s %s",
      helpers.shq(base .. "/hook"), helpers.bin, s, c))
    assert.equal(0, rc, out)
    assert.matches("ok   posts", out, 1, true)
    assert.equal(2, stats(base).requests)
  end)

  it("answers from a case's http table or function; an unmatched request fails naming it", function()
    local s = write("stub.lua", SCRIPT)
    local c = write("stub_cases.lua", [[
local seen = {}
return {
  { name = "2xx is success",
    messages = { { body = "a" } },
    http = { ["POST http://hook.example/x"] = { status = 200, body = "ok" } },
    expect = { status = "SUCCESS", http = { "POST http://hook.example/x" } } },
  { name = "5xx is retried",
    messages = { { body = "a" } },
    http = { ["POST http://hook.example/x"] = { status = 503 } },
    expect = { status = "RECONSUME_LATER" } },
  { name = "a timeout is an error",
    messages = { { body = "a" } },
    http = { ["POST http://hook.example/x"] = "timeout" },
    expect = { error = "hook: timeout" } },
  { name = "a function sees the request",
    messages = { { body = "a" }, { body = "b" } },
    http = function(req)
      seen[#seen + 1] = req.method .. " " .. req.url .. " " .. req.body
      if req.body == "b" then return nil, "connection refused" end
      return { status = 200, body = "ok" }
    end,
    expect = { error = "hook: connection refused", http = 2 } },
  { name = "the function saw both",
    messages = { { body = "c" } },
    http = function(req)
      assert(#seen == 2 and seen[1] == "POST http://hook.example/x a" and seen[2]:find(" b$"))
      return { status = 200, body = "ok" }
    end },
  { name = "unmatched",
    messages = { { body = "a" } },
    http = { ["GET http://hook.example/x"] = { status = 200 } },
    expect = { status = "SUCCESS" } },
}
]])
    local rc, out = rh.rmqlua(string.format("test %s %s", s, c))
    assert.equal(1, rc, out)
    assert.matches("ok   2xx is success", out, 1, true)
    assert.matches("ok   5xx is retried", out, 1, true)
    assert.matches("ok   a timeout is an error", out, 1, true)
    assert.matches("ok   a function sees the request", out, 1, true)
    assert.matches("ok   the function saw both", out, 1, true)
    assert.matches("FAIL unmatched: [^\n]*unexpected error: [^\n]*rmqlua test: no http stub for "
      .. "POST http://hook.example/x %(the case stubs: GET http://hook.example/x%)", out)
    assert.matches("6 case%(s%), 1 failed", out)
  end)

  it("names a bad stub and a bad expect.http", function()
    local s = write("stub2.lua", SCRIPT)
    local c = write("stub2_cases.lua", [[
return {
  { name = "bad stub", messages = { { body = "a" } },
    http = { ["POST http://hook.example/x"] = 42 } },
  { name = "wrong requests", messages = { { body = "a" } },
    http = { ["POST http://hook.example/x"] = { status = 200, body = "ok" } },
    expect = { http = { "GET http://hook.example/y" } } },
}
]])
    local rc, out = rh.rmqlua(string.format("test %s %s", s, c))
    assert.equal(1, rc, out)
    assert.matches("FAIL bad stub: unexpected error: [^\n]*rmqlua test: the http stub for POST "
      .. "http://hook.example/x must be a response table, an error string or a function, got number", out)
    assert.matches('FAIL wrong requests: http requests { "POST http://hook.example/x" }, expected '
      .. '{ "GET http://hook.example/y" }', out, 1, true)
  end)
end)
