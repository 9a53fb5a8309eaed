-- sock:sslhandshake (runtime/luahost/cossl.c) against a real TLS peer (spec/c/tools/copeer.c
-- --tls, started and stopped here) with a throwaway CA and server certificates made by the
-- security specs' helper (sec.make_certs, in a temp folder): verification against
-- lua_ssl_trusted_certificate (set for this thread with rmq_co_configure, as a consume thread
-- gets it from the option), OpenResty's results and error strings, TLS kept in the keep-alive
-- pool, session reuse, handshakes that fail or time out; and the per-thread socket limit.
local helpers = require "helpers"
local rh = require "run_helpers"
local R = require "02-integration.04-lua.runner"
local sec = require "02-integration.06-security.sec"
local socket = require "rmq.socket"
local co = require "rmq.co"
local rmq = require "rmq"
local C = require("rmq.core").C

local COPEER = (helpers.bin:gsub("[^/]+$", "")) .. "copeer"
local shq = helpers.shq

-- A copeer with TLS (cert and key: paths; extra: more flags), stopped when the test ends: its port.
local function tls_peer(cert, key, extra)
  local log = helpers.tmpdir("copeer") .. "/peer.out"
  helpers.spawn(("%s --tls %s %s %s"):format(COPEER, shq(cert), shq(key), extra or ""), { log = log })
  return helpers.wait_until(function()
    return tonumber(rh.read(log):match("PORT (%d+)"))
  end, 10, "copeer's port in " .. log)
end

local function sh(cmd)
  local rc, out = helpers.run(cmd)
  assert(rc == 0, cmd .. "\n" .. out)
end

-- In certs.dir: a server certificate two intermediate CAs below ca (chain.pem: leaf, then both
-- intermediates; chain.key), for the verify depth.
local function make_chain(certs)
  local d = shq(certs.dir)
  local ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
  local f = assert(io.open(certs.dir .. "/ca.ext", "w"))
  f:write("basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n")
  f:close()
  local function sign(name, cn, signer, ext)
    sh(("cd %s && openssl req %s -keyout %s.key -out %s.csr -subj %s %s 2>&1 && "
      .. "openssl x509 -req -in %s.csr -CA %s.pem -CAkey %s.key -CAcreateserial -out %s.pem "
      .. "-days 2 %s 2>&1 && rm -f %s.csr"):format(d, ec, name, name, shq("/CN=" .. cn),
      ext and "" or "-addext 'subjectAltName=IP:127.0.0.1,DNS:localhost'", name, signer, signer,
      name, ext and "-extfile ca.ext" or "-copy_extensions copy", name))
  end
  sign("int1", "spec intermediate 1", "ca", true)
  sign("int2", "spec intermediate 2", "int1", true)
  sign("deep", "127.0.0.1", "int2", false)
  sh(("cd %s && cat deep.pem int2.pem int1.pem > chain.pem"):format(d))
  return certs.dir .. "/chain.pem", certs.dir .. "/deep.key"
end

-- This thread's cosocket settings for one test (back to the defaults when it ends).
local function configure(max, ca, depth)
  C.rmq_co_configure(max or 0, ca, depth or -1)
  helpers.defer(function() C.rmq_co_configure(0, nil, -1) end)
end

