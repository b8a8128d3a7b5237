/* The CPU backend's kernels (OpenBLAS sgemm + OpenMP), one file per family. Private to
 * src/backend: everything else reaches them through the vtable of backend/be_ops.h. */
#ifndef TRIDENT_BACKEND_CPU_H
#define TRIDENT_BACKEND_CPU_H

#include "be_ops.h"

/* The cpu backend's own state, behind be->impl (what no other backend has). */
typedef struct cpu_state {
    int nthreads; /* OpenMP threads of every kernel (and of OpenBLAS) */
    int isa;      /* which ISA build of the kernels runs (CPU_ISAS in cpu.c) */
} cpu_state;
/* The OpenMP threads of be's kernels. */
static inline int cpu_threads(const backend *be) { return ((const cpu_state *)be->impl)->nthreads; }

/* Per-ISA builds. CMakeLists.txt compiles the kernel files (every file here but cpu.c) for the
 * target's baseline and, on x86-64, twice more: with -march=x86-64-v3 (AVX2 + FMA) and
 * -march=x86-64-v4 (AVX-512) and CPU_ISA defined as avx2 or avx512. The names below then carry
 * that suffix, so the three builds link side by side in one binary and be_cpu picks one at run
 * time from the CPU's features (cpu_isa_*). */
