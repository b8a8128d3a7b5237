/* The CUDA backend's elementwise family (src/backend/cuda/elementwise.cu, norm.cu, loss.cu,
 * optim.cu) against the cpu backend: every entry cuda_fill_elementwise fills, on fresh random
 * inputs of odd sizes (rows 7, widths 97, 1000 and GPT-2's vocabulary 50257 padded to 50304), in
 * fp32, bf16 and fp16 activations.
 *
 * The measure: the relative infinity norm of a whole output, max |gpu - cpu| / max |cpu| (absolute
 * when the cpu's output is all zeros). Bounds: 1e-5 in the fp32 run, 1e-2 in the bf16 and fp16 runs
 * (the GPU rounds its outputs to the dtype once; the cpu, which computes in fp32 only, gets the same
 * rounded inputs widened). Exact (the gpu's output equals the cpu's rounded to the buffer's dtype, bit
 * for bit), where both do the same IEEE operations in the same order: the dropout masks (dropout_fwd
 * and dropout_bwd multiply the same inputs by the same 1/(1-p) or 0), add, scale, bias_add, the
 * embeddings forward and backward (the backward adds in the cpu's token order), ce_max, ce_target.
 * Bit for bit over two gpu runs (the contract's determinism): embedding_bwd, the column sums, sumsq.
 * Bit for bit, a 16-bit output written by the entry against its fp32 output rounded by convert
 * (acts_in: a --bf16 run's norms and MLP activation write the GEMMs' inputs in 16 bits directly,
 * which must change no bit): layernorm_fwd, rmsnorm_fwd, act_fwd, bias_gelu_fwd.
 *
 * Before any device is touched it checks that cuda_fill_elementwise fills exactly this family's
 * entries. Then it exits 77, saying why, when this build has no cuda backend or no GPU is
 * visible. The entries are called through the vtable (be->ops) because the fp32 wrappers of
 * backend.h cannot pass bf16 or fp16 buffers; memory goes through be_alloc and be_memcpy. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/activation.h"
#include "trident/half.h"
#include "backend/backend.h"

/* cudacore's backend.h declares it (the visible devices of a backend; 0 without); repeated here
 * so that this file compiles before that lands. */
int be_backend_devices(const char *name);
/* src/backend/cuda/cuda_impl.h (private, and needs cuda_runtime.h): this family's vtable share. */
void cuda_fill_elementwise(struct be_ops *ops);

#define SKIP 77

static const backend *g_cpu, *g_gpu;
static int g_fails, g_checks;
static be_dtype g_run_dt; /* the activations' dtype of the run in progress */

/* ---- the entries cuda_fill_elementwise must fill, and only they ---- */
static const char *const FAMILY[] = {
    "embedding_fwd", "embedding_bwd", "pos_embedding_fwd", "pos_embedding_bwd", "layernorm_fwd", "layernorm_bwd",
    "rmsnorm_fwd", "rmsnorm_bwd", "rope_fwd", "rope_bwd", "act_fwd", "act_bwd", "bias_gelu_fwd", "bias_gelu_bwd",
    "add", "scale", "bias_add", "bias_bwd", "bias_bwd_to", "dropout_fwd", "dropout_bwd", "bias_dropout_add_fwd", "ce_max",
    "ce_sumexp", "ce_target", "ce_fwd_fused", "ce_loss", "ce_bwd", "ce_bwd_to", "adamw", "adamw_many", "sumsq", "sumsq_many", "acts_in"};
enum { NFAMILY = sizeof FAMILY / sizeof FAMILY[0] };

static int fill_sets_exactly_the_family(void)
{
    struct be_ops o;
    memset(&o, 0, sizeof o);
    cuda_fill_elementwise(&o);
    int bad = 0, named = 0;
    for (int e = 0; e < BE_OP_NENTRIES; e++) {
        const char *name = BE_OP_ENTRIES[e].name;
        int mine = 0;
        for (int k = 0; k < NFAMILY; k++) mine |= strcmp(FAMILY[k], name) == 0;
        named += mine;
        void *fn;
        memcpy(&fn, (const char *)&o + BE_OP_ENTRIES[e].offset, sizeof fn);
        if (mine != (fn != NULL)) {
            printf("FAIL cuda_fill_elementwise: %s is %s\n", name, fn ? "set but not this family's" : "left NULL");
            bad = 1;
        }
    }
    if (named != NFAMILY) {
        printf("FAIL the family names %d entries the contract does not have\n", NFAMILY - named);
        bad = 1;
    }
    if (!bad) printf("ok   cuda_fill_elementwise fills exactly its %d entries\n", NFAMILY);
    return bad;
}

/* ---- tensors held on both backends ---- */

static uint64_t g_seed = 0x243F6A8885A308D3ULL;
static float urand(float lo, float hi)
{
    g_seed ^= g_seed >> 12, g_seed ^= g_seed << 25, g_seed ^= g_seed >> 27;
    return lo + (hi - lo) * (float)((g_seed * 0x2545F4914F6CDD1DULL) >> 40) / 16777216.0f;
}
static float round_to(float v, be_dtype dt)
{
    return dt == BE_BF16 ? td_bf16_to_f32(td_f32_to_bf16(v)) : dt == BE_F16 ? td_f16_to_f32(td_f32_to_f16(v)) : v;
}

/* n values, rounded to dt: fp32 on the cpu (c), dt on the gpu (g). */
typedef struct {
    size_t n;
    be_dtype dt;
    float *c;
    void *g;
} pair;

static void *to_dev(const backend *be, const void *h, size_t bytes)
{
    void *d = be_alloc(be, bytes ? bytes : 4);
    if (bytes) be_memcpy(be, d, h, bytes, BE_H2D);
    return d;
}
static pair mk_from(const float *h, size_t n, be_dtype dt)
{
    pair t = {n, dt, NULL, NULL};
    float *r = malloc((n ? n : 1) * sizeof(float));
    uint16_t *h16 = malloc((n ? n : 1) * 2);
    for (size_t i = 0; i < n; i++) {
        r[i] = round_to(h[i], dt);
        h16[i] = dt == BE_BF16 ? td_f32_to_bf16(r[i]) : td_f32_to_f16(r[i]);
    }
    t.c = to_dev(g_cpu, r, n * sizeof(float));
    t.g = to_dev(g_gpu, dt == BE_F32 ? (void *)r : (void *)h16, n * be_dtype_size(dt));
    free(r), free(h16);
    return t;
}
static pair mk(size_t n, be_dtype dt, float lo, float hi)
{
    float *h = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = urand(lo, hi);
    pair t = mk_from(h, n, dt);
    free(h);
    return t;
}
static void rm(pair t)
{
    be_dfree(g_cpu, t.c);
    be_dfree(g_gpu, t.g);
}
static be_in cin(pair t) { return (be_in){t.c, BE_F32}; }
static be_out cout(pair t) { return (be_out){t.c, BE_F32}; }
static be_in gin(pair t) { return (be_in){t.g, t.dt}; }
static be_out gout(pair t) { return (be_out){t.g, t.dt}; }
static float *fc(pair t) { return t.c; }
static float *fg(pair t) { return (float *)t.g; }

