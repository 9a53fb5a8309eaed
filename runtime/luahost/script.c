/*
 * script.c -- the consumer script's control state (script.h): configuration from the returned
 * table, and the allocate / on_assign / on_revoke / on_stats hooks on the loop thread.
 *
 * Ownership: an rmq_script_t owns its lua_State; hook arguments are copied into it.
 * Threads: one thread at a time (the loop thread, or the CLI's main thread for check/run set-up).
 */
#include "script.h"

#include "consumer/allocate.h"
#include "consumer/conf.h"
#include "lua_state.h"
#include "consumer/stats.h"

#include <lauxlib.h>

#include <stdio.h>
#include <stdlib.h>

struct rmq_script {
    lua_State *L;
    char *path;
    unsigned hooks;
    int ref_allocate, ref_on_assign, ref_on_revoke, ref_on_stats;
    char **files; /* rmq__script_files */
    int nfiles;
};

static const struct {
    const char *name;
    unsigned bit;
} hook_names[] = {
    {"consume", RMQ_HOOK_CONSUME},     {"consume_orderly", RMQ_HOOK_CONSUME_ORDERLY},
    {"allocate", RMQ_HOOK_ALLOCATE},   {"init", RMQ_HOOK_INIT},
    {"shutdown", RMQ_HOOK_SHUTDOWN},   {"on_assign", RMQ_HOOK_ON_ASSIGN},
    {"on_revoke", RMQ_HOOK_ON_REVOKE}, {"on_stats", RMQ_HOOK_ON_STATS},
};

/* Push element i of the array on top of the stack, then its fields names[0..n) (n + 1 slots). */
static void push_record(lua_State *L, int i, const char *const *names, int n)
{
    lua_rawgeti(L, -1, i);
    for (int k = 0; k < n; k++)
        lua_getfield(L, -1 - k, names[k]);
}

/* Apply spec.__options and spec.__subscribe (spec at index si) to conf. */
static int apply_conf(lua_State *L, int si, const char *path, unsigned hooks, rmq_conf_t *conf,
                      char *errstr, size_t errstr_size)
{
    char err[1024];
    int strategy_set = 0;
    lua_getfield(L, si, "__options");
    int n = (int)lua_objlen(L, -1);
    for (int i = 1; i <= n; i++) {
        static const char *const fields[] = {"name", "value", "line"};
        push_record(L, i, fields, 3);
        const char *name = lua_tostring(L, -3);
        const char *value = lua_tostring(L, -2);
        int line = (int)lua_tointeger(L, -1);
        if (!strcmp(name, "allocate_message_queue_strategy")) strategy_set = 1;
        if (!strcmp(name, "message_listener")) {
            rmq__seterr(errstr, errstr_size, "%s:%d: %s", path, line, RMQ_SCRIPT_LISTENER_MSG);
            lua_pop(L, 5);
            return RMQ_ERR_CONFIG;
        }
        if (rmq__conf_set(conf, name, value, err, sizeof(err))) {
            rmq__seterr(errstr, errstr_size, "%s:%d: %s", path, line, err);
            lua_pop(L, 5);
            return RMQ_ERR_CONFIG;
        }
        lua_pop(L, 4);
    }
    lua_pop(L, 1);

    lua_getfield(L, si, "__subscribe");
    n = (int)lua_objlen(L, -1);
    for (int i = 1; i <= n; i++) {
        static const char *const fields[] = {"topic", "expression", "line", "type"};
        push_record(L, i, fields, 4);
        const char *topic = lua_tostring(L, -4);
        const char *expr = lua_tostring(L, -3);
        int line = (int)lua_tointeger(L, -2);
        const char *type = lua_tostring(L, -1);
        if (rmq__conf_add_subscription_type(conf, topic, expr, type, err, sizeof(err))) {
            rmq__seterr(errstr, errstr_size, "%s:%d: subscribe %s: %s", path, line, topic, err);
            lua_pop(L, 6);
            return RMQ_ERR_CONFIG;
        }
        lua_pop(L, 5);
    }
    lua_pop(L, 1);

    /* The listener kind and the allocate strategy follow from the hooks. */
    const char *listener = (hooks & RMQ_HOOK_CONSUME_ORDERLY) ? "ORDERLY" : "CONCURRENTLY";
    if ((hooks & RMQ_HOOK_CONSUME) && (hooks & RMQ_HOOK_CONSUME_ORDERLY)) listener = "BOTH";
    if (rmq__conf_set(conf, "message_listener", listener, err, sizeof(err))) {
        rmq__seterr(errstr, errstr_size, "%s: %s", path, err);
        return RMQ_ERR_CONFIG;
    }
    if ((hooks & RMQ_HOOK_ALLOCATE) && !strategy_set &&
        rmq__conf_set(conf, "allocate_message_queue_strategy", "LUA", err, sizeof(err))) {
        rmq__seterr(errstr, errstr_size, "%s: %s", path, err);
        return RMQ_ERR_CONFIG;
    }
    return 0;
}

