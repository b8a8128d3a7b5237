/* Chat templates: the lexer of @huggingface/jinja 0.5.11 (src/lexer.ts), with the preprocessing
 * its Template always applies (lstrip_blocks, trim_blocks, one trailing newline dropped, the
 * {% generation %} tags removed), and JavaScript's whitespace (\s, String.prototype.trim). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_impl.h"

/* ---------------------------------------------------------------- JS whitespace */

/* Bytes of the JavaScript whitespace character (\s, String.prototype.trim) at s[0..n), or 0. */
static size_t ws_at(const unsigned char *s, size_t n)
{
    if (n == 0) return 0;
    unsigned char c = s[0];
    if (c == ' ' || (c >= 9 && c <= 13)) return 1;
    if (c == 0xC2 && n >= 2 && s[1] == 0xA0) return 2;
    if (n < 3) return 0;
    if (c == 0xE1 && s[1] == 0x9A && s[2] == 0x80) return 3;                  /* U+1680 */
    if (c == 0xE2 && s[1] == 0x80 && (s[2] <= 0x8A || s[2] == 0xA8 || s[2] == 0xA9 || s[2] == 0xAF))
        return s[2] >= 0x80 ? 3 : 0;                                           /* U+2000-200A, 2028, 2029, 202F */
    if (c == 0xE2 && s[1] == 0x81 && s[2] == 0x9F) return 3;                  /* U+205F */
    if (c == 0xE3 && s[1] == 0x80 && s[2] == 0x80) return 3;                  /* U+3000 */
    if (c == 0xEF && s[1] == 0xBB && s[2] == 0xBF) return 3;                  /* U+FEFF */
    return 0;
}

size_t ct_js_ws_prefix(const char *s, size_t n)
{
    size_t i = 0, k;
    while (i < n && (k = ws_at((const unsigned char *)s + i, n - i))) i += k;
    return i;
}

size_t ct_js_ws_suffix(const char *s, size_t n)
{
    size_t end = n;
    for (;;) {
        size_t k = 0;
        for (size_t w = 1; w <= 3 && w <= end; w++)
            if (ws_at((const unsigned char *)s + end - w, w) == w) {
                k = w;
                break;
            }
        if (!k) break;
        end -= k;
    }
    return n - end;
}

/* ---------------------------------------------------------------- preprocessing */

static int is_line_start(const char *s, size_t i)
{
    if (i == 0) return 1;
    if (s[i - 1] == '\n' || s[i - 1] == '\r') return 1;
    return i >= 3 && (unsigned char)s[i - 3] == 0xE2 && (unsigned char)s[i - 2] == 0x80 &&
           ((unsigned char)s[i - 1] == 0xA8 || (unsigned char)s[i - 1] == 0xA9);
}

/* Matches -?\s*(end)?generation\s*-?%} after "{%" at s[i]; returns the end, or 0. */
static size_t generation_tag(const char *s, size_t n, size_t i, int *lstrip, int *rstrip)
{
    *lstrip = *rstrip = 0;
    if (i < n && s[i] == '-') *lstrip = 1, i++;
    i += ct_js_ws_prefix(s + i, n - i);
    if (n - i >= 3 && !memcmp(s + i, "end", 3) && n - i >= 13 && !memcmp(s + i + 3, "generation", 10))
        i += 3;
    if (n - i < 10 || memcmp(s + i, "generation", 10)) return 0;
    i += 10;
    i += ct_js_ws_prefix(s + i, n - i);
    if (i < n && s[i] == '-') *rstrip = 1, i++;
    if (n - i < 2 || s[i] != '%' || s[i + 1] != '}') return 0;
    return i + 2;
}

