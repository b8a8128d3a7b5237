/* src/ckpt/hf: Hugging Face GPT-2 interchange, held against an independent GPT-2 written in this
 * file in transformers' layout (its own safetensors writer and reader over cJSON, Conv1D
 * weights [in, out], a double-precision forward with gelu_new):
 *  - import: a random GPT-2 written here converts to a trident checkpoint whose logits, computed
 *    by trident's model, equal the reference's within 1e-5 (padded vocabulary columns repeat
 *    the last real one);
 *  - export: a trident model's file read back here gives the logits trident computes;
 *  - the loss trident computes (what `trident eval` reports) equals the reference's softmax
 *    cross-entropy over the real vocabulary within 1e-5 relative, whatever the padded rows hold;
 *  - round trip trident -> hf -> trident is bit-exact;
 *  - bad configs and files are refused with one line;
 *  - the list of families: the class each converts to, the model_types read, a model none
 *    computes refused naming what differs from each, and the tensors each family's files carry
 *    without parameters (BERT's position_ids and tied decoder) passed over by that family only;
 * and the same for Llama (LlamaForCausalLM) and Megatron-BERT (MegatronBertForPreTraining: a
 * forward written here after transformers' MegatronBert — embeddings with token types, a
 * LayerNorm before attention and before the MLP, an additive mask on the padded keys, the
 * encoder's final LayerNorm, the prediction head's transform and tied decoder, the pooler and
 * seq_relationship — gives trident's masked-LM logits and its weighted loss), and Mixtral
 * (MixtralForCausalLM) and Qwen2-MoE (Qwen2MoeForCausalLM: a forward written here with its own
 * routing — the softmax over every expert, the top k, renormalised over them or not — the SwiGLU
 * experts one tensor each, Qwen's q/k/v biases and shared expert under a sigmoid gate): logits
 * within 1e-5 both ways, hf -> trident -> hf giving back every tensor bit for bit, and the
 * configs neither can compute refused. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "trident/checkpoint.h"
#include "trident/comm.h"
#include "trident/gpt.h"
#include "trident/hf.h"
#include "trident/parallel_state.h"

static comm *g_world;
static ps_state *g_ps;
static backend *g_be;
static char g_dir[512];

enum { L = 2, H = 16, NH = 4, F = 64, P = 8, V = 50, T = 8 };

#include "test_hf_files.h"

static double lcg_uniform(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

/* A random GPT-2 (no "transformer." prefix, as the published gpt2 files), with the attn.bias
 * buffers and a tied lm_head.weight that the importer must skip. */
static void random_gpt2(hmodel *m, uint64_t seed)
{
    char n[96];
    hadd(m, "wte.weight", V, H);
    hadd(m, "wpe.weight", P, H);
    for (int l = 0; l < L; l++) {
        const struct {
            const char *s;
            int64_t d0, d1;
        } shapes[] = {{"ln_1.weight", H, 0},        {"ln_1.bias", H, 0},       {"attn.c_attn.weight", H, 3 * H},
                      {"attn.c_attn.bias", 3 * H, 0}, {"attn.c_proj.weight", H, H}, {"attn.c_proj.bias", H, 0},
                      {"ln_2.weight", H, 0},        {"ln_2.bias", H, 0},       {"mlp.c_fc.weight", H, F},
                      {"mlp.c_fc.bias", F, 0},      {"mlp.c_proj.weight", F, H}, {"mlp.c_proj.bias", H, 0}};
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            snprintf(n, sizeof n, "h.%d.%s", l, shapes[k].s);
            hadd(m, n, shapes[k].d0, shapes[k].d1);
        }
    }
    hadd(m, "ln_f.weight", H, 0);
    hadd(m, "ln_f.bias", H, 0);
    for (int i = 0; i < m->n; i++) {
        htensor *t = &m->t[i];
        int64_t cnt = t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1);
        int is_ln_w = strstr(t->name, "ln_") && strstr(t->name, ".weight");
        for (int64_t k = 0; k < cnt; k++)
            t->v[k] = (float)((is_ln_w ? 1.0 : 0.0) + 0.6 * (lcg_uniform(&seed) - 0.5));
    }
    for (int l = 0; l < L; l++) {
        snprintf(n, sizeof n, "h.%d.attn.bias", l);
        htensor *b = hadd(m, n, P, P);
        for (int i = 0; i < P; i++)
            for (int j = 0; j <= i; j++) b->v[i * P + j] = 1;
    }
    htensor *head = hadd(m, "lm_head.weight", V, H);
    memcpy(head->v, hget(m, "wte.weight", V, H), sizeof(float) * V * H);
}


/* ---- the reference forward in double ---- */

static void ln(double *out, const double *in, const float *w, const float *b)
{
    double mean = 0, var = 0;
    for (int i = 0; i < H; i++) mean += in[i];
    mean /= H;
    for (int i = 0; i < H; i++) var += (in[i] - mean) * (in[i] - mean);
    double rstd = 1.0 / sqrt(var / H + 1e-5);
    for (int i = 0; i < H; i++) out[i] = (in[i] - mean) * rstd * w[i] + b[i];
}

/* Conv1D: out (n_out) = in (n_in) . W (n_in, n_out) + b */
static void conv1d(double *out, const double *in, const float *w, const float *b, int n_in, int n_out)
{
    for (int o = 0; o < n_out; o++) {
        double s = b[o];
        for (int i = 0; i < n_in; i++) s += in[i] * w[(size_t)i * n_out + o];
        out[o] = s;
    }
}

static void ref_logits(const hmodel *m, const int32_t *ids, double *logits /* (T, V) */)
{
    static double x[T][H], a[T][H], qkv[T][3 * H], y[T][H], tmp[T][H], fc[T][F];
    const float *wte = hget(m, "wte.weight", V, H), *wpe = hget(m, "wpe.weight", P, H);
    char n[96];
#define G(fmt, d0, d1) (snprintf(n, sizeof n, fmt, l), hget(m, n, d0, d1))
    for (int t = 0; t < T; t++)
        for (int i = 0; i < H; i++) x[t][i] = (double)wte[ids[t] * H + i] + wpe[t * H + i];
    for (int l = 0; l < L; l++) {
        for (int t = 0; t < T; t++) {
            ln(a[t], x[t], G("h.%d.ln_1.weight", H, 0), G("h.%d.ln_1.bias", H, 0));
            conv1d(qkv[t], a[t], G("h.%d.attn.c_attn.weight", H, 3 * H), G("h.%d.attn.c_attn.bias", 3 * H, 0), H, 3 * H);
        }
        int hs = H / NH;
        for (int hd = 0; hd < NH; hd++)
            for (int t = 0; t < T; t++) {
                double s[T], mx = -1e300, sum = 0;
                for (int u = 0; u <= t; u++) {
                    s[u] = 0;
                    for (int k = 0; k < hs; k++) s[u] += qkv[t][hd * hs + k] * qkv[u][H + hd * hs + k];
                    s[u] /= sqrt((double)hs);
                    mx = s[u] > mx ? s[u] : mx;
                }
                for (int u = 0; u <= t; u++) sum += (s[u] = exp(s[u] - mx));
                for (int k = 0; k < hs; k++) {
                    double acc = 0;
                    for (int u = 0; u <= t; u++) acc += s[u] / sum * qkv[u][2 * H + hd * hs + k];
                    y[t][hd * hs + k] = acc;
                }
            }
        for (int t = 0; t < T; t++) {
            conv1d(tmp[t], y[t], G("h.%d.attn.c_proj.weight", H, H), G("h.%d.attn.c_proj.bias", H, 0), H, H);
            for (int i = 0; i < H; i++) x[t][i] += tmp[t][i];
            ln(a[t], x[t], G("h.%d.ln_2.weight", H, 0), G("h.%d.ln_2.bias", H, 0));
            conv1d(fc[t], a[t], G("h.%d.mlp.c_fc.weight", H, F), G("h.%d.mlp.c_fc.bias", F, 0), H, F);
            for (int i = 0; i < F; i++) {
                double v = fc[t][i];
                fc[t][i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); /* gelu_new */
            }
            conv1d(tmp[t], fc[t], G("h.%d.mlp.c_proj.weight", F, H), G("h.%d.mlp.c_proj.bias", H, 0), F, H);
            for (int i = 0; i < H; i++) x[t][i] += tmp[t][i];
        }
    }
#undef G
    const float *lw = hget(m, "ln_f.weight", H, 0), *lb = hget(m, "ln_f.bias", H, 0);
    for (int t = 0; t < T; t++) {
        ln(a[t], x[t], lw, lb);
        for (int v = 0; v < V; v++) {
            double s = 0;
            for (int i = 0; i < H; i++) s += a[t][i] * wte[v * H + i]; /* tied head */
            logits[t * V + v] = s;
        }
    }
}

/* ---- trident's side ---- */

static const int32_t IDS[T] = {3, 17, 49, 0, 25, 25, 8, 41};

/* Logits (T, padded vocab) of `m` for IDS, computed by trident's model. */
static float *trident_logits(gpt_model *m)
{
    int32_t targets[T] = {0};
    int64_t sample[1] = {0};
    gpt_acts *a = gpt_acts_acquire(m);
    double loss;
    gpt_forward(m, a, &(gpt_batch){.B = 1, .ids = IDS, .targets = targets, .sample = sample}, NULL, 0, &loss);
    size_t n = (size_t)T * m->vocab_l;
    float *out = malloc(n * sizeof(float));
    be_memcpy(m->be, out, gpt_acts_logits(a), n * sizeof(float), BE_D2H);
    gpt_acts_release(m, a);
    return out;
}

static const int32_t TARGETS[T] = {17, 49, 0, 25, 25, 8, 41, 12};

/* Mean loss of `m` on IDS -> TARGETS, computed by trident's model. */
static double trident_loss(gpt_model *m)
{
    int64_t sample[1] = {0};
    gpt_acts *a = gpt_acts_acquire(m);
    double loss = 0;
    gpt_forward(m, a, &(gpt_batch){.B = 1, .ids = IDS, .targets = TARGETS, .sample = sample}, NULL, 0, &loss);
    gpt_acts_release(m, a);
    return loss / T;
}

/* The same from the reference's logits: softmax cross-entropy over the V real entries. */
static double ref_loss(const double *logits /* (T, V) */)
{
    double loss = 0;
    for (int t = 0; t < T; t++) {
        const double *l = logits + t * V;
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
        for (int v = 0; v < V; v++) s += exp(l[v] - mx);
        loss += log(s) + mx - l[TARGETS[t]];
    }
    return loss / T;
}

static void compare_loss(gpt_model *m, const double *ref_l, const char *what)
{
    double got = trident_loss(m), ref = ref_loss(ref_l);
    printf("%s: loss %.8f, reference over the %d real ids %.8f (relative difference %.2e)\n", what, got, V, ref,
           fabs(got - ref) / ref);
    assert_true(fabs(got - ref) <= 1e-5 * ref);
}

static void compare_logits(const float *got, int Vp, const double *ref, const char *what)
{
    double maxd = 0, maxr = 0;
    for (int t = 0; t < T; t++)
        for (int v = 0; v < V; v++) {
            double d = fabs(got[t * Vp + v] - ref[t * V + v]);
            maxd = d > maxd ? d : maxd;
            maxr = fabs(ref[t * V + v]) > maxr ? fabs(ref[t * V + v]) : maxr;
        }
    printf("%s: max |trident - reference| %.3g over logits up to %.3g\n", what, maxd, maxr);
    assert_true(maxr > 0.5);
    assert_true(maxd <= 1e-5 * maxr);
}

/* A model of the checkpoint in `dir` (any layout), loaded by trident (weights only). */
static gpt_model *load_model(const char *dir)
{
    ckpt_meta meta;
    char err[1024] = "";
    if (ckpt_find(dir, &meta, err, sizeof err)) fail_msg("%s", err);
    gpt_config c = ckpt_model_config(&meta, 1, T, 128);
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, c.num_layers, 1, 1);
    ckpt_model cm = {g_ps, 1, &m, NULL, NULL, NULL, NULL};
    if (ckpt_load(&meta, &cm, 0, err, sizeof err)) fail_msg("%s", err);
    ckpt_meta_free(&meta);
    return m;
}

