/* Buffers that cross comm (src/backend/xfer.h) and transfers started from queue events
 * (include/parallel/trident/overlap.h), under mpirun -np 2, with real exchanges: a data-parallel
 * gradient all-reduce in buckets, the distributed optimizer's reduce-scatter and parameter
 * all-gather (src/parallel/data_parallel.c), a pipeline stage send and receive
 * (src/parallel/pipeline.c) and the MoE block's alltoall token exchange (src/model/moe.c).
 * Each runs on two test backends built over the cpu's kernels, whose allocations are recorded:
 *  - "direct" (no host_alloc, as cpu): comm must never see staging memory, and xfer makes zero
 *    staging copies;
 *  - "staged" (host_alloc set, as a device backend without a CUDA-aware MPI): every buffer comm
 *    is handed must lie in host_alloc'd staging memory, never in the backend's own (alloc'd)
 *    memory, and its events pass only when the test says so (event_query), so a bucket must not
 *    start before its event has passed and must start once it has.
 * Every group the exchanges use is swapped for a checking view of its comm ops that looks up
 * each buffer pointer it is handed. The results are held to sums written here (two ranks'
 * gradients added; each rank's own piece of the parameters), and the staged MoE block's output
 * and input gradient to the direct one's, bit for bit. Prints "N passed, 0 failed" on rank 0;
 * any mismatch aborts the job with its message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "comm/comm_impl.h"
#include "model/model_impl.h"
#include "trident/check.h"
#include "trident/comm.h"
#include "trident/data_parallel.h"
#include "trident/overlap.h"
#include "trident/parallel_state.h"
#include "trident/philox.h"
#include "trident/pipeline.h"

static int g_checks, g_rank;

#define EXPECT(cond, ...)                                                                \
    do {                                                                                 \
        g_checks++;                                                                      \
        if (!(cond)) td_fatal(1, __VA_ARGS__);                                           \
    } while (0)

/* ---- the test backends: the cpu's kernels, their memory recorded ---- */
typedef struct {
    const char *p;
    size_t n;
    int staging; /* host_alloc'd */
} region;
#define REGIONS 8192
static region g_reg[REGIONS];
static int g_nreg;
static const struct be_ops *g_cpu;
static struct be_ops g_direct_ops, g_staged_ops;
static int g_staged; /* the backend running now is the staged one */
static intptr_t g_events, g_passed; /* events recorded (ids 1..), and the last one that has passed */

static void note(const void *p, size_t n, int staging)
{
    EXPECT(g_nreg < REGIONS, "more than %d allocations", REGIONS);
    g_reg[g_nreg++] = (region){p, n ? n : 1, staging};
}
static void forget(const void *p)
{
    for (int i = 0; i < g_nreg; i++)
        if (g_reg[i].p == p) {
            g_reg[i] = g_reg[--g_nreg];
            return;
        }
}
/* The region holding [p, p + n), or NULL (memory neither allocation made: the stack, malloc). */
static const region *region_of(const void *p, size_t n)
{
    const char *c = p;
    for (int i = 0; i < g_nreg; i++)
        if (c >= g_reg[i].p && c < g_reg[i].p + g_reg[i].n) {
            EXPECT(c + n <= g_reg[i].p + g_reg[i].n, "rank %d: a buffer of %zu bytes runs past its allocation", g_rank,
                   n);
            return &g_reg[i];
        }
    return NULL;
}

static void *t_alloc(const backend *be, size_t n)
{
    void *p = g_cpu->alloc(be, n);
    note(p, n, 0);
    return p;
}
static void t_free(const backend *be, void *p)
{
    forget(p);
    g_cpu->free(be, p);
}
static void *t_host_alloc(const backend *be, size_t n)
{
    (void)be;
    void *p = NULL;
    EXPECT(posix_memalign(&p, 64, n ? n : 1) == 0, "rank %d: host_alloc of %zu bytes", g_rank, n);
    note(p, n, 1);
    return p;
}
static void t_host_free(const backend *be, void *p)
{
    (void)be;
    forget(p);
    free(p);
}
/* Events carry an id; one has passed once the test (or a sync) let it. */
static void t_event_record(const backend *be, be_event *ev)
{
    g_cpu->event_record(be, ev);
    ev->h = (void *)++g_events;
}
static double t_event_elapsed(const backend *be, be_event *a, be_event *b)
{
    a->h = b->h = NULL;
    return g_cpu->event_elapsed(be, a, b);
}
static int t_event_query(const backend *be, const be_event *ev)
{
    (void)be;
    return (intptr_t)ev->h <= g_passed;
}
static void t_sync(const backend *be)
{
    g_cpu->sync(be);
    g_passed = g_events;
}

