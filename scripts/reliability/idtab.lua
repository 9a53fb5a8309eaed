-- idtab.lua: the reliability suite's record of message ids: per msgId whether a producer had it
-- acknowledged and how many times a consumer delivered it successfully, with two running counts
-- (produced, and produced ones consumed at least once) so that "everything consumed?" costs
-- nothing however long the run. A soak produces millions of ids: as Lua strings in tables they
-- would pass LuaJIT's heap limit, so a 32-hex-digit id (every id rmqlua and RocketMQ print) is
-- kept as 16 bytes in an open-addressing table outside the Lua heap (FFI, 20 bytes a slot);
-- any other id (a fake broker's, a garbled line's) goes to a plain Lua table beside it.
-- One thread (the suite's driver); no Lua state of its own.
local ffi = require "ffi"
local bit = require "bit"

ffi.cdef [[
typedef struct { uint32_t w[4]; uint16_t ok; uint8_t used, produced; } rel_idslot_t;
void *calloc(size_t nmemb, size_t size);
void free(void *p);
]]

local band, bxor, lshift, rshift, tobit = bit.band, bit.bxor, bit.lshift, bit.rshift, bit.tobit
local slot_ptr = ffi.typeof("rel_idslot_t *")

-- Hex digit values by byte (255: not a hex digit).
local HEX = ffi.new("uint8_t[256]", 255)
for i = 0, 9 do HEX[48 + i] = i end
for i = 0, 5 do HEX[65 + i] = 10 + i; HEX[97 + i] = 10 + i end

local T = {}
T.__index = T

local function alloc(cap)
  local p = ffi.C.calloc(cap, ffi.sizeof("rel_idslot_t"))
  assert(p ~= nil, "idtab: out of memory")
  return ffi.gc(ffi.cast(slot_ptr, p), ffi.C.free)
end

function T.new()
  local cap = 1024
  return setmetatable({cap = cap, mask = cap - 1, n = 0, slots = alloc(cap), odd = {},
                       nproduced = 0, done = 0}, T)
end

-- The id's four 32-bit words, or nil when it is not 32 hex digits.
local words = ffi.new("uint32_t[4]")
local function parse(id)
  if #id ~= 32 then return nil end
  local p = ffi.cast("const uint8_t *", id)
  for w = 0, 3 do
    local v = 0
    for i = w * 8, w * 8 + 7 do
      local d = HEX[p[i]]
      if d == 255 then return nil end
      v = v * 16 + d
    end
    words[w] = v
  end
  return true
end

local function mix(h, w)
  h = tobit(h + tobit(w))
  h = tobit(h + lshift(h, 10))
  return bxor(h, rshift(h, 6))
end

local function hash(w0, w1, w2, w3)
  local h = mix(mix(mix(mix(0, w0), w1), w2), w3)
  h = tobit(h + lshift(h, 3))
  h = bxor(h, rshift(h, 11))
  return tobit(h + lshift(h, 15))
end

-- The slot of the parsed words: found, or free (used == 0) where they would go.
local function find(self, w0, w1, w2, w3)
  local s, mask = self.slots, self.mask
  local i = band(hash(w0, w1, w2, w3), mask)
  while true do
    local e = s[i]
    if e.used == 0 or (e.w[0] == w0 and e.w[1] == w1 and e.w[2] == w2 and e.w[3] == w3) then
      return e
    end
    i = band(i + 1, mask)
  end
end

local function grow(self)
  local old, ocap = self.slots, self.cap
  self.cap = ocap * 2
  self.mask = self.cap - 1
  self.slots = alloc(self.cap)
  for i = 0, ocap - 1 do
    local e = old[i]
    if e.used ~= 0 then
      local d = find(self, e.w[0], e.w[1], e.w[2], e.w[3])
      ffi.copy(d, e, ffi.sizeof("rel_idslot_t"))
    end
  end
end

-- The entry of id (created when missing if create): an FFI slot, or a Lua table for an odd id.
local function entry(self, id, create)
  if not parse(id) then
    local e = self.odd[id]
    if not e and create then
      e = {ok = 0, produced = 0, used = 1}
      self.odd[id] = e
    end
    return e
  end
  if create and (self.n + 1) * 10 > self.cap * 7 then grow(self) end
  local e = find(self, words[0], words[1], words[2], words[3])
  if e.used == 0 then
    if not create then return nil end
    e.w[0], e.w[1], e.w[2], e.w[3] = words[0], words[1], words[2], words[3]
    e.used = 1
    self.n = self.n + 1
  end
  return e
end

-- A producer had id acknowledged. True when it is new to the produced set.
function T:produce(id)
  local e = entry(self, id, true)
  if e.produced ~= 0 then return false end
  e.produced = 1
  self.nproduced = self.nproduced + 1
  if e.ok > 0 then self.done = self.done + 1 end
  return true
end

-- A successful delivery of id.
function T:delivered(id)
  local e = entry(self, id, true)
  if e.ok == 0 and e.produced ~= 0 then self.done = self.done + 1 end
  if e.ok < 65535 then e.ok = e.ok + 1 end
end

function T:is_produced(id)
  local e = entry(self, id, false)
  return e ~= nil and e.produced ~= 0
end

-- Successful deliveries of id, nil when none.
function T:ok(id)
  local e = entry(self, id, false)
  if e and e.ok > 0 then return e.ok end
end

local function idstr(e)
  return string.format("%08X%08X%08X%08X", e.w[0], e.w[1], e.w[2], e.w[3])
end

-- Every entry: for id, produced (bool), ok (count) in t:each() do ... end.
function T:each()
  local i, s, cap = -1, self.slots, self.cap
  local odd_k
  return function()
    while i + 1 < cap do
      i = i + 1
      local e = s[i]
      if e.used ~= 0 then return idstr(e), e.produced ~= 0, e.ok end
    end
    local e
    odd_k, e = next(self.odd, odd_k)
    if odd_k then return odd_k, e.produced ~= 0, e.ok end
  end
end

-- The ids of the produced set.
function T:each_produced()
  local it = self:each()
  return function()
    while true do
      local id, produced = it()
      if not id or produced then return id end
    end
  end
end

-- The ids delivered successfully, each with its count.
function T:each_ok()
  local it = self:each()
  return function()
    while true do
      local id, _, ok = it()
      if not id then return nil end
      if ok > 0 then return id, ok end
    end
  end
end

return T
