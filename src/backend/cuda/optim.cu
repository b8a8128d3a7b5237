/* The CUDA backend's AdamW over a flat slice (PyTorch semantics, decoupled weight decay, the bias
 * corrections computed on the host in double as the cpu backend's) and the sum of squares behind
 * the gradient norm, which returns its value to the host (it waits for the stream).
 *
 * sumsq sums in double in an order fixed by n alone: SUMSQ_BLOCKS blocks of CU_THREADS threads,
 * thread t of the grid taking elements t, t + SUMSQ_BLOCKS CU_THREADS, ... in order; each block's
 * sum to a partial in stream-ordered scratch (cudaMallocAsync), and one block adds the partials
 * in a fixed order. No atomics: the same bits on every run and every GPU. AdamW reads and writes
 * four elements a thread through 128-bit accesses where the four buffers are 16-byte aligned (the
 * flat buffers' slices are), the same arithmetic per element either way. */
#include <math.h>
#include <stdint.h>

#include "elem_impl.cuh"

/* One element's step; both kernels below run exactly this arithmetic. */
static __device__ __forceinline__ void adamw1(float &p, float g, float &m, float &v, float beta1, float beta2,
                                              float eps, float gscale, float step_size, float inv_sqrt_bc2,
                                              float decay)
{
    float gi = g * gscale;
    m = beta1 * m + (1.0f - beta1) * gi;
    v = beta2 * v + (1.0f - beta2) * gi * gi;
    p = p * decay - step_size * m / (sqrtf(v) * inv_sqrt_bc2 + eps);
}
static __global__ void adamw_k(float *p, const float *g, float *m, float *v, size_t n, float beta1, float beta2,
                               float eps, float gscale, float step_size, float inv_sqrt_bc2, float decay)
{
    CU_FOR(i, n) adamw1(p[i], g[i], m[i], v[i], beta1, beta2, eps, gscale, step_size, inv_sqrt_bc2, decay);
}
/* Four elements a thread through 128-bit loads and stores (the four buffers 16-byte aligned). */
static __global__ void adamw4_k(float4 *p, const float4 *g, float4 *m, float4 *v, size_t n4, float beta1,
                                float beta2, float eps, float gscale, float step_size, float inv_sqrt_bc2,
                                float decay)
{
    CU_FOR(i, n4) {
        float4 pi = p[i], gi = g[i], mi = m[i], vi = v[i];
        adamw1(pi.x, gi.x, mi.x, vi.x, beta1, beta2, eps, gscale, step_size, inv_sqrt_bc2, decay);
        adamw1(pi.y, gi.y, mi.y, vi.y, beta1, beta2, eps, gscale, step_size, inv_sqrt_bc2, decay);
        adamw1(pi.z, gi.z, mi.z, vi.z, beta1, beta2, eps, gscale, step_size, inv_sqrt_bc2, decay);
        adamw1(pi.w, gi.w, mi.w, vi.w, beta1, beta2, eps, gscale, step_size, inv_sqrt_bc2, decay);
        p[i] = pi, m[i] = mi, v[i] = vi;
    }
}
static void e_adamw(const backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                    float beta2, float eps, float wd, float gscale, int64_t step)
{
    TD_CHECK(step >= 1, "AdamW steps count from 1", "step %lld", (long long)step);
    if (n == 0) return;
    double bc1 = 1.0 - pow((double)beta1, (double)step);
    double bc2 = 1.0 - pow((double)beta2, (double)step);
    float step_size = (float)(lr / bc1);
    float inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    float decay = 1.0f - lr * wd;
    size_t n4 = 0;
    if ((((uintptr_t)p | (uintptr_t)g | (uintptr_t)m | (uintptr_t)v) & 15) == 0 && n >= 4) {
        n4 = n / 4;
        adamw4_k<<<cu_blocks(n4), CU_THREADS, 0, cu_stream(be)>>>((float4 *)p, (const float4 *)g, (float4 *)m,
                                                                  (float4 *)v, n4, beta1, beta2, eps, gscale,
                                                                  step_size, inv_sqrt_bc2, decay);
        CU_LAUNCHED("adamw (128-bit)");
    }
    size_t done = 4 * n4; /* the rest (or all, unaligned) one element a thread */
    if (done < n) {
        adamw_k<<<cu_blocks(n - done), CU_THREADS, 0, cu_stream(be)>>>(p + done, g + done, m + done, v + done,
                                                                      n - done, beta1, beta2, eps, gscale,
                                                                      step_size, inv_sqrt_bc2, decay);
        CU_LAUNCHED("adamw");
    }
}

#define SUMSQ_BLOCKS 512

static __global__ void sumsq_part_k(double *part, const float *x, size_t n)
{
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * CU_THREADS + threadIdx.x; i < n; i += (size_t)SUMSQ_BLOCKS * CU_THREADS)
        s += (double)x[i] * x[i];
    s = cu_block_sum_d(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}
/* *total = the sum of part[0 .. SUMSQ_BLOCKS), one block. */
static __global__ void sumsq_total_k(double *total, const double *part)
{
    double s = 0.0;
    for (int k = threadIdx.x; k < SUMSQ_BLOCKS; k += CU_THREADS) s += part[k];
    s = cu_block_sum_d(s);
    if (threadIdx.x == 0) *total = s;
}

/* Each slice's sum by sumsq's two kernels (the same order, the same bits), into one device array
 * read back once: count slices, one wait. The partials' scratch is reused slice after slice (the
 * stream orders them). */
static void e_sumsq_many(const backend *be, double *out, const float *const *x, const size_t *n, int count)
{
    if (count <= 0) return;
    cudaStream_t st = cu_stream(be);
    double *part = NULL;
    CU_CHECK(cudaMallocAsync((void **)&part, (SUMSQ_BLOCKS + (size_t)count) * sizeof(double), st), "sumsq: scratch");
    double *tot = part + SUMSQ_BLOCKS;
    CU_CHECK(cudaMemsetAsync(tot, 0, (size_t)count * sizeof(double), st), "sumsq: the totals");
    for (int i = 0; i < count; i++) {
        if (n[i] == 0) continue; /* its total stays 0 */
        sumsq_part_k<<<SUMSQ_BLOCKS, CU_THREADS, 0, st>>>(part, x[i], n[i]);
        CU_LAUNCHED("sumsq (many)");
        sumsq_total_k<<<1, CU_THREADS, 0, st>>>(tot + i, part);
        CU_LAUNCHED("sumsq (many, total)");
    }
    CU_CHECK(cudaMemcpyAsync(out, tot, (size_t)count * sizeof(double), cudaMemcpyDeviceToHost, st),
             "sumsq: reading the sums");
    CU_CHECK(cudaFreeAsync(part, st), "sumsq: scratch");
    CU_CHECK(cudaStreamSynchronize(st), "sumsq: waiting for the sums");
}

static double e_sumsq(const backend *be, const float *x, size_t n)
{
    double s = 0.0;
    e_sumsq_many(be, &s, &x, &n, 1); /* one slice: the kernels, one wait */
    return s;
}

void cu_fill_optim(struct be_ops *o)
{
    o->adamw = e_adamw;
    o->sumsq = e_sumsq;
    o->sumsq_many = e_sumsq_many;
}
