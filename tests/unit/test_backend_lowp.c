/* Mixed precision in the backend: the dtype conversions against the IEEE formats' definitions,
 * the bf16 and fp16 linear layers against a double-precision product of the same rounded inputs
 * and against the fp32 kernel, and the weight copies of be_matmul_* (made once per
 * be_lowp_invalidate, reused in between).
 *
 * Bounds. A bf16 or fp16 product of two rounded inputs is exact in fp32 (8 x 8 or 11 x 11
 * significant bits < 24), so against the double product of the same rounded inputs only the fp32
 * accumulation errs: at most K * 2^-24 * sum |a||b| (K the inner size); we allow 2K * 2^-24 relative
 * to the largest |output| sum. Against the fp32 kernel on the unrounded inputs, each factor is
 * off by at most 2^-9 (bf16) or 2^-12 (fp16) relatively, a product by 2^-8 or 2^-11: the bound
 * is that times the largest sum |a||b| of an output (plus both accumulations' error), relative to
 * the output scale. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "test_backend_util.h"
#include "trident/dynlib.h"

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

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* fp16 from its definition: sign, 5-bit exponent (bias 15), 10-bit mantissa, subnormals. */
static double f16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static void conversions(void **state)
{
    const backend *be = *state;
    /* bf16: rounding to nearest even on the 16 bits cut off */
    float in[] = {1.0f, from_bits(0x3f808000u) /* tie: stays 0x3f80 */, from_bits(0x3f818000u) /* tie: up to 0x3f82 */,
                  from_bits(0x3f808001u) /* above the tie: up */, -2.5f, INFINITY, NAN, 3.0e38f, 1e-40f};
    uint16_t want[] = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0xc020, 0x7f80, 0, 0x7f61, 0x0001};
    enum { N = sizeof in / sizeof in[0] };
    uint16_t got[N];
    float back[N];
    be_convert(be, got, BE_BF16, in, BE_F32, N);
    for (int i = 0; i < N; i++) {
        if (isnan(in[i])) {
            assert_true((got[i] & 0x7f80) == 0x7f80 && (got[i] & 0x7f) != 0);
            continue;
        }
        if (i == 7) continue; /* 3e38 = 0x7f61bc... rounds to 0x7f62 below */
        assert_int_equal(got[i], want[i]);
    }
    assert_int_equal(got[7], (bits(3.0e38f) + 0x7fffu + ((bits(3.0e38f) >> 16) & 1u)) >> 16);
    be_convert(be, back, BE_F32, got, BE_BF16, N);
    for (int i = 0; i < N; i++)
        if (!isnan(in[i])) assert_true(bits(back[i]) == (uint32_t)got[i] << 16);

    /* fp16: every one of the 65536 values widens to its definition, and narrows back to itself */
    uint16_t *all = td_xmalloc(65536 * 2), *again = td_xmalloc(65536 * 2);
    float *wide = td_xmalloc(65536 * 4);
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    be_convert(be, wide, BE_F32, all, BE_F16, 65536);
    be_convert(be, again, BE_F16, wide, BE_F32, 65536);
    for (int i = 0; i < 65536; i++) {
        double v = f16_value((uint16_t)i);
        if (isnan(v)) {
            assert_true(isnan(wide[i]));
            continue;
        }
        assert_true((double)wide[i] == v);
        assert_int_equal(again[i], i);
    }
    /* fp16 overflow and rounding: 65504 is the largest finite, 65520 rounds up to Inf */
    float big[] = {65504.0f, 65519.0f, 65520.0f, 1e6f, -1e6f, 1.0f + 1.0f / 4096.0f};
    uint16_t h[6];
    be_convert(be, h, BE_F16, big, BE_F32, 6);
    assert_int_equal(h[0], 0x7bff);
    assert_int_equal(h[1], 0x7bff);
    assert_int_equal(h[2], 0x7c00);
    assert_int_equal(h[3], 0x7c00);
    assert_int_equal(h[4], 0xfc00);
    assert_int_equal(h[5], 0x3c00); /* 1 + 2^-12 is a tie between 1 and 1 + 2^-10: to even, 1 */
    free(all);
    free(again);
    free(wide);
}

