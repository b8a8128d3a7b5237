/* `trident plan --calibrate`: the machines trident trains on, one device per MPI rank, over one
 * node or several (see plan_calibrate in include/plan/trident/plan.h). Every rank measures at once,
 * as training runs them:
 *  - the sgemm peak (the backend's own measurement, as the trainer's MFU uses) and the curve:
 *    square GEMMs of 128 and 1024, whose efficiency fits gemm_max_efficiency and gemm_half_dim;
 *  - the copy bandwidth of buffers far larger than the caches;
 *  - the GEMMs and copies each run back to back for at least --calibrate-seconds (0.3 s) and timed as work over wall
 *    time, so a node under a CPU quota (cgroup cpu.cfs_quota_us) is measured at the rate its
 *    ranks get, not at the full speed a short burst inside one quota period sees; and the cores
 *    a node's ranks may use (their affinity, under the quota: cores_per_node, maybe fractional);
 *  - the links, apart: all-reduces among the ranks of each node (every node at once) and among
 *    the ranks of one local index on every node (every index at once: each node's link carries
 *    all its ranks, so a rank gets its share), of 4 bytes to 4 MiB, fitted to
 *    latency + size / bandwidth by least squares (the ring's 2 (n - 1) steps and 2 (n - 1) / n
 *    of the bytes);
 *  - the resident memory a rank holds before any model (libraries, MPI).
 * Nodes are the ranks' host names (gethostname), in order of first appearance. The slowest rank's
 * figures are kept. */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "trident/check.h"
#include "trident/comm.h"
#include "trident/comm_hier.h"
#include "trident/cores.h"
#include "trident/plan.h"
#include "trident/timer.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* A measurement lasts at least `seconds` (--calibrate-seconds, 0.3 by default): a CPU quota
 * (cgroup cpu.cfs_quota_us, periods of 100 ms by default) lets a rank run at the full speed of its
 * cores for part of each period only, so a measurement shorter than a few periods could see the
 * full speed; over 0.3 s it sees the rate the quota leaves. The best of 3 such windows: other work
 * on the machine (not a quota) comes and goes. */
#define WINDOWS 3

/* Work a second of `kernel(be, ctx)` (each call `work` of it) run back to back for at least
 * `seconds`: the work over the wall time, so a quota's pauses count; the best of WINDOWS windows. */
static double sustained_rate(const backend *be, void (*kernel)(const backend *, void *), void *ctx, double work,
                             double seconds)
{
    double best = 0;
    for (int w = 0; w < WINDOWS; w++) {
        be_event t0 = be_event_record(be), t1;
        double t = 0;
        int reps = 0;
        do {
            kernel(be, ctx);
            reps++;
            t1 = be_event_record(be);
            t = be_event_elapsed(be, &t0, &t1);
        } while (t < seconds || reps < 2);
        best = fmax(best, work * reps / t);
    }
    return best;
}

typedef struct {
    float *a, *b, *c; /* (n, n) each */
    int n;
} gemm_args;

static void gemm_once(const backend *be, void *ctx)
{
    gemm_args *g = ctx;
    be_matmul_fwd(be, g->c, g->a, g->b, NULL, g->n, g->n, g->n);
}

/* FLOP/s of (n, n) x (n, n) GEMMs (sustained_rate, after a warm-up). */
static double gemm_rate(const backend *be, int n, double seconds)
{
    size_t bytes = (size_t)n * n * sizeof(float);
    gemm_args g = {be_alloc(be, bytes), be_alloc(be, bytes), be_alloc(be, bytes), n};
    float *h = td_xmalloc(bytes);
    for (size_t i = 0; i < (size_t)n * n; i++) h[i] = (float)(i % 7) * 0.01f;
    be_memcpy(be, g.a, h, bytes, BE_H2D);
    for (size_t i = 0; i < (size_t)n * n; i++) h[i] = (float)(i % 5) * 0.01f;
    be_memcpy(be, g.b, h, bytes, BE_H2D);
    free(h);
    gemm_once(be, &g); /* warm-up */
    double rate = sustained_rate(be, gemm_once, &g, 2.0 * n * n * (double)n, seconds);
    be_dfree(be, g.a), be_dfree(be, g.b), be_dfree(be, g.c);
    return rate;
}

typedef struct {
    float *x, *y;
    size_t n; /* floats each */
} copy_args;

static void copy_once(const backend *be, void *ctx)
{
    copy_args *k = ctx;
    be_copy(be, k->y, k->x, k->n);
}

/* Bytes/s of copies of 256 MiB (read and written; sustained_rate, after a warm-up). */
static double copy_rate(const backend *be, double seconds)
{
    size_t bytes = (size_t)256 << 20;
    copy_args k = {be_alloc(be, bytes), be_alloc(be, bytes), bytes / sizeof(float)};
    be_zero(be, k.x, k.n), be_zero(be, k.y, k.n); /* pages in */
    copy_once(be, &k);                           /* warm-up */
    double rate = sustained_rate(be, copy_once, &k, be_copy_bytes(bytes), seconds);
    be_dfree(be, k.x), be_dfree(be, k.y);
    return rate;
}

