/* What the CUDA backend decides without a GPU, tested where there is none: the device a rank takes
 * (the local rank modulo the visible devices), what --backend auto runs, the out-of-memory line and
 * the error line of a CUDA call (src/backend/device.c, src/backend/cuda/cuda.c), the --tf32 and
 * --backend flags, and how a binary without CUDA, or a machine without a GPU, refuses --backend cuda.
 * The kernels themselves are held to the cpu backend's on a GPU (tests/gpu/test_gpu_backend.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_child.h"

#include "backend/backend.h"
#include "trident/args.h"
#include "trident/check.h"
#ifdef TRIDENT_HAVE_CUDA
#include "backend/cuda/cuda_impl.h"
#endif


static void clear_launcher_env(void)
{
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("SLURM_LOCALID");
    unsetenv("MPI_LOCALRANKID");
    unsetenv("PMI_LOCAL_RANK");
}

/* One GPU per local rank, ranks beyond the devices sharing them round-robin. */
static void device_for_rank(void **state)
{
    (void)state;
    assert_int_equal(be_device_for_rank(0, 1), 0);
    assert_int_equal(be_device_for_rank(3, 1), 0); /* four ranks on one GPU */
    assert_int_equal(be_device_for_rank(3, 8), 3);
    assert_int_equal(be_device_for_rank(5, 2), 1);
    assert_int_equal(be_device_for_rank(8, 8), 0);
    assert_int_equal(be_device_for_rank(-1, 4), 0);
    assert_int_equal(be_device_for_rank(2, 0), -1); /* no device */
}

/* The local rank from Open MPI's variable first, then Slurm's; a value that is not a number is
 * skipped; none at all is a lone process, rank 0. */
static void local_rank_from_launcher(void **state)
{
    (void)state;
    clear_launcher_env();
    assert_int_equal(be_local_rank(), 0);
    setenv("SLURM_LOCALID", "2", 1);
    assert_int_equal(be_local_rank(), 2);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "5", 1);
    assert_int_equal(be_local_rank(), 5);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x1", 1);
    assert_int_equal(be_local_rank(), 2);
    setenv("SLURM_LOCALID", "-3", 1);
    assert_int_equal(be_local_rank(), 0);
    clear_launcher_env();
}

/* auto: cuda only when built in and a GPU is visible. */
static void auto_choice(void **state)
{
    (void)state;
    assert_string_equal(be_auto_choice(1, 1), "cuda");
    assert_string_equal(be_auto_choice(1, 8), "cuda");
    assert_string_equal(be_auto_choice(1, 0), "cpu");
    assert_string_equal(be_auto_choice(0, 4), "cpu");
    assert_string_equal(be_auto_name("cpu"), "cpu");
    int gpus = be_backend_devices("cuda"); /* never dies, GPU or not */
    assert_true(gpus >= 0);
    if (!be_have_cuda()) assert_int_equal(gpus, 0);
    assert_string_equal(be_auto_name("auto"), be_have_cuda() && gpus > 0 ? "cuda" : "cpu");
    if (gpus == 0) { /* here: auto is the cpu */
        backend *be = be_create("auto", 1);
        assert_string_equal(be->ops->name, "cpu");
        be_free(be);
    }
}

static void oom_line(void **state)
{
    (void)state;
    char m[1024];
    be_oom_message(m, sizeof m, "allocating the activations", (size_t)3 << 30, (size_t)512 << 20, (size_t)80 << 30);
    assert_non_null(strstr(m, "out of device memory allocating the activations: 3.00 GiB asked, 512.0 MiB free of "
                              "80.00 GiB;"));
    assert_non_null(strstr(m, "--recompute-granularity"));
    assert_non_null(strstr(m, "--use-distributed-optimizer"));
    assert_non_null(strstr(m, "--micro-batch-size"));
    assert_non_null(strstr(m, "--tensor-model-parallel-size"));
    assert_non_null(strstr(m, "--pipeline-model-parallel-size"));
    assert_int_equal(count_char(m, '\n'), 0);
    be_oom_message(m, sizeof m, "allocating", 0, 1000, (size_t)3 << 20); /* a library's own: no size */
    assert_null(strstr(m, "asked"));
    assert_non_null(strstr(m, ": 1000 bytes free of 3.0 MiB;"));
}

static void tf32_flag(void **state)
{
    (void)state;
    td_args a;
    td_args_defaults(&a, TD_CMD_TRAIN);
    assert_int_equal(a.tf32, 0);
    assert_string_equal(a.backend, "auto");
    td_args_free(&a);
    static const unsigned cmds[] = {TD_CMD_TRAIN, TD_CMD_EVAL, TD_CMD_GENERATE, TD_CMD_SERVE};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char *argv[] = {"x", "--tf32", "--backend", "cpu", NULL};
        assert_int_equal(td_args_parse(&a, cmds[i], "trident x", 4, argv, 1), 0);
        assert_int_equal(a.tf32, 1);
        assert_string_equal(a.backend, "cpu");
        td_args_free(&a);
    }
}

static void parse_tf32_on_convert(void)
{
    td_args a;
    char *argv[] = {"convert", "--tf32", NULL};
    td_args_parse(&a, TD_CMD_CONVERT, "trident convert", 2, argv, 1);
}

