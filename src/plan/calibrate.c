/* `trident plan --calibrate`: this machine as trident trains on it, one device per MPI rank (see
 * plan_calibrate in include/plan/trident/plan.h). Every rank measures at once, as training runs them:
 *  - the sgemm peak (the backend's own measurement, as the trainer's MFU uses) and the curve:
 *    square GEMMs of 64 to 1024, whose efficiency fits gemm_max_efficiency and gemm_half_dim;
 *  - the copy bandwidth of buffers far larger than the caches;
 *  - with several ranks, the all-reduce's bandwidth (8 MiB) and latency (one float);
 *  - the resident memory a rank holds before any model (libraries, MPI).
 * The slowest rank's figures are kept. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "trident/check.h"
#include "trident/comm.h"
#include "trident/plan.h"
#include "trident/timer.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* Best seconds of `reps` runs of an (n, n) x (n, n) GEMM, timed by the backend's events. */
static double gemm_best(const backend *be, int n, int reps)
{
    size_t bytes = (size_t)n * n * sizeof(float);
    float *a = be_alloc(be, bytes), *b = be_alloc(be, bytes), *c = be_alloc(be, bytes);
    float *h = td_xmalloc(bytes);
    for (size_t i = 0; i < (size_t)n * n; i++) h[i] = (float)(i % 7) * 0.01f;
    be_memcpy(be, a, h, bytes, BE_H2D);
    for (size_t i = 0; i < (size_t)n * n; i++) h[i] = (float)(i % 5) * 0.01f;
    be_memcpy(be, b, h, bytes, BE_H2D);
    free(h);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        be_event t0 = be_event_record(be);
        be_matmul_fwd(be, c, a, b, NULL, n, n, n);
        be_event t1 = be_event_record(be);
        double t = be_event_elapsed(be, &t0, &t1);
        best = t < best ? t : best;
    }
    be_dfree(be, a), be_dfree(be, b), be_dfree(be, c);
    return best;
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

void plan_calibrate(plan_cluster *c, const char *backend_name, comm *world)
{
    memset(c, 0, sizeof *c);
    int n = comm_size(world);
    double reserved = resident_gib();
    backend *be = be_create(backend_name, 0);
    snprintf(c->name, sizeof c->name, "this machine (%d rank%s, %d thread%s each)", n, n > 1 ? "s" : "", be->nthreads,
             be->nthreads > 1 ? "s" : "");
    c->trident_cpu = 1;
    c->gpus_per_node = n;
    comm_barrier(world);
    double peak = be_peak_gflops(be) * 1e9;
    /* the curve: efficiency of n^3 GEMMs against the peak; f(d) = d / (d + half) per dimension */
    double big = 2.0 * 1024 * 1024 * 1024 / gemm_best(be, 1024, 5) / peak;
    double small = 2.0 * 128 * 128 * 128 / gemm_best(be, 128, 50) / peak;
    double emax = big > 0.05 ? (big > 1 ? 1 : big) : 0.05;
    /* emax f(128)^3 = small, with f(1024)^3 taken as 1 */
    double f = small / emax;
    f = f >= 1 ? 0.999 : f <= 1e-3 ? 1e-3 : f;
    double r = cbrt(f);
    double half = 128.0 * (1.0 / r - 1.0);
    /* copy bandwidth: bytes read and written */
    size_t bytes = (size_t)256 << 20;
    float *x = be_alloc(be, bytes), *y = be_alloc(be, bytes);
    be_zero(be, x, bytes / sizeof(float)), be_zero(be, y, bytes / sizeof(float)); /* pages in */
    double tcopy = 1e30;
    for (int k = 0; k < 5; k++) {
        be_event t0 = be_event_record(be);
        be_copy(be, y, x, bytes / sizeof(float));
        be_event t1 = be_event_record(be);
        double t = be_event_elapsed(be, &t0, &t1);
        tcopy = t < tcopy ? t : tcopy;
    }
    be_dfree(be, x), be_dfree(be, y);
    double copy_bw = be_copy_bytes(bytes) / tcopy;
    /* MPI: an 8 MiB all-reduce and a one-float one, best of several */
    double bw = copy_bw, lat = 1e-6;
    if (n > 1) {
        size_t cnt = (size_t)2 << 20;
        float *buf = calloc(cnt, sizeof(float));
        double tb = 1e30, tl = 1e30;
        for (int k = 0; k < 8; k++) {
            comm_barrier(world);
            double t0 = td_now();
            comm_allreduce(world, buf, cnt, COMM_F32, COMM_SUM);
            double t = td_now() - t0;
            tb = t < tb ? t : tb;
            comm_barrier(world);
            t0 = td_now();
            for (int i = 0; i < 20; i++) comm_allreduce(world, buf, 1, COMM_F32, COMM_SUM);
            t = (td_now() - t0) / 20;
            tl = t < tl ? t : tl;
        }
        free(buf);
        lat = tl / (2.0 * (n - 1));
        double steps = 2.0 * (n - 1) * lat;
        bw = 2.0 * (n - 1) / n * (double)cnt * sizeof(float) / (tb > steps ? tb - steps : tb);
    }
    /* the slowest rank's figures, the largest holdings */
    double mine[6] = {-peak, -emax, half, -copy_bw, -bw, lat}, all[6];
    memcpy(all, mine, sizeof mine);
    comm_allreduce(world, all, 6, COMM_F64, COMM_MAX);
    comm_allreduce(world, &reserved, 1, COMM_F64, COMM_MAX);
    c->peak[0] = -all[0];
    c->gemm_emax = -all[1];
    c->gemm_half = all[2];
    c->hbm_bw = -all[3];
    c->intra_bw = c->inter_bw = -all[4];
    c->intra_lat = c->inter_lat = all[5];
    c->mem_reserved_gib = reserved;
    /* a device's memory: this machine's, shared by its ranks */
    FILE *m = fopen("/proc/meminfo", "r");
    double kb = 0;
    char line[256];
    while (m && fgets(line, sizeof line, m))
        if (strncmp(line, "MemTotal:", 9) == 0) kb = atof(line + 9);
    if (m) fclose(m);
    c->mem_gib = kb > 0 ? kb * 1024.0 / GIB / n : 1;
    be_free(be);
}
