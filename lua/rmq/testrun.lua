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
--         delivered = 2,                  -- messages that pass the script's subscription and
--                                         -- reach the handler (a number, or the list of their
--                                         -- indexes in messages: { 1, 3 })
--         status = "SUCCESS",             -- or RECONSUME_LATER, DLQ, SUSPEND, COMMIT
--         ack_index = 1,                  -- messages acknowledged (ctx.ack_index or all)
--         delay_level = 3,                -- ctx.delay_level
--         suspend_millis = 500,           -- ctx.suspend_millis (orderly SUSPEND)
--         error = "pattern",              -- the handler raised, message matching the pattern
--                                         -- (true: any error; false: none)
--         sent = { { topic = "Out", body = "...", tags = "T", keys = "k" } },  -- rmq.send
--         pause = 5,                      -- the handler called rmq.pause(5) (true: rmq.pause()
--                                         -- without seconds; false: it did not call it)
--         resume = true, stop = true,     -- rmq.resume() / rmq.stop() called (false: not)
--         http = { "POST http://hook.example/x" },  -- the rmq.http requests made, "METHOD URL"
--                                         -- each, in order (or their number)
--       },
--       http = {                          -- rmq.http answers, without a network: by "METHOD URL"
--         ["POST http://hook.example/x"] = { status = 200, body = "ok", headers = { ... } },
--         ["GET http://hook.example/y"] = "timeout",          -- a string: nil, that error
--         ["GET http://hook.example/z"] = function(req) return { status = 503 } end,
--       },                                -- or one function(req) -> res | nil, err for all
--     },
--   }
-- With `http` in a case, every rmq.http.request of its handler is answered from it (req is the
-- request table, its method filled in), and a request it has no answer for raises "rmqlua test:
-- no http stub for METHOD URL (the case stubs: ...)". Without it, rmq.http is the real client.
-- Defaults: topic = the script's first subscribed topic, body = "", queue_offset = index - 1,
-- msg_id = a UNIQ_KEY of its own for every message ("7F000001" .. 8 zeros .. the case number and
-- the message number, 8 hex digits each; msg_id = false: none, the offset msg id is used),
-- commit_log_offset = a number of its own.
-- A SQL92 subscription filters the messages first, as the broker would: its selector is
-- evaluated over each message's properties (TAGS, KEYS and the `properties` table); only the
-- messages that pass reach the handler, and when none does the handler is not called (expect
-- then only `delivered`). Tag expressions do not filter here (a case may hand the handler any
-- tag, to test how it copes).
-- A case may stub the cosocket peers its handler talks to (no network):
--   peers = { ["127.0.0.1:6379"] = function(conn) ... end, ... }
-- While the case runs, every rmq.socket.tcp() connect goes to the function stubbed for its
-- "host:port" (a connect to any other fails with an error naming it), which runs as the peer of
-- that connection, in a coroutine of its own: conn:receive("*l" | "*a" | n) reads what the
-- handler sent (nil, "closed" once the handler closed), conn:send(data) answers, conn:close()
-- (or returning) closes the peer's side; conn.host, conn.port, conn.tls (true after the
-- handler's sslhandshake), conn.server_name. A peer that raises fails the case. The handler's
-- receive that waits for an answer the peer will not give returns nil, "timeout"; setkeepalive
-- keeps the connection (with its peer) for the next connect to the same pool in the case.
-- Instead of a function, a peer may be a script: a list of { sent, answer } steps, each the exact
-- bytes the handler must send next and what the peer answers (a mismatch fails the case, naming
-- the step, what was expected and what came); the peer closes after the last step.
-- Any other key (in a case, a message, expect or a sent entry) is an error naming the cases
-- file and line, as is a syntax error: run() returns nil and the message, before any case runs.
-- Otherwise run() returns the number of failed cases and prints one line per case.
local ffi = require "ffi"
local core = require "rmq.core"
local rmq = require "rmq"
local script = require "rmq.script"
local dispatch = require "rmq.dispatch"

