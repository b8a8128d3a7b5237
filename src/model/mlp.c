/* The MLP block under tensor parallelism (after Megatron): fc column-parallel, the activation,
 * fc2 row-parallel; the fc2 bias is added by the layer (with dropout). The activation is the
 * config's pair (act, glu: trident/activation.h): gated, fc holds the gate and up projections as
 * two blocks of one weight, each split over tp so every rank holds matching rows; the ungated
 * tanh GeLU with a bias takes the backend's fused bias + GeLU. See block.h. */
#include "block.h"

#include <stdio.h>

#include "lora.h"
#include "tensor_parallel.h"

typedef struct {
    float *fch;       /* (BT, f/t): fc output (before the bias when fused); gated (BT, 2f/t) [gate | up];
                       * with lt_gelu, (BT, f/t) in the gemm dtype, after the bias */
    kept_buf fch_act; /* (BT, f/t): the activation's output */
    float *su[3];     /* LoRA's (BT, r) of gate, up, down (GPT_LORA_GATE + i), where targeted */
    int lt_gelu;      /* the forward ran fc and GeLU as one product (be_matmul_gelu_fwd) */
} mlp_acts;

typedef struct {
    float *dfch;     /* (BT, f/t), gated (BT, 2f/t) */
    float *dfch_act; /* (BT, f/t) */
    lora_scratch lora;
} mlp_scratch;

/* Whether the fc bias is fused into the activation (the backend's bias + GeLU tanh). */
static int fused_bias(const gpt_config *c, const mlp_params *p)
{
    return p->fc_b && !c->glu && c->act == TD_ACT_GELU;
}

/* Whether fc and its GeLU may run as one product (be_matmul_gelu_fwd; the backend still decides):
 * the fused bias and GeLU, a 16-bit run keeping the activation in the GEMMs' dtype, no adapter
 * on the MLP (they read fch in fp32). */
static int lt_gelu_ok(const gpt_model *m, const mlp_params *p, const mlp_acts *a)
{
    return fused_bias(&m->cfg, p) && m->be->gemm_dtype != BE_F32 && a->fch_act.dt == m->be->gemm_dtype &&
           !p->lora_a[0] && !p->lora_a[1] && !p->lora_a[2];
}

static void tensors(table_builder *tb, int layer, int stream0, const char *prefix, void *pv, void *gv)
{
    mlp_params *p = pv, *g = gv;
    const gpt_config *c = tb->cfg;
    int64_t h = c->hidden, f = c->ffn, blocks = gpt_fc_blocks(c);
    int bias = gpt_has_bias(c);
    char n[64];
#define T(field, init, kind, d0, d1, sd, blocks, nd, label)                                                    \
    do {                                                                                                       \
        snprintf(n, sizeof n, "%s.%s", prefix, label);                                                         \
        model_add_tensor(tb, &p->field, &g->field, init, model_stream(layer, stream0 + (kind)), n, d0, d1, sd, \
                         blocks, nd);                                                                          \
    } while (0)
    /* reverse of the order the backward finishes them */
    if (bias) T(fc2_b, INIT_ZEROS, 0, h, 0, -1, 1, 1, "fc2.bias");
    T(fc2_w, INIT_NORMAL_OUT, 1, h, f, 1, 1, 0, "fc2.weight");
    if (bias) T(fc_b, INIT_ZEROS, 2, blocks * f, 0, 0, (int)blocks, 1, "fc.bias");
    T(fc_w, INIT_NORMAL, 3, blocks * f, h, 0, (int)blocks, 0, "fc.weight");
#undef T
    /* LoRA: gate and up on fc's blocks (up is the whole fc of an ungated MLP), down on fc2 */
    static const char *const mods[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int i = 2; i >= 0; i--) {
        if (!gpt_lora_on(c, GPT_LORA_GATE + i)) continue;
        int r = c->lora_rank;
        snprintf(n, sizeof n, "%s.%s.lora_A.weight", prefix, mods[i]);
        model_add_adapter(tb, &p->lora_a[i], &g->lora_a[i], INIT_NORMAL, model_stream(layer, 40 + 2 * i), n, r,
                          i < 2 ? h : f, i < 2 ? -1 : 1, 1);
        snprintf(n, sizeof n, "%s.%s.lora_B.weight", prefix, mods[i]);
        model_add_adapter(tb, &p->lora_b[i], &g->lora_b[i], INIT_ZEROS, model_stream(layer, 41 + 2 * i), n,
                          i < 2 ? f : h, r, i < 2 ? 0 : -1, 1);
    }
}

