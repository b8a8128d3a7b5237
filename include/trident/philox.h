/* Philox-4x32-10 counter-based RNG (Salmon et al., SC'11). Owns every random number in
 * trident: a value is a pure function of (key, counter), so any shard or rank can generate
 * exactly its own slice of a stream without generating the rest. */
#ifndef TRIDENT_PHILOX_H
#define TRIDENT_PHILOX_H

#include <stdint.h>

typedef struct { uint32_t v[4]; } td_philox_ctr;
typedef struct { uint32_t v[2]; } td_philox_key;

/* The raw block function: 10 rounds of Philox-4x32 on (counter, key). */
td_philox_ctr td_philox4x32(td_philox_ctr ctr, td_philox_key key);

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