static const char *CONFIG = "{\"model_type\": \"gpt2\", \"architectures\": [\"GPT2LMHeadModel\"], \"vocab_size\": 50, "
                            "\"n_positions\": 8, \"n_embd\": 16, \"n_layer\": 2, \"n_head\": 4, \"n_inner\": null, "
                            "\"activation_function\": \"gelu_new\", \"layer_norm_epsilon\": 1e-05}";

static void sub(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", g_dir, name);
}

/* Saves m as a trident checkpoint "<tag>_ckpt", exports it to "<tag>_hf" (hfdir) and reads the
 * files back into hm with this file's own reader. */
static void export_model_as(gpt_model *m, const char *tag, char *hfdir, size_t len, hmodel *hm, st_dtype dtype)
{
    char ck[600], name[64], err[1024] = "";
    snprintf(name, sizeof name, "%s_ckpt", tag);
    sub(ck, sizeof ck, name);
    snprintf(name, sizeof name, "%s_hf", tag);
    sub(hfdir, len, name);
    ckpt_model cm = {g_ps, 1, &m, NULL, NULL, NULL, NULL};
    ckpt_progress prog = {.iteration = 3, .consumed_train = 24, .seed = m->cfg.seed};
    ckpt_save(ck, &cm, &prog, "{}", 0, NULL);
    ckpt_meta meta;
    if (ckpt_find(ck, &meta, err, sizeof err)) fail_msg("%s", err);
    if (hf_export(&meta, hfdir, dtype, err, sizeof err)) fail_msg("%s", err);
    ckpt_meta_free(&meta);
    read_hf(hm, hfdir);
}
static void export_model(gpt_model *m, const char *tag, char *hfdir, size_t len, hmodel *hm)
{
    export_model_as(m, tag, hfdir, len, hm, ST_F32);
}

/* hfdir imported back ("<tag>_back") holds m's parameters bit for bit (the real vocabulary rows
 * of the vocabulary tensors). */
static void check_round_trip(gpt_model *m, const char *hfdir, const char *tag)
{
    char back[600], name[64], err[1024] = "";
    snprintf(name, sizeof name, "%s_back", tag);
    sub(back, sizeof back, name);
    if (hf_import(hfdir, back, 8, "cpu", g_world, err, sizeof err)) fail_msg("%s", err);
    gpt_model *b = load_model(back);
    assert_int_equal(b->numel, m->numel);
    for (int i = 0; i < m->ntensors; i++) {
        const gpt_tensor_info *t = &m->table[i];
        size_t cnt = ckpt_is_vocab_tensor(t->name) ? (size_t)V * (size_t)(t->ndim == 2 ? t->shape[1] : 1) : t->numel;
        assert_string_equal(t->name, b->table[i].name);
        assert_memory_equal(m->params + t->offset, b->params + b->table[i].offset, cnt * sizeof(float));
    }
    gpt_free(b);
}

static void import_matches_reference(void **state)
{
    (void)state;
    hmodel hm = {0};
    random_gpt2(&hm, 42);
    char hfdir[600], ck[600], err[1024] = "";
    sub(hfdir, sizeof hfdir, "import_hf");
    sub(ck, sizeof ck, "import_ckpt");
    write_hf(&hm, hfdir, CONFIG);
    if (hf_import(hfdir, ck, 8, "cpu", g_world, err, sizeof err)) fail_msg("%s", err);
    gpt_model *m = load_model(ck);
    assert_int_equal(m->cfg.padded_vocab, 56);
    float *got = trident_logits(m);
    double ref[T * V];
    ref_logits(&hm, IDS, ref);
    compare_logits(got, m->vocab_l, ref, "hf -> trident");
    compare_loss(m, ref, "hf -> trident");
    /* the padded columns are copies of the last real one */
    for (int t = 0; t < T; t++)
        for (int v = V; v < m->vocab_l; v++) assert_true(got[t * m->vocab_l + v] == got[t * m->vocab_l + V - 1]);
    free(got);
    gpt_free(m);
    hfree(&hm);
}

static void export_matches_reference_and_round_trips(void **state)
{
    (void)state;
    gpt_config c = {.num_layers = L, .hidden = H, .heads = NH, .ffn = F, .seq = T, .max_pos = P, .vocab = V,
                    .padded_vocab = gpt_padded_vocab(V, 8, 1), .init_std = 0.3f, .seed = 99};
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, L, 1, 1);
    char hfdir[600];
    hmodel hm = {0};
    export_model(m, "export", hfdir, sizeof hfdir, &hm);

    /* the file as transformers lays it out */
    assert_int_equal(hm.n, 4 + 12 * L);
    for (int i = 0; i < hm.n; i++) {
        assert_int_equal(strncmp(hm.t[i].name, "transformer.", 12), 0);
        assert_null(strstr(hm.t[i].name, "lm_head"));
    }
    hget(&hm, "h.1.attn.c_attn.weight", H, 3 * H); /* Conv1D: [in, out] */
    hget(&hm, "h.0.mlp.c_proj.weight", F, H);
    cJSON *cfg = read_config_json(hfdir);
    assert_int_equal(cJSON_GetObjectItem(cfg, "vocab_size")->valueint, V);
    assert_int_equal(cJSON_GetObjectItem(cfg, "n_embd")->valueint, H);
    assert_int_equal(cJSON_GetObjectItem(cfg, "n_layer")->valueint, L);
    assert_int_equal(cJSON_GetObjectItem(cfg, "n_head")->valueint, NH);
    assert_int_equal(cJSON_GetObjectItem(cfg, "n_positions")->valueint, P);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cfg, "tie_word_embeddings")));
    assert_string_equal(cJSON_GetObjectItem(cfg, "activation_function")->valuestring, "gelu_new");
    cJSON_Delete(cfg);

    double ref[T * V];
    ref_logits(&hm, IDS, ref);
    float *got = trident_logits(m);
    compare_logits(got, m->vocab_l, ref, "trident -> hf");
    compare_loss(m, ref, "trident -> hf");
    free(got);
    hfree(&hm);

    /* and back: every parameter bit-identical, padded rows aside */
    check_round_trip(m, hfdir, "export");
    gpt_free(m);
}

/* convert --dtype F16 / BF16: every tensor of the F32 export rounded to nearest (the error at
 * most half a unit in the last place: 2^-8 relative for bf16, 2^-11 for fp16, 2^-25 absolute for
 * fp16's subnormals), and torch_dtype names the type. */
static void export_half_precision(void **state)
{
    (void)state;
    gpt_config c = {.num_layers = L, .hidden = H, .heads = NH, .ffn = F, .seq = T, .max_pos = P, .vocab = V,
                    .padded_vocab = gpt_padded_vocab(V, 8, 1), .init_std = 0.3f, .seed = 77};
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, L, 1, 1);
    char d32[600], dh[600];
    hmodel h32 = {0};
    export_model_as(m, "x32", d32, sizeof d32, &h32, ST_F32);
    const struct { st_dtype t; const char *name, *torch; double ulp; } kinds[] = {
        {ST_BF16, "BF16", "bfloat16", 0x1p-7}, {ST_F16, "F16", "float16", 0x1p-10}};
    for (int kd = 0; kd < 2; kd++) {
        hmodel hh = {0};
        export_model_as(m, kinds[kd].name, dh, sizeof dh, &hh, kinds[kd].t);
        assert_string_equal(hh.dtype, kinds[kd].name);
        cJSON *cfg = read_config_json(dh);
        assert_string_equal(cJSON_GetObjectItem(cfg, "torch_dtype")->valuestring, kinds[kd].torch);
        cJSON_Delete(cfg);
        assert_int_equal(hh.n, h32.n);
        double worst = 0;
        for (int i = 0; i < hh.n; i++) {
            assert_string_equal(hh.t[i].name, h32.t[i].name);
            size_t cnt = (size_t)(h32.t[i].shape[0] * (h32.t[i].ndim == 2 ? h32.t[i].shape[1] : 1));
            for (size_t k = 0; k < cnt; k++) {
                double x = h32.t[i].v[k], y = hh.t[i].v[k];
                if (x == 0) {
                    assert_true(y == 0);
                    continue;
                }
                double e = fabs(y - x) / fabs(x);
                int ex;
                frexp(x, &ex);
                /* half a unit in the last place of x's binade (fp16 subnormals: of 2^-24) */
                double half_ulp = 0.5 * kinds[kd].ulp * ldexp(1.0, ex - 1);
                if (kinds[kd].t == ST_F16 && half_ulp < 0x1p-25) half_ulp = 0x1p-25;
                assert_true(fabs(y - x) <= half_ulp * (1 + 1e-12));
                worst = e > worst ? e : worst;
            }
        }
        printf("  %s export: largest relative rounding error %.2e (bound %.2e)\n", kinds[kd].name, worst,
               kinds[kd].ulp / 2);
        hfree(&hh);
    }
    hfree(&h32);
    gpt_free(m);
}

static void expect_import_error(const char *config, const char *want)
{
    hmodel hm = {0};
    random_gpt2(&hm, 5);
    char hfdir[600], ck[600], err[1024] = "";
    sub(hfdir, sizeof hfdir, "bad_hf");
    sub(ck, sizeof ck, "bad_ckpt");
    write_hf(&hm, hfdir, config);
    assert_int_equal(hf_import(hfdir, ck, 8, "cpu", g_world, err, sizeof err), -1);
    if (!strstr(err, want)) fail_msg("error '%s' lacks '%s'", err, want);
    assert_null(strchr(err, '\n'));
    struct stat sb;
    assert_int_not_equal(stat(ck, &sb), 0); /* nothing written */
    hfree(&hm);
}

static void import_refuses_what_it_cannot_compute(void **state)
{
    (void)state;
    expect_import_error("{\"model_type\": \"bert\"}", "gpt2, llama, mistral, mixtral, qwen2_moe and megatron-bert convert");
    expect_import_error("{\"vocab_size\": 50, \"n_positions\": 8, \"n_embd\": 16, \"n_layer\": 2, \"n_head\": 4, "
                        "\"activation_function\": \"quick_gelu\"}", "activation_function 'quick_gelu' is not an activation "
                        "trident computes");
    expect_import_error("{\"vocab_size\": 50, \"n_positions\": 8, \"n_embd\": 16, \"n_layer\": 2, \"n_head\": 4, "
                        "\"layer_norm_epsilon\": 2}", "layer_norm_epsilon must be in (0, 1)");
    expect_import_error("{\"vocab_size\": 50, \"n_positions\": 8, \"n_embd\": 16, \"n_layer\": 3, \"n_head\": 4}",
                        "tensor transformer.h.2.mlp.c_proj.bias is missing");
    expect_import_error("{\"vocab_size\": 51, \"n_positions\": 8, \"n_embd\": 16, \"n_layer\": 2, \"n_head\": 4}",
                        "tensor transformer.wte.weight has shape [50, 16] but the config makes it [51, 16]");
    expect_import_error("{\"vocab_size\": 50, \"n_embd\": 16, \"n_layer\": 2, \"n_head\": 4}", "n_positions");
}


/* ---- Llama: an independent LlamaForCausalLM in transformers' layout and names ---- */

enum { LH = 16, LNH = 4, LG = 2, LD = 6, LF = 24 };
#define LTHETA 500.0
#define LEPS 1e-6

static const char *LLAMA_CONFIG =
    "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 50, "
    "\"hidden_size\": 16, \"intermediate_size\": 24, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 2, \"head_dim\": 6, \"max_position_embeddings\": 8, \"rms_norm_eps\": 1e-06, "
    "\"rope_theta\": 500.0, \"rope_scaling\": null, \"hidden_act\": \"silu\", \"attention_bias\": false, "
    "\"tie_word_embeddings\": false}";

