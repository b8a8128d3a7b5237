/* Megatron-BERT's heads on the last stage, after the final norm (see model_impl.h):
 *  - masked LM: dense (h -> h) + GeLU + norm on this rank's positions (replicated weights, as
 *    Megatron's BertLMHead), then the decoder tied to the word embedding, vocab-parallel, with its
 *    own output bias, and the vocab-parallel cross-entropy at the masked positions only;
 *  - sentence order: the final norm's output at [CLS] (position 0), the pooler (dense + tanh) and
 *    the binary head (h -> 2), replicated; its 2-way softmax is host work of B rows.
 * Under sequence parallelism position 0 lives on tensor-parallel rank 0: its [CLS] rows are
 * summed over the group (the others contribute zeros: exact), every rank runs the replicated
 * pooler on them, and only rank 0 takes the gradient back into its positions and the final
 * norm's weights (which the group then sums, as for every sequence-parallel norm).
 * Behind head_ops (model_impl.h): the stage calls it only through mlm_sop_head_ops. */
#include "model_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "tensor_parallel.h"

/* BERT's statistics, in mlm_sop_head_ops.stat_names' order. */
enum { MLM_LOSS, MLM_TOKENS, MLM_CORRECT, SOP_LOSS, SOP_SAMPLES, SOP_CORRECT, NSTATS };
/* The sentence-order classes (and token types). */
#define NCLASS 2

/* The heads' tensors beside the output layer (m->p.head_w), TP-local shapes. */
typedef struct {
    float *lm_dense_w, *lm_dense_b; /* (h, h), (h): the LM head's transform */
    norm_params lm_norm;            /* (h): ... its norm (of the config's norm kind) */
    float *lm_bias;                 /* (V/t): the output bias of the tied decoder */
    float *pool_w, *pool_b;         /* (h, h), (h): the pooler, with the binary head */
    float *bin_w, *bin_b;           /* (2, h), (2): the sentence-order head */
} bert_params;

typedef struct {
    float *dcls, *dpool; /* (mbs, h): gradients of the pooler's input and output */
} bert_scratch;

struct bert_head_acts {
    float *lm_h;       /* (BTl, h): the transform's dense output, before GeLU */
    float *lm_g;       /* (BTl, h): after GeLU, the norm's input */
    void *lm_norm;     /* (BTl, h) kept: the decoder's input (the norm kind's activations) */
    float *x_cls;      /* (mbs, h): the final norm's input at [CLS] */
    float *cls;        /* (mbs, h): the final norm's output at [CLS], the pooler's input */
    float *cls_mean, *cls_rstd; /* (mbs) */
    float *pool;       /* (mbs, h): the pooler's output (after tanh) */
    float *bin;        /* (mbs, 2): the sentence-order logits */
};

static const block_ops *norm_kind(const gpt_model *m) { return layer_spec_norm(&m->cfg); }

/* The output layer (untied, or the last stage's copy of the word embedding), then the heads'
 * tensors in buffer order (the output bias, the LM head's norm and dense transform, then the
 * binary head and the pooler). */
