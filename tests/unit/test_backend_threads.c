/* The CPU backend (src/backend/cpu): results do not depend on the thread count. Shapes large enough that the
 * kernels run in parallel (above each kernel's threshold in src/backend/cpu/cpu.h: CPU_PAR_MIN
 * elements, CPU_PAR_MIN_EXP for exp/Philox loops, CPU_PAR_MIN_MACS multiply-adds for attention;
 * each test asserts its shape is above the one it needs), every kernel with a reduction over rows
 * (column sums for biases, LayerNorm and embedding gradients) or per-thread scratch (attention's
 * score and dropout blocks, dropout's multipliers), and the row-parallel cross-entropy, one
 * thread against three: bitwise equal. The GEMMs are OpenBLAS's: the test starts as trident does
 * (be_prepare_process, which picks OpenBLAS's AVX-512 core on an AVX-512 CPU), and where the
 * loaded core's own sgemm gives other bits with other thread counts (0.3.21's Haswell core does at
 * some shapes), what goes through it is held within 1e-5 instead, and says so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "test_backend_util.h"
#include "backend/cpu/cpu.h"
#include <cblas.h>
#include <math.h>

enum { N = 1030, C = 1040, F = 4 * C }; /* N * C > 2^20: every kernel runs in parallel */

typedef struct {
    backend *one, *many;
} pair;

static int setup(void **state)
{
    pair *p = td_xmalloc(sizeof *p);
    p->one = be_create("cpu", 1);
    p->many = be_create("cpu", 3);
    *state = p;
    return 0;
}

static int teardown(void **state)
{
    pair *p = *state;
    be_free(p->one);
    be_free(p->many);
    free(p);
    return 0;
}

static void same(const char *what, const float *a, const float *b, size_t n)
{
    printf("  %-28s %s\n", what, memcmp(a, b, n * sizeof(float)) == 0 ? "bitwise equal" : "DIFFERENT");
    assert_memory_equal(a, b, n * sizeof(float));
}

/* 1 when OpenBLAS's sgemm gives the same bits on one thread and on two (probed in main). */
static int blas_invariant = 1;

static int probe_blas_invariance(void)
{
    enum { M = 256, K = 96 };
    float *a = tb_rand_new(M * K, 90, -1, 1), *c1 = tb_zeros(M * M), *c2 = tb_zeros(M * M);
    openblas_set_num_threads(1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, M, K, 1.0f, a, K, a, K, 0.0f, c1, M);
    openblas_set_num_threads(2);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, M, K, 1.0f, a, K, a, K, 0.0f, c2, M);
    int same = memcmp(c1, c2, sizeof(float) * M * M) == 0;
    free(a), free(c1), free(c2);
    return same;
}

/* Outputs of OpenBLAS's GEMMs: bitwise where its sgemm is thread-count invariant. */
static void same_blas(const char *what, const float *a, const float *b, size_t n)
{
    if (blas_invariant) {
        same(what, a, b, n);
        return;
    }
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)a[i]));
        worst = d > worst ? d : worst;
    }
    printf("  %-28s within %.1e (OpenBLAS %s's sgemm is not thread-count invariant)\n", what, worst,
           openblas_get_corename());
    assert_true(worst <= 1e-5);
}

