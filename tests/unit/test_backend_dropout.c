/* src/backend/cpu/dropout.c: p = 0 is exactly the identity; the mask is Philox at logical
 * coordinates (checked element by element against be_drop_keep), drops about p, and is the
 * same whether a tensor is processed whole or by rows, positions or channels; the backward
 * uses the same mask; bias-dropout-add against a reference and finite differences; a context-
 * parallel rank's two chunks draw the whole sequence's masks at their positions. */
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

static void p_zero_is_identity(void **state)
{
    const backend *be = *state;
    enum { B = 2, T = 3, C = 20, N = B * T * C };
    const int64_t sample[B] = {0, 1};
    be_drop zero = {.p = 0.0f, .seed = 5, .sample = sample, .site = 0};
    float *x = tb_rand_new(N, 1, -1, 1), *keep = tb_copy(x, N), *out = tb_zeros(N);
    float *r = tb_rand_new(N, 2, -1, 1), *b = tb_rand_new(C, 3, -1, 1);
    be_dropout_fwd(be, out, x, B, T, C, &zero);
    assert_memory_equal(out, x, N * sizeof(float));
    be_dropout_fwd(be, x, x, B, T, C, &zero); /* in place: nothing to do */
    be_dropout_fwd(be, x, x, B, T, C, NULL);
    assert_memory_equal(x, keep, N * sizeof(float));
    be_dropout_bwd(be, out, r, B, T, C, &zero);
    assert_memory_equal(out, r, N * sizeof(float));
    be_bias_dropout_add_fwd(be, out, r, x, b, B, T, C, &zero);
    for (int i = 0; i < N; i++) assert_true(out[i] == r[i] + (x[i] + b[i % C]));
    be_bias_dropout_add_fwd(be, out, r, x, NULL, B, T, C, NULL);
    for (int i = 0; i < N; i++) assert_true(out[i] == r[i] + x[i]);
    free(x), free(keep), free(out), free(r), free(b);
}

/* Every element against be_drop_keep, the fraction dropped, and the backward's mask. */
static void mask_matches_philox(void **state)
{
    const backend *be = *state;
    enum { B = 4, T = 64, C = 256, N = B * T * C };
    const int64_t sample[B] = {3, 1LL << 33, 17, 900};
    be_drop d = {.p = 0.1f, .seed = 2024, .sample = sample, .site = 7, .pos0 = 5, .unit0 = 32};
    float *x = tb_rand_new(N, 10, 0.5f, 1.5f), *out = tb_zeros(N), *dx = tb_zeros(N);
    be_dropout_fwd(be, out, x, B, T, C, &d);
    be_dropout_bwd(be, dx, x, B, T, C, &d);
    long dropped = 0;
    float s = 1.0f / (1.0f - d.p);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                size_t i = ((size_t)b * T + t) * C + c;
                int keep = be_drop_keep(&d, BE_DROP_HIDDEN, sample[b], d.pos0 + t, d.unit0 + c);
                assert_true(out[i] == (keep ? x[i] * s : 0.0f));
                assert_true(dx[i] == out[i]);
                dropped += !keep;
            }
    double frac = (double)dropped / N;
    printf("  dropout p 0.1: dropped %.4f of %d (4 sigma = 0.0047)\n", frac, N);
    assert_true(fabs(frac - 0.1) < 0.0047);
    /* other sites, seeds and kinds give other masks */
    be_drop e = d;
    e.site = 8;
    float *o2 = tb_zeros(N);
    be_dropout_fwd(be, o2, x, B, T, C, &e);
    assert_true(memcmp(o2, out, N * sizeof(float)) != 0);
    int differ = 0;
    for (int u = 0; u < 64; u++)
        differ |= be_drop_keep(&d, BE_DROP_HIDDEN, 3, 0, u) != be_drop_keep(&d, BE_DROP_ATTN, 3, 0, u);
    assert_true(differ);
    free(x), free(out), free(dx), free(o2);
}

/* Rows that start inside a Philox block and span several batches of blocks (a partial block, whole
 * batches of 16 blocks, a tail of 16 units or more, a shorter one): every element against
 * be_drop_keep, for unit offsets 0..4 and row widths around the batch's 64 units. */
