/* Private to the CUDA backend's elementwise family (elementwise.cu, norm.cu, loss.cu, optim.cu):
 * typed loads and stores, reductions in a fixed order, launch sizes, and each file's share of
 * cuda_fill_elementwise.
 *
 * Dtypes. Activations arrive as typed buffers (fp32, bf16, fp16). The kernels take the dtype as
 * an argument and branch per element (the branch is the same for every thread, so it costs a
 * few instructions, not divergence): one compiled kernel per operation, not one per dtype, which
 * keeps nvcc's time small. Every value is widened to fp32 on load and computed in fp32; a store
 * rounds to the buffer's dtype to nearest even (NaN stays NaN, fp16 overflows to +-Inf), as the
 * backend's convert does. Accumulating entries (+=) read the old value, add in fp32 and round once.
 * The bandwidth-bound entries (add, the activations, bias + GeLU, the dropouts, embedding_fwd, the
 * norms) also have a vector path, 8 elements a thread through cu_ld8/cu_st8 (cu_common.cuh), taken
 * when every buffer is 16-byte aligned and the row length a multiple of 8: each element computed
 * by the same expression as on the scalar path, every row sum in the same order, the same bits.
 *
 * Determinism. Every reduction here sums in an order fixed by the sizes alone (the block sizes
 * are constants, never the device's SM count), with no floating-point atomics: the same inputs
 * give the same bits on every run and every GPU. */
#ifndef TRIDENT_CUDA_ELEM_IMPL_CUH
#define TRIDENT_CUDA_ELEM_IMPL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>

#include "cu_common.cuh"
#include "cuda_impl.h"

/* Compiled without --use_fast_math (CUDA defines no macro to check it by): the kernels hold the
 * cpu backend's results to 1e-5, and RoPE its float32 angle roundings, with IEEE division, square
 * root and expf. */

extern "C" {
#include "trident/check.h"
}

/* dt, after dying naming the entry unless it is one of the contract's dtypes. */
static inline int cu_dtype(int dt, const char *entry)
{
    TD_CHECK(dt == BE_F32 || dt == BE_BF16 || dt == BE_F16, "pass a be_dtype (BE_F32, BE_BF16, BE_F16)",
             "cuda %s: a buffer of unknown dtype %d", entry, dt);
    return dt;
}

#define CU_THREADS 256 /* threads of a block (every kernel of the family) */

/* typed loads and stores (cu_ld, cu_st, cu_acc): cu_common.cuh */

/* ---- reductions in a fixed order ---- */
/* The sum over a warp's 32 lanes, a butterfly: every lane gets the same bits. */
static __device__ __forceinline__ float cu_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ double cu_warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float cu_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

/* The maximum and the sum over a block of CU_THREADS threads, every thread getting the same
 * bits (warps' results combined in warp order); every thread of the block must call them. */
static __device__ __forceinline__ float cu_block_max(float v)
{
    __shared__ float part[CU_THREADS / 32];
    v = cu_warp_max(v);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = part[0];
    for (int w = 1; w < CU_THREADS / 32; w++) v = part[w] > v ? part[w] : v;
    __syncthreads(); /* part is reused by the next call */
    return v;
}
static __device__ __forceinline__ double cu_block_sum_d(double v)
{
    __shared__ double part[CU_THREADS / 32];
    v = cu_warp_sum_d(v);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = part[0];
    for (int w = 1; w < CU_THREADS / 32; w++) v += part[w];
    __syncthreads();
    return v;
}

/* ---- launch sizes ---- */
/* Blocks for n elements at CU_THREADS a block, at most 65536 (the kernels loop over the rest). */
static inline unsigned cu_blocks(size_t n)
{
    size_t b = (n + CU_THREADS - 1) / CU_THREADS;
    return (unsigned)(b < 65536 ? (b ? b : 1) : 65536);
}
/* The grid-stride loop over [0, n). */
#define CU_FOR(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* ---- column sums (norm.cu), the deterministic reduction the backward entries share ----
 * acc (C) += the sum over rows n < N, in a fixed order, of a per-element term:
 *   CU_COL_PLAIN:   x[n, c]                                  (bias_bwd)
 *   CU_COL_LN:      x[n, c] (y[n, c] - s0[n]) s1[n], and acc2 (C) += x[n, c]  (layernorm: dw, db)
 *   CU_COL_RMS:     x[n, c] y[n, c] s1[n]                    (rmsnorm: dw)
 *   CU_COL_GELU:    gelu'(y[n, c] + b[c]) x[n, c]            (bias_gelu: db)
 * x, y typed (xt, yt); s0, s1 (N) and b (C) fp32; acc, acc2 may be NULL (skipped). out (not NULL):
 * x also written there (N, C), rounded into dtype ot as convert rounds (bias_bwd_to). */
enum { CU_COL_PLAIN, CU_COL_LN, CU_COL_RMS, CU_COL_GELU };
void cu_colsum(const backend *be, int mode, float *acc, float *acc2, const void *x, int xt, const void *y, int yt,
               const float *s0, const float *s1, const float *b, int N, int C, void *out = NULL, int ot = 0);

/* The GeLU (tanh) derivative, written as the cpu backend's (src/backend/cpu/act.c). */
static __device__ __forceinline__ float cu_gelu_grad(float x)
{
    const float k = 0.7978845608028654f, a = 0.044715f;
    float u = k * (x + a * x * x * x);
    float th = 1.0f - 2.0f / (expf(2.0f * u) + 1.0f);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * k * (1.0f + 3.0f * a * x * x);
}

/* Each file's entries in the vtable (cuda_fill_elementwise, elementwise.cu, calls them). */
void cu_fill_norm(struct be_ops *ops); /* norm.cu: layernorm, rmsnorm, bias_bwd */
void cu_fill_loss(struct be_ops *ops); /* loss.cu: ce_max, ce_sumexp, ce_target, ce_loss, ce_bwd */
void cu_fill_optim(struct be_ops *ops); /* optim.cu: adamw, sumsq */

#endif
