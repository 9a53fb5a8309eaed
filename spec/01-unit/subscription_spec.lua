-- SubscriptionData (FilterAPI.buildSubscriptionData / FilterAPI.build), its fastjson form and the
-- tag filters, against spec/fixtures/vectors/taghash.json.
local ffi = require "ffi"
local helpers = require "helpers"
local cjson = require "cjson"

ffi.cdef [[
typedef struct rmq_sub {
    char *topic;
    char *sub_string;
    char *expression_type;
    int class_filter_mode;
    int64_t sub_version;
    char **tags;
    int n_tags;
    int32_t *codes;
    int n_codes;
} rmq_sub_t;
rmq_sub_t *rmq_sub_build(const char *topic, const char *sub_string, const char *type,
                         char *errstr, size_t errstr_size);
void rmq_sub_destroy(rmq_sub_t *sub);
size_t rmq_sub_to_json(const rmq_sub_t *sub, char *out, size_t out_size);
int rmq_sub_match_tags(const rmq_sub_t *sub, const char *tags, size_t len);
int rmq_sub_match_code(const rmq_sub_t *sub, int has_code, int64_t tags_code);
]]

local lib = helpers.lib()
local vec = helpers.json_fixture("vectors/taghash.json")

local function build(topic, expr, ty)
  local err = ffi.new("char[512]")
  local s = lib.rmq_sub_build(topic, expr, ty, err, 512)
  if s == nil then return nil, ffi.string(err) end
  return ffi.gc(s, lib.rmq_sub_destroy)
end

local function to_json(s)
  local n = tonumber(lib.rmq_sub_to_json(s, nil, 0))
  local buf = ffi.new("char[?]", n + 1)
  lib.rmq_sub_to_json(s, buf, n + 1)
  return ffi.string(buf, n)
end

local function nullable(v) if v == cjson.null then return nil end return v end

describe("FilterAPI vectors", function()
  it("has 18 subscription cases", function()
    assert.are.equal(18, #vec.subscriptions)
  end)

  for i, case in ipairs(vec.subscriptions) do
    local expr, ty = nullable(case.expr), nullable(case.type)
    it(string.format("#%d %s expr=%s type=%s", i, case.call, tostring(expr), tostring(ty)), function()
      local s, err = build("TopicTest", expr, ty)
      if case.error then
        assert.is_nil(s)
        assert.are.equal(case.error.message, err)
        return
      end
      assert(s, err)
      local d = case.subscriptionData
      assert.are.equal(d.topic, ffi.string(s.topic))
      assert.are.equal(d.subString, ffi.string(s.sub_string))
      assert.are.equal(d.expressionType, ffi.string(s.expression_type))
      local tags, codes = {}, {}
      for k = 0, s.n_tags - 1 do tags[#tags + 1] = ffi.string(s.tags[k]) end
      for k = 0, s.n_codes - 1 do codes[#codes + 1] = s.codes[k] end
      -- Same members, and the same (HashSet) order as Java printed them.
      assert.are.same(d.tagsSet, tags)
      assert.are.same(d.codeSet, codes)
      -- fastjson bytes, with subVersion fixed as in the vector.
      s.sub_version = 1700000000000LL
      assert.are.equal(d.fastjsonWithSubVersionFixed, to_json(s))
    end)
  end

  it("stamps subVersion with the current time", function()
    local before = (os.time() - 1) * 1000
    local s = build("T", "TagA")
    local after = (os.time() + 1) * 1000
    assert.is_true(s.sub_version >= before and s.sub_version <= after, tostring(s.sub_version))
  end)

  it("keeps codeSet deduplicated when tags collide (Aa / BB)", function()
    local s = build("T", "Aa||BB")
    assert.are.equal(2, s.n_tags)
    assert.are.equal(1, s.n_codes)
    assert.are.equal(2112, s.codes[0])
  end)

  it("orders a large tag set like a resized HashSet", function()
    -- 13 distinct tags: the HashSet has grown to 32 buckets.
    local tags = {}
    for k = 1, 13 do tags[#tags + 1] = "tag" .. k end
    local s = build("T", table.concat(tags, "||"))
    assert.are.equal(13, s.n_tags)
    local prev = -1
    for k = 0, s.n_tags - 1 do
      local h = s.codes[k] -- codes follow the same order here (no collisions)
      local u = h < 0 and h + 2 ^ 32 or h
      local spread = bit.band(bit.bxor(u, bit.rshift(u, 16)), 31)
      assert.is_true(spread >= prev)
      prev = spread
    end
  end)
end)

describe("tag filters", function()
  it("client side: exact match against tagsSet; everything for '*'", function()
    local s = build("T", "TagA || TagB")
    assert.are.equal(1, lib.rmq_sub_match_tags(s, "TagA", 4))
    assert.are.equal(1, lib.rmq_sub_match_tags(s, "TagB", 4))
    assert.are.equal(0, lib.rmq_sub_match_tags(s, "TagC", 4))
    assert.are.equal(0, lib.rmq_sub_match_tags(s, "TagA ", 5))
    assert.are.equal(0, lib.rmq_sub_match_tags(s, nil, 0)) -- no TAGS property
    local all = build("T", "*")
    assert.are.equal(1, lib.rmq_sub_match_tags(all, "x", 1))
    assert.are.equal(1, lib.rmq_sub_match_tags(all, nil, 0))
    local star = build("T", "TagA || *") -- '*' is an ordinary tag here
    assert.are.equal(0, lib.rmq_sub_match_tags(star, "TagC", 4))
    assert.are.equal(1, lib.rmq_sub_match_tags(star, "*", 1))
  end)

  it("broker side: codeSet contains (int) tagsCode, '*' and null codes pass", function()
    local s = build("T", "TagA")
    assert.are.equal(1, lib.rmq_sub_match_code(s, 1, 2598919))
    assert.are.equal(0, lib.rmq_sub_match_code(s, 1, 2598920))
    assert.are.equal(1, lib.rmq_sub_match_code(s, 0, 0))
    assert.are.equal(1, lib.rmq_sub_match_code(build("T", "*"), 1, 12345))
    -- " " subscribes to nothing at the broker
    assert.are.equal(0, lib.rmq_sub_match_code(build("T", " "), 1, 0))
  end)

  it("uses the tag vectors' broker tags codes", function()
    local n = 0
    for _, t in ipairs(vec.tags) do
      local raw = helpers.fromhex(t.utf8Hex)
      if #raw > 0 and not raw:find("||", 1, true) and not raw:find("^%s") and not raw:find("%s$")
         and raw ~= "*" and not raw:find("%z") then
        local s = build("T", raw)
        assert.are.equal(1, s.n_tags, t.utf8Hex)
        assert.are.equal(t.hashCode, s.codes[0], t.utf8Hex)
        assert.are.equal(1, lib.rmq_sub_match_code(s, 1, t.hashCode))
        n = n + 1
      end
    end
    assert.is_true(n >= 20)
  end)
end)
