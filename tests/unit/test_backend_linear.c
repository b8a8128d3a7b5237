/* src/backend/cpu: matmul, layernorm, GeLU, elementwise helpers and embeddings, each forward
 * against a double-precision reference written here and each backward against central finite
 * differences of that reference; backward accumulation; results independent of thread count. */
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

/* ---------------- matmul ---------------- */

typedef struct {
    double *inp, *w, *b; /* (BT, C), (OC, C), (OC) or NULL */
    int BT, C, OC;
} mm_ctx;

static void mm_ref(void *vc, double *out)
{
    mm_ctx *c = vc;
    for (int i = 0; i < c->BT; i++)
        for (int o = 0; o < c->OC; o++) {
            double s = c->b ? c->b[o] : 0.0;
            for (int k = 0; k < c->C; k++) s += c->inp[i * c->C + k] * c->w[o * c->C + k];
            out[i * c->OC + o] = s;
        }
}

/* A decoding step's few rows of a layer large enough to run threaded (GPT-2's 768 -> 3072 MLP):
 * 1 row (sgemv), 3 and 8 (each W row read once for all of them), 9 (sgemm), against the
 * double-precision reference. */
static void matmul_few_rows_large(void **state)
{
    const backend *be = *state;
    enum { C = 768, OC = 3072, NMAX = 9 };
    float *inp = tb_rand_new(NMAX * C, 5, -1, 1), *w = tb_rand_new((size_t)OC * C, 6, -0.05, 0.05);
    float *b = tb_rand_new(OC, 7, -1, 1), *out = tb_zeros(NMAX * OC);
    double *ref = malloc(NMAX * OC * sizeof *ref);
    static const int rows[] = {1, 3, 8, 9};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int n = rows[i];
        mm_ctx c = {tb_dup(inp, (size_t)n * C), tb_dup(w, (size_t)OC * C), tb_dup(b, OC), n, C, OC};
        be_matmul_fwd(be, out, inp, w, b, n, C, OC);
        mm_ref(&c, ref);
        char name[64];
        snprintf(name, sizeof name, "matmul fwd, %d row%s of 768 -> 3072", n, n > 1 ? "s" : "");
        TB_CLOSE(name, out, ref, (size_t)n * OC, 1e-5);
        free(c.inp), free(c.w), free(c.b);
    }
    free(ref), free(inp), free(w), free(b), free(out);
}

static void matmul(void **state)
{
    const backend *be = *state;
    enum { BT = 5, C = 7, OC = 19 };
    float *inp = tb_rand_new(BT * C, 1, -1, 1), *w = tb_rand_new(OC * C, 2, -1, 1), *b = tb_rand_new(OC, 3, -1, 1);
    float *R = tb_rand_new(BT * OC, 4, -1, 1), *out = tb_zeros(BT * OC);
    mm_ctx c = {tb_dup(inp, BT * C), tb_dup(w, OC * C), tb_dup(b, OC), BT, C, OC};
    double ref[BT * OC], *Rd = tb_dup(R, BT * OC);

    be_matmul_fwd(be, out, inp, w, b, BT, C, OC);
    mm_ref(&c, ref);
    TB_CLOSE("matmul fwd", out, ref, BT * OC, 1e-5);
    double *bd = c.b;
    c.b = NULL;
    be_matmul_fwd(be, out, inp, w, NULL, BT, C, OC);
    mm_ref(&c, ref);
    TB_CLOSE("matmul fwd (no bias)", out, ref, BT * OC, 1e-5);
    c.b = bd;
    /* one row (a decoding step: sgemv, not sgemm), with and without the bias */
    mm_ctx c1 = {c.inp + 2 * C, c.w, bd, 1, C, OC};
    be_matmul_fwd(be, out, inp + 2 * C, w, b, 1, C, OC);
    mm_ref(&c1, ref);
    TB_CLOSE("matmul fwd, one row", out, ref, OC, 1e-5);
    c1.b = NULL;
    be_matmul_fwd(be, out, inp + 2 * C, w, NULL, 1, C, OC);
    mm_ref(&c1, ref);
    TB_CLOSE("matmul fwd, one row (no bias)", out, ref, OC, 1e-5);

    float *dinp = tb_zeros(BT * C), *dw = tb_zeros(OC * C), *db = tb_zeros(OC);
    be_matmul_bwd(be, dinp, dw, db, R, inp, w, BT, C, OC);
    TB_GRAD("matmul dinp", dinp, c.inp, BT * C, mm_ref, &c, Rd, BT * OC, 1e-4);
    TB_GRAD("matmul dw", dw, c.w, OC * C, mm_ref, &c, Rd, BT * OC, 1e-4);
    TB_GRAD("matmul db", db, c.b, OC, mm_ref, &c, Rd, BT * OC, 1e-4);

    float *dinp1 = tb_copy(dinp, BT * C), *dw1 = tb_copy(dw, OC * C), *db1 = tb_copy(db, OC);
    be_matmul_bwd(be, dinp, dw, db, R, inp, w, BT, C, OC);
    tb_check_doubled("matmul dinp", dinp1, dinp, BT * C);
    tb_check_doubled("matmul dw", dw1, dw, OC * C);
    tb_check_doubled("matmul db", db1, db, OC);
    /* NULL gradients are skipped */
    be_matmul_bwd(be, NULL, dw, NULL, R, inp, w, BT, C, OC);
    for (int i = 0; i < BT * C; i++) assert_true(dinp[i] == 2 * dinp1[i] || fabsf(dinp[i] - 2 * dinp1[i]) < 1e-5f);

    free(inp), free(w), free(b), free(R), free(out), free(c.inp), free(c.w), free(c.b), free(Rd);
    free(dinp), free(dw), free(db), free(dinp1), free(dw1), free(db1);
}

