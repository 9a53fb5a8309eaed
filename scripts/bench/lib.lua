-- scripts/bench/lib.lua: what the consumer benchmarks (scripts/bench_*) share, run by the
-- plain luajit interpreter: options, child processes, /proc readings, the development broker,
-- shared counter files the consumer scripts write through mmap, the machine description and
-- the tables. Not a test and not part of the runtime.
local ffi = require "ffi"
local C = ffi.C

ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } benchlib_ts_t;
int benchlib_clock_gettime(int, benchlib_ts_t *) __asm__("clock_gettime");
int benchlib_fork(void) __asm__("fork");
int benchlib_execv(const char *, const char **) __asm__("execv");
void benchlib__exit(int) __asm__("_exit");
int benchlib_waitpid(int, int *, int) __asm__("waitpid");
int benchlib_kill(int, int) __asm__("kill");
int benchlib_usleep(unsigned) __asm__("usleep");
int benchlib_open(const char *, int, ...) __asm__("open");
int benchlib_close(int) __asm__("close");
int benchlib_dup2(int, int) __asm__("dup2");
int benchlib_ftruncate(int, long) __asm__("ftruncate");
void *benchlib_mmap(void *, size_t, int, int, int, long) __asm__("mmap");
int benchlib_munmap(void *, size_t) __asm__("munmap");
int benchlib_getpid(void) __asm__("getpid");
]]

local M = { ffi = ffi }

M.BIN = os.getenv("RMQLUA_BENCH_BIN")
-- The producer (`rmqlua send`, which needs --rate and --body-template) may come from another
-- build than the consumer under test, e.g. to measure an older consumer.
M.SEND_BIN = os.getenv("RMQLUA_BENCH_SEND_BIN") or M.BIN
M.ROOT = os.getenv("RMQLUA_BENCH_ROOT")

function M.die(fmt, ...)
  io.stderr:write(M.name or "bench", ": ", string.format(fmt, ...), "\n")
  os.exit(2)
end

function M.now_ns()
  local ts = ffi.new("benchlib_ts_t")
  C.benchlib_clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) * 1e9 + tonumber(ts.tv_nsec)
end

function M.real_us()
  local ts = ffi.new("benchlib_ts_t")
  C.benchlib_clock_gettime(0, ts) -- CLOCK_REALTIME
  return tonumber(ts.tv_sec) * 1e6 + math.floor(tonumber(ts.tv_nsec) / 1000)
end

function M.sleep_ms(ms) C.benchlib_usleep(math.floor(ms * 1000)) end

function M.sh_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local shq = M.sh_quote

function M.read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

