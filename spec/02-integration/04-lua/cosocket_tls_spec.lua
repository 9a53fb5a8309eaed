-- sock:sslhandshake (runtime/luahost/cossl.c) against a real TLS peer (spec/c/tools/copeer.c
-- --tls, started and stopped here) with a throwaway CA and server certificates made by the
-- security specs' helper (sec.make_certs, in a temp folder): verification against
-- lua_ssl_trusted_certificate (set for this thread with rmq_co_configure, as a consume thread
-- gets it from the option), OpenResty's results and error strings, TLS kept in the keep-alive
-- pool, session reuse, handshakes that fail or time out; and the per-thread socket limit.
local helpers = require "helpers"
local rh = require "run_helpers"
local sec = require "02-integration.06-security.sec"
local socket = require "rmq.socket"
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
