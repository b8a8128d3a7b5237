/* Chat templates: the evaluator, node by node as @huggingface/jinja 0.5.11's Interpreter
 * (runtime.ts): scopes, statements, operators, member access, calls, macros. Errors and
 * break/continue leave through longjmp; every allocation is the render's arena. */
#include <math.h>
#include <string.h>

#include "ct_impl.h"

struct ct_loop_jmp {
    jmp_buf jb;
    ct_loop_jmp *outer;
};

ct_env *ct_env_new(ct_rt *rt, ct_env *parent)
{
    ct_env *e = ct_alloc(&rt->arena, sizeof *e);
    memset(e, 0, sizeof *e);
    e->parent = parent;
    return e;
}

static ct_val lookup(ct_env *env, const char *name, size_t n)
{
    for (; env; env = env->parent) {
        ct_val *v = ct_map_get(&env->vars, name, n);
        if (v) return *v;
    }
    return (ct_val){.t = V_UNDEF};
}

static void set_var(ct_rt *rt, ct_env *env, const char *name, ct_val v)
{
    if (v.t == V_HOLE) v.t = V_UNDEF;
    ct_map_set(rt, &env->vars, name, strlen(name), v);
}

static ct_val eval_raw(ct_rt *rt, const ct_node *n, ct_env *env);

ct_val ct_eval(ct_rt *rt, const ct_node *n, ct_env *env)
{
    ct_val v = eval_raw(rt, n, env);
    ct_check_value(rt, v);
    return v;
}

ct_val ct_eval_block(ct_rt *rt, const ct_nodes *body, ct_env *env)
{
    ct_buf b = {0};
    for (size_t i = 0; i < body->n; i++) {
        ct_val v = ct_eval(rt, body->v[i], env);
        if (v.t != V_NULL && v.t != V_UNDEF) ct_to_string(rt, &b, v);
    }
    return ct_buf_val(rt, &b);
}

void ct_eval_args(ct_rt *rt, const ct_nodes *args, ct_env *env, ct_array **pos, ct_map **kw)
{
    *pos = ct_mk_array(rt, V_ARRAY, 0).u.a;
    *kw = ct_mk_map(rt, V_KWARGS).u.m;
    for (size_t i = 0; i < args->n; i++) {
        const ct_node *a = args->v[i];
        if (a->type == N_SPREAD) {
            ct_val v = ct_eval(rt, a->a, env);
            if (!ct_is_array(v)) ct_fail(rt, "cannot unpack non-iterable type: %s", ct_type_name(v));
            for (size_t j = 0; j < v.u.a->n; j++) ct_array_push(rt, *pos, v.u.a->v[j]);
        } else if (a->type != N_KWARG && a->type != N_KWSPREAD) {
            ct_array_push(rt, *pos, ct_eval(rt, a, env));
        }
    }
    for (size_t i = 0; i < args->n; i++) {
        const ct_node *a = args->v[i];
        if (a->type == N_KWARG) {
            if (ct_map_get(*kw, a->a->s, a->a->len)) ct_fail(rt, "got multiple values for keyword argument '%s'", a->a->s);
            ct_map_set(rt, *kw, a->a->s, a->a->len, ct_eval(rt, a->b, env));
        } else if (a->type == N_KWSPREAD) {
            ct_val v = ct_eval(rt, a->a, env);
            if (!ct_is_object(v)) ct_fail(rt, "argument after ** must be a mapping, not %s", ct_type_name(v));
            for (size_t j = 0; j < v.u.m->n; j++) {
                if (ct_map_get(*kw, v.u.m->k[j]->s, v.u.m->k[j]->len)) ct_fail(rt, "got multiple values for keyword argument '%s'", v.u.m->k[j]->s);
                ct_map_set(rt, *kw, v.u.m->k[j]->s, v.u.m->k[j]->len, v.u.m->v[j]);
            }
        }
    }
}

/* ---------------------------------------------------------------- operators */

static int is_num(ct_val v) { return v.t == V_INT || v.t == V_FLOAT; }
static int is_numlike(ct_val v) { return is_num(v) || v.t == V_BOOL; }
static double numval(ct_val v) { return v.t == V_BOOL ? v.u.b : v.u.n; }

