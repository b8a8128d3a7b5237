/* The CUDA backend's attention: attention_fwd and attention_bwd (training) and attention_kv_fwd
 * (the decode step over the key/value cache), as be_ops.h states them; the CPU's
 * src/backend/cpu/attention.c and attention_kv.c are the reference they are held to
 * (tests/gpu/test_cuda_attention_moe.c).
 *
 * Training attention is tiled as flash attention is: no (T, T) matrix exists anywhere. A block
 * of ATT_THREADS threads owns a tile of ATT_BQ query rows (or, in the backward's key pass,
 * ATT_BK key rows) of one (sample, head), 8 threads a row; the tiles of q, k, v and dout it
 * reads sit in shared memory as fp32 (whatever their dtype), and every sum is in fp32.
 *  - forward: per query tile, the key tiles in order with an online softmax (running max and
 *    sum per row, the output rescaled as the max grows); writes out and lse = max + log(sum),
 *    all the backward needs;
 *  - backward, three kernels, each output owned by one block (no atomics, deterministic):
 *    (1) D = dout . out per row (the softmax gradient's row term: sum_j P M dP = dout . out,
 *        with dropout too), from the forward's out where the caller passes it (a warp a row,
 *        am_delta_kernel), else by running the forward again, writing D instead of out; (2) per key tile of one
 *        key/value head: every query head of its group in order, every query tile, P
 *        recomputed from lse, dV += (P M)^T dout, dK += scale dS^T Q with dS = P (M (dout V^T)
 *        - D); (3) per query tile: dQ += scale dS K over its key tiles.
 * Masks: causal (query t reads keys 0..t) or padded (every query of sample b reads keys
 * 0..klen[b]-1; klen is clamped to [1, T] on the device, as it cannot be checked there without
 * a sync); packed documents (seg) narrow a causal row to keys seg[t]..t, the key tiles before
 * the first row's document skipped (seg clamped to [0, t] on the device). Attention dropout multiplies the probabilities by the CPU's Philox mask at (sample,
 * pos0 + query, (unit0 + head) * T + key), scaled by 1/(1-p).
 *
 * Limits: head size 1..ATT_MAX_HS (256; larger is refused naming the entry: the accumulators
 * are registers and the tiles shared memory, 137 KB at 256, within sm_80's 163 KB). q, k, v,
 * out, dout, dq, dk, dv may each be fp32, bf16 or fp16 (read as fp32; written or accumulated in
 * fp32 and rounded once into their dtype); lse is fp32. These CUDA-core kernels (fp32 FMAs
 * from shared memory) serve every case; the common ones (q, k, v in bf16, head size 64 or 128,
 * self-attention; fp32 ones too in a --bf16 run) run on the tensor cores instead (att_mma.cuh,
 * am_*), unless TRIDENT_CUDA_ATTENTION=simt asks for these (to measure one against the other). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cu_common.cuh"
#include "att_common.cuh"
#include "att_mma.cuh"

extern "C" {
#include "trident/check.h"
}

#define ATT_BQ 32                  /* query rows a tile */
#define ATT_BK 32                  /* key rows a tile (att_load_tile loads ATT_BQ rows: equal) */
#define ATT_THREADS 256            /* 8 threads a row of a 32-row tile */
#define ATT_MAX_HS 256             /* the largest head size */
#define ATT_CPT (ATT_MAX_HS / 8)   /* output columns a thread holds: c = sub + 8 u */
#define KV_WARPS 8                 /* attention_kv_fwd: warps a query */
#define KV_DPL (ATT_MAX_HS / 32)   /* attention_kv_fwd: head dims a lane: d = lane + 32 u */
static_assert(ATT_BQ == ATT_BK && ATT_THREADS == 8 * ATT_BQ, "8 threads a row, 4 keys (or queries) each");

/* Rows [r0, r0 + ATT_BQ) of a (T, ld) matrix's columns [col, col + HS) into s (ATT_BQ, HS + 1)
 * as fp32; rows at or past `end` read as 0. */
static __device__ void att_load_tile(float *s, const void *p, int dt, size_t base, int ld, int r0, int end, int HS)
{
    int hsp = HS + 1;
    for (int i = threadIdx.x; i < ATT_BQ * HS; i += blockDim.x) {
        int r = i / HS, d = i % HS;
        s[r * hsp + d] = r0 + r < end ? cu_ld(p, dt, base + (size_t)(r0 + r) * ld + d) : 0.0f;
    }
}

/* Sum over the 8 threads of a row (consecutive lanes 8m..8m+7); every one gets it. */
static __device__ __forceinline__ float row_sum8(float x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 4);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x;
}
static __device__ __forceinline__ float row_max8(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return x;
}

/* Dropout multipliers m[0..4) of keys j0..j0+3 for query t of (sample b, head h): 0 or 1/(1-p).
 * Consecutive keys are consecutive units, so one Philox block serves up to 4 (two at most). */
