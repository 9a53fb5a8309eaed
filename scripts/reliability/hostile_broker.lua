-- hostile_broker.lua: a fake broker for the reliability suite (scripts/reliability.sh, scenario
-- "hostile broker"). It registers with a name server as one more broker of the cluster serving
-- a topic (read-only queues, so producers never pick it), then answers every request it gets
-- with a response captured from a real Apache RocketMQ 4.9.4 broker (spec/fixtures/wire), mutated:
-- lying frame lengths, truncated or cut headers, broken JSON headers, wrong opaques, garbage in
-- pulled message bodies, nonsense numbers in header fields, huge frames, random bytes, no answer
-- at all or a closed connection; now and then it also sends a mutated captured request of its
-- own (broker-initiated calls). A client must log, drop that response or connection, and carry on.
--
--   luajit hostile_broker.lua --namesrv ADDR --topic T [--queues N] [--name NAME]
--                             [--cluster C] --fixtures DIR
--
-- Prints "hostile: listening on ADDR" once registered, then every 5 s a line
-- "hostile: C connection(s), R request(s), actions: a=n b=m ..." (the last one is the total).
-- Stops on SIGTERM/SIGKILL (it holds nothing worth a clean stop). Single-threaded: one poll loop
-- over non-blocking sockets, the name-server connection (blocking, a registration every 20 s).
local ffi = require "ffi"
local bit = require "bit"
local raw = require "rawclient"

pcall(ffi.cdef, [[
  struct hb_sockaddr_in { unsigned short family; unsigned short port; unsigned char addr[4]; unsigned char zero[8]; };
  struct hb_pollfd { int fd; short events; short revents; };
  int socket(int domain, int type, int protocol);
  int bind(int fd, const void *addr, unsigned int len);
  int listen(int fd, int backlog);
  int accept4(int fd, void *addr, void *len, int flags);
  int getsockname(int fd, void *addr, unsigned int *len);
  int setsockopt(int fd, int level, int name, const void *val, unsigned int len);
  long send(int fd, const void *buf, unsigned long n, int flags);
  long recv(int fd, void *buf, unsigned long n, int flags);
  int close(int fd);
  int poll(void *fds, unsigned long nfds, int timeout);
  unsigned short htons(unsigned short v);
  unsigned short ntohs(unsigned short v);
  int fcntl(int fd, int cmd, ...);
]])
local C = ffi.C

local opt = {queues = 4, name = "hostile", cluster = "DefaultCluster"}
local i = 1
while i <= #arg do
  local k = arg[i]:gsub("^%-%-", "")
  opt[k] = arg[i + 1]
  i = i + 2
end
assert(opt.namesrv and opt.topic and opt.fixtures, "usage: hostile_broker.lua --namesrv ADDR --topic T --fixtures DIR")
opt.queues = tonumber(opt.queues)
math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)") or "0", 16) % 100000)

