/* The layout planner's model of an iteration: see include/plan/trident/plan.h and docs/plan.md.
 *
 * Time. A layer's forward on a micro-batch of T = mbs * s tokens at tensor-parallel size t is
 * its GEMMs (QKV, the attention core's two batched products, the projection, the MLP's two) at
 * an efficiency that depends on their shapes, plus its memory-bound kernels (norms, bias-dropout-
 * residual, GeLU, and the softmax over the (s, s) scores of each local head) at the device's
 * memory bandwidth, plus the tensor-parallel collectives (two all-reduces of T h elements, or
 * sequence parallelism's all-gather and reduce-scatter of the same volume). Its backward is twice
 * its forward; full recomputation adds one forward per layer, selective the attention core's.
 * The last stage adds the output layer and the cross-entropy. A pipeline of p stages with v
 * chunks each runs m micro-batches in (m + (p - 1) / v) stage-times (1F1B and interleaved
 * 1F1B), plus the stage-to-stage transfers (T h elements each way per micro-batch and chunk, / t
 * under scatter/gather with the receivers' all-gather). Then the data-parallel reduction of the
 * stage's gradients (flat, or hierarchical across nodes on trident-cpu clusters; with
 * --overlap-grad-reduce the buckets closing before the end of the backward hide behind the last
 * micro-batch's backward) and the optimizer step, memory-bound. The communication left exposed is
 * also given per kind of group, as the trainer's metrics file measures it.
 *
 * Memory. Parameters, gradients and optimizer state per parameter as Megatron keeps them (16-bit
 * weights, fp32 gradients, fp32 master weights and Adam moments: 18 bytes, 6 + 12/d with the
 * distributed optimizer over the d = dp x cp ranks, the experts' state over their
 * expert-data-parallel group d / ep instead;
 * fp32 training 16, 8 + 8/d), activations by Korthikanti et al.'s
 * per-layer formulas times the micro-batches in flight on the first stage, the last stage's
 * logits, and what the framework holds besides (mem_reserved_gib). */
#include "trident/plan.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/memory.h"
#include "trident/pipeline.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* ---- clusters ---- */

static const plan_cluster PRESETS[] = {
    /* DGX-2H: 16 V100 (32 GB, 450 W: 125 TFLOP/s fp16, no bf16), NVSwitch (150 GB/s a direction, about
     * 120 reached by NCCL), 8 x 100 Gb/s InfiniBand a node (6.25 GB/s a GPU) */
    {"dgx2h-v100", 16, {15.7e12, 0, 125e12}, 32, 0.9e12, 120e9, 8e-6, 5.0e9, 15e-6, 0.80, 96, 2.0, 0, 0, 0, 0},
    /* DGX A100: 8 A100 80 GB (312 TFLOP/s bf16/fp16, 19.5 fp32), NVLink 3 (300 GB/s a direction,
     * about 240 reached), 8 x 200 Gb/s HDR a node (25 GB/s a GPU, about 21 reached); GEMM efficiency
     * 0.715 fitted to five rows of the Megatron paper's Table 1 at their own layouts, the rest held
     * out (tests/unit/test_plan.c) */
    {"dgx-a100-80gb", 8, {19.5e12, 312e12, 312e12}, 80, 2.0e12, 240e9, 6e-6, 21e9, 12e-6, 0.715, 48, 3.0, 0, 0, 0, 0},
    /* DGX H100: 8 H100 SXM 80 GB (989 TFLOP/s dense bf16/fp16, 67 fp32), NVLink 4 (450 GB/s a
     * direction, about 360 reached), 8 x 400 Gb/s NDR a node (50 GB/s a GPU, about 42 reached) */
    {"dgx-h100", 8, {67e12, 989e12, 989e12}, 80, 3.35e12, 360e9, 5e-6, 42e9, 10e-6, 0.72, 128, 3.0, 0, 0, 0, 0},
};
#define NPRESETS ((int)(sizeof PRESETS / sizeof PRESETS[0]))

int plan_cluster_preset(const char *name, plan_cluster *c)
{
    for (int i = 0; i < NPRESETS; i++)
        if (strcmp(name, PRESETS[i].name) == 0) {
            *c = PRESETS[i];
            return 0;
        }
    return -1;
}

const char *plan_cluster_presets(void) { return "dgx2h-v100, dgx-a100-80gb, dgx-h100"; }

/* ---- the terms ---- */

double plan_allreduce_s(double bytes, int n, double bw, double lat)
{
    if (n <= 1 || bytes <= 0) return 0;
    return 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * lat;
}

double plan_allgather_s(double bytes, int n, double bw, double lat)
{
    if (n <= 1 || bytes <= 0) return 0;
    return (double)(n - 1) / n * bytes / bw + (n - 1) * lat;
}

static double dim_eff(const plan_cluster *c, double d) { return d / (d + c->gemm_half); }

double plan_gemm_s(const plan_cluster *c, int dtype, double M, double N, double K)
{
    double eff = c->gemm_emax * dim_eff(c, M) * dim_eff(c, N) * dim_eff(c, K);
    return 2.0 * M * N * K / (c->peak[dtype] * eff);
}

double plan_layer_act_bytes(const gpt_config *c, int mbs, int tp, int sp, plan_recompute rc)
{
    double s = c->seq, b = mbs, h = c->hidden, a = c->heads, t = tp, sbh = s * b * h;
    if (rc == PLAN_RC_FULL) return sp ? 2.0 * sbh / t : 2.0 * sbh;
    double attn = rc == PLAN_RC_SELECTIVE ? 0.0 : 5.0 * a * s / h;
    if (sp) return sbh / t * (34.0 + attn);
    return sbh * (10.0 + 24.0 / t + attn / t);
}

double plan_inflight(int pp, int vp, int micro)
{
    double m = micro < pp ? micro : pp;
    if (vp > 1) m *= 1.0 + (double)(pp - 1) / ((double)pp * vp);
    return m;
}

/* ---- placement: which link a group runs over ---- */

static int ep_of(const plan_layout *l) { return l->ep > 1 ? l->ep : 1; }
static int cp_of(const plan_layout *l) { return l->cp > 1 ? l->cp : 1; }
/* The gradients' group: dp x cp. */
static int dpcp_of(const plan_layout *l) { return l->dp * cp_of(l); }
/* The experts' gradients' group (expert parallelism carved out of dp x cp): dp x cp / ep. */
static int edp_of(const plan_layout *l) { return dpcp_of(l) / ep_of(l); }
/* Positions of a sample a rank holds: seq / cp. */
static double seq_l(const plan_job *j, const plan_layout *l) { return (double)j->cfg.seq / cp_of(l); }

/* Rank of grid coordinates (tp_rank, cp_rank, dp_rank, pp_rank), Megatron's order tp-cp-dp-pp. */
static int grid_rank(const plan_layout *l, int t, int c, int d, int p)
{
    return t + l->tp * (c + cp_of(l) * (d + l->dp * p));
}

/* The rank of a tp rank's dp x cp rank (cp_rank + cp dp_rank) on pipeline rank p. */
static int dpcp_rank(const plan_layout *l, int t, int dc, int p) { return grid_rank(l, t, dc % cp_of(l), dc / cp_of(l), p); }

/* The g-th group of a kind's k-th member. The experts' grid is carved out of dp x cp as the
 * trainer's (src/comm/parallel_state.c, Megatron-Core's): an ep group is ep consecutive dp x cp
 * ranks, the experts' data-parallel group the ranks of one ep rank (dp x cp rank mod ep). */
