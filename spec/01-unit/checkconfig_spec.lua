-- Configuration: option parsing, defaults, and checkConfig against the 4.9.4 vectors
-- (spec/fixtures/vectors/checkconfig.json).
local ffi = require "ffi"
local helpers = require "helpers"

ffi.cdef [[
typedef struct rmq_conf rmq_conf_t;
rmq_conf_t *rmq_conf_new(void);
void rmq_conf_destroy(rmq_conf_t *conf);
rmq_conf_t *rmq_conf_dup(const rmq_conf_t *conf);
int rmq_conf_set(rmq_conf_t *conf, const char *name, const char *value, char *errstr,
                 size_t errstr_size);
int rmq_conf_get(const rmq_conf_t *conf, const char *name, char *out, size_t out_size);
int rmq_conf_add_subscription(rmq_conf_t *conf, const char *topic, const char *expression,
                              const char *type, char *errstr, size_t errstr_size);
int rmq_conf_check(const rmq_conf_t *conf, char *errstr, size_t errstr_size);
size_t rmq_conf_describe_markdown(char *out, size_t out_size);
]]

local lib = helpers.lib()
local vec = helpers.json_fixture("vectors/checkconfig.json")
local cjson = require "cjson"

local function snake(java)
  return (java:gsub("%u", function(c) return "_" .. c:lower() end))
end

local function new_conf()
  return ffi.gc(lib.rmq_conf_new(), lib.rmq_conf_destroy)
end

local function set(conf, k, v)
  local err = ffi.new("char[1024]")
  local rc = lib.rmq_conf_set(conf, k, v, err, 1024)
  return rc, ffi.string(err)
end

local function get(conf, k)
  local out = ffi.new("char[1024]")
  local rc = lib.rmq_conf_get(conf, k, out, 1024)
  assert.are.equal(0, rc, "get " .. k)
  return ffi.string(out)
end

local function check(conf)
  local err = ffi.new("char[4096]")
  local rc = lib.rmq_conf_check(conf, err, 4096)
  return rc, ffi.string(err)
end

-- The vectors' setup: DefaultMQPushConsumer("vectors_group"), a concurrently listener, "*".
local function vectors_conf()
  local conf = new_conf()
  assert.are.equal(0, (set(conf, "consumer_group", "vectors_group")))
  assert.are.equal(0, (set(conf, "message_listener", "CONCURRENTLY")))
  local err = ffi.new("char[256]")
  assert.are.equal(0, lib.rmq_conf_add_subscription(conf, "TopicTest", "*", nil, err, 256))
  return conf
end

local function vector_value(option, v)
  if v == nil or v == cjson.null then return nil end
  if type(v) == "number" then return tostring(v) end
  local n, ch = v:match("^%((%d+) x '(.)'%)$")
  if n then return ch:rep(tonumber(n)) end
  if option == "messageListener" then
    if v == "MessageListenerOrderly" then return "ORDERLY" end
    return "BOTH" -- a script with both kinds of hook: neither one listener type nor the other
  end
  return v
end

