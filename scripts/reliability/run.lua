-- run.lua: the reliability suite's driver, started by scripts/reliability.sh (which sets the
-- module paths, makes the work folder and stops every process left over when the run ends).
--
--   luajit run.lua --work DIR --root DIR --bin RMQLUA [--asan-bin RMQLUA] [--long | --soak]
--                  [--minutes M] [--rate R] [--namesrv ADDR] [--only 1,2,..] [--quiet]
--
-- Runs the scenarios (scenarios.lua): background ones (long waits, little CPU) alongside the
-- others, which run one at a time; prints the results table and exits 1 if any row failed.
local L = require "lib"
local Ctx = require "ctx"
local S = require "scenarios"
local NS = require "netns"
for id, sc in pairs(require "netfault") do S[id] = sc end
for id, sc in pairs(require "soak") do S[id] = sc end

local opts = {rate = 5000}
local i = 1
while i <= #arg do
  local a, v = arg[i], arg[i + 1]
  if a == "--work" then opts.work = v; i = i + 1
  elseif a == "--root" then opts.root = v; i = i + 1
  elseif a == "--bin" then opts.bin = v; i = i + 1
  elseif a == "--asan-bin" then opts.asan_bin = v ~= "" and v or nil; i = i + 1
  elseif a == "--namesrv" then opts.namesrv = v; i = i + 1
  elseif a == "--only" then opts.only = v; i = i + 1
  elseif a == "--minutes" then opts.minutes = tonumber(v); i = i + 1
  elseif a == "--rate" then opts.rate = tonumber(v); i = i + 1
  elseif a == "--long" then opts.long = true
  elseif a == "--soak" then opts.soak = true
  elseif a == "--quiet" then opts.quiet = true
  else
    io.stderr:write("run.lua: unknown argument " .. a .. "\n")
    os.exit(2)
  end
  i = i + 1
end
assert(opts.work and opts.root and opts.bin, "run.lua needs --work, --root and --bin")
opts.minutes = opts.minutes or (opts.soak and 30 or 12)
L.work, L.root, L.bin, L.asan_bin, L.namesrv, L.quiet = opts.work, opts.root, opts.bin,
  opts.asan_bin, opts.namesrv, opts.quiet
-- Is the build under test itself an ASan or a TSan build? (Memory bounds are then not checked.)
L.asan = os.execute("grep -q __asan_init " .. L.shq(L.bin) .. " 2>/dev/null") == 0
L.tsan = os.execute("grep -q __tsan_init " .. L.shq(L.bin) .. " 2>/dev/null") == 0
math.randomseed(L.now_ms() % 2147483647)

local selected = {}
if opts.only then
  for n in opts.only:gmatch("%d+") do selected[tonumber(n)] = true end
