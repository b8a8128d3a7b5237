/* How an MPI job ends when a rank, a node or the network fails: never a hang.
 *
 * A dead peer on this node. When a rank dies or exits non-zero (MPI_Abort too), Open MPI 4.1's
 * mpirun (and each orted, for its node) sends the other ranks SIGCONT, sleeps
 * odls_base_sigkill_timeout seconds, sends SIGTERM, sleeps as long again and sends SIGKILL:
 * whatever the ranks do, the job ends after twice the timeout (119 s under the documented 60).
 * Its sleep(3) returns early on a signal with the unslept whole seconds, which it sleeps again:
 * each SIGCHLD it receives shortens it by about a second. So a rank that fails, or finds a peer
 * on its node dead (it polls while it waits on a communication) and says so, leaves a process
 * sending its launcher SIGCHLD every 10 ms (fault_kick_launcher). Each rank watches the peers of
 * its own node only (/proc), and only those it could see at start (same pid namespace, same start
 * time); the ranks of other nodes hear of it from the first rank that found it, on a
 * communicator of its own ("rank r is gone").
 *
 * A node lost. Across a network a killed, stalled or cut-off node is not reported: the wait just
 * goes on until the distributed timeout. The rank whose wait times out then calls the roll: it
 * asks every rank whether it is there; the others answer from their own waits and, knowing the
 * job ends, call the roll too. The lowest rank that answered prints one line naming the wait that
 * timed out and the ranks that did not answer, by host, and tells the others, which end quietly.
 * mpirun then waits, forever, on the daemon of a node it cannot reach: the process this rank
 * leaves behind ends the launcher once its own grace is over (it is the rank's parent: mpirun on
 * its node, orted on the others), and a rank whose abort does not return ends itself. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm_impl.h"
#include "mpi_fault.h"
#include "trident/check.h"
#include "trident/debug.h"
#include "trident/timer.h"

typedef struct {
    int32_t pid;
    int64_t start; /* start time, clock ticks after boot (/proc/PID/stat field 22): tells a reused pid */
    char host[64];
} peer_id;
static peer_id *g_peers;          /* by world rank */
static unsigned char *g_watched;  /* the peers this rank can see die */
static int g_npeers, g_me = -1;
static MPI_Comm g_alarm = MPI_COMM_NULL;           /* a copy of the world for the word between ranks */
static MPI_Request g_alarm_req = MPI_REQUEST_NULL; /* the receive of "rank r is gone", always posted */
static int32_t g_alarm_in; /* the rank it names; npeers * code + r: rank r ended with code, saying why */
#define ALARM_TAG 7
#define PING_TAG 8 /* a roll call: "are you there?", with the wait that timed out */
#define PONG_TAG 9 /* "here" */

typedef struct {
    int32_t rank;    /* the world rank whose wait timed out */
    int32_t line;    /* where it waited */
    char file[64];
    char call[48];   /* its MPI call */
    char what[400];  /* what timed out, as it would say it */
} ping_msg;
static ping_msg g_ping_in, g_ping_first, g_ping_out;
static MPI_Request g_ping_req = MPI_REQUEST_NULL; /* the receive of a roll call, always posted */
static int g_pinged;                              /* a roll call came: g_ping_first holds it */
static int g_relay_rank = -1; /* fault_timed_out called for g_ping_first: the world rank whose wait timed out */
static const int32_t g_pong = 1;

/* Start time and state letter of process pid from /proc; -1 when there is none.
 * Async-signal-safe (the launcher's watcher calls it in a child forked from a signal handler). */
static int64_t proc_start(int pid, char *state)
{
    char path[64] = "/proc/", buf[1024];
    int n = 6;
    char digits[16];
    int d = 0;
    for (unsigned v = (unsigned)pid; d == 0 || v; v /= 10) digits[d++] = (char)('0' + v % 10);
    while (d) path[n++] = digits[--d];
    memcpy(path + n, "/stat", 6);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (got <= 0) return -1;
    buf[got] = 0;
    char *s = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    if (!s || s[1] != ' ') return -1;
    *state = s[2];
    for (int field = 3; field < 22; field++) {
        s = strchr(s + 1, ' ');
        if (!s) return -1;
    }
    int64_t t = 0;
    for (s++; *s >= '0' && *s <= '9'; s++) t = 10 * t + (*s - '0');
    return t;
}

