/* Vocab-parallel softmax cross-entropy, in the steps the parallel code all-reduces between
 * (Megatron's _VocabParallelCrossEntropy): local max, local sum of exp, target logit, loss;
 * and the fused backward that overwrites the logits with their gradient. Rows in parallel.
 * Columns past Vreal are vocabulary padding: skipped, as if their logits were -inf (as llm.c
 * does), so the loss is over the real vocabulary and their gradient is exactly 0. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "trident/check.h"
#include "trident/half.h"

void cpu_ce_max(const backend *be, float *maxv, const float *logits, int BT, int Vloc, int Vreal)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)BT * Vloc > CPU_PAR_MIN)
    for (int i = 0; i < BT; i++) {
        const float *l = logits + (size_t)i * Vloc;
        float m = -INFINITY;
#pragma omp simd reduction(max : m)
        for (int j = 0; j < Vreal; j++) m = l[j] > m ? l[j] : m;
        maxv[i] = m;
    }
}

void cpu_ce_sumexp(const backend *be, float *sumexp, const float *logits, const float *maxv, int BT, int Vloc,
                   int Vreal)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)BT * Vloc > CPU_PAR_MIN_EXP)
    for (int i = 0; i < BT; i++) {
        const float *l = logits + (size_t)i * Vloc;
        float m = maxv[i];
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < Vreal; j++) s += cpu_expf(l[j] - m);
        sumexp[i] = (float)s;
    }
}

void cpu_ce_target(const backend *be, float *tlogit, const float *logits, const int32_t *targets, int BT, int Vloc,
                   int vstart)
{
    (void)be;
    for (int i = 0; i < BT; i++) {
        int64_t r = (int64_t)targets[i] - vstart;
        tlogit[i] = (r >= 0 && r < Vloc) ? logits[(size_t)i * Vloc + r] : 0.0f;
    }
}

void cpu_ce_loss(const backend *be, float *losses, const float *maxv, const float *sumexp, const float *tlogit,
                 int BT)
{
    (void)be;
    for (int i = 0; i < BT; i++) losses[i] = logf(sumexp[i]) + maxv[i] - tlogit[i];
}

/* Row i of ce_bwd's result into v (Vloc floats): the arithmetic of cpu_ce_bwd, element for element. */
static inline void ce_bwd_row(float *v, const float *l, float m, float scale, float d, int64_t r, int Vloc, int Vreal)
{
#pragma omp simd
    for (int j = 0; j < Vreal; j++) v[j] = cpu_expf(l[j] - m) * scale;
    if (Vreal < Vloc) memset(v + Vreal, 0, (size_t)(Vloc - Vreal) * sizeof(float));
    if (r >= 0 && r < Vreal) v[r] -= d;
}

void cpu_ce_bwd_to(const backend *be, void *out, be_dtype dt, const float *logits, const float *maxv,
                   const float *sumexp, const int32_t *targets, const float *dloss, int BT, int Vloc, int Vreal,
                   int vstart)
{
#pragma omp parallel num_threads(cpu_threads(be)) if ((size_t)BT * Vloc > CPU_PAR_MIN_EXP)
    {
        /* fp32 output: straight into it; 16-bit: a row in fp32 first, then rounded as convert does */
        float *row = dt == BE_F32 ? NULL : td_xmalloc((size_t)Vloc * sizeof(float));
#pragma omp for schedule(static)
        for (int i = 0; i < BT; i++) {
            const float *l = logits + (size_t)i * Vloc;
            float d = dloss[i], scale = 1.0f / sumexp[i] * d;
            int64_t r = (int64_t)targets[i] - vstart;
            if (dt == BE_F32) {
                ce_bwd_row((float *)out + (size_t)i * Vloc, l, maxv[i], scale, d, r, Vloc, Vreal);
                continue;
            }
            ce_bwd_row(row, l, maxv[i], scale, d, r, Vloc, Vreal);
            uint16_t *o = (uint16_t *)out + (size_t)i * Vloc;
            if (dt == BE_BF16) {
#pragma omp simd
                for (int j = 0; j < Vloc; j++) o[j] = td_f32_to_bf16(row[j]);
            } else {
                for (int j = 0; j < Vloc; j++) o[j] = td_f32_to_f16(row[j]);
            }
        }
        free(row);
    }
}

void cpu_ce_bwd(const backend *be, float *logits, const float *maxv, const float *sumexp, const int32_t *targets,
                const float *dloss, int BT, int Vloc, int Vreal, int vstart)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)BT * Vloc > CPU_PAR_MIN_EXP)
    for (int i = 0; i < BT; i++) {
        float *l = logits + (size_t)i * Vloc;
        float d = dloss[i], scale = 1.0f / sumexp[i] * d;
        ce_bwd_row(l, l, maxv[i], scale, d, (int64_t)targets[i] - vstart, Vloc, Vreal); /* in place */
    }
}