/* The gpu's values of t, widened to fp32 (malloc'd). */
static float *gpu_values(pair t)
{
    float *h = malloc((t.n ? t.n : 1) * sizeof(float));
    if (t.dt == BE_F32) {
        be_memcpy(g_gpu, h, t.g, t.n * sizeof(float), BE_D2H);
        return h;
    }
    uint16_t *h16 = malloc((t.n ? t.n : 1) * 2);
    be_memcpy(g_gpu, h16, t.g, t.n * 2, BE_D2H);
    for (size_t i = 0; i < t.n; i++) h[i] = t.dt == BE_BF16 ? td_bf16_to_f32(h16[i]) : td_f16_to_f32(h16[i]);
    free(h16);
    return h;
}
static float *cpu_values(pair t)
{
    float *h = malloc((t.n ? t.n : 1) * sizeof(float));
    be_memcpy(g_cpu, h, t.c, t.n * sizeof(float), BE_D2H);
    return h;
}

/* Holds the gpu's t to the cpu's within `tol`, or when 0 the run's bound: 1e-5 in the fp32 run,
 * 1e-2 in the bf16 and fp16 runs, fp32 buffers included (there a gpu output rounded to bf16 may
 * feed the next entry, whose cpu twin reads the unrounded value); prints the measure. */
static void check_tol(const char *what, pair t, double tol)
{
    if (tol <= 0) tol = g_run_dt == BE_F32 && t.dt == BE_F32 ? 1e-5 : 1e-2;
    float *g = gpu_values(t), *c = cpu_values(t);
    double num = 0, den = 0;
    int nonfinite = 0;
    for (size_t i = 0; i < t.n; i++) {
        if (!isfinite(g[i]) || !isfinite(c[i])) {
            nonfinite += !(g[i] == c[i]) && !(isnan(g[i]) && isnan(c[i]));
            continue;
        }
        double d = fabs((double)g[i] - c[i]);
        num = d > num ? d : num;
        den = fabs(c[i]) > den ? fabs(c[i]) : den;
    }
    double rel = den > 0 ? num / den : num;
    int ok = rel <= tol && !nonfinite;
    g_checks++;
    g_fails += !ok;
    printf("%s %-48s %-4s n %-8zu rel err %.2e (bound %.0e)%s\n", ok ? "ok  " : "FAIL", what, be_dtype_name(t.dt), t.n,
           rel, tol, nonfinite ? " non-finite mismatch" : "");
    free(g), free(c);
}
static void check(const char *what, pair t) { check_tol(what, t, 0); }

/* The gpu's t equals the cpu's rounded to t's dtype, bit for bit. */
static void check_exact(const char *what, pair t)
{
    float *g = gpu_values(t), *c = cpu_values(t);
    size_t diff = 0;
    for (size_t i = 0; i < t.n; i++) {
        float r = round_to(c[i], t.dt);
        diff += memcmp(&g[i], &r, 4) != 0;
    }
    g_checks++;
    g_fails += diff != 0;
    printf("%s %-48s %-4s n %-8zu %zu elements differ (bit for bit)\n", diff ? "FAIL" : "ok  ", what,
           be_dtype_name(t.dt), t.n, diff);
    free(g), free(c);
}
/* Two gpu results of the same call are the same bits. */
static void check_same_bits(const char *what, const void *a, const void *b, size_t bytes)
{
    int same = memcmp(a, b, bytes) == 0;
    g_checks++;
    g_fails += !same;
    printf("%s %-48s run twice: %s\n", same ? "ok  " : "FAIL", what, same ? "the same bits" : "DIFFERENT bits");
}
static const char *label(const char *entry, be_dtype dt, int a, int b)
{
    static char s[160];
    snprintf(s, sizeof s, "%s %s [%d x %d]", entry, be_dtype_name(dt), a, b);
    return s;
}

/* ---- the entries ---- */

/* add, scale and bias_add are one IEEE operation an element, the same on both: exact. */
static void t_add_scale_bias(be_dtype dt, int N, int C)
{
    size_t n = (size_t)N * C;
    pair a = mk(n, dt, -2, 2), b = mk(n, dt, -2, 2), out = mk(n, dt, 0, 0), bias = mk(C, BE_F32, -1, 1);
    g_cpu->ops->add(g_cpu, cout(out), cin(a), cin(b), n);
    g_gpu->ops->add(g_gpu, gout(out), gin(a), gin(b), n);
    check_exact(label("add", dt, N, C), out);
    g_cpu->ops->add(g_cpu, cout(a), cin(a), cin(b), n); /* out == a */
    g_gpu->ops->add(g_gpu, gout(a), gin(a), gin(b), n);
    check_exact(label("add (out == a)", dt, N, C), a);
    g_cpu->ops->scale(g_cpu, cout(b), 0.37f, n);
    g_gpu->ops->scale(g_gpu, gout(b), 0.37f, n);
    check_exact(label("scale", dt, N, C), b);
    pair o2 = mk(n, dt, -1, 1), dout = mk(n, dt, -1, 1), db = mk(C, BE_F32, -1, 1);
    g_cpu->ops->bias_add(g_cpu, cout(o2), fc(bias), N, C);
    g_gpu->ops->bias_add(g_gpu, gout(o2), fg(bias), N, C);
    check_exact(label("bias_add", dt, N, C), o2);
    g_cpu->ops->bias_bwd(g_cpu, fc(db), cin(dout), N, C);
    g_gpu->ops->bias_bwd(g_gpu, fg(db), gin(dout), N, C);
    check(label("bias_bwd db", dt, N, C), db);
    rm(a), rm(b), rm(out), rm(bias), rm(o2), rm(dout), rm(db);
}

/* bias_bwd_to (an fp32 gradient's column sums and its rounding in one pass): the bits of the gpu's
 * own bias_bwd and convert, and db within the bound of the cpu's bias_bwd. */
static void t_bias_bwd_to(be_dtype rt, int N, int C)
{
    if (!g_gpu->ops->bias_bwd_to) {
        printf("ok   bias_bwd_to: not filled (TRIDENT_CUDA_FUSED=0)\n");
        return;
    }
    size_t n = (size_t)N * C, rb = n * be_dtype_size(rt);
    pair dout = mk(n, BE_F32, -1, 1), db = mk(C, BE_F32, -1, 1);
    float *db2 = be_alloc(g_gpu, (size_t)C * sizeof(float));
    be_memcpy(g_gpu, db2, fg(db), (size_t)C * sizeof(float), BE_D2D);
    void *r1 = be_alloc(g_gpu, rb), *r2 = be_alloc(g_gpu, rb);
    g_cpu->ops->bias_bwd(g_cpu, fc(db), cin(dout), N, C);
    g_gpu->ops->bias_bwd_to(g_gpu, fg(db), (be_out){r1, rt}, gin(dout), N, C);
    g_gpu->ops->bias_bwd(g_gpu, db2, gin(dout), N, C);
    g_gpu->ops->convert(g_gpu, r2, rt, fg(dout), BE_F32, n);
    check(label("bias_bwd_to db", rt, N, C), db);
    void *h1 = malloc(rb), *h2 = malloc(rb), *d1 = malloc((size_t)C * 4), *d2 = malloc((size_t)C * 4);
    be_memcpy(g_gpu, h1, r1, rb, BE_D2H);
    be_memcpy(g_gpu, h2, r2, rb, BE_D2H);
    be_memcpy(g_gpu, d1, fg(db), (size_t)C * 4, BE_D2H);
    be_memcpy(g_gpu, d2, db2, (size_t)C * 4, BE_D2H);
    check_same_bits(label("bias_bwd_to db = bias_bwd's", rt, N, C), d1, d2, (size_t)C * 4);
    check_same_bits(label("bias_bwd_to rounded = convert's", rt, N, C), h1, h2, rb);
    free(h1), free(h2), free(d1), free(d2);
    be_dfree(g_gpu, db2), be_dfree(g_gpu, r1), be_dfree(g_gpu, r2);
    rm(dout), rm(db);
}

