/* AdamW on a contiguous slice (PyTorch semantics, decoupled weight decay), and the sum of
 * squares behind grad-norm clipping. */
#include <math.h>
#include <stdlib.h>

#include "trident/check.h"
#include "cpu.h"

void cpu_adamw(const backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
               float beta2, float eps, float wd, float gscale, int64_t step)
{
    TD_CHECK(step >= 1, "AdamW steps count from 1", "step %lld", (long long)step);
    double bc1 = 1.0 - pow((double)beta1, (double)step);
    double bc2 = 1.0 - pow((double)beta2, (double)step);
    float step_size = (float)(lr / bc1);
    float inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    float decay = 1.0f - lr * wd;
#pragma omp parallel for simd schedule(static) num_threads(cpu_threads(be)) if (n > CPU_PAR_MIN_EXP)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    }
}

/* Fixed chunks summed in order: the result does not depend on the thread count. */
#define SUMSQ_CHUNK 16384
#define SUMSQ_LANES 16

double cpu_sumsq(const backend *be, const float *x, size_t n)
{
    size_t nchunk = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    if (nchunk == 0) return 0.0;
    double *part = cpu_scratch(3, nchunk * sizeof(double));
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if (n > CPU_PAR_MIN)
    for (size_t k = 0; k < nchunk; k++) {
        size_t lo = k * SUMSQ_CHUNK, hi = lo + SUMSQ_CHUNK < n ? lo + SUMSQ_CHUNK : n;
        /* SUMSQ_LANES independent partial sums (several vector registers, so the adds do not
         * wait on each other), then the tail, then the lanes in order */
        double acc[SUMSQ_LANES] = {0}, s = 0.0;
        size_t i = lo;
        for (; i + SUMSQ_LANES <= hi; i += SUMSQ_LANES) {
#pragma omp simd
            for (int j = 0; j < SUMSQ_LANES; j++) acc[j] += (double)x[i + j] * x[i + j];
        }
        for (; i < hi; i++) s += (double)x[i] * x[i];
        for (int j = 0; j < SUMSQ_LANES; j++) s += acc[j];
        part[k] = s;
    }
    double s = 0.0;
    for (size_t k = 0; k < nchunk; k++) s += part[k];
    return s;
}
