/* Kernel micro-benchmark of the CPU backend at one GPT layer's shapes: every kernel the model
 * runs, timed alone, best wall time of several repetitions and the CPU time it took (all
 * threads), with GFLOP/s for GEMMs and GB/s for memory-bound kernels. CPU time is the steadier
 * number on a machine shared with other work; wall time is what a step pays.
 *
 *   bench/bench_kernels --hidden 768 --heads 12 --mbs 4 --seq 64 --vocab 50304 --threads 2
 *
 * Built by bench/kernels.sh against the core library (see bench/README.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "trident/check.h"
#include "trident/timer.h"

typedef struct {
    const backend *be;
    int B, T, C, NH, F, V;
    size_t adam_n;
    float *x, *y, *dy, *dx, *res, *w, *b, *dw, *db, *mean, *rstd; /* (BT, C), (C) */
    float *f1, *f2, *df1, *df2;                                    /* (BT, F) */
    float *qkv, *dqkv, *att, *datt, *lse;                          /* attention */
    float *wq, *dwq, *wf, *dwf, *wf2, *dwf2, *bf;                  /* weights */
    float *logits, *wte, *dwte, *maxv, *sumexp, *tlogit, *losses, *dloss;
    float *p, *g, *m, *v; /* adam_n */
    int32_t *ids, *targets;
    int64_t *sample;
    be_drop drop;
} ctx;

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const backend *g_be; /* buffers come from the backend, as the model's do (huge pages) */

static float *rnd(size_t n, unsigned seed)
{
    float *x = be_alloc(g_be, n * sizeof(float));
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.2f;
    }
    return x;
}

typedef void (*kernel_fn)(ctx *c);

/* Runs fn reps times after one warm-up; prints best wall, mean CPU, and the rate. */
static void run(ctx *c, const char *name, kernel_fn fn, int reps, double flops, double bytes)
{
    fn(c);
    double best = 1e30, cpu0 = cpu_seconds();
    for (int r = 0; r < reps; r++) {
        double t0 = td_now();
        fn(c);
        double dt = td_now() - t0;
        if (dt < best) best = dt;
    }
    double cpu = (cpu_seconds() - cpu0) / reps;
    printf("%-28s %10.3f ms  cpu %10.3f ms", name, best * 1e3, cpu * 1e3);
    if (flops > 0) printf("  %8.1f GFLOP/s", flops / best * 1e-9);
    if (bytes > 0) printf("  %8.1f GB/s", bytes / best * 1e-9);
    printf("\n");
}

#define BT (c->B * c->T)
static void k_ln_fwd(ctx *c)
{
    be_layernorm_fwd(c->be, c->y, c->mean, c->rstd, c->x, c->w, c->b, BT, c->C, 1e-5f);
}
static void k_ln_bwd(ctx *c)
{
    be_layernorm_bwd(c->be, c->dx, c->dw, c->db, c->dy, c->x, c->w, c->mean, c->rstd, BT, c->C);
}
static void k_bgelu_fwd(ctx *c) { be_bias_gelu_fwd(c->be, c->f2, c->f1, c->bf, BT, c->F); }
static void k_bgelu_bwd(ctx *c) { be_bias_gelu_bwd(c->be, c->df1, c->db, c->df2, c->f1, c->bf, BT, c->F); }
static void k_bda(ctx *c) { be_bias_dropout_add_fwd(c->be, c->res, c->x, c->y, c->b, c->B, c->T, c->C, NULL); }
static void k_bda_drop(ctx *c)
{
    be_bias_dropout_add_fwd(c->be, c->res, c->x, c->y, c->b, c->B, c->T, c->C, &c->drop);
}
static void k_drop_bwd(ctx *c) { be_dropout_bwd(c->be, c->dx, c->dy, c->B, c->T, c->C, &c->drop); }
static void k_bias_bwd(ctx *c) { be_bias_bwd(c->be, c->db, c->dy, BT, c->C); }
static void k_att_fwd(ctx *c)
{
    const float *q = c->qkv, *k = q + c->C, *v = q + 2 * c->C;
    be_attention_fwd(c->be, c->att, c->lse, q, k, v, 3 * c->C, 3 * c->C, c->B, c->T, c->NH, c->NH, c->C / c->NH,
                     NULL);
}
static void k_att_bwd(ctx *c)
{
    const float *q = c->qkv, *k = q + c->C, *v = q + 2 * c->C;
    float *dq = c->dqkv, *dk = dq + c->C, *dv = dq + 2 * c->C;
    be_attention_bwd(c->be, dq, dk, dv, c->datt, q, k, v, c->lse, 3 * c->C, 3 * c->C, c->B, c->T, c->NH, c->NH,
                     c->C / c->NH, NULL);
}
/* grouped-query: NH / 4 key/value heads (or NH when 4 does not divide it) read from the fused rows */
static int gqa_nkv(const ctx *c) { return c->NH % 4 == 0 ? c->NH / 4 : c->NH; }
static void k_gqa_fwd(ctx *c)
{
    const float *q = c->qkv, *k = q + c->C, *v = q + 2 * c->C;
    be_attention_fwd(c->be, c->att, c->lse, q, k, v, 3 * c->C, 3 * c->C, c->B, c->T, c->NH, gqa_nkv(c),
                     c->C / c->NH, NULL);
}
static void k_gqa_bwd(ctx *c)
{
    const float *q = c->qkv, *k = q + c->C, *v = q + 2 * c->C;
    float *dq = c->dqkv, *dk = dq + c->C, *dv = dq + 2 * c->C;
    be_attention_bwd(c->be, dq, dk, dv, c->datt, q, k, v, c->lse, 3 * c->C, 3 * c->C, c->B, c->T, c->NH, gqa_nkv(c),
                     c->C / c->NH, NULL);
}
static void k_rms_fwd(ctx *c) { be_rmsnorm_fwd(c->be, c->y, c->rstd, c->x, c->w, BT, c->C, 1e-5f); }
static void k_rms_bwd(ctx *c) { be_rmsnorm_bwd(c->be, c->dx, c->dw, c->dy, c->x, c->w, c->rstd, BT, c->C); }
/* SwiGLU on f1 read as (BT, [gate F/2 | up F/2]) */
static void k_swiglu_fwd(ctx *c) { be_swiglu_fwd(c->be, c->f2, c->f1, BT, c->F / 2); }
static void k_swiglu_bwd(ctx *c) { be_swiglu_bwd(c->be, c->df1, c->df2, c->f1, BT, c->F / 2); }
/* RoPE on the q part of the fused qkv rows, full rotary; the "cold" variant alternates the base so
 * that every call rebuilds its cos/sin table */