static void t_act(be_dtype dt, int N, int F)
{
    for (int act = 0; act < TD_ACT_COUNT; act++)
        for (int glu = 0; glu < 2; glu++) {
            size_t nin = (size_t)N * F * (glu ? 2 : 1), nout = (size_t)N * F;
            pair x = mk(nin, dt, -4, 4), y = mk(nout, dt, 0, 0), dy = mk(nout, dt, -1, 1), dx = mk(nin, dt, -1, 1);
            char what[64];
            snprintf(what, sizeof what, "act_fwd %s", td_act_label(act, glu));
            g_cpu->ops->act_fwd(g_cpu, act, glu, cout(y), cin(x), N, F);
            g_gpu->ops->act_fwd(g_gpu, act, glu, gout(y), gin(x), N, F);
            check(label(what, dt, N, F), y);
            snprintf(what, sizeof what, "act_bwd %s", td_act_label(act, glu));
            g_cpu->ops->act_bwd(g_cpu, act, glu, cout(dx), cin(dy), cin(x), N, F);
            g_gpu->ops->act_bwd(g_gpu, act, glu, gout(dx), gin(dy), gin(x), N, F);
            check(label(what, dt, N, F), dx);
            rm(x), rm(y), rm(dy), rm(dx);
        }
    size_t n = (size_t)N * F;
    pair x = mk(n, dt, -4, 4), b = mk(F, BE_F32, -1, 1), y = mk(n, dt, 0, 0), dy = mk(n, dt, -1, 1),
         dx = mk(n, dt, -1, 1), db = mk(F, BE_F32, -1, 1);
    g_cpu->ops->bias_gelu_fwd(g_cpu, cout(y), cin(x), fc(b), N, F);
    g_gpu->ops->bias_gelu_fwd(g_gpu, gout(y), gin(x), fg(b), N, F);
    check(label("bias_gelu_fwd", dt, N, F), y);
    g_cpu->ops->bias_gelu_bwd(g_cpu, cout(dx), fc(db), cin(dy), cin(x), fc(b), N, F);
    g_gpu->ops->bias_gelu_bwd(g_gpu, gout(dx), fg(db), gin(dy), gin(x), fg(b), N, F);
    check(label("bias_gelu_bwd dinp", dt, N, F), dx);
    check(label("bias_gelu_bwd db", dt, N, F), db);
    rm(x), rm(b), rm(y), rm(dy), rm(dx), rm(db);
}

/* Masks bit for bit: x in [0.5, 1.5), so every element is x / (1-p) or exactly 0 on both. */
static void t_dropout(be_dtype dt, int B, int T, int C, float p, int unit0, int pos0)
{
    size_t n = (size_t)B * T * C;
    int64_t samples[3] = {7, (1LL << 33) + 5, 123456789};
    int64_t *cs = to_dev(g_cpu, samples, sizeof samples), *gs = to_dev(g_gpu, samples, sizeof samples);
    be_drop cd = {.p = p, .seed = 0x1234567890abcdefULL, .sample = cs, .site = 301, .pos0 = pos0, .unit0 = unit0};
    be_drop gd = cd;
    gd.sample = gs;
    pair x = mk(n, dt, 0.5f, 1.5f), y = mk(n, dt, 0, 0), r = mk(n, dt, -1, 1), b = mk(C, BE_F32, -1, 1);
    char what[64];
    snprintf(what, sizeof what, "dropout_fwd p %.1f unit0 %d pos0 %d", p, unit0, pos0);
    g_cpu->ops->dropout_fwd(g_cpu, cout(y), cin(x), B, T, C, &cd);
    g_gpu->ops->dropout_fwd(g_gpu, gout(y), gin(x), B, T, C, &gd);
    check_exact(label(what, dt, B * T, C), y);
    snprintf(what, sizeof what, "dropout_bwd p %.1f (in place)", p);
    g_cpu->ops->dropout_bwd(g_cpu, cout(x), cin(x), B, T, C, &cd);
    g_gpu->ops->dropout_bwd(g_gpu, gout(x), gin(x), B, T, C, &gd);
    check_exact(label(what, dt, B * T, C), x);
    snprintf(what, sizeof what, "bias_dropout_add_fwd p %.1f", p);
    g_cpu->ops->bias_dropout_add_fwd(g_cpu, cout(y), cin(r), cin(y), fc(b), B, T, C, &cd);
    g_gpu->ops->bias_dropout_add_fwd(g_gpu, gout(y), gin(r), gin(y), fg(b), B, T, C, &gd);
    check(label(what, dt, B * T, C), y);
    g_cpu->ops->bias_dropout_add_fwd(g_cpu, cout(r), cin(r), cin(x), NULL, B, T, C, NULL);
    g_gpu->ops->bias_dropout_add_fwd(g_gpu, gout(r), gin(r), gin(x), NULL, B, T, C, NULL);
    check(label("bias_dropout_add_fwd no dropout, no bias", dt, B * T, C), r);
    rm(x), rm(y), rm(r), rm(b);
    be_dfree(g_cpu, cs), be_dfree(g_gpu, gs);
}

static void t_embedding(be_dtype dt, int BT, int C, int vstart, int Vloc)
{
    int32_t *ids = malloc(BT * sizeof(int32_t));
    for (int i = 0; i < BT; i++) ids[i] = (int32_t)urand(0, (float)(vstart + Vloc + 20)) % (vstart + Vloc + 20);
    ids[BT - 1] = ids[0]; /* repeats, and rows in the slice */
    ids[1] = ids[3] = vstart;
    ids[2] = vstart + Vloc - 1;
    int32_t *cid = to_dev(g_cpu, ids, BT * sizeof(int32_t)), *gid = to_dev(g_gpu, ids, BT * sizeof(int32_t));
    pair wte = mk((size_t)Vloc * C, BE_F32, -1, 1), out = mk((size_t)BT * C, dt, 0, 0);
    g_cpu->ops->embedding_fwd(g_cpu, cout(out), cid, fc(wte), BT, C, vstart, Vloc);
    g_gpu->ops->embedding_fwd(g_gpu, gout(out), gid, fg(wte), BT, C, vstart, Vloc);
    check_exact(label("embedding_fwd", dt, BT, C), out);
    pair dout = mk((size_t)BT * C, dt, -1, 1);
    size_t bytes = (size_t)Vloc * C * sizeof(float);
    float *first = malloc(bytes), *second = malloc(bytes), *init = malloc(bytes);
    be_memcpy(g_gpu, init, wte.g, bytes, BE_D2H);
    g_cpu->ops->embedding_bwd(g_cpu, fc(wte), cin(dout), cid, BT, C, vstart, Vloc);
    g_gpu->ops->embedding_bwd(g_gpu, fg(wte), gin(dout), gid, BT, C, vstart, Vloc);
    check_exact(label("embedding_bwd dwte (the cpu's order)", dt, BT, C), wte);
    be_memcpy(g_gpu, first, wte.g, bytes, BE_D2H);
    be_memcpy(g_gpu, wte.g, init, bytes, BE_H2D);
    g_gpu->ops->embedding_bwd(g_gpu, fg(wte), gin(dout), gid, BT, C, vstart, Vloc);
    be_memcpy(g_gpu, second, wte.g, bytes, BE_D2H);
    check_same_bits(label("embedding_bwd dwte", dt, BT, C), first, second, bytes);
    free(first), free(second), free(init), free(ids);
    rm(wte), rm(out), rm(dout);
    be_dfree(g_cpu, cid), be_dfree(g_gpu, gid);
}

