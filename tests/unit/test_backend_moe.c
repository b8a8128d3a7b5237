/* src/backend/cpu/moe_router.c, mixture-of-experts routing: the choice and weights of every score
 * function (softmax after or before the top-k, sigmoid with and without the expert bias, the
 * scaling factor) against plain arithmetic worked by hand and against a double-precision
 * reference written here (Megatron-Core's topk_routing_with_score_function); their gradient,
 * the load-balancing loss's and the z-loss's against central finite differences of that
 * reference in double. Logits are drawn far from ties (routing is piecewise smooth: the choice
 * is held fixed, as the finite differences do not move it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "test_backend_util.h"

static int setup(void **state)
{
    *state = be_create("cpu", 2);
    return 0;
}

static int teardown(void **state)
{
    be_free(*state);
    return 0;
}

/* ---- the double-precision reference ---- */
typedef struct {
    int N, E, k, score, pre;
    double scale, coeff, tokens;
    double *l;         /* (N, E) logits */
    const int32_t *ix; /* (N, k): the choice, held fixed */
    const int32_t *counts;
} ref;

static void softmax_d(const double *l, int n, double *s)
{
    double mx = l[0], sum = 0;
    for (int i = 1; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < n; i++) sum += (s[i] = exp(l[i] - mx));
    for (int i = 0; i < n; i++) s[i] /= sum;
}

static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

/* probs (N, k) of the fixed choice */
static void route_ref(void *ctx, double *out)
{
    ref *r = ctx;
    double s[64], sub[64];
    for (int n = 0; n < r->N; n++) {
        const double *l = r->l + (size_t)n * r->E;
        const int32_t *ix = r->ix + (size_t)n * r->k;
        double *p = out + (size_t)n * r->k;
        if (r->score == BE_MOE_SOFTMAX && r->pre) {
            softmax_d(l, r->E, s);
            for (int j = 0; j < r->k; j++) p[j] = s[ix[j]];
        } else if (r->score == BE_MOE_SOFTMAX) {
            for (int j = 0; j < r->k; j++) sub[j] = l[ix[j]];
            softmax_d(sub, r->k, p);
        } else {
            double sum = 0;
            for (int j = 0; j < r->k; j++) sum += (p[j] = sigmoid_d(l[ix[j]]));
            if (r->k > 1)
                for (int j = 0; j < r->k; j++) p[j] /= sum + 1e-20;
        }
        if (r->scale != 0)
            for (int j = 0; j < r->k; j++) p[j] *= r->scale;
    }
}

/* the load-balancing loss, one output */
static void aux_ref(void *ctx, double *out)
{
    ref *r = ctx;
    double s[64], total = 0;
    for (int n = 0; n < r->N; n++) {
        const double *l = r->l + (size_t)n * r->E;
        if (r->score == BE_MOE_SOFTMAX) softmax_d(l, r->E, s);
        else {
            double sum = 0;
            for (int e = 0; e < r->E; e++) sum += (s[e] = sigmoid_d(l[e]));
            for (int e = 0; e < r->E; e++) s[e] /= sum + 1e-20;
        }
        for (int e = 0; e < r->E; e++) total += s[e] * r->counts[e];
    }
    out[0] = total * r->coeff * r->E / (r->k * r->tokens * r->tokens);
}

static void z_ref(void *ctx, double *out)
{
    ref *r = ctx;
    double total = 0;
    for (int n = 0; n < r->N; n++) {
        const double *l = r->l + (size_t)n * r->E;
        double mx = l[0], sum = 0;
        for (int e = 1; e < r->E; e++) mx = l[e] > mx ? l[e] : mx;
        for (int e = 0; e < r->E; e++) sum += exp(l[e] - mx);
        double lse = mx + log(sum);
        total += lse * lse;
    }
    out[0] = r->coeff * total / r->tokens;
}

