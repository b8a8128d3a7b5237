/* libFuzzer harness: `trident plan --cluster FILE.json` on arbitrary bytes. A file it accepts has
 * every field in range (a cluster the model can run on: positive devices, whole numbers of nodes,
 * memory above what the framework reserves, bandwidths, an efficiency in (0, 1]) and no key it
 * does not know; a refusal always says why; nothing may crash or read out of bounds. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "trident/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/fuzz_plan_cluster.%ld.json", dir ? dir : "/tmp", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    plan_cluster c;
    char err[512] = "";
    if (plan_cluster_load(path, &c, err, sizeof err) == 0) {
        if (c.gpus_per_node < 1 || c.nodes < 0 || c.cores_per_node < 0 || !(c.mem_gib > 0) || !(c.hbm_bw > 0) || !(c.intra_bw > 0) || !(c.inter_bw > 0) ||
            !(c.gemm_emax > 0 && c.gemm_emax <= 1) || !(c.mem_reserved_gib < c.mem_gib))
            abort();
        free(plan_cluster_json(&c));
    } else if (err[0] == '\0') {
        abort();
    }
    unlink(path);
    return 0;
}
