-- rawmq.lua: a tiny blocking RocketMQ remoting client written against the wire format only
-- (plain sockets through the FFI, JSON headers, the stored message layout), so that the specs
-- can read back what a producer stored without going through rmqlua's own client code.
--
--   local raw = dofile(helpers.root .. "/spec/02-integration/02-producer/rawmq.lua")
--   local route = raw.route(namesrv, topic)               -- decoded TopicRouteData (or nil, code)
--   local msgs = raw.pull_all(namesrv, topic)             -- every stored message of every queue
--   local msgs, resp = raw.pull(addr, topic, queue_id, offset, max)  -- sysFlag SUBSCRIPTION, "*"
local ffi = require "ffi"
local bit = require "bit"
local cjson = require "cjson.safe"

pcall(ffi.cdef, [[
typedef struct rawmq_sockaddr_in {
  uint16_t sin_family; uint16_t sin_port; uint32_t sin_addr; uint8_t zero[8];
} rawmq_sockaddr_in;
typedef struct rawmq_timeval { long tv_sec; long tv_usec; } rawmq_timeval;
int socket(int domain, int type, int protocol);
int connect(int fd, const void *addr, uint32_t len);
int setsockopt(int fd, int level, int optname, const void *optval, uint32_t optlen);
long write(int fd, const void *buf, size_t n);
long read(int fd, void *buf, size_t n);
int close(int fd);
uint32_t inet_addr(const char *cp);
uint16_t htons(uint16_t v);
int uncompress(uint8_t *dest, unsigned long *destLen, const uint8_t *source, unsigned long sourceLen);
]])

local C = ffi.C
local zlib = ffi.load("z")

local M = {}

local function be32(n)
  n = n % 4294967296
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
    math.floor(n / 256) % 256, n % 256)
end

local function rd32(s, pos)
  local a, b, c, d = s:byte(pos, pos + 3)
  local v = ((a * 256 + b) * 256 + c) * 256 + d
  if v >= 2147483648 then v = v - 4294967296 end
  return v
end

local function rd64(s, pos)
  local hi = rd32(s, pos)
  local lo = rd32(s, pos + 4)
  if lo < 0 then lo = lo + 4294967296 end
  return hi * 4294967296 + lo
end

local function rd16(s, pos)
  local a, b = s:byte(pos, pos + 1)
  local v = a * 256 + b
  if v >= 32768 then v = v - 65536 end
  return v
end

M.rd32, M.rd64 = rd32, rd64

local conns = {}

local function connect(addr)
  if conns[addr] then return conns[addr] end
  local host, port = addr:match("^(.+):(%d+)$")
  assert(host, "bad address " .. tostring(addr))
  local fd = C.socket(2, 1, 0) -- AF_INET, SOCK_STREAM
  assert(fd >= 0, "socket() failed")
  local tv = ffi.new("rawmq_timeval", {10, 0})
  C.setsockopt(fd, 1, 20, tv, ffi.sizeof(tv)) -- SOL_SOCKET, SO_RCVTIMEO
  local sa = ffi.new("rawmq_sockaddr_in")
  sa.sin_family = 2
  sa.sin_port = C.htons(tonumber(port))
  sa.sin_addr = C.inet_addr(host)
  if C.connect(fd, sa, ffi.sizeof(sa)) ~= 0 then
    C.close(fd)
    return nil, "connect to " .. addr .. " failed"
  end
  conns[addr] = {fd = fd, opaque = 0}
  return conns[addr]
end

local function drop(addr)
  local c = conns[addr]
  if c then C.close(c.fd) end
  conns[addr] = nil
end

local function read_n(fd, n)
  local buf = ffi.new("uint8_t[?]", n)
  local got = 0
  while got < n do
    local r = tonumber(C.read(fd, buf + got, n - got))
    if r <= 0 then return nil end
    got = got + r
  end
  return ffi.string(buf, n)
end

function M.close_all()
  for addr in pairs(conns) do drop(addr) end
end