static backend *test_backend(int staged)
{
    backend *be = be_create("cpu", 1);
    g_cpu = be->ops;
    struct be_ops *o = staged ? &g_staged_ops : &g_direct_ops;
    *o = *g_cpu;
    o->alloc = t_alloc;
    o->free = t_free;
    if (staged) {
        o->host_alloc = t_host_alloc;
        o->host_free = t_host_free;
        o->event_record = t_event_record;
        o->event_elapsed = t_event_elapsed;
        o->event_query = t_event_query;
        o->sync = t_sync;
    }
    be->ops = o;
    xfer_init(be); /* as be_create decides it for a backend with these entries */
    EXPECT(xfer_direct(be) == !staged, "rank %d: xfer_direct %d for a %s backend", g_rank, xfer_direct(be),
           staged ? "staged" : "direct");
    g_staged = staged;
    return be;
}

/* ---- the checking view of a group's comm ops ---- */
static const struct comm_ops *g_inner;
static struct comm_ops g_view;
static int g_seen_staging, g_seen_device, g_iallreduce, g_ireduce_scatterv;

static void look(const void *p, size_t count, comm_dtype t, const char *call)
{
    if (!count) return;
    const region *r = region_of(p, count * comm_dtype_size(t));
    if (g_staged) {
        EXPECT(!r || r->staging, "rank %d: %s was handed the staged backend's own memory %p: comm reads only staging",
               g_rank, call, p);
    } else {
        EXPECT(!r || !r->staging, "rank %d: %s was handed staging memory %p on the direct backend", g_rank, call, p);
    }
    if (r) r->staging ? g_seen_staging++ : g_seen_device++;
}
static void v_bcast(const comm *c, void *buf, size_t n, comm_dtype t, int root)
{
    look(buf, n, t, "bcast");
    g_inner->bcast(c, buf, n, t, root);
}
static void v_allreduce(const comm *c, void *buf, size_t n, comm_dtype t, comm_op op)
{
    look(buf, n, t, "allreduce");
    g_inner->allreduce(c, buf, n, t, op);
}
static void v_allgather(const comm *c, const void *s, void *r, size_t n, comm_dtype t)
{
    look(s, n, t, "allgather");
    look(r, n * (size_t)c->size, t, "allgather");
    g_inner->allgather(c, s, r, n, t);
}
static void v_reduce_scatter(const comm *c, const void *s, void *r, size_t n, comm_dtype t, comm_op op)
{
    look(s, n * (size_t)c->size, t, "reduce_scatter");
    look(r, n, t, "reduce_scatter");
    g_inner->reduce_scatter(c, s, r, n, t, op);
}
static comm_req *v_isend(const comm *c, const void *buf, size_t n, comm_dtype t, int peer, int tag)
{
    look(buf, n, t, "isend");
    return g_inner->isend(c, buf, n, t, peer, tag);
}
static comm_req *v_irecv(const comm *c, void *buf, size_t n, comm_dtype t, int peer, int tag)
{
    look(buf, n, t, "irecv");
    return g_inner->irecv(c, buf, n, t, peer, tag);
}
static comm_req *v_iallreduce(const comm *c, void *buf, size_t n, comm_dtype t, comm_op op)
{
    look(buf, n, t, "iallreduce");
    g_iallreduce++;
    return g_inner->iallreduce(c, buf, n, t, op);
}
static comm_req *v_ireduce_scatter(const comm *c, const void *s, void *r, size_t n, comm_dtype t, comm_op op)
{
    look(s, n * (size_t)c->size, t, "ireduce_scatter");
    look(r, n, t, "ireduce_scatter");
    return g_inner->ireduce_scatter(c, s, r, n, t, op);
}
static size_t sum_of(const size_t *counts, int n)
{
    size_t s = 0;
    for (int i = 0; i < n; i++) s += counts[i];
    return s;
}
static comm_req *v_iallgatherv(const comm *c, void *buf, const size_t *counts, const size_t *displs, comm_dtype t)
{
    look(buf, sum_of(counts, c->size), t, "iallgatherv");
    return g_inner->iallgatherv(c, buf, counts, displs, t);
}
static comm_req *v_ireduce_scatterv(const comm *c, const void *s, void *r, const size_t *counts, comm_dtype t,
                                    comm_op op)
{
    look(s, sum_of(counts, c->size), t, "ireduce_scatterv");
    look(r, counts[c->rank], t, "ireduce_scatterv");
    g_ireduce_scatterv++;
    return g_inner->ireduce_scatterv(c, s, r, counts, t, op);
}

