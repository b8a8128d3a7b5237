/* Low-precision linear layers and dtype conversions. bf16 GEMMs go to oneDNN's
 * dnnl_gemm_bf16bf16f32 (AVX512-BF16 dot products, fp32 accumulation) in the AVX-512 build on a
 * CPU that has them; everywhere else, and for fp16 (no fp16 arithmetic on these CPUs), the
 * inputs are widened to fp32 and multiplied by sgemm: the same products of the same rounded
 * inputs, at fp32 speed. */
#include <cblas.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "trident/check.h"
#include "trident/dynlib.h"
#include "trident/half.h"
#include "cpu.h"

/* oneDNN's bf16 GEMM: exported by libdnnl (extern "C", row-major like dnnl_sgemm) but not
 * declared in its 2.x headers. A and B are bf16 stored as uint16_t. libdnnl is opened at the first
 * bf16 GEMM (trident/dynlib.h), not linked: it cost every start of every process 1.2 ms.
 * TD_DNNL_SONAME comes from the build (CMakeLists.txt). */
typedef dnnl_status_t (*gemm_bf16_fn)(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K, float alpha,
                                      const uint16_t *A, dnnl_dim_t lda, const uint16_t *B, dnnl_dim_t ldb,
                                      float beta, float *C, dnnl_dim_t ldc);
static gemm_bf16_fn g_gemm_bf16;

static gemm_bf16_fn gemm_bf16(void)
{
    if (!g_gemm_bf16) {
        const td_dynsym syms[] = {{"dnnl_gemm_bf16bf16f32", (void **)&g_gemm_bf16}};
        td_dynlib_open(TD_DNNL_SONAME, "the bf16 GEMMs of --bf16 on this CPU (AVX512-BF16)",
                       "install oneDNN (scripts/deps.sh does: apt-get install libdnnl-dev)", syms, 1);
    }
    return g_gemm_bf16;
}

void cpu_convert(const backend *be, void *dst, be_dtype dt, const void *src, be_dtype st, size_t n)
{
    if (dt == st) {
        if (dst != src) memmove(dst, src, n * be_dtype_size(dt));
        return;
    }
    const float *f = src;
    float *fo = dst;
    const uint16_t *h = src;
    uint16_t *ho = dst;
#pragma omp parallel num_threads(cpu_threads(be)) if (n > CPU_PAR_MIN)
    {
        size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        size_t lo = n * t / nt, hi = n * (t + 1) / nt;
        if (st == BE_F32 && dt == BE_BF16) {
#pragma omp simd
            for (size_t i = lo; i < hi; i++) ho[i] = td_f32_to_bf16(f[i]);
        } else if (st == BE_F32 && dt == BE_F16) {
            for (size_t i = lo; i < hi; i++) ho[i] = td_f32_to_f16(f[i]);
        } else if (st == BE_BF16 && dt == BE_F32) {
#pragma omp simd
            for (size_t i = lo; i < hi; i++) fo[i] = td_bf16_to_f32(h[i]);
        } else if (st == BE_F16 && dt == BE_F32) {
            for (size_t i = lo; i < hi; i++) fo[i] = td_f16_to_f32(h[i]);
        } else { /* bf16 <-> fp16, through fp32 */
            for (size_t i = lo; i < hi; i++)
                ho[i] = st == BE_BF16 ? td_f32_to_f16(td_bf16_to_f32(h[i])) : td_f32_to_bf16(td_f16_to_f32(h[i]));
        }
    }
}

int cpu_lp_native(const backend *be, be_dtype dt)
{
    (void)be;
#ifdef __AVX512BF16__
    return dt == BE_BF16 && cpu_has_avx512bf16();
#else
    (void)dt;
    return 0;
#endif
}

/* x (n, dtype dt) widened into per-thread scratch slot `slot` (of the calling thread). */
static const float *widen(const backend *be, int slot, const void *x, be_dtype dt, size_t n)
{
    float *f = cpu_scratch(slot, n * sizeof(float));
    cpu_convert(be, f, BE_F32, x, dt, n);
    return f;
}

static void dnnl_ok(dnnl_status_t st, const char *what)
{
    TD_CHECK(st == dnnl_success, "run without --bf16 (fp32), or report the CPU and oneDNN version",
             "oneDNN bf16 GEMM (%s) failed with status %d", what, (int)st);
}

void cpu_matmul_fwd_lp(const backend *be, float *out, const void *inp, const void *w, const float *b, be_dtype dt,
                       int BT, int C, int OC)
{
    if (BT <= 0 || OC <= 0) return;
    if (!cpu_lp_native(be, dt)) {
        const float *wf = widen(be, 3, w, dt, (size_t)OC * C);
        cpu_matmul_fwd(be, out, widen(be, 2, inp, dt, (size_t)BT * C), wf, b, BT, C, OC);
        return;
    }
    float beta = 0.0f;
    if (b) {
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)BT * OC > CPU_PAR_MIN)
        for (int i = 0; i < BT; i++) memcpy(out + (size_t)i * OC, b, (size_t)OC * sizeof(float));
        beta = 1.0f;
    }
    dnnl_ok(gemm_bf16()('N', 'T', BT, OC, C, 1.0f, inp, C, w, C, beta, out, OC), "forward");
}

void cpu_matmul_bwd_lp(const backend *be, float *dinp, float *dw, const void *dout, const void *inp, const void *w,
                       be_dtype dt, int BT, int C, int OC)
{
    if (BT <= 0 || OC <= 0 || (!dinp && !dw)) return;
    if (!cpu_lp_native(be, dt)) {
        const float *df = widen(be, 2, dout, dt, (size_t)BT * OC);
        const float *wf = dinp ? widen(be, 3, w, dt, (size_t)OC * C) : NULL;
        const float *xf = dw ? widen(be, 1, inp, dt, (size_t)BT * C) : NULL;
        cpu_matmul_bwd(be, dinp, dw, NULL, df, xf, wf, BT, C, OC);
        return;
    }
    /* dinp (BT, C) += dout (BT, OC) . W (OC, C); dW (OC, C) += dout^T (OC, BT) . inp (BT, C) */
    if (dinp) dnnl_ok(gemm_bf16()('N', 'N', BT, C, OC, 1.0f, dout, OC, w, C, 1.0f, dinp, C), "input grad");
    if (dw) dnnl_ok(gemm_bf16()('T', 'N', OC, C, BT, 1.0f, dout, OC, inp, C, 1.0f, dw, C), "weight grad");
}
