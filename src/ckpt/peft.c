/* LoRA adapters in PEFT's format: see include/ckpt/trident/peft.h and docs/finetune.md. */
#include "trident/peft.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ckpt_fs.h"
#include "ckpt_impl.h"
#include "trident/checkpoint.h"
#include "trident/gpt.h"
#include "trident/check.h"
#include "trident/half.h"
#include "trident/hf.h"
#include "trident/safetensors.h"

#define FAIL(...)                                                                        \
    do {                                                                                 \
        snprintf(err, errlen, __VA_ARGS__);                                              \
        goto fail;                                                                       \
    } while (0)

#define PREFIX "base_model.model."

/* A field of adapter_config.json that must be absent, null, false or empty for a plain delta. */
static int field_unset(const cJSON *o, const char *key)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j || cJSON_IsNull(j) || cJSON_IsFalse(j)) return 1;
    if ((cJSON_IsObject(j) || cJSON_IsArray(j)) && cJSON_GetArraySize(j) == 0) return 1;
    return 0;
}

int peft_read_config(const char *dir, peft_lora_config *c, char *err, size_t errlen)
{
    char path[4200];
    ckf_join(path, sizeof path, dir, "adapter_config.json");
    memset(c, 0, sizeof *c);
    c->lora_alpha = 8.0;
    size_t len;
    char *text = ckf_read_text(path, &len, 1 << 24);
    cJSON *o = NULL;
    if (!text) FAIL("cannot read %s: %s (a PEFT adapter folder holds adapter_config.json)", path, td_strerror(errno));
    o = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsObject(o)) FAIL("%s is not a JSON object", path);
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, "peft_type");
    if (!cJSON_IsString(j) || strcmp(j->valuestring, "LORA") != 0)
        FAIL("%s: peft_type is %s, not \"LORA\": only LoRA adapters are read", path,
             cJSON_IsString(j) ? j->valuestring : "missing");
    j = cJSON_GetObjectItemCaseSensitive(o, "r");
    if (!cJSON_IsNumber(j) || j->valuedouble < 1 || j->valuedouble != floor(j->valuedouble) || j->valuedouble > 1 << 20)
        FAIL("%s: r must be a positive integer", path);
    c->r = (int)j->valuedouble;
    j = cJSON_GetObjectItemCaseSensitive(o, "lora_alpha");
    if (j && !cJSON_IsNumber(j)) FAIL("%s: lora_alpha must be a number", path);
    if (j) c->lora_alpha = j->valuedouble;
    j = cJSON_GetObjectItemCaseSensitive(o, "lora_dropout");
    if (j && (!cJSON_IsNumber(j) || j->valuedouble < 0 || j->valuedouble >= 1))
        FAIL("%s: lora_dropout must be a number in [0, 1)", path);
    if (j) c->lora_dropout = j->valuedouble;
    j = cJSON_GetObjectItemCaseSensitive(o, "use_rslora");
    if (j && !cJSON_IsBool(j)) FAIL("%s: use_rslora must be true or false", path);
    c->use_rslora = cJSON_IsTrue(j);
    j = cJSON_GetObjectItemCaseSensitive(o, "fan_in_fan_out");
    if (j && !cJSON_IsBool(j)) FAIL("%s: fan_in_fan_out must be true or false", path);
    c->fan_in_fan_out = cJSON_IsTrue(j);
    j = cJSON_GetObjectItemCaseSensitive(o, "bias");
    if (j && !(cJSON_IsString(j) && strcmp(j->valuestring, "none") == 0))
        FAIL("%s: bias is %s: only bias \"none\" adapters (no trained biases) are read", path,
             cJSON_IsString(j) ? j->valuestring : "not a string");
    static const char *const unset[] = {"use_dora", "rank_pattern", "alpha_pattern", "modules_to_save", "lora_bias"};
    for (size_t i = 0; i < sizeof unset / sizeof unset[0]; i++)
        if (!field_unset(o, unset[i]))
            FAIL("%s: %s is set: trident reads plain LoRA adapters (one r and lora_alpha, a delta B A per module)",
                 path, unset[i]);
    j = cJSON_GetObjectItemCaseSensitive(o, "base_model_name_or_path");
    if (cJSON_IsString(j)) c->base_model = td_xstrdup(j->valuestring);
    cJSON_Delete(o);
    free(text);
    return 0;
fail:
    cJSON_Delete(o);
    free(text);
    return -1;
}

void peft_config_free(peft_lora_config *c)
{
    free(c->base_model);
    c->base_model = NULL;
}

