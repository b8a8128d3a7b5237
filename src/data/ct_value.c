/* Chat templates: values, strings as JavaScript sees them (UTF-16 lengths, Number formatting,
 * String() of a runtime value), equality and ordering, and JSON (the tojson filter), as
 * @huggingface/jinja 0.5.11's runtime.ts does them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_impl.h"

/* ---------------------------------------------------------------- values */

ct_val ct_mk_bool(int b) { return (ct_val){.t = V_BOOL, .u.b = !!b}; }
ct_val ct_mk_num(double n, int is_int) { return (ct_val){.t = is_int ? V_INT : V_FLOAT, .u.n = n}; }

ct_val ct_mk_str(ct_rt *rt, const char *s, size_t n)
{
    if (n > CT_MAX_OUTPUT) ct_fail(rt, "a string of the template grew past %zu MiB", CT_MAX_OUTPUT >> 20);
    ct_str *p = ct_alloc(&rt->arena, sizeof *p + n + 1);
    p->len = n;
    if (n) memcpy(p->s, s, n);
    p->s[n] = 0;
    return (ct_val){.t = V_STR, .u.s = p};
}

ct_val ct_mk_cstr(ct_rt *rt, const char *s) { return ct_mk_str(rt, s, strlen(s)); }

ct_val ct_mk_array(ct_rt *rt, ct_vtype t, size_t cap)
{
    ct_array *a = ct_alloc(&rt->arena, sizeof *a);
    a->n = 0;
    a->cap = cap;
    a->v = cap ? ct_alloc(&rt->arena, cap * sizeof *a->v) : NULL;
    return (ct_val){.t = t, .u.a = a};
}

ct_val ct_mk_map(ct_rt *rt, ct_vtype t)
{
    ct_map *m = ct_alloc(&rt->arena, sizeof *m);
    memset(m, 0, sizeof *m);
    return (ct_val){.t = t, .u.m = m};
}

void ct_array_push(ct_rt *rt, ct_array *a, ct_val v)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 4;
        ct_val *nv = ct_alloc(&rt->arena, cap * sizeof *nv);
        if (a->n) memcpy(nv, a->v, a->n * sizeof *nv);
        a->v = nv;
        a->cap = cap;
    }
    a->v[a->n++] = v;
}

ct_val *ct_map_get(const ct_map *m, const char *k, size_t n)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->k[i]->len == n && !memcmp(m->k[i]->s, k, n)) return &m->v[i];
    return NULL;
}

void ct_map_set(ct_rt *rt, ct_map *m, const char *k, size_t n, ct_val v)
{
    ct_val *old = ct_map_get(m, k, n);
    if (old) {
        *old = v;
        return;
    }
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 8;
        ct_str **nk = ct_alloc(&rt->arena, cap * sizeof *nk);
        ct_val *nv = ct_alloc(&rt->arena, cap * sizeof *nv);
        if (m->n) memcpy(nk, m->k, m->n * sizeof *nk), memcpy(nv, m->v, m->n * sizeof *nv);
        m->k = nk;
        m->v = nv;
        m->cap = cap;
    }
    m->k[m->n] = ct_mk_str(rt, k, n).u.s;
    m->v[m->n++] = v;
}

const char *ct_type_name(ct_val v)
{
    static const char *names[] = {"UndefinedValue", "NullValue", "BooleanValue", "IntegerValue", "FloatValue",
                                  "StringValue", "ArrayValue", "TupleValue", "ObjectValue", "KeywordArgumentsValue",
                                  "NamespaceValue", "FunctionValue", "undefined"};
    return names[v.t];
}

void ct_check_value(ct_rt *rt, ct_val v)
{
    if (v.t == V_HOLE) ct_fail(rt, "a value of the template is undefined in JavaScript (the first or last of an empty list)");
}