function M.write_file(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

function M.tail(path, n)
  local s = M.read_file(path) or ""
  local lines = {}
  for l in s:gmatch("[^\n]+") do lines[#lines + 1] = l end
  return table.concat(lines, "\n", math.max(1, #lines - (n or 20) + 1))
end

-- ---- options: parse(spec, arg) with spec[name] = "number" | "list" | "string" | "flag" ------
function M.parse(spec, defaults, args, help_file)
  local opt = {}
  for k, v in pairs(defaults) do opt[k] = v end
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "-h" or a == "--help" then
      local f = io.open(help_file)
      for l in f:lines() do
        if l:sub(1, 1) ~= "#" then break end
        if l:sub(1, 2) ~= "#!" then print(l:sub(3)) end
      end
      os.exit(0)
    end
    local name = a:match("^%-%-([%w-]+)$")
    local kind = name and spec[name]
    if not kind then M.die("unknown option %s (see --help)", a) end
    local key = name:gsub("-", "_")
    if kind == "flag" then
      opt[key] = true
    else
      i = i + 1
      local v = args[i]
      if v == nil then M.die("%s needs a value", a) end
      if kind == "number" then
        local n = tonumber(v)
        if not n or n < 0 then M.die("%s needs a number, got '%s'", a, v) end
        opt[key] = n
      elseif kind == "list" then
        local t = {}
        for x in v:gmatch("[^,]+") do
          local n = tonumber(x)
          if not n or n <= 0 then M.die("%s: bad number '%s'", a, x) end
          t[#t + 1] = n
        end
        if #t == 0 then M.die("%s: empty list", a) end
        opt[key] = t
      elseif kind == "multi" then
        opt[key] = opt[key] or {}
        table.insert(opt[key], v)
      else
        opt[key] = v
      end
    end
    i = i + 1
  end
  return opt
end

-- ---- child processes -----------------------------------------------------------------------
local children = {}
local tmp

-- Start argv (a list; argv[1] is the program path) with stdout and stderr into log, without a
-- shell in between: the pid is the program's own, and its exec starts right after the fork.
function M.spawn_argv(argv, log)
  local n = #argv
  local cargv = ffi.new("const char *[?]", n + 1)
  for k = 1, n do cargv[k - 1] = argv[k] end
  cargv[n] = nil
  io.stdout:flush()
  io.stderr:flush()
  local pid = C.benchlib_fork()
  if pid < 0 then M.die("fork failed") end
  if pid == 0 then
    local fd = C.benchlib_open(log, 0x241, ffi.cast("int", 420)) -- O_WRONLY|O_CREAT|O_TRUNC, 0644
    if fd >= 0 then
      C.benchlib_dup2(fd, 1)
      C.benchlib_dup2(fd, 2)
      C.benchlib_close(fd)
    end
    C.benchlib_execv(argv[1], cargv)
    C.benchlib__exit(127)
  end
  children[#children + 1] = pid
  return pid, cargv
end

-- Start `sh -c "exec CMD >LOG 2>&1"`: the pid is CMD's own.
-- With M.nice set, at that nice value (negative needs root); with M.rt, under SCHED_FIFO at
-- that priority (root).
function M.spawn(cmd, log)
  if M.nice then cmd = string.format("nice -n %d %s", M.nice, cmd) end
  if M.rt then cmd = string.format("chrt -f %d %s", M.rt, cmd) end
  return (M.spawn_argv({ "/bin/sh", "-c", "exec " .. cmd }, log))
end

function M.alive(pid)
  local st = ffi.new("int[1]")
  local r = C.benchlib_waitpid(pid, st, 1) -- WNOHANG
  if r == pid or r < 0 then return false, st[0] end
  return true
end

function M.wait_exit(pid, ms)
  local deadline = M.now_ns() + ms * 1e6
  while M.now_ns() < deadline do
    local ok, st = M.alive(pid)
    if not ok then return st end
    M.sleep_ms(5)
  end
  return nil
end

function M.kill(pid, sig) C.benchlib_kill(pid, sig) end

function M.stop(pid, ms)
  if not pid or not M.alive(pid) then return end
  C.benchlib_kill(pid, 15)
  if not M.wait_exit(pid, ms or 20000) then
    C.benchlib_kill(pid, 9)
    M.wait_exit(pid, 5000)
  end
end

function M.tmpdir()
  if tmp then return tmp end
  local p = io.popen("mktemp -d /tmp/rmqlua-bench-XXXXXX")
  tmp = p:read("*l")
  p:close()
  assert(tmp and tmp ~= "", "mktemp failed")
  return tmp
end

function M.cleanup()
  for _, pid in ipairs(children) do M.stop(pid, 5000) end
  children = {}
  if tmp and os.getenv("RMQ_BENCH_KEEP") then
    io.stderr:write("(kept " .. tmp .. ")\n")
  elseif tmp then
    os.execute("rm -rf " .. shq(tmp))
  end
  tmp = nil
end

function M.fail(fmt, ...)
  io.stderr:write(M.name or "bench", ": ", string.format(fmt, ...), "\n")
  M.cleanup()
  os.exit(1)
end

-- ---- /proc ----------------------------------------------------------------------------------
-- CPU seconds of every thread of pid (schedstat: ns on CPU).
function M.cpu_s(pid)
  local p = io.popen("cat /proc/" .. pid .. "/task/*/schedstat 2>/dev/null")
  local total, seen = 0, false
  for l in p:lines() do
    local ns = tonumber(l:match("^(%d+)"))
    if ns then total, seen = total + ns, true end
  end
  p:close()
  return seen and total / 1e9 or nil
end

function M.status_kb(pid, key)
  local s = M.read_file("/proc/" .. pid .. "/status")
  return s and tonumber(s:match(key .. ":%s*(%d+)")) or nil
end

-- ---- the development broker ------------------------------------------------------------------
function M.free_port()
  math.randomseed(C.benchlib_getpid() + M.now_ns() % 1e6)
  local inuse = (M.read_file("/proc/net/tcp") or "") .. (M.read_file("/proc/net/tcp6") or "")
  for _ = 1, 100 do
    local port = 20000 + math.random(0, 30000)
    -- the broker listens on port .. port + 2 * brokers (and the VIP port - 2)
    local ok = true
    for d = -2, 12 do
      if inuse:find(string.format(":%04X ", port + d)) then ok = false end
    end
    if ok then return port end
  end
  M.die("no free port")
end

-- Start `rmqlua broker ARGS` on a free port; returns its name server address and pid.
function M.start_broker(args, max_mb)
  local port = M.free_port()
  local ns = "127.0.0.1:" .. port
  local blog = M.tmpdir() .. "/broker." .. port .. ".log"
  local pid = M.spawn(string.format("%s broker --listen %s --max-bytes %dM %s", shq(M.BIN), ns,
    max_mb or 512, args), blog)
  local deadline = M.now_ns() + 15e9
  while not (M.read_file(blog) or ""):find("name server at") do
    if not M.alive(pid) or M.now_ns() > deadline then
      M.fail("the development broker did not start:\n%s", M.tail(blog))
    end
    M.sleep_ms(20)
  end
  return ns, pid
end

-- `rmqlua send ...` to completion (or failure).
function M.send(namesrv, args, timeout_s)
  local slog = M.tmpdir() .. "/send." .. math.random(1e9) .. ".log"
  local pid = M.spawn(string.format("%s send --namesrv %s %s", shq(M.SEND_BIN), namesrv, args), slog)
  local st = M.wait_exit(pid, (timeout_s or 300) * 1000)
  if st == nil then
    M.kill(pid, 9)
    M.fail("rmqlua send did not finish in %d s", timeout_s or 300)
  end
  if st ~= 0 then M.fail("rmqlua send %s failed:\n%s", args, M.tail(slog)) end
  return M.tail(slog, 1)
end

-- Start `rmqlua send ...` in the background; returns its pid and log.
function M.send_bg(namesrv, args)
  local slog = M.tmpdir() .. "/send." .. math.random(1e9) .. ".log"
  return M.spawn(string.format("%s send --namesrv %s %s", shq(M.SEND_BIN), namesrv, args), slog), slog
end

-- ---- shared counter files ------------------------------------------------------------------
-- A zero-filled file of size bytes, mapped shared: the consumer scripts map the same file and
-- write into it; returns (pointer as int64_t *, path).
function M.shared(name, size)
  local path = M.tmpdir() .. "/" .. name
  local fd = C.benchlib_open(path, 0x42, ffi.cast("int", 420)) -- O_RDWR|O_CREAT
  assert(fd >= 0, "open " .. path)
  assert(C.benchlib_ftruncate(fd, size) == 0, "ftruncate")
  local p = C.benchlib_mmap(nil, size, 3, 1, fd, 0)
  C.benchlib_close(fd)
  assert(tonumber(ffi.cast("intptr_t", p)) ~= -1, "mmap")
  return ffi.cast("int64_t *", p), path
end

-- The consumer-side helper, as Lua source a script embeds: map(path, size) -> int64_t *.
M.SCRIPT_MAP = [=[
local ffi = require "ffi"
pcall(ffi.cdef, [[
typedef struct { long tv_sec; long tv_nsec; } rmqbench_ts_t;
int rmqbench_clock_gettime(int, rmqbench_ts_t *) __asm__("clock_gettime");
int rmqbench_open(const char *, int, ...) __asm__("open");
void *rmqbench_mmap(void *, size_t, int, int, int, long) __asm__("mmap");
int rmqbench_close(int) __asm__("close");
]])
local C = ffi.C
local ts = ffi.new("rmqbench_ts_t")
local function mono_ns()
  C.rmqbench_clock_gettime(1, ts)
  return ts.tv_sec * 1000000000LL + ts.tv_nsec
end
local function real_us()
  C.rmqbench_clock_gettime(0, ts)
  return ts.tv_sec * 1000000LL + ts.tv_nsec / 1000
end
local function map(path, size)
  local fd = C.rmqbench_open(path, 2)
  assert(fd >= 0, "open " .. path)
  local p = C.rmqbench_mmap(nil, size, 3, 1, fd, 0)
  C.rmqbench_close(fd)
  return ffi.cast("int64_t *", p)
end
]=]

-- A benchmark's consumer script: SCRIPT_MAP, then pre (Lua source before the script's table),
-- then the table: group, topic subscribed with "*", consume_from_where CONSUME_FROM_<from>_OFFSET
-- ("FIRST" or "LAST"), threads consume threads (min and max), and hooks (Lua source: the rest of
-- the table's fields).
function M.consumer_script(pre, group, topic, from, threads, hooks)
  return M.SCRIPT_MAP .. pre .. string.format([=[
return {
  consumer_group = %q,
  subscribe = { [%q] = "*" },
  consume_from_where = "CONSUME_FROM_%s_OFFSET",
  consume_thread_min = %d,
  consume_thread_max = %d,
]=], group, topic, from, threads, threads) .. hooks .. "}\n"
end

-- ---- the machine and the tables --------------------------------------------------------------
function M.machine()
  local cpu = (M.read_file("/proc/cpuinfo") or ""):match("model name%s*:%s*([^\n]+)") or "?"
  local function cmd(c)
    local p = io.popen(c)
    local v = p:read("*l") or "?"
    p:close()
    return v
  end
  local mem = tonumber((M.read_file("/proc/meminfo") or ""):match("MemTotal:%s*(%d+)")) or 0
  local la = (M.read_file("/proc/loadavg") or ""):match("^(%S+ %S+ %S+)") or "?"
  return string.format("%s, %s CPU(s), %.0f GiB RAM, %s, LuaJIT %s; load average %s at start; %s",
    cpu, cmd("nproc"), mem / 1048576, cmd("uname -sr"), cmd("luajit -v | cut -d' ' -f2"), la,
    os.date("!%Y-%m-%d %H:%M UTC"))
end

function M.median(t)
  local s = {}
  for i, v in ipairs(t) do s[i] = v end
  table.sort(s)
  local m = #s
  if m == 0 then return 0 end
  return m % 2 == 1 and s[(m + 1) / 2] or (s[m / 2] + s[m / 2 + 1]) / 2
end

-- Print rows (lists of strings) under headers, columns right-aligned except the first.
function M.table(headers, rows)
  local w = {}
  for c, h in ipairs(headers) do w[c] = #h end
  for _, r in ipairs(rows) do
    for c, v in ipairs(r) do w[c] = math.max(w[c] or 0, #tostring(v)) end
  end
  local function line(r)
    local out = {}
    for c, v in ipairs(r) do
      local s = tostring(v)
      out[c] = c == 1 and s .. string.rep(" ", w[c] - #s) or string.rep(" ", w[c] - #s) .. s
    end
    print(table.concat(out, "  "))
  end
  line(headers)
  for _, r in ipairs(rows) do line(r) end
end

-- The 1 KiB JSON order body (an `rmqlua send --body-template`): id, user, items, amount, text.
function M.order_template()
  local items = {}
  for i = 1, 4 do
    items[i] = string.format('{"sku":"SKU-{n%%%d}","name":"Item %d of the order","qty":%d,'
      .. '"price":%d.{n%%89}}', 9973 + i, i, i, 3 * i + 1)
  end
  local t = '{"sent_us":{now_us},"id":{n},"created_at":"2026-12-03T07:30:00.123Z",'
    .. '"user":"u{n%1000}","email":"customer{n%1000}@example.com","country":"DE",'
    .. '"items":[' .. table.concat(items, ",") .. '],"amount":{n%9973}.{n%97},'
    .. '"currency":"EUR","status":"NEW","paid":true,"coupon":null,"text":"'
  local text = string.rep("Lorem ipsum dolor sit amet, consectetur adipiscing elit. ", 20)
  local pad = 1024 + 24 - #t - 2 -- placeholders expand to about the bytes they take
  return t .. text:sub(1, pad) .. '"}'
end

return M
