/* Errors and logging: see include/core/trident/check.h. */
#include "trident/check.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int g_rank = -1;
static int g_level = 1;
static FILE *g_log_stream; /* NULL: stdout */
static void (*g_abort_hook)(int code);
static void (*g_usage_hook)(int code);

void td_log_set_rank(int rank) { g_rank = rank; }
int td_log_rank(void) { return g_rank; }
void td_log_set_level(int level) { g_level = level; }
int td_log_level(void) { return g_level; }
void td_log_set_stream(FILE *f) { g_log_stream = f; }
void td_set_abort_hook(void (*hook)(int code)) { g_abort_hook = hook; }
void td_set_usage_hook(void (*hook)(int code)) { g_usage_hook = hook; }

static void prefix(FILE *f)
{
    if (g_rank >= 0) fprintf(f, "[rank %d] ", g_rank);
}

static void vline(FILE *f, const char *tag, const char *fmt, va_list ap)
{
    prefix(f);
    if (tag) fputs(tag, f);
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    fflush(f);
}

static __attribute__((noreturn)) void finish(int code)
{
    fflush(stdout);
    fflush(stderr);
    if (g_abort_hook) g_abort_hook(code);
    exit(code);
}

void td_log(int level, const char *fmt, ...)
{
    if (level > g_level) return;
    va_list ap;
    va_start(ap, fmt);
    vline(g_log_stream ? g_log_stream : stdout, NULL, fmt, ap);
    va_end(ap);
}

void td_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vline(stderr, "warning: ", fmt, ap);
    va_end(ap);
}

void td_error(const char *fmt, ...)
{
    fflush(stdout);
    va_list ap;
    va_start(ap, fmt);
    vline(stderr, "error: ", fmt, ap);
    va_end(ap);
}

void td_fatal(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vline(stderr, "error: ", fmt, ap);
    va_end(ap);
    finish(code);
}

/* This process's rank in the job as the launcher tells it (Open MPI, PMIx, MPICH/Intel MPI,
 * Slurm), before any communicator exists; 0 when started alone. */
static int launcher_rank(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

void td_usage_error(const char *fmt, ...)
{
    /* every rank finds the same config error: rank 0 says it, every rank exits 2 */
    int rank = g_rank >= 0 ? g_rank : launcher_rank();
    if (rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        vline(stderr, "error: ", fmt, ap);
        va_end(ap);
    }
    fflush(stdout);
    if (g_usage_hook) g_usage_hook(TD_EXIT_USAGE);
    finish(TD_EXIT_USAGE);
}

void td_die(const char *file, int line, const char *call, const char *hint, const char *fmt, ...)
{
    fflush(stdout);
    prefix(stderr);
    fprintf(stderr, "%s:%d: %s failed: ", file, line, call);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (hint && *hint) fprintf(stderr, " (hint: %s)", hint);
    fputc('\n', stderr);
    finish(1);
}

void *td_xmalloc_at(size_t n, const char *file, int line)
{
    void *p = malloc(n ? n : 1);
    if (!p) td_die(file, line, "malloc", "reduce the model or batch size", "out of memory allocating %zu bytes", n);
    return p;
}

void *td_xcalloc_at(size_t count, size_t size, const char *file, int line)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        td_die(file, line, "calloc", "reduce the model or batch size",
               "out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *td_xrealloc_at(void *p, size_t n, const char *file, int line)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) td_die(file, line, "realloc", "reduce the model or batch size", "out of memory growing to %zu bytes", n);
    return q;
}

char *td_xstrdup_at(const char *s, const char *file, int line)
{
    size_t n = strlen(s) + 1;
    char *p = td_xmalloc_at(n, file, line);
    memcpy(p, s, n);
    return p;
}

const char *td_strerror(int err) { return strerror(err); }

void td_seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}
