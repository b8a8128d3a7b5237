/* The CUDA backend's GEMMs (cuBLAS), dtype conversion and measurements. cuBLAS is opened here when
 * the backend starts (dlopen of libcublas.so.13), not linked: loading it costs a process 0.24 s,
 * and most of trident's processes never use a GPU (docs/gpu.md). Row-major (BT, C) activations and
 * (OC, C) weights are cuBLAS's column-major transposes, so out = inp . W^T is, column-major,
 * out^T (OC, BT) = W^T^T . inp^T: op T on the weight, N on the input. fp32 GEMMs run in IEEE fp32
 * unless --tf32; the low-precision ones take bf16/fp16 A and B and accumulate in fp32 into fp32
 * (cublasGemmEx, CUBLAS_COMPUTE_32F). The MoE grouped GEMM (matmul_grouped_fwd/bwd) runs each
 * product's experts in one cublasSgemmGroupedBatched (cuBLAS 12.5+) when the loaded cuBLAS has it,
 * else one cublasSgemm an expert. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cu_common.cuh"
#include "cuda_core.h"
#include "trident/check.h"

#define CU_STR2(x) #x
#define CU_STR(x) CU_STR2(x)
#define CUBLAS_SONAME "libcublas.so." CU_STR(CUBLAS_VER_MAJOR)
#define CUBLASLT_SONAME "libcublasLt.so." CU_STR(CUBLAS_VER_MAJOR)

/* ---- cuBLAS, opened at run time ---- */

typedef cublasStatus_t (*cublas_create_fn)(cublasHandle_t *);
typedef cublasStatus_t (*cublas_destroy_fn)(cublasHandle_t);
typedef cublasStatus_t (*cublas_set_stream_fn)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*cublas_set_math_fn)(cublasHandle_t, cublasMath_t);
typedef cublasStatus_t (*cublas_version_fn)(cublasHandle_t, int *);
typedef const char *(*cublas_status_fn)(cublasStatus_t);
typedef cublasStatus_t (*cublas_sgemm_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                          const float *, const float *, int, const float *, int, const float *,
                                          float *, int);
typedef cublasStatus_t (*cublas_gemm_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                            const void *, const void *, cudaDataType, int, const void *,
                                            cudaDataType, int, const void *, void *, cudaDataType, int,
                                            cublasComputeType_t, cublasGemmAlgo_t);
typedef cublasStatus_t (*cublas_sgemm_grouped_fn)(cublasHandle_t, const cublasOperation_t[],
                                                  const cublasOperation_t[], const int[], const int[], const int[],
                                                  const float[], const float *const[], const int[],
                                                  const float *const[], const int[], const float[],
                                                  float *const[], const int[], int, const int[]);

static struct {
    void *lib;
    cublas_create_fn create;
    cublas_destroy_fn destroy;
    cublas_set_stream_fn set_stream;
    cublas_set_math_fn set_math;
    cublas_version_fn version;
    cublas_status_fn status_name;
    cublas_sgemm_fn sgemm;
    cublas_gemm_ex_fn gemm_ex;
    cublas_sgemm_grouped_fn sgemm_grouped; /* NULL: a cuBLAS before 12.5 */
    int grouped_off;                       /* cuda_set_grouped_batched(0): one cublasSgemm a group */
} g_blas;

static void *blas_sym(const char *name)
{
    void *f = dlsym(g_blas.lib, name);
    if (!f) {
        char text[512];
        snprintf(text, sizeof text, "%s has no %s: %s", CUBLAS_SONAME, name, dlerror());
        cu_fail("dlsym", "opening cuBLAS", text, "install the cuBLAS of CUDA " CU_STR(CUBLAS_VER_MAJOR), __FILE__,
                __LINE__);
    }
    return f;
}

static void blas_open(void)
{
    if (g_blas.lib) return;
    g_blas.lib = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!g_blas.lib) {
        char text[512];
        snprintf(text, sizeof text, "%s", dlerror());
        cu_fail("dlopen(" CUBLAS_SONAME ")", "opening cuBLAS", text,
                "install cuBLAS " CU_STR(CUBLAS_VER_MAJOR) " (the CUDA toolkit's lib64, or pip's nvidia-cublas) and "
                "name its folder in LD_LIBRARY_PATH",
                __FILE__, __LINE__);
    }
    g_blas.create = (cublas_create_fn)blas_sym("cublasCreate_v2");
    g_blas.destroy = (cublas_destroy_fn)blas_sym("cublasDestroy_v2");
    g_blas.set_stream = (cublas_set_stream_fn)blas_sym("cublasSetStream_v2");
    g_blas.set_math = (cublas_set_math_fn)blas_sym("cublasSetMathMode");
    g_blas.version = (cublas_version_fn)blas_sym("cublasGetVersion_v2");
    g_blas.status_name = (cublas_status_fn)blas_sym("cublasGetStatusName");
    g_blas.sgemm = (cublas_sgemm_fn)blas_sym("cublasSgemm_v2");
    g_blas.gemm_ex = (cublas_gemm_ex_fn)blas_sym("cublasGemmEx");
    g_blas.sgemm_grouped = (cublas_sgemm_grouped_fn)dlsym(g_blas.lib, "cublasSgemmGroupedBatched");
}

/* Whether the grouped GEMMs go through cublasSgemmGroupedBatched. */
static int grouped_batched(void) { return g_blas.sgemm_grouped && !g_blas.grouped_off; }

extern "C" int cuda_set_grouped_batched(int on)
{
    g_blas.grouped_off = !on;
    return grouped_batched();
}

static void blas_check(cublasStatus_t s, const char *call, const char *what, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS) return;
    char text[128];
    snprintf(text, sizeof text, "%s", g_blas.status_name ? g_blas.status_name(s) : "cuBLAS error");
    if (s == CUBLAS_STATUS_ALLOC_FAILED) cu_die(call, what, (int)cudaErrorMemoryAllocation, file, line);
    cu_fail(call, what, text, "check the sizes of the call; run under compute-sanitizer", file, line);
}
#define BLAS_CHECK(call, what) blas_check((call), #call, (what), __FILE__, __LINE__)