static __device__ void att_mults4(float m[4], const att_args &a, int b, int h, int t, int j0)
{
    if (!a.dr.on) {
        m[0] = m[1] = m[2] = m[3] = 1.0f;
        return;
    }
    if (a.qpos) { /* block mode: keys by position, not consecutive units; past the block masked */
        for (int w = 0; w < 4; w++) m[w] = j0 + w < a.Tk ? att_mult1(a, b, h, t, j0 + w) : 0.0f;
        return;
    }
    int64_t sample = a.dr.sample[b], pos = (int64_t)a.dr.pos0 + t;
    int64_t unit = ((int64_t)a.dr.unit0 + h) * a.T + j0;
    uint4 r = cu_drop_block(a.dr, BE_DROP_ATTN, sample, pos, unit);
    for (int w = 0; w < 4; w++, unit++) {
        if (w > 0 && (unit & 3) == 0) r = cu_drop_block(a.dr, BE_DROP_ATTN, sample, pos, unit);
        m[w] = cu_word(r, (int)(unit & 3)) >= a.dr.thr ? a.dr.keep : 0.0f;
    }
}

/* The forward on the query tile blockIdx.x of (sample blockIdx.z, head blockIdx.y). D NULL:
 * writes out (dtype odt) and lse. D set (the backward's first pass): writes D[row] = dout[row] .
 * out[row] and nothing else. Shared memory: Q, K, V tiles (32, HS + 1) and P (32, 33). */
__global__ void __launch_bounds__(ATT_THREADS) att_fwd_kernel(att_args a, void *out, int odt, float *lse,
                                                              const void *dout, int ddt, float *D)
{
    extern __shared__ float sm[];
    const int HS = a.HS, hsp = HS + 1, C = a.NH * HS;
    float *Qs = sm, *Ks = Qs + ATT_BQ * hsp, *Vs = Ks + ATT_BK * hsp, *Ps = Vs + ATT_BK * hsp;
    const int b = blockIdx.z, h = blockIdx.y, g = h / (a.NH / a.NKV), q0 = blockIdx.x * ATT_BQ;
    const int r = threadIdx.x >> 3, sub = threadIdx.x & 7, t = q0 + r;
    const int tm = t < a.T ? t : a.T - 1; /* rows past T mask as the last one and are not written */
    const int nkeys = att_keys(a, b, tm), key0 = att_key0(a, b, tm);
    const int kend = att_kend(a, b, q0, ATT_BQ);
    const size_t qbase = (size_t)b * a.T * a.ldq + (size_t)h * HS;
    const size_t kvbase = (size_t)b * a.Tk * a.ldkv + (size_t)g * HS;

    att_load_tile(Qs, a.q, a.qdt, qbase, a.ldq, q0, a.T, HS);
    float acc[ATT_CPT];
#pragma unroll
    for (int u = 0; u < ATT_CPT; u++) acc[u] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int k0 = att_tile0(a, b, q0, ATT_BK); k0 < kend; k0 += ATT_BK) {
        __syncthreads(); /* the previous tile's K, V and P are read */
        att_load_tile(Ks, a.k, a.kdt, kvbase, a.ldkv, k0, kend, HS);
        att_load_tile(Vs, a.v, a.vdt, kvbase, a.ldkv, k0, kend, HS);
        __syncthreads();
        float s[4], mult[4], mt = -INFINITY;
        for (int w = 0; w < 4; w++) {
            int jj = sub * 4 + w;
            const float *qr = Qs + r * hsp, *kr = Ks + jj * hsp;
            float dot = 0.0f;
            for (int d = 0; d < HS; d++) dot += qr[d] * kr[d];
            s[w] = k0 + jj < nkeys && k0 + jj >= key0 ? dot * a.scale : -INFINITY;
            mt = fmaxf(mt, s[w]);
        }
        att_mults4(mult, a, b, h, tm, k0 + sub * 4);
        /* finite without segments (key 0 is in every row's first tile); with them a row whose
         * document starts in a later tile has seen no key yet: -inf, and nothing adds up */
        float mnew = fmaxf(m, row_max8(mt));
        float alpha = mnew == -INFINITY ? 1.0f : expf(m - mnew), ls = 0.0f;
        for (int w = 0; w < 4; w++) {
            float p = s[w] == -INFINITY ? 0.0f : expf(s[w] - mnew); /* 0 for masked keys */
            ls += p;
            Ps[r * (ATT_BK + 1) + sub * 4 + w] = p * mult[w];
        }
        l = l * alpha + row_sum8(ls);
        m = mnew;
        __syncthreads();
        const float *pr = Ps + r * (ATT_BK + 1);
#pragma unroll
        for (int u = 0; u < ATT_CPT; u++) acc[u] *= alpha;
        for (int j = 0; j < ATT_BK; j++) {
            float p = pr[j];
            const float *vr = Vs + j * hsp + sub;
#pragma unroll
            for (int u = 0; u < ATT_CPT; u++)
                if (sub + 8 * u < HS) acc[u] += p * vr[8 * u];
        }
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f; /* l 0: block mode, a row that reads no key of the block */
    size_t orow = ((size_t)b * a.T + t) * C + (size_t)h * HS;
    if (!D) {
        if (t >= a.T) return;
#pragma unroll
        for (int u = 0; u < ATT_CPT; u++) {
            int c = sub + 8 * u;
            if (c < HS) cu_st(out, odt, orow + c, acc[u] * inv);
        }
        if (sub == 0) lse[((size_t)b * a.NH + h) * a.T + t] = l > 0.0f ? m + logf(l) : -INFINITY;
        return;
    }
    float dsum = 0.0f;
#pragma unroll
    for (int u = 0; u < ATT_CPT; u++) {
        int c = sub + 8 * u;
        if (c < HS && t < a.T) dsum += cu_ld(dout, ddt, orow + c) * (acc[u] * inv);
    }
    dsum = row_sum8(dsum);
    if (t < a.T && sub == 0) D[((size_t)b * a.NH + h) * a.T + t] = dsum;
}