/* Adds in the cpu's order: exact. */
static void t_pos_embedding(be_dtype dt, int B, int T, int C, int pos0)
{
    pair wpe = mk((size_t)(pos0 + T) * C, BE_F32, -1, 1), out = mk((size_t)B * T * C, dt, -1, 1);
    pair dout = mk((size_t)B * T * C, dt, -1, 1);
    g_cpu->ops->pos_embedding_fwd(g_cpu, cout(out), fc(wpe), B, T, C, pos0);
    g_gpu->ops->pos_embedding_fwd(g_gpu, gout(out), fg(wpe), B, T, C, pos0);
    check_exact(label("pos_embedding_fwd", dt, B * T, C), out);
    g_cpu->ops->pos_embedding_bwd(g_cpu, fc(wpe), cin(dout), B, T, C, pos0);
    g_gpu->ops->pos_embedding_bwd(g_gpu, fg(wpe), gin(dout), B, T, C, pos0);
    check_exact(label("pos_embedding_bwd dwpe (the cpu's order)", dt, B * T, C), wpe);
    rm(wpe), rm(out), rm(dout);
}

static void t_norms(be_dtype dt, int N, int C)
{
    size_t n = (size_t)N * C;
    pair x = mk(n, dt, -2, 3), w = mk(C, BE_F32, 0.5f, 1.5f), b = mk(C, BE_F32, -1, 1), y = mk(n, dt, 0, 0);
    pair mean = mk(N, BE_F32, 0, 0), rstd = mk(N, BE_F32, 0, 0);
    pair dy = mk(n, dt, -1, 1), dx = mk(n, dt, -1, 1), dw = mk(C, BE_F32, -1, 1), db = mk(C, BE_F32, -1, 1);
    g_cpu->ops->layernorm_fwd(g_cpu, cout(y), fc(mean), fc(rstd), cin(x), fc(w), fc(b), N, C, 1e-5f);
    g_gpu->ops->layernorm_fwd(g_gpu, gout(y), fg(mean), fg(rstd), gin(x), fg(w), fg(b), N, C, 1e-5f);
    check(label("layernorm_fwd out", dt, N, C), y);
    check(label("layernorm_fwd mean", dt, N, C), mean);
    check(label("layernorm_fwd rstd", dt, N, C), rstd);
    /* the backward from the cpu's statistics on both, so it is held alone */
    be_memcpy(g_gpu, mean.g, mean.c, N * sizeof(float), BE_H2D);
    be_memcpy(g_gpu, rstd.g, rstd.c, N * sizeof(float), BE_H2D);
    float *dw0 = malloc(C * sizeof(float)), *dw1 = malloc(C * sizeof(float)), *dw2 = malloc(C * sizeof(float));
    be_memcpy(g_gpu, dw0, dw.g, C * sizeof(float), BE_D2H);
    g_cpu->ops->layernorm_bwd(g_cpu, cout(dx), fc(dw), fc(db), cin(dy), cin(x), fc(w), fc(mean), fc(rstd), N, C);
    g_gpu->ops->layernorm_bwd(g_gpu, gout(dx), fg(dw), fg(db), gin(dy), gin(x), fg(w), fg(mean), fg(rstd), N, C);
    check(label("layernorm_bwd dinp", dt, N, C), dx);
    check(label("layernorm_bwd dw", dt, N, C), dw);
    check(label("layernorm_bwd db", dt, N, C), db);
    be_memcpy(g_gpu, dw1, dw.g, C * sizeof(float), BE_D2H);
    be_memcpy(g_gpu, dw.g, dw0, C * sizeof(float), BE_H2D);
    g_gpu->ops->layernorm_bwd(g_gpu, (be_out){NULL, dt}, fg(dw), NULL, gin(dy), gin(x), fg(w), fg(mean), fg(rstd), N,
                              C);
    be_memcpy(g_gpu, dw2, dw.g, C * sizeof(float), BE_D2H);
    check_same_bits(label("layernorm_bwd dw (column sums)", dt, N, C), dw1, dw2, C * sizeof(float));

    g_cpu->ops->rmsnorm_fwd(g_cpu, cout(y), fc(rstd), cin(x), fc(w), N, C, 1e-6f);
    g_gpu->ops->rmsnorm_fwd(g_gpu, gout(y), fg(rstd), gin(x), fg(w), N, C, 1e-6f);
    check(label("rmsnorm_fwd out", dt, N, C), y);
    check(label("rmsnorm_fwd rstd", dt, N, C), rstd);
    be_memcpy(g_gpu, rstd.g, rstd.c, N * sizeof(float), BE_H2D);
    g_cpu->ops->rmsnorm_bwd(g_cpu, cout(dx), fc(dw), cin(dy), cin(x), fc(w), fc(rstd), N, C);
    g_gpu->ops->rmsnorm_bwd(g_gpu, gout(dx), fg(dw), gin(dy), gin(x), fg(w), fg(rstd), N, C);
    check(label("rmsnorm_bwd dinp", dt, N, C), dx);
    check(label("rmsnorm_bwd dw", dt, N, C), dw);
    free(dw0), free(dw1), free(dw2);
    rm(x), rm(w), rm(b), rm(y), rm(mean), rm(rstd), rm(dy), rm(dx), rm(dw), rm(db);
}

/* The producers of kept GEMM inputs from fp32 inputs (a --bf16 run's residual stream): out in dt
 * directly, bit for bit the fp32 out rounded by convert (acts_in says the backend takes dt). */
