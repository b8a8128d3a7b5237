/* The AdamW optimizer over a model's flat buffers: see opt_adamw in include/optim/trident/optim.h. */
#include <math.h>
#include <stdlib.h>

#include "backend.h"
#include "trident/check.h"
#include "trident/optim.h"

opt_adamw *opt_adamw_create(const backend *be, const ps_state *ps, gpt_model *const *chunks, int nchunks,
                            const opt_shard *shards, int sharded, const opt_adamw_hparams *hp)
{
    TD_ASSERT(nchunks >= 1 && nchunks <= PS_MAX_CHUNKS);
    opt_adamw *o = td_xcalloc(1, sizeof *o);
    o->be = be;
    o->ps = ps;
    o->nchunks = nchunks;
    o->sharded = sharded;
    o->hp = *hp;
    for (int c = 0; c < nchunks; c++) {
        o->chunks[c] = chunks[c];
        o->shard[c] = shards[c];
        size_t n = 0;
        for (int k = 0; k < shards[c].nranges; k++) n += shards[c].ranges[k].n;
        o->state_numel[c] = n;
        o->m[c] = be_alloc(be, (n ? n : 1) * sizeof(float));
        o->v[c] = be_alloc(be, (n ? n : 1) * sizeof(float));
        be_zero(be, o->m[c], n);
        be_zero(be, o->v[c], n);
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

size_t opt_adamw_state_numel(const opt_adamw *o)
{
    size_t n = 0;
    for (int c = 0; c < o->nchunks; c++) n += 2 * o->state_numel[c];
    return n;
}

/* The part of tensor t inside range r: [*lo, *lo + *n) of the buffer; 0 when none. */
static int overlap(const gpt_tensor_info *t, const dp_range *r, size_t *lo, size_t *n)
{
    size_t a = t->offset > r->lo ? t->offset : r->lo;
    size_t b = t->offset + t->numel < r->lo + r->n ? t->offset + t->numel : r->lo + r->n;
    if (a >= b) return 0;
    *lo = a;
    *n = b - a;
    return 1;
}

double opt_grad_norm(const opt_adamw *o)
{
    /* every slice to sum, in order, then their sums in one call (a device waits once, not once a
     * tensor), added up in that order */
    int cap = 0, count = 0;
    for (int c = 0; c < o->nchunks; c++) cap += o->shard[c].nranges * o->chunks[c]->ntensors;
    const float **x = td_xmalloc((size_t)(cap ? cap : 1) * sizeof *x);
    size_t *len = td_xmalloc((size_t)(cap ? cap : 1) * sizeof *len);
    signed char *kind = td_xmalloc((size_t)(cap ? cap : 1)); /* 0 counted, 1 counted expert, 2 checked only */
    for (int c = 0; c < o->nchunks; c++) {
        const gpt_model *m = o->chunks[c];
        const opt_shard *sh = &o->shard[c];
        for (int k = 0; k < sh->nranges; k++) {
            const dp_range *r = &sh->ranges[k];
            for (int i = 0; i < m->ntensors; i++) {
                const gpt_tensor_info *t = &m->table[i];
                size_t lo, n;
                if (!overlap(t, r, &lo, &n)) continue;
                /* the first stage counts the embedding; tp rank 0 the norms and biases */
                int counted = !t->embedding_copy && !(t->tp_replicated && o->ps->tp_rank != 0);
                if (!counted && !o->check_all_finite) continue;
                x[count] = sh->grads + r->shard + (lo - r->lo);
                len[count] = n;
                kind[count++] = (signed char)(counted ? (t->expert ? 1 : 0) : 2);
            }
        }
    }
    double *sums = td_xmalloc((size_t)(count ? count : 1) * sizeof *sums);
    be_sumsq_many(o->be, sums, x, len, count);
    double ss = 0, sx = 0; /* the experts' apart: under expert parallelism each rank holds its own */
    for (int i = 0; i < count; i++) {
        if (kind[i] == 0) ss += sums[i];
        else if (kind[i] == 1) sx += sums[i];
        else if (!isfinite(sums[i])) ss = INFINITY; /* an overflow anywhere skips the step everywhere */
    }
    free(x), free(len), free(kind), free(sums);
    /* distributed: the shards over dp hold every element once (the experts' too: their shards over
     * the expert-data-parallel group times the expert-parallel ranks' experts); plain: the experts
     * are summed over the expert-parallel group */
    if (!o->sharded && o->ps->ep_group) comm_allreduce(o->ps->ep_group, &sx, 1, COMM_F64, COMM_SUM);
    ss += sx;
    if (o->sharded) comm_allreduce(o->ps->dpcp_group, &ss, 1, COMM_F64, COMM_SUM);
    comm_allreduce(o->ps->mp_group, &ss, 1, COMM_F64, COMM_SUM);
    return sqrt(ss);
}

void opt_adamw_step(opt_adamw *o, double lr, double gscale, int64_t step)
{
    /* every slice, then one call (a device runs them in a launch or two, not a launch a tensor) */
    const opt_adamw_hparams *hp = &o->hp;
    int cap = 0, count = 0;
    for (int c = 0; c < o->nchunks; c++) cap += o->shard[c].nranges * o->chunks[c]->ntensors;
    size_t k1 = (size_t)(cap ? cap : 1);
    float **p = td_xmalloc(k1 * sizeof *p), **mm = td_xmalloc(k1 * sizeof *mm), **vv = td_xmalloc(k1 * sizeof *vv);
    const float **g = td_xmalloc(k1 * sizeof *g);
    size_t *len = td_xmalloc(k1 * sizeof *len);
    float *wd = td_xmalloc(k1 * sizeof *wd);
    for (int c = 0; c < o->nchunks; c++) {
        gpt_model *m = o->chunks[c];
        const opt_shard *sh = &o->shard[c];
        for (int k = 0; k < sh->nranges; k++) {
            const dp_range *r = &sh->ranges[k];
            for (int i = 0; i < m->ntensors; i++) {
                const gpt_tensor_info *t = &m->table[i];
                size_t lo, n;
                if (!overlap(t, r, &lo, &n)) continue;
                size_t s = r->shard + (lo - r->lo); /* in the shard: gradients and moments */
                p[count] = m->params + lo, g[count] = sh->grads + s, mm[count] = o->m[c] + s, vv[count] = o->v[c] + s;
                len[count] = n;
                wd[count++] = t->no_decay ? 0.0f : (float)hp->weight_decay;
            }
        }
    }
    be_adamw_many(o->be, p, g, mm, vv, len, wd, count, (float)lr, (float)hp->beta1, (float)hp->beta2, (float)hp->eps,
                  (float)gscale, step);
    free(p), free(g), free(mm), free(vv), free(len), free(wd);
}

double opt_unscaled_grad_norm(const opt_adamw *o, double scale)
{
    return opt_grad_norm(o) / scale;
}

int opt_adamw_step_scaled(opt_adamw *o, double lr, double norm, double max_norm, double scale, int64_t step)
{
    if (!isfinite(norm)) return 0;
    opt_adamw_step(o, lr, opt_clip_factor(norm, max_norm) / scale, step);
    return 1;
}