static int group_member(const plan_layout *l, plan_group kind, int g, int k)
{
    int cp = cp_of(l), rest = g / l->tp, ep = ep_of(l), edp = edp_of(l);
    if (kind == PLAN_GROUP_TP) return g * l->tp + k; /* consecutive ranks */
    if (kind == PLAN_GROUP_EP) return dpcp_rank(l, g % l->tp, rest % edp * ep + k, rest / edp); /* stride tp */
    if (kind == PLAN_GROUP_EDP) return dpcp_rank(l, g % l->tp, rest % ep + ep * k, rest / ep);  /* stride tp ep */
    if (kind == PLAN_GROUP_DP) return grid_rank(l, g % l->tp, k % cp, k / cp, rest); /* dp x cp: stride tp */
    if (kind == PLAN_GROUP_CP) return grid_rank(l, g % l->tp, k, rest % l->dp, rest / l->dp); /* stride tp */
    return grid_rank(l, g % l->tp, rest % cp, rest / cp, k); /* stride tp cp dp */
}

/* The most nodes one group of a kind spans, and the fewest and the most ranks a group has on a
 * node it spans. */
static void group_shape_walk(const plan_cluster *c, const plan_layout *l, plan_group kind, int *span, int *fewest,
                             int *most)
{
    int size = kind == PLAN_GROUP_TP   ? l->tp
               : kind == PLAN_GROUP_PP ? l->pp
               : kind == PLAN_GROUP_EP ? ep_of(l)
               : kind == PLAN_GROUP_CP ? cp_of(l)
               : kind == PLAN_GROUP_EDP ? edp_of(l)
                                       : dpcp_of(l);
    int n = l->tp * cp_of(l) * l->pp * l->dp, K = c->gpus_per_node > 0 ? c->gpus_per_node : 1;
    *span = 1, *fewest = size, *most = 1;
    for (int g = 0; g < n / size; g++) {
        int nodes = 1, run = 1;
        for (int k = 1; k <= size; k++) { /* members ascend, so a node's members are one run */
            if (k == size || group_member(l, kind, g, k) / K != group_member(l, kind, g, k - 1) / K) {
                *fewest = run < *fewest ? run : *fewest;
                *most = run > *most ? run : *most;
                if (k == size) break;
                nodes++;
                run = 0;
            }
            run++;
        }
        *span = nodes > *span ? nodes : *span;
    }
}

/* The same, remembered: the walk visits every rank, and a search asks it of thousands of layouts
 * that share a few grids (three quarters of unit/test_plan's time went to the walk). */
static void group_shape(const plan_cluster *c, const plan_layout *l, plan_group kind, int *span, int *fewest,
                        int *most)
{
    typedef struct { int key[7], span, fewest, most; } memo;
    static _Thread_local memo seen[256];
    int key[7] = {l->tp, cp_of(l), l->pp, l->dp, ep_of(l), (int)kind, c->gpus_per_node};
    unsigned h = 0;
    for (int i = 0; i < 7; i++) h = h * 0x9e3779b1u + (unsigned)key[i];
    memo *m = &seen[(h ^ h >> 16) & 255];
    if (memcmp(m->key, key, sizeof key) != 0) { /* an empty slot's tp 0 matches no layout */
        group_shape_walk(c, l, kind, &m->span, &m->fewest, &m->most);
        memcpy(m->key, key, sizeof key);
    }
    *span = m->span, *fewest = m->fewest, *most = m->most;
}

int plan_group_link(const plan_cluster *c, const plan_layout *l, plan_group kind, double *bw, double *lat)
{
    int span, fewest, most;
    group_shape(c, l, kind, &span, &fewest, &most);
    if (span == 1) {
        *bw = c->intra_bw, *lat = c->intra_lat;
        return 1;
    }
    /* trident-cpu: the node's one link, k shares of it. Megatron's GPUs: a data- (or expert-) parallel
     * group's rings cross on every rail its k devices of a node own (NCCL's channels, one a NIC);
     * tensor parallelism across nodes and the pipeline's sends keep one device's share */
    int rails = c->trident_cpu || kind == PLAN_GROUP_DP || kind == PLAN_GROUP_EP || kind == PLAN_GROUP_EDP;
    double share = rails ? c->inter_bw * fewest : c->inter_bw;
    *bw = share < c->intra_bw ? share : c->intra_bw;
    *lat = c->inter_lat;
    return span;
}

/* ---- one layout ---- */

typedef struct {
    double fwd, bwd, recompute, tp_comm; /* one layer, one micro-batch: seconds */
    double ep_comm;                      /* a MoE layer's token exchange, forward and backward */
    double cp_flight, cp_exposed;        /* context parallelism's attention exchange (plan_cp_exchange_s) */
} layer_cost;

/* Bytes per element of activations and of the gradients the data-parallel group reduces. */
static double act_bytes(int dtype) { return dtype ? 2.0 : 4.0; }

/* A MoE layer's MLP (moe = 1): the router, each of this rank's E / ep experts on its share of the
 * rows (balanced: ep T k / E, the tokens of the ep group's ranks), the shared expert on every
 * token; the token exchange over the ep group (allgather: the group's tokens gathered and the
 * outputs reduce-scattered, and back; alltoall: the rows of other ranks' experts, (ep - 1) / ep of
 * T k, there and back, twice). A dense layer's: the MLP of --ffn-hidden-size. Returns the GEMMs'
 * seconds; *width: the activation's columns a token (for the elementwise passes). */
static double mlp_time(const plan_job *j, const plan_cluster *c, const plan_layout *l, int moe, double *width,
                       double *ep_comm)
{
    const gpt_config *g = &j->cfg;
    int dt = j->dtype, b = gpt_fc_blocks(g);
    double t = l->tp, T = l->mbs * seq_l(j, l), h = g->hidden, f = g->ffn / t;
    *ep_comm = 0;
    if (!moe) {
        *width = f;
        return plan_gemm_s(c, dt, T, b * f, h) + plan_gemm_s(c, dt, T, h, f);
    }
    int ep = ep_of(l);
    double E = g->num_experts, k = g->moe_topk, F = gpt_moe_ffn(g) / t, S = g->moe_shared_ffn / t;
    double rows = ep * T * k / E; /* an expert's, balanced */
    double sec = plan_gemm_s(c, dt, T, E, h) + E / ep * (plan_gemm_s(c, dt, rows, b * F, h) + plan_gemm_s(c, dt, rows, h, F));
    if (S > 0) sec += plan_gemm_s(c, dt, T, b * S, h) + plan_gemm_s(c, dt, T, h, S);
    *width = k * F + S;
    if (ep > 1) {
        double bw, lat, e = act_bytes(dt);
        plan_group_link(c, l, PLAN_GROUP_EP, &bw, &lat);
        if (l->ep_alltoall) *ep_comm = 4.0 * (T * k * h * e * (ep - 1) / ep / bw + (ep - 1) * lat);
        else *ep_comm = 4.0 * plan_allgather_s(ep * T * h * e, ep, bw, lat);
    }
    return sec;
}

/* LoRA's adapters in a layer, forward (their backward is twice it): each targeted module's
 * A (r, in) and B (out, r) products on T tokens, split over tp as the base (a column-parallel
 * module's B by rows, a row-parallel one's A by columns); in a MoE layer the MLP's modules are
 * each of this rank's E / ep experts' adapters on its (balanced) ep T k / E rows. */