static void t_kept_outputs(be_dtype dt, int N, int C)
{
    g_checks++;
    if (!g_gpu->ops->acts_in || !g_gpu->ops->acts_in(g_gpu, dt)) {
        g_fails++;
        printf("FAIL acts_in: the backend does not take %s activations\n", be_dtype_name(dt));
        return;
    }
    printf("ok   acts_in: %s activations taken\n", be_dtype_name(dt));
    size_t n = (size_t)N * C, es = be_dtype_size(dt);
    pair x = mk(2 * n, BE_F32, -3, 3), w = mk(C, BE_F32, 0.5f, 1.5f), b = mk(C, BE_F32, -1, 1);
    pair st = mk(N, BE_F32, 0, 0), st2 = mk(N, BE_F32, 0, 0);
    float *y32 = be_alloc(g_gpu, n * sizeof(float));
    void *y16 = be_alloc(g_gpu, n * es), *r16 = be_alloc(g_gpu, n * es);
    char *h1 = malloc(n * es), *h2 = malloc(n * es);
    for (int k = 0; k < 5; k++) {
        be_out o32 = {y32, BE_F32}, o16 = {y16, dt};
        const char *what = k == 0 ? "layernorm_fwd" : k == 1 ? "rmsnorm_fwd" : k == 2 ? "act_fwd gelu" : k == 3 ? "act_fwd swiglu" : "bias_gelu_fwd";
        for (int pass = 0; pass < 2; pass++) {
            be_out o = pass ? o16 : o32;
            if (k == 0) g_gpu->ops->layernorm_fwd(g_gpu, o, fg(st), fg(st2), gin(x), fg(w), fg(b), N, C, 1e-5f);
            if (k == 1) g_gpu->ops->rmsnorm_fwd(g_gpu, o, fg(st), gin(x), fg(w), N, C, 1e-6f);
            if (k == 2) g_gpu->ops->act_fwd(g_gpu, TD_ACT_GELU, 0, o, gin(x), N, C);
            if (k == 3) g_gpu->ops->act_fwd(g_gpu, TD_ACT_SILU, 1, o, gin(x), N, C);
            if (k == 4) g_gpu->ops->bias_gelu_fwd(g_gpu, o, gin(x), fg(b), N, C);
        }
        g_gpu->ops->convert(g_gpu, r16, dt, y32, BE_F32, n);
        be_memcpy(g_gpu, h1, y16, n * es, BE_D2H);
        be_memcpy(g_gpu, h2, r16, n * es, BE_D2H);
        size_t diff = 0;
        for (size_t i = 0; i < n; i++) diff += memcmp(h1 + i * es, h2 + i * es, es) != 0;
        g_checks++;
        g_fails += diff != 0;
        printf("%s %-48s %-4s n %-8zu %zu elements differ from fp32 + convert\n", diff ? "FAIL" : "ok  ",
               label(what, dt, N, C), be_dtype_name(dt), n, diff);
    }
    be_dfree(g_gpu, y32), be_dfree(g_gpu, y16), be_dfree(g_gpu, r16);
    free(h1), free(h2);
    rm(x), rm(w), rm(b), rm(st), rm(st2);
}

static void t_rope(be_dtype dt, int B, int T, int nh, int hs, int rot, int pos0)
{
    int ld = nh * hs + 5;
    pair x = mk((size_t)B * T * ld, dt, -2, 2);
    char what[80];
    be_rope r;
    be_rope_plain(&r, rot, 10000.0f);
    snprintf(what, sizeof what, "rope_fwd rot %d/%d pos0 %d", rot, hs, pos0);
    g_cpu->ops->rope_fwd(g_cpu, cout(x), B, T, ld, nh, hs, rot, &r, pos0, NULL);
    g_gpu->ops->rope_fwd(g_gpu, gout(x), B, T, ld, nh, hs, rot, &r, pos0, NULL);
    check(label(what, dt, B * T, ld), x);
    be_rope_plain(&r, rot, 500000.0f);
    snprintf(what, sizeof what, "rope_bwd rot %d/%d pos0 %d", rot, hs, pos0);
    g_cpu->ops->rope_bwd(g_cpu, cout(x), B, T, ld, nh, hs, rot, &r, pos0, NULL);
    g_gpu->ops->rope_bwd(g_gpu, gout(x), B, T, ld, nh, hs, rot, &r, pos0, NULL);
    check(label(what, dt, B * T, ld), x);
    /* rope scaling: frequencies of no closed form (every third one divided by 4) and a cos/sin scale */
    be_rope_plain(&r, rot, 10000.0f);
    for (int i = 0; i < rot / 2; i += 3) r.inv_freq[i] /= 4;
    r.scale = 1.1386f;
    snprintf(what, sizeof what, "rope_fwd scaled rot %d/%d pos0 %d", rot, hs, pos0);
    g_cpu->ops->rope_fwd(g_cpu, cout(x), B, T, ld, nh, hs, rot, &r, pos0, NULL);
    g_gpu->ops->rope_fwd(g_gpu, gout(x), B, T, ld, nh, hs, rot, &r, pos0, NULL);
    check(label(what, dt, B * T, ld), x);
    snprintf(what, sizeof what, "rope_bwd scaled rot %d/%d pos0 %d", rot, hs, pos0);
    g_cpu->ops->rope_bwd(g_cpu, cout(x), B, T, ld, nh, hs, rot, &r, pos0, NULL);
    g_gpu->ops->rope_bwd(g_gpu, gout(x), B, T, ld, nh, hs, rot, &r, pos0, NULL);
    check(label(what, dt, B * T, ld), x);
    rm(x);
}