/* s->files from rmq.script.local_files(path), run in the freshly loaded control state. */
static void collect_files(rmq_script_t *s)
{
    lua_State *L = s->L;
    char err[512];
    s->files = rmq__xcalloc(1, sizeof(char *));
    s->files[0] = rmq__xstrdup(s->path);
    s->nfiles = 1;
    if (rmq__lua_getfield_mod(L, "rmq.script", "local_files", err, sizeof(err))) return;
    lua_pushstring(L, s->path);
    if (rmq__lua_pcall(L, 1, 1, err, sizeof(err))) return;
    int n = lua_istable(L, -1) ? (int)lua_objlen(L, -1) : 0;
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        const char *f = lua_tostring(L, -1);
        if (f && strcmp(f, s->path)) {
            s->files = realloc(s->files, sizeof(char *) * (size_t)(s->nfiles + 1));
            if (!s->files) abort();
            s->files[s->nfiles++] = rmq__xstrdup(f);
        }
        lua_pop(L, 1);
    }
    lua_settop(L, 0);
}

const char *const *rmq__script_files(const rmq_script_t *s, int *n)
{
    *n = s->nfiles;
    return (const char *const *)s->files;
}

int rmq__script_check_consume(const char *path, const char *group, int ngx_shim, char *err,
                              size_t errsz)
{
    rmq_lua_host_t h = {.role = "check", .script_path = path, .consumer_group = group,
                        .thread_index = 0, .thread_count = 1,
                        .ngx_shim = ngx_shim ? RMQ_NGX_ON : RMQ_NGX_OFF};
    lua_State *L = rmq__lua_new(&h, err, errsz);
    if (!L) return RMQ_ERR_LUA;
    int rc = RMQ_ERR_LUA;
    if (rmq__lua_getfield_mod(L, "rmq.script", "load", err, errsz)) goto out;
    lua_pushstring(L, path);
    if (rmq__lua_pcall(L, 1, 1, err, errsz)) goto out;
    int spec = lua_gettop(L);
    if (rmq__lua_getfield_mod(L, "rmq.dispatch", "new", err, errsz)) goto out;
    lua_pushvalue(L, spec);
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, 0);
    lua_setfield(L, -2, "thread_index");
    lua_pushinteger(L, 1);
    lua_setfield(L, -2, "thread_count");
    if (group) {
        lua_pushstring(L, group);
        lua_setfield(L, -2, "consumer_group");
    }
    if (rmq__lua_pcall(L, 2, 1, err, errsz)) goto out;
    int d = lua_gettop(L);
    char tmp[2048];
    lua_getfield(L, d, "init");
    if (rmq__lua_pcall(L, 0, 0, tmp, sizeof(tmp))) {
        rmq__seterr(err, errsz, "init hook failed: %s", tmp);
        goto out;
    }
    lua_getfield(L, d, "shutdown");
    if (rmq__lua_pcall(L, 0, 0, tmp, sizeof(tmp))) {
        rmq__seterr(err, errsz, "shutdown hook failed: %s", tmp);
        goto out;
    }
    rc = 0;
out:
    lua_close(L);
    return rc;
}

int rmq__script_load(const char *path, rmq_conf_t *conf, rmq_script_t **out, char *errstr,
                     size_t errstr_size)
{
    return rmq__script_load_ex(path, NULL, NULL, conf, out, errstr, errstr_size);
}