/* A random Llama (untied lm_head) with a rotary inv_freq buffer the importer must skip. */
static void random_llama(hmodel *m, uint64_t seed)
{
    char n[128];
    hadd(m, "model.embed_tokens.weight", V, LH);
    for (int l = 0; l < L; l++) {
        const struct {
            const char *s;
            int64_t d0, d1;
        } shapes[] = {{"input_layernorm.weight", LH, 0},  {"self_attn.q_proj.weight", LNH * LD, LH},
                      {"self_attn.k_proj.weight", LG * LD, LH}, {"self_attn.v_proj.weight", LG * LD, LH},
                      {"self_attn.o_proj.weight", LH, LNH * LD}, {"post_attention_layernorm.weight", LH, 0},
                      {"mlp.gate_proj.weight", LF, LH},   {"mlp.up_proj.weight", LF, LH},
                      {"mlp.down_proj.weight", LH, LF}};
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            snprintf(n, sizeof n, "model.layers.%d.%s", l, shapes[k].s);
            hadd(m, n, shapes[k].d0, shapes[k].d1);
        }
    }
    hadd(m, "model.norm.weight", LH, 0);
    hadd(m, "lm_head.weight", V, LH);
    for (int i = 0; i < m->n; i++) {
        htensor *t = &m->t[i];
        int64_t cnt = t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1);
        int norm = strstr(t->name, "norm") != NULL;
        for (int64_t k = 0; k < cnt; k++) t->v[k] = (float)((norm ? 1.0 : 0.0) + 0.8 * (lcg_uniform(&seed) - 0.5));
    }
    htensor *inv = hadd(m, "model.layers.0.self_attn.rotary_emb.inv_freq", LD / 2, 0);
    for (int i = 0; i < LD / 2; i++) inv->v[i] = (float)pow(LTHETA, -2.0 * i / LD);
}

static void rms(double *out, const double *in, const float *w)
{
    double ss = 0;
    for (int i = 0; i < LH; i++) ss += in[i] * in[i];
    double r = 1.0 / sqrt(ss / LH + LEPS);
    for (int i = 0; i < LH; i++) out[i] = in[i] * r * w[i];
}

/* nn.Linear: out (n_out) = W (n_out, n_in) . in */
static void linear(double *out, const double *in, const float *w, int n_in, int n_out)
{
    for (int o = 0; o < n_out; o++) {
        double s = 0;
        for (int i = 0; i < n_in; i++) s += w[(size_t)o * n_in + i] * in[i];
        out[o] = s;
    }
}

/* transformers' apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, per head of LD. */
static void rotate_half(double *x, int pos)
{
    double y[LD];
    for (int i = 0; i < LD; i++) {
        double ang = pos * pow(LTHETA, -2.0 * (i % (LD / 2)) / LD);
        double rot = i < LD / 2 ? -x[i + LD / 2] : x[i - LD / 2];
        y[i] = x[i] * cos(ang) + rot * sin(ang);
    }
    memcpy(x, y, sizeof y);
}

/* The reference Llama's gate function: SiLU, or (Gemma's hidden_activation gelu_pytorch_tanh) the
 * tanh GeLU. */
static int g_llama_gelu_gate;

static void ref_llama_logits(const hmodel *m, const int32_t *ids, double *logits /* (T, V) */)
{
    static double x[T][LH], a[T][LH], q[T][LNH * LD], k[T][LG * LD], v[T][LG * LD], y[T][LNH * LD], tmp[T][LH];
    static double g[T][LF], u[T][LF];
    const float *emb = hget(m, "model.embed_tokens.weight", V, LH);
    char n[128];
#define G(fmt, d0, d1) (snprintf(n, sizeof n, fmt, l), hget(m, n, d0, d1))
    for (int t = 0; t < T; t++)
        for (int i = 0; i < LH; i++) x[t][i] = emb[ids[t] * LH + i];
    for (int l = 0; l < L; l++) {
        for (int t = 0; t < T; t++) {
            rms(a[t], x[t], G("model.layers.%d.input_layernorm.weight", LH, 0));
            linear(q[t], a[t], G("model.layers.%d.self_attn.q_proj.weight", LNH * LD, LH), LH, LNH * LD);
            linear(k[t], a[t], G("model.layers.%d.self_attn.k_proj.weight", LG * LD, LH), LH, LG * LD);
            linear(v[t], a[t], G("model.layers.%d.self_attn.v_proj.weight", LG * LD, LH), LH, LG * LD);
            for (int hd = 0; hd < LNH; hd++) rotate_half(q[t] + hd * LD, t);
            for (int gi = 0; gi < LG; gi++) rotate_half(k[t] + gi * LD, t);
        }
        for (int hd = 0; hd < LNH; hd++) {
            int kv = hd / (LNH / LG); /* repeat_kv */
            for (int t = 0; t < T; t++) {
                double s[T], mx = -1e300, sum = 0;
                for (int w = 0; w <= t; w++) {
                    s[w] = 0;
                    for (int e = 0; e < LD; e++) s[w] += q[t][hd * LD + e] * k[w][kv * LD + e];
                    s[w] /= sqrt((double)LD);
                    mx = s[w] > mx ? s[w] : mx;
                }
                for (int w = 0; w <= t; w++) sum += (s[w] = exp(s[w] - mx));
                for (int e = 0; e < LD; e++) {
                    double acc = 0;
                    for (int w = 0; w <= t; w++) acc += s[w] / sum * v[w][kv * LD + e];
                    y[t][hd * LD + e] = acc;
                }
            }
        }
        for (int t = 0; t < T; t++) {
            linear(tmp[t], y[t], G("model.layers.%d.self_attn.o_proj.weight", LH, LNH * LD), LNH * LD, LH);
            for (int i = 0; i < LH; i++) x[t][i] += tmp[t][i];
            rms(a[t], x[t], G("model.layers.%d.post_attention_layernorm.weight", LH, 0));
            linear(g[t], a[t], G("model.layers.%d.mlp.gate_proj.weight", LF, LH), LH, LF);
            linear(u[t], a[t], G("model.layers.%d.mlp.up_proj.weight", LF, LH), LH, LF);
            for (int i = 0; i < LF; i++) { /* act(gate) * up */
                double z = g[t][i];
                double act = g_llama_gelu_gate ? 0.5 * z * (1 + tanh(sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)))
                                               : z / (1.0 + exp(-z));
                g[t][i] = act * u[t][i];
            }
            linear(tmp[t], g[t], G("model.layers.%d.mlp.down_proj.weight", LH, LF), LF, LH);
            for (int i = 0; i < LH; i++) x[t][i] += tmp[t][i];
        }
    }
#undef G
    const float *nw = hget(m, "model.norm.weight", LH, 0), *head = hget(m, "lm_head.weight", V, LH);
    for (int t = 0; t < T; t++) {
        rms(a[t], x[t], nw);
        linear(logits + t * V, a[t], head, LH, V);
    }
}

static void llama_import_matches_reference(void **state)
{
    (void)state;
    hmodel hm = {0};
    random_llama(&hm, 7);
    char hfdir[600], ck[600], err[1024] = "";
    sub(hfdir, sizeof hfdir, "llama_import_hf");
    sub(ck, sizeof ck, "llama_import_ckpt");
    write_hf(&hm, hfdir, LLAMA_CONFIG);
    if (hf_import(hfdir, ck, 8, "cpu", g_world, err, sizeof err)) fail_msg("%s", err);
    gpt_model *m = load_model(ck);
    assert_int_equal(m->cfg.norm, GPT_NORM_RMSNORM);
    assert_int_equal(gpt_groups(&m->cfg), LG);
    assert_int_equal(gpt_head_dim(&m->cfg), LD);
    assert_true(m->cfg.untied && m->cfg.glu && m->cfg.pos == GPT_POS_ROPE);
    float *got = trident_logits(m);
    double ref[T * V];
    ref_llama_logits(&hm, IDS, ref);
    compare_logits(got, m->vocab_l, ref, "llama hf -> trident");
    compare_loss(m, ref, "llama hf -> trident");
    free(got);
    gpt_free(m);
    hfree(&hm);
}

static void llama_export_matches_reference_and_round_trips(void **state)
{
    (void)state;
    gpt_config c = {.num_layers = L, .hidden = LH, .heads = LNH, .query_groups = LG, .kv_channels = LD, .ffn = LF,
                    .seq = T, .max_pos = P, .vocab = V, .padded_vocab = gpt_padded_vocab(V, 8, 1),
                    .norm = GPT_NORM_RMSNORM, .norm_eps = (float)LEPS, .pos = GPT_POS_ROPE,
                    .rotary_base = (float)LTHETA, .act = TD_ACT_SILU, .glu = 1, .disable_bias = 1, .untied = 1, .init_std = 0.4f,
                    .seed = 5};
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, L, 1, 1);
    char hfdir[600];
    hmodel hm = {0};
    export_model(m, "llama_export", hfdir, sizeof hfdir, &hm);
    assert_int_equal(hm.n, 3 + 9 * L);
    hget(&hm, "model.layers.1.self_attn.k_proj.weight", LG * LD, LH);
    hget(&hm, "model.layers.0.mlp.gate_proj.weight", LF, LH);
    hget(&hm, "lm_head.weight", V, LH);
    cJSON *cfg = read_config_json(hfdir);
    assert_string_equal(cJSON_GetObjectItem(cfg, "model_type")->valuestring, "llama");
    assert_int_equal(cJSON_GetObjectItem(cfg, "num_key_value_heads")->valueint, LG);
    assert_int_equal(cJSON_GetObjectItem(cfg, "intermediate_size")->valueint, LF);
    assert_int_equal(cJSON_GetObjectItem(cfg, "head_dim")->valueint, LD);
    assert_true(fabs(cJSON_GetObjectItem(cfg, "rope_theta")->valuedouble - LTHETA) < 1e-3);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(cfg, "tie_word_embeddings")));
    cJSON_Delete(cfg);

    double ref[T * V];
    ref_llama_logits(&hm, IDS, ref);
    float *got = trident_logits(m);
    compare_logits(got, m->vocab_l, ref, "llama trident -> hf");
    compare_loss(m, ref, "llama trident -> hf");
    free(got);
    hfree(&hm);

    check_round_trip(m, hfdir, "llama_export");
    gpt_free(m);
}

/* GeGLU as Gemma configures it (hidden_activation gelu_pytorch_tanh, no hidden_act): imported as
 * the tanh GeLU gated, held to the reference; exported with hidden_act gelu_new, held again. */
static void llama_geglu_import_and_export(void **state)
{
    (void)state;
    hmodel hm = {0};
    random_llama(&hm, 9);
    char hfdir[600], ck[600], err[1024] = "";
    sub(hfdir, sizeof hfdir, "geglu_import_hf");
    sub(ck, sizeof ck, "geglu_import_ckpt");
    cJSON *cfg = cJSON_Parse(LLAMA_CONFIG);
    cJSON_DeleteItemFromObject(cfg, "hidden_act");
    cJSON_AddStringToObject(cfg, "hidden_activation", "gelu_pytorch_tanh");
    char *config = cJSON_PrintUnformatted(cfg);
    cJSON_Delete(cfg);
    write_hf(&hm, hfdir, config);
    free(config);
    if (hf_import(hfdir, ck, 8, "cpu", g_world, err, sizeof err)) fail_msg("%s", err);
    gpt_model *m = load_model(ck);
    assert_int_equal(m->cfg.act, TD_ACT_GELU);
    assert_true(m->cfg.glu);
    g_llama_gelu_gate = 1;
    double ref[T * V];
    ref_llama_logits(&hm, IDS, ref);
    float *got = trident_logits(m);
    compare_logits(got, m->vocab_l, ref, "geglu hf -> trident");
    free(got);
    hfree(&hm);

    char out[600];
    export_model(m, "geglu_export", out, sizeof out, &hm);
    cfg = read_config_json(out);
    assert_string_equal(cJSON_GetObjectItem(cfg, "hidden_act")->valuestring, "gelu_new");
    cJSON_Delete(cfg);
    ref_llama_logits(&hm, IDS, ref);
    got = trident_logits(m);
    compare_logits(got, m->vocab_l, ref, "geglu trident -> hf");
    free(got);
    g_llama_gelu_gate = 0;
    /* the reference with SiLU is another model: the test tells the two gates apart */
    ref_llama_logits(&hm, IDS, ref);
    got = trident_logits(m);
    double maxd = 0;
    for (int t = 0; t < T; t++)
        for (int v = 0; v < V; v++) maxd = fmax(maxd, fabs(got[t * m->vocab_l + v] - ref[t * V + v]));
    assert_true(maxd > 1e-3);
    free(got);
    hfree(&hm);
    gpt_free(m);
}

