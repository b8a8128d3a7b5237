/* What the device backends decide without a device: which device a rank takes, what --backend
 * auto runs, and the out-of-memory line. Pure functions (and the launcher's environment), so
 * they are tested on machines without a GPU (tests/unit/test_cuda_host.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

int be_local_rank(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID",
                                 "PMI_LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (!v || !*v) continue;
        char *end;
        long r = strtol(v, &end, 10);
        if (*end == 0 && r >= 0 && r < (1L << 30)) return (int)r;
    }
    return 0;
}

int be_device_for_rank(int local, int ndev)
{
    if (ndev < 1) return -1;
    return (local < 0 ? 0 : local) % ndev;
}

const char *be_auto_choice(int cuda_built, int cuda_devices)
{
    return cuda_built && cuda_devices > 0 ? "cuda" : "cpu";
}

/* "1.50 GiB", "512 MiB", "123 bytes". */
static void human(char *out, size_t len, size_t b)
{
    if (b >= ((size_t)1 << 30)) snprintf(out, len, "%.2f GiB", (double)b / (double)((size_t)1 << 30));
    else if (b >= ((size_t)1 << 20)) snprintf(out, len, "%.1f MiB", (double)b / (double)((size_t)1 << 20));
    else snprintf(out, len, "%zu bytes", b);
}

void be_oom_message(char *out, size_t len, const char *what, size_t asked, size_t free_b, size_t total_b)
{
    char a[48] = "", f[32], t[32];
    if (asked) { /* 0: not known (a library's own allocation) */
        human(a, sizeof a, asked);
        strcat(a, " asked, ");
    }
    human(f, sizeof f, free_b);
    human(t, sizeof t, total_b);
    snprintf(out, len,
             "out of device memory %s: %s%s free of %s; to need less: --recompute-granularity selective "
             "(or full), --use-distributed-optimizer, a smaller --micro-batch-size, or more "
             "--tensor-model-parallel-size / --pipeline-model-parallel-size ranks (trident plan --explain "
             "predicts the memory of a layout)",
             what && *what ? what : "allocating", a, f, t);
}