#ifdef CPU_ISA
#define CPU_PASTE2(a, b) a##_##b
#define CPU_PASTE(a, b) CPU_PASTE2(a, b)
#define cpu_adamw CPU_PASTE(cpu_adamw, CPU_ISA)
#define cpu_add CPU_PASTE(cpu_add, CPU_ISA)
#define cpu_attention_bwd CPU_PASTE(cpu_attention_bwd, CPU_ISA)
#define cpu_attention_fwd CPU_PASTE(cpu_attention_fwd, CPU_ISA)
#define cpu_attention_block_fwd CPU_PASTE(cpu_attention_block_fwd, CPU_ISA)
#define cpu_attention_block_bwd CPU_PASTE(cpu_attention_block_bwd, CPU_ISA)
#define cpu_attention_merge CPU_PASTE(cpu_attention_merge, CPU_ISA)
#define cpu_attention_delta CPU_PASTE(cpu_attention_delta, CPU_ISA)
#define cpu_bias_add CPU_PASTE(cpu_bias_add, CPU_ISA)
#define cpu_bias_bwd CPU_PASTE(cpu_bias_bwd, CPU_ISA)
#define cpu_bias_dropout_add_fwd CPU_PASTE(cpu_bias_dropout_add_fwd, CPU_ISA)
#define cpu_bias_gelu_bwd CPU_PASTE(cpu_bias_gelu_bwd, CPU_ISA)
#define cpu_bias_gelu_fwd CPU_PASTE(cpu_bias_gelu_fwd, CPU_ISA)
#define cpu_ce_bwd CPU_PASTE(cpu_ce_bwd, CPU_ISA)
#define cpu_ce_bwd_to CPU_PASTE(cpu_ce_bwd_to, CPU_ISA)
#define cpu_ce_loss CPU_PASTE(cpu_ce_loss, CPU_ISA)
#define cpu_ce_max CPU_PASTE(cpu_ce_max, CPU_ISA)
#define cpu_ce_sumexp CPU_PASTE(cpu_ce_sumexp, CPU_ISA)
#define cpu_ce_target CPU_PASTE(cpu_ce_target, CPU_ISA)
#define cpu_colsum_acc CPU_PASTE(cpu_colsum_acc, CPU_ISA)
#define cpu_drop_mults CPU_PASTE(cpu_drop_mults, CPU_ISA)
#define cpu_dropout_bwd CPU_PASTE(cpu_dropout_bwd, CPU_ISA)
#define cpu_dropout_fwd CPU_PASTE(cpu_dropout_fwd, CPU_ISA)
#define cpu_embedding_bwd CPU_PASTE(cpu_embedding_bwd, CPU_ISA)
#define cpu_embedding_fwd CPU_PASTE(cpu_embedding_fwd, CPU_ISA)
#define cpu_act_bwd CPU_PASTE(cpu_act_bwd, CPU_ISA)
#define cpu_act_fwd CPU_PASTE(cpu_act_fwd, CPU_ISA)
#define cpu_layernorm_bwd CPU_PASTE(cpu_layernorm_bwd, CPU_ISA)
#define cpu_layernorm_fwd CPU_PASTE(cpu_layernorm_fwd, CPU_ISA)
#define cpu_matmul_bwd CPU_PASTE(cpu_matmul_bwd, CPU_ISA)
#define cpu_matmul_fwd CPU_PASTE(cpu_matmul_fwd, CPU_ISA)
#define cpu_matmul_grouped_fwd CPU_PASTE(cpu_matmul_grouped_fwd, CPU_ISA)
#define cpu_matmul_grouped_bwd CPU_PASTE(cpu_matmul_grouped_bwd, CPU_ISA)
#define cpu_pos_embedding_bwd CPU_PASTE(cpu_pos_embedding_bwd, CPU_ISA)
#define cpu_pos_embedding_fwd CPU_PASTE(cpu_pos_embedding_fwd, CPU_ISA)
#define cpu_rmsnorm_bwd CPU_PASTE(cpu_rmsnorm_bwd, CPU_ISA)
#define cpu_rmsnorm_fwd CPU_PASTE(cpu_rmsnorm_fwd, CPU_ISA)
#define cpu_rope_bwd CPU_PASTE(cpu_rope_bwd, CPU_ISA)
#define cpu_rope_fwd CPU_PASTE(cpu_rope_fwd, CPU_ISA)
#define cpu_scale CPU_PASTE(cpu_scale, CPU_ISA)
#define cpu_sumsq CPU_PASTE(cpu_sumsq, CPU_ISA)
#define cpu_convert CPU_PASTE(cpu_convert, CPU_ISA)
#define cpu_lp_native CPU_PASTE(cpu_lp_native, CPU_ISA)
#define cpu_matmul_fwd_lp CPU_PASTE(cpu_matmul_fwd_lp, CPU_ISA)
#define cpu_matmul_bwd_lp CPU_PASTE(cpu_matmul_bwd_lp, CPU_ISA)
#define cpu_attention_kv_fwd CPU_PASTE(cpu_attention_kv_fwd, CPU_ISA)
#define cpu_kernels_fill CPU_PASTE(cpu_kernels_fill, CPU_ISA)
#define cpu_moe_route_fwd CPU_PASTE(cpu_moe_route_fwd, CPU_ISA)
#define cpu_moe_route_bwd CPU_PASTE(cpu_moe_route_bwd, CPU_ISA)
#define cpu_moe_aux_loss CPU_PASTE(cpu_moe_aux_loss, CPU_ISA)
#define cpu_moe_z_loss CPU_PASTE(cpu_moe_z_loss, CPU_ISA)
#define cpu_moe_permute CPU_PASTE(cpu_moe_permute, CPU_ISA)
#define cpu_moe_permute_bwd CPU_PASTE(cpu_moe_permute_bwd, CPU_ISA)
#define cpu_moe_unpermute CPU_PASTE(cpu_moe_unpermute, CPU_ISA)
#define cpu_moe_unpermute_bwd CPU_PASTE(cpu_moe_unpermute_bwd, CPU_ISA)
#endif

/* Floats per 64-byte cache line: threads that write columns own whole lines of them. */
#define CPU_LINE 16
/* Work below which a kernel runs on one thread. A parallel region costs microseconds on idle cores
 * but up to a scheduler time slice on a busy machine (the team waits at the join for a thread that
 * is not running), so kernels of less than about half a millisecond of one core's work stay on one
 * thread. In elements for loops of a few flops each (CPU_PAR_MIN) and loops with an exp, a tanh or
 * a Philox block per element or two, or AdamW's 28 bytes (CPU_PAR_MIN_EXP); in multiply-adds of
 * one of the products for attention. */
#define CPU_PAR_MIN ((size_t)1 << 20)
#define CPU_PAR_MIN_EXP ((size_t)1 << 18)
#define CPU_PAR_MIN_MACS ((double)(1 << 22))