static void layernorm_and_bias(void **state)
{
    pair *p = *state;
    size_t n = (size_t)N * C;
    float *x = tb_rand_new(n, 1, -2, 2), *dy = tb_rand_new(n, 2, -1, 1), *w = tb_rand_new(C, 3, 0.5f, 1.5f);
    float *b = tb_rand_new(C, 4, -1, 1), *y1 = tb_zeros(n), *y2 = tb_zeros(n);
    float *mean = tb_zeros(N), *rstd = tb_zeros(N), *mean2 = tb_zeros(N), *rstd2 = tb_zeros(N);
    float *dx1 = tb_rand_new(n, 5, -1, 1), *dx2 = tb_zeros(n), *dw1 = tb_rand_new(C, 6, -1, 1), *dw2 = tb_zeros(C);
    float *db1 = tb_rand_new(C, 7, -1, 1), *db2 = tb_zeros(C);
    memcpy(dx2, dx1, n * sizeof(float));
    memcpy(dw2, dw1, C * sizeof(float));
    memcpy(db2, db1, C * sizeof(float));
    be_layernorm_fwd(p->one, y1, mean, rstd, x, w, b, N, C, 1e-5f);
    be_layernorm_fwd(p->many, y2, mean2, rstd2, x, w, b, N, C, 1e-5f);
    same("layernorm_fwd out", y1, y2, n);
    same("layernorm_fwd rstd", rstd, rstd2, N);
    be_layernorm_bwd(p->one, dx1, dw1, db1, dy, x, w, mean, rstd, N, C);
    be_layernorm_bwd(p->many, dx2, dw2, db2, dy, x, w, mean, rstd, N, C);
    same("layernorm_bwd dinp", dx1, dx2, n);
    same("layernorm_bwd dw", dw1, dw2, C);
    same("layernorm_bwd db", db1, db2, C);
    be_bias_bwd(p->one, db1, dy, N, C);
    be_bias_bwd(p->many, db2, dy, N, C);
    same("bias_bwd", db1, db2, C);
    be_matmul_bwd(p->one, NULL, NULL, db1, dy, x, w, N, 1, C);
    be_matmul_bwd(p->many, NULL, NULL, db2, dy, x, w, N, 1, C);
    same("matmul_bwd db", db1, db2, C);
    free(x), free(dy), free(w), free(b), free(y1), free(y2), free(mean), free(rstd), free(mean2), free(rstd2);
    free(dx1), free(dx2), free(dw1), free(dw2), free(db1), free(db2);
}

static void rmsnorm(void **state)
{
    pair *p = *state;
    size_t n = (size_t)N * C;
    float *x = tb_rand_new(n, 41, -2, 2), *dy = tb_rand_new(n, 42, -1, 1), *w = tb_rand_new(C, 43, 0.5f, 1.5f);
    float *y1 = tb_zeros(n), *y2 = tb_zeros(n), *rstd = tb_zeros(N), *rstd2 = tb_zeros(N);
    float *dx1 = tb_rand_new(n, 44, -1, 1), *dx2 = tb_copy(dx1, n), *dw1 = tb_rand_new(C, 45, -1, 1);
    float *dw2 = tb_copy(dw1, C);
    be_rmsnorm_fwd(p->one, y1, rstd, x, w, N, C, 1e-6f);
    be_rmsnorm_fwd(p->many, y2, rstd2, x, w, N, C, 1e-6f);
    same("rmsnorm_fwd out", y1, y2, n);
    same("rmsnorm_fwd rstd", rstd, rstd2, N);
    be_rmsnorm_bwd(p->one, dx1, dw1, dy, x, w, rstd, N, C);
    be_rmsnorm_bwd(p->many, dx2, dw2, dy, x, w, rstd, N, C);
    same("rmsnorm_bwd dinp", dx1, dx2, n);
    same("rmsnorm_bwd dw", dw1, dw2, C);
    free(x), free(dy), free(w), free(y1), free(y2), free(rstd), free(rstd2), free(dx1), free(dx2), free(dw1);
    free(dw2);
}

static void swiglu_and_rope(void **state)
{
    pair *p = *state;
    size_t n = (size_t)N * F, n2 = 2 * n;
    float *x = tb_rand_new(n2, 51, -4, 4), *dy = tb_rand_new(n, 52, -1, 1), *y1 = tb_zeros(n), *y2 = tb_zeros(n);
    float *dx1 = tb_rand_new(n2, 53, -1, 1), *dx2 = tb_copy(dx1, n2);
    be_swiglu_fwd(p->one, y1, x, N, F);
    be_swiglu_fwd(p->many, y2, x, N, F);
    same("swiglu_fwd", y1, y2, n);
    be_swiglu_bwd(p->one, dx1, dy, x, N, F);
    be_swiglu_bwd(p->many, dx2, dy, x, N, F);
    same("swiglu_bwd", dx1, dx2, n2);
    /* rope: rows (2, N/2) of C floats holding 16 heads of 64, from column 8 */
    float *r1 = tb_copy(x, (size_t)N * C), *r2 = tb_copy(x, (size_t)N * C);
    be_rope_fwd(p->one, r1 + 8, 2, N / 2, C, 16, 64, 64, 10000.0f, 3);
    be_rope_fwd(p->many, r2 + 8, 2, N / 2, C, 16, 64, 64, 10000.0f, 3);
    same("rope_fwd", r1, r2, (size_t)N * C);
    be_rope_bwd(p->one, r1 + 8, 2, N / 2, C, 16, 64, 48, 10000.0f, 3);
    be_rope_bwd(p->many, r2 + 8, 2, N / 2, C, 16, 64, 48, 10000.0f, 3);
    same("rope_bwd", r1, r2, (size_t)N * C);
    free(x), free(dy), free(y1), free(y2), free(dx1), free(dx2), free(r1), free(r2);
}

