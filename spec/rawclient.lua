-- rawclient.lua: a raw RocketMQ remoting client for the specs, written against the wire format
-- only, so that specs can talk to a broker or name server without rmqlua's own client code.
-- Plain blocking TCP through the FFI (no luasocket), frames with JSON headers built here,
-- responses decoded in both header types (JSON and ROCKETMQ binary), stored messages decoded
-- from PULL bodies (compressed bodies inflated on request).
--
--   local raw = require "rawclient"
--   local c = assert(raw.connect("127.0.0.1:9876"))
--   local resp = c:request(105, {topic = "T"})        -- decoded frame: code, remark, extFields, body
--   local msgs = raw.decode_messages(resp.body)       -- stored messages of a PULL body
local ffi = require "ffi"
local bit = require "bit"
local cjson = require "cjson"

-- One declaration at a time, each allowed to exist already (another spec helper may have
-- declared the same libc function).
for _, decl in ipairs {
  "struct rawclient_sockaddr_in { unsigned short family; unsigned short port; unsigned char addr[4]; unsigned char zero[8]; };",
  "struct rawclient_pollfd { int fd; short events; short revents; };",
  "int socket(int domain, int type, int protocol);",
  "int connect(int fd, const void *addr, unsigned int len);",
  "long send(int fd, const void *buf, unsigned long n, int flags);",
  "long recv(int fd, void *buf, unsigned long n, int flags);",
  "int close(int fd);",
  "int poll(void *fds, unsigned long nfds, int timeout);",
  "unsigned short htons(unsigned short v);",
  "int inet_pton(int af, const char *src, void *dst);",
  "int uncompress(uint8_t *dest, unsigned long *destLen, const uint8_t *source, unsigned long sourceLen);",
} do
  pcall(ffi.cdef, decl)
end

local C = ffi.C
local M = {}

-- ---- bytes ---------------------------------------------------------------------------------

local function be32(n)
  n = n % 4294967296
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
                     math.floor(n / 256) % 256, n % 256)