/* Makes g's calls go through the checking view (every group shares the mpi ops). */
static void watch(const comm *g)
{
    if (!g) return;
    if (g->ops != &g_view) {
        EXPECT(!g_inner || g_inner == g->ops, "rank %d: two comm implementations", g_rank);
        g_inner = g->ops;
        g_view = *g->ops;
        g_view.bcast = v_bcast, g_view.allreduce = v_allreduce, g_view.allgather = v_allgather;
        g_view.reduce_scatter = v_reduce_scatter, g_view.isend = v_isend, g_view.irecv = v_irecv;
        g_view.iallreduce = v_iallreduce, g_view.ireduce_scatter = v_ireduce_scatter;
        g_view.iallgatherv = v_iallgatherv, g_view.ireduce_scatterv = v_ireduce_scatterv;
        ((comm *)g)->ops = &g_view;
    }
}

/* ---- the exchanges ---- */
static gpt_config dense_config(void)
{
    gpt_config c = {0};
    c.num_layers = 1, c.hidden = 8, c.heads = 2, c.ffn = 16, c.seq = 8, c.max_pos = 8;
    c.vocab = 40, c.padded_vocab = 48, c.init_std = 0.4f, c.seed = 91;
    return c;
}

/* Rank r's gradients (or parameters: salt), n floats. */
static void values(float *x, size_t n, int r, uint64_t salt)
{
    td_philox_fill_normal(x, n, 11 + salt, (uint64_t)r, 0, 0.0f, 1.0f);
}

/* A kernel: the backend's progress hook runs after it (be_toc), as between a backward's kernels. */
static void kernel(const backend *be, float *scratch) { be_zero(be, scratch, 4); }

/* Plain data parallelism, buckets of a third of the buffer started during the "backward" from
 * their events: grads = rank 0's + rank 1's on both ranks. */
static void check_dp_allreduce(comm *world, backend *be)
{
    ps_state *ps = ps_init(world, 1, 1);
    watch(ps->dp_group);
    gpt_config c = dense_config();
    gpt_model *m = gpt_create(&c, ps, be, 0, 1, 2, 1);
    size_t n = m->numel;
    float *g0 = td_xmalloc(n * sizeof(float)), *g1 = td_xmalloc(n * sizeof(float)), *got = td_xmalloc(n * sizeof(float));
    float *scratch = be_alloc(be, 4 * sizeof(float));
    values(g0, n, 0, 0), values(g1, n, 1, 0);
    be_memcpy(be, m->grads, g_rank ? g1 : g0, n * sizeof(float), BE_H2D);
    dp_config dc = {.bucket_elems = n / 3 + 1, .overlap_grad_reduce = 1};
    dp_chunk *d = dp_attach(m, ps, &dc);
    EXPECT(dp_num_buckets(d) == 3, "rank %d: %d buckets, want 3", g_rank, dp_num_buckets(d));
    int before = g_iallreduce;
    m->grads_final = 1;
    m->grads_ready(m->grads_ready_user, n / 3 + 1); /* bucket 0 closes */
    if (g_staged) {
        kernel(be, scratch);
        EXPECT(g_iallreduce == before, "rank %d: bucket 0 started before its event passed", g_rank);
        g_passed = g_events; /* the queue reaches it */
        kernel(be, scratch); /* ov_progress starts it */
    }
    EXPECT(g_iallreduce == before + 1, "rank %d: bucket 0 not started once its event passed (%d started)", g_rank,
           g_iallreduce - before);
    m->grads_ready(m->grads_ready_user, n); /* buckets 1 and 2 close; staged: their events pending */
    EXPECT(g_iallreduce == before + (g_staged ? 1 : 3), "rank %d: %d buckets started, want %d", g_rank,
           g_iallreduce - before, g_staged ? 1 : 3);
    m->grads_final = 0;
    dp_finish_grads(&d, 1); /* starts what still waits, after a sync */
    EXPECT(g_iallreduce == before + 3, "rank %d: %d buckets reduced, want 3", g_rank, g_iallreduce - before);
    be_memcpy(be, got, m->grads, n * sizeof(float), BE_D2H);
    for (size_t i = 0; i < n; i++)
        EXPECT(got[i] == g0[i] + g1[i], "rank %d: dp all-reduce [%zu] = %g, want %g + %g", g_rank, i, got[i], g0[i], g1[i]);
    dp_detach(d);
    be_dfree(be, scratch);
    free(g0), free(g1), free(got);
    gpt_free(m);
    ps_free(ps);
}

