/* src/backend/cpu/adamw.c, the memory entries and backend selection: AdamW against a double-precision PyTorch
 * reference over several steps, the sum of squares against double, scale, the memory
 * helpers, and the sgemm peak measurement (printed: the MFU denominator of this machine). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "test_backend_util.h"
#include "trident/timer.h"

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

/* torch.optim.AdamW, written out in double. */
static void adamw_ref(double *p, const double *g, double *m, double *v, int n, double lr, double b1, double b2,
                      double eps, double wd, double gscale, int step)
{
    double bc1 = 1.0 - pow(b1, step), bc2 = 1.0 - pow(b2, step);
    for (int i = 0; i < n; i++) {
        double gi = g[i] * gscale;
        p[i] *= 1.0 - lr * wd;
        m[i] = b1 * m[i] + (1.0 - b1) * gi;
        v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
        p[i] -= (lr / bc1) * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
    }
}

static void adamw_steps(void **state)
{
    const backend *be = *state;
    enum { N = 37, STEPS = 4 };
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gscale = 0.5f;
    float *p = tb_rand_new(N, 1, -1, 1), *m = tb_zeros(N), *v = tb_zeros(N);
    double *pr = tb_dup(p, N), mr[N] = {0}, vr[N] = {0};
    for (int s = 1; s <= STEPS; s++) {
        float *g = tb_rand_new(N, 10 + s, -2, 2);
        double *gr = tb_dup(g, N);
        be_adamw(be, p, g, m, v, N, lr, b1, b2, eps, wd, gscale, s);
        adamw_ref(pr, gr, mr, vr, N, lr, b1, b2, eps, wd, gscale, s);
        free(g), free(gr);
    }
    TB_CLOSE("adamw p after 4 steps", p, pr, N, 1e-6);
    TB_CLOSE("adamw m after 4 steps", m, mr, N, 1e-6);
    TB_CLOSE("adamw v after 4 steps", v, vr, N, 1e-6);

    /* by hand: step 1 without decay moves every weight by lr * g / (|g| + eps) = lr * sign(g) */
    float q[4] = {1, 1, 1, 1}, gq[4] = {3, -0.5f, 1e-3f, -20}, mq[4] = {0}, vq[4] = {0};
    be_adamw(be, q, gq, mq, vq, 4, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 1);
    for (int i = 0; i < 4; i++) assert_true(fabsf(q[i] - (gq[i] > 0 ? 0.9f : 1.1f)) < 1e-5f);
    /* and pure decay with a zero gradient: p *= 1 - lr * wd */
    float z[2] = {2, -4}, gz[2] = {0, 0}, mz[2] = {0}, vz[2] = {0};
    be_adamw(be, z, gz, mz, vz, 2, 0.1f, 0.9f, 0.999f, 1e-8f, 0.5f, 1.0f, 1);
    assert_true(fabsf(z[0] - 1.9f) < 1e-6f && fabsf(z[1] + 3.8f) < 1e-6f);
    free(p), free(m), free(v), free(pr);
}

static void sumsq_scale_memory(void **state)
{
    const backend *be = *state;
    enum { N = 100003 }; /* several chunks, the parallel path, a ragged end */
    float *x = tb_rand_new(N, 40, -1, 1);
    double ref = 0.0;
    for (int i = 0; i < N; i++) ref += (double)x[i] * x[i];
    double got = be_sumsq(be, x, N);
    printf("  sumsq: rel err %.2e (tol 1e-12)\n", fabs(got - ref) / ref);
    assert_true(fabs(got - ref) / ref < 1e-12);
    assert_true(be_sumsq(be, x, 0) == 0.0);
    backend *one = be_create("cpu", 1);
    assert_true(be_sumsq(one, x, N) == got); /* the same with one thread, bit for bit */
    be_free(one);

    float *y = be_alloc(be, N * sizeof(float));
    assert_true(((uintptr_t)y & 63) == 0);
    be_copy(be, y, x, N);
    assert_memory_equal(y, x, N * sizeof(float));
    be_scale(be, y, 0.5f, N);
    for (int i = 0; i < N; i++) assert_true(y[i] == 0.5f * x[i]);
    be_zero(be, y, N);
    assert_true(be_sumsq(be, y, N) == 0.0);
    be_memcpy(be, y, x, 16, BE_H2D);
    assert_memory_equal(y, x, 16);
    be_sync(be);
    be_dfree(be, y);
    be_dfree(be, NULL);
    free(x);
}

static void selection(void **state)
{
    (void)state;
    backend *be = be_create("cpu", 1);
    assert_string_equal(be->ops->name, "cpu");
    assert_int_equal(be_cpu_threads(be), 1);
    be_free(be);
    be = be_create("cpu", 0); /* OpenMP's default */
    assert_true(be_cpu_threads(be) >= 1);
    be_free(be);
    be_free(NULL);
}

static void sgemm_peak(void **state)
{
    const backend *be = *state;
    double t0 = td_now(), g = be_peak_gflops(be);
    printf("  sgemm peak: %.1f GFLOP/s with %d threads (measured in %.2f s)\n", g, be_cpu_threads(be), td_now() - t0);
    assert_true(g > 0.1);
}

int main(void)
{
    tb_skip_unless_isa_runs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(adamw_steps),
        cmocka_unit_test(sumsq_scale_memory),
        cmocka_unit_test(selection),
        cmocka_unit_test(sgemm_peak),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
