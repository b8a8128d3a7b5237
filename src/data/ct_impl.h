/* Chat templates inside: the arena, the tokens, the syntax tree and the values shared by
 * chat_template.c (arena, API), ct_lex.c, ct_parse.c, ct_eval.c (evaluator), ct_lib.c (filters,
 * tests, methods, globals) and ct_value.c (values, strings, JSON). Names mirror
 * @huggingface/jinja's so the two read side by side. */
#ifndef TRIDENT_CT_IMPL_H
#define TRIDENT_CT_IMPL_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cjson/cJSON.h>

/* ---- bounds (untrusted templates) ---- */
#define CT_MAX_DEPTH 200                 /* nesting of the syntax */
#define CT_MAX_EVAL_DEPTH 1000           /* nesting of evaluation */
#define CT_MAX_CALLS 200                 /* nesting of macro calls (with the above: a render needs < 512 KiB of stack) */
#define CT_MAX_STEPS 20000000L           /* evaluation steps of one render */
#define CT_MAX_MEMORY ((size_t)256 << 20) /* arena bytes of one render */
#define CT_MAX_OUTPUT ((size_t)64 << 20) /* bytes of any one string */

/* ---- arena: every allocation of a compile or a render, freed at once ---- */
typedef struct ct_chunk ct_chunk;
typedef struct {
    ct_chunk *head;
    size_t used, limit;
    jmp_buf *fail; /* longjmp'd to (value 1) when the limit is passed */
    char *err;
    size_t errlen;
} ct_arena;
void *ct_alloc(ct_arena *a, size_t n);
void ct_arena_free(ct_arena *a);

/* ---- tokens ---- */
typedef enum {
    T_TEXT, T_NUM, T_STR, T_IDENT, T_EQUALS, T_LPAREN, T_RPAREN, T_OPEN_STMT, T_CLOSE_STMT,
    T_OPEN_EXPR, T_CLOSE_EXPR, T_LBRACKET, T_RBRACKET, T_LBRACE, T_RBRACE, T_COMMA, T_DOT, T_COLON,
    T_PIPE, T_ADD, T_MUL, T_POW, T_CMP, T_UNARY, T_COMMENT
} ct_tok_type;
typedef struct {
    ct_tok_type type;
    const char *s; /* the value (NUL-terminated, arena) */
    size_t len;
} ct_token;

/* ---- syntax tree ---- */
typedef enum {
    N_TEXT, N_COMMENT, N_IF, N_FOR, N_BREAK, N_CONTINUE, N_SET, N_MACRO, N_CALLSTMT, N_FILTERSTMT,
    N_INT, N_FLOAT, N_STR, N_ARRAY, N_TUPLE, N_OBJECT, N_IDENT, N_MEMBER, N_CALL, N_UNARY, N_BINARY,
    N_FILTER, N_TEST, N_SELECT, N_TERNARY, N_SLICE, N_KWARG, N_SPREAD, N_KWSPREAD
} ct_node_type;

typedef struct ct_node ct_node;
typedef struct {
    ct_node **v;
    size_t n;
} ct_nodes;
struct ct_node {
    ct_node_type type;
    const char *s;   /* N_TEXT/N_STR/N_COMMENT: value; N_IDENT: name; operators: "+", "not in", ... */
    size_t len;
    double num;      /* N_INT, N_FLOAT */
    int flag;        /* N_MEMBER: computed; N_TEST: negate */
    ct_node *a, *b, *c; /* operands: see the parser */
    ct_nodes body, alt, args, keys; /* blocks; N_ARRAY/N_TUPLE/N_CALL args; N_OBJECT keys (+ args values) */
    int uses_kwargs, uses_varargs; /* N_MACRO, N_CALLSTMT */
    struct ct_str_ *str;              /* N_TEXT, N_STR: the value */
};

/* ---- values ---- */
typedef enum {
    V_UNDEF, V_NULL, V_BOOL, V_INT, V_FLOAT, V_STR, V_ARRAY, V_TUPLE, V_OBJECT, V_KWARGS, V_NS,
    V_FUNC, V_HOLE /* a JavaScript undefined that is no value (`[]|first`): only a set keeps it */
} ct_vtype;

typedef struct ct_str_ {
    size_t len;
    char s[]; /* NUL-terminated */
} ct_str;
typedef struct ct_array ct_array;
typedef struct ct_map ct_map;
typedef struct ct_func ct_func;
typedef struct {
    ct_vtype t;
    union {
        int b;
        double n;
        ct_str *s;
        ct_array *a;
        ct_map *m;
        ct_func *f;
    } u;
} ct_val;
struct ct_array {
    size_t n, cap;
    ct_val *v;
};
struct ct_map {
    size_t n, cap;
    ct_str **k;
    ct_val *v;
};

typedef struct ct_env ct_env;
struct ct_env {
    ct_env *parent;
    ct_map vars;
};

