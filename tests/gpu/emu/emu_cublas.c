/* A cuBLAS and cuBLASLt for the host emulation of the CUDA backend (tests/gpu/cuda_emu.cmake
 * builds this file as libcublas.so.13 and as libcublasLt.so.13, which gemm.cu's dlopen finds
 * through the tests' LD_LIBRARY_PATH): the entry points gemm.cu looks up, column-major as cuBLAS's,
 * in plain loops; cuBLASLt's matmul with the BIAS epilogue (D = alpha op(A) op(B) + beta C, then
 * bias[r] added to row r of every column), GELU_AUX_BIAS (aux = that, D = gelu(aux), the tanh
 * approximation, both rounded once to D's 16-bit type) and DGELU (D = the product times gelu'(aux),
 * aux read in D's type), as cuBLASLt's header documents them (the aux's leading dimension at least
 * m and a multiple of 8, else NOT_SUPPORTED), its descriptors holding what gemm.cu sets. Each product is summed in
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

#include "cublasLt.h"

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

static float lt_ld16(const void *p, size_t i, cudaDataType t);
static void lt_st16(void *p, size_t i, cudaDataType t, float x);

/* The combinations gemm.cu uses: A and B of one type (fp32, bf16, fp16), fp32 compute, C fp32 or
 * (16-bit A and B) of their type: the fp32 result rounded once to nearest even. */
EMU_EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                       int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                       const void *B, cudaDataType bt, int ldb, const void *beta, void *C,
                                       cudaDataType ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)algo;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!op_ok(ta) || !op_ok(tb)) return CUBLAS_STATUS_INVALID_VALUE;
    if (at != bt || (ct != CUDA_R_32F && ct != at) || compute != CUBLAS_COMPUTE_32F ||
        (at != CUDA_R_32F && at != CUDA_R_16BF && at != CUDA_R_16F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    int t32 = at == CUDA_R_32F && h->math == CUBLAS_TF32_TENSOR_OP_MATH;
    operand a = {A, at, ta == CUBLAS_OP_T, lda, t32}, b = {B, bt, tb == CUBLAS_OP_T, ldb, t32};
    if (ct == CUDA_R_32F) return gemm(m, n, k, *(const float *)alpha, &a, &b, *(const float *)beta, (float *)C, ldc);
    if (m < 0 || n < 0 || ldc < (m > 1 ? m : 1)) return CUBLAS_STATUS_INVALID_VALUE;
    float beta32 = *(const float *)beta, *tmp = malloc(((size_t)m * n > 0 ? (size_t)m * n : 1) * sizeof(float));
    if (!tmp) return CUBLAS_STATUS_ALLOC_FAILED;
    for (int c = 0; beta32 != 0.0f && c < n; c++) /* beta 0 does not read C */
        for (int r = 0; r < m; r++) tmp[(size_t)r + (size_t)c * m] = lt_ld16(C, (size_t)r + (size_t)c * ldc, ct);
    cublasStatus_t s = gemm(m, n, k, *(const float *)alpha, &a, &b, beta32, tmp, m > 1 ? m : 1);
    for (int c = 0; s == CUBLAS_STATUS_SUCCESS && c < n; c++)
        for (int r = 0; r < m; r++) lt_st16(C, (size_t)r + (size_t)c * ldc, ct, tmp[(size_t)r + (size_t)c * m]);
    free(tmp);
    return s;
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

/* ---- cuBLASLt ---- */

struct emu_lt {
    int unused;
};
struct emu_lt_desc {
    cublasComputeType_t compute;
    cudaDataType scale;
    cublasOperation_t ta, tb;
    cublasLtEpilogue_t epilogue;
    cudaDataType bias_type;
    const void *bias;
    void *aux;
    int64_t aux_ld;
};
struct emu_lt_layout {
    cudaDataType t;
    uint64_t rows, cols;
    int64_t ld;
};
struct emu_lt_pref {
    uint64_t workspace;
};

EMU_EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    *h = calloc(1, sizeof **h);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
EMU_EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}
EMU_EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                                   cudaDataType scale)
{
    *d = calloc(1, sizeof **d);
    if (!*d) return CUBLAS_STATUS_ALLOC_FAILED;
    (*d)->compute = compute, (*d)->scale = scale, (*d)->ta = (*d)->tb = CUBLAS_OP_N;
    (*d)->epilogue = CUBLASLT_EPILOGUE_DEFAULT, (*d)->bias_type = CUDA_R_32F;
    return CUBLAS_STATUS_SUCCESS;
}
EMU_EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}
/* Each attribute's buffer of exactly its type's size, as cuBLASLt checks. */
EMU_EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                         const void *buf, size_t size)
{
    int32_t v32 = 0;
    if (attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD) {
        if (size != sizeof d->aux_ld) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->aux_ld, buf, sizeof d->aux_ld);
        return CUBLAS_STATUS_SUCCESS;
    }
    if (attr != CUBLASLT_MATMUL_DESC_BIAS_POINTER && attr != CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER) {
        if (size != sizeof v32) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&v32, buf, sizeof v32);
    } else if (size != sizeof(void *)) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: d->ta = (cublasOperation_t)v32; break;
    case CUBLASLT_MATMUL_DESC_TRANSB: d->tb = (cublasOperation_t)v32; break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: d->epilogue = (cublasLtEpilogue_t)v32; break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: d->bias_type = (cudaDataType)v32; break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: memcpy(&d->bias, buf, sizeof d->bias); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: memcpy(&d->aux, buf, sizeof d->aux); break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}