/* Grouped-query attention above its parallel threshold (B NH T^2 HS > 2^22 multiply-adds), with
 * dropout: dk and dv sum over the query heads of a group. */
static void attention_gqa(void **state)
{
    pair *p = *state;
    enum { B = 2, T = 130, NH = 6, HS = 32, AC = NH * HS };
    const int64_t sample[B] = {17, 18};
    be_drop drop = {.p = 0.1f, .seed = 9, .sample = sample, .site = 4, .pos0 = 0, .unit0 = 6};
    for (int NKV = 1; NKV <= 2; NKV++) {
        int ldq = AC + 3, ldkv = NKV * HS + 5;
        size_t nq = (size_t)B * T * ldq, nkv = (size_t)B * T * ldkv, no = (size_t)B * T * AC, nl = (size_t)B * NH * T;
        float *q = tb_rand_new(nq, 61, -2, 2), *k = tb_rand_new(nkv, 62, -2, 2), *v = tb_rand_new(nkv, 63, -2, 2);
        float *dy = tb_rand_new(no, 64, -1, 1), *o1 = tb_zeros(no), *o2 = tb_zeros(no), *l1 = tb_zeros(nl);
        float *l2 = tb_zeros(nl), *g1[3], *g2[3];
        for (int i = 0; i < 3; i++) {
            size_t n = i ? nkv : nq;
            g1[i] = tb_rand_new(n, 65 + (uint64_t)i, -1, 1), g2[i] = tb_copy(g1[i], n);
        }
        be_attention_fwd(p->one, o1, l1, q, k, v, ldq, ldkv, B, T, NH, NKV, HS, &drop);
        be_attention_fwd(p->many, o2, l2, q, k, v, ldq, ldkv, B, T, NH, NKV, HS, &drop);
        same_blas(NKV == 1 ? "attention_fwd NKV 1 out" : "attention_fwd NKV 2 out", o1, o2, no);
        same_blas("attention_fwd lse", l1, l2, nl);
        be_attention_bwd(p->one, g1[0], g1[1], g1[2], dy, q, k, v, l1, ldq, ldkv, B, T, NH, NKV, HS, &drop);
        be_attention_bwd(p->many, g2[0], g2[1], g2[2], dy, q, k, v, l1, ldq, ldkv, B, T, NH, NKV, HS, &drop);
        same_blas("attention_bwd dq", g1[0], g2[0], nq);
        same_blas("attention_bwd dk", g1[1], g2[1], nkv);
        same_blas("attention_bwd dv", g1[2], g2[2], nkv);
        free(q), free(k), free(v), free(dy), free(o1), free(o2), free(l1), free(l2);
        for (int i = 0; i < 3; i++) free(g1[i]), free(g2[i]);
    }
}

