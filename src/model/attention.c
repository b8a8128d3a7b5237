/* Attention block under tensor parallelism (after Megatron): QKV column-parallel, causal
 * attention on the local heads, output projection row-parallel. See model_impl.h. */
#include "model_impl.h"

#include <stdio.h>

#include "trident/tensor_parallel.h"

void attn_tensors(table_builder *tb, int layer, attn_params *p, attn_params *g)
{
    int64_t h = tb->m->cfg.hidden;
    char n[64];
#define T(field, init, kind, d0, d1, sd, blocks, nd, label)                                                   \
    do {                                                                                                      \
        snprintf(n, sizeof n, "layers.%d.attn.%s", layer, label);                                             \
        model_add_tensor(tb, &p->field, &g->field, init, model_stream(layer, kind), n, d0, d1, sd, blocks, nd); \
    } while (0)
    /* reverse of the order the backward finishes them */
    T(proj_b, INIT_ZEROS, 7, h, 0, -1, 1, 1, "proj.bias");
    T(proj_w, INIT_NORMAL_OUT, 8, h, h, 1, 1, 0, "proj.weight");
    T(qkv_b, INIT_ZEROS, 9, 3 * h, 0, 0, 3, 1, "qkv.bias");
    T(qkv_w, INIT_NORMAL, 10, 3 * h, h, 0, 3, 0, "qkv.weight");
#undef T
}

void attn_acts_carve(carver *cv, const gpt_model *m, attn_acts *a)
{
    int64_t BT = (int64_t)m->mbs * m->cfg.seq;
    CARVE(cv, a->qkv, float, BT * 3 * m->hidden_l);
    CARVE(cv, a->atty, float, BT * m->hidden_l);
    CARVE(cv, a->lse, float, (int64_t)m->mbs * m->heads_l * m->cfg.seq);
}

void attn_fwd(gpt_model *m, attn_acts *a, const attn_params *p, float *out, const float *x, int B, const be_drop *d_att)
{
    const comm *tp = m->ps->tp_group;
    int T = m->cfg.seq, BT = B * T, h = m->cfg.hidden;
    tp_column_linear_fwd(m->be, tp, a->qkv, x, p->qkv_w, p->qkv_b, BT, h, 3 * m->hidden_l);
    int C = m->hidden_l, NH = m->heads_l; /* fused rows [q | k | v], every head with its own k, v */
    be_attention_fwd(m->be, a->atty, a->lse, a->qkv, a->qkv + C, a->qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH,
                     h / m->cfg.heads, d_att);
    tp_row_linear_fwd(m->be, tp, out, a->atty, p->proj_w, BT, m->hidden_l, h);
}

void attn_bwd(gpt_model *m, float *dx, attn_params *g, const float *dbranch, const attn_acts *a, const attn_params *p,
              const float *x, int B, const be_drop *d_att)
{
    const backend *be = m->be;
    const comm *tp = m->ps->tp_group;
    struct gpt_scratch *s = m->scratch;
    int T = m->cfg.seq, BT = B * T, h = m->cfg.hidden;
    be_bias_bwd(be, g->proj_b, dbranch, BT, h);
    be_zero(be, s->datty, (size_t)BT * m->hidden_l);
    tp_row_linear_bwd(be, tp, s->datty, g->proj_w, dbranch, a->atty, p->proj_w, BT, m->hidden_l, h);
    be_zero(be, s->dqkv, (size_t)BT * 3 * m->hidden_l);
    int C = m->hidden_l, NH = m->heads_l;
    be_attention_bwd(be, s->dqkv, s->dqkv + C, s->dqkv + 2 * C, s->datty, a->qkv, a->qkv + C, a->qkv + 2 * C, a->lse,
                     3 * C, 3 * C, B, T, NH, NH, h / m->cfg.heads, d_att);
    tp_column_linear_bwd(be, tp, dx, g->qkv_w, g->qkv_b, s->dqkv, x, p->qkv_w, BT, h, 3 * m->hidden_l);
}