void fault_init(MPI_Comm world, int rank, int size)
{
    peer_id me = {.pid = (int32_t)getpid()};
    char st;
    me.start = proc_start(me.pid, &st);
    if (gethostname(me.host, sizeof me.host - 1) != 0) strcpy(me.host, "?");
    g_peers = td_xcalloc((size_t)size, sizeof *g_peers);
    g_watched = td_xcalloc((size_t)size, 1);
    g_npeers = size;
    g_me = rank;
    if (MPI_Allgather(&me, sizeof me, MPI_BYTE, g_peers, sizeof me, MPI_BYTE, world) != MPI_SUCCESS)
        td_die(__FILE__, __LINE__, "MPI_Allgather", "a peer rank may have died; see the first error above",
               "the ranks could not exchange their pids and hosts at start");
    for (int r = 0; r < size; r++)
        g_watched[r] = r != rank && me.start >= 0 && strcmp(g_peers[r].host, me.host) == 0 &&
                       proc_start(g_peers[r].pid, &st) == g_peers[r].start;
    /* --debug-watch-only-rank: only that world rank watches, as if every other rank were on another node */
    int only = td_debug_get()->watch_only_rank;
    if (only >= 0 && only != rank) memset(g_watched, 0, (size_t)size);
    if (MPI_Comm_dup(world, &g_alarm) != MPI_SUCCESS ||
        MPI_Comm_set_errhandler(g_alarm, MPI_ERRORS_RETURN) != MPI_SUCCESS ||
        MPI_Irecv(&g_alarm_in, 1, MPI_INT32_T, MPI_ANY_SOURCE, ALARM_TAG, g_alarm, &g_alarm_req) != MPI_SUCCESS ||
        MPI_Irecv(&g_ping_in, sizeof g_ping_in, MPI_BYTE, MPI_ANY_SOURCE, PING_TAG, g_alarm, &g_ping_req) != MPI_SUCCESS)
        td_die(__FILE__, __LINE__, "MPI_Comm_dup", "a peer rank may have died; see the first error above",
               "could not set up the communicator the ranks report failures on");
}

static void withdraw(MPI_Request *q)
{
    if (*q == MPI_REQUEST_NULL) return;
    MPI_Cancel(q);
    MPI_Wait(q, MPI_STATUS_IGNORE);
}

void fault_close(void)
{
    withdraw(&g_alarm_req);
    withdraw(&g_ping_req);
    if (g_alarm != MPI_COMM_NULL) MPI_Comm_free(&g_alarm);
    free(g_peers);
    free(g_watched);
    g_peers = NULL;
    g_watched = NULL;
    g_npeers = 0;
}

/* The world rank of a watched peer that is gone (exited, killed, a zombie; looked for in /proc
 * when `full`) or of one another rank says is gone (*heard 1, or 2 + its exit code when it
 * ended on an error it reported), or -1. */