static void bias_gelu(void **state)
{
    pair *p = *state;
    size_t n = (size_t)N * F;
    float *x = tb_rand_new(n, 11, -3, 3), *dy = tb_rand_new(n, 12, -1, 1), *b = tb_rand_new(F, 13, -1, 1);
    float *y1 = tb_zeros(n), *y2 = tb_zeros(n), *dx1 = tb_rand_new(n, 14, -1, 1), *dx2 = tb_zeros(n);
    float *db1 = tb_rand_new(F, 15, -1, 1), *db2 = tb_zeros(F);
    memcpy(dx2, dx1, n * sizeof(float));
    memcpy(db2, db1, F * sizeof(float));
    be_bias_gelu_fwd(p->one, y1, x, b, N, F);
    be_bias_gelu_fwd(p->many, y2, x, b, N, F);
    same("bias_gelu_fwd", y1, y2, n);
    be_bias_gelu_bwd(p->one, dx1, db1, dy, x, b, N, F);
    be_bias_gelu_bwd(p->many, dx2, db2, dy, x, b, N, F);
    same("bias_gelu_bwd dinp", dx1, dx2, n);
    same("bias_gelu_bwd db", db1, db2, F);
    be_bias_gelu_bwd(p->one, NULL, db1, dy, x, b, N, F);
    be_bias_gelu_bwd(p->many, NULL, db2, dy, x, b, N, F);
    same("bias_gelu_bwd db only", db1, db2, F);
    free(x), free(dy), free(b), free(y1), free(y2), free(dx1), free(dx2), free(db1), free(db2);
}

static void embeddings(void **state)
{
    pair *p = *state;
    enum { V = 300, B = 5, T = N / B };
    size_t n = (size_t)B * T * C;
    int32_t *ids = td_xmalloc((size_t)B * T * sizeof(int32_t));
    for (int i = 0; i < B * T; i++) ids[i] = (int32_t)((i * 37) % (V + 20)); /* some outside the slice */
    float *dy = tb_rand_new(n, 21, -1, 1), *d1 = tb_rand_new((size_t)V * C, 22, -1, 1), *d2 = tb_zeros((size_t)V * C);
    float *wpe1 = tb_rand_new((size_t)T * C, 23, -1, 1), *wpe2 = tb_zeros((size_t)T * C);
    memcpy(d2, d1, (size_t)V * C * sizeof(float));
    memcpy(wpe2, wpe1, (size_t)T * C * sizeof(float));
    be_embedding_bwd(p->one, d1, dy, ids, B * T, C, 10, V);
    be_embedding_bwd(p->many, d2, dy, ids, B * T, C, 10, V);
    same("embedding_bwd", d1, d2, (size_t)V * C);
    be_pos_embedding_bwd(p->one, wpe1, dy, B, T, C, 0);
    be_pos_embedding_bwd(p->many, wpe2, dy, B, T, C, 0);
    same("pos_embedding_bwd", wpe1, wpe2, (size_t)T * C);
    free(ids), free(dy), free(d1), free(d2), free(wpe1), free(wpe2);
}

static void optimizer(void **state)
{
    pair *p = *state;
    size_t n = (size_t)3 << 20;
    float *g = tb_rand_new(n, 31, -1, 1), *p1 = tb_rand_new(n, 32, -1, 1), *p2 = tb_zeros(n);
    float *m1 = tb_zeros(n), *v1 = tb_zeros(n), *m2 = tb_zeros(n), *v2 = tb_zeros(n);
    memcpy(p2, p1, n * sizeof(float));
    for (int s = 1; s <= 2; s++) {
        be_adamw(p->one, p1, g, m1, v1, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.5f, s);
        be_adamw(p->many, p2, g, m2, v2, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.5f, s);
    }
    same("adamw p", p1, p2, n);
    same("adamw v", v1, v2, n);
    double s1 = be_sumsq(p->one, g, n), s2 = be_sumsq(p->many, g, n);
    printf("  sumsq                        %s\n", s1 == s2 ? "bitwise equal" : "DIFFERENT");
    assert_true(s1 == s2);
    free(g), free(p1), free(p2), free(m1), free(v1), free(m2), free(v2);
}

/* Attention forward and backward, with and without dropout, above CPU_PAR_MIN_MACS, with
 * several query blocks per head (T > the kernel's block of 64 rows). */
