/* Hugging Face GPT-2 interchange: see include/trident/hf.h and docs/convert.md.
 *
 * trident                      transformers GPT2LMHeadModel
 * embedding.word.weight (Vp,h) transformer.wte.weight (V, h)      padded rows dropped / added
 * embedding.position.weight    transformer.wpe.weight (P, h)
 * layers.N.ln1.{weight,bias}   transformer.h.N.ln_1.{weight,bias}
 * layers.N.attn.qkv (3h, h)    transformer.h.N.attn.c_attn (h, 3h)  Conv1D: [in, out], transposed
 * layers.N.attn.proj (h, h)    transformer.h.N.attn.c_proj (h, h)   transposed
 * layers.N.ln2                 transformer.h.N.ln_2
 * layers.N.mlp.fc (f, h)       transformer.h.N.mlp.c_fc (h, f)      transposed
 * layers.N.mlp.fc2 (h, f)      transformer.h.N.mlp.c_proj (f, h)    transposed
 * final_norm                   transformer.ln_f
 * (head tied to wte)           lm_head.weight: not stored (tied)
 * Both lay q|k|v out as three blocks of h with the heads contiguous inside each, so c_attn's
 * columns are qkv's rows in the same order. */
#include "trident/hf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "backend/backend.h"
#include "ckpt/ckpt_fs.h"
#include "trident/check.h"
#include "trident/gpt.h"
#include "trident/parallel_state.h"
#include "trident/safetensors.h"

#define FAIL(...)                                                                        \
    do {                                                                                 \
        snprintf(err, errlen, __VA_ARGS__);                                              \
        goto fail;                                                                       \
    } while (0)

/* The GPT2LMHeadModel name of a trident tensor (with "transformer."), and whether its matrix is
 * stored transposed (Conv1D). -1 for a name with no counterpart. */
static int hf_name(const char *name, char *out, size_t n, int *transpose)
{
    static const struct {
        const char *trident, *hf;
        int transpose;
    } LAYER[] = {
        {"ln1.weight", "ln_1.weight", 0},           {"ln1.bias", "ln_1.bias", 0},
        {"attn.qkv.weight", "attn.c_attn.weight", 1}, {"attn.qkv.bias", "attn.c_attn.bias", 0},
        {"attn.proj.weight", "attn.c_proj.weight", 1}, {"attn.proj.bias", "attn.c_proj.bias", 0},
        {"ln2.weight", "ln_2.weight", 0},           {"ln2.bias", "ln_2.bias", 0},
        {"mlp.fc.weight", "mlp.c_fc.weight", 1},    {"mlp.fc.bias", "mlp.c_fc.bias", 0},
        {"mlp.fc2.weight", "mlp.c_proj.weight", 1}, {"mlp.fc2.bias", "mlp.c_proj.bias", 0},
    };
    *transpose = 0;
    if (strcmp(name, "embedding.word.weight") == 0) return snprintf(out, n, "transformer.wte.weight"), 0;
    if (strcmp(name, "embedding.position.weight") == 0) return snprintf(out, n, "transformer.wpe.weight"), 0;
    if (strcmp(name, "final_norm.weight") == 0) return snprintf(out, n, "transformer.ln_f.weight"), 0;
    if (strcmp(name, "final_norm.bias") == 0) return snprintf(out, n, "transformer.ln_f.bias"), 0;
    int l, k = 0;
    if (sscanf(name, "layers.%d.%n", &l, &k) != 1 || k == 0) return -1;
    for (size_t i = 0; i < sizeof LAYER / sizeof LAYER[0]; i++)
        if (strcmp(name + k, LAYER[i].trident) == 0) {
            *transpose = LAYER[i].transpose;
            snprintf(out, n, "transformer.h.%d.%s", l, LAYER[i].hf);
            return 0;
        }
    return -1;
}

/* out (cols, rows) = in (rows, cols) transposed. */
static void transpose(float *out, const float *in, int64_t rows, int64_t cols)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) out[j * rows + i] = in[i * cols + j];
}

/* ---- export ---- */

