/* The rank grid and its groups: see include/comm/trident/parallel_state.h. */
#include "trident/parallel_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trident/check.h"

int ps_rank_of(const ps_state *ps, int tp_rank, int dp_rank, int pp_rank)
{
    return tp_rank + ps->tp * ps->cp * (dp_rank + ps->dp * pp_rank);
}

ps_state *ps_init(comm *world, int tp, int pp) { return ps_init_cp(world, tp, 1, pp); }

ps_state *ps_init_cp(comm *world, int tp, int cp, int pp)
{
    ps_state *ps = td_xcalloc(1, sizeof *ps);
    ps->world = world;
    ps->world_rank = comm_rank(world);
    ps->world_size = comm_size(world);
    TD_ASSERT(tp >= 1 && cp >= 1 && pp >= 1 && ps->world_size % (tp * cp * pp) == 0);
    ps->tp = tp;
    ps->cp = cp;
    ps->pp = pp;
    ps->dp = ps->world_size / (tp * cp * pp);
    int r = ps->world_rank;
    ps->tp_rank = r % tp;
    ps->cp_rank = (r / tp) % cp;
    ps->dp_rank = (r / (tp * cp)) % ps->dp;
    ps->pp_rank = r / (tp * cp * ps->dp);
    ps->dpcp = ps->dp * cp;
    ps->dpcp_rank = ps->cp_rank + cp * ps->dp_rank;
    ps->ep = 1, ps->edp = ps->dpcp, ps->edp_rank = ps->dpcp_rank; /* the experts' grid: dp x cp, as Megatron's */

    /* color: the coordinates the group shares; key: the coordinate that varies */
    int t = ps->tp_rank, c = ps->cp_rank, d = ps->dp_rank, p = ps->pp_rank, dp = ps->dp;
    ps->tp_group = comm_split(world, c + cp * (d + dp * p), t);
    ps->dp_group = comm_split(world, t + tp * (c + cp * p), d);
    ps->pp_group = comm_split(world, t + tp * (c + cp * d), p);
    ps->mp_group = comm_split(world, c + cp * d, t + tp * p);
    comm_set_name(ps->tp_group, "tensor-parallel");
    comm_set_name(ps->dp_group, "data-parallel");
    comm_set_name(ps->pp_group, "pipeline");
    comm_set_name(ps->mp_group, "model-parallel");
    ps->cp_group = comm_split(world, t + tp * (d + dp * p), c);
    comm_set_name(ps->cp_group, "context-parallel");
    ps->dpcp_group = ps->dp_group;
    if (cp > 1) {
        ps->dpcp_group = comm_split(world, t + tp * p, ps->dpcp_rank);
        comm_set_name(ps->dpcp_group, "data-parallel with context-parallel");
    }
    ps->edp_group = ps->dpcp_group;
    if (tp > 1 && pp > 1) {
        ps->tp_gather = comm_split(ps->tp_group, 0, ps->tp_rank);
        comm_set_name(ps->tp_gather, "tensor-parallel (stage transfers)");
    }
    int in_embd = ps_is_first_stage(ps) || ps_is_last_stage(ps);
    /* non-members each get a color of their own (a group of one, freed at once) */
    comm *e = comm_split(world, in_embd ? t + tp * (c + cp * d) : tp * cp * dp + r, p);
    comm_set_name(e, "embedding");
    if (in_embd) ps->embd_group = e;
    else comm_free(e);
    return ps;
}

void ps_init_experts(ps_state *ps, int ep)
{
    TD_ASSERT(ep >= 1 && ps->dpcp % ep == 0 && ps->ep == 1);
    if (ep == 1) return;
    /* Megatron's expert grid: expert parallelism carved out of dp x cp (the dense grid's order
     * tp-cp-dp, so ep runs over consecutive dp x cp ranks) and the expert-data-parallel group
     * the rest of it */
    ps->ep = ep;
    ps->ep_rank = ps->dpcp_rank % ep;
    ps->edp = ps->dpcp / ep;
    ps->edp_rank = ps->dpcp_rank / ep;
    int tp = ps->tp, base = ps->tp_rank + tp * ps->dpcp * ps->pp_rank; /* tp and pp: shared by both */
    ps->ep_group = comm_split(ps->world, base + tp * ps->edp_rank, ps->ep_rank);
    ps->edp_group = comm_split(ps->world, base + tp * ps->ep_rank, ps->edp_rank);
    comm_set_name(ps->ep_group, "expert-parallel");
    comm_set_name(ps->edp_group, "expert-data-parallel");
}

