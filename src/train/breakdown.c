/* The per-iteration time breakdown: see src/train/breakdown.h. */
#include "breakdown.h"

#include <string.h>

#include "trident/check.h"

void bd_init(bd_state *b, backend *be, const ps_state *ps)
{
    memset(b, 0, sizeof *b);
    b->be = be;
    b->ps = ps;
}

void bd_begin_iteration(bd_state *b)
{
    b->iter_t = be_event_record(b->be);
    b->iter_c = ps_comm_seconds(b->ps);
    ps_comm_times(b->ps, b->iter_x, b->iter_f);
    b->be->stats = &b->kern;
    b->in_iter = 1;
}

void bd_end_iteration(bd_state *b)
{
    b->be->stats = NULL;
    b->in_iter = 0;
    be_event end = be_event_record(b->be);
    b->total += be_event_elapsed(b->be, &b->iter_t, &end);
    be_stats_flush(b->be, &b->kern); /* an asynchronous backend's kernel times: everything has run by now */
    b->comm += ps_comm_seconds(b->ps) - b->iter_c;
    double x[PS_GROUPS], f[PS_GROUPS];
    ps_comm_times(b->ps, x, f);
    for (int g = 0; g < PS_GROUPS; g++) {
        b->exposed[g] += x[g] - b->iter_x[g];
        b->inflight[g] += f[g] - b->iter_f[g];
    }
    if (b->seen++ == 0) { /* warm-up: forget it */
        memset(&b->kern, 0, sizeof b->kern);
        memset(b->region, 0, sizeof b->region);
        memset(b->exposed, 0, sizeof b->exposed);
        memset(b->inflight, 0, sizeof b->inflight);
        b->comm = b->total = 0;
        return;
    }
    b->iters++;
}

void bd_start(bd_state *b, bd_region r)
{
    if (!b->in_iter) return;
    b->open_t[r] = be_event_record(b->be);
    b->open_c[r] = ps_comm_seconds(b->ps);
    if (r == BD_OPTIMIZER) b->be->stats = NULL;
}

void bd_stop(bd_state *b, bd_region r)
{
    if (!b->in_iter) return;
    be_event end = be_event_record(b->be);
    b->region[r] += be_event_elapsed(b->be, &b->open_t[r], &end) - (ps_comm_seconds(b->ps) - b->open_c[r]);
    if (r == BD_OPTIMIZER) b->be->stats = &b->kern;
}

static double pct(double x, double total) { return total > 0 ? 100.0 * x / total : 0.0; }

int bd_fraction(double rate, double *limit, double *fraction)
{
    *fraction = 0;
    if (!(*limit > 0)) return 0;
    int raised = rate > *limit;
    if (raised) *limit = rate;
    *fraction = rate / *limit;
    return raised;
}

void bd_print(const bd_state *b, const bd_limits *lim)
{
    if (b->iters == 0) {
        TD_INFO("time breakdown: needs at least 2 iterations (the first warms up)");
        return;
    }
    double n = (double)b->iters, ms = 1e3 / n, total = b->total * ms;
    const be_stats *k = &b->kern;
    double other = 0;
    for (int op = BE_OP_LAYERNORM; op < BE_OP_COUNT; op++) other += k->seconds[op];
    double gemm = k->seconds[BE_OP_GEMM] * ms, att = k->seconds[BE_OP_ATTENTION] * ms;
    double opt = b->region[BD_OPTIMIZER] * ms, comm = b->comm * ms, data = b->region[BD_DATA] * ms;
    double rest = total - gemm - att - other * ms - opt - comm - data;
    TD_INFO("time breakdown, mean of %lld iterations (the first left out): %.1f ms per iteration",
            (long long)b->iters, total);
    double gf = k->seconds[BE_OP_GEMM] > 0 ? k->flops[BE_OP_GEMM] / k->seconds[BE_OP_GEMM] * 1e-9 : 0;
    char vs[200] = "";
    double peak = lim->peak_gflops, frac;
    if (bd_fraction(gf, &peak, &frac))
        snprintf(vs, sizeof vs, " = 100%% of the %s, raised to this rate from %.1f GFLOP/s", lim->peak_name,
                 lim->peak_gflops);
    else if (peak > 0)
        snprintf(vs, sizeof vs, " = %.0f%% of the %s %.1f GFLOP/s", 100.0 * frac, lim->peak_name, peak);
    TD_INFO("  GEMMs          %9.1f ms %5.1f%%  %.1f GFLOP at %.1f GFLOP/s%s", gemm, pct(gemm, total),
            k->flops[BE_OP_GEMM] / n * 1e-9, gf, vs);
    double af = k->seconds[BE_OP_ATTENTION] > 0 ? k->flops[BE_OP_ATTENTION] / k->seconds[BE_OP_ATTENTION] * 1e-9 : 0;
    TD_INFO("  attention      %9.1f ms %5.1f%%  %.1f GFLOP (model count) at %.1f GFLOP/s", att, pct(att, total),
            k->flops[BE_OP_ATTENTION] / n * 1e-9, af);
    char fam[512];
    size_t len = 0;
    fam[0] = 0;
    for (int op = BE_OP_LAYERNORM; op < BE_OP_COUNT && len < sizeof fam; op++)
        if (k->calls[op])
            len += (size_t)snprintf(fam + len, sizeof fam - len, "%s%s %.1f", len ? ", " : "", be_op_name((be_op)op),
                                    k->seconds[op] * ms);
    TD_INFO("  other kernels  %9.1f ms %5.1f%%  %s", other * ms, pct(other * ms, total), fam);
    double adamw = b->region[BD_ADAMW] * ms;
    if (lim->stream_gbps > 0 && lim->adamw_bytes > 0 && adamw > 0) {
        double gbps = lim->adamw_bytes / (adamw * 1e-3) * 1e-9, limit = lim->stream_gbps, frac;
        char vs[200];
        if (bd_fraction(gbps, &limit, &frac))
            snprintf(vs, sizeof vs, "100%% of the bandwidth of its streams, raised to this rate from %.1f GB/s measured",
                     lim->stream_gbps);
        else
            snprintf(vs, sizeof vs, "%.0f%% of the bandwidth of its streams %.1f GB/s", 100.0 * frac, limit);
        TD_INFO("  optimizer      %9.1f ms %5.1f%%  AdamW %.1f ms: %.2f GB read + written at %.1f GB/s = %s", opt,
                pct(opt, total), adamw, lim->adamw_bytes * 1e-9, gbps, vs);
    } else {
        TD_INFO("  optimizer      %9.1f ms %5.1f%%  AdamW %.1f ms", opt, pct(opt, total), adamw);
    }
    TD_INFO("  communication  %9.1f ms %5.1f%%  exposed (blocked); per group:", comm, pct(comm, total));
    for (int g = 0; g < PS_GROUPS; g++) {
        double x = b->exposed[g] * ms, f = b->inflight[g] * ms;
        if (f > 0)
            TD_INFO("    %-5s exposed %9.1f ms of %.1f ms in flight (%.0f%% hidden)", ps_group_name((ps_group)g), x, f,
                    pct(f - x, f));
    }
    TD_INFO("  data           %9.1f ms %5.1f%%", data, pct(data, total));
    TD_INFO("  untimed        %9.1f ms %5.1f%%  (host code between kernels)", rest, pct(rest, total));
}
