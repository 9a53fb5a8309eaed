/*
 * lua_memlimit.c -- a memory limit for one Lua state: its allocator wrapped to count bytes and
 * refuse what would go past the limit (lua_memlimit.h says how and what counts).
 *
 * Ownership: the record is the caller's; the wrapped allocator is the state's until uninstall or
 * lua_close(). Threads: the thread that owns the state (the allocator runs on it).
 */
#include "lua_memlimit.h"

#include <lauxlib.h>

#include <string.h>

#define MARGIN_MIN (1024 * 1024)

static void *limited_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    rmq_memlimit_t *ml = ud;
    if (ptr == NULL) osize = 0; /* LuaJIT passes 0 for new blocks; be sure */
    if (nsize > osize && ml->armed) {
        size_t next = ml->used + (nsize - osize);
        size_t margin = ml->limit / 4 > MARGIN_MIN ? ml->limit / 4 : MARGIN_MIN;
        if (next > ml->limit && (!ml->tripped || next > ml->limit + margin)) {
            if (!ml->tripped) ml->tripped = ml->used;
            ml->refused++;
            return NULL; /* LuaJIT raises "not enough memory" here */
        }
    }
    void *p = ml->inner(ml->inner_ud, ptr, osize, nsize);
    if (nsize == 0) {
        ml->used -= osize < ml->used ? osize : ml->used;
    } else if (p) {
        ml->used += nsize;
        ml->used -= osize < ml->used ? osize : ml->used;
        if (ml->used > ml->peak) ml->peak = ml->used;
    }
    return p;
}

void rmq__memlimit_install(lua_State *L, rmq_memlimit_t *ml, size_t limit_bytes)
{
    memset(ml, 0, sizeof(*ml));
    ml->inner = lua_getallocf(L, &ml->inner_ud);
    ml->limit = limit_bytes;
    ml->used = (size_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024 + (size_t)lua_gc(L, LUA_GCCOUNTB, 0);
    ml->peak = ml->used;
    lua_setallocf(L, limited_alloc, ml);
}

void rmq__memlimit_uninstall(lua_State *L, rmq_memlimit_t *ml)
{
    lua_setallocf(L, ml->inner, ml->inner_ud);
}

void rmq__memlimit_arm(rmq_memlimit_t *ml, int on)
{
    ml->armed = on;
}
