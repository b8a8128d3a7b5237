/* Linear layers: out = inp . W^T + b with W stored (out, in) row-major, through OpenBLAS (sgemm; sgemv
 * for one row) or, for 2-8 rows, a loop of our own that reads W once (rows_times_wt). */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "trident/check.h"

void cpu_colsum_acc(const backend *be, float *db, const float *x, int N, int C)
{
#pragma omp parallel num_threads(cpu_threads(be)) if ((size_t)N * C > CPU_PAR_MIN)
    {
        int c0, c1;
        cpu_cols_of(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
        for (int p0 = c0; p0 < c1; p0 += CPU_COLS) {
            int w = c1 - p0 < CPU_COLS ? c1 - p0 : CPU_COLS;
            float acc[CPU_COLS] = {0};
            for (int n = 0; n < N; n++) {
                const float *row = x + (size_t)n * C + p0;
#pragma omp simd
                for (int j = 0; j < w; j++) acc[j] += row[j];
            }
            for (int j = 0; j < w; j++) db[p0 + j] += acc[j];
        }
    }
}

/* Up to this many rows, a product reads W once, row by row, into each input row's dot products
 * (few_rows_times_wt) instead of through sgemm. */
#define CPU_FEW_ROWS 8

/* out (n, OC) = inp (n, C) . W^T + beta out for 2..CPU_FEW_ROWS rows (a decoding step of a few
 * sequences): each row of W is read from memory once and dotted with every input row while it is
 * in L1; the output columns split over the threads. (Keeping all n rows' partial sums in
 * registers at once measured slower: 124 against 145 tokens/s at batch 8.) */
static void few_rows_times_wt(const backend *be, float *out, const float *inp, const float *w, float beta, int n, int C,
                              int OC)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((double)n * C * OC > CPU_PAR_MIN_MACS)
    for (int o = 0; o < OC; o++) {
        const float *wr = w + (size_t)o * C;
        for (int r = 0; r < n; r++) {
            const float *x = inp + (size_t)r * C;
            float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
            for (int k = 0; k < C; k++) acc += wr[k] * x[k];
            float *y = out + (size_t)r * OC + o;
            *y = beta != 0.0f ? *y + acc : acc;
        }
    }
}

/* out (n, OC) = inp (n, C) . W^T + beta out. A product of few rows (a decoding step, or an expert
 * given few tokens): sgemm would first copy all of W into its packed layout, tripling the memory
 * traffic of a product that only needs to read W once. One row: sgemv; up to CPU_FEW_ROWS: each W
 * row once for all of them (bench/generate.sh, GPT-2 124M: batch 1 2.3x, 2 2.2x, 4 2.2x, 8 1.2x). */
static void rows_times_wt(const backend *be, float *out, const float *inp, const float *w, float beta, int n, int C,
                          int OC)
{
    if (n == 1) cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, C, 1.0f, w, C, inp, 1, beta, out, 1);
    else if (n <= CPU_FEW_ROWS) few_rows_times_wt(be, out, inp, w, beta, n, C, OC);
    else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, OC, C, 1.0f, inp, C, w, C, beta, out, OC);
}

void cpu_matmul_fwd(const backend *be, float *out, const float *inp, const float *w, const float *b, int BT, int C,
                    int OC)
{
    if (BT <= 0 || OC <= 0) return;
    float beta = 0.0f;
    if (b) {
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)BT * OC > CPU_PAR_MIN)
        for (int i = 0; i < BT; i++) memcpy(out + (size_t)i * OC, b, (size_t)OC * sizeof(float));
        beta = 1.0f;
    }
    cpu_blas_threads(be);
    rows_times_wt(be, out, inp, w, beta, BT, C, OC);
}

/* The groups' offsets in rows, and whether to run the groups side by side (one thread's GEMM
 * each: enough groups for the threads and few rows a group, where one threaded GEMM a group
 * would spend its time starting threads) or one after another (threaded GEMMs). */
static int64_t *group_rows(const int32_t *counts, int G)
{
    int64_t *off = td_xmalloc(((size_t)G + 1) * sizeof *off);
    off[0] = 0;
    for (int g = 0; g < G; g++) off[g + 1] = off[g] + counts[g];
    return off;
}

static int side_by_side(const backend *be, int G, int64_t rows)
{
    return cpu_threads(be) > 1 && G >= cpu_threads(be) && rows / G < CPU_GROUPED_ROWS;
}

void cpu_matmul_grouped_fwd(const backend *be, float *out, const float *inp, const float *w, const float *b,
                            const int32_t *counts, int G, int C, int OC)
{
    int64_t *off = group_rows(counts, G);
    int par = side_by_side(be, G, off[G]);
    if (par) openblas_set_num_threads(1); /* each group's GEMM on its own thread */
    else cpu_blas_threads(be);
#pragma omp parallel for schedule(dynamic, 1) num_threads(cpu_threads(be)) if (par)
    for (int g = 0; g < G; g++) {
        int n = counts[g];
        if (n <= 0) continue;
        float *o = out + off[g] * OC, beta = 0.0f;
        if (b) {
            for (int i = 0; i < n; i++) memcpy(o + (size_t)i * OC, b + (size_t)g * OC, (size_t)OC * sizeof(float));
            beta = 1.0f;
        }
        rows_times_wt(be, o, inp + off[g] * C, w + (size_t)g * OC * C, beta, n, C, OC);
    }
    free(off);
}

void cpu_matmul_grouped_bwd(const backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, const int32_t *counts, int G, int C, int OC)
{
    int64_t *off = group_rows(counts, G);
    int par = side_by_side(be, G, off[G]);
    if (par) openblas_set_num_threads(1);
    else cpu_blas_threads(be);
#pragma omp parallel for schedule(dynamic, 1) num_threads(cpu_threads(be)) if (par)
    for (int g = 0; g < G; g++) {
        int n = counts[g];
        if (n <= 0) continue;
        const float *d = dout + off[g] * OC, *x = inp + off[g] * C, *wg = w + (size_t)g * OC * C;
        if (dinp) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, C, OC, 1.0f, d, OC, wg, C, 1.0f,
                              dinp + off[g] * C, C);
        if (dw) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, n, 1.0f, d, OC, x, C, 1.0f,
                            dw + (size_t)g * OC * C, C);
        if (db) /* each column summed over the group's rows in order */
            for (int i = 0; i < n; i++)
                for (int c = 0; c < OC; c++) db[(size_t)g * OC + c] += d[(size_t)i * OC + c];
    }
    free(off);
}

void cpu_matmul_bwd(const backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                    const float *w, int BT, int C, int OC)
{
    if (BT <= 0 || OC <= 0) return;
    cpu_blas_threads(be);
    /* dinp (BT, C) += dout (BT, OC) . W (OC, C) */
    if (dinp) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BT, C, OC, 1.0f, dout, OC, w, C, 1.0f, dinp, C);
    /* dW (OC, C) += dout^T (OC, BT) . inp (BT, C) */
    if (dw) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, BT, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    if (db) cpu_colsum_acc(be, db, dout, BT, OC);
}
