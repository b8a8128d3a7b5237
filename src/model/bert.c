/* Megatron-BERT's heads on the last stage, after the final norm (see model_impl.h):
 *  - masked LM: dense (h -> h) + GeLU + norm on this rank's positions (replicated weights, as
 *    Megatron's BertLMHead), then the decoder tied to the word embedding, vocab-parallel, with its
 *    own output bias, and the vocab-parallel cross-entropy at the masked positions only;
 *  - sentence order: the final norm's output at [CLS] (position 0), the pooler (dense + tanh) and
 *    the binary head (h -> 2), replicated; its 2-way softmax is host work of B rows.
 * Under sequence parallelism position 0 lives on tensor-parallel rank 0: its [CLS] rows are
 * summed over the group (the others contribute zeros: exact), every rank runs the replicated
 * pooler on them, and only rank 0 takes the gradient back into its positions and the final
 * norm's weights (which the group then sums, as for every sequence-parallel norm). */
#include "model_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_parallel.h"

struct bert_head_acts {
    float *lm_h;       /* (BTl, h): the transform's dense output, before GeLU */
    float *lm_g;       /* (BTl, h): after GeLU, the norm's input */
    norm_acts lm_norm; /* (BTl, h) kept: the decoder's input */
    float *x_cls;      /* (mbs, h): the final norm's input at [CLS] */
    float *cls;        /* (mbs, h): the final norm's output at [CLS], the pooler's input */
    float *cls_mean, *cls_rstd; /* (mbs) */
    float *pool;       /* (mbs, h): the pooler's output (after tanh) */
    float *bin;        /* (mbs, 2): the sentence-order logits */
};

size_t bert_head_acts_size(void) { return sizeof(struct bert_head_acts); }

void bert_head_tensors(table_builder *tb, gpt_model *m)
{
    int64_t h = m->cfg.hidden;
    gpt_tensors *p = &m->p, *g = &m->g;
    model_add_tensor(tb, &p->lm_bias, &g->lm_bias, INIT_ZEROS, model_stream(-1, 7), "lm_head.bias",
                     m->cfg.padded_vocab, 0, 0, 1, 1);
    norm_tensors(tb, -1, 8, "lm_head.norm", &p->lm_norm, &g->lm_norm);
    model_add_tensor(tb, &p->lm_dense_b, &g->lm_dense_b, INIT_ZEROS, model_stream(-1, 10), "lm_head.dense.bias", h,
                     0, -1, 1, 1);
    model_add_tensor(tb, &p->lm_dense_w, &g->lm_dense_w, INIT_NORMAL, model_stream(-1, 11), "lm_head.dense.weight",
                     h, h, -1, 1, 0);
    if (!m->cfg.binary_head) return;
    model_add_tensor(tb, &p->bin_b, &g->bin_b, INIT_ZEROS, model_stream(-1, 12), "binary_head.bias",
                     GPT_BERT_TOKENTYPES, 0, -1, 1, 1);
    model_add_tensor(tb, &p->bin_w, &g->bin_w, INIT_NORMAL, model_stream(-1, 13), "binary_head.weight",
                     GPT_BERT_TOKENTYPES, h, -1, 1, 0);
    model_add_tensor(tb, &p->pool_b, &g->pool_b, INIT_ZEROS, model_stream(-1, 14), "pooler.dense.bias", h, 0, -1, 1,
                     1);
    model_add_tensor(tb, &p->pool_w, &g->pool_w, INIT_NORMAL, model_stream(-1, 15), "pooler.dense.weight", h, h, -1,
                     1, 0);
}

void bert_head_acts_carve(carver *cv, const gpt_model *m, struct bert_head_acts *a)
{
    int64_t BTl = (int64_t)m->mbs * m->seq_l, h = m->cfg.hidden;
    CARVE(cv, a->lm_h, float, BTl * h);
    CARVE(cv, a->lm_g, float, BTl * h);
    norm_acts_carve(cv, m, &a->lm_norm);
    if (!m->cfg.binary_head) return;
    CARVE(cv, a->x_cls, float, (int64_t)m->mbs * h);
    CARVE(cv, a->cls, float, (int64_t)m->mbs * h);
    CARVE(cv, a->cls_mean, float, m->mbs);
    CARVE(cv, a->cls_rstd, float, m->mbs);
    CARVE(cv, a->pool, float, (int64_t)m->mbs * h);
    CARVE(cv, a->bin, float, (int64_t)m->mbs * GPT_BERT_TOKENTYPES);
}

/* The masked-LM sums of the micro-batch (host labels): loss, tokens, and tokens whose target is
 * the argmax (its logit equals the row's maximum). */
