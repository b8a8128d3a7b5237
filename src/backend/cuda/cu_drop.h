/* The dropout mask of be_ops.h in a form both nvcc (device code) and a C compiler (the host test
 * tests/unit/test_cuda_drop.c) compile: the Philox-4x32-10 rounds of trident/philox.h, the
 * counter layout of be_drop_counter, and how the CUDA kernels cut a row of units into Philox
 * blocks. One source for the device and the host test, so the test holds the very code the
 * kernels run to the cpu backend's be_drop_block. */
#ifndef TRIDENT_CU_DROP_H
#define TRIDENT_CU_DROP_H

#include <stdint.h>

#include "trident/philox.h" /* its constants: one definition for the cpu and the device */

#ifdef __CUDACC__
#define CU_HD static __host__ __device__ __forceinline__
#else
#define CU_HD static inline
#endif

/* A dropout as the kernels take it: the be_drop's host scalars, read at the call (cu_common.cuh's
 * cu_drop_of makes one). on = 0: none. */
typedef struct cu_drop {
    int on;
    uint32_t thr;          /* be_drop_threshold(p): a word >= thr keeps its element */
    float keep;            /* 1 / (1 - p), as the CPU rounds it */
    uint32_t k0, k1;       /* the Philox key: the seed's low and high words */
    uint32_t site;         /* drop->site */
    int pos0, unit0;
    const int64_t *sample; /* (B) device */
} cu_drop;

/* One Philox-4x32-10 block: the 4 words of counter c under key (k0, k1) (the key is the seed's
 * low and high words, td_philox_key_from_seed), written to r. */
CU_HD void cu_philox(uint32_t r[4], const uint32_t c_in[4], uint32_t k0, uint32_t k1)
{
    uint32_t c0 = c_in[0], c1 = c_in[1], c2 = c_in[2], c3 = c_in[3];
    for (int i = 0; i < 10; i++) {
        uint64_t p0 = (uint64_t)TD_PHILOX_M0 * c0, p1 = (uint64_t)TD_PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1, n3 = (uint32_t)p0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += TD_PHILOX_W0;
        k1 += TD_PHILOX_W1;
    }
    r[0] = c0, r[1] = c1, r[2] = c2, r[3] = c3;
}

/* The mask words of the Philox block holding unit `unit` of a `kind` dropout (BE_DROP_HIDDEN,
 * BE_DROP_ATTN) at (seed, site, sample, pos): be_drop_block. Word unit % 4 is that unit's. */
CU_HD void cu_drop_block(uint32_t r[4], uint64_t seed, int kind, int site, int64_t sample, int64_t pos,
                         int64_t unit)
{
    uint32_t c[4] = {(uint32_t)((uint64_t)unit >> 2), (uint32_t)pos, (uint32_t)(uint64_t)sample,
                     (((uint32_t)((uint64_t)sample >> 32)) & 0xffu) | ((uint32_t)site & 0xffffu) << 8 |
                         (uint32_t)kind << 24};
    cu_philox(r, c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* A row of n units starting at unit0 spans Philox blocks first .. first + *count - 1 (block q
 * holds units 4q .. 4q + 3); the kernels give each block to one thread, which handles the units
 * of it inside [unit0, unit0 + n). n > 0. */
CU_HD int64_t cu_drop_first_block(int64_t unit0) { return unit0 >> 2; }
CU_HD int64_t cu_drop_nblocks(int64_t unit0, int64_t n) { return ((unit0 + n - 1) >> 2) - (unit0 >> 2) + 1; }

#endif
