/* Chat templates: the library: filters, tests, string and dict methods, the globals
 * (namespace, raise_exception, range, strftime_now) and calls of macros, as @huggingface/jinja
 * 0.5.11 has them (runtime.ts, utils.ts), each refusing what the reference refuses. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_impl.h"
#include "icu.h"

static ct_val undef(void) { return (ct_val){.t = V_UNDEF}; }
static ct_val str_val(ct_rt *rt, const char *s, size_t n) { return ct_mk_str(rt, s, n); }

/* ---------------------------------------------------------------- strings */

/* toUpperCase/toLowerCase: Unicode's full case mapping, locale-independent (ICU's root). */
static ct_val change_case(ct_rt *rt, const ct_str *s, int upper)
{
    int ascii = 1;
    for (size_t i = 0; i < s->len && ascii; i++) ascii = (unsigned char)s->s[i] < 0x80;
    if (ascii) {
        ct_val v = str_val(rt, s->s, s->len);
        for (size_t i = 0; i < s->len; i++) {
            char *c = &v.u.s->s[i];
            if (upper && *c >= 'a' && *c <= 'z') *c -= 32;
            if (!upper && *c >= 'A' && *c <= 'Z') *c += 32;
        }
        return v;
    }
    UErrorCode e = U_ZERO_ERROR;
    int32_t n16 = 0;
    td_icu()->u_strFromUTF8WithSub(NULL, 0, &n16, s->s, (int32_t)s->len, 0xFFFD, NULL, &e);
    e = U_ZERO_ERROR;
    UChar *a = ct_alloc(&rt->arena, (size_t)(n16 + 1) * sizeof *a);
    td_icu()->u_strFromUTF8WithSub(a, n16 + 1, NULL, s->s, (int32_t)s->len, 0xFFFD, NULL, &e);
    int32_t cap = n16 * 3 + 8;
    UChar *b = ct_alloc(&rt->arena, (size_t)cap * sizeof *b);
    e = U_ZERO_ERROR;
    int32_t m = upper ? td_icu()->u_strToUpper(b, cap, a, n16, "", &e) : td_icu()->u_strToLower(b, cap, a, n16, "", &e);
    if (U_FAILURE(e)) ct_fail(rt, "case mapping failed: %s", td_icu()->u_errorName(e));
    int32_t n8 = 0;
    e = U_ZERO_ERROR;
    td_icu()->u_strToUTF8WithSub(NULL, 0, &n8, b, m, 0xFFFD, NULL, &e);
    char *o = ct_alloc(&rt->arena, (size_t)n8 + 1);
    e = U_ZERO_ERROR;
    td_icu()->u_strToUTF8WithSub(o, n8 + 1, NULL, b, m, 0xFFFD, NULL, &e);
    return str_val(rt, o, (size_t)n8);
}

