/* The kernels of a Llama-style layer (src/backend/cpu/rmsnorm.c, rope.c, swiglu.c): each forward
 * against a double-precision reference written here, each backward against central finite
 * differences of that reference; accumulation (or, for RoPE's backward, overwriting); RoPE's
 * angles as Hugging Face's float32 computation rounds them. */
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

/* ---------------- RMSNorm ---------------- */

typedef struct {
    double *inp, *w;
    int N, C;
    double eps;
} rms_ctx;

static void rms_ref(void *vc, double *out)
{
    rms_ctx *c = vc;
    for (int n = 0; n < c->N; n++) {
        const double *x = c->inp + (size_t)n * c->C;
        double ss = 0;
        for (int k = 0; k < c->C; k++) ss += x[k] * x[k];
        double s = 1.0 / sqrt(ss / c->C + c->eps);
        for (int k = 0; k < c->C; k++) out[(size_t)n * c->C + k] = x[k] * s * c->w[k];
    }
}

static void rmsnorm(void **state)
{
    const backend *be = *state;
    enum { N = 5, C = 23, NC = N * C };
    float *inp = tb_rand_new(NC, 100, -2, 2), *w = tb_rand_new(C, 101, 0.5f, 1.5f), *R = tb_rand_new(NC, 102, -1, 1);
    float *out = tb_zeros(NC), *out2 = tb_zeros(NC), rstd[N];
    rms_ctx c = {tb_dup(inp, NC), tb_dup(w, C), N, C, 0.25};
    double ref[NC], *Rd = tb_dup(R, NC);

    be_rmsnorm_fwd(be, out, rstd, inp, w, N, C, 0.25f); /* a large eps: it reaches the kernel */
    rms_ref(&c, ref);
    TB_CLOSE("rmsnorm fwd (eps 0.25)", out, ref, NC, 1e-5);
    c.eps = 1e-6;
    be_rmsnorm_fwd(be, out, rstd, inp, w, N, C, 1e-6f);
    rms_ref(&c, ref);
    TB_CLOSE("rmsnorm fwd", out, ref, NC, 1e-5);
    be_rmsnorm_fwd(be, out2, NULL, inp, w, N, C, 1e-6f); /* no rstd kept */
    assert_memory_equal(out, out2, NC * sizeof(float));

    float *dinp = tb_zeros(NC), *dw = tb_zeros(C);
    be_rmsnorm_bwd(be, dinp, dw, R, inp, w, rstd, N, C);
    TB_GRAD("rmsnorm dinp", dinp, c.inp, NC, rms_ref, &c, Rd, NC, 1e-4);
    TB_GRAD("rmsnorm dw", dw, c.w, C, rms_ref, &c, Rd, NC, 1e-4);
    float *dinp1 = tb_copy(dinp, NC), *dw1 = tb_copy(dw, C);
    be_rmsnorm_bwd(be, dinp, dw, R, inp, w, rstd, N, C);
    tb_check_doubled("rmsnorm dinp", dinp1, dinp, NC);
    tb_check_doubled("rmsnorm dw", dw1, dw, C);
    /* NULL gradients are skipped */
    be_rmsnorm_bwd(be, NULL, dw1, R, inp, w, rstd, N, C);
    be_rmsnorm_bwd(be, dinp1, NULL, R, inp, w, rstd, N, C);
    assert_memory_equal(dw1, dw, C * sizeof(float));
    assert_memory_equal(dinp1, dinp, NC * sizeof(float));

    free(inp), free(w), free(R), free(out), free(out2), free(c.inp), free(c.w), free(Rd);
    free(dinp), free(dw), free(dinp1), free(dw1);
}

/* ---------------- SwiGLU ---------------- */

typedef struct {
    double *inp; /* (N, 2F) */
    int N, F;
} swiglu_ctx;

static void swiglu_ref(void *vc, double *out)
{
    swiglu_ctx *c = vc;
    for (int n = 0; n < c->N; n++)
        for (int f = 0; f < c->F; f++) {
            double g = c->inp[(size_t)n * 2 * c->F + f], u = c->inp[(size_t)n * 2 * c->F + c->F + f];
            out[(size_t)n * c->F + f] = g / (1.0 + exp(-g)) * u;
        }
}

