/* Cores. How many cores this process may use: its affinity mask and its cgroup's CPU quota. */
#ifndef TRIDENT_CORES_H
#define TRIDENT_CORES_H

/* The CPU quota of this process's cgroup and its ancestors in cores (cgroup v2 cpu.max, v1
 * cpu.cfs_quota_us / cpu.cfs_period_us), the smallest; 0 when there is none. */
double td_quota_cores(void);
/* The cores this process may run on: its affinity mask, under its cgroup's CPU quota. */
double td_usable_cores(void);

#endif
