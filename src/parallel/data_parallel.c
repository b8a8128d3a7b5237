/* Data parallelism: see include/parallel/trident/data_parallel.h. */
#include "trident/data_parallel.h"

#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/comm_hier.h"
#include "trident/overlap.h"
#include "trident/timer.h"

typedef struct {
    size_t lo, hi;      /* elements [lo, hi) of the chunk's buffers */
    int expert;         /* the experts' gradients: reduced over the expert-data-parallel group */
    size_t *counts;     /* (group size) each rank's piece */
    size_t *displs;     /* (group size) its offset within the bucket */
    int held;           /* waits for the embedding group's sum before its reduction starts */
    int pending;        /* closed, its reduction not started: waits for `ready` to pass */
    be_event ready;     /* recorded after the kernels that made its gradients final */
    comm_req *grad_req; /* the reduction in flight */
    comm_req *param_req;/* the all-gather in flight */
} bucket;

struct dp_chunk {
    gpt_model *m;
    const ps_state *ps;
    dp_config cfg;
    int n;             /* buckets */
    bucket *b;         /* (n) */
    int next;          /* buckets [0, next) closed by the hook (started, or held) */
    int nranges;
    dp_range *ranges;  /* (nranges): this rank's shard */
    float *shard_grads;/* distributed: the reduced gradients of the shard (backend memory) */
    size_t shard_numel;
    float *embd_grads; /* the tied word embedding's gradient to sum over the embedding group, or NULL */
    size_t embd_numel;
};

void dp_piece(size_t n, int dp, int r, size_t *start, size_t *count)
{
    size_t each = n / (size_t)dp, extra = n % (size_t)dp, ur = (size_t)r;
    *count = each + (ur < extra);
    *start = ur * each + (ur < extra ? ur : extra);
}

int dp_bucket_count(size_t numel, size_t bucket)
{
    if (!numel) return 0;
    if (!bucket) bucket = numel;
    return (int)((numel + bucket - 1) / bucket);
}

void dp_bucket_bounds(size_t numel, size_t bucket, int b, size_t *lo, size_t *hi)
{
    if (!bucket) bucket = numel;
    *lo = (size_t)b * bucket;
    *hi = *lo + bucket < numel ? *lo + bucket : numel;
}

/* The group of a bucket's collectives: the experts' over the ranks holding the same experts; the
 * others over dp x cp (dp without context parallelism), in its hierarchical view when one was
 * chosen. */
static const comm *group_of(const ps_state *ps, int expert)
{
    return expert ? ps->edp_group : ps->dp_hier ? ps->dp_hier : ps->dpcp_group;
}

static const comm *bucket_group(const dp_chunk *d, const bucket *k) { return group_of(d->ps, k->expert); }

/* Whether element i of the buffer is an expert's: under expert parallelism the experts' runs of
 * tensors are buckets of their own. */
static int expert_at(const gpt_model *m, size_t i)
{
    for (int t = 0; t < m->ntensors; t++)
        if (i >= m->table[t].offset && i < m->table[t].offset + m->table[t].numel) return m->table[t].expert;
    return 0;
}

/* The buckets: the buffer cut into runs of the same group (one run without expert parallelism),
 * each run into buckets of bucket_elems (0: one). Returns their count; fills b's bounds if b. */
static int cut_buckets(const gpt_model *m, const ps_state *ps, size_t bucket_elems, bucket *b)
{
    int n = 0;
    size_t lo = 0;
    while (lo < m->numel) {
        int ex = ps->ep > 1 && expert_at(m, lo);
        size_t hi = m->numel;
        if (ps->ep > 1)
            for (int t = 0; t < m->ntensors; t++) { /* the run ends at the first tensor of the other kind */
                const gpt_tensor_info *x = &m->table[t];
                if (x->offset >= lo && x->offset < hi && x->expert != ex && x->numel) hi = x->offset;
            }
        for (int i = 0, nb = dp_bucket_count(hi - lo, bucket_elems); i < nb; i++, n++)
            if (b) {
                dp_bucket_bounds(hi - lo, bucket_elems, i, &b[n].lo, &b[n].hi);
                b[n].lo += lo, b[n].hi += lo, b[n].expert = ex;
            }
        lo = hi;
    }
    return n;
}

/* Where bucket i's reduction lands: the bucket in place, or this rank's piece of the shard. */
static float *reduced_of(dp_chunk *d, int i, size_t *n)
{
    bucket *k = &d->b[i];
    if (!d->cfg.distributed) {
        *n = k->hi - k->lo;
        return d->m->grads + k->lo;
    }
    *n = d->ranges[i].n;
    return d->shard_grads + d->ranges[i].shard;
}

/* The bucket's gradients go to comm as the backend's rule says (xfer.h): staged, copied to host
 * memory now and back once the reduction completes (finish_reduce). */