static void k_rope_fwd(ctx *c)
{
    be_rope_fwd(c->be, c->qkv, c->B, c->T, 3 * c->C, c->NH, c->C / c->NH, c->C / c->NH, 1e4f, 0);
}
static void k_rope_bwd(ctx *c)
{
    be_rope_bwd(c->be, c->dqkv, c->B, c->T, 3 * c->C, c->NH, c->C / c->NH, c->C / c->NH, 1e4f, 0);
}
static void k_rope_cold(ctx *c)
{
    static int flip;
    float base = (flip ^= 1) ? 1e4f : 5e5f;
    be_rope_fwd(c->be, c->qkv, c->B, c->T, 3 * c->C, c->NH, c->C / c->NH, c->C / c->NH, base, 0);
}
static void k_qkv_fwd(ctx *c) { be_matmul_fwd(c->be, c->qkv, c->x, c->wq, NULL, BT, c->C, 3 * c->C); }
static void k_qkv_bwd(ctx *c) { be_matmul_bwd(c->be, c->dx, c->dwq, NULL, c->dqkv, c->x, c->wq, BT, c->C, 3 * c->C); }
static void k_fc_fwd(ctx *c) { be_matmul_fwd(c->be, c->f1, c->x, c->wf, NULL, BT, c->C, c->F); }
static void k_fc_bwd(ctx *c) { be_matmul_bwd(c->be, c->dx, c->dwf, NULL, c->df1, c->x, c->wf, BT, c->C, c->F); }
static void k_fc2_fwd(ctx *c) { be_matmul_fwd(c->be, c->y, c->f2, c->wf2, NULL, BT, c->F, c->C); }
static void k_fc2_bwd(ctx *c) { be_matmul_bwd(c->be, c->df2, c->dwf2, NULL, c->dy, c->f2, c->wf2, BT, c->F, c->C); }
static void k_head_fwd(ctx *c) { be_matmul_fwd(c->be, c->logits, c->x, c->wte, NULL, BT, c->C, c->V); }
static void k_head_bwd(ctx *c)
{
    be_matmul_bwd(c->be, c->dx, c->dwte, NULL, c->logits, c->x, c->wte, BT, c->C, c->V);
}
static void k_ce_fwd(ctx *c)
{
    be_crossentropy_fwd(c->be, c->losses, c->maxv, c->sumexp, c->tlogit, c->logits, c->targets, BT, c->V, c->V);
}
static void k_ce_bwd(ctx *c)
{
    be_ce_bwd(c->be, c->logits, c->maxv, c->sumexp, c->targets, c->dloss, BT, c->V, c->V, 0);
}
static void k_adamw(ctx *c)
{
    be_adamw(c->be, c->p, c->g, c->m, c->v, c->adam_n, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, 10);
}
static void k_sumsq(ctx *c) { (void)be_sumsq(c->be, c->g, c->adam_n); }
static void k_zero(ctx *c) { be_zero(c->be, c->g, c->adam_n); }
static void k_copy(ctx *c) { be_copy(c->be, c->m, c->p, c->adam_n); }
static void k_emb_fwd(ctx *c) { be_embedding_fwd(c->be, c->y, c->ids, c->wte, BT, c->C, 0, c->V); }
static void k_emb_bwd(ctx *c) { be_embedding_bwd(c->be, c->dwte, c->dy, c->ids, BT, c->C, 0, c->V); }

