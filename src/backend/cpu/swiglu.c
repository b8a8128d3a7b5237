/* SwiGLU on the fused fc1 output [gate | up]: silu(gate) * up, the sigmoid through cpu_expf so
 * that the loops vectorize. Rows in parallel; no reductions. */
#include "cpu.h"

static inline float sigmoid(float x) { return 1.0f / (1.0f + cpu_expf(-x)); }

void cpu_swiglu_fwd(const backend *be, float *out, const float *inp, int N, int F)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)N * F > CPU_PAR_MIN_EXP)
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F;
        float *y = out + (size_t)n * F;
#pragma omp simd
        for (int f = 0; f < F; f++) y[f] = g[f] * sigmoid(g[f]) * u[f];
    }
}

/* d gate = dout * up * sig (1 + gate (1 - sig)); d up = dout * silu(gate). */
void cpu_swiglu_bwd(const backend *be, float *dinp, const float *dout, const float *inp, int N, int F)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)N * F > CPU_PAR_MIN_EXP)
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F, *dy = dout + (size_t)n * F;
        float *dg = dinp + (size_t)n * 2 * F, *du = dg + F;
#pragma omp simd
        for (int f = 0; f < F; f++) {
            float sg = sigmoid(g[f]), d = dy[f];
            dg[f] += d * u[f] * sg * (1.0f + g[f] * (1.0f - sg));
            du[f] += d * g[f] * sg;
        }
    }
}