int ct_truthy(ct_val v)
{
    switch (v.t) {
    case V_BOOL: return v.u.b;
    case V_INT:
    case V_FLOAT: return v.u.n != 0 && !isnan(v.u.n);
    case V_STR: return v.u.s->len > 0;
    case V_ARRAY:
    case V_TUPLE: return v.u.a->n > 0;
    case V_OBJECT:
    case V_KWARGS: return v.u.m->n > 0;
    case V_NS:
    case V_FUNC: return 1;
    default: return 0;
    }
}

int ct_is_array(ct_val v) { return v.t == V_ARRAY || v.t == V_TUPLE; }
int ct_is_object(ct_val v) { return v.t == V_OBJECT || v.t == V_KWARGS; }

/* A canonical array index ("0", "17"): JavaScript objects list those keys first, ascending. */
static int index_key(const char *k, double *out)
{
    size_t n = strlen(k);
    if (n == 0 || n > 10 || (n > 1 && k[0] == '0')) return 0;
    double v = 0;
    for (size_t i = 0; i < n; i++) {
        if (k[i] < '0' || k[i] > '9') return 0;
        v = v * 10 + (k[i] - '0');
    }
    if (v >= 4294967295.0) return 0;
    *out = v;
    return 1;
}

ct_val ct_from_json(ct_rt *rt, const cJSON *j)
{
    if (++rt->depth > 2 * CT_MAX_DEPTH) ct_fail(rt, "the template's variables are nested deeper than %d", 2 * CT_MAX_DEPTH);
    ct_val v;
    if (cJSON_IsString(j)) {
        v = ct_mk_cstr(rt, j->valuestring);
    } else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        v = ct_mk_num(d, isfinite(d) && d == floor(d));
    } else if (cJSON_IsBool(j)) {
        v = ct_mk_bool(cJSON_IsTrue(j));
    } else if (cJSON_IsArray(j)) {
        v = ct_mk_array(rt, V_ARRAY, 0);
        for (const cJSON *c = j->child; c; c = c->next) ct_array_push(rt, v.u.a, ct_from_json(rt, c));
    } else if (cJSON_IsObject(j)) {
        v = ct_mk_map(rt, V_OBJECT);
        /* index-like keys first in ascending order, then the rest in order (Object.entries) */
        for (;;) {
            const cJSON *best = NULL;
            double bi = 0, x;
            for (const cJSON *c = j->child; c; c = c->next)
                if (index_key(c->string, &x) && !ct_map_get(v.u.m, c->string, strlen(c->string)) && (!best || x < bi)) best = c, bi = x;
            if (!best) break;
            ct_map_set(rt, v.u.m, best->string, strlen(best->string), ct_from_json(rt, best));
        }
        for (const cJSON *c = j->child; c; c = c->next)
            if (!index_key(c->string, &(double){0}) || !ct_map_get(v.u.m, c->string, strlen(c->string)))
                ct_map_set(rt, v.u.m, c->string, strlen(c->string), ct_from_json(rt, c));
    } else {
        v = (ct_val){.t = V_NULL};
    }
    rt->depth--;
    return v;
}

/* ---------------------------------------------------------------- buffers and strings */

void ct_buf_put(ct_rt *rt, ct_buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        if (b->n + n > CT_MAX_OUTPUT) ct_fail(rt, "the template's output grew past %zu MiB", CT_MAX_OUTPUT >> 20);
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = ct_alloc(&rt->arena, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void ct_buf_puts(ct_rt *rt, ct_buf *b, const char *s) { ct_buf_put(rt, b, s, strlen(s)); }

ct_val ct_buf_val(ct_rt *rt, ct_buf *b) { return ct_mk_str(rt, b->p ? b->p : "", b->n); }

size_t ct_utf16_len(const char *s, size_t n)
{
    size_t u = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c & 0xC0) != 0x80) u += c >= 0xF0 ? 2 : 1;
    }
    return u;
}

