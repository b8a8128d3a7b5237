/* Where an iteration's time goes, to choose what to speed up next: GEMMs, attention, the other
 * kernels by family, the optimizer, communication, data, and what none of these covers. The
 * trainer brackets each iteration and marks its data and optimizer regions; the backend adds
 * its kernel times (be_stats, attached only inside an iteration); communication is read from
 * the rank grid, per kind of group both exposed (the rank blocked in it) and in flight (see
 * ps_comm_times; in flight and not exposed is hidden behind compute). Regions are exclusive: communication inside a region counts as communication.
 * Iterations and regions are timed with the backend's events (be_event_record), so their times
 * include the kernels they enqueue on an asynchronous backend. The first iteration warms up and
 * is not counted. */
#ifndef TRIDENT_BREAKDOWN_H
#define TRIDENT_BREAKDOWN_H

#include <stdint.h>

#include "backend.h"
#include "trident/parallel_state.h"

typedef enum {
    BD_DATA,      /* reading and shaping micro-batches */
    BD_OPTIMIZER, /* zeroing grads, grad norm, AdamW (backend kernels inside are not counted as kernels) */
    BD_ADAMW,     /* the AdamW step alone (inside BD_OPTIMIZER) */
    BD_REGIONS
} bd_region;

typedef struct bd_state {
    backend *be;                /* be->stats = &kern inside an iteration, outside BD_OPTIMIZER */
    const ps_state *ps;
    be_stats kern;              /* kernel times of the counted iterations */
    double region[BD_REGIONS];  /* seconds, communication excluded */
    be_event open_t[BD_REGIONS]; /* the backend's event at each open region's start */
    double open_c[BD_REGIONS];
    double comm, total;         /* seconds over the counted iterations */
    double exposed[PS_GROUPS];  /* ... blocked in each kind of group (their sum is comm) */
    double inflight[PS_GROUPS]; /* ... with that kind's communication in flight */
    double iter_x[PS_GROUPS], iter_f[PS_GROUPS]; /* exposed and inflight at the open iteration's start */
    be_event iter_t;            /* the backend's event at the open iteration's start */
    double iter_c;              /* communication at the open iteration's start */
    int64_t iters, seen;        /* counted iterations, iterations ended */
    int in_iter;                /* between begin and end: regions outside iterations are not counted */
} bd_state;

void bd_init(bd_state *b, backend *be, const ps_state *ps);
void bd_begin_iteration(bd_state *b);
void bd_end_iteration(bd_state *b);
void bd_start(bd_state *b, bd_region r);
void bd_stop(bd_state *b, bd_region r);

/* What the numbers are held against; zeros leave a comparison out. */
typedef struct bd_limits {
    double peak_gflops;     /* the GEMM peak in the GEMMs' dtype, for their efficiency */
    const char *peak_name;  /* "sgemm peak", "bf16 GEMM peak" */
    double stream_gbps;     /* AdamW's memory traffic alone (be_adamw_stream_gbps), read + written */
    double adamw_bytes;     /* bytes AdamW reads + writes per iteration (be_adamw_bytes) */
} bd_limits;

/* `rate` as a fraction of `*limit` (same units), never above 1: a rate above the limit shows the
 * limit was measured low (a machine busier then, other shapes), so *limit is raised to the rate
 * and 1 returned (the caller says so); 0 otherwise. *fraction is 0 when *limit is not positive. */
int bd_fraction(double rate, double *limit, double *fraction);

/* Prints the mean per counted iteration, one line per category, through TD_INFO. Every fraction
 * of a limit printed is at most 1; a limit raised to a rate above it is named as raised. */
void bd_print(const bd_state *b, const bd_limits *lim);

#endif
