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

/* One slice of the optimizer's work: tensor t of chunk c inside one of the shard's ranges, at lo
 * (n elements) of the chunk's flat buffers and at s in the shard's (gradients, moments). */
typedef struct {
    int c;
    const gpt_tensor_info *t;
    size_t lo, n, s;
} opt_slice;

/* Every slice, in order (chunks, their ranges, their tensors); *count set. free() the array. */
static opt_slice *opt_slices(const opt_adamw *o, int *count)
{
    int cap = 0;
    for (int c = 0; c < o->nchunks; c++) cap += o->shard[c].nranges * o->chunks[c]->ntensors;
    opt_slice *sl = td_xmalloc((size_t)(cap ? cap : 1) * sizeof *sl);
    *count = 0;
    for (int c = 0; c < o->nchunks; c++) {
        const gpt_model *m = o->chunks[c];
        const opt_shard *sh = &o->shard[c];
        for (int k = 0; k < sh->nranges; k++) {
            const dp_range *r = &sh->ranges[k];
            for (int i = 0; i < m->ntensors; i++) {
                opt_slice x = {c, &m->table[i], 0, 0, 0};
                if (!overlap(x.t, r, &x.lo, &x.n)) continue;
                x.s = r->shard + (x.lo - r->lo);
                sl[(*count)++] = x;
            }
        }
    }
    return sl;
}

double opt_grad_norm(const opt_adamw *o)
{
    /* every slice to sum, in order, then their sums in one call (a device waits once, not once a
     * tensor), added up in that order */
    int ns, count = 0;
    opt_slice *sl = opt_slices(o, &ns);
    size_t k1 = (size_t)(ns ? ns : 1);
    const float **x = td_xmalloc(k1 * sizeof *x);
    size_t *len = td_xmalloc(k1 * sizeof *len);
    signed char *kind = td_xmalloc(k1); /* 0 counted, 1 counted expert, 2 checked only */
    for (int i = 0; i < ns; i++) {
        const gpt_tensor_info *t = sl[i].t;
        /* the first stage counts the embedding; tp rank 0 the norms and biases */
        int counted = !t->embedding_copy && !(t->tp_replicated && o->ps->tp_rank != 0);
        if (!counted && !o->check_all_finite) continue;
        x[count] = o->shard[sl[i].c].grads + sl[i].s;
        len[count] = sl[i].n;
        kind[count++] = (signed char)(counted ? (t->expert ? 1 : 0) : 2);
    }
    double *sums = td_xmalloc((size_t)(count ? count : 1) * sizeof *sums);
    be_sumsq_many(o->be, sums, x, len, count);
    double ss = 0, sx = 0; /* the experts' apart: under expert parallelism each rank holds its own */
    for (int i = 0; i < count; i++) {
        if (kind[i] == 0) ss += sums[i];
        else if (kind[i] == 1) sx += sums[i];
        else if (!isfinite(sums[i])) ss = INFINITY; /* an overflow anywhere skips the step everywhere */
    }
    free(sl), free(x), free(len), free(kind), free(sums);
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
    int count;
    opt_slice *sl = opt_slices(o, &count);
    size_t k1 = (size_t)(count ? count : 1);
    float **p = td_xmalloc(k1 * sizeof *p), **mm = td_xmalloc(k1 * sizeof *mm), **vv = td_xmalloc(k1 * sizeof *vv);
    const float **g = td_xmalloc(k1 * sizeof *g);
    size_t *len = td_xmalloc(k1 * sizeof *len);
    float *wd = td_xmalloc(k1 * sizeof *wd);
    for (int i = 0; i < count; i++) {
        int c = sl[i].c;
        size_t s = sl[i].s;
        p[i] = o->chunks[c]->params + sl[i].lo, g[i] = o->shard[c].grads + s, mm[i] = o->m[c] + s, vv[i] = o->v[c] + s;
        len[i] = sl[i].n;
        wd[i] = sl[i].t->no_decay ? 0.0f : (float)hp->weight_decay;
    }
    be_adamw_many(o->be, p, g, mm, vv, len, wd, count, (float)lr, (float)hp->beta1, (float)hp->beta2, (float)hp->eps,
                  (float)gscale, step);
    free(sl), free(p), free(g), free(mm), free(vv), free(len), free(wd);
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
