-- rmq.testrun: `rmqlua test SCRIPT CASES`, offline: every case's messages go through the
-- script's handler exactly as in a consume thread (same dispatcher, same views, same return
-- contract), with no broker. The script's init runs once before the cases, shutdown after.
--
-- CASES is a Lua file returning a list of cases:
--   return {
--     { name = "accepts orders",
--       messages = {                      -- each message: every field is optional
--         { topic = "OrderTopic", tags = "TagA", keys = "k1", body = '{"id":1}',
--           properties = { a = "b" }, msg_id = "...", queue_id = 0, queue_offset = 10,
--           reconsume_times = 0, born_timestamp = 1700000000000, store_timestamp = ...,
--           broker_name = "broker-a", born_host = "10.0.0.1:1234", store_host = "..." },
--       },
--       expect = {                        -- every field is optional
--         status = "SUCCESS",             -- or RECONSUME_LATER, DLQ, SUSPEND, COMMIT
--         ack_index = 1,                  -- messages acknowledged (ctx.ack_index or all)
--         delay_level = 3,                -- ctx.delay_level
--         suspend_millis = 500,           -- ctx.suspend_millis (orderly SUSPEND)
--         error = "pattern",              -- the handler raised, message matching the pattern
--                                         -- (true: any error; false: none)
--         sent = { { topic = "Out", body = "...", tags = "T", keys = "k" } },  -- rmq.send
--       } },
--   }
-- Defaults: topic = the script's first subscribed topic, body = "", queue_offset = index - 1.
-- Returns the number of failed cases and prints one line per case.
local ffi = require "ffi"
local rmq = require "rmq"
local script = require "rmq.script"
local dispatch = require "rmq.dispatch"

local M = {}

local STATUS = { SUCCESS = rmq.SUCCESS, RECONSUME_LATER = rmq.RECONSUME_LATER, DLQ = rmq.DLQ,
  SUSPEND = rmq.SUSPEND, COMMIT = rmq.COMMIT }
local STATUS_NAME = {}
for k, v in pairs(STATUS) do STATUS_NAME[v] = k end

local function parse_host(s, out, v6flag)
  local a, b, c, d, port = s:match("^(%d+)%.(%d+)%.(%d+)%.(%d+):(%d+)$")
  if not a then error("host '" .. s .. "' is not a.b.c.d:port", 0) end
  out[0], out[1], out[2], out[3] = tonumber(a), tonumber(b), tonumber(c), tonumber(d)
  return tonumber(port)
end

local function i64(v)
  if v == nil then return 0 end
  if type(v) == "string" then return ffi.new("int64_t", tonumber(v)) end
  return v
end

