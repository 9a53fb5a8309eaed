/*
 * lua_memlimit.h -- a memory limit for one Lua state (the lua_memory_limit_mb option).
 *
 * How it works: the state's allocator (LuaJIT's own, from luaL_newstate) is wrapped with
 * lua_setallocf() by one that counts the bytes the state holds and, while the owner has armed
 * it (a handler runs under lua_pcall), refuses an allocation that would take the state past the
 * limit. LuaJIT then raises its ordinary "not enough memory" error at that allocation, in
 * compiled code as in the interpreter, and the handler's batch fails. (A custom allocator given
 * to lua_newstate() is not an option: LuaJIT's 64-bit builds without LJ_GC64 refuse it, "Must
 * use luaL_newstate() for 64 bit target"; wrapping keeps LuaJIT's allocator underneath, so the
 * state's memory stays where that allocator puts it.)
 *
 * What counts: everything the state holds, garbage not yet collected included (LuaJIT starts a
 * collection when its heap has doubled since the last one, so a handler that keeps N MiB alive
 * may use about 2 N before a collection): set the limit well above what handlers keep. Once the
 * limit refused an allocation, the state may use a margin (a quarter of the limit, at least
 * 1 MiB) above it so that the error can be raised and reported; past that every allocation is
 * refused until the owner disarms the limit. Memory outside the Lua heap (machine code of
 * compiled traces, malloc through the FFI) is not counted.
 *
 * Ownership: the record is the caller's (it must outlive the state, or be uninstalled first).
 * Threads: the thread that owns L, like every call on L.
 */
#ifndef RMQ_LUA_MEMLIMIT_H
#define RMQ_LUA_MEMLIMIT_H

#include <lua.h>

#include <stddef.h>

typedef struct rmq_memlimit {
    lua_Alloc inner; /* the state's allocator before install */
    void *inner_ud;
    size_t used;    /* bytes the state holds */
    size_t limit;   /* bytes */
    size_t peak;    /* largest `used` seen */
    size_t tripped; /* `used` when an allocation was first refused; 0 = none (the owner clears) */
    size_t refused; /* allocations refused since install */
    int armed;      /* the owner's switch: refuse past the limit */
} rmq_memlimit_t;

/* Wrap L's allocator to count its bytes against limit_bytes (> 0); ml is filled in. Call when
 * no Lua code of L runs. */
void rmq__memlimit_install(lua_State *L, rmq_memlimit_t *ml, size_t limit_bytes);
/* Put the allocator back (before lua_close() when ml dies first). */
void rmq__memlimit_uninstall(lua_State *L, rmq_memlimit_t *ml);
/* Arm (refuse past the limit) or disarm. */
void rmq__memlimit_arm(rmq_memlimit_t *ml, int on);

#endif