static int is_word(int c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

/* titleCase: /\b\w/g upper-cased (\w and \b are ASCII in JavaScript). */
static ct_val title(ct_rt *rt, const ct_str *s)
{
    ct_val v = str_val(rt, s->s, s->len);
    char *p = v.u.s->s;
    for (size_t i = 0; i < s->len; i++)
        if (is_word((unsigned char)p[i]) && (i == 0 || !is_word((unsigned char)p[i - 1])) && p[i] >= 'a' && p[i] <= 'z') p[i] -= 32;
    return v;
}

/* charAt(0).toUpperCase() + slice(1): the first UTF-16 unit only; the rest unchanged. */
static ct_val capitalize(ct_rt *rt, const ct_str *s)
{
    if (s->len == 0) return str_val(rt, "", 0);
    unsigned char c = (unsigned char)s->s[0];
    if (c >= 0xF0) { /* a surrogate pair: charAt(0) is its lone high half */
        return str_val(rt, s->s, s->len); /* toUpperCase of a lone surrogate is itself; printed apart it is U+FFFD */
    }
    size_t k = c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (k > s->len) k = s->len;
    ct_str first = {0};
    ct_str *f = ct_alloc(&rt->arena, sizeof first + k + 1);
    f->len = k;
    memcpy(f->s, s->s, k);
    f->s[k] = 0;
    ct_val up = change_case(rt, f, 1);
    ct_buf b = {0};
    ct_buf_put(rt, &b, up.u.s->s, up.u.s->len);
    ct_buf_put(rt, &b, s->s + k, s->len - k);
    return ct_buf_val(rt, &b);
}

static ct_val trim(ct_rt *rt, const ct_str *s, int left, int right)
{
    size_t a = left ? ct_js_ws_prefix(s->s, s->len) : 0;
    size_t z = right ? s->len - ct_js_ws_suffix(s->s + a, s->len - a) : s->len;
    return str_val(rt, s->s + a, z - a);
}

static int starts(const ct_str *s, const ct_str *p) { return p->len <= s->len && !memcmp(s->s, p->s, p->len); }
static int ends(const ct_str *s, const ct_str *p) { return p->len <= s->len && !memcmp(s->s + s->len - p->len, p->s, p->len); }

static const char *find(const char *h, size_t hn, const char *n, size_t nn)
{
    if (nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (!memcmp(h + i, n, nn)) return h + i;
    return NULL;
}

/* utils.ts replace(): count null or negative is every match; "" matches at each code point. */
static ct_val replace(ct_rt *rt, const ct_str *s, const ct_str *old, const ct_str *new, double count, int has_count)
{
    if (has_count && count == 0) return (ct_val){.t = V_STR, .u.s = (ct_str *)s};
    double left = !has_count || count < 0 ? INFINITY : count;
    ct_buf b = {0};
    if (old->len == 0) {
        for (size_t i = 0; i <= s->len;) {
            if (left > 0) ct_buf_put(rt, &b, new->s, new->len), left--;
            if (i == s->len) break;
            size_t j = i + 1;
            while (j < s->len && ((unsigned char)s->s[j] & 0xC0) == 0x80) j++;
            ct_buf_put(rt, &b, s->s + i, j - i);
            i = j;
        }
        return ct_buf_val(rt, &b);
    }
    size_t i = 0;
    const char *hit;
    while ((hit = find(s->s + i, s->len - i, old->s, old->len))) {
        size_t at = (size_t)(hit - s->s);
        ct_buf_put(rt, &b, s->s + i, at - i);
        if (left > 0) ct_buf_put(rt, &b, new->s, new->len), left--;
        else ct_buf_put(rt, &b, old->s, old->len);
        i = at + old->len;
        rt->steps++;
    }
    ct_buf_put(rt, &b, s->s + i, s->len - i);
    return ct_buf_val(rt, &b);
}

static ct_val split(ct_rt *rt, const ct_str *s, ct_val sep, ct_val maxv)
{
    if (sep.t != V_STR && sep.t != V_NULL) ct_fail(rt, "split(): sep argument must be a string or null");
    if (maxv.t != V_INT) ct_fail(rt, "split(): maxsplit argument must be a number");
    double max = maxv.u.n;
    ct_val out = ct_mk_array(rt, V_ARRAY, 0);
    if (sep.t == V_NULL) {
        size_t a = ct_js_ws_prefix(s->s, s->len);
        const char *t = s->s + a;
        size_t n = s->len - a, i = 0;
        while (i < n) {
            size_t w;
            while (i < n && (w = ct_js_ws_prefix(t + i, n - i)) > 0) i += w;
            if (i >= n) break;
            size_t j = i;
            while (j < n && ct_js_ws_prefix(t + j, n - j) == 0) j++;
            if (max != -1 && (double)out.u.a->n >= max) {
                ct_array_push(rt, out.u.a, str_val(rt, t + i, n - i));
                break;
            }
            ct_array_push(rt, out.u.a, str_val(rt, t + i, j - i));
            i = j;
        }
        return out;
    }
    const ct_str *d = sep.u.s;
    if (d->len == 0) ct_fail(rt, "split(): empty separator");
    size_t i = 0;
    const char *hit;
    while ((hit = find(s->s + i, s->len - i, d->s, d->len))) {
        if (max != -1 && (double)out.u.a->n >= max) break;
        ct_array_push(rt, out.u.a, str_val(rt, s->s + i, (size_t)(hit - s->s) - i));
        i = (size_t)(hit - s->s) + d->len;
    }
    ct_array_push(rt, out.u.a, str_val(rt, s->s + i, s->len - i));
    return out;
}

/* ---------------------------------------------------------------- members */

static ct_val method(ct_rt *rt, ct_val self, const char *name)
{
    ct_func *f = ct_alloc(&rt->arena, sizeof *f);
    memset(f, 0, sizeof *f);
    f->kind = F_METHOD;
    f->name = name;
    f->self = self;
    return (ct_val){.t = V_FUNC, .u.f = f};
}

ct_val ct_builtin_member(ct_rt *rt, ct_val obj, const char *name, size_t n)
{
    static const char *const str_methods[] = {"upper", "lower", "strip", "title", "capitalize", "rstrip", "lstrip",
                                              "startswith", "endswith", "split", "replace", NULL};
    static const char *const obj_methods[] = {"get", "items", "keys", "values", "dictsort", NULL};
    if (strlen(name) != n) return undef();
    if (obj.t == V_STR) {
        if (!strcmp(name, "length")) return ct_mk_num((double)ct_utf16_len(obj.u.s->s, obj.u.s->len), 1);
        for (int i = 0; str_methods[i]; i++)
            if (!strcmp(name, str_methods[i])) return method(rt, obj, str_methods[i]);
    } else if (ct_is_array(obj)) {
        if (!strcmp(name, "length")) return ct_mk_num((double)obj.u.a->n, 1);
    } else if (ct_is_object(obj)) {
        for (int i = 0; obj_methods[i]; i++)
            if (!strcmp(name, obj_methods[i])) return method(rt, obj, obj_methods[i]);
    }
    return undef();
}

static ct_val items_of(ct_rt *rt, const ct_map *m)
{
    ct_val out = ct_mk_array(rt, V_ARRAY, m->n);
    for (size_t i = 0; i < m->n; i++) {
        ct_val pair = ct_mk_array(rt, V_ARRAY, 2);
        ct_array_push(rt, pair.u.a, (ct_val){.t = V_STR, .u.s = m->k[i]});
        ct_array_push(rt, pair.u.a, m->v[i]);
        ct_array_push(rt, out.u.a, pair);
    }
    return out;
}

/* Stable merge-free insertion sort with a comparator that may fail (longjmp). */
typedef int (*cmp_fn)(ct_rt *rt, ct_val a, ct_val b, const void *ctx);
static void sort_vals(ct_rt *rt, ct_val *v, size_t n, cmp_fn cmp, const void *ctx)
{
    /* merge sort: stable, n log n (Array.prototype.sort is stable) */
    if (n < 2) return;
    ct_val *tmp = ct_alloc(&rt->arena, n * sizeof *tmp);
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                rt->steps++;
                tmp[k++] = cmp(rt, v[j], v[i], ctx) < 0 ? v[j++] : v[i++];
            }
            while (i < mid) tmp[k++] = v[i++];
            while (j < hi) tmp[k++] = v[j++];
        }
        memcpy(v, tmp, n * sizeof *v);
    }
}

typedef struct {
    int index, case_sensitive, reverse;
    const char *attr;
} sort_ctx;

/* getAttributeValue: a dotted path through objects and (by index) arrays. */
static ct_val attribute(ct_rt *rt, ct_val item, const char *path)
{
    const char *p = path;
    ct_val v = item;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (ct_is_object(v) || v.t == V_NS) {
            ct_val *x = ct_map_get(v.u.m, p, n);
            v = x ? *x : undef();
        } else if (ct_is_array(v)) {
            char tmp[32];
            if (n >= sizeof tmp) return undef();
            memcpy(tmp, p, n);
            tmp[n] = 0;
            char *end;
            long i = strtol(tmp, &end, 10); /* parseInt: a leading integer */
            if (end == tmp || i < 0 || (size_t)i >= v.u.a->n) return undef();
            v = v.u.a->v[i];
        } else {
            return undef();
        }
        if (!dot) return v;
        p = dot + 1;
    }
    (void)rt;
}

