-- rmq.script: loading and validating a consumer script (every role uses this).
--
-- A consumer script returns one table:
--   consumer_group = "name",                      -- option (any DefaultMQPushConsumer option in
--   consume_thread_min = 4, ...                   --   snake_case; Java defaults otherwise)
--   subscribe = { Topic = "TagA || TagB" },       -- topic -> tag expression ("*" for all), or a
--                                                 --   selector: rmq.sql92("a > 5") (SQL92)
--   consume = function(msgs, ctx) ... end,        -- or consume_orderly (exactly one)
--   allocate, init, shutdown, on_assign, on_revoke, on_stats  -- optional hooks
--   shared = { counters = "16m" },                -- shared dictionaries (rmq.shared.NAME)
-- Option values are strings, numbers or booleans; enumerated options take the Java constant's
-- name as a string. Errors name the file and the line.
local M = {}

M.HOOKS = { consume = true, consume_orderly = true, allocate = true, init = true,
  shutdown = true, on_assign = true, on_revoke = true, on_stats = true }

-- Read the Lua file at path and run it as a chunk of text named "@path" (an error while it runs
-- comes with a traceback; a load or run error is raised as it is). Returns its source and what it
-- returned, or nil and why when the file cannot be read ("<path>: Is a directory", ...).
-- Consumer scripts, `rmqlua tail --handler` and `rmqlua redrive --where` scripts load through it.
-- The message handler of run_file: the error with the frames of the script (and of what it
-- called), not those of rmqlua's loader below it.
local function script_traceback(e)
  local tb = debug.traceback(tostring(e), 1)
  local out = {}
  for line in tb:gmatch("[^\n]+") do
    if line:find("in function 'xpcall'", 1, true) then break end
    if not line:find("^%s*%[C%]: in function 'error'") and not line:find("rmq/script.lua:", 1, true) then
      out[#out + 1] = line
    end
  end
  if out[#out] == "stack traceback:" then out[#out] = nil end
  return table.concat(out, "\n")
end

function M.run_file(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, tostring(err) end
  local src, rerr = f:read("*a")
  f:close()
  if not src then return nil, path .. ": " .. tostring(rerr) end
  local chunk, lerr = load(src, "@" .. path, "t")
  if not chunk then error(lerr, 0) end
  local ok, t = xpcall(chunk, script_traceback)
  if not ok then error(t, 0) end
  return src, t
end

-- An error about a script that is the whole story: raised as an object whose __tostring is the
-- message, so the runtime's protected calls (lua_state.c: traceback) print it without a Lua
-- traceback of rmqlua's own modules.
local load_error_mt = { __tostring = function(e) return e.message end }
function M.load_error(msg)
  error(setmetatable({ message = msg }, load_error_mt), 0)
end

-- run_file for the loaders of `rmqlua tail --handler` and `rmqlua redrive --where`: what it
-- returned, or a load_error naming the file (a syntax error, an error while the chunk runs, with
-- the script's own traceback, a file that cannot be read).
function M.run_file_or_fail(path)
  local ok, src, t = pcall(M.run_file, path)
  if not ok then M.load_error(tostring(src)) end
  if not src then M.load_error("cannot open " .. t) end -- t names the path
  return t
end

-- Raises "path: hook 'init' must be a function, got ..." (or shutdown) for a script that returned
-- the table t (of a `rmqlua tail --handler` or `rmqlua redrive --where` script).
function M.check_init_shutdown(path, t)
  for _, k in ipairs { "init", "shutdown" } do
    if t[k] ~= nil and type(t[k]) ~= "function" then
      error(path .. ": hook '" .. k .. "' must be a function, got " .. type(t[k]), 0)
    end
  end
end

local function lines_of(src)
  local t = {}
  for l in (src .. "\n"):gmatch("([^\n]*)\n") do t[#t + 1] = l end
  return t
end

-- The line of the last top-level `return` (where the script's table is built).
local function return_line(lines)
  for i = #lines, 1, -1 do
    if lines[i]:find("^return%f[^%w_]") then return i end
  end
  for i = #lines, 1, -1 do
    if lines[i]:find("^%s*return%f[^%w_]") then return i end
  end
  return #lines
end

local function esc(s) return (s:gsub("%p", "%%%0")) end

-- The line where key is set in the returned table (searching from the return first).
local function key_line(lines, key, from)
  local k = esc(key)
  local pats = { "%f[%w_]" .. k .. "%s*=[^=]", "%[%s*[\"']" .. k .. "[\"']%s*%]%s*=[^=]" }
  for _, range in ipairs({ { from, #lines }, { 1, from - 1 } }) do
    for i = range[1], range[2] do
      local l = lines[i] .. " "
      for _, p in ipairs(pats) do
        if l:find(p) then return i end
      end
    end
  end
  return from
end

local function fmt_number(v)
  if v == math.floor(v) and v >= -2 ^ 63 and v <= 2 ^ 63 then
    return string.format("%d", v)
  end
  return tostring(v)
end

-- lua_ngx_shim: the global `ngx` (rmq.ngx) for OpenResty's drivers. A state that knows the
-- option (rmq.host.ngx_shim: the consume states, `rmqlua check` and `rmqlua test`) installs it
-- before the script runs when it is on; the control state, which learns the options from the
-- script's table, installs it for the load and keeps it only when the table turns it on.
local NGX_HINT = " (the global ngx is OpenResty's API: set lua_ngx_shim = true in the script's "
  .. "table or --set lua_ngx_shim=true to have rmqlua's ngx shim installed, or use "
  .. "require \"rmq.ngx\")"

local function run_script(path)
  local want = (package.loaded["rmq.host"] or {}).ngx_shim
  local provisional = false
  if want ~= false and rawget(_G, "ngx") == nil then
    rawset(_G, "ngx", require "rmq.ngx")
    provisional = want == nil
  end
  local ok, src, t = pcall(M.run_file, path)
  if not ok then
    if want == false and tostring(src):find("global 'ngx'", 1, true) then
      src = tostring(src):gsub("^[^\n]*", "%0" .. NGX_HINT:gsub("%%", "%%%%"), 1)
    end
    error(src, 0)
  end
  if provisional then
    local v = type(t) == "table" and t.lua_ngx_shim
    if v ~= true and v ~= "true" then rawset(_G, "ngx", nil) end
  end
  return src, t
end

--[[
load(path) -> spec
  spec = the returned table, plus spec.__options = { {name=, value=, line=}... } (source order),
  spec.__subscribe = { {topic=, expression=, type= "TAG"|"SQL92", line=}... }, spec.__path = path.
Raises "path:line: message" on any problem (syntax, run-time error, contract, option types).
]]
local function load_script(path)
  local src, t = run_script(path)
  if not src then error("cannot open script " .. t, 0) end -- t names the path
  local lines = lines_of(src)
  local rl = return_line(lines)
  local function fail(line, msg) error({ config = path .. ":" .. line .. ": " .. msg }, 0) end
  if type(t) ~= "table" then
    fail(rl, "the script must return a table (consumer_group, subscribe, consume, ...), got "
      .. type(t))
  end
  for k, v in pairs(t) do
    if type(k) ~= "string" then
      fail(rl, "unexpected entry [" .. tostring(k) .. "] in the returned table (options are "
        .. "name = value)")
    end
    if M.HOOKS[k] and type(v) ~= "function" then
      fail(key_line(lines, k, rl), "hook '" .. k .. "' must be a function, got " .. type(v))
    end
  end
  if t.consume == nil and t.consume_orderly == nil then
    fail(rl, "the script defines no handler: return a table with consume = function(msgs, ctx) "
      .. "... end (or consume_orderly)")
  end
  if t.consume ~= nil and t.consume_orderly ~= nil then
    fail(key_line(lines, "consume_orderly", rl),
      "the script defines both consume and consume_orderly; keep one")
  end
  local subs = {}
  local s = t.subscribe
  if s == nil then
    fail(rl, "the script has no subscribe table (subscribe = { Topic = \"*\" })")
  end
  local sl = key_line(lines, "subscribe", rl)
  if type(s) ~= "table" then
    fail(sl, "subscribe must be a table of topic = tag expression, got " .. type(s))
  end
  for topic, expr in pairs(s) do
    if type(topic) ~= "string" then
      fail(sl, "subscribe: keys must be topic names, got " .. tostring(topic))
    end
    local line = key_line(lines, topic, sl)
    local etype = "TAG"
    if expr == true then expr = "*" end
    if type(expr) == "table" then
      -- A selector table, as MessageSelector.bySql / byTag build it (rmq.sql92(...) makes one).
      for k in pairs(expr) do
        if k ~= "type" and k ~= "expression" then
          fail(line, "subscribe." .. topic .. ": unknown key '" .. tostring(k)
            .. "' in the selector (type, expression)")
        end
      end
      etype = expr.type == nil and "TAG" or expr.type
      if etype ~= "TAG" and etype ~= "SQL92" then
        fail(line, "subscribe." .. topic .. ": type must be \"TAG\" or \"SQL92\", got "
          .. tostring(etype))
      end
      expr = expr.expression
      if type(expr) ~= "string" then
        fail(line, "subscribe." .. topic .. ": expression must be a string, got " .. type(expr))
      end
    elseif type(expr) ~= "string" then
      fail(line, "subscribe." .. topic
        .. ": the tag expression must be a string (\"*\", \"TagA || TagB\") or a selector table "
        .. "(rmq.sql92(\"a > 5\")), got " .. type(expr))
    end
    subs[#subs + 1] = { topic = topic, expression = expr, type = etype, line = line }
  end
  if #subs == 0 then fail(sl, "subscribe is empty: subscribe to at least one topic") end
  table.sort(subs, function(a, b)
    if a.line ~= b.line then return a.line < b.line end
    return a.topic < b.topic
  end)
  local shared = {}
  if t.shared ~= nil then
    local shl = key_line(lines, "shared", rl)
    if type(t.shared) ~= "table" then
      fail(shl, "shared must be a table of name = size (shared = { counters = \"16m\" }), got "
        .. type(t.shared))
    end
    local shmod = require "rmq.shared"
    for name, size in pairs(t.shared) do
      if type(name) ~= "string" or not name:find("^[%a_][%w_]*$") or #name > 64 then
        fail(shl, "shared: bad dictionary name " .. tostring(name)
          .. " (a Lua identifier of at most 64 characters)")
      end
      local line = key_line(lines, name, shl)
      local bytes, serr = shmod.parse_size(size)
      if not bytes then fail(line, "shared." .. name .. ": " .. serr) end
      if bytes < shmod.MIN_SIZE then
        fail(line, "shared." .. name .. ": size " .. tostring(size)
          .. " is below the minimum of 8k (8192 bytes)")
      end
      shared[#shared + 1] = { name = name, size = bytes, line = line }
    end
    table.sort(shared, function(a, b) return a.name < b.name end)
  end
  local opts = {}
  for k, v in pairs(t) do
    if not M.HOOKS[k] and k ~= "subscribe" and k ~= "shared" then
      local line = key_line(lines, k, rl)
      local tv, text = type(v), nil
      if tv == "string" then text = v
      elseif tv == "number" then text = fmt_number(v)
      elseif tv == "boolean" then text = tostring(v)
      elseif tv == "function" then
        fail(line, "unknown hook or option '" .. k .. "' (hooks: consume, consume_orderly, "
          .. "allocate, init, shutdown, on_assign, on_revoke, on_stats)")
      else
        fail(line, "option '" .. k .. "' must be a string, number or boolean, got " .. tv)
      end
      opts[#opts + 1] = { name = k, value = text, line = line }
    end
  end
  table.sort(opts, function(a, b)
    if a.line ~= b.line then return a.line < b.line end
    return a.name < b.name
  end)
  if #shared > 0 then
    local ok, line, derr = require("rmq.shared").declare(shared)
    if not ok then fail(line, derr) end
  end
  t.__options = opts
  t.__subscribe = subs
  t.__shared = shared
  t.__path = path
  t.__return_line = rl
  return t
end

-- The script's file and the files of the modules loaded so far from the script's own folder
-- (what `rmqlua run --watch` polls), the script first.
function M.local_files(path)
  local dir = path:match("^(.*)/[^/]*$") or "."
  if dir == "" then dir = "/" end
  local tmpl = dir .. "/?.lua;" .. dir .. "/?/init.lua"
  local files, seen = { path }, { [path] = true }
  local names = {}
  for name in pairs(package.loaded) do
    if type(name) == "string" then names[#names + 1] = name end
  end
  table.sort(names)
  for _, name in ipairs(names) do
    local f = package.searchpath(name, tmpl)
    if f and not seen[f] then
      seen[f] = true
      files[#files + 1] = f
    end
  end
  return files
end

-- load(path) -> spec; raises "path:line: message" for every kind of problem.
function M.load(path)
  local ok, t = pcall(load_script, path)
  if ok then return t end
  if type(t) == "table" then error(t.config, 0) end
  error(t, 0)
end

-- try_load(path) -> spec | nil, message, kind ("config" for the contract and option types,
-- "lua" for syntax and run-time errors of the script).
function M.try_load(path)
  local ok, t = pcall(load_script, path)
  if ok then return t end
  if type(t) == "table" then return nil, t.config, "config" end
  return nil, tostring(t), "lua"
end

return M