static void tensors(table_builder *tb, gpt_model *m, int output)
{
    int64_t h = m->cfg.hidden;
    lm_head_ops.tensors(tb, m, output);
    bert_params *p = m->head_p, *g = m->head_g;
    model_add_tensor(tb, &p->lm_bias, &g->lm_bias, INIT_ZEROS, model_stream(-1, 7), "lm_head.bias",
                     m->cfg.padded_vocab, 0, 0, 1, 1);
    norm_kind(m)->tensors(tb, -1, 8, "lm_head.norm", &p->lm_norm, &g->lm_norm);
    model_add_tensor(tb, &p->lm_dense_b, &g->lm_dense_b, INIT_ZEROS, model_stream(-1, 10), "lm_head.dense.bias", h,
                     0, -1, 1, 1);
    model_add_tensor(tb, &p->lm_dense_w, &g->lm_dense_w, INIT_NORMAL, model_stream(-1, 11), "lm_head.dense.weight",
                     h, h, -1, 1, 0);
    if (!m->cfg.binary_head) return;
    model_add_tensor(tb, &p->bin_b, &g->bin_b, INIT_ZEROS, model_stream(-1, 12), "binary_head.bias",
                     NCLASS, 0, -1, 1, 1);
    model_add_tensor(tb, &p->bin_w, &g->bin_w, INIT_NORMAL, model_stream(-1, 13), "binary_head.weight",
                     NCLASS, h, -1, 1, 0);
    model_add_tensor(tb, &p->pool_b, &g->pool_b, INIT_ZEROS, model_stream(-1, 14), "pooler.dense.bias", h, 0, -1, 1,
                     1);
    model_add_tensor(tb, &p->pool_w, &g->pool_w, INIT_NORMAL, model_stream(-1, 15), "pooler.dense.weight", h, h, -1,
                     1, 0);
}

static void acts(carver *cv, const gpt_model *m, void *av)
{
    struct bert_head_acts *a = av;
    int64_t BTl = (int64_t)m->mbs * m->seq_l, h = m->cfg.hidden;
    CARVE(cv, a->lm_h, float, BTl * h);
    CARVE(cv, a->lm_g, float, BTl * h);
    if (!a->lm_norm) a->lm_norm = td_xcalloc(1, norm_kind(m)->acts_size);
    norm_kind(m)->acts(cv, m, a->lm_norm);
    if (!m->cfg.binary_head) return;
    CARVE(cv, a->x_cls, float, (int64_t)m->mbs * h);
    CARVE(cv, a->cls, float, (int64_t)m->mbs * h);
    CARVE(cv, a->cls_mean, float, m->mbs);
    CARVE(cv, a->cls_rstd, float, m->mbs);
    CARVE(cv, a->pool, float, (int64_t)m->mbs * h);
    CARVE(cv, a->bin, float, (int64_t)m->mbs * NCLASS);
}

static void acts_free(void *av)
{
    struct bert_head_acts *a = av;
    free(a->lm_norm);
    a->lm_norm = NULL;
}

static void scratch(carver *cv, const gpt_model *m, void *sv)
{
    bert_scratch *s = sv;
    CARVE(cv, s->dcls, float, (int64_t)m->mbs * m->cfg.hidden);
    CARVE(cv, s->dpool, float, (int64_t)m->mbs * m->cfg.hidden);
}

static size_t host_floats(const gpt_model *m)
{
    size_t big = 3 * (size_t)m->mbs * m->seq_c, hh = 2 * (size_t)m->mbs * m->cfg.hidden;
    return big > hh ? big : hh;
}

/* The masked-LM sums of the micro-batch (host labels): loss, tokens, and tokens whose target is
 * the argmax (its logit equals the row's maximum). */
static void mlm_stats(const gpt_model *m, gpt_acts *acts, int BT)
{
    float *host = m->scratch->head_host;
    const backend *be = m->be;
    be_memcpy(be, host, acts->losses, (size_t)BT * sizeof(float), BE_D2H);
    be_memcpy(be, host + BT, acts->tlogit, (size_t)BT * sizeof(float), BE_D2H);
    be_memcpy(be, host + 2 * (size_t)BT, acts->maxv, (size_t)BT * sizeof(float), BE_D2H);
    double loss = 0, n = 0, correct = 0;
    for (int i = 0; i < BT; i++) {
        if (acts->targets_host[i] < 0) continue;
        loss += host[i];
        n += 1;
        correct += host[BT + i] >= host[2 * BT + i];
    }
    acts->stats[MLM_LOSS] = loss;
    acts->stats[MLM_TOKENS] = n;
    acts->stats[MLM_CORRECT] = correct;
}

/* Whether this rank runs the sentence-order head: with the binary head, on the context-parallel
 * rank holding position 0 (its [CLS] rows; the other cp ranks add nothing to its loss, sums or
 * gradients, which dp x cp sums). */