static void start_reduce(dp_chunk *d, int i)
{
    bucket *k = &d->b[i];
    const backend *be = d->m->be;
    float *g = d->m->grads + k->lo;
    size_t n = k->hi - k->lo, rn;
    float *r = reduced_of(d, i, &rn);
    if (k->pending) be_event_release(be, &k->ready);
    k->pending = 0;
    if (d->cfg.distributed)
        k->grad_req = comm_ireduce_scatterv(xfer_comm(be, bucket_group(d, k)), xfer_send_view(be, g, n * sizeof(float)),
                                            xfer_recv_view(be, r, rn * sizeof(float)), k->counts, COMM_F32, COMM_SUM);
    else
        k->grad_req = comm_iallreduce(xfer_comm(be, bucket_group(d, k)), xfer_inout_view(be, g, n * sizeof(float)), n, COMM_F32,
                                      COMM_SUM);
}

static void finish_reduce(dp_chunk *d, int i)
{
    size_t rn;
    float *r = reduced_of(d, i, &rn);
    comm_wait(d->b[i].grad_req);
    d->b[i].grad_req = NULL;
    xfer_recv_done(d->m->be, r, rn * sizeof(float));
}

/* Starts, in order, the closed buckets whose events have passed (the first that has not stops
 * the rest: the queue runs in order; force: every one, after a sync). Returns how many still wait. */
static int start_ready(dp_chunk *d, int force)
{
    int i = 0;
    if (force) {
        for (int j = 0; j < d->next; j++)
            if (d->b[j].pending && !be_event_query(d->m->be, &d->b[j].ready)) {
                be_sync(d->m->be);
                break;
            }
        for (int j = 0; j < d->next; j++)
            if (d->b[j].pending) start_reduce(d, j);
        return 0;
    }
    while (i < d->next && !(d->b[i].pending && !be_event_query(d->m->be, &d->b[i].ready))) {
        if (d->b[i].pending) start_reduce(d, i);
        i++;
    }
    int waiting = 0;
    for (; i < d->next; i++) waiting += d->b[i].pending;
    return waiting;
}

/* ov_progress's poll (ov_flush's: force) while buckets wait for their events. */
static void poll_ready(void *ctx, int force)
{
    dp_chunk *d = ctx;
    if (!start_ready(d, force)) ov_remove(poll_ready, d);
}

/* gpt_model.grads_ready: during the last micro-batch's backward, closes every bucket lying
 * wholly in grads[0, prefix_end) (a held one is left for the finish): an event is recorded after
 * the kernels that wrote it, and its reduction starts once the event has passed (at once on cpu;
 * else from ov_progress, between later kernels). */
static void grads_ready(void *user, size_t prefix_end)
{
    dp_chunk *d = user;
    if (!d->m->grads_final) return;
    int closed = 0;
    while (d->next < d->n && d->b[d->next].hi <= prefix_end) {
        bucket *k = &d->b[d->next];
        if (!k->held) {
            k->ready = be_event_record(d->m->be);
            k->pending = 1;
            closed = 1;
        }
        d->next++;
    }
    if (closed && start_ready(d, 0)) ov_add(poll_ready, d);
}

/* Completes bucket i's all-gather of the parameters, if one is in flight. */
static void finish_gather(dp_chunk *d, int i)
{
    bucket *k = &d->b[i];
    if (!k->param_req) return;
    comm_wait(k->param_req);
    k->param_req = NULL;
    xfer_recv_done(d->m->be, d->m->params + k->lo, (k->hi - k->lo) * sizeof(float));
}

/* gpt_model.params_needed: waits for the gathers of the buckets reaching into [from, numel). */
static void params_needed(void *user, size_t from)
{
    dp_chunk *d = user;
    for (int i = d->n - 1; i >= 0 && d->b[i].hi > from; i--) finish_gather(d, i);
}

