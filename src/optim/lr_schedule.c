/* Learning-rate schedule and clipping: see include/optim/trident/optim.h. */
#include <math.h>
#include <string.h>

#include "trident/optim.h"

int opt_decay_style_parse(const char *s, opt_decay_style *out)
{
    if (strcmp(s, "constant") == 0) *out = OPT_DECAY_CONSTANT;
    else if (strcmp(s, "linear") == 0) *out = OPT_DECAY_LINEAR;
    else if (strcmp(s, "cosine") == 0) *out = OPT_DECAY_COSINE;
    else return -1;
    return 0;
}

double opt_lr_at(const opt_lr_schedule *s, int64_t iter)
{
    if (s->warmup_iters > 0 && iter <= s->warmup_iters)
        return s->max_lr * (double)iter / (double)s->warmup_iters;
    if (s->style == OPT_DECAY_CONSTANT) return s->max_lr;
    if (iter > s->decay_iters) return s->min_lr;
    double span = (double)(s->decay_iters - s->warmup_iters);
    double ratio = span > 0 ? (double)(iter - s->warmup_iters) / span : 1.0;
    double coeff = s->style == OPT_DECAY_LINEAR ? 1.0 - ratio : 0.5 * (cos(M_PI * ratio) + 1.0);
    return s->min_lr + coeff * (s->max_lr - s->min_lr);
}

double opt_clip_factor(double grad_norm, double max_norm)
{
    if (max_norm <= 0 || !(grad_norm > max_norm)) return 1.0;
    return max_norm / (grad_norm + 1e-6);
}