/* The gradients of a tile of keys: dK, dV of key tile blockIdx.x of (sample blockIdx.z,
 * key/value head blockIdx.y), summed over the query heads of its group in order and over every
 * query that reads the tile, then accumulated once into dk, dv (either may be NULL). Thread
 * (r, sub) owns key r of the tile (and its columns sub + 8 u) and works queries sub*4..sub*4+3 of
 * each query tile. Shared memory: K, V, Q, dO tiles (32, HS + 1), P M and dS transposed (32, 33)
 * each, lse and D of the query tile. */
__global__ void __launch_bounds__(ATT_THREADS) att_bwd_kv_kernel(att_args a, void *dk, int dkdt, void *dv, int dvdt,
                                                                 const void *dout, int ddt, const float *lse,
                                                                 const float *D)
{
    extern __shared__ float sm[];
    const int HS = a.HS, hsp = HS + 1, C = a.NH * HS, rep = a.NH / a.NKV;
    float *Ks = sm, *Vs = Ks + ATT_BK * hsp, *Qs = Vs + ATT_BK * hsp, *Os = Qs + ATT_BQ * hsp;
    float *Pt = Os + ATT_BQ * hsp, *St = Pt + ATT_BK * (ATT_BQ + 1), *Ls = St + ATT_BK * (ATT_BQ + 1),
          *Dq = Ls + ATT_BQ;
    const int b = blockIdx.z, g = blockIdx.y, k0 = blockIdx.x * ATT_BK;
    const int r = threadIdx.x >> 3, sub = threadIdx.x & 7, j = k0 + r;
    const int kread = a.klen ? att_keys(a, b, 0) : a.Tk; /* keys anyone reads */
    if (k0 >= kread) return; /* padding: no query reads these keys, their gradients are 0 */
    const size_t kvbase = (size_t)b * a.Tk * a.ldkv + (size_t)g * HS;
    att_load_tile(Ks, a.k, a.kdt, kvbase, a.ldkv, k0, a.Tk, HS);
    att_load_tile(Vs, a.v, a.vdt, kvbase, a.ldkv, k0, a.Tk, HS);
    float gk[ATT_CPT], gv[ATT_CPT];
#pragma unroll
    for (int u = 0; u < ATT_CPT; u++) gk[u] = gv[u] = 0.0f;
    /* causal: no query before key k0 reads it (block mode: no query at a position before it) */
    const int qstart = a.klen ? 0 : a.qpos ? att_qfirst(a, a.kpos[k0]) / ATT_BQ * ATT_BQ : k0 / ATT_BQ * ATT_BQ;
    for (int h = g * rep; h < (g + 1) * rep; h++) {
        const size_t qbase = (size_t)b * a.T * a.ldq + (size_t)h * HS, obase = (size_t)b * a.T * C + (size_t)h * HS;
        const size_t rowbase = ((size_t)b * a.NH + h) * a.T;
        for (int q0 = qstart; q0 < a.T; q0 += ATT_BQ) {
            /* segments: starts are non-decreasing, so once a tile's first query starts its
             * document past this key tile, no later query reads it (uniform over the block) */
            if (a.seg && att_key0(a, b, q0) >= k0 + ATT_BK) break;
            __syncthreads(); /* the previous tile's Q, dO, P, dS are read */
            att_load_tile(Qs, a.q, a.qdt, qbase, a.ldq, q0, a.T, HS);
            att_load_tile(Os, dout, ddt, obase, C, q0, a.T, HS);
            if (threadIdx.x < ATT_BQ) {
                int t = q0 + threadIdx.x;
                Ls[threadIdx.x] = t < a.T ? lse[rowbase + t] : 0.0f;
                Dq[threadIdx.x] = t < a.T ? D[rowbase + t] : 0.0f;
            }
            __syncthreads();
            for (int w = 0; w < 4; w++) {
                int i = sub * 4 + w, t = q0 + i;
                float p = 0.0f, pm = 0.0f, ds = 0.0f;
                if (t < a.T && j < a.Tk && att_reads(a, b, t, j)) {
                    const float *qr = Qs + i * hsp, *kr = Ks + r * hsp, *orr = Os + i * hsp, *vr = Vs + r * hsp;
                    float s = 0.0f, dp = 0.0f;
                    for (int d = 0; d < HS; d++) {
                        s += qr[d] * kr[d];
                        dp += orr[d] * vr[d];
                    }
                    float mult = att_mult1(a, b, h, t, j);
                    p = expf(s * a.scale - Ls[i]);
                    pm = p * mult;
                    ds = p * (dp * mult - Dq[i]);
                }
                Pt[r * (ATT_BQ + 1) + i] = pm;
                St[r * (ATT_BQ + 1) + i] = ds;
            }
            __syncthreads();
            const float *pr = Pt + r * (ATT_BQ + 1), *sr = St + r * (ATT_BQ + 1);
            for (int i = 0; i < ATT_BQ; i++) {
                float pm = pr[i], ds = sr[i];
                const float *orr = Os + i * hsp + sub, *qr = Qs + i * hsp + sub;
#pragma unroll
                for (int u = 0; u < ATT_CPT; u++)
                    if (sub + 8 * u < HS) {
                        gv[u] += pm * orr[8 * u];
                        gk[u] += ds * qr[8 * u];
                    }
            }
        }
    }
    if (j >= a.Tk) return;
    size_t row = kvbase + (size_t)j * a.ldkv;
#pragma unroll
    for (int u = 0; u < ATT_CPT; u++) {
        int c = sub + 8 * u;
        if (c >= HS) continue;
        if (dk) cu_acc(dk, dkdt, row + c, gk[u] * a.scale);
        if (dv) cu_acc(dv, dvdt, row + c, gv[u]);
    }
}

