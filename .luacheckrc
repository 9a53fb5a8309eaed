-- luacheck configuration for the Lua of this repository: the runtime's modules (lua/), the
-- examples (examples/) and the specs (spec/). Run by scripts/test: `luacheck .` from the root.
-- Handlers and the runtime run on LuaJIT; `rmq` is a module (require "rmq"), never a global, so
-- the runtime adds no globals of its own: a handler that sets one has forgotten a `local`. (The
-- one global it can add, `ngx`, comes only with the option lua_ngx_shim, for OpenResty's
-- drivers; code here that uses the shim takes it as a local: require "rmq.ngx".)
std = "luajit"
-- STYLE.md asks for ~100 columns; a few tables and messages run longer.
max_line_length = 160
include_files = { "lua/**/*.lua", "examples/**/*.lua", "spec/**/*.lua" }
-- lua/types/ holds lua-language-server declarations (---@meta stubs), not code that runs.
exclude_files = { "build*/**", "lua/types/**" }

-- Examples spell out every argument a hook receives, used or not, to show what is there.
files["examples/"] = { unused_args = false }

-- busted's describe/it/assert/spy/...; specs keep values they do not read (a status next to the
-- output that is checked, loop counters of repeated sends, the pieces of a matched line) for
-- the reader, and shadow names from their outer scope in nested cases.
files["spec/"] = {
  std = "+busted",
  ignore = { "211", "212", "213", "311", "421", "431", "542" },
}