describe("sock:sslhandshake against a real TLS peer", function()
  local certs = sec.certs_fixture("cossl")

  it("verifies the peer with the CA file, then sends and receives over TLS", function()
    configure(nil, certs.ca)
    local port = tls_peer(certs.server, certs.server_key)
    local s = socket.tcp()
    assert(s:connect("127.0.0.1", port))
    local sess, err = s:sslhandshake(nil, "localhost", true)
    assert.is_nil(err)
    assert.equal("cdata", type(sess))
    assert.equal(4, s:send({ "a", { "b", 1 }, "\n" }))
    assert.equal("echo:ab1", s:receive())
    s:send("12345\n")
    assert.equal("echo:", s:receive(5))
    assert.equal("12345", s:receive())
    s:send("k=v\n")
    assert.equal("echo:k", s:receiveuntil("=")())
    assert.equal("v", s:receive())
    local big = string.rep("x", 60000) -- several TLS records each way
    s:send(big .. "\n")
    local got = s:receive()
    assert.is_true(got == "echo:" .. big, "the long line came back whole")
    s:send("bye\n")
    assert.equal("bye\n", s:receive("*a"))
    assert.same({ nil, "closed" }, { s:receive() })
    -- An IP address as server_name: checked against the certificate's IP names, no SNI.
    local t = socket.tcp()
    assert(t:connect("127.0.0.1", port))
    assert.is_true(t:sslhandshake(false, "127.0.0.1", true))
    t:send("ip\n")
    assert.equal("echo:ip", t:receive())
    t:close()
  end)

  it("fails verification with a CA that did not sign the certificate, or another host name", function()
    configure(nil, certs.rogue_ca)
    local port = tls_peer(certs.server, certs.server_key)
    local s = socket.tcp()
    assert(s:connect("127.0.0.1", port))
    local ok, err = s:sslhandshake(nil, "localhost", true)
    assert.is_nil(ok)
    assert.matches("^%d+: ", err)
    assert.matches("local issuer certificate", err, 1, true)
    assert.same({ nil, "closed" }, { s:send("x\n") }) -- a failed handshake closes the socket
    -- The right CA, a name the certificate does not hold.
    configure(nil, certs.ca)
    assert(s:connect("127.0.0.1", port))
    assert.same({ nil, "certificate host mismatch" }, { s:sslhandshake(nil, "wrong.example", true) })
    -- The default store (the system's) does not know the spec's CA either.
    configure()
    assert(s:connect("127.0.0.1", port))
    ok, err = s:sslhandshake(nil, "localhost", true)
    assert.is_nil(ok)
    assert.matches("^%d+: ", err)
    -- A certificate of the rogue CA, trusted CA configured: fails too.
    configure(nil, certs.ca)
    local rport = tls_peer(certs.rogue, certs.rogue_key)
    assert(s:connect("127.0.0.1", rport))
    ok, err = s:sslhandshake(nil, "localhost", true)
    assert.is_nil(ok)
    assert.matches("^%d+: ", err)
  end)

  it("accepts any certificate without ssl_verify", function()
    configure(nil, certs.rogue_ca)
    local port = tls_peer(certs.wrong, certs.wrong_key)
    local s = socket.tcp()
    assert(s:connect("127.0.0.1", port))
    assert.is_true(s:sslhandshake(false, "localhost", false))
    s:send("plain trust\n")
    assert.equal("echo:plain trust", s:receive())
    s:close()
  end)

  it("accepts a chain no longer than the verify depth", function()
    local chain, key = make_chain(certs)
    local port = tls_peer(chain, key)
    configure(nil, certs.ca, 1)
    local s = socket.tcp()
    assert(s:connect("127.0.0.1", port))
    local ok, err = s:sslhandshake(false, "localhost", true)
    assert.is_nil(ok)
    assert.matches("^%d+: ", err)
    configure(nil, certs.ca, 2)
    assert(s:connect("127.0.0.1", port))
    assert.is_true(s:sslhandshake(false, "localhost", true))
    s:close()
  end)

  it("names a CA file it cannot load and the option that gave it", function()
    local dir = helpers.tmpdir("cossl-ca")
    local bad = dir .. "/not-a-ca.pem"
    local f = assert(io.open(bad, "w"))
    f:write("not a certificate\n")
    f:close()
    configure(nil, bad)
    local port = tls_peer(certs.server, certs.server_key)
    local s = socket.tcp()
    assert(s:connect("127.0.0.1", port))
    local ok, err = s:sslhandshake(nil, "localhost", true)
    assert.is_nil(ok)
    assert.matches("lua_ssl_trusted_certificate: cannot load " .. bad, err, 1, true)
  end)

  it("keeps a TLS connection TLS in the keep-alive pool, and resumes a session", function()
    configure(nil, certs.ca)
    local port = tls_peer(certs.server, certs.server_key)
    local s = socket.tcp()
    assert(s:connect("127.0.0.1", port))
    local sess = assert(s:sslhandshake(nil, "localhost", true))
    s:send("one\n")
    assert.equal("echo:one", s:receive())
    assert.equal(0, s:getreusedtimes())
    assert.equal(1, s:setkeepalive(10000, 4))
    assert(s:connect("127.0.0.1", port))
    assert.equal(1, s:getreusedtimes())
    -- Reused: TLS already, the handshake returns at once; the talk goes on encrypted.
    assert.truthy(s:sslhandshake(sess, "localhost", true))
    s:send("two\n")
    assert.equal("echo:two", s:receive())
    s:send("conns\n")
    assert.equal("1", s:receive())
    s:close()
    -- A new connection offered the earlier session.
    local t = socket.tcp()
    assert(t:connect("127.0.0.1", port))
    assert.truthy(t:sslhandshake(sess, "localhost", true))
    t:send("three\n")
    assert.equal("echo:three", t:receive())
    assert(t:connect("127.0.0.1", port, { pool = "fresh" }))
    assert.same({ nil, "bad session: expects one sslhandshake returned" }, { t:sslhandshake("x") })
    t:close()
  end)

  it("answers a second handshake started meanwhile with \"socket busy\", the first one unharmed", function()
    configure(nil, certs.ca)
    local port = tls_peer(certs.server, certs.server_key)
    local ok, r = co.run(function()
      local s = socket.tcp()
      assert(s:connect("127.0.0.1", port))
      local first = rmq.thread.spawn(function() return s:sslhandshake(false, "localhost", true) end)
      local second = { s:sslhandshake(false, "localhost", true) }
      local _, done = rmq.thread.wait(first)
      s:send("after\n")
      return { second[1], second[2], done, s:receive() }
    end, debug.traceback)
    assert.is_true(ok, r)
    assert.same({ nil, "socket busy", true, "echo:after" }, r)
  end)

  it("fails a handshake the peer closes, and times one out the peer never answers", function()
    configure(nil, certs.ca)
    local cport = tls_peer(certs.server, certs.server_key, "--hs close")
    local s = socket.tcp()
    assert(s:connect("127.0.0.1", cport))
    assert.same({ nil, "handshake failed" }, { s:sslhandshake(nil, "localhost", true) })
    local sport = tls_peer(certs.server, certs.server_key, "--hs stall")
    s:settimeouts(200, 60000, 60000) -- the connect timeout is the handshake's
    assert(s:connect("127.0.0.1", sport))
    assert.same({ nil, "timeout" }, { s:sslhandshake(nil, "localhost", true) })
    -- A plain TCP peer answering garbage (copeer without --tls echoes the hello).
    local log = helpers.tmpdir("copeer") .. "/peer.out"
    helpers.spawn(COPEER, { log = log })
    local pport = helpers.wait_until(function()
      return tonumber(rh.read(log):match("PORT (%d+)"))
    end, 10, "copeer's port")
    s:settimeouts(5000, 5000, 5000)
    assert(s:connect("127.0.0.1", pport))
    local ok, err = s:sslhandshake(nil, "localhost", true)
    assert.is_nil(ok)
    assert.is_string(err)
    assert.same({ nil, "closed" }, { s:sslhandshake(nil, "localhost", true) })
  end)
end)

describe("the per-thread socket limit", function()
  it("refuses a connect past lua_socket_max_per_thread, pooled sockets counted", function()
    configure(3)
    local log = helpers.tmpdir("copeer") .. "/peer.out"
    helpers.spawn(COPEER, { log = log })
    local port = helpers.wait_until(function()
      return tonumber(rh.read(log):match("PORT (%d+)"))
    end, 10, "copeer's port")
    local socks = {}
    for i = 1, 3 do
      socks[i] = socket.tcp()
      assert(socks[i]:connect("127.0.0.1", port))
    end
    local ok, err = socket.tcp():connect("127.0.0.1", port)
    assert.is_nil(ok)
    assert.equal("too many open sockets on this thread (3 open; lua_socket_max_per_thread = 3)", err)
    -- One idle in the pool still counts; a closed one does not.
    assert.equal(1, socks[1]:setkeepalive(10000, 10))
    ok, err = socket.tcp():connect("127.0.0.1", port, { pool = "other" })
    assert.is_nil(ok)
    assert.matches("lua_socket_max_per_thread = 3", err, 1, true)
    socks[2]:close()
    local extra = socket.tcp()
    assert(extra:connect("127.0.0.1", port, { pool = "other" }))
    extra:close()
    socks[3]:close()
    socket._close_pools()
  end)
end)

describe("rmqlua run: cosocket options", function()
  local certs = sec.certs_fixture("cossl-run")
  R.broker_fixture("--delay-scale 0.001")

  it("verifies with lua_ssl_trusted_certificate and lua_ssl_verify_depth", function()
    local chain, key = make_chain(certs)
    local port = tls_peer(certs.server, certs.server_key)
    local deep = tls_peer(chain, key)
    local script = R.consumer_script("cossl_opts.lua", "cossl_opts", "CosslOpts", 1, string.format([[
  consume_thread_min = 1, consume_thread_max = 1,
  lua_ssl_trusted_certificate = %q, lua_ssl_verify_depth = 1,
  consume = function(msgs)
    local function try(port)
      local s = rmq.socket.tcp()
      assert(s:connect("127.0.0.1", port))
      local ok, err = s:sslhandshake(false, "localhost", true)
      if not ok then return "failed " .. err end
      s:send(msgs[1].body .. "\n")
      local answer = s:receive()
      s:close()
      return answer
    end
    print("near " .. try(%d))
    print("deep " .. try(%d))
  end,
}
]], certs.ca, port, deep))
    local h = R.start(script)
    R.produce("CosslOpts", "hello")
    h.wait_for("deep [^\n]+\n", "both handshakes")
    assert.equal(1, h.count("near echo:hello\n"))
    assert.equal(1, h.count("deep failed %d+: [^\n]+\n"))
    assert.equal(0, h.stop())
  end)

  it("does not start with a lua_ssl_trusted_certificate it cannot read, naming it", function()
    local missing = helpers.tmpdir("cossl-missing") .. "/no-such-ca.pem"
    local script = R.consumer_script("cossl_noca.lua", "cossl_noca", "CosslNoCa", 1, string.format([[
  lua_ssl_trusted_certificate = %q,
  consume = function() end,
}
]], missing))
    local h = R.run(script)
    assert.is_true(h.wait_exit() ~= 0)
    assert.matches("lua_ssl_trusted_certificate: cannot read " .. missing, h.out(), 1, true)
  end)

  it("fails a connect past lua_socket_max_per_thread; the batch comes back, nothing lost", function()
    local log = helpers.tmpdir("copeer") .. "/peer.out"
    helpers.spawn(COPEER, { log = log })
    local port = helpers.wait_until(function()
      return tonumber(rh.read(log):match("PORT (%d+)"))
    end, 10, "copeer's port")
    local script = R.consumer_script("cossl_max.lua", "cossl_max", "CosslMax", 1, string.format([[
  consume_thread_min = 1, consume_thread_max = 1, lua_socket_max_per_thread = 2,
  -- One batch at a time: batches in flight on the thread would share its 2 sockets.
  consume_batches_per_thread = 1,
  consume = function(msgs)
    local m = msgs[1]
    local n = m.reconsume_times == 0 and 3 or 2
    for i = 1, n do
      local s = rmq.socket.tcp()
      local ok, err = s:connect("127.0.0.1", %d)
      if not ok then
        print("refused " .. m.body .. " " .. i .. " " .. err)
        error(err)
      end
    end
    print("done " .. m.body .. " " .. m.reconsume_times)
  end,
}
]], port))
    local h = R.start(script)
    for i = 1, 3 do R.produce("CosslMax", "m" .. i) end
    for i = 1, 3 do h.wait_for("done m" .. i .. " 1\n", "m" .. i .. " consumed again") end
    helpers.wait_until(function() return R.committed("cossl_max", "CosslMax", 1) == 3 end, 30,
      "the queue committed")
    assert.equal(3, h.count("refused m%d 3 too many open sockets on this thread %(2 open; "
      .. "lua_socket_max_per_thread = 2%)\n"))
    assert.equal(0, h.count("done m%d 0"))
    assert.equal(0, h.stop())
  end)
end)