/* ---- by hand ---- */
static void by_hand(void **state)
{
    const backend *be = *state;
    /* logits 0, ln 2, ln 3, 0: softmax (1, 2, 3, 1)/7 */
    float l[4] = {0.0f, (float)log(2.0), (float)log(3.0), 0.0f}, p[2];
    int32_t ix[2];
    be_moe_route_fwd(be, ix, p, l, NULL, 1, 4, 2, BE_MOE_SOFTMAX, 0, 0);
    assert_int_equal(ix[0], 2), assert_int_equal(ix[1], 1);
    assert_true(fabs(p[0] - 0.6) < 1e-6 && fabs(p[1] - 0.4) < 1e-6); /* softmax of (ln 3, ln 2): 3/5, 2/5 */
    be_moe_route_fwd(be, ix, p, l, NULL, 1, 4, 2, BE_MOE_SOFTMAX, 1, 0);
    assert_int_equal(ix[0], 2), assert_int_equal(ix[1], 1);
    assert_true(fabs(p[0] - 3.0 / 7) < 1e-6 && fabs(p[1] - 2.0 / 7) < 1e-6);
    be_moe_route_fwd(be, ix, p, l, NULL, 1, 4, 2, BE_MOE_SOFTMAX, 1, 2.5f); /* the scaling factor */
    assert_true(fabs(p[0] - 2.5 * 3 / 7) < 1e-6 && fabs(p[1] - 2.5 * 2 / 7) < 1e-6);
    /* sigmoid: logits ln 3 and ln(1/3) give 3/4 and 1/4; normalised over the two chosen */
    float s[4] = {(float)log(3.0), (float)-log(3.0), -5.0f, (float)log(3.0) - 0.5f};
    be_moe_route_fwd(be, ix, p, s, NULL, 1, 4, 2, BE_MOE_SIGMOID, 0, 0);
    assert_int_equal(ix[0], 0), assert_int_equal(ix[1], 3);
    double a = 0.75, b = 1.0 / (1.0 + exp(-(log(3.0) - 0.5)));
    assert_true(fabs(p[0] - a / (a + b)) < 1e-6 && fabs(p[1] - b / (a + b)) < 1e-6);
    /* the expert bias moves the choice, not the weights: +1 on expert 1 makes it the first */
    float bias[4] = {0, 1, 0, 0};
    be_moe_route_fwd(be, ix, p, s, bias, 1, 4, 2, BE_MOE_SIGMOID, 0, 0);
    assert_int_equal(ix[0], 1), assert_int_equal(ix[1], 0);
    assert_true(fabs(p[0] - 0.25 / (0.25 + 0.75)) < 1e-6 && fabs(p[1] - 0.75) < 1e-6);
    /* k = 1 with sigmoid: the score itself */
    be_moe_route_fwd(be, ix, p, s, NULL, 1, 4, 1, BE_MOE_SIGMOID, 0, 0);
    assert_int_equal(ix[0], 0);
    assert_true(fabs(p[0] - 0.75) < 1e-6);
    /* ties go to the lower index */
    float t[4] = {1, 2, 2, 2};
    be_moe_route_fwd(be, ix, p, t, NULL, 1, 4, 2, BE_MOE_SOFTMAX, 0, 0);
    assert_int_equal(ix[0], 1), assert_int_equal(ix[1], 2);
    /* z-loss of logits all 0 over 4 experts: (ln 4)^2; aux loss of uniform scores: coeff E/(k T^2)
     * sum_e (T/E) counts_e = coeff (the balanced value), with counts summing to k T */
    float z[8] = {0};
    assert_true(fabs(be_moe_z_loss(be, NULL, z, 2, 4, 1.0, 2, 1) - log(4.0) * log(4.0)) < 1e-6);
    int32_t counts[4] = {1, 1, 1, 1}; /* 2 tokens, k 2 */
    assert_true(fabs(be_moe_aux_loss(be, NULL, z, counts, 2, 4, 2, BE_MOE_SOFTMAX, 0.01, 2, 1) - 0.01) < 1e-9);
}

/* ---- against the reference ---- */
enum { N = 12, E = 8, K = 3 };

/* logits far from ties: a permutation of spaced values plus a little noise, per row */
static void spaced_logits(float *l, uint64_t stream)
{
    for (int n = 0; n < N; n++)
        for (int e = 0; e < E; e++) {
            int slot = (e * 5 + n * 3) % E; /* a different order each row */
            l[n * E + e] = -1.2f + 0.35f * (float)slot + 0.05f * td_philox_uniform(7, stream, (uint64_t)(n * E + e));
        }
}

