-- rmq.shared (lua/rmq/shared.lua over runtime/luahost/shdict.c) under plain LuaJIT: the methods and
-- return values of OpenResty's ngx.shared.DICT, argument errors, strings larger than the
-- module's buffer, LRU eviction with forcible, `get` of a number allocating nothing, and the
-- script's `shared = { ... }` declaration with its errors at file:line.
local helpers = require "helpers"
helpers.lib()
local rmq = require "rmq"
local shared = require "rmq.shared"
local script = require "rmq.script"

local seq = 0
local function dict(size)
  seq = seq + 1
  local name = "d" .. seq
  assert(shared.declare({ { name = name, size = size or 1024 * 1024, line = 1 } }))
  return rmq.shared[name]
end

describe("rmq.shared dictionaries", function()
  it("set / get / add / replace / delete with ngx.shared.DICT's return values", function()
    local d = dict()
    assert.are.same({ true, nil, false }, { d:set("a", 1) })
    assert.are.equal(1, d:get("a"))
    assert.is_nil(d:get("missing"))
    assert.are.same({ false, "exists", false }, { d:add("a", 2) })
    assert.are.same({ true, nil, false }, { d:add("b", "x") })
    assert.are.same({ false, "not found", false }, { d:replace("c", 1) })
    assert.are.same({ true, nil, false }, { d:replace("b", true) })
    assert.is_true(d:get("b"))
    assert.are.same({ true, nil, false }, { d:set("f", false) })
    assert.is_false(d:get("f"))
    assert.is_true((d:delete("a")))
    assert.is_nil(d:get("a"))
    -- set with nil deletes too; user flags come back as a second value when not 0
    d:set("b", nil)
    assert.is_nil(d:get("b"))
    d:set("fl", "v", 0, 7)
    assert.are.same({ "v", 7 }, { d:get("fl") })
    -- numeric keys are strings
    d:set(12, "twelve")
    assert.are.equal("twelve", d:get("12"))
  end)

  it("incr like ngx.shared.DICT: not found, init, init_ttl, not a number", function()
    local d = dict()
    assert.are.same({ nil, "not found" }, { d:incr("n", 1) })
    assert.are.same({ 11, nil, false }, { d:incr("n", 1, 10) })
    assert.are.same({ 13 }, { d:incr("n", 2) })
    assert.are.equal(12.5, d:incr("n", -0.5))
    d:set("s", "text")
    assert.are.same({ nil, "not a number" }, { d:incr("s", 1) })
    assert.are.equal(5, d:incr("c", "2", "3"))
    assert.has_error(function() d:incr("n", "x") end, "cannot convert 'value' to number")
    assert.has_error(function() d:incr("n", 1, nil, 1) end,
      'must provide "init" when providing "init_ttl"')
    assert.are.same({ 1, nil, false }, { d:incr("t", 1, 0, 0.05) })
    local ttl = d:ttl("t")
    assert.is_true(ttl > 0 and ttl <= 0.05)
  end)

  it("ttl, expire, get_stale, flush_all, flush_expired and get_keys", function()
    local d = dict()
    d:set("forever", 1)
    d:set("short", 2, 0.05 * helpers.scale)
    assert.are.equal(0, d:ttl("forever"))
    assert.are.same({ nil, "not found" }, { d:ttl("none") })
    assert.are.same({ nil, "not found" }, { d:expire("none", 1) })
    helpers.sleep(0.06 * helpers.scale + 0.01)
    assert.is_nil(d:get("short"))
    assert.are.same({ 2, nil, true }, { d:get_stale("short") })
    assert.are.same({ 1, nil, false }, { d:get_stale("forever") })
    assert.are.same({ "forever" }, d:get_keys())
    assert.is_true(d:expire("forever", 10))
    local ttl = d:ttl("forever")
    assert.is_true(ttl > 9 and ttl <= 10)
    assert.is_true(d:expire("forever", 0))
    assert.are.equal(0, d:ttl("forever"))
    for i = 1, 1100 do d:set("k" .. i, i) end
    assert.are.equal(1024, #d:get_keys())
    assert.are.equal(1101, #d:get_keys(0))
    assert.are.equal(5, #d:get_keys(5))
    assert.are.equal("k1100", d:get_keys(1)[1]) -- most recently used first
    d:flush_all()
    assert.are.same({}, d:get_keys(0))
    assert.is_nil(d:get("k1"))
    assert.are.equal(10, d:flush_expired(10))
    assert.is_true(d:flush_expired() >= 1091) -- the rest (a store may have reused an expired one)
    assert.are.equal(0, d:flush_expired())
    assert.are.equal(d:capacity(), d:free_space())
  end)

  it("returns strings of any size, and values keep their type", function()
    local d = dict()
    local big = string.rep("0123456789", 1000) -- larger than the module's 4 KiB buffer
    assert.is_true((d:set("big", big)))
    assert.are.equal(big, d:get("big"))
    assert.are.equal(big, d:get("big")) -- the buffer path is taken twice without leaking
    d:set("empty", "")
    assert.are.equal("", d:get("empty"))
    d:set("n", 1e300)
    assert.are.equal(1e300, d:get("n"))
  end)

  it("rejects bad keys, values and arguments the way ngx.shared.DICT does", function()
    local d = dict()
    assert.are.same({ nil, "nil key" }, { d:get(nil) })
    assert.are.same({ nil, "empty key" }, { d:set("", 1) })
    assert.are.same({ nil, "key too long" }, { d:get(string.rep("k", 65536)) })
    assert.are.same({ nil, "bad value type" }, { d:set("t", {}) })
    assert.has_error(function() d:set("k", 1, -1) end, 'bad "exptime" argument')
    assert.has_error(function() d:set("k", 1, 0, -1) end, 'bad "flags" argument')
    assert.has_error(function() d:expire("k") end, 'bad "exptime" argument')
    assert.has_error(function() d.get("k") end,
      'bad "zone" argument (call it as dict:method(...), with a colon)')
    assert.has_error(function() return rmq.shared.undeclared end,
      'rmq.shared.undeclared: no such shared dictionary (declare it in the script: shared = '
      .. '{ undeclared = "1m" })')
  end)

  it("evicts the least recently used entries at the size limit, with forcible = true", function()
    local d = dict(8192)
    local v = string.rep("v", 200)
    local first
    for i = 1, 200 do
      local ok, err, forcible = d:set(string.format("k%03d", i), v)
      assert.is_true(ok, err)
      if i == 2 then d:get("k001") end -- k001 becomes the most recently used
      if forcible and not first then first = i end
    end
    assert.is_truthy(first)
    local keys = d:get_keys(0)
    assert.are.equal(first - 1, #keys) -- as many as fit when the first eviction came
    assert.are.equal("k200", keys[1])
    assert.is_nil(d:get("k002"))
    assert.is_true(d:free_space() < 300)
    assert.are.same({ false, "no memory" }, { d:safe_set("safe", v) })
    assert.are.same({ false, "no memory" }, { d:safe_add("safe", v) })
    assert.are.same({ false, "no memory", false }, { d:set("huge", string.rep("x", 9000)) })
  end)

  it("get of a number allocates nothing on the Lua heap", function()
    local d = dict()
    d:set("n", 3)
    d:set("b", true)
    local function loop()
      local s = 0
      for _ = 1, 200000 do
        s = s + d:get("n")
        if d:get("b") then s = s + 1 end
      end
      return s
    end
    loop() -- compiled now
    collectgarbage()
    collectgarbage("stop")
    local before = collectgarbage("count")
    local s = loop()
    local grew = collectgarbage("count") - before
    collectgarbage("restart")
    assert.are.equal(800000, s)
    assert.is_true(grew < 1, string.format("grew by %.1f KiB", grew))
  end)
end)

describe("shared = { ... } in a script", function()
  local dir = helpers.file_tmpdir("shared")
  local function write(text)
    seq = seq + 1
    local path = dir .. "/s" .. seq .. ".lua"
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
    return path
  end

  it("declares each dictionary with its size", function()
    local path = write([[
return {
  consumer_group = "g",
  subscribe = { T = "*" },
  shared = { counters = "16m", seen = "64k", raw = 10000 },
  consume = function() end,
}
]])
    local spec = assert(script.try_load(path))
    assert.are.same({ { name = "counters", size = 16 * 1024 * 1024, line = 4 },
      { name = "raw", size = 10000, line = 4 }, { name = "seen", size = 65536, line = 4 } },
      spec.__shared)
    assert.are.equal(16 * 1024 * 1024, rmq.shared.counters:capacity())
    assert.are.equal(65536, rmq.shared.seen:capacity())
  end)

  it("names the line of a bad size or name", function()
    local path = write([[
return {
  consumer_group = "g",
  subscribe = { T = "*" },
  shared = {
    ok = "1m",
    tiny = "4k",
  },
  consume = function() end,
}
]])
    local spec, err, kind = script.try_load(path)
    assert.is_nil(spec)
    assert.are.equal("config", kind)
    assert.are.equal(path .. ":6: shared.tiny: size 4k is below the minimum of 8k (8192 bytes)",
      err)
    path = write([[
return {
  consumer_group = "g", subscribe = { T = "*" },
  shared = { c = "16 megabytes" },
  consume = function() end,
}
]])
    spec, err = script.try_load(path)
    assert.matches(":3: shared.c: bad size \"16 megabytes\"", err, 1, true)
    path = write([[
return {
  consumer_group = "g", subscribe = { T = "*" },
  shared = "1m",
  consume = function() end,
}
]])
    spec, err = script.try_load(path)
    assert.matches(":3: shared must be a table of name = size", err, 1, true)
  end)
end)