static void mask_unaligned_rows(void **state)
{
    const backend *be = *state;
    enum { B = 2, T = 3, CMAX = 4 * TD_PHILOX_BATCH * 2 + 23 };
    const int widths[] = {CMAX, 64 + 9, 64, 40, 17, 7};
    const int64_t sample[B] = {5, 77};
    float *x = tb_rand_new(B * T * CMAX, 12, 0.5f, 1.5f), *out = tb_zeros(B * T * CMAX);
    for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++)
        for (int u0 = 0; u0 <= 4; u0++) {
            int C = widths[wi];
            be_drop d = {.p = 0.25f, .seed = 99, .sample = sample, .site = 3, .pos0 = 1, .unit0 = 4093 + u0};
            be_dropout_fwd(be, out, x, B, T, C, &d);
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++)
                    for (int c = 0; c < C; c++) {
                        size_t i = ((size_t)b * T + t) * C + c;
                        int keep = be_drop_keep(&d, BE_DROP_HIDDEN, sample[b], d.pos0 + t, d.unit0 + c);
                        assert_true(out[i] == (keep ? x[i] * (1.0f / (1.0f - d.p)) : 0.0f));
                    }
        }
    free(x), free(out);
}

/* A whole (B, T, C) tensor against slices of it: batch rows (with their sample indices),
 * positions (pos0), channels (unit0). Bitwise equal. */
static void mask_layout_invariant(void **state)
{
    const backend *be = *state;
    enum { B = 3, T = 8, C = 40, N = B * T * C };
    const int64_t sample[B] = {100, 7, 55};
    be_drop d = {.p = 0.4f, .seed = 11, .sample = sample, .site = 2, .pos0 = 0, .unit0 = 0};
    float *x = tb_rand_new(N, 20, -1, 1), *whole = tb_zeros(N);
    be_dropout_fwd(be, whole, x, B, T, C, &d);

    /* batch row 1 alone */
    float row[T * C];
    be_drop e = d;
    e.sample = sample + 1;
    be_dropout_fwd(be, row, x + T * C, 1, T, C, &e);
    assert_memory_equal(row, whole + T * C, sizeof row);

    /* positions [3, 8) of every row (a sequence-parallel slice) */
    enum { T0 = 3, TS = T - T0 };
    float in_s[B * TS * C], out_s[B * TS * C];
    for (int b = 0; b < B; b++) memcpy(in_s + b * TS * C, x + (b * T + T0) * C, TS * C * sizeof(float));
    e = d;
    e.pos0 = T0;
    be_dropout_fwd(be, out_s, in_s, B, TS, C, &e);
    for (int b = 0; b < B; b++)
        assert_memory_equal(out_s + b * TS * C, whole + (b * T + T0) * C, TS * C * sizeof(float));

    /* channels [13, 40) (an odd start: Philox blocks of 4 units straddle the cut) */
    enum { C0 = 13, CS = C - C0 };
    float in_c[B * T * CS], out_c[B * T * CS];
    for (int r = 0; r < B * T; r++) memcpy(in_c + r * CS, x + r * C + C0, CS * sizeof(float));
    e = d;
    e.unit0 = C0;
    be_dropout_fwd(be, out_c, in_c, B, T, CS, &e);
    for (int r = 0; r < B * T; r++) assert_memory_equal(out_c + r * CS, whole + r * C + C0, CS * sizeof(float));
    printf("  dropout: batch-row, position and channel slices bitwise equal the whole\n");
    free(x), free(whole);
}

typedef struct {
    double *resid, *inp, *b;
    int B, T, C;
    const be_drop *d;
} bda_ctx;

static void bda_ref(void *vc, double *out)
{
    bda_ctx *c = vc;
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->T; t++)
            for (int k = 0; k < c->C; k++) {
                size_t i = ((size_t)b * c->T + t) * c->C + k;
                double m = be_drop_keep(c->d, BE_DROP_HIDDEN, c->d->sample[b], c->d->pos0 + t, c->d->unit0 + k)
                               ? 1.0 / (1.0 - c->d->p)
                               : 0.0;
                out[i] = c->resid[i] + (c->inp[i] + c->b[k]) * m;
            }
}

/* bias-dropout-add forward against the reference; its backward (dresid = dout, dinp from
 * dropout_bwd, db from bias_bwd of that) against finite differences. */
