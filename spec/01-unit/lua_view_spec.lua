-- Message views (rmq.view through the dispatcher) over the messages of real PULL_MESSAGE
-- responses captured from RocketMQ 4.9.4 (spec/fixtures/wire): every field against the decoded
-- messages in each capture's index.json. The stored-message layout is decoded here in plain Lua
-- (PROTOCOL 4.1) into rmq_msg_t records pointing into the frame, as the runtime's decoder does.
local ffi = require "ffi"
local bit = require "bit"
local helpers = require "helpers"
helpers.lib()
local dispatch = require "rmq.dispatch"

local function u32(s, p) -- 1-based p
  local a, b, c, d = s:byte(p, p + 3)
  return bit.bor(bit.lshift(a, 24), bit.lshift(b, 16), bit.lshift(c, 8), d) % 2 ^ 32
end
local function i32(s, p)
  local v = u32(s, p)
  if v >= 2 ^ 31 then v = v - 2 ^ 32 end
  return v
end
local function i64(s, p)
  local hi, lo = u32(s, p), u32(s, p + 4)
  return ffi.new("int64_t", hi) * 4294967296LL + lo
end

-- Decode a PULL body (string) into rmq_msg_t records; anchor keeps memory alive.
local function decode(frame, body_off, body_len, anchor)
  local msgs = {}
  local base = ffi.cast("const char *", frame)
  local p = body_off
  local stop = body_off + body_len
  while p < stop do
    local m = ffi.new("rmq_msg_t")
    anchor[#anchor + 1] = m
    local total = i32(frame, p)
    local q = p + 8
    m.body_crc = i32(frame, q); q = q + 4
    m.queue_id = i32(frame, q); q = q + 4
    m.flag = i32(frame, q); q = q + 4
    m.queue_offset = i64(frame, q); q = q + 8
    m.commit_log_offset = i64(frame, q); q = q + 8
    m.sys_flag = i32(frame, q); q = q + 4
    m.born_timestamp = i64(frame, q); q = q + 8
    local bl = bit.band(m.sys_flag, 0x10) ~= 0 and 16 or 4
    for i = 0, bl - 1 do m.born_host[i] = frame:byte(q + i) end
    q = q + bl
    m.born_port = i32(frame, q); q = q + 4
    m.store_timestamp = i64(frame, q); q = q + 8
    local sl = bit.band(m.sys_flag, 0x20) ~= 0 and 16 or 4
    for i = 0, sl - 1 do m.store_host[i] = frame:byte(q + i) end
    q = q + sl
    m.store_port = i32(frame, q); q = q + 4
    m.reconsume_times = i32(frame, q); q = q + 4
    m.prepared_tx_offset = i64(frame, q); q = q + 8
    local blen = i32(frame, q); q = q + 4
    m.body = base + (q - 1); m.body_len = blen; q = q + blen
    local tlen = frame:byte(q); q = q + 1
    m.topic = base + (q - 1); m.topic_len = tlen; q = q + tlen
    local plen = frame:byte(q) * 256 + frame:byte(q + 1); q = q + 2
    m.props = base + (q - 1); m.props_len = plen
    local props = ffi.string(m.props, plen)
    local function prop(k)
      local s, e = props:find(k .. "\1", 1, true)
      while s and s > 1 and props:sub(s - 1, s - 1) ~= "\2" do
        s, e = props:find(k .. "\1", e + 1, true)
      end
      if not s then return nil end
      local v_end = props:find("\2", e + 1, true) or (#props + 1)
      return e, v_end - e - 1
    end
    local e, n = prop("TAGS")
    if e then m.tags = m.props + e; m.tags_len = n end
    e, n = prop("KEYS")
    if e then m.keys = m.props + e; m.keys_len = n end
    e, n = prop("UNIQ_KEY")
    if e then m.uniq_key = m.props + e; m.uniq_key_len = n end
    m.broker_name = "broker-a"; m.broker_name_len = 8
    msgs[#msgs + 1] = m
    p = p + total
  end
  return msgs
end

local FIELDS = { "topic", "store_topic", "tags", "keys", "body", "body_len", "properties",
  "msg_id", "offset_msg_id", "queue_id", "queue_offset", "commit_log_offset", "reconsume_times",
  "born_timestamp", "store_timestamp", "born_host", "store_host", "broker_name", "sys_flag",
  "flag", "body_crc", "prepared_tx_offset" }

-- Run the views of msgs through a real dispatcher; return plain copies of every field.
local function through_dispatcher(msgs)
  local got = {}
  local spec = { subscribe = { T = "*" }, consume = function(views)
    for i = 1, #views do
      local v = views[i]
      local t = {}
      for _, f in ipairs(FIELDS) do
        local x = v[f]
        if type(x) == "cdata" then x = tostring(x):gsub("LL$", "") end
        t[f] = x
      end
      t.prop_keys = v:property("KEYS")
      t.body_ptr_ok = ffi.string(v.body_ptr, v.body_len) == v.body
      got[i] = t
    end
  end }
  local d = dispatch.new(spec, { thread_index = 0, thread_count = 1 })
  local ptrs = ffi.new("rmq_msg_t *[?]", #msgs)
  for i, m in ipairs(msgs) do ptrs[i - 1] = m end
  local b = ffi.new("rmq_batch_t")
  b.msgs, b.n = ptrs, #msgs
  d.slot[0] = b
  local err = d.dispatch()
  assert.is_nil(err)
  assert.are.equal(0, b.status)
  return got
end

local function hex_host(host)
  local a, b, c, d, port = host:match("^(%d+)%.(%d+)%.(%d+)%.(%d+):(%d+)$")
  return string.format("%02X%02X%02X%02X%08X", a, b, c, d, tonumber(port))
end

local function offset_msg_id(host, off)
  return hex_host(host) .. string.format("%016X", off)
end

for _, cap in ipairs({ "02_consumer_session", "07_broadcast_tagfilter_session",
  "05_rocketmq_serialize_session", "08_bench_pull_sample" }) do
  describe("message views over " .. cap, function()
    local index = helpers.json_fixture("wire/" .. cap .. "/index.json")
    it("give every field of every pulled message", function()
      local checked = 0
      for _, f in ipairs(index.frames) do
        if f.messages and #f.messages > 0 then
          local frame = helpers.fixture("wire/" .. cap .. "/" .. f.file)
          local anchor = { frame }
          local body_off = 1 + f.frame_length - f.body_length
          local msgs = decode(frame, body_off, f.body_length, anchor)
          assert.are.equal(#f.messages, #msgs, f.file)
          local got = through_dispatcher(msgs)
          for i, want in ipairs(f.messages) do
            local g = got[i]
            local what = f.file .. " message " .. i
            assert.are.equal(want.topic, g.topic, what)
            assert.are.equal(want.topic, g.store_topic, what)
            assert.are.equal(want.properties.TAGS, g.tags, what)
            assert.are.equal(want.properties.KEYS, g.keys, what)
            assert.are.equal(want.properties.KEYS, g.prop_keys, what)
            assert.are.equal(want.bodyLength, g.body_len, what)
            assert.are.equal(want.bodyLength, #g.body, what)
            if type(want.bodyPreview) == "string" then
              assert.are.equal(want.bodyPreview, g.body:sub(1, #want.bodyPreview), what)
            end
            assert.is_true(g.body_ptr_ok, what)
            assert.are.same(want.properties, g.properties, what)
            assert.are.equal(want.properties.UNIQ_KEY or g.offset_msg_id, g.msg_id, what)
            local cl = ffi.new("int64_t", want.commitLogOffset)
            assert.are.equal(offset_msg_id(want.storeHost, cl), g.offset_msg_id, what)
            assert.are.equal(want.queueId, g.queue_id, what)
            assert.are.equal(tostring(want.queueOffset), g.queue_offset, what)
            assert.are.equal(tostring(want.commitLogOffset), g.commit_log_offset, what)
            assert.are.equal(want.reconsumeTimes, g.reconsume_times, what)
            assert.are.equal(string.format("%.0f", want.bornTimestamp), g.born_timestamp, what)
            assert.are.equal(string.format("%.0f", want.storeTimestamp), g.store_timestamp, what)
            assert.are.equal(want.bornHost, g.born_host, what)
            assert.are.equal(want.storeHost, g.store_host, what)
            assert.are.equal("broker-a", g.broker_name, what)
            assert.are.equal(want.sysFlag, g.sys_flag, what)
            assert.are.equal(want.flag, g.flag, what)
            assert.are.equal(want.bodyCRC, g.body_crc, what)
            assert.are.equal(tostring(want.preparedTransactionOffset), g.prepared_tx_offset, what)
            checked = checked + 1
          end
        end
      end
      assert.is_true(checked > 0)
    end)

    it("do not crash when kept after their batch", function()
      for _, f in ipairs(index.frames) do
        if f.messages and #f.messages > 0 then
          local frame = helpers.fixture("wire/" .. cap .. "/" .. f.file)
          local anchor = { frame }
          local msgs = decode(frame, 1 + f.frame_length - f.body_length, f.body_length, anchor)
          local kept
          local d = dispatch.new({ subscribe = { T = "*" }, consume = function(v) kept = v end },
            { thread_index = 0, thread_count = 1 })
          local ptrs = ffi.new("rmq_msg_t *[?]", #msgs)
          for i, m in ipairs(msgs) do ptrs[i - 1] = m end
          local b = ffi.new("rmq_batch_t")
          b.msgs, b.n = ptrs, #msgs
          d.slot[0] = b
          d.dispatch()
          -- The batch's memory goes away, as the engine frees it after the result.
          for _, m in ipairs(msgs) do ffi.fill(m, ffi.sizeof(m)) end
          for i = 1, #kept do
            for _, field in ipairs(FIELDS) do
              local ok, e = pcall(function() return kept[i][field] end)
              assert.is_false(ok)
              assert.matches("after its handler returned", e)
            end
          end
          return
        end
      end
    end)
  end)
end
