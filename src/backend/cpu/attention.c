/* Causal self-attention core on the local heads. Each (batch, head) is one task of one thread;
 * its query rows go in blocks of ATT_BLK so that only the causal part of the scores, keys
 * [0, end of block), is computed. Q K^T, att . V and the backward products are cblas_sgemm
 * calls straight on the interleaved qkv layout (leading dimension 3C): no copies. OpenBLAS
 * runs single-threaded inside the parallel region, so the threads do not oversubscribe.
 * The forward keeps only the log-sum-exp of each score row; the backward recomputes the
 * probabilities from it (one extra Q K^T) instead of storing (B, NH, T, T). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "trident/check.h"
#include "backend/cpu/cpu.h"

#define ATT_BLK 64

typedef struct {
    const float *q, *k, *v; /* rows with stride ld3 = 3C */
    int T, HS, C, head;     /* head: local head index */
    int64_t sample;         /* global sample index of the batch row (dropout) */
} att_task;

static att_task task_of(const float *qkv, const be_drop *drop, int bh, int T, int NH, int HS)
{
    int C = NH * HS, b = bh / NH, h = bh % NH;
    const float *base = qkv + (size_t)b * T * 3 * C + (size_t)h * HS;
    att_task a = {base, base + C, base + 2 * C, T, HS, C, h, cpu_dropping(drop) ? drop->sample[b] : 0};
    return a;
}

/* Scores of query rows [r0, r0 + nr) against keys [0, nk), nk = r0 + nr, into S (nr, nk). */
static void scores(float *S, const att_task *a, int r0, int nr, int nk)
{
    int ld3 = 3 * a->C;
    float scale = 1.0f / sqrtf((float)a->HS);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, a->HS, scale, a->q + (size_t)r0 * ld3, ld3, a->k,
                ld3, 0.0f, S, nk);
}

/* Dropout multipliers of row t (keys [0, nk)) of this head into mult. */
static void att_mults(float *mult, const att_task *a, const be_drop *drop, int t, int nk)
{
    int64_t unit0 = ((int64_t)drop->unit0 + a->head) * a->T;
    cpu_drop_mults(mult, nk, drop, BE_DROP_ATTN, a->sample, (int64_t)drop->pos0 + t, unit0);
}

void cpu_attention_fwd(const backend *be, float *out, float *lse, const float *qkv, int B, int T, int NH, int HS,
                       const be_drop *drop)
{
    int C = NH * HS, blk = T < ATT_BLK ? T : ATT_BLK, dropping = cpu_dropping(drop);
    if (B <= 0 || T <= 0 || NH <= 0) return;
#pragma omp parallel num_threads(be->nthreads) if ((double)B * NH * T * T * HS > CPU_PAR_MIN_MACS)
    {
        float *S = cpu_scratch(0, (size_t)blk * T * sizeof(float));
        float *mult = dropping ? cpu_scratch(1, (size_t)T * sizeof(float)) : NULL;
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < B * NH; bh++) {
            att_task a = task_of(qkv, drop, bh, T, NH, HS);
            float *o = out + (size_t)(bh / NH) * T * C + (size_t)(bh % NH) * HS;
            float *l = lse + (size_t)bh * T;
            for (int r0 = 0; r0 < T; r0 += blk) {
                int nr = T - r0 < blk ? T - r0 : blk, nk = r0 + nr;
                scores(S, &a, r0, nr, nk);
                for (int i = 0; i < nr; i++) {
                    int t = r0 + i;
                    float *row = S + (size_t)i * nk, m = -INFINITY, sum = 0.0f;
#pragma omp simd reduction(max : m)
                    for (int j = 0; j <= t; j++) m = row[j] > m ? row[j] : m;
#pragma omp simd reduction(+ : sum)
                    for (int j = 0; j <= t; j++) {
                        row[j] = cpu_expf(row[j] - m);
                        sum += row[j];
                    }
                    float inv = 1.0f / sum;
#pragma omp simd
                    for (int j = 0; j <= t; j++) row[j] *= inv;
                    for (int j = t + 1; j < nk; j++) row[j] = 0.0f;
                    l[t] = m + logf(sum);
                    if (dropping) {
                        att_mults(mult, &a, drop, t, t + 1);
                        for (int j = 0; j <= t; j++) row[j] *= mult[j];
                    }
                }
                /* out rows (nr, HS) = att (nr, nk) . V (nk, HS) */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, HS, nk, 1.0f, S, nk, a.v, 3 * C, 0.0f,
                            o + (size_t)r0 * C, C);
            }
        }
    }
}

