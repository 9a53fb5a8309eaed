-- The examples run for real: `rmqlua run` against the development broker (started in this
-- process through the FFI), messages produced into it, the script's output and the broker's
-- state checked, then SIGINT and a clean exit (code 0).
local ffi = require "ffi"
local helpers = require "helpers"

ffi.cdef [[
typedef struct rmq_devbroker rmq_devbroker_t;
rmq_devbroker_t *rmq_devbroker_start(const char *args, char *errstr, size_t errstr_size);
void rmq_devbroker_stop(rmq_devbroker_t *db);
const char *rmq_devbroker_addr(rmq_devbroker_t *db);
int rmq_devbroker_create_topic(rmq_devbroker_t *db, int broker, const char *topic, int queues);
int64_t rmq_devbroker_produce(rmq_devbroker_t *db, int broker, const char *topic, int queue_id,
                              const char *tags, const char *keys, const char *body, size_t body_len);
int64_t rmq_devbroker_max_offset(rmq_devbroker_t *db, int broker, const char *topic, int queue_id);
]]

local ALL = -2
local lib = helpers.lib()
local tmpdir = os.tmpname()
os.remove(tmpdir)
os.execute("mkdir -p " .. tmpdir)

local db, addr

local function produce(topic, body, tags, keys)
  local off = lib.rmq_devbroker_produce(db, 0, topic, -1, tags, keys, body, #body)
  assert(off >= 0, "produce to " .. topic .. " failed")
end

local function topic_count(topic, queues)
  local n = 0
  for q = 0, queues - 1 do
    local v = lib.rmq_devbroker_max_offset(db, 0, topic, q)
    if v > 0 then n = n + tonumber(v) end
  end
  return n
end

-- Start `rmqlua run` in the background; returns a handle with out(), stop() -> exit code.
local function run(script, extra)
  local name = script:match("([^/]+)%.lua$")
  local out = tmpdir .. "/" .. name .. ".out"
  local pidf, rcf = out .. ".pid", out .. ".rc"
  os.remove(rcf)
  os.remove(pidf)
  local cmd = string.format("(sh -c 'echo $$ > %s; exec %s run --namesrv %s %s %s' > %s 2>&1; "
    .. "echo $? > %s) &", pidf, helpers.bin, addr, extra or "", script, out, rcf)
  os.execute(cmd)
  local h = {}
  function h.out()
    local f = io.open(out, "rb")
    if not f then return "" end
    local s = f:read("*a")
    f:close()
    return s
  end
  function h.wait_for(pattern, what)
    return helpers.wait_until(function() return h.out():find(pattern) end, 30,
      (what or pattern) .. " in the output of " .. name)
  end
  function h.stop()
    if h.rc then return h.rc end
    local pid = helpers.wait_until(function()
      local f = io.open(pidf)
      if not f then return nil end
      local p = f:read("*n")
      f:close()
      return p
    end, 10, "pid of " .. name)
    os.execute("kill -INT " .. pid)
    h.rc = helpers.wait_until(function()
      local f = io.open(rcf)
      if not f then return nil end
      local rc = f:read("*n")
      f:close()
      return rc
    end, 60, "exit of " .. name)
    return h.rc
  end
  return h
end

local function example(name) return helpers.root .. "/examples/" .. name .. ".lua" end

describe("examples against the development broker", function()
  lazy_setup(function()
    local err = ffi.new("char[512]")
    db = lib.rmq_devbroker_start("--delay-scale 0.01", err, 512)
    assert(db ~= nil, ffi.string(err))
    addr = ffi.string(lib.rmq_devbroker_addr(db))
  end)
  lazy_teardown(function()
    if db ~= nil then lib.rmq_devbroker_stop(db) end
  end)

  it("hello prints every message", function()
    for i = 1, 3 do produce("TopicTest", "hello " .. i, "TagA", "k" .. i) end
    local h = run(example("hello"))
    finally(function() h.stop() end)
    for i = 1, 3 do h.wait_for("body=hello " .. i) end
    assert.matches("TopicTest#%d+@%d+ tags=TagA keys=k1 body=hello 1", h.out())
    assert.are.equal(0, h.stop())
  end)

  it("json decodes, filters and aggregates", function()
    produce("OrderTopic", '{"id":1,"customer":"c1","amount":12.5}', "TagA")
    produce("OrderTopic", '{"id":2,"customer":"c1","amount":2}', "TagB")
    produce("OrderTopic", 'not json', "TagA")
    produce("OrderTopic", '{"id":3,"customer":"c2","amount":99}', "TagC") -- filtered by tag
    local h = run(example("json"))
    finally(function() h.stop() end)
    h.wait_for("order 1 customer c1 amount 12.50")
    h.wait_for("skipping")
    assert.are.equal(0, h.stop())
    local out = h.out()
    assert.is_nil(out:find("order 2 "))
    assert.is_nil(out:find("order 3 "))
    assert.matches("customer c1 total 12.5", out) -- from shutdown
  end)

  it("retry sees a failed message come back and sends 'dlq' to the DLQ", function()
    produce("RetryTopic", "please fail")
    produce("RetryTopic", "dlq")
    local h = run(example("retry"))
    finally(function() h.stop() end)
    h.wait_for("reconsume_times=0 body=please fail")
    h.wait_for("reconsume_times=1 body=please fail", "the retried message")
    helpers.wait_until(function() return topic_count("%DLQ%retry_demo", 1) >= 1 end, 30,
      "a message in %DLQ%retry_demo")
    assert.are.equal(0, h.stop())
  end)

  it("allocate owns the queues its strategy chose and consumes from them", function()
    lib.rmq_devbroker_create_topic(db, ALL, "AllocTopic", 4)
    produce("AllocTopic", "alloc-1")
    local h = run(example("allocate"))
    finally(function() h.stop() end)
    for q = 0, 3 do h.wait_for("assigned AllocTopic@[%w-]+#" .. q) end
    h.wait_for("body alloc%-1")
    assert.are.equal(0, h.stop())
  end)

  it("forward sends transformed messages to OutTopic", function()
    lib.rmq_devbroker_create_topic(db, ALL, "OutTopic", 4)
    produce("InTopic", "abc", "TagA")
    produce("InTopic", "def", "TagB")
    local h = run(example("forward"))
    finally(function() h.stop() end)
    helpers.wait_until(function() return topic_count("OutTopic", 4) >= 2 end, 30,
      "two messages in OutTopic")
    assert.are.equal(0, h.stop())
  end)
end)