static void case_route(const backend *be, int score, int pre, float scale, const char *name)
{
    float l[N * E], p[N * K], dl[N * E] = {0}, dp[N * K];
    int32_t ix[N * K];
    spaced_logits(l, 1);
    tb_rand(dp, N * K, 2, -1, 1);
    be_moe_route_fwd(be, ix, p, l, NULL, N, E, K, score, pre, scale);
    /* the choice: the k largest scores (logits for softmax after the top-k: the same order) */
    for (int n = 0; n < N; n++)
        for (int j = 0; j < K; j++) {
            int above = 0;
            for (int e = 0; e < E; e++) above += l[n * E + e] > l[n * E + ix[n * K + j]];
            assert_int_equal(above, j);
        }
    ref r = {N, E, K, score, pre, scale, 0, 0, tb_dup(l, N * E), ix, NULL};
    double want[N * K], R[N * K];
    route_ref(&r, want);
    char what[96];
    snprintf(what, sizeof what, "%s weights", name);
    TB_CLOSE(what, p, want, N * K, 2e-6);
    for (int i = 0; i < N * K; i++) R[i] = dp[i];
    be_moe_route_bwd(be, dl, dp, l, ix, N, E, K, score, pre, scale);
    snprintf(what, sizeof what, "%s d logits", name);
    TB_GRAD(what, dl, r.l, N * E, route_ref, &r, R, N * K, 1e-5);
    free(r.l);
}

static void route_against_reference(void **state)
{
    const backend *be = *state;
    case_route(be, BE_MOE_SOFTMAX, 0, 0, "softmax after top-k");
    case_route(be, BE_MOE_SOFTMAX, 1, 0, "softmax before top-k");
    case_route(be, BE_MOE_SOFTMAX, 1, 2.5f, "softmax before, scaled 2.5");
    case_route(be, BE_MOE_SIGMOID, 0, 0, "sigmoid");
    case_route(be, BE_MOE_SIGMOID, 0, 1.5f, "sigmoid, scaled 1.5");
}

static void losses_against_reference(void **state)
{
    const backend *be = *state;
    float l[N * E];
    int32_t ix[N * K], counts[E] = {0};
    float p[N * K];
    spaced_logits(l, 3);
    be_moe_route_fwd(be, ix, p, l, NULL, N, E, K, BE_MOE_SOFTMAX, 0, 0);
    for (int i = 0; i < N * K; i++) counts[ix[i]]++;
    for (int score = BE_MOE_SOFTMAX; score <= BE_MOE_SIGMOID; score++) {
        float dl[N * E] = {0};
        ref r = {N, E, K, score, 0, 0, 0.01, 2.0 * N, tb_dup(l, N * E), ix, counts}; /* T: as if another rank had as many */
        double want, one = 1;
        aux_ref(&r, &want);
        double got = be_moe_aux_loss(be, dl, l, counts, N, E, K, score, 0.01, 2.0 * N, 1);
        printf("  aux loss (%s): %.9g against %.9g\n", score == BE_MOE_SOFTMAX ? "softmax" : "sigmoid", got, want);
        assert_true(fabs(got - want) <= 1e-6 * fabs(want));
        TB_GRAD(score == BE_MOE_SOFTMAX ? "aux loss d logits (softmax)" : "aux loss d logits (sigmoid)", dl, r.l,
                N * E, aux_ref, &r, &one, 1, 1e-5);
        free(r.l);
    }
    float dl[N * E] = {0};
    ref r = {N, E, K, 0, 0, 0, 1e-3, 3.0 * N, tb_dup(l, N * E), ix, counts};
    double want, one = 0.5; /* dscale 0.5: the gradient scales with it */
    z_ref(&r, &want);
    double got = be_moe_z_loss(be, dl, l, N, E, 1e-3, 3.0 * N, 0.5f);
    printf("  z-loss: %.9g against %.9g\n", got, want);
    assert_true(fabs(got - want) <= 1e-6 * fabs(want));
    TB_GRAD("z-loss d logits", dl, r.l, N * E, z_ref, &r, &one, 1, 1e-5);
    free(r.l);
}