static void bias_dropout_add(void **state)
{
    const backend *be = *state;
    enum { B = 2, T = 3, C = 11, N = B * T * C };
    const int64_t sample[B] = {8, 9};
    be_drop d = {.p = 0.3f, .seed = 4, .sample = sample, .site = 1, .pos0 = 2, .unit0 = 1};
    float *resid = tb_rand_new(N, 30, -1, 1), *inp = tb_rand_new(N, 31, -1, 1), *b = tb_rand_new(C, 32, -1, 1);
    float *R = tb_rand_new(N, 33, -1, 1), *out = tb_zeros(N);
    bda_ctx c = {tb_dup(resid, N), tb_dup(inp, N), tb_dup(b, C), B, T, C, &d};
    double ref[N], *Rd = tb_dup(R, N);
    be_bias_dropout_add_fwd(be, out, resid, inp, b, B, T, C, &d);
    bda_ref(&c, ref);
    TB_CLOSE("bias_dropout_add fwd", out, ref, N, 1e-6);
    /* out aliasing resid (the residual stream updated in place) */
    float *io = tb_copy(resid, N);
    be_bias_dropout_add_fwd(be, io, io, inp, b, B, T, C, &d);
    assert_memory_equal(io, out, N * sizeof(float));

    float *dinp = tb_zeros(N), *db = tb_zeros(C);
    be_dropout_bwd(be, dinp, R, B, T, C, &d);
    be_bias_bwd(be, db, dinp, B * T, C);
    TB_GRAD("bias_dropout_add dresid (= dout)", R, c.resid, N, bda_ref, &c, Rd, N, 1e-6);
    TB_GRAD("bias_dropout_add dinp", dinp, c.inp, N, bda_ref, &c, Rd, N, 1e-5);
    TB_GRAD("bias_dropout_add db", db, c.b, C, bda_ref, &c, Rd, N, 1e-5);
    /* dropout_bwd writes (does not accumulate) and works in place */
    be_dropout_bwd(be, R, R, B, T, C, &d);
    assert_memory_equal(R, dinp, N * sizeof(float));
    free(resid), free(inp), free(b), free(R), free(out), free(c.resid), free(c.inp), free(c.b), free(Rd), free(io);
    free(dinp), free(db);
}

/* Context parallelism: rank r of C holds chunks r and 2C - 1 - r of L positions of each sample;
 * its rows, keyed through cp_chunk (be_drop_pos), draw exactly the masks of those positions in the
 * whole sequence's dropout, for every rank (and with a sequence-parallel slice's pos0 inside the
 * rank's rows). */
static void mask_context_parallel_chunks(void **state)
{
    const backend *be = *state;
    enum { B = 2, C = 3, L = 4, S = 2 * C * L, H = 40, N = B * S * H, NL = B * 2 * L * H };
    const int64_t sample[B] = {11, 4};
    be_drop d = {.p = 0.3f, .seed = 99, .sample = sample, .site = 3, .unit0 = 8};
    float *x = tb_rand_new(N, 21, 0.5f, 1.5f), *full = tb_zeros(N);
    be_dropout_fwd(be, full, x, B, S, H, &d);
    float *xl = tb_zeros(NL), *out = tb_zeros(NL);
    for (int r = 0; r < C; r++) {
        int chunk[2] = {r, 2 * C - 1 - r};
        for (int b = 0; b < B; b++)
            for (int i = 0; i < 2; i++)
                memcpy(xl + ((size_t)b * 2 * L + i * L) * H, x + ((size_t)b * S + chunk[i] * L) * H, L * H * sizeof(float));
        be_drop dl = d;
        dl.cp_chunk = L, dl.cp_c0 = chunk[0], dl.cp_c1 = chunk[1];
        be_dropout_fwd(be, out, xl, B, 2 * L, H, &dl);
        for (int b = 0; b < B; b++)
            for (int i = 0; i < 2; i++)
                assert_memory_equal(out + ((size_t)b * 2 * L + i * L) * H, full + ((size_t)b * S + chunk[i] * L) * H,
                                    L * H * sizeof(float));
        /* the second half of the rank's rows alone (a sequence-parallel slice: pos0 = L) */
        float *half = tb_zeros(B * L * H), *xh = tb_zeros(B * L * H);
        for (int b = 0; b < B; b++) memcpy(xh + (size_t)b * L * H, xl + ((size_t)b * 2 * L + L) * H, L * H * sizeof(float));
        dl.pos0 = L;
        be_dropout_fwd(be, half, xh, B, L, H, &dl);
        for (int b = 0; b < B; b++)
            assert_memory_equal(half + (size_t)b * L * H, full + ((size_t)b * S + chunk[1] * L) * H, L * H * sizeof(float));
        free(half), free(xh);
    }
    free(x), free(full), free(xl), free(out);
}

int main(void)
{
    tb_skip_unless_isa_runs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(p_zero_is_identity),
        cmocka_unit_test(mask_matches_philox),
        cmocka_unit_test(mask_unaligned_rows),
        cmocka_unit_test(mask_layout_invariant),
        cmocka_unit_test(bias_dropout_add),
        cmocka_unit_test(mask_context_parallel_chunks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