static int sop_here(const gpt_model *m) { return m->cfg.binary_head && m->cp_rank == 0; }

/* The pooler and the binary head on the [CLS] rows; the sentence-order sums. */
static void sop_fwd(gpt_model *m, gpt_acts *acts, const float *x)
{
    const backend *be = m->be;
    struct bert_head_acts *a = acts->head;
    int B = acts->B, h = m->cfg.hidden, holds0 = model_pos0(m) == 0;
    for (int b = 0; b < B; b++) {
        if (holds0) be_copy(be, a->x_cls + (size_t)b * h, x + (size_t)b * m->seq_l * h, (size_t)h);
        else be_zero(be, a->x_cls + (size_t)b * h, (size_t)h);
    }
    if (m->sp) xfer_allreduce(be, m->ps->tp_group, a->x_cls, (size_t)B * h, COMM_F32, COMM_SUM);
    const norm_params *lnf = m->lnf.p; /* BERT's norms are LayerNorms */
    const bert_params *p = m->head_p;
    be_layernorm_fwd(be, a->cls, a->cls_mean, a->cls_rstd, a->x_cls, lnf->w, lnf->b, B, h, gpt_norm_eps(&m->cfg));
    be_matmul_fwd(be, a->pool, a->cls, p->pool_w, p->pool_b, B, h, h);
    float *host = m->scratch->head_host;
    be_memcpy(be, host, a->pool, (size_t)B * h * sizeof(float), BE_D2H);
    for (size_t i = 0; i < (size_t)B * h; i++) host[i] = tanhf(host[i]);
    be_memcpy(be, a->pool, host, (size_t)B * h * sizeof(float), BE_H2D);
    be_matmul_fwd(be, a->bin, a->pool, p->bin_w, p->bin_b, B, h, NCLASS);
    be_memcpy(be, host, a->bin, (size_t)B * 2 * sizeof(float), BE_D2H);
    double loss = 0, correct = 0;
    for (int b = 0; b < B; b++) {
        float l0 = host[2 * b], l1 = host[2 * b + 1], mx = l0 > l1 ? l0 : l1;
        double lse = mx + log(exp((double)l0 - mx) + exp((double)l1 - mx));
        int y = acts->sample_labels[b];
        loss += lse - (y ? l1 : l0);
        correct += (l1 > l0) == (y == 1);
    }
    acts->stats[SOP_LOSS] = loss;
    acts->stats[SOP_SAMPLES] = B;
    acts->stats[SOP_CORRECT] = correct;
}

static void fwd(gpt_model *m, gpt_acts *acts, const float *x, double *loss)
{
    const bert_params *p = m->head_p;
    const backend *be = m->be;
    const comm *tp = m->ps->tp_group;
    struct bert_head_acts *a = acts->head;
    int B = acts->B, BT = B * m->seq_c, BTl = B * m->seq_l, h = m->cfg.hidden;
    memset(acts->stats, 0, sizeof acts->stats);
    const block_ops *norm = norm_kind(m);
    block_io io = model_io(m, acts, NULL, NULL);
    be_matmul_fwd_in(be, a->lm_h, kept_in(m->lnf.ops->output(acts->lnf)), p->lm_dense_w, p->lm_dense_b, BTl, h, h);
    be_act_fwd(be, m->cfg.act, 0, a->lm_g, a->lm_h, BTl, h); /* the MLP's function (HF: hidden_act), ungated */
    norm->fwd(&io, a->lm_norm, &p->lm_norm, NULL, be_f32(a->lm_g));
    tp_column_linear_fwd(be, tp, acts->logits, model_sp_input(m, norm->output(a->lm_norm), B), m->p.head_w,
                         p->lm_bias, BT, h, m->vocab_l);
    tp_cross_entropy_fwd(be, tp, acts->losses, acts->maxv, acts->sumexp, acts->tlogit, be_f32(acts->logits), acts->targets, BT,
                         m->vocab_l, m->vstart, m->cfg.vocab);
    mlm_stats(m, acts, BT);
    if (sop_here(m)) sop_fwd(m, acts, x);
    if (loss) *loss = acts->token_weight * acts->stats[MLM_LOSS] + acts->sample_weight * acts->stats[SOP_LOSS];
}