/* preprocess() of lexer.ts with lstrip_blocks and trim_blocks on, as Template sets them. */
static char *preprocess(ct_rt *rt, const char *src, size_t *len)
{
    size_t n = strlen(src);
    if (n && src[n - 1] == '\n') n--;
    char *a = ct_alloc(&rt->arena, n + 1), *b = ct_alloc(&rt->arena, n + 1);
    size_t m = 0;
    for (size_t i = 0; i < n;) { /* ^[ \t]*({[#%-]) with the m flag -> $1 */
        if (is_line_start(src, i)) {
            size_t j = i;
            while (j < n && (src[j] == ' ' || src[j] == '\t')) j++;
            if (j + 1 < n && src[j] == '{' && (src[j + 1] == '#' || src[j + 1] == '%' || src[j + 1] == '-')) i = j;
        }
        a[m++] = src[i++];
        while (i < n && !is_line_start(src, i)) a[m++] = src[i++];
    }
    n = m;
    m = 0;
    for (size_t i = 0; i < n;) { /* ([#%-]})\n -> $1 */
        if (i + 2 < n && (a[i] == '#' || a[i] == '%' || a[i] == '-') && a[i + 1] == '}' && a[i + 2] == '\n') {
            b[m++] = a[i];
            b[m++] = '}';
            i += 3;
        } else {
            b[m++] = a[i++];
        }
    }
    n = m;
    /* (\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*) -> lstrip ? "" : $1, rstrip ? "" : $4 */
    m = 0;
    size_t last = 0; /* end of the last match: a match's leading \s* starts no earlier */
    for (size_t i = 0; i < n;) {
        int ls, rs;
        size_t end;
        if (i + 1 < n && b[i] == '{' && b[i + 1] == '%' && (end = generation_tag(b, n, i + 2, &ls, &rs))) {
            size_t before = ct_js_ws_suffix(b + last, i - last);
            if (ls) m -= before; /* it was copied already */
            size_t after = ct_js_ws_prefix(b + end, n - end);
            if (!rs) memmove(a + m, b + end, after), m += after;
            i = last = end + after;
        } else {
            a[m++] = b[i++];
        }
    }
    a[m] = 0;
    *len = m;
    return a;
}

/* ---------------------------------------------------------------- lexer */

typedef struct {
    ct_rt *rt;
    const char *src;
    size_t n, pos;
    ct_token *t;
    size_t nt, cap;
} lexer;

static void push_tok(lexer *L, ct_tok_type type, const char *s, size_t len)
{
    if (L->nt == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        ct_token *t = ct_alloc(&L->rt->arena, cap * sizeof *t);
        if (L->nt) memcpy(t, L->t, L->nt * sizeof *t);
        L->t = t;
        L->cap = cap;
    }
    char *v = ct_alloc(&L->rt->arena, len + 1);
    memcpy(v, s, len);
    v[len] = 0;
    L->t[L->nt++] = (ct_token){type, v, len};
}

static int last_is(const lexer *L, ct_tok_type t) { return L->nt && L->t[L->nt - 1].type == t; }

static int is_word(int c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

static void put_utf8(ct_buf *o, ct_rt *rt, unsigned cp)
{
    char u[4];
    size_t k;
    if (cp < 0x80) u[0] = (char)cp, k = 1;
    else if (cp < 0x800) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 63)), k = 2;
    else if (cp < 0x10000) u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 63)), u[2] = (char)(0x80 | (cp & 63)), k = 3;
    else u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 63)), u[2] = (char)(0x80 | (cp >> 6 & 63)), u[3] = (char)(0x80 | (cp & 63)), k = 4;
    ct_buf_put(rt, o, u, k);
}

enum { P_WS, P_DIGIT, P_WORD, P_NOT_QUOTE };
static int pred(const lexer *L, int kind, char quote)
{
    const char *s = L->src + L->pos;
    switch (kind) {
    case P_WS: return ws_at((const unsigned char *)s, L->n - L->pos) > 0;
    case P_DIGIT: return is_digit(*s);
    case P_WORD: return is_word(*s);
    default: return *s != quote;
    }
}