/* The cross-entropy steps, each from the cpu's previous results so it is held alone. */
static void t_crossentropy(be_dtype dt, int BT, int Vloc, int Vreal, int vstart)
{
    size_t n = (size_t)BT * Vloc;
    pair logits = mk(n, dt, -8, 8);
    int32_t *tg = malloc(BT * sizeof(int32_t));
    for (int i = 0; i < BT; i++) tg[i] = vstart + (int32_t)(urand(-0.2f, 1.2f) * Vreal); /* some outside the slice */
    tg[0] = vstart + Vreal - 1;
    for (int i = 0; i < BT; i++) tg[i] = tg[i] < 0 ? 0 : tg[i];
    int32_t *ct = to_dev(g_cpu, tg, BT * sizeof(int32_t)), *gt = to_dev(g_gpu, tg, BT * sizeof(int32_t));
    pair maxv = mk(BT, BE_F32, 0, 0), sumexp = mk(BT, BE_F32, 0, 0), tlogit = mk(BT, BE_F32, 0, 0);
    pair losses = mk(BT, BE_F32, 0, 0), dloss = mk(BT, BE_F32, 0.1f, 1);
#define SYNC_FROM_CPU(t) be_memcpy(g_gpu, (t).g, (t).c, (t).n * sizeof(float), BE_H2D)
    g_cpu->ops->ce_max(g_cpu, fc(maxv), cin(logits), BT, Vloc, Vreal);
    g_gpu->ops->ce_max(g_gpu, fg(maxv), gin(logits), BT, Vloc, Vreal);
    check_exact(label("ce_max", dt, BT, Vloc), maxv);
    SYNC_FROM_CPU(maxv);
    g_cpu->ops->ce_sumexp(g_cpu, fc(sumexp), cin(logits), fc(maxv), BT, Vloc, Vreal);
    g_gpu->ops->ce_sumexp(g_gpu, fg(sumexp), gin(logits), fg(maxv), BT, Vloc, Vreal);
    check(label("ce_sumexp", dt, BT, Vloc), sumexp);
    SYNC_FROM_CPU(sumexp);
    g_cpu->ops->ce_target(g_cpu, fc(tlogit), cin(logits), ct, BT, Vloc, vstart);
    g_gpu->ops->ce_target(g_gpu, fg(tlogit), gin(logits), gt, BT, Vloc, vstart);
    check_exact(label("ce_target", dt, BT, Vloc), tlogit);
    SYNC_FROM_CPU(tlogit);
    g_cpu->ops->ce_loss(g_cpu, fc(losses), fc(maxv), fc(sumexp), fc(tlogit), BT);
    g_gpu->ops->ce_loss(g_gpu, fg(losses), fg(maxv), fg(sumexp), fg(tlogit), BT);
    check(label("ce_loss", dt, BT, Vloc), losses);
    /* the four steps in one pass (an unsplit vocabulary: vstart 0) against the cpu's four; the
     * fused entries are left out under TRIDENT_CUDA_FUSED=0 (docs/gpu.md, "Switches") */
    if (!g_gpu->ops->ce_fwd_fused || !g_gpu->ops->ce_bwd_to)
        printf("note: ce_fwd_fused and ce_bwd_to not checked: the backend leaves them out (TRIDENT_CUDA_FUSED=0)\n");
    if (g_gpu->ops->ce_fwd_fused) {
        pair fm = mk(BT, BE_F32, 0, 0), fs = mk(BT, BE_F32, 0, 0), ft = mk(BT, BE_F32, 0, 0), fl = mk(BT, BE_F32, 0, 0);
        g_cpu->ops->ce_max(g_cpu, fc(fm), cin(logits), BT, Vloc, Vreal);
        g_cpu->ops->ce_sumexp(g_cpu, fc(fs), cin(logits), fc(fm), BT, Vloc, Vreal);
        g_cpu->ops->ce_target(g_cpu, fc(ft), cin(logits), ct, BT, Vloc, 0);
        g_cpu->ops->ce_loss(g_cpu, fc(fl), fc(fm), fc(fs), fc(ft), BT);
        g_gpu->ops->ce_fwd_fused(g_gpu, fg(fl), fg(fm), fg(fs), fg(ft), gin(logits), gt, BT, Vloc, Vreal);
        check_exact(label("ce_fwd_fused maxv", dt, BT, Vloc), fm);
        check(label("ce_fwd_fused sumexp", dt, BT, Vloc), fs);
        check_exact(label("ce_fwd_fused tlogit", dt, BT, Vloc), ft);
        check(label("ce_fwd_fused losses", dt, BT, Vloc), fl);
        rm(fm), rm(fs), rm(ft), rm(fl);
    }
    /* out of place, into bf16 (what a --bf16 run's LM head GEMMs take), before ce_bwd overwrites the logits */
    if (g_gpu->ops->ce_bwd_to) {
        pair dl = mk(n, BE_BF16, 0, 0);
        g_cpu->ops->ce_bwd_to(g_cpu, cout(dl), cin(logits), fc(maxv), fc(sumexp), ct, fc(dloss), BT, Vloc, Vreal,
                              vstart);
        g_gpu->ops->ce_bwd_to(g_gpu, gout(dl), gin(logits), fg(maxv), fg(sumexp), gt, fg(dloss), BT, Vloc, Vreal,
                              vstart);
        check(label("ce_bwd_to dlogits (bf16)", dt, BT, Vloc), dl);
        rm(dl);
    }
    g_cpu->ops->ce_bwd(g_cpu, cout(logits), fc(maxv), fc(sumexp), ct, fc(dloss), BT, Vloc, Vreal, vstart);
    g_gpu->ops->ce_bwd(g_gpu, gout(logits), fg(maxv), fg(sumexp), gt, fg(dloss), BT, Vloc, Vreal, vstart);
    check(label("ce_bwd dlogits", dt, BT, Vloc), logits);
#undef SYNC_FROM_CPU
    rm(logits), rm(maxv), rm(sumexp), rm(tlogit), rm(losses), rm(dloss);
    free(tg);
    be_dfree(g_cpu, ct), be_dfree(g_gpu, gt);
}

static void t_optimizer(size_t n)
{
    pair p = mk(n, BE_F32, -1, 1), g = mk(n, BE_F32, -1, 1), m = mk(n, BE_F32, -0.1f, 0.1f), v = mk(n, BE_F32, 0, 0.01f);
    for (int64_t step = 1; step <= 10; step += 9) {
        g_cpu->ops->adamw(g_cpu, fc(p), fc(g), fc(m), fc(v), n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, step);
        g_gpu->ops->adamw(g_gpu, fg(p), fg(g), fg(m), fg(v), n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, step);
        char what[64];
        snprintf(what, sizeof what, "adamw step %lld p", (long long)step);
        check(what, p);
        snprintf(what, sizeof what, "adamw step %lld m", (long long)step);
        check(what, m);
        snprintf(what, sizeof what, "adamw step %lld v", (long long)step);
        check(what, v);
    }
    if (n > 1) { /* a slice from element 1: not 16-byte aligned, so one element a thread on the GPU */
        g_cpu->ops->adamw(g_cpu, fc(p) + 1, fc(g) + 1, fc(m) + 1, fc(v) + 1, n - 1, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                          0.5f, 11);
        g_gpu->ops->adamw(g_gpu, fg(p) + 1, fg(g) + 1, fg(m) + 1, fg(v) + 1, n - 1, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                          0.5f, 11);
        check("adamw unaligned slice p", p);
        check("adamw unaligned slice m", m);
        check("adamw unaligned slice v", v);
    }
    if (n > 40) { /* several slices' steps at once: each element the bits of adamw on its slice alone */
        size_t bytes = n * sizeof(float);
        float *st[4], *hb[2];
        for (int k = 0; k < 4; k++) st[k] = be_alloc(g_gpu, bytes); /* the first run's starting state */
        float *src[4] = {fg(p), fg(g), fg(m), fg(v)};
        for (int k = 0; k < 4; k++) be_memcpy(g_gpu, st[k], src[k], bytes, BE_D2D);
        /* aligned, one element in (unaligned), a slice of 3 (a float4-free tail), an empty one, the rest */
        size_t lo[5] = {0, n / 3 + 1, n / 2, n / 2 + 3, n / 2 + 3}, len[5] = {n / 3, n / 2 - n / 3 - 1, 3, 0, n - n / 2 - 3};
        float wd[5] = {0.1f, 0.0f, 0.05f, 0.1f, 0.2f};
        for (int s = 0; s < 5; s++)
            g_gpu->ops->adamw(g_gpu, fg(p) + lo[s], fg(g) + lo[s], fg(m) + lo[s], fg(v) + lo[s], len[s], 3e-3f, 0.9f,
                              0.95f, 1e-8f, wd[s], 0.5f, 12);
        float *pp[5], *mm[5], *vv[5];
        const float *gg[5];
        for (int s = 0; s < 5; s++) pp[s] = st[0] + lo[s], gg[s] = st[1] + lo[s], mm[s] = st[2] + lo[s], vv[s] = st[3] + lo[s];
        g_gpu->ops->adamw_many(g_gpu, pp, gg, mm, vv, len, wd, 5, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.5f, 12);
        hb[0] = malloc(bytes), hb[1] = malloc(bytes);
        int same = 1;
        float *one[3] = {fg(p), fg(m), fg(v)}, *many[3] = {st[0], st[2], st[3]};
        for (int k = 0; k < 3; k++) {
            be_memcpy(g_gpu, hb[0], one[k], bytes, BE_D2H), be_memcpy(g_gpu, hb[1], many[k], bytes, BE_D2H);
            same &= memcmp(hb[0], hb[1], bytes) == 0;
        }
        check_same_bits("adamw_many: p, m, v as adamw a slice at a time", &same, &(int){1}, sizeof same);
        free(hb[0]), free(hb[1]);
        for (int k = 0; k < 4; k++) be_dfree(g_gpu, st[k]);
    }
    { /* several slices' sums at once: each the bits of sumsq alone (an empty slice: 0) */
        const float *xs[4] = {fg(g), fg(g) + 1, fg(g) + n / 3, fg(g) + n / 2};
        size_t ns[4] = {n, n - 1, 0, n / 2 - 1};
        double many[4], one[4];
        g_gpu->ops->sumsq_many(g_gpu, many, xs, ns, 4);
        for (int i = 0; i < 4; i++) one[i] = ns[i] ? g_gpu->ops->sumsq(g_gpu, xs[i], ns[i]) : 0.0;
        check_same_bits("sumsq_many: each slice as sumsq's", many, one, sizeof many);
    }
    double sc = g_cpu->ops->sumsq(g_cpu, fc(g), n), s1 = g_gpu->ops->sumsq(g_gpu, fg(g), n);
    double s2 = g_gpu->ops->sumsq(g_gpu, fg(g), n), rel = fabs(s1 - sc) / sc;
    int ok = rel <= 1e-9; /* both in double; n eps bounds the order's effect */
    g_checks++;
    g_fails += !ok;
    printf("%s %-48s      n %-8zu rel err %.2e (bound 1e-9)\n", ok ? "ok  " : "FAIL", "sumsq", n, rel);
    check_same_bits("sumsq", &s1, &s2, sizeof s1);
    rm(p), rm(g), rm(m), rm(v);
}

