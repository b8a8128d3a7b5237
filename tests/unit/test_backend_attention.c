/* src/backend/cpu/attention.c: the causal attention core against a double-precision reference
 * (with and without attention dropout, across the query-block boundary), the backward against
 * central finite differences of that reference, accumulation, causality, and dropout masks
 * that do not depend on how heads and batch rows are split. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "test_backend_util.h"

static int setup(void **state)
{
    *state = be_cpu(2);
    return 0;
}

static int teardown(void **state)
{
    be_free(*state);
    return 0;
}

typedef struct {
    double *qkv; /* (B, T, 3C) */
    int B, T, NH, HS;
    const be_drop *drop; /* NULL: none */
    double *lse;         /* (B, NH, T) written, or NULL */
} att_ctx;

static void att_ref(void *vc, double *out)
{
    att_ctx *c = vc;
    int C = c->NH * c->HS, T = c->T, HS = c->HS;
    double *s = td_xmalloc((size_t)T * sizeof(double));
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = c->qkv + ((size_t)b * T + t) * 3 * C + h * HS;
                double m = -INFINITY, sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    const double *k = c->qkv + ((size_t)b * T + j) * 3 * C + C + h * HS;
                    double d = 0.0;
                    for (int e = 0; e < HS; e++) d += q[e] * k[e];
                    s[j] = d / sqrt((double)HS);
                    m = s[j] > m ? s[j] : m;
                }
                for (int j = 0; j <= t; j++) sum += exp(s[j] - m);
                if (c->lse) c->lse[((size_t)b * c->NH + h) * T + t] = m + log(sum);
                double *o = out + ((size_t)b * T + t) * C + h * HS;
                for (int e = 0; e < HS; e++) o[e] = 0.0;
                for (int j = 0; j <= t; j++) {
                    double p = exp(s[j] - m) / sum;
                    if (c->drop && c->drop->p > 0)
                        p *= be_drop_keep(c->drop, BE_DROP_ATTN, c->drop->sample[b], c->drop->pos0 + t,
                                          ((int64_t)c->drop->unit0 + h) * T + j)
                                 ? 1.0 / (1.0 - c->drop->p)
                                 : 0.0;
                    const double *v = c->qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * HS;
                    for (int e = 0; e < HS; e++) o[e] += p * v[e];
                }
            }
    free(s);
}

/* Forward (out and lse) against the reference, backward against FD, accumulation. */
static void check_attention(const backend *be, int B, int T, int NH, int HS, const be_drop *drop, const char *what)
{
    int C = NH * HS;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float *qkv = tb_rand_new(nqkv, 60, -1.5f, 1.5f), *R = tb_rand_new(nout, 61, -1, 1);
    float *out = tb_zeros(nout), *lse = tb_zeros(nlse), *dqkv = tb_zeros(nqkv);
    double *ref = td_xmalloc(nout * sizeof(double)), *lse_ref = td_xmalloc(nlse * sizeof(double));
    double *Rd = tb_dup(R, nout);
    att_ctx c = {tb_dup(qkv, nqkv), B, T, NH, HS, drop, lse_ref};
    char name[64];

    be_attention_fwd(be, out, lse, qkv, B, T, NH, HS, drop);
    att_ref(&c, ref);
    c.lse = NULL;
    snprintf(name, sizeof name, "attention fwd %s", what);
    TB_CLOSE(name, out, ref, nout, 1e-5);
    snprintf(name, sizeof name, "attention lse %s", what);
    TB_CLOSE(name, lse, lse_ref, nlse, 1e-5);

    be_attention_bwd(be, dqkv, R, qkv, lse, B, T, NH, HS, drop);
    snprintf(name, sizeof name, "attention dqkv %s", what);
    TB_GRAD(name, dqkv, c.qkv, nqkv, att_ref, &c, Rd, nout, 1e-4);
    float *once = tb_copy(dqkv, nqkv);
    be_attention_bwd(be, dqkv, R, qkv, lse, B, T, NH, HS, drop);
    tb_check_doubled(name, once, dqkv, nqkv);

    free(qkv), free(R), free(out), free(lse), free(dqkv), free(ref), free(lse_ref), free(Rd), free(c.qkv);
    free(once);
}

static void attention_small(void **state) { check_attention(*state, 2, 5, 2, 3, NULL, "(B2 T5 NH2 HS3)"); }

static void attention_dropout(void **state)
{
    const int64_t sample[2] = {7, 1000000000123LL};
    be_drop drop = {.p = 0.3f, .seed = 99, .sample = sample, .site = 5, .pos0 = 0, .unit0 = 3};
    check_attention(*state, 2, 5, 2, 3, &drop, "(p 0.3)");
    be_drop zero = drop;
    zero.p = 0.0f;
    check_attention(*state, 2, 5, 2, 3, &zero, "(p 0)");
}