/* meta.json of checkpoint dir (saved at iteration 3), parsed, and written back. */
static cJSON *meta_read(const char *dir)
{
    char path[700];
    snprintf(path, sizeof path, "%s/iter_0000003/meta.json", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    cJSON *o = cJSON_Parse(text);
    assert_non_null(o);
    return o;
}
static void meta_write(const char *dir, const cJSON *o)
{
    char path[700], *text = cJSON_Print(o);
    snprintf(path, sizeof path, "%s/iter_0000003/meta.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    free(text);
}

/* meta.json writes the activation as Megatron-Core's two settings, and a checkpoint written before
 * them (one "swiglu" switch) still loads: swiglu 1 as SiLU gated (0 as GeLU, which the gated
 * shards then contradict); another value is refused by name. */
static void checkpoint_activation_keys(void **state)
{
    (void)state;
    gpt_config c = {.num_layers = L, .hidden = LH, .heads = LNH, .query_groups = LG, .kv_channels = LD, .ffn = LF,
                    .seq = T, .max_pos = P, .vocab = V, .padded_vocab = gpt_padded_vocab(V, 8, 1),
                    .norm = GPT_NORM_RMSNORM, .pos = GPT_POS_ROPE, .act = TD_ACT_SILU, .glu = 1, .disable_bias = 1,
                    .untied = 1, .init_std = 0.4f, .seed = 5};
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, L, 1, 1);
    char ck[600], err[1024] = "";
    sub(ck, sizeof ck, "act_keys_ckpt");
    ckpt_model cm = {g_ps, 1, &m, NULL, NULL, NULL, NULL};
    ckpt_progress prog = {.iteration = 3, .consumed_train = 24, .seed = 5};
    ckpt_save(ck, &cm, &prog, "{}", 0, NULL);
    gpt_free(m);
    cJSON *o = meta_read(ck), *mod = cJSON_GetObjectItem(o, "model");
    assert_string_equal(cJSON_GetObjectItem(mod, "activation_func")->valuestring, "silu");
    assert_int_equal(cJSON_GetObjectItem(mod, "gated_linear_unit")->valueint, 1);
    assert_null(cJSON_GetObjectItem(mod, "swiglu"));
    /* swiglu 0 reads as GeLU, which the gated shards contradict */
    static const struct { double swiglu; int act, glu; const char *want; } old[] = {
        {1, TD_ACT_SILU, 1, NULL}, {0, -1, 0, "tensor layers.0.mlp.fc.weight"}, {2, -1, 0, "model.swiglu is not 0 or 1"}};
    for (int i = 0; i < 3; i++) {
        cJSON_DeleteItemFromObject(mod, "activation_func");
        cJSON_DeleteItemFromObject(mod, "gated_linear_unit");
        cJSON_DeleteItemFromObject(mod, "swiglu");
        cJSON_AddNumberToObject(mod, "swiglu", old[i].swiglu);
        meta_write(ck, o);
        ckpt_meta meta;
        int rc = ckpt_find(ck, &meta, err, sizeof err);
        if (old[i].act < 0) {
            assert_int_equal(rc, -1);
            if (!strstr(err, old[i].want)) fail_msg("error '%s' lacks '%s'", err, old[i].want);
            continue;
        }
        if (rc) fail_msg("%s", err);
        assert_int_equal(meta.model.act, old[i].act);
        assert_int_equal(meta.model.glu, old[i].glu);
        ckpt_meta_free(&meta);
    }
    cJSON_Delete(o);
}

static void expect_llama_error(const char *extra, const char *want)
{
    hmodel hm = {0};
    random_llama(&hm, 5);
    char hfdir[600], ck[600], err[1024] = "", fragment[512];
    sub(hfdir, sizeof hfdir, "bad_llama_hf");
    sub(ck, sizeof ck, "bad_llama_ckpt");
    /* LLAMA_CONFIG with the keys of `extra` replaced */
    cJSON *cfg = cJSON_Parse(LLAMA_CONFIG), *over;
    snprintf(fragment, sizeof fragment, "{%s}", extra);
    over = cJSON_Parse(fragment);
    assert_non_null(cfg);
    assert_non_null(over);
    for (cJSON *j = over->child; j; j = j->next) {
        cJSON_DeleteItemFromObject(cfg, j->string);
        cJSON_AddItemToObject(cfg, j->string, cJSON_Duplicate(j, 1));
    }
    char *config = cJSON_PrintUnformatted(cfg);
    write_hf(&hm, hfdir, config);
    free(config);
    cJSON_Delete(cfg);
    cJSON_Delete(over);
    assert_int_equal(hf_import(hfdir, ck, 8, "cpu", g_world, err, sizeof err), -1);
    if (!strstr(err, want)) fail_msg("error '%s' lacks '%s'", err, want);
    hfree(&hm);
}

/* gpt_rope_freqs of head size 16, theta 10000 (inv_i = 10000^(-i/8)), factor 4, original context 64,
 * against the rules worked by hand:
 * llama3 (low 1, high 4): wavelength 2 pi / inv_i below 64/4 = 16 kept (i 0: 6.28), above 64
 * divided by 4 (i >= 3), between blended by s = (64 / wavelength - 1) / 3: i 1 (wavelength 19.87,
 * s 0.7404) 0.316228 (0.25 + 0.75 s) = 0.254648, i 2 (62.83, s 0.00621) 0.025465;
 * yarn (beta 32, 1): d(r) = 16 ln(64 / (2 pi r)) / (2 ln 10000), floor d(32) = -1 -> 0,
 * ceil d(1) = ceil 2.02 = 3, inv_i (i/3 / 4 + 1 - i/3) for i < 3: 1, 0.316228 * 0.75, 0.1 * 0.5, then
 * inv_i / 4; cos and sin times 0.1 ln 4 + 1 = 1.138629; linear: inv_i / 4. */
static void rope_scaling_frequencies(void **state)
{
    (void)state;
    gpt_config c = {0};
    c.hidden = 64, c.heads = 4, c.pos = GPT_POS_ROPE, c.max_pos = 256, c.rope_factor = 4, c.rope_orig_max_pos = 64;
    double inv[8];
    const double llama3[8] = {1, 0.25464790894703254, 0.025464790894703257, 0.0079056941504209478, 0.0025,
                              0.00079056941504209485, 0.00025, 7.9056941504209485e-05};
    const double yarn[8] = {1, 0.23717082451262847, 0.05, 0.0079056941504209478, 0.0025,
                            0.00079056941504209485, 0.00025, 7.9056941504209485e-05};
    c.rope_scaling = GPT_ROPE_LLAMA3;
    assert_true(gpt_rope_freqs(&c, inv) == 1.0);
    for (int i = 0; i < 8; i++)
        if (fabs(inv[i] - llama3[i]) > 1e-14 * llama3[i]) fail_msg("llama3 inv_freq[%d] %.17g, want %.17g", i, inv[i], llama3[i]);
    c.rope_scaling = GPT_ROPE_YARN;
    double sc = gpt_rope_freqs(&c, inv);
    if (fabs(sc - 1.1386294361119891) > 1e-15) fail_msg("yarn attention factor %.17g", sc);
    for (int i = 0; i < 8; i++)
        if (fabs(inv[i] - yarn[i]) > 1e-14 * yarn[i]) fail_msg("yarn inv_freq[%d] %.17g, want %.17g", i, inv[i], yarn[i]);
    c.rope_scaling = GPT_ROPE_LINEAR;
    assert_true(gpt_rope_freqs(&c, inv) == 1.0);
    for (int i = 0; i < 8; i++)
        if (fabs(inv[i] - pow(10000.0, -i / 8.0) / 4) > 1e-16) fail_msg("linear inv_freq[%d] %.17g", i, inv[i]);
}

static void llama_import_refuses_what_it_cannot_compute(void **state)
{
    (void)state;
    expect_llama_error("\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2}", "rope_type 'dynamic' is not one");
    expect_llama_error("\"rope_scaling\": {\"rope_type\": \"llama3\"}", "needs a positive factor");
    expect_llama_error("\"hidden_act\": \"quick_gelu\"", "hidden_act 'quick_gelu' is not an activation");
    expect_llama_error("\"attention_bias\": true", "attention_bias");
    expect_llama_error("\"sliding_window\": 4", "sliding_window");
    expect_llama_error("\"num_key_value_heads\": 3", "not divisible by num_key_value_heads");
    expect_llama_error("\"tie_word_embeddings\": true", "lm_head.weight differs");
}

/* ---- Megatron-BERT ---- */

enum { BS = 6 }; /* tokens before the padding */
static const int32_t BTYPES[T] = {0, 0, 0, 1, 1, 1, 0, 0};
static const int32_t BLABELS[T] = {-1, 12, -1, -1, 30, -1, -1, -1};
static const int32_t BSOP[1] = {1};

static double gelu_new(double v) { return 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }
/* transformers' "gelu": the exact one */
static double gelu_exact(double v) { return 0.5 * v * (1 + erf(v / sqrt(2.0))); }
/* The reference BERT's activation, as config.json's hidden_act names it (gelu_new or gelu). */
static double (*g_bert_act)(double) = gelu_new;

/* ln over H with eps */
static void ln_eps(double *out, const double *in, const float *w, const float *b, double eps)
{
    double mean = 0, var = 0;
    for (int i = 0; i < H; i++) mean += in[i];
    mean /= H;
    for (int i = 0; i < H; i++) var += (in[i] - mean) * (in[i] - mean);
    double rstd = 1.0 / sqrt(var / H + eps);
    for (int i = 0; i < H; i++) out[i] = (in[i] - mean) * rstd * w[i] + b[i];
}

/* nn.Linear: out (n_out) = W (n_out, n_in) . in + b */
static void dense(double *out, const double *in, const float *w, const float *b, int n_in, int n_out)
{
    for (int o = 0; o < n_out; o++) {
        double s = b[o];
        for (int i = 0; i < n_in; i++) s += w[(size_t)o * n_in + i] * in[i];
        out[o] = s;
    }
}

static const float *bget(const hmodel *m, const char *fmt, int l, int64_t d0, int64_t d1)
{
    char n[128];
    snprintf(n, sizeof n, fmt, l);
    return hget(m, n, d0, d1);
}

/* transformers' MegatronBertForPreTraining on IDS (one sample, BS tokens then padding):
 * the prediction logits (T, V), and the weighted loss (masked LM over BLABELS, mean; plus the
 * sentence order against BSOP). eps: the config's layer_norm_eps. */
static double ref_bert(const hmodel *m, double *logits, double eps)
{
    static double x[T][H], y[T][H], q[T][H], k[T][H], v[T][H], att[T][H], f[T][F];
    const float *wte = hget(m, "bert.embeddings.word_embeddings.weight", V, H);
    const float *wpe = hget(m, "bert.embeddings.position_embeddings.weight", P, H);
    const float *tte = hget(m, "bert.embeddings.token_type_embeddings.weight", 2, H);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < H; i++) x[t][i] = (double)wte[IDS[t] * H + i] + wpe[t * H + i] + tte[BTYPES[t] * H + i];
    const char *lp = "bert.encoder.layer.%d.";
    char n[160];
#define W(suffix, d0, d1) (snprintf(n, sizeof n, "%s%s", lp, suffix), bget(m, n, l, d0, d1))
    for (int l = 0; l < L; l++) {
        for (int t = 0; t < T; t++) {
            ln_eps(y[t], x[t], W("attention.ln.weight", H, 0), W("attention.ln.bias", H, 0), eps);
            dense(q[t], y[t], W("attention.self.query.weight", H, H), W("attention.self.query.bias", H, 0), H, H);
            dense(k[t], y[t], W("attention.self.key.weight", H, H), W("attention.self.key.bias", H, 0), H, H);
            dense(v[t], y[t], W("attention.self.value.weight", H, H), W("attention.self.value.bias", H, 0), H, H);
        }
        int d = H / NH;
        for (int hd = 0; hd < NH; hd++)
            for (int t = 0; t < T; t++) {
                double sc[T], mx = -INFINITY, sum = 0;
                for (int j = 0; j < T; j++) {
                    double dot = 0;
                    for (int e = 0; e < d; e++) dot += q[t][hd * d + e] * k[j][hd * d + e];
                    sc[j] = dot / sqrt((double)d) + (j < BS ? 0.0 : -1e30); /* the padded keys masked */
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j < T; j++) sum += (sc[j] = exp(sc[j] - mx));
                for (int e = 0; e < d; e++) {
                    double o = 0;
                    for (int j = 0; j < T; j++) o += sc[j] / sum * v[j][hd * d + e];
                    att[t][hd * d + e] = o;
                }
            }
        for (int t = 0; t < T; t++) {
            double o[H];
            dense(o, att[t], W("attention.output.dense.weight", H, H), W("attention.output.dense.bias", H, 0), H, H);
            for (int i = 0; i < H; i++) x[t][i] += o[i];
            ln_eps(y[t], x[t], W("ln.weight", H, 0), W("ln.bias", H, 0), eps);
            dense(f[t], y[t], W("intermediate.dense.weight", F, H), W("intermediate.dense.bias", F, 0), H, F);
            for (int i = 0; i < F; i++) f[t][i] = g_bert_act(f[t][i]);
            dense(o, f[t], W("output.dense.weight", H, F), W("output.dense.bias", H, 0), F, H);
            for (int i = 0; i < H; i++) x[t][i] += o[i];
        }
    }
#undef W
    double loss = 0, masked = 0;
    for (int t = 0; t < T; t++) masked += BLABELS[t] >= 0;
    for (int t = 0; t < T; t++) {
        double e[H], h1[H], h2[H];
        ln_eps(e, x[t], hget(m, "bert.encoder.ln.weight", H, 0), hget(m, "bert.encoder.ln.bias", H, 0), eps);
        memcpy(y[t], e, sizeof e);
        dense(h1, e, hget(m, "cls.predictions.transform.dense.weight", H, H),
              hget(m, "cls.predictions.transform.dense.bias", H, 0), H, H);
        for (int i = 0; i < H; i++) h1[i] = g_bert_act(h1[i]);
        ln_eps(h2, h1, hget(m, "cls.predictions.transform.LayerNorm.weight", H, 0),
               hget(m, "cls.predictions.transform.LayerNorm.bias", H, 0), eps);
        dense(logits + t * V, h2, wte, hget(m, "cls.predictions.bias", V, 0), H, V); /* the tied decoder */
        if (BLABELS[t] < 0) continue;
        double mx = -INFINITY, s = 0;
        for (int u = 0; u < V; u++) mx = logits[t * V + u] > mx ? logits[t * V + u] : mx;
        for (int u = 0; u < V; u++) s += exp(logits[t * V + u] - mx);
        loss += (log(s) + mx - logits[t * V + BLABELS[t]]) / masked;
    }
    double pooled[H], sop[2];
    dense(pooled, y[0], hget(m, "bert.pooler.dense.weight", H, H), hget(m, "bert.pooler.dense.bias", H, 0), H, H);
    for (int i = 0; i < H; i++) pooled[i] = tanh(pooled[i]);
    dense(sop, pooled, hget(m, "cls.seq_relationship.weight", 2, H), hget(m, "cls.seq_relationship.bias", 2, 0), H, 2);
    double mx = fmax(sop[0], sop[1]);
    loss += mx + log(exp(sop[0] - mx) + exp(sop[1] - mx)) - sop[BSOP[0]];
    return loss;
}

