/* The MPI communicator under mpirun: every collective and point-to-point call against values
 * each rank can compute on its own, on the world and on split sub-groups. Prints
 * "N passed, 0 failed" on rank 0; any mismatch aborts the job with its message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/comm.h"
#include "trident/comm_hier.h"

static int g_checks;

#define EXPECT(cond, ...)                                                                \
    do {                                                                                 \
        g_checks++;                                                                      \
        if (!(cond)) td_fatal(1, __VA_ARGS__);                                           \
    } while (0)

static void check_group(const comm *c, const char *name)
{
    int r = comm_rank(c), n = comm_size(c);

    float s[3] = {(float)r, 1.0f, (float)(r * r)};
    comm_allreduce(c, s, 3, COMM_F32, COMM_SUM);
    EXPECT(s[0] == (float)(n * (n - 1) / 2) && s[1] == (float)n, "%s: allreduce sum wrong", name);

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
    EXPECT(acc[0] == (float)n && acc[3] == (float)(n * (n - 1) / 2), "%s: iallreduce", name);

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

    comm_barrier(c);
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

int main(int argc, char **argv)
{
    comm *world = comm_world_init(&argc, &argv);
    check_group(world, "world");
    /* even/odd split, ordered by descending rank */
    comm *half = comm_split(world, comm_rank(world) % 2, -comm_rank(world));
    check_group(half, "half");
    int hn = comm_size(half), hr = comm_rank(half);
    EXPECT(hn == (comm_size(world) + 1 - comm_rank(world) % 2) / 2, "split size %d", hn);
    EXPECT(hr == (hn - 1) - comm_rank(world) / 2, "split rank %d", hr);
    comm_free(half);
    check_in_flight(world, "world");
    check_hier(world, 1, 0);
    check_hier(world, 2, 0);
    check_hier(world, 2, 1);
    int total = g_checks;
    comm_allreduce(world, &total, 1, COMM_I32, COMM_SUM);
    if (comm_rank(world) == 0) printf("comm: %d passed, 0 failed\n", total);
    comm_world_finalize(world);
    return 0;
}