static int str_contains(const ct_str *hay, const ct_str *needle)
{
    if (needle->len == 0) return 1;
    if (needle->len > hay->len) return 0;
    for (size_t i = 0; i + needle->len <= hay->len; i++)
        if (!memcmp(hay->s + i, needle->s, needle->len)) return 1;
    return 0;
}

static ct_val binary(ct_rt *rt, const ct_node *n, ct_env *env)
{
    const char *op = n->s;
    ct_val l = ct_eval(rt, n->a, env);
    if (!strcmp(op, "and")) return ct_truthy(l) ? ct_eval(rt, n->b, env) : l;
    if (!strcmp(op, "or")) return ct_truthy(l) ? l : ct_eval(rt, n->b, env);
    ct_val r = ct_eval(rt, n->b, env);
    if (!strcmp(op, "==")) return ct_mk_bool(ct_loose_eq(rt, l, r));
    if (!strcmp(op, "!=")) return ct_mk_bool(!ct_loose_eq(rt, l, r));
    int in = !strcmp(op, "in"), notin = !strcmp(op, "not in");
    if (l.t == V_UNDEF || r.t == V_UNDEF) {
        if (r.t == V_UNDEF && (in || notin)) return ct_mk_bool(notin);
        ct_fail(rt, "cannot perform operation %s on undefined values", op);
    }
    if (l.t == V_NULL || r.t == V_NULL) ct_fail(rt, "cannot perform operation %s on null values", op);
    if (!strcmp(op, "~")) {
        ct_buf b = {0};
        ct_js_string(rt, &b, l);
        ct_js_string(rt, &b, r);
        return ct_buf_val(rt, &b);
    }
    if (!strcmp(op, "**") && is_numlike(l) && is_numlike(r)) {
        double a = numval(l), x = numval(r);
        if (a == 0 && x < 0) ct_fail(rt, "0.0 cannot be raised to a negative power");
        double res = pow(a, x);
        if (!isfinite(res)) ct_fail(rt, "exponentiation result is not a finite real number");
        return ct_mk_num(res, !(l.t == V_FLOAT || r.t == V_FLOAT || x < 0));
    }
    if (is_num(l) && is_num(r)) {
        double a = l.u.n, b = r.u.n;
        int fl = l.t == V_FLOAT || r.t == V_FLOAT;
        switch (op[0]) {
        case '+': return ct_mk_num(a + b, !fl);
        case '-': return ct_mk_num(a - b, !fl);
        case '*': return ct_mk_num(a * b, !fl);
        case '/': return op[1] == '/' ? ct_mk_num(floor(a / b), !fl) : ct_mk_num(a / b, 0);
        case '%': return ct_mk_num(fmod(a, b), !fl);
        case '<': return ct_mk_bool(op[1] == '=' ? a <= b : a < b);
        case '>': return ct_mk_bool(op[1] == '=' ? a >= b : a > b);
        }
    } else if (ct_is_array(l) && ct_is_array(r)) {
        if (!strcmp(op, "+")) {
            ct_val out = ct_mk_array(rt, V_ARRAY, l.u.a->n + r.u.a->n);
            for (size_t i = 0; i < l.u.a->n; i++) ct_array_push(rt, out.u.a, l.u.a->v[i]);
            for (size_t i = 0; i < r.u.a->n; i++) ct_array_push(rt, out.u.a, r.u.a->v[i]);
            rt->steps += (long)out.u.a->n;
            return out;
        }
    } else if (ct_is_array(r)) {
        if (in || notin) {
            int found = 0;
            for (size_t i = 0; i < r.u.a->n && !found; i++) {
                ct_check_value(rt, r.u.a->v[i]); /* find's x.value of undefined throws there */
                found = ct_strict_eq(r.u.a->v[i], l);
            }
            rt->steps += (long)r.u.a->n;
            return ct_mk_bool(in ? found : !found);
        }
    }
    if ((l.t == V_STR || r.t == V_STR) && !strcmp(op, "+")) {
        ct_buf b = {0};
        ct_js_string(rt, &b, l);
        ct_js_string(rt, &b, r);
        return ct_buf_val(rt, &b);
    }
    if (l.t == V_STR && r.t == V_STR && (in || notin)) {
        int c = str_contains(r.u.s, l.u.s);
        return ct_mk_bool(in ? c : !c);
    }
    if (l.t == V_STR && ct_is_object(r) && (in || notin)) {
        int c = ct_map_get(r.u.m, l.u.s->s, l.u.s->len) != NULL;
        return ct_mk_bool(in ? c : !c);
    }
    ct_fail(rt, "unknown operator \"%s\" between %s and %s", op, ct_type_name(l), ct_type_name(r));
}

