-- ACL end to end against the development broker enforcing a plain_acl.yml (`--acl FILE`), as
-- the 4.9.4 broker's PlainAccessValidator does: the right keys consume (every request signed,
-- name server and broker, security token included), a wrong secret, an unknown access key, no
-- keys and a missing SUB permission end `rmqlua run` with exit code 3 and a message naming the
-- access key, the resource and the permission; the retry path (CONSUMER_SEND_MSG_BACK and the
-- re-send to %RETRY%) is signed; a refusal after start is logged and the message is not lost;
-- `rmqlua send` signs too; and the signatures Java computed (acl.json) pass the broker's check.
local helpers = require "helpers"
local sec = dofile(helpers.root .. "/spec/02-integration/06-security/sec.lua")
local raw = require "rawclient"
local lib = sec.lib

local ACL = [[
# plain_acl.yml, 4.9.4 shape
globalWhiteRemoteAddresses:
  - 10.255.255.*
accounts:
  - accessKey: rmqlua_app
    secretKey: app_secret_1
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - AclT=PUB|SUB
      - AclRetryT=PUB|SUB
      - AclSubOnly=SUB
      - AclPubOnly=PUB
    groupPerms:
      - acl_g=PUB|SUB
      - acl_retry=PUB|SUB
      - acl_late=SUB
  - accessKey: RocketMQ
    secretKey: "12345678"
    admin: true
]]

local KEYS = { access_key = "rmqlua_app", secret_key = "app_secret_1" }
local function with(t, extra)
  local r = {}
  for k, v in pairs(t) do r[k] = v end
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end

