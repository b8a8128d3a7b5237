/* src/plan/plan.c, the layout planner: each term of its model on cases worked by hand (ring
 * collectives, a GEMM at a known efficiency, Korthikanti et al.'s activation formulas, the
 * micro-batches in flight of 1F1B and interleaved 1F1B, bytes per parameter, a mixture of experts'
 * optimizer state under the distributed optimizer), then the Megatron
 * paper's (Narayanan et al. 2021) results on DGX A100s (the preset's GEMM efficiency fitted to five
 * rows of Table 1, the fit redone here; the rest held out): its weak-scaling table, each row's
 * TFLOP/s per GPU at its own layout as `trident plan` prints it, the preset as shipped (full
 * recomputation, counted in the FLOPs as the paper does) within 10% of the published figure in
 * fp16 and 12% in bf16, and the search's choice no slower; the interleaved
 * schedule ahead of 1F1B by more at small batches than at large ones (its Figure 12); and the
 * tensor x pipeline trade-off of its 162.2B model on 64 GPUs best at tensor-parallel size 8, one
 * node (its Figure 13). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "trident/gpt.h"
#include "trident/memory.h"
#include "trident/plan.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static void close_to(double got, double want, double rel)
{
    if (fabs(got - want) > rel * fabs(want)) fail_msg("%.9g is not within %g of %.9g", got, rel, want);
}

static void collectives(void **state)
{
    (void)state;
    /* 1 GB over 8 ranks at 100 GB/s, 10 us a step: 2 * 7/8 * 10 ms + 14 * 10 us */
    close_to(plan_allreduce_s(1e9, 8, 100e9, 10e-6), 0.0175 + 14e-5, 1e-12);
    close_to(plan_allgather_s(1e9, 8, 100e9, 10e-6), 0.00875 + 7e-5, 1e-12);
    assert_true(plan_allreduce_s(1e9, 1, 100e9, 10e-6) == 0);
}

static void gemm(void **state)
{
    (void)state;
    plan_cluster c = {.peak = {0, 100e12, 0}, .gemm_emax = 0.5, .gemm_half = 0};
    /* 2 * 1024^3 FLOPs at half of 100 TFLOP/s */
    close_to(plan_gemm_s(&c, 1, 1024, 1024, 1024), 2.0 * 1073741824.0 / 50e12, 1e-12);
    c.gemm_half = 1024; /* every dimension at half efficiency: 1/8 */
    close_to(plan_gemm_s(&c, 1, 1024, 1024, 1024), 8 * 2.0 * 1073741824.0 / 50e12, 1e-12);
}

static void activations(void **state)
{
    (void)state;
    gpt_config g = {.num_layers = 1, .hidden = 4096, .heads = 32, .seq = 2048};
    double sbh = 2048.0 * 4096; /* micro-batch 1 */
    double attn = 5.0 * 32 * 2048 / 4096; /* 5as/h = 80 */
    close_to(plan_layer_act_bytes(&g, 1, 1, 0, PLAN_RC_NONE), sbh * (34 + attn), 1e-12);
    close_to(plan_layer_act_bytes(&g, 1, 8, 0, PLAN_RC_NONE), sbh * (10 + 24.0 / 8 + attn / 8), 1e-12);
    close_to(plan_layer_act_bytes(&g, 2, 8, 1, PLAN_RC_NONE), 2 * sbh / 8 * (34 + attn), 1e-12);
    close_to(plan_layer_act_bytes(&g, 1, 8, 1, PLAN_RC_SELECTIVE), sbh / 8 * 34, 1e-12);
    close_to(plan_layer_act_bytes(&g, 1, 8, 0, PLAN_RC_FULL), 2 * sbh, 1e-12);
    close_to(plan_layer_act_bytes(&g, 1, 8, 1, PLAN_RC_FULL), 2 * sbh / 8, 1e-12);
    /* in flight on the first stage */
    close_to(plan_inflight(4, 1, 8), 4, 1e-12);
    close_to(plan_inflight(4, 1, 2), 2, 1e-12);
    close_to(plan_inflight(4, 2, 8), 4 * (1 + 3.0 / 8), 1e-12);
}

static plan_job gpt(int layers, int hidden, int heads, int64_t batch)
{
    plan_job j;
    memset(&j, 0, sizeof j);
    gpt_config *g = &j.cfg;
    g->num_layers = layers, g->hidden = hidden, g->heads = heads, g->ffn = 4 * hidden, g->seq = 2048;
    g->max_pos = 2048, g->vocab = g->padded_vocab = 51200;
    j.gbs = batch;
    j.dtype = 2;
    return j;
}

/* Bytes per parameter: 18 in mixed precision (16-bit weights, fp32 grads, master weights and
 * moments), 6 + 12/d with the distributed optimizer. */
