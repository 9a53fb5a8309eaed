-- Queue allocation strategies against the 4.9.4 vectors (spec/fixtures/vectors/allocate.json).
local ffi = require "ffi"
local helpers = require "helpers"

-- rmq_mq_t may already be declared by another spec in the same LuaJIT process.
pcall(ffi.cdef, "typedef struct rmq_mq { char *topic; char *broker_name; int queue_id; } rmq_mq_t;")
ffi.cdef [[
typedef struct rmq_conf rmq_conf_t;
rmq_conf_t *rmq_conf_new(void);
void rmq_conf_destroy(rmq_conf_t *conf);
int rmq_conf_set(rmq_conf_t *conf, const char *name, const char *value, char *errstr,
                 size_t errstr_size);
int rmq_allocate(const rmq_conf_t *conf, const char *group, const char *cid,
                 const rmq_mq_t *mq_all, int n_mq, const char *const *cid_all, int n_cid,
                 int *out_idx, int *n_out, char *errstr, size_t errstr_size);
int rmq_allocate_java(const rmq_conf_t *conf, const char *group, const char *cid,
                      const rmq_mq_t *mq_all, int n_mq, const char *const *cid_all, int n_cid,
                      int *out_idx, int *n_out, char *errstr, size_t errstr_size);
int rmq_allocate_out_cap(const rmq_conf_t *conf, int n_mq);
const rmq_mq_t *rmq_allocate_result_mq(const rmq_conf_t *conf, const rmq_mq_t *mq_all, int n_mq, int idx);
void rmq_mq_sort(rmq_mq_t *mqs, int n);
void rmq_cid_sort(const char **cids, int n);
int rmq_java_strcmp(const char *a, const char *b);
uint32_t rmq_alloc_md5_hash(const char *key, size_t len);
]]

local lib = helpers.lib()
local vec = helpers.json_fixture("vectors/allocate.json")

local STRATEGY = {
  AllocateMessageQueueAveragely = "AllocateMessageQueueAveragely",
  AllocateMessageQueueAveragelyByCircle = "AVG_BY_CIRCLE",
  AllocateMessageQueueConsistentHash = "CONSISTENT_HASH",
  AllocateMessageQueueByConfig = "CONFIG",
  AllocateMessageQueueByMachineRoom = "MACHINE_ROOM",
  AllocateMachineRoomNearby = "MACHINE_ROOM_NEARBY-AVG",
}

local function set(conf, k, v)
  local err = ffi.new("char[512]")
  local rc = lib.rmq_conf_set(conf, k, v, err, 512)
  assert(rc == 0, ffi.string(err))
end

