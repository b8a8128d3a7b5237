/* Philox-4x32-10: see include/core/trident/philox.h (the block function is inline there). */
#include "trident/philox.h"

#include <string.h>

td_philox_ctr td_philox4x32(td_philox_ctr c, td_philox_key k) { return td_philox4x32_inline(c, k); }

td_philox_key td_philox_key_from_seed(uint64_t seed)
{
    td_philox_key k = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
    return k;
}

td_philox_ctr td_philox_at(td_philox_key key, uint64_t stream, uint64_t index)
{
    td_philox_ctr c = {{(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)}};
    return td_philox4x32(c, key);
}

float td_philox_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    td_philox_ctr r = td_philox_at(td_philox_key_from_seed(seed), stream, index);
    return td_u32_to_unit_float(r.v[0]);
}

/* The standard normal of a block: Box-Muller on two of its words, in float with plain operations
 * only — no libm, and no FMA contraction (this file is compiled with -ffp-contract=off) — so that
 * every build and machine gives the same bits, and a batch of 16 vectorizes. u1 = 1 - k 2^-24 in
 * (0, 1] and u2 = k' 2^-24 in [0, 1), 24 random bits each: the tails reach 5.8 standard deviations.
 * ln(u1): u1 = m 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh((m - 1)/(m + 1)) to the s^9
 * term (|s| <= 0.172: the next one is below 3e-9). cos(2 pi u2): folded by symmetry onto
 * x = 2 pi b, b in [0, 1/4], then Taylor to x^12 (the next term is below 7e-9 at pi/2). */
static inline float ln_unit(float u)
{
    uint32_t b;
    memcpy(&b, &u, sizeof b);
    int e = (int)((b >> 23) & 0xffu) - 127;
    uint32_t mb = (b & 0x7fffffu) | 0x3f800000u; /* m in [1, 2) */
    float m;
    memcpy(&m, &mb, sizeof m);
    int big = m > 1.41421356f;
    m = big ? m * 0.5f : m;
    e += big;
    float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
    float p = s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9))));
    return (float)e * 0.693147180559945f + 2.0f * (s + s * p);
}

static inline float cos_2pi(float u)
{
    float a = u > 0.5f ? 1.0f - u : u; /* cos 2 pi u = cos 2 pi (1 - u): a in [0, 1/2], exact */
    int flip = a > 0.25f;
    float b = flip ? 0.5f - a : a;     /* cos 2 pi a = -cos 2 pi (1/2 - a): b in [0, 1/4], exact */
    float x = 6.28318530717958647f * b, x2 = x * x;
    float c = 1.0f + x2 * (-1.0f / 2 + x2 * (1.0f / 24 + x2 * (-1.0f / 720 + x2 * (1.0f / 40320 +
              x2 * (-1.0f / 3628800 + x2 * (1.0f / 479001600))))));
    return flip ? -c : c;
}

static inline float normal_from_words(uint32_t w0, uint32_t w1)
{
    float u1 = 1.0f - (float)(int32_t)(w0 >> 8) * (1.0f / 16777216.0f), u2 = (float)(int32_t)(w1 >> 8) * (1.0f / 16777216.0f);
    return __builtin_sqrtf(-2.0f * ln_unit(u1)) * cos_2pi(u2);
}

float td_philox_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
    td_philox_ctr r = td_philox_at(td_philox_key_from_seed(seed), stream, index);
    return normal_from_words(r.v[0], r.v[1]);
}

/* TD_PHILOX_BATCH draws from index idx on, vectorized (the file is compiled with
 * -fno-trapping-math so that the selects above if-convert) and cloned for AVX-512 and AVX2: every
 * operation is one correctly rounded IEEE operation, so each clone gives the same bits. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void fill_block(float *out, uint64_t idx, uint64_t stream, td_philox_key key, float mean, float std)
{
    uint32_t w[4][TD_PHILOX_BATCH];
    td_philox_ctr c = {{(uint32_t)idx, (uint32_t)(idx >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)}};
    td_philox4x32_batch(w, c, key);
    for (int i = 0; i < TD_PHILOX_BATCH; i++) out[i] = mean + std * normal_from_words(w[0][i], w[1][i]);
}

/* Block blk (TD_PHILOX_BATCH draws) of td_philox_fill_normal's n. */
static inline void fill_block_at(float *out, uint64_t n, uint64_t first, uint64_t stream, td_philox_key key,
                                 float mean, float std, uint64_t blk)
{
    uint64_t i0 = blk * TD_PHILOX_BATCH, idx = first + i0;
    if (n - i0 >= TD_PHILOX_BATCH && (uint32_t)idx <= UINT32_MAX - (TD_PHILOX_BATCH - 1)) {
        fill_block(out + i0, idx, stream, key, mean, std);
    } else {
        for (uint64_t i = i0; i < n && i < i0 + TD_PHILOX_BATCH; i++) {
            td_philox_ctr r = td_philox_at(key, stream, first + i);
            out[i] = mean + std * normal_from_words(r.v[0], r.v[1]);
        }
    }
}

/* Blocks of TD_PHILOX_BATCH consecutive indices at once where their counters' first word does
 * not wrap (td_philox4x32_batch), one at a time elsewhere: the same values either way. */
void td_philox_fill_normal(float *out, uint64_t n, uint64_t seed, uint64_t stream, uint64_t first,
                           float mean, float std)
{
    td_philox_key key = td_philox_key_from_seed(seed);
    uint64_t nb = (n + TD_PHILOX_BATCH - 1) / TD_PHILOX_BATCH;
    /* A parallel region costs a system call (libgomp's barrier wakes its futex) even on one thread
     * or under a false if(): a small fill (a tensor's row) stays out of one. */
    if (n <= 65536) {
        for (uint64_t blk = 0; blk < nb; blk++) fill_block_at(out, n, first, stream, key, mean, std, blk);
        return;
    }
#pragma omp parallel for schedule(static)
    for (uint64_t blk = 0; blk < nb; blk++) fill_block_at(out, n, first, stream, key, mean, std, blk);
}

uint64_t td_philox_below(uint64_t seed, uint64_t stream, uint64_t index, uint64_t bound)
{
    td_philox_ctr r = td_philox_at(td_philox_key_from_seed(seed), stream, index);
    uint64_t x = ((uint64_t)r.v[0] << 32) | r.v[1];
    /* Multiply-shift (Lemire) on 64 bits via 128-bit product. */
    return (uint64_t)(((unsigned __int128)x * bound) >> 64);
}