static void memory_per_parameter(void **state)
{
    (void)state;
    plan_cluster c;
    assert_int_equal(plan_cluster_preset("dgx-a100-80gb", &c), 0);
    plan_job j = gpt(8, 1024, 16, 64);
    plan_result r;
    char err[256];
    plan_layout l = {1, 1, 8, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    double P = r.m_params / 2;
    close_to(r.m_params + r.m_grads + r.m_optimizer, 18 * P, 1e-12);
    l.distopt = 1;
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    close_to(r.m_params + r.m_grads + r.m_optimizer, (6 + 12.0 / 8) * P, 1e-12);
    /* impossible layouts are refused with a reason */
    plan_layout bad = {3, 1, 1, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    assert_int_equal(plan_evaluate(&j, &c, &bad, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "tensor-model-parallel"));
}

/* The paper's Table 1 (weak scaling; sequence 2048, vocabulary 51,200, full recomputation). */
static const struct {
    double params;
    int heads, hidden, layers, tp, pp, gpus, batch;
    double tflops;
} TABLE1[] = {
    {1.7, 24, 2304, 24, 1, 1, 32, 512, 137},         {3.6, 32, 3072, 30, 2, 1, 64, 512, 138},
    {7.5, 32, 4096, 36, 4, 1, 128, 512, 142},        {18.4, 48, 6144, 40, 8, 1, 256, 1024, 135},
    {39.1, 64, 8192, 48, 8, 2, 512, 1536, 138},      {76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140},
    {145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148},   {310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155},
    {529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163}, {1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163},
};

/* A row at its own layout, as `trident plan` evaluates the row's flags (--tensor-model-parallel-size,
 * --pipeline-model-parallel-size, --recompute-granularity full, the data-parallel size the rest of
 * --num-gpus, every other layout flag at its default: micro-batch 1, no interleaving, no sequence
 * parallelism, no distributed optimizer, no overlap), in dtype 2 (fp16, the paper's) or 1 (bf16:
 * Megatron then reduces the gradients in fp32). */
static plan_result table1_row(const plan_cluster *c, size_t i, int dtype)
{
    plan_job j = gpt(TABLE1[i].layers, TABLE1[i].hidden, TABLE1[i].heads, TABLE1[i].batch);
    j.dtype = dtype;
    int tp = TABLE1[i].tp, pp = TABLE1[i].pp;
    plan_layout l = {tp, pp, TABLE1[i].gpus / (tp * pp), 1, 1, PLAN_RC_FULL, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    plan_result r;
    char err[256];
    assert_int_equal(plan_evaluate(&j, c, &l, &r, err, sizeof err), 0);
    assert_true(r.fits);
    return r;
}

/* The preset's GEMM efficiency (dgx-a100-80gb's gemm_max_efficiency) is fitted to these rows of
 * Table 1 only, every other one from the smallest: 1.7B, 7.5B, 39.1B, 145.6B, 529.6B, each at its
 * own layout in fp16. Held out of the fit, and so a check of the model rather than of the fit:
 * Table 1's 3.6B, 18.4B, 76.1B, 310.1B and 1008B rows, every row in bf16, all of Table 2, and
 * Figures 12 and 13. gemm_half_dim (48) is not fitted. */
static const int TABLE1_FIT[] = {0, 2, 4, 6, 8};

static int table1_fitted(size_t i)
{
    for (size_t k = 0; k < sizeof TABLE1_FIT / sizeof TABLE1_FIT[0]; k++)
        if ((size_t)TABLE1_FIT[k] == i) return 1;
    return 0;
}

static double table1_error(const plan_cluster *c, size_t i, int dtype)
{
    return (table1_row(c, i, dtype).tflops_per_gpu - TABLE1[i].tflops) / TABLE1[i].tflops;
}

/* The fit, redone: the efficiency in [0.60, 0.90] (steps of 0.005) with the least squared log
 * error over the fitted rows is the preset's, to its two digits. */
static void gemm_efficiency_fit(void **state)
{
    (void)state;
    plan_cluster c;
    assert_int_equal(plan_cluster_preset("dgx-a100-80gb", &c), 0);
    double preset = c.gemm_emax, best = 0, best_sq = INFINITY;
    for (int k = 0; k <= 60; k++) {
        c.gemm_emax = 0.60 + 0.005 * k;
        double sq = 0;
        for (size_t f = 0; f < sizeof TABLE1_FIT / sizeof TABLE1_FIT[0]; f++) {
            double l = log1p(table1_error(&c, (size_t)TABLE1_FIT[f], 2));
            sq += l * l;
        }
        if (sq < best_sq) best_sq = sq, best = c.gemm_emax;
    }
    printf("  gemm_max_efficiency fitted to Table 1's 1.7B, 7.5B, 39.1B, 145.6B, 529.6B rows: %.3f "
           "(rms error %.1f%%); the preset's %.3f\n", best, 100 * sqrt(best_sq / 5), preset);
    assert_true(fabs(best - preset) <= 0.005 + 1e-9);
}

/* Every row of Table 1 at its own layout (table1_row: what `trident plan` prints for the row's
 * flags), the preset as shipped: fp16, the paper's precision, within TABLE1_FP16_TOL of the
 * paper's TFLOP/s per GPU; bf16 (its gradients reduced in fp32, which the paper's fp16 runs did
 * not pay) within TABLE1_BF16_TOL. And the search's pick for the row's GPUs no slower. */
#define TABLE1_FP16_TOL 0.10
#define TABLE1_BF16_TOL 0.12

static void megatron_table1(void **state)
{
    (void)state;
    plan_cluster c;
    assert_int_equal(plan_cluster_preset("dgx-a100-80gb", &c), 0);
    printf("  %8s %3s %3s %5s %9s %9s %7s %9s %7s  %s\n", "params", "tp", "pp", "GPUs", "paper", "fp16", "error",
           "bf16", "error", "the search's best layout (by the model)");
    double worst = 0, worst_held = 0, worst_bf16 = 0;
    for (size_t i = 0; i < sizeof TABLE1 / sizeof TABLE1[0]; i++) {
        plan_result r = table1_row(&c, i, 2), b = table1_row(&c, i, 1);
        double err = (r.tflops_per_gpu - TABLE1[i].tflops) / TABLE1[i].tflops;
        double errb = (b.tflops_per_gpu - TABLE1[i].tflops) / TABLE1[i].tflops;
        worst = fmax(worst, fabs(err)), worst_bf16 = fmax(worst_bf16, fabs(errb));
        if (!table1_fitted(i)) worst_held = fmax(worst_held, fabs(err));
        plan_job j = gpt(TABLE1[i].layers, TABLE1[i].hidden, TABLE1[i].heads, TABLE1[i].batch);
        plan_result found[1];
        assert_true(plan_search(&j, &c, TABLE1[i].gpus, NULL, found, 1, NULL) > 0);
        printf("  %7.1fB%s %3d %3d %5d %9.0f %9.1f %+6.1f%% %9.1f %+6.1f%%  tp %d pp %d vp %d mbs %d %s%s: %.1f s vs "
               "%.1f s\n", TABLE1[i].params, table1_fitted(i) ? " (fit)" : "      ", TABLE1[i].tp, TABLE1[i].pp,
               TABLE1[i].gpus, TABLE1[i].tflops, r.tflops_per_gpu, 100 * err, b.tflops_per_gpu, 100 * errb,
               found[0].l.tp, found[0].l.pp, found[0].l.vp, found[0].l.mbs,
               found[0].l.recompute == PLAN_RC_FULL ? "full" : found[0].l.recompute ? "selective" : "no recompute",
               found[0].l.sp ? " sp" : "", found[0].iter_s, r.iter_s);
        assert_true(fabs(err) <= TABLE1_FP16_TOL);
        assert_true(fabs(errb) <= TABLE1_BF16_TOL);
        assert_true(found[0].iter_s <= r.iter_s * (1 + 1e-12));
    }
    printf("  largest error against the paper: fp16 %.1f%% (on the rows held out of the fit %.1f%%), bf16 %.1f%%\n",
           100 * worst, 100 * worst_held, 100 * worst_bf16);
}

/* Table 2's PTD-P rows: GPT-3 175B (tp 8 x pp 12) and the 530B model (tp 8 x pp 35), micro-batch
 * 1, the global batch fixed as the data-parallel size doubles. */
static void megatron_table2(void **state)
{
    (void)state;
    static const struct {
        int layers, hidden, heads, pp, gpus, batch;
        double tflops;
    } T2[] = {{96, 12288, 96, 12, 384, 1536, 153},   {96, 12288, 96, 12, 768, 1536, 149},
              {96, 12288, 96, 12, 1536, 1536, 141},  {105, 20480, 128, 35, 560, 2240, 171},
              {105, 20480, 128, 35, 1120, 2240, 167}, {105, 20480, 128, 35, 2240, 2240, 159}};
    plan_cluster c;
    assert_int_equal(plan_cluster_preset("dgx-a100-80gb", &c), 0);
    double last = 0;
    for (size_t i = 0; i < sizeof T2 / sizeof T2[0]; i++) {
        plan_job j = gpt(T2[i].layers, T2[i].hidden, T2[i].heads, T2[i].batch);
        plan_result best = {0}, r;
        char err[256];
        for (int vp = 1; vp <= 4; vp++) {
            plan_layout l = {8, T2[i].pp, T2[i].gpus / (8 * T2[i].pp), vp, 1, PLAN_RC_FULL, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
            if (plan_evaluate(&j, &c, &l, &r, err, sizeof err) == 0 && r.fits && r.tflops_per_gpu > best.tflops_per_gpu)
                best = r;
        }
        double e = (best.tflops_per_gpu - T2[i].tflops) / T2[i].tflops;
        printf("  %dL x %d, tp 8 x pp %d, %4d GPUs: paper %.0f, predicted %.1f TFLOP/s per GPU (%+.1f%%)\n",
               T2[i].layers, T2[i].hidden, T2[i].pp, T2[i].gpus, T2[i].tflops, best.tflops_per_gpu, 100 * e);
        assert_true(fabs(e) <= 0.15);
        /* more data-parallel replicas of the same batch: fewer micro-batches each, slower per GPU */
        if (i % 3) assert_true(best.tflops_per_gpu < last);
        last = best.tflops_per_gpu;
    }
}

/* Figure 12: GPT-3 175B (96 layers, hidden 12288, 96 heads) on 96 GPUs, tp 8 x pp 12, micro-batch
 * 1; the interleaved schedule (2 chunks a stage) against 1F1B as the batch grows. */
static void megatron_interleaving(void **state)
{
    (void)state;
    plan_cluster c;
    assert_int_equal(plan_cluster_preset("dgx-a100-80gb", &c), 0);
    double last_gain = 1e9;
    for (int batch = 12; batch <= 60; batch += 12) {
        plan_job j = gpt(96, 12288, 96, batch);
        plan_result a, b;
        char err[256];
        plan_layout l = {8, 12, 1, 1, 1, PLAN_RC_FULL, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
        assert_int_equal(plan_evaluate(&j, &c, &l, &a, err, sizeof err), 0);
        l.vp = 2;
        assert_int_equal(plan_evaluate(&j, &c, &l, &b, err, sizeof err), 0);
        double gain = b.tflops_per_gpu / a.tflops_per_gpu - 1;
        printf("  175B, 96 GPUs, batch %2d: 1F1B %.1f, interleaved %.1f TFLOP/s per GPU (%+.1f%%)\n", batch,
               a.tflops_per_gpu, b.tflops_per_gpu, 100 * gain);
        assert_true(gain > 0 && gain < last_gain);
        last_gain = gain;
    }
}

/* Figure 13: the 162.2B model (32 layers, hidden 20480, 128 heads) on 64 GPUs, tp x pp = 64. */
static void megatron_tp_pp(void **state)
{
    (void)state;
    plan_cluster c;
    assert_int_equal(plan_cluster_preset("dgx-a100-80gb", &c), 0);
    for (int batch = 32; batch <= 128; batch *= 4) { /* the figure's two batch sizes */
        plan_job j = gpt(32, 20480, 128, batch);
        double best = 0;
        int best_tp = 0;
        printf("  162.2B, 64 GPUs, batch %3d:", batch);
        for (int tp = 2; tp <= 32; tp *= 2) {
            plan_layout l = {tp, 64 / tp, 1, 1, 1, PLAN_RC_FULL, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
            plan_result r;
            char err[256];
            assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
            printf(" (%d, %d) %.1f", tp, 64 / tp, r.tflops_per_gpu);
            if (r.tflops_per_gpu > best) best = r.tflops_per_gpu, best_tp = tp;
        }
        printf(" TFLOP/s per GPU\n");
        assert_int_equal(best_tp, 8);
    }
}

/* A calibrated ("trident-cpu") cluster: memory is trident's own model of a rank (what `train`
 * prints) plus what a rank held before it; fp32 throughout. */
static void trident_cpu_memory(void **state)
{
    (void)state;
    plan_cluster c = {.gpus_per_node = 2, .peak = {100e9, 0, 0}, .mem_gib = 8, .hbm_bw = 20e9, .intra_bw = 3e9,
                      .inter_bw = 3e9, .gemm_emax = 0.9, .gemm_half = 16, .mem_reserved_gib = 0.02, .trident_cpu = 1};
    plan_job j = gpt(8, 256, 8, 16);
    j.cfg.seq = j.cfg.max_pos = 128;
    j.cfg.vocab = 50257, j.cfg.padded_vocab = 50304;
    j.dtype = 0;
    plan_layout l = {1, 1, 2, 1, 2, PLAN_RC_NONE, 0, 1, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    plan_result r;
    char err[256];
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    mem_layout ml = {.cfg = j.cfg, .tp = 1, .dp = 2, .mbs = 2, .nchunks = 1, .distributed_optimizer = 1,
                     .bucket_elems = 40e6};
    ml.chunk[0] = (mem_chunk){8, 1, 1, 1, 0};
    mem_prediction p;
    mem_predict(&ml, &p);
    close_to(r.m_total, p.total + 0.02 * GIB, 1e-12);
    assert_true(r.fits);
}

/* A mixture of experts (8 experts of 512, top-2, every other layer, biases, GeLU), in Megatron's
 * memory model on GPUs: the parameters a stage holds are the model's own table's (gpt_stage_numel,
 * another code path) at ep 1 and 4; the token exchange over the ep group by hand: allgather 4 x
 * (ep - 1) / ep x ep T h e / bw, alltoall 4 x T k h e (ep - 1) / ep / bw (+ latencies); the search
 * offers ep layouts; trident's own CPU model prices tp x ep. */
static void mixture_of_experts(void **state)
{
    (void)state;
    plan_cluster c;
    assert_int_equal(plan_cluster_preset("dgx-a100-80gb", &c), 0);
    plan_job j = gpt(4, 256, 8, 64);
    j.cfg.seq = j.cfg.max_pos = 128;
    j.cfg.num_experts = 8, j.cfg.moe_topk = 2, j.cfg.moe_ffn = 512, j.cfg.moe_layer_freq = 2;
    j.dtype = 0; /* fp32: m_params = 4 x the parameters */
    plan_result r;
    char err[256];
    for (int ep = 1; ep <= 4; ep *= 4) {
        plan_layout l = {1, 1, 8, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, ep, 0, 1, PLAN_CP_P2P};
        assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
        double want = (double)gpt_stage_numel(&j.cfg, 1, ep, 0, 4, 1, 1);
        printf("ep %d: the plan's parameters %.0f, the model's table %.0f\n", ep, r.m_params / 4, want);
        close_to(r.m_params / 4, want, 1e-12);
        if (ep == 1) assert_true(r.t_ep == 0);
    }
    double T = 128, h = 256, e = 4, bw, lat;
    plan_layout l = {1, 1, 8, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 4, 0, 1, PLAN_CP_P2P};
    plan_group_link(&c, &l, PLAN_GROUP_EP, &bw, &lat);
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    double layers = 2, micro = 64 / 8; /* 2 MoE layers of 4, 8 micro-batches */
    close_to(r.t_ep, micro * layers * 4 * (3.0 / 4 * 4 * T * h * e / bw + 3 * lat), 1e-9);
    l.ep_alltoall = 1;
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    close_to(r.t_ep, micro * layers * 4 * (T * 2 * h * e * 3.0 / 4 / bw + 3 * lat), 1e-9);
    /* ep must divide the experts and dp */
    l.ep = 16;
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), -1);
    plan_result top[64];
    int found = plan_search(&j, &c, 8, NULL, top, 64, NULL), with_ep = 0;
    for (int i = 0; i < found && i < 64; i++) with_ep += top[i].l.ep > 1;
    assert_true(with_ep > 0);
    c.trident_cpu = 1;
    plan_layout tp2 = {2, 1, 4, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    assert_int_equal(plan_evaluate(&j, &c, &tp2, &r, err, sizeof err), 0);
    tp2.ep = 2;
    assert_int_equal(plan_evaluate(&j, &c, &tp2, &r, err, sizeof err), 0);
}

/* Mixtral's shape (Jiang et al. 2024: 32 layers of hidden 4096, 32 heads over 8 key/value groups,
 * 8 SwiGLU experts of 14336 a layer, top-2, RMSNorm, rotary positions, no biases, an untied output
 * layer, vocabulary 32000), bf16, global batch 512, sequence 4096. */
static plan_job mixtral(void)
{
    plan_job j;
    memset(&j, 0, sizeof j);
    gpt_config *g = &j.cfg;
    g->num_layers = 32, g->hidden = 4096, g->heads = 32, g->query_groups = 8, g->ffn = 14336, g->act = TD_ACT_SILU, g->glu = 1;
    g->norm = GPT_NORM_RMSNORM, g->pos = GPT_POS_ROPE, g->disable_bias = 1, g->untied = 1;
    g->num_experts = 8, g->moe_topk = 2;
    g->seq = g->max_pos = 4096, g->vocab = g->padded_vocab = 32000;
    j.gbs = 512;
    j.dtype = 1;
    return j;
}

/* Mixtral's parameters on one rank of a stage of `layers` layers, counted by hand: a layer's
 * attention (Q 4096 x 4096, K and V 1024 x 4096 each, the projection 4096 x 4096, / tp), its two
 * RMSNorms (4096 each) and router (8 x 4096); its E / ep experts of gate, up and down (3 x 14336
 * x 4096, / tp); the word embedding on the first stage, the output layer and the final norm on the
 * last (32000 x 4096 / tp each). *experts: of which the experts'. */
static double mixtral_params(int tp, int ep, int layers, int first, int last, double *experts)
{
    double h = 4096, kv = 8 * 128, F = 14336, V = 32000;
    double layer = ((h + 2 * kv) * h + h * h) / tp + 2 * h + 8 * h;
    *experts = layers * (8.0 / ep) * 3 * F * h / tp;
    return layers * layer + *experts + (first ? V * h / tp : 0) + (last ? V * h / tp + h : 0);
}

/* The distributed optimizer under expert parallelism: the dense parameters' fp32 master weights
 * and moments (12 bytes) are sharded over dp, the experts' over their expert-data-parallel group,
 * dp / ep (Megatron's, and trident's own: src/optim). By hand on Mixtral at tp 1 x pp 2 x dp 32
 * (64 H100s) with ep 4, 2 micro-batches, 4 virtual stages, selective recomputation: the layout an
 * earlier model listed as fitting at 79.5 GiB with the state of every parameter / dp. And a search
 * of 64 H100s lists no layout whose hand-counted memory exceeds the device's. */
static void moe_distributed_optimizer(void **state)
{
    (void)state;
    plan_cluster c;
    assert_int_equal(plan_cluster_preset("dgx-h100", &c), 0);
    plan_job j = mixtral();
    plan_result r;
    char err[256];
    for (int ep = 1; ep <= 8; ep *= 2) {
        plan_layout l = {2, 4, 8, 1, 1, PLAN_RC_SELECTIVE, 1, 1, 1, 0, PLAN_DP_AUTO, 0, 0, ep, 0, 1, PLAN_CP_P2P};
        assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
        double X, P = mixtral_params(2, ep, 8, 1, 0, &X), XL, PL = mixtral_params(2, ep, 8, 0, 1, &XL);
        int last = fabs(r.m_params - 2 * PL) < 0.5; /* the busiest stage: the first or the last */
        if (last) P = PL, X = XL;
        else close_to(r.m_params, 2 * P, 1e-12);
        /* the model's own table agrees with the hand count */
        close_to((double)gpt_stage_numel(&j.cfg, 2, ep, last ? 24 : 0, 8, !last, last), P, 1e-12);
        double want = 12 * ((P - X) / 8 + X / (8 / ep));
        printf("  Mixtral, tp 2 x pp 4 x dp 8, ep %d: optimizer %.3f GiB (by hand %.3f)\n", ep, r.m_optimizer / GIB,
               want / GIB);
        close_to(r.m_optimizer, want, 1e-12);
        close_to(r.m_grads, 4 * P, 1e-12);
    }
    /* the layout listed at 79.5 GiB */
    plan_layout l = {1, 2, 32, 4, 2, PLAN_RC_SELECTIVE, 0, 1, 1, 0, PLAN_DP_AUTO, 0, 0, 4, 0, 1, PLAN_CP_P2P};
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    double X, P = mixtral_params(1, 4, 16, 1, 0, &X);
    close_to(r.m_params, 2 * P, 1e-12);
    double want = 2 * P + 4 * P + 12 * ((P - X) / 32 + X / 8) + r.m_acts + 3 * GIB;
    printf("  Mixtral, tp 1 x pp 2 x dp 32, ep 4: %.2f GiB (by hand %.2f) on 80\n", r.m_total / GIB, want / GIB);
    close_to(r.m_total, want, 1e-12);
    assert_true(want > 80 * GIB);
    assert_false(r.fits);
    /* the search: every layout it lists fits by the hand count */
    enum { CAP = 20000 };
    static plan_result found[CAP];
    int n = plan_search(&j, &c, 64, NULL, found, CAP, NULL);
    assert_true(n > 0 && n <= CAP);
    for (int i = 0; i < n; i++) {
        const plan_layout *f = &found[i].l;
        int L = 32 / f->pp, ep = f->ep > 1 ? f->ep : 1;
        double Xf, XL, Pf = mixtral_params(f->tp, ep, L, 1, f->pp == 1, &Xf);
        double PL = mixtral_params(f->tp, ep, L, f->pp == 1, 1, &XL);
        if (fabs(found[i].m_params - 2 * PL) < 0.5) Pf = PL, Xf = XL;
        int dpcp = f->dp * (f->cp > 1 ? f->cp : 1); /* the state over dp x cp, the experts' over dp x cp / ep */
        double div = f->distopt ? dpcp : 1, xdiv = f->distopt ? dpcp / ep : 1;
        double total = 6 * Pf + 12 * ((Pf - Xf) / div + Xf / xdiv) + found[i].m_acts + 3 * GIB;
        if (total > 80 * GIB)
            fail_msg("listed: tp %d pp %d dp %d cp %d vp %d mbs %d ep %d distopt %d needs %.2f GiB by hand", f->tp,
                     f->pp, f->dp, f->cp, f->vp, f->mbs, ep, f->distopt, total / GIB);
        assert_false(f->tp == 1 && f->pp == 2 && f->vp == 4 && f->mbs == 2 && ep == 4 && f->distopt &&
                     f->recompute == PLAN_RC_SELECTIVE);
    }
}

/* Which link each group runs over (ranks fill 2-rank nodes in order, Megatron's rank order), and
 * what a collective then costs, worked by hand. The cluster: nodes of 2 ranks, 4 GB/s and 2 us
 * inside, 50 MB/s a rank (100 MB/s a node) and 100 us across. */
static void placement_links(void **state)
{
    (void)state;
    plan_cluster c = {.gpus_per_node = 2, .nodes = 2, .peak = {100e9, 0, 0}, .mem_gib = 8, .hbm_bw = 20e9,
                      .intra_bw = 4e9, .intra_lat = 2e-6, .inter_bw = 50e6, .inter_lat = 1e-4, .gemm_emax = 0.9,
                      .gemm_half = 16, .trident_cpu = 1};
    double bw, lat;
    /* tp 2 x dp 2: tp pairs {0,1} {2,3} inside the nodes, dp pairs {0,2} {1,3} across, one rank a node each */
    plan_layout tp2dp2 = {2, 1, 2, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    assert_int_equal(plan_group_link(&c, &tp2dp2, PLAN_GROUP_TP, &bw, &lat), 1);
    assert_true(bw == 4e9 && lat == 2e-6);
    assert_int_equal(plan_group_link(&c, &tp2dp2, PLAN_GROUP_DP, &bw, &lat), 2);
    assert_true(bw == 50e6 && lat == 1e-4);
    /* dp 4: one ring over both nodes, two of its ranks a node: the ring crosses each node's link
     * once, so it has the whole node's 100 MB/s; Megatron's GPUs (a NIC each): the ring's two
     * devices a node cross on both their NICs (NCCL's channels), 2 x 50 as well */
    plan_layout dp4 = {1, 1, 4, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    assert_int_equal(plan_group_link(&c, &dp4, PLAN_GROUP_DP, &bw, &lat), 2);
    assert_true(bw == 100e6);
    c.trident_cpu = 0;
    plan_group_link(&c, &dp4, PLAN_GROUP_DP, &bw, &lat);
    assert_true(bw == 100e6);
    /* ... but a tensor-parallel group across nodes and the pipeline's sends keep one device's 50 */
    plan_layout tp4x = {4, 1, 1, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    assert_int_equal(plan_group_link(&c, &tp4x, PLAN_GROUP_TP, &bw, &lat), 2);
    assert_true(bw == 50e6);
    plan_layout pp4 = {1, 4, 1, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    assert_int_equal(plan_group_link(&c, &pp4, PLAN_GROUP_PP, &bw, &lat), 2);
    assert_true(bw == 50e6);
    c.trident_cpu = 1;
    /* pp 2 x dp 2 (tp 1): rank = d + 2p, so dp pairs {0,1} {2,3} inside, pp pairs {0,2} {1,3} across */
    plan_layout pp2dp2 = {1, 2, 2, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    assert_int_equal(plan_group_link(&c, &pp2dp2, PLAN_GROUP_DP, &bw, &lat), 1);
    assert_int_equal(plan_group_link(&c, &pp2dp2, PLAN_GROUP_PP, &bw, &lat), 2);
    assert_true(bw == 50e6);
    /* tp 4 spans both nodes, two ranks on each: 100 MB/s */
    plan_layout tp4 = {4, 1, 1, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    assert_int_equal(plan_group_link(&c, &tp4, PLAN_GROUP_TP, &bw, &lat), 2);
    assert_true(bw == 100e6);
    /* 3 ranks a node, tp 2 (3 is no multiple of 2): the pair {2,3} straddles nodes 1 and 2 */
    c.gpus_per_node = 3, c.nodes = 0;
    plan_layout tp2dp3 = {2, 1, 3, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    assert_int_equal(plan_group_link(&c, &tp2dp3, PLAN_GROUP_TP, &bw, &lat), 2);
    assert_true(bw == 50e6 && lat == 1e-4);
    assert_int_equal(plan_group_link(&c, &tp2dp3, PLAN_GROUP_DP, &bw, &lat), 2); /* {0,2,4}: nodes 1, 1, 2 */
    c.gpus_per_node = 2, c.nodes = 2;

    /* The costs: GPT-2 shape, 2 layers of hidden 64, 4 heads, ffn 256, seq 32, vocab 128, fp32. */
    plan_job j;
    memset(&j, 0, sizeof j);
    j.cfg.num_layers = 2, j.cfg.hidden = 64, j.cfg.heads = 4, j.cfg.ffn = 256, j.cfg.seq = 32, j.cfg.max_pos = 32;
    j.cfg.vocab = j.cfg.padded_vocab = 128;
    j.gbs = 4;
    plan_result r;
    char err[256];
    /* tp 2: a layer's half: QKV 64x192/2 + 96, projection 64x64/2 + 64, fc1 64x256/2 + 128, fc2
     * 256x64/2 + 64, two LayerNorms 256 = 25184; two layers 50368, the word embedding's half
     * 64x64, positions 32x64, the final norm 128: 56640 parameters, 226560 bytes, summed over the
     * dp pair across the nodes at 50 MB/s: 2 (1/2) 226560 / 50e6 + 2 x 100 us */
    assert_int_equal(plan_evaluate(&j, &c, &tp2dp2, &r, err, sizeof err), 0);
    close_to(r.t_dp, 226560 / 50e6 + 2e-4, 1e-12);
    /* dp 4: 49984 a layer, 99968 + 128x64 + 2048 + 128 = 110336 parameters, 441344 bytes, over
     * the 4-ring at the node's 100 MB/s (flat; hierarchical: trident_across_nodes below):
     * 2 (3/4) 441344 / 100e6 + 6 x 100 us */
    dp4.dp_collectives = PLAN_DP_FLAT;
    assert_int_equal(plan_evaluate(&j, &c, &dp4, &r, err, sizeof err), 0);
    close_to(r.t_dp, 1.5 * 441344 / 100e6 + 6e-4, 1e-12);
    /* tp 2 x pp 2 across, scatter/gather off: 4 micro-batches, each 32x64 fp32 activations (8192
     * bytes, whole from each tp rank) forward and back at 50 MB/s + 100 us, and the tied
     * embedding's half (64x64 fp32) summed by the first and last stages */
    plan_layout tp2pp2 = {2, 2, 1, 1, 1, PLAN_RC_NONE, 0, 0, 0, 1, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    assert_int_equal(plan_evaluate(&j, &c, &tp2pp2, &r, err, sizeof err), 0);
    close_to(r.t_p2p, 8 * (8192 / 50e6 + 1e-4) + 16384 / 50e6 + 2e-4, 1e-12);
    /* more devices than the cluster's 2 nodes of 2 */
    plan_layout dp8 = {1, 1, 8, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    j.gbs = 8;
    assert_int_equal(plan_evaluate(&j, &c, &dp8, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "needs 8 devices"));
}

/* trident's own runs across nodes, each term worked by hand on the 2-node cluster of
 * placement_links (nodes of 2 ranks, 4 GB/s and 2 us inside, 50 MB/s a rank and 100 us across)
 * and its model (2 layers of hidden 64, 4 heads, seq 32, vocab 128, fp32): the pipeline's
 * scatter/gather, the hierarchical dp collectives, the overlap the buckets allow, and the
 * communication left exposed per kind of group. */
static plan_cluster two_nodes(void)
{
    plan_cluster c = {.gpus_per_node = 2, .nodes = 2, .peak = {100e9, 0, 0}, .mem_gib = 8, .hbm_bw = 20e9,
                      .intra_bw = 4e9, .intra_lat = 2e-6, .inter_bw = 50e6, .inter_lat = 1e-4, .gemm_emax = 0.9,
                      .gemm_half = 16, .trident_cpu = 1};
    return c;
}

static plan_job small_gpt(int64_t gbs)
{
    plan_job j;
    memset(&j, 0, sizeof j);
    j.cfg.num_layers = 2, j.cfg.hidden = 64, j.cfg.heads = 4, j.cfg.ffn = 256, j.cfg.seq = 32, j.cfg.max_pos = 32;
    j.cfg.vocab = j.cfg.padded_vocab = 128;
    j.gbs = gbs;
    return j;
}

static void scatter_gather(void **state)
{
    (void)state;
    plan_cluster c = two_nodes();
    plan_job j = small_gpt(4);
    plan_result on, off, sp;
    char err[256];
    /* tp 2 inside x pp 2 across, 4 micro-batches: 8 transfers of a 32x64 fp32 activation (8192 bytes) */
    plan_layout l = {2, 2, 1, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    assert_int_equal(plan_evaluate(&j, &c, &l, &on, err, sizeof err), 0);
    l.no_scatter_gather = 1;
    assert_int_equal(plan_evaluate(&j, &c, &l, &off, err, sizeof err), 0);
    double embd = 16384 / 50e6 + 2e-4; /* the tied embedding's half, 64x64 fp32, summed by two ranks */
    /* on: each tp rank sends its half, 4096 bytes at 50 MB/s + 100 us; the receiving pair
     * all-gathers the 8192 bytes inside its node: 4096 / 4e9 + 2 us */
    close_to(on.x_pp, 8 * (4096 / 50e6 + 1e-4), 1e-12);
    close_to(on.x_tp - on.t_tp, 8 * (4096 / 4e9 + 2e-6), 1e-12);
    close_to(on.x_embd, embd, 1e-12);
    close_to(on.t_p2p, 8 * (4096 / 50e6 + 1e-4) + 8 * (4096 / 4e9 + 2e-6) + embd, 1e-12);
    /* off: the whole from each tp rank, nothing to gather */
    close_to(off.x_pp, 8 * (8192 / 50e6 + 1e-4), 1e-12);
    close_to(off.x_tp, off.t_tp, 1e-12);
    close_to(off.t_p2p, 8 * (8192 / 50e6 + 1e-4) + embd, 1e-12);
    assert_true(on.iter_s < off.iter_s);
    /* sequence parallelism: each tp rank holds s/2 positions already; nothing to gather */
    l.no_scatter_gather = 0, l.sp = 1;
    assert_int_equal(plan_evaluate(&j, &c, &l, &sp, err, sizeof err), 0);
    close_to(sp.x_pp, 8 * (4096 / 50e6 + 1e-4), 1e-12);
    close_to(sp.x_tp, sp.t_tp, 1e-12);
}

static void dp_hierarchical(void **state)
{
    (void)state;
    plan_cluster c = two_nodes();
    plan_job j = small_gpt(4);
    plan_result r;
    char err[256];
    /* dp 4 over 2 nodes of 2: 110336 parameters (placement_links), 441344 bytes of fp32 gradients */
    plan_layout l = {1, 1, 4, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_FLAT, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    double flat = 1.5 * 441344 / 100e6 + 6e-4; /* one ring at the node's 100 MB/s */
    /* in each node a reduce-scatter over 2 (1/2 of 441344 at 4 GB/s + 2 us), the two rails at once
     * an all-reduce of the half (220672 bytes) over 2 nodes at a rank's 50 MB/s (2 (1/2) 220672 /
     * 50e6 + 2 x 100 us), an all-gather over 2 inside */
    double hier = 220672 / 4e9 + 2e-6 + 220672 / 50e6 + 2e-4 + 220672 / 4e9 + 2e-6;
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    close_to(r.t_dp, flat, 1e-12);
    assert_false(r.dp_hier);
    l.dp_collectives = PLAN_DP_HIER;
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    close_to(r.t_dp, hier, 1e-12);
    close_to(r.x_dp, hier, 1e-12);
    assert_true(r.dp_hier);
    l.dp_collectives = PLAN_DP_AUTO; /* the cheaper: 4.7 ms against 7.2 */
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    close_to(r.t_dp, hier, 1e-12);
    /* with a fast network and a slow inside, auto keeps flat */
    plan_cluster slow_in = c;
    slow_in.intra_bw = 60e6, slow_in.inter_bw = 50e6;
    assert_int_equal(plan_evaluate(&j, &slow_in, &l, &r, err, sizeof err), 0);
    close_to(r.t_dp, 1.5 * 441344 / 60e6 + 6e-4, 1e-12); /* the ring: 2 x 50 MB/s, at most the inside's 60 */
    assert_false(r.dp_hier);
    /* the distributed optimizer: reduce-scatter (1/2 of 441344 inside; the rail's half of its
     * 220672 bytes across), then the parameters' all-gather (the rail's, then inside) */
    l.distopt = 1, l.dp_collectives = PLAN_DP_HIER;
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    double rs = 220672 / 4e9 + 2e-6 + 110336 / 50e6 + 1e-4, ag = 110336 / 50e6 + 1e-4 + 220672 / 4e9 + 2e-6;
    close_to(r.t_dp, rs, 1e-12);
    close_to(r.x_dp, rs + ag, 1e-12);
    l.dp_collectives = PLAN_DP_FLAT; /* flat: each 3/4 of 441344 over the ring */
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    close_to(r.t_dp, 0.75 * 441344 / 100e6 + 3e-4, 1e-12);
    close_to(r.x_dp, 2 * (0.75 * 441344 / 100e6 + 3e-4), 1e-12);
    /* tp 2 x dp 2: one rank of each dp pair a node: flat whatever is asked */
    plan_layout tp2dp2 = {2, 1, 2, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_HIER, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    assert_int_equal(plan_evaluate(&j, &c, &tp2dp2, &r, err, sizeof err), 0);
    close_to(r.t_dp, 226560 / 50e6 + 2e-4, 1e-12);
    assert_false(r.dp_hier);
}

static void overlap_buckets(void **state)
{
    (void)state;
    plan_cluster c = two_nodes();
    plan_job j = small_gpt(8); /* dp 4: 2 micro-batches a rank */
    plan_result r;
    char err[256];
    double flat = 1.5 * 441344 / 100e6 + 6e-4;
    plan_layout l = {1, 1, 4, 1, 1, PLAN_RC_NONE, 0, 0, 1, 0, PLAN_DP_FLAT, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    /* one bucket (the default 40M elements holds all 110336): it closes at the end, nothing hides */
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    close_to(r.t_dp, flat, 1e-12);
    /* buckets of 25000: the word embedding and positions (128x64 + 32x64 = 10240) close last; of
     * the 100096 before them, 4 whole buckets (100000) close before the end. A backward far
     * longer than their reduction (a slow machine) hides all of theirs */
    plan_cluster slow = c;
    slow.peak[0] = 1e6, slow.hbm_bw = 1e6;
    l.bucket_elems = 25000;
    assert_int_equal(plan_evaluate(&j, &slow, &l, &r, err, sizeof err), 0);
    close_to(r.t_dp, flat * (1 - 100000.0 / 110336), 1e-12);
    close_to(r.x_dp, r.t_dp, 1e-12);
    /* a fast machine: only what the last micro-batch's backward lasts hides */
    plan_cluster fast = c;
    fast.peak[0] = 1e15, fast.hbm_bw = 1e15;
    assert_int_equal(plan_evaluate(&j, &fast, &l, &r, err, sizeof err), 0);
    assert_true(r.t_dp > flat * (1 - 100000.0 / 110336) && r.t_dp < flat);
    /* without --overlap-grad-reduce nothing hides */
    l.overlap_grad = 0;
    assert_int_equal(plan_evaluate(&j, &slow, &l, &r, err, sizeof err), 0);
    close_to(r.t_dp, flat, 1e-12);
    /* --overlap-param-gather: the distributed optimizer's all-gather of the same buckets hides
     * behind the next forward; the embedding's, read first, does not */
    l.distopt = 1, l.overlap_grad = 1;
    double half = 0.75 * 441344 / 100e6 + 3e-4;
    assert_int_equal(plan_evaluate(&j, &slow, &l, &r, err, sizeof err), 0);
    close_to(r.t_dp, half * (1 - 100000.0 / 110336), 1e-12); /* the reduce-scatter hides as the all-reduce did */
    close_to(r.x_dp, r.t_dp + half, 1e-12);
    l.overlap_param = 1;
    assert_int_equal(plan_evaluate(&j, &slow, &l, &r, err, sizeof err), 0);
    close_to(r.x_dp - r.t_dp, half * (1 - 100000.0 / 110336), 1e-12);
}

/* LoRA's time: a frozen linear's backward is its input's gradient alone. A model of 2 layers,
 * hidden 64, 4 heads (MHA), FFN 256 (GeLU), seq 32, padded vocabulary 512, 8 samples, adapters of
 * rank 4 on q_proj and v_proj, counted by hand a token at a time (forward FLOPs, 2 per
 * multiply-add): the weights' GEMMs 2 x 64 x (192 + 64 + 256 + 256) = 98304 a layer, 2 passes;
 * the attention core's 2 x 2 x 32 x 64 = 8192, 3 passes; the adapters' 2 x 4 x ((64 + 64) + (64 +
 * 64)) = 2048, 3 passes; the logits' 2 x 64 x 512 = 65536, 2 passes. Without LoRA every GEMM 3
 * passes. The planner's compute time on a device whose GEMMs run at the peak whatever their shape
 * (gemm_half 0) and whose memory-bound kernels are free is those FLOPs over the peak; its data
 * parallelism reduces the adapters' 2048 fp32 gradients alone, and Megatron's memory holds
 * gradients and Adam state for them alone. */
static void lora_time(void **state)
{
    (void)state;
    plan_job j;
    memset(&j, 0, sizeof j);
    gpt_config *g = &j.cfg;
    g->num_layers = 2, g->hidden = 64, g->heads = 4, g->ffn = 256, g->seq = g->max_pos = 32;
    g->vocab = g->padded_vocab = 512, g->untied = 1;
    j.gbs = 8, j.dtype = 0;
    double tokens = 8 * 32, full = tokens * (2 * (3 * 98304.0 + 3 * 8192) + 3 * 65536);
    close_to(gpt_flops_per_iteration(g, 8, 0), full, 1e-12);
    g->lora_rank = 4, g->lora_alpha = 8, g->lora_targets = 1 << GPT_LORA_Q | 1 << GPT_LORA_V;
    double lora = tokens * (2 * (2 * 98304.0 + 3 * 8192 + 3 * 2048) + 2 * 65536);
    close_to(lora, 149946368.0, 1e-15); /* 585728 a token */
    close_to(gpt_flops_per_iteration(g, 8, 0), lora, 1e-12);
    /* full recomputation: the layers' forward again (the logits not) */
    close_to(gpt_flops_per_iteration(g, 8, 1), tokens * (2 * (3 * 98304.0 + 4 * 8192 + 4 * 2048) + 2 * 65536), 1e-12);

    plan_cluster c = {.gpus_per_node = 2, .nodes = 1, .peak = {1e12, 0, 0}, .mem_gib = 80, .hbm_bw = 1e30,
                      .intra_bw = 1e9, .inter_bw = 1e9, .gemm_emax = 1, .gemm_half = 0};
    plan_layout l = {1, 1, 1, 1, 8, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 0, 0, 1, PLAN_CP_P2P};
    plan_result r;
    char err[256];
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    close_to(r.t_compute, lora / 1e12, 1e-9);
    close_to(r.flops, lora, 1e-12);
    g->lora_rank = 0;
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    close_to(r.t_compute, full / 1e12, 1e-9);
    g->lora_rank = 4;
    /* dp 2, each rank 4 samples: the adapters' gradients, 2 layers x (4 x 64 + 64 x 4) x 2 modules = 2048
     * floats, all-reduced over 2 ranks: 2 x 1/2 x 8192 bytes / 1 GB/s; Megatron's memory (fp32
     * training): fp32 gradients and Adam's two moments (8 bytes) for them alone */
    l.dp = 2, l.mbs = 4;
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    close_to(r.t_dp, 8192 / 1e9, 1e-12);
    close_to(r.m_grads, 2048 * 4.0, 1e-12);
    close_to(r.m_optimizer, 2048 * 8.0, 1e-12);

    /* a mixture of experts (4 experts of 32, top 2): a token goes through its 2 experts' up and down
     * adapters, 2 x ((64 + 32) + (32 + 64)) = 384 in + out a layer (not the dense ffn's 640), against
     * q's 64 + 64; the rest of the FLOPs is the same for any targets: the difference is 3 passes x
     * 2 r x (384 - 128) a token and layer; with every other layer dense (--moe-layer-freq 2) the
     * mean over the layers (384 + 640) / 2 = 512 */
    g->num_experts = 4, g->moe_topk = 2, g->moe_ffn = 32;
    g->lora_targets = 1 << GPT_LORA_Q;
    double q_only = gpt_flops_per_iteration(g, 8, 0);
    g->lora_targets = 1 << GPT_LORA_UP | 1 << GPT_LORA_DOWN;
    close_to(gpt_flops_per_iteration(g, 8, 0) - q_only, tokens * 2 * 3 * 8 * (384.0 - 128), 1e-9);
    g->moe_layer_freq = 2;
    g->lora_targets = 1 << GPT_LORA_Q;
    q_only = gpt_flops_per_iteration(g, 8, 0);
    g->lora_targets = 1 << GPT_LORA_UP | 1 << GPT_LORA_DOWN;
    close_to(gpt_flops_per_iteration(g, 8, 0) - q_only, tokens * 2 * 3 * 8 * (512.0 - 128), 1e-9);
    /* the planner's compute time on the shape-blind device: the experts' adapters each on its
     * expert's rows (8 x 32 x 2 / 4 = 128 rows, 4 experts), the same FLOPs in every MoE layer */
    g->moe_layer_freq = 0;
    l.dp = 1, l.mbs = 8;
    g->lora_targets = 1 << GPT_LORA_Q;
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    double tq = r.t_compute;
    g->lora_targets = 1 << GPT_LORA_UP | 1 << GPT_LORA_DOWN;
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    close_to(r.t_compute - tq, tokens * 2 * 3 * 8 * (384.0 - 128) / 1e12, 1e-9);
    /* with a shared expert of 16: its up and down adapters on every token, (64 + 16) + (16 + 64)
     * = 160 more in + out a layer, in the FLOPs and in the planner's time */
    g->moe_shared_ffn = 16;
    g->lora_targets = 1 << GPT_LORA_Q;
    q_only = gpt_flops_per_iteration(g, 8, 0);
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    tq = r.t_compute;
    g->lora_targets = 1 << GPT_LORA_UP | 1 << GPT_LORA_DOWN;
    close_to(gpt_flops_per_iteration(g, 8, 0) - q_only, tokens * 2 * 3 * 8 * (384.0 + 160 - 128), 1e-9);
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    close_to(r.t_compute - tq, tokens * 2 * 3 * 8 * (384.0 + 160 - 128) / 1e12, 1e-9);
}

/* Context parallelism (--context-parallel-size), worked by hand. The exchange's terms on round
 * numbers; then a 2-layer GPT (hidden 64, 4 heads of 16, ffn 256, seq 32, vocab 128, fp32) at cp 2
 * on a shape-blind device (every GEMM at the peak, memory-bound kernels free) whose link is 1 GB/s
 * and 10 us a message: the compute halves (every GEMM on 16 of the 32 positions, the core a rank's
 * 16 queries against the 32 keys), the ring's sends, the activations of 16 positions, the
 * exchange's buffers, the gradients over dp x cp. */
static void context_parallel(void **state)
{
    (void)state;
    double flight, exposed;
    /* p2p, cp 4, 1000 bytes of k and v a rank at 1 MB/s, no latency: a step's send 1 ms. A block's
     * attention 0.5 ms: forward 3 sends, 0.5 ms of each exposed; backward 3 sends of k, v and dk, dv
     * (2 ms, 1 ms behind two blocks) and the gradients' hop home (1 ms) */
    plan_cp_exchange_s(PLAN_CP_P2P, 4, 1000, 0, 0.5e-3, 1e6, 0, 0, 0, &flight, &exposed);
    close_to(flight, 3e-3 + 6e-3 + 1e-3, 1e-12);
    close_to(exposed, 1.5e-3 + 3e-3 + 1e-3, 1e-12);
    /* a block of 2 ms hides every step of the ring: only the hop home is exposed */
    plan_cp_exchange_s(PLAN_CP_P2P, 4, 1000, 0, 2e-3, 1e6, 0, 0, 0, &flight, &exposed);
    close_to(exposed, 1e-3, 1e-12);
    /* all_gather, cp 4, 1 ms a message step: the gather of 4 x 1000 bytes, 3/4 of it in 3 steps
     * (6 ms), forward; backward the gather again and the gradients' reduce-scatter; all blocking */
    plan_cp_exchange_s(PLAN_CP_ALL_GATHER, 4, 1000, 0, 1, 1e6, 1e-3, 0, 0, &flight, &exposed);
    close_to(flight, 18e-3, 1e-12);
    close_to(exposed, 18e-3, 1e-12);
    /* a2a, cp 4: 1000 bytes of k, v and 2000 of q and the output, 3/4 of them leaving (2.25 ms),
     * four all-to-alls of 3 steps (12 ms); backward as many (Megatron), twice (trident: q, k, v
     * exchanged again); recomputation a forward more */
    plan_cp_exchange_s(PLAN_CP_A2A, 4, 1000, 2000, 1, 1e6, 1e-3, 0, 0, &flight, &exposed);
    close_to(flight, 2 * 14.25e-3, 1e-12);
    close_to(exposed, flight, 1e-12);
    plan_cp_exchange_s(PLAN_CP_A2A, 4, 1000, 2000, 1, 1e6, 1e-3, 1, 1, &flight, &exposed);
    close_to(flight, 4 * 14.25e-3, 1e-12);

    plan_cluster c = {.gpus_per_node = 4, .nodes = 1, .peak = {1e12, 0, 0}, .mem_gib = 80, .hbm_bw = 1e30,
                      .intra_bw = 1e9, .intra_lat = 1e-5, .inter_bw = 1e9, .inter_lat = 1e-5, .gemm_emax = 1,
                      .gemm_half = 0};
    plan_job j = small_gpt(2);
    plan_result one, r;
    char err[256];
    plan_layout l1 = {1, 1, 1, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 1, PLAN_CP_P2P};
    plan_layout l2 = l1;
    l2.cp = 2;
    assert_int_equal(plan_evaluate(&j, &c, &l1, &one, err, sizeof err), 0);
    assert_int_equal(plan_evaluate(&j, &c, &l2, &r, err, sizeof err), 0);
    /* every GEMM on 16 positions and the core a C-th: half the compute, the same 2 micro-batches */
    assert_int_equal(r.micro, 2);
    close_to(r.t_compute, one.t_compute / 2, 1e-12);
    /* the ring: a rank's 16 rows of k and v (2 x 64 fp32) are 8192 bytes, 8.192 us + 10 us a send; a
     * block (4 heads, 16 queries x 16 keys x 16, two products) is 4 x 2 x 8192 FLOPs = 65.536 ns;
     * forward 1 send, backward 1 send of 16384 bytes behind two blocks and the hop home; 2 layers x
     * 2 micro-batches */
    double step = 8192 / 1e9 + 1e-5, step2 = 16384 / 1e9 + 1e-5, block = 4 * 2 * 8192 / 1e12;
    close_to(r.t_cp, 4 * (step + step2 + step), 1e-12);
    close_to(r.x_cp, 4 * ((step - block) + (step2 - 2 * block) + step), 1e-12);
    /* the gradients over dp x cp = 2 (no dp): all-reduced, 2 x 1/2 x 4P bytes + 2 x 10 us */
    double P = r.m_params / 4;
    close_to(r.t_dp, 4 * P / 1e9 + 2e-5, 1e-12);
    close_to(r.iter_s, r.t_compute + r.x_cp + r.t_dp + r.t_optimizer, 1e-12);
    /* memory: a layer's activations of 16 positions, sbh(34 + 5as/h) with s = 16, b = 1, h = 64
     * (39936 bytes in 16-bit), and the scores of the 16 queries against all 32 keys, 5 a s s_k b =
     * 10240 rather than the formula's 5120: 45056, twice in fp32; the logits of 16 positions (fp32
     * softmax and the fp32 logits, 16 x 128 x 8); the p2p buffers as the trainer carves them: two
     * blocks of the 16 rows' fused q|k|v (192 floats) and their gradients, the output (16 x 64),
     * the softmax statistics and D (4 heads x 16): 13440 floats */
    close_to(r.m_acts, 2 * 2 * 45056.0 + 16 * 128 * 8 + 13440 * 4, 1e-12);
    mem_layout ml;
    memset(&ml, 0, sizeof ml);
    ml.cfg = j.cfg, ml.tp = 1, ml.mbs = 1, ml.cp = 2, ml.cp_comm = PS_CP_P2P;
    close_to(mem_cp_exchange_bytes(&ml), 13440 * 4, 1e-12);
    /* the distributed optimizer shards over dp x cp: fp32 Adam's 8 bytes a parameter, halved */
    l2.distopt = 1;
    assert_int_equal(plan_evaluate(&j, &c, &l2, &r, err, sizeof err), 0);
    close_to(r.m_optimizer, 8 * P / 2, 1e-12);
    char flags[512];
    plan_layout_flags(&l2, 2, flags, sizeof flags);
    assert_non_null(strstr(flags, "--context-parallel-size 2 --cp-comm-type p2p"));

    /* the cp group's link: tp 1 x cp 2 x dp 2 on nodes of 2, rank = c + 2 d: cp pairs {0,1} {2,3}
     * inside the nodes, dp x cp {0,1,2,3} across both */
    plan_cluster n2 = two_nodes();
    plan_layout l4 = {1, 1, 2, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 2, PLAN_CP_P2P};
    double bw, lat;
    assert_int_equal(plan_group_link(&n2, &l4, PLAN_GROUP_CP, &bw, &lat), 1);
    assert_true(bw == 4e9);
    assert_int_equal(plan_group_link(&n2, &l4, PLAN_GROUP_DP, &bw, &lat), 2);
    /* tp 2 x cp 2: cp pairs {0,2} {1,3} across, one rank a node */
    plan_layout l5 = {2, 1, 1, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 0, 2, PLAN_CP_P2P};
    assert_int_equal(plan_group_link(&n2, &l5, PLAN_GROUP_CP, &bw, &lat), 2);
    assert_true(bw == 50e6);

    /* refused: 32 positions are not 6 chunks; a2a splitting 4 heads over 8 ranks */
    l2.distopt = 0, l2.cp = 3;
    c.gpus_per_node = 8;
    assert_int_equal(plan_evaluate(&j, &c, &l2, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "2 x --context-parallel-size 3"));
    l2.cp = 8, l2.cp_comm = PLAN_CP_A2A;
    assert_int_equal(plan_evaluate(&j, &c, &l2, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "a2a"));
    l2.cp_comm = PLAN_CP_P2P;
    assert_int_equal(plan_evaluate(&j, &c, &l2, &r, err, sizeof err), 0);

    /* the search tries C: on 4 devices cp 1, 2 and 4 (32 positions into 8 chunks), at the options'
     * comm type (a2a: 4 heads over 4 ranks) */
    c.gpus_per_node = 4;
    plan_layout opts;
    memset(&opts, 0, sizeof opts);
    opts.cp_comm = PLAN_CP_A2A;
    j.gbs = 4;
    static plan_result all[4096];
    int found = plan_search(&j, &c, 4, &opts, all, 4096, NULL), seen[5] = {0};
    assert_true(found > 0 && found <= 4096);
    for (int i = 0; i < found; i++) {
        assert_true(all[i].l.cp >= 1 && all[i].l.cp <= 4 && all[i].l.cp != 3);
        assert_true(all[i].l.cp_comm == PLAN_CP_A2A);
        seen[all[i].l.cp] = 1;
    }
    assert_true(seen[1] && seen[2] && seen[4]);
}

/* A mixture of experts under context parallelism, worked by hand: context_parallel's 2-layer GPT
 * (hidden 64, 4 heads, seq 32, fp32), every layer MoE (4 experts of 64, top 2, GeLU, biases; an
 * expert 64 x 64 + 64 x 64 + 64 + 64 = 8320 parameters), on its shape-blind device (every GEMM at
 * the peak, 1 GB/s and 10 us a message). The expert grid is the trainer's: ep carved out of dp x cp
 * (consecutive dp x cp ranks), the experts' gradients over the rest, dp x cp / ep. */
static void moe_context_parallel(void **state)
{
    (void)state;
    plan_cluster c = {.gpus_per_node = 4, .nodes = 1, .peak = {1e12, 0, 0}, .mem_gib = 80, .hbm_bw = 1e30,
                      .intra_bw = 1e9, .intra_lat = 1e-5, .inter_bw = 1e9, .inter_lat = 1e-5, .gemm_emax = 1,
                      .gemm_half = 0};
    plan_job j = small_gpt(2);
    j.cfg.num_experts = 4, j.cfg.moe_topk = 2, j.cfg.moe_ffn = 64;
    plan_result one, r;
    char err[256];
    /* dp 1 x cp 2 x ep 2 on 2 devices (alltoall): the two cp ranks are one ep group, edp = 2 / 2 = 1 */
    plan_layout l1 = {1, 1, 1, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 1, 1, 1, PLAN_CP_P2P};
    plan_layout l = l1;
    l.cp = 2, l.ep = 2;
    assert_int_equal(plan_evaluate(&j, &c, &l1, &one, err, sizeof err), 0);
    if (plan_evaluate(&j, &c, &l, &r, err, sizeof err)) fail_msg("dp 1 x cp 2 x ep 2 refused: %s", err);
    /* the experts' GEMMs at T / C: each rank's 16 tokens x top 2 = 32 rows, 16 an expert for its 2
     * experts (one rank at cp 1: 32 tokens, 16 rows an expert, 4 experts): with the router and the
     * attention on 16 positions, half the compute */
    assert_int_equal(r.micro, 2);
    close_to(r.t_compute, one.t_compute / 2, 1e-12);
    /* the token exchange at T / C: a rank's 16 tokens x top 2 rows of 64 fp32 (8192 bytes), half of
     * them to the other ep rank, 4096 bytes at 1 GB/s + 10 us; dispatch and combine, forward and
     * backward; 2 layers x 2 micro-batches */
    close_to(r.t_ep, 2 * 2 * 4 * (4096 / 1e9 + 1e-5), 1e-12);
    /* the cp exchange: context_parallel's ring, and the router's tokens per expert (4 int32, 16
     * bytes) all-reduced over cp 2 in every forward: 16 / 1e9 + 2 x 10 us, blocking */
    double step = 8192 / 1e9 + 1e-5, step2 = 16384 / 1e9 + 1e-5, block = 4 * 2 * 8192 / 1e12;
    double stats = 16 / 1e9 + 2e-5;
    close_to(r.t_cp, 4 * (step + step2 + step) + 4 * stats, 1e-12);
    close_to(r.x_cp, 4 * ((step - block) + (step2 - 2 * block) + step) + 4 * stats, 1e-12);
    /* a rank's parameters: 2 experts a layer (the model's own table at ep 2), X = 2 x 2 x 8320 */
    double P = r.m_params / 4, X = 2 * 2 * 8320.0;
    close_to(P, (double)gpt_stage_numel(&j.cfg, 1, 2, 0, 2, 1, 1), 1e-12);
    close_to((double)gpt_stage_numel(&j.cfg, 1, 1, 0, 2, 1, 1) - P, X, 1e-12);
    /* the dense gradients all-reduced over dp x cp = 2 ((P - X) x 4 bytes, 2 x 1/2 of them + 2 x 10
     * us); the experts' over edp = 1: nothing */
    close_to(r.t_dp, (P - X) * 4 / 1e9 + 2e-5, 1e-12);
    close_to(r.iter_s, r.t_compute + r.t_ep + r.x_cp + r.t_dp + r.t_optimizer, 1e-12);
    /* the distributed optimizer: fp32 Adam's 8 bytes a parameter, the dense over 2, the experts' over 1 */
    l.distopt = 1;
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    close_to(r.m_optimizer, 8 * ((P - X) / 2 + X), 1e-12);
    char flags[512];
    plan_layout_flags(&l, 2, flags, sizeof flags);
    assert_non_null(strstr(flags, "--context-parallel-size 2 --cp-comm-type p2p --expert-model-parallel-size 2 "
                                  "--moe-token-dispatcher-type alltoall"));

    /* dp 2 x cp 2 x ep 2 on 4 devices, 1 micro-batch: edp = 4 / 2 = 2. The dense gradients over 4
     * (2 x 3/4 x 4 (P - X) bytes + 6 x 10 us), the experts' over their 2 (4 X bytes + 2 x 10 us);
     * the distributed optimizer's state: the dense / 4, the experts' / 2 */
    l.dp = 2, l.distopt = 0;
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    close_to(r.t_dp, 1.5 * (P - X) * 4 / 1e9 + 6e-5 + X * 4 / 1e9 + 2e-5, 1e-12);
    l.distopt = 1;
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    close_to(r.m_optimizer, 8 * ((P - X) / 4 + X / 2), 1e-12);

    /* placement on nodes of 2 ranks (rank = tp_rank + tp (cp_rank + cp dp_rank)): at tp 1 x cp 2 x
     * dp 2, ep 2 is {0,1} {2,3}, inside the nodes; the experts' gradients {0,2} {1,3}, across. At tp
     * 2 x cp 2, ep 2 is the cp pair {0,2} (and {1,3}): across, a rank's share of the node's link,
     * 50 MB/s and 100 us, where the a2a is priced: 4 micro-batches of 16 tokens' 4096 bytes */
    plan_cluster n2 = two_nodes();
    plan_layout e4 = {1, 1, 2, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 2, 1, 2, PLAN_CP_P2P};
    double bw, lat;
    assert_int_equal(plan_group_link(&n2, &e4, PLAN_GROUP_EP, &bw, &lat), 1);
    assert_true(bw == 4e9);
    assert_int_equal(plan_group_link(&n2, &e4, PLAN_GROUP_EDP, &bw, &lat), 2);
    assert_true(bw == 50e6 && lat == 1e-4);
    assert_int_equal(plan_group_link(&n2, &e4, PLAN_GROUP_DP, &bw, &lat), 2);
    plan_layout t2 = {2, 1, 1, 1, 1, PLAN_RC_NONE, 0, 0, 0, 0, PLAN_DP_AUTO, 0, 0, 2, 1, 2, PLAN_CP_P2P};
    assert_int_equal(plan_group_link(&n2, &t2, PLAN_GROUP_EP, &bw, &lat), 2);
    assert_true(bw == 50e6 && lat == 1e-4);
    plan_job j4 = j;
    j4.gbs = 4;
    assert_int_equal(plan_evaluate(&j4, &n2, &t2, &r, err, sizeof err), 0);
    close_to(r.t_ep, 4 * 2 * 4 * (4096 / 50e6 + 1e-4), 1e-12);

    /* refused: ep not dividing dp x cp */
    l.dp = 1, l.ep = 4, l.distopt = 0;
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "the data-parallel x context-parallel size 2"));

    /* an expert capacity under cp (the trainer decides the drops over the micro-batch): each rank's
     * 16 tokens' 2 choices, an int32 expert and an fp32 weight each, all-gathered over cp 2 (2 x 128
     * bytes of the 256 a gather holds, at 1 GB/s + 10 us) in every forward, blocking */
    l.ep = 2;
    j.cfg.moe_capacity = 1.0f;
    assert_int_equal(plan_evaluate(&j, &c, &l, &r, err, sizeof err), 0);
    double gathers = 2 * (128 / 1e9 + 1e-5);
    close_to(r.t_cp, 4 * (step + step2 + step) + 4 * (stats + gathers), 1e-12);
    close_to(r.x_cp, 4 * ((step - block) + (step2 - 2 * block) + step) + 4 * (stats + gathers), 1e-12);

    /* the search: on 2 devices it lists dp 1 x cp 2 x ep 2 (with the capacity too) */
    static plan_result all[4096];
    for (int cap = 1; cap >= 0; cap--) {
        j.cfg.moe_capacity = cap ? 1.0f : 0;
        int found = plan_search(&j, &c, 2, NULL, all, 4096, NULL), cp_ep = 0;
        assert_true(found > 0 && found <= 4096);
        for (int i = 0; i < found; i++) cp_ep += all[i].l.cp == 2 && all[i].l.ep == 2 && all[i].l.dp == 1;
        assert_true(cp_ep > 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(collectives),         cmocka_unit_test(gemm),           cmocka_unit_test(activations),
        cmocka_unit_test(memory_per_parameter), cmocka_unit_test(gemm_efficiency_fit), cmocka_unit_test(megatron_table1), cmocka_unit_test(megatron_interleaving),
        cmocka_unit_test(megatron_tp_pp),      cmocka_unit_test(trident_cpu_memory), cmocka_unit_test(megatron_table2),
        cmocka_unit_test(placement_links),     cmocka_unit_test(scatter_gather), cmocka_unit_test(dp_hierarchical),
        cmocka_unit_test(overlap_buckets),     cmocka_unit_test(mixture_of_experts),
        cmocka_unit_test(moe_distributed_optimizer), cmocka_unit_test(lora_time), cmocka_unit_test(context_parallel),
        cmocka_unit_test(moe_context_parallel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