static ct_val unary(ct_rt *rt, const ct_node *n, ct_env *env)
{
    ct_val a = ct_eval(rt, n->a, env);
    if (!strcmp(n->s, "not")) return ct_mk_bool(!ct_truthy(a));
    if (!is_numlike(a)) ct_fail(rt, "unknown operator \"%s\" for %s", n->s, ct_type_name(a));
    double v = numval(a) * (n->s[0] == '-' ? -1 : 1);
    return ct_mk_num(v, a.t != V_FLOAT);
}

/* ---------------------------------------------------------------- member access */

/* A JavaScript index (negative from the end, as Array.prototype.at) into n items, or -1. */
static long at_index(double i, size_t n)
{
    if (i < 0) i += (double)n;
    return i >= 0 && i < (double)n ? (long)i : -1;
}

/* The UTF-16 code unit at index i of s as a string (a lone surrogate half prints as U+FFFD). */
static ct_val str_at(ct_rt *rt, const ct_str *s, double idx)
{
    long i = at_index(trunc(idx), ct_utf16_len(s->s, s->len));
    if (i < 0) return (ct_val){.t = V_UNDEF};
    long u = 0;
    for (size_t p = 0; p < s->len;) {
        unsigned char c = (unsigned char)s->s[p];
        size_t k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (p + k > s->len) k = s->len - p;
        long units = c >= 0xF0 ? 2 : 1;
        if (i < u + units) return units == 2 ? ct_mk_cstr(rt, "\xEF\xBF\xBD") : ct_mk_str(rt, s->s + p, k);
        u += units;
        p += k;
    }
    return (ct_val){.t = V_UNDEF};
}

/* utils.ts slice() over n items: the indices chosen, in *out (arena); returns their count. */
static size_t slice_indices(ct_rt *rt, size_t n, ct_val start, ct_val stop, ct_val step, long **out)
{
    double st = step.t == V_UNDEF ? 1 : step.u.n, len = (double)n;
    double s, e;
    int dir = st > 0 ? 1 : st < 0 ? -1 : 0;
    if (dir >= 0) {
        s = start.t == V_UNDEF ? 0 : start.u.n;
        e = stop.t == V_UNDEF ? len : stop.u.n;
        s = s < 0 ? fmax(len + s, 0) : fmin(s, len);
        e = e < 0 ? fmax(len + e, 0) : fmin(e, len);
    } else {
        s = start.t == V_UNDEF ? len - 1 : start.u.n;
        e = stop.t == V_UNDEF ? -1 : stop.u.n;
        s = s < 0 ? fmax(len + s, -1) : fmin(s, len - 1);
        e = e < -1 ? fmax(len + e, -1) : fmin(e, len - 1);
    }
    size_t cnt = 0, cap = n + 1;
    *out = ct_alloc(&rt->arena, cap * sizeof **out);
    if (dir == 0) return 0; /* for (i = s; 0 * i < 0 * e; ...) runs no step */
    for (double i = s; dir * i < dir * e; i += st) {
        if (++rt->steps > CT_MAX_STEPS) ct_fail(rt, "the template ran more than %ld steps", CT_MAX_STEPS);
        if (cnt < cap) (*out)[cnt++] = (long)i;
    }
    return cnt;
}

