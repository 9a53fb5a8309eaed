-- LocalFileOffsetStore file: exact bytes, parsing, and the .tmp/.bak write sequence, against
-- spec/fixtures/vectors/offsets-file.
local ffi = require "ffi"
local helpers = require "helpers"

-- rmq_mq_t may already be declared by another spec in the same LuaJIT process.
pcall(ffi.cdef, "typedef struct rmq_mq { char *topic; char *broker_name; int queue_id; } rmq_mq_t;")
ffi.cdef [[
typedef struct rmq_offset_entry { rmq_mq_t mq; int64_t offset; } rmq_offset_entry_t;
size_t rmq_offset_file_encode(const rmq_offset_entry_t *e, int n, char *out, size_t out_size);
int rmq_offset_file_write(const char *path, const char *data, size_t len, char *errstr,
                          size_t errstr_size);
int rmq_offset_file_load(const char *path, rmq_offset_entry_t **out, int *n, char *errstr,
                         size_t errstr_size);
int rmq_offset_file_decode(const char *data, size_t len, rmq_offset_entry_t **out, int *n,
                           char *errstr, size_t errstr_size);
void rmq_offset_file_free(rmq_offset_entry_t *e, int n);
]]

local lib = helpers.lib()
local meta = helpers.json_fixture("vectors/offsets-file/meta.json")
local file = helpers.fixture("vectors/offsets-file/offsets.json")

-- The vector's offsets as exact int64 (2^53+1 does not survive a double).
local EXACT = { ["TopicOrder/broker-b/2"] = 9007199254740993LL }

local function key(t, b, q) return t .. "/" .. b .. "/" .. q end

