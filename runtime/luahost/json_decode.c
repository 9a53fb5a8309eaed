/*
 * json_decode.c -- JSON text to Lua values for consumer scripts (rmq.json.decode,
 * lua/rmq/json.lua), read straight from a message body in the pulled buffer: no Lua string of
 * the whole body is made, a string without escapes is interned from the buffer directly, and
 * plain numbers are converted without strtod.
 *
 * The results and the errors are those of lua-cjson 2.1.0's cjson.decode with its defaults
 * (decode_invalid_numbers on, decode_max_depth 1000): the same tokenizer rules (numbers are what
 * strtod accepts, so hex, inf and nan too; a NUL byte ends the text as it ends cjson's C string),
 * null as a NULL lightuserdata (equal to cjson.null), arrays and objects as plain tables, the
 * last of duplicate keys kept, and error messages of cjson's form ("Expected value but found
 * invalid token at character 1").
 *
 * Ownership: nothing is kept between calls; a string with escapes is decoded into a scratch
 * userdata on the Lua stack (collected, so an error's longjmp leaks nothing).
 * Threads: any thread, on the Lua state that calls it.
 */
#include "lua_state.h"

#include <lauxlib.h>
#include <lua.h>

#include <stdlib.h>
#include <string.h>

#define JD_MAX_DEPTH 1000 /* lua-cjson DEFAULT_DECODE_MAX_DEPTH */

typedef enum {
    T_OBJ_BEGIN,
    T_OBJ_END,
    T_ARR_BEGIN,
    T_ARR_END,
    T_STRING,
    T_NUMBER,
    T_BOOLEAN,
    T_NULL,
    T_COLON,
    T_COMMA,
    T_END,
    T_WHITESPACE,
    T_ERROR,
    T_UNKNOWN
} jd_tok_type_t;

static const char *const tok_names[] = {"T_OBJ_BEGIN", "T_OBJ_END", "T_ARR_BEGIN", "T_ARR_END",
                                        "T_STRING",    "T_NUMBER",  "T_BOOLEAN",   "T_NULL",
                                        "T_COLON",     "T_COMMA",   "T_END",       "T_WHITESPACE",
                                        "T_ERROR",     "T_UNKNOWN"};

typedef struct {
    jd_tok_type_t type;
    size_t index; /* 0-based position, reported 1-based */
    const char *str;
    size_t len;
    double num;
    int boolean;
    const char *err;
} jd_tok_t;

typedef struct {
    lua_State *L;
    const unsigned char *s;
    size_t n;
    size_t p; /* the parse position */
    int depth;
    int pending;     /* stack slots held by members waiting for their table, all levels */
    int scratch_idx; /* stack index of the scratch userdata slot */
    char *scratch;   /* NULL until a string with escapes needs it */
} jd_t;

/* The byte at i, 0 past the end: the text behaves as the NUL-terminated string cjson reads. */
static inline int at(const jd_t *d, size_t i)
{
    return i < d->n ? d->s[i] : 0;
}

static void tok_error(jd_t *d, jd_tok_t *t, const char *msg)
{
    t->type = T_ERROR;
    t->err = msg;
    t->index = d->p;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static int hex4(const jd_t *d, size_t i)
{
    int v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(at(d, i + (size_t)k));
        if (h < 0) return -1;
        v = v << 4 | h;
    }
    return v;
}

