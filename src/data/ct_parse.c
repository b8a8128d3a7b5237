/* Chat templates: the parser of @huggingface/jinja 0.5.11 (src/parser.ts): the same grammar,
 * precedence and errors, into the syntax tree of ct_impl.h; nesting bounded (CT_MAX_DEPTH). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_impl.h"

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

void ct_parse(ct_rt *rt, ct_token *tokens, size_t n, ct_nodes *body)
{
    parser P = {.rt = rt, .t = tokens, .n = n};
    memset(body, 0, sizeof *body);
    while (P.cur < P.n) nodes_push(&P, body, parse_any(&P));
}