static int cmp_sort(ct_rt *rt, ct_val a, ct_val b, const void *c)
{
    const sort_ctx *s = c;
    if (s->attr) a = attribute(rt, a, s->attr), b = attribute(rt, b, s->attr);
    if (s->index >= 0) a = a.u.a->v[s->index], b = b.u.a->v[s->index];
    int r = ct_compare(rt, a, b, s->case_sensitive);
    return s->reverse ? -r : r;
}

static ct_val kwarg(const ct_map *kw, const char *name)
{
    ct_val *v = kw ? ct_map_get(kw, name, strlen(name)) : NULL;
    return v ? *v : (ct_val){.t = V_HOLE};
}

/* args[i] ?? kwargs[name] ?? dflt */
static ct_val arg_or(const ct_array *pos, size_t i, const ct_map *kw, const char *name, ct_val dflt)
{
    if (pos && i < pos->n) return pos->v[i];
    ct_val v = kwarg(kw, name);
    return v.t == V_HOLE ? dflt : v;
}

static ct_val dictsort(ct_rt *rt, const ct_map *m, ct_array *args)
{
    ct_map *kw = NULL;
    ct_array pos = {0};
    ct_val posv[8];
    pos.v = posv;
    for (size_t i = 0; i < args->n; i++) {
        if (args->v[i].t == V_KWARGS) kw = args->v[i].u.m;
        else if (pos.n < 8) pos.v[pos.n++] = args->v[i];
    }
    ct_val cs = arg_or(&pos, 0, kw, "case_sensitive", ct_mk_bool(0));
    if (cs.t != V_BOOL) ct_fail(rt, "dictsort: case_sensitive must be a boolean");
    ct_val by = arg_or(&pos, 1, kw, "by", (ct_val){.t = V_NULL});
    int by_value = 0;
    if (by.t != V_NULL) {
        if (by.t != V_STR) ct_fail(rt, "dictsort: by must be a string");
        if (strcmp(by.u.s->s, "key") && strcmp(by.u.s->s, "value")) ct_fail(rt, "dictsort: by must be either 'key' or 'value'");
        by_value = !strcmp(by.u.s->s, "value");
    }
    ct_val rev = arg_or(&pos, 2, kw, "reverse", ct_mk_bool(0));
    if (rev.t != V_BOOL) ct_fail(rt, "dictsort: reverse must be a boolean");
    ct_val out = items_of(rt, m);
    sort_ctx c = {by_value, cs.u.b, rev.u.b, NULL};
    sort_vals(rt, out.u.a->v, out.u.a->n, cmp_sort, &c);
    return out;
}

static ct_val call_method(ct_rt *rt, const ct_func *f, ct_array *args)
{
    const char *name = f->name;
    ct_val self = f->self;
    size_t n = args->n;
    if (self.t == V_STR) {
        const ct_str *s = self.u.s;
        if (!strcmp(name, "upper")) return change_case(rt, s, 1);
        if (!strcmp(name, "lower")) return change_case(rt, s, 0);
        if (!strcmp(name, "strip")) return trim(rt, s, 1, 1);
        if (!strcmp(name, "lstrip")) return trim(rt, s, 1, 0);
        if (!strcmp(name, "rstrip")) return trim(rt, s, 0, 1);
        if (!strcmp(name, "title")) return title(rt, s);
        if (!strcmp(name, "capitalize")) return capitalize(rt, s);
        if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
            int st = name[0] == 's';
            if (n == 0) ct_fail(rt, "%s() requires at least one argument", name);
            ct_val p = args->v[0];
            if (p.t == V_STR) return ct_mk_bool(st ? starts(s, p.u.s) : ends(s, p.u.s));
            if (ct_is_array(p)) {
                for (size_t i = 0; i < p.u.a->n; i++) {
                    if (p.u.a->v[i].t != V_STR) ct_fail(rt, "%s() tuple elements must be strings", name);
                    if (st ? starts(s, p.u.a->v[i].u.s) : ends(s, p.u.a->v[i].u.s)) return ct_mk_bool(1);
                }
                return ct_mk_bool(0);
            }
            ct_fail(rt, "%s() argument must be a string or tuple of strings", name);
        }
        if (!strcmp(name, "split"))
            return split(rt, s, n > 0 ? args->v[0] : (ct_val){.t = V_NULL}, n > 1 ? args->v[1] : ct_mk_num(-1, 1));
        if (!strcmp(name, "replace")) {
            if (n < 2) ct_fail(rt, "replace() requires at least two arguments");
            if (args->v[0].t != V_STR || args->v[1].t != V_STR) ct_fail(rt, "replace() arguments must be strings");
            ct_val count = {.t = V_NULL};
            if (n > 2) {
                if (args->v[2].t == V_KWARGS) {
                    ct_val c = kwarg(args->v[2].u.m, "count");
                    count = c.t == V_HOLE ? (ct_val){.t = V_NULL} : c;
                } else {
                    count = args->v[2];
                }
            }
            if (count.t != V_INT && count.t != V_NULL) ct_fail(rt, "replace() count argument must be a number or null");
            return replace(rt, s, args->v[0].u.s, args->v[1].u.s, count.t == V_INT ? count.u.n : 0, count.t == V_INT);
        }
    } else if (ct_is_object(self)) {
        const ct_map *m = self.u.m;
        if (!strcmp(name, "get")) {
            ct_val key = n > 0 ? args->v[0] : (ct_val){.t = V_HOLE};
            if (key.t != V_STR) ct_fail(rt, "object key must be a string: got %s", ct_type_name(key));
            ct_val *v = ct_map_get(m, key.u.s->s, key.u.s->len);
            if (v) return *v;
            return n > 1 ? args->v[1] : (ct_val){.t = V_NULL};
        }
        if (!strcmp(name, "items")) return items_of(rt, m);
        if (!strcmp(name, "keys") || !strcmp(name, "values")) {
            ct_val out = ct_mk_array(rt, V_ARRAY, m->n);
            for (size_t i = 0; i < m->n; i++)
                ct_array_push(rt, out.u.a, name[0] == 'k' ? (ct_val){.t = V_STR, .u.s = m->k[i]} : m->v[i]);
            return out;
        }
        if (!strcmp(name, "dictsort")) return dictsort(rt, m, args);
    }
    ct_fail(rt, "unknown method %s", name);
}