end
local ids = {}
for id = 1, table.maxn(S) do
  if opts.soak then
    if S[id] and S[id].soak then ids[#ids + 1] = id end
  elseif S[id] and not S[id].soak and (not opts.only or selected[id])
    and (not opts.long or id <= 5 or S[id].netns) then
    ids[#ids + 1] = id
  end
end

local rows = {}
local started = L.mono()

-- A sampler: peak memory of every live consumer, and RSS over time in --long mode.
local active = {}
local sampler_done = false
L.go("sampler", function()
  local last_series = L.mono()
  while not sampler_done do
    for ctx in pairs(active) do
      ctx:sample_mem()
      if opts.long and L.mono() - last_series >= 60 then
        local rss = 0
        for _, p in ipairs(ctx.procs) do
          if p.kind == "consumer" and p:alive() then
            local _, r = p:mem()
            rss = math.max(rss, r)
          end
        end
        ctx.rss_series[#ctx.rss_series + 1] = string.format("%dmin %.1fMB",
          math.floor((L.mono() - ctx.started) / 60 + 0.5), rss / 1024)
      end
    end
    if opts.long and L.mono() - last_series >= 60 then last_series = L.mono() end
    L.sleep(1)
  end
end)

local function run_one(id)
  local sc = S[id]
  local ctx = Ctx.new(id, opts.long and sc.long_title or sc.title)
  ctx.net = sc.netns
  rows[id] = ctx
  if L.namesrv and sc.dev then
    ctx.skip = "needs the development broker (not run with --namesrv)"
    return
  end
  if sc.netns then
    local ok, why = NS.available()
    if not ok then
      ctx.skip = "this network scenario " .. why
      ctx:log("skipped: this network scenario %s", why)
      return
    end
  end
  active[ctx] = true
  ctx:log("%s: start", ctx.title)
  local ok, err = xpcall(sc.run, debug.traceback, ctx, {long = opts.long or opts.soak, secs = opts.minutes * 60,
                                                        rate = opts.rate})
  if not ok then
    ctx.error = tostring(err)
    ctx:log("ERROR: %s", ctx.error)
    for _, p in ipairs(ctx.procs) do
      if p.kind == "consumer" and p:rc() == nil then ctx:note("%s log tail:\n%s", p.name, p:tail(8)) end
    end
  end
  local fok, ferr = xpcall(ctx.finish, debug.traceback, ctx)
  if not fok then ctx.error = (ctx.error or "") .. "\n" .. tostring(ferr) end
  for _, link in ipairs(ctx.links or {}) do link:remove() end
  active[ctx] = nil
  ctx.duration = L.mono() - ctx.started
  ctx:log("%s: done in %.0f s", ctx.title, ctx.duration)
end

local foreground, background = {}, {}
for _, id in ipairs(ids) do
  if S[id].background and not opts.long then
    background[#background + 1] = id
  else
    foreground[#foreground + 1] = id
  end
end
local pending = #background + 1
local function one_done()
  pending = pending - 1
  if pending == 0 then sampler_done = true end
end
for _, id in ipairs(background) do
  L.go("s" .. id, function() run_one(id); one_done() end)
end
L.go("foreground", function()
  for _, id in ipairs(foreground) do run_one(id) end
  one_done()
end)
L.run_tasks()

-- ---- the table ----------------------------------------------------------------------------------
local failed = 0
local lines = {}
local function add(s) lines[#lines + 1] = s end
add("| scenario | produced | consumed (distinct) | missing | duplicates | in DLQ | crashes | peak RSS | "
  .. "notice | recover | CPU (fault) | result |")
add("|---|---|---|---|---|---|---|---|---|---|---|---|")
for _, id in ipairs(ids) do
  local ctx = rows[id]
  local r = ctx.row
  local result
  if ctx.skip then
    result = "skipped"
  else
    local bad = {}
    if ctx.error then bad[#bad + 1] = "error" end
    for _, c in ipairs(ctx.checks) do if not c.ok then bad[#bad + 1] = c.text end end
    if #bad > 0 then
      failed = failed + 1
      result = "**FAIL**"
    else
      result = "ok"
    end
  end
  local function cell(v) return ctx.skip and "-" or L.num(v) end
  -- The network scenarios' columns: seconds (or "never" when it did not happen) and percent.
  local function s_cell(k)
    if ctx.skip or not ctx.net or r[k] == false then return "-" end
    return r[k] and string.format("%.1f s", r[k]) or "never"
  end
  add(string.format("| %d. %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |", id, ctx.title,
    cell(r.produced), cell(r.consumed), cell(r.missing), cell(r.dups),
    ctx.skip and "-" or L.num(r.dlq), cell(r.crashes),
    (ctx.skip or r.rss_kb == 0) and "-" or string.format("%.1f MB", r.rss_kb / 1024),
    s_cell("notice_s"), s_cell("recover_s"),
    (ctx.skip or not r.cpu_pct) and "-" or string.format("%.0f %%", r.cpu_pct), result))
end
local total = L.mono() - started
local mode = opts.long and string.format("--long (%d min per scenario at %d msgs/s)", opts.minutes, opts.rate)
  or opts.soak and string.format("--soak (%d min at %d msgs/s)", opts.minutes, opts.rate)
  or "short"
local target = opts.namesrv and ("cluster at " .. opts.namesrv) or "development broker"
local header = string.format("rmqlua reliability, %s mode, %s, %s%s: %.0f s", mode, L.bin, target,
  L.asan and " (ASan build)" or L.tsan and " (TSan build)" or "", total)

io.stdout:write("\n", header, "\n\n", table.concat(lines, "\n"), "\n\n")
for _, id in ipairs(ids) do
  local ctx = rows[id]
  local parts = {}
  if ctx.skip then parts[#parts + 1] = "skipped: " .. ctx.skip end
  if ctx.error then parts[#parts + 1] = "error: " .. ctx.error end
  for _, c in ipairs(ctx.checks) do
    parts[#parts + 1] = (c.ok and "ok   " or "FAIL ") .. c.text
  end
  for _, n in ipairs(ctx.notes) do parts[#parts + 1] = "note " .. n end
  if #ctx.rss_series > 0 then parts[#parts + 1] = "RSS over time: " .. table.concat(ctx.rss_series, ", ") end
  io.stdout:write(string.format("%d. %s (%.0f s)\n", id, ctx.title, ctx.duration or 0))
  for _, p in ipairs(parts) do io.stdout:write("   ", (p:gsub("\n", "\n     ")), "\n") end
end
io.stdout:write(string.format("\n%d of %d scenario(s) failed; %.0f s in all\n", failed, #ids, total))
os.exit(failed > 0 and 1 or 0)