/* Number.prototype.toString(): the shortest digits that read back, JavaScript's layout. */
void ct_num_js(char *out, double v)
{
    if (isnan(v)) {
        strcpy(out, "NaN");
        return;
    }
    if (isinf(v)) {
        strcpy(out, v < 0 ? "-Infinity" : "Infinity");
        return;
    }
    if (v == 0) {
        strcpy(out, "0");
        return;
    }
    char tmp[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, v);
        if (strtod(tmp, NULL) == v) break;
    }
    char *o = out;
    const char *t = tmp;
    if (*t == '-') *o++ = '-', t++;
    char digits[20];
    int k = 0;
    for (; *t && *t != 'e'; t++)
        if (*t >= '0' && *t <= '9') digits[k++] = *t;
    while (k > 1 && digits[k - 1] == '0') k--;
    int n = atoi(t + 1) + 1; /* the decimal point sits after n digits */
    if (k <= n && n <= 21) {
        memcpy(o, digits, (size_t)k), o += k;
        for (int i = k; i < n; i++) *o++ = '0';
    } else if (0 < n && n <= 21) {
        memcpy(o, digits, (size_t)n), o += n;
        *o++ = '.';
        memcpy(o, digits + n, (size_t)(k - n)), o += k - n;
    } else if (-6 < n && n <= 0) {
        *o++ = '0', *o++ = '.';
        for (int i = 0; i < -n; i++) *o++ = '0';
        memcpy(o, digits, (size_t)k), o += k;
    } else {
        *o++ = digits[0];
        if (k > 1) *o++ = '.', memcpy(o, digits + 1, (size_t)(k - 1)), o += k - 1;
        o += sprintf(o, "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
    }
    *o = 0;
}

static void put_num(ct_rt *rt, ct_buf *b, double v)
{
    char tmp[64];
    ct_num_js(tmp, v);
    ct_buf_puts(rt, b, tmp);
}

void ct_to_string(ct_rt *rt, ct_buf *b, ct_val v)
{
    switch (v.t) {
    case V_STR: ct_buf_put(rt, b, v.u.s->s, v.u.s->len); return;
    case V_INT: put_num(rt, b, v.u.n); return;
    case V_FLOAT:
        if (v.u.n == 0 && signbit(v.u.n)) ct_buf_puts(rt, b, "-0.0");
        else if (isfinite(v.u.n) && v.u.n == floor(v.u.n) && fabs(v.u.n) < 1e21) {
            char tmp[400];
            snprintf(tmp, sizeof tmp, "%.1f", v.u.n);
            ct_buf_puts(rt, b, tmp);
        } else put_num(rt, b, v.u.n);
        return;
    case V_BOOL: ct_buf_puts(rt, b, v.u.b ? "true" : "false"); return;
    case V_NULL: /* NullValue holds JavaScript's undefined (new NullValue() with no value) */
    case V_UNDEF: ct_buf_puts(rt, b, "undefined"); return;
    case V_ARRAY:
    case V_TUPLE:
    case V_OBJECT:
    case V_KWARGS:
    case V_NS: ct_tojson(rt, b, v, 0, 0, 0, NULL, NULL, 0, 0); return;
    case V_FUNC: ct_fail(rt, "the template prints a function");
    case V_HOLE: ct_check_value(rt, v);
    }
}

void ct_js_string(ct_rt *rt, ct_buf *b, ct_val v)
{
    switch (v.t) {
    case V_INT:
    case V_FLOAT: put_num(rt, b, v.u.n); return;
    case V_NULL:
    case V_UNDEF:
    case V_HOLE: return; /* as Array.prototype.join writes them */
    case V_ARRAY:
    case V_TUPLE:
        for (size_t i = 0; i < v.u.a->n; i++) {
            if (i) ct_buf_puts(rt, b, ",");
            if (v.u.a->v[i].t != V_HOLE) ct_to_string(rt, b, v.u.a->v[i]);
        }
        return;
    case V_OBJECT:
    case V_KWARGS:
    case V_NS: ct_buf_puts(rt, b, "[object Map]"); return;
    default: ct_to_string(rt, b, v);
    }
}

/* ---------------------------------------------------------------- JSON */