static ct_val eval_slice(ct_rt *rt, ct_val obj, const ct_node *sl, ct_env *env)
{
    if (!ct_is_array(obj) && obj.t != V_STR) ct_fail(rt, "slice object must be an array or string");
    ct_val part[3];
    const ct_node *nodes[3] = {sl->a, sl->b, sl->c};
    for (int i = 0; i < 3; i++) {
        part[i] = nodes[i] ? ct_eval(rt, nodes[i], env) : (ct_val){.t = V_UNDEF};
        if (part[i].t != V_INT && part[i].t != V_UNDEF) ct_fail(rt, "slice indices must be integers or undefined");
    }
    long *idx;
    if (ct_is_array(obj)) {
        size_t k = slice_indices(rt, obj.u.a->n, part[0], part[1], part[2], &idx);
        ct_val out = ct_mk_array(rt, V_ARRAY, k);
        for (size_t i = 0; i < k; i++) ct_array_push(rt, out.u.a, idx[i] >= 0 && (size_t)idx[i] < obj.u.a->n ? obj.u.a->v[idx[i]] : (ct_val){.t = V_HOLE});
        return out;
    }
    /* Array.from(string): code points */
    const ct_str *s = obj.u.s;
    size_t ncp = 0;
    for (size_t p = 0; p < s->len; p++) ncp += ((unsigned char)s->s[p] & 0xC0) != 0x80;
    size_t *off = ct_alloc(&rt->arena, (ncp + 1) * sizeof *off);
    for (size_t p = 0, c = 0; p < s->len; p++)
        if (((unsigned char)s->s[p] & 0xC0) != 0x80) off[c++] = p;
    off[ncp] = s->len;
    size_t k = slice_indices(rt, ncp, part[0], part[1], part[2], &idx);
    ct_buf b = {0};
    for (size_t i = 0; i < k; i++)
        if (idx[i] >= 0 && (size_t)idx[i] < ncp) ct_buf_put(rt, &b, s->s + off[idx[i]], off[idx[i] + 1] - off[idx[i]]);
    return ct_buf_val(rt, &b);
}

static ct_val member(ct_rt *rt, const ct_node *n, ct_env *env)
{
    ct_val obj = ct_eval(rt, n->a, env), prop;
    if (n->flag) {
        if (n->b->type == N_SLICE) return eval_slice(rt, obj, n->b, env);
        prop = ct_eval(rt, n->b, env);
    } else if (n->b->type == N_INT) {
        prop = ct_mk_num(n->b->num, 1);
    } else {
        prop = (ct_val){.t = V_STR, .u.s = ct_mk_str(rt, n->b->s, n->b->len).u.s};
    }
    if (ct_is_object(obj) || obj.t == V_NS) {
        if (prop.t != V_STR) ct_fail(rt, "cannot access property with non-string: got %s", ct_type_name(prop));
        ct_val *v = ct_map_get(obj.u.m, prop.u.s->s, prop.u.s->len);
        if (v) return v->t == V_HOLE ? (ct_val){.t = V_UNDEF} : *v;
        return obj.t == V_NS ? (ct_val){.t = V_UNDEF} : ct_builtin_member(rt, obj, prop.u.s->s, prop.u.s->len);
    }
    if (ct_is_array(obj) || obj.t == V_STR) {
        if (prop.t == V_INT) {
            if (obj.t == V_STR) return str_at(rt, obj.u.s, prop.u.n);
            long i = at_index(prop.u.n, obj.u.a->n);
            return i < 0 || obj.u.a->v[i].t == V_HOLE ? (ct_val){.t = V_UNDEF} : obj.u.a->v[i];
        }
        if (prop.t == V_STR) return ct_builtin_member(rt, obj, prop.u.s->s, prop.u.s->len);
        ct_fail(rt, "cannot access property with non-string/non-number: got %s", ct_type_name(prop));
    }
    if (prop.t != V_STR) ct_fail(rt, "cannot access property with non-string: got %s", ct_type_name(prop));
    return (ct_val){.t = V_UNDEF};
}

/* ---------------------------------------------------------------- statements */

static ct_val eval_set(ct_rt *rt, const ct_node *n, ct_env *env)
{
    ct_val rhs = n->b ? eval_raw(rt, n->b, env) : ct_eval_block(rt, &n->body, env);
    const ct_node *lhs = n->a;
    if (lhs->type == N_IDENT) {
        set_var(rt, env, lhs->s, rhs);
    } else if (lhs->type == N_TUPLE) {
        if (!ct_is_array(rhs)) ct_fail(rt, "cannot unpack non-iterable type in set: %s", ct_type_name(rhs));
        if (rhs.u.a->n != lhs->args.n) ct_fail(rt, "too %s items to unpack in set", lhs->args.n > rhs.u.a->n ? "few" : "many");
        for (size_t i = 0; i < lhs->args.n; i++) {
            if (lhs->args.v[i]->type != N_IDENT) ct_fail(rt, "cannot unpack to a non-identifier in set");
            set_var(rt, env, lhs->args.v[i]->s, rhs.u.a->v[i]);
        }
    } else if (lhs->type == N_MEMBER) {
        ct_val obj = ct_eval(rt, lhs->a, env);
        if (obj.t != V_NS) ct_fail(rt, "cannot assign attribute on non-namespace object");
        if (lhs->b->type != N_IDENT) ct_fail(rt, "cannot assign to member with non-identifier property");
        if (rhs.t == V_HOLE) rhs.t = V_UNDEF;
        ct_map_set(rt, obj.u.m, lhs->b->s, lhs->b->len, rhs);
    } else {
        ct_fail(rt, "invalid left-hand side of a set");
    }
    return (ct_val){.t = V_NULL};
}