/* dQ of query tile blockIdx.x of (sample blockIdx.z, head blockIdx.y): its key tiles in order,
 * dq += scale sum_j dS K. Thread (r, sub) owns query r and keys sub*4..sub*4+3 of each tile.
 * Shared memory: Q, dO, K, V tiles (32, HS + 1) and dS (32, 33). */
__global__ void __launch_bounds__(ATT_THREADS) att_bwd_q_kernel(att_args a, void *dq, int dqdt, const void *dout,
                                                                int ddt, const float *lse, const float *D)
{
    extern __shared__ float sm[];
    const int HS = a.HS, hsp = HS + 1, C = a.NH * HS;
    float *Qs = sm, *Os = Qs + ATT_BQ * hsp, *Ks = Os + ATT_BQ * hsp, *Vs = Ks + ATT_BK * hsp,
          *Ss = Vs + ATT_BK * hsp;
    const int b = blockIdx.z, h = blockIdx.y, g = h / (a.NH / a.NKV), q0 = blockIdx.x * ATT_BQ;
    const int r = threadIdx.x >> 3, sub = threadIdx.x & 7, t = q0 + r;
    const int tm = t < a.T ? t : a.T - 1;
    const int nkeys = att_keys(a, b, tm), key0 = att_key0(a, b, tm);
    const int kend = att_kend(a, b, q0, ATT_BQ);
    const size_t qbase = (size_t)b * a.T * a.ldq + (size_t)h * HS, obase = (size_t)b * a.T * C + (size_t)h * HS;
    const size_t kvbase = (size_t)b * a.Tk * a.ldkv + (size_t)g * HS;
    const size_t rowbase = ((size_t)b * a.NH + h) * a.T;
    att_load_tile(Qs, a.q, a.qdt, qbase, a.ldq, q0, a.T, HS);
    att_load_tile(Os, dout, ddt, obase, C, q0, a.T, HS);
    const float L = lse[rowbase + tm], Dr = D[rowbase + tm];
    float acc[ATT_CPT];
#pragma unroll
    for (int u = 0; u < ATT_CPT; u++) acc[u] = 0.0f;
    for (int k0 = att_tile0(a, b, q0, ATT_BK); k0 < kend; k0 += ATT_BK) {
        __syncthreads();
        att_load_tile(Ks, a.k, a.kdt, kvbase, a.ldkv, k0, kend, HS);
        att_load_tile(Vs, a.v, a.vdt, kvbase, a.ldkv, k0, kend, HS);
        __syncthreads();
        float mult[4];
        att_mults4(mult, a, b, h, tm, k0 + sub * 4);
        for (int w = 0; w < 4; w++) {
            int jj = sub * 4 + w;
            float ds = 0.0f;
            if (k0 + jj < nkeys && k0 + jj >= key0) {
                const float *qr = Qs + r * hsp, *kr = Ks + jj * hsp, *orr = Os + r * hsp, *vr = Vs + jj * hsp;
                float s = 0.0f, dp = 0.0f;
                for (int d = 0; d < HS; d++) {
                    s += qr[d] * kr[d];
                    dp += orr[d] * vr[d];
                }
                float p = expf(s * a.scale - L);
                ds = p * (dp * mult[w] - Dr);
            }
            Ss[r * (ATT_BK + 1) + jj] = ds;
        }
        __syncthreads();
        const float *sr = Ss + r * (ATT_BK + 1);
        for (int jj = 0; jj < ATT_BK; jj++) {
            float ds = sr[jj];
            const float *kr = Ks + jj * hsp + sub;
#pragma unroll
            for (int u = 0; u < ATT_CPT; u++)
                if (sub + 8 * u < HS) acc[u] += ds * kr[8 * u];
        }
    }
    if (t >= a.T) return;
    size_t row = qbase + (size_t)t * a.ldq;
#pragma unroll
    for (int u = 0; u < ATT_CPT; u++) {
        int c = sub + 8 * u;
        if (c < HS) cu_acc(dq, dqdt, row + c, acc[u] * a.scale);
    }
}

/* The decode step: query i (blockIdx.x) of (sample blockIdx.z, head blockIdx.y) over cache keys
 * 0..pos0+i. KV_WARPS warps take the keys in turn (warp w: keys w, w + KV_WARPS, ...), each with
 * its own online softmax over them, a lane holding head dims lane + 32 u; the warps' partial
 * results are then merged in warp order (deterministic). */
