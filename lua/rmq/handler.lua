-- rmq.handler: loading the script `rmqlua tail --handler SCRIPT` runs over the messages it reads.
--
-- The script returns either the handler itself, function(msgs, ctx), or a table with
-- consume = function(msgs, ctx) (so a consumer script works as it is: its subscribe, group and
-- options are not used), and may define init(ctx) and shutdown(ctx). The messages are the same
-- views a consumer gets; what the handler returns is reported, never acted upon (tail commits
-- no offset and sends nothing back), and rmq.send is not available.
--
-- Threads: loaded in the consume state that runs it (the consume pool's loader_module).
local script = require "rmq.script"

local M = {}

local function fail(path, msg) script.load_error(path .. ": " .. msg) end

-- load(path) -> spec for rmq.dispatch ({ consume =, init =, shutdown = }); raises on problems.
function M.load(path)
  local t = script.run_file_or_fail(path)
  if type(t) == "function" then return { consume = t } end
  if type(t) ~= "table" then
    fail(path, "a handler script returns function(msgs, ctx) or a table with consume, got "
      .. type(t))
  end
  if type(t.consume) ~= "function" then
    fail(path, "the returned table has no consume = function(msgs, ctx)"
      .. (t.consume_orderly and " (consume_orderly is not used by tail)" or ""))
  end
  script.check_init_shutdown(path, t)
  return { consume = t.consume, init = t.init, shutdown = t.shutdown }
end

return M
