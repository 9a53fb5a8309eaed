-- rmq.ngx_re: ngx.re.match and ngx.re.find of the ngx shim (rmq.ngx) on PCRE2 (libpcre2-8,
-- loaded through the FFI when first used), with OpenResty's results: match -> captures ([0] the
-- whole match, [1].. the groups, false for a group that did not take part, named groups by name
-- too) or nil when nothing matched, or nil and an error for a bad regex or option; find -> from,
-- to (1-based, inclusive) of the match or of capture nth. Options: a (anchored), d (accepted, the
-- normal matcher is used), D (duplicate names), i, j (JIT), J (JavaScript-compatible escapes),
-- m, o (compile once: the first 1,024 regexes are cached whatever the flags), s, u (UTF-8), x. ctx.pos: where to start
-- (1-based), set past the match afterwards.
-- Threads: a cache per Lua state; compiled regexes are not shared between states.
local ffi = require "ffi"

local type, tostring, error, tonumber = type, tostring, error, tonumber
local M = {}

ffi.cdef [[
typedef struct rmq_pcre2_code rmq_pcre2_code;
typedef struct rmq_pcre2_md rmq_pcre2_md;
rmq_pcre2_code *pcre2_compile_8(const char *pattern, size_t length, uint32_t options,
                                int *errorcode, size_t *erroroffset, void *ccontext);
int pcre2_get_error_message_8(int errorcode, char *buffer, size_t bufflen);
int pcre2_jit_compile_8(rmq_pcre2_code *code, uint32_t options);
int pcre2_pattern_info_8(const rmq_pcre2_code *code, uint32_t what, void *where);
void pcre2_code_free_8(rmq_pcre2_code *code);
rmq_pcre2_md *pcre2_match_data_create_from_pattern_8(const rmq_pcre2_code *code, void *gcontext);
void pcre2_match_data_free_8(rmq_pcre2_md *md);
int pcre2_match_8(const rmq_pcre2_code *code, const char *subject, size_t length,
                  size_t startoffset, uint32_t options, rmq_pcre2_md *md, void *mcontext);
size_t *pcre2_get_ovector_pointer_8(rmq_pcre2_md *md);
]]

local OPT = {
  a = 0x80000000, -- PCRE2_ANCHORED
  D = 0x00000040, -- PCRE2_DUPNAMES
  i = 0x00000008, -- PCRE2_CASELESS
  J = 0x00000002, -- PCRE2_ALT_BSUX
  m = 0x00000400, -- PCRE2_MULTILINE
  s = 0x00000020, -- PCRE2_DOTALL
  u = 0x00080000, -- PCRE2_UTF
  x = 0x00000080, -- PCRE2_EXTENDED
  d = 0, j = 0, o = 0,
}
local INFO_CAPTURECOUNT, INFO_NAMECOUNT, INFO_NAMEENTRYSIZE, INFO_NAMETABLE = 4, 17, 18, 19
local NOMATCH = -1

