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
#include "hf_impl.h"
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

/* The length of the adapter's name in name's tail ".ADAPTER.weight" (what a model's state_dict
 * has where save_pretrained writes ".weight"): 0 for a plain ".weight", -1 for neither. */
static int adapter_name_len(const char *tail)
{
    if (strcmp(tail, ".weight") == 0) return 0;
    size_t n = strlen(tail);
    if (n < 9 || tail[0] != '.' || strcmp(tail + n - 7, ".weight") != 0 || memchr(tail + 1, '.', n - 8)) return -1;
    return (int)(n - 8);
}

/* The module of adapter tensor `name` (PREFIX M .lora_A.weight, or .lora_A.ADAPTER.weight): M
 * into mod, which = 0 (A) or 1 (B); -1 when the name is not a LoRA weight. */
static int adapter_name(const char *name, char *mod, size_t len, int *which)
{
    size_t p = strlen(PREFIX);
    if (strncmp(name, PREFIX, p) != 0) return -1;
    const char *at = NULL;
    for (const char *s = strstr(name + p, ".lora_"); s; s = strstr(s + 1, ".lora_")) at = s;
    if (!at || at == name + p || (at[6] != 'A' && at[6] != 'B') || adapter_name_len(at + 7) < 0) return -1;
    size_t m = (size_t)(at - name) - p;
    if (m >= len) return -1;
    memcpy(mod, name + p, m);
    mod[m] = 0;
    *which = at[6] == 'B';
    return 0;
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
            FAIL("%s: tensor %s is not a LoRA weight (" PREFIX "MODULE.lora_A.weight or .lora_B.weight, or with the "
                 "adapter's name before .weight)", ad->path,
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

/* ---- a PEFT adapter loaded as trident's trainable adapters ---- */

static const char *const llama_mods[GPT_LORA_NMODULES] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                           "gate_proj", "up_proj", "down_proj"};

/* MegatronBert's modules of GPT_LORA_* m (no gate: BERT's MLP is not gated). */
static const char *const bert_mods[GPT_LORA_NMODULES] = {
    "attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense", NULL,
    "intermediate.dense", "output.dense"};

/* The module path of GPT_LORA_* m after the layer's number: Llama's self_attn.q_proj ..., or
 * (bert) MegatronBert's attention.self.query ...; "" for a module the model has not. */
static void module_tail(char *out, size_t len, int bert, int m)
{
    if (bert) snprintf(out, len, "%s", bert_mods[m] ? bert_mods[m] : "");
    else snprintf(out, len, "%s.%s", m <= GPT_LORA_O ? "self_attn" : "mlp", llama_mods[m]);
}

/* The head of a layer's module paths (before its number), without PREFIX. */
static const char *layer_head(int bert) { return bert ? "bert.encoder.layer." : "model.layers."; }

/* Parses a PEFT key PREFIX HEAD N.TAIL.lora_X[.ADAPTER].weight (HEAD, TAIL: layer_head and
 * module_tail) into layer, module (GPT_LORA_*) and which (0 A, 1 B); -1 when it is not one. */
static int adapter_key(const char *name, int bert, int *layer, int *module, int *which)
{
    size_t pn = strlen(PREFIX), hn = strlen(layer_head(bert));
    if (strncmp(name, PREFIX, pn) != 0 || strncmp(name + pn, layer_head(bert), hn) != 0) return -1;
    const char *p = name + pn + hn;
    char *end;
    if (*p < '0' || *p > '9') return -1;
    long l = strtol(p, &end, 10);
    if (*end != '.' || l > 1 << 20) return -1;
    p = end + 1;
    for (int m = 0; m < GPT_LORA_NMODULES; m++) {
        char tail[64];
        module_tail(tail, sizeof tail, bert, m);
        size_t n = strlen(tail);
        if (!n || strncmp(p, tail, n) != 0 || strncmp(p + n, ".lora_", 6) != 0) continue;
        const char *q = p + n + 6;
        if (*q != 'A' && *q != 'B') return -1;
        int w = *q == 'B';
        q++;
        if (adapter_name_len(q) < 0) return -1; /* .weight, or .ADAPTER.weight */
        *layer = (int)l;
        *module = m;
        *which = w;
        return 0;
    }
    return -1;
}

/* Parses an expert's PEFT key PREFIX model.layers.N.block_sparse_moe.experts.E.w1 (w3, w2) or
 * .mlp.experts.E.gate_proj (up_proj, down_proj) .lora_X[.ADAPTER].weight into layer, expert,
 * module (0 gate, 1 up, 2 down) and which; -1 when it is not one. */
static int expert_key(const char *name, int *layer, int *expert, int *module, int *which)
{
    static const char *const mods[6] = {"w1", "w3", "w2", "gate_proj", "up_proj", "down_proj"};
    int l, e, n = 0;
    char blk[24], mod[16];
    if (sscanf(name, PREFIX "model.layers.%d.%23[^.].experts.%d.%15[^.].lora_%n", &l, blk, &e, mod, &n) != 4 || !n)
        return -1;
    int mix = strcmp(blk, "block_sparse_moe") == 0;
    if (!mix && strcmp(blk, "mlp") != 0) return -1;
    const char *q = name + n;
    if ((*q != 'A' && *q != 'B') || adapter_name_len(q + 1) < 0 || l < 0 || e < 0) return -1;
    for (int m = 0; m < 3; m++)
        if (strcmp(mod, mods[(mix ? 0 : 3) + m]) == 0) {
            *layer = l, *expert = e, *module = m, *which = *q == 'B';
            return 0;
        }
    return -1;
}

/* Parses a shared expert's PEFT key PREFIX model.layers.N.mlp.shared_expert.gate_proj (up_proj,
 * down_proj) .lora_X[.ADAPTER].weight (Qwen2-MoE) into layer, module (GPT_LORA_GATE..DOWN) and
 * which; -1 when it is not one. */
static int shared_key(const char *name, int *layer, int *module, int *which)
{
    int l, n = 0;
    char mod[16];
    if (sscanf(name, PREFIX "model.layers.%d.mlp.shared_expert.%15[^.].lora_%n", &l, mod, &n) != 2 || !n) return -1;
    const char *q = name + n;
    if ((*q != 'A' && *q != 'B') || adapter_name_len(q + 1) < 0 || l < 0) return -1;
    for (int m = GPT_LORA_GATE; m <= GPT_LORA_DOWN; m++)
        if (strcmp(mod, llama_mods[m]) == 0) {
            *layer = l, *module = m, *which = *q == 'B';
            return 0;
        }
    return -1;
}

int peft_adapter_open(const char *dir, int num_layers, int num_experts, int bert, peft_adapter *ad, char *err,
                      size_t errlen)
{
    memset(ad, 0, sizeof *ad);
    if (peft_read_config(dir, &ad->cfg, err, errlen)) return -1;
    char path[4200];
    ckf_join(path, sizeof path, dir, "adapter_model.safetensors");
    st_file *f = st_open(path, err, errlen);
    if (!f) goto fail;
    ad->file = f;
    ad->num_layers = num_layers;
    const st_tensor **tab = td_xcalloc((size_t)num_layers * GPT_LORA_NMODULES * 2 + 1, sizeof *tab);
    ad->tensors = (const void **)tab;
    ad->num_experts = num_experts;
    const st_tensor **xt = td_xcalloc((size_t)num_layers * 3 * (size_t)num_experts * 2 + 1, sizeof *xt);
    ad->experts = (const void **)xt;
    unsigned seen = 0;
    for (int i = 0; i < f->h.ntensors; i++) {
        const st_tensor *t = &f->h.tensors[i];
        int l, m, w, e;
        if (num_experts > 0 && expert_key(t->name, &l, &e, &m, &w) == 0) {
            if (l >= num_layers || e >= num_experts)
                FAIL("%s: tensor %s is for layer %d, expert %d but the model has %d layers of %d experts", path,
                     t->name, l, e, num_layers, num_experts);
            const st_tensor **slot = &xt[(((size_t)l * 3 + (size_t)m) * (size_t)num_experts + (size_t)e) * 2 + (size_t)w];
            if (*slot)
                FAIL("%s: %s and %s are the same adapter weight (two adapter names?): keep one adapter", path,
                     (*slot)->name, t->name);
            *slot = t;
            seen |= 1u << (GPT_LORA_GATE + m);
            continue;
        }
        /* a MoE layer's shared expert: its MLP modules' slots (the layer has no dense MLP) */
        int shared = num_experts > 0 && shared_key(t->name, &l, &m, &w) == 0;
        if (!shared && adapter_key(t->name, bert, &l, &m, &w)) {
            if (bert)
                FAIL("%s: tensor %s is not a LoRA weight of a MegatronBert encoder module (" PREFIX "bert.encoder."
                     "layer.N.attention.self.query.lora_A.weight ...; query/key/value, attention.output.dense, "
                     "intermediate.dense, output.dense): trident trains adapters on those only", path, t->name);
            FAIL("%s: tensor %s is not a LoRA weight of a Llama-family module (" PREFIX "model.layers.N.self_attn."
                 "q_proj.lora_A.weight ...; q/k/v/o_proj, mlp gate/up/down_proj): trident trains adapters on those "
                 "only", path, t->name);
        }
        if (l >= num_layers)
            FAIL("%s: tensor %s is for layer %d but the model has %d layers", path, t->name, l, num_layers);
        const st_tensor **slot = &tab[((size_t)l * GPT_LORA_NMODULES + (size_t)m) * 2 + (size_t)w];
        if (*slot)
            FAIL("%s: %s and %s are the same adapter weight (two adapter names?): keep one adapter", path,
                 (*slot)->name, t->name);
        *slot = t;
        seen |= 1u << m;
    }
    if (!seen) FAIL("%s: the adapter holds no LoRA weights", path);
    for (int l = 0; l < num_layers && num_experts > 0; l++) /* a MoE model's MLP modules are its experts' */
        for (int m = 0; m < 3; m++)
            for (int e = 0; e < num_experts && (seen >> (GPT_LORA_GATE + m) & 1); e++)
                for (int w = 0; w < 2; w++)
                    if (!xt[(((size_t)l * 3 + (size_t)m) * (size_t)num_experts + (size_t)e) * 2 + (size_t)w])
                        FAIL("%s: layer %d expert %d has no %s.lora_%c: trident trains the same modules on every "
                             "expert of every layer", path, l, e, llama_mods[GPT_LORA_GATE + m], w ? 'B' : 'A');
    for (int l = 0; l < num_layers; l++)
        for (int m = 0; m < GPT_LORA_NMODULES; m++)
            for (int w = 0; w < 2 && (seen >> m & 1) && !(num_experts > 0 && m >= GPT_LORA_GATE); w++)
                if (!tab[((size_t)l * GPT_LORA_NMODULES + (size_t)m) * 2 + (size_t)w])
                    FAIL("%s: layer %d has no %s.lora_%c: trident trains the same modules in every layer (%s "
                         "elsewhere)", path, l, bert ? bert_mods[m] : llama_mods[m], w ? 'B' : 'A',
                         bert ? bert_mods[m] : llama_mods[m]);
    ad->targets = seen;
    return 0;
fail:
    peft_adapter_close(ad);
    return -1;
}

double peft_adapter_alpha(const peft_adapter *ad)
{
    return ad->cfg.use_rslora ? ad->cfg.lora_alpha * sqrt((double)ad->cfg.r) : ad->cfg.lora_alpha;
}

/* An expert stack (E r, in) or (E out, r) of layer l's module `mod`, from every expert's tensor. */
static int expert_read(const peft_adapter *ad, const char *name, int l, const char *mod, int b,
                       const ckpt_slice *want, float *dst, char *err, size_t errlen)
{
    const st_file *f = ad->file;
    int m = -1, E = ad->num_experts;
    for (int k = 0; k < 3; k++)
        if (strcmp(mod, llama_mods[GPT_LORA_GATE + k]) == 0) m = k;
    if (m < 0 || l < 0 || l >= ad->num_layers || want->shape[0] % E != 0) {
        snprintf(err, errlen, "--lora-load: trident's adapter %s has no PEFT counterpart", name);
        return -1;
    }
    int64_t d0 = want->shape[0] / E, d1 = want->shape[1];
    float *whole = td_xmalloc((size_t)(want->shape[0] * d1) * sizeof(float));
    for (int e = 0; e < E; e++) {
        const st_tensor *t = ad->experts[(((size_t)l * 3 + (size_t)m) * (size_t)E + (size_t)e) * 2 + (size_t)b];
        if (!t) {
            snprintf(err, errlen, "%s: no %s.lora_%c of expert %d in layer %d, which this run trains", f->path, mod,
                     b ? 'B' : 'A', e, l);
            free(whole);
            return -1;
        }
        if (!is_float(t->dtype) || t->ndim != 2 || t->shape[0] != d0 || t->shape[1] != d1) {
            snprintf(err, errlen, "%s: %s is %s (%lld, %lld) but each expert's part of the model's %s is (%lld, %lld) "
                     "(r %d; check the base model matches the adapter's)", f->path, t->name, st_dtype_name(t->dtype),
                     (long long)t->shape[0], t->ndim == 2 ? (long long)t->shape[1] : 0LL, name, (long long)d0,
                     (long long)d1, ad->cfg.r);
            free(whole);
            return -1;
        }
        const void *data = st_data(f, t);
        for (size_t i = 0; i < (size_t)(d0 * d1); i++) whole[(size_t)e * d0 * d1 + i] = (float)elem(data, t->dtype, i);
    }
    ckpt_slice_take(want, whole, dst);
    free(whole);
    return 0;
}

int peft_adapter_read(const peft_adapter *ad, const char *name, const ckpt_slice *want, float *dst, char *err,
                      size_t errlen)
{
    const st_file *f = ad->file;
    int l, ab_ok = 0;
    char block[16], mod[16], ab = 0;
    int m = -1;
    if (sscanf(name, "layers.%d.mlp.experts.%15[^.].lora_%c.weight", &l, mod, &ab) == 3 && ad->num_experts > 0)
        return expert_read(ad, name, l, mod, ab == 'B', want, dst, err, errlen);
    /* the shared expert's (in its layer's MLP slots, shared_key) or a dense module's */
    if ((sscanf(name, "layers.%d.mlp.shared_expert.%15[^.].lora_%c.weight", &l, mod, &ab) == 3 ||
         sscanf(name, "layers.%d.%15[^.].%15[^.].lora_%c.weight", &l, block, mod, &ab) == 4) && l >= 0 &&
        l < ad->num_layers && (ab == 'A' || ab == 'B')) {
        ab_ok = 1;
        for (int k = 0; k < GPT_LORA_NMODULES; k++)
            if (strcmp(mod, llama_mods[k]) == 0) m = k;
    }
    if (!ab_ok || m < 0) {
        snprintf(err, errlen, "--lora-load: trident's adapter %s has no PEFT counterpart", name);
        return -1;
    }
    const st_tensor *t = ad->tensors[((size_t)l * GPT_LORA_NMODULES + (size_t)m) * 2 + (size_t)(ab == 'B')];
    if (!t) {
        snprintf(err, errlen, "%s: no %s.lora_%c for layer %d, which this run trains", f->path, mod, ab, l);
        return -1;
    }
    if (!is_float(t->dtype) || t->ndim != 2 || t->shape[0] != want->shape[0] || t->shape[1] != want->shape[1]) {
        snprintf(err, errlen, "%s: %s is %s (%lld, %lld) but the model's %s is (%lld, %lld) (r %d; check the base "
                 "model matches the adapter's)", f->path, t->name, st_dtype_name(t->dtype), (long long)t->shape[0],
                 t->ndim == 2 ? (long long)t->shape[1] : 0LL, name, (long long)want->shape[0],
                 (long long)want->shape[1], ad->cfg.r);
        return -1;
    }
    size_t n = (size_t)(t->shape[0] * t->shape[1]);
    float *whole = td_xmalloc(n * sizeof(float));
    const void *data = st_data(f, t);
    for (size_t i = 0; i < n; i++) whole[i] = (float)elem(data, t->dtype, i);
    ckpt_slice_take(want, whole, dst);
    free(whole);
    return 0;
}

void peft_adapter_close(peft_adapter *ad)
{
    st_close(ad->file);
    free(ad->tensors);
    free(ad->experts);
    peft_config_free(&ad->cfg);
    memset(ad, 0, sizeof *ad);
}

/* ---- export: a trident LoRA checkpoint's adapters in PEFT's format ---- */

/* The tensors an export writes, grown one at a time. */
typedef struct {
    st_entry *e;
    char **names;
    float **bufs;
    int n, cap;
} export_list;

/* A new zeroed (d0, d1) F32 tensor named `name` in the list; its data. */
static float *export_add(export_list *x, const char *name, int64_t d0, int64_t d1)
{
    if (x->n == x->cap) {
        x->cap = x->cap ? 2 * x->cap : 64;
        x->e = td_xrealloc(x->e, (size_t)x->cap * sizeof *x->e);
        x->names = td_xrealloc(x->names, (size_t)x->cap * sizeof *x->names);
        x->bufs = td_xrealloc(x->bufs, (size_t)x->cap * sizeof *x->bufs);
    }
    float *buf = td_xcalloc((size_t)(d0 * d1) + 1, sizeof(float));
    x->names[x->n] = td_xstrdup(name);
    x->bufs[x->n] = buf;
    x->e[x->n] = (st_entry){x->names[x->n], ST_F32, 2, {d0, d1}, buf, (size_t)(d0 * d1) * sizeof(float)};
    x->n++;
    return buf;
}

static void export_free(export_list *x)
{
    for (int i = 0; i < x->n; i++) {
        free(x->names[i]);
        free(x->bufs[i]);
    }
    free(x->names);
    free(x->bufs);
    free(x->e);
}

/* Reads trident tensor `name` (whole, (d0, d1)) into the rows [row0, row0 + d0) and columns
 * [col0, col0 + d1) of dst, a matrix with ld columns. */
static int read_block(ckpt_reader *r, const char *name, float *dst, int64_t ld, int64_t row0, int64_t col0,
                      int64_t d0, int64_t d1, char *err, size_t errlen)
{
    ckpt_slice s = ckpt_slice_whole(d0, d1);
    float *buf = td_xmalloc((size_t)(d0 * d1) * sizeof(float));
    int rc = ckpt_read(r, CKPT_PARAMS, name, &s, buf, err, errlen);
    for (int64_t i = 0; i < d0 && rc == 0; i++)
        memcpy(dst + (row0 + i) * ld + col0, buf + i * d1, (size_t)d1 * sizeof(float));
    free(buf);
    return rc;
}

/* GPT-2's modules (Conv1D, fan_in_fan_out): c_attn is q|k|v fused, so its adapter is the rank
 * n r stack of the n targeted ones among q, k, v: lora_A = [A_q; A_k; A_v] (n r, h), lora_B (3h,
 * n r) block-diagonal (module m's rows, its r columns; an untargeted one's rows zero). The other
 * modules are written at the same rank R = n r (one r for the whole adapter, as PEFT's config has
 * no other without rank_pattern): A's rows and B's columns past r zero, which adds nothing and
 * stays zero under training. lora_alpha is scaled to alpha R / r so that PEFT's alpha / r is
 * trident's. */
static int export_gpt2(ckpt_reader *rd, const gpt_config *c, export_list *x, int *R, cJSON *targets, char *err,
                       size_t errlen)
{
    int r = c->lora_rank, n = 0;
    for (int m = GPT_LORA_Q; m <= GPT_LORA_V; m++) n += gpt_lora_on(c, m);
    *R = r * (n ? n : 1);
    int64_t h = c->hidden, q = gpt_q_width(c), kv = gpt_kv_width(c), f = c->ffn;
    const struct {
        int module;
        const char *hf;             /* PEFT's module (target_modules: its unique suffix) */
        const char *blk, *tri;      /* trident's block and adapter */
        int64_t in, out;
    } one[] = {{GPT_LORA_O, "attn.c_proj", "attn", "o_proj", q, h},
               {GPT_LORA_UP, "mlp.c_fc", "mlp", "up_proj", h, f},
               {GPT_LORA_DOWN, "mlp.c_proj", "mlp", "down_proj", f, h}};
    char name[256], tn[128];
    if (n) cJSON_AddItemToArray(targets, cJSON_CreateString("c_attn"));
    for (size_t k = 0; k < sizeof one / sizeof one[0]; k++)
        if (gpt_lora_on(c, one[k].module)) cJSON_AddItemToArray(targets, cJSON_CreateString(one[k].hf));
    for (int l = 0; l < c->num_layers; l++) {
        if (n) {
            static const char *const qkv[3] = {"q_proj", "k_proj", "v_proj"};
            snprintf(name, sizeof name, "base_model.model.transformer.h.%d.attn.c_attn.lora_A.weight", l);
            float *A = export_add(x, name, *R, h);
            snprintf(name, sizeof name, "base_model.model.transformer.h.%d.attn.c_attn.lora_B.weight", l);
            float *B = export_add(x, name, q + 2 * kv, *R);
            for (int m = 0, j = 0; m < 3; m++) {
                if (!gpt_lora_on(c, GPT_LORA_Q + m)) continue;
                int64_t w = m == 0 ? q : kv, row0 = m == 0 ? 0 : q + (m - 1) * kv;
                snprintf(tn, sizeof tn, "layers.%d.attn.%s.lora_A.weight", l, qkv[m]);
                if (read_block(rd, tn, A, h, (int64_t)j * r, 0, r, h, err, errlen)) return -1;
                snprintf(tn, sizeof tn, "layers.%d.attn.%s.lora_B.weight", l, qkv[m]);
                if (read_block(rd, tn, B, *R, row0, (int64_t)j * r, w, r, err, errlen)) return -1;
                j++;
            }
        }
        for (size_t k = 0; k < sizeof one / sizeof one[0]; k++) {
            if (!gpt_lora_on(c, one[k].module)) continue;
            snprintf(name, sizeof name, "base_model.model.transformer.h.%d.%s.lora_A.weight", l, one[k].hf);
            float *A = export_add(x, name, *R, one[k].in);
            snprintf(name, sizeof name, "base_model.model.transformer.h.%d.%s.lora_B.weight", l, one[k].hf);
            float *B = export_add(x, name, one[k].out, *R);
            snprintf(tn, sizeof tn, "layers.%d.%s.%s.lora_A.weight", l, one[k].blk, one[k].tri);
            if (read_block(rd, tn, A, one[k].in, 0, 0, r, one[k].in, err, errlen)) return -1;
            snprintf(tn, sizeof tn, "layers.%d.%s.%s.lora_B.weight", l, one[k].blk, one[k].tri);
            if (read_block(rd, tn, B, *R, 0, 0, one[k].out, r, err, errlen)) return -1;
        }
    }
    return 0;
}

/* The Hugging Face module of trident adapter module m in layer l: Llama's, or (bert) MegatronBert's. */
static void module_path(char *out, size_t len, int bert, int l, int m)
{
    char tail[64];
    module_tail(tail, sizeof tail, bert, m);
    snprintf(out, len, "%s%d.%s", layer_head(bert), l, tail);
}

/* Llama's or BERT's modules (Linear layers, W (out, in)), each trident adapter as it is (lora_A (r,
 * in), lora_B (out, r)). target_modules: Llama's module names; BERT's as a regular expression that
 * PEFT matches against the whole module path (re.fullmatch), as the suffix "output.dense" alone
 * would also name attention.output.dense. */
/* The experts' adapters of a MoE family (`moe`: Mixtral's block_sparse_moe.experts.E.w1/w3/w2,
 * Qwen2-MoE's mlp.experts.E.gate_proj/up_proj/down_proj): trident's stack of expert adapters
 * (E r, in) or (E out, r) named expert by expert. */
static int export_experts(ckpt_reader *rd, const gpt_config *c, const char *moe, const ckpt_tensor_list *tl,
                          export_list *x, char *err, size_t errlen)
{
    static const char *const mixtral[3] = {"w1", "w3", "w2"};
    int mix = strcmp(moe, "mixtral") == 0, E = c->num_experts;
    for (int i = 0; i < tl->n; i++) {
        int l, m = -1;
        char mod[16], ab;
        if (sscanf(tl->names[i], "layers.%d.mlp.experts.%15[^.].lora_%c.weight", &l, mod, &ab) != 3) continue;
        for (int k = GPT_LORA_GATE; k <= GPT_LORA_DOWN; k++)
            if (strcmp(mod, llama_mods[k]) == 0) m = k;
        const ckpt_slice *s = &tl->shapes[i];
        if (m < 0 || s->shape[0] % E != 0) {
            snprintf(err, errlen, "--to peft: %s has no Hugging Face module to name", tl->names[i]);
            return -1;
        }
        int64_t d0 = s->shape[0] / E, d1 = s->shape[1];
        float *all = td_xmalloc((size_t)(s->shape[0] * d1) * sizeof(float));
        if (ckpt_read(rd, CKPT_PARAMS, tl->names[i], s, all, err, errlen)) {
            free(all);
            return -1;
        }
        for (int e = 0; e < E; e++) {
            char hf[200];
            if (mix)
                snprintf(hf, sizeof hf, PREFIX "model.layers.%d.block_sparse_moe.experts.%d.%s.lora_%c.weight", l, e,
                         mixtral[m - GPT_LORA_GATE], ab);
            else
                snprintf(hf, sizeof hf, PREFIX "model.layers.%d.mlp.experts.%d.%s.lora_%c.weight", l, e, llama_mods[m],
                         ab);
            memcpy(export_add(x, hf, d0, d1), all + (size_t)e * d0 * d1, (size_t)(d0 * d1) * sizeof(float));
        }
        free(all);
    }
    return 0;
}

static int export_linear(ckpt_reader *rd, const gpt_config *c, int bert, const char *moe, export_list *x,
                         cJSON **targets, char *err, size_t errlen)
{
    ckpt_tensor_list tl = {0};
    ckpt_list_tensors(rd, &tl);
    int rc = 0;
    for (int i = 0; i < tl.n && rc == 0; i++) {
        int l, m = -1;
        char block[16], mod[16], ab;
        if (strstr(tl.names[i], ".experts.")) {
            if (!strstr(tl.names[i], ".lora_")) continue;
            if (!moe) {
                snprintf(err, errlen, "--to peft: %s: the model is not Mixtral or Qwen2-MoE, whose expert modules "
                         "PEFT's keys name; export the merged model with --to hf", tl.names[i]);
                rc = -1;
                break;
            }
            continue; /* export_experts' */
        }
        int sh = strstr(tl.names[i], ".shared_expert.") && strstr(tl.names[i], ".lora_");
        if (sh && !(moe && strcmp(moe, "qwen2_moe") == 0)) {
            snprintf(err, errlen, "--to peft: %s: the model is not Qwen2-MoE, whose shared expert's modules PEFT's "
                     "keys name; export the merged model with --to hf", tl.names[i]);
            rc = -1;
            break;
        }
        if (sh ? sscanf(tl.names[i], "layers.%d.mlp.shared_expert.%15[^.].lora_%c.weight", &l, mod, &ab) != 3
               : sscanf(tl.names[i], "layers.%d.%15[^.].%15[^.].lora_%c.weight", &l, block, mod, &ab) != 4)
            continue;
        for (int k = 0; k < GPT_LORA_NMODULES; k++)
            if (strcmp(mod, llama_mods[k]) == 0) m = k;
        if (m < 0 || (bert && m == GPT_LORA_GATE)) {
            snprintf(err, errlen, "--to peft: %s has no Hugging Face module to name", tl.names[i]);
            rc = -1;
            break;
        }
        const ckpt_slice *s = &tl.shapes[i];
        char path[128], hf[200];
        if (sh) snprintf(path, sizeof path, "model.layers.%d.mlp.shared_expert.%s", l, llama_mods[m]);
        else module_path(path, sizeof path, bert, l, m);
        snprintf(hf, sizeof hf, PREFIX "%s.lora_%c.weight", path, ab);
        float *buf = export_add(x, hf, s->shape[0], s->shape[1]);
        rc = ckpt_read(rd, CKPT_PARAMS, tl.names[i], s, buf, err, errlen);
    }
    if (rc == 0 && moe && c->num_experts > 0) rc = export_experts(rd, c, moe, &tl, x, err, errlen);
    ckpt_tensor_list_free(&tl);
    if (!bert) { /* PEFT matches each by suffix: Mixtral's experts are w1 (gate), w3 (up), w2 (down) */
        static const char *const mixtral[GPT_LORA_NMODULES] = {"q_proj", "k_proj", "v_proj", "o_proj", "w1", "w3", "w2"};
        int mix = moe && strcmp(moe, "mixtral") == 0;
        for (int m = 0; m < GPT_LORA_NMODULES; m++)
            if (gpt_lora_on(c, m)) cJSON_AddItemToArray(*targets, cJSON_CreateString(mix ? mixtral[m] : llama_mods[m]));
        return rc;
    }
    static const char *const re[GPT_LORA_NMODULES] = {"attention\\.self\\.query", "attention\\.self\\.key",
                                                      "attention\\.self\\.value", "attention\\.output\\.dense",
                                                      NULL, "intermediate\\.dense", "output\\.dense"};
    char pat[512] = ".*\\.layer\\.\\d+\\.(";
    for (int m = 0, first = 1; m < GPT_LORA_NMODULES; m++)
        if (gpt_lora_on(c, m) && re[m]) {
            size_t n = strlen(pat);
            snprintf(pat + n, sizeof pat - n, "%s%s", first ? "" : "|", re[m]);
            first = 0;
        }
    size_t n = strlen(pat);
    snprintf(pat + n, sizeof pat - n, ")");
    cJSON_Delete(*targets);
    *targets = cJSON_CreateString(pat);
    return rc;
}

int peft_export(const ckpt_meta *meta, const char *out, int *modules, char *err, size_t errlen)
{
    const gpt_config *c = &meta->model;
    ckpt_reader *r = NULL;
    export_list x = {0};
    char *text = NULL;
    cJSON *targets = cJSON_CreateArray();
    int rc = -1, R = c->lora_rank;
    *modules = 0;
    if (!gpt_lora(c))
        FAIL("--from trident %s: the checkpoint has no LoRA adapters (lora_rank 0 in its meta.json): train them with "
             "--lora-rank", meta->dir);
    char why[1024];
    const hf_family *fam = hf_family_of_model(c, why, sizeof why);
    int gpt2 = fam && strcmp(fam->model_type, "gpt2") == 0, bert = fam && fam->kind == GPT_KIND_ENCODER;
    const char *moe = fam && (strcmp(fam->model_type, "mixtral") == 0 || strcmp(fam->model_type, "qwen2_moe") == 0)
                          ? fam->model_type
                          : NULL;
    if (!gpt2 && !bert && (c->norm != GPT_NORM_RMSNORM || !c->glu || c->kind != GPT_KIND_DECODER))
        FAIL("--to peft: %s is neither GPT-2, Megatron-BERT nor a Llama-family model (RMSNorm, a gated MLP): PEFT's "
             "module names are written for those; export the merged model with --to hf", meta->dir);
    char path[4200], tmp[4300];
    ckf_join(path, sizeof path, out, "adapter_model.safetensors");
    if (access(path, F_OK) == 0)
        FAIL("--to peft %s already holds an adapter (%s): give an empty or new folder, or remove it first", out, path);
    r = ckpt_reader_open(meta, err, errlen);
    if (!r) goto fail;
    if (gpt2 ? export_gpt2(r, c, &x, &R, targets, err, errlen) : export_linear(r, c, bert, moe, &x, &targets, err, errlen))
        goto fail;
    *modules = x.n / 2;
    if (ckf_mkdirs(out) != 0) FAIL("cannot create %s: %s", out, td_strerror(errno));
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    if (st_write(tmp, x.e, x.n, mk, mv, 1, 1, err, errlen)) goto fail;
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        FAIL("cannot rename %s to %s: %s", tmp, path, td_strerror(errno));
    }
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(cfg, "peft_type", "LORA");
    if (!bert) cJSON_AddStringToObject(cfg, "task_type", "CAUSAL_LM"); /* (PEFT has no task for pretraining BERT) */
    cJSON_AddNullToObject(cfg, "base_model_name_or_path");
    cJSON_AddNumberToObject(cfg, "r", R);
    /* alpha' / R = alpha / r (R = r but for GPT-2's stacked c_attn) */
    cJSON_AddNumberToObject(cfg, "lora_alpha", ckpt_float_value(c->lora_alpha) * (double)(R / c->lora_rank));
    cJSON_AddNumberToObject(cfg, "lora_dropout", ckpt_float_value(c->lora_dropout));
    cJSON_AddItemToObject(cfg, "target_modules", targets);
    targets = NULL;
    cJSON_AddStringToObject(cfg, "bias", "none");
    cJSON_AddBoolToObject(cfg, "fan_in_fan_out", gpt2); /* GPT-2's Conv1D stores its weights (in, out) */
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
    cJSON_Delete(targets);
    export_free(&x);
    free(text);
    if (r) ckpt_reader_close(r);
    return rc;
}
