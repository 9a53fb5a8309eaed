-- Orderly POP (issue 22): an orderly consumer whose client_rebalance is false asks the broker
-- for its assignment, pops each queue of a POP assignment with order=true and consumes its
-- messages in queue offset order one batch at a time, acks what succeeded, hands a suspended
-- batch and what follows it back to the broker (CHANGE_MESSAGE_INVISIBLETIME to the suspend
-- time) so that the same messages come back in order, and sends a message that reached
-- max_reconsume_times to the DLQ; against the development broker in 5.x mode, whose
-- PopMessageProcessor / ConsumerOrderInfoManager keep one batch per queue and group out.
local helpers = require "helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local lib = cons.lib

local POP, ACK, CHANGE_INVISIBLE = 200050, 200051, 200053
local LOCK_BATCH_MQ = 41
local ORDER_REVIVE_QID = "999" -- KeyBuilder.POP_ORDER_REVIVE_QUEUE

-- The broker's record of requests (extField, body), and setConsumeMode.
local ext, body, set_mode = cons.request_ext, cons.request_body, cons.set_mode

-- An orderly consumer script: its records go to out (cons.script's format), and each batch is
-- also appended, in one write, to the file shared (lines "<name> <queue id> <offset>"), so that
-- the order in which two consumers consumed shows in one file.
local function script(dir, name, group, ns, topic, out, shared, extra, handler)
  return cons.script(dir, { name = name, group = group, ns = ns, topic = topic, out = out,
    orderly = true,
    extra = "client_rebalance = false, consume_thread_min = 2, consume_thread_max = 2, " ..
      (extra or ""),
    body = string.format([[
      local sh = {}
      for i = 1, #msgs do
        sh[i] = fmt("%%s %%d %%d\n", %q, msgs[i].queue_id, tonumber(msgs[i].queue_offset))
      end
      local f = assert(io.open(%q, "a"))
      f:write(concat(sh))
      f:close()
      ]], name, shared) .. (handler or "") })
end

-- The records of the shared file: { name=, qid=, off= } in file order.
local function shared_records(path)
  local t = {}
  for _, l in ipairs(cons.lines(path)) do
    local name, q, o = l:match("^(%S+) (%d+) (%d+)$")
    if name then t[#t + 1] = { name = name, qid = tonumber(q), off = tonumber(o) } end
  end
  return t
end

describe("consumer: orderly POP (client_rebalance = false)", function()

  it("two consumers consume every queue in offset order, nothing missing", function()
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5op:4")
    set_mode(db, "T5op", "g5op", "POP")
    local dir = cons.tmpdir("pop-ord2")
    local shared = dir .. "/shared.txt"
    local outs, pids = { dir .. "/out1.txt", dir .. "/out2.txt" }, {}
    for i = 1, 2 do
      -- two messages per POP and a short handler: the queues' batches alternate between both
      pids[i] = cons.spawn(script(dir, "c" .. i, "g5op", ns, "T5op", outs[i], shared,
        "pop_batch_nums = 2,", "rmq.sleep(0.01)"), dir .. "/run" .. i .. ".log")
    end
    helpers.wait_until(function() return lib.rmq_devbroker_group_size(db, 0, "g5op") == 2 end,
      30, "two consumers registered")
    helpers.wait_until(function() return lib.rmq_devbroker_count(db, cons.ALL, POP) >= 8 end, 30,
      "both popping every queue")
    cons.fill_queues(db, "T5op", 4, 25)
    helpers.wait_until(function() return #shared_records(shared) >= 100 end, 60,
      "every message consumed")
    helpers.wait_until(function() return (cons.all_committed(db, "g5op", "T5op", 4)) end, 30,
      "the acks committed every queue")
    for i = 1, 2 do
      cons.stop(pids[i])
      assert.equal(0, cons.exit_code(dir .. "/run" .. i .. ".log"), "a clean stop")
    end
    -- per queue, strictly increasing offsets across both consumers, each message once
    local recs = shared_records(shared)
    assert.equal(100, #recs)
    local last, by = {}, {}
    for _, r in ipairs(recs) do
      assert.is_true(r.off > (last[r.qid] or -1), string.format("queue %d: offset %d after %s",
        r.qid, r.off, tostring(last[r.qid])))
      last[r.qid] = r.off
      by[r.name] = (by[r.name] or 0) + 1
    end
    assert.same({ [0] = 24, 24, 24, 24 }, last)
    assert.is_true((by.c1 or 0) > 0 and (by.c2 or 0) > 0, "both consumed: " ..
      tostring(by.c1) .. " and " .. tostring(by.c2))
    -- the bodies agree: q<queue>_<i> at offset i - 1
    for i = 1, 2 do
      for _, r in ipairs(cons.records(outs[i])) do
        assert.equal(string.format("q%d_%d", r.qid, r.off + 1), r.body)
        assert.equal(0, r.rt)
      end
    end
  end)

  it("pops with order=true, queue by queue, and acks with the order revive queue", function()
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5oq:2")
    set_mode(db, "T5oq", "g5oq", "POP")
    local dir = cons.tmpdir("pop-ordq")
    local shared, out = dir .. "/shared.txt", dir .. "/out.txt"
    cons.fill_queues(db, "T5oq", 2, 5)
    local pid = cons.spawn(script(dir, "c", "g5oq", ns, "T5oq", out, shared), dir .. "/run.log")
    helpers.wait_until(function() return #shared_records(shared) >= 10 end, 60,
      "every message consumed")
    helpers.wait_until(function() return lib.rmq_devbroker_count(db, cons.ALL, ACK) >= 10 end, 30,
      "every message acked")
    cons.stop(pid)
    assert.equal(0, cons.exit_code(dir .. "/run.log"), "a clean stop")
    -- what the broker received: PopMessageRequestHeader.order, one queue per POP
    local qids = {}
    local n = lib.rmq_devbroker_count(db, cons.ALL, POP)
    for i = 0, n - 1 do
      if ext(db, POP, i, "topic") == "T5oq" then
        assert.equal("true", ext(db, POP, i, "order"))
        qids[ext(db, POP, i, "queueId")] = true
      end
    end
    assert.same({ ["0"] = true, ["1"] = true }, qids)
    -- the acks' extraInfo names the order revive queue (the broker's POP answer's reviveQid)
    for i = 0, lib.rmq_devbroker_count(db, cons.ALL, ACK) - 1 do
      local f = {}
      for w in assert(ext(db, ACK, i, "extraInfo")):gmatch("%S+") do f[#f + 1] = w end
      assert.equal(ORDER_REVIVE_QID, f[4])
      assert.equal(f[8], ext(db, ACK, i, "offset"))
    end
    assert.equal(0, lib.rmq_devbroker_count(db, cons.ALL, CHANGE_INVISIBLE))
    -- no broker lock taken for the popped queues: the broker's order is the lock (the retry
    -- topic, assigned in PULL mode, is pulled and locked as for any orderly consumer)
    for i = 0, lib.rmq_devbroker_count(db, cons.ALL, LOCK_BATCH_MQ) - 1 do
      local b = assert(body(db, LOCK_BATCH_MQ, i))
      assert.is_nil(b:find('"topic":"T5oq"', 1, true), b)
    end
  end)

  it("hands a suspended message back: it and those after it come back in order", function()
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5os:2")
    set_mode(db, "T5os", "g5os", "POP")
    local dir = cons.tmpdir("pop-ords")
    local shared, out = dir .. "/shared.txt", dir .. "/out.txt"
    cons.fill_queues(db, "T5os", 2, 10)
    -- q0_5 fails its first three deliveries
    local pid = cons.spawn(script(dir, "c", "g5os", ns, "T5os", out, shared,
      "suspend_current_queue_time_millis = 300,",
      'if msgs[1].body == "q0_5" and msgs[1].reconsume_times < 3 then return rmq.SUSPEND end'),
      dir .. "/run.log")
    helpers.wait_until(function() return (cons.all_committed(db, "g5os", "T5os", 2)) end, 60,
      "both queues consumed and acked")
    cons.stop(pid)
    assert.equal(0, cons.exit_code(dir .. "/run.log"), "a clean stop")
    local seq, rts = {}, {}
    for _, r in ipairs(cons.records(out)) do
      if r.qid == 0 then
        seq[#seq + 1] = r.body
        if r.body == "q0_5" then rts[#rts + 1] = r.rt end
      end
    end
    assert.same({ "q0_1", "q0_2", "q0_3", "q0_4", "q0_5", "q0_5", "q0_5", "q0_5", "q0_6", "q0_7",
      "q0_8", "q0_9", "q0_10" }, seq)
    assert.same({ 0, 1, 2, 3 }, rts)
    -- the other queue went on, each message once, in order
    local other = {}
    for _, r in ipairs(cons.records(out)) do
      if r.qid == 1 then other[#other + 1] = r.body end
    end
    assert.same({ "q1_1", "q1_2", "q1_3", "q1_4", "q1_5", "q1_6", "q1_7", "q1_8", "q1_9",
      "q1_10" }, other)
    -- ChangeInvisibleTimeRequestHeader: the suspend time, for q0_5 first
    local n = lib.rmq_devbroker_count(db, cons.ALL, CHANGE_INVISIBLE)
    assert.is_true(n >= 3, "CHANGE_MESSAGE_INVISIBLETIME sent")
    for i = 0, n - 1 do
      assert.equal("300", ext(db, CHANGE_INVISIBLE, i, "invisibleTime"))
      assert.equal("0", ext(db, CHANGE_INVISIBLE, i, "queueId"))
      assert.is_true(tonumber(ext(db, CHANGE_INVISIBLE, i, "offset")) >= 4)
    end
    assert.equal("4", ext(db, CHANGE_INVISIBLE, 0, "offset"))
  end)

  it("sends a message that reached max_reconsume_times to the DLQ and goes on", function()
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5od:1 --delay-scale 0.001")
    set_mode(db, "T5od", "g5od", "POP")
    local dir = cons.tmpdir("pop-ordd")
    local shared, out = dir .. "/shared.txt", dir .. "/out.txt"
    cons.fill_queues(db, "T5od", 1, 6)
    local pid = cons.spawn(script(dir, "c", "g5od", ns, "T5od", out, shared,
      "suspend_current_queue_time_millis = 100, max_reconsume_times = 2,",
      'if msgs[1].body == "q0_3" then return rmq.SUSPEND end'), dir .. "/run.log")
    helpers.wait_until(function() return (cons.all_committed(db, "g5od", "T5od", 1)) end, 60,
      "the queue consumed and acked")
    helpers.wait_until(function()
      return lib.rmq_devbroker_max_offset(db, 0, "%DLQ%g5od", 0) >= 1
    end, 30, "q0_3 in the DLQ")
    cons.stop(pid)
    assert.equal(0, cons.exit_code(dir .. "/run.log"), "a clean stop")
    local seq = {}
    for _, r in ipairs(cons.records(out)) do seq[#seq + 1] = r.body .. "/" .. r.rt end
    -- delivered with the count 0, 1, 2; at 2 (= max_reconsume_times) it went to the DLQ
    assert.same({ "q0_1/0", "q0_2/0", "q0_3/0", "q0_3/1", "q0_3/2", "q0_4/2", "q0_5/2",
      "q0_6/2" }, seq)
    assert.equal(1, tonumber(lib.rmq_devbroker_max_offset(db, 0, "%DLQ%g5od", 0)))
  end)

  it("gives a killed consumer's batch to the other after the invisible time, in order", function()
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5ok:1")
    set_mode(db, "T5ok", "g5ok", "POP")
    local dir = cons.tmpdir("pop-ordk")
    local shared = dir .. "/shared.txt"
    local out1, out2 = dir .. "/out1.txt", dir .. "/out2.txt"
    cons.fill_queues(db, "T5ok", 1, 8)
    -- the first consumer never comes back from q0_3
    local pid1 = cons.spawn(script(dir, "c1", "g5ok", ns, "T5ok", out1, shared,
      "pop_invisible_time = 5000,", 'if msgs[1].body == "q0_3" then rmq.sleep(3600) end'),
      dir .. "/run1.log")
    helpers.wait_until(function()
      for _, r in ipairs(cons.records(out1)) do if r.body == "q0_3" then return true end end
    end, 30, "the first consumer stuck on q0_3")
    -- the second pops the queue too, and gets nothing while that batch is out
    local pid2 = cons.spawn(script(dir, "c2", "g5ok", ns, "T5ok", out2, shared,
      "pop_invisible_time = 5000,"), dir .. "/run2.log")
    helpers.wait_until(function() return lib.rmq_devbroker_group_size(db, 0, "g5ok") == 2 end,
      30, "two consumers registered")
    cons.stop(pid1, "KILL")
    helpers.wait_until(function() return (cons.all_committed(db, "g5ok", "T5ok", 1)) end, 60,
      "the queue consumed by the second")
    cons.stop(pid2)
    assert.equal(0, cons.exit_code(dir .. "/run2.log"), "a clean stop")
    local seq = {}
    for _, r in ipairs(shared_records(shared)) do seq[#seq + 1] = r.name .. ":" .. r.off end
    -- q0_1 .. q0_3 by the first; q0_3 again (delivered a second time) and the rest by the second
    assert.same({ "c1:0", "c1:1", "c1:2", "c2:2", "c2:3", "c2:4", "c2:5", "c2:6", "c2:7" }, seq)
    for _, r in ipairs(cons.records(out2)) do
      assert.is_true(r.rt >= 1, r.body .. " delivered again")
    end
  end)

  it("pulls in order, locked, what the broker assigns in PULL mode", function()
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5opl:4")
    local dir = cons.tmpdir("pop-ordpl")
    local shared, out = dir .. "/shared.txt", dir .. "/out.txt"
    cons.fill_queues(db, "T5opl", 4, 25)
    local pid = cons.spawn(script(dir, "c", "g5opl", ns, "T5opl", out, shared),
      dir .. "/run.log")
    helpers.wait_until(function() return #cons.records(out) >= 100 end, 60,
      "every message consumed")
    cons.stop(pid)
    assert.equal(0, cons.exit_code(dir .. "/run.log"), "a clean stop")
    local last = {}
    for _, r in ipairs(cons.records(out)) do
      assert.is_true(r.off > (last[r.qid] or -1), r.body .. " in order")
      last[r.qid] = r.off
    end
    assert.same({ [0] = 24, 24, 24, 24 }, last)
    assert.is_true(lib.rmq_devbroker_count(db, cons.ALL, 400 --[[QUERY_ASSIGNMENT]]) >= 1)
    assert.is_true(lib.rmq_devbroker_count(db, cons.ALL, LOCK_BATCH_MQ) >= 1)
    assert.is_true(lib.rmq_devbroker_count(db, cons.ALL, 11 --[[PULL_MESSAGE]]) >= 1)
    assert.equal(0, lib.rmq_devbroker_count(db, cons.ALL, POP))
  end)

  it("switches an orderly group from POP to PULL while consuming, queue order kept", function()
    local db, ns = cons.test_broker("--rocketmq-version 5 --topic T5osw:2")
    set_mode(db, "T5osw", "g5osw", "POP")
    local dir = cons.tmpdir("pop-ordsw")
    local shared, out = dir .. "/shared.txt", dir .. "/out.txt"
    local function put(from, to)
      for i = from, to do
        for q = 0, 1 do cons.put(db, "T5osw", q, string.format("q%d_%d", q, i)) end
      end
    end
    put(1, 20)
    local pid = cons.spawn(script(dir, "c", "g5osw", ns, "T5osw", out, shared,
      "pop_batch_nums = 4,"), dir .. "/run.log")
    helpers.wait_until(function() return #cons.records(out) >= 40 end, 60, "POP mode consumed")
    assert.is_true(lib.rmq_devbroker_count(db, cons.ALL, POP) >= 2)
    -- the next rebalance (within 20 s) revokes the POP queues, whose long polls are parked on
    -- the broker, and pulls the queues instead
    set_mode(db, "T5osw", "g5osw", "PULL")
    local function pulled()
      for i = 0, lib.rmq_devbroker_count(db, cons.ALL, 11 --[[PULL_MESSAGE]]) - 1 do
        if ext(db, 11, i, "topic") == "T5osw" then return true end
      end
    end
    helpers.wait_until(pulled, 60, "pulling the topic")
    put(21, 40)
    helpers.wait_until(function()
      local seen = {}
      for _, r in ipairs(cons.records(out)) do seen[r.body] = true end
      for i = 1, 40 do
        if not seen["q0_" .. i] or not seen["q1_" .. i] then return false end
      end
      return true
    end, 60, "everything consumed across the switch")
    cons.stop(pid)
    assert.equal(0, cons.exit_code(dir .. "/run.log"), "a clean stop")
    -- no first delivery before an earlier offset of its queue was consumed
    local first, last = {}, {}
    for _, r in ipairs(cons.records(out)) do
      if not first[r.body] then
        first[r.body] = true
        assert.is_true(r.off > (last[r.qid] or -1), string.format("queue %d: offset %d after %s",
          r.qid, r.off, tostring(last[r.qid])))
        last[r.qid] = r.off
      end
    end
    assert.same({ [0] = 39, 39 }, last)
  end)
end)