/* consumeWhile of lexer.ts: escapes decoded; running to the end of input is an error. */
static ct_str *consume_while(lexer *L, int kind, char quote)
{
    ct_rt *rt = L->rt;
    ct_buf o = {0};
    while (L->pos < L->n && pred(L, kind, quote)) {
        if (L->src[L->pos] == '\\') {
            if (++L->pos >= L->n) ct_fail(rt, "template syntax: unexpected end of input");
            char e = L->src[L->pos++];
            if (e == 'x' || e == 'u') {
                size_t k = e == 'x' ? 2 : 4;
                unsigned cp = 0;
                for (size_t i = 0; i < k; i++) {
                    char h = L->pos + i < L->n ? L->src[L->pos + i] : 0;
                    int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                    if (d < 0) ct_fail(rt, "template syntax: invalid hexadecimal escape sequence \\%c", e);
                    cp = cp * 16 + (unsigned)d;
                }
                L->pos += k;
                if (cp >= 0xD800 && cp < 0xDC00 && L->pos + 6 <= L->n && L->src[L->pos] == '\\' && L->src[L->pos + 1] == 'u') {
                    unsigned lo = (unsigned)strtoul((char[]){L->src[L->pos + 2], L->src[L->pos + 3], L->src[L->pos + 4], L->src[L->pos + 5], 0}, NULL, 16);
                    if (lo >= 0xDC00 && lo < 0xE000) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        L->pos += 6;
                    }
                }
                if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD; /* a lone surrogate prints as U+FFFD */
                put_utf8(&o, rt, cp);
                continue;
            }
            const char *map = "n\nt\tr\rb\bf\fv\v''\"\"\\\\";
            const char *m = NULL;
            for (const char *p = map; *p; p += 2)
                if (*p == e) m = p + 1;
            if (!m) ct_fail(rt, "template syntax: unexpected escaped character '%c'", e);
            ct_buf_put(rt, &o, m, 1);
            continue;
        }
        size_t k = kind == P_WS ? ws_at((const unsigned char *)L->src + L->pos, L->n - L->pos) : 1;
        ct_buf_put(rt, &o, L->src + L->pos, k);
        L->pos += k;
        if (L->pos >= L->n) ct_fail(rt, "template syntax: unexpected end of input");
    }
    ct_val v = ct_buf_val(rt, &o);
    return v.u.s;
}

static void strip_trailing_ws(lexer *L)
{
    if (!last_is(L, T_TEXT)) return;
    ct_token *t = &L->t[L->nt - 1];
    t->len -= ct_js_ws_suffix(t->s, t->len);
    if (t->len == 0) L->nt--;
}

static void skip_leading_ws(lexer *L) { L->pos += ct_js_ws_prefix(L->src + L->pos, L->n - L->pos); }

static const struct {
    const char *seq;
    ct_tok_type type;
} TABLE[] = {
    {"{%", T_OPEN_STMT}, {"%}", T_CLOSE_STMT}, {"{{", T_OPEN_EXPR}, {"}}", T_CLOSE_EXPR},
    {"(", T_LPAREN}, {")", T_RPAREN}, {"{", T_LBRACE}, {"}", T_RBRACE}, {"[", T_LBRACKET},
    {"]", T_RBRACKET}, {",", T_COMMA}, {".", T_DOT}, {":", T_COLON}, {"|", T_PIPE},
    {"<=", T_CMP}, {">=", T_CMP}, {"==", T_CMP}, {"!=", T_CMP}, {"<", T_CMP}, {">", T_CMP},
    {"+", T_ADD}, {"-", T_ADD}, {"~", T_ADD}, {"**", T_POW}, {"*", T_MUL}, {"//", T_MUL},
    {"/", T_MUL}, {"%", T_MUL}, {"=", T_EQUALS},
};

static int at(const lexer *L, const char *s)
{
    size_t k = strlen(s);
    return L->n - L->pos >= k && !memcmp(L->src + L->pos, s, k);
}

