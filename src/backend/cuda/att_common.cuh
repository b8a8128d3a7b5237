/* Private to src/backend/cuda's attention: what its kernels (attention.cu's CUDA-core ones and
 * att_mma.cuh's tensor-core ones) share — the call's shape and inputs (att_args), which keys a
 * query reads under each mask, and the attention dropout's multiplier. Compiled by nvcc as device
 * code, and by a host C++ compiler under ATT_EMU (tests/gpu/cuemu.h included first), where
 * tests/gpu/test_att_mma_emu.cpp runs the tensor-core kernels on host threads. */
#ifndef TRIDENT_ATT_COMMON_CUH
#define TRIDENT_ATT_COMMON_CUH

#include <stdint.h>

#include "cu_drop.h"

extern "C" {
#include "../be_ops.h"
}

#ifdef ATT_EMU
#define ATT_DEV static inline
#else
#define ATT_DEV static __device__ __forceinline__
#endif

/* The shape and inputs of one attention call, as the kernels take them. */
typedef struct att_args {
    const void *q, *k, *v;
    int qdt, kdt, vdt;
    int ldq, ldkv, B, T, NH, NKV, HS; /* T: query rows a sample */
    const int32_t *klen; /* (B) device, or NULL: causal */
    const int32_t *seg;  /* (B, T) device: each query's document start, or NULL: one document */
    float scale;         /* 1 / sqrt(HS) */
    cu_drop dr;
    /* The block entries (attention_block_*): key rows Tk a sample, dropout's sequence length Tg,
     * the global positions of the query rows and keys (device, strictly increasing); qpos NULL:
     * self-attention, Tk = Tg = T. */
    int Tk, Tg;
    const int32_t *qpos, *kpos;
} att_args;

/* Block mode: the keys at positions <= x (the first index past them; keys increasing). */
ATT_DEV int att_upper(const att_args &a, int x)
{
    int lo = 0, hi = a.Tk;
    while (lo < hi) {
        int m = (lo + hi) >> 1;
        if (a.kpos[m] <= x) lo = m + 1;
        else hi = m;
    }
    return lo;
}

/* Block mode: the first query row at a position >= x (query positions increasing). */
ATT_DEV int att_qfirst(const att_args &a, int x)
{
    int lo = 0, hi = a.T;
    while (lo < hi) {
        int m = (lo + hi) >> 1;
        if (a.qpos[m] < x) lo = m + 1;
        else hi = m;
    }
    return lo;
}

/* klen[b] clamped to [1, n]. */
ATT_DEV int att_klen(const att_args &a, int b, int n)
{
    int k = a.klen[b];
    return k < 1 ? 1 : k > n ? n : k;
}

/* Keys query t of sample b reads: [0, t] causal, [0, klen) padded (klen clamped to [1, T]).
 * Block mode: the end of its keys in the key block (positions <= the query's, or < klen). */
ATT_DEV int att_keys(const att_args &a, int b, int t)
{
    if (a.qpos) return att_upper(a, a.klen ? att_klen(a, b, a.Tg) - 1 : a.qpos[t]);
    if (!a.klen) return t + 1;
    int n = a.klen[b];
    return n < 1 ? 1 : n > a.T ? a.T : n;
}

/* Query t's document start (clamped to [0, its position]). */
ATT_DEV int att_seg(const att_args &a, int b, int t)
{
    int s = a.seg[(size_t)b * a.T + t], p = a.qpos ? a.qpos[t] : t;
    return s < 0 ? 0 : s > p ? p : s;
}

/* First key query t of sample b reads: its document's start (0 without segments); block mode:
 * the first key of the block at or after it (at most att_keys). */
ATT_DEV int att_key0(const att_args &a, int b, int t)
{
    if (!a.seg) return 0;
    if (a.qpos) return min(att_upper(a, att_seg(a, b, t) - 1), att_keys(a, b, t));
    return att_seg(a, b, t);
}

/* Does query t of sample b read key j (j < Tk)? Block mode by the positions themselves. */
ATT_DEV bool att_reads(const att_args &a, int b, int t, int j)
{
    if (!a.qpos) return j < att_keys(a, b, t) && j >= att_key0(a, b, t);
    int kp = a.kpos[j];
    if (a.klen) return kp < att_klen(a, b, a.Tg);
    return kp <= a.qpos[t] && (!a.seg || kp >= att_seg(a, b, t));
}
/* The first key tile (of bk keys) a query tile starting at q0 reads (its first row's document start). */
ATT_DEV int att_tile0(const att_args &a, int b, int q0, int bk)
{
    return a.seg ? att_key0(a, b, q0) / bk * bk : 0;
}
/* The end of the keys a query tile of bq rows starting at q0 reads (its last row's: ends are
 * non-decreasing). */
ATT_DEV int att_kend(const att_args &a, int b, int q0, int bq)
{
    if (a.qpos) return att_keys(a, b, min(q0 + bq, a.T) - 1);
    return a.klen ? att_keys(a, b, 0) : min(q0 + bq, a.T);
}


/* Dropout multiplier of one (query t, key j) of (sample b, head h): 0 or 1/(1-p); block mode: at
 * the query's and the key's global positions. */
ATT_DEV float att_mult1(const att_args &a, int b, int h, int t, int j)
{
    if (!a.dr.on) return 1.0f;
    int64_t unit = ((int64_t)a.dr.unit0 + h) * a.Tg + (a.qpos ? a.kpos[j] : j);
    uint32_t r[4];
    cu_drop_block(r, (uint64_t)a.dr.k0 | (uint64_t)a.dr.k1 << 32, BE_DROP_ATTN, (int)a.dr.site, a.dr.sample[b],
                  (int64_t)a.dr.pos0 + (a.qpos ? a.qpos[t] : t), unit);
    /* word unit % 4 by selects, not an index: an indexed array would live in local memory */
    uint32_t w = unit & 2 ? (unit & 1 ? r[3] : r[2]) : (unit & 1 ? r[1] : r[0]);
    return w >= a.dr.thr ? a.dr.keep : 0.0f;
}

#endif
