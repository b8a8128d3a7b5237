/* A bound on a process's whole life, for test suites and batch jobs: see trident/check.h. */
#include "trident/check.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    double seconds;
    char what[96];
} G;

static void *guard_main(void *arg)
{
    (void)arg;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double end = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + G.seconds;
    ts.tv_sec = (time_t)end;
    ts.tv_nsec = (long)((end - (double)ts.tv_sec) * 1e9);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
    char host[64] = "?";
    gethostname(host, sizeof host - 1);
    /* One write, no stdio lock: another thread may hold it forever (that may be the hang). */
    char line[384];
    int n = snprintf(line, sizeof line,
                     "error: trident %s (pid %d on %s) still running after %.0f s, the bound TRIDENT_HANG_GUARD_S "
                     "sets: ending it as hung (exit 124); unset it or raise it for a longer run\n",
                     G.what, (int)getpid(), host, G.seconds);
    if (n > 0) (void)!write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    _exit(124);
    return NULL;
}

int td_hang_guard_start(const char *what)
{
    const char *s = getenv("TRIDENT_HANG_GUARD_S");
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v > 0) || v > 1e7) {
        fprintf(stderr, "error: TRIDENT_HANG_GUARD_S='%s' is not a number of seconds (> 0): set it to the bound "
                        "or unset it\n", s);
        exit(TD_EXIT_USAGE);
    }
    G.seconds = v;
    snprintf(G.what, sizeof G.what, "%s", what ? what : "");
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &a, guard_main, NULL);
    pthread_attr_destroy(&a);
    if (rc) {
        fprintf(stderr, "error: TRIDENT_HANG_GUARD_S: cannot start its thread (%s)\n", strerror(rc));
        exit(1);
    }
    return 1;
}