local function entries_array(list, keep)
  local arr = ffi.new("rmq_offset_entry_t[?]", math.max(#list, 1))
  for i, e in ipairs(list) do
    local t = ffi.new("char[?]", #e.mq.topic + 1, e.mq.topic)
    local b = ffi.new("char[?]", #e.mq.brokerName + 1, e.mq.brokerName)
    keep[#keep + 1], keep[#keep + 2] = t, b
    arr[i - 1].mq.topic, arr[i - 1].mq.broker_name, arr[i - 1].mq.queue_id = t, b, e.mq.queueId
    arr[i - 1].offset = EXACT[key(e.mq.topic, e.mq.brokerName, e.mq.queueId)] or e.offset
  end
  return arr
end

local function encode(list)
  local keep = {}
  local arr = entries_array(list, keep)
  local n = tonumber(lib.rmq_offset_file_encode(arr, #list, nil, 0))
  local buf = ffi.new("char[?]", n + 1)
  lib.rmq_offset_file_encode(arr, #list, buf, n + 1)
  return ffi.string(buf, n)
end

local function to_map(p, n)
  local m = {}
  for i = 0, n - 1 do
    m[key(ffi.string(p[i].mq.topic), ffi.string(p[i].mq.broker_name), p[i].mq.queue_id)] = p[i].offset
  end
  return m
end

local function decode(s)
  local out, n, err = ffi.new("rmq_offset_entry_t *[1]"), ffi.new("int[1]"), ffi.new("char[256]")
  local rc = lib.rmq_offset_file_decode(s, #s, out, n, err, 256)
  if rc ~= 0 then return nil, ffi.string(err) end
  local m = to_map(out[0], n[0])
  lib.rmq_offset_file_free(out[0], n[0])
  return m, n[0]
end

local function load(path)
  local out, n, err = ffi.new("rmq_offset_entry_t *[1]"), ffi.new("int[1]"), ffi.new("char[512]")
  local rc = lib.rmq_offset_file_load(path, out, n, err, 512)
  if rc ~= 0 then return nil, ffi.string(err) end
  local m = to_map(out[0], n[0])
  lib.rmq_offset_file_free(out[0], n[0])
  return m, n[0]
end

local function write(path, s)
  local err = ffi.new("char[512]")
  local rc = lib.rmq_offset_file_write(path, s, #s, err, 512)
  assert(rc == 0, ffi.string(err))
end

local function exists(p)
  local f = io.open(p, "rb")
  if f then f:close() return true end
  return false
end

local function expected_map()
  local m = {}
  for _, e in ipairs(meta.roundTripViaLoad) do
    local k = key(e.mq.topic, e.mq.brokerName, e.mq.queueId)
    m[k] = EXACT[k] or e.readOffset
  end
  return m
end

local function same_offsets(want, got)
  local n = 0
  for k, v in pairs(want) do
    assert.is_not_nil(got[k], k)
    assert.is_true(got[k] == ffi.cast("int64_t", v), k .. ": " .. tostring(got[k]))
    n = n + 1
  end
  for k in pairs(got) do assert.is_not_nil(want[k], "unexpected " .. k) end
  return n
end

describe("offsets.json format", function()
  it("writes the exact bytes LocalFileOffsetStore.persistAll wrote", function()
    assert.are.equal(meta.fileLength, #file)
    assert.are.equal(file, encode(meta.entries))
  end)

  it("reads the file back with exact int64 offsets (2^53+1)", function()
    local m, n = decode(file)
    assert(m, n)
    assert.are.equal(6, same_offsets(expected_map(), m))
  end)

  it("round-trips its own output", function()
    local m = assert(decode(encode(meta.entries)))
    same_offsets(expected_map(), m)
  end)

  it("writes an empty table and reads it back", function()
    local s = encode({})
    local m, n = decode(s)
    assert(m, n)
    assert.are.equal(0, n)
  end)

  it("rejects damaged content, naming the problem", function()
    local m, err = decode('{"offsetTable":{"x":1}}')
    assert.is_nil(m)
    assert.matches("entry 1", err, 1, true)
    m, err = decode(file:sub(1, 100))
    assert.is_nil(m)
    assert.matches("offsets file", err, 1, true)
  end)
end)

describe("offsets.json on disk", function()
  local dir
  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    dir = dir .. "-offsets"
  end)
  after_each(function()
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("creates the directories and writes <path>, then keeps the previous content in .bak", function()
    local path = dir .. "/127.0.0.1@vectors/vectors_group/offsets.json"
    local first = encode({ meta.entries[1] })
    write(path, first)
    assert.are.equal(first, helpers.read_file(path))
    assert.is_false(exists(path .. ".bak"))
    assert.is_false(exists(path .. ".tmp"))
    write(path, file)
    assert.are.equal(file, helpers.read_file(path))
    assert.are.equal(first, helpers.read_file(path .. ".bak"))
    assert.is_false(exists(path .. ".tmp"))
    local m = assert(load(path))
    same_offsets(expected_map(), m)
  end)

  it("falls back to .bak when the file is damaged or missing", function()
    local path = dir .. "/c/g/offsets.json"
    write(path, file)
    write(path, "{garbage")
    local m, err = load(path)
    assert(m, err)
    same_offsets(expected_map(), m)
    os.remove(path)
    m, err = load(path)
    assert(m, err)
    same_offsets(expected_map(), m)
  end)

  it("has no offsets when neither file exists, and fails when both are damaged", function()
    local path = dir .. "/c/g/offsets.json"
    local m, n = load(path)
    assert(m, n)
    assert.are.equal(0, n)
    write(path, "{bad")
    write(path, "{worse")
    m, n = load(path)
    assert.is_nil(m)
    assert.matches("readLocalOffset Exception", n, 1, true)
  end)

  it("names the file when it cannot be written", function()
    local err = ffi.new("char[512]")
    local rc = lib.rmq_offset_file_write("/proc/nonexistent-dir/x/offsets.json", "x", 1, err, 512)
    assert.are_not.equal(0, rc)
    assert.matches("offsets.json", ffi.string(err), 1, true)
  end)
end)