double peft_scaling(const peft_lora_config *c)
{
    return c->use_rslora ? c->lora_alpha / sqrt((double)c->r) : c->lora_alpha / (double)c->r;
}

/* Element i of a stored F32, F16 or BF16 tensor. */
static double elem(const void *data, st_dtype t, size_t i)
{
    if (t == ST_F32) {
        float f;
        memcpy(&f, (const char *)data + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)data + 2 * i, 2);
    return t == ST_F16 ? td_f16_to_f32(h) : td_bf16_to_f32(h);
}

static double half_value(st_dtype t, uint16_t h) { return t == ST_F16 ? td_f16_to_f32(h) : td_bf16_to_f32(h); }

/* Stores v as element i of an F32, F16 or BF16 tensor, rounded once to nearest (ties to even). */
static void put(void *data, st_dtype t, size_t i, double v)
{
    if (t == ST_F32) {
        float f = (float)v;
        memcpy((char *)data + 4 * i, &f, 4);
        return;
    }
    /* double -> float -> 16 bits may round twice: the answer is the float route's or one of its
     * neighbours (same sign, finite), whichever is nearest to v */
    float f = (float)v;
    uint16_t h = t == ST_F16 ? td_f32_to_f16(f) : td_f32_to_bf16(f), best = h;
    uint16_t expmask = t == ST_F16 ? 0x7c00 : 0x7f80;
    double bd = fabs(half_value(t, h) - v);
    for (int step = -1; step <= 1; step += 2) {
        uint16_t mag = (uint16_t)(h & 0x7fff);
        if ((step < 0 && mag == 0) || (h & expmask) == expmask) continue;
        uint16_t n = (uint16_t)((h & 0x8000) | (uint16_t)(mag + step));
        if ((n & expmask) == expmask) continue;
        double d = fabs(half_value(t, n) - v);
        if (d < bd || (d == bd && (n & 1) == 0)) {
            best = n;
            bd = d;
        }
    }
    memcpy((char *)data + 2 * i, &best, 2);
}

static int is_float(st_dtype t) { return t == ST_F32 || t == ST_F16 || t == ST_BF16; }

/* One module the adapter changes: its A and B and the model tensor they apply to. */
typedef struct {
    char *module;
    const st_tensor *a, *b, *w;
} lora_mod;

/* The module of adapter tensor `name` (PREFIX M .lora_A.weight): M into mod, which = 0 (A) or 1
 * (B); -1 when the name is not a LoRA weight. */
static int adapter_name(const char *name, char *mod, size_t len, int *which)
{
    size_t n = strlen(name), p = strlen(PREFIX);
    static const char *const tails[] = {".lora_A.weight", ".lora_B.weight"};
    if (strncmp(name, PREFIX, p) != 0) return -1;
    for (int k = 0; k < 2; k++) {
        size_t t = strlen(tails[k]);
        if (n > p + t && strcmp(name + n - t, tails[k]) == 0 && n - t - p < len) {
            memcpy(mod, name + p, n - t - p);
            mod[n - t - p] = 0;
            *which = k;
            return 0;
        }
    }
    return -1;
}

/* The model tensor of module M: M.weight, or (GPT-2's files without the prefix) M less
 * "transformer." .weight. */
static const st_tensor *model_weight(const st_header *h, const char *mod)
{
    char name[1200];
    snprintf(name, sizeof name, "%s.weight", mod);
    const st_tensor *t = st_find(h, name);
    if (!t && strncmp(mod, "transformer.", 12) == 0) {
        snprintf(name, sizeof name, "%s.weight", mod + 12);
        t = st_find(h, name);
    }
    return t;
}

