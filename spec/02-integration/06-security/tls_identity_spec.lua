-- The server's identity over TLS (tls_verify_server_name, on by default): the development
-- broker serves TLS with certificates made by the spec (openssl, all signed by the trusted CA),
-- and the certificate must name the address dialled, on name server and broker connections,
-- for `rmqlua run` and `rmqlua send`: the right IP accepted; a certificate for another name,
-- or with a DNS name only when an IP is dialled, refused naming the address, the certificate's
-- names and the option (retried, the process lives on); a host name matched (resolving to
-- loopback through nss_wrapper) while the broker's IP is not; a wildcard as the left-most label
-- only; the option off accepting the mismatch (and `check` warning); the system CA file
-- (SSL_CERT_FILE) checked the same way; the development broker warning about a certificate
-- that does not name its address. And the hints when the two sides disagree about TLS: a plain
-- client of a TLS-only server, a TLS client of a plain server.
local helpers = require "helpers"
local sec = dofile(helpers.root .. "/spec/02-integration/06-security/sec.lua")
local ffi = require "ffi"
local lib = sec.lib
local shq = helpers.shq

local count = sec.occurrences

describe("TLS server identity", function()
  local certs = sec.certs_fixture("id-certs")

  -- A development broker serving TLS only with the certificate name (certs.<name>): db, ns.
  local function tls_broker(name, topic)
    local db, ns = sec.start_broker(("--topic %s:2 --tls-cert %s --tls-key %s --tls-mode enforcing")
      :format(topic, certs[name], certs[name .. "_key"]))
    helpers.defer(function() lib.rmq_devbroker_stop(db) end)
    return db, ns
  end

  -- `rmqlua send` of 3 messages over TLS, trusting the spec's CA unless sets says otherwise.
  local function send(ns, topic, sets, prefix)
    return helpers.run(("%s%s send --namesrv %s --topic %s --count 3 --set use_tls=true %s "
      .. "< /dev/null"):format(prefix or "", helpers.bin, ns, topic,
      sets or ("--set tls_client_trust_cert_path=" .. shq(certs.ca))))
  end

  local function refusal(addr, host, kind, names)
    return ("TLS handshake with %s failed: certificate verify failed: the server's certificate "
      .. "does not name %s, the %s dialled (it names %s); tls_verify_server_name = false turns "
      .. "this check off"):format(addr, host, kind, names)
  end

  it("accepts a certificate naming the IP dialled, on name server and broker connections", function()
    local db, ns = tls_broker("server", "IdOkT")
    local rc, out = send(ns, "IdOkT")
    assert.equal(0, rc, out)
    assert.matches("sent 3, failed 0", out, 1, true)
    assert.equal(3, tonumber(lib.rmq_devbroker_max_offset(db, 0, "IdOkT", 0))
      + tonumber(lib.rmq_devbroker_max_offset(db, 0, "IdOkT", 1)))
  end)

  it("refuses a certificate for another name from the same CA, saying what it names, and retries", function()
    local dir = helpers.tmpdir("id-wrong")
    local db, ns = tls_broker("wrong", "IdWrongT")
    local want = refusal(ns, "127.0.0.1", "IP", "DNS:wrong.example")
    local rc, out = send(ns, "IdWrongT")
    assert.is_not.equal(0, rc, out)
    assert.matches(want, out, 1, true)
    assert.matches("sent 0, failed 3", out, 1, true)
    -- A consumer: retried with the backoff, nothing consumed, the process lives on.
    sec.produce(db, "IdWrongT", 4, "w")
    local script, outf = sec.script(dir, { group = "id_wrong_g", topic = "IdWrongT",
      options = { use_tls = true, tls_client_trust_cert_path = certs.ca } })
    local pid, log = sec.run(dir, script, "--namesrv " .. ns)
    helpers.wait_until(function() return count(sec.read(log), want) >= 3 end, 30,
      "three refused handshakes in " .. log)
    assert.is_true(helpers.alive(pid))
    assert.equal(0, sec.count(sec.consumed(outf)))
    helpers.kill(pid)
  end)

  it("refuses a certificate with a DNS name only when an IP is dialled", function()
    local _, ns = tls_broker("dnsonly", "IdDnsT")
    local rc, out = send(ns, "IdDnsT")
    assert.is_not.equal(0, rc, out)
    assert.matches(refusal(ns, "127.0.0.1", "IP", "DNS:localhost"), out, 1, true)
  end)

  it("matches a host name dialled, and checks the broker's IP on its own connection", function()
    local dir = helpers.tmpdir("id-named")
    local env = sec.hosts_env(dir, { "127.0.0.1 rmq-tls-broker.test" })
    if not env then return pending(sec.NO_NSS_WRAPPER) end
    -- DNS rmq-tls-broker.test only: right for the name server dialled by that name, wrong for
    -- the broker, which registered as 127.0.0.1:port.
    local db, ns = tls_broker("named", "IdNamedT")
    local ns_name = "rmq-tls-broker.test:" .. ns:match(":(%d+)$")
    local broker = ffi.string(lib.rmq_devbroker_broker_addr(db, 0))
    local want = refusal(broker, "127.0.0.1", "IP", "DNS:rmq-tls-broker.test")
    local rc, out = send(ns_name, "IdNamedT", nil, env)
    assert.is_not.equal(0, rc, out)
    assert.matches(want, out, 1, true)
    assert.falsy(out:find("TLS handshake with " .. ns_name, 1, true), out)
    -- A consumer: the name server's session established, the broker's refused.
    sec.produce(db, "IdNamedT", 4, "n")
    local script, outf = sec.script(dir, { group = "id_named_g", topic = "IdNamedT",
      options = { use_tls = true, tls_client_trust_cert_path = certs.ca } })
    local log = dir .. "/run.log"
    local pid = helpers.spawn(("%s%s run %s --namesrv %s --log-debug remoting"):format(env,
      helpers.bin, shq(script), ns_name), { log = log })
    helpers.wait_until(function()
      local text = sec.read(log)
      return text:find("connection " .. ns_name .. ": TLS established", 1, true)
        and count(text, want) >= 2
    end, 30, "the name server's session and two refused broker handshakes in " .. log)
    assert.equal(0, sec.count(sec.consumed(outf)))
    helpers.kill(pid)
  end)

  it("matches a wildcard as the whole left-most label only", function()
    local dir = helpers.tmpdir("id-wild")
    local env = sec.hosts_env(dir, { "127.0.0.1 ns.rmq.test", "127.0.0.1 deep.ns.rmq.test" })
    if not env then return pending(sec.NO_NSS_WRAPPER) end
    local _, ns = tls_broker("wild", "IdWildT")
    local port = ns:match(":(%d+)$")
    local rc, out = send("ns.rmq.test:" .. port, "IdWildT", nil, env)
    assert.equal(0, rc, out)
    assert.matches("sent 3, failed 0", out, 1, true)
    rc, out = send("deep.ns.rmq.test:" .. port, "IdWildT", nil, env)
    assert.is_not.equal(0, rc, out)
    assert.matches(refusal("deep.ns.rmq.test:" .. port, "deep.ns.rmq.test", "host name",
      "DNS:*.rmq.test, IP:127.0.0.1"), out, 1, true)
  end)

  it("accepts a certificate for another name with tls_verify_server_name = false, check warning", function()
    local dir = helpers.tmpdir("id-off")
    local db, ns = tls_broker("wrong", "IdOffT")
    local rc, out = send(ns, "IdOffT", "--set tls_client_trust_cert_path=" .. shq(certs.ca)
      .. " --set tls_verify_server_name=false")
    assert.equal(0, rc, out)
    assert.matches("sent 3, failed 0", out, 1, true)
    sec.produce(db, "IdOffT", 5, "o")
    local script, outf = sec.script(dir, { group = "id_off_g", topic = "IdOffT", options = {
      use_tls = true, tls_client_trust_cert_path = certs.ca, tls_verify_server_name = false } })
    rc, out = sec.run_fg(script, "--namesrv " .. ns .. " --max-messages 8")
    assert.equal(0, rc, out)
    assert.equal(8, #sec.lines(outf)) -- 5 stored and the 3 sent
    -- The chain is still verified: a certificate from a CA nobody trusts is refused.
    local _, rogue_ns = tls_broker("rogue", "IdOffRogueT")
    rc, out = send(rogue_ns, "IdOffRogueT", "--set tls_client_trust_cert_path=" .. shq(certs.ca)
      .. " --set tls_verify_server_name=false")
    assert.is_not.equal(0, rc, out)
    assert.matches("certificate verify failed (unable to get local issuer certificate)", out, 1, true)
    -- check: valid, with a warning; without use_tls the option is an error.
    rc, out = helpers.run(("%s check %s"):format(helpers.bin, shq(script)))
    assert.equal(0, rc, out)
    assert.matches("warning: tls_verify_server_name = false: the server's certificate is "
      .. "verified but need not name the address dialled", out, 1, true)
    local plain = sec.script(dir, { name = "plain", group = "id_off_p", topic = "IdOffT",
      options = { tls_verify_server_name = false } })
    rc, out = helpers.run(("%s check %s"):format(helpers.bin, shq(plain)))
    assert.equal(2, rc, out)
    assert.matches("option tls_verify_server_name is set but use_tls is false", out, 1, true)
    local on = sec.script(dir, { name = "on", group = "id_off_on", topic = "IdOffT",
      options = { use_tls = true, tls_client_trust_cert_path = certs.ca } })
    rc, out = helpers.run(("%s check %s"):format(helpers.bin, shq(on)))
    assert.equal(0, rc, out)
    assert.falsy(out:find("warning", 1, true), out)
  end)

  it("checks the name against certificates trusted through the system CA file", function()
    -- OpenSSL's SSL_CERT_FILE stands for the system's CA file: the spec's CA is "public".
    local prefix = "env SSL_CERT_FILE=" .. shq(certs.ca) .. " "
    local _, wrong_ns = tls_broker("wrong", "IdSysWrongT")
    local rc, out = send(wrong_ns, "IdSysWrongT", "", prefix)
    assert.is_not.equal(0, rc, out)
    assert.matches(refusal(wrong_ns, "127.0.0.1", "IP", "DNS:wrong.example"), out, 1, true)
    local _, ns = tls_broker("server", "IdSysT")
    rc, out = send(ns, "IdSysT", "", prefix)
    assert.equal(0, rc, out)
    assert.matches("sent 3, failed 0", out, 1, true)
  end)

  it("has the development broker warn when its certificate does not name its address", function()
    for _, c in ipairs { { cert = "wrong", warns = true }, { cert = "server", warns = false } } do
      local pid, log = helpers.spawn_broker(("--listen 127.0.0.1:0 --tls-cert %s --tls-key %s")
        :format(shq(certs[c.cert]), shq(certs[c.cert .. "_key"])))
      helpers.wait_until(function() return sec.read(log):find("rmqlua broker: broker", 1, true) end,
        30, "the broker's start in " .. log)
      helpers.kill(pid)
      local text = sec.read(log)
      local warned = text:find("the --tls-cert certificate does not name 127.0.0.1 (it names "
        .. "DNS:wrong.example): clients that check the server's name (rmqlua by default) refuse "
        .. "it; give it subjectAltName IP:127.0.0.1", 1, true)
      assert.equal(c.warns, warned ~= nil, text)
    end
  end)

  it("tells a plain client, once, that a server closing every connection may require TLS", function()
    local dir = helpers.tmpdir("id-plain-client")
    local _, ns = tls_broker("server", "IdPlainT")
    local script = sec.script(dir, { group = "id_plain_g", topic = "IdPlainT" })
    local pid, log = sec.run(dir, script, "--namesrv " .. ns)
    local closed = "connection " .. ns .. " closed by peer"
    helpers.wait_until(function() return count(sec.read(log), closed) >= 6 end, 30,
      "six closed connections in " .. log)
    helpers.kill(pid)
    local text = sec.read(log)
    assert.equal(1, count(text, ns .. " closed 3 connections in a row before answering the first "
      .. "request: the server may require TLS (use_tls = true), or refuse this client's address"),
      text)
  end)

  it("tells a TLS client that a plain server may not speak TLS", function()
    local dir = helpers.tmpdir("id-tls-client")
    local db, ns = sec.start_broker("--topic IdNoTlsT:2")
    helpers.defer(function() lib.rmq_devbroker_stop(db) end)
    local rc, out = send(ns, "IdNoTlsT")
    assert.is_not.equal(0, rc, out)
    assert.matches("TLS handshake with " .. ns .. " failed: ", out, 1, true)
    assert.matches("before the handshake finished: it may not speak TLS (use_tls = false for a "
      .. "plain server)", out, 1, true)
    local script = sec.script(dir, { group = "id_notls_g", topic = "IdNoTlsT",
      options = { use_tls = true, tls_client_trust_cert_path = certs.ca } })
    local pid, log = sec.run(dir, script, "--namesrv " .. ns)
    helpers.wait_until(function()
      return count(sec.read(log), "it may not speak TLS (use_tls = false for a plain server)") >= 2
    end, 30, "two hints in " .. log)
    helpers.kill(pid)
  end)
end)
