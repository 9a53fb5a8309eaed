-- rmqlua tail and rmqlua redrive against clusters with ACL and TLS, as rmqlua send and run work
-- with them: `--set` takes the connection options (access_key, secret_key, security_token,
-- use_tls, tls_*), every request either command sends (name server and broker: routes, offsets,
-- pulls, sends, progress commits) is signed and goes over TLS, and a refusal by the broker's
-- access control (the development broker's `--acl`, checked as PlainAccessValidator does) ends
-- the command with exit code 3 and a message naming the access key, the resource and the
-- permission. `--set namespace=NS` makes both read and write the namespace's names, as Java's
-- DefaultMQPullConsumer does (ns%Topic, ns%TOOLS_CONSUMER, %DLQ%ns%G, %RETRY%ns%G).
local helpers = require "helpers"
local rh = require "run_helpers"
local ffi = require "ffi"
local sec = dofile(helpers.root .. "/spec/02-integration/06-security/sec.lua")
local lib = sec.lib
local shq = helpers.shq

local PULL, QUERY_OFFSET, UPDATE_OFFSET, GET_MAX, GET_MIN, ROUTE, SEND_V2 =
  11, 14, 15, 30, 31, 105, 310

-- Quoted where a name starts with '%' (not a plain YAML scalar).
local ACL = [[
accounts:
  - accessKey: tools_app
    secretKey: tools_secret_1
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - SecT=PUB|SUB
      - SecNoSub=PUB
      - ns1%SecNsT=SUB
      - "%DLQ%SecG=SUB"
      - "%DLQ%SecSubG=SUB"
      - "%DLQ%ns1%SecNsG=SUB"
    groupPerms:
      - TOOLS_CONSUMER=SUB
      - ns1%TOOLS_CONSUMER=SUB
      - SecG=PUB|SUB
      - SecSubG=SUB
      - ns1%SecNsG=PUB|SUB
      - "%REDRIVE%SecG=SUB"
      - "%REDRIVE%SecSubG=SUB"
      - "%REDRIVE%ns1%SecNsG=SUB"
]]

local KEYS = "--set access_key=tools_app --set secret_key=tools_secret_1"

-- Every request recorded since the last reset (name server and brokers) carries the access key
-- and a signature; returns how many there were.
local function all_signed(db, token)
  local n = lib.rmq_devbroker_count(db, sec.ALL, 0)
  assert.is_true(n > 0)
  local buf = ffi.new("char[256]")
  for i = 0, n - 1 do
    local k = lib.rmq_devbroker_request_ext(db, sec.ALL, 0, i, "AccessKey", buf, 256)
    assert.is_true(k > 0, "request " .. i .. " of " .. n .. " is not signed")
    assert.equal("tools_app", ffi.string(buf, k))
    assert.equal(28, lib.rmq_devbroker_request_ext(db, sec.ALL, 0, i, "Signature", buf, 256))
    if token then
      k = lib.rmq_devbroker_request_ext(db, sec.ALL, 0, i, "SecurityToken", buf, 256)
      assert.equal(token, k > 0 and ffi.string(buf, k) or nil)
    end
  end
  return n
end

-- The given request codes were seen at target, signed by tools_app.
local function signed_codes(db, target, codes)
  for _, code in ipairs(codes) do
    assert.is_true(lib.rmq_devbroker_count(db, target, code) > 0, "no request " .. code)
    assert.equal("tools_app", sec.last_ext(db, target, code, "AccessKey"))
    assert.equal(28, #assert(sec.last_ext(db, target, code, "Signature")))
  end
end

-- The dead-letter and retry topics of groups, with one queue each, as a broker makes them for a
-- group that consumed (its heartbeat) and gave up on messages.
local function group_topics(db, groups)
  for _, g in ipairs(groups) do
    assert.equal(0, lib.rmq_devbroker_create_topic(db, 0, "%RETRY%" .. g, 1))
    assert.equal(0, lib.rmq_devbroker_create_topic(db, 0, "%DLQ%" .. g, 1))
  end
end

local function produce_props(db, topic, q, body, props)
  rh.produce_props(db, topic, q, body, props, "T", "k-" .. body)
end

local max_offset = rh.stored

local function lines_of(out)
  local t = {}
  for l in out:gmatch("M ([^\n]*)\n") do t[#t + 1] = l end
  table.sort(t)
  return t
end

-- Forget the requests recorded so far, once the clients of earlier tests are gone (an exited
-- command's last requests are read by the broker after its exit).
local function reset_counts(db)
  helpers.wait_until(function() return lib.rmq_devbroker_connections(db) == 0 end, 20,
    "the connections of earlier commands closed")
  lib.rmq_devbroker_reset_counts(db)
end

local function cmd(ns, args)
  return helpers.run(("timeout -s KILL %d %s %s --namesrv %s < /dev/null"):format(
    math.floor(60 * helpers.scale), helpers.bin, args, ns))
end

describe("rmqlua tail and redrive with ACL", function()
  local db, ns, broker

  lazy_setup(function()
    db, ns = sec.start_acl_broker(ACL, "--topic SecT:2 --topic SecNoSub:1 --topic ns1%SecNsT:1")
    broker = ffi.string(lib.rmq_devbroker_broker_addr(db, 0))
    sec.produce(db, "SecT", 6, "t")
    sec.produce(db, "SecNoSub", 2, "n")
    sec.produce(db, "ns1%SecNsT", 3, "ns")
    group_topics(db, { "SecG", "SecSubG", "ns1%SecNsG" })
  end)
  lazy_teardown(function()
    if db then lib.rmq_devbroker_stop(db) end
    helpers.run_deferred()
  end)
  local function tool(args) return cmd(ns, args) end

  -- n dead letters of group (as on the wire: with its namespace) whose RETRY_TOPIC is topic,
  -- moved by `rmqlua args` (which must print moved): its retry topic holds n messages and its
  -- progress group's offset is n.
  local function redrive_all(group, topic, n, args, moved)
    for i = 1, n do produce_props(db, "%DLQ%" .. group, 0, "d" .. i, { RETRY_TOPIC = topic }) end
    reset_counts(db)
    rh.expect(tool, args, 0, moved)
    assert.equal(n, max_offset(db, "%RETRY%" .. group))
    assert.equal(n, tonumber(lib.rmq_devbroker_committed_offset(db, 0, "%REDRIVE%" .. group,
      "%DLQ%" .. group, 0)))
  end

  it("tail reads with the right keys; every request is signed, name server and broker", function()
    reset_counts(db)
    local rc, out = cmd(ns, "tail SecT --from first -e --format 'M %s' " .. KEYS
      .. " --set security_token=tail-token-1")
    assert.equal(0, rc, out)
    assert.same({ "t1", "t2", "t3", "t4", "t5", "t6" }, lines_of(out))
    assert.falsy(out:find("ACL", 1, true), out)
    all_signed(db, "tail-token-1")
    signed_codes(db, sec.NAMESRV, { ROUTE })
    signed_codes(db, 0, { GET_MIN, GET_MAX, PULL })
  end)

  it("tail exits 3 on a wrong secret, naming the access key", function()
    local rc, out = cmd(ns, "tail SecT --from first -e --set access_key=tools_app "
      .. "--set secret_key=not_the_secret")
    assert.equal(3, rc, out)
    assert.truthy(out:find("rmqlua tail: ACL: broker " .. broker .. " refused GET_MIN_OFFSET: the "
      .. "signature of access key 'tools_app' does not match: wrong secret_key", 1, true), out)
    -- said once, and nothing read
    local _, n = out:gsub("ACL: broker", "")
    assert.equal(1, n, out)
  end)

  it("tail exits 3 without SUB on the topic, naming key, topic and permission", function()
    local rc, out = cmd(ns, "tail SecNoSub --from first -e " .. KEYS)
    assert.equal(3, rc, out)
    assert.truthy(out:find("rmqlua tail: ACL: broker " .. broker .. " refused PULL_MESSAGE: access "
      .. "key 'tools_app' has no SUB permission on topic SecNoSub", 1, true), out)
  end)

  it("tail exits 3 without keys, saying the broker requires ACL", function()
    local rc, out = cmd(ns, "tail SecT --from first -e")
    assert.equal(3, rc, out)
    assert.truthy(out:find("rmqlua tail: ACL: broker " .. broker .. " refused GET_MIN_OFFSET: the "
      .. "broker requires ACL: set access_key and secret_key", 1, true), out)
  end)

  it("tail --set namespace=ns1 reads ns1%Topic as ns1%TOOLS_CONSUMER and shows the topic without it", function()
    reset_counts(db)
    local rc, out = cmd(ns, "tail SecNsT --from first -e --format 'M %t %s' --set namespace=ns1 " .. KEYS)
    assert.equal(0, rc, out)
    assert.same({ "SecNsT ns1", "SecNsT ns2", "SecNsT ns3" }, lines_of(out))
    assert.equal("ns1%SecNsT", sec.last_ext(db, sec.NAMESRV, ROUTE, "topic"))
    assert.equal("ns1%SecNsT", sec.last_ext(db, 0, PULL, "topic"))
    assert.equal("ns1%TOOLS_CONSUMER", sec.last_ext(db, 0, PULL, "consumerGroup"))
    all_signed(db)
    -- --json and a --handler see the same name
    rc, out = cmd(ns, "tail SecNsT --from first -e -n 1 --json --set namespace=ns1 " .. KEYS)
    assert.equal(0, rc, out)
    assert.matches('"topic":"SecNsT"', out, 1, true)
    local dir = helpers.tmpdir("tools-ns-handler")
    local seen = dir .. "/seen"
    local h = rh.write(dir, "h.lua", ("local out = assert(io.open(%q, 'a'))\n"
      .. "return function(msgs) for i = 1, #msgs do out:write(msgs[i].topic, '\\n') end "
      .. "out:flush() end\n"):format(seen))
    rc, out = cmd(ns, "tail SecNsT --from first -e --handler " .. shq(h)
      .. " --set namespace=ns1 " .. KEYS)
    assert.equal(0, rc, out)
    assert.same({ "SecNsT", "SecNsT", "SecNsT" }, sec.lines(seen))
  end)

  it("redrive moves dead letters with the right keys; every request is signed", function()
    redrive_all("SecG", "SecT", 4, "redrive --group SecG " .. KEYS,
      "4 moved to %RETRY%SecG, 0 passed over by --where, 0 failed")
    all_signed(db)
    signed_codes(db, sec.NAMESRV, { ROUTE })
    signed_codes(db, 0, { QUERY_OFFSET, GET_MAX, PULL, SEND_V2, UPDATE_OFFSET })
    -- --to-origin: SecT takes PUB too
    rh.expect(tool, "redrive --group SecG --to-origin --progress-group SecG " .. KEYS, 0,
      "4 moved to their original topics")
  end)

  it("redrive exits 3 on a wrong secret, naming the access key", function()
    produce_props(db, "%DLQ%SecG", 0, "w1", { RETRY_TOPIC = "SecT" })
    local before = max_offset(db, "%RETRY%SecG")
    local rc, out = cmd(ns, "redrive --group SecG --set access_key=tools_app --set secret_key=wrong_one")
    assert.equal(3, rc, out)
    assert.truthy(out:find("rmqlua redrive: ACL: broker " .. broker .. " refused QUERY_CONSUMER_OFFSET: "
      .. "the signature of access key 'tools_app' does not match: wrong secret_key", 1, true), out)
    assert.equal(before, max_offset(db, "%RETRY%SecG"))
  end)

  it("redrive exits 3 without PUB on the group's retry topic, and records no progress past it", function()
    produce_props(db, "%DLQ%SecSubG", 0, "s1", { RETRY_TOPIC = "SecT" })
    produce_props(db, "%DLQ%SecSubG", 0, "s2", { RETRY_TOPIC = "SecT" })
    local rc, out = cmd(ns, "redrive --group SecSubG " .. KEYS)
    assert.equal(3, rc, out)
    assert.truthy(out:find("rmqlua redrive: ACL: broker " .. broker .. " refused SEND_MESSAGE_V2: "
      .. "access key 'tools_app' has no PUB permission on group SecSubG", 1, true), out)
    assert.equal(0, max_offset(db, "%RETRY%SecSubG"))
    local p = tonumber(lib.rmq_devbroker_committed_offset(db, 0, "%REDRIVE%SecSubG", "%DLQ%SecSubG", 0))
    assert.is_true(p <= 0, "progress " .. p .. " recorded past a message that did not move")
  end)

  it("redrive --set namespace=ns1 moves %DLQ%ns1%G to %RETRY%ns1%G, progress in %REDRIVE%ns1%G", function()
    redrive_all("ns1%SecNsG", "ns1%SecNsT", 3,
      "redrive --group SecNsG --set namespace=ns1 " .. KEYS, "%DLQ%ns1%SecNsG: 3 moved to %RETRY%ns1%SecNsG")
    all_signed(db)
  end)

  it("refuses --set options that are not about the connection, and keys without their secret", function()
    for _, c in ipairs {
      { "tail SecT --set pull_batch_size=4", "rmqlua tail: --set pull_batch_size: not an option of rmqlua tail" },
      { "redrive --group SecG --set consumer_group=x", "rmqlua redrive: --set consumer_group: not an option of rmqlua redrive" },
      { "tail SecT --set access_key=tools_app", "secret_key" },
      { "redrive --group SecG --set use_tls=maybe", "use_tls" },
      { "tail SecT --set tls_client_trust_cert_path=/nonexistent/ca.pem", "use_tls" },
    } do
      local rc, out = cmd(ns, c[1])
      assert.equal(2, rc, c[1] .. ": " .. out)
      assert.matches(c[2], out, 1, true)
    end
  end)
end)

describe("rmqlua tail and redrive over TLS", function()
  local certs, db, ns

  lazy_setup(function()
    certs = sec.make_certs(helpers.tmpdir("tools-certs"))
    db, ns = sec.start_acl_broker(ACL, ("--topic SecT:2 --tls-cert %s --tls-key %s --tls-mode "
      .. "enforcing"):format(certs.server, certs.server_key))
    sec.produce(db, "SecT", 5, "tls")
    group_topics(db, { "SecG" })
  end)
  lazy_teardown(function()
    if db then lib.rmq_devbroker_stop(db) end
    helpers.run_deferred()
  end)

  local TLS = function() return "--set use_tls=true --set tls_client_trust_cert_path=" .. shq(certs.ca) end

  it("tail reads from a broker that enforces TLS (and ACL)", function()
    reset_counts(db)
    local rc, out = cmd(ns, "tail SecT --from first -e --format 'M %s' --log-debug remoting "
      .. KEYS .. " " .. TLS())
    assert.equal(0, rc, out)
    assert.same({ "tls1", "tls2", "tls3", "tls4", "tls5" }, lines_of(out))
    assert.truthy(out:find("connection " .. ns .. ": TLS established", 1, true), out)
    all_signed(db)
  end)

  it("redrive moves dead letters over TLS", function()
    for i = 1, 3 do produce_props(db, "%DLQ%SecG", 0, "x" .. i, { RETRY_TOPIC = "SecT" }) end
    local rc, out = cmd(ns, "redrive --group SecG " .. KEYS .. " " .. TLS())
    assert.equal(0, rc, out)
    assert.matches("3 moved to %RETRY%SecG", out, 1, true)
    assert.equal(3, max_offset(db, "%RETRY%SecG"))
  end)

  it("makes a CA file that does not load a configuration error (exit 2) naming it", function()
    local dir = helpers.tmpdir("tools-bad-ca")
    local notpem = rh.write(dir, "not-a-cert.pem", "hello\n")
    for _, c in ipairs { "tail SecT", "redrive --group SecG" } do
      local rc, out = cmd(ns, c .. " --set use_tls=true --set tls_client_trust_cert_path=" .. notpem)
      assert.equal(2, rc, c .. ": " .. out)
      assert.matches("tls_client_trust_cert_path: cannot load CA certificates from " .. notpem, out, 1, true)
    end
  end)
end)
