/* Elementwise helpers: residual add, scale, bias add and its gradient. */
#include "cpu.h"

void cpu_add(const backend *be, float *out, const float *a, const float *b, size_t n)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void cpu_scale(const backend *be, float *x, float s, size_t n)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void cpu_bias_add(const backend *be, float *out, const float *b, int N, int C)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)N * C > CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *y = out + (size_t)n * C;
        for (int c = 0; c < C; c++) y[c] += b[c];
    }
}

void cpu_bias_bwd(const backend *be, float *db, const float *dout, int N, int C)
{
    cpu_colsum_acc(be, db, dout, N, C);
}
