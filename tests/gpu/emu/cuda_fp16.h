/* cuda_fp16.h of the host emulation (cuda_runtime.h says what it models): __half as its 16 bits,
 * the conversions round to nearest even as the device's __float2half_rn (overflow to +-Inf, NaN a
 * NaN), written from IEEE 754's binary16 alone (tests/gpu/cuemu.h, emu_f2h). */
#ifndef TRIDENT_EMU_CUDA_FP16_H
#define TRIDENT_EMU_CUDA_FP16_H

#include "cuda_runtime.h"

struct __half {
    uint16_t x;
};
static inline float __half2float(__half h) { return emu_h2f(h.x, false); }
static inline __half __float2half_rn(float f) { return __half{emu_f2h(f, false)}; }
static inline __half __float2half(float f) { return __float2half_rn(f); }
static inline uint16_t __half_as_ushort(__half h) { return h.x; }
static inline __half __ushort_as_half(uint16_t u) { return __half{u}; }

#endif
