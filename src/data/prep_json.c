/* The reader of preprocess's input format: one JSON line at a time (prep_json_extract), and
 * the growable byte strings it decodes into. See include/data/trident/preprocess.h.
 *
 * A scanner of its own, not cJSON, because Megatron's preprocess_data.py reads each line with
 * Python's json.loads and trident keeps its rules (unit/test_preprocess holds them): NaN and
 * Infinity accepted; raw control characters in strings, lone surrogates, "01", "1." and text
 * after the object refused; the last of duplicate keys wins; \u0000 kept inside a string.
 * cJSON 1.7 differs on all but the surrogates: it refuses NaN, takes a raw tab, "01", "1." and trailing text
 * (cJSON_ParseWithLength), returns the first duplicate and ends its strings at \u0000.
 *
 * Not for speed: measured on 200 MB of JSONL (tinyshakespeare's paragraphs repeated, 1.17 M
 * lines; bench/prep_json.sh --mb 200 --whole, 2 shared cores, load 4 to 7), this scanner reads
 * 274 to 337 MB/s and cJSON (parse, look up, copy the value) 257 to 457 MB/s, in the same runs;
 * the whole `trident preprocess --workers 2` (GPT-2 BPE) took 8.2 / 9.5 / 8.5 s with this
 * scanner and 8.3 / 8.3 / 10.4 s with cJSON in its place, alternating (the same .bin either
 * way): under a second of parsing beside five of tokenizing, lost in the machine's noise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prep_impl.h"
#include "trident/check.h"
#include "trident/preprocess.h"

#define PP_MAX_DEPTH 512 /* JSON nesting; Python's json gives up near 1000 */

/* ---------------------------------------------------------------------------------------------
 * Byte strings
 * ------------------------------------------------------------------------------------------- */

static void str_reserve(prep_str *s, size_t extra)
{
    if (s->cap - s->n >= extra) return;
    size_t cap = s->cap ? s->cap : 256;
    while (cap - s->n < extra) cap *= 2;
    s->s = td_xrealloc(s->s, cap);
    s->cap = cap;
}

void prep_str_put(prep_str *s, const char *p, size_t n)
{
    if (!n) return;
    str_reserve(s, n);
    memcpy(s->s + s->n, p, n);
    s->n += n;
}

void prep_str_free(prep_str *s)
{
    free(s->s);
    s->s = NULL;
    s->n = s->cap = 0;
}

/* ---------------------------------------------------------------------------------------------
 * JSON: a validating parser for one line that keeps only the spans of the wanted values
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    const char *p, *start, *end;
    char *err;
    size_t errlen;
} jp;

enum { J_FAIL = -1, J_STRING, J_NUMBER, J_OBJECT, J_ARRAY, J_TRUE, J_FALSE, J_NULL };

static const char *jtype_name(int t)
{
    switch (t) {
    case J_STRING: return "a string";
    case J_NUMBER: return "a number";
    case J_OBJECT: return "an object";
    case J_ARRAY: return "an array";
    case J_TRUE:
    case J_FALSE: return "a boolean";
    default: return "null";
    }
}

static int jfail(jp *j, const char *what)
{
    if (j->p >= j->end) td_seterr(j->err, j->errlen, "malformed JSON: %s, but the line ends", what);
    else
        td_seterr(j->err, j->errlen, "malformed JSON at column %zu: %s, found '%c'", (size_t)(j->p - j->start) + 1, what,
               (unsigned char)*j->p >= 0x20 && (unsigned char)*j->p < 0x7f ? *j->p : '?');
    return J_FAIL;
}

static void jws(jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads 4 hex digits at p (p + 4 <= end checked by the caller); -1 if not hex. */
static long hex4(const char *p)
{
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Validates a string at j->p (on the opening quote); *body / *body_end get the raw bytes between
 * the quotes, *has_escape whether a backslash occurs. */
static int jstring(jp *j, const char **body, const char **body_end, int *has_escape)
{
    j->p++; /* opening quote */
    *body = j->p;
    *has_escape = 0;
    for (;;) {
        const char *q = j->p;
        while (q < j->end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20) q++;
        j->p = q;
        if (q >= j->end) return jfail(j, "unterminated string");
        if (*q == '"') break;
        if ((unsigned char)*q < 0x20) return jfail(j, "raw control character in a string (escape it)");
        *has_escape = 1;
        if (q + 1 >= j->end) {
            j->p = q + 1;
            return jfail(j, "unterminated escape");
        }
        char e = q[1];
        if (e == 'u') {
            if (j->end - q < 6 || hex4(q + 2) < 0) {
                j->p = q + 1;
                return jfail(j, "\\u needs four hex digits");
            }
            j->p = q + 6;
        } else if (e && strchr("\"\\/bfnrt", e)) {
            j->p = q + 2;
        } else {
            j->p = q + 1;
            return jfail(j, "invalid escape");
        }
    }
    *body_end = j->p;
    j->p++; /* closing quote */
    return J_STRING;
}

static int jliteral(jp *j, const char *word, int type)
{
    size_t n = strlen(word);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0) return jfail(j, "expected a JSON value");
    j->p += n;
    return type;
}

