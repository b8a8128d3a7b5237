/* The communicator under mpirun (and alone, a world of one without MPI): every collective and
 * point-to-point call against values each rank can compute on its own, on the world and on split
 * sub-groups. Prints
 * "N passed, 0 failed" on rank 0; any mismatch aborts the job with its message. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mpi.h>

#include "backend/backend.h"
#include "trident/check.h"
#include "trident/comm.h"
#include "trident/parallel_state.h"
#include "trident/pipeline.h"
#include "trident/timer.h"
#include "trident/comm_hier.h"

static int g_checks;

#define EXPECT(cond, ...)                                                                \
    do {                                                                                 \
        g_checks++;                                                                      \
        if (!(cond)) td_fatal(1, __VA_ARGS__);                                           \
    } while (0)

/* A request comm_progress alone carries to completion (no MPI call of ours between its start
 * and its wait; 4 MiB is far above the eager limits, so it needs several rounds of progress on
 * both sides): the sum is right, in flight is at least the time blocked, and the wait of a
 * request seen complete blocks for nothing. Without progress between start and wait the loop
 * would run to its deadline. */
static void check_progress(const comm *c, const char *name)
{
    int r = comm_rank(c), n = comm_size(c);
    size_t len = (size_t)1 << 20;
    float *x = malloc(len * sizeof *x);
    for (size_t i = 0; i < len; i++) x[i] = (float)(i % 1000) + (float)r;
    comm_req *q = comm_iallreduce(c, x, len, COMM_F32, COMM_SUM);
    double deadline = td_now() + 30;
    volatile double sink = 0;
    while (comm_progress() > 0 && td_now() < deadline)
        for (int k = 0; k < 1000; k++) sink += k; /* "compute" */
    EXPECT(comm_progress() == 0, "%s: comm_progress did not complete an all-reduce in 30 s", name);
    double blocked = comm_seconds(c);
    comm_wait(q);
    EXPECT(comm_seconds(c) == blocked, "%s: the wait of a completed request blocked %g s", name,
           comm_seconds(c) - blocked);
    EXPECT(comm_busy_seconds(c) >= comm_seconds(c), "%s: in flight %g s < blocked %g s", name, comm_busy_seconds(c),
           comm_seconds(c));
    for (size_t i = 0; i < len; i += 4099) {
        float want = (float)n * (float)(i % 1000) + (float)(n * (n - 1) / 2);
        EXPECT(x[i] == want, "%s: progressed all-reduce [%zu] got %g want %g", name, i, x[i], want);
    }
    free(x);
}