/* The sentence-order path back to the [CLS] rows: into the final norm's weights and, on the
 * rank holding position 0, into s->dres. */
static void sop_bwd(gpt_model *m, gpt_acts *acts, float scale)
{
    const backend *be = m->be;
    struct gpt_scratch *s = m->scratch;
    bert_scratch *bs = s->head;
    struct bert_head_acts *a = acts->head;
    const bert_params *p = m->head_p;
    bert_params *g = m->head_g;
    const norm_params *lnf = m->lnf.p;
    norm_params *glnf = m->lnf.g;
    int B = acts->B, h = m->cfg.hidden;
    float *host = s->head_host;
    /* d(logits) of the 2-way softmax */
    be_memcpy(be, host, a->bin, (size_t)B * 2 * sizeof(float), BE_D2H);
    for (int b = 0; b < B; b++) {
        float l0 = host[2 * b], l1 = host[2 * b + 1];
        float p1 = 1.0f / (1.0f + expf(l0 - l1)); /* softmax of the two */
        host[2 * b] = (1.0f - p1 - (acts->sample_labels[b] == 0)) * scale;
        host[2 * b + 1] = (p1 - (acts->sample_labels[b] == 1)) * scale;
    }
    be_memcpy(be, s->dloss, host, (size_t)B * 2 * sizeof(float), BE_H2D);
    be_zero(be, bs->dpool, (size_t)B * h);
    be_matmul_bwd(be, bs->dpool, g->bin_w, g->bin_b, s->dloss, a->pool, p->bin_w, B, h, NCLASS);
    /* back through tanh: d(pre) = d(out) (1 - out^2) */
    float *hp = host + (size_t)B * h;
    be_memcpy(be, host, bs->dpool, (size_t)B * h * sizeof(float), BE_D2H);
    be_memcpy(be, hp, a->pool, (size_t)B * h * sizeof(float), BE_D2H);
    for (size_t i = 0; i < (size_t)B * h; i++) host[i] *= 1.0f - hp[i] * hp[i];
    be_memcpy(be, bs->dpool, host, (size_t)B * h * sizeof(float), BE_H2D);
    be_zero(be, bs->dcls, (size_t)B * h);
    be_matmul_bwd(be, bs->dcls, g->pool_w, g->pool_b, bs->dpool, a->cls, p->pool_w, B, h, h);
    if (model_pos0(m) != 0) return;
    be_zero(be, bs->dpool, (size_t)B * h); /* now d(x_cls) */
    be_layernorm_bwd(be, bs->dpool, glnf->w, glnf->b, bs->dcls, a->x_cls, lnf->w, a->cls_mean, a->cls_rstd, B, h);
    for (int b = 0; b < B; b++) {
        float *row = s->dres + (size_t)b * m->seq_l * h;
        be_add(be, row, row, bs->dpool + (size_t)b * h, (size_t)h);
    }
}