/* The grouped GEMM (--moe-grouped-gemm): every group's out = x W_g^T + b_g and its three
 * gradients against products summed in double here, groups of 0 rows among them; few rows a
 * group (run side by side on the threads) and many (one after another, threaded). */
static void grouped_case(const backend *be, const int32_t *counts, int G, int C, int OC, const char *name)
{
    int64_t R = 0;
    for (int g = 0; g < G; g++) R += counts[g];
    float *x = tb_rand_new((size_t)R * C, 11, -1, 1), *w = tb_rand_new((size_t)G * OC * C, 12, -0.5f, 0.5f);
    float *b = tb_rand_new((size_t)G * OC, 13, -0.5f, 0.5f), *d = tb_rand_new((size_t)R * OC, 14, -1, 1);
    float *out = tb_zeros((size_t)R * OC), *dx = tb_zeros((size_t)R * C), *dw = tb_zeros((size_t)G * OC * C),
          *db = tb_zeros((size_t)G * OC);
    be_matmul_grouped_fwd(be, out, x, w, b, counts, G, C, OC);
    be_matmul_grouped_bwd(be, dx, dw, db, d, x, w, counts, G, C, OC);
    double worst[4] = {0, 0, 0, 0};
    for (int g = 0, r0 = 0; g < G; r0 += counts[g++]) {
        const float *wg = w + (size_t)g * OC * C;
        for (int i = r0; i < r0 + counts[g]; i++)
            for (int o = 0; o < OC; o++) { /* out */
                double s = b[(size_t)g * OC + o];
                for (int c = 0; c < C; c++) s += (double)x[(size_t)i * C + c] * wg[(size_t)o * C + c];
                worst[0] = fmax(worst[0], fabs(out[(size_t)i * OC + o] - s) / (1 + fabs(s)));
            }
        for (int i = r0; i < r0 + counts[g]; i++)
            for (int c = 0; c < C; c++) { /* dx = d W */
                double s = 0;
                for (int o = 0; o < OC; o++) s += (double)d[(size_t)i * OC + o] * wg[(size_t)o * C + c];
                worst[1] = fmax(worst[1], fabs(dx[(size_t)i * C + c] - s) / (1 + fabs(s)));
            }
        for (int o = 0; o < OC; o++) { /* dW = d^T x, db = column sums of d, over the group's rows only */
            double sb = 0;
            for (int i = r0; i < r0 + counts[g]; i++) sb += d[(size_t)i * OC + o];
            worst[3] = fmax(worst[3], fabs(db[(size_t)g * OC + o] - sb) / (1 + fabs(sb)));
            for (int c = 0; c < C; c++) {
                double s = 0;
                for (int i = r0; i < r0 + counts[g]; i++) s += (double)d[(size_t)i * OC + o] * x[(size_t)i * C + c];
                worst[2] = fmax(worst[2], fabs(dw[((size_t)g * OC + o) * C + c] - s) / (1 + fabs(s)));
            }
        }
    }
    printf("  grouped GEMM, %s: out %.2g, dx %.2g, dW %.2g, db %.2g\n", name, worst[0], worst[1], worst[2], worst[3]);
    for (int k = 0; k < 4; k++) assert_true(worst[k] < 5e-5); /* fp32 sums of up to 1100 products */
    free(x), free(w), free(b), free(d), free(out), free(dx), free(dw), free(db);
}

static void grouped_gemm(void **state)
{
    const backend *be = *state;
    const int32_t few[6] = {3, 0, 17, 1, 9, 0}, many[3] = {700, 0, 1100};
    grouped_case(be, few, 6, 24, 40, "6 experts of 0-17 rows (side by side)");
    grouped_case(be, many, 3, 16, 24, "3 experts of 0-1100 rows (one after another)");
}

int main(void)
{
    tb_skip_unless_isa_runs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(by_hand),
        cmocka_unit_test(route_against_reference),
        cmocka_unit_test(losses_against_reference),
        cmocka_unit_test(grouped_gemm),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