/* A trident BERT of activation act exported: config.json's hidden_act is hf_act, and the
 * reference reading it computes trident's logits and loss. */
static void check_bert_export(int act, const char *hf_act, const char *tag)
{
    gpt_config c = {.num_layers = L, .hidden = H, .heads = NH, .ffn = F, .seq = T, .max_pos = P, .vocab = V,
                    .padded_vocab = gpt_padded_vocab(V, 8, 1), .init_std = 0.3f, .seed = 17,
                    .kind = GPT_KIND_ENCODER, .binary_head = 1, .act = act};
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, L, 1, 1);
    /* the zero-initialised biases and norms moved, so that the file's every tensor counts */
    float *host = malloc(m->numel * sizeof(float));
    be_memcpy(g_be, host, m->params, m->numel * sizeof(float), BE_D2H);
    uint64_t seed = 3;
    for (int i = 0; i < m->ntensors; i++)
        if (m->table[i].ndim == 1)
            for (size_t k = 0; k < m->table[i].numel; k++) host[m->table[i].offset + k] += (float)(0.4 * (lcg_uniform(&seed) - 0.5));
    be_memcpy(g_be, m->params, host, m->numel * sizeof(float), BE_H2D);
    free(host);
    char hfdir[600];
    hmodel hm = {0};
    export_model(m, tag, hfdir, sizeof hfdir, &hm);
    assert_int_equal(hm.n, 3 + 16 * L + 2 + 2 + 4 + 1 + 2); /* embeddings, layers, encoder.ln, pooler, transform, bias, seq_relationship */
    hget(&hm, "bert.encoder.layer.1.attention.self.key.weight", H, H);
    hget(&hm, "bert.encoder.layer.0.intermediate.dense.weight", F, H);
    hget(&hm, "cls.predictions.bias", V, 0);
    hget(&hm, "cls.seq_relationship.weight", 2, H);
    cJSON *cfg = read_config_json(hfdir);
    assert_string_equal(cJSON_GetObjectItem(cfg, "model_type")->valuestring, "megatron-bert");
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(cfg, "architectures"), 0)->valuestring,
                        "MegatronBertForPreTraining");
    const char *said = cJSON_GetObjectItem(cfg, "hidden_act")->valuestring;
    assert_string_equal(said, hf_act);
    g_bert_act = strcmp(said, "gelu") == 0 ? gelu_exact : gelu_new;
    assert_int_equal(cJSON_GetObjectItem(cfg, "type_vocab_size")->valueint, 2);
    double eps = cJSON_GetObjectItem(cfg, "layer_norm_eps")->valuedouble;
    cJSON_Delete(cfg);

    static double ref[T * V];
    double ref_l = ref_bert(&hm, ref, eps);
    int32_t lengths[1] = {BS};
    gpt_batch bb = {.types = BTYPES, .lengths = lengths, .labels = BSOP, .token_weight = 0.5f, .sample_weight = 1.0f}; /* 2 masked tokens, 1 sample */
    int64_t sample[1] = {0};
    gpt_acts *a = gpt_acts_acquire(m);
    double loss = 0;
    bb.B = 1, bb.ids = IDS, bb.targets = BLABELS, bb.sample = sample;
    gpt_forward(m, a, &bb, NULL, 0, &loss);
    float *got = malloc((size_t)T * m->vocab_l * sizeof(float));
    be_memcpy(g_be, got, gpt_acts_logits(a), (size_t)T * m->vocab_l * sizeof(float), BE_D2H);
    gpt_acts_release(m, a);
    double maxd = 0, maxr = 0; /* the unpadded positions (the padded ones are never used) */
    for (int t = 0; t < BS; t++)
        for (int v = 0; v < V; v++) {
            maxd = fmax(maxd, fabs(got[t * m->vocab_l + v] - ref[t * V + v]));
            maxr = fmax(maxr, fabs(ref[t * V + v]));
        }
    printf("%s trident -> hf: max |trident - reference| %.3g over logits up to %.3g; loss %.8f, reference %.8f\n",
           tag, maxd, maxr, loss, ref_l);
    assert_true(maxr > 0.5 && maxd <= 1e-5 * maxr);
    assert_true(fabs(loss - ref_l) <= 1e-5 * ref_l);
    free(got);
    hfree(&hm);
    check_round_trip(m, hfdir, tag);
    gpt_free(m);
    g_bert_act = gelu_new;
}

static void bert_export_matches_reference_and_round_trips(void **state)
{
    (void)state;
    check_bert_export(TD_ACT_GELU, "gelu_new", "bert_export");
    /* Megatron-BERT's own exact GeLU (--activation-func gelu_erf) exports as transformers' "gelu" */
    check_bert_export(TD_ACT_GELU_ERF, "gelu", "bert_erf_export");
}

/* ---- Mixtral and Qwen2-MoE: an independent MixtralForCausalLM and Qwen2MoeForCausalLM ---- */

/* hidden, heads, key/value heads, head size, experts, experts a token, an expert's and the shared
 * expert's hidden sizes, Qwen's dense intermediate_size (in config.json only: no layer is dense) */
enum { MH = 32, MNH = 4, MG = 2, MD = 8, ME = 4, MK = 2, MF = 16, MS = 24, MDENSE = 40 };

typedef struct {
    int qwen;      /* Qwen2MoeForCausalLM (q/k/v biases, a shared expert under a sigmoid gate), else Mixtral */
    int norm_topk; /* the k chosen softmax weights divided by their sum (Mixtral; Qwen's norm_topk_prob) */
    int tied;      /* no lm_head.weight: the word embedding is the head */
    double eps, theta;
} moe_kind;

static const char *MIXTRAL_CONFIG =
    "{\"model_type\": \"mixtral\", \"architectures\": [\"MixtralForCausalLM\"], \"vocab_size\": 50, "
    "\"hidden_size\": 32, \"intermediate_size\": 16, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 2, \"head_dim\": 8, \"max_position_embeddings\": 8, \"rms_norm_eps\": 1e-05, "
    "\"rope_theta\": 300.0, \"hidden_act\": \"silu\", \"num_local_experts\": 4, \"num_experts_per_tok\": 2, "
    "\"router_aux_loss_coef\": 0.02, \"router_jitter_noise\": 0.0, \"output_router_logits\": false, "
    "\"sliding_window\": null, \"tie_word_embeddings\": false}";
static const moe_kind MIXTRAL = {.qwen = 0, .norm_topk = 1, .tied = 0, .eps = 1e-5, .theta = 300.0};

/* as transformers 5 writes it: rope_parameters, layer_types; a sliding_window shorter than the
 * positions that use_sliding_window false leaves unused */
static const char *QWEN2MOE_CONFIG =
    "{\"model_type\": \"qwen2_moe\", \"architectures\": [\"Qwen2MoeForCausalLM\"], \"vocab_size\": 50, "
    "\"hidden_size\": 32, \"intermediate_size\": 40, \"moe_intermediate_size\": 16, "
    "\"shared_expert_intermediate_size\": 24, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 2, \"max_position_embeddings\": 8, \"rms_norm_eps\": 1e-06, "
    "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 700.0}, \"hidden_act\": \"silu\", "
    "\"num_experts\": 4, \"num_experts_per_tok\": 2, \"norm_topk_prob\": false, \"decoder_sparse_step\": 1, "
    "\"mlp_only_layers\": [], \"qkv_bias\": true, \"use_sliding_window\": false, \"sliding_window\": 4, "
    "\"max_window_layers\": 28, \"layer_types\": [\"full_attention\", \"full_attention\"], "
    "\"router_aux_loss_coef\": 0.001, \"tie_word_embeddings\": false}";
static const moe_kind QWEN2MOE = {.qwen = 1, .norm_topk = 0, .tied = 0, .eps = 1e-6, .theta = 700.0};

