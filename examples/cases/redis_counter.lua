-- rmqlua test examples/redis_counter.lua examples/cases/redis_counter.lua
-- Offline: no Redis answers at $REDIS_ADDR (or the driver is not installed), so every batch
-- comes back later, without an error raised. The counting itself is checked against a real
-- Redis by spec/02-integration/04-lua/ngx_drivers_spec.lua.
return {
  { name = "a batch comes back later when Redis does not answer",
    messages = { { body = "a", keys = "k1" }, { body = "b", keys = "k2" } },
    expect = { status = "RECONSUME_LATER", ack_index = 0, error = false } },
  { name = "a message without a key is counted under its tag, and comes back the same way",
    messages = { { body = "c", tags = "TagA" } },
    expect = { status = "RECONSUME_LATER", error = false } },
}