/* One iteration of a for loop's body: 0 done, 1 break, 2 continue. */
static int run_iteration(ct_rt *rt, const ct_nodes *body, ct_env *scope, ct_buf *out)
{
    ct_loop_jmp lj;
    lj.outer = rt->loop;
    int depth = rt->depth, calls = rt->calls;
    rt->loop = &lj;
    int r = setjmp(lj.jb);
    if (r == 0) {
        ct_val v = ct_eval_block(rt, body, scope);
        ct_buf_put(rt, out, v.u.s->s, v.u.s->len);
    } else {
        rt->depth = depth;
        rt->calls = calls;
    }
    rt->loop = lj.outer;
    return r;
}

static void bind_loopvar(ct_rt *rt, const ct_node *var, ct_val cur, ct_env *scope)
{
    if (var->type == N_IDENT) {
        set_var(rt, scope, var->s, cur);
        return;
    }
    if (cur.t != V_ARRAY) ct_fail(rt, "cannot unpack non-iterable type: %s", ct_type_name(cur));
    if (var->args.n != cur.u.a->n) ct_fail(rt, "too %s items to unpack", var->args.n > cur.u.a->n ? "few" : "many");
    for (size_t j = 0; j < var->args.n; j++) {
        if (var->args.v[j]->type != N_IDENT) ct_fail(rt, "cannot unpack to a non-identifier");
        set_var(rt, scope, var->args.v[j]->s, cur.u.a->v[j]);
    }
}

static ct_val eval_for(ct_rt *rt, const ct_node *n, ct_env *env)
{
    ct_env *scope = ct_env_new(rt, env);
    const ct_node *test = NULL, *iter_node = n->b;
    if (iter_node->type == N_SELECT) {
        test = iter_node->b;
        iter_node = iter_node->a;
    }
    ct_val it = ct_eval(rt, iter_node, scope);
    if (!ct_is_array(it) && !ct_is_object(it)) ct_fail(rt, "expected iterable or object type in for loop: got %s", ct_type_name(it));
    if (ct_is_object(it)) {
        ct_val keys = ct_mk_array(rt, V_ARRAY, it.u.m->n);
        for (size_t i = 0; i < it.u.m->n; i++) ct_array_push(rt, keys.u.a, (ct_val){.t = V_STR, .u.s = it.u.m->k[i]});
        it = keys;
    }
    ct_val items = ct_mk_array(rt, V_ARRAY, it.u.a->n);
    for (size_t i = 0; i < it.u.a->n; i++) {
        ct_val cur = it.u.a->v[i];
        if (n->a->type == N_TUPLE && cur.t != V_ARRAY) ct_fail(rt, "cannot unpack non-iterable type: %s", ct_type_name(cur));
        if (test) {
            ct_env *ls = ct_env_new(rt, scope);
            bind_loopvar(rt, n->a, cur, ls);
            if (!ct_truthy(ct_eval(rt, test, ls))) continue;
        }
        ct_array_push(rt, items.u.a, cur);
    }
    ct_buf out = {0};
    int none = 1;
    size_t len = items.u.a->n;
    for (size_t i = 0; i < len; i++) {
        if (++rt->steps > CT_MAX_STEPS) ct_fail(rt, "the template ran more than %ld steps", CT_MAX_STEPS);
        ct_val loop = ct_mk_map(rt, V_OBJECT);
        ct_map *m = loop.u.m;
        ct_map_set(rt, m, "index", 5, ct_mk_num((double)i + 1, 1));
        ct_map_set(rt, m, "index0", 6, ct_mk_num((double)i, 1));
        ct_map_set(rt, m, "revindex", 8, ct_mk_num((double)(len - i), 1));
        ct_map_set(rt, m, "revindex0", 9, ct_mk_num((double)(len - i - 1), 1));
        ct_map_set(rt, m, "first", 5, ct_mk_bool(i == 0));
        ct_map_set(rt, m, "last", 4, ct_mk_bool(i == len - 1));
        ct_map_set(rt, m, "length", 6, ct_mk_num((double)len, 1));
        ct_map_set(rt, m, "previtem", 8, i > 0 ? items.u.a->v[i - 1] : (ct_val){.t = V_UNDEF});
        ct_map_set(rt, m, "nextitem", 8, i + 1 < len ? items.u.a->v[i + 1] : (ct_val){.t = V_UNDEF});
        set_var(rt, scope, "loop", loop);
        bind_loopvar(rt, n->a, items.u.a->v[i], scope);
        int r = run_iteration(rt, &n->body, scope, &out);
        if (r == 2) continue;
        if (r == 1) break;
        none = 0;
    }
    if (none) {
        ct_val d = ct_eval_block(rt, &n->alt, scope);
        ct_buf_put(rt, &out, d.u.s->s, d.u.s->len);
    }
    return ct_buf_val(rt, &out);
}

