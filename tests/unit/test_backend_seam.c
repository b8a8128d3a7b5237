/* The backend seam itself (src/backend/registry.c, backend.h, cpu/ops.c): the registry and the
 * --backend flag agree, an unknown backend exits 2 naming the ones there are, the cpu entries
 * refuse activations in a dtype they do not compute in (naming the entry), and the kernel times
 * of be_stats are the elapsed times of the backend's events. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_child.h"

#include "test_backend_util.h"
#include "trident/args.h"

/* run_in_child (test_child.h) of fn(be). */
static void (*g_child_fn)(const backend *);
static const backend *g_child_be;
static void child_call(void) { g_child_fn(g_child_be); }
static int run_in_child_be(void (*fn)(const backend *), const backend *be, char *err, size_t len)
{
    g_child_fn = fn;
    g_child_be = be;
    return run_in_child(child_call, err, len);
}

static void registry_names_the_cpu(void **state)
{
    (void)state;
#ifdef TRIDENT_HAVE_CUDA
    assert_string_equal(be_backend_names(), "cpu, cuda");
    assert_true(be_backend_known("cuda"));
    assert_int_equal(be_have_cuda(), 1);
#else
    assert_string_equal(be_backend_names(), "cpu");
    assert_false(be_backend_known("cuda"));
    assert_int_equal(be_have_cuda(), 0);
    assert_int_equal(be_backend_devices("cuda"), 0);
#endif
    assert_true(be_backend_known("cpu"));
    assert_true(be_backend_known("auto"));
    assert_false(be_backend_known(""));
    assert_int_equal(be_backend_devices("cpu"), 1);
    assert_int_equal(be_backend_devices("tpu"), 0);
    backend *be = be_create("cpu", 1);
    assert_string_equal(be->ops->name, "cpu");
    assert_null(be->queue); /* synchronous: no queue */
    assert_int_equal(be->device, -1);
    be_free(be);
}

/* The flag's choices (args.c, a floor below the backends) are exactly the registry's names. */
static void flag_choices_are_the_registry(void **state)
{
    (void)state;
    td_args a;
    td_args_defaults(&a, TD_CMD_TRAIN);
    assert_string_equal(a.backend, "auto");
    int n = 0;
    for (int v = 0; td_args_set_number(&a, "--backend", v) == 0; v++, n++) assert_true(be_backend_known(a.backend));
    td_args_free(&a);
    n--; /* auto */
    int registry = 1; /* commas + 1 in "cpu" */
    for (const char *p = be_backend_names(); *p; p++) registry += *p == ',';
    assert_int_equal(n, registry);
}

static void create_unknown(const backend *be)
{
    (void)be;
    be_create("tpu", 0);
}

static void unknown_backend_exits_2_naming_the_list(void **state)
{
    (void)state;
    char err[2048];
    assert_int_equal(run_in_child_be(create_unknown, NULL, err, sizeof err), 2);
    assert_non_null(strstr(err, "--backend tpu"));
    assert_non_null(strstr(err, "it has: cpu"));
}

/* ---- the cpu entries check the dtype of every typed buffer ---- */
enum { N = 4, C = 8 };
static float g_x[N * C], g_y[N * C], g_w[C * C], g_stat[N * C];
static uint16_t g_h[N * C];

static be_out bf16_out(void *p)
{
    be_out x = {p, BE_BF16};
    return x;
}
static be_in bf16_in(const void *p)
{
    be_in x = {p, BE_BF16};
    return x;
}

static void layernorm_bf16_out(const backend *be)
{
    be->ops->layernorm_fwd(be, bf16_out(g_h), g_stat, g_stat, be_f32(g_x), g_w, g_w, N, C, 1e-5f);
}
static void gelu_bf16_in(const backend *be) { be->ops->act_fwd(be, TD_ACT_GELU, 0, be_f32_out(g_y), bf16_in(g_h), N, C); }
static void add_bf16_in(const backend *be) { be->ops->add(be, be_f32_out(g_y), be_f32(g_x), bf16_in(g_h), N * C); }
static void matmul_bf16_in(const backend *be)
{
    be->ops->matmul_fwd(be, be_f32_out(g_y), bf16_in(g_h), g_w, NULL, N, C, C);
}
static void attention_bf16_k(const backend *be)
{
    be->ops->attention_fwd(be, be_f32_out(g_y), g_stat, be_f32(g_x), bf16_in(g_h), be_f32(g_x), C, C, 1, N, 1, 1, C,
                           NULL, NULL, NULL);
}
static void ce_bf16_logits(const backend *be) { be->ops->ce_max(be, g_stat, bf16_in(g_h), N, C, C); }
static void dropout_bf16_out(const backend *be)
{
    be->ops->dropout_fwd(be, bf16_out(g_h), be_f32(g_x), 1, N, C, NULL);
}
/* a low-precision GEMM takes its inputs in its own dtype, not fp32 */
static void matmul_lp_f32_in(const backend *be)
{
    be->ops->matmul_fwd_lp(be, be_f32_out(g_y), be_f32(g_x), g_h, NULL, BE_BF16, N, C, C);
}