static void json_string(ct_rt *rt, ct_buf *b, const char *s, size_t n, int ascii)
{
    ct_buf_puts(rt, b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char tmp[16];
        switch (c) {
        case '"': ct_buf_puts(rt, b, "\\\""); continue;
        case '\\': ct_buf_puts(rt, b, "\\\\"); continue;
        case '\b': ct_buf_puts(rt, b, "\\b"); continue;
        case '\f': ct_buf_puts(rt, b, "\\f"); continue;
        case '\n': ct_buf_puts(rt, b, "\\n"); continue;
        case '\r': ct_buf_puts(rt, b, "\\r"); continue;
        case '\t': ct_buf_puts(rt, b, "\\t"); continue;
        }
        if (c < 0x20) {
            snprintf(tmp, sizeof tmp, "\\u%04x", c);
            ct_buf_puts(rt, b, tmp);
        } else if (ascii && c >= 0x7f) {
            unsigned cp = c;
            size_t k = 0;
            if (c >= 0xF0 && i + 3 < n) cp = (c & 7u) << 18 | (s[i + 1] & 63u) << 12 | (s[i + 2] & 63u) << 6 | (s[i + 3] & 63u), k = 3;
            else if (c >= 0xE0 && i + 2 < n) cp = (c & 15u) << 12 | (s[i + 1] & 63u) << 6 | (s[i + 2] & 63u), k = 2;
            else if (c >= 0xC0 && i + 1 < n) cp = (c & 31u) << 6 | (s[i + 1] & 63u), k = 1;
            i += k;
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                snprintf(tmp, sizeof tmp, "\\u%04x", cp);
            }
            ct_buf_puts(rt, b, tmp);
        } else {
            ct_buf_put(rt, b, (const char *)&s[i], 1);
        }
    }
    ct_buf_puts(rt, b, "\"");
}

/* localeCompare, approximated: case-insensitive first, then lower case before upper. */
static int locale_cmp(const ct_str *a, const ct_str *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    for (size_t i = 0; i < n; i++) {
        int x = (unsigned char)a->s[i], y = (unsigned char)b->s[i];
        int lx = x >= 'A' && x <= 'Z' ? x + 32 : x, ly = y >= 'A' && y <= 'Z' ? y + 32 : y;
        if (lx != ly) return lx < ly ? -1 : 1;
    }
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    int c = strcmp(a->s, b->s);
    return c > 0 ? -1 : c < 0 ? 1 : 0;
}

static void pad(ct_rt *rt, ct_buf *b, int indent, int depth)
{
    ct_buf_puts(rt, b, "\n");
    for (long i = 0; i < (long)indent * depth; i++) ct_buf_puts(rt, b, " ");
}