static cJSON *gpt2_config(const gpt_config *c)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(o, "model_type", "gpt2");
    cJSON_AddStringToObject(o, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab);
    cJSON_AddNumberToObject(o, "n_positions", c->max_pos);
    cJSON_AddNumberToObject(o, "n_ctx", c->max_pos);
    cJSON_AddNumberToObject(o, "n_embd", c->hidden);
    cJSON_AddNumberToObject(o, "n_layer", c->num_layers);
    cJSON_AddNumberToObject(o, "n_head", c->heads);
    if (c->ffn == 4 * c->hidden) cJSON_AddNullToObject(o, "n_inner");
    else cJSON_AddNumberToObject(o, "n_inner", c->ffn);
    cJSON_AddNumberToObject(o, "layer_norm_epsilon", 1e-5);
    cJSON_AddNumberToObject(o, "initializer_range", (double)c->init_std);
    cJSON_AddNumberToObject(o, "embd_pdrop", (double)c->hidden_dropout);
    cJSON_AddNumberToObject(o, "resid_pdrop", (double)c->hidden_dropout);
    cJSON_AddNumberToObject(o, "attn_pdrop", (double)c->attn_dropout);
    cJSON_AddBoolToObject(o, "scale_attn_weights", 1);
    cJSON_AddBoolToObject(o, "scale_attn_by_inverse_layer_idx", 0);
    cJSON_AddBoolToObject(o, "reorder_and_upcast_attn", 0);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", 1);
    cJSON_AddBoolToObject(o, "use_cache", 1);
    if (c->vocab == 50257) { /* GPT-2's BPE: <|endoftext|> */
        cJSON_AddNumberToObject(o, "bos_token_id", 50256);
        cJSON_AddNumberToObject(o, "eos_token_id", 50256);
    }
    cJSON_AddStringToObject(o, "torch_dtype", "float32");
    return o;
}

