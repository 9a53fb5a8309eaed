-- A consumer with a SQL92 subscription end to end against the development broker: what the
-- heartbeat and the pulls carry, CHECK_CLIENT_CONFIG at start, exactly the matching messages
-- consumed; and a broker without property filtering refusing it with its own message.
local ffi = require "ffi"
local helpers = require "helpers"
local rh = require "run_helpers"

local lib = require "devbroker_ffi"
lib.rmq_log_set_level(0) -- only errors: the transport logs every connection

local PULL, CHECK_CLIENT_CONFIG, GET_CONSUMER_CONNECTION_LIST = 11, 46, 203
local raw = require "rawclient"
local cjson = require "cjson"
local SELECTOR = "region = 'eu' AND amount > 100.0 OR vip = TRUE"

local function start_broker(args)
  local db, ns = rh.start_broker(args)
  helpers.defer(function() lib.rmq_devbroker_stop(db) end)
  return db, ns
end

local function script(dir, ns, out)
  return rh.write(dir, "sql_consumer.lua", string.format([[
local rmq = require "rmq"
local out = assert(io.open(%q, "a"))
out:setvbuf("no")
return {
  consumer_group = "sql_group",
  namesrv_addr = %q,
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  subscribe = { Orders = rmq.sql92(%q) },
  consume = function(msgs)
    local t = {}
    for i = 1, #msgs do t[i] = msgs[i].keys .. "\n" end
    out:write(table.concat(t))
  end,
}
]], out, ns, SELECTOR))
end

local lines = rh.file_lines

describe("SQL92 subscription", function()
  it("consumes exactly the messages the selector matches", function()
    local db, ns = start_broker("--enable-property-filter --topic Orders:4")
    local dir = helpers.tmpdir("sql92")
    -- 60 messages; the expected set is worked out here with Java's rules: amount compared as a
    -- double (absent: NULL, "n/a": the comparison throws), vip compared with Boolean.valueOf.
    local regions = { "eu", "us", "apac" }
    local expected = {}
    for i = 1, 60 do
      local region = regions[i % 3 + 1]
      local props = { "region\1" .. region }
      local amount
      if i % 7 == 0 then amount = nil
      elseif i % 11 == 0 then amount = "n/a"
      else amount = tostring((i * 37) % 300) .. ".5" end
      if amount then props[#props + 1] = "amount\1" .. amount end
      local vip = i % 13 == 0 and "true" or (i % 17 == 0 and "yes" or nil)
      if vip then props[#props + 1] = "vip\1" .. vip end
      local key = "o" .. i
      local ps = table.concat(props, "\2")
      assert(lib.rmq_devbroker_produce_props(db, 0, "Orders", -1, "TagA", key, ps, #ps, key, #key) >= 0)
      -- (region = 'eu' AND amount > 100.0) OR vip = TRUE; a throw anywhere: no match
      local threw = region == "eu" and amount == "n/a"
      local big = amount ~= nil and amount ~= "n/a" and tonumber(amount) > 100
      if not threw and ((region == "eu" and big) or vip == "true") then expected[key] = true end
    end
    local nexp = 0
    for _ in pairs(expected) do nexp = nexp + 1 end
    assert.is_true(nexp > 5 and nexp < 60)

    local out = dir .. "/consumed"
    local path = script(dir, ns, out)
    local pid = helpers.spawn(helpers.bin .. " run " .. helpers.shq(path), { log = dir .. "/log" })
    helpers.wait_until(function() return #lines(out) >= nexp end, 60, nexp .. " messages consumed")
    -- nothing else arrives (the broker filtered it out)
    helpers.sleep(1)
    -- the heartbeat carried the selector as Java's SubscriptionData (GET_CONSUMER_CONNECTION_LIST
    -- shows what the broker registered)
    local c = assert(raw.connect(ffi.string(lib.rmq_devbroker_broker_addr(db, 0))))
    helpers.defer(function() c:close() end)
    local r = assert(c:request(GET_CONSUMER_CONNECTION_LIST, { consumerGroup = "sql_group" }))
    assert.are.equal(0, r.code, r.remark)
    local sub = cjson.decode(r.body).subscriptionTable.Orders
    assert.are.equal("SQL92", sub.expressionType)
    assert.are.equal(SELECTOR, sub.subString)
    assert.are.same({}, sub.tagsSet)
    assert.are.same({}, sub.codeSet)
    helpers.kill(pid, "TERM")
    local got = {}
    for _, k in ipairs(lines(out)) do
      assert.is_true(expected[k], "consumed " .. k .. ", which the selector rejects")
      assert.is_nil(got[k], k .. " consumed twice")
      got[k] = true
    end
    for k in pairs(expected) do assert.is_true(got[k], k .. " was not consumed") end

    -- the wire: CHECK_CLIENT_CONFIG before consuming, pulls with expressionType SQL92
    assert.is_true(lib.rmq_devbroker_count(db, 0, CHECK_CLIENT_CONFIG) >= 1)
    local buf = ffi.new("char[256]")
    local found = false
    for i = 0, lib.rmq_devbroker_count(db, 0, PULL) - 1 do
      if lib.rmq_devbroker_request_ext(db, 0, PULL, i, "topic", buf, 256) >= 0 and
          ffi.string(buf) == "Orders" then
        assert(lib.rmq_devbroker_request_ext(db, 0, PULL, i, "expressionType", buf, 256) >= 0)
        assert.are.equal("SQL92", ffi.string(buf))
        found = true
      end
    end
    assert.is_true(found, "no pull of Orders recorded")
  end)

  it("is refused by a broker without property filtering, with the broker's message", function()
    local db, ns = start_broker("--topic Orders:2")
    local key = "o1"
    local ps = "region\1eu\2amount\1500"
    assert(lib.rmq_devbroker_produce_props(db, 0, "Orders", 0, nil, key, ps, #ps, key, #key) >= 0)
    local dir = helpers.tmpdir("sql92-refused")
    local out = dir .. "/consumed"
    local path = script(dir, ns, out)
    local rc, log = helpers.run(string.format("timeout %d %s run %s",
      math.floor(60 * helpers.scale), helpers.bin, helpers.shq(path)))
    assert.are.equal(1, rc, log)
    assert.matches("CODE: 1  DESC: The broker does not support consumer to filter message by SQL92",
      log, 1, true)
    assert.are.equal(0, #lines(out))
    assert.are.equal(0, lib.rmq_devbroker_count(db, 0, PULL))
  end)
end)
