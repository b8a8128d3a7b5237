/* Chat templates: the arena, the lexer (with @huggingface/jinja's preprocessing: lstrip_blocks,
 * trim_blocks, the {% generation %} tags), the parser, and the API of trident/chat_template.h.
 * The grammar and every quirk follow @huggingface/jinja 0.5.11 (src/lexer.ts, src/parser.ts),
 * since the output must be its output byte for byte. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_impl.h"
#include "trident/chat_template.h"

/* ---------------------------------------------------------------- arena */

struct ct_chunk {
    ct_chunk *next;
    size_t size, used;
    max_align_t data[];
};

void *ct_alloc(ct_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->size - a->head->used < n) {
        size_t size = n > (64u << 10) ? n : (64u << 10);
        if (a->used + size > a->limit) {
            snprintf(a->err, a->errlen, "the template needs more than %zu MiB of memory", a->limit >> 20);
            longjmp(*a->fail, 1);
        }
        ct_chunk *c = malloc(sizeof *c + size);
        if (!c) {
            snprintf(a->err, a->errlen, "out of memory");
            longjmp(*a->fail, 1);
        }
        c->next = a->head;
        c->size = size;
        c->used = 0;
        a->head = c;
        a->used += size;
    }
    void *p = (char *)a->head->data + a->head->used;
    a->head->used += n;
    return p;
}

