-- With `namespace` set, the wire names are wrapped (ns%Topic, ns%group, %RETRY%ns%group) but
-- the handler sees the user's names, as Java's resetRetryAndNamespace does with
-- NamespaceUtil.withoutNamespace: m.topic and ctx.queue.topic are "NsTopic", also for a message
-- that came back through the retry topic (RETRY_TOPIC restored, then stripped), and a message
-- of the retry topic without RETRY_TOPIC shows "%RETRY%<group>". Sending a message back wraps
-- its topic again (originTopic on the wire is ns%Topic).
local helpers = require "helpers"
local ffi = require "ffi"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local NS, TOPIC, GROUP = "ns1", "NsTopic", "g_ns"
local WIRE_TOPIC, RETRY = NS .. "%" .. TOPIC, "%RETRY%" .. NS .. "%" .. GROUP
local SEND_BACK = 36

describe("consumer: namespace", function()
  it("is stripped from what the handler sees", function()
    local db, ns = cons.test_broker("--topic " .. WIRE_TOPIC .. ":2 --delay-scale 0.001")
    cons.produce(db, WIRE_TOPIC, 6, "n")
    -- A message stored in the retry topic by hand: no RETRY_TOPIC property.
    assert(lib.rmq_devbroker_produce(db, 0, RETRY, 0, nil, nil, "bare", 4) >= 0)
    local dir = helpers.tmpdir("ns")
    local out = dir .. "/out.txt"
    local s = cons.script(dir, { group = GROUP, ns = ns, topic = TOPIC, out = out,
      extra = string.format("namespace = %q,", NS),
      body = [[
      out:write("Q " .. msgs[1].body .. " " .. ctx.queue.topic .. "\n") -- one write: two threads share the file
      if msgs[1].body == "n3" and msgs[1].reconsume_times == 0 then
        return rmq.RECONSUME_LATER
      end
      ]] })
    local log = dir .. "/run.log"
    local pid = helpers.spawn(helpers.bin .. " run " .. s, { log = log, rc = log .. ".rc" })
    local function done()
      local n3, bare, all = 0, false, {}
      for _, r in ipairs(cons.records(out)) do
        all[r.body] = true
        if r.body == "n3" then n3 = n3 + 1 end
        if r.body == "bare" then bare = true end
      end
      for i = 1, 6 do if not all["n" .. i] then return false end end
      return n3 >= 2 and bare
    end
    helpers.wait_until(done, 60, "every message and n3 again (log " .. log .. ")")
    helpers.kill(pid)
    assert.equal(0, cons.exit_code(log))

    for _, r in ipairs(cons.records(out)) do
      if r.body == "bare" then
        assert.equal("%RETRY%" .. GROUP, r.topic)
        assert.equal(RETRY, r.store_topic)
      elseif r.rt > 0 then
        assert.equal(TOPIC, r.topic)
        assert.equal(RETRY, r.store_topic)
      else
        assert.equal(TOPIC, r.topic)
        assert.equal(WIRE_TOPIC, r.store_topic)
      end
    end
    for l in io.lines(out) do
      local body, qt = l:match("^Q (%S+) (%S+)$")
      if body then
        local want = body == "bare" and "%RETRY%" .. GROUP or TOPIC
        assert.equal(want, qt, "ctx.queue.topic of " .. body)
      end
    end
    -- The send back of n3 named the wrapped topic.
    local buf = ffi.new("char[256]")
    local n = lib.rmq_devbroker_request_ext(db, cons.ALL, SEND_BACK, 0, "originTopic", buf, 256)
    assert.equal(WIRE_TOPIC, ffi.string(buf, n))
    n = lib.rmq_devbroker_request_ext(db, cons.ALL, SEND_BACK, 0, "group", buf, 256)
    assert.equal(NS .. "%" .. GROUP, ffi.string(buf, n))
  end)
end)
