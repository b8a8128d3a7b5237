/* Embedding: vocab-parallel word embedding (out-of-slice ids masked, then all-reduced over tp)
 * plus learned absolute positions (when the config has them; rotary models have none here; a
 * packed batch's positions restart at each document: the rows its position array names) plus
 * token types (when it has them: replicated rows), then dropout. See model_impl.h. */
#include "model_impl.h"

#include "tensor_parallel.h"

/* In buffer order (token types, positions, words), or in the canonical order (words,
 * positions, token types). */
static void tensors(table_builder *tb, gpt_tensors *p, gpt_tensors *g, int canonical)
{
    const gpt_config *c = tb->cfg;
    int64_t h = c->hidden, V = c->padded_vocab;
    for (int k = 0; k < 3; k++)
        switch (canonical ? 2 - k : k) {
        case 0:
            if (gpt_tokentypes(c))
                model_add_tensor(tb, &p->tte, &g->tte, INIT_NORMAL, model_stream(-1, 6), "embedding.tokentype.weight",
                                 gpt_tokentypes(c), h, -1, 1, 0);
            break;
        case 1:
            if (c->pos == GPT_POS_LEARNED)
                model_add_tensor(tb, &p->wpe, &g->wpe, INIT_NORMAL, model_stream(-1, 2), "embedding.position.weight",
                                 c->max_pos, h, -1, 1, 0);
            break;
        default:
            model_add_tensor(tb, &p->wte, &g->wte, INIT_NORMAL, model_stream(-1, 1), "embedding.word.weight", V, h, 0,
                             1, 0);
        }
}

/* Under sequence parallelism the vocab-parallel lookup's all-reduce becomes a reduce-scatter:
 * out holds this rank's positions (B, seq_l, h), and the positions and dropout act on them. */
static void fwd(gpt_model *m, float *out, const int32_t *ids, const int32_t *types, const int32_t *pos, int B,
                const be_drop *d)
{
    int T = m->seq_l, h = m->cfg.hidden, pos0 = model_pos0(m);
    if (m->sp) {
        struct gpt_scratch *s = m->scratch;
        be_embedding_fwd(m->be, s->branch, ids, m->p.wte, B * m->seq_c, h, m->vstart, m->vocab_l);
        tp_sp_scatter(m->be, m->ps->tp_group, out, s->branch, s->sptmp, B, m->seq_c, h);
    } else {
        tp_embedding_fwd(m->be, m->ps->tp_group, out, ids, m->p.wte, B * T, h, m->vstart, m->vocab_l);
    }
    if (m->p.wpe && !pos) be_pos_embedding_fwd(m->be, out, m->p.wpe, B, T, h, pos0);
    if (m->p.wpe && pos) { /* packed documents: each token's row of the table, looked up and added */
        float *pe = m->scratch->branch;
        be_embedding_fwd(m->be, pe, pos, m->p.wpe, B * T, h, 0, m->cfg.max_pos);
        be_add(m->be, out, out, pe, (size_t)B * T * h);
    }
    if (m->p.tte) { /* a lookup into scratch, added */
        float *tt = m->scratch->branch;
        be_embedding_fwd(m->be, tt, types, m->p.tte, B * T, h, 0, gpt_tokentypes(&m->cfg));
        be_add(m->be, out, out, tt, (size_t)B * T * h);
    }
    be_drop dl = *d;
    dl.pos0 = pos0;
    be_dropout_fwd(m->be, out, out, B, T, h, &dl);
}

static void bwd(gpt_model *m, float *dout, const int32_t *ids, const int32_t *types, const int32_t *pos, int B,
                const be_drop *d)
{
    int T = m->seq_l, h = m->cfg.hidden, pos0 = model_pos0(m);
    if (!m->g.wte) return; /* LoRA: the embeddings frozen, nothing to compute */
    be_drop dl = *d;
    dl.pos0 = pos0;
    be_dropout_bwd(m->be, dout, dout, B, T, h, &dl);
    if (m->g.wpe && !pos) be_pos_embedding_bwd(m->be, m->g.wpe, dout, B, T, h, pos0);
    if (m->g.wpe && pos) be_embedding_bwd(m->be, m->g.wpe, dout, pos, B * T, h, 0, m->cfg.max_pos);
    if (m->g.tte) be_embedding_bwd(m->be, m->g.tte, dout, types, B * T, h, 0, gpt_tokentypes(&m->cfg));
    if (m->sp) { /* every position's gradient, for this rank's vocabulary rows */
        struct gpt_scratch *s = m->scratch;
        tp_sp_gather(m->be, m->ps->tp_group, s->dgath, dout, s->sptmp, B, m->seq_c, h);
        dout = s->dgath;
    }
    be_embedding_bwd(m->be, m->g.wte, dout, ids, B * m->seq_c, h, m->vstart, m->vocab_l);
}

const embedding_ops embedding_block = {tensors, fwd, bwd};
