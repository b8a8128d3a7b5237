/* A transformer layer as slots (after Megatron, pre-norm):
 *   x ─ input norm ─ attention ─ +bias, dropout, +x = res2
 *     ─ pre-MLP norm ─ MLP ─ +bias, dropout, +res2 = out
 * Each slot's kind comes from the config (layer_spec.c); the layer calls it only through its
 * ops (block.h). Sequence parallelism's gathers and scatters around the branches, and the
 * residual adds with their dropout, are the layer's. */
#include "model_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "tensor_parallel.h"

/* Each slot's name in the tensor names and the first Philox stream kind of its tensors (the
 * values of GPT-2's layout, kept so checkpoints and initialisation stay what they were). */
static const char *const SLOT_NAME[GPT_LAYER_NSLOTS] = {"ln1", "attn", "ln2", "mlp"};
static const int SLOT_STREAM[GPT_LAYER_NSLOTS] = {11, 7, 5, 1};

void layer_init(gpt_layer *L, const gpt_config *c, int layer)
{
    for (int k = 0; k < GPT_LAYER_NSLOTS; k++) block_slot_init(&L->slot[k], layer_spec_ops(c, layer, k));
}

void layer_free(gpt_layer *L)
{
    for (int k = 0; k < GPT_LAYER_NSLOTS; k++) block_slot_free(&L->slot[k]);
}

void layer_tensors(table_builder *tb, int layer, gpt_layer *L)
{
    char n[64];
    /* reverse of the order the backward finishes them: the input norm's weight last */
    for (int k = GPT_LAYER_NSLOTS - 1; k >= 0; k--) {
        snprintf(n, sizeof n, "layers.%d.%s", layer, SLOT_NAME[k]);
        block_slot_tensors(&L->slot[k], tb, layer, SLOT_STREAM[k], n);
    }
}

void layer_acts_alloc(const gpt_layer *L, layer_acts *a)
{
    for (int k = 0; k < GPT_LAYER_NSLOTS; k++) a->slot[k] = td_xcalloc(1, L->slot[k].ops->acts_size);
}

void layer_acts_free(const gpt_layer *L, layer_acts *a)
{
    (void)L;
    for (int k = 0; k < GPT_LAYER_NSLOTS; k++) {
        free(a->slot[k]);
        a->slot[k] = NULL;
    }
}

void layer_acts_share(const gpt_layer *L, layer_acts *dst, const layer_acts *src)
{
    for (int k = 0; k < GPT_LAYER_NSLOTS; k++) memcpy(dst->slot[k], src->slot[k], L->slot[k].ops->acts_size);
    dst->res2 = src->res2;
    dst->out = src->out;
}

void layer_acts_carve(carver *cv, const gpt_model *m, const gpt_layer *L, layer_acts *a)
{
    int64_t BT = (int64_t)m->mbs * m->seq_l; /* this rank's positions under sequence parallelism */
    int h = m->cfg.hidden;
    for (int half = LAYER_HALF_ATTN; half <= LAYER_HALF_MLP; half++) {
        for (int k = layer_norm_slot(half); k <= layer_branch_slot(half); k++) L->slot[k].ops->acts(cv, m, a->slot[k]);
        if (half == LAYER_HALF_ATTN) CARVE(cv, a->res2, float, BT * h);
        else CARVE(cv, a->out, float, BT * h);
    }
}

/* The three dropouts of global layer L: attention probabilities, and after each branch. */
static void layer_drops(const gpt_model *m, const gpt_acts *acts, int L, be_drop *att, be_drop out[2])
{
    float ph = acts->training ? m->cfg.hidden_dropout : 0.0f, pa = acts->training ? m->cfg.attn_dropout : 0.0f;
    *att = model_drop(m, acts, pa, site_attn_probs(L), m->ps->tp_rank * m->heads_l);
    out[LAYER_HALF_ATTN] = model_drop(m, acts, ph, site_attn_out(L), 0);
    out[LAYER_HALF_MLP] = model_drop(m, acts, ph, site_mlp_out(L), 0);
    out[0].pos0 = out[1].pos0 = model_pos0(m); /* the branches' dropout acts on this rank's positions */
}

/* A block's output (B, s, h) before its reduction: sequence parallelism reduce-scatters it to this
 * rank's positions (g); otherwise the block has all-reduced it already. */
static const float *block_output(gpt_model *m, float *out, int B)
{
    if (!m->sp) return out;
    struct gpt_scratch *s = m->scratch;
    tp_sp_scatter(m->be, m->ps->tp_group, s->branch_l, out, s->sptmp, B, m->seq_c, m->cfg.hidden);
    return s->branch_l;
}