/* The files whose loops call cpu_expf include this header first: GCC if-converts (and so
 * vectorizes) the clamp below only without trapping math. We never trap on FP exceptions. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

/* exp(x) for the softmaxes and GeLU, written so that `#pragma omp simd` loops vectorize it
 * (libm's expf does not): exp(x) = 2^n exp(r), n = round(x / ln 2), |r| <= ln(2)/2, exp(r) by
 * its degree-6 Taylor polynomial. Relative error about 2e-7; x is clamped to [-87, 88], so
 * very negative arguments give 1.6e-38 rather than 0; NaN gives NaN. */
static inline float cpu_expf(float x)
{
    x = x > 88.0f ? 88.0f : x;
    x = x < -87.0f ? -87.0f : x;
    float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f; /* round to nearest: 1.5 * 2^23 */
    float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* NaN passes the clamps (p is NaN then): its exponent is any valid one, not (int32_t)NaN */
    int32_t e = (int32_t)(n == n ? n : 0.0f);
    union { int32_t i; float f; } s = {.i = (e + 127) << 23};
    return p * s.f;
}

/* tanh(u) = 1 - 2 / (exp(2u) + 1): absolute error about 1e-7, vectorizable. */
static inline float cpu_tanhf(float u) { return 1.0f - 2.0f / (cpu_expf(2.0f * u) + 1.0f); }

/* Columns [*c0, *c1) of C that thread t of nt owns in a column-sum kernel: contiguous ranges cut
 * at whole cache lines (no false sharing). Such kernels walk the rows in order within a range, so
 * every column sum is the same whatever the thread count. */
static inline void cpu_cols_of(int C, int t, int nt, int *c0, int *c1)
{
    int64_t lines = (C + CPU_LINE - 1) / CPU_LINE;
    int64_t a = lines * t / nt * CPU_LINE, b = lines * (t + 1) / nt * CPU_LINE;
    *c0 = (int)(a < C ? a : C);
    *c1 = (int)(b < C ? b : C);
}
/* Column sums are accumulated CPU_COLS columns at a time in a stack buffer, then added. */
#define CPU_COLS 512

/* The CPU backend with `nthreads` threads (0: OpenMP's default). Sets OpenBLAS's thread count,
 * which is process-wide. Only the registry calls it: everything else asks be_create("cpu"). */
backend *be_cpu(int nthreads);

/* The kernel entries of the vtable (every one but memory and measurement), from this ISA's
 * build: ops.c, whose entries check the typed buffers' dtypes (fp32 here, but the low-precision
 * GEMMs') and call the kernels below. */
void cpu_kernels_fill(struct be_ops *ops);

/* What this CPU has: AVX-512 (F, BW, CD, DQ, VL; x86-64-v4) and its bf16 dot products. */
int cpu_has_avx512(void);
int cpu_has_avx512bf16(void);
/* The OpenBLAS core to load instead of `loaded` (the one OpenBLAS picked), or NULL to keep it:
 * an AVX-512 core (Cooperlake where the CPU has bf16, else SkylakeX) when the CPU has AVX-512,
 * OpenBLAS picked an older core and OPENBLAS_CORETYPE (`env`) is not set. */
const char *cpu_blas_core_for(const char *loaded, const char *env, int avx512, int avx512bf16);

/* OpenBLAS's thread count is process-wide (the last be_cpu would win): every GEMM outside a
 * parallel region first sets it to this backend's, which costs nothing when it already is. */
void cpu_blas_threads(const backend *be);

/* db (C) += column sums of x (N, C). Threads own blocks of CPU_LINE columns; each column is
 * summed over rows in order, so the result does not depend on the thread count. */
void cpu_colsum_acc(const backend *be, float *db, const float *x, int N, int C);
/* mult (n) written = 1/(1-p) or 0: the dropout multipliers of units unit0 .. unit0+n-1 of one
 * (kind, sample, pos) row. drop->p must be > 0. */
void cpu_drop_mults(float *mult, int n, const be_drop *drop, int kind, int64_t sample, int64_t pos, int64_t unit0);
static inline int cpu_dropping(const be_drop *d) { return d != NULL && d->p > 0.0f; }

void cpu_matmul_fwd(const backend *be, float *out, const float *inp, const float *w, const float *b, int BT, int C,
                    int OC);
/* Grouped GEMMs below this many rows a group (on average) run side by side, a thread's GEMM each. */
#define CPU_GROUPED_ROWS 512
void cpu_matmul_grouped_fwd(const backend *be, float *out, const float *inp, const float *w, const float *b,
                            const int32_t *counts, int G, int C, int OC);
