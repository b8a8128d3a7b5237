/* MLP blocks under tensor parallelism (after Megatron): fc column-parallel, the activation, fc2
 * row-parallel; the fc2 bias is added by the layer (with dropout). Two kinds: GeLU (fc with its
 * bias fused into the GeLU) and SwiGLU (the gate and up projections as two blocks of one
 * weight, each split over tp so every rank holds matching rows). See block.h. */
#include "block.h"

#include <stdio.h>

#include "tensor_parallel.h"

typedef struct {
    float *fch;        /* (BT, f/t): fc output before bias and GeLU; SwiGLU (BT, 2f/t) [gate | up] */
    kept_buf fch_gelu; /* (BT, f/t): the activation's output */
} mlp_acts;

typedef struct {
    float *dfch;       /* (BT, f/t), SwiGLU (BT, 2f/t) */
    float *dfch_gelu;  /* (BT, f/t) */
} mlp_scratch;

/* fc's output blocks: 1, or SwiGLU's gate and up. */
static int fc_blocks(const gpt_config *c) { return c->swiglu ? 2 : 1; }

static void tensors(table_builder *tb, int layer, int stream0, const char *prefix, void *pv, void *gv)
{
    mlp_params *p = pv, *g = gv;
    const gpt_config *c = tb->cfg;
    int64_t h = c->hidden, f = c->ffn, blocks = fc_blocks(c);
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
}

static void acts(carver *cv, const gpt_model *m, void *av)
{
    mlp_acts *a = av;
    int64_t BT = (int64_t)m->mbs * m->cfg.seq;
    CARVE(cv, a->fch, float, BT * fc_blocks(&m->cfg) * m->ffn_l);
    model_carve_kept(cv, &a->fch_gelu, BT * m->ffn_l, 1, "fch_gelu");
}

static void scratch(carver *cv, const gpt_model *m, void *sv)
{
    mlp_scratch *s = sv;
    int64_t BT = (int64_t)m->mbs * m->cfg.seq;
    CARVE(cv, s->dfch, float, BT * fc_blocks(&m->cfg) * m->ffn_l);
    CARVE(cv, s->dfch_gelu, float, BT * m->ffn_l);
}

static void gelu_fwd(const block_io *io, void *av, const void *pv, float *out, be_in x)
{
    const gpt_model *m = io->m;
    const mlp_params *p = pv;
    mlp_acts *a = av;
    const comm *tp = model_tp_reduce(m);
    int BT = io->B * m->cfg.seq, h = m->cfg.hidden;
    float *act = kept_stage(&a->fch_gelu);
    tp_column_linear_fwd(m->be, tp, a->fch, x, p->fc_w, NULL, BT, h, m->ffn_l);
    if (p->fc_b) be_bias_gelu_fwd(m->be, act, a->fch, p->fc_b, BT, m->ffn_l);
    else be_gelu_fwd(m->be, act, a->fch, (size_t)BT * m->ffn_l);
    kept_done(m->be, &a->fch_gelu, (size_t)BT * m->ffn_l);
    tp_row_linear_fwd(m->be, tp, out, kept_in(&a->fch_gelu), p->fc2_w, BT, m->ffn_l, h);
}

static void swiglu_fwd(const block_io *io, void *av, const void *pv, float *out, be_in x)
{
    const gpt_model *m = io->m;
    const mlp_params *p = pv;
    mlp_acts *a = av;
    const comm *tp = model_tp_reduce(m);
    int BT = io->B * m->cfg.seq, h = m->cfg.hidden;
    tp_column_linear_fwd(m->be, tp, a->fch, x, p->fc_w, p->fc_b, BT, h, 2 * m->ffn_l);
    be_swiglu_fwd(m->be, kept_stage(&a->fch_gelu), a->fch, BT, m->ffn_l);
    kept_done(m->be, &a->fch_gelu, (size_t)BT * m->ffn_l);
    tp_row_linear_fwd(m->be, tp, out, kept_in(&a->fch_gelu), p->fc2_w, BT, m->ffn_l, h);
}

/* fc2's backward, shared: the bias, the weight and d(activation output) into s->dfch_gelu. */
static void fc2_bwd(const block_io *io, mlp_params *g, const float *dbranch, const mlp_acts *a, const mlp_params *p)
{
    const gpt_model *m = io->m;
    mlp_scratch *s = io->scratch;
    int BT = io->B * m->cfg.seq, h = m->cfg.hidden;
    if (g->fc2_b) be_bias_bwd(m->be, g->fc2_b, dbranch, BT, h);
    be_zero(m->be, s->dfch_gelu, (size_t)BT * m->ffn_l);
    tp_row_linear_bwd(m->be, model_tp_reduce(m), s->dfch_gelu, g->fc2_w, dbranch, kept_in(&a->fch_gelu), p->fc2_w,
                      BT, m->ffn_l, h);
    be_zero(m->be, s->dfch, (size_t)BT * fc_blocks(&m->cfg) * m->ffn_l);
}

static void gelu_bwd(const block_io *io, float *dx, void *gv, const float *dbranch, const void *av, const void *pv,
                     be_in x)
{
    const gpt_model *m = io->m;
    const mlp_params *p = pv;
    mlp_params *g = gv;
    const mlp_acts *a = av;
    mlp_scratch *s = io->scratch;
    int BT = io->B * m->cfg.seq, h = m->cfg.hidden;
    fc2_bwd(io, g, dbranch, a, p);
    if (p->fc_b) be_bias_gelu_bwd(m->be, s->dfch, g->fc_b, s->dfch_gelu, a->fch, p->fc_b, BT, m->ffn_l);
    else be_gelu_bwd(m->be, s->dfch, s->dfch_gelu, a->fch, (size_t)BT * m->ffn_l);
    tp_column_linear_bwd(m->be, model_tp_reduce(m), dx, g->fc_w, NULL, s->dfch, x, p->fc_w, BT, h, m->ffn_l);
}

static void swiglu_bwd(const block_io *io, float *dx, void *gv, const float *dbranch, const void *av,
                       const void *pv, be_in x)
{
    const gpt_model *m = io->m;
    const mlp_params *p = pv;
    mlp_params *g = gv;
    const mlp_acts *a = av;
    mlp_scratch *s = io->scratch;
    int BT = io->B * m->cfg.seq, h = m->cfg.hidden;
    fc2_bwd(io, g, dbranch, a, p);
    be_swiglu_bwd(m->be, s->dfch, s->dfch_gelu, a->fch, BT, m->ffn_l);
    tp_column_linear_bwd(m->be, model_tp_reduce(m), dx, g->fc_w, g->fc_b, s->dfch, x, p->fc_w, BT, h,
                         2 * m->ffn_l);
}

static const float *out_bias(const void *p) { return ((const mlp_params *)p)->fc2_b; }

const block_ops mlp_gelu_ops = {
    .name = "MLP (GeLU)", .params_size = sizeof(mlp_params), .acts_size = sizeof(mlp_acts),
    .scratch_size = sizeof(mlp_scratch), .tensors = tensors, .acts = acts, .scratch = scratch, .fwd = gelu_fwd,
    .bwd = gelu_bwd, .out_bias = out_bias,
};

const block_ops mlp_swiglu_ops = {
    .name = "MLP (SwiGLU)", .params_size = sizeof(mlp_params), .acts_size = sizeof(mlp_acts),
    .scratch_size = sizeof(mlp_scratch), .tensors = tensors, .acts = acts, .scratch = scratch, .fwd = swiglu_fwd,
    .bwd = swiglu_bwd, .out_bias = out_bias,
};
