/* What --comm decides without a GPU, tested where there is none (src/backend/xfer.c, src/comm/comm.c):
 * the rule (backend, built with CUDA, libnccl loadable, ranks on the host, visible GPUs -> nccl or
 * the reason not), what auto, mpi and nccl then run, the reason lines, the flag on each command, the
 * refusal of --comm nccl where it cannot work (exit 2, one line), the launcher's local size, and
 * comm.c's handling of a device group (a twin): a group of one still goes to the implementation
 * (no host memmove of device pointers) and comm_alltoallv takes the implementation's own. The
 * twin itself runs on a GPU: tests/gpu/test_gpu_nccl.c. */
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
#include "backend/xfer.h"
#include "comm/comm_impl.h"
#ifdef TRIDENT_HAVE_CUDA
#include "comm/nccl_twin.h"
#endif
#include "trident/args.h"
#include "trident/check.h"

static comm *g_world;


/* The rule, row by row: each reason in the order it is looked for, then what each flag runs. */
static void rule_table(void **state)
{
    (void)state;
    static const struct {
        const char *backend;
        int cuda_built, loadable, local, devices;
        xfer_nccl_why why;
    } rows[] = {
        {"cuda", 1, 1, 1, 1, XFER_NCCL_OK},         /* the one-GPU machine */
        {"cuda", 1, 1, 8, 8, XFER_NCCL_OK},         /* a GPU each on an 8-GPU host */
        {"cuda", 1, 1, 4, 8, XFER_NCCL_OK},         /* fewer ranks than GPUs */
        {"cuda", 1, 1, 2, 1, XFER_NCCL_SHARED_GPU}, /* two ranks would share the GPU: NCCL refuses */
        {"cuda", 1, 1, 9, 8, XFER_NCCL_SHARED_GPU},
        {"cuda", 1, 1, 1, 0, XFER_NCCL_NO_GPU},
        {"cuda", 1, 0, 1, 1, XFER_NCCL_NO_LIB},
        {"cuda", 1, 0, 2, 1, XFER_NCCL_NO_LIB},     /* no library is said before the sharing */
        {"cpu", 1, 1, 1, 1, XFER_NCCL_CPU},
        {"cpu", 0, 0, 1, 0, XFER_NCCL_NO_CUDA},
        {"cuda", 0, 1, 1, 1, XFER_NCCL_NO_CUDA},    /* a build without CUDA has no NCCL, whatever else */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        xfer_nccl_why w = xfer_nccl_rule(rows[i].backend, rows[i].cuda_built, rows[i].loadable, rows[i].local,
                                         rows[i].devices);
        if (w != rows[i].why) fail_msg("row %zu: reason %d, expected %d", i, (int)w, (int)rows[i].why);
        assert_string_equal(xfer_comm_choice("auto", w), w == XFER_NCCL_OK ? "nccl" : "mpi");
        assert_string_equal(xfer_comm_choice("mpi", w), "mpi");
        if (w == XFER_NCCL_OK) assert_string_equal(xfer_comm_choice("nccl", w), "nccl");
        else assert_null(xfer_comm_choice("nccl", w));
    }
}

/* Each reason is one line naming what is wrong and what to do. */
static void reason_lines(void **state)
{
    (void)state;
    char m[1024];
    xfer_nccl_why_text(XFER_NCCL_SHARED_GPU, 4, 2, "", m, sizeof m);
    assert_non_null(strstr(m, "4 ranks on a host with 2 visible GPUs"));
    assert_non_null(strstr(m, "two ranks on one GPU"));
    assert_non_null(strstr(m, "--comm mpi"));
    xfer_nccl_why_text(XFER_NCCL_SHARED_GPU, 2, 1, "", m, sizeof m);
    assert_non_null(strstr(m, "2 ranks on a host with 1 visible GPU:"));
    xfer_nccl_why_text(XFER_NCCL_CPU, 1, 0, "", m, sizeof m);
    assert_non_null(strstr(m, "cpu backend"));
    assert_non_null(strstr(m, "--backend cuda"));
    xfer_nccl_why_text(XFER_NCCL_NO_CUDA, 1, 0, "", m, sizeof m);
    assert_non_null(strstr(m, "built without CUDA"));
    xfer_nccl_why_text(XFER_NCCL_NO_GPU, 1, 0, "", m, sizeof m);
    assert_non_null(strstr(m, "no GPU is visible"));
    xfer_nccl_why_text(XFER_NCCL_NO_LIB, 1, 1, "libnccl.so.2 does not open (x): install y", m, sizeof m);
    assert_string_equal(m, "libnccl.so.2 does not open (x): install y");
    for (int w = XFER_NCCL_OK; w <= XFER_NCCL_SHARED_GPU; w++) {
        xfer_nccl_why_text((xfer_nccl_why)w, 3, 1, "lib", m, sizeof m);
        assert_int_equal(count_char(m, '\n'), 0);
    }
}

