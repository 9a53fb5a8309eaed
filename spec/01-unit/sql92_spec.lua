-- SQL92 selectors (runtime/protocol/sql92.c): the grammar table of spec/fixtures/sql92/cases.json --
-- Java's ExpressionTest/ParserTest cases and cases read off the 4.9.4 classes (null rules, type
-- mismatches, compile-time checks) -- evaluated through the exported C functions.
local ffi = require "ffi"
local helpers = require "helpers"
local cjson = require "cjson"

local lib = helpers.lib()
pcall(ffi.cdef, [[
typedef struct rmq_sql92 rmq_sql92_t;
rmq_sql92_t *rmq_sql92_compile(const char *expr, char *errstr, size_t errstr_size);
int rmq_sql92_eval(const rmq_sql92_t *e, const char *props, size_t props_len, char *errstr,
                   size_t errstr_size);
void rmq_sql92_free(rmq_sql92_t *e);
int rmq_sql92_ignored(const rmq_sql92_t *e);
size_t rmq_sql92_to_string(const rmq_sql92_t *e, char *out, size_t out_size);
]])

local NAMES = { [0] = "FALSE", "TRUE", "NULL", "ERROR" }

-- name\1value\2... in sorted name order (the order does not matter to the evaluation).
local function props_string(t)
  local names = {}
  for k in pairs(t) do names[#names + 1] = k end
  table.sort(names)
  local out = {}
  for _, k in ipairs(names) do out[#out + 1] = k .. "\1" .. t[k] end
  return table.concat(out, "\2")
end

local function compile(expr)
  local err = ffi.new("char[1024]")
  local e = lib.rmq_sql92_compile(expr, err, 1024)
  if e == nil then return nil, ffi.string(err) end
  return ffi.gc(e, lib.rmq_sql92_free)
end

local function eval(e, props)
  local err = ffi.new("char[1024]")
  local s = props_string(props or {})
  local r = lib.rmq_sql92_eval(e, s, #s, err, 1024)
  return NAMES[r], ffi.string(err)
end

describe("SQL92 selector", function()
  local doc = helpers.json_fixture("sql92/cases.json")

  it("has the fixture's cases", function()
    assert.is_true(#doc.cases > 100)
  end)

  for i, c in ipairs(doc.cases) do
    local label = string.format("#%d %s %s -> %s (%s)", i, c.expr:gsub("\n", "\\n"),
      c.props ~= nil and c.props ~= cjson.null and cjson.encode(c.props) or "", c.expect, c.source)
    it(label, function()
      local e, err = compile(c.expr)
      if c.expect == "INVALID" then
        assert.is_nil(e, "compiled, but Java's SelectorParser.parse throws")
        assert.matches(c.error, err, 1, true)
        return
      end
      assert.is_not_nil(e, err)
      assert.are.equal(c.ignored or -1, lib.rmq_sql92_ignored(e))
      if c.expect == "VALID" then return end
      local got, eerr = eval(e, c.props ~= cjson.null and c.props or {})
      assert.are.equal(c.expect, got, eerr)
      if c.error then assert.matches(c.error, eerr, 1, true) end
    end)
  end

  it("prints the tree like Java's toString", function()
    local e = assert(compile("a=3 and b<>4 And c>5 AND d<=4"))
    local buf = ffi.new("char[256]")
    lib.rmq_sql92_to_string(e, buf, 256)
    assert.are.equal("((((a == 3) && (NOT (b == 4))) && (c > 5)) && (d <= 4))", ffi.string(buf))
    -- ParserTest.testEquals: blanks do not matter, OR is another tree
    local e2 = assert(compile("a=3  and    b<>4 And c>5 AND d<=4"))
    local buf2 = ffi.new("char[256]")
    lib.rmq_sql92_to_string(e2, buf2, 256)
    assert.are.equal(ffi.string(buf), ffi.string(buf2))
  end)

  it("refuses a huge float literal (ParserTest.testParse_floatOverFlow)", function()
    local digits = ("1"):rep(2048 * 51)
    local e, err = compile("a > 1" .. digits .. "." .. digits)
    assert.is_nil(e)
    assert.matches("is greater than 1.7976931348623157E308", err, 1, true)
  end)

  it("refuses nesting deeper than its limit instead of exhausting the stack", function()
    local e, err = compile(("("):rep(5000) .. "a = 1" .. (")"):rep(5000))
    assert.is_nil(e)
    assert.matches("nested more than", err, 1, true)
    e, err = compile(("NOT "):rep(5000) .. "a")
    assert.is_nil(e)
    assert.matches("nested more than", err, 1, true)
    local chain = {}
    for i = 1, 3000 do chain[i] = "a = " .. i end
    e, err = compile(table.concat(chain, " OR "))
    assert.is_nil(e)
    assert.matches("nested more than", err, 1, true)
    -- within the limit: a long chain evaluates
    chain = {}
    for i = 1, 900 do chain[i] = "a = " .. i end
    e = assert(compile(table.concat(chain, " OR ")))
    assert.are.equal("TRUE", (eval(e, { a = "900" })))
  end)

  it("looks properties up with Java's rules: the last duplicate wins", function()
    local e = assert(compile("a = 'y'"))
    local err = ffi.new("char[64]")
    local s = "a\1x\2a\1y"
    assert.are.equal(1, lib.rmq_sql92_eval(e, s, #s, err, 64))
    s = "a\1y\2a\1x"
    assert.are.equal(0, lib.rmq_sql92_eval(e, s, #s, err, 64))
  end)
end)
