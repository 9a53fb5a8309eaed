-- Interop with an independent RocketMQ client, the npm package ali-ons 3.12.0 (spec/node):
-- it speaks the remoting protocol as a V3_4_9 Java client (old route JSON form), so it checks
-- what our development broker and `rmqlua send` put on the wire against code nobody here wrote.
-- It needs the npm registry the first time (npm ci in spec/node). RMQ_SKIP_INTEROP=1 skips it,
-- for a machine that is offline.
local ons = require "02-integration.05-interop.ons"
if ons.skip then describe("interop with ali-ons", function() pending(ons.skip) end) return end

local helpers = require "helpers"
local rh = require "run_helpers"
local ffi = require "ffi"
local bit = require "bit"
local cjson = require "cjson"
local raw = dofile(helpers.root .. "/spec/02-integration/02-producer/rawmq.lua")

require "devbroker_ffi" -- rmq_devbroker_* for helpers.lib()

local lib = helpers.lib()
local tmpdir = helpers.file_tmpdir("ali-ons")
local shq = helpers.shq
local ensure_node_modules, node = ons.ensure_node_modules, ons.node

local function sha1_file(path)
  local p = io.popen("sha1sum " .. shq(path))
  local out = p:read("*a")
  p:close()
  return out:match("^(%x+)")
end