__global__ void __launch_bounds__(KV_WARPS * 32) att_kv_kernel(void *out, int odt, const void *q, int qdt,
                                                               const void *kc, int kdt, const void *vc, int vdt,
                                                               int ldq, int n, int pos0, int cap, int NH, int NKV,
                                                               int HS, float scale)
{
    __shared__ float ms[KV_WARPS], ls[KV_WARPS], os[KV_WARPS][ATT_MAX_HS];
    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, g = h / (NH / NKV);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, ldkv = NKV * HS, L = pos0 + i + 1;
    const size_t qrow = ((size_t)b * n + i) * ldq + (size_t)h * HS;
    const size_t kvbase = (size_t)b * cap * ldkv + (size_t)g * HS;
    float qr[KV_DPL], o[KV_DPL];
#pragma unroll
    for (int u = 0; u < KV_DPL; u++) {
        int d = lane + 32 * u;
        qr[u] = d < HS ? cu_ld(q, qdt, qrow + d) : 0.0f;
        o[u] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = warp; j < L; j += KV_WARPS) {
        size_t krow = kvbase + (size_t)j * ldkv;
        float s = 0.0f;
#pragma unroll
        for (int u = 0; u < KV_DPL; u++) {
            int d = lane + 32 * u;
            if (d < HS) s += qr[u] * cu_ld(kc, kdt, krow + d);
        }
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        s *= scale;
        float mnew = fmaxf(m, s), alpha = expf(m - mnew), p = expf(s - mnew);
        l = l * alpha + p;
#pragma unroll
        for (int u = 0; u < KV_DPL; u++) {
            int d = lane + 32 * u;
            if (d < HS) o[u] = o[u] * alpha + p * cu_ld(vc, vdt, krow + d);
        }
        m = mnew;
    }
    if (lane == 0) ms[warp] = m, ls[warp] = l;
#pragma unroll
    for (int u = 0; u < KV_DPL; u++) {
        int d = lane + 32 * u;
        if (d < HS) os[warp][d] = o[u];
    }
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < KV_WARPS; w++) M = fmaxf(M, ms[w]);
    float lt = 0.0f;
    for (int w = 0; w < KV_WARPS; w++) lt += ms[w] == -INFINITY ? 0.0f : ls[w] * expf(ms[w] - M);
    const size_t orow = ((size_t)b * n + i) * NH * HS + (size_t)h * HS;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        float x = 0.0f;
        for (int w = 0; w < KV_WARPS; w++)
            if (ms[w] != -INFINITY) x += os[w][d] * expf(ms[w] - M);
        cu_st(out, odt, orow + d, x / lt);
    }
}

/* ---- the vtable entries: checks, then the launches ---- */

/* Dies naming the entry when head size HS is beyond these kernels, or a shape is inconsistent. */
static void att_check(const char *entry, int NH, int NKV, int HS, int ldq, int ldkv)
{
    TD_CHECK(HS >= 1 && HS <= ATT_MAX_HS, "use heads of at most 256 dims (--kv-channels / hidden / heads) on cuda",
             "cuda %s: head size %d is beyond the kernels' 1..%d", entry, HS, ATT_MAX_HS);
    TD_CHECK(NKV > 0 && NH % NKV == 0, "the query heads must be a multiple of the key/value heads",
             "cuda %s: %d query heads over %d key/value heads", entry, NH, NKV);
    TD_CHECK(ldq >= NH * HS && ldkv >= NKV * HS, "a row must hold every head",
             "cuda %s: row strides %d (q), %d (k, v) for %d, %d heads of %d", entry, ldq, ldkv, NH, NKV, HS);
}

/* Launch configuration: shared bytes of each kernel at head size HS, raised past the 48 KB default
 * when needed (a host-side attribute, no sync). */
static size_t att_smem(const void *kernel, size_t tiles, size_t extra, int HS)
{
    size_t bytes = (tiles * (size_t)(HS + 1) * ATT_BQ + extra) * sizeof(float);
    if (bytes > 48 * 1024)
        CU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                 "raising attention's shared memory");
    return bytes;
}

static att_args att_args_of(be_in q, be_in k, be_in v, int ldq, int ldkv, int B, int T, int NH, int NKV, int HS,
                            const int32_t *klen, const int32_t *seg, const be_drop *drop)
{
    att_args a;
    a.q = q.p, a.k = k.p, a.v = v.p;
    a.qdt = q.dt, a.kdt = k.dt, a.vdt = v.dt;
    a.ldq = ldq, a.ldkv = ldkv, a.B = B, a.T = T, a.NH = NH, a.NKV = NKV, a.HS = HS;
    a.klen = klen;
    a.seg = seg;
    a.scale = 1.0f / sqrtf((float)HS);
    a.dr = cu_drop_of(drop);
    a.Tk = T, a.Tg = T;
    a.qpos = a.kpos = NULL;
    return a;
}

/* ---- the tensor-core kernels (att_mma.cuh) ---- */

/* Whether this call runs on the tensor cores: q, k, v in bf16 — or in fp32 when the run multiplies
 * in bf16 (be_set_gemm_dtype: --bf16), as autocast runs PyTorch's attention in bf16; the tiles
 * round them as they load —, head size 64 or 128, self-attention (the block entries stay on the
 * CUDA-core kernels), even row strides and 4-byte aligned buffers (two elements a load), and
 * TRIDENT_CUDA_ATTENTION not "simt". An fp32 run (gemm dtype fp32) keeps fp32 attention. */