/* ---- the vector paths against the scalar ones, bit for bit ----
 * The bandwidth-bound entries (add, act_fwd/bwd, bias_gelu_fwd/bwd, bias_dropout_add_fwd and the
 * dropouts, embedding_fwd, layernorm and rmsnorm fwd/bwd) take 16-byte accesses when every buffer
 * they touch is 16-byte aligned and the row length a multiple of 8, one element at a time
 * otherwise, with the same arithmetic. Each runs here twice on the same inputs: on buffers as
 * be_alloc gives them (aligned: the vector path) and on copies 4 bytes further (the scalar path);
 * the outputs must be the same bits. Under the emulator (which exports cuemu_vec_accesses, its
 * count of 16-byte accesses) it also holds that the first run made such accesses and the second
 * none: the two runs did take the two paths. */
extern unsigned long long cuemu_vec_accesses __attribute__((weak));
static unsigned long long vec_count(void) { return &cuemu_vec_accesses ? cuemu_vec_accesses : 0; }

/* The same n random values of dtype dt at a (aligned) and s (4 bytes past an aligned base). */
typedef struct {
    size_t bytes;
    void *a, *base, *s;
} twin;
static twin twin_mk(size_t n, be_dtype dt, float lo, float hi)
{
    size_t es = be_dtype_size(dt);
    twin t = {n * es, NULL, NULL, NULL};
    unsigned char *h = malloc(t.bytes ? t.bytes : 1);
    for (size_t i = 0; i < n; i++) {
        float v = urand(lo, hi);
        uint16_t u = dt == BE_BF16 ? td_f32_to_bf16(v) : td_f32_to_f16(v);
        if (dt == BE_F32) memcpy(h + 4 * i, &v, 4);
        else memcpy(h + 2 * i, &u, 2);
    }
    t.a = to_dev(g_gpu, h, t.bytes);
    t.base = be_alloc(g_gpu, t.bytes + 16);
    t.s = (char *)t.base + 4;
    be_memcpy(g_gpu, t.s, h, t.bytes, BE_H2D);
    free(h);
    return t;
}
static void twin_rm(twin t)
{
    be_dfree(g_gpu, t.a);
    be_dfree(g_gpu, t.base);
}
/* out's two copies are the same bits, and when counted (emulated) va > 0 vector accesses on the
 * aligned run, vs == 0 on the shifted one. */
static void check_vec(const char *what, be_dtype dt, twin out, int counted, unsigned long long va,
                      unsigned long long vs)
{
    unsigned char *a = malloc(out.bytes), *b = malloc(out.bytes);
    be_memcpy(g_gpu, a, out.a, out.bytes, BE_D2H);
    be_memcpy(g_gpu, b, out.s, out.bytes, BE_D2H);
    size_t es = be_dtype_size(dt), diff = 0;
    for (size_t i = 0; i < out.bytes; i += es) diff += memcmp(a + i, b + i, es) != 0;
    counted = counted && &cuemu_vec_accesses;
    int paths = !counted || (va > 0 && vs == 0);
    g_checks++;
    g_fails += diff != 0 || !paths;
    printf("%s %-48s %-4s vector vs scalar path: %zu elements differ%s", diff || !paths ? "FAIL" : "ok  ", what,
           be_dtype_name(dt), diff, diff ? " (bit for bit)" : "");
    if (counted) printf(", %llu and %llu 16-byte accesses%s", va, vs, paths ? "" : " (paths not taken)");
    printf("\n");
    free(a), free(b);
}
/* CALL twice, S = 0 (the aligned twins, TW(t)) then 1 (the shifted ones); checks out. */
#define TW(t) (S ? (t).s : (t).a)
#define VEC_RUN(what, dt, out, CALL)                                       \
    do {                                                                  \
        unsigned long long n_[2];                                         \
        for (int S = 0; S < 2; S++) {                                     \
            unsigned long long c_ = vec_count();                          \
            CALL;                                                         \
            n_[S] = vec_count() - c_;                                     \
        }                                                                 \
        check_vec(what, dt, out, 1, n_[0], n_[1]);                           \
    } while (0)

