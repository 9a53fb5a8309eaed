-- rmq: the module consumer scripts require (`local rmq = require "rmq"`).
--
--   rmq.SUCCESS, rmq.RECONSUME_LATER, rmq.DLQ        return values of consume(msgs, ctx)
--   rmq.SUCCESS, rmq.SUSPEND, rmq.COMMIT             return values of consume_orderly(msgs, ctx)
--   rmq.log(level, ...)           level "error", "warn", "info" or "debug"; the other arguments
--                                 are joined with spaces (tostring each)
--   rmq.send(topic, body, opts)   forward a message from a handler; opts: tags, keys (string or
--                                 list), properties (flat table), delay_level. The message is
--                                 queued and sent by the runtime after the handler returns, only
--                                 when the batch succeeded; if the send fails the batch counts as
--                                 failed (RECONSUME_LATER).
--   rmq.sql92(expression)         a SQL92 selector for subscribe (MessageSelector.bySql):
--                                 subscribe = { Orders = rmq.sql92("region = 'eu'") } is
--                                 { type = "SQL92", expression = "region = 'eu'" }
--   rmq.role                      "consume", "control", "check" or "test"
--   rmq.shared.NAME               the shared dictionary NAME the script declared with
--                                 shared = { NAME = "16m" } (rmq.shared, ngx.shared.DICT-like)
--   rmq.pause(seconds)            from any hook: stop pulling for seconds (nothing, or
--                                 math.huge: until rmq.resume()); pulls in flight and cached
--                                 messages are still consumed. rmq.resume() pulls again at once.
--   rmq.stop()                    from any hook: shut the consumer down (like SIGTERM)
--   rmq.sleep(s), rmq.now(), rmq.thread.spawn/wait/kill   wait without holding the consume
--                                 thread (rmq.co); rmq.socket.tcp() cosockets (rmq.socket)
--   rmq.http.request{ method =, url =, headers =, body =, timeout = }   an HTTP/1.1 client on
--                                 cosockets (rmq.http)
--
-- One copy of this module lives in each Lua state; only rmq.shared's dictionaries are shared
-- between threads (they live in C, behind a mutex each).
local host = package.loaded["rmq.host"] or {}

local type, tostring, select, concat = type, tostring, select, table.concat

local rmq = {
  -- Consume statuses: the values of RMQ_CONSUME_* in rmqlua_ffi.h.
  SUCCESS = 0,
  RECONSUME_LATER = 1,
  DLQ = 2,
  SUSPEND = 3,
  COMMIT = 4,
  role = host.role or "lua",
  version = host.version,
}