static double lora_time(const plan_job *j, const plan_cluster *c, const plan_layout *l, int moe)
{
    const gpt_config *g = &j->cfg;
    if (!gpt_lora(g)) return 0;
    int dt = j->dtype;
    double t = l->tp, T = l->mbs * seq_l(j, l), h = g->hidden, q = gpt_q_width(g), kv = gpt_kv_width(g);
    double f = g->ffn, r = g->lora_rank;
    const struct {
        double in, out;
        int row; /* row-parallel: the input split */
    } mod[GPT_LORA_NMODULES] = {{h, q, 0}, {h, kv, 0}, {h, kv, 0}, {q, h, 1}, {h, f, 0}, {h, f, 0}, {f, h, 1}};
    double sec = 0, E = g->num_experts, ep = ep_of(l), F = gpt_moe_ffn(g);
    for (int m = 0; m < GPT_LORA_NMODULES; m++) {
        if (!gpt_lora_on(g, m)) continue;
        int expert = moe && m >= GPT_LORA_GATE;
        double mi = expert && m == GPT_LORA_DOWN ? F : mod[m].in, mo = expert && m != GPT_LORA_DOWN ? F : mod[m].out;
        double in = mod[m].row ? mi / t : mi, out = mod[m].row ? mo : mo / t;
        if (expert) { /* each expert on its rows; the shared expert (width S) on every token */
            double rows = ep * T * g->moe_topk / E, S = g->moe_shared_ffn;
            sec += E / ep * (plan_gemm_s(c, dt, rows, r, in) + plan_gemm_s(c, dt, rows, out, r));
            if (S > 0) {
                double si = m == GPT_LORA_DOWN ? S / t : h, so = m == GPT_LORA_DOWN ? h : S / t;
                sec += plan_gemm_s(c, dt, T, r, si) + plan_gemm_s(c, dt, T, so, r);
            }
        } else {
            sec += plan_gemm_s(c, dt, T, r, in) + plan_gemm_s(c, dt, T, out, r);
        }
    }
    return sec;
}

/* Under LoRA, the trained (adapter) parameters of a stage of `layers` layers on one tp rank. */
static double stage_trained(const gpt_config *g, int tp, int layers, int first, int last)
{
    return (double)gpt_stage_trained_numel(g, tp, 1, 0, layers, first, last);
}

static layer_cost layer_time(const plan_job *j, const plan_cluster *c, const plan_layout *l, int moe)
{
    const gpt_config *g = &j->cfg;
    int dt = j->dtype;
    int C = cp_of(l);
    double t = l->tp, T = l->mbs * seq_l(j, l), s = g->seq, sc = seq_l(j, l), h = g->hidden, d = gpt_head_dim(g);
    double q = gpt_q_width(g) / t, kv = gpt_kv_width(g) / t, f, heads = g->heads / t, ep_comm;
    double gemms = plan_gemm_s(c, dt, T, q + 2 * kv, h) + plan_gemm_s(c, dt, T, h, q) +
                   mlp_time(j, c, l, moe, &f, &ep_comm);
    /* the attention core: a rank's s / C queries against all s keys (causal, load-balanced: a C-th
     * of the work); a2a: a C-th of the heads on the whole sequence; p2p and all_gather: C blocks of
     * (s / C, s / C), one a cp rank's keys */
    double core = C > 1 && l->cp_comm == PLAN_CP_A2A
                      ? l->mbs * heads / C * (plan_gemm_s(c, dt, s, s, d) + plan_gemm_s(c, dt, s, d, s))
                      : l->mbs * heads * C * (plan_gemm_s(c, dt, sc, sc, d) + plan_gemm_s(c, dt, sc, d, sc));
    double e = act_bytes(dt), spd = l->sp ? t : 1;
    /* the softmax's scores: scale and mask, softmax, dropout: about four passes over (s, s) a head (a
     * C-th of them a cp rank) */
    double softmax = l->mbs * heads * s * s * e * 4.0 / c->hbm_bw / C;
    /* two norms, two bias-dropout-residuals (the residual stream's tokens, / t with sequence
     * parallelism), and the MLP's bias and activation on f/t columns */
    double elementwise = (T * h * e * 12.0 / spd + T * f * e * 4.0) / c->hbm_bw;
    if (moe) elementwise += T * g->moe_topk * h * e * 4.0 / c->hbm_bw; /* the rows permuted and combined */
    layer_cost r;
    r.ep_comm = ep_comm;
    double adapters = lora_time(j, c, l, moe);
    r.fwd = gemms + core + softmax + elementwise + adapters;
    /* LoRA: the frozen weights' backward is their input's gradient alone (one GEMM each, not two);
     * the core's, the elementwise passes' and the adapters' backward are twice their forward */
    r.bwd = gpt_lora(g) ? gemms + 2.0 * (core + softmax + elementwise + adapters) : 2.0 * r.fwd;
    r.recompute = l->recompute == PLAN_RC_FULL ? r.fwd : l->recompute == PLAN_RC_SELECTIVE ? core + softmax : 0;
    double bw, lat;
    plan_group_link(c, l, PLAN_GROUP_TP, &bw, &lat);
    double one = plan_allreduce_s(T * h * e, l->tp, bw, lat); /* = all-gather + reduce-scatter's volume */
    r.tp_comm = one * (4.0 + (l->recompute == PLAN_RC_FULL ? 2.0 : 0.0));
    r.cp_flight = r.cp_exposed = 0;
    if (C > 1) {
        /* the rows a rank's exchange moves: Megatron sends k and v; trident's p2p and all_gather the
         * fused q|k|v rows (k|v with grouped queries), its a2a q, k, v and the output */
        double kvw = 2 * kv;
        if (c->trident_cpu && l->cp_comm != PLAN_CP_A2A && !gpt_gqa(g)) kvw = 3 * q;
        plan_group_link(c, l, PLAN_GROUP_CP, &bw, &lat);
        plan_cp_exchange_s(l->cp_comm, C, T * kvw * e, T * 2 * q * e, core / C, bw, lat, l->recompute != PLAN_RC_NONE,
                           c->trident_cpu, &r.cp_flight, &r.cp_exposed);
        if (moe) { /* the router's tokens per expert (per sample with seq_aux_loss), int32, all-reduced over
                    * cp for the load-balancing loss; with an expert capacity each token's k choices (expert
                    * int32, weight fp32) all-gathered over cp, the drops decided over the micro-batch as one
                    * rank's: every forward, full recomputation's too; blocking */
            double counts = (g->moe_seq_aux ? l->mbs : 1) * (double)g->num_experts * 4.0;
            double stats = plan_allreduce_s(counts, C, bw, lat);
            if (g->moe_capacity > 0) stats += 2.0 * plan_allgather_s(C * T * g->moe_topk * 4.0, C, bw, lat);
            stats *= l->recompute == PLAN_RC_FULL ? 2.0 : 1.0;
            r.cp_flight += stats, r.cp_exposed += stats;
        }
    }
    return r;
}

void plan_cp_exchange_s(plan_cp_comm type, int cp, double kv_bytes, double qo_bytes, double block_s, double bw,
                        double lat, int redo, int twice_bwd, double *flight, double *exposed)
{
    *flight = *exposed = 0;
    if (cp <= 1) return;
    double fwd, fwd_x, bwd, bwd_x;
    if (type == PLAN_CP_P2P) {
        double step = kv_bytes / bw + lat, step2 = 2.0 * kv_bytes / bw + lat; /* backward: k, v and dk, dv */
        fwd = (cp - 1) * step, fwd_x = (cp - 1) * fmax(0.0, step - block_s);
        bwd = (cp - 1) * step2 + step, bwd_x = (cp - 1) * fmax(0.0, step2 - 2.0 * block_s) + step; /* + the hop home */
    } else if (type == PLAN_CP_ALL_GATHER) {
        double ag = plan_allgather_s(cp * kv_bytes, cp, bw, lat); /* = the gradients' reduce-scatter */
        fwd = fwd_x = ag;
        bwd = bwd_x = 2.0 * ag;
    } else { /* a2a: four all-to-alls, (cp - 1) / cp of the rows each leaving */
        fwd = fwd_x = (kv_bytes + qo_bytes) * (cp - 1) / cp / bw + 4.0 * (cp - 1) * lat;
        bwd = bwd_x = (twice_bwd ? 2.0 : 1.0) * fwd;
    }
    *flight = fwd * (1 + redo) + bwd;
    *exposed = fwd_x * (1 + redo) + bwd_x;
}

/* The share of the model's layers that are MoE (--moe-layer-freq; 0 dense). */
static double moe_share(const gpt_config *g)
{
    return gpt_moe(g) ? (double)gpt_moe_layers(g, 0, g->num_layers) / g->num_layers : 0;
}