static void attention(void **state)
{
    pair *p = *state;
    enum { B = 2, NH = 4, T = 256, HS = 32, CA = NH * HS };
    assert_true((double)B * NH * T * T * HS > 2 * CPU_PAR_MIN_MACS);
    size_t nqkv = (size_t)B * T * 3 * CA, nout = (size_t)B * T * CA;
    int64_t sample[B] = {17, 4};
    float *qkv = tb_rand_new(nqkv, 41, -1, 1), *dout = tb_rand_new(nout, 42, -1, 1);
    float *o1 = tb_zeros(nout), *o2 = tb_zeros(nout), *l1 = tb_zeros((size_t)B * NH * T), *l2 = tb_zeros((size_t)B * NH * T);
    float *d1 = tb_rand_new(nqkv, 43, -1, 1), *d2 = tb_zeros(nqkv);
    for (int k = 0; k < 2; k++) {
        be_drop drop = {.p = k ? 0.2f : 0.0f, .seed = 5, .sample = sample, .site = 3, .pos0 = 0, .unit0 = 2};
        memcpy(d2, d1, nqkv * sizeof(float));
        be_attention_fwd(p->one, o1, l1, qkv, qkv + CA, qkv + 2 * CA, 3 * CA, 3 * CA, B, T, NH, NH, HS, &drop);
        be_attention_fwd(p->many, o2, l2, qkv, qkv + CA, qkv + 2 * CA, 3 * CA, 3 * CA, B, T, NH, NH, HS, &drop);
        same_blas(k ? "attention_fwd (dropout)" : "attention_fwd", o1, o2, nout);
        same_blas(k ? "attention_fwd lse (dropout)" : "attention_fwd lse", l1, l2, (size_t)B * NH * T);
        be_attention_bwd(p->one, d1, d1 + CA, d1 + 2 * CA, dout, qkv, qkv + CA, qkv + 2 * CA, l1, 3 * CA, 3 * CA, B,
                         T, NH, NH, HS, &drop);
        be_attention_bwd(p->many, d2, d2 + CA, d2 + 2 * CA, dout, qkv, qkv + CA, qkv + 2 * CA, l1, 3 * CA, 3 * CA,
                         B, T, NH, NH, HS, &drop);
        same_blas(k ? "attention_bwd (dropout)" : "attention_bwd", d1, d2, nqkv);
    }
    free(qkv), free(dout), free(o1), free(o2), free(l1), free(l2), free(d1), free(d2);
}

/* Dropout, its backward and bias-dropout-add, above CPU_PAR_MIN (and so CPU_PAR_MIN_EXP). */
static void dropout(void **state)
{
    pair *p = *state;
    enum { B = 5, T = N / B };
    size_t n = (size_t)B * T * C;
    assert_true(n > CPU_PAR_MIN && CPU_PAR_MIN >= CPU_PAR_MIN_EXP);
    int64_t sample[B] = {3, 1, 4, 1, 5};
    be_drop drop = {.p = 0.3f, .seed = 8, .sample = sample, .site = 9, .pos0 = 0, .unit0 = 0};
    float *x = tb_rand_new(n, 51, -1, 1), *r = tb_rand_new(n, 52, -1, 1), *b = tb_rand_new(C, 53, -1, 1);
    float *y1 = tb_zeros(n), *y2 = tb_zeros(n);
    be_dropout_fwd(p->one, y1, x, B, T, C, &drop);
    be_dropout_fwd(p->many, y2, x, B, T, C, &drop);
    same("dropout_fwd", y1, y2, n);
    be_dropout_bwd(p->one, y1, x, B, T, C, &drop);
    be_dropout_bwd(p->many, y2, x, B, T, C, &drop);
    same("dropout_bwd", y1, y2, n);
    for (int k = 0; k < 2; k++) {
        be_drop none = {.p = 0.0f, .seed = 8, .sample = sample, .site = 9};
        be_bias_dropout_add_fwd(p->one, y1, r, x, b, B, T, C, k ? &drop : &none);
        be_bias_dropout_add_fwd(p->many, y2, r, x, b, B, T, C, k ? &drop : &none);
        same(k ? "bias_dropout_add (dropout)" : "bias_dropout_add", y1, y2, n);
    }
    free(x), free(r), free(b), free(y1), free(y2);
}

