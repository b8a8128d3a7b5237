/* src/train/shared_fs.c, which ranks share a folder, without a cluster: four "ranks" are four
 * threads of this process over a communicator written here (a barrier and shared slots), and each
 * thread has a working directory of its own (unshare(CLONE_FS)), its "node" folder. A relative
 * path then names another folder on each node, as a node-local disk mounted at one path does; an
 * absolute one names one folder for all (a shared filesystem). Held against what each layout of
 * nodes must give: the view leaders, the order in which the ranks open the data (one builder a
 * folder, alone, the others after it), and the --save check (silent on a shared folder, exit 2
 * naming the ranks that do not see rank 0's folder on a node-local one). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm/comm_impl.h"
#include "train/shared_fs.h"
#include "trident/check.h"

enum { N = 4 };

/* ---- a communicator of N threads ---- */
typedef struct {
    pthread_barrier_t bar;
    const void *slot[N]; /* each rank's buffer in the collective under way */
} threads_state;

static threads_state g_ts;

static void t_wait(void) { pthread_barrier_wait(&g_ts.bar); }
static void t_barrier(const comm *c) { (void)c, t_wait(); }

static void t_bcast(const comm *c, void *buf, size_t count, comm_dtype t, int root)
{
    g_ts.slot[c->rank] = buf;
    t_wait();
    if (c->rank != root) memcpy(buf, g_ts.slot[root], count * comm_dtype_size(t));
    t_wait();
}

static void t_allgather(const comm *c, const void *send, void *recv, size_t count, comm_dtype t)
{
    size_t b = count * comm_dtype_size(t);
    g_ts.slot[c->rank] = send;
    t_wait();
    for (int r = 0; r < N; r++) memcpy((char *)recv + (size_t)r * b, g_ts.slot[r], b);
    t_wait();
}

/* int32 only (what shared_fs.c reduces) */
static void t_allreduce(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op)
{
    if (t != COMM_I32) abort();
    int32_t out[16];
    if (count > 16) abort();
    g_ts.slot[c->rank] = buf;
    t_wait();
    for (size_t i = 0; i < count; i++) {
        int32_t v = ((const int32_t *)g_ts.slot[0])[i];
        for (int r = 1; r < N; r++) {
            int32_t x = ((const int32_t *)g_ts.slot[r])[i];
            v = op == COMM_MIN ? (x < v ? x : v) : op == COMM_MAX ? (x > v ? x : v) : v + x;
        }
        out[i] = v;
    }
    t_wait();
    memcpy(buf, out, count * sizeof *out);
}

static void t_abort(const comm *c, int code) { (void)c, exit(code); }

static const struct comm_ops THREAD_OPS = {
    .name = "threads", .abort = t_abort, .barrier = t_barrier, .bcast = t_bcast,
    .allreduce = t_allreduce, .allgather = t_allgather,
};

/* ---- the nodes ---- */
static char g_base[PATH_MAX]; /* this run's folder: node0..node3 and shared */

typedef struct {
    int rank;
    const int *node_of; /* (N) each rank's node: its working directory g_base/node<k> */
    void (*body)(comm *world, void *arg);
    void *arg;
} rank_args;

static void *rank_main(void *p)
{
    rank_args *a = p;
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/node%d", g_base, a->node_of[a->rank]);
    if (unshare(CLONE_FS) != 0 || chdir(dir) != 0) {
        fprintf(stderr, "rank %d: cannot enter %s: %s\n", a->rank, dir, strerror(errno));
        abort();
    }
    comm c = {0};
    c.ops = &THREAD_OPS, c.rank = a->rank, c.size = N;
    a->body(&c, a->arg);
    return NULL;
}

/* Runs body(world, arg) on N threads, rank r in node node_of[r]'s folder. */
static void run_ranks(const int node_of[N], void (*body)(comm *, void *), void *arg)
{
    pthread_t th[N];
    rank_args a[N];
    pthread_barrier_init(&g_ts.bar, NULL, N);
    for (int r = 0; r < N; r++) {
        a[r] = (rank_args){r, node_of, body, arg};
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &a[r]), 0);
    }
    for (int r = 0; r < N; r++) pthread_join(th[r], NULL);
    pthread_barrier_destroy(&g_ts.bar);
}