/* A MoE layer's experts' parameters on one rank (E / ep of them) and the rest of its MLP (router,
 * shared expert), against a dense layer's MLP. */
static double experts_params(const gpt_config *g, int tp, int ep)
{
    double h = g->hidden, F = gpt_moe_ffn(g), b = gpt_fc_blocks(g);
    double one = (b * F * h + F * h) / tp + (gpt_has_bias(g) ? b * F / tp + h : 0);
    return g->num_experts / (double)ep * one;
}

static double moe_rest_params(const gpt_config *g, int tp)
{
    double h = g->hidden, S = g->moe_shared_ffn, b = gpt_fc_blocks(g);
    double n = g->num_experts * h + (S > 0 ? (b * S * h + S * h) / tp + (gpt_has_bias(g) ? b * S / tp + h : 0) : 0);
    return n + (g->moe_shared_gate ? h : 0);
}

/* Parameters of a stage holding `layers` layers (and the embedding on the first, the output
 * layer's copy on the last when the pipeline has more than one stage), its MoE layers at the
 * model's share; *experts: of which the experts' (NULL: not asked). */
static double stage_params_ep(const gpt_config *g, int tp, int ep, int layers, int first, int last, int pp,
                              double *experts)
{
    double h = g->hidden, t = tp, V = g->padded_vocab;
    double qkv = gpt_q_width(g) + 2.0 * gpt_kv_width(g), q = gpt_q_width(g), f = g->ffn * (double)gpt_fc_blocks(g);
    double norm = g->norm == GPT_NORM_RMSNORM ? h : 2.0 * h; /* a norm's weight (and LayerNorm's bias) */
    double attn = (qkv * h + q * h) / t + 2.0 * norm + (gpt_has_bias(g) ? qkv / t + h : 0);
    double dense = (f * h + g->ffn * h) / t + (gpt_has_bias(g) ? f / t + h : 0);
    double share = moe_share(g), x = layers * share * experts_params(g, tp, ep);
    double n = layers * (attn + (1 - share) * dense + share * moe_rest_params(g, tp)) + x;
    if (experts) *experts = x;
    if (first) n += V * h / t + (g->pos == GPT_POS_LEARNED ? (double)g->max_pos * h : 0);
    if (last && (pp > 1 || g->untied)) n += V * h / t;
    if (last) n += norm;
    if (first) n += (double)gpt_tokentypes(g) * h; /* the token-type embedding */
    if (last && gpt_masked_lm(g)) /* the masked-LM head's transform and bias, the pooler and binary head */
        n += h * h + 3.0 * h + V / t + (g->binary_head ? h * h + 3.0 * h + 2 : 0);
    return n;
}


/* The trainer's PS_CP_* of a comm type. */
static int cp_comm_ps(plan_cp_comm t)
{
    return t == PLAN_CP_A2A ? PS_CP_A2A : t == PLAN_CP_ALL_GATHER ? PS_CP_ALL_GATHER : PS_CP_P2P;
}

/* trident's own trainer on CPUs: its memory model (src/train/memory.c, the one the trainer
 * prints and checks itself against), for the first and the last pipeline rank, the larger. */
static void trident_memory(const plan_job *j, const plan_cluster *c, const plan_layout *l, int m, plan_result *r)
{
    pp_schedule sched = l->pp == 1 ? PP_SCHEDULE_NONE : l->vp > 1 ? PP_SCHEDULE_INTERLEAVED : PP_SCHEDULE_1F1B;
    int per = j->cfg.num_layers / (l->pp * l->vp);
    mem_prediction best = {0};
    for (int rank = 0; rank < l->pp; rank += l->pp > 1 ? l->pp - 1 : 1) {
        mem_layout ml;
        memset(&ml, 0, sizeof ml);
        ml.cfg = j->cfg;
        ml.tp = l->tp, ml.dp = l->dp, ml.ep = ep_of(l), ml.mbs = l->mbs, ml.nchunks = l->vp;
        ml.cp = cp_of(l), ml.cp_comm = cp_comm_ps(l->cp_comm);
        ml.distributed_optimizer = l->distopt && dpcp_of(l) > 1;
        ml.sequence_parallel = l->sp && l->tp > 1;
        ml.recompute = l->recompute == PLAN_RC_FULL ? MEM_RECOMPUTE_FULL
                       : l->recompute == PLAN_RC_SELECTIVE ? MEM_RECOMPUTE_SELECTIVE : MEM_RECOMPUTE_NONE;
        ml.recompute_num_layers = 1;
        ml.bucket_elems = 40e6; /* --ddp-bucket-size's default */
        int slots = pp_slots_needed(sched, l->pp, rank, l->vp, m);
        for (int k = 0; k < l->vp; k++) {
            int vs = k * l->pp + rank;
            ml.chunk[k] = (mem_chunk){per, vs == 0, vs == l->pp * l->vp - 1, slots, vs * per};
        }
        mem_prediction p;
        mem_predict(&ml, &p);
        if (p.total > best.total) best = p;
    }
    r->m_params = best.params;
    r->m_grads = best.grads;
    r->m_optimizer = best.optimizer;
    r->m_acts = best.acts;
    r->m_other = best.workspace + best.comm + best.lowp + c->mem_reserved_gib * GIB;
    r->m_total = best.total + c->mem_reserved_gib * GIB;
}

/* Megatron's training on GPUs: the first stage (activations of the micro-batches in flight) or
 * the last (the logits), the larger. A parameter holds its 16-bit copy (fp32 in fp32 training), its
 * fp32 gradient and the optimizer's state (fp32 master weight and Adam's moments, 12 bytes; fp32
 * training, the moments, 8), the state sharded by the distributed optimizer: the dense parameters'
 * over dp x cp, the experts' over their expert-data-parallel group, dp x cp / ep. */
static void megatron_memory(const plan_job *j, const plan_cluster *c, const plan_layout *l, int m, plan_result *r)
{
    const gpt_config *g = &j->cfg;
    int Ls = g->num_layers / l->pp;
    int C = cp_of(l);
    double e = act_bytes(j->dtype), T = l->mbs * seq_l(j, l), V = g->padded_vocab / (double)l->tp;
    double state = j->dtype ? 12.0 : 8.0, edp = (double)edp_of(l);
    double dense_div = l->distopt ? dpcp_of(l) : 1, expert_div = l->distopt ? edp : 1;
    /* context parallelism: a layer's activations of s / C positions, the scores' term of its s / C
     * queries against all s keys (C times the formula's at s / C) */
    gpt_config gc = *g;
    gc.seq = g->seq / C;
    double scores = plan_layer_act_bytes(&gc, l->mbs, l->tp, l->sp, PLAN_RC_NONE) -
                    plan_layer_act_bytes(&gc, l->mbs, l->tp, l->sp, PLAN_RC_SELECTIVE);
    double acts_layer = (plan_layer_act_bytes(&gc, l->mbs, l->tp, l->sp, l->recompute) +
                         (l->recompute == PLAN_RC_NONE ? (C - 1) * scores : 0)) * (j->dtype ? 1.0 : 2.0);
    double work = l->recompute == PLAN_RC_FULL ? plan_layer_act_bytes(&gc, l->mbs, l->tp, l->sp, PLAN_RC_NONE) + (C - 1) * scores : 0;
    if (C > 1) { /* the exchange's buffers, as the trainer carves them (in its fp32; here the activations' bytes) */
        mem_layout ml;
        memset(&ml, 0, sizeof ml);
        ml.cfg = *g, ml.tp = l->tp, ml.mbs = l->mbs, ml.cp = C, ml.cp_comm = cp_comm_ps(l->cp_comm);
        ml.sequence_parallel = l->sp && l->tp > 1;
        work += mem_cp_exchange_bytes(&ml) * e / 4.0;
    }
    double logits = T * V * (4.0 + e); /* the fp32 softmax and the 16-bit logits of one micro-batch */
    double params[2], opt[2], acts[2];
    for (int k = 0; k < 2; k++) { /* 0: the first stage, 1: the last */
        int is_first = k == 0, is_last = k == 1 || l->pp == 1;
        double X;
        params[k] = stage_params_ep(g, l->tp, ep_of(l), Ls, is_first, is_last, l->pp, &X);
        opt[k] = state * ((params[k] - X) / dense_div + X / expert_div);
        acts[k] = Ls * acts_layer * (is_first ? plan_inflight(l->pp, l->vp, m) : 1.0) + work + (is_last ? logits : 0);
    }
    double grads[2] = {params[0], params[1]}; /* the parameters with a gradient */
    for (int k = 0; k < 2 && gpt_lora(g); k++) { /* LoRA: the adapters' alone; the frozen base 16-bit only */
        grads[k] = stage_trained(g, l->tp, Ls, k == 0, k == 1 || l->pp == 1);
        opt[k] = state * grads[k] / dense_div;
    }
    int w = params[0] * e + grads[0] * 4.0 + opt[0] + acts[0] >= params[1] * e + grads[1] * 4.0 + opt[1] + acts[1] ? 0 : 1;
    r->m_params = params[w] * e;
    r->m_grads = grads[w] * 4.0; /* fp32 */
    r->m_optimizer = opt[w];
    r->m_acts = acts[w];
    r->m_other = c->mem_reserved_gib * GIB;
    r->m_total = r->m_params + r->m_grads + r->m_optimizer + r->m_acts + r->m_other;
}

