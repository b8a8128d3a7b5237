/* Private to src/backend/cuda/attention.cu: attention forward and backward on the tensor cores
 * (mma.sync.m16n8k16, bf16 or fp16 operands, fp32 accumulators; sm_80 and later), for the common
 * shapes: q, k and v of one 16-bit dtype, head size 64 or 128, self-attention (causal, padded or
 * packed documents, grouped-query, dropout). attention.cu runs its CUDA-core kernels for the rest
 * (fp32, other head sizes, the context-parallel block entries) and when TRIDENT_CUDA_ATTENTION=simt.
 *
 * The algorithm is the CUDA-core kernels' (online softmax forward writing out and lse; backward in
 * three passes, each output owned by one block: D (from the forward's out, am_delta_kernel, or by
 * the forward again), dK and dV per key tile, dQ per query tile; no atomics, the same bits on every
 * run), with the products on the tensor
 * cores. A block is 4 warps; a warp owns 16 rows of the block's tile (queries, or keys in the
 * dK/dV pass) and computes its products as m16n8k16 MMAs:
 *  - every tile sits in shared memory as stored (row-major, rows padded by 16 bytes so that the 8
 *    rows an ldmatrix reads fall in distinct banks), and every fragment is read by ldmatrix.x4:
 *    four 8 x 8 matrices a lane-quarter each;
 *  - the A operand of a product is 16 rows x 16 of the reduced dimension, from a shared tile
 *    (am_afrag) or from the accumulators of an earlier product: the C fragments of two adjacent
 *    8-column tiles are, element for element, the A fragment of their 16 columns
 *    (am_cfrag_to_a), so P and dS never leave registers (rounded to the 16-bit type, as
 *    FlashAttention-2 does);
 *  - the B operand (16 x 8): from a tile whose rows are B's columns (K's rows for S = Q K^T, V's
 *    for dP = dO V^T: am_bfrag2, two k-steps a load), or, for the products over the other index
 *    (P V, dS K, P^T dO, dS^T Q), from the tile as stored, transposed by ldmatrix.trans
 *    (am_bfrag2_t, two 8-column tiles a load): no transposed copy is written;
 *  - per PTX's fragment layout (lane = 4 group + tq): A registers hold (group, 2 tq..+1),
 *    (group + 8, 2 tq..+1), (group, 2 tq + 8..+9), (group + 8, 2 tq + 8..+9); B's hold rows
 *    (2 tq..+1) and (2 tq + 8..+9) of column group; C's (group, 2 tq..+1), (group + 8, ...).
 * Row statistics (max, sum) combine over the 4 lanes of a group (shuffles by 1 and 2).
 * Everything reads its inputs as the 16-bit compute type: q, k, v are that type; dout may be any
 * (converted while loading); out, lse, dq, dk, dv are written or accumulated in their own dtype.
 *
 * Compiled by nvcc into attention.cu, and by a host C++ compiler under ATT_EMU (tests/gpu/cuemu.h
 * first), where tests/gpu/test_att_mma_emu.cpp runs these kernels on host threads, a thread a
 * lane, with an MMA that reads its operands by PTX's layout, against a double-precision reference.
 * Needs from its includer: cu_ld, cu_st, cu_acc (typed element access), cu_h2f, cu_f2h (16-bit
 * values), __shfl_xor_sync, __syncthreads, threadIdx, blockIdx, gridDim, and under ATT_EMU
 * emu_ldmatrix. */
#ifndef TRIDENT_ATT_MMA_CUH
#define TRIDENT_ATT_MMA_CUH

#include <string.h>

#include "att_common.cuh"

#define AM_BQ 64      /* query rows a block (forward, dQ): 16 a warp */
#define AM_BK 64      /* key rows a tile (and a block of the dK/dV pass: 16 a warp) */
#define AM_BQ2 32     /* query rows a tile of the dK/dV pass */
#define AM_THREADS 128
#define AM_PAD 8      /* 16-bit elements of padding a shared row (spreads the rows over the banks) */

/* Loops over a fragment's registers are unrolled, so that the arrays stay in registers. */
#ifdef ATT_EMU
#define AM_SMEM(name) unsigned char *name = emu_smem()
#define AM_UNROLL
#else
#define AM_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#define AM_UNROLL _Pragma("unroll")
#endif