/* ---------------- layernorm ---------------- */

typedef struct {
    double *inp, *w, *b;
    int N, C;
    double eps;
} ln_ctx;

static void ln_ref(void *vc, double *out)
{
    ln_ctx *c = vc;
    for (int n = 0; n < c->N; n++) {
        const double *x = c->inp + n * c->C;
        double m = 0, v = 0;
        for (int k = 0; k < c->C; k++) m += x[k];
        m /= c->C;
        for (int k = 0; k < c->C; k++) v += (x[k] - m) * (x[k] - m);
        v /= c->C;
        double s = 1.0 / sqrt(v + c->eps);
        for (int k = 0; k < c->C; k++) out[n * c->C + k] = (x[k] - m) * s * c->w[k] + c->b[k];
    }
}

static void layernorm(void **state)
{
    const backend *be = *state;
    enum { N = 4, C = 21 };
    float *inp = tb_rand_new(N * C, 10, -2, 2), *w = tb_rand_new(C, 11, 0.5f, 1.5f), *b = tb_rand_new(C, 12, -1, 1);
    float *R = tb_rand_new(N * C, 13, -1, 1), *out = tb_zeros(N * C), mean[N], rstd[N];
    ln_ctx c = {tb_dup(inp, N * C), tb_dup(w, C), tb_dup(b, C), N, C, 0.5};
    double ref[N * C], *Rd = tb_dup(R, N * C);

    /* a large eps first: it reaches the kernel */
    be_layernorm_fwd(be, out, mean, rstd, inp, w, b, N, C, 0.5f);
    ln_ref(&c, ref);
    TB_CLOSE("layernorm fwd (eps 0.5)", out, ref, N * C, 1e-5);
    c.eps = 1e-5;
    be_layernorm_fwd(be, out, mean, rstd, inp, w, b, N, C, 1e-5f);
    ln_ref(&c, ref);
    TB_CLOSE("layernorm fwd", out, ref, N * C, 1e-5);

    float *dinp = tb_zeros(N * C), *dw = tb_zeros(C), *db = tb_zeros(C);
    be_layernorm_bwd(be, dinp, dw, db, R, inp, w, mean, rstd, N, C);
    TB_GRAD("layernorm dinp", dinp, c.inp, N * C, ln_ref, &c, Rd, N * C, 1e-4);
    TB_GRAD("layernorm dw", dw, c.w, C, ln_ref, &c, Rd, N * C, 1e-4);
    TB_GRAD("layernorm db", db, c.b, C, ln_ref, &c, Rd, N * C, 1e-4);

    float *dinp1 = tb_copy(dinp, N * C), *dw1 = tb_copy(dw, C), *db1 = tb_copy(db, C);
    be_layernorm_bwd(be, dinp, dw, db, R, inp, w, mean, rstd, N, C);
    tb_check_doubled("layernorm dinp", dinp1, dinp, N * C);
    tb_check_doubled("layernorm dw", dw1, dw, C);
    tb_check_doubled("layernorm db", db1, db, C);

    free(inp), free(w), free(b), free(R), free(out), free(c.inp), free(c.w), free(c.b), free(Rd);
    free(dinp), free(dw), free(db), free(dinp1), free(dw1), free(db1);
}

