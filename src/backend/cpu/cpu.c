/* The CPU backend: host memory, the vtable, and the sgemm peak measurement. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "trident/check.h"
#include "trident/comm.h"
#include "trident/timer.h"
#include "backend.h"
#include "cpu.h"

/* Buffers of at least CPU_HUGE bytes (parameters, gradients, Adam moments, activations) are
 * 2 MiB aligned and asked for transparent huge pages: streaming kernels and GEMM packing then walk
 * one TLB entry per 2 MiB instead of per 4 KiB. */
#define CPU_HUGE ((size_t)8 << 20)
#define CPU_HUGE_ALIGN ((size_t)2 << 20)

static void *cpu_alloc(const backend *be, size_t bytes)
{
    (void)be;
    int huge = bytes >= CPU_HUGE;
    size_t align = huge ? CPU_HUGE_ALIGN : 64, n = (bytes + align - 1) / align * align;
    void *p = aligned_alloc(align, n ? n : align);
    TD_CHECK(p != NULL, "lower --micro-batch-size or the model size", "out of memory allocating %zu bytes", bytes);
#ifdef MADV_HUGEPAGE
    if (huge) (void)madvise(p, n, MADV_HUGEPAGE); /* a hint: without THP nothing changes */
#endif
    return p;
}

static void cpu_free(const backend *be, void *p)
{
    (void)be;
    free(p);
}

static void cpu_copy_bytes(const backend *be, void *dst, const void *src, size_t bytes, be_copy_kind kind)
{
    (void)be;
    (void)kind;
    if (bytes && dst != src) memmove(dst, src, bytes);
}

static void cpu_set_bytes(const backend *be, void *p, int byte, size_t bytes)
{
    (void)be;
    if (bytes) memset(p, byte, bytes);
}

static void cpu_sync(const backend *be) { (void)be; }

/* Every call has run when it returns: an event is the wall clock at its record. */
static void cpu_event_record(const backend *be, be_event *ev)
{
    (void)be;
    ev->t = td_now();
    ev->h = NULL;
}

static double cpu_event_elapsed(const backend *be, be_event *start, be_event *end)
{
    (void)be;
    return end->t - start->t;
}

/* Best of 3 to 16 square GEMMs (N = 1024: about 2 GFLOP each, within the noise of N = 1536's rate
 * on OpenBLAS) in the backend's gemm dtype (sgemm, or the low-precision kernel on inputs in bf16 or
 * fp16) after one warm-up, stopping after a quarter of a second: on a machine shared with other work
 * the best run is the one that had the cores. A training run measures at its start and again for the
 * breakdown at its end, so this is paid twice a run (each rank): 0.25-0.3 s on one core, where N =
 * 1536 and half a second took 1.1 s a run. */