/* Pipeline transfers of the busiest stage (r->t_p2p and its exposed parts): each boundary carries
 * T h elements a micro-batch and chunk forward and back. Megatron's scatter-gather sends 1/t of
 * them across nodes. trident's pipeline (src/parallel/pipeline.c) sends 1/t from each tp rank
 * when tp > 1 (the receivers all-gather the whole over their tp group's link: scatter/gather, on
 * unless the layout turns it off) or under sequence parallelism (each already holds s/t
 * positions), else the whole from every tp rank. With tied embeddings the word embedding's
 * gradient (V h / t) is summed between the first and the last stage. */
static void pipeline_transfers(const plan_job *j, const plan_cluster *c, const plan_layout *l, int m, double gbytes,
                               plan_result *r)
{
    const gpt_config *g = &j->cfg;
    double T = l->mbs * seq_l(j, l), V = g->padded_vocab / (double)l->tp, h = g->hidden, e = act_bytes(j->dtype);
    double bw, lat, tbw, tlat;
    int cross = plan_group_link(c, l, PLAN_GROUP_PP, &bw, &lat) > 1;
    plan_group_link(c, l, PLAN_GROUP_TP, &tbw, &tlat);
    int sg = l->tp > 1 && !l->no_scatter_gather && !l->sp; /* trident: the receivers all-gather */
    int split = c->trident_cpu ? l->tp > 1 && (sg || l->sp) : cross && !l->no_scatter_gather;
    double bytes = T * h * e / (split ? l->tp : 1), transfers = 2.0 * m * l->vp;
    r->x_pp = transfers * (bytes / bw + lat);
    double gather = c->trident_cpu && sg ? transfers * plan_allgather_s(T * h * e, l->tp, tbw, tlat) : 0;
    r->x_tp += gather;
    if (!g->untied) r->x_embd = plan_allreduce_s(V * h * gbytes, 2, bw, lat);
    r->t_p2p = r->x_pp + gather + r->x_embd;
}

/* What a stage's data-parallel communication costs and leaves exposed, in seconds. */
typedef struct {
    double reduce, gather; /* exposed: the gradients' reduction, the distributed optimizer's all-gather */
    int hier;              /* priced hierarchical */
} dp_exposed;

/* The dp collectives on S bytes of gradients and G bytes of parameters (G: the distributed
 * optimizer's all-gather; its reduction is then a reduce-scatter), flat: one ring over the dp
 * group's link. */
static void dp_flat(const plan_cluster *c, const plan_layout *l, double S, double G, double *red, double *gat)
{
    double bw, lat;
    plan_group_link(c, l, PLAN_GROUP_DP, &bw, &lat);
    *red = l->distopt ? plan_allgather_s(S, dpcp_of(l), bw, lat) : plan_allreduce_s(S, dpcp_of(l), bw, lat);
    *gat = l->distopt ? plan_allgather_s(G, dpcp_of(l), bw, lat) : 0;
}

/* Hierarchical (src/comm/hier.c), k ranks of the group on each of N nodes: a reduce-scatter over
 * the k inside the node, then across the nodes per rail (local rank i of every node, the node's k
 * rails at once: each a rank's share of the link) an all-reduce of S / k over N (a reduce-scatter
 * with the distributed optimizer), then an all-gather over the k inside (none with the distributed
 * optimizer, whose parameter all-gather is a rail's of G / k, then the node's of G). */
static void dp_hier(const plan_cluster *c, const plan_layout *l, int N, int k, double S, double G, double *red,
                    double *gat)
{
    double rail = c->inter_bw < c->intra_bw ? c->inter_bw : c->intra_bw;
    double in_rs = plan_allgather_s(S, k, c->intra_bw, c->intra_lat);
    if (l->distopt) {
        *red = in_rs + plan_allgather_s(S / k, N, rail, c->inter_lat);
        *gat = plan_allgather_s(G / k, N, rail, c->inter_lat) + plan_allgather_s(G, k, c->intra_bw, c->intra_lat);
    } else {
        *red = in_rs + plan_allreduce_s(S / k, N, rail, c->inter_lat) + plan_allgather_s(S, k, c->intra_bw, c->intra_lat);
        *gat = 0;
    }
}

/* A stage's dp communication and what of it stays exposed. The buckets (--ddp-bucket-size, from
 * the start of the gradient buffer, which holds the gradients in backward order) close as the
 * backward produces them, but the word embedding and positions of the first stage close only at
 * its end (the tied embedding with the output layer's gradient; under the distributed optimizer
 * the copies are summed first, so the last stage's is held to the end too). With
 * --overlap-grad-reduce the buckets that close before the end reduce behind the last micro-batch's
 * remaining backward, at most `bwd` of it; the rest is exposed. With --overlap-param-gather the
 * all-gather of the same buckets hides behind the next forward's first micro-batch (`fwd`): the
 * embedding's, read first, does not. */
