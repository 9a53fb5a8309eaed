-- netns.lua: network faults for the reliability suite (scenarios 14-20, 22): a Linux network
-- namespace per consumer, joined to the root namespace by a veth pair made for this run, with
-- nftables rules and tc qdiscs that break the link on purpose (blackhole, one-way loss, TCP
-- resets on new connections, a slow link).
--
-- Only what this run created is ever touched: the namespaces "rmqnf<pid>_<n>", their veth
-- pairs "rnf<pid><n>a"/"...b" (root side a = 10.213.<net>.1, namespace side b = 10.213.<net>.2,
-- <net> a /24 no interface of this machine uses yet) and one nft table "inet rmqnf" inside each
-- namespace. Rules name only the root-side address of the pair. Each object is written to the
-- run's file "netns" as it is made; scripts/reliability.sh removes what is listed there when
-- the run ends (also on failure or Ctrl-C), and Link:remove() does the same at a scenario's end.
--
-- Needs root, `ip` (iproute2) and `nft` (Debian nftables); M.available() says why not.
local ffi = require "ffi"
local L = require "lib"

pcall(ffi.cdef, "int getpid(void);")
local PID = ffi.C.getpid()

local M = {}

local function sh(cmd)
  local ok = os.execute(cmd .. " >/dev/null 2>&1")
  return ok == 0 or ok == true
end

local function out(cmd)
  local f = io.popen(cmd .. " 2>/dev/null")
  local s = f:read("*a")
  f:close()
  return s
end

local why_not
-- true, or false and why the network scenarios cannot run here.
function M.available()
  if why_not ~= nil then return why_not == false, why_not end
  why_not = false
  if out("id -u"):match("^%s*(%d+)") ~= "0" then
    why_not = "needs root (network namespaces, nftables, tc)"
  elseif not sh("command -v ip") then
    why_not = "needs ip (iproute2)"
  elseif not sh("command -v nft") then
    why_not = "needs nft (apt-get install nftables)"
  elseif not sh("command -v tc") then
    why_not = "needs tc (iproute2)"
  else
    local probe = string.format("rmqnf%dp", PID)
    if not sh("ip netns add " .. probe) then
      why_not = "ip netns add failed (no network namespaces here)"
    else
      if not sh("ip netns exec " .. probe .. " nft add table inet rmqnf") then
        why_not = "nft does not work inside a network namespace here"
      end
      sh("ip netns del " .. probe)
    end
  end
  return why_not == false, why_not
end

local seq = 0

-- Record an object for scripts/reliability.sh's clean-up: "ns NAME" or "link NAME".
local function remember(kind, name)
  local f = assert(io.open(L.work .. "/netns", "a"))
  f:write(kind, " ", name, "\n")
  f:close()
end

-- A /24 in 10.213.0.0/16 that no interface of this machine has an address in.
local function free_net()
  local used = out("ip -o -4 addr show")
  for _ = 1, 200 do
    local n = math.random(1, 254)
    if not used:find("10%.213%." .. n .. "%.") then return n end
  end
  error("netns: no free 10.213.N.0/24 net")
end

local Link = {}
Link.__index = Link