-- C arrays for the lists; `keep` holds the Lua strings the C pointers point into.
local function mq_array(list, keep)
  local arr = ffi.new("rmq_mq_t[?]", math.max(#list, 1))
  for i, q in ipairs(list) do
    local t, b = ffi.new("char[?]", #q.topic + 1, q.topic), ffi.new("char[?]", #q.brokerName + 1, q.brokerName)
    keep[#keep + 1] = t; keep[#keep + 1] = b
    arr[i - 1].topic, arr[i - 1].broker_name, arr[i - 1].queue_id = t, b, q.queueId
  end
  return arr
end

local function cid_array(list, keep)
  local arr = ffi.new("const char *[?]", math.max(#list, 1))
  for i, c in ipairs(list) do
    local s = ffi.new("char[?]", #c + 1, c)
    keep[#keep + 1] = s
    arr[i - 1] = s
  end
  return arr
end

local function mq_key(topic, broker, qid) return topic .. "/" .. broker .. "/" .. tostring(qid) end

local function conf_for(case)
  local conf = ffi.gc(lib.rmq_conf_new(), lib.rmq_conf_destroy)
  set(conf, "allocate_message_queue_strategy", STRATEGY[case.strategy])
  local p = case.params or {}
  if p.virtualNodeCnt then set(conf, "consistent_hash_virtual_nodes", tostring(p.virtualNodeCnt)) end
  if p.consumeridcs then set(conf, "allocate_machine_room_idcs", table.concat(p.consumeridcs, ",")) end
  if p.messageQueueList then
    local items = {}
    for _, q in ipairs(p.messageQueueList) do
      items[#items + 1] = q.topic .. ":" .. q.brokerName .. ":" .. q.queueId
    end
    set(conf, "allocate_config_queues", table.concat(items, ","))
  end
  return conf
end

-- Runs the strategy on (mqs, cids) as given; returns the result as a list of keys, or nil, err.
local function allocate(conf, cid, mqs, cids, sort_first, engine)
  local keep = {}
  local mq_arr, cid_arr = mq_array(mqs, keep), cid_array(cids, keep)
  if sort_first then
    lib.rmq_mq_sort(mq_arr, #mqs)
    lib.rmq_cid_sort(cid_arr, #cids)
  end
  local out, n_out, err = ffi.new("int[?]", lib.rmq_allocate_out_cap(conf, #mqs)), ffi.new("int[1]"), ffi.new("char[512]")
  local fn = engine and lib.rmq_allocate or lib.rmq_allocate_java
  local rc = fn(conf, "vectors_group", cid, mq_arr, #mqs, cid_arr, #cids, out, n_out, err, 512)
  if rc ~= 0 then return nil, ffi.string(err), rc end
  local res = {}
  for i = 0, n_out[0] - 1 do
    local q = lib.rmq_allocate_result_mq(conf, mq_arr, #mqs, out[i])
    res[#res + 1] = mq_key(ffi.string(q.topic), ffi.string(q.broker_name), q.queue_id)
  end
  -- The sorted arrays too, to compare with mqAllSorted / cidAllSorted.
  local sorted_mqs, sorted_cids = {}, {}
  for i = 0, #mqs - 1 do
    sorted_mqs[#sorted_mqs + 1] = mq_key(ffi.string(mq_arr[i].topic), ffi.string(mq_arr[i].broker_name), mq_arr[i].queue_id)
  end
  for i = 0, #cids - 1 do sorted_cids[#sorted_cids + 1] = ffi.string(cid_arr[i]) end
  return res, sorted_mqs, sorted_cids
end

local function keys(list)
  local r = {}
  for _, q in ipairs(list) do r[#r + 1] = mq_key(q.topic, q.brokerName, q.queueId) end
  return r
end

describe("allocate vectors", function()
  it("has all 62 cases", function()
    assert.are.equal(62, #vec.cases)
  end)

  for _, case in ipairs(vec.cases) do
    local name = string.format("case %d %s: %s, %s", case.id, case.strategyGetName, case.scenario, case.currentCID)

    it(name .. " -- raw result on the lists as given", function()
      local conf = conf_for(case)
      local res, err = allocate(conf, case.currentCID, case.mqAll, case.cidAll, false)
      assert(res, err)
      assert.are.same(keys(case.result), res)
    end)

    if case.inputsSorted == false then
      it(name .. " -- after the caller's sort (RebalanceImpl)", function()
        local conf = conf_for(case)
        local res, sorted_mqs, sorted_cids = allocate(conf, case.currentCID, case.mqAll, case.cidAll, true)
        assert(res, sorted_mqs)
        assert.are.same(keys(case.mqAllSorted), sorted_mqs)
        assert.are.same(case.cidAllSorted, sorted_cids)
        assert.are.same(keys(case.resultAfterCallerSort), res)
      end)
    end
  end

  it("skips configured queues outside mq_all in the engine's entry point (CONFIG)", function()
    local case = vec.cases[45]
    assert.are.equal("CONFIG", case.strategyGetName)
    local conf = conf_for(case)
    local res = assert(allocate(conf, case.currentCID, case.mqAll, case.cidAll, true, true))
    assert.are.same({ "TopicTest/broker-a/1" }, res)
  end)

  it("gives the engine's entry point the same answers as Java's for every other case", function()
    for _, case in ipairs(vec.cases) do
      if case.id ~= 45 then
        local conf = conf_for(case)
        local a = assert(allocate(conf, case.currentCID, case.mqAll, case.cidAll, true, true))
        local b = assert(allocate(conf, case.currentCID, case.mqAll, case.cidAll, true, false))
        assert.are.same(b, a, "case " .. case.id)
      end
    end
  end)

  it("gives every queue to exactly one consumer (AVG, AVG_BY_CIRCLE, CONSISTENT_HASH, MACHINE_ROOM_NEARBY)", function()
    local mqs, cids = {}, {}
    for b = 1, 3 do for q = 0, 6 do mqs[#mqs + 1] = { topic = "T", brokerName = (b == 3 and "sh" or "hz") .. "-b" .. b, queueId = q } end end
    for c = 1, 4 do cids[#cids + 1] = "hz-10.0.0." .. c .. "@x" end
    for _, s in ipairs { "AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH", "MACHINE_ROOM_NEARBY-AVG" } do
      local conf = ffi.gc(lib.rmq_conf_new(), lib.rmq_conf_destroy)
      set(conf, "allocate_message_queue_strategy", s)
      local owner = {}
      for _, cid in ipairs(cids) do
        local res, err = allocate(conf, cid, mqs, cids, true)
        assert(res, err)
        for _, k in ipairs(res) do
          assert.is_nil(owner[k], s .. ": " .. k .. " given twice")
          owner[k] = cid
        end
      end
      for _, q in ipairs(mqs) do
        assert.is_not_nil(owner[mq_key(q.topic, q.brokerName, q.queueId)], s .. ": queue left over")
      end
    end
  end)
end)

describe("PROTOCOL 10.2 worked examples", function()
  local cids = { "10.0.0.1@c1", "10.0.0.2@c2", "10.0.0.3@c3" }
  local function queues(broker, n)
    local l = {}
    for q = 0, n - 1 do l[#l + 1] = { topic = "TopicTest", brokerName = broker, queueId = q } end
    return l
  end
  local function ids(res)
    local r = {}
    for _, k in ipairs(res) do r[#r + 1] = tonumber(k:match("(%d+)$")) end
    return r
  end
  local function run(strategy, mqs, extra)
    local conf = ffi.gc(lib.rmq_conf_new(), lib.rmq_conf_destroy)
    set(conf, "allocate_message_queue_strategy", strategy)
    for k, v in pairs(extra or {}) do set(conf, k, v) end
    local out = {}
    for i, cid in ipairs(cids) do out[i] = assert(allocate(conf, cid, mqs, cids, true, true)) end
    return out
  end

  it("AVG and AVG_BY_CIRCLE for 2..8 queues", function()
    local want = {
      [2] = { { { 0 }, { 1 }, {} }, { { 0 }, { 1 }, {} } },
      [3] = { { { 0 }, { 1 }, { 2 } }, { { 0 }, { 1 }, { 2 } } },
      [4] = { { { 0, 1 }, { 2 }, { 3 } }, { { 0, 3 }, { 1 }, { 2 } } },
      [5] = { { { 0, 1 }, { 2, 3 }, { 4 } }, { { 0, 3 }, { 1, 4 }, { 2 } } },
      [7] = { { { 0, 1, 2 }, { 3, 4 }, { 5, 6 } }, { { 0, 3, 6 }, { 1, 4 }, { 2, 5 } } },
      [8] = { { { 0, 1, 2 }, { 3, 4, 5 }, { 6, 7 } }, { { 0, 3, 6 }, { 1, 4, 7 }, { 2, 5 } } },
    }
    for n, w in pairs(want) do
      for si, strategy in ipairs { "AVG", "AVG_BY_CIRCLE" } do
        local got = run(strategy, queues("broker-a", n))
        for i = 1, 3 do assert.are.same(w[si][i], ids(got[i]), strategy .. " n=" .. n .. " c" .. i) end
      end
    end
  end)

  it("CONSISTENT_HASH for 8 queues", function()
    local got = run("CONSISTENT_HASH", queues("broker-a", 8))
    assert.are.same({ 0 }, ids(got[1]))
    assert.are.same({ 2, 6 }, ids(got[2]))
    assert.are.same({ 1, 3, 4, 5, 7 }, ids(got[3]))
  end)

  it("MACHINE_ROOM cases 1 and 2", function()
    local got = run("MACHINE_ROOM", queues("room1@broker-a", 8), { allocate_machine_room_idcs = "room1" })
    assert.are.same({ 0, 1, 6 }, ids(got[1]))
    assert.are.same({ 2, 3, 7 }, ids(got[2]))
    assert.are.same({ 4, 5 }, ids(got[3]))
    local mqs = queues("room1@broker-a", 4)
    for _, q in ipairs(queues("room2@broker-b", 4)) do mqs[#mqs + 1] = q end
    got = run("MACHINE_ROOM", mqs, { allocate_machine_room_idcs = "room1" })
    assert.are.same({ "TopicTest/room1@broker-a/0", "TopicTest/room1@broker-a/3" }, got[1])
    assert.are.same({ "TopicTest/room1@broker-a/1" }, got[2])
    assert.are.same({ "TopicTest/room1@broker-a/2" }, got[3])
  end)
end)

describe("consistent hash ring", function()
  local d = vec.consistentHashDetail

  it("hashes virtual nodes like ConsistentHashRouter.MD5Hash", function()
    for _, v in ipairs(d.virtualNodes) do
      assert.are.equal(v.hash, tonumber(lib.rmq_alloc_md5_hash(v.key, #v.key)), v.key)
    end
  end)

  it("hashes queue keys (MessageQueue.toString) and routes each to its owner", function()
    local mqs, owners = {}, {}
    for _, q in ipairs(d.queues) do
      assert.are.equal(q.hash, tonumber(lib.rmq_alloc_md5_hash(q.key, #q.key)), q.key)
      local t, b, id = q.key:match("^MessageQueue %[topic=(.-), brokerName=(.-), queueId=(%d+)%]$")
      mqs[#mqs + 1] = { topic = t, brokerName = b, queueId = tonumber(id) }
      owners[mq_key(t, b, tonumber(id))] = q.owner
    end
    local cids = { "10.0.0.1@c1", "10.0.0.2@c2", "10.0.0.3@c3" }
    local conf = ffi.gc(lib.rmq_conf_new(), lib.rmq_conf_destroy)
    set(conf, "allocate_message_queue_strategy", "CONSISTENT_HASH")
    local seen = 0
    for _, cid in ipairs(cids) do
      local res = assert(allocate(conf, cid, mqs, cids, true))
      for _, k in ipairs(res) do
        assert.are.equal(owners[k], cid, k)
        seen = seen + 1
      end
    end
    assert.are.equal(#mqs, seen)
  end)

  it("gives the worked example of PROTOCOL 10.2 (8 queues, 3 consumers)", function()
    assert.are.equal(4156134030, tonumber(lib.rmq_alloc_md5_hash("10.0.0.1@c1-0", 13)))
  end)
end)

describe("allocate check step", function()
  local conf = ffi.gc(lib.rmq_conf_new(), lib.rmq_conf_destroy)
  local mqs = { { topic = "T", brokerName = "b", queueId = 0 } }

  it("rejects an empty currentCID, mqAll or cidAll with Java's message", function()
    local res, err = allocate(conf, "", mqs, { "a" })
    assert.is_nil(res); assert.are.equal("currentCID is empty", err)
    res, err = allocate(conf, "a", {}, { "a" })
    assert.is_nil(res); assert.are.equal("mqAll is null or mqAll empty", err)
    res, err = allocate(conf, "a", mqs, {})
    assert.is_nil(res); assert.are.equal("cidAll is null or cidAll empty", err)
  end)

  it("returns nothing when currentCID is not in cidAll", function()
    local res = allocate(conf, "z", mqs, { "a" })
    assert.are.same({}, res)
  end)

  it("refuses to run the LUA strategy itself", function()
    local c = ffi.gc(lib.rmq_conf_new(), lib.rmq_conf_destroy)
    set(c, "allocate_message_queue_strategy", "LUA")
    local res, err = allocate(c, "a", mqs, { "a" })
    assert.is_nil(res)
    assert.matches("Lua layer", err)
  end)
end)

describe("Java orderings", function()
  it("compares strings by UTF-16 code units", function()
    assert.is_true(lib.rmq_java_strcmp("A", "a") < 0)
    assert.is_true(lib.rmq_java_strcmp("ab", "abc") < 0)
    assert.are.equal(0, lib.rmq_java_strcmp("x", "x"))
    -- U+1F600 (surrogates D83D DE00) sorts before U+FF01 in Java, after it in UTF-8 byte order.
    assert.is_true(lib.rmq_java_strcmp("\240\159\152\128", "\239\188\129") < 0)
  end)

  it("sorts queues by topic, brokerName, queueId", function()
    local keep = {}
    local list = {
      { topic = "T", brokerName = "b", queueId = 10 }, { topic = "T", brokerName = "b", queueId = 2 },
      { topic = "S", brokerName = "z", queueId = 0 }, { topic = "T", brokerName = "a", queueId = 5 },
    }
    local arr = mq_array(list, keep)
    lib.rmq_mq_sort(arr, #list)
    local got = {}
    for i = 0, #list - 1 do got[#got + 1] = mq_key(ffi.string(arr[i].topic), ffi.string(arr[i].broker_name), arr[i].queue_id) end
    assert.are.same({ "S/z/0", "T/a/5", "T/b/2", "T/b/10" }, got)
  end)
end)

describe("MACHINE_ROOM_NEARBY options", function()
  -- Two rooms (roomA, roomB), two brokers with 4 queues each, two consumers per room.
  local mqs, cids = {}, { "roomA_c1@x", "roomA_c2@x", "roomB_c1@x", "roomB_c2@x" }
  for _, b in ipairs { "roomA_b1", "roomB_b1" } do
    for q = 0, 3 do mqs[#mqs + 1] = { topic = "T", brokerName = b, queueId = q } end
  end
  local function plan(cid, extra)
    local conf = ffi.gc(lib.rmq_conf_new(), lib.rmq_conf_destroy)
    set(conf, "allocate_message_queue_strategy", "MACHINE_ROOM_NEARBY")
    for k, v in pairs(extra) do set(conf, k, v) end
    return assert(allocate(conf, cid, mqs, cids, true))
  end

  it("machine_room_separator says where the machine room ends in names", function()
    -- "_": roomA's consumers share roomA's queues only.
    assert.are.same({ "T/roomA_b1/0", "T/roomA_b1/1" }, plan("roomA_c1@x", { machine_room_separator = "_" }))
    -- The default "-" finds no room in these names: every name is a room of its own, so no
    -- consumer is in a broker's room and each broker's queues are spread over all consumers.
    assert.are.same({ "T/roomA_b1/0", "T/roomB_b1/0" }, plan("roomA_c1@x", {}))
    assert.are.same({ "T/roomA_b1/1", "T/roomB_b1/1" }, plan("roomA_c2@x", {}))
    assert.are.same({ "T/roomA_b1/2", "T/roomA_b1/3" }, plan("roomA_c2@x", { machine_room_separator = "_" }))
  end)

  it("allocate_nearby_inner_strategy is the strategy inside a room", function()
    assert.are.same({ "T/roomA_b1/0", "T/roomA_b1/2" }, plan("roomA_c1@x",
      { machine_room_separator = "_", allocate_nearby_inner_strategy = "AVG_BY_CIRCLE" }))
  end)
end)