dp_chunk *dp_attach(gpt_model *m, const ps_state *ps, const dp_config *cfg)
{
    dp_chunk *d = td_xcalloc(1, sizeof *d);
    d->m = m;
    d->ps = ps;
    d->cfg = *cfg;
    d->n = cut_buckets(m, ps, cfg->bucket_elems, NULL);
    d->b = td_xcalloc((size_t)(d->n ? d->n : 1), sizeof *d->b);
    cut_buckets(m, ps, cfg->bucket_elems, d->b);
    if (!m->cfg.untied && ps->embd_group && comm_size(ps->embd_group) > 1 && (m->first || m->last)) {
        d->embd_grads = m->first ? m->g.wte : m->g.head_w;
        d->embd_numel = (size_t)m->vocab_l * m->cfg.hidden;
    }
    size_t elo = d->embd_grads ? (size_t)(d->embd_grads - m->grads) : 0, ehi = elo + d->embd_numel;
    d->nranges = cfg->distributed ? d->n : 1;
    d->ranges = td_xcalloc((size_t)(d->nranges ? d->nranges : 1), sizeof *d->ranges);
    if (!cfg->distributed) d->ranges[0] = (dp_range){0, m->numel, 0};
    for (int i = 0; i < d->n; i++) {
        bucket *k = &d->b[i];
        int gn = k->expert ? ps->edp : ps->dpcp, me = k->expert ? ps->edp_rank : ps->dpcp_rank;
        k->counts = td_xmalloc((size_t)gn * sizeof(size_t));
        k->displs = td_xmalloc((size_t)gn * sizeof(size_t));
        for (int r = 0; r < gn; r++) dp_piece(k->hi - k->lo, gn, r, &k->displs[r], &k->counts[r]);
        /* a reduce-scatter leaves only the shard summed: the embedding copies are summed first */
        k->held = cfg->distributed && d->embd_grads && k->lo < ehi && elo < k->hi;
        if (cfg->distributed) {
            d->ranges[i] = (dp_range){k->lo + k->displs[me], k->counts[me], d->shard_numel};
            d->shard_numel += k->counts[me];
        }
    }
    if (cfg->distributed) {
        d->shard_grads = be_alloc(m->be, (d->shard_numel ? d->shard_numel : 1) * sizeof(float));
        be_zero(m->be, d->shard_grads, d->shard_numel);
    }
    ov_attach(m->be);
    if (cfg->overlap_grad_reduce) {
        m->grads_ready = grads_ready;
        m->grads_ready_user = d;
    }
    if (cfg->distributed && cfg->overlap_param_gather) {
        m->params_needed = params_needed;
        m->params_needed_user = d;
    }
    return d;
}

void dp_detach(dp_chunk *d)
{
    if (!d) return;
    dp_wait_params(d);
    ov_remove(poll_ready, d);
    if (d->m->grads_ready_user == d) d->m->grads_ready = NULL, d->m->grads_ready_user = NULL;
    if (d->m->params_needed_user == d) d->m->params_needed = NULL, d->m->params_needed_user = NULL;
    for (int i = 0; i < d->n; i++) {
        free(d->b[i].counts);
        free(d->b[i].displs);
    }
    if (d->shard_grads) be_dfree(d->m->be, d->shard_grads);
    free(d->b);
    free(d->ranges);
    free(d);
}

const dp_range *dp_shard(const dp_chunk *d, int *nranges, const float **grads)
{
    *nranges = d->nranges;
    *grads = d->cfg.distributed ? d->shard_grads : d->m->grads;
    return d->ranges;
}

int dp_num_buckets(const dp_chunk *d) { return d->n; }

void dp_finish_grads(dp_chunk *const *d, int n)
{
    /* distributed: the embedding copies are summed before the reduce-scatters of their buckets. The
     * two copies lie at other places of their stages' buffers, so a reduce-scatter would add an
     * element's dp addends in another order on each (its shard's owner differs): the copies would
     * part by a rounding (dp >= 3). So the dp sum comes first, whole (an all-reduce), then the two
     * copies' sum, and the reduce-scatter adds the other dp ranks' zeros to dp rank 0's: exact. */
    for (int c = 0; c < n; c++) {
        dp_chunk *k = d[c];
        if (!k->cfg.distributed || !k->embd_grads) continue;
        const backend *be = k->m->be;
        if (k->ps->dpcp > 1) xfer_allreduce(be, k->ps->dpcp_group, k->embd_grads, k->embd_numel, COMM_F32, COMM_SUM);
        xfer_allreduce(be, k->ps->embd_group, k->embd_grads, k->embd_numel, COMM_F32, COMM_SUM);
        if (k->ps->dpcp_rank != 0) be_zero(be, k->embd_grads, k->embd_numel);
    }
    for (int c = 0; c < n; c++) {
        dp_chunk *k = d[c];
        ov_remove(poll_ready, k);
        for (int i = 0; i < k->n; i++) {
            if (k->b[i].pending && !be_event_query(k->m->be, &k->b[i].ready)) be_sync(k->m->be);
            if (i >= k->next || k->b[i].held || k->b[i].pending) start_reduce(k, i);
            finish_reduce(k, i);
        }
        k->next = 0;
    }
    /* plain: every rank has the whole sum over dp; then the two copies are summed */
    for (int c = 0; c < n; c++)
        if (!d[c]->cfg.distributed && d[c]->embd_grads)
            xfer_allreduce(d[c]->m->be, d[c]->ps->embd_group, d[c]->embd_grads, d[c]->embd_numel, COMM_F32, COMM_SUM);
}

