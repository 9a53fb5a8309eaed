-- wire.lua: a raw RocketMQ remoting client for the development broker specs. Plain blocking
-- TCP through the FFI (no luasocket), frames with JSON headers built here, responses decoded in
-- both header types (JSON and ROCKETMQ binary), stored messages decoded from PULL bodies.
local ffi = require "ffi"
local bit = require "bit"
local cjson = require "cjson"

ffi.cdef [[
int socket(int domain, int type, int protocol);
int connect(int fd, const void *addr, unsigned int len);
long send(int fd, const void *buf, unsigned long n, int flags);
long recv(int fd, void *buf, unsigned long n, int flags);
int close(int fd);
int poll(void *fds, unsigned long nfds, int timeout);
unsigned short htons(unsigned short v);
int inet_pton(int af, const char *src, void *dst);
struct rmqw_sockaddr_in { unsigned short family; unsigned short port; unsigned char addr[4]; unsigned char zero[8]; };
struct rmqw_pollfd { int fd; short events; short revents; };
]]

local C = ffi.C
local M = {}

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
M.rd32, M.rd16, M.rd64, M.be32 = rd32, rd16, rd64, be32

-- Connect to "host:port"; returns a connection object or nil, err.
function M.connect(addr)
  local host, port = addr:match("^(.+):(%d+)$")
  local fd = C.socket(2, 1, 0)
  if fd < 0 then return nil, "socket failed" end
  local sa = ffi.new("struct rmqw_sockaddr_in")
  sa.family = 2
  sa.port = C.htons(tonumber(port))
  if C.inet_pton(2, host, sa.addr) ~= 1 then C.close(fd); return nil, "bad host " .. host end
  if C.connect(fd, sa, ffi.sizeof(sa)) ~= 0 then C.close(fd); return nil, "connect failed" end
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
  local pfd = ffi.new("struct rmqw_pollfd")
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
-- self.inbox). Returns the response or nil, err.
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

