/* A transformer layer composed of blocks (after Megatron, pre-norm):
 *   x ─ norm ─ attention ─ +bias, dropout, +x = res2
 *     ─ norm ─ MLP ─ +bias, dropout, +res2 = out
 * The blocks choose their kind from the config (LayerNorm or RMSNorm; multi-head or
 * grouped-query attention with or without rotary positions; GeLU or SwiGLU; biases or none).
 * See model_impl.h. */
#include "model_impl.h"

#include <stdio.h>

void layer_tensors(table_builder *tb, int layer, gpt_layer *p, gpt_layer *g)
{
    char n[64];
    /* reverse of the order the backward finishes them: ln1.weight last */
    mlp_tensors(tb, layer, &p->mlp, &g->mlp);
    snprintf(n, sizeof n, "layers.%d.ln2", layer);
    norm_tensors(tb, layer, 5, n, &p->ln2, &g->ln2);
    attn_tensors(tb, layer, &p->attn, &g->attn);
    snprintf(n, sizeof n, "layers.%d.ln1", layer);
    norm_tensors(tb, layer, 11, n, &p->ln1, &g->ln1);
}

void layer_acts_carve(carver *cv, const gpt_model *m, layer_acts *a)
{
    int64_t BT = (int64_t)m->mbs * m->cfg.seq;
    int h = m->cfg.hidden;
    norm_acts_carve(cv, m, &a->ln1);
    attn_acts_carve(cv, m, &a->attn);
    CARVE(cv, a->res2, float, BT * h);
    norm_acts_carve(cv, m, &a->ln2);
    mlp_acts_carve(cv, m, &a->mlp);
    CARVE(cv, a->out, float, BT * h);
}

/* The three dropouts of global layer L: attention probabilities, and after each branch. */
static void layer_drops(const gpt_model *m, const gpt_acts *acts, int L, be_drop *att, be_drop *out, be_drop *mlp)
{
    float ph = acts->training ? m->cfg.hidden_dropout : 0.0f, pa = acts->training ? m->cfg.attn_dropout : 0.0f;
    *att = model_drop(m, acts, pa, site_attn_probs(L), m->ps->tp_rank * m->heads_l);
    *out = model_drop(m, acts, ph, site_attn_out(L), 0);
    *mlp = model_drop(m, acts, ph, site_mlp_out(L), 0);
}

void layer_fwd(gpt_model *m, gpt_acts *acts, int l, const float *x)
{
    const gpt_layer *p = &m->p.layers[l];
    layer_acts *a = &acts->layers[l];
    int B = acts->B, T = m->cfg.seq, BT = B * T, h = m->cfg.hidden;
    be_drop d_att, d_out, d_mlp;
    layer_drops(m, acts, m->layer0 + l, &d_att, &d_out, &d_mlp);
    float *branch = m->scratch->branch;

    norm_fwd(m, &a->ln1, &p->ln1, x, BT);
    attn_fwd(m, &a->attn, &p->attn, branch, a->ln1.out, B, &d_att);
    be_bias_dropout_add_fwd(m->be, a->res2, x, branch, p->attn.proj_b, B, T, h, &d_out);

    norm_fwd(m, &a->ln2, &p->ln2, a->res2, BT);
    mlp_fwd(m, &a->mlp, &p->mlp, branch, a->ln2.out, BT);
    be_bias_dropout_add_fwd(m->be, a->out, a->res2, branch, p->mlp.fc2_b, B, T, h, &d_mlp);
}

void layer_attn_core_fwd(gpt_model *m, gpt_acts *acts, int l)
{
    be_drop d_att, d_out, d_mlp;
    layer_drops(m, acts, m->layer0 + l, &d_att, &d_out, &d_mlp);
    attn_core_fwd(m, &acts->layers[l].attn, acts->B, &d_att);
}

/* The gradient of a dropout's input from d, the gradient of its output: d itself when nothing is
 * dropped (no copy), else the masked copy written to tmp. */
static const float *dropout_grad(const backend *be, float *tmp, const float *d, int B, int T, int C,
                                 const be_drop *drop)
{
    if (drop->p == 0.0f) return d;
    be_dropout_bwd(be, tmp, d, B, T, C, drop);
    return tmp;
}

void layer_bwd(gpt_model *m, gpt_acts *acts, int l, const float *x)
{
    const gpt_layer *p = &m->p.layers[l];
    gpt_layer *g = &m->g.layers[l];
    const layer_acts *a = &acts->layers[l];
    struct gpt_scratch *s = m->scratch;
    int B = acts->B, T = m->cfg.seq, BT = B * T, h = m->cfg.hidden;
    be_drop d_att, d_out, d_mlp;
    layer_drops(m, acts, m->layer0 + l, &d_att, &d_out, &d_mlp);

    /* MLP branch; the residual's gradient is dres itself, the norm's adds to it */
    const float *dbranch = dropout_grad(m->be, s->dtmp, s->dres, B, T, h, &d_mlp);
    mlp_bwd(m, s->dln, &g->mlp, dbranch, &a->mlp, &p->mlp, a->ln2.out, BT);
    norm_bwd(m, s->dres, &g->ln2, s->dln, a->res2, &p->ln2, &a->ln2, BT);

    /* attention branch */
    dbranch = dropout_grad(m->be, s->dtmp, s->dres, B, T, h, &d_out);
    attn_bwd(m, s->dln, &g->attn, dbranch, &a->attn, &p->attn, a->ln1.out, B, &d_att);
    norm_bwd(m, s->dres, &g->ln1, s->dln, x, &p->ln1, &a->ln1, BT);
}