static void mlm_stats(const gpt_model *m, gpt_acts *acts, int BT)
{
    float *host = m->scratch->host_big;
    const backend *be = m->be;
    be_memcpy(be, host, acts->losses, (size_t)BT * sizeof(float), BE_D2H);
    be_memcpy(be, host + BT, acts->tlogit, (size_t)BT * sizeof(float), BE_D2H);
    be_memcpy(be, host + 2 * (size_t)BT, acts->maxv, (size_t)BT * sizeof(float), BE_D2H);
    double loss = 0, n = 0, correct = 0;
    for (int i = 0; i < BT; i++) {
        if (acts->labels[i] < 0) continue;
        loss += host[i];
        n += 1;
        correct += host[BT + i] >= host[2 * BT + i];
    }
    acts->stats[GPT_BERT_MLM_LOSS] = loss;
    acts->stats[GPT_BERT_MLM_TOKENS] = n;
    acts->stats[GPT_BERT_MLM_CORRECT] = correct;
}

/* The pooler and the binary head on the [CLS] rows; the sentence-order sums. */
static void sop_fwd(gpt_model *m, gpt_acts *acts, const float *x)
{
    const backend *be = m->be;
    struct bert_head_acts *a = acts->bert;
    int B = acts->B, h = m->cfg.hidden, holds0 = model_pos0(m) == 0;
    for (int b = 0; b < B; b++) {
        if (holds0) be_copy(be, a->x_cls + (size_t)b * h, x + (size_t)b * m->seq_l * h, (size_t)h);
        else be_zero(be, a->x_cls + (size_t)b * h, (size_t)h);
    }
    if (m->sp) comm_allreduce(m->ps->tp_group, a->x_cls, (size_t)B * h, COMM_F32, COMM_SUM);
    be_layernorm_fwd(be, a->cls, a->cls_mean, a->cls_rstd, a->x_cls, m->p.lnf.w, m->p.lnf.b, B, h,
                     gpt_norm_eps(&m->cfg));
    be_matmul_fwd(be, a->pool, a->cls, m->p.pool_w, m->p.pool_b, B, h, h);
    float *host = m->scratch->host_big;
    be_memcpy(be, host, a->pool, (size_t)B * h * sizeof(float), BE_D2H);
    for (size_t i = 0; i < (size_t)B * h; i++) host[i] = tanhf(host[i]);
    be_memcpy(be, a->pool, host, (size_t)B * h * sizeof(float), BE_H2D);
    be_matmul_fwd(be, a->bin, a->pool, m->p.bin_w, m->p.bin_b, B, h, GPT_BERT_TOKENTYPES);
    be_memcpy(be, host, a->bin, (size_t)B * 2 * sizeof(float), BE_D2H);
    double loss = 0, correct = 0;
    for (int b = 0; b < B; b++) {
        float l0 = host[2 * b], l1 = host[2 * b + 1], mx = l0 > l1 ? l0 : l1;
        double lse = mx + log(exp((double)l0 - mx) + exp((double)l1 - mx));
        int y = acts->sop[b];
        loss += lse - (y ? l1 : l0);
        correct += (l1 > l0) == (y == 1);
    }
    acts->stats[GPT_BERT_SOP_LOSS] = loss;
    acts->stats[GPT_BERT_SOP_SAMPLES] = B;
    acts->stats[GPT_BERT_SOP_CORRECT] = correct;
}

double bert_heads_fwd(gpt_model *m, gpt_acts *acts, const float *x)
{
    const backend *be = m->be;
    const comm *tp = m->ps->tp_group;
    struct bert_head_acts *a = acts->bert;
    int B = acts->B, BT = B * m->cfg.seq, BTl = B * m->seq_l, h = m->cfg.hidden;
    memset(acts->stats, 0, sizeof acts->stats);
    be_matmul_fwd_in(be, a->lm_h, model_kept_in(&acts->lnf.out), m->p.lm_dense_w, m->p.lm_dense_b, BTl, h, h);
    be_gelu_fwd(be, a->lm_g, a->lm_h, (size_t)BTl * h);
    norm_fwd(m, &a->lm_norm, &m->p.lm_norm, a->lm_g, BTl);
    tp_column_linear_fwd(be, tp, acts->logits, model_sp_input(m, &a->lm_norm.out, B), m->p.head_w, m->p.lm_bias, BT,
                         h, m->vocab_l);
    tp_cross_entropy_fwd(be, tp, acts->losses, acts->maxv, acts->sumexp, acts->tlogit, acts->logits, acts->targets, BT,
                         m->vocab_l, m->vstart, m->cfg.vocab);
    mlm_stats(m, acts, BT);
    if (m->cfg.binary_head) sop_fwd(m, acts, x);
    return acts->mlm_weight * acts->stats[GPT_BERT_MLM_LOSS] + acts->sop_weight * acts->stats[GPT_BERT_SOP_LOSS];
}

/* The sentence-order path back to the [CLS] rows: into the final norm's weights and, on the
 * rank holding position 0, into s->dres. */
