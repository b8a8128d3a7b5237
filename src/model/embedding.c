/* Embedding block: vocab-parallel word embedding (out-of-slice ids masked, then all-reduced
 * over tp) plus learned absolute positions (GPT-2; rotary models have none here), then dropout.
 * See model_impl.h. */
#include "model_impl.h"

#include "trident/tensor_parallel.h"

void embedding_tensors(table_builder *tb, gpt_model *m)
{
    const gpt_config *c = &m->cfg;
    int64_t h = c->hidden, V = c->padded_vocab;
    if (c->pos == GPT_POS_LEARNED)
        model_add_tensor(tb, &m->p.wpe, &m->g.wpe, INIT_NORMAL, model_stream(-1, 2), "embedding.position.weight",
                         c->max_pos, h, -1, 1, 0);
    model_add_tensor(tb, &m->p.wte, &m->g.wte, INIT_NORMAL, model_stream(-1, 1), "embedding.word.weight", V, h, 0, 1,
                     0);
}

void embedding_fwd(gpt_model *m, float *out, const int32_t *ids, int B, const be_drop *d)
{
    int T = m->cfg.seq, h = m->cfg.hidden;
    tp_embedding_fwd(m->be, m->ps->tp_group, out, ids, m->p.wte, B * T, h, m->vstart, m->vocab_l);
    if (m->p.wpe) be_pos_embedding_fwd(m->be, out, m->p.wpe, B, T, h, 0);
    be_dropout_fwd(m->be, out, out, B, T, h, d);
}

void embedding_bwd(gpt_model *m, float *dout, const int32_t *ids, int B, const be_drop *d)
{
    int T = m->cfg.seq, h = m->cfg.hidden;
    be_dropout_bwd(m->be, dout, dout, B, T, h, d);
    if (m->g.wpe) be_pos_embedding_bwd(m->be, m->g.wpe, dout, B, T, h, 0);
    be_embedding_bwd(m->be, m->g.wte, dout, ids, B * T, h, m->vstart, m->vocab_l);
}