void ps_free(ps_state *ps)
{
    if (!ps) return;
    if (ps->ep > 1) comm_free(ps->edp_group); /* else dp x cp's */
    comm_free(ps->ep_group);
    comm_free(ps->dp_hier);
    comm_free(ps->tp_gather);
    comm_free(ps->tp_group);
    if (ps->dpcp_group != ps->dp_group) comm_free(ps->dpcp_group);
    comm_free(ps->cp_group);
    comm_free(ps->dp_group);
    comm_free(ps->pp_group);
    comm_free(ps->mp_group);
    comm_free(ps->embd_group);
    free(ps);
}

void ps_make_twins(ps_state *ps, void *stream)
{
    comm *groups[] = {ps->world,     ps->tp_group,   ps->cp_group,  ps->dp_group,  ps->dpcp_group, ps->pp_group,
                      ps->mp_group,  ps->embd_group, ps->tp_gather, ps->ep_group,  ps->edp_group};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) /* NULL: none */
        comm_make_twin(groups[i], stream, groups[i] == ps->pp_group || groups[i] == ps->cp_group); /* their messages */
}

double ps_comm_seconds(const ps_state *ps)
{
    double s = comm_seconds(ps->world) + comm_seconds(ps->tp_group) + comm_seconds(ps->dp_group) +
               comm_seconds(ps->pp_group) + comm_seconds(ps->mp_group);
    if (ps->dp_hier) s += comm_seconds(ps->dp_hier);
    if (ps->cp_group) s += comm_seconds(ps->cp_group);
    if (ps->dpcp_group != ps->dp_group) s += comm_seconds(ps->dpcp_group);
    if (ps->tp_gather) s += comm_seconds(ps->tp_gather);
    if (ps->ep_group) s += comm_seconds(ps->ep_group) + comm_seconds(ps->edp_group);
    return ps->embd_group ? s + comm_seconds(ps->embd_group) : s;
}

const char *ps_group_name(ps_group g)
{
    static const char *const names[PS_GROUPS] = {"tp", "pp", "dp", "ep", "embd", "cp", "other"};
    return g < PS_GROUPS ? names[g] : "?";
}

void ps_comm_times(const ps_state *ps, double exposed[PS_GROUPS], double inflight[PS_GROUPS])
{
    const comm *one[] = {ps->tp_group, ps->pp_group, ps->dp_group, ps->ep_group, ps->embd_group, ps->cp_group};
    for (int g = 0; g < PS_OTHER; g++) {
        exposed[g] = one[g] ? comm_seconds(one[g]) : 0;
        inflight[g] = one[g] ? comm_busy_seconds(one[g]) : 0;
    }
    if (ps->dp_hier) { /* the buckets' hierarchical collectives are the dp group's too (in flight: the sum,
                        * the flat group being idle while they run) */
        exposed[PS_DP] += comm_seconds(ps->dp_hier);
        inflight[PS_DP] += comm_busy_seconds(ps->dp_hier);
    }
    if (ps->tp_gather) { /* the stage transfers' all-gathers stay the tp group's, as before they ran behind */
        exposed[PS_TP] += comm_seconds(ps->tp_gather);
        inflight[PS_TP] += comm_busy_seconds(ps->tp_gather);
    }
    if (ps->dpcp_group != ps->dp_group) { /* gradients and shards over dp x cp */
        exposed[PS_DP] += comm_seconds(ps->dpcp_group);
        inflight[PS_DP] += comm_busy_seconds(ps->dpcp_group);
    }
    if (ps->ep > 1) { /* the experts' gradient buckets */
        exposed[PS_DP] += comm_seconds(ps->edp_group);
        inflight[PS_DP] += comm_busy_seconds(ps->edp_group);
    }
    exposed[PS_OTHER] = comm_seconds(ps->world) + comm_seconds(ps->mp_group);
    inflight[PS_OTHER] = comm_busy_seconds(ps->world) + comm_busy_seconds(ps->mp_group);
}

/* ---- placement ---- */

#define PS_HOST 64

/* "lo", or "lo-hi" when they differ. */
static void span(char *out, size_t len, int lo, int hi)
{
    if (lo == hi) snprintf(out, len, "%d", lo);
    else snprintf(out, len, "%d-%d", lo, hi);
}

