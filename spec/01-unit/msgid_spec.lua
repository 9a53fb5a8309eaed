-- offsetMsgId, host text and property lookup through the FFI leaf functions, with rmq_msg_t
-- built in Lua from the declarations Lua really sees (runtime/include/rmqlua_ffi.h between its markers),
-- against the 4.9.4 vectors in spec/fixtures/vectors/msgid.json.
local ffi = require "ffi"
local helpers = require "helpers"

local header = helpers.read_file(helpers.root .. "/runtime/include/rmqlua_ffi.h")
local cdecl = header:match("/%* RMQ_FFI_BEGIN %*/(.-)/%* RMQ_FFI_END %*/")
assert(cdecl, "RMQ_FFI_BEGIN/END markers not found in rmqlua_ffi.h")
-- Another spec in the same busted process may have declared the header already.
if not pcall(ffi.typeof, "rmq_msg_t") then ffi.cdef(cdecl) end

local STOREHOST_V6, BORNHOST_V6 = 0x20, 0x10

-- Decimal text -> int64 cdata, exactly (cjson would round 2^63-1 through a double).
local function i64(text)
  local v, neg = 0LL, false
  if text:sub(1, 1) == "-" then neg, text = true, text:sub(2) end
  for d in text:gmatch("%d") do v = v * 10 + (d:byte() - 48) end
  return neg and -v or v
end

describe("message ids through the FFI", function()
  local lib = helpers.lib()
  local raw = helpers.fixture("vectors/msgid.json")
  local vec = require("cjson").decode(raw)
  -- The exact commit log offsets, in case order.
  local offsets = {}
  for num in raw:gmatch('"commitLogOffset":%s*(%-?%d+)') do offsets[#offsets + 1] = i64(num) end

  it("reports the ABI version of the header", function()
    local want = tonumber(header:match("#define RMQ_FFI_ABI_VERSION (%d+)"))
    assert.are.equal(want, lib.rmq_ffi_abi_version())
  end)

  it("computes every offsetMsgId vector and the store host text", function()
    local cases = vec.offsetMsgId.cases
    assert.are.equal(#cases, #offsets)
    assert.is_true(#cases >= 10)
    local out = ffi.new("char[64]")
    for i, c in ipairs(cases) do
      local m = ffi.new("rmq_msg_t")
      local bytes = helpers.fromhex(c.storeHostBytesHex)
      local iplen = c.ipVersion == 6 and 16 or 4
      ffi.copy(m.store_host, bytes, iplen)
      m.store_port = c.port
      m.commit_log_offset = offsets[i]
      m.sys_flag = c.ipVersion == 6 and STOREHOST_V6 or 0
      local n = lib.rmq_msg_offset_msg_id(m, out)
      assert.are.equal(c.msgIdLength, n, c.msgId)
      assert.are.equal(c.msgId, ffi.string(out, n))

      n = lib.rmq_msg_host(m, 1, out)
      local want = c.ipVersion == 6 and ("[" .. c.storeHost .. "]:" .. c.port)
        or (c.storeHost .. ":" .. c.port)
      assert.are.equal(want, ffi.string(out, n))
    end
  end)

  it("uses the store host only: the born host and its flag do not change the id", function()
    local c = vec.offsetMsgId.cases[5]
    local m = ffi.new("rmq_msg_t")
    ffi.copy(m.store_host, helpers.fromhex(c.storeHostBytesHex), 4)
    m.store_port = c.port
    m.commit_log_offset = offsets[5]
    ffi.copy(m.born_host, helpers.fromhex("20010db8000000000000000000000001"), 16)
    m.born_port = 40000
    m.sys_flag = BORNHOST_V6
    local out = ffi.new("char[64]")
    local n = lib.rmq_msg_offset_msg_id(m, out)
    assert.are.equal(c.msgId, ffi.string(out, n))
    n = lib.rmq_msg_host(m, 0, out)
    assert.are.equal("[2001:db8:0:0:0:0:0:1]:40000", ffi.string(out, n))
    n = lib.rmq_msg_host(m, 1, out)
    assert.are.equal("192.168.1.100:10911", ffi.string(out, n))
  end)

  it("finds properties with Java's rules", function()
    local props = "TAGS\1a\2UNIQ_KEY\001" .. vec.uniqId.fixedIdsDecoded[1].uniqId ..
      "\2\1y\2k\1\2TAGS\1b"
    local m = ffi.new("rmq_msg_t")
    m.props, m.props_len = props, #props
    local len = ffi.new("uint32_t[1]")
    local p = lib.rmq_msg_prop(m, "UNIQ_KEY", len)
    assert.are.equal("7F00000112340A0B0C0D05265C000001", ffi.string(p, len[0]))
    p = lib.rmq_msg_prop(m, "TAGS", len)
    assert.are.equal("b", ffi.string(p, len[0])) -- the last duplicate wins
    assert.is_true(lib.rmq_msg_prop(m, "k", len) == nil) -- empty value dropped
    assert.is_true(lib.rmq_msg_prop(m, "KEYS", len) == nil)
  end)
end)