/* LoRA's scratch over `rows` rows: the widest output (fc's, or h) and input (h or f/t). */
static void lora_scratch_carve(carver *cv, const gpt_model *m, int64_t rows, lora_scratch *ls)
{
    if (!gpt_lora(&m->cfg)) return;
    int h = m->cfg.hidden;
    int64_t ld = (int64_t)gpt_fc_blocks(&m->cfg) * m->ffn_l, in = h > m->ffn_l ? h : m->ffn_l;
    if (ld < h) ld = h;
    float **f[LORA_SCRATCH_FIELDS] = {&ls->bw, &ls->dbw, &ls->tmp, &ls->xd, &ls->du, &ls->xf};
    for (int k = 0; k < LORA_SCRATCH_FIELDS; k++)
        CARVE(cv, *f[k], float, lora_scratch_floats(rows, ld, in, m->cfg.lora_rank, k));
}

static lora_dims lora_dims_of(const gpt_model *m, int B, int T, int in, int out)
{
    lora_dims d = {B, T, in, out, m->cfg.lora_rank, gpt_lora_scaling(&m->cfg)};
    return d;
}

/* Where the caller sums the branch's output and input gradient over tp afterwards (sequence
 * parallelism's reduce-scatters): the adapters' whole terms are added on its rank 0 only. */
static const comm *lora_later(const gpt_model *m) { return m->sp ? m->ps->tp_group : NULL; }

/* Module i's dropout: the layer's, at its own site; the row-parallel down reads the local columns. */
static be_drop lora_drop(const gpt_model *m, const block_io *io, int i)
{
    be_drop d = io->lora;
    d.site += GPT_LORA_GATE + i;
    if (i == 2) d.unit0 = m->ps->tp_rank * m->ffn_l;
    return d;
}

/* Where gate (i 0) and up (i 1) lie in fc's output: [gate | up] gated, up alone otherwise. */
static int lora_off(const gpt_model *m, int i) { return m->cfg.glu && i == 1 ? m->ffn_l : 0; }

static void acts(carver *cv, const gpt_model *m, void *av)
{
    mlp_acts *a = av;
    int64_t BT = (int64_t)m->mbs * m->seq_c;
    CARVE(cv, a->fch, float, BT * gpt_fc_blocks(&m->cfg) * m->ffn_l);
    model_carve_kept(cv, &a->fch_act, BT * m->ffn_l, 1, "fch_act");
    for (int i = 0; i < 3; i++)
        if (gpt_lora_on(&m->cfg, GPT_LORA_GATE + i)) CARVE(cv, a->su[i], float, BT * m->cfg.lora_rank);
}

static void scratch(carver *cv, const gpt_model *m, void *sv)
{
    mlp_scratch *s = sv;
    int64_t BT = (int64_t)m->mbs * m->seq_c;
    CARVE(cv, s->dfch, float, BT * gpt_fc_blocks(&m->cfg) * m->ffn_l);
    CARVE(cv, s->dfch_act, float, BT * m->ffn_l);
    lora_scratch_carve(cv, m, BT, &s->lora);
}

/* fc and the activation on `rows` rows: fch (rows, f/t, or 2f/t gated) = x fc_w^T (+ fc_b), act
 * (rows, f/t, in its dtype) the activation of it (fc_b fused into a tanh GeLU); tp: the group fc
 * is split over. */
static void fc_act_fwd(const gpt_model *m, const block_io *io, const comm *tp, const mlp_params *p, be_out act,
                       float *fch, be_in x, int rows, float *const su[2], const lora_scratch *ls, int T)
{
    const gpt_config *c = &m->cfg;
    int fused = fused_bias(c, p), ld = gpt_fc_blocks(c) * m->ffn_l;
    tp_column_linear_fwd(m->be, tp, fch, x, p->fc_w, fused ? NULL : p->fc_b, rows, c->hidden, ld);
    lora_dims d = lora_dims_of(m, rows / T, T, c->hidden, 0);
    const float *xf = p->lora_a[0] || p->lora_a[1] ? lora_input(m->be, ls->xf, x, (size_t)rows * c->hidden) : NULL;
    for (int i = 0; i < 2; i++) { /* the gate and up adapters, before the activation */
        if (!p->lora_a[i]) continue;
        be_drop dr = lora_drop(m, io, i);
        lora_fused_fwd(m->be, fch, su[i], ls, xf, p->lora_a[i], p->lora_b[i], lora_off(m, i), m->ffn_l, ld, &dr, &d);
    }
    if (fused) be_bias_gelu_fwd_to(m->be, act, fch, p->fc_b, rows, m->ffn_l);
    else be_act_fwd_to(m->be, c->act, c->glu, act, fch, rows, m->ffn_l);
}

