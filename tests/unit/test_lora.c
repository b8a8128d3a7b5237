/* src/model/lora.c: the LoRA linear (out += scaling B A dropout(x)), column- and row-parallel,
 * forward against a double-precision reference written here (the dropout mask from be_drop_keep,
 * the backend's own rule) and backward against central finite differences of that reference;
 * accumulation of the gradients; and a tensor-parallel split of two ranks emulated on one
 * process (B split by output rows, or A by input columns with the dropout's channels offset)
 * summing to the whole layer. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "model/lora.h"
#include "test_backend_util.h"

enum { NB = 2, NT = 3, BT = NB * NT, IN = 6, OUT = 4, R = 3 };
static const float SCALING = 1.75f;

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

typedef struct {
    double *x, *A, *B, *base; /* (BT, IN), (R, IN), (OUT, R), (BT, OUT) */
    const be_drop *drop;
} ref_ctx;

/* out = base + scaling ((x * mask / (1 - p)) A^T) B^T, in double. */
static void ref(void *vc, double *out)
{
    ref_ctx *c = vc;
    for (int i = 0; i < BT; i++) {
        double xd[IN], u[R];
        for (int k = 0; k < IN; k++) {
            double m = 1.0;
            if (c->drop && c->drop->p > 0.0f)
                m = be_drop_keep(c->drop, BE_DROP_HIDDEN, c->drop->sample[i / NT], c->drop->pos0 + i % NT,
                                 c->drop->unit0 + k)
                        ? 1.0 / (1.0 - (double)c->drop->p)
                        : 0.0;
            xd[k] = c->x[i * IN + k] * m;
        }
        for (int q = 0; q < R; q++) {
            u[q] = 0;
            for (int k = 0; k < IN; k++) u[q] += xd[k] * c->A[q * IN + k];
        }
        for (int o = 0; o < OUT; o++) {
            double s = 0;
            for (int q = 0; q < R; q++) s += u[q] * c->B[o * R + q];
            out[i * OUT + o] = c->base[i * OUT + o] + (double)SCALING * s;
        }
    }
}

/* One layer, column (row 0) or row-parallel (row 1) on one rank, with or without dropout: the
 * output against the reference, dx, dA, dB against finite differences, and a second backward
 * doubling them. */
static void check_layer(const backend *be, int row, float p)
{
    const int64_t sample[NB] = {12, 5};
    be_drop drop = {.p = p, .seed = 77, .sample = sample, .site = 9, .pos0 = 0, .unit0 = 0};
    const be_drop *dp = p > 0.0f ? &drop : NULL;
    lora_dims d = {NB, NT, IN, OUT, R, SCALING};
    float *x = tb_rand_new(BT * IN, 1, -1, 1), *A = tb_rand_new(R * IN, 2, -1, 1), *B = tb_rand_new(OUT * R, 3, -1, 1);
    float *out = tb_rand_new(BT * OUT, 4, -1, 1), *dy = tb_rand_new(BT * OUT, 5, -1, 1);
    float *su = tb_zeros(BT * R), *xd = tb_zeros(BT * IN), *tmp = tb_zeros(BT * (IN > OUT ? IN : OUT));
    float *du = tb_zeros(BT * R), *dx = tb_zeros(BT * IN), *dA = tb_zeros(R * IN), *dB = tb_zeros(OUT * R);
    ref_ctx c = {tb_dup(x, BT * IN), tb_dup(A, R * IN), tb_dup(B, OUT * R), tb_dup(out, BT * OUT), dp};
    double want[BT * OUT], *Rd = tb_dup(dy, BT * OUT);
    char name[64];
    const char *kind = row ? "row" : "column";

    if (row) lora_row_fwd(be, NULL, NULL, out, su, xd, tmp, x, A, B, dp, &d);
    else lora_column_fwd(be, NULL, out, su, xd, tmp, x, A, B, dp, &d);
    ref(&c, want);
    snprintf(name, sizeof name, "%s fwd, p %.1f", kind, (double)p);
    TB_CLOSE(name, out, want, BT * OUT, 1e-6);

    if (row) lora_row_bwd(be, dx, dA, dB, du, tmp, dy, x, xd, su, A, B, dp, &d);
    else lora_column_bwd(be, NULL, NULL, dx, dA, dB, du, tmp, dy, x, xd, su, A, B, dp, &d);
    snprintf(name, sizeof name, "%s dx, p %.1f", kind, (double)p);
    TB_GRAD(name, dx, c.x, BT * IN, ref, &c, Rd, BT * OUT, 1e-5);
    snprintf(name, sizeof name, "%s dA, p %.1f", kind, (double)p);
    TB_GRAD(name, dA, c.A, R * IN, ref, &c, Rd, BT * OUT, 1e-5);
    snprintf(name, sizeof name, "%s dB, p %.1f", kind, (double)p);
    TB_GRAD(name, dB, c.B, OUT * R, ref, &c, Rd, BT * OUT, 1e-5);
    float *dx1 = tb_copy(dx, BT * IN), *dA1 = tb_copy(dA, R * IN), *dB1 = tb_copy(dB, OUT * R);
    if (row) lora_row_bwd(be, dx, dA, dB, du, tmp, dy, x, xd, su, A, B, dp, &d);
    else lora_column_bwd(be, NULL, NULL, dx, dA, dB, du, tmp, dy, x, xd, su, A, B, dp, &d);
    tb_check_doubled("dx", dx1, dx, BT * IN);
    tb_check_doubled("dA", dA1, dA, R * IN);
    tb_check_doubled("dB", dB1, dB, OUT * R);
    free(dx1), free(dA1), free(dB1);
    free(x), free(A), free(B), free(out), free(dy), free(su), free(xd), free(tmp), free(du), free(dx), free(dA);
    free(dB), free(c.x), free(c.A), free(c.B), free(c.base), free(Rd);
}

