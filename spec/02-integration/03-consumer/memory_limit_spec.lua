-- lua_memory_limit_mb: a handler that allocates without bound fails its batch (which comes back
-- through %RETRY%) and gets a fresh Lua state on its thread; the process and every other
-- message carry on. A script whose state is over the limit once loaded is refused at start.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local TOPIC, N = "MemTopic", 40

describe("consumer: lua_memory_limit_mb", function()
  local fx = cons.broker_fixture("--topic " .. TOPIC .. ":2 --delay-scale 0.001")

  it("fails the batch that goes past it, makes that state anew and keeps consuming", function()
    local dir = helpers.tmpdir("mem")
    local group = "g_mem"
    cons.produce(fx.db, TOPIC, N, "m")
    local out = dir .. "/out.txt"
    -- One consume thread, so the state made anew is the one that every later message sees:
    -- a global set by init counts the states this thread has had. Message m7 allocates
    -- without bound on its first delivery (compiled by the JIT after a few rounds).
    local script = cons.script(dir, {group = group, ns = fx.ns, topic = TOPIC, out = out,
      extra = [[
  consume_thread_min = 1, consume_thread_max = 1, lua_memory_limit_mb = 16,
  max_reconsume_times = 3,
  init = function() STATES = (STATES or 0) + 1; rmq.log("info", "state init " .. STATES) end,
  shutdown = function() rmq.log("info", "state shutdown") end,]],
      body = [[
    local m = msgs[1]
    if m.body == "m7" and m.reconsume_times == 0 then
      local t, i = {}, 0
      while true do i = i + 1; t[i] = string.rep("x", 4096) .. i end
    end]]})
    local log = dir .. "/run.log"
    local pid = cons.spawn(script, log)
    helpers.wait_until(function()
      for _, r in ipairs(cons.records(out)) do
        if r.body == "m7" and r.rt == 1 then return true end
      end
    end, 60, "m7 consumed again (log " .. log .. ")")
    helpers.wait_until(function() return (cons.all_committed(fx.db, group, TOPIC, 2)) end, 30,
      "every offset committed (log " .. log .. ")")
    assert.is_true(cons.alive(pid))
    cons.stop(pid)
    assert.equal(0, cons.exit_code(log))
    -- Every message consumed; m7 twice (the failed first delivery recorded too), the others once.
    local seen = {}
    for _, r in ipairs(cons.records(out)) do seen[r.body] = (seen[r.body] or 0) + 1 end
    for i = 1, N do
      assert.equal(i == 7 and 2 or 1, seen["m" .. i], "deliveries of m" .. i)
    end
    local text = cons.read(log)
    assert.truthy(text:find("went past lua_memory_limit_mb 16", 1, true), text)
    assert.truthy(text:find("not enough memory", 1, true), text)
    -- The new state ran its init (in fresh globals: "1" again), then the old one its shutdown.
    local inits = select(2, text:gsub("state init 1", ""))
    assert.equal(2, inits, "init ran in the first state and in the one made anew")
    assert.is_nil(text:find("state init 2", 1, true), "a new state, not the old one's init again")
    assert.truthy(text:find("anew.-state init 1.-state shutdown"), text)
  end)

  it("takes effect in the states a reload (SIGHUP) makes", function()
    local dir = helpers.tmpdir("mem")
    local group, topic = "g_mem_reload", "MemReload"
    assert(lib.rmq_devbroker_create_topic(fx.db, 0, topic, 1) == 0)
    local out = dir .. "/out.txt"
    -- Version 2 sets the limit; its handler allocates 256 MiB for "big" (then returns, so
    -- without the limit that message would simply be consumed once).
    local function version(v, limit)
      local path = cons.script(dir, {name = "v" .. v, group = group, ns = fx.ns, topic = topic,
        out = out, extra = string.format("consume_thread_min = 1, consume_thread_max = 1, "
          .. "lua_memory_limit_mb = %d,", limit),
        body = [[
    local m = msgs[1]
    if m.body == "big" and m.reconsume_times == 0 then
      local t = {}
      for i = 1, 4096 do t[i] = string.rep("x", 65536) .. i end
    end]]})
      return path
    end
    local script = dir .. "/consumer.lua"
    assert(os.rename(version(1, 0), script))
    local log = dir .. "/run.log"
    local pid = cons.spawn(script, log)
    assert(lib.rmq_devbroker_produce(fx.db, 0, topic, 0, nil, nil, "first", 5) >= 0)
    helpers.wait_until(function() return cons.count_lines(out) >= 1 end, 30, "first consumed")
    assert(os.rename(version(2, 16), script))
    os.execute("kill -HUP " .. pid)
    helpers.wait_until(function() return cons.read(log):find("reloaded", 1, true) end, 30,
      "the reload (log " .. log .. ")")
    assert(lib.rmq_devbroker_produce(fx.db, 0, topic, 0, nil, nil, "big", 3) >= 0)
    helpers.wait_until(function()
      for _, r in ipairs(cons.records(out)) do
        if r.body == "big" and r.rt == 1 then return true end
      end
    end, 60, "big consumed again after the limit failed it (log " .. log .. ")")
    assert.truthy(cons.read(log):find("went past lua_memory_limit_mb 16", 1, true))
    cons.stop(pid)
    assert.equal(0, cons.exit_code(log))
  end)

  it("refuses to start when a state is over the limit once the script is loaded", function()
    local dir = helpers.tmpdir("mem")
    local script = cons.script(dir, {group = "g_mem2", ns = fx.ns, topic = TOPIC,
      out = dir .. "/out.txt",
      extra = [[
  consume_thread_min = 1, consume_thread_max = 1, lua_memory_limit_mb = 2,
  init = function() BIG = string.rep("y", 3 * 1024 * 1024) end,]]})
    local rc, out = helpers.run(helpers.bin .. " run " .. helpers.shq(script))
    assert.is_not.equal(0, rc)
    assert.truthy(out:find("not under lua_memory_limit_mb 2", 1, true), out)
    assert.truthy(out:find("init ran", 1, true), out)
  end)

  it("is checked like any option: 0..1048576", function()
    local rc, out = helpers.run(helpers.bin .. " check --set lua_memory_limit_mb=-1 " ..
      helpers.shq(helpers.root .. "/examples/hello.lua"))
    assert.equal(2, rc)
    assert.truthy(out:find("lua_memory_limit_mb", 1, true), out)
  end)
end)