/* Collects the adapter's modules into *mods (*n of them), each checked against the model. */
static int match_modules(const st_file *ad, const st_file *model, const peft_lora_config *c, lora_mod **mods,
                         int *n, char *err, size_t errlen)
{
    lora_mod *m = td_xcalloc((size_t)ad->h.ntensors + 1, sizeof *m);
    int nm = 0;
    for (int i = 0; i < ad->h.ntensors; i++) {
        const st_tensor *t = &ad->h.tensors[i];
        char mod[1100];
        int which;
        if (adapter_name(t->name, mod, sizeof mod, &which))
            FAIL("%s: tensor %s is not a LoRA weight (" PREFIX "MODULE.lora_A.weight or .lora_B.weight)", ad->path,
                 t->name);
        if (!is_float(t->dtype) || t->ndim != 2)
            FAIL("%s: %s is %s with %d dimensions: a LoRA weight is a matrix of F32, F16 or BF16", ad->path, t->name,
                 st_dtype_name(t->dtype), t->ndim);
        int k = 0;
        while (k < nm && strcmp(m[k].module, mod) != 0) k++;
        if (k == nm) m[nm++].module = td_xstrdup(mod);
        if (which == 0) m[k].a = t;
        else m[k].b = t;
    }
    for (int k = 0; k < nm; k++) {
        lora_mod *x = &m[k];
        if (!x->a || !x->b)
            FAIL("%s: module %s has lora_%s.weight without lora_%s.weight", ad->path, x->module, x->a ? "A" : "B",
                 x->a ? "B" : "A");
        x->w = model_weight(&model->h, x->module);
        if (!x->w) FAIL("%s: the adapter changes %s, but %s has no %s.weight", ad->path, x->module, model->path, x->module);
        if (!is_float(x->w->dtype) || x->w->ndim != 2)
            FAIL("%s: %s is %s with %d dimensions: LoRA merges into a matrix of F32, F16 or BF16", model->path,
                 x->w->name, st_dtype_name(x->w->dtype), x->w->ndim);
        int64_t out = x->w->shape[c->fan_in_fan_out ? 1 : 0], in = x->w->shape[c->fan_in_fan_out ? 0 : 1];
        if (x->a->shape[0] != c->r || x->a->shape[1] != in || x->b->shape[0] != out || x->b->shape[1] != c->r)
            FAIL("%s: module %s: lora_A is (%lld, %lld) and lora_B (%lld, %lld), but r %d and %s (%lld, %lld)%s need "
                 "(%d, %lld) and (%lld, %d)", ad->path, x->module, (long long)x->a->shape[0],
                 (long long)x->a->shape[1], (long long)x->b->shape[0], (long long)x->b->shape[1], c->r, x->w->name,
                 (long long)x->w->shape[0], (long long)x->w->shape[1], c->fan_in_fan_out ? " (fan_in_fan_out)" : "",
                 c->r, (long long)in, (long long)out, c->r);
        for (int q = 0; q < k; q++)
            if (m[q].w == x->w) FAIL("%s: modules %s and %s both change %s", ad->path, m[q].module, x->module, x->w->name);
    }
    *mods = m;
    *n = nm;
    return 0;
fail:
    for (int k = 0; k < nm; k++) free(m[k].module);
    free(m);
    return -1;
}

/* dst (W's bytes, W's dtype) = W + s B A: for each element, the sum over r in order, in double. */
static void merge_one(void *dst, const st_file *model, const st_file *ad, const lora_mod *x, double s, int r, int fifo)
{
    const void *w = st_data(model, x->w), *a = st_data(ad, x->a), *b = st_data(ad, x->b);
    int64_t out = x->b->shape[0], in = x->a->shape[1];
    double *arow = td_xmalloc((size_t)r * (size_t)in * sizeof(double)), *brow = td_xmalloc((size_t)r * sizeof(double));
    for (size_t i = 0; i < (size_t)r * (size_t)in; i++) arow[i] = elem(a, x->a->dtype, i);
    for (int64_t o = 0; o < out; o++) {
        for (int k = 0; k < r; k++) brow[k] = elem(b, x->b->dtype, (size_t)(o * r + k));
        for (int64_t i = 0; i < in; i++) {
            double d = 0;
            for (int k = 0; k < r; k++) d += brow[k] * arow[(size_t)k * (size_t)in + (size_t)i];
            size_t at = fifo ? (size_t)(i * out + o) : (size_t)(o * in + i);
            put(dst, x->w->dtype, at, elem(w, x->w->dtype, at) + s * d);
        }
    }
    free(arow);
    free(brow);
}