static bool am_use(const backend *be, const att_args &a, const void *dout)
{
    static int mode = -1; /* 1: tensor cores where they apply, 0: never */
    if (mode < 0) {
        const char *e = getenv("TRIDENT_CUDA_ATTENTION");
        mode = !(e && strcmp(e, "simt") == 0);
    }
    if (!mode || a.qpos || (a.HS != 64 && a.HS != 128)) return false;
    bool bf16 = a.qdt == BE_BF16 && a.kdt == BE_BF16 && a.vdt == BE_BF16;
    bool f32_in_bf16_run = a.qdt == BE_F32 && a.kdt == BE_F32 && a.vdt == BE_F32 && be->gemm_dtype == BE_BF16;
    if (!bf16 && !f32_in_bf16_run) return false;
    if ((a.ldq & 1) || (a.ldkv & 1)) return false;
    uintptr_t bits = (uintptr_t)a.q | (uintptr_t)a.k | (uintptr_t)a.v | (uintptr_t)dout;
    return (bits & 3) == 0;
}

/* Raises a kernel's dynamic shared memory past the 48 KB default (once a kernel; a host-side
 * attribute, no sync). */
static void am_smem_attr(const void *kernel, size_t bytes, bool *done)
{
    if (*done || bytes <= 48 * 1024) return;
    CU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
             "raising tensor-core attention's shared memory");
    *done = true;
}

template <int HSZ, bool BF>
static void am_fwd_t(const backend *be, const att_args &a, be_out out, float *lse, be_in dout, float *D)
{
    static bool attr;
    size_t sm = am_smem_fwd(HSZ);
    am_smem_attr((const void *)am_fwd_kernel<HSZ, BF>, sm, &attr);
    dim3 grid((a.T + AM_BQ - 1) / AM_BQ, a.NH, a.B);
    am_fwd_kernel<HSZ, BF><<<grid, AM_THREADS, sm, cu_stream(be)>>>(a, out.p, out.dt, lse, dout.p, dout.dt, D);
    CU_LAUNCHED("am_fwd_kernel");
}

template <int HSZ, bool BF>
static void am_bwd_t(const backend *be, const att_args &a, be_out dq, be_out dk, be_out dv, be_in dout,
                     const float *lse, const float *D)
{
    if (dk.p || dv.p) {
        static bool attr;
        size_t sm = am_smem_kv(HSZ);
        am_smem_attr((const void *)am_bwd_kv_kernel<HSZ, BF>, sm, &attr);
        dim3 grid((a.T + AM_BK - 1) / AM_BK, a.NKV, a.B);
        am_bwd_kv_kernel<HSZ, BF><<<grid, AM_THREADS, sm, cu_stream(be)>>>(a, dk.p, dk.dt, dv.p, dv.dt, dout.p,
                                                                          dout.dt, lse, D);
        CU_LAUNCHED("am_bwd_kv_kernel");
    }
    if (dq.p) {
        static bool attr;
        size_t sm = am_smem_q(HSZ);
        am_smem_attr((const void *)am_bwd_q_kernel<HSZ, BF>, sm, &attr);
        dim3 grid((a.T + AM_BQ - 1) / AM_BQ, a.NH, a.B);
        am_bwd_q_kernel<HSZ, BF><<<grid, AM_THREADS, sm, cu_stream(be)>>>(a, dq.p, dq.dt, dout.p, dout.dt, lse, D);
        CU_LAUNCHED("am_bwd_q_kernel");
    }
}

/* The forward (D NULL: out and lse; else D) on the tensor cores, for a call am_use accepts. Only
 * the bf16 instances are compiled: every kernel instance costs nvcc about 10 CPU-seconds, and the
 * fp16 ones (att_mma.cuh has them, unit/att_mma_emu holds them) would serve fp16 training only,
 * which runs the CUDA-core kernels. */
static void am_fwd(const backend *be, const att_args &a, be_out out, float *lse, be_in dout, float *D)
{
    if (a.HS == 64) am_fwd_t<64, true>(be, a, out, lse, dout, D);
    else am_fwd_t<128, true>(be, a, out, lse, dout, D);
}

static void am_bwd(const backend *be, const att_args &a, be_out dq, be_out dk, be_out dv, be_in dout,
                   const float *lse, const float *D)
{
    if (a.HS == 64) am_bwd_t<64, true>(be, a, dq, dk, dv, dout, lse, D);
    else am_bwd_t<128, true>(be, a, dq, dk, dv, dout, lse, D);
}

/* The forward kernel on every query tile; D NULL: out and lse, else D (see att_fwd_kernel). */
static void att_fwd_launch(const backend *be, const att_args &a, be_out out, float *lse, be_in dout, float *D)
{
    size_t sm = att_smem((const void *)att_fwd_kernel, 3, ATT_BQ * (ATT_BK + 1), a.HS);
    dim3 grid((a.T + ATT_BQ - 1) / ATT_BQ, a.NH, a.B);
    att_fwd_kernel<<<grid, ATT_THREADS, sm, cu_stream(be)>>>(a, out.p, out.dt, lse, dout.p, dout.dt, D);
    CU_LAUNCHED("att_fwd_kernel");
}

static void cu_attention_fwd(const backend *be, be_out out, float *lse, be_in q, be_in k, be_in v, int ldq, int ldkv,
                             int B, int T, int NH, int NKV, int HS, const int32_t *klen, const int32_t *seg,
                             const be_drop *drop)
{
    if (B <= 0 || T <= 0 || NH <= 0) return;
    att_check("attention_fwd", NH, NKV, HS, ldq, ldkv);
    TD_CHECK(!seg || !klen, "packed documents are causal", "cuda attention_fwd: both klen and seg");
    att_args a = att_args_of(q, k, v, ldq, ldkv, B, T, NH, NKV, HS, klen, seg, drop);
    be_in none = {NULL, BE_F32};
    if (am_use(be, a, NULL)) am_fwd(be, a, out, lse, none, NULL);
    else att_fwd_launch(be, a, out, lse, none, NULL);
}

