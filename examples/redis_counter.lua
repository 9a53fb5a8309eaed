-- redis_counter.lua: count messages per key in Redis with OpenResty's Redis driver, unchanged.
--
--   rmqlua run examples/redis_counter.lua --namesrv 127.0.0.1:9876
--   rmqlua run examples/redis_counter.lua --embedded   (one INCR per sample message, on the
--                                                       Redis at $REDIS_ADDR)
--   rmqlua test examples/redis_counter.lua examples/cases/redis_counter.lua   (offline: a
--                                                       stubbed Redis that fails; every batch
--                                                       comes back)
--
-- The driver is Debian's lua-nginx-redis (`require "nginx.redis"`, lua-resty-redis under
-- another name): lua_ngx_shim = true gives it the global `ngx` it looks for (ngx.socket.tcp,
-- ngx.null, ...: rmqlua's cosockets), so it waits for Redis without holding the consume thread.
-- Redis is at $REDIS_ADDR (host:port, default 127.0.0.1:6379). Each message adds one to
-- count:<its first key> (count:<tag> without a key); the connection goes back to this
-- thread's pool (set_keepalive) for the next batch. When the driver is missing or Redis does not
-- answer, the batch comes back later (RECONSUME_LATER) and the reason is logged: nothing is
-- lost, nothing crashes.
local rmq = require "rmq"

local host, port = (os.getenv("REDIS_ADDR") or "127.0.0.1:6379"):match("^(.+):(%d+)$")
assert(host, "REDIS_ADDR must be host:port, got " .. tostring(os.getenv("REDIS_ADDR")))
port = tonumber(port)

-- The driver, loaded on first use: `rmqlua check` passes where it is not installed.
local redis
local function driver()
  if not redis then
    local ok, mod = pcall(require, "nginx.redis")
    if not ok then return nil, "the Redis driver is not installed (Debian: lua-nginx-redis)" end
    redis = mod
  end
  return redis
end

-- One INCR per message, pipelined: nil and the reason when Redis does not answer.
local function count(msgs)
  local mod, derr = driver()
  if not mod then return nil, derr end
  local red = mod:new()
  red:set_timeouts(1000, 2000, 2000)
  local ok, err = red:connect(host, port)
  if not ok then return nil, "redis " .. host .. ":" .. port .. ": " .. err end
  red:init_pipeline(#msgs)
  for i = 1, #msgs do
    local m = msgs[i]
    local key = (m.keys and m.keys:match("^%S+")) or (m.tags and m.tags ~= "" and m.tags) or "none"
    red:incr("count:" .. key)
  end
  local res, perr = red:commit_pipeline()
  if not res then
    red:close()
    return nil, "redis: " .. perr
  end
  for i = 1, #res do
    if type(res[i]) ~= "number" then
      red:close()
      return nil, "redis INCR: " .. tostring(res[i][2] or res[i])
    end
  end
  red:set_keepalive(60000, 16) -- back to this thread's pool
  return true
end

return {
  consumer_group = "redis_counter_demo",
  subscribe = { TopicTest = "*" },
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  consume_message_batch_max_size = 16,
  lua_ngx_shim = true,

  consume = function(msgs, ctx)
    local ok, err = count(msgs)
    if not ok then
      rmq.log("warn", #msgs, "message(s) come back later:", err)
      return rmq.RECONSUME_LATER
    end
  end,
}