static cublasHandle_t blas(const backend *be) { return (cublasHandle_t)cu_state(be)->cublas; }

/* ---- cuBLASLt, opened at run time: 16-bit GEMMs with an epilogue ----
 * One call writes what a GEMM and then a kernel over its whole output would: the forward's bias
 * (out = inp . W^T + b), the GPT MLP's fc with its GeLU (the output and the pre-activation it keeps,
 * GELU_AUX_BIAS) and the backward's GeLU derivative on fc2's input gradient (DGELU). Anything
 * missing (no libcublasLt, a symbol) leaves every such path for the GEMM-then-kernel one, for
 * good; a refusal (a descriptor, no algorithm for the shape, the call) leaves that epilogue's
 * path, for good; each with one line on stderr. TRIDENT_CUDA_LT=0 asks for none (to compare).
 * cuBLAS itself links libcublasLt, so wherever cuBLAS opens this does too. */
#define CU_LT_WS ((size_t)8 << 20) /* 8 MiB from the pool, the first time */

/* The epilogues, column-major: D (m, n) = op(A) (m, k) . B (k, n), then
 *  LT_BIAS: D += bias (m) on every column, D fp32 (A = W^T, B = inp: out (BT, OC) row-major);
 *  LT_GELU_BIAS: aux = D + bias, D = gelu(aux), both in A's 16-bit type (the MLP's fc);
 *  LT_DGELU: D = D * gelu'(aux), in A's type (A = W as stored: fc2's input gradient). */
typedef enum { LT_BIAS, LT_GELU_BIAS, LT_DGELU, LT_KINDS } lt_kind;
static const char *const LT_NAMES[LT_KINDS] = {"bias epilogue", "GeLU epilogue (GELU_AUX_BIAS)",
                                              "GeLU-derivative epilogue (DGELU)"};

static struct {
    void *lib;
    int state; /* 0 not tried, 1 usable, -1 not (the GEMM-then-kernel path), 2 usable but set aside */
    int kind_off[LT_KINDS]; /* an epilogue cuBLASLt refused: its GEMM-then-kernel path for good */
    decltype(&cublasLtCreate) create;
    decltype(&cublasLtDestroy) destroy;
    decltype(&cublasLtMatmulDescCreate) desc_create;
    decltype(&cublasLtMatmulDescDestroy) desc_destroy;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set;
    decltype(&cublasLtMatrixLayoutCreate) layout_create;
    decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
    decltype(&cublasLtMatmulPreferenceCreate) pref_create;
    decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
    decltype(&cublasLtMatmul) matmul;
} g_lt;

static void lt_off(const char *why)
{
    if (g_lt.state != -1) fprintf(stderr, "cuda: cuBLASLt's epilogues are off (%s): a GEMM, then a kernel\n", why);
    g_lt.state = -1;
}
static void lt_kind_off(lt_kind kind, const char *why)
{
    if (!g_lt.kind_off[kind])
        fprintf(stderr, "cuda: cuBLASLt's %s is off (%s): a GEMM, then a kernel\n", LT_NAMES[kind], why);
    g_lt.kind_off[kind] = 1;
}

/* Opens cuBLASLt once; 1 when the epilogue path is usable. */
static int lt_open(void)
{
    if (g_lt.state) return g_lt.state == 1; /* 2: set aside by cuda_set_lt_bias(0) */
    const char *env = getenv("TRIDENT_CUDA_LT");
    if (env && strcmp(env, "0") == 0) {
        g_lt.state = -1; /* asked for: no line */
        return 0;
    }
    g_lt.lib = dlopen(CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!g_lt.lib) {
        lt_off(CUBLASLT_SONAME " does not open");
        return 0;
    }
#define LT_SYM(field, name)                                                   \
    if (!(g_lt.field = (decltype(g_lt.field))dlsym(g_lt.lib, name))) {        \
        lt_off(CUBLASLT_SONAME " has no " name);                              \
        return 0;                                                             \
    }
    LT_SYM(create, "cublasLtCreate")
    LT_SYM(destroy, "cublasLtDestroy")
    LT_SYM(desc_create, "cublasLtMatmulDescCreate")
    LT_SYM(desc_destroy, "cublasLtMatmulDescDestroy")
    LT_SYM(desc_set, "cublasLtMatmulDescSetAttribute")
    LT_SYM(layout_create, "cublasLtMatrixLayoutCreate")
    LT_SYM(layout_destroy, "cublasLtMatrixLayoutDestroy")
    LT_SYM(pref_create, "cublasLtMatmulPreferenceCreate")
    LT_SYM(pref_destroy, "cublasLtMatmulPreferenceDestroy")
    LT_SYM(pref_set, "cublasLtMatmulPreferenceSetAttribute")
    LT_SYM(heuristic, "cublasLtMatmulAlgoGetHeuristic")
    LT_SYM(matmul, "cublasLtMatmul")
#undef LT_SYM
    g_lt.state = 1;
    return 1;
}

extern "C" int cuda_set_lt_bias(int on)
{
    if (!on) {
        if (g_lt.state == 1) g_lt.state = 2; /* usable, set aside */
        return 0;
    }
    if (g_lt.state == 2) g_lt.state = 1;
    return lt_open();
}

/* A shape's descriptors and algorithm, made once and kept (the heuristic costs host time at every
 * call otherwise, on the hot path): LT_PLANS shapes, the oldest replaced. Handle-independent; the
 * bias and aux pointers are set on the descriptor at each call. */
#define LT_PLANS 16
typedef struct lt_plan {
    int used;
    lt_kind kind;
    cudaDataType t; /* A's and B's */
    int m, n, k;
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} lt_plan;
static lt_plan g_lt_plans[LT_PLANS];
static int g_lt_next;

