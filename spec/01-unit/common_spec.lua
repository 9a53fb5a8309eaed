-- Java String.hashCode (broker tag codes) and error names, against the 4.9.4 vectors.
local ffi = require "ffi"
local helpers = require "helpers"

ffi.cdef [[
int32_t rmq_java_hash(const char *utf8, size_t len);
const char *rmq_err_name(int err);
const char *rmq_request_code_name(int code);
]]

describe("rmq_java_hash", function()
  local lib = helpers.lib()
  local vec = helpers.json_fixture("vectors/taghash.json")

  it("matches MessageExtBrokerInner.tagsString2tagsCode for every tag vector", function()
    local n = 0
    for _, t in ipairs(vec.tags) do
      local s = helpers.fromhex(t.utf8Hex)
      assert.are.equal(t.hashCode, lib.rmq_java_hash(s, #s), "tag " .. t.utf8Hex)
      n = n + 1
    end
    assert.is_true(n >= 30)
  end)

  it("gives 2598919 for TagA", function()
    assert.are.equal(2598919, lib.rmq_java_hash("TagA", 4))
  end)
end)

describe("error names", function()
  local lib = helpers.lib()
  it("names local errors and RocketMQ response codes", function()
    assert.are.equal("ERR_TIMEOUT", ffi.string(lib.rmq_err_name(-1)))
    assert.are.equal("TOPIC_NOT_EXIST", ffi.string(lib.rmq_err_name(17)))
    assert.are.equal("PULL_MESSAGE", ffi.string(lib.rmq_request_code_name(11)))
  end)
end)
