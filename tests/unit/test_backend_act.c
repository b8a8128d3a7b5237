/* The MLP's activations (src/backend/cpu/act.c: the backend's act_fwd / act_bwd), every function
 * of td_act, ungated and gated: each forward against a double-precision reference written here
 * from the functions' definitions (GeLU's tanh form and exact erf form, SiLU, ReLU, squared ReLU;
 * gated: act(gate) * up over rows [gate | up]: GeGLU, SwiGLU, ReGLU), each backward against
 * central finite differences of that reference, and accumulation. A row count and width that
 * are not multiples of a vector, and large enough that the threads split them. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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

/* The functions, from their definitions. */
static double ref_act(int act, double x)
{
    switch (act) {
    case TD_ACT_GELU: return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case TD_ACT_GELU_ERF: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case TD_ACT_SILU: return x / (1.0 + exp(-x));
    case TD_ACT_RELU: return x > 0 ? x : 0.0;
    case TD_ACT_SQUARED_RELU: return x > 0 ? x * x : 0.0;
    default: fail_msg("no reference for activation %d", act); return 0;
    }
}

typedef struct {
    double *inp; /* (N, F), gated (N, 2F) */
    int act, glu, N, F;
} act_ctx;

static void act_ref(void *vc, double *out)
{
    act_ctx *c = vc;
    for (int n = 0; n < c->N; n++)
        for (int f = 0; f < c->F; f++) {
            if (!c->glu) {
                out[(size_t)n * c->F + f] = ref_act(c->act, c->inp[(size_t)n * c->F + f]);
                continue;
            }
            double g = c->inp[(size_t)n * 2 * c->F + f], u = c->inp[(size_t)n * 2 * c->F + c->F + f];
            out[(size_t)n * c->F + f] = ref_act(c->act, g) * u;
        }
}

static void check_act(const backend *be, int act, int glu, int N, int F)
{
    size_t nin = (size_t)N * F * (glu ? 2 : 1), nout = (size_t)N * F;
    float *inp = tb_rand_new(nin, 120 + (uint64_t)act, -4, 4), *R = tb_rand_new(nout, 130, -1, 1);
    /* ReLU's kink: no input within the finite difference's step of 0 */
    for (size_t i = 0; i < nin; i++)
        if (fabsf(inp[i]) < 1e-2f) inp[i] = inp[i] < 0 ? -0.5f : 0.5f;
    float *out = tb_zeros(nout), *dinp = tb_zeros(nin);
    act_ctx c = {tb_dup(inp, nin), act, glu, N, F};
    double *ref = td_xmalloc(nout * sizeof(double)), *Rd = tb_dup(R, nout);
    char name[96];

    be_act_fwd(be, act, glu, out, inp, N, F);
    act_ref(&c, ref);
    snprintf(name, sizeof name, "%s fwd", td_act_label(act, glu));
    TB_CLOSE(name, out, ref, nout, 2e-6);

    be_act_bwd(be, act, glu, dinp, R, inp, N, F);
    snprintf(name, sizeof name, "%s dinp", td_act_label(act, glu));
    TB_GRAD(name, dinp, c.inp, nin, act_ref, &c, Rd, nout, 1e-5);
    float *dinp1 = tb_copy(dinp, nin);
    be_act_bwd(be, act, glu, dinp, R, inp, N, F);
    tb_check_doubled(name, dinp1, dinp, nin);

    free(inp), free(R), free(out), free(dinp), free(dinp1), free(c.inp), free(ref), free(Rd);
}

/* Every function, ungated and gated; small shapes for the finite differences, and one shape past
 * the threads' threshold (CPU_PAR_MIN_EXP elements) for the forward and backward split over
 * threads, held against the one-thread run bit for bit. */
static void every_activation(void **state)
{
    const backend *be = *state;
    for (int act = 0; act < TD_ACT_COUNT; act++)
        for (int glu = 0; glu < 2; glu++) check_act(be, act, glu, 5, 37);
}

static void threads_change_nothing(void **state)
{
    const backend *be2 = *state;
    backend *be1 = be_create("cpu", 1);
    enum { N = 600, F = 509 }; /* N F > 2^18 */
    float *inp = tb_rand_new((size_t)N * 2 * F, 140, -4, 4), *R = tb_rand_new((size_t)N * F, 141, -1, 1);
    float *o1 = tb_zeros((size_t)N * 2 * F), *o2 = tb_zeros((size_t)N * 2 * F);
    for (int act = 0; act < TD_ACT_COUNT; act++)
        for (int glu = 0; glu < 2; glu++) {
            size_t nin = (size_t)N * F * (glu ? 2 : 1);
            be_act_fwd(be1, act, glu, o1, inp, N, F);
            be_act_fwd(be2, act, glu, o2, inp, N, F);
            assert_memory_equal(o1, o2, (size_t)N * F * sizeof(float));
            memset(o1, 0, nin * sizeof(float)), memset(o2, 0, nin * sizeof(float));
            be_act_bwd(be1, act, glu, o1, R, inp, N, F);
            be_act_bwd(be2, act, glu, o2, R, inp, N, F);
            assert_memory_equal(o1, o2, nin * sizeof(float));
        }
    printf("  every activation: 1 and 2 threads bit-identical over (%d, %d)\n", N, F);
    free(inp), free(R), free(o1), free(o2);
    be_free(be1);
}

int main(void)
{
    tb_skip_unless_isa_runs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_activation),
        cmocka_unit_test(threads_change_nothing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