void ct_arena_free(ct_arena *a)
{
    for (ct_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->used = 0;
}

_Noreturn void ct_fail(ct_rt *rt, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rt->err, rt->errlen, fmt, ap);
    va_end(ap);
    for (char *p = rt->err; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' '; /* one line */
    longjmp(rt->fail, 1);
}

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

/* ---------------------------------------------------------------- parser */

typedef struct {
    ct_rt *rt;
    ct_token *t;
    size_t n, cur;
    int depth;
} parser;

static ct_node *new_node(parser *P, ct_node_type type)
{
    ct_node *n = ct_alloc(&P->rt->arena, sizeof *n);
    memset(n, 0, sizeof *n);
    n->type = type;
    return n;
}

static void nodes_push(parser *P, ct_nodes *v, ct_node *n)
{
    if ((v->n & (v->n - 1)) == 0) { /* 0, 1, 2, 4, ...: grow */
        ct_node **p = ct_alloc(&P->rt->arena, (v->n ? v->n * 2 : 1) * sizeof *p);
        if (v->n) memcpy(p, v->v, v->n * sizeof *p);
        v->v = p;
    }
    v->v[v->n++] = n;
}

static const char *tok_name(ct_tok_type t)
{
    static const char *names[] = {"text", "number", "string", "identifier", "'='", "'('", "')'", "'{%'", "'%}'",
                                  "'{{'", "'}}'", "'['", "']'", "'{'", "'}'", "','", "'.'", "':'", "'|'",
                                  "additive operator", "multiplicative operator", "'**'", "comparison", "unary operator", "comment"};
    return names[t];
}

static ct_token *peek(parser *P, size_t k) { return P->cur + k < P->n ? &P->t[P->cur + k] : NULL; }

static ct_token *expect(parser *P, ct_tok_type type, const char *what)
{
    ct_token *t = peek(P, 0);
    if (!t) ct_fail(P->rt, "template syntax: %s, got the end of the template", what);
    if (t->type != type) ct_fail(P->rt, "template syntax: %s, got %s '%.40s'", what, tok_name(t->type), t->s);
    P->cur++;
    return t;
}

static int is(parser *P, ct_tok_type type) { return P->cur < P->n && P->t[P->cur].type == type; }
static int is_ident(parser *P, size_t k, const char *name)
{
    ct_token *t = peek(P, k);
    return t && t->type == T_IDENT && !strcmp(t->s, name);
}
static int is_statement(parser *P, const char *const *names)
{
    ct_token *a = peek(P, 0), *b = peek(P, 1);
    if (!a || a->type != T_OPEN_STMT || !b || b->type != T_IDENT) return 0;
    for (; *names; names++)
        if (!strcmp(b->s, *names)) return 1;
    return 0;
}
static void expect_ident(parser *P, const char *name)
{
    if (!is_ident(P, 0, name)) ct_fail(P->rt, "template syntax: expected %s", name);
    P->cur++;
}

static void enter(parser *P)
{
    if (++P->depth > CT_MAX_DEPTH) ct_fail(P->rt, "template syntax: nested deeper than %d", CT_MAX_DEPTH);
}

static ct_node *parse_any(parser *P);
static ct_node *parse_expression(parser *P);
static ct_node *parse_primary(parser *P);

/* A block of statements up to one of `ends` (not consumed). */
static void parse_until(parser *P, ct_nodes *body, const char *const *ends, const char *what)
{
    while (!is_statement(P, ends)) {
        if (P->cur >= P->n) ct_fail(P->rt, "template syntax: missing {%% %s %%}", what);
        nodes_push(P, body, parse_any(P));
    }
}

static ct_node *parse_expression_sequence(parser *P, int primary)
{
    ct_node *first = primary ? parse_primary(P) : parse_expression(P);
    if (!is(P, T_COMMA)) return first;
    ct_node *tup = new_node(P, N_TUPLE);
    nodes_push(P, &tup->args, first);
    while (is(P, T_COMMA)) {
        P->cur++;
        nodes_push(P, &tup->args, primary ? parse_primary(P) : parse_expression(P));
        if (!is(P, T_COMMA)) break;
    }
    return tup;
}

/* parseArgumentsList: mode 'p' (parameters) or 'c' (call). */
static void parse_args(parser *P, ct_nodes *args, char mode)
{
    expect(P, T_LPAREN, "expected '(' for arguments");
    int saw_kw = 0, saw_spread = 0;
    while (!is(P, T_RPAREN)) {
        if (P->cur >= P->n) ct_fail(P->rt, "template syntax: missing ')' of an argument list");
        int kwspread = is(P, T_POW), spread = is(P, T_MUL) && !strcmp(P->t[P->cur].s, "*");
        if (mode == 'p' && (kwspread || spread)) ct_fail(P->rt, "template syntax: argument unpacking in parameters");
        if (kwspread) {
            P->cur++;
            ct_node *n = new_node(P, N_KWSPREAD);
            n->a = parse_expression(P);
            nodes_push(P, args, n);
            if (is(P, T_COMMA)) P->cur++;
            if (!is(P, T_RPAREN)) ct_fail(P->rt, "template syntax: `**` must be the last argument");
            break;
        }
        ct_node *arg;
        if (spread) {
            if (saw_spread) ct_fail(P->rt, "template syntax: only one `*` argument unpacking is allowed");
            saw_spread = 1;
            P->cur++;
            arg = new_node(P, N_SPREAD);
            arg->a = parse_expression(P);
        } else {
            arg = parse_expression(P);
            if (is(P, T_EQUALS)) {
                P->cur++;
                if (arg->type != N_IDENT) ct_fail(P->rt, "template syntax: expected an identifier before '='");
                ct_node *kw = new_node(P, N_KWARG);
                kw->a = arg;
                kw->b = parse_expression(P);
                arg = kw;
            }
            if (mode == 'p') {
                if (arg->type != N_IDENT && arg->type != N_KWARG) ct_fail(P->rt, "template syntax: expected a parameter name");
                const char *name = arg->type == N_IDENT ? arg->s : arg->a->s;
                for (size_t i = 0; i < args->n; i++) {
                    const ct_node *o = args->v[i];
                    if (!strcmp(o->type == N_IDENT ? o->s : o->a->s, name))
                        ct_fail(P->rt, "template syntax: duplicate parameter name %s", name);
                }
            }
            if (arg->type == N_KWARG) saw_kw = 1;
            else if (saw_kw) ct_fail(P->rt, "template syntax: %s", mode == 'c' ? "positional argument after a keyword argument" : "non-default argument follows default argument");
            else if (saw_spread) ct_fail(P->rt, "template syntax: positional argument after `*` unpacking");
        }
        nodes_push(P, args, arg);
        if (is(P, T_COMMA)) P->cur++;
    }
    expect(P, T_RPAREN, "expected ')' after arguments");
}

static ct_node *parse_member(parser *P, ct_node *object);

static ct_node *parse_call(parser *P, ct_node *callee)
{
    enter(P);
    ct_node *n = new_node(P, N_CALL);
    n->a = callee;
    parse_args(P, &n->args, 'c');
    n = parse_member(P, n);
    if (is(P, T_LPAREN)) n = parse_call(P, n);
    P->depth--;
    return n;
}

static ct_node *parse_member(parser *P, ct_node *object)
{
    while (is(P, T_DOT) || is(P, T_LBRACKET)) {
        int computed = is(P, T_LBRACKET);
        P->cur++;
        ct_node *prop;
        if (computed) {
            ct_node *sl[4] = {0};
            size_t k = 0;
            int slice = 0;
            while (!is(P, T_RBRACKET)) {
                if (P->cur >= P->n) ct_fail(P->rt, "template syntax: missing ']'");
                if (k == 4) ct_fail(P->rt, "template syntax: expected 0-3 arguments for a slice");
                if (is(P, T_COLON)) {
                    sl[k++] = NULL;
                    P->cur++;
                    slice = 1;
                } else {
                    sl[k++] = parse_expression(P);
                    if (is(P, T_COLON)) P->cur++, slice = 1;
                }
            }
            if (k == 0) ct_fail(P->rt, "template syntax: expected an index or a slice in []");
            if (slice) {
                if (k > 3) ct_fail(P->rt, "template syntax: expected 0-3 arguments for a slice");
                prop = new_node(P, N_SLICE);
                prop->a = sl[0], prop->b = sl[1], prop->c = sl[2];
            } else {
                prop = sl[0];
            }
            expect(P, T_RBRACKET, "expected ']'");
        } else {
            prop = parse_primary(P);
            if (prop->type != N_IDENT && prop->type != N_INT) ct_fail(P->rt, "template syntax: expected a name or an integer after '.'");
        }
        ct_node *m = new_node(P, N_MEMBER);
        m->a = object;
        m->b = prop;
        m->flag = computed;
        object = m;
    }
    return object;
}

static ct_node *binary(parser *P, const char *op, ct_node *l, ct_node *r)
{
    ct_node *n = new_node(P, N_BINARY);
    n->s = op;
    n->a = l;
    n->b = r;
    return n;
}

static ct_node *parse_unary_sign(parser *P)
{
    ct_token *t = peek(P, 0);
    if (t && (t->type == T_UNARY || t->type == T_ADD) && (!strcmp(t->s, "-") || !strcmp(t->s, "+"))) {
        enter(P);
        P->cur++;
        ct_node *n = new_node(P, N_UNARY);
        n->s = t->s;
        n->a = parse_unary_sign(P);
        P->depth--;
        return n;
    }
    ct_node *m = parse_member(P, parse_primary(P));
    return is(P, T_LPAREN) ? parse_call(P, m) : m;
}

static ct_node *parse_filter_expr(parser *P)
{
    ct_node *operand = parse_unary_sign(P);
    while (is(P, T_PIPE)) {
        P->cur++;
        ct_node *f = parse_primary(P);
        if (f->type != N_IDENT) ct_fail(P->rt, "template syntax: expected a filter name after '|'");
        if (is(P, T_LPAREN)) f = parse_call(P, f);
        ct_node *n = new_node(P, N_FILTER);
        n->a = operand;
        n->b = f;
        operand = n;
    }
    return operand;
}

static ct_node *parse_test_expr(parser *P)
{
    ct_node *operand = parse_filter_expr(P);
    while (is_ident(P, 0, "is")) {
        P->cur++;
        int neg = is_ident(P, 0, "not");
        if (neg) P->cur++;
        ct_node *f = parse_primary(P);
        if (f->type != N_IDENT) ct_fail(P->rt, "template syntax: expected a test name after 'is'");
        ct_node *n = new_node(P, N_TEST);
        n->a = operand;
        n->b = f;
        n->flag = neg;
        operand = n;
    }
    return operand;
}

static ct_node *parse_pow(parser *P)
{
    ct_node *l = parse_test_expr(P);
    while (is(P, T_POW)) {
        P->cur++;
        l = binary(P, "**", l, parse_test_expr(P));
    }
    return l;
}

static ct_node *parse_mul(parser *P)
{
    ct_node *l = parse_pow(P);
    while (is(P, T_MUL)) {
        const char *op = P->t[P->cur++].s;
        l = binary(P, op, l, parse_pow(P));
    }
    return l;
}

static ct_node *parse_add(parser *P)
{
    ct_node *l = parse_mul(P);
    while (is(P, T_ADD)) {
        const char *op = P->t[P->cur++].s;
        l = binary(P, op, l, parse_mul(P));
    }
    return l;
}

static ct_node *parse_comparison(parser *P)
{
    ct_node *l = parse_add(P);
    for (;;) {
        const char *op;
        if (is_ident(P, 0, "not") && is_ident(P, 1, "in")) op = "not in", P->cur += 2;
        else if (is_ident(P, 0, "in")) op = "in", P->cur++;
        else if (is(P, T_CMP)) op = P->t[P->cur++].s;
        else break;
        l = binary(P, op, l, parse_add(P));
    }
    return l;
}

static ct_node *parse_not(parser *P)
{
    ct_node *right = NULL;
    while (is_ident(P, 0, "not")) {
        enter(P);
        P->cur++;
        ct_node *n = new_node(P, N_UNARY);
        n->s = "not";
        n->a = parse_not(P);
        right = n;
        P->depth--;
    }
    return right ? right : parse_comparison(P);
}

static ct_node *parse_and(parser *P)
{
    ct_node *l = parse_not(P);
    while (is_ident(P, 0, "and")) {
        P->cur++;
        l = binary(P, "and", l, parse_not(P));
    }
    return l;
}

static ct_node *parse_or(parser *P)
{
    ct_node *l = parse_and(P);
    while (is_ident(P, 0, "or")) {
        P->cur++;
        l = binary(P, "or", l, parse_and(P));
    }
    return l;
}

static ct_node *parse_if_expr(parser *P)
{
    ct_node *a = parse_or(P);
    if (!is_ident(P, 0, "if")) return a;
    P->cur++;
    ct_node *test = parse_or(P);
    if (is_ident(P, 0, "else")) {
        P->cur++;
        ct_node *n = new_node(P, N_TERNARY);
        n->a = test;
        n->b = a;
        n->c = parse_if_expr(P);
        return n;
    }
    ct_node *n = new_node(P, N_SELECT);
    n->a = a;
    n->b = test;
    return n;
}

static ct_node *parse_expression(parser *P)
{
    enter(P);
    ct_node *n = parse_if_expr(P);
    P->depth--;
    return n;
}

static ct_node *parse_primary(parser *P)
{
    ct_token *t = peek(P, 0);
    if (!t) ct_fail(P->rt, "template syntax: unexpected end of the template in an expression");
    P->cur++;
    switch (t->type) {
    case T_NUM: {
        ct_node *n = new_node(P, strchr(t->s, '.') ? N_FLOAT : N_INT);
        n->num = strtod(t->s, NULL);
        return n;
    }
    case T_STR: {
        ct_buf b = {0};
        ct_buf_put(P->rt, &b, t->s, t->len);
        while (is(P, T_STR)) {
            ct_token *u = &P->t[P->cur++];
            ct_buf_put(P->rt, &b, u->s, u->len);
        }
        ct_val v = ct_buf_val(P->rt, &b);
        ct_node *n = new_node(P, N_STR);
        n->s = v.u.s->s;
        n->len = v.u.s->len;
        n->str = v.u.s;
        return n;
    }
    case T_IDENT: {
        ct_node *n = new_node(P, N_IDENT);
        n->s = t->s;
        n->len = t->len;
        return n;
    }
    case T_LPAREN: {
        enter(P);
        ct_node *n = parse_expression_sequence(P, 0);
        expect(P, T_RPAREN, "expected ')'");
        P->depth--;
        return n;
    }
    case T_LBRACKET: {
        ct_node *n = new_node(P, N_ARRAY);
        while (!is(P, T_RBRACKET)) {
            if (P->cur >= P->n) ct_fail(P->rt, "template syntax: missing ']' of a list");
            nodes_push(P, &n->args, parse_expression(P));
            if (is(P, T_COMMA)) P->cur++;
        }
        P->cur++;
        return n;
    }
    case T_LBRACE: {
        ct_node *n = new_node(P, N_OBJECT);
        while (!is(P, T_RBRACE)) {
            if (P->cur >= P->n) ct_fail(P->rt, "template syntax: missing '}' of a dict");
            ct_node *k = parse_expression(P);
            expect(P, T_COLON, "expected ':' between key and value in a dict");
            ct_node *v = parse_expression(P);
            /* a Map keyed by node: every key node is distinct, so all are kept in order */
            nodes_push(P, &n->keys, k);
            nodes_push(P, &n->args, v);
            if (is(P, T_COMMA)) P->cur++;
        }
        P->cur++;
        return n;
    }
    default:
        ct_fail(P->rt, "template syntax: unexpected %s '%.40s'", tok_name(t->type), t->s);
    }
}

/* Which of kwargs/varargs a macro body reads (findAccessedSpecialMacroArguments, simplified: any
 * identifier of that name in the body or the defaults that the parameters do not declare). */
static void scan_special(const ct_node *n, int *kw, int *va)
{
    if (!n) return;
    if (n->type == N_IDENT) {
        if (!strcmp(n->s, "kwargs")) *kw = 1;
        if (!strcmp(n->s, "varargs")) *va = 1;
        return;
    }
    if (n->type == N_MEMBER && !n->flag) {
        scan_special(n->a, kw, va);
        return;
    }
    scan_special(n->a, kw, va);
    scan_special(n->b, kw, va);
    scan_special(n->c, kw, va);
    const ct_nodes *lists[] = {&n->body, &n->alt, &n->args, &n->keys};
    for (int l = 0; l < 4; l++)
        for (size_t i = 0; i < lists[l]->n; i++) scan_special(lists[l]->v[i], kw, va);
}

static void mark_special(ct_node *n, const ct_nodes *params)
{
    int kw = 0, va = 0;
    for (size_t i = 0; i < n->body.n; i++) scan_special(n->body.v[i], &kw, &va);
    for (size_t i = 0; i < params->n; i++) {
        const ct_node *p = params->v[i];
        const char *name = p->type == N_IDENT ? p->s : p->a->s;
        if (p->type == N_KWARG) scan_special(p->b, &kw, &va);
        if (!strcmp(name, "kwargs")) kw = 0;
        if (!strcmp(name, "varargs")) va = 0;
    }
    n->uses_kwargs = kw;
    n->uses_varargs = va;
}

static ct_node *parse_if(parser *P)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL}, *const endif[] = {"endif", NULL};
    enter(P);
    ct_node *n = new_node(P, N_IF);
    n->a = parse_expression(P);
    expect(P, T_CLOSE_STMT, "expected '%}' after the if condition");
    parse_until(P, &n->body, ends, "endif");
    if (is_statement(P, (const char *const[]){"elif", NULL})) {
        P->cur += 2;
        nodes_push(P, &n->alt, parse_if(P));
    } else if (is_statement(P, (const char *const[]){"else", NULL})) {
        P->cur += 2;
        expect(P, T_CLOSE_STMT, "expected '%}' after else");
        parse_until(P, &n->alt, endif, "endif");
    }
    P->depth--;
    return n;
}

