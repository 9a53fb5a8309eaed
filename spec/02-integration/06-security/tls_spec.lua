-- TLS end to end against the development broker serving TLS (`--tls-cert/--tls-key`), with
-- certificates made by the `openssl` command (the server's for IP 127.0.0.1: the identity
-- check is on; tls_identity_spec checks it): enforcing mode (name server and broker), the
-- permissive mode serving a plain and a TLS consumer at once, a server certificate from an
-- unknown CA refused with the address and OpenSSL's reason, test mode, client certificates
-- (an encrypted key with its password), and files that do not load (exit 2 naming them).
local helpers = require "helpers"
local sec = dofile(helpers.root .. "/spec/02-integration/06-security/sec.lua")
local raw = require "rawclient"
local ffi = require "ffi"
local lib = sec.lib
local shq = helpers.shq

describe("TLS", function()
  local certs = sec.certs_fixture("certs")

  -- A development broker serving topic (queues queues, else 4) over TLS with the certificate
  -- cert ("server" when not given; "rogue": the one a CA nobody trusts signed), more options in
  -- extra; stopped when the test ends.
  local function tls_broker(extra, topic, cert, queues)
    cert = cert or "server"
    local db, ns = sec.start_broker(("--topic %s:%d --tls-cert %s --tls-key %s %s"):format(
      topic, queues or 4, certs[cert], certs[cert .. "_key"], extra or ""))
    helpers.defer(function() lib.rmq_devbroker_stop(db) end)
    return db, ns
  end

  it("consumes end to end from a broker that enforces TLS, rmqlua send producing over TLS", function()
    local dir = helpers.tmpdir("tls-enforcing")
    local db, ns = tls_broker("--tls-mode enforcing", "TlsT")
    -- rmqlua send: the producer uses the same settings (name server and broker over TLS).
    local rc, out = helpers.run(("%s send --namesrv %s --topic TlsT --count 40 --size 32 "
      .. "--set use_tls=true --set tls_client_trust_cert_path=%s < /dev/null")
      :format(helpers.bin, ns, shq(certs.ca)))
    assert.equal(0, rc, out)
    assert.matches("sent 40, failed 0", out, 1, true)
    -- A plain client is refused: the connection is closed without an answer.
    local c = assert(raw.connect(ns))
    local resp, err = c:request(105, { topic = "TlsT" })
    c:close()
    assert.is_nil(resp, "a plain request was answered in enforcing mode")
    assert.equal("closed", err)

    local script, outf = sec.script(dir, { group = "tls_g1", topic = "TlsT", options = {
      use_tls = true, tls_client_trust_cert_path = certs.ca } })
    rc, out = sec.run_fg(script, "--namesrv " .. ns .. " --max-messages 40")
    assert.equal(0, rc, out)
    local got = sec.consumed(outf)
    for i = 0, 39 do
      local key = ("%d:"):format(i)
      local found = false
      for body in pairs(got) do if body:sub(1, #key) == key then found = true end end
      assert.is_true(found, "message " .. i .. " not consumed")
    end
    -- Offsets were committed over TLS too.
    helpers.wait_until(function()
      local sum = 0
      for q = 0, 3 do sum = sum + tonumber(lib.rmq_devbroker_committed_offset(db, 0, "tls_g1", "TlsT", q)) end
      return sum == 40
    end, 10, "offsets committed")
  end)

  it("speaks TLS to a name server given as a host name, its certificate naming it", function()
    -- The name comes from a hosts file of our own through nss_wrapper (as the host-name specs do).
    local dir = helpers.tmpdir("tls-host")
    local env = sec.hosts_env(dir, { "127.0.0.1 ns.rmq.test" })
    if not env then return pending(sec.NO_NSS_WRAPPER) end
    -- DNS *.rmq.test for the name server dialled by name, IP 127.0.0.1 for the broker.
    local db, ns = sec.start_broker(("--topic HostTlsT:4 --tls-cert %s --tls-key %s --tls-mode "
      .. "enforcing"):format(certs.wild, certs.wild_key))
    helpers.defer(function() lib.rmq_devbroker_stop(db) end)
    local rc, out = helpers.run(("%s%s send --namesrv ns.rmq.test:%s --topic HostTlsT --count 3 "
      .. "--set use_tls=true --set tls_client_trust_cert_path=%s < /dev/null")
      :format(env, helpers.bin, ns:match(":(%d+)$"), shq(certs.ca)))
    assert.equal(0, rc, out)
    assert.matches("sent 3, failed 0", out, 1, true)
  end)

  it("serves a plain and a TLS consumer at once in permissive mode", function()
    local dir = helpers.tmpdir("tls-permissive")
    local db, ns = tls_broker("", "MixT") -- permissive is the default, as in Java
    sec.produce(db, "MixT", 30, "mix")
    local s1, out1 = sec.script(dir, { name = "plain", group = "mix_plain", topic = "MixT" })
    local s2, out2 = sec.script(dir, { name = "tls", group = "mix_tls", topic = "MixT",
      options = { use_tls = true, tls_client_trust_cert_path = certs.ca } })
    local p1, log1 = sec.run(dir, s1, "--namesrv " .. ns, "plain")
    local p2, log2 = sec.run(dir, s2, "--namesrv " .. ns .. " --log-debug remoting", "tls")
    helpers.wait_until(function()
      return sec.count(sec.consumed(out1)) == 30 and sec.count(sec.consumed(out2)) == 30
    end, 60, "both consumers got all 30 messages (" .. log1 .. ", " .. log2 .. ")")
    helpers.kill(p1)
    helpers.kill(p2)
    -- The TLS consumer's connections (name server and broker) were TLS sessions.
    local tls_log = sec.read(log2)
    assert.truthy(tls_log:find("connection " .. ns .. ": TLS established", 1, true), log2)
    assert.truthy(tls_log:find("connection " .. ffi.string(lib.rmq_devbroker_broker_addr(db, 0))
      .. ": TLS established", 1, true), log2)
    assert.falsy(sec.read(log1):find("TLS", 1, true))
  end)

  it("refuses a server certificate from an unknown CA, naming the address and the reason, and retries", function()
    local dir = helpers.tmpdir("tls-rogue")
    local db, ns = tls_broker("", "RogueT", "rogue", 2)
    sec.produce(db, "RogueT", 5, "r")
    local script, outf = sec.script(dir, { group = "rogue_g", topic = "RogueT", options = {
      use_tls = true, tls_client_trust_cert_path = certs.ca } })
    local pid, log = sec.run(dir, script, "--namesrv " .. ns)
    local want = "TLS handshake with " .. ns .. " failed: certificate verify failed"
    helpers.wait_until(function() return sec.occurrences(sec.read(log), want) >= 2 end, 30,
      "two refused handshakes in " .. log)
    assert.equal(0, sec.count(sec.consumed(outf)))
    helpers.kill(pid)
  end)

  it("trusts any server certificate in test mode, and with tls_client_auth_server off", function()
    local dir = helpers.tmpdir("tls-test-mode")
    local db, ns = tls_broker("--tls-mode enforcing", "TestModeT", "rogue", 2)
    sec.produce(db, "TestModeT", 10, "t")
    for i, opts in ipairs { { tls_test_mode_enable = true }, { tls_client_auth_server = false } } do
      opts.use_tls = true
      local script, outf = sec.script(dir, { name = "c" .. i, group = "tm_g" .. i, topic = "TestModeT",
        options = opts })
      local rc, out = sec.run_fg(script, "--namesrv " .. ns .. " --max-messages 10")
      assert.equal(0, rc, out)
      assert.equal(10, sec.count(sec.consumed(outf)))
    end
  end)

  it("presents a client certificate (encrypted key and its password) to a broker that requires one", function()
    local dir = helpers.tmpdir("tls-client-cert")
    local db, ns = tls_broker("--tls-mode enforcing --tls-verify-client " .. certs.ca, "ClientCertT")
    sec.produce(db, "ClientCertT", 10, "c")
    -- Without a certificate: the broker refuses the session, nothing is consumed.
    local s0, out0 = sec.script(dir, { name = "nocert", group = "cc_none", topic = "ClientCertT",
      options = { use_tls = true, tls_client_trust_cert_path = certs.ca } })
    local pid, log = sec.run(dir, s0, "--namesrv " .. ns, "nocert")
    helpers.wait_until(function() return sec.read(log):find("certificate required", 1, true) end,
      30, "the refusal in " .. log)
    helpers.kill(pid)
    assert.equal(0, sec.count(sec.consumed(out0)))
    -- With the certificate and its encrypted key.
    local s1, out1 = sec.script(dir, { name = "cert", group = "cc_ok", topic = "ClientCertT",
      options = { use_tls = true, tls_client_trust_cert_path = certs.ca,
        tls_client_cert_path = certs.client, tls_client_key_path = certs.client_enc_key,
        tls_client_key_password = "key-pass" } })
    local rc, out = sec.run_fg(s1, "--namesrv " .. ns .. " --max-messages 10")
    assert.equal(0, rc, out)
    assert.equal(10, sec.count(sec.consumed(out1)))
  end)

  it("makes files that do not load a configuration error (exit 2) naming the file", function()
    local dir = helpers.tmpdir("tls-bad-files")
    local notpem = dir .. "/not-a-cert.pem"
    local f = assert(io.open(notpem, "w")); f:write("hello\n"); f:close()
    local cases = {
      { opts = { tls_client_cert_path = notpem, tls_client_key_path = certs.client_key },
        want = "tls_client_cert_path: cannot load the certificate chain " .. notpem },
      { opts = { tls_client_cert_path = certs.client, tls_client_key_path = dir .. "/missing.key" },
        want = "tls_client_key_path: cannot read " .. dir .. "/missing.key" },
      { opts = { tls_client_cert_path = certs.client, tls_client_key_path = certs.client_enc_key,
                 tls_client_key_password = "wrong" },
        want = "tls_client_key_path: cannot load the private key " .. certs.client_enc_key },
      { opts = { tls_client_cert_path = certs.client, tls_client_key_path = certs.server_key },
        want = "does not match the certificate" },
      { opts = { tls_client_trust_cert_path = notpem },
        want = "tls_client_trust_cert_path: cannot load CA certificates from " .. notpem },
    }
    for i, c in ipairs(cases) do
      c.opts.use_tls = true
      local script = sec.script(dir, { name = "bad" .. i, group = "bad_g", topic = "T", options = c.opts })
      for _, cmd in ipairs { "run --namesrv 127.0.0.1:1", "check" } do
        local rc, out = helpers.run(("%s %s %s < /dev/null"):format(helpers.bin, cmd, shq(script)))
        assert.equal(2, rc, cmd .. " case " .. i .. ": " .. out)
        assert.matches(c.want, out, 1, true)
      end
    end
    -- --embedded serves plain TCP: a TLS script is told so instead of failing handshakes.
    local script = sec.script(dir, { name = "embedded", group = "emb_g", topic = "T",
      options = { use_tls = true, tls_test_mode_enable = true } })
    local rc0, out0 = helpers.run(("%s run --embedded %s < /dev/null"):format(helpers.bin, shq(script)))
    assert.equal(2, rc0, out0)
    assert.matches("the embedded development broker serves plain TCP", out0, 1, true)
    -- The development broker, too.
    local err = sec.broker_error(("--tls-cert %s --tls-key %s"):format(notpem, certs.server_key))
    assert.matches("--tls-cert: cannot load the certificate chain " .. notpem, err, 1, true)
    local rc, out = helpers.run(("%s broker --listen 127.0.0.1:0 --tls-cert %s --tls-key %s")
      :format(helpers.bin, shq(certs.server), shq(dir .. "/nope.key")))
    assert.equal(2, rc, out)
    assert.matches("--tls-key: cannot read " .. dir .. "/nope.key", out, 1, true)
  end)
end)
