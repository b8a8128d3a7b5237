/* layout_batch FILE: the layout matrix's runs of one world size and environment in one MPI job
 * (tests/parallel/layouts.cmake). Each run is `trident train` with its own flags, one after the
 * other in the same processes: what a run costs beyond its training — starting the processes,
 * MPI's start-up and end, loading the libraries — is paid once for the whole batch instead of
 * once a run (about half of a layout run's CPU time on 2 cores).
 *
 * FILE: one run a line, its fields separated by tabs: the run's log file (its ranks' stdout and
 * stderr, appended), then its flags for `trident train`. A run that fails ends the batch with its
 * exit code, after a line on the batch's own stderr naming the run and its log; the runs after it
 * do not start (their comparisons then fail, each naming its missing metrics file). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "trident/args.h"
#include "trident/check.h"
#include "trident/comm.h"
#include "trident/debug.h"
#include "trident/trainer.h"

#define MAX_FIELDS 256

/* Splits line (modified) at tabs into at most MAX_FIELDS fields; returns how many. */
static int split_tabs(char *line, char **field)
{
    int n = 0;
    for (char *p = line; n < MAX_FIELDS;) {
        field[n++] = p;
        char *tab = strchr(p, '\t');
        if (!tab) break;
        *tab = '\0';
        p = tab + 1;
    }
    return n;
}

/* Points fds 1 and 2 at path (appended: every rank of the run writes to it). */
static void output_to(const char *path)
{
    fflush(stdout);
    fflush(stderr);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) {
        perror(path);
        exit(1);
    }
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
}

int main(int argc, char **argv)
{
    be_prepare_process(argv);
    td_set_usage_hook(comm_usage_exit);
    if (argc != 2) {
        fprintf(stderr, "usage: layout_batch FILE (one run a line: LOG<TAB>flags of trident train, tab-separated)\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    td_hang_guard_start("layout_batch");
    int out0 = dup(1), err0 = dup(2); /* the batch's own output, between the runs' */
    comm *world = comm_world_init(&argc, &argv);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int runs = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] == '\n') line[--len] = '\0';
        if (!len) continue;
        char *field[MAX_FIELDS + 1];
        int n = split_tabs(line, field + 1); /* field[0]: the program's name, as argv */
        field[0] = "trident";
        output_to(field[1]);
        field[1] = "train";
        td_args a;
        if (td_args_parse(&a, TD_CMD_TRAIN, "trident train", n + 1, field, 2)) {
            dup2(err0, 2);
            fprintf(stderr, "layout_batch: --help in a run's flags (%s)\n", argv[1]);
            comm_exit(2);
        }
        td_log_set_level(a.verbose);
        td_debug_from_args(&a);
        comm_set_timeout(a.distributed_timeout_minutes * 60);
        int rc = trainer_run(&a, world);
        td_args_free(&a);
        fflush(stdout);
        fflush(stderr);
        dup2(out0, 1);
        dup2(err0, 2);
        if (rc != 0) {
            fprintf(stderr, "layout_batch: a run failed (exit %d): its output is in the log named first on line %d of %s\n",
                    rc, runs + 1, argv[1]);
            comm_exit(rc);
        }
        runs++;
    }
    free(line);
    fclose(f);
    if (comm_rank(world) == 0) printf("layout_batch: %d runs\n", runs);
    comm_world_finalize(world);
    return 0;
}
