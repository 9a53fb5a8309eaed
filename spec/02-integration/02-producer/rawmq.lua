-- rawmq.lua: one-call requests, routes and pulls over spec/rawclient.lua (one cached connection
-- per address), so that the specs can read back what a producer stored without going through
-- rmqlua's own client code.
--
--   local raw = dofile(helpers.root .. "/spec/02-integration/02-producer/rawmq.lua")
--   local route = raw.route(namesrv, topic)               -- decoded TopicRouteData (or nil, code)
--   local msgs = raw.pull_all(namesrv, topic)             -- every stored message of every queue
--   local msgs, resp = raw.pull(addr, topic, queue_id, offset, max)  -- sysFlag SUBSCRIPTION, "*"
local raw = require "rawclient"
local cjson = require "cjson.safe"

local M = {}

M.rd32, M.rd64 = raw.rd32s, raw.rd64
M.parse_props = raw.parse_props

local conns = {}

local function connect(addr)
  if conns[addr] then return conns[addr] end
  local c, err = raw.connect(addr)
  if not c then return nil, err end
  conns[addr] = c
  return c
end

local function drop(addr)
  local c = conns[addr]
  if c then c:close() end
  conns[addr] = nil
end

function M.close_all()
  for addr in pairs(conns) do drop(addr) end
end

-- One request/response. ext: table of string -> string. Returns {code, remark, ext, body} or
-- nil, err.
function M.request(addr, code, ext, body, version)
  local c, err = connect(addr)
  if not c then return nil, err end
  local r
  r, err = c:request(code, ext, body, {version = version, timeout = 10})
  if not r then
    drop(addr)
    return nil, tostring(err) .. ": no response from " .. addr
  end
  return {code = r.code, remark = r.remark, ext = r.extFields or {}, body = r.body}
end

function M.route(namesrv, topic)
  local r, err = M.request(namesrv, 105, {topic = topic})
  if not r then return nil, err end
  if r.code ~= 0 then return nil, r.code, r.remark end
  return cjson.decode(r.body)
end

-- Decode a PULL body (stored messages back to back); m.body is inflated when compressed, the
-- stored bytes are m.stored_body.
function M.decode(body)
  local out = raw.decode_messages(body, true)
  for _, m in ipairs(out) do
    m.physical_offset, m.reconsume_times = m.phys, m.reconsume
  end
  return out
end

function M.pull(addr, topic, queue_id, offset, max)
  local r, err = M.request(addr, 11, {
    consumerGroup = "rawmq_reader", topic = topic, queueId = tostring(queue_id),
    queueOffset = tostring(offset), maxMsgNums = tostring(max or 32), sysFlag = "4",
    subscription = "*",
    commitOffset = "0", suspendTimeoutMillis = "0", subVersion = "0", expressionType = "TAG"})
  if not r then return nil, err end
  if r.code ~= 0 then return {}, r end
  return M.decode(r.body), r
end

-- Every message stored for topic on every master of its route, ordered by broker, queue, offset.
function M.pull_all(namesrv, topic)
  local route, code, remark = M.route(namesrv, topic)
  if not route then return nil, "no route for " .. topic .. ": " .. tostring(code) .. " " .. tostring(remark) end
  local addrs = {}
  for _, bd in ipairs(route.brokerDatas) do addrs[bd.brokerName] = bd.brokerAddrs["0"] end
  table.sort(route.queueDatas, function(a, b) return a.brokerName < b.brokerName end)
  local all = {}
  for _, qd in ipairs(route.queueDatas) do
    local addr = addrs[qd.brokerName]
    for q = 0, qd.readQueueNums - 1 do
      local offset = 0
      while true do
        local msgs, resp = M.pull(addr, topic, q, offset, 32)
        if not msgs then return nil, resp end
        if #msgs == 0 then break end
        for _, m in ipairs(msgs) do
          m.broker_name = qd.brokerName
          all[#all + 1] = m
        end
        offset = tonumber(resp.ext.nextBeginOffset) or (offset + #msgs)
      end
    end
  end
  return all
end

return M
