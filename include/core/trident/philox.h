/* Philox-4x32-10 counter-based RNG (Salmon et al., SC'11). Owns every random number in
 * trident: a value is a pure function of (key, counter), so any shard or rank can generate
 * exactly its own slice of a stream without generating the rest. */
#ifndef TRIDENT_PHILOX_H
#define TRIDENT_PHILOX_H

#include <stdint.h>

typedef struct { uint32_t v[4]; } td_philox_ctr;
typedef struct { uint32_t v[2]; } td_philox_key;

/* Constants from Salmon et al. (2011): round multipliers and Weyl key increments. */
#define TD_PHILOX_M0 0xD2511F53u
#define TD_PHILOX_M1 0xCD9E8D57u
#define TD_PHILOX_W0 0x9E3779B9u
#define TD_PHILOX_W1 0xBB67AE85u

/* The raw block function: 10 rounds of Philox-4x32 on (counter, key). Inline, for hot loops. */
static inline td_philox_ctr td_philox4x32_inline(td_philox_ctr c, td_philox_key k)
{
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)TD_PHILOX_M0 * c.v[0], p1 = (uint64_t)TD_PHILOX_M1 * c.v[2];
        td_philox_ctr n = {{(uint32_t)(p1 >> 32) ^ c.v[1] ^ k.v[0], (uint32_t)p1, (uint32_t)(p0 >> 32) ^ c.v[3] ^ k.v[1],
                            (uint32_t)p0}};
        c = n;
        k.v[0] += TD_PHILOX_W0;
        k.v[1] += TD_PHILOX_W1;
    }
    return c;
}
/* The same, out of line. */
td_philox_ctr td_philox4x32(td_philox_ctr ctr, td_philox_key key);

/* TD_PHILOX_BATCH consecutive blocks at once, written so that compilers vectorize across them:
 * block i has the counter ctr with its first word + i (mod 2^32); out[w][i] = word w of block i,
 * each exactly td_philox4x32 of that counter. */
#define TD_PHILOX_BATCH 16
static inline void td_philox4x32_batch(uint32_t out[4][TD_PHILOX_BATCH], td_philox_ctr ctr, td_philox_key key)
{
    uint32_t c0[TD_PHILOX_BATCH], c1[TD_PHILOX_BATCH], c2[TD_PHILOX_BATCH], c3[TD_PHILOX_BATCH];
    for (int i = 0; i < TD_PHILOX_BATCH; i++) {
        c0[i] = ctr.v[0] + (uint32_t)i;
        c1[i] = ctr.v[1];
        c2[i] = ctr.v[2];
        c3[i] = ctr.v[3];
    }
    uint32_t k0 = key.v[0], k1 = key.v[1];
    for (int r = 0; r < 10; r++) {
        for (int i = 0; i < TD_PHILOX_BATCH; i++) {
            uint32_t a = c0[i], b = c1[i], c = c2[i], d = c3[i];
            uint64_t p0 = (uint64_t)TD_PHILOX_M0 * a, p1 = (uint64_t)TD_PHILOX_M1 * c;
            c0[i] = (uint32_t)(p1 >> 32) ^ b ^ k0;
            c1[i] = (uint32_t)p1;
            c2[i] = (uint32_t)(p0 >> 32) ^ d ^ k1;
            c3[i] = (uint32_t)p0;
        }
        k0 += TD_PHILOX_W0;
        k1 += TD_PHILOX_W1;
    }
    for (int i = 0; i < TD_PHILOX_BATCH; i++) {
        out[0][i] = c0[i];
        out[1][i] = c1[i];
        out[2][i] = c2[i];
        out[3][i] = c3[i];
    }
}

/* Key from a 64-bit seed and a 64-bit stream id (e.g. a tensor id or a purpose tag):
 * counter words 2,3 carry the stream, key is the seed. */
td_philox_key td_philox_key_from_seed(uint64_t seed);

/* Four uniform 32-bit words for element block `index` of `stream` under `key`. */
td_philox_ctr td_philox_at(td_philox_key key, uint64_t stream, uint64_t index);

/* Uniform float in [0, 1) from a 32-bit word (24 random bits). */
static inline float td_u32_to_unit_float(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }
/* Uniform double in [0, 1) from two 32-bit words (53 random bits). */
static inline double td_u32x2_to_unit_double(uint32_t hi, uint32_t lo)
{
    uint64_t b = ((uint64_t)(hi >> 5) << 26) | (lo >> 6);
    return (double)b * (1.0 / 9007199254740992.0);
}

/* Element `index` of the uniform [0,1) stream (seed, stream). */
float td_philox_uniform(uint64_t seed, uint64_t stream, uint64_t index);
/* Element `index` of the standard normal stream (seed, stream), by Box-Muller on one block. */
float td_philox_normal(uint64_t seed, uint64_t stream, uint64_t index);
/* out[i] = mean + std * normal(seed, stream, first + i) for i < n: a slice of a logical tensor. */
void td_philox_fill_normal(float *out, uint64_t n, uint64_t seed, uint64_t stream, uint64_t first,
                           float mean, float std);
/* Uniform integer in [0, bound) for element `index` of (seed, stream); unbiased for bound < 2^32
 * to within 2^-32 (uses 64 random bits). */
uint64_t td_philox_below(uint64_t seed, uint64_t stream, uint64_t index, uint64_t bound);

#endif