/* ---------------------------------------------------------------- globals */

static double parse_num(const ct_str *s, int integer, int *ok);

/* Number(value.value): what arithmetic and comparisons make of a raw JavaScript value. */
static double js_number(ct_val v)
{
    switch (v.t) {
    case V_INT:
    case V_FLOAT: return v.u.n;
    case V_BOOL: return v.u.b;
    case V_NULL: return 0;
    case V_STR: {
        int ok;
        size_t a = ct_js_ws_prefix(v.u.s->s, v.u.s->len);
        if (a == v.u.s->len) return 0;
        double d = parse_num(v.u.s, 0, &ok);
        /* the whole string must be the number (parseFloat takes a prefix) */
        char tmp[64];
        size_t z = v.u.s->len - ct_js_ws_suffix(v.u.s->s, v.u.s->len);
        if (!ok || z - a >= sizeof tmp) return NAN;
        memcpy(tmp, v.u.s->s + a, z - a);
        tmp[z - a] = 0;
        char *end;
        double e = strtod(tmp, &end);
        return *end || strpbrk(tmp, "xXnNiI") ? (strcmp(tmp, "Infinity") ? NAN : d) : e;
    }
    default: return NAN;
    }
}

static const char *const MONTHS[] = {"January", "February", "March", "April", "May", "June", "July",
                                     "August", "September", "October", "November", "December"};

static ct_val strftime_now(ct_rt *rt, const ct_str *fmt)
{
    ct_buf b = {0};
    const struct tm *t = &rt->now;
    char tmp[32];
    for (size_t i = 0; i < fmt->len; i++) {
        char c = i + 1 < fmt->len ? fmt->s[i + 1] : 0;
        if (fmt->s[i] != '%' || !strchr("YmdbBHM%", c) || !c) {
            ct_buf_put(rt, &b, fmt->s + i, 1);
            continue;
        }
        i++;
        switch (c) {
        case 'Y': snprintf(tmp, sizeof tmp, "%d", t->tm_year + 1900); break;
        case 'm': snprintf(tmp, sizeof tmp, "%02d", t->tm_mon + 1); break;
        case 'd': snprintf(tmp, sizeof tmp, "%02d", t->tm_mday); break;
        case 'b': snprintf(tmp, sizeof tmp, "%.3s", MONTHS[t->tm_mon % 12]); break;
        case 'B': snprintf(tmp, sizeof tmp, "%s", MONTHS[t->tm_mon % 12]); break;
        case 'H': snprintf(tmp, sizeof tmp, "%02d", t->tm_hour); break;
        case 'M': snprintf(tmp, sizeof tmp, "%02d", t->tm_min); break;
        default: strcpy(tmp, "%");
        }
        ct_buf_puts(rt, &b, tmp);
    }
    return ct_buf_val(rt, &b);
}

static ct_val call_global(ct_rt *rt, const char *name, ct_array *args)
{
    if (!strcmp(name, "raise_exception")) {
        ct_buf b = {0}; /* new Error(value): undefined (and NullValue's value) gives "" */
        if (args->n > 0) ct_js_string(rt, &b, args->v[0]);
        ct_fail(rt, "raise_exception: %s", b.p ? b.p : "");
    }
    if (!strcmp(name, "range")) { /* utils.ts range() on the arguments' JavaScript values */
        double a[3];
        int string_step = args->n > 2 && args->v[2].t == V_STR;
        for (size_t i = 0; i < 3; i++) a[i] = i < args->n ? js_number(args->v[i]) : NAN;
        int has_stop = args->n > 1 && args->v[1].t != V_UNDEF;
        double start = a[0], stop = a[1], step = args->n > 2 && args->v[2].t != V_UNDEF ? a[2] : 1;
        if (!has_stop) stop = start, start = 0;
        if (step == 0 && !string_step) ct_fail(rt, "range() step must not be zero");
        ct_val out = ct_mk_array(rt, V_ARRAY, 0);
        for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (++rt->steps > CT_MAX_STEPS) ct_fail(rt, "the template ran more than %ld steps", CT_MAX_STEPS);
            ct_array_push(rt, out.u.a, ct_mk_num(i, i == floor(i)));
            if (string_step) break; /* i += "..." makes i a string: approximated as the end */
        }
        return out;
    }
    if (!strcmp(name, "strftime_now")) {
        if (args->n == 0 || args->v[0].t != V_STR) ct_fail(rt, "strftime_now() needs a format string");
        return strftime_now(rt, args->v[0].u.s);
    }
    /* namespace */
    size_t npos = args->n;
    const ct_map *kw = NULL;
    if (npos && args->v[npos - 1].t == V_KWARGS) kw = args->v[--npos].u.m;
    if (npos > 1) ct_fail(rt, "namespace expected at most 1 argument, got %zu", npos);
    ct_val ns = ct_mk_map(rt, V_NS);
    if (npos == 1) {
        ct_val src = args->v[0];
        if (ct_is_object(src)) {
            for (size_t i = 0; i < src.u.m->n; i++) ct_map_set(rt, ns.u.m, src.u.m->k[i]->s, src.u.m->k[i]->len, src.u.m->v[i]);
        } else if (ct_is_array(src)) {
            for (size_t i = 0; i < src.u.a->n; i++) {
                ct_val pair = src.u.a->v[i];
                if (!ct_is_array(pair) || pair.u.a->n != 2) ct_fail(rt, "namespace expected an object or an iterable of [key, value] pairs");
                if (pair.u.a->v[0].t != V_STR) ct_fail(rt, "namespace keys must be strings");
                ct_map_set(rt, ns.u.m, pair.u.a->v[0].u.s->s, pair.u.a->v[0].u.s->len, pair.u.a->v[1]);
            }
        } else {
            ct_fail(rt, "'%s' object is not iterable", ct_type_name(src));
        }
    }
    for (size_t i = 0; kw && i < kw->n; i++) ct_map_set(rt, ns.u.m, kw->k[i]->s, kw->k[i]->len, kw->v[i]);
    return ns;
}