static void check_group(const comm *c, const char *name)
{
    int r = comm_rank(c), n = comm_size(c);

    /* every element compared: on a hierarchical view of 2 ranks a host the third is rail 1's part
     * (the in-host split of 3 is 2 + 1) */
    float s[3] = {(float)r, 1.0f, (float)(r * r)};
    comm_allreduce(c, s, 3, COMM_F32, COMM_SUM);
    EXPECT(s[0] == (float)(n * (n - 1) / 2) && s[1] == (float)n && s[2] == (float)((n - 1) * n * (2 * n - 1) / 6),
           "%s: allreduce sum got {%g, %g, %g}", name, s[0], s[1], s[2]);
    /* uneven splits: lengths that leave the later rails (or local ranks) shorter, or empty (1) */
    static const size_t lens[] = {1, 5, 7, 13};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        float v[16];
        for (size_t j = 0; j < lens[li]; j++) v[j] = (float)(j * 100) + (float)r;
        comm_allreduce(c, v, lens[li], COMM_F32, COMM_SUM);
        for (size_t j = 0; j < lens[li]; j++) {
            float want = (float)n * (float)(j * 100) + (float)(n * (n - 1) / 2);
            EXPECT(v[j] == want, "%s: allreduce of %zu [%zu] got %g want %g", name, lens[li], j, v[j], want);
        }
    }

    int64_t mx = r * 10;
    comm_allreduce(c, &mx, 1, COMM_I64, COMM_MAX);
    EXPECT(mx == (int64_t)(n - 1) * 10, "%s: allreduce max got %lld", name, (long long)mx);

    double b = r == n - 1 ? 3.25 : 0.0;
    comm_bcast(c, &b, 1, COMM_F64, n - 1);
    EXPECT(b == 3.25, "%s: bcast got %g", name, b);

    int32_t mine[2] = {r, 100 + r}, all[64];
    comm_allgather(c, mine, all, 2, COMM_I32);
    for (int i = 0; i < n; i++) EXPECT(all[2 * i] == i && all[2 * i + 1] == 100 + i, "%s: allgather", name);

    float rs_in[64], rs_out[2];
    for (int i = 0; i < 2 * n; i++) rs_in[i] = (float)(i + r);
    comm_reduce_scatter(c, rs_in, rs_out, 2, COMM_F32, COMM_SUM);
    for (int j = 0; j < 2; j++) {
        float want = (float)(n * (2 * r + j) + n * (n - 1) / 2);
        EXPECT(rs_out[j] == want, "%s: reduce_scatter got %g want %g", name, rs_out[j], want);
    }

    /* ring exchange by paired non-blocking send/recv */
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    float out = (float)r, in = -1.0f;
    comm_req *rq = comm_irecv(c, &in, 1, COMM_F32, prev, 7);
    comm_req *sq = comm_isend(c, &out, 1, COMM_F32, next, 7);
    comm_wait(sq);
    comm_wait(rq);
    EXPECT(in == (float)prev, "%s: ring recv got %g want %d", name, in, prev);

    float acc[4] = {1, 2, 3, (float)r};
    comm_req *ar = comm_iallreduce(c, acc, 4, COMM_F32, COMM_SUM);
    comm_wait(ar);
    EXPECT(acc[0] == (float)n && acc[1] == (float)(2 * n) && acc[2] == (float)(3 * n) &&
           acc[3] == (float)(n * (n - 1) / 2), "%s: iallreduce got {%g, %g, %g, %g}", name, acc[0], acc[1], acc[2], acc[3]);

    /* uneven pieces: rank i has i + 1 elements (reduce-scatter with counts, in-place all-gather) */
    size_t cnt[64], dsp[64], tot = 0;
    for (int i = 0; i < n; i++) dsp[i] = tot, cnt[i] = (size_t)i + 1, tot += cnt[i];
    float vin[2100], vout[64];
    for (size_t i = 0; i < tot; i++) vin[i] = (float)i + (float)r;
    comm_wait(comm_ireduce_scatterv(c, vin, vout, cnt, COMM_F32, COMM_SUM));
    for (size_t j = 0; j < cnt[r]; j++) {
        float want = (float)n * (float)(dsp[r] + j) + (float)(n * (n - 1) / 2);
        EXPECT(vout[j] == want, "%s: ireduce_scatterv got %g want %g", name, vout[j], want);
    }
    for (size_t i = 0; i < tot; i++) vin[i] = -1;
    for (size_t j = 0; j < cnt[r]; j++) vin[dsp[r] + j] = (float)(dsp[r] + j);
    comm_wait(comm_iallgatherv(c, vin, cnt, dsp, COMM_F32));
    for (size_t i = 0; i < tot; i++) EXPECT(vin[i] == (float)i, "%s: iallgatherv [%zu] got %g", name, i, vin[i]);

    check_progress(c, name);
    comm_barrier(c);
}

