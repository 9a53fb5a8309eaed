-- rmq.handler: loading the script `rmqlua tail --handler SCRIPT` runs over the messages it reads.
--
-- The script returns either the handler itself, function(msgs, ctx), or a table with
-- consume = function(msgs, ctx) (so a consumer script works as it is: its subscribe, group and
-- options are not used), and may define init(ctx) and shutdown(ctx). The messages are the same
-- views a consumer gets; what the handler returns is reported, never acted upon (tail commits
-- no offset and sends nothing back), and rmq.send is not available.
--
-- Threads: loaded in the consume state that runs it (the consume pool's loader_module).
local M = {}

local function fail(path, msg) error(path .. ": " .. msg, 0) end

-- load(path) -> spec for rmq.dispatch ({ consume =, init =, shutdown = }); raises on problems.
function M.load(path)
  local f, err = io.open(path, "rb")
  if not f then fail(path, "cannot open: " .. tostring(err)) end
  local src = f:read("*a")
  f:close()
  local chunk, lerr = load(src, "@" .. path, "t")
  if not chunk then error(lerr, 0) end
  local ok, t = xpcall(chunk, function(e) return debug.traceback(tostring(e), 2) end)
  if not ok then error(t, 0) end
  if type(t) == "function" then return { consume = t } end
  if type(t) ~= "table" then
    fail(path, "a handler script returns function(msgs, ctx) or a table with consume, got "
      .. type(t))
  end
  if type(t.consume) ~= "function" then
    fail(path, "the returned table has no consume = function(msgs, ctx)"
      .. (t.consume_orderly and " (consume_orderly is not used by tail)" or ""))
  end
  for _, k in ipairs { "init", "shutdown" } do
    if t[k] ~= nil and type(t[k]) ~= "function" then
      fail(path, "hook '" .. k .. "' must be a function, got " .. type(t[k]))
    end
  end
  return { consume = t.consume, init = t.init, shutdown = t.shutdown }
end

return M
