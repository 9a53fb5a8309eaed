/*
 * lua_state.h -- creating the LuaJIT states that run consumer scripts (control, consume, check
 * and test roles) and the small C side of the `rmq` Lua module.
 *
 * A new state has the standard libraries, package.path set to the script's folder and the
 * runtime's lua/ folder, cjson reachable through require, package.loaded["rmq.host"] describing
 * the host (role, thread index and count, consumer group, log function, the addresses of the
 * consumer's shared dictionaries and of its flow control), and the core FFI module
 * (rmq.core) loaded: it cdefs rmqlua_ffi.h and checks rmq_ffi_abi_version() against the
 * version the Lua side was generated for, failing loudly on a mismatch.
 *
 * Ownership: the caller owns the returned lua_State (lua_close it).
 * Threads: a state belongs to the thread that created it; these functions use only that state.
 */
#ifndef RMQ_LUA_STATE_H
#define RMQ_LUA_STATE_H

#include "base/common.h"
#include "rmqlua_ffi.h"

#include <lua.h>

typedef struct rmq_lua_host {
    const char *role;           /* "control", "consume", "check", "test" */
    const char *script_path;    /* its folder goes first on package.path; may be NULL */
    const char *consumer_group; /* may be NULL */
    int thread_index;           /* 0-based for consume states, -1 otherwise */
    int thread_count;
    /* The consumer's shared dictionaries (rmq.shared); NULL: the state makes its own set. */
    rmq_shdicts_t *shdicts;
    /* Where rmq.pause/resume/stop go; NULL: they are only recorded (rmqlua test / check). */
    rmq_flow_t *flow;
    /* lua_ngx_shim, as rmq.host.ngx_shim: RMQ_NGX_ON installs the global ngx before the script
     * runs, RMQ_NGX_OFF does not; RMQ_NGX_UNKNOWN (a state that reads the options from the
     * script's table) installs it for the load and keeps it if the table says so (rmq.script). */
    int ngx_shim;
} rmq_lua_host_t;

enum { RMQ_NGX_UNKNOWN = 0, RMQ_NGX_OFF = 1, RMQ_NGX_ON = 2 };

/*
 * The folder of the runtime's Lua modules (rmq/init.lua ...), the first of: $RMQLUA_LUA_DIR;
 * share/rmqlua/lua beside the installed binary or library that holds this code (found from
 * where it was loaded, so an installed rmqlua needs no environment variable); the source tree's
 * lua/ (a binary in its build tree); the configured install folder. Any thread.
 */
const char *rmq__lua_dir(void);

/*
 * Create a state for host. Returns it, or NULL with errstr (the ABI check or a missing lua/
 * folder). Main use: every state the runtime creates.
 */
/* The rmq.json decoder's module (json_decode.c): { decode_string, decode_box, null }. */
int rmq_luaopen_json(lua_State *L);

/* Replace package.loaders[2] with the searcher that shares compiled modules between the
 * process's states (lua_bccache.c). */
void rmq__lua_bccache_install(lua_State *L);

lua_State *rmq__lua_new(const rmq_lua_host_t *host, char *errstr, size_t errstr_size);

/*
 * The message handler of rmq__lua_pcall's lua_pcall (a lua_CFunction): the error message (or
 * its __tostring, or a note of its type) with a traceback.
 */
int rmq__lua_traceback(lua_State *L);

/*
 * Call the function at the top of the stack (with nargs arguments below it) under lua_pcall with
 * a traceback handler. Returns 0 and leaves nres results, or RMQ_ERR_LUA with errstr holding the
 * message and traceback (nothing is left on the stack).
 */
int rmq__lua_pcall(lua_State *L, int nargs, int nres, char *errstr, size_t errstr_size);

/*
 * require(modname)(...)-style helper: push require(modname)[field] (a function) onto the stack.
 * Returns 0 or RMQ_ERR_LUA with errstr.
 */
int rmq__lua_getfield_mod(lua_State *L, const char *modname, const char *field, char *errstr,
                          size_t errstr_size);

#endif