/* out (BT, OC) = inp . w^T + b in double, of inputs given as floats. */
static void ref_fwd(double *out, const float *inp, const float *w, const float *b, int BT, int C, int OC)
{
    for (int i = 0; i < BT; i++)
        for (int o = 0; o < OC; o++) {
            double s = b ? b[o] : 0.0;
            for (int k = 0; k < C; k++) s += (double)inp[i * C + k] * w[o * C + k];
            out[i * OC + o] = s;
        }
}

/* x rounded to dt and back, in place. */
static void round_to(const backend *be, float *x, size_t n, be_dtype dt)
{
    uint16_t *t = td_xmalloc(n * 2);
    be_convert(be, t, dt, x, BE_F32, n);
    be_convert(be, x, BE_F32, t, dt, n);
    free(t);
}

static void linear_lp_dtype(const backend *be, be_dtype dt)
{
    enum { BT = 67, C = 300, OC = 129 };
    float *inp = tb_rand_new(BT * C, 11, -1, 1), *w = tb_rand_new(OC * C, 12, -1, 1), *b = tb_rand_new(OC, 13, -1, 1);
    float *dout = tb_rand_new(BT * OC, 14, -1, 1);
    float *ri = td_xmalloc(BT * C * 4), *rw = td_xmalloc(OC * C * 4), *rd = td_xmalloc(BT * OC * 4);
    memcpy(ri, inp, BT * C * 4);
    memcpy(rw, w, OC * C * 4);
    memcpy(rd, dout, BT * OC * 4);
    round_to(be, ri, BT * C, dt);
    round_to(be, rw, OC * C, dt);
    round_to(be, rd, BT * OC, dt);
    uint16_t *li = td_xmalloc(BT * C * 2), *lw = td_xmalloc(OC * C * 2), *ld = td_xmalloc(BT * OC * 2);
    be_convert(be, li, dt, inp, BE_F32, BT * C);
    be_convert(be, lw, dt, w, BE_F32, OC * C);
    be_convert(be, ld, dt, dout, BE_F32, BT * OC);
    printf(" %s (%s):\n", be_dtype_name(dt), be->ops->lp_native(be, dt) ? "native" : "widened to fp32");

    /* forward */
    float *out = tb_zeros(BT * OC), *out32 = tb_zeros(BT * OC);
    double *want = td_xmalloc(BT * OC * sizeof(double));
    be_in li_t = {li, dt}, ld_t = {ld, dt};
    be->ops->matmul_fwd_lp(be, be_f32_out(out), li_t, lw, b, dt, BT, C, OC);
    ref_fwd(want, ri, rw, b, BT, C, OC);
    TB_CLOSE("fwd vs double of rounded inputs", out, want, BT * OC, 2.0 * C * ldexp(1, -24) * 4);
    be_matmul_fwd(be, out32, inp, w, b, BT, C, OC);
    double *o32 = tb_dup(out32, BT * OC);
    /* the bound: eps * max over outputs of sum |a||w| (plus the accumulation's), over the scale */
    double eps = dt == BE_BF16 ? ldexp(1, -8) : ldexp(1, -11), sab = 0, scale = 1e-6;
    for (int i = 0; i < BT; i++)
        for (int o = 0; o < OC; o++) {
            double s = 0;
            for (int k = 0; k < C; k++) s += fabs((double)inp[i * C + k] * w[o * C + k]);
            sab = s > sab ? s : sab;
            scale = fabs(o32[i * OC + o]) > scale ? fabs(o32[i * OC + o]) : scale;
        }
    TB_CLOSE("fwd vs fp32 kernel", out, o32, BT * OC, (eps + 2.0 * C * ldexp(1, -24)) * sab / scale);

    /* backward: dinp += dout . W, dW += dout^T . inp, on top of what is there */
    float *dinp = tb_rand_new(BT * C, 15, -1, 1), *dw = tb_rand_new(OC * C, 16, -1, 1);
    double *wdinp = tb_dup(dinp, BT * C), *wdw = tb_dup(dw, OC * C);
    be->ops->matmul_bwd_lp(be, be_f32_out(dinp), dw, ld_t, li_t, lw, dt, BT, C, OC);
    for (int i = 0; i < BT; i++)
        for (int k = 0; k < C; k++)
            for (int o = 0; o < OC; o++) wdinp[i * C + k] += (double)rd[i * OC + o] * rw[o * C + k];
    for (int o = 0; o < OC; o++)
        for (int k = 0; k < C; k++)
            for (int i = 0; i < BT; i++) wdw[o * C + k] += (double)rd[i * OC + o] * ri[i * C + k];
    TB_CLOSE("dinp vs double of rounded inputs", dinp, wdinp, BT * C, 2.0 * OC * ldexp(1, -24) * 4);
    TB_CLOSE("dw vs double of rounded inputs", dw, wdw, OC * C, 2.0 * BT * ldexp(1, -24) * 4);
    /* dinp only, dw only */
    float *dinp2 = tb_zeros(BT * C), *dw2 = tb_zeros(OC * C);
    be->ops->matmul_bwd_lp(be, be_f32_out(dinp2), NULL, ld_t, li_t, lw, dt, BT, C, OC);
    be->ops->matmul_bwd_lp(be, be_f32_out(NULL), dw2, ld_t, li_t, lw, dt, BT, C, OC);
    for (int i = 0; i < BT * C; i++) wdinp[i] -= (double)dinp[i] - dinp2[i];
    for (int i = 0; i < OC * C; i++) wdw[i] -= (double)dw[i] - dw2[i];
    TB_CLOSE("dinp alone", dinp2, wdinp, BT * C, 1e-5);
    TB_CLOSE("dw alone", dw2, wdw, OC * C, 1e-5);

    free(inp), free(w), free(b), free(dout), free(ri), free(rw), free(rd), free(li), free(lw), free(ld);
    free(out), free(out32), free(want), free(o32), free(dinp), free(dw), free(wdinp), free(wdw), free(dinp2),
        free(dw2);
}

