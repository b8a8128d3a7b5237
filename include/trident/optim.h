/* Optimizer schedule and gradient clipping. Owns the learning-rate schedule (Megatron's
 * OptimizerParamScheduler: linear warm-up, then constant, linear or cosine decay to min-lr)
 * and the clip factor from a global gradient norm. The AdamW arithmetic is a backend kernel. */
#ifndef TRIDENT_OPTIM_H
#define TRIDENT_OPTIM_H

#include <stdint.h>

typedef enum { OPT_DECAY_CONSTANT, OPT_DECAY_LINEAR, OPT_DECAY_COSINE } opt_decay_style;

typedef struct {
    double max_lr, min_lr;
    int64_t warmup_iters; /* linear from 0 to max_lr over these */
    int64_t decay_iters;  /* decay ends here (counted from 0, warm-up included) */
    opt_decay_style style;
} opt_lr_schedule;

/* Parses "constant" | "linear" | "cosine"; returns -1 for anything else. */
int opt_decay_style_parse(const char *s, opt_decay_style *out);
/* Learning rate for iteration `iter` (1-based: the lr used by the iter-th optimizer step). */
double opt_lr_at(const opt_lr_schedule *s, int64_t iter);
/* Factor to multiply gradients by so their global norm is at most max_norm (1 when max_norm
 * is 0 or the norm is already small enough). */
double opt_clip_factor(double grad_norm, double max_norm);

#endif