static int dead_peer(int full, int *heard)
{
    *heard = 0;
    int done = 0;
    if (g_alarm_req != MPI_REQUEST_NULL && MPI_Test(&g_alarm_req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done &&
        g_alarm_in >= 0) {
        *heard = g_alarm_in < g_npeers ? 1 : 2 + g_alarm_in / g_npeers;
        return g_alarm_in % g_npeers;
    }
    for (int r = 0; full && r < g_npeers; r++) {
        if (!g_watched[r]) continue;
        char st = '?';
        int64_t start = proc_start(g_peers[r].pid, &st);
        if (start != g_peers[r].start || st == 'Z' || st == 'X') return r;
    }
    return -1;
}

/* ---- the launcher ---- */

/* Seconds mpirun waits before each of its SIGTERM and SIGKILL (odls_base_sigkill_timeout). */
static double launcher_kill_timeout(void)
{
    const char *v = getenv("OMPI_MCA_odls_base_sigkill_timeout");
    return v && *v ? atof(v) : 1;
}

/* A sanitizer build's ranks end slowly (the leak check at exit walks every allocation: seconds a
 * rank under load), so a launcher still waiting on them after the grace is slow, not stuck: the
 * watcher gives it ten times as long there (make asan: flag errors under mpirun -np 2 ended 137,
 * their launcher killed while the ranks still ended). */
#if defined(__SANITIZE_ADDRESS__)
#define SLOW_BUILD 10
#else
#define SLOW_BUILD 1
#endif

static int g_kick_launcher;        /* started by Open MPI's mpirun or orted: the watcher works */
static pid_t g_launcher;           /* it, and its start time (a reused pid is not it) */
static int64_t g_launcher_start;
static long g_kick_polls;          /* the watcher's 10 ms kicks: twice the launcher's timeout, and 5 s */
static long g_max_fd;              /* the files its child closes */
static volatile sig_atomic_t g_launcher_ending; /* SIGCONT came: how mpirun starts ending a job */

static void on_sigcont(int sig)
{
    (void)sig;
    g_launcher_ending = 1;
}

int fault_launcher_ending(void) { return g_launcher_ending; }

/* Whether Open MPI's mpirun or orted started this process: read before MPI_Init, which in a
 * process started alone starts an orted of its own and sets the same variables. */
static int under_open_mpi_launcher(void)
{
    static int launched = -1;
    if (launched < 0) launched = getenv("OMPI_MCA_orte_hnp_uri") != NULL;
    return launched;
}

void fault_kick_setup(void)
{
    int first = g_launcher == 0;
    g_kick_launcher = under_open_mpi_launcher();
    double t = launcher_kill_timeout();
    g_kick_polls = (long)((2 * t + 5) * 100 * SLOW_BUILD);
    g_max_fd = sysconf(_SC_OPEN_MAX);
    if (g_max_fd <= 0 || g_max_fd > 65536) g_max_fd = 65536;
    if (first && g_kick_launcher) {
        char st;
        g_launcher = getppid();
        g_launcher_start = proc_start(g_launcher, &st);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigcont;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGCONT, &sa, NULL);
    }
}

/* The watcher holds none of the rank's files (the launcher waits for their end), lives in a
 * session of its own (the launcher's SIGKILL of the rank's group spares it), and ends when the
 * launcher is gone: it kicks it every 10 ms for twice its timeout and 5 s; when this rank
 * failed, a launcher still there then is stuck (on a node it cannot reach: a kicked launcher
 * ends a job in a second or two) and is SIGKILLed, if it is still the same process. The rank
 * goes on (to MPI_Abort, or its exit, after which the launcher kills the rank's process group)
 * only once the watcher has left that group, or after 2 s: on a loaded machine a child scheduled
 * late was killed with the rank before its setsid, and mpirun then hung on the node it could not
 * reach (cluster/faults, cut, during a build: 107 s). */
