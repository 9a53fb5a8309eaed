-- Shared by the interop specs with the independent npm client ali-ons 3.12.0 (spec/node): the
-- switch that skips them on a machine without the npm registry (RMQ_SKIP_INTEROP=1), `npm ci`
-- in spec/node the first time, and a node script run with JSON options.
--
--   local ons = require "02-integration.05-interop.ons"
--   if ons.skip then describe("...", function() pending(ons.skip) end) return end
local helpers = require "helpers"
local cjson = require "cjson"

local shq = helpers.shq
local M = {}
M.node_dir = helpers.root .. "/spec/node"

-- Why the interop specs do not run here (their pending text), or nil when they do.
if os.getenv("RMQ_SKIP_INTEROP") == "1" then
  M.skip = "skipped: RMQ_SKIP_INTEROP=1 (these specs need ali-ons from the npm registry)"
end

-- ali-ons installed in spec/node (npm ci, versions pinned by its package-lock.json).
function M.ensure_node_modules()
  local f = io.open(M.node_dir .. "/node_modules/ali-ons/package.json")
  if f then f:close(); return end
  local rc, out = helpers.run("npm ci --no-audit --no-fund --prefix " .. shq(M.node_dir))
  assert(rc == 0, "npm ci in spec/node failed:\n" .. out)
end

-- Run spec/node/SCRIPT with JSON options; returns its exit code, the decoded JSON lines of its
-- stdout, and the rest (other stdout lines and stderr).
function M.node(script, opts)
  local errf = os.tmpname()
  local p = io.popen("node " .. shq(M.node_dir .. "/" .. script) .. " " .. shq(cjson.encode(opts))
    .. " 2>" .. errf .. "; echo \"__rc=$?\"")
  local lines, other, rc = {}, {}, nil
  for line in p:lines() do
    local code = line:match("^__rc=(%d+)$")
    if code then
      rc = tonumber(code)
    else
      local ok, v = pcall(cjson.decode, line)
      if ok and type(v) == "table" then lines[#lines + 1] = v else other[#other + 1] = line end
    end
  end
  p:close()
  local h = io.open(errf); other[#other + 1] = h:read("*a"); h:close()
  os.remove(errf)
  return rc, lines, table.concat(other, "\n")
end

return M
