/* Hugging Face interchange: see include/ckpt/trident/hf.h and docs/convert.md. The families are
 * rows of pieces and config readers and writers (hf_impl.h), one file each (hf_gpt2.c,
 * hf_llama.c, ...), listed in hf_families.c; this file exports and imports through them and
 * names none. */
#include "trident/hf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "backend.h"
#include "ckpt_fs.h"
#include "trident/check.h"
#include "trident/gpt.h"
#include "trident/half.h"
#include "trident/parallel_state.h"
#include "trident/safetensors.h"
#include "ckpt_impl.h"
#include "hf_impl.h"

#define FAIL(...)                                                                        \
    do {                                                                                 \
        snprintf(err, errlen, __VA_ARGS__);                                              \
        goto fail;                                                                       \
    } while (0)

/* out (cols, rows) = in (rows, cols) transposed. */
static void transpose(float *out, const float *in, int64_t rows, int64_t cols)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) out[j * rows + i] = in[i * cols + j];
}

int hf_max_pieces(const gpt_config *c)
{
    return 2 * c->num_experts > 3 ? 2 * c->num_experts : 3;
}

int hf_piece_of(hf_piece *p, int64_t row0, int64_t rows, const char *fmt, int layer)
{
    memset(p, 0, sizeof *p);
    snprintf(p->hf, sizeof p->hf, fmt, layer);
    p->row0 = row0;
    p->rows = rows;
    return 1;
}

int hf_expert_pieces(hf_piece *out, int layer, int E, int64_t rows, const char *const *fmts, int nfmt)
{
    for (int e = 0, n = 0; e < E; e++)
        for (int j = 0; j < nfmt; j++, n++) {
            memset(&out[n], 0, sizeof out[n]);
            snprintf(out[n].hf, sizeof out[n].hf, fmts[j], layer, e);
            out[n].row0 = (int64_t)n * rows;
            out[n].rows = rows;
        }
    return E * nfmt;
}

const char *hf_class_of(const gpt_config *c)
{
    for (int i = 0; hf_families[i]; i++)
        if (hf_families[i]->kind == c->kind) return hf_families[i]->arch;
    return NULL;
}

const hf_family *hf_family_of_model(const gpt_config *c, char *err, size_t errlen)
{
    char why[1024] = "";
    for (int i = 0; hf_families[i]; i++) {
        const hf_family *f = hf_families[i];
        const char *w = c->kind != f->kind ? "another model family (--model)" : f->mismatch(c);
        if (!w) return f;
        size_t n = strlen(why);
        snprintf(why + n, sizeof why - n, "%s%s: %s", i ? "; " : "", f->arch, w);
    }
    snprintf(err, errlen, "this model has no Hugging Face counterpart (%s)", why);
    return NULL;
}

/* Rows of the piece (its own count, or the whole tensor's; the vocabulary unpadded). */
static int64_t piece_rows(const hf_piece *p, const gpt_config *c, const char *name, int64_t rows)
{
    if (p->rows >= 0) return p->rows;
    if (ckpt_is_vocab_tensor(name)) return c->vocab;
    return rows;
}

/* buf (n floats) narrowed in place to dtype t (F16, BF16: into its first 2n bytes); F32 stays. */
static void narrow(float *buf, size_t n, st_dtype t)
{
    uint16_t *h = (uint16_t *)buf;
    if (t == ST_F16)
        for (size_t i = 0; i < n; i++) h[i] = td_f32_to_f16(buf[i]); /* h[i] overwrites bytes of buf[<= i] */
    else if (t == ST_BF16)
        for (size_t i = 0; i < n; i++) h[i] = td_f32_to_bf16(buf[i]);
}

