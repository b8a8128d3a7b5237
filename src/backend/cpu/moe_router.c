/* Mixture-of-experts routing (Megatron-Core's TopKRouter: topk_routing_with_score_function,
 * switch_load_balancing_loss_func, z_loss_func), one token a row of the router's logits (N, E).
 * Rows in parallel; per row a handful of experts, so plain loops in float with double sums. */
#include <math.h>
#include <string.h>

#include "cpu.h"

/* The k largest of v[0..E) (plus bias[e] when bias is not NULL), largest first; ties go to the
 * lower expert index, so that the choice is a function of the values alone. */
static void top_k(const float *v, const float *bias, int E, int k, int32_t *idx)
{
    for (int j = 0; j < k; j++) {
        int best = -1;
        float bv = 0;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int m = 0; m < j; m++) taken |= idx[m] == e;
            if (taken) continue;
            float x = bias ? v[e] + bias[e] : v[e];
            if (best < 0 || x > bv) best = e, bv = x;
        }
        idx[j] = best;
    }
}

/* s (E) = softmax(l). */
static void softmax_row(const float *l, int E, float *s)
{
    float mx = l[0];
    for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    double sum = 0;
    for (int e = 0; e < E; e++) sum += (s[e] = expf(l[e] - mx));
    for (int e = 0; e < E; e++) s[e] = (float)(s[e] / sum);
}

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

void cpu_moe_route_fwd(const backend *be, int32_t *idx, float *probs, const float *logits, const float *bias, int N,
                       int E, int k, int score, int pre_softmax, float scale)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)N * E > 65536)
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * E;
        int32_t *ix = idx + (size_t)n * k;
        float *p = probs + (size_t)n * k, s[CPU_MOE_MAX_EXPERTS];
        if (score == BE_MOE_SOFTMAX && pre_softmax) {
            softmax_row(l, E, s);
            top_k(s, NULL, E, k, ix);
            for (int j = 0; j < k; j++) p[j] = s[ix[j]];
        } else if (score == BE_MOE_SOFTMAX) {
            top_k(l, NULL, E, k, ix);
            float sub[CPU_MOE_MAX_EXPERTS];
            for (int j = 0; j < k; j++) sub[j] = l[ix[j]];
            softmax_row(sub, k, p);
        } else {
            for (int e = 0; e < E; e++) s[e] = sigmoidf_(l[e]);
            top_k(s, bias, E, k, ix);
            double sum = 0;
            for (int j = 0; j < k; j++) sum += (p[j] = s[ix[j]]);
            if (k > 1)
                for (int j = 0; j < k; j++) p[j] = (float)(p[j] / (sum + 1e-20));
        }
        if (scale != 0)
            for (int j = 0; j < k; j++) p[j] *= scale;
    }
}

void cpu_moe_route_bwd(const backend *be, float *dlogits, const float *dprobs, const float *logits, const int32_t *idx,
                       int N, int E, int k, int score, int pre_softmax, float scale)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)N * E > 65536)
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * E;
        const int32_t *ix = idx + (size_t)n * k;
        float *dl = dlogits + (size_t)n * E, g[CPU_MOE_MAX_EXPERTS], s[CPU_MOE_MAX_EXPERTS];
        for (int j = 0; j < k; j++) g[j] = dprobs[(size_t)n * k + j] * (scale != 0 ? scale : 1.0f);
        if (score == BE_MOE_SOFTMAX && pre_softmax) { /* p_j = s[i_j], s = softmax(l) */
            softmax_row(l, E, s);
            double dot = 0;
            for (int j = 0; j < k; j++) dot += (double)g[j] * s[ix[j]];
            for (int e = 0; e < E; e++) dl[e] -= (float)(s[e] * dot);
            for (int j = 0; j < k; j++) dl[ix[j]] += s[ix[j]] * g[j];
        } else if (score == BE_MOE_SOFTMAX) { /* p = softmax of the chosen logits */
            float sub[CPU_MOE_MAX_EXPERTS], q[CPU_MOE_MAX_EXPERTS];
            for (int j = 0; j < k; j++) sub[j] = l[ix[j]];
            softmax_row(sub, k, q);
            double dot = 0;
            for (int j = 0; j < k; j++) dot += (double)g[j] * q[j];
            for (int j = 0; j < k; j++) dl[ix[j]] += (float)(q[j] * (g[j] - dot));
        } else { /* p_j = s_j / (sum s + 1e-20) for k > 1, s_j = sigmoid(l[i_j]) */
            double sum = 0, dot = 0;
            for (int j = 0; j < k; j++) s[j] = sigmoidf_(l[ix[j]]), sum += s[j];
            for (int j = 0; j < k; j++) dot += (double)g[j] * s[j];
            for (int j = 0; j < k; j++) {
                double ds = k > 1 ? g[j] / (sum + 1e-20) - dot / ((sum + 1e-20) * (sum + 1e-20)) : g[j];
                dl[ix[j]] += (float)(ds * s[j] * (1.0f - s[j]));
            }
        }
    }
}

/* The load-balancing loss of Switch Transformer as Megatron computes it:
 * coeff E / (k T^2) sum_e (sum_n s[n][e]) c[e], s the scores (softmax of the logits; sigmoid,
 * normalised over the experts), c[e] the routed tokens of expert e, T = `tokens` (the tokens c
 * counts over). Returns it; dlogits += dscale times its gradient (c held fixed). */
