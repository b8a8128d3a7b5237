/* A transformer layer composed of blocks (after Megatron, pre-norm):
 *   x ─ norm ─ attention ─ +bias, dropout, +x = res2
 *     ─ norm ─ MLP ─ +bias, dropout, +res2 = out
 * The blocks choose their kind from the config (LayerNorm or RMSNorm; multi-head or
 * grouped-query attention with or without rotary positions; GeLU or SwiGLU; biases or none).
 * See model_impl.h. */
#include "model_impl.h"

#include <stdio.h>

#include "trident/check.h"
#include "tensor_parallel.h"

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
    int64_t BT = (int64_t)m->mbs * m->seq_l; /* this rank's positions under sequence parallelism */
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
    out->pos0 = mlp->pos0 = model_pos0(m); /* the branches' dropout acts on this rank's positions */
}

/* A block's input (also the LM head's): the norm output x (B, seq_l, h), gathered along the sequence under sequence
 * parallelism (f), else x itself. */
be_in model_sp_input(gpt_model *m, const kept_buf *x, int B)
{
    if (!m->sp) return model_kept_in(x);
    struct gpt_scratch *s = m->scratch;
    TD_ASSERT(x->dt == BE_F32); /* norm outputs stay fp32 under sequence parallelism */
    tp_sp_gather(m->be, m->ps->tp_group, s->gath, x->p, s->sptmp, B, m->cfg.seq, m->cfg.hidden);
    return be_f32(s->gath);
}

/* A block's output (B, s, h) before its reduction: sequence parallelism reduce-scatters it to this
 * rank's positions (g); otherwise the block has all-reduced it already. */
static const float *block_output(gpt_model *m, float *out, int B)
{
    if (!m->sp) return out;
    struct gpt_scratch *s = m->scratch;
    tp_sp_scatter(m->be, m->ps->tp_group, s->branch_l, out, s->sptmp, B, m->cfg.seq, m->cfg.hidden);
    return s->branch_l;
}

void layer_fwd(gpt_model *m, gpt_acts *acts, int l, const float *x)
{
    const gpt_layer *p = &m->p.layers[l];
    layer_acts *a = &acts->layers[l];
    int B = acts->B, T = m->seq_l, BT = B * T, h = m->cfg.hidden; /* T: this rank's positions */
    be_drop d_att, d_out, d_mlp;
    layer_drops(m, acts, m->layer0 + l, &d_att, &d_out, &d_mlp);
    float *branch = m->scratch->branch;

    norm_fwd(m, &a->ln1, &p->ln1, x, BT);
    attn_fwd(m, &a->attn, &p->attn, branch, model_sp_input(m, &a->ln1.out, B), B, acts->klen, &d_att);
    be_bias_dropout_add_fwd(m->be, a->res2, x, block_output(m, branch, B), p->attn.proj_b, B, T, h, &d_out);

    norm_fwd(m, &a->ln2, &p->ln2, a->res2, BT);
    mlp_fwd(m, &a->mlp, &p->mlp, branch, model_sp_input(m, &a->ln2.out, B), B * m->cfg.seq);
    be_bias_dropout_add_fwd(m->be, a->out, a->res2, block_output(m, branch, B), p->mlp.fc2_b, B, T, h, &d_mlp);
}

void layer_attn_core_fwd(gpt_model *m, gpt_acts *acts, int l)
{
    be_drop d_att, d_out, d_mlp;
    layer_drops(m, acts, m->layer0 + l, &d_att, &d_out, &d_mlp);
    attn_core_fwd(m, &acts->layers[l].attn, acts->B, acts->klen, &d_att);
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

/* Sequence parallelism, backward: a branch's output gradient d (B, seq_l, h) gathered along the
 * sequence (g's backward); else d itself. */
static const float *branch_grad(gpt_model *m, const float *d, int B)
{
    if (!m->sp) return d;
    struct gpt_scratch *s = m->scratch;
    tp_sp_gather(m->be, m->ps->tp_group, s->dgath, d, s->sptmp, B, m->cfg.seq, m->cfg.hidden);
    return s->dgath;
}

/* The gradient of a norm's output from the block's input gradient in s->dln: under sequence
 * parallelism the block left it unreduced (B, s, h) and it is reduce-scattered to this rank's
 * positions (f's backward); else s->dln itself (all-reduced by the block). */
const float *model_sp_norm_grad(gpt_model *m, int B)
{
    struct gpt_scratch *s = m->scratch;
    if (!m->sp) return s->dln;
    tp_sp_scatter(m->be, m->ps->tp_group, s->dln_l, s->dln, s->sptmp, B, m->cfg.seq, m->cfg.hidden);
    return s->dln_l;
}

void layer_bwd(gpt_model *m, gpt_acts *acts, int l, const float *x)
{
    const gpt_layer *p = &m->p.layers[l];
    gpt_layer *g = &m->g.layers[l];
    const layer_acts *a = &acts->layers[l];
    struct gpt_scratch *s = m->scratch;
    int B = acts->B, T = m->seq_l, BT = B * T, h = m->cfg.hidden; /* T: this rank's positions */
    be_drop d_att, d_out, d_mlp;
    layer_drops(m, acts, m->layer0 + l, &d_att, &d_out, &d_mlp);

    /* MLP branch; the residual's gradient is dres itself, the norm's adds to it */
    const float *dbranch = branch_grad(m, dropout_grad(m->be, s->dtmp, s->dres, B, T, h, &d_mlp), B);
    mlp_bwd(m, s->dln, &g->mlp, dbranch, &a->mlp, &p->mlp, model_sp_input(m, &a->ln2.out, B), B * m->cfg.seq);
    norm_bwd(m, s->dres, &g->ln2, model_sp_norm_grad(m, B), a->res2, &p->ln2, &a->ln2, BT);

    /* attention branch */
    dbranch = branch_grad(m, dropout_grad(m->be, s->dtmp, s->dres, B, T, h, &d_out), B);
    attn_bwd(m, s->dln, &g->attn, dbranch, &a->attn, &p->attn, model_sp_input(m, &a->ln1.out, B), B, acts->klen,
             &d_att);
    norm_bwd(m, s->dres, &g->ln1, model_sp_norm_grad(m, B), x, &p->ln1, &a->ln1, BT);
}
