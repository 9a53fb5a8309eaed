-- recorder.lua: the consumer script of the reliability suite (scripts/reliability.sh). Every
-- delivery is appended to a record file before the handler returns, so missing messages and
-- duplicates can be counted exactly afterwards; the behaviour under test (slow, failing, stuck,
-- looping, allocating handlers) is chosen from the environment, so one script serves every
-- scenario. Options not set here come from `rmqlua run --set KEY=VALUE`.
--
-- Environment:
--   REL_OUT      record file (appended; one line per delivery, written in one call per batch)
--   REL_GROUP, REL_TOPIC, REL_TAGS (default "*"), REL_ORDERLY=1 (consume_orderly)
--   REL_LABEL    a word written in every record (which run of a scenario delivered it)
--   REL_MODE     ok (default) | fail10 | stuck | error | loop | alloc | downstream (see below)
--   REL_SLEEP_MS the handler sleeps this long per batch (in C, so it cannot be interrupted)...
--   REL_FAST     ...unless this file exists (looked at no more than every 200 ms)
--   REL_KEY      the key number the stuck/loop/alloc modes pick (first delivery only)
--   REL_RELEASE  the stuck handler blocks until this file exists (at most 600 s)
--   REL_DS_ADDR  (mode downstream) host:port of the service each message is sent to, one line
--                per message over an rmq.socket.tcp cosocket (kept alive), its echo awaited
--
-- Record line: msg_id key broker queue_id queue_offset reconsume_times unix_ms status label
-- store_topic, status one of: k consumed, f failed (RECONSUME_LATER), e raised an error,
-- s stuck (blocking), l looping, a allocating.
local rmq = require "rmq"
local clock = require "clock" -- beside this script; CLOCK_REALTIME, as the driver's clock
local now_ms, sleep_ms, exists = clock.now_ms, clock.sleep_ms, clock.exists

local out = assert(io.open(assert(os.getenv("REL_OUT"), "REL_OUT not set"), "a"))
out:setvbuf("no")
local mode = os.getenv("REL_MODE") or "ok"
local label = os.getenv("REL_LABEL") or "-"
local sleep = tonumber(os.getenv("REL_SLEEP_MS") or "0") or 0
local fast_file = os.getenv("REL_FAST")
local pick = tonumber(os.getenv("REL_KEY") or "-1")
local release = os.getenv("REL_RELEASE")

local fast, fast_checked = false, 0
local function pace()
  if sleep <= 0 or fast then return end
  if fast_file then
    local t = now_ms()
    if t - fast_checked >= 200 then
      fast_checked = t
      if exists(fast_file) then fast = true return end
    end
  end
  sleep_ms(sleep)
end

local fmt, concat, tonumber, tostring = string.format, table.concat, tonumber, tostring

local function keynum(m)
  local k = m.keys
  return k and tonumber(k:match("(%d+)$")) or -1
end

local function record(msgs, status_of)
  local t, ms = {}, now_ms()
  for i = 1, #msgs do
    local m = msgs[i]
    t[i] = fmt("%s %s %s %d %d %d %d %s %s %s\n", m.msg_id, (m.keys or "-"):gsub("%s", "_"), m.broker_name or "-",
      m.queue_id, tonumber(m.queue_offset), m.reconsume_times, ms,
      status_of(m), label, m.store_topic)
  end
  out:write(concat(t))
end

local function ok() return "k" end

local handler
if mode == "ok" then
  handler = function(msgs)
    pace()
    record(msgs, ok)
  end
elseif mode == "fail10" then
  -- Every message whose key number is a multiple of 10 fails, every time it comes.
  handler = function(msgs)
    pace()
    local failed = false
    record(msgs, function(m)
      if keynum(m) % 10 == 0 then failed = true return "f" end
      return "k"
    end)
    if failed then return rmq.RECONSUME_LATER end
  end
elseif mode == "error" then
  handler = function(msgs)
    record(msgs, function() return "e" end)
    error("reliability: this handler fails on every message")
  end
elseif mode == "stuck" or mode == "loop" or mode == "alloc" then
  local tag = mode:sub(1, 1)
  handler = function(msgs)
    pace()
    local hit = false
    for i = 1, #msgs do
      if keynum(msgs[i]) == pick and msgs[i].reconsume_times == 0 then hit = true end
    end
    if not hit then
      record(msgs, ok)
      return
    end
    record(msgs, function(m)
      return (keynum(m) == pick and m.reconsume_times == 0) and tag or "k"
    end)
    if mode == "stuck" then
      -- Blocked in C: no Lua hook can interrupt this.
      local deadline = now_ms() + 600000
      while not (release and exists(release)) and now_ms() < deadline do sleep_ms(100) end
    elseif mode == "loop" then
      local i = 0
      while true do i = i + 1 end -- compiled by the JIT: nothing in it can be interrupted
    else
      local t, i = {}, 0
      while true do
        i = i + 1
        t[i] = string.rep("x", 65536) .. i
      end
    end
  end
elseif mode == "downstream" then
  -- Each message goes to a service and counts as consumed once its answer came; a failed call
  -- (refused, reset, closed: OpenResty's errors) is recorded "f" and the batch retried later. A
  -- call that hangs is ended by consume_timeout (the batch is sent back, the coroutine ended).
  local host, dport = assert(os.getenv("REL_DS_ADDR"), "REL_DS_ADDR not set"):match("^(.+):(%d+)$")
  local function call(m)
    local s = rmq.socket.tcp()
    local done, err = s:connect(host, tonumber(dport))
    if done then done, err = s:send(m.msg_id .. "\n") end
    local answer
    if done then answer, err = s:receive() end
    if answer ~= "echo:" .. m.msg_id then
      s:close()
      return nil, err or ("unexpected answer " .. tostring(answer))
    end
    s:setkeepalive()
    return true
  end
  handler = function(msgs)
    pace()
    local failed
    for i = 1, #msgs do
      if not call(msgs[i]) then failed = true break end
    end
    record(msgs, failed and function() return "f" end or ok)
    if failed then return rmq.RECONSUME_LATER end
  end
else
  error("REL_MODE: unknown mode " .. mode)
end

local spec = {
  consumer_group = assert(os.getenv("REL_GROUP"), "REL_GROUP not set"),
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  subscribe = { [assert(os.getenv("REL_TOPIC"), "REL_TOPIC not set")] = os.getenv("REL_TAGS") or "*" },
}
if os.getenv("REL_ORDERLY") == "1" then
  spec.consume_orderly = handler
else
  spec.consume = handler
end
return spec
