-- rmqlua test examples/reload.lua examples/cases/reload.lua
-- Run them again after editing RULES: the cases say what the version you are about to load does.
return {
  { name = "accepts TagA", messages = { { tags = "TagA", body = "a" } },
    expect = { status = "SUCCESS" } },
  { name = "delays TagB by 10 s", messages = { { tags = "TagB", body = "b" } },
    expect = { status = "RECONSUME_LATER", delay_level = 3 } },
  { name = "drops TagC to the dead-letter queue", messages = { { tags = "TagC", body = "c" } },
    expect = { status = "DLQ", ack_index = 0 } },
  { name = "accepts a message without a rule", messages = { { body = "untagged" } },
    expect = { status = "SUCCESS" } },
}
