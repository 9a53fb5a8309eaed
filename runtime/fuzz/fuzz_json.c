/*
 * fuzz_json.c -- libFuzzer target for rmq.json's decoder (json_decode.c) against lua-cjson.
 *
 * Input: any bytes. They are decoded from a heap copy of exactly their length (so AddressSanitizer
 * sees a read past the end) by rmq.json's decode_box, and from a Lua string by lua-cjson's
 * cjson.decode; both must succeed with equal values (NaN equal to NaN, -0 distinct from 0) or
 * fail with the same message. Anything else aborts. When lua-cjson cannot be loaded, the
 * decoder still runs on every input (crashes and bad reads are still found).
 * Seeds: spec/fixtures/fuzz/json/.
 */
#include <lauxlib.h>
#include <lualib.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "luahost/lua_state.h"

static lua_State *L;

/* check(s, box) compares cjson.decode(s) with decode_box(box); returns nil or a complaint. */
static const char *check_src =
    "local dec_box = ...\n"
    "local ok_cj, cjson = pcall(require, 'cjson')\n"
    "local function same(a, b)\n"
    "  if type(a) ~= type(b) then return false end\n"
    "  if type(a) == 'number' then\n"
    "    if a ~= a then return b ~= b end\n"
    "    return a == b and 1 / a == 1 / b\n"
    "  end\n"
    "  if type(a) ~= 'table' then return a == b end\n"
    "  for k, v in pairs(a) do if not same(v, b[k]) then return false end end\n"
    "  for k in pairs(b) do if a[k] == nil then return false end end\n"
    "  return true\n"
    "end\n"
    "return function(s, box)\n"
    "  local ok2, b = pcall(dec_box, box)\n"
    "  if not ok_cj then return nil end\n"
    "  local ok1, a = pcall(cjson.decode, s)\n"
    "  if ok1 ~= ok2 then return 'cjson ' .. tostring(ok1) .. ' ' .. tostring(a) ..\n"
    "    ', rmq.json ' .. tostring(ok2) .. ' ' .. tostring(b) end\n"
    "  if ok1 and not same(a, b) then return 'values differ' end\n"
    "  if not ok1 and a ~= b then return 'errors differ: ' .. a .. ' / ' .. b end\n"
    "  return nil\n"
    "end\n";

typedef struct {
    const char *p;
    uint64_t n;
} src_box_t; /* rmq_json_src_t */

/* Closed at exit (before LeakSanitizer looks): lua-cjson keeps a buffer for its state's life. */
static void close_state(void)
{
    if (L) lua_close(L);
    L = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static long runs;
    if (!L) {
        L = luaL_newstate();
        atexit(close_state);
        luaL_openlibs(L);
        if (luaL_loadstring(L, check_src)) abort();
        rmq_luaopen_json(L);
        lua_getfield(L, -1, "decode_box");
        lua_remove(L, -2);
        if (lua_pcall(L, 1, 1, 0)) abort();
        lua_setglobal(L, "rmq_fuzz_check");
    }
    char *copy = malloc(size ? size : 1);
    if (!copy) abort();
    if (size) memcpy(copy, data, size);
    src_box_t box = {copy, size};
    lua_getglobal(L, "rmq_fuzz_check");
    lua_pushlstring(L, (const char *)data, size);
    /* decode_box reads the box through lua_topointer, which a light userdata gives as is. */
    lua_pushlightuserdata(L, &box);
    if (lua_pcall(L, 2, 1, 0)) {
        fprintf(stderr, "fuzz_json: check failed: %s\n", lua_tostring(L, -1));
        abort();
    }
    if (!lua_isnil(L, -1)) {
        fprintf(stderr, "fuzz_json: %s\ninput (%zu bytes): %.*s\n", lua_tostring(L, -1), size,
                (int)(size < 400 ? size : 400), (const char *)data);
        abort();
    }
    lua_settop(L, 0);
    free(copy);
    if (++runs % 4096 == 0) lua_gc(L, LUA_GCCOLLECT, 0);
    return 0;
}