-- rmq.shared is loaded when first used (it needs the runtime's FFI symbols); so are rmq.sleep,
-- now, thread (rmq.co), socket (rmq.socket) and http (rmq.http). rmq._lazy names them all, for what lists the
-- module's fields (pairs() does not see them before their first use).
local lazy_co = { sleep = true, now = true, thread = true }
rmq._lazy = { "shared", "sleep", "now", "thread", "socket", "http" }
setmetatable(rmq, { __index = function(t, k)
  if k == "shared" then
    local dicts = require("rmq.shared").dicts
    rawset(t, "shared", dicts)
    return dicts
  end
  if lazy_co[k] then
    local v = require("rmq.co")[k]
    rawset(t, k, v)
    return v
  end
  if k == "socket" or k == "http" then
    local v = require("rmq." .. k)
    rawset(t, k, v)
    return v
  end
end })

local LEVELS = { error = 0, warn = 1, info = 2, debug = 3 }
rmq.LOG_LEVELS = LEVELS

local host_log = host.log
local function write_log(lv, msg)
  if host_log then return host_log(lv, msg) end
  local names = { [0] = "ERROR", "WARN", "INFO", "DEBUG" }
  io.stderr:write("[", names[lv], "] lua: ", msg, "\n")
end

function rmq.log(level, ...)
  local lv = LEVELS[level]
  if lv == nil then
    error("rmq.log: unknown level " .. tostring(level) .. " (error, warn, info or debug)", 2)
  end
  local n = select("#", ...)
  local parts = {}
  for i = 1, n do parts[i] = tostring((select(i, ...))) end
  write_log(lv, concat(parts, " "))
end

-- rmq.pause / rmq.resume / rmq.stop: a request to the loop thread (runtime/consumer/flow.c). Without a
-- consumer (rmqlua test, check) the requests are recorded in rmq._requests.
local OPS = { pause = 1, resume = 2, stop = 3 }
rmq._requests = {}
local flow_ptr
local function request(op, seconds)
  local addr = host.flow
  if not addr or addr == 0 then
    local r = rmq._requests
    r[#r + 1] = { op = op, seconds = seconds }
    return true
  end
  local ffi = require "ffi"
  local C = require("rmq.core").C
  if flow_ptr == nil then flow_ptr = ffi.cast("rmq_flow_t *", addr) end
  local thread = host.role == "consume" and (host.thread_index or 0) + 1 or 0
  return C.rmq_flow_request(flow_ptr, OPS[op], seconds or 0, thread) == 0
end

function rmq.pause(seconds)
  -- not (x > 0) is also true of NaN, which x <= 0 is not.
  if seconds ~= nil and (type(seconds) ~= "number" or not (seconds > 0)) then -- luacheck: ignore 581
    error("rmq.pause: seconds must be a number > 0 (or nothing: until rmq.resume()), got "
      .. tostring(seconds), 2)
  end
  return request("pause", seconds)
end

function rmq.resume() return request("resume") end

function rmq.stop() return request("stop") end

-- MessageSelector.bySql: the selector table subscribe takes (checked when the script loads).
function rmq.sql92(expression)
  if type(expression) ~= "string" then
    error("rmq.sql92: the expression must be a string, got " .. type(expression), 2)
  end
  return { type = "SQL92", expression = expression }
end

-- Set by the dispatcher around a handler call: rmq.send is valid only then.
rmq._in_handler = false
rmq._sink = nil

local function check_str(v, what, level)
  if type(v) ~= "string" then
    error("rmq.send: " .. what .. " must be a string, got " .. type(v), level + 1)
  end
end

function rmq.send(topic, body, opts)
  if not rmq._in_handler then
    error("rmq.send: only valid inside consume/consume_orderly (messages are sent after the "
      .. "handler returns)", 2)
  end
  check_str(topic, "topic", 2)
  if topic == "" then error("rmq.send: topic is empty", 2) end
  check_str(body, "body", 2)
  local e = { topic = topic, body = body }
  if opts ~= nil then
    if type(opts) ~= "table" then error("rmq.send: opts must be a table, got " .. type(opts), 2) end
    for k in pairs(opts) do
      if k ~= "tags" and k ~= "keys" and k ~= "properties" and k ~= "delay_level" then
        error("rmq.send: unknown option '" .. tostring(k) .. "' (tags, keys, properties, delay_level)", 2)
      end
    end
    if opts.tags ~= nil then check_str(opts.tags, "opts.tags", 2); e.tags = opts.tags end
    local keys = opts.keys
    if type(keys) == "table" then
      for i = 1, #keys do check_str(keys[i], "opts.keys[" .. i .. "]", 2) end
      e.keys = concat(keys, " ")
    elseif keys ~= nil then
      check_str(keys, "opts.keys", 2); e.keys = keys
    end
    local props = opts.properties
    if props ~= nil then
      if type(props) ~= "table" then error("rmq.send: opts.properties must be a table", 2) end
      local buf = {}
      for k, v in pairs(props) do
        if type(k) ~= "string" or (type(v) ~= "string" and type(v) ~= "number" and type(v) ~= "boolean") then
          error("rmq.send: opts.properties must map strings to strings (bad entry " .. tostring(k) .. ")", 2)
        end
        local s = tostring(v)
        if k:find("[\1\2]") or s:find("[\1\2]") then
          error("rmq.send: property " .. k .. " contains a \\1 or \\2 byte", 2)
        end
        buf[#buf + 1] = k .. "\1" .. s
      end
      table.sort(buf)
      e.props = concat(buf, "\2")
    end
    local dl = opts.delay_level
    if dl ~= nil then
      if type(dl) ~= "number" or dl < 0 or dl % 1 ~= 0 then
        error("rmq.send: opts.delay_level must be a non-negative integer", 2)
      end
      e.delay_level = dl
    end
  end
  local sink = rmq._sink
  if not sink then sink = {}; rmq._sink = sink end
  sink[#sink + 1] = e
end

return rmq
