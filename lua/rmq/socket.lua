-- rmq.socket: cosockets, the subset of OpenResty's ngx.socket.tcp a handler needs to talk to
-- another service without holding its consume thread (runtime/luahost/coloop.c does the I/O on
-- the thread's own loop; rmq.co resumes the coroutine when it completes).
--
--   local sock = rmq.socket.tcp()
--   ok, err = sock:connect(host, port [, { pool = name }])   names resolved without blocking
--   bytes, err = sock:send(data)          a string, or an array of strings/numbers (nested)
--   data, err, partial = sock:receive(pattern)  "*l" (default: a line, without \r\n), "*a"
--                                         (until the peer closes), or a byte count
--   iter = sock:receiveuntil(pattern [, { inclusive = true }]); data, err, partial = iter([size])
--   sock:settimeout(ms); sock:settimeouts(connect_ms, send_ms, read_ms)   (default 60 s each)
--   ok, err = sock:setkeepalive([idle_ms [, pool_size]])  back to this thread's pool, keyed by
--                                         host:port or opts.pool (idle_ms 0: no idle limit;
--                                         default 60 s, pool_size 30)
--   count, err = sock:getreusedtimes();  ok, err = sock:close()
--   session, err = sock:sslhandshake(reused_session, server_name, ssl_verify [, send_status_req])
--                                         TLS over the connection (runtime/luahost/cossl.c):
--                                         SNI, and with ssl_verify the chain (the system's CA
--                                         store or lua_ssl_trusted_certificate) and the host
--                                         name; the connect timeout applies. Returns a session
--                                         to resume with later, or true when reused_session is
--                                         false. A connection reused from the pool is TLS
--                                         already: the call returns at once.
--
-- Errors are OpenResty's strings: "timeout", "closed", "connection refused",
-- "connection reset by peer", "<host> could not be resolved (...)", "handshake failed",
-- "<code>: <reason>" (a certificate that does not verify), "certificate host mismatch".
-- A connect past lua_socket_max_per_thread (open sockets of the thread, pooled ones included)
-- fails with an error naming it. Sockets a batch leaves open are closed when its handler
-- returns or times out.
-- Threads: a socket belongs to the Lua state (and so the consume thread) that made it.
local ffi = require "ffi"
local co = require "rmq.co"
local C = require("rmq.core").C

local type, tostring, tonumber, error, pairs = type, tostring, tonumber, error, pairs
local concat, tremove, setmetatable = table.concat, table.remove, setmetatable
local str, gc = ffi.string, ffi.gc
local await, root_of, now = co.await, co.root, co.now

local M = {}
local errp = ffi.new("const char *[1]")
local datap = ffi.new("const char *[1]")

local DEFAULT_TIMEOUT = 60000
local DEFAULT_IDLE = 60000
local DEFAULT_POOL = 30

local pools = {} -- key -> array of { s =, reused =, expires = }

local tcp = {}
tcp.__index = tcp

function M.tcp()
  return setmetatable({ ct = DEFAULT_TIMEOUT, st = DEFAULT_TIMEOUT, rt = DEFAULT_TIMEOUT }, tcp)
end

local function release(s)
  gc(s, nil)
  C.rmq_cosock_free(s)
end

local function track(self)
  local root = root_of()
  if root then
    root.socks = root.socks or setmetatable({}, { __mode = "k" })
    root.socks[self] = true
  end
end

local function from_pool(key)
  local p = pools[key]
  if not p then return nil end
  local t = now() * 1000
  while #p > 0 do
    local e = p[#p]
    p[#p] = nil
    if (e.expires == 0 or e.expires > t) and C.rmq_cosock_set_idle(e.s, 0) == 0 then
      return e
    end
    release(e.s)
  end
end

function tcp:connect(host, port, opts)
  if type(host) ~= "string" then return nil, "bad host: " .. tostring(host) end
  port = tonumber(port)
  if not port then return nil, "bad port number" end
  if self.s then self:close() end
  local key = (type(opts) == "table" and opts.pool) or (host .. ":" .. port)
  self.key = key
  local e = from_pool(key)
  if e then
    self.s, self.reused = e.s, e.reused + 1
    track(self)
    return 1
  end
  local s = gc(C.rmq_cosock_new(), C.rmq_cosock_free)
  local id = C.rmq_cosock_connect(s, host, port, self.ct, errp)
  if id < 0 then
    local err = str(errp[0])
    release(s)
    return nil, err
  end
  self.s, self.reused = s, 0
  track(self)
  await(id)
  local err = C.rmq_cosock_err(s, 0)
  if err ~= nil then
    err = str(err)
    self.s = nil
    release(s)
    return nil, err
  end
  return 1
end

local function flatten(t, out)
  for i = 1, #t do
    local v = t[i]
    local tv = type(v)
    if tv == "table" then
      local ok, e = flatten(v, out)
      if not ok then return nil, e end
    elseif tv == "string" or tv == "number" then
      out[#out + 1] = tostring(v)
    elseif tv == "boolean" then
      out[#out + 1] = v and "true" or "false"
    else
      return nil, "bad data type " .. tv .. " found"
    end
  end
  return true
end

function tcp:send(data)
  local s = self.s
  if not s then return nil, "closed" end
  if type(data) == "table" then
    local out = {}
    local ok, e = flatten(data, out)
    if not ok then return nil, e end
    data = concat(out)
  elseif type(data) == "number" then
    data = tostring(data)
  elseif type(data) ~= "string" then
    return nil, "bad argument: expects a string, number or table, got " .. type(data)
  end
  local id = C.rmq_cosock_send(s, data, #data, self.st, errp)
  if id < 0 then return nil, str(errp[0]) end
  await(id)
  local err = C.rmq_cosock_err(s, 1)
  if err ~= nil then
    err = str(err)
    self:close()
    return nil, err
  end
  return #data
end

local function take(s, n)
  local have = C.rmq_cosock_buffered(s, datap)
  if n > have then n = have end
  local v = str(datap[0], n)
  C.rmq_cosock_consume(s, n)
  return v
end

local function buffered(s)
  return tonumber(C.rmq_cosock_buffered(s, datap))
end

-- Wait for more data: nil, or the error ("closed", "timeout", ...).
local function more(self)
  local s = self.s
  local id = C.rmq_cosock_read(s, self.rt, errp)
  if id < 0 then return str(errp[0]) end
  await(id)
  local err = C.rmq_cosock_err(s, 2)
  if err ~= nil then return str(err) end
end

-- A receive failed with err: OpenResty's result, the socket closed unless it was a timeout.
local function fail(self, err)
  local partial = take(self.s, buffered(self.s))
  if err ~= "timeout" then self:close() end
  return nil, err, partial
end

function tcp:receive(pat)
  local s = self.s
  if not s then return nil, "closed" end
  pat = pat or "*l"
  if type(pat) == "number" or tonumber(pat) then -- a count, or a string that is one (as in ngx_lua)
    local n = tonumber(pat)
    if n < 0 then return nil, "bad pattern argument: " .. tostring(pat) end
    while buffered(s) < n do
      local err = more(self)
      if err then return fail(self, err) end
    end
    return take(s, n)
  end
  if pat == "*l" or pat == "*L" then
    local from = 0
    while true do
      local pos = tonumber(C.rmq_cosock_find(s, "\n", 1, from))
      if pos >= 0 then
        local line = take(s, pos + 1)
        if pat == "*l" then
          line = line:sub(-2) == "\r\n" and line:sub(1, -3) or line:sub(1, -2)
        end
        return line
      end
      from = buffered(s)
      local err = more(self)
      if err then return fail(self, err) end
    end
  end
  if pat == "*a" then
    while true do
      local err = more(self)
      if err == "closed" then -- the peer closed it: all there is, and the socket is done
        local all = take(s, buffered(s))
        self:close()
        return all
      end
      if err then return fail(self, err) end
    end
  end
  return nil, "bad pattern argument: " .. tostring(pat)
end

function tcp:receiveuntil(pattern, opts)
  if type(pattern) ~= "string" or pattern == "" then
    error("rmq.socket: receiveuntil expects a non-empty pattern string", 2)
  end
  local inclusive = type(opts) == "table" and opts.inclusive
  local plen = #pattern
  local ended = false
  return function(size)
    local s = self.s
    if not s then return nil, "closed" end
    if ended then
      ended = false
      return nil
    end
    local from = 0
    while true do
      local pos = tonumber(C.rmq_cosock_find(s, pattern, plen, from))
      if pos >= 0 then
        if size and pos > size then return take(s, size) end
        local data = take(s, inclusive and pos + plen or pos)
        if not inclusive then C.rmq_cosock_consume(s, plen) end
        if size then ended = true end
        return data
      end
      local have = buffered(s)
      if size and have - (plen - 1) >= size then return take(s, size) end
      from = have > plen and have - plen + 1 or 0
      local err = more(self)
      if err then return fail(self, err) end
    end
  end
end

local function check_ms(v, what)
  if v == nil then return nil end
  if type(v) ~= "number" or v < 0 then
    error("rmq.socket: " .. what .. " must be a number of ms >= 0, got " .. tostring(v), 3)
  end
  return v
end

function tcp:settimeout(ms)
  ms = check_ms(ms, "settimeout") or DEFAULT_TIMEOUT
  self.ct, self.st, self.rt = ms, ms, ms
end

function tcp:settimeouts(c, s, r)
  self.ct = check_ms(c, "connect timeout") or self.ct
  self.st = check_ms(s, "send timeout") or self.st
  self.rt = check_ms(r, "read timeout") or self.rt
end

function tcp:setkeepalive(idle, size)
  local s = self.s
  if not s then return nil, "closed" end
  idle = check_ms(idle, "setkeepalive idle time") or DEFAULT_IDLE
  size = size or DEFAULT_POOL
  if type(size) ~= "number" or size < 1 then
    error("rmq.socket: setkeepalive pool size must be >= 1, got " .. tostring(size), 2)
  end
  if buffered(s) > 0 then
    self:close()
    return nil, "unread data in buffer"
  end
  if C.rmq_cosock_set_idle(s, 1) ~= 0 then
    self:close()
    return nil, "closed"
  end
  local p = pools[self.key]
  if not p then
    p = {}
    pools[self.key] = p
  end
  while #p >= size do
    release(tremove(p, 1).s)
  end
  p[#p + 1] = { s = s, reused = self.reused, expires = idle > 0 and now() * 1000 + idle or 0 }
  self.s = nil
  return 1
end

local session_t = ffi.typeof("void *")

function tcp:sslhandshake(reused_session, server_name, verify)
  local s = self.s
  if not s then return nil, "closed" end
  if server_name ~= nil and type(server_name) ~= "string" then
    return nil, "bad server_name: " .. tostring(server_name)
  end
  local sess = nil
  if reused_session ~= nil and reused_session ~= false then
    if type(reused_session) ~= "cdata" or not ffi.istype(session_t, reused_session) then
      return nil, "bad session: expects one sslhandshake returned"
    end
    sess = reused_session
  end
  local id = C.rmq_cosock_sslhandshake(s, server_name, verify and 1 or 0, sess, self.ct, errp)
  if id < 0 then
    local err = str(errp[0])
    -- Another light thread's operation on it goes on; anything else leaves it unusable.
    if err ~= "socket busy" and err ~= "unread data in buffer" then self:close() end
    return nil, err
  end
  if id > 0 then
    await(id)
    local err = C.rmq_cosock_err(s, 0)
    if err ~= nil then
      err = str(err)
      self:close()
      return nil, err
    end
  end
  if reused_session == false then return true end
  local new = C.rmq_cosock_ssl_session(s)
  if new == nil then return true end
  return gc(new, C.rmq_cosock_ssl_session_free)
end

function tcp:getreusedtimes()
  if not self.s then return nil, "closed" end
  return self.reused
end

function tcp:close()
  local s = self.s
  if not s then return nil, "closed" end
  self.s = nil
  release(s)
  return 1
end

-- Close every pooled connection of this state (shutdown).
function M._close_pools()
  for k, p in pairs(pools) do
    for i = 1, #p do release(p[i].s) end
    pools[k] = nil
  end
end

return M