/* The names of layer l's router and of expert e's gate, up and down projections (w = 0, 1, 2). */
static const char *moe_router_name(const moe_kind *k, int l, char *n, size_t len)
{
    snprintf(n, len, k->qwen ? "model.layers.%d.mlp.gate.weight" : "model.layers.%d.block_sparse_moe.gate.weight", l);
    return n;
}
static const char *moe_expert_name(const moe_kind *k, int l, int e, int w, char *n, size_t len)
{
    static const char *const qwen[] = {"gate_proj", "up_proj", "down_proj"}, *const mixtral[] = {"w1", "w3", "w2"};
    if (k->qwen) snprintf(n, len, "model.layers.%d.mlp.experts.%d.%s.weight", l, e, qwen[w]);
    else snprintf(n, len, "model.layers.%d.block_sparse_moe.experts.%d.%s.weight", l, e, mixtral[w]);
    return n;
}

/* A random model of the kind, in transformers' names and shapes. */
static void random_moe(hmodel *m, const moe_kind *k, uint64_t seed)
{
    char n[128];
    hadd(m, "model.embed_tokens.weight", V, MH);
    for (int l = 0; l < L; l++) {
        const struct {
            const char *s;
            int64_t d0, d1;
            int qwen_only;
        } shapes[] = {{"input_layernorm.weight", MH, 0, 0},      {"self_attn.q_proj.weight", MNH * MD, MH, 0},
                      {"self_attn.k_proj.weight", MG * MD, MH, 0}, {"self_attn.v_proj.weight", MG * MD, MH, 0},
                      {"self_attn.q_proj.bias", MNH * MD, 0, 1},  {"self_attn.k_proj.bias", MG * MD, 0, 1},
                      {"self_attn.v_proj.bias", MG * MD, 0, 1},   {"self_attn.o_proj.weight", MH, MNH * MD, 0},
                      {"post_attention_layernorm.weight", MH, 0, 0}, {"mlp.shared_expert.gate_proj.weight", MS, MH, 1},
                      {"mlp.shared_expert.up_proj.weight", MS, MH, 1}, {"mlp.shared_expert.down_proj.weight", MH, MS, 1},
                      {"mlp.shared_expert_gate.weight", 1, MH, 1}};
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            if (shapes[i].qwen_only && !k->qwen) continue;
            snprintf(n, sizeof n, "model.layers.%d.%s", l, shapes[i].s);
            hadd(m, n, shapes[i].d0, shapes[i].d1);
        }
        hadd(m, moe_router_name(k, l, n, sizeof n), ME, MH);
        for (int e = 0; e < ME; e++) {
            hadd(m, moe_expert_name(k, l, e, 0, n, sizeof n), MF, MH);
            hadd(m, moe_expert_name(k, l, e, 1, n, sizeof n), MF, MH);
            hadd(m, moe_expert_name(k, l, e, 2, n, sizeof n), MH, MF);
        }
    }
    hadd(m, "model.norm.weight", MH, 0);
    if (!k->tied) hadd(m, "lm_head.weight", V, MH);
    for (int i = 0; i < m->n; i++) {
        htensor *t = &m->t[i];
        int64_t cnt = t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1);
        int norm = strstr(t->name, "norm") != NULL;
        for (int64_t j = 0; j < cnt; j++) t->v[j] = (float)((norm ? 1.0 : 0.0) + 0.8 * (lcg_uniform(&seed) - 0.5));
    }
}

static void rms_n(double *out, const double *in, const float *w, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++) ss += in[i] * in[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) out[i] = in[i] * r * w[i];
}

/* transformers' rotate-half rotary positions on one head of MD. */
static void rope_head(double *x, int pos, double theta)
{
    double y[MD];
    for (int i = 0; i < MD; i++) {
        double ang = pos * pow(theta, -2.0 * (i % (MD / 2)) / MD);
        double rot = i < MD / 2 ? -x[i + MD / 2] : x[i - MD / 2];
        y[i] = x[i] * cos(ang) + rot * sin(ang);
    }
    memcpy(x, y, sizeof y);
}

static double silu(double v) { return v / (1.0 + exp(-v)); }

/* down (silu(gate x) * (up x)) of hidden width f (at most MS). */
static void swiglu_mlp(double *out, const double *in, const float *gate, const float *up, const float *down, int f)
{
    double g[MS], u[MS];
    linear(g, in, gate, MH, f);
    linear(u, in, up, MH, f);
    for (int i = 0; i < f; i++) g[i] = silu(g[i]) * u[i];
    linear(out, g, down, f, MH);
}

/* The sparse MLP block of layer l on one token: the softmax over all experts' logits, its MK
 * largest (ties to the lower index), divided by their sum when norm_topk; the chosen experts'
 * outputs so weighted; Qwen: plus the shared expert times sigmoid(shared_expert_gate . x).
 * *nearest: the smallest gap between the k-th chosen and the best unchosen probability seen. */
static void ref_moe_block(double *out, const double *in, const hmodel *m, const moe_kind *k, int l, double *nearest)
{
    char n[128];
    double lg[ME], p[ME], mx = -INFINITY, sum = 0;
    linear(lg, in, hget(m, moe_router_name(k, l, n, sizeof n), ME, MH), MH, ME);
    for (int e = 0; e < ME; e++) mx = fmax(mx, lg[e]);
    for (int e = 0; e < ME; e++) sum += p[e] = exp(lg[e] - mx);
    for (int e = 0; e < ME; e++) p[e] /= sum;
    int chosen[MK], used[ME] = {0};
    double w[MK], wsum = 0;
    for (int j = 0; j < MK; j++) {
        int best = -1;
        for (int e = 0; e < ME; e++)
            if (!used[e] && (best < 0 || p[e] > p[best])) best = e;
        used[best] = 1;
        chosen[j] = best;
        wsum += w[j] = p[best];
    }
    for (int e = 0; e < ME; e++)
        if (!used[e]) *nearest = fmin(*nearest, w[MK - 1] - p[e]);
    if (k->norm_topk)
        for (int j = 0; j < MK; j++) w[j] /= wsum;
    for (int i = 0; i < MH; i++) out[i] = 0;
    for (int j = 0; j < MK; j++) {
        double y[MH];
        char g[128], u[128], d[128];
        int e = chosen[j];
        swiglu_mlp(y, in, hget(m, moe_expert_name(k, l, e, 0, g, sizeof g), MF, MH),
                   hget(m, moe_expert_name(k, l, e, 1, u, sizeof u), MF, MH),
                   hget(m, moe_expert_name(k, l, e, 2, d, sizeof d), MH, MF), MF);
        for (int i = 0; i < MH; i++) out[i] += w[j] * y[i];
    }
    if (!k->qwen) return;
    double y[MH], glog;
    swiglu_mlp(y, in, bget(m, "model.layers.%d.mlp.shared_expert.gate_proj.weight", l, MS, MH),
               bget(m, "model.layers.%d.mlp.shared_expert.up_proj.weight", l, MS, MH),
               bget(m, "model.layers.%d.mlp.shared_expert.down_proj.weight", l, MH, MS), MS);
    linear(&glog, in, bget(m, "model.layers.%d.mlp.shared_expert_gate.weight", l, 1, MH), MH, 1);
    for (int i = 0; i < MH; i++) out[i] += y[i] / (1.0 + exp(-glog));
}

/* The model's logits (T, V) for IDS; *nearest as ref_moe_block's over every token and layer. */
static void ref_moe_logits(const hmodel *m, const moe_kind *k, double *logits, double *nearest)
{
    static double x[T][MH], a[T][MH], q[T][MNH * MD], kk[T][MG * MD], v[T][MG * MD], y[T][MNH * MD], tmp[T][MH];
    const float *emb = hget(m, "model.embed_tokens.weight", V, MH);
    *nearest = INFINITY;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < MH; i++) x[t][i] = emb[IDS[t] * MH + i];
    for (int l = 0; l < L; l++) {
        for (int t = 0; t < T; t++) {
            rms_n(a[t], x[t], bget(m, "model.layers.%d.input_layernorm.weight", l, MH, 0), MH, k->eps);
            linear(q[t], a[t], bget(m, "model.layers.%d.self_attn.q_proj.weight", l, MNH * MD, MH), MH, MNH * MD);
            linear(kk[t], a[t], bget(m, "model.layers.%d.self_attn.k_proj.weight", l, MG * MD, MH), MH, MG * MD);
            linear(v[t], a[t], bget(m, "model.layers.%d.self_attn.v_proj.weight", l, MG * MD, MH), MH, MG * MD);
            if (k->qwen) {
                const float *qb = bget(m, "model.layers.%d.self_attn.q_proj.bias", l, MNH * MD, 0);
                const float *kb = bget(m, "model.layers.%d.self_attn.k_proj.bias", l, MG * MD, 0);
                const float *vb = bget(m, "model.layers.%d.self_attn.v_proj.bias", l, MG * MD, 0);
                for (int i = 0; i < MNH * MD; i++) q[t][i] += qb[i];
                for (int i = 0; i < MG * MD; i++) kk[t][i] += kb[i], v[t][i] += vb[i];
            }
            for (int hd = 0; hd < MNH; hd++) rope_head(q[t] + hd * MD, t, k->theta);
            for (int g = 0; g < MG; g++) rope_head(kk[t] + g * MD, t, k->theta);
        }
        for (int hd = 0; hd < MNH; hd++) {
            int g = hd / (MNH / MG); /* repeat_kv */
            for (int t = 0; t < T; t++) {
                double s[T], mx = -INFINITY, sum = 0;
                for (int u = 0; u <= t; u++) {
                    s[u] = 0;
                    for (int e = 0; e < MD; e++) s[u] += q[t][hd * MD + e] * kk[u][g * MD + e];
                    s[u] /= sqrt((double)MD);
                    mx = fmax(mx, s[u]);
                }
                for (int u = 0; u <= t; u++) sum += (s[u] = exp(s[u] - mx));
                for (int e = 0; e < MD; e++) {
                    double acc = 0;
                    for (int u = 0; u <= t; u++) acc += s[u] / sum * v[u][g * MD + e];
                    y[t][hd * MD + e] = acc;
                }
            }
        }
        for (int t = 0; t < T; t++) {
            linear(tmp[t], y[t], bget(m, "model.layers.%d.self_attn.o_proj.weight", l, MH, MNH * MD), MNH * MD, MH);
            for (int i = 0; i < MH; i++) x[t][i] += tmp[t][i];
            rms_n(a[t], x[t], bget(m, "model.layers.%d.post_attention_layernorm.weight", l, MH, 0), MH, k->eps);
            ref_moe_block(tmp[t], a[t], m, k, l, nearest);
            for (int i = 0; i < MH; i++) x[t][i] += tmp[t][i];
        }
    }
    const float *head = k->tied ? emb : hget(m, "lm_head.weight", V, MH);
    for (int t = 0; t < T; t++) {
        rms_n(a[t], x[t], hget(m, "model.norm.weight", MH, 0), MH, k->eps);
        linear(logits + t * V, a[t], head, MH, V);
    }
}

/* trident's logits and loss for the model against the reference's; the routing decisions are
 * away from ties (the nearest printed): a flipped choice would be an O(1) error, not noise. */
static void compare_moe(gpt_model *m, const hmodel *hm, const moe_kind *k, const char *what)
{
    double ref[T * V], nearest;
    ref_moe_logits(hm, k, ref, &nearest);
    printf("%s: nearest tie between a chosen and an unchosen expert: %.3g in probability\n", what, nearest);
    assert_true(nearest > 1e-4);
    float *got = trident_logits(m);
    compare_logits(got, m->vocab_l, ref, what);
    compare_loss(m, ref, what);
    free(got);
}

/* Every tensor of `want` is in `got` with its shape and bit for bit its values, and nothing else. */
static void same_tensors(const hmodel *want, const hmodel *got)
{
    assert_int_equal(got->n, want->n);
    for (int i = 0; i < want->n; i++) {
        const htensor *t = &want->t[i];
        const float *g = hget(got, t->name, t->shape[0], t->shape[1]);
        assert_memory_equal(g, t->v, (size_t)(t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1)) * sizeof(float));
    }
}