static void make_dir(const char *fmt, ...)
{
    char p[PATH_MAX + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p, sizeof p, fmt, ap);
    va_end(ap);
    assert_true(mkdir(p, 0755) == 0 || errno == EEXIST);
}

static int setup(void **st)
{
    (void)st;
    snprintf(g_base, sizeof g_base, "%s/shared_fs_%ld", TD_TEST_TMP, (long)getpid());
    make_dir("%s", TD_TEST_TMP);
    make_dir("%s", g_base);
    make_dir("%s/shared", g_base);
    for (int k = 0; k < N; k++) {
        make_dir("%s/node%d", g_base, k);
        make_dir("%s/node%d/cache", g_base, k);
    }
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_base);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- view leaders ---- */
typedef struct {
    const char *dir;
    int32_t leader[N];
} leaders;

static void leader_body(comm *world, void *arg)
{
    leaders *l = arg;
    l->leader[comm_rank(world)] = sfs_view_leader(world, l->dir);
}

static void expect_leaders(const int node_of[N], const char *dir, const int32_t want[N], const char *what)
{
    leaders l = {dir, {-9, -9, -9, -9}};
    run_ranks(node_of, leader_body, &l);
    printf("%s: leaders %d %d %d %d, want %d %d %d %d\n", what, l.leader[0], l.leader[1], l.leader[2], l.leader[3],
           want[0], want[1], want[2], want[3]);
    for (int r = 0; r < N; r++) assert_int_equal(l.leader[r], want[r]);
}

static void view_leaders(void **st)
{
    (void)st;
    static const int blocks[N] = {0, 0, 1, 1}, alternate[N] = {0, 1, 0, 1}, each[N] = {0, 1, 2, 3}, one[N] = {0, 0, 0, 0};
    char shared[PATH_MAX + 16];
    snprintf(shared, sizeof shared, "%s/shared", g_base);
    expect_leaders(blocks, "cache", (const int32_t[N]){0, 0, 2, 2}, "2 nodes, ranks 0-1 and 2-3, a node-local folder");
    expect_leaders(alternate, "cache", (const int32_t[N]){0, 1, 0, 1}, "2 nodes, ranks 0,2 and 1,3, a node-local folder");
    expect_leaders(each, "cache", (const int32_t[N]){0, 1, 2, 3}, "a node a rank, a node-local folder");
    expect_leaders(one, "cache", (const int32_t[N]){0, 0, 0, 0}, "one node");
    expect_leaders(blocks, shared, (const int32_t[N]){0, 0, 0, 0}, "2 nodes, a shared folder");
    expect_leaders(each, shared, (const int32_t[N]){0, 0, 0, 0}, "a node a rank, a shared folder");
    /* a folder not there yet is probed at its nearest existing parent: here each node's own */
    expect_leaders(blocks, "cache/not/yet", (const int32_t[N]){0, 0, 2, 2}, "2 nodes, a folder to be made");
    /* no probe file is left behind */
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "find '%s' -name '.trident-probe-*' | grep -q .", g_base);
    assert_int_not_equal(system(cmd), 0);
}

/* ---- the turns of sfs_open_data ---- */
typedef struct {
    const char *cache;
    int builder[N];  /* the rank found no "built" mark in its folder and made it */
    int overlap;     /* a rank opened while a builder of its folder was at work */
    pthread_mutex_t mu;
} opening;

typedef struct {
    opening *o;
    int rank;
} open_ctx;

static void open_data(void *p)
{
    open_ctx *c = p;
    char busy[2 * PATH_MAX], built[2 * PATH_MAX];
    snprintf(busy, sizeof busy, "%s/building", c->o->cache);
    snprintf(built, sizeof built, "%s/built", c->o->cache);
    int overlap = access(busy, F_OK) == 0; /* its builder is still at work */
    if (access(built, F_OK) != 0) {
        int fd = open(busy, O_WRONLY | O_CREAT | O_EXCL, 0644);
        overlap |= fd < 0; /* another builder at once */
        c->o->builder[c->rank] = 1;
        struct timespec ts = {0, 20 * 1000000L}; /* a build takes a while: a rank opening meanwhile is seen */
        nanosleep(&ts, NULL);
        close(open(built, O_WRONLY | O_CREAT, 0644));
        if (fd >= 0) close(fd), unlink(busy);
    }
    if (overlap) {
        pthread_mutex_lock(&c->o->mu);
        c->o->overlap = 1;
        pthread_mutex_unlock(&c->o->mu);
    }
}