/* Two 16-bit elements at p (4-byte aligned) as one register, the first in the low half. */
ATT_DEV uint32_t am_ld32(const uint16_t *p)
{
#ifdef ATT_EMU
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#else
    return *(const uint32_t *)p;
#endif
}
ATT_DEV void am_st32(uint16_t *p, uint32_t v)
{
#ifdef ATT_EMU
    memcpy(p, &v, 4);
#else
    *(uint32_t *)p = v;
#endif
}

/* lo and hi rounded to the compute type, packed as an operand register (lo: the lower column). */
template <bool BF> ATT_DEV uint32_t am_pack(float lo, float hi)
{
    return (uint32_t)cu_f2h(lo, BF) | (uint32_t)cu_f2h(hi, BF) << 16;
}

/* c += A B for one m16n8k16 tile: a the A fragment (4 registers), b0 b1 the B fragment. */
template <bool BF> ATT_DEV void am_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
#ifdef ATT_EMU
    emu_mma(c, a, b0, b1, BF);
#else
    if constexpr (BF)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* Four 8 x 8 matrices of 16-bit elements from shared memory, one register each (ldmatrix .x4;
 * .trans: each matrix transposed): lanes 8i..8i+7 give the rows of matrix i, 16-byte aligned. */
template <bool TRANS> ATT_DEV void am_ldsm4(uint32_t r[4], const uint16_t *row)
{
#ifdef ATT_EMU
    emu_ldmatrix(r, 4, TRANS, row);
#else
    uint32_t a = (uint32_t)__cvta_generic_to_shared(row);
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
#endif
}

/* The A fragment of rows rw..rw+15, columns col..col+15 of a row-major shared tile (stride sld):
 * the four 8 x 8 quarters (top left, bottom left, top right, bottom right) are registers 0-3. */
ATT_DEV void am_afrag(uint32_t f[4], const uint16_t *s, int sld, int rw, int col, int lane)
{
    am_ldsm4<false>(f, s + (rw + (lane & 7) + (lane & 8)) * sld + col + (lane >> 4) * 8);
}

/* B fragments where s's rows are B's columns, B[k][n] = s[n0 + n][col + k] (K^T from K's rows):
 * of columns n0..n0+7 at k-steps col and col + 16, as (b0, b1) pairs f[0..1] and f[2..3]. */
ATT_DEV void am_bfrag2(uint32_t f[4], const uint16_t *s, int sld, int n0, int col, int lane)
{
    am_ldsm4<false>(f, s + (n0 + (lane & 7)) * sld + col + (lane >> 3) * 8);
}

/* B fragments where s's rows are B's rows, B[k][n] = s[k0 + k][n] (V as stored, for P V):
 * the 16 rows k0.. of columns n0..n0+7 and n0+8..n0+15, as (b0, b1) pairs f[0..1] and f[2..3]. */
ATT_DEV void am_bfrag2_t(uint32_t f[4], const uint16_t *s, int sld, int k0, int n0, int lane)
{
    am_ldsm4<true>(f, s + (k0 + (lane & 7) + (lane & 8)) * sld + n0 + (lane >> 4) * 8);
}

/* The C fragment x of 8-column tile nt (values of rows group and group + 8) into the A fragment of
 * 16-column chunk nt / 2: tile 2c gives registers 0 and 1, tile 2c + 1 registers 2 and 3. */
template <bool BF> ATT_DEV void am_cfrag_to_a(uint32_t f[][4], int nt, const float x[4])
{
    f[nt >> 1][(nt & 1) * 2] = am_pack<BF>(x[0], x[1]);
    f[nt >> 1][(nt & 1) * 2 + 1] = am_pack<BF>(x[2], x[3]);
}