/* The trident checkpoint ck exported to "<tag>_hf" (hfdir), read back into hm. */
static void export_checkpoint(const char *ck, const char *tag, char *hfdir, size_t len, hmodel *hm)
{
    char name[80], err[1024] = "";
    snprintf(name, sizeof name, "%s_hf", tag);
    sub(hfdir, len, name);
    ckpt_meta meta;
    if (ckpt_find(ck, &meta, err, sizeof err)) fail_msg("%s", err);
    if (hf_export(&meta, hfdir, ST_F32, err, sizeof err)) fail_msg("%s", err);
    ckpt_meta_free(&meta);
    read_hf(hm, hfdir);
}

/* hf -> trident (the file, or `shards` > 1 files and their index): the logits and loss trident
 * computes are the reference's; the checkpoint's model is the config's; trident -> hf gives back
 * every tensor bit for bit. */
static void moe_import(const moe_kind *k, const char *config, const char *tag, int shards)
{
    hmodel hm = {0}, back = {0};
    random_moe(&hm, k, k->qwen ? 21 : 13);
    char hfdir[600], ck[600], name[64], err[1024] = "";
    snprintf(name, sizeof name, "%s_import_hf", tag);
    sub(hfdir, sizeof hfdir, name);
    snprintf(name, sizeof name, "%s_import_ckpt", tag);
    sub(ck, sizeof ck, name);
    if (shards > 1) write_hf_sharded(&hm, hfdir, config, shards);
    else write_hf(&hm, hfdir, config);
    if (hf_import(hfdir, ck, 8, "cpu", g_world, err, sizeof err)) fail_msg("%s", err);
    gpt_model *m = load_model(ck);
    const gpt_config *c = &m->cfg;
    assert_int_equal(c->num_experts, ME);
    assert_int_equal(c->moe_topk, MK);
    assert_int_equal(gpt_moe_ffn(c), MF);
    assert_int_equal(c->moe_pre_softmax, !k->norm_topk);
    assert_int_equal(c->moe_shared_ffn, k->qwen ? MS : 0);
    assert_int_equal(c->moe_shared_gate, k->qwen);
    assert_int_equal(c->add_qkv_bias, k->qwen);
    assert_int_equal(gpt_groups(c), MG);
    assert_true(c->glu && c->disable_bias && c->untied && c->norm == GPT_NORM_RMSNORM);
    assert_true(fabs(gpt_rotary_base(c) - k->theta) < 1e-3);
    assert_true(fabs(c->moe_aux_coeff - (k->qwen ? 0.001 : 0.02)) < 1e-9);
    if (k->qwen) assert_int_equal(c->ffn, MDENSE);
    snprintf(name, sizeof name, "%s hf -> trident", tag);
    compare_moe(m, &hm, k, name);
    gpt_free(m);

    snprintf(name, sizeof name, "%s_reexport", tag);
    export_checkpoint(ck, name, hfdir, sizeof hfdir, &back);
    same_tensors(&hm, &back);
    cJSON *cfg = read_config_json(hfdir);
    assert_int_equal(cJSON_GetObjectItem(cfg, k->qwen ? "num_experts" : "num_local_experts")->valueint, ME);
    assert_int_equal(cJSON_GetObjectItem(cfg, "num_experts_per_tok")->valueint, MK);
    assert_int_equal(cJSON_GetObjectItem(cfg, k->qwen ? "moe_intermediate_size" : "intermediate_size")->valueint, MF);
    if (k->qwen) {
        assert_int_equal(cJSON_GetObjectItem(cfg, "intermediate_size")->valueint, MDENSE);
        assert_int_equal(cJSON_GetObjectItem(cfg, "shared_expert_intermediate_size")->valueint, MS);
        assert_true(cJSON_IsFalse(cJSON_GetObjectItem(cfg, "norm_topk_prob")));
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cfg, "qkv_bias")));
    }
    cJSON_Delete(cfg);
    hfree(&back);
    hfree(&hm);
}

static void mixtral_import_matches_reference_and_round_trips(void **state)
{
    (void)state;
    moe_import(&MIXTRAL, MIXTRAL_CONFIG, "mixtral", 1);
}

static void qwen2moe_import_matches_reference_and_round_trips(void **state)
{
    (void)state;
    moe_import(&QWEN2MOE, QWEN2MOE_CONFIG, "qwen2moe", 1);
}

/* As published (Mixtral-8x7B in 19 files): the shards of model.safetensors.index.json. */
static void mixtral_import_sharded(void **state)
{
    (void)state;
    moe_import(&MIXTRAL, MIXTRAL_CONFIG, "mixtral_sharded", 3);
}

/* dir's index with weight_map[name] = file. */
static void set_weight_map(const char *dir, const char *name, const char *file)
{
    char path[700];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    cJSON *idx = cJSON_Parse(text), *map = cJSON_GetObjectItem(idx, "weight_map");
    assert_non_null(map);
    cJSON_DeleteItemFromObject(map, name);
    cJSON_AddStringToObject(map, name, file);
    char *out = cJSON_Print(idx);
    f = fopen(path, "w");
    fputs(out, f);
    fclose(f);
    free(out);
    cJSON_Delete(idx);
}

/* Shards that disagree with their index, or are missing, are refused naming the file. */
static void sharded_files_refused(void **state)
{
    (void)state;
    const struct {
        const char *file, *want;
        int drop, extra; /* remove shard 2; write a shard holding the first tensor again */
    } cases[] = {
        {"model-00002-of-00003.safetensors", "weight_map puts model.embed_tokens.weight in model-00002-of-00003.safetensors, which does not hold it", 0, 0},
        {"../model-00001-of-00003.safetensors", "weight_map's entry for model.embed_tokens.weight is not a file name of the folder", 0, 0},
        {"model-00001-of-00003.safetensors", "names shard model-00002-of-00003.safetensors, which does not open", 1, 0},
        {"model-extra.safetensors", "tensor model.embed_tokens.weight is in two shards", 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hmodel hm = {0};
        random_moe(&hm, &MIXTRAL, 5);
        char hfdir[600], ck[600], path[700], err[1024] = "";
        sub(hfdir, sizeof hfdir, "bad_shards_hf");
        sub(ck, sizeof ck, "bad_shards_ckpt");
        write_hf_sharded(&hm, hfdir, MIXTRAL_CONFIG, 3);
        set_weight_map(hfdir, "model.embed_tokens.weight", cases[i].file);
        snprintf(path, sizeof path, "%s/model-00002-of-00003.safetensors", hfdir);
        if (cases[i].drop) assert_int_equal(unlink(path), 0);
        snprintf(path, sizeof path, "%s/model-extra.safetensors", hfdir);
        if (cases[i].extra) write_st(&hm, path, 0, 1);
        assert_int_equal(hf_import(hfdir, ck, 8, "cpu", g_world, err, sizeof err), -1);
        if (!strstr(err, cases[i].want)) fail_msg("error '%s' lacks '%s'", err, cases[i].want);
        printf("  refused: %s\n", err);
        assert_null(strchr(err, '\n'));
        struct stat sb;
        assert_int_not_equal(stat(ck, &sb), 0); /* nothing written */
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", hfdir);
        assert_int_equal(system(cmd), 0);
        hfree(&hm);
    }
}

/* A trident mixture of experts of the kind (its 1-D tensors, zeros and ones at init, moved so
 * that every one counts). */
static gpt_model *moe_model(const moe_kind *k, uint64_t seed)
{
    gpt_config c = {.num_layers = L, .hidden = MH, .heads = MNH, .query_groups = MG, .kv_channels = MD,
                    .ffn = 64, /* not the experts' size: a Mixtral's comes back as it */
                    .seq = T, .max_pos = P, .vocab = V, .padded_vocab = gpt_padded_vocab(V, 8, 1),
                    .norm = GPT_NORM_RMSNORM, .norm_eps = (float)k->eps, .pos = GPT_POS_ROPE,
                    .rotary_base = (float)k->theta, .act = TD_ACT_SILU, .glu = 1, .disable_bias = 1, .add_qkv_bias = k->qwen,
                    .untied = !k->tied, .init_std = 0.4f, .seed = seed, .num_experts = ME, .moe_ffn = MF,
                    .moe_topk = MK, .moe_pre_softmax = !k->norm_topk, .moe_shared_ffn = k->qwen ? MS : 0,
                    .moe_shared_gate = k->qwen, .moe_aux_coeff = 0.01f};
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, L, 1, 1);
    float *host = malloc(m->numel * sizeof(float));
    be_memcpy(g_be, host, m->params, m->numel * sizeof(float), BE_D2H);
    for (int i = 0; i < m->ntensors; i++)
        if (m->table[i].ndim == 1)
            for (size_t j = 0; j < m->table[i].numel; j++) host[m->table[i].offset + j] += (float)(0.4 * (lcg_uniform(&seed) - 0.5));
    be_memcpy(g_be, m->params, host, m->numel * sizeof(float), BE_H2D);
    free(host);
    return m;
}

/* trident -> hf: the files hold transformers' names and shapes, and the reference's logits over
 * them are trident's; hf -> trident gives back every parameter bit for bit. Mixtral untied,
 * Qwen2-MoE tied and renormalising its top-k (norm_topk_prob true). */
static void moe_export_matches_reference_and_round_trips(void **state)
{
    (void)state;
    static const moe_kind kinds[] = {{.qwen = 0, .norm_topk = 1, .tied = 0, .eps = 1e-5, .theta = 300.0},
                                     {.qwen = 1, .norm_topk = 1, .tied = 1, .eps = 1e-6, .theta = 700.0}};
    for (int i = 0; i < 2; i++) {
        const moe_kind *k = &kinds[i];
        const char *tag = k->qwen ? "qwen2moe_export" : "mixtral_export";
        gpt_model *m = moe_model(k, 31 + (uint64_t)i);
        char hfdir[600], n[128];
        hmodel hm = {0};
        export_model(m, tag, hfdir, sizeof hfdir, &hm);
        assert_int_equal(hm.n, 2 + !k->tied + L * (6 + 1 + 3 * ME + (k->qwen ? 3 + 4 : 0)));
        hget(&hm, moe_router_name(k, 1, n, sizeof n), ME, MH);
        hget(&hm, moe_expert_name(k, 0, ME - 1, 0, n, sizeof n), MF, MH);
        hget(&hm, moe_expert_name(k, 1, 2, 2, n, sizeof n), MH, MF);
        if (k->qwen) hget(&hm, "model.layers.1.mlp.shared_expert_gate.weight", 1, MH);
        cJSON *cfg = read_config_json(hfdir);
        assert_string_equal(cJSON_GetObjectItem(cfg, "model_type")->valuestring, k->qwen ? "qwen2_moe" : "mixtral");
        assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(cfg, "architectures"), 0)->valuestring,
                            k->qwen ? "Qwen2MoeForCausalLM" : "MixtralForCausalLM");
        assert_int_equal(cJSON_GetObjectItem(cfg, "num_experts_per_tok")->valueint, MK);
        assert_true(fabs(cJSON_GetObjectItem(cfg, "router_aux_loss_coef")->valuedouble - 0.01) < 1e-12);
        if (k->qwen) assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cfg, "norm_topk_prob")));
        assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItem(cfg, "tie_word_embeddings")), k->tied);
        cJSON_Delete(cfg);
        compare_moe(m, &hm, k, k->qwen ? "qwen2moe trident -> hf" : "mixtral trident -> hf");
        hfree(&hm);
        check_round_trip(m, hfdir, tag);
        gpt_free(m);
    }
}