/* The file of a Hugging Face model OUT already holds (config.json, weights), or NULL. */
/* LoRA (a checkpoint of train --lora-rank): the adapters of the base tensor `name` (the logical,
 * whole tensor in w, rows x cols) merged into it as PEFT's merge_and_unload does, w += alpha / r
 * B A over each module's rows of trident's fused tensors, in double and rounded once to float.
 * The experts' (MoE): each expert e's adapters, the rows e of their stacks, into its own rows; the
 * shared expert's as a dense MLP's of its width. */
static int lora_merge(ckpt_reader *r, const gpt_config *c, const char *name, float *w, int64_t cols, char *err,
                      size_t errlen)
{
    static const struct {
        const char *base, *mod; /* the base tensor's suffix, the module's prefix */
        int module;
    } map[] = {
        {"attn.qkv.weight", "attn.q_proj", GPT_LORA_Q}, {"attn.qkv.weight", "attn.k_proj", GPT_LORA_K},
        {"attn.qkv.weight", "attn.v_proj", GPT_LORA_V}, {"attn.q.weight", "attn.q_proj", GPT_LORA_Q},
        {"attn.kv.weight", "attn.k_proj", GPT_LORA_K},  {"attn.kv.weight", "attn.v_proj", GPT_LORA_V},
        {"attn.proj.weight", "attn.o_proj", GPT_LORA_O}, {"mlp.fc.weight", "mlp.gate_proj", GPT_LORA_GATE},
        {"mlp.fc.weight", "mlp.up_proj", GPT_LORA_UP},  {"mlp.fc2.weight", "mlp.down_proj", GPT_LORA_DOWN},
        {"mlp.experts.fc.weight", "mlp.experts.gate_proj", GPT_LORA_GATE},
        {"mlp.experts.fc.weight", "mlp.experts.up_proj", GPT_LORA_UP},
        {"mlp.experts.fc2.weight", "mlp.experts.down_proj", GPT_LORA_DOWN},
        {"mlp.shared_expert.fc.weight", "mlp.shared_expert.gate_proj", GPT_LORA_GATE},
        {"mlp.shared_expert.fc.weight", "mlp.shared_expert.up_proj", GPT_LORA_UP},
        {"mlp.shared_expert.fc2.weight", "mlp.shared_expert.down_proj", GPT_LORA_DOWN},
    };
    int l;
    char rest[64];
    if (!gpt_lora(c) || sscanf(name, "layers.%d.%63s", &l, rest) != 2) return 0;
    int64_t q = gpt_q_width(c), kv = gpt_kv_width(c), rk = c->lora_rank;
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
        if (strcmp(rest, map[i].base) != 0 || !gpt_lora_on(c, map[i].module)) continue;
        int m = map[i].module;
        int64_t E = strstr(map[i].base, "experts.") ? c->num_experts : 1, f = E > 1 ? gpt_moe_ffn(c) : c->ffn;
        if (strstr(map[i].base, "shared_expert.")) f = c->moe_shared_ffn; /* a dense MLP of its own width */
        /* the module's rows of the fused tensor (of each expert's block of stride `stride` rows) */
        int64_t off = 0, rows = m == GPT_LORA_Q ? q : m == GPT_LORA_K || m == GPT_LORA_V ? kv
                                                   : m == GPT_LORA_GATE || m == GPT_LORA_UP ? f : c->hidden;
        int64_t stride = m == GPT_LORA_GATE || m == GPT_LORA_UP ? gpt_fc_blocks(c) * f : rows;
        if (!gpt_gqa(c) && (m == GPT_LORA_K || m == GPT_LORA_V)) off = m == GPT_LORA_K ? q : 2 * q;
        if (gpt_gqa(c) && m == GPT_LORA_V) off = kv;
        if (m == GPT_LORA_UP && c->glu) off = f;
        char an[96], bn[96];
        snprintf(an, sizeof an, "layers.%d.%s.lora_A.weight", l, map[i].mod);
        snprintf(bn, sizeof bn, "layers.%d.%s.lora_B.weight", l, map[i].mod);
        ckpt_slice sa = ckpt_slice_whole(E * rk, cols), sb = ckpt_slice_whole(E * rows, rk);
        float *A = td_xmalloc((size_t)(E * rk * cols) * sizeof(float));
        float *B = td_xmalloc((size_t)(E * rows * rk) * sizeof(float));
        if (ckpt_read(r, CKPT_PARAMS, an, &sa, A, err, errlen) || ckpt_read(r, CKPT_PARAMS, bn, &sb, B, err, errlen)) {
            free(A);
            free(B);
            return -1;
        }
        double scaling = (double)c->lora_alpha / (double)rk;
        for (int64_t e = 0; e < E; e++) {
            const float *Ae = A + e * rk * cols, *Be = B + e * rows * rk;
            for (int64_t o = 0; o < rows; o++)
                for (int64_t j = 0; j < cols; j++) {
                    double d = 0;
                    for (int64_t k = 0; k < rk; k++) d += (double)Be[o * rk + k] * (double)Ae[k * cols + j];
                    float *x = &w[(e * stride + off + o) * cols + j];
                    *x = (float)((double)*x + scaling * d);
                }
        }
        free(A);
        free(B);
    }
    return 0;
}

