-- ACL request signing (AclClientRPCHook) against spec/fixtures/vectors/acl.json.
local ffi = require "ffi"
local helpers = require "helpers"
local cjson = require "cjson"

ffi.cdef [[
int rmq_acl_sign_fields(const char *const *keys, const char *const *vals, int n,
                        const char *body, size_t body_len, const char *access_key,
                        const char *secret_key, const char *security_token,
                        char *content, size_t content_size, size_t *content_len,
                        char *sig, size_t sig_size);
]]

local lib = helpers.lib()
local vec = helpers.json_fixture("vectors/acl.json")

-- Java's value.toString() of a header field.
local function java_string(v)
  if type(v) == "boolean" then return v and "true" or "false" end
  if type(v) == "number" then return string.format("%d", v) end
  return v
end

local function sign(fields, body, ak, sk, token)
  local keys, vals = {}, {}
  for k, v in pairs(fields or {}) do
    if v ~= cjson.null then
      keys[#keys + 1] = k
      vals[#vals + 1] = java_string(v)
    end
  end
  local ck, cv = ffi.new("const char *[?]", #keys + 1), ffi.new("const char *[?]", #keys + 1)
  for i = 1, #keys do
    ck[i - 1], cv[i - 1] = keys[i], vals[i]
  end
  local content, clen, sig = ffi.new("char[8192]"), ffi.new("size_t[1]"), ffi.new("char[64]")
  local rc = lib.rmq_acl_sign_fields(ck, cv, #keys, body, body and #body or 0, ak, sk, token,
                                     content, 8192, clen, sig, 64)
  assert.are.equal(0, rc)
  return ffi.string(sig), ffi.string(content, tonumber(clen[0]))
end

describe("ACL signing vectors", function()
  it("has 8 cases", function() assert.are.equal(8, #vec.cases) end)

  for _, case in ipairs(vec.cases) do
    it(case.name, function()
      local body = case.bodyHex ~= cjson.null and case.bodyHex and helpers.fromhex(case.bodyHex) or nil
      local fields = case.headerFields ~= cjson.null and case.headerFields or {}
      local token = case.securityToken ~= cjson.null and case.securityToken or nil
      local sig, content = sign(fields, body, case.accessKey, case.secretKey, token)
      assert.are.equal(case.signedContentHex, helpers.tohex(content))
      assert.are.equal(case.signature, sig)
    end)
  end

  it("gives the PROTOCOL 10.7 worked examples", function()
    local sig = sign({ topic = "TopicTest" }, nil, "rocketmq2", "12345678")
    assert.are.equal("GeeGoP9mRvDhoVp4PD5omX0prgE=", sig)
    sig = sign({ topic = "TopicTest" }, '{"a":1}', "rocketmq2", "12345678")
    assert.are.equal("wyzyQ5V9GmTwLFC6q2Iojw34tlA=", sig)
  end)

  it("changes the signature when any signed value changes", function()
    local a = sign({ topic = "TopicTest", queueId = "1" }, nil, "ak", "sk")
    local b = sign({ topic = "TopicTest", queueId = "2" }, nil, "ak", "sk")
    assert.are_not.equal(a, b)
  end)
end)