int rmq__script_load_ex(const char *path, rmq_shdicts_t *shdicts, rmq_flow_t *flow,
                        rmq_conf_t *conf, rmq_script_t **out, char *errstr, size_t errstr_size)
{
    rmq_lua_host_t h = {.role = "control",
                        .script_path = path,
                        .thread_index = -1,
                        .shdicts = shdicts,
                        .flow = flow};
    lua_State *L = rmq__lua_new(&h, errstr, errstr_size);
    if (!L) return RMQ_ERR_LUA;
    int rc = 0;
    if ((rc = rmq__lua_getfield_mod(L, "rmq.script", "try_load", errstr, errstr_size))) goto fail;
    lua_pushstring(L, path);
    if ((rc = rmq__lua_pcall(L, 1, 3, errstr, errstr_size))) goto fail;
    if (lua_isnil(L, -3)) {
        const char *kind = lua_tostring(L, -1);
        rmq__seterr(errstr, errstr_size, "%s", lua_tostring(L, -2));
        rc = (kind && !strcmp(kind, "config")) ? RMQ_ERR_CONFIG : RMQ_ERR_LUA;
        goto fail;
    }
    lua_pop(L, 2);
    int si = lua_gettop(L);
    unsigned hooks = 0;
    for (size_t i = 0; i < RMQ_ARRAY_SIZE(hook_names); i++) {
        lua_getfield(L, si, hook_names[i].name);
        if (lua_isfunction(L, -1)) hooks |= hook_names[i].bit;
        lua_pop(L, 1);
    }
    if (conf && (rc = apply_conf(L, si, path, hooks, conf, errstr, errstr_size))) goto fail;
    if (!out) {
        lua_close(L);
        return 0;
    }
    rmq_script_t *s = rmq__xcalloc(1, sizeof(*s));
    s->L = L;
    s->path = rmq__xstrdup(path);
    s->hooks = hooks;
    lua_getfield(L, si, "allocate");
    s->ref_allocate = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_getfield(L, si, "on_assign");
    s->ref_on_assign = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_getfield(L, si, "on_revoke");
    s->ref_on_revoke = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_getfield(L, si, "on_stats");
    s->ref_on_stats = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_settop(L, 0);
    collect_files(s);
    *out = s;
    return 0;
fail:
    lua_close(L);
    return rc ? rc : RMQ_ERR_LUA;
}

void rmq__script_destroy(rmq_script_t *s)
{
    if (!s) return;
    lua_close(s->L);
    for (int i = 0; i < s->nfiles; i++) free(s->files[i]);
    free(s->files);
    free(s->path);
    free(s);
}

const char *rmq__script_path(const rmq_script_t *s)
{
    return s->path;
}

unsigned rmq__script_hooks(const rmq_script_t *s)
{
    return s->hooks;
}

/* Push { topic =, broker_name =, queue_id = }. */
static void push_mq(lua_State *L, const rmq_mq_t *mq)
{
    lua_createtable(L, 0, 3);
    lua_pushstring(L, mq->topic ? mq->topic : "");
    lua_setfield(L, -2, "topic");
    lua_pushstring(L, mq->broker_name ? mq->broker_name : "");
    lua_setfield(L, -2, "broker_name");
    lua_pushinteger(L, mq->queue_id);
    lua_setfield(L, -2, "queue_id");
}

