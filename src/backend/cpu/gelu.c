/* GeLU, tanh approximation (GPT-2, Megatron): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
 * tanh through cpu_expf so that the loops vectorize. */
#include <omp.h>

#include "cpu.h"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

static inline float gelu(float x)
{
    float u = GELU_K * (x + GELU_A * x * x * x);
    return 0.5f * x * (1.0f + cpu_tanhf(u));
}

static inline float gelu_grad(float x)
{
    float u = GELU_K * (x + GELU_A * x * x * x);
    float th = cpu_tanhf(u);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
}

void cpu_gelu_fwd(const backend *be, float *out, const float *inp, size_t n)
{
#pragma omp parallel for simd schedule(static) num_threads(cpu_threads(be)) if (n > CPU_PAR_MIN_EXP)
    for (size_t i = 0; i < n; i++) out[i] = gelu(inp[i]);
}

void cpu_gelu_bwd(const backend *be, float *dinp, const float *dout, const float *inp, size_t n)
{
#pragma omp parallel for simd schedule(static) num_threads(cpu_threads(be)) if (n > CPU_PAR_MIN_EXP)
    for (size_t i = 0; i < n; i++) dinp[i] += gelu_grad(inp[i]) * dout[i];
}

void cpu_bias_gelu_fwd(const backend *be, float *out, const float *inp, const float *b, int N, int C)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)N * C > CPU_PAR_MIN_EXP)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
#pragma omp simd
        for (int c = 0; c < C; c++) y[c] = gelu(x[c] + b[c]);
    }
}

/* One pass: threads own column ranges and walk the rows in order, adding the gradient to dinp
 * and to a column accumulator for db (the same sums whatever the thread count). */
void cpu_bias_gelu_bwd(const backend *be, float *dinp, float *db, const float *dout, const float *inp,
                       const float *b, int N, int C)
{
#pragma omp parallel num_threads(cpu_threads(be)) if ((size_t)N * C > CPU_PAR_MIN_EXP)
    {
        int c0, c1;
        cpu_cols_of(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
        for (int p0 = c0; p0 < c1; p0 += CPU_COLS) {
            int w = c1 - p0 < CPU_COLS ? c1 - p0 : CPU_COLS;
            const float *bb = b + p0;
            float acc[CPU_COLS] = {0};
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C + p0, *dy = dout + (size_t)n * C + p0;
                if (dinp) {
                    float *dx = dinp + (size_t)n * C + p0;
#pragma omp simd
                    for (int j = 0; j < w; j++) {
                        float g = gelu_grad(x[j] + bb[j]) * dy[j];
                        dx[j] += g;
                        acc[j] += g;
                    }
                } else {
#pragma omp simd
                    for (int j = 0; j < w; j++) acc[j] += gelu_grad(x[j] + bb[j]) * dy[j];
                }
            }
            if (db)
                for (int j = 0; j < w; j++) db[p0 + j] += acc[j];
        }
    }
}
