-- rmqlua test examples/retry.lua examples/cases/retry.lua
return {
  { name = "acknowledges a good message",
    messages = { { body = "fine" } },
    expect = { status = "SUCCESS", ack_index = 1 } },
  { name = "fails a 'fail' message on its first delivery, one second later",
    messages = { { body = "please fail", reconsume_times = 0 } },
    expect = { status = "RECONSUME_LATER", ack_index = 0, delay_level = 1 } },
  { name = "accepts it when it comes back",
    messages = { { body = "please fail", reconsume_times = 1 } },
    expect = { status = "SUCCESS" } },
  { name = "a poison message raises: logged, consumed again",
    messages = { { body = "poison" } },
    expect = { status = "RECONSUME_LATER", error = "cannot process poison", delay_level = 1 } },
  { name = "sends a 'dlq' message to the dead-letter queue",
    messages = { { body = "dlq" } },
    expect = { status = "DLQ", ack_index = 0 } },
}
