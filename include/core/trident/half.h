/* The 16-bit float formats, element by element: bf16 (the top half of an IEEE float) and IEEE
 * binary16 (fp16). Narrowing rounds to nearest even, keeps NaN a NaN and sends fp16 overflow to
 * +-Inf; widening is exact. Shared by the CPU kernels (vectorizable loops) and the file formats. */
#ifndef TRIDENT_HALF_H
#define TRIDENT_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint16_t td_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* a quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline float td_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* fp16 through GCC's _Float16 (F16C instructions where the target has them). */
static inline uint16_t td_f32_to_f16(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}
static inline float td_f16_to_f32(uint16_t u)
{
    _Float16 h;
    memcpy(&h, &u, 2);
    return (float)h;
}

#endif
