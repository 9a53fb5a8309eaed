-- How far one PULL_MESSAGE reads the consume queue (DefaultMessageStore.getMessage): at most
-- max(800, maxMsgNums) entries, never past the end of the consume queue file (300000 entries)
-- that holds the requested offset; when every entry read was filtered out the answer is
-- PULL_RETRY_IMMEDIATELY / NO_MATCHED_MESSAGE with nextBeginOffset after them.
local wire = require "02-integration.01-devbroker.wire"

local PULL = 11
local CQ_FILE = 300000

describe("devbroker: pull scan bounds", function()
  local c
  wire.broker_fixture("--topic Tscan:1", function(db, lib, conn)
    c = conn
    -- one queue just past the first consume queue file, all TagB
    for _ = 1, CQ_FILE + 5 do
      assert(lib.rmq_devbroker_produce(db, 0, "Tscan", 0, "TagB", nil, "b", 1) >= 0)
    end
  end)

  local function pull(offset, sub, max)
    return assert(c:request(PULL, wire.pull_ext("g_scan", "Tscan", 0, offset,
      {sys_flag = 4, subscription = sub, max = max})))
  end

  it("reads at most max(800, maxMsgNums) filtered entries", function()
    local r = pull(0, "TagA")
    assert.equal(20, r.code)
    assert.equal("NO_MATCHED_MESSAGE", r.remark)
    assert.equal("800", r.extFields.nextBeginOffset)
    r = pull(100, "TagA", 1000)
    assert.equal(20, r.code)
    assert.equal("1100", r.extFields.nextBeginOffset)
  end)

  it("stops at the end of the consume queue file", function()
    local r = pull(CQ_FILE - 10, "TagA")
    assert.equal(20, r.code)
    assert.equal("NO_MATCHED_MESSAGE", r.remark)
    assert.equal(tostring(CQ_FILE), r.extFields.nextBeginOffset)
    assert.equal(tostring(CQ_FILE + 5), r.extFields.maxOffset)
    r = pull(CQ_FILE - 10, "*")
    assert.equal(0, r.code)
    assert.equal(10, #wire.decode_messages(r.body))
    assert.equal(tostring(CQ_FILE), r.extFields.nextBeginOffset)
    -- the next file serves the rest
    r = pull(CQ_FILE, "*")
    assert.equal(0, r.code)
    assert.equal(5, #wire.decode_messages(r.body))
    assert.equal(tostring(CQ_FILE + 5), r.extFields.nextBeginOffset)
  end)
end)
