/* JSON strings by length (request.h, req_body_string): cJSON's strings are C strings, so a
 * "\u0000" inside a prompt would cut it; the prompts are read again from the body (which cJSON
 * has already accepted as JSON) with their lengths. */
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "trident/check.h"

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static const char *skip_string(const char *p, const char *end) /* p at the opening quote */
{
    for (p++; p < end && *p != '"'; p++)
        if (*p == '\\') p++;
    return p < end ? p + 1 : end;
}

static const char *skip_value(const char *p, const char *end)
{
    if (p < end && *p == '"') return skip_string(p, end);
    int depth = 0;
    for (; p < end; p++) {
        if (*p == '"') {
            p = skip_string(p, end) - 1;
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if (*p == '}' || *p == ']') {
            if (depth == 0) return p;
            if (--depth == 0) return p + 1;
        } else if (depth == 0 && (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) {
            return p;
        }
    }
    return end;
}

static unsigned hex4(const char *p)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v = v << 4 | (unsigned)(c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c - 'A' + 10);
    }
    return v;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xc0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000)
        return o[0] = (char)(0xe0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 63)), o[2] = (char)(0x80 | (cp & 63)), 3;
    o[0] = (char)(0xf0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 63));
    return o[2] = (char)(0x80 | (cp >> 6 & 63)), o[3] = (char)(0x80 | (cp & 63)), 4;
}

/* The string at p (its opening quote), unescaped into a new buffer of *n bytes (NUL-terminated
 * past them); a lone surrogate becomes U+FFFD. */
static char *read_string(const char *p, const char *end, size_t *n)
{
    const char *e = skip_string(p, end);
    char *o = td_xmalloc((size_t)(e - p) + 4);
    size_t k = 0;
    for (p++; p < e - 1; p++) {
        if (*p != '\\') {
            o[k++] = *p;
            continue;
        }
        char c = *++p;
        if (c == 'u' && p + 4 < e) {
            unsigned cp = hex4(p + 1);
            p += 4;
            if (cp >= 0xd800 && cp < 0xdc00 && p + 6 < e && p[1] == '\\' && p[2] == 'u') {
                unsigned lo = hex4(p + 3);
                if (lo >= 0xdc00 && lo < 0xe000) cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00), p += 6;
            }
            if (cp >= 0xd800 && cp < 0xe000) cp = 0xfffd;
            k += put_utf8(o + k, cp);
        } else {
            o[k++] = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c == 'b' ? '\b' : c == 'f' ? '\f' : c;
        }
    }
    o[k] = 0;
    *n = k;
    return o;
}

/* The value of the first member `key` of the top-level object in body, or NULL. */
static const char *member(const char *body, size_t len, const char *key)
{
    const char *end = body + len, *p = skip_ws(body, end);
    if (p == end || *p != '{') return NULL;
    for (p = skip_ws(p + 1, end); p < end && *p == '"';) {
        size_t n;
        char *k = read_string(p, end, &n);
        int hit = n == strlen(key) && memcmp(k, key, n) == 0;
        free(k);
        p = skip_ws(skip_string(p, end), end);
        if (p < end && *p == ':') p = skip_ws(p + 1, end);
        if (hit) return p;
        p = skip_ws(skip_value(p, end), end);
        if (p < end && *p == ',') p = skip_ws(p + 1, end);
    }
    return NULL;
}

char *req_body_string(const char *body, size_t len, const char *key, int i, size_t *n)
{
    const char *end = body + len, *p = member(body, len, key);
    if (!p) return NULL;
    if (*p == '[') {
        p = skip_ws(p + 1, end);
        for (int k = 0; k < i && p < end; k++) {
            p = skip_ws(skip_value(p, end), end);
            if (p < end && *p == ',') p = skip_ws(p + 1, end);
        }
    }
    return p < end && *p == '"' ? read_string(p, end, n) : NULL;
}