/* base (a config.json) with the keys of `extra` replaced (a JSON object's members). */
static char *config_with(const char *base, const char *extra)
{
    char fragment[512];
    cJSON *cfg = cJSON_Parse(base), *over;
    snprintf(fragment, sizeof fragment, "{%s}", extra);
    over = cJSON_Parse(fragment);
    assert_non_null(cfg);
    assert_non_null(over);
    for (cJSON *j = over->child; j; j = j->next) {
        cJSON_DeleteItemFromObject(cfg, j->string);
        cJSON_AddItemToObject(cfg, j->string, cJSON_Duplicate(j, 1));
    }
    char *s = cJSON_PrintUnformatted(cfg);
    cJSON_Delete(cfg);
    cJSON_Delete(over);
    return s;
}

static void expect_moe_error(const moe_kind *k, const char *extra, const char *want)
{
    hmodel hm = {0};
    random_moe(&hm, k, 5);
    char hfdir[600], ck[600], err[1024] = "";
    sub(hfdir, sizeof hfdir, "bad_moe_hf");
    sub(ck, sizeof ck, "bad_moe_ckpt");
    char *config = config_with(k->qwen ? QWEN2MOE_CONFIG : MIXTRAL_CONFIG, extra);
    write_hf(&hm, hfdir, config);
    free(config);
    assert_int_equal(hf_import(hfdir, ck, 8, "cpu", g_world, err, sizeof err), -1);
    if (!strstr(err, want)) fail_msg("error '%s' lacks '%s'", err, want);
    assert_null(strchr(err, '\n'));
    struct stat sb;
    assert_int_not_equal(stat(ck, &sb), 0); /* nothing written */
    hfree(&hm);
}

/* A trident model the families cannot hold is refused on export, naming what differs from each. */
static void expect_moe_export_error(gpt_config c, const char *tag, const char *const *want)
{
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, L, 1, 1);
    char ck[600], out[600], name[64], err[1024] = "";
    snprintf(name, sizeof name, "%s_ckpt", tag);
    sub(ck, sizeof ck, name);
    snprintf(name, sizeof name, "%s_hf", tag);
    sub(out, sizeof out, name);
    ckpt_model cm = {g_ps, 1, &m, NULL, NULL, NULL, NULL};
    ckpt_progress prog = {.iteration = 1, .seed = c.seed};
    ckpt_save(ck, &cm, &prog, "{}", 0, NULL);
    ckpt_meta meta;
    if (ckpt_find(ck, &meta, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(hf_export(&meta, out, ST_F32, err, sizeof err), -1);
    ckpt_meta_free(&meta);
    gpt_free(m);
    for (int i = 0; want[i]; i++)
        if (!strstr(err, want[i])) fail_msg("error '%s' lacks '%s'", err, want[i]);
    struct stat sb;
    assert_int_not_equal(stat(out, &sb), 0); /* nothing written */
}

static void moe_refuses_what_it_cannot_compute(void **state)
{
    (void)state;
    expect_moe_error(&MIXTRAL, "\"router_jitter_noise\": 0.01", "router_jitter_noise is 0.01");
    expect_moe_error(&MIXTRAL, "\"sliding_window\": 4", "sliding_window 4 is shorter than max_position_embeddings 8");
    expect_moe_error(&MIXTRAL, "\"num_experts_per_tok\": 5", "num_experts_per_tok 5 is more than the 4 experts");
    expect_moe_error(&MIXTRAL, "\"num_local_experts\": 5",
                     "tensor model.layers.1.block_sparse_moe.experts.4.w2.weight is missing");
    expect_moe_error(&MIXTRAL, "\"num_local_experts\": 3",
                     "block_sparse_moe.gate.weight has shape [4, 32] but the config makes it [3, 32]");
    expect_moe_error(&MIXTRAL, "\"num_local_experts\": 2000", "num_local_experts 2000 is more than the 1024 experts");
    expect_moe_error(&MIXTRAL, "\"intermediate_size\": 24", "experts.0.w2.weight has shape [32, 16] but the config makes it [32, 24]");
    expect_moe_error(&QWEN2MOE, "\"decoder_sparse_step\": 2", "decoder_sparse_step is 2");
    expect_moe_error(&QWEN2MOE, "\"mlp_only_layers\": [1]", "mlp_only_layers is not empty");
    expect_moe_error(&QWEN2MOE, "\"use_sliding_window\": true", "use_sliding_window is true");
    expect_moe_error(&QWEN2MOE, "\"layer_types\": [\"sliding_attention\", \"full_attention\"]", "sliding_attention");
    expect_moe_error(&QWEN2MOE, "\"rope_parameters\": {\"rope_type\": \"longrope\", \"rope_theta\": 700.0}",
                     "rope_type 'longrope' is not one");
    expect_moe_error(&QWEN2MOE, "\"shared_expert_intermediate_size\": 0", "shared_expert_intermediate_size");
    expect_moe_error(&QWEN2MOE, "\"qkv_bias\": false", "unexpected tensor model.layers.0.self_attn.q_proj.bias");

    gpt_config c = {.num_layers = L, .hidden = MH, .heads = MNH, .ffn = MF, .seq = T, .max_pos = P, .vocab = V,
                    .padded_vocab = gpt_padded_vocab(V, 8, 1), .norm = GPT_NORM_RMSNORM, .pos = GPT_POS_ROPE,
                    .act = TD_ACT_SILU, .glu = 1, .disable_bias = 1, .init_std = 0.3f, .seed = 3, .num_experts = ME, .moe_topk = MK,
                    .moe_score = 1};
    const char *const sigmoid[] = {"LlamaForCausalLM: a mixture of experts", "MixtralForCausalLM: a sigmoid router",
                                   "Qwen2MoeForCausalLM: a sigmoid router", NULL};
    expect_moe_export_error(c, "moe_sigmoid", sigmoid);
    c.moe_score = 0, c.moe_shared_ffn = MS;
    const char *const ungated[] = {"MixtralForCausalLM: a shared expert",
                                   "Qwen2MoeForCausalLM: a shared expert without its gate", NULL};
    expect_moe_export_error(c, "moe_ungated", ungated);
    c.moe_shared_ffn = 0, c.moe_pre_softmax = 1;
    const char *const pre[] = {"MixtralForCausalLM: weights not renormalised", "Qwen2MoeForCausalLM: no shared expert",
                               NULL};
    expect_moe_export_error(c, "moe_pre_softmax", pre);
}

/* ---- the list of families: which converts what, and each one's own tensors ---- */

/* The text of DIR/config.json (malloc'd). */
static char *config_text(const char *dir)
{
    cJSON *cfg = read_config_json(dir);
    char *s = cJSON_PrintUnformatted(cfg);
    cJSON_Delete(cfg);
    return s;
}

static void families_route_models_and_tensors(void **state)
{
    (void)state;
    /* the class each family of trident models converts to, and the model_types read */
    gpt_config gc = {.kind = GPT_KIND_DECODER}, bc = {.kind = GPT_KIND_ENCODER};
    assert_string_equal(hf_class_of(&gc), "GPT2LMHeadModel");
    assert_string_equal(hf_class_of(&bc), "MegatronBertForPreTraining");
    char types[256];
    hf_model_types(types, sizeof types);
    assert_string_equal(types, "gpt2, llama, mistral, mixtral, qwen2_moe and megatron-bert");

    /* a model no family computes: refused, naming what differs from each (BERT's: the family) */
    gpt_config c = {.num_layers = L, .hidden = H, .heads = NH, .ffn = F, .seq = T, .max_pos = P, .vocab = V,
                    .padded_vocab = gpt_padded_vocab(V, 8, 1), .init_std = 0.3f, .seed = 5,
                    .norm = GPT_NORM_RMSNORM, .pos = GPT_POS_LEARNED};
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, L, 1, 1);
    char ck[600], out[600], err[1024] = "";
    sub(ck, sizeof ck, "nofamily_ckpt");
    sub(out, sizeof out, "nofamily_hf");
    ckpt_model cm = {g_ps, 1, &m, NULL, NULL, NULL, NULL};
    ckpt_progress prog = {.iteration = 1, .seed = 5};
    ckpt_save(ck, &cm, &prog, "{}", 0, NULL);
    ckpt_meta meta;
    if (ckpt_find(ck, &meta, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(hf_export(&meta, out, ST_F32, err, sizeof err), -1);
    ckpt_meta_free(&meta);
    gpt_free(m);
    if (!strstr(err, "GPT2LMHeadModel: RMSNorm") || !strstr(err, "LlamaForCausalLM: no rotary positions") ||
        !strstr(err, "MegatronBertForPreTraining: another model family (--model)"))
        fail_msg("error '%s' does not name what differs from each family", err);

    /* BERT's files carry position_ids and the tied decoder: its row passes over them ... */
    gpt_config b = {.num_layers = L, .hidden = H, .heads = NH, .ffn = F, .seq = T, .max_pos = P, .vocab = V,
                    .padded_vocab = gpt_padded_vocab(V, 8, 1), .init_std = 0.3f, .seed = 11,
                    .kind = GPT_KIND_ENCODER, .binary_head = 1};
    m = gpt_create(&b, g_ps, g_be, 0, L, 1, 1);
    char hfdir[600], extra[600];
    hmodel hm = {0};
    export_model(m, "bert_extra", hfdir, sizeof hfdir, &hm);
    hadd(&hm, "bert.embeddings.position_ids", 1, P);
    memcpy(hadd(&hm, "cls.predictions.decoder.weight", V, H)->v, hget(&hm, "bert.embeddings.word_embeddings.weight", V, H),
           (size_t)V * H * sizeof(float));
    hadd(&hm, "cls.predictions.decoder.bias", V, 0);
    sub(extra, sizeof extra, "bert_extra_files");
    char *cfg = config_text(hfdir);
    write_hf(&hm, extra, cfg);
    check_round_trip(m, extra, "bert_extra");
    gpt_free(m);
    hfree(&hm);
    free(cfg);

    /* ... which GPT-2's does not: there they are tensors of no GPT2LMHeadModel */
    random_gpt2(&hm, 9);
    hadd(&hm, "bert.embeddings.position_ids", 1, P);
    sub(hfdir, sizeof hfdir, "gpt2_extra_hf");
    sub(ck, sizeof ck, "gpt2_extra_ckpt");
    write_hf(&hm, hfdir, CONFIG);
    assert_int_equal(hf_import(hfdir, ck, 8, "cpu", g_world, err, sizeof err), -1);
    if (!strstr(err, "unexpected tensor bert.embeddings.position_ids (not part of GPT2LMHeadModel)"))
        fail_msg("error '%s' lacks the unexpected tensor", err);
    hfree(&hm);
}

int main(int argc, char **argv)
{
    g_world = comm_world_init(&argc, &argv);
    g_ps = ps_init(g_world, 1, 1);
    g_be = be_create("cpu", 1);
    snprintf(g_dir, sizeof g_dir, "%s/test_checkpoint_hf_%ld", TD_TEST_TMP, (long)getpid());
    mkdir(g_dir, 0755);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(import_matches_reference),
        cmocka_unit_test(export_matches_reference_and_round_trips),
        cmocka_unit_test(import_refuses_what_it_cannot_compute),
        cmocka_unit_test(export_half_precision),
        cmocka_unit_test(llama_import_matches_reference),
        cmocka_unit_test(llama_export_matches_reference_and_round_trips),
        cmocka_unit_test(llama_import_refuses_what_it_cannot_compute),
        cmocka_unit_test(rope_scaling_frequencies),
        cmocka_unit_test(llama_geglu_import_and_export),
        cmocka_unit_test(checkpoint_activation_keys),
        cmocka_unit_test(bert_export_matches_reference_and_round_trips),
        cmocka_unit_test(mixtral_import_matches_reference_and_round_trips),
        cmocka_unit_test(qwen2moe_import_matches_reference_and_round_trips),
        cmocka_unit_test(mixtral_import_sharded),
        cmocka_unit_test(sharded_files_refused),
        cmocka_unit_test(moe_export_matches_reference_and_round_trips),
        cmocka_unit_test(moe_refuses_what_it_cannot_compute),
        cmocka_unit_test(families_route_models_and_tensors),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (rc == 0 && system(cmd) != 0) rc = 1;
    be_free(g_be);
    ps_free(g_ps);
    comm_world_finalize(g_world);
    return rc;
}
