/*
 * json_esc.h -- the escape sequences of a JSON string (\" \\ \/ \b \f \n \r \t \uXXXX with
 * surrogate pairs) decoded to UTF-8. Shared by the RemotingCommand JSON header parser (cmd.c)
 * and the fastjson-style reader (fjson.c), which differ only in what a lone surrogate becomes;
 * and the short escapes their writers use.
 *
 * Ownership: writes into the caller's buffer only. Threads: pure; any thread.
 */
#ifndef RMQ_JSON_ESC_H
#define RMQ_JSON_ESC_H

/* Results of rmq__json_unescape. */
#define RMQ_JESC_OK 0
#define RMQ_JESC_BAD (-1)     /* not a JSON escape */
#define RMQ_JESC_BAD_U (-2)   /* \u not followed by 4 hex digits */
#define RMQ_JESC_SHORT_U (-3) /* \u with fewer than 4 bytes left before end */

/* Flag: a lone surrogate (or a high one followed by a non-low \u) becomes U+FFFD and a bad
 * second \u of a pair is an error at once. Without it the surrogate keeps its 3-byte form (as a
 * Java String keeps the char) and the next escape is read on its own. */
#define RMQ_JESC_LONE_FFFD 1

/*
 * Decode one escape. *pp points at the character after the backslash (*pp < end); end bounds
 * every lookahead. The UTF-8 goes to *op, never more bytes than the escape is long. Advances *pp
 * past the escape and *op past the output; returns RMQ_JESC_OK or an RMQ_JESC_* error.
 */
int rmq__json_unescape(const char **pp, const char *end, char **op, int flags);

/* The other way: the letter of the two-character escape a JSON writer uses for byte c (\" \\ \b
 * \f \n \r \t), or 0 when c has none. Used by cmd.c's and fjson.c's writers. */
static inline char rmq__json_escape_letter(unsigned char c)
{
    switch (c) {
    case '"':
    case '\\':
        return (char)c;
    case '\b':
        return 'b';
    case '\f':
        return 'f';
    case '\n':
        return 'n';
    case '\r':
        return 'r';
    case '\t':
        return 't';
    default:
        return 0;
    }
}

#endif
