/* The CPU backend: host memory, the vtable, and the sgemm peak measurement. */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>

#include "trident/check.h"
#include "trident/timer.h"
#include "backend/cpu/cpu.h"

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

/* Best of up to 16 square sgemms (N = 1536: about 7 GFLOP each) after one warm-up, stopping after
 * half a second: on a machine shared with other work the best run is the one that had the cores. */
double cpu_peak_gflops(const backend *be)
{
    cpu_blas_threads(be);
    enum { N = 1536, REPS = 16 };
    float *a = td_xmalloc((size_t)N * N * sizeof(float)), *b = td_xmalloc((size_t)N * N * sizeof(float));
    float *c = td_xmalloc((size_t)N * N * sizeof(float));
    for (size_t i = 0; i < (size_t)N * N; i++) {
        a[i] = (float)(i % 7) * 0.01f;
        b[i] = (float)(i % 5) * 0.01f;
    }
    double best = 1e30, start = td_now();
    for (int r = 0; r <= REPS && (r < 4 || td_now() - start < 0.5); r++) {
        double t0 = td_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
        double dt = td_now() - t0;
        if (r > 0 && dt < best) best = dt;
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
#pragma omp parallel num_threads(be->nthreads)
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
    return 2.0 * (double)n / best * 1e-9;
}

static const struct be_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_bytes = cpu_copy_bytes,
    .set_bytes = cpu_set_bytes,
    .sync = cpu_sync,
    .matmul_fwd = cpu_matmul_fwd,
    .matmul_bwd = cpu_matmul_bwd,
    .embedding_fwd = cpu_embedding_fwd,
    .embedding_bwd = cpu_embedding_bwd,
    .pos_embedding_fwd = cpu_pos_embedding_fwd,
    .pos_embedding_bwd = cpu_pos_embedding_bwd,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .rmsnorm_fwd = cpu_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .rope_fwd = cpu_rope_fwd,
    .rope_bwd = cpu_rope_bwd,
    .attention_fwd = cpu_attention_fwd,
    .attention_bwd = cpu_attention_bwd,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .bias_gelu_fwd = cpu_bias_gelu_fwd,
    .bias_gelu_bwd = cpu_bias_gelu_bwd,
    .swiglu_fwd = cpu_swiglu_fwd,
    .swiglu_bwd = cpu_swiglu_bwd,
    .add = cpu_add,
    .scale = cpu_scale,
    .bias_add = cpu_bias_add,
    .bias_bwd = cpu_bias_bwd,
    .dropout_fwd = cpu_dropout_fwd,
    .dropout_bwd = cpu_dropout_bwd,
    .bias_dropout_add_fwd = cpu_bias_dropout_add_fwd,
    .ce_max = cpu_ce_max,
    .ce_sumexp = cpu_ce_sumexp,
    .ce_target = cpu_ce_target,
    .ce_loss = cpu_ce_loss,
    .ce_bwd = cpu_ce_bwd,
    .adamw = cpu_adamw,
    .sumsq = cpu_sumsq,
    .peak_gflops = cpu_peak_gflops,
    .copy_gbps = cpu_copy_gbps,
};

/* OpenBLAS picks its kernels when it loads, by CPU model or from OPENBLAS_CORETYPE; a release
 * older than the CPU falls back to its AVX2 (Haswell) kernels even where AVX-512 is there (0.3.21
 * on AMD Zen 4 and 5), at half the sgemm speed. Only the variable, read at load time, changes
 * that: say so, once. */
static void cpu_check_blas_core(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    static int checked;
    const char *core = openblas_get_corename(), *env = getenv("OPENBLAS_CORETYPE");
    if (checked++ || !core || td_log_rank() > 0) return;
    __builtin_cpu_init();
    int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    if (avx512 && (strcasecmp(core, "Haswell") == 0 || strcasecmp(core, "Zen") == 0))
        td_warn("OpenBLAS runs its %s (AVX2) kernels on this AVX-512 CPU%s%s%s: export OPENBLAS_CORETYPE=SkylakeX "
                "(with mpirun: -x OPENBLAS_CORETYPE) for about twice the GEMM speed",
                core, env ? " (OPENBLAS_CORETYPE=" : "", env ? env : "", env ? ")" : "");
#endif
}

backend *be_cpu(int nthreads)
{
    TD_CHECK(nthreads >= 0, "pass 0 for OpenMP's default", "nthreads %d", nthreads);
    backend *be = td_xcalloc(1, sizeof *be);
    be->ops = &cpu_ops;
    be->nthreads = nthreads > 0 ? nthreads : omp_get_max_threads();
    be->device = -1;
    /* OpenBLAS (OpenMP build) sizes its team from the OpenMP setting of the calling thread. */
    omp_set_num_threads(be->nthreads);
    openblas_set_num_threads(be->nthreads);
    cpu_check_blas_core();
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