int hf_export(const ckpt_meta *meta, const char *out, char *err, size_t errlen)
{
    ckpt_reader *r = NULL;
    ckpt_tensor_list tl = {0};
    st_entry *e = NULL;
    char **names = NULL;
    float **bufs = NULL;
    char *text = NULL;
    int n = 0, rc = -1;
    const gpt_config *c = &meta->model;
    r = ckpt_reader_open(meta, err, errlen);
    if (!r) goto fail;
    ckpt_list_tensors(r, &tl);
    e = td_xcalloc((size_t)tl.n, sizeof *e);
    names = td_xcalloc((size_t)tl.n, sizeof *names);
    bufs = td_xcalloc((size_t)tl.n, sizeof *bufs);
    for (int i = 0; i < tl.n; i++, n++) {
        char hn[128];
        int tr;
        if (hf_name(tl.names[i], hn, sizeof hn, &tr)) FAIL("%s: tensor %s has no GPT-2 counterpart", meta->dir, tl.names[i]);
        ckpt_slice s = tl.shapes[i];
        if (strcmp(tl.names[i], "embedding.word.weight") == 0) s.shape[0] = c->vocab; /* unpadded */
        int64_t rows = s.shape[0], cols = s.ndim == 2 ? s.shape[1] : 1;
        float *buf = td_xmalloc((size_t)(rows * cols) * sizeof(float));
        bufs[i] = buf;
        if (ckpt_read(r, CKPT_PARAMS, tl.names[i], &s, buf, err, errlen)) goto fail;
        if (tr) {
            float *t = td_xmalloc((size_t)(rows * cols) * sizeof(float));
            transpose(t, buf, rows, cols);
            free(buf);
            bufs[i] = t;
        }
        names[i] = td_xstrdup(hn);
        e[i].name = names[i];
        e[i].dtype = ST_F32;
        e[i].ndim = s.ndim;
        e[i].shape[0] = tr ? cols : rows;
        e[i].shape[1] = tr ? rows : cols;
        e[i].data = bufs[i];
        e[i].bytes = (size_t)(rows * cols) * sizeof(float);
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
    cJSON *cfg = gpt2_config(c);
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
    for (int i = 0; i < tl.n; i++) {
        if (names) free(names[i]);
        if (bufs) free(bufs[i]);
    }
    free(names);
    free(bufs);
    free(e);
    free(text);
    ckpt_tensor_list_free(&tl);
    ckpt_reader_close(r);
    return rc;
}

/* ---- import ---- */

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else { /* subnormal: renormalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | man << 13;
    } else {
        bits = sign | (exp + 112) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

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
            if (t == ST_F16) dst[i] = half_to_float(h);
            else {
                uint32_t bits = (uint32_t)h << 16;
                memcpy(&dst[i], &bits, 4);
            }
        }
    }
}

static int json_int(const cJSON *o, const char *key, int def, int *v)
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

static double json_num(const cJSON *o, const char *key, double def)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(j) ? j->valuedouble : def;
}

static int json_bool(const cJSON *o, const char *key, int def)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(j) ? cJSON_IsTrue(j) : def;
}

/* The model of a GPT-2 config.json; -1 with err when it is not one trident computes exactly. */
static int read_config(const char *in, gpt_config *c, int divisible_by, char *err, size_t errlen)
{
    char path[4200];
    ckf_join(path, sizeof path, in, "config.json");
    size_t len;
    char *text = ckf_read_text(path, &len, 1 << 24);
    cJSON *o = NULL;
    if (!text) FAIL("cannot read %s: %s", path, td_strerror(errno));
    o = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsObject(o)) FAIL("%s is not valid JSON", path);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(o, "model_type");
    if (cJSON_IsString(mt) && strcmp(mt->valuestring, "gpt2") != 0)
        FAIL("%s: model_type is '%s'; only gpt2 converts", path, mt->valuestring);
    memset(c, 0, sizeof *c);
    int pos;
    if (json_int(o, "n_embd", -1, &c->hidden) || json_int(o, "n_layer", -1, &c->num_layers) ||
        json_int(o, "n_head", -1, &c->heads) || json_int(o, "vocab_size", -1, &c->vocab) ||
        json_int(o, "n_ctx", 0, &pos) || json_int(o, "n_positions", pos ? pos : -1, &c->max_pos) ||
        json_int(o, "n_inner", 0, &c->ffn))
        FAIL("%s: n_embd, n_layer, n_head, n_positions and vocab_size must be positive integers (n_inner too, or "
             "null)", path);
    if (!c->ffn) c->ffn = 4 * c->hidden;
    if (c->hidden % c->heads) FAIL("%s: n_embd %d is not divisible by n_head %d", path, c->hidden, c->heads);
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(o, "activation_function");
    const char *a = cJSON_IsString(act) ? act->valuestring : "gelu_new";
    if (strcmp(a, "gelu_new") && strcmp(a, "gelu_pytorch_tanh") && strcmp(a, "gelu_fast"))
        FAIL("%s: activation_function '%s' is not the tanh GeLU trident computes (gelu_new)", path, a);
    if (fabs(json_num(o, "layer_norm_epsilon", 1e-5) - 1e-5) > 1e-12)
        FAIL("%s: layer_norm_epsilon %g is not trident's 1e-5", path, json_num(o, "layer_norm_epsilon", 1e-5));
    if (!json_bool(o, "scale_attn_weights", 1) || json_bool(o, "scale_attn_by_inverse_layer_idx", 0))
        FAIL("%s: attention scaling other than 1/sqrt(head size) is not supported", path);
    c->padded_vocab = gpt_padded_vocab(c->vocab, divisible_by, 1);
    c->init_std = (float)json_num(o, "initializer_range", 0.02);
    c->hidden_dropout = (float)json_num(o, "resid_pdrop", 0.1);
    c->attn_dropout = (float)json_num(o, "attn_pdrop", 0.1);
    c->seed = 1234;
    c->seq = 1; /* sizes only the (unused) activation arena */
    cJSON_Delete(o);
    free(text);
    return 0;
fail:
    cJSON_Delete(o);
    free(text);
    return -1;
}

/* The tensor of f called `name` (with or without "transformer."). */
static const st_tensor *find_hf(const st_file *f, const char *name)
{
    const st_tensor *t = st_find(&f->h, name);
    if (!t && strncmp(name, "transformer.", 12) == 0) t = st_find(&f->h, name + 12);
    return t;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Buffers and the tied head, which carry no parameters of their own. */
static int ignorable(const char *name)
{
    return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") || strcmp(name, "lm_head.weight") == 0;
}

/* Fills the table entry t of m (host buffer `host`) from f. used[i] marks f's tensors read. */
static int import_tensor(const st_file *f, const gpt_model *m, const gpt_tensor_info *t, float *host, char *used,
                         char *err, size_t errlen)
{
    char hn[128];
    int tr;
    float *tmp = NULL;
    TD_ASSERT(hf_name(t->name, hn, sizeof hn, &tr) == 0);
    const st_tensor *s = find_hf(f, hn);
    if (!s) FAIL("%s: tensor %s is missing", f->path, hn);
    used[s - f->h.tensors] = 1;
    if (s->dtype != ST_F32 && s->dtype != ST_F16 && s->dtype != ST_BF16)
        FAIL("%s: tensor %s is %s; F32, F16 or BF16 convert", f->path, hn, st_dtype_name(s->dtype));
    int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
    int word = strcmp(t->name, "embedding.word.weight") == 0;
    int64_t want0 = tr ? cols : word ? m->cfg.vocab : rows, want1 = tr ? rows : cols;
    if (s->ndim != t->ndim || s->shape[0] != want0 || (t->ndim == 2 && s->shape[1] != want1))
        FAIL("%s: tensor %s has shape [%lld%s%lld] but the config makes it [%lld%s%lld]", f->path, hn,
             (long long)s->shape[0], s->ndim == 2 ? ", " : "", s->ndim == 2 ? (long long)s->shape[1] : 0LL,
             (long long)want0, t->ndim == 2 ? ", " : "", t->ndim == 2 ? (long long)want1 : 0LL);
    size_t n = (size_t)(want0 * want1);
    tmp = td_xmalloc(n * sizeof(float));
    to_float(tmp, st_data(f, s), s->dtype, n);
    float *dst = host + t->offset;
    if (tr) transpose(dst, tmp, want0, want1);
    else memcpy(dst, tmp, n * sizeof(float));
    if (word) /* padded rows: copies of the last row (Megatron's rule) */
        for (int64_t r = want0; r < rows; r++) memcpy(dst + r * cols, tmp + (want0 - 1) * cols, (size_t)cols * sizeof(float));
    free(tmp);
    return 0;
fail:
    free(tmp);
    return -1;
}

int hf_import(const char *in, const char *out, int divisible_by, comm *world, char *err, size_t errlen)
{
    st_file *f = NULL;
    ps_state *ps = NULL;
    backend *be = NULL;
    gpt_model *m = NULL;
    float *host = NULL;
    char *used = NULL;
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
    if (read_config(in, &c, divisible_by, err, errlen)) return -1;
    char path[4200], why[1024];
    ckf_join(path, sizeof path, in, "model.safetensors");
    if (!ckf_exists(path)) {
        char idx[4300];
        snprintf(idx, sizeof idx, "%s.index.json", path);
        if (ckf_exists(idx)) FAIL("%s: sharded safetensors checkpoints are not supported; merge the shards first", in);
        FAIL("%s has no model.safetensors (only safetensors files convert; save with safe_serialization=True)", in);
    }
    f = st_open(path, why, sizeof why);
    if (!f) FAIL("%s", why);
    used = td_xcalloc((size_t)(f->h.ntensors ? f->h.ntensors : 1), 1);
    ps = ps_init(world, 1, 1);
    be = be_cpu(0);
    m = gpt_create(&c, ps, be, 0, c.num_layers, 1, 1);
    host = td_xmalloc(m->numel * sizeof(float));
    for (int i = 0; i < m->ntensors; i++)
        if (import_tensor(f, m, &m->table[i], host, used, err, errlen)) goto fail;
    for (int i = 0; i < f->h.ntensors; i++) {
        const st_tensor *t = &f->h.tensors[i];
        if (used[i] || !ignorable(t->name)) {
            if (!used[i]) FAIL("%s: unexpected tensor %s (not part of GPT-2)", path, t->name);
            continue;
        }
        if (strcmp(t->name, "lm_head.weight") == 0) {
            /* must be the tied word embedding */
            const st_tensor *w = find_hf(f, "transformer.wte.weight");
            if (t->dtype != w->dtype || t->end - t->begin != w->end - w->begin ||
                memcmp(st_data(f, t), st_data(f, w), (size_t)(t->end - t->begin)) != 0)
                FAIL("%s: lm_head.weight differs from wte.weight; an untied LM head is not supported", path);
        }
    }
    be_memcpy(be, m->params, host, m->numel * sizeof(float), BE_H2D);
    m->cfg.seq = c.max_pos; /* recorded as the model's sequence length; the model is never run here */
    cJSON *args = cJSON_CreateObject();
    cJSON_AddNumberToObject(args, "num_layers", c.num_layers);
    cJSON_AddNumberToObject(args, "hidden_size", c.hidden);
    cJSON_AddNumberToObject(args, "num_attention_heads", c.heads);
    cJSON_AddNumberToObject(args, "ffn_hidden_size", c.ffn);
    cJSON_AddNumberToObject(args, "max_position_embeddings", c.max_pos);
    cJSON_AddNumberToObject(args, "make_vocab_size_divisible_by", divisible_by);
    cJSON_AddStringToObject(args, "converted_from", "hf");
    cJSON_AddStringToObject(args, "source", in);
    char *args_json = cJSON_PrintUnformatted(args);
    cJSON_Delete(args);
    ckpt_model cm = {ps, 1, &m, NULL, NULL};
    ckpt_progress prog = {0, 0, 0, c.seed};
    ckpt_save(out, &cm, &prog, args_json, 0, NULL);
    free(args_json);
    rc = 0;
fail:
    free(host);
    free(used);
    gpt_free(m);
    be_free(be);
    ps_free(ps);
    st_close(f);
    return rc;
}
