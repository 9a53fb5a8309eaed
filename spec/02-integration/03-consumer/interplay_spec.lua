-- Where the engine's features meet: a hot reload, a rebalance, the consume timeout, the process
-- queue and the pool hand-over acting on the same queue at the same time. Each case is a path the
-- single-feature specs do not walk; `rmqlua run` runs against the development broker, and the
-- sanitizer build (the suite's ASan run) sees any use of freed memory.
local ffi = require "ffi"
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local timed = dofile(helpers.root .. "/spec/02-integration/03-consumer/timed.lua")
local lib = cons.lib


-- Who holds queue qid's lock of group/topic at broker 0 (its client id), or nil.
local owner_buf = ffi.new("char[256]")
local function lock_owner(db, group, topic, qid)
  local n = lib.rmq_devbroker_lock_owner(db, 0, group, topic, qid, owner_buf, 256)
  return n >= 0 and ffi.string(owner_buf, n) or nil
end

-- Queue 1's lock, granted late to a queue revoked meanwhile, must come back within 10 s.
local function assert_lock_given_back(db, group, topic, h)
  pcall(helpers.wait_until, function() return lock_owner(db, group, topic, 1) == nil end, 10,
    "the lock given back")
  local held = lock_owner(db, group, topic, 1)
  assert.is_nil(held, "queue 1's broker lock is still held by " .. tostring(held) ..
    " after its revocation:\n" .. h.out())
end

local function no_sanitizer_report(out)
  assert.is_nil(out:find("AddressSanitizer", 1, true), "the sanitizer reported:\n" .. out)
  assert.is_nil(out:find("runtime error:", 1, true), "UBSan reported:\n" .. out)
end

-- `rmqlua run script` in the background: pid, log file, and the exit code once it exited.
local function run(script, log)
  local rc = log .. ".rc"
  local pid = helpers.spawn(string.format("%s run %s", helpers.bin, helpers.shq(script)),
    { log = log, rc = rc })
  local h = { pid = pid, log = log }
  function h.out() return cons.read(log) end
  -- Wait for fn() (a condition on the script's own output) while the process runs; an exit
  -- meanwhile fails at once, with the log.
  function h.wait_until(fn, what, timeout)
    helpers.wait_until(function()
      if fn() then return true end
      local f = io.open(rc)
      if f then
        f:close()
        error("rmqlua run exited while waiting for " .. what .. ":\n" .. h.out(), 0)
      end
    end, timeout or 30, what .. " (log " .. log .. ")")
  end
  -- Wait for pattern in the log.
  function h.wait_for(pattern, what, timeout)
    h.wait_until(function() return h.out():find(pattern) end, what or pattern, timeout)
  end
  function h.signal(sig) os.execute(string.format("kill -%s %d 2>/dev/null", sig, pid)) end
  function h.exit_code()
    return helpers.wait_until(function()
      local f = io.open(rc)
      local v = f and f:read("*n")
      if f then f:close() end
      return v
    end, 60, "exit of rmqlua run (log " .. log .. ")")
  end
  function h.stop()
    h.signal("INT")
    return h.exit_code()
  end
  -- Stop it; it must exit 0 with no sanitizer report in its log.
  function h.stop_clean()
    local rc = h.stop()
    no_sanitizer_report(h.out())
    assert.are.equal(0, rc, h.out())
  end
  return h
end

-- Topic (2 queues, made on every broker of db) with a "slow" message on queue slow_q, consumed
-- by an orderly one-thread script of group (name server ns, files in dir) whose handler records
-- start/end of each body and holds the "slow" batch until the file `go` exists. Returns once
-- that batch started: the run's handle, the output file and the go file.
local function start_gated(db, ns, dir, group, topic, slow_q)
  lib.rmq_devbroker_create_topic(db, cons.ALL, topic, 2)
  cons.put(db, topic, slow_q, "slow")
  local out, go = dir .. "/out.txt", dir .. "/go"
  local script = timed.script(dir, { group = group, ns = ns, topic = topic, out = out,
    orderly = true, options = "consume_thread_min = 1, consume_thread_max = 1,",
    handler = string.format([[
    rec("start " .. msgs[1].body)
    if msgs[1].body == "slow" then
      while true do
        local f = io.open(%q)
        if f then f:close() break end
        sleep_ms(50)
      end
    end
    rec("end " .. msgs[1].body)
    ]], go) })
  local h = run(script, dir .. "/run.log")
  h.wait_until(function() return cons.read(out):find("start slow") end, "the slow batch")
  return h, out, go
end

local join_group = cons.join_group

describe("consumer engine interplay", function()
  local fx = cons.broker_fixture("--delay-scale 0.01")

  -- A queue revoked while its batch runs lives on (outside the queue table) until that batch
  -- comes back. A reload that changes the subscriptions meanwhile replaces the array its
  -- statistics pointed into: the batch's return must not touch the freed array.
  it("a reload that changes subscriptions while a revoked queue's batch still runs", function()
    local dir = helpers.tmpdir("interplay-subs")
    local TOPIC, GROUP = "IpSubsA", "g_ip_subs"
    lib.rmq_devbroker_create_topic(fx.db, cons.ALL, TOPIC, 2)
    lib.rmq_devbroker_create_topic(fx.db, cons.ALL, "IpSubsB", 1)
    -- Queue 1 is the one the second member will take: its only message is a slow one.
    cons.put(fx.db, TOPIC, 1, "slow")
    local out, revoked = dir .. "/out.txt", dir .. "/revoked.txt"
    local function version(extra_sub)
      return timed.script(dir, { group = GROUP, ns = fx.ns, topic = TOPIC, out = out,
        options = "consume_thread_min = 1, consume_thread_max = 1," .. extra_sub,
        hooks = string.format([[
  on_revoke = function(mqs)
    local f = assert(io.open(%q, "a"))
    for _, mq in ipairs(mqs) do f:write(mq.topic, " ", mq.queue_id, "\n") end
    f:close()
  end,]], revoked),
        handler = [[
    rec("start " .. msgs[1].body)
    if msgs[1].body == "slow" then sleep_ms(3000) end
    rec("end " .. msgs[1].body)
    ]] })
    end
    local script = version("")
    local h = run(script, dir .. "/run.log")
    h.wait_until(function() return cons.read(out):find("start slow") end, "the slow batch started")
    join_group(fx.db, GROUP, TOPIC)
    h.wait_until(function() return cons.read(revoked):find(TOPIC .. " 1") end, "queue 1 revoked")
    assert.is_nil(cons.read(out):find("end slow"), "the slow batch ended before the reload")
    -- The same file, one more subscription (the rest of the script unchanged).
    version([[ subscribe = { IpSubsA = "*", IpSubsB = "*" },]])
    h.signal("HUP")
    h.wait_for("reloaded .*reload 1", "the reload")
    assert.is_nil(cons.read(out):find("end slow"), "the slow batch ended before the reload")
    h.wait_until(function() return cons.read(out):find("end slow") end, "the slow batch ended")
    h.wait_for("consume thread%(s%) run .* now", "the new version running")
    helpers.sleep(0.5)
    h.stop_clean()
  end)

  -- A stop that comes while a reload waits for the previous version's running batch: the
  -- batches the previous version handed over (queued behind that batch) are consumed within
  -- await_termination_millis_when_shutdown, as they are by a stop without a reload, instead of
  -- waiting in threads that never start until the deadline returns them unconsumed.
  it("a stop while a reload waits for the previous version: the handed-over batches run", function()
    local dir = helpers.tmpdir("interplay-stop")
    local TOPIC, GROUP = "IpStop", "g_ip_stop"
    lib.rmq_devbroker_create_topic(fx.db, cons.ALL, TOPIC, 1)
    for _, body in ipairs({ "slow", "f1", "f2", "f3" }) do
      cons.put(fx.db, TOPIC, 0, body)
    end
    local out = dir .. "/out.txt"
    local script = timed.script(dir, { group = GROUP, ns = fx.ns, topic = TOPIC, out = out,
      options = "consume_thread_min = 1, consume_thread_max = 1, " ..
        "consume_message_batch_max_size = 1, await_termination_millis_when_shutdown = 20000,",
      handler = [[
    rec("start " .. msgs[1].body)
    if msgs[1].body == "slow" then sleep_ms(4000) end
    rec("end " .. msgs[1].body)
    ]] })
    local h = run(script, dir .. "/run.log")
    h.wait_until(function() return cons.read(out):find("start slow") end, "the slow batch started")
    h.signal("HUP")
    h.wait_for("reloaded .*reload 1", "the reload")
    local before = cons.read(out)
    assert.is_nil(before:find("end slow"), "the slow batch ended before the reload:\n" .. before)
    assert.is_nil(before:find("start f"), "a queued batch ran before the reload:\n" .. before)
    h.signal("INT")
    local rc = h.exit_code()
    local got = cons.read(out)
    no_sanitizer_report(h.out())
    assert.are.equal(0, rc, h.out())
    assert.truthy(got:find("end slow"), got)
    for _, body in ipairs({ "f1", "f2", "f3" }) do
      assert.truthy(got:find("end " .. body, 1, true),
        body .. " was not consumed before the stop ended:\n" .. got .. "\n" .. h.out())
    end
  end)

  -- A handler stuck in a C call past consume_timeout when its version is replaced: the retired
  -- version gives up on its thread (consume_timeout + 10 s after the reload) and its batch runs
  -- in the new version. The thread may still come back later, and then ends the batch it was
  -- given: that batch, and the messages its views point to, must still be there (the sanitizer
  -- build reports a use of freed memory otherwise), while the new version's result stands.
  it("a handler that comes back after its retired thread was given up on", function()
    local dir = helpers.tmpdir("interplay-abandon")
    local TOPIC, GROUP = "IpAbandon", "g_ip_abandon"
    lib.rmq_devbroker_create_topic(fx.db, cons.ALL, TOPIC, 1)
    cons.put(fx.db, TOPIC, 0, "stuck")
    local out = dir .. "/out.txt"
    local script = timed.script(dir, { group = GROUP, ns = fx.ns, topic = TOPIC, out = out,
      options = "consume_thread_min = 1, consume_thread_max = 1, consume_timeout_millis = 1000,"
        .. " shared = { d = '64k' },",
      handler = [[
    local run = rmq.shared.d:incr("runs", 1, 0)
    rec("start " .. msgs[1].body .. " " .. run)
    if run == 1 then
      sleep_ms(20000) -- a C call: no interrupt reaches it
      rec("late " .. msgs[1].body)
      error("came back late")
    end
    rec("end " .. msgs[1].body .. " " .. run)
    ]] })
    local h = run(script, dir .. "/run.log")
    h.wait_until(function() return cons.read(out):find("start stuck 1") end, "the stuck batch")
    h.signal("HUP")
    h.wait_for("reloaded .*reload 1", "the reload")
    h.wait_for("abandoning the thread", "the retired version giving up on its thread", 40)
    h.wait_until(function() return cons.read(out):find("end stuck 2") end,
      "the batch run by the new version", 40)
    h.wait_until(function() return cons.read(out):find("late stuck") end,
      "the stuck handler coming back", 40)
    h.wait_for("came back late", "the late failure logged", 20)
    helpers.sleep(0.5)
    h.stop_clean()
    helpers.wait_until(function() return cons.all_committed(fx.db, GROUP, TOPIC, 1) end, 10,
      "the offset committed past the batch")
  end)

  -- consume_orderly: a queue's batch handed to the pool while its broker lock was held waits for
  -- a thread (here behind a long batch of another queue). When the lock is lost meanwhile, the
  -- batch must not run when a thread takes it (ConsumeMessageOrderlyService.ConsumeRequest.run
  -- checks processQueue.isLocked() and not isLockExpired() when it runs, else
  -- tryLockLaterAndReconsume): it runs once the lock is held again.
  it("an orderly batch whose queue lost its lock while it waited for a thread", function()
    local dir = helpers.tmpdir("interplay-ordlock")
    local TOPIC, GROUP, LOCK = "IpOrdLock", "g_ip_ordlock", 41
    local h, out, go = start_gated(fx.db, fx.ns, dir, GROUP, TOPIC, 0)
    helpers.defer(function() lib.rmq_devbroker_clear_errors(fx.db) end)
    -- Queue 1's message comes while the only thread is busy: its batch waits in the pool.
    cons.put(fx.db, TOPIC, 1, "x")
    helpers.sleep(2 * helpers.scale)
    -- Every lock request fails from now on: the next round of locks (every 20 s) loses them.
    assert.equal(0, lib.rmq_devbroker_push_error(fx.db, cons.ALL, LOCK, 1, 100000))
    h.wait_for("IpOrdLock@[^ ]*#1: lock lost", "queue 1's lock lost", 40)
    assert.is_nil(cons.read(out):find("start x"), cons.read(out))
    io.open(go, "w"):close()
    h.wait_until(function() return cons.read(out):find("end slow") end, "the slow batch ended")
    h.wait_for("IpOrdLock@[^ ]*#1: not locked when a consume thread took its batch",
      "queue 1's batch given back unrun")
    helpers.sleep(1.5 * helpers.scale)
    assert.is_nil(cons.read(out):find("start x"),
      "queue 1's batch ran while its lock was lost:\n" .. cons.read(out) .. "\n" .. h.out())
    lib.rmq_devbroker_clear_errors(fx.db)
    h.wait_until(function() return cons.read(out):find("end x") end,
      "queue 1's batch once locked again", 30)
    h.stop_clean()
  end)

  -- consume_orderly: a queue is added once its broker lock is granted; a rebalance that revokes
  -- it while that LOCK_BATCH_MQ is still on its way drops the entry, and the lock granted
  -- afterwards must be given back (as RebalancePushImpl.removeUnnecessaryMessageQueue unlocks a
  -- queue that leaves), not kept at the broker until it expires, barring the new owner from it.
  it("an orderly queue revoked while its lock request is on its way", function()
    local dir = helpers.tmpdir("interplay-lockrevoke")
    local TOPIC, GROUP, LOCK = "IpLockRevoke", "g_ip_lockrevoke", 41
    lib.rmq_devbroker_create_topic(fx.db, cons.ALL, TOPIC, 2)
    lib.rmq_devbroker_reset_counts(fx.db)
    assert.equal(0, lib.rmq_devbroker_set_latency(fx.db, cons.ALL, LOCK, 500))
    helpers.defer(function() lib.rmq_devbroker_set_latency(fx.db, cons.ALL, LOCK, 0) end)
    local out = dir .. "/out.txt"
    local script = timed.script(dir, { group = GROUP, ns = fx.ns, topic = TOPIC, out = out,
      orderly = true, options = "consume_thread_min = 1, consume_thread_max = 1,",
      handler = [[ rec("msg " .. msgs[1].body) ]] })
    local h = run(script, dir .. "/run.log")
    -- The queues' first lock requests reach the broker (answered 500 ms later): a second member
    -- joins now, and takes queue 1.
    assert(lib.rmq_devbroker_wait(fx.db, cons.ALL, LOCK, 2, math.floor(20000 * helpers.scale)) >= 2,
      "the first lock requests")
    join_group(fx.db, GROUP, TOPIC)
    h.wait_for("IpLockRevoke@[^ ]*#1: revoked", "queue 1 revoked")
    -- The delayed requests are answered: queue 0's lock is granted, and queue 1's with it.
    helpers.wait_until(function() return lock_owner(fx.db, GROUP, TOPIC, 0) ~= nil end, 20,
      "queue 0 locked")
    h.wait_for("IpLockRevoke@[^ ]*#0: assigned", "queue 0 assigned")
    assert.truthy(lib.rmq_devbroker_count(fx.db, cons.ALL, LOCK) >= 3)
    assert_lock_given_back(fx.db, GROUP, TOPIC, h)
    h.stop_clean()
  end)

  -- The same when the lock is asked for again (tryLockLaterAndReconsume: the queue's lock was
  -- lost and its next batch waits for it) and the queue is revoked meanwhile.
  it("an orderly queue revoked while its lock is asked for again", function()
    local dir = helpers.tmpdir("interplay-relockrevoke")
    local TOPIC, GROUP, LOCK = "IpRelockRevoke", "g_ip_relockrevoke", 41
    local h, out, go = start_gated(fx.db, fx.ns, dir, GROUP, TOPIC, 1)
    helpers.defer(function()
      lib.rmq_devbroker_clear_errors(fx.db)
      lib.rmq_devbroker_set_latency(fx.db, cons.ALL, LOCK, 0)
    end)
    -- A second message of queue 1 waits in its process queue behind the running batch.
    cons.put(fx.db, TOPIC, 1, "m2")
    helpers.sleep(2 * helpers.scale)
    -- The next round of locks (every 20 s) fails: the locks are lost.
    assert.equal(0, lib.rmq_devbroker_push_error(fx.db, cons.ALL, LOCK, 1, 1))
    h.wait_for("IpRelockRevoke@[^ ]*#1: lock lost", "queue 1's lock lost", 40)
    -- Lock requests from now on are answered 500 ms late; the slow batch ends, queue 1's next
    -- batch asks for the lock again, and a second member joins while that request is on its way.
    lib.rmq_devbroker_reset_counts(fx.db)
    assert.equal(0, lib.rmq_devbroker_set_latency(fx.db, cons.ALL, LOCK, 500))
    io.open(go, "w"):close()
    assert(lib.rmq_devbroker_wait(fx.db, cons.ALL, LOCK, 1, math.floor(20000 * helpers.scale)) >= 1,
      "queue 1's lock asked for again")
    join_group(fx.db, GROUP, TOPIC)
    h.wait_for("IpRelockRevoke@[^ ]*#1: revoked", "queue 1 revoked")
    -- The delayed request is answered (the lock granted), then given back.
    helpers.sleep(1.5 * helpers.scale)
    assert_lock_given_back(fx.db, GROUP, TOPIC, h)
    h.stop_clean()
  end)

  -- The same for the periodic lock round (RebalanceImpl.lockAll, every 20 s): a queue revoked
  -- while that LOCK_BATCH_MQ is on its way gave its lock back at once (an unlock the broker
  -- handled before the delayed lock), and the grant that came afterwards must be given back
  -- too, not kept at the broker until it expires, barring the new owner from the queue.
  it("an orderly queue revoked while the periodic lock round is on its way", function()
    local dir = helpers.tmpdir("interplay-lockall")
    local TOPIC, GROUP, LOCK = "IpLockAll", "g_ip_lockall", 41
    lib.rmq_devbroker_create_topic(fx.db, cons.ALL, TOPIC, 2)
    local out = dir .. "/out.txt"
    local script = timed.script(dir, { group = GROUP, ns = fx.ns, topic = TOPIC, out = out,
      orderly = true, options = "consume_thread_min = 1, consume_thread_max = 1,",
      handler = [[ rec("msg " .. msgs[1].body) ]] })
    local h = run(script, dir .. "/run.log")
    helpers.defer(function() lib.rmq_devbroker_set_latency(fx.db, cons.ALL, LOCK, 0) end)
    h.wait_for("IpLockAll@[^ ]*#0: assigned", "queue 0 assigned")
    h.wait_for("IpLockAll@[^ ]*#1: assigned", "queue 1 assigned")
    -- From now on lock requests are answered 500 ms late: the next lock round (within 20 s) is
    -- on its way when a second member joins and takes queue 1.
    lib.rmq_devbroker_reset_counts(fx.db)
    assert.equal(0, lib.rmq_devbroker_set_latency(fx.db, cons.ALL, LOCK, 500))
    assert(lib.rmq_devbroker_wait(fx.db, cons.ALL, LOCK, 1, math.floor(30000 * helpers.scale)) >= 1,
      "the periodic lock round")
    join_group(fx.db, GROUP, TOPIC)
    h.wait_for("IpLockAll@[^ ]*#1: revoked", "queue 1 revoked")
    -- The delayed round is answered (queue 1's lock granted again), then given back.
    helpers.sleep(1.5 * helpers.scale)
    assert_lock_given_back(fx.db, GROUP, TOPIC, h)
    h.stop_clean()
  end)

  -- Two reloads in quick succession while the first version's handler runs: the second retires
  -- a version that never started (its threads wait for the first one), which hands what it
  -- was handed on to the third; then the first version finishes and the third runs. Every
  -- message is consumed exactly once and committed, and the stop that follows is clean.
  it("two reloads while a long handler runs: every batch once, the offset committed", function()
    local dir = helpers.tmpdir("interplay-twohup")
    local TOPIC, GROUP = "IpTwoHup", "g_ip_twohup"
    lib.rmq_devbroker_create_topic(fx.db, cons.ALL, TOPIC, 1)
    local bodies = { "slow", "f1", "f2", "f3", "f4" }
    for _, body in ipairs(bodies) do
      cons.put(fx.db, TOPIC, 0, body)
    end
    local out = dir .. "/out.txt"
    local script = timed.script(dir, { group = GROUP, ns = fx.ns, topic = TOPIC, out = out,
      options = "consume_thread_min = 1, consume_thread_max = 1, " ..
        "consume_message_batch_max_size = 1,",
      handler = [[
    rec("start " .. msgs[1].body)
    if msgs[1].body == "slow" then sleep_ms(3000) end
    rec("end " .. msgs[1].body)
    ]] })
    local h = run(script, dir .. "/run.log")
    h.wait_until(function() return cons.read(out):find("start slow") end, "the slow batch started")
    h.signal("HUP")
    h.wait_for("reloaded .*reload 1", "the first reload")
    h.signal("HUP")
    h.wait_for("reloaded .*reload 2", "the second reload")
    local before = cons.read(out)
    assert.is_nil(before:find("end slow"), "the slow batch ended before the reloads:\n" .. before)
    h.wait_until(function()
      local got = cons.read(out)
      for _, body in ipairs(bodies) do
        if not got:find("end " .. body .. "\n", 1, true) then return false end
      end
      return true
    end, "every batch consumed")
    helpers.wait_until(function() return cons.all_committed(fx.db, GROUP, TOPIC, 1) end, 20,
      "the offset committed past every message")
    local rc = h.stop()
    local got = cons.read(out)
    no_sanitizer_report(h.out())
    assert.are.equal(0, rc, h.out())
    for _, body in ipairs(bodies) do
      local n = select(2, got:gsub("start " .. body .. "\n", ""))
      assert.are.equal(1, n, body .. " ran " .. n .. " time(s):\n" .. got)
    end
  end)

  -- A stop right behind a reload (SIGHUP then SIGTERM at once: the stop usually comes while the
  -- new version is still being checked, and the reload is dropped; 'a stop while a reload
  -- waits' covers a stop after the switch): whichever version runs the queued batches, each
  -- runs once within await_termination_millis_when_shutdown, the offset is committed past
  -- them, and the process exits cleanly.
  it("a stop right behind a reload: every batch once, the offset committed", function()
    local dir = helpers.tmpdir("interplay-hupterm")
    local TOPIC, GROUP = "IpHupTerm", "g_ip_hupterm"
    lib.rmq_devbroker_create_topic(fx.db, cons.ALL, TOPIC, 1)
    local bodies = { "slow", "f1", "f2", "f3" }
    for _, body in ipairs(bodies) do
      cons.put(fx.db, TOPIC, 0, body)
    end
    local out = dir .. "/out.txt"
    local script = timed.script(dir, { group = GROUP, ns = fx.ns, topic = TOPIC, out = out,
      options = "consume_thread_min = 1, consume_thread_max = 1, " ..
        "consume_message_batch_max_size = 1, await_termination_millis_when_shutdown = 20000,",
      handler = [[
    rec("start " .. msgs[1].body)
    if msgs[1].body == "slow" then sleep_ms(2000) end
    rec("end " .. msgs[1].body)
    ]] })
    local h = run(script, dir .. "/run.log")
    h.wait_until(function() return cons.read(out):find("start slow") end, "the slow batch started")
    h.signal("HUP")
    h.signal("TERM")
    local rc = h.exit_code()
    local got = cons.read(out)
    no_sanitizer_report(h.out())
    assert.are.equal(0, rc, h.out())
    for _, body in ipairs(bodies) do
      local n = select(2, got:gsub("end " .. body .. "\n", ""))
      assert.are.equal(1, n, body .. " consumed " .. n .. " time(s):\n" .. got .. "\n" .. h.out())
    end
    assert.truthy(cons.all_committed(fx.db, GROUP, TOPIC, 1), "the offset committed:\n" .. h.out())
  end)
end)