void cpu_matmul_grouped_bwd(const backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, const int32_t *counts, int G, int C, int OC);
void cpu_matmul_bwd(const backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                    const float *w, int BT, int C, int OC);

void cpu_convert(const backend *be, void *dst, be_dtype dt, const void *src, be_dtype st, size_t n);
int cpu_lp_native(const backend *be, be_dtype dt);
void cpu_matmul_fwd_lp(const backend *be, float *out, const void *inp, const void *w, const float *b, be_dtype dt,
                       int BT, int C, int OC);
void cpu_matmul_bwd_lp(const backend *be, float *dinp, float *dw, const void *dout, const void *inp, const void *w,
                       be_dtype dt, int BT, int C, int OC);

void cpu_embedding_fwd(const backend *be, float *out, const int32_t *ids, const float *wte, int BT, int C,
                       int vstart, int Vloc);
void cpu_embedding_bwd(const backend *be, float *dwte, const float *dout, const int32_t *ids, int BT, int C,
                       int vstart, int Vloc);
void cpu_pos_embedding_fwd(const backend *be, float *out, const float *wpe, int B, int T, int C, int pos0);
void cpu_pos_embedding_bwd(const backend *be, float *dwpe, const float *dout, int B, int T, int C, int pos0);

void cpu_layernorm_fwd(const backend *be, float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, int N, int C, float eps);
void cpu_layernorm_bwd(const backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, const float *mean, const float *rstd, int N, int C);

void cpu_rmsnorm_fwd(const backend *be, float *out, float *rstd, const float *inp, const float *w, int N, int C,
                     float eps);
void cpu_rmsnorm_bwd(const backend *be, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     const float *rstd, int N, int C);

void cpu_rope_fwd(const backend *be, float *x, int B, int T, int ld, int nh, int hs, int rot, const be_rope *r, int pos0,
                  const int32_t *pos);
void cpu_rope_bwd(const backend *be, float *dx, int B, int T, int ld, int nh, int hs, int rot, const be_rope *r, int pos0,
                  const int32_t *pos);

void cpu_attention_fwd(const backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                       int ldq, int ldkv, int B, int T, int NH, int NKV, int HS, const int32_t *klen,
                       const int32_t *seg, const be_drop *drop);
void cpu_attention_bwd(const backend *be, float *dq, float *dk, float *dv, const float *dout, const float *q,
                       const float *k, const float *v, const float *lse, int ldq, int ldkv, int B, int T, int NH,
                       int NKV, int HS, const int32_t *klen, const int32_t *seg, const be_drop *drop);
void cpu_attention_block_fwd(const backend *be, float *out, float *lse, const float *q, const float *k,
                             const float *v, int ldq, int ldkv, int B, int Tq, int Tk, int Tg, const int32_t *qpos,
                             const int32_t *kpos, int NH, int NKV, int HS, const int32_t *klen, const int32_t *seg,
                             const be_drop *drop);
void cpu_attention_block_bwd(const backend *be, float *dq, float *dk, float *dv, const float *dout, const float *q,
                             const float *k, const float *v, const float *lse, const float *D, int ldq, int ldkv,
                             int B, int Tq, int Tk, int Tg, const int32_t *qpos, const int32_t *kpos, int NH, int NKV,
                             int HS, const int32_t *klen, const int32_t *seg, const be_drop *drop);
void cpu_attention_merge(const backend *be, float *out, float *lse, const float *op, const float *lp, int B, int T,
                         int NH, int HS);
void cpu_attention_delta(const backend *be, float *D, const float *dout, const float *out, int B, int T, int NH,
                         int HS);

void cpu_attention_kv_fwd(const backend *be, float *out, const float *q, const float *kc, const float *vc, int ldq,
                          int B, int n, int pos0, int cap, int NH, int NKV, int HS);

