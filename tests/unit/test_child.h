/* Tests of paths that end the process (a usage error's exit 2, a fatal error's exit 1): the call
 * runs in a forked child with its stderr captured. Include after <cmocka.h>. */
#ifndef TRIDENT_TEST_CHILD_H
#define TRIDENT_TEST_CHILD_H

#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trident/check.h"

static inline void child_exit_now(int code) { _exit(code); }

/* Runs fn() in a child whose fatal and usage errors end it at once with their code (no atexit
 * handlers of the parent's libraries): returns its exit status (-1: it did not exit), err its
 * stderr (NUL-terminated, at most len - 1 bytes). */
static inline int run_in_child(void (*fn)(void), char *err, size_t len)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        td_set_abort_hook(child_exit_now);
        td_set_usage_hook(child_exit_now);
        fn();
        _exit(0);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < len && (r = read(fd[0], err + n, len - 1 - n)) > 0) n += (size_t)r;
    err[n] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* How many times c occurs in s (lines of an error: one line is one '\n'). */
static inline int count_char(const char *s, char c)
{
    int n = 0;
    for (; *s; s++) n += *s == c;
    return n;
}

#endif
