/* What every piece of a stage (layers, blocks' callers, heads) shares and the stage itself
 * does not need to be called for: dropout keys, a block's io, sequence parallelism's f with its
 * backward, and the sums of the gradients of what ran on this rank's positions. */
#include "model_impl.h"

#include "trident/check.h"
#include "tensor_parallel.h"

be_drop model_drop(const gpt_model *m, const gpt_acts *a, float p, int site, int unit0)
{
    be_drop d = {.p = p, .seed = m->cfg.seed, .sample = a->sample, .site = site, .unit0 = unit0};
    if (m->cp > 1) /* this rank's tokens are two chunks of the sequence: the masks by their global positions */
        d.cp_chunk = m->seq_c / 2, d.cp_c0 = m->cp_rank, d.cp_c1 = 2 * m->cp - 1 - m->cp_rank;
    return d;
}

block_io model_io(gpt_model *m, const gpt_acts *acts, void *scratch, const be_drop *drop)
{
    block_io io = {.m = m, .B = acts->B, .klen = acts->klen, .drop = drop, .scratch = scratch, .seg = acts->seg, .pos = acts->pos};
    return io;
}

be_in model_sp_input(gpt_model *m, const kept_buf *x, int B)
{
    if (!m->sp) return kept_in(x);
    struct gpt_scratch *s = m->scratch;
    TD_ASSERT(x->dt == BE_F32); /* norm outputs stay fp32 under sequence parallelism */
    tp_sp_gather(m->be, m->ps->tp_group, s->gath, x->p, s->sptmp, B, m->seq_c, m->cfg.hidden);
    return be_f32(s->gath);
}

const float *model_sp_norm_grad(gpt_model *m, int B)
{
    struct gpt_scratch *s = m->scratch;
    if (!m->sp) return s->dln;
    tp_sp_scatter(m->be, m->ps->tp_group, s->dln_l, s->dln, s->sptmp, B, m->seq_c, m->cfg.hidden);
    return s->dln_l;
}

void model_sp_sum(const gpt_model *m, float *g, size_t n)
{
    if (!m->sp || !m->grads_final || !g) return; /* g NULL: a frozen tensor (LoRA's base) */
    xfer_allreduce(m->be, m->ps->tp_group, g, n, COMM_F32, COMM_SUM);
}

void model_sp_sum_slot(const gpt_model *m, const block_slot *s)
{
    if (!m->sp || !m->grads_final || !s->ops->seq_local) return;
    for (int t = s->t0; t < s->t1; t++) /* (LoRA's frozen tensors have no gradient) */
        if (!m->table[t].frozen) model_sp_sum(m, m->grads + m->table[t].offset, m->table[t].numel);
}