/* T > the kernel's query block (64): the blocks and the causal key ranges meet correctly. */
static void attention_blocked(void **state)
{
    const int64_t sample[1] = {42};
    be_drop drop = {.p = 0.2f, .seed = 3, .sample = sample, .site = 1, .pos0 = 0, .unit0 = 0};
    check_attention(*state, 1, 70, 1, 2, &drop, "(T70, p 0.2)");
}

/* Changing token u changes no output before u; gradients flowing from outputs before u give
 * token u exactly nothing. */
static void attention_causal(void **state)
{
    const backend *be = *state;
    enum { B = 1, T = 9, NH = 2, HS = 4, C = NH * HS, U = 6 };
    const int64_t sample[1] = {5};
    be_drop drop = {.p = 0.25f, .seed = 1, .sample = sample, .site = 0, .pos0 = 0, .unit0 = 0};
    float *qkv = tb_rand_new(B * T * 3 * C, 70, -1, 1), out0[B * T * C], out1[B * T * C], lse[B * NH * T];
    be_attention_fwd(be, out0, lse, qkv, B, T, NH, HS, &drop);
    for (int j = 0; j < 3 * C; j++) qkv[U * 3 * C + j] += 0.5f + (float)j;
    be_attention_fwd(be, out1, lse, qkv, B, T, NH, HS, &drop);
    assert_memory_equal(out0, out1, (size_t)U * C * sizeof(float));
    int changed = 0;
    for (int i = U * C; i < T * C; i++) changed |= out0[i] != out1[i];
    assert_true(changed);

    float *dout = tb_rand_new(B * T * C, 71, -1, 1), *dqkv = tb_zeros(B * T * 3 * C);
    memset(dout + U * C, 0, (size_t)(T - U) * C * sizeof(float));
    be_attention_bwd(be, dqkv, dout, qkv, lse, B, T, NH, HS, &drop);
    for (int i = U * 3 * C; i < T * 3 * C; i++) assert_true(dqkv[i] == 0.0f);
    printf("  attention: past outputs bitwise unchanged by a future token; no gradient flows back to it\n");
    free(qkv), free(dout), free(dqkv);
}

/* The attention dropout mask is keyed by global head and sample: two ranks holding two heads
 * each, or one batch row each, compute exactly the slices of the whole. */
static void attention_dropout_layout_invariant(void **state)
{
    const backend *be = *state;
    enum { B = 2, T = 7, NH = 4, HS = 3, C = NH * HS, HN = 2, HC = HN * HS };
    const int64_t sample[B] = {11, 12};
    be_drop drop = {.p = 0.5f, .seed = 77, .sample = sample, .site = 9, .pos0 = 0, .unit0 = 0};
    float *qkv = tb_rand_new(B * T * 3 * C, 80, -1, 1), out[B * T * C], lse[B * NH * T];
    be_attention_fwd(be, out, lse, qkv, B, T, NH, HS, &drop);

    /* split by heads: rank r holds heads [2r, 2r+2), its own qkv columns */
    for (int r = 0; r < 2; r++) {
        float part[B * T * 3 * HC], pout[B * T * HC], plse[B * HN * T];
        for (int bt = 0; bt < B * T; bt++)
            for (int s = 0; s < 3; s++)
                memcpy(part + bt * 3 * HC + s * HC, qkv + bt * 3 * C + s * C + r * HC, HC * sizeof(float));
        be_drop d = drop;
        d.unit0 = r * HN;
        be_attention_fwd(be, pout, plse, part, B, T, HN, HS, &d);
        for (int bt = 0; bt < B * T; bt++)
            for (int e = 0; e < HC; e++) assert_true(fabsf(pout[bt * HC + e] - out[bt * C + r * HC + e]) <= 1e-6f);
    }
    /* split by batch rows: rank b holds row b with its own global sample index */
    for (int b = 0; b < B; b++) {
        float pout[T * C], plse[NH * T];
        be_drop d = drop;
        d.sample = sample + b;
        be_attention_fwd(be, pout, plse, qkv + b * T * 3 * C, 1, T, NH, HS, &d);
        for (int i = 0; i < T * C; i++) assert_true(fabsf(pout[i] - out[b * T * C + i]) <= 1e-6f);
    }
    /* and a different seed gives a different mask */
    float other[B * T * C];
    drop.seed = 78;
    be_attention_fwd(be, other, lse, qkv, B, T, NH, HS, &drop);
    assert_true(memcmp(other, out, sizeof other) != 0);
    printf("  attention dropout: head slices and batch-row slices equal the whole (to 1e-6)\n");
    free(qkv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(attention_small),
        cmocka_unit_test(attention_dropout),
        cmocka_unit_test(attention_blocked),
        cmocka_unit_test(attention_causal),
        cmocka_unit_test(attention_dropout_layout_invariant),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