static const char *hf_model_file(const char *out, char *path, size_t len)
{
    static const char *const files[] = {"config.json", "model.safetensors", "model.safetensors.index.json",
                                        "pytorch_model.bin"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        ckf_join(path, len, out, files[i]);
        if (ckf_exists(path)) return path;
    }
    return NULL;
}

int hf_export(const ckpt_meta *meta, const char *out, st_dtype dtype, char *err, size_t errlen)
{
    ckpt_reader *r = NULL;
    ckpt_tensor_list tl = {0};
    st_entry *e = NULL;
    char **names = NULL;
    float **bufs = NULL;
    hf_piece *pc = NULL;
    char *text = NULL;
    int n = 0, rc = -1;
    const gpt_config *c = &meta->model;
    char held[4200];
    if (hf_model_file(out, held, sizeof held)) {
        snprintf(err, errlen, "--to hf %s already holds a model (%s): converting into it would replace it; give an "
                 "empty or new folder, or remove it first", out, held);
        return -1;
    }
    const hf_family *fam = hf_family_of_model(c, err, errlen);
    if (!fam) return -1;
    r = ckpt_reader_open(meta, err, errlen);
    if (!r) goto fail;
    ckpt_list_tensors(r, &tl);
    pc = td_xmalloc((size_t)hf_max_pieces(c) * sizeof *pc);
    size_t total = 1;
    for (int i = 0; i < tl.n; i++)
        if (!(gpt_lora(c) && strstr(tl.names[i], ".lora_"))) total += (size_t)fam->pieces(c, tl.names[i], pc);
    e = td_xcalloc(total, sizeof *e);
    names = td_xcalloc(total, sizeof *names);
    bufs = td_xcalloc(total, sizeof *bufs);
    for (int i = 0; i < tl.n; i++) {
        if (gpt_lora(c) && strstr(tl.names[i], ".lora_")) continue; /* merged into their base tensors */
        int np = fam->pieces(c, tl.names[i], pc);
        if (np == 0) FAIL("%s: tensor %s has no %s counterpart", meta->dir, tl.names[i], fam->arch);
        ckpt_slice s = tl.shapes[i];
        int64_t cols = s.ndim == 2 ? s.shape[1] : 1;
        if (np == 1) s.shape[0] = piece_rows(&pc[0], c, tl.names[i], s.shape[0]); /* unpadded vocabulary */
        float *whole = td_xmalloc((size_t)(s.shape[0] * cols) * sizeof(float));
        if (ckpt_read(r, CKPT_PARAMS, tl.names[i], &s, whole, err, errlen) ||
            lora_merge(r, c, tl.names[i], whole, cols, err, errlen)) {
            free(whole);
            goto fail;
        }
        for (int k = 0; k < np; k++, n++) {
            int64_t rows = piece_rows(&pc[k], c, tl.names[i], s.shape[0]);
            float *buf = td_xmalloc((size_t)(rows * cols) * sizeof(float));
            if (pc[k].transpose) transpose(buf, whole + pc[k].row0 * cols, rows, cols);
            else memcpy(buf, whole + pc[k].row0 * cols, (size_t)(rows * cols) * sizeof(float));
            bufs[n] = buf;
            names[n] = td_xstrdup(pc[k].hf);
            e[n].name = names[n];
            narrow(buf, (size_t)(rows * cols), dtype);
            e[n].dtype = dtype;
            e[n].ndim = s.ndim;
            e[n].shape[0] = pc[k].transpose ? cols : rows;
            e[n].shape[1] = pc[k].transpose ? rows : cols;
            e[n].data = buf;
            e[n].bytes = (size_t)(rows * cols) * st_dtype_size(dtype);
        }
        free(whole);
    }
    if (ckf_mkdirs(out) != 0) FAIL("cannot create %s: %s", out, td_strerror(errno));
    char path[4200], tmp[4300];
    ckf_join(path, sizeof path, out, "model.safetensors");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    if (st_write(tmp, e, n, mk, mv, 1, 1, err, errlen)) goto fail;
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        FAIL("cannot rename %s to %s: %s", tmp, path, td_strerror(errno));
    }
    cJSON *cfg = fam->config(c);
    cJSON_ReplaceItemInObjectCaseSensitive(cfg, "torch_dtype",
                                           cJSON_CreateString(dtype == ST_F16    ? "float16"
                                                              : dtype == ST_BF16 ? "bfloat16"
                                                                                 : "float32"));
    text = cJSON_Print(cfg);
    cJSON_Delete(cfg);
    size_t len = strlen(text);
    text = td_xrealloc(text, len + 2);
    text[len++] = '\n';
    ckf_join(path, sizeof path, out, "config.json");
    if (ckf_write_atomic(path, text, len) != 0) FAIL("cannot write %s: %s", path, td_strerror(errno));
    if (ckf_fsync_dir(out) != 0) FAIL("cannot fsync %s: %s", out, td_strerror(errno));
    rc = 0;