/* The slices scatter/gather sends, worked by hand: the first n % t ranks one element longer. */
static void check_slices(void)
{
    static const struct { size_t n; int t; size_t off[4], count[4]; } want[] = {
        {8, 2, {0, 4}, {4, 4}}, {7, 2, {0, 4}, {4, 3}}, {1, 2, {0, 1}, {1, 0}}, {10, 4, {0, 3, 6, 8}, {3, 3, 2, 2}},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        for (int r = 0; r < want[k].t; r++) {
            size_t off, count;
            pp_transfer_slice(want[k].n, want[k].t, r, &off, &count);
            EXPECT(off == want[k].off[r] && count == want[k].count[r], "slice %d of %zu over %d: [%zu, +%zu) want [%zu, +%zu)",
                   r, want[k].n, want[k].t, off, count, want[k].off[r], want[k].count[r]);
        }
}

/* Stage transfers on a tp 2 x pp 2 grid (4 ranks): n floats from stage 0 to stage 1 and back,
 * with and without scatter/gather, n even, odd and below tp. Under scatter/gather a sender holds
 * the right values only in its own slice (-7 elsewhere): the receiver must still get all n, so
 * a sender that sent more than its slice, or a receiver that kept only its slice (no all-gather),
 * fails here. */
static void check_stage_transfers(comm *world)
{
    ps_state *ps = ps_init(world, 2, 2);
    backend *be = be_create("cpu", 1); /* direct: comm reads and writes these host buffers */
    static const size_t sizes[] = {64, 7, 1};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (int sg = 0; sg < 2; sg++)
            for (int dir = 0; dir < 2; dir++) {
                size_t n = sizes[k], off = 0, count = n;
                int from = dir, tag = (int)(4 * k) + 2 * sg + dir;
                float buf[64];
                if (ps->pp_rank == from) {
                    if (sg) pp_transfer_slice(n, ps->tp, ps->tp_rank, &off, &count);
                    for (size_t i = 0; i < n; i++) buf[i] = i >= off && i < off + count ? (float)(100 * tag + (int)i) : -7.0f;
                    comm_wait(pp_send(ps, be, sg, buf, n, 1 - from, tag));
                } else {
                    for (size_t i = 0; i < n; i++) buf[i] = -1.0f;
                    pp_recv(ps, be, sg, buf, n, from, tag);
                    for (size_t i = 0; i < n; i++)
                        EXPECT(buf[i] == (float)(100 * tag + (int)i), "stage transfer n %zu scatter/gather %d: [%zu] got %g want %d",
                               n, sg, i, buf[i], 100 * tag + (int)i);
                }
            }
    EXPECT(pp_scatter_gather_applies(ps, 1) && !pp_scatter_gather_applies(ps, 0), "scatter/gather on tp 2 x pp 2");
    ps->sequence_parallel = 1;
    EXPECT(!pp_scatter_gather_applies(ps, 1), "scatter/gather under sequence parallelism");
    be_free(be);
    ps_free(ps);
}

/* The members of g, as world ranks in g's order. */
static void members(const ps_state *ps, const comm *g, int *out)
{
    comm_allgather(g, &ps->world_rank, out, 1, COMM_I32);
}

/* Context parallelism's grid, Megatron's order tp-cp-dp-pp, on 4 ranks: tp 1 x cp 2 x dp 2
 * (rank = cp_rank + 2 dp_rank) and tp 2 x cp 2 (rank = tp_rank + 2 cp_rank): each group's members
 * worked out by hand. */
static void check_cp_grid(comm *world)
{
    int r = comm_rank(world), m[4];
    ps_state *ps = ps_init_cp(world, 1, 2, 1);
    EXPECT(ps->cp == 2 && ps->dp == 2 && ps->cp_rank == r % 2 && ps->dp_rank == r / 2 && ps->dpcp == 4 &&
           ps->dpcp_rank == r, "cp grid tp 1 x cp 2 x dp 2: rank %d has cp %d/%d dp %d/%d dpcp %d/%d", r, ps->cp_rank,
           ps->cp, ps->dp_rank, ps->dp, ps->dpcp_rank, ps->dpcp);
    members(ps, ps->cp_group, m);
    EXPECT(m[0] == r / 2 * 2 && m[1] == r / 2 * 2 + 1, "cp group of rank %d: %d %d", r, m[0], m[1]);
    members(ps, ps->dp_group, m);
    EXPECT(m[0] == r % 2 && m[1] == r % 2 + 2, "dp group of rank %d: %d %d", r, m[0], m[1]);
    members(ps, ps->dpcp_group, m);
    EXPECT(m[0] == 0 && m[1] == 1 && m[2] == 2 && m[3] == 3, "dp x cp group of rank %d: %d %d %d %d", r, m[0], m[1],
           m[2], m[3]);
    EXPECT(comm_size(ps->mp_group) == 1 && comm_size(ps->tp_group) == 1, "tp and model-parallel groups of one");
    /* the experts' grid without ep: their gradients over dp x cp */
    EXPECT(ps->edp_group == ps->dpcp_group && ps->edp == 4 && ps->edp_rank == r, "cp 2 x dp 2, ep 1: rank %d edp %d/%d",
           r, ps->edp_rank, ps->edp);
    /* ep 2 carved out of dp x cp (Megatron's expert grid): ep over consecutive dp x cp ranks */
    ps_init_experts(ps, 2);
    EXPECT(ps->ep_rank == r % 2 && ps->edp == 2 && ps->edp_rank == r / 2, "cp 2 x dp 2, ep 2: rank %d ep %d edp %d/%d",
           r, ps->ep_rank, ps->edp_rank, ps->edp);
    members(ps, ps->ep_group, m);
    EXPECT(m[0] == r / 2 * 2 && m[1] == r / 2 * 2 + 1, "ep group of rank %d (its cp group's ranks): %d %d", r, m[0], m[1]);
    members(ps, ps->edp_group, m);
    EXPECT(m[0] == r % 2 && m[1] == r % 2 + 2, "expert-data-parallel group of rank %d: %d %d", r, m[0], m[1]);
    ps_free(ps);
    ps = ps_init_cp(world, 1, 2, 1);
    ps_init_experts(ps, 4); /* ep over the whole dp x cp: every rank its own experts */
    members(ps, ps->ep_group, m);
    EXPECT(ps->ep_rank == r && ps->edp == 1 && comm_size(ps->edp_group) == 1 && m[0] == 0 && m[3] == 3,
           "cp 2 x dp 2, ep 4: rank %d ep %d edp %d", r, ps->ep_rank, ps->edp);
    ps_free(ps);
    ps = ps_init_cp(world, 2, 2, 1);
    EXPECT(ps->tp_rank == r % 2 && ps->cp_rank == r / 2 && ps->dp == 1, "cp grid tp 2 x cp 2: rank %d", r);
    members(ps, ps->tp_group, m);
    EXPECT(m[0] == r / 2 * 2 && m[1] == r / 2 * 2 + 1, "tp group of rank %d: %d %d", r, m[0], m[1]);
    members(ps, ps->cp_group, m);
    EXPECT(m[0] == r % 2 && m[1] == r % 2 + 2, "cp group of rank %d: %d %d", r, m[0], m[1]);
    members(ps, ps->dpcp_group, m);
    EXPECT(m[0] == r % 2 && m[1] == r % 2 + 2, "dp x cp group of rank %d (= cp): %d %d", r, m[0], m[1]);
    EXPECT(comm_size(ps->mp_group) == 2, "model-parallel group (tp x pp) of 2");
    ps_init_experts(ps, 2); /* dp 1: ep is the cp group, within a tp rank */
    members(ps, ps->ep_group, m);
    EXPECT(ps->ep_rank == r / 2 && ps->edp == 1 && m[0] == r % 2 && m[1] == r % 2 + 2,
           "tp 2 x cp 2, ep 2: rank %d ep %d, group %d %d", r, ps->ep_rank, m[0], m[1]);
    ps_free(ps);
}

/* Many collectives in flight on one group at once, polled with comm_test, waited out of order:
 * each still gives its own sums (the staged hierarchical ones must keep their order per group). */
static void check_in_flight(const comm *c, const char *name)
{
    int r = comm_rank(c), n = comm_size(c);
    enum { K = 5, E = 37 };
    float ar[K][E], rs_in[K][E * 4], rs_out[K][E], ag[K][E * 4];
    size_t cnt[4], dsp[4];
    for (int i = 0; i < n; i++) cnt[i] = E, dsp[i] = (size_t)i * E;
    comm_req *q[3 * K];
    for (int b = 0; b < K; b++) {
        for (int j = 0; j < E; j++) ar[b][j] = (float)(b * 1000 + j + r);
        for (int j = 0; j < E * n; j++) rs_in[b][j] = (float)(b + j * r);
        for (int j = 0; j < E * n; j++) ag[b][j] = j / E == r ? (float)(b * 7 + j) : -1.0f;
        q[3 * b] = comm_iallreduce(c, ar[b], E, COMM_F32, COMM_SUM);
        q[3 * b + 1] = comm_ireduce_scatterv(c, rs_in[b], rs_out[b], cnt, COMM_F32, COMM_SUM);
        q[3 * b + 2] = comm_iallgatherv(c, ag[b], cnt, dsp, COMM_F32);
        comm_test(q[0]);
    }
    for (int spin = 0; spin < 100 && !comm_test(q[3 * K - 1]); spin++) comm_test(q[1]);
    for (int i = 3 * K - 1; i >= 0; i--) comm_wait(q[i]);
    for (int b = 0; b < K; b++)
        for (int j = 0; j < E; j++) {
            EXPECT(ar[b][j] == (float)(n * (b * 1000 + j) + n * (n - 1) / 2), "%s: in flight: all-reduce %d[%d] got %g",
                   name, b, j, ar[b][j]);
            size_t g = (size_t)r * E + (size_t)j; /* sum over ranks q of b + g * q */
            EXPECT(rs_out[b][j] == (float)(n * b) + (float)g * (float)(n * (n - 1) / 2),
                   "%s: in flight: reduce-scatter %d[%d] got %g", name, b, j, rs_out[b][j]);
        }
    for (int b = 0; b < K; b++)
        for (int j = 0; j < E * n; j++)
            EXPECT(ag[b][j] == (float)(b * 7 + j), "%s: in flight: all-gather %d[%d] got %g", name, b, j, ag[b][j]);
}

/* The hierarchical view of the world when its ranks sit on the hosts host_of(rank): NULL unless
 * two hosts or more hold as many ranks each, two at least; else the flat group's results. */
static void check_hier(comm *world, int hosts, int interleaved)
{
    int r = comm_rank(world), n = comm_size(world);
    char host[64], name[48];
    snprintf(host, sizeof host, "h%d", interleaved ? r % hosts : r * hosts / n);
    snprintf(name, sizeof name, "hierarchical %d hosts%s", hosts, interleaved ? " interleaved" : "");
    comm *h = comm_hier_create(world, host);
    int even = n % hosts == 0, want = hosts >= 2 && even && n / hosts >= 2;
    EXPECT((h != NULL) == want, "%s: comm_hier_create gave %s for %d ranks", name, h ? "a view" : "NULL", n);
    if (!h) return;
    int nodes, per;
    comm_hier_shape(h, &nodes, &per);
    EXPECT(nodes == hosts && per == n / hosts, "%s: shape %d x %d", name, nodes, per);
    check_group(h, name);
    check_in_flight(h, name);
    comm_free(h);
}

/* Rank q's element j: floats of many magnitudes, so that the order of a sum shows in its bits. */
static float ring_term(int q, size_t j) { return ldexpf(1.0f + (float)((q * 7 + (int)j * 13) % 17) / 17.0f, (q * 5 + (int)j) % 40 - 20); }

/* The sum a ring gives for an element of part x on n ranks, worked here: rank x+1's term, plus
 * rank x+2's, ... plus rank x's last, each addition rounded to float. */
static float ring_sum(int n, int x, size_t j)
{
    float acc = ring_term((x + 1) % n, j);
    for (int k = 2; k <= n; k++) acc += ring_term((x + k) % n, j);
    return acc;
}

/* With TRIDENT_RING_MIN_BYTES=0 every float sum goes through the ring collectives (src/comm/ring.c):
 * their results must be the ring's order of additions bit for bit (so a binomial or any other
 * order fails on 3 ranks or more), the same on every rank. All-reduce (blocking, and started then
 * advanced by comm_test) split into n near-equal parts; reduce-scatter with uneven parts. */
static void check_ring_order(const comm *c)
{
    const char *v = getenv("TRIDENT_RING_MIN_BYTES");
    if (!v || strcmp(v, "0") != 0) return;
    int r = comm_rank(c), n = comm_size(c);
    enum { N = 1001 };
    static float a[N], b[N], send[N], recv[N];
    for (size_t j = 0; j < N; j++) a[j] = b[j] = send[j] = ring_term(r, j);
    comm_allreduce(c, a, N, COMM_F32, COMM_SUM);
    comm_req *q = comm_iallreduce(c, b, N, COMM_F32, COMM_SUM);
    while (!comm_test(q)) {}
    comm_wait(q);
    for (size_t j = 0, x = 0, end = N / (size_t)n + (N % (size_t)n > 0); j < N; j++) {
        while (j >= end) x++, end += N / (size_t)n + (x < N % (size_t)n);
        float want = ring_sum(n, (int)x, j);
        EXPECT(a[j] == want && b[j] == want, "ring all-reduce [%zu] (part %zu): %.9g and %.9g, want %.9g", j, x, a[j], b[j], want);
    }
    size_t counts[8], at = 0, mine = 0;
    for (int i = 0; i < n; i++) {
        counts[i] = (size_t)(i * 97 + 13) % 300;
        if (i == r) mine = at;
        at += counts[i];
    }
    comm_wait(comm_ireduce_scatterv(c, send, recv, counts, COMM_F32, COMM_SUM));
    for (size_t j = 0; j < counts[r]; j++)
        EXPECT(recv[j] == ring_sum(n, r, mine + j), "ring reduce-scatter [%zu]: %.9g want %.9g", j, recv[j], ring_sum(n, r, mine + j));
}

/* --timeout-relay (3 ranks, never returns): ranks 1 and 2 wait for a message from each other that
 * never comes; rank 0 starts its own such wait (from rank 1) a second later, so theirs time out
 * first (a 2 s limit) while rank 0 is still waiting: it answers their roll call and, the lowest
 * rank that answered, prints the job's one line about a wait that was not its own. */
static void timeout_relay(comm *world)
{
    comm_set_timeout(2.0);
    int r = comm_rank(world);
    if (r == 0) {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
    }
    int32_t x = 0;
    comm_wait(comm_irecv(world, &x, 1, COMM_I32, r == 0 ? 1 : 3 - r, 99));
    fprintf(stderr, "rank %d: the wait returned\n", r);
}

/* A process started alone (parallel/comm_np1: no mpirun) is a world of one without MPI (solo.c):
 * MPI is never initialised; messages to itself match by tag in posting order, whichever side is
 * posted first, as MPI's do; a wait on a message to itself never posted ends the process with a
 * line that says so, rather than hanging. */
static void check_alone(const comm *world)
{
    if (comm_size(world) != 1 || getenv("OMPI_COMM_WORLD_SIZE")) return;
    int inited = 1;
    MPI_Initialized(&inited);
    EXPECT(!inited, "a process started alone initialised MPI");
    float a = 1, b = 2, ra = 0, rb = 0;
    comm_req *sa = comm_isend(world, &a, 1, COMM_F32, 0, 3), *sb = comm_isend(world, &b, 1, COMM_F32, 0, 4);
    EXPECT(!comm_test(sa), "a send to itself complete before its receive was posted");
    comm_req *qb = comm_irecv(world, &rb, 1, COMM_F32, 0, 4), *qa = comm_irecv(world, &ra, 1, COMM_F32, 0, 3);
    EXPECT(comm_test(sa) && comm_test(qb), "matched messages to itself not complete");
    comm_wait(qa), comm_wait(sb), comm_wait(sa), comm_wait(qb);
    EXPECT(ra == 1 && rb == 2, "messages to itself by tag: got %g and %g, want 1 and 2", ra, rb);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(99);
        float x;
        comm_wait(comm_irecv(world, &x, 1, COMM_F32, 0, 5));
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 1, "a wait on a receive from itself never sent: status %d", st);
}