-- The library is also dlopen()ed once more and never closed: the state's close runs the
-- finalizers of userdata (ffi.load's handle: dlclose) before those of cdata (the compiled
-- regexes' pcre2_code_free), which must still find it mapped.
pcall(ffi.cdef, "void *dlopen(const char *file, int mode);")
local RTLD_NOW = 2
local lib
local function pcre()
  if lib == nil then
    lib = false
    for _, name in ipairs { "libpcre2-8.so.0", "libpcre2-8.so" } do
      if ffi.C.dlopen(name, RTLD_NOW) ~= nil then
        lib = ffi.load(name)
        break
      end
    end
  end
  return lib or nil
end

-- options .. "/" .. regex -> compiled: at most CACHE_MAX (OpenResty's
-- lua_regex_cache_max_entries default); past it a regex is compiled for its call alone.
local cache, ncached, CACHE_MAX = {}, 0, 1024
local errcode, erroff = ffi.new("int[1]"), ffi.new("size_t[1]")
local u32 = ffi.new("uint32_t[1]")
local ptrp = ffi.new("const unsigned char *[1]")

-- compiled { code, md, ncap, names = { [group] = name }, jit } or nil, err
local function compile(regex, opts)
  if type(regex) ~= "string" then return nil, "bad argument: regex must be a string" end
  opts = opts or ""
  if type(opts) ~= "string" then return nil, "bad argument: options must be a string" end
  local key = opts .. "/" .. regex
  local c = cache[key]
  if c then return c end
  local P = pcre()
  if not P then return nil, "ngx.re needs libpcre2-8 (Debian's libpcre2-8-0), which cannot be loaded" end
  local flags, jit = 0, false
  for i = 1, #opts do
    local ch = opts:sub(i, i)
    local f = OPT[ch]
    if f == nil then return nil, 'unknown flag "' .. ch .. '" (flags "' .. opts .. '")' end
    flags = flags + f
    if ch == "j" then jit = true end
  end
  local code = P.pcre2_compile_8(regex, #regex, flags, errcode, erroff, nil)
  if code == nil then
    local buf = ffi.new("char[256]")
    P.pcre2_get_error_message_8(errcode[0], buf, 256)
    return nil, "pcre2_compile() failed: " .. ffi.string(buf) .. " in \"" .. regex .. "\" at \""
      .. regex:sub(tonumber(erroff[0]) + 1) .. "\""
  end
  code = ffi.gc(code, P.pcre2_code_free_8)
  if jit then P.pcre2_jit_compile_8(code, 1) end -- PCRE2_JIT_COMPLETE; the interpreter otherwise
  P.pcre2_pattern_info_8(code, INFO_CAPTURECOUNT, u32)
  local ncap = tonumber(u32[0])
  local names
  P.pcre2_pattern_info_8(code, INFO_NAMECOUNT, u32)
  local nnames = tonumber(u32[0])
  if nnames > 0 then
    names = {}
    P.pcre2_pattern_info_8(code, INFO_NAMEENTRYSIZE, u32)
    local esize = tonumber(u32[0])
    P.pcre2_pattern_info_8(code, INFO_NAMETABLE, ptrp)
    local t = ptrp[0]
    for i = 0, nnames - 1 do
      local e = t + i * esize
      local group = e[0] * 256 + e[1]
      names[group] = ffi.string(e + 2)
    end
  end
  local md = ffi.gc(P.pcre2_match_data_create_from_pattern_8(code, nil), P.pcre2_match_data_free_8)
  c = { code = code, md = md, ncap = ncap, names = names }
  if ncached < CACHE_MAX then
    cache[key] = c
    ncached = ncached + 1
  end
  return c
end

-- rc > 0 and the ovector, nil (no match), or nil, err
local function exec(subj, regex, opts, ctx)
  if type(subj) ~= "string" then
    if type(subj) ~= "number" then return nil, "bad argument: subject must be a string" end
    subj = tostring(subj)
  end
  local c, err = compile(regex, opts)
  if not c then return nil, err end
  local start = 0
  if type(ctx) == "table" and ctx.pos then start = ctx.pos - 1 end
  if start < 0 or start > #subj then return nil end
  local rc = lib.pcre2_match_8(c.code, subj, #subj, start, 0, c.md, nil)
  if rc == NOMATCH then return nil end
  if rc < 0 then return nil, "pcre2_match() failed: " .. rc end
  local ov = lib.pcre2_get_ovector_pointer_8(c.md)
  if type(ctx) == "table" then ctx.pos = tonumber(ov[1]) + 1 end
  return c, ov, subj
end

local UNSET = ffi.cast("size_t", ffi.cast("int64_t", -1)) -- PCRE2_UNSET, ~(size_t)0

-- ngx.re.match(subject, regex, options?, ctx?, res?) -> captures | nil | nil, err
function M.match(subject, regex, opts, ctx, res)
  local c, ov, subj = exec(subject, regex, opts, ctx)
  if not c or not ov then return nil, ov end
  local m = res or {}
  for i = 0, c.ncap do
    local a, b = ov[2 * i], ov[2 * i + 1]
    if a == UNSET then m[i] = false else m[i] = subj:sub(tonumber(a) + 1, tonumber(b)) end
  end
  if c.names then
    for g, name in pairs(c.names) do m[name] = m[g] end
  end
  return m
end

-- ngx.re.find(subject, regex, options?, ctx?, nth?) -> from, to | nil | nil, err
function M.find(subject, regex, opts, ctx, nth)
  local c, ov = exec(subject, regex, opts, ctx)
  if not c or not ov then return nil, nil, ov end
  nth = nth or 0
  if nth > c.ncap then return nil end
  local a, b = ov[2 * nth], ov[2 * nth + 1]
  if a == UNSET then return nil end
  return tonumber(a) + 1, tonumber(b)
end

-- The rest of ngx.re is not in the shim: a clear error rather than "attempt to call a nil value".
for _, name in ipairs { "gmatch", "sub", "gsub", "split", "opt" } do
  M[name] = function()
    error("ngx.re." .. name .. " is not part of rmqlua's ngx shim (ngx.re.match and ngx.re.find are)", 2)
  end
end

return M