static void cpu_refuses_other_dtypes(void **state)
{
    backend *be = *state;
    static const struct {
        void (*fn)(const backend *);
        const char *says;
    } cases[] = {
        {layernorm_bf16_out, "cpu layernorm_fwd: a bf16 output buffer"},
        {gelu_bf16_in, "cpu act_fwd: a bf16 input buffer"},
        {add_bf16_in, "cpu add: a bf16 input buffer"},
        {matmul_bf16_in, "cpu matmul_fwd: a bf16 input buffer"},
        {attention_bf16_k, "cpu attention_fwd: a bf16 input buffer"},
        {ce_bf16_logits, "cpu ce_max: a bf16 input buffer"},
        {dropout_bf16_out, "cpu dropout_fwd: a bf16 output buffer"},
        {matmul_lp_f32_in, "cpu matmul_fwd_lp: a fp32 input to a bf16 GEMM"},
    };
    char err[2048];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int code = run_in_child_be(cases[i].fn, be, err, sizeof err);
        if (code != 1 || !strstr(err, cases[i].says))
            fail_msg("case %zu: exit %d, stderr \"%s\"; want exit 1 saying \"%s\"", i, code, err, cases[i].says);
    }
}

/* The fp32 wrappers pass fp32 typed buffers: the same call runs (and the result is the plain
 * sum, worked out here). */
static void wrappers_pass_fp32(void **state)
{
    backend *be = *state;
    for (int i = 0; i < N * C; i++) g_x[i] = (float)i, g_w[i % (C * C)] = 0.5f;
    float out[N * C];
    be_add(be, out, g_x, g_x, N * C);
    for (int i = 0; i < N * C; i++) assert_true(out[i] == 2.0f * (float)i);
}

/* ---- be_stats through the events ---- */
static double g_clock;
static void stamp_record(const backend *be, be_event *ev)
{
    (void)be;
    ev->t = (g_clock += 1.0);
    ev->h = NULL;
}
static double stamp_elapsed(const backend *be, be_event *start, be_event *end)
{
    (void)be;
    return 0.25 * (end->t - start->t); /* a device's clock: a quarter of the stamps' difference */
}

/* Three GeLUs, two GEMMs and a zeroing through the timed wrappers. */
static void timed_calls(const backend *be, float *out)
{
    for (int i = 0; i < 3; i++) be_gelu_fwd(be, out, g_x, N * C);
    be_matmul_fwd(be, out, g_x, g_w, NULL, N, C, C);
    be_matmul_fwd(be, out, g_x, g_w, NULL, N, C, C);
    be_zero(be, out, N * C);
}

/* With events that advance one stamp a record and an elapsed time of a quarter stamp, every
 * timed wrapper adds exactly 0.25 s to its family whatever the wall time: be_tic/be_toc read
 * the backend's events, not the host clock. */
static void stats_are_event_times(void **state)
{
    backend *cpu = *state;
    struct be_ops ops = *cpu->ops;
    ops.event_record = stamp_record;
    ops.event_elapsed = stamp_elapsed;
    backend be = *cpu;
    be.ops = &ops;
    be_stats st;
    memset(&st, 0, sizeof st);
    be.stats = &st;
    float out[N * C];
    timed_calls(&be, out);
    assert_true(st.seconds[BE_OP_GELU] == 0.75);
    assert_int_equal(st.calls[BE_OP_GELU], 3);
    assert_true(st.seconds[BE_OP_GEMM] == 0.5);
    assert_true(st.flops[BE_OP_GEMM] == 2.0 * (2.0 * N * C * C));
    assert_true(st.seconds[BE_OP_MEMORY] == 0.25);
    assert_true(st.seconds[BE_OP_ATTENTION] == 0.0);
    /* stats off: no event is recorded */
    double before = g_clock;
    be.stats = NULL;
    be_gelu_fwd(&be, out, g_x, N * C);
    assert_true(g_clock == before);
}