/* act.c: the be_ops.h entries act_fwd, act_bwd, bias_gelu_fwd, bias_gelu_bwd */
void cpu_act_fwd(const backend *be, int act, int glu, float *out, const float *inp, int N, int F);
void cpu_act_bwd(const backend *be, int act, int glu, float *dinp, const float *dout, const float *inp, int N, int F);
void cpu_bias_gelu_fwd(const backend *be, float *out, const float *inp, const float *b, int N, int C);
void cpu_bias_gelu_bwd(const backend *be, float *dinp, float *db, const float *dout, const float *inp,
                       const float *b, int N, int C);

/* moe_router.c: the be_ops.h entries of the same names */
#define CPU_MOE_MAX_EXPERTS BE_MOE_MAX_EXPERTS
void cpu_moe_route_fwd(const backend *be, int32_t *idx, float *probs, const float *logits, const float *bias, int N,
                       int E, int k, int score, int pre_softmax, float scale);
void cpu_moe_route_bwd(const backend *be, float *dlogits, const float *dprobs, const float *logits, const int32_t *idx,
                       int N, int E, int k, int score, int pre_softmax, float scale);
double cpu_moe_aux_loss(const backend *be, float *dlogits, const float *logits, const int32_t *counts, int N, int E,
                        int k, int score, double coeff, double tokens, float dscale);
double cpu_moe_z_loss(const backend *be, float *dlogits, const float *logits, int N, int E, double coeff, double tokens,
                      float dscale);
void cpu_moe_permute(const backend *be, float *xe, const float *x, const int32_t *row, int N, int k, int h);
void cpu_moe_permute_bwd(const backend *be, float *dx, const float *dxe, const int32_t *row, int N, int k, int h);
void cpu_moe_unpermute(const backend *be, float *out, const float *ye, const int32_t *row, const float *probs, int N,
                       int k, int h);
void cpu_moe_unpermute_bwd(const backend *be, float *dye, float *dprobs, const float *dout, const float *ye,
                           const int32_t *row, const float *probs, int N, int k, int h);

void cpu_add(const backend *be, float *out, const float *a, const float *b, size_t n);
void cpu_scale(const backend *be, float *x, float s, size_t n);
void cpu_bias_add(const backend *be, float *out, const float *b, int N, int C);
void cpu_bias_bwd(const backend *be, float *db, const float *dout, int N, int C);

void cpu_dropout_fwd(const backend *be, float *out, const float *inp, int B, int T, int C, const be_drop *drop);
void cpu_dropout_bwd(const backend *be, float *dinp, const float *dout, int B, int T, int C, const be_drop *drop);
void cpu_bias_dropout_add_fwd(const backend *be, float *out, const float *resid, const float *inp, const float *b,
                              int B, int T, int C, const be_drop *drop);

void cpu_ce_max(const backend *be, float *maxv, const float *logits, int BT, int Vloc, int Vreal);
void cpu_ce_sumexp(const backend *be, float *sumexp, const float *logits, const float *maxv, int BT, int Vloc,
                   int Vreal);
void cpu_ce_target(const backend *be, float *tlogit, const float *logits, const int32_t *targets, int BT, int Vloc,
                   int vstart);
void cpu_ce_loss(const backend *be, float *losses, const float *maxv, const float *sumexp, const float *tlogit,
                 int BT);
void cpu_ce_bwd(const backend *be, float *logits, const float *maxv, const float *sumexp, const int32_t *targets,
                const float *dloss, int BT, int Vloc, int Vreal, int vstart);
/* ce_bwd_to: out (BT, Vloc) of dtype dt written with cpu_ce_bwd's values, rounded as convert rounds. */
void cpu_ce_bwd_to(const backend *be, void *out, be_dtype dt, const float *logits, const float *maxv,
                   const float *sumexp, const int32_t *targets, const float *dloss, int BT, int Vloc, int Vreal,
                   int vstart);

void cpu_adamw(const backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
               float beta2, float eps, float wd, float gscale, int64_t step);
double cpu_sumsq(const backend *be, const float *x, size_t n);

double cpu_peak_gflops(const backend *be);
double cpu_copy_gbps(const backend *be);
double cpu_adamw_stream_gbps(const backend *be);

/* Per-thread scratch that only grows: slot 0..3 of the calling thread, at least `bytes`, 64-byte
 * aligned. Kernels use it instead of allocating per call, so a training run allocates nothing
 * after its first iteration. The contents do not survive another call with the same slot. */
void *cpu_scratch(int slot, size_t bytes);

#endif
