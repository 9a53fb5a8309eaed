-- rmqlua test examples/hello.lua examples/cases/hello.lua
return {
  { name = "prints and acknowledges a batch",
    messages = { { tags = "TagA", keys = "k1", body = "hello" }, { body = "world" } },
    expect = { status = "SUCCESS", ack_index = 2, error = false } },
}