/* One block of query rows of one head: P (probabilities), M (dropout multipliers) and G (the
 * gradient buffer) are (nr, nk) scratch. Accumulates into dq rows [r0, r0+nr), dk, dv rows
 * [0, nk). */
static void att_bwd_block(float *dq, float *dk, float *dv, const float *dO, const att_task *a, const float *l,
                          const be_drop *drop, int r0, int nr, float *P, float *M, float *G)
{
    int nk = r0 + nr, ld3 = 3 * a->C, C = a->C, HS = a->HS, dropping = M != NULL;
    float scale = 1.0f / sqrtf((float)HS);
    scores(P, a, r0, nr, nk);
    for (int i = 0; i < nr; i++) {
        int t = r0 + i;
        float *row = P + (size_t)i * nk;
        float lt = l[t];
#pragma omp simd
        for (int j = 0; j <= t; j++) row[j] = cpu_expf(row[j] - lt);
        for (int j = t + 1; j < nk; j++) row[j] = 0.0f;
        if (dropping) {
            float *mrow = M + (size_t)i * nk, *grow = G + (size_t)i * nk;
            att_mults(mrow, a, drop, t, t + 1);
            for (int j = t + 1; j < nk; j++) mrow[j] = 0.0f;
            for (int j = 0; j < nk; j++) grow[j] = row[j] * mrow[j];
        }
    }
    /* dV (nk, HS) += att_dropped^T (nk, nr) . dO (nr, HS) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, HS, nr, 1.0f, dropping ? G : P, nk, dO + (size_t)r0 * C,
                C, 1.0f, dv, ld3);
    /* G (nr, nk) = dO . V^T: the gradient of the dropped probabilities */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, HS, 1.0f, dO + (size_t)r0 * C, C, a->v, ld3, 0.0f, G,
                nk);
    /* dS = P * (dP - sum_j P dP), dP = G * M; written over P */
    for (int i = 0; i < nr; i++) {
        int t = r0 + i;
        float *prow = P + (size_t)i * nk, *grow = G + (size_t)i * nk;
        if (dropping) {
            const float *mrow = M + (size_t)i * nk;
            for (int j = 0; j <= t; j++) grow[j] *= mrow[j];
        }
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j <= t; j++) dot += prow[j] * grow[j];
#pragma omp simd
        for (int j = 0; j <= t; j++) prow[j] *= grow[j] - dot;
    }
    /* dQ (nr, HS) += scale dS . K;  dK (nk, HS) += scale dS^T . Q */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, HS, nk, scale, P, nk, a->k, ld3, 1.0f,
                dq + (size_t)r0 * ld3, ld3);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, HS, nr, scale, P, nk, a->q + (size_t)r0 * ld3, ld3,
                1.0f, dk, ld3);
}

void cpu_attention_bwd(const backend *be, float *dqkv, const float *dout, const float *qkv, const float *lse, int B,
                       int T, int NH, int HS, const be_drop *drop)
{
    int C = NH * HS, blk = T < ATT_BLK ? T : ATT_BLK, dropping = cpu_dropping(drop);
    size_t scratch = (size_t)blk * T;
    if (B <= 0 || T <= 0 || NH <= 0) return;
#pragma omp parallel num_threads(be->nthreads) if ((double)B * NH * T * T * HS > CPU_PAR_MIN_MACS)
    {
        float *P = cpu_scratch(0, scratch * sizeof(float)), *G = cpu_scratch(1, scratch * sizeof(float));
        float *M = dropping ? cpu_scratch(2, scratch * sizeof(float)) : NULL;
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < B * NH; bh++) {
            att_task a = task_of(qkv, drop, bh, T, NH, HS);
            size_t off3 = (size_t)(bh / NH) * T * 3 * C + (size_t)(bh % NH) * HS;
            float *dq = dqkv + off3, *dk = dq + C, *dv = dq + 2 * C;
            const float *dO = dout + (size_t)(bh / NH) * T * C + (size_t)(bh % NH) * HS;
            for (int r0 = 0; r0 < T; r0 += blk) {
                int nr = T - r0 < blk ? T - r0 : blk;
                att_bwd_block(dq, dk, dv, dO, &a, lse + (size_t)bh * T, drop, r0, nr, P, M, G);
            }
        }
    }
}