int main(int argc, char **argv)
{
    comm *world = comm_world_init(&argc, &argv);
    if (argc > 1 && strcmp(argv[1], "--timeout-relay") == 0) timeout_relay(world);
    check_group(world, "world");
    /* even/odd split, ordered by descending rank */
    comm *half = comm_split(world, comm_rank(world) % 2, -comm_rank(world));
    check_group(half, "half");
    int hn = comm_size(half), hr = comm_rank(half);
    EXPECT(hn == (comm_size(world) + 1 - comm_rank(world) % 2) / 2, "split size %d", hn);
    EXPECT(hr == (hn - 1) - comm_rank(world) / 2, "split rank %d", hr);
    comm_free(half);
    check_slices();
    if (comm_size(world) == 4) check_stage_transfers(world);
    if (comm_size(world) == 4) check_cp_grid(world);
    check_in_flight(world, "world");
    check_ring_order(world);
    check_hier(world, 1, 0);
    check_hier(world, 2, 0);
    check_hier(world, 2, 1);
    check_alone(world);
    int total = g_checks;
    comm_allreduce(world, &total, 1, COMM_I32, COMM_SUM);
    if (comm_rank(world) == 0) printf("comm: %d passed, 0 failed\n", total);
    comm_world_finalize(world);
    return 0;
}