/* gemm_max_efficiency and gemm_half_dim from the rates of GEMMs of 1024 and 128 against c's
 * peak: emax f(1024)^3 = big, taken as emax, and emax f(128)^3 = small, f(d) = d / (d + half). */
static void fit_gemm_curve(plan_cluster *c, double big_rate, double small_rate)
{
    double big = big_rate / c->peak[0], small = small_rate / c->peak[0];
    double emax = big > 0.05 ? (big > 1 ? 1 : big) : 0.05;
    double f = small / emax;
    f = f >= 1 ? 0.999 : f <= 1e-3 ? 1e-3 : f;
    c->gemm_emax = emax;
    c->gemm_half = 128.0 * (1.0 / cbrt(f) - 1.0);
}

static double resident_gib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    double kb = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) kb = atof(line + 6);
    fclose(f);
    return kb * 1024.0 / GIB;
}

/* Node of every rank (hosts numbered in order of first appearance; caller frees), the number
 * of nodes and the most ranks a node holds. --fake-hosts N (tests on one machine) names the
 * ranks' hosts as N nodes filled in rank order would (comm_host_name). Collective over world. */
static int *node_of_ranks(comm *world, int *nodes, int *per_node)
{
    enum { HOST = 64 };
    int n = comm_size(world);
    char me[HOST] = "";
    comm_host_name(comm_rank(world), n, me, sizeof me);
    char *hosts = td_xcalloc((size_t)n, HOST);
    comm_allgather(world, me, hosts, HOST, COMM_U8);
    int *node = td_xcalloc((size_t)n, sizeof *node), *count = td_xcalloc((size_t)n, sizeof *count);
    *nodes = 0, *per_node = 0;
    for (int r = 0; r < n; r++) {
        node[r] = -1;
        for (int q = 0; q < r && node[r] < 0; q++)
            if (strcmp(hosts + (size_t)q * HOST, hosts + (size_t)r * HOST) == 0) node[r] = node[q];
        if (node[r] < 0) node[r] = (*nodes)++;
        if (++count[node[r]] > *per_node) *per_node = count[node[r]];
    }
    free(count);
    free(hosts);
    return node;
}

/* Best seconds of an all-reduce of `count` floats over c, started together with every other
 * group of world (a barrier of world before each). Collective over world. */
static double allreduce_best(comm *world, comm *c, float *buf, size_t count, int reps)
{
    double best = 1e30;
    for (int k = 0; k < reps; k++) {
        comm_barrier(world);
        double t0 = td_now();
        comm_allreduce(c, buf, count, COMM_F32, COMM_SUM);
        double t = td_now() - t0;
        best = t < best ? t : best;
    }
    return best;
}

/* Fits the link under c's all-reduces, t = 2 (n - 1) lat + 2 (n - 1) / n S / bw (the ring's steps
 * and bytes, plan_allreduce_s), on S of 4 bytes to 4 MiB by least squares. Every rank of world
 * calls it, with its own c (one rank: writes nothing). Collective over world. */
static void fit_link(comm *world, comm *c, double *bw, double *lat)
{
    static const size_t COUNTS[] = {1, 1 << 14, 1 << 18, 1 << 20}; /* floats: 4 B, 64 KiB, 1 MiB, 4 MiB */
    enum { NS = sizeof COUNTS / sizeof COUNTS[0] };
    int n = comm_size(c);
    float *buf = td_xcalloc(COUNTS[NS - 1], sizeof *buf);
    double x[NS], y[NS], mx = 0, my = 0;
    for (int i = 0; i < NS; i++) {
        x[i] = 2.0 * (n - 1) / (n > 1 ? n : 1) * (double)COUNTS[i] * sizeof(float);
        y[i] = allreduce_best(world, c, buf, COUNTS[i], i < 2 ? 20 : 6); /* best of several: a busy host's slices */
        mx += x[i] / NS, my += y[i] / NS;
    }
    free(buf);
    if (n < 2) return;
    double sxy = 0, sxx = 0;
    for (int i = 0; i < NS; i++) sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx);
    double slope = sxy / sxx, icept = my - slope * mx;
    if (slope <= 0) slope = (y[NS - 1] > 0 ? y[NS - 1] : 1e-9) / x[NS - 1]; /* noise: the largest alone */
    *bw = 1.0 / slope;
    *lat = icept > 0 ? icept / (2.0 * (n - 1)) : 1e-7;
}