EMU_EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows,
                                                     uint64_t cols, int64_t ld)
{
    if (ld < (int64_t)(rows > 1 ? rows : 1)) return CUBLAS_STATUS_INVALID_VALUE;
    *l = calloc(1, sizeof **l);
    if (!*l) return CUBLAS_STATUS_ALLOC_FAILED;
    (*l)->t = t, (*l)->rows = rows, (*l)->cols = cols, (*l)->ld = ld;
    return CUBLAS_STATUS_SUCCESS;
}
EMU_EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}
EMU_EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    *p = calloc(1, sizeof **p);
    return *p ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
EMU_EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}
EMU_EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                               cublasLtMatmulPreferenceAttributes_t attr,
                                                               const void *buf, size_t size)
{
    if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES || size != sizeof p->workspace)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(&p->workspace, buf, sizeof p->workspace);
    return CUBLAS_STATUS_SUCCESS;
}

/* Whether the GELU epilogues' D (and C) are of A's 16-bit type, their aux's leading dimension at
 * least m and a multiple of 8 (cuBLASLt's header), and GELU_AUX_BIAS's bias fp32. */
static int lt_gelu_ok(const struct emu_lt_desc *d, const struct emu_lt_layout *a, const struct emu_lt_layout *c,
                      const struct emu_lt_layout *dd, uint64_t m)
{
    return (a->t == CUDA_R_16BF || a->t == CUDA_R_16F) && c->t == a->t && dd->t == a->t && d->aux_ld >= (int64_t)m &&
           d->aux_ld % 8 == 0 && (d->epilogue == CUBLASLT_EPILOGUE_DGELU || d->bias_type == CUDA_R_32F);
}

/* Whether D (m, n) = op(A) op(B) fits the layouts: op(A) m x k, op(B) k x n, C and D m x n of fp32
 * (of A's 16-bit type for the GELU epilogues); A and B of one type; the compute and scale types
 * fp32; the epilogue DEFAULT or BIAS of fp32, or GELU_AUX_BIAS or DGELU. */
static int lt_shape(const struct emu_lt_desc *d, const struct emu_lt_layout *a, const struct emu_lt_layout *b,
                    const struct emu_lt_layout *c, const struct emu_lt_layout *dd, uint64_t *m, uint64_t *n,
                    uint64_t *k)
{
    uint64_t am = d->ta == CUBLAS_OP_T ? a->cols : a->rows, ak = d->ta == CUBLAS_OP_T ? a->rows : a->cols;
    uint64_t bk = d->tb == CUBLAS_OP_T ? b->cols : b->rows, bn = d->tb == CUBLAS_OP_T ? b->rows : b->cols;
    *m = am, *n = bn, *k = ak;
    int gelu = d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || d->epilogue == CUBLASLT_EPILOGUE_DGELU;
    return op_ok(d->ta) && op_ok(d->tb) && ak == bk && c->rows == am && c->cols == bn && dd->rows == am &&
           dd->cols == bn && a->t == b->t && d->compute == CUBLAS_COMPUTE_32F && d->scale == CUDA_R_32F &&
           (gelu ? lt_gelu_ok(d, a, c, dd, am)
                 : c->t == CUDA_R_32F && dd->t == CUDA_R_32F &&
                       (d->epilogue == CUBLASLT_EPILOGUE_DEFAULT ||
                        (d->epilogue == CUBLASLT_EPILOGUE_BIAS && d->bias_type == CUDA_R_32F)));
}

/* A 16-bit element of type t as fp32, and fp32 rounded to nearest even into one (bf16 by the
 * integer rounding, fp16 by the compiler's _Float16 conversion, which rounds to nearest even). */