static void bwd(gpt_model *m, gpt_acts *acts, const float *x, float loss_scale)
{
    const bert_params *p = m->head_p;
    bert_params *g = m->head_g;
    const block_ops *norm = norm_kind(m);
    block_io io = model_io(m, acts, NULL, NULL);
    const backend *be = m->be;
    struct gpt_scratch *s = m->scratch;
    struct bert_head_acts *a = acts->head;
    int B = acts->B, BT = B * m->seq_c, BTl = B * m->seq_l, h = m->cfg.hidden;
    float w = loss_scale * acts->token_weight;
    for (int i = 0; i < BT; i++) s->host[i] = acts->targets_host[i] >= 0 ? w : 0.0f;
    be_memcpy(be, s->dloss, s->host, (size_t)BT * sizeof(float), BE_H2D);
    be_ce_bwd(be, acts->logits, acts->maxv, acts->sumexp, acts->targets, s->dloss, BT, m->vocab_l,
              be_vocab_real(m->cfg.vocab, m->vstart, m->vocab_l), m->vstart);
    tp_column_linear_bwd(be, model_tp_reduce(m), s->dln, m->g.head_w, g->lm_bias, acts->logits,
                         model_sp_input(m, norm->output(a->lm_norm), B), m->p.head_w, BT, h, m->vocab_l);
    const float *dnorm = model_sp_norm_grad(m, B);
    be_zero(be, s->dtmp, (size_t)BTl * h);
    norm->bwd(&io, s->dtmp, &g->lm_norm, dnorm, a->lm_norm, &p->lm_norm, be_f32(a->lm_g));
    be_zero(be, s->branch, (size_t)BTl * h);
    be_act_bwd(be, m->cfg.act, 0, s->branch, s->dtmp, a->lm_h, BTl, h);
    be_zero(be, s->dtmp, (size_t)BTl * h);
    be_matmul_bwd_in(be, s->dtmp, g->lm_dense_w, g->lm_dense_b, s->branch, kept_in(m->lnf.ops->output(acts->lnf)),
                     p->lm_dense_w, BTl, h, h);
    be_zero(be, s->dres, (size_t)BTl * h);
    m->lnf.ops->bwd(&io, s->dres, m->lnf.g, s->dtmp, acts->lnf, m->lnf.p, be_f32(x));
    if (sop_here(m)) sop_bwd(m, acts, loss_scale * acts->sample_weight);
}

/* The LM head's transform runs on this rank's positions: its gradients are summed over the
 * tensor-parallel group (as for every sequence-parallel norm). */
static void sp_sum(const gpt_model *m)
{
    bert_params *g = m->head_g;
    size_t h = (size_t)m->cfg.hidden;
    model_sp_sum(m, g->lm_norm.w, h);
    if (g->lm_norm.b) model_sp_sum(m, g->lm_norm.b, h);
    model_sp_sum(m, g->lm_dense_w, h * h);
    model_sp_sum(m, g->lm_dense_b, h);
}

/* The masked-LM mean and accuracy over the masked tokens, the sentence-order ones over the samples
 * (none without the binary head). */
static int metrics(const double *st, double *loss, gpt_metric *out)
{
    double tokens = st[MLM_TOKENS] > 0 ? st[MLM_TOKENS] : 1, n = st[SOP_SAMPLES];
    *loss = st[MLM_LOSS] / tokens;
    int k = 0;
    out[k++] = (gpt_metric){"lm_acc", "lm acc", "%.4f", st[MLM_CORRECT] / tokens};
    if (n > 0) {
        out[k++] = (gpt_metric){"sop_loss", "sop loss", "%.6E", st[SOP_LOSS] / n};
        out[k++] = (gpt_metric){"sop_acc", "sop acc", "%.4f", st[SOP_CORRECT] / n};
    }
    return k;
}

/* The batches carry their weights: the micro-batches' losses sum to the mean already. */
static double loss_divisor(const gpt_config *c, int64_t global_batch)
{
    (void)c, (void)global_batch;
    return 1.0;
}

const head_ops mlm_sop_head_ops = {
    .name = "BERT heads", .params_size = sizeof(bert_params), .acts_size = sizeof(struct bert_head_acts),
    .tensors = tensors, .acts = acts, .acts_free = acts_free, .scratch = scratch, .scratch_size = sizeof(bert_scratch),
    .host_floats = host_floats, .fwd = fwd, .bwd = bwd, .sp_sum = sp_sum, .nstats = NSTATS,
    .stat_names = {"mlm_loss", "mlm_tokens", "mlm_correct", "sop_loss", "sop_samples", "sop_correct"},
    .metrics = metrics, .loss_divisor = loss_divisor, .loss_name = "lm + sop loss", .transform = 1,
};