static void close_block(parser *P, const char *end)
{
    expect(P, T_OPEN_STMT, "expected '{%'");
    expect_ident(P, end);
    expect(P, T_CLOSE_STMT, "expected '%}'");
}

static ct_node *parse_statement(parser *P)
{
    expect(P, T_OPEN_STMT, "expected '{%'");
    ct_token *t = peek(P, 0);
    if (!t || t->type != T_IDENT) ct_fail(P->rt, "template syntax: expected a statement name after '{%%'");
    const char *name = t->s;
    ct_node *n;
    if (!strcmp(name, "set")) {
        P->cur++;
        n = new_node(P, N_SET);
        n->a = parse_expression_sequence(P, 0);
        if (is(P, T_EQUALS)) {
            P->cur++;
            n->b = parse_expression_sequence(P, 0);
        } else {
            expect(P, T_CLOSE_STMT, "expected '%}' after set");
            parse_until(P, &n->body, (const char *const[]){"endset", NULL}, "endset");
            expect(P, T_OPEN_STMT, "expected '{%'");
            expect_ident(P, "endset");
        }
        expect(P, T_CLOSE_STMT, "expected '%}' after set");
    } else if (!strcmp(name, "if")) {
        P->cur++;
        n = parse_if(P);
        close_block(P, "endif");
    } else if (!strcmp(name, "macro")) {
        P->cur++;
        n = new_node(P, N_MACRO);
        n->a = parse_primary(P);
        if (n->a->type != N_IDENT) ct_fail(P->rt, "template syntax: expected a macro name");
        parse_args(P, &n->args, 'p');
        expect(P, T_CLOSE_STMT, "expected '%}' after the macro's parameters");
        parse_until(P, &n->body, (const char *const[]){"endmacro", NULL}, "endmacro");
        mark_special(n, &n->args);
        close_block(P, "endmacro");
    } else if (!strcmp(name, "for")) {
        P->cur++;
        n = new_node(P, N_FOR);
        n->a = parse_expression_sequence(P, 1);
        if (n->a->type != N_IDENT && n->a->type != N_TUPLE) ct_fail(P->rt, "template syntax: expected a loop variable");
        if (!is_ident(P, 0, "in")) ct_fail(P->rt, "template syntax: expected `in` after the loop variable");
        P->cur++;
        n->b = parse_expression(P);
        expect(P, T_CLOSE_STMT, "expected '%}' after the for loop's iterable");
        parse_until(P, &n->body, (const char *const[]){"endfor", "else", NULL}, "endfor");
        if (is_statement(P, (const char *const[]){"else", NULL})) {
            P->cur += 2;
            expect(P, T_CLOSE_STMT, "expected '%}' after else");
            parse_until(P, &n->alt, (const char *const[]){"endfor", NULL}, "endfor");
        }
        close_block(P, "endfor");
    } else if (!strcmp(name, "call")) {
        P->cur++;
        n = new_node(P, N_CALLSTMT);
        if (is(P, T_LPAREN)) parse_args(P, &n->alt, 'p'); /* the caller's parameters */
        ct_node *callee = parse_primary(P);
        if (callee->type != N_IDENT) ct_fail(P->rt, "template syntax: expected a macro name after call");
        n->a = new_node(P, N_CALL);
        n->a->a = callee;
        parse_args(P, &n->a->args, 'c');
        expect(P, T_CLOSE_STMT, "expected '%}' after call");
        parse_until(P, &n->body, (const char *const[]){"endcall", NULL}, "endcall");
        mark_special(n, &n->alt);
        close_block(P, "endcall");
    } else if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        P->cur++;
        expect(P, T_CLOSE_STMT, "expected '%}'");
        n = new_node(P, name[0] == 'b' ? N_BREAK : N_CONTINUE);
    } else if (!strcmp(name, "filter")) {
        P->cur++;
        n = new_node(P, N_FILTERSTMT);
        n->a = parse_primary(P);
        if (n->a->type == N_IDENT && is(P, T_LPAREN)) n->a = parse_call(P, n->a);
        expect(P, T_CLOSE_STMT, "expected '%}' after filter");
        parse_until(P, &n->body, (const char *const[]){"endfilter", NULL}, "endfilter");
        close_block(P, "endfilter");
    } else {
        ct_fail(P->rt, "template syntax: unknown statement '%.40s'", name);
    }
    return n;
}

