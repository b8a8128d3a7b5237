/* Embedding block: vocab-parallel word embedding (out-of-slice ids masked, then all-reduced
 * over tp) plus learned absolute positions (GPT-2, BERT; rotary models have none here) plus
 * BERT's token types (replicated, two rows), then dropout. See model_impl.h. */
#include "model_impl.h"

#include "tensor_parallel.h"

void embedding_tensors(table_builder *tb, gpt_model *m)
{
    const gpt_config *c = &m->cfg;
    int64_t h = c->hidden, V = c->padded_vocab;
    if (gpt_is_bert(c))
        model_add_tensor(tb, &m->p.tte, &m->g.tte, INIT_NORMAL, model_stream(-1, 6), "embedding.tokentype.weight",
                         GPT_BERT_TOKENTYPES, h, -1, 1, 0);
    if (c->pos == GPT_POS_LEARNED)
        model_add_tensor(tb, &m->p.wpe, &m->g.wpe, INIT_NORMAL, model_stream(-1, 2), "embedding.position.weight",
                         c->max_pos, h, -1, 1, 0);
    model_add_tensor(tb, &m->p.wte, &m->g.wte, INIT_NORMAL, model_stream(-1, 1), "embedding.word.weight", V, h, 0, 1,
                     0);
}

/* Under sequence parallelism the vocab-parallel lookup's all-reduce becomes a reduce-scatter:
 * out holds this rank's positions (B, seq_l, h), and the positions and dropout act on them. */
void embedding_fwd(gpt_model *m, float *out, const int32_t *ids, const int32_t *types, int B, const be_drop *d)
{
    int T = m->seq_l, h = m->cfg.hidden, pos0 = model_pos0(m);
    if (m->sp) {
        struct gpt_scratch *s = m->scratch;
        be_embedding_fwd(m->be, s->branch, ids, m->p.wte, B * m->cfg.seq, h, m->vstart, m->vocab_l);
        tp_sp_scatter(m->be, m->ps->tp_group, out, s->branch, s->sptmp, B, m->cfg.seq, h);
    } else {
        tp_embedding_fwd(m->be, m->ps->tp_group, out, ids, m->p.wte, B * T, h, m->vstart, m->vocab_l);
    }
    if (m->p.wpe) be_pos_embedding_fwd(m->be, out, m->p.wpe, B, T, h, pos0);
    if (m->p.tte) { /* a lookup into scratch, added */
        float *tt = m->scratch->branch;
        be_embedding_fwd(m->be, tt, types, m->p.tte, B * T, h, 0, GPT_BERT_TOKENTYPES);
        be_add(m->be, out, out, tt, (size_t)B * T * h);
    }
    be_drop dl = *d;
    dl.pos0 = pos0;
    be_dropout_fwd(m->be, out, out, B, T, h, &dl);
}

void embedding_bwd(gpt_model *m, float *dout, const int32_t *ids, const int32_t *types, int B, const be_drop *d)
{
    int T = m->seq_l, h = m->cfg.hidden, pos0 = model_pos0(m);
    be_drop dl = *d;
    dl.pos0 = pos0;
    be_dropout_bwd(m->be, dout, dout, B, T, h, &dl);
    if (m->g.wpe) be_pos_embedding_bwd(m->be, m->g.wpe, dout, B, T, h, pos0);
    if (m->g.tte) be_embedding_bwd(m->be, m->g.tte, dout, types, B * T, h, 0, GPT_BERT_TOKENTYPES);
    if (m->sp) { /* every position's gradient, for this rank's vocabulary rows */
        struct gpt_scratch *s = m->scratch;
        tp_sp_gather(m->be, m->ps->tp_group, s->dgath, dout, s->sptmp, B, m->cfg.seq, h);
        dout = s->dgath;
    }
    be_embedding_bwd(m->be, m->g.wte, dout, ids, B * m->cfg.seq, h, m->vstart, m->vocab_l);
}