ct_val ct_call_func(ct_rt *rt, ct_val fn, ct_array *args, ct_env *env)
{
    ct_func *f = fn.u.f;
    switch (f->kind) {
    case F_GLOBAL: return call_global(rt, f->name, args);
    case F_METHOD: return call_method(rt, f, args);
    case F_MACRO:
    case F_CALLER: {
        if (++rt->calls > CT_MAX_CALLS) ct_fail(rt, "the template's macro calls nest deeper than %d", CT_MAX_CALLS);
        ct_env *scope = ct_env_new(rt, f->kind == F_MACRO ? env : f->env);
        if (f->kind == F_MACRO) {
            ct_val name = ct_mk_str(rt, "'", 1);
            ct_buf b = {0};
            ct_buf_put(rt, &b, name.u.s->s, 1);
            ct_buf_puts(rt, &b, f->name);
            ct_buf_puts(rt, &b, "'");
            ct_bind_macro_args(rt, b.p, &f->node->args, f->node->uses_kwargs, f->node->uses_varargs, args, scope);
        } else {
            ct_bind_macro_args(rt, "None", &f->node->alt, f->node->uses_kwargs, f->node->uses_varargs, args, scope);
        }
        ct_val v = ct_eval_block(rt, &f->node->body, scope);
        rt->calls--;
        return v;
    }
    }
    ct_fail(rt, "bad function");
}

/* ---------------------------------------------------------------- tests */

static const char *const TEST_NAMES[] = {"boolean", "callable", "odd", "even", "false", "true", "none", "string",
                                         "number", "integer", "iterable", "mapping", "sequence", "lower", "upper",
                                         "defined", "undefined", "equalto", "eq", NULL};

int ct_run_test(ct_rt *rt, const char *name, ct_val a, const ct_val *b)
{
    if (a.t == V_HOLE) { /* the reference's instanceof tests say no; the others read .type and throw */
        static const char *const instanceof_tests[] = {"callable", "number", "integer", "mapping", "sequence", NULL};
        int known = 0;
        for (const char *const *t = TEST_NAMES; *t; t++) known |= !strcmp(*t, name);
        if (!known) ct_fail(rt, "unknown test: %s", name);
        for (const char *const *t = instanceof_tests; *t; t++)
            if (!strcmp(*t, name)) return 0;
        ct_check_value(rt, a);
    }
    if (!strcmp(name, "boolean")) return a.t == V_BOOL;
    if (!strcmp(name, "callable")) return a.t == V_FUNC;
    if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (a.t != V_INT) ct_fail(rt, "cannot %s on %s", name, ct_type_name(a));
        int odd = fmod(a.u.n, 2) != 0;
        return name[0] == 'o' ? odd : !odd;
    }
    if (!strcmp(name, "false")) return a.t == V_BOOL && !a.u.b;
    if (!strcmp(name, "true")) return a.t == V_BOOL && a.u.b;
    if (!strcmp(name, "none")) return a.t == V_NULL;
    if (!strcmp(name, "string")) return a.t == V_STR;
    if (!strcmp(name, "number")) return a.t == V_INT || a.t == V_FLOAT;
    if (!strcmp(name, "integer")) return a.t == V_INT;
    if (!strcmp(name, "iterable")) return a.t == V_ARRAY || a.t == V_STR;
    if (!strcmp(name, "mapping")) return ct_is_object(a);
    if (!strcmp(name, "sequence")) return ct_is_array(a) || ct_is_object(a) || a.t == V_STR;
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        if (a.t != V_STR) return 0;
        ct_val c = change_case(rt, a.u.s, name[0] == 'u');
        return c.u.s->len == a.u.s->len && !memcmp(c.u.s->s, a.u.s->s, a.u.s->len);
    }
    if (!strcmp(name, "defined")) return a.t != V_UNDEF;
    if (!strcmp(name, "undefined")) return a.t == V_UNDEF;
    if (!strcmp(name, "equalto") || !strcmp(name, "eq")) {
        if (!b || b->t == V_HOLE) ct_fail(rt, "the test %s needs a value to compare with", name);
        return ct_strict_eq(a, *b);
    }
    ct_fail(rt, "unknown test: %s", name);
}

/* ---------------------------------------------------------------- filters */

/* parseInt(s, 10) / parseFloat(s): NaN as *ok = 0. */
static double parse_num(const ct_str *s, int integer, int *ok)
{
    size_t i = ct_js_ws_prefix(s->s, s->len);
    const char *p = s->s + i;
    size_t n = s->len - i, k = 0;
    char tmp[400];
    if (k < n && (p[k] == '+' || p[k] == '-')) k++;
    if (!integer && n - k >= 8 && !memcmp(p + k, "Infinity", 8)) {
        *ok = 1;
        return p[0] == '-' ? -INFINITY : INFINITY;
    }
    size_t d0 = k;
    while (k < n && p[k] >= '0' && p[k] <= '9') k++;
    size_t nd = k - d0;
    if (!integer) {
        if (k < n && p[k] == '.') {
            size_t f = ++k;
            while (k < n && p[k] >= '0' && p[k] <= '9') k++;
            nd += k - f;
            if (k - f == 0 && nd == 0) k--;
        }
        if (nd && k < n && (p[k] == 'e' || p[k] == 'E')) {
            size_t e = k + 1;
            if (e < n && (p[e] == '+' || p[e] == '-')) e++;
            size_t e0 = e;
            while (e < n && p[e] >= '0' && p[e] <= '9') e++;
            if (e > e0) k = e;
        }
    }
    *ok = nd > 0;
    if (!nd) return NAN;
    if (k >= sizeof tmp) k = sizeof tmp - 1;
    memcpy(tmp, p, k);
    tmp[k] = 0;
    return integer ? trunc(strtod(tmp, NULL)) : strtod(tmp, NULL);
}

