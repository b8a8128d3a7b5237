/* Timers: see include/core/trident/timer.h. */
#include "trident/timer.h"

#include <time.h>

double td_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void td_timer_init(td_timer *t, const char *name)
{
    t->name = name;
    t->total = 0;
    t->start = -1;
    t->count = 0;
}

void td_timer_start(td_timer *t) { t->start = td_now(); }

void td_timer_stop(td_timer *t)
{
    if (t->start < 0) return;
    t->total += td_now() - t->start;
    t->start = -1;
    t->count++;
}

void td_timer_clear(td_timer *t)
{
    t->total = 0;
    t->start = -1;
    t->count = 0;
}