double cpu_peak_gflops(const backend *be)
{
    cpu_blas_threads(be);
    enum { N = 1024, REPS = 16 };
    be_dtype dt = be->gemm_dtype;
    float *a = td_xmalloc((size_t)N * N * sizeof(float)), *b = td_xmalloc((size_t)N * N * sizeof(float));
    float *c = td_xmalloc((size_t)N * N * sizeof(float));
    for (size_t i = 0; i < (size_t)N * N; i++) {
        a[i] = (float)(i % 7) * 0.01f;
        b[i] = (float)(i % 5) * 0.01f;
    }
    void *al = a, *bl = b;
    if (dt != BE_F32) {
        al = td_xmalloc((size_t)N * N * 2);
        bl = td_xmalloc((size_t)N * N * 2);
        be->ops->convert(be, al, dt, a, BE_F32, (size_t)N * N);
        be->ops->convert(be, bl, dt, b, BE_F32, (size_t)N * N);
    }
    double best = 1e30, start = td_now();
    for (int r = 0; r <= REPS && (r < 4 || td_now() - start < 0.25); r++) {
        double t0 = td_now();
        if (dt == BE_F32) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
        else {
            be_out co = {c, BE_F32};
            be_in ai = {al, dt};
            be->ops->matmul_fwd_lp(be, co, ai, bl, NULL, dt, N, N, N);
        }
        double dt_s = td_now() - t0;
        if (r > 0 && dt_s < best) best = dt_s;
    }
    if (dt != BE_F32) {
        free(al);
        free(bl);
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * N * N * (double)N / best * 1e-9;
}

/* Best of a few parallel copies of 128 MB (each thread its own contiguous part, memcpy) between
 * buffers allocated as the model's are, after a first pass that faults the pages in. Bytes
 * counted as STREAM does: read + written. */
double cpu_copy_gbps(const backend *be)
{
    enum { REPS = 5 };
    size_t n = (size_t)128 << 20;
    char *a = cpu_alloc(be, n), *b = cpu_alloc(be, n);
    double best = 1e30;
    for (int r = 0; r <= REPS; r++) {
        double t0 = td_now();
#pragma omp parallel num_threads(cpu_threads(be))
        {
            int t = omp_get_thread_num(), nt = omp_get_num_threads();
            size_t lo = n / (size_t)nt * (size_t)t, hi = t == nt - 1 ? n : n / (size_t)nt * (size_t)(t + 1);
            if (r == 0) memset(a + lo, 1, hi - lo); /* first touch, by the thread that copies it */
            memcpy(b + lo, a + lo, hi - lo);
        }
        double dt = td_now() - t0;
        if (r > 0 && dt < best) best = dt;
    }
    cpu_free(be, a);
    cpu_free(be, b);
    return be_copy_bytes(n) / best * 1e-9;
}

/* AdamW's streams without its arithmetic: p, g, m, v read and p, m, v written back in place, over
 * 16 Mi elements (256 MB, beyond the caches), best of five after a first pass that faults the
 * pages in, each thread its static part as the AdamW kernel's loop. Bytes as be_adamw_bytes. */
double cpu_adamw_stream_gbps(const backend *be)
{
    enum { REPS = 5 };
    size_t n = (size_t)16 << 20;
    float *p = cpu_alloc(be, n * sizeof(float)), *g = cpu_alloc(be, n * sizeof(float));
    float *m = cpu_alloc(be, n * sizeof(float)), *v = cpu_alloc(be, n * sizeof(float));
    double best = 1e30;
    for (int r = 0; r <= REPS; r++) {
        double t0 = td_now();
        if (r == 0) {
#pragma omp parallel for simd schedule(static) num_threads(cpu_threads(be))
            for (size_t i = 0; i < n; i++) {
                p[i] = 1.0f;
                g[i] = 1e-3f;
                m[i] = v[i] = 0.0f;
            }
            continue;
        }
#pragma omp parallel for simd schedule(static) num_threads(cpu_threads(be))
        for (size_t i = 0; i < n; i++) {
            float gi = g[i];
            m[i] = m[i] * 0.5f + gi;
            v[i] = v[i] * 0.5f + gi;
            p[i] = p[i] - gi;
        }
        double dt = td_now() - t0;
        if (dt < best) best = dt;
    }
    cpu_free(be, p);
    cpu_free(be, g);
    cpu_free(be, m);
    cpu_free(be, v);
    return be_adamw_bytes(n) / best * 1e-9;
}


void cpu_blas_threads(const backend *be)
{
    if (openblas_get_num_threads() != cpu_threads(be)) openblas_set_num_threads(cpu_threads(be));
}

/* ---- choosing the kernels of this CPU ---- */

/* The ISA builds of the kernel files, best last (see cpu.h). */
typedef struct {
    const char *name, *what;
    void (*fill)(struct be_ops *);
} cpu_isa;
void cpu_kernels_fill_avx2(struct be_ops *ops);
void cpu_kernels_fill_avx512(struct be_ops *ops);
static const cpu_isa CPU_ISAS[] = {
    {"baseline", "the target's baseline ISA", cpu_kernels_fill},
#ifdef TRIDENT_CPU_ISA_BUILDS
    {"avx2", "AVX2 + FMA", cpu_kernels_fill_avx2},
    {"avx512", "AVX-512", cpu_kernels_fill_avx512},
#endif
};
enum { CPU_NISAS = (int)(sizeof CPU_ISAS / sizeof CPU_ISAS[0]) };

/* x86-64-v3 (AVX2, FMA, BMI2) and x86-64-v4 (AVX-512 F, BW, CD, DQ, VL): the -march of the
 * builds. __builtin_cpu_supports also checks that the OS saves the vector registers. */
static int cpu_x86_v3(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
#else
    return 0;
#endif
}

int cpu_has_avx512(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return cpu_x86_v3() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512cd");
#else
    return 0;
#endif
}

int cpu_has_avx512bf16(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

/* 1 if this CPU runs build i. */
static int cpu_isa_supported(int i)
{
    if (strcmp(CPU_ISAS[i].name, "avx2") == 0) return cpu_x86_v3();
    if (strcmp(CPU_ISAS[i].name, "avx512") == 0) return cpu_has_avx512();
    return 1;
}

/* The best build this CPU runs, or the one TRIDENT_CPU_ISA names (baseline, avx2, avx512: for
 * benchmarks and tests). */
static int cpu_isa_choose(void)
{
    const char *env = getenv("TRIDENT_CPU_ISA");
    if (env && *env) {
        for (int i = 0; i < CPU_NISAS; i++)
            if (strcmp(env, CPU_ISAS[i].name) == 0) {
                TD_CHECK(cpu_isa_supported(i), "unset TRIDENT_CPU_ISA, or name a build this CPU runs",
                         "TRIDENT_CPU_ISA=%s: this CPU lacks %s", env, CPU_ISAS[i].what);
                return i;
            }
        td_fatal(TD_EXIT_USAGE, "TRIDENT_CPU_ISA=%s: not a kernel build of this binary (baseline%s)", env,
                 CPU_NISAS > 1 ? ", avx2, avx512" : "");
    }
    int best = 0;
    for (int i = 1; i < CPU_NISAS; i++)
        if (cpu_isa_supported(i)) best = i;
    return best;
}

int be_cpu_isa_runs(const char *name, const char **best, char *why, size_t len)
{
    int b = 0;
    for (int i = 1; i < CPU_NISAS; i++)
        if (cpu_isa_supported(i)) b = i;
    if (best) *best = CPU_ISAS[b].name;
    for (int i = 0; i < CPU_NISAS; i++)
        if (strcmp(name, CPU_ISAS[i].name) == 0) {
            if (cpu_isa_supported(i)) return 1;
            snprintf(why, len, "this CPU lacks %s", CPU_ISAS[i].what);
            return 0;
        }
    snprintf(why, len, "this binary has no %s build of the kernels (builds: baseline%s)", name,
             CPU_NISAS > 1 ? ", avx2, avx512" : "");
    return 0;
}

/* OpenBLAS cores with AVX-512 kernels (0.3.21's names). */
static int cpu_blas_core_avx512(const char *core)
{
    return core && (strcasecmp(core, "SkylakeX") == 0 || strcasecmp(core, "Cooperlake") == 0 ||
                    strcasecmp(core, "SapphireRapids") == 0);
}

const char *cpu_blas_core_for(const char *loaded, const char *env, int avx512, int avx512bf16)
{
    if ((env && *env) || !avx512 || !loaded || cpu_blas_core_avx512(loaded)) return NULL;
    return avx512bf16 ? "Cooperlake" : "SkylakeX";
}

void be_prepare_process(char **argv)
{
#if defined(__x86_64__) && defined(__GNUC__)
    /* OpenBLAS picks its kernels when it loads, by CPU model or from OPENBLAS_CORETYPE; a release
     * older than the CPU falls back to its AVX2 kernels where AVX-512 is there (0.3.21 on AMD
     * Zen 4 and 5), at half the sgemm speed. The variable is read only at load time: set it and
     * start this program again (same pid, so mpirun and srun keep tracking the rank). */
    const char *core = cpu_blas_core_for(openblas_get_corename(), getenv("OPENBLAS_CORETYPE"),
                                         cpu_has_avx512(), cpu_has_avx512bf16());
    if (!core || getenv("TRIDENT_BLAS_REEXEC")) return;
    setenv("OPENBLAS_CORETYPE", core, 1);
    setenv("TRIDENT_BLAS_REEXEC", openblas_get_corename(), 1); /* once, and what it replaced */
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"); /* no /proc: carry on with the kernels loaded (the log says which) */
#else
    (void)argv;
#endif
}

static void cpu_describe(const backend *be, char *out, size_t len)
{
    const char *was = getenv("TRIDENT_BLAS_REEXEC");
    const cpu_isa *isa = &CPU_ISAS[((const cpu_state *)be->impl)->isa];
    int n = cpu_threads(be);
    snprintf(out, len, "trident's %s kernels (%s), OpenBLAS %s sgemm, %d thread%s%s%s%s%s", isa->name, isa->what,
             openblas_get_corename(), n, n > 1 ? "s" : "", was ? " (chosen at start-up over " : "", was ? was : "", was ? ")" : "",
             cpu_has_avx512() && !cpu_blas_core_avx512(openblas_get_corename())
                 ? ": AVX2 kernels on an AVX-512 CPU, unset OPENBLAS_CORETYPE for twice the GEMM speed"
                 : "");
}

static void cpu_destroy(backend *be)
{
    free(be->impl);
    be->impl = NULL;
}

static struct be_ops g_cpu_ops[CPU_NISAS]; /* one vtable per ISA build, filled on first use */

int be_cpu_threads(const backend *be)
{
    return be && be->ops >= g_cpu_ops && be->ops < g_cpu_ops + CPU_NISAS ? cpu_threads(be) : 0;
}

backend *be_cpu(int nthreads)
{
    TD_CHECK(nthreads >= 0, "pass 0 for OpenMP's default", "nthreads %d", nthreads);
    static int filled[CPU_NISAS];
    backend *be = td_xcalloc(1, sizeof *be);
    cpu_state *st = td_xcalloc(1, sizeof *st);
    be->impl = st;
    st->isa = cpu_isa_choose();
    if (!filled[st->isa]) {
        struct be_ops *o = &g_cpu_ops[st->isa];
        o->name = "cpu";
        o->alloc = cpu_alloc;
        o->free = cpu_free;
        o->copy_bytes = cpu_copy_bytes;
        o->set_bytes = cpu_set_bytes;
        o->sync = cpu_sync;
        o->event_record = cpu_event_record;
        o->event_elapsed = cpu_event_elapsed;
        o->destroy = cpu_destroy;
        o->peak_gflops = cpu_peak_gflops;
        o->copy_gbps = cpu_copy_gbps;
        o->adamw_stream_gbps = cpu_adamw_stream_gbps;
        o->describe = cpu_describe;
        CPU_ISAS[st->isa].fill(o);
        filled[st->isa] = 1;
    }
    be->ops = &g_cpu_ops[st->isa];
    /* unset OMP_NUM_THREADS: this rank's share of its host's cores, not every core for every rank */
    int share = comm_threads_per_rank();
    st->nthreads = nthreads > 0 ? nthreads : share > 0 ? share : omp_get_max_threads();
    be->device = -1;
    be->queue = NULL; /* synchronous: nothing queues */
    /* OpenBLAS (OpenMP build) sizes its team from the OpenMP setting of the calling thread. */
    omp_set_num_threads(st->nthreads);
    openblas_set_num_threads(st->nthreads);
    return be;
}

#define CPU_SCRATCH_SLOTS 4
static _Thread_local struct {
    void *p;
    size_t bytes;
} g_scratch[CPU_SCRATCH_SLOTS];

void *cpu_scratch(int slot, size_t bytes)
{
    TD_ASSERT(slot >= 0 && slot < CPU_SCRATCH_SLOTS);
    if (g_scratch[slot].bytes < bytes) {
        free(g_scratch[slot].p);
        size_t n = (bytes + 63) & ~(size_t)63;
        if (posix_memalign(&g_scratch[slot].p, 64, n) != 0)
            td_die(__FILE__, __LINE__, "posix_memalign", "reduce the micro-batch size or sequence length",
                   "cannot allocate %zu bytes of kernel scratch", n);
        g_scratch[slot].bytes = n;
    }
    return g_scratch[slot].p;
}
