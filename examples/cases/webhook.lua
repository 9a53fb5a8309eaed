-- rmqlua test examples/webhook.lua examples/cases/webhook.lua
-- The endpoint's answers are stubbed (`http`): no network, no receiver needed.
local cjson = require "cjson"
local HOOK = "POST http://127.0.0.1:8080/hook"

return {
  { name = "posts the message as JSON with its id as Idempotency-Key",
    messages = { { tags = "TagA", keys = "order-1", body = '{"id":1}', msg_id = "ID1" } },
    http = function(req)
      local p = cjson.decode(req.body)
      assert(req.method == "POST" and req.url == "http://127.0.0.1:8080/hook", req.url)
      assert(req.headers["Idempotency-Key"] == "ID1", "no Idempotency-Key")
      assert(p.msg_id == "ID1" and p.body == '{"id":1}' and p.tags == "TagA" and p.keys == "order-1")
      return { status = 204 }
    end,
    expect = { status = "SUCCESS", http = { HOOK } } },
  { name = "a 2xx is success",
    messages = { { body = "b" } },
    http = { [HOOK] = { status = 200, body = "ok" } },
    expect = { status = "SUCCESS", ack_index = 1 } },
  { name = "a 5xx comes back later",
    messages = { { body = "b" } },
    http = { [HOOK] = { status = 503 } },
    expect = { status = "RECONSUME_LATER", delay_level = 0 } },
  { name = "a timeout comes back later",
    messages = { { body = "b" } },
    http = { [HOOK] = "timeout" },
    expect = { status = "RECONSUME_LATER", error = false } },
  { name = "a refused connection comes back later",
    messages = { { body = "b" } },
    http = { [HOOK] = "connection refused" },
    expect = { status = "RECONSUME_LATER" } },
  { name = "429 Too Many Requests comes back later",
    messages = { { body = "b" } },
    http = { [HOOK] = { status = 429 } },
    expect = { status = "RECONSUME_LATER" } },
  { name = "a 4xx goes to the dead-letter queue",
    messages = { { body = "b" } },
    http = { [HOOK] = { status = 400, body = "bad payload" } },
    expect = { status = "DLQ", ack_index = 0 } },
}
