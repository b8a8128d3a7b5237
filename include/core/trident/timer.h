/* Timers. Owns wall-clock measurement: a monotonic clock and named accumulators that the
 * trainer reports per iteration (GEMMs, attention, communication, data, ...). */
#ifndef TRIDENT_TIMER_H
#define TRIDENT_TIMER_H

/* Seconds on a monotonic clock. */
double td_now(void);

typedef struct td_timer {
    const char *name;
    double total; /* seconds accumulated */
    double start; /* td_now() at the open td_timer_start, or < 0 */
    long count;
} td_timer;

void td_timer_init(td_timer *t, const char *name);
void td_timer_start(td_timer *t);
void td_timer_stop(td_timer *t);
void td_timer_clear(td_timer *t);

#endif