static void parse_tf32_on_plan(void)
{
    td_args a;
    char *argv[] = {"plan", "--tf32", NULL};
    td_args_parse(&a, TD_CMD_PLAN, "trident plan", 2, argv, 1);
}

static void parse_backend_cuda(void)
{
    td_args a;
    char *argv[] = {"train", "--backend", "cuda", NULL};
    td_args_parse(&a, TD_CMD_TRAIN, "trident train", 3, argv, 1);
    exit(strcmp(a.backend, "cuda") == 0 ? 0 : 3);
}

static void backend_flag(void **state)
{
    (void)state;
    char err[2048];
    assert_int_equal(run_in_child(parse_tf32_on_convert, err, sizeof err), 2); /* convert multiplies nothing */
    assert_non_null(strstr(err, "--tf32"));
    assert_int_equal(run_in_child(parse_tf32_on_plan, err, sizeof err), 2); /* nor does plan's calibration */
    int rc = run_in_child(parse_backend_cuda, err, sizeof err);
#ifdef TRIDENT_HAVE_CUDA
    assert_int_equal(rc, 0);
#else
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "--backend cuda: this trident was built without CUDA"));
    assert_int_equal(count_char(err, '\n'), 1);
#endif
}

#ifdef TRIDENT_HAVE_CUDA
static void create_cuda(void) { be_create("cuda", 0); }
static void die_invalid_value(void)
{
    cu_die("cudaMemcpyAsync(dst, src, n, kind, s)", "copying the batch", (int)cudaErrorInvalidValue, "x.c", 7);
}
static void die_oom(void)
{
    cu_die("cublasCreate(&h)", "creating the cuBLAS handle", (int)cudaErrorMemoryAllocation, "x.c", 9);
}

/* A CUDA error is one line: the call, what trident was doing, CUDA's name for the error, the rank,
 * host and device; out of memory names the flags that need less. Exit 1 as td_die. */
static void cuda_error_lines(void **state)
{
    (void)state;
    char err[4096];
    assert_int_equal(run_in_child(die_invalid_value, err, sizeof err), 1);
    assert_non_null(strstr(err, "x.c:7: cudaMemcpyAsync failed: copying the batch: cudaErrorInvalidValue"));
    assert_non_null(strstr(err, "rank 0, host "));
    assert_non_null(strstr(err, "device "));
    assert_non_null(strstr(err, "compute-sanitizer"));
    assert_int_equal(count_char(err, '\n'), 1);
    assert_int_equal(run_in_child(die_oom, err, sizeof err), 1);
    assert_non_null(strstr(err, "cublasCreate failed"));
    assert_non_null(strstr(err, "out of device memory creating the cuBLAS handle"));
    assert_non_null(strstr(err, "--micro-batch-size"));
    assert_int_equal(count_char(err, '\n'), 1);
    if (be_backend_devices("cuda") == 0) { /* no GPU here: --backend cuda says so, exit 1 */
        assert_int_equal(run_in_child(create_cuda, err, sizeof err), 1);
        assert_non_null(strstr(err, "--backend cuda: no CUDA device is visible"));
        assert_non_null(strstr(err, "--backend cpu"));
        assert_int_equal(count_char(err, '\n'), 1);
    }
}

/* The three parts of the CUDA backend (core and GEMMs, the elementwise family, attention and MoE)
 * together fill every entry BE_OP_ENTRIES requires, each entry from one part only: be_create would
 * otherwise refuse the backend on the GPU, naming the missing entry. */
static void cuda_parts_fill_the_contract(void **state)
{
    (void)state;
    struct be_ops parts[3];
    void (*fill[3])(struct be_ops *) = {cuda_fill_core, cuda_fill_elementwise, cuda_fill_attention_moe};
    struct be_ops all;
    memset(&all, 0, sizeof all);
    for (int k = 0; k < 3; k++) {
        memset(&parts[k], 0, sizeof parts[k]);
        fill[k](&parts[k]);
        fill[k](&all);
    }
    for (int e = 0; e < BE_OP_NENTRIES; e++) {
        if (strcmp(BE_OP_ENTRIES[e].name, "name") == 0) continue;
        int set = 0;
        for (int k = 0; k < 3; k++) set += *(void **)((char *)&parts[k] + BE_OP_ENTRIES[e].offset) != NULL;
        if (set > 1) fail_msg("entry %s is filled by %d parts of the CUDA backend", BE_OP_ENTRIES[e].name, set);
    }
    const char *missing = be_ops_missing(&all);
    if (missing) fail_msg("the CUDA backend leaves its required entry %s NULL", missing);
    /* an optional entry the backend implements (gemm.cu): the MoE grouped GEMM, not the wrapper's
     * one matmul a group (its numbers: test_gpu_backend on a GPU) */
    if (!parts[0].matmul_grouped_fwd || !parts[0].matmul_grouped_bwd)
        fail_msg("the CUDA backend's core leaves matmul_grouped_fwd/bwd NULL (--moe-grouped-gemm would run group by "
                 "group)");
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(device_for_rank), cmocka_unit_test(local_rank_from_launcher), cmocka_unit_test(auto_choice),
        cmocka_unit_test(oom_line),        cmocka_unit_test(tf32_flag),                cmocka_unit_test(backend_flag),
#ifdef TRIDENT_HAVE_CUDA
        cmocka_unit_test(cuda_error_lines),        cmocka_unit_test(cuda_parts_fill_the_contract),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
