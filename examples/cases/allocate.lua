-- rmqlua test examples/allocate.lua examples/cases/allocate.lua (the handler; the allocate
-- hook is exercised by spec/02-integration/04-lua)
return {
  { name = "prints and acknowledges",
    messages = { { queue_id = 1, queue_offset = 7, body = "x" } },
    expect = { status = "SUCCESS", ack_index = 1 } },
}
