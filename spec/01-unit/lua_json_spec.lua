-- rmq.json: the decoder that reads a message view's body in place (runtime/luahost/json_decode.c) gives
-- what lua-cjson's cjson.decode gives, value for value and error for error, on hand-picked
-- edge cases and on thousands of mutated JSON documents; views, pointers and strings as input.
local ffi = require "ffi"
local helpers = require "helpers"
helpers.lib()
local cjson = require "cjson"
local json = require "rmq.json"
local dispatch = require "rmq.dispatch"

local function same(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) == "number" then
    if a ~= a then return b ~= b end
    return a == b and 1 / a == 1 / b -- -0 and 0 differ
  end
  if type(a) ~= "table" then return a == b end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

-- Decode s with cjson and with rmq.json (as a string and as bytes without a NUL after them);
-- returns nil when all agree, else a description.
local function differs(s)
  local ok1, a = pcall(cjson.decode, s)
  local ok2, b = pcall(json.decode, s)
  local buf = ffi.new("char[?]", #s + 8)
  ffi.copy(buf, s .. "]]]]]]]]", #s + 8) -- bytes past the length must not be read
  local ok3, c = pcall(json.decode, buf, #s)
  if ok1 ~= ok2 or ok1 ~= ok3 then
    return string.format("%q: cjson %s %s, rmq.json %s %s / %s %s", s, ok1, tostring(a), ok2,
      tostring(b), ok3, tostring(c))
  end
  if ok1 and not (same(a, b) and same(a, c)) then
    return string.format("%q: values differ", s)
  end
  if not ok1 and (a ~= b or a ~= c) then
    return string.format("%q: errors differ: %s / %s / %s", s, a, b, c)
  end
  return nil
end

local EDGE = {
  '{"a":1}', '[1,2,3]', '"x"', '1', '-0', '-0.0', '0', '00', '007', '0x10', '-0x10', '0x1p3',
  '1e5', '1.5e-3', '1E400', '-1e-400', '5e-324', '1.7976931348623157e308', '0.1',
  '0.30000000000000004', '3.141592653589793', '123456789012345', '1234567890123456',
  '12345678901234567890', '9007199254740993', '900719925474099.3', '123.456', '-123.456e10',
  '9999999999999999999', '-9223372036854775809', '18446744073709551615', '1796283211236958',
  '12345678901234567.5', '0.12345678901234567', '9007199254740993.5', '4503599627370497.5',
  '0.0000000000000000000001', '0.00000000000000000000001', '9007199254740992.0',
  'inf', '-inf', 'nan', 'NaN', 'Infinity', '-Infinity', 'nan(123)', '+1', 'I', 'i', 'N', 'n',
  '1.', '.5', '-', '12abc', '1.5x', '[0x]', '{"a":1,}', '[1,]', '[', '{', '"abc', '{1:2}',
  '{"a" 1}', '[1 2]', 'true', 'false', 'null', 'tru', 'nul', 'fals',
  '"a\\u0041\\n\\t\\/\\\\\\"\\b\\f\\r"', '"\\ud83d\\ude00"', '"\\ud83d"', '"\\ude00"', '"\\x"',
  '"\\u00"', '["\\u12"]', '"\\uD800\\u0041"', '"\\uDBFF\\uDFFF"', '"\\u0000"', '"é"', '"\1\2"',
  '{"a":"\0"}', '"a\0b"', '{"a":1} \0 junk', '\0', '', ' ', '\0x', 'x\0',
  ' \t\n{ "a" : [ true , false , null ] } \r\n', '{"a":1}x', '{"a":1,"a":2}',
  '{"a":{"b":{"c":[1,2,{"d":"e"}]}}}', '"' .. string.rep("x", 300) .. '"',
  '"' .. string.rep("y", 100) .. '\\n' .. string.rep("z", 100) .. '"',
  string.rep("[", 1000) .. string.rep("]", 1000), string.rep("[", 1001) .. string.rep("]", 1001),
  string.rep('{"a":', 1001) .. '1' .. string.rep("}", 1001),
}

describe("rmq.json.decode", function()
  it("gives cjson.decode's value or error on edge cases of the grammar", function()
    for _, s in ipairs(EDGE) do
      local d = differs(s)
      assert.is_nil(d, d)
    end
  end)

  it("gives cjson.decode's value or error on 5000 mutations of a JSON order", function()
    local base = '{"sent_us":1796283211236958,"id":123,"user":"u1","items":[{"sku":"S-1",'
      .. '"qty":1,"price":4.5},{"sku":"S-2","qty":2,"price":-0.25e2}],"amount":12.34,'
      .. '"paid":true,"coupon":null,"t":"a\\"b\\u00e9\\ud83d\\ude00","n":[0x1F,1e3,-0]}'
    assert.is_nil(differs(base))
    math.randomseed(7)
    local bad = {}
    for _ = 1, 5000 do
      local s = base
      for _ = 1, math.random(1, 3) do
        local pos = math.random(1, #s)
        local ch = string.char(math.random(0, 127))
        local r = math.random(1, 3)
        if r == 1 then s = s:sub(1, pos - 1) .. ch .. s:sub(pos + 1)
        elseif r == 2 then s = s:sub(1, pos - 1) .. s:sub(pos + 1)
        else s = s:sub(1, pos) .. ch .. s:sub(pos + 1) end
      end
      local d = differs(s)
      if d then bad[#bad + 1] = d end
    end
    assert.are.same({}, bad)
  end)

  it("builds large objects and arrays (past the members it holds back) as cjson does", function()
    local nums, pairs_ = {}, {}
    for i = 1, 300 do
      nums[i] = tostring(i * 1.5)
      pairs_[i] = '"k' .. (i % 150) .. '":' .. i -- every key twice: the last one wins
    end
    local arr = "[" .. table.concat(nums, ",") .. "]"
    local obj = "{" .. table.concat(pairs_, ",") .. "}"
    for _, s in ipairs({ arr, obj, arr:sub(1, -2) .. ",]", obj:sub(1, -2) .. ",}",
      "[" .. string.rep('{"x":[1,2]},', 200) .. "0]" }) do
      local d = differs(s)
      assert.is_nil(d, d)
    end
    -- Members held back at every level of a deep nesting stay within LuaJIT's stack: 999
    -- levels of 40 members each decode where cjson decodes them, 1001 fail as in cjson.
    local members = {}
    for i = 1, 40 do members[i] = '"m' .. i .. '":' .. i end
    local prefix = "{" .. table.concat(members, ",") .. ',"next":'
    local aprefix = "[" .. string.rep("1,", 40)
    for _, depth in ipairs({ 999, 1001 }) do
      local deep = string.rep(prefix, depth) .. "0" .. string.rep("}", depth)
      local d = differs(deep)
      assert.is_nil(d, d and d:sub(1, 300))
      deep = string.rep(aprefix, depth) .. "0" .. string.rep("]", depth)
      d = differs(deep)
      assert.is_nil(d, d and d:sub(1, 300))
    end
    assert.equal(40, json.decode(string.rep(prefix, 999) .. "0" .. string.rep("}", 999)).m40)
    local o = json.decode(obj)
    assert.equal(300, o.k0)
    assert.equal(151, o.k1)
    assert.equal(300, #json.decode(arr))
  end)

  it("decodes null to json.null, which is cjson.null, and keeps the sign of -0", function()
    assert.equal(cjson.null, json.null)
    local v = json.decode('{"a":null,"b":[null],"z":-0}')
    assert.equal(json.null, v.a)
    assert.equal(json.null, v.b[1])
    assert.equal(-math.huge, 1 / v.z)
  end)

  it("decodes a message view's body in place, and refuses a view kept past its handler", function()
    local body = '{"id":7,"user":"u3","tags":["a","b"]}'
    local raw = ffi.new("char[?]", #body + 5)
    ffi.copy(raw, body .. "}}}}}", #body + 5) -- only body_len bytes are the body
    local m = ffi.new("rmq_msg_t")
    m.topic, m.topic_len = "T", 1
    m.body, m.body_len = raw, #body
    local ptrs = ffi.new("rmq_msg_t *[1]", m)
    local b = ffi.new("rmq_batch_t")
    b.msgs, b.n = ptrs, 1
    local got, kept
    local d = dispatch.new({ subscribe = { T = "*" }, consume = function(msgs)
      got = json.decode(msgs[1])
      kept = msgs[1]
    end }, { thread_index = 0, thread_count = 1 })
    d.slot[0] = b
    assert.is_nil(d.dispatch())
    assert.equal(0, b.status)
    assert.are.same({ id = 7, user = "u3", tags = { "a", "b" } }, got)
    local ok, err = pcall(json.decode, kept)
    assert.is_false(ok)
    assert.matches("message view used after its handler returned", err, 1, true)
    local v, e = json.decode_safe(kept)
    assert.is_nil(v)
    assert.matches("message view used after its handler returned", e, 1, true)
  end)

  it("decode_safe returns nil and cjson's error text; bad arguments are named", function()
    local v, err = json.decode_safe("{bad")
    assert.is_nil(v)
    assert.equal(select(2, pcall(cjson.decode, "{bad")), err)
    assert.are.same({ 1 }, json.decode_safe("[1]"))
    local ok, e = pcall(json.decode, {})
    assert.is_false(ok)
    assert.matches("expected a message, a string, or a pointer and a length, got table", e, 1, true)
    ok, e = pcall(json.decode, ffi.new("char[4]"))
    assert.is_false(ok)
    assert.matches("a pointer needs a length", e, 1, true)
    assert.equal(12, json.decode(12)) -- a number is taken as its text, as cjson.decode does
  end)
end)
