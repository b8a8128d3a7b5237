/* The LM head and its loss (GPT, Llama): the output layer on the final norm's output,
 * vocab-parallel (tied to the word embedding, or its own tensor), and the vocab-parallel
 * next-token cross-entropy over every position (or over the positions a batch's loss mask
 * counts, weighted by its token weight: --eod-mask-loss). See head_ops in model_impl.h. */
#include "model_impl.h"

#include "tensor_parallel.h"

/* The output layer: the untied output weight, or the copy of the word embedding that a tied
 * model keeps on its last stage (same stream, so it starts equal). */
static void tensors(table_builder *tb, gpt_model *m, int output)
{
    int64_t h = m->cfg.hidden, V = m->cfg.padded_vocab;
    int untied = m->cfg.untied;
    if (!output) return;
    model_add_tensor(tb, &m->p.head_w, &m->g.head_w, INIT_NORMAL, model_stream(-1, untied ? 5 : 1),
                     untied ? "output_layer.weight" : "embedding.word.weight", V, h, 0, 1, 0);
    if (!untied) tb->table[tb->n - 1].embedding_copy = 1;
}

static void acts(carver *cv, const gpt_model *m, void *a)
{
    (void)cv, (void)m, (void)a; /* the logits and losses are the stage's (gpt_acts) */
}

/* The dtype of a micro-batch's logits: a training step's in the GEMMs' 16-bit dtype where the
 * backend's activations may be 16-bit and its cross-entropy writes the gradient out of place
 * (ce_bwd_to: logits are never overwritten), as Megatron and llm.c keep them — the largest
 * activation (tokens x vocabulary) written once and read twice at half the bytes; the softmax,
 * the loss and the gradient are still computed in fp32 from them. fp32 otherwise: validation,
 * evaluation (which reads them back) and the cpu. */
static be_dtype logits_dtype(const gpt_model *m, const gpt_acts *a)
{
    const backend *be = m->be;
    be_dtype dt = be->gemm_dtype;
    return a->training && dt != BE_F32 && be_acts_in(be, dt) && be->ops->ce_bwd_to ? dt : BE_F32;
}

static void fwd(gpt_model *m, gpt_acts *a, const float *x, double *loss)
{
    const backend *be = m->be;
    const comm *tp = m->ps->tp_group;
    int B = a->B, BT = B * m->seq_c, h = m->cfg.hidden;
    (void)x;
    a->logits_dt = logits_dtype(m, a);
    be_out lo = {a->logits, a->logits_dt};
    be_in li = {a->logits, a->logits_dt};
    tp_column_linear_fwd_to(be, tp, lo, model_sp_input(m, m->lnf.ops->output(a->lnf), B), m->p.head_w, NULL, BT, h,
                            m->vocab_l);
    tp_cross_entropy_fwd(be, tp, a->losses, a->maxv, a->sumexp, a->tlogit, li, a->targets, BT, m->vocab_l, m->vstart,
                         m->cfg.vocab);
    if (!loss) return;
    float *host = m->scratch->host;
    be_memcpy(be, host, a->losses, (size_t)BT * sizeof(float), BE_D2H);
    double sum = 0;
    if (a->loss_mask) { /* --eod-mask-loss: the counted tokens', weighted to the global batch's mean */
        for (int i = 0; i < BT; i++) sum += a->loss_mask[i] * (double)host[i];
        *loss = a->token_weight * sum;
        return;
    }
    for (int i = 0; i < BT; i++) sum += host[i];
    *loss = sum;
}

static void bwd(gpt_model *m, gpt_acts *a, const float *x, float loss_scale)
{
    const backend *be = m->be;
    struct gpt_scratch *s = m->scratch;
    int B = a->B, BT = B * m->seq_c, h = m->cfg.hidden;
    if (a->loss_mask)
        for (int i = 0; i < BT; i++) s->host[i] = loss_scale * a->token_weight * a->loss_mask[i];
    else
        for (int i = 0; i < BT; i++) s->host[i] = loss_scale;
    be_memcpy(be, s->dloss, s->host, (size_t)BT * sizeof(float), BE_H2D);
    const kept_buf *out = m->lnf.ops->output(a->lnf);
    be_out lo = {a->logits, a->logits_dt};
    tp_column_linear_ce_bwd(be, model_tp_reduce(m), s->dln, m->g.head_w, lo, a->maxv, a->sumexp, a->targets,
                            s->dloss, model_sp_input(m, out, B), m->p.head_w, BT, h, m->vocab_l,
                            be_vocab_real(m->cfg.vocab, m->vstart, m->vocab_l), m->vstart);
    be_zero(be, s->dres, (size_t)B * m->seq_l * h);
    block_io io = model_io(m, a, NULL, NULL);
    m->lnf.ops->bwd(&io, s->dres, m->lnf.g, model_sp_norm_grad(m, B), a->lnf, m->lnf.p, be_f32(x));
}

/* The mean over the tokens of the global batch. */
static double loss_divisor(const gpt_config *c, int64_t global_batch) { return (double)global_batch * c->seq; }

const head_ops lm_head_ops = {
    .name = "LM head", .tensors = tensors, .acts = acts, .fwd = fwd, .bwd = bwd, .loss_divisor = loss_divisor,
    .loss_name = NULL, /* "lm loss", with its perplexity */
};