void fault_kick_launcher(int failed)
{
    if (!g_kick_launcher || g_launcher <= 1) return;
    int ready[2];
    if (pipe(ready) != 0) ready[0] = ready[1] = -1;
    pid_t child = fork();
    if (child != 0) { /* the rank (or no child): wait for the watcher's word that it has its own session */
        if (ready[1] >= 0) close(ready[1]);
        if (ready[0] >= 0) {
            if (child > 0) {
                struct pollfd pf = {ready[0], POLLIN, 0};
                while (poll(&pf, 1, 2000) < 0 && errno == EINTR) {
                }
            }
            close(ready[0]);
        }
        return;
    }
    setsid();
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    if (ready[1] >= 0 && write(ready[1], "", 1) != 1) { /* the rank waits 2 s at most anyway */
    }
    for (int fd = 0; fd < g_max_fd; fd++) close(fd);
    for (long i = 0; i < g_kick_polls && kill(g_launcher, SIGCHLD) == 0; i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    char st;
    if (failed && kill(g_launcher, 0) == 0 && proc_start(g_launcher, &st) == g_launcher_start) kill(g_launcher, SIGKILL);
    _exit(0);
}

static volatile sig_atomic_t g_exit_code = 1;
static void on_exit_alarm(int sig)
{
    (void)sig;
    _exit(g_exit_code);
}

void fault_exit_after(int code, unsigned seconds)
{
    g_exit_code = code;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_exit_alarm;
    sigaction(SIGALRM, &sa, NULL);
    alarm(seconds);
}

void fault_abort(MPI_Comm c, int code)
{
    fault_kick_launcher(1);
    fault_exit_after(code, (unsigned)(g_kick_polls / 100 + 5));
    MPI_Abort(c, code);
    _exit(code);
}

const char *fault_host_of(int r) { return g_peers && r >= 0 && r < g_npeers ? g_peers[r].host : "?"; }

/* ---- the word between ranks ---- */

/* Sends `note` on the alarm communicator to every rank but this one and `skip`, waiting `wait`
 * seconds at most for the messages to leave. */
static void tell_peers(int32_t note, int skip, double wait)
{
    MPI_Request *q = td_xcalloc((size_t)g_npeers, sizeof *q);
    for (int p = 0; p < g_npeers; p++) {
        q[p] = MPI_REQUEST_NULL;
        if (p != skip && p != g_me && MPI_Isend(&note, 1, MPI_INT32_T, p, ALARM_TAG, g_alarm, &q[p]) != MPI_SUCCESS)
            q[p] = MPI_REQUEST_NULL;
    }
    double t0 = td_now();
    for (int done = 0; !done && td_now() - t0 < wait;) {
        if (MPI_Testall(g_npeers, q, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) break;
        struct timespec ts = {0, 1000000};
        if (!done) nanosleep(&ts, NULL);
    }
    free(q); /* the sends to ranks that are gone stay pending: this rank ends */
}

void fault_announce_exit(int code)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized || g_alarm == MPI_COMM_NULL || code <= 0 || code > 255) return;
    tell_peers(g_npeers * code + g_me, -1, 0.2);
}

/* Says which peer is gone, passes the word on if this rank found it, and ends this rank (the
 * launcher is ending the job already). */