static void open_body(comm *world, void *arg)
{
    opening *o = arg;
    gptds_config dc;
    memset(&dc, 0, sizeof dc);
    dc.n = 1;
    dc.cache_dir = (char *)o->cache;
    open_ctx c = {o, comm_rank(world)};
    sfs_open_data(world, &dc, open_data, &c);
}

static void expect_builders(const int node_of[N], const char *cache, const int want[N], const char *what)
{
    opening o = {cache, {0}, 0, PTHREAD_MUTEX_INITIALIZER};
    char cmd[2 * PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "rm -f '%s'/node*/cache/built '%s'/shared/built", g_base, g_base);
    assert_int_equal(system(cmd), 0);
    run_ranks(node_of, open_body, &o);
    printf("%s: builders %d %d %d %d, want %d %d %d %d; %s\n", what, o.builder[0], o.builder[1], o.builder[2],
           o.builder[3], want[0], want[1], want[2], want[3], o.overlap ? "a rank opened while its folder was being built" : "each builder alone");
    for (int r = 0; r < N; r++) assert_int_equal(o.builder[r], want[r]);
    assert_false(o.overlap);
}

static void open_turns(void **st)
{
    (void)st;
    static const int blocks[N] = {0, 0, 1, 1}, alternate[N] = {0, 1, 0, 1}, one[N] = {0, 0, 0, 0};
    char shared[PATH_MAX + 16];
    snprintf(shared, sizeof shared, "%s/shared", g_base);
    expect_builders(blocks, "cache", (const int[N]){1, 0, 1, 0}, "2 nodes, node-local caches");
    expect_builders(alternate, "cache", (const int[N]){1, 1, 0, 0}, "2 nodes alternating, node-local caches");
    expect_builders(one, "cache", (const int[N]){1, 0, 0, 0}, "one node");
    expect_builders(blocks, shared, (const int[N]){1, 0, 0, 0}, "2 nodes, a shared cache");
}

/* ---- the --save check ---- */
static void save_body(comm *world, void *arg) { sfs_check_save_dir(world, arg); }

/* The ranks here are threads of one process: each that finds the error exits (td_usage_error), and
 * exit() called by several threads at once is undefined (a run ended 255 instead of 2). The first
 * to get here ends the process at once; _exit is safe from any number of threads. */
static void exit_at_once(int code)
{
    fflush(stderr);
    _exit(code);
}

/* The exit status of the --save check of dir in a child process (the check exits the process on a
 * node-local folder); its stderr in err. */
static int save_check(const int node_of[N], const char *dir, char *err, size_t len)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        td_set_usage_hook(exit_at_once);
        run_ranks(node_of, save_body, (void *)dir);
        _exit(0);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t k;
    while (n + 1 < len && (k = read(fds[0], err + n, len - 1 - n)) > 0) n += (size_t)k;
    err[n] = 0;
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void save_dir(void **st)
{
    (void)st;
    static const int blocks[N] = {0, 0, 1, 1}, alternate[N] = {0, 1, 0, 1};
    char shared[PATH_MAX + 16], err[8192];
    snprintf(shared, sizeof shared, "%s/shared", g_base);
    assert_int_equal(save_check(blocks, shared, err, sizeof err), 0);
    assert_string_equal(err, "");
    int rc = save_check(blocks, "cache", err, sizeof err);
    printf("node-local --save, ranks 0-1 | 2-3: exit %d: %s", rc, err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "--save cache is not one folder for all ranks: "));
    assert_non_null(strstr(err, " (ranks 2-3) do not see the folder that rank 0 sees"));
    rc = save_check(alternate, "cache", err, sizeof err);
    printf("node-local --save, ranks 0,2 | 1,3: exit %d: %s", rc, err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, " (ranks 1,3) do not see the folder that rank 0 sees"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(view_leaders),
        cmocka_unit_test(open_turns),
        cmocka_unit_test(save_dir),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
