-- Name servers and brokers given as host names: every resolved address is tried in turn (IPv4
-- first, as the Java client orders them by default), and when none answers the error names the
-- host, each address tried and its error.
--
-- Host names with several addresses come from a hosts file of the spec's own, read through
-- nss_wrapper (Debian libnss-wrapper, preloaded into the `rmqlua send` it runs): /etc/hosts is
-- never touched. What a name resolves to is asked of the same resolver (getent), never assumed.
local helpers = require "helpers"
local ffi = require "ffi"
require "devbroker_ffi"
local lib = helpers.lib()

local NSS_WRAPPER = "libnss_wrapper.so"

local function have_nss_wrapper()
  local rc, out = helpers.run("LD_PRELOAD=" .. NSS_WRAPPER .. " true")
  return rc == 0 and not out:find("cannot be preloaded", 1, true)
end

local function start_ns(listen)
  local err = ffi.new("char[256]")
  local db = lib.rmq_devbroker_start("--listen " .. listen .. " --topic HostT:1", err, 256)
  if db == nil then return nil, ffi.string(err) end
  helpers.defer(function() lib.rmq_devbroker_stop(db) end)
  return db, ffi.string(lib.rmq_devbroker_addr(db))
end

local function port_of(addr) return tonumber(addr:match(":(%d+)$")) end

-- A hosts file with these lines; returns the environment prefix that makes it the resolver.
local function hosts(lines)
  local dir = helpers.tmpdir("hosts")
  local f = assert(io.open(dir .. "/hosts", "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
  local pre = os.getenv("LD_PRELOAD")
  return string.format("LD_PRELOAD=%s NSS_WRAPPER_HOSTS=%s ",
    helpers.shq((pre and pre ~= "" and (pre .. ":") or "") .. NSS_WRAPPER),
    helpers.shq(dir .. "/hosts"))
end

-- The stream addresses `name` resolves to under env, in the resolver's order.
local function resolve(env, name)
  local _, out = helpers.run(env .. "getent ahosts " .. helpers.shq(name))
  local t, seen = {}, {}
  for ip, kind in out:gmatch("(%S+)%s+(%u+)") do
    if kind == "STREAM" and not seen[ip] then
      seen[ip] = true
      t[#t + 1] = ip
    end
  end
  return t
end

-- `rmqlua send` one message to topic HostT through namesrv; returns exit code and output.
local function send(env, namesrv)
  return helpers.run(string.format("echo hello | %s%s send --namesrv %s --topic HostT "
    .. "--log-debug remoting", env, helpers.shq(helpers.bin), helpers.shq(namesrv)))
end

local function stored(db)
  return tonumber(lib.rmq_devbroker_max_offset(db, 0, "HostT", 0))
end

describe("host names", function()
  lazy_setup(function()
    assert(have_nss_wrapper(), NSS_WRAPPER .. " is missing (scripts/deps --test installs "
      .. "libnss-wrapper)")
  end)

  it("connect to the next address when the first one refuses", function()
    local db, addr = assert(start_ns("127.0.0.1:0"))
    local port = port_of(addr)
    local env = hosts({ "127.0.0.3 rmq-two.test", "127.0.0.1 rmq-two.test" })
    assert.same({ "127.0.0.3", "127.0.0.1" }, resolve(env, "rmq-two.test"))
    local rc, out = send(env, "rmq-two.test:" .. port)
    assert.equal(0, rc, out)
    assert.matches("sent 1, failed 0", out, 1, true)
    assert.matches("127.0.0.3:" .. port .. ": connection refused", out, 1, true)
    assert.equal(1, stored(db))
  end)

  it("try IPv4 addresses before IPv6 ones, whatever the resolver's order", function()
    local db, addr = start_ns("[::1]:0")
    if not db then
      pending("no IPv6 loopback here: " .. tostring(addr))
      return
    end
    local port = port_of(addr)
    local env = hosts({ "::1 rmq-six.test", "127.0.0.3 rmq-six.test" })
    assert.same({ "::1", "127.0.0.3" }, resolve(env, "rmq-six.test"))
    local rc, out = send(env, "rmq-six.test:" .. port)
    assert.equal(0, rc, out)
    assert.equal(1, stored(db))
    -- 127.0.0.3 was tried (and refused) before [::1] answered.
    assert.matches("127.0.0.3:" .. port .. ": connection refused", out, 1, true)
  end)

  it("name the host, every address tried and each error when none answers", function()
    local _, addr = assert(start_ns("127.0.0.1:0"))
    local port = port_of(addr)
    local env = hosts({ "127.0.0.3 rmq-dead.test", "127.0.0.4 rmq-dead.test" })
    local rc, out = send(env, "rmq-dead.test:" .. port)
    assert.equal(1, rc, out)
    assert.matches(string.format('cannot connect to "rmq-dead.test" port %d: tried '
      .. '127.0.0.3:%d (connection refused), 127.0.0.4:%d (connection refused)', port, port,
      port), out, 1, true)
  end)

  it("say so when the name does not resolve", function()
    local env = hosts({ "127.0.0.1 rmq-other.test" })
    local rc, out = send(env, "rmq-nowhere.invalid:9876")
    assert.equal(1, rc, out)
    assert.matches('cannot resolve "rmq-nowhere.invalid"', out, 1, true)
  end)

  it("reach a server on `localhost` at whichever address localhost resolves to here",
    function()
    local addrs = resolve("", "localhost")
    assert.is_true(#addrs > 0, "localhost resolves to nothing here")
    -- The server listens on the last address only: every earlier one must be passed over.
    local last = addrs[#addrs]
    local db, addr = start_ns((last:find(":") and ("[" .. last .. "]") or last) .. ":0")
    if not db then
      pending("cannot listen on " .. last .. ": " .. tostring(addr))
      return
    end
    local rc, out = send("", "localhost:" .. port_of(addr))
    assert.equal(0, rc, out)
    assert.equal(1, stored(db))
  end)
end)