static ct_node *parse_any(parser *P)
{
    ct_token *t = peek(P, 0);
    enter(P);
    ct_node *n;
    switch (t->type) {
    case T_COMMENT:
        n = new_node(P, N_COMMENT);
        P->cur++;
        break;
    case T_TEXT:
        n = new_node(P, N_TEXT);
        n->s = t->s;
        n->len = t->len;
        n->str = ct_mk_str(P->rt, t->s, t->len).u.s;
        P->cur++;
        break;
    case T_OPEN_STMT:
        n = parse_statement(P);
        break;
    case T_OPEN_EXPR:
        P->cur++;
        n = parse_expression(P);
        expect(P, T_CLOSE_EXPR, "expected '}}'");
        break;
    default:
        ct_fail(P->rt, "template syntax: unexpected %s '%.40s'", tok_name(t->type), t->s);
    }
    P->depth--;
    return n;
}

/* ---------------------------------------------------------------- API */

struct ct_template {
    ct_arena arena;
    ct_nodes body;
};

ct_template *ct_compile(const char *src, char *err, size_t errlen)
{
    ct_rt *rt = calloc(1, sizeof *rt);
    char dummy[8];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    if (!rt) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    rt->err = err;
    rt->errlen = errlen;
    rt->arena.limit = CT_MAX_MEMORY;
    rt->arena.fail = &rt->fail;
    rt->arena.err = err;
    rt->arena.errlen = errlen;
    if (setjmp(rt->fail)) {
        ct_arena_free(&rt->arena);
        free(rt);
        return NULL;
    }
    size_t n;
    char *pre = preprocess(rt, src, &n);
    lexer L = {.rt = rt, .src = pre, .n = n};
    tokenize(&L);
    parser P = {.rt = rt, .t = L.t, .n = L.nt};
    ct_nodes body = {0};
    while (P.cur < P.n) nodes_push(&P, &body, parse_any(&P));
    ct_template *t = malloc(sizeof *t);
    if (!t) ct_fail(rt, "out of memory");
    t->arena = rt->arena;
    t->arena.fail = NULL;
    t->body = body;
    free(rt);
    return t;
}

