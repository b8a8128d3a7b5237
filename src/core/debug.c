/* Faults and fakes for tests and drills: see include/core/trident/debug.h. */
#include "trident/debug.h"

static td_debug g_debug = {.watch_only_rank = -1};

const td_debug *td_debug_get(void) { return &g_debug; }

void td_debug_set(const td_debug *d) { g_debug = *d; }

void td_debug_from_args(const td_args *a)
{
    td_debug_set(&(td_debug){.fake_hosts = a->fake_hosts,
                             .comm_staged = a->debug_comm_staged,
                             .save_delay_ms = a->debug_save_delay_ms,
                             .overflow_iter = a->debug_overflow_iteration,
                             .watch_only_rank = a->debug_watch_only_rank});
}