void ct_bind_macro_args(ct_rt *rt, const char *display, const ct_nodes *params, int uses_kwargs, int uses_varargs,
                        ct_array *args, ct_env *scope)
{
    size_t npos = args->n;
    ct_map *kw = ct_mk_map(rt, V_OBJECT).u.m;
    if (npos && args->v[npos - 1].t == V_KWARGS) {
        const ct_map *src = args->v[--npos].u.m;
        for (size_t i = 0; i < src->n; i++) ct_map_set(rt, kw, src->k[i]->s, src->k[i]->len, src->v[i]);
    }
    const ct_node **pending = ct_alloc(&rt->arena, (params->n + 1) * sizeof *pending);
    size_t np = 0;
    for (size_t i = 0; i < params->n; i++) {
        const ct_node *p = params->v[i];
        const ct_node *name = p->type == N_IDENT ? p : p->a;
        ct_val v = {.t = V_HOLE};
        if (i < npos) v = args->v[i];
        ct_val *k;
        if (v.t == V_HOLE && (k = ct_map_get(kw, name->s, name->len))) {
            v = *k;
            /* delete it from kw */
            size_t idx = (size_t)(k - kw->v);
            memmove(kw->k + idx, kw->k + idx + 1, (kw->n - idx - 1) * sizeof *kw->k);
            memmove(kw->v + idx, kw->v + idx + 1, (kw->n - idx - 1) * sizeof *kw->v);
            kw->n--;
        }
        if (v.t == V_HOLE && p->type == N_KWARG) pending[np++] = p;
        set_var(rt, scope, name->s, v);
    }
    if (uses_kwargs) set_var(rt, scope, "kwargs", (ct_val){.t = V_OBJECT, .u.m = kw});
    else if (kw->n) ct_fail(rt, "macro %s takes no keyword argument '%s'", display, kw->k[0]->s);
    if (uses_varargs) {
        ct_val va = ct_mk_array(rt, V_ARRAY, 0);
        for (size_t i = params->n; i < npos; i++) ct_array_push(rt, va.u.a, args->v[i]);
        set_var(rt, scope, "varargs", va);
    } else if (npos > params->n) {
        ct_fail(rt, "macro %s takes not more than %zu argument(s)", display, params->n);
    }
    for (size_t i = 0; i < np; i++) set_var(rt, scope, pending[i]->a->s, ct_eval(rt, pending[i]->b, scope));
}

static ct_val call_statement(ct_rt *rt, const ct_node *n, ct_env *env)
{
    ct_func *caller = ct_alloc(&rt->arena, sizeof *caller);
    memset(caller, 0, sizeof *caller);
    caller->kind = F_CALLER;
    caller->node = n;
    caller->env = env;
    ct_array *pos;
    ct_map *kw;
    ct_eval_args(rt, &n->a->args, env, &pos, &kw);
    ct_array_push(rt, pos, (ct_val){.t = V_KWARGS, .u.m = kw});
    ct_val fn = ct_eval(rt, n->a->a, env);
    if (fn.t != V_FUNC) ct_fail(rt, "cannot call something that is not a function: got %s", ct_type_name(fn));
    ct_env *ne = ct_env_new(rt, env);
    set_var(rt, ne, "caller", (ct_val){.t = V_FUNC, .u.f = caller});
    return ct_call_func(rt, fn, pos, ne);
}

