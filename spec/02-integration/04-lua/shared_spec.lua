-- Shared dictionaries under `rmqlua run` with 20 consume threads against the development
-- broker: incr totals exact (the shared total equals the sum of every thread's own count), add
-- succeeds once per key, a TTL set in init expires, and a small dictionary evicts at its size
-- limit (forcible seen, the newest key kept, the oldest gone, the size never passed).
local helpers = require "helpers"
local R = require "02-integration.04-lua.runner"

describe("shared dictionaries across 20 consume threads", function()
  R.broker_fixture("--delay-scale 0.01")

  it("count exactly, add once, expire and evict at the limit", function()
    local N, KEYS = 3000, 100
    R.fill_topic("SharedTopic", 8, N, "")
    local script = R.write("shared20.lua", 'local rmq = require "rmq"\nlocal mine = 0\n'
      .. R.head("shared_group", "SharedTopic", 20) .. [[
  shared = { counters = "1m", seen = "1m", lru = "8k" },
  init = function(ctx)
    rmq.shared.counters:incr("inits", 1, 0)
    if ctx.thread_index == 1 then rmq.shared.counters:set("short", "soon gone", 0.3) end
  end,
  consume = function(msgs, ctx)
    local c, seen, lru = rmq.shared.counters, rmq.shared.seen, rmq.shared.lru
    for i = 1, #msgs do
      local body = msgs[i].body
      if body == "probe" then
        local v, err = c:ttl("short")
        lru:set("lru-probe", string.rep("p", 100))
        print(string.format("probe short=%s ttl=%s err=%s inits=%d added=%d forcible=%d "
          .. "lru_keys=%d probe_kept=%s first_kept=%s free=%d",
          tostring(c:get("short")), tostring(v), tostring(err), c:get("inits"), c:get("added"),
          c:get("forcible") or 0, #lru:get_keys(0), tostring(lru:get("lru-probe") ~= nil),
          tostring(lru:get("lru-1") ~= nil), lru:free_space()))
      else
        mine = mine + 1
        local ok, err = seen:add("key-" .. (tonumber(body) % ]] .. KEYS .. [[), ctx.thread_index)
        if ok then c:incr("added", 1, 0) elseif err ~= "exists" then print("ADD ERROR " .. err) end
        local _, serr, forcible = lru:set("lru-" .. body, string.rep("x", 100))
        if serr then print("LRU ERROR " .. serr) end
        if forcible then c:incr("forcible", 1, 0) end
        if c:incr("total", 1, 0) == ]] .. N .. [[ then print("TOTAL REACHED") end
      end
    end
  end,
  shutdown = function(ctx)
    print(string.format("thread %d consumed %d total %d", ctx.thread_index, mine,
      rmq.shared.counters:get("total")))
  end,
}
]])
    local h = R.start(script)
    h.wait_for("TOTAL REACHED", "all messages counted")
    helpers.sleep(0.4) -- the TTL of 0.3 s set in init has passed
    R.produce("SharedTopic", "probe")
    h.wait_for("probe short=", "the probe")
    assert.are.equal(0, h.stop())
    local out = h.out()
    assert.are.equal(1, h.count("TOTAL REACHED"))
    assert.is_nil(out:find("ADD ERROR"))
    assert.is_nil(out:find("LRU ERROR"))
    -- Every thread's own count adds up to the shared total, which every shutdown saw.
    local sum, threads = 0, 0
    for t, n, total in out:gmatch("thread (%d+) consumed (%d+) total (%d+)") do
      threads = threads + 1
      sum = sum + tonumber(n)
      assert.are.equal(N, tonumber(total))
    end
    assert.are.equal(20, threads)
    assert.are.equal(N, sum)
    local p = out:match("probe ([^\n]*)")
    assert.matches("short=nil ttl=nil err=not found", p, 1, true)
    assert.matches("inits=20 added=" .. KEYS .. " ", p, 1, true)
    local forcible = tonumber(p:match("forcible=(%d+)"))
    local keys = tonumber(p:match("lru_keys=(%d+)"))
    assert.is_true(forcible > N / 2, p)
    -- 8 KiB holds only a few dozen entries of ~180 bytes; the newest is kept, the oldest gone.
    assert.is_true(keys >= 20 and keys <= 8192 / 100, p)
    assert.matches("probe_kept=true first_kept=false", p, 1, true)
    assert.is_true(tonumber(p:match("free=(%d+)")) >= 0)
  end)
end)