void ct_tojson(ct_rt *rt, ct_buf *b, ct_val v, int indent, int ascii, int sort_keys, const char *item_sep,
               const char *key_sep, int depth, int undef_to_null)
{
    if (!item_sep) item_sep = indent ? "," : ", ", key_sep = ": ";
    if (depth > 2 * CT_MAX_DEPTH) ct_fail(rt, "tojson: nested deeper than %d", 2 * CT_MAX_DEPTH);
    rt->steps++;
    switch (v.t) {
    case V_NULL: ct_buf_puts(rt, b, "null"); return;
    case V_UNDEF: ct_buf_puts(rt, b, undef_to_null ? "null" : "undefined"); return;
    case V_INT:
    case V_FLOAT:
        if (!isfinite(v.u.n)) ct_buf_puts(rt, b, "null");
        else put_num(rt, b, v.u.n);
        return;
    case V_BOOL: ct_buf_puts(rt, b, v.u.b ? "true" : "false"); return;
    case V_STR: json_string(rt, b, v.u.s->s, v.u.s->len, ascii); return;
    case V_ARRAY:
        ct_buf_puts(rt, b, "[");
        for (size_t i = 0; i < v.u.a->n; i++) {
            if (i) ct_buf_puts(rt, b, item_sep);
            if (indent) pad(rt, b, indent, depth + 1);
            ct_check_value(rt, v.u.a->v[i]);
            ct_tojson(rt, b, v.u.a->v[i], indent, ascii, sort_keys, item_sep, key_sep, depth + 1, undef_to_null);
        }
        if (indent && v.u.a->n) pad(rt, b, indent, depth);
        ct_buf_puts(rt, b, "]");
        return;
    case V_OBJECT:
    case V_NS: {
        const ct_map *m = v.u.m;
        size_t *order = ct_alloc(&rt->arena, (m->n + 1) * sizeof *order);
        for (size_t i = 0; i < m->n; i++) order[i] = i;
        if (sort_keys) /* insertion sort: stable, as Array.prototype.sort */
            for (size_t i = 1; i < m->n; i++)
                for (size_t j = i; j > 0 && locale_cmp(m->k[order[j - 1]], m->k[order[j]]) > 0; j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1], order[j - 1] = t;
                }
        ct_buf_puts(rt, b, "{");
        for (size_t i = 0; i < m->n; i++) {
            if (i) ct_buf_puts(rt, b, item_sep);
            if (indent) pad(rt, b, indent, depth + 1);
            json_string(rt, b, m->k[order[i]]->s, m->k[order[i]]->len, ascii);
            ct_buf_puts(rt, b, key_sep);
            ct_tojson(rt, b, m->v[order[i]], indent, ascii, sort_keys, item_sep, key_sep, depth + 1, undef_to_null);
        }
        if (indent && m->n) pad(rt, b, indent, depth);
        ct_buf_puts(rt, b, "}");
        return;
    }
    default: ct_fail(rt, "cannot convert to JSON: %s", ct_type_name(v));
    }
}

/* ---------------------------------------------------------------- equality and order */

static int same_ref(ct_val a, ct_val b)
{
    if (a.t == V_FUNC || b.t == V_FUNC) return a.t == b.t && a.u.f == b.u.f;
    if ((ct_is_array(a) && ct_is_array(b))) return a.u.a == b.u.a;
    int ma = a.t == V_OBJECT || a.t == V_KWARGS || a.t == V_NS, mb = b.t == V_OBJECT || b.t == V_KWARGS || b.t == V_NS;
    return ma && mb && a.u.m == b.u.m;
}

static int is_composite(ct_val v) { return v.t >= V_ARRAY && v.t <= V_FUNC; }
static int is_number(ct_val v) { return v.t == V_INT || v.t == V_FLOAT; }

int ct_strict_eq(ct_val a, ct_val b)
{
    /* NullValue's value is undefined too: null, undefined and a hole are one value here */
    if (a.t == V_HOLE || a.t == V_NULL) a.t = V_UNDEF;
    if (b.t == V_HOLE || b.t == V_NULL) b.t = V_UNDEF;
    if (is_number(a) && is_number(b)) return a.u.n == b.u.n;
    if (is_composite(a) || is_composite(b)) return same_ref(a, b);
    if (a.t != b.t) return 0;
    switch (a.t) {
    case V_STR: return a.u.s->len == b.u.s->len && !memcmp(a.u.s->s, b.u.s->s, a.u.s->len);
    case V_BOOL: return a.u.b == b.u.b;
    default: return 1; /* null, undefined */
    }
}

/* ToNumber of a string: whitespace trimmed, "" is 0, a decimal or 0x literal or Infinity; else NaN. */
static double js_to_number(const ct_str *s)
{
    size_t a = ct_js_ws_prefix(s->s, s->len), z = s->len - ct_js_ws_suffix(s->s, s->len);
    if (a >= z) return 0;
    char tmp[64];
    if (z - a >= sizeof tmp) return NAN;
    memcpy(tmp, s->s + a, z - a);
    tmp[z - a] = 0;
    const char *t = tmp + (tmp[0] == '+' || tmp[0] == '-');
    if (!strcmp(t, "Infinity")) return tmp[0] == '-' ? -INFINITY : INFINITY;
    for (const char *p = t; *p; p++)
        if (*p == 'n' || *p == 'N' || *p == 'i' || *p == 'I' || ((*p == 'x' || *p == 'X') && t != tmp)) return NAN;
    char *end;
    double v = strtod(tmp, &end);
    return *end ? NAN : v;
}

