-- rmqlua test examples/shared.lua examples/cases/shared.lua
-- The cases run in order in one state, so the shared dictionaries carry over from case to case.
local function order(id, customer, extra)
  return { keys = "order-" .. id,
    body = string.format('{"id":%d,"customer":"%s"%s}', id, customer, extra or "") }
end

return {
  { name = "handles a first order", messages = { order(1, "c1") },
    expect = { status = "SUCCESS" } },
  { name = "skips the same order delivered again", messages = { order(1, "c1") },
    expect = { status = "SUCCESS" } },
  { name = "handles a second order of c1", messages = { order(2, "c1") },
    expect = { status = "SUCCESS" } },
  { name = "and a third", messages = { order(3, "c1") }, expect = { status = "SUCCESS" } },
  { name = "sends c1's fourth order of the minute back for a minute",
    messages = { order(4, "c1") },
    expect = { status = "RECONSUME_LATER", delay_level = 5 } },
  { name = "the duplicate of order 1 is still skipped, not counted",
    messages = { order(1, "c1") }, expect = { status = "SUCCESS" } },
  { name = "another customer is not limited by c1", messages = { order(5, "c2") },
    expect = { status = "SUCCESS" } },
  { name = "a failing order raises and comes back",
    messages = { order(6, "c3", ',"amount":-1') },
    expect = { status = "RECONSUME_LATER", error = "negative amount in order 6" } },
  { name = "and is not taken for a duplicate when it does",
    messages = { order(6, "c3", ',"amount":-1') },
    expect = { status = "RECONSUME_LATER", error = "negative amount in order 6" } },
  { name = "ignores a body that is not an order", messages = { { body = "hello" } },
    expect = { status = "SUCCESS" } },
}