static ct_val eval_raw(ct_rt *rt, const ct_node *n, ct_env *env)
{
    if (!n) return (ct_val){.t = V_UNDEF};
    if (++rt->steps > CT_MAX_STEPS) ct_fail(rt, "the template ran more than %ld steps", CT_MAX_STEPS);
    if (++rt->depth > CT_MAX_EVAL_DEPTH) ct_fail(rt, "the template's evaluation nests deeper than %d", CT_MAX_EVAL_DEPTH);
    ct_val v = {.t = V_NULL};
    switch (n->type) {
    case N_TEXT:
    case N_STR: v = (ct_val){.t = V_STR, .u.s = n->str}; break;
    case N_COMMENT: break;
    case N_INT: v = ct_mk_num(n->num, 1); break;
    case N_FLOAT: v = ct_mk_num(n->num, 0); break;
    case N_IF: v = ct_eval_block(rt, ct_truthy(ct_eval(rt, n->a, env)) ? &n->body : &n->alt, env); break;
    case N_FOR: v = eval_for(rt, n, env); break;
    case N_BREAK:
    case N_CONTINUE:
        if (!rt->loop) ct_fail(rt, "%s outside a for loop", n->type == N_BREAK ? "break" : "continue");
        longjmp(rt->loop->jb, n->type == N_BREAK ? 1 : 2);
    case N_SET: v = eval_set(rt, n, env); break;
    case N_MACRO: {
        ct_func *f = ct_alloc(&rt->arena, sizeof *f);
        memset(f, 0, sizeof *f);
        f->kind = F_MACRO;
        f->node = n;
        f->name = n->a->s;
        set_var(rt, env, n->a->s, (ct_val){.t = V_FUNC, .u.f = f});
        break;
    }
    case N_CALLSTMT: v = call_statement(rt, n, env); break;
    case N_FILTERSTMT: v = ct_apply_filter(rt, ct_eval_block(rt, &n->body, env), n->a, env); break;
    case N_ARRAY:
    case N_TUPLE:
        /* an element may be a JavaScript undefined (a hole): the reference keeps it until used */
        v = ct_mk_array(rt, n->type == N_ARRAY ? V_ARRAY : V_TUPLE, n->args.n);
        for (size_t i = 0; i < n->args.n; i++) ct_array_push(rt, v.u.a, eval_raw(rt, n->args.v[i], env));
        break;
    case N_OBJECT:
        v = ct_mk_map(rt, V_OBJECT);
        for (size_t i = 0; i < n->keys.n; i++) {
            ct_val k = ct_eval(rt, n->keys.v[i], env);
            if (k.t != V_STR) ct_fail(rt, "object keys must be strings: got %s", ct_type_name(k));
            ct_map_set(rt, v.u.m, k.u.s->s, k.u.s->len, eval_raw(rt, n->args.v[i], env));
        }
        break;
    case N_IDENT: v = lookup(env, n->s, n->len); break;
    case N_MEMBER: v = member(rt, n, env); break;
    case N_CALL: {
        ct_array *pos;
        ct_map *kw;
        ct_eval_args(rt, &n->args, env, &pos, &kw);
        if (kw->n) ct_array_push(rt, pos, (ct_val){.t = V_KWARGS, .u.m = kw});
        ct_val fn = ct_eval(rt, n->a, env);
        if (fn.t != V_FUNC) ct_fail(rt, "cannot call something that is not a function: got %s", ct_type_name(fn));
        v = ct_call_func(rt, fn, pos, env);
        break;
    }
    case N_UNARY: v = unary(rt, n, env); break;
    case N_BINARY: v = binary(rt, n, env); break;
    case N_FILTER: v = ct_apply_filter(rt, eval_raw(rt, n->a, env), n->b, env); break;
    case N_TEST: {
        ct_val a = eval_raw(rt, n->a, env);
        int r = ct_run_test(rt, n->b->s, a, NULL);
        v = ct_mk_bool(n->flag ? !r : r);
        break;
    }
    case N_SELECT:
        v = ct_truthy(ct_eval(rt, n->b, env)) ? ct_eval(rt, n->a, env) : (ct_val){.t = V_UNDEF};
        break;
    case N_TERNARY: v = ct_truthy(ct_eval(rt, n->a, env)) ? ct_eval(rt, n->b, env) : ct_eval(rt, n->c, env); break;
    default: ct_fail(rt, "unknown node type %d", (int)n->type);
    }
    rt->depth--;
    return v;
}