/* Max and sum over the 4 lanes of a group (the lanes holding one row of a C fragment). */
ATT_DEV float am_max4(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
ATT_DEV float am_sum4(float x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/* 16 bytes from global memory (16-byte aligned) as 4 registers, by value; 8 and 16 bytes into
 * shared. */
struct am_u4 {
    uint32_t x, y, z, w;
};
ATT_DEV am_u4 am_ld128(const void *g)
{
    am_u4 v;
#ifdef ATT_EMU
    memcpy(&v, g, 16);
#else
    uint4 x = *(const uint4 *)g;
    v.x = x.x, v.y = x.y, v.z = x.z, v.w = x.w;
#endif
    return v;
}
ATT_DEV void am_st64(uint16_t *s, uint32_t lo, uint32_t hi)
{
#ifdef ATT_EMU
    uint32_t v[2] = {lo, hi};
    memcpy(s, v, 8);
#else
    *(uint2 *)s = make_uint2(lo, hi);
#endif
}
ATT_DEV void am_st128(uint16_t *s, am_u4 v)
{
#ifdef ATT_EMU
    memcpy(s, &v, 16);
#else
    *(uint4 *)s = make_uint4(v.x, v.y, v.z, v.w);
#endif
}
ATT_DEV float am_u2f(uint32_t u)
{
#ifdef ATT_EMU
    float f;
    memcpy(&f, &u, 4);
    return f;
#else
    return __uint_as_float(u);
#endif
}

/* Rows [r0, r0 + rows) of a matrix of dtype dt (row stride ld, from element base), HSZ columns,
 * into the shared tile s (rows x sld, 16-byte aligned rows) as the compute type; rows at or past
 * end are 0. Where the rows start on 16-byte boundaries (the model's buffers: 64-byte aligned
 * allocations, head offsets and strides of whole heads), 16 bytes a load: 8 16-bit elements,
 * or 4 fp32 ones rounded to 16 bits as they are stored; else 4 bytes (16-bit) or one element. */
template <int HSZ, bool BF>
ATT_DEV void am_load(uint16_t *s, int sld, const void *p, int dt, size_t base, int ld, int r0, int end, int rows)
{
    const bool raw = dt == (BF ? BE_BF16 : BE_F16);
    const uintptr_t at = (uintptr_t)p + base * (raw ? 2 : 4), pitch = (uintptr_t)ld * (raw ? 2 : 4);
    if ((raw || dt == BE_F32) && ((at | pitch) & 15) == 0) {
        const char *g = (const char *)at;
        const am_u4 zero = {0u, 0u, 0u, 0u};
        if (raw) { /* 8 elements a load */
            for (int i = threadIdx.x; i < rows * (HSZ / 8); i += AM_THREADS) {
                int r = i / (HSZ / 8), c = (i % (HSZ / 8)) * 8;
                am_st128(s + r * sld + c, r0 + r < end ? am_ld128(g + (size_t)(r0 + r) * pitch + c * 2) : zero);
            }
            return;
        }
        for (int i = threadIdx.x; i < rows * (HSZ / 4); i += AM_THREADS) { /* 4 fp32 elements a load */
            int r = i / (HSZ / 4), c = (i % (HSZ / 4)) * 4;
            am_u4 v = r0 + r < end ? am_ld128(g + (size_t)(r0 + r) * pitch + c * 4) : zero;
            am_st64(s + r * sld + c, am_pack<BF>(am_u2f(v.x), am_u2f(v.y)), am_pack<BF>(am_u2f(v.z), am_u2f(v.w)));
        }
        return;
    }
    if (raw) { /* two elements a load: base, ld and HSZ are even */
        const uint16_t *g = (const uint16_t *)p;
        for (int i = threadIdx.x; i < rows * (HSZ / 2); i += AM_THREADS) {
            int r = i / (HSZ / 2), c = (i % (HSZ / 2)) * 2;
            am_st32(s + r * sld + c, r0 + r < end ? am_ld32(g + base + (size_t)(r0 + r) * ld + c) : 0u);
        }
        return;
    }
    for (int i = threadIdx.x; i < rows * HSZ; i += AM_THREADS) {
        int r = i / HSZ, c = i % HSZ;
        s[r * sld + c] = r0 + r < end ? cu_f2h(cu_ld(p, dt, base + (size_t)(r0 + r) * ld + c), BF) : (uint16_t)0;
    }
}

/* Shared bytes of each kernel at head size hs. */
static inline size_t am_smem_fwd(int hs) { return ((size_t)AM_BQ + 2 * AM_BK) * (hs + AM_PAD) * 2; }
static inline size_t am_smem_kv(int hs)
{
    return ((size_t)2 * AM_BK + 2 * AM_BQ2) * (hs + AM_PAD) * 2 + (size_t)2 * AM_BQ2 * sizeof(float);
}
static inline size_t am_smem_q(int hs) { return ((size_t)2 * AM_BQ + 2 * AM_BK) * (hs + AM_PAD) * 2; }
/* The softmax backward's row term from the forward's output, a warp a row: D[r] = dout[r] .
 * out[r] over the head's HS columns, r = (b NH + h) T + t over `rows` rows (B NH T); dout and out
 * (B, T, NH HS) in their dtypes. Each lane sums columns lane, lane + 32, ... in order, then the
 * lanes fold by xor 16, 8, 4, 2, 1: a fixed order, so the same bits every run. The lanes read
 * consecutive elements (coalesced); the warps of the grid stride over the rows. Serves
 * attention_bwd given `out` (no forward rerun) and attention_delta. */
static __global__ void __launch_bounds__(AM_THREADS) am_delta_kernel(float *D, const void *dout, int ddt,
                                                                     const void *out, int odt, int T, int NH,
                                                                     int HS, size_t rows)
{
    const int lane = threadIdx.x & 31, warps = AM_THREADS / 32;
    for (size_t r = (size_t)blockIdx.x * warps + (threadIdx.x >> 5); r < rows; r += (size_t)gridDim.x * warps) {
        size_t b = r / ((size_t)NH * T), h = r / T % NH, t = r % T, o = (b * T + t) * NH * HS + h * HS;
        float d = 0.0f;
        for (int c = lane; c < HS; c += 32) d += cu_ld(dout, ddt, o + c) * cu_ld(out, odt, o + c);
        for (int m = 16; m; m >>= 1) d += __shfl_xor_sync(0xffffffffu, d, m);
        if (lane == 0) D[r] = d;
    }
}


/* The forward on query tile blockIdx.x of (sample blockIdx.z, head blockIdx.y): D NULL writes out
 * (dtype odt) and lse; D set (the backward's first pass) writes D[row] = dout[row] . out[row] and
 * nothing else, as attention.cu's att_fwd_kernel. Shared: Q, K, V (64 x HSZ each, as stored: V's
 * B fragments come transposed by ldmatrix.trans). */
template <int HSZ, bool BF>
__global__ void __launch_bounds__(AM_THREADS) am_fwd_kernel(att_args a, void *out, int odt, float *lse,
                                                            const void *dout, int ddt, float *D)
{
    AM_SMEM(smraw);
    constexpr int SLD = HSZ + AM_PAD, KK = HSZ / 16, NO = HSZ / 8, NT = AM_BK / 8;
    uint16_t *Qs = (uint16_t *)smraw, *Ks = Qs + AM_BQ * SLD, *Vs = Ks + AM_BK * SLD;
    const int C = a.NH * HSZ, b = blockIdx.z, h = blockIdx.y, g = h / (a.NH / a.NKV), q0 = blockIdx.x * AM_BQ;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3, rw = warp * 16;
    int t[2], tm[2], nk[2], kz[2]; /* the lane's rows (group, group + 8): query, clamped, key range */
    AM_UNROLL
    for (int i = 0; i < 2; i++) {
        t[i] = q0 + rw + gr + 8 * i;
        tm[i] = t[i] < a.T ? t[i] : a.T - 1; /* rows past T mask as the last one and are not written */
        nk[i] = att_keys(a, b, tm[i]);
        kz[i] = att_key0(a, b, tm[i]);
    }
    const int kend = att_kend(a, b, q0, AM_BQ);
    const size_t qbase = (size_t)b * a.T * a.ldq + (size_t)h * HSZ;
    const size_t kvbase = (size_t)b * a.Tk * a.ldkv + (size_t)g * HSZ;
    am_load<HSZ, BF>(Qs, SLD, a.q, a.qdt, qbase, a.ldq, q0, a.T, AM_BQ);
    __syncthreads();
    uint32_t qf[KK][4];
    AM_UNROLL
    for (int kk = 0; kk < KK; kk++) am_afrag(qf[kk], Qs, SLD, rw, kk * 16, lane);
    float o[NO][4];
    AM_UNROLL
    for (int n = 0; n < NO; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    for (int k0 = att_tile0(a, b, q0, AM_BK); k0 < kend; k0 += AM_BK) {
        __syncthreads(); /* the previous tile's K and V^T are read */
        am_load<HSZ, BF>(Ks, SLD, a.k, a.kdt, kvbase, a.ldkv, k0, kend, AM_BK);
        am_load<HSZ, BF>(Vs, SLD, a.v, a.vdt, kvbase, a.ldkv, k0, kend, AM_BK);
        __syncthreads();
        float s[NT][4];
        AM_UNROLL
        for (int nt = 0; nt < NT; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
            AM_UNROLL
            for (int kk = 0; kk < KK; kk += 2) {
                uint32_t f[4];
                am_bfrag2(f, Ks, SLD, nt * 8, kk * 16, lane);
                am_mma<BF>(s[nt], qf[kk], f[0], f[1]);
                am_mma<BF>(s[nt], qf[kk + 1], f[2], f[3]);
            }
        }
        float mt[2] = {-INFINITY, -INFINITY};
        AM_UNROLL
        for (int nt = 0; nt < NT; nt++)
            AM_UNROLL
            for (int e = 0; e < 4; e++) {
                int i = e >> 1, j = k0 + nt * 8 + 2 * tq + (e & 1);
                s[nt][e] = j < nk[i] && j >= kz[i] ? s[nt][e] * a.scale : -INFINITY;
                mt[i] = fmaxf(mt[i], s[nt][e]);
            }
        float mn[2], alpha[2], ls[2] = {0.0f, 0.0f};
        AM_UNROLL
        for (int i = 0; i < 2; i++) {
            /* -inf while a row has seen no key (packed documents starting in a later tile) */
            mn[i] = fmaxf(m[i], am_max4(mt[i]));
            alpha[i] = mn[i] == -INFINITY ? 1.0f : expf(m[i] - mn[i]);
        }
        uint32_t pf[AM_BK / 16][4];
        AM_UNROLL
        for (int nt = 0; nt < NT; nt++) {
            float pv[4];
            AM_UNROLL
            for (int e = 0; e < 4; e++) {
                int i = e >> 1, j = k0 + nt * 8 + 2 * tq + (e & 1);
                float p = s[nt][e] == -INFINITY ? 0.0f : expf(s[nt][e] - mn[i]);
                ls[i] += p;
                pv[e] = p != 0.0f ? p * att_mult1(a, b, h, tm[i], j) : 0.0f;
            }
            am_cfrag_to_a<BF>(pf, nt, pv);
        }
        AM_UNROLL
        for (int i = 0; i < 2; i++) {
            l[i] = l[i] * alpha[i] + am_sum4(ls[i]);
            m[i] = mn[i];
        }
        AM_UNROLL
        for (int n = 0; n < NO; n++) {
            o[n][0] *= alpha[0], o[n][1] *= alpha[0];
            o[n][2] *= alpha[1], o[n][3] *= alpha[1];
        }
        AM_UNROLL
        for (int kc = 0; kc < AM_BK / 16; kc++)
            AM_UNROLL
            for (int n = 0; n < NO; n += 2) {
                uint32_t f[4];
                am_bfrag2_t(f, Vs, SLD, kc * 16, n * 8, lane);
                am_mma<BF>(o[n], pf[kc], f[0], f[1]);
                am_mma<BF>(o[n + 1], pf[kc], f[2], f[3]);
            }
    }
    AM_UNROLL
    for (int i = 0; i < 2; i++) {
        float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        size_t orow = ((size_t)b * a.T + t[i]) * C + (size_t)h * HSZ;
        if (!D) {
            if (t[i] >= a.T) continue;
            AM_UNROLL
            for (int n = 0; n < NO; n++)
                AM_UNROLL
                for (int e = 0; e < 2; e++) cu_st(out, odt, orow + n * 8 + 2 * tq + e, o[n][2 * i + e] * inv);
            if (tq == 0) lse[((size_t)b * a.NH + h) * a.T + t[i]] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
            continue;
        }
        float dsum = 0.0f;
        if (t[i] < a.T)
            AM_UNROLL
            for (int n = 0; n < NO; n++)
                AM_UNROLL
                for (int e = 0; e < 2; e++) dsum += cu_ld(dout, ddt, orow + n * 8 + 2 * tq + e) * (o[n][2 * i + e] * inv);
        dsum = am_sum4(dsum); /* every lane of the group takes part */
        if (t[i] < a.T && tq == 0) D[((size_t)b * a.NH + h) * a.T + t[i]] = dsum;
    }
}

/* dK and dV of key tile blockIdx.x of (sample blockIdx.z, key/value head blockIdx.y), summed over
 * the query heads of its group in order and every query tile that reads it, then accumulated once
 * into dk, dv (either may be NULL). A warp owns 16 keys: it computes S^T = K Q^T and dP^T = V dO^T
 * (keys x 32 queries), P^T and dS^T in registers, then dV += (P M)^T dO and dK += dS^T Q.
 * Shared: K, V (64 x HSZ), Q, dO (32 x HSZ; their B fragments for dV and dK come transposed by
 * ldmatrix.trans), lse and D of the query tile. */
template <int HSZ, bool BF>
__global__ void __launch_bounds__(AM_THREADS) am_bwd_kv_kernel(att_args a, void *dk, int dkdt, void *dv, int dvdt,
                                                               const void *dout, int ddt, const float *lse,
                                                               const float *D)
{
    AM_SMEM(smraw);
    constexpr int SLD = HSZ + AM_PAD, KK = HSZ / 16, NO = HSZ / 8, NQ = AM_BQ2 / 8;
    uint16_t *Ks = (uint16_t *)smraw, *Vs = Ks + AM_BK * SLD, *Qs = Vs + AM_BK * SLD, *Os = Qs + AM_BQ2 * SLD;
    float *Ls = (float *)(Os + AM_BQ2 * SLD), *Ds = Ls + AM_BQ2;
    const int C = a.NH * HSZ, rep = a.NH / a.NKV, b = blockIdx.z, g = blockIdx.y, k0 = blockIdx.x * AM_BK;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3, rw = warp * 16;
    const int kread = a.klen ? att_keys(a, b, 0) : a.Tk; /* keys anyone reads */
    if (k0 >= kread) return; /* padding: no query reads these keys, their gradients are 0 */
    const size_t kvbase = (size_t)b * a.Tk * a.ldkv + (size_t)g * HSZ;
    /* keys nobody reads load as 0, as in the other kernels: a padded key's bytes are never read
     * (dS^T there is 0 times dP^T = V dO^T, NaN where a padded V is) */
    am_load<HSZ, BF>(Ks, SLD, a.k, a.kdt, kvbase, a.ldkv, k0, kread, AM_BK);
    am_load<HSZ, BF>(Vs, SLD, a.v, a.vdt, kvbase, a.ldkv, k0, kread, AM_BK);
    __syncthreads();
    uint32_t kf[KK][4], vf[KK][4];
    AM_UNROLL
    for (int kk = 0; kk < KK; kk++) {
        am_afrag(kf[kk], Ks, SLD, rw, kk * 16, lane);
        am_afrag(vf[kk], Vs, SLD, rw, kk * 16, lane);
    }
    const int j[2] = {k0 + rw + gr, k0 + rw + gr + 8};
    float gk[NO][4], gv[NO][4];
    AM_UNROLL
    for (int n = 0; n < NO; n++)
        AM_UNROLL
        for (int e = 0; e < 4; e++) gk[n][e] = gv[n][e] = 0.0f;
    /* causal: no query before key k0 reads it */
    const int qstart = a.klen ? 0 : k0 / AM_BQ2 * AM_BQ2;
    for (int h = g * rep; h < (g + 1) * rep; h++) {
        const size_t qbase = (size_t)b * a.T * a.ldq + (size_t)h * HSZ, obase = (size_t)b * a.T * C + (size_t)h * HSZ;
        const size_t rowbase = ((size_t)b * a.NH + h) * a.T;
        for (int q0 = qstart; q0 < a.T; q0 += AM_BQ2) {
            /* segments: once a tile's first query starts its document past this key tile, no later
             * query reads it (uniform over the block) */
            if (a.seg && att_key0(a, b, q0) >= k0 + AM_BK) break;
            __syncthreads(); /* the previous query tile is read */
            am_load<HSZ, BF>(Qs, SLD, a.q, a.qdt, qbase, a.ldq, q0, a.T, AM_BQ2);
            am_load<HSZ, BF>(Os, SLD, dout, ddt, obase, C, q0, a.T, AM_BQ2);
            if (threadIdx.x < AM_BQ2) {
                int t = q0 + threadIdx.x;
                Ls[threadIdx.x] = t < a.T ? lse[rowbase + t] : 0.0f;
                Ds[threadIdx.x] = t < a.T ? D[rowbase + t] : 0.0f;
            }
            __syncthreads();
            float st[NQ][4], dpt[NQ][4];
            AM_UNROLL
            for (int nq = 0; nq < NQ; nq++) {
                AM_UNROLL
                for (int e = 0; e < 4; e++) st[nq][e] = dpt[nq][e] = 0.0f;
                AM_UNROLL
                for (int kk = 0; kk < KK; kk += 2) {
                    uint32_t f[4];
                    am_bfrag2(f, Qs, SLD, nq * 8, kk * 16, lane);
                    am_mma<BF>(st[nq], kf[kk], f[0], f[1]);
                    am_mma<BF>(st[nq], kf[kk + 1], f[2], f[3]);
                    am_bfrag2(f, Os, SLD, nq * 8, kk * 16, lane);
                    am_mma<BF>(dpt[nq], vf[kk], f[0], f[1]);
                    am_mma<BF>(dpt[nq], vf[kk + 1], f[2], f[3]);
                }
            }
            uint32_t pf[AM_BQ2 / 16][4], sf[AM_BQ2 / 16][4];
            AM_UNROLL
            for (int nq = 0; nq < NQ; nq++) {
                float pm[4], ds[4];
                AM_UNROLL
                for (int e = 0; e < 4; e++) {
                    int key = j[e >> 1], qi = nq * 8 + 2 * tq + (e & 1), t = q0 + qi;
                    float p = 0.0f, mult = 0.0f;
                    if (t < a.T && key < a.Tk && att_reads(a, b, t, key)) {
                        p = expf(st[nq][e] * a.scale - Ls[qi]);
                        mult = att_mult1(a, b, h, t, key);
                    }
                    pm[e] = p * mult;
                    ds[e] = p * (dpt[nq][e] * mult - Ds[qi]);
                }
                am_cfrag_to_a<BF>(pf, nq, pm);
                am_cfrag_to_a<BF>(sf, nq, ds);
            }
            AM_UNROLL
            for (int kc = 0; kc < AM_BQ2 / 16; kc++)
                AM_UNROLL
                for (int n = 0; n < NO; n += 2) {
                    uint32_t f[4];
                    am_bfrag2_t(f, Os, SLD, kc * 16, n * 8, lane);
                    am_mma<BF>(gv[n], pf[kc], f[0], f[1]);
                    am_mma<BF>(gv[n + 1], pf[kc], f[2], f[3]);
                    am_bfrag2_t(f, Qs, SLD, kc * 16, n * 8, lane);
                    am_mma<BF>(gk[n], sf[kc], f[0], f[1]);
                    am_mma<BF>(gk[n + 1], sf[kc], f[2], f[3]);
                }
        }
    }
    AM_UNROLL
    for (int i = 0; i < 2; i++) {
        if (j[i] >= a.Tk) continue;
        size_t row = kvbase + (size_t)j[i] * a.ldkv;
        AM_UNROLL
        for (int n = 0; n < NO; n++)
            AM_UNROLL
            for (int e = 0; e < 2; e++) {
                int c = n * 8 + 2 * tq + e;
                if (dk) cu_acc(dk, dkdt, row + c, gk[n][2 * i + e] * a.scale);
                if (dv) cu_acc(dv, dvdt, row + c, gv[n][2 * i + e]);
            }
    }
}

/* dQ of query tile blockIdx.x of (sample blockIdx.z, head blockIdx.y): over its key tiles in
 * order, S = Q K^T and dP = dO V^T, dS in registers, dQ += dS K; accumulated once into dq, times
 * the scale. Shared: Q, dO (64 x HSZ), K, V (64 x HSZ; K's B fragments for dQ come transposed by
 * ldmatrix.trans). */
template <int HSZ, bool BF>
__global__ void __launch_bounds__(AM_THREADS) am_bwd_q_kernel(att_args a, void *dq, int dqdt, const void *dout,
                                                              int ddt, const float *lse, const float *D)
{
    AM_SMEM(smraw);
    constexpr int SLD = HSZ + AM_PAD, KK = HSZ / 16, NO = HSZ / 8, NT = AM_BK / 8;
    uint16_t *Qs = (uint16_t *)smraw, *Os = Qs + AM_BQ * SLD, *Ks = Os + AM_BQ * SLD, *Vs = Ks + AM_BK * SLD;
    const int C = a.NH * HSZ, b = blockIdx.z, h = blockIdx.y, g = h / (a.NH / a.NKV), q0 = blockIdx.x * AM_BQ;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3, rw = warp * 16;
    const size_t qbase = (size_t)b * a.T * a.ldq + (size_t)h * HSZ, obase = (size_t)b * a.T * C + (size_t)h * HSZ;
    const size_t kvbase = (size_t)b * a.Tk * a.ldkv + (size_t)g * HSZ, rowbase = ((size_t)b * a.NH + h) * a.T;
    int t[2], tm[2], nk[2], kz[2];
    float L[2], Dr[2];
    AM_UNROLL
    for (int i = 0; i < 2; i++) {
        t[i] = q0 + rw + gr + 8 * i;
        tm[i] = t[i] < a.T ? t[i] : a.T - 1;
        nk[i] = att_keys(a, b, tm[i]);
        kz[i] = att_key0(a, b, tm[i]);
        L[i] = lse[rowbase + tm[i]];
        Dr[i] = D[rowbase + tm[i]];
    }
    const int kend = att_kend(a, b, q0, AM_BQ);
    am_load<HSZ, BF>(Qs, SLD, a.q, a.qdt, qbase, a.ldq, q0, a.T, AM_BQ);
    am_load<HSZ, BF>(Os, SLD, dout, ddt, obase, C, q0, a.T, AM_BQ);
    __syncthreads();
    uint32_t qf[KK][4], of[KK][4];
    AM_UNROLL
    for (int kk = 0; kk < KK; kk++) {
        am_afrag(qf[kk], Qs, SLD, rw, kk * 16, lane);
        am_afrag(of[kk], Os, SLD, rw, kk * 16, lane);
    }
    float acc[NO][4];
    AM_UNROLL
    for (int n = 0; n < NO; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    for (int k0 = att_tile0(a, b, q0, AM_BK); k0 < kend; k0 += AM_BK) {
        __syncthreads();
        am_load<HSZ, BF>(Ks, SLD, a.k, a.kdt, kvbase, a.ldkv, k0, kend, AM_BK);
        am_load<HSZ, BF>(Vs, SLD, a.v, a.vdt, kvbase, a.ldkv, k0, kend, AM_BK);
        __syncthreads();
        uint32_t sf[AM_BK / 16][4];
        AM_UNROLL
        for (int nt = 0; nt < NT; nt++) {
            float s[4] = {0.0f, 0.0f, 0.0f, 0.0f}, dp[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            AM_UNROLL
            for (int kk = 0; kk < KK; kk += 2) {
                uint32_t f[4];
                am_bfrag2(f, Ks, SLD, nt * 8, kk * 16, lane);
                am_mma<BF>(s, qf[kk], f[0], f[1]);
                am_mma<BF>(s, qf[kk + 1], f[2], f[3]);
                am_bfrag2(f, Vs, SLD, nt * 8, kk * 16, lane);
                am_mma<BF>(dp, of[kk], f[0], f[1]);
                am_mma<BF>(dp, of[kk + 1], f[2], f[3]);
            }
            float ds[4];
            AM_UNROLL
            for (int e = 0; e < 4; e++) {
                int i = e >> 1, key = k0 + nt * 8 + 2 * tq + (e & 1);
                ds[e] = 0.0f;
                if (key < nk[i] && key >= kz[i]) {
                    float p = expf(s[e] * a.scale - L[i]);
                    ds[e] = p * (dp[e] * att_mult1(a, b, h, tm[i], key) - Dr[i]);
                }
            }
            am_cfrag_to_a<BF>(sf, nt, ds);
        }
        AM_UNROLL
        for (int kc = 0; kc < AM_BK / 16; kc++)
            AM_UNROLL
            for (int n = 0; n < NO; n += 2) {
                uint32_t f[4];
                am_bfrag2_t(f, Ks, SLD, kc * 16, n * 8, lane);
                am_mma<BF>(acc[n], sf[kc], f[0], f[1]);
                am_mma<BF>(acc[n + 1], sf[kc], f[2], f[3]);
            }
    }
    AM_UNROLL
    for (int i = 0; i < 2; i++) {
        if (t[i] >= a.T) continue;
        size_t row = qbase + (size_t)t[i] * a.ldq;
        AM_UNROLL
        for (int n = 0; n < NO; n++)
            AM_UNROLL
            for (int e = 0; e < 2; e++) cu_acc(dq, dqdt, row + n * 8 + 2 * tq + e, acc[n][2 * i + e] * a.scale);
    }
}

#endif