end
local function rd32(s, i)
  local a, b, c, d = s:byte(i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end
local function rd32s(s, i)
  local v = rd32(s, i)
  if v >= 2147483648 then v = v - 4294967296 end
  return v
end
local function rd16(s, i)
  local a, b = s:byte(i, i + 1)
  return a * 256 + b
end
local function rd64(s, i) return rd32(s, i) * 4294967296 + rd32(s, i + 4) end
M.rd32, M.rd32s, M.rd16, M.rd64, M.be32 = rd32, rd32s, rd16, rd64, be32

-- ---- connection ----------------------------------------------------------------------------

-- Connect to "host:port" (IPv4); returns a connection object or nil, err.
function M.connect(addr)
  local host, port = addr:match("^(.+):(%d+)$")
  if not host then return nil, "bad address " .. tostring(addr) end
  local fd = C.socket(2, 1, 0) -- AF_INET, SOCK_STREAM
  if fd < 0 then return nil, "socket failed" end
  local sa = ffi.new("struct rawclient_sockaddr_in")
  sa.family = 2
  sa.port = C.htons(tonumber(port))
  if C.inet_pton(2, host, sa.addr) ~= 1 then C.close(fd); return nil, "bad host " .. host end
  if C.connect(fd, sa, ffi.sizeof(sa)) ~= 0 then
    C.close(fd)
    return nil, "connect to " .. addr .. " failed"
  end
  return setmetatable({fd = fd, buf = "", opaque = 1000, inbox = {}}, {__index = M})
end

function M:close()
  if self.fd >= 0 then C.close(self.fd) end
  self.fd = -1
end

function M:send_raw(s)
  local off = 0
  while off < #s do
    local n = tonumber(C.send(self.fd, ffi.cast("const char *", s) + off, #s - off, 0x4000))
    if n <= 0 then return nil, "send failed" end
    off = off + n
  end
  return true
end

-- Read more bytes, waiting up to timeout seconds. Returns true, or nil, "timeout" / "closed".
function M:fill(timeout)
  local pfd = ffi.new("struct rawclient_pollfd")
  pfd.fd = self.fd
  pfd.events = 1
  local r = C.poll(pfd, 1, math.floor(timeout * 1000))
  if r == 0 then return nil, "timeout" end
  local tmp = ffi.new("char[65536]")
  local n = tonumber(C.recv(self.fd, tmp, 65536, 0))
  if n <= 0 then return nil, "closed" end
  self.buf = self.buf .. ffi.string(tmp, n)
  return true
end

-- ---- frames --------------------------------------------------------------------------------

-- Decode one frame (string starting at the length word).
function M.decode(frame)
  local total = rd32(frame, 1)
  local ht = rd32(frame, 5)
  local ser = math.floor(ht / 16777216)
  local hlen = ht % 16777216
  local h = frame:sub(9, 8 + hlen)
  local body = frame:sub(9 + hlen, 4 + total)
  local cmd
  if ser == 0 then
    cmd = cjson.decode(h)
    cmd.serialize = "JSON"
  else
    cmd = {serialize = "ROCKETMQ", extFields = {}}
    cmd.code = rd16(h, 1)
    if cmd.code >= 32768 then cmd.code = cmd.code - 65536 end
    cmd.language = h:byte(3)
    cmd.version = rd16(h, 4)
    cmd.opaque = rd32s(h, 6)
    cmd.flag = rd32(h, 10)
    local rl = rd32(h, 14)
    local p = 18
    if rl > 0 then cmd.remark = h:sub(p, p + rl - 1) end
    p = p + rl
    local el = rd32(h, p)
    p = p + 4
    local stop = p + el
    while p < stop do
      local kl = rd16(h, p); p = p + 2
      local k = h:sub(p, p + kl - 1); p = p + kl
      local vl = rd32(h, p); p = p + 4
      cmd.extFields[k] = h:sub(p, p + vl - 1); p = p + vl
    end
  end
  cmd.extFields = cmd.extFields or {}
  cmd.body = body
  return cmd
end

-- Next frame within timeout seconds: cmd, or nil, err.
function M:read_frame(timeout)
  timeout = timeout or 5
  while true do
    if #self.buf >= 4 then
      local total = rd32(self.buf, 1)
      if #self.buf >= 4 + total then
        local f = self.buf:sub(1, 4 + total)
        self.buf = self.buf:sub(5 + total)
        return M.decode(f), f
      end
    end
    local ok, err = self:fill(timeout)
    if not ok then return nil, err end
  end
end

-- A JSON-header frame.
function M.encode(code, ext, body, opts)
  opts = opts or {}
  local h = {code = code, flag = opts.flag or 0, language = opts.language or "JAVA",
             opaque = opts.opaque or 0, serializeTypeCurrentRPC = "JSON",
             version = opts.version or 401}
  if ext and next(ext) then h.extFields = ext end
  local hs = cjson.encode(h)
  body = body or ""
  return be32(4 + #hs + #body) .. be32(#hs) .. hs .. body
end

-- Send a request and wait for its response (server requests that arrive meanwhile are kept in
-- self.inbox). opts: flag, language, version, timeout (seconds, default 5). Returns the response
-- or nil, err.
function M:request(code, ext, body, opts)
  opts = opts or {}
  self.opaque = self.opaque + 1
  local op = self.opaque
  opts.opaque = op
  local ok, err = self:send_raw(M.encode(code, ext, body, opts))
  if not ok then return nil, err end
  return self:wait_response(op, opts.timeout)
end

function M:wait_response(op, timeout)
  while true do
    local c, err = self:read_frame(timeout or 5)
    if not c then return nil, err end
    if bit.band(c.flag or 0, 1) == 1 and c.opaque == op then return c end
    if bit.band(c.flag or 0, 1) == 0 then self.inbox[#self.inbox + 1] = c end
  end
end

function M:oneway(code, ext, body)
  return self:send_raw(M.encode(code, ext, body, {flag = 2}))
end

-- Send a request without waiting; returns its opaque.
function M:send_request(code, ext, body, opts)
  opts = opts or {}
  self.opaque = self.opaque + 1
  opts.opaque = self.opaque
  assert(self:send_raw(M.encode(code, ext, body, opts)))
  return self.opaque
end

-- ---- stored messages -----------------------------------------------------------------------

local zlib
-- zlib-inflate data (a compressed message body).
function M.inflate(data)
  zlib = zlib or ffi.load("z")
  local cap = #data * 8 + 1024
  for _ = 1, 12 do
    local out = ffi.new("uint8_t[?]", cap)
    local len = ffi.new("unsigned long[1]", cap)
    local rc = zlib.uncompress(out, len, data, #data)
    if rc == 0 then return ffi.string(out, len[0]) end
    if rc ~= -5 then error("zlib uncompress failed: " .. rc) end -- Z_BUF_ERROR: grow
    cap = cap * 4
  end
  error("zlib: body too large")
end

-- Properties string ("k\1v\2k\1v") to a table.
function M.parse_props(s)
  local p = {}
  for seg in (s .. "\2"):gmatch("([^\2]*)\2") do
    local k, v = seg:match("^([^\1]+)\1(.+)$")
    if k then p[k] = v end
  end
  return p
end

-- Properties string from a list of {k, v}.
function M.props(list)
  local t = {}
  for _, kv in ipairs(list) do t[#t + 1] = kv[1] .. "\1" .. kv[2] end
  return table.concat(t, "\2")
end

-- Decode the stored messages of a PULL body. m.body is the body as stored; with inflate set, a
-- compressed one (sysFlag bit 0) is inflated and the stored bytes kept in m.stored_body.
function M.decode_messages(body, inflate)
  local out, p = {}, 1
  while p + 4 <= #body do
    local size = rd32(body, p)
    local m = {size = size}
    m.magic = rd32(body, p + 4)
    m.body_crc = rd32(body, p + 8)
    m.queue_id = rd32(body, p + 12)
    m.flag = rd32(body, p + 16)
    m.queue_offset = rd64(body, p + 20)
    m.phys = rd64(body, p + 28)
    m.sys_flag = rd32(body, p + 36)
    m.born_ts = rd64(body, p + 40)
    local q = p + 48
    local bl = bit.band(m.sys_flag, 0x10) ~= 0 and 16 or 4
    m.born_host = {body:byte(q, q + bl - 1)}
    m.born_port = rd32(body, q + bl)
    q = q + bl + 4
    m.store_ts = rd64(body, q); q = q + 8
    local sl = bit.band(m.sys_flag, 0x20) ~= 0 and 16 or 4
    m.store_host = {body:byte(q, q + sl - 1)}
    m.store_port = rd32(body, q + sl)
    q = q + sl + 4
    m.reconsume = rd32(body, q); q = q + 4
    q = q + 8
    local blen = rd32(body, q); q = q + 4
    m.body = body:sub(q, q + blen - 1); q = q + blen
    local tl = body:byte(q); q = q + 1
    m.topic = body:sub(q, q + tl - 1); q = q + tl
    local pl = rd16(body, q); q = q + 2
    m.props_raw = body:sub(q, q + pl - 1)
    m.props = M.parse_props(m.props_raw)
    if inflate then
      m.stored_body = m.body
      if bit.band(m.sys_flag, 1) ~= 0 then m.body = M.inflate(m.stored_body) end
    end
    out[#out + 1] = m
    p = p + size
  end
  return out
end

return M