static void mlp_fwd(const block_io *io, void *av, const void *pv, float *out, be_in x)
{
    const gpt_model *m = io->m;
    mlp_acts *a = av;
    const comm *tp = model_tp_reduce(m);
    const mlp_params *p = pv;
    mlp_scratch *s = io->scratch;
    int T = m->seq_c, BT = io->B * T, h = m->cfg.hidden;
    a->lt_gelu = lt_gelu_ok(m, p, a) && be_matmul_gelu_fwd(m->be, a->fch_act.p, a->fch, x, p->fc_w, p->fc_b, BT,
                                                           h, m->ffn_l);
    if (!a->lt_gelu) {
        be_out o = kept_out(m->be, &a->fch_act);
        fc_act_fwd(m, io, tp, p, o, a->fch, x, BT, a->su, &s->lora, T);
        kept_written(m->be, &a->fch_act, o, (size_t)BT * m->ffn_l);
    }
    tp_row_linear_fwd(m->be, tp, out, kept_in(&a->fch_act), p->fc2_w, BT, m->ffn_l, h);
    if (p->lora_a[2]) {
        lora_dims d = lora_dims_of(m, io->B, T, m->ffn_l, h);
        be_drop dr = lora_drop(m, io, 2);
        const float *act = lora_input(m->be, s->lora.xf, kept_in(&a->fch_act), (size_t)BT * m->ffn_l);
        lora_row_fwd(m->be, m->ps->tp_group, lora_later(m), out, a->su[2], s->lora.xd, s->lora.tmp, act,
                     p->lora_a[2], p->lora_b[2], &dr, &d);
    }
}

/* fc2's backward, shared: the bias, the weight and d(activation output) into s->dfch_act. */
static void fc2_bwd(const block_io *io, mlp_params *g, const float *dbranch, const mlp_acts *a, const mlp_params *p)
{
    const gpt_model *m = io->m;
    mlp_scratch *s = io->scratch;
    int BT = io->B * m->seq_c, h = m->cfg.hidden;
    if (g->fc2_b) be_bias_bwd(m->be, g->fc2_b, dbranch, BT, h);
    be_zero(m->be, s->dfch_act, (size_t)BT * m->ffn_l);
    tp_row_linear_bwd(m->be, model_tp_reduce(m), s->dfch_act, g->fc2_w, dbranch, kept_in(&a->fch_act), p->fc2_w,
                      BT, m->ffn_l, h);
    if (p->lora_a[2]) {
        lora_dims d = lora_dims_of(m, io->B, m->seq_c, m->ffn_l, h);
        be_drop dr = lora_drop(m, io, 2);
        const float *act = lora_input(m->be, s->lora.xf, kept_in(&a->fch_act), (size_t)io->B * m->seq_c * m->ffn_l);
        if (dr.p != 0.0f) be_dropout_fwd(m->be, s->lora.xd, act, io->B, m->seq_c, m->ffn_l, &dr); /* the mask again */
        lora_row_bwd(m->be, s->dfch_act, g->lora_a[2], g->lora_b[2], s->lora.du, s->lora.tmp, dbranch, act,
                     s->lora.xd, a->su[2], p->lora_a[2], p->lora_b[2], &dr, &d);
    }
    be_zero(m->be, s->dfch, (size_t)BT * gpt_fc_blocks(&m->cfg) * m->ffn_l);
}

