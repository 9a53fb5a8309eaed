-- The Grafana dashboard (examples/monitoring/grafana/rmqlua-dashboard.json) and the Prometheus alerting
-- rules (examples/monitoring/prometheus/rmqlua-alerts.yml) name only metrics a running consumer exports:
-- every rmqlua_* and process_* name in them appears in a real /metrics scrape of `rmqlua run`
-- against the development broker, after it consumed, failed, retried and dead-lettered messages,
-- and every label they group or select by is one those metrics carry (or one Prometheus adds).
-- `promtool check rules` checks the rules' syntax in scripts/test.
local helpers = require "helpers"
local cjson = require "cjson"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")
local raw = dofile(helpers.root .. "/spec/02-integration/02-producer/rawmq.lua")

local DASHBOARD = helpers.root .. "/examples/monitoring/grafana/rmqlua-dashboard.json"
local RULES = helpers.root .. "/examples/monitoring/prometheus/rmqlua-alerts.yml"
-- Labels Prometheus itself attaches (job, instance) or a histogram's buckets carry (le).
local SCRAPE_LABELS = { job = true, instance = true, le = true }

-- The PromQL expressions of the dashboard's panels and template variables.
local function dashboard_exprs()
  local d = cjson.decode(helpers.read_file(DASHBOARD))
  local out = {}
  for _, p in ipairs(d.panels) do
    for _, t in ipairs(p.targets or {}) do out[#out + 1] = t.expr end
  end
  for _, v in ipairs(d.templating.list) do
    if type(v.query) == "table" then out[#out + 1] = v.query.query end
  end
  return out
end

-- The rules file's `expr:` values (one line, or a `|` block of more indented lines).
local function rule_exprs()
  local out, cur, indent = {}, nil, nil
  for line in (helpers.read_file(RULES) .. "\n"):gmatch("([^\n]*)\n") do
    local lead = #line:match("^ *")
    if cur and (line:match("^%s*$") or lead > indent) then
      cur[#cur + 1] = line
    else
      if cur then out[#out + 1] = table.concat(cur, "\n") end
      cur = nil
      local ind, e = line:match("^( *)expr: *(.-)%s*$")
      if e == "|" then
        cur, indent = {}, #ind
      elseif e then
        out[#out + 1] = e
      end
    end
  end
  return out
end

-- Metric names (rmqlua_*, process_*) and the labels named in by (...) and in {...} selectors.
local function names_in(exprs)
  local metrics, labels = {}, {}
  for _, e in ipairs(exprs) do
    for m in e:gmatch("[%a_:][%w_:]*") do
      if m:match("^rmqlua_") or m:match("^process_") then metrics[m] = true end
    end
    for list in e:gmatch("by%s*(%b())") do
      for l in list:gmatch("[%a_][%w_]*") do labels[l] = true end
    end
    for sel in e:gmatch("%b{}") do
      for l in sel:gmatch("([%a_][%w_]*)%s*[=!]~?") do labels[l] = true end
    end
  end
  return metrics, labels
end

describe("dashboard and alerting rules", function()
  it("use only metric names and labels of a real /metrics scrape", function()
    local TOPIC, GROUP, N = "DashTopic", "g_dashboard", 40
    local db, ns, dir, out, log = cons.loaded_broker({ topic = TOPIC, queues = 2, n = N,
      prefix = "d", tmpname = "dashboard", close = raw.close_all })
    -- First delivery: bodies ending in 3 raise, in 7 ask for a retry, in 9 go to the DLQ, so
    -- that every counter and histogram has samples.
    local s = cons.script(dir, { group = GROUP, ns = ns, topic = TOPIC, out = out,
      extra = "consume_thread_min = 2,",
      body = cons.FAIL_BY_DIGIT })
    helpers.spawn(helpers.bin .. " run " .. s .. " --metrics 127.0.0.1:0",
      { log = log, rc = log .. ".rc" })
    local url = cons.metrics_url(log) .. "/metrics"
    local E = N / 10
    local fams
    helpers.wait_until(function()
      fams = assert(cons.scrape(url)).families
      local dlq = fams.rmqlua_dlq_messages
      local n = 0
      for _, smp in ipairs(dlq and dlq.samples or {}) do n = n + smp.value end
      return n == E
    end, 60, "the dead-lettered messages to be counted")

    -- Every sample name of the scrape (rmqlua_consumed_messages_total, ..._bucket, ...), and
    -- the labels each carries.
    local samples, sample_labels = {}, {}
    for _, f in pairs(fams) do
      for _, smp in ipairs(f.samples) do
        samples[smp.name] = true
        for k in pairs(smp.labels) do sample_labels[k] = true end
      end
    end

    local dm, dl = names_in(dashboard_exprs())
    local rm, rl = names_in(rule_exprs())
    -- What the dashboard must show: consume rate, lag, failures, retries, DLQ, handler and pull
    -- latency histograms, in-flight, RSS; what the rules must watch: lag, DLQ, handler errors.
    for _, m in ipairs { "rmqlua_consumed_messages_total", "rmqlua_consumer_lag",
        "rmqlua_failed_messages_total", "rmqlua_sent_back_messages_total",
        "rmqlua_dlq_messages_total", "rmqlua_process_time_seconds_bucket",
        "rmqlua_pull_rt_seconds_bucket", "rmqlua_inflight_batches",
        "process_resident_memory_bytes" } do
      assert.is_true(dm[m], "the dashboard does not show " .. m)
    end
    for _, m in ipairs { "rmqlua_consumer_lag", "rmqlua_dlq_messages_total",
        "rmqlua_failed_messages_total", "rmqlua_consumed_messages_total" } do
      assert.is_true(rm[m], "the rules do not watch " .. m)
    end
    assert.matches('up{job="rmqlua"} == 0', helpers.read_file(RULES), 1, true)

    for what, set in pairs { dashboard = dm, rules = rm } do
      for m in pairs(set) do
        assert.is_true(samples[m] == true, what .. " uses " .. m .. ", which /metrics does not export")
      end
    end
    for what, set in pairs { dashboard = dl, rules = rl } do
      for l in pairs(set) do
        assert.is_true(SCRAPE_LABELS[l] or sample_labels[l] == true,
          what .. " uses the label " .. l .. ", which no metric of /metrics carries")
      end
    end
  end)
end)
