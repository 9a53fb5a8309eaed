-- Shared pieces of the security specs: certificates made with the `openssl` command at test
-- time, the development broker in-process (FFI), consumer scripts that record what they
-- consume, and `rmqlua run` / `rmqlua send` subprocesses. Everything lives in helpers.tmpdir().
local helpers = require "helpers"
local rh = require "run_helpers"
local ffi = require "ffi"
local lib = require "devbroker_ffi"
local shq = helpers.shq

local M = { lib = lib, ALL = rh.ALL, NAMESRV = rh.NAMESRV }

local function sh(cmd)
  local rc, out = helpers.run(cmd)
  assert(rc == 0, cmd .. "\n" .. out)
  return out
end

-- In dir: a CA (ca.pem), a server certificate it signed (server.pem/.key, for IP 127.0.0.1 and
-- ::1 and DNS localhost, as a server on loopback needs with the identity check), a client
-- certificate it signed (client.pem/.key, and client_enc.key: the same key encrypted with
-- password "key-pass"), and a second CA nobody trusts with a server certificate of its own
-- (rogue_ca.pem, rogue.pem/.key). Then server certificates for the identity checks, all signed
-- by ca: wrong (DNS wrong.example), dnsonly (DNS localhost only), named (DNS
-- rmq-tls-broker.test only), wild (DNS *.rmq.test and IP 127.0.0.1). EC P-256 keys: quick to
-- make.
function M.make_certs(dir)
  local ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
  local function ca(name, cn)
    sh(("cd %s && openssl req -x509 %s -keyout %s.key -out %s.pem -days 2 -subj %s 2>&1")
      :format(shq(dir), ec, name, name, shq("/CN=" .. cn)))
  end
  -- san: the subjectAltName ("IP:127.0.0.1,DNS:localhost"), or nil for none.
  local function leaf(name, cn, signer, san)
    local ext = san and ("-addext " .. shq("subjectAltName=" .. san)) or ""
    sh(("cd %s && openssl req %s -keyout %s.key -out %s.csr -subj %s %s 2>&1 && "
      .. "openssl x509 -req -in %s.csr -CA %s.pem -CAkey %s.key -CAcreateserial -out %s.pem "
      .. "-days 2 -copy_extensions copy 2>&1 && rm -f %s.csr")
      :format(shq(dir), ec, name, name, shq("/CN=" .. cn), ext, name, signer, signer, name, name))
  end
  local loopback = "IP:127.0.0.1,IP:::1,DNS:localhost"
  ca("ca", "rmqlua spec CA")
  ca("rogue_ca", "nobody trusts this CA")
  leaf("server", "127.0.0.1", "ca", loopback)
  leaf("client", "rmqlua spec client", "ca")
  leaf("rogue", "127.0.0.1", "rogue_ca", loopback)
  leaf("wrong", "wrong.example", "ca", "DNS:wrong.example")
  leaf("dnsonly", "127.0.0.1", "ca", "DNS:localhost")
  leaf("named", "rmq-tls-broker.test", "ca", "DNS:rmq-tls-broker.test")
  leaf("wild", "rmq.test", "ca", "DNS:*.rmq.test,IP:127.0.0.1")
  sh(("cd %s && openssl pkcs8 -topk8 -in client.key -out client_enc.key -passout pass:key-pass "
    .. "-v2 aes-256-cbc 2>&1"):format(shq(dir)))
  local certs = {
    dir = dir, ca = dir .. "/ca.pem", rogue_ca = dir .. "/rogue_ca.pem",
    client = dir .. "/client.pem", client_key = dir .. "/client.key",
    client_enc_key = dir .. "/client_enc.key",
  }
  for _, n in ipairs { "server", "rogue", "wrong", "dnsonly", "named", "wild" } do
    certs[n], certs[n .. "_key"] = dir .. "/" .. n .. ".pem", dir .. "/" .. n .. ".key"
  end
  return certs
end

-- The certificates of a describe block, made by M.make_certs in a fresh folder helpers.tmpdir(tag)
-- in its lazy_setup (its lazy_teardown runs what was deferred): the table of their paths, filled
-- then.
function M.certs_fixture(tag)
  return helpers.describe_fixture(function(t)
    for k, v in pairs(M.make_certs(helpers.tmpdir(tag))) do t[k] = v end
  end, function() helpers.run_deferred() end)
end