void dp_start_param_gather(dp_chunk *d)
{
    if (!d->cfg.distributed) return;
    /* last bucket first: the forward reads it first (params_needed waits from the end), and a
     * hierarchical gather completes the ones started before it first */
    for (int i = d->n - 1; i >= 0; i--) {
        bucket *k = &d->b[i];
        TD_ASSERT(k->param_req == NULL);
        k->param_req = comm_iallgatherv(xfer_comm(d->m->be, bucket_group(d, k)),
                                        xfer_inout_view(d->m->be, d->m->params + k->lo, (k->hi - k->lo) * sizeof(float)),
                                        k->counts, k->displs, COMM_F32);
    }
    if (!d->cfg.overlap_param_gather) dp_wait_params(d);
}

void dp_wait_params(dp_chunk *d)
{
    for (int i = 0; i < d->n; i++) finish_gather(d, i);
}

/* ---- choosing the collectives ---- */

/* Seconds of `reps` rounds of one bucket's collectives of n elements on g (the slowest rank). */
static double time_bucket(const ps_state *ps, const comm *g, float *buf, float *shard, const size_t *counts,
                          const size_t *displs, size_t n, int distributed, int reps)
{
    comm_barrier(ps->dpcp_group);
    double t0 = td_now();
    for (int i = 0; i < reps; i++) {
        if (distributed) {
            comm_wait(comm_ireduce_scatterv(g, buf, shard, counts, COMM_F32, COMM_SUM));
            comm_wait(comm_iallgatherv(g, buf, counts, displs, COMM_F32));
        } else
            comm_wait(comm_iallreduce(g, buf, n, COMM_F32, COMM_SUM));
    }
    double t = td_now() - t0;
    comm_allreduce(ps->dpcp_group, &t, 1, COMM_F64, COMM_MAX);
    return t;
}

int dp_choose_collectives(ps_state *ps, const char *mode, size_t numel, size_t bucket_elems, int distributed,
                          char *line, size_t len)
{
    line[0] = '\0';
    /* the buckets' group: dp x cp (dp without context parallelism) */
    if (ps->dpcp > 1 && comm_is_device(comm_device(ps->dpcp_group))) { /* --comm nccl */
        snprintf(line, len, "dp collectives: NCCL's own rings and trees (--comm nccl%s)",
                 strcmp(mode, "auto") == 0 ? "" : "; --dp-collectives applies to MPI only");
        return 0;
    }
    if (strcmp(mode, "flat") == 0 || ps->dpcp < 2) return 0;
    char host[64];
    comm_host_name(ps->world_rank, ps->world_size, host, sizeof host);
    comm *h = comm_hier_create(ps->dpcp_group, host);
    if (!h) return 0;
    int nodes, per;
    comm_hier_shape(h, &nodes, &per);
    if (strcmp(mode, "hierarchical") == 0) {
        ps->dp_hier = h;
        snprintf(line, len, "dp collectives: hierarchical (%d hosts x %d data-parallel ranks), as asked", nodes, per);
        return 1;
    }
    /* auto: one bucket of the run's size, after a warm-up each, twice each way alternated; the faster kept */
    size_t n = bucket_elems && bucket_elems < numel ? bucket_elems : numel;
    if (!n) n = 1;
    int G = ps->dpcp;
    float *buf = td_xcalloc(n, sizeof(float)), *shard = td_xcalloc(n / (size_t)G + 1, sizeof(float));
    size_t *counts = td_xmalloc((size_t)G * sizeof(size_t)), *displs = td_xmalloc((size_t)G * sizeof(size_t));
    for (int r = 0; r < G; r++) dp_piece(n, G, r, &displs[r], &counts[r]);
    time_bucket(ps, ps->dpcp_group, buf, shard, counts, displs, n, distributed, 1); /* warm-up */
    time_bucket(ps, h, buf, shard, counts, displs, n, distributed, 1);
    double tf = 0, th = 0;
    for (int round = 0; round < 2; round++) {
        tf += time_bucket(ps, ps->dpcp_group, buf, shard, counts, displs, n, distributed, 1);
        th += time_bucket(ps, h, buf, shard, counts, displs, n, distributed, 1);
    }
    free(buf), free(shard), free(counts), free(displs);
    int hier = th < tf;
    snprintf(line, len, "dp collectives: %s (%d hosts x %d data-parallel ranks; one bucket of %zu elements %s: flat "
             "%.1f ms, hierarchical %.1f ms; --dp-collectives flat|hierarchical forces one)", hier ? "hierarchical" : "flat",
             nodes, per, n, distributed ? "reduce-scattered and all-gathered" : "all-reduced", tf / 2 * 1e3, th / 2 * 1e3);
    if (hier) ps->dp_hier = h;
    else comm_free(h);
    return hier;
}