static void __attribute__((noreturn)) lost_peer(int r, int heard)
{
    fflush(stdout);
    if (heard >= 2) { /* rank r ended on an error it reported: end quietly with its code */
        fault_kick_launcher(1);
        _exit(heard - 2);
    }
    fprintf(stderr, "[rank %d] error: world rank %d (pid %d on %s) is gone (killed or crashed): ending the job%s; "
                    "its own output or the launcher's says why\n",
            g_me, r, (int)g_peers[r].pid, g_peers[r].host, heard ? " (heard from a rank of its node)" : "");
    fflush(stderr);
    if (!heard) tell_peers(r, r, 1.0);
    if (g_kick_launcher) fault_kick_launcher(1);
    if (!g_kick_launcher) fault_abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

/* Answers every roll call that came ("here"); the first one is kept in g_ping_first. */
static void answer_roll_calls(void)
{
    for (;;) {
        int done = 0;
        MPI_Status st;
        if (g_ping_req == MPI_REQUEST_NULL || MPI_Test(&g_ping_req, &done, &st) != MPI_SUCCESS || !done) return;
        MPI_Request q;
        if (MPI_Isend(&g_pong, 1, MPI_INT32_T, st.MPI_SOURCE, PONG_TAG, g_alarm, &q) == MPI_SUCCESS)
            MPI_Request_free(&q);
        if (!g_pinged) g_ping_first = g_ping_in;
        g_pinged = 1;
        if (MPI_Irecv(&g_ping_in, sizeof g_ping_in, MPI_BYTE, MPI_ANY_SOURCE, PING_TAG, g_alarm, &g_ping_req) !=
            MPI_SUCCESS)
            g_ping_req = MPI_REQUEST_NULL;
    }
}

void fault_poll(int full)
{
    if (g_npeers <= 1) return;
    int heard, dead = dead_peer(full, &heard);
    if (dead >= 0) lost_peer(dead, heard);
    answer_roll_calls();
    if (g_pinged) {
        /* another rank's wait timed out: the job ends; call the roll too, with its words */
        char what[sizeof g_ping_first.what];
        snprintf(what, sizeof what, "%.*s", (int)sizeof g_ping_first.what - 1, g_ping_first.what);
        g_ping_first.call[sizeof g_ping_first.call - 1] = 0;
        g_ping_first.file[sizeof g_ping_first.file - 1] = 0;
        g_relay_rank = g_ping_first.rank;
        fault_timed_out(g_ping_first.file, g_ping_first.line, g_ping_first.call, what);
    }
}

/* Seconds a roll call waits for answers: a quarter of the distributed timeout, 2 to 10 s. */
static double roll_call_window(void)
{
    double t = comm_timeout() / 4;
    return t < 2 ? 2 : t > 10 ? 10 : t;
}

/* Asks every other rank whether it is there, answering the others' roll calls meanwhile;
 * answered[r] is 1 for each rank that answered within the window (this one included). */
static void roll_call(unsigned char *answered, double window)
{
    MPI_Request *q = td_xcalloc(2 * (size_t)g_npeers, sizeof *q);
    int32_t *in = td_xcalloc((size_t)g_npeers, sizeof *in); /* left to pending receives at the end */
    int waiting = 0;
    for (int p = 0; p < g_npeers; p++) {
        q[2 * p] = q[2 * p + 1] = MPI_REQUEST_NULL;
        answered[p] = p == g_me;
        if (p == g_me) continue;
        if (MPI_Irecv(&in[p], 1, MPI_INT32_T, p, PONG_TAG, g_alarm, &q[2 * p]) != MPI_SUCCESS ||
            MPI_Isend(&g_ping_out, sizeof g_ping_out, MPI_BYTE, p, PING_TAG, g_alarm, &q[2 * p + 1]) != MPI_SUCCESS)
            continue;
        waiting++;
    }
    double t0 = td_now();
    while (waiting > 0 && td_now() - t0 < window) {
        for (int p = 0; p < g_npeers; p++) {
            int done = 0;
            if (answered[p] || q[2 * p] == MPI_REQUEST_NULL) continue;
            int rc = MPI_Test(&q[2 * p], &done, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) q[2 * p] = MPI_REQUEST_NULL, waiting--; /* its link failed */
            else if (done) answered[p] = 1, waiting--;
        }
        int done;
        for (int p = 0; p < g_npeers; p++)
            if (q[2 * p + 1] != MPI_REQUEST_NULL) MPI_Test(&q[2 * p + 1], &done, MPI_STATUS_IGNORE);
        answer_roll_calls();
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    free(q); /* what is still pending stays so: this rank ends */
}

/* Appends the ranks r of `host` with mark[r] set, as ranges ("2-3,6"); returns how many. */
static int append_ranks(char *out, size_t cap, const char *host, const unsigned char *mark, int want)
{
    int count = 0;
    for (int r = 0; r < g_npeers; r++) {
        if (strcmp(g_peers[r].host, host) != 0 || (mark && !mark[r] != !want)) continue;
        int end = r;
        while (end + 1 < g_npeers && strcmp(g_peers[end + 1].host, host) == 0 && (!mark || !mark[end + 1] == !want))
            end++;
        size_t n = strlen(out);
        if (n + 1 < cap)
            snprintf(out + n, cap - n, end > r ? "%s%d-%d" : "%s%d", count ? "," : "", r, end);
        count += end - r + 1;
        r = end;
    }
    return count;
}

/* "node2 (ranks 2-3: all of its ranks); node3 (rank 5 of its ranks 4-7)" for the ranks not
 * answered; how many ranks. */
static int describe_lost(char *out, size_t cap, const unsigned char *answered)
{
    out[0] = 0;
    int lost = 0;
    for (int r = 0; r < g_npeers; r++) {
        if (answered[r]) continue;
        int seen = 0; /* the host was described with an earlier rank */
        for (int e = 0; e < r; e++) seen |= !answered[e] && strcmp(g_peers[e].host, g_peers[r].host) == 0;
        if (seen) continue;
        char gone[256] = "", all[256] = "";
        int n = append_ranks(gone, sizeof gone, g_peers[r].host, answered, 0);
        int of = append_ranks(all, sizeof all, g_peers[r].host, NULL, 0);
        size_t k = strlen(out);
        if (k + 1 < cap)
            snprintf(out + k, cap - k, "%s%s (rank%s %s%s%s)", lost ? "; " : "", g_peers[r].host, n > 1 ? "s" : "",
                     gone, n == of ? (of > 1 ? ": all of its ranks" : ": its only rank") : " of its ranks ", n == of ? "" : all);
        lost += n;
    }
    return lost;
}

void fault_timed_out(const char *file, int line, const char *call, const char *what)
{
    static int calling;
    if (calling || g_npeers <= 1 || g_alarm == MPI_COMM_NULL)
        td_die(file, line, call, "a rank is stopped, hung or dead, or a step is slower than the limit: "
               "raise --distributed-timeout-minutes if it is legitimately slow", "%s", what);
    calling = 1;
    int origin = g_relay_rank >= 0 && g_relay_rank < g_npeers ? g_relay_rank : g_me;
    g_ping_out.rank = origin;
    g_ping_out.line = line;
    const char *src = strstr(file, "src/"); /* __FILE__ may be a long absolute path */
    snprintf(g_ping_out.file, sizeof g_ping_out.file, "%s", src ? src : file);
    snprintf(g_ping_out.call, sizeof g_ping_out.call, "%s", call);
    snprintf(g_ping_out.what, sizeof g_ping_out.what, "%s", what);
    unsigned char *answered = td_xcalloc((size_t)g_npeers, 1);
    double window = roll_call_window(), t0 = td_now();
    /* a send to a peer whose process is gone can block inside Open MPI (its TCP transport waits
     * to show a message through the launcher): this rank ends whatever happens */
    fault_exit_after(1, (unsigned)(3 * window + 3 + g_kick_polls / 100 + 5));
    roll_call(answered, window);
    double took = td_now() - t0;
    int lowest = 0;
    while (!answered[lowest]) lowest++;
    if (lowest != g_me) { /* the lowest rank that answered says it: wait for its word */
        while (td_now() - t0 < 2 * window + 3) {
            int heard, dead = dead_peer(0, &heard);
            if (dead >= 0) lost_peer(dead, heard);
            answer_roll_calls();
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    char lost[1024], relayed[256];
    int n = describe_lost(lost, sizeof lost, answered);
    if (origin != g_me) { /* this rank's prefix on another rank's wait: the line says whose it was */
        snprintf(relayed, sizeof relayed, "%s in world rank %d (whose wait it was; reported by this rank, the lowest "
                 "that answered the roll call)", call, origin);
        call = relayed;
    }
    fault_announce_exit(1);
    if (n == 0)
        td_die(file, line, call, "a rank is stuck in a computation or a step is slower than the limit: "
               "raise --distributed-timeout-minutes if it is legitimately slow",
               "%s; every rank answered a roll call in %.1f s, so none is lost", what, took);
    td_die(file, line, call, "the job ends: check those hosts (up? network? stopped?), then resume from the last "
           "checkpoint with --load on the hosts that answered; fewer data-parallel ranks keep --global-batch-size "
           "and the trajectory; if they were only busy (a step longer than the limit), raise --distributed-timeout-minutes", "%s; no answer in %.1f s from %s: down, stalled or cut off from the network",
           what, window, lost);
}