/* The CUDA-core backward's two passes with D given: dK and dV per key tile (a.Tk keys), dQ per
 * query tile (a.T rows); either left out where its gradients are NULL. */
static void att_bwd_launch(const backend *be, const att_args &a, be_out dq, be_out dk, be_out dv, be_in dout,
                           const float *lse, const float *D)
{
    if (dk.p || dv.p) {
        size_t sm = att_smem((const void *)att_bwd_kv_kernel, 4, 2 * ATT_BK * (ATT_BQ + 1) + 2 * ATT_BQ, a.HS);
        dim3 grid((a.Tk + ATT_BK - 1) / ATT_BK, a.NKV, a.B);
        att_bwd_kv_kernel<<<grid, ATT_THREADS, sm, cu_stream(be)>>>(a, dk.p, dk.dt, dv.p, dv.dt, dout.p, dout.dt, lse,
                                                                    D);
        CU_LAUNCHED("att_bwd_kv_kernel");
    }
    if (dq.p) {
        size_t sm = att_smem((const void *)att_bwd_q_kernel, 4, ATT_BQ * (ATT_BK + 1), a.HS);
        dim3 grid((a.T + ATT_BQ - 1) / ATT_BQ, a.NH, a.B);
        att_bwd_q_kernel<<<grid, ATT_THREADS, sm, cu_stream(be)>>>(a, dq.p, dq.dt, dout.p, dout.dt, lse, D);
        CU_LAUNCHED("att_bwd_q_kernel");
    }
}

/* D from dout and out, a warp a row (am_delta_kernel): attention_delta, and attention_bwd's first
 * pass when it is given the forward's out. */
static void cu_attention_delta(const backend *be, float *D, be_in dout, be_in out, int B, int T, int NH, int HS)
{
    size_t n = (size_t)B * NH * T, warps = AM_THREADS / 32, blocks = (n + warps - 1) / warps;
    if (n == 0 || HS <= 0) return;
    am_delta_kernel<<<(unsigned)(blocks < (1u << 20) ? blocks : (1u << 20)), AM_THREADS, 0, cu_stream(be)>>>(
        D, dout.p, dout.dt, out.p, out.dt, T, NH, HS, n);
    CU_LAUNCHED("am_delta_kernel");
}

static void cu_attention_bwd(const backend *be, be_out dq, be_out dk, be_out dv, be_in dout, be_in out, be_in q,
                             be_in k, be_in v, const float *lse, int ldq, int ldkv, int B, int T, int NH, int NKV,
                             int HS, const int32_t *klen, const int32_t *seg, const be_drop *drop)
{
    if (B <= 0 || T <= 0 || NH <= 0 || (!dq.p && !dk.p && !dv.p)) return;
    att_check("attention_bwd", NH, NKV, HS, ldq, ldkv);
    TD_CHECK(!seg || !klen, "packed documents are causal", "cuda attention_bwd: both klen and seg");
    att_args a = att_args_of(q, k, v, ldq, ldkv, B, T, NH, NKV, HS, klen, seg, drop);
    /* D = dout . out a row: from the forward's out when the caller kept it (one pass over dout and
     * out), else from the forward run again */
    float *D = (float *)be->ops->alloc(be, (size_t)B * NH * T * sizeof(float));
    be_out none = {NULL, BE_F32};
    bool tc = am_use(be, a, dout.p);
    if (out.p) cu_attention_delta(be, D, dout, out, B, T, NH, HS);
    else if (tc) am_fwd(be, a, none, NULL, dout, D);
    else att_fwd_launch(be, a, none, NULL, dout, D);
    if (tc) {
        am_bwd(be, a, dq, dk, dv, dout, lse, D);
        be->ops->free(be, D);
        return;
    }
    att_bwd_launch(be, a, dq, dk, dv, dout, lse, D);
    be->ops->free(be, D); /* ordered after the kernels that read it */
}

/* The block entries' arguments: att_args_of's, then the block's key rows, positions and Tg. */
static att_args att_block_args(be_in q, be_in k, be_in v, int ldq, int ldkv, int B, int Tq, int Tk, int Tg,
                               const int32_t *qpos, const int32_t *kpos, int NH, int NKV, int HS,
                               const int32_t *klen, const int32_t *seg, const be_drop *drop, const char *entry)
{
    att_check(entry, NH, NKV, HS, ldq, ldkv);
    TD_CHECK(!seg || !klen, "packed documents are causal", "cuda %s: both klen and seg", entry);
    TD_CHECK(qpos && kpos && Tk >= 0 && Tq <= Tg && Tk <= Tg, "pass the global positions of the query rows and keys",
             "cuda %s: %d query rows and %d keys of a sequence of %d (positions %s)", entry, Tq, Tk, Tg,
             qpos && kpos ? "given" : "missing");
    att_args a = att_args_of(q, k, v, ldq, ldkv, B, Tq, NH, NKV, HS, klen, seg, drop);
    a.Tk = Tk, a.Tg = Tg;
    a.qpos = qpos, a.kpos = kpos;
    return a;
}

