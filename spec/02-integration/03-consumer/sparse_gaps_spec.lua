-- A sparse tag subscription: the wanted messages of one queue lie 50M and more than 2^31
-- offsets apart (the development broker skips offsets with rmq_devbroker_skip_offsets, and a
-- pull scans past them at once, so one pull returns messages from both sides of each gap).
-- Every wanted message reaches the handler, the committed offset ends at the queue's max
-- offset, and the process queue's memory follows the number of held messages, not the span.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local GAP = 50000000
local HUGE = 2 ^ 31 + 7

-- Peak resident memory of a process, in KiB.
local function vm_hwm(pid)
  for l in io.lines("/proc/" .. pid .. "/status") do
    local kb = l:match("^VmHWM:%s+(%d+)")
    if kb then return tonumber(kb) end
  end
end

local function run_case(orderly)
  local topic = orderly and "SparseOrderly" or "SparseTopic"
  local group = orderly and "g_sparse_orderly" or "g_sparse"
  local db, ns = cons.test_broker("--topic " .. topic .. ":1")
  local want, seq = {}, 0
  local function put(tag)
    seq = seq + 1
    local body = (tag == "TagA" and "a" or "b") .. seq
    assert(lib.rmq_devbroker_produce(db, 0, topic, 0, tag, nil, body, #body) >= 0)
    if tag == "TagA" then want[body] = true end
  end
  local function skip(n) assert(lib.rmq_devbroker_skip_offsets(db, 0, topic, 0, n) > 0) end
  put("TagA"); put("TagB"); put("TagB")
  skip(GAP)
  put("TagA"); put("TagB")
  skip(HUGE)
  put("TagA"); put("TagB"); put("TagA")
  skip(GAP)
  put("TagA")
  local max = tonumber(lib.rmq_devbroker_max_offset(db, 0, topic, 0))
  assert.is_true(max > HUGE + 2 * GAP)

  local dir = helpers.tmpdir("sparse")
  local out = dir .. "/out.txt"
  local s = cons.script(dir, { group = group, ns = ns, topic = topic, out = out,
    tags = "TagA", orderly = orderly })
  local log = dir .. "/run.log"
  local pid = helpers.spawn(helpers.bin .. " run " .. s, { log = log, rc = log .. ".rc" })
  local n = 0
  for _ in pairs(want) do n = n + 1 end
  helpers.wait_until(function()
    local got = {}
    for _, r in ipairs(cons.records(out)) do got[r.body] = true end
    for b in pairs(want) do if not got[b] then return false end end
    return true
  end, 60, n .. " TagA messages (log " .. log .. ")")
  helpers.wait_until(function()
    return tonumber(lib.rmq_devbroker_committed_offset(db, 0, group, topic, 0)) == max
  end, 30, "committed offset at the max offset " .. max)
  local hwm = vm_hwm(pid)
  helpers.kill(pid)
  assert.equal(0, cons.exit_code(log))
  for _, r in ipairs(cons.records(out)) do
    assert.is_true(want[r.body] ~= nil, r.body .. " should have been filtered")
    assert.equal(topic, r.topic)
  end
  -- An index sized by offset span would need 8 bytes per offset between held messages.
  assert.is_true(hwm < 256 * 1024, "peak resident memory " .. hwm .. " KiB")
  assert.is_nil(cons.read(log):match("cannot index"))
end

describe("consumer: sparse tag subscription over offset gaps", function()
  it("consumes every message 50M and 2^31 offsets apart (concurrently)", function()
    run_case(false)
  end)
  it("consumes every message 50M and 2^31 offsets apart (orderly)", function()
    run_case(true)
  end)
end)
