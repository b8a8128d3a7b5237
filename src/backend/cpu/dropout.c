/* Dropout with masks regenerated from Philox at logical coordinates (see be_ops.h): nothing
 * is stored, and any slice of a tensor (rows, channels, heads) draws exactly its own mask. */
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "cpu.h"

#if defined(__AVX2__)
#include <immintrin.h>

/* The high and low 32 bits of m x c in each 32-bit lane (vpmuludq multiplies the even lanes; the
 * odd ones are shifted down and multiplied apart). */
static inline void mul_hilo8(__m256i c, __m256i m, __m256i *hi, __m256i *lo)
{
    __m256i pe = _mm256_mul_epu32(c, m), po = _mm256_mul_epu32(_mm256_srli_epi64(c, 32), m);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
    *lo = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xAA);
}

/* Multipliers of 16 consecutive Philox blocks (64 units) from counter ctr, as td_philox4x32_batch
 * and the scalar loop give them: two interleaved groups of 8 blocks in AVX2 registers, the words
 * of block i at mult[4 i .. 4 i + 3]. Integer arithmetic only: the same bits on every build. */
static void drop_mults64(float *mult, td_philox_ctr ctr, td_philox_key key, uint32_t thr, float keep)
{
    const __m256i m0 = _mm256_set1_epi32((int)TD_PHILOX_M0), m1 = _mm256_set1_epi32((int)TD_PHILOX_M1);
    __m256i a0 = _mm256_add_epi32(_mm256_set1_epi32((int)ctr.v[0]), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i b0 = _mm256_add_epi32(a0, _mm256_set1_epi32(8));
    __m256i a1 = _mm256_set1_epi32((int)ctr.v[1]), a2 = _mm256_set1_epi32((int)ctr.v[2]), a3 = _mm256_set1_epi32((int)ctr.v[3]);
    __m256i b1 = a1, b2 = a2, b3 = a3;
    uint32_t k0 = key.v[0], k1 = key.v[1];
    for (int r = 0; r < 10; r++) {
        __m256i K0 = _mm256_set1_epi32((int)k0), K1 = _mm256_set1_epi32((int)k1), h0, l0, h1, l1, g0, n0, g1, n1;
        mul_hilo8(a0, m0, &h0, &l0);
        mul_hilo8(a2, m1, &h1, &l1);
        mul_hilo8(b0, m0, &g0, &n0);
        mul_hilo8(b2, m1, &g1, &n1);
        a0 = _mm256_xor_si256(_mm256_xor_si256(h1, a1), K0);
        a2 = _mm256_xor_si256(_mm256_xor_si256(h0, a3), K1);
        a1 = l1;
        a3 = l0;
        b0 = _mm256_xor_si256(_mm256_xor_si256(g1, b1), K0);
        b2 = _mm256_xor_si256(_mm256_xor_si256(g0, b3), K1);
        b1 = n1;
        b3 = n0;
        k0 += TD_PHILOX_W0;
        k1 += TD_PHILOX_W1;
    }
    /* word >= thr, unsigned: max(word, thr) == word */
    const __m256i T = _mm256_set1_epi32((int)thr);
    const __m256 K = _mm256_set1_ps(keep);
    __m256i w[2][4] = {{a0, a1, a2, a3}, {b0, b1, b2, b3}};
    for (int g = 0; g < 2; g++) {
        __m256 m[4];
        for (int q = 0; q < 4; q++)
            m[q] = _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_max_epu32(w[g][q], T), w[g][q])), K);
        /* (word, block) -> (block, word): a 4 x 8 transpose, blocks 0-3 in the low halves */
        __m256 t0 = _mm256_unpacklo_ps(m[0], m[1]), t1 = _mm256_unpackhi_ps(m[0], m[1]);
        __m256 t2 = _mm256_unpacklo_ps(m[2], m[3]), t3 = _mm256_unpackhi_ps(m[2], m[3]);
        __m256 u0 = _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(t0), _mm256_castps_pd(t2)));
        __m256 u1 = _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(t0), _mm256_castps_pd(t2)));
        __m256 u2 = _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(t1), _mm256_castps_pd(t3)));
        __m256 u3 = _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(t1), _mm256_castps_pd(t3)));
        float *o = mult + 32 * g; /* u0: blocks 0 | 4, u1: 1 | 5, u2: 2 | 6, u3: 3 | 7 */
        _mm256_storeu_ps(o + 0, _mm256_permute2f128_ps(u0, u1, 0x20));
        _mm256_storeu_ps(o + 8, _mm256_permute2f128_ps(u2, u3, 0x20));
        _mm256_storeu_ps(o + 16, _mm256_permute2f128_ps(u0, u1, 0x31));
        _mm256_storeu_ps(o + 24, _mm256_permute2f128_ps(u2, u3, 0x31));
    }
}
#else
/* Multipliers of 16 consecutive Philox blocks (64 units) from counter ctr (the portable build:
 * td_philox4x32_batch, which the compiler vectorizes as it can). */