describe("ACL", function()
  local db, ns, broker
  local SEND_MESSAGE_V2, HEART_BEAT, PULL_MESSAGE, ROUTE, SEND_BACK = 310, 34, 11, 105, 36

  lazy_setup(function()
    db, ns = sec.start_acl_broker(ACL, "--delay-scale 0.001 "
      .. "--topic AclT:4 --topic AclRetryT:2 --topic AclSubOnly:2 --topic AclPubOnly:2")
    broker = require("ffi").string(lib.rmq_devbroker_broker_addr(db, 0))
  end)
  lazy_teardown(function()
    if db then lib.rmq_devbroker_stop(db) end
    helpers.run_deferred()
  end)

  it("lets the right keys produce and consume; every request is signed, name server and broker", function()
    local dir = helpers.tmpdir("acl-ok")
    local rc, out = helpers.run(("%s send --namesrv %s --topic AclT --count 20 --set access_key=%s "
      .. "--set secret_key=%s < /dev/null"):format(helpers.bin, ns, KEYS.access_key, KEYS.secret_key))
    assert.equal(0, rc, out)
    assert.equal("rmqlua_app", sec.last_ext(db, 0, SEND_MESSAGE_V2, "AccessKey"))
    local script, outf = sec.script(dir, { group = "acl_g", topic = "AclT",
      options = with(KEYS, { security_token = "session-token-1" }) })
    rc, out = sec.run_fg(script, "--namesrv " .. ns .. " --max-messages 20")
    assert.equal(0, rc, out)
    assert.equal(20, sec.count(sec.consumed(outf)))
    assert.falsy(out:find("ACL", 1, true), out)
    for _, r in ipairs { { sec.NAMESRV, ROUTE }, { 0, HEART_BEAT }, { 0, PULL_MESSAGE } } do
      assert.equal("rmqlua_app", sec.last_ext(db, r[1], r[2], "AccessKey"))
      assert.equal("session-token-1", sec.last_ext(db, r[1], r[2], "SecurityToken"))
      assert.equal(28, #assert(sec.last_ext(db, r[1], r[2], "Signature")))
    end
  end)

  local refusals = {
    { what = "a wrong secret", group = "acl_g", topic = "AclT",
      options = with(KEYS, { secret_key = "not_the_secret" }),
      want = "refused HEART_BEAT: the signature of access key 'rmqlua_app' does not match: wrong secret_key" },
    { what = "an unknown access key", group = "acl_g", topic = "AclT",
      options = { access_key = "nobody_here", secret_key = "whatever1" },
      want = "refused HEART_BEAT: access key 'nobody_here' is unknown to the broker" },
    { what = "no keys", group = "acl_g", topic = "AclT", options = {},
      want = "refused HEART_BEAT: the broker requires ACL: set access_key and secret_key" },
    { what = "a missing SUB permission on the topic", group = "acl_g", topic = "AclPubOnly",
      options = KEYS,
      want = "refused HEART_BEAT: access key 'rmqlua_app' has no SUB permission on topic AclPubOnly" },
    { what = "a missing SUB permission on the group", group = "acl_nope", topic = "AclT",
      options = KEYS,
      want = "refused HEART_BEAT: access key 'rmqlua_app' has no SUB permission on group acl_nope" },
  }
  for _, case in ipairs(refusals) do
    it("ends rmqlua run with exit code 3 on " .. case.what .. ", naming key, resource and permission", function()
      local dir = helpers.tmpdir("acl-refused")
      sec.produce(db, case.topic, 3, "x")
      local script, outf = sec.script(dir, { group = case.group, topic = case.topic,
        options = case.options })
      local rc, out = sec.run_fg(script, "--namesrv " .. ns)
      assert.equal(3, rc, out)
      assert.truthy(out:find("ERROR [client] ACL: broker " .. broker .. " " .. case.want, 1, true), out)
      assert.truthy(out:find("stopping (exit code 3)", 1, true), out)
      assert.equal(0, sec.count(sec.consumed(outf)))
    end)
  end

  it("signs the retry path: CONSUMER_SEND_MSG_BACK and the re-send to %RETRY%", function()
    local dir = helpers.tmpdir("acl-retry")
    sec.produce(db, "AclRetryT", 6, "rt")
    -- The first 3 send-backs fail at the broker (after its ACL check): those messages are
    -- re-sent to %RETRY%acl_retry by the producer, which needs PUB on the group.
    assert.equal(0, lib.rmq_devbroker_push_error(db, 0, SEND_BACK, 1 --[[SYSTEM_ERROR]], 3))
    local script, outf = sec.script(dir, { group = "acl_retry", topic = "AclRetryT", options = KEYS,
      body = "if m.reconsume_times == 0 then status = rmq.RECONSUME_LATER end" })
    local rc, out = sec.run_fg(script, "--namesrv " .. ns .. " --max-messages 6")
    assert.equal(0, rc, out)
    assert.falsy(out:find("ACL", 1, true), out)
    -- Each message came back once through %RETRY% (reconsume_times 1).
    local again = {}
    for _, l in ipairs(sec.lines(outf)) do
      local b, rt = l:match("^(%S+) (%d+)$")
      if rt == "1" then again[b] = true end
    end
    assert.equal(6, sec.count(again))
    assert.truthy(lib.rmq_devbroker_count(db, 0, SEND_BACK) >= 6)
    assert.equal("rmqlua_app", sec.last_ext(db, 0, SEND_BACK, "AccessKey"))
    assert.equal(28, #assert(sec.last_ext(db, 0, SEND_BACK, "Signature")))
    assert.equal("%RETRY%acl_retry", sec.last_ext(db, 0, SEND_MESSAGE_V2, "b"))
    assert.equal(28, #assert(sec.last_ext(db, 0, SEND_MESSAGE_V2, "Signature")))
  end)

  it("logs a refusal after start and keeps the message (at-least-once), without exiting", function()
    local dir = helpers.tmpdir("acl-late")
    sec.produce(db, "AclSubOnly", 1, "late")
    -- SUB only: consuming works; sending the failed message back needs PUB on the topic (and
    -- the re-send needs PUB on the group): both are refused, the message is retried locally.
    local script, outf = sec.script(dir, { group = "acl_late", topic = "AclSubOnly", options = KEYS,
      body = "if m.reconsume_times == 0 and not _G.failed then _G.failed = true; status = rmq.RECONSUME_LATER end" })
    local pid, log, rcf = sec.run(dir, script, "--namesrv " .. ns)
    helpers.wait_until(function() return (sec.consumed(outf).late1 or 0) >= 2 end, 60,
      "late1 consumed again (" .. log .. ")")
    helpers.kill(pid)
    assert.equal(0, sec.exit_code(rcf))
    local text = sec.read(log)
    assert.truthy(text:find("ACL: broker " .. broker .. " refused CONSUMER_SEND_MSG_BACK: access key "
      .. "'rmqlua_app' has no PUB permission on topic AclSubOnly", 1, true), text)
    assert.truthy(text:find("refused SEND_MESSAGE_V2: access key 'rmqlua_app' has no PUB permission "
      .. "on group acl_late", 1, true), text)
    assert.falsy(text:find("exit code 3", 1, true), text)
  end)

  it("makes rmqlua send stop with exit code 3 naming key, topic and permission", function()
    local rc, out = helpers.run(("%s send --namesrv %s --topic AclSubOnly --count 5 --set access_key=%s "
      .. "--set secret_key=%s < /dev/null"):format(helpers.bin, ns, KEYS.access_key, KEYS.secret_key))
    assert.equal(3, rc, out)
    assert.truthy(out:find("rmqlua send: ACL: broker " .. broker .. " refused SEND_MESSAGE_V2: access key "
      .. "'rmqlua_app' has no PUB permission on topic AclSubOnly", 1, true), out)
    rc, out = helpers.run(("%s send --namesrv %s --topic AclT --count 5 --set access_key=%s "
      .. "--set secret_key=wrong_one < /dev/null"):format(helpers.bin, ns, KEYS.access_key))
    assert.equal(3, rc, out)
    assert.truthy(out:find("wrong secret_key", 1, true), out)
  end)

  it("accepts the signatures Java computed (acl.json) and refuses one changed field", function()
    local vec = helpers.json_fixture("vectors/acl.json")
    local c = assert(raw.connect(broker))
    helpers.defer(function() c:close() end)
    for _, case in ipairs(vec.cases) do
      local body = case.bodyHex ~= require("cjson").null and case.bodyHex and helpers.fromhex(case.bodyHex) or nil
      local resp = assert(c:request(case.requestCode, case.extFieldsAfterSigning, body))
      assert.falsy((resp.remark or ""):find("AclException", 1, true), case.name .. ": " .. tostring(resp.remark))
      if case.name == "PULL_MESSAGE" then
        local ext = {}
        for k, v in pairs(case.extFieldsAfterSigning) do ext[k] = v end
        ext.queueOffset = ext.queueOffset .. "1"
        resp = assert(c:request(case.requestCode, ext, body))
        assert.equal(1, resp.code) -- SYSTEM_ERROR, as a 4.9.4 broker answers its ACL hook's exception
        assert.equal("org.apache.rocketmq.acl.common.AclException: Check signature failed for "
          .. "accessKey=RocketMQ, org.apache.rocketmq.acl.plain.PlainPermissionManager.validate("
          .. "PlainPermissionManager.java)", resp.remark)
      end
    end
  end)

  it("refuses a file that is not a plain_acl.yml, naming it", function()
    local dir = helpers.tmpdir("acl-bad")
    local cases = {
      { "accounts:\n  - accessKey: short\n    secretKey: 12345678\n", "length should longer than 6" },
      { "accounts:\n  - accessKey: long_enough\n    secretKey: 12345678\n    topicPerms:\n      - T1\n",
        "Parse resource permission failed for topic:T1" },
      { "accounts: [ {accessKey: x\n", "did not find expected" },
    }
    for i, cs in ipairs(cases) do
      local path = dir .. "/bad" .. i .. ".yml"
      local f = assert(io.open(path, "w")); f:write(cs[1]); f:close()
      local err = sec.broker_error("--acl " .. path)
      assert.truthy(err and err:find(path, 1, true), tostring(err))
      assert.truthy(err:find(cs[2], 1, true), err)
    end
    local rc, out = helpers.run(helpers.bin .. " broker --listen 127.0.0.1:0 --acl " .. dir .. "/missing.yml")
    assert.equal(2, rc, out)
    assert.truthy(out:find("--acl " .. dir .. "/missing.yml: No such file or directory", 1, true), out)
  end)
end)
