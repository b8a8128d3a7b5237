/* The trainer. Owns a training run from validated flags to the last iteration: the rank grid,
 * the model stage, optimizer state, data, the iteration loop (schedule, gradient reduction,
 * clipping, AdamW, learning-rate schedule), evaluation and the per-iteration metrics. */
#ifndef TRIDENT_TRAINER_H
#define TRIDENT_TRAINER_H

#include "trident/args.h"
#include "trident/comm.h"

/* Checks every flag of a training run against the rules (sizes divisible by the parallel
 * sizes, batch sizes, mutually exclusive flags) for a world of `world_size` ranks. Returns 0,
 * or -1 with one line naming the flag and the rule in msg. Allocates nothing. */
int trainer_validate(const td_args *a, int world_size, char *msg, size_t msglen);

/* Runs the training job described by `a` on `world` (collective): finds the checkpoint of --load,
 * holds the model flags against it (ckpt_args_reconcile) and validates them (trainer_validate)
 * before allocating anything — a bad flag is one line from rank 0 and TD_EXIT_USAGE — refuses
 * a --save folder another run holds (its lock, exit 1) or holding checkpoints the run did not
 * load, then trains. Returns the exit code. */
int trainer_run(const td_args *a, comm *world);

/* Peak resident memory of this process in bytes (VmHWM), 0 if unknown. */
long long trainer_peak_rss(void);

#endif