static void t_vec_paths(be_dtype dt, int N, int C)
{
    const struct be_ops *o = g_gpu->ops;
    size_t n = (size_t)N * C;
    char what[80];
    twin x = twin_mk(n, dt, -2, 3), y = twin_mk(n, dt, -2, 2), out = twin_mk(n, dt, 0, 0), d = twin_mk(n, dt, -1, 1);
    twin w = twin_mk(C, BE_F32, 0.5f, 1.5f), b = twin_mk(C, BE_F32, -1, 1);
    twin mean = twin_mk(N, BE_F32, 0, 0), rstd = twin_mk(N, BE_F32, 0, 0);
    twin x2 = twin_mk(2 * n, dt, -4, 4), d2 = twin_mk(2 * n, dt, -1, 1);
#define IN(t) ((be_in){TW(t), dt})
#define OUT(t) ((be_out){TW(t), dt})
#define F(t) ((float *)TW(t))
    VEC_RUN(label("add", dt, N, C), dt, out, o->add(g_gpu, OUT(out), IN(x), IN(y), n));
    for (int act = 0; act < TD_ACT_COUNT; act++)
        for (int glu = 0; glu < 2; glu++) {
            twin xi = glu ? x2 : x, di = glu ? d2 : d;
            snprintf(what, sizeof what, "act_fwd %s", td_act_label(act, glu));
            VEC_RUN(label(what, dt, N, C), dt, out, o->act_fwd(g_gpu, act, glu, OUT(out), IN(xi), N, C));
            snprintf(what, sizeof what, "act_bwd %s", td_act_label(act, glu));
            VEC_RUN(label(what, dt, N, C), dt, di, o->act_bwd(g_gpu, act, glu, OUT(di), IN(y), IN(xi), N, C));
        }
    VEC_RUN(label("bias_gelu_fwd", dt, N, C), dt, out, o->bias_gelu_fwd(g_gpu, OUT(out), IN(x), F(b), N, C));
    VEC_RUN(label("bias_gelu_bwd dinp", dt, N, C), dt, d,
            o->bias_gelu_bwd(g_gpu, OUT(d), NULL, IN(y), IN(x), F(b), N, C));
    VEC_RUN(label("layernorm_fwd out", dt, N, C), dt, out,
            o->layernorm_fwd(g_gpu, OUT(out), F(mean), F(rstd), IN(x), F(w), F(b), N, C, 1e-5f));
    check_vec(label("layernorm_fwd mean", dt, N, C), BE_F32, mean, 0, 0, 0);
    check_vec(label("layernorm_fwd rstd", dt, N, C), BE_F32, rstd, 0, 0, 0);
    VEC_RUN(label("layernorm_bwd dinp", dt, N, C), dt, d,
            o->layernorm_bwd(g_gpu, OUT(d), NULL, NULL, IN(y), IN(x), F(w), F(mean), F(rstd), N, C));
    VEC_RUN(label("rmsnorm_fwd out", dt, N, C), dt, out,
            o->rmsnorm_fwd(g_gpu, OUT(out), F(rstd), IN(x), F(w), N, C, 1e-6f));
    check_vec(label("rmsnorm_fwd rstd", dt, N, C), BE_F32, rstd, 0, 0, 0);
    VEC_RUN(label("rmsnorm_bwd dinp", dt, N, C), dt, d,
            o->rmsnorm_bwd(g_gpu, OUT(d), NULL, IN(y), IN(x), F(w), F(rstd), N, C));

    /* the dropouts: unit0 a multiple of 4 (the vector path's), over two rows of 1 sample */
    int64_t samples[1] = {11};
    int64_t *gs = to_dev(g_gpu, samples, sizeof samples);
    be_drop drop = {.p = 0.3f, .seed = 0x0123456789abcdefULL, .sample = gs, .site = 7, .pos0 = 5, .unit0 = 8};
    VEC_RUN(label("bias_dropout_add_fwd", dt, N, C), dt, out,
            o->bias_dropout_add_fwd(g_gpu, OUT(out), IN(y), IN(x), F(b), 1, N, C, &drop));
    VEC_RUN(label("bias_dropout_add_fwd no dropout", dt, N, C), dt, out,
            o->bias_dropout_add_fwd(g_gpu, OUT(out), IN(y), IN(x), F(b), 1, N, C, NULL));
    VEC_RUN(label("dropout_fwd", dt, N, C), dt, out, o->dropout_fwd(g_gpu, OUT(out), IN(x), 1, N, C, &drop));
    VEC_RUN(label("dropout_bwd (in place)", dt, N, C), dt, d, o->dropout_bwd(g_gpu, OUT(d), IN(d), 1, N, C, &drop));
    be_dfree(g_gpu, gs);

    /* embedding_fwd: ids in and out of the slice [1, 1 + Vloc) */
    int32_t ids[64];
    for (int i = 0; i < N && i < 64; i++) ids[i] = i % 7;
    int32_t *gid = to_dev(g_gpu, ids, sizeof ids);
    twin wte = twin_mk((size_t)4 * C, BE_F32, -1, 1);
    VEC_RUN(label("embedding_fwd", dt, N, C), dt, out,
            o->embedding_fwd(g_gpu, OUT(out), gid, F(wte), N < 64 ? N : 64, C, 1, 4));
    be_dfree(g_gpu, gid);
    twin_rm(wte);
#undef IN
#undef OUT
#undef F
    twin_rm(x), twin_rm(y), twin_rm(out), twin_rm(d), twin_rm(w), twin_rm(b), twin_rm(mean), twin_rm(rstd);
    twin_rm(x2), twin_rm(d2);
}

int main(void)
{
    if (fill_sets_exactly_the_family()) return 1;
    if (!be_backend_known("cuda")) {
        printf("skipped: this build has no cuda backend (configure with -DTRIDENT_CUDA=ON where nvcc is)\n");
        return SKIP;
    }
    if (be_backend_devices("cuda") == 0) {
        printf("skipped: no CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)\n");
        return SKIP;
    }
    backend *cpu = be_create("cpu", 1), *gpu = be_create("cuda", 0);
    g_cpu = cpu, g_gpu = gpu;
    const be_dtype dts[] = {BE_F32, BE_BF16, BE_F16};
    for (int k = 0; k < 3; k++) {
        be_dtype dt = dts[k];
        g_run_dt = dt;
        t_add_scale_bias(dt, 7, 97);
        t_add_scale_bias(dt, 300, 1000);
        if (dt != BE_F32) { /* the rounded gradient's dtype; rows past one column-sum chunk, and odd widths */
            t_bias_bwd_to(dt, 7, 97);
            t_bias_bwd_to(dt, 1300, 200);
        }
        t_act(dt, 7, 97);
        t_act(dt, 9, 1000);
        t_dropout(dt, 3, 7, 97, 0.1f, 0, 0);
        t_dropout(dt, 2, 5, 1000, 0.5f, 3, 17);
        t_dropout(dt, 1, 2, 50257, 0.3f, 130, 4000);
        t_dropout(dt, 2, 3, 776, 0.2f, 64, 5); /* the vector path (unit0 and C multiples of 8) */
        t_embedding(dt, 64, 97, 0, 50);
        t_embedding(dt, 7, 1000, 100, 3);
        t_pos_embedding(dt, 3, 7, 97, 0);
        t_pos_embedding(dt, 2, 5, 1000, 9);
        t_norms(dt, 7, 97);
        t_norms(dt, 70, 1000);
        if (dt != BE_F32) t_kept_outputs(dt, 70, 1000);
        t_vec_paths(dt, 24, 776); /* 3 chunks of a warp's 256 columns and 8 more */
        t_rope(dt, 2, 7, 3, 16, 16, 0);
        t_rope(dt, 1, 5, 4, 64, 32, 4090);
        t_crossentropy(dt, 7, 50304, 50257, 0);
        t_crossentropy(dt, 5, 1000, 1000, 1000);
    }
    g_run_dt = BE_F32;
    t_optimizer((size_t)1000 * 7 + 3);
    t_optimizer((size_t)1 << 20 | 7);
    be_free(gpu);
    be_free(cpu);
    printf("%d of %d checks failed\n", g_fails, g_checks);
    return g_fails ? 1 : 0;
}