static float lt_ld16(const void *p, size_t i, cudaDataType t)
{
    uint16_t h = ((const uint16_t *)p)[i];
    if (t == CUDA_R_16F) return half_to_f32(h);
    uint32_t w = (uint32_t)h << 16;
    float f;
    memcpy(&f, &w, 4);
    return f;
}
static void lt_st16(void *p, size_t i, cudaDataType t, float x)
{
    uint16_t h;
    if (t == CUDA_R_16F) {
        _Float16 v = (_Float16)x;
        memcpy(&h, &v, 2);
    } else {
        uint32_t w;
        memcpy(&w, &x, 4);
        h = (w & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((w >> 16) | 0x40) : (uint16_t)((w + 0x7fffu + ((w >> 16) & 1)) >> 16);
    }
    ((uint16_t *)p)[i] = h;
}
/* GeLU (tanh) and its derivative, in double. */
static double lt_gelu(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double lt_dgelu(double x)
{
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}
/* GELU_AUX_BIAS and DGELU: the product (beta 0: C unread) in fp32 scratch, then the epilogue into
 * D and aux in D's 16-bit type. */
static cublasStatus_t lt_gelu_matmul(const struct emu_lt_desc *d, float alpha, const void *A,
                                     const struct emu_lt_layout *a, const void *B, const struct emu_lt_layout *b,
                                     float beta, void *D, const struct emu_lt_layout *dd, uint64_t m, uint64_t n,
                                     uint64_t k)
{
    int fwd = d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    if (!d->aux || (fwd && !d->bias) || beta != 0.0f) return CUBLAS_STATUS_INVALID_VALUE;
    float *acc = malloc((m * n > 0 ? m * n : 1) * sizeof(float));
    if (!acc) return CUBLAS_STATUS_ALLOC_FAILED;
    operand oa = {A, a->t, d->ta == CUBLAS_OP_T, (int)a->ld, 0}, ob = {B, b->t, d->tb == CUBLAS_OP_T, (int)b->ld, 0};
    cublasStatus_t s = gemm((int)m, (int)n, (int)k, alpha, &oa, &ob, 0.0f, acc, (int)m);
    for (uint64_t col = 0; s == CUBLAS_STATUS_SUCCESS && col < n; col++)
        for (uint64_t r = 0; r < m; r++) {
            size_t di = r + col * (uint64_t)dd->ld, ai = r + col * (uint64_t)d->aux_ld;
            float v = acc[r + col * m];
            if (fwd) {
                v += ((const float *)d->bias)[r];
                lt_st16(d->aux, ai, dd->t, v);
                lt_st16(D, di, dd->t, (float)lt_gelu(v));
            } else {
                lt_st16(D, di, dd->t, (float)(v * lt_dgelu(lt_ld16(d->aux, ai, dd->t))));
            }
        }
    free(acc);
    return s;
}

EMU_EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                                         cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                         cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd,
                                                         cublasLtMatmulPreference_t p, int requested,
                                                         cublasLtMatmulHeuristicResult_t results[], int *returned)
{
    (void)h, (void)p;
    uint64_t m, n, k;
    *returned = 0;
    if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    if (!lt_shape(d, a, b, c, dd, &m, &n, &k)) return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = 0x656d75; /* "emu" */
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                                         cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b,
                                         const void *beta, const void *C, cublasLtMatrixLayout_t c, void *D,
                                         cublasLtMatrixLayout_t dd, const cublasLtMatmulAlgo_t *algo, void *workspace,
                                         size_t workspace_size, cudaStream_t stream)
{
    (void)h, (void)workspace, (void)workspace_size, (void)stream;
    uint64_t m, n, k;
    if (!algo || algo->data[0] != 0x656d75) return CUBLAS_STATUS_INVALID_VALUE; /* from the heuristic */
    if (!lt_shape(d, a, b, c, dd, &m, &n, &k)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->epilogue == CUBLASLT_EPILOGUE_BIAS && !d->bias) return CUBLAS_STATUS_INVALID_VALUE;
    if (d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || d->epilogue == CUBLASLT_EPILOGUE_DGELU)
        return lt_gelu_matmul(d, *(const float *)alpha, A, a, B, b, *(const float *)beta, D, dd, m, n, k);
    float be = *(const float *)beta;
    if (be != 0.0f && C != D) { /* D = C first, then D = alpha op(A) op(B) + beta D */
        for (uint64_t col = 0; col < n; col++)
            for (uint64_t r = 0; r < m; r++)
                ((float *)D)[r + col * (uint64_t)dd->ld] = ((const float *)C)[r + col * (uint64_t)c->ld];
    }
    operand oa = {A, a->t, d->ta == CUBLAS_OP_T, (int)a->ld, 0}, ob = {B, b->t, d->tb == CUBLAS_OP_T, (int)b->ld, 0};
    cublasStatus_t s = gemm((int)m, (int)n, (int)k, *(const float *)alpha, &oa, &ob, be, (float *)D, (int)dd->ld);
    if (s != CUBLAS_STATUS_SUCCESS || d->epilogue != CUBLASLT_EPILOGUE_BIAS) return s;
    const float *bias = (const float *)d->bias;
    for (uint64_t col = 0; col < n; col++)
        for (uint64_t r = 0; r < m; r++) ((float *)D)[r + col * (uint64_t)dd->ld] += bias[r];
    return CUBLAS_STATUS_SUCCESS;
}