typedef enum {
    F_GLOBAL, /* name: namespace, raise_exception, range, strftime_now */
    F_METHOD, /* name on self: a str or dict method */
    F_MACRO,
    F_CALLER
} ct_fkind;
struct ct_func {
    ct_fkind kind;
    const char *name;
    ct_val self;
    const ct_node *node;
    ct_env *env; /* F_CALLER: where the call block was */
};

/* ---- one render ---- */
typedef struct ct_loop_jmp ct_loop_jmp;
typedef struct {
    ct_arena arena;
    jmp_buf fail;
    char *err;
    size_t errlen;
    long steps;
    int depth, calls;
    ct_loop_jmp *loop; /* innermost for loop running (break/continue land there) */
    struct tm now;
} ct_rt;

/* Ends the render (or compile) with a one-line error. */
_Noreturn void ct_fail(ct_rt *rt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* values */
ct_val ct_mk_bool(int b);
ct_val ct_mk_num(double n, int is_int);
ct_val ct_mk_str(ct_rt *rt, const char *s, size_t n);
ct_val ct_mk_cstr(ct_rt *rt, const char *s);
ct_val ct_mk_array(ct_rt *rt, ct_vtype t, size_t cap);
ct_val ct_mk_map(ct_rt *rt, ct_vtype t);
void ct_array_push(ct_rt *rt, ct_array *a, ct_val v);
ct_val *ct_map_get(const ct_map *m, const char *k, size_t n);
void ct_map_set(ct_rt *rt, ct_map *m, const char *k, size_t n, ct_val v);
const char *ct_type_name(ct_val v);
int ct_truthy(ct_val v);
int ct_is_array(ct_val v);   /* ArrayValue or TupleValue */
int ct_is_object(ct_val v);  /* ObjectValue or KeywordArgumentsValue */
ct_val ct_from_json(ct_rt *rt, const cJSON *j);
void ct_check_value(ct_rt *rt, ct_val v); /* V_HOLE: the reference throws on it */

/* strings */
typedef struct {
    char *p;
    size_t n, cap;
} ct_buf;
void ct_buf_put(ct_rt *rt, ct_buf *b, const char *s, size_t n);
void ct_buf_puts(ct_rt *rt, ct_buf *b, const char *s);
ct_val ct_buf_val(ct_rt *rt, ct_buf *b);
void ct_to_string(ct_rt *rt, ct_buf *b, ct_val v); /* RuntimeValue.toString() */
void ct_js_string(ct_rt *rt, ct_buf *b, ct_val v); /* String(value.value), as `~` and join use */
void ct_num_js(char *out, double n);                 /* Number.prototype.toString() */
size_t ct_js_ws_prefix(const char *s, size_t n);      /* length of JS whitespace at the start */
size_t ct_js_ws_suffix(const char *s, size_t n);      /* ... at the end */
size_t ct_utf16_len(const char *s, size_t n);
void ct_tojson(ct_rt *rt, ct_buf *b, ct_val v, int indent, int ensure_ascii, int sort_keys,
               const char *item_sep, const char *key_sep, int depth, int undef_to_null);

/* compile (ct_lex.c, ct_parse.c): tokens and syntax tree in rt's arena; errors through ct_fail */
void ct_tokenize(ct_rt *rt, const char *src, ct_token **tokens, size_t *n);
void ct_parse(ct_rt *rt, ct_token *tokens, size_t n, ct_nodes *body);

/* library (ct_lib.c) */
ct_val ct_apply_filter(ct_rt *rt, ct_val operand, const ct_node *filter, ct_env *env);
int ct_run_test(ct_rt *rt, const char *name, ct_val a, const ct_val *b);
ct_val ct_call_func(ct_rt *rt, ct_val fn, ct_array *args, ct_env *env);
ct_val ct_builtin_member(ct_rt *rt, ct_val obj, const char *name, size_t n); /* or V_UNDEF */
int ct_compare(ct_rt *rt, ct_val a, ct_val b, int case_sensitive);
int ct_strict_eq(ct_val a, ct_val b); /* x.value === y.value */
int ct_loose_eq(ct_rt *rt, ct_val a, ct_val b); /* x.value == y.value */

/* evaluator (ct_eval.c) */
ct_val ct_eval(ct_rt *rt, const ct_node *n, ct_env *env);
ct_val ct_eval_block(ct_rt *rt, const ct_nodes *body, ct_env *env);
void ct_eval_args(ct_rt *rt, const ct_nodes *args, ct_env *env, ct_array **pos, ct_map **kw);
ct_env *ct_env_new(ct_rt *rt, ct_env *parent);
void ct_bind_macro_args(ct_rt *rt, const char *display, const ct_nodes *params, int uses_kwargs,
                        int uses_varargs, ct_array *args, ct_env *scope);

#endif