fail:
    for (int i = 0; i < n; i++) {
        free(names[i]);
        free(bufs[i]);
    }
    free(names);
    free(bufs);
    free(e);
    free(pc);
    free(text);
    ckpt_tensor_list_free(&tl);
    ckpt_reader_close(r);
    return rc;
}

/* ---- import ---- */

/* Converts n elements of an F32, F16 or BF16 tensor to float. */
static void to_float(float *dst, const void *src, st_dtype t, size_t n)
{
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++) {
        if (t == ST_F32) {
            memcpy(&dst[i], p + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = t == ST_F16 ? td_f16_to_f32(h) : td_bf16_to_f32(h);
        }
    }
}

int hf_json_act(const cJSON *o, const char *key, const char *dflt, const char *path, int *act, char *err,
                size_t errlen)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    const char *name = cJSON_IsString(j) ? j->valuestring : dflt;
    int a = td_act_from_hf(name);
    if (a < 0) {
        snprintf(err, errlen, "%s: %s '%s' is not an activation trident computes (gelu_new, gelu_pytorch_tanh, "
                 "gelu_fast, gelu, silu, relu, relu2)", path, key, name);
        return -1;
    }
    *act = a;
    return 0;
}

int hf_json_int(const cJSON *o, const char *key, int def, int *v)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j || cJSON_IsNull(j)) {
        *v = def;
        return def >= 0 ? 0 : -1;
    }
    if (!cJSON_IsNumber(j) || j->valuedouble < 1 || j->valuedouble > (1 << 24) || floor(j->valuedouble) != j->valuedouble)
        return -1;
    *v = (int)j->valuedouble;
    return 0;
}

