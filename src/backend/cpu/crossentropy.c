/* Vocab-parallel softmax cross-entropy, in the steps the parallel code all-reduces between
 * (Megatron's _VocabParallelCrossEntropy): local max, local sum of exp, target logit, loss;
 * and the fused backward that overwrites the logits with their gradient. Rows in parallel.
 * Columns past Vreal are vocabulary padding: skipped, as if their logits were -inf (as llm.c
 * does), so the loss is over the real vocabulary and their gradient is exactly 0. */
#include <math.h>
#include <string.h>

#include "cpu.h"

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

void cpu_ce_bwd(const backend *be, float *logits, const float *maxv, const float *sumexp, const int32_t *targets,
                const float *dloss, int BT, int Vloc, int Vreal, int vstart)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)BT * Vloc > CPU_PAR_MIN_EXP)
    for (int i = 0; i < BT; i++) {
        float *l = logits + (size_t)i * Vloc;
        float m = maxv[i], inv = 1.0f / sumexp[i], d = dloss[i];
        float scale = inv * d;
#pragma omp simd
        for (int j = 0; j < Vreal; j++) l[j] = cpu_expf(l[j] - m) * scale;
        if (Vreal < Vloc) memset(l + Vreal, 0, (size_t)(Vloc - Vreal) * sizeof(float));
        int64_t r = (int64_t)targets[i] - vstart;
        if (r >= 0 && r < Vreal) l[r] -= d;
    }
}