/* ---------------- GeLU ---------------- */

static double gelu_ref1(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

typedef struct {
    double *inp, *b; /* (N, C), (C) or NULL */
    int N, C;
} gelu_ctx;

static void gelu_ref(void *vc, double *out)
{
    gelu_ctx *c = vc;
    for (int n = 0; n < c->N; n++)
        for (int k = 0; k < c->C; k++) out[n * c->C + k] = gelu_ref1(c->inp[n * c->C + k] + (c->b ? c->b[k] : 0.0));
}

static void gelu(void **state)
{
    const backend *be = *state;
    enum { N = 3, C = 37, NC = N * C };
    float *inp = tb_rand_new(NC, 20, -4, 4), *b = tb_rand_new(C, 21, -1, 1), *R = tb_rand_new(NC, 22, -1, 1);
    float *out = tb_zeros(NC);
    gelu_ctx c = {tb_dup(inp, NC), NULL, N, C};
    double ref[NC], *Rd = tb_dup(R, NC);

    be_gelu_fwd(be, out, inp, NC);
    gelu_ref(&c, ref);
    TB_CLOSE("gelu fwd", out, ref, NC, 1e-6);
    float *dinp = tb_zeros(NC);
    be_gelu_bwd(be, dinp, R, inp, NC);
    TB_GRAD("gelu dinp", dinp, c.inp, NC, gelu_ref, &c, Rd, NC, 1e-5);
    float *dinp1 = tb_copy(dinp, NC);
    be_gelu_bwd(be, dinp, R, inp, NC);
    tb_check_doubled("gelu dinp", dinp1, dinp, NC);
    /* in place */
    float *io = tb_copy(inp, NC);
    be_gelu_fwd(be, io, io, NC);
    be_gelu_fwd(be, out, inp, NC);
    assert_memory_equal(io, out, NC * sizeof(float));

    /* fused bias + GeLU */
    c.b = tb_dup(b, C);
    be_bias_gelu_fwd(be, out, inp, b, N, C);
    gelu_ref(&c, ref);
    TB_CLOSE("bias_gelu fwd", out, ref, NC, 1e-6);
    float *db = tb_zeros(C);
    memset(dinp, 0, NC * sizeof(float));
    be_bias_gelu_bwd(be, dinp, db, R, inp, b, N, C);
    TB_GRAD("bias_gelu dinp", dinp, c.inp, NC, gelu_ref, &c, Rd, NC, 1e-5);
    TB_GRAD("bias_gelu db", db, c.b, C, gelu_ref, &c, Rd, NC, 1e-5);
    float *db1 = tb_copy(db, C);
    memcpy(dinp1, dinp, NC * sizeof(float));
    be_bias_gelu_bwd(be, dinp, db, R, inp, b, N, C);
    tb_check_doubled("bias_gelu dinp", dinp1, dinp, NC);
    tb_check_doubled("bias_gelu db", db1, db, C);

    free(inp), free(b), free(R), free(out), free(c.inp), free(c.b), free(Rd), free(dinp), free(dinp1), free(io);
    free(db), free(db1);
}

/* ---------------- elementwise ---------------- */

typedef struct {
    double *x, *b;
    int N, C;
} ba_ctx;

static void bias_add_ref(void *vc, double *out)
{
    ba_ctx *c = vc;
    for (int n = 0; n < c->N; n++)
        for (int k = 0; k < c->C; k++) out[n * c->C + k] = c->x[n * c->C + k] + c->b[k];
}

static void elementwise(void **state)
{
    const backend *be = *state;
    enum { N = 6, C = 35, NC = N * C };
    float *a = tb_rand_new(NC, 30, -1, 1), *b = tb_rand_new(NC, 31, -1, 1), *bias = tb_rand_new(C, 32, -1, 1);
    float *out = tb_zeros(NC), *R = tb_rand_new(NC, 33, -1, 1);
    double ref[NC];

    be_add(be, out, a, b, NC);
    for (int i = 0; i < NC; i++) ref[i] = (double)a[i] + b[i];
    TB_CLOSE("add", out, ref, NC, 1e-7);
    be_add(be, out, out, b, NC); /* aliasing: out = a + 2b */
    for (int i = 0; i < NC; i++) ref[i] = (double)a[i] + 2.0 * b[i];
    TB_CLOSE("add in place", out, ref, NC, 1e-6);

    memcpy(out, a, NC * sizeof(float));
    be_scale(be, out, -0.75f, NC);
    for (int i = 0; i < NC; i++) ref[i] = -0.75 * a[i];
    TB_CLOSE("scale", out, ref, NC, 1e-7);

    memcpy(out, a, NC * sizeof(float));
    be_bias_add(be, out, bias, N, C);
    ba_ctx c = {tb_dup(a, NC), tb_dup(bias, C), N, C};
    bias_add_ref(&c, ref);
    TB_CLOSE("bias_add", out, ref, NC, 1e-7);
    float *db = tb_zeros(C);
    double *Rd = tb_dup(R, NC);
    be_bias_bwd(be, db, R, N, C);
    TB_GRAD("bias_add db", db, c.b, C, bias_add_ref, &c, Rd, NC, 1e-5);
    float *db1 = tb_copy(db, C);
    be_bias_bwd(be, db, R, N, C);
    tb_check_doubled("bias db", db1, db, C);

    free(a), free(b), free(bias), free(out), free(R), free(c.x), free(c.b), free(db), free(Rd), free(db1);
}

/* ---------------- embeddings ---------------- */

typedef struct {
    double *wte, *wpe; /* (Vloc, C), (pos0 + T, C) */
    const int32_t *ids;
    int B, T, C, vstart, Vloc, pos0;
} emb_ctx;

static void emb_ref(void *vc, double *out)
{
    emb_ctx *c = vc;
    for (int i = 0; i < c->B * c->T; i++) {
        int r = c->ids[i] - c->vstart, t = i % c->T;
        for (int k = 0; k < c->C; k++)
            out[i * c->C + k] =
                (r >= 0 && r < c->Vloc ? c->wte[r * c->C + k] : 0.0) + c->wpe[(c->pos0 + t) * c->C + k];
    }
}

static void embedding(void **state)
{
    const backend *be = *state;
    enum { B = 2, T = 5, BT = B * T, C = 19, V = 12, VSTART = 4, VLOC = 5, POS0 = 2, P = POS0 + T };
    /* ids of the whole vocabulary, some repeated, some outside the local slice [4, 9) */
    const int32_t ids[BT] = {0, 4, 5, 8, 9, 11, 5, 5, 6, 3};
    float *wte = tb_rand_new(VLOC * C, 40, -1, 1), *wpe = tb_rand_new(P * C, 41, -1, 1);
    float *R = tb_rand_new(BT * C, 42, -1, 1), *out = tb_zeros(BT * C);
    emb_ctx c = {tb_dup(wte, VLOC * C), tb_dup(wpe, P * C), ids, B, T, C, VSTART, VLOC, POS0};
    double ref[BT * C], *Rd = tb_dup(R, BT * C);
    (void)V;

    be_embedding_fwd(be, out, ids, wte, BT, C, VSTART, VLOC);
    be_pos_embedding_fwd(be, out, wpe, B, T, C, POS0);
    emb_ref(&c, ref);
    TB_CLOSE("embedding fwd (wte + wpe)", out, ref, BT * C, 1e-6);

    float *dwte = tb_zeros(VLOC * C), *dwpe = tb_zeros(P * C);
    be_embedding_bwd(be, dwte, R, ids, BT, C, VSTART, VLOC);
    be_pos_embedding_bwd(be, dwpe, R, B, T, C, POS0);
    TB_GRAD("embedding dwte", dwte, c.wte, VLOC * C, emb_ref, &c, Rd, BT * C, 1e-5);
    TB_GRAD("embedding dwpe", dwpe, c.wpe, P * C, emb_ref, &c, Rd, BT * C, 1e-5);
    float *dwte1 = tb_copy(dwte, VLOC * C), *dwpe1 = tb_copy(dwpe, P * C);
    be_embedding_bwd(be, dwte, R, ids, BT, C, VSTART, VLOC);
    be_pos_embedding_bwd(be, dwpe, R, B, T, C, POS0);
    tb_check_doubled("embedding dwte", dwte1, dwte, VLOC * C);
    tb_check_doubled("embedding dwpe", dwpe1, dwpe, P * C);

    free(wte), free(wpe), free(R), free(out), free(c.wte), free(c.wpe), free(Rd), free(dwte), free(dwpe);
    free(dwte1), free(dwpe1);
}

/* ---------------- thread-count independence of the reductions ---------------- */

static void reductions_independent_of_threads(void **state)
{
    (void)state;
    backend *one = be_create("cpu", 1), *two = be_create("cpu", 2);
    enum { N = 96, C = 211, NC = N * C, V = 40 }; /* above the size where loops go parallel */
    float *inp = tb_rand_new(NC, 50, -2, 2), *w = tb_rand_new(C, 51, 0.5f, 1.5f), *b = tb_rand_new(C, 52, -1, 1);
    float *dout = tb_rand_new(NC, 53, -1, 1), *out = tb_zeros(NC), mean[N], rstd[N];
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 7) % V;
    float *g[2][5];
    const backend *bes[2] = {one, two};
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < 5; j++) g[k][j] = tb_zeros(j == 0 ? NC : (j == 3 ? (size_t)V * C : C));
        be_layernorm_fwd(bes[k], out, mean, rstd, inp, w, b, N, C, 1e-5f);
        be_layernorm_bwd(bes[k], g[k][0], g[k][1], g[k][2], dout, inp, w, mean, rstd, N, C);
        be_embedding_bwd(bes[k], g[k][3], dout, ids, N, C, 0, V);
        be_bias_bwd(bes[k], g[k][4], dout, N, C);
    }
    assert_memory_equal(g[0][0], g[1][0], NC * sizeof(float));
    assert_memory_equal(g[0][1], g[1][1], C * sizeof(float));
    assert_memory_equal(g[0][2], g[1][2], C * sizeof(float));
    assert_memory_equal(g[0][3], g[1][3], (size_t)V * C * sizeof(float));
    assert_memory_equal(g[0][4], g[1][4], C * sizeof(float));
    printf("  layernorm/embedding/bias grads: bitwise equal with 1 and 2 threads\n");
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 5; j++) free(g[k][j]);
    free(inp), free(w), free(b), free(dout), free(out);
    be_free(one);
    be_free(two);
}