double hf_json_num(const cJSON *o, const char *key, double def)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(j) ? j->valuedouble : def;
}

int hf_json_bool(const cJSON *o, const char *key, int def)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(j) ? cJSON_IsTrue(j) : def;
}

void hf_model_types(char *out, size_t len)
{
    const char *names[32];
    int n = 0;
    for (int i = 0; hf_families[i] && n < 30; i++) {
        names[n++] = hf_families[i]->model_type;
        if (hf_families[i]->alias) names[n++] = hf_families[i]->alias;
    }
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < n && at < len; i++)
        at += (size_t)snprintf(out + at, len - at, "%s%s", i == 0 ? "" : i == n - 1 ? " and " : ", ", names[i]);
}

/* The family and model of IN/config.json; -1 with err when it is not one trident computes. */
static const hf_family *read_config(const char *in, gpt_config *c, int divisible_by, char *err, size_t errlen)
{
    char path[4200];
    ckf_join(path, sizeof path, in, "config.json");
    size_t len;
    char *text = ckf_read_text(path, &len, 1 << 24);
    cJSON *o = NULL;
    const hf_family *fam = NULL;
    if (!text) FAIL("cannot read %s: %s", path, td_strerror(errno));
    o = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsObject(o)) FAIL("%s is not valid JSON", path);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(o, "model_type");
    const char *type = cJSON_IsString(mt) ? mt->valuestring : "gpt2";
    for (int i = 0; hf_families[i] && !fam; i++)
        if (strcmp(type, hf_families[i]->model_type) == 0 ||
            (hf_families[i]->alias && strcmp(type, hf_families[i]->alias) == 0))
            fam = hf_families[i];
    if (!fam) {
        char known[256];
        hf_model_types(known, sizeof known);
        FAIL("%s: model_type is '%s'; %s convert", path, type, known);
    }
    memset(c, 0, sizeof *c);
    if (fam->read_config(o, path, c, err, errlen)) {
        fam = NULL;
        goto fail;
    }
    c->padded_vocab = gpt_padded_vocab(c->vocab, divisible_by, 1);
    c->init_std = (float)hf_json_num(o, "initializer_range", 0.02);
    c->seed = 1234;
    c->seq = 1; /* sizes only the (unused) activation arena */
fail:
    cJSON_Delete(o);
    free(text);
    return fam;
}

/* The safetensors files of a Hugging Face folder: model.safetensors, or the shards that
 * model.safetensors.index.json's weight_map names (how models larger than a few GB are
 * published); a tensor is looked up in all of them. */
typedef struct hf_files {
    char where[4300]; /* model.safetensors or the index, for messages */
    int n;
    st_file **f;
    char **used;      /* used[i][j]: tensor j of file i was read */
} hf_files;

static void close_files(hf_files *fs)
{
    for (int i = 0; i < fs->n; i++) {
        st_close(fs->f[i]);
        free(fs->used[i]);
    }
    free(fs->f);
    free(fs->used);
    memset(fs, 0, sizeof *fs);
}

/* Opens file `name` of folder `in` as fs's next. */
static int add_file(hf_files *fs, const char *in, const char *name, char *err, size_t errlen)
{
    char path[4200];
    ckf_join(path, sizeof path, in, name);
    st_file *f = st_open(path, err, errlen);
    if (!f) return -1;
    fs->f = td_xrealloc(fs->f, (size_t)(fs->n + 1) * sizeof *fs->f);
    fs->used = td_xrealloc(fs->used, (size_t)(fs->n + 1) * sizeof *fs->used);
    fs->f[fs->n] = f;
    fs->used[fs->n++] = td_xcalloc((size_t)(f->h.ntensors ? f->h.ntensors : 1), 1);
    return 0;
}

