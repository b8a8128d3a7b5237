/* MLP block under tensor parallelism (after Megatron): fc column-parallel with bias and GeLU, or
 * with SwiGLU (the gate and up projections as two blocks of one weight, each split over tp so
 * every rank holds matching rows), fc2 row-parallel. See model_impl.h. */
#include "model_impl.h"

#include <stdio.h>

#include "tensor_parallel.h"

/* Width of the fc output on this rank: f/t, or 2f/t for SwiGLU's gate and up. */
static int fc_width(const gpt_model *m) { return m->cfg.swiglu ? 2 * m->ffn_l : m->ffn_l; }

void mlp_tensors(table_builder *tb, int layer, mlp_params *p, mlp_params *g)
{
    const gpt_config *c = &tb->m->cfg;
    int64_t h = c->hidden, f = c->ffn, blocks = c->swiglu ? 2 : 1;
    int bias = gpt_has_bias(c);
    char n[64];
#define T(field, init, kind, d0, d1, sd, blocks, nd, label)                                                   \
    do {                                                                                                      \
        snprintf(n, sizeof n, "layers.%d.mlp.%s", layer, label);                                              \
        model_add_tensor(tb, &p->field, &g->field, init, model_stream(layer, kind), n, d0, d1, sd, blocks, nd); \
    } while (0)
    /* reverse of the order the backward finishes them */
    if (bias) T(fc2_b, INIT_ZEROS, 1, h, 0, -1, 1, 1, "fc2.bias");
    T(fc2_w, INIT_NORMAL_OUT, 2, h, f, 1, 1, 0, "fc2.weight");
    if (bias) T(fc_b, INIT_ZEROS, 3, blocks * f, 0, 0, (int)blocks, 1, "fc.bias");
    T(fc_w, INIT_NORMAL, 4, blocks * f, h, 0, (int)blocks, 0, "fc.weight");
#undef T
}

void mlp_acts_carve(carver *cv, const gpt_model *m, mlp_acts *a)
{
    int64_t BT = (int64_t)m->mbs * m->cfg.seq;
    CARVE(cv, a->fch, float, BT * fc_width(m));
    model_carve_kept(cv, m, &a->fch_gelu, BT * m->ffn_l, 1, "fch_gelu");
}

void mlp_fwd(gpt_model *m, mlp_acts *a, const mlp_params *p, float *out, be_in x, int BT)
{
    const comm *tp = model_tp_reduce(m);
    int h = m->cfg.hidden;
    float *act = model_kept_stage(m, &a->fch_gelu);
    if (m->cfg.swiglu) {
        tp_column_linear_fwd(m->be, tp, a->fch, x, p->fc_w, p->fc_b, BT, h, fc_width(m));
        be_swiglu_fwd(m->be, act, a->fch, BT, m->ffn_l);
    } else {
        tp_column_linear_fwd(m->be, tp, a->fch, x, p->fc_w, NULL, BT, h, m->ffn_l);
        if (p->fc_b) be_bias_gelu_fwd(m->be, act, a->fch, p->fc_b, BT, m->ffn_l);
        else be_gelu_fwd(m->be, act, a->fch, (size_t)BT * m->ffn_l);
    }
    model_kept_done(m, &a->fch_gelu, (size_t)BT * m->ffn_l);
    tp_row_linear_fwd(m->be, tp, out, model_kept_in(&a->fch_gelu), p->fc2_w, BT, m->ffn_l, h);
}

void mlp_bwd(gpt_model *m, float *dx, mlp_params *g, const float *dbranch, const mlp_acts *a, const mlp_params *p,
             be_in x, int BT)
{
    const backend *be = m->be;
    const comm *tp = model_tp_reduce(m);
    struct gpt_scratch *s = m->scratch;
    int h = m->cfg.hidden;
    if (g->fc2_b) be_bias_bwd(be, g->fc2_b, dbranch, BT, h);
    be_zero(be, s->dfch_gelu, (size_t)BT * m->ffn_l);
    tp_row_linear_bwd(be, tp, s->dfch_gelu, g->fc2_w, dbranch, model_kept_in(&a->fch_gelu), p->fc2_w, BT, m->ffn_l, h);
    be_zero(be, s->dfch, (size_t)BT * fc_width(m));
    if (m->cfg.swiglu) {
        be_swiglu_bwd(be, s->dfch, s->dfch_gelu, a->fch, BT, m->ffn_l);
        tp_column_linear_bwd(be, tp, dx, g->fc_w, g->fc_b, s->dfch, x, p->fc_w, BT, h, fc_width(m));
    } else {
        if (p->fc_b) be_bias_gelu_bwd(be, s->dfch, g->fc_b, s->dfch_gelu, a->fch, p->fc_b, BT, m->ffn_l);
        else be_gelu_bwd(be, s->dfch, s->dfch_gelu, a->fch, (size_t)BT * m->ffn_l);
        tp_column_linear_bwd(be, tp, dx, g->fc_w, NULL, s->dfch, x, p->fc_w, BT, h, m->ffn_l);
    }
}
