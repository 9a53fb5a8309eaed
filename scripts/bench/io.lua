-- scripts/bench_io: see the header of that script.
local lib = require "lib"
local ffi = lib.ffi
lib.name = "bench_io"

local opt = lib.parse({ build = "string", quick = "flag", count = "number", delay = "list",
  threads = "number", model = "string", blocking = "flag", queues = "number", set = "multi",
  timeout = "number" },
  { count = 50000, delay = { 10, 50 }, threads = 20, model = "cosocket,blocking", queues = 8,
    set = {}, timeout = 600 }, arg, lib.ROOT .. "/scripts/bench_io")
if opt.quick then opt.count, opt.delay = 5000, { 10 } end
if opt.blocking then opt.model = "blocking" end
local models = {}
for m in opt.model:gmatch("[^,]+") do
  if m ~= "cosocket" and m ~= "blocking" and m ~= "redis" then
    lib.die("unknown model '%s' (cosocket, blocking, redis)", m)
  end
  models[#models + 1] = m
end
local HTTPD = os.getenv("RMQLUA_BENCH_HTTPD")
-- The redis model: Debian's lua-nginx-redis where scripts/deps --test unpacked it.
local NGX_LUA = os.getenv("RMQ_NGX_LUA") or "/usr/local/share/rmqlua-test/ngx-lua/usr/share/lua/5.1"
local TOPIC = "BenchIO"
local SLOT = 8 -- int64 words per consume thread: count, first ns, last ns, failed

local tmp = lib.tmpdir()
local machine = lib.machine()
local namesrv = lib.start_broker(string.format("--topic %s:%d", TOPIC, opt.queues), 512)
io.stderr:write(string.format("filling %s with %d x 100 B ...\n", TOPIC, opt.count))
lib.send(namesrv, string.format("--topic %s --count %d --size 100 --window 1024", TOPIC, opt.count))

-- The handlers (consume(msgs, ctx) bodies; URL, slot and the clock are set by the script).
local PRE = {
  cosocket = [[
local rmq = require "rmq"
local request = rmq.http.request
local function call()
  local res, err = request { url = URL, timeout = 30000 }
  return res ~= nil and res.status == 200, err
end
]],
  -- Debian's OpenResty Redis driver through the ngx shim: one INCR per message on a pooled
  -- connection (set_keepalive), waiting on the consume thread's event loop.
  redis = [[
local rmq = require "rmq"
local redis = require "nginx.redis"
local function call()
  local red = redis:new()
  red:set_timeouts(30000, 30000, 30000)
  local ok, err = red:connect("127.0.0.1", PORT)
  if not ok then return false, err end
  local n
  n, err = red:incr("bench_io")
  if not n then red:close(); return false, err end
  red:set_keepalive(60000, 4096)
  return true
end
]],
  -- A keep-alive connection per thread, blocking connect/send/recv through the FFI.
  blocking = [=[
pcall(ffi.cdef, [[
int rmqbio_socket(int, int, int) __asm__("socket");
int rmqbio_connect(int, const void *, unsigned) __asm__("connect");
long rmqbio_send(int, const void *, size_t, int) __asm__("send");
long rmqbio_recv(int, void *, size_t, int) __asm__("recv");
int rmqbio_close(int) __asm__("close");
]])
local fd = -1
local buf = ffi.new("char[4096]")
local REQ = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
local function open()
  local sa = ffi.new("uint8_t[16]")
  sa[0] = 2 -- AF_INET
  sa[2], sa[3] = bit.rshift(PORT, 8), bit.band(PORT, 255)
  sa[4], sa[5], sa[6], sa[7] = 127, 0, 0, 1
  fd = C.rmqbio_socket(2, 1, 0)
  if C.rmqbio_connect(fd, sa, 16) ~= 0 then C.rmqbio_close(fd); fd = -1 end
end
-- The answer to GET / is "HTTP/1.1 200 OK ... Content-Length: 2\r\n\r\nok": read up to it.
local function call()
  if fd < 0 then open() end
  if fd < 0 then return false, "connect failed" end
  if C.rmqbio_send(fd, REQ, #REQ, 0) ~= #REQ then C.rmqbio_close(fd); fd = -1; return false, "send" end
  local got = ""
  while not got:find("\r\n\r\nok", 1, true) do
    local n = C.rmqbio_recv(fd, buf, 4096, 0)
    if n <= 0 then C.rmqbio_close(fd); fd = -1; return false, "recv" end
    got = got .. ffi.string(buf, n)
  end
  return got:sub(1, 12) == "HTTP/1.1 200", got
end
]=],
}

local function script(model, group, cfile, size, port)
  local extra = model == "redis" and "  lua_ngx_shim = true,\n" or ""
  local pre = string.format("local URL = %q\nlocal PORT = %d\nlocal slot\n",
    "http://127.0.0.1:" .. port .. "/", port) .. PRE[model]
  return lib.consumer_script(pre, group, TOPIC, "FIRST", opt.threads, extra .. string.format([[
  consume_message_batch_max_size = 1,
  init = function(ctx) slot = map(%q, %d) + ctx.thread_index * %d end,
  consume = function(msgs)
    local s = slot
    if s[1] == 0 then s[1] = mono_ns() end
    for _ = 1, #msgs do
      if not call() then
        s[3] = s[3] + 1
        return false
      end
    end
    s[2] = mono_ns()
    s[0] = s[0] + #msgs
  end,
]], cfile, size, SLOT))
end

-- The most requests the server held at once: httpd_test's /stats, or Redis's connected clients
-- (one connection per request in flight).
local function stats(port, model)
  if model == "redis" then
    local p = io.popen(string.format("redis-cli -p %d info clients 2>/dev/null", port))
    local all = p:read("*a")
    p:close()
    return (tonumber(all:match("connected_clients:(%d+)")) or 1) - 1
  end
  local p = io.popen(string.format("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && printf "
    .. "\"GET /stats HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n\" >&3 && cat <&3' "
    .. "2>/dev/null", port))
  local all = p:read("*a")
  p:close()
  return tonumber(all:match('"peak":(%d+)')) or 0
end

local run_no = 0
local function run(model, delay)
  run_no = run_no + 1
  local hlog = string.format("%s/httpd.%d.log", tmp, run_no)
  local hpid, port
  if model == "redis" then
    port = lib.free_port()
    hpid = lib.spawn(string.format("redis-server --bind 127.0.0.1 --port %d --save '' "
      .. "--appendonly no --dir %s", port, lib.sh_quote(tmp)), hlog)
    local deadline = lib.now_ns() + 10e9
    while not (lib.read_file(hlog) or ""):find("Ready to accept connections", 1, true) do
      lib.sleep_ms(10)
      if lib.now_ns() > deadline then lib.fail("redis-server did not start:\n%s", lib.tail(hlog)) end
    end
  else
    hpid = lib.spawn(string.format("%s --delay %d", lib.sh_quote(HTTPD), delay), hlog)
    local deadline = lib.now_ns() + 10e9
    repeat
      lib.sleep_ms(10)
      port = tonumber((lib.read_file(hlog) or ""):match("PORT (%d+)"))
      if lib.now_ns() > deadline then lib.fail("httpd_test did not start:\n%s", lib.tail(hlog)) end
    until port
  end
  local size = (opt.threads + 1) * SLOT * 8
  local base, cfile = lib.shared("counters." .. run_no, size)
  local spath = string.format("%s/io_%d.lua", tmp, run_no)
  lib.write_file(spath, script(model, string.format("bench_io_%d_%d", lib.ffi.C.benchlib_getpid(),
    run_no), cfile, size, port))
  local sets = ""
  for _, kv in ipairs(opt.set) do sets = sets .. " --set " .. lib.sh_quote(kv) end
  local clog = string.format("%s/consumer.%d.log", tmp, run_no)
  local t0 = lib.now_ns()
  local env = model == "redis" and ("env LUA_PATH=" .. lib.sh_quote(NGX_LUA .. "/?.lua;;") .. " ") or ""
  local pid = lib.spawn(string.format("%s%s run --namesrv %s%s %s", env, lib.sh_quote(lib.BIN),
    namesrv, sets, lib.sh_quote(spath)), clog)
  local function total()
    local n, first, last, failed = 0, math.huge, 0, 0
    for k = 1, opt.threads do
      local s = base + k * SLOT
      n = n + tonumber(s[0])
      failed = failed + tonumber(s[3])
      if s[1] ~= 0 then first = math.min(first, tonumber(s[1])) end
      last = math.max(last, tonumber(s[2]))
    end
    return n, first, last, failed
  end
  local n, first, last, failed
  local limit = t0 + opt.timeout * 1e9
  while true do
    n, first, last, failed = total()
    if n >= opt.count then break end
    if not lib.alive(pid) then lib.fail("the consumer exited early:\n%s", lib.tail(clog)) end
    if lib.now_ns() > limit then
      lib.fail("consumed %d of %d in %d s:\n%s", n, opt.count, opt.timeout, lib.tail(clog))
    end
    lib.sleep_ms(5)
  end
  local hwm = lib.status_kb(pid, "VmHWM") or 0
  local peak = stats(port, model)
  lib.stop(pid)
  lib.stop(hpid)
  return { model = model, delay = delay, n = n, rate = opt.count / ((last - t0) / 1e9),
    steady = opt.count / math.max((last - first) / 1e9, 1e-9), rss = hwm / 1024, peak = peak,
    failed = failed }
end

local results = {}
for di, d in ipairs(opt.delay) do
  for _, m in ipairs(models) do
    if m == "redis" and di > 1 then goto next end -- Redis answers at once: one run
    io.stderr:write(string.format("run: %s, server delay %d ms, %d threads ...\n", m, d, opt.threads))
    local r = run(m, d)
    io.stderr:write(string.format("  %.0f msgs/s, %.1f MB peak RSS, %d in flight at most\n",
      r.rate, r.rss, r.peak))
    results[#results + 1] = r
    ::next::
  end
end

print(string.format("\nrmqlua I/O-bound handler: %d messages, one HTTP GET each to httpd_test, "
  .. "%d consume threads, batch 1%s", opt.count, opt.threads,
  #opt.set > 0 and (", " .. table.concat(opt.set, " ")) or ""))
print("machine: " .. machine)
print(string.format("%-9s %6s %8s %9s %7s %9s %7s %8s", "model", "delay", "msgs/s", "steady/s",
  "RSS MB", "in flight", "failed", "bound/s"))
for _, r in ipairs(results) do
  local redis = r.model == "redis"
  print(string.format("%-9s %6s %8.0f %9.0f %7.1f %9d %7d %8s", r.model,
    redis and "-" or (r.delay .. "ms"), r.rate, r.steady, r.rss, r.peak, r.failed,
    redis and "-" or string.format("%.0f", opt.threads * 1000 / r.delay)))
end
print([[
cosocket: rmq.http.request per message (the consume thread's event loop waits); blocking: a
blocking recv() per message on a kept-alive socket (the thread waits); redis: one INCR per
message with Debian's lua-nginx-redis through the ngx shim, on pooled connections. bound/s:
threads * 1000 / delay, the most the thread-holding model can do; in flight: the server's peak
of requests waiting for their answer (redis: the connections Redis held at the end, one per
request that was in flight at once).]])
lib.cleanup()
