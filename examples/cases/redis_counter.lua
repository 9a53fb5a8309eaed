-- rmqlua test examples/redis_counter.lua examples/cases/redis_counter.lua
-- Offline: the Redis at $REDIS_ADDR (default 127.0.0.1:6379) is a stub that fails (where the
-- driver is not installed, the batch comes back later all the same), so every batch comes back
-- later, without an error raised. The counting itself is checked against a real Redis by
-- spec/02-integration/04-lua/ngx_drivers_spec.lua.

-- A Redis that answers every command of a pipeline with an error.
local function failing_redis(conn)
  while true do
    local line = conn:receive("*l")
    if not line then return end
    local n = tonumber(line:match("^%*(%d+)$"))
    if n then
      for _ = 1, 2 * n do conn:receive("*l") end -- the arguments: $len, then the bytes
      conn:send("-ERR stub refuses\r\n")
    end
  end
end

return {
  { name = "a batch comes back later when Redis closes the connection",
    peers = { ["127.0.0.1:6379"] = function() end },
    messages = { { body = "a", keys = "k1" }, { body = "b", keys = "k2" } },
    expect = { status = "RECONSUME_LATER", ack_index = 0, error = false } },
  { name = "a message without a key is counted under its tag; a Redis error sends it back",
    peers = { ["127.0.0.1:6379"] = failing_redis },
    messages = { { body = "c", tags = "TagA" } },
    expect = { status = "RECONSUME_LATER", error = false } },
}
