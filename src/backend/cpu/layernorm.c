/* LayerNorm over the last dimension. Forward: rows in parallel. Backward: one parallel
 * region, the input gradient by rows and the parameter gradients by column ranges (rows summed in
 * order, so they do not depend on the thread count). */
#include <math.h>
#include <omp.h>

#include "cpu.h"

void cpu_layernorm_fwd(const backend *be, float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, int N, int C, float eps)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)N * C > CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float m = 0.0f;
#pragma omp simd reduction(+ : m)
        for (int c = 0; c < C; c++) m += x[c];
        m /= (float)C;
        float var = 0.0f;
#pragma omp simd reduction(+ : var)
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            var += d * d;
        }
        float s = 1.0f / sqrtf(var / (float)C + eps);
#pragma omp simd
        for (int c = 0; c < C; c++) y[c] = (x[c] - m) * s * w[c] + b[c];
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = s;
    }
}

/* dinp row n += rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dout * w. */
static void ln_bwd_row(float *dx, const float *dy, const float *x, const float *w, float m, float s, int C)
{
    float a = 0.0f, bsum = 0.0f;
#pragma omp simd reduction(+ : a, bsum)
    for (int c = 0; c < C; c++) {
        float dxh = dy[c] * w[c];
        a += dxh;
        bsum += dxh * (x[c] - m) * s;
    }
    a /= (float)C;
    bsum /= (float)C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
        float xh = (x[c] - m) * s;
        dx[c] += s * (dy[c] * w[c] - a - xh * bsum);
    }
}

/* dw += sum_n dout * xhat, db += sum_n dout over columns [c0, c1). */
static void ln_bwd_cols(float *dw, float *db, const float *dout, const float *inp, const float *mean,
                        const float *rstd, int N, int C, int c0, int c1)
{
    for (int p0 = c0; p0 < c1; p0 += CPU_COLS) {
        int wd = c1 - p0 < CPU_COLS ? c1 - p0 : CPU_COLS;
        float aw[CPU_COLS] = {0}, ab[CPU_COLS] = {0};
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C + p0, *dy = dout + (size_t)n * C + p0;
            float m = mean[n], s = rstd[n];
#pragma omp simd
            for (int j = 0; j < wd; j++) {
                aw[j] += dy[j] * (x[j] - m) * s;
                ab[j] += dy[j];
            }
        }
        for (int j = 0; j < wd; j++) {
            if (dw) dw[p0 + j] += aw[j];
            if (db) db[p0 + j] += ab[j];
        }
    }
}

void cpu_layernorm_bwd(const backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, const float *mean, const float *rstd, int N, int C)
{
#pragma omp parallel num_threads(cpu_threads(be)) if ((size_t)N * C > CPU_PAR_MIN)
    {
        if (dinp) {
#pragma omp for schedule(static) nowait
            for (int n = 0; n < N; n++)
                ln_bwd_row(dinp + (size_t)n * C, dout + (size_t)n * C, inp + (size_t)n * C, w, mean[n], rstd[n], C);
        }
        if (dw || db) {
            int c0, c1;
            cpu_cols_of(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
            ln_bwd_cols(dw, db, dout, inp, mean, rstd, N, C, c0, c1);
        }
    }
}