static void swiglu(void **state)
{
    const backend *be = *state;
    enum { N = 4, F = 29 };
    float *inp = tb_rand_new(N * 2 * F, 110, -6, 6), *R = tb_rand_new(N * F, 111, -1, 1), *out = tb_zeros(N * F);
    swiglu_ctx c = {tb_dup(inp, N * 2 * F), N, F};
    double ref[N * F], *Rd = tb_dup(R, N * F);

    be_swiglu_fwd(be, out, inp, N, F);
    swiglu_ref(&c, ref);
    TB_CLOSE("swiglu fwd", out, ref, N * F, 1e-6);
    float *dinp = tb_zeros(N * 2 * F);
    be_swiglu_bwd(be, dinp, R, inp, N, F);
    TB_GRAD("swiglu dinp", dinp, c.inp, N * 2 * F, swiglu_ref, &c, Rd, N * F, 1e-5);
    float *dinp1 = tb_copy(dinp, N * 2 * F);
    be_swiglu_bwd(be, dinp, R, inp, N, F);
    tb_check_doubled("swiglu dinp", dinp1, dinp, N * 2 * F);

    free(inp), free(R), free(out), free(c.inp), free(Rd), free(dinp), free(dinp1);
}

/* ---------------- RoPE ---------------- */

typedef struct {
    double *x; /* rows (B, T) of ld */
    int B, T, ld, nh, hs, rot, pos0;
    double base;
    int f32; /* 1: the angles rounded as Hugging Face's float32 computation rounds them */
} rope_ctx;

static double rope_angle(const rope_ctx *c, int pos, int i)
{
    if (!c->f32) return pos * pow(c->base, -2.0 * i / c->rot);
    float inv = 1.0f / (float)pow(c->base, (double)((float)(2 * i) / (float)c->rot));
    return (double)((float)pos * inv);
}

static void rope_ref(void *vc, double *out)
{
    rope_ctx *c = vc;
    int r2 = c->rot / 2;
    size_t n = (size_t)c->B * c->T * c->ld;
    memcpy(out, c->x, n * sizeof(double));
    for (int bt = 0; bt < c->B * c->T; bt++)
        for (int h = 0; h < c->nh; h++) {
            const double *x = c->x + (size_t)bt * c->ld + (size_t)h * c->hs;
            double *y = out + (size_t)bt * c->ld + (size_t)h * c->hs;
            for (int i = 0; i < r2; i++) {
                double a = rope_angle(c, c->pos0 + bt % c->T, i);
                y[i] = x[i] * cos(a) - x[i + r2] * sin(a);
                y[i + r2] = x[i + r2] * cos(a) + x[i] * sin(a);
            }
        }
}

/* Forward against the reference with float32 angles (to 1e-6) and with exact ones (to exact_tol),
 * backward (the transpose) against FD; columns beyond the heads, and dims >= rot, untouched. */
static void check_rope(const backend *be, int B, int T, int ld, int nh, int hs, int rot, float base, int pos0,
                       double exact_tol, const char *what)
{
    size_t n = (size_t)B * T * ld;
    float *x = tb_rand_new(n, 120, -1, 1), *y = tb_copy(x, n), *R = tb_rand_new(n, 121, -1, 1);
    float *dx = tb_copy(R, n);
    double *ref = td_xmalloc(n * sizeof(double)), *Rd = tb_dup(R, n);
    rope_ctx c = {tb_dup(x, n), B, T, ld, nh, hs, rot, pos0, base, 0};
    char name[80];

    be_rope_fwd(be, y, B, T, ld, nh, hs, rot, base, pos0);
    rope_ref(&c, ref);
    snprintf(name, sizeof name, "rope fwd %s", what);
    TB_CLOSE(name, y, ref, n, exact_tol);
    c.f32 = 1;
    rope_ref(&c, ref);
    snprintf(name, sizeof name, "rope fwd, float32 angles %s", what);
    TB_CLOSE(name, y, ref, n, 1e-6);
    for (size_t i = 0; i < n; i++) {
        int col = (int)(i % (size_t)ld), d = col % hs;
        if (col >= nh * hs || d >= rot) assert_true(y[i] == x[i]);
    }

    be_rope_bwd(be, dx, B, T, ld, nh, hs, rot, base, pos0);
    snprintf(name, sizeof name, "rope dx %s", what);
    TB_GRAD(name, dx, c.x, n, rope_ref, &c, Rd, n, 1e-5);
    /* the backward writes: rotating back what the forward turned gives the input again */
    be_rope_bwd(be, y, B, T, ld, nh, hs, rot, base, pos0);
    double *xd = tb_dup(x, n);
    snprintf(name, sizeof name, "rope bwd(fwd(x)) = x %s", what);
    TB_CLOSE(name, y, xd, n, 1e-6);

    free(x), free(y), free(R), free(dx), free(ref), free(Rd), free(c.x), free(xd);
}