static ct_val indent_lines(ct_rt *rt, const ct_str *s, long width, int first, int blank)
{
    ct_buf b = {0};
    size_t i = 0;
    for (size_t line = 0;; line++) {
        const char *nl = memchr(s->s + i, '\n', s->len - i);
        size_t end = nl ? (size_t)(nl - s->s) : s->len;
        if (line) ct_buf_puts(rt, &b, "\n");
        if (!((!first && line == 0) || (!blank && end == i)))
            for (long w = 0; w < width; w++) ct_buf_puts(rt, &b, " ");
        ct_buf_put(rt, &b, s->s + i, end - i);
        if (!nl) break;
        i = end + 1;
    }
    return ct_buf_val(rt, &b);
}

static ct_val join(ct_rt *rt, ct_val operand, const ct_str *sep)
{
    ct_buf b = {0};
    if (operand.t == V_STR) { /* Array.from(string): code points */
        const ct_str *s = operand.u.s;
        for (size_t i = 0; i < s->len;) {
            size_t j = i + 1;
            while (j < s->len && ((unsigned char)s->s[j] & 0xC0) == 0x80) j++;
            if (i) ct_buf_put(rt, &b, sep->s, sep->len);
            ct_buf_put(rt, &b, s->s + i, j - i);
            i = j;
        }
    } else {
        for (size_t i = 0; i < operand.u.a->n; i++) {
            if (i) ct_buf_put(rt, &b, sep->s, sep->len);
            ct_check_value(rt, operand.u.a->v[i]); /* x.value of undefined throws there */
            ct_js_string(rt, &b, operand.u.a->v[i]);
        }
    }
    return ct_buf_val(rt, &b);
}

static ct_val array_filter(ct_rt *rt, ct_val op, const char *f)
{
    const ct_array *a = op.u.a;
    if (!strcmp(f, "list")) return op;
    if (!strcmp(f, "first")) return a->n ? a->v[0] : (ct_val){.t = V_HOLE};
    if (!strcmp(f, "last")) return a->n ? a->v[a->n - 1] : (ct_val){.t = V_HOLE};
    if (!strcmp(f, "length")) return ct_mk_num((double)a->n, 1);
    if (!strcmp(f, "reverse") || !strcmp(f, "sort")) {
        ct_val out = ct_mk_array(rt, V_ARRAY, a->n);
        for (size_t i = 0; i < a->n; i++) ct_array_push(rt, out.u.a, a->v[f[0] == 'r' ? a->n - 1 - i : i]);
        sort_ctx c = {-1, 0, 0, NULL};
        if (f[0] == 's') sort_vals(rt, out.u.a->v, out.u.a->n, cmp_sort, &c);
        return out;
    }
    if (!strcmp(f, "join")) return join(rt, op, &(ct_str){0});
    if (!strcmp(f, "string")) {
        ct_buf b = {0};
        ct_tojson(rt, &b, op, 0, 0, 0, NULL, NULL, 0, 0);
        return ct_buf_val(rt, &b);
    }
    if (!strcmp(f, "unique")) {
        ct_val out = ct_mk_array(rt, V_ARRAY, 0);
        for (size_t i = 0; i < a->n; i++) {
            ct_check_value(rt, a->v[i]); /* item.value of undefined throws there */
            int seen = 0;
            for (size_t j = 0; j < out.u.a->n && !seen; j++) {
                ct_val x = out.u.a->v[j], y = a->v[i];
                /* Set semantics on .value: NaN equals NaN */
                seen = ct_strict_eq(x, y) || ((x.t == V_INT || x.t == V_FLOAT) && (y.t == V_INT || y.t == V_FLOAT) && isnan(x.u.n) && isnan(y.u.n));
            }
            rt->steps += (long)out.u.a->n;
            if (!seen) ct_array_push(rt, out.u.a, a->v[i]);
        }
        return out;
    }
    ct_fail(rt, "unknown ArrayValue filter: %s", f);
}

static ct_val ident_filter(ct_rt *rt, ct_val op, const char *f)
{
    if (ct_is_array(op)) return array_filter(rt, op, f);
    if (op.t == V_STR) {
        const ct_str *s = op.u.s;
        if (!strcmp(f, "length")) return ct_mk_num((double)ct_utf16_len(s->s, s->len), 1);
        if (!strcmp(f, "upper")) return change_case(rt, s, 1);
        if (!strcmp(f, "lower")) return change_case(rt, s, 0);
        if (!strcmp(f, "title")) return title(rt, s);
        if (!strcmp(f, "capitalize")) return capitalize(rt, s);
        if (!strcmp(f, "trim")) return trim(rt, s, 1, 1);
        if (!strcmp(f, "indent")) return indent_lines(rt, s, 4, 0, 0);
        if (!strcmp(f, "join") || !strcmp(f, "string")) return op;
        if (!strcmp(f, "int") || !strcmp(f, "float")) {
            int ok;
            double v = parse_num(s, f[0] == 'i', &ok);
            return ct_mk_num(ok ? v : 0, f[0] == 'i');
        }
        ct_fail(rt, "unknown StringValue filter: %s", f);
    }
    if (op.t == V_INT || op.t == V_FLOAT) {
        if (!strcmp(f, "abs")) return ct_mk_num(fabs(op.u.n), op.t == V_INT);
        if (!strcmp(f, "int")) return ct_mk_num(floor(op.u.n), 1);
        if (!strcmp(f, "float")) return ct_mk_num(op.u.n, 0);
        if (!strcmp(f, "string")) {
            ct_buf b = {0};
            ct_to_string(rt, &b, op);
            return ct_buf_val(rt, &b);
        }
        ct_fail(rt, "unknown NumericValue filter: %s", f);
    }
    if (ct_is_object(op)) {
        if (!strcmp(f, "items")) return items_of(rt, op.u.m);
        if (!strcmp(f, "length")) return ct_mk_num((double)op.u.m->n, 1);
        ct_val m = ct_builtin_member(rt, op, f, strlen(f));
        if (m.t == V_FUNC) return call_method(rt, m.u.f, ct_mk_array(rt, V_ARRAY, 0).u.a);
        ct_fail(rt, "unknown ObjectValue filter: %s", f);
    }
    if (op.t == V_BOOL) {
        if (!strcmp(f, "bool")) return op;
        if (!strcmp(f, "int")) return ct_mk_num(op.u.b, 1);
        if (!strcmp(f, "float")) return ct_mk_num(op.u.b, 0);
        if (!strcmp(f, "string")) return ct_mk_cstr(rt, op.u.b ? "true" : "false");
        ct_fail(rt, "unknown BooleanValue filter: %s", f);
    }
    ct_fail(rt, "cannot apply filter \"%s\" to type: %s", f, ct_type_name(op));
}