static void lt_plan_free(lt_plan *p)
{
    if (p->lc) g_lt.layout_destroy(p->lc);
    if (p->lb) g_lt.layout_destroy(p->lb);
    if (p->la) g_lt.layout_destroy(p->la);
    if (p->d) g_lt.desc_destroy(p->d);
    memset(p, 0, sizeof *p);
}

/* The plan of (kind, t, m, n, k): kept, or made now; NULL when cuBLASLt refused it (*step says
 * where). A is W: stored (k, m), transposed, for the forward kinds; (m, k) for LT_DGELU. D is
 * fp32 for LT_BIAS, t for the GeLU kinds (whose aux, ld m, is t as well). aux: the call's. */
static lt_plan *lt_plan_of(cublasLtHandle_t h, lt_kind kind, cudaDataType t, int m, int n, int k, const void *aux,
                           const char **step)
{
    for (int i = 0; i < LT_PLANS; i++) {
        lt_plan *p = &g_lt_plans[i];
        if (p->used && p->kind == kind && p->t == t && p->m == m && p->n == n && p->k == k) return p;
    }
    lt_plan *p = &g_lt_plans[g_lt_next];
    g_lt_next = (g_lt_next + 1) % LT_PLANS;
    lt_plan_free(p);
    cublasLtMatmulPreference_t pr = NULL;
    cublasLtMatmulHeuristicResult_t hr;
    memset(&hr, 0, sizeof hr);
    int found = 0;
    cublasOperation_t ta = kind == LT_DGELU ? CUBLAS_OP_N : CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t ep = kind == LT_BIAS ? CUBLASLT_EPILOGUE_BIAS
                            : kind == LT_GELU_BIAS ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                   : CUBLASLT_EPILOGUE_DGELU;
    cudaDataType bias_t = CUDA_R_32F, dt = kind == LT_BIAS ? CUDA_R_32F : t;
    int64_t aux_ld = m;
    size_t ws = CU_LT_WS;
    const cublasStatus_t ok = CUBLAS_STATUS_SUCCESS;
    *step = "a descriptor";
    int done = g_lt.desc_create(&p->d, CUBLAS_COMPUTE_32F, CUDA_R_32F) == ok &&
               g_lt.desc_set(p->d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == ok &&
               g_lt.desc_set(p->d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == ok &&
               g_lt.desc_set(p->d, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep) == ok &&
               (kind == LT_DGELU ||
                g_lt.desc_set(p->d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t, sizeof bias_t) == ok) &&
               (kind == LT_BIAS ||
                (g_lt.desc_set(p->d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld) == ok &&
                 g_lt.desc_set(p->d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux) == ok)) &&
               (ta == CUBLAS_OP_T ? g_lt.layout_create(&p->la, t, k, m, k) : g_lt.layout_create(&p->la, t, m, k, m)) ==
                   ok &&
               g_lt.layout_create(&p->lb, t, k, n, k) == ok && g_lt.layout_create(&p->lc, dt, m, n, m) == ok &&
               g_lt.pref_create(&pr) == ok &&
               g_lt.pref_set(pr, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) == ok;
    if (done) {
        *step = "an algorithm for the shape";
        done = g_lt.heuristic(h, p->d, p->la, p->lb, p->lc, p->lc, pr, 1, &hr, &found) == ok && found > 0;
    }
    if (pr) g_lt.pref_destroy(pr);
    if (!done) {
        lt_plan_free(p);
        return NULL;
    }
    p->used = 1, p->kind = kind, p->t = t, p->m = m, p->n = n, p->k = k;
    p->algo = hr.algo;
    return p;
}

/* D (m, n) = op(A) . B with epilogue `kind` through one cublasLtMatmul (see lt_kind; b the bias or
 * NULL, aux the pre-activation or NULL). 1 when it ran; 0 when cuBLASLt or this epilogue is off or
 * was refused now (nothing written: the caller runs the GEMM and the kernel). */
static int lt_matmul(const backend *be, lt_kind kind, void *d, const void *a, const void *bmat, const float *b,
                     const void *aux, cudaDataType t, int m, int n, int k)
{
    if (!lt_open() || g_lt.kind_off[kind]) return 0;
    cuda_state *st = cu_state(be);
    if (!st->cublaslt) {
        cublasLtHandle_t h;
        if (g_lt.create(&h) != CUBLAS_STATUS_SUCCESS) {
            lt_off("cublasLtCreate failed");
            return 0;
        }
        st->cublaslt = h;
    }
    if (!st->lt_ws)
        CU_CHECK(cudaMallocAsync(&st->lt_ws, CU_LT_WS, cu_stream(be)), "allocating cuBLASLt's workspace");
    cublasLtHandle_t h = (cublasLtHandle_t)st->cublaslt;
    const float one = 1.0f, zero = 0.0f;
    const char *step = "";
    lt_plan *p = lt_plan_of(h, kind, t, m, n, k, aux, &step);
    int done = p != NULL;
    if (done) {
        const cublasStatus_t ok = CUBLAS_STATUS_SUCCESS;
        step = "cublasLtMatmul";
        done = (!b || g_lt.desc_set(p->d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b) == ok) &&
               (!aux || g_lt.desc_set(p->d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux) == ok) &&
               g_lt.matmul(h, p->d, &one, a, p->la, bmat, p->lb, &zero, d, p->lc, d, p->lc, &p->algo, st->lt_ws,
                           CU_LT_WS, cu_stream(be)) == ok;
    }
    if (!done) {
        char why[160];
        snprintf(why, sizeof why, "%s refused at %d x %d x %d", step, m, n, k);
        lt_kind_off(kind, why);
    }
    return done;
}

void cuda_gemm_init(backend *be)
{
    blas_open();
    cublasHandle_t h;
    BLAS_CHECK(g_blas.create(&h), "creating the cuBLAS handle");
    BLAS_CHECK(g_blas.set_stream(h, cu_stream(be)), "putting cuBLAS on the backend's stream");
    cu_state(be)->cublas = h;
}

void cuda_gemm_destroy(backend *be)
{
    cuda_state *st = cu_state(be);
    if (st->lt_ws) CU_CHECK(cudaFreeAsync(st->lt_ws, cu_stream(be)), "freeing cuBLASLt's workspace");
    st->lt_ws = NULL;
    if (st->cublaslt) {
        for (int i = 0; i < LT_PLANS; i++) lt_plan_free(&g_lt_plans[i]);
        g_lt.destroy((cublasLtHandle_t)st->cublaslt);
    }
    st->cublaslt = NULL;
    if (st->cublas) BLAS_CHECK(g_blas.destroy(blas(be)), "destroying the cuBLAS handle");
    st->cublas = NULL;
}

void cuda_gemm_describe(const backend *be, char *out, size_t len)
{
    int v = 0;
    BLAS_CHECK(g_blas.version(blas(be), &v), "reading cuBLAS's version");
    snprintf(out, len, "cuBLAS %d.%d.%d (MoE grouped GEMM: %s; 16-bit GEMMs' bias: %s)", v / 10000, v / 100 % 100,
             v % 100, grouped_batched() ? "cublasSgemmGroupedBatched" : "a cublasSgemm an expert",
             lt_open() && !g_lt.kind_off[LT_BIAS] ? "cuBLASLt epilogue" : "a kernel");
}

/* ---- kernels ---- */

static unsigned blocks_for(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 65535 * 16 ? (b ? b : 1) : 65535 * 16);
}

/* out (N, C) += b on every row. */
__global__ void k_bias_rows(float *out, const float *b, size_t N, int C)
{
    size_t total = N * (size_t)C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        out[i] += b[i % (size_t)C];
}

/* db (C) += column sums of x (N, C): each column summed from 0 into a float over the rows in
 * order, then added, as the cpu's cpu_colsum_acc (the same bits). Deterministic. */
__global__ void k_colsum_acc(float *db, const float *x, int N, int C)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= C) return;
    float acc = 0.0f;
    for (int n = 0; n < N; n++) acc += x[(size_t)n * C + j];
    db[j] += acc;
}

