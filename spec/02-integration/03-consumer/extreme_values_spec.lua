-- Numbers no sane broker sends still leave the consumer running (found by the reliability
-- suite's hostile broker, under UBSan): a stored message whose queue offset reads 2^63 - 1
-- followed by bytes that cannot be split into messages (where the next pull would start one
-- past it), and a message whose store timestamp reads far before 1970 (the delivery-time
-- histogram). The development broker damages the stored bytes in place (rmq_devbroker_corrupt,
-- PROTOCOL 4.1 offsets); every other message is consumed and the process stays up. Signed
-- overflow is undefined: the ASan+UBSan build stops the process at it.
-- Also: pull responses whose maxOffset reads near 2^63 on every queue (the lag of each queue
-- is near 2^63; their sum cannot be held): the lag figures saturate at 2^63 - 1. And a message
-- whose reconsume count reads 2^31 - 1, failed by its handler: it goes to the DLQ (the count
-- saturates where Java's int would wrap), through CONSUMER_SEND_MSG_BACK, through the re-send
-- to %RETRY% when that fails, and from an orderly consumer.
local helpers = require "helpers"
local cjson = require "cjson"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

-- byte positions in a stored message (IPv4 hosts)
local QUEUEOFFSET, STORETIMESTAMP, TOTALSIZE, RECONSUMETIMES = 20, 56, 0, 72

local function xor_bytes(db, topic, qid, off, pos, masks)
  for k, m in ipairs(masks) do
    assert.equal(0, lib.rmq_devbroker_corrupt(db, 0, topic, qid, off, pos + k - 1, m))
  end
end

describe("consumer: extreme values in pulled messages", function()
  it("a queue offset of 2^63 - 1 before unreadable bytes, a store timestamp before 1970",
    function()
    local topic, group = "ExtremeT", "g_extreme"
    local db, ns = cons.test_broker("--topic " .. topic .. ":2")
    for q = 0, 1 do
      for i = 1, 10 do
        local body = "q" .. q .. "m" .. i
        assert(lib.rmq_devbroker_produce(db, 0, topic, q, nil, nil, body, #body) == i - 1)
      end
    end
    -- Queue 0: offset 2's queue offset field becomes 0x7fffffffffffffff (it held 2), offset
    -- 3's TOTALSIZE lies (bit 30 set): nothing after offset 2 can be split into messages.
    xor_bytes(db, topic, 0, 2, QUEUEOFFSET, {0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfd})
    xor_bytes(db, topic, 0, 3, TOTALSIZE, {0x40})
    -- Queue 1: offset 4's store timestamp gets its sign bit: about 292 million years ago.
    xor_bytes(db, topic, 1, 4, STORETIMESTAMP, {0x80})
    local dir = helpers.tmpdir("extreme")
    local out = dir .. "/out.txt"
    local script = cons.script(dir, {group = group, ns = ns, topic = topic, out = out})
    local log = dir .. "/run.log"
    local pid = cons.spawn(script, log)
    helpers.wait_until(function()
      assert(cons.alive(pid), "the consumer ended: " .. cons.read(log))
      local got = {}
      for _, r in ipairs(cons.records(out)) do got[r.body] = true end
      for i = 1, 10 do if not got["q1m" .. i] then return false end end
      return got.q0m1 and got.q0m2
    end, 30, "queue 1 and queue 0's first messages consumed (log " .. log .. ")")
    helpers.sleep(1) -- pulls after the damaged bytes
    assert.is_true(cons.alive(pid), cons.read(log))
    cons.stop(pid)
    assert.equal(0, cons.exit_code(log), cons.read(log))
  end)

  it("a maxOffset near 2^63 on every queue: the lag saturates at 2^63 - 1 and the consumer runs on",
    function()
    local topic, group = "ExtremeMaxT", "g_extreme_max"
    local db, ns = cons.test_broker("--topic " .. topic .. ":2")
    cons.fill_queues(db, topic, 2, 5)
    local INT64_MAX = 0x7fffffffffffffffLL
    assert.equal(0, lib.rmq_devbroker_set_told_max(db, 0, INT64_MAX - 2))
    local dir = helpers.tmpdir("extreme-max")
    local out = dir .. "/out.txt"
    local script = cons.script(dir, {group = group, ns = ns, topic = topic, out = out})
    local log = dir .. "/run.log"
    local pid = cons.spawn(script, log, "--metrics 127.0.0.1:0")
    helpers.wait_until(function()
      assert(cons.alive(pid), "the consumer ended: " .. cons.read(log))
      return #cons.records(out) == 10
    end, 30, "the 10 messages consumed (log " .. log .. ")")
    local url = cons.metrics_url(log)
    -- /stats once the 1 s statistics saw every queue's lag (2^63 - 8 each, the retry queue's
    -- 2^63 - 3).
    local text = helpers.wait_until(function()
      local r = cons.scrape(url .. "/stats")
      assert(cons.alive(pid), "the consumer ended: " .. cons.read(log))
      if not r then return false end
      local t = r.body
      local st = cjson.decode(t)
      if #st.queues ~= 3 then return false end -- the topic's two and the retry topic's one
      for _, q in ipairs(st.queues) do if q.lag <= 0 then return false end end
      return t
    end, 20, "the three queues in /stats with their lag")
    -- The exact figures (a double cannot tell 2^63 - 1 from 2^63 - 19): the totals and the
    -- topic's sum saturate; each queue's own lag is exact.
    local MAX = "9223372036854775807"
    assert.equal(MAX, text:match('"totals":{[^}]-"lag":(%-?%d+)'))
    assert.equal(MAX, text:match('"' .. topic .. '":{"consumed".-"lag":(%-?%d+)'))
    local lags = {}
    local qpat = '{"topic":"([^"]+)","broker":"[^"]+","queue":%d+,[^}]-"lag":(%-?%d+)'
    for t, l in text:gmatch(qpat) do
      lags[#lags + 1] = t .. " " .. l
    end
    table.sort(lags)
    assert.same({"%RETRY%" .. group .. " 9223372036854775805", topic .. " 9223372036854775800",
      topic .. " 9223372036854775800"}, lags)
    cons.stop(pid)
    assert.equal(0, cons.exit_code(log), cons.read(log))
    assert.matches("stopped after [%d.]+ s: consumed 10 .*| lag 9223372036854775807\n",
      cons.read(log))
  end)

  -- One queue: "r1", "bad" (its reconsume count 2^31 - 1, failed by the handler), "r2".
  local function reconsume_max(name, broker_args, orderly)
    local topic, group = "ExtremeRt" .. name, "g_extreme_rt_" .. name
    local db, ns = cons.test_broker("--topic " .. topic .. ":1 " .. (broker_args or ""))
    for _, body in ipairs({"r1", "bad", "r2"}) do
      assert(lib.rmq_devbroker_produce(db, 0, topic, 0, nil, nil, body, #body) >= 0)
    end
    xor_bytes(db, topic, 0, 1, RECONSUMETIMES, {0x7f, 0xff, 0xff, 0xff})
    local dir = helpers.tmpdir("extreme-rt")
    local out = dir .. "/out.txt"
    local script = cons.script(dir, {group = group, ns = ns, topic = topic, out = out,
      orderly = orderly,
      body = orderly and [[if msgs[1].body == "bad" then return rmq.SUSPEND end]]
        or [[if msgs[1].body == "bad" then return rmq.RECONSUME_LATER end]]})
    local log = dir .. "/run.log"
    local pid = cons.spawn(script, log)
    local dlq = "%DLQ%" .. group
    helpers.wait_until(function()
      assert(cons.alive(pid), "the consumer ended: " .. cons.read(log))
      return lib.rmq_devbroker_max_offset(db, 0, dlq, 0) >= 1 and
        cons.all_committed(db, group, topic, 1)
    end, 60, "the failed message in " .. dlq .. " and every offset committed (log " .. log .. ")")
    assert.equal(1, tonumber(lib.rmq_devbroker_max_offset(db, 0, dlq, 0)))
    local got = {}
    for _, r in ipairs(cons.records(out)) do got[#got + 1] = r.body .. " " .. r.rt end
    table.sort(got)
    assert.same({"bad 2147483647", "r1 0", "r2 0"}, got) -- delivered once, then the DLQ
    -- Nothing went to %RETRY% (a count that wrapped would have: it reads below the maximum).
    assert.is_true(lib.rmq_devbroker_max_offset(db, 0, "%RETRY%" .. group, 0) <= 0)
    cons.stop(pid)
    assert.equal(0, cons.exit_code(log), cons.read(log))
  end

  it("a reconsume count of 2^31 - 1 sent back: the DLQ", function()
    reconsume_max("back")
  end)

  it("a reconsume count of 2^31 - 1 re-sent to %RETRY% (the send-back fails): the DLQ", function()
    reconsume_max("resend", "--fault CONSUMER_SEND_MSG_BACK:1:SYSTEM_ERROR")
  end)

  it("a reconsume count of 2^31 - 1 suspended by an orderly consumer: the DLQ", function()
    reconsume_max("orderly", nil, true)
  end)
end)
