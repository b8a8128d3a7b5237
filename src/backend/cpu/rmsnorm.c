/* RMSNorm over the last dimension (Llama). Forward: rows in parallel. Backward: one parallel
 * region, the input gradient by rows and the weight gradient by column ranges (rows summed in
 * order, so it does not depend on the thread count), as layernorm.c. */
#include <math.h>
#include <omp.h>

#include "cpu.h"

void cpu_rmsnorm_fwd(const backend *be, float *out, float *rstd, const float *inp, const float *w, int N, int C,
                     float eps)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)N * C > CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float s = 1.0f / sqrtf(ss / (float)C + eps);
#pragma omp simd
        for (int c = 0; c < C; c++) y[c] = x[c] * s * w[c];
        if (rstd) rstd[n] = s;
    }
}

/* dinp row += rstd * (dxhat - xhat * mean(dxhat * xhat)), xhat = x * rstd, dxhat = dout * w. */
static void rms_bwd_row(float *dx, const float *dy, const float *x, const float *w, float s, int C)
{
    float a = 0.0f;
#pragma omp simd reduction(+ : a)
    for (int c = 0; c < C; c++) a += dy[c] * w[c] * x[c] * s;
    a /= (float)C;
#pragma omp simd
    for (int c = 0; c < C; c++) dx[c] += s * (dy[c] * w[c] - x[c] * s * a);
}

/* dw += sum_n dout * xhat over columns [c0, c1). */
static void rms_bwd_cols(float *dw, const float *dout, const float *inp, const float *rstd, int N, int C, int c0,
                         int c1)
{
    for (int p0 = c0; p0 < c1; p0 += CPU_COLS) {
        int wd = c1 - p0 < CPU_COLS ? c1 - p0 : CPU_COLS;
        float aw[CPU_COLS] = {0};
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C + p0, *dy = dout + (size_t)n * C + p0;
            float s = rstd[n];
#pragma omp simd
            for (int j = 0; j < wd; j++) aw[j] += dy[j] * x[j] * s;
        }
        for (int j = 0; j < wd; j++) dw[p0 + j] += aw[j];
    }
}

void cpu_rmsnorm_bwd(const backend *be, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     const float *rstd, int N, int C)
{
#pragma omp parallel num_threads(cpu_threads(be)) if ((size_t)N * C > CPU_PAR_MIN)
    {
        if (dinp) {
#pragma omp for schedule(static) nowait
            for (int n = 0; n < N; n++)
                rms_bwd_row(dinp + (size_t)n * C, dout + (size_t)n * C, inp + (size_t)n * C, w, rstd[n], C);
        }
        if (dw) {
            int c0, c1;
            cpu_cols_of(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
            rms_bwd_cols(dw, dout, inp, rstd, N, C, c0, c1);
        }
    }
}