-- Build n rmq_msg_t from case messages; anchor keeps the strings alive.
function M.build(msgs, default_topic, anchor)
  local n = #msgs
  local arr = ffi.new("rmq_msg_t[?]", math.max(n, 1))
  local ptrs = ffi.new("rmq_msg_t *[?]", math.max(n, 1))
  anchor[#anchor + 1] = arr
  anchor[#anchor + 1] = ptrs
  local function set(m, field, s)
    if s == nil then return end
    if type(s) ~= "string" then error("message field " .. field .. " must be a string", 0) end
    anchor[#anchor + 1] = s
    m[field] = s
    m[field .. "_len"] = #s
  end
  for i = 1, n do
    local c = msgs[i]
    if type(c) ~= "table" then error("messages[" .. i .. "] must be a table", 0) end
    local m = arr[i - 1]
    set(m, "topic", c.topic or default_topic)
    set(m, "tags", c.tags)
    set(m, "keys", c.keys)
    set(m, "body", c.body or "")
    set(m, "broker_name", c.broker_name or "broker-a")
    local props = {}
    local names = {}
    for k in pairs(c.properties or {}) do names[#names + 1] = k end
    table.sort(names)
    local uniq = c.msg_id or (c.properties and c.properties.UNIQ_KEY)
    if c.tags then props[#props + 1] = "TAGS\1" .. c.tags end
    if c.keys then props[#props + 1] = "KEYS\1" .. c.keys end
    if uniq and not (c.properties and c.properties.UNIQ_KEY) then
      props[#props + 1] = "UNIQ_KEY\1" .. uniq
    end
    for _, k in ipairs(names) do props[#props + 1] = k .. "\1" .. tostring(c.properties[k]) end
    set(m, "props", table.concat(props, "\2"))
    set(m, "uniq_key", uniq)
    m.queue_id = c.queue_id or 0
    m.queue_offset = i64(c.queue_offset or (i - 1))
    m.commit_log_offset = i64(c.commit_log_offset or 0)
    m.reconsume_times = c.reconsume_times or 0
    m.born_timestamp = i64(c.born_timestamp)
    m.store_timestamp = i64(c.store_timestamp)
    m.born_port = parse_host(c.born_host or "127.0.0.1:0", m.born_host)
    m.store_port = parse_host(c.store_host or "127.0.0.1:10911", m.store_host)
    ptrs[i - 1] = m
  end
  return ptrs, n
end

local function fmt(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

local function check_case(c, b, err, sends)
  local e = c.expect or {}
  local probs = {}
  local function want(what, got, exp)
    if exp ~= nil and got ~= exp then
      probs[#probs + 1] = what .. " " .. fmt(got) .. ", expected " .. fmt(exp)
    end
  end
  local st = STATUS_NAME[b.status] or tostring(b.status)
  local est = e.status
  if type(est) == "number" then est = STATUS_NAME[est] end
  want("status", st, est)
  want("ack_index", b.ack_count, e.ack_index)
  want("delay_level", b.delay_level, e.delay_level)
  if e.suspend_millis ~= nil then want("suspend_millis", tonumber(b.suspend_millis), e.suspend_millis) end
  if e.error == false or (e.error == nil and err) then
    if err then probs[#probs + 1] = "unexpected error: " .. err end
  elseif e.error == true then
    if not err then probs[#probs + 1] = "expected an error, the handler did not raise" end
  elseif type(e.error) == "string" then
    if not err then probs[#probs + 1] = "expected an error matching " .. fmt(e.error)
    elseif not err:find(e.error) then
      probs[#probs + 1] = "error " .. fmt(err:match("[^\n]*")) .. " does not match " .. fmt(e.error)
    end
  end
  if e.sent ~= nil then
    local got = sends or {}
    if #got ~= #e.sent then
      probs[#probs + 1] = "sent " .. #got .. " message(s), expected " .. #e.sent
    else
      for i, es in ipairs(e.sent) do
        for k, v in pairs(es) do
          local g = got[i][k]
          if k == "keys" and type(v) == "table" then v = table.concat(v, " ") end
          if g ~= v then
            probs[#probs + 1] = "sent[" .. i .. "]." .. k .. " " .. fmt(g) .. ", expected " .. fmt(v)
          end
        end
      end
    end
  end
  return probs
end

-- run(script_path, cases_path, out) -> failed, total. out(line) prints.
function M.run(script_path, cases_path, out)
  out = out or print
  local spec = script.load(script_path)
  local chunk, lerr = loadfile(cases_path)
  if not chunk then error(lerr, 0) end
  local ok, cases = pcall(chunk)
  if not ok then error(cases, 0) end
  if type(cases) ~= "table" then error(cases_path .. ": must return a list of cases", 0) end
  local d = dispatch.new(spec, { thread_index = 0, thread_count = 1,
    consumer_group = type(spec.consumer_group) == "string" and spec.consumer_group or nil })
  d.init()
  local default_topic = spec.__subscribe[1] and spec.__subscribe[1].topic or "TopicTest"
  local failed = 0
  for i, c in ipairs(cases) do
    local name = c.name or ("case " .. i)
    local anchor = {}
    local okb, ptrs, n = pcall(M.build, c.messages or {}, default_topic, anchor)
    if not okb then
      failed = failed + 1
      out("FAIL " .. name .. ": " .. tostring(ptrs))
    else
      local b = ffi.new("rmq_batch_t")
      b.msgs = ptrs
      b.n = n
      b.orderly = d.orderly and 1 or 0
      d.slot[0] = b
      local err, sends = d.dispatch()
      d.slot[0] = nil
      local probs = check_case(c, b, err, sends)
      if #probs == 0 then
        out("ok   " .. name)
      else
        failed = failed + 1
        out("FAIL " .. name .. ": " .. table.concat(probs, "; "))
      end
    end
  end
  d.shutdown()
  out(string.format("%d case(s), %d failed", #cases, failed))
  return failed, #cases
end

return M
