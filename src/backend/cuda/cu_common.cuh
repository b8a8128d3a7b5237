/* Private to src/backend/cuda's kernel files: device helpers they all share — typed element access
 * (fp32, bf16, fp16 buffers read as fp32, written rounded to nearest even) and a dropout's mask
 * words through cu_drop.h (the one Philox-4x32-10 source, which a host test holds to the CPU
 * backend's masks bit for bit). Header-only, no templates: every helper is a __device__ inline. */
#ifndef TRIDENT_CU_COMMON_CUH
#define TRIDENT_CU_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cu_drop.h"
#include "cuda_impl.h"

/* Element i of a buffer of dtype dt (be_dtype), as fp32 (widening is exact). */
static __device__ __forceinline__ float cu_ld(const void *p, int dt, size_t i)
{
    if (dt == BE_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == BE_F16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

/* Element i = x, rounded to nearest even into dt (NaN stays NaN; beyond fp16's range +-Inf). */
static __device__ __forceinline__ void cu_st(void *p, int dt, size_t i, float x)
{
    if (dt == BE_BF16) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x);
    else if (dt == BE_F16) ((__half *)p)[i] = __float2half_rn(x);
    else ((float *)p)[i] = x;
}

/* The conversions of include/core/trident/half.h: bf16 by the same integer rounding (nearest
 * even, NaN a quiet NaN with its top bits), fp16 by the device's round-to-nearest-even (overflow
 * to +-Inf, NaN a NaN). */
static __device__ __forceinline__ uint16_t d_f32_to_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static __device__ __forceinline__ float d_bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
static __device__ __forceinline__ uint16_t d_f32_to_f16(float f) { return __half_as_ushort(__float2half_rn(f)); }
static __device__ __forceinline__ float d_f16_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
/* Element i = x rounded as convert rounds it (cu_st's rounding, but for a NaN's payload). */
static __device__ __forceinline__ void cu_st_convert(void *p, int dt, size_t i, float x)
{
    if (dt == BE_BF16) ((uint16_t *)p)[i] = d_f32_to_bf16(x);
    else if (dt == BE_F16) ((uint16_t *)p)[i] = d_f32_to_f16(x);
    else ((float *)p)[i] = x;
}

/* A 16-bit value (bf when bf16, else fp16) as fp32, and fp32 rounded to nearest even into one. */
static __device__ __forceinline__ float cu_h2f(uint16_t u, bool bf)
{
    return bf ? __bfloat162float(__ushort_as_bfloat16(u)) : __half2float(__ushort_as_half(u));
}
static __device__ __forceinline__ uint16_t cu_f2h(float x, bool bf)
{
    return bf ? __bfloat16_as_ushort(__float2bfloat16_rn(x)) : __half_as_ushort(__float2half_rn(x));
}

/* ---- 16-byte accesses: the bandwidth-bound kernels' vector paths ----
 * CU_VEC consecutive elements i .. i + CU_VEC - 1 of a buffer whose base is 16-byte aligned, i a
 * multiple of CU_VEC: one 16-byte access for bf16 and fp16, two for fp32 (dt switched at run time,
 * the same branch for every thread). The values are cu_ld's and the stores cu_st's roundings, so a
 * kernel computing each element with the same expression gives the same bits on either path.
 * The host picks the path: cu_vec_ok(p) for every buffer the kernel touches, and the sizes a
 * multiple of CU_VEC. The emulator (TD_CUDA_EMU) checks the alignment a device would fault on, and
 * counts the accesses (cuemu_vec_accesses), so a test can see which path an entry took. */
#define CU_VEC 8
static inline bool cu_vec_ok(const void *p) { return ((uintptr_t)p & 15u) == 0; }
#ifdef TD_CUDA_EMU /* tests/gpu/cuemu.h: a misaligned access aborts naming it; the accesses are counted */
#define CU_VEC_CHECK(p, i) cuemu_vec_access(p, (size_t)(i) % CU_VEC == 0)
#else
#define CU_VEC_CHECK(p, i) ((void)0)
#endif
static __device__ __forceinline__ void cu_ld8(const void *p, int dt, size_t i, float v[CU_VEC])
{
    CU_VEC_CHECK(p, i);
    if (dt == BE_F32) {
        const float4 *q = (const float4 *)((const float *)p + i);
        float4 a = q[0], b = q[1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        return;
    }
    uint4 u = *(const uint4 *)((const uint16_t *)p + i);
    bool bf = dt == BE_BF16;
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        v[2 * k] = cu_h2f((uint16_t)(w[k] & 0xffffu), bf);
        v[2 * k + 1] = cu_h2f((uint16_t)(w[k] >> 16), bf);
    }
}
static __device__ __forceinline__ void cu_st8(void *p, int dt, size_t i, const float v[CU_VEC])
{
    CU_VEC_CHECK(p, i);
    if (dt == BE_F32) {
        float4 *q = (float4 *)((float *)p + i);
        q[0] = make_float4(v[0], v[1], v[2], v[3]);
        q[1] = make_float4(v[4], v[5], v[6], v[7]);
        return;
    }
    bool bf = dt == BE_BF16;
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; k++) w[k] = (uint32_t)cu_f2h(v[2 * k], bf) | (uint32_t)cu_f2h(v[2 * k + 1], bf) << 16;
    *(uint4 *)((uint16_t *)p + i) = make_uint4(w[0], w[1], w[2], w[3]);
}

/* Element i += x (in fp32, then rounded into dt). */
static __device__ __forceinline__ void cu_acc(void *p, int dt, size_t i, float x)
{
    cu_st(p, dt, i, cu_ld(p, dt, i) + x);
}

/* The host side: a be_drop (or NULL) as kernel arguments. */
static inline cu_drop cu_drop_of(const be_drop *d)
{
    cu_drop c;
    c.on = d != NULL && d->p > 0.0f;
    c.thr = c.on ? be_drop_threshold(d->p) : 0;
    c.keep = c.on ? 1.0f / (1.0f - d->p) : 1.0f;
    c.k0 = c.on ? (uint32_t)d->seed : 0;
    c.k1 = c.on ? (uint32_t)(d->seed >> 32) : 0;
    c.site = c.on ? (uint32_t)d->site : 0;
    c.pos0 = c.on ? d->pos0 : 0;
    c.unit0 = c.on ? d->unit0 : 0;
    c.sample = c.on ? d->sample : NULL;
    return c;
}

/* The Philox block holding unit's mask word at (kind, sample, pos): cu_drop.h's cu_drop_block. */
static __device__ __forceinline__ uint4 cu_drop_block(const cu_drop &d, int kind, int64_t sample, int64_t pos,
                                                      int64_t unit)
{
    uint32_t r[4];
    cu_drop_block(r, (uint64_t)d.k0 | (uint64_t)d.k1 << 32, kind, (int)d.site, sample, pos, unit);
    return make_uint4(r[0], r[1], r[2], r[3]);
}

/* Word w (0..3) of a block. */
static __device__ __forceinline__ uint32_t cu_word(uint4 r, int w)
{
    return w == 0 ? r.x : w == 1 ? r.y : w == 2 ? r.z : r.w;
}

/* moe.cu: the router's and the permutes' entries into ops (cuda_fill_attention_moe calls it). */
void cu_fill_moe(struct be_ops *ops);

#endif
