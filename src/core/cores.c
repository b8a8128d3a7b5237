/* Cores: the affinity mask and the cgroup CPU quota (include/core/trident/cores.h). */
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "trident/cores.h"

double td_quota_cores(void)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[512], path[768], v1[512] = "", v2[512] = "";
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *ctl = strchr(line, ':'), *p = ctl ? strchr(ctl + 1, ':') : NULL;
        if (!p) continue;
        *p++ = 0, ctl++;
        if (*ctl == 0) snprintf(v2, sizeof v2, "%s", p);
        else if (strcmp(ctl, "cpu") == 0 || strncmp(ctl, "cpu,", 4) == 0 || strstr(ctl, ",cpu,") ||
                 (strlen(ctl) > 4 && strcmp(ctl + strlen(ctl) - 4, ",cpu") == 0))
            snprintf(v1, sizeof v1, "%s", p);
    }
    fclose(f);
    double best = 0;
    for (int v = 1; v <= 2; v++) {
        char cg[512];
        snprintf(cg, sizeof cg, "%s", v == 1 ? v1 : v2);
        if (v == 1 && !v1[0]) continue;
        if (v == 2 && !v2[0]) continue;
        for (;;) { /* this cgroup, then each parent up to the root */
            double q = -1, per = -1;
            if (v == 1) {
                snprintf(path, sizeof path, "/sys/fs/cgroup/cpu%s/cpu.cfs_quota_us", cg);
                FILE *a = fopen(path, "r");
                if (a && fscanf(a, "%lf", &q) != 1) q = -1;
                if (a) fclose(a);
                snprintf(path, sizeof path, "/sys/fs/cgroup/cpu%s/cpu.cfs_period_us", cg);
                FILE *b = fopen(path, "r");
                if (b && fscanf(b, "%lf", &per) != 1) per = -1;
                if (b) fclose(b);
            } else {
                snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", cg);
                FILE *a = fopen(path, "r");
                if (a && fscanf(a, "%lf %lf", &q, &per) != 2) q = -1; /* "max 100000": no quota */
                if (a) fclose(a);
            }
            if (q > 0 && per > 0 && (best == 0 || q / per < best)) best = q / per;
            char *slash = strrchr(cg, '/');
            if (!slash || cg[1] == 0) break;
            if (slash == cg) slash[1] = 0;
            else *slash = 0;
        }
    }
    return best;
}

double td_usable_cores(void)
{
    cpu_set_t set;
    double n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
    double q = td_quota_cores();
    return q > 0 && q < n ? q : n;
}