/* The distributed optimizer: each rank's shard holds the two ranks' sums of its pieces; after
 * the parameter all-gather every rank holds the same parameters, its own pieces its own values. */
static void check_dp_distributed(comm *world, backend *be)
{
    ps_state *ps = ps_init(world, 1, 1);
    watch(ps->dp_group);
    gpt_config c = dense_config();
    gpt_model *m = gpt_create(&c, ps, be, 0, 1, 2, 1);
    size_t n = m->numel;
    float *g0 = td_xmalloc(n * sizeof(float)), *g1 = td_xmalloc(n * sizeof(float)), *p = td_xmalloc(n * sizeof(float));
    float *got = td_xmalloc(n * sizeof(float)), *other = td_xmalloc(n * sizeof(float));
    values(g0, n, 0, 0), values(g1, n, 1, 0), values(p, n, g_rank, 1);
    be_memcpy(be, m->grads, g_rank ? g1 : g0, n * sizeof(float), BE_H2D);
    dp_config dc = {.bucket_elems = n / 2 + 1, .distributed = 1};
    dp_chunk *d = dp_attach(m, ps, &dc);
    int before = g_ireduce_scatterv;
    dp_finish_grads(&d, 1);
    EXPECT(g_ireduce_scatterv == before + 2, "rank %d: %d reduce-scatters, want 2", g_rank, g_ireduce_scatterv - before);
    int nr;
    const float *shard;
    const dp_range *rg = dp_shard(d, &nr, &shard);
    size_t owned = 0;
    for (int k = 0; k < nr; k++) {
        be_memcpy(be, got, shard + rg[k].shard, rg[k].n * sizeof(float), BE_D2H);
        for (size_t i = 0; i < rg[k].n; i++)
            EXPECT(got[i] == g0[rg[k].lo + i] + g1[rg[k].lo + i], "rank %d: shard [%zu] = %g, want %g",
                   g_rank, rg[k].lo + i, got[i], g0[rg[k].lo + i] + g1[rg[k].lo + i]);
        owned += rg[k].n;
    }
    size_t both = owned;
    comm_allreduce(world, &both, 1, COMM_I64, COMM_SUM);
    EXPECT(both == n, "rank %d: the shards cover %zu of %zu elements", g_rank, both, n);
    /* the updated parameters gathered */
    be_memcpy(be, m->params, p, n * sizeof(float), BE_H2D);
    dp_start_param_gather(d);
    be_memcpy(be, got, m->params, n * sizeof(float), BE_D2H);
    for (int k = 0; k < nr; k++)
        for (size_t i = rg[k].lo; i < rg[k].lo + rg[k].n; i++)
            EXPECT(got[i] == p[i], "rank %d: its own parameter [%zu] changed by the gather", g_rank, i);
    comm_bcast(world, memcpy(other, got, n * sizeof(float)), n, COMM_F32, 0); /* world: not watched */
    EXPECT(memcmp(other, got, n * sizeof(float)) == 0, "rank %d: the gathered parameters differ from rank 0's", g_rank);
    dp_detach(d);
    free(g0), free(g1), free(p), free(got), free(other);
    gpt_free(m);
    ps_free(ps);
}

/* A pipeline stage transfer of n floats of backend memory each way, without a sync between. */
static void check_pipeline(comm *world, backend *be)
{
    ps_state *ps = ps_init(world, 1, 2);
    watch(ps->pp_group);
    size_t n = 1000;
    float *buf = be_alloc(be, n * sizeof(float)), *want = td_xmalloc(n * sizeof(float)), *got = td_xmalloc(n * sizeof(float));
    for (int dir = 0; dir < 2; dir++) {
        values(want, n, dir, 2);
        if (ps->pp_rank == dir) {
            be_memcpy(be, buf, want, n * sizeof(float), BE_H2D);
            comm_wait(pp_send(ps, be, 0, buf, n, 1 - dir, 5 + dir));
        } else {
            be_zero(be, buf, n);
            pp_recv(ps, be, 0, buf, n, dir, 5 + dir);
            be_memcpy(be, got, buf, n * sizeof(float), BE_D2H);
            EXPECT(memcmp(got, want, n * sizeof(float)) == 0, "rank %d: the stage transfer from %d arrived changed",
                   g_rank, dir);
        }
    }
    be_dfree(be, buf);
    free(want), free(got);
    ps_free(ps);
}

