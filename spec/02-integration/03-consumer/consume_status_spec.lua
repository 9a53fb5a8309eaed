-- GET_CONSUMER_RUNNING_INFO's statusTable (what `mqadmin consumerStatus` shows), asked through
-- the development broker's relay like mqadmin does: per topic, the figures Java's
-- ConsumerStatsManager computes -- StatsItems sampled every 10 s, TPS over the last minute's
-- samples (the first sample of an item also records a zero one period earlier), failed messages
-- over the last hour's samples (taken every 10 minutes from the start).
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local raw = dofile(helpers.root .. "/spec/02-integration/02-producer/rawmq.lua")

-- The ConsumeStatus object of topic in a running-info body, as numbers.
local function status_of(body, topic)
  local o = body:match('"statusTable":{.-"' .. topic:gsub("%p", "%%%0") .. '":(%b{})')
  assert(o, "no statusTable entry for " .. topic .. " in " .. body)
  local t = {}
  for k, v in o:gmatch('"(%w+)":([%d%.E%-]+)') do t[k] = tonumber(v) end
  return t
end

-- Is tps what Java reports for `sum` messages seen within the minute window, i.e.
-- sum * 1000 / (k * 10000) for k samples after the item's zero sample (k = 1..6)? The runtime
-- writes 3 decimals.
local function window_k(tps, sum)
  for k = 1, 6 do
    if math.abs(tps - sum / (10 * k)) < 0.0006 then return k end
  end
end

describe("consumer: GET_CONSUMER_RUNNING_INFO statusTable", function()
  it("carries ConsumerStatsManager's per-topic figures", function()
    local TOPIC, GROUP, N = "CsTopic", "g_cstatus", 200
    local RETRY = "%RETRY%" .. GROUP
    local db, ns, dir, out, log = cons.loaded_broker({ topic = TOPIC, queues = 4, n = N,
      prefix = "c", tmpname = "cstatus", close = raw.close_all })
    -- Bodies ending in 3 fail on their first delivery and come back from the retry topic.
    local s = cons.script(dir, { group = GROUP, ns = ns, topic = TOPIC, out = out,
      body = [[
        if msgs[1].reconsume_times == 0 and msgs[1].body:sub(-1) == "3" then
          return rmq.RECONSUME_LATER
        end]] })
    local pid = helpers.spawn(helpers.bin .. " run " .. s, { log = log, rc = log .. ".rc" })
    helpers.wait_until(function() return cons.count_lines(out) >= N + N / 10 end, 60,
      "deliveries")
    local cid = helpers.wait_until(function() return cons.read(log):match("started as (%S+)") end,
      10, "clientId in the log")
    local baddr = cons.broker_addr(db)
    local st, rt
    -- Once a 10 s sample saw everything: every figure of a topic over the same window.
    helpers.wait_until(function()
      local r = assert(raw.request(baddr, 307, { consumerGroup = GROUP, clientId = cid,
        jstackEnable = "false" }))
      assert.equal(0, r.code, r.remark)
      st, rt = status_of(r.body, TOPIC), status_of(r.body, RETRY)
      local k = window_k(st.consumeOKTPS, N - N / 10)
      return k and window_k(st.consumeFailedTPS, N / 10) == k and window_k(st.pullTPS, N) == k
        and window_k(rt.consumeOKTPS, N / 10) and window_k(rt.pullTPS, N / 10)
    end, 45, "the minute window's TPS figures")
    assert.equal(0, rt.consumeFailedTPS)
    -- consumeFailedMsgs is the sum over the hour's samples: none before the 10-minute one.
    assert.equal(0, st.consumeFailedMsgs)
    -- pullRT / consumeRT: ms per pull / per handler call (Java adds whole ms).
    assert.is_true(st.pullRT >= 0 and st.pullRT < 30000)
    assert.is_true(st.consumeRT >= 0 and st.consumeRT < 1000)
    helpers.kill(pid, "TERM")
    assert.equal(0, cons.exit_code(log))
  end)
end)