-- The command prefix ("env ...", for helpers.run / helpers.spawn) under which the names of
-- hosts ({ "127.0.0.1 name", ... }) resolve as listed, through nss_wrapper and a hosts file in
-- dir; nil when libnss_wrapper is not installed (the spec is then pending(M.NO_NSS_WRAPPER)).
M.NO_NSS_WRAPPER = "libnss-wrapper is not installed"
function M.hosts_env(dir, hosts)
  local rc0, out0 = helpers.run("LD_PRELOAD=libnss_wrapper.so true")
  if rc0 ~= 0 or out0:find("cannot be preloaded", 1, true) then return nil end
  local f = assert(io.open(dir .. "/hosts", "w"))
  f:write(table.concat(hosts, "\n"), "\n")
  f:close()
  local pre = os.getenv("LD_PRELOAD")
  return ("env LD_PRELOAD=%s NSS_WRAPPER_HOSTS=%s "):format(
    shq((pre and pre ~= "" and (pre .. ":") or "") .. "libnss_wrapper.so"), shq(dir .. "/hosts"))
end

-- A development broker in-process: db, name server address.
M.start_broker = rh.start_broker

-- A development broker enforcing the plain_acl.yml text acl (written to a temp folder), started
-- with args besides: db, name server address.
function M.start_acl_broker(acl, args)
  local path = rh.write(helpers.tmpdir("acl"), "plain_acl.yml", acl)
  return M.start_broker("--acl " .. path .. " " .. (args or ""))
end

-- The error rmq_devbroker_start gives for args (it must fail).
function M.broker_error(args)
  local err = ffi.new("char[512]")
  local db = lib.rmq_devbroker_start(args or "", err, 512)
  if db ~= nil then lib.rmq_devbroker_stop(db); return nil end
  return ffi.string(err)
end

-- Store n messages on topic (no network: straight into the broker's store); bodies prefix..i,
-- tag TagA.
function M.produce(db, topic, n, prefix)
  rh.produce_n(db, topic, n, prefix, "TagA")
end

-- extField key of the last recorded request with this code at target, or nil.
function M.last_ext(db, target, code, key)
  local buf = ffi.new("char[256]")
  local n = lib.rmq_devbroker_request_ext(db, target, code, -1, key, buf, 256)
  if n < 0 then return nil end
  return ffi.string(buf, n)
end

-- A consumer script in dir. opts: group, topic, options (a table of option = value, written as
-- Lua literals), body (Lua source run per message after it is recorded; may return a status
-- through `status`), name. Each consumed message is one line "<body> <reconsume_times>" in
-- dir/<name>.out.
function M.script(dir, opts)
  local name = opts.name or "consumer"
  local out = dir .. "/" .. name .. ".out"
  local lines = {}
  for k, v in pairs(opts.options or {}) do
    lines[#lines + 1] = ("  %s = %s,"):format(k, type(v) == "string" and ("%q"):format(v)
      or tostring(v))
  end
  table.sort(lines)
  local src = ([[
local rmq = require "rmq"
local out = assert(io.open(%q, "a"))
out:setvbuf("line")
return {
  consumer_group = %q,
  consume_from_where = "CONSUME_FROM_FIRST_OFFSET",
  subscribe = { [%q] = "*" },
  consume_thread_min = 2,
  consume_thread_max = 2,
%s
  consume = function(msgs, ctx)
    local status
    for i = 1, #msgs do
      local m = msgs[i]
      out:write(m.body, " ", m.reconsume_times, "\n")
      %s
    end
    return status
  end,
}
]]):format(out, opts.group, opts.topic, table.concat(lines, "\n"), opts.body or "")
  return rh.write(dir, name .. ".lua", src), out
end

-- Lines of a file (empty table when it does not exist).
M.lines = rh.file_lines
M.read = rh.read

-- How many times the plain string plain stands in text.
function M.occurrences(text, plain)
  local _, n = text:gsub(plain:gsub("%p", "%%%0"), "")
  return n
end

-- Distinct bodies recorded in an .out file -> deliveries.
function M.consumed(out)
  local by = {}
  for _, l in ipairs(M.lines(out)) do
    local body = l:match("^(%S+)")
    if body then by[body] = (by[body] or 0) + 1 end
  end
  return by
end

function M.count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

-- `rmqlua run script` in the background (killed when the test ends). Returns pid, log, rcfile.
function M.run(dir, script, args, name)
  local log = dir .. "/" .. (name or "run") .. ".log"
  local rcf = log .. ".rc"
  local pid = helpers.spawn(helpers.bin .. " run " .. shq(script) .. " " .. (args or ""),
    { log = log, rc = rcf })
  return pid, log, rcf
end

-- The exit code written by a spawned run, waiting up to timeout seconds (scaled).
M.exit_code = rh.exit_code

-- `rmqlua run` in the foreground, for runs that end by themselves (killed after 120 s,
-- scaled: exit code 124 then); returns rc, output.
function M.run_fg(script, args)
  return helpers.run(("timeout -s KILL %d %s run %s %s < /dev/null"):format(
    math.floor(120 * helpers.scale), helpers.bin, shq(script), args or ""))
end

return M
