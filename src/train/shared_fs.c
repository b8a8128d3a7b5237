/* Which ranks share a folder: see shared_fs.h.
 *
 * Why a probe file and not the folder's identity: st_dev and st_ino name a folder on one machine
 * only (two nodes' local disks can have the same device number and the same inode for the same
 * path), and a host name says nothing about mounts (containers and mount namespaces on one host
 * see different folders at one path; so do the emulated nodes of scripts/cluster.sh). A file one
 * rank writes and another opens by name is the question itself: "will a file I write here be
 * the one you read?". The name is new (host, pid, time and rank of the writer), so no cache of
 * a previous lookup can answer for it: an NFS client has no negative entry for a name it never
 * looked up and asks the server, which has the file since the writer closed it (close-to-open).
 * Should a rank still miss a file that is there, it only builds the caches of its own view too:
 * caches are written atomically (a temporary, then rename), so the cost is time, never a torn
 * file; and the --save check then refuses a folder that was shared, which says so and is safe. */
#include "shared_fs.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trident/check.h"

#define SFS_HOST 64
#define SFS_PATH 4096
#define SFS_FIND 1024 /* one rank's account of the checkpoint it found */
#define SFS_LIST 1024 /* hosts and ranks in a message */

/* Every rank's host name, SFS_HOST bytes each (td_xmalloc'ed). */
static char *gather_hosts(comm *world)
{
    char me[SFS_HOST] = {0};
    if (gethostname(me, sizeof me - 1) != 0) strcpy(me, "?");
    char *hosts = td_xcalloc((size_t)comm_size(world), SFS_HOST);
    comm_allgather(world, me, hosts, SFS_HOST, COMM_U8);
    return hosts;
}

/* Appends the ranks r with pick[r] on host h to out as "h (ranks 2-3)" or "h (ranks 0,2,5-6)". */
static size_t append_host_ranks(char *out, size_t len, size_t used, const char *hosts, int n, const char *h,
                                const int *pick)
{
    int count = 0;
    for (int r = 0; r < n; r++) count += pick[r] && strcmp(hosts + (size_t)r * SFS_HOST, h) == 0;
    used += (size_t)snprintf(out + used, used < len ? len - used : 0, "%s%s (rank%s ", used ? ", " : "", h,
                             count == 1 ? "" : "s");
    int first = 1;
    for (int r = 0; r < n; r++) {
        if (!pick[r] || strcmp(hosts + (size_t)r * SFS_HOST, h) != 0) continue;
        int e = r;
        while (e + 1 < n && pick[e + 1] && strcmp(hosts + (size_t)(e + 1) * SFS_HOST, h) == 0) e++;
        used += (size_t)snprintf(out + used, used < len ? len - used : 0, e > r ? "%s%d-%d" : "%s%d", first ? "" : ",",
                                 r, e);
        first = 0;
        r = e;
    }
    used += (size_t)snprintf(out + used, used < len ? len - used : 0, ")");
    return used;
}

/* The ranks r with pick[r], grouped by host in order of first appearance: "node2 (ranks 2-3),
 * node3 (rank 4)"; a list longer than the room ends in "...". */
static void list_ranks(char *out, size_t len, const char *hosts, int n, const int *pick)
{
    size_t used = 0;
    out[0] = 0;
    for (int r = 0; r < n; r++) {
        const char *h = hosts + (size_t)r * SFS_HOST;
        int seen = 0;
        for (int q = 0; q < r && !seen; q++) seen = pick[q] && strcmp(hosts + (size_t)q * SFS_HOST, h) == 0;
        if (!pick[r] || seen) continue;
        used = append_host_ranks(out, len, used, hosts, n, h, pick);
        if (used >= len) {
            memcpy(out + len - 4, "...", 4);
            return;
        }
    }
}

/* `dir` if it is a folder, else its nearest existing parent ("." for a relative path none of
 * whose parents exists). */
static void existing_folder(const char *dir, char *out, size_t len)
{
    snprintf(out, len, "%s", dir);
    struct stat st;
    while (stat(out, &st) != 0 || !S_ISDIR(st.st_mode)) {
        char *slash = strrchr(out, '/');
        if (!slash) {
            snprintf(out, len, ".");
            return;
        }
        if (slash == out) {
            out[1] = 0;
            return;
        }
        *slash = 0;
    }
}

/* Writes a probe file of a new name into `dir` (or its nearest existing parent); its path is
 * also its content. 0 with path set, or -1 (path ""). */
