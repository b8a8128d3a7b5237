/* Philox-4x32-10: see include/core/trident/philox.h (the block function is inline there). */
#include "trident/philox.h"

#include <math.h>

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

static float normal_from_block(td_philox_ctr r)
{
    /* Box-Muller in double: u1 in (0,1], u2 in [0,1). */
    double u1 = 1.0 - td_u32x2_to_unit_double(r.v[0], r.v[1]);
    double u2 = td_u32x2_to_unit_double(r.v[2], r.v[3]);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

float td_philox_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
    return normal_from_block(td_philox_at(td_philox_key_from_seed(seed), stream, index));
}

void td_philox_fill_normal(float *out, uint64_t n, uint64_t seed, uint64_t stream, uint64_t first,
                           float mean, float std)
{
    td_philox_key key = td_philox_key_from_seed(seed);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (uint64_t i = 0; i < n; i++)
        out[i] = mean + std * normal_from_block(td_philox_at(key, stream, first + i));
}

uint64_t td_philox_below(uint64_t seed, uint64_t stream, uint64_t index, uint64_t bound)
{
    td_philox_ctr r = td_philox_at(td_philox_key_from_seed(seed), stream, index);
    uint64_t x = ((uint64_t)r.v[0] << 32) | r.v[1];
    /* Multiply-shift (Lemire) on 64 bits via 128-bit product. */
    return (uint64_t)(((unsigned __int128)x * bound) >> 64);
}
