/* cuda_bf16.h of the host emulation (cuda_runtime.h says what it models): __nv_bfloat16 as its 16
 * bits; __float2bfloat16_rn rounds to nearest even as the device does (NaN stays a NaN). */
#ifndef TRIDENT_EMU_CUDA_BF16_H
#define TRIDENT_EMU_CUDA_BF16_H

#include "cuda_runtime.h"

struct __nv_bfloat16 {
    uint16_t x;
};
static inline float __bfloat162float(__nv_bfloat16 h) { return emu_h2f(h.x, true); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{emu_f2h(f, true)}; }
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
static inline uint16_t __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(uint16_t u) { return __nv_bfloat16{u}; }

#endif