describe("checkConfig vectors", function()
  it("has all 89 cases", function()
    assert.are.equal(89, #vec.cases)
  end)

  for _, case in ipairs(vec.cases) do
    local label = string.format("case %d: %s = %s", case.id, case.option, tostring(case.value))
    if case.option == "subscription" then
      -- The subscription list of a C conf is never null (an empty list is what Java's default
      -- empty map is), so "subscription is null" cannot arise.
      pending(label .. " (a C subscription list cannot be null)")
    else
      it(label, function()
        local conf = vectors_conf()
        if case.alsoSet then
          local k, v = case.alsoSet:match("^(%w+)=(%-?%d+)")
          assert(k, "unparsed alsoSet " .. case.alsoSet)
          assert.are.equal(0, (set(conf, snake(k), v)))
        end
        if case.option ~= "(all defaults)" then
          local rc, err = set(conf, snake(case.option), vector_value(case.option, case.value))
          assert.are.equal(0, rc, err)
        end
        local rc, err = check(conf)
        if case.outcome == "accepted" then
          assert.are.equal(0, rc, err)
        elseif case.exception == "org.apache.rocketmq.client.exception.MQClientException" then
          assert.are_not.equal(0, rc)
          local java = case.message:match("^(%l%w+)")
          local opt = (java and java ~= "the") and snake(java) or "consumer_group"
          if case.message:find(" Out of range ", 1, true) then
            -- our words first (option, value, allowed range), then Java's message as it is
            local first = err:match("^[^\n]*")
            assert.matches("^option " .. opt .. " = %-?%d+ is out of range %(allowed: .+%)$", first)
            assert.are.equal(first .. "\nJava checkConfig: " .. case.message,
              err:sub(1, #first + 19 + #case.message))
          else
            assert.are.equal(case.message, err:sub(1, #case.message))
            -- and it names our option
            assert.matches("\n(option " .. opt, err, 1, true)
          end
        else
          -- consumeTimestamp null: Java throws a NullPointerException; we reject it by name.
          assert.are_not.equal(0, rc)
          assert.matches("consume_timestamp", err, 1, true)
        end
      end)
    end
  end
end)

describe("conf defaults", function()
  it("are Java's", function()
    local conf = new_conf()
    for java, v in pairs(vec.defaults) do
      local name = java:match("^(%w+)")
      if name ~= "consumeTimestamp" and name ~= "consumerGroup" then
        local want = tostring(v)
        if name == "allocateMessageQueueStrategy" then want = "AVG" end
        assert.are.equal(want, get(conf, snake(name)), name)
      end
    end
    assert.are.equal("DEFAULT_CONSUMER", get(conf, "consumer_group"))
    assert.are.equal("30000", get(conf, "poll_name_server_interval"))
    assert.are.equal("30000", get(conf, "heartbeat_broker_interval"))
    assert.are.equal("5000", get(conf, "persist_consumer_offset_interval"))
    assert.are.equal("1000", get(conf, "pull_time_delay_mills_when_exception"))
    assert.are.equal("3000", get(conf, "mq_client_api_timeout"))
    assert.are.equal("DEFAULT", get(conf, "instance_name"))
    assert.are.equal("JAVA", get(conf, "language"))
    assert.are.equal("false", get(conf, "vip_channel_enabled"))
    assert.are.equal("10", get(conf, "consistent_hash_virtual_nodes"))
    assert.are.equal("16777216", get(conf, "frame_max_length"))
    assert.are.equal("100000", get(conf, "adjust_thread_pool_nums_threshold"))
    assert.are.equal("false", get(conf, "post_subscription_when_pull"))
    assert.are.equal("0", get(conf, "await_termination_millis_when_shutdown"))
    assert.matches("/%.rocketmq_offsets$", get(conf, "local_offset_store_dir"))
  end)

  it("sets consume_timestamp to now - 30 minutes as yyyyMMddHHmmss local time", function()
    local ts = get(new_conf(), "consume_timestamp")
    assert.matches("^%d%d%d%d%d%d%d%d%d%d%d%d%d%d$", ts)
    local t = os.time { year = tonumber(ts:sub(1, 4)), month = tonumber(ts:sub(5, 6)), day = tonumber(ts:sub(7, 8)),
                        hour = tonumber(ts:sub(9, 10)), min = tonumber(ts:sub(11, 12)), sec = tonumber(ts:sub(13, 14)) }
    local diff = os.time() - t
    assert.is_true(diff >= 1790 and diff <= 1900, "diff " .. diff)
  end)

  it("rejects a fresh conf like Java rejects DefaultMQPushConsumer()", function()
    local rc, err = check(new_conf())
    assert.are_not.equal(0, rc)
    assert.matches("consumerGroup can not equal DEFAULT_CONSUMER", err, 1, true)
  end)
end)

describe("conf set errors", function()
  it("name an unknown option and its value", function()
    local rc, err = set(new_conf(), "consume_thread_mni", "5")
    assert.are_not.equal(0, rc)
    assert.matches("consume_thread_mni", err, 1, true)
    assert.matches("5", err, 1, true)
    assert.matches("did you mean consume_thread_min?", err, 1, true)
  end)

  it("point a Java (camelCase) name to our option", function()
    local rc, err = set(new_conf(), "consumeThreadMin", "5")
    assert.are_not.equal(0, rc)
    assert.matches("did you mean consume_thread_min?", err, 1, true)
    rc, err = set(new_conf(), "totally_unrelated_thing", "1")
    assert.are_not.equal(0, rc)
    assert.matches('unknown option "totally_unrelated_thing"', err, 1, true)
  end)

  it("name the option and value for a bad number", function()
    local conf = new_conf()
    for _, v in ipairs { "abc", "12x", "", "99999999999" } do
      local rc, err = set(conf, "pull_batch_size", v)
      assert.are_not.equal(0, rc, v)
      assert.matches("pull_batch_size", err, 1, true)
      assert.matches('"' .. v .. '"', err, 1, true)
    end
    assert.are.equal("32", get(conf, "pull_batch_size"))
  end)

  it("check the RocketMQ 5 POP options with Java's defaults and bounds", function()
    local conf = vectors_conf()
    assert.are.equal("true", get(conf, "client_rebalance"))
    assert.are.equal("96", get(conf, "pop_threshold_for_queue"))
    assert.are.equal("60000", get(conf, "pop_invisible_time"))
    assert.are.equal("32", get(conf, "pop_batch_nums"))
    assert.are.equal(0, (check(conf)))
    -- DefaultMQPushConsumerImpl.checkConfig: popInvisibleTime [5000, 300000], popBatchNums
    -- [1, 32]; the error names the option
    for _, bad in ipairs { { "pop_invisible_time", "4999", "popInvisibleTime" },
                           { "pop_invisible_time", "300001", "popInvisibleTime" },
                           { "pop_batch_nums", "0", "popBatchNums" },
                           { "pop_batch_nums", "33", "popBatchNums" },
                           { "pop_threshold_for_queue", "0", nil } } do
      local c = vectors_conf()
      local rc, err = set(c, bad[1], bad[2])
      if rc == 0 then rc, err = check(c) end
      assert.are_not.equal(0, rc, bad[1] .. "=" .. bad[2])
      assert.matches(bad[1], err, 1, true)
      if bad[3] then assert.matches(bad[3] .. " Out of range", err, 1, true) end
    end
    for _, good in ipairs { { "pop_invisible_time", "5000" }, { "pop_invisible_time", "300000" },
                            { "pop_batch_nums", "1" }, { "client_rebalance", "false" } } do
      local c = vectors_conf()
      assert.are.equal(0, (set(c, good[1], good[2])))
      assert.are.equal(0, (check(c)), good[1] .. "=" .. good[2])
    end
  end)

  it("name the option, value and the allowed values for a bad enum", function()
    local rc, err = set(new_conf(), "message_model", "CLUSTER")
    assert.are_not.equal(0, rc)
    assert.matches("message_model", err, 1, true)
    assert.matches('"CLUSTER"', err, 1, true)
    assert.matches("CLUSTERING, BROADCASTING", err, 1, true)
  end)

  it("name the option for a bad boolean", function()
    local rc, err = set(new_conf(), "unit_mode", "maybe")
    assert.are_not.equal(0, rc)
    assert.matches("unit_mode", err, 1, true)
    assert.matches("maybe", err, 1, true)
  end)

  it("name bad log_debug categories and bad CONFIG queue lists", function()
    local rc, err = set(new_conf(), "log_debug", "pull,nonsense")
    assert.are_not.equal(0, rc)
    assert.matches("nonsense", err, 1, true)
    rc, err = set(new_conf(), "allocate_config_queues", "TopicTest:broker-a")
    assert.are_not.equal(0, rc)
    assert.matches("allocate_config_queues", err, 1, true)
  end)
end)

describe("conf set", function()
  it("accepts Java names of strategies, class names and deprecated ConsumeFromWhere", function()
    local conf = new_conf()
    assert.are.equal(0, (set(conf, "allocate_message_queue_strategy", "AllocateMessageQueueAveragelyByCircle")))
    assert.are.equal("AVG_BY_CIRCLE", get(conf, "allocate_message_queue_strategy"))
    assert.are.equal(0, (set(conf, "allocate_message_queue_strategy",
      "org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueConsistentHash")))
    assert.are.equal("CONSISTENT_HASH", get(conf, "allocate_message_queue_strategy"))
    assert.are.equal(0, (set(conf, "allocate_message_queue_strategy", "MACHINE_ROOM_NEARBY-AVG_BY_CIRCLE")))
    assert.are.equal("MACHINE_ROOM_NEARBY-AVG_BY_CIRCLE", get(conf, "allocate_message_queue_strategy"))
    assert.are.equal("AVG_BY_CIRCLE", get(conf, "allocate_nearby_inner_strategy"))
    assert.are.equal(0, (set(conf, "consume_from_where", "CONSUME_FROM_MIN_OFFSET")))
    assert.are.equal("CONSUME_FROM_MIN_OFFSET", get(conf, "consume_from_where"))
    assert.are.equal(0, (set(conf, "allocate_message_queue_strategy", "LUA")))
    assert.are.equal("LUA", get(conf, "allocate_message_queue_strategy"))
  end)

  it("redacts secrets in get, and dup copies everything", function()
    local conf = new_conf()
    assert.are.equal(0, (set(conf, "secret_key", "12345678")))
    assert.are.equal(0, (set(conf, "access_key", "RocketMQ")))
    assert.are.equal("[redacted]", get(conf, "secret_key"))
    local d = ffi.gc(lib.rmq_conf_dup(conf), lib.rmq_conf_destroy)
    assert.are.equal(0, (set(conf, "access_key", "other")))
    assert.are.equal("RocketMQ", get(d, "access_key"))
  end)

  it("expands ~ in local_offset_store_dir", function()
    local conf = new_conf()
    assert.are.equal(0, (set(conf, "local_offset_store_dir", "~/x")))
    assert.are.equal(os.getenv("HOME") .. "/x", get(conf, "local_offset_store_dir"))
  end)
end)

describe("conf checks beyond Java's", function()
  it("reject a negative consistent_hash_virtual_nodes naming the option", function()
    local conf = vectors_conf()
    assert.are.equal(0, (set(conf, "consistent_hash_virtual_nodes", "-1")))
    local rc, err = check(conf)
    assert.are_not.equal(0, rc)
    assert.matches("consistent_hash_virtual_nodes", err, 1, true)
  end)

  it("reject a zero heartbeat interval naming the option", function()
    local conf = vectors_conf()
    assert.are.equal(0, (set(conf, "heartbeat_broker_interval", "0")))
    local rc, err = check(conf)
    assert.are_not.equal(0, rc)
    assert.matches("heartbeat_broker_interval", err, 1, true)
  end)
end)

describe("subscriptions in the conf", function()
  local function sub(conf, t, e, ty)
    local err = ffi.new("char[1024]")
    local rc = lib.rmq_conf_add_subscription(conf, t, e, ty, err, 1024)
    return rc, ffi.string(err)
  end

  it("reject bad topics and expressions with Java's text", function()
    local conf = new_conf()
    local rc, err = sub(conf, "bad topic", "*")
    assert.are_not.equal(0, rc)
    assert.matches("The specified topic[bad topic] contains illegal characters", err, 1, true)
    rc, err = sub(conf, "", "*")
    assert.matches("The specified topic is blank", err, 1, true)
    rc, err = sub(conf, ("t"):rep(128), "*")
    assert.matches("longer than topic max length 127", err, 1, true)
    rc, err = sub(conf, "T", "||")
    assert.are_not.equal(0, rc)
    assert.matches("subString split error", err, 1, true)
    rc, err = sub(conf, "T", "", "SQL92")
    assert.matches("Expression can't be null! SQL92", err, 1, true)
    assert.are.equal(0, (sub(conf, "T", "TagA || TagB")))
    assert.are.equal(0, (sub(conf, ("t"):rep(127), "*")))
  end)
end)

describe("lenient consumeTimestamp", function()
  -- Beyond the vectors: whitespace before a field is skipped, '-' is a sign.
  for ts, ok in pairs { ["20220101000000"] = true, [" 20220101000000"] = true, ["2022010100000"] = true,
                        ["202201010000"] = false, ["2022010100000x"] = true, ["-0220101000000"] = true } do
    it(string.format("%q is %s", ts, ok and "accepted" or "rejected"), function()
      local conf = vectors_conf()
      assert.are.equal(0, (set(conf, "consume_timestamp", ts)))
      local rc = check(conf)
      assert.are.equal(ok, rc == 0)
    end)
  end
end)

describe("option reference", function()
  it("lists every option with type, default and range", function()
    local n = tonumber(lib.rmq_conf_describe_markdown(nil, 0))
    local buf = ffi.new("char[?]", n + 1)
    lib.rmq_conf_describe_markdown(buf, n + 1)
    local md = ffi.string(buf)
    assert.are.equal(n, #md)
    assert.matches("| `consume_thread_min` | int | `20` | 1..1000 |", md, 1, true)
    assert.matches("| `message_model` | enum | `CLUSTERING` | CLUSTERING, BROADCASTING |", md, 1, true)
    assert.matches("| `pull_threshold_for_topic` | int | `-1` | -1 (off) or 1..6553500 |", md, 1, true)
    for _, name in ipairs { "consumer_group", "namesrv_addr", "access_key", "frame_max_length",
                            "allocate_message_queue_strategy", "enable_stream_request_type" } do
      assert.matches("| `" .. name .. "` |", md, 1, true)
    end
  end)
end)