static dp_exposed dp_stage(const plan_job *j, const plan_cluster *c, const plan_layout *l, int first, int last,
                           double bwd, double fwd)
{
    const gpt_config *g = &j->cfg;
    int Ls = g->num_layers / l->pp;
    double X, P = stage_params_ep(g, l->tp, ep_of(l), Ls, first, last, l->pp, &X), e = act_bytes(j->dtype);
    if (gpt_lora(g)) P = stage_trained(g, l->tp, Ls, first, last), X = 0; /* LoRA: the adapters' gradients alone */
    double gb = j->dtype == 2 ? 2.0 : 4.0, S = (P - X) * gb, G = (P - X) * e, red, gat;
    dp_exposed x = {0, 0, 0};
    dp_flat(c, l, S, G, &red, &gat);
    double xred = 0, xgat = 0; /* the experts' over the expert-data-parallel group, dp x cp / ep (flat) */
    if (X > 0 && edp_of(l) > 1) {
        double bw, lat;
        int edp = edp_of(l);
        plan_group_link(c, l, PLAN_GROUP_EDP, &bw, &lat);
        xred = l->distopt ? plan_allgather_s(X * gb, edp, bw, lat) : plan_allreduce_s(X * gb, edp, bw, lat);
        xgat = l->distopt ? plan_allgather_s(X * e, edp, bw, lat) : 0;
    }
    int span, fewest, most;
    group_shape(c, l, PLAN_GROUP_DP, &span, &fewest, &most);
    if (c->trident_cpu && l->dp_collectives != PLAN_DP_FLAT && span > 1 && fewest == most && fewest > 1) {
        double hred, hgat;
        dp_hier(c, l, span, fewest, S, G, &hred, &hgat);
        if (l->dp_collectives == PLAN_DP_HIER || hred + hgat < red + gat) red = hred, gat = hgat, x.hier = 1;
    }
    red += xred, gat += xgat;
    double V = g->padded_vocab / (double)l->tp, h = g->hidden, late = 0;
    if (gpt_lora(g)) late = 0; /* the embeddings frozen: no late gradient */
    else if (first) late = V * h + (g->pos == GPT_POS_LEARNED ? (double)g->max_pos * h : 0) + gpt_tokentypes(g) * h;
    else if (!g->untied && l->distopt) late = V * h;
    double B = l->bucket_elems > 0 ? l->bucket_elems : 40e6;
    double early = B * floor((P - late) / B) / P; /* the fraction in buckets closing before the end */
    double hid = l->overlap_grad ? fmin(red * early, bwd) : 0;
    double hidg = l->distopt && l->overlap_param ? fmin(gat * early, fwd) : 0;
    x.reduce = red - hid, x.gather = gat - hidg;
    return x;
}

int plan_evaluate(const plan_job *j, const plan_cluster *c, const plan_layout *l, plan_result *r, char *err,
                  size_t errlen)
{
    const gpt_config *g = &j->cfg;
    memset(r, 0, sizeof *r);
    r->l = *l;
#define BAD(...)                                                                         \
    do {                                                                                 \
        snprintf(err, errlen, __VA_ARGS__);                                              \
        return -1;                                                                       \
    } while (0)
    if (c->peak[j->dtype] <= 0) BAD("cluster %s has no peak for this dtype", c->name);
    if (g->heads % l->tp || g->ffn % l->tp || gpt_groups(g) % l->tp)
        BAD("--tensor-model-parallel-size %d does not divide the heads (%d), query groups or FFN size", l->tp,
            g->heads);
    if (g->num_layers % (l->pp * l->vp))
        BAD("--num-layers %d is not divisible by pipeline %d x virtual stages %d", g->num_layers, l->pp, l->vp);
    if (j->gbs % ((int64_t)l->mbs * l->dp))
        BAD("--global-batch-size %lld is not divisible by --micro-batch-size %d x data-parallel %d",
            (long long)j->gbs, l->mbs, l->dp);
    int m = (int)(j->gbs / ((int64_t)l->mbs * l->dp));
    if (l->vp > 1 && m % l->pp) BAD("the interleaved schedule needs the micro-batches (%d) divisible by %d", m, l->pp);
    if (l->sp && l->tp > 1 && g->seq % l->tp) BAD("--seq-length is not divisible by the tensor-parallel size");
    int C = cp_of(l);
    if (C > 1) {
        if (g->seq % (2 * C))
            BAD("--seq-length %d is not divisible by 2 x --context-parallel-size %d (each sequence is cut into %d "
                "equal chunks)", g->seq, C, 2 * C);
        if (l->cp_comm == PLAN_CP_A2A && ((g->heads / l->tp) % C || (gpt_groups(g) / l->tp) % C))
            BAD("--cp-comm-type a2a splits each tensor-parallel rank's %d attention heads and %d key/value groups "
                "over --context-parallel-size %d ranks: give sizes that divide them", g->heads / l->tp,
                gpt_groups(g) / l->tp, C);
        if (l->sp && l->tp > 1 && (g->seq / C) % l->tp)
            BAD("--seq-length / --context-parallel-size is not divisible by the tensor-parallel size");
    }
    r->micro = m;
    int n = l->tp * C * l->pp * l->dp, Ls = g->num_layers / l->pp;
    if (c->nodes > 0 && n > c->nodes * c->gpus_per_node)
        BAD("the layout needs %d devices; cluster %s has %d (%d node%s of %d)", n, c->name, c->nodes * c->gpus_per_node,
            c->nodes, c->nodes == 1 ? "" : "s", c->gpus_per_node);

    int ep = ep_of(l);
    if (gpt_moe(g)) {
        if (g->num_experts % ep || dpcp_of(l) % ep)
            BAD("--expert-model-parallel-size %d must divide --num-experts %d and the data-parallel x "
                "context-parallel size %d (expert parallelism is carved out of data x context parallelism)", ep,
                g->num_experts, dpcp_of(l));
    } else if (ep > 1) {
        BAD("--expert-model-parallel-size needs --num-experts");
    }
    /* the pipeline: the busiest stage (the last, with the output layer) sets the pace; a layer is
     * the model's mix of dense and MoE layers (--moe-layer-freq) */
    layer_cost lc = layer_time(j, c, l, 0);
    double share = moe_share(g);
    if (share > 0) {
        layer_cost lm = layer_time(j, c, l, 1);
        lc.fwd += share * (lm.fwd - lc.fwd), lc.bwd += share * (lm.bwd - lc.bwd);
        lc.recompute += share * (lm.recompute - lc.recompute), lc.tp_comm += share * (lm.tp_comm - lc.tp_comm);
        lc.ep_comm = share * lm.ep_comm;
        lc.cp_flight += share * (lm.cp_flight - lc.cp_flight), lc.cp_exposed += share * (lm.cp_exposed - lc.cp_exposed);
    }
    double T = l->mbs * seq_l(j, l), V = g->padded_vocab / (double)l->tp, h = g->hidden;
    double head_fwd = plan_gemm_s(c, j->dtype, T, V, h) + T * V * 4.0 * 3.0 / c->hbm_bw; /* logits, fp32 softmax */
    if (gpt_head_transform(g)) /* the head's transform (dense h -> h, replicated; a pooler is B rows) */
        head_fwd += plan_gemm_s(c, j->dtype, T / (l->sp ? l->tp : 1), h, h);
    double head = (gpt_lora(g) ? 2.0 : 3.0) * head_fwd; /* LoRA: the frozen output layer's input gradient only */
    double per_micro = Ls * (lc.fwd + lc.bwd + lc.recompute + lc.tp_comm + lc.ep_comm + lc.cp_exposed) + head;
    r->t_compute = m * (Ls * (lc.fwd + lc.bwd + lc.recompute) + head);
    r->t_recompute = m * Ls * lc.recompute;
    r->t_tp = m * Ls * lc.tp_comm;
    r->x_tp = r->t_tp;
    r->t_ep = m * Ls * lc.ep_comm;
    r->t_cp = m * Ls * lc.cp_flight;
    r->x_cp = m * Ls * lc.cp_exposed;
    /* fill and drain: a micro-batch's forward through the p - 1 stages before the last and its
     * backward back through them, stages of layers only (the last, with the output layer, is the
     * one the steady state waits on) */
    r->t_bubble = (double)(l->pp - 1) / l->vp * (per_micro - head);
    double gbytes = j->dtype == 2 ? 2.0 : 4.0; /* fp16 grads reduced in fp16; bf16 and fp32 in fp32 */
    if (l->pp > 1) pipeline_transfers(j, c, l, m, gbytes, r);
    /* data parallelism: the stage's gradients, reduced (or reduce-scattered and all-gathered) */
    double X, P = stage_params_ep(g, l->tp, ep, Ls, l->pp == 1, 1, l->pp, &X);
    if (dpcp_of(l) > 1) {
        /* the hide windows: the last micro-batch's backward, the first one's forward, of a stage */
        double bwd = Ls * (lc.bwd + lc.recompute), fwd = Ls * lc.fwd;
        double one = l->pp == 1; /* a single stage holds the output layer too */
        double hb = head - head_fwd; /* the output layer's backward */
        dp_exposed x = dp_stage(j, c, l, 1, l->pp == 1, bwd + one * hb, fwd + one * head_fwd);
        if (l->pp > 1) { /* the last stage too, with the output layer; the slower counts */
            dp_exposed y = dp_stage(j, c, l, 0, 1, bwd + hb, fwd + head_fwd);
            if (y.reduce + y.gather > x.reduce + x.gather) x = y;
        }
        r->t_dp = x.reduce;
        r->t_optimizer += x.gather;
        r->x_dp = x.reduce + x.gather;
        r->dp_hier = x.hier;
    }
    /* Adam: read the grads, master weights and moments, write them and the 16-bit copy */
    if (gpt_lora(g)) P = stage_trained(g, l->tp, Ls, l->pp == 1, 1), X = 0; /* LoRA: Adam steps the adapters */
    double shard = l->distopt ? (P - X) / dpcp_of(l) + X / edp_of(l) : P;
    r->t_optimizer += shard * (j->dtype ? 30.0 : 28.0) / c->hbm_bw;
    r->iter_s = r->t_compute + r->t_tp + r->t_ep + r->x_cp + r->t_bubble + r->t_p2p + r->t_dp + r->t_optimizer;
    r->flops = gpt_flops_per_iteration(g, j->gbs, l->recompute == PLAN_RC_FULL);
    r->tflops_per_gpu = r->flops / r->iter_s / n / 1e12;
    r->mfu = r->tflops_per_gpu * 1e12 / c->peak[j->dtype];

    if (c->trident_cpu) trident_memory(j, c, l, m, r);
    else megatron_memory(j, c, l, m, r);
    r->fits = r->m_total <= c->mem_gib * GIB;
    return 0;
#undef BAD
}