/* The ranks of a host, from the launcher's variables in order; none (or no number): 1. */
static void local_size_from_launcher(void **state)
{
    (void)state;
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "MPI_LOCALNRANKS",
                                 "PMI_LOCAL_SIZE"};
    char *saved[4];
    for (int i = 0; i < 4; i++) {
        const char *v = getenv(vars[i]);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(vars[i]);
    }
    assert_int_equal(xfer_local_size(), 1);
    setenv("PMI_LOCAL_SIZE", "3", 1);
    assert_int_equal(xfer_local_size(), 3);
    setenv("SLURM_NTASKS_PER_NODE", "6", 1);
    assert_int_equal(xfer_local_size(), 6);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "x", 1); /* not a number: the next one */
    assert_int_equal(xfer_local_size(), 6);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "8", 1);
    assert_int_equal(xfer_local_size(), 8);
    for (int i = 0; i < 4; i++) {
        if (saved[i]) setenv(vars[i], saved[i], 1);
        else unsetenv(vars[i]);
        free(saved[i]);
    }
}

/* --comm on the commands that move device buffers (auto by default), not on the others. */
static void parse_comm_on_convert(void)
{
    td_args a;
    char *argv[] = {"convert", "--comm", "mpi", NULL};
    td_args_parse(&a, TD_CMD_CONVERT, "trident convert", 3, argv, 1);
}
static void parse_comm_bad(void)
{
    td_args a;
    char *argv[] = {"train", "--comm", "gloo", NULL};
    td_args_parse(&a, TD_CMD_TRAIN, "trident train", 3, argv, 1);
}

static void comm_flag(void **state)
{
    (void)state;
    static const unsigned cmds[] = {TD_CMD_TRAIN, TD_CMD_EVAL, TD_CMD_GENERATE, TD_CMD_SERVE};
    static const char *values[] = {"auto", "mpi", "nccl"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        td_args a;
        td_args_defaults(&a, cmds[i]);
        assert_string_equal(a.comm, "auto");
        td_args_free(&a);
        for (int v = 0; v < 3; v++) {
            char *argv[] = {"x", "--comm", (char *)values[v], NULL};
            assert_int_equal(td_args_parse(&a, cmds[i], "trident x", 3, argv, 1), 0);
            assert_string_equal(a.comm, values[v]);
            td_args_free(&a);
        }
    }
    char err[2048];
    assert_int_equal(run_in_child(parse_comm_on_convert, err, sizeof err), 2);
    assert_non_null(strstr(err, "--comm"));
    assert_int_equal(run_in_child(parse_comm_bad, err, sizeof err), 2);
    assert_non_null(strstr(err, "gloo"));
}

/* --comm nccl where it cannot work: exit 2 before any backend exists, one line naming why. */
static void choose_nccl_cpu(void) { be_comm_choose("nccl", "cpu", g_world); }
static void choose_nccl_cuda(void) { be_comm_choose("nccl", "cuda", g_world); }

