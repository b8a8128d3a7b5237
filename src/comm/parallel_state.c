/* The rank grid and its groups: see include/comm/trident/parallel_state.h. */
#include "trident/parallel_state.h"

#include <stdlib.h>

#include "trident/check.h"

int ps_rank_of(const ps_state *ps, int tp_rank, int dp_rank, int pp_rank)
{
    return tp_rank + ps->tp * (dp_rank + ps->dp * pp_rank);
}

ps_state *ps_init(comm *world, int tp, int pp)
{
    ps_state *ps = td_xcalloc(1, sizeof *ps);
    ps->world = world;
    ps->world_rank = comm_rank(world);
    ps->world_size = comm_size(world);
    TD_ASSERT(tp >= 1 && pp >= 1 && ps->world_size % (tp * pp) == 0);
    ps->tp = tp;
    ps->pp = pp;
    ps->dp = ps->world_size / (tp * pp);
    int r = ps->world_rank;
    ps->tp_rank = r % tp;
    ps->dp_rank = (r / tp) % ps->dp;
    ps->pp_rank = r / (tp * ps->dp);

    /* color: the coordinates the group shares; key: the coordinate that varies */
    ps->tp_group = comm_split(world, ps->dp_rank + ps->dp * ps->pp_rank, ps->tp_rank);
    ps->dp_group = comm_split(world, ps->tp_rank + tp * ps->pp_rank, ps->dp_rank);
    ps->pp_group = comm_split(world, ps->tp_rank + tp * ps->dp_rank, ps->pp_rank);
    ps->mp_group = comm_split(world, ps->dp_rank, ps->tp_rank + tp * ps->pp_rank);
    comm_set_name(ps->tp_group, "tensor-parallel");
    comm_set_name(ps->dp_group, "data-parallel");
    comm_set_name(ps->pp_group, "pipeline");
    comm_set_name(ps->mp_group, "model-parallel");
    int in_embd = ps_is_first_stage(ps) || ps_is_last_stage(ps);
    /* non-members each get a color of their own (a group of one, freed at once) */
    comm *e = comm_split(world, in_embd ? ps->tp_rank + tp * ps->dp_rank : tp * ps->dp + r, ps->pp_rank);
    comm_set_name(e, "embedding");
    if (in_embd) ps->embd_group = e;
    else comm_free(e);
    return ps;
}

void ps_free(ps_state *ps)
{
    if (!ps) return;
    comm_free(ps->tp_group);
    comm_free(ps->dp_group);
    comm_free(ps->pp_group);
    comm_free(ps->mp_group);
    comm_free(ps->embd_group);
    free(ps);
}

double ps_comm_seconds(const ps_state *ps)
{
    double s = comm_seconds(ps->world) + comm_seconds(ps->tp_group) + comm_seconds(ps->dp_group) +
               comm_seconds(ps->pp_group) + comm_seconds(ps->mp_group);
    return ps->embd_group ? s + comm_seconds(ps->embd_group) : s;
}
