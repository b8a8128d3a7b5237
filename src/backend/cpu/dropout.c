/* Dropout with masks regenerated from Philox at logical coordinates (see be_ops.h): nothing
 * is stored, and any slice of a tensor (rows, channels, heads) draws exactly its own mask. */
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "cpu.h"

/* Blocks of 4 units from Philox, TD_PHILOX_BATCH blocks at a time where the row allows (the batch
 * vectorizes); a partial block at either end one at a time. */
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
    uint32_t out[4][TD_PHILOX_BATCH];
    for (; n - j >= 4 * TD_PHILOX_BATCH; j += 4 * TD_PHILOX_BATCH, u += 4 * TD_PHILOX_BATCH) {
        td_philox4x32_batch(out, be_drop_counter(kind, drop->site, sample, pos, u), key);
        for (int b = 0; b < TD_PHILOX_BATCH; b++)
            for (int w = 0; w < 4; w++) mult[j + 4 * b + w] = out[w][b] >= thr ? keep : 0.0f;
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
