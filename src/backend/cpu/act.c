/* The MLP's activations (td_act, trident/activation.h), gated or not, and the fused bias + GeLU
 * of the ungated GeLU MLP. Each function is a pair of scalars, f and f' (the exponentials through
 * cpu_expf so that the loops vectorize), and one row of CPU_ACTS: two one-line kernels that hand
 * the pair to the shared loops act_rows_fwd / act_rows_bwd. The dispatchers cut the rows (the
 * elements when not gated) over the threads; every element is computed alone, so the results do
 * not depend on the thread count. */
#include <math.h>
#include <omp.h>

#include "cpu.h"
#include "trident/activation.h"

/* ---- the functions: f and f' ---- */

/* GeLU, tanh approximation (GPT-2, Megatron --openai-gelu): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

static inline float gelu(float x)
{
    float u = GELU_K * (x + GELU_A * x * x * x);
    return 0.5f * x * (1.0f + cpu_tanhf(u));
}

static inline float gelu_grad(float x)
{
    float u = GELU_K * (x + GELU_A * x * x * x);
    float th = cpu_tanhf(u);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
}

/* GeLU, exact: x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)); its derivative Phi(x) + x phi(x). */
static inline float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
static inline float gelu_erf_grad(float x)
{
    return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * 0.3989422804014327f * cpu_expf(-0.5f * x * x);
}

/* SiLU x sigmoid(x); its derivative s (1 + x (1 - s)). */
static inline float sigmoid(float x) { return 1.0f / (1.0f + cpu_expf(-x)); }
static inline float silu(float x) { return x * sigmoid(x); }
static inline float silu_grad(float x)
{
    float s = sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}

static inline float relu(float x) { return x > 0.0f ? x : 0.0f; }
static inline float relu_grad(float x) { return x > 0.0f ? 1.0f : 0.0f; }

/* Squared ReLU (Primer; Megatron --squared-relu): max(x, 0)^2; its derivative 2 max(x, 0). */
static inline float squared_relu(float x) { return relu(x) * relu(x); }
static inline float squared_relu_grad(float x) { return 2.0f * relu(x); }

/* ---- the shared loops over rows [r0, r1) of width F ---- */

typedef float (*act_fn)(float);

/* Not gated: out = f(inp) element by element. Gated: rows of [gate | up], out = f(gate) * up.
 * Always inlined, so the pair passed is a constant and the loops vectorize. */
static inline __attribute__((always_inline)) void act_rows_fwd(act_fn f, float *out, const float *inp, size_t r0,
                                                               size_t r1, int F, int glu)
{
    if (!glu) {
#pragma omp simd
        for (size_t i = r0 * F; i < r1 * F; i++) out[i] = f(inp[i]);
        return;
    }
    for (size_t n = r0; n < r1; n++) {
        const float *g = inp + n * 2 * F, *u = g + F;
        float *y = out + n * F;
#pragma omp simd
        for (int j = 0; j < F; j++) y[j] = f(g[j]) * u[j];
    }
}

/* dinp += f'(inp) dout; gated: d gate += dout up f'(gate), d up += dout f(gate). */
static inline __attribute__((always_inline)) void act_rows_bwd(act_fn f, act_fn df, float *dinp, const float *dout,
                                                               const float *inp, size_t r0, size_t r1, int F, int glu)
{
    if (!glu) {
#pragma omp simd
        for (size_t i = r0 * F; i < r1 * F; i++) dinp[i] += df(inp[i]) * dout[i];
        return;
    }
    for (size_t n = r0; n < r1; n++) {
        const float *g = inp + n * 2 * F, *u = g + F, *dy = dout + n * F;
        float *dg = dinp + n * 2 * F, *du = dg + F;
#pragma omp simd
        for (int j = 0; j < F; j++) {
            dg[j] += dy[j] * u[j] * df(g[j]);
            du[j] += dy[j] * f(g[j]);
        }
    }
}

/* ---- one pair of kernels a function ---- */

static void gelu_fwd(float *o, const float *x, size_t r0, size_t r1, int F, int glu)
{
    act_rows_fwd(gelu, o, x, r0, r1, F, glu);
}
static void gelu_bwd(float *dx, const float *dy, const float *x, size_t r0, size_t r1, int F, int glu)
{
    act_rows_bwd(gelu, gelu_grad, dx, dy, x, r0, r1, F, glu);
}
static void gelu_erf_fwd(float *o, const float *x, size_t r0, size_t r1, int F, int glu)
{
    act_rows_fwd(gelu_erf, o, x, r0, r1, F, glu);
}
static void gelu_erf_bwd(float *dx, const float *dy, const float *x, size_t r0, size_t r1, int F, int glu)
{
    act_rows_bwd(gelu_erf, gelu_erf_grad, dx, dy, x, r0, r1, F, glu);
}
static void silu_fwd(float *o, const float *x, size_t r0, size_t r1, int F, int glu)
{
    act_rows_fwd(silu, o, x, r0, r1, F, glu);
}
/* Gated (SwiGLU), the products in the order trident has always computed them (bit-identical
 * runs): d gate = dout up sig (1 + gate (1 - sig)), d up = dout gate sig. */