/* On an asynchronous backend (event_query set) reading an event waits for the device, so be_toc
 * reads none: the kernels' events wait in the stats until be_stats_flush, which then gives the
 * seconds reading them at once gives (the trainer flushes once an iteration). */
static int g_elapsed_calls;
static double stamp_elapsed_counted(const backend *be, be_event *start, be_event *end)
{
    g_elapsed_calls++;
    return stamp_elapsed(be, start, end);
}
static int stamp_query(const backend *be, const be_event *ev)
{
    (void)be, (void)ev;
    return 1;
}
static void stats_deferred_on_async(void **state)
{
    backend *cpu = *state;
    struct be_ops ops = *cpu->ops;
    ops.event_record = stamp_record;
    ops.event_elapsed = stamp_elapsed_counted;
    ops.event_query = stamp_query;
    backend be = *cpu;
    be.ops = &ops;
    be_stats st;
    memset(&st, 0, sizeof st);
    be.stats = &st;
    float out[N * C];
    g_elapsed_calls = 0;
    timed_calls(&be, out);
    assert_int_equal(g_elapsed_calls, 0); /* nothing waited for */
    assert_int_equal(st.npending, 6);
    assert_true(st.seconds[BE_OP_GELU] == 0.0);
    assert_int_equal(st.calls[BE_OP_GELU], 3);
    assert_true(st.flops[BE_OP_GEMM] == 2.0 * (2.0 * N * C * C));
    be_stats_flush(&be, &st);
    assert_int_equal(g_elapsed_calls, 6);
    assert_true(st.seconds[BE_OP_GELU] == 0.75);
    assert_true(st.seconds[BE_OP_GEMM] == 0.5);
    assert_true(st.seconds[BE_OP_MEMORY] == 0.25);
    assert_int_equal(st.npending, 0);
    assert_null(st.pending);
    be_stats_flush(&be, &st); /* nothing left: a no-op */
    assert_true(st.seconds[BE_OP_GELU] == 0.75);
}

/* be_sumsq_many: one sumsq_many call where the backend has one; else sumsq a slice at a time (the
 * cpu); the same sums either way. */
static int g_many_calls;
static void stub_sumsq_many(const backend *be, double *out, const float *const *x, const size_t *n, int count)
{
    g_many_calls++;
    for (int i = 0; i < count; i++) out[i] = be->ops->sumsq(be, x[i], n[i]);
}
static void sumsq_many_one_call(void **state)
{
    backend *cpu = *state;
    const float *xs[3] = {g_x, g_x + 5, g_x + 7};
    size_t ns[3] = {N * C, 3, 0};
    double loop[3], many[3];
    be_sumsq_many(cpu, loop, xs, ns, 3); /* the cpu has none: sumsq a slice at a time */
    for (int i = 0; i < 3; i++) assert_true(loop[i] == (ns[i] ? cpu->ops->sumsq(cpu, xs[i], ns[i]) : 0.0));
    struct be_ops ops = *cpu->ops;
    ops.sumsq_many = stub_sumsq_many;
    backend be = *cpu;
    be.ops = &ops;
    g_many_calls = 0;
    be_sumsq_many(&be, many, xs, ns, 3);
    assert_int_equal(g_many_calls, 1);
    assert_memory_equal(many, loop, sizeof many);
}

/* cpu events are wall-clock stamps: the elapsed time is the difference of the stamps. */
static void cpu_events_are_stamps(void **state)
{
    backend *be = *state;
    be_event a = be_event_record(be), b = be_event_record(be);
    double want = b.t - a.t;
    assert_true(want >= 0.0);
    assert_true(be_event_elapsed(be, &a, &b) == want);
}

static int setup(void **state)
{
    *state = be_create("cpu", 1);
    return 0;
}
static int teardown(void **state)
{
    be_free(*state);
    return 0;
}

int main(void)
{
    tb_skip_unless_isa_runs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(registry_names_the_cpu),
        cmocka_unit_test(flag_choices_are_the_registry),
        cmocka_unit_test(unknown_backend_exits_2_naming_the_list),
        cmocka_unit_test(cpu_refuses_other_dtypes),
        cmocka_unit_test(wrappers_pass_fp32),
        cmocka_unit_test(stats_are_event_times),
        cmocka_unit_test(stats_deferred_on_async),
        cmocka_unit_test(sumsq_many_one_call),
        cmocka_unit_test(cpu_events_are_stamps),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