static void linear_lp(void **state)
{
    linear_lp_dtype(*state, BE_BF16);
    linear_lp_dtype(*state, BE_F16);
}

/* be_matmul_fwd with a gemm dtype: the registered weight's copy is made at first use, reused until
 * be_lowp_invalidate; the backward's input and weight gradients match the lp kernel's. */
static void mixed_weight_copies(void **state)
{
    (void)state;
    enum { BT = 33, C = 64, OC = 48 };
    backend *be = be_create("cpu", 2);
    be_set_gemm_dtype(be, BE_BF16);
    float *params = tb_rand_new(OC * C + 100, 21, -1, 1), *inp = tb_rand_new(BT * C, 22, -1, 1);
    float *w = params + 100; /* a weight inside the registered buffer */
    be_lowp_register(be, params, OC * C + 100);
    float *out = tb_zeros(BT * OC), *again = tb_zeros(BT * OC);
    double *want = td_xmalloc(BT * OC * sizeof(double));
    float *ri = td_xmalloc(BT * C * 4), *rw = td_xmalloc(OC * C * 4);
    memcpy(ri, inp, sizeof(float) * BT * C);
    memcpy(rw, w, sizeof(float) * OC * C);
    round_to(be, ri, BT * C, BE_BF16);
    round_to(be, rw, OC * C, BE_BF16);
    be_matmul_fwd(be, out, inp, w, NULL, BT, C, OC);
    ref_fwd(want, ri, rw, NULL, BT, C, OC);
    TB_CLOSE("mixed fwd", out, want, BT * OC, 1e-5);

    /* the weight changes without invalidate: the stale copy is used (the contract) */
    for (int i = 0; i < OC * C; i++) w[i] *= 2.0f;
    be_matmul_fwd(be, again, inp, w, NULL, BT, C, OC);
    assert_memory_equal(again, out, sizeof(float) * BT * OC);
    /* after invalidate: the new weights */
    be_lowp_invalidate(be);
    be_matmul_fwd(be, again, inp, w, NULL, BT, C, OC);
    for (int i = 0; i < BT * OC; i++) want[i] *= 2.0;
    TB_CLOSE("mixed fwd after invalidate", again, want, BT * OC, 1e-5);
    assert_true(be_lowp_bytes(be) >= (OC * C + 100) * 2);

    /* a weight outside every registered buffer: rounded at each call */
    float *loose = tb_rand_new(OC * C, 23, -1, 1);
    memcpy(rw, loose, sizeof(float) * OC * C);
    round_to(be, rw, OC * C, BE_BF16);
    be_matmul_fwd(be, out, inp, loose, NULL, BT, C, OC);
    ref_fwd(want, ri, rw, NULL, BT, C, OC);
    TB_CLOSE("mixed fwd, unregistered weight", out, want, BT * OC, 1e-5);

    /* backward: the bias gradient is the fp32 column sum of dout */
    float *dout = tb_rand_new(BT * OC, 24, -1, 1), *db = tb_zeros(OC);
    double *wdb = td_xcalloc(OC, sizeof(double));
    be_matmul_bwd(be, NULL, NULL, db, dout, inp, loose, BT, C, OC);
    for (int i = 0; i < BT; i++)
        for (int o = 0; o < OC; o++) wdb[o] += dout[i * OC + o];
    TB_CLOSE("mixed bias grad (fp32)", db, wdb, OC, 1e-6);

    free(params), free(inp), free(out), free(again), free(want), free(ri), free(rw), free(loose), free(dout),
        free(db), free(wdb);
    be_free(be);
}

