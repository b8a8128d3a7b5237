/* Chat templates: the arena, the API of trident/chat_template.h (compile: ct_lex.c, ct_parse.c;
 * render: ct_eval.c, ct_lib.c, ct_value.c) and tokenizer_config.json. Every quirk follows
 * @huggingface/jinja 0.5.11, since the output must be its output byte for byte. */
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

/* ---------------------------------------------------------------- API */

struct ct_template {
    ct_arena arena;
    ct_nodes body;
};

/* A run's state: its errors into err (never NULL), its arena bounded by CT_MAX_MEMORY; NULL with
 * "out of memory" in err when there is none. */
static ct_rt *rt_new(char *err, size_t errlen)
{
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
    return rt;
}

ct_template *ct_compile(const char *src, char *err, size_t errlen)
{
    char dummy[8];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    ct_rt *rt = rt_new(err, errlen);
    if (!rt) return NULL;
    if (setjmp(rt->fail)) {
        ct_arena_free(&rt->arena);
        free(rt);
        return NULL;
    }
    ct_token *tokens;
    size_t n;
    ct_tokenize(rt, src, &tokens, &n);
    ct_nodes body;
    ct_parse(rt, tokens, n, &body);
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

char *ct_render(const ct_template *t, const cJSON *ctx, const struct tm *now, size_t *len, char *err, size_t errlen)
{
    char dummy[8];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    ct_rt *rt = rt_new(err, errlen);
    if (!rt) return NULL;
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
    if (len) *len = r.u.s->len;
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

cJSON *ct_chat_context(const ct_config *cfg, const cJSON *messages, int add_generation_prompt, const cJSON *tools,
                       const cJSON *kwargs)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToObject(c, "messages", messages ? cJSON_Duplicate(messages, 1) : cJSON_CreateArray());
    cJSON_AddBoolToObject(c, "add_generation_prompt", add_generation_prompt);
    cJSON_AddItemToObject(c, "tools", tools ? cJSON_Duplicate(tools, 1) : cJSON_CreateNull());
    cJSON_AddNullToObject(c, "documents");
    for (int i = 0; i < CT_NSPECIAL; i++)
        if (cfg && cfg->special[i]) cJSON_AddStringToObject(c, ct_special_names[i], cfg->special[i]);
    for (const cJSON *k = cJSON_IsObject(kwargs) ? kwargs->child : NULL; k; k = k->next) { /* {...a, ...kwargs} */
        cJSON *v = cJSON_Duplicate(k, 1);
        if (cJSON_GetObjectItemCaseSensitive(c, k->string)) cJSON_ReplaceItemInObjectCaseSensitive(c, k->string, v);
        else cJSON_AddItemToObject(c, k->string, v);
    }
    return c;
}