static void rope(void **state)
{
    const backend *be = *state;
    /* whole heads, a fused-qkv-like stride (q of 3 heads in rows of 3 * 3 * 8) */
    check_rope(be, 2, 5, 72, 3, 8, 8, 10000.0f, 0, 1e-5, "(hs 8, rot 8, ld 72)");
    /* partial rotary (rot = hs / 2, GPT-NeoX / --rotary-percent 0.5), a sequence-parallel slice */
    check_rope(be, 1, 6, 20, 2, 8, 4, 500000.0f, 7, 1e-5, "(rot 4 of 8, pos0 7)");
}

/* Far from position 0 the float32 angle, which is what HF rotates by, is off the exact one by
 * about 1e-4 relative: the kernel follows the float32 one to 1e-6. */
static void rope_float32_angles(void **state)
{
    const backend *be = *state;
    check_rope(be, 1, 3, 64, 1, 64, 64, 10000.0f, 4093, 1e-3, "(pos 4093..4095)");
    /* a table cached for another (rot, base) is not reused */
    check_rope(be, 1, 3, 64, 1, 64, 32, 10000.0f, 4093, 1e-3, "(rot 32, pos 4093)");
    check_rope(be, 1, 3, 64, 1, 64, 32, 1000000.0f, 4093, 1e-3, "(base 1e6)");
    check_rope(be, 1, 3, 64, 1, 64, 32, 1000000.0f, 0, 1e-5, "(base 1e6, pos 0)");
}

/* Rotation by given frequencies and a cos/sin scale (rope scaling: be_rope_fwd_freq): each pair
 * (i, i + r2) of row t turned by the float32 angle (float)(pos0 + t) * inv_freq[i] and multiplied by
 * scale, against a double reference; the backward is the forward's transpose,
 * <R, fwd(x)> = <bwd(R), x>. */
static void rope_scaled(void **state)
{
    const backend *be = *state;
    enum { B = 2, T = 5, NH = 3, HS = 8, ROT = 8, LD = 28, R2 = ROT / 2, POS0 = 90 };
    be_rope r;
    const double inv[R2] = {1.0, 0.2, 0.031, 0.0007};
    for (int i = 0; i < R2; i++) r.inv_freq[i] = (float)inv[i];
    r.scale = 1.25f;
    size_t n = (size_t)B * T * LD;
    float *x = tb_rand_new(n, 130, -1, 1), *y = tb_copy(x, n), *R = tb_rand_new(n, 131, -1, 1), *dR = tb_copy(R, n);
    double *ref = td_xmalloc(n * sizeof(double));
    for (size_t k = 0; k < n; k++) ref[k] = x[k];
    for (int bt = 0; bt < B * T; bt++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < R2; i++) {
                size_t i1 = (size_t)bt * LD + (size_t)h * HS + i, i2 = i1 + R2;
                double a = (double)((float)(POS0 + bt % T) * r.inv_freq[i]), c = cos(a) * 1.25, sn = sin(a) * 1.25;
                ref[i1] = x[i1] * c - x[i2] * sn;
                ref[i2] = x[i2] * c + x[i1] * sn;
            }
    be_rope_fwd_freq(be, y, B, T, LD, NH, HS, ROT, &r, POS0, NULL);
    TB_CLOSE("rope fwd, given frequencies and scale 1.25", y, ref, n, 2e-6);
    be_rope_bwd_freq(be, dR, B, T, LD, NH, HS, ROT, &r, POS0, NULL);
    double lhs = 0, rhs = 0;
    for (size_t k = 0; k < n; k++) lhs += (double)R[k] * y[k], rhs += (double)dR[k] * x[k];
    if (fabs(lhs - rhs) > 1e-5 * (fabs(lhs) + 1)) fail_msg("rope bwd is not fwd's transpose: %.9g vs %.9g", lhs, rhs);
    free(x), free(y), free(R), free(dR), free(ref);
}

int main(void)
{
    tb_skip_unless_isa_runs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rmsnorm),
        cmocka_unit_test(swiglu),
        cmocka_unit_test(rope),
        cmocka_unit_test(rope_float32_angles),
        cmocka_unit_test(rope_scaled),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
