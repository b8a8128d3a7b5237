/* Faults and fakes for tests and drills, in one place: set by the command line's debug flags
 * (td_debug_from_args: --fake-hosts, --debug-*) or by a unit test (td_debug_set), read by the
 * code paths they steer. All off by default; nothing here or there reads the environment. */
#ifndef TRIDENT_DEBUG_H
#define TRIDENT_DEBUG_H

#include <stdint.h>

#include "trident/args.h"

typedef struct td_debug {
    int fake_hosts;         /* > 0: the ranks believe they sit on that many hosts, consecutive ranks
                             * together (hierarchical collectives and calibration on one machine) */
    int comm_staged;        /* 1: the backend stages every buffer that crosses comm through host
                             * memory and its events pass late (as a device backend without a
                             * CUDA-aware MPI; xfer.h, overlap.h) */
    int save_delay_ms;      /* > 0: a checkpoint save pauses that long after each shard and before
                             * its renames (a save in progress, long enough to interrupt) */
    int64_t overflow_iter;  /* > 0: at that training iteration the last rank finds an Inf in one
                             * gradient (a loss-scale overflow, as fp16 meets one) */
    int watch_only_rank;    /* >= 0: only that world rank watches the peers of its node, as if
                             * every other rank were alone on its node; -1: every rank watches */
} td_debug;

/* What is set (all off before any td_debug_set). */
const td_debug *td_debug_get(void);
/* Sets them, for the process; before the code that reads them runs (comm_world_init reads
 * watch_only_rank, hosts are named when groups form). */
void td_debug_set(const td_debug *d);
/* Sets them from a command's parsed debug flags (those the command does not take stay off). */
void td_debug_from_args(const td_args *a);

#endif
