-- Replay the message-query requests of the real 4.9.4 mqadmin session
-- (spec/fixtures/wire/09_mqadmin_session, NOTE-index.md): QUERY_MESSAGE by key (queryMsgByKey)
-- and by unique key (queryMsgByUniqueKey), and VIEW_MESSAGE_BY_ID (queryMsgById), against the
-- development broker holding the same messages at the same queue offsets. Each answer must have
-- the captured response code, header field names and body: the same stored messages (topic,
-- queue, queue offset, property names, body length). State-dependent values (commit-log
-- offsets, indexLastUpdate*) must be this broker's own.
local helpers = require "helpers"
local wire = require "02-integration.01-devbroker.wire"
local cjson = require "cjson"

local DIR = helpers.fixtures .. "/wire/09_mqadmin_session"
local SEND_V2, VIEW = 310, 33

local keyset = require("02-integration.01-devbroker.admin").keyset

local function phys_of(msg_id) return tonumber(msg_id:sub(17), 16) end

describe("devbroker replay of mqadmin's message queries (4.9.4 capture)", function()
  lazy_setup(function() wire.quiet() end)

  it("answers QUERY_MESSAGE and VIEW_MESSAGE_BY_ID like the real broker", function()
    local index = cjson.decode(helpers.read_file(DIR .. "/index.json"))
    -- The message-query frames (the folder also has the admin requests of admin_replay_spec).
    local frames = {}
    for _, f in ipairs(index.frames) do
      if f.request_code == 12 or f.request_code == VIEW then frames[#frames + 1] = f end
    end
    index.frames = frames
    local by_seq = {}
    for _, f in ipairs(index.frames) do by_seq[f.seq] = f end

    local db, _, lib = wire.start("--topic CapAdminT:4")
    helpers.defer(function() lib.rmq_devbroker_stop(db) end)
    local baddr = wire.broker_addr(db, 0)
    local c = assert(wire.connect(baddr))
    helpers.defer(function() c:close() end)

    -- The messages the answers carried, stored at their queue offsets (fillers before them).
    local seeded, ours = {}, {} -- real commit-log offset -> our commit-log offset
    for _, f in ipairs(index.frames) do
      for _, m in ipairs(f.messages or {}) do
        if not ours[m.commitLogOffset] then
          ours[m.commitLogOffset] = true
          seeded[#seeded + 1] = m
        end
      end
    end
    table.sort(seeded, function(a, b) return a.queueId < b.queueId end)
    assert.equal(2, #seeded)
    local last
    for _, m in ipairs(seeded) do
      while tonumber(lib.rmq_devbroker_max_offset(db, 0, m.topic, m.queueId)) < m.queueOffset do
        lib.rmq_devbroker_produce(db, 0, m.topic, m.queueId, nil, nil, "filler", 6)
      end
      local r = assert(c:request(SEND_V2, wire.resend_ext(m), string.rep("x", m.bodyLength)))
      assert.equal(0, r.code)
      assert.equal(tostring(m.queueOffset), r.extFields.queueOffset)
      ours[m.commitLogOffset] = phys_of(r.extFields.msgId)
      last = phys_of(r.extFields.msgId)
    end
    -- The newest indexed message: what indexLastUpdatePhyoffset / Timestamp must name.
    local lr = assert(c:request(VIEW, {offset = tostring(last)}))
    local last_ts = wire.decode_messages(lr.body)[1].store_ts

    local replayed = 0
    for _, f in ipairs(index.frames) do
      if f.kind == "request" then
        local raw = helpers.read_file(DIR .. "/" .. f.file)
        local req = wire.decode(raw)
        if f.request_code == VIEW then
          -- mqadmin sends the offset its id encodes: point it at our copy of that message
          req.extFields.offset = tostring(ours[tonumber(req.extFields.offset)])
          raw = wire.encode(req.code, req.extFields, req.body,
                            {opaque = req.opaque, version = req.version})
        end
        -- each mqadmin command runs on a connection of its own, as captured
        local conn = assert(wire.connect(baddr))
        assert(conn:send_raw(raw))
        local resp, frame
        repeat
          resp, frame = conn:read_frame(5 * helpers.scale)
          assert(resp, frame)
        until resp.opaque == req.opaque
        conn:close()
        local real = by_seq[f.response_seq]
        local ctx = f.file
        assert.equal(real.header.code, resp.code, ctx)
        assert.equal(real.header.remark, resp.remark, ctx)
        assert.equal(real.header.flag, resp.flag, ctx)
        assert.equal(keyset(real.header.extFields), keyset(resp.extFields), ctx)
        if f.request_code == 12 then
          -- the header fields in the real broker's order (its JSON header, as sent)
          local real_raw = helpers.read_file(DIR .. "/" .. real.file)
          local function order(raw)
            local h = raw:sub(9, 8 + wire.rd32(raw, 5) % 16777216)
            local names = {}
            for name in h:match('"extFields":(%b{})'):gmatch('"([%w_]+)":') do
              names[#names + 1] = name
            end
            return table.concat(names, ",")
          end
          assert.equal(order(real_raw), order(frame), ctx)
          assert.equal(tostring(last), resp.extFields.indexLastUpdatePhyoffset, ctx)
          assert.equal(tostring(last_ts), resp.extFields.indexLastUpdateTimestamp, ctx)
        end
        local ms = wire.decode_messages(resp.body)
        assert.equal(#real.messages, #ms, ctx)
        local size = 0
        for i, m in ipairs(ms) do
          local rm = real.messages[i]
          assert.equal(rm.topic, m.topic, ctx)
          assert.equal(rm.queueId, m.queue_id, ctx)
          assert.equal(rm.queueOffset, m.queue_offset, ctx)
          assert.equal(ours[rm.commitLogOffset], m.phys, ctx)
          assert.equal(rm.bodyLength, #m.body, ctx)
          assert.equal(keyset(rm.properties), keyset(m.props), ctx)
          assert.equal(rm.properties.KEYS, m.props.KEYS, ctx)
          assert.equal(rm.properties.UNIQ_KEY, m.props.UNIQ_KEY, ctx)
          size = size + m.size
        end
        assert.equal(size, #resp.body, ctx) -- nothing but the stored messages
        replayed = replayed + 1
      end
    end
    assert.equal(3, replayed)
  end)

  -- mqadmin signs with its default keys (tools.yml: rocketmq2 / 12345678), and a 4.9.4 client
  -- signs every extField, the _UNIQUE_KEY_QUERY flag included (clients up to 4.9.3 left it out):
  -- the captured frames, unchanged, pass a broker with --acl that lets rocketmq2 subscribe to
  -- CapAdminT, and no other.
  it("accepts the captured signed QUERY_MESSAGE frames under --acl as PlainAccessValidator does", function()
    local function acl_broker(perm)
      local path = helpers.tmpdir("acl") .. "/plain_acl.yml"
      local f = assert(io.open(path, "w"))
      f:write(("accounts:\n  - accessKey: rocketmq2\n    secretKey: \"12345678\"\n" ..
               "    defaultTopicPerm: DENY\n    topicPerms:\n      - CapAdminT=%s\n"):format(perm))
      f:close()
      local db, _, lib = wire.start("--acl " .. path .. " --topic CapAdminT:4")
      helpers.defer(function() lib.rmq_devbroker_stop(db) end)
      -- K5 (the key mqadmin asks for), stored without the network
      assert(lib.rmq_devbroker_produce(db, 0, "CapAdminT", 3, "TagB", "K5", "seq=5", 5) >= 0)
      return wire.broker_addr(db, 0)
    end
    local function ask(addr, file)
      local conn = assert(wire.connect(addr))
      assert(conn:send_raw(helpers.read_file(DIR .. "/" .. file)))
      local resp = assert(conn:read_frame(5 * helpers.scale))
      conn:close()
      return resp
    end
    local ok = acl_broker("SUB")
    local r = ask(ok, "1842-12-QUERY_MESSAGE.request.bin")
    assert.equal(0, r.code, r.remark)
    assert.equal("K5", wire.decode_messages(r.body)[1].props.KEYS)
    -- the unique-key query is signed without its flag: accepted, and nothing has that UNIQ_KEY
    r = ask(ok, "1928-12-QUERY_MESSAGE.request.bin")
    assert.equal(22, r.code, r.remark)
    -- a client up to 4.9.3 (version 399) signed the query without the flag
    local ext = {topic = "CapAdminT", key = "K5", maxNum = "64", beginTimestamp = "0",
                 endTimestamp = "9223372036854775807", _UNIQUE_KEY_QUERY = "false",
                 AccessKey = "rocketmq2"}
    local content = "rocketmq2" .. "0" .. "9223372036854775807" .. "K5" .. "64" .. "CapAdminT"
    local rc, sig = helpers.run("printf '%s' " .. helpers.shq(content) ..
                                " | openssl dgst -sha1 -hmac 12345678 -binary | base64")
    assert.equal(0, rc, sig)
    ext.Signature = sig:gsub("%s+$", "")
    local function signed(version)
      local conn = assert(wire.connect(ok))
      local resp = assert(conn:request(12, ext, nil, {version = version}))
      conn:close()
      return resp
    end
    r = signed(399)
    assert.equal(0, r.code, r.remark)
    r = signed(401) -- from 4.9.4 on the flag is signed: this signature leaves it out
    assert.equal(1, r.code)
    assert.truthy(r.remark:find("Check signature failed", 1, true), r.remark)
    local denied = acl_broker("PUB")
    r = ask(denied, "1842-12-QUERY_MESSAGE.request.bin")
    assert.equal(1, r.code)
    assert.truthy(r.remark:find("AclException", 1, true), r.remark)
  end)
end)
