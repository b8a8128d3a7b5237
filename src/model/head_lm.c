/* The LM head and its loss (GPT, Llama): the output layer on the final norm's output,
 * vocab-parallel (tied to the word embedding, or its own tensor), and the vocab-parallel
 * next-token cross-entropy over every position (or over the positions a batch's loss mask
 * counts, weighted by its token weight: --eod-mask-loss). See head_ops in model_impl.h. */
#include <string.h>

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

/* The losses kept on the device (take_losses): up to KEPT micro-batches' per-token losses, copied
 * there by the forward (enqueued, no wait) and read by one copy when they are taken or the buffer
 * is full; the sum of those read so far. */
#define KEPT 8
typedef struct {
    float *dev;                    /* (KEPT, mbs * seq_c) device */
    int n;                         /* kept, not yet read */
    int bt[KEPT];                  /* each one's tokens */
    const float *mask[KEPT];       /* its loss mask (copied: a batch's may be staging reused by the
                                    * next, as context parallelism's cut of it is) or NULL */
    double weight[KEPT];           /* its token weight */
    double sum;                    /* the losses read since the last take, added in order */
} lm_scratch;

static void scratch(carver *cv, const gpt_model *m, void *sv)
{
    lm_scratch *k = sv;
    CARVE(cv, k->dev, float, (int64_t)KEPT * m->mbs * m->seq_c);
}
/* The kept losses' staging for their read, then the kept masks' copies: (2 KEPT, mbs * seq_c). */
static size_t host_floats(const gpt_model *m) { return (size_t)2 * KEPT * m->mbs * m->seq_c; }

/* A micro-batch's loss from its per-token losses (host): their sum, or under a loss mask the
 * counted tokens' weighted to the global batch's mean (--eod-mask-loss). */
static double loss_of(const float *host, int BT, const float *mask, double token_weight)
{
    double sum = 0;
    if (mask) {
        for (int i = 0; i < BT; i++) sum += mask[i] * (double)host[i];
        return token_weight * sum;
    }
    for (int i = 0; i < BT; i++) sum += host[i];
    return sum;
}

/* Reads the kept losses (one copy: waits for the device) and adds each micro-batch's to the sum. */
static void flush_losses(gpt_model *m)
{
    lm_scratch *k = m->scratch->head;
    if (!k->n) return;
    size_t per = (size_t)m->mbs * m->seq_c;
    float *host = m->scratch->head_host;
    be_memcpy(m->be, host, k->dev, ((size_t)(k->n - 1) * per + (size_t)k->bt[k->n - 1]) * sizeof(float), BE_D2H);
    for (int i = 0; i < k->n; i++) k->sum += loss_of(host + (size_t)i * per, k->bt[i], k->mask[i], k->weight[i]);
    k->n = 0;
}

static void keep_losses(gpt_model *m, const gpt_acts *a, int BT)
{
    lm_scratch *k = m->scratch->head;
    if (k->n == KEPT) flush_losses(m);
    size_t per = (size_t)m->mbs * m->seq_c;
    be_copy(m->be, k->dev + (size_t)k->n * per, a->losses, (size_t)BT);
    k->bt[k->n] = BT;
    k->mask[k->n] = NULL;
    if (a->loss_mask) {
        float *copy = m->scratch->head_host + (size_t)(KEPT + k->n) * per;
        memcpy(copy, a->loss_mask, (size_t)BT * sizeof(float));
        k->mask[k->n] = copy;
    }
    k->weight[k->n] = a->token_weight;
    k->n++;
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
    if (m->defer_losses) {
        keep_losses(m, a, BT);
        return;
    }
    float *host = m->scratch->host;
    be_memcpy(be, host, a->losses, (size_t)BT * sizeof(float), BE_D2H);
    *loss = loss_of(host, BT, a->loss_mask, a->token_weight);
}

static void take_losses(gpt_model *m, double *loss)
{
    lm_scratch *k = m->scratch->head;
    flush_losses(m);
    *loss += k->sum;
    k->sum = 0;
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
    .name = "LM head", .tensors = tensors, .acts = acts, .scratch = scratch, .scratch_size = sizeof(lm_scratch),
    .host_floats = host_floats, .fwd = fwd, .take_losses = take_losses, .bwd = bwd, .loss_divisor = loss_divisor,
    .loss_name = NULL, /* "lm loss", with its perplexity */
};