int peft_merge_hf(const char *adapter, const char *in, const char *out, int *merged, char *err, size_t errlen)
{
    peft_lora_config c;
    st_file *ad = NULL, *model = NULL;
    lora_mod *mods = NULL;
    int nm = 0, rc = -1;
    st_entry *e = NULL;
    void **bufs = NULL;
    char *cfg = NULL;
    char path[4200], tmp[4300];
    static const char *const held[] = {"config.json", "model.safetensors", "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++) {
        ckf_join(path, sizeof path, out, held[i]);
        if (ckf_exists(path)) {
            snprintf(err, errlen, "--to hf %s already holds a model (%s): give an empty or new folder", out, path);
            return -1;
        }
    }
    if (peft_read_config(adapter, &c, err, errlen)) return -1;
    ckf_join(path, sizeof path, in, "model.safetensors");
    if (!ckf_exists(path)) {
        char idx[4300];
        ckf_join(idx, sizeof idx, in, "model.safetensors.index.json");
        FAIL("--from hf %s: no model.safetensors%s", in,
             ckf_exists(idx) ? " (a sharded model: --merge-lora reads one file; save the base unsharded)" : "");
    }
    model = st_open(path, err, errlen);
    if (!model) goto fail;
    ckf_join(path, sizeof path, adapter, "adapter_model.safetensors");
    ad = st_open(path, err, errlen);
    if (!ad) goto fail;
    if (match_modules(ad, model, &c, &mods, &nm, err, errlen)) goto fail;
    if (nm == 0) FAIL("%s: the adapter holds no LoRA weights", ad->path);
    double s = peft_scaling(&c);
    int n = model->h.ntensors;
    e = td_xcalloc((size_t)n, sizeof *e);
    bufs = td_xcalloc((size_t)n, sizeof *bufs);
    for (int i = 0; i < n; i++) {
        const st_tensor *t = &model->h.tensors[i];
        e[i].name = t->name;
        e[i].dtype = t->dtype;
        e[i].ndim = t->ndim;
        memcpy(e[i].shape, t->shape, sizeof e[i].shape);
        e[i].bytes = (size_t)(t->end - t->begin);
        e[i].data = st_data(model, t);
        for (int k = 0; k < nm; k++)
            if (mods[k].w == t) {
                bufs[i] = td_xmalloc(e[i].bytes ? e[i].bytes : 1);
                merge_one(bufs[i], model, ad, &mods[k], s, c.r, c.fan_in_fan_out);
                e[i].data = bufs[i];
            }
    }
    ckf_join(path, sizeof path, in, "config.json");
    size_t clen;
    cfg = ckf_read_text(path, &clen, 1 << 24);
    if (!cfg) FAIL("cannot read %s: %s", path, td_strerror(errno));
    if (ckf_mkdirs(out) != 0) FAIL("cannot create %s: %s", out, td_strerror(errno));
    ckf_join(path, sizeof path, out, "model.safetensors");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (st_write(tmp, e, n, (const char *const *)model->h.meta_keys, (const char *const *)model->h.meta_values,
                 model->h.nmeta, 1, err, errlen))
        goto fail;
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        FAIL("cannot rename %s to %s: %s", tmp, path, td_strerror(errno));
    }
    ckf_join(path, sizeof path, out, "config.json");
    if (ckf_write_atomic(path, cfg, clen) != 0) FAIL("cannot write %s: %s", path, td_strerror(errno));
    if (ckf_fsync_dir(out) != 0) FAIL("cannot fsync %s: %s", out, td_strerror(errno));
    *merged = nm;
    rc = 0;
fail:
    if (bufs)
        for (int i = 0; i < model->h.ntensors; i++) free(bufs[i]);
    free(bufs);
    free(e);
    free(cfg);
    for (int k = 0; k < nm; k++) free(mods[k].module);
    free(mods);
    st_close(ad);
    st_close(model);
    peft_config_free(&c);
    return rc;
}

int peft_import_hf(const char *adapter, const char *in, const char *out, int divisible_by, const char *backend_name,
                   comm *world, int *merged, char *err, size_t errlen)
{
    char tmp[4200];
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/') n--;
    snprintf(tmp, sizeof tmp, "%.*s.merge-lora.%ld", (int)n, out, (long)getpid());
    if (ckf_remove_tree(tmp) != 0) {
        snprintf(err, errlen, "cannot remove the stale %s: %s", tmp, td_strerror(errno));
        return -1;
    }
    int rc = peft_merge_hf(adapter, in, tmp, merged, err, errlen);
    if (rc == 0) rc = hf_import(tmp, out, divisible_by, backend_name, world, err, errlen);
    if (ckf_remove_tree(tmp) != 0 && rc == 0) {
        snprintf(err, errlen, "cannot remove %s: %s", tmp, td_strerror(errno));
        rc = -1;
    }
    return rc;
}

/* ---- export: a trident LoRA checkpoint's adapters in PEFT's format ---- */

