-- The development broker's message index and queries, as mqadmin uses them:
-- QUERY_MESSAGE by key (queryMsgByKey) and by unique key (queryMsgByUniqueKey, the
-- _UNIQUE_KEY_QUERY flag), VIEW_MESSAGE_BY_ID by an offsetMsgId (queryMsgById), the maxNum cap,
-- the time range, Java's QUERY_NOT_FOUND answer, messages dropped by --max-bytes, and every key
-- and offsetMsgId still found after a real `rmqlua broker --store` is killed with kill -9 and
-- restarted.
local helpers = require "helpers"
local wire = require "02-integration.01-devbroker.wire"

local SEND_V2, QUERY, VIEW = 310, 12, 33
local FOREVER = "9223372036854775807" -- Long.MAX_VALUE, mqadmin's endTimestamp
local NOT_FOUND_REMARK = "can not find message, maybe time range not correct"

-- QUERY_MESSAGE as MQClientAPIImpl.queryMessage sends it.
local function query(c, topic, key, opts)
  opts = opts or {}
  local r = assert(c:request(QUERY, {topic = topic, key = key,
                                     maxNum = tostring(opts.max or 64),
                                     beginTimestamp = tostring(opts.begin or 0),
                                     endTimestamp = tostring(opts["end"] or FOREVER),
                                     _UNIQUE_KEY_QUERY = opts.uniq and "true" or "false"}))
  return r, r.code == 0 and wire.decode_messages(r.body) or {}
end

local function bodies(ms)
  local t = {}
  for i, m in ipairs(ms) do t[i] = m.body end
  return t
end

local function ascending(ms)
  for i = 2, #ms do
    if ms[i].phys <= ms[i - 1].phys then return false end
  end
  return true
end

-- offsetMsgId (PROTOCOL 4.6): store host, port, commit-log offset.
local function decode_id(id)
  local ip = {}
  for i = 1, 4 do ip[i] = tonumber(id:sub(2 * i - 1, 2 * i), 16) end
  return table.concat(ip, ".") .. ":" .. tonumber(id:sub(9, 16), 16), tonumber(id:sub(17), 16)
end

local TOPICS = {"QA", "QB", "QC"}
local N = 120 -- messages per topic

-- Message i of topic t: keys "id-<i>", "grp-<i % 10>" and "all" (padded with extra spaces
-- on every 7th, which KEY_SEPARATOR splitting must ignore); body "<t>/<i>".
local function fill(c)
  local sent = {}
  for _, t in ipairs(TOPICS) do
    sent[t] = {}
    for i = 0, N - 1 do
      local keys = ("id-%d grp-%d all"):format(i, i % 10)
      if i % 7 == 0 then keys = "  " .. keys:gsub(" ", "   ") .. " " end
      local uniq = ("%s%06d%s"):format("AC1100", i, t)
      local r = assert(c:request(SEND_V2, wire.send_ext(t, {queue = i % 4, keys = keys,
                                                            uniq = uniq}), t .. "/" .. i))
      assert.equal(0, r.code)
      sent[t][i] = {uniq = uniq, id = r.extFields.msgId, body = t .. "/" .. i}
    end
  end
  return sent
end