int ct_loose_eq(ct_rt *rt, ct_val a, ct_val b)
{
    if (a.t == V_HOLE) a.t = V_UNDEF;
    if (b.t == V_HOLE) b.t = V_UNDEF;
    int na = a.t == V_NULL || a.t == V_UNDEF, nb = b.t == V_NULL || b.t == V_UNDEF;
    if (na || nb) return na && nb;
    if (is_composite(a) && is_composite(b)) return same_ref(a, b);
    if (a.t == V_BOOL) return ct_loose_eq(rt, ct_mk_num(a.u.b, 1), b);
    if (b.t == V_BOOL) return ct_loose_eq(rt, a, ct_mk_num(b.u.b, 1));
    if (is_composite(a) || is_composite(b)) {
        if (a.t == V_FUNC || b.t == V_FUNC) return 0;
        /* ToPrimitive: an array as its join(","), a Map as "[object Map]" */
        ct_buf p = {0};
        ct_js_string(rt, &p, is_composite(a) ? a : b);
        ct_val s = ct_buf_val(rt, &p);
        return is_composite(a) ? ct_loose_eq(rt, s, b) : ct_loose_eq(rt, a, s);
    }
    if (is_number(a) && is_number(b)) return a.u.n == b.u.n;
    if (a.t == V_STR && b.t == V_STR) return a.u.s->len == b.u.s->len && !memcmp(a.u.s->s, b.u.s->s, a.u.s->len);
    if (a.t == V_STR) return js_to_number(a.u.s) == b.u.n;
    return a.u.n == js_to_number(b.u.s);
}

static int str_lt_cmp(const ct_str *a, const ct_str *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->s, b->s, n);
    if (c) return c < 0 ? -1 : 1;
    return a->len < b->len ? -1 : a->len > b->len ? 1 : 0;
}

int ct_compare(ct_rt *rt, ct_val a, ct_val b, int case_sensitive)
{
    if (a.t == V_NULL && b.t == V_NULL) return 0;
    if (a.t == V_NULL || b.t == V_NULL) ct_fail(rt, "cannot compare %s with %s", ct_type_name(a), ct_type_name(b));
    if (a.t == V_UNDEF && b.t == V_UNDEF) return 0;
    if (a.t == V_UNDEF || b.t == V_UNDEF) ct_fail(rt, "cannot compare %s with %s", ct_type_name(a), ct_type_name(b));
    int numa = is_number(a) || a.t == V_BOOL, numb = is_number(b) || b.t == V_BOOL;
    if (numa && numb) {
        double x = a.t == V_BOOL ? a.u.b : a.u.n, y = b.t == V_BOOL ? b.u.b : b.u.n;
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.t != b.t) ct_fail(rt, "cannot compare different types: %s and %s", ct_type_name(a), ct_type_name(b));
    if (a.t != V_STR) ct_fail(rt, "cannot compare type: %s", ct_type_name(a));
    if (case_sensitive) return str_lt_cmp(a.u.s, b.u.s);
    ct_val la = ct_mk_str(rt, a.u.s->s, a.u.s->len), lb = ct_mk_str(rt, b.u.s->s, b.u.s->len);
    for (size_t i = 0; i < la.u.s->len; i++)
        if (la.u.s->s[i] >= 'A' && la.u.s->s[i] <= 'Z') la.u.s->s[i] += 32;
    for (size_t i = 0; i < lb.u.s->len; i++)
        if (lb.u.s->s[i] >= 'A' && lb.u.s->s[i] <= 'Z') lb.u.s->s[i] += 32;
    return str_lt_cmp(la.u.s, lb.u.s);
}
