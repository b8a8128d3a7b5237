/* Dropout with masks regenerated from Philox at logical coordinates (see backend.h): nothing
 * is stored, and any slice of a tensor (rows, channels, heads) draws exactly its own mask. */
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "backend/cpu/cpu.h"

void cpu_drop_mults(float *mult, int n, const be_drop *drop, int kind, int64_t sample, int64_t pos, int64_t unit0)
{
    uint32_t thr = be_drop_threshold(drop->p);
    float keep = 1.0f / (1.0f - drop->p);
    int64_t u = unit0;
    int j = 0;
    while (j < n) {
        td_philox_ctr r = be_drop_block(drop->seed, kind, drop->site, sample, pos, u);
        for (int w = (int)(u & 3); w < 4 && j < n; w++, j++, u++) mult[j] = r.v[w] >= thr ? keep : 0.0f;
    }
}

/* out (B, T, C) = resid + (inp + b) * mask / (1 - p), resid and b optional; rows in parallel,
 * each with its multipliers in a per-thread buffer. Elementwise, so out may alias resid or inp. */
static void drop_rows(const backend *be, float *out, const float *resid, const float *inp, const float *b, int B,
                      int T, int C, const be_drop *drop)
{
    int rows = B * T;
#pragma omp parallel num_threads(be->nthreads) if ((size_t)rows * C > CPU_PAR_MIN)
    {
        float *mult = td_xmalloc((size_t)C * sizeof(float));
#pragma omp for schedule(static)
        for (int row = 0; row < rows; row++) {
            int bi = row / T, t = row % T;
            cpu_drop_mults(mult, C, drop, BE_DROP_HIDDEN, drop->sample[bi], (int64_t)drop->pos0 + t, drop->unit0);
            size_t off = (size_t)row * C;
            for (int c = 0; c < C; c++) {
                float x = inp[off + c] + (b ? b[c] : 0.0f);
                out[off + c] = (resid ? resid[off + c] : 0.0f) + x * mult[c];
            }
        }
        free(mult);
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
#pragma omp parallel for schedule(static) num_threads(be->nthreads) if (rows * C > CPU_PAR_MIN)
    for (size_t row = 0; row < rows; row++) {
        size_t off = row * C;
        for (int c = 0; c < C; c++) out[off + c] = resid[off + c] + (inp[off + c] + (b ? b[c] : 0.0f));
    }
}