static void mlp_bwd(const block_io *io, float *dx, void *gv, const float *dbranch, const void *av, const void *pv,
                    be_in x)
{
    const gpt_model *m = io->m;
    const gpt_config *c = &m->cfg;
    const mlp_params *p = pv;
    mlp_params *g = gv;
    const mlp_acts *a = av;
    mlp_scratch *s = io->scratch;
    int BT = io->B * m->seq_c, h = c->hidden, fused = fused_bias(c, p);
    if (a->lt_gelu) { /* fc2's input gradient through GeLU's derivative in one product, in 16 bits */
        be_dtype dt = m->be->gemm_dtype;
        if (g->fc2_b) be_bias_bwd(m->be, g->fc2_b, dbranch, BT, h);
        be_matmul_dgelu_bwd(m->be, s->dfch, s->dfch_act, g->fc2_w, dbranch, kept_in(&a->fch_act), p->fc2_w, a->fch,
                            BT, m->ffn_l, h);
        be_in dpre = {s->dfch, dt};
        tp_column_linear_bwd_lp(m->be, model_tp_reduce(m), dx, g->fc_w, g->fc_b, dpre, x, p->fc_w, BT, h, m->ffn_l);
        return;
    }
    fc2_bwd(io, g, dbranch, a, p);
    if (fused) be_bias_gelu_bwd(m->be, s->dfch, g->fc_b, s->dfch_act, a->fch, p->fc_b, BT, m->ffn_l);
    else be_act_bwd(m->be, c->act, c->glu, s->dfch, s->dfch_act, a->fch, BT, m->ffn_l);
    tp_column_linear_bwd(m->be, model_tp_reduce(m), dx, g->fc_w, fused ? NULL : g->fc_b, s->dfch, x, p->fc_w, BT, h,
                         gpt_fc_blocks(c) * m->ffn_l);
    lora_dims d = lora_dims_of(m, io->B, m->seq_c, h, 0);
    const float *xf = p->lora_a[0] || p->lora_a[1] ? lora_input(m->be, s->lora.xf, x, (size_t)BT * h) : NULL;
    for (int i = 0; i < 2; i++) { /* the adapters' input gradient, whole: after dx's reduction */
        if (!p->lora_a[i]) continue;
        be_drop dr = lora_drop(m, io, i);
        lora_fused_bwd(m->be, m->ps->tp_group, lora_later(m), dx, g->lora_a[i], g->lora_b[i], &s->lora, s->dfch, xf,
                       a->su[i], p->lora_a[i], p->lora_b[i], lora_off(m, i), m->ffn_l, gpt_fc_blocks(c) * m->ffn_l, &dr,
                       &d);
    }
}

static const float *out_bias(const void *p) { return ((const mlp_params *)p)->fc2_b; }

/* ---- generation's step: the forward of the new positions, nothing kept ---- */

typedef struct {
    float *fch; /* (rows, f/t), gated (rows, 2f/t) */
    float *act; /* (rows, f/t) */
    float *su[3]; /* LoRA: (rows, r) */
    lora_scratch lora;
} mlp_decode_scratch;

static void decode_scratch(carver *cv, const gpt_model *m, int rows, void *sv)
{
    mlp_decode_scratch *s = sv;
    CARVE(cv, s->fch, float, (int64_t)rows * gpt_fc_blocks(&m->cfg) * m->ffn_l);
    CARVE(cv, s->act, float, (int64_t)rows * m->ffn_l);
    if (gpt_lora(&m->cfg)) {
        for (int i = 0; i < 3; i++) CARVE(cv, s->su[i], float, (int64_t)rows * m->cfg.lora_rank);
        lora_scratch_carve(cv, m, rows, &s->lora);
    }
}

static void decode(const block_io *io, void *st, const void *pv, float *out, be_in x, int pos, int n)
{
    const gpt_model *m = io->m;
    const comm *tp = m->ps->tp_group; /* generation has no sequence parallelism */
    mlp_decode_scratch *s = io->scratch;
    int rows = io->B * n;
    const mlp_params *p = pv;
    (void)st, (void)pos;
    fc_act_fwd(m, io, tp, p, be_f32_out(s->act), s->fch, x, rows, s->su, &s->lora, n);
    tp_row_linear_fwd(m->be, tp, out, be_f32(s->act), p->fc2_w, rows, m->ffn_l, m->cfg.hidden);
    if (p->lora_a[2]) {
        lora_dims d = lora_dims_of(m, io->B, n, m->ffn_l, m->cfg.hidden);
        lora_row_fwd(m->be, tp, NULL, out, s->su[2], NULL, s->lora.tmp, s->act, p->lora_a[2], p->lora_b[2], NULL, &d);
    }
}

const block_ops mlp_ops = {
    .name = "MLP", .params_size = sizeof(mlp_params), .acts_size = sizeof(mlp_acts),
    .scratch_size = sizeof(mlp_scratch), .tensors = tensors, .acts = acts, .scratch = scratch, .fwd = mlp_fwd,
    .bwd = mlp_bwd, .out_bias = out_bias, .decode_scratch_size = sizeof(mlp_decode_scratch),
    .decode_scratch = decode_scratch, .decode = decode,
};