/* ---- the search ---- */

static int by_time(const void *a, const void *b)
{
    const plan_result *x = a, *y = b;
    return x->iter_s < y->iter_s ? -1 : x->iter_s > y->iter_s;
}

int plan_search(const plan_job *j, const plan_cluster *c, int n, const plan_layout *opts, plan_result *out, int cap,
                plan_search_why *why)
{
    const gpt_config *g = &j->cfg;
    int found = 0, room = 0;
    plan_result *all = NULL;
    plan_search_why w;
    memset(&w, 0, sizeof w);
    plan_cp_comm cpc = opts ? opts->cp_comm : PLAN_CP_P2P;
    for (int tp = 1; tp <= c->gpus_per_node && tp <= n; tp *= 2)
        for (int cp = 1; tp * cp <= n; cp++) {
            /* context parallelism: sizes dividing the devices that cut each sequence into 2 cp equal
             * chunks (and a2a: the heads and groups of a tp rank) */
            if (n % (tp * cp) || g->seq % (2 * cp)) continue;
            if (cp > 1 && cpc == PLAN_CP_A2A && ((g->heads / tp) % cp || (gpt_groups(g) / tp) % cp)) continue;
        for (int pp = 1; pp <= g->num_layers && tp * cp * pp <= n; pp++) {
            if (n % (tp * cp * pp) || g->num_layers % pp) continue;
            int dp = n / (tp * cp * pp);
            if (j->gbs % dp) {
                if (w.batch_refused++ == 0 || dp < w.batch_dp) w.batch_dp = dp;
                continue;
            }
            int64_t per = j->gbs / dp;
            for (int mbs = 1; mbs <= per && mbs <= (cp > 1 ? 1 : 16); mbs++) { /* cp: long sequences, one a micro-batch */
                if (per % mbs) continue;
                for (int vp = 1; vp <= (pp > 1 ? g->num_layers / pp : 1); vp++) {
                    if ((g->num_layers / pp) % vp) continue;
                    if (vp > 1 && vp != 2 && vp != 3 && vp != 4 && vp != 6 && vp != 8) continue;
                    for (int rc = 0; rc < 3; rc++)
                        for (int sp = 0; sp <= (tp > 1); sp++)
                            for (int dop = 0; dop <= (dp * cp > 1); dop++)
                            for (int ep = 1; ep <= (gpt_moe(g) ? dp * cp : 1); ep *= 2) { /* experts: powers of 2 of dp x cp */
                                if (gpt_moe(g) && ((dp * cp) % ep || g->num_experts % ep)) continue;
                                plan_layout l = {tp, pp, dp, vp, mbs, (plan_recompute)rc, sp, dop, dp * cp > 1, 0, PLAN_DP_AUTO, 0, 0, ep, 0, cp, cpc};
                                if (opts) {
                                    l.no_scatter_gather = opts->no_scatter_gather;
                                    l.dp_collectives = opts->dp_collectives;
                                    l.overlap_param = opts->overlap_param && dop;
                                    l.bucket_elems = opts->bucket_elems;
                                    l.ep_alltoall = opts->ep_alltoall;
                                }
                                plan_result r;
                                char err[256];
                                if (plan_evaluate(j, c, &l, &r, err, sizeof err)) {
                                    if (!w.refused[0]) snprintf(w.refused, sizeof w.refused, "%s", err);
                                    continue;
                                }
                                if (w.priced++ == 0 || r.m_total < w.least_bytes) w.least_bytes = r.m_total;
                                if (!r.fits) continue;
                                if (found == room) {
                                    room = room ? 2 * room : 256;
                                    all = realloc(all, (size_t)room * sizeof *all);
                                    if (!all) abort();
                                }
                                all[found++] = r;
                            }
                }
            }
        }
        }
    if (why) *why = w;
    if (found) qsort(all, (size_t)found, sizeof *all, by_time);
    for (int i = 0; i < found && i < cap; i++) out[i] = all[i];
    free(all);
    return found;
}

void plan_layout_flags(const plan_layout *l, int num_layers, char *out, size_t len)
{
    char vp[64] = "", rc[96] = "", more[256] = "";
    if (l->vp > 1) snprintf(vp, sizeof vp, " --num-layers-per-virtual-pipeline-stage %d", num_layers / (l->pp * l->vp));
    if (l->recompute == PLAN_RC_FULL)
        snprintf(rc, sizeof rc, " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1");
    else if (l->recompute == PLAN_RC_SELECTIVE)
        snprintf(rc, sizeof rc, " --recompute-granularity selective");
    snprintf(more, sizeof more, "%s%s%s", l->distopt && l->overlap_param ? " --overlap-param-gather" : "",
             l->no_scatter_gather && l->tp > 1 && l->pp > 1 ? " --no-scatter-gather-tensors-in-pipeline" : "",
             l->dp_collectives == PLAN_DP_FLAT ? " --dp-collectives flat"
             : l->dp_collectives == PLAN_DP_HIER ? " --dp-collectives hierarchical" : "");
    if (l->bucket_elems > 0) {
        size_t used = strlen(more);
        snprintf(more + used, sizeof more - used, " --ddp-bucket-size %.0f", l->bucket_elems);
    }
    if (cp_of(l) > 1) {
        size_t used = strlen(more);
        snprintf(more + used, sizeof more - used, " --context-parallel-size %d --cp-comm-type %s", cp_of(l),
                 l->cp_comm == PLAN_CP_A2A ? "a2a" : l->cp_comm == PLAN_CP_ALL_GATHER ? "all_gather" : "p2p");
    }
    if (ep_of(l) > 1) {
        size_t used = strlen(more);
        snprintf(more + used, sizeof more - used, " --expert-model-parallel-size %d%s", ep_of(l),
                 l->ep_alltoall ? " --moe-token-dispatcher-type alltoall" : "");
    }
    snprintf(out, len, "--tensor-model-parallel-size %d --pipeline-model-parallel-size %d --micro-batch-size %d%s%s%s%s%s%s",
             l->tp, l->pp, l->mbs, vp, rc, l->sp ? " --sequence-parallel" : "",
             l->distopt ? " --use-distributed-optimizer" : "", l->overlap_grad ? " --overlap-grad-reduce" : "", more);
}

