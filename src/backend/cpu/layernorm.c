/* LayerNorm over the last dimension, eps 1e-5, rows in parallel. */
#include <math.h>

#include "backend/cpu/cpu.h"

#define LN_EPS 1e-5f

void cpu_layernorm_fwd(const backend *be, float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, int N, int C)
{
#pragma omp parallel for schedule(static) num_threads(be->nthreads) if ((size_t)N * C > CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= (float)C;
        float var = 0.0f;
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            var += d * d;
        }
        float s = 1.0f / sqrtf(var / (float)C + LN_EPS);
        for (int c = 0; c < C; c++) y[c] = (x[c] - m) * s * w[c] + b[c];
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = s;
    }
}

/* dinp += rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dout * w. */
static void ln_bwd_inp(const backend *be, float *dinp, const float *dout, const float *inp, const float *w,
                       const float *mean, const float *rstd, int N, int C)
{
#pragma omp parallel for schedule(static) num_threads(be->nthreads) if ((size_t)N * C > CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float m = mean[n], s = rstd[n], a = 0.0f, bsum = 0.0f;
        for (int c = 0; c < C; c++) {
            float dxh = dy[c] * w[c];
            a += dxh;
            bsum += dxh * (x[c] - m) * s;
        }
        a /= (float)C;
        bsum /= (float)C;
        for (int c = 0; c < C; c++) {
            float xh = (x[c] - m) * s;
            dx[c] += s * (dy[c] * w[c] - a - xh * bsum);
        }
    }
}

/* dw += sum_n dout * xhat, db += sum_n dout; threads own blocks of columns. */
static void ln_bwd_params(const backend *be, float *dw, float *db, const float *dout, const float *inp,
                          const float *mean, const float *rstd, int N, int C)
{
    int nblk = (C + CPU_LINE - 1) / CPU_LINE;
#pragma omp parallel for schedule(static) num_threads(be->nthreads) if ((size_t)N * C > CPU_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * CPU_LINE, wd = C - c0 < CPU_LINE ? C - c0 : CPU_LINE;
        float aw[CPU_LINE] = {0}, ab[CPU_LINE] = {0};
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C + c0, *dy = dout + (size_t)n * C + c0;
            float m = mean[n], s = rstd[n];
            for (int j = 0; j < wd; j++) {
                aw[j] += dy[j] * (x[j] - m) * s;
                ab[j] += dy[j];
            }
        }
        for (int j = 0; j < wd; j++) {
            if (dw) dw[c0 + j] += aw[j];
            if (db) db[c0 + j] += ab[j];
        }
    }
}

void cpu_layernorm_bwd(const backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, const float *mean, const float *rstd, int N, int C)
{
    if (dinp) ln_bwd_inp(be, dinp, dout, inp, w, mean, rstd, N, C);
    if (dw || db) ln_bwd_params(be, dw, db, dout, inp, mean, rstd, N, C);
}
