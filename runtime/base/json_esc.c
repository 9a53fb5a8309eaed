/*
 * json_esc.c -- JSON string escapes to UTF-8 (see json_esc.h).
 *
 * Ownership: none kept. Threads: pure functions; any thread.
 */
#include "json_esc.h"

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static char *put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xC0 | cp >> 6);
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | cp >> 12);
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | cp >> 18);
        *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    return o;
}

int rmq__json_unescape(const char **pp, const char *end, char **op, int flags)
{
    const char *p = *pp;
    char *o = *op;
    unsigned cp, lo;
    switch (*p++) {
    case '"':
        *o++ = '"';
        break;
    case '\\':
        *o++ = '\\';
        break;
    case '/':
        *o++ = '/';
        break;
    case 'b':
        *o++ = '\b';
        break;
    case 'f':
        *o++ = '\f';
        break;
    case 'n':
        *o++ = '\n';
        break;
    case 'r':
        *o++ = '\r';
        break;
    case 't':
        *o++ = '\t';
        break;
    case 'u':
        if (end - p < 4) return RMQ_JESC_SHORT_U;
        if (hex4(p, &cp)) return RMQ_JESC_BAD_U;
        p += 4;
        if (cp >= 0xD800 && cp < 0xDC00) {
            if (end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
                if (hex4(p + 2, &lo)) {
                    if (flags & RMQ_JESC_LONE_FFFD) return RMQ_JESC_BAD_U;
                    lo = 0; /* not a pair: the next escape stands on its own */
                }
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                } else if (flags & RMQ_JESC_LONE_FFFD) {
                    cp = 0xFFFD;
                }
            } else if (flags & RMQ_JESC_LONE_FFFD) {
                cp = 0xFFFD;
            }
        } else if (cp >= 0xDC00 && cp < 0xE000 && (flags & RMQ_JESC_LONE_FFFD)) {
            cp = 0xFFFD;
        }
        o = put_utf8(o, cp);
        break;
    default:
        return RMQ_JESC_BAD;
    }
    *pp = p;
    *op = o;
    return RMQ_JESC_OK;
}
