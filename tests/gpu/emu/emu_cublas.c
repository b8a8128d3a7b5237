/* A cuBLAS for the host emulation of the CUDA backend (tests/gpu/cuda_emu.cmake builds it as
 * libcublas.so.13, which gemm.cu's dlopen finds through the tests' LD_LIBRARY_PATH): the entry
 * points gemm.cu looks up, column-major as cuBLAS's, in plain loops. Each product is summed in
 * double and rounded once (cuBLAS sums in fp32 in an order of its own, so results agree to
 * rounding, not bit for bit); 16-bit operands (GemmEx: bf16, fp16) are widened exactly; under
 * CUBLAS_TF32_TENSOR_OP_MATH the fp32 operands are first rounded to TF32 (10 mantissa bits,
 * nearest, ties away, as cvt.rna.tf32.f32). beta 0 does not read C (it may hold NaN), as cuBLAS.
 * The arguments are checked as cuBLAS checks them (sizes >= 0, leading dimensions at least the
 * rows of what they describe): CUBLAS_STATUS_INVALID_VALUE otherwise, so a glue bug in a leading
 * dimension fails here as it fails on the device. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cublas_v2.h"

#define EMU_EXPORT __attribute__((visibility("default")))

struct emu_cublas {
    cudaStream_t stream;
    cublasMath_t math;
};

EMU_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
    *h = calloc(1, sizeof **h);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
EMU_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}
EMU_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
EMU_EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}
EMU_EXPORT cublasStatus_t cublasGetVersion_v2(cublasHandle_t h, int *v)
{
    (void)h;
    *v = CUBLAS_VER_MAJOR * 10000 + CUBLAS_VER_MINOR * 100 + CUBLAS_VER_PATCH;
    return CUBLAS_STATUS_SUCCESS;
}
EMU_EXPORT const char *cublasGetStatusName(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

/* An operand: element (r, c) of op(X) for X column-major with leading dimension ld. */
typedef struct {
    const void *p;
    cudaDataType t;
    int trans, ld, tf32;
} operand;

static float half_to_f32(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}
static float tf32(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u; /* nearest, ties away */
    memcpy(&x, &u, 4);
    return x;
}
static double elem(const operand *o, int r, int c)
{
    size_t i = o->trans ? (size_t)c + (size_t)r * (size_t)o->ld : (size_t)r + (size_t)c * (size_t)o->ld;
    float v;
    if (o->t == CUDA_R_32F) v = ((const float *)o->p)[i];
    else if (o->t == CUDA_R_16BF) {
        uint32_t w = (uint32_t)((const uint16_t *)o->p)[i] << 16;
        memcpy(&v, &w, 4);
    } else v = half_to_f32(((const uint16_t *)o->p)[i]);
    return o->tf32 ? tf32(v) : v;
}

/* C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C, after cuBLAS's argument checks. */
static cublasStatus_t gemm(int m, int n, int k, float alpha, const operand *A, const operand *B, float beta, float *C,
                           int ldc)
{
    if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    int arows = A->trans ? k : m, brows = B->trans ? n : k;
    if (A->ld < (arows > 1 ? arows : 1) || B->ld < (brows > 1 ? brows : 1) || ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    double *a = malloc((size_t)m * (k ? k : 1) * sizeof(double)), *col = malloc((size_t)(k ? k : 1) * sizeof(double));
    if (!a || !col) {
        free(a), free(col);
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
    for (int r = 0; r < m; r++) /* op(A) row-major, so each dot product reads contiguous memory */
        for (int l = 0; l < k; l++) a[(size_t)r * k + l] = elem(A, r, l);
    for (int c = 0; c < n; c++) {
        for (int l = 0; l < k; l++) col[l] = elem(B, l, c);
        for (int r = 0; r < m; r++) {
            const double *ar = a + (size_t)r * k;
            double s = 0.0;
            for (int l = 0; l < k; l++) s += ar[l] * col[l];
            float *cp = C + (size_t)r + (size_t)c * (size_t)ldc;
            *cp = beta == 0.0f ? (float)(alpha * s) : (float)(alpha * s + (double)beta * *cp);
        }
    }
    free(a), free(col);
    return CUBLAS_STATUS_SUCCESS;
}

static int op_ok(cublasOperation_t t) { return t == CUBLAS_OP_N || t == CUBLAS_OP_T; }

EMU_EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
                                         const float *beta, float *C, int ldc)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!op_ok(ta) || !op_ok(tb)) return CUBLAS_STATUS_INVALID_VALUE;
    int t32 = h->math == CUBLAS_TF32_TENSOR_OP_MATH;
    operand a = {A, CUDA_R_32F, ta == CUBLAS_OP_T, lda, t32}, b = {B, CUDA_R_32F, tb == CUBLAS_OP_T, ldb, t32};
    return gemm(m, n, k, *alpha, &a, &b, *beta, C, ldc);
}

/* The combinations gemm.cu uses: A and B of one type (fp32, bf16, fp16), C fp32, fp32 compute. */
EMU_EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                       int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                       const void *B, cudaDataType bt, int ldb, const void *beta, void *C,
                                       cudaDataType ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)algo;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!op_ok(ta) || !op_ok(tb)) return CUBLAS_STATUS_INVALID_VALUE;
    if (at != bt || ct != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F ||
        (at != CUDA_R_32F && at != CUDA_R_16BF && at != CUDA_R_16F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    int t32 = at == CUDA_R_32F && h->math == CUBLAS_TF32_TENSOR_OP_MATH;
    operand a = {A, at, ta == CUBLAS_OP_T, lda, t32}, b = {B, bt, tb == CUBLAS_OP_T, ldb, t32};
    return gemm(m, n, k, *(const float *)alpha, &a, &b, *(const float *)beta, (float *)C, ldc);
}

/* group_count groups; group g: group_size[g] problems of its sizes and scalars, whose A, B and C
 * pointers come next in the (device) pointer arrays. */
EMU_EXPORT cublasStatus_t cublasSgemmGroupedBatched(cublasHandle_t h, const cublasOperation_t ta[],
                                                    const cublasOperation_t tb[], const int m[], const int n[],
                                                    const int k[], const float alpha[], const float *const A[],
                                                    const int lda[], const float *const B[], const int ldb[],
                                                    const float beta[], float *const C[], const int ldc[],
                                                    int group_count, const int group_size[])
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (group_count < 0) return CUBLAS_STATUS_INVALID_VALUE;
    int t32 = h->math == CUBLAS_TF32_TENSOR_OP_MATH;
    size_t p = 0;
    for (int g = 0; g < group_count; g++) {
        if (group_size[g] < 0 || !op_ok(ta[g]) || !op_ok(tb[g])) return CUBLAS_STATUS_INVALID_VALUE;
        for (int i = 0; i < group_size[g]; i++, p++) {
            operand a = {A[p], CUDA_R_32F, ta[g] == CUBLAS_OP_T, lda[g], t32};
            operand b = {B[p], CUDA_R_32F, tb[g] == CUBLAS_OP_T, ldb[g], t32};
            cublasStatus_t s = gemm(m[g], n[g], k[g], alpha[g], &a, &b, beta[g], C[p], ldc[g]);
            if (s != CUBLAS_STATUS_SUCCESS) return s;
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}