static void sop_bwd(gpt_model *m, gpt_acts *acts, float scale)
{
    const backend *be = m->be;
    struct gpt_scratch *s = m->scratch;
    struct bert_head_acts *a = acts->bert;
    int B = acts->B, h = m->cfg.hidden;
    float *host = s->host_big;
    /* d(logits) of the 2-way softmax */
    be_memcpy(be, host, a->bin, (size_t)B * 2 * sizeof(float), BE_D2H);
    for (int b = 0; b < B; b++) {
        float l0 = host[2 * b], l1 = host[2 * b + 1];
        float p1 = 1.0f / (1.0f + expf(l0 - l1)); /* softmax of the two */
        host[2 * b] = (1.0f - p1 - (acts->sop[b] == 0)) * scale;
        host[2 * b + 1] = (p1 - (acts->sop[b] == 1)) * scale;
    }
    be_memcpy(be, s->dloss, host, (size_t)B * 2 * sizeof(float), BE_H2D);
    be_zero(be, s->dpool, (size_t)B * h);
    be_matmul_bwd(be, s->dpool, m->g.bin_w, m->g.bin_b, s->dloss, a->pool, m->p.bin_w, B, h, GPT_BERT_TOKENTYPES);
    /* back through tanh: d(pre) = d(out) (1 - out^2) */
    float *hp = host + (size_t)B * h;
    be_memcpy(be, host, s->dpool, (size_t)B * h * sizeof(float), BE_D2H);
    be_memcpy(be, hp, a->pool, (size_t)B * h * sizeof(float), BE_D2H);
    for (size_t i = 0; i < (size_t)B * h; i++) host[i] *= 1.0f - hp[i] * hp[i];
    be_memcpy(be, s->dpool, host, (size_t)B * h * sizeof(float), BE_H2D);
    be_zero(be, s->dcls, (size_t)B * h);
    be_matmul_bwd(be, s->dcls, m->g.pool_w, m->g.pool_b, s->dpool, a->cls, m->p.pool_w, B, h, h);
    if (model_pos0(m) != 0) return;
    be_zero(be, s->dpool, (size_t)B * h); /* now d(x_cls) */
    be_layernorm_bwd(be, s->dpool, m->g.lnf.w, m->g.lnf.b, s->dcls, a->x_cls, m->p.lnf.w, a->cls_mean, a->cls_rstd, B,
                     h);
    for (int b = 0; b < B; b++) {
        float *row = s->dres + (size_t)b * m->seq_l * h;
        be_add(be, row, row, s->dpool + (size_t)b * h, (size_t)h);
    }
}

void bert_heads_bwd(gpt_model *m, gpt_acts *acts, const float *x, float loss_scale)
{
    const backend *be = m->be;
    struct gpt_scratch *s = m->scratch;
    struct bert_head_acts *a = acts->bert;
    int B = acts->B, BT = B * m->cfg.seq, BTl = B * m->seq_l, h = m->cfg.hidden;
    float w = loss_scale * acts->mlm_weight;
    for (int i = 0; i < BT; i++) s->host[i] = acts->labels[i] >= 0 ? w : 0.0f;
    be_memcpy(be, s->dloss, s->host, (size_t)BT * sizeof(float), BE_H2D);
    be_ce_bwd(be, acts->logits, acts->maxv, acts->sumexp, acts->targets, s->dloss, BT, m->vocab_l,
              be_vocab_real(m->cfg.vocab, m->vstart, m->vocab_l), m->vstart);
    tp_column_linear_bwd(be, model_tp_reduce(m), s->dln, m->g.head_w, m->g.lm_bias, acts->logits,
                         model_sp_input(m, &a->lm_norm.out, B), m->p.head_w, BT, h, m->vocab_l);
    const float *dnorm = model_sp_norm_grad(m, B);
    be_zero(be, s->dtmp, (size_t)BTl * h);
    norm_bwd(m, s->dtmp, &m->g.lm_norm, dnorm, a->lm_g, &m->p.lm_norm, &a->lm_norm, BTl);
    be_zero(be, s->branch, (size_t)BTl * h);
    be_gelu_bwd(be, s->branch, s->dtmp, a->lm_h, (size_t)BTl * h);
    be_zero(be, s->dtmp, (size_t)BTl * h);
    be_matmul_bwd_in(be, s->dtmp, m->g.lm_dense_w, m->g.lm_dense_b, s->branch, model_kept_in(&acts->lnf.out),
                     m->p.lm_dense_w, BTl, h, h);
    be_zero(be, s->dres, (size_t)BTl * h);
    norm_bwd(m, s->dres, &m->g.lnf, s->dtmp, x, &m->p.lnf, &acts->lnf, BTl);
    if (m->cfg.binary_head) sop_bwd(m, acts, loss_scale * acts->sop_weight);
}