-- A namespace joined to the root by a new veth pair. Returns a Link: ns (namespace name),
-- host (the root-side address: listen there), peer (the namespace's address), veth_root,
-- veth_ns, exec (the prefix that runs a command in the namespace).
function M.link()
  seq = seq + 1
  local pid = PID
  local self = setmetatable({}, Link)
  self.ns = string.format("rmqnf%d_%d", pid, seq)
  self.veth_root = string.format("rnf%d%da", pid % 100000, seq)
  self.veth_ns = string.format("rnf%d%db", pid % 100000, seq)
  local net = free_net()
  self.host = string.format("10.213.%d.1", net)
  self.peer = string.format("10.213.%d.2", net)
  self.exec = "ip netns exec " .. self.ns .. " "
  remember("ns", self.ns)
  remember("link", self.veth_root)
  local steps = {
    "ip netns add " .. self.ns,
    string.format("ip link add %s type veth peer name %s netns %s", self.veth_root, self.veth_ns, self.ns),
    string.format("ip addr add %s/24 dev %s", self.host, self.veth_root),
    "ip link set " .. self.veth_root .. " up",
    self.exec .. "ip link set lo up",
    string.format("%sip addr add %s/24 dev %s", self.exec, self.peer, self.veth_ns),
    string.format("%sip link set %s up", self.exec, self.veth_ns),
    -- The other links' root-side addresses are reached through this one's root side too.
    string.format("%sip route add 10.213.0.0/16 via %s", self.exec, self.host),
    self.exec .. "nft add table inet rmqnf",
    self.exec .. "nft 'add chain inet rmqnf out { type filter hook output priority 0; policy accept; }'",
    self.exec .. "nft 'add chain inet rmqnf in { type filter hook input priority 0; policy accept; }'",
  }
  for _, s in ipairs(steps) do
    if not sh(s) then
      self:remove()
      error("netns: failed: " .. s)
    end
  end
  return self
end

-- Run a command in the namespace; error when it fails.
function Link:run(cmd)
  if not sh(self.exec .. cmd) then error("netns: failed in " .. self.ns .. ": " .. cmd, 2) end
end

local function ports_of(addrs)
  local ps = {}
  for _, a in ipairs(addrs) do ps[#ps + 1] = assert(tonumber(a:match(":(%d+)$")), "no port in " .. a) end
  return ps
end

-- nft rules in the namespace (each kind replaces the link's rules). kind:
--   "blackhole"   every packet to and from host's ports dropped (no RST, nothing answers)
--   "in"          packets from host's ports dropped (host -> namespace lost, the other way passes)
--   "reset"       every packet to host's ports rejected with a TCP reset (new connections
--                 are refused at once and the open ones reset on their next write)
-- addrs: "host:port" strings (their ports are used; the address is always self.host).
function Link:fault(kind, addrs)
  self:clear()
  local ports = table.concat(ports_of(addrs), ", ")
  local h = self.host
  if kind == "blackhole" then
    self:run(string.format("nft add rule inet rmqnf out ip daddr %s tcp dport { %s } drop", h, ports))
    self:run(string.format("nft add rule inet rmqnf in ip saddr %s tcp sport { %s } drop", h, ports))
  elseif kind == "in" then
    self:run(string.format("nft add rule inet rmqnf in ip saddr %s tcp sport { %s } drop", h, ports))
  elseif kind == "reset" then
    self:run(string.format("nft add rule inet rmqnf out ip daddr %s tcp dport { %s } counter reject with tcp reset", h, ports))
  else
    error("netns: unknown fault " .. tostring(kind))
  end
  self.faulted = kind
end

-- Packets the "reset" rule rejected so far (0 without it).
function Link:rejected()
  local s = out(self.exec .. "nft list chain inet rmqnf out")
  return tonumber(s:match("counter packets (%d+)")) or 0
end

-- Remove the link's nft rules.
function Link:clear()
  self:run("nft flush chain inet rmqnf out")
  self:run("nft flush chain inet rmqnf in")
  self.faulted = nil
end

-- A slow link: tbf at rate (e.g. "1mbit") on both ends of the veth pair (each shapes what it
-- sends). nil removes it.
function Link:slow(rate)
  sh("tc qdisc del dev " .. self.veth_root .. " root")
  sh(self.exec .. "tc qdisc del dev " .. self.veth_ns .. " root")
  if not rate then return end
  local q = string.format("root tbf rate %s burst 16kb latency 500ms", rate)
  assert(sh("tc qdisc add dev " .. self.veth_root .. " " .. q), "netns: tc on " .. self.veth_root)
  self:run("tc qdisc add dev " .. self.veth_ns .. " " .. q)
end

-- Local ports of the namespace's established TCP connections to host:port.
function Link:conns(port)
  local s = out(string.format("%sss -Htn state established dst %s:%d", self.exec, self.host, port))
  local set = {}
  for lp in s:gmatch("[%d%.]+:(%d+)%s+" .. self.host:gsub("%.", "%%.") .. ":" .. port) do
    set[tonumber(lp)] = true
  end
  return set
end

-- Delete the namespace (its veth end, nft table and qdiscs go with it) and the root-side veth.
function Link:remove()
  sh("ip netns del " .. self.ns)
  sh("ip link del " .. self.veth_root)
end

-- Clean-up of a run's leftovers (scripts/reliability.sh's trap does the same in shell).
function M.cleanup(path)
  for kind, name in L.read(path):gmatch("(%a+) (%S+)") do
    if kind == "ns" then sh("ip netns del " .. name) else sh("ip link del " .. name) end
  end
end

-- CPU seconds (user + system) a process used so far (0 once gone).
function M.cpu_s(pid)
  local st = L.read("/proc/" .. pid .. "/stat")
  local rest = st:match("%) (.*)$")
  if not rest then return 0 end
  local f = {}
  for x in rest:gmatch("%S+") do f[#f + 1] = x end
  -- utime and stime: fields 14 and 15 of stat (12 and 13 after "pid (comm)").
  return ((tonumber(f[12]) or 0) + (tonumber(f[13]) or 0)) / 100
end

return M