/* The file of fs named `name` (a shard's file name), or -1. */
static int file_index(const hf_files *fs, const char *in, const char *name)
{
    char path[4200];
    ckf_join(path, sizeof path, in, name);
    for (int i = 0; i < fs->n; i++)
        if (strcmp(fs->f[i]->path, path) == 0) return i;
    return -1;
}

/* The shards of IN's index (fs->where): each file its weight_map names, opened once, holding the
 * tensors it is named for, and no tensor in two of them. */
static int open_shards(hf_files *fs, const char *in, char *err, size_t errlen)
{
    size_t len;
    char why[4600];
    char *text = ckf_read_text(fs->where, &len, (size_t)1 << 28);
    cJSON *o = NULL;
    int rc = -1;
    if (!text) FAIL("cannot read %s: %s", fs->where, td_strerror(errno));
    o = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsObject(o)) FAIL("%s is not valid JSON", fs->where);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(o, "weight_map"), *e;
    if (!cJSON_IsObject(map) || !map->child) FAIL("%s has no weight_map (tensor name -> shard file)", fs->where);
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e) || !e->valuestring[0] || strchr(e->valuestring, '/') || strcmp(e->valuestring, ".") == 0 ||
            strcmp(e->valuestring, "..") == 0)
            FAIL("%s: weight_map's entry for %s is not a file name of the folder", fs->where, e->string);
        if (file_index(fs, in, e->valuestring) < 0 && add_file(fs, in, e->valuestring, why, sizeof why))
            FAIL("%s names shard %s, which does not open: %s", fs->where, e->valuestring, why);
        const st_file *f = fs->f[file_index(fs, in, e->valuestring)];
        if (!st_find(&f->h, e->string))
            FAIL("%s: weight_map puts %s in %s, which does not hold it", fs->where, e->string, e->valuestring);
    }
    for (int i = 1; i < fs->n; i++)
        for (int j = 0; j < fs->f[i]->h.ntensors; j++)
            for (int k = 0; k < i; k++)
                if (st_find(&fs->f[k]->h, fs->f[i]->h.tensors[j].name))
                    FAIL("%s: tensor %s is in two shards, %s and %s", fs->where, fs->f[i]->h.tensors[j].name,
                         fs->f[k]->path, fs->f[i]->path);
    rc = 0;
fail:
    cJSON_Delete(o);
    free(text);
    return rc;
}

/* IN's model.safetensors, or its shards; -1 with err (nothing open). */
static int open_files(hf_files *fs, const char *in, char *err, size_t errlen)
{
    memset(fs, 0, sizeof *fs);
    ckf_join(fs->where, sizeof fs->where, in, "model.safetensors");
    if (ckf_exists(fs->where)) {
        if (add_file(fs, in, "model.safetensors", err, errlen) == 0) return 0;
    } else {
        size_t n = strlen(fs->where);
        snprintf(fs->where + n, sizeof fs->where - n, ".index.json");
        if (!ckf_exists(fs->where))
            snprintf(err, errlen, "%s has no model.safetensors nor model.safetensors.index.json (only safetensors "
                     "files convert; save with safe_serialization=True)", in);
        else if (open_shards(fs, in, err, errlen) == 0)
            return 0;
    }
    close_files(fs);
    return -1;
}

