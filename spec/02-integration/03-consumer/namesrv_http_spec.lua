-- The name server list from an address service (namesrv_domain; Java's TopAddressing): a
-- consumer started without namesrv_addr fetches http://<namesrv_domain>/rocketmq/ns-spec (its
-- namesrv_domain_subgroup) from a local HTTP server, consumes through the name server it names,
-- follows a changed answer to a second development broker, and keeps the last good list when the
-- answer is garbage, too long or empty and when the service is down.
local helpers = require "helpers"
local rh = require "run_helpers"
local cons = dofile(helpers.root .. "/spec/02-integration/03-consumer/cons.lua")

local TOPIC, GROUP = "NsHttp", "g_nshttp"

local function consumed_all(out, prefix, n)
  return function()
    local seen = {}
    for _, r in ipairs(cons.records(out)) do seen[r.body] = true end
    for i = 1, n do if not seen[prefix .. i] then return false end end
    return true
  end
end

describe("consumer: name server from an HTTP address service", function()
  it("consumes, follows a changed answer, keeps the last list on garbage and when down", function()
    local db1, ns1 = cons.test_broker("--broker-name nsa --topic " .. TOPIC .. ":2")
    local db2, ns2 = cons.test_broker("--broker-name nsb --topic " .. TOPIC .. ":2")
    local dir = cons.tmpdir("nshttp")
    local svc = rh.address_service("ns-spec", ns1 .. "\n")
    local port = svc.domain:match("%d+$")
    local out = dir .. "/out.txt"
    local s = cons.script(dir, { group = GROUP, ns = "", topic = TOPIC, out = out,
      extra = string.format("namesrv_domain = %q, namesrv_domain_subgroup = \"ns-spec\", "
        .. "namesrv_addr_refresh_interval = 300,", svc.domain) })
    local log = dir .. "/run.log"
    local pid = cons.spawn(s, log, "--metrics 127.0.0.1:0")
    local url = cons.metrics_url(log)

    -- The first answer: the first broker's name server.
    rh.produce_n(db1, TOPIC, 20, "a")
    helpers.wait_until(consumed_all(out, "a", 20), 60, "the first broker's messages")
    -- The name server of the fetched list counts as the consumer's name server (health).
    helpers.wait_until(function()
      local h = cons.scrape(url .. "/health")
      return h and h.status == 200
    end, 20, "/health 200 through the fetched name server")
    assert.matches("name server list from http://127.0.0.1:" .. port .. "/rocketmq/ns-spec: "
      .. ns1, cons.read(log), 1, true)

    -- A garbage answer keeps the list.
    svc.set("no address here\n")
    helpers.wait_until(function()
      return cons.read(log):find("answered \"no address here\"", 1, true)
    end, 30, "the garbage answer logged")
    assert.matches("keeping the last name server list", cons.read(log), 1, true)
    -- So do an answer longer than 4096 bytes and an empty one.
    svc.set(string.rep(ns2 .. ";", 400))
    helpers.wait_until(function()
      return cons.read(log):find("answer longer than 4096 bytes", 1, true)
    end, 30, "the long answer logged")
    svc.set("\r\n")
    helpers.wait_until(function()
      return cons.read(log):find("answered an empty body", 1, true)
    end, 30, "the empty answer logged")
    rh.produce_n(db1, TOPIC, 10, "c")
    helpers.wait_until(consumed_all(out, "c", 10), 60, "the first broker's later messages")

    -- The answer changes: the consumer follows it to the second broker.
    svc.set(ns2 .. "\n")
    helpers.wait_until(function()
      return cons.read(log):find("/rocketmq/ns-spec: " .. ns2, 1, true)
    end, 30, "the second name server taken")
    rh.produce_n(db2, TOPIC, 20, "b")
    helpers.wait_until(consumed_all(out, "b", 20), 60, "the second broker's messages")

    -- The service down: the list is kept, consumption goes on.
    svc.stop()
    helpers.wait_until(function()
      local l = cons.read(log)
      return l:find("name server address service http://127.0.0.1:" .. port
        .. "/rocketmq/ns-spec: cannot connect", 1, true)
    end, 30, "the failed fetch logged")
    rh.produce_n(db2, TOPIC, 10, "d")
    helpers.wait_until(consumed_all(out, "d", 10), 60, "the second broker's later messages")
    assert.truthy(cons.alive(pid))
    cons.stop(pid)
    assert.equal(0, cons.exit_code(log))
  end)

  it("takes the service from the environment (ROCKETMQ_NAMESRV_DOMAIN, ..._SUBGROUP) when the script names none", function()
    local db, ns = cons.test_broker("--broker-name nse --topic " .. TOPIC .. ":2")
    local dir = cons.tmpdir("nshttp-env")
    local svc = rh.address_service("ns-env", ns .. "\n")
    local out = dir .. "/out.txt"
    local s = cons.script(dir, { group = GROUP .. "_env", ns = "", topic = TOPIC, out = out })
    local log = dir .. "/run.log"
    local pid = cons.spawn(s, log, "", string.format("env -u NAMESRV_ADDR ROCKETMQ_NAMESRV_DOMAIN=%s "
      .. "ROCKETMQ_NAMESRV_DOMAIN_SUBGROUP=ns-env", svc.domain))
    rh.produce_n(db, TOPIC, 10, "e")
    helpers.wait_until(consumed_all(out, "e", 10), 60, "the messages found through the environment's service")
    assert.matches("name server list from " .. svc.url .. ": " .. ns, cons.read(log), 1, true)
    cons.stop(pid)
    assert.equal(0, cons.exit_code(log))
  end)
end)
