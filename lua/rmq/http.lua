-- rmq.http: an HTTP/1.1 client on cosockets (rmq.socket), so a handler calls another service
-- without holding its consume thread.
--
--   local res, err = rmq.http.request{
--     method = "POST",              default "GET" (a body without a method: "POST")
--     url = "http://host:port/path?query",   http or https (https needs sslhandshake)
--     headers = { ["Content-Type"] = "application/json", X = { "a", "b" } },  a list: repeated
--     body = "...",                 a string (Content-Length is set)
--     timeout = 10000,              ms for the whole request: connect, send, headers and body
--                                   (default 60000)
--     keepalive = true,             keep the connection in this thread's pool after a complete
--                                   answer that allows it (per scheme, host and port)
--     keepalive_timeout = 60000,    ms a pooled connection may stay idle
--     pool_size = 30,               connections kept per scheme, host and port
--     max_body = 64 MiB,            bytes of response body accepted
--     redirects = 0,                redirects followed (0: a 3xx is returned as it is)
--     ssl_verify = true,            https: verify the server's certificate and name
--   }
--   res = { status = 200, reason = "OK", headers = { ["content-type"] = "..." }, body = "..." }
--   Header names are lower case; a repeated header's values are joined with ", ".
--
-- Errors (nil, err): "timeout", "connection refused", "connection reset by peer", "closed"
-- (the server closed the connection before a complete answer), "<host> could not be resolved
-- (...)", "malformed response: ...", "response header too large (over 65536 bytes)",
-- "response body too large (over max_body N bytes)", "too many redirects (N)",
-- "https is not supported by this build", "bad url '...': ...". Bad arguments (no url, a
-- method that is not a token, a header value with CR or LF) raise an error.
-- A request that fails on a reused keep-alive connection before any byte of the answer came
-- (the server had closed it meanwhile) is sent again once on a new connection when it is
-- idempotent (GET, HEAD, PUT, DELETE, OPTIONS, TRACE) or carries an Idempotency-Key header.
--
-- Threads: a request runs on the consume thread (and Lua state) that made it, as its sockets do.
local socket = require "rmq.socket"
local co = require "rmq.co"

local type, tostring, tonumber, pairs, ipairs, error = type, tostring, tonumber, pairs, ipairs,
  error
local concat, lower, find, sub, match, format = table.concat, string.lower, string.find,
  string.sub, string.match, string.format
local floor = math.floor
local now = co.now

local M = {}

M.DEFAULT_TIMEOUT = 60000
M.MAX_HEADER = 65536
M.DEFAULT_MAX_BODY = 64 * 1024 * 1024
M.DEFAULT_POOL = 30
M.DEFAULT_IDLE = 60000

local IDEMPOTENT = { GET = true, HEAD = true, PUT = true, DELETE = true, OPTIONS = true,
  TRACE = true }
local DEFAULT_PORT = { http = 80, https = 443 }
local KNOWN = { method = true, url = true, headers = true, body = true, timeout = true,
  keepalive = true, keepalive_timeout = true, pool_size = true, max_body = true,
  redirects = true, ssl_verify = true }

local user_agent = "rmqlua/" .. tostring(require("rmq").version or "dev")

-- _parse_url(url) -> { scheme, host, port, path, authority } or nil, err
function M._parse_url(url)
  if type(url) ~= "string" then return nil, "bad url: expected a string, got " .. type(url) end
  local scheme, rest = match(url, "^(%a[%w+.-]*)://(.*)$")
  if not scheme then return nil, "bad url '" .. url .. "': no scheme (http:// or https://)" end
  scheme = lower(scheme)
  if not DEFAULT_PORT[scheme] then
    return nil, "bad url '" .. url .. "': scheme " .. scheme .. " is not http or https"
  end
  local authority, path = match(rest, "^([^/?#]*)(.*)$")
  if find(authority, "@", 1, true) then
    return nil, "bad url '" .. url .. "': user info (user@) is not supported"
  end
  local host, port
  if sub(authority, 1, 1) == "[" then
    host, port = match(authority, "^%[([%x:.]+)%](.*)$")
    if not host then return nil, "bad url '" .. url .. "': bad IPv6 address" end
  else
    host, port = match(authority, "^([^:]*)(.*)$")
  end
  if host == "" then return nil, "bad url '" .. url .. "': no host" end
  if find(host, "[%s%c]") then return nil, "bad url '" .. url .. "': bad host" end
  if port == "" then
    port = DEFAULT_PORT[scheme]
  else
    port = match(port, "^:(%d+)$")
    port = tonumber(port)
    if not port or port < 1 or port > 65535 then
      return nil, "bad url '" .. url .. "': bad port"
    end
  end
  path = match(path, "^([^#]*)")
  if path == "" then path = "/" elseif sub(path, 1, 1) == "?" then path = "/" .. path end
  if find(path, "[%s%c]") then
    return nil, "bad url '" .. url .. "': spaces or control characters in the path"
  end
  local hosthdr = find(host, ":", 1, true) and ("[" .. host .. "]") or host
  if port ~= DEFAULT_PORT[scheme] then hosthdr = hosthdr .. ":" .. port end
  return { scheme = scheme, host = host, port = port, path = path, authority = hosthdr }
