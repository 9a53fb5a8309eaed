-- admin.lua: what the development broker's admin specs share: a tolerant reader of fastjson
-- bodies (bare integer keys, MessageQueue objects as map keys), the shape of a body for
-- comparison with a captured one, and small request helpers over the raw client.
local wire = require "02-integration.01-devbroker.wire"
local cjson = require "cjson"

local M = {}

-- Parse a fastjson text into {kind=..., members/items/v}.
function M.parse(s)
  local pos = 1
  local function ws() pos = s:find("[^ \t\r\n]", pos) or #s + 1 end
  local value
  local function str()
    local out, i = {}, pos + 1
    while true do
      local c = s:sub(i, i)
      if c == "" then error("unterminated string") end
      if c == '"' then break end
      if c == "\\" then out[#out + 1] = s:sub(i, i + 1); i = i + 2
      else out[#out + 1] = c; i = i + 1 end
    end
    pos = i + 1
    return table.concat(out)
  end
  -- Past an object's or an array's opening bracket: true when it is empty (past close too).
  local function empty(close)
    pos = pos + 1
    ws()
    if s:sub(pos, pos) ~= close then return false end
    pos = pos + 1
    return true
  end
  -- After a member or an item: true past close, which ends the object or array, false past
  -- the comma before the next one.
  local function closes(close)
    ws()
    local d = s:sub(pos, pos)
    pos = pos + 1
    if d == close then return true end
    assert(d == ",", "comma expected at " .. pos)
    return false
  end
  function value()
    ws()
    local c = s:sub(pos, pos)
    if c == "{" then
      local obj = {kind = "object", members = {}}
      if empty("}") then return obj end
      repeat
        local k = value()
        ws()
        assert(s:sub(pos, pos) == ":", "colon expected at " .. pos)
        pos = pos + 1
        obj.members[#obj.members + 1] = {k, value()}
      until closes("}")
      return obj
    elseif c == "[" then
      local arr = {kind = "array", items = {}}
      if empty("]") then return arr end
      repeat
        arr.items[#arr.items + 1] = value()
      until closes("]")
      return arr
    elseif c == '"' then
      return {kind = "string", v = str()}
    elseif s:sub(pos, pos + 3) == "true" then
      pos = pos + 4
      return {kind = "boolean", v = true}
    elseif s:sub(pos, pos + 4) == "false" then
      pos = pos + 5
      return {kind = "boolean", v = false}
    elseif s:sub(pos, pos + 3) == "null" then
      pos = pos + 4
      return {kind = "null"}
    else
      local num = s:match("^-?[%d%.eE+-]+", pos)
      assert(num, "bad value at " .. pos)
      pos = pos + #num
      return {kind = "number", v = num}
    end
  end
  local v = value()
  ws()
  assert(pos > #s, "trailing text at " .. pos)
  return v
end

-- Fields whose keys are data (group, topic, queue, config names): only their values' shapes
-- count. "X[]" names the items of array X.
M.MAPS = {table = true, offsetTable = true, subscriptionTable = true, ["consumeStatsList[]"] = true,
          subscriptionGroupTable = true}

local function union(list)
  local seen, out = {}, {}
  for _, s in ipairs(list) do
    if not seen[s] then seen[s] = true; out[#out + 1] = s end
  end
  table.sort(out)
  return table.concat(out, "|")
end

-- The shape of a parsed body: field names (sorted) and value kinds, recursively; map-like
-- fields by the kinds of their keys and the union of their values' shapes; arrays by the union
-- of their items' shapes.
function M.shape(v, parent)
  if v.kind == "object" then
    if M.MAPS[parent] then
      local ks, vs = {}, {}
      for _, m in ipairs(v.members) do
        ks[#ks + 1] = m[1].kind
        vs[#vs + 1] = M.shape(m[2])
      end
      return "map<" .. union(ks) .. ":" .. union(vs) .. ">"
    end
    local keys = {}
    for _, m in ipairs(v.members) do
      keys[#keys + 1] = (m[1].v or m[1].kind) .. "=" .. M.shape(m[2], m[1].v)
    end
    table.sort(keys)
    return "{" .. table.concat(keys, ",") .. "}"
  elseif v.kind == "array" then
    local its = {}
    for _, it in ipairs(v.items) do its[#its + 1] = M.shape(it, (parent or "") .. "[]") end
    return "[" .. union(its) .. "]"
  end
  return v.kind
end

-- The names of a table's keys, sorted and joined by commas (header fields compared as a set).
function M.keyset(t)
  local k = {}
  for name in pairs(t or {}) do k[#k + 1] = name end
  table.sort(k)
  return table.concat(k, ",")
end

-- The member of a parsed object by name.
function M.get(obj, name)
  for _, m in ipairs(obj.members) do
    if m[1].v == name then return m[2] end
  end
end

-- A request with JSON header; returns the response (asserts it came).
function M.req(c, code, ext, body)
  local r, err = c:request(code, ext or {}, body)
  assert(r, "no answer to request " .. code .. ": " .. tostring(err))
  return r
end

-- The decoded JSON of a standard-JSON answer.
function M.json(r)
  return cjson.decode(r.body)
end

-- Send n messages to topic/queue through SEND_MESSAGE_V2; returns the answers.
function M.send(c, topic, n, opts)
  opts = opts or {}
  local out = {}
  for i = 1, n do
    local ext = wire.send_ext(topic, {queue = opts.queue or ((i - 1) % (opts.queues or 1)),
                                      keys = "K" .. i, tags = opts.tags})
    local r = M.req(c, 310, ext, opts.body or ("body-" .. i))
    assert(r.code == 0, "send failed: " .. tostring(r.remark))
    out[#out + 1] = r
  end
  return out
end

return M