static ct_val tojson_call(ct_rt *rt, ct_val op, const ct_map *kw)
{
    ct_val indent = kwarg(kw, "indent"), ascii = kwarg(kw, "ensure_ascii"), sortk = kwarg(kw, "sort_keys"), seps = kwarg(kw, "separators");
    if (indent.t == V_HOLE) indent.t = V_NULL;
    if (indent.t != V_INT && indent.t != V_NULL) ct_fail(rt, "tojson: if set, indent must be a number");
    if (ascii.t == V_HOLE) ascii = ct_mk_bool(0);
    if (ascii.t != V_BOOL) ct_fail(rt, "tojson: if set, ensure_ascii must be a boolean");
    if (sortk.t == V_HOLE) sortk = ct_mk_bool(0);
    if (sortk.t != V_BOOL) ct_fail(rt, "tojson: if set, sort_keys must be a boolean");
    const char *item = NULL, *key = NULL;
    if (ct_is_array(seps)) {
        if (seps.u.a->n != 2 || seps.u.a->v[0].t != V_STR || seps.u.a->v[1].t != V_STR)
            ct_fail(rt, "tojson: separators must be a tuple of two strings");
        item = seps.u.a->v[0].u.s->s;
        key = seps.u.a->v[1].u.s->s;
    } else if (seps.t != V_HOLE && seps.t != V_NULL) {
        ct_fail(rt, "tojson: if set, separators must be a tuple of two strings");
    }
    long ind = indent.t == V_INT ? (long)indent.u.n : 0;
    if (ind > 1000 || ind < 0) ind = ind < 0 ? 0 : 1000; /* " ".repeat(negative) throws; huge pads are a hostile template */
    ct_buf b = {0};
    ct_tojson(rt, &b, op, (int)ind, ascii.u.b, sortk.u.b, item, key, 0, 1);
    return ct_buf_val(rt, &b);
}