/* The MoE block (ep 2, alltoall dispatcher) forward and backward: out, dx (NT h floats each). */
enum { H = 8, NT = 16, MBS = 2 };
static void run_moe(comm *world, backend *be, float *out_h, float *dx_h)
{
    gpt_config c = dense_config();
    c.num_experts = 4, c.moe_ffn = 6, c.moe_topk = 2, c.moe_score = BE_MOE_SOFTMAX;
    ps_state *ps = ps_init(world, 1, 1);
    ps_init_experts(ps, 2);
    watch(ps->ep_group);
    gpt_model *m = gpt_create(&c, ps, be, 0, 1, MBS, 1);
    float xh[NT * H], dyh[NT * H];
    values(xh, NT * H, g_rank, 3), values(dyh, NT * H, g_rank, 4);
    float *x = be_alloc(be, sizeof xh), *dy = be_alloc(be, sizeof dyh), *out = be_alloc(be, sizeof xh),
          *dx = be_alloc(be, sizeof xh);
    be_memcpy(be, x, xh, sizeof xh, BE_H2D);
    be_memcpy(be, dy, dyh, sizeof dyh, BE_H2D);
    be_zero(be, dx, NT * H);
    gpt_acts *acts = gpt_acts_acquire(m);
    acts->B = MBS;
    acts->training = 0;
    const block_slot *s = &m->layers[0].slot[GPT_SLOT_MLP];
    EXPECT(s->ops == &moe_ops, "rank %d: layer 0's MLP is not the MoE block", g_rank);
    block_io io = {.m = m, .B = MBS, .scratch = model_kind_scratch(m, s->ops)};
    void *av = acts->layers[0].slot[GPT_SLOT_MLP];
    m->loss_scale = 1.0f / NT;
    be_zero(be, m->grads, m->numel);
    s->ops->fwd(&io, av, s->p, out, be_f32(x));
    s->ops->bwd(&io, dx, s->g, dy, av, s->p, be_f32(x));
    gpt_acts_release(m, acts);
    be_memcpy(be, out_h, out, sizeof xh, BE_D2H);
    be_memcpy(be, dx_h, dx, sizeof xh, BE_D2H);
    be_dfree(be, x), be_dfree(be, dy), be_dfree(be, out), be_dfree(be, dx);
    gpt_free(m);
    ps_free(ps);
}

static void run_all(comm *world, int staged, float *out, float *dx)
{
    backend *be = test_backend(staged);
    size_t c0, b0, c1, b1;
    g_seen_staging = g_seen_device = 0;
    xfer_copies(&c0, &b0);
    check_dp_allreduce(world, be);
    check_dp_distributed(world, be);
    check_pipeline(world, be);
    run_moe(world, be, out, dx);
    xfer_copies(&c1, &b1);
    if (staged) {
        EXPECT(c1 > c0 && g_seen_staging > 0 && g_seen_device == 0,
               "rank %d: staged: %zu staging copies, comm saw %d staging and %d device buffers", g_rank, c1 - c0,
               g_seen_staging, g_seen_device);
    } else {
        EXPECT(c1 == c0 && b1 == b0 && g_seen_staging == 0 && g_seen_device > 0,
               "rank %d: direct: %zu staging copies (want none), comm saw %d staging and %d device buffers", g_rank,
               c1 - c0, g_seen_staging, g_seen_device);
    }
    if (g_rank == 0)
        printf("%s: comm was handed %d backend buffers and %d staging buffers; %zu staging copies, %zu bytes\n",
               staged ? "staged" : "direct", g_seen_device, g_seen_staging, c1 - c0, b1 - b0);
    be_free(be);
}

int main(int argc, char **argv)
{
    comm *world = comm_world_init(&argc, &argv);
    g_rank = comm_rank(world);
    if (comm_size(world) != 2) td_fatal(2, "test_xfer runs on 2 ranks (mpirun -np 2); got %d", comm_size(world));
    float out_d[NT * H], dx_d[NT * H], out_s[NT * H], dx_s[NT * H];
    run_all(world, 0, out_d, dx_d);
    run_all(world, 1, out_s, dx_s);
    EXPECT(memcmp(out_d, out_s, sizeof out_d) == 0 && memcmp(dx_d, dx_s, sizeof dx_d) == 0,
           "rank %d: the MoE block's output or input gradient differ between direct and staged", g_rank);
    comm_barrier(world);
    if (g_rank == 0) printf("%d passed, 0 failed\n", g_checks);
    comm_world_finalize(world);
    return 0;
}
