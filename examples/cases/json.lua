-- rmqlua test examples/json.lua examples/cases/json.lua
return {
  { name = "aggregates JSON orders",
    messages = { { tags = "TagA", body = '{"id":1,"customer":"c1","amount":12.5}' },
                 { tags = "TagB", body = '{"id":2,"customer":"c1","amount":3}' } },
    expect = { status = "SUCCESS", ack_index = 2 } },
  { name = "skips a body that is not JSON without retrying it",
    messages = { { body = "not json" } },
    expect = { status = "SUCCESS", ack_index = 1, error = false } },
}