static ct_val call_filter(ct_rt *rt, ct_val op, const ct_node *call, ct_env *env)
{
    if (call->a->type != N_IDENT) ct_fail(rt, "unknown filter");
    const char *f = call->a->s;
    ct_array *args;
    ct_map *kw;
    if (!strcmp(f, "selectattr") || !strcmp(f, "rejectattr")) {
        if (!ct_is_array(op)) ct_fail(rt, "cannot apply filter \"%s\" to type: %s", f, ct_type_name(op));
        int select = f[0] == 's';
        for (size_t i = 0; i < op.u.a->n; i++)
            if (!ct_is_object(op.u.a->v[i]) && op.u.a->v[i].t != V_NS) ct_fail(rt, "`%s` can only be applied to array of objects", f);
        for (size_t i = 0; i < call->args.n; i++)
            if (call->args.v[i]->type != N_STR) ct_fail(rt, "arguments of `%s` must be strings", f);
        if (call->args.n == 0) ct_fail(rt, "`%s` needs an attribute name", f);
        const ct_str *attr = call->args.v[0]->str;
        const char *test = call->args.n > 1 ? call->args.v[1]->str->s : NULL;
        ct_val value = call->args.n > 2 ? (ct_val){.t = V_STR, .u.s = call->args.v[2]->str} : (ct_val){.t = V_HOLE};
        ct_val out = ct_mk_array(rt, V_ARRAY, 0);
        for (size_t i = 0; i < op.u.a->n; i++) {
            ct_val *a = ct_map_get(op.u.a->v[i].u.m, attr->s, attr->len);
            if (a && a->t == V_HOLE) a = NULL; /* `a ? ... : false` of a JavaScript undefined */
            int r = a ? (test ? ct_run_test(rt, test, *a, &value) : ct_truthy(*a)) : 0;
            if (select ? r : !r) ct_array_push(rt, out.u.a, op.u.a->v[i]);
        }
        return out;
    }
    ct_eval_args(rt, &call->args, env, &args, &kw);
    if (!strcmp(f, "tojson")) return tojson_call(rt, op, kw);
    if (!strcmp(f, "join")) {
        if (op.t != V_STR && !ct_is_array(op)) ct_fail(rt, "cannot apply filter \"join\" to type: %s", ct_type_name(op));
        ct_val sep = arg_or(args, 0, kw, "separator", ct_mk_cstr(rt, ""));
        if (sep.t != V_STR) ct_fail(rt, "join: separator must be a string");
        return join(rt, op, sep.u.s);
    }
    if (!strcmp(f, "int") || !strcmp(f, "float")) {
        int integer = f[0] == 'i';
        ct_val dflt = arg_or(args, 0, kw, "default", ct_mk_num(0, integer));
        if (op.t == V_STR) {
            int ok;
            double v = parse_num(op.u.s, integer, &ok);
            return ok ? ct_mk_num(v, integer) : dflt;
        }
        if (op.t == V_INT || op.t == V_FLOAT) return op;
        if (op.t == V_BOOL) return ct_mk_num(op.u.b, integer);
        ct_fail(rt, "cannot apply filter \"%s\" to type: %s", f, ct_type_name(op));
    }
    if (!strcmp(f, "default")) {
        ct_val dflt = args->n > 0 ? args->v[0] : ct_mk_cstr(rt, "");
        ct_val boolean = arg_or(args, 1, kw, "boolean", ct_mk_bool(0));
        if (boolean.t != V_BOOL) ct_fail(rt, "`default` filter flag must be a boolean");
        if (op.t == V_UNDEF || (boolean.u.b && !ct_truthy(op))) return dflt;
        return op;
    }
    if (ct_is_array(op)) {
        if (!strcmp(f, "sort")) {
            ct_val rev = arg_or(args, 0, kw, "reverse", ct_mk_bool(0));
            if (rev.t != V_BOOL) ct_fail(rt, "sort: reverse must be a boolean");
            ct_val cs = arg_or(args, 1, kw, "case_sensitive", ct_mk_bool(0));
            if (cs.t != V_BOOL) ct_fail(rt, "sort: case_sensitive must be a boolean");
            ct_val attr = arg_or(args, 2, kw, "attribute", (ct_val){.t = V_NULL});
            if (attr.t != V_STR && attr.t != V_INT && attr.t != V_NULL) ct_fail(rt, "sort: attribute must be a string, integer, or null");
            char num[64];
            const char *path = NULL;
            if (attr.t == V_STR) path = attr.u.s->s;
            else if (attr.t == V_INT) ct_num_js(num, attr.u.n), path = num;
            ct_val out = ct_mk_array(rt, V_ARRAY, op.u.a->n);
            for (size_t i = 0; i < op.u.a->n; i++) ct_array_push(rt, out.u.a, op.u.a->v[i]);
            sort_ctx c = {-1, cs.u.b, rev.u.b, path};
            sort_vals(rt, out.u.a->v, out.u.a->n, cmp_sort, &c);
            return out;
        }
        if (!strcmp(f, "map")) {
            ct_val attr = kwarg(kw, "attribute");
            if (attr.t == V_HOLE) ct_fail(rt, "`map` expressions without `attribute` set are not currently supported");
            if (attr.t != V_STR) ct_fail(rt, "map: attribute must be a string");
            ct_val dflt = kwarg(kw, "default");
            ct_val out = ct_mk_array(rt, V_ARRAY, op.u.a->n);
            for (size_t i = 0; i < op.u.a->n; i++) {
                ct_val it = op.u.a->v[i];
                if (!ct_is_object(it) && it.t != V_NS) ct_fail(rt, "items in map must be an object");
                ct_val v = attribute(rt, it, attr.u.s->s);
                ct_array_push(rt, out.u.a, v.t == V_UNDEF && dflt.t != V_HOLE ? dflt : v);
            }
            return out;
        }
        ct_fail(rt, "unknown ArrayValue filter: %s", f);
    }
    if (op.t == V_STR) {
        if (!strcmp(f, "indent")) {
            ct_val width = arg_or(args, 0, kw, "width", ct_mk_num(4, 1));
            if (width.t != V_INT) ct_fail(rt, "indent: width must be a number");
            ct_val first = arg_or(args, 1, kw, "first", ct_mk_bool(0)), blank = arg_or(args, 2, kw, "blank", ct_mk_bool(0));
            long w = width.u.n < 0 ? 0 : width.u.n > 10000 ? 10000 : (long)width.u.n;
            return indent_lines(rt, op.u.s, w, ct_truthy(first), ct_truthy(blank));
        }
        if (!strcmp(f, "replace")) {
            ct_array *all = ct_mk_array(rt, V_ARRAY, args->n + 1).u.a;
            for (size_t i = 0; i < args->n; i++) ct_array_push(rt, all, args->v[i]);
            ct_array_push(rt, all, (ct_val){.t = V_KWARGS, .u.m = kw});
            ct_func m = {.kind = F_METHOD, .name = "replace", .self = op};
            return call_method(rt, &m, all);
        }
        ct_fail(rt, "unknown StringValue filter: %s", f);
    }
    if (ct_is_object(op)) {
        ct_val m = ct_builtin_member(rt, op, f, strlen(f));
        if (m.t != V_FUNC) ct_fail(rt, "unknown ObjectValue filter: %s", f);
        if (kw->n) ct_array_push(rt, args, (ct_val){.t = V_KWARGS, .u.m = kw});
        return call_method(rt, m.u.f, args);
    }
    ct_fail(rt, "cannot apply filter \"%s\" to type: %s", f, ct_type_name(op));
}

ct_val ct_apply_filter(ct_rt *rt, ct_val operand, const ct_node *filter, ct_env *env)
{
    if (filter->type == N_IDENT) {
        if (!strcmp(filter->s, "safe")) return operand;
        ct_check_value(rt, operand);
        if (!strcmp(filter->s, "tojson")) {
            ct_buf b = {0};
            ct_tojson(rt, &b, operand, 0, 0, 0, NULL, NULL, 0, 1);
            return ct_buf_val(rt, &b);
        }
        return ident_filter(rt, operand, filter->s);
    }
    if (operand.t == V_HOLE && filter->type == N_CALL && filter->a->type == N_IDENT && !strcmp(filter->a->s, "default")) {
        /* default(): `operand instanceof UndefinedValue` is false; only its boolean flag reads the value */
        ct_array *args;
        ct_map *kw;
        ct_eval_args(rt, &filter->args, env, &args, &kw);
        ct_val boolean = arg_or(args, 1, kw, "boolean", ct_mk_bool(0));
        if (boolean.t != V_BOOL) ct_fail(rt, "`default` filter flag must be a boolean");
        if (boolean.u.b) ct_check_value(rt, operand);
        return operand;
    }
    ct_check_value(rt, operand);
    if (filter->type == N_CALL) return call_filter(rt, operand, filter, env);
    ct_fail(rt, "unknown filter");
}