/* The group of row r: the g with off[g] <= r < off[g + 1] (off (G + 1) ascending, off[0] = 0). */
__device__ __forceinline__ int d_group_of(const int64_t *off, int G, int64_t r)
{
    int lo = 0, hi = G - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (off[mid] <= r) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* out (N, OC) += b_g on each row, g the row's group by the row offsets off (G + 1). */
__global__ void k_grouped_bias(float *out, const float *b, const int64_t *off, int G, size_t N, int OC)
{
    size_t total = N * (size_t)OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int64_t r = (int64_t)(i / (size_t)OC);
        int g = d_group_of(off, G, r);
        out[i] += b[(size_t)g * OC + i % (size_t)OC];
    }
}

/* db_g (OC) += column sums of x_g (the rows off[g] .. off[g+1] of x (N, OC)), group g =
 * blockIdx.y: each column added into db row by row in order, as the cpu's
 * cpu_matmul_grouped_bwd (the same bits). Deterministic. */
__global__ void k_grouped_colsum_acc(float *db, const float *x, const int64_t *off, int OC)
{
    int g = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= OC) return;
    int64_t r0 = off[g], r1 = off[g + 1];
    if (r0 == r1) return;
    float acc = db[(size_t)g * OC + j];
    for (int64_t r = r0; r < r1; r++) acc += x[(size_t)r * OC + j];
    db[(size_t)g * OC + j] = acc;
}

/* convert's roundings: cu_common.cuh (d_f32_to_bf16, d_f32_to_f16 and their widenings) */
__global__ void k_convert(void *dst, int dt, const void *src, int st, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float f = st == BE_F32    ? ((const float *)src)[i]
                  : st == BE_BF16 ? d_bf16_to_f32(((const uint16_t *)src)[i])
                                  : d_f16_to_f32(((const uint16_t *)src)[i]);
        if (dt == BE_F32) ((float *)dst)[i] = f;
        else ((uint16_t *)dst)[i] = dt == BE_BF16 ? d_f32_to_bf16(f) : d_f32_to_f16(f);
    }
}

/* AdamW's memory traffic without its arithmetic (adamw_stream_gbps). */
__global__ void k_adamw_stream(float *p, const float *g, float *m, float *v, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i];
        m[i] = m[i] * 0.5f + gi;
        v[i] = v[i] * 0.5f + gi;
        p[i] = p[i] - gi;
    }
}

/* x (n) = small values that are not all equal (a GEMM timed on zeros runs faster than on data). */
__global__ void k_fill_pattern(float *x, size_t n, int mod)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = (float)(i % (size_t)mod) * 0.01f - 0.02f;
}

/* ---- dtype checks: the entry is named, as the cpu's ops.c does ---- */

#define CU_DTYPE_HINT "the cuda backend's GEMMs take fp32 activations (matmul_fwd/bwd) or the GEMM's dtype (_lp)"

