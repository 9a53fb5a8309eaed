-- ACL interop with the independent npm client ali-ons 3.12.0 (spec/node), which signs its
-- requests itself (accessKeyId / accessKeySecret; it adds an OnsChannel field to what it signs):
-- the development broker enforcing a plain_acl.yml accepts its signatures and refuses a wrong
-- secret, and messages cross between ali-ons and rmqlua (`rmqlua send`, `rmqlua run`) with
-- ACL on at both ends. So the signing and the checking are not both ours. RMQ_SKIP_INTEROP=1
-- skips it, as it does ali_ons_spec.lua, for a machine without the npm registry.
local ons = require "02-integration.05-interop.ons"
if ons.skip then describe("ACL interop with ali-ons", function() pending(ons.skip) end) return end

local helpers = require "helpers"
local rh = require "run_helpers"
local sec = dofile(helpers.root .. "/spec/02-integration/06-security/sec.lua")
local lib = sec.lib
local ensure_node_modules, node = ons.ensure_node_modules, ons.node

local ACL = [[
accounts:
  - accessKey: ons_app_key
    secretKey: ons_secret_1
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - OnsAclT=PUB|SUB
      - OnsAclT2=PUB|SUB
    groupPerms:
      - ons_acl_g=PUB|SUB
      - rmqlua_acl_g=PUB|SUB
      - ons_interop_producer=PUB|SUB
]]

describe("ACL interop with ali-ons", function()
  local db, ns
  local timeout = math.floor(60000 * helpers.scale)

  lazy_setup(function()
    ensure_node_modules()
    db, ns = sec.start_acl_broker(ACL, "--topic OnsAclT:4 --topic OnsAclT2:4")
  end)
  lazy_teardown(function()
    if db then lib.rmq_devbroker_stop(db) end
    helpers.run_deferred()
  end)

  it("accepts ali-ons' signed sends, rmqlua run consumes them; a wrong secret is refused", function()
    local rc, sent, err = node("produce.js", { namesrv = ns, topic = "OnsAclT", count = 10,
      access_key = "ons_app_key", secret_key = "ons_secret_1" })
    assert.equal(0, rc, err)
    assert.same({ done = 10 }, sent[11])
    -- ali-ons signed these itself: its OnsChannel field is in the signed request.
    assert.equal("ons_app_key", sec.last_ext(db, 0, 310, "AccessKey"))
    assert.equal("ALIYUN", sec.last_ext(db, 0, 310, "OnsChannel"))

    local function stored() return rh.stored(db, "OnsAclT", 4) end
    local before, sends = stored(), lib.rmq_devbroker_count(db, 0, 310)
    rc, sent, err = node("produce.js", { namesrv = ns, topic = "OnsAclT", count = 1,
      access_key = "ons_app_key", secret_key = "not_the_secret" })
    assert.equal(1, rc, err)
    assert.truthy(err:find("still failed", 1, true), err)
    -- It tried (ali-ons retries the send) and nothing was stored.
    assert.truthy(lib.rmq_devbroker_count(db, 0, 310) > sends)
    assert.equal(before, stored())

    local dir = helpers.tmpdir("ons-acl-run")
    local script, outf = sec.script(dir, { group = "rmqlua_acl_g", topic = "OnsAclT", options = {
      access_key = "ons_app_key", secret_key = "ons_secret_1" } })
    local out
    rc, out = sec.run_fg(script, "--namesrv " .. ns .. " --max-messages 10")
    assert.equal(0, rc, out)
    local got = sec.consumed(outf)
    for i = 0, 9 do assert.truthy(got["body-" .. i], "body-" .. i .. " not consumed") end
  end)

  it("ali-ons consumes with its keys what rmqlua send produced with ours", function()
    local rc, out = helpers.run(("%s send --namesrv %s --topic OnsAclT2 --tags TagA --keys 'ak-{n}' "
      .. "--count 12 --size 24 --set access_key=ons_app_key --set secret_key=ons_secret_1 < /dev/null")
      :format(helpers.bin, ns))
    assert.equal(0, rc, out)
    local lines, err
    rc, lines, err = node("consume.js", { namesrv = ns, topic = "OnsAclT2", group = "ons_acl_g",
      expect = 12, timeout = timeout, access_key = "ons_app_key", secret_key = "ons_secret_1" })
    assert.equal(0, rc, err)
    local seen = {}
    for i = 1, #lines - 1 do seen[lines[i].first_key] = true end
    for n = 0, 11 do assert.truthy(seen["ak-" .. n], "ak-" .. n) end
    assert.equal("ons_app_key", sec.last_ext(db, 0, 11, "AccessKey"))
  end)
end)