static int probe_write(const char *dir, int rank, char path[SFS_PATH])
{
    char folder[SFS_PATH], host[SFS_HOST] = "host";
    existing_folder(dir, folder, sizeof folder);
    gethostname(host, sizeof host - 1);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int k = snprintf(path, SFS_PATH, "%s/.trident-probe-%s-%ld-%lld%09ld-r%d", folder, host, (long)getpid(),
                     (long long)ts.tv_sec, ts.tv_nsec, rank);
    int fd = k > 0 && k < SFS_PATH ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644) : -1;
    if (fd >= 0) {
        int ok = write(fd, path, (size_t)k) == k;
        if (close(fd) == 0 && ok) return 0;
        unlink(path);
    }
    path[0] = 0;
    return -1;
}

/* Whether the file at path holds its own path (a probe written by probe_write). */
static int probe_sees(const char *path)
{
    char got[SFS_PATH];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, got, sizeof got - 1);
    close(fd);
    if (n < 0) return 0;
    got[n] = 0;
    return strcmp(got, path) == 0;
}

/* One probe of `dir` by `root`: 1 when this rank sees root's probe (root: it wrote one), 0 when
 * not, -1 on every rank when root could not write one. */
static int probe_round(comm *world, const char *dir, int root)
{
    char path[SFS_PATH] = "";
    int rank = comm_rank(world);
    if (rank == root) probe_write(dir, rank, path);
    comm_bcast(world, path, sizeof path, COMM_U8, root);
    if (!path[0]) return -1;
    int sees = rank == root || probe_sees(path);
    comm_barrier(world); /* every rank has looked */
    if (rank == root) unlink(path);
    return sees;
}

int sfs_view_leader(comm *world, const char *dir)
{
    int rank = comm_rank(world), leader = -1;
    if (comm_size(world) == 1) return 0;
    for (;;) {
        int32_t next = leader < 0 ? rank : INT32_MAX; /* the lowest rank without a leader probes */
        comm_allreduce(world, &next, 1, COMM_I32, COMM_MIN);
        if (next == INT32_MAX) return leader;
        int sees = probe_round(world, dir, next);
        if (leader < 0 && (rank == next || sees == 1)) leader = next;
    }
}

/* The distinct index-cache folders of dc (td_xmalloc'ed strings); *n of them. */
static char **cache_dirs(const gptds_config *dc, int *n)
{
    char **dirs = td_xcalloc((size_t)dc->n, sizeof *dirs);
    *n = 0;
    for (int i = 0; i < dc->n; i++) {
        char *d = gptds_cache_dir(dc, i);
        int dup = !d;
        for (int j = 0; j < *n && !dup; j++) dup = strcmp(dirs[j], d) == 0;
        if (dup) free(d);
        else dirs[(*n)++] = d;
    }
    return dirs;
}

/* Rank 0's line on how the folder `dir` is shared: view[r] is rank r's view leader. */
static void say_views(const char *dir, const int32_t *view, const char *hosts, int n)
{
    int *lead = td_xcalloc((size_t)n, sizeof *lead), views = 0;
    for (int r = 0; r < n; r++) views += lead[r] = view[r] == r;
    char who[SFS_LIST];
    list_ranks(who, sizeof who, hosts, n, lead);
    if (views == 1)
        TD_DEBUG("index caches in %s: one folder for all %d ranks (a shared filesystem): rank 0 builds what is "
                 "missing, then the others read it", dir, n);
    else
        TD_INFO("index caches in %s: %d separate folders at this path (node-local): %s build what is missing, each "
                "for the ranks that see its folder, then the others read it", dir, views, who);
    free(lead);
}

/* How many turns the ranks open in, and (*mine) this rank's: the first turn in which no rank
 * before it has taken a folder it shares with it that is not built yet. view[r * nd + d]: rank
 * r's view leader of folder d. */
static int count_turns(const int32_t *view, int n, int nd, int rank, int *mine)
{
    int *built = td_xcalloc((size_t)n * nd, sizeof *built), *taken = td_xcalloc((size_t)n * nd, sizeof *taken);
    int *turn = td_xmalloc((size_t)n * sizeof *turn);
    for (int r = 0; r < n; r++) turn[r] = -1;
    int t = 0;
    for (int left = n; left > 0; t++) {
        memset(taken, 0, (size_t)n * nd * sizeof *taken);
        for (int r = 0; r < n; r++) {
            if (turn[r] >= 0) continue;
            int free_ = 1;
            for (int d = 0; d < nd; d++) free_ &= built[d * n + view[r * nd + d]] || !taken[d * n + view[r * nd + d]];
            if (!free_) continue;
            for (int d = 0; d < nd; d++) taken[d * n + view[r * nd + d]] = 1;
            turn[r] = t, left--;
        }
        for (int r = 0; r < n; r++)
            if (turn[r] == t)
                for (int d = 0; d < nd; d++) built[d * n + view[r * nd + d]] = 1;
    }
    *mine = turn[rank];
    free(built), free(taken), free(turn);
    return t;
}