void ps_placement(const ps_state *ps, char *out, size_t len, char *warn, size_t wlen)
{
    int n = ps->world_size;
    char me[PS_HOST] = {0};
    if (gethostname(me, sizeof me - 1) != 0) strcpy(me, "?");
    char *hosts = td_xcalloc((size_t)n, PS_HOST);
    comm_allgather(ps->world, me, hosts, PS_HOST, COMM_U8);
    out[0] = warn[0] = '\0';
    if (ps->world_rank == 0) {
        size_t used = 0;
        /* ranks are grouped by host in order of first appearance */
        for (int r = 0; r < n; r++) {
            const char *h = hosts + (size_t)r * PS_HOST;
            int seen = 0;
            for (int q = 0; q < r && !seen; q++) seen = strcmp(hosts + (size_t)q * PS_HOST, h) == 0;
            if (seen) continue;
            int lo = n, hi = -1, tl = ps->tp, th = -1, pl = ps->pp, ph = -1, dl = ps->dp, dh = -1, count = 0;
            int cl = ps->cp, ch = -1;
            for (int q = 0; q < n; q++) {
                if (strcmp(hosts + (size_t)q * PS_HOST, h) != 0) continue;
                int t = q % ps->tp, c = (q / ps->tp) % ps->cp, d = (q / (ps->tp * ps->cp)) % ps->dp,
                    p = q / (ps->tp * ps->cp * ps->dp);
                cl = c < cl ? c : cl, ch = c > ch ? c : ch;
                lo = q < lo ? q : lo, hi = q > hi ? q : hi, count++;
                tl = t < tl ? t : tl, th = t > th ? t : th;
                dl = d < dl ? d : dl, dh = d > dh ? d : dh;
                pl = p < pl ? p : pl, ph = p > ph ? p : ph;
            }
            char rs[96], ts[32], ds[32], pss[32], cs[40] = "", c1[32];
            span(rs, sizeof rs, lo, hi), span(ts, sizeof ts, tl, th), span(ds, sizeof ds, dl, dh), span(pss, sizeof pss, pl, ph);
            if (ps->cp > 1) { /* context parallelism: its span too */
                span(c1, sizeof c1, cl, ch);
                snprintf(cs, sizeof cs, ", cp %s", c1);
            }
            if (count != hi - lo + 1) { /* not consecutive: the ranks one by one (the first 12) */
                size_t k = 0;
                int listed = 0;
                for (int q = lo; q <= hi && listed < 12 && k < sizeof rs; q++)
                    if (strcmp(hosts + (size_t)q * PS_HOST, h) == 0)
                        k += (size_t)snprintf(rs + k, sizeof rs - k, "%s%d", listed++ ? "," : "", q);
                if (listed < count && k < sizeof rs) snprintf(rs + k, sizeof rs - k, ",...");
            }
            if (used + 4 >= len) break; /* full: the line already ends in "..." */
            int w = snprintf(out + used, len - used, "%s%s: %s %s (tp %s, pp %s, dp %s%s)", used ? "; " : "", h,
                             count == 1 ? "rank" : "ranks", rs, ts, pss, ds, cs);
            if (w > 0) used += (size_t)w;
            if (used >= len) { /* cut short: say so */
                memcpy(out + len - 4, "...", 4);
                used = len;
            }
        }
        /* a tensor-parallel group: consecutive world ranks [g * tp, g * tp + tp) */
        for (int g = 0; g < n / ps->tp && !warn[0]; g++)
            for (int k = 1; k < ps->tp; k++) {
                const char *a = hosts + (size_t)g * ps->tp * PS_HOST, *b = hosts + (size_t)(g * ps->tp + k) * PS_HOST;
                if (strcmp(a, b) == 0) continue;
                snprintf(warn, wlen,
                         "the tensor-parallel group of ranks %d-%d spans hosts %s and %s: every layer's all-reduces "
                         "cross the network. Place ranks so that each host runs a multiple of %d consecutive ranks "
                         "(mpirun: --map-by slot with slots a multiple of %d per host; Slurm: --ntasks-per-node)",
                         g * ps->tp, g * ps->tp + ps->tp - 1, a, b, ps->tp, ps->tp);
                break;
            }
    }
    free(hosts);
}