static void tokenize(lexer *L)
{
    ct_rt *rt = L->rt;
    int depth = 0; /* curlyBracketDepth */
    while (L->pos < L->n) {
        if (L->nt == 0 || last_is(L, T_CLOSE_STMT) || last_is(L, T_CLOSE_EXPR) || last_is(L, T_COMMENT)) {
            size_t s = L->pos;
            while (L->pos < L->n && !(L->src[L->pos] == '{' && L->pos + 1 < L->n &&
                                      (L->src[L->pos + 1] == '%' || L->src[L->pos + 1] == '{' || L->src[L->pos + 1] == '#')))
                L->pos++;
            if (L->pos > s) {
                push_tok(L, T_TEXT, L->src + s, L->pos - s);
                continue;
            }
        }
        if (at(L, "{#")) {
            L->pos += 2;
            int before = L->pos < L->n && L->src[L->pos] == '-';
            if (before) L->pos++;
            size_t s = L->pos;
            while (!(L->pos + 1 < L->n && L->src[L->pos] == '#' && L->src[L->pos + 1] == '}')) {
                if (L->pos + 2 >= L->n) ct_fail(rt, "template syntax: missing end of comment tag");
                L->pos++;
            }
            size_t len = L->pos - s;
            int after = len && L->src[s + len - 1] == '-';
            if (after) len--;
            if (before) strip_trailing_ws(L);
            push_tok(L, T_COMMENT, L->src + s, len);
            L->pos += 2;
            if (after) skip_leading_ws(L);
            continue;
        }
        if (at(L, "{%-")) {
            strip_trailing_ws(L);
            push_tok(L, T_OPEN_STMT, "{%", 2);
            L->pos += 3;
            continue;
        }
        if (at(L, "{{-")) {
            strip_trailing_ws(L);
            push_tok(L, T_OPEN_EXPR, "{{", 2);
            depth = 0;
            L->pos += 3;
            continue;
        }
        consume_while(L, P_WS, 0);
        if (at(L, "-%}")) {
            push_tok(L, T_CLOSE_STMT, "%}", 2);
            L->pos += 3;
            skip_leading_ws(L);
            continue;
        }
        if (at(L, "-}}")) {
            push_tok(L, T_CLOSE_EXPR, "}}", 2);
            L->pos += 3;
            skip_leading_ws(L);
            continue;
        }
        if (L->pos >= L->n) ct_fail(rt, "template syntax: unexpected end of input");
        char c = L->src[L->pos];
        if (c == '-' || c == '+') {
            if (L->nt == 0 || last_is(L, T_TEXT)) ct_fail(rt, "template syntax: unexpected character '%c'", c);
            ct_tok_type lt = L->t[L->nt - 1].type;
            if (lt != T_IDENT && lt != T_NUM && lt != T_STR && lt != T_RPAREN && lt != T_RBRACKET) {
                L->pos++;
                ct_buf num = {0};
                ct_buf_put(rt, &num, &c, 1);
                ct_str *d = consume_while(L, P_DIGIT, 0);
                ct_buf_put(rt, &num, d->s, d->len);
                if (d->len && L->pos + 1 < L->n && L->src[L->pos] == '.' && is_digit(L->src[L->pos + 1])) {
                    L->pos++;
                    ct_str *f = consume_while(L, P_DIGIT, 0);
                    ct_buf_puts(rt, &num, ".");
                    ct_buf_put(rt, &num, f->s, f->len);
                }
                push_tok(L, d->len ? T_NUM : T_UNARY, num.p, num.n);
                continue;
            }
        }
        int matched = 0;
        for (size_t i = 0; i < sizeof TABLE / sizeof TABLE[0]; i++) {
            if (TABLE[i].type == T_CLOSE_EXPR && depth > 0) continue;
            if (!at(L, TABLE[i].seq)) continue;
            push_tok(L, TABLE[i].type, TABLE[i].seq, strlen(TABLE[i].seq));
            if (TABLE[i].type == T_OPEN_EXPR) depth = 0;
            else if (TABLE[i].type == T_LBRACE) depth++;
            else if (TABLE[i].type == T_RBRACE) depth--;
            L->pos += strlen(TABLE[i].seq);
            matched = 1;
            break;
        }
        if (matched) continue;
        if (c == '\'' || c == '"') {
            L->pos++;
            ct_str *s = consume_while(L, P_NOT_QUOTE, c);
            push_tok(L, T_STR, s->s, s->len);
            L->pos++;
            continue;
        }
        if (is_digit(c)) {
            ct_buf num = {0};
            ct_str *d = consume_while(L, P_DIGIT, 0);
            ct_buf_put(rt, &num, d->s, d->len);
            if (!last_is(L, T_DOT) && L->pos + 1 < L->n && L->src[L->pos] == '.' && is_digit(L->src[L->pos + 1])) {
                L->pos++;
                ct_str *f = consume_while(L, P_DIGIT, 0);
                ct_buf_puts(rt, &num, ".");
                ct_buf_put(rt, &num, f->s, f->len);
            }
            push_tok(L, T_NUM, num.p, num.n);
            continue;
        }
        if (is_word(c)) {
            ct_str *w = consume_while(L, P_WORD, 0);
            push_tok(L, T_IDENT, w->s, w->len);
            continue;
        }
        if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
            ct_fail(rt, "template syntax: unexpected character (byte 0x%02x) inside a tag", (unsigned char)c);
        ct_fail(rt, "template syntax: unexpected character '%c'", c);
    }
}

void ct_tokenize(ct_rt *rt, const char *src, ct_token **tokens, size_t *n)
{
    size_t len;
    char *pre = preprocess(rt, src, &len);
    lexer L = {.rt = rt, .src = pre, .n = len};
    tokenize(&L);
    *tokens = L.t;
    *n = L.nt;
}