static void nccl_refused(void **state)
{
    (void)state;
    char err[2048];
    assert_int_equal(run_in_child(choose_nccl_cpu, err, sizeof err), 2);
    assert_non_null(strstr(err, "--comm nccl: "));
    assert_non_null(strstr(err, be_have_cuda() ? "cpu backend" : "built without CUDA"));
    assert_int_equal(count_char(err, '\n'), 1);
    if (be_backend_devices("cuda") == 0) { /* here: no GPU (or no CUDA, or no libnccl) */
        assert_int_equal(run_in_child(choose_nccl_cuda, err, sizeof err), 2);
        assert_non_null(strstr(err, "--comm nccl: "));
        char why[512];
        const char *expect = !be_have_cuda()                         ? "built without CUDA"
                             : !comm_nccl_loadable(why, sizeof why) ? "libnccl.so.2"
                                                                    : "no GPU is visible";
        assert_non_null(strstr(err, expect));
        assert_int_equal(count_char(err, '\n'), 1);
    }
    /* auto and mpi never refuse: the cpu backend runs over MPI, directly */
    assert_int_equal(be_comm_choose("auto", "cpu", g_world), 0);
    assert_int_equal(xfer_comm_nccl(), 0);
    assert_int_equal(be_comm_choose("mpi", "cpu", g_world), 0);
    if (be_backend_devices("cuda") == 0) assert_int_equal(be_comm_choose("auto", "cuda", g_world), 0);
    backend *be = be_create("cpu", 1);
    assert_true(xfer_direct(be));
    assert_ptr_equal(xfer_comm(be, g_world), g_world); /* host memory: the group itself */
    int32_t send[3] = {7, -1, 9}, recv[3] = {0, 0, 0};
    xfer_allgather_to_host(be, g_world, send, recv, 3, COMM_I32);
    assert_memory_equal(send, recv, sizeof send);
    be_free(be);
    char why[512] = "";
    if (!be_have_cuda()) {
        assert_int_equal(comm_nccl_loadable(why, sizeof why), 0);
        assert_non_null(strstr(why, "built without CUDA"));
    }
}

/* ---- comm.c with a device group: a fake twin that records what reaches it ---- */
static int g_calls[4]; /* allgather, reduce_scatter, alltoallv, allreduce */

static void fake_allgather(const comm *c, const void *send, void *recv, size_t count, comm_dtype t)
{
    (void)c, (void)send, (void)recv, (void)count, (void)t;
    g_calls[0]++;
}
static void fake_reduce_scatter(const comm *c, const void *send, void *recv, size_t count, comm_dtype t, comm_op op)
{
    (void)c, (void)send, (void)recv, (void)count, (void)t, (void)op;
    g_calls[1]++;
}
static void fake_alltoallv(const comm *c, const void *send, const size_t *sc, const size_t *sd, void *recv,
                           const size_t *rc, const size_t *rd, comm_dtype t, int tag)
{
    (void)c, (void)send, (void)sc, (void)sd, (void)recv, (void)rc, (void)rd, (void)t, (void)tag;
    g_calls[2]++;
}
static void fake_allreduce(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op)
{
    (void)c, (void)buf, (void)count, (void)t, (void)op;
    g_calls[3]++;
}