/* The helpers the backend tests rest on fail on NaN, wherever it is. */
static void helpers_reject_nan(void **state)
{
    (void)state;
    float once[4] = {1, -2, 3, 0.5f}, twice[4] = {2, -4, 6, 1};
    assert_true(tb_doubled_err(once, twice, 4) <= 1e-6);
    for (int i = 0; i < 4; i++) {
        float a[4], b[4];
        memcpy(a, once, sizeof a);
        memcpy(b, twice, sizeof b);
        b[i] = NAN;
        assert_false(tb_doubled_err(a, b, 4) <= 1e-6);
        b[i] = twice[i];
        a[i] = NAN;
        assert_false(tb_doubled_err(a, b, 4) <= 1e-6);
        double want[4] = {1, -2, 3, 0.5};
        a[i] = NAN;
        assert_false(tb_err(a, want, 4, 1e-6) <= 1e-6);
    }
}

int main(void)
{
    tb_skip_unless_isa_runs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(helpers_reject_nan),
        cmocka_unit_test(matmul),
        cmocka_unit_test(matmul_few_rows_large),
        cmocka_unit_test(layernorm),
        cmocka_unit_test(gelu),
        cmocka_unit_test(elementwise),
        cmocka_unit_test(embedding),
        cmocka_unit_test(reductions_independent_of_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