void plan_calibrate(plan_cluster *c, const char *backend_name, double seconds, comm *world)
{
    memset(c, 0, sizeof *c);
    double reserved = resident_gib();
    int nodes, per_node;
    int *node = node_of_ranks(world, &nodes, &per_node);
    int me = comm_rank(world), local = 0;
    for (int q = 0; q < me; q++) local += node[q] == node[me];
    int my_node = node[me];
    free(node);
    backend *be = be_create(backend_name, 0);
    /* a backend with memory of its own is a device (cuda): its name, memory and 16-bit peaks */
    int device = be->ops->mem_capacity != NULL;
    if (device) {
        char d[512] = "", gpu[40] = "GPU";
        be_describe(be, d, sizeof d); /* "CUDA on NAME (device ..." */
        const char *on = strstr(d, " on "), *par = on ? strstr(on, " (") : NULL;
        if (on && par && par > on + 4) snprintf(gpu, sizeof gpu, "%.*s", (int)(par - on - 4), on + 4);
        snprintf(c->name, sizeof c->name, "%d node%s x %d rank%s, %s", nodes, nodes > 1 ? "s" : "", per_node,
                 per_node > 1 ? "s" : "", gpu);
    } else
        snprintf(c->name, sizeof c->name, "%d node%s x %d rank%s, %d thread%s each", nodes, nodes > 1 ? "s" : "",
                 per_node, per_node > 1 ? "s" : "", be_cpu_threads(be), be_cpu_threads(be) > 1 ? "s" : "");
    c->trident_cpu = 1;
    c->trident_gpu = device;
    c->gpus_per_node = per_node;
    c->nodes = nodes;
    c->cores_per_node = td_usable_cores();
    comm_barrier(world);
    /* the sgemm peak (the trainer's MFU peak), and what the ranks get, every rank at once, over
     * enough of a quota's periods: efficiency of n^3 GEMMs against the peak */
    double big_rate = gemm_rate(be, 1024, seconds), small_rate = gemm_rate(be, 128, seconds);
    double peak = fmax(be_peak_gflops(be) * 1e9, big_rate);
    double copy_bw = copy_rate(be, seconds);
    /* MPI: the link inside a node and the one across nodes, apart; a rank that measures none
     * of them gives figures neutral in the min / max below */
    double intra_bw = 1e30, intra_lat = 0, inter_bw = 1e30, inter_lat = 0;
    comm *in = comm_split(world, my_node, me); /* every node at once */
    /* the ranks of this node on this rank's device (several ranks may share one GPU) */
    int sharing = 1;
    if (device) {
        int n_in = comm_size(in), *devs = td_xcalloc((size_t)n_in, sizeof *devs);
        comm_allgather(in, &be->device, devs, sizeof(int), COMM_U8);
        sharing = 0;
        for (int r = 0; r < n_in; r++) sharing += devs[r] == be->device;
        free(devs);
    }
    fit_link(world, in, &intra_bw, &intra_lat);
    comm_free(in);
    comm *across = comm_split(world, local, me); /* every local index at once */
    fit_link(world, across, &inter_bw, &inter_lat);
    comm_free(across);
    /* the slowest rank's figures, the largest holdings */
    double mine[8] = {-peak, -big_rate, -small_rate, -copy_bw, -intra_bw, intra_lat, -inter_bw, inter_lat}, all[8];
    memcpy(all, mine, sizeof mine);
    comm_allreduce(world, all, 8, COMM_F64, COMM_MAX);
    comm_allreduce(world, &reserved, 1, COMM_F64, COMM_MAX);
    c->peak[0] = fmax(-all[0], -all[1]);
    fit_gemm_curve(c, -all[1], -all[2]);
    c->hbm_bw = -all[3];
    /* one rank a node: nothing measured inside, the copy stands for it; one node: no network */
    c->intra_bw = per_node > 1 ? -all[4] : c->hbm_bw;
    c->intra_lat = per_node > 1 ? all[5] : 1e-6;
    c->inter_bw = nodes > 1 ? -all[6] : c->intra_bw;
    c->inter_lat = nodes > 1 ? all[7] : c->intra_lat;
    c->mem_reserved_gib = reserved;
    /* a device's memory: this machine's, shared by its ranks */
    FILE *m = fopen("/proc/meminfo", "r");
    double kb = 0;
    char line[256];
    while (m && fgets(line, sizeof line, m))
        if (strncmp(line, "MemTotal:", 9) == 0) kb = atof(line + 9);
    if (m) fclose(m);
    c->mem_gib = kb > 0 ? kb * 1024.0 / GIB / per_node : 1;
    if (device) {
        /* the device's memory, its share for each rank on it; held besides the model: what is in
         * use on it now (contexts, this backend's staging), a rank's share; the 16-bit peaks */
        size_t used = 0, total = be->ops->mem_capacity(be, &used);
        double mine2[2] = {(double)total / GIB / sharing, (double)used / GIB / sharing}, least[2];
        least[0] = -mine2[0], least[1] = mine2[1];
        comm_allreduce(world, least, 2, COMM_F64, COMM_MAX);
        c->mem_gib = -least[0];
        c->mem_reserved_gib = least[1];
        for (int d = BE_BF16; d <= BE_F16; d++) {
            backend *lp = be_create(backend_name, 0);
            double p = 0;
            if (lp->ops->lp_native(lp, (be_dtype)d)) {
                be_set_gemm_dtype(lp, (be_dtype)d);
                p = be_peak_gflops(lp) * 1e9;
            }
            be_free(lp);
            comm_allreduce(world, &p, 1, COMM_F64, COMM_MIN);
            c->peak[d] = p;
        }
    }
    be_free(be);
}