/* ---- cluster files ---- */

/* The JSON fields, in plan_cluster. */
static const struct {
    const char *key;
    size_t off;
    double lo, hi;
    int integer; /* an int in plan_cluster, a whole number in the file; else a double */
} FIELDS[] = {
    {"gpus_per_node", offsetof(plan_cluster, gpus_per_node), 1, 1 << 20, 1},
    {"nodes", offsetof(plan_cluster, nodes), 0, 1 << 20, 1},
    /* a CPU quota (cgroup cpu.cfs_quota_us) gives a node's ranks a fraction of a core */
    {"cores_per_node", offsetof(plan_cluster, cores_per_node), 0, 1 << 20, 0},
    {"peak_fp32_flops", offsetof(plan_cluster, peak[0]), 0, 1e18, 0},
    {"peak_bf16_flops", offsetof(plan_cluster, peak[1]), 0, 1e18, 0},
    {"peak_fp16_flops", offsetof(plan_cluster, peak[2]), 0, 1e18, 0},
    {"memory_gib", offsetof(plan_cluster, mem_gib), 1e-3, 1e9, 0},
    {"memory_bandwidth", offsetof(plan_cluster, hbm_bw), 1e6, 1e16, 0},
    {"intra_node_bandwidth", offsetof(plan_cluster, intra_bw), 1e6, 1e16, 0},
    {"intra_node_latency", offsetof(plan_cluster, intra_lat), 0, 1, 0},
    {"inter_node_bandwidth", offsetof(plan_cluster, inter_bw), 1e6, 1e16, 0},
    {"inter_node_latency", offsetof(plan_cluster, inter_lat), 0, 1, 0},
    {"gemm_max_efficiency", offsetof(plan_cluster, gemm_emax), 1e-3, 1, 0},
    {"gemm_half_dim", offsetof(plan_cluster, gemm_half), 0, 1e9, 0},
    {"reserved_gib", offsetof(plan_cluster, mem_reserved_gib), 0, 1e9, 0},
};
/* "framework": "megatron" (GPU clusters, the default), "trident-cpu" or "trident-cuda" (what
 * --calibrate writes on the cpu or the cuda backend: trident's own memory and communication). */
#define NFIELDS ((int)(sizeof FIELDS / sizeof FIELDS[0]))

/* Fields written only when given (> 0): the nodes and the cores a node. */
static int optional_field(int i)
{
    return strcmp(FIELDS[i].key, "nodes") == 0 || strcmp(FIELDS[i].key, "cores_per_node") == 0;
}

static double get_field(const plan_cluster *c, int i)
{
    const char *p = (const char *)c + FIELDS[i].off;
    return FIELDS[i].integer ? (double)*(const int *)p : *(const double *)p;
}

static void set_field(plan_cluster *c, int i, double v)
{
    char *p = (char *)c + FIELDS[i].off;
    if (FIELDS[i].integer) *(int *)p = (int)v;
    else *(double *)p = v;
}

int plan_cluster_load(const char *path, plan_cluster *c, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "--cluster %s: cannot open it: %s (give a preset, %s, or a JSON file)", path,
                 td_strerror(errno), plan_cluster_presets());
        return -1;
    }
    char *text = td_xmalloc(1 << 20);
    size_t n = fread(text, 1, (1 << 20) - 1, f);
    fclose(f);
    text[n] = 0;
    cJSON *o = cJSON_Parse(text);
    free(text);
    int rc = -1;
    memset(c, 0, sizeof *c);
    if (!cJSON_IsObject(o)) {
        snprintf(err, errlen, "--cluster %s is not a JSON object (see docs/plan.md for its fields)", path);
        goto out;
    }
    for (const cJSON *it = o->child; it; it = it->next) { /* a misspelt key would be silently ignored */
        int known = strcmp(it->string, "name") == 0 || strcmp(it->string, "base") == 0 ||
                    strcmp(it->string, "framework") == 0;
        for (int i = 0; i < NFIELDS && !known; i++) known = strcmp(it->string, FIELDS[i].key) == 0;
        if (!known) {
            size_t used = (size_t)snprintf(err, errlen, "--cluster %s: unknown key \"%s\" (known: name, base, framework",
                                           path, it->string);
            for (int i = 0; i < NFIELDS && used < errlen; i++)
                used += (size_t)snprintf(err + used, errlen - used, ", %s", FIELDS[i].key);
            if (used < errlen) snprintf(err + used, errlen - used, ")");
            goto out;
        }
    }
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(o, "base");
    if (cJSON_IsString(base) && plan_cluster_preset(base->valuestring, c)) {
        snprintf(err, errlen, "--cluster %s: base '%s' is not a preset (%s)", path, base->valuestring,
                 plan_cluster_presets());
        goto out;
    }
    const cJSON *fw = cJSON_GetObjectItemCaseSensitive(o, "framework");
    if (fw && !(cJSON_IsString(fw) && (strcmp(fw->valuestring, "megatron") == 0 ||
                                      strcmp(fw->valuestring, "trident-cpu") == 0 ||
                                      strcmp(fw->valuestring, "trident-cuda") == 0))) {
        snprintf(err, errlen, "--cluster %s: framework must be \"megatron\", \"trident-cpu\" or \"trident-cuda\"", path);
        goto out;
    }
    if (fw) c->trident_gpu = strcmp(fw->valuestring, "trident-cuda") == 0;
    if (fw) c->trident_cpu = c->trident_gpu || strcmp(fw->valuestring, "trident-cpu") == 0;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    snprintf(c->name, sizeof c->name, "%s", cJSON_IsString(name) ? name->valuestring : path);
    for (int i = 0; i < NFIELDS; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, FIELDS[i].key);
        if (!v) continue;
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= FIELDS[i].lo && v->valuedouble <= FIELDS[i].hi) ||
            (FIELDS[i].integer && v->valuedouble != floor(v->valuedouble))) {
            snprintf(err, errlen, "--cluster %s: %s must be a number in [%.15g, %.15g]%s", path, FIELDS[i].key,
                     FIELDS[i].lo, FIELDS[i].hi, FIELDS[i].integer ? ", a whole one" : "");
            goto out;
        }
        set_field(c, i, v->valuedouble);
    }
    const char *missing = NULL;
    if (c->gpus_per_node < 1) missing = "gpus_per_node";
    else if (c->mem_gib <= 0) missing = "memory_gib";
    else if (c->hbm_bw <= 0) missing = "memory_bandwidth";
    else if (c->intra_bw <= 0) missing = "intra_node_bandwidth";
    else if (c->inter_bw <= 0) missing = "inter_node_bandwidth";
    else if (c->gemm_emax <= 0) missing = "gemm_max_efficiency";
    else if (c->peak[0] <= 0 && c->peak[1] <= 0 && c->peak[2] <= 0) missing = "peak_fp32_flops (or bf16, fp16)";
    if (missing) {
        snprintf(err, errlen, "--cluster %s: %s is missing (or give \"base\": a preset to start from)", path, missing);
        goto out;
    }
    if (c->mem_reserved_gib >= c->mem_gib) {
        snprintf(err, errlen, "--cluster %s: reserved_gib %.15g leaves nothing of memory_gib %.15g for a model (give "
                 "reserved_gib below memory_gib)", path, c->mem_reserved_gib, c->mem_gib);
        goto out;
    }
    rc = 0;
out:
    cJSON_Delete(o);
    return rc;
}

char *plan_cluster_json(const plan_cluster *c)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", c->name);
    cJSON_AddStringToObject(o, "framework", c->trident_gpu ? "trident-cuda" : c->trident_cpu ? "trident-cpu" : "megatron");
    for (int i = 0; i < NFIELDS; i++)
        if (get_field(c, i) > 0 || !optional_field(i)) cJSON_AddNumberToObject(o, FIELDS[i].key, get_field(c, i));
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}