static float *out32(be_out x, const char *entry)
{
    TD_CHECK(x.dt == BE_F32 || !x.p, CU_DTYPE_HINT, "cuda %s: a %s output buffer", entry, be_dtype_name(x.dt));
    return (float *)x.p;
}
static const float *in32(be_in x, const char *entry)
{
    TD_CHECK(x.dt == BE_F32 || !x.p, CU_DTYPE_HINT, "cuda %s: a %s input buffer", entry, be_dtype_name(x.dt));
    return (const float *)x.p;
}
static const void *in_lp(be_in x, be_dtype dt, const char *entry)
{
    TD_CHECK(x.dt == dt || !x.p, "round a low-precision GEMM's inputs into its dtype first (be_convert)",
             "cuda %s: a %s input to a %s GEMM", entry, be_dtype_name(x.dt), be_dtype_name(dt));
    return x.p;
}
static cudaDataType cu_type(be_dtype dt, const char *entry)
{
    TD_CHECK(dt == BE_BF16 || dt == BE_F16, "a low-precision GEMM runs in bf16 or fp16",
             "cuda %s: a GEMM in %s", entry, be_dtype_name(dt));
    return dt == BE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* ---- the entries ---- */

static void set_fp32_math(const backend *be)
{
    BLAS_CHECK(g_blas.set_math(blas(be), cu_state(be)->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
               "setting cuBLAS's fp32 math mode");
}

static void bias_rows(const backend *be, float *out, const float *b, int BT, int OC)
{
    if (!b || !BT || !OC) return;
    k_bias_rows<<<blocks_for((size_t)BT * OC, 256), 256, 0, cu_stream(be)>>>(out, b, (size_t)BT, OC);
    CU_LAUNCHED("k_bias_rows");
}

static void colsum_acc(const backend *be, float *db, const float *x, int N, int C)
{
    if (!db || !C) return;
    k_colsum_acc<<<(C + 127) / 128, 128, 0, cu_stream(be)>>>(db, x, N, C);
    CU_LAUNCHED("k_colsum_acc");
}

static void cu_matmul_fwd(const backend *be, be_out out, be_in inp, const float *w, const float *b, int BT, int C,
                          int OC)
{
    float *o = out32(out, "matmul_fwd");
    const float *x = in32(inp, "matmul_fwd");
    if (!BT || !OC) return;
    const float one = 1.0f, zero = 0.0f;
    set_fp32_math(be);
    BLAS_CHECK(g_blas.sgemm(blas(be), CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, C, &one, w, C, x, C, &zero, o, OC),
               "matmul_fwd (cublasSgemm)");
    bias_rows(be, o, b, BT, OC);
}

static void cu_matmul_bwd(const backend *be, be_out dinp, float *dw, float *db, be_in dout, be_in inp,
                          const float *w, int BT, int C, int OC)
{
    float *dx = out32(dinp, "matmul_bwd");
    const float *dy = in32(dout, "matmul_bwd"), *x = in32(inp, "matmul_bwd");
    const float one = 1.0f;
    set_fp32_math(be);
    if (dx && BT && C) /* dinp^T (C, BT) += W^T (C, OC) . dout^T (OC, BT) */
        BLAS_CHECK(g_blas.sgemm(blas(be), CUBLAS_OP_N, CUBLAS_OP_N, C, BT, OC, &one, w, C, dy, OC, &one, dx, C),
                   "matmul_bwd dinp (cublasSgemm)");
    if (dw && C && OC) /* dW^T (C, OC) += inp^T (C, BT) . dout (BT, OC) */
        BLAS_CHECK(g_blas.sgemm(blas(be), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, BT, &one, x, C, dy, OC, &one, dw, C),
                   "matmul_bwd dW (cublasSgemm)");
    colsum_acc(be, db, dy, BT, OC);
}

/* ---- the MoE grouped GEMM ----
 * One product of the G experts is a list of GEMMs, one an expert with rows: through
 * cublasSgemmGroupedBatched each is a cuBLAS group of one problem (its m, n, k, ld and scalars in
 * host arrays, its A, B and C pointers in device arrays), else one cublasSgemm each. The device
 * side of a call (the row offsets the bias and db kernels read, the pointer arrays) is one block
 * of stream-ordered scratch filled by one staged H2D copy, which returns once the host's copy may
 * be reused: nothing waits for the queue. */

enum { GP_FWD, GP_DINP, GP_DW, GP_PRODUCTS };

typedef struct grouped_plan {
    int G, k;                  /* experts; experts with rows */
    int64_t *off;              /* (G + 1) host row offsets */
    int *gi;                   /* (k) the experts with rows, ascending */
    unsigned char *host;       /* the scratch's host image */
    size_t bytes;              /* its size */
    void *dev;                 /* the scratch on the device */
} grouped_plan;

/* The scratch: off (G + 1) int64, then nprod products' A, B and C pointer arrays (k each). */
static const float **plan_ptrs(const grouped_plan *p, unsigned char *base, int prod, int which)
{
    size_t at = (size_t)(p->G + 1) * sizeof(int64_t) + ((size_t)prod * 3 + which) * (size_t)p->k * sizeof(float *);
    return (const float **)(base + at);
}

static void plan_make(grouped_plan *p, const int32_t *counts, int G, int nprod)
{
    p->G = G;
    p->k = 0;
    p->off = (int64_t *)td_xmalloc((size_t)(G + 1) * sizeof(int64_t));
    p->gi = (int *)td_xmalloc((size_t)(G ? G : 1) * sizeof(int));
    p->off[0] = 0;
    for (int g = 0; g < G; g++) {
        TD_CHECK(counts[g] >= 0, "a group's row count is >= 0", "cuda matmul_grouped: group %d has %d rows", g,
                 (int)counts[g]);
        p->off[g + 1] = p->off[g] + counts[g];
        if (counts[g]) p->gi[p->k++] = g;
    }
    p->bytes = (size_t)(G + 1) * sizeof(int64_t) + (size_t)nprod * 3 * (size_t)p->k * sizeof(float *);
    p->host = (unsigned char *)td_xmalloc(p->bytes);
    memcpy(p->host, p->off, (size_t)(G + 1) * sizeof(int64_t));
    p->dev = NULL;
}

/* Product prod's pointers: A_i, B_i, C_i of the i-th expert with rows. */
static void plan_set(grouped_plan *p, int prod, int i, const float *a, const float *b, float *c)
{
    plan_ptrs(p, p->host, prod, 0)[i] = a;
    plan_ptrs(p, p->host, prod, 1)[i] = b;
    plan_ptrs(p, p->host, prod, 2)[i] = c;
}

/* The host image to the device (enqueued; the host's copy reusable on return). */
static void plan_upload(const backend *be, grouped_plan *p)
{
    p->dev = be->ops->alloc(be, p->bytes);
    be->ops->copy_bytes(be, p->dev, p->host, p->bytes, BE_H2D);
}

static void plan_free(const backend *be, grouped_plan *p)
{
    if (p->dev) be->ops->free(be, p->dev); /* stream-ordered: after the queued kernels that read it */
    free(p->off), free(p->gi), free(p->host);
}

/* C_i (m_i, n_i) = alpha op(A_i) op(B_i) + beta C_i over the k experts with rows, column-major as
 * cublasSgemm; m, n, kk, lda, ldb, ldc (k) host arrays; the pointers product prod of the plan. */
static void grouped_gemm(const backend *be, const grouped_plan *p, int prod, cublasOperation_t ta,
                         cublasOperation_t tb, const int *m, const int *n, const int *kk, const int *lda,
                         const int *ldb, const int *ldc, float beta, const char *what)
{
    int k = p->k;
    const float one = 1.0f;
    if (grouped_batched()) {
        cublasOperation_t *tas = (cublasOperation_t *)td_xmalloc((size_t)k * sizeof *tas);
        cublasOperation_t *tbs = (cublasOperation_t *)td_xmalloc((size_t)k * sizeof *tbs);
        float *alpha = (float *)td_xmalloc((size_t)k * sizeof(float));
        float *betas = (float *)td_xmalloc((size_t)k * sizeof(float));
        int *size = (int *)td_xmalloc((size_t)k * sizeof(int));
        for (int i = 0; i < k; i++) tas[i] = ta, tbs[i] = tb, alpha[i] = one, betas[i] = beta, size[i] = 1;
        unsigned char *d = (unsigned char *)p->dev;
        cublasStatus_t st = g_blas.sgemm_grouped(blas(be), tas, tbs, m, n, kk, alpha, plan_ptrs(p, d, prod, 0), lda,
                                                 plan_ptrs(p, d, prod, 1), ldb, betas,
                                                 (float *const *)plan_ptrs(p, d, prod, 2), ldc, k, size);
        free(tas), free(tbs), free(alpha), free(betas), free(size);
        if (st != CUBLAS_STATUS_NOT_SUPPORTED) {
            blas_check(st, "cublasSgemmGroupedBatched", what, __FILE__, __LINE__);
            return;
        }
        /* this cuBLAS has the call but not for this device: one cublasSgemm an expert from now on */
        fprintf(stderr, "cuda: cublasSgemmGroupedBatched is not supported here (%s): the MoE grouped GEMM runs one "
                        "cublasSgemm an expert\n",
                g_blas.status_name(st));
        g_blas.sgemm_grouped = NULL;
    }
    for (int i = 0; i < k; i++)
        blas_check(g_blas.sgemm(blas(be), ta, tb, m[i], n[i], kk[i], &one, plan_ptrs(p, p->host, prod, 0)[i], lda[i],
                                plan_ptrs(p, p->host, prod, 1)[i], ldb[i], &beta,
                                (float *)plan_ptrs(p, p->host, prod, 2)[i], ldc[i]),
                   "cublasSgemm", what, __FILE__, __LINE__);
}

/* The per-expert sizes of the k experts with rows: rows[i] = counts of the i-th, the rest x, y. */
typedef struct grouped_dims {
    int *rows, *x, *y;
} grouped_dims;

static grouped_dims dims_make(const grouped_plan *p, int x, int y)
{
    grouped_dims d;
    size_t n = (size_t)(p->k ? p->k : 1) * sizeof(int);
    d.rows = (int *)td_xmalloc(n), d.x = (int *)td_xmalloc(n), d.y = (int *)td_xmalloc(n);
    for (int i = 0; i < p->k; i++) {
        int g = p->gi[i];
        d.rows[i] = (int)(p->off[g + 1] - p->off[g]), d.x[i] = x, d.y[i] = y;
    }
    return d;
}
static void dims_free(grouped_dims *d) { free(d->rows), free(d->x), free(d->y); }

static void cu_matmul_grouped_fwd(const backend *be, float *out, const float *inp, const float *w, const float *b,
                                  const int32_t *counts, int G, int C, int OC)
{
    if (G <= 0 || OC <= 0) return;
    grouped_plan p;
    plan_make(&p, counts, G, 1);
    int64_t N = p.off[G];
    if (N == 0) {
        plan_free(be, &p);
        return;
    }
    for (int i = 0; i < p.k; i++) {
        int g = p.gi[i];
        plan_set(&p, GP_FWD, i, w + (size_t)g * OC * C, inp + (size_t)p.off[g] * C, out + (size_t)p.off[g] * OC);
    }
    plan_upload(be, &p);
    set_fp32_math(be);
    /* out_g^T (OC, n_g) = W_g^T^T (op T on W_g (C, OC) column-major) . inp_g^T (C, n_g) */
    grouped_dims oc = dims_make(&p, OC, C), cc = dims_make(&p, C, OC);
    grouped_gemm(be, &p, GP_FWD, CUBLAS_OP_T, CUBLAS_OP_N, oc.x, oc.rows, oc.y, cc.x, cc.x, oc.x, 0.0f,
                 "matmul_grouped_fwd");
    dims_free(&oc), dims_free(&cc);
    if (b) {
        k_grouped_bias<<<blocks_for((size_t)N * OC, 256), 256, 0, cu_stream(be)>>>(out, b, (const int64_t *)p.dev, G,
                                                                                  (size_t)N, OC);
        CU_LAUNCHED("k_grouped_bias");
    }
    plan_free(be, &p);
}

static void cu_matmul_grouped_bwd(const backend *be, float *dinp, float *dw, float *db, const float *dout,
                                  const float *inp, const float *w, const int32_t *counts, int G, int C, int OC)
{
    if (G <= 0 || OC <= 0 || (!dinp && !dw && !db)) return;
    grouped_plan p;
    plan_make(&p, counts, G, GP_PRODUCTS);
    if (p.off[G] == 0) {
        plan_free(be, &p);
        return;
    }
    for (int i = 0; i < p.k; i++) {
        int g = p.gi[i];
        size_t r = (size_t)p.off[g];
        const float *wg = w + (size_t)g * OC * C, *dy = dout + r * OC, *x = inp + r * C;
        plan_set(&p, GP_DINP, i, wg, dy, dinp ? dinp + r * C : NULL);
        plan_set(&p, GP_DW, i, x, dy, dw ? dw + (size_t)g * OC * C : NULL);
    }
    plan_upload(be, &p);
    set_fp32_math(be);
    grouped_dims cc = dims_make(&p, C, OC);
    if (dinp && C) /* dinp_g^T (C, n_g) += W_g^T (C, OC) . dout_g^T (OC, n_g) */
        grouped_gemm(be, &p, GP_DINP, CUBLAS_OP_N, CUBLAS_OP_N, cc.x, cc.rows, cc.y, cc.x, cc.y, cc.x, 1.0f,
                     "matmul_grouped_bwd dinp");
    if (dw && C) /* dW_g^T (C, OC) += inp_g^T (C, n_g) . dout_g (n_g, OC) */
        grouped_gemm(be, &p, GP_DW, CUBLAS_OP_N, CUBLAS_OP_T, cc.x, cc.y, cc.rows, cc.x, cc.y, cc.x, 1.0f,
                     "matmul_grouped_bwd dW");
    dims_free(&cc);
    if (db) {
        dim3 grid((unsigned)((OC + 127) / 128), (unsigned)G);
        k_grouped_colsum_acc<<<grid, 128, 0, cu_stream(be)>>>(db, dout, (const int64_t *)p.dev, OC);
        CU_LAUNCHED("k_grouped_colsum_acc");
    }
    plan_free(be, &p);
}

static void cu_matmul_fwd_lp(const backend *be, be_out out, be_in inp, const void *w, const float *b, be_dtype dt,
                             int BT, int C, int OC)
{
    cudaDataType t = cu_type(dt, "matmul_fwd_lp");
    const void *x = in_lp(inp, dt, "matmul_fwd_lp");
    int lp_out = out.p && out.dt == dt; /* the product rounded into dt (a 16-bit run's logits), the bias after */
    if (!lp_out) out32(out, "matmul_fwd_lp");
    if (!BT || !OC) return;
    if (!lp_out && b && C && lt_matmul(be, LT_BIAS, out.p, w, x, b, NULL, t, OC, BT, C)) return; /* bias as epilogue */
    const float one = 1.0f, zero = 0.0f;
    BLAS_CHECK(g_blas.gemm_ex(blas(be), CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, C, &one, w, t, C, x, t, C, &zero, out.p,
                              lp_out ? t : CUDA_R_32F, OC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "matmul_fwd_lp (cublasGemmEx)");
    if (lp_out && b) be->ops->bias_add(be, out, b, BT, OC);
    else bias_rows(be, (float *)out.p, b, BT, OC);
}

/* fc and its GeLU in one cublasLtMatmul (GELU_AUX_BIAS): act and pre in dt; 0 where cuBLASLt is off
 * or refuses it (the caller then runs the GEMM and bias_gelu_fwd). */
static int cu_matmul_gelu_fwd_lp(const backend *be, be_out act, be_out pre, be_in inp, const void *w, const float *b,
                                 be_dtype dt, int BT, int C, int OC)
{
    cudaDataType t = cu_type(dt, "matmul_gelu_fwd_lp");
    TD_CHECK(act.dt == dt && pre.dt == dt, "write fc's GeLU and pre-activation in the GEMM's dtype",
             "cuda matmul_gelu_fwd_lp: %s and %s outputs of a %s GEMM", be_dtype_name(act.dt), be_dtype_name(pre.dt),
             be_dtype_name(dt));
    const void *x = in_lp(inp, dt, "matmul_gelu_fwd_lp");
    if (!BT || !OC) return 1;
    if (!b || !C) return 0;
    return lt_matmul(be, LT_GELU_BIAS, act.p, w, x, b, pre.p, t, OC, BT, C);
}

/* fc2's input gradient with GeLU's derivative at pre in one cublasLtMatmul (DGELU): D (C, BT) =
 * W as (C, OC) . dout as (OC, BT), times gelu'(pre); 0 where refused. */
static int cu_matmul_dgelu_bwd_lp(const backend *be, be_out dinp, be_in dout, const void *w, be_in pre, be_dtype dt,
                                  int BT, int C, int OC)
{
    cudaDataType t = cu_type(dt, "matmul_dgelu_bwd_lp");
    TD_CHECK(dinp.dt == dt && pre.dt == dt, "pass the GeLU's pre-activation and gradient in the GEMM's dtype",
             "cuda matmul_dgelu_bwd_lp: %s and %s buffers of a %s GEMM", be_dtype_name(dinp.dt), be_dtype_name(pre.dt),
             be_dtype_name(dt));
    const void *g = in_lp(dout, dt, "matmul_dgelu_bwd_lp");
    if (!BT || !C) return 1;
    if (!OC) return 0;
    return lt_matmul(be, LT_DGELU, dinp.p, w, g, NULL, pre.p, t, C, BT, OC);
}

static void cu_matmul_bwd_lp(const backend *be, be_out dinp, float *dw, be_in dout, be_in inp, const void *w,
                             be_dtype dt, int BT, int C, int OC)
{
    cudaDataType t = cu_type(dt, "matmul_bwd_lp");
    float *dx = out32(dinp, "matmul_bwd_lp");
    const void *dy = in_lp(dout, dt, "matmul_bwd_lp"), *x = in_lp(inp, dt, "matmul_bwd_lp");
    const float one = 1.0f;
    if (dx && BT && C)
        BLAS_CHECK(g_blas.gemm_ex(blas(be), CUBLAS_OP_N, CUBLAS_OP_N, C, BT, OC, &one, w, t, C, dy, t, OC, &one, dx,
                                  CUDA_R_32F, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "matmul_bwd_lp dinp (cublasGemmEx)");
    if (dw && C && OC)
        BLAS_CHECK(g_blas.gemm_ex(blas(be), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, BT, &one, x, t, C, dy, t, OC, &one, dw,
                                  CUDA_R_32F, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "matmul_bwd_lp dW (cublasGemmEx)");
}

static void cu_convert(const backend *be, void *dst, be_dtype dt, const void *src, be_dtype st, size_t n)
{
    if (!n) return;
    if (dt == st) {
        if (dst != src)
            CU_CHECK(cudaMemcpyAsync(dst, src, n * be_dtype_size(dt), cudaMemcpyDeviceToDevice, cu_stream(be)),
                     "convert (a copy)");
        return;
    }
    k_convert<<<blocks_for(n, 256), 256, 0, cu_stream(be)>>>(dst, (int)dt, src, (int)st, n);
    CU_LAUNCHED("k_convert");
}

/* bf16 GEMMs on tensor cores from sm_80 (A100), fp16 from sm_70. */
static int cu_lp_native(const backend *be, be_dtype dt)
{
    int sm = cu_state(be)->sm;
    return dt == BE_BF16 ? sm >= 80 : dt == BE_F16 ? sm >= 70 : 0;
}

/* Best of up to 10 square GEMMs (N = 4096: 137 GFLOP each) in the backend's gemm dtype after a
 * warm-up, timed by events. */
static double cu_peak_gflops(const backend *be)
{
    const int N = 4096;
    size_t nn = (size_t)N * N;
    be_dtype dt = be->gemm_dtype;
    float *a = (float *)be->ops->alloc(be, nn * 4), *b = (float *)be->ops->alloc(be, nn * 4);
    float *c = (float *)be->ops->alloc(be, nn * 4);
    k_fill_pattern<<<blocks_for(nn, 256), 256, 0, cu_stream(be)>>>(a, nn, 7);
    CU_LAUNCHED("k_fill_pattern");
    k_fill_pattern<<<blocks_for(nn, 256), 256, 0, cu_stream(be)>>>(b, nn, 5);
    CU_LAUNCHED("k_fill_pattern");
    void *al = a, *bl = b;
    if (dt != BE_F32) {
        al = be->ops->alloc(be, nn * 2);
        bl = be->ops->alloc(be, nn * 2);
        cu_convert(be, al, dt, a, BE_F32, nn);
        cu_convert(be, bl, dt, b, BE_F32, nn);
    }
    double best = 1e30;
    for (int r = 0; r <= 10; r++) {
        be_event t0, t1;
        be->ops->event_record(be, &t0);
        be_out co = {c, BE_F32};
        if (dt == BE_F32) {
            be_in ai = {a, BE_F32};
            cu_matmul_fwd(be, co, ai, b, NULL, N, N, N);
        } else {
            be_in ai = {al, dt};
            cu_matmul_fwd_lp(be, co, ai, bl, NULL, dt, N, N, N);
        }
        be->ops->event_record(be, &t1);
        double s = be->ops->event_elapsed(be, &t0, &t1);
        if (r > 0 && s < best) best = s;
    }
    if (dt != BE_F32) {
        be->ops->free(be, al);
        be->ops->free(be, bl);
    }
    be->ops->free(be, a);
    be->ops->free(be, b);
    be->ops->free(be, c);
    be->ops->sync(be);
    return 2.0 * N * N * (double)N / best * 1e-9;
}

/* AdamW's streams (p, g, m, v read, p, m, v written) over 64 Mi elements (1 GB, beyond the 50-60
 * MB L2), best of five after a warm-up; bytes as be_adamw_bytes. */
static double cu_adamw_stream_gbps(const backend *be)
{
    size_t n = (size_t)64 << 20;
    float *p = (float *)be->ops->alloc(be, n * 4), *g = (float *)be->ops->alloc(be, n * 4);
    float *m = (float *)be->ops->alloc(be, n * 4), *v = (float *)be->ops->alloc(be, n * 4);
    k_fill_pattern<<<blocks_for(n, 256), 256, 0, cu_stream(be)>>>(g, n, 3);
    CU_LAUNCHED("k_fill_pattern");
    be->ops->set_bytes(be, p, 0, n * 4);
    be->ops->set_bytes(be, m, 0, n * 4);
    be->ops->set_bytes(be, v, 0, n * 4);
    double best = 1e30;
    for (int r = 0; r <= 5; r++) {
        be_event t0, t1;
        be->ops->event_record(be, &t0);
        k_adamw_stream<<<blocks_for(n, 256), 256, 0, cu_stream(be)>>>(p, g, m, v, n);
        CU_LAUNCHED("k_adamw_stream");
        be->ops->event_record(be, &t1);
        double s = be->ops->event_elapsed(be, &t0, &t1);
        if (r > 0 && s < best) best = s;
    }
    be->ops->free(be, p);
    be->ops->free(be, g);
    be->ops->free(be, m);
    be->ops->free(be, v);
    be->ops->sync(be);
    return (4.0 + 3.0) * 4.0 * (double)n / best * 1e-9;
}

/* cuBLASLt's workspace, allocated at a 16-bit run's first epilogue GEMM (none in an fp32 run, nor
 * where cuBLASLt is off or missing). */
static size_t cu_lib_workspace_bytes(const backend *be)
{
    return be->gemm_dtype != BE_F32 && lt_open() ? CU_LT_WS : 0;
}

void cuda_fill_gemm(struct be_ops *o)
{
    o->matmul_fwd = cu_matmul_fwd;
    o->matmul_bwd = cu_matmul_bwd;
    o->matmul_grouped_fwd = cu_matmul_grouped_fwd;
    o->matmul_grouped_bwd = cu_matmul_grouped_bwd;
    o->matmul_fwd_lp = cu_matmul_fwd_lp;
    o->matmul_gelu_fwd_lp = cu_matmul_gelu_fwd_lp;
    o->matmul_dgelu_bwd_lp = cu_matmul_dgelu_bwd_lp;
    o->matmul_bwd_lp = cu_matmul_bwd_lp;
    o->convert = cu_convert;
    o->lp_native = cu_lp_native;
    o->peak_gflops = cu_peak_gflops;
    o->adamw_stream_gbps = cu_adamw_stream_gbps;
    o->lib_workspace_bytes = cu_lib_workspace_bytes;
}