local M = {}

local STATUS = { SUCCESS = rmq.SUCCESS, RECONSUME_LATER = rmq.RECONSUME_LATER, DLQ = rmq.DLQ,
  SUSPEND = rmq.SUSPEND, COMMIT = rmq.COMMIT }
local STATUS_NAME = {}
for k, v in pairs(STATUS) do STATUS_NAME[v] = k end

local function parse_host(s, out)
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

local KNOWN = {
  case = { "name", "messages", "expect", "http" },
  message = { "topic", "tags", "keys", "body", "properties", "msg_id", "queue_id", "queue_offset",
    "commit_log_offset", "reconsume_times", "born_timestamp", "store_timestamp", "broker_name",
    "born_host", "store_host" },
  expect = { "delivered", "status", "ack_index", "delay_level", "suspend_millis", "error", "sent",
    "pause", "resume", "stop", "http" },
  sent = { "topic", "body", "tags", "keys", "props", "delay_level" },
}
local KNOWN_SET = {}
for what, list in pairs(KNOWN) do
  KNOWN_SET[what] = {}
  for _, k in ipairs(list) do KNOWN_SET[what][k] = true end
end

-- ---- cosocket peer stubs (case.peers) ------------------------------------------------------
KNOWN.case[#KNOWN.case + 1] = "peers"
KNOWN_SET.case.peers = true

-- Take what pattern asks from link[field] ("*l", "*L", a count; "*a" only when ended): the
-- value, or nil when it is not all there yet.
local function peer_take(link, field, pat, ended)
  local d = link[field]
  local v
  if type(pat) == "number" then
    if #d < pat then return nil end
    v = d:sub(1, pat)
  elseif pat == "*a" then
    if not ended then return nil end
    v = d
  else
    local i = d:find("\n", 1, true)
    if not i then return nil end
    v = d:sub(1, i)
    link[field] = d:sub(i + 1)
    if pat ~= "*L" then v = v:gsub("\r?\n$", "") end
    return v
  end
  link[field] = d:sub(#v + 1)
  return v
end

local function peer_data(data)
  if type(data) == "table" then
    local out = {}
    local function flat(t)
      for i = 1, #t do
        if type(t[i]) == "table" then flat(t[i]) else out[#out + 1] = tostring(t[i]) end
      end
    end
    flat(data)
    return table.concat(out)
  end
  return tostring(data)
end

-- Run the peer of link until it waits for the handler (or ends).
local function peer_step(link)
  if link.peer_done then return end
  local ok, err = coroutine.resume(link.co)
  if not ok then
    link.stubs.errors[#link.stubs.errors + 1] = "peer " .. link.key .. " raised: " .. tostring(err)
    link.peer_done = true
  elseif coroutine.status(link.co) == "dead" then
    link.peer_done = true
  end
end

local function peer_link(stubs, host, port, fn)
  local link = { key = host .. ":" .. port, to_peer = "", to_handler = "", stubs = stubs }
  local conn = { host = host, port = port, tls = false }
  function conn.receive(_, pat)
    pat = pat or "*l"
    while true do
      local v = peer_take(link, "to_peer", pat, link.handler_closed)
      if v then return v end
      if link.handler_closed then
        local partial = link.to_peer
        link.to_peer = ""
        return nil, "closed", partial
      end
      coroutine.yield()
    end
  end
  function conn.send(_, data)
    if link.handler_closed or link.peer_done then return nil, "closed" end
    data = peer_data(data)
    link.to_handler = link.to_handler .. data
    return #data
  end
  function conn.close()
    link.peer_done = true
    return 1
  end
  link.conn = conn
  link.co = coroutine.create(function() fn(conn) end)
  peer_step(link)
  return link
end

-- s quoted, with its control characters escaped (\r, \n, \ddd).
local function show(s)
  return '"' .. s:gsub('[\\"]', "\\%0"):gsub("\r", "\\r"):gsub("\n", "\\n")
    :gsub("%c", function(ch) return "\\" .. ch:byte() end) .. '"'
end

-- The peer function of a script of { sent, answer } steps (key: its host:port, for errors).
local function peer_script(key, steps)
  for i, st in ipairs(steps) do
    if type(st) ~= "table" or type(st[1]) ~= "string" or type(st[2]) ~= "string" then
      error("peers: " .. key .. " step " .. i .. " must be { sent, answer } (two strings)", 0)
    end
  end
  return function(conn)
    for i, st in ipairs(steps) do
      local got, err, partial = conn:receive(#st[1])
      if got ~= st[1] then
        error(string.format("step %d: expected %s, got %s", i, show(st[1]),
          got and show(got) or (show(partial or "") .. " (then " .. tostring(err) .. ")")), 0)
      end
      conn:send(st[2])
    end
  end
end

local stub = {}
stub.__index = stub

-- Wait for the peer to answer more: true when it did (or ended), false when it waits too.
local function peer_more(link)
  local before, done = #link.to_handler, link.peer_done
  peer_step(link)
  return #link.to_handler ~= before or link.peer_done ~= done
end

function stub:connect(host, port, opts)
  if self.link then self:close() end
  local stubs = self.stubs
  local key = (type(opts) == "table" and opts.pool) or (tostring(host) .. ":" .. tostring(port))
  local pool = stubs.pool[key]
  if pool and #pool > 0 then
    self.link = table.remove(pool)
    self.link.reused = self.link.reused + 1
    return 1
  end
  local fn = stubs.peers[tostring(host) .. ":" .. tostring(port)]
  if not fn then
    return nil, "rmqlua test: no peer stubbed for " .. tostring(host) .. ":" .. tostring(port)
      .. " in this case's peers"
  end
  self.link = peer_link(stubs, tostring(host), tonumber(port), fn)
  self.link.key, self.link.reused = key, 0
  return 1
end

function stub:send(data)
  local link = self.link
  if not link then return nil, "closed" end
  if link.peer_done then
    self:close()
    return nil, "closed"
  end
  data = peer_data(data)
  link.to_peer = link.to_peer .. data
  peer_step(link)
  return #data
end

-- A read found nothing to hand over: "closed" and the partial data when the peer is done,
-- "timeout" when it has nothing more to say; nil when it said more (read again).
local function starved(self, link)
  if link.peer_done then
    local partial = link.to_handler
    self:close()
    return "closed", partial
  end
  if not peer_more(link) then return "timeout", "" end
end

function stub:receive(pat)
  local link = self.link
  if not link then return nil, "closed" end
  pat = pat or "*l"
  while true do
    local v = peer_take(link, "to_handler", pat, link.peer_done)
    if v then
      if pat == "*a" then self:close() end
      return v
    end
    local err, partial = starved(self, link)
    if err then return nil, err, partial end
  end
end

function stub:receiveuntil(pattern, opts)
  local inclusive = type(opts) == "table" and opts.inclusive
  return function()
    local link = self.link
    if not link then return nil, "closed" end
    while true do
      local i, j = link.to_handler:find(pattern, 1, true)
      if i then
        local v = link.to_handler:sub(1, inclusive and j or i - 1)
        link.to_handler = link.to_handler:sub(j + 1)
        return v
      end
      local err, partial = starved(self, link)
      if err then return nil, err, partial end
    end
  end
end

function stub.settimeout() end
function stub.settimeouts() end

function stub:sslhandshake(reused_session, server_name)
  local link = self.link
  if not link then return nil, "closed" end
  link.conn.tls, link.conn.server_name = true, server_name
  if reused_session == false then return true end
  return { stub_session = link.key }
end

function stub:setkeepalive()
  local link = self.link
  if not link then return nil, "closed" end
  self.link = nil
  if link.peer_done or link.to_handler ~= "" then
    link.handler_closed = true
    return nil, link.peer_done and "closed" or "unread data in buffer"
  end
  local pool = self.stubs.pool[link.key] or {}
  self.stubs.pool[link.key] = pool
  pool[#pool + 1] = link
  return 1
end

function stub:getreusedtimes()
  if not self.link then return nil, "closed" end
  return self.link.reused
end

function stub:close()
  local link = self.link
  if not link then return nil, "closed" end
  self.link = nil
  link.handler_closed = true
  peer_step(link) -- the peer sees the close
  return 1
end

-- Stub the cosocket peers of case c (nil when it has none): every socket's methods are the
-- stub's until peers_end. Raises on a peers table that is not host:port = function.
local function peers_begin(c)
  if c.peers == nil then return nil end
  if type(c.peers) ~= "table" then error("peers must be a table of \"host:port\" = function", 0) end
  local peers = {}
  for k, v in pairs(c.peers) do
    if type(k) ~= "string" or not k:match("^.+:%d+$")
      or (type(v) ~= "function" and type(v) ~= "table") then
      error("peers: each entry is \"host:port\" = function(conn) or a list of { sent, answer }, "
        .. "got " .. tostring(k) .. " = " .. type(v), 0)
    end
    peers[k] = type(v) == "table" and peer_script(k, v) or v
  end
  local mt = getmetatable(require("rmq.socket").tcp())
  local stubs = { peers = peers, pool = {}, errors = {}, saved = {}, mt = mt }
  for k, f in pairs(stub) do
    if type(f) == "function" then
      stubs.saved[k] = rawget(mt, k)
      rawset(mt, k, function(self, ...)
        rawset(self, "stubs", stubs)
        return f(self, ...)
      end)
    end
  end
  return stubs
end

-- Put the sockets back; the problems the peers reported.
local function peers_end(stubs)
  if not stubs then return {} end
  for k, f in pairs(stubs.saved) do rawset(stubs.mt, k, f) end
  for k in pairs(stub) do
    if stubs.saved[k] == nil and k ~= "__index" then rawset(stubs.mt, k, nil) end
  end
  return stubs.errors
end

local function distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = a:sub(i, i) == b:sub(j, j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

local function esc(s) return (s:gsub("%p", "%%%0")) end

-- The line of the cases source where key is set, searching from the case's name onwards.
local function line_of(lines, key, from)
  local pat = "%f[%w_]" .. esc(key) .. "%s*="
  for _, range in ipairs({ { from, #lines }, { 1, from - 1 } }) do
    for i = range[1], range[2] do
      if lines[i]:find(pat) then return i end
    end
  end
  return from
end

-- Every key of every case is one of KNOWN's; the first that is not: "file:line: message".
local function validate(cases, path, src)
  local lines = {}
  for l in (src .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  for i, c in ipairs(cases) do
    if type(c) ~= "table" then
      return path .. ": case " .. i .. " is a " .. type(c) .. ", not a table"
    end
    local name = type(c.name) == "string" and c.name or ("case " .. i)
    local from = 1
    if type(c.name) == "string" then
      for n, l in ipairs(lines) do
        if l:find(c.name, 1, true) then from = n; break end
      end
    end
    local function check(t, what, where)
      if type(t) ~= "table" then return nil end
      for k in pairs(t) do
        if type(k) ~= "string" or not KNOWN_SET[what][k] then
          local best, bd
          if type(k) == "string" then
            for _, known in ipairs(KNOWN[what]) do
              local d = distance(k, known)
              if d <= 2 and (not bd or d < bd) then best, bd = known, d end
            end
          end
          local line = type(k) == "string" and line_of(lines, k, from) or from
          return string.format("%s:%d: case '%s': unknown key '%s' in %s (known: %s)%s", path,
            line, name, tostring(k), where, table.concat(KNOWN[what], ", "),
            best and ("; did you mean " .. best .. "?") or "")
        end
      end
    end
    local err = check(c, "case", "the case")
    if err then return err end
    if c.messages ~= nil and type(c.messages) ~= "table" then
      return string.format("%s:%d: case '%s': messages must be a list of tables", path,
        line_of(lines, "messages", from), name)
    end
    for j, m in ipairs(c.messages or {}) do
      err = check(m, "message", "messages[" .. j .. "]")
      if err then return err end
    end
    if c.http ~= nil and type(c.http) ~= "table" and type(c.http) ~= "function" then
      return string.format("%s:%d: case '%s': http must be a table of answers by \"METHOD URL\" "
        .. "or a function(req), got %s", path, line_of(lines, "http", from), name, type(c.http))
    end
    err = check(c.expect, "expect", "expect")
    if err then return err end
    if type(c.expect) == "table" and type(c.expect.sent) == "table" then
      for j, e in ipairs(c.expect.sent) do
        err = check(e, "sent", "expect.sent[" .. j .. "]")
        if err then return err end
      end
    end
  end
end

-- ---- rmq.http stubs --------------------------------------------------------------------------
-- rmq.http as the script sees it here: the real client, or the running case's answers.
local http_stubs, http_log -- the running case's `http`, and the requests its handler made
local real_http
local http_stub = setmetatable({}, { __index = function(_, k) return real_http[k] end })

local function stub_keys()
  local keys = {}
  for k in pairs(http_stubs) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  return #keys > 0 and table.concat(keys, ", ") or "none"
end

-- A stub's answer as rmq.http returns it (header names in lower case).
local function response(key, v)
  if type(v) ~= "table" then return v end
  local h = {}
  if v.headers ~= nil then
    if type(v.headers) ~= "table" then
      error("rmqlua test: the http stub for " .. key .. ": headers must be a table", 0)
    end
    for k, x in pairs(v.headers) do h[string.lower(k)] = tostring(x) end
  end
  return { status = v.status or 200, reason = v.reason or "", headers = h, body = v.body or "" }
end

function http_stub.request(o)
  if http_stubs == nil then return real_http.request(o) end
  if type(o) ~= "table" then
    error("rmq.http.request: expects a table { method =, url =, ... }, got " .. type(o), 2)
  end
  local req = {}
  for k, v in pairs(o) do req[k] = v end
  req.method = o.method or (o.body and "POST" or "GET")
  local key = tostring(req.method) .. " " .. tostring(o.url)
  http_log[#http_log + 1] = key
  local v = http_stubs
  if type(v) == "table" then
    v = http_stubs[key]
    if v == nil then
      error("rmqlua test: no http stub for " .. key .. " (the case stubs: " .. stub_keys() .. ")", 2)
    end
  end
  if type(v) == "function" then
    local res, err = v(req)
    if res == nil then return nil, err end
    return response(key, res)
  end
  if type(v) == "string" then return nil, v end
  if type(v) == "table" then return response(key, v) end
  error("rmqlua test: the http stub for " .. key .. " must be a response table, an error string "
    .. "or a function, got " .. type(v), 2)
end

local function list_text(t)
  local q = {}
  for i, k in ipairs(t) do q[i] = string.format("%q", k) end
  return "{ " .. table.concat(q, ", ") .. " }"
end

local function check_http(e, log, probs)
  local want = e.http
  if want == nil then return end
  if type(want) == "number" then
    if #log ~= want then
      probs[#probs + 1] = "made " .. #log .. " http request(s), expected " .. want
    end
    return
  end
  if type(want) ~= "table" then
    probs[#probs + 1] = "expect.http must be a number or a list of \"METHOD URL\""
    return
  end
  local same = #want == #log
  for i = 1, #want do same = same and want[i] == log[i] end
  if not same then
    probs[#probs + 1] = "http requests " .. list_text(log) .. ", expected " .. list_text(want)
  end
end

-- Build n rmq_msg_t from case messages; anchor keeps the strings alive. case_index numbers the
-- default msg ids.
local clo_seq = 0
function M.build(msgs, default_topic, anchor, case_index)
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
    if uniq == nil then uniq = string.format("7F00000100000000%08X%08X", case_index or 0, i) end
    if uniq == false then uniq = nil end
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
    clo_seq = clo_seq + 1
    m.commit_log_offset = i64(c.commit_log_offset or clo_seq * 1000)
    m.reconsume_times = c.reconsume_times or 0
    m.born_timestamp = i64(c.born_timestamp)
    m.store_timestamp = i64(c.store_timestamp)
    m.born_port = parse_host(c.born_host or "127.0.0.1:0", m.born_host)
    m.store_port = parse_host(c.store_host or "127.0.0.1:10911", m.store_host)
    ptrs[i - 1] = m
  end
  return ptrs, n
end

-- The script's SQL92 subscriptions, compiled, by topic. An expression that does not compile is
-- an error naming the topic.
function M.filters(subscribe)
  local C = core.C
  local out = {}
  for _, s in ipairs(subscribe) do
    if s.type == "SQL92" then
      local err = ffi.new("char[1024]")
      local e = C.rmq_sql92_compile(s.expression, err, 1024)
      if e == nil then
        error("subscribe " .. s.topic .. ": invalid SQL92 expression: " .. ffi.string(err), 0)
      end
      out[s.topic] = { sql = ffi.gc(e, C.rmq_sql92_free) }
    end
  end
  return out
end

-- Keep the messages that pass their topic's filter: a new pointer array, its length, and the
-- 1-based indexes of the kept messages.
function M.select(filters, ptrs, n, anchor)
  local C = core.C
  local kept, idx = ffi.new("rmq_msg_t *[?]", math.max(n, 1)), {}
  anchor[#anchor + 1] = kept
  for i = 0, n - 1 do
    local m = ptrs[i]
    local f = filters[ffi.string(m.topic, m.topic_len)]
    local pass = true
    if f then pass = C.rmq_sql92_eval(f.sql, m.props, m.props_len, nil, 0) == 1 end
    if pass then
      kept[#idx] = m
      idx[#idx + 1] = i + 1
    end
  end
  return kept, #idx, idx
end

local function fmt(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

-- The last rmq.pause / resume / stop request of the handler (rmq._requests).
local function requested(reqs, op)
  local found
  for _, r in ipairs(reqs) do
    if r.op == op then found = r end
  end
  return found
end

local function check_requests(e, reqs, probs)
  local p = requested(reqs, "pause")
  if e.pause ~= nil then
    if e.pause == false then
      if p then probs[#probs + 1] = "rmq.pause(" .. tostring(p.seconds or "") .. ") called, expected no pause" end
    elseif not p then
      probs[#probs + 1] = "rmq.pause not called, expected " .. (e.pause == true and "rmq.pause()"
        or "rmq.pause(" .. tostring(e.pause) .. ")")
    elseif e.pause == true and p.seconds ~= nil then
      probs[#probs + 1] = "rmq.pause(" .. tostring(p.seconds) .. ") called, expected rmq.pause()"
    elseif e.pause ~= true and p.seconds ~= e.pause then
      probs[#probs + 1] = "rmq.pause(" .. tostring(p.seconds or "") .. ") called, expected rmq.pause("
        .. tostring(e.pause) .. ")"
    end
  end
  for _, op in ipairs({ "resume", "stop" }) do
    local want = e[op]
    if want ~= nil and (requested(reqs, op) ~= nil) ~= (want and true or false) then
      probs[#probs + 1] = "rmq." .. op .. "() " .. (want and "not called" or "called")
        .. ", expected " .. (want and "a call" or "none")
    end
  end
end

local function check_delivered(e, idx, probs)
  local d = e.delivered
  if type(d) == "number" then
    if #idx ~= d then
      probs[#probs + 1] = "delivered " .. #idx .. " message(s) (" .. table.concat(idx, ",")
        .. "), expected " .. d
    end
  elseif type(d) == "table" then
    local same = #d == #idx
    for i = 1, #d do same = same and d[i] == idx[i] end
    if not same then
      probs[#probs + 1] = "delivered messages {" .. table.concat(idx, ",") .. "}, expected {"
        .. table.concat(d, ",") .. "}"
    end
  elseif d ~= nil then
    probs[#probs + 1] = "expect.delivered must be a number or a list of message indexes"
  end
end

local function check_case(c, b, err, sends, idx, reqs, log)
  local e = c.expect or {}
  local probs = {}
  check_delivered(e, idx, probs)
  check_http(e, log or {}, probs)
  check_requests(e, reqs or {}, probs)
  if not b then
    -- nothing passed the subscription: the handler was not called
    for k in pairs(e) do
      if k ~= "delivered" and k ~= "http" and e[k] ~= false then
        probs[#probs + 1] = "expect." .. k .. " given, but no message passed the subscription "
          .. "(the handler was not called)"
        break
      end
    end
    return probs
  end
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

-- run(script_path, cases_path, out) -> failed, total; or nil, message for a bad script or cases
-- file (the message says file:line). out(line) prints.
function M.run(script_path, cases_path, out)
  out = out or print
  -- The script finds the stubs wherever it takes rmq.http from (before it loads).
  if package.loaded["rmq.http"] ~= http_stub then real_http = require "rmq.http" end
  rawset(rmq, "http", http_stub)
  package.loaded["rmq.http"] = http_stub
  local spec, serr = script.try_load(script_path)
  if not spec then return nil, serr end
  local f, ferr = io.open(cases_path, "rb")
  if not f then return nil, "cannot open the cases file " .. tostring(ferr) end
  local src = f:read("*a")
  f:close()
  local chunk, lerr = load(src, "@" .. cases_path, "t")
  if not chunk then return nil, lerr end
  local ok, cases = pcall(chunk)
  if not ok then return nil, tostring(cases) end
  if type(cases) ~= "table" then return nil, cases_path .. ": must return a list of cases" end
  local verr = validate(cases, cases_path, src)
  if verr then return nil, verr end
  local d = dispatch.new(spec, { thread_index = 0, thread_count = 1,
    consumer_group = type(spec.consumer_group) == "string" and spec.consumer_group or nil })
  local fok, filters = pcall(M.filters, spec.__subscribe)
  if not fok then return nil, script_path .. ": " .. tostring(filters) end
  d.init()
  local default_topic = spec.__subscribe[1] and spec.__subscribe[1].topic or "TopicTest"
  local failed = 0
  for i, c in ipairs(cases) do
    local name = c.name or ("case " .. i)
    local anchor = {}
    local okb, ptrs, n = pcall(M.build, c.messages or {}, default_topic, anchor, i)
    if not okb then
      failed = failed + 1
      out("FAIL " .. name .. ": " .. tostring(ptrs))
    else
      local kept, nk, idx = M.select(filters, ptrs, n, anchor)
      local b, err, sends
      rmq._requests = {}
      http_stubs, http_log = c.http, {}
      local pok, stubs = pcall(peers_begin, c)
      if not pok then err, nk, n = stubs, 0, 1 end
      if nk > 0 or n == 0 then -- a case without messages still calls the handler once
        b = ffi.new("rmq_batch_t")
        b.msgs = kept
        b.n = nk
        b.orderly = d.orderly and 1 or 0
        d.slot[0] = b
        err, sends = d.dispatch()
        d.slot[0] = nil
      end
      local log = http_log
      http_stubs = nil
      local probs = check_case(c, b, err, sends, idx, rmq._requests, log)
      for _, e in ipairs(peers_end(pok and stubs or nil)) do probs[#probs + 1] = e end
      if not pok then probs[#probs + 1] = stubs end
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