static void cu_attention_block_fwd(const backend *be, be_out out, float *lse, be_in q, be_in k, be_in v, int ldq,
                                   int ldkv, int B, int Tq, int Tk, int Tg, const int32_t *qpos, const int32_t *kpos,
                                   int NH, int NKV, int HS, const int32_t *klen, const int32_t *seg,
                                   const be_drop *drop)
{
    if (B <= 0 || Tq <= 0 || NH <= 0) return;
    att_args a = att_block_args(q, k, v, ldq, ldkv, B, Tq, Tk, Tg, qpos, kpos, NH, NKV, HS, klen, seg, drop,
                                "attention_block_fwd");
    be_in none = {NULL, BE_F32};
    att_fwd_launch(be, a, out, lse, none, NULL);
}

static void cu_attention_block_bwd(const backend *be, be_out dq, be_out dk, be_out dv, be_in dout, be_in q, be_in k,
                                   be_in v, const float *lse, const float *D, int ldq, int ldkv, int B, int Tq,
                                   int Tk, int Tg, const int32_t *qpos, const int32_t *kpos, int NH, int NKV, int HS,
                                   const int32_t *klen, const int32_t *seg, const be_drop *drop)
{
    if (B <= 0 || Tq <= 0 || Tk <= 0 || NH <= 0 || (!dq.p && !dk.p && !dv.p)) return;
    att_args a = att_block_args(q, k, v, ldq, ldkv, B, Tq, Tk, Tg, qpos, kpos, NH, NKV, HS, klen, seg, drop,
                                "attention_block_bwd");
    att_bwd_launch(be, a, dq, dk, dv, dout, lse, D);
}

/* One thread a row (b, h, t) of n = B NH T: (out, lse) merged with (op, lp), see attention_merge. */
__global__ void att_merge_kernel(void *out, int odt, float *lse, const void *op, int pdt, const float *lp, int T,
                                 int NH, int HS, size_t n)
{
    for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < n; r += (size_t)gridDim.x * blockDim.x) {
        size_t b = r / ((size_t)NH * T), h = r / T % NH, t = r % T, o = (b * T + t) * NH * HS + h * HS;
        float la = lse[r], lb = lp[r];
        if (lb == -INFINITY) continue;
        if (la == -INFINITY) {
            for (int c = 0; c < HS; c++) cu_st(out, odt, o + c, cu_ld(op, pdt, o + c));
            lse[r] = lb;
            continue;
        }
        float m = fmaxf(la, lb), l = m + log1pf(expf(-fabsf(la - lb)));
        float wa = expf(la - l), wb = expf(lb - l);
        for (int c = 0; c < HS; c++) cu_st(out, odt, o + c, wa * cu_ld(out, odt, o + c) + wb * cu_ld(op, pdt, o + c));
        lse[r] = l;
    }
}

/* Blocks for n rows at ATT_THREADS a block, at most 65536 (the kernels loop over the rest). */
static unsigned att_row_blocks(size_t n)
{
    size_t b = (n + ATT_THREADS - 1) / ATT_THREADS;
    return (unsigned)(b < 65536 ? (b ? b : 1) : 65536);
}

static void cu_attention_merge(const backend *be, be_out out, float *lse, be_in out_part, const float *lse_part, int B,
                               int T, int NH, int HS)
{
    size_t n = (size_t)B * NH * T;
    if (n == 0 || HS <= 0) return;
    att_merge_kernel<<<att_row_blocks(n), ATT_THREADS, 0, cu_stream(be)>>>(out.p, out.dt, lse, out_part.p,
                                                                          out_part.dt, lse_part, T, NH, HS, n);
    CU_LAUNCHED("att_merge_kernel");
}

static void cu_attention_kv_fwd(const backend *be, be_out out, be_in q, be_in kc, be_in vc, int ldq, int B, int n,
                                int pos0, int cap, int NH, int NKV, int HS)
{
    if (B <= 0 || n <= 0 || NH <= 0) return;
    att_check("attention_kv_fwd", NH, NKV, HS, ldq, NKV * HS);
    TD_CHECK(pos0 >= 0 && pos0 + n <= cap, "the cache must hold every position attended to",
             "cuda attention_kv_fwd: positions %d..%d in a cache of %d", pos0, pos0 + n - 1, cap);
    dim3 grid(n, NH, B);
    att_kv_kernel<<<grid, KV_WARPS * 32, 0, cu_stream(be)>>>(out.p, out.dt, q.p, q.dt, kc.p, kc.dt, vc.p, vc.dt, ldq,
                                                             n, pos0, cap, NH, NKV, HS, 1.0f / sqrtf((float)HS));
    CU_LAUNCHED("att_kv_kernel");
}

/* The attention entries here, the router's and the permutes' from moe.cu (cuda_impl.h). */
void cuda_fill_attention_moe(struct be_ops *ops)
{
    ops->attention_fwd = cu_attention_fwd;
    ops->attention_bwd = cu_attention_bwd;
    ops->attention_block_fwd = cu_attention_block_fwd;
    ops->attention_block_bwd = cu_attention_block_bwd;
    ops->attention_merge = cu_attention_merge;
    ops->attention_delta = cu_attention_delta;
    ops->attention_kv_fwd = cu_attention_kv_fwd;
    cu_fill_moe(ops);
}
