-- rmqlua test examples/sql92.lua examples/cases/sql92.lua
-- Each case states the messages' properties; the script's selector
-- ("region = 'eu' AND amount > 10.0") picks which of them reach consume(), as the broker would.
return {
  { name = "an EU order over 10 is delivered",
    messages = { { keys = "o1", properties = { region = "eu", amount = "12.53" } } },
    expect = { delivered = 1, status = "SUCCESS" } },

  { name = "other regions and small orders are filtered out",
    messages = {
      { keys = "o2", properties = { region = "us", amount = "19.99" } },
      { keys = "o3", properties = { region = "eu", amount = "10" } },
      { keys = "o4", properties = { region = "eu", amount = "10.5" } },
    },
    expect = { delivered = { 3 }, status = "SUCCESS", ack_index = 1 } },

  { name = "a message without the property never matches (NULL is not TRUE)",
    messages = { { keys = "o5", properties = { region = "eu" } } },
    expect = { delivered = 0 } },

  { name = "a value that is not a number makes the comparison throw: no match",
    messages = { { keys = "o6", properties = { region = "eu", amount = "lots" } } },
    expect = { delivered = 0 } },

  { name = "TAGS and KEYS are properties too, but this selector does not look at them",
    messages = { { tags = "TagB", keys = "o7", properties = { region = "eu", amount = "1e3" } } },
    expect = { delivered = 1 } },
}