void sfs_open_data(comm *world, const gptds_config *dc, void (*open)(void *ctx), void *ctx)
{
    int n = comm_size(world), rank = comm_rank(world), nd = 0;
    char **dirs = n > 1 ? cache_dirs(dc, &nd) : NULL;
    if (nd == 0) { /* one rank, or nothing written: every rank opens at once */
        free(dirs);
        open(ctx);
        return;
    }
    int32_t *mine = td_xmalloc((size_t)nd * sizeof *mine), *view = td_xmalloc((size_t)n * nd * sizeof *view);
    for (int d = 0; d < nd; d++) mine[d] = sfs_view_leader(world, dirs[d]);
    comm_allgather(world, mine, view, (size_t)nd, COMM_I32);
    if (rank == 0) {
        char *hosts = gather_hosts(world);
        int32_t *col = td_xmalloc((size_t)n * sizeof *col);
        for (int d = 0; d < nd; d++) {
            for (int r = 0; r < n; r++) col[r] = view[r * nd + d];
            say_views(dirs[d], col, hosts, n);
        }
        free(col), free(hosts);
    } else {
        free(gather_hosts(world));
    }
    int me, turns = count_turns(view, n, nd, rank, &me);
    for (int t = 0; t < turns; t++) {
        if (t == me) open(ctx);
        comm_barrier(world); /* the builders of this turn are done */
    }
    for (int d = 0; d < nd; d++) free(dirs[d]);
    free(dirs), free(mine), free(view);
}

/* Gathers every rank's flag `bad`: 1 when some rank has it, with `who` listing the hosts and
 * ranks that have it and host0 rank 0's host (the same on every rank), else 0. */
static int who_has(comm *world, int bad, char *who, size_t len, char host0[SFS_HOST])
{
    int n = comm_size(world);
    int32_t me = bad, *all = td_xmalloc((size_t)n * sizeof *all);
    comm_allgather(world, &me, all, 1, COMM_I32);
    char *hosts = gather_hosts(world);
    int *pick = td_xmalloc((size_t)n * sizeof *pick), any = 0;
    for (int r = 0; r < n; r++) any |= pick[r] = all[r] != 0;
    list_ranks(who, len, hosts, n, pick);
    memcpy(host0, hosts, SFS_HOST);
    free(all), free(hosts), free(pick);
    return any;
}

void sfs_check_save_dir(comm *world, const char *dir)
{
    if (comm_size(world) == 1) return;
    int sees = probe_round(world, dir, 0);
    if (sees < 0) return; /* rank 0 cannot write there: the save says so */
    char who[SFS_LIST], host0[SFS_HOST];
    if (who_has(world, !sees, who, sizeof who, host0)) /* every rank: rank 0 prints, all exit 2 */
        td_usage_error("--save %s is not one folder for all ranks: %s do not see the folder that rank 0 sees on %s "
                       "(a file rank 0 wrote into it did not appear for them), so each node would hold its own part "
                       "of every checkpoint. Give --save a folder on a filesystem that every node mounts (the shared "
                       "home, NFS, Lustre), not a node-local disk", dir, who, host0);
}

void sfs_check_same_checkpoint(comm *world, const char *dir, int rc, const ckpt_meta *meta)
{
    if (comm_size(world) == 1) return;
    char mine[SFS_FIND], first[SFS_FIND], other[SFS_FIND];
    if (rc == 0)
        snprintf(mine, sizeof mine, "iteration %lld in %s (run %s)", (long long)meta->progress.iteration, meta->dir,
                 meta->progress.run_id[0] ? meta->progress.run_id : "without id");
    else
        snprintf(mine, sizeof mine, "no checkpoint");
    memcpy(first, mine, sizeof first);
    comm_bcast(world, first, sizeof first, COMM_U8, 0);
    int differs = strcmp(mine, first) != 0;
    char who[SFS_LIST], host0[SFS_HOST];
    if (!who_has(world, differs, who, sizeof who, host0)) return;
    int32_t odd = differs ? comm_rank(world) : INT32_MAX; /* the first rank that differs tells what it finds */
    comm_allreduce(world, &odd, 1, COMM_I32, COMM_MIN);
    memcpy(other, mine, sizeof other);
    comm_bcast(world, other, sizeof other, COMM_U8, odd);
    td_usage_error("--load %s shows the ranks different checkpoints: rank 0 on %s finds %s, but %s do not (rank %d "
                   "finds %s), so the ranks would start from different states. Give --load a folder on a filesystem "
                   "that every node mounts (the shared home, NFS, Lustre), or the same copy on every node",
                   dir, host0, first, who, (int)odd, other);
}