-- ---- captured frames -------------------------------------------------------------------------
local responses, requests, all_responses = {}, {}, {}
do
  local p = io.popen("ls " .. opt.fixtures .. "/*/*.bin")
  for path in p:lines() do
    local code, kind = path:match("/%d+%-(%d+)%-[%w_]+%.(%a+)%.bin$")
    code = tonumber(code)
    local f = io.open(path, "rb")
    local data = f:read("*a")
    f:close()
    if code and kind == "response" then
      responses[code] = responses[code] or {}
      table.insert(responses[code], data)
      all_responses[#all_responses + 1] = data
    elseif code and (code == 40 or code == 307 or code == 220 or code == 222 or code == 309) then
      requests[#requests + 1] = data -- broker-initiated calls a client serves
    end
  end
  p:close()
  assert(#all_responses > 0, "no captured responses under " .. opt.fixtures)
end

local be32, rd32 = raw.be32, raw.rd32

-- A frame with its header's opaque set (JSON text or ROCKETMQ binary header).
local function with_opaque(frame, opaque)
  local ht = rd32(frame, 5)
  local ser, hlen = math.floor(ht / 16777216), ht % 16777216
  local h = frame:sub(9, 8 + hlen)
  local rest = frame:sub(9 + hlen)
  if ser == 0 then
    h = h:gsub('"opaque":%-?%d+', '"opaque":' .. opaque, 1)
  elseif #h >= 10 then
    h = h:sub(1, 5) .. be32(opaque) .. h:sub(10)
  end
  return be32(4 + #h + #rest) .. string.char(ser) .. be32(#h):sub(2) .. h .. rest
end

local function rand_bytes(n)
  local t = {}
  for k = 1, n do t[k] = string.char(math.random(0, 255)) end
  return table.concat(t)
end

local function flip(s, n)
  if #s == 0 then return s end
  local buf = ffi.new("uint8_t[?]", #s)
  ffi.copy(buf, s, #s)
  for _ = 1, n do buf[math.random(0, #s - 1)] = math.random(0, 255) end
  return ffi.string(buf, #s)
end

local function header_len(frame) return rd32(frame, 5) % 16777216 end

-- Mutations: each takes a response frame (opaque already right) and returns the bytes to send
-- and whether to close the connection afterwards.
local odd_numbers = {"-1", "-9223372036854775808", "9223372036854775807", "99999999999999999999",
                     "abc", "", "1e9", "0x10", "-0", "2147483648", " 7", "1.5"}
local mutations = {
  lying_length_long = function(f)
    -- The client waits for the missing bytes and takes them from the next answers (a few of
    -- them: with up to 4 KiB missing, a connection answering every 2 s stayed silent a minute).
    return be32(rd32(f, 1) + math.random(1, 512)) .. f:sub(5), false
  end,
  lying_length_short = function(f)
    local l = rd32(f, 1)
    return be32(math.max(4, l - math.random(1, math.max(1, l - 4)))) .. f:sub(5), math.random() < 0.5
  end,
  negative_length = function(f) return be32(0xFFFFFFF0) .. f:sub(5, 64), true end,
  huge_frame = function(f) return be32(64 * 1024 * 1024) .. f:sub(5, 4096), true end,
  header_longer_than_frame = function(f)
    local ser = f:byte(5)
    return f:sub(1, 4) .. string.char(ser) .. be32(rd32(f, 1) + math.random(1, 100)):sub(2) .. f:sub(9), false
  end,
  truncated_header = function(f)
    local cut = 8 + math.random(0, math.max(0, header_len(f) - 1))
    local part = f:sub(9, cut)
    return be32(4 + #part) .. f:sub(5, 8) .. part, false
  end,
  cut_and_close = function(f) return f:sub(1, math.random(1, #f - 1)), true end,
  bad_json = function(f)
    local hl = header_len(f)
    local h = f:sub(9, 8 + hl)
    local choice = math.random(4)
    if choice == 1 then h = h:gsub("[{}]", "", 1)
    elseif choice == 2 then h = h:gsub(":", ":{", 1)
    elseif choice == 3 then h = h:sub(1, math.floor(#h / 2)) .. rand_bytes(8) .. h:sub(math.floor(#h / 2) + 1)
    else h = flip(h, math.random(1, 5)) end
    local rest = f:sub(9 + hl)
    return be32(4 + #h + #rest) .. f:sub(5, 5) .. be32(#h):sub(2) .. h .. rest, false
  end,
  unknown_serialize_type = function(f) return f:sub(1, 4) .. string.char(math.random(2, 255)) .. f:sub(6), false end,
  wrong_opaque = function(f, req)
    return with_opaque(f, (req.opaque or 0) + math.random(1, 1000000)), false
  end,
  odd_header_numbers = function(f)
    local hl = header_len(f)
    local h = f:sub(9, 8 + hl):gsub('("%w+":")(%-?%d+)(")', function(a, _, c)
      if math.random() < 0.6 then return a .. odd_numbers[math.random(#odd_numbers)] .. c end
    end)
    h = h:gsub('("code":)(%-?%d+)', function(a) if math.random() < 0.2 then return a .. math.random(-5, 300) end end)
    local rest = f:sub(9 + hl)
    return be32(4 + #h + #rest) .. f:sub(5, 5) .. be32(#h):sub(2) .. h .. rest, false
  end,
  garbage_body = function(f)
    local hl = header_len(f)
    local body = f:sub(9 + hl)
    if #body == 0 then body = rand_bytes(math.random(1, 300)) end
    local choice = math.random(4)
    if choice == 1 then
      body = flip(body, math.random(1, 20))
    elseif choice == 2 and #body >= 8 then -- a stored message's TOTALSIZE lies
      local sizes = {0, 1, 7, 0x7FFFFFFF, 0xFFFFFFFF, #body + 1, math.random(8, 200)}
      body = be32(sizes[math.random(#sizes)]) .. body:sub(5)
    elseif choice == 3 then -- cut in the middle of a message
      body = body:sub(1, math.random(1, #body))
    else -- a field deep inside (body length, topic length, properties length) lies
      local at = math.random(1, math.max(1, #body - 4))
      body = body:sub(1, at - 1) .. be32(math.random(0, 0x7FFFFFFF)) .. body:sub(at + 4)
    end
    return be32(4 + hl + #body) .. f:sub(5, 8 + hl) .. body, false
  end,
  random_bytes = function() return rand_bytes(math.random(1, 512)), true end,
  silence = function() return "", false end,
  intact = function(f) return f, false end,
  close = function() return "", true end,
}
local names = {}
for k in pairs(mutations) do if k ~= "intact" then names[#names + 1] = k end end
table.sort(names)

local stats = {conns = 0, requests = 0, actions = {}, unsolicited = 0}

-- A well-formed JSON response.
local function plain(req, code, ext)
  local e = {}
  for k, v in pairs(ext or {}) do e[#e + 1] = string.format('"%s":"%s"', k, v) end
  local h = string.format('{"code":%d,"extFields":{%s},"flag":1,"language":"JAVA","opaque":%d,"serializeTypeCurrentRPC":"JSON","version":401}',
    code, table.concat(e, ","), req.opaque or 0)
  return be32(4 + #h) .. be32(#h) .. h
end

-- What to send for request req (decoded), or "" and close flag.
local function answer(req)
  -- Some honest answers keep the client talking: mostly a start offset for its queues here
  -- and an accepted heartbeat. A bad answer closes the client's connection with every request
  -- in flight on it, and a queue without a start offset waits for the next rebalance (20 s):
  -- with fewer honest answers the client would hardly ever get as far as pulling here.
  if (req.code == 14 and math.random() < 0.9) or (req.code == 34 and math.random() < 0.8) then
    stats.actions.honest = (stats.actions.honest or 0) + 1
    return plain(req, 0, req.code == 14 and {offset = "0"} or nil), false
  end
  local pool = responses[req.code]
  if not pool or math.random() < 0.2 then pool = all_responses end
  local f = with_opaque(pool[math.random(#pool)], req.opaque or 0)
  local name = names[math.random(#names)]
  if req.code == 11 then
    local r = math.random()
    if r < 0.4 then name = "garbage_body" elseif r < 0.5 then name = "intact"
    elseif name == "silence" then name = "odd_header_numbers" end -- a silent pull waits 30 s
  end
  stats.actions[name] = (stats.actions[name] or 0) + 1
  local out, close = mutations[name](f, req)
  if #requests > 0 and math.random() < 0.1 then
    stats.unsolicited = stats.unsolicited + 1
    local r = with_opaque(requests[math.random(#requests)], math.random(1, 100000))
    local m = names[math.random(#names)]
    local extra = mutations[m](r, {opaque = 0})
    out = extra .. out
  end
  return out, close
end

-- ---- sockets -----------------------------------------------------------------------------------
local function nonblock(fd) C.fcntl(fd, 4, bit.bor(C.fcntl(fd, 3), 2048)) end -- O_NONBLOCK

local lfd = C.socket(2, 1, 0)
do
  local one = ffi.new("int[1]", 1)
  C.setsockopt(lfd, 1, 2, one, 4) -- SO_REUSEADDR
  local sa = ffi.new("struct hb_sockaddr_in")
  sa.family = 2
  sa.addr[0], sa.addr[1], sa.addr[2], sa.addr[3] = 127, 0, 0, 1
  assert(C.bind(lfd, sa, ffi.sizeof(sa)) == 0, "bind failed")
  assert(C.listen(lfd, 64) == 0, "listen failed")
  local len = ffi.new("unsigned int[1]", ffi.sizeof(sa))
  C.getsockname(lfd, sa, len)
  opt.addr = "127.0.0.1:" .. C.ntohs(sa.port)
  nonblock(lfd)
end

local ns_conn
local function register()
  if not ns_conn then ns_conn = raw.connect(opt.namesrv) end
  if not ns_conn then return false end
  local tc = string.format('{"%s":{"order":false,"perm":4,"readQueueNums":%d,"topicFilterType":"SINGLE_TAG","topicName":"%s","topicSysFlag":0,"writeQueueNums":0}}',
    opt.topic, opt.queues, opt.topic)
  local body = string.format('{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"timestamp":%d},"topicConfigTable":%s}}',
    os.time() * 1000, tc)
  local r = ns_conn:request(103, {brokerAddr = opt.addr, brokerName = opt.name, clusterName = opt.cluster,
    brokerId = "0", haServerAddr = opt.addr, compressed = "false", bodyCrc32 = "0"}, body, {timeout = 3})
  if not r then
    ns_conn:close()
    ns_conn = nil
    return false
  end
  return r.code == 0
end

assert(register(), "could not register with the name server at " .. opt.namesrv)
io.stdout:setvbuf("line")
print("hostile: listening on " .. opt.addr .. " as broker " .. opt.name)

local conns = {} -- fd -> {buf =, out =, close =}
local last_reg, last_stats = os.time(), os.time()

local function print_stats()
  local t = {}
  for n, v in pairs(stats.actions) do t[#t + 1] = n .. "=" .. v end
  table.sort(t)
  print(string.format("hostile: %d connection(s), %d request(s), %d unsolicited call(s), actions: %s",
    stats.conns, stats.requests, stats.unsolicited, table.concat(t, " ")))
end

local rbuf = ffi.new("char[65536]")
while true do
  local fds, list = {}, {}
  fds[1] = {lfd, 1}
  for fd, c in pairs(conns) do
    fds[#fds + 1] = {fd, (#c.out > 0) and 5 or 1}
    list[#list + 1] = fd
  end
  local pfd = ffi.new("struct hb_pollfd[?]", #fds)
  for k, v in ipairs(fds) do pfd[k - 1].fd, pfd[k - 1].events = v[1], v[2] end
  C.poll(pfd, #fds, 200)
  for k = 0, #fds - 1 do
    local fd, re = pfd[k].fd, pfd[k].revents
    if fd == lfd then
      if bit.band(re, 1) ~= 0 then
        local cfd = C.accept4(lfd, nil, nil, 2048)
        if cfd >= 0 then
          conns[cfd] = {buf = "", out = ""}
          stats.conns = stats.conns + 1
        end
      end
    elseif conns[fd] then
      local c = conns[fd]
      if bit.band(re, 1 + 8 + 16) ~= 0 then -- POLLIN, POLLERR, POLLHUP
        local n = tonumber(C.recv(fd, rbuf, 65536, 0))
        if n and n > 0 then
          c.buf = c.buf .. ffi.string(rbuf, n)
        elseif n == 0 or bit.band(re, 8 + 16) ~= 0 then
          c.dead = true
        end
      end
      -- Frames in: answer each one.
      while not c.dead and #c.buf >= 4 do
        local total = rd32(c.buf, 1)
        if total > 16 * 1024 * 1024 or total < 4 then c.dead = true break end
        if #c.buf < 4 + total then break end
        local frame = c.buf:sub(1, 4 + total)
        c.buf = c.buf:sub(5 + total)
        stats.requests = stats.requests + 1
        local ok, req = pcall(raw.decode, frame)
        if not ok then req = {code = -1, opaque = 0, flag = 0} end
        if bit.band(req.flag or 0, 2) == 0 and bit.band(req.flag or 0, 1) == 0 then -- a request, not oneway
          local out, close = answer(req)
          c.out = c.out .. out
          if close then c.close_after = true end
        end
      end
      if #c.out > 0 and bit.band(re, 4) ~= 0 or #c.out > 0 then
        local n = tonumber(C.send(fd, c.out, #c.out, 0x4000))
        if n and n > 0 then c.out = c.out:sub(n + 1) end
      end
      if c.dead or (c.close_after and #c.out == 0) then
        C.close(fd)
        conns[fd] = nil
      end
    end
  end
  local now = os.time()
  if now - last_reg >= 20 then
    last_reg = now
    register()
  end
  if now - last_stats >= 5 then
    last_stats = now
    print_stats()
  end
end
