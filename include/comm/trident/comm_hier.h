/* Hierarchical collectives: a view of a flat group whose ranks sit on several hosts, several on
 * each, that sums inside each host first, crosses the network once per "rail" (local rank i of
 * every host with local rank i of the others, so every rank's link carries 1/k of the data), and
 * spreads the result inside the host again. Same calls and same results (up to the order of
 * float sums) as the flat group: reduce-scatter and all-gather leave rank r with piece r exactly
 * as the flat group does, so shards and checkpoints do not change. */
#ifndef TRIDENT_COMM_HIER_H
#define TRIDENT_COMM_HIER_H

#include "trident/comm.h"

/* The host this rank sits on (gethostname), written to `out` (len bytes). --fake-hosts N
 * (td_debug_get()->fake_hosts, tests on one machine) makes the ranks of the world believe they
 * sit on N hosts, consecutive world ranks sharing one ("test-host-0", ...). */
void comm_host_name(int world_rank, int world_size, char *out, size_t len);

/* Collective over flat: a hierarchical view of flat, or NULL when flat is all there is (the group
 * does not span two hosts, no host holds two of its ranks, or the hosts hold unequal numbers of
 * its ranks; or flat has an NCCL twin: NCCL takes its own rings and trees). `host` is this rank's host (comm_host_name). flat must outlive the view; every
 * request of the view must be waited before comm_free. */
comm *comm_hier_create(const comm *flat, const char *host);
/* Hosts the view spans and ranks per host (*nodes = 1, *per_node = size for a flat group). */
void comm_hier_shape(const comm *c, int *nodes, int *per_node);

#endif
