/* The CUDA backend's mixture-of-experts routing and token permutes: moe_route_fwd/bwd,
 * moe_aux_loss, moe_z_loss, moe_permute/_bwd, moe_unpermute/_bwd as be_ops.h states them; the
 * CPU's src/backend/cpu/moe_router.c is the reference (tests/gpu/test_cuda_attention_moe.c).
 *
 * The router's kernels give one warp a row of logits (E <= BE_MOE_MAX_EXPERTS = 1024; lane owns
 * experts lane + 32 u, their scores in the warp's shared memory): the softmax's max and sum by warp shuffles
 * (the sum in double, as the CPU's), the top-k as k rounds of a warp arg-max (ties to the lower
 * expert index, as the CPU's), and the few per-choice sums over k by lane 0 in the CPU's order.
 * The two losses return a double to the host: per-row partial sums in device scratch, reduced by
 * one block in a fixed order, then read back with copy_bytes (the one host wait here, which the
 * contract asks for). Every output element has one owner and every sum a fixed order: no
 * atomics, the same bits whatever the grid. fp32 buffers (the contract's `float *`). */
#include <math.h>

#include "cu_common.cuh"

extern "C" {
#include "trident/check.h"
}

#define MOE_WARPS 4                            /* rows (warps) a block */
#define MOE_THREADS 128                        /* permutes: threads a block */

