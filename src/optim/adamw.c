/* The AdamW optimizer over a model's flat buffers: see opt_adamw in include/trident/optim.h. */
#include <math.h>
#include <stdlib.h>

#include "trident/check.h"
#include "trident/optim.h"

opt_adamw *opt_adamw_create(const backend *be, const ps_state *ps, gpt_model *const *chunks, int nchunks,
                            const opt_adamw_hparams *hp)
{
    TD_ASSERT(nchunks >= 1 && nchunks <= OPT_MAX_CHUNKS);
    opt_adamw *o = td_xcalloc(1, sizeof *o);
    o->be = be;
    o->ps = ps;
    o->nchunks = nchunks;
    o->hp = *hp;
    for (int c = 0; c < nchunks; c++) {
        gpt_model *m = chunks[c];
        o->chunks[c] = m;
        o->m[c] = be_alloc(be, m->numel * sizeof(float));
        o->v[c] = be_alloc(be, m->numel * sizeof(float));
        be_zero(be, o->m[c], m->numel);
        be_zero(be, o->v[c], m->numel);
    }
    return o;
}

void opt_adamw_free(opt_adamw *o)
{
    if (!o) return;
    for (int c = 0; c < o->nchunks; c++) {
        be_dfree(o->be, o->m[c]);
        be_dfree(o->be, o->v[c]);
    }
    free(o);
}

double opt_grad_norm(const opt_adamw *o)
{
    double ss = 0;
    for (int c = 0; c < o->nchunks; c++) {
        const gpt_model *m = o->chunks[c];
        for (int i = 0; i < m->ntensors; i++) {
            const gpt_tensor_info *t = &m->table[i];
            if (t->embedding_copy) continue;                         /* the first stage's counts */
            if (t->tp_replicated && o->ps->tp_rank != 0) continue;   /* one copy of norms and biases */
            ss += be_sumsq(o->be, m->grads + t->offset, t->numel);
        }
    }
    comm_allreduce(o->ps->mp_group, &ss, 1, COMM_F64, COMM_SUM);
    return sqrt(ss);
}

void opt_adamw_step(opt_adamw *o, double lr, double gscale, int64_t step)
{
    const opt_adamw_hparams *hp = &o->hp;
    for (int c = 0; c < o->nchunks; c++) {
        gpt_model *m = o->chunks[c];
        for (int i = 0; i < m->ntensors; i++) {
            const gpt_tensor_info *t = &m->table[i];
            float wd = t->no_decay ? 0.0f : (float)hp->weight_decay;
            be_adamw(o->be, m->params + t->offset, m->grads + t->offset, o->m[c] + t->offset, o->v[c] + t->offset,
                     t->numel, (float)lr, (float)hp->beta1, (float)hp->beta2, (float)hp->eps, wd, (float)gscale,
                     step);
        }
    }
}