static int jdigits(jp *j)
{
    const char *s = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    return j->p > s;
}

/* Python's number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?, plus -Infinity. */
static int jnumber(jp *j)
{
    if (*j->p == '-') {
        j->p++;
        if (j->p < j->end && *j->p == 'I') return jliteral(j, "Infinity", J_NUMBER);
    }
    if (j->p < j->end && *j->p == '0') j->p++;
    else if (!jdigits(j)) return jfail(j, "expected a digit");
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (!jdigits(j)) return jfail(j, "expected a digit after '.'");
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
        if (!jdigits(j)) return jfail(j, "expected an exponent");
    }
    return J_NUMBER;
}

static int jvalue(jp *j, int depth);

static int jcontainer(jp *j, int depth, char close)
{
    if (depth >= PP_MAX_DEPTH) return jfail(j, "nested too deeply");
    j->p++;
    jws(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        return close == '}' ? J_OBJECT : J_ARRAY;
    }
    for (;;) {
        if (close == '}') {
            jws(j);
            if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a string key");
            const char *b, *e;
            int esc;
            if (jstring(j, &b, &e, &esc) == J_FAIL) return J_FAIL;
            jws(j);
            if (j->p >= j->end || *j->p != ':') return jfail(j, "expected ':'");
            j->p++;
        }
        if (jvalue(j, depth + 1) == J_FAIL) return J_FAIL;
        jws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return close == '}' ? J_OBJECT : J_ARRAY;
        }
        return jfail(j, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

/* Validates one value (after optional whitespace); returns its type. */
static int jvalue(jp *j, int depth)
{
    jws(j);
    if (j->p >= j->end) return jfail(j, "expected a JSON value");
    const char *b, *e;
    int esc;
    switch (*j->p) {
    case '"': return jstring(j, &b, &e, &esc);
    case '{': return jcontainer(j, depth, '}');
    case '[': return jcontainer(j, depth, ']');
    case 't': return jliteral(j, "true", J_TRUE);
    case 'f': return jliteral(j, "false", J_FALSE);
    case 'n': return jliteral(j, "null", J_NULL);
    case 'N': return jliteral(j, "NaN", J_NUMBER);
    case 'I': return jliteral(j, "Infinity", J_NUMBER);
    default:
        if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9')) return jnumber(j);
        return jfail(j, "expected a JSON value");
    }
}

static void put_utf8(prep_str *o, unsigned long c)
{
    char b[4];
    size_t n;
    if (c < 0x80) {
        b[0] = (char)c;
        n = 1;
    } else if (c < 0x800) {
        b[0] = (char)(0xc0 | (c >> 6));
        b[1] = (char)(0x80 | (c & 0x3f));
        n = 2;
    } else if (c < 0x10000) {
        b[0] = (char)(0xe0 | (c >> 12));
        b[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        b[2] = (char)(0x80 | (c & 0x3f));
        n = 3;
    } else {
        b[0] = (char)(0xf0 | (c >> 18));
        b[1] = (char)(0x80 | ((c >> 12) & 0x3f));
        b[2] = (char)(0x80 | ((c >> 6) & 0x3f));
        b[3] = (char)(0x80 | (c & 0x3f));
        n = 4;
    }
    prep_str_put(o, b, n);
}

/* Decodes the (validated) string body [p, end) into o. -1 on a lone surrogate, which Python's
 * json accepts but GPT-2's tokenizer cannot encode. */
static int junescape(const char *p, const char *end, prep_str *o, char *err, size_t errlen)
{
    o->n = 0;
    str_reserve(o, (size_t)(end - p) + 1);
    while (p < end) {
        const char *q = memchr(p, '\\', (size_t)(end - p));
        if (!q) q = end;
        prep_str_put(o, p, (size_t)(q - p));
        p = q;
        if (p >= end) break;
        char e = p[1];
        p += 2;
        switch (e) {
        case 'b': prep_str_put(o, "\b", 1); break;
        case 'f': prep_str_put(o, "\f", 1); break;
        case 'n': prep_str_put(o, "\n", 1); break;
        case 'r': prep_str_put(o, "\r", 1); break;
        case 't': prep_str_put(o, "\t", 1); break;
        case 'u': {
            unsigned long c = (unsigned long)hex4(p);
            p += 4;
            if (c >= 0xd800 && c <= 0xdbff && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
                long lo = hex4(p + 2);
                if (lo >= 0xdc00 && lo <= 0xdfff) {
                    c = 0x10000 + ((c - 0xd800) << 10) + ((unsigned long)lo - 0xdc00);
                    p += 6;
                }
            }
            if (c >= 0xd800 && c <= 0xdfff) {
                td_seterr(err, errlen, "lone UTF-16 surrogate \\u%04lx in a string (not valid text)", c);
                return -1;
            }
            put_utf8(o, c);
            break;
        }
        default: prep_str_put(o, &e, 1); break; /* " \ / */
        }
    }
    return 0;
}

/* Is the raw key [b, e) (escapes decoded when esc) equal to key? */
static int key_equals(const char *b, const char *e, int esc, const char *key, prep_str *tmp)
{
    if (esc) {
        if (junescape(b, e, tmp, NULL, 0) != 0) return 0;
        b = tmp->s;
        e = tmp->s + tmp->n;
    }
    size_t n = strlen(key);
    return (size_t)(e - b) == n && memcmp(b, key, n) == 0;
}

int prep_json_extract(const char *line, size_t len, const char *const *keys, int n_keys, prep_str *out, char *err,
                    size_t errlen)
{
    enum { MAXK = 64 };
    const char *vb[MAXK], *ve[MAXK];
    int vt[MAXK];
    if (n_keys > MAXK) {
        td_seterr(err, errlen, "too many JSON keys (%d, at most %d)", n_keys, MAXK);
        return -1;
    }
    for (int k = 0; k < n_keys; k++) vt[k] = J_FAIL;
    jp j = {line, line, line + len, err, errlen};
    jws(&j);
    if (j.p >= j.end || *j.p != '{') {
        int t = jvalue(&j, 0);
        if (t == J_FAIL) return -1;
        td_seterr(err, errlen, "the line is %s, not a JSON object", jtype_name(t));
        return -1;
    }
    /* top-level object by hand, remembering the wanted values */
    prep_str tmp = {0};
    j.p++;
    jws(&j);
    int rc = -1;
    if (j.p < j.end && *j.p == '}') {
        j.p++;
    } else {
        for (;;) {
            jws(&j);
            if (j.p >= j.end || *j.p != '"') {
                jfail(&j, "expected a string key");
                goto done;
            }
            const char *kb, *ke;
            int kesc;
            if (jstring(&j, &kb, &ke, &kesc) == J_FAIL) goto done;
            jws(&j);
            if (j.p >= j.end || *j.p != ':') {
                jfail(&j, "expected ':'");
                goto done;
            }
            j.p++;
            jws(&j);
            const char *v = j.p;
            int t = jvalue(&j, 1);
            if (t == J_FAIL) goto done;
            for (int k = 0; k < n_keys; k++)
                if (key_equals(kb, ke, kesc, keys[k], &tmp)) { /* a later duplicate wins, as in Python */
                    vt[k] = t;
                    vb[k] = v;
                    ve[k] = j.p;
                }
            jws(&j);
            if (j.p < j.end && *j.p == ',') {
                j.p++;
                continue;
            }
            if (j.p < j.end && *j.p == '}') {
                j.p++;
                break;
            }
            jfail(&j, "expected ',' or '}'");
            goto done;
        }
    }
    jws(&j);
    if (j.p < j.end) {
        jfail(&j, "extra data after the JSON object");
        goto done;
    }
    for (int k = 0; k < n_keys; k++) {
        if (vt[k] == J_FAIL) {
            td_seterr(err, errlen, "no key \"%s\" in the JSON object", keys[k]);
            goto done;
        }
        if (vt[k] != J_STRING) {
            td_seterr(err, errlen, "the value of \"%s\" is %s, not a string", keys[k], jtype_name(vt[k]));
            goto done;
        }
        /* re-scan the string to find its body, then decode it */
        jp s = {vb[k], line, ve[k], err, errlen};
        const char *b, *e;
        int esc;
        jstring(&s, &b, &e, &esc);
        if (!esc) {
            out[k].n = 0;
            prep_str_put(&out[k], b, (size_t)(e - b));
        } else if (junescape(b, e, &out[k], err, errlen) != 0) {
            goto done;
        }
    }
    rc = 0;
done:
    prep_str_free(&tmp);
    return rc;
}
