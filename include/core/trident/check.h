/* Errors and logging. Owns the one way trident reports trouble: checks that print rank,
 * file, line, the failed call and a hint, then bring the whole job down (MPI_Abort once a
 * communicator exists), and log lines prefixed with the rank. */
#ifndef TRIDENT_CHECK_H
#define TRIDENT_CHECK_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus /* the CUDA backend's .cu files (C++) call these C functions */
extern "C" {
#endif

/* Exit code for configuration errors (bad flag, bad value, bad layout). */
#define TD_EXIT_USAGE 2

/* Rank shown in every message; -1 (the default) shows none. */
void td_log_set_rank(int rank);
int td_log_rank(void);
/* Verbosity: 0 errors only, 1 info (default), 2 debug. */
void td_log_set_level(int level);
int td_log_level(void);
/* Where info and debug lines go: stdout (the default, NULL) or, for a command whose stdout is
 * its output (generate), stderr. */
void td_log_set_stream(FILE *f);

/* Called instead of exit() by td_die, so a communicator can take the whole job down
 * (MPI_Abort). NULL restores plain exit. */
void td_set_abort_hook(void (*hook)(int code));
/* Called by td_usage_error after rank 0 has printed, instead of exit(), so that under a
 * launcher no rank's exit can end the job before rank 0's line is out (comm_usage_exit). */
void td_set_usage_hook(void (*hook)(int code));

/* The hang guard: when TRIDENT_HANG_GUARD_S is set (seconds, > 0), a thread ends the process with
 * exit 124 and one line naming `what`, the pid and the host once that long has passed, whatever the
 * process is doing; a value that is not a positive number is a usage error (exit 2). Returns 1 when
 * armed. For test suites (every test sets it) and batch jobs that must not outlive a bound. */
int td_hang_guard_start(const char *what);

void td_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define TD_INFO(...) td_log(1, __VA_ARGS__)
#define TD_DEBUG(...) td_log(2, __VA_ARGS__)
void td_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "[rank r] error: <msg>" and returns (the caller ends as it must). */
void td_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "[rank r] error: <msg>" and ends the job with `code` (through the abort hook). */
void td_fatal(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* Prints "[rank r] file:line: <call> failed: <msg> (hint: ...)" and ends the job with 1. */
void td_die(const char *file, int line, const char *call, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 5, 6), noreturn));
/* Config error: one line naming the flag and rule, exit 2 (through the abort hook). Every rank
 * must find the same error (flags, config): only rank 0 prints it — the communicator's rank, or
 * before one exists the launcher's (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID) —
 * so a job of n ranks prints it once; every rank exits 2. */
void td_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* TD_CHECK(cond, hint, fmt, ...): if cond is false, td_die with the condition as the call. */
#define TD_CHECK(cond, hint, ...)                                                        \
    do {                                                                                 \
        if (!(cond)) td_die(__FILE__, __LINE__, #cond, hint, __VA_ARGS__);               \
    } while (0)
/* TD_ASSERT(cond): an internal invariant; a failure is a bug in trident. */
#define TD_ASSERT(cond)                                                                  \
    do {                                                                                 \
        if (!(cond))                                                                     \
            td_die(__FILE__, __LINE__, #cond, "this is a bug in trident; please report it", \
                   "internal invariant broken");                                         \
    } while (0)

void *td_xmalloc_at(size_t n, const char *file, int line);
void *td_xcalloc_at(size_t count, size_t size, const char *file, int line);
void *td_xrealloc_at(void *p, size_t n, const char *file, int line);
char *td_xstrdup_at(const char *s, const char *file, int line);
#define td_xmalloc(n) td_xmalloc_at((n), __FILE__, __LINE__)
#define td_xcalloc(c, s) td_xcalloc_at((c), (s), __FILE__, __LINE__)
#define td_xrealloc(p, n) td_xrealloc_at((p), (n), __FILE__, __LINE__)
#define td_xstrdup(s) td_xstrdup_at((s), __FILE__, __LINE__)

/* Writes a formatted one-line reason into err (errlen bytes) for the functions that report
 * errors to their caller instead of ending the job; NULL err is a no-op. */
void td_seterr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Formats an errno-style reason for messages: "No such file or directory". */
const char *td_strerror(int err);

/* "s" unless n is 1: printf("%d document%s", n, td_plural(n)). */
static inline const char *td_plural(long long n) { return n == 1 ? "" : "s"; }

#ifdef __cplusplus
}
#endif

#endif