void ct_free(ct_template *t)
{
    if (!t) return;
    ct_arena_free(&t->arena);
    free(t);
}

static void set_fn(ct_rt *rt, ct_env *env, const char *name)
{
    ct_func *f = ct_alloc(&rt->arena, sizeof *f);
    memset(f, 0, sizeof *f);
    f->kind = F_GLOBAL;
    f->name = name;
    ct_map_set(rt, &env->vars, name, strlen(name), (ct_val){.t = V_FUNC, .u.f = f});
}

char *ct_render(const ct_template *t, const cJSON *ctx, const struct tm *now, char *err, size_t errlen)
{
    char dummy[8];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    ct_rt *rt = calloc(1, sizeof *rt);
    if (!rt) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    rt->err = err;
    rt->errlen = errlen;
    rt->arena.limit = CT_MAX_MEMORY;
    rt->arena.fail = &rt->fail;
    rt->arena.err = err;
    rt->arena.errlen = errlen;
    if (now) {
        rt->now = *now;
    } else {
        time_t s = time(NULL);
        localtime_r(&s, &rt->now);
    }
    char *out = NULL;
    if (setjmp(rt->fail)) {
        free(out);
        ct_arena_free(&rt->arena);
        free(rt);
        return NULL;
    }
    if (ctx && !cJSON_IsObject(ctx)) ct_fail(rt, "the template's variables must be a JSON object");
    ct_env *env = ct_env_new(rt, NULL);
    /* setupGlobals, then the variables: a name given twice is an error, as env.set makes it */
    static const char *const bools[] = {"false", "true", "none", "True", "False", "None"};
    for (int i = 0; i < 6; i++) {
        ct_val v = i == 2 || i == 5 ? (ct_val){.t = V_NULL} : ct_mk_bool(i == 1 || i == 3);
        ct_map_set(rt, &env->vars, bools[i], strlen(bools[i]), v);
    }
    set_fn(rt, env, "namespace");
    set_fn(rt, env, "raise_exception");
    set_fn(rt, env, "range");
    set_fn(rt, env, "strftime_now");
    for (const cJSON *c = ctx ? ctx->child : NULL; c; c = c->next) {
        if (ct_map_get(&env->vars, c->string, strlen(c->string)))
            ct_fail(rt, "variable already declared: %s", c->string);
        ct_map_set(rt, &env->vars, c->string, strlen(c->string), ct_from_json(rt, c));
    }
    ct_val r = ct_eval_block(rt, &t->body, env);
    out = malloc(r.u.s->len + 1);
    if (!out) ct_fail(rt, "out of memory");
    memcpy(out, r.u.s->s, r.u.s->len + 1);
    ct_arena_free(&rt->arena);
    free(rt);
    return out;
}