static void silu_bwd(float *dx, const float *dy, const float *x, size_t r0, size_t r1, int F, int glu)
{
    if (!glu) {
        act_rows_bwd(silu, silu_grad, dx, dy, x, r0, r1, F, glu);
        return;
    }
    for (size_t n = r0; n < r1; n++) {
        const float *g = x + n * 2 * F, *u = g + F, *d = dy + n * F;
        float *dg = dx + n * 2 * F, *du = dg + F;
#pragma omp simd
        for (int f = 0; f < F; f++) {
            float sg = sigmoid(g[f]), e = d[f];
            dg[f] += e * u[f] * sg * (1.0f + g[f] * (1.0f - sg));
            du[f] += e * g[f] * sg;
        }
    }
}
static void relu_fwd(float *o, const float *x, size_t r0, size_t r1, int F, int glu)
{
    act_rows_fwd(relu, o, x, r0, r1, F, glu);
}
static void relu_bwd(float *dx, const float *dy, const float *x, size_t r0, size_t r1, int F, int glu)
{
    act_rows_bwd(relu, relu_grad, dx, dy, x, r0, r1, F, glu);
}
static void squared_relu_fwd(float *o, const float *x, size_t r0, size_t r1, int F, int glu)
{
    act_rows_fwd(squared_relu, o, x, r0, r1, F, glu);
}
static void squared_relu_bwd(float *dx, const float *dy, const float *x, size_t r0, size_t r1, int F, int glu)
{
    act_rows_bwd(squared_relu, squared_relu_grad, dx, dy, x, r0, r1, F, glu);
}

static const struct {
    void (*fwd)(float *out, const float *inp, size_t r0, size_t r1, int F, int glu);
    void (*bwd)(float *dinp, const float *dout, const float *inp, size_t r0, size_t r1, int F, int glu);
} CPU_ACTS[TD_ACT_COUNT] = {
    [TD_ACT_GELU] = {gelu_fwd, gelu_bwd},
    [TD_ACT_GELU_ERF] = {gelu_erf_fwd, gelu_erf_bwd},
    [TD_ACT_SILU] = {silu_fwd, silu_bwd},
    [TD_ACT_RELU] = {relu_fwd, relu_bwd},
    [TD_ACT_SQUARED_RELU] = {squared_relu_fwd, squared_relu_bwd},
};

/* ---- the dispatchers: rows (elements when not gated) cut over the threads ---- */

/* Rows [*r0, *r1) of `rows` that thread t of nt runs. */
static void rows_of(size_t rows, int t, int nt, size_t *r0, size_t *r1)
{
    *r0 = rows * (size_t)t / (size_t)nt;
    *r1 = rows * (size_t)(t + 1) / (size_t)nt;
}

void cpu_act_fwd(const backend *be, int act, int glu, float *out, const float *inp, int N, int F)
{
    size_t rows = glu ? (size_t)N : (size_t)N * F;
    int w = glu ? F : 1;
#pragma omp parallel num_threads(cpu_threads(be)) if ((size_t)N * F > CPU_PAR_MIN_EXP)
    {
        size_t r0, r1;
        rows_of(rows, omp_get_thread_num(), omp_get_num_threads(), &r0, &r1);
        CPU_ACTS[act].fwd(out, inp, r0, r1, w, glu);
    }
}

void cpu_act_bwd(const backend *be, int act, int glu, float *dinp, const float *dout, const float *inp, int N, int F)
{
    size_t rows = glu ? (size_t)N : (size_t)N * F;
    int w = glu ? F : 1;
#pragma omp parallel num_threads(cpu_threads(be)) if ((size_t)N * F > CPU_PAR_MIN_EXP)
    {
        size_t r0, r1;
        rows_of(rows, omp_get_thread_num(), omp_get_num_threads(), &r0, &r1);
        CPU_ACTS[act].bwd(dinp, dout, inp, r0, r1, w, glu);
    }
}

/* ---- fused bias + GeLU (tanh) ---- */

void cpu_bias_gelu_fwd(const backend *be, float *out, const float *inp, const float *b, int N, int C)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)N * C > CPU_PAR_MIN_EXP)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
#pragma omp simd
        for (int c = 0; c < C; c++) y[c] = gelu(x[c] + b[c]);
    }
}

/* One pass: threads own column ranges and walk the rows in order, adding the gradient to dinp
 * and to a column accumulator for db (the same sums whatever the thread count). */
void cpu_bias_gelu_bwd(const backend *be, float *dinp, float *db, const float *dout, const float *inp,
                       const float *b, int N, int C)
{
#pragma omp parallel num_threads(cpu_threads(be)) if ((size_t)N * C > CPU_PAR_MIN_EXP)
    {
        int c0, c1;
        cpu_cols_of(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
        for (int p0 = c0; p0 < c1; p0 += CPU_COLS) {
            int w = c1 - p0 < CPU_COLS ? c1 - p0 : CPU_COLS;
            const float *bb = b + p0;
            float acc[CPU_COLS] = {0};
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C + p0, *dy = dout + (size_t)n * C + p0;
                if (dinp) {
                    float *dx = dinp + (size_t)n * C + p0;
#pragma omp simd
                    for (int j = 0; j < w; j++) {
                        float g = gelu_grad(x[j] + bb[j]) * dy[j];
                        dx[j] += g;
                        acc[j] += g;
                    }
                } else {
#pragma omp simd
                    for (int j = 0; j < w; j++) acc[j] += gelu_grad(x[j] + bb[j]) * dy[j];
                }
            }
            if (db)
                for (int j = 0; j < w; j++) db[p0 + j] += acc[j];
        }
    }
}