-- One request/response. ext: table of string -> string. Returns {code, remark, ext, body} or
-- nil, err.
function M.request(addr, code, ext, body, version)
  local c, err = connect(addr)
  if not c then return nil, err end
  c.opaque = c.opaque + 1
  local hdr = cjson.encode({code = code, language = "JAVA", version = version or 401,
    opaque = c.opaque, flag = 0, extFields = ext or {}, serializeTypeCurrentRPC = "JSON"})
  body = body or ""
  local frame = be32(4 + #hdr + #body) .. be32(#hdr) .. hdr .. body
  if C.write(c.fd, frame, #frame) ~= #frame then
    drop(addr)
    return nil, "write to " .. addr .. " failed"
  end
  while true do
    local lenb = read_n(c.fd, 4)
    if not lenb then drop(addr); return nil, "no response from " .. addr end
    local flen = rd32(lenb, 1)
    local rest = read_n(c.fd, flen)
    if not rest then drop(addr); return nil, "short response from " .. addr end
    local hlw = rd32(rest, 1)
    local stype = bit.rshift(hlw, 24)
    local hlen = bit.band(hlw, 0xffffff)
    assert(stype == 0, "rawmq only reads JSON headers")
    local h = cjson.decode(rest:sub(5, 4 + hlen))
    if h and h.opaque == c.opaque and bit.band(h.flag or 0, 1) == 1 then
      return {code = h.code, remark = h.remark, ext = h.extFields or {}, body = rest:sub(5 + hlen)}
    end
  end
end

function M.route(namesrv, topic)
  local r, err = M.request(namesrv, 105, {topic = topic})
  if not r then return nil, err end
  if r.code ~= 0 then return nil, r.code, r.remark end
  return cjson.decode(r.body)
end

local function inflate(data)
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

local function parse_props(s)
  local p = {}
  for seg in (s .. "\2"):gmatch("([^\2]*)\2") do
    local k, v = seg:match("^([^\1]+)\1(.+)$")
    if k then p[k] = v end
  end
  return p
end
M.parse_props = parse_props

-- Decode a PULL body (stored messages back to back).
function M.decode(body)
  local out, pos = {}, 1
  while pos + 4 <= #body do
    local m = {}
    local total = rd32(body, pos)
    m.queue_id = rd32(body, pos + 12)
    m.flag = rd32(body, pos + 16)
    m.queue_offset = rd64(body, pos + 20)
    m.physical_offset = rd64(body, pos + 28)
    m.sys_flag = rd32(body, pos + 36)
    m.born_ts = rd64(body, pos + 40)
    local p = pos + 48
    p = p + (bit.band(m.sys_flag, 0x10) ~= 0 and 20 or 8)
    m.store_ts = rd64(body, p); p = p + 8
    p = p + (bit.band(m.sys_flag, 0x20) ~= 0 and 20 or 8)
    m.reconsume_times = rd32(body, p); p = p + 4
    p = p + 8
    local blen = rd32(body, p); p = p + 4
    m.stored_body = body:sub(p, p + blen - 1); p = p + blen
    local tlen = body:byte(p); p = p + 1
    m.topic = body:sub(p, p + tlen - 1); p = p + tlen
    local plen = rd16(body, p); p = p + 2
    m.props_raw = body:sub(p, p + plen - 1)
    m.props = parse_props(m.props_raw)
    if bit.band(m.sys_flag, 1) ~= 0 then
      m.body = inflate(m.stored_body)
    else
      m.body = m.stored_body
    end
    out[#out + 1] = m
    pos = pos + total
  end
  return out
end

function M.pull(addr, topic, queue_id, offset, max)
  local r, err = M.request(addr, 11, {
    consumerGroup = "rawmq_reader", topic = topic, queueId = tostring(queue_id),
    queueOffset = tostring(offset), maxMsgNums = tostring(max or 32), sysFlag = "4",
    subscription = "*",
    commitOffset = "0", suspendTimeoutMillis = "0", subVersion = "0", expressionType = "TAG"})
  if not r then return nil, err end
  if r.code ~= 0 then return {}, r end
  return M.decode(r.body), r
end

-- Every message stored for topic on every master of its route, ordered by broker, queue, offset.
function M.pull_all(namesrv, topic)
  local route, code, remark = M.route(namesrv, topic)
  if not route then return nil, "no route for " .. topic .. ": " .. tostring(code) .. " " .. tostring(remark) end
  local addrs = {}
  for _, bd in ipairs(route.brokerDatas) do addrs[bd.brokerName] = bd.brokerAddrs["0"] end
  table.sort(route.queueDatas, function(a, b) return a.brokerName < b.brokerName end)
  local all = {}
  for _, qd in ipairs(route.queueDatas) do
    local addr = addrs[qd.brokerName]
    for q = 0, qd.readQueueNums - 1 do
      local offset = 0
      while true do
        local msgs, resp = M.pull(addr, topic, q, offset, 32)
        if not msgs then return nil, resp end
        if #msgs == 0 then break end
        for _, m in ipairs(msgs) do
          m.broker_name = qd.brokerName
          all[#all + 1] = m
        end
        offset = tonumber(resp.ext.nextBeginOffset) or (offset + #msgs)
      end
    end
  end
  return all
end

return M