int main(int argc, char **argv)
{
    int hidden = 768, heads = 12, mbs = 4, seq = 64, vocab = 50304, threads = 0, reps = 10;
    size_t adam_n = (size_t)64 << 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--hidden")) hidden = v;
        else if (!strcmp(argv[i], "--heads")) heads = v;
        else if (!strcmp(argv[i], "--mbs")) mbs = v;
        else if (!strcmp(argv[i], "--seq")) seq = v;
        else if (!strcmp(argv[i], "--vocab")) vocab = v;
        else if (!strcmp(argv[i], "--threads")) threads = v;
        else if (!strcmp(argv[i], "--reps")) reps = v;
        else if (!strcmp(argv[i], "--adam-mparams")) adam_n = (size_t)v << 20;
        else {
            fprintf(stderr, "bench_kernels: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    backend *be = be_create("cpu", threads);
    g_be = be;
    ctx cc = {0}, *c = &cc;
    c->be = be;
    c->B = mbs, c->T = seq, c->C = hidden, c->NH = heads, c->F = 4 * hidden, c->V = vocab, c->adam_n = adam_n;
    size_t n = (size_t)BT * c->C, nf = (size_t)BT * c->F, nv = (size_t)BT * c->V;
    c->x = rnd(n, 1), c->y = rnd(n, 2), c->dy = rnd(n, 3), c->dx = rnd(n, 4), c->res = rnd(n, 5);
    c->w = rnd(c->C, 6), c->b = rnd(c->C, 7), c->dw = rnd(c->C, 8), c->db = rnd(c->F, 9);
    c->mean = rnd(BT, 10), c->rstd = rnd(BT, 11);
    c->f1 = rnd(nf, 12), c->f2 = rnd(nf, 13), c->df1 = rnd(nf, 14), c->df2 = rnd(nf, 15), c->bf = rnd(c->F, 16);
    c->qkv = rnd(3 * n, 17), c->dqkv = rnd(3 * n, 18), c->att = rnd(n, 19), c->datt = rnd(n, 20);
    c->lse = rnd((size_t)c->B * c->NH * c->T, 21);
    c->wq = rnd(3 * (size_t)c->C * c->C, 22), c->dwq = rnd(3 * (size_t)c->C * c->C, 23);
    c->wf = rnd((size_t)c->F * c->C, 24), c->dwf = rnd((size_t)c->F * c->C, 25);
    c->wf2 = rnd((size_t)c->F * c->C, 26), c->dwf2 = rnd((size_t)c->F * c->C, 27);
    c->logits = rnd(nv, 28), c->wte = rnd((size_t)c->V * c->C, 29), c->dwte = rnd((size_t)c->V * c->C, 30);
    c->maxv = rnd(BT, 31), c->sumexp = rnd(BT, 32), c->tlogit = rnd(BT, 33), c->losses = rnd(BT, 34);
    c->dloss = rnd(BT, 35);
    c->p = rnd(adam_n, 36), c->g = rnd(adam_n, 37), c->m = rnd(adam_n, 38), c->v = rnd(adam_n, 39);
    for (size_t i = 0; i < adam_n; i++) c->v[i] = fabsf(c->v[i]);
    c->ids = td_xmalloc((size_t)BT * sizeof(int32_t)), c->targets = td_xmalloc((size_t)BT * sizeof(int32_t));
    c->sample = td_xmalloc((size_t)c->B * sizeof(int64_t));
    for (int i = 0; i < BT; i++) c->ids[i] = c->targets[i] = (int32_t)((i * 7919) % c->V);
    for (int i = 0; i < c->B; i++) c->sample[i] = i;
    c->drop = (be_drop){.p = 0.1f, .seed = 1234, .sample = c->sample, .site = 5};

    double bt = BT, C = c->C, F = c->F, V = c->V, T = c->T, fb = sizeof(float);
    printf("shapes: tokens %d (mbs %d x seq %d), hidden %d, heads %d, ffn %d, vocab %d; %d threads; "
           "AdamW over %zu M elements\n", BT, mbs, seq, hidden, heads, c->F, vocab, be_cpu_threads(be), adam_n >> 20);
    printf("%-28s %13s  %14s  %s\n", "kernel", "best wall", "cpu per call", "rate");
    run(c, "matmul_fwd qkv", k_qkv_fwd, reps, 2 * bt * C * 3 * C, 0);
    run(c, "matmul_bwd qkv", k_qkv_bwd, reps, 4 * bt * C * 3 * C, 0);
    run(c, "matmul_fwd fc", k_fc_fwd, reps, 2 * bt * C * F, 0);
    run(c, "matmul_bwd fc", k_fc_bwd, reps, 4 * bt * C * F, 0);
    run(c, "matmul_fwd fc2", k_fc2_fwd, reps, 2 * bt * C * F, 0);
    run(c, "matmul_bwd fc2", k_fc2_bwd, reps, 4 * bt * C * F, 0);
    run(c, "matmul_fwd head", k_head_fwd, reps > 3 ? 3 : reps, 2 * bt * C * V, 0);
    run(c, "matmul_bwd head", k_head_bwd, reps > 3 ? 3 : reps, 4 * bt * C * V, 0);
    run(c, "attention_fwd", k_att_fwd, reps, 4 * bt * T * C / 2, 0);
    run(c, "attention_bwd", k_att_bwd, reps, 8 * bt * T * C / 2, 0);
    run(c, "attention_fwd gqa NKV=NH/4", k_gqa_fwd, reps, 4 * bt * T * C / 2, 0);
    run(c, "attention_bwd gqa NKV=NH/4", k_gqa_bwd, reps, 8 * bt * T * C / 2, 0);
    run(c, "rope_fwd (q)", k_rope_fwd, reps, 0, 2 * bt * C * fb);
    run(c, "rope_bwd (q)", k_rope_bwd, reps, 0, 2 * bt * C * fb);
    run(c, "rope_fwd (q), table rebuilt", k_rope_cold, reps, 0, 2 * bt * C * fb);
    run(c, "layernorm_fwd", k_ln_fwd, reps, 0, 2 * bt * C * fb);
    run(c, "layernorm_bwd", k_ln_bwd, reps, 0, 3 * bt * C * fb);
    run(c, "rmsnorm_fwd", k_rms_fwd, reps, 0, 2 * bt * C * fb);
    run(c, "rmsnorm_bwd", k_rms_bwd, reps, 0, 3 * bt * C * fb);
    run(c, "swiglu_fwd (F/2)", k_swiglu_fwd, reps, 0, 1.5 * bt * F * fb);
    run(c, "swiglu_bwd (F/2)", k_swiglu_bwd, reps, 0, 2.5 * bt * F * fb);
    run(c, "bias_gelu_fwd", k_bgelu_fwd, reps, 0, 2 * bt * F * fb);
    run(c, "bias_gelu_bwd", k_bgelu_bwd, reps, 0, 3 * bt * F * fb);
    run(c, "bias_dropout_add p=0", k_bda, reps, 0, 3 * bt * C * fb);
    run(c, "bias_dropout_add p=0.1", k_bda_drop, reps, 0, 3 * bt * C * fb);
    run(c, "dropout_bwd p=0.1", k_drop_bwd, reps, 0, 2 * bt * C * fb);
    run(c, "bias_bwd", k_bias_bwd, reps, 0, bt * C * fb);
    run(c, "embedding_fwd", k_emb_fwd, reps, 0, 2 * bt * C * fb);
    run(c, "embedding_bwd", k_emb_bwd, reps, 0, 3 * bt * C * fb);
    run(c, "crossentropy_fwd", k_ce_fwd, reps, 0, bt * V * fb);
    run(c, "ce_bwd", k_ce_bwd, reps, 0, 2 * bt * V * fb);
    double an = (double)adam_n;
    run(c, "adamw", k_adamw, 3, 0, 28 * an);
    run(c, "sumsq", k_sumsq, 3, 0, 4 * an);
    run(c, "zero", k_zero, 3, 0, 4 * an);
    run(c, "copy", k_copy, 3, 0, 8 * an);
    printf("sgemm peak %.1f GFLOP/s, copy bandwidth %.1f GB/s, AdamW's streams %.1f GB/s (read + written)\n",
           be_peak_gflops(be), be_copy_gbps(be), be_adamw_stream_gbps(be));
    be_free(be);
    return 0;
}