double cpu_moe_aux_loss(const backend *be, float *dlogits, const float *logits, const int32_t *counts, int N, int E,
                        int k, int score, double coeff, double tokens, float dscale)
{
    double c = coeff * E / (k * tokens * tokens), loss = 0;
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)N * E > 65536) reduction(+ : loss)
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * E;
        float s[CPU_MOE_MAX_EXPERTS], sg[CPU_MOE_MAX_EXPERTS];
        double sum = 0;
        if (score == BE_MOE_SOFTMAX) softmax_row(l, E, s);
        else {
            for (int e = 0; e < E; e++) sum += (sg[e] = sigmoidf_(l[e]));
            for (int e = 0; e < E; e++) s[e] = (float)(sg[e] / (sum + 1e-20));
        }
        double dot = 0; /* sum_e ds_e s_e, ds_e = c counts[e] */
        for (int e = 0; e < E; e++) loss += c * s[e] * counts[e], dot += c * counts[e] * (double)s[e];
        if (!dlogits) continue;
        float *dl = dlogits + (size_t)n * E;
        for (int e = 0; e < E; e++) {
            double ds = c * counts[e], d;
            if (score == BE_MOE_SOFTMAX) d = s[e] * (ds - dot);
            else d = (ds / (sum + 1e-20) - dot / (sum + 1e-20)) * sg[e] * (1.0f - sg[e]);
            dl[e] += (float)(dscale * d);
        }
    }
    return loss;
}

/* ST-MoE's router z-loss: coeff / T sum_n logsumexp(l_n)^2 (T = `tokens`). Returns it; dlogits
 * += dscale times its gradient. */
double cpu_moe_z_loss(const backend *be, float *dlogits, const float *logits, int N, int E, double coeff, double tokens,
                      float dscale)
{
    double loss = 0;
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)N * E > 65536) reduction(+ : loss)
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * E;
        float mx = l[0];
        for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        double sum = 0;
        for (int e = 0; e < E; e++) sum += exp((double)l[e] - mx);
        double lse = mx + log(sum);
        loss += coeff * lse * lse / tokens;
        if (!dlogits) continue;
        float *dl = dlogits + (size_t)n * E;
        for (int e = 0; e < E; e++) dl[e] += (float)(dscale * coeff * 2 * lse / tokens * exp((double)l[e] - lse));
    }
    return loss;
}

/* xe[row[n k + j]] = x[n] (h floats a row): every token's row once for each expert it goes to. */
void cpu_moe_permute(const backend *be, float *xe, const float *x, const int32_t *row, int N, int k, int h)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)N * k * h > 65536)
    for (int n = 0; n < N; n++)
        for (int j = 0; j < k; j++)
            if (row[n * k + j] >= 0) memcpy(xe + (size_t)row[n * k + j] * h, x + (size_t)n * h, (size_t)h * sizeof(float));
}

/* dx[n] += sum_j dxe[row[n k + j]]: the permutation's backward. */
void cpu_moe_permute_bwd(const backend *be, float *dx, const float *dxe, const int32_t *row, int N, int k, int h)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)N * k * h > 65536)
    for (int n = 0; n < N; n++)
        for (int j = 0; j < k; j++) {
            if (row[n * k + j] < 0) continue; /* dropped (over an expert's capacity) */
            const float *s = dxe + (size_t)row[n * k + j] * h;
            float *d = dx + (size_t)n * h;
            for (int c = 0; c < h; c++) d[c] += s[c];
        }
}

/* out[n] written = sum_j probs[n k + j] ye[row[n k + j]]: the experts' outputs weighted back. */
void cpu_moe_unpermute(const backend *be, float *out, const float *ye, const int32_t *row, const float *probs, int N,
                       int k, int h)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)N * k * h > 65536)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * h;
        memset(o, 0, (size_t)h * sizeof(float));
        for (int j = 0; j < k; j++) {
            if (row[n * k + j] < 0) continue;
            const float *y = ye + (size_t)row[n * k + j] * h, p = probs[n * k + j];
            for (int c = 0; c < h; c++) o[c] += p * y[c];
        }
    }
}

/* Its backward: dye[row[n k + j]] written = probs[n k + j] dout[n]; dprobs[n k + j] written =
 * dout[n] . ye[row[n k + j]]. */
void cpu_moe_unpermute_bwd(const backend *be, float *dye, float *dprobs, const float *dout, const float *ye,
                           const int32_t *row, const float *probs, int N, int k, int h)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)N * k * h > 65536)
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * h;
        for (int j = 0; j < k; j++) {
            if (row[n * k + j] < 0) { /* dropped: no part in the output */
                dprobs[n * k + j] = 0;
                continue;
            }
            size_t r = (size_t)row[n * k + j] * h;
            const float *y = ye + r;
            float *dy = dye + r, p = probs[n * k + j];
            double dot = 0;
            for (int c = 0; c < h; c++) dot += (double)d[c] * y[c], dy[c] = p * d[c];
            dprobs[n * k + j] = (float)dot;
        }
    }
}