static void column(void **state)
{
    check_layer(*state, 0, 0.0f);
    check_layer(*state, 0, 0.3f);
}

static void row(void **state)
{
    check_layer(*state, 1, 0.0f);
    check_layer(*state, 1, 0.3f);
}

/* max |a - b| over n, relative to max |b|. */
static double rel(const float *a, const float *b, size_t n)
{
    double e = 0, s = 1e-6;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    return e / s;
}

/* Two tensor-parallel ranks on one process. Column-parallel: rank k holds A whole and rows [k OUT/2,
 * (k + 1) OUT/2) of B; its output columns are the whole layer's; dA and dx, each rank's part, sum
 * to the whole's (the group sum lora_column_bwd does on du, done here by hand). Row-parallel:
 * rank k holds columns [k IN/2, ...) of x and A, its dropout's channels from unit0 = k IN/2; the
 * su of the two ranks sum to the whole's, and dA_k and dx_k are slices of the whole's. */
static void tp_split(void **state)
{
    const backend *be = *state;
    const int64_t sample[NB] = {3, 40};
    be_drop drop = {.p = 0.25f, .seed = 5, .sample = sample, .site = 2, .pos0 = 0, .unit0 = 0};
    float *x = tb_rand_new(BT * IN, 11, -1, 1), *A = tb_rand_new(R * IN, 12, -1, 1), *B = tb_rand_new(OUT * R, 13, -1, 1);
    float *dy = tb_rand_new(BT * OUT, 14, -1, 1);
    float *out = tb_zeros(BT * OUT), *su = tb_zeros(BT * R), *xd = tb_zeros(BT * IN), *tmp = tb_zeros(BT * IN);
    float *du = tb_zeros(BT * R), *dx = tb_zeros(BT * IN), *dA = tb_zeros(R * IN), *dB = tb_zeros(OUT * R);
    lora_dims d = {NB, NT, IN, OUT, R, SCALING};
    /* the whole layer (column form; the row form is the same function on one rank) */
    lora_column_fwd(be, NULL, out, su, xd, tmp, x, A, B, &drop, &d);
    lora_column_bwd(be, NULL, NULL, dx, dA, dB, du, tmp, dy, x, xd, su, A, B, &drop, &d);

    /* column-parallel: B by output rows */
    {
        lora_dims h = {NB, NT, IN, OUT / 2, R, SCALING};
        float *dA_sum = tb_zeros(R * IN), *dx_sum = tb_zeros(BT * IN), *du_sum = tb_zeros(BT * R);
        float *out_k = tb_zeros(BT * OUT / 2), *dy_k = tb_zeros(BT * OUT / 2), *dB_k = tb_zeros(OUT / 2 * R);
        float *su_k = tb_zeros(BT * R), *xd_k = tb_zeros(BT * IN), *du_k = tb_zeros(BT * R);
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < BT; i++)
                for (int o = 0; o < OUT / 2; o++) dy_k[i * OUT / 2 + o] = dy[i * OUT + k * OUT / 2 + o];
            memset(out_k, 0, BT * OUT / 2 * sizeof(float));
            lora_column_fwd(be, NULL, out_k, su_k, xd_k, tmp, x, A, B + k * OUT / 2 * R, &drop, &h);
            for (int i = 0; i < BT; i++)
                for (int o = 0; o < OUT / 2; o++)
                    assert_true(fabsf(out_k[i * OUT / 2 + o] - out[i * OUT + k * OUT / 2 + o]) <= 1e-6f);
            /* without a group (tp NULL) du, dA and dx are this rank's parts: their sums over the two
             * ranks (lora_column_bwd's all-reduce of du, by hand) are the whole layer's */
            memset(dB_k, 0, OUT / 2 * R * sizeof(float));
            float *dA_k = tb_zeros(R * IN), *dx_k = tb_zeros(BT * IN);
            lora_column_bwd(be, NULL, NULL, dx_k, dA_k, dB_k, du_k, tmp, dy_k, x, xd_k, su_k, A, B + k * OUT / 2 * R,
                            &drop, &h);
            for (int i = 0; i < BT * R; i++) du_sum[i] += du_k[i];
            for (int i = 0; i < OUT / 2 * R; i++) assert_true(fabsf(dB_k[i] - dB[k * OUT / 2 * R + i]) <= 1e-5f);
            for (int i = 0; i < R * IN; i++) dA_sum[i] += dA_k[i];
            for (int i = 0; i < BT * IN; i++) dx_sum[i] += dx_k[i];
            free(dA_k), free(dx_k);
        }
        printf("  column split: du %.2e, dA %.2e, dx %.2e\n", rel(du_sum, du, BT * R), rel(dA_sum, dA, R * IN),
               rel(dx_sum, dx, BT * IN));
        assert_true(rel(du_sum, du, BT * R) <= 1e-6 && rel(dA_sum, dA, R * IN) <= 1e-6);
        assert_true(rel(dx_sum, dx, BT * IN) <= 1e-6);
        free(dA_sum), free(dx_sum), free(du_sum), free(out_k), free(dy_k), free(dB_k), free(su_k), free(xd_k);
        free(du_k);
    }
    /* row-parallel: A and x by input columns */
    {
        lora_dims h = {NB, NT, IN / 2, OUT, R, SCALING};
        float *su_sum = tb_zeros(BT * R), *x_k = tb_zeros(BT * IN / 2), *A_k = tb_zeros(R * IN / 2);
        float *xd_k = tb_zeros(BT * IN / 2), *su_k = tb_zeros(BT * R), *o_k = tb_zeros(BT * OUT);
        float *dx_k = tb_zeros(BT * IN / 2), *dA_k = tb_zeros(R * IN / 2), *dB_k = tb_zeros(OUT * R);
        for (int k = 0; k < 2; k++) {
            be_drop dk = drop;
            dk.unit0 = k * IN / 2;
            for (int i = 0; i < BT; i++)
                for (int c = 0; c < IN / 2; c++) x_k[i * IN / 2 + c] = x[i * IN + k * IN / 2 + c];
            for (int q = 0; q < R; q++)
                for (int c = 0; c < IN / 2; c++) A_k[q * IN / 2 + c] = A[q * IN + k * IN / 2 + c];
            lora_row_fwd(be, NULL, NULL, o_k, su_k, xd_k, tmp, x_k, A_k, B, &dk, &h);
            for (int i = 0; i < BT * R; i++) su_sum[i] += su_k[i];
        }
        printf("  row split: su %.2e\n", rel(su_sum, su, BT * R));
        assert_true(rel(su_sum, su, BT * R) <= 1e-6);
        /* the backward of each rank from the whole su (the group's sum) */
        for (int k = 0; k < 2; k++) {
            be_drop dk = drop;
            dk.unit0 = k * IN / 2;
            for (int i = 0; i < BT; i++)
                for (int c = 0; c < IN / 2; c++) x_k[i * IN / 2 + c] = x[i * IN + k * IN / 2 + c];
            for (int q = 0; q < R; q++)
                for (int c = 0; c < IN / 2; c++) A_k[q * IN / 2 + c] = A[q * IN + k * IN / 2 + c];
            be_dropout_fwd(be, xd_k, x_k, NB, NT, IN / 2, &dk);
            memset(dx_k, 0, BT * IN / 2 * sizeof(float));
            memset(dA_k, 0, R * IN / 2 * sizeof(float));
            memset(dB_k, 0, OUT * R * sizeof(float));
            lora_row_bwd(be, dx_k, dA_k, dB_k, du, tmp, dy, x_k, xd_k, su, A_k, B, &dk, &h);
            for (int i = 0; i < BT; i++)
                for (int c = 0; c < IN / 2; c++)
                    assert_true(fabsf(dx_k[i * IN / 2 + c] - dx[i * IN + k * IN / 2 + c]) <= 1e-5f);
            for (int q = 0; q < R; q++)
                for (int c = 0; c < IN / 2; c++)
                    assert_true(fabsf(dA_k[q * IN / 2 + c] - dA[q * IN + k * IN / 2 + c]) <= 1e-5f);
            assert_true(rel(dB_k, dB, OUT * R) <= 1e-6);
        }
        free(su_sum), free(x_k), free(A_k), free(xd_k), free(su_k), free(o_k), free(dx_k), free(dA_k), free(dB_k);
    }
    free(x), free(A), free(B), free(dy), free(out), free(su), free(xd), free(tmp), free(du), free(dx), free(dA);
    free(dB);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(column, setup, teardown),
        cmocka_unit_test_setup_teardown(row, setup, teardown),
        cmocka_unit_test_setup_teardown(tp_split, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