static void drop_mults64(float *mult, td_philox_ctr ctr, td_philox_key key, uint32_t thr, float keep)
{
    uint32_t out[4][TD_PHILOX_BATCH];
    td_philox4x32_batch(out, ctr, key);
    for (int b = 0; b < TD_PHILOX_BATCH; b++)
        for (int w = 0; w < 4; w++) mult[4 * b + w] = out[w][b] >= thr ? keep : 0.0f;
}
#endif

/* Blocks of 4 units from Philox, 16 blocks at a time where the row allows (drop_mults64, a tail
 * of 16 units or more too); a partial block at the start, and a tail under 16, one at a time. */
void cpu_drop_mults(float *mult, int n, const be_drop *drop, int kind, int64_t sample, int64_t pos, int64_t unit0)
{
    uint32_t thr = be_drop_threshold(drop->p);
    float keep = 1.0f / (1.0f - drop->p);
    td_philox_key key = td_philox_key_from_seed(drop->seed);
    int64_t u = unit0;
    int j = 0;
    if (u & 3) {
        td_philox_ctr r = td_philox4x32_inline(be_drop_counter(kind, drop->site, sample, pos, u), key);
        for (int w = (int)(u & 3); w < 4 && j < n; w++, j++, u++) mult[j] = r.v[w] >= thr ? keep : 0.0f;
    }
    for (; n - j >= 64; j += 64, u += 64) drop_mults64(mult + j, be_drop_counter(kind, drop->site, sample, pos, u), key, thr, keep);
    if (n - j >= 16) { /* a shorter tail: the 16 blocks' first n - j units (the rest are not drawn) */
        float tail[64];
        drop_mults64(tail, be_drop_counter(kind, drop->site, sample, pos, u), key, thr, keep);
        memcpy(mult + j, tail, (size_t)(n - j) * sizeof *mult);
        return;
    }
    while (j < n) {
        td_philox_ctr r = td_philox4x32_inline(be_drop_counter(kind, drop->site, sample, pos, u), key);
        for (int w = 0; w < 4 && j < n; w++, j++, u++) mult[j] = r.v[w] >= thr ? keep : 0.0f;
    }
}

/* out (B, T, C) = resid + (inp + b) * mask / (1 - p), resid and b optional; rows in parallel,
 * each with its multipliers in a per-thread buffer. Elementwise, so out may alias resid or inp. */
static void drop_rows(const backend *be, float *out, const float *resid, const float *inp, const float *b, int B,
                      int T, int C, const be_drop *drop)
{
    int rows = B * T;
#pragma omp parallel num_threads(cpu_threads(be)) if ((size_t)rows * C > CPU_PAR_MIN_EXP)
    {
        float *mult = cpu_scratch(3, (size_t)C * sizeof(float));
#pragma omp for schedule(static)
        for (int row = 0; row < rows; row++) {
            int bi = row / T, t = row % T;
            cpu_drop_mults(mult, C, drop, BE_DROP_HIDDEN, drop->sample[bi], be_drop_pos(drop, t), drop->unit0);
            size_t off = (size_t)row * C;
            const float *x = inp + off;
            float *y = out + off;
            if (resid && b) {
                const float *r = resid + off;
#pragma omp simd
                for (int c = 0; c < C; c++) y[c] = r[c] + (x[c] + b[c]) * mult[c];
            } else if (resid) {
                const float *r = resid + off;
#pragma omp simd
                for (int c = 0; c < C; c++) y[c] = r[c] + x[c] * mult[c];
            } else if (b) {
#pragma omp simd
                for (int c = 0; c < C; c++) y[c] = (x[c] + b[c]) * mult[c];
            } else {
#pragma omp simd
                for (int c = 0; c < C; c++) y[c] = x[c] * mult[c];
            }
        }
    }
}

void cpu_dropout_fwd(const backend *be, float *out, const float *inp, int B, int T, int C, const be_drop *drop)
{
    if (!cpu_dropping(drop)) {
        if (out != inp) memcpy(out, inp, (size_t)B * T * C * sizeof(float));
        return;
    }
    drop_rows(be, out, NULL, inp, NULL, B, T, C, drop);
}

void cpu_dropout_bwd(const backend *be, float *dinp, const float *dout, int B, int T, int C, const be_drop *drop)
{
    cpu_dropout_fwd(be, dinp, dout, B, T, C, drop); /* the same mask and scale, written */
}

void cpu_bias_dropout_add_fwd(const backend *be, float *out, const float *resid, const float *inp, const float *b,
                              int B, int T, int C, const be_drop *drop)
{
    if (cpu_dropping(drop)) {
        drop_rows(be, out, resid, inp, b, B, T, C, drop);
        return;
    }
    size_t rows = (size_t)B * T;
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if (rows * C > CPU_PAR_MIN)
    for (size_t row = 0; row < rows; row++) {
        const float *r = resid + row * C, *x = inp + row * C;
        float *y = out + row * C;
        if (b) {
#pragma omp simd
            for (int c = 0; c < C; c++) y[c] = r[c] + (x[c] + b[c]);
        } else {
#pragma omp simd
            for (int c = 0; c < C; c++) y[c] = r[c] + x[c];
        }
    }
}