static int utf8_put(char *out, int cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A \uXXXX escape (a surrogate pair as one code point) at d->p into out; -1 when invalid
 * (lua-cjson json_append_unicode_escape). */
static int unicode_escape(jd_t *d, char *out, size_t *olen)
{
    int cp = hex4(d, d->p + 2);
    size_t esc = 6;
    if (cp < 0) return -1;
    if ((cp & 0xF800) == 0xD800) {
        if (cp & 0x400) return -1; /* a low surrogate first */
        if (at(d, d->p + 6) != '\\' || at(d, d->p + 7) != 'u') return -1;
        int lo = hex4(d, d->p + 8);
        if (lo < 0 || (lo & 0xFC00) != 0xDC00) return -1;
        cp = (((cp & 0x3FF) << 10) | (lo & 0x3FF)) + 0x10000;
        esc = 12;
    }
    *olen += (size_t)utf8_put(out + *olen, cp);
    d->p += esc;
    return 0;
}

static char *scratch(jd_t *d)
{
    if (!d->scratch) {
        d->scratch = lua_newuserdata(d->L, d->n + 1);
        lua_replace(d->L, d->scratch_idx);
    }
    return d->scratch;
}

static void string_token(jd_t *d, jd_tok_t *t)
{
    size_t start = ++d->p; /* past the opening quote */
    /* The common case: no escape before the closing quote; the string is the source bytes. */
    const unsigned char *s = d->s;
    size_t n = d->n, i = start;
    /* Eight bytes at a time while none of them is '"', '\\' or NUL (the classic has-zero-byte
     * test on the word xor'ed with each; a hit is then found byte by byte). */
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    while (i + 8 <= n) {
        uint64_t v;
        memcpy(&v, s + i, 8);
        uint64_t q = v ^ (ones * '"'), b = v ^ (ones * '\\');
        if (((v - ones) & ~v & highs) | ((q - ones) & ~q & highs) | ((b - ones) & ~b & highs))
            break;
        i += 8;
    }
    while (i < n && s[i] != '"' && s[i] != '\\' && s[i] != 0)
        i++;
    if (i < n && s[i] == '"') {
        t->type = T_STRING;
        t->str = (const char *)s + start;
        t->len = i - start;
        d->p = i + 1;
        return;
    }
    /* Escapes: decode into the scratch buffer (never longer than the source). */
    char *out = scratch(d);
    size_t olen = i - start;
    memcpy(out, s + start, olen);
    d->p = i;
    for (;;) {
        int ch = at(d, d->p);
        if (ch == '"') break;
        if (!ch) {
            tok_error(d, t, "unexpected end of string");
            return;
        }
        if (ch == '\\') {
            int e = at(d, d->p + 1);
            switch (e) {
            case '"':
                ch = '"';
                break;
            case '\\':
                ch = '\\';
                break;
            case '/':
                ch = '/';
                break;
            case 'b':
                ch = '\b';
                break;
            case 'f':
                ch = '\f';
                break;
            case 'n':
                ch = '\n';
                break;
            case 'r':
                ch = '\r';
                break;
            case 't':
                ch = '\t';
                break;
            case 'u':
                if (unicode_escape(d, out, &olen) == 0) continue;
                tok_error(d, t, "invalid unicode escape code");
                return;
            default:
                tok_error(d, t, "invalid escape code");
                return;
            }
            d->p++; /* the backslash */
        }
        out[olen++] = (char)ch;
        d->p++;
    }
    d->p++; /* the closing quote */
    t->type = T_STRING;
    t->str = out;
    t->len = olen;
}

/* Bytes strtod may read as part of a number ("0x1p3", "-inf", "nan(123)"): every one of them
 * is in this set, so converting a copy of the run gives strtod's result on the text. */
static int numchar(int c)
{
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c == '+' ||
           c == '-' || c == '.' || c == '_' || c == '(' || c == ')';
}

static const double pow10_tab[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static void number_token(jd_t *d, jd_tok_t *t)
{
    const unsigned char *s = d->s;
    size_t n = d->n, i = d->p;
    /* Fast paths, exact as strtod (which rounds the exact decimal value to the nearest
     * double): an integer of up to 19 digits is exact in a uint64_t and the conversion to
     * double rounds it once; -?digits.digits without exponent whose digits, as one integer,
     * are exact in a double (< 2^53) with at most 22 after the point is one correctly rounded
     * division by an exact power of ten. Everything else goes to strtod. */
    int neg = 0;
    if (i < n && s[i] == '-') neg = 1, i++;
    uint64_t mant = 0;
    int digits = 0, frac = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9' && digits < 20)
        mant = mant * 10 + (uint64_t)(s[i++] - '0'), digits++;
    if (digits > 0 && digits <= 19) {
        int c = i < n ? s[i] : 0;
        if (c == '.' && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '9') {
            size_t j = i + 1;
            while (j < n && s[j] >= '0' && s[j] <= '9' && digits < 20)
                mant = mant * 10 + (uint64_t)(s[j++] - '0'), digits++, frac++;
            c = j < n ? s[j] : 0;
            if (digits <= 19 && mant <= (1ull << 53) && frac <= 22 && !(c >= '0' && c <= '9') &&
                (c | 0x20) != 'e') {
                double v = (double)mant / pow10_tab[frac];
                t->type = T_NUMBER;
                t->num = neg ? -v : v;
                d->p = j;
                return;
            }
        } else if (c != '.' && (c | 0x20) != 'e' && (c | 0x20) != 'x' && !(c >= '0' && c <= '9')) {
            double v = (double)mant;
            t->type = T_NUMBER;
            t->num = neg ? -v : v;
            d->p = i;
            return;
        }
    }
    /* strtod on a NUL-terminated copy of the run of number characters. */
    size_t e = d->p;
    while (e < n && numchar(s[e]))
        e++;
    size_t len = e - d->p;
    char small[128];
    char *buf = len < sizeof(small) ? small : malloc(len + 1);
    if (!buf) {
        tok_error(d, t, "invalid number");
        return;
    }
    memcpy(buf, s + d->p, len);
    buf[len] = 0;
    char *end;
    double v = strtod(buf, &end);
    size_t used = (size_t)(end - buf);
    if (buf != small) free(buf);
    if (used == 0) {
        tok_error(d, t, "invalid number");
        return;
    }
    t->type = T_NUMBER;
    t->num = v;
    d->p += used;
}

/* lua-cjson json_is_invalid_number: what only strtod, not JSON, accepts. */
static int invalid_number(const jd_t *d)
{
    size_t p = d->p;
    int c = at(d, p);
    if (c == '+') return 1;
    if (c == '-') c = at(d, ++p);
    if (c == '0') {
        int c2 = at(d, p + 1);
        return (c2 | 0x20) == 'x' || (c2 >= '0' && c2 <= '9');
    }
    if (c <= '9') return 0;
    static const char *const words[] = {"inf", "nan"};
    for (int w = 0; w < 2; w++) {
        int k = 0;
        while (k < 3 && (at(d, p + (size_t)k) | 0x20) == words[w][k])
            k++;
        if (k == 3) return 1;
    }
    return 0;
}

static int word(const jd_t *d, const char *w, size_t len)
{
    for (size_t k = 0; k < len; k++)
        if (at(d, d->p + k) != (unsigned char)w[k]) return 0;
    return 1;
}

/* The token of a structural character: { } [ ] : , */
static inline jd_tok_type_t punct_type(int ch)
{
    switch (ch) {
    case '{':
        return T_OBJ_BEGIN;
    case '}':
        return T_OBJ_END;
    case '[':
        return T_ARR_BEGIN;
    case ']':
        return T_ARR_END;
    case ':':
        return T_COLON;
    default:
        return T_COMMA;
    }
}

static void next_token(jd_t *d, jd_tok_t *t)
{
    int ch;
    for (;;) {
        ch = at(d, d->p);
        if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') break;
        d->p++;
    }
    t->index = d->p;
    switch (ch) {
    case 0:
        t->type = T_END;
        return;
    case '{':
    case '}':
    case '[':
    case ']':
    case ':':
    case ',':
        t->type = punct_type(ch);
        d->p++;
        return;
    case '"':
        string_token(d, t);
        return;
    case '-':
    case '0':
    case '1':
    case '2':
    case '3':
    case '4':
    case '5':
    case '6':
    case '7':
    case '8':
    case '9':
        number_token(d, t);
        return;
    case 't':
    case 'f':
    case 'n':
    case 'i':
    case 'I':
    case 'N':
    case '+':
        break;
    default:
        tok_error(d, t, "invalid token");
        return;
    }
    if (word(d, "true", 4)) {
        t->type = T_BOOLEAN, t->boolean = 1, d->p += 4;
    } else if (word(d, "false", 5)) {
        t->type = T_BOOLEAN, t->boolean = 0, d->p += 5;
    } else if (word(d, "null", 4)) {
        t->type = T_NULL, d->p += 4;
    } else if (invalid_number(d)) {
        number_token(d, t);
    } else {
        tok_error(d, t, "invalid token");
    }
}

static void parse_error(jd_t *d, const char *expected, const jd_tok_t *t)
{
    const char *found = t->type == T_ERROR ? t->err : tok_names[t->type];
    luaL_error(d->L, "Expected %s but found %s at character %d", expected, found,
               (int)t->index + 1);
}

static void descend(jd_t *d, int slots)
{
    d->depth++;
    if (d->depth <= JD_MAX_DEPTH && lua_checkstack(d->L, slots)) return;
    luaL_error(d->L, "Found too many nested data structures (%d) at character %d", d->depth,
               (int)d->p);
}

static void value(jd_t *d, jd_tok_t *t);

/* Up to PEND_MAX members of an object or array wait on the Lua stack until its end, so that
 * the table is made at its final size once (lua-cjson grows it member by member, rehashing
 * as it goes); past that the table is made and filled directly. */
#define PEND_MAX 64
/* ... and, over all nesting levels, at most about this many stack slots: a C function may
 * use 8000 (LUAI_MAXCSTACK), and 1000 levels of nesting take 3000 of them as in lua-cjson, so
 * deep nesting fails exactly where lua-cjson's does. */
#define PEND_BUDGET 4096
/* Every stack check while members wait also keeps this many slots spare for the flush. */
#define FLUSH_SLOTS 3

/*
 * Enter an object or array whose members take `slots` stack slots each. Returns 1 when it is
 * empty (its table pushed, the depth back), else 0 with *t its first token, *base the stack top
 * below it and *direct set when its members go straight into a table pushed already (too many
 * pending on the stack), clear when they wait on the stack.
 */
static int container_open(jd_t *d, int slots, jd_tok_type_t end, jd_tok_t *t, int *base,
                          int *direct)
{
    descend(d, slots);
    *base = lua_gettop(d->L);
    *direct = d->pending > PEND_BUDGET;
    if (*direct) lua_newtable(d->L);
    next_token(d, t);
    if (t->type != end) return 0;
    if (!*direct) lua_newtable(d->L);
    d->depth--;
    return 1;
}

/* Move the n pending key/value pairs above base into a new table of at least hint slots. */
static void object_flush(jd_t *d, int base, int n, int hint)
{
    lua_State *L = d->L;
    lua_createtable(L, 0, hint);
    for (int k = 0; k < n; k++) {
        lua_pushvalue(L, base + 1 + 2 * k);
        lua_pushvalue(L, base + 2 + 2 * k);
        lua_rawset(L, -3);
    }
    lua_replace(L, base + 1);
    lua_settop(L, base + 1);
    d->pending -= 2 * n;
}

static void object(jd_t *d)
{
    lua_State *L = d->L;
    jd_tok_t t;
    int base, n = 0, direct;
    if (container_open(d, 3, T_OBJ_END, &t, &base, &direct)) return;
    for (;;) {
        if (t.type != T_STRING) parse_error(d, "object key string", &t);
        if (!direct && n == PEND_MAX) {
            object_flush(d, base, n, 2 * PEND_MAX);
            direct = 1;
        }
        if (!direct && (n & 15) == 0 && !lua_checkstack(L, 2 * 16 + 3 + FLUSH_SLOTS)) {
            object_flush(d, base, n, n);
            direct = 1;
        }
        lua_pushlstring(L, t.str, t.len);
        next_token(d, &t);
        if (t.type != T_COLON) parse_error(d, "colon", &t);
        next_token(d, &t);
        value(d, &t);
        if (direct)
            lua_rawset(L, -3);
        else
            n++, d->pending += 2;
        next_token(d, &t);
        if (t.type == T_OBJ_END) {
            if (!direct) object_flush(d, base, n, n);
            d->depth--;
            return;
        }
        if (t.type != T_COMMA) parse_error(d, "comma or object end", &t);
        next_token(d, &t);
    }
}

/* Move the n pending values above base into a new table of at least hint slots. */
static void array_flush(jd_t *d, int base, int n, int hint)
{
    lua_State *L = d->L;
    lua_createtable(L, hint, 0);
    for (int k = 0; k < n; k++) {
        lua_pushvalue(L, base + 1 + k);
        lua_rawseti(L, -2, k + 1);
    }
    lua_replace(L, base + 1);
    lua_settop(L, base + 1);
    d->pending -= n;
}

static void array(jd_t *d)
{
    lua_State *L = d->L;
    jd_tok_t t;
    int base, direct;
    if (container_open(d, 2, T_ARR_END, &t, &base, &direct)) return;
    for (int i = 1;; i++) {
        if (!direct && i == PEND_MAX + 1) {
            array_flush(d, base, i - 1, 2 * PEND_MAX);
            direct = 1;
        }
        if (!direct && (i & 15) == 1 && !lua_checkstack(L, 16 + 2 + FLUSH_SLOTS)) {
            array_flush(d, base, i - 1, i - 1);
            direct = 1;
        }
        value(d, &t);
        if (direct)
            lua_rawseti(L, -2, i);
        else
            d->pending++;
        next_token(d, &t);
        if (t.type == T_ARR_END) {
            if (!direct) array_flush(d, base, i, i);
            d->depth--;
            return;
        }
        if (t.type != T_COMMA) parse_error(d, "comma or array end", &t);
        next_token(d, &t);
    }
}

static void value(jd_t *d, jd_tok_t *t)
{
    switch (t->type) {
    case T_STRING:
        lua_pushlstring(d->L, t->str, t->len);
        break;
    case T_NUMBER:
        lua_pushnumber(d->L, t->num);
        break;
    case T_BOOLEAN:
        lua_pushboolean(d->L, t->boolean);
        break;
    case T_OBJ_BEGIN:
        object(d);
        break;
    case T_ARR_BEGIN:
        array(d);
        break;
    case T_NULL:
        lua_pushlightuserdata(d->L, NULL);
        break;
    default:
        parse_error(d, "value", t);
    }
}

static int decode(lua_State *L, const char *s, size_t n)
{
    if (n >= 2 && (!s[0] || !s[1])) luaL_error(L, "JSON parser does not support UTF-16 or UTF-32");
    jd_t d = {.L = L, .s = (const unsigned char *)s, .n = n};
    lua_pushnil(L); /* the scratch slot */
    d.scratch_idx = lua_gettop(L);
    jd_tok_t t;
    next_token(&d, &t);
    value(&d, &t);
    next_token(&d, &t);
    if (t.type != T_END) parse_error(&d, "the end", &t);
    return 1;
}

/* decode_string(s): s a Lua string (or a number, as luaL_checklstring takes it). */
static int decode_string(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    return decode(L, s, n);
}

/* The source box rmq/json.lua fills: bytes and their length (rmq_json_src_t there). */
typedef struct {
    const char *p;
    uint64_t n;
} jd_src_t;

/* decode_box(box): box a cdata rmq_json_src_t (its payload is read through lua_topointer). */
static int decode_box(lua_State *L)
{
    const jd_src_t *b = lua_topointer(L, 1);
    if (!b || (!b->p && b->n)) return luaL_error(L, "rmq.json: no bytes to decode");
    return decode(L, b->p ? b->p : "", (size_t)b->n);
}

/* package.preload["rmq.json.c"] in every rmqlua Lua state; under a plain luajit,
 * package.loadlib(librmqlua.so, "rmq_luaopen_json"). */
RMQ_EXPORT int rmq_luaopen_json(lua_State *L)
{
    lua_createtable(L, 0, 3);
    lua_pushcfunction(L, decode_string);
    lua_setfield(L, -2, "decode_string");
    lua_pushcfunction(L, decode_box);
    lua_setfield(L, -2, "decode_box");
    lua_pushlightuserdata(L, NULL);
    lua_setfield(L, -2, "null");
    return 1;
}