/* ---------------------------------------------------------------- tokenizer_config.json */

const char *const ct_special_names[CT_NSPECIAL] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                                   "pad_token", "cls_token", "mask_token"};

static char *xstrdup(const char *s)
{
    char *d = malloc(strlen(s) + 1);
    if (d) strcpy(d, s);
    return d;
}

void ct_config_free(ct_config *cfg)
{
    free(cfg->template_src);
    free(cfg->tool_template_src);
    for (int i = 0; i < CT_NSPECIAL; i++) free(cfg->special[i]);
    memset(cfg, 0, sizeof *cfg);
}

int ct_load_config(const char *path, ct_config *cfg, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open %s", path);
        return -1;
    }
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        snprintf(err, errlen, "cannot read %s", path);
        return -1;
    }
    buf[n] = 0;
    cJSON *j = cJSON_ParseWithLength(buf, n);
    free(buf);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        snprintf(err, errlen, "%s is not a JSON object", path);
        return -1;
    }
    int rc = 0;
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    if (cJSON_IsString(ct)) {
        cfg->template_src = xstrdup(ct->valuestring);
    } else if (cJSON_IsArray(ct)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, ct) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name"), *src = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (!cJSON_IsString(name) || !cJSON_IsString(src)) {
                snprintf(err, errlen, "%s: chat_template must be a string or a list of {name, template}", path);
                rc = -1;
                break;
            }
            if (!strcmp(name->valuestring, "default") && !cfg->template_src) cfg->template_src = xstrdup(src->valuestring);
            if (!strcmp(name->valuestring, "tool_use") && !cfg->tool_template_src) cfg->tool_template_src = xstrdup(src->valuestring);
        }
    } else if (ct && !cJSON_IsNull(ct)) {
        snprintf(err, errlen, "%s: chat_template must be a string or a list of {name, template}", path);
        rc = -1;
    }
    for (int i = 0; i < CT_NSPECIAL && rc == 0; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, ct_special_names[i]);
        if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (cJSON_IsString(v) && v->valuestring[0]) cfg->special[i] = xstrdup(v->valuestring);
    }
    cJSON_Delete(j);
    if (rc) ct_config_free(cfg);
    return rc;
}

cJSON *ct_chat_context(const ct_config *cfg, const cJSON *messages, int add_generation_prompt, const cJSON *tools)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToObject(c, "messages", messages ? cJSON_Duplicate(messages, 1) : cJSON_CreateArray());
    cJSON_AddBoolToObject(c, "add_generation_prompt", add_generation_prompt);
    cJSON_AddItemToObject(c, "tools", tools ? cJSON_Duplicate(tools, 1) : cJSON_CreateNull());
    cJSON_AddNullToObject(c, "documents");
    for (int i = 0; i < CT_NSPECIAL; i++)
        if (cfg && cfg->special[i]) cJSON_AddStringToObject(c, ct_special_names[i], cfg->special[i]);
    return c;
}