/* The cross-entropy steps and the fused backward, above CPU_PAR_MIN, with padded columns. */
static void crossentropy(void **state)
{
    pair *p = *state;
    enum { BT = 64, V = 20480, VREAL = 20000 };
    assert_true((size_t)BT * V > CPU_PAR_MIN);
    size_t n = (size_t)BT * V;
    float *l1 = tb_rand_new(n, 61, -8, 8), *l2 = tb_zeros(n), *dloss = tb_rand_new(BT, 62, 0.1f, 1);
    int32_t tg[BT];
    for (int i = 0; i < BT; i++) tg[i] = (int32_t)((i * 7919) % VREAL);
    memcpy(l2, l1, n * sizeof(float));
    float loss1[BT], loss2[BT], m1[BT], m2[BT], s1[BT], s2[BT], t1[BT], t2[BT];
    be_crossentropy_fwd(p->one, loss1, m1, s1, t1, l1, tg, BT, V, VREAL);
    be_crossentropy_fwd(p->many, loss2, m2, s2, t2, l2, tg, BT, V, VREAL);
    same("ce max", m1, m2, BT);
    same("ce sumexp", s1, s2, BT);
    same("ce loss", loss1, loss2, BT);
    be_ce_bwd(p->one, l1, m1, s1, tg, dloss, BT, V, VREAL, 0);
    be_ce_bwd(p->many, l2, m2, s2, tg, dloss, BT, V, VREAL, 0);
    same("ce_bwd dlogits", l1, l2, n);
    free(l1), free(l2), free(dloss);
}

/* The element-wise kernels and the lookups (no reductions, but threaded above CPU_PAR_MIN or
 * CPU_PAR_MIN_EXP): gelu, add, scale, the bias add of matmul_fwd, the embedding lookups. */
static void elementwise_and_lookups(void **state)
{
    pair *p = *state;
    enum { V = 300, B = 5, T = N / B };
    size_t n = (size_t)N * C;
    assert_true(n > CPU_PAR_MIN);
    float *x = tb_rand_new(n, 71, -3, 3), *y = tb_rand_new(n, 72, -1, 1), *o1 = tb_zeros(n), *o2 = tb_zeros(n);
    be_gelu_fwd(p->one, o1, x, n);
    be_gelu_fwd(p->many, o2, x, n);
    same("gelu_fwd", o1, o2, n);
    be_gelu_bwd(p->one, o1, y, x, n);
    be_gelu_bwd(p->many, o2, y, x, n);
    same("gelu_bwd", o1, o2, n);
    be_add(p->one, o1, x, y, n);
    be_add(p->many, o2, x, y, n);
    be_scale(p->one, o1, 0.37f, n);
    be_scale(p->many, o2, 0.37f, n);
    same("add, scale", o1, o2, n);
    float *w = tb_rand_new((size_t)C * 8, 73, -1, 1), *b = tb_rand_new(C, 74, -1, 1);
    be_matmul_fwd(p->one, o1, x, w, b, N, 8, C);
    be_matmul_fwd(p->many, o2, x, w, b, N, 8, C);
    same_blas("matmul_fwd (bias add)", o1, o2, n);
    int32_t *ids = td_xmalloc((size_t)B * T * sizeof(int32_t));
    for (int i = 0; i < B * T; i++) ids[i] = (int32_t)((i * 37) % (V + 20)); /* some outside the slice */
    float *wte = tb_rand_new((size_t)V * C, 75, -1, 1), *wpe = tb_rand_new((size_t)T * C, 76, -1, 1);
    be_embedding_fwd(p->one, o1, ids, wte, B * T, C, 10, V);
    be_embedding_fwd(p->many, o2, ids, wte, B * T, C, 10, V);
    be_pos_embedding_fwd(p->one, o1, wpe, B, T, C, 0);
    be_pos_embedding_fwd(p->many, o2, wpe, B, T, C, 0);
    same("embedding_fwd, pos_embedding_fwd", o1, o2, n);
    free(x), free(y), free(o1), free(o2), free(w), free(b), free(ids), free(wte), free(wpe);
}

int main(int argc, char **argv)
{
    (void)argc;
    be_prepare_process(argv);
    tb_skip_unless_isa_runs();
    blas_invariant = probe_blas_invariance();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(layernorm_and_bias),
        cmocka_unit_test(rmsnorm),
        cmocka_unit_test(bias_gelu),
        cmocka_unit_test(swiglu_and_rope),
        cmocka_unit_test(attention_gqa),
        cmocka_unit_test(embeddings),
        cmocka_unit_test(optimizer),
        cmocka_unit_test(attention),
        cmocka_unit_test(dropout),
        cmocka_unit_test(crossentropy),
        cmocka_unit_test(elementwise_and_lookups),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