/* The tensor called `name` (with or without "transformer.") and its file (*fi), or NULL. */
static const st_tensor *find_hf(const hf_files *fs, const char *name, int *fi)
{
    for (int i = 0; i < fs->n; i++) {
        const st_tensor *t = st_find(&fs->f[i]->h, name);
        if (!t && strncmp(name, "transformer.", 12) == 0) t = st_find(&fs->f[i]->h, name + 12);
        if (t) {
            *fi = i;
            return t;
        }
    }
    return NULL;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Buffers (GPT-2's attention masks, rotary tables) and a tied head, which carry no parameters
 * of their own, and those the family names (its ignorable). */
static int ignorable(const hf_family *fam, const char *name)
{
    return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
           ends_with(name, ".rotary_emb.inv_freq") || strcmp(name, "lm_head.weight") == 0 ||
           (fam->ignorable && fam->ignorable(name));
}

/* Fills the table entry t of m (host buffer `host`) from fs, piece by piece, marking the tensors
 * read. */
static int import_tensor(const hf_family *fam, hf_files *fs, const gpt_model *m, const gpt_tensor_info *t, float *host,
                         char *err, size_t errlen)
{
    hf_piece *pc = td_xmalloc((size_t)hf_max_pieces(&m->cfg) * sizeof *pc);
    float *tmp = NULL;
    int np = fam->pieces(&m->cfg, t->name, pc);
    TD_ASSERT(np > 0);
    int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1, filled = 0;
    float *dst = host + t->offset;
    for (int k = 0; k < np; k++) {
        const char *hn = pc[k].hf;
        int tr = pc[k].transpose;
        int fi;
        const st_tensor *s = find_hf(fs, hn, &fi);
        if (!s) FAIL("%s: tensor %s is missing", fs->where, hn);
        const st_file *f = fs->f[fi];
        fs->used[fi][s - f->h.tensors] = 1;
        if (s->dtype != ST_F32 && s->dtype != ST_F16 && s->dtype != ST_BF16)
            FAIL("%s: tensor %s is %s; F32, F16 or BF16 convert", f->path, hn, st_dtype_name(s->dtype));
        int64_t prow = piece_rows(&pc[k], &m->cfg, t->name, rows);
        int64_t want0 = tr ? cols : prow, want1 = tr ? prow : cols;
        if (s->ndim != t->ndim || s->shape[0] != want0 || (t->ndim == 2 && s->shape[1] != want1))
            FAIL("%s: tensor %s has shape [%lld%s%lld] but the config makes it [%lld%s%lld]", f->path, hn,
                 (long long)s->shape[0], s->ndim == 2 ? ", " : "", s->ndim == 2 ? (long long)s->shape[1] : 0LL,
                 (long long)want0, t->ndim == 2 ? ", " : "", t->ndim == 2 ? (long long)want1 : 0LL);
        size_t n = (size_t)(want0 * want1);
        tmp = td_xmalloc(n * sizeof(float));
        to_float(tmp, st_data(f, s), s->dtype, n);
        st_release(f, s); /* an import holds one tensor's mapped pages at a time */
        for (size_t i = 0; i < n; i++)
            if (!isfinite(tmp[i])) {
                char at2[64] = "";
                if (s->ndim == 2)
                    snprintf(at2, sizeof at2, " (row %lld, column %lld)", (long long)(i / (size_t)s->shape[1]),
                             (long long)(i % (size_t)s->shape[1]));
                FAIL("%s: tensor %s holds a non-finite value: element %zu%s of %zu is %g; such a model generates "
                     "garbage, so it is not converted: fix or re-export it", f->path, hn, i, at2, n, (double)tmp[i]);
            }
        float *at = dst + pc[k].row0 * cols;
        if (tr) transpose(at, tmp, want0, want1);
        else memcpy(at, tmp, n * sizeof(float));
        filled = pc[k].row0 + prow;
        free(tmp);
        tmp = NULL;
    }
    /* a padded vocabulary: the rows past the real ones are copies of the last (Megatron's rule) */
    for (int64_t r = filled; r < rows; r++) memcpy(dst + r * cols, dst + (filled - 1) * cols, (size_t)cols * sizeof(float));
    free(pc);
    return 0;
fail:
    free(pc);
    free(tmp);
    return -1;
}

int hf_import(const char *in, const char *out, int divisible_by, const char *backend_name, comm *world, char *err,
              size_t errlen)
{
    hf_files fs = {0};
    ps_state *ps = NULL;
    backend *be = NULL;
    gpt_model *m = NULL;
    float *host = NULL;
    int rc = -1;
    gpt_config c;
    ckpt_meta there;
    int held = ckpt_find(out, &there, err, errlen);
    if (held != 1) {
        if (held == 0) ckpt_meta_free(&there);
        snprintf(err, errlen, "--to trident %s already holds a checkpoint%s: converting into it would replace or outdate "
                 "it; give an empty or new folder", out, held == 0 ? "" : " (one that does not open)");
        return -1;
    }
    const hf_family *fam = read_config(in, &c, divisible_by, err, errlen);
    if (!fam) return -1;
    char why[1024];
    if (open_files(&fs, in, err, errlen)) return -1;
    ps = ps_init(world, 1, 1);
    be = be_create(backend_name, 0);
    m = gpt_create(&c, ps, be, 0, c.num_layers, 1, 1);
    host = td_xmalloc(m->numel_all * sizeof(float));
    for (int i = 0; i < m->ntensors; i++)
        if (import_tensor(fam, &fs, m, &m->table[i], host, err, errlen)) goto fail;
    for (int fi = 0; fi < fs.n; fi++)
        for (int i = 0; i < fs.f[fi]->h.ntensors; i++) {
            const st_file *f = fs.f[fi];
            const st_tensor *t = &f->h.tensors[i];
            if (fs.used[fi][i] || !ignorable(fam, t->name)) {
                if (!fs.used[fi][i]) FAIL("%s: unexpected tensor %s (not part of %s)", f->path, t->name, fam->arch);
                continue;
            }
            if (strcmp(t->name, "lm_head.weight") == 0) {
                /* must be the tied word embedding */
                hf_piece *wp = td_xmalloc((size_t)hf_max_pieces(&c) * sizeof *wp);
                fam->pieces(&c, "embedding.word.weight", wp);
                int wi;
                const st_tensor *w = find_hf(&fs, wp[0].hf, &wi);
                int same = t->dtype == w->dtype && t->end - t->begin == w->end - w->begin &&
                           memcmp(st_data(f, t), st_data(fs.f[wi], w), (size_t)(t->end - t->begin)) == 0;
                snprintf(why, sizeof why, "%s", wp[0].hf);
                free(wp);
                if (!same)
                    FAIL("%s: lm_head.weight differs from %s but the config ties them (tie_word_embeddings)", f->path,
                         why);
            }
        }
    be_memcpy(be, m->params, host, m->numel_all * sizeof(float), BE_H2D);
    m->cfg.seq = c.max_pos; /* recorded as the model's sequence length; the model is never run here */
    cJSON *args = cJSON_CreateObject();
    cJSON_AddNumberToObject(args, "num_layers", c.num_layers);
    cJSON_AddNumberToObject(args, "hidden_size", c.hidden);
    cJSON_AddNumberToObject(args, "num_attention_heads", c.heads);
    cJSON_AddNumberToObject(args, "ffn_hidden_size", c.ffn);
    cJSON_AddStringToObject(args, "architecture", fam->arch);
    cJSON_AddNumberToObject(args, "max_position_embeddings", c.max_pos);
    cJSON_AddNumberToObject(args, "make_vocab_size_divisible_by", divisible_by);
    cJSON_AddStringToObject(args, "converted_from", "hf");
    cJSON_AddStringToObject(args, "source", in);
    char *args_json = cJSON_PrintUnformatted(args);
    cJSON_Delete(args);
    ckpt_model cm = {ps, 1, &m, NULL, NULL, NULL, NULL};
    ckpt_progress prog = {.seed = c.seed};
    ckpt_new_run_id(prog.run_id); /* a converted checkpoint starts a run of its own */
    ckpt_save(out, &cm, &prog, args_json, 0, NULL);
    free(args_json);
    rc = 0;
fail:
    free(host);
    gpt_free(m);
    be_free(be);
    ps_free(ps);
    close_files(&fs);
    return rc;
}