static void push_mq_list(lua_State *L, const rmq_mq_t *mqs, int n)
{
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        push_mq(L, &mqs[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

/* Push the key "topic\1broker\1qid" of the mq table at idx, or nil when it is not one. */
static void push_mq_key(lua_State *L, int idx)
{
    if (!lua_istable(L, idx)) {
        lua_pushnil(L);
        return;
    }
    lua_getfield(L, idx, "topic");
    lua_getfield(L, idx, "broker_name");
    lua_getfield(L, idx, "queue_id");
    if (lua_type(L, -3) != LUA_TSTRING || lua_type(L, -2) != LUA_TSTRING ||
        lua_type(L, -1) != LUA_TNUMBER) {
        lua_pop(L, 3);
        lua_pushnil(L);
        return;
    }
    lua_pushfstring(L, "%s@%s#%d", lua_tostring(L, -3), lua_tostring(L, -2),
                    (int)lua_tointeger(L, -1));
    lua_replace(L, -4);
    lua_pop(L, 2);
}

int rmq__script_allocate(rmq_script_t *s, const char *group, const char *client_id,
                         const rmq_mq_t *mq_all, int n_mq, const char *const *cid_all, int n_cid,
                         int *out_idx, char *errstr, size_t errstr_size)
{
    lua_State *L = s->L;
    if (!(s->hooks & RMQ_HOOK_ALLOCATE)) {
        rmq__seterr(errstr, errstr_size, "%s has no allocate hook", s->path);
        return RMQ_ERR_NOT_FOUND;
    }
    int top = lua_gettop(L);
    /* index: key -> position (1-based) in mq_all */
    lua_createtable(L, 0, n_mq);
    int ix = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_allocate);
    lua_pushstring(L, group ? group : "");
    lua_pushstring(L, client_id ? client_id : "");
    push_mq_list(L, mq_all, n_mq);
    for (int i = 0; i < n_mq; i++) {
        lua_rawgeti(L, -1, i + 1);
        push_mq_key(L, lua_gettop(L));
        lua_pushinteger(L, i + 1);
        lua_rawset(L, ix);
        lua_pop(L, 1);
    }
    lua_createtable(L, n_cid, 0);
    for (int i = 0; i < n_cid; i++) {
        lua_pushstring(L, cid_all[i]);
        lua_rawseti(L, -2, i + 1);
    }
    char err[4096];
    if (rmq__lua_pcall(L, 4, 1, err, sizeof(err))) {
        rmq__seterr(errstr, errstr_size, "allocate hook of %s failed: %s", s->path, err);
        lua_settop(L, top);
        return RMQ_ERR_LUA;
    }
    int r = lua_gettop(L);
    int rc = 0, n = 0;
    if (!lua_istable(L, r)) {
        rmq__seterr(errstr, errstr_size,
                    "allocate hook of %s returned %s, not a list of message queues", s->path,
                    luaL_typename(L, r));
        rc = RMQ_ERR_INVALID;
        goto out;
    }
    int len = (int)lua_objlen(L, r);
    char *used = rmq__xcalloc((size_t)n_mq + 1, 1);
    for (int i = 1; i <= len; i++) {
        lua_rawgeti(L, r, i);
        push_mq_key(L, lua_gettop(L));
        if (lua_isnil(L, -1)) {
            rmq__seterr(errstr, errstr_size,
                        "allocate hook of %s: entry %d is not a message queue "
                        "({ topic =, broker_name =, queue_id = })",
                        s->path, i);
            rc = RMQ_ERR_INVALID;
            lua_pop(L, 2);
            break;
        }
        lua_pushvalue(L, -1);
        lua_rawget(L, ix);
        int pos = (int)lua_tointeger(L, -1);
        if (pos < 1) {
            rmq__seterr(errstr, errstr_size,
                        "allocate hook of %s: entry %d (%s) is not one of mq_all", s->path, i,
                        lua_tostring(L, -2));
            rc = RMQ_ERR_INVALID;
            lua_pop(L, 3);
            break;
        }
        if (used[pos]) {
            rmq__seterr(errstr, errstr_size, "allocate hook of %s: entry %d (%s) is a duplicate",
                        s->path, i, lua_tostring(L, -2));
            rc = RMQ_ERR_INVALID;
            lua_pop(L, 3);
            break;
        }
        used[pos] = 1;
        out_idx[n++] = pos - 1;
        lua_pop(L, 3);
    }
    free(used);
out:
    lua_settop(L, top);
    return rc ? rc : n;
}

static void call_mq_hook(rmq_script_t *s, int ref, unsigned bit, const char *name,
                         const rmq_mq_t *mqs, int n)
{
    if (!(s->hooks & bit)) return;
    lua_State *L = s->L;
    char err[4096];
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    push_mq_list(L, mqs, n);
    if (rmq__lua_pcall(L, 1, 0, err, sizeof(err)))
        rmq_log_error("lua", "%s hook of %s failed: %s", name, s->path, err);
}

void rmq__script_on_assign(rmq_script_t *s, const rmq_mq_t *mqs, int n)
{
    call_mq_hook(s, s->ref_on_assign, RMQ_HOOK_ON_ASSIGN, "on_assign", mqs, n);
}

void rmq__script_on_revoke(rmq_script_t *s, const rmq_mq_t *mqs, int n)
{
    call_mq_hook(s, s->ref_on_revoke, RMQ_HOOK_ON_REVOKE, "on_revoke", mqs, n);
}

/* A JSON value as a Lua value: objects and arrays become tables, numbers Lua numbers (every
 * integer here -- counts, offsets, ms timestamps -- is far below 2^53, so exact). */
static void push_json(lua_State *L, json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *e;
        lua_createtable(L, 0, (int)json_object_size(v));
        json_object_foreach(v, k, e)
        {
            push_json(L, e);
            lua_setfield(L, -2, k);
        }
        break;
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *e;
        lua_createtable(L, (int)json_array_size(v), 0);
        json_array_foreach(v, i, e)
        {
            push_json(L, e);
            lua_rawseti(L, -2, (int)i + 1);
        }
        break;
    }
    case JSON_STRING:
        lua_pushlstring(L, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        lua_pushnumber(L, (lua_Number)json_integer_value(v));
        break;
    case JSON_REAL:
        lua_pushnumber(L, json_real_value(v));
        break;
    case JSON_TRUE:
        lua_pushboolean(L, 1);
        break;
    case JSON_FALSE:
        lua_pushboolean(L, 0);
        break;
    default:
        lua_pushnil(L);
        break;
    }
}

/* The snapshot as a Lua table (the /stats JSON document's shape; numbers, strings, booleans). */
static void push_stats(lua_State *L, const rmq_stats_snap_t *s)
{
    json_t *j = rmq__stats_json(s, NULL);
    push_json(L, j);
    json_decref(j);
}

void rmq__script_on_stats(rmq_script_t *s, const rmq_stats_snap_t *snap)
{
    if (!(s->hooks & RMQ_HOOK_ON_STATS)) return;
    lua_State *L = s->L;
    char err[4096];
    lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_on_stats);
    push_stats(L, snap);
    if (rmq__lua_pcall(L, 1, 0, err, sizeof(err)))
        rmq_log_error("lua", "on_stats hook of %s failed: %s", s->path, err);
}