static __device__ __forceinline__ float warp_maxf(float x)
{
    for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
}
static __device__ __forceinline__ double warp_sumd(double x)
{
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

static __device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* s (E, the warp's shared memory) = softmax(l), as the CPU's softmax_row: max in float, exp in
 * float, the sum in double, s = (float)(exp / sum). Lane writes its own experts only. */
static __device__ void warp_softmax(float *s, const float *l, int E, int lane)
{
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
    mx = warp_maxf(mx);
    double sum = 0;
    for (int e = lane; e < E; e += 32) sum += (s[e] = expf(l[e] - mx));
    sum = warp_sumd(sum);
    for (int e = lane; e < E; e += 32) s[e] = (float)(s[e] / sum);
}

/* The better of two candidates (value, expert): the larger value, ties to the lower expert;
 * e < 0 is none. */
static __device__ __forceinline__ bool moe_better(float v, int e, float bv, int be)
{
    return e >= 0 && (be < 0 || v > bv || (v == bv && e < be));
}

/* A row's top-k of s (E, shared; + bias[e] for the choice) into idx (k), largest first;
 * sel[j] = s of the j-th choice (the unbiased score). */
static __device__ void warp_top_k(int32_t *idx, float *sel, const float *s, const float *bias, int E, int k, int lane)
{
    uint32_t taken = 0; /* bit u: expert lane + 32 u chosen (E <= 1024: u < 32) */
    for (int j = 0; j < k; j++) {
        float bv = 0.0f, braw = 0.0f;
        int be = -1;
        for (int e = lane, u = 0; e < E; e += 32, u++) {
            if (taken >> u & 1) continue;
            float x = bias ? s[e] + bias[e] : s[e];
            if (moe_better(x, e, bv, be)) bv = x, be = e, braw = s[e];
        }
        for (int off = 16; off > 0; off >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, off), oraw = __shfl_xor_sync(0xffffffffu, braw, off);
            int oe = __shfl_xor_sync(0xffffffffu, be, off);
            if (moe_better(ov, oe, bv, be)) bv = ov, be = oe, braw = oraw;
        }
        if (be >= 0 && (be & 31) == lane) taken |= 1u << (be >> 5);
        if (lane == 0) {
            idx[j] = be;
            sel[j] = braw;
        }
    }
    __syncwarp();
}

/* One warp a row: the choice (idx) and the weights (probs), as cpu_moe_route_fwd. Shared: the
 * warp's scores s (E) and chosen scores sel (k). */
__global__ void __launch_bounds__(MOE_WARPS * 32) moe_route_fwd_kernel(int32_t *idx, float *probs, const float *logits,
                                                                      const float *bias, int N, int E, int k,
                                                                      int score, int pre_softmax, float scale)
{
    __shared__ float buf[MOE_WARPS][2 * BE_MOE_MAX_EXPERTS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n = blockIdx.x * MOE_WARPS + warp;
    if (n >= N) return;
    const float *l = logits + (size_t)n * E;
    float *s = buf[warp], *sel = s + BE_MOE_MAX_EXPERTS, *p = probs + (size_t)n * k;
    int32_t *ix = idx + (size_t)n * k;
    if (score == BE_MOE_SOFTMAX && pre_softmax) warp_softmax(s, l, E, lane);
    else
        for (int e = lane; e < E; e += 32) s[e] = score == BE_MOE_SOFTMAX ? l[e] : sigmoidf_(l[e]);
    warp_top_k(ix, sel, s, score == BE_MOE_SIGMOID ? bias : NULL, E, k, lane);
    if (lane != 0) return;
    if (score == BE_MOE_SOFTMAX && pre_softmax) {
        for (int j = 0; j < k; j++) p[j] = sel[j];
    } else if (score == BE_MOE_SOFTMAX) { /* softmax over the k chosen logits */
        float mx = sel[0];
        for (int j = 1; j < k; j++) mx = sel[j] > mx ? sel[j] : mx;
        double sum = 0;
        for (int j = 0; j < k; j++) sum += (p[j] = expf(sel[j] - mx));
        for (int j = 0; j < k; j++) p[j] = (float)(p[j] / sum);
    } else {
        double sum = 0;
        for (int j = 0; j < k; j++) sum += (p[j] = sel[j]);
        if (k > 1)
            for (int j = 0; j < k; j++) p[j] = (float)(p[j] / (sum + 1e-20));
    }
    if (scale != 0)
        for (int j = 0; j < k; j++) p[j] *= scale;
}

/* One warp a row: dlogits += the weights' gradient through the same function, the choice held
 * fixed (cpu_moe_route_bwd). Shared: the warp's g (k) and s (E: softmax) or q (k). */
__global__ void __launch_bounds__(MOE_WARPS * 32) moe_route_bwd_kernel(float *dlogits, const float *dprobs,
                                                                      const float *logits, const int32_t *idx, int N,
                                                                      int E, int k, int score, int pre_softmax,
                                                                      float scale)
{
    __shared__ float buf[MOE_WARPS][2 * BE_MOE_MAX_EXPERTS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n = blockIdx.x * MOE_WARPS + warp;
    if (n >= N) return;
    const float *l = logits + (size_t)n * E;
    const int32_t *ix = idx + (size_t)n * k;
    float *dl = dlogits + (size_t)n * E, *g = buf[warp], *q = g + BE_MOE_MAX_EXPERTS;
    for (int j = lane; j < k; j += 32) g[j] = dprobs[(size_t)n * k + j] * (scale != 0 ? scale : 1.0f);
    __syncwarp();
    if (score == BE_MOE_SOFTMAX && pre_softmax) { /* p_j = s[i_j], s = softmax(l) (in q) */
        float *s = q;
        warp_softmax(s, l, E, lane);
        __syncwarp();
        double dot = 0;
        for (int j = 0; j < k; j++) dot += (double)g[j] * s[ix[j]]; /* every lane, the same order */
        for (int e = lane; e < E; e += 32) {
            float x = dl[e] - (float)(s[e] * dot);
            for (int j = 0; j < k; j++)
                if (ix[j] == e) x += __fmul_rn(s[e], g[j]);
            dl[e] = x;
        }
        return;
    }
    if (lane != 0) return;
    if (score == BE_MOE_SOFTMAX) { /* p = softmax of the chosen logits */
        float mx = l[ix[0]];
        for (int j = 1; j < k; j++) mx = l[ix[j]] > mx ? l[ix[j]] : mx;
        double sum = 0;
        for (int j = 0; j < k; j++) sum += (q[j] = expf(l[ix[j]] - mx));
        for (int j = 0; j < k; j++) q[j] = (float)(q[j] / sum);
        double dot = 0;
        for (int j = 0; j < k; j++) dot += (double)g[j] * q[j];
        for (int j = 0; j < k; j++) dl[ix[j]] += (float)(q[j] * (g[j] - dot));
    } else { /* p_j = s_j / (sum s + 1e-20) for k > 1, s_j = sigmoid(l[i_j]) */
        double sum = 0, dot = 0;
        for (int j = 0; j < k; j++) q[j] = sigmoidf_(l[ix[j]]), sum += q[j];
        for (int j = 0; j < k; j++) dot += (double)g[j] * q[j];
        for (int j = 0; j < k; j++) {
            double ds = k > 1 ? g[j] / (sum + 1e-20) - dot / ((sum + 1e-20) * (sum + 1e-20)) : g[j];
            dl[ix[j]] += (float)(ds * q[j] * (1.0f - q[j]));
        }
    }
}

/* One warp a row: the load-balancing loss's row term into part[n] (double) and, dlogits set, its
 * gradient times dscale (cpu_moe_aux_loss). c = coeff E / (k T^2). */
__global__ void __launch_bounds__(MOE_WARPS * 32) moe_aux_kernel(double *part, float *dlogits, const float *logits,
                                                                const int32_t *counts, int N, int E, int score,
                                                                double c, float dscale)
{
    __shared__ float buf[MOE_WARPS][2 * BE_MOE_MAX_EXPERTS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n = blockIdx.x * MOE_WARPS + warp;
    if (n >= N) return;
    const float *l = logits + (size_t)n * E;
    float *s = buf[warp], *sg = s + BE_MOE_MAX_EXPERTS; /* lane's own experts only */
    double sum = 0;
    if (score == BE_MOE_SOFTMAX) warp_softmax(s, l, E, lane);
    else {
        for (int e = lane; e < E; e += 32) sum += (sg[e] = sigmoidf_(l[e]));
        sum = warp_sumd(sum);
        for (int e = lane; e < E; e += 32) s[e] = (float)(sg[e] / (sum + 1e-20));
    }
    double loss = 0, dot = 0; /* dot = sum_e ds_e s_e, ds_e = c counts[e] */
    for (int e = lane; e < E; e += 32) {
        loss += c * s[e] * counts[e];
        dot += c * counts[e] * (double)s[e];
    }
    loss = warp_sumd(loss);
    dot = warp_sumd(dot);
    if (lane == 0) part[n] = loss;
    if (!dlogits) return;
    float *dl = dlogits + (size_t)n * E;
    for (int e = lane; e < E; e += 32) {
        double ds = c * counts[e], d;
        if (score == BE_MOE_SOFTMAX) d = s[e] * (ds - dot);
        else d = (ds / (sum + 1e-20) - dot / (sum + 1e-20)) * sg[e] * (1.0f - sg[e]);
        dl[e] += (float)(dscale * d);
    }
}

/* One warp a row: the z-loss's row term coeff lse^2 / T into part[n] and, dlogits set, its
 * gradient times dscale (cpu_moe_z_loss). */
__global__ void __launch_bounds__(MOE_WARPS * 32) moe_z_kernel(double *part, float *dlogits, const float *logits,
                                                              int N, int E, double coeff, double tokens, float dscale)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n = blockIdx.x * MOE_WARPS + warp;
    if (n >= N) return;
    const float *l = logits + (size_t)n * E;
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
    mx = warp_maxf(mx);
    double sum = 0;
    for (int e = lane; e < E; e += 32) sum += exp((double)l[e] - mx);
    sum = warp_sumd(sum);
    double lse = mx + log(sum);
    if (lane == 0) part[n] = coeff * lse * lse / tokens;
    if (!dlogits) return;
    float *dl = dlogits + (size_t)n * E;
    for (int e = lane; e < E; e += 32) dl[e] += (float)(dscale * coeff * 2 * lse / tokens * exp((double)l[e] - lse));
}

/* *sum = part[0] + ... + part[n-1], one block of MOE_THREADS threads in a fixed order. */
__global__ void __launch_bounds__(MOE_THREADS) moe_sum_kernel(double *sum, const double *part, int n)
{
    __shared__ double sh[MOE_THREADS];
    double x = 0;
    for (int i = threadIdx.x; i < n; i += MOE_THREADS) x += part[i];
    sh[threadIdx.x] = x;
    __syncthreads();
    for (int w = MOE_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) *sum = sh[0];
}

/* xe[row[nk + j]] = x[n], one (token, choice) a block. */
__global__ void __launch_bounds__(MOE_THREADS) moe_permute_kernel(float *xe, const float *x, const int32_t *row,
                                                                 int k, int h)
{
    const size_t nj = blockIdx.x;
    const int r = row[nj];
    if (r < 0) return; /* dropped */
    const float *src = x + nj / k * h;
    float *dst = xe + (size_t)r * h;
    for (int c = threadIdx.x; c < h; c += MOE_THREADS) dst[c] = src[c];
}

/* dx[n] += sum_j dxe[row[nk + j]], j in order; one token a block. */
__global__ void __launch_bounds__(MOE_THREADS) moe_permute_bwd_kernel(float *dx, const float *dxe, const int32_t *row,
                                                                     int k, int h)
{
    const size_t n = blockIdx.x;
    float *d = dx + n * h;
    for (int c = threadIdx.x; c < h; c += MOE_THREADS) {
        float x = d[c];
        for (int j = 0; j < k; j++) {
            int r = row[n * k + j];
            if (r >= 0) x += dxe[(size_t)r * h + c];
        }
        d[c] = x;
    }
}

/* out[n] written = sum_j probs[nk + j] ye[row[nk + j]], j in order (products rounded, then
 * added, as the CPU's); one token a block. */
__global__ void __launch_bounds__(MOE_THREADS) moe_unpermute_kernel(float *out, const float *ye, const int32_t *row,
                                                                   const float *probs, int k, int h)
{
    const size_t n = blockIdx.x;
    float *o = out + n * h;
    for (int c = threadIdx.x; c < h; c += MOE_THREADS) {
        float x = 0.0f;
        for (int j = 0; j < k; j++) {
            int r = row[n * k + j];
            if (r >= 0) x = __fadd_rn(x, __fmul_rn(probs[n * k + j], ye[(size_t)r * h + c]));
        }
        o[c] = x;
    }
}

/* dye[row] written = p dout[n]; dprobs[nk + j] written = dout[n] . ye[row] (in double, a fixed
 * tree); one (token, choice) a block. */
__global__ void __launch_bounds__(MOE_THREADS) moe_unpermute_bwd_kernel(float *dye, float *dprobs, const float *dout,
                                                                       const float *ye, const int32_t *row,
                                                                       const float *probs, int k, int h)
{
    __shared__ double sh[MOE_THREADS];
    const size_t nj = blockIdx.x;
    const int r = row[nj];
    if (r < 0) { /* dropped: no part in the output */
        if (threadIdx.x == 0) dprobs[nj] = 0.0f;
        return;
    }
    const float *d = dout + nj / k * h, *y = ye + (size_t)r * h;
    float *dy = dye + (size_t)r * h, p = probs[nj];
    double dot = 0;
    for (int c = threadIdx.x; c < h; c += MOE_THREADS) {
        dot += (double)d[c] * y[c];
        dy[c] = __fmul_rn(p, d[c]);
    }
    sh[threadIdx.x] = dot;
    __syncthreads();
    for (int w = MOE_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) dprobs[nj] = (float)sh[0];
}

/* ---- the vtable entries ---- */

static void moe_check(const char *entry, int E, int k)
{
    TD_CHECK(E >= 1 && E <= BE_MOE_MAX_EXPERTS && k >= 1 && k <= E, "use 1..1024 experts and a top-k within them",
             "cuda %s: %d experts, top-%d", entry, E, k);
}

static unsigned moe_blocks(int N) { return (unsigned)((N + MOE_WARPS - 1) / MOE_WARPS); }

static void cu_moe_route_fwd(const backend *be, int32_t *idx, float *probs, const float *logits, const float *bias,
                             int N, int E, int k, int score, int pre_softmax, float scale)
{
    if (N <= 0) return;
    moe_check("moe_route_fwd", E, k);
    moe_route_fwd_kernel<<<moe_blocks(N), MOE_WARPS * 32, 0, cu_stream(be)>>>(idx, probs, logits, bias, N, E, k,
                                                                             score, pre_softmax, scale);
    CU_LAUNCHED("moe_route_fwd_kernel");
}

static void cu_moe_route_bwd(const backend *be, float *dlogits, const float *dprobs, const float *logits,
                             const int32_t *idx, int N, int E, int k, int score, int pre_softmax, float scale)
{
    if (N <= 0) return;
    moe_check("moe_route_bwd", E, k);
    moe_route_bwd_kernel<<<moe_blocks(N), MOE_WARPS * 32, 0, cu_stream(be)>>>(dlogits, dprobs, logits, idx, N, E, k,
                                                                             score, pre_softmax, scale);
    CU_LAUNCHED("moe_route_bwd_kernel");
}

/* The sum of part (n doubles, device) read back to the host; frees part. Waits for the queue. */
static double moe_total(const backend *be, double *part, int n)
{
    double *sum = part + n, host = 0;
    moe_sum_kernel<<<1, MOE_THREADS, 0, cu_stream(be)>>>(sum, part, n);
    CU_LAUNCHED("moe_sum_kernel");
    be->ops->copy_bytes(be, &host, sum, sizeof host, BE_D2H);
    be->ops->free(be, part);
    return host;
}

static double cu_moe_aux_loss(const backend *be, float *dlogits, const float *logits, const int32_t *counts, int N,
                              int E, int k, int score, double coeff, double tokens, float dscale)
{
    if (N <= 0) return 0.0;
    moe_check("moe_aux_loss", E, k);
    double *part = (double *)be->ops->alloc(be, ((size_t)N + 1) * sizeof(double));
    double c = coeff * E / (k * tokens * tokens);
    moe_aux_kernel<<<moe_blocks(N), MOE_WARPS * 32, 0, cu_stream(be)>>>(part, dlogits, logits, counts, N, E, score, c,
                                                                       dscale);
    CU_LAUNCHED("moe_aux_kernel");
    return moe_total(be, part, N);
}

static double cu_moe_z_loss(const backend *be, float *dlogits, const float *logits, int N, int E, double coeff,
                            double tokens, float dscale)
{
    if (N <= 0) return 0.0;
    moe_check("moe_z_loss", E, 1);
    double *part = (double *)be->ops->alloc(be, ((size_t)N + 1) * sizeof(double));
    moe_z_kernel<<<moe_blocks(N), MOE_WARPS * 32, 0, cu_stream(be)>>>(part, dlogits, logits, N, E, coeff, tokens,
                                                                     dscale);
    CU_LAUNCHED("moe_z_kernel");
    return moe_total(be, part, N);
}

static void cu_moe_permute(const backend *be, float *xe, const float *x, const int32_t *row, int N, int k, int h)
{
    if (N <= 0 || k <= 0 || h <= 0) return;
    moe_permute_kernel<<<(unsigned)((size_t)N * k), MOE_THREADS, 0, cu_stream(be)>>>(xe, x, row, k, h);
    CU_LAUNCHED("moe_permute_kernel");
}

static void cu_moe_permute_bwd(const backend *be, float *dx, const float *dxe, const int32_t *row, int N, int k,
                               int h)
{
    if (N <= 0 || k <= 0 || h <= 0) return;
    moe_permute_bwd_kernel<<<(unsigned)N, MOE_THREADS, 0, cu_stream(be)>>>(dx, dxe, row, k, h);
    CU_LAUNCHED("moe_permute_bwd_kernel");
}

static void cu_moe_unpermute(const backend *be, float *out, const float *ye, const int32_t *row, const float *probs,
                             int N, int k, int h)
{
    if (N <= 0 || h <= 0) return;
    moe_unpermute_kernel<<<(unsigned)N, MOE_THREADS, 0, cu_stream(be)>>>(out, ye, row, probs, k, h);
    CU_LAUNCHED("moe_unpermute_kernel");
}

static void cu_moe_unpermute_bwd(const backend *be, float *dye, float *dprobs, const float *dout, const float *ye,
                                 const int32_t *row, const float *probs, int N, int k, int h)
{
    if (N <= 0 || k <= 0) return;
    moe_unpermute_bwd_kernel<<<(unsigned)((size_t)N * k), MOE_THREADS, 0, cu_stream(be)>>>(dye, dprobs, dout, ye,
                                                                                          row, probs, k, h);
    CU_LAUNCHED("moe_unpermute_bwd_kernel");
}

void cu_fill_moe(struct be_ops *ops)
{
    ops->moe_route_fwd = cu_moe_route_fwd;
    ops->moe_route_bwd = cu_moe_route_bwd;
    ops->moe_aux_loss = cu_moe_aux_loss;
    ops->moe_z_loss = cu_moe_z_loss;
    ops->moe_permute = cu_moe_permute;
    ops->moe_permute_bwd = cu_moe_permute_bwd;
    ops->moe_unpermute = cu_moe_unpermute;
    ops->moe_unpermute_bwd = cu_moe_unpermute_bwd;
}