int peft_export(const ckpt_meta *meta, const char *out, int *modules, char *err, size_t errlen)
{
    static const char *const hf_names[GPT_LORA_NMODULES] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                             "gate_proj", "up_proj", "down_proj"};
    const gpt_config *c = &meta->model;
    ckpt_reader *r = NULL;
    ckpt_tensor_list tl = {0};
    st_entry *e = NULL;
    char **names = NULL;
    float **bufs = NULL;
    char *text = NULL;
    int n = 0, rc = -1;
    *modules = 0;
    if (!gpt_lora(c))
        FAIL("--from trident %s: the checkpoint has no LoRA adapters (lora_rank 0 in its meta.json): train them with "
             "--lora-rank", meta->dir);
    if (c->norm != GPT_NORM_RMSNORM || !c->glu || c->kind != GPT_KIND_DECODER)
        FAIL("--to peft: %s is not a Llama-family model (RMSNorm, a gated MLP): PEFT's module names are written for "
             "Llama's q_proj ... down_proj only; export the merged model with --to hf", meta->dir);
    char path[4200], tmp[4300];
    ckf_join(path, sizeof path, out, "adapter_model.safetensors");
    if (access(path, F_OK) == 0)
        FAIL("--to peft %s already holds an adapter (%s): give an empty or new folder, or remove it first", out, path);
    r = ckpt_reader_open(meta, err, errlen);
    if (!r) goto fail;
    ckpt_list_tensors(r, &tl);
    e = td_xcalloc((size_t)tl.n + 1, sizeof *e);
    names = td_xcalloc((size_t)tl.n + 1, sizeof *names);
    bufs = td_xcalloc((size_t)tl.n + 1, sizeof *bufs);
    for (int i = 0; i < tl.n; i++) {
        int l;
        char block[16], mod[16], ab;
        if (sscanf(tl.names[i], "layers.%d.%15[^.].%15[^.].lora_%c.weight", &l, block, mod, &ab) != 4) continue;
        const ckpt_slice *s = &tl.shapes[i];
        char hf[160];
        snprintf(hf, sizeof hf, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", l,
                 strcmp(block, "attn") == 0 ? "self_attn" : "mlp", mod, ab);
        float *buf = td_xmalloc((size_t)(s->shape[0] * s->shape[1]) * sizeof(float));
        bufs[n] = buf;
        if (ckpt_read(r, CKPT_PARAMS, tl.names[i], s, buf, err, errlen)) goto fail;
        names[n] = td_xstrdup(hf);
        e[n] = (st_entry){names[n], ST_F32, 2, {s->shape[0], s->shape[1]}, buf,
                          (size_t)(s->shape[0] * s->shape[1]) * sizeof(float)};
        n++;
        if (ab == 'A') ++*modules;
    }
    if (ckf_mkdirs(out) != 0) FAIL("cannot create %s: %s", out, td_strerror(errno));
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    if (st_write(tmp, e, n, mk, mv, 1, 1, err, errlen)) goto fail;
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        FAIL("cannot rename %s to %s: %s", tmp, path, td_strerror(errno));
    }
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(cfg, "peft_type", "LORA");
    cJSON_AddStringToObject(cfg, "task_type", "CAUSAL_LM");
    cJSON_AddNullToObject(cfg, "base_model_name_or_path");
    cJSON_AddNumberToObject(cfg, "r", c->lora_rank);
    cJSON_AddNumberToObject(cfg, "lora_alpha", c->lora_alpha);
    cJSON_AddNumberToObject(cfg, "lora_dropout", ckpt_float_value(c->lora_dropout));
    cJSON *tm = cJSON_AddArrayToObject(cfg, "target_modules");
    for (int m = 0; m < GPT_LORA_NMODULES; m++)
        if (gpt_lora_on(c, m)) cJSON_AddItemToArray(tm, cJSON_CreateString(hf_names[m]));
    cJSON_AddStringToObject(cfg, "bias", "none");
    cJSON_AddFalseToObject(cfg, "fan_in_fan_out");
    cJSON_AddFalseToObject(cfg, "use_rslora");
    cJSON_AddFalseToObject(cfg, "use_dora");
    cJSON_AddTrueToObject(cfg, "inference_mode");
    cJSON_AddTrueToObject(cfg, "init_lora_weights");
    cJSON_AddNullToObject(cfg, "modules_to_save");
    text = cJSON_Print(cfg);
    cJSON_Delete(cfg);
    size_t len = strlen(text);
    text = td_xrealloc(text, len + 2);
    text[len++] = '\n';
    ckf_join(path, sizeof path, out, "adapter_config.json");
    if (ckf_write_atomic(path, text, len) != 0) FAIL("cannot write %s: %s", path, td_strerror(errno));
    if (ckf_fsync_dir(out) != 0) FAIL("cannot fsync %s: %s", out, td_strerror(errno));
    rc = 0;
fail:
    for (int i = 0; i < tl.n && names; i++) {
        free(names[i]);
        free(bufs[i]);
    }
    free(names);
    free(bufs);
    free(e);
    free(text);
    ckpt_tensor_list_free(&tl);
    if (r) ckpt_reader_close(r);
    return rc;
}
