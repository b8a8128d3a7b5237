/* Private to src/train: which ranks share a folder (src/train/shared_fs.c; docs/cluster.md,
 * "Filesystems"). On a cluster one path can name one folder every rank sees (the shared home,
 * NFS, Lustre) or one folder per node (a node-local disk mounted at the same path). The run asks
 * the filesystem itself: one rank writes a probe file of a name no process has used before, and
 * every rank looks for it by that name. Used for the index caches of the data (built once per
 * folder, never by two ranks into one file at once), the --save folder (refused unless every rank
 * sees rank 0's) and --load (every rank must find the same checkpoint). Every function here is
 * collective over `world` (every rank calls it with the same arguments) and returns at once when
 * the world is one rank. */
#ifndef TRIDENT_SHARED_FS_H
#define TRIDENT_SHARED_FS_H

#include "trident/checkpoint.h"
#include "trident/comm.h"
#include "trident/gpt_dataset.h"

/* The lowest world rank that sees the same folder `dir` as this rank (this rank itself when no
 * lower rank does, or when `dir` cannot hold a probe file where its lowest rank looks: then the
 * rank writes nothing there that another could see). A `dir` that does not exist yet is probed at
 * its nearest existing parent. One probe round per distinct folder. */
int sfs_view_leader(comm *world, const char *dir);

/* Calls open(ctx) once on every rank, in turns such that each index-cache folder of `dc` (beside
 * each dataset, or --data-cache-path; none with --no-data-cache) is first opened by one rank of
 * the ranks that see it, while no other rank that sees it opens, and the others open after it
 * (they read what it built). A world barrier ends each turn (bounded by the distributed
 * timeout). Rank 0 says how each folder is shared: at info level when some folder is node-local,
 * at debug level when every folder is one for all. */
void sfs_open_data(comm *world, const gptds_config *dc, void (*open)(void *ctx), void *ctx);

/* Ends the job (exit 2, one line from rank 0) when some rank does not see the --save folder
 * `dir` that rank 0 sees (rank 0 has created it: run_lock_save_dir); the line names the hosts
 * and ranks that do not see it and says to use a shared filesystem. Does nothing when rank 0
 * cannot write a probe there (the save itself reports that). */
void sfs_check_save_dir(comm *world, const char *dir);

/* Ends the job (exit 2, one line from rank 0) unless every rank found the same checkpoint in
 * --load `dir`: ckpt_find's result `rc` and, when rc is 0, meta's iteration folder, iteration
 * and run id. The line names rank 0's find, the hosts and ranks that found otherwise, and what
 * the first of them found. */
void sfs_check_same_checkpoint(comm *world, const char *dir, int rc, const ckpt_meta *meta);

#endif