/* An output gradient past 64 MiB in bf16 (an LM head's) goes through the backward in slices of
 * rows: the same input gradient and weight gradient as the double product of the rounded inputs. */
static void mixed_backward_in_slices(void **state)
{
    (void)state;
    enum { BT = 1400, C = 8, OC = 30000 }; /* dout in bf16: 84 MB, two slices */
    backend *be = be_create("cpu", 2);
    be_set_gemm_dtype(be, BE_BF16);
    float *w = tb_rand_new((size_t)OC * C, 31, -1, 1), *inp = tb_rand_new((size_t)BT * C, 32, -1, 1);
    float *dout = tb_rand_new((size_t)BT * OC, 33, -1, 1);
    be_lowp_register(be, w, (size_t)OC * C);
    float *dinp = tb_zeros((size_t)BT * C), *dw = tb_zeros((size_t)OC * C);
    be_matmul_bwd(be, dinp, dw, NULL, dout, inp, w, BT, C, OC);
    round_to(be, w, (size_t)OC * C, BE_BF16);
    round_to(be, inp, (size_t)BT * C, BE_BF16);
    round_to(be, dout, (size_t)BT * OC, BE_BF16);
    double *wdinp = td_xcalloc((size_t)BT * C, sizeof(double)), *wdw = td_xcalloc((size_t)OC * C, sizeof(double));
    for (int i = 0; i < BT; i++)
        for (int o = 0; o < OC; o++) {
            double d = dout[(size_t)i * OC + o];
            for (int k = 0; k < C; k++) {
                wdinp[i * C + k] += d * w[(size_t)o * C + k];
                wdw[(size_t)o * C + k] += d * inp[i * C + k];
            }
        }
    TB_CLOSE("sliced dinp", dinp, wdinp, (size_t)BT * C, 2.0 * OC * ldexp(1, -24) * 4);
    TB_CLOSE("sliced dw", dw, wdw, (size_t)OC * C, 2.0 * BT * ldexp(1, -24) * 4);
    free(w), free(inp), free(dout), free(dinp), free(dw), free(wdinp), free(wdw);
    be_free(be);
}

/* libdnnl, opened at the first bf16 GEMM rather than linked (trident/dynlib.h): the library the
 * build found exports the function matmul_lp.c looks up, and it multiplies. On a CPU without
 * AVX512-BF16 oneDNN may decline (its status, not a crash); linear_lp holds the results where the
 * backend uses it. */
static void dnnl_opens(void **state)
{
    (void)state;
    typedef int (*gemm_fn)(char, char, int64_t, int64_t, int64_t, float, const uint16_t *, int64_t,
                           const uint16_t *, int64_t, float, float *, int64_t);
    gemm_fn gemm = NULL;
    const td_dynsym syms[] = {{"dnnl_gemm_bf16bf16f32", (void **)&gemm}};
    td_dynlib_open(TD_DNNL_SONAME, "the dynlib test of oneDNN", "install libdnnl-dev", syms, 1);
    assert_non_null(gemm);
    uint16_t a[4] = {0x3f80, 0x4000, 0x4040, 0x4080}, b[4] = {0x3f80, 0, 0, 0x3f80}; /* [1 2; 3 4], I */
    float c[4] = {0};
    if (gemm('N', 'N', 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2) == 0) {
        assert_true(c[0] == 1.0f && c[1] == 2.0f && c[2] == 3.0f && c[3] == 4.0f);
    }
}

int main(void)
{
    tb_skip_unless_isa_runs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(conversions),
        cmocka_unit_test(linear_lp),
        cmocka_unit_test(mixed_weight_copies),
        cmocka_unit_test(mixed_backward_in_slices),
        cmocka_unit_test(dnnl_opens),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