describe("devbroker message queries", function()
  local baddr, c, sent

  wire.broker_fixture("--topic QA:4 --topic QB:4 --topic QC:4", function(db, _, conn)
    c = conn
    baddr = wire.broker_addr(db, 0)
    sent = fill(c)
  end)

  it("finds every stored key of every topic (queryMsgByKey)", function()
    for _, t in ipairs(TOPICS) do
      for i = 0, N - 1 do
        local r, ms = query(c, t, "id-" .. i)
        assert.equal(0, r.code, t .. " id-" .. i)
        assert.same({t .. "/" .. i}, bodies(ms))
      end
      for g = 0, 9 do
        local r, ms = query(c, t, "grp-" .. g)
        assert.equal(0, r.code)
        local want = {}
        for i = g, N - 1, 10 do want[#want + 1] = t .. "/" .. i end
        assert.same(want, bodies(ms)) -- every one, in commit-log order
        assert.is_true(ascending(ms))
        for _, m in ipairs(ms) do assert.equal(t, m.topic) end
      end
    end
    -- extra spaces between keys are no keys, and a key of one topic is not another's
    local r = query(c, "QA", "")
    assert.equal(22, r.code)
    r = query(c, "QA", " ")
    assert.equal(22, r.code)
    r = query(c, "QA", "id-5 grp-5")
    assert.equal(22, r.code)
    r = query(c, "QD", "id-5")
    assert.equal(22, r.code)
  end)

  it("answers with the index's last update in the header", function()
    -- the newest message of the broker: QC/N-1
    local last_id = sent.QC[N - 1].id
    local _, phys = decode_id(last_id)
    local v = assert(c:request(VIEW, {offset = tostring(phys)}))
    local last = wire.decode_messages(v.body)[1]
    local r = query(c, "QA", "id-3")
    assert.equal(0, r.code)
    assert.equal(tostring(phys), r.extFields.indexLastUpdatePhyoffset)
    assert.equal(tostring(last.store_ts), r.extFields.indexLastUpdateTimestamp)
  end)

  it("finds a message by its UNIQ_KEY (queryMsgByUniqueKey)", function()
    for _, t in ipairs(TOPICS) do
      for i = 0, N - 1, 7 do
        local r, ms = query(c, t, sent[t][i].uniq, {uniq = true, max = 32})
        assert.equal(0, r.code)
        assert.same({sent[t][i].body}, bodies(ms))
        assert.equal(sent[t][i].uniq, ms[1].props.UNIQ_KEY)
      end
    end
    -- a UNIQ_KEY is looked up under its own topic only
    local r = query(c, "QB", sent.QA[1].uniq, {uniq = true})
    assert.equal(22, r.code)
  end)

  it("honours maxNum: the newest ones, at most 64, 32 for a unique-key query", function()
    local function newest(t, n)
      local want = {}
      for i = N - n, N - 1 do want[#want + 1] = t .. "/" .. i end
      return want
    end
    local r, ms, _ = query(c, "QB", "all", {max = 5})
    assert.equal(0, r.code)
    assert.same(newest("QB", 5), bodies(ms))
    _, ms = query(c, "QB", "all", {max = 64})
    assert.same(newest("QB", 64), bodies(ms))
    _, ms = query(c, "QB", "all", {max = 1000}) -- IndexService.queryOffset: maxMsgsNumBatch
    assert.same(newest("QB", 64), bodies(ms))
    _, ms = query(c, "QB", "all", {max = 64, uniq = true}) -- defaultQueryMaxNum
    assert.same(newest("QB", 32), bodies(ms))
    _, ms = query(c, "QB", "grp-4", {max = 3})
    assert.same({"QB/94", "QB/104", "QB/114"}, bodies(ms))
    r = query(c, "QB", "all", {max = 0})
    assert.equal(22, r.code)
  end)

  it("honours the begin and end timestamps", function()
    -- 30 messages stored a few milliseconds apart
    for i = 1, 30 do
      assert.equal(0, assert(c:request(SEND_V2, wire.send_ext("QA", {keys = "timed"}),
                                       "t" .. i)).code)
      helpers.sleep(0.003)
    end
    local r, all = query(c, "QA", "timed")
    assert.equal(0, r.code)
    assert.equal(30, #all)
    local begin, stop = all[8].store_ts, all[22].store_ts
    assert.is_true(stop > begin)
    local want = {}
    for _, m in ipairs(all) do
      if m.store_ts >= begin and m.store_ts <= stop then want[#want + 1] = m.body end
    end
    local _, ms = query(c, "QA", "timed", {begin = begin, ["end"] = stop})
    assert.same(want, bodies(ms)) -- both ends included
    assert.is_true(#ms >= 15)
    _, ms = query(c, "QA", "timed", {begin = stop + 1})
    for _, m in ipairs(ms) do assert.is_true(m.store_ts > stop) end
    assert.is_true(#ms < 30)
    -- nothing in the range: QUERY_NOT_FOUND
    r = query(c, "QA", "timed", {begin = all[30].store_ts + 1})
    assert.equal(22, r.code)
    r = query(c, "QA", "timed", {["end"] = all[1].store_ts - 1})
    assert.equal(22, r.code)
  end)

  it("answers QUERY_NOT_FOUND as Java does", function()
    local r = query(c, "QA", "no-such-key")
    assert.equal(22, r.code)
    assert.equal(NOT_FOUND_REMARK, r.remark)
    assert.equal("0", r.extFields.indexLastUpdatePhyoffset)
    assert.equal("0", r.extFields.indexLastUpdateTimestamp)
    assert.equal("", r.body)
    -- a missing header field is refused as RemotingCommand.decodeCommandCustomHeader does
    r = assert(c:request(QUERY, {topic = "QA", maxNum = "64", beginTimestamp = "0",
                                 endTimestamp = FOREVER}))
    assert.equal(1, r.code)
    assert.truthy(r.remark:find("the custom field <key> is null", 1, true))
  end)

  it("views a message by its offsetMsgId (queryMsgById)", function()
    for _, t in ipairs(TOPICS) do
      for i = 0, N - 1, 11 do
        -- mqadmin decodes the id and asks the broker it names for the offset it holds
        local addr, phys = decode_id(sent[t][i].id)
        assert.equal(baddr, addr)
        local vc = assert(wire.connect(addr))
        local r = assert(vc:request(VIEW, {offset = tostring(phys)}))
        vc:close()
        assert.equal(0, r.code)
        local ms = wire.decode_messages(r.body)
        assert.equal(1, #ms)
        assert.equal(sent[t][i].body, ms[1].body)
        assert.equal(phys, ms[1].phys)
        assert.equal(ms[1].size, #r.body)
        assert.equal(sent[t][i].uniq, ms[1].props.UNIQ_KEY)
      end
    end
    local r = assert(c:request(VIEW, {offset = "12345"}))
    assert.equal(1, r.code)
    assert.equal("can not find message by the offset, 12345", r.remark)
  end)
end)

describe("devbroker message index and the store", function()
  lazy_setup(function() wire.quiet() end)

  it("forgets messages dropped by --max-bytes", function()
    local db, lib, c = wire.start_connected("--topic E:2 --max-bytes 64K")
    local body = string.rep("x", 1000)
    local ids = {}
    for i = 1, 200 do
      local r = assert(c:request(SEND_V2, wire.send_ext("E", {queue = i % 2,
                                                             keys = "ev-" .. i .. " every"}), body))
      ids[i] = r.extFields.msgId
    end
    local first = tonumber(lib.rmq_devbroker_min_offset(db, 0, "E", 0)) +
                  tonumber(lib.rmq_devbroker_min_offset(db, 0, "E", 1))
    assert.is_true(first > 100) -- most were dropped
    local kept = 0
    for i = 1, 200 do
      local r = query(c, "E", "ev-" .. i)
      local _, phys = decode_id(ids[i])
      local v = assert(c:request(VIEW, {offset = tostring(phys)}))
      -- found by key exactly when the store still holds it
      assert.equal(v.code == 0 and 0 or 22, r.code, "ev-" .. i)
      if r.code == 0 then kept = kept + 1 end
    end
    assert.is_true(kept > 10 and kept < 100)
    assert.equal(0, query(c, "E", "ev-200").code)
    assert.equal(22, query(c, "E", "ev-1").code)
    local _, ms = query(c, "E", "every")
    assert.equal(math.min(kept, 64), #ms)
  end)

  it("finds every key after a kill -9 and a restart with --store", function()
    local dir = helpers.tmpdir("store")
    local function spawn()
      local pid, out = helpers.spawn_broker("--listen 127.0.0.1:0 --store " .. dir ..
                                            " --topic R1:4 --topic R2:4")
      local ns
      helpers.wait_until(function()
        ns = helpers.read_file(out):match("name server at (127%.0%.0%.1:%d+)")
        return ns
      end, 10, "broker ready")
      return pid, ns, helpers.read_file(out):match("broker broker%-a at (127%.0%.0%.1:%d+)")
    end
    local pid, ns, baddr1 = spawn()
    -- produced by the real CLI producer: KEYS from --keys, UNIQ_KEY set by the producer
    local sent = {}
    for _, t in ipairs({"R1", "R2"}) do
      local rc, out = helpers.run(("%s send --namesrv %s --topic %s --count 150 --size 64 " ..
                                   "--keys 'id-{n} %s-all' --verbose"):format(helpers.bin, ns, t, t))
      assert.equal(0, rc, out)
      sent[t] = {}
      for uniq, id in out:gmatch("SEND_OK msgId=(%x+) offsetMsgId=(%x+)") do
        sent[t][#sent[t] + 1] = {uniq = uniq, id = id}
      end
      assert.equal(150, #sent[t])
    end
    helpers.kill(pid, "KILL")

    local _, _, baddr = spawn()
    -- the broker listens on its port of the last run, so the offsetMsgIds it gave still name it
    assert.equal(baddr1, baddr)
    local c = assert(wire.connect(baddr))
    helpers.defer(function() c:close() end)
    for _, t in ipairs({"R1", "R2"}) do
      local seen = {}
      for n = 0, 149 do
        local r, ms = query(c, t, "id-" .. n)
        assert.equal(0, r.code, t .. " id-" .. n)
        assert.equal(1, #ms)
        assert.equal("id-" .. n .. " " .. t .. "-all", ms[1].props.KEYS)
        seen[ms[1].props.UNIQ_KEY] = ms[1].phys
      end
      for _, s in ipairs(sent[t]) do
        -- the unique key and the commit-log offset of every message answered before the kill
        local addr, phys = decode_id(s.id)
        assert.equal(baddr, addr)
        assert.equal(phys, seen[s.uniq])
        local r, ms = query(c, t, s.uniq, {uniq = true})
        assert.equal(0, r.code)
        assert.equal(phys, ms[1].phys)
        local v = assert(c:request(VIEW, {offset = tostring(phys)}))
        assert.equal(0, v.code)
        assert.equal(s.uniq, wire.decode_messages(v.body)[1].props.UNIQ_KEY)
      end
      local _, ms = query(c, t, t .. "-all")
      assert.equal(64, #ms)
    end
  end)
end)
