-- rmqlua test examples/forward.lua examples/cases/forward.lua
return {
  { name = "forwards upper-cased bodies to OutTopic",
    messages = { { tags = "TagA", body = "abc", msg_id = "ID1" }, { body = "def", msg_id = "ID2" } },
    expect = { status = "SUCCESS", ack_index = 2, sent = {
      { topic = "OutTopic", body = "ABC", tags = "TagA", keys = "ORIGIN_ID1",
        props = "forwarded_from\1InTopic" },
      { topic = "OutTopic", body = "DEF", keys = "ORIGIN_ID2" } } } },
}