end

local function check_opt(o, k, what)
  local v = o[k]
  if v ~= nil and (type(v) ~= "number" or v ~= v or v < 0) then
    error("rmq.http.request: " .. k .. " must be " .. what .. ", got " .. tostring(v), 3)
  end
  return v
end

-- The request's text: the request line, the headers (the user's win over the defaults), the
-- body. Raises on a bad header.
local function build(method, u, headers, body, keepalive)
  local out = { method, " ", u.path, " HTTP/1.1\r\n" }
  local have = {}
  local idem = false
  if headers ~= nil then
    if type(headers) ~= "table" then
      error("rmq.http.request: headers must be a table, got " .. type(headers), 3)
    end
    for k, v in pairs(headers) do
      if type(k) ~= "string" or not match(k, "^[%w!#$%%&'*+.^_`|~-]+$") then
        error("rmq.http.request: bad header name " .. tostring(k), 3)
      end
      local vs = type(v) == "table" and v or { v }
      for _, x in ipairs(vs) do
        if type(x) ~= "string" and type(x) ~= "number" then
          error("rmq.http.request: header " .. k .. " must be a string, number or list, got "
            .. type(x), 3)
        end
        x = tostring(x)
        if find(x, "[\r\n]") then
          error("rmq.http.request: header " .. k .. " contains CR or LF", 3)
        end
        out[#out + 1] = k .. ": " .. x .. "\r\n"
      end
      local lk = lower(k)
      have[lk] = true
      if lk == "idempotency-key" or lk == "x-idempotency-key" then idem = true end
    end
  end
  if not have.host then out[#out + 1] = "Host: " .. u.authority .. "\r\n" end
  if not have["user-agent"] then out[#out + 1] = "User-Agent: " .. user_agent .. "\r\n" end
  if not have.connection then
    out[#out + 1] = keepalive and "Connection: keep-alive\r\n" or "Connection: close\r\n"
  end
  if not have["content-length"] and not have["transfer-encoding"]
    and (body or method == "POST" or method == "PUT" or method == "PATCH") then
    out[#out + 1] = "Content-Length: " .. (body and #body or 0) .. "\r\n"
  end
  out[#out + 1] = "\r\n"
  if body then out[#out + 1] = body end
  return concat(out), idem
end

-- A request in flight: the socket and the overall deadline (ms, rmq.now() * 1000).
local function left(st)
  local ms = st.deadline - now() * 1000
  if ms <= 0 then return nil end
  st.sock:settimeout(floor(ms) + 1)
  return true
end

-- Read the header block (without its final empty line), at most MAX_HEADER bytes.
-- Returns the text, or nil, err, got_any (bytes of the answer arrived).
local function read_head(st)
  local sock = st.sock
  local iter = st.head_iter
  if not iter then
    iter = sock:receiveuntil("\r\n\r\n")
    st.head_iter = iter
  end
  local parts, n = {}, 0
  while true do
    if not left(st) then return nil, "timeout", n > 0 end
    local d, err, partial = iter(8192)
    if not d then
      if err then
        if partial and #partial > 0 then n = n + #partial end
        return nil, err, n > 0
      end
      return concat(parts)
    end
    n = n + #d
    if n > M.MAX_HEADER then
      return nil, "response header too large (over " .. M.MAX_HEADER .. " bytes)", true
    end
    parts[#parts + 1] = d
  end
end

-- Parse the header block: status, reason, version, headers; or nil, err.
local function parse_head(text)
  local line, rest = match(text, "^([^\r\n]*)\r?\n?(.*)$")
  local minor, status, reason = match(line, "^HTTP/1%.([01]) (%d%d%d)%s*(.*)$")
  if not minor then
    return nil, "malformed response: bad status line '" .. sub(line, 1, 64) .. "'"
  end
  local h = {}
  for l in (rest .. "\r\n"):gmatch("([^\r\n]*)\r?\n") do
    if l ~= "" then
      local k, v = match(l, "^([%w!#$%%&'*+.^_`|~-]+):[ \t]*(.-)[ \t]*$")
      if not k then
        if match(l, "^[ \t]") then
          return nil, "malformed response: obsolete folded header line"
        end
        return nil, "malformed response: bad header line '" .. sub(l, 1, 64) .. "'"
      end
      k = lower(k)
      local old = h[k]
      h[k] = old and (old .. ", " .. v) or v
    end
  end
  return tonumber(status), reason, tonumber(minor), h
end

local function too_large(max_body)
  return "response body too large (over max_body " .. max_body .. " bytes)"
end

-- Read n bytes of body.
local function read_n(st, n)
  if not left(st) then return nil, "timeout" end
  local d, err = st.sock:receive(n)
  if not d then return nil, err end
  return d
end

local function read_chunked(st, max_body)
  local sock = st.sock
  local line_iter = sock:receiveuntil("\r\n")
  local parts, total = {}, 0
  while true do
    if not left(st) then return nil, "timeout" end
    local line, err = line_iter(1024)
    if not line then return nil, err or "malformed response: bad chunk size line" end
    if #line >= 1024 then return nil, "malformed response: chunk size line too long" end
    -- the iterator ends after each match: the next call returns nil once
    line_iter()
    local hex = match(line, "^(%x+)[ \t]*$") or match(line, "^(%x+)[ \t]*;") -- ;extensions
    local size = hex and #hex <= 12 and tonumber(hex, 16)
    if not size then
      return nil, "malformed response: bad chunk size '" .. sub(line, 1, 32) .. "'"
    end
    if size == 0 then break end
    total = total + size
    if total > max_body then return nil, too_large(max_body) end
    local d, rerr = read_n(st, size + 2)
    if not d then return nil, rerr end
    if sub(d, -2) ~= "\r\n" then return nil, "malformed response: chunk not ended by CRLF" end
    parts[#parts + 1] = sub(d, 1, -3)
  end
  -- trailers, up to the empty line
  local n = 0
  while true do
    if not left(st) then return nil, "timeout" end
    local l, err = line_iter(1024)
    if not l then return nil, err or "malformed response: bad trailer" end
    line_iter()
    if l == "" then break end
    n = n + #l
    if n > M.MAX_HEADER then return nil, "response header too large (trailers)" end
  end
  return concat(parts)
end

local function read_to_close(st, max_body)
  local parts, total = {}, 0
  while true do
    if not left(st) then return nil, "timeout" end
    local d, err, partial = st.sock:receive(65536)
    local piece = d or partial
    if piece and #piece > 0 then
      total = total + #piece
      if total > max_body then return nil, too_large(max_body) end
      parts[#parts + 1] = piece
    end
    if not d then
      if err == "closed" then return concat(parts) end
      return nil, err
    end
  end
end

-- One exchange on an open connection: the response, reusable (bool); or nil, err, got_any.
local function exchange(st, req, method, max_body)
  local sock = st.sock
  if not left(st) then return nil, "timeout" end
  local ok, err = sock:send(req)
  if not ok then return nil, err, false end
  local status, reason, minor, h
  repeat
    local text, herr, got = read_head(st)
    if not text then
      if herr == "closed" and got then herr = "malformed response: closed inside the header" end
      return nil, herr, got
    end
    status, reason, minor, h = parse_head(text)
    if not status then return nil, reason, true end
  until status >= 200 or status == 101 -- 1xx interim answers are skipped
  local res = { status = status, reason = reason, headers = h }
  local conn = h.connection and lower(h.connection) or ""
  local reusable = status ~= 101 and (minor == 1 and not find(conn, "close", 1, true)
    or minor == 0 and find(conn, "keep-alive", 1, true) ~= nil)
  local body, berr
  local te = h["transfer-encoding"]
  if method == "HEAD" or status == 204 or status == 304 or status < 200 then
    body = ""
  elseif te and find(lower(te), "chunked", 1, true) then
    body, berr = read_chunked(st, max_body)
  elseif h["content-length"] then
    local n = match(h["content-length"], "^%s*(%d+)%s*$")
    n = n and #n <= 15 and tonumber(n)
    if not n then
      return nil, "malformed response: bad Content-Length '" .. sub(h["content-length"], 1, 32)
        .. "'", true
    end
    if n > max_body then return nil, too_large(max_body), true end
    if n > 0 then body, berr = read_n(st, n) else body = "" end
    if not body and berr == "closed" then berr = "closed before the end of the body" end
  else
    body, berr = read_to_close(st, max_body)
    reusable = false
  end
  if not body then return nil, berr, true end
  res.body = body
  return res, reusable
end

-- One request to one url (no redirects): res or nil, err.
local function request_once(o, method, u, body, deadline)
  local keepalive = o.keepalive ~= false
  local req, idem = build(method, u, o.headers, body, keepalive)
  local verify = o.ssl_verify ~= false
  local pool = u.scheme .. "://" .. u.host .. ":" .. u.port
  if u.scheme == "https" and not verify then pool = pool .. ":noverify" end
  local retried = false
  while true do
    local sock = socket.tcp()
    local st = { sock = sock, deadline = deadline }
    if not left(st) then return nil, "timeout" end
    local ok, err = sock:connect(u.host, u.port, { pool = pool })
    if not ok then return nil, err end
    local reused = (sock:getreusedtimes() or 0) > 0
    if u.scheme == "https" and not reused then
      if not sock.sslhandshake then
        sock:close()
        return nil, "https is not supported by this build"
      end
      if not left(st) then sock:close(); return nil, "timeout" end
      local sok, serr = sock:sslhandshake(nil, u.host, verify)
      if not sok then
        sock:close()
        return nil, serr
      end
    end
    -- res, reusable; or nil, err, got_any
    local res, r2, got = exchange(st, req, method, o.max_body or M.DEFAULT_MAX_BODY)
    if res then
      if r2 and keepalive then
        sock:setkeepalive(o.keepalive_timeout or M.DEFAULT_IDLE, o.pool_size or M.DEFAULT_POOL)
      else
        sock:close()
      end
      return res
    end
    sock:close()
    local xerr = r2
    if not (reused and not got and not retried and (IDEMPOTENT[method] or idem)
      and (xerr == "closed" or xerr == "connection reset by peer" or xerr == "broken pipe")) then
      return nil, xerr
    end
    retried = true -- the server had closed the pooled connection: once more on a new one
  end
end

-- Resolve a Location against the url u.
local function resolve(u, loc)
  if match(loc, "^%a[%w+.-]*://") then return loc end
  local base = u.scheme .. "://" .. u.authority
  if sub(loc, 1, 2) == "//" then return u.scheme .. ":" .. loc end
  if sub(loc, 1, 1) == "/" then return base .. loc end
  local dir = match(u.path, "^([^?]*/)") or "/"
  return base .. dir .. loc
end

function M.request(o)
  if type(o) ~= "table" then
    error("rmq.http.request: expects a table { method =, url =, ... }, got " .. type(o), 2)
  end
  for k in pairs(o) do
    if not KNOWN[k] then
      error("rmq.http.request: unknown option '" .. tostring(k) .. "' (method, url, headers, "
        .. "body, timeout, keepalive, keepalive_timeout, pool_size, max_body, redirects, "
        .. "ssl_verify)", 2)
    end
  end
  local body = o.body
  if body ~= nil and type(body) ~= "string" then
    error("rmq.http.request: body must be a string, got " .. type(body), 2)
  end
  local method = o.method or (body and "POST" or "GET")
  if type(method) ~= "string" or not match(method, "^[%u%d_-]+$") then
    error("rmq.http.request: bad method " .. tostring(method) .. " (upper case: GET, POST, ...)", 2)
  end
  if o.url == nil then error("rmq.http.request: no url", 2) end
  local timeout = check_opt(o, "timeout", "a number of ms >= 0") or M.DEFAULT_TIMEOUT
  check_opt(o, "max_body", "a number of bytes >= 0")
  check_opt(o, "keepalive_timeout", "a number of ms >= 0")
  local redirects = check_opt(o, "redirects", "a number >= 0") or 0
  local ps = o.pool_size
  if ps ~= nil and (type(ps) ~= "number" or ps < 1) then
    error("rmq.http.request: pool_size must be a number >= 1, got " .. tostring(ps), 2)
  end
  local u, uerr = M._parse_url(o.url)
  if not u then return nil, uerr end
  local deadline = now() * 1000 + timeout
  local hops = 0
  while true do
    local res, err = request_once(o, method, u, body, deadline)
    if not res then return nil, err end
    local s = res.status
    local loc = res.headers.location
    if redirects == 0 or not loc or not (s == 301 or s == 302 or s == 303 or s == 307
      or s == 308) then
      return res
    end
    hops = hops + 1
    if hops > redirects then return nil, format("too many redirects (%d)", redirects) end
    local nu, nerr = M._parse_url(resolve(u, loc))
    if not nu then return nil, "redirect to " .. nerr end
    if s == 303 or ((s == 301 or s == 302) and method == "POST") then
      method, body = (method == "HEAD" and "HEAD" or "GET"), nil
    end
    u = nu
  end
end

return M