-- Decode the stored messages of a PULL body.
function M.decode_messages(body)
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
    m.props = {}
    for seg in (m.props_raw .. "\2"):gmatch("([^\2]*)\2") do
      local k, v = seg:match("^([^\1]+)\1(.+)$")
      if k then m.props[k] = v end
    end
    out[#out + 1] = m
    p = p + size
  end
  return out
end

-- Properties string from a list of {k, v}.
function M.props(list)
  local t = {}
  for _, kv in ipairs(list) do t[#t + 1] = kv[1] .. "\1" .. kv[2] end
  return table.concat(t, "\2")
end

-- SEND_MESSAGE_V2 extFields.
function M.send_ext(topic, opts)
  opts = opts or {}
  local props = {{"UNIQ_KEY", opts.uniq or string.format("%032X", math.random(1, 2^30))},
                 {"WAIT", "true"}}
  if opts.tags then props[#props + 1] = {"TAGS", opts.tags} end
  if opts.keys then props[#props + 1] = {"KEYS", opts.keys} end
  for _, kv in ipairs(opts.props or {}) do props[#props + 1] = kv end
  return {a = "test_producer", b = topic, c = "TBW102", d = "4", e = tostring(opts.queue or 0),
          f = "0", g = tostring(opts.born or 1700000000000), h = "0", i = M.props(props),
          j = tostring(opts.reconsume or 0), k = "false", m = "false",
          l = opts.max_reconsume and tostring(opts.max_reconsume) or nil}
end

-- A heartbeat body for one consumer group.
function M.heartbeat_body(client_id, group, subs, opts)
  opts = opts or {}
  local set = {}
  for _, s in ipairs(subs) do
    set[#set + 1] = {classFilterMode = false, topic = s.topic, subString = s.sub or "*",
                     tagsSet = setmetatable(s.tags or {}, cjson.array_mt),
                     codeSet = setmetatable(s.codes or {}, cjson.array_mt),
                     subVersion = s.version or 1000, expressionType = "TAG"}
  end
  return cjson.encode({clientID = client_id, producerDataSet = setmetatable({}, cjson.array_mt),
                       consumerDataSet = {{groupName = group, consumeType = "CONSUME_PASSIVELY",
                                           messageModel = opts.model or "CLUSTERING",
                                           consumeFromWhere = "CONSUME_FROM_FIRST_OFFSET",
                                           subscriptionDataSet = set, unitMode = false}}})
end

function M.pull_ext(group, topic, qid, offset, opts)
  opts = opts or {}
  return {consumerGroup = group, topic = topic, queueId = tostring(qid),
          queueOffset = tostring(offset), maxMsgNums = tostring(opts.max or 32),
          sysFlag = tostring(opts.sys_flag or 0), commitOffset = tostring(opts.commit or 0),
          suspendTimeoutMillis = tostring(opts.suspend or 15000),
          subVersion = tostring(opts.sub_version or 0), expressionType = "TAG",
          subscription = opts.subscription}
end

-- The development broker's FFI API (declared once per Lua state).
local cdefs_done = false
function M.lib()
  local helpers = require "helpers"
  if not cdefs_done then
    ffi.cdef [[
typedef struct rmq_devbroker rmq_devbroker_t;
rmq_devbroker_t *rmq_devbroker_start(const char *args, char *errstr, size_t errstr_size);
void rmq_devbroker_stop(rmq_devbroker_t *db);
const char *rmq_devbroker_addr(rmq_devbroker_t *db);
int rmq_devbroker_broker_count(rmq_devbroker_t *db);
const char *rmq_devbroker_broker_addr(rmq_devbroker_t *db, int idx);
const char *rmq_devbroker_broker_name(rmq_devbroker_t *db, int idx);
int rmq_devbroker_push_error(rmq_devbroker_t *db, int target, int req_code, int code, int count);
void rmq_devbroker_clear_errors(rmq_devbroker_t *db);
int rmq_devbroker_set_down(rmq_devbroker_t *db, int broker, int down);
int rmq_devbroker_set_latency(rmq_devbroker_t *db, int target, int req_code, int ms);
int rmq_devbroker_count(rmq_devbroker_t *db, int target, int req_code);
int rmq_devbroker_wait(rmq_devbroker_t *db, int target, int req_code, int n, int timeout_ms);
void rmq_devbroker_reset_counts(rmq_devbroker_t *db);
int rmq_devbroker_request_ext(rmq_devbroker_t *db, int target, int req_code, int idx,
                              const char *key, char *buf, size_t size);
int rmq_devbroker_create_topic(rmq_devbroker_t *db, int broker, const char *topic, int queues);
int64_t rmq_devbroker_produce(rmq_devbroker_t *db, int broker, const char *topic, int queue_id,
                              const char *tags, const char *keys, const char *body, size_t body_len);
int64_t rmq_devbroker_max_offset(rmq_devbroker_t *db, int broker, const char *topic, int queue_id);
int64_t rmq_devbroker_min_offset(rmq_devbroker_t *db, int broker, const char *topic, int queue_id);
int64_t rmq_devbroker_committed_offset(rmq_devbroker_t *db, int broker, const char *group,
                                       const char *topic, int queue_id);
int rmq_devbroker_group_size(rmq_devbroker_t *db, int broker, const char *group);
void rmq_log_set_level(int level);
int rmq_devbroker_lock_owner(rmq_devbroker_t *db, int broker, const char *group,
                             const char *topic, int queue_id, char *buf, size_t size);
]]
    cdefs_done = true
  end
  return helpers.lib()
end

-- Only errors in the log (the transport logs every connection at INFO).
function M.quiet() M.lib().rmq_log_set_level(0) end

M.NAMESRV, M.ALL, M.DISCONNECT = -1, -2, -1

-- Start an in-process development broker; returns db, name server address, lib.
function M.start(args)
  local lib = M.lib()
  local err = ffi.new("char[512]")
  local db = lib.rmq_devbroker_start(args or "", err, 512)
  assert(db ~= nil, "devbroker: " .. ffi.string(err))
  return db, ffi.string(lib.rmq_devbroker_addr(db)), lib
end

function M.broker_addr(db, i)
  return ffi.string(M.lib().rmq_devbroker_broker_addr(db, i or 0))
end

return M
