/* Shared helpers of the backend tests (tests/unit/test_backend_*.c): random tensors, double
 * copies, central finite differences of a double-precision reference, and error measures. */
#ifndef TRIDENT_TEST_BACKEND_UTIL_H
#define TRIDENT_TEST_BACKEND_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/philox.h"
#include "backend/backend.h"

#define FD_EPS 1e-6

/* ctest's SKIP_RETURN_CODE for the kernel tests (tests/CMakeLists.txt). */
#define TB_SKIP 77

/* First thing in main. The ISA runs (unit/test_backend_*@<isa>) set TRIDENT_CPU_ISA: when this
 * CPU cannot run that build, or when it is the build the plain run takes already, exit TB_SKIP
 * saying why, so that ctest shows the run as skipped instead of passed or failed. */
static inline void tb_skip_unless_isa_runs(void)
{
    const char *isa = getenv("TRIDENT_CPU_ISA"), *best = NULL;
    char why[160];
    if (!isa || !*isa) return;
    if (!be_cpu_isa_runs(isa, &best, why, sizeof why)) {
        printf("SKIP: TRIDENT_CPU_ISA=%s: %s\n", isa, why);
        exit(TB_SKIP);
    }
    if (strcmp(isa, best) == 0) {
        printf("SKIP: TRIDENT_CPU_ISA=%s is this CPU's default build, tested by the run without it\n", isa);
        exit(TB_SKIP);
    }
    printf("kernels: the %s build (this CPU's default is %s)\n", isa, best);
}

/* x (n) = uniform in [lo, hi) from Philox stream `stream`. */
static inline void tb_rand(float *x, size_t n, uint64_t stream, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * td_philox_uniform(1234, stream, i);
}

static inline float *tb_rand_new(size_t n, uint64_t stream, float lo, float hi)
{
    float *x = td_xmalloc((n ? n : 1) * sizeof(float));
    tb_rand(x, n, stream, lo, hi);
    return x;
}

static inline float *tb_zeros(size_t n) { return td_xcalloc(n ? n : 1, sizeof(float)); }

static inline double *tb_dup(const float *x, size_t n)
{
    double *d = td_xmalloc((n ? n : 1) * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* max |got - want| / max(max |want|, floor): the error relative to the tensor's scale; NaN when
 * any element of either is NaN (so no comparison with a tolerance passes). */
static inline double tb_err(const float *got, const double *want, size_t n, double floor)
{
    double scale = floor, e = 0.0;
    for (size_t i = 0; i < n; i++) scale = fabs(want[i]) > scale ? fabs(want[i]) : scale;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (isnan(d)) return NAN; /* a later finite element must not hide it */
        e = d > e ? d : e;
    }
    return e / scale;
}

/* Asserts the relative error and prints it, so the tolerances reached are in the log. */
#define TB_CLOSE(name, got, want, n, tol)                                                      \
    do {                                                                                       \
        double e_ = tb_err((got), (want), (n), 1e-6);                                          \
        printf("  %-34s rel err %.2e (tol %.0e)\n", (name), e_, (double)(tol));               \
        assert_true(e_ <= (tol));                                                              \
    } while (0)

/* A double-precision reference forward: out (nout) from the inputs reachable through ctx. */
typedef void (*tb_ref_fn)(void *ctx, double *out);

/* g (n) = d(sum_k out[k] * R[k]) / dx by central differences, perturbing x (an input the
 * reference reads through ctx) in place, one element at a time. out: nout scratch. */
static inline void tb_fd_grad(double *g, double *x, size_t n, tb_ref_fn f, void *ctx, const double *R, size_t nout)
{
    double *out = td_xmalloc(nout * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i], lp = 0.0, lm = 0.0;
        x[i] = x0 + FD_EPS;
        f(ctx, out);
        for (size_t k = 0; k < nout; k++) lp += out[k] * R[k];
        x[i] = x0 - FD_EPS;
        f(ctx, out);
        for (size_t k = 0; k < nout; k++) lm += out[k] * R[k];
        x[i] = x0;
        g[i] = (lp - lm) / (2.0 * FD_EPS);
    }
    free(out);
}

/* FD gradient of the reference w.r.t. x (n) against the kernel's gradient `got`. */
#define TB_GRAD(name, got, x, n, f, ctx, R, nout, tol)                                         \
    do {                                                                                       \
        double *g_ = td_xmalloc((n) * sizeof(double));                                         \
        tb_fd_grad(g_, (x), (n), (f), (ctx), (R), (nout));                                     \
        TB_CLOSE(name, got, g_, n, tol);                                                       \
        free(g_);                                                                              \
    } while (0)

/* max |twice - 2 once| / max |2 once|: how far a second backward call is from doubling each
 * gradient. NaN when any element of either is NaN (so no comparison with a tolerance passes). */
static inline double tb_doubled_err(const float *once, const float *twice, size_t n)
{
    double e = 0.0, scale = 1e-6;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)twice[i] - 2.0 * (double)once[i]);
        if (isnan(d)) return NAN; /* a later finite element must not hide it */
        e = d > e ? d : e;
        scale = fabs(2.0 * once[i]) > scale ? fabs(2.0 * once[i]) : scale;
    }
    return e / scale;
}

/* Asserts that after a second backward call each gradient is twice the first (accumulation). */
static inline void tb_check_doubled(const char *name, const float *once, const float *twice, size_t n)
{
    double e = tb_doubled_err(once, twice, n);
    printf("  %-34s accumulates: rel err %.2e (tol 1e-06)\n", name, e);
    assert_true(e <= 1e-6);
}

static inline float *tb_copy(const float *x, size_t n)
{
    float *y = td_xmalloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

#endif