static void device_group_of_one(void **state)
{
    (void)state;
    struct comm_ops ops = {.name = "fake", .device = 1, .allgather = fake_allgather,
                           .reduce_scatter = fake_reduce_scatter, .alltoallv = fake_alltoallv,
                           .allreduce = fake_allreduce};
    comm twin = {.ops = &ops, .rank = 0, .size = 1};
    comm_set_name(&twin, "tp");
    /* "device" pointers the host must not touch: comm.c would memmove them for a host group of one */
    char *send = (char *)(uintptr_t)0x10, *recv = (char *)(uintptr_t)0x20;
    comm_allgather(&twin, send, recv, 5, COMM_F32);
    comm_reduce_scatter(&twin, send, recv, 5, COMM_F32, COMM_SUM);
    size_t counts[1] = {5}, displs[1] = {0};
    comm_alltoallv(&twin, send, counts, displs, recv, counts, displs, COMM_F32, 3);
    comm_allreduce(&twin, recv, 5, COMM_F32, COMM_SUM);
    comm_allgather(&twin, send, recv, 0, COMM_F32); /* nothing to move: not called */
    assert_int_equal(g_calls[0], 1);
    assert_int_equal(g_calls[1], 1);
    assert_int_equal(g_calls[2], 1);
    assert_int_equal(g_calls[3], 1);
    assert_true(comm_is_device(&twin));
    /* a host group with a twin: comm_device picks it; without: the group itself */
    comm host = {.ops = g_world->ops, .rank = 0, .size = 1};
    assert_ptr_equal(comm_device(&host), &host);
    assert_false(comm_is_device(&host));
    host.twin = &twin;
    assert_ptr_equal(comm_device(&host), &twin);
    comm_set_name(&host, "dp"); /* the twin is named with its group */
    assert_string_equal(comm_name(&twin), "dp");
    /* the group's time includes its twin's (the device buffers' share) */
    twin.seconds = 0.25, host.seconds = 0.5, twin.busy = 1, host.busy = 2;
    assert_true(comm_seconds(&host) == 0.75);
    assert_true(comm_busy_seconds(&host) == 3);
    host.twin = NULL;
    /* and a host group of one still answers at once, copying on the host */
    int32_t a[2] = {1, 2}, b[2] = {0, 0};
    comm_allgather(g_world, a, b, 2, COMM_I32);
    assert_memory_equal(a, b, sizeof a);
}

#ifdef TRIDENT_HAVE_CUDA
/* The p2p twins' channels (nccl.c), on every ring size: every message between neighbours, both
 * ways, is on one channel that both its ends name, from its sender to its receiver; each rank's
 * lanes are distinct channels, four of them beyond two ranks (two with two); a message to itself
 * or to a rank that is no neighbour takes no channel. */
static void channels(void **state)
{
    (void)state;
    for (int n = 1; n <= 9; n++) {
        int nch = nccl_channels(n);
        assert_int_equal(nch, n == 1 ? 0 : n == 2 ? 2 : 2 * n);
        for (int me = 0; me < n; me++) {
            int seen[5] = {0}, lanes = 0;
            for (int k = 0; k < nch; k++) {
                int l = nccl_channel_lane(n, k, me);
                if (!l) continue;
                if (seen[l]++) fail_msg("n %d rank %d: lane %d on two channels", n, me, l);
                lanes++;
            }
            assert_int_equal(lanes, n == 1 ? 0 : n == 2 ? 2 : 4);
            assert_int_equal(nccl_lane(n, me, 1, me), 0);
            assert_int_equal(nccl_lane(n, me, 0, me), 0);
        }
        for (int a = 0; a < n; a++)
            for (int b = 0; b < n; b++) {
                int neighbours = a != b && (b == (a + 1) % n || a == (b + 1) % n);
                int ls = nccl_lane(n, a, 1, b), lr = nccl_lane(n, b, 0, a);
                if (!neighbours) {
                    if (ls || lr) fail_msg("n %d: %d to %d is no neighbours' message but takes lanes %d, %d", n, a, b, ls, lr);
                    continue;
                }
                int ks = -1, kr = -1;
                for (int k = 0; k < nch; k++) {
                    if (nccl_channel_lane(n, k, a) == ls) ks = k;
                    if (nccl_channel_lane(n, k, b) == lr) kr = k;
                }
                if (ks < 0 || ks != kr) fail_msg("n %d: %d to %d: the sender's channel %d, the receiver's %d", n, a, b, ks, kr);
                int from, to;
                nccl_channel_ends(n, ks, &from, &to);
                if (from != a || to != b) fail_msg("n %d: %d to %d on channel %d from %d to %d", n, a, b, ks, from, to);
            }
    }
}
#endif

int main(int argc, char **argv)
{
    g_world = comm_world_init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rule_table), cmocka_unit_test(reason_lines),  cmocka_unit_test(local_size_from_launcher),
        cmocka_unit_test(comm_flag),  cmocka_unit_test(nccl_refused), cmocka_unit_test(device_group_of_one),
#ifdef TRIDENT_HAVE_CUDA
        cmocka_unit_test(channels),
#endif
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    comm_world_finalize(g_world);
    return rc;
}
