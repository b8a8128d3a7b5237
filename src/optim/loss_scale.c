/* Megatron's grad scalers (megatron/core/optimizer/grad_scaler.py): constant and dynamic with
 * hysteresis, plus the divergence rule Megatron lacks. See optim.h. */
#include "trident/optim.h"

void opt_loss_scaler_init(opt_loss_scaler *s, int dynamic, double scale, double min_scale, int64_t window,
                          int hysteresis)
{
    *s = (opt_loss_scaler){dynamic, scale, min_scale, window, hysteresis, 0, hysteresis, 0};
}

void opt_loss_scaler_update(opt_loss_scaler *s, int found_inf)
{
    /* an overflow at the floor: a smaller scale cannot help (a constant scale is its own floor) */
    if (found_inf && (!s->dynamic || s->scale <= s->min_scale)) s->floor_overflows++;
    else s->floor_overflows = 0;
    if (!s->dynamic) return;
    if (found_inf) {
        s->growth_tracker = 0;
        if (--s->hysteresis_tracker <= 0) {
            s->scale *= 0.5;
            if (s->scale < s->min_scale) s->scale = s->min_scale;
        }
        return;
    }
    if (++s->growth_tracker == s->window) {
        s->growth_tracker = 0;
        s->hysteresis_tracker = s->hysteresis;
        s->scale *= 2.0;
    }
}

int opt_loss_scaler_diverged(const opt_loss_scaler *s)
{
    return s->floor_overflows >= OPT_DIVERGED_OVERFLOWS;
}