describe("interop with ali-ons", function()
  local db, ns
  local timeout = math.floor(60000 * helpers.scale)

  lazy_setup(function()
    ensure_node_modules()
    local err = ffi.new("char[256]")
    -- Delays scaled down so the retry (delay level 3, 10 s) comes back at once.
    db = lib.rmq_devbroker_start("--brokers 2 --topic OnsT:4 --topic OnsT2:4 --topic OnsT3:4 "
      .. "--topic OnsT4:4 --delay-scale 0.01", err, 256)
    assert(db ~= nil, "devbroker: " .. ffi.string(err))
    ns = ffi.string(lib.rmq_devbroker_addr(db))
  end)

  lazy_teardown(function()
    raw.close_all()
    if db ~= nil then lib.rmq_devbroker_stop(db) end
  end)

  it("ali-ons produces and ali-ons consumes everything back, a retried message through %RETRY%", function()
    local rc, sent, err = node("produce.js", {namesrv = ns, topic = "OnsT", count = 20, large = 5})
    assert.equal(0, rc, err)
    assert.equal(21, #sent)
    assert.same({done = 20}, sent[21])
    local by_key = {}
    for i = 1, 20 do
      local s = sent[i]
      assert.equal("SEND_OK", s.status)
      assert.equal(32, #s.msgId)
      by_key["k" .. s.i] = s
    end

    local lines
    rc, lines, err = node("consume.js", {namesrv = ns, topic = "OnsT", group = "ons_g1",
      sub = "TagA || TagB", expect = 20, retry = {"k3", "k8"}, timeout = timeout})
    assert.equal(0, rc, err)
    assert.same({done = true}, lines[#lines])
    local deliveries = {}
    for i = 1, #lines - 1 do
      local m = lines[i]
      deliveries[m.first_key] = deliveries[m.first_key] or {}
      table.insert(deliveries[m.first_key], m)
    end
    for i = 0, 19 do
      local key = "k" .. i
      local d = assert(deliveries[key], "no delivery of " .. key)
      local s = by_key[key]
      local first = d[1]
      assert.equal("OnsT", first.topic)
      assert.equal(s.keys, first.keys)
      assert.equal(s.tags, first.tags)
      assert.equal(tostring(i), first.props.idx)
      assert.equal(s.body_len, first.body_len)
      assert.equal(s.body_sha1, first.body_sha1)
      assert.equal(s.queueId, first.queueId)
      assert.equal(s.queueOffset, first.queueOffset)
      assert.equal(0, first.reconsumeTimes)
      if key == "k3" or key == "k8" then
        -- RECONSUME_LATER once: back from %RETRY%ons_g1 with reconsumeTimes 1, original topic.
        local again
        for j = 2, #d do if d[j].reconsumeTimes == 1 then again = d[j] end end
        assert.truthy(again, "retry of " .. key)
        assert.equal("OnsT", again.topic)
        assert.equal("OnsT", again.retry_topic)
        assert.equal(s.body_sha1, again.body_sha1)
        assert.equal(s.keys, again.keys)
        assert.equal(s.tags, again.tags)
      end
    end
    assert.truthy(lib.rmq_devbroker_count(db, -2, 36 --[[CONSUMER_SEND_MSG_BACK]]) >= 2)
  end)

  it("rmqlua send produces and ali-ons consumes everything (tag filter, compressed body)", function()
    -- TagC first: the TagB subscription must never see them.
    local rc, out = helpers.run(helpers.bin .. " send --namesrv " .. ns
      .. " --topic OnsT2 --tags TagC --keys 'other-{n}' --count 10 --size 40 < /dev/null")
    assert.equal(0, rc, out)
    rc, out = helpers.run(helpers.bin .. " send --namesrv " .. ns
      .. " --topic OnsT2 --tags TagB --keys 'rk-{n} second' --property color=blue --count 30 --size 64 < /dev/null")
    assert.equal(0, rc, out)
    local big = tmpdir .. "/ons_big.txt"
    local parts = {}
    for i = 1, 500 do parts[i] = ("big body line %04d\n"):format(i) end
    local h = io.open(big, "wb"); h:write(table.concat(parts)); h:close()
    rc, out = helpers.run(helpers.bin .. " send --namesrv " .. ns
      .. " --topic OnsT2 --tags TagB --keys big-one --file " .. shq(big) .. " < /dev/null")
    assert.equal(0, rc, out)

    local lines, err
    rc, lines, err = node("consume.js", {namesrv = ns, topic = "OnsT2", group = "ons_g2",
      sub = "TagB", expect = 31, timeout = timeout})
    assert.equal(0, rc, err)
    local seen = {}
    for i = 1, #lines - 1 do
      local m = lines[i]
      assert.equal("TagB", m.tags)
      assert.equal("OnsT2", m.topic)
      seen[m.first_key] = m
    end
    for n = 0, 29 do
      local m = assert(seen["rk-" .. n], "rk-" .. n)
      assert.equal("rk-" .. n .. " second", m.keys)
      assert.equal("blue", m.props.color)
      assert.equal(64, m.body_len)
      assert.equal(n, tonumber(m.body:match("^(%d+):")))
      assert.equal(32, #m.uniq_key)
    end
    local m = assert(seen["big-one"])
    assert.equal(500 * 19, m.body_len)
    assert.equal(sha1_file(big), m.body_sha1)
    os.remove(big)
  end)

  it("ali-ons produces and a raw pull sees the same messages", function()
    local rc, sent, err = node("produce.js", {namesrv = ns, topic = "OnsT3", count = 12, large = 7})
    assert.equal(0, rc, err)
    local msgs = assert(raw.pull_all(ns, "OnsT3"))
    assert.equal(12, #msgs)
    local by_key = {}
    for _, m in ipairs(msgs) do by_key[m.props.KEYS] = m end
    for i = 1, 12 do
      local s = sent[i]
      local m = assert(by_key[s.keys], s.keys)
      assert.equal("OnsT3", m.topic)
      assert.equal(s.tags, m.props.TAGS)
      assert.equal(tostring(s.i), m.props.idx)
      assert.equal(s.queueId, m.queue_id)
      assert.equal(s.queueOffset, m.queue_offset)
      assert.equal(s.body_len, #m.body)
      if s.i == 7 then
        assert.equal(1, bit.band(m.sys_flag, 1)) -- ali-ons sets only the COMPRESSED bit
        assert.truthy(#m.stored_body < #m.body)
      else
        assert.equal("body-" .. s.i, m.body)
        assert.equal(0, bit.band(m.sys_flag, 1))
      end
      -- The broker's msgId (offsetMsgId) names the stored message's commit log offset.
      assert.equal(m.physical_offset, tonumber(s.msgId:sub(17), 16))
    end
  end)

  it("ali-ons produces and rmqlua run consumes everything, a retried message through %RETRY%", function()
    local rc, sent, err = node("produce.js", {namesrv = ns, topic = "OnsT4", count = 20, large = 5})
    assert.equal(0, rc, err)
    local dir = tmpdir .. "/ons-run-" .. os.time()
    os.execute("rm -rf " .. shq(dir) .. " && mkdir -p " .. shq(dir))
    local out, log = dir .. "/records.jsonl", dir .. "/run.log"
    local script = rh.write(dir, "consumer.lua", string.format([[
local rmq = require "rmq"
local cjson = require "cjson"
local out = assert(io.open(%q, "a"))
out:setvbuf("no")
return {
  consumer_group = "ons_rmqlua_g",
  namesrv_addr = %q,
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  subscribe = { OnsT4 = "TagA || TagB" },
  -- One write per record: the consume threads append to the same file at the same time.
  consume = function(msgs, ctx)
    for i = 1, #msgs do
      local m = msgs[i]
      out:write(cjson.encode({ keys = m.keys, tags = m.tags, topic = m.topic, qid = m.queue_id,
        off = tonumber(m.queue_offset), rt = m.reconsume_times, body = m.body,
        idx = m:property("idx"), store_topic = m.store_topic }) .. "\n")
      if m.keys == "k3 kk3" and m.reconsume_times == 0 then return rmq.RECONSUME_LATER end
    end
  end,
}
]], out, ns))
    local pid = helpers.spawn(helpers.bin .. " run " .. shq(script), { log = log, rc = log .. ".rc" })

    local function records()
      local t = {}
      local f = io.open(out)
      if not f then return t end
      for line in f:lines() do
        -- While the consumer runs, the last line may still be incomplete: skip it.
        local ok, v = pcall(cjson.decode, line)
        if ok then t[#t + 1] = v end
      end
      f:close()
      return t
    end
    local function complete()
      local keys, retried = {}, false
      for _, r in ipairs(records()) do
        keys[r.keys] = true
        if r.keys == "k3 kk3" and r.rt == 1 then retried = true end
      end
      local n = 0
      for _ in pairs(keys) do n = n + 1 end
      return n == 20 and retried
    end
    helpers.wait_until(complete, 60, "rmqlua run to consume 20 messages and one retry (log " .. log .. ")")
    os.execute("kill -TERM " .. pid)
    assert.equal(0, rh.exit_code(log .. ".rc", 30, "rmqlua run to exit"))

    local function large_body(i)
      local s = ""
      while #s < 6000 do s = s .. "large-body-" .. i .. "-" .. #s .. ";" end
      return s:sub(1, 6000)
    end
    local first, again = {}, {}
    for _, r in ipairs(records()) do
      if r.rt == 0 then first[r.keys] = r else again[r.keys] = r end
    end
    for i = 1, 20 do
      local s = sent[i]
      local r = assert(first[s.keys], "first delivery of " .. s.keys)
      assert.equal("OnsT4", r.topic)
      assert.equal(s.tags, r.tags)
      assert.equal(tostring(s.i), r.idx)
      assert.equal(s.queueId, r.qid)
      assert.equal(s.queueOffset, r.off)
      assert.equal(s.i == 5 and large_body(5) or ("body-" .. s.i), r.body)
    end
    local r = assert(again["k3 kk3"])
    assert.equal(1, r.rt)
    assert.equal("OnsT4", r.topic)
    assert.equal("%RETRY%ons_rmqlua_g", r.store_topic)
    assert.equal("body-3", r.body)
  end)
end)
