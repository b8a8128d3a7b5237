/* Linear layers through OpenBLAS: out = inp . W^T + b with W stored (out, in) row-major. */
#include <cblas.h>
#include <omp.h>
#include <string.h>

#include "cpu.h"

void cpu_colsum_acc(const backend *be, float *db, const float *x, int N, int C)
{
#pragma omp parallel num_threads(be->nthreads) if ((size_t)N * C > CPU_PAR_MIN)
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

void cpu_matmul_fwd(const backend *be, float *out, const float *inp, const float *w, const float *b, int BT, int C,
                    int OC)
{
    if (BT <= 0 || OC <= 0) return;
    float beta = 0.0f;
    if (b) {
#pragma omp parallel for schedule(static) num_threads(be->nthreads) if ((size_t)BT * OC > CPU_PAR_MIN)
        for (int i = 0; i < BT; i++) memcpy(out + (size_t)i * OC, b, (size_t)OC * sizeof(float));
        beta = 1.0f;
    }
    cpu_blas_threads(be);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BT, OC, C, 1.0f, inp, C, w, C, beta, out, OC);
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