/* The io of slot k of stage layer l: its kind's scratch, and the attention probabilities' dropout. */
static block_io slot_io(gpt_model *m, const gpt_acts *acts, int l, int k, const be_drop *d_att)
{
    block_io io =
        model_io(m, acts, model_kind_scratch(m, m->layers[l].slot[k].ops), k == GPT_SLOT_ATTENTION ? d_att : NULL);
    if (gpt_lora(&m->cfg))
        io.lora = model_drop(m, acts, acts->training ? m->cfg.lora_dropout : 0.0f, site_lora(m, m->layer0 + l), 0);
    return io;
}

/* One residual half: out = x + dropout(branch(norm(x)) + bias). */
static void half_fwd(gpt_model *m, gpt_acts *acts, int l, int half, const float *x, float *out, const be_drop *d_att,
                     const be_drop *d_out)
{
    int nk = layer_norm_slot(half), bk = layer_branch_slot(half);
    const block_slot *n = &m->layers[l].slot[nk], *b = &m->layers[l].slot[bk];
    layer_acts *a = &acts->layers[l];
    void *na = a->slot[nk];
    int B = acts->B;
    float *branch = m->scratch->branch;
    block_io nio = slot_io(m, acts, l, nk, d_att), bio = slot_io(m, acts, l, bk, d_att);
    n->ops->fwd(&nio, na, n->p, NULL, be_f32(x));
    b->ops->fwd(&bio, a->slot[bk], b->p, branch, model_sp_input(m, n->ops->output(na), B));
    const float *bias = b->ops->out_bias ? b->ops->out_bias(b->p) : NULL;
    be_bias_dropout_add_fwd(m->be, out, x, block_output(m, branch, B), bias, B, m->seq_l, m->cfg.hidden, d_out);
}

void layer_fwd(gpt_model *m, gpt_acts *acts, int l, const float *x)
{
    layer_acts *a = &acts->layers[l];
    be_drop d_att, d_out[2];
    layer_drops(m, acts, m->layer0 + l, &d_att, d_out);
    half_fwd(m, acts, l, LAYER_HALF_ATTN, x, a->res2, &d_att, &d_out[LAYER_HALF_ATTN]);
    half_fwd(m, acts, l, LAYER_HALF_MLP, a->res2, a->out, &d_att, &d_out[LAYER_HALF_MLP]);
}

void layer_recompute(gpt_model *m, gpt_acts *acts, int l)
{
    be_drop d_att, d_out[2];
    layer_drops(m, acts, m->layer0 + l, &d_att, d_out);
    for (int k = 0; k < GPT_LAYER_NSLOTS; k++) {
        const block_slot *s = &m->layers[l].slot[k];
        if (!s->ops->recompute) continue;
        block_io io = slot_io(m, acts, l, k, &d_att);
        s->ops->recompute(&io, acts->layers[l].slot[k]);
    }
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
    tp_sp_gather(m->be, m->ps->tp_group, s->dgath, d, s->sptmp, B, m->seq_c, m->cfg.hidden);
    return s->dgath;
}

/* One residual half backward: the residual's gradient is dres itself, the norm's adds to it. */
static void half_bwd(gpt_model *m, gpt_acts *acts, int l, int half, const float *x, const be_drop *d_att,
                     const be_drop *d_out)
{
    int nk = layer_norm_slot(half), bk = layer_branch_slot(half);
    const block_slot *n = &m->layers[l].slot[nk], *b = &m->layers[l].slot[bk];
    const layer_acts *a = &acts->layers[l];
    const void *na = a->slot[nk];
    struct gpt_scratch *s = m->scratch;
    int B = acts->B;
    block_io nio = slot_io(m, acts, l, nk, d_att), bio = slot_io(m, acts, l, bk, d_att);
    const float *dbranch = branch_grad(m, dropout_grad(m->be, s->dtmp, s->dres, B, m->seq_l, m->cfg.hidden, d_out), B);
    b->ops->bwd(&bio, s->dln, b->g, dbranch, a->slot[bk], b->p, model_sp_input(m, n->ops->output(na), B));
    n->ops->bwd(&nio, s->dres, n->g, model_sp_norm_grad(m, B), na, n->p, be_f32(x));
}

void layer_bwd(gpt_model *m, gpt_acts *acts, int l, const float *x)
{
    be_drop d_att, d_out[2];
    layer_drops(m, acts, m->layer0 + l, &d_att, d_out);
    half_bwd(m, acts, l, LAYER_HALF_MLP, acts->layers[l].res2, &d_att, &d_out[LAYER_HALF_MLP]);
    half_bwd(m, acts, l, LAYER_HALF_ATTN, x, &d_att, &d_out[LAYER_HALF_ATTN]);
}
