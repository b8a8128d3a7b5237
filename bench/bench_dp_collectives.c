/* One bucket's data-parallel all-reduce three ways on the world (run it under mpirun across
 * hosts): trident's flat group (its ring collectives from TRIDENT_RING_MIN_BYTES, 256 KiB, else MPI_Iallreduce; what the trainer does), its
 * hierarchical view (src/comm/hier.c), and a blocking MPI_Allreduce, the only call Open MPI 4.1's
 * HAN takes over (run once with --mca coll_han_priority 100 and once without). Rounds alternate the
 * three; prints the median seconds of each on the slowest rank. Usage:
 *   mpirun ... bench_dp_collectives [ELEMENTS (default 38461440)] [ROUNDS (default 3)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "trident/check.h"
#include "trident/comm.h"
#include "trident/comm_hier.h"
#include "trident/timer.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Seconds of one all-reduce of buf (n floats) the way `how` says, on the slowest rank. */
static double one(comm *world, comm *hier, int how, float *buf, float *out, size_t n)
{
    comm_barrier(world);
    double t0 = td_now();
    if (how == 0) comm_allreduce(world, buf, n, COMM_F32, COMM_SUM);
    else if (how == 1) comm_allreduce(hier, buf, n, COMM_F32, COMM_SUM);
    else MPI_Allreduce(buf, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* HAN 4.1 crashes on MPI_IN_PLACE */
    double t = td_now() - t0;
    comm_allreduce(world, &t, 1, COMM_F64, COMM_MAX);
    return t;
}

int main(int argc, char **argv)
{
    comm *world = comm_world_init(&argc, &argv);
    size_t n = argc > 1 ? (size_t)atoll(argv[1]) : 38461440;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    char host[64];
    comm_host_name(comm_rank(world), comm_size(world), host, sizeof host);
    comm *hier = comm_hier_create(world, host);
    if (!hier) td_fatal(2, "the world does not span two hosts with as many ranks on each, two at least");
    int nodes, per;
    comm_hier_shape(hier, &nodes, &per);
    float *buf = td_xcalloc(n, sizeof(float)), *out = td_xcalloc(n, sizeof(float));
    double *t = td_xcalloc(3 * (size_t)rounds, sizeof(double));
    for (int how = 0; how < 3; how++) one(world, hier, how, buf, out, n); /* warm-up */
    for (int r = 0; r < rounds; r++)
        for (int how = 0; how < 3; how++) t[how * rounds + r] = one(world, hier, how, buf, out, n);
    static const char *names[3] = {"trident flat", "trident hierarchical", "MPI_Allreduce (blocking)"};
    if (comm_rank(world) == 0) {
        printf("all-reduce of %zu floats (%.1f MB), %d hosts x %d ranks, median of %d\n", n, n * 4e-6, nodes, per, rounds);
        for (int how = 0; how < 3; how++) {
            qsort(t + how * rounds, (size_t)rounds, sizeof(double), cmp_double);
            printf("  %-32s %8.1f ms\n", names[how], t[how * rounds + rounds / 2] * 1e3);
        }
    }
    free(t), free(buf), free(out);
    comm_free(hier);
    comm_world_finalize(world);
    return 0;
}
